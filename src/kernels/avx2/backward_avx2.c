/*
 * backward_avx2.c — the backward part of the registry (kernels/registry.h) with AVX2 +
 * FMA: the tile products dQ += dS·K, dV += Pᵀ·dO and dK += dSᵀ·Q, reading P and dS in place
 * and the value rows unpacked, and the elementwise steps P = exp(scale·S − lse),
 * dS = P·(dP − D). Same structure as backward_avx512.c with 8 lanes: micro-tiles of up to
 * 6 output rows × 2 vectors of 8 (12 ymm accumulators of the 16 registers).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/avx2/kernels_avx2.h"
#include "exp_avx2.h"

#define LANES 8
#define PRODUCT_ROWS 6   /* output rows per micro-tile */
#define PRODUCT_BLOCKS 2 /* vectors of 8 output elements per micro-tile */

/* One micro-tile: ROWS output rows x BLOCKS vectors of the accumulator; the weight of output
 * row r and inner index i is weights[r * row_step + i * inner_step]. Value rows are read in
 * whole vectors (padded rows, see registry.h); the accumulator's last vector is read
 * and written through last_mask (the lanes that exist). */
static inline __attribute__((always_inline)) void product_micro_tile(
    const int ROWS, const int BLOCKS, int inner, const float *weights, int row_step,
    int inner_step, const float *values, int values_stride, float *accumulator,
    int accumulator_stride, __m256i last_mask) {
    __m256 sum[PRODUCT_ROWS][PRODUCT_BLOCKS];
    const int last = BLOCKS - 1;
    for (int r = 0; r < ROWS; ++r) {
        const float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < last; ++b) sum[r][b] = _mm256_loadu_ps(row + b * LANES);
        sum[r][last] = _mm256_maskload_ps(row + last * LANES, last_mask);
    }
    for (int i = 0; i < inner; ++i) {
        __m256 value[PRODUCT_BLOCKS];
        const float *value_row = values + (size_t)i * values_stride;
        /* Whole vectors: a masked load here makes gcc 12 spill the accumulators. */
        for (int b = 0; b < BLOCKS; ++b) value[b] = _mm256_loadu_ps(value_row + b * LANES);
        for (int r = 0; r < ROWS; ++r) {
            /* set1, not _mm256_broadcast_ss(pointer): with the latter gcc 12 spills sum[][] */
            const __m256 weight =
                _mm256_set1_ps(weights[(size_t)r * row_step + (size_t)i * inner_step]);
            for (int b = 0; b < BLOCKS; ++b)
                sum[r][b] = _mm256_fmadd_ps(weight, value[b], sum[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < last; ++b) _mm256_storeu_ps(row + b * LANES, sum[r][b]);
        _mm256_maskstore_ps(row + last * LANES, last_mask, sum[r][last]);
    }
}

#define PRODUCT_CASE(ROWS, BLOCKS)                                                           \
    case (ROWS)*4 + (BLOCKS):                                                                \
        if (transposed)                                                                      \
            product_micro_tile(ROWS, BLOCKS, inner, weights, 1, weights_stride, values,      \
                               values_stride, accumulator, accumulator_stride, last_mask);   \
        else                                                                                 \
            product_micro_tile(ROWS, BLOCKS, inner, weights, weights_stride, 1, values,      \
                               values_stride, accumulator, accumulator_stride, last_mask);   \
        break;
#define PRODUCT_CASES_FOR_ROWS(ROWS) PRODUCT_CASE(ROWS, 1) PRODUCT_CASE(ROWS, 2)

static void product_micro_tile_any(int rows, int blocks, int transposed, int inner,
                                   const float *weights, int weights_stride,
                                   const float *values, int values_stride, float *accumulator,
                                   int accumulator_stride, __m256i last_mask) {
    switch (rows * 4 + blocks) {
        PRODUCT_CASES_FOR_ROWS(1)
        PRODUCT_CASES_FOR_ROWS(2)
        PRODUCT_CASES_FOR_ROWS(3)
        PRODUCT_CASES_FOR_ROWS(4)
        PRODUCT_CASES_FOR_ROWS(5)
        PRODUCT_CASES_FOR_ROWS(6)
    default: break;
    }
}

/* accumulator[o][e] += sum_i weight(o, i) * values[i][e]; weight(o, i) is
 * weights[o * weights_stride + i], or weights[i * weights_stride + o] when transposed. */
static void product(int transposed, int outputs, int inner, int dim, const float *weights,
                    int weights_stride, const float *values, int values_stride,
                    float *accumulator, int accumulator_stride) {
    const int vectors = (dim + LANES - 1) / LANES;
    for (int first_vector = 0; first_vector < vectors; first_vector += PRODUCT_BLOCKS) {
        const int blocks =
            vectors - first_vector < PRODUCT_BLOCKS ? vectors - first_vector : PRODUCT_BLOCKS;
        const int first_element = first_vector * LANES;
        const __m256i last_mask =
            attn_avx2_lane_mask(dim - (first_element + (blocks - 1) * LANES));
        for (int first_row = 0; first_row < outputs; first_row += PRODUCT_ROWS) {
            const int rows =
                outputs - first_row < PRODUCT_ROWS ? outputs - first_row : PRODUCT_ROWS;
            const float *first_weight = transposed ? weights + first_row
                                                   : weights + (size_t)first_row * weights_stride;
            product_micro_tile_any(rows, blocks, transposed, inner, first_weight,
                                   weights_stride, values + first_element, values_stride,
                                   accumulator + (size_t)first_row * accumulator_stride +
                                       first_element,
                                   accumulator_stride, last_mask);
        }
    }
}

static void avx2_accumulate(int outputs, int inner, int dim, const float *weights,
                            int weights_stride, const float *values, int values_stride,
                            float *accumulator, int accumulator_stride) {
    product(0, outputs, inner, dim, weights, weights_stride, values, values_stride, accumulator,
            accumulator_stride);
}

static void avx2_accumulate_transposed(int outputs, int inner, int dim, const float *weights,
                                       int weights_stride, const float *values,
                                       int values_stride, float *accumulator,
                                       int accumulator_stride) {
    product(1, outputs, inner, dim, weights, weights_stride, values, values_stride, accumulator,
            accumulator_stride);
}

/* scores[r][c] = exp(scale * scores[r][c] - row_lse[r]) (see registry.h). */
static void avx2_probabilities(int rows, int count, float *scores, int stride, float scale,
                               const float *row_lse) {
    const __m256 scale_vector = _mm256_set1_ps(scale);
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * stride;
        const float lse = row_lse[r];
        if (lse == -INFINITY || isnan(lse)) { /* empty row: 0; NaN LSE: NaN */
            const float fill = lse == -INFINITY ? 0.0f : lse;
            for (int c = 0; c < count; ++c) row[c] = fill;
            continue;
        }
        const __m256 lse_vector = _mm256_set1_ps(lse);
        for (int c = 0; c < count; c += LANES) {
            const __m256i lanes = attn_avx2_lane_mask(count - c);
            const __m256 score = _mm256_maskload_ps(row + c, lanes);
            _mm256_maskstore_ps(row + c, lanes,
                                attn_exp_avx2(_mm256_fmsub_ps(score, scale_vector, lse_vector)));
        }
    }
}

/* gradient[r][c] = probabilities[r][c] * (gradient[r][c] - row_dot[r]). */
static void avx2_score_gradient(int rows, int count, const float *probabilities,
                                float *gradient, int stride, const float *row_dot) {
    for (int r = 0; r < rows; ++r) {
        const float *probability = probabilities + (size_t)r * stride;
        float *row = gradient + (size_t)r * stride;
        const __m256 dot = _mm256_set1_ps(row_dot[r]);
        for (int c = 0; c < count; c += LANES) {
            const __m256i lanes = attn_avx2_lane_mask(count - c);
            const __m256 value = _mm256_sub_ps(_mm256_maskload_ps(row + c, lanes), dot);
            _mm256_maskstore_ps(row + c, lanes,
                                _mm256_mul_ps(_mm256_maskload_ps(probability + c, lanes), value));
        }
    }
}

const attn_backward_kernels attn_avx2_backward = {
    .accumulate = avx2_accumulate,
    .accumulate_transposed = avx2_accumulate_transposed,
    .probabilities = avx2_probabilities,
    .score_gradient = avx2_score_gradient,
};
