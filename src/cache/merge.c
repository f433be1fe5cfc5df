/*
 * merge.c — attn_merge: combines partial attention results over disjoint key sets exactly,
 * by their log-sum-exp (docs/attention-math.md §3). Used by split-KV decoding, cascade and
 * the ring.
 */
#include "cache/merge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "call/call.h"
#include "core/internal.h"
#include "kernels/half.h"

/* Element e of row (b, t, h) of a [B, T, H, D] view of dtype F32, BF16 or F16, as a double. */
static double element(const attn_tensor *t, int64_t b, int64_t i, int64_t h, int64_t e) {
    const int64_t offset = b * t->stride[0] + i * t->stride[1] + h * t->stride[2] + e * t->stride[3];
    switch (t->dtype) {
    case ATTN_DTYPE_BF16: return attn_bf16_to_float(((const uint16_t *)t->data)[offset]);
    case ATTN_DTYPE_F16: return attn_f16_to_float(((const uint16_t *)t->data)[offset]);
    default: return ((const float *)t->data)[offset];
    }
}

/* Stores x (rounded to nearest-even once) as element e of row (b, t, h). */
static void store_element(attn_tensor *t, int64_t b, int64_t i, int64_t h, int64_t e, double x) {
    const int64_t offset = b * t->stride[0] + i * t->stride[1] + h * t->stride[2] + e * t->stride[3];
    switch (t->dtype) {
    case ATTN_DTYPE_BF16: ((uint16_t *)t->data)[offset] = attn_float_to_bf16((float)x); break;
    case ATTN_DTYPE_F16: ((uint16_t *)t->data)[offset] = attn_float_to_f16((float)x); break;
    default: ((float *)t->data)[offset] = (float)x; break;
    }
}

/* The weights exp(lse_s - lse) of every partial of one row; returns lse (-inf if all empty,
 * NaN with NaN weights if any partial is NaN).
 * lses: `count` values at stride lse_stride; weights: double[count] (written). */
static double merge_weights(int count, const float *lses, int64_t lse_stride, double *weights) {
    double maximum = -INFINITY;
    for (int s = 0; s < count; ++s) {
        if (isnan(lses[s * lse_stride])) { /* a NaN partial makes the row NaN */
            for (int t = 0; t < count; ++t) weights[t] = NAN;
            return NAN;
        }
        if ((double)lses[s * lse_stride] > maximum) maximum = lses[s * lse_stride];
    }
    if (maximum == -INFINITY) {
        for (int s = 0; s < count; ++s) weights[s] = 0.0;
        return -INFINITY;
    }
    double sum = 0.0;
    for (int s = 0; s < count; ++s) {
        double lse = lses[s * lse_stride];
        weights[s] = lse == -INFINITY ? 0.0 : exp(lse - maximum);
        sum += weights[s];
    }
    double merged = maximum + log(sum);
    for (int s = 0; s < count; ++s) weights[s] /= sum;
    return merged;
}

void attn_merge_row(int count, const float *partial_lse, int64_t lse_stride,
                    const float *partial_out, int64_t out_stride, int64_t dim, double *weights,
                    float *out, float *lse) {
    if (count == 1) { /* the general sum's bits: weight 1, -0 summed to +0; an empty row 0 */
        const bool empty = partial_lse[0] == -INFINITY; /* (NaN stays NaN) */
        if (empty)
            for (int64_t e = 0; e < dim; ++e) out[e] = 0.0f;
        else
            for (int64_t e = 0; e < dim; ++e) out[e] = partial_out[e] + 0.0f;
        *lse = empty ? -INFINITY : partial_lse[0] + 0.0f;
        return;
    }
    double merged = merge_weights(count, partial_lse, lse_stride, weights);
    for (int64_t e = 0; e < dim; ++e) {
        double accumulator = 0.0;
        for (int s = 0; s < count; ++s)
            if (weights[s] != 0.0) accumulator += weights[s] * partial_out[s * out_stride + e];
        out[e] = (float)accumulator;
    }
    *lse = (float)merged;
}

