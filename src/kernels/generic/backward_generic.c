/*
 * backward_generic.c — the backward part of the registry (kernels/registry.h) in plain C, the
 * reference the SIMD ones are tested against. The inner loops run over the contiguous output dimension so that
 * gcc vectorizes them; sums over `inner` go in index order.
 */
#include <math.h>

#include "kernels/generic/generic.h"

/* accumulator[o][e] += sum_i weights[o][i] * values[i][e]. */
static void generic_accumulate(int outputs, int inner, int dim, const float *weights,
                               int weights_stride, const float *values, int values_stride,
                               float *accumulator, int accumulator_stride) {
    for (int o = 0; o < outputs; ++o) {
        float *row = accumulator + (size_t)o * accumulator_stride;
        for (int i = 0; i < inner; ++i) {
            const float weight = weights[(size_t)o * weights_stride + i];
            const float *value = values + (size_t)i * values_stride;
            for (int e = 0; e < dim; ++e) row[e] += weight * value[e];
        }
    }
}

/* accumulator[o][e] += sum_i weights[i][o] * values[i][e]. */
static void generic_accumulate_transposed(int outputs, int inner, int dim, const float *weights,
                                          int weights_stride, const float *values,
                                          int values_stride, float *accumulator,
                                          int accumulator_stride) {
    for (int o = 0; o < outputs; ++o) {
        float *row = accumulator + (size_t)o * accumulator_stride;
        for (int i = 0; i < inner; ++i) {
            const float weight = weights[(size_t)i * weights_stride + o];
            const float *value = values + (size_t)i * values_stride;
            for (int e = 0; e < dim; ++e) row[e] += weight * value[e];
        }
    }
}

/* scores[r][c] = exp(scale * scores[r][c] - row_lse[r]); empty rows (lse = -inf) give 0; a
 * pair not allowed (score -inf) gives 0 in a NaN row too. */
static void generic_probabilities(int rows, int count, float *scores, int stride, float scale,
                                  const float *row_lse) {
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * stride;
        const float lse = row_lse[r];
        if (lse == -INFINITY) {
            for (int c = 0; c < count; ++c) row[c] = 0.0f;
            continue;
        }
        for (int c = 0; c < count; ++c)
            row[c] = row[c] == -INFINITY ? 0.0f : expf(scale * row[c] - lse);
    }
}

/* gradient[r][c] = probabilities[r][c] * (gradient[r][c] - row_dot[r]), exactly 0 where the
 * probability is 0. */
static void generic_score_gradient(int rows, int count, const float *probabilities,
                                   float *gradient, int stride, const float *row_dot) {
    for (int r = 0; r < rows; ++r) {
        const float *probability = probabilities + (size_t)r * stride;
        float *row = gradient + (size_t)r * stride;
        const float dot = row_dot[r];
        for (int c = 0; c < count; ++c)
            row[c] = probability[c] == 0.0f ? 0.0f : probability[c] * (row[c] - dot);
    }
}

const attn_backward_kernels attn_generic_backward = {
    .accumulate = generic_accumulate,
    .accumulate_transposed = generic_accumulate_transposed,
    .probabilities = generic_probabilities,
    .score_gradient = generic_score_gradient,
};
