/*
 * test_kernels_tiles.c — the forward part of every kernel registry this build, CPU and OS run
 * (generic, AVX2, AVX-512, ...: attn_kernels_available), slot by slot, on random tiles of
 * awkward sizes, against a double-precision implementation of the contract in
 * src/kernels/registry.h written here, and each slot against the generic registry's.
 *
 * Covered: packing from strided sources (contiguous and transposed), score_tile,
 * accumulate_values, softmax_step (scale, soft-cap, −inf entries, rows that are all −inf,
 * logits of magnitude 1e4, a running max that is −inf or finite), scale_rows; writes beyond
 * the tile must not happen (sentinels); the vectorised exp's error against exp() in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "kernels/registry.h"
#include "test_support.h"

static const int tile_sizes[] = {1, 3, 15, 16, 17, 63, 64, 65, 129};
static const int dims[] = {1, 3, 15, 16, 17, 64, 65, 128, 576};
#define COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))
static const float sentinel = 12345.0f;

typedef struct tables {
    const attn_kernels *list[8];
    int count;
} tables;

/* Every registry this build, CPU and OS run; each must fill every forward slot. */
static tables available_tables(void) {
    tables result = {{0}, 0};
    const attn_kernels *all[8];
    const int count = attn_kernels_available(all, 8);
    CHECK(count >= 1 && count <= 8 && strcmp(all[0]->name, "generic") == 0,
          "%d registries, the first generic", count);
    for (int i = 0; i < count && i < 8; ++i) {
        const attn_forward_kernels *f = &all[i]->forward;
        int complete = f->packed_keys_floats && f->packed_values_floats && f->pack_keys &&
                       f->pack_values && f->score_tile && f->accumulate_values &&
                       f->softmax_step && f->scale_rows;
        CHECK(complete, "registry %s fills every forward slot of registry.h", all[i]->name);
        if (complete) result.list[result.count++] = all[i];
    }
    return result;
}

static const attn_kernels *generic_table(void) {
    const attn_kernels *table = NULL;
    attn_kernels_select(ATTN_KERNEL_GENERIC, &table, NULL);
    return table && table->forward.score_tile ? table : NULL;
}

static float *new_floats(size_t count, float fill) {
    float *data = attn_aligned_alloc((count + 16) * sizeof(float));
    for (size_t i = 0; i < count + 16; ++i) data[i] = fill;
    return data;
}

/* Packs `count` rows of `dim` from a random source stored either [count][dim] or [dim][count]
 * into a NaN-prefilled buffer (so padding that is not zero-filled shows up). source_out gets
 * the logical [count][dim] copy. */
static float *pack_random(const attn_kernels *table, int is_keys, int count, int dim,
                          int transposed, test_rng *rng, float *logical) {
    float *source = new_floats((size_t)count * dim, 0.0f);
    test_fill_normal(rng, logical, (int64_t)count * dim, 1.0f);
    for (int c = 0; c < count; ++c)
        for (int d = 0; d < dim; ++d)
            source[transposed ? (size_t)d * count + c : (size_t)c * dim + d] =
                logical[(size_t)c * dim + d];
    const int64_t token_stride = transposed ? 1 : dim, dim_stride = transposed ? count : 1;
    size_t floats = is_keys ? table->forward.packed_keys_floats(count, dim)
                            : table->forward.packed_values_floats(count, dim);
    float *packed = new_floats(floats, NAN);
    if (is_keys) table->forward.pack_keys(count, dim, source, token_stride, dim_stride, packed);
    else table->forward.pack_values(count, dim, source, token_stride, dim_stride, packed);
    attn_aligned_free(source);
    return packed;
}

