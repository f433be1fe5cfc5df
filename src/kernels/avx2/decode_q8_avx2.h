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
 * int8 (quant.h "Q8 decode arithmetic"): in integers, simd/decode_q8_int_body.h at 8 lanes
 * (VPMADDWD + VPADDD), bit for bit attn_q8_score_exact / attn_q8_accumulate_exact.
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

/* The int8 kernels in integers (score_chunk_madd, accumulate_chunk_madd). */
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

/* ---- fp8 scores and values (written once for both widths) ---- */
#include "kernels/simd/decode_fp8_body.h"

/* ---- the slots ---- */
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
        score_chunk_fp8(dtype, rows, count, dim, (const float *)queries, keys, key_stride,
                        row_scales, factor, scores, ahead, keys_ahead);
}

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
        accumulate_chunk_fp8(dtype, rows, count, dim, weights, rescale, values, value_stride,
                             row_scales, factor, accumulator, values_ahead);
}
