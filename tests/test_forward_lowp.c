/*
 * test_forward_lowp.c — attn_forward with BF16 and F16 q, k, v, out against the float64
 * reference (attn_reference_forward) on the same inputs (the 16-bit values widened to fp32),
 * for every registry this CPU runs (AUTO, GENERIC, AVX512_BF16 = bf16 tiles, AMX where the OS
 * allows it) and the AMX / AMX-FP16 tile algorithms on emulated tiles, across masks, GQA, Tq != Tk, strided layouts; bitwise identical for 1 and 2
 * threads and for every way of holding packed K/V (per thread, shared, one tile at a time
 * under execution.memory_limit_bytes); an fp16 output that overflows is ATTN_ERROR_OVERFLOW;
 * mixed dtypes are refused; attn_merge of 16-bit partials over two key halves; NaN / inf in
 * the values of a key no query attends never reach O.
 *
 * Tolerance (docs/precision.md), per element e of O, with u the unit roundoff of the operand
 * type (bf16 2^-8, fp16 2^-11), A[e] = sum_j p_j |v_je| / l (the reference run on |V|), L a
 * bound on the fp32 error of one logit:
 *   |O - O_ref| <= u |O_ref| + (u + 2.1 L + 1e-5) A[e]  (+ Tk * 2^-25 * max|v| for fp16)
 * because O is rounded once (relative <= u), P once (relative error <= u per weight, fp16
 * subnormal P: absolute 2^-25 each), and each logit error changes every weight p_j / l by a
 * factor within exp(±2L); 1e-5 covers exp and the fp32 sums. L = (Dk + 2) * 2^-24 * scale * max_ij sum_d |q_id k_jd| + 2^-22 * X, X the
 * largest |logit| (bias and soft-cap included). LSE uses the unrounded P, so it must be
 * within L + 2^-22 |LSE| + 1e-5 — a check that P's rounding stays out of the row sums.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "kernels/registry.h"

#include "amx_emulation.h"
#include "test_forward_harness.h"

static uint16_t f16_bits(float x) { return test_half_from_float(x, ATTN_DTYPE_F16); }
static float f16_value(uint16_t h) { return (float)test_half_to_double(h, ATTN_DTYPE_F16); }

/* ---- cases ---- */
static const forward_case cases[] = {
    /* name, B, Tq, Tk, Hq, Hkv, Dk, Dv, layout, causal, alignment, window, wl, wr, mask, bias,
       lengths, globals, pattern ... */
    {.name = "plain", .B = 1, .Tq = 37, .Tk = 45, .Hq = 2, .Hkv = 2, .Dk = 64, .Dv = 64},
    /* more than one query tile and key tile of the 16-bit path (256 x 256 on AMX tiles,
     * flash_forward.c), causal diagonals inside a 256-key tile, and the last tiles partial */
    {.name = "causal, tiles of 256 rows and keys", .B = 1, .Tq = 520, .Tk = 600, .Hq = 2, .Hkv = 1,
     .Dk = 64, .Dv = 64, .causal = 1, .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
    {.name = "no mask, tiles of 256 rows and keys", .B = 1, .Tq = 300, .Tk = 530, .Hq = 1, .Hkv = 1,
     .Dk = 32, .Dv = 32},
    {.name = "gqa 4:1, Tq < Tk, D = 128", .B = 2, .Tq = 19, .Tk = 300, .Hq = 4, .Hkv = 1, .Dk = 128, .Dv = 128},
    {.name = "causal", .B = 1, .Tq = 150, .Tk = 150, .Hq = 2, .Hkv = 1, .Dk = 32, .Dv = 32, .causal = 1,
     .alignment = ATTN_ALIGN_TOP_LEFT},
    {.name = "causal bottom-right, Tq > Tk", .B = 1, .Tq = 70, .Tk = 40, .Hq = 3, .Hkv = 3, .Dk = 16,
     .Dv = 16, .causal = 1, .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
    {.name = "window 16 left, 4 right", .B = 1, .Tq = 120, .Tk = 120, .Hq = 2, .Hkv = 2, .Dk = 48,
     .Dv = 48, .window = 1, .window_left = 16, .window_right = 4, .alignment = ATTN_ALIGN_TOP_LEFT},
    {.name = "bool mask per head, Dk != Dv", .B = 2, .Tq = 33, .Tk = 65, .Hq = 2, .Hkv = 1, .Dk = 40,
     .Dv = 24, .mask = HARNESS_PER_BATCH_HEAD},
    {.name = "bias broadcast with -inf", .B = 1, .Tq = 20, .Tk = 77, .Hq = 2, .Hkv = 2, .Dk = 17,
     .Dv = 33, .bias = HARNESS_BROADCAST},
    {.name = "padding lengths", .B = 3, .Tq = 25, .Tk = 31, .Hq = 2, .Hkv = 1, .Dk = 8, .Dv = 8,
     .lengths = 1},
    {.name = "soft-cap 5, scale 0.3", .B = 1, .Tq = 30, .Tk = 90, .Hq = 1, .Hkv = 1, .Dk = 64, .Dv = 64,
     .softcap = 5.0f, .scale = 0.3f},
    {.name = "odd dims D = 1 / 3", .B = 1, .Tq = 9, .Tk = 70, .Hq = 2, .Hkv = 2, .Dk = 1, .Dv = 3},
    {.name = "BHTD layout", .B = 2, .Tq = 40, .Tk = 40, .Hq = 2, .Hkv = 2, .Dk = 64, .Dv = 64,
     .layout = TEST_LAYOUT_BHTD},
    {.name = "padded rows", .B = 2, .Tq = 21, .Tk = 35, .Hq = 4, .Hkv = 2, .Dk = 24, .Dv = 24,
     .layout = TEST_LAYOUT_PADDED, .window = 1, .window_left = 8, .window_right = -1,
     .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
    {.name = "reversed T, causal", .B = 1, .Tq = 30, .Tk = 50, .Hq = 2, .Hkv = 1, .Dk = 20,
     .Dv = 20, .layout = TEST_LAYOUT_REVERSED_T, .causal = 1, .alignment = ATTN_ALIGN_TOP_LEFT},
    {.name = "large logits (inputs x 4)", .B = 1, .Tq = 24, .Tk = 64, .Hq = 1, .Hkv = 1, .Dk = 64,
     .Dv = 64, .input_stddev = 4.0f},
};

/* ---- bf16 / fp16 on AMX tiles, emulated (tests/support/amx_emulation.h): the forward pass
 * as it runs on a CPU with AMX (AMX-FP16), on any CPU. The runners below are the kernel
 * choices plus EMULATED_AMX (bf16 operands) and EMULATED_AMX_FP16 (fp16 operands): the AUTO
 * registry with its bf16 (f16) part replaced by the AMX tile algorithm (configured as
 * lowp_amx.c is where this CPU has AVX512-BF16) and bf16_native (f16_native) set, run through
 * attn_call_begin / attn_forward_run with the call's registry swapped. ---- */
enum { EMULATED_AMX = -1, EMULATED_AMX_FP16 = -2 };
static const int runners[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX512_BF16,
                              ATTN_KERNEL_AMX, EMULATED_AMX, EMULATED_AMX_FP16};
enum { RUNNER_COUNT = sizeof runners / sizeof runners[0] };

static int runner_available(int runner, attn_dtype dtype) {
    if (runner == EMULATED_AMX) return dtype == ATTN_DTYPE_BF16;
    if (runner == EMULATED_AMX_FP16) return dtype == ATTN_DTYPE_F16;
    return attn_cpu_supports((attn_kernel_choice)runner);
}
static const char *runner_name(int runner) {
    return runner == EMULATED_AMX        ? "amx (emulated)"
           : runner == EMULATED_AMX_FP16 ? "amx_fp16 (emulated)"
                                         : attn_kernel_choice_name((attn_kernel_choice)runner);
}

/* The AUTO registry with emulated AMX tiles for bf16 (f16 = 0) or fp16 (f16 = 1). */
static const attn_kernels *emulated_registry(int f16) {
    static attn_kernels registry[2];
    static int built;
    if (!built) { /* main thread only */
        const attn_kernels *automatic = NULL;
        attn_kernels_select(ATTN_KERNEL_AUTO, &automatic, NULL);
        registry[0] = registry[1] = *automatic;
        registry[0].bf16 = emulated_amx;
        registry[1].f16 = emulated_amx_f16;
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX512_BF16)) {
            registry[0].bf16 = emulated_amx_avx512;
            registry[1].f16 = emulated_amx_f16_avx512;
        }
#endif
        registry[0].bf16_native = 1;
        registry[1].f16_native = 1;
        built = 1;
    }
    return &registry[f16];
}

/* attn_forward under `runner` (execution->kernel is set from it). */
static attn_status forward_with(int runner, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_options *options,
                                attn_tensor *out, attn_tensor *lse, attn_execution execution,
                                attn_error *error) {
    const int emulated = runner == EMULATED_AMX || runner == EMULATED_AMX_FP16;
    execution.kernel = emulated ? ATTN_KERNEL_AUTO : (attn_kernel_choice)runner;
    if (!emulated) return attn_forward(q, k, v, options, out, lse, &execution, error);
    const attn_kernels *registry = emulated_registry(runner == EMULATED_AMX_FP16);
    attn_call call;
    const attn_status status = attn_call_begin(&call, options, &execution, error);
    if (status != ATTN_OK) {
        attn_call_end(&call);
        return status;
    }
    call.kernels = registry;
    return attn_forward_run(&call, q, k, v, out, lse, error);
}

/* Bound L on the fp32 error of one logit of the case (header comment). */
static double logit_error_bound(const forward_instance *x, const forward_case *c, double scale) {
    const double largest_sum = test_largest_abs_dot(&x->q.view, &x->k.view);
    double largest_logit = scale * largest_sum + (c->bias != HARNESS_NONE ? 8.0 : 0.0);
    if (c->softcap > 0 && largest_logit > c->softcap) largest_logit = c->softcap + 8.0;
    return (c->Dk + 2) * ldexp(1.0, -24) * scale * largest_sum + ldexp(largest_logit, -22);
}

static void run_case(const forward_case *c, attn_dtype dtype, uint64_t seed) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
    forward_instance x;
    forward_instance_build(&x, c, seed);
    test_half_tensor q = test_half_round(&x.q, dtype), k = test_half_round(&x.k, dtype),
                v = test_half_round(&x.v, dtype);
    attn_error error = {0};
    attn_status status = forward_instance_reference(&x, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s %s: reference", c->name, type);

    const double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->Dk);
    const double unit = dtype == ATTN_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    double v_max = 0.0;
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t j = 0; j < c->Tk; ++j)
            for (int64_t h = 0; h < c->Hkv; ++h)
                for (int64_t e = 0; e < c->Dv; ++e)
                    v_max = fmax(v_max, fabs(test_get4(&x.v.view, b, j, h, e)));
    const double logit_error = logit_error_bound(&x, c, scale);
    const double subnormal_p = dtype == ATTN_DTYPE_F16 ? c->Tk * ldexp(v_max, -25) : 0.0;
    /* A = sum_j p_j |v_j| / l: the reference on |V| */
    test_tensor absolute_v = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, c->layout);
    test_tensor absolute_out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    for (int64_t n = 0; n < x.v.allocation_floats; ++n) absolute_v.allocation[n] = fabsf(x.v.allocation[n]);
    status = attn_reference_forward(&x.q.view, &x.k.view, &absolute_v.view, &x.options,
                                    &absolute_out.view, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s %s: reference on |V|", c->name, type);

    for (int rc = 0; rc < RUNNER_COUNT; ++rc) {
        const int runner = runners[rc];
        if (!runner_available(runner, dtype)) continue;
        test_half_tensor out[2];
        test_tensor lse[2];
        const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
        for (int t = 0; t < 2; ++t) {
            out[t] = test_half_like(&x.out, dtype, 0x7bcd);
            lse[t] = test_tensor_new_shape(3, lse_shape);
            attn_options options = x.options;
            attn_execution execution = x.execution;
            execution.num_threads = t + 1;
            status = forward_with(runner, &q.view, &k.view, &v.view, &options, &out[t].view,
                                  &lse[t].view, execution, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "%s %s kernel %s threads %d", c->name, type,
                         runner_name(runner), t + 1);
        }
        double worst = 0.0, worst_lse = 0.0;
        int out_failures = 0, lse_failures = 0, thread_differences = 0;
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t i = 0; i < c->Tq; ++i)
                for (int64_t h = 0; h < c->Hq; ++h) {
                    for (int64_t e = 0; e < c->Dv; ++e) {
                        const uint16_t got = test_half_bits4(&out[0].view, b, i, h, e);
                        thread_differences += got != test_half_bits4(&out[1].view, b, i, h, e);
                        const double expected = test_get4(&x.out_reference.view, b, i, h, e);
                        const double error_e = fabs(test_half_to_double(got, dtype) - expected);
                        const double bound =
                            unit * fabs(expected) + subnormal_p +
                            (unit + 2.1 * logit_error + 1e-5) * test_get4(&absolute_out.view, b, i, h, e);
                        if (!(error_e <= bound)) ++out_failures;
                        if (bound > 0 && error_e / bound > worst) worst = error_e / bound;
                    }
                    const float got = test_get3(&lse[0].view, b, h, i);
                    const float other = test_get3(&lse[1].view, b, h, i);
                    thread_differences += memcmp(&got, &other, sizeof got) != 0;
                    const double expected = test_get3(&x.lse_reference.view, b, h, i);
                    if (isinf(expected) || isinf(got)) {
                        lse_failures += got != expected;
                        continue;
                    }
                    const double error_l = fabs(got - expected);
                    if (!(error_l <= logit_error + ldexp(fabs(expected), -22) + 1e-5)) ++lse_failures;
                    if (error_l > worst_lse) worst_lse = error_l;
                }
        printf("%-30s %s %-12s O error <= %.2f of its bound, LSE error %.3g (bound %.3g)\n",
               c->name, type, runner_name(runner), worst, worst_lse, logit_error + 1e-5);
        CHECK(out_failures == 0,
              "%s %s [%s]: O within u|O| + (u + 2.1L)A of float64 (worst %.2f of the bound, %d outside)",
              c->name, type, runner_name(runner), worst, out_failures);
        CHECK(lse_failures == 0, "%s %s [%s]: LSE from unrounded P within the logit bound (worst %.3g)",
              c->name, type, runner_name(runner), worst_lse);
        CHECK(thread_differences == 0, "%s %s [%s]: bitwise identical for 1 and 2 threads (%d differ)",
              c->name, type, runner_name(runner), thread_differences);
        /* nothing written outside the view (padding of strided layouts) */
        int outside = 0;
        if (c->layout == TEST_LAYOUT_PADDED) {
            for (int64_t b = 0; b < c->B; ++b)
                for (int64_t i = 0; i < c->Tq; ++i)
                    for (int64_t h = 0; h < c->Hq; ++h)
                        outside += test_half_bits4(&out[0].view, b, i, h, c->Dv) != 0x7bcd;
            CHECK(outside == 0, "%s %s [%s]: row padding untouched", c->name, type,
                  runner_name(runner));
        }
        for (int t = 0; t < 2; ++t) {
            free(out[t].allocation);
            test_tensor_free(&lse[t]);
        }
    }
    free(q.allocation);
    free(k.allocation);
    free(v.allocation);
    test_tensor_free(&absolute_v);
    test_tensor_free(&absolute_out);
    forward_instance_free(&x);
}

