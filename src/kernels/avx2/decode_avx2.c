/*
 * decode_avx2.c — the decode part of the AVX2 + FMA + F16C registry: the float32 kernels of
 * src/kernels/simd/decode_body.h at 8 lanes; the kernels that read bfloat16 keys and values in
 * place for groups of <= ATTN_DECODE_FUSED_ROWS rows (below; larger groups convert each chunk
 * once into a float32 buffer, as at 16 lanes); and the kernels that read 8-bit storage (int8,
 * fp8) in place, in decode_q8_avx2.h, part of this file.
 */
#define ATTN_VEC_WIDTH 8
#include <string.h>

#include "kernels/simd/decode_body.h"

/* ---- a block's 8 dot products into the scores ---- */

/* scores[r * ATTN_DECODE_CHUNK + k] = key_factor[k] * row_factor(r) * sums[r * block_keys + k]
 * for r < rows_left (<= block_rows), k < keys_left (<= block_keys); lane a of sums is
 * (r, k) = (a / block_keys, a % block_keys). with_rows (a constant): row_factors holds each
 * lane's row factor, multiplied into the key factor first, (key_factor * row_factor) * sum,
 * as attn_q8_score_exact rounds; else the key factor alone; key_factor NULL: the sums as
 * they are (no factor at all). key_factor is readable for block_keys entries. */
V_INLINE void store_block_scores(const int block_rows, const int block_keys, const int with_rows,
                                 int rows_left, int keys_left, const float *key_factor,
                                 __m256 row_factors, __m256 sums, float *scores) {
    __m256 result = sums;
    if (key_factor != NULL) {
        __m256 factors;
        if (block_keys == 2) factors = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)key_factor));
        else if (block_keys == 4) factors = _mm256_broadcast_ps((const __m128 *)key_factor);
        else factors = _mm256_loadu_ps(key_factor);
        if (with_rows) factors = _mm256_mul_ps(factors, row_factors);
        result = _mm256_mul_ps(factors, sums);
    }
    if (rows_left >= block_rows && keys_left >= block_keys) {
        const __m128 low = _mm256_castps256_ps128(result), high = _mm256_extractf128_ps(result, 1);
        if (block_keys == 2) {
            _mm_storel_pi((__m64 *)scores, low);
            _mm_storeh_pi((__m64 *)(scores + ATTN_DECODE_CHUNK), low);
            _mm_storel_pi((__m64 *)(scores + 2 * ATTN_DECODE_CHUNK), high);
            _mm_storeh_pi((__m64 *)(scores + 3 * ATTN_DECODE_CHUNK), high);
        } else if (block_keys == 4) {
            _mm_storeu_ps(scores, low);
            _mm_storeu_ps(scores + ATTN_DECODE_CHUNK, high);
        } else _mm256_storeu_ps(scores, result);
        return;
    }
    float out[8];
    _mm256_storeu_ps(out, result);
    for (int r = 0; r < rows_left && r < block_rows; ++r)
        for (int k = 0; k < keys_left && k < block_keys; ++k)
            scores[r * ATTN_DECODE_CHUNK + k] = out[r * block_keys + k];
}

/* ---- bfloat16 read in place, as pairs (the 16-lane scheme of decode_avx512.c at 8) ----
 * A 256-bit load holds 16 bfloat16 values, the pair (2i, 2i + 1) in 32-bit lane i: shifted
 * left by 16 it is element 2i as a float32, with its low 16 bits cleared element 2i + 1 (two
 * integer operations per 16 values). So the lanes hold the even and the odd dimensions of
 * each 16 apart: the queries are prepared in that order once per task, and a value block
 * splits its accumulator columns into even / odd when it loads them and merges them when it
 * stores them (two shuffles per 16 floats per chunk). Widening is exact; only the order of
 * the dot products' partial sums differs from the float32 path. A head dimension that is not
 * a multiple of 16 ends in a block copied into zeros (nothing past a row is read).
 * Software prefetch: the pass that reads a chunk's keys (values) requests the row
 * BF16_LOOKAHEAD rows ahead of each one it uses (into L2), as at 16 lanes. */
