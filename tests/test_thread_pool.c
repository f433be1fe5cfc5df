/*
 * test_thread_pool.c — attn's worker pool (src/core/parallel.h) and what it promises callers:
 *   - a region runs each started slot once, every claimed item exactly once, for 1..8 threads,
 *     and a region opened inside a body runs on its caller alone;
 *   - fork: after the parent has run multi-threaded calls, a forked child starts with an empty
 *     pool and its calls (2 threads) finish and equal the parent's results bit for bit; the
 *     parent goes on calling after the fork (a child that hangs fails after 60 s);
 *   - a process that cannot create threads (address space limited in a child) still gets the
 *     right result, with status OK, from a call that asks for 64 threads;
 *   - threads chosen by work: a tiny call runs on one thread, a large one on every thread
 *     allowed, one between on as many as it has 60 us of work for (the estimate's rates, 50
 *     flop/ns and 8 bytes/ns, are restated here as the independent reference); beside a
 *     pool whose workers spin (attn_set_spinning_neighbours), 1 ms of work a thread, unless
 *     OMP_WAIT_POLICY is passive (checked in a child, which reads the variable first);
 *   - a region runner (attn_set_region_runner): regions run on its threads, any number of
 *     slots it starts gives the same results bit for bit, a nested region runs alone without
 *     it, spinning neighbours no longer limit the threads, a forked child runs without it,
 *     and NULL restores the own pool.
 * Every attention result is compared with the naive double-precision reference and bitwise
 * with the one-thread call.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "call/call.h"
#include "core/parallel.h"
#include "test_support.h"

enum { B = 2, T = 96, HQ = 8, HKV = 2, D = 32, MAX_SLOTS = 8, ITEMS = 1000 };

/* ThreadSanitizer cannot start threads in a child forked from a threaded process (it stops the
 * child): the fork checks run in the other builds. AddressSanitizer maps memory of its own on
 * every thread start, and stops the process when it cannot: the check under a limited address
 * space runs in the builds without it. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* ---- the region contract ---- */
typedef struct region_record {
    int64_t next;
    int slot_runs[MAX_SLOTS];
    int item_runs[ITEMS];
    int nested_worker; /* the worker index a nested region's body saw (0 expected) */
} region_record;

static void nested_body(void *context, int worker) { *(int *)context = worker; }

static void record_body(void *context, int worker) {
    region_record *record = context;
    __atomic_fetch_add(&record->slot_runs[worker], 1, __ATOMIC_RELAXED);
    for (int64_t item; (item = attn_parallel_claim(&record->next)) < ITEMS;)
        __atomic_fetch_add(&record->item_runs[item], 1, __ATOMIC_RELAXED);
    if (worker == 0) {
        int seen = -1;
        attn_parallel_run(4, nested_body, &seen);
        record->nested_worker = seen;
    }
}

static void check_regions(void) {
    for (int threads = 1; threads <= MAX_SLOTS; ++threads)
        for (int repeat = 0; repeat < 200; ++repeat) {
            region_record record;
            memset(&record, 0, sizeof record);
            attn_parallel_run(threads, record_body, &record);
            int bad_items = 0, bad_slots = 0;
            for (int i = 0; i < ITEMS; ++i) bad_items += record.item_runs[i] != 1;
            for (int s = 0; s < MAX_SLOTS; ++s)
                bad_slots += record.slot_runs[s] > (s < threads ? 1 : 0);
            if (repeat == 0 || bad_items || bad_slots || record.slot_runs[0] != 1 ||
                record.nested_worker != 0) {
                CHECK(bad_items == 0, "threads %d: every item run once (%d not)", threads,
                      bad_items);
                CHECK(bad_slots == 0 && record.slot_runs[0] == 1,
                      "threads %d: each slot at most once, the caller's once", threads);
                CHECK(record.nested_worker == 0, "threads %d: a nested region runs alone (%d)",
                      threads, record.nested_worker);
            }
        }
}

/* ---- attention calls ---- */
static test_tensor q, k, v;
static double reference_out[B * T * HQ * D];

