/*
 * decode_avx512.c — the decode part of the AVX-512 registry: the float32 kernels of
 * src/kernels/simd/decode_body.h at 16 lanes, and the kernels that read bfloat16 keys and
 * values in place with 512-bit masked 16-bit loads (AVX-512BW) and vpermt2ps (the AVX2
 * registry has its own, written for 256 bits and 16 registers, in avx2/decode_avx2.c).
 * Used for groups of <= ATTN_DECODE_FUSED_ROWS rows, where each stored element is read once
 * or twice (see "bfloat16 read in place" below: one integer operation per 16 widened floats);
 * larger groups convert each chunk once into a float32 buffer (widen_rows) read by every row
 * block, through the large-group kernels from 12 rows on (decode_body.h).
 * The 8-bit storage kernels (int8, fp8) are in decode_q8_avx512.h, part of this file.
 */
#define ATTN_VEC_WIDTH 16
#include "kernels/simd/decode_body.h"

/* ---- bfloat16 read in place, as pairs ----
 * A 512-bit load holds 32 bfloat16 values, the pair (2i, 2i + 1) in 32-bit lane i. Shifting
 * a lane left by 16 gives element 2i as a float32, clearing its low 16 bits gives element
 * 2i + 1: two plain integer operations per 32 values, no shuffle (vpmovzxwd + shift costs two
 * operations per 16). The lanes then hold the even and the odd dimensions apart: the queries
 * are prepared in that order once per task (prepare_bf16_queries), and the accumulator is
 * split into even / odd dimensions when a value block loads it and merged back when it
 * stores it (one permute per 16 floats per chunk). Widening is exact; only the order of the
 * dot products' partial sums differs from the float32 path. */

/* Mask of the first `elements` of 32 16-bit elements (elements may exceed 32 or be <= 0). */
static inline __mmask32 element_mask(int elements) {
    if (elements >= 32) return (__mmask32)0xffffffffu;
    return elements <= 0 ? (__mmask32)0 : (__mmask32)((1u << elements) - 1u);
}

/* The 32 bfloat16 values source[0 .. 32) (those past `elements` read as 0) as float32:
 * *even = dimensions 0, 2, .., 30, *odd = 1, 3, .., 31. */
V_INLINE void load_bf16_pairs(const uint16_t *source, __mmask32 elements, __m512 *even,
                              __m512 *odd) {
    const __m512i pairs = _mm512_maskz_loadu_epi16(elements, source);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32((int)0xffff0000u)));
}

/* 32 floats source[0 .. 32) (those past `valid` read as 0) split into even / odd dimensions. */
V_INLINE void load_split(const float *source, int valid, __m512 *even, __m512 *odd) {
    const __m512i even_index =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_index =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 low = _mm512_maskz_loadu_ps(vmask_first(valid), source);
    const __m512 high = _mm512_maskz_loadu_ps(vmask_first(valid - 16), source + 16);
    *even = _mm512_permutex2var_ps(low, even_index, high);
    *odd = _mm512_permutex2var_ps(low, odd_index, high);
}

/* The inverse of load_split: target[0 .. valid) = the interleaved even / odd dimensions. */
V_INLINE void store_merged(float *target, int valid, __m512 even, __m512 odd) {
    const __m512i low_index =
        _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high_index =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    _mm512_mask_storeu_ps(target, vmask_first(valid), _mm512_permutex2var_ps(even, low_index, odd));
    _mm512_mask_storeu_ps(target + 16, vmask_first(valid - 16),
                          _mm512_permutex2var_ps(even, high_index, odd));
}

/* prepared[r][32 s .. 32 s + 16) = even dimensions of queries[r][32 s .. 32 s + 32),
 * prepared[r][32 s + 16 .. 32 s + 32) = the odd ones; zero past dim. */
static void avx512_prepare_bf16_queries(int rows, int dim, const float *queries,
                                        float *prepared) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    for (int r = 0; r < rows; ++r)
        for (int d = 0; d < dim; d += 32) {
            __m512 even, odd;
            load_split(queries + (int64_t)r * dim + d, dim - d, &even, &odd);
            _mm512_storeu_ps(prepared + (int64_t)r * prepared_dim + d, even);
            _mm512_storeu_ps(prepared + (int64_t)r * prepared_dim + d + 16, odd);
        }
}