enum { BF16_LOOKAHEAD = 16 };

/* The 16 bfloat16 values source[0 .. 16) (past `elements`: 0, not read) as float32 even
 * (dimensions 0, 2, .., 14) and odd (1, 3, .., 15) vectors. */
V_INLINE void load_bf16_pairs(const uint16_t *source, int elements, __m256 *even, __m256 *odd) {
    __m256i pairs;
    if (elements >= 16) pairs = _mm256_loadu_si256((const __m256i *)source);
    else {
        uint16_t padded[16] = {0};
        if (elements > 0) memcpy(padded, source, (size_t)elements * sizeof(uint16_t));
        pairs = _mm256_loadu_si256((const __m256i *)padded);
    }
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32((int)0xffff0000u)));
}

/* 16 floats source[0 .. 16) (past `valid`: 0, not read) split into even / odd dimensions:
 * shuffle_ps takes dimensions (0, 2, 8, 10 | 4, 6, 12, 14), the 64-bit permute orders them. */
V_INLINE void load_split(const float *source, int valid, __m256 *even, __m256 *odd) {
    const __m256 low = valid >= 8 ? _mm256_loadu_ps(source) : vf_maskz_loadu(vmask_first(valid), source);
    const __m256 high = valid >= 16 ? _mm256_loadu_ps(source + 8)
                                    : vf_maskz_loadu(vmask_first(valid - 8), source + 8);
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(low, high, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(low, high, 0xDD)), 0xD8));
}

/* The inverse of load_split: target[0 .. valid) = the interleaved even / odd dimensions
 * (unpack gives dimensions (0-3 | 8-11) and (4-7 | 12-15), the 128-bit permute orders them). */
V_INLINE void store_merged(float *target, int valid, __m256 even, __m256 odd) {
    const __m256 first = _mm256_unpacklo_ps(even, odd), second = _mm256_unpackhi_ps(even, odd);
    const __m256 low = _mm256_permute2f128_ps(first, second, 0x20);
    const __m256 high = _mm256_permute2f128_ps(first, second, 0x31);
    if (valid >= 8) _mm256_storeu_ps(target, low);
    else vf_mask_storeu(target, vmask_first(valid), low);
    if (valid >= 16) _mm256_storeu_ps(target + 8, high);
    else if (valid > 8) vf_mask_storeu(target + 8, vmask_first(valid - 8), high);
}

/* prepared[r][16 s .. 16 s + 8) = even dimensions of queries[r][16 s .. 16 s + 16),
 * prepared[r][16 s + 8 .. 16 s + 16) = the odd ones; zero past dim (prepared rows of
 * ATTN_DECODE_PREPARED_DIM(dim) floats). */
static void avx2_prepare_bf16_queries(int rows, int dim, const float *queries, float *prepared) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    for (int r = 0; r < rows; ++r)
        for (int d = 0; d < prepared_dim; d += 16) {
            __m256 even = _mm256_setzero_ps(), odd = even;
            if (d < dim) load_split(queries + (int64_t)r * dim + d, dim - d, &even, &odd);
            _mm256_storeu_ps(prepared + (int64_t)r * prepared_dim + d, even);
            _mm256_storeu_ps(prepared + (int64_t)r * prepared_dim + d + 8, odd);
        }
}

/* As score_block for bfloat16 keys read as pairs (row[r]: prepared query rows), 16
 * dimensions at a time; key_major: each key read whole before the next, else
 * dimension-major (block_keys <= 2 then). full (a constant): dim % 16 == 0. */
