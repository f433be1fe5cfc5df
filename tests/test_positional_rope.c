/*
 * test_positional_rope.c — attn_rope_apply: against a double-precision transcription of the
 * formulas (both layouts, partial rotary dims, bases, explicit positions, strided views), and
 * the properties of a rotation: relative-position invariance of dot products, norm
 * preservation, R_0 = I, interleaved = rotate-half under the permutation π, inverse undoes
 * forward, dims past rotary_dim untouched; plus argument errors.
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct rope_case {
    int64_t B, T, H, D;
    int64_t rotary_dim;
    double base;
    attn_rope_layout layout;
    test_layout memory;
    int64_t first_position;
} rope_case;

static const rope_case rope_cases[] = {
    {1, 5, 1, 8, 8, 10000.0, ATTN_ROPE_INTERLEAVED, TEST_LAYOUT_BTHD, 0},
    {2, 7, 3, 16, 16, 10000.0, ATTN_ROPE_HALF, TEST_LAYOUT_BTHD, 0},
    {2, 7, 3, 16, 10, 10000.0, ATTN_ROPE_HALF, TEST_LAYOUT_BHTD, 3},
    {1, 9, 2, 12, 6, 500000.0, ATTN_ROPE_INTERLEAVED, TEST_LAYOUT_PADDED, 100},
    {3, 4, 2, 64, 32, 10000.0, ATTN_ROPE_INTERLEAVED, TEST_LAYOUT_REVERSED_T, 4090},
    {1, 3, 4, 2, 2, 2.0, ATTN_ROPE_HALF, TEST_LAYOUT_BTHD, 7},
};

/* The formula of docs/attention-math.md §9.2, in double, on one head vector x[D]. */
static void rope_reference(const double *x, double *y, int64_t D, int64_t rotary_dim, double base,
                           attn_rope_layout layout, double position) {
    memcpy(y, x, (size_t)D * sizeof(double));
    int64_t half = rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        double angle = position * pow(base, -2.0 * (double)i / (double)rotary_dim);
        int64_t a = layout == ATTN_ROPE_INTERLEAVED ? 2 * i : i;
        int64_t b = layout == ATTN_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
        y[a] = x[a] * cos(angle) - x[b] * sin(angle);
        y[b] = x[a] * sin(angle) + x[b] * cos(angle);
    }
}

