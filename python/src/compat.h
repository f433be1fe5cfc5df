/*
 * compat.h — TEMPORARY: maps the new call signatures of the public API (PLAN / issue 10:
 * attn_execution as an argument, attn_options.window) onto the attn.h that main has today.
 * The binding (module.c) is written against the new API only; this header is included only
 * when attn.h does not yet define ATTN_EXECUTION_VERSION. Delete it once the new API lands.
 */
#ifndef ATTN_PYTHON_COMPAT_H
#define ATTN_PYTHON_COMPAT_H

#include "attn.h"

#ifndef ATTN_EXECUTION_VERSION
#define ATTN_PYTHON_COMPAT 1
#define ATTN_EXECUTION_VERSION 1

/* HOW to run (new API): moved out of attn_options. */
typedef struct attn_execution {
    int version;
    int num_threads;
    int tile_q, tile_k;
    attn_kernel_choice kernel;
    size_t memory_limit_bytes;
} attn_execution;

/* Today's options carry the execution fields themselves. */
static attn_options compat_merge(const attn_options *options, const attn_execution *execution) {
    attn_options merged = options ? *options : attn_options_default();
    if (execution) {
        merged.num_threads = execution->num_threads;
        merged.tile_q = execution->tile_q;
        merged.tile_k = execution->tile_k;
        merged.kernel = execution->kernel;
        merged.memory_limit_bytes = execution->memory_limit_bytes;
    }
    return merged;
}

static inline attn_status compat_forward(const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_options *options,
                                         attn_tensor *out, attn_tensor *lse,
                                         const attn_execution *execution, attn_error *error) {
    attn_options merged = compat_merge(options, execution);
    return attn_forward(q, k, v, &merged, out, lse, error);
}

static inline attn_status compat_backward(const attn_tensor *q, const attn_tensor *k,
                                          const attn_tensor *v, const attn_tensor *out,
                                          const attn_tensor *lse, const attn_tensor *dout,
                                          const attn_options *options, attn_tensor *dq,
                                          attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                                          const attn_execution *execution, attn_error *error) {
    attn_options merged = compat_merge(options, execution);
    return attn_backward(q, k, v, out, lse, dout, &merged, dq, dk, dv, dbias, error);
}

static inline attn_status compat_decode(const attn_kv_cache *cache, const attn_tensor *q,
                                        const attn_options *options, attn_tensor *out,
                                        attn_tensor *lse, const attn_execution *execution,
                                        attn_error *error) {
    attn_options merged = compat_merge(options, execution);
    return attn_decode(cache, q, &merged, out, lse, error);
}

#define attn_forward(q, k, v, o, out, lse, x, e) compat_forward(q, k, v, o, out, lse, x, e)
#define attn_backward(q, k, v, out, lse, dout, o, dq, dk, dv, db, x, e) \
    compat_backward(q, k, v, out, lse, dout, o, dq, dk, dv, db, x, e)
#define attn_decode(c, q, o, out, lse, x, e) compat_decode(c, q, o, out, lse, x, e)

/* Today: a window is always on, (-1, -1) = unbounded. New API: options.window = 1. */
#define ATTN_PYTHON_SET_WINDOW(o, left, right) \
    ((o)->window_left = (left), (o)->window_right = (right))
#endif

#endif
