/*
 * test_robustness_extremes.c — arguments that must be refused before anything is written, and
 * integers at the edge of int64: a caller-owned cache is byte-for-byte unchanged after an
 * option error (window, soft-cap, ALiBi slope); attn_tensor_convert refuses overlapping
 * source and destination; a stride of INT64_MIN, a cache read past INT64_MAX and a cache of
 * capacity or page size near INT64_MAX are refused with messages naming the argument (run
 * clean under UBSan: no integer expression overflows on the way).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* One contiguous float32 cache [1, 8, 1, 4] holding 2 tokens, one appended row, one query. */
static void test_kvcache_options_checked_before_append(void) {
    enum { S = 8, D = 4 };
    float k_cache[S * D], v_cache[S * D], k_new[D], v_new[D], q[D], out[D];
    for (int i = 0; i < S * D; ++i) k_cache[i] = (float)i, v_cache[i] = (float)(100 + i);
    for (int i = 0; i < D; ++i) k_new[i] = 7.0f, v_new[i] = -7.0f, q[i] = 0.25f * (float)i;
    float k_before[S * D], v_before[S * D];
    memcpy(k_before, k_cache, sizeof k_cache);
    memcpy(v_before, v_cache, sizeof v_cache);
    attn_tensor kc = attn_tensor_f32_4d(k_cache, 1, S, 1, D);
    attn_tensor vc = attn_tensor_f32_4d(v_cache, 1, S, 1, D);
    attn_tensor kn = attn_tensor_f32_4d(k_new, 1, 1, 1, D);
    attn_tensor vn = attn_tensor_f32_4d(v_new, 1, 1, 1, D);
    attn_tensor qt = attn_tensor_f32_4d(q, 1, 1, 1, D);
    attn_tensor ot = attn_tensor_f32_4d(out, 1, 1, 1, D);
    const int32_t seqlens[1] = {2};
    attn_kv_cache_view cache = {0};
    cache.k_cache = &kc, cache.v_cache = &vc, cache.cache_seqlens = seqlens;
    attn_kv_append append = {&kn, &vn, NULL, NULL, ATTN_ROPE_HALF};
    const float nan_slope[1] = {NAN};

    for (int variant = 0; variant < 4; ++variant) {
        attn_options options = attn_options_default();
        options.causal = 1;
        options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
        const char *what = "";
        const char *named = "";
        switch (variant) {
        case 0:
            options.window = 1, options.window_left = -2, options.window_right = 0;
            what = "window_left = -2", named = "options.window_left = -2";
            break;
        case 1:
            options.softcap = -1.0f;
            what = "softcap = -1", named = "options.softcap = -1";
            break;
        case 2:
            options.alibi = 1, options.alibi_slopes = nan_slope;
            what = "a NaN ALiBi slope", named = "options.alibi_slopes[0] = nan";
            break;
        default:
            options.alignment = ATTN_ALIGN_UNSET;
            what = "causal without an alignment", named = "options.alignment";
            break;
        }
        attn_error error = {0};
        const attn_status status =
            attn_forward_with_kvcache(&qt, &cache, &append, &options, &ot, NULL, NULL, &error);
        CHECK(status == ATTN_ERROR_INVALID_ARGUMENT, "kvcache with %s: INVALID_ARGUMENT (got %d: %s)",
              what, (int)status, error.message);
        CHECK(strstr(error.message, named) != NULL, "kvcache with %s: the message names %s (%s)",
              what, named, error.message);
        CHECK(memcmp(k_cache, k_before, sizeof k_cache) == 0 &&
                  memcmp(v_cache, v_before, sizeof v_cache) == 0,
              "kvcache with %s: k_cache and v_cache are byte-for-byte unchanged", what);
    }
    /* The same call with valid options appends row 2 (the check above is not vacuous). */
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_error error = {0};
    CHECK_STATUS(attn_forward_with_kvcache(&qt, &cache, &append, &options, &ot, NULL, NULL, &error),
                 ATTN_OK, &error, "kvcache with valid options");
    CHECK(k_cache[2 * D] == 7.0f && v_cache[2 * D] == -7.0f,
          "kvcache with valid options: the new row is at token 2");
}

