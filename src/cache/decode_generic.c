/*
 * decode_generic.c — the portable decode kernel table (see decode_kernels.h), the naive
 * reference of the AVX2 / AVX-512 tables, and the table selection. Written so the compiler
 * can vectorise it: dot products keep 16 independent partial sums (a fixed summation order,
 * hence deterministic), the softmax step uses libm expf, value accumulation is an axpy over
 * the value dimension.
 */
#include "cache/decode_kernels.h"

#include <math.h>

#include "cache/half.h"
#include "core/internal.h"
#include "kernels/kernel.h"

static void generic_bf16_to_f32(int64_t count, const uint16_t *source, float *target) {
    for (int64_t e = 0; e < count; ++e) target[e] = attn_bf16_to_float(source[e]);
}

static void generic_f16_to_f32(int64_t count, const uint16_t *source, float *target) {
    for (int64_t e = 0; e < count; ++e) target[e] = attn_f16_to_float(source[e]);
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
                                const float *keys, int64_t key_stride, float *scores) {
    for (int c = 0; c < count; ++c)
        for (int r = 0; r < rows; ++r)
            scores[r * ATTN_DECODE_CHUNK + c] =
                dot_product(dim, queries + (int64_t)r * dim, keys + c * key_stride);
}

static void generic_softmax_chunk(int rows, int count, float scale, float *scores,
                                  float *row_max, float *row_sum, float *rescale) {
    for (int r = 0; r < rows; ++r) {
        float *row = scores + r * ATTN_DECODE_CHUNK;
        float chunk_max = -INFINITY;
        for (int c = 0; c < count; ++c) {
            row[c] *= scale;
            if (row[c] > chunk_max) chunk_max = row[c];
        }
        const float old_max = row_max[r];
        const float new_max = chunk_max > old_max ? chunk_max : old_max;
        const float use_max = new_max == -INFINITY ? 0.0f : new_max;
        float sum = 0.0f;
        for (int c = 0; c < count; ++c) {
            row[c] = expf(row[c] - use_max);
            sum += row[c];
        }
        rescale[r] = old_max == -INFINITY ? 0.0f : expf(old_max - use_max);
        row_sum[r] = rescale[r] * row_sum[r] + sum;
        row_max[r] = new_max;
    }
}

static void generic_accumulate_chunk(int rows, int count, int dim, const float *weights,
                                     const float *rescale, const float *values,
                                     int64_t value_stride, float *accumulator) {
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

const attn_decode_kernels attn_decode_kernels_generic = {
    "generic",           generic_bf16_to_f32,   generic_f16_to_f32,
    generic_score_chunk, generic_softmax_chunk, generic_accumulate_chunk,
    NULL,                NULL, /* bf16 is converted to float32 first */
    NULL,
};

attn_status attn_select_decode_kernels(attn_kernel_choice choice,
                                       const attn_decode_kernels **table, attn_error *error) {
    switch (choice) {
    case ATTN_KERNEL_AUTO:
#if defined(ATTN_HAVE_AVX512_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX512)) {
            *table = &attn_decode_kernels_avx512;
            return ATTN_OK;
        }
#endif
#if defined(ATTN_HAVE_AVX2_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX2)) {
            *table = &attn_decode_kernels_avx2;
            return ATTN_OK;
        }
#endif
        *table = &attn_decode_kernels_generic;
        return ATTN_OK;
    case ATTN_KERNEL_GENERIC:
        *table = &attn_decode_kernels_generic;
        return ATTN_OK;
    case ATTN_KERNEL_AVX2:
#if defined(ATTN_HAVE_AVX2_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX2)) {
            *table = &attn_decode_kernels_avx2;
            return ATTN_OK;
        }
#endif
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "options.kernel = AVX2: this CPU or build lacks AVX2 + FMA");
    case ATTN_KERNEL_AVX512:
#if defined(ATTN_HAVE_AVX512_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX512)) {
            *table = &attn_decode_kernels_avx512;
            return ATTN_OK;
        }
#endif
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "options.kernel = AVX512: this CPU or build lacks AVX-512");
    }
    return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "options.kernel = %d: unknown",
                     (int)choice);
}
