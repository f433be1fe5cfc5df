/*
 * test_merge_partitions.c — attn_merge against an independent double-precision oracle
 * (docs/attention-math.md §10.8): attention over any partition of the keys (empty parts
 * included), each part computed naively here, merged in any order or tree, equals attention over all
 * keys; merging with an empty partial (lse = -inf, NaN output) is the bitwise identity; all
 * partials empty gives O = 0, lse = -inf; in-place merging; huge LSE gaps; argument errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Naive attention of q [B, T, H, D] against the keys j with part[j] == wanted (all keys when
 * wanted < 0), k and v [B, Tk, H, D] (MHA), in double; writes out [B, T, H, D] and
 * lse [B, H, T] (O = 0, lse = -inf for a row without keys). */
static void naive_partial(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                          const int *part, int wanted, attn_tensor *out, attn_tensor *lse) {
    const int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], D = q->shape[3];
    const int64_t Tk = k->shape[1];
    double *logits = malloc((size_t)Tk * sizeof(double));
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < T; ++i) {
                double maximum = -INFINITY;
                for (int64_t j = 0; j < Tk; ++j) {
                    logits[j] = -INFINITY;
                    if (wanted >= 0 && part[j] != wanted) continue;
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; ++d)
                        dot += (double)test_get4(q, b, i, h, d) * test_get4(k, b, j, h, d);
                    logits[j] = dot * scale;
                    if (logits[j] > maximum) maximum = logits[j];
                }
                float *o = (float *)out->data + b * out->stride[0] + i * out->stride[1] +
                           h * out->stride[2];
                float *l = (float *)lse->data + b * lse->stride[0] + h * lse->stride[1] +
                           i * lse->stride[2];
                if (maximum == -INFINITY) {
                    for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
                    *l = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < Tk; ++j)
                    if (logits[j] != -INFINITY) sum += exp(logits[j] - maximum);
                for (int64_t d = 0; d < D; ++d) {
                    double accumulator = 0.0;
                    for (int64_t j = 0; j < Tk; ++j)
                        if (logits[j] != -INFINITY)
                            accumulator += exp(logits[j] - maximum) / sum * test_get4(v, b, j, h, d);
                    o[d] = (float)accumulator;
                }
                *l = (float)(maximum + log(sum));
            }
    free(logits);
}

typedef struct partition_case {
    int64_t B, T, Tk, H, D;
    int parts;
    uint64_t seed;
} partition_case;

static const partition_case partition_cases[] = {
    {1, 1, 7, 1, 4, 2, 1},  {2, 3, 33, 2, 8, 3, 2},    {1, 5, 64, 3, 16, 5, 3},
    {2, 2, 17, 1, 7, 17, 4}, {1, 4, 100, 2, 32, 8, 5}, {3, 1, 9, 4, 5, 1, 6},
};

