/*
 * call.c — the prepared attention call (call.h): resolution, validation, kernels, thread
 * count and the one working-memory arena of a call.
 */
#include "call.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../backward/backward.h"
#include "../core/internal.h"
#include "../core/parallel.h"

attn_status attn_call_begin(attn_call *call, const attn_options *options,
                            const attn_execution *execution, attn_error *error) {
    memset(call, 0, sizeof *call);
    attn_status status = attn_options_resolve(options, &call->options, error);
    if (status == ATTN_OK) status = attn_execution_resolve(execution, &call->execution, error);
    if (status == ATTN_OK) status = attn_kernels_select(call->execution.kernel, &call->kernels, error);
    return status;
}

attn_status attn_call_validate_forward(attn_call *call, const attn_tensor *q,
                                       const attn_tensor *k, const attn_tensor *v,
                                       const attn_tensor *out, const attn_tensor *lse,
                                       attn_error *error) {
    attn_status status =
        attn_validate_call_typed(q, k, v, &call->options, out, lse, &call->problem, error);
    if (status != ATTN_OK) return status;
    return attn_check_forward_aliasing(q, k, v, out, lse, &call->options, &call->problem, error);
}

attn_status attn_call_validate_backward(attn_call *call, const attn_tensor *q,
                                        const attn_tensor *k, const attn_tensor *v,
                                        const attn_tensor *out, const attn_tensor *lse,
                                        const attn_tensor *dout, const attn_tensor *dq,
                                        const attn_tensor *dk, const attn_tensor *dv,
                                        const attn_tensor *dbias, attn_error *error) {
    attn_status status = attn_backward_validate(q, k, v, out, lse, dout, &call->options, dq, dk,
                                                dv, dbias, true, &call->problem, error);
    if (status != ATTN_OK) return status;
    return attn_check_backward_aliasing(q, k, v, out, lse, dout, dq, dk, dv, dbias, &call->options,
                                        &call->problem, error);
}

int attn_call_thread_count(const attn_call *call, int64_t work_items) {
    int threads = attn_thread_count(call->execution.num_threads);
    if (work_items > 0 && threads > work_items) threads = (int)work_items;
    return threads < 1 ? 1 : threads;
}

/* The tunables of attn_call_threads_for_work: a small call's rates on one core, and the
 * least work worth a thread (the pool's wake and join cost a few microseconds); beside a
 * pool whose workers spin between its regions (attn_set_spinning_neighbours: PyTorch's
 * OpenMP threads), a helper shares a core with one of them after every operator, and below
 * about a millisecond of work per thread a second thread made calls slower, not faster
 * (docs/architecture.md, "Threads"). */
#define ATTN_ONE_THREAD_FLOPS_PER_NS 50.0
#define ATTN_ONE_THREAD_BYTES_PER_NS 8.0
#define ATTN_MIN_THREAD_NS 60000.0
#define ATTN_MIN_THREAD_NS_BESIDE_OPENMP 1000000.0

double attn_call_one_thread_ns(double flops, double bytes) {
    return flops / ATTN_ONE_THREAD_FLOPS_PER_NS + bytes / ATTN_ONE_THREAD_BYTES_PER_NS;
}

static int threads_by_work_disabled;
static pthread_once_t threads_by_work_once = PTHREAD_ONCE_INIT;

static void read_threads_by_work(void) {
    const char *text = getenv("ATTN_THREADS_BY_WORK");
    threads_by_work_disabled = text != NULL && strcmp(text, "0") == 0;
}

int64_t attn_call_threads_worth(double flops, double bytes) {
    const double worth = attn_call_one_thread_ns(flops, bytes) / ATTN_MIN_THREAD_NS;
    if (!(worth < 1e15)) return INT64_MAX / 2; /* NaN or huge: every thread is worth it */
    return worth < 1.0 ? 1 : (int64_t)worth;
}