static void test_against_formula(void) {
    test_rng rng;
    test_rng_seed(&rng, 11);
    for (size_t c = 0; c < sizeof rope_cases / sizeof rope_cases[0]; ++c) {
        const rope_case *rc = &rope_cases[c];
        test_tensor x = test_tensor_new(rc->B, rc->T, rc->H, rc->D, rc->memory);
        test_tensor_fill_normal(&x, &rng, 1.0f);
        test_tensor original = test_tensor_new(rc->B, rc->T, rc->H, rc->D, TEST_LAYOUT_BTHD);
        for (int64_t b = 0; b < rc->B; ++b)
            for (int64_t t = 0; t < rc->T; ++t)
                for (int64_t h = 0; h < rc->H; ++h)
                    for (int64_t d = 0; d < rc->D; ++d)
                        original.allocation[((b * rc->T + t) * rc->H + h) * rc->D + d] =
                            test_get4(&x.view, b, t, h, d);
        attn_error error;
        attn_status status = attn_rope_apply(&x.view, rc->layout, rc->rotary_dim, rc->base, NULL,
                                             rc->first_position, 0, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "case %zu", c);

        double *in = malloc((size_t)rc->D * sizeof(double));
        double *expected = malloc((size_t)rc->D * sizeof(double));
        double worst = 0.0;
        int untouched = 1;
        for (int64_t b = 0; b < rc->B; ++b)
            for (int64_t t = 0; t < rc->T; ++t)
                for (int64_t h = 0; h < rc->H; ++h) {
                    const float *row = original.allocation + ((b * rc->T + t) * rc->H + h) * rc->D;
                    for (int64_t d = 0; d < rc->D; ++d) in[d] = row[d];
                    rope_reference(in, expected, rc->D, rc->rotary_dim, rc->base, rc->layout,
                                   (double)(rc->first_position + t));
                    for (int64_t d = 0; d < rc->D; ++d) {
                        float got = test_get4(&x.view, b, t, h, d);
                        double e = fabs(got - expected[d]) / (1.0 + fabs(expected[d]));
                        if (e > worst) worst = e;
                        if (d >= rc->rotary_dim && got != row[d]) untouched = 0;
                    }
                }
        CHECK(worst < 1e-6, "case %zu: max relative error %.3g vs double formula", c, worst);
        CHECK(untouched, "case %zu: dims >= rotary_dim %lld are bitwise unchanged", c,
              (long long)rc->rotary_dim);

        /* The inverse rotation undoes the forward one. */
        status = attn_rope_apply(&x.view, rc->layout, rc->rotary_dim, rc->base, NULL,
                                 rc->first_position, 1, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "case %zu inverse", c);
        double inverse_error = 0.0;
        for (int64_t b = 0; b < rc->B; ++b)
            for (int64_t t = 0; t < rc->T; ++t)
                for (int64_t h = 0; h < rc->H; ++h)
                    for (int64_t d = 0; d < rc->D; ++d) {
                        double e = fabs(test_get4(&x.view, b, t, h, d) -
                                        original.allocation[((b * rc->T + t) * rc->H + h) * rc->D + d]);
                        if (e > inverse_error) inverse_error = e;
                    }
        CHECK(inverse_error < 2e-6, "case %zu: inverse(forward(x)) - x = %.3g", c, inverse_error);
        free(in);
        free(expected);
        test_tensor_free(&x);
        test_tensor_free(&original);
    }
}

/* Rotates a single [1, 1, 1, D] vector to `position`. */
static void rotate(float *vector, int64_t D, int64_t rotary_dim, attn_rope_layout layout,
                   int64_t position) {
    attn_tensor view = attn_tensor_f32_4d(vector, 1, 1, 1, D);
    attn_status status = attn_rope_apply(&view, layout, rotary_dim, 10000.0, &position, 0, 0, NULL);
    CHECK(status == ATTN_OK, "rotate to position %lld", (long long)position);
}

static double dot(const float *a, const float *b, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += (double)a[i] * b[i];
    return sum;
}