/* A head dim above 2^20 is refused before the append (the attention refuses it after). */
static void test_kvcache_head_dim_before_append(void) {
    const int64_t D = ((int64_t)1 << 20) + 1;
    float *k_cache = calloc((size_t)D, sizeof(float)), *v_cache = calloc((size_t)D, sizeof(float));
    float *k_new = malloc((size_t)D * sizeof(float)), *q = calloc((size_t)D, sizeof(float));
    float *out = malloc((size_t)D * sizeof(float));
    if (!k_cache || !v_cache || !k_new || !q || !out) {
        CHECK(0, "memory for the head-dim case");
        free(k_cache), free(v_cache), free(k_new), free(q), free(out);
        return;
    }
    for (int64_t e = 0; e < D; ++e) k_new[e] = 7.0f;
    attn_tensor kc = attn_tensor_f32_4d(k_cache, 1, 1, 1, D);
    attn_tensor vc = attn_tensor_f32_4d(v_cache, 1, 1, 1, D);
    attn_tensor kn = attn_tensor_f32_4d(k_new, 1, 1, 1, D);
    attn_tensor qt = attn_tensor_f32_4d(q, 1, 1, 1, D);
    attn_tensor ot = attn_tensor_f32_4d(out, 1, 1, 1, D);
    const int32_t seqlens[1] = {0};
    attn_kv_cache_view cache = {0};
    cache.k_cache = &kc, cache.v_cache = &vc, cache.cache_seqlens = seqlens;
    attn_kv_append append = {&kn, &kn, NULL, NULL, ATTN_ROPE_HALF};
    attn_error error = {0};
    const attn_status status =
        attn_forward_with_kvcache(&qt, &cache, &append, NULL, &ot, NULL, NULL, &error);
    CHECK(status == ATTN_ERROR_INVALID_ARGUMENT && strstr(error.message, "1048577") != NULL,
          "kvcache with Dk = 2^20 + 1: INVALID_ARGUMENT naming it (%d: %s)", (int)status,
          error.message);
    int untouched = 1;
    for (int64_t e = 0; e < D; ++e) untouched &= k_cache[e] == 0.0f && v_cache[e] == 0.0f;
    CHECK(untouched, "kvcache with Dk = 2^20 + 1: the cache is unchanged");
    free(k_cache), free(v_cache), free(k_new), free(q), free(out);
}

/* A caller's page pool whose page_size (k_cache.shape[1], token stride 0) is INT64_MAX: the
 * capacity overflows, and the message names page_size with its value. */
static void test_kvcache_page_size_named(void) {
    float pool[4] = {0}, q[4] = {0}, out[4];
    attn_tensor kc = attn_tensor_f32_4d(pool, 1, INT64_MAX, 1, 4);
    kc.stride[1] = 0;
    attn_tensor vc = kc;
    const int32_t pages[2] = {0, 0};
    const int64_t table_shape[2] = {1, 2};
    attn_tensor table = attn_tensor_contiguous((void *)pages, ATTN_DTYPE_I32, 2, table_shape);
    attn_tensor qt = attn_tensor_f32_4d(q, 1, 1, 1, 4), ot = attn_tensor_f32_4d(out, 1, 1, 1, 4);
    const int32_t seqlens[1] = {1};
    attn_kv_cache_view cache = {0};
    cache.k_cache = &kc, cache.v_cache = &vc, cache.block_table = &table;
    cache.cache_seqlens = seqlens;
    attn_error error = {0};
    const attn_status status =
        attn_forward_with_kvcache(&qt, &cache, NULL, NULL, &ot, NULL, NULL, &error);
    CHECK(status == ATTN_ERROR_OVERFLOW &&
              strstr(error.message, "page_size) = 9223372036854775807") != NULL,
          "page_size = INT64_MAX with 2 pages a sequence: OVERFLOW naming page_size (%d: %s)",
          (int)status, error.message);
}

