/*
 * forward_generic.c — the portable forward part of the registry (kernels/registry.h) in plain
 * C, and the reference the SIMD ones are checked against. The loops are written so gcc -O3 vectorizes them:
 *   - keys are packed transposed in blocks of 16, [block][dim][16], so the score loop runs
 *     over the keys of a block;
 *   - values are packed row-major, [count][padded dim], so the accumulation runs over dims;
 *   - packed rows are padded to 16 floats with zeros, so every packed row starts 64-byte
 *     aligned when the buffer is.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/generic/generic.h"
#include "kernels/philox.h"

enum { GENERIC_BLOCK = 16 }; /* packed rows are padded to 16 floats (64 bytes) */

static int round_up_to_block(int n) { return (n + GENERIC_BLOCK - 1) / GENERIC_BLOCK * GENERIC_BLOCK; }

/* Keys: blocks of 16 keys, each [dim][16]: key c of dimension d at
 * packed[(c / 16) * 16 * dim + d * 16 + c % 16]. Lanes past count in the last block are 0.
 * The packing of a tile's first keys does not depend on how many follow (registry.h's prefix
 * property). */
static size_t generic_packed_keys_floats(int count, int dim) {
    return (size_t)round_up_to_block(count) * (size_t)dim;
}

/* Values: [count][round_up(dim)], value c element e at packed[c * padded_dim + e]. */
static size_t generic_packed_values_floats(int count, int dim) {
    return (size_t)count * (size_t)round_up_to_block(dim);
}

static void generic_pack_keys(int count, int dim, const float *source, int64_t token_stride,
                              int64_t dim_stride, float *packed) {
    for (int first = 0; first < count; first += GENERIC_BLOCK) {
        float *block = packed + (size_t)first * dim;
        const int lanes = count - first < GENERIC_BLOCK ? count - first : GENERIC_BLOCK;
        for (int d = 0; d < dim; ++d) {
            float *packed_row = block + (size_t)d * GENERIC_BLOCK;
            for (int lane = 0; lane < lanes; ++lane)
                packed_row[lane] = source[(first + lane) * token_stride + d * dim_stride];
            for (int lane = lanes; lane < GENERIC_BLOCK; ++lane) packed_row[lane] = 0.0f;
        }
    }
}

static bool generic_pack_values(int count, int dim, const float *source, int64_t token_stride,
                                int64_t dim_stride, float *packed) {
    const int padded_dim = round_up_to_block(dim);
    bool finite = true;
    for (int c = 0; c < count; ++c) {
        float *packed_row = packed + (size_t)c * padded_dim;
        const float *source_row = source + c * token_stride;
        for (int e = 0; e < dim; ++e) {
            packed_row[e] = source_row[e * dim_stride];
            finite &= isfinite(packed_row[e]) != 0;
        }
        for (int e = dim; e < padded_dim; ++e) packed_row[e] = 0.0f;
    }
    return finite;
}

/* scores[r][c] = sum_d queries[r][d] * key_c[d]. For each row and block of 16 keys, 16
 * partial sums run over d (the inner loop over the block's lanes vectorizes); the sum runs
 * over d in increasing order. */
static void generic_score_tile(int rows, int count, int dim, const float *queries,
                               int query_stride, const float *packed_keys, float *scores,
                               int scores_stride) {
    for (int r = 0; r < rows; ++r) {
        const float *query_row = queries + (size_t)r * query_stride;
        float *score_row = scores + (size_t)r * scores_stride;
        for (int first = 0; first < count; first += GENERIC_BLOCK) {
            const float *block = packed_keys + (size_t)first * dim;
            float sums[GENERIC_BLOCK] = {0};
            for (int d = 0; d < dim; ++d) {
                const float query_value = query_row[d];
                const float *key_row = block + (size_t)d * GENERIC_BLOCK;
                for (int lane = 0; lane < GENERIC_BLOCK; ++lane) sums[lane] += query_value * key_row[lane];
            }
            const int lanes = count - first < GENERIC_BLOCK ? count - first : GENERIC_BLOCK;
            for (int lane = 0; lane < lanes; ++lane) score_row[first + lane] = sums[lane];
        }
    }
}

/* accumulator[r][e] += sum_c weights[r][c] * value_c[e]: for each row and key, the inner
 * loop runs over the value's dims (contiguous in the packed tile), which gcc vectorizes. */
static void generic_accumulate_values(int rows, int count, int dim, const float *weights,
                                      int weights_stride, const float *packed_values,
                                      float *accumulator, int accumulator_stride) {
    const int padded_dim = round_up_to_block(dim);
    for (int r = 0; r < rows; ++r) {
        const float *weight_row = weights + (size_t)r * weights_stride;
        float *restrict accumulator_row = accumulator + (size_t)r * accumulator_stride;
        for (int c = 0; c < count; ++c) {
            const float weight = weight_row[c];
            const float *restrict value_row = packed_values + (size_t)c * padded_dim;
            for (int e = 0; e < dim; ++e) accumulator_row[e] += weight * value_row[e];
        }
    }
}

/* The one online-softmax step (registry.h); also the generic decode part's. */
void attn_generic_softmax_step(int rows, int count, float *scores, int scores_stride,
                               float scale, float softcap, attn_dtype p_type, float *row_max,
                               float *row_sum, float *rescale) {
    const bool rounded = p_type == ATTN_DTYPE_BF16 || p_type == ATTN_DTYPE_F16;
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        float tile_max = -INFINITY;
        bool nan = false; /* (fmaxf drops NaN) */
        for (int c = 0; c < count; ++c) {
            float x = row[c] * scale;
            if (softcap > 0.0f && x != -INFINITY) x = softcap * tanhf(x / softcap);
            row[c] = x;
            tile_max = fmaxf(tile_max, x);
            nan |= isnan(x);
        }
        const float old_max = row_max[r];
        const float new_max = fmaxf(old_max, tile_max);
        const float shift = new_max == -INFINITY ? 0.0f : new_max; /* avoids -inf - -inf */
        rescale[r] = attn_softmax_rescale(old_max, shift);
        float tile_sum = 0.0f;
        for (int c = 0; c < count; ++c) {
            const float p = expf(row[c] - shift);
            tile_sum += p;
            row[c] = rounded ? attn_lowp_round_float(p, p_type == ATTN_DTYPE_BF16) : p;
        }
        row_sum[r] = rescale[r] * row_sum[r] + tile_sum;
        row_max[r] = new_max;
        if (nan || tile_max == INFINITY || isnan(old_max)) /* NaN from here on (registry.h) */
            rescale[r] = row_sum[r] = row_max[r] = NAN;
    }
}

static void generic_scale_rows(int rows, int dim, const float *factor, float *accumulator,
                               int accumulator_stride) {
    for (int r = 0; r < rows; ++r) {
        float *accumulator_row = accumulator + (size_t)r * accumulator_stride;
        const float row_factor = factor[r];
        for (int e = 0; e < dim; ++e) accumulator_row[e] *= row_factor;
    }
}

const attn_forward_kernels attn_generic_forward = {
    .packed_keys_floats = generic_packed_keys_floats,
    .packed_values_floats = generic_packed_values_floats,
    .pack_keys = generic_pack_keys,
    .pack_values = generic_pack_values,
    .score_tile = generic_score_tile,
    .accumulate_values = generic_accumulate_values,
    .softmax_step = attn_generic_softmax_step,
    .scale_rows = generic_scale_rows,
    .philox_blocks = attn_philox_blocks_portable,
};