static void test_rotation_properties(void) {
    enum { D = 32 };
    test_rng rng;
    test_rng_seed(&rng, 12);
    const int64_t rotary_dims[] = {32, 16, 2};
    const int64_t shifts[][3] = {{0, 0, 5}, {3, 9, 17}, {100, 2, 1000}, {7, 7, 3}};
    for (int layout = 0; layout < 2; ++layout)
        for (size_t r = 0; r < 3; ++r)
            for (size_t s = 0; s < 4; ++s) {
                int64_t m = shifts[s][0], n = shifts[s][1], c = shifts[s][2];
                float q[D], k[D], qm[D], kn[D], qmc[D], knc[D];
                test_fill_normal(&rng, q, D, 1.0f);
                test_fill_normal(&rng, k, D, 1.0f);
                memcpy(qm, q, sizeof q);
                memcpy(qmc, q, sizeof q);
                memcpy(kn, k, sizeof k);
                memcpy(knc, k, sizeof k);
                rotate(qm, D, rotary_dims[r], (attn_rope_layout)layout, m);
                rotate(kn, D, rotary_dims[r], (attn_rope_layout)layout, n);
                rotate(qmc, D, rotary_dims[r], (attn_rope_layout)layout, m + c);
                rotate(knc, D, rotary_dims[r], (attn_rope_layout)layout, n + c);
                double base_dot = dot(qm, kn, D), shifted_dot = dot(qmc, knc, D);
                CHECK(fabs(base_dot - shifted_dot) < 1e-4 * (1 + fabs(base_dot)),
                      "layout %d rotary %lld (m,n,c)=(%lld,%lld,%lld): <R_{m+c}q,R_{n+c}k> = %.8f "
                      "vs <R_m q,R_n k> = %.8f",
                      layout, (long long)rotary_dims[r], (long long)m, (long long)n, (long long)c,
                      shifted_dot, base_dot);
                double norm_before = dot(q, q, D), norm_after = dot(qmc, qmc, D);
                CHECK(fabs(norm_before - norm_after) < 1e-5 * norm_before,
                      "layout %d: |R q|^2 = %.8f vs |q|^2 = %.8f", layout, norm_after, norm_before);
            }

    /* R_0 = I, bitwise (cos 0 = 1, sin 0 = 0 exactly). */
    for (int layout = 0; layout < 2; ++layout) {
        float q[D], q0[D];
        test_fill_normal(&rng, q, D, 1.0f);
        memcpy(q0, q, sizeof q);
        rotate(q0, D, D, (attn_rope_layout)layout, 0);
        CHECK(memcmp(q, q0, sizeof q) == 0, "layout %d: R_0 = I bitwise", layout);
    }

    /* Interleaved = rotate-half under π = [0, 2, 4, ..., 1, 3, 5, ...] of the rotary dims. */
    for (size_t r = 0; r < 3; ++r) {
        int64_t rotary_dim = rotary_dims[r];
        float x[D], permuted[D];
        test_fill_normal(&rng, x, D, 1.0f);
        memcpy(permuted, x, sizeof x);
        for (int64_t i = 0; i < rotary_dim; ++i)
            permuted[i] = x[i < rotary_dim / 2 ? 2 * i : 2 * (i - rotary_dim / 2) + 1];
        rotate(x, D, rotary_dim, ATTN_ROPE_INTERLEAVED, 37);
        rotate(permuted, D, rotary_dim, ATTN_ROPE_HALF, 37);
        int same = 1;
        for (int64_t i = 0; i < rotary_dim; ++i) {
            float expected = x[i < rotary_dim / 2 ? 2 * i : 2 * (i - rotary_dim / 2) + 1];
            if (permuted[i] != expected) same = 0;
        }
        CHECK(same, "rotary %lld: HALF(x[π]) = INTERLEAVED(x)[π] bitwise", (long long)rotary_dim);
    }
}

static void test_errors(void) {
    float data[2 * 3 * 8] = {0};
    attn_tensor x = attn_tensor_f32_4d(data, 1, 2, 3, 8);
    attn_error error;
    CHECK_STATUS(attn_rope_apply(&x, ATTN_ROPE_HALF, 5, 10000.0, NULL, 0, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "odd rotary_dim");
    CHECK(strstr(error.message, "rotary_dim = 5") != NULL, "message names rotary_dim: %s",
          error.message);
    CHECK_STATUS(attn_rope_apply(&x, ATTN_ROPE_HALF, 10, 10000.0, NULL, 0, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "rotary_dim > D");
    CHECK_STATUS(attn_rope_apply(&x, ATTN_ROPE_HALF, 0, 10000.0, NULL, 0, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "rotary_dim = 0");
    CHECK_STATUS(attn_rope_apply(&x, ATTN_ROPE_HALF, 8, 1.0, NULL, 0, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "base = 1");
    CHECK_STATUS(attn_rope_apply(&x, ATTN_ROPE_HALF, 8, NAN, NULL, 0, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "base = NaN");
    CHECK_STATUS(attn_rope_apply(&x, (attn_rope_layout)7, 8, 10000.0, NULL, 0, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "bad layout");
    CHECK_STATUS(attn_rope_apply(NULL, ATTN_ROPE_HALF, 8, 10000.0, NULL, 0, 0, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "x = NULL");
    CHECK_STATUS(attn_rope_apply(&x, ATTN_ROPE_HALF, 8, 10000.0, NULL, INT64_MAX, 0, &error),
                 ATTN_ERROR_OVERFLOW, &error, "first_position + T overflows");
}

int main(void) {
    test_against_formula();
    test_rotation_properties();
    test_errors();
    return test_finish();
}
