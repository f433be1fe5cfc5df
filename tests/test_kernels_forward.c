/*
 * test_kernels_forward.c — attn_forward run with execution.kernel = each kernel family this
 * CPU supports (generic, AVX2, AVX-512), against attn_reference_forward on a table of shapes
 * and masks (max relative error ≤ 1e-5 on O and LSE), and bitwise invariance of O and LSE
 * to the thread count (1, 2, 3) for every kernel. Unsupported families must be refused with
 * ATTN_ERROR_UNSUPPORTED.
 */
#include <math.h>
#include <string.h>

#include "kernels/registry.h"
#include "test_support.h"

typedef enum mask_kind { MASK_NONE, MASK_CAUSAL, MASK_WINDOW, MASK_SOFTCAP_CAUSAL } mask_kind;

typedef struct forward_case {
    int64_t batch, query_length, key_length, query_heads, kv_heads, key_dim, value_dim;
    mask_kind mask;
} forward_case;

static const forward_case cases[] = {
    {1, 1, 1, 1, 1, 1, 1, MASK_NONE},
    {1, 17, 17, 2, 2, 16, 16, MASK_NONE},
    {2, 65, 65, 4, 2, 64, 64, MASK_CAUSAL},
    {1, 129, 129, 8, 2, 128, 128, MASK_CAUSAL},
    {1, 200, 200, 4, 1, 64, 64, MASK_WINDOW},
    {1, 63, 130, 3, 3, 17, 33, MASK_CAUSAL},   /* Tq < Tk, Dk != Dv, odd dims */
    {1, 96, 64, 2, 1, 80, 80, MASK_NONE},      /* Tq > Tk */
    {1, 70, 70, 2, 2, 96, 96, MASK_SOFTCAP_CAUSAL},
    {1, 33, 33, 2, 1, 576, 512, MASK_CAUSAL},  /* MLA-sized heads */
    {1, 257, 257, 2, 2, 3, 5, MASK_WINDOW},
};

static const attn_kernel_choice kernels[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX2,
                                             ATTN_KERNEL_AVX512};
static const char *kernel_names[] = {"generic", "avx2", "avx512"};

static attn_execution execution_for(attn_kernel_choice kernel, int threads) {
    attn_execution execution = attn_execution_default();
    execution.kernel = kernel;
    execution.num_threads = threads;
    return execution;
}

static attn_options options_for(mask_kind mask) {
    attn_options options = attn_options_default();
    if (mask != MASK_NONE) {
        options.causal = 1;
        options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    }
    if (mask == MASK_WINDOW) {
        options.window = 1;
        options.window_left = 40;
        options.window_right = 0;
    }
    if (mask == MASK_SOFTCAP_CAUSAL) options.softcap = 5.0f;
    return options;
}

static test_tensor new_lse(int64_t batch, int64_t heads, int64_t length) {
    const int64_t shape[3] = {batch, heads, length};
    return test_tensor_new_shape(3, shape);
}

static void test_case(const forward_case *c, int case_index, test_rng *rng) {
    test_tensor q = test_tensor_new(c->batch, c->query_length, c->query_heads, c->key_dim,
                                    TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(c->batch, c->key_length, c->kv_heads, c->key_dim,
                                    case_index % 2 ? TEST_LAYOUT_BHTD : TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->batch, c->key_length, c->kv_heads, c->value_dim,
                                    case_index % 3 == 2 ? TEST_LAYOUT_PADDED : TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, rng, 1.5f);
    test_tensor_fill_normal(&k, rng, 1.5f);
    test_tensor_fill_normal(&v, rng, 1.0f);
    test_tensor expected = test_tensor_new(c->batch, c->query_length, c->query_heads,
                                           c->value_dim, TEST_LAYOUT_BTHD);
    test_tensor expected_lse = new_lse(c->batch, c->query_heads, c->query_length);
    attn_error error;
    const attn_options options = options_for(c->mask);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options,
                                        &expected.view, &expected_lse.view, &error),
                 ATTN_OK, &error, "reference case %d", case_index);

    for (int kernel = 0; kernel < 3; ++kernel) {
        if (!attn_cpu_supports(kernels[kernel])) {
            const attn_execution execution = execution_for(kernels[kernel], 1);
            test_tensor out = test_tensor_new(c->batch, c->query_length, c->query_heads,
                                              c->value_dim, TEST_LAYOUT_BTHD);
            CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, NULL,
                                      &execution, &error),
                         ATTN_ERROR_UNSUPPORTED, &error, "%s not supported", kernel_names[kernel]);
            test_tensor_free(&out);
            continue;
        }
        test_tensor outs[3], lses[3];
        const int thread_counts[3] = {1, 2, 3};
        for (int t = 0; t < 3; ++t) {
            const attn_execution execution = execution_for(kernels[kernel], thread_counts[t]);
            outs[t] = test_tensor_new(c->batch, c->query_length, c->query_heads, c->value_dim,
                                      TEST_LAYOUT_BTHD);
            lses[t] = new_lse(c->batch, c->query_heads, c->query_length);
            test_tensor_fill_all(&outs[t], NAN);
            CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &outs[t].view,
                                      &lses[t].view, &execution, &error),
                         ATTN_OK, &error, "%s case %d threads %d", kernel_names[kernel],
                         case_index, thread_counts[t]);
        }
        const double out_error = test_max_relative_error(&outs[0].view, &expected.view);
        const double lse_error = test_max_relative_error(&lses[0].view, &expected_lse.view);
        CHECK(out_error <= 1e-5 && lse_error <= 1e-5,
              "%s case %d (T=%lld/%lld H=%lld/%lld D=%lld/%lld mask %d): O error %.3g, LSE %.3g",
              kernel_names[kernel], case_index, (long long)c->query_length,
              (long long)c->key_length, (long long)c->query_heads, (long long)c->kv_heads,
              (long long)c->key_dim, (long long)c->value_dim, (int)c->mask, out_error, lse_error);
        for (int t = 1; t < 3; ++t)
            CHECK(test_bitwise_equal(&outs[0].view, &outs[t].view) &&
                      test_bitwise_equal(&lses[0].view, &lses[t].view),
                  "%s case %d: threads %d differ bitwise from 1 thread", kernel_names[kernel],
                  case_index, thread_counts[t]);
        for (int t = 0; t < 3; ++t) test_tensor_free(&outs[t]), test_tensor_free(&lses[t]);
    }
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
    test_tensor_free(&expected), test_tensor_free(&expected_lse);
}

int main(void) {
    test_rng rng;
    test_rng_seed(&rng, 20240611);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) test_case(&cases[i], (int)i, &rng);
    return test_finish();
}
