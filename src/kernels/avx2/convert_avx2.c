/*
 * convert_avx2.c — the conversions of lowp.h (attn_lowp_convert) at AVX2 width, for the
 * forward's 16-bit operands on the fp32 kernels: K and V widened at packing, P rounded to the
 * operand type before P·V. bf16 → fp32 by a 16-bit shift, fp16 ↔ fp32 with F16C
 * (VCVTPH2PS / VCVTPS2PH), bf16 rounding in integer lanes; the narrowing stores (output
 * rows, with their count of finite values that overflow) at 8 lanes. Same bits as the
 * generic conversions (NaN included: a NaN rounds to the generic quiet NaN of its sign);
 * strided rows and row tails use the generic code. Needs AVX2 and F16C (the flags of this
 * folder).
 */
#define ATTN_VEC_WIDTH 8
#include <math.h>

#include "kernels/lowp.h"
#include "kernels/simd/vec.h"

#define LANES VLANES

/* x rounded to the 16-bit format and widened back (vec.h: vf_round_bf16, vf_round_f16). */
static inline __m256 round16(__m256 x, int bf16) {
    return bf16 ? vf_round_bf16(x) : vf_round_f16(x);
}

/* Rounds rows of floats in place to the 16-bit format `type`. */
static void round_rows(attn_dtype type, int rows, int count, float *values, int stride) {
    const int bf16 = type == ATTN_DTYPE_BF16;
    for (int r = 0; r < rows; ++r) {
        float *row = values + (size_t)r * stride;
        int c = 0;
        for (; c + LANES <= count; c += LANES) {
            const __m256 x = _mm256_loadu_ps(row + c);
            _mm256_storeu_ps(row + c, round16(x, bf16));
        }
        if (c < count) {
            const vmask mask = vmask_first(count - c);
            const __m256 x = _mm256_maskload_ps(row + c, mask);
            _mm256_maskstore_ps(row + c, mask, round16(x, bf16));
        }
    }
}

/* 8 half or bf16 elements (contiguous) widened to fp32. */
static inline __m256 widen8(const uint16_t *source, int bf16) {
    const __m128i h = _mm_loadu_si128((const __m128i *)source);
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                : _mm256_cvtph_ps(h);
}

/* Widens rows with unit dim_stride; the tail of each row (< 8 elements) and strided rows go
 * through the generic conversion. */
static inline void widen_rows(int count, int dim, const uint16_t *source, int64_t token_stride,
                              int64_t dim_stride, float *destination,
                              int64_t destination_stride, int bf16) {
    const attn_lowp_convert *generic = &attn_lowp_convert_generic;
    void (*scalar)(int, int, const uint16_t *, int64_t, int64_t, float *, int64_t) =
        bf16 ? generic->bf16_to_f32_rows : generic->f16_to_f32_rows;
    if (dim_stride != 1) {
        scalar(count, dim, source, token_stride, dim_stride, destination, destination_stride);
        return;
    }
    const int whole = dim / LANES * LANES;
    for (int c = 0; c < count; ++c) {
        const uint16_t *row = source + (int64_t)c * token_stride;
        float *out = destination + (int64_t)c * destination_stride;
        for (int d = 0; d < whole; d += LANES) _mm256_storeu_ps(out + d, widen8(row + d, bf16));
    }
    if (whole < dim)
        scalar(count, dim - whole, source + whole, token_stride, 1, destination + whole,
               destination_stride);
}

static void bf16_to_f32_rows(int count, int dim, const uint16_t *source, int64_t token_stride,
                             int64_t dim_stride, float *destination, int64_t destination_stride) {
    widen_rows(count, dim, source, token_stride, dim_stride, destination, destination_stride, 1);
}

static void f16_to_f32_rows(int count, int dim, const uint16_t *source, int64_t token_stride,
                            int64_t dim_stride, float *destination, int64_t destination_stride) {
    widen_rows(count, dim, source, token_stride, dim_stride, destination, destination_stride, 0);
}

/* Narrows count floats to the 16-bit format at destination[e * stride]; returns how many
 * finite ones became ±inf. Unit strides 8 at a time (the rounded value's bits: bf16 its top
 * half, fp16 VCVTPS2PH of it), the rest by the generic narrowing. */
static inline int64_t narrow(int64_t count, const float *source, uint16_t *destination,
                             int64_t stride, int bf16) {
    const attn_lowp_convert *generic = &attn_lowp_convert_generic;
    int64_t e = 0, overflowed = 0;
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    for (; stride == 1 && e + LANES <= count; e += LANES) {
        const __m256 x = _mm256_loadu_ps(source + e);
        const __m256 rounded = round16(x, bf16);
        const __m256 overflow =
            _mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(rounded, magnitude), inf, _CMP_EQ_OQ),
                          _mm256_cmp_ps(_mm256_and_ps(x, magnitude), inf, _CMP_LT_OQ));
        overflowed += __builtin_popcount((unsigned)_mm256_movemask_ps(overflow));
        __m128i halves;
        if (bf16) {
            const __m256i top = _mm256_srli_epi32(_mm256_castps_si256(rounded), 16);
            halves = _mm256_castsi256_si128(
                _mm256_permute4x64_epi64(_mm256_packus_epi32(top, top), 0x08));
        } else { /* (NaN lanes hold the quiet NaN of their sign: sign | 0x7e00) */
            halves = _mm256_cvtps_ph(rounded, _MM_FROUND_TO_NEAREST_INT);
        }
        _mm_storeu_si128((__m128i *)(destination + e), halves);
    }
    if (e < count)
        overflowed += (bf16 ? generic->f32_to_bf16 : generic->f32_to_f16)(
            count - e, source + e, destination + e * stride, stride);
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

const attn_lowp_convert attn_lowp_convert_avx2 = {
    .name = "avx2",
    .bf16_to_f32_rows = bf16_to_f32_rows,
    .f16_to_f32_rows = f16_to_f32_rows,
    .f32_to_bf16 = f32_to_bf16,
    .f32_to_f16 = f32_to_f16,
    .round_rows = round_rows,
};
