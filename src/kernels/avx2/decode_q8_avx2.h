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
 * fp8 scores and values: simd/decode_fp8_body.h at 8 lanes, over fp8_widen16.
 * int8 (quant.h "Q8 decode arithmetic"): queries (rounded once per task by
 * attn_q8_prepare_queries) and weights as int16, products with the
 * stored int8 elements summed exactly in int32 lanes by VPMADDWD + VPADDD, so the results
 * equal attn_q8_score_exact / attn_q8_accumulate_exact bit for bit, as on every registry.
 * Scores: the pair (2d, 2d + 1) is one 32-bit lane on both sides, blocks as fp8's, reduced
 * in integers. Values: the words of keys c and c + 1 interleaved (vpunpcklwd / vpunpckhwd)
 * against the broadcast weight pair (w[c], w[c + 1]); the unpack orders each 16 dimensions
 * as (0-3, 8-11) and (4-7, 12-15), undone once per chunk when the int32 sums are added to
 * the float accumulator. An odd last key pairs with itself at weight 0.
 * Requests ahead (software prefetch, 1-byte rows): Q8_LOOKAHEAD rows ahead in the pass that
 * reads the keys from memory, and the `ahead` rows (the chunk's values) as each key is
 * scored (registry.h); the int8 P · V requests nothing.
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

/* ---- fp8 scores and values (written once for both widths) ---- */
#include "kernels/simd/decode_fp8_body.h"

/* ---- int8 in integers (quant.h "Q8 decode arithmetic") ---- */

/* Widest head dimension whose int32 score lanes hold the sums without overflow (|q16| <=
 * 16383, |k| <= 128: 2^21 per product); wider heads take attn_q8_score_exact. */
#define Q8I_MOST_DIM 1024

/* 16 stored int8 elements (past `elements`: 0) as 16 int16 words. */
V_INLINE __m256i q8_words16(const int8_t *source, int elements) {
    return _mm256_cvtepi8_epi16(q8_load16((const uint8_t *)source, elements));
}

/* transpose_reduce on int32 lanes: lane a = the sum of the lanes of v[a] (exact). */
V_INLINE __m256i transpose_reduce_i32(const __m256i v[8]) {
    const __m256i low = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i high = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20),
                            _mm256_permute2x128_si256(low, high, 0x31));
}

/* target[e] = round(x[e] * multiplier) as int16 for e < count, 0 up to padded (a multiple of
 * 8); round to nearest even (the MXCSR default), as attn_q8_operand. */
static void round_to_i16(int count, int padded, const float *x, float multiplier,
                         int16_t *target) {
    const __m256 factor = _mm256_set1_ps(multiplier);
    for (int e = 0; e < padded; e += 8) {
        const vmask lanes = vmask_first(count - e);
        const __m256i q = _mm256_and_si256(
            lanes, _mm256_cvtps_epi32(_mm256_mul_ps(vf_maskz_loadu(lanes, x + e), factor)));
        /* |q| <= 32767: the saturating pack is exact */
        const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storeu_si128((__m128i *)(target + e), words);
    }
}

/* Largest |x[e]|, e < count (exact, any order). */
static float largest_magnitude(int count, const float *x) {
    __m256 largest = _mm256_setzero_ps();
    for (int e = 0; e < count; e += 8)
        largest = _mm256_max_ps(largest, vf_abs(vf_maskz_loadu(vmask_first(count - e), x + e)));
    return vf_reduce_max(largest);
}

/* sums[r * block_keys + k] += q16[r][d .. d + 16) . key_k[d .. d + 16) in int32 lanes
 * (exact); past `valid` elements the key reads 0. Dimension-major: each key is widened once
 * per step; up to 4 keys the widened keys stay in registers while each row meets them
 * (GCC folds the query load into every VPMADDWD, which runs faster than holding it in a
 * register), 8 keys (one row) go key after key. */
V_INLINE void score_step_q8i(const int block_rows, const int block_keys, int d, int valid,
                             const int16_t *const *row, const int8_t *const *key, __m256i *sums) {
    if (block_keys <= 4) {
        __m256i key_words[4];
        for (int k = 0; k < block_keys; ++k) key_words[k] = q8_words16(key[k] + d, valid);
        for (int r = 0; r < block_rows; ++r) {
            const __m256i query = _mm256_loadu_si256((const __m256i *)(row[r] + d));
            for (int k = 0; k < block_keys; ++k)
                sums[r * block_keys + k] = _mm256_add_epi32(sums[r * block_keys + k],
                                                            _mm256_madd_epi16(query, key_words[k]));
        }
    } else {
        const __m256i query = _mm256_loadu_si256((const __m256i *)(row[0] + d));
        for (int k = 0; k < block_keys; ++k)
            sums[k] = _mm256_add_epi32(sums[k], _mm256_madd_epi16(query, q8_words16(key[k] + d, valid)));
    }
}

