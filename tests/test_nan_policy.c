/*
 * test_nan_policy.c — the NaN policy (docs/conventions.md, "NaN") on every kernel registry this
 * CPU runs: a NaN in an attended logit (a query element, an attended key element, an attended
 * bias entry, with or without soft-cap) makes exactly the rows that attend it NaN in O and in
 * LSE (never LSE = -inf: no merge may drop them), and a NaN the mask excludes changes nothing.
 * Checked on the forward's tiled path and its small calls, decoding against f32 / bf16 / f16
 * caches split into several partials (the merge of a NaN partial), attn_merge itself, and the
 * backward (dq of the rows that attend a NaN is NaN, the other rows' dq equal the reference's).
 * Rows that attend no NaN are compared with attn_reference_forward within 2e-5.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static const attn_kernel_choice registries[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX2,
                                                ATTN_KERNEL_AVX512, ATTN_KERNEL_AVX512_BF16,
                                                ATTN_KERNEL_AMX};

typedef enum nan_place { NAN_IN_KEY, NAN_IN_QUERY, NAN_IN_BIAS } nan_place;

typedef struct nan_case {
    const char *name;
    int64_t Tq, Tk, Hq, Hkv, D;
    int64_t window_left; /* -1: none */
    float softcap;
    nan_place place;
    int64_t at_i, at_j;  /* the query row (NAN_IN_QUERY, NAN_IN_BIAS) and key (KEY, BIAS) */
    int64_t head;        /* the KV head (key) or query head (query) of the NaN */
} nan_case;

static const nan_case cases[] = {
    {"key, tiled", 70, 70, 4, 2, 32, -1, 0, NAN_IN_KEY, 0, 20, 0},
    {"key, tiled, soft-cap", 70, 70, 4, 2, 32, -1, 30.0f, NAN_IN_KEY, 0, 20, 1},
    {"key, small call", 1, 100, 4, 2, 64, -1, 0, NAN_IN_KEY, 0, 20, 0},
    {"key, small call, 3 rows", 3, 100, 8, 2, 16, -1, 0, NAN_IN_KEY, 0, 98, 1},
    {"key outside the window (masked)", 1, 100, 4, 2, 32, 30, 0, NAN_IN_KEY, 0, 60, 0},
    {"key after the rows (causal, masked)", 40, 40, 2, 2, 16, -1, 0, NAN_IN_KEY, 0, 39, 0},
    {"query row", 50, 50, 4, 4, 32, -1, 0, NAN_IN_QUERY, 7, 0, 3},
    {"bias, attended", 40, 40, 2, 1, 16, -1, 0, NAN_IN_BIAS, 10, 3, 0},
    {"bias, masked by causal", 40, 40, 2, 1, 16, -1, 0, NAN_IN_BIAS, 3, 10, 0},
};

/* Whether row (i, h) attends the NaN of case c (bottom-right causal, the window). */
static int attends_nan(const nan_case *c, int64_t i, int64_t h) {
    const int64_t position = i + c->Tk - c->Tq, group = c->Hq / c->Hkv;
    if (c->place == NAN_IN_QUERY) return i == c->at_i && h == c->head;
    if (c->place == NAN_IN_BIAS) return i == c->at_i && c->at_j <= position;
    return h / group == c->head && c->at_j <= position &&
           (c->window_left < 0 || position - c->at_j <= c->window_left);
}

/* O and LSE of every row: NaN exactly where the row attends the NaN, else within 2e-5 of the
 * reference; returns the number of rows that break the rule. */
static int check_rows(const nan_case *c, const attn_tensor *out, const attn_tensor *lse,
                      const attn_tensor *want, const attn_tensor *want_lse) {
    int wrong = 0;
    for (int64_t i = 0; i < c->Tq; ++i)
        for (int64_t h = 0; h < c->Hq; ++h) {
            const int nan_row = attends_nan(c, i, h);
            int ok = nan_row ? isnan(test_get3(lse, 0, h, i)) : !isnan(test_get3(lse, 0, h, i));
            for (int64_t e = 0; e < c->D && ok; ++e) {
                const double got = test_get4(out, 0, i, h, e);
                const double reference = test_get4(want, 0, i, h, e);
                ok = nan_row ? isnan(got) : fabs(got - reference) <= 2e-5 * (1 + fabs(reference));
            }
            if (!nan_row)
                ok = ok && fabs(test_get3(lse, 0, h, i) - test_get3(want_lse, 0, h, i)) <= 2e-5;
            wrong += !ok;
        }
    return wrong;
}

