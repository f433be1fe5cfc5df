/*
 * test_decode_kernels.c — every decode kernel table this CPU runs (generic, AVX2, AVX-512,
 * chosen with execution.kernel) equals attn_reference_decode (the naive double-precision
 * attention on the stored values) within 1e-5, over a table of shapes chosen to reach every
 * block and tail of the SIMD kernels: group sizes 1 to 32 (score blocks of 4 x 4, 2 x 8,
 * 1 x 16 and their row tails; value blocks of 4 rows and tails of 3, 2 and 1 rows), head
 * dims that are and are not multiples of the vector width, Dk != Dv, MLA's latent cache
 * (values inside the keys, Dk = 576, Dv = 512), chunks cut by pages and by the context's end,
 * fp32 / bf16 / fp16 storage (bf16 both converted through a buffer and, for groups of <= 4
 * rows, read in place as even / odd pairs, with dims that are not multiples of 32), the
 * large-group kernels (>= 12 rows: MQA with Hq / Hkv = 32 and 16, MLA with 33 and 128 heads,
 * in every storage type, with soft-cap and window), several
 * query rows per sequence, and the transformed-logit path (soft-cap, window). Each table's
 * output is bitwise identical for 1, 2 and 3 threads. Also: the error messages of
 * attn_decode and attn_reference_decode name the real sequence of an empty row.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct kernel_case {
    const char *name;
    int64_t B, Tq, Hq, Hkv, Dk, Dv;
    int values_in_keys;
    attn_dtype dtype;
    int64_t page_size;   /* 0 = contiguous */
    int64_t lengths[2];  /* tokens of sequences 0 and 1 (B <= 2) */
    float softcap;
    int64_t window_left; /* -1 = none */
} kernel_case;

static const kernel_case kernel_cases[] = {
    {"MHA D=128 f32", 1, 1, 4, 4, 128, 128, 0, ATTN_DTYPE_F32, 256, {300}, 0.0f, -1},
    {"GQA 4 D=128 bf16", 2, 1, 8, 2, 128, 128, 0, ATTN_DTYPE_BF16, 16, {131, 77}, 0.0f, -1},
    {"MQA 32 D=128 f32", 1, 1, 32, 1, 128, 128, 0, ATTN_DTYPE_F32, 0, {200}, 0.0f, -1},
    {"group 2, D=24/16", 2, 2, 4, 2, 24, 16, 0, ATTN_DTYPE_F32, 7, {65, 129}, 0.0f, -1},
    {"group 3, D=40/136", 1, 1, 6, 2, 40, 136, 0, ATTN_DTYPE_F16, 64, {190}, 0.0f, -1},
    {"group 5, Tq 3, D=20", 1, 3, 10, 2, 20, 20, 0, ATTN_DTYPE_BF16, 0, {100}, 0.0f, -1},
    {"group 8, soft-cap", 1, 2, 8, 1, 32, 32, 0, ATTN_DTYPE_F32, 32, {150}, 4.0f, -1},
    {"group 4, window 70", 2, 1, 4, 1, 64, 48, 0, ATTN_DTYPE_F32, 0, {250, 90}, 0.0f, 70},
    {"MLA latent 576/512 bf16", 1, 1, 16, 1, 576, 512, 1, ATTN_DTYPE_BF16, 64, {97}, 0.0f, -1},
    {"MLA latent 576/512 f32", 1, 2, 5, 1, 576, 512, 1, ATTN_DTYPE_F32, 0, {70}, 0.0f, -1},
    /* bf16 read in place by small groups (rows <= 4): 1, 2, 3 and 4 rows, dim tails. */
    {"MHA bf16 D=40/24", 2, 1, 3, 3, 40, 24, 0, ATTN_DTYPE_BF16, 16, {77, 140}, 0.0f, -1},
    {"group 2 bf16 D=136", 1, 1, 4, 2, 136, 136, 0, ATTN_DTYPE_BF16, 0, {200}, 0.0f, -1},
    {"MHA bf16 Tq 3 window", 1, 3, 2, 2, 32, 32, 0, ATTN_DTYPE_BF16, 32, {180}, 0.0f, 50},
    {"MLA latent bf16, 4 heads", 1, 1, 4, 1, 576, 512, 1, ATTN_DTYPE_BF16, 64, {130}, 0.0f, -1},
    {"group 4 bf16 D=72/40", 2, 1, 8, 2, 72, 40, 0, ATTN_DTYPE_BF16, 32, {150, 61}, 0.0f, -1},
    {"group 3 bf16 D=16/100", 1, 1, 6, 2, 16, 100, 0, ATTN_DTYPE_BF16, 0, {140}, 0.0f, -1},
    /* large groups (>= ATTN_DECODE_GROUP_ROWS rows): score_chunk_group / accumulate_chunk_group,
     * keys and values widened once per chunk; MQA at Hq / Hkv = 32 and 16 in every storage */
    {"MQA 32 D=128 bf16", 1, 1, 32, 1, 128, 128, 0, ATTN_DTYPE_BF16, 0, {300}, 0.0f, -1},
    {"MQA 32 D=128 f16 paged 48", 2, 1, 32, 1, 128, 128, 0, ATTN_DTYPE_F16, 48, {211, 64}, 0.0f, -1},
    {"group 16 D=128 f32", 2, 1, 32, 2, 128, 128, 0, ATTN_DTYPE_F32, 32, {170, 99}, 0.0f, -1},
    {"group 16 D=128 bf16", 1, 1, 32, 2, 128, 128, 0, ATTN_DTYPE_BF16, 16, {250}, 0.0f, -1},
    {"group 16 D=72/40 f16", 1, 1, 16, 1, 72, 40, 0, ATTN_DTYPE_F16, 0, {161}, 0.0f, -1},
    {"group 12 D=33/17 bf16", 1, 1, 12, 1, 33, 17, 0, ATTN_DTYPE_BF16, 8, {120}, 0.0f, -1},
    {"group 20 x Tq 2, soft-cap", 1, 2, 20, 1, 64, 64, 0, ATTN_DTYPE_F32, 32, {150}, 5.0f, -1},
    {"group 40 bf16, window 70", 2, 1, 40, 1, 48, 48, 0, ATTN_DTYPE_BF16, 0, {250, 90}, 0.0f, 70},
    {"MLA latent f16, 33 heads", 1, 1, 33, 1, 576, 512, 1, ATTN_DTYPE_F16, 0, {130}, 0.0f, -1},
    {"MLA latent bf16, 128 heads", 1, 1, 128, 1, 576, 512, 1, ATTN_DTYPE_BF16, 64, {100}, 0.0f, -1},
};

