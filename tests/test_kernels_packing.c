/*
 * test_kernels_packing.c — the packing that the forward pass reuses across query tiles:
 *  1. the registry's prefix property (kernels/registry.h), for every registry this machine
 *     runs (attn_kernels_available): scores and P·V computed from a tile packed with N keys,
 *     using only its first n keys, equal bitwise those from a tile packed with exactly n
 *     keys, and nothing is written past n columns;
 *     both also agree with a double-precision dot product (1e-5).
 *  1b. the packings of every source layout agree: keys and values read with a padded token
 *     stride or an element stride of 2 pack to the same floats as contiguous rows, and
 *     pack_values reports whether every value is finite (one inf, -inf or NaN anywhere,
 *     in the last row's tail included, makes it false).
 *  2. attn_forward holds the packed K/V per thread, shared, or one tile at a time depending on
 *     execution.memory_limit_bytes (flash_forward.c): a sweep of limits from the smallest one
 *     accepted up to no limit gives bitwise the same O and LSE for 1, 2 and 3 threads, within
 *     1e-5 of attn_reference_forward.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "kernels/registry.h"
#include "test_support.h"

/* ---- 1. prefix property ---------------------------------------------------------------- */

typedef struct prefix_case { int packed_count, used_count, dim, rows; } prefix_case;

static const prefix_case prefix_cases[] = {
    {16, 1, 8, 1},   {17, 16, 33, 7},  {64, 17, 64, 6},  {64, 63, 64, 13},
    {100, 37, 5, 3}, {128, 64, 128, 64}, {128, 127, 96, 11}, {40, 40, 16, 2},
};

enum { SENTINEL_COLUMNS = 16 };
#define SENTINEL 12345.0f

static float *aligned_floats(size_t count) {
    float *data = attn_aligned_alloc((count + 16) * sizeof(float));
    if (data != NULL) memset(data, 0, (count + 16) * sizeof(float));
    return data;
}