V_INLINE void score_block_bf16(const int block_rows, const int block_keys, const int key_major,
                               const int full, int dim, const float *const *row,
                               const uint16_t *const *key, float *out) {
    __m256 sums[8];
    for (int a = 0; a < 8; ++a) sums[a] = _mm256_setzero_ps();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 16) {
                __m256 even, odd;
                load_bf16_pairs(key[k] + d, full ? 16 : dim - d, &even, &odd);
                for (int r = 0; r < block_rows; ++r) {
                    __m256 *sum = &sums[r * block_keys + k];
                    *sum = _mm256_fmadd_ps(_mm256_loadu_ps(row[r] + d), even, *sum);
                    *sum = _mm256_fmadd_ps(_mm256_loadu_ps(row[r] + d + 8), odd, *sum);
                }
            }
    } else {
        for (int d = 0; d < dim; d += 16) {
            __m256 even[2], odd[2];
            for (int k = 0; k < block_keys; ++k)
                load_bf16_pairs(key[k] + d, full ? 16 : dim - d, &even[k], &odd[k]);
            for (int r = 0; r < block_rows; ++r) {
                const __m256 query_even = _mm256_loadu_ps(row[r] + d);
                const __m256 query_odd = _mm256_loadu_ps(row[r] + d + 8);
                for (int k = 0; k < block_keys; ++k) {
                    __m256 *sum = &sums[r * block_keys + k];
                    *sum = _mm256_fmadd_ps(query_even, even[k], *sum);
                    *sum = _mm256_fmadd_ps(query_odd, odd[k], *sum);
                }
            }
        }
    }
    _mm256_storeu_ps(out, transpose_reduce(sums));
}

/* score_chunk for bfloat16 keys; `queries` as prepared by avx2_prepare_bf16_queries. Blocks
 * of 8 dot products: 4 rows x 2 keys dimension-major, 2 x 4 and 1 x 8 key after key. */
static void avx2_score_chunk_bf16(int rows, int count, int dim, const float *queries,
                                  const uint16_t *keys, int64_t key_stride, float *scores,
                                  const uint16_t *keys_ahead) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 8 / block_rows;
    const int full = dim % 16 == 0;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const float *row[4];
            const uint16_t *key[8];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * prepared_dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0 && rows >= PREFETCH_ROWS) /* the pass that reads the keys */
                for (int k = 0; k < block_keys; ++k)
                    prefetch_row_or_next(keys, keys_ahead, c0 + k, BF16_LOOKAHEAD, count,
                                         key_stride * 2, dim * 2, 0);
            float out[8];
            if (block_rows == 4 && full) score_block_bf16(4, 2, 0, 1, dim, row, key, out);
            else if (block_rows == 4) score_block_bf16(4, 2, 0, 0, dim, row, key, out);
            else if (block_rows == 2 && full) score_block_bf16(2, 4, 1, 1, dim, row, key, out);
            else if (block_rows == 2) score_block_bf16(2, 4, 1, 0, dim, row, key, out);
            else if (full) score_block_bf16(1, 8, 1, 1, dim, row, key, out);
            else score_block_bf16(1, 8, 1, 0, dim, row, key, out);
            float *target = scores + r0 * ATTN_DECODE_CHUNK + c0;
            const __m256 sums = _mm256_loadu_ps(out), no_factors = _mm256_setzero_ps();
            if (block_rows == 4)
                store_block_scores(4, 2, 0, rows - r0, count - c0, NULL, no_factors, sums, target);
            else if (block_rows == 2)
                store_block_scores(2, 4, 0, rows - r0, count - c0, NULL, no_factors, sums, target);
            else
                store_block_scores(1, 8, 0, rows - r0, count - c0, NULL, no_factors, sums, target);
        }
}

/* As accumulate_block for bfloat16 values read as pairs: rows [0, block_rows) (<= 4),
 * columns [e0, e0 + 16) (those < width valid), held as even / odd dimensions. */
