/*
 * values_avx2.c — O += P·V on a tile with AVX2 + FMA: values packed as rows padded to a
 * multiple of 8 (the value dimension is the SIMD dimension) and a register-blocked
 * micro-kernel of up to 6 accumulator rows × 2 vectors of 8 = 12 ymm accumulators, loaded
 * once, updated for every key of the tile, stored once. Also the per-row rescale of O.
 */
#include <immintrin.h>

#include "exp_avx2.h"
#include "kernels_avx2.h"

#define VALUE_ROWS 6   /* accumulator rows per micro-tile */
#define VALUE_BLOCKS 2 /* vectors of 8 value elements per micro-tile */

static inline int padded_dim(int dim) {
    return (dim + ATTN_AVX2_LANES - 1) / ATTN_AVX2_LANES * ATTN_AVX2_LANES;
}

size_t attn_avx2_packed_values_floats(int count, int dim) {
    return (size_t)count * (size_t)padded_dim(dim);
}

/* source: value c, element e at source[c*token_stride + e*dim_stride].
 * packed: [count][padded_dim(dim)], zero past dim. */
void attn_avx2_pack_values(int count, int dim, const float *source, int64_t token_stride,
                           int64_t dim_stride, float *packed) {
    const int row_floats = padded_dim(dim);
    for (int c = 0; c < count; ++c) {
        const float *value = source + (int64_t)c * token_stride;
        float *destination = packed + (size_t)c * row_floats;
        if (dim_stride == 1) {
            int e = 0;
            for (; e + ATTN_AVX2_LANES <= dim; e += ATTN_AVX2_LANES)
                _mm256_store_ps(destination + e, _mm256_loadu_ps(value + e));
            if (e < dim)
                _mm256_store_ps(destination + e,
                                _mm256_maskload_ps(value + e, attn_avx2_lane_mask(dim - e)));
        } else {
            for (int e = 0; e < dim; ++e) destination[e] = value[(int64_t)e * dim_stride];
            for (int e = dim; e < row_floats; ++e) destination[e] = 0.0f;
        }
    }
}

/* One micro-tile: accumulator rows [ROWS][accumulator_stride], BLOCKS vectors of 8; the
 * last vector touches only the lanes of last_mask. */
static inline __attribute__((always_inline)) void value_micro_tile(
    const int ROWS, const int BLOCKS, int count, const float *weights, int weights_stride,
    const float *values, int value_row_floats, float *accumulator, int accumulator_stride,
    __m256i last_mask) {
    __m256 sum[VALUE_ROWS][VALUE_BLOCKS];
    for (int r = 0; r < ROWS; ++r) {
        const float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) sum[r][b] = _mm256_loadu_ps(row + b * 8);
        sum[r][BLOCKS - 1] = _mm256_maskload_ps(row + (BLOCKS - 1) * 8, last_mask);
    }
    for (int c = 0; c < count; ++c) {
        __m256 value[VALUE_BLOCKS];
        const float *value_row = values + (size_t)c * value_row_floats;
        for (int b = 0; b < BLOCKS; ++b) value[b] = _mm256_load_ps(value_row + b * 8);
        for (int r = 0; r < ROWS; ++r) {
            const __m256 weight = _mm256_broadcast_ss(weights + (size_t)r * weights_stride + c);
            for (int b = 0; b < BLOCKS; ++b)
                sum[r][b] = _mm256_fmadd_ps(weight, value[b], sum[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) _mm256_storeu_ps(row + b * 8, sum[r][b]);
        _mm256_maskstore_ps(row + (BLOCKS - 1) * 8, last_mask, sum[r][BLOCKS - 1]);
    }
}

#define VALUE_CASE(ROWS, BLOCKS)                                                              \
    case (ROWS)*8 + (BLOCKS):                                                                 \
        value_micro_tile(ROWS, BLOCKS, count, weights, weights_stride, values,                \
                         value_row_floats, accumulator, accumulator_stride, last_mask);       \
        break;
#define VALUE_CASES_FOR_ROWS(ROWS) VALUE_CASE(ROWS, 1) VALUE_CASE(ROWS, 2)

static void value_micro_tile_any(int rows, int blocks, int count, const float *weights,
                                 int weights_stride, const float *values, int value_row_floats,
                                 float *accumulator, int accumulator_stride,
                                 __m256i last_mask) {
    switch (rows * 8 + blocks) {
        VALUE_CASES_FOR_ROWS(1)
        VALUE_CASES_FOR_ROWS(2)
        VALUE_CASES_FOR_ROWS(3)
        VALUE_CASES_FOR_ROWS(4)
        VALUE_CASES_FOR_ROWS(5)
        VALUE_CASES_FOR_ROWS(6)
    default: break;
    }
}

/* accumulator[r][e] += sum_c weights[r][c] * value_c[e], r < rows, e < dim, c < count.
 * weights [rows][weights_stride], packed_values from attn_avx2_pack_values(count, dim),
 * accumulator [rows][accumulator_stride]. Keys are summed in index order. */
void attn_avx2_accumulate_values(int rows, int count, int dim, const float *weights,
                                 int weights_stride, const float *packed_values,
                                 float *accumulator, int accumulator_stride) {
    const int value_row_floats = padded_dim(dim);
    const int vectors = value_row_floats / ATTN_AVX2_LANES;
    for (int first_vector = 0; first_vector < vectors; first_vector += VALUE_BLOCKS) {
        const int blocks = vectors - first_vector < VALUE_BLOCKS ? vectors - first_vector
                                                                 : VALUE_BLOCKS;
        const int last_element = (first_vector + blocks) * ATTN_AVX2_LANES;
        const __m256i last_mask = attn_avx2_lane_mask(dim - (last_element - ATTN_AVX2_LANES));
        const int first_element = first_vector * ATTN_AVX2_LANES;
        for (int first_row = 0; first_row < rows; first_row += VALUE_ROWS) {
            const int micro_rows = rows - first_row < VALUE_ROWS ? rows - first_row : VALUE_ROWS;
            value_micro_tile_any(micro_rows, blocks, count,
                                 weights + (size_t)first_row * weights_stride, weights_stride,
                                 packed_values + first_element, value_row_floats,
                                 accumulator + (size_t)first_row * accumulator_stride +
                                     first_element,
                                 accumulator_stride, last_mask);
        }
    }
}

/* accumulator[r][e] *= factor[r], r < rows, e < dim. */
void attn_avx2_scale_rows(int rows, int dim, const float *factor, float *accumulator,
                          int accumulator_stride) {
    for (int r = 0; r < rows; ++r) {
        float *row = accumulator + (size_t)r * accumulator_stride;
        const __m256 scale = _mm256_set1_ps(factor[r]);
        int e = 0;
        for (; e + ATTN_AVX2_LANES <= dim; e += ATTN_AVX2_LANES)
            _mm256_storeu_ps(row + e, _mm256_mul_ps(_mm256_loadu_ps(row + e), scale));
        if (e < dim) {
            const __m256i mask = attn_avx2_lane_mask(dim - e);
            _mm256_maskstore_ps(row + e, mask,
                                _mm256_mul_ps(_mm256_maskload_ps(row + e, mask), scale));
        }
    }
}
