/*
 * test_cache_paged.c — the KV cache object (docs/attention-math.md §10.9): paged equals
 * contiguous for random interleaved appends (non-contiguous block tables), page sizes 1, 16 and 256,
 * lengths not multiple of the page, NaN in every free slot; prefix sharing with reference
 * counts and copy-on-write; truncate / reset returning pages; capacity and pool exhaustion
 * errors that write nothing; bf16 / fp16 storage against fp32 (measured error) and against
 * the reference on the rounded data; RoPE at append time; generic = AVX-512 kernels;
 * config validation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static const char *dtype_label(attn_dtype dtype) { return dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16"; }

enum { B = 3, HQ = 4, HKV = 2, DK = 24, DV = 16, CAPACITY = 300 };

static attn_kv_cache *new_cache(int64_t page_size, int64_t page_count, attn_dtype dtype) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = B, config.kv_heads = HKV, config.key_dim = DK, config.value_dim = DV;
    config.capacity = CAPACITY, config.page_size = page_size, config.page_count = page_count;
    config.dtype = dtype;
    attn_kv_cache *cache = NULL;
    attn_error error;
    attn_status status = attn_kv_cache_create(&config, &cache, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "create page_size %lld", (long long)page_size);
    return cache;
}

/* Rows [first, first + count) of sequence s of a [B, T, H, D] view, as [1, count, H, D]. */
static attn_tensor sequence_rows(const attn_tensor *t, int64_t s, int64_t first, int64_t count) {
    attn_tensor view = *t;
    view.data = (float *)t->data + s * t->stride[0] + first * t->stride[1];
    view.shape[0] = 1;
    view.shape[1] = count;
    return view;
}

/* A contiguous float32 [B, T, H, D] tensor of N(0, 1) values drawn from rng. */
static test_tensor random_tensor(test_rng *rng, int64_t batch, int64_t T, int64_t H, int64_t D) {
    test_tensor t = test_tensor_new(batch, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&t, rng, 1.0f);
    return t;
}

static attn_options decode_options(void) {
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    return options;
}

/* Splits that do not line up with pages, and the given kernel family. */
static attn_execution decode_execution(attn_kernel_choice kernel) {
    attn_execution execution = attn_execution_default();
    execution.tile_k = 50;
    execution.kernel = kernel;
    return execution;
}

/* Appends the same random interleaving of chunks (including a truncate and re-append) to
 * every cache; the final lengths are 300 - 1, 123, 17. */
static void fill_interleaved(attn_kv_cache **caches, int cache_count, const attn_tensor *k,
                             const attn_tensor *v, uint64_t seed) {
    const int64_t final_length[B] = {CAPACITY - 1, 123, 17};
    int64_t length[B] = {0, 0, 0};
    test_rng rng;
    test_rng_seed(&rng, seed);
    attn_error error;
    int truncated = 0;
    while (length[0] < final_length[0] || length[1] < final_length[1] ||
           length[2] < final_length[2]) {
        int64_t s = test_rng_range(&rng, 0, B - 1);
        if (length[s] == final_length[s]) continue;
        int64_t count = test_rng_range(&rng, 1, 20);
        if (count > final_length[s] - length[s]) count = final_length[s] - length[s];
        attn_tensor k_new = sequence_rows(k, s, length[s], count);
        attn_tensor v_new = sequence_rows(v, s, length[s], count);
        for (int c = 0; c < cache_count; ++c)
            CHECK_STATUS(attn_kv_cache_append(caches[c], s, &k_new, &v_new, &error), ATTN_OK,
                         &error, "interleaved append");
        length[s] += count;
        if (!truncated && s == 1 && length[1] > 40) { /* drop 25 tokens, append them again */
            length[1] -= 25;
            for (int c = 0; c < cache_count; ++c)
                CHECK_STATUS(attn_kv_cache_truncate(caches[c], 1, length[1], &error), ATTN_OK,
                             &error, "truncate");
            truncated = 1;
        }
    }
}

