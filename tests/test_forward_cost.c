/*
 * test_forward_cost.c — tile skipping really saves the work: on one thread, causal attention
 * costs about half of full attention and a sliding window of 64 a small fraction of it
 * (O(T · window), not O(T²)). Times are the best of several runs to resist a busy machine;
 * the bounds leave a wide margin (ideal ratios: 0.5 and ~0.07).
 */
#include <time.h>

#include "test_support.h"

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Best-of-`repeats` wall time of one attn_forward call. */
static double best_time(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                        attn_tensor *out, const attn_options *options, int repeats) {
    double best = INFINITY;
    for (int n = 0; n < repeats; ++n) {
        attn_error error = {0};
        const double start = seconds_now();
        attn_status status = attn_forward(q, k, v, options, out, NULL, &error);
        const double elapsed = seconds_now() - start;
        CHECK_STATUS(status, ATTN_OK, &error, "timed forward");
        if (elapsed < best) best = elapsed;
    }
    return best;
}

int main(void) {
    const int64_t T = 1536, D = 64;
    test_tensor q = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD), k = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD), o = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD);
    test_rng rng;
    test_rng_seed(&rng, 1);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);

    attn_options options = attn_options_default();
    options.num_threads = 1;
    const double full = best_time(&q.view, &k.view, &v.view, &o.view, &options, 3);
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    const double causal = best_time(&q.view, &k.view, &v.view, &o.view, &options, 3);
    options.window_left = 64;
    const double window = best_time(&q.view, &k.view, &v.view, &o.view, &options, 3);
    printf("T = %lld, D = %lld, 1 thread: full %.4f s, causal %.4f s (%.2f), window 64 %.4f s (%.3f)\n",
           (long long)T, (long long)D, full, causal, causal / full, window, window / full);
    CHECK(causal < 0.75 * full, "causal costs %.2f of full attention (expected about 0.5)", causal / full);
    CHECK(window < 0.25 * full, "window 64 costs %.3f of full attention (expected about 0.07)", window / full);
    test_tensor_free(&q);
    test_tensor_free(&k);
    test_tensor_free(&v);
    test_tensor_free(&o);
    return test_finish();
}
