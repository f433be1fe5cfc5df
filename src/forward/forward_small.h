/*
 * forward_small.h — attn_forward's small calls on the decode loop (forward_small.c).
 */
#ifndef ATTN_FORWARD_SMALL_H
#define ATTN_FORWARD_SMALL_H

#include <stdbool.h>

#include "../call/call.h"

/* The most query rows per KV head (GQA group x Tq) that run on the decode loop: below it the
 * decode's in-place reads beat packing K/V tiles (docs/architecture.md, "Small calls"). */
#define ATTN_FORWARD_SMALL_ROWS 16

/* Whether a validated forward call takes the decode loop: at most ATTN_FORWARD_SMALL_ROWS rows
 * per KV head; no mask, bias, block layout, pattern, global tokens, lengths of keys or
 * positions; K and V with unit element strides and no negative stride. */
bool attn_forward_small_applies(const attn_call *call, const attn_tensor *k,
                                const attn_tensor *v);

/* Runs the validated call on the decode loop and ends it: out [B, Tq, Hq, Dv], lse [B, Hq, Tq]
 * (or NULL) from q [B, Tq, Hq, Dk], k [B, Tk, Hkv, Dk], v [B, Tk, Hkv, Dv]. */
attn_status attn_forward_small(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, attn_tensor *out, attn_tensor *lse,
                               attn_error *error);

#endif /* ATTN_FORWARD_SMALL_H */
