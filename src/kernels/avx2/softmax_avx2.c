/*
 * softmax_avx2.c — one fused online-softmax step over a score tile with AVX2 + FMA (contract:
 * registry.h, softmax_step). Two passes per row, both in L1: (1) the row maximum of the raw
 * scores, (2) p = exp(x·scale − m) written in place and summed. Scale is folded into the
 * exponent's FMA (max(x·s) = max(x)·s exactly for s > 0). Masked entries (−inf) give exactly
 * 0; a row whose maximum is still −inf uses m = 0, so nothing becomes NaN. Soft-capping
 * uses a vector tanh (polynomial near 0, the vector exp elsewhere).
 */
#include <immintrin.h>
#include <math.h>

#include "exp_avx2.h"
#include "kernels_avx2.h"

/* tanh of 8 floats: for |y| < 0.5 the odd Taylor polynomial to y^15 (truncation < 1e-8
 * relative there), else 1 - 2 / (exp(2|y|) + 1) with the sign of y (|2y| capped at 80, where
 * tanh is 1 in float). About 2 ulp; checked against tanh in double by test_kernels_tiles. */
static inline __m256 tanh_avx2(__m256 y) {
    const __m256 one = _mm256_set1_ps(1.0f), sign_bit = _mm256_set1_ps(-0.0f);
    const __m256 magnitude = _mm256_andnot_ps(sign_bit, y);
    const __m256 e = attn_exp_avx2(
        _mm256_min_ps(_mm256_add_ps(magnitude, magnitude), _mm256_set1_ps(80.0f)));
    const __m256 large =
        _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    const __m256 square = _mm256_mul_ps(magnitude, magnitude);
    __m256 p = _mm256_set1_ps(-929569.0f / 638512875.0f);
    p = _mm256_fmadd_ps(p, square, _mm256_set1_ps(21844.0f / 6081075.0f));
    p = _mm256_fmadd_ps(p, square, _mm256_set1_ps(-1382.0f / 155925.0f));
    p = _mm256_fmadd_ps(p, square, _mm256_set1_ps(62.0f / 2835.0f));
    p = _mm256_fmadd_ps(p, square, _mm256_set1_ps(-17.0f / 315.0f));
    p = _mm256_fmadd_ps(p, square, _mm256_set1_ps(2.0f / 15.0f));
    p = _mm256_fmadd_ps(p, square, _mm256_set1_ps(-1.0f / 3.0f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, square), magnitude, magnitude);
    const __m256 is_small = _mm256_cmp_ps(magnitude, _mm256_set1_ps(0.5f), _CMP_LT_OQ);
    const __m256 result = _mm256_blendv_ps(large, small, is_small);
    return _mm256_or_ps(result, _mm256_and_ps(y, sign_bit)); /* sign of y */
}

/* Soft-capping in place: x = softcap * tanh(x * scale / softcap), −inf stays −inf. Full
 * vectors of 8, then the tail scalar. */
static void apply_softcap(float *row, int count, float scale, float softcap) {
    const __m256 scale_vector = _mm256_set1_ps(scale), cap = _mm256_set1_ps(softcap);
    const __m256 minus_infinity = _mm256_set1_ps(-INFINITY);
    int c = 0;
    for (; c + 8 <= count; c += 8) {
        const __m256 x = _mm256_loadu_ps(row + c);
        const __m256 capped = _mm256_mul_ps(
            cap, tanh_avx2(_mm256_div_ps(_mm256_mul_ps(x, scale_vector), cap)));
        const __m256 masked = _mm256_cmp_ps(x, minus_infinity, _CMP_EQ_OQ);
        _mm256_storeu_ps(row + c, _mm256_blendv_ps(capped, minus_infinity, masked));
    }
    for (; c < count; ++c)
        if (row[c] != -INFINITY) row[c] = softcap * tanhf(row[c] * scale / softcap);
}

static inline float horizontal_max(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float horizontal_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The first `lanes` of row[0..8) and −inf elsewhere. */
static inline __m256 load_tail(const float *row, int lanes) {
    const __m256i mask = attn_avx2_lane_mask(lanes);
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(row, mask),
                            _mm256_castsi256_ps(mask));
}

/* scores [rows][scores_stride]; row_max, row_sum, rescale: float[rows]. */
void attn_avx2_softmax_step(int rows, int count, float *scores, int scores_stride, float scale,
                            float softcap, float *row_max, float *row_sum, float *rescale) {
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        float row_scale = scale;
        if (softcap > 0.0f) {
            apply_softcap(row, count, scale, softcap);
            row_scale = 1.0f;
        }
        /* Pass 1: maximum of the raw scores (scale > 0 keeps the order). */
        __m256 maximum = _mm256_set1_ps(-INFINITY);
        int c = 0;
        for (; c + 8 <= count; c += 8) maximum = _mm256_max_ps(maximum, _mm256_loadu_ps(row + c));
        if (c < count) maximum = _mm256_max_ps(maximum, load_tail(row + c, count - c));
        const float tile_max = horizontal_max(maximum) * row_scale;
        const float new_max = tile_max > row_max[r] ? tile_max : row_max[r];
        const float max_used = new_max == -INFINITY ? 0.0f : new_max;
        rescale[r] = row_max[r] == -INFINITY ? 0.0f : expf(row_max[r] - max_used);

        /* Pass 2: p = exp(x * scale - m), in place, and their sum. */
        const __m256 scale_vector = _mm256_set1_ps(row_scale);
        const __m256 max_vector = _mm256_set1_ps(max_used);
        __m256 sum = _mm256_setzero_ps();
        for (c = 0; c + 8 <= count; c += 8) {
            const __m256 x = _mm256_fmsub_ps(_mm256_loadu_ps(row + c), scale_vector, max_vector);
            const __m256 p = attn_exp_avx2(x);
            _mm256_storeu_ps(row + c, p);
            sum = _mm256_add_ps(sum, p);
        }
        if (c < count) {
            const __m256 x = _mm256_fmsub_ps(load_tail(row + c, count - c), scale_vector,
                                             max_vector);
            const __m256 p = attn_exp_avx2(x); /* tail lanes are −inf: exactly 0 */
            _mm256_maskstore_ps(row + c, attn_avx2_lane_mask(count - c), p);
            sum = _mm256_add_ps(sum, p);
        }
        row_sum[r] = rescale[r] * row_sum[r] + horizontal_sum(sum);
        row_max[r] = new_max;
    }
}
