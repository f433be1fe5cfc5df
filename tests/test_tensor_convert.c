/*
 * test_tensor_convert.c — attn_tensor_convert between float32, bfloat16 and float16: every
 * 16-bit pattern widened exactly, narrowing rounds to nearest-even (checked against an
 * independent rounding in double), strided and permuted views, and the errors (overflow found
 * before anything is written, shape and dtype disagreements, NULL).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Whether h is the nearest-even 16-bit value of finite x (precision p bits, smallest normal
 * exponent e_min, subnormals kept). */
static int nearest_even(double x, uint16_t h, attn_dtype dtype) {
    const int precision = dtype == ATTN_DTYPE_BF16 ? 8 : 11;
    const int minimum_exponent = dtype == ATTN_DTYPE_BF16 ? -126 : -14;
    const double got = test_half_to_double(h, dtype);
    if (x == 0) return got == 0;
    int exponent = ilogb(fabs(x));
    if (exponent < minimum_exponent) exponent = minimum_exponent;
    const double ulp = ldexp(1.0, exponent - precision + 1);
    const double expected = nearbyint(x / ulp) * ulp; /* ties to even in the default mode */
    return got == expected;
}

static void test_widening(attn_dtype dtype) {
    uint16_t *patterns = malloc(65536 * 2);
    float *out = malloc(65536 * sizeof(float));
    for (int i = 0; i < 65536; ++i) patterns[i] = (uint16_t)i;
    const int64_t shape[2] = {256, 256};
    attn_tensor source = attn_tensor_contiguous(patterns, dtype, 2, shape);
    attn_tensor destination = attn_tensor_contiguous(out, ATTN_DTYPE_F32, 2, shape);
    /* transposed destination: element (r, c) at out[c * 256 + r] */
    destination.stride[0] = 1, destination.stride[1] = 256;
    attn_error error = {0};
    CHECK_STATUS(attn_tensor_convert(&source, &destination, &error), ATTN_OK, &error, "widen");
    int wrong = 0;
    for (int r = 0; r < 256; ++r)
        for (int c = 0; c < 256; ++c) {
            const double expected = test_half_to_double((uint16_t)(r * 256 + c), dtype);
            const float got = out[c * 256 + r];
            wrong += isnan(expected) ? !isnan(got) : (double)got != expected;
        }
    CHECK(wrong == 0, "%s -> float32: all 65536 patterns exact, into a transposed view (%d wrong)",
          dtype == ATTN_DTYPE_BF16 ? "bfloat16" : "float16", wrong);
    free(patterns);
    free(out);
}

static void test_narrowing(attn_dtype dtype, test_rng *rng) {
    enum { N = 4099 };
    float *source = malloc(N * sizeof(float));
    uint16_t *out = malloc(2 * N * sizeof(uint16_t));
    const int low = dtype == ATTN_DTYPE_BF16 ? -140 : -26, high = dtype == ATTN_DTYPE_BF16 ? 125 : 13;
    for (int i = 0; i < N; ++i)
        source[i] = (float)(test_rng_normal(rng) * ldexp(1.0, (int)test_rng_range(rng, low, high)));
    source[0] = NAN, source[1] = -INFINITY, source[2] = -0.0f, source[3] = 1.00390625f;
    const int64_t shape[1] = {N};
    attn_tensor from = attn_tensor_contiguous(source, ATTN_DTYPE_F32, 1, shape);
    attn_tensor to = attn_tensor_contiguous(out, dtype, 1, shape);
    to.stride[0] = 2; /* every other element */
    for (int i = 0; i < 2 * N; ++i) out[i] = 0x1234;
    attn_error error = {0};
    CHECK_STATUS(attn_tensor_convert(&from, &to, &error), ATTN_OK, &error, "narrow");
    int wrong = 0;
    for (int i = 0; i < N; ++i) {
        const uint16_t h = out[2 * i];
        if (isnan(source[i])) wrong += !isnan(test_half_to_double(h, dtype));
        else if (isinf(source[i])) wrong += test_half_to_double(h, dtype) != source[i];
        else wrong += !nearest_even(source[i], h, dtype);
        wrong += out[2 * i + 1] != 0x1234;
    }
    CHECK(wrong == 0, "float32 -> %s: nearest-even, strided, gaps untouched (%d wrong of %d)",
          dtype == ATTN_DTYPE_BF16 ? "bfloat16" : "float16", wrong, N);
    free(source);
    free(out);
}

static void test_errors(void) {
    float values[6] = {1, 2, 3, 70000.0f, 5, 6};
    uint16_t half[6] = {7, 7, 7, 7, 7, 7};
    const int64_t shape[2] = {2, 3}, other[2] = {3, 2};
    attn_tensor source = attn_tensor_contiguous(values, ATTN_DTYPE_F32, 2, shape);
    attn_tensor destination = attn_tensor_contiguous(half, ATTN_DTYPE_F16, 2, shape);
    attn_error error = {0};
    attn_status status = attn_tensor_convert(&source, &destination, &error);
    CHECK_STATUS(status, ATTN_ERROR_OVERFLOW, &error, "70000 into float16");
    CHECK(strstr(error.message, "element 3") && strstr(error.message, "70000"),
          "message names the element and value: %s", error.message);
    int untouched = 1;
    for (int i = 0; i < 6; ++i) untouched &= half[i] == 7;
    CHECK(untouched, "nothing written on overflow");
    destination.dtype = ATTN_DTYPE_BF16;
    CHECK_STATUS(attn_tensor_convert(&source, &destination, &error), ATTN_OK, &error,
                 "70000 fits bfloat16");
    CHECK(half[3] == 0x4789, "70000 -> bfloat16 0x4789 (got 0x%04x)", half[3]);
    attn_tensor wrong_shape = attn_tensor_contiguous(half, ATTN_DTYPE_F16, 2, other);
    CHECK_STATUS(attn_tensor_convert(&source, &wrong_shape, &error), ATTN_ERROR_SHAPE_MISMATCH,
                 &error, "shape disagreement");
    attn_tensor integers = attn_tensor_contiguous(values, ATTN_DTYPE_I32, 2, shape);
    CHECK_STATUS(attn_tensor_convert(&integers, &destination, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "int32 source");
    CHECK_STATUS(attn_tensor_convert(NULL, &destination, &error), ATTN_ERROR_NULL_ARGUMENT, &error,
                 "NULL source");
}

int main(void) {
    test_rng rng;
    test_rng_seed(&rng, 3);
    test_widening(ATTN_DTYPE_BF16);
    test_widening(ATTN_DTYPE_F16);
    test_narrowing(ATTN_DTYPE_BF16, &rng);
    test_narrowing(ATTN_DTYPE_F16, &rng);
    test_errors();
    return test_finish();
}
