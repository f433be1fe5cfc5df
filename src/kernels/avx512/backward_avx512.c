/*
 * backward_avx512.c — the backward part of the registry (kernels/registry.h) with
 * AVX-512: the tile products dQ += dS·K, dV += Pᵀ·dO and dK += dSᵀ·Q, reading P and dS in
 * place (the transposed form just broadcasts down a column instead of along a row) and the
 * value rows unpacked, and the elementwise steps P = exp(scale·S − lse), dS = P·(dP − D).
 *
 * The products use a register-blocked micro-kernel of up to 6 output rows × 4 vectors of 16
 * (24 zmm accumulators, loaded once, updated for every inner index in order, stored once),
 * the same shape as the forward's value kernel: Zen 4/5 need >= 8 FMA chains in flight.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/avx512/kernels_avx512.h"
#include "exp_avx512.h"

#define LANES 16
#define PRODUCT_ROWS 6   /* output rows per micro-tile */
#define PRODUCT_BLOCKS 4 /* vectors of 16 output elements per micro-tile */

/* One micro-tile: ROWS output rows x BLOCKS vectors of the accumulator. The weight of output
 * row r and inner index i is weights[r * row_step + i * inner_step]; value row i starts at
 * values + i * values_stride and is read in whole vectors (padded rows, see
 * registry.h); the accumulator's last vector touches only the lanes in last_mask.
 * ROWS, BLOCKS, row_step and inner_step are constants at every call site. */
