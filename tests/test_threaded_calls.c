/*
 * test_threaded_calls.c — the library is safe to call from many application threads at once:
 * 8 pthreads call attn_forward, attn_backward and attn_decode concurrently (1000 calls in
 * all, interleaved), each call with 1 or 2 threads (execution.num_threads; the pool runs one
 * region at a time, a concurrent one on its caller alone), on shared read-only inputs (one KV
 * cache read by every decode) and their own outputs. Every result is checked against the naive
 * references (attn_reference_forward / _backward / _decode, within 1e-5) and must equal,
 * bitwise, the result of the same call made alone before the threads start (results never
 * depend on threads or on other calls). Runs under ThreadSanitizer in CI (label "threaded"),
 * which must report nothing.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum {
    APPLICATION_THREADS = 8,
    CALLS = 1000,
    B = 1, T = 24, HQ = 4, HKV = 2, D = 16,          /* forward / backward */
    SEQUENCES = 2, CACHED = 40, DECODE_QUERIES = 2   /* decode */
};

/* Shared, read-only while the threads run. */
static test_tensor q, k, v, dout;            /* [B, T, H, D] */
static test_tensor decode_q;                 /* [SEQUENCES, DECODE_QUERIES, HQ, D] */
static attn_kv_cache *cache;
static attn_options forward_options, decode_options;
/* The expected results: the call alone (for bitwise equality) and the references. */
static test_tensor alone_out, alone_lse, alone_dq, alone_dk, alone_dv, alone_decode_out;
static test_tensor reference_out, reference_lse, reference_dq, reference_dk, reference_dv;
static test_tensor reference_decode_out;

static test_tensor new_lse(int64_t batch, int64_t heads, int64_t length) {
    const int64_t shape[3] = {batch, heads, length};
    return test_tensor_new_shape(3, shape);
}

/* One thread's outputs and what it found. */
typedef struct worker {
    int index, first_call, calls;
    test_tensor out, lse, dq, dk, dv, decode_out;
    int failures, bitwise_failures, calls_made[3];
    double worst_error;
    attn_status first_bad_status;
    char first_message[ATTN_ERROR_MESSAGE_CAPACITY];
} worker;

static void note(worker *w, double error, int bitwise_equal) {
    if (!(error <= 1e-5)) ++w->failures;
    if (!bitwise_equal) ++w->bitwise_failures;
    if (!(error <= w->worst_error)) w->worst_error = error;
}

static void note_status(worker *w, attn_status status, const attn_error *error) {
    if (status == ATTN_OK) return;
    ++w->failures;
    if (w->first_bad_status == ATTN_OK) {
        w->first_bad_status = status;
        snprintf(w->first_message, sizeof w->first_message, "%s", error->message);
    }
}

static double worst3(double a, double b, double c) {
    double m = a > b ? a : b;
    return m > c ? m : c;
}

static void *run_worker(void *argument) {
    worker *w = argument;
    for (int n = 0; n < w->calls; ++n) {
        const int call = w->first_call + n;
        attn_execution execution = attn_execution_default();
        execution.num_threads = 1 + (call + w->index) % 2; /* its own team of 1 or 2 */
        attn_error error;
        attn_status status;
        const int kind = call % 3;
        ++w->calls_made[kind];
        if (kind == 0) {
            test_tensor_fill_all(&w->out, NAN);
            status = attn_forward(&q.view, &k.view, &v.view, &forward_options, &w->out.view,
                                  &w->lse.view, &execution, &error);
            note_status(w, status, &error);
            note(w,
                 worst3(test_max_relative_error(&w->out.view, &reference_out.view),
                        test_max_relative_error(&w->lse.view, &reference_lse.view), 0.0),
                 test_bitwise_equal(&w->out.view, &alone_out.view) &&
                     test_bitwise_equal(&w->lse.view, &alone_lse.view));
        } else if (kind == 1) {
            test_tensor_fill_all(&w->dq, NAN);
            status = attn_backward(&q.view, &k.view, &v.view, &alone_out.view, &alone_lse.view,
                                   &dout.view, &forward_options, &w->dq.view, &w->dk.view,
                                   &w->dv.view, NULL, &execution, &error);
            note_status(w, status, &error);
            note(w,
                 worst3(test_max_relative_error(&w->dq.view, &reference_dq.view),
                        test_max_relative_error(&w->dk.view, &reference_dk.view),
                        test_max_relative_error(&w->dv.view, &reference_dv.view)),
                 test_bitwise_equal(&w->dq.view, &alone_dq.view) &&
                     test_bitwise_equal(&w->dk.view, &alone_dk.view) &&
                     test_bitwise_equal(&w->dv.view, &alone_dv.view));
        } else {
            test_tensor_fill_all(&w->decode_out, NAN);
            status = attn_decode(cache, &decode_q.view, &decode_options, &w->decode_out.view,
                                 NULL, &execution, &error);
            note_status(w, status, &error);
            note(w, test_max_relative_error(&w->decode_out.view, &reference_decode_out.view),
                 test_bitwise_equal(&w->decode_out.view, &alone_decode_out.view));
        }
    }
    return NULL;
}

