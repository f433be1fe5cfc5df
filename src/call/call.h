/*
 * call.h — one attention call, prepared once. Every entry point (attn_forward, attn_backward,
 * attn_decode, and the ring's blocks) turns its arguments into an attn_call and runs on it;
 * none rebuilds the prologue by hand:
 *
 *   attn_call call;
 *   attn_call_begin(&call, options, execution, error);    resolve what and how; kernels
 *   attn_call_validate_forward(&call, q, k, v, out, lse, error);  (or the entry's own
 *                                                  check filling call.problem: backward, decode)
 *   ... plan tiles, count one thread's workspace bytes and the shared bytes ...
 *   attn_call_reserve(&call, threads, workspace, shared, "attn_forward", error);
 *        memory limit checked before anything is allocated, then the mask context and one
 *        arena: threads x workspace (thread t's at attn_call_workspace(&call, t)), then the
 *        shared part (attn_call_shared(&call))
 *   ... the parallel loops ...
 *   attn_call_end(&call);                                  frees everything, always safe
 *
 * The ring begins one call for the whole ring call and runs each block on a copy of it
 * (attn_forward_run / attn_backward_run), with that block's positions. The references
 * (attn_reference_forward / _backward / _decode) have no execution part; they use
 * attn_options_resolve alone, so NULL options and the window switch mean the same there.
 */
#ifndef ATTN_CALL_H
#define ATTN_CALL_H

#include <stdbool.h>
#include <stddef.h>

#include "attn.h"
#include "../kernels/registry.h"
#include "../mask/mask.h"

/* Tile sizes accepted in attn_execution (tile_q, tile_k). */
#define ATTN_MAX_TILE 4096

/*
 * Copies *options into *resolved with the defaults applied (NULL = the zero struct: plain
 * attention), after checking options->version. The window switch is folded in: with
 * window == 0, resolved->window_left = window_right = -1 (unbounded), so code below the
 * entry points reads the window bounds alone (-1 = unbounded side). Idempotent. The other
 * fields are checked against the tensors later (attn_validate_options).
 */
attn_status attn_options_resolve(const attn_options *options, attn_options *resolved,
                                 attn_error *error);

/* Copies *execution into *resolved (NULL = the zero struct: defaults) and checks every
 * field: version, num_threads >= 0, tiles in [0, ATTN_MAX_TILE], a known kernel. */
attn_status attn_execution_resolve(const attn_execution *execution, attn_execution *resolved,
                                   attn_error *error);

/* The name of the first option that only means something on a padded batch (mask, bias,
 * query/key lengths, explicit positions, global tokens, block layout) set in *options, or NULL
 * when none is. Entry points whose sequences define their own lengths and positions (packed
 * varlen batches, caller-owned caches) refuse such options by this name. */
const char *attn_options_padded_batch_field(const attn_options *options);

/* One prepared call. Fields are filled in the order of the steps above; read-only during the
 * parallel loops, so every thread shares it. Not copyable once the mask context exists (the
 * context points at `options`). */
typedef struct attn_call {
    attn_options options;        /* resolved: what to compute */
    attn_execution execution;    /* resolved: how to run it */
    const attn_kernels *kernels; /* the registry execution.kernel selects on this CPU */
    attn_problem problem;        /* validated sizes and the effective scale */
    attn_mask_context mask;      /* built by attn_call_reserve (slopes, global tokens) */
    bool mask_ready;             /* mask holds allocations to free */
    int threads;                 /* threads of the call's parallel regions */
    size_t workspace_bytes;      /* one thread's part of the arena (a multiple of 64) */
    size_t shared_bytes;         /* the shared part, after the threads' parts */
    char *arena;                 /* 64-byte aligned; NULL when nothing was needed */
    bool arena_cached;           /* the arena is the calling thread's cached one (call.c) */
    /* Added to b in the dropout generator's stream (mask/dropout.h): a varlen call runs its
     * sequence b as a batch of one with dropout_first_batch = b. */
    int64_t dropout_first_batch;
} attn_call;

