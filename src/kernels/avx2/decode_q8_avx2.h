/*
 * decode_q8_avx2.h — the AVX2 decode kernels for 8-bit KV storage (registry.h:
 * dequantize_rows, score_chunk_q8, accumulate_chunk_q8; formats in kernels/quant.h), read in
 * place: the AVX2 counterpart of avx512/decode_q8_avx512.h at 8 lanes and 16 registers. Part
 * of decode_avx2.c's translation unit (included after decode_body.h, whose transpose_reduce
 * and vector helpers it uses). The AVX2 registry requires F16C (registry.c), whose VCVTPH2PS
 * widens the fp8 formats.
 *
 * Widening 16 stored bytes (one 128-bit load) to floats, in registers:
 *   Q8 (dequantize_rows only): vpmovsxbw, then vpmovsxwd + vcvtdq2ps per 8 (exact);
 *   FP8 E5M2: interleaved with zero bytes (vpunpcklbw / vpunpckhbw) each byte becomes the top
 *             byte of a 16-bit word: the IEEE half with the same value; vcvtph2ps per 8;
 *   FP8 E4M3: the same words shifted right by 1 arithmetically (the byte sign-extended and
 *             shifted left 7), bit 14 cleared: the half whose value is the E4M3 value / 256
 *             (subnormals included); the 256 is folded into the per-key scale (a power of
 *             two: the rounding of the generic kernels).
 * All in-lane operations (no lane-crossing widening). A tail of the head dimension (dim not a
 * multiple of 16) is copied into a zeroed 16-byte block, and its query / accumulator floats
 * are read with masked loads, so nothing past a row is read and padding contributes 0.
 *
 * fp8 scores: blocks of 8 dot products (4 rows x 2 keys dimension-major, each loaded key
 * vector serving 4 rows and each query vector 2 keys; 2 x 4 and 1 x 8 key after key), kept
 * as 8-lane partial sums and reduced by decode_body.h's transpose tree; the per-key scale
 * multiplies each dot product once. fp8 values: blocks of up to 4 rows x 16 floats (8
 * accumulators), each stored byte widened once per row block, the weights multiplied by
 * their key's factor once per chunk.
 * int8 (quant.h "Q8 decode arithmetic"): in integers, simd/decode_q8_int_body.h at 8 lanes
 * (VPMADDWD + VPADDD), bit for bit attn_q8_score_exact / attn_q8_accumulate_exact.
 * Requests ahead (software prefetch, 1-byte rows): Q8_LOOKAHEAD rows ahead in the pass that
 * reads the keys from memory, and the `ahead` rows (the chunk's values) as each key is
 * scored (registry.h); the P · V passes request nothing.
 */
#include <string.h>

/* Rows ahead that the pass reading stored 8-bit rows requests (see the header comment). */
#ifndef Q8_LOOKAHEAD
#define Q8_LOOKAHEAD 32
#endif

/* The 16 bytes source[0 .. 16); with elements < 16 only those, the rest 0 (none read). */
V_INLINE __m128i q8_load16(const uint8_t *source, int elements) {
    if (elements >= 16) return _mm_loadu_si128((const __m128i *)source);
    uint8_t padded[16] = {0};
    if (elements > 0) memcpy(padded, source, (size_t)elements);
    return _mm_loadu_si128((const __m128i *)padded);
}

/* The int8 kernels in integers (score_chunk_madd, accumulate_chunk_madd; also q8_block_keys). */
#define Q8I_VNNI 0
#include "kernels/simd/decode_q8_int_body.h"
#undef Q8I_VNNI