static void set_up(void) {
    test_rng rng;
    test_rng_seed(&rng, 99);
    q = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    k = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BHTD);
    v = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_PADDED);
    dout = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    decode_q = test_tensor_new(SEQUENCES, DECODE_QUERIES, HQ, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&dout, &rng, 1.0f);
    test_tensor_fill_normal(&decode_q, &rng, 1.0f);

    forward_options = attn_options_default();
    forward_options.causal = 1;
    forward_options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    forward_options.softcap = 8.0f;
    decode_options = forward_options;

    /* The cache: sequence 0 holds CACHED tokens, sequence 1 a shorter prefix. */
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = SEQUENCES;
    config.kv_heads = HKV;
    config.key_dim = D;
    config.value_dim = D;
    config.capacity = CACHED;
    config.page_size = 16;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "cache");
    test_tensor keys = test_tensor_new(1, CACHED, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor values = test_tensor_new(1, CACHED, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&keys, &rng, 1.0f);
    test_tensor_fill_normal(&values, &rng, 1.0f);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &keys.view, &values.view, &error), ATTN_OK,
                 &error, "append 0");
    attn_tensor prefix_keys = keys.view, prefix_values = values.view;
    prefix_keys.shape[1] = prefix_values.shape[1] = CACHED / 2 + 3;
    CHECK_STATUS(attn_kv_cache_append(cache, 1, &prefix_keys, &prefix_values, &error), ATTN_OK,
                 &error, "append 1");
    test_tensor_free(&keys), test_tensor_free(&values);

    /* The references, and every call made alone. */
    reference_out = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    reference_lse = new_lse(B, HQ, T);
    reference_dq = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    reference_dk = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BTHD);
    reference_dv = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BTHD);
    reference_decode_out = test_tensor_new(SEQUENCES, DECODE_QUERIES, HQ, D, TEST_LAYOUT_BTHD);
    alone_out = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    alone_lse = new_lse(B, HQ, T);
    alone_dq = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    alone_dk = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BTHD);
    alone_dv = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BTHD);
    alone_decode_out = test_tensor_new(SEQUENCES, DECODE_QUERIES, HQ, D, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &forward_options,
                                        &reference_out.view, &reference_lse.view, &error),
                 ATTN_OK, &error, "reference forward");
    CHECK_STATUS(attn_reference_backward(&q.view, &k.view, &v.view, &reference_out.view,
                                         &reference_lse.view, &dout.view, &forward_options,
                                         &reference_dq.view, &reference_dk.view,
                                         &reference_dv.view, NULL, &error),
                 ATTN_OK, &error, "reference backward");
    CHECK_STATUS(attn_reference_decode(cache, &decode_q.view, &decode_options,
                                       &reference_decode_out.view, NULL, &error),
                 ATTN_OK, &error, "reference decode");
    attn_execution one = attn_execution_default();
    one.num_threads = 1;
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &forward_options, &alone_out.view,
                              &alone_lse.view, &one, &error),
                 ATTN_OK, &error, "forward alone");
    CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &alone_out.view, &alone_lse.view,
                               &dout.view, &forward_options, &alone_dq.view, &alone_dk.view,
                               &alone_dv.view, NULL, &one, &error),
                 ATTN_OK, &error, "backward alone");
    CHECK_STATUS(attn_decode(cache, &decode_q.view, &decode_options, &alone_decode_out.view, NULL,
                             &one, &error),
                 ATTN_OK, &error, "decode alone");
    /* The references are independent oracles; the calls made alone must agree with them. */
    CHECK(test_max_relative_error(&alone_out.view, &reference_out.view) <= 1e-5 &&
              test_max_relative_error(&alone_dq.view, &reference_dq.view) <= 1e-5 &&
              test_max_relative_error(&alone_decode_out.view, &reference_decode_out.view) <= 1e-5,
          "calls made alone equal the references");
}

