/*
 * philox.h — Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011), the counter-based generator of attention dropout (mask/dropout.h): one block of
 * four 32-bit words from a 128-bit counter and a 64-bit key. Written once here as the
 * specification; the registry's philox_blocks kernels (registry.h) compute the same bits.
 */
#ifndef ATTN_KERNELS_PHILOX_H
#define ATTN_KERNELS_PHILOX_H

#include <stdint.h>

#define ATTN_PHILOX_ROUNDS 10
#define ATTN_PHILOX_M0 0xD2511F53u
#define ATTN_PHILOX_M1 0xCD9E8D57u
#define ATTN_PHILOX_W0 0x9E3779B9u
#define ATTN_PHILOX_W1 0xBB67AE85u

/* block = Philox-4x32-10(counter, key): ten rounds, the key bumped between them. */
static inline void attn_philox_block(const uint32_t counter[4], uint64_t key, uint32_t block[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < ATTN_PHILOX_ROUNDS; ++round) {
        const uint64_t p0 = (uint64_t)ATTN_PHILOX_M0 * c0, p1 = (uint64_t)ATTN_PHILOX_M1 * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0, c1 = (uint32_t)p1, c2 = n2, c3 = (uint32_t)p0;
        k0 += ATTN_PHILOX_W0, k1 += ATTN_PHILOX_W1;
    }
    block[0] = c0, block[1] = c1, block[2] = c2, block[3] = c3;
}

/* draws[4 n + w] = word w of the block of counter (first + n as 64 bits: low word, high word;
 * row; stream) under `key`, for n < blocks: the contract of registry.h philox_blocks. */
static inline void attn_philox_blocks_portable(uint64_t key, uint64_t first, uint32_t row,
                                               uint32_t stream, int blocks, uint32_t *draws) {
    for (int n = 0; n < blocks; ++n) {
        const uint64_t position = first + (uint64_t)n;
        const uint32_t counter[4] = {(uint32_t)position, (uint32_t)(position >> 32), row, stream};
        attn_philox_block(counter, key, draws + 4 * n);
    }
}

#endif /* ATTN_KERNELS_PHILOX_H */