static void test_paged_equals_contiguous(void) {
    test_rng rng;
    test_rng_seed(&rng, 5);
    test_tensor k = random_tensor(&rng, B, CAPACITY, HKV, DK);
    test_tensor v = random_tensor(&rng, B, CAPACITY, HKV, DV);
    test_tensor q = random_tensor(&rng, B, 2, HQ, DK);
    attn_options options = decode_options();
    attn_execution execution = decode_execution(ATTN_KERNEL_AUTO);
    attn_error error;

    attn_kv_cache *contiguous = new_cache(0, 0, ATTN_DTYPE_F32);
    fill_interleaved(&contiguous, 1, &k.view, &v.view, 17);
    test_tensor expected = test_tensor_new(B, 2, HQ, DV, TEST_LAYOUT_BTHD);
    test_tensor reference = test_tensor_new(B, 2, HQ, DV, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_decode(contiguous, &q.view, &options, &expected.view, NULL, &execution, &error), ATTN_OK,
                 &error, "contiguous decode");
    CHECK_STATUS(attn_reference_decode(contiguous, &q.view, &options, &reference.view, NULL,
                                       &error),
                 ATTN_OK, &error, "reference decode");
    double error_vs_reference = test_max_relative_error(&expected.view, &reference.view);
    CHECK(error_vs_reference <= 1e-5, "contiguous decode = reference (%.3g)", error_vs_reference);

    const int64_t page_sizes[3] = {1, 16, 256};
    for (int p = 0; p < 3; ++p) {
        attn_kv_cache *paged = new_cache(page_sizes[p], 0, ATTN_DTYPE_F32);
        fill_interleaved(&paged, 1, &k.view, &v.view, 17);
        const int32_t *table;
        int64_t pages;
        int scattered = 0;
        attn_kv_cache_block_table(paged, 1, &table, &pages, &error);
        for (int64_t i = 1; i < pages; ++i) scattered |= table[i] != table[i - 1] + 1;
        CHECK(page_sizes[p] == 256 || scattered,
              "page size %lld: the block table of sequence 1 is not contiguous",
              (long long)page_sizes[p]);
        for (int kernel = 0; kernel < 2; ++kernel) {
            attn_execution kernel_execution =
                decode_execution(kernel == 0 ? ATTN_KERNEL_GENERIC : ATTN_KERNEL_AUTO);
            test_tensor out = test_tensor_new(B, 2, HQ, DV, TEST_LAYOUT_BHTD);
            CHECK_STATUS(attn_decode(paged, &q.view, &options, &out.view, NULL, &kernel_execution, &error),
                         ATTN_OK, &error, "paged decode");
            double e = test_max_relative_error(&out.view, &reference.view);
            CHECK(e <= 1e-5, "page size %lld (%s kernel): paged = reference (%.3g)",
                  (long long)page_sizes[p], kernel == 0 ? "generic" : "auto", e);
            test_tensor_free(&out);
        }
        attn_kv_cache_destroy(paged);
    }
    attn_kv_cache_destroy(contiguous);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&q);
    test_tensor_free(&expected), test_tensor_free(&reference);
}

/* Every slot outside the valid lengths is NaN, and reading valid slots never shows NaN. */
static void test_free_slots_are_nan(void) {
    test_rng rng;
    test_rng_seed(&rng, 8);
    test_tensor k = random_tensor(&rng, 1, 40, HKV, DK);
    test_tensor v = random_tensor(&rng, 1, 40, HKV, DV);
    attn_kv_cache *cache = new_cache(16, 0, ATTN_DTYPE_F32);
    attn_error error;
    attn_kv_cache_append(cache, 0, &k.view, &v.view, &error);
    attn_kv_cache_truncate(cache, 0, 21, &error);
    test_tensor back = test_tensor_new(1, 21, HKV, DK, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_kv_cache_read(cache, 0, 0, &back.view, NULL, &error), ATTN_OK, &error, "read");
    attn_tensor original = sequence_rows(&k.view, 0, 0, 21);
    CHECK(test_bitwise_equal(&back.view, &original), "read back = appended");
    /* Re-append after truncation: the dropped slots 21..31 of page 1 were NaN-filled; append
     * 5 and read 26. */
    attn_tensor more_k = sequence_rows(&k.view, 0, 0, 5), more_v = sequence_rows(&v.view, 0, 0, 5);
    attn_kv_cache_append(cache, 0, &more_k, &more_v, &error);
    test_tensor all = test_tensor_new(1, 26, HKV, DK, TEST_LAYOUT_BTHD);
    attn_kv_cache_read(cache, 0, 0, &all.view, NULL, &error);
    int finite = 1;
    for (int64_t i = 0; i < all.allocation_floats; ++i) finite &= isfinite(all.allocation[i]);
    CHECK(finite, "tokens written after a truncate are all finite");
    CHECK_STATUS(attn_kv_cache_read(cache, 0, 20, &all.view, NULL, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "read past the length");
    attn_kv_cache_destroy(cache);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&back), test_tensor_free(&all);
}