/* Lane r * block_keys + k = sum_d q16[r][d] * key_k[d] (int32, exact); the query rows are
 * attn_q8_prepare_queries' (aligned, 0 past dim). full (a constant): dim % 16 == 0; else
 * the tail of each key is copied into zeros. */
V_INLINE __m256i score_block_q8i(const int block_rows, const int block_keys, const int full,
                                 int dim, const int16_t *const *row, const int8_t *const *key) {
    __m256i sums[8];
    for (int a = 0; a < 8; ++a) sums[a] = _mm256_setzero_si256();
    for (int d = 0; d < dim; d += 16)
        score_step_q8i(block_rows, block_keys, d, full ? 16 : dim - d, row, key, sums);
    return transpose_reduce_i32(sums);
}

/* The 4-row blocks of a chunk with dim % 16 == 0 (a GQA group of 4, or 4 rows of a larger
 * one): scores[r * ATTN_DECODE_CHUNK + c] for the key pairs c < count & ~1 (the odd last key
 * is the caller's), one pair at a time with its pointers stepped, its look-ahead requests
 * (`prefetch`: the pass that reads the keys from memory; values_ahead: the chunk's values)
 * and its 8 scores stored whole: the general block loop spent about 100 instructions per
 * block on pointers, tests and spills. */
static void score_pairs4_q8i(int count, int dim, const int16_t *const *row, __m256 row_factors,
                             const int8_t *keys, int64_t key_stride, const float *key_factors,
                             const int prefetch, const attn_rows_ahead *values_ahead,
                             const int8_t *keys_ahead, float *scores) {
    const int8_t *first = keys;
    for (int c0 = 0; c0 + 2 <= count; c0 += 2, first += 2 * key_stride) {
        const int8_t *key[2] = {first, first + key_stride};
        if (prefetch) { /* (inline, not prefetch_rows: fewer of the kernel's instructions) */
            /* the pair's rows ahead from its first one's (NULL: none) */
            const char *ahead = row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
            for (int offset = 0; ahead != NULL && offset < dim; offset += 64) {
                _mm_prefetch(ahead + offset, _MM_HINT_T1);
                _mm_prefetch(ahead + key_stride + offset, _MM_HINT_T1);
            }
        }
        if (values_ahead != NULL) {
            prefetch_row_ahead(values_ahead, c0);
            prefetch_row_ahead(values_ahead, c0 + 1);
        }
        const __m256 sums = _mm256_cvtepi32_ps(score_block_q8i(4, 2, 1, dim, row, key));
        store_block_scores(4, 2, 1, 4, 2, key_factors + c0, row_factors, sums, scores + c0);
    }
}