static attn_status forward_with_threads(int threads, test_tensor *out) {
    attn_options options = {0};
    attn_execution execution = {0};
    execution.num_threads = threads;
    attn_error error;
    const attn_status status = attn_forward(&q.view, &k.view, &v.view, &options, &out->view,
                                            NULL, &execution, &error);
    if (status != ATTN_OK) fprintf(stderr, "attn_forward: %s\n", error.message);
    return status;
}

static void compute_reference(void) {
    const test_plain_shape shape = {T, T, HQ, HKV, D, D};
    static float dout[T * HQ * D]; /* zero: the gradients are not looked at */
    static double lse[HQ * T], dq[T * HQ * D], dk[T * HKV * D], dv[T * HKV * D];
    for (int64_t b = 0; b < B; ++b)
        test_plain_attention(&shape, T, (float *)q.view.data + b * T * HQ * D,
                             (float *)k.view.data + b * T * HKV * D,
                             (float *)v.view.data + b * T * HKV * D, dout,
                             reference_out + b * T * HQ * D, lse, dq, dk, dv);
}

static double reference_error(const test_tensor *out) {
    double worst = 0.0;
    const float *o = (const float *)out->view.data;
    for (int64_t i = 0; i < B * T * HQ * D; ++i) {
        const double e = fabs(o[i] - reference_out[i]) / (1.0 + fabs(reference_out[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* A call with `threads` threads: status OK, within 1e-5 of the reference, bitwise `alone`.
 * Returns 1 when all three hold. */
static int call_matches(int threads, const test_tensor *alone) {
    test_tensor out = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    const int ok = forward_with_threads(threads, &out) == ATTN_OK &&
                   reference_error(&out) <= 1e-5 && test_bitwise_equal(&out.view, &alone->view);
    test_tensor_free(&out);
    return ok;
}

/* Waits up to `seconds` for child `pid`; kills it then. Returns its exit code, or -1. */
static int wait_child(pid_t pid, int seconds) {
    const time_t start = time(NULL);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (time(NULL) - start > seconds) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void check_fork(const test_tensor *alone) {
    CHECK(call_matches(2, alone), "parent before fork, 2 threads");
    CHECK(attn_parallel_workers() >= 1, "the parent's pool has a worker (%d)",
          attn_parallel_workers());
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        int code = attn_parallel_workers() == 0 ? 0 : 10;
        for (int round = 0; round < 20 && code == 0; ++round)
            if (!call_matches(2, alone)) code = 20 + round;
        _exit(code);
    }
    CHECK(pid > 0, "fork succeeded");
    for (int round = 0; round < 20; ++round)
        if (!call_matches(2, alone)) {
            CHECK(0, "parent after fork, round %d", round);
            break;
        }
    const int code = pid > 0 ? wait_child(pid, 60) : -1;
    CHECK(code == 0, "forked child: empty pool, 20 calls of 2 threads right (exit %d; -1 = hung "
                     "or killed)", code);
}

/* In a child whose address space cannot hold 63 more thread stacks, 64 threads are asked for:
 * the pool creates what it can and the call is right. */
static void check_thread_creation_failure(const test_tensor *alone) {
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        long pages = 0;
        FILE *statm = fopen("/proc/self/statm", "r");
        if (statm == NULL || fscanf(statm, "%ld", &pages) != 1) _exit(30);
        fclose(statm);
        const rlim_t bytes = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)24 << 20);
        const struct rlimit limit = {bytes, bytes};
        if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(31);
        int code = call_matches(64, alone) ? 0 : 32;
        if (code == 0 && attn_parallel_workers() >= 63) code = 33; /* the limit did not bite */
        _exit(code);
    }
    const int code = pid > 0 ? wait_child(pid, 60) : -1;
    CHECK(code == 0, "64 threads asked where few can be made: right result, status OK, fewer "
                     "workers (exit %d)", code);
}

static void check_threads_by_work(void) {
    attn_execution execution = {0};
    execution.num_threads = 4;
    attn_call call;
    attn_error error;
    CHECK_STATUS(attn_call_begin(&call, NULL, &execution, &error), ATTN_OK, &error, "begin");
    /* First, before this process reads OMP_WAIT_POLICY: with it passive, the neighbours'
     * workers sleep, and a child that sets it sees no change. */
    const pid_t child = fork();
    if (child == 0) {
        setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        attn_set_spinning_neighbours(1);
        attn_call passive;
        attn_error child_error;
        if (attn_call_begin(&passive, NULL, &execution, &child_error) != ATTN_OK) _exit(2);
        const int threads = attn_call_threads_for_work(&passive, 100, 5e6, 8e5);
        attn_call_end(&passive);
        _exit(threads == 3 ? 0 : 10 + threads);
    }
    const int code = wait_child(child, 60);
    CHECK(code == 0, "OMP_WAIT_POLICY=passive: spinning neighbours change nothing (child exit %d)",
          code);
    CHECK(attn_call_threads_for_work(&call, 100, 1e6, 2e5) == 1, "1 Mflop + 200 kB (45 us): 1 thread");
    CHECK(attn_call_threads_for_work(&call, 100, 1e10, 1e9) == 4, "10 Gflop: the 4 allowed");
    /* 5 Mflop (100 us) + 800 kB (100 us): 200 us, three threads' worth */
    CHECK(attn_call_threads_for_work(&call, 100, 5e6, 8e5) == 3, "200 us of work: 3 threads (%d)",
          attn_call_threads_for_work(&call, 100, 5e6, 8e5));
    CHECK(attn_call_threads_for_work(&call, 2, 1e10, 1e9) == 2, "2 items: 2 threads");
    CHECK(fabs(attn_call_one_thread_ns(1e6, 8e5) - (1e6 / 50.0 + 8e5 / 8.0)) < 1e-6,
          "one-thread estimate");
    attn_set_spinning_neighbours(1);
    CHECK(attn_call_threads_for_work(&call, 100, 5e6, 8e5) == 1,
          "200 us of work beside spinning workers: 1 thread");
    /* 100 Mflop (2 ms) + 8 MB (1 ms): 3 ms, three threads' worth at 1 ms each */
    CHECK(attn_call_threads_for_work(&call, 100, 1e8, 8e6) == 3,
          "3 ms of work beside spinning workers: 3 threads (%d)",
          attn_call_threads_for_work(&call, 100, 1e8, 8e6));
    CHECK(attn_call_threads_for_work(&call, 100, 1e10, 1e9) == 4,
          "10 Gflop beside spinning workers: the 4 allowed");
    attn_set_spinning_neighbours(0);
    CHECK(attn_call_threads_for_work(&call, 100, 5e6, 8e5) == 3,
          "neighbours gone: 200 us of work on 3 threads again");
    attn_call_end(&call);

}

/* ---- a region runner: each slot on a thread of its own, in reverse order ---- */
typedef struct test_runner {
    int most;  /* slots it starts: min(threads, most) */
    int calls; /* regions it ran (atomic) */
} test_runner;

typedef struct runner_slot {
    attn_region_body body;
    void *context;
    int worker;
} runner_slot;

static void *runner_thread(void *argument) {
    runner_slot *slot = argument;
    slot->body(slot->context, slot->worker);
    return NULL;
}

static void run_on_threads(void *runner_context, int threads, attn_region_body body,
                           void *body_context) {
    test_runner *runner = runner_context;
    __atomic_fetch_add(&runner->calls, 1, __ATOMIC_RELAXED);
    const int slots = threads < runner->most ? threads : runner->most;
    pthread_t thread[MAX_SLOTS];
    runner_slot slot[MAX_SLOTS];
    for (int w = slots - 1; w >= 0; --w) {
        slot[w] = (runner_slot){body, body_context, w};
        if (pthread_create(&thread[w], NULL, runner_thread, &slot[w]) != 0) {
            runner_thread(&slot[w]);
            thread[w] = pthread_self();
        }
    }
    for (int w = 0; w < slots; ++w)
        if (!pthread_equal(thread[w], pthread_self())) pthread_join(thread[w], NULL);
}

static void check_region_runner(const test_tensor *alone) {
    test_runner runner = {3, 0};
    attn_set_region_runner(run_on_threads, &runner);
    for (int threads = 2; threads <= 5; ++threads)
        CHECK(call_matches(threads, alone), "runner of 3 slots, %d threads: bitwise one thread",
              threads);
    CHECK(runner.calls > 0, "the calls' regions ran on the runner (%d)", runner.calls);
    runner.most = 1;
    CHECK(call_matches(4, alone), "runner of 1 slot, 4 threads: bitwise one thread");
    runner.most = MAX_SLOTS;
    region_record record;
    memset(&record, 0, sizeof record);
    const int before = runner.calls;
    attn_parallel_run(5, record_body, &record);
    int bad_items = 0, runs = 0;
    for (int i = 0; i < ITEMS; ++i) bad_items += record.item_runs[i] != 1;
    for (int s = 0; s < MAX_SLOTS; ++s) runs += record.slot_runs[s];
    CHECK(bad_items == 0 && runs == 5 && record.slot_runs[0] == 1,
          "a region of 5 on the runner: every item once, 5 slots (%d items wrong, %d slots)",
          bad_items, runs);
    CHECK(runner.calls == before + 1 && record.nested_worker == 0,
          "a nested region runs alone, not on the runner (%d runs, worker %d)",
          runner.calls - before, record.nested_worker);

    attn_execution execution = {0};
    execution.num_threads = 4;
    attn_call call;
    attn_error error;
    CHECK_STATUS(attn_call_begin(&call, NULL, &execution, &error), ATTN_OK, &error, "begin");
    attn_set_spinning_neighbours(1);
    CHECK(attn_call_threads_for_work(&call, 100, 5e6, 8e5) == 3,
          "runner set: spinning neighbours no longer limit 200 us of work (%d threads)",
          attn_call_threads_for_work(&call, 100, 5e6, 8e5));
    attn_set_spinning_neighbours(0);
    attn_call_end(&call);

    if (!UNDER_TSAN) {
        fflush(NULL);
        const pid_t pid = fork();
        if (pid == 0) {
            const int calls = runner.calls;
            int code = call_matches(2, alone) ? 0 : 10;
            if (code == 0 && runner.calls != calls) code = 20; /* the child ran no region on it */
            _exit(code);
        }
        const int code = pid > 0 ? wait_child(pid, 60) : -1;
        CHECK(code == 0, "forked child: its calls on attn's own pool (exit %d)", code);
    }
    attn_set_region_runner(NULL, NULL);
    const int calls = runner.calls;
    CHECK(call_matches(2, alone) && runner.calls == calls, "runner NULL: the own pool again");
}

int main(void) {
    /* This test checks the choice by work, which the other tests switch off (CMakeLists.txt). */
    unsetenv("ATTN_THREADS_BY_WORK");
    check_threads_by_work();
    check_regions();
    test_rng rng;
    test_rng_seed(&rng, 2027);
    q = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    k = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BTHD);
    v = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    compute_reference();
    test_tensor alone = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    CHECK(forward_with_threads(1, &alone) == ATTN_OK && reference_error(&alone) <= 1e-5,
          "one thread: within 1e-5 of the reference (%.3g)", reference_error(&alone));
    for (int threads = 2; threads <= 5; ++threads)
        CHECK(call_matches(threads, &alone), "%d threads: bitwise the one-thread result", threads);
    check_region_runner(&alone);
    if (UNDER_TSAN) {
        printf("fork checks skipped: ThreadSanitizer does not run threads in a forked child\n");
    } else {
        check_fork(&alone);
        if (UNDER_ASAN)
            printf("thread creation under a limited address space skipped: AddressSanitizer\n");
        else
            check_thread_creation_failure(&alone);
    }
    test_tensor_free(&alone);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
    return test_finish();
}