static void test_prefix_sharing(void) {
    test_rng rng;
    test_rng_seed(&rng, 9);
    test_tensor k = random_tensor(&rng, B, 80, HKV, DK);
    test_tensor v = random_tensor(&rng, B, 80, HKV, DV);
    attn_kv_cache *cache = new_cache(16, 12, ATTN_DTYPE_F32);
    attn_error error;
    attn_tensor prompt_k = sequence_rows(&k.view, 0, 0, 40), prompt_v = sequence_rows(&v.view, 0, 0, 40);
    attn_kv_cache_append(cache, 0, &prompt_k, &prompt_v, &error);
    CHECK(attn_kv_cache_free_pages(cache) == 9, "40 tokens in pages of 16 take 3 of 12 pages");
    CHECK_STATUS(attn_kv_cache_share_prefix(cache, 0, 1, 40, &error), ATTN_OK, &error, "share");
    CHECK(attn_kv_cache_free_pages(cache) == 8, "sharing 40 tokens copies only the partial page");
    const int32_t *table0, *table1;
    int64_t pages0, pages1;
    attn_kv_cache_block_table(cache, 0, &table0, &pages0, &error);
    attn_kv_cache_block_table(cache, 1, &table1, &pages1, &error);
    CHECK(pages1 == 3 && table0[0] == table1[0] && table0[1] == table1[1] && table0[2] != table1[2],
          "the two full pages are shared, the partial one is not");
    CHECK_STATUS(attn_kv_cache_share_prefix(cache, 0, 1, 10, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "destination not empty");

    /* Sequence 0 truncates into the shared page 1 and writes new tokens there: copy on write. */
    attn_kv_cache_truncate(cache, 0, 20, &error);
    attn_tensor new_k = sequence_rows(&k.view, 2, 0, 30), new_v = sequence_rows(&v.view, 2, 0, 30);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &new_k, &new_v, &error), ATTN_OK, &error, "cow");
    test_tensor back = test_tensor_new(1, 40, HKV, DK, TEST_LAYOUT_BTHD);
    attn_kv_cache_read(cache, 1, 0, &back.view, NULL, &error);
    CHECK(test_bitwise_equal(&back.view, &prompt_k), "sequence 1 keeps the shared prompt");
    test_tensor back0 = test_tensor_new(1, 30, HKV, DK, TEST_LAYOUT_BTHD);
    attn_kv_cache_read(cache, 0, 20, &back0.view, NULL, &error);
    CHECK(test_bitwise_equal(&back0.view, &new_k), "sequence 0 holds its new tokens");
    attn_kv_cache_block_table(cache, 0, &table0, &pages0, &error);
    attn_kv_cache_block_table(cache, 1, &table1, &pages1, &error);
    CHECK(table0[0] == table1[0] && table0[1] != table1[1], "page 1 was copied on write");

    /* Decoding over the shared pages = the reference on the same contents. */
    test_tensor q = random_tensor(&rng, B, 1, HQ, DK);
    attn_options options = decode_options();
    attn_execution execution = decode_execution(ATTN_KERNEL_AUTO);
    options.empty_rows = ATTN_EMPTY_ROWS_ZERO; /* sequence 2 is empty */
    test_tensor out = test_tensor_new(B, 1, HQ, DV, TEST_LAYOUT_BTHD);
    test_tensor expected = test_tensor_new(B, 1, HQ, DV, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_decode(cache, &q.view, &options, &out.view, NULL, &execution, &error), ATTN_OK, &error,
                 "decode shared");
    attn_reference_decode(cache, &q.view, &options, &expected.view, NULL, &error);
    double e = test_max_relative_error(&out.view, &expected.view);
    CHECK(e <= 1e-5, "decode over shared pages = reference (%.3g)", e);
    options.empty_rows = ATTN_EMPTY_ROWS_ERROR;
    CHECK_STATUS(attn_decode(cache, &q.view, &options, &out.view, NULL, &execution, &error),
                 ATTN_ERROR_EMPTY_ROW, &error, "empty sequence 2 under the error policy");
    CHECK(strstr(error.message, "b = 2") != NULL, "message names b = 2: %s", error.message);

    /* Freeing: truncating both to 0 returns every page. */
    attn_kv_cache_reset(cache);
    CHECK(attn_kv_cache_free_pages(cache) == 12, "reset returns all 12 pages (%lld)",
          (long long)attn_kv_cache_free_pages(cache));
    attn_kv_cache_destroy(cache);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&back), test_tensor_free(&back0);
    test_tensor_free(&q), test_tensor_free(&out), test_tensor_free(&expected);
}

