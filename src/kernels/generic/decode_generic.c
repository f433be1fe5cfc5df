/*
 * decode_generic.c — the portable decode part of the registry (kernels/registry.h), the naive
 * reference of the AVX2 / AVX-512 ones. Written so the compiler
 * can vectorise it: dot products keep 16 independent partial sums (a fixed summation order,
 * hence deterministic), the softmax step is the generic forward one (libm expf), value
 * accumulation is an axpy over the value dimension.
 */
#include <math.h>

#include "kernels/half.h"
#include "kernels/quant.h"
#include "kernels/generic/generic.h"

static void generic_bf16_to_f32(int64_t count, const uint16_t *source, float *target) {
    for (int64_t e = 0; e < count; ++e) target[e] = attn_bf16_to_float(source[e]);
}

static void generic_f16_to_f32(int64_t count, const uint16_t *source, float *target) {
    for (int64_t e = 0; e < count; ++e) target[e] = attn_f16_to_float(source[e]);
}

static void generic_widen_rows(attn_dtype dtype, int count, int dim, const uint16_t *source,
                               int64_t stride, float *target, const uint16_t *rows_ahead) {
    (void)rows_ahead; /* a prefetch hint */
    for (int c = 0; c < count; ++c)
        for (int e = 0; e < dim; ++e)
            target[(int64_t)c * dim + e] = dtype == ATTN_DTYPE_BF16
                                               ? attn_bf16_to_float(source[c * stride + e])
                                               : attn_f16_to_float(source[c * stride + e]);
}

enum { LANES = 16 };

/* sum_d a[d] * b[d] with LANES interleaved partial sums, then a fixed pairwise tree. */
static float dot_product(int dim, const float *a, const float *b) {
    float partial[LANES] = {0};
    int d = 0;
    for (; d + LANES <= dim; d += LANES)
        for (int lane = 0; lane < LANES; ++lane) partial[lane] += a[d + lane] * b[d + lane];
    for (int lane = 0; d < dim; ++d, ++lane) partial[lane] += a[d] * b[d];
    for (int width = LANES / 2; width > 0; width /= 2)
        for (int lane = 0; lane < width; ++lane) partial[lane] += partial[lane + width];
    return partial[0];
}

static void generic_score_chunk(int rows, int count, int dim, const float *queries,
                                const float *keys, int64_t key_stride, float *scores,
                                const float *keys_ahead) {
    (void)keys_ahead; /* a prefetch hint */
    for (int c = 0; c < count; ++c)
        for (int r = 0; r < rows; ++r)
            scores[r * ATTN_DECODE_CHUNK + c] =
                dot_product(dim, queries + (int64_t)r * dim, keys + c * key_stride);
}

/* The one online-softmax step (registry.h) on a dense chunk, no soft-cap. */
static void generic_softmax_chunk(int rows, int count, float scale, float *scores,
                                  attn_dtype p_type, float *row_max, float *row_sum,
                                  float *rescale) {
    attn_generic_softmax_step(rows, count, scores, ATTN_DECODE_CHUNK, scale, 0.0f, p_type,
                              row_max, row_sum, rescale);
}

static void generic_accumulate_chunk(int rows, int count, int dim, const float *weights,
                                     const float *rescale, const float *values,
                                     int64_t value_stride, float *accumulator,
                                     const float *values_ahead) {
    (void)values_ahead; /* a prefetch hint */
    for (int r = 0; r < rows; ++r) {
        float *row = accumulator + (int64_t)r * dim;
        if (rescale[r] != 1.0f)
            for (int e = 0; e < dim; ++e) row[e] *= rescale[r];
        for (int c = 0; c < count; ++c) {
            const float weight = weights[r * ATTN_DECODE_CHUNK + c];
            if (weight == 0.0f) continue; /* masked key: its value is never read */
            const float *value = values + c * value_stride;
            for (int e = 0; e < dim; ++e) row[e] += weight * value[e];
        }
    }
}

/* ---- 8-bit storage (registry.h): decode each element, scales applied per row ---- */

static float row_factor(const float *row_scales, int c, float factor) {
    return row_scales != NULL ? factor * row_scales[c] : factor;
}

static void generic_dequantize_rows(attn_dtype dtype, int count, int dim, const uint8_t *source,
                                    int64_t stride, const float *row_scales, float factor,
                                    float *target, const uint8_t *rows_ahead) {
    (void)rows_ahead; /* a prefetch hint */
    for (int c = 0; c < count; ++c) {
        const float scale = row_factor(row_scales, c, factor);
        for (int e = 0; e < dim; ++e)
            target[(int64_t)c * dim + e] = scale * attn_quant_decode(dtype, source[c * stride + e]);
    }
}