/* Checks that `t` is of `dtype` and `rank` with exactly the shape `shape`. */
static attn_status check_same_shape(const attn_tensor *t, const char *name, int index, int rank,
                                    const int64_t *shape, attn_dtype dtype, attn_error *error) {
    char label[48];
    snprintf(label, sizeof label, "%s[%d]", name, index);
    attn_status status = attn_check_tensor(t, index < 0 ? name : label, dtype, rank, error);
    if (status != ATTN_OK) return status;
    for (int d = 0; d < rank; ++d)
        if (t->shape[d] != shape[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "%s.shape[%d] = %lld: expected %lld (the shape of outs[0]/lses[0])",
                             index < 0 ? name : label, d, (long long)t->shape[d],
                             (long long)shape[d]);
    return ATTN_OK;
}

attn_status attn_merge(int count, const attn_tensor *const *outs, const attn_tensor *const *lses,
                       attn_tensor *out, attn_tensor *lse, attn_error *error) {
    if (count < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "count = %d: must be >= 1", count);
    if (outs == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "outs is NULL");
    if (lses == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "lses is NULL");
    /* The outputs are F32, BF16 or F16, all of one dtype (that of outs[0]); LSEs are F32. */
    const attn_dtype dtype = outs[0] != NULL && (outs[0]->dtype == ATTN_DTYPE_BF16 ||
                                                 outs[0]->dtype == ATTN_DTYPE_F16)
                                 ? outs[0]->dtype
                                 : ATTN_DTYPE_F32;
    attn_status status = attn_check_tensor(outs[0], "outs[0]", dtype, 4, error);
    if (status != ATTN_OK) return status;
    const int64_t *out_shape = outs[0]->shape; /* [B, T, H, Dv] */
    const int64_t lse_shape[3] = {out_shape[0], out_shape[2], out_shape[1]}; /* [B, H, T] */
    for (int s = 0; s < count; ++s) {
        if ((status = check_same_shape(outs[s], "outs", s, 4, out_shape, dtype, error)) != ATTN_OK)
            return status;
        if ((status = check_same_shape(lses[s], "lses", s, 3, lse_shape, ATTN_DTYPE_F32, error)) !=
            ATTN_OK)
            return status;
    }
    if ((status = check_same_shape(out, "out", -1, 4, out_shape, dtype, error)) != ATTN_OK)
        return status;
    if ((status = check_same_shape(lse, "lse", -1, 3, lse_shape, ATTN_DTYPE_F32, error)) != ATTN_OK)
        return status;
    /* out and lse share no byte with each other or with any partial, except that out may be
     * outs[0] itself and lse lses[0] itself (the same views: in place; every row is read
     * whole before it is written). */
    for (int s = 0; s < count; ++s) {
        char out_name[32], lse_name[32];
        snprintf(out_name, sizeof out_name, "outs[%d]", s);
        snprintf(lse_name, sizeof lse_name, "lses[%d]", s);
        const attn_call_tensor outputs[2] = {{out, "out", outs[0]}, {lse, "lse", lses[0]}};
        const attn_call_tensor inputs[2] = {{outs[s], out_name, NULL}, {lses[s], lse_name, NULL}};
        if ((status = attn_call_check_aliasing(outputs, 2, inputs, 2, NULL, NULL, error)) != ATTN_OK)
            return status;
    }

    size_t weight_bytes;
    if (!attn_mul_size((size_t)count, sizeof(double), &weight_bytes))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "count = %d: weight buffer overflows", count);
    double *weights = malloc(weight_bytes);
    float *row_lses = malloc((size_t)count * sizeof(float));
    double *row = malloc((size_t)(out_shape[3] > 0 ? out_shape[3] : 1) * sizeof(double));
    if (weights == NULL || row_lses == NULL || row == NULL) {
        free(weights), free(row_lses), free(row);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "count = %d: no memory for weights",
                         count);
    }
    const int64_t batch = out_shape[0], length = out_shape[1], heads = out_shape[2],
                  dim = out_shape[3];
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < length; ++t)
            for (int64_t h = 0; h < heads; ++h) {
                for (int s = 0; s < count; ++s) row_lses[s] = *attn_f32_at3(lses[s], b, h, t);
                double merged = merge_weights(count, row_lses, 1, weights);
                /* the whole row first: out may alias outs[0] */
                for (int64_t e = 0; e < dim; ++e) {
                    double accumulator = 0.0;
                    for (int s = 0; s < count; ++s)
                        if (weights[s] != 0.0) accumulator += weights[s] * element(outs[s], b, t, h, e);
                    row[e] = accumulator;
                }
                for (int64_t e = 0; e < dim; ++e) store_element(out, b, t, h, e, row[e]);
                *attn_f32_at3(lse, b, h, t) = (float)merged;
            }
    free(weights), free(row_lses), free(row);
    return ATTN_OK;
}