V_INLINE void accumulate_block_bf16(const int block_rows, const int full, int count, int e0,
                                    int width, int dim, const float *weights,
                                    const float *rescale, const uint16_t *values,
                                    int64_t value_stride, float *accumulator, const int prefetch,
                                    const uint16_t *values_ahead) {
    __m256 even[4], odd[4];
    for (int r = 0; r < block_rows; ++r) {
        const __m256 factor = _mm256_set1_ps(rescale[r]);
        load_split(accumulator + (int64_t)r * dim + e0, full ? 16 : width, &even[r], &odd[r]);
        even[r] = _mm256_mul_ps(factor, even[r]);
        odd[r] = _mm256_mul_ps(factor, odd[r]);
    }
    for (int c = 0; c < count; ++c) {
        if (prefetch)
            prefetch_row_or_next(values, values_ahead, c, BF16_LOOKAHEAD, count,
                                 value_stride * 2, dim * 2, 0);
        __m256 value_even, value_odd;
        load_bf16_pairs(values + c * value_stride + e0, full ? 16 : width, &value_even, &value_odd);
        for (int r = 0; r < block_rows; ++r) {
            const __m256 weight = _mm256_broadcast_ss(weights + r * ATTN_DECODE_CHUNK + c);
            even[r] = _mm256_fmadd_ps(weight, value_even, even[r]);
            odd[r] = _mm256_fmadd_ps(weight, value_odd, odd[r]);
        }
    }
    for (int r = 0; r < block_rows; ++r)
        store_merged(accumulator + (int64_t)r * dim + e0, full ? 16 : width, even[r], odd[r]);
}

/* Rows [0, block_rows) over all of dim in column blocks of 16 floats; with `prefetch` the
 * first block requests the rows ahead. (Whole blocks and the request are constants inside
 * each block, for every row count: a 1-row chunk with the tail path took 8,306 instructions
 * per 64 keys x 128, callgrind.) */
V_INLINE void accumulate_rows_bf16(const int block_rows, int count, int dim, const float *weights,
                                   const float *rescale, const uint16_t *values,
                                   int64_t value_stride, float *accumulator, int prefetch,
                                   const uint16_t *values_ahead) {
    for (int e0 = 0; e0 < dim; e0 += 16) {
        const int first = prefetch && e0 == 0;
        if (dim - e0 >= 16 && first)
            accumulate_block_bf16(block_rows, 1, count, e0, 16, dim, weights, rescale, values,
                                  value_stride, accumulator, 1, values_ahead);
        else if (dim - e0 >= 16)
            accumulate_block_bf16(block_rows, 1, count, e0, 16, dim, weights, rescale, values,
                                  value_stride, accumulator, 0, values_ahead);
        else
            accumulate_block_bf16(block_rows, 0, count, e0, dim - e0, dim, weights, rescale,
                                  values, value_stride, accumulator, first, values_ahead);
    }
}

/* accumulate_chunk for bfloat16 values: blocks of up to 4 rows x 16 floats (8 accumulator
 * registers), the first block of the chunk requesting the rows ahead. */
static void avx2_accumulate_chunk_bf16(int rows, int count, int dim, const float *weights,
                                       const float *rescale, const uint16_t *values,
                                       int64_t value_stride, float *accumulator,
                                       const uint16_t *values_ahead) {
    const int prefetch = rows >= PREFETCH_ROWS;
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4, first = prefetch && r0 == 0;
        const float *block_weights = weights + r0 * ATTN_DECODE_CHUNK;
        float *block = accumulator + (int64_t)r0 * dim;
        if (block_rows == 4)
            accumulate_rows_bf16(4, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
        else if (block_rows == 3)
            accumulate_rows_bf16(3, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
        else if (block_rows == 2)
            accumulate_rows_bf16(2, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
        else
            accumulate_rows_bf16(1, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
    }
}

/* ---- 8-bit storage (Q8, FP8), read in place ---- */
#include "kernels/quant.h"
#include "kernels/avx2/decode_q8_avx2.h"

const attn_decode_kernels attn_avx2_decode = {
    DECODE_BODY_SLOTS,
    /* score_chunk_f16, score_chunk_bf16_widened (16-bit rows widened as they are loaded):
     * none at 8 lanes, whose blocks run slower in place than converting each chunk once
     * (simd/decode_body.h "Stored rows") */
    .score_chunk_bf16 = avx2_score_chunk_bf16,
    .accumulate_chunk_bf16 = avx2_accumulate_chunk_bf16,
    .prepare_bf16_queries = avx2_prepare_bf16_queries,
    .dequantize_rows = avx2_dequantize_rows,
    .score_chunk_q8 = avx2_score_chunk_q8,
    .accumulate_chunk_q8 = avx2_accumulate_chunk_q8,
};