/* 16 fp8 bytes as floats: out[0] elements 0-7, out[1] 8-15 (E4M3: value / 256). */
V_INLINE void fp8_widen16(const attn_dtype format, __m128i bytes, __m256 out[2]) {
    const __m128i zero = _mm_setzero_si128();
    __m128i low = _mm_unpacklo_epi8(zero, bytes), high = _mm_unpackhi_epi8(zero, bytes);
    if (format == ATTN_DTYPE_FP8_E4M3) {
        const __m128i clear_bit14 = _mm_set1_epi16((short)0xbfff);
        low = _mm_and_si128(_mm_srai_epi16(low, 1), clear_bit14);
        high = _mm_and_si128(_mm_srai_epi16(high, 1), clear_bit14);
    }
    out[0] = _mm256_cvtph_ps(low);
    out[1] = _mm256_cvtph_ps(high);
}

/* ---- dequantize_rows ---- */
static void dequantize_rows_as(const attn_dtype format, int count, int dim,
                               const uint8_t *source, int64_t stride, const float *row_scales,
                               float factor, float *target, const uint8_t *rows_ahead) {
    for (int c = 0; c < count; ++c) {
        if (rows_ahead != NULL) /* the next chunk's row c (registry.h) */
            prefetch_rows(rows_ahead, c, 1, stride, dim, 0);
        const float scale = row_scales != NULL ? factor * row_scales[c] : factor;
        const __m256 scale_vector = _mm256_set1_ps(scale * q8_format_factor(format));
        float *row = target + (int64_t)c * dim;
        for (int e = 0; e < dim; e += 16) {
            const __m128i bytes = q8_load16(source + c * stride + e, dim - e);
            __m256 x[2];
            if (format == ATTN_DTYPE_Q8) {
                const __m128i words_low = _mm_cvtepi8_epi16(bytes);
                const __m128i words_high = _mm_cvtepi8_epi16(_mm_srli_si128(bytes, 8));
                x[0] = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(words_low));
                x[1] = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(words_high));
            } else fp8_widen16(format, bytes, x);
            for (int h = 0; h < 2; ++h) {
                const __m256 y = _mm256_mul_ps(scale_vector, x[h]);
                if (dim - e - 8 * h >= 8) _mm256_storeu_ps(row + e + 8 * h, y);
                else if (dim - e - 8 * h > 0) vf_mask_storeu(row + e + 8 * h, vmask_first(dim - e - 8 * h), y);
            }
        }
    }
}

#define DEQUANTIZE(format) \
    dequantize_rows_as(format, count, dim, source, stride, row_scales, factor, target, rows_ahead)
static void avx2_dequantize_rows(attn_dtype dtype, int count, int dim, const uint8_t *source,
                                 int64_t stride, const float *row_scales, float factor,
                                 float *target, const uint8_t *rows_ahead) {
    ATTN_QUANT_SPECIALISE(dtype, DEQUANTIZE);
}
#undef DEQUANTIZE

/* ---- fp8 scores ---- */

/* The 16 floats source[0 .. 16) (past `valid`: 0, not read) as two vectors. full (a
 * constant): all 16 valid. */
V_INLINE void q8_load_floats16(const int full, const float *source, int valid, __m256 out[2]) {
    if (full) {
        out[0] = _mm256_loadu_ps(source);
        out[1] = _mm256_loadu_ps(source + 8);
    } else {
        out[0] = vf_maskz_loadu(vmask_first(valid), source);
        out[1] = vf_maskz_loadu(vmask_first(valid - 8), source + 8);
    }
}

/* out[r * block_keys + k] = row[r] . key[k] for fp8 keys (unscaled; E4M3 / 256), 16
 * dimensions at a time, each sum in dimension order 8 lanes wide. key_major: each key read
 * whole before the next; else dimension-major. full (a constant): dim % 16 == 0. */
