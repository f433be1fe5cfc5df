/*
 * parallel.c — the worker pool behind attn_parallel_run (contract in parallel.h).
 *
 * One pool per process, created lazily, grown to the most helpers a region has asked for.
 * A region is published in one 64-bit word, `state`: its generation (high 32 bits), a closed
 * bit, its helper slots and the slots taken so far; a worker takes a slot with one
 * compare-and-swap on that word, so a worker that saw an older region, or arrives after the
 * caller closed this one, takes nothing. Workers spin briefly after a region (back-to-back
 * calls, as in decoding layer after layer, find them awake), then sleep on a condition
 * variable. After fork() the child's pool is empty and grows again on its first region.
 * With a region runner set (attn_set_region_runner), regions run on the runner's threads
 * instead; a forked child starts without it.
 */
#define _GNU_SOURCE
#include "parallel.h"

#include "attn.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a worker keeps looking for the next region before it sleeps, and how long a caller
 * spins for its helpers' ends before it yields its core between looks. */
enum { POOL_SPIN_NS = 20000, POOL_WAIT_SPINS = 4096 };

#define STATE_CLOSED ((uint64_t)1 << 31)
#define STATE_SLOTS_SHIFT 16
#define STATE_FIELD_MASK ((uint64_t)0x7fff)

static inline uint32_t state_generation(uint64_t s) { return (uint32_t)(s >> 32); }
static inline int state_slots(uint64_t s) { return (int)((s >> STATE_SLOTS_SHIFT) & STATE_FIELD_MASK); }
static inline int state_taken(uint64_t s) { return (int)(s & STATE_FIELD_MASK); }

typedef struct worker_pool {
    pthread_mutex_t lock;     /* guards workers, sleepers and the sleeping itself */
    pthread_cond_t wake;
    int workers;              /* threads created */
    int sleepers;             /* workers waiting on `wake` */
    int busy;                 /* atomic: 1 while a caller's region owns the pool */
    uint64_t state;           /* atomic: generation | closed | slots | taken */
    int finished;             /* atomic: helper bodies of the current region that returned */
    attn_parallel_body body;  /* the current region, written before `state` publishes it */
    void *context;
} worker_pool;

static worker_pool pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0,
                           NULL, NULL};
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static __thread bool in_region; /* this thread runs a body: a nested region runs alone */

/* The region runner of attn_set_region_runner (attn.h), read at the start of each region. */
typedef struct region_runner {
    attn_region_runner run;
    void *context;
} region_runner;

static region_runner runner; /* guarded by runner_lock */
static pthread_mutex_t runner_lock = PTHREAD_MUTEX_INITIALIZER;

/* The forked child has none of the parent's workers: it starts an empty pool. */
static void pool_after_fork_in_child(void) {
    runner_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    runner = (region_runner){NULL, NULL};
    pool.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    pool.wake = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    pool.workers = 0;
    pool.sleepers = 0;
    pool.busy = 0;
    pool.finished = 0;
    pool.state = (uint64_t)state_generation(pool.state) << 32;
}