int attn_call_threads_for_work(const attn_call *call, int64_t work_items, double flops,
                               double bytes) {
    const int threads = attn_call_thread_count(call, work_items);
    pthread_once(&threads_by_work_once, read_threads_by_work);
    if (threads_by_work_disabled || threads == 1) return threads;
    const double one_thread_ns = attn_call_one_thread_ns(flops, bytes);
    double worth = one_thread_ns / ATTN_MIN_THREAD_NS;
    if (worth >= 2.0 && attn_parallel_neighbours_spin())
        worth = one_thread_ns / ATTN_MIN_THREAD_NS_BESIDE_OPENMP;
    if (!(worth < (double)threads)) return threads; /* NaN estimates keep every thread */
    return worth < 1.0 ? 1 : (int)worth;
}

/* Working memory up to ARENA_CACHE_BYTES is kept by the calling thread for its next call:
 * small calls (a decode step, a short chunk) then allocate nothing. A nested call on the same
 * thread (varlen's sequences, the ring's blocks) allocates its own. Freed at thread exit. */
enum { ARENA_CACHE_BYTES = 1 << 20 };

typedef struct arena_cache {
    char *memory;
    size_t bytes;
    bool in_use;
} arena_cache;

static __thread arena_cache thread_arena;
static pthread_key_t arena_key;
static pthread_once_t arena_key_once = PTHREAD_ONCE_INIT;

static void free_thread_arena(void *memory) { attn_aligned_free(memory); }
static void make_arena_key(void) { pthread_key_create(&arena_key, free_thread_arena); }

/* `bytes` of 64-byte aligned memory from this thread's cache, or NULL (then the caller
 * allocates). */
static char *take_cached_arena(size_t bytes) {
    if (bytes > ARENA_CACHE_BYTES || thread_arena.in_use) return NULL;
    if (thread_arena.bytes < bytes) {
        pthread_once(&arena_key_once, make_arena_key);
        char *memory = attn_aligned_alloc(bytes);
        if (memory == NULL) return NULL;
        attn_aligned_free(thread_arena.memory);
        thread_arena.memory = memory;
        thread_arena.bytes = bytes;
        pthread_setspecific(arena_key, memory);
    }
    thread_arena.in_use = true;
    return thread_arena.memory;
}

attn_status attn_call_reserve(attn_call *call, int threads, size_t workspace_bytes,
                              size_t shared_bytes, const char *who, attn_error *error) {
    size_t per_thread, workspaces, total;
    if (threads < 1) threads = 1;
    if (!attn_call_round_bytes(workspace_bytes, &per_thread) ||
        !attn_mul_size(per_thread, (size_t)threads, &workspaces) ||
        !attn_add_size(workspaces, shared_bytes, &total))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "%s: working memory of %d threads x %zu bytes + %zu shared overflows",
                         who, threads, workspace_bytes, shared_bytes);
    const size_t limit = call->execution.memory_limit_bytes;
    if (limit > 0 && total > limit)
        return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                         "execution.memory_limit_bytes = %zu: %s needs %zu bytes of working "
                         "memory (%d threads x %zu + %zu shared)",
                         limit, who, total, threads, per_thread, shared_bytes);
    call->threads = threads;
    call->workspace_bytes = per_thread;
    call->shared_bytes = shared_bytes;
    attn_status status = attn_mask_context_init(&call->mask, &call->options, &call->problem, error);
    if (status != ATTN_OK) return status;
    call->mask_ready = true;
    if (total == 0) return ATTN_OK;
    call->arena = take_cached_arena(total);
    call->arena_cached = call->arena != NULL;
    if (call->arena == NULL) call->arena = attn_aligned_alloc(total);
    if (call->arena == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "%s: %zu bytes of working memory (%d threads x %zu + %zu shared) could "
                         "not be allocated",
                         who, total, threads, per_thread, shared_bytes);
    return ATTN_OK;
}

void attn_call_end(attn_call *call) {
    if (call->mask_ready) attn_mask_context_free(&call->mask);
    call->mask_ready = false;
    if (call->arena_cached) thread_arena.in_use = false;
    else attn_aligned_free(call->arena);
    call->arena = NULL;
    call->arena_cached = false;
    call->threads = 0;
    call->workspace_bytes = call->shared_bytes = 0;
}
