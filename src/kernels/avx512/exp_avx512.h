/*
 * exp_avx512.h — vectorised exp for 16 floats (AVX-512F), shared by the AVX-512 kernels.
 *
 * Method (Cephes expf style): n = round(x·log2 e), r = x − n·ln 2 in two FMA steps (ln 2 split
 * into a high part exact in float and a low correction), e^r ≈ 1 + r + r²·p(r) with a degree-5
 * polynomial on |r| ≤ ln 2 / 2, then e^x = e^r · 2^n by vscalefps (exact, handles underflow to
 * subnormals and to 0). Inputs are clamped to [−104, 88.72]: below −104 the result rounds to
 * exactly +0, so −inf (a masked logit) gives exactly 0 and never NaN.
 * Measured against glibc expf on [−87, 88] (tests/test_kernels_tiles.c): max relative error
 * 8.1e-8 (1.4 ulp at 2^-24).
 */
#ifndef ATTN_EXP_AVX512_H
#define ATTN_EXP_AVX512_H

#include <immintrin.h>

static inline __m512 attn_exp_avx512(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_high = _mm512_set1_ps(0.693359375f);
    const __m512 ln2_low = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.72283935546875f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_high, x);
    r = _mm512_fnmadd_ps(n, ln2_low, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 r2 = _mm512_mul_ps(r, r);
    __m512 y = _mm512_fmadd_ps(p, r2, r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

#endif /* ATTN_EXP_AVX512_H */