/* ---- errors ---- */
static void test_errors(void) {
    const int64_t shape[4] = {1, 4, 1, 8};
    uint16_t q16[32] = {0}, k16[32] = {0}, v16[32] = {0}, o16[32] = {0};
    float o32[32] = {0};
    attn_tensor q = attn_tensor_contiguous(q16, ATTN_DTYPE_BF16, 4, shape);
    attn_tensor k = attn_tensor_contiguous(k16, ATTN_DTYPE_BF16, 4, shape);
    attn_tensor v = attn_tensor_contiguous(v16, ATTN_DTYPE_F16, 4, shape);
    attn_tensor out = attn_tensor_contiguous(o16, ATTN_DTYPE_BF16, 4, shape);
    attn_tensor out32 = attn_tensor_contiguous(o32, ATTN_DTYPE_F32, 4, shape);
    attn_options options = attn_options_default();
    attn_execution execution = attn_execution_default();
    attn_error error = {0};
    attn_status status = attn_forward(&q, &k, &v, &options, &out, NULL, &execution, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "v float16 with q bfloat16");
    CHECK(strstr(error.message, "v.dtype") != NULL, "message names v.dtype: %s", error.message);
    v.dtype = ATTN_DTYPE_BF16;
    status = attn_forward(&q, &k, &v, &options, &out32, NULL, &execution, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "float32 out with bfloat16 q");
    CHECK(strstr(error.message, "out.dtype") != NULL, "message names out.dtype: %s", error.message);
    q.dtype = ATTN_DTYPE_I32;
    status = attn_forward(&q, &k, &v, &options, &out, NULL, &execution, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "int32 q");
}