static void test_convert_overlap(void) {
    float data[9];
    for (int i = 0; i < 9; ++i) data[i] = (float)(i + 1);
    const int64_t shape[1] = {8};
    attn_tensor source = attn_tensor_contiguous(data, ATTN_DTYPE_F32, 1, shape);
    attn_tensor destination = attn_tensor_contiguous(data + 1, ATTN_DTYPE_F32, 1, shape);
    attn_error error = {0};
    attn_status status = attn_tensor_convert(&source, &destination, &error);
    CHECK(status == ATTN_ERROR_INVALID_ARGUMENT,
          "convert into the source shifted by one element: INVALID_ARGUMENT (got %d)", (int)status);
    CHECK(strstr(error.message, "destination") != NULL && strstr(error.message, "source") != NULL,
          "the overlap message names destination and source (%s)", error.message);
    int untouched = 1;
    for (int i = 0; i < 9; ++i) untouched &= data[i] == (float)(i + 1);
    CHECK(untouched, "a refused overlapping convert writes nothing");

    /* float32 into bfloat16 in the same buffer's other half: disjoint, allowed. */
    float halves[8] = {1, 2, 3, 4, 0, 0, 0, 0};
    const int64_t four[1] = {4};
    attn_tensor from = attn_tensor_contiguous(halves, ATTN_DTYPE_F32, 1, four);
    attn_tensor to = attn_tensor_contiguous(halves + 4, ATTN_DTYPE_BF16, 1, four);
    CHECK_STATUS(attn_tensor_convert(&from, &to, &error), ATTN_OK, &error,
                 "convert into disjoint memory of the same buffer");
    const uint16_t *bits = (const uint16_t *)(halves + 4);
    CHECK(bits[0] == 0x3f80 && bits[1] == 0x4000 && bits[2] == 0x4040 && bits[3] == 0x4080,
          "1 2 3 4 in bfloat16 are 0x3f80 0x4000 0x4040 0x4080");

    /* Interleaved views that never meet (even and odd elements): allowed. */
    float pairs[8] = {1, 0, 2, 0, 3, 0, 4, 0};
    attn_tensor even = attn_tensor_contiguous(pairs, ATTN_DTYPE_F32, 1, four);
    attn_tensor odd = attn_tensor_contiguous(pairs + 1, ATTN_DTYPE_F32, 1, four);
    even.stride[0] = 2, odd.stride[0] = 2;
    CHECK_STATUS(attn_tensor_convert(&even, &odd, &error), ATTN_OK, &error,
                 "convert between interleaved views");
    CHECK(pairs[1] == 1 && pairs[3] == 2 && pairs[5] == 3 && pairs[7] == 4,
          "interleaved convert copies 1 2 3 4");
    /* The same with a leading dimension of size 1 whose stride is INT64_MAX (allowed: it is
     * never stepped; the overlap search must not form its byte stride). */
    const int64_t one_by_four[2] = {1, 4};
    float again[8] = {5, 0, 6, 0, 7, 0, 8, 0};
    attn_tensor even2 = attn_tensor_contiguous(again, ATTN_DTYPE_F32, 2, one_by_four);
    attn_tensor odd2 = attn_tensor_contiguous(again + 1, ATTN_DTYPE_F32, 2, one_by_four);
    even2.stride[0] = odd2.stride[0] = INT64_MAX, even2.stride[1] = odd2.stride[1] = 2;
    CHECK_STATUS(attn_tensor_convert(&even2, &odd2, &error), ATTN_OK, &error,
                 "convert between interleaved views with a size-1 dimension of stride INT64_MAX");
    CHECK(again[1] == 5 && again[3] == 6 && again[5] == 7 && again[7] == 8,
          "interleaved convert with a size-1 INT64_MAX stride copies 5 6 7 8");
}