static void score_chunk_q8i(int rows, int count, int dim, const void *prepared,
                            const int8_t *keys, int64_t key_stride, const float *row_scales,
                            float factor, float *scores, const attn_rows_ahead *ahead,
                            const int8_t *keys_ahead) {
    const float *query_scales = attn_q8_query_scales(prepared);
    /* factor * row scale of each key; 0 past count (a block's lanes there are dropped) */
    float key_factors[ATTN_DECODE_CHUNK + 8] = {0};
    for (int c = 0; c < count; ++c)
        key_factors[c] = row_scales != NULL ? factor * row_scales[c] : factor;
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 8 / block_rows;
    const int full = dim % 16 == 0; /* score_block_q8i */
    for (int r0 = 0; r0 < rows; r0 += block_rows) {
        const int16_t *row[4];
        float query_scale[4];
        for (int r = 0; r < block_rows; ++r) {
            const int source = r0 + r < rows ? r0 + r : rows - 1;
            row[r] = attn_q8_query_row(prepared, rows, dim, source);
            query_scale[r] = query_scales[source];
        }
        float lane_scales[8]; /* lane a: the query scale of its row, a / block_keys */
        for (int a = 0; a < 8; ++a) lane_scales[a] = query_scale[a / block_keys];
        const __m256 row_factors = _mm256_loadu_ps(lane_scales);
        int c0 = 0;
        if (block_rows == 4 && full && r0 + 4 <= rows) {
            score_pairs4_q8i(count, dim, row, row_factors, keys, key_stride, key_factors, r0 == 0,
                             r0 == 0 ? ahead : NULL, keys_ahead, scores + r0 * ATTN_DECODE_CHUNK);
            c0 = count & ~1;
        }
        for (; c0 < count; c0 += block_keys) {
            const int8_t *key[8];
            q8_block_keys(keys, c0, block_keys, count, key_stride, (const uint8_t **)key);
            /* the pass that reads the keys from memory requests the rows Q8_LOOKAHEAD on */
            if (r0 == 0) {
                for (int k = 0; k < block_keys; ++k) {
                    prefetch_row_or_next(keys, keys_ahead, c0 + k, Q8_LOOKAHEAD, count, key_stride,
                                         dim, 0);
                    if (ahead != NULL && c0 + k < count) prefetch_row_ahead(ahead, c0 + k);
                }
            }
            float *target = scores + r0 * ATTN_DECODE_CHUNK + c0;
            if (block_rows == 4) {
                const __m256i sums = full ? score_block_q8i(4, 2, 1, dim, row, key)
                                          : score_block_q8i(4, 2, 0, dim, row, key);
                store_block_scores(4, 2, 1, rows - r0, count - c0, key_factors + c0, row_factors,
                                   _mm256_cvtepi32_ps(sums), target);
            } else if (block_rows == 2) {
                const __m256i sums = full ? score_block_q8i(2, 4, 1, dim, row, key)
                                          : score_block_q8i(2, 4, 0, dim, row, key);
                store_block_scores(2, 4, 1, rows - r0, count - c0, key_factors + c0, row_factors,
                                   _mm256_cvtepi32_ps(sums), target);
            } else {
                const __m256i sums = full ? score_block_q8i(1, 8, 1, dim, row, key)
                                          : score_block_q8i(1, 8, 0, dim, row, key);
                store_block_scores(1, 8, 1, rows - r0, count - c0, key_factors + c0, row_factors,
                                   _mm256_cvtepi32_ps(sums), target);
            }
        }
    }
}

/* int16 weights of a row: a chunk padded to an even count. */
#define Q8I_WEIGHT_STRIDE ATTN_DECODE_CHUNK

/* Rows r < rows (<= 4) of a chunk's weights times their key factors, as int16 with one scale
 * per row (quant.h): w16 [4][Q8I_WEIGHT_STRIDE], 0 past count. */
static void pack_weights_i16(int rows, int count, const float *weights, const float *row_scales,
                             float factor, int16_t *w16, float *scale) {
    float scaled[ATTN_DECODE_CHUNK] __attribute__((aligned(32)));
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < count; c += 8) {
            const vmask lanes = vmask_first(count - c);
            const __m256 key_factor =
                row_scales != NULL
                    ? _mm256_mul_ps(_mm256_set1_ps(factor), vf_maskz_loadu(lanes, row_scales + c))
                    : _mm256_set1_ps(factor);
            vf_mask_storeu(scaled + c, lanes,
                           _mm256_mul_ps(vf_maskz_loadu(lanes, weights + r * ATTN_DECODE_CHUNK + c),
                                         key_factor));
        }
        const float largest = largest_magnitude(count, scaled);
        scale[r] = largest / ATTN_Q8_WEIGHT_LEVELS;
        round_to_i16(count, Q8I_WEIGHT_STRIDE, scaled,
                     attn_q8_multiplier(largest, ATTN_Q8_WEIGHT_LEVELS),
                     w16 + r * Q8I_WEIGHT_STRIDE);
    }
}

/* row[0 .. valid) (valid <= 16) = fma(weight_scale, float(sums in natural order),
 * factor * row), where low / high hold dimensions (0-3, 8-11) / (4-7, 12-15) (the unpack
 * order). */
V_INLINE void add_unpacked_sums(float *row, int valid, __m256i low, __m256i high,
                                __m256 weight_scale, __m256 factor) {
    const __m256 low_f = _mm256_cvtepi32_ps(low), high_f = _mm256_cvtepi32_ps(high);
    const __m256 halves[2] = {_mm256_permute2f128_ps(low_f, high_f, 0x20),
                              _mm256_permute2f128_ps(low_f, high_f, 0x31)};
    for (int x = 0; x < 2; ++x) {
        if (valid - 8 * x >= 8) {
            const __m256 old = _mm256_loadu_ps(row + 8 * x);
            _mm256_storeu_ps(row + 8 * x,
                             _mm256_fmadd_ps(weight_scale, halves[x], _mm256_mul_ps(factor, old)));
        } else if (valid - 8 * x > 0) {
            const vmask lanes = vmask_first(valid - 8 * x);
            const __m256 old = vf_maskz_loadu(lanes, row + 8 * x);
            vf_mask_storeu(row + 8 * x, lanes,
                           _mm256_fmadd_ps(weight_scale, halves[x], _mm256_mul_ps(factor, old)));
        }
    }
}