V_INLINE void score_block_fp8(const attn_dtype format, const int block_rows, const int block_keys,
                              const int key_major, const int full, int dim,
                              const float *const *row, const uint8_t *const *key, float *out) {
    __m256 sums[8];
    for (int a = 0; a < 8; ++a) sums[a] = _mm256_setzero_ps();
    if (key_major && full) { /* dimension-major, each query vector loaded once for the keys */
        for (int d = 0; d < dim; d += 16) {
            __m256 query[2][2]; /* [row][half]: block_rows <= 2 here */
            for (int r = 0; r < block_rows; ++r) q8_load_floats16(1, row[r] + d, 16, query[r]);
            for (int k = 0; k < block_keys; ++k) {
                __m256 key_vectors[2];
                fp8_widen16(format, q8_load16(key[k] + d, 16), key_vectors);
                for (int r = 0; r < block_rows; ++r) {
                    __m256 *sum = &sums[r * block_keys + k];
                    *sum = _mm256_fmadd_ps(query[r][0], key_vectors[0], *sum);
                    *sum = _mm256_fmadd_ps(query[r][1], key_vectors[1], *sum);
                }
            }
        }
    } else if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 16) {
                __m256 key_vectors[2];
                fp8_widen16(format, q8_load16(key[k] + d, full ? 16 : dim - d), key_vectors);
                for (int r = 0; r < block_rows; ++r) {
                    __m256 query[2];
                    q8_load_floats16(full, row[r] + d, dim - d, query);
                    __m256 *sum = &sums[r * block_keys + k];
                    *sum = _mm256_fmadd_ps(query[0], key_vectors[0], *sum);
                    *sum = _mm256_fmadd_ps(query[1], key_vectors[1], *sum);
                }
            }
    } else {
        for (int d = 0; d < dim; d += 16) {
            __m256 key_vectors[2][2]; /* [key][half]: block_keys <= 2 here */
            for (int k = 0; k < block_keys; ++k)
                fp8_widen16(format, q8_load16(key[k] + d, full ? 16 : dim - d), key_vectors[k]);
            for (int r = 0; r < block_rows; ++r) {
                __m256 query[2];
                q8_load_floats16(full, row[r] + d, dim - d, query);
                for (int k = 0; k < block_keys; ++k) {
                    __m256 *sum = &sums[r * block_keys + k];
                    *sum = _mm256_fmadd_ps(query[0], key_vectors[k][0], *sum);
                    *sum = _mm256_fmadd_ps(query[1], key_vectors[k][1], *sum);
                }
            }
        }
    }
    _mm256_storeu_ps(out, transpose_reduce(sums));
}

static void score_chunk_fp8_as(const attn_dtype format, int rows, int count, int dim,
                               const float *queries, const uint8_t *keys, int64_t key_stride,
                               const float *row_scales, float factor, float *scores,
                               const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 8 / block_rows;
    /* each key's factor, (factor * row scale) first, then the power of two, as the generic
     * kernel rounds; 0 past count (a block's lanes there are dropped) */
    float key_factors[ATTN_DECODE_CHUNK + 8] = {0};
    const float format_factor = q8_format_factor(format);
    for (int c = 0; c < count; ++c)
        key_factors[c] = (row_scales != NULL ? factor * row_scales[c] : factor) * format_factor;
    const int full = dim % 16 == 0;
    const __m256 no_row_factors = _mm256_setzero_ps();
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const float *row[4];
            const uint8_t *key[8];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * dim;
            q8_block_keys(keys, c0, block_keys, count, key_stride, key);
            if (r0 == 0) { /* the pass that reads the keys from memory */
                for (int k = 0; k < block_keys; ++k)
                    if (ahead != NULL && c0 + k < count) prefetch_row_ahead(ahead, c0 + k);
                for (int k = 0; k < block_keys; ++k)
                    if (block_rows == 4)
                        prefetch_row_or_next(keys, keys_ahead, c0 + k, Q8_LOOKAHEAD, count,
                                             key_stride, dim, 1);
                    else
                        prefetch_row_or_next(keys, keys_ahead, c0 + k, Q8_LOOKAHEAD, count,
                                             key_stride, dim, 0);
            }
            float out[8];
            if (block_rows == 4 && full) score_block_fp8(format, 4, 2, 0, 1, dim, row, key, out);
            else if (block_rows == 4) score_block_fp8(format, 4, 2, 0, 0, dim, row, key, out);
            else if (block_rows == 2 && full) score_block_fp8(format, 2, 4, 1, 1, dim, row, key, out);
            else if (block_rows == 2) score_block_fp8(format, 2, 4, 1, 0, dim, row, key, out);
            else if (full) score_block_fp8(format, 1, 8, 1, 1, dim, row, key, out);
            else score_block_fp8(format, 1, 8, 1, 0, dim, row, key, out);
            const __m256 sums = _mm256_loadu_ps(out);
            float *target = scores + r0 * ATTN_DECODE_CHUNK + c0;
            if (block_rows == 4)
                store_block_scores(4, 2, 0, rows - r0, count - c0, key_factors + c0, no_row_factors, sums, target);
            else if (block_rows == 2)
                store_block_scores(2, 4, 0, rows - r0, count - c0, key_factors + c0, no_row_factors, sums, target);
            else
                store_block_scores(1, 8, 0, rows - r0, count - c0, key_factors + c0, no_row_factors, sums, target);
        }
}

