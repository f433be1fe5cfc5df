/*
 * test_backward_reference.c — attn_reference_backward against central finite differences of
 * a double-precision forward (test_backward_oracle.h), for every mask kind, soft-cap, ALiBi,
 * the bias gradient (full and broadcast), GQA/MQA, Dk != Dv, odd sizes and Tq != Tk.
 *
 * Loss L = sum(dO * O(Q, K, V, bias)); dL/dx ~ (L(x + h) - L(x - h)) / 2h with h = 1e-6, in
 * double. Error measure per element: |analytic - numeric| / (1 + |numeric|), max <= 1e-6.
 */
#include "test_backward_oracle.h"

#define FD_STEP 1e-6
#define FD_TOLERANCE 1e-6

static const backward_case cases[] = {
    {"plain", SIZES(2, 5, 7, 2, 2, 4, 3)},
    {"single query", SIZES(1, 1, 6, 2, 1, 3, 3), .layout = TEST_LAYOUT_BHTD},
    {"causal bottom-right Tq<Tk", SIZES(2, 4, 7, 2, 2, 4, 4), CAUSAL(BOTTOM_RIGHT)},
    {"causal top-left Tq>Tk", SIZES(1, 6, 4, 2, 2, 3, 5), CAUSAL(TOP_LEFT),
     .layout = TEST_LAYOUT_PADDED},
    {"causal bottom-right empty rows", SIZES(1, 7, 4, 2, 1, 4, 3), CAUSAL(BOTTOM_RIGHT),
     .empty_rows_zero = 1},
    {"window (2, 1)", SIZES(2, 6, 6, 2, 2, 3, 3), WINDOW(2, 1),
     .alignment = ATTN_ALIGN_BOTTOM_RIGHT, .layout = TEST_LAYOUT_REVERSED_T},
    {"soft-cap 1.5", SIZES(2, 5, 6, 2, 2, 4, 3), .softcap = 1.5f},
    {"soft-cap causal GQA", SIZES(1, 6, 6, 4, 2, 5, 3), CAUSAL(TOP_LEFT), .softcap = 0.8f,
     .layout = TEST_LAYOUT_BHTD},
    {"ALiBi causal", SIZES(2, 5, 5, 4, 4, 3, 3), CAUSAL(BOTTOM_RIGHT), .alibi = 1},
    {"ALiBi bidirectional", SIZES(1, 4, 6, 2, 1, 3, 4), .alignment = ATTN_ALIGN_BOTTOM_RIGHT,
     .alibi = 1},
    {"boolean mask", SIZES(2, 6, 5, 2, 2, 4, 3), .bool_mask = 1, .empty_rows_zero = 1},
    {"bias full", SIZES(2, 4, 5, 2, 2, 3, 3), .bias = BIAS_FULL},
    {"bias per head GQA", SIZES(2, 5, 4, 4, 2, 3, 2), .bias = BIAS_PER_HEAD,
     .layout = TEST_LAYOUT_PADDED},
    {"bias shared causal soft-cap", SIZES(2, 5, 5, 2, 1, 4, 3), CAUSAL(BOTTOM_RIGHT),
     .softcap = 1.0f, .bias = BIAS_SHARED},
    {"GQA 4/2", SIZES(2, 5, 6, 4, 2, 3, 3)},
    {"MQA 3/1", SIZES(1, 5, 5, 3, 1, 4, 4), CAUSAL(BOTTOM_RIGHT), .layout = TEST_LAYOUT_BHTD},
    {"Dk 6 != Dv 2", SIZES(2, 3, 5, 2, 2, 6, 2)},
    {"padded lengths", SIZES(3, 5, 6, 2, 2, 3, 3), CAUSAL(BOTTOM_RIGHT), .lengths = 1,
     .empty_rows_zero = 1},
    {"strided pattern causal", SIZES(1, 7, 7, 2, 2, 3, 3), CAUSAL(BOTTOM_RIGHT),
     .pattern = ATTN_PATTERN_STRIDED},
    {"fixed pattern", SIZES(1, 7, 7, 2, 1, 3, 2), .alignment = ATTN_ALIGN_BOTTOM_RIGHT,
     .pattern = ATTN_PATTERN_FIXED, .empty_rows_zero = 1},
    {"dilated pattern", SIZES(1, 7, 8, 2, 2, 3, 3), .alignment = ATTN_ALIGN_TOP_LEFT,
     .pattern = ATTN_PATTERN_DILATED, .empty_rows_zero = 1},
    {"global token + window", SIZES(1, 7, 7, 2, 2, 3, 3), WINDOW(1, 1),
     .alignment = ATTN_ALIGN_BOTTOM_RIGHT, .global_tokens = 1},
    {"block layout", SIZES(2, 7, 9, 2, 2, 3, 3), .block_layout = 1, .empty_rows_zero = 1},
    {"custom scale", SIZES(1, 4, 5, 2, 2, 4, 3), .custom_scale = 0.9f},
};

