/*
 * softmax_avx2.c — one fused online-softmax step over a score tile with AVX2 + FMA (contract:
 * kernel.h, softmax_step). Two passes per row, both in L1: (1) the row maximum of the raw
 * scores, (2) p = exp(x·scale − m) written in place and summed. Scale is folded into the
 * exponent's FMA (max(x·s) = max(x)·s exactly for s > 0). Masked entries (−inf) give exactly
 * 0; a row whose maximum is still −inf uses m = 0, so nothing becomes NaN.
 */
#include <immintrin.h>
#include <math.h>

#include "exp_avx2.h"
#include "kernels_avx2.h"

/* Soft-capping in place, scalar: x = softcap * tanh(x * scale / softcap), −inf stays −inf. */
static void apply_softcap(float *row, int count, float scale, float softcap) {
    for (int c = 0; c < count; ++c)
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