/* ---- fp8 values ---- */

/* Accumulator rows [block_rows][dim], columns [e0, e0 + 16) (those < width valid):
 * acc = rescale * acc + sum_c weight[r][c] * value_c, the weights already multiplied by
 * their key's factor (fp8_scale_weights). full (a constant): width >= 16. */
V_INLINE void accumulate_block_fp8(const attn_dtype format, const int block_rows, const int full,
                                   int count, int e0, int width, int dim, const float *weights,
                                   const float *rescale, const uint8_t *values,
                                   int64_t value_stride, float *accumulator) {
    __m256 sums[4][2];
    for (int r = 0; r < block_rows; ++r) {
        const __m256 factor = _mm256_set1_ps(rescale[r]);
        q8_load_floats16(full, accumulator + (int64_t)r * dim + e0, width, sums[r]);
        sums[r][0] = _mm256_mul_ps(factor, sums[r][0]);
        sums[r][1] = _mm256_mul_ps(factor, sums[r][1]);
    }
#pragma GCC unroll 2
    for (int c = 0; c < count; ++c) {
        __m256 value_vectors[2];
        fp8_widen16(format, q8_load16(values + c * value_stride + e0, full ? 16 : width),
                    value_vectors);
        for (int r = 0; r < block_rows; ++r) {
            const __m256 weight = _mm256_broadcast_ss(weights + r * ATTN_DECODE_CHUNK + c);
            sums[r][0] = _mm256_fmadd_ps(weight, value_vectors[0], sums[r][0]);
            sums[r][1] = _mm256_fmadd_ps(weight, value_vectors[1], sums[r][1]);
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        if (full) {
            _mm256_storeu_ps(row, sums[r][0]);
            _mm256_storeu_ps(row + 8, sums[r][1]);
        } else {
            vf_mask_storeu(row, vmask_first(width), sums[r][0]);
            vf_mask_storeu(row + 8, vmask_first(width - 8), sums[r][1]);
        }
    }
}

/* Rows [0, block_rows) over all of dim in column blocks of 16 floats. */
V_INLINE void accumulate_rows_fp8(const attn_dtype format, const int block_rows, int count,
                                  int dim, const float *weights, const float *rescale,
                                  const uint8_t *values, int64_t value_stride,
                                  float *accumulator) {
    for (int e0 = 0; e0 < dim; e0 += 16) {
        if (dim - e0 >= 16)
            accumulate_block_fp8(format, block_rows, 1, count, e0, 16, dim, weights, rescale,
                                 values, value_stride, accumulator);
        else
            accumulate_block_fp8(format, block_rows, 0, count, e0, dim - e0, dim, weights,
                                 rescale, values, value_stride, accumulator);
    }
}

/* scaled[r][c] = weights[r][c] * ((factor * row_scales[c]) * format factor), r < rows (<= 4):
 * the per-key scale applied once per weight, rounded as the generic kernel does. */
static void fp8_scale_weights(const attn_dtype format, int rows, int count, const float *weights,
                              const float *row_scales, float factor, float *scaled) {
    const __m256 format_factor = _mm256_set1_ps(q8_format_factor(format));
    for (int c0 = 0; c0 < count; c0 += 8) {
        const vmask lanes = vmask_first(count - c0);
        const __m256 scale =
            row_scales != NULL
                ? _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(factor),
                                              vf_maskz_loadu(lanes, row_scales + c0)),
                                format_factor)
                : _mm256_mul_ps(_mm256_set1_ps(factor), format_factor);
        for (int r = 0; r < rows; ++r)
            vf_mask_storeu(scaled + r * ATTN_DECODE_CHUNK + c0, lanes,
                           _mm256_mul_ps(vf_maskz_loadu(lanes, weights + r * ATTN_DECODE_CHUNK + c0),
                                         scale));
    }
}

