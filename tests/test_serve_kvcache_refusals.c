/*
 * test_serve_kvcache_refusals.c — attn_forward_with_kvcache refuses a call whose mask leaves
 * a query row of some sequence with no key (options.empty_rows = ERROR) before it writes
 * anything: out, lse and the caller's cache (and an append into it) stay bitwise as they were,
 * on the decoding path (Tq <= 16) and on the prefill path (attn_forward per sequence), also
 * when the empty row is in a later sequence than rows that would be fine. The same calls
 * under ZERO, and calls with no empty row, are compared with attn_reference_forward run on
 * each sequence's tokens. A prefill under execution.memory_limit_bytes is refused (by the
 * attention of its longest sequence, which runs first) with out untouched, whatever the
 * limit, and the first limit that fits gives the unlimited call's result bitwise. Dropout is
 * refused on both paths, before the append.
 */
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { B = 2, HQ = 4, HKV = 2, D = 8, S_MAX = 48 };
static const float sentinel = 1234.5f;

typedef struct refusal_case {
    const char *name;
    int64_t Tq, Tnew;
    int32_t seqlens[B];
    int causal, window;
    int64_t window_left, window_right;
    attn_empty_rows policy;
    float dropout;
    attn_status expected;
    int64_t empty_b, empty_i; /* the first empty row the message must name (-1: dropout) */
} refusal_case;

static const refusal_case cases[] = {
    {"prefill, causal, sequence 1 shorter than Tq", 20, 0, {40, 10}, 1, 0, -1, -1,
     ATTN_EMPTY_ROWS_ERROR, 0.0f, ATTN_ERROR_EMPTY_ROW, 1, 0},
    {"prefill with append, sequence 1 shorter than Tq", 20, 2, {30, 5}, 1, 0, -1, -1,
     ATTN_EMPTY_ROWS_ERROR, 0.0f, ATTN_ERROR_EMPTY_ROW, 1, 0},
    {"prefill, sequence 0 the short one", 18, 0, {9, 40}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ERROR, 0.0f,
     ATTN_ERROR_EMPTY_ROW, 0, 0},
    {"decode, causal", 4, 0, {8, 2}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ERROR, 0.0f, ATTN_ERROR_EMPTY_ROW,
     1, 0},
    {"decode with append", 4, 1, {8, 2}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ERROR, 0.0f,
     ATTN_ERROR_EMPTY_ROW, 1, 0},
    {"decode, window 0/0 without causal", 3, 0, {5, 1}, 0, 1, 0, 0, ATTN_EMPTY_ROWS_ERROR, 0.0f,
     ATTN_ERROR_EMPTY_ROW, 1, 0},
    {"prefill, causal, ZERO policy", 20, 0, {40, 10}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ZERO, 0.0f,
     ATTN_OK, 0, 0},
    {"decode with append, ZERO policy", 4, 1, {8, 2}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ZERO, 0.0f,
     ATTN_OK, 0, 0},
    {"prefill, causal, no empty row", 20, 2, {40, 18}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ERROR, 0.0f,
     ATTN_OK, 0, 0},
    {"prefill with dropout", 20, 2, {40, 18}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ZERO, 0.1f,
     ATTN_ERROR_INVALID_ARGUMENT, -1, 0},
    {"decode with append and dropout", 4, 1, {8, 3}, 1, 0, -1, -1, ATTN_EMPTY_ROWS_ZERO, 0.1f,
     ATTN_ERROR_INVALID_ARGUMENT, -1, 0},
    {"decode, window 2/0, no empty row", 4, 1, {8, 3}, 0, 1, 2, 0, ATTN_EMPTY_ROWS_ERROR, 0.0f,
     ATTN_OK, 0, 0},
};

/* Sequence b's tokens [0, total) of a contiguous [B, S_MAX, HKV, D] cache as [1, total, HKV, D]. */
static attn_tensor sequence_keys(const test_tensor *cache, int64_t b, int64_t total) {
    attn_tensor view = cache->view;
    view.data = (float *)cache->view.data + b * cache->view.stride[0];
    view.shape[0] = 1, view.shape[1] = total;
    return view;
}

