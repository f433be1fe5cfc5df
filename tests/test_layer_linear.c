/*
 * test_layer_linear.c — attn_linear_forward / attn_linear_backward (CBLAS) against naive
 * double loops, with and without bias, odd sizes; gradient accumulation semantics; errors.
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double max_error(const float *got, const double *expected, int64_t n) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double e = fabs(got[i] - expected[i]) / (1.0 + fabs(expected[i]));
        if (e > worst) worst = e;
    }
    return worst;
}

static void test_linear_case(int64_t rows, int64_t in, int64_t out, int with_bias, test_rng *rng) {
    float *x = malloc((size_t)(rows * in) * sizeof(float));
    float *w = malloc((size_t)(out * in) * sizeof(float));
    float *b = malloc((size_t)out * sizeof(float));
    float *y = malloc((size_t)(rows * out) * sizeof(float));
    float *dy = malloc((size_t)(rows * out) * sizeof(float));
    float *dx = malloc((size_t)(rows * in) * sizeof(float));
    float *dw = malloc((size_t)(out * in) * sizeof(float));
    float *db = malloc((size_t)out * sizeof(float));
    double *expected = malloc((size_t)((rows + out) * (in + out)) * sizeof(double));
    test_fill_normal(rng, x, rows * in, 1.0f);
    test_fill_normal(rng, w, out * in, 0.3f);
    test_fill_normal(rng, b, out, 1.0f);
    test_fill_normal(rng, dy, rows * out, 1.0f);
    const float *bias = with_bias ? b : NULL;
    attn_error error;
    CHECK_STATUS(attn_linear_forward(x, rows, in, w, bias, out, y, &error), ATTN_OK, &error,
                 "forward %lldx%lld->%lld", (long long)rows, (long long)in, (long long)out);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double sum = bias ? bias[o] : 0.0;
            for (int64_t i = 0; i < in; ++i) sum += (double)x[r * in + i] * w[o * in + i];
            expected[r * out + o] = sum;
        }
    double e = max_error(y, expected, rows * out);
    CHECK(e < 1e-5, "forward rows=%lld in=%lld out=%lld bias=%d: error %.3g", (long long)rows,
          (long long)in, (long long)out, with_bias, e);

    for (int64_t i = 0; i < out * in; ++i) dw[i] = 0.5f;
    for (int64_t o = 0; o < out; ++o) db[o] = -0.25f;
    CHECK_STATUS(attn_linear_backward(x, rows, in, w, out, dy, dx, dw, with_bias ? db : NULL,
                                      &error),
                 ATTN_OK, &error, "backward");
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < in; ++i) {
            double sum = 0.0;
            for (int64_t o = 0; o < out; ++o) sum += (double)dy[r * out + o] * w[o * in + i];
            expected[r * in + i] = sum;
        }
    e = max_error(dx, expected, rows * in);
    CHECK(e < 1e-5, "dx rows=%lld in=%lld out=%lld: error %.3g", (long long)rows, (long long)in,
          (long long)out, e);
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
            double sum = 0.5;
            for (int64_t r = 0; r < rows; ++r) sum += (double)dy[r * out + o] * x[r * in + i];
            expected[o * in + i] = sum;
        }
    e = max_error(dw, expected, out * in);
    CHECK(e < 1e-5, "dweight (accumulated onto 0.5) rows=%lld: error %.3g", (long long)rows, e);
    if (with_bias) {
        for (int64_t o = 0; o < out; ++o) {
            double sum = -0.25;
            for (int64_t r = 0; r < rows; ++r) sum += dy[r * out + o];
            expected[o] = sum;
        }
        e = max_error(db, expected, out);
        CHECK(e < 1e-5, "dbias (accumulated onto -0.25): error %.3g", e);
    }
    free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw); free(db); free(expected);
}

int main(void) {
    test_rng rng;
    test_rng_seed(&rng, 31);
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 37, 19}, {1, 300, 129}, {3, 5, 7}, {17, 33, 9}, {64, 64, 64}, {129, 48, 200}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int with_bias = 0; with_bias < 2; ++with_bias)
            test_linear_case(shapes[s][0], shapes[s][1], shapes[s][2], with_bias, &rng);

    float x[4] = {0}, w[4] = {0}, y[4];
    attn_error error;
    CHECK_STATUS(attn_linear_forward(NULL, 2, 2, w, NULL, 2, y, &error), ATTN_ERROR_NULL_ARGUMENT,
                 &error, "x = NULL");
    CHECK_STATUS(attn_linear_forward(x, 0, 2, w, NULL, 2, y, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "rows = 0");
    CHECK(strstr(error.message, "rows = 0") != NULL, "message names rows: %s", error.message);
    CHECK_STATUS(attn_linear_forward(x, (int64_t)1 << 40, 2, w, NULL, 2, y, &error),
                 ATTN_ERROR_OVERFLOW, &error, "rows beyond CBLAS int");
    CHECK_STATUS(attn_linear_backward(NULL, 2, 2, w, 2, y, NULL, w, NULL, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "x = NULL with dweight");
    return test_finish();
}