static void accumulate_chunk_fp8_as(const attn_dtype format, int rows, int count, int dim,
                                    const float *weights, const float *rescale,
                                    const uint8_t *values, int64_t value_stride,
                                    const float *row_scales, float factor, float *accumulator) {
    float scaled[4 * ATTN_DECODE_CHUNK];
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4;
        fp8_scale_weights(format, block_rows, count, weights + r0 * ATTN_DECODE_CHUNK, row_scales,
                          factor, scaled);
        float *block = accumulator + (int64_t)r0 * dim;
        if (block_rows == 4)
            accumulate_rows_fp8(format, 4, count, dim, scaled, rescale + r0, values, value_stride, block);
        else if (block_rows == 3)
            accumulate_rows_fp8(format, 3, count, dim, scaled, rescale + r0, values, value_stride, block);
        else if (block_rows == 2)
            accumulate_rows_fp8(format, 2, count, dim, scaled, rescale + r0, values, value_stride, block);
        else
            accumulate_rows_fp8(format, 1, count, dim, scaled, rescale + r0, values, value_stride, block);
    }
}

/* ---- the slots ---- */
#define SCORE_FP8(format)                                                                    \
    score_chunk_fp8_as(format, rows, count, dim, (const float *)queries, keys, key_stride,  \
                       row_scales, factor, scores, ahead, keys_ahead)
static void avx2_score_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                const void *queries, const uint8_t *keys, int64_t key_stride,
                                const float *row_scales, float factor, float *scores,
                                const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    if (dtype == ATTN_DTYPE_Q8 && dim > Q8I_MOST_DIM)
        attn_q8_score_exact(rows, count, dim, queries, (const int8_t *)keys, key_stride,
                            row_scales, factor, scores, ATTN_DECODE_CHUNK);
    else if (dtype == ATTN_DTYPE_Q8)
        score_chunk_madd(rows, count, dim, queries, (const int8_t *)keys, key_stride, row_scales,
                         factor, scores, ahead, (const int8_t *)keys_ahead);
    else
        ATTN_FP8_SPECIALISE(dtype, SCORE_FP8);
}
#undef SCORE_FP8

#define ACCUMULATE_FP8(format)                                                                \
    accumulate_chunk_fp8_as(format, rows, count, dim, weights, rescale, values, value_stride, \
                            row_scales, factor, accumulator)
static void avx2_accumulate_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                     const float *weights, const float *rescale,
                                     const uint8_t *values, int64_t value_stride,
                                     const float *row_scales, float factor, float *accumulator,
                                     const uint8_t *values_ahead) {
    if (dtype == ATTN_DTYPE_Q8) /* (values_ahead unused at 8 lanes: decode_q8_int_body.h) */
        accumulate_chunk_madd(rows, count, dim, weights, rescale, (const int8_t *)values,
                              value_stride, row_scales, factor, accumulator,
                              (const int8_t *)values_ahead);
    else
        ATTN_FP8_SPECIALISE(dtype, ACCUMULATE_FP8);
}
#undef ACCUMULATE_FP8
