/*
 * logits.c — the one logit pipeline (logits.h): scale, soft-cap, additive terms and the mask
 * predicate on one row of scores, with the row's live keys.
 */
#include "logits.h"

#include <math.h>
#include <string.h>

void attn_logits_row(const attn_mask_context *mask, const attn_logit_pipeline *pipeline,
                     attn_tile_class tile_class, int64_t b, int64_t h, int64_t i, int64_t j0,
                     int64_t count, float *restrict row, const attn_logit_buffers *buffers) {
    uint8_t *restrict live = buffers->live;
    if (tile_class == ATTN_TILE_EMPTY) {
        for (int64_t c = 0; c < count; ++c) row[c] = -INFINITY;
        if (buffers->derivative != NULL && pipeline->softcap > 0.0f)
            memset(buffers->derivative, 0, (size_t)count * sizeof(float));
        return;
    }
    const bool predicate = tile_class == ATTN_TILE_PARTIAL;
    uint8_t *restrict allowed = buffers->allowed;
    if (predicate) attn_mask_allowed_row(mask, b, h, i, j0, j0 + count, allowed);
    else memset(allowed, 1, (size_t)count);

    const float scale = pipeline->scale, softcap = pipeline->softcap;
    if (softcap <= 0.0f && !pipeline->additive) {
        /* Structure (and scale) only: branch-free, so that it vectorises. */
        if (scale != 1.0f)
            for (int64_t c = 0; c < count; ++c) row[c] *= scale;
        for (int64_t c = 0; c < count; ++c) row[c] = allowed[c] ? row[c] : -INFINITY;
        if (live != NULL)
            for (int64_t c = 0; c < count; ++c) live[c] |= allowed[c];
        return;
    }

    float *restrict additive = buffers->additive;
    if (pipeline->additive) attn_mask_additive_row(mask, b, h, i, j0, j0 + count, additive);
    if (softcap > 0.0f) {
        float *restrict derivative = buffers->derivative;
        for (int64_t c = 0; c < count; ++c) { /* (a -inf score stays -inf: not allowed) */
            const float t = tanhf(row[c] * scale / softcap);
            row[c] = row[c] == -INFINITY ? -INFINITY : softcap * t;
            if (derivative != NULL) derivative[c] = row[c] == -INFINITY ? 0.0f : 1.0f - t * t;
        }
    } else if (scale != 1.0f) {
        for (int64_t c = 0; c < count; ++c) row[c] *= scale;
    }
    if (pipeline->additive) {
        for (int64_t c = 0; c < count; ++c) {
            const bool keep = allowed[c] && additive[c] != -INFINITY;
            row[c] = keep ? row[c] + additive[c] : -INFINITY;
            if (live != NULL) live[c] |= keep;
        }
    } else {
        for (int64_t c = 0; c < count; ++c) row[c] = allowed[c] ? row[c] : -INFINITY;
        if (live != NULL)
            for (int64_t c = 0; c < count; ++c) live[c] |= allowed[c];
    }
}