/* An fp16 output beyond 65504 is an error, for every registry: one key with logit 0 (p = 1)
 * and 255 keys whose p in (0.50026, 0.50029) rounds up to 0.500488 in fp16, all values 65504,
 * so that O = 65504 * sum(rounded p) / sum(p) > 65530 rounds to inf in fp16. With all logits
 * 0 (p = 1), O = 65504 exactly and the call succeeds. The rounding of p to fp16 is the tiled
 * path's: 17 query rows (rows 1-16 zero: all their logits 0) keep the call off the decode loop
 * of small calls, which keeps p in float32. */
static void test_fp16_overflow(void) {
    enum { T = 256, TQ = 17 };
    uint16_t q16[TQ] = {0}, k16[T], v16[T], o16[TQ];
    const int64_t q_shape[4] = {1, TQ, 1, 1}, k_shape[4] = {1, T, 1, 1};
    uint16_t key = 0;
    double p = 0.0;
    for (uint16_t query = f16_bits(0.9f); f16_value(query) < 1.1f; ++query)
        for (key = f16_bits(-0.68f); f16_value(key) > -0.70f; ++key) {
            q16[0] = query; /* a query and key whose p is in the window */
            p = exp((double)(f16_value(query) * f16_value(key)));
            if (p > 0.50026 && p < 0.50029) goto found;
        }
found:
    CHECK(p > 0.50026 && p < 0.50029, "overflow case: p = %.6f rounds up to 0.500488 in fp16", p);
    for (int j = 0; j < T; ++j) {
        k16[j] = j == 0 ? f16_bits(0.0f) : key;
        v16[j] = f16_bits(65504.0f);
    }
    attn_tensor q = attn_tensor_contiguous(q16, ATTN_DTYPE_F16, 4, q_shape);
    attn_tensor k = attn_tensor_contiguous(k16, ATTN_DTYPE_F16, 4, k_shape);
    attn_tensor v = attn_tensor_contiguous(v16, ATTN_DTYPE_F16, 4, k_shape);
    attn_tensor out = attn_tensor_contiguous(o16, ATTN_DTYPE_F16, 4, q_shape);
    for (int rc = 0; rc < RUNNER_COUNT; ++rc) {
        if (!runner_available(runners[rc], ATTN_DTYPE_F16)) continue;
        const char *name = runner_name(runners[rc]);
        attn_options options = attn_options_default();
        attn_execution execution = attn_execution_default();
        options.custom_scale = 1;
        options.scale = 1.0f;
        attn_error error = {0};
        attn_status status = forward_with(runners[rc], &q, &k, &v, &options, &out, NULL, execution, &error);
        CHECK_STATUS(status, ATTN_ERROR_OVERFLOW, &error, "[%s] fp16 output 65536 is an error", name);
        CHECK(strstr(error.message, "b = 0, i = 0, h = 0") != NULL && strstr(error.message, "65504"),
              "[%s] message names the row and the limit: %s", name, error.message);
        for (int j = 0; j < T; ++j) k16[j] = f16_bits(0.0f);
        status = forward_with(runners[rc], &q, &k, &v, &options, &out, NULL, execution, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "[%s] fp16 output 65504 fits", name);
        CHECK(o16[0] == f16_bits(65504.0f), "[%s] O = 65504 exactly", name);
        for (int j = 1; j < T; ++j) k16[j] = key;
    }
}

