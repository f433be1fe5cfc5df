/*
 * test_decode_prefill.c — decoding against a KV cache equals full attention
 * (docs/attention-math.md §10.6, §10.8): a causal prefill of T tokens computed by the naive reference equals a
 * prefill of T0 tokens through attn_decode followed by token-by-token decoding (row for row,
 * within 1e-5), and equals chunked prefill; for every mask option decoding supports, MHA / GQA
 * / MQA, Dk != Dv, contiguous and paged caches. Split-KV: every split size (1 split, 2, 3,
 * one token per split) gives the reference result, and the output is bitwise identical for
 * thread counts 1, 2 and 3.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct decode_case {
    const char *name;
    int64_t B, T, T0, Hq, Hkv, Dk, Dv;
    int64_t page_size;          /* 0 = contiguous */
    int64_t window_left;        /* -1 = none */
    int alibi;
    float softcap;
    float custom_scale;         /* 0 = default */
    int split_tokens;           /* execution.tile_k */
} decode_case;

static const decode_case decode_cases[] = {
    {"MHA contiguous", 2, 37, 5, 3, 3, 16, 16, 0, -1, 0, 0.0f, 0.0f, 0},
    {"GQA paged 16", 2, 41, 1, 8, 2, 32, 24, 16, -1, 0, 0.0f, 0.0f, 8},
    {"MQA paged 1", 1, 23, 3, 4, 1, 8, 8, 1, -1, 0, 0.0f, 0.0f, 5},
    {"window 7", 2, 40, 9, 4, 2, 16, 16, 16, 7, 0, 0.0f, 0.0f, 4},
    {"ALiBi", 1, 30, 4, 4, 4, 8, 12, 0, -1, 1, 0.0f, 0.0f, 7},
    {"soft-cap + scale", 2, 33, 2, 6, 3, 16, 16, 256, -1, 0, 5.0f, 0.7f, 0},
    {"window 0 (self only)", 1, 19, 3, 2, 1, 8, 8, 4, 0, 0, 0.0f, 0.0f, 3},
    {"D=128 GQA", 1, 70, 10, 8, 2, 128, 128, 16, -1, 0, 0.0f, 0.0f, 32},
};

/* Rows [first, first + count) of a [B, T, H, D] view. */
static attn_tensor rows_of(const attn_tensor *t, int64_t first, int64_t count) {
    attn_tensor view = *t;
    view.data = (float *)t->data + first * t->stride[1];
    view.shape[1] = count;
    return view;
}

static attn_options case_options(const decode_case *dc) {
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.window = 1;
    options.window_left = dc->window_left;
    options.window_right = -1;
    options.alibi = dc->alibi;
    options.softcap = dc->softcap;
    if (dc->custom_scale > 0) options.custom_scale = 1, options.scale = dc->custom_scale;
    return options;
}

static attn_execution case_execution(const decode_case *dc) {
    attn_execution execution = attn_execution_default();
    execution.tile_k = dc->split_tokens;
    return execution;
}

/* Max relative error between rows [first, first + count) of `expected` and `actual`
 * (actual holds exactly those rows). */
static double rows_error(const attn_tensor *expected, int64_t first, const attn_tensor *actual) {
    attn_tensor slice = rows_of(expected, first, actual->shape[1]);
    return test_max_relative_error(actual, &slice);
}

