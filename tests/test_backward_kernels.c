/*
 * test_backward_kernels.c — the backward part of every kernel registry
 * (src/kernels/registry.h) the CPU runs, against double-precision loops over a table of tile shapes (odd sizes,
 * SIMD tails, strides wider than the data):
 *   - accumulate / accumulate_transposed: acc += W·V and acc += Wᵀ·V on random accumulators;
 *     the padding floats of the value rows are NaN and the accumulator gaps hold a sentinel,
 *     so a kernel that lets the padding leak or writes past dim fails;
 *   - probabilities: exp(scale·s − lse) with masked (−inf) scores, empty rows (lse = −inf →
 *     exact 0) and NaN rows;
 *   - score_gradient: P·(dP − D).
 * Every slot is also compared with the generic registry's on the same inputs (within the same
 * tolerances). Also: two calls on the same inputs give the same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "test_support.h"

#define PRODUCT_TOLERANCE 1e-5     /* relative to sum |w v| + |acc| */
#define EXP_TOLERANCE 4e-6         /* float argument rounding: |x| <= 16 times 2^-24, plus exp */
#define GRADIENT_TOLERANCE 1e-6
#define SENTINEL 12345.0f

typedef struct product_case {
    int outputs, inner, dim;
    int weights_pad, accumulator_pad; /* extra floats per row beyond what is used */
} product_case;

static const product_case product_cases[] = {
    {1, 1, 1, 0, 0},    {6, 64, 128, 0, 0},  {7, 13, 17, 3, 5},   {13, 5, 33, 1, 2},
    {64, 64, 48, 0, 16}, {5, 3, 130, 7, 1},  {128, 64, 64, 0, 0}, {19, 1, 8, 2, 3},
    {3, 70, 24, 5, 8},   {12, 12, 200, 0, 0},
};

static const attn_kernels *generic_registry(void) {
    const attn_kernels *generic = NULL;
    attn_kernels_select(ATTN_KERNEL_GENERIC, &generic, NULL);
    return generic;
}

/* Runs one product case through `table`, transposed or not; returns the worst error against
 * double and against the generic registry. */
static double check_product(const attn_kernels *table, const product_case *pc,
                            int transposed, test_rng *rng) {
    const int value_stride = ATTN_BACKWARD_ROW_FLOATS(pc->dim);
    const int accumulator_stride = pc->dim + pc->accumulator_pad;
    /* weights: [outputs][inner] or, transposed, [inner][outputs], rows padded. */
    const int weights_rows = transposed ? pc->inner : pc->outputs;
    const int weights_stride = (transposed ? pc->outputs : pc->inner) + pc->weights_pad;
    float *weights = malloc(sizeof(float) * (size_t)weights_rows * weights_stride);
    float *values = malloc(sizeof(float) * (size_t)pc->inner * value_stride);
    float *accumulator = malloc(sizeof(float) * (size_t)pc->outputs * accumulator_stride);
    double *expected = malloc(sizeof(double) * (size_t)pc->outputs * pc->dim);
    double *magnitude = malloc(sizeof(double) * (size_t)pc->outputs * pc->dim);
    test_fill_normal(rng, weights, (int64_t)weights_rows * weights_stride, 1.0f);
    for (int i = 0; i < pc->inner; ++i)
        for (int e = 0; e < value_stride; ++e) /* the padding must never matter */
            values[(size_t)i * value_stride + e] =
                e < pc->dim ? (float)test_rng_normal(rng) : NAN;
    for (int o = 0; o < pc->outputs; ++o)
        for (int e = 0; e < accumulator_stride; ++e)
            accumulator[(size_t)o * accumulator_stride + e] =
                e < pc->dim ? (float)test_rng_normal(rng) : SENTINEL;

    for (int o = 0; o < pc->outputs; ++o)
        for (int e = 0; e < pc->dim; ++e) {
            const double start = accumulator[(size_t)o * accumulator_stride + e];
            double sum = start, size = fabs(start);
            for (int i = 0; i < pc->inner; ++i) {
                const double w = transposed ? weights[(size_t)i * weights_stride + o]
                                            : weights[(size_t)o * weights_stride + i];
                const double term = w * values[(size_t)i * value_stride + e];
                sum += term;
                size += fabs(term);
            }
            expected[(size_t)o * pc->dim + e] = sum;
            magnitude[(size_t)o * pc->dim + e] = size;
        }
    float *generic = malloc(sizeof(float) * (size_t)pc->outputs * accumulator_stride);
    memcpy(generic, accumulator, sizeof(float) * (size_t)pc->outputs * accumulator_stride);
    const attn_backward_kernels *mine = &table->backward, *base = &generic_registry()->backward;
    if (transposed) {
        mine->accumulate_transposed(pc->outputs, pc->inner, pc->dim, weights, weights_stride,
                                    values, value_stride, accumulator, accumulator_stride);
        base->accumulate_transposed(pc->outputs, pc->inner, pc->dim, weights, weights_stride,
                                    values, value_stride, generic, accumulator_stride);
    } else {
        mine->accumulate(pc->outputs, pc->inner, pc->dim, weights, weights_stride, values,
                         value_stride, accumulator, accumulator_stride);
        base->accumulate(pc->outputs, pc->inner, pc->dim, weights, weights_stride, values,
                         value_stride, generic, accumulator_stride);
    }

    double worst = 0.0;
    int gaps_intact = 1;
    for (int o = 0; o < pc->outputs; ++o) {
        for (int e = 0; e < pc->dim; ++e) {
            const size_t at = (size_t)o * pc->dim + e;
            const float got = accumulator[(size_t)o * accumulator_stride + e];
            const double error = fabs(got - expected[at]) / (1.0 + magnitude[at]);
            if (!(error <= worst)) worst = error; /* NaN counts as the worst */
            const double difference =
                fabs(got - generic[(size_t)o * accumulator_stride + e]) / (1.0 + magnitude[at]);
            if (!(difference <= worst)) worst = difference;
        }
        for (int e = pc->dim; e < accumulator_stride; ++e)
            gaps_intact &= accumulator[(size_t)o * accumulator_stride + e] == SENTINEL;
    }
    CHECK(gaps_intact, "%s %s %dx%dx%d: floats past dim untouched", table->name,
          transposed ? "accumulate_transposed" : "accumulate", pc->outputs, pc->inner, pc->dim);
    free(weights), free(values), free(accumulator), free(expected), free(magnitude), free(generic);
    return worst;
}

