/*
 * philox_avx2.c — registry.h's philox_blocks on AVX2: eight Philox-4x32-10 blocks at a time,
 * the 32 x 32 -> 64-bit products of a round by VPMULUDQ on the even and the odd lanes; the
 * same bits as kernels/philox.h. The AVX2 and the AVX-512 forward tables both name it.
 */
#include <immintrin.h>

#include "kernels/philox.h"
#include "kernels/simd/parts.h"

/* hi, lo = the high and low words of a[l] * m for each 32-bit lane l. */
static inline void multiply(__m256i a, __m256i m, __m256i *hi, __m256i *lo) {
    const __m256i even = _mm256_mul_epu32(a, m);
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/* Blocks first .. first + 7 (lane l: block first + l) into draws[0 .. 32), block by block. */
static void eight_blocks(uint64_t key, uint64_t first, uint32_t row, uint32_t stream,
                         uint32_t *draws) {
    uint32_t low[8], high[8];
    for (int l = 0; l < 8; ++l) {
        const uint64_t position = first + (uint64_t)l;
        low[l] = (uint32_t)position, high[l] = (uint32_t)(position >> 32);
    }
    __m256i c0 = _mm256_loadu_si256((const __m256i *)low);
    __m256i c1 = _mm256_loadu_si256((const __m256i *)high);
    __m256i c2 = _mm256_set1_epi32((int)row), c3 = _mm256_set1_epi32((int)stream);
    const __m256i m0 = _mm256_set1_epi32((int)ATTN_PHILOX_M0);
    const __m256i m1 = _mm256_set1_epi32((int)ATTN_PHILOX_M1);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < ATTN_PHILOX_ROUNDS; ++round) {
        __m256i hi0, lo0, hi1, lo1;
        multiply(c0, m0, &hi0, &lo0);
        multiply(c2, m1, &hi1, &lo1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        c1 = lo1;
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c3 = lo0;
        k0 += ATTN_PHILOX_W0, k1 += ATTN_PHILOX_W1;
    }
    /* words by lane -> blocks in order: (c0, c1, c2, c3) of lane l at draws[4 l]. */
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i b04 = _mm256_unpacklo_epi64(t0, t2), b15 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i b26 = _mm256_unpacklo_epi64(t1, t3), b37 = _mm256_unpackhi_epi64(t1, t3);
    _mm256_storeu_si256((__m256i *)draws, _mm256_permute2x128_si256(b04, b15, 0x20));
    _mm256_storeu_si256((__m256i *)(draws + 8), _mm256_permute2x128_si256(b26, b37, 0x20));
    _mm256_storeu_si256((__m256i *)(draws + 16), _mm256_permute2x128_si256(b04, b15, 0x31));
    _mm256_storeu_si256((__m256i *)(draws + 24), _mm256_permute2x128_si256(b26, b37, 0x31));
}

void attn_philox_blocks_avx2(uint64_t key, uint64_t first, uint32_t row, uint32_t stream,
                             int blocks, uint32_t *draws) {
    int n = 0;
    for (; n + 8 <= blocks; n += 8)
        eight_blocks(key, first + (uint64_t)n, row, stream, draws + 4 * n);
    attn_philox_blocks_portable(key, first + (uint64_t)n, row, stream, blocks - n, draws + 4 * n);
}