static void pool_register_fork_handler(void) {
    pthread_atfork(NULL, NULL, pool_after_fork_in_child);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Waits for a region newer than generation `seen`; returns its state word. */
static uint64_t wait_for_region(uint32_t seen) {
    const uint64_t start = now_ns();
    for (int look = 1;; ++look) {
        const uint64_t s = __atomic_load_n(&pool.state, __ATOMIC_ACQUIRE);
        if (state_generation(s) != seen) return s;
        CPU_RELAX();
        if (look % 64 == 0 && now_ns() - start > POOL_SPIN_NS) break;
    }
    pthread_mutex_lock(&pool.lock);
    ++pool.sleepers;
    uint64_t s;
    while (state_generation(s = __atomic_load_n(&pool.state, __ATOMIC_ACQUIRE)) == seen)
        pthread_cond_wait(&pool.wake, &pool.lock);
    --pool.sleepers;
    pthread_mutex_unlock(&pool.lock);
    return s;
}

/* Takes one slot of region `s` (the state word as last seen) and runs its body; nothing when
 * the region closed, is full, or was followed by a newer one. */
static void take_slot(uint64_t s) {
    const uint32_t generation = state_generation(s);
    while (state_generation(s) == generation && !(s & STATE_CLOSED) &&
           state_taken(s) < state_slots(s)) {
        if (__atomic_compare_exchange_n(&pool.state, &s, s + 1, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            pool.body(pool.context, state_taken(s) + 1);
            __atomic_fetch_add(&pool.finished, 1, __ATOMIC_RELEASE);
            return;
        }
    }
}

static void *worker_main(void *argument) {
    uint32_t seen = (uint32_t)(uintptr_t)argument;
    in_region = true; /* a region opened by a body on a worker runs on that worker alone */
    for (;;) {
        const uint64_t s = wait_for_region(seen);
        seen = state_generation(s);
        take_slot(s);
    }
    return NULL;
}

/* Grows the pool towards `wanted` workers (the caller owns the pool); returns how many there
 * are. A thread that cannot be created leaves the pool smaller: fewer helpers, never an error. */
static int grow_pool(int wanted) {
    pthread_mutex_lock(&pool.lock);
    if (pool.workers < wanted) {
        sigset_t all, previous;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &previous); /* signals go to the caller's threads */
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        const uintptr_t seen = state_generation(__atomic_load_n(&pool.state, __ATOMIC_RELAXED));
        while (pool.workers < wanted) {
            pthread_t thread;
            if (pthread_create(&thread, &attributes, worker_main, (void *)seen) != 0) break;
            ++pool.workers;
        }
        pthread_attr_destroy(&attributes);
        pthread_sigmask(SIG_SETMASK, &previous, NULL);
    }
    const int workers = pool.workers;
    pthread_mutex_unlock(&pool.lock);
    return workers;
}

static void run_alone(attn_parallel_body body, void *context) {
    const bool was_in_region = in_region;
    in_region = true;
    body(context, 0);
    in_region = was_in_region;
}

void attn_set_region_runner(attn_region_runner run, void *context) {
    pthread_once(&pool_once, pool_register_fork_handler);
    pthread_mutex_lock(&runner_lock);
    runner = (region_runner){run, context};
    pthread_mutex_unlock(&runner_lock);
}

static region_runner current_runner(void) {
    pthread_mutex_lock(&runner_lock);
    const region_runner current = runner;
    pthread_mutex_unlock(&runner_lock);
    return current;
}

/* A region on the runner: every body marks its thread as in a region (nested regions run
 * alone there too). */
typedef struct runner_region {
    attn_parallel_body body;
    void *context;
    int threads;
} runner_region;

static void run_runner_slot(void *context, int worker) {
    const runner_region *region = context;
    if (worker < 0 || worker >= region->threads) return; /* outside the contract: no slot */
    const bool was_in_region = in_region;
    in_region = true;
    region->body(region->context, worker);
    in_region = was_in_region;
}

void attn_parallel_run(int threads, attn_parallel_body body, void *context) {
    pthread_once(&pool_once, pool_register_fork_handler);
    if (threads > 1 && !in_region) {
        const region_runner current = current_runner();
        if (current.run != NULL) {
            runner_region region = {body, context, threads};
            current.run(current.context, threads, run_runner_slot, &region);
            return;
        }
    }
    int expected = 0;
    if (threads <= 1 || in_region ||
        !__atomic_compare_exchange_n(&pool.busy, &expected, 1, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED)) {
        run_alone(body, context);
        return;
    }
    int helpers = grow_pool(threads - 1 < ATTN_MAX_THREADS ? threads - 1 : ATTN_MAX_THREADS);
    if (helpers > threads - 1) helpers = threads - 1;
    pool.body = body;
    pool.context = context;
    __atomic_store_n(&pool.finished, 0, __ATOMIC_RELAXED);
    const uint64_t generation =
        state_generation(__atomic_load_n(&pool.state, __ATOMIC_RELAXED)) + 1u;
    __atomic_store_n(&pool.state,
                     (generation << 32) | ((uint64_t)helpers << STATE_SLOTS_SHIFT),
                     __ATOMIC_RELEASE);
    pthread_mutex_lock(&pool.lock);
    if (pool.sleepers > 0) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_alone(body, context);

    const uint64_t closed = __atomic_fetch_or(&pool.state, STATE_CLOSED, __ATOMIC_ACQ_REL);
    const int taken = state_taken(closed);
    for (int look = 1; __atomic_load_n(&pool.finished, __ATOMIC_ACQUIRE) < taken; ++look) {
        if (look < POOL_WAIT_SPINS) CPU_RELAX();
        else sched_yield();
    }
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}

typedef struct parallel_loop {
    attn_parallel_items items;
    void *context;
    int64_t count, grain, next_run;
} parallel_loop;

static void loop_worker(void *context, int worker) {
    parallel_loop *loop = context;
    const int64_t runs = (loop->count + loop->grain - 1) / loop->grain;
    for (int64_t run; (run = attn_parallel_claim(&loop->next_run)) < runs;) {
        const int64_t first = run * loop->grain;
        loop->items(loop->context, first,
                    loop->count - first < loop->grain ? loop->count : first + loop->grain, worker);
    }
}

void attn_parallel_for(int threads, int64_t count, int64_t grain, attn_parallel_items items,
                       void *context) {
    if (count <= 0) return;
    if (grain < 1) grain = 1;
    parallel_loop loop = {items, context, count, grain, 0};
    const int64_t runs = (count + grain - 1) / grain;
    attn_parallel_run(runs < threads ? (int)runs : threads, loop_worker, &loop);
}

static int process_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)(online < ATTN_MAX_THREADS ? online : ATTN_MAX_THREADS) : 1;
}