static void run_case(const nan_case *c, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_tensor q = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(1, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    const int64_t bias_shape[4] = {1, 1, c->Tq, c->Tk};
    test_tensor bias = test_tensor_new_shape(4, bias_shape);
    test_tensor_fill_normal(&bias, &rng, 0.5f);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (c->window_left >= 0) options.window = 1, options.window_left = c->window_left;
    options.softcap = c->softcap;
    options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    if (c->place == NAN_IN_BIAS) options.bias = &bias.view;
    float *target = c->place == NAN_IN_KEY     ? (float *)k.view.data + (c->at_j * c->Hkv + c->head) * c->D + 5
                    : c->place == NAN_IN_QUERY ? (float *)q.view.data + (c->at_i * c->Hq + c->head) * c->D + 5
                                               : (float *)bias.view.data + c->at_i * c->Tk + c->at_j;
    *target = NAN;
    const int64_t lse_shape[3] = {1, c->Hq, c->Tq};
    test_tensor want = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor want_lse = test_tensor_new_shape(3, lse_shape);
    attn_error error = {0};
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &want.view,
                                        &want_lse.view, &error), ATTN_OK, &error, "%s: reference", c->name);
    CHECK(check_rows(c, &want.view, &want_lse.view, &want.view, &want_lse.view) == 0,
          "%s: the reference follows the policy", c->name);
    test_tensor out = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    for (size_t n = 0; n < sizeof registries / sizeof *registries; ++n) {
        if (!attn_kernel_available(registries[n])) continue;
        const char *name = attn_kernel_name(registries[n]);
        attn_execution execution = attn_execution_default();
        execution.kernel = registries[n];
        CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view,
                                  &execution, &error), ATTN_OK, &error, "%s [%s]", c->name, name);
        const int wrong = check_rows(c, &out.view, &lse.view, &want.view, &want_lse.view);
        CHECK(wrong == 0, "%s [%s]: NaN exactly in the rows that attend it (%d rows wrong)",
              c->name, name, wrong);
    }
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&bias);
    test_tensor_free(&want), test_tensor_free(&want_lse), test_tensor_free(&out);
    test_tensor_free(&lse);
}

/* Decoding: a NaN in a cached key of sequence 0, the call split into partials of 32 keys (the
 * NaN partial merged with finite ones); sequence 1 and the other KV head stay finite. */
static void test_decode(attn_dtype dtype) {
    const int64_t B = 2, T = 150, Hq = 4, Hkv = 2, D = 32;
    test_rng rng;
    test_rng_seed(&rng, 77 + (uint64_t)dtype);
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = B, config.kv_heads = Hkv, config.key_dim = config.value_dim = D;
    config.dtype = dtype, config.capacity = T, config.page_size = 16;
    attn_kv_cache *cache = NULL;
    attn_error error = {0};
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "cache");
    test_tensor k = test_tensor_new(B, T, Hkv, D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, T, Hkv, D, TEST_LAYOUT_BTHD);
    test_tensor q = test_tensor_new(B, 1, Hq, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&k, &rng, 1.0f), test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    ((float *)k.view.data)[(40 * Hkv + 0) * D + 3] = NAN; /* sequence 0, token 40, KV head 0 */
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, &v.view, &error), ATTN_OK, &error, "append");
    const int64_t lse_shape[3] = {B, Hq, 1};
    test_tensor out = test_tensor_new(B, 1, Hq, D, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    for (size_t n = 0; n < sizeof registries / sizeof *registries; ++n) {
        if (!attn_kernel_available(registries[n])) continue;
        attn_execution execution = attn_execution_default();
        execution.kernel = registries[n], execution.tile_k = 32;
        CHECK_STATUS(attn_decode(cache, &q.view, &options, &out.view, &lse.view, &execution,
                                 &error), ATTN_OK, &error, "decode");
        int wrong = 0;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hq; ++h) {
                const int nan_row = b == 0 && h / (Hq / Hkv) == 0;
                wrong += nan_row != (isnan(test_get3(&lse.view, b, h, 0)) != 0);
                wrong += nan_row != (isnan(test_get4(&out.view, b, 0, h, 0)) != 0);
            }
        CHECK(wrong == 0, "decode %s cache [%s]: NaN exactly in the rows of sequence 0, head 0's "
              "group, through the merge of the splits (%d wrong)",
              dtype == ATTN_DTYPE_F32 ? "f32" : dtype == ATTN_DTYPE_BF16 ? "bf16" : "f16",
              attn_kernel_name(registries[n]), wrong);
    }
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&q), test_tensor_free(&out);
    test_tensor_free(&lse);
    attn_kv_cache_destroy(cache);
}