/* low[r] / high[r] += the products of the key pair (first, second) (16 elements each, those
 * past `elements` 0) with row r's weight pair w[r * Q8I_WEIGHT_STRIDE + 0, 1]. */
V_INLINE void accumulate_pair_q8i(const int block_rows, int elements, const int8_t *first,
                                  const int8_t *second, const int16_t *w, __m256i *low,
                                  __m256i *high) {
    const __m256i a = q8_words16(first, elements);
    const __m256i b = q8_words16(second, elements);
    const __m256i pairs_low = _mm256_unpacklo_epi16(a, b);
    const __m256i pairs_high = _mm256_unpackhi_epi16(a, b);
    for (int r = 0; r < block_rows; ++r) {
        const __m256i weight = _mm256_broadcastd_epi32(_mm_loadu_si32(w + r * Q8I_WEIGHT_STRIDE));
        low[r] = _mm256_add_epi32(low[r], _mm256_madd_epi16(pairs_low, weight));
        high[r] = _mm256_add_epi32(high[r], _mm256_madd_epi16(pairs_high, weight));
    }
}

/* Accumulator rows [block_rows][dim], columns [e0, e0 + 16) (those < width valid): the
 * int32 sums over the chunk's key pairs, added to the accumulator at the end. The pair loop
 * steps one pointer per operand (no per-pair test: 8 of its 32 instructions were loop
 * control); an odd last key pairs with itself at weight 0 (w16 is 0 past count). */
V_INLINE void accumulate_block_q8i(const int block_rows, const int full, int count, int e0,
                                   int width, int dim, const int16_t *w16, const float *scale,
                                   const float *rescale, const int8_t *values,
                                   int64_t value_stride, float *accumulator) {
    __m256i low[4], high[4];
    for (int r = 0; r < block_rows; ++r) low[r] = high[r] = _mm256_setzero_si256();
    const int elements = full ? 16 : width;
    const int8_t *first = values + e0;
    const int16_t *w = w16;
#pragma GCC unroll 2
    for (const int16_t *end = w16 + (count & ~1); w < end; w += 2, first += 2 * value_stride)
        accumulate_pair_q8i(block_rows, elements, first, first + value_stride, w, low, high);
    if (count & 1) accumulate_pair_q8i(block_rows, elements, first, first, w, low, high);
    for (int r = 0; r < block_rows; ++r)
        add_unpacked_sums(accumulator + (int64_t)r * dim + e0, width, low[r], high[r],
                          _mm256_set1_ps(scale[r]), _mm256_set1_ps(rescale[r]));
}

/* Rows [0, block_rows) over all of dim in column blocks of 16. */
V_INLINE void accumulate_rows_q8i(const int block_rows, int count, int dim, const int16_t *w16,
                                  const float *scale, const float *rescale,
                                  const int8_t *values, int64_t value_stride,
                                  float *accumulator) {
    for (int e0 = 0; e0 < dim; e0 += 16) {
        if (dim - e0 >= 16)
            accumulate_block_q8i(block_rows, 1, count, e0, 16, dim, w16, scale, rescale, values,
                                 value_stride, accumulator);
        else
            accumulate_block_q8i(block_rows, 0, count, e0, dim - e0, dim, w16, scale, rescale,
                                 values, value_stride, accumulator);
    }
}

/* pack_weights_i16 for a whole chunk (count = ATTN_DECODE_CHUNK): the same operands (each
 * weight times its key's factor, the row's largest magnitude, round to nearest even), with
 * the key factors formed once for the rows, each row's products kept in registers from the
 * multiply to the rounding, and no masks (the masked per-row passes cost about 130
 * instructions a row). */
