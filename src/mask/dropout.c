/*
 * dropout.c — the dropout mask of dropout.h: the keep factors of a row of pairs from
 * Philox-4x32-10 blocks (kernels/philox.h), drawn CHUNK_PAIRS / 4 blocks at a time by the
 * call's registry kernel (registry.h philox_blocks), and attn_dropout_mask.
 */
#include "dropout.h"

#include <math.h>
#include <string.h>

#include "../call/call.h"
#include "../core/internal.h"
#include "../core/overlap.h"
#include "../kernels/philox.h"

/* Pairs of a row whose draws one call of the blocks' kernel makes: 64 blocks. */
enum { CHUNK_PAIRS = 256 };

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
    dropout.blocks = attn_philox_blocks_portable;
    return dropout;
}

void attn_philox4x32(const uint32_t counter[4], uint64_t key, uint32_t block[4]) {
    attn_philox_block(counter, key, block);
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
    attn_philox_block(counter, dropout->seed, block);
    return block[j % 4] >= dropout->threshold;
}

/* The draws of pairs [j0, j0 + count) of row (b, h, i), count <= CHUNK_PAIRS: the pair
 * j0 + c is draws[*skip + c]. */
static const uint32_t *row_draws(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i,
                                 int64_t j0, int64_t count, uint32_t draws[CHUNK_PAIRS + 8],
                                 int64_t *skip) {
    const int64_t first = j0 / 4, last = (j0 + count - 1) / 4;
    dropout->blocks(dropout->seed, dropout->offset + (uint64_t)first, (uint32_t)i,
                    stream_of(dropout, b, h), (int)(last - first + 1), draws);
    *skip = j0 - 4 * first;
    return draws;
}

/* x where the draw keeps the pair, else +0 (a NaN x too): a bit mask, no branch, so the
 * loops below vectorise and a random 10% of drops costs no mispredicted branches. */
static inline float kept_or_zero(float x, uint32_t draw, uint32_t threshold) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits &= (uint32_t)0 - (uint32_t)(draw >= threshold);
    memcpy(&x, &bits, sizeof x);
    return x;
}

void attn_dropout_row_factors(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i,
                              int64_t j0, int64_t count, float *factors) {
    uint32_t buffer[CHUNK_PAIRS + 8];
    for (int64_t c = 0; c < count; c += CHUNK_PAIRS) {
        const int64_t n = count - c < CHUNK_PAIRS ? count - c : CHUNK_PAIRS;
        int64_t skip;
        const uint32_t *draws = row_draws(dropout, b, h, i, j0 + c, n, buffer, &skip);
        for (int64_t e = 0; e < n; ++e)
            factors[c + e] = kept_or_zero(dropout->scale, draws[skip + e], dropout->threshold);
    }
}

void attn_dropout_apply_row(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i,
                            int64_t j0, int64_t count, float *row) {
    float factors[CHUNK_PAIRS];
    for (int64_t c = 0; c < count; c += CHUNK_PAIRS) {
        const int64_t n = count - c < CHUNK_PAIRS ? count - c : CHUNK_PAIRS;
        attn_dropout_row_factors(dropout, b, h, i, j0 + c, n, factors);
        attn_dropout_scale_row(n, factors, row + c);
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
