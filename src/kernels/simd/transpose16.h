/*
 * transpose16.h — the transpose of a 16 x 16 block of floats held in 16 zmm registers, in
 * place: v[i] = row i on entry, column i on return; and the sums of 16 such registers'
 * lanes as one register (attn_transpose_reduce16). Written once for every AVX-512 user: the
 * decode bodies at 16 lanes (simd/decode_body.h, built with -mavx512f) and the AMX decode
 * (amx/decode_amx.h, whose functions carry target("avx512f...") in a unit built without the
 * AVX-512 flags), hence its own target attribute.
 */
#ifndef ATTN_KERNELS_SIMD_TRANSPOSE16_H
#define ATTN_KERNELS_SIMD_TRANSPOSE16_H

#include <immintrin.h>
#include "kernels/simd/target.h"

static inline __attribute__((always_inline)) ATTN_TARGET("avx512f") void attn_transpose16(__m512 v[16]) {
    __m512 a[16], b[16];
    for (int i = 0; i < 8; ++i) {
        a[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    /* b[4i + j], 128-bit block L = rows 4i .. 4i + 3 of column 4L + j */
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j) {
            const __m512d x = _mm512_castps_pd(a[4 * i + j]), y = _mm512_castps_pd(a[4 * i + j + 2]);
            b[4 * i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(x, y));
            b[4 * i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x, y));
        }
    for (int j = 0; j < 4; ++j) {
        const __m512 low = _mm512_shuffle_f32x4(b[j], b[4 + j], 0x44);
        const __m512 high = _mm512_shuffle_f32x4(b[j], b[4 + j], 0xEE);
        const __m512 low2 = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0x44);
        const __m512 high2 = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0xEE);
        v[j] = _mm512_shuffle_f32x4(low, low2, 0x88);
        v[4 + j] = _mm512_shuffle_f32x4(low, low2, 0xDD);
        v[8 + j] = _mm512_shuffle_f32x4(high, high2, 0x88);
        v[12 + j] = _mm512_shuffle_f32x4(high, high2, 0xDD);
    }
}

/* Lane a of the result = the sum of the 16 lanes of v[a], by a fixed tree: 256-bit halves,
 * then 128-bit quarters (shuffle_f32x4), then within 128 bits (unpack). Shared by the
 * AVX-512 decode bodies and the VDPBF16PS decode kernels (avx512bf16/decode_avx512bf16.c). */
static inline __attribute__((always_inline)) ATTN_TARGET("avx512f") __m512
attn_transpose_reduce16(const __m512 v[16]) {
    /* The tree below yields lane 4k + j = sum(w[4j + k]); feeding w[4j + k] = v[4k + j]
     * makes lane a = sum(v[a]). */
    __m512 w[16];
    for (int i = 0; i < 16; ++i) w[i] = v[(i % 4) * 4 + i / 4];
    __m512 halves[8], quarters[4];
    for (int i = 0; i < 8; ++i) /* blocks [a0+a2, a1+a3, b0+b2, b1+b3] */
        halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x44),
                           _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i) /* block m = 4-lane partial of w[4i + m] */
        quarters[i] = _mm512_add_ps(_mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0xDD));
    const __m512 pair01 = _mm512_add_ps(_mm512_unpacklo_ps(quarters[0], quarters[1]),
                             _mm512_unpackhi_ps(quarters[0], quarters[1]));
    const __m512 pair23 = _mm512_add_ps(_mm512_unpacklo_ps(quarters[2], quarters[3]),
                             _mm512_unpackhi_ps(quarters[2], quarters[3]));
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(pair01), _mm512_castps_pd(pair23));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(pair01), _mm512_castps_pd(pair23));
    return _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
}

#endif /* ATTN_KERNELS_SIMD_TRANSPOSE16_H */