static void check_prefix(const attn_kernels *table, const prefix_case *c, test_rng *rng) {
    const int n = c->used_count, total = c->packed_count, dim = c->dim, rows = c->rows;
    const int stride = ((total > dim ? total : dim) + SENTINEL_COLUMNS + 15) / 16 * 16;
    float *keys = aligned_floats((size_t)total * dim);                  /* [total][dim] */
    float *queries = aligned_floats((size_t)rows * stride);            /* [rows][stride] */
    float *weights = aligned_floats((size_t)rows * stride);            /* [rows][stride] */
    float *packed_all = aligned_floats(table->forward.packed_keys_floats(total, dim) +
                                       table->forward.packed_values_floats(total, dim));
    float *packed_prefix = aligned_floats(table->forward.packed_keys_floats(n, dim) +
                                          table->forward.packed_values_floats(n, dim));
    float *scores_all = aligned_floats((size_t)rows * stride);
    float *scores_prefix = aligned_floats((size_t)rows * stride);
    float *sum_all = aligned_floats((size_t)rows * stride);
    float *sum_prefix = aligned_floats((size_t)rows * stride);
    if (!keys || !queries || !weights || !packed_all || !packed_prefix || !scores_all ||
        !scores_prefix || !sum_all || !sum_prefix) {
        CHECK(0, "allocation");
        return;
    }
    test_fill_normal(rng, keys, (int64_t)total * dim, 1.0f);
    test_fill_normal(rng, queries, (int64_t)rows * stride, 1.0f);
    test_fill_normal(rng, weights, (int64_t)rows * stride, 1.0f);
    for (int i = 0; i < rows * stride; ++i) scores_all[i] = scores_prefix[i] = SENTINEL;
    for (int i = 0; i < rows * stride; ++i) sum_all[i] = sum_prefix[i] = 0.5f;

    float *values_all = packed_all + table->forward.packed_keys_floats(total, dim);
    float *values_prefix = packed_prefix + table->forward.packed_keys_floats(n, dim);
    table->forward.pack_keys(total, dim, keys, dim, 1, packed_all);
    table->forward.pack_values(total, dim, keys, dim, 1, values_all);
    table->forward.pack_keys(n, dim, keys, dim, 1, packed_prefix);
    table->forward.pack_values(n, dim, keys, dim, 1, values_prefix);
    table->forward.score_tile(rows, n, dim, queries, stride, packed_all, scores_all, stride);
    table->forward.score_tile(rows, n, dim, queries, stride, packed_prefix, scores_prefix, stride);
    table->forward.accumulate_values(rows, n, dim, weights, stride, values_all, sum_all, stride);
    table->forward.accumulate_values(rows, n, dim, weights, stride, values_prefix, sum_prefix, stride);

    int same_scores = 1, same_sums = 1, untouched = 1;
    double worst = 0.0;
    for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < n; ++j) {
            same_scores &= scores_all[r * stride + j] == scores_prefix[r * stride + j];
            double dot = 0.0, magnitude = 0.0;
            for (int d = 0; d < dim; ++d) {
                dot += (double)queries[r * stride + d] * keys[j * dim + d];
                magnitude += fabs((double)queries[r * stride + d] * keys[j * dim + d]);
            }
            const double error = fabs(scores_all[r * stride + j] - dot) / (1.0 + magnitude);
            if (error > worst) worst = error;
        }
        for (int j = n; j < n + SENTINEL_COLUMNS && j < stride; ++j)
            untouched &= scores_all[r * stride + j] == SENTINEL;
        for (int e = 0; e < dim; ++e) {
            same_sums &= sum_all[r * stride + e] == sum_prefix[r * stride + e];
            double sum = 0.5, magnitude = 0.5;
            for (int j = 0; j < n; ++j) {
                sum += (double)weights[r * stride + j] * keys[j * dim + e];
                magnitude += fabs((double)weights[r * stride + j] * keys[j * dim + e]);
            }
            const double error = fabs(sum_all[r * stride + e] - sum) / (1.0 + magnitude);
            if (error > worst) worst = error;
        }
    }
    CHECK(same_scores, "%s: scores from %d packed keys, first %d used, = from %d packed (dim %d)",
          table->name, total, n, n, dim);
    CHECK(same_sums, "%s: P·V from %d packed values, first %d used, = from %d packed (dim %d)",
          table->name, total, n, n, dim);
    CHECK(untouched, "%s: nothing written past column %d", table->name, n);
    CHECK(worst <= 1e-5, "%s: against double %.3g (packed %d, used %d, dim %d)", table->name,
          worst, total, n, dim);
    attn_aligned_free(keys), attn_aligned_free(queries), attn_aligned_free(weights);
    attn_aligned_free(packed_all), attn_aligned_free(packed_prefix);
    attn_aligned_free(scores_all), attn_aligned_free(scores_prefix);
    attn_aligned_free(sum_all), attn_aligned_free(sum_prefix);
}

static void test_prefix_property(void) {
    test_rng rng;
    test_rng_seed(&rng, 7);
    const attn_kernels *registries[8];
    const int tables = attn_kernels_available(registries, 8);
    for (int k = 0; k < tables && k < 8; ++k)
        for (size_t c = 0; c < sizeof prefix_cases / sizeof prefix_cases[0]; ++c)
            check_prefix(registries[k], &prefix_cases[c], &rng);
    CHECK(tables >= 1, "at least the generic registry was checked (%d)", tables);
}

/* ---- 1b. source layouts and the finite flag --------------------------------------------- */

typedef struct layout_case { int count, dim; } layout_case;

static const layout_case layout_cases[] = {{1, 1}, {7, 5}, {16, 64}, {17, 33}, {40, 128}, {9, 24}};

/* Packs count x dim rows held contiguously, with a padded token stride and with element
 * stride 2; checks the three packings equal and the finite flag on `contiguous`. */