static void test_random_partitions(void) {
    for (size_t c = 0; c < sizeof partition_cases / sizeof partition_cases[0]; ++c) {
        const partition_case *pc = &partition_cases[c];
        test_rng rng;
        test_rng_seed(&rng, pc->seed);
        test_tensor q = test_tensor_new(pc->B, pc->T, pc->H, pc->D, TEST_LAYOUT_BTHD);
        test_tensor k = test_tensor_new(pc->B, pc->Tk, pc->H, pc->D, TEST_LAYOUT_BHTD);
        test_tensor v = test_tensor_new(pc->B, pc->Tk, pc->H, pc->D, TEST_LAYOUT_PADDED);
        test_tensor_fill_normal(&q, &rng, 1.5f);
        test_tensor_fill_normal(&k, &rng, 1.0f);
        test_tensor_fill_normal(&v, &rng, 1.0f);
        /* Part count + 1 parts so that the last one is always empty. */
        const int parts = pc->parts + 1;
        int *part = malloc((size_t)pc->Tk * sizeof(int));
        for (int64_t j = 0; j < pc->Tk; ++j) part[j] = (int)test_rng_range(&rng, 0, pc->parts - 1);
        const int64_t lse_shape[3] = {pc->B, pc->H, pc->T};
        test_tensor *outs = calloc((size_t)parts, sizeof(test_tensor));
        test_tensor *lses = calloc((size_t)parts, sizeof(test_tensor));
        const attn_tensor **out_views = calloc((size_t)parts, sizeof(attn_tensor *));
        const attn_tensor **lse_views = calloc((size_t)parts, sizeof(attn_tensor *));
        int *order = malloc((size_t)parts * sizeof(int));
        for (int s = 0; s < parts; ++s) order[s] = s;
        for (int s = parts - 1; s > 0; --s) { /* random merge order */
            int r = (int)test_rng_range(&rng, 0, s), t = order[s];
            order[s] = order[r], order[r] = t;
        }
        for (int s = 0; s < parts; ++s) {
            outs[s] = test_tensor_new(pc->B, pc->T, pc->H, pc->D, s % 2 ? TEST_LAYOUT_BHTD
                                                                         : TEST_LAYOUT_BTHD);
            lses[s] = test_tensor_new_shape(3, lse_shape);
            naive_partial(&q.view, &k.view, &v.view, part, order[s], &outs[s].view, &lses[s].view);
            out_views[s] = &outs[s].view;
            lse_views[s] = &lses[s].view;
        }
        test_tensor expected = test_tensor_new(pc->B, pc->T, pc->H, pc->D, TEST_LAYOUT_BTHD);
        test_tensor expected_lse = test_tensor_new_shape(3, lse_shape);
        naive_partial(&q.view, &k.view, &v.view, part, -1, &expected.view, &expected_lse.view);

        test_tensor merged = test_tensor_new(pc->B, pc->T, pc->H, pc->D, TEST_LAYOUT_PADDED);
        test_tensor merged_lse = test_tensor_new_shape(3, lse_shape);
        attn_error error;
        attn_status status = attn_merge(parts, out_views, lse_views, &merged.view,
                                        &merged_lse.view, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "case %zu", c);
        double out_error = test_max_relative_error(&merged.view, &expected.view);
        double lse_error = test_max_relative_error(&merged_lse.view, &expected_lse.view);
        CHECK(out_error <= 1e-6 && lse_error <= 1e-6, "case %zu flat merge: out %.3g lse %.3g", c,
              out_error, lse_error);

        /* A left-to-right tree of pairwise merges, in place into partial 0. */
        for (int s = 1; s < parts; ++s) {
            const attn_tensor *pair_outs[2] = {&outs[0].view, &outs[s].view};
            const attn_tensor *pair_lses[2] = {&lses[0].view, &lses[s].view};
            status = attn_merge(2, pair_outs, pair_lses, &outs[0].view, &lses[0].view, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "case %zu pairwise step %d", c, s);
        }
        out_error = test_max_relative_error(&outs[0].view, &expected.view);
        lse_error = test_max_relative_error(&lses[0].view, &expected_lse.view);
        CHECK(out_error <= 1e-6 && lse_error <= 1e-6, "case %zu in-place tree: out %.3g lse %.3g",
              c, out_error, lse_error);

        for (int s = 0; s < parts; ++s) test_tensor_free(&outs[s]), test_tensor_free(&lses[s]);
        free(outs), free(lses), free(out_views), free(lse_views), free(order), free(part);
        test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
        test_tensor_free(&expected), test_tensor_free(&expected_lse);
        test_tensor_free(&merged), test_tensor_free(&merged_lse);
    }
}

/* Merging with an empty partial (lse = -inf, output full of NaN) is the bitwise identity;
 * merging only empty partials gives O = 0 and lse = -inf. */
static void test_empty_partials(void) {
    test_rng rng;
    test_rng_seed(&rng, 11);
    const int64_t lse_shape[3] = {2, 3, 5};
    test_tensor a = test_tensor_new(2, 5, 3, 6, TEST_LAYOUT_BTHD);
    test_tensor a_lse = test_tensor_new_shape(3, lse_shape);
    test_tensor empty = test_tensor_new(2, 5, 3, 6, TEST_LAYOUT_BTHD);
    test_tensor empty_lse = test_tensor_new_shape(3, lse_shape);
    test_tensor result = test_tensor_new(2, 5, 3, 6, TEST_LAYOUT_BTHD);
    test_tensor result_lse = test_tensor_new_shape(3, lse_shape);
    test_tensor_fill_normal(&a, &rng, 1.0f);
    test_tensor_fill_normal(&a_lse, &rng, 30.0f);
    test_tensor_fill_all(&empty, NAN);
    test_tensor_fill_all(&empty_lse, -INFINITY);
    attn_error error;
    for (int empty_first = 0; empty_first < 2; ++empty_first) {
        const attn_tensor *outs[2] = {&a.view, &empty.view};
        const attn_tensor *lses[2] = {&a_lse.view, &empty_lse.view};
        if (empty_first) outs[0] = &empty.view, outs[1] = &a.view, lses[0] = &empty_lse.view,
                         lses[1] = &a_lse.view;
        attn_status status = attn_merge(2, outs, lses, &result.view, &result_lse.view, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "identity merge");
        CHECK(test_bitwise_equal(&result.view, &a.view) &&
                  test_bitwise_equal(&result_lse.view, &a_lse.view),
              "merge with an empty partial (empty first = %d) is the bitwise identity",
              empty_first);
    }
    const attn_tensor *outs[3] = {&empty.view, &empty.view, &empty.view};
    const attn_tensor *lses[3] = {&empty_lse.view, &empty_lse.view, &empty_lse.view};
    CHECK_STATUS(attn_merge(3, outs, lses, &result.view, &result_lse.view, &error), ATTN_OK,
                 &error, "all empty");
    int all_zero = 1;
    for (int64_t i = 0; i < result.allocation_floats; ++i) all_zero &= result.allocation[i] == 0.0f;
    for (int64_t i = 0; i < result_lse.allocation_floats; ++i)
        all_zero &= result_lse.allocation[i] == -INFINITY;
    CHECK(all_zero, "all partials empty: O = 0 and lse = -inf");
    test_tensor_free(&a), test_tensor_free(&a_lse), test_tensor_free(&empty);
    test_tensor_free(&empty_lse), test_tensor_free(&result), test_tensor_free(&result_lse);
}

