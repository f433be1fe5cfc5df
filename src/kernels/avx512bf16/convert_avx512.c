/*
 * convert_avx512.c — the conversions of lowp.h (attn_lowp_convert) at AVX-512 width: bf16 →
 * fp32 by a 16-bit shift, fp16 ↔ fp32 with VCVTPH2PS / VCVTPS2PH (F16C at 512 bits), fp32 →
 * bf16 with VCVTNEPS2BF16. Same results as the generic conversions, bit for bit (the tests
 * compare both with independent roundings). Needs AVX512F/BW/VL/DQ, F16C and AVX512-BF16 (the
 * flags of this folder).
 */
#include <immintrin.h>

#include "kernels/lowp.h"

#define LANES 16

static inline __mmask16 tail_mask(int64_t left) {
    return left >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* Gathers up to 16 strided 16-bit elements into a 256-bit vector (scalar loads). */
static inline __m256i load_strided16(const uint16_t *source, int64_t stride, int n) {
    uint16_t lanes[LANES] = {0};
    for (int l = 0; l < n; ++l) lanes[l] = source[(int64_t)l * stride];
    return _mm256_loadu_si256((const __m256i *)lanes);
}

static inline __m512 bf16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The two 16-bit formats of this file: each conversion below is written once over `bf16`
 * (1: bfloat16, 0: IEEE half), a constant at every call so that it folds away. */
static inline __m512 widen16(__m256i h, int bf16) {
    return bf16 ? bf16_to_f32(h) : _mm512_cvtph_ps(h);
}

static inline __m256i narrow16(__m512 x, int bf16) {
    return bf16 ? (__m256i)_mm512_cvtneps_pbh(x)
                : _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline void widen_rows(int count, int dim, const uint16_t *source, int64_t token_stride,
                              int64_t dim_stride, float *destination,
                              int64_t destination_stride, int bf16) {
    for (int c = 0; c < count; ++c) {
        const uint16_t *row = source + (int64_t)c * token_stride;
        float *out = destination + (int64_t)c * destination_stride;
        for (int d = 0; d < dim; d += LANES) {
            const __mmask16 mask = tail_mask(dim - d);
            const __m256i h = dim_stride == 1 ? _mm256_maskz_loadu_epi16(mask, row + d)
                                              : load_strided16(row + (int64_t)d * dim_stride, dim_stride,
                                                               dim - d < LANES ? dim - d : LANES);
            _mm512_mask_storeu_ps(out + d, mask, widen16(h, bf16));
        }
    }
}

static void bf16_to_f32_rows(int count, int dim, const uint16_t *source, int64_t token_stride,
                             int64_t dim_stride, float *destination, int64_t destination_stride) {
    widen_rows(count, dim, source, token_stride, dim_stride, destination, destination_stride, 1);
}

static void f16_to_f32_rows(int count, int dim, const uint16_t *source, int64_t token_stride,
                            int64_t dim_stride, float *destination, int64_t destination_stride) {
    widen_rows(count, dim, source, token_stride, dim_stride, destination, destination_stride, 0);
}

/* Stores 16-bit lanes `h` (mask) to destination[e*stride]. */
static inline void store16(uint16_t *destination, int64_t stride, __m256i h, __mmask16 mask,
                           int n) {
    if (stride == 1) {
        _mm256_mask_storeu_epi16(destination, mask, h);
        return;
    }
    uint16_t lanes[LANES];
    _mm256_storeu_si256((__m256i *)lanes, h);
    for (int l = 0; l < n; ++l) destination[(int64_t)l * stride] = lanes[l];
}

/* Lanes of x that are finite and whose 16-bit result h is ±inf (exponent pattern `inf`). */
static inline int overflow_count(__m512 x, __m256i h, uint16_t inf, __mmask16 mask) {
    const __mmask16 finite =
        _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(3.40282347e38f), _CMP_LE_OQ);
    const __mmask16 infinite = _mm256_cmpeq_epi16_mask(
        _mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16((short)inf));
    return __builtin_popcount((unsigned)(finite & infinite & mask));
}

/* Narrows count floats to destination[e*stride]; returns how many finite ones became ±inf. */
static inline int64_t narrow(int64_t count, const float *source, uint16_t *destination,
                             int64_t stride, int bf16) {
    const uint16_t inf = bf16 ? 0x7f80 : 0x7c00;
    int64_t overflowed = 0;
    for (int64_t e = 0; e < count; e += LANES) {
        const __mmask16 mask = tail_mask(count - e);
        const __m512 x = _mm512_maskz_loadu_ps(mask, source + e);
        const __m256i h = narrow16(x, bf16);
        overflowed += overflow_count(x, h, inf, mask);
        store16(destination + e * stride, stride, h, mask, count - e < LANES ? (int)(count - e) : LANES);
    }
    return overflowed;
}

static int64_t f32_to_bf16(int64_t count, const float *source, uint16_t *destination,
                           int64_t stride) {
    return narrow(count, source, destination, stride, 1);
}

static int64_t f32_to_f16(int64_t count, const float *source, uint16_t *destination,
                          int64_t stride) {
    return narrow(count, source, destination, stride, 0);
}

/* Rounds rows of floats in place to the 16-bit format `type` (narrow, then widen). */
static void round_rows(attn_dtype type, int rows, int count, float *values, int stride) {
    const int bf16 = type == ATTN_DTYPE_BF16;
    for (int r = 0; r < rows; ++r) {
        float *row = values + (size_t)r * stride;
        for (int c = 0; c < count; c += LANES) {
            const __mmask16 mask = tail_mask(count - c);
            const __m512 x = _mm512_maskz_loadu_ps(mask, row + c);
            _mm512_mask_storeu_ps(row + c, mask, widen16(narrow16(x, bf16), bf16));
        }
    }
}

const attn_lowp_convert attn_lowp_convert_avx512 = {
    .name = "avx512",
    .bf16_to_f32_rows = bf16_to_f32_rows,
    .f16_to_f32_rows = f16_to_f32_rows,
    .f32_to_bf16 = f32_to_bf16,
    .f32_to_f16 = f32_to_f16,
    .round_rows = round_rows,
};