static void check_layouts(const attn_kernels *table, const layout_case *c,
                          const float *contiguous, bool expect_finite, const char *what) {
    const int count = c->count, dim = c->dim, padded = dim + 3;
    const size_t key_floats = table->forward.packed_keys_floats(count, dim);
    const size_t value_floats = table->forward.packed_values_floats(count, dim);
    float *padded_rows = aligned_floats((size_t)count * padded);
    float *interleaved = aligned_floats((size_t)count * dim * 2);
    float *packed[3], *values[3];
    bool finite[3];
    for (int i = 0; i < 3; ++i) packed[i] = aligned_floats(key_floats), values[i] = aligned_floats(value_floats);
    for (int j = 0; j < count; ++j)
        for (int d = 0; d < dim; ++d) {
            padded_rows[j * padded + d] = contiguous[j * dim + d];
            interleaved[(j * dim + d) * 2] = contiguous[j * dim + d];
        }
    const float *sources[3] = {contiguous, padded_rows, interleaved};
    const int64_t token_strides[3] = {dim, padded, 2 * dim}, dim_strides[3] = {1, 1, 2};
    for (int i = 0; i < 3; ++i) {
        table->forward.pack_keys(count, dim, sources[i], token_strides[i], dim_strides[i], packed[i]);
        finite[i] = table->forward.pack_values(count, dim, sources[i], token_strides[i],
                                               dim_strides[i], values[i]);
    }
    for (int i = 1; i < 3; ++i) {
        CHECK(memcmp(packed[i], packed[0], key_floats * sizeof(float)) == 0,
              "%s: keys %d x %d (%s), layout %d packs as contiguous rows", table->name, count,
              dim, what, i);
        CHECK(memcmp(values[i], values[0], value_floats * sizeof(float)) == 0,
              "%s: values %d x %d (%s), layout %d packs as contiguous rows", table->name, count,
              dim, what, i);
    }
    for (int i = 0; i < 3; ++i)
        CHECK(finite[i] == expect_finite, "%s: values %d x %d (%s), layout %d: finite flag %d",
              table->name, count, dim, what, i, (int)finite[i]);
    attn_aligned_free(padded_rows), attn_aligned_free(interleaved);
    for (int i = 0; i < 3; ++i) attn_aligned_free(packed[i]), attn_aligned_free(values[i]);
}

static void test_layouts_and_finite_flag(void) {
    test_rng rng;
    test_rng_seed(&rng, 13);
    const attn_kernels *registries[8];
    const int tables = attn_kernels_available(registries, 8);
    const float specials[3] = {INFINITY, -INFINITY, NAN};
    const char *names[3] = {"inf", "-inf", "NaN"};
    for (int k = 0; k < tables && k < 8; ++k)
        for (size_t c = 0; c < sizeof layout_cases / sizeof layout_cases[0]; ++c) {
            const layout_case *lc = &layout_cases[c];
            const int elements = lc->count * lc->dim;
            float *rows = aligned_floats((size_t)elements);
            test_fill_normal(&rng, rows, elements, 1.0f);
            check_layouts(registries[k], lc, rows, true, "finite");
            for (int s = 0; s < 3; ++s) {
                /* a random element, then the very last one (the tail of a vector) */
                const int at[2] = {(int)test_rng_range(&rng, 0, elements - 1), elements - 1};
                for (int a = 0; a < 2; ++a) {
                    const float kept = rows[at[a]];
                    rows[at[a]] = specials[s];
                    check_layouts(registries[k], lc, rows, false, names[s]);
                    rows[at[a]] = kept;
                }
            }
            attn_aligned_free(rows);
        }
}

/* ---- 2. packing modes under memory limits ---------------------------------------------- */

typedef struct limit_case {
    const char *name;
    int64_t batch, length, query_heads, kv_heads, dim;
    int causal, window_left;
} limit_case;

static const limit_case limit_cases[] = {
    {"GQA causal", 2, 300, 4, 2, 32, 1, -1},
    {"one head, window 100", 1, 700, 1, 1, 48, 1, 99},
    {"MQA full", 1, 260, 3, 1, 24, 0, -1},
};

typedef struct limit_problem {
    test_tensor q, k, v, out, lse;
    attn_options options;
} limit_problem;

static attn_status run_with(limit_problem *p, size_t limit, int threads, attn_error *error) {
    attn_execution execution = attn_execution_default();
    execution.memory_limit_bytes = limit;
    execution.num_threads = threads;
    return attn_forward(&p->q.view, &p->k.view, &p->v.view, &p->options, &p->out.view,
                        &p->lse.view, &execution, error);
}