/* As score_block for bfloat16 keys read as pairs; row[r] are prepared query rows. */
V_INLINE void score_block_bf16(const int block_rows, const int block_keys,
                               const int key_major, int dim, const float *const *row,
                               const uint16_t *const *key, float *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 32) {
                __m512 even, odd;
                load_bf16_pairs(key[k] + d, element_mask(dim - d), &even, &odd);
                for (int r = 0; r < block_rows; ++r) {
                    __m512 *sum = &sums[r * block_keys + k];
                    *sum = _mm512_fmadd_ps(_mm512_loadu_ps(row[r] + d), even, *sum);
                    *sum = _mm512_fmadd_ps(_mm512_loadu_ps(row[r] + d + 16), odd, *sum);
                }
            }
    } else {
        for (int d = 0; d < dim; d += 32) {
            const __mmask32 elements = element_mask(dim - d);
            __m512 query_even[4], query_odd[4];
            for (int r = 0; r < block_rows; ++r) {
                query_even[r] = _mm512_loadu_ps(row[r] + d);
                query_odd[r] = _mm512_loadu_ps(row[r] + d + 16);
            }
            for (int k = 0; k < block_keys; ++k) {
                __m512 even, odd;
                load_bf16_pairs(key[k] + d, elements, &even, &odd);
                for (int r = 0; r < block_rows; ++r) {
                    __m512 *sum = &sums[r * block_keys + k];
                    *sum = _mm512_fmadd_ps(query_even[r], even, *sum);
                    *sum = _mm512_fmadd_ps(query_odd[r], odd, *sum);
                }
            }
        }
    }
    _mm512_storeu_ps(out, transpose_reduce(sums));
}

/* score_chunk for bfloat16 keys; `queries` as prepared by avx512_prepare_bf16_queries. */
static void avx512_score_chunk_bf16(int rows, int count, int dim, const float *queries,
                                    const uint16_t *keys, int64_t key_stride, float *scores,
                                    const uint16_t *keys_ahead) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    const int key_major = rows < DIMENSION_MAJOR_ROWS;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const float *row[4];
            const uint16_t *key[16];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * prepared_dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0 && rows >= PREFETCH_ROWS) {
                /* (the block's rows ahead from its first one's: one test per block) */
                const char *ahead_row = row_ahead(keys, keys_ahead, c0, LOOKAHEAD, count,
                                                  key_stride * 2);
                for (int k = 0; ahead_row != NULL && k < block_keys; ++k)
                    prefetch_rows(ahead_row, k, 1, key_stride * 2, dim * 2, 0);
            }
            float out[16];
            if (block_rows == 4 && key_major) score_block_bf16(4, 4, 1, dim, row, key, out);
            else if (block_rows == 4) score_block_bf16(4, 4, 0, dim, row, key, out);
            else if (block_rows == 2) score_block_bf16(2, 8, 1, dim, row, key, out);
            else score_block_bf16(1, 16, 1, dim, row, key, out);
            for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                for (int k = 0; k < block_keys && c0 + k < count; ++k)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c0 + k] = out[r * block_keys + k];
        }
}

/* As accumulate_block for bfloat16 values read as pairs: columns [e0, e0 + width) with
 * width <= 32 * segments, each segment of 32 floats held as even / odd dimensions. */
V_INLINE void accumulate_block_bf16(const int block_rows, const int segments, int count,
                                    int e0, int width, int dim, const float *weights,
                                    const float *rescale, const uint16_t *values,
                                    int64_t value_stride, float *accumulator,
                                    int prefetch, const uint16_t *values_ahead) {
    __mmask32 elements[4];
    for (int x = 0; x < segments; ++x) elements[x] = element_mask(width - 32 * x);
    __m512 even[4][4], odd[4][4];
    for (int r = 0; r < block_rows; ++r) {
        const __m512 factor = _mm512_set1_ps(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < segments; ++x) {
            load_split(row + 32 * x, width - 32 * x, &even[r][x], &odd[r][x]);
            even[r][x] = _mm512_mul_ps(factor, even[r][x]);
            odd[r][x] = _mm512_mul_ps(factor, odd[r][x]);
        }
    }
    for (int c = 0; c < count; ++c) {
        __m512 weight[4];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = _mm512_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
        const uint16_t *value = values + c * value_stride + e0;
        if (prefetch)
            prefetch_row_or_next(values, values_ahead, c, LOOKAHEAD, count, value_stride * 2,
                                 dim * 2, 0);
        for (int x = 0; x < segments; ++x) {
            __m512 value_even, value_odd;
            load_bf16_pairs(value + 32 * x, elements[x], &value_even, &value_odd);
            for (int r = 0; r < block_rows; ++r) {
                even[r][x] = _mm512_fmadd_ps(weight[r], value_even, even[r][x]);
                odd[r][x] = _mm512_fmadd_ps(weight[r], value_odd, odd[r][x]);
            }
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < segments; ++x)
            store_merged(row + 32 * x, width - 32 * x, even[r][x], odd[r][x]);
    }
}