/* probabilities and score_gradient on a [rows][count] tile with stride > count. */
static void check_elementwise(const attn_kernels *table, int rows, int count,
                              test_rng *rng) {
    const int stride = count + 5;
    const float scale = 0.37f;
    float *scores = malloc(sizeof(float) * (size_t)rows * stride);
    float *original = malloc(sizeof(float) * (size_t)rows * stride);
    float *lse = malloc(sizeof(float) * (size_t)rows);
    for (int r = 0; r < rows; ++r) {
        lse[r] = (float)(2.0 * test_rng_normal(rng));
        for (int c = 0; c < stride; ++c) {
            float s = (float)(8.0 * test_rng_normal(rng));
            if (test_rng_uniform(rng) < 0.2) s = -INFINITY; /* masked */
            scores[(size_t)r * stride + c] = c < count ? s : SENTINEL;
        }
    }
    if (rows > 2) lse[1] = -INFINITY, lse[2] = NAN; /* an empty row and a NaN row */
    memcpy(original, scores, sizeof(float) * (size_t)rows * stride);
    float *generic = malloc(sizeof(float) * (size_t)rows * stride);
    memcpy(generic, scores, sizeof(float) * (size_t)rows * stride);
    table->backward.probabilities(rows, count, scores, stride, scale, lse);
    generic_registry()->backward.probabilities(rows, count, generic, stride, scale, lse);
    double worst = 0.0;
    int exact = 1;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < stride; ++c) {
            const float got = scores[(size_t)r * stride + c];
            const float s = original[(size_t)r * stride + c];
            if (c >= count) {
                exact &= got == SENTINEL;
            } else if (isnan(lse[r]) && s != -INFINITY) {
                exact &= isnan(got);
            } else if (lse[r] == -INFINITY || s == -INFINITY) {
                exact &= got == 0.0f && !signbit(got);
            } else {
                const double want = exp((double)scale * s - lse[r]);
                const double error = fabs(got - want) / want;
                if (!(error <= worst)) worst = error;
                const double difference = fabs(got - generic[(size_t)r * stride + c]) / want;
                if (!(difference <= worst)) worst = difference;
            }
        }
    CHECK(exact, "%s probabilities %dx%d: masked and empty give +0, NaN rows NaN where allowed, "
          "tail kept",
          table->name, rows, count);
    CHECK(worst <= EXP_TOLERANCE, "%s probabilities %dx%d: relative error %.3g", table->name,
          rows, count, worst);

    /* score_gradient: gradient = P * (dP - D), exactly 0 where P = 0 (a NaN D too). */
    float *gradient = malloc(sizeof(float) * (size_t)rows * stride);
    float *probability = malloc(sizeof(float) * (size_t)rows * stride);
    float *row_dot = malloc(sizeof(float) * (size_t)rows);
    test_fill_normal(rng, gradient, (int64_t)rows * stride, 1.0f);
    for (int i = 0; i < rows * stride; ++i)
        probability[i] = test_rng_uniform(rng) < 0.2 ? 0.0f : (float)test_rng_uniform(rng);
    for (int r = 0; r < rows; ++r) row_dot[r] = (float)test_rng_normal(rng);
    if (rows > 1) row_dot[1] = NAN; /* a NaN row: NaN where P > 0, 0 where P = 0 */
    for (int r = 0; r < rows; ++r) gradient[(size_t)r * stride + count] = SENTINEL;
    memcpy(original, gradient, sizeof(float) * (size_t)rows * stride);
    memcpy(generic, gradient, sizeof(float) * (size_t)rows * stride);
    table->backward.score_gradient(rows, count, probability, gradient, stride, row_dot);
    generic_registry()->backward.score_gradient(rows, count, probability, generic, stride, row_dot);
    worst = 0.0;
    exact = 1;
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < count; ++c) {
            const size_t at = (size_t)r * stride + c;
            if (probability[at] == 0.0f || isnan(row_dot[r])) {
                exact &= probability[at] == 0.0f ? gradient[at] == 0.0f && generic[at] == 0.0f
                                                 : isnan(gradient[at]) && isnan(generic[at]);
                continue;
            }
            const double want = (double)probability[at] * ((double)original[at] - row_dot[r]);
            const double error = fabs(gradient[at] - want) / (1.0 + fabs(want));
            if (!(error <= worst)) worst = error;
            const double difference = fabs(gradient[at] - generic[at]) / (1.0 + fabs(want));
            if (!(difference <= worst)) worst = difference;
        }
        exact &= gradient[(size_t)r * stride + count] == SENTINEL;
    }
    CHECK(exact, "%s score_gradient %dx%d: 0 where P = 0, NaN rows NaN elsewhere, column past "
          "count untouched", table->name, rows, count);
    CHECK(worst <= GRADIENT_TOLERANCE, "%s score_gradient %dx%d: error %.3g", table->name, rows,
          count, worst);
    free(scores), free(original), free(lse), free(gradient), free(probability), free(row_dot);
    free(generic);
}

