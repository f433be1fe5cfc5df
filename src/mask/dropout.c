/*
 * dropout.c — the dropout mask of dropout.h: Philox-4x32-10 (Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011) and the keep factors of a row of pairs. A row's
 * blocks are computed LANES at a time in plain arrays, a loop the compiler vectorises.
 */
#include "dropout.h"

#include <math.h>
#include <string.h>

#include "../call/call.h"
#include "../core/internal.h"
#include "../core/overlap.h"

enum { PHILOX_ROUNDS = 10, LANES = 8 };

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

attn_dropout attn_dropout_of(const attn_options *options, int64_t query_heads) {
    attn_dropout dropout;
    memset(&dropout, 0, sizeof dropout);
    const double p = options->dropout_p;
    dropout.active = p > 0.0;
    dropout.seed = options->dropout_seed;
    dropout.offset = options->dropout_offset;
    const double threshold = floor(p * 4294967296.0);
    dropout.threshold = threshold >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)threshold;
    dropout.scale = (float)(1.0 / (1.0 - p));
    dropout.query_heads = query_heads;
    return dropout;
}

void attn_philox4x32(const uint32_t counter[4], uint64_t key, uint32_t block[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < PHILOX_ROUNDS; ++round) {
        const uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0, c1 = (uint32_t)p1, c2 = n2, c3 = (uint32_t)p0;
        k0 += PHILOX_W0, k1 += PHILOX_W1;
    }
    block[0] = c0, block[1] = c1, block[2] = c2, block[3] = c3;
}

/* The draws of LANES consecutive blocks from block `first` of row stream (i, bh):
 * draws[4 * n + w] = word w of block first + n. */
static void row_draws(uint64_t key, uint64_t first, uint32_t i, uint32_t bh,
                      uint32_t draws[4 * LANES]) {
    uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
    for (int n = 0; n < LANES; ++n) {
        const uint64_t position = first + (uint64_t)n;
        c0[n] = (uint32_t)position, c1[n] = (uint32_t)(position >> 32), c2[n] = i, c3[n] = bh;
    }
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < PHILOX_ROUNDS; ++round) {
        for (int n = 0; n < LANES; ++n) {
            const uint64_t p0 = (uint64_t)PHILOX_M0 * c0[n], p1 = (uint64_t)PHILOX_M1 * c2[n];
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[n] ^ k0;
            const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[n] ^ k1;
            c0[n] = n0, c1[n] = (uint32_t)p1, c2[n] = n2, c3[n] = (uint32_t)p0;
        }
        k0 += PHILOX_W0, k1 += PHILOX_W1;
    }
    for (int n = 0; n < LANES; ++n) {
        draws[4 * n] = c0[n], draws[4 * n + 1] = c1[n];
        draws[4 * n + 2] = c2[n], draws[4 * n + 3] = c3[n];
    }
}

/* The stream of (b, h): b * Hq + h with the call's first batch added, in 32 bits. */
static uint32_t stream_of(const attn_dropout *dropout, int64_t b, int64_t h) {
    return (uint32_t)((b + dropout->first_batch) * dropout->query_heads + h);
}

bool attn_dropout_keeps(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i, int64_t j) {
    const uint64_t position = dropout->offset + (uint64_t)(j / 4);
    const uint32_t counter[4] = {(uint32_t)position, (uint32_t)(position >> 32), (uint32_t)i,
                                 stream_of(dropout, b, h)};
    uint32_t block[4];
    attn_philox4x32(counter, dropout->seed, block);
    return block[j % 4] >= dropout->threshold;
}

void attn_dropout_row_factors(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i,
                              int64_t j0, int64_t count, float *factors) {
    const uint32_t bh = stream_of(dropout, b, h);
    uint32_t draws[4 * LANES];
    int64_t c = 0;
    while (c < count) {
        const int64_t j = j0 + c, block = j / 4;
        row_draws(dropout->seed, dropout->offset + (uint64_t)block, (uint32_t)i, bh, draws);
        /* The draws cover pairs [4 * block, 4 * (block + LANES)). */
        const int64_t end = 4 * (block + LANES) - j0 < count ? 4 * (block + LANES) - j0 : count;
        for (; c < end; ++c)
            factors[c] = draws[j0 + c - 4 * block] >= dropout->threshold ? dropout->scale : 0.0f;
    }
}

void attn_dropout_apply_row(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i,
                            int64_t j0, int64_t count, float *row) {
    enum { CHUNK = 256 };
    float factors[CHUNK];
    for (int64_t c = 0; c < count; c += CHUNK) {
        const int64_t n = count - c < CHUNK ? count - c : CHUNK;
        attn_dropout_row_factors(dropout, b, h, i, j0 + c, n, factors);
        for (int64_t e = 0; e < n; ++e)
            row[c + e] = factors[e] != 0.0f ? row[c + e] * factors[e] : 0.0f;
    }
}

/* keep[b, h, i, j] for the whole tensor, a row of factors at a time. */
static void write_mask(const attn_dropout *dropout, attn_tensor *keep) {
    enum { CHUNK = 256 };
    float factors[CHUNK];
    uint8_t *data = keep->data;
    for (int64_t b = 0; b < keep->shape[0]; ++b)
        for (int64_t h = 0; h < keep->shape[1]; ++h)
            for (int64_t i = 0; i < keep->shape[2]; ++i)
                for (int64_t j = 0; j < keep->shape[3]; j += CHUNK) {
                    const int64_t n = keep->shape[3] - j < CHUNK ? keep->shape[3] - j : CHUNK;
                    attn_dropout_row_factors(dropout, b, h, i, j, n, factors);
                    uint8_t *row = data + b * keep->stride[0] + h * keep->stride[1] +
                                   i * keep->stride[2] + j * keep->stride[3];
                    for (int64_t c = 0; c < n; ++c) row[c * keep->stride[3]] = factors[c] != 0.0f;
                }
}

attn_status attn_dropout_mask(const attn_options *options, attn_tensor *keep,
                              attn_error *error) {
    attn_options resolved;
    attn_status status = attn_options_resolve(options, &resolved, error);
    if (status != ATTN_OK) return status;
    if ((status = attn_check_tensor(keep, "keep", ATTN_DTYPE_BOOL, 4, error)) != ATTN_OK ||
        (status = attn_check_output_layout(keep, "keep", error)) != ATTN_OK)
        return status;
    const double p = resolved.dropout_p;
    if (!isfinite(p) || p < 0.0 || p >= 1.0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.dropout_p = %.9g: must be 0 (off) or in (0, 1)", p);
    const int64_t limit = (int64_t)1 << 32;
    if (keep->shape[2] >= limit || keep->shape[3] >= limit ||
        keep->shape[0] >= limit / keep->shape[1])
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "keep.shape = [%lld, %lld, %lld, %lld]: the dropout generator needs Tq, "
                         "Tk and B x Hq below 2^32",
                         (long long)keep->shape[0], (long long)keep->shape[1],
                         (long long)keep->shape[2], (long long)keep->shape[3]);
    const attn_dropout dropout = attn_dropout_of(&resolved, keep->shape[1]);
    write_mask(&dropout, keep);
    return ATTN_OK;
}