static void test_capacity_errors(void) {
    test_tensor k = test_tensor_new(B, CAPACITY + 1, HKV, DK, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, CAPACITY + 1, HKV, DV, TEST_LAYOUT_BTHD);
    attn_error error;
    attn_kv_cache *cache = new_cache(0, 0, ATTN_DTYPE_F32);
    attn_tensor too_many_k = sequence_rows(&k.view, 0, 0, CAPACITY + 1);
    attn_tensor too_many_v = sequence_rows(&v.view, 0, 0, CAPACITY + 1);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &too_many_k, &too_many_v, &error),
                 ATTN_ERROR_CAPACITY, &error, "capacity + 1 tokens");
    CHECK(attn_kv_cache_length(cache, 0) == 0, "nothing written on a capacity error");
    attn_tensor full_k = sequence_rows(&k.view, 0, 0, CAPACITY);
    attn_tensor full_v = sequence_rows(&v.view, 0, 0, CAPACITY);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &full_k, &full_v, &error), ATTN_OK, &error, "full");
    attn_tensor one_k = sequence_rows(&k.view, 0, 0, 1), one_v = sequence_rows(&v.view, 0, 0, 1);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &one_k, &one_v, &error), ATTN_ERROR_CAPACITY,
                 &error, "one past capacity");
    CHECK(strstr(error.message, "capacity") != NULL, "message: %s", error.message);
    attn_kv_cache_destroy(cache);

    /* A pool of 4 pages of 16 for 3 sequences: batch append of 2 x 20 tokens needs 4 pages
     * (ok), then 3 x 10 more needs 1 + 1 + 1 = 3 > 0 free: refused, nothing written. */
    cache = new_cache(16, 4, ATTN_DTYPE_F32);
    attn_tensor two_k = k.view, two_v = v.view;
    two_k.shape[0] = two_v.shape[0] = 2, two_k.shape[1] = two_v.shape[1] = 20;
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &two_k, &two_v, &error), ATTN_OK, &error, "2x20");
    attn_tensor three_k = k.view, three_v = v.view;
    three_k.shape[1] = three_v.shape[1] = 10;
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &three_k, &three_v, &error), ATTN_ERROR_CAPACITY,
                 &error, "pool exhausted");
    CHECK(attn_kv_cache_length(cache, 0) == 20 && attn_kv_cache_length(cache, 2) == 0,
          "a refused batch append writes nothing");
    attn_kv_cache_truncate(cache, 1, 0, &error);
    CHECK(attn_kv_cache_free_pages(cache) == 2, "truncating to 0 frees 2 pages");
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &three_k, &three_v, &error), ATTN_OK, &error,
                 "fits after freeing");
    CHECK_STATUS(attn_kv_cache_append(cache, 3, &one_k, &one_v, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "sequence out of range");
    attn_kv_cache_destroy(cache);
    test_tensor_free(&k), test_tensor_free(&v);
}