/* OMP_NUM_THREADS's first value ("4" or "4,2"), or 0 when unset or not a count in range. */
static int environment_threads(void) {
    const char *text = getenv("OMP_NUM_THREADS");
    if (text == NULL) return 0;
    long value = 0;
    int digits = 0;
    for (; *text == ' '; ++text) {}
    for (; *text >= '0' && *text <= '9' && value <= ATTN_MAX_THREADS; ++text, ++digits)
        value = value * 10 + (*text - '0');
    for (; *text == ' '; ++text) {}
    if (digits == 0 || (*text != '\0' && *text != ',') || value < 1 || value > ATTN_MAX_THREADS)
        return 0;
    return (int)value;
}

static int default_threads;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void find_default_threads(void) {
    const int from_environment = environment_threads();
    const int cpus = process_cpus();
    default_threads = from_environment > 0 ? from_environment
                                           : (cpus < ATTN_MAX_THREADS ? cpus : ATTN_MAX_THREADS);
}

int attn_default_threads(int requested) {
    if (requested > 0) return requested;
    pthread_once(&default_once, find_default_threads);
    return default_threads;
}

/* ---- a thread pool beside attn whose workers spin ---- */

static int spinning_neighbours; /* atomic: attn_set_spinning_neighbours */
static int passive_wait_policy;
static pthread_once_t wait_policy_once = PTHREAD_ONCE_INIT;

static void read_wait_policy(void) {
    const char *policy = getenv("OMP_WAIT_POLICY");
    passive_wait_policy = policy != NULL && strcasecmp(policy, "passive") == 0;
}

void attn_set_spinning_neighbours(int present) {
    __atomic_store_n(&spinning_neighbours, present != 0, __ATOMIC_RELAXED);
}

int attn_parallel_neighbours_spin(void) {
    if (!__atomic_load_n(&spinning_neighbours, __ATOMIC_RELAXED)) return 0;
    if (current_runner().run != NULL) return 0; /* the regions run on those neighbours */
    pthread_once(&wait_policy_once, read_wait_policy);
    return !passive_wait_policy;
}

int attn_parallel_workers(void) {
    pthread_mutex_lock(&pool.lock);
    const int workers = pool.workers;
    pthread_mutex_unlock(&pool.lock);
    return workers;
}