static const struct {
    attn_kernel_choice choice;
    const char *name;
} kernel_tables[] = {
    {ATTN_KERNEL_GENERIC, "generic"},
    {ATTN_KERNEL_AVX2, "avx2"},
    {ATTN_KERNEL_AVX512, "avx512"},
};

static attn_kv_cache *filled_cache(const kernel_case *kc, test_rng *rng) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = kc->B, config.kv_heads = kc->Hkv;
    config.key_dim = kc->Dk, config.value_dim = kc->Dv, config.values_in_keys = kc->values_in_keys;
    config.dtype = kc->dtype, config.page_size = kc->page_size;
    config.capacity = kc->lengths[0] > kc->lengths[1] ? kc->lengths[0] : kc->lengths[1];
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s: create",
                 kc->name);
    for (int64_t b = 0; b < kc->B; ++b) {
        test_tensor k = test_tensor_new(1, kc->lengths[b], kc->Hkv, kc->Dk, TEST_LAYOUT_BTHD);
        test_tensor v = test_tensor_new(1, kc->lengths[b], kc->Hkv, kc->Dv, TEST_LAYOUT_BTHD);
        test_tensor_fill_normal(&k, rng, 1.0f);
        test_tensor_fill_normal(&v, rng, 1.0f);
        CHECK_STATUS(attn_kv_cache_append(cache, b, &k.view, kc->values_in_keys ? NULL : &v.view,
                                          &error),
                     ATTN_OK, &error, "%s: append", kc->name);
        test_tensor_free(&k), test_tensor_free(&v);
    }
    return cache;
}

