/*
 * exp_avx2.h — vectorised exp for 8 floats (AVX2 + FMA), shared by the AVX2 kernels, and the
 * lane masks for tails.
 *
 * Same method as exp_avx512.h (n = round(x·log2 e), two-step FMA reduction, degree-5
 * polynomial), but 2^n is built in the exponent bits, so inputs are clamped to [−87, 88.37]
 * (n within the normal range) and results for x < −87 are set to exactly 0 (expf would give
 * at most 1.6e-38 there; such terms never change a softmax whose sum is ≥ 1). −inf gives 0.
 * Measured against glibc expf on [−87, 88] (tests/test_kernels_tiles.c): max relative error
 * 8.1e-8 (1.4 ulp at 2^-24).
 */
#ifndef ATTN_EXP_AVX2_H
#define ATTN_EXP_AVX2_H

#include <immintrin.h>

static inline __m256 attn_exp_avx2(__m256 x) {
    const __m256 lowest = _mm256_set1_ps(-87.0f);
    const __m256 underflow = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lowest);
    x = _mm256_min_ps(x, _mm256_set1_ps(88.37f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    const __m256i exponent =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(exponent));
    return _mm256_andnot_ps(underflow, y);
}

/* Integer lane mask selecting the first `lanes` (0..8) of 8, for maskload / maskstore. */
static inline __m256i attn_avx2_lane_mask(int lanes) {
    const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), index);
}

#endif /* ATTN_EXP_AVX2_H */