/* score_tile against sum_d q[r][d] k[c][d] in double, and against generic. */
static void test_scores(const attn_kernels *table, test_rng *rng) {
    const attn_kernels *generic = generic_table();
    for (int case_index = 0; case_index < 40; ++case_index) {
        const int rows = tile_sizes[test_rng_range(rng, 0, COUNT_OF(tile_sizes) - 1)];
        const int count = tile_sizes[case_index % COUNT_OF(tile_sizes)];
        const int dim = dims[test_rng_range(rng, 0, COUNT_OF(dims) - 1)];
        const int query_stride = dim + (int)test_rng_range(rng, 0, 3);
        const int scores_stride = count + 5;
        float *queries = new_floats((size_t)rows * query_stride, 0.0f);
        test_fill_normal(rng, queries, (int64_t)rows * query_stride, 1.0f);
        float *keys = new_floats((size_t)count * dim, 0.0f);
        float *packed = pack_random(table, 1, count, dim, case_index & 1, rng, keys);
        float *scores = new_floats((size_t)rows * scores_stride, sentinel);
        table->forward.score_tile(rows, count, dim, queries, query_stride, packed, scores, scores_stride);
        float *generic_scores = NULL;
        if (generic && generic != table) {
            float *generic_packed = new_floats(generic->forward.packed_keys_floats(count, dim), 0.0f);
            generic->forward.pack_keys(count, dim, keys, dim, 1, generic_packed);
            generic_scores = new_floats((size_t)rows * scores_stride, sentinel);
            generic->forward.score_tile(rows, count, dim, queries, query_stride, generic_packed,
                                generic_scores, scores_stride);
            attn_aligned_free(generic_packed);
        }
        double worst = 0.0, worst_generic = 0.0;
        int sentinels_intact = 1;
        for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < count; ++c) {
                double exact = 0.0, magnitude = 1e-30;
                for (int d = 0; d < dim; ++d) {
                    const double product =
                        (double)queries[(size_t)r * query_stride + d] * keys[(size_t)c * dim + d];
                    exact += product;
                    magnitude += fabs(product);
                }
                const float got = scores[(size_t)r * scores_stride + c];
                const double error = fabs(got - exact) / magnitude;
                if (!(error <= worst)) worst = isnan(error) ? INFINITY : error;
                if (generic_scores) {
                    const double difference =
                        fabs(got - generic_scores[(size_t)r * scores_stride + c]) / magnitude;
                    if (!(difference <= worst_generic))
                        worst_generic = isnan(difference) ? INFINITY : difference;
                }
            }
            for (int c = count; c < scores_stride; ++c)
                sentinels_intact &= scores[(size_t)r * scores_stride + c] == sentinel;
        }
        CHECK(worst < 1e-6, "%s score_tile rows=%d count=%d dim=%d: error %.3g", table->name,
              rows, count, dim, worst);
        CHECK(worst_generic < 1e-6, "%s score_tile vs generic rows=%d count=%d dim=%d: %.3g",
              table->name, rows, count, dim, worst_generic);
        CHECK(sentinels_intact, "%s score_tile wrote past count=%d", table->name, count);
        attn_aligned_free(queries);
        attn_aligned_free(keys);
        attn_aligned_free(packed);
        attn_aligned_free(scores);
        attn_aligned_free(generic_scores);
    }
}

/* accumulate_values and scale_rows against double, and against generic. */
static void test_values(const attn_kernels *table, test_rng *rng) {
    const attn_kernels *generic = generic_table();
    for (int case_index = 0; case_index < 40; ++case_index) {
        const int rows = tile_sizes[test_rng_range(rng, 0, COUNT_OF(tile_sizes) - 1)];
        const int count = tile_sizes[case_index % COUNT_OF(tile_sizes)];
        const int dim = dims[test_rng_range(rng, 0, COUNT_OF(dims) - 1)];
        const int weights_stride = count + 1, accumulator_stride = dim + 7;
        float *weights = new_floats((size_t)rows * weights_stride, 0.0f);
        for (int i = 0; i < rows * weights_stride; ++i) weights[i] = (float)test_rng_uniform(rng);
        float *values = new_floats((size_t)count * dim, 0.0f);
        float *packed = pack_random(table, 0, count, dim, case_index & 1, rng, values);
        float *accumulator = new_floats((size_t)rows * accumulator_stride, sentinel);
        float *factor = new_floats((size_t)rows, 0.0f);
        for (int r = 0; r < rows; ++r) {
            factor[r] = (float)test_rng_uniform(rng);
            test_fill_normal(rng, accumulator + (size_t)r * accumulator_stride, dim, 1.0f);
        }
        float *before = new_floats((size_t)rows * accumulator_stride, 0.0f);
        memcpy(before, accumulator, sizeof(float) * rows * accumulator_stride);
        table->forward.scale_rows(rows, dim, factor, accumulator, accumulator_stride);
        table->forward.accumulate_values(rows, count, dim, weights, weights_stride, packed,
                                         accumulator, accumulator_stride);
        float *generic_accumulator = new_floats((size_t)rows * accumulator_stride, 0.0f);
        memcpy(generic_accumulator, before, sizeof(float) * rows * accumulator_stride);
        float *generic_packed = new_floats(generic->forward.packed_values_floats(count, dim), 0.0f);
        generic->forward.pack_values(count, dim, values, dim, 1, generic_packed);
        generic->forward.scale_rows(rows, dim, factor, generic_accumulator, accumulator_stride);
        generic->forward.accumulate_values(rows, count, dim, weights, weights_stride,
                                           generic_packed, generic_accumulator,
                                           accumulator_stride);
        double worst = 0.0, worst_generic = 0.0;
        int sentinels_intact = 1;
        for (int r = 0; r < rows; ++r) {
            for (int e = 0; e < dim; ++e) {
                double exact = (double)before[(size_t)r * accumulator_stride + e] * factor[r];
                double magnitude = fabs(exact) + 1e-30;
                for (int c = 0; c < count; ++c) {
                    const double product =
                        (double)weights[(size_t)r * weights_stride + c] * values[(size_t)c * dim + e];
                    exact += product;
                    magnitude += fabs(product);
                }
                const float got = accumulator[(size_t)r * accumulator_stride + e];
                const double error = fabs(got - exact) / magnitude;
                if (!(error <= worst)) worst = isnan(error) ? INFINITY : error;
                const double difference =
                    fabs(got - generic_accumulator[(size_t)r * accumulator_stride + e]) / magnitude;
                if (!(difference <= worst_generic))
                    worst_generic = isnan(difference) ? INFINITY : difference;
            }
            for (int e = dim; e < accumulator_stride; ++e)
                sentinels_intact &= accumulator[(size_t)r * accumulator_stride + e] == sentinel;
        }
        CHECK(worst < 1e-6, "%s scale_rows+accumulate_values rows=%d count=%d dim=%d: %.3g",
              table->name, rows, count, dim, worst);
        CHECK(worst_generic < 1e-6, "%s scale_rows+accumulate_values vs generic rows=%d "
              "count=%d dim=%d: %.3g", table->name, rows, count, dim, worst_generic);
        CHECK(sentinels_intact, "%s accumulate_values wrote past dim=%d", table->name, dim);
        attn_aligned_free(generic_accumulator);
        attn_aligned_free(generic_packed);
        attn_aligned_free(weights);
        attn_aligned_free(values);
        attn_aligned_free(packed);
        attn_aligned_free(accumulator);
        attn_aligned_free(factor);
        attn_aligned_free(before);
    }
}

