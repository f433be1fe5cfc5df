/*
 * test_forward_small.c — attn_forward's small calls (at most ATTN_FORWARD_SMALL_ROWS query rows
 * per KV head), which run on the decode loop reading K and V in place: a table of
 * configurations (odd sizes, Tq != Tk, GQA and MQA, Dk != Dv, causal of both alignments,
 * windows, soft-cap, ALiBi, padded query rows, empty rows under each policy) on three memory
 * layouts, each checked to take that path, against the naive double-precision reference
 * (attn_reference_forward) within 1e-5, and bitwise the same on 1 and 2 threads.
 */
#include <math.h>
#include <string.h>

#include "call/call.h"
#include "forward/forward_small.h"
#include "test_support.h"

typedef struct small_case {
    const char *name;
    int64_t B, Tq, Tk, Hq, Hkv, Dk, Dv;
    int causal;                /* 0, or 1 with `alignment` */
    attn_alignment alignment;
    int64_t window_left, window_right; /* -2 = no window */
    float softcap;
    int alibi;
    int padded_queries;        /* query_lengths {Tq - 1, Tq, ...} */
    attn_empty_rows empty_rows;
} small_case;

static const small_case cases[] = {
    {"one key, one head", 1, 1, 1, 1, 1, 8, 8, 0, 0, -2, -2, 0, 0, 0, 0},
    {"GQA 4, Tk 130", 2, 1, 130, 8, 2, 64, 64, 0, 0, -2, -2, 0, 0, 0, 0},
    {"causal bottom-right, Dk 40 Dv 24", 1, 3, 65, 6, 3, 40, 24, 1, ATTN_ALIGN_BOTTOM_RIGHT, -2, -2, 0, 0, 0, 0},
    {"causal top-left, MQA", 2, 2, 7, 4, 1, 16, 16, 1, ATTN_ALIGN_TOP_LEFT, -2, -2, 0, 0, 0, 0},
    {"window (8, 0) bottom-right", 1, 4, 200, 4, 4, 32, 32, 1, ATTN_ALIGN_BOTTOM_RIGHT, 8, 0, 0, 0, 0, 0},
    {"soft-cap 5 and ALiBi", 1, 1, 96, 16, 4, 64, 64, 0, ATTN_ALIGN_BOTTOM_RIGHT, -2, -2, 5.0f, 1, 0, 0},
    {"padded query rows", 2, 2, 33, 2, 2, 16, 16, 0, 0, -2, -2, 0, 0, 1, 0},
    {"empty rows as zeros", 1, 3, 2, 2, 1, 8, 8, 1, ATTN_ALIGN_BOTTOM_RIGHT, -2, -2, 0, 0, 0, ATTN_EMPTY_ROWS_ZERO},
    {"empty rows as NaN", 1, 3, 2, 2, 1, 8, 8, 1, ATTN_ALIGN_BOTTOM_RIGHT, -2, -2, 0, 0, 0, ATTN_EMPTY_ROWS_NAN},
};

static const test_layout layouts[] = {TEST_LAYOUT_BTHD, TEST_LAYOUT_BHTD, TEST_LAYOUT_PADDED};
static const char *const layout_names[] = {"[B, T, H, D]", "[B, H, T, D] view", "padded rows"};

static attn_options options_of(const small_case *c, int32_t *query_lengths) {
    attn_options options = attn_options_default();
    options.causal = c->causal;
    options.alignment = c->alignment;
    if (c->window_left != -2) {
        options.window = 1;
        options.window_left = c->window_left;
        options.window_right = c->window_right;
    }
    options.softcap = c->softcap;
    options.alibi = c->alibi;
    options.empty_rows = c->empty_rows;
    if (c->padded_queries) {
        for (int64_t b = 0; b < c->B; ++b) query_lengths[b] = (int32_t)(b == 0 ? c->Tq - 1 : c->Tq);
        options.query_lengths = query_lengths;
    }
    return options;
}