int main(void) {
    set_up();
    static worker workers[APPLICATION_THREADS];
    pthread_t threads[APPLICATION_THREADS];
    int started = 0;
    for (int t = 0; t < APPLICATION_THREADS; ++t) {
        worker *w = &workers[t];
        memset(w, 0, sizeof *w);
        w->index = t;
        w->first_call = t * (CALLS / APPLICATION_THREADS);
        w->calls = CALLS / APPLICATION_THREADS;
        w->out = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
        w->lse = new_lse(B, HQ, T);
        w->dq = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_PADDED);
        w->dk = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BTHD);
        w->dv = test_tensor_new(B, T, HKV, D, TEST_LAYOUT_BHTD);
        w->decode_out = test_tensor_new(SEQUENCES, DECODE_QUERIES, HQ, D, TEST_LAYOUT_BTHD);
    }
    for (int t = 0; t < APPLICATION_THREADS; ++t)
        if (pthread_create(&threads[t], NULL, run_worker, &workers[t]) == 0) ++started;
    CHECK(started == APPLICATION_THREADS, "started %d of %d application threads", started,
          APPLICATION_THREADS);
    for (int t = 0; t < started; ++t) pthread_join(threads[t], NULL);

    int total_calls = 0, kinds[3] = {0, 0, 0};
    double worst = 0.0;
    for (int t = 0; t < started; ++t) {
        const worker *w = &workers[t];
        for (int kind = 0; kind < 3; ++kind) {
            kinds[kind] += w->calls_made[kind];
            total_calls += w->calls_made[kind];
        }
        CHECK(w->failures == 0, "thread %d: %d results off the reference (worst %.3g)%s%s", t,
              w->failures, w->worst_error, w->first_bad_status != ATTN_OK ? "; first error: " : "",
              w->first_message);
        CHECK(w->bitwise_failures == 0, "thread %d: %d results differ from the call made alone",
              t, w->bitwise_failures);
        if (w->worst_error > worst) worst = w->worst_error;
    }
    CHECK(total_calls == CALLS, "%d calls made (expected %d)", total_calls, CALLS);
    printf("%d application threads, %d calls (%d forward, %d backward, %d decode), "
           "calls of 1-2 threads: worst error vs reference %.3g\n",
           started, total_calls, kinds[0], kinds[1], kinds[2], worst);

    for (int t = 0; t < APPLICATION_THREADS; ++t) {
        worker *w = &workers[t];
        test_tensor_free(&w->out), test_tensor_free(&w->lse), test_tensor_free(&w->dq);
        test_tensor_free(&w->dk), test_tensor_free(&w->dv), test_tensor_free(&w->decode_out);
    }
    test_tensor *shared[] = {&q, &k, &v, &dout, &decode_q, &alone_out, &alone_lse, &alone_dq,
                             &alone_dk, &alone_dv, &alone_decode_out, &reference_out,
                             &reference_lse, &reference_dq, &reference_dk, &reference_dv,
                             &reference_decode_out};
    for (size_t n = 0; n < sizeof shared / sizeof shared[0]; ++n) test_tensor_free(shared[n]);
    attn_kv_cache_destroy(cache);
    return test_finish();
}