/* softmax_step against the contract evaluated in double. Each row gets a flavour: ordinary
 * logits, some −inf entries, all −inf, huge logits (±1e4); the running max starts at −inf or
 * at a finite value. */
static void test_softmax(const attn_kernels *table, test_rng *rng) {
    const attn_kernels *generic = generic_table();
    const float softcaps[] = {0.0f, 0.0f, 30.0f};
    for (int case_index = 0; case_index < 45; ++case_index) {
        const int rows = tile_sizes[test_rng_range(rng, 0, COUNT_OF(tile_sizes) - 1)];
        const int count = tile_sizes[case_index % COUNT_OF(tile_sizes)];
        const float scale = case_index % 2 ? 1.0f : 0.125f;
        const float softcap = softcaps[case_index % 3];
        const int stride = count + 3;
        float *scores = new_floats((size_t)rows * stride, sentinel);
        float *row_max = new_floats((size_t)rows, 0.0f), *row_sum = new_floats((size_t)rows, 0.0f);
        float *rescale = new_floats((size_t)rows, sentinel);
        for (int r = 0; r < rows; ++r) {
            const int flavour = (int)test_rng_range(rng, 0, 3);
            for (int c = 0; c < count; ++c) {
                float x = (float)test_rng_normal(rng) * 4.0f;
                if (flavour == 1 && test_rng_uniform(rng) < 0.4) x = -INFINITY;
                if (flavour == 2) x = -INFINITY;
                if (flavour == 3) x *= 2500.0f;
                scores[(size_t)r * stride + c] = x;
            }
            const int start_empty = test_rng_uniform(rng) < 0.5;
            row_max[r] = start_empty ? -INFINITY : (float)test_rng_normal(rng) * 3.0f;
            row_sum[r] = start_empty ? 0.0f : 1.0f + (float)test_rng_uniform(rng) * 5.0f;
        }
        float *original = new_floats((size_t)rows * stride, 0.0f);
        float *old_max = new_floats((size_t)rows, 0.0f), *old_sum = new_floats((size_t)rows, 0.0f);
        memcpy(original, scores, sizeof(float) * rows * stride);
        for (int r = 0; r < rows; ++r) old_max[r] = row_max[r], old_sum[r] = row_sum[r];
        table->forward.softmax_step(rows, count, scores, stride, scale, softcap, ATTN_DTYPE_F32,
                                    row_max, row_sum, rescale);
        /* The generic registry on the same tile, for the comparison slot by slot. */
        float *generic_scores = new_floats((size_t)rows * stride, 0.0f);
        float *generic_max = new_floats((size_t)rows, 0.0f);
        float *generic_sum = new_floats((size_t)rows, 0.0f);
        float *generic_rescale = new_floats((size_t)rows, 0.0f);
        memcpy(generic_scores, original, sizeof(float) * rows * stride);
        for (int r = 0; r < rows; ++r) generic_max[r] = old_max[r], generic_sum[r] = old_sum[r];
        generic->forward.softmax_step(rows, count, generic_scores, stride, scale, softcap,
                                      ATTN_DTYPE_F32, generic_max, generic_sum, generic_rescale);
        double worst_generic = 0.0;
        for (int r = 0; r < rows; ++r) {
            const double unit = 1.0 + fabs(generic_max[r] == -INFINITY ? 0.0 : generic_max[r]);
            for (int c = 0; c < count; ++c) {
                const double want = generic_scores[(size_t)r * stride + c];
                const double logit = fabs(original[(size_t)r * stride + c] * (double)scale);
                const double difference = fabs(scores[(size_t)r * stride + c] - want) /
                                          (want + 1e-30) / (unit + (isinf(logit) ? 0 : logit));
                if (want > 1e-30 && !(difference <= worst_generic))
                    worst_generic = isnan(difference) ? INFINITY : difference;
                if (want == 0.0 && scores[(size_t)r * stride + c] > 1e-30f)
                    worst_generic = INFINITY; /* exactly 0 in generic: at most a denormal */
            }
            const double sum_difference =
                fabs(row_sum[r] - generic_sum[r]) / (generic_sum[r] + 1e-30);
            const int same_max = row_max[r] == generic_max[r] ||
                                 fabs(row_max[r] - generic_max[r]) <= 1e-6 * unit;
            if (!(sum_difference <= 1e-5) || !same_max ||
                !(fabs(rescale[r] - generic_rescale[r]) <=
                  1e-6 * unit * (generic_rescale[r] + 1e-30)))
                worst_generic = INFINITY;
        }
        CHECK(worst_generic < 2e-6, "%s softmax_step vs generic rows=%d count=%d softcap=%g: %.3g",
              table->name, rows, count, softcap, worst_generic);
        attn_aligned_free(generic_scores);
        attn_aligned_free(generic_max);
        attn_aligned_free(generic_sum);
        attn_aligned_free(generic_rescale);

        double worst_p = 0.0, worst_sum = 0.0, worst_rescale = 0.0, worst_max = 0.0;
        int masked_exact = 1, sentinels_intact = 1, finite = 1;
        for (int r = 0; r < rows; ++r) {
            double logits[129], maximum = old_max[r];
            for (int c = 0; c < count; ++c) {
                const float raw = original[(size_t)r * stride + c];
                double x = (double)raw * scale;
                if (softcap > 0.0f && raw != -INFINITY) x = softcap * tanh(x / softcap);
                logits[c] = x;
                if (x > maximum) maximum = x;
            }
            const double used = maximum == -INFINITY ? 0.0 : maximum;
            const double expected_rescale = old_max[r] == -INFINITY ? 0.0 : exp(old_max[r] - used);
            double expected_sum = expected_rescale * old_sum[r];
            for (int c = 0; c < count; ++c) {
                const double p = exp(logits[c] - used);
                const float got = scores[(size_t)r * stride + c];
                expected_sum += p;
                if (logits[c] == -INFINITY) masked_exact &= got == 0.0f;
                /* x·s and m are floats in the kernel: their rounding (≤ 6e-8 relative) moves
                 * exp by that much times |x·s| + |m|, so the error is measured per unit. */
                const double error = fabs(got - p) / (p + 1e-30) / (1.0 + fabs(logits[c]) + fabs(used));
                if (p > 1e-30 && !(error <= worst_p)) worst_p = isnan(error) ? INFINITY : error;
                finite &= isfinite(got);
            }
            for (int c = count; c < stride; ++c)
                sentinels_intact &= scores[(size_t)r * stride + c] == sentinel;
            finite &= !isnan(row_sum[r]) && !isnan(rescale[r]) && !isnan(row_max[r]);
            const double max_error = maximum == -INFINITY
                                         ? (row_max[r] == -INFINITY ? 0.0 : INFINITY)
                                         : fabs(row_max[r] - maximum) / (1.0 + fabs(maximum));
            if (!(max_error <= worst_max)) worst_max = max_error;
            const double sum_error = fabs(row_sum[r] - expected_sum) / (expected_sum + 1e-30);
            if (expected_sum > 0 && !(sum_error <= worst_sum)) worst_sum = sum_error;
            if (expected_sum == 0) finite &= row_sum[r] == 0.0f;
            const double rescale_error = fabs(rescale[r] - expected_rescale) /
                                         (expected_rescale + 1e-30) /
                                         (1.0 + fabs(old_max[r]) + fabs(used));
            if (expected_rescale > 1e-30 && !(rescale_error <= worst_rescale))
                worst_rescale = rescale_error;
            if (expected_rescale == 0.0) finite &= rescale[r] == 0.0f;
        }
        const double tolerance = softcap > 0.0f ? 1e-6 : 4e-7;
        CHECK(worst_p < tolerance, "%s softmax_step probabilities rows=%d count=%d softcap=%g: %.3g",
              table->name, rows, count, softcap, worst_p);
        CHECK(worst_sum < 1e-5 && worst_rescale < 4e-7 && worst_max < 1e-6,
              "%s softmax_step sum/rescale/max rows=%d count=%d: %.3g %.3g %.3g", table->name,
              rows, count, worst_sum, worst_rescale, worst_max);
        CHECK(masked_exact, "%s softmax_step: a -inf logit did not give exactly 0", table->name);
        CHECK(finite, "%s softmax_step: NaN/inf or non-zero empty row (count=%d)", table->name,
              count);
        CHECK(sentinels_intact, "%s softmax_step wrote past count=%d", table->name, count);
        attn_aligned_free(scores);
        attn_aligned_free(row_max);
        attn_aligned_free(row_sum);
        attn_aligned_free(rescale);
        attn_aligned_free(original);
        attn_aligned_free(old_max);
        attn_aligned_free(old_sum);
    }
}