/* After a successful call: out and lse of each sequence against attn_reference_forward. */
static void compare_with_reference(const refusal_case *c, const attn_options *options,
                                   test_tensor *q, test_tensor *kc, test_tensor *vc,
                                   test_tensor *out, test_tensor *lse) {
    for (int64_t b = 0; b < B; ++b) {
        const int64_t total = c->seqlens[b] + c->Tnew;
        attn_tensor k = sequence_keys(kc, b, total), v = sequence_keys(vc, b, total);
        attn_tensor qb = q->view, ob = out->view, lb = lse->view;
        qb.data = (float *)q->view.data + b * q->view.stride[0], qb.shape[0] = 1;
        ob.data = (float *)out->view.data + b * out->view.stride[0], ob.shape[0] = 1;
        lb.data = (float *)lse->view.data + b * lse->view.stride[0], lb.shape[0] = 1;
        test_tensor ro = test_tensor_new(1, c->Tq, HQ, D, TEST_LAYOUT_BTHD);
        const int64_t lse_shape[3] = {1, HQ, c->Tq};
        test_tensor rl = test_tensor_new_shape(3, lse_shape);
        attn_error error = {0};
        CHECK_STATUS(attn_reference_forward(&qb, &k, &v, options, &ro.view, &rl.view, &error),
                     ATTN_OK, &error, "%s: reference of sequence %lld", c->name, (long long)b);
        CHECK(test_max_relative_error(&ob, &ro.view) < 2e-5, "%s: sequence %lld O", c->name,
              (long long)b);
        CHECK(test_max_relative_error(&lb, &rl.view) < 2e-5, "%s: sequence %lld LSE", c->name,
              (long long)b);
        test_tensor_free(&ro);
        test_tensor_free(&rl);
    }
}