/* Step 1: zeroes `call`, resolves options and execution and selects the kernel registry.
 * Errors: an unknown version or execution value (INVALID_ARGUMENT), a kernel this CPU or
 * build cannot run (UNSUPPORTED). `call` is safe to attn_call_end whatever happens. */
attn_status attn_call_begin(attn_call *call, const attn_options *options,
                            const attn_execution *execution, attn_error *error);

/* Step 2 for attn_forward: q, k, v, out (lse when not NULL) against each other and against
 * the options (attn_validate_call_typed: F32, BF16 or F16, one dtype for all four); fills
 * call->problem. Then out and lse against the inputs (attn_call_check_aliasing below). */
attn_status attn_call_validate_forward(attn_call *call, const attn_tensor *q,
                                       const attn_tensor *k, const attn_tensor *v,
                                       const attn_tensor *out, const attn_tensor *lse,
                                       attn_error *error);

/* One tensor an entry point reads or writes, as its messages name it ("out", "outs[0]",
 * "cache->k_cache"). NULL tensors are skipped. in_place (outputs only, else NULL): an input
 * this output may be exactly (the same view: data, dtype, shape and strides), as attn_merge's
 * out may be outs[0]. */
typedef struct attn_call_tensor {
    const attn_tensor *tensor;
    const char *name;
    const attn_tensor *in_place;
} attn_call_tensor;

/*
 * Step 2b of every entry point, after its tensors are validated (attn_check_tensor: their
 * spans fit) and before anything is written: no output may share a byte with an input or
 * with another output. Inputs may overlap each other. The options' tensors and arrays (mask,
 * bias, block_layout; with `problem` not NULL also query/key lengths int32[B], query/key
 * positions int64[Tq] / int64[Tk], global_tokens, ALiBi slopes float[Hq]) count as inputs.
 * Exact on the strides' lattices (core/overlap.h): two interleaved views of one buffer that
 * never meet are accepted; a layout too intricate to settle within the search budget counts
 * as sharing. Error: INVALID_ARGUMENT "out (bytes [a, b)) and q (bytes [c, d)) share memory:
 * ...", naming the output first. Reads only the descriptions. At most
 * ATTN_CALL_MOST_OUTPUTS outputs and ATTN_CALL_MOST_INPUTS inputs (the entry points' longest
 * lists; more is UNSUPPORTED, a defect of the caller).
 */
#define ATTN_CALL_MOST_OUTPUTS 4
#define ATTN_CALL_MOST_INPUTS 12
attn_status attn_call_check_aliasing(const attn_call_tensor *outputs, int output_count,
                                     const attn_call_tensor *inputs, int input_count,
                                     const attn_options *options, const attn_problem *problem,
                                     attn_error *error);

/* Step 2 for attn_backward: attn_backward_validate (16-bit allowed), then dq, dk, dv, dbias
 * against q, k, v, out, lse, dout, the options and each other (attn_call_check_aliasing). */
attn_status attn_call_validate_backward(attn_call *call, const attn_tensor *q,
                                        const attn_tensor *k, const attn_tensor *v,
                                        const attn_tensor *out, const attn_tensor *lse,
                                        const attn_tensor *dout, const attn_tensor *dq,
                                        const attn_tensor *dk, const attn_tensor *dv,
                                        const attn_tensor *dbias, attn_error *error);

/* attn_call_check_aliasing for a forward (out, lse written; q, k, v read) and for a backward
 * (dq, dk, dv, dbias written; q, k, v, out, lse, dout read), with their names. Any of the
 * optional tensors (lse, dbias) may be NULL; problem as above. */
attn_status attn_check_forward_aliasing(const attn_tensor *q, const attn_tensor *k,
                                        const attn_tensor *v, const attn_tensor *out,
                                        const attn_tensor *lse, const attn_options *options,
                                        const attn_problem *problem, attn_error *error);
