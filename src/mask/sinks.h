/*
 * sinks.h — attention sinks (attn_options.sinks): the sink logit s of a query head is one
 * more softmax column whose value vector is 0. It is folded into a row's normalised result
 * (O, LSE) as one more partial with O = 0 and LSE = s (the merge of docs/attention-math.md §3):
 *   LSE' = log(e^LSE + e^s),   O' = O · e^(LSE − LSE').
 * Every path applies it where it writes a finished row (the forward's rows, the decode merge,
 * the ring's last merge, the references), so the kernels never see it. Internal to libattn.
 */
#ifndef ATTN_MASK_SINKS_H
#define ATTN_MASK_SINKS_H

#include <math.h>
#include <stdint.h>

#include "attn.h"

/* The sink logit of query head `head`, or -inf when the call has none. */
static inline float attn_sink_logit(const attn_options *options, int64_t head) {
    return options->sinks != NULL ? options->sinks[head] : -INFINITY;
}

/* Folds sink logit `sink` into *lse and returns the factor of the row's O: 1 for no sink
 * (-inf), 0 for a row that was empty (LSE = -inf: its LSE becomes the sink's), NaN for a NaN
 * row (its LSE stays NaN). Computed in double. */
static inline float attn_sink_fold(float *lse, float sink) {
    if (sink == -INFINITY) return 1.0f;
    const double row = *lse, s = sink;
    if (isnan(row)) return NAN;
    const double top = row > s ? row : s;
    const double folded = top + log(exp(row - top) + exp(s - top));
    *lse = (float)folded;
    return (float)exp(row - folded);
}

#endif /* ATTN_MASK_SINKS_H */