/* attn_merge: a partial whose LSE is NaN makes the merged row NaN, never dropped. */
static void test_merge(void) {
    const int64_t shape[4] = {1, 3, 1, 4}, lse_shape[3] = {1, 1, 3};
    test_tensor outs[2] = {test_tensor_new_shape(4, shape), test_tensor_new_shape(4, shape)};
    test_tensor lses[2] = {test_tensor_new_shape(3, lse_shape), test_tensor_new_shape(3, lse_shape)};
    for (int s = 0; s < 2; ++s)
        for (int n = 0; n < 12; ++n) outs[s].allocation[n] = (float)(n + s);
    const float lse_values[2][3] = {{0.5f, NAN, -INFINITY}, {1.0f, 2.0f, NAN}};
    for (int s = 0; s < 2; ++s) memcpy(lses[s].allocation, lse_values[s], sizeof lse_values[s]);
    test_tensor out = test_tensor_new_shape(4, shape), lse = test_tensor_new_shape(3, lse_shape);
    const attn_tensor *out_views[2] = {&outs[0].view, &outs[1].view};
    const attn_tensor *lse_views[2] = {&lses[0].view, &lses[1].view};
    attn_error error = {0};
    CHECK_STATUS(attn_merge(2, out_views, lse_views, &out.view, &lse.view, &error), ATTN_OK,
                 &error, "merge");
    CHECK(!isnan(lse.allocation[0]) && isnan(lse.allocation[1]) && isnan(lse.allocation[2]) &&
              isnan(out.allocation[4]) && isnan(out.allocation[8]) && !isnan(out.allocation[0]),
          "attn_merge: rows with a NaN partial are NaN (LSE and O), the finite row is not");
    const attn_tensor *one_out[1] = {&outs[0].view}, *one_lse[1] = {&lses[0].view};
    CHECK_STATUS(attn_merge(1, one_out, one_lse, &out.view, &lse.view, &error), ATTN_OK, &error,
                 "merge of one");
    CHECK(isnan(lse.allocation[1]) && lse.allocation[2] == -INFINITY && out.allocation[8] == 0.0f,
          "attn_merge of one partial: NaN stays NaN, an empty row stays empty");
    for (int s = 0; s < 2; ++s) test_tensor_free(&outs[s]), test_tensor_free(&lses[s]);
    test_tensor_free(&out), test_tensor_free(&lse);
}

/* The backward: dq is NaN exactly in the rows that attend the NaN key; the other rows equal
 * the reference backward's. */
static void test_backward(void) {
    const nan_case *c = &cases[0];
    test_rng rng;
    test_rng_seed(&rng, 91);
    test_tensor q = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(1, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    ((float *)k.view.data)[(c->at_j * c->Hkv + c->head) * c->D + 5] = NAN;
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    const int64_t lse_shape[3] = {1, c->Hq, c->Tq};
    test_tensor out = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_tensor dq[2], dk = test_tensor_new(1, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor dv = test_tensor_new(1, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    attn_error error = {0};
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view,
                                        &error), ATTN_OK, &error, "backward: forward");
    dq[1] = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_backward(&q.view, &k.view, &v.view, &out.view, &lse.view,
                                         &dout.view, &options, &dq[1].view, &dk.view, &dv.view,
                                         NULL, &error), ATTN_OK, &error, "reference backward");
    dq[0] = test_tensor_new(1, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    for (size_t n = 0; n < sizeof registries / sizeof *registries; ++n) {
        if (!attn_kernel_available(registries[n])) continue;
        attn_execution execution = attn_execution_default();
        execution.kernel = registries[n];
        CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &dout.view,
                                   &options, &dq[0].view, &dk.view, &dv.view, NULL, &execution,
                                   &error), ATTN_OK, &error, "backward");
        int wrong = 0;
        for (int64_t i = 0; i < c->Tq; ++i)
            for (int64_t h = 0; h < c->Hq; ++h) {
                const int nan_row = attends_nan(c, i, h);
                const double got = test_get4(&dq[0].view, 0, i, h, 0);
                const double reference = test_get4(&dq[1].view, 0, i, h, 0);
                wrong += nan_row ? !isnan(got) : !(fabs(got - reference) <= 1e-4 * (1 + fabs(reference)));
            }
        CHECK(wrong == 0, "backward [%s]: dq NaN exactly in the rows that attend the NaN key "
              "(%d wrong)", attn_kernel_name(registries[n]), wrong);
    }
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
    test_tensor_free(&out), test_tensor_free(&lse), test_tensor_free(&dq[0]);
    test_tensor_free(&dq[1]), test_tensor_free(&dk), test_tensor_free(&dv);
}

int main(void) {
    for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) run_case(&cases[n], 100 + n);
    test_decode(ATTN_DTYPE_F32);
    test_decode(ATTN_DTYPE_BF16);
    test_decode(ATTN_DTYPE_F16);
    test_merge();
    test_backward();
    return test_finish();
}