static void run_case(const refusal_case *c, test_rng *rng) {
    test_tensor q = test_tensor_new(B, c->Tq, HQ, D, TEST_LAYOUT_BTHD);
    test_tensor kc = test_tensor_new(B, S_MAX, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor vc = test_tensor_new(B, S_MAX, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor kn = test_tensor_new(B, c->Tnew > 0 ? c->Tnew : 1, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor vn = test_tensor_new(B, c->Tnew > 0 ? c->Tnew : 1, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(B, c->Tq, HQ, D, TEST_LAYOUT_BTHD);
    const int64_t lse_shape[3] = {B, HQ, c->Tq};
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_tensor_fill_normal(&q, rng, 1.0f);
    test_tensor_fill_normal(&kc, rng, 1.0f);
    test_tensor_fill_normal(&vc, rng, 1.0f);
    test_tensor_fill_normal(&kn, rng, 1.0f);
    test_tensor_fill_normal(&vn, rng, 1.0f);
    test_tensor_fill_all(&out, sentinel);
    test_tensor_fill_all(&lse, sentinel);
    const size_t cache_bytes = (size_t)kc.allocation_floats * sizeof(float);
    float *k_before = malloc(cache_bytes), *v_before = malloc(cache_bytes);
    memcpy(k_before, kc.allocation, cache_bytes);
    memcpy(v_before, vc.allocation, cache_bytes);

    attn_options options = {0};
    options.causal = c->causal, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.window = c->window, options.window_left = c->window_left;
    options.window_right = c->window_right, options.empty_rows = c->policy;
    options.dropout_p = c->dropout;
    attn_kv_cache_view view = {0};
    view.k_cache = &kc.view, view.v_cache = &vc.view, view.cache_seqlens = c->seqlens;
    attn_kv_append append = {&kn.view, &vn.view, NULL, NULL, ATTN_ROPE_HALF};
    attn_execution execution = {0};
    execution.num_threads = 2;
    attn_error error = {0};
    attn_status status = attn_forward_with_kvcache(&q.view, &view, c->Tnew > 0 ? &append : NULL,
                                                   &options, &out.view, &lse.view, &execution,
                                                   &error);
    CHECK_STATUS(status, c->expected, &error, "%s", c->name);
    if (c->expected != ATTN_OK) {
        int untouched = 1;
        for (int64_t n = 0; n < out.allocation_floats; ++n) untouched &= out.allocation[n] == sentinel;
        for (int64_t n = 0; n < lse.allocation_floats; ++n) untouched &= lse.allocation[n] == sentinel;
        CHECK(untouched, "%s: out and lse untouched by the refused call", c->name);
        CHECK(memcmp(k_before, kc.allocation, cache_bytes) == 0 &&
                  memcmp(v_before, vc.allocation, cache_bytes) == 0,
              "%s: cache untouched by the refused call", c->name);
        char expected_row[64] = "options.dropout_p"; /* empty_b < 0: the option is named */
        if (c->empty_b >= 0)
            snprintf(expected_row, sizeof expected_row, "b = %lld, h = 0, i = %lld",
                     (long long)c->empty_b, (long long)c->empty_i);
        CHECK(strstr(error.message, expected_row) != NULL, "%s: message '%s' names %s", c->name,
              error.message, expected_row);
    } else if (status == ATTN_OK) {
        compare_with_reference(c, &options, &q, &kc, &vc, &out, &lse);
    }
    free(k_before);
    free(v_before);
    test_tensor_free(&q);
    test_tensor_free(&kc);
    test_tensor_free(&vc);
    test_tensor_free(&kn);
    test_tensor_free(&vn);
    test_tensor_free(&out);
    test_tensor_free(&lse);
}

/* Memory limits from 4 KiB up, in 4 KiB steps, on a prefill whose middle sequence is the
 * longest: each call is refused with out untouched, until one fits. */
static void test_memory_limits(test_rng *rng) {
    enum { SEQUENCES = 3, CAPACITY = 600, TQ = 40 };
    test_tensor q = test_tensor_new(SEQUENCES, TQ, HQ, D, TEST_LAYOUT_BTHD);
    test_tensor kc = test_tensor_new(SEQUENCES, CAPACITY, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor vc = test_tensor_new(SEQUENCES, CAPACITY, HKV, D, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(SEQUENCES, TQ, HQ, D, TEST_LAYOUT_BTHD);
    test_tensor unlimited = test_tensor_new(SEQUENCES, TQ, HQ, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, rng, 1.0f), test_tensor_fill_normal(&kc, rng, 1.0f);
    test_tensor_fill_normal(&vc, rng, 1.0f);
    const int32_t seqlens[SEQUENCES] = {50, 590, 200};
    attn_kv_cache_view view = {0};
    view.k_cache = &kc.view, view.v_cache = &vc.view, view.cache_seqlens = seqlens;
    attn_execution execution = {0};
    execution.num_threads = 2;
    attn_error error = {0};
    CHECK_STATUS(attn_forward_with_kvcache(&q.view, &view, NULL, NULL, &unlimited.view, NULL,
                                           &execution, &error),
                 ATTN_OK, &error, "memory limits: the unlimited call");
    int refusals = 0, written = 0, named_longest = 0;
    attn_status status = ATTN_ERROR_MEMORY_LIMIT;
    for (size_t limit = 4096; status == ATTN_ERROR_MEMORY_LIMIT && limit < ((size_t)64 << 20);
         limit += 4096) {
        test_tensor_fill_all(&out, sentinel);
        execution.memory_limit_bytes = limit;
        status = attn_forward_with_kvcache(&q.view, &view, NULL, NULL, &out.view, NULL,
                                           &execution, &error);
        if (status != ATTN_ERROR_MEMORY_LIMIT) break;
        ++refusals;
        for (int64_t n = 0; n < out.allocation_floats; ++n) written |= out.allocation[n] != sentinel;
        named_longest |= strstr(error.message, "sequence 1:") != NULL;
    }
    CHECK_STATUS(status, ATTN_OK, &error, "memory limits: a limit that fits");
    CHECK(refusals > 0 && named_longest, "memory limits: %d refusals, some by the longest "
          "sequence's attention", refusals);
    CHECK(!written, "memory limits: every refusal left out untouched");
    CHECK(test_bitwise_equal(&out.view, &unlimited.view), "memory limits: the first call that "
          "fits equals the unlimited one bitwise");
    test_tensor_free(&q), test_tensor_free(&kc), test_tensor_free(&vc);
    test_tensor_free(&out), test_tensor_free(&unlimited);
}

int main(void) {
    test_rng rng;
    test_rng_seed(&rng, 37);
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; ++n) run_case(&cases[n], &rng);
    test_memory_limits(&rng);
    return test_finish();
}
