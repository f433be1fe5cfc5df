/*
 * rms_norm.c — RMSNorm (Zhang & Sennrich 2019), as MLA applies it to its query and KV
 * latents: y = w * x / sqrt(mean(x^2) + eps), one row at a time, accumulated in double.
 */
#include <math.h>

#include "core/internal.h"
#include "attn_layers.h"

/* x, y float[rows][dim] (y may equal x), weight float[dim]. */
attn_status attn_rms_norm(const float *x, int64_t rows, int64_t dim, const float *weight,
                          float eps, float *y, attn_error *error) {
    if (x == NULL || weight == NULL || y == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s is NULL",
                         x == NULL ? "x" : weight == NULL ? "weight" : "y");
    if (rows < 0 || dim < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rows = %lld, dim = %lld: need rows >= 0 and dim >= 1", (long long)rows,
                         (long long)dim);
    if (!(eps >= 0.0f) || isinf(eps))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "eps = %g: must be finite and >= 0",
                         (double)eps);
    int64_t total;
    if (!attn_mul_i64(rows, dim, &total))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "rows = %lld x dim = %lld overflows",
                         (long long)rows, (long long)dim);
    for (int64_t n = 0; n < rows; ++n) {
        const float *row = x + n * dim;
        double squares = 0.0;
        for (int64_t i = 0; i < dim; ++i) squares += (double)row[i] * row[i];
        const double inverse = 1.0 / sqrt(squares / (double)dim + (double)eps);
        for (int64_t i = 0; i < dim; ++i) y[n * dim + i] = (float)(weight[i] * (row[i] * inverse));
    }
    return ATTN_OK;
}