static void run_case(const decode_case *dc, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_tensor q = test_tensor_new(dc->B, dc->T, dc->Hq, dc->Dk, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(dc->B, dc->T, dc->Hkv, dc->Dk, TEST_LAYOUT_BHTD);
    test_tensor v = test_tensor_new(dc->B, dc->T, dc->Hkv, dc->Dv, TEST_LAYOUT_PADDED);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    attn_options options = case_options(dc);
    attn_execution execution = case_execution(dc);
    attn_error error;

    test_tensor expected = test_tensor_new(dc->B, dc->T, dc->Hq, dc->Dv, TEST_LAYOUT_BTHD);
    attn_status status = attn_reference_forward(&q.view, &k.view, &v.view, &options,
                                                &expected.view, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: reference", dc->name);

    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = dc->B, config.kv_heads = dc->Hkv;
    config.key_dim = dc->Dk, config.value_dim = dc->Dv;
    config.capacity = dc->T, config.page_size = dc->page_size;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s create",
                 dc->name);

    /* Prefill of T0 tokens, then one token at a time. */
    double worst = 0.0;
    for (int64_t first = 0; first < dc->T;) {
        const int64_t count = first == 0 ? dc->T0 : 1;
        attn_tensor k_new = rows_of(&k.view, first, count), v_new = rows_of(&v.view, first, count);
        attn_tensor q_new = rows_of(&q.view, first, count);
        status = attn_kv_cache_append(cache, 0, &k_new, &v_new, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s append at %lld", dc->name, (long long)first);
        test_tensor out = test_tensor_new(dc->B, count, dc->Hq, dc->Dv, TEST_LAYOUT_BHTD);
        status = attn_decode(cache, &q_new, &options, &out.view, NULL, &execution, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s decode at %lld", dc->name, (long long)first);
        double e = rows_error(&expected.view, first, &out.view);
        if (e > worst) worst = e;
        test_tensor_free(&out);
        first += count;
    }
    CHECK(worst <= 1e-5, "%s: prefill T0 = %lld + token-by-token = full prefill (err %.3g)",
          dc->name, (long long)dc->T0, worst);

    /* The full cache: every split size and thread count; LSE too. */
    test_tensor expected_lse_holder;
    const int64_t lse_shape[3] = {dc->B, dc->Hq, dc->T};
    expected_lse_holder = test_tensor_new_shape(3, lse_shape);
    attn_reference_forward(&q.view, &k.view, &v.view, &options, &expected.view,
                           &expected_lse_holder.view, &error);
    const int splits[4] = {(int)dc->T, (int)((dc->T + 1) / 2), (int)((dc->T + 2) / 3), 1};
    test_tensor first_out = test_tensor_new(dc->B, dc->T, dc->Hq, dc->Dv, TEST_LAYOUT_BTHD);
    for (int s = 0; s < 4; ++s) {
        for (int threads = 1; threads <= 3; ++threads) {
            attn_execution split_execution = case_execution(dc);
            split_execution.tile_k = splits[s];
            split_execution.num_threads = threads;
            test_tensor out = test_tensor_new(dc->B, dc->T, dc->Hq, dc->Dv, TEST_LAYOUT_BTHD);
            test_tensor lse = test_tensor_new_shape(3, lse_shape);
            status = attn_decode(cache, &q.view, &options, &out.view, &lse.view, &split_execution,
                                 &error);
            CHECK_STATUS(status, ATTN_OK, &error, "%s split %d", dc->name, splits[s]);
            double out_error = test_max_relative_error(&out.view, &expected.view);
            double lse_error = test_max_relative_error(&lse.view, &expected_lse_holder.view);
            if (threads == 1) {
                CHECK(out_error <= 1e-5 && lse_error <= 1e-5,
                      "%s: split size %d (of %lld keys) = reference: out %.3g lse %.3g",
                      dc->name, splits[s], (long long)dc->T, out_error, lse_error);
                memcpy(first_out.allocation, out.allocation,
                       (size_t)out.allocation_floats * sizeof(float));
            } else {
                CHECK(test_bitwise_equal(&out.view, &first_out.view),
                      "%s: split %d, %d threads bitwise = 1 thread", dc->name, splits[s], threads);
            }
            test_tensor_free(&out), test_tensor_free(&lse);
        }
    }
    test_tensor_free(&first_out), test_tensor_free(&expected_lse_holder);
    attn_kv_cache_destroy(cache);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&expected);
}

/* Chunked prefill: chunks of random sizes, each decoded as Tq = chunk rows. */
static void test_chunked_prefill(void) {
    const decode_case dc = {"chunked", 2, 57, 0, 4, 2, 16, 8, 16, 11, 0, 0.0f, 0.0f, 6};
    test_rng rng;
    test_rng_seed(&rng, 99);
    test_tensor q = test_tensor_new(dc.B, dc.T, dc.Hq, dc.Dk, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(dc.B, dc.T, dc.Hkv, dc.Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(dc.B, dc.T, dc.Hkv, dc.Dv, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    attn_options options = case_options(&dc);
    attn_execution execution = case_execution(&dc);
    attn_error error;
    test_tensor expected = test_tensor_new(dc.B, dc.T, dc.Hq, dc.Dv, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &expected.view, NULL,
                                        &error),
                 ATTN_OK, &error, "chunked reference");
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = dc.B, config.kv_heads = dc.Hkv, config.key_dim = dc.Dk;
    config.value_dim = dc.Dv, config.capacity = dc.T, config.page_size = dc.page_size;
    attn_kv_cache *cache = NULL;
    attn_kv_cache_create(&config, &cache, &error);
    double worst = 0.0;
    int chunks = 0;
    for (int64_t first = 0; first < dc.T; ++chunks) {
        int64_t count = test_rng_range(&rng, 1, 13);
        if (count > dc.T - first) count = dc.T - first;
        attn_tensor k_new = rows_of(&k.view, first, count), v_new = rows_of(&v.view, first, count);
        attn_tensor q_new = rows_of(&q.view, first, count);
        CHECK_STATUS(attn_kv_cache_append(cache, 0, &k_new, &v_new, &error), ATTN_OK, &error,
                     "chunk append");
        test_tensor out = test_tensor_new(dc.B, count, dc.Hq, dc.Dv, TEST_LAYOUT_BTHD);
        CHECK_STATUS(attn_decode(cache, &q_new, &options, &out.view, NULL, &execution, &error), ATTN_OK,
                     &error, "chunk decode");
        double e = rows_error(&expected.view, first, &out.view);
        if (e > worst) worst = e;
        test_tensor_free(&out);
        first += count;
    }
    CHECK(worst <= 1e-5, "chunked prefill in %d chunks = full prefill (err %.3g)", chunks, worst);
    attn_kv_cache_destroy(cache);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&expected);
}

int main(void) {
    for (size_t c = 0; c < sizeof decode_cases / sizeof decode_cases[0]; ++c)
        run_case(&decode_cases[c], 1000 + c);
    test_chunked_prefill();
    return test_finish();
}