/* L = sum dO * O for the oracle's current inputs. */
static double oracle_loss(const oracle_inputs *o, const double *dout, double *out, double *lse,
                          double *logits) {
    oracle_forward(o, out, lse, logits);
    double loss = 0;
    const int64_t n = o->B * o->Tq * o->Hq * o->Dv;
    for (int64_t e = 0; e < n; ++e) loss += dout[e] * out[e];
    return loss;
}

/* Max over the elements of `values` (contiguous [d0][d1][d2][d3] double copy of `analytic`'s
 * logical tensor) of the finite-difference error against `analytic`. */
static double finite_difference_error(oracle_inputs *o, double *values, const attn_tensor *analytic,
                                      const double *dout, double *out, double *lse,
                                      double *logits) {
    double worst = 0;
    int64_t n = 0;
    for (int64_t a = 0; a < analytic->shape[0]; ++a)
        for (int64_t b = 0; b < analytic->shape[1]; ++b)
            for (int64_t c = 0; c < analytic->shape[2]; ++c)
                for (int64_t d = 0; d < analytic->shape[3]; ++d, ++n) {
                    const double saved = values[n];
                    values[n] = saved + FD_STEP;
                    const double plus = oracle_loss(o, dout, out, lse, logits);
                    values[n] = saved - FD_STEP;
                    const double minus = oracle_loss(o, dout, out, lse, logits);
                    values[n] = saved;
                    const double numeric = (plus - minus) / (2 * FD_STEP);
                    const double error =
                        fabs(test_get4(analytic, a, b, c, d) - numeric) / (1 + fabs(numeric));
                    if (!(error <= worst)) worst = error; /* NaN propagates as worst */
                }
    return worst;
}

int main(void) {
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; ++t) {
        const backward_case *config = &cases[t];
        backward_setup setup;
        backward_setup_init(&setup, config, 1000 + t);
        oracle_inputs oracle;
        CHECK(oracle_init(&oracle, &setup), "%s: oracle mask context", config->name);
        oracle_fill_forward(&oracle, &setup);

        attn_error error;
        attn_tensor *dbias = setup.options.bias ? &setup.dbias.view : NULL;
        attn_status status = attn_reference_backward(
            &setup.q.view, &setup.k.view, &setup.v.view, &setup.out.view, &setup.lse.view,
            &setup.dout.view, &setup.options, &setup.dq.view, &setup.dk.view, &setup.dv.view,
            dbias, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s", config->name);

        const int64_t out_count = config->B * config->Tq * config->Hq * config->Dv;
        double *dout = malloc(sizeof(double) * (size_t)out_count);
        double *out = malloc(sizeof(double) * (size_t)out_count);
        double *lse = malloc(sizeof(double) * (size_t)(config->B * config->Hq * config->Tq));
        double *logits = malloc(sizeof(double) * (size_t)config->Tk);
        oracle_copy(&setup.dout.view, dout);

        const double error_q = finite_difference_error(&oracle, oracle.q, &setup.dq.view, dout,
                                                       out, lse, logits);
        const double error_k = finite_difference_error(&oracle, oracle.k, &setup.dk.view, dout,
                                                       out, lse, logits);
        const double error_v = finite_difference_error(&oracle, oracle.v, &setup.dv.view, dout,
                                                       out, lse, logits);
        CHECK(error_q <= FD_TOLERANCE, "%s: dQ vs finite differences, error %.3g", config->name,
              error_q);
        CHECK(error_k <= FD_TOLERANCE, "%s: dK vs finite differences, error %.3g", config->name,
              error_k);
        CHECK(error_v <= FD_TOLERANCE, "%s: dV vs finite differences, error %.3g", config->name,
              error_v);
        double error_bias = 0;
        if (dbias) {
            error_bias = finite_difference_error(&oracle, oracle.bias, dbias, dout, out, lse,
                                                 logits);
            CHECK(error_bias <= FD_TOLERANCE, "%s: d bias vs finite differences, error %.3g",
                  config->name, error_bias);
        }
        printf("%-32s dQ %.2e  dK %.2e  dV %.2e  dbias %.2e\n", config->name, error_q, error_k,
               error_v, error_bias);

        free(dout);
        free(out);
        free(lse);
        free(logits);
        oracle_free(&oracle);
        backward_setup_free(&setup);
    }
    return test_finish();
}
