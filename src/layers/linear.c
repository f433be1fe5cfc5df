/*
 * linear.c — the affine map of PyTorch's nn.Linear, y = x Wᵀ + b with W [out][in], and its
 * backward, through CBLAS sgemm (OpenBLAS; see cmake/models.cmake and docs/training.md for the
 * measurement that chose it). The naive reference lives in the tests (double loops).
 */
#include "core/internal.h"
#include "attn_layers.h"

#include <cblas.h>
#include <limits.h>
#include <string.h>

/* Checks one size argument: >= 1 and small enough for CBLAS's int dimensions. */
static attn_status check_blas_size(int64_t value, const char *name, attn_error *error) {
    if (value < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s = %lld: must be >= 1", name,
                         (long long)value);
    if (value > INT_MAX)
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "%s = %lld: exceeds CBLAS's int range",
                         name, (long long)value);
    return ATTN_OK;
}

/* The three sizes, and that rows*in, rows*out, out*in fit the BLAS int leading products. */
static attn_status check_linear_sizes(int64_t rows, int64_t in_features, int64_t out_features,
                                      attn_error *error) {
    attn_status status;
    if ((status = check_blas_size(rows, "rows", error)) != ATTN_OK) return status;
    if ((status = check_blas_size(in_features, "in_features", error)) != ATTN_OK) return status;
    if ((status = check_blas_size(out_features, "out_features", error)) != ATTN_OK) return status;
    int64_t product;
    if (!attn_mul_i64(rows, in_features, &product) || !attn_mul_i64(rows, out_features, &product) ||
        !attn_mul_i64(out_features, in_features, &product))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "rows = %lld, in_features = %lld, out_features = %lld: sizes overflow",
                         (long long)rows, (long long)in_features, (long long)out_features);
    return ATTN_OK;
}

/* x float[rows][in], weight float[out][in], bias float[out] or NULL -> y float[rows][out]. */
attn_status attn_linear_forward(const float *x, int64_t rows, int64_t in_features,
                                const float *weight, const float *bias, int64_t out_features,
                                float *y, attn_error *error) {
    if (x == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "x = NULL");
    if (weight == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "weight = NULL");
    if (y == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "y = NULL");
    attn_status status = check_linear_sizes(rows, in_features, out_features, error);
    if (status != ATTN_OK) return status;

    float beta = 0.0f;
    if (bias != NULL) {
        for (int64_t r = 0; r < rows; ++r)
            memcpy(y + r * out_features, bias, (size_t)out_features * sizeof(float));
        beta = 1.0f;
    }
    if (rows == 1) /* one token (a decode step): y = W x, a matrix-vector product; sgemm
                      would pack all of W first */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)out_features, (int)in_features, 1.0f,
                    weight, (int)in_features, x, 1, beta, y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out_features,
                    (int)in_features, 1.0f, x, (int)in_features, weight, (int)in_features, beta,
                    y, (int)out_features);
    return ATTN_OK;
}

/*
 * dy float[rows][out]; x, weight as in the forward.
 * dx float[rows][in] (overwritten; NULL = not wanted), dweight float[out][in] and
 * dbias float[out] (accumulated: += ; NULL = not wanted).
 */
attn_status attn_linear_backward(const float *x, int64_t rows, int64_t in_features,
                                 const float *weight, int64_t out_features, const float *dy,
                                 float *dx, float *dweight, float *dbias, attn_error *error) {
    if (dy == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "dy = NULL");
    if (dx != NULL && weight == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "weight = NULL (needed for dx)");
    if (dweight != NULL && x == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "x = NULL (needed for dweight)");
    attn_status status = check_linear_sizes(rows, in_features, out_features, error);
    if (status != ATTN_OK) return status;

    if (dx != NULL) /* dx = dy W */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)in_features,
                    (int)out_features, 1.0f, dy, (int)out_features, weight, (int)in_features,
                    0.0f, dx, (int)in_features);
    if (dweight != NULL) /* dW += dyᵀ x */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out_features,
                    (int)in_features, (int)rows, 1.0f, dy, (int)out_features, x,
                    (int)in_features, 1.0f, dweight, (int)in_features);
    if (dbias != NULL) /* db += column sums of dy, rows in order */
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t o = 0; o < out_features; ++o) dbias[o] += dy[r * out_features + o];
    return ATTN_OK;
}