static void run_case(const kernel_case *kc, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    attn_kv_cache *cache = filled_cache(kc, &rng);
    test_tensor q = test_tensor_new(kc->B, kc->Tq, kc->Hq, kc->Dk, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.softcap = kc->softcap;
    options.window = 1;
    options.window_left = kc->window_left;
    attn_error error;
    const int64_t lse_shape[3] = {kc->B, kc->Hq, kc->Tq};
    test_tensor expected = test_tensor_new(kc->B, kc->Tq, kc->Hq, kc->Dv, TEST_LAYOUT_BTHD);
    test_tensor expected_lse = test_tensor_new_shape(3, lse_shape);
    CHECK_STATUS(attn_reference_decode(cache, &q.view, &options, &expected.view,
                                       &expected_lse.view, &error),
                 ATTN_OK, &error, "%s: reference", kc->name);

    for (size_t t = 0; t < sizeof kernel_tables / sizeof kernel_tables[0]; ++t) {
        test_tensor first = test_tensor_new(kc->B, kc->Tq, kc->Hq, kc->Dv, TEST_LAYOUT_BTHD);
        for (int threads = 1; threads <= 3; ++threads) {
            attn_execution execution = attn_execution_default();
            execution.tile_k = 96; /* several splits, not aligned with chunks or pages */
            execution.kernel = kernel_tables[t].choice;
            execution.num_threads = threads;
            test_tensor out = test_tensor_new(kc->B, kc->Tq, kc->Hq, kc->Dv, TEST_LAYOUT_BTHD);
            test_tensor lse = test_tensor_new_shape(3, lse_shape);
            attn_status status = attn_decode(cache, &q.view, &options, &out.view, &lse.view,
                                             &execution, &error);
            if (status == ATTN_ERROR_UNSUPPORTED) { /* this CPU or build lacks the table */
                test_tensor_free(&out), test_tensor_free(&lse);
                break;
            }
            CHECK_STATUS(status, ATTN_OK, &error, "%s (%s)", kc->name, kernel_tables[t].name);
            if (threads == 1) {
                const double out_error = test_max_relative_error(&out.view, &expected.view);
                const double lse_error = test_max_relative_error(&lse.view, &expected_lse.view);
                CHECK(out_error <= 1e-5 && lse_error <= 1e-5,
                      "%s (%s): decode = reference: out %.3g, lse %.3g", kc->name,
                      kernel_tables[t].name, out_error, lse_error);
                memcpy(first.allocation, out.allocation,
                       (size_t)out.allocation_floats * sizeof(float));
            } else {
                CHECK(test_bitwise_equal(&out.view, &first.view),
                      "%s (%s): %d threads bitwise = 1 thread", kc->name, kernel_tables[t].name,
                      threads);
            }
            test_tensor_free(&out), test_tensor_free(&lse);
        }
        test_tensor_free(&first);
    }
    attn_kv_cache_destroy(cache);
    test_tensor_free(&q), test_tensor_free(&expected), test_tensor_free(&expected_lse);
}

/* Sequence 1 holds 1 token and receives Tq = 2 queries under bottom-right causality: its
 * query row 0 sits at position -1 and sees no key. Both decode paths must name b = 1. */
static void test_error_names_the_sequence(void) {
    const kernel_case kc = {"empty row", 2, 2, 2, 1, 8, 8, 0, ATTN_DTYPE_F32, 4, {6, 1}, 0.0f, -1};
    test_rng rng;
    test_rng_seed(&rng, 99);
    attn_kv_cache *cache = filled_cache(&kc, &rng);
    test_tensor q = test_tensor_new(2, 2, 2, 8, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(2, 2, 2, 8, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.empty_rows = ATTN_EMPTY_ROWS_ERROR;
    attn_error error;
    CHECK_STATUS(attn_reference_decode(cache, &q.view, &options, &out.view, NULL, &error),
                 ATTN_ERROR_EMPTY_ROW, &error, "reference: empty row of sequence 1");
    CHECK(strstr(error.message, "b = 1,") != NULL && strstr(error.message, "b = 0") == NULL,
          "reference names b = 1: %s", error.message);
    CHECK_STATUS(attn_decode(cache, &q.view, &options, &out.view, NULL, NULL, &error),
                 ATTN_ERROR_EMPTY_ROW, &error, "decode: empty row of sequence 1");
    CHECK(strstr(error.message, "b = 1,") != NULL, "decode names b = 1: %s", error.message);
    attn_kv_cache_destroy(cache);
    test_tensor_free(&q), test_tensor_free(&out);
}

int main(void) {
    for (size_t c = 0; c < sizeof kernel_cases / sizeof kernel_cases[0]; ++c)
        run_case(&kernel_cases[c], 1000 + c);
    test_error_names_the_sequence();
    return test_finish();
}