/* The vectorised exp, seen through softmax_step with a running max of 0: p = exp(x) for
 * x ≤ 0. Reports the worst relative error over a dense sweep of [−87, 0] and the worst per
 * unit of 1 + |x| (printed, for docs/performance.md). The SIMD tables compute 2^(x·log2 e)
 * (vmath.h vf_exp2), whose error grows with |x| as the rounding of x itself does (a float x
 * is only known to |x|·6e-8), so the assertion is per unit: below 4 ulp of 1 (4 · 1.19e-7),
 * and near 0 (|x| ≤ 1, where p is largest and every softmax sum is decided) below 4 ulp
 * relative. The generic table's expf is within both by far. */
static void test_exp_accuracy(const attn_kernels *table) {
    const int count = 4096;
    float *scores = new_floats(count, 0.0f);
    double worst = 0.0, worst_per_unit = 0.0, worst_near_zero = 0.0;
    for (int sweep = 0; sweep < 64; ++sweep) {
        for (int c = 0; c < count; ++c)
            scores[c] = -87.0f * (float)(sweep * count + c) / (float)(64 * count - 1);
        float row_max = 0.0f, row_sum = 0.0f, rescale = 0.0f;
        float *inputs = new_floats(count, 0.0f);
        memcpy(inputs, scores, sizeof(float) * count);
        table->forward.softmax_step(1, count, scores, count, 1.0f, 0.0f, ATTN_DTYPE_F32, &row_max,
                                    &row_sum, &rescale);
        for (int c = 0; c < count; ++c) {
            const double exact = exp((double)inputs[c]);
            const double error = fabs(scores[c] - exact) / exact;
            const double per_unit = error / (1.0 + fabs((double)inputs[c]));
            if (!(error <= worst)) worst = error;
            if (!(per_unit <= worst_per_unit)) worst_per_unit = per_unit;
            if (inputs[c] >= -1.0f && !(error <= worst_near_zero)) worst_near_zero = error;
        }
        attn_aligned_free(inputs);
    }
    printf("%s: exp max relative error on [-87, 0] = %.3g (%.2f ulp); per unit of 1 + |x| %.3g; "
           "on [-1, 0] %.3g (%.2f ulp)\n",
           table->name, worst, worst / 5.96e-8, worst_per_unit, worst_near_zero,
           worst_near_zero / 5.96e-8);
    CHECK(worst_per_unit < 4 * 1.19e-7, "%s exp max relative error per unit %.3g", table->name,
          worst_per_unit);
    CHECK(worst_near_zero < 4 * 1.19e-7, "%s exp max relative error on [-1, 0] %.3g", table->name,
          worst_near_zero);
    attn_aligned_free(scores);
}

int main(void) {
    const tables available = available_tables();
    CHECK(available.count >= 1, "no kernel table available");
    for (int t = 0; t < available.count; ++t) {
        const attn_kernels *table = available.list[t];
        printf("testing kernel table %s\n", table->name);
        test_rng rng;
        test_rng_seed(&rng, 1234 + t);
        test_scores(table, &rng);
        test_values(table, &rng);
        test_softmax(table, &rng);
        test_exp_accuracy(table);
    }
    return test_finish();
}