/* bf16 / fp16 storage: decode = reference on the rounded contents (the kernel converts
 * exactly), and the error against fp32 storage is within the documented bound. */
static void test_storage_dtypes(void) {
    const attn_dtype dtypes[2] = {ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const double bounds[2] = {5e-3, 1e-3}; /* documented in docs/inference.md */
    test_rng rng;
    test_rng_seed(&rng, 10);
    test_tensor k = random_tensor(&rng, B, 200, HKV, DK);
    test_tensor v = random_tensor(&rng, B, 200, HKV, DV);
    test_tensor q = random_tensor(&rng, B, 1, HQ, DK);
    attn_options options = decode_options();
    attn_execution execution = decode_execution(ATTN_KERNEL_AUTO);
    attn_error error;
    attn_kv_cache *exact = new_cache(16, 0, ATTN_DTYPE_F32);
    attn_kv_cache_append(exact, 0, &k.view, &v.view, &error);
    test_tensor expected = test_tensor_new(B, 1, HQ, DV, TEST_LAYOUT_BTHD);
    attn_decode(exact, &q.view, &options, &expected.view, NULL, &execution, &error);
    for (int d = 0; d < 2; ++d) {
        attn_kv_cache *cache = new_cache(16, 0, dtypes[d]);
        CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, &v.view, &error), ATTN_OK, &error,
                     "append 16-bit");
        for (int kernel = 0; kernel < 2; ++kernel) {
            attn_execution kernel_execution =
                decode_execution(kernel == 0 ? ATTN_KERNEL_GENERIC : ATTN_KERNEL_AUTO);
            test_tensor out = test_tensor_new(B, 1, HQ, DV, TEST_LAYOUT_BTHD);
            test_tensor reference = test_tensor_new(B, 1, HQ, DV, TEST_LAYOUT_BTHD);
            attn_decode(cache, &q.view, &options, &out.view, NULL, &kernel_execution, &error);
            attn_reference_decode(cache, &q.view, &options, &reference.view, NULL, &error);
            double exact_error = test_max_relative_error(&out.view, &reference.view);
            double storage_error = test_max_relative_error(&out.view, &expected.view);
            CHECK(exact_error <= 1e-5, "%s (%s): decode = reference on stored values (%.3g)",
                  dtype_label(dtypes[d]), kernel_execution.kernel ? "auto" : "generic",
                  exact_error);
            CHECK(storage_error <= bounds[d], "%s: error vs fp32 storage %.3g <= %.0e",
                  dtype_label(dtypes[d]), storage_error, bounds[d]);
            if (kernel == 1)
                printf("%s storage: max relative error vs fp32 = %.3g\n",
                       dtype_label(dtypes[d]), storage_error);
            test_tensor_free(&out), test_tensor_free(&reference);
        }
        attn_kv_cache_destroy(cache);
    }
    attn_kv_cache_destroy(exact);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&q), test_tensor_free(&expected);
}

/* RoPE at append: the stored keys are the inputs rotated (interleaved pairs, base 10000) at
 * each token's absolute position, computed here in double; chunked appends continue the
 * positions. Values are not rotated. */