int main(void) {
    const attn_kernels *registries[8];
    const int count = attn_kernels_available(registries, 8);
    CHECK(count >= 1 && count <= 8, "%d registries available", count);
    test_rng rng;
    test_rng_seed(&rng, 4242);
    for (int k = 0; k < count && k < 8; ++k) {
        const attn_kernels *table = registries[k];
        const attn_backward_kernels *b = &table->backward;
        CHECK(b->accumulate && b->accumulate_transposed && b->probabilities && b->score_gradient,
              "registry %s fills every backward slot", table->name);
        double worst = 0.0;
        for (size_t c = 0; c < sizeof product_cases / sizeof product_cases[0]; ++c)
            for (int transposed = 0; transposed < 2; ++transposed) {
                const double error = check_product(table, &product_cases[c], transposed, &rng);
                CHECK(error <= PRODUCT_TOLERANCE, "%s %s %dx%dx%d: error %.3g", table->name,
                      transposed ? "accumulate_transposed" : "accumulate",
                      product_cases[c].outputs, product_cases[c].inner, product_cases[c].dim,
                      error);
                if (!(error <= worst)) worst = error;
            }
        static const int tiles[][2] = {{1, 1}, {5, 17}, {64, 64}, {7, 130}, {3, 8}};
        for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; ++t)
            check_elementwise(table, tiles[t][0], tiles[t][1], &rng);

        /* Determinism: the same inputs give the same bits. */
        const product_case *pc = &product_cases[2];
        float *first = NULL;
        for (int run = 0; run < 2; ++run) {
            test_rng same;
            test_rng_seed(&same, 99);
            const int stride = ATTN_BACKWARD_ROW_FLOATS(pc->dim);
            float *weights = malloc(sizeof(float) * (size_t)pc->outputs * pc->inner);
            float *values = calloc((size_t)pc->inner * stride, sizeof(float));
            float *accumulator = calloc((size_t)pc->outputs * pc->dim, sizeof(float));
            test_fill_normal(&same, weights, (int64_t)pc->outputs * pc->inner, 1.0f);
            test_fill_normal(&same, values, (int64_t)pc->inner * stride, 1.0f);
            table->backward.accumulate(pc->outputs, pc->inner, pc->dim, weights, pc->inner, values,
                              stride, accumulator, pc->dim);
            if (run == 0) {
                first = accumulator;
            } else {
                CHECK(memcmp(first, accumulator, sizeof(float) * pc->outputs * pc->dim) == 0,
                      "%s accumulate: repeated call bitwise equal", table->name);
                free(accumulator);
            }
            free(weights), free(values);
        }
        free(first);
        printf("%-8s products worst relative error %.2e\n", table->name, worst);
    }
    return test_finish();
}