/* Packed K/V held per thread, shared or one tile at a time (a sweep of memory limits from the
 * smallest accepted, flash_forward.c): bitwise the same O as without a limit, 16-bit K/V
 * converted or kept as bf16 tiles. */
static void test_packing_modes(attn_dtype dtype) {
    const forward_case c = {.name = "limits", .B = 2, .Tq = 300, .Tk = 300, .Hq = 4, .Hkv = 2,
                            .Dk = 32, .Dv = 32, .causal = 1, .alignment = ATTN_ALIGN_BOTTOM_RIGHT,
                            .layout = TEST_LAYOUT_PADDED};
    forward_instance x;
    forward_instance_build(&x, &c, 77);
    test_half_tensor q = test_half_round(&x.q, dtype), k = test_half_round(&x.k, dtype),
                v = test_half_round(&x.v, dtype);
    for (int rc = 0; rc < RUNNER_COUNT; ++rc) {
        if (!runner_available(runners[rc], dtype)) continue;
        const char *name = runner_name(runners[rc]);
        test_half_tensor unlimited = test_half_like(&x.out, dtype, 0x7bcd), limited = test_half_like(&x.out, dtype, 0x7bcd);
        attn_options options = x.options;
        attn_execution execution = x.execution;
        execution.num_threads = 2;
        attn_error error = {0};
        CHECK_STATUS(forward_with(runners[rc], &q.view, &k.view, &v.view, &options, &unlimited.view, NULL, execution, &error),
                     ATTN_OK, &error, "limits %d [%s]: no limit", (int)dtype, name);
        size_t low = 1, high = (size_t)1 << 30;
        while (low < high) {
            const size_t middle = low + (high - low) / 2;
            execution.memory_limit_bytes = middle;
            if (forward_with(runners[rc], &q.view, &k.view, &v.view, &options, &limited.view, NULL, execution, NULL) == ATTN_OK)
                high = middle;
            else
                low = middle + 1;
        }
        int runs = 0, differences = 0;
        for (size_t limit = low; limit < ((size_t)64 << 20); limit += limit / 2 + 1, ++runs) {
            execution.memory_limit_bytes = limit;
            const attn_status status =
                forward_with(runners[rc], &q.view, &k.view, &v.view, &options, &limited.view, NULL, execution, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "limits [%s]: limit %zu", name, limit);
            differences += memcmp(limited.allocation, unlimited.allocation,
                                  (size_t)x.out.allocation_floats * sizeof(uint16_t)) != 0;
        }
        CHECK(differences == 0 && runs > 3,
              "%s [%s]: O bitwise the same under %d memory limits from %zu bytes up (%d differ)",
              dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16", name, runs, low, differences);
        free(unlimited.allocation);
        free(limited.allocation);
    }
    free(q.allocation);
    free(k.allocation);
    free(v.allocation);
    forward_instance_free(&x);
}

/* Split-KV in 16 bits: forward over keys [0, Tk/2) and [Tk/2, Tk) (views of K and V), then
 * attn_merge of the two 16-bit partials into a 16-bit O; against float64 over all keys within
 * u|O| + (2u + 2.1L + 1e-5) A (each partial rounded once more than a single pass). */
static void test_merge(attn_dtype dtype) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
    const forward_case c = {.name = "merge", .B = 2, .Tq = 23, .Tk = 90, .Hq = 4, .Hkv = 2,
                            .Dk = 32, .Dv = 24};
    forward_instance x;
    forward_instance_build(&x, &c, 99);
    test_half_tensor q = test_half_round(&x.q, dtype), k = test_half_round(&x.k, dtype),
                v = test_half_round(&x.v, dtype);
    attn_error error = {0};
    CHECK_STATUS(forward_instance_reference(&x, &error), ATTN_OK, &error, "merge: reference");
    test_tensor absolute_v = test_tensor_new(c.B, c.Tk, c.Hkv, c.Dv, c.layout);
    test_tensor absolute_out = test_tensor_new(c.B, c.Tq, c.Hq, c.Dv, TEST_LAYOUT_BTHD);
    for (int64_t n = 0; n < x.v.allocation_floats; ++n) absolute_v.allocation[n] = fabsf(x.v.allocation[n]);
    CHECK_STATUS(attn_reference_forward(&x.q.view, &x.k.view, &absolute_v.view, &x.options,
                                        &absolute_out.view, NULL, &error),
                 ATTN_OK, &error, "merge: reference on |V|");
    test_half_tensor parts[2] = {test_half_like(&x.out, dtype, 0x7bcd), test_half_like(&x.out, dtype, 0x7bcd)};
    test_half_tensor merged = test_half_like(&x.out, dtype, 0x7bcd);
    const int64_t lse_shape[3] = {c.B, c.Hq, c.Tq};
    test_tensor part_lse[2] = {test_tensor_new_shape(3, lse_shape), test_tensor_new_shape(3, lse_shape)};
    test_tensor merged_lse = test_tensor_new_shape(3, lse_shape);
    const int64_t half_keys = c.Tk / 2;
    const attn_execution execution = x.execution;
    for (int s = 0; s < 2; ++s) {
        attn_tensor ks = k.view, vs = v.view;
        ks.shape[1] = vs.shape[1] = s == 0 ? half_keys : c.Tk - half_keys;
        if (s == 1) {
            ks.data = (uint16_t *)ks.data + half_keys * ks.stride[1];
            vs.data = (uint16_t *)vs.data + half_keys * vs.stride[1];
        }
        CHECK_STATUS(attn_forward(&q.view, &ks, &vs, &x.options, &parts[s].view, &part_lse[s].view,
                                  &execution, &error),
                     ATTN_OK, &error, "merge %s: partial %d", type, s);
    }
    const attn_tensor *outs[2] = {&parts[0].view, &parts[1].view};
    const attn_tensor *lses[2] = {&part_lse[0].view, &part_lse[1].view};
    CHECK_STATUS(attn_merge(2, outs, lses, &merged.view, &merged_lse.view, &error), ATTN_OK, &error,
                 "merge %s: attn_merge", type);
    const double scale = 1.0 / sqrt((double)c.Dk);
    const double unit = dtype == ATTN_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    const double logit_error = logit_error_bound(&x, &c, scale);
    int failures = 0;
    double worst = 0.0;
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.Tq; ++i)
            for (int64_t h = 0; h < c.Hq; ++h)
                for (int64_t e = 0; e < c.Dv; ++e) {
                    const double expected = test_get4(&x.out_reference.view, b, i, h, e);
                    const double got = test_half_to_double(test_half_bits4(&merged.view, b, i, h, e), dtype);
                    const double bound = unit * fabs(expected) + c.Tk * ldexp(1.0, -25) * 4 +
                                         (2 * unit + 2.1 * logit_error + 1e-5) *
                                             test_get4(&absolute_out.view, b, i, h, e);
                    failures += !(fabs(got - expected) <= bound);
                    if (bound > 0 && fabs(got - expected) / bound > worst) worst = fabs(got - expected) / bound;
                }
    CHECK(failures == 0, "merge %s: two 16-bit partials merged within the bound (worst %.2f of it)",
          type, worst);
    CHECK(test_max_relative_error(&merged_lse.view, &x.lse_reference.view) <= 1e-5,
          "merge %s: merged LSE (fp32) = the reference's", type);
    /* one partial of another dtype */
    parts[1].view.dtype = dtype == ATTN_DTYPE_BF16 ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
    const attn_status status = attn_merge(2, outs, lses, &merged.view, &merged_lse.view, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "merge %s: mixed dtypes", type);
    CHECK(strstr(error.message, "outs[1].dtype") != NULL, "message names outs[1]: %s", error.message);
    for (int s = 0; s < 2; ++s) {
        free(parts[s].allocation);
        test_tensor_free(&part_lse[s]);
    }
    free(merged.allocation);
    test_tensor_free(&merged_lse);
    test_tensor_free(&absolute_v);
    test_tensor_free(&absolute_out);
    free(q.allocation);
    free(k.allocation);
    free(v.allocation);
    forward_instance_free(&x);
}