attn_status attn_check_backward_aliasing(const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_tensor *out,
                                         const attn_tensor *lse, const attn_tensor *dout,
                                         const attn_tensor *dq, const attn_tensor *dk,
                                         const attn_tensor *dv, const attn_tensor *dbias,
                                         const attn_options *options, const attn_problem *problem,
                                         attn_error *error);

/* The thread count for `work_items` independent items: execution.num_threads, or the default
 * (attn_default_threads), capped at work_items when work_items > 0. Never changes results. */
int attn_call_thread_count(const attn_call *call, int64_t work_items);

/* Threads chosen by work: attn_call_thread_count(call, work_items), further capped so that each
 * thread has at least ATTN_MIN_THREAD_NS of the call's estimated one-thread time, `flops`
 * floating-point operations plus `bytes` read from memory (attn_call_one_thread_ns). A tiny call
 * runs on its caller alone: waking a helper and joining it would cost more than it saves. With
 * the environment variable ATTN_THREADS_BY_WORK=0 the work is not looked at (the tests that
 * compare thread counts on small problems set it). */
int attn_call_threads_for_work(const attn_call *call, int64_t work_items, double flops,
                               double bytes);

/* How many threads `flops` and `bytes` of work keep busy at ATTN_MIN_THREAD_NS each (>= 1);
 * unlike attn_call_threads_for_work, independent of the environment: what a work split that
 * must not depend on the thread count (split-KV) may use. */
int64_t attn_call_threads_worth(double flops, double bytes);

/* The estimated time of `flops` and `bytes` on one thread, in nanoseconds: the rates are a
 * small call's, well below a core's peaks (ATTN_ONE_THREAD_FLOPS_PER_NS, _BYTES_PER_NS). */
double attn_call_one_thread_ns(double flops, double bytes);

/*
 * Step 3: the working memory of the call, sized once. threads x workspace_bytes (each
 * rounded up to 64 bytes) plus shared_bytes must fit execution.memory_limit_bytes (when set),
 * else ATTN_ERROR_MEMORY_LIMIT naming the limit, `who` and the bytes needed, before anything
 * is allocated. Then builds the mask context and allocates the arena (uninitialised; pages a
 * thread never touches are never committed). Overflow and out of memory are errors too.
 */
attn_status attn_call_reserve(attn_call *call, int threads, size_t workspace_bytes,
                              size_t shared_bytes, const char *who, attn_error *error);

/* Thread t's part of the arena (workspace_bytes, 64-byte aligned), and the shared part. */
static inline void *attn_call_workspace(const attn_call *call, int thread) {
    return call->arena + (size_t)thread * call->workspace_bytes;
}
static inline void *attn_call_shared(const attn_call *call) {
    return call->arena + (size_t)call->threads * call->workspace_bytes;
}

/* Frees the mask context and the arena. Safe after any failure of the steps above. The
 * resolution and the kernels stay: a begun call (before its reserve) may be copied and each
 * copy run again with other tensors or positions (the ring runs every block that way). */
void attn_call_end(attn_call *call);

/* The entry points on a begun call (attn_call_begin done, options possibly adjusted): each
 * validates the tensors against call->options, plans, reserves, runs and ends the call.
 * attn_forward / attn_backward are attn_call_begin followed by these. */
attn_status attn_forward_run(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, attn_tensor *out, attn_tensor *lse,
                             attn_error *error);
attn_status attn_backward_run(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_tensor *out,
                              const attn_tensor *lse, const attn_tensor *dout, attn_tensor *dq,
                              attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                              attn_error *error);

/* Bytes rounded up to a whole number of 64-byte lines (false on overflow): the unit in which
 * workspaces are carved. */
static inline bool attn_call_round_bytes(size_t bytes, size_t *rounded) {
    if (bytes > SIZE_MAX - 63) return false;
    *rounded = (bytes + 63) / 64 * 64;
    return true;
}

#endif /* ATTN_CALL_H */
