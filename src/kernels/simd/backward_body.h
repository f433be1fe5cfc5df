/*
 * backward_body.h — the backward part of the registry (kernels/registry.h) written once over
 * vec.h, compiled per width by src/kernels/avx2/backward_avx2.c and
 * src/kernels/avx512/backward_avx512.c; it defines VEC_NAME(backward).
 *
 * The tile products dQ += dS·K, dV += Pᵀ·dO and dK += dSᵀ·Q read P and dS in place (the
 * transposed form just broadcasts down a column instead of along a row) and the value rows
 * unpacked, with a register-blocked micro-kernel of up to PRODUCT_ROWS (6) output rows ×
 * PRODUCT_BLOCKS vectors (24 zmm accumulators at 16 lanes, 12 ymm at 8), loaded once, updated
 * for every inner index in order, stored once. The elementwise steps: P = exp(scale·S − lse),
 * dS = P·(dP − D).
 */
#include <math.h>

#include "kernels/registry.h"
#include "kernels/simd/vmath.h"

#define PRODUCT_ROWS 6
#if VLANES == 16
#define PRODUCT_BLOCKS 4
#define PRODUCT_CASES_FOR_ROWS(CASE, ROWS, RS, IS) \
    CASE(ROWS, 1, RS, IS) CASE(ROWS, 2, RS, IS) CASE(ROWS, 3, RS, IS) CASE(ROWS, 4, RS, IS)
#else
#define PRODUCT_BLOCKS 2
#define PRODUCT_CASES_FOR_ROWS(CASE, ROWS, RS, IS) CASE(ROWS, 1, RS, IS) CASE(ROWS, 2, RS, IS)
#endif

/* One micro-tile: ROWS output rows x BLOCKS vectors of the accumulator. The weight of output
 * row r and inner index i is weights[r * row_step + i * inner_step]; value row i starts at
 * values + i * values_stride and is read in whole vectors (padded rows, see registry.h); the
 * accumulator's last vector touches only the lanes in last_mask. ROWS, BLOCKS, row_step and
 * inner_step are constants at every call site. */
V_INLINE void product_micro_tile(const int ROWS, const int BLOCKS, int inner,
                                 const float *weights, int row_step, int inner_step,
                                 const float *values, int values_stride, float *accumulator,
                                 int accumulator_stride, vmask last_mask) {
    vf sum[PRODUCT_ROWS][PRODUCT_BLOCKS];
    const int last = BLOCKS - 1;
    for (int r = 0; r < ROWS; ++r) {
        const float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < last; ++b) sum[r][b] = vf_loadu(row + b * VLANES);
        sum[r][last] = vf_maskz_loadu(last_mask, row + last * VLANES);
    }