/* Largest |a - r| / (1 + |r|) over two tensors' elements; NaN and infinities must match. */
static double difference(const attn_tensor *a, const attn_tensor *r, int rank) {
    double worst = 0.0;
    const int64_t n3 = rank == 4 ? a->shape[3] : 1;
    for (int64_t i = 0; i < a->shape[0]; ++i)
        for (int64_t j = 0; j < a->shape[1]; ++j)
            for (int64_t h = 0; h < a->shape[2]; ++h)
                for (int64_t d = 0; d < n3; ++d) {
                    const double x = rank == 4 ? test_get4(a, i, j, h, d) : test_get3(a, i, j, h);
                    const double y = rank == 4 ? test_get4(r, i, j, h, d) : test_get3(r, i, j, h);
                    if (isnan(x) || isnan(y) || isinf(x) || isinf(y)) {
                        if (!((isnan(x) && isnan(y)) || x == y)) return INFINITY;
                        continue;
                    }
                    const double e = fabs(x - y) / (1.0 + fabs(y));
                    if (e > worst) worst = e;
                }
    return worst;
}

/* Whether the call would take the decode loop (the path under test). */
static int takes_small_path(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_options *options, attn_tensor *out, attn_tensor *lse) {
    attn_call call;
    attn_error error;
    int small = attn_call_begin(&call, options, NULL, &error) == ATTN_OK &&
                attn_call_validate_forward(&call, q, k, v, out, lse, &error) == ATTN_OK &&
                attn_forward_small_applies(&call, k, v);
    attn_call_end(&call);
    return small;
}

static void run_case(const small_case *c, int layout) {
    test_rng rng;
    test_rng_seed(&rng, 7 + (uint64_t)layout);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, layouts[layout]);
    test_tensor k = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dk, layouts[layout]);
    test_tensor v = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, layouts[layout]);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor out[3], lse[3]; /* reference, 1 thread, 2 threads */
    for (int n = 0; n < 3; ++n) {
        out[n] = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
        lse[n] = test_tensor_new_shape(3, lse_shape);
    }
    int32_t query_lengths[8];
    const attn_options options = options_of(c, query_lengths);
    const char *where = layout_names[layout];
    CHECK(takes_small_path(&q.view, &k.view, &v.view, &options, &out[1].view, &lse[1].view),
          "%s, %s: runs on the decode loop", c->name, where);
    attn_error error;
    attn_status status = attn_reference_forward(&q.view, &k.view, &v.view, &options,
                                                &out[0].view, &lse[0].view, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s, %s: reference", c->name, where);
    for (int threads = 1; threads <= 2; ++threads) {
        attn_execution execution = attn_execution_default();
        execution.num_threads = threads;
        status = attn_forward(&q.view, &k.view, &v.view, &options, &out[threads].view,
                              &lse[threads].view, &execution, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s, %s, %d threads", c->name, where, threads);
        const double o = difference(&out[threads].view, &out[0].view, 4);
        const double l = difference(&lse[threads].view, &lse[0].view, 3);
        CHECK(o <= 1e-5 && l <= 1e-5, "%s, %s, %d threads: O error %.3g, LSE error %.3g", c->name,
              where, threads, o, l);
    }
    CHECK(test_bitwise_equal(&out[1].view, &out[2].view) &&
              test_bitwise_equal(&lse[1].view, &lse[2].view),
          "%s, %s: 1 and 2 threads bitwise equal", c->name, where);
    for (int n = 0; n < 3; ++n) test_tensor_free(&out[n]), test_tensor_free(&lse[n]);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
}

/* The default policy: a row with no allowed key is an error on this path too, naming it. */
static void empty_row_error(void) {
    test_tensor q = test_tensor_new(1, 3, 2, 8, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(1, 2, 1, 8, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, 2, 1, 8, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(1, 3, 2, 8, TEST_LAYOUT_BTHD);
    test_tensor_fill_all(&q, 0.5f), test_tensor_fill_all(&k, 0.5f), test_tensor_fill_all(&v, 1.0f);
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_error error;
    const attn_status status =
        attn_forward(&q.view, &k.view, &v.view, &options, &out.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_ERROR_EMPTY_ROW, &error, "Tq 3 > Tk 2, bottom-right causal");
    CHECK(strstr(error.message, "i = 0") != NULL && strstr(error.message, "in k") != NULL,
          "the message names the row and k: %s", error.message);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&out);
}

int main(void) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
        for (int layout = 0; layout < 3; ++layout) run_case(&cases[c], layout);
    empty_row_error();
    return test_finish();
}
