/*
 * test_backward_lowp.c — attn_backward with BF16 and F16 q, k, v, out, dout, dq, dk, dv (lse
 * and dbias float32) against attn_reference_backward (float64) on the same inputs widened to
 * fp32, for every registry the CPU runs: plain, causal GQA with Tq != Tk, bias with its
 * gradient, soft-cap, a padded layout, peaked attention (scale 1, D = 80); bitwise identical for 1 and 2 threads; a gradient
 * beyond fp16 is ATTN_ERROR_OVERFLOW; mixed dtypes are refused.
 *
 * The 16-bit backward widens its inputs exactly and computes in fp32 like the fp32 backward,
 * then rounds dQ, dK, dV once (docs/precision.md), and computes D = rowsum(dO O) from the
 * unrounded O (not from the 16-bit O it is given), so against the float64 gradient of the
 * same inputs (the reference backward on the reference forward's O) each element must satisfy
 *   |g - g_ref| <= u |g_ref| + 1e-5 s (1 + |g_ref|)
 * with u the unit roundoff of the type (bf16 2^-8, fp16 2^-11), 1e-5 the fp32 backward's own
 * tolerance against double (tests/test_backward_flash.c) and s = max(1, scale sqrt(Dk)) the
 * logits' spread, to which the fp32 rounding of S and dP grows (8.9 for the peaked cases).
 * With D from the rounded O the peaked cases are 70-600x outside this bound.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "test_forward_harness.h"

static const forward_case cases[] = {
    {.name = "plain", .B = 1, .Tq = 40, .Tk = 56, .Hq = 2, .Hkv = 2, .Dk = 32, .Dv = 32},
    {.name = "causal GQA, Tq < Tk", .B = 2, .Tq = 30, .Tk = 70, .Hq = 4, .Hkv = 2, .Dk = 16,
     .Dv = 24, .causal = 1, .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
    {.name = "bias", .B = 1, .Tq = 21, .Tk = 35, .Hq = 2, .Hkv = 1, .Dk = 17, .Dv = 8,
     .bias = HARNESS_PER_BATCH_HEAD},
    {.name = "soft-cap", .B = 1, .Tq = 33, .Tk = 33, .Hq = 1, .Hkv = 1, .Dk = 64, .Dv = 64,
     .softcap = 4.0f, .scale = 0.25f},
    {.name = "padded rows", .B = 1, .Tq = 25, .Tk = 41, .Hq = 2, .Hkv = 1, .Dk = 24, .Dv = 24,
     .layout = TEST_LAYOUT_PADDED},
    /* Peaked attention (logits of spread ~9): dS = P (dP - D) cancels, dQ and dK are ~1e-4,
     * and D must not carry the rounding of the 16-bit O (docs/precision.md). */
    {.name = "peaked, bias", .B = 1, .Tq = 48, .Tk = 80, .Hq = 2, .Hkv = 1, .Dk = 80, .Dv = 80,
     .bias = HARNESS_PER_BATCH_HEAD, .scale = 1.0f},
    {.name = "peaked, causal", .B = 2, .Tq = 70, .Tk = 70, .Hq = 2, .Hkv = 2, .Dk = 80, .Dv = 80,
     .causal = 1, .alignment = ATTN_ALIGN_TOP_LEFT, .scale = 1.0f,
     .layout = TEST_LAYOUT_PADDED},
};

static const attn_kernel_choice kernel_choices[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_GENERIC,
                                                    ATTN_KERNEL_AVX512_BF16, ATTN_KERNEL_AMX};

/* Worst error of a 16-bit gradient against the float64 one, as a fraction of the bound. */
static double gradient_error(const attn_tensor *got, const attn_tensor *expected, double unit,
                             double spread, int *failures) {
    double worst = 0.0;
    for (int64_t a = 0; a < got->shape[0]; ++a)
        for (int64_t b = 0; b < got->shape[1]; ++b)
            for (int64_t c = 0; c < got->shape[2]; ++c)
                for (int64_t d = 0; d < got->shape[3]; ++d) {
                    const double reference = test_get4(expected, a, b, c, d);
                    const double error = fabs(test_half_get4(got, a, b, c, d) - reference);
                    const double bound =
                        unit * fabs(reference) + 1e-5 * spread * (1 + fabs(reference));
                    *failures += !(error <= bound);
                    if (error / bound > worst) worst = error / bound;
                }
    return worst;
}

