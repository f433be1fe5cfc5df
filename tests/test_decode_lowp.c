/*
 * test_decode_lowp.c — attn_decode with BF16 / F16 queries and output, against bf16, fp16 and
 * fp32 caches, for every registry the CPU runs: against attn_reference_forward (float64) on the
 * same values (the cache read back, the queries widened), with the forward's 16-bit bound
 * (tests/test_forward_lowp.c, docs/precision.md):
 *   |O - O_ref| <= u |O_ref| + (u + 2.1 L + 1e-5) A   (+ Tk * 2^-25 * max|v| for fp16)
 * u of the queries' type, A = sum_j p_j |v_j| / l (the reference on |V|), L the fp32 logit
 * error bound; GQA, paged and contiguous caches, several splits (execution.tile_k), causal
 * generation rows; bitwise identical for 1 and 2 threads; mixed q / out dtypes are refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "test_support.h"

typedef struct decode_case {
    const char *name;
    int64_t B, T, Tq, Hq, Hkv, Dk, Dv, page_size;
    attn_dtype cache_dtype;
    int split_tokens;
} decode_case;

static const decode_case cases[] = {
    {"bf16 cache, GQA, paged 16", 2, 150, 1, 8, 2, 64, 64, 16, ATTN_DTYPE_BF16, 0},
    {"fp16 cache, MQA, 3 rows", 1, 97, 3, 4, 1, 32, 24, 0, ATTN_DTYPE_F16, 32},
    {"fp32 cache, MHA", 2, 70, 2, 2, 2, 16, 16, 8, ATTN_DTYPE_F32, 0},
    {"bf16 cache, splits of 8", 1, 65, 1, 4, 2, 128, 128, 4, ATTN_DTYPE_BF16, 8},
};

static const attn_kernel_choice kernel_choices[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_GENERIC,
                                                    ATTN_KERNEL_AVX512_BF16, ATTN_KERNEL_AMX};

static void run_case(const decode_case *c, attn_dtype dtype, uint64_t seed) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
    const double unit = dtype == ATTN_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    test_rng rng;
    test_rng_seed(&rng, seed);
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = c->B, config.kv_heads = c->Hkv, config.key_dim = c->Dk;
    config.value_dim = c->Dv, config.dtype = c->cache_dtype, config.capacity = c->T;
    config.page_size = c->page_size;
    attn_kv_cache *cache = NULL;
    attn_error error = {0};
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s: cache", c->name);
    test_tensor k = test_tensor_new(c->B, c->T, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, TEST_LAYOUT_PADDED);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, &v.view, &error), ATTN_OK, &error,
                 "%s: append", c->name);
    /* what the cache holds, read back as fp32, and |V| */
    for (int64_t b = 0; b < c->B; ++b) {
        attn_tensor kb = k.view, vb = v.view;
        kb.data = (float *)k.view.data + b * k.view.stride[0];
        vb.data = (float *)v.view.data + b * v.view.stride[0];
        kb.shape[0] = vb.shape[0] = 1;
        CHECK_STATUS(attn_kv_cache_read(cache, b, 0, &kb, &vb, &error), ATTN_OK, &error, "read");
    }
    test_tensor absolute_v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    double v_max = 0.0;
    for (int64_t n = 0; n < v.allocation_floats; ++n) {
        absolute_v.allocation[n] = fabsf(v.allocation[n]);
        v_max = fmax(v_max, absolute_v.allocation[n]);
    }
    test_half_tensor q16 = test_half_round(&q, dtype);

    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    test_tensor expected = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor absolute = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &expected.view, NULL,
                                        &error),
                 ATTN_OK, &error, "%s: reference", c->name);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &absolute_v.view, &options,
                                        &absolute.view, NULL, &error),
                 ATTN_OK, &error, "%s: reference on |V|", c->name);
    const double scale = 1.0 / sqrt((double)c->Dk);
    const double largest_sum = test_largest_abs_dot(&q.view, &k.view);
    const double logit_error = (c->Dk + 2) * ldexp(scale * largest_sum, -24) +
                               ldexp(scale * largest_sum, -22);
    const double subnormal_p = dtype == ATTN_DTYPE_F16 ? c->T * ldexp(v_max, -25) : 0.0;

    for (size_t kc = 0; kc < sizeof kernel_choices / sizeof *kernel_choices; ++kc) {
        if (!attn_kernel_available(kernel_choices[kc])) continue;
        const char *name = attn_kernel_choice_name(kernel_choices[kc]);
        test_half_tensor out[2];
        for (int t = 0; t < 2; ++t) {
            out[t] = test_half_like(&expected, dtype, 0x7bcd);
            attn_execution execution = attn_execution_default();
            execution.kernel = kernel_choices[kc];
            execution.num_threads = t + 1;
            execution.tile_k = c->split_tokens;
            CHECK_STATUS(attn_decode(cache, &q16.view, &options, &out[t].view, NULL, &execution,
                                     &error),
                         ATTN_OK, &error, "%s %s [%s]: decode, %d threads", c->name, type, name, t + 1);
        }
        int failures = 0;
        double worst = 0.0;
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t i = 0; i < c->Tq; ++i)
                for (int64_t h = 0; h < c->Hq; ++h)
                    for (int64_t e = 0; e < c->Dv; ++e) {
                        const double reference = test_get4(&expected.view, b, i, h, e);
                        const double got = test_half_get4(&out[0].view, b, i, h, e);
                        const double bound = unit * fabs(reference) + subnormal_p +
                                             (unit + 2.1 * logit_error + 1e-5) *
                                                 test_get4(&absolute.view, b, i, h, e);
                        failures += !(fabs(got - reference) <= bound);
                        if (bound > 0 && fabs(got - reference) / bound > worst)
                            worst = fabs(got - reference) / bound;
                    }
        printf("%-28s %s %-12s O error <= %.2f of its bound\n", c->name, type, name, worst);
        CHECK(failures == 0, "%s %s [%s]: O within the 16-bit bound (%d outside, worst %.2f)",
              c->name, type, name, failures, worst);
        CHECK(memcmp(out[0].allocation, out[1].allocation,
                     (size_t)expected.allocation_floats * sizeof(uint16_t)) == 0,
              "%s %s [%s]: bitwise identical for 1 and 2 threads", c->name, type, name);
        for (int t = 0; t < 2; ++t) free(out[t].allocation);
    }
    /* q bf16 with a float32 out: refused, naming out */
    attn_status status = attn_decode(cache, &q16.view, &options, &expected.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "%s %s: float32 out", c->name, type);
    CHECK(strstr(error.message, "out.dtype") != NULL, "message names out.dtype: %s", error.message);

    free(q16.allocation);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&q), test_tensor_free(&absolute_v);
    test_tensor_free(&expected), test_tensor_free(&absolute);
    attn_kv_cache_destroy(cache);
}

int main(void) {
    for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) {
        run_case(&cases[n], ATTN_DTYPE_BF16, 700 + n);
        run_case(&cases[n], ATTN_DTYPE_F16, 800 + n);
    }
    return test_finish();
}