static void test_limit_case(const limit_case *c, test_rng *rng) {
    limit_problem p;
    p.q = test_tensor_new(c->batch, c->length, c->query_heads, c->dim, TEST_LAYOUT_BTHD);
    p.k = test_tensor_new(c->batch, c->length, c->kv_heads, c->dim, TEST_LAYOUT_PADDED);
    p.v = test_tensor_new(c->batch, c->length, c->kv_heads, c->dim, TEST_LAYOUT_BHTD);
    p.out = test_tensor_new(c->batch, c->length, c->query_heads, c->dim, TEST_LAYOUT_BTHD);
    const int64_t lse_shape[3] = {c->batch, c->query_heads, c->length};
    p.lse = test_tensor_new_shape(3, lse_shape);
    test_tensor_fill_normal(&p.q, rng, 1.0f);
    test_tensor_fill_normal(&p.k, rng, 1.0f);
    test_tensor_fill_normal(&p.v, rng, 1.0f);
    p.options = attn_options_default();
    if (c->causal) {
        p.options.causal = 1;
        p.options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    }
    p.options.window = 1;
    p.options.window_left = c->window_left;

    /* The reference and the unlimited run. */
    test_tensor expected = test_tensor_new(c->batch, c->length, c->query_heads, c->dim, TEST_LAYOUT_BTHD);
    test_tensor expected_lse = test_tensor_new_shape(3, lse_shape);
    attn_error error;
    CHECK_STATUS(attn_reference_forward(&p.q.view, &p.k.view, &p.v.view, &p.options,
                                        &expected.view, &expected_lse.view, &error),
                 ATTN_OK, &error, "%s: reference", c->name);
    CHECK_STATUS(run_with(&p, 0, 2, &error), ATTN_OK, &error, "%s: unlimited", c->name);
    CHECK(test_max_relative_error(&p.out.view, &expected.view) <= 1e-5 &&
              test_max_relative_error(&p.lse.view, &expected_lse.view) <= 1e-5,
          "%s: unlimited against the reference (O %.3g)", c->name,
          test_max_relative_error(&p.out.view, &expected.view));
    test_tensor unlimited = test_tensor_new(c->batch, c->length, c->query_heads, c->dim, TEST_LAYOUT_BTHD);
    test_tensor unlimited_lse = test_tensor_new_shape(3, lse_shape);
    memcpy(unlimited.allocation, p.out.allocation, (size_t)p.out.allocation_floats * sizeof(float));
    memcpy(unlimited_lse.allocation, p.lse.allocation, (size_t)p.lse.allocation_floats * sizeof(float));

    for (int threads = 1; threads <= 3; ++threads) {
        /* The smallest accepted limit (binary search), then limits growing by 1/8 until the
         * unlimited layout certainly fits: every packing mode is met on the way. */
        size_t low = 1, high = (size_t)1 << 30;
        while (low < high) {
            const size_t middle = low + (high - low) / 2;
            if (run_with(&p, middle, threads, NULL) == ATTN_OK) high = middle;
            else low = middle + 1;
        }
        CHECK_STATUS(run_with(&p, low - 1, threads, &error), ATTN_ERROR_MEMORY_LIMIT, &error,
                     "%s: one byte below the smallest limit", c->name);
        int runs = 0, all_equal = 1;
        for (size_t limit = low; limit < 4 * low + ((size_t)8 << 20); limit += limit / 8 + 1) {
            test_tensor_fill_all(&p.out, NAN);
            const attn_status status = run_with(&p, limit, threads, &error);
            all_equal &= status == ATTN_OK && test_bitwise_equal(&p.out.view, &unlimited.view) &&
                         test_bitwise_equal(&p.lse.view, &unlimited_lse.view);
            ++runs;
        }
        CHECK(all_equal, "%s, %d threads: %d limits from %zu bytes up give the unlimited bits",
              c->name, threads, runs, low);
    }
    test_tensor_free(&expected), test_tensor_free(&expected_lse);
    test_tensor_free(&unlimited), test_tensor_free(&unlimited_lse);
    test_tensor_free(&p.q), test_tensor_free(&p.k), test_tensor_free(&p.v);
    test_tensor_free(&p.out), test_tensor_free(&p.lse);
}

int main(void) {
    test_prefix_property();
    test_layouts_and_finite_flag();
    test_rng rng;
    test_rng_seed(&rng, 11);
    for (size_t c = 0; c < sizeof limit_cases / sizeof limit_cases[0]; ++c)
        test_limit_case(&limit_cases[c], &rng);
    return test_finish();
}