static void run_case(const forward_case *c, attn_dtype dtype, uint64_t seed) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
    const double unit = dtype == ATTN_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    /* The fp32 rounding of S and dP grows with the logits' spread, scale * sqrt(Dk) for unit
     * inputs (1 at the default scale): the fp32 term of the bound too. */
    const double spread = c->scale > 0 && c->scale * sqrt((double)c->Dk) > 1
                              ? c->scale * sqrt((double)c->Dk)
                              : 1.0;
    forward_instance x;
    forward_instance_build(&x, c, seed);
    test_tensor dout = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, c->layout);
    test_rng rng;
    test_rng_seed(&rng, seed + 1);
    test_tensor_fill_normal(&dout, &rng, 1.0f);
    test_half_tensor q = test_half_round(&x.q, dtype), k = test_half_round(&x.k, dtype),
                     v = test_half_round(&x.v, dtype), dout16 = test_half_round(&dout, dtype);
    /* the forward in 16 bits gives O (16-bit) and LSE for attn_backward; the reference
     * backward reads the float64 forward's O and LSE on the same (widened) inputs, so that it
     * is the exact gradient of those inputs, not of a rounded O */
    test_half_tensor out = test_half_like(&x.out, dtype, 0);
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &x.options, &out.view, &x.lse.view,
                              &x.execution, &error),
                 ATTN_OK, &error, "%s %s: forward", c->name, type);
    CHECK_STATUS(attn_reference_forward(&x.q.view, &x.k.view, &x.v.view, &x.options,
                                        &x.out_reference.view, &x.lse_reference.view, &error),
                 ATTN_OK, &error, "%s %s: reference forward", c->name, type);

    test_tensor dq_ref = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor dk_ref = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor dv_ref = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    const int64_t bias_shape[4] = {c->B, c->Hq, c->Tq, c->Tk};
    test_tensor dbias_ref = test_tensor_new_shape(4, bias_shape), dbias = test_tensor_new_shape(4, bias_shape);
    const int has_bias = c->bias != HARNESS_NONE;
    CHECK_STATUS(attn_reference_backward(&x.q.view, &x.k.view, &x.v.view, &x.out_reference.view,
                                         &x.lse_reference.view,
                                         &dout.view, &x.options, &dq_ref.view, &dk_ref.view,
                                         &dv_ref.view, has_bias ? &dbias_ref.view : NULL, &error),
                 ATTN_OK, &error, "%s %s: reference backward", c->name, type);

    for (size_t kc = 0; kc < sizeof kernel_choices / sizeof *kernel_choices; ++kc) {
        if (!attn_kernel_available(kernel_choices[kc])) continue;
        const char *name = attn_kernel_choice_name(kernel_choices[kc]);
        test_tensor dq_like = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, c->layout);
        test_tensor dk_like = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dk, c->layout);
        test_tensor dv_like = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, c->layout);
        test_half_tensor grads[2][3];
        for (int t = 0; t < 2; ++t) {
            grads[t][0] = test_half_like(&dq_like, dtype, 0x7bcd);
            grads[t][1] = test_half_like(&dk_like, dtype, 0x7bcd);
            grads[t][2] = test_half_like(&dv_like, dtype, 0x7bcd);
            attn_execution execution = x.execution;
            execution.kernel = kernel_choices[kc];
            execution.num_threads = t + 1;
            CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out.view, &x.lse.view,
                                       &dout16.view, &x.options, &grads[t][0].view,
                                       &grads[t][1].view, &grads[t][2].view,
                                       has_bias ? &dbias.view : NULL, &execution, &error),
                         ATTN_OK, &error, "%s %s [%s]: backward, %d threads", c->name, type, name,
                         t + 1);
        }
        int failures = 0;
        const double worst_q =
            gradient_error(&grads[0][0].view, &dq_ref.view, unit, spread, &failures);
        const double worst_k =
            gradient_error(&grads[0][1].view, &dk_ref.view, unit, spread, &failures);
        const double worst_v =
            gradient_error(&grads[0][2].view, &dv_ref.view, unit, spread, &failures);
        printf("%-22s %s %-12s dQ %.2f dK %.2f dV %.2f of the bound\n", c->name, type, name,
               worst_q, worst_k, worst_v);
        CHECK(failures == 0, "%s %s [%s]: dQ, dK, dV within u|g| + 1e-5 s(1 + |g|) (%d outside)",
              c->name, type, name, failures);
        if (has_bias)
            CHECK(test_max_relative_error(&dbias.view, &dbias_ref.view) <= 1e-5 * spread,
                  "%s %s [%s]: d bias (float32) = the reference's", c->name, type, name);
        int differences = 0;
        for (int g = 0; g < 3; ++g)
            differences += memcmp(grads[0][g].allocation, grads[1][g].allocation,
                                  (size_t)(g == 0 ? dq_like : g == 1 ? dk_like : dv_like).allocation_floats *
                                      sizeof(uint16_t)) != 0;
        CHECK(differences == 0, "%s %s [%s]: bitwise identical for 1 and 2 threads", c->name, type,
              name);
        for (int t = 0; t < 2; ++t)
            for (int g = 0; g < 3; ++g) free(grads[t][g].allocation);
        test_tensor_free(&dq_like);
        test_tensor_free(&dk_like);
        test_tensor_free(&dv_like);
    }
    free(q.allocation), free(k.allocation), free(v.allocation), free(dout16.allocation);
    free(out.allocation);
    test_tensor_free(&dout);
    test_tensor_free(&dq_ref), test_tensor_free(&dk_ref), test_tensor_free(&dv_ref);
    test_tensor_free(&dbias_ref), test_tensor_free(&dbias);
    forward_instance_free(&x);
}