static inline __attribute__((always_inline)) void product_micro_tile(
    const int ROWS, const int BLOCKS, int inner, const float *weights, int row_step,
    int inner_step, const float *values, int values_stride, float *accumulator,
    int accumulator_stride, __mmask16 last_mask) {
    __m512 sum[PRODUCT_ROWS][PRODUCT_BLOCKS];
    const int last = BLOCKS - 1;
    for (int r = 0; r < ROWS; ++r) {
        const float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < last; ++b) sum[r][b] = _mm512_loadu_ps(row + b * LANES);
        sum[r][last] = _mm512_maskz_loadu_ps(last_mask, row + last * LANES);
    }
    for (int i = 0; i < inner; ++i) {
        __m512 value[PRODUCT_BLOCKS];
        const float *value_row = values + (size_t)i * values_stride;
        /* Whole vectors: a masked load here makes gcc 12 spill the accumulators. */
        for (int b = 0; b < BLOCKS; ++b) value[b] = _mm512_loadu_ps(value_row + b * LANES);
        for (int r = 0; r < ROWS; ++r) {
            const __m512 weight =
                _mm512_set1_ps(weights[(size_t)r * row_step + (size_t)i * inner_step]);
            for (int b = 0; b < BLOCKS; ++b)
                sum[r][b] = _mm512_fmadd_ps(weight, value[b], sum[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < last; ++b) _mm512_storeu_ps(row + b * LANES, sum[r][b]);
        _mm512_mask_storeu_ps(row + last * LANES, last_mask, sum[r][last]);
    }
}

/* The micro-tile for run-time rows <= 6 and blocks <= 4, weights row-major
 * (row_step = stride, inner_step = 1) or transposed (row_step = 1, inner_step = stride); one
 * dispatch function per form keeps each small enough for gcc to hold the accumulators in
 * registers. */
#define PRODUCT_CASE(ROWS, BLOCKS, ROW_STEP, INNER_STEP)                                     \
    case (ROWS)*8 + (BLOCKS):                                                                \
        product_micro_tile(ROWS, BLOCKS, inner, weights, ROW_STEP, INNER_STEP, values,       \
                           values_stride, accumulator, accumulator_stride, last_mask);       \
        break;
#define PRODUCT_CASES_FOR_ROWS(ROWS, ROW_STEP, INNER_STEP)                                   \
    PRODUCT_CASE(ROWS, 1, ROW_STEP, INNER_STEP) PRODUCT_CASE(ROWS, 2, ROW_STEP, INNER_STEP)   \
    PRODUCT_CASE(ROWS, 3, ROW_STEP, INNER_STEP) PRODUCT_CASE(ROWS, 4, ROW_STEP, INNER_STEP)
#define PRODUCT_DISPATCH(NAME, ROW_STEP, INNER_STEP)                                         \
    static void NAME(int rows, int blocks, int inner, const float *weights,                  \
                     int weights_stride, const float *values, int values_stride,             \
                     float *accumulator, int accumulator_stride, __mmask16 last_mask) {      \
        switch (rows * 8 + blocks) {                                                         \
            PRODUCT_CASES_FOR_ROWS(1, ROW_STEP, INNER_STEP)                                  \
            PRODUCT_CASES_FOR_ROWS(2, ROW_STEP, INNER_STEP)                                  \
            PRODUCT_CASES_FOR_ROWS(3, ROW_STEP, INNER_STEP)                                  \
            PRODUCT_CASES_FOR_ROWS(4, ROW_STEP, INNER_STEP)                                  \
            PRODUCT_CASES_FOR_ROWS(5, ROW_STEP, INNER_STEP)                                  \
            PRODUCT_CASES_FOR_ROWS(6, ROW_STEP, INNER_STEP)                                  \
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
    const int vectors = (dim + LANES - 1) / LANES;
    for (int first_vector = 0; first_vector < vectors; first_vector += PRODUCT_BLOCKS) {
        const int blocks =
            vectors - first_vector < PRODUCT_BLOCKS ? vectors - first_vector : PRODUCT_BLOCKS;
        const int first_element = first_vector * LANES;
        const int tail = dim - (first_element + (blocks - 1) * LANES); /* 1.. in the last */
        const __mmask16 last_mask =
            tail >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << tail) - 1u);
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

static void avx512_accumulate(int outputs, int inner, int dim, const float *weights,
                              int weights_stride, const float *values, int values_stride,
                              float *accumulator, int accumulator_stride) {
    product(0, outputs, inner, dim, weights, weights_stride, values, values_stride, accumulator,
            accumulator_stride);
}

static void avx512_accumulate_transposed(int outputs, int inner, int dim, const float *weights,
                                         int weights_stride, const float *values,
                                         int values_stride, float *accumulator,
                                         int accumulator_stride) {
    product(1, outputs, inner, dim, weights, weights_stride, values, values_stride, accumulator,
            accumulator_stride);
}

/* The mask of the first `count` lanes (count in 0..16). */
static inline __mmask16 first_lanes(int count) {
    return count >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
}

/* scores[r][c] = exp(scale * scores[r][c] - row_lse[r]) (see registry.h). */
static void avx512_probabilities(int rows, int count, float *scores, int stride, float scale,
                                 const float *row_lse) {
    const __m512 scale_vector = _mm512_set1_ps(scale);
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * stride;
        const float lse = row_lse[r];
        if (lse == -INFINITY || isnan(lse)) { /* empty row: 0; NaN LSE: NaN */
            const __m512 fill = _mm512_set1_ps(lse == -INFINITY ? 0.0f : lse);
            for (int c = 0; c < count; c += LANES)
                _mm512_mask_storeu_ps(row + c, first_lanes(count - c), fill);
            continue;
        }
        const __m512 lse_vector = _mm512_set1_ps(lse);
        for (int c = 0; c < count; c += LANES) {
            const __mmask16 lanes = first_lanes(count - c);
            const __m512 score = _mm512_maskz_loadu_ps(lanes, row + c);
            _mm512_mask_storeu_ps(row + c, lanes,
                                  attn_exp_avx512(_mm512_fmsub_ps(score, scale_vector,
                                                                  lse_vector)));
        }
    }
}

/* gradient[r][c] = probabilities[r][c] * (gradient[r][c] - row_dot[r]). */
static void avx512_score_gradient(int rows, int count, const float *probabilities,
                                  float *gradient, int stride, const float *row_dot) {
    for (int r = 0; r < rows; ++r) {
        const float *probability = probabilities + (size_t)r * stride;
        float *row = gradient + (size_t)r * stride;
        const __m512 dot = _mm512_set1_ps(row_dot[r]);
        for (int c = 0; c < count; c += LANES) {
            const __mmask16 lanes = first_lanes(count - c);
            const __m512 value = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, row + c), dot);
            _mm512_mask_storeu_ps(
                row + c, lanes,
                _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, probability + c), value));
        }
    }
}

const attn_backward_kernels attn_avx512_backward = {
    .accumulate = avx512_accumulate,
    .accumulate_transposed = avx512_accumulate_transposed,
    .probabilities = avx512_probabilities,
    .score_gradient = avx512_score_gradient,
};