#pragma GCC unroll 2
    for (int i = 0; i < inner; ++i) {
        vf value[PRODUCT_BLOCKS];
        const float *value_row = values + (size_t)i * values_stride;
        /* Whole vectors: a masked load here makes gcc 12 spill the accumulators. */
        for (int b = 0; b < BLOCKS; ++b) value[b] = vf_loadu(value_row + b * VLANES);
        for (int r = 0; r < ROWS; ++r) {
            /* set1 of a value, not a broadcast from a pointer: with the latter gcc 12 spills
             * sum[][] at 8 lanes */
            const vf weight = vf_set1(weights[(size_t)r * row_step + (size_t)i * inner_step]);
            for (int b = 0; b < BLOCKS; ++b) sum[r][b] = vf_fmadd(weight, value[b], sum[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < last; ++b) vf_storeu(row + b * VLANES, sum[r][b]);
        vf_mask_storeu(row + last * VLANES, last_mask, sum[r][last]);
    }
}

/* The micro-tile for run-time rows <= 6 and blocks <= PRODUCT_BLOCKS, weights row-major
 * (row_step = stride, inner_step = 1) or transposed (row_step = 1, inner_step = stride); one
 * dispatch function per form keeps each small enough for gcc to hold the accumulators in
 * registers. */
#define PRODUCT_CASE(ROWS, BLOCKS, ROW_STEP, INNER_STEP)                                     \
    case (ROWS)*8 + (BLOCKS):                                                                \
        product_micro_tile(ROWS, BLOCKS, inner, weights, ROW_STEP, INNER_STEP, values,       \
                           values_stride, accumulator, accumulator_stride, last_mask);       \
        break;
#define PRODUCT_DISPATCH(NAME, ROW_STEP, INNER_STEP)                                         \
    static void NAME(int rows, int blocks, int inner, const float *weights,                  \
                     int weights_stride, const float *values, int values_stride,             \
                     float *accumulator, int accumulator_stride, vmask last_mask) {          \
        switch (rows * 8 + blocks) {                                                         \
            PRODUCT_CASES_FOR_ROWS(PRODUCT_CASE, 1, ROW_STEP, INNER_STEP)                    \
            PRODUCT_CASES_FOR_ROWS(PRODUCT_CASE, 2, ROW_STEP, INNER_STEP)                    \
            PRODUCT_CASES_FOR_ROWS(PRODUCT_CASE, 3, ROW_STEP, INNER_STEP)                    \
            PRODUCT_CASES_FOR_ROWS(PRODUCT_CASE, 4, ROW_STEP, INNER_STEP)                    \
            PRODUCT_CASES_FOR_ROWS(PRODUCT_CASE, 5, ROW_STEP, INNER_STEP)                    \
            PRODUCT_CASES_FOR_ROWS(PRODUCT_CASE, 6, ROW_STEP, INNER_STEP)                    \
        default: break;                                                                      \
        }                                                                                    \
    }
PRODUCT_DISPATCH(product_micro_tile_rows, weights_stride, 1)
PRODUCT_DISPATCH(product_micro_tile_columns, 1, weights_stride)

/* accumulator[o][e] += sum_i weight(o, i) * values[i][e] over micro-tiles; weight(o, i) is
 * weights[o * weights_stride + i], or weights[i * weights_stride + o] when transposed. */
static void product(int transposed, int outputs, int inner, int dim, const float *weights,
                    int weights_stride, const float *values, int values_stride,
                    float *accumulator, int accumulator_stride) {
    const int vectors = (dim + VLANES - 1) / VLANES;
    for (int first_vector = 0; first_vector < vectors; first_vector += PRODUCT_BLOCKS) {
        const int blocks =
            vectors - first_vector < PRODUCT_BLOCKS ? vectors - first_vector : PRODUCT_BLOCKS;
        const int first_element = first_vector * VLANES;
        const vmask last_mask = vmask_first(dim - (first_element + (blocks - 1) * VLANES));
        for (int first_row = 0; first_row < outputs; first_row += PRODUCT_ROWS) {
            const int rows =
                outputs - first_row < PRODUCT_ROWS ? outputs - first_row : PRODUCT_ROWS;
            const float *first_weight = transposed ? weights + first_row
                                                   : weights + (size_t)first_row * weights_stride;
            float *first_output =
                accumulator + (size_t)first_row * accumulator_stride + first_element;
            if (transposed)
                product_micro_tile_columns(rows, blocks, inner, first_weight, weights_stride,
                                           values + first_element, values_stride, first_output,
                                           accumulator_stride, last_mask);
            else
                product_micro_tile_rows(rows, blocks, inner, first_weight, weights_stride,
                                        values + first_element, values_stride, first_output,
                                        accumulator_stride, last_mask);
        }
    }
}

static void accumulate(int outputs, int inner, int dim, const float *weights,
                       int weights_stride, const float *values, int values_stride,
                       float *accumulator, int accumulator_stride) {
    product(0, outputs, inner, dim, weights, weights_stride, values, values_stride, accumulator,
            accumulator_stride);
}

static void accumulate_transposed(int outputs, int inner, int dim, const float *weights,
                                  int weights_stride, const float *values, int values_stride,
                                  float *accumulator, int accumulator_stride) {
    product(1, outputs, inner, dim, weights, weights_stride, values, values_stride, accumulator,
            accumulator_stride);
}

/* scores[r][c] = exp(scale * scores[r][c] - row_lse[r]) (see registry.h). */
static void probabilities(int rows, int count, float *scores, int stride, float scale,
                          const float *row_lse) {
    const vf scale_vector = vf_set1(scale);
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * stride;
        const float lse = row_lse[r];
        if (lse == -INFINITY || isnan(lse)) { /* empty row: 0; NaN LSE: NaN where allowed */
            const vf fill = vf_set1(lse == -INFINITY ? 0.0f : lse);
            const vf minus_infinity = vf_set1(-INFINITY), zero = vf_zero();
            for (int c = 0; c < count; c += VLANES) {
                const vmask lanes = vmask_first(count - c);
                const vmask masked = vf_equal(vf_maskz_loadu(lanes, row + c), minus_infinity);
                vf_mask_storeu(row + c, lanes, vf_select(masked, fill, zero));
            }
            continue;
        }
        const vf lse_vector = vf_set1(lse), log2e = vf_set1(VMATH_LOG2E);
        for (int c = 0; c < count; c += VLANES) { /* exp(x) = 2^(x·log2 e): vmath.h vf_exp2 */
            const vmask lanes = vmask_first(count - c);
            const vf score = vf_maskz_loadu(lanes, row + c);
            vf_mask_storeu(row + c, lanes,
                           vf_exp2(vf_mul(vf_fmsub(score, scale_vector, lse_vector), log2e)));
        }
    }
}

/* gradient[r][c] = probabilities[r][c] * (gradient[r][c] - row_dot[r]), and exactly 0 where
 * the probability is 0 (a pair not allowed contributes nothing, even to a NaN row). */
static void score_gradient(int rows, int count, const float *probabilities, float *gradient,
                           int stride, const float *row_dot) {
    const vf zero = vf_zero();
    for (int r = 0; r < rows; ++r) {
        const float *probability = probabilities + (size_t)r * stride;
        float *row = gradient + (size_t)r * stride;
        const vf dot = vf_set1(row_dot[r]);
        for (int c = 0; c < count; c += VLANES) {
            const vmask lanes = vmask_first(count - c);
            const vf p = vf_maskz_loadu(lanes, probability + c);
            const vf value = vf_mul(p, vf_sub(vf_maskz_loadu(lanes, row + c), dot));
            vf_mask_storeu(row + c, lanes, vf_select(vf_equal(p, zero), value, zero));
        }
    }
}

const attn_backward_kernels VEC_NAME(backward) = {
    .accumulate = accumulate,
    .accumulate_transposed = accumulate_transposed,
    .probabilities = probabilities,
    .score_gradient = score_gradient,
};