/* Rows [0, block_rows) of accumulate_chunk_bf16 over all of dim. */
V_INLINE void accumulate_rows_bf16(const int block_rows, const int segments, int count,
                                   int dim, const float *weights, const float *rescale,
                                   const uint16_t *values, int64_t value_stride,
                                   float *accumulator, int prefetch,
                                   const uint16_t *values_ahead) {
    for (int e0 = 0; e0 < dim; e0 += 32 * segments) {
        const int width = dim - e0 < 32 * segments ? dim - e0 : 32 * segments;
        accumulate_block_bf16(block_rows, segments, count, e0, width, dim, weights, rescale,
                              values, value_stride, accumulator, prefetch && e0 == 0,
                              values_ahead);
    }
}

/* accumulate_chunk for bfloat16 values: blocks of 4 rows x 64 floats, the remaining 3 rows
 * x 64, 2 or 1 rows x 128 floats (at most 16 accumulator registers). */
static void avx512_accumulate_chunk_bf16(int rows, int count, int dim, const float *weights,
                                         const float *rescale, const uint16_t *values,
                                         int64_t value_stride, float *accumulator,
                                         const uint16_t *values_ahead) {
    const int prefetch = rows >= PREFETCH_ROWS; /* by the first block, which reads memory */
    int r = 0;
    for (; r + 4 <= rows; r += 4)
        accumulate_rows_bf16(4, 2, count, dim, weights + r * ATTN_DECODE_CHUNK, rescale + r,
                             values, value_stride, accumulator + (int64_t)r * dim,
                             prefetch && r == 0, values_ahead);
    const float *tail_weights = weights + r * ATTN_DECODE_CHUNK;
    float *tail = accumulator + (int64_t)r * dim;
    const int tail_prefetch = prefetch && r == 0;
    if (rows - r == 3)
        accumulate_rows_bf16(3, 2, count, dim, tail_weights, rescale + r, values, value_stride,
                             tail, tail_prefetch, values_ahead);
    else if (rows - r == 2)
        accumulate_rows_bf16(2, 4, count, dim, tail_weights, rescale + r, values, value_stride,
                             tail, tail_prefetch, values_ahead);
    else if (rows - r == 1)
        accumulate_rows_bf16(1, 4, count, dim, tail_weights, rescale + r, values, value_stride,
                             tail, tail_prefetch, values_ahead);
}

/* ---- 8-bit storage (Q8, FP8), read in place ---- */
#include "kernels/cpu_features.h"
#include "kernels/quant.h"
#include "kernels/fp8_bf16_table.h"
#include "kernels/avx512/decode_q8_avx512.h"

const attn_decode_kernels attn_avx512_decode = {
    DECODE_BODY_SLOTS,
    .score_chunk_f16 = score_chunk_f16,
    .accumulate_chunk_f16 = accumulate_chunk_f16,
    .score_chunk_bf16_widened = score_chunk_bf16_widened,
    .accumulate_chunk_bf16_widened = accumulate_chunk_bf16_widened,
    .token_major_in_place_rows = ATTN_DECODE_GROUP_ROWS - 1,
    .score_chunk_bf16 = avx512_score_chunk_bf16,
    .accumulate_chunk_bf16 = avx512_accumulate_chunk_bf16,
    .prepare_bf16_queries = avx512_prepare_bf16_queries,
    .dequantize_rows = avx512_dequantize_rows,
    .widen_fp8_bf16 = avx512_widen_fp8_bf16,
    .score_chunk_q8 = avx512_score_chunk_q8,
    .accumulate_chunk_q8 = avx512_accumulate_chunk_q8,
    .accumulate_q8_requests_ahead = 1,
};

/* The 8-bit slots without VNNI, VBMI and GFNI (the AVX-512BW integer kernels, fp8 widened 32
 * codes at a time in natural order): int8 and E5M2 give the same bits, E4M3 scores sum their
 * products in other lanes (decode_fp8_lanes_avx512.h); tests/test_kernels_decode.c runs them
 * on CPUs that have the extensions, so that every 8-bit kernel is tested wherever AVX-512 is. */
const attn_decode_kernels attn_avx512_q8_baseline = {
    .score_chunk_q8 = avx512_score_chunk_q8_baseline,
    .accumulate_chunk_q8 = avx512_accumulate_chunk_q8_baseline,
    .accumulate_q8_requests_ahead = 1,
};
