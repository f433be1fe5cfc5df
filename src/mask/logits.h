/*
 * logits.h — the logit pipeline, written once for the forward tiles, the backward tiles and
 * decoding: from the dot products of one query row with a run of keys to the final logits
 * (docs/attention-math.md, "The logit pipeline"), and which of those keys are live.
 *
 * For query row i of (b, h) and keys j0 + c, c < count, in this order:
 *   x = scale * raw[c]                       (scale = 1 when raw is already scaled, or when
 *                                             the softmax kernel applies it later)
 *   x = softcap * tanh(x / softcap)          when softcap > 0 (the derivative 1 - tanh^2 is
 *                                             kept when the caller asks, for the backward)
 *   x += bias[b, h, i, j] + alibi(h, i, j)   when the mask context has additive terms
 *   x = -inf                                 when (i, j) is not allowed (the predicate, for a
 *                                             PARTIAL tile) or the additive term is -inf
 * A key is live for the row when the predicate allows it and its additive term is not -inf:
 * what the mask says, independent of the values. The caller ORs the rows' live flags of a
 * tile to find the key columns no row attends (whose values must not leak NaN in).
 */
#ifndef ATTN_MASK_LOGITS_H
#define ATTN_MASK_LOGITS_H

#include <stdbool.h>
#include <stdint.h>

#include "mask.h"

/* What a tile's pipeline does; fixed for a tile (often for a whole call). */
typedef struct attn_logit_pipeline {
    float scale;     /* factor applied to the raw scores here (1 = none) */
    float softcap;   /* > 0: soft-cap here, after the scale */
    bool additive;   /* add the bias and ALiBi terms (the context's has_additive) */
} attn_logit_pipeline;

/* One row's buffers from the caller's workspace: allowed uint8[count], additive float[count]
 * (scratch, overwritten), derivative float[count] or NULL (1 - tanh^2 of the soft-cap, written
 * when softcap > 0), live uint8[count] or NULL (ORed with the row's live flags). */
typedef struct attn_logit_buffers {
    uint8_t *allowed;
    float *additive;
    float *derivative;
    uint8_t *live;
} attn_logit_buffers;

/* Whether a tile of class `tile_class` needs the per-element pass at all: false for a FULL
 * tile whose pipeline neither transforms nor adds (every key live, logits unchanged). */
static inline bool attn_logits_needed(const attn_logit_pipeline *pipeline,
                                      attn_tile_class tile_class) {
    return tile_class != ATTN_TILE_FULL || pipeline->scale != 1.0f || pipeline->softcap > 0.0f ||
           pipeline->additive;
}

/*
 * Turns row[0..count) (raw scores of query row i of (b, h) against keys j0 .. j0 + count - 1)
 * into final logits in place, as above. tile_class: the class of the tile the row belongs to
 * (EMPTY: every logit -inf and no key live; FULL: no predicate; PARTIAL: the predicate per
 * key, through attn_mask_allowed_row).
 */
void attn_logits_row(const attn_mask_context *mask, const attn_logit_pipeline *pipeline,
                     attn_tile_class tile_class, int64_t b, int64_t h, int64_t i, int64_t j0,
                     int64_t count, float *row, const attn_logit_buffers *buffers);

#endif /* ATTN_MASK_LOGITS_H */
