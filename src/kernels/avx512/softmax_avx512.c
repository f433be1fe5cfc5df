/*
 * softmax_avx512.c — one fused online-softmax step over a score tile with AVX-512 (contract:
 * registry.h, softmax_step). Two passes per row, both in L1: (1) the row maximum of the scaled
 * logits, (2) p = exp(x·scale − m) written in place and summed. Scale is folded into the
 * exponent's FMA (max(x·s) = max(x)·s exactly for s > 0). Masked entries (−inf) give exactly
 * 0; a row whose maximum is still −inf uses m = 0, so nothing becomes NaN. Soft-capping
 * uses a vector tanh (polynomial near 0, the vector exp elsewhere).
 */
#include <immintrin.h>
#include <math.h>

#include "exp_avx512.h"
#include "kernels_avx512.h"

/* tanh of 16 floats: for |y| < 0.5 the odd Taylor polynomial to y^15 (truncation < 1e-8
 * relative there), else 1 - 2 / (exp(2|y|) + 1) with the sign of y (|2y| capped at 80, where
 * tanh is 1 in float). About 2 ulp; checked against tanh in double by test_kernels_tiles. */
static inline __m512 tanh_avx512(__m512 y) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 magnitude = _mm512_abs_ps(y);
    const __m512 e = attn_exp_avx512(
        _mm512_min_ps(_mm512_add_ps(magnitude, magnitude), _mm512_set1_ps(80.0f)));
    const __m512 large =
        _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    const __m512 square = _mm512_mul_ps(magnitude, magnitude);
    __m512 p = _mm512_set1_ps(-929569.0f / 638512875.0f);
    p = _mm512_fmadd_ps(p, square, _mm512_set1_ps(21844.0f / 6081075.0f));
    p = _mm512_fmadd_ps(p, square, _mm512_set1_ps(-1382.0f / 155925.0f));
    p = _mm512_fmadd_ps(p, square, _mm512_set1_ps(62.0f / 2835.0f));
    p = _mm512_fmadd_ps(p, square, _mm512_set1_ps(-17.0f / 315.0f));
    p = _mm512_fmadd_ps(p, square, _mm512_set1_ps(2.0f / 15.0f));
    p = _mm512_fmadd_ps(p, square, _mm512_set1_ps(-1.0f / 3.0f));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, square), magnitude, magnitude);
    const __mmask16 is_small = _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(0.5f), _CMP_LT_OQ);
    const __m512 result = _mm512_mask_blend_ps(is_small, large, small);
    return _mm512_or_ps(result, _mm512_and_ps(y, _mm512_set1_ps(-0.0f))); /* sign of y */
}

/* Soft-capping in place: x = softcap * tanh(x * scale / softcap), −inf stays −inf. */
static void apply_softcap(float *row, int count, float scale, float softcap) {
    const __m512 scale_vector = _mm512_set1_ps(scale), cap = _mm512_set1_ps(softcap);
    const __m512 minus_infinity = _mm512_set1_ps(-INFINITY);
    for (int c = 0; c < count; c += 16) {
        const __mmask16 lanes =
            count - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (count - c)) - 1u);
        const __m512 x = _mm512_maskz_loadu_ps(lanes, row + c);
        const __m512 capped = _mm512_mul_ps(
            cap, tanh_avx512(_mm512_div_ps(_mm512_mul_ps(x, scale_vector), cap)));
        const __mmask16 masked = _mm512_cmp_ps_mask(x, minus_infinity, _CMP_EQ_OQ);
        _mm512_mask_storeu_ps(row + c, lanes, _mm512_mask_blend_ps(masked, capped, minus_infinity));
    }
}

static inline __mmask16 tail_mask(int remaining) {
    return (__mmask16)((1u << remaining) - 1u);
}

/* scores [rows][scores_stride]; row_max, row_sum, rescale: float[rows]. */
void attn_avx512_softmax_step(int rows, int count, float *scores, int scores_stride,
                              float scale, float softcap, float *row_max, float *row_sum,
                              float *rescale) {
    const __m512 minus_infinity = _mm512_set1_ps(-INFINITY);
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        float row_scale = scale;
        if (softcap > 0.0f) {
            apply_softcap(row, count, scale, softcap);
            row_scale = 1.0f;
        }
        /* Pass 1: maximum of the raw scores (scale > 0 keeps the order). */
        __m512 maximum = minus_infinity;
        int c = 0;
        for (; c + 16 <= count; c += 16) maximum = _mm512_max_ps(maximum, _mm512_loadu_ps(row + c));
        if (c < count)
            maximum = _mm512_max_ps(
                maximum, _mm512_mask_loadu_ps(minus_infinity, tail_mask(count - c), row + c));
        const float tile_max = _mm512_reduce_max_ps(maximum) * row_scale;
        const float new_max = tile_max > row_max[r] ? tile_max : row_max[r];
        const float max_used = new_max == -INFINITY ? 0.0f : new_max;
        rescale[r] = row_max[r] == -INFINITY ? 0.0f : expf(row_max[r] - max_used);

        /* Pass 2: p = exp(x * scale - m), in place, and their sum. */
        const __m512 scale_vector = _mm512_set1_ps(row_scale);
        const __m512 max_vector = _mm512_set1_ps(max_used);
        __m512 sum = _mm512_setzero_ps();
        for (c = 0; c + 16 <= count; c += 16) {
            const __m512 x = _mm512_fmsub_ps(_mm512_loadu_ps(row + c), scale_vector, max_vector);
            const __m512 p = attn_exp_avx512(x);
            _mm512_storeu_ps(row + c, p);
            sum = _mm512_add_ps(sum, p);
        }
        if (c < count) {
            const __mmask16 mask = tail_mask(count - c);
            const __m512 x = _mm512_fmsub_ps(_mm512_mask_loadu_ps(minus_infinity, mask, row + c),
                                             scale_vector, max_vector);
            const __m512 p = _mm512_maskz_mov_ps(mask, attn_exp_avx512(x));
            _mm512_mask_storeu_ps(row + c, mask, p);
            sum = _mm512_add_ps(sum, p);
        }
        row_sum[r] = rescale[r] * row_sum[r] + _mm512_reduce_add_ps(sum);
        row_max[r] = new_max;
    }
}