static void test_rope_at_append(void) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1, config.kv_heads = 1, config.key_dim = 8, config.value_dim = 4;
    config.capacity = 20, config.page_size = 3, config.rope_dim = 6;
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "rope cache");
    test_rng rng;
    test_rng_seed(&rng, 12);
    test_tensor k = random_tensor(&rng, 1, 20, 1, 8);
    test_tensor v = random_tensor(&rng, 1, 20, 1, 4);
    attn_tensor first_k = sequence_rows(&k.view, 0, 0, 7), first_v = sequence_rows(&v.view, 0, 0, 7);
    attn_tensor rest_k = sequence_rows(&k.view, 0, 7, 13), rest_v = sequence_rows(&v.view, 0, 7, 13);
    attn_kv_cache_append(cache, 0, &first_k, &first_v, &error);
    attn_kv_cache_append(cache, 0, &rest_k, &rest_v, &error);
    test_tensor stored = test_tensor_new(1, 20, 1, 8, TEST_LAYOUT_BTHD);
    test_tensor stored_v = test_tensor_new(1, 20, 1, 4, TEST_LAYOUT_BTHD);
    attn_kv_cache_read(cache, 0, 0, &stored.view, &stored_v.view, &error);
    double worst = 0.0;
    for (int t = 0; t < 20; ++t)
        for (int d = 0; d < 8; ++d) {
            double x = k.allocation[t * 8 + d], expected = x;
            if (d < 6) {
                int pair = d / 2;
                double angle = t * pow(10000.0, -2.0 * pair / 6.0);
                double a = k.allocation[t * 8 + 2 * pair], b = k.allocation[t * 8 + 2 * pair + 1];
                expected = d % 2 == 0 ? a * cos(angle) - b * sin(angle)
                                      : a * sin(angle) + b * cos(angle);
            }
            double e = fabs(stored.allocation[t * 8 + d] - expected);
            if (e > worst) worst = e;
        }
    CHECK(worst <= 1e-5, "RoPE at append = rotation at absolute positions (%.3g)", worst);
    CHECK(test_bitwise_equal(&stored_v.view, &v.view), "values are stored unrotated");
    attn_kv_cache_destroy(cache);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&stored), test_tensor_free(&stored_v);
}

static void test_config_errors(void) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 2, config.kv_heads = 2, config.key_dim = 8, config.value_dim = 8;
    config.capacity = 10;
    attn_kv_cache *cache = NULL;
    attn_error error;
    struct { const char *field; void (*spoil)(attn_kv_cache_config *); } cases[] = {
        {"config.kv_heads", NULL}, {"config.dtype", NULL}, {"config.page_size", NULL},
        {"config.rope_dim", NULL}, {"config.value_dim", NULL},
    };
    for (int c = 0; c < 5; ++c) {
        attn_kv_cache_config bad = config;
        if (c == 0) bad.kv_heads = 0;
        if (c == 1) bad.dtype = ATTN_DTYPE_I32;
        if (c == 2) bad.page_size = -1;
        if (c == 3) bad.rope_dim = 3;
        if (c == 4) bad.values_in_keys = 1, bad.value_dim = 9;
        CHECK_STATUS(attn_kv_cache_create(&bad, &cache, &error), ATTN_ERROR_INVALID_ARGUMENT,
                     &error, "bad %s", cases[c].field);
        CHECK(strstr(error.message, cases[c].field) != NULL && cache == NULL,
              "message names %s: %s", cases[c].field, error.message);
    }
    attn_kv_cache_config huge = config;
    huge.capacity = INT64_MAX / 4;
    CHECK_STATUS(attn_kv_cache_create(&huge, &cache, &error), ATTN_ERROR_OVERFLOW, &error,
                 "huge capacity");
    CHECK(attn_kv_cache_bytes_per_token(&config) == 2 * 16 * 4, "bytes per token = Hkv (Dk+Dv) 4");
    config.values_in_keys = 1, config.dtype = ATTN_DTYPE_BF16;
    CHECK(attn_kv_cache_bytes_per_token(&config) == 2 * 8 * 2, "values_in_keys stores only keys");
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "create");
    CHECK(attn_kv_cache_footprint_bytes(cache) >= 2 * 10 * 2 * 8 * 2, "footprint covers the pool");
    attn_kv_cache_destroy(cache);
    attn_kv_cache_destroy(NULL);
}

int main(void) {
    test_paged_equals_contiguous();
    test_free_slots_are_nan();
    test_prefix_sharing();
    test_capacity_errors();
    test_storage_dtypes();
    test_rope_at_append();
    test_config_errors();
    return test_finish();
}