/* Errors: a gradient beyond fp16 (dO of 60000 on values of spread 100) and mixed dtypes. */
static void test_errors(void) {
    const forward_case c = {.name = "errors", .B = 1, .Tq = 8, .Tk = 8, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 8};
    forward_instance x;
    forward_instance_build(&x, &c, 3);
    for (int64_t n = 0; n < x.v.allocation_floats; ++n) x.v.allocation[n] *= 100.0f;
    test_tensor dout = test_tensor_new(1, 8, 1, 8, TEST_LAYOUT_BTHD);
    for (int64_t n = 0; n < dout.allocation_floats; ++n) dout.allocation[n] = (n % 2 ? 60000.0f : -60000.0f);
    test_half_tensor q = test_half_round(&x.q, ATTN_DTYPE_F16), k = test_half_round(&x.k, ATTN_DTYPE_F16),
                     v = test_half_round(&x.v, ATTN_DTYPE_F16), dout16 = test_half_round(&dout, ATTN_DTYPE_F16);
    test_half_tensor out = test_half_like(&x.out, ATTN_DTYPE_F16, 0);
    test_half_tensor dq = test_half_like(&x.q, ATTN_DTYPE_F16, 0), dk = test_half_like(&x.k, ATTN_DTYPE_F16, 0),
                     dv = test_half_like(&x.v, ATTN_DTYPE_F16, 0);
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &x.options, &out.view, &x.lse.view,
                              &x.execution, &error),
                 ATTN_OK, &error, "errors: forward");
    attn_status status = attn_backward(&q.view, &k.view, &v.view, &out.view, &x.lse.view, &dout16.view,
                                       &x.options, &dq.view, &dk.view, &dv.view, NULL, &x.execution,
                                       &error);
    CHECK_STATUS(status, ATTN_ERROR_OVERFLOW, &error, "fp16 gradients beyond 65504");
    CHECK(strstr(error.message, "do not fit float16") != NULL, "message: %s", error.message);
    dq.view.dtype = ATTN_DTYPE_BF16;
    status = attn_backward(&q.view, &k.view, &v.view, &out.view, &x.lse.view, &dout16.view,
                           &x.options, &dq.view, &dk.view, &dv.view, NULL, &x.execution, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "bfloat16 dq with float16 q");
    CHECK(strstr(error.message, "dq.dtype") != NULL, "message names dq.dtype: %s", error.message);
    free(q.allocation), free(k.allocation), free(v.allocation), free(dout16.allocation);
    free(out.allocation), free(dq.allocation), free(dk.allocation), free(dv.allocation);
    test_tensor_free(&dout);
    forward_instance_free(&x);
}

int main(void) {
    for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) {
        run_case(&cases[n], ATTN_DTYPE_BF16, 300 + n);
        run_case(&cases[n], ATTN_DTYPE_F16, 400 + n);
    }
    test_errors();
    return test_finish();
}