/* Partials whose LSEs differ by 1e4 (exp would overflow without the max shift): the small
 * one's weight underflows to 0 and the result is the dominant partial, finite. */
static void test_extreme_lse(void) {
    const int64_t lse_shape[3] = {1, 1, 1};
    test_tensor a = test_tensor_new(1, 1, 1, 3, TEST_LAYOUT_BTHD);
    test_tensor b = test_tensor_new(1, 1, 1, 3, TEST_LAYOUT_BTHD);
    test_tensor a_lse = test_tensor_new_shape(3, lse_shape), b_lse = test_tensor_new_shape(3, lse_shape);
    test_tensor result = test_tensor_new(1, 1, 1, 3, TEST_LAYOUT_BTHD);
    test_tensor result_lse = test_tensor_new_shape(3, lse_shape);
    for (int d = 0; d < 3; ++d) a.allocation[d] = (float)d + 1.0f, b.allocation[d] = -5.0f;
    a_lse.allocation[0] = 1.0e4f, b_lse.allocation[0] = 0.0f;
    const attn_tensor *outs[2] = {&b.view, &a.view};
    const attn_tensor *lses[2] = {&b_lse.view, &a_lse.view};
    attn_error error;
    CHECK_STATUS(attn_merge(2, outs, lses, &result.view, &result_lse.view, &error), ATTN_OK,
                 &error, "extreme");
    CHECK(result.allocation[0] == 1.0f && result.allocation[2] == 3.0f &&
              result_lse.allocation[0] == 1.0e4f,
          "lse gap 1e4: result = dominant partial (%g, lse %g)", result.allocation[0],
          result_lse.allocation[0]);
    /* Equal LSEs: the mean, and lse + log 2. */
    b_lse.allocation[0] = 1.0e4f;
    CHECK_STATUS(attn_merge(2, outs, lses, &result.view, &result_lse.view, &error), ATTN_OK,
                 &error, "equal");
    CHECK(fabsf(result.allocation[0] - (-2.0f)) < 1e-6f &&
              fabs(result_lse.allocation[0] - (1.0e4 + log(2.0))) < 1e-3,
          "equal lse: mean (%g) and lse + log 2 (%g)", result.allocation[0],
          result_lse.allocation[0]);
    test_tensor_free(&a), test_tensor_free(&b), test_tensor_free(&a_lse);
    test_tensor_free(&b_lse), test_tensor_free(&result), test_tensor_free(&result_lse);
}

static void test_errors(void) {
    const int64_t lse_shape[3] = {1, 2, 3}, wrong_lse_shape[3] = {1, 3, 2};
    test_tensor a = test_tensor_new(1, 3, 2, 4, TEST_LAYOUT_BTHD);
    test_tensor b = test_tensor_new(1, 3, 2, 5, TEST_LAYOUT_BTHD);
    test_tensor a_lse = test_tensor_new_shape(3, lse_shape);
    test_tensor wrong_lse = test_tensor_new_shape(3, wrong_lse_shape);
    const attn_tensor *outs[2] = {&a.view, &b.view};
    const attn_tensor *lses[2] = {&a_lse.view, &a_lse.view};
    attn_error error;
    CHECK_STATUS(attn_merge(0, outs, lses, &a.view, &a_lse.view, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "count 0");
    CHECK(strstr(error.message, "count") != NULL, "message names count: %s", error.message);
    CHECK_STATUS(attn_merge(2, NULL, lses, &a.view, &a_lse.view, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "outs NULL");
    CHECK_STATUS(attn_merge(2, outs, lses, &a.view, &a_lse.view, &error),
                 ATTN_ERROR_SHAPE_MISMATCH, &error, "Dv mismatch");
    CHECK(strstr(error.message, "outs[1]") != NULL, "message names outs[1]: %s", error.message);
    const attn_tensor *wrong_lses[1] = {&wrong_lse.view};
    CHECK_STATUS(attn_merge(1, outs, wrong_lses, &a.view, &a_lse.view, &error),
                 ATTN_ERROR_SHAPE_MISMATCH, &error, "lse [B, T, H] instead of [B, H, T]");
    CHECK_STATUS(attn_merge(1, outs, lses, &a.view, NULL, &error), ATTN_ERROR_NULL_ARGUMENT,
                 &error, "lse NULL");
    attn_tensor half = a.view;
    half.dtype = ATTN_DTYPE_F16;
    CHECK_STATUS(attn_merge(1, outs, lses, &half, &a_lse.view, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "out not F32");
    test_tensor_free(&a), test_tensor_free(&b), test_tensor_free(&a_lse);
    test_tensor_free(&wrong_lse);
}

int main(void) {
    test_random_partitions();
    test_empty_partials();
    test_extreme_lse();
    test_errors();
    return test_finish();
}