static void pack_chunk_weights_i16(int rows, const float *weights, const float *row_scales,
                                   float factor, int16_t *w16, float *scale) {
    enum { VECTORS = ATTN_DECODE_CHUNK / 8 };
    __m256 key_factor[VECTORS];
    for (int v = 0; v < VECTORS; ++v)
        key_factor[v] = row_scales != NULL
                            ? _mm256_mul_ps(_mm256_set1_ps(factor), _mm256_loadu_ps(row_scales + 8 * v))
                            : _mm256_set1_ps(factor);
    for (int r = 0; r < rows; ++r) {
        __m256 scaled[VECTORS], largest = _mm256_setzero_ps();
        for (int v = 0; v < VECTORS; ++v) {
            scaled[v] = _mm256_mul_ps(_mm256_loadu_ps(weights + r * ATTN_DECODE_CHUNK + 8 * v),
                                      key_factor[v]);
            largest = _mm256_max_ps(largest, vf_abs(scaled[v]));
        }
        const float row_largest = vf_reduce_max(largest);
        scale[r] = row_largest / ATTN_Q8_WEIGHT_LEVELS;
        const __m256 multiplier =
            _mm256_set1_ps(attn_q8_multiplier(row_largest, ATTN_Q8_WEIGHT_LEVELS));
        for (int v = 0; v < VECTORS; v += 2) {
            const __m256i low = _mm256_cvtps_epi32(_mm256_mul_ps(scaled[v], multiplier));
            const __m256i high = _mm256_cvtps_epi32(_mm256_mul_ps(scaled[v + 1], multiplier));
            /* |q| <= 32767: the saturating pack is exact; it packs within 128-bit lanes */
            const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), 0xd8);
            _mm256_storeu_si256((__m256i *)(w16 + r * Q8I_WEIGHT_STRIDE + 8 * v), words);
        }
    }
}

static void accumulate_chunk_q8i(int rows, int count, int dim, const float *weights,
                                 const float *rescale, const int8_t *values, int64_t value_stride,
                                 const float *row_scales, float factor, float *accumulator) {
    /* (no requests here: the score kernel asked for the chunk's values as it scored, the
     * `ahead` rows; requesting the next rows too only adds instructions) */
    int16_t w16[4 * Q8I_WEIGHT_STRIDE] __attribute__((aligned(32)));
    float scale[4];
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4;
        if (count == ATTN_DECODE_CHUNK)
            pack_chunk_weights_i16(block_rows, weights + r0 * ATTN_DECODE_CHUNK, row_scales,
                                   factor, w16, scale);
        else
            pack_weights_i16(block_rows, count, weights + r0 * ATTN_DECODE_CHUNK, row_scales,
                             factor, w16, scale);
        float *block = accumulator + (int64_t)r0 * dim;
        if (block_rows == 4)
            accumulate_rows_q8i(4, count, dim, w16, scale, rescale + r0, values, value_stride, block);
        else if (block_rows == 3)
            accumulate_rows_q8i(3, count, dim, w16, scale, rescale + r0, values, value_stride, block);
        else if (block_rows == 2)
            accumulate_rows_q8i(2, count, dim, w16, scale, rescale + r0, values, value_stride, block);
        else
            accumulate_rows_q8i(1, count, dim, w16, scale, rescale + r0, values, value_stride, block);
    }
}

/* ---- the slots ---- */
static void avx2_score_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                const void *queries, const uint8_t *keys, int64_t key_stride,
                                const float *row_scales, float factor, float *scores,
                                const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    if (dtype == ATTN_DTYPE_Q8 && dim > Q8I_MOST_DIM)
        attn_q8_score_exact(rows, count, dim, queries, (const int8_t *)keys, key_stride,
                            row_scales, factor, scores, ATTN_DECODE_CHUNK);
    else if (dtype == ATTN_DTYPE_Q8)
        score_chunk_q8i(rows, count, dim, queries, (const int8_t *)keys, key_stride, row_scales,
                        factor, scores, ahead, (const int8_t *)keys_ahead);
    else
        score_chunk_fp8(dtype, rows, count, dim, (const float *)queries, keys, key_stride,
                        row_scales, factor, scores, ahead, keys_ahead);
}

static void avx2_accumulate_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                     const float *weights, const float *rescale,
                                     const uint8_t *values, int64_t value_stride,
                                     const float *row_scales, float factor, float *accumulator,
                                     const uint8_t *values_ahead) {
    if (dtype == ATTN_DTYPE_Q8) /* (the score kernel requested the values) */
        accumulate_chunk_q8i(rows, count, dim, weights, rescale, (const int8_t *)values,
                             value_stride, row_scales, factor, accumulator);
    else
        accumulate_chunk_fp8(dtype, rows, count, dim, weights, rescale, values, value_stride,
                             row_scales, factor, accumulator, values_ahead);
}
