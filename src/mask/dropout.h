/*
 * dropout.h — attention dropout (attn_options.dropout_p, _seed, _offset): which softmax
 * probabilities P_ij a call drops, and the factor of those it keeps. The draw of a pair is a
 * counter-based random number (Philox-4x32-10, keyed by the seed), a pure function of (seed,
 * offset, b, h, i, j), so the forward and the backward regenerate the same mask tile by tile,
 * in any order and on any thread, and nothing of size Tq x Tk is stored:
 *   counter  = (offset + j / 4 as 64 bits, i, b * Hq + h),  key = seed
 *   draw     = word j mod 4 of Philox(counter, key)
 *   kept     = draw >= floor(p * 2^32),  factor 1 / (1 - p) when kept, else 0
 * (docs/attention-math.md §9.6). Each row (b, h, i) of a call uses the counters offset +
 * [0, ceil(Tk / 4)); a caller advances the offset by that much between calls for a fresh
 * mask. Internal to libattn.
 */
#ifndef ATTN_MASK_DROPOUT_H
#define ATTN_MASK_DROPOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"

/* The resolved dropout of one call. */
typedef struct attn_dropout {
    bool active;          /* dropout_p > 0 */
    uint64_t seed;        /* Philox key */
    uint64_t offset;      /* first counter of every row */
    uint32_t threshold;   /* a draw below it drops the pair: floor(p * 2^32) */
    float scale;          /* 1 / (1 - p), the factor of a kept pair */
    int64_t query_heads;  /* Hq: the stream of (b, h) is b * Hq + h */
    int64_t first_batch;  /* added to b: a varlen call's sequence index */
    /* The blocks' kernel (registry.h philox_blocks): the call's registry's, or the portable
     * one of kernels/philox.h. */
    void (*blocks)(uint64_t key, uint64_t first, uint32_t row, uint32_t stream, int blocks,
                   uint32_t *draws);
} attn_dropout;

/* The dropout of `options` (resolved; dropout_p validated) for calls with Hq query heads,
 * drawn by the portable kernel (a call sets `blocks` to its registry's). */
attn_dropout attn_dropout_of(const attn_options *options, int64_t query_heads);

/* Philox-4x32-10 of a 128-bit counter and a 64-bit key: the four words of the block. */
void attn_philox4x32(const uint32_t counter[4], uint64_t key, uint32_t block[4]);

/* Whether pair (b, h, i, j) is kept (one Philox block per call: for references and tests). */
bool attn_dropout_keeps(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i, int64_t j);

/* factors[c] = the factor of pair (b, h, i, j0 + c), for c < count: scale or 0. */
void attn_dropout_row_factors(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i,
                              int64_t j0, int64_t count, float *factors);

/* row[c] = factors[c] != 0 ? row[c] * factors[c] : +0 for c < count (factors from
 * attn_dropout_row_factors), without a branch: a NaN of a dropped pair becomes 0 too. */
static inline void attn_dropout_scale_row(int64_t count, const float *factors, float *row) {
    for (int64_t c = 0; c < count; ++c) {
        float x = row[c] * factors[c];
        uint32_t bits, keep;
        memcpy(&bits, &x, sizeof bits);
        memcpy(&keep, &factors[c], sizeof keep);
        bits &= (uint32_t)0 - (uint32_t)(keep != 0);
        memcpy(&x, &bits, sizeof x);
        row[c] = x;
    }
}

/* row[c] *= the factor of pair (b, h, i, j0 + c), for c < count; a dropped pair becomes
 * exactly 0 (NaN too: the row's NaN reaches O through its softmax sum). */
void attn_dropout_apply_row(const attn_dropout *dropout, int64_t b, int64_t h, int64_t i,
                            int64_t j0, int64_t count, float *row);

#endif /* ATTN_MASK_DROPOUT_H */
