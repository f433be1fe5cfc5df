/*
 * parallel.h — attn's own worker pool, the library's source of threads (or an application's
 * pool, through attn_set_region_runner).
 *
 * A parallel region is a body run once per worker slot that starts: slot 0 on the calling
 * thread, slots 1.. on pool workers. The caller never waits for a worker that has not started:
 * when the caller's own body returns, the region closes, the slots not yet taken are never run,
 * and the caller waits only for the bodies that did start. A body therefore divides its work
 * through shared claims (attn_parallel_claim, or a locked structure), so that any set of
 * started slots, the caller alone included, completes all of it; which slot runs an item must
 * never change a result. Why a pool of attn's own (not OpenMP's): it survives fork (the child
 * starts fresh workers), a failure to create a thread means fewer workers (never an exit), and
 * a call whose helper cannot get a core (another process keeps it busy) finishes on the caller
 * instead of waiting for that helper (docs/architecture.md, "Threads").
 */
#ifndef ATTN_PARALLEL_H
#define ATTN_PARALLEL_H

#include <stdint.h>

/* The body of a region: `worker` in [0, threads), each started slot exactly once. */
typedef void (*attn_parallel_body)(void *context, int worker);

/* Runs `body` on up to `threads` slots (threads <= 1: the caller alone) and returns when every
 * started slot's body has returned. A region opened while the pool runs another caller's
 * region, or from inside a region, runs on its caller alone. */
void attn_parallel_run(int threads, attn_parallel_body body, void *context);

/* The next item of a shared counter (initialised to the first item): items are handed out
 * once each, in ascending order; an item >= the count means the work is all taken. */
static inline int64_t attn_parallel_claim(int64_t *next) {
    return __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
}

/* A run of items [first, end) of a parallel loop, on worker `worker`. */
typedef void (*attn_parallel_items)(void *context, int64_t first, int64_t end, int worker);

/* A parallel loop: items [0, count) in runs of `grain` (>= 1) items, each run claimed once,
 * in ascending order, by whichever worker of the region asks next. */
void attn_parallel_for(int threads, int64_t count, int64_t grain, attn_parallel_items items,
                       void *context);

/* The threads of a call that asks for `requested` (0 = the default): requested itself, or the
 * OMP_NUM_THREADS environment variable's first value when set and valid, else the CPUs this
 * process may run on; at most ATTN_MAX_THREADS. */
int attn_default_threads(int requested);

/* Workers the pool has created so far (tests: a forked child starts with none). */
int attn_parallel_workers(void);

/* Whether attn_set_spinning_neighbours (attn.h) said that another pool's workers spin on the
 * cores between their regions, and OMP_WAIT_POLICY does not make them sleep at once. */
int attn_parallel_neighbours_spin(void);

#endif /* ATTN_PARALLEL_H */