/* A key that no query attends (all-false mask column, or -inf bias column) whose values are
 * NaN or inf: O is bitwise the O with those values 0, for every registry, both dtypes. */
static void test_dead_values(attn_dtype dtype) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
    enum { T = 40, DEAD = 13, D = 16 };
    const forward_case c = {.name = "dead", .B = 1, .Tq = T, .Tk = T, .Hq = 2, .Hkv = 1, .Dk = D, .Dv = D};
    forward_instance x;
    forward_instance_build(&x, &c, 5);
    test_half_tensor q = test_half_round(&x.q, dtype), k = test_half_round(&x.k, dtype),
                v = test_half_round(&x.v, dtype);
    static uint8_t mask[T * T];
    static float bias[T * T];
    for (int n = 0; n < T * T; ++n) {
        mask[n] = n % T != DEAD;
        bias[n] = n % T == DEAD ? -INFINITY : 0.0f;
    }
    const int64_t pair_shape[4] = {1, 1, T, T};
    attn_tensor mask_view = attn_tensor_contiguous(mask, ATTN_DTYPE_BOOL, 4, pair_shape);
    attn_tensor bias_view = attn_tensor_contiguous(bias, ATTN_DTYPE_F32, 4, pair_shape);
    const uint16_t poison[2] = {dtype == ATTN_DTYPE_BF16 ? 0x7fc0 : 0x7e00,
                                dtype == ATTN_DTYPE_BF16 ? 0x7f80 : 0x7c00}; /* NaN, inf */
    for (int rc = 0; rc < RUNNER_COUNT; ++rc) {
        if (!runner_available(runners[rc], dtype)) continue;
        const char *name = runner_name(runners[rc]);
        for (int by_bias = 0; by_bias < 2; ++by_bias) {
            attn_options options = x.options;
            attn_execution execution = x.execution;
            if (by_bias) options.bias = &bias_view;
            else options.mask = &mask_view;
            test_half_tensor clean = test_half_like(&x.out, dtype, 0x7bcd), poisoned = test_half_like(&x.out, dtype, 0x7bcd);
            attn_error error = {0};
            for (int e = 0; e < D; ++e) ((uint16_t *)v.view.data)[DEAD * v.view.stride[1] + e] = 0;
            CHECK_STATUS(forward_with(runners[rc], &q.view, &k.view, &v.view, &options, &clean.view, NULL, execution, &error),
                         ATTN_OK, &error, "dead %s [%s]: zero values", type, name);
            int differences = 0;
            for (int p = 0; p < 2; ++p) {
                for (int e = 0; e < D; ++e)
                    ((uint16_t *)v.view.data)[DEAD * v.view.stride[1] + e] = poison[(e + p) % 2];
                CHECK_STATUS(forward_with(runners[rc], &q.view, &k.view, &v.view, &options, &poisoned.view, NULL,
                                          execution, &error),
                             ATTN_OK, &error, "dead %s [%s]: poisoned values", type, name);
                differences += memcmp(clean.allocation, poisoned.allocation,
                                      (size_t)x.out.allocation_floats * sizeof(uint16_t)) != 0;
            }
            CHECK(differences == 0, "%s [%s]: NaN / inf values of a key masked by %s stay out of O",
                  type, name, by_bias ? "a -inf bias column" : "a false mask column");
            free(clean.allocation);
            free(poisoned.allocation);
        }
    }
    free(q.allocation);
    free(k.allocation);
    free(v.allocation);
    forward_instance_free(&x);
}

int main(void) {
    for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) {
        run_case(&cases[n], ATTN_DTYPE_BF16, 1000 + n);
        run_case(&cases[n], ATTN_DTYPE_F16, 2000 + n);
    }
    test_packing_modes(ATTN_DTYPE_BF16);
    test_packing_modes(ATTN_DTYPE_F16);
    test_dead_values(ATTN_DTYPE_BF16);
    test_dead_values(ATTN_DTYPE_F16);
    test_merge(ATTN_DTYPE_BF16);
    test_merge(ATTN_DTYPE_F16);
    test_errors();
    test_fp16_overflow();
    return test_finish();
}