static void generic_widen_fp8_bf16(attn_dtype dtype, int count, int dim, const uint8_t *source,
                                   int64_t stride, uint16_t *target) {
    for (int c = 0; c < count; ++c)
        for (int e = 0; e < dim; ++e) /* the float's top half: exact, its low half is 0 */
            target[(int64_t)c * dim + e] =
                (uint16_t)(attn_float_bits(attn_quant_decode(dtype, source[c * stride + e])) >> 16);
}

/* dot_product (above) against a stored 8-bit key, decoded element by element. */
static float dot_product_q8(int dim, const float *a, attn_dtype dtype, const uint8_t *b) {
    float partial[LANES] = {0};
    int d = 0;
    for (; d + LANES <= dim; d += LANES)
        for (int lane = 0; lane < LANES; ++lane)
            partial[lane] += a[d + lane] * attn_quant_decode(dtype, b[d + lane]);
    for (int lane = 0; d < dim; ++d, ++lane) partial[lane] += a[d] * attn_quant_decode(dtype, b[d]);
    for (int width = LANES / 2; width > 0; width /= 2)
        for (int lane = 0; lane < width; ++lane) partial[lane] += partial[lane + width];
    return partial[0];
}

static void generic_score_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                   const void *prepared, const uint8_t *keys, int64_t key_stride,
                                   const float *row_scales, float factor, float *scores,
                                   const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    (void)ahead, (void)keys_ahead; /* prefetch hints */
    const float *queries = prepared; /* FP8: the float rows */
    if (dtype == ATTN_DTYPE_Q8) { /* int16 queries, exact integer sums (quant.h) */
        attn_q8_score_exact(rows, count, dim, prepared, (const int8_t *)keys, key_stride,
                            row_scales, factor, scores, ATTN_DECODE_CHUNK);
        return;
    }
    for (int c = 0; c < count; ++c) {
        const float scale = row_factor(row_scales, c, factor);
        for (int r = 0; r < rows; ++r)
            scores[r * ATTN_DECODE_CHUNK + c] =
                scale * dot_product_q8(dim, queries + (int64_t)r * dim, dtype, keys + c * key_stride);
    }
}

static void generic_accumulate_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                        const float *weights, const float *rescale,
                                        const uint8_t *values, int64_t value_stride,
                                        const float *row_scales, float factor,
                                        float *accumulator, const uint8_t *values_ahead) {
    (void)values_ahead; /* a prefetch hint */
    if (dtype == ATTN_DTYPE_Q8) { /* int16 weights, exact integer sums (quant.h) */
        attn_q8_accumulate_exact(rows, count, dim, weights, rescale, (const int8_t *)values,
                                 value_stride, row_scales, factor, accumulator,
                                 ATTN_DECODE_CHUNK);
        return;
    }
    for (int r = 0; r < rows; ++r) {
        float *row = accumulator + (int64_t)r * dim;
        if (rescale[r] != 1.0f)
            for (int e = 0; e < dim; ++e) row[e] *= rescale[r];
        for (int c = 0; c < count; ++c) {
            const float weight =
                weights[r * ATTN_DECODE_CHUNK + c] * row_factor(row_scales, c, factor);
            if (weight == 0.0f) continue; /* masked key: its value is never read */
            const uint8_t *value = values + c * value_stride;
            for (int e = 0; e < dim; ++e) row[e] += weight * attn_quant_decode(dtype, value[e]);
        }
    }
}

const attn_decode_kernels attn_generic_decode = {
    .bf16_to_f32 = generic_bf16_to_f32,
    .f16_to_f32 = generic_f16_to_f32,
    .widen_rows = generic_widen_rows,
    .score_chunk = generic_score_chunk,
    .softmax_chunk = generic_softmax_chunk,
    .accumulate_chunk = generic_accumulate_chunk,
    .dequantize_rows = generic_dequantize_rows,
    .widen_fp8_bf16 = generic_widen_fp8_bf16,
    .score_chunk_q8 = generic_score_chunk_q8,
    .accumulate_chunk_q8 = generic_accumulate_chunk_q8,
    /* score_chunk_bf16, accumulate_chunk_bf16, prepare_bf16_queries: NULL, bf16 is
     * converted to float32 first; score_chunk_group, prepare_group_queries: NULL, large
     * groups use score_chunk */
};