static void test_tensor_check_extremes(void) {
    float data[4] = {0};
    attn_tensor t = attn_tensor_f32_4d(data, 1, 2, 1, 2);
    t.stride[1] = INT64_MIN;
    attn_error error = {0};
    float out[4];
    attn_tensor other = attn_tensor_f32_4d(out, 1, 2, 1, 2);
    attn_status status = attn_forward(&t, &other, &other, NULL, &other, NULL, NULL, &error);
    CHECK(status == ATTN_ERROR_OVERFLOW, "q.stride[1] = INT64_MIN: OVERFLOW (got %d)", (int)status);
    CHECK(strstr(error.message, "q") == error.message && strstr(error.message, "shape[1]") != NULL,
          "the stride message names q's dimension 1 (%s)", error.message);

    /* A huge stride on dimension 0 and a small one on 3: the message names dimension 0. */
    attn_tensor huge = attn_tensor_f32_4d(data, 2, 1, 1, 2);
    huge.stride[0] = INT64_MAX / 2;
    status = attn_forward(&huge, &other, &other, NULL, &other, NULL, NULL, &error);
    CHECK(status == ATTN_ERROR_OVERFLOW, "q.stride[0] = INT64_MAX / 2: OVERFLOW (got %d)",
          (int)status);
    CHECK(strstr(error.message, "shape[0]") != NULL && strstr(error.message, "shape[3]") == NULL,
          "the span message names dimension 0, whose stride is huge (%s)", error.message);
}

static void test_cache_extremes(void) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1, config.kv_heads = 1, config.key_dim = 4, config.value_dim = 4;
    config.capacity = 8;
    attn_kv_cache *cache = NULL;
    attn_error error = {0};
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "small cache");
    float rows[5 * 4];
    for (int i = 0; i < 20; ++i) rows[i] = (float)i;
    attn_tensor k = attn_tensor_f32_4d(rows, 1, 5, 1, 4);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k, &k, &error), ATTN_OK, &error, "append 5");
    /* first_token + count passes INT64_MAX: refused, the message shows the given value. */
    attn_status status = attn_kv_cache_read(cache, 0, INT64_MAX - 1, &k, &k, &error);
    CHECK(status == ATTN_ERROR_INVALID_ARGUMENT, "read from INT64_MAX - 1: INVALID_ARGUMENT (got %d)",
          (int)status);
    CHECK(strstr(error.message, "first_token = 9223372036854775806") != NULL,
          "the read message names first_token as given (%s)", error.message);
    attn_kv_cache_destroy(cache);

    /* Capacity and page size near INT64_MAX: refused, naming them. */
    const int64_t page_sizes[3] = {0, 2, INT64_MAX};
    const int64_t capacities[3] = {INT64_MAX, INT64_MAX - 1, 16};
    for (int n = 0; n < 3; ++n) {
        config.capacity = capacities[n], config.page_size = page_sizes[n];
        cache = NULL;
        status = attn_kv_cache_create(&config, &cache, &error);
        CHECK(status != ATTN_OK && cache == NULL,
              "capacity %lld, page_size %lld: refused (status %d)", (long long)capacities[n],
              (long long)page_sizes[n], (int)status);
        const char *named = n == 2 ? "page_size = 9223372036854775807" : "capacity";
        CHECK(strstr(error.message, named) != NULL,
              "capacity %lld, page_size %lld: the message names %s (%s)", (long long)capacities[n],
              (long long)page_sizes[n], named, error.message);
        attn_kv_cache_destroy(cache);
    }
    /* A head dim above 2^20 is refused, as everywhere else. */
    config.capacity = 1, config.page_size = 0, config.key_dim = ((int64_t)1 << 20) + 1;
    cache = NULL;
    status = attn_kv_cache_create(&config, &cache, &error);
    CHECK(status == ATTN_ERROR_INVALID_ARGUMENT && strstr(error.message, "key_dim = 1048577"),
          "key_dim = 2^20 + 1: INVALID_ARGUMENT naming it (status %d: %s)", (int)status,
          error.message);
    attn_kv_cache_destroy(cache);
}

int main(void) {
    test_kvcache_options_checked_before_append();
    test_kvcache_head_dim_before_append();
    test_kvcache_page_size_named();
    test_convert_overlap();
    test_tensor_check_extremes();
    test_cache_extremes();
    return test_finish();
}
