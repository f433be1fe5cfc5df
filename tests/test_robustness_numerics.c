/*
 * test_robustness_numerics.c — the defined results of numerically hostile inputs
 * (docs/robustness.md, "numerical robustness"), for every kernel family this CPU supports:
 *  - logits of magnitude up to 1e30 after scaling: the exact argmax result (ties averaged),
 *    LSE = the largest logit, no NaN or inf; with soft-capping, the reference's result;
 *  - NaN / inf stored in K and V rows that no query may attend to (key padding, an all-false
 *    mask column, a -inf bias column, a false block-layout column) and NaN in padded query
 *    rows: outputs bitwise identical to the same call on clean inputs;
 *  - denormal inputs, denormal logits and denormal probabilities: the reference's result
 *    within 1e-5 * (1 + |ref|), and the caller's floating-point mode (FTZ/DAZ) left untouched;
 *  - decoding against a KV cache of Tk = 2^24 tokens (Hkv = 1, D = 1): the exact mean and a
 *    dominant key, LSE = log(2^24) to float precision.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "test_support.h"

static const attn_kernel_choice kernel_choices[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX2,
                                                    ATTN_KERNEL_AVX512};
static const char *const kernel_names[] = {"generic", "avx2", "avx512"};
#define KERNEL_COUNT 3

/* ---- logits up to +-1e30 ---------------------------------------------------------------- */

/* One query row against Tk = 4 keys, D = 1, scale 1: logit_j = q * k_j. */
typedef struct huge_logit_case {
    const char *name;
    float q;
    float k[4];
    float v[4];
    float expected_o; /* the argmax key's value, or the mean of the tied maxima; LSE is the
                         largest logit (log of the tie count is below float precision) */
} huge_logit_case;

static const huge_logit_case huge_cases[] = {
    {"single max +1e30", 1e15f, {1e15f, -1e15f, 0.5e15f, 0.25e15f}, {1, 2, 3, 5}, 1.0f},
    {"tie at +1e30", 1e15f, {1e15f, -1e15f, 0.5e15f, 1e15f}, {1, 2, 3, 5}, 3.0f},
    {"max from negative q", -1e15f, {1e15f, -1e15f, 0.5e15f, 1e15f}, {1, 2, 3, 5}, 2.0f},
    {"all -1e30 but one", 1e15f, {-1e15f, -1e15f, -0.999e15f, -1e15f}, {1, 2, 3, 5}, 3.0f},
    {"all equal -1e30", 1e15f, {-1e15f, -1e15f, -1e15f, -1e15f}, {1, 2, 3, 6}, 3.0f},
    {"1e30 gap to 0", 1e15f, {0.0f, 1e15f, 0.0f, 0.0f}, {1, 2, 3, 5}, 2.0f},
};

static void test_huge_logits(void) {
    for (size_t n = 0; n < sizeof huge_cases / sizeof huge_cases[0]; ++n) {
        const huge_logit_case *c = &huge_cases[n];
        float q[1] = {c->q}, k[4], v[4], out[1], lse[1];
        memcpy(k, c->k, sizeof k);
        memcpy(v, c->v, sizeof v);
        attn_tensor qt = attn_tensor_f32_4d(q, 1, 1, 1, 1), kt = attn_tensor_f32_4d(k, 1, 4, 1, 1);
        attn_tensor vt = attn_tensor_f32_4d(v, 1, 4, 1, 1), ot = attn_tensor_f32_4d(out, 1, 1, 1, 1);
        int64_t lse_shape[3] = {1, 1, 1};
        attn_tensor lt = attn_tensor_contiguous(lse, ATTN_DTYPE_F32, 3, lse_shape);
        attn_options options = attn_options_default();
        attn_execution execution = attn_execution_default();
        options.custom_scale = 1;
        options.scale = 1.0f;
        /* The largest logit as float32 computes it (q * k rounds: 1e15f * 1e15f != 1e30f). */
        float expected_lse = -INFINITY;
        for (int j = 0; j < 4; ++j)
            if (c->q * c->k[j] > expected_lse) expected_lse = c->q * c->k[j];
        for (int kernel = 0; kernel < KERNEL_COUNT; ++kernel) {
            if (!attn_cpu_supports(kernel_choices[kernel])) continue;
            for (int tile = 0; tile <= 1; ++tile) { /* default tiles, and one key per tile */
                execution.kernel = kernel_choices[kernel];
                execution.tile_k = tile;
                attn_error error;
                attn_status status = attn_forward(&qt, &kt, &vt, &options, &ot, &lt, &execution, &error);
                CHECK_STATUS(status, ATTN_OK, &error, "%s, %s", c->name, kernel_names[kernel]);
                CHECK(out[0] == c->expected_o && lse[0] == expected_lse,
                      "%s, %s, tile_k %d: O = %g (expected %g), LSE = %g (expected %g)", c->name,
                      kernel_names[kernel], tile, out[0], c->expected_o, lse[0], expected_lse);
            }
        }
        /* With a soft-cap the logits saturate at +-cap: the reference's (double) result. */
        options.softcap = 5.0f;
        float reference_out[1], reference_lse[1];
        attn_tensor rot = attn_tensor_f32_4d(reference_out, 1, 1, 1, 1);
        attn_tensor rlt = attn_tensor_contiguous(reference_lse, ATTN_DTYPE_F32, 3, lse_shape);
        execution.kernel = ATTN_KERNEL_AUTO;
        execution.tile_k = 0;
        CHECK_STATUS(attn_reference_forward(&qt, &kt, &vt, &options, &rot, &rlt, NULL), ATTN_OK,
                     NULL, "%s softcap reference", c->name);
        for (int kernel = 0; kernel < KERNEL_COUNT; ++kernel) {
            if (!attn_cpu_supports(kernel_choices[kernel])) continue;
            execution.kernel = kernel_choices[kernel];
            CHECK_STATUS(attn_forward(&qt, &kt, &vt, &options, &ot, &lt, &execution, NULL), ATTN_OK, NULL,
                         "%s softcap", c->name);
            CHECK(fabsf(out[0] - reference_out[0]) <= 1e-5f * (1 + fabsf(reference_out[0])) &&
                      fabsf(lse[0] - reference_lse[0]) <= 1e-5f * (1 + fabsf(reference_lse[0])),
                  "%s softcap 5, %s: O = %g / %g, LSE = %g / %g", c->name, kernel_names[kernel],
                  out[0], reference_out[0], lse[0], reference_lse[0]);
        }
    }
}

/* ---- NaN / inf where no query looks ---------------------------------------------------- */

enum { B = 2, TQ = 5, TK = 11, HQ = 4, HKV = 2, DK = 6, DV = 5, DEAD_KEY = 7 };

/* Which option makes key DEAD_KEY (and, for key padding, every key >= key_lengths[b])
 * invisible to every query. */
typedef enum dead_key_reason {
    DEAD_BY_KEY_LENGTHS = 0,
    DEAD_BY_MASK_COLUMN = 1,
    DEAD_BY_BIAS_COLUMN = 2,
    DEAD_BY_BLOCK_LAYOUT = 3,
    DEAD_REASON_COUNT = 4
} dead_key_reason;

static const char *const dead_names[] = {"key_lengths padding", "all-false mask column",
                                         "-inf bias column", "false block-layout column"};

/* Runs the forward with `reason`'s option set; out/lse receive the result. */
static attn_status forward_with_dead_key(dead_key_reason reason, attn_kernel_choice kernel,
                                         const test_tensor *q, const test_tensor *k,
                                         const test_tensor *v, test_tensor *out,
                                         test_tensor *lse, attn_error *error) {
    static int32_t key_lengths[B] = {DEAD_KEY, 3};
    static int32_t query_lengths[B] = {TQ, 3}; /* rows 3, 4 of batch 1 are padding */
    static uint8_t mask[TQ * TK];
    static float bias[TQ * TK];
    static uint8_t blocks[TQ * TK];
    for (int i = 0; i < TQ; ++i)
        for (int j = 0; j < TK; ++j) {
            mask[i * TK + j] = j != DEAD_KEY;
            bias[i * TK + j] = j == DEAD_KEY ? -INFINITY : 0.1f * (float)(i - j);
            blocks[i * TK + j] = j != DEAD_KEY;
        }
    int64_t pair_shape[4] = {1, 1, TQ, TK};
    attn_tensor mask_view = attn_tensor_contiguous(mask, ATTN_DTYPE_BOOL, 4, pair_shape);
    attn_tensor bias_view = attn_tensor_contiguous(bias, ATTN_DTYPE_F32, 4, pair_shape);
    attn_tensor block_view = attn_tensor_contiguous(blocks, ATTN_DTYPE_BOOL, 4, pair_shape);
    attn_options options = attn_options_default();
    attn_execution execution = attn_execution_default();
    execution.kernel = kernel;
    options.query_lengths = query_lengths;
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    execution.tile_k = 4;
    switch (reason) {
    case DEAD_BY_KEY_LENGTHS: options.key_lengths = key_lengths; break;
    case DEAD_BY_MASK_COLUMN: options.mask = &mask_view; break;
    case DEAD_BY_BIAS_COLUMN: options.bias = &bias_view; break;
    case DEAD_BY_BLOCK_LAYOUT:
        options.block_layout = &block_view;
        options.block_q = 1;
        options.block_k = 1;
        break;
    default: break;
    }
    return attn_forward(&q->view, &k->view, &v->view, &options, &out->view, &lse->view, &execution, error);
}

/* Writes `value` into K (NaN) and V (value) at every key no query may see under `reason`,
 * and NaN into the padded query rows. */
static void poison_dead_positions(dead_key_reason reason, test_tensor *q, test_tensor *k,
                                  test_tensor *v, float value) {
    for (int b = 0; b < B; ++b)
        for (int j = 0; j < TK; ++j) {
            int dead = reason == DEAD_BY_KEY_LENGTHS ? j >= (b == 0 ? DEAD_KEY : 3) : j == DEAD_KEY;
            if (!dead) continue;
            for (int h = 0; h < HKV; ++h) {
                for (int d = 0; d < DK; ++d)
                    ((float *)k->view.data)[b * k->view.stride[0] + j * k->view.stride[1] +
                                            h * k->view.stride[2] + d * k->view.stride[3]] = NAN;
                for (int d = 0; d < DV; ++d)
                    ((float *)v->view.data)[b * v->view.stride[0] + j * v->view.stride[1] +
                                            h * v->view.stride[2] + d * v->view.stride[3]] = value;
            }
        }
    for (int i = 3; i < TQ; ++i)
        for (int h = 0; h < HQ; ++h)
            for (int d = 0; d < DK; ++d)
                ((float *)q->view.data)[1 * q->view.stride[0] + i * q->view.stride[1] +
                                        h * q->view.stride[2] + d * q->view.stride[3]] = NAN;
}

static void test_poison_in_masked_positions(void) {
    static const float poisons[] = {NAN, INFINITY, -INFINITY, FLT_MAX};
    for (int reason = 0; reason < DEAD_REASON_COUNT; ++reason)
        for (int kernel = 0; kernel < KERNEL_COUNT; ++kernel) {
            if (!attn_cpu_supports(kernel_choices[kernel])) continue;
            test_rng rng;
            test_rng_seed(&rng, 100 + (uint64_t)reason);
            test_tensor q = test_tensor_new(B, TQ, HQ, DK, TEST_LAYOUT_BTHD);
            test_tensor k = test_tensor_new(B, TK, HKV, DK, TEST_LAYOUT_BHTD);
            test_tensor v = test_tensor_new(B, TK, HKV, DV, TEST_LAYOUT_PADDED);
            test_tensor clean_out = test_tensor_new(B, TQ, HQ, DV, TEST_LAYOUT_BTHD);
            test_tensor out = test_tensor_new(B, TQ, HQ, DV, TEST_LAYOUT_BTHD);
            int64_t lse_shape[3] = {B, HQ, TQ};
            test_tensor clean_lse = test_tensor_new_shape(3, lse_shape);
            test_tensor lse = test_tensor_new_shape(3, lse_shape);
            test_tensor_fill_normal(&q, &rng, 1.0f);
            test_tensor_fill_normal(&k, &rng, 1.0f);
            test_tensor_fill_normal(&v, &rng, 1.0f);
            attn_error error;
            attn_status status = forward_with_dead_key(reason, kernel_choices[kernel], &q, &k, &v,
                                                       &clean_out, &clean_lse, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "%s clean, %s", dead_names[reason],
                         kernel_names[kernel]);
            for (size_t p = 0; p < sizeof poisons / sizeof poisons[0]; ++p) {
                poison_dead_positions(reason, &q, &k, &v, poisons[p]);
                status = forward_with_dead_key(reason, kernel_choices[kernel], &q, &k, &v, &out,
                                               &lse, &error);
                CHECK_STATUS(status, ATTN_OK, &error, "%s poisoned, %s", dead_names[reason],
                             kernel_names[kernel]);
                CHECK(test_bitwise_equal(&out.view, &clean_out.view) &&
                          test_bitwise_equal(&lse.view, &clean_lse.view),
                      "%s, %s: K = NaN, V = %g where masked changes the result (max error %g)",
                      dead_names[reason], kernel_names[kernel], poisons[p],
                      test_max_relative_error(&out.view, &clean_out.view));
            }
            /* Padded query rows (batch 1, rows 3 and 4) are O = 0, LSE = -inf. */
            int padding_ok = 1;
            for (int i = 3; i < TQ; ++i)
                for (int h = 0; h < HQ; ++h) {
                    padding_ok &= test_get3(&lse.view, 1, h, i) == -INFINITY;
                    for (int d = 0; d < DV; ++d) padding_ok &= test_get4(&out.view, 1, i, h, d) == 0.0f;
                }
            CHECK(padding_ok, "%s, %s: NaN query padding rows give O = 0, LSE = -inf",
                  dead_names[reason], kernel_names[kernel]);
            test_tensor_free(&q); test_tensor_free(&k); test_tensor_free(&v);
            test_tensor_free(&out); test_tensor_free(&clean_out);
            test_tensor_free(&lse); test_tensor_free(&clean_lse);
        }
}

/* ---- denormals ----------------------------------------------------------------------- */

/* A denormal computation still gives a denormal: nobody turned on flush-to-zero. */
static int denormals_preserved(void) {
    volatile float tiny = 1e-30f, divisor = 1e10f;
    float result = tiny / divisor; /* 1e-40, a denormal */
    return result > 0.0f && result < FLT_MIN;
}

typedef struct denormal_case {
    const char *name;
    float q_scale, k_scale, v_scale; /* magnitudes of the normal(0, 1) draws */
    float scale;                     /* softmax scale (custom) */
} denormal_case;

static const denormal_case denormal_cases[] = {
    {"denormal Q and K (logits ~1e-76)", 1e-38f, 1e-38f, 1.0f, 1.0f},
    {"denormal V", 1.0f, 1.0f, 1e-39f, 1.0f},
    {"denormal logits (1e-42)", 1e-21f, 1e-21f, 1.0f, 1.0f},
    {"denormal probabilities (logit gaps ~90..110)", 1.0f, 1.0f, 1.0f, 45.0f},
};

static void test_denormals(void) {
    CHECK(denormals_preserved(), "denormals work before any call");
    for (size_t n = 0; n < sizeof denormal_cases / sizeof denormal_cases[0]; ++n) {
        const denormal_case *c = &denormal_cases[n];
        test_rng rng;
        test_rng_seed(&rng, 300 + n);
        test_tensor q = test_tensor_new(1, 9, 2, 4, TEST_LAYOUT_BTHD);
        test_tensor k = test_tensor_new(1, 37, 1, 4, TEST_LAYOUT_BTHD);
        test_tensor v = test_tensor_new(1, 37, 1, 3, TEST_LAYOUT_BTHD);
        test_tensor out = test_tensor_new(1, 9, 2, 3, TEST_LAYOUT_BTHD);
        test_tensor reference = test_tensor_new(1, 9, 2, 3, TEST_LAYOUT_BTHD);
        test_tensor_fill_normal(&q, &rng, c->q_scale);
        test_tensor_fill_normal(&k, &rng, c->k_scale);
        test_tensor_fill_normal(&v, &rng, c->v_scale);
        attn_options options = attn_options_default();
        attn_execution execution = attn_execution_default();
        options.custom_scale = 1;
        options.scale = c->scale;
        CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &reference.view,
                                            NULL, NULL), ATTN_OK, NULL, "%s reference", c->name);
        for (int kernel = 0; kernel < KERNEL_COUNT; ++kernel) {
            if (!attn_cpu_supports(kernel_choices[kernel])) continue;
            execution.kernel = kernel_choices[kernel];
            attn_error error;
            CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, NULL, &execution, &error),
                         ATTN_OK, &error, "%s, %s", c->name, kernel_names[kernel]);
            /* Relative to the values' own magnitude, so denormal V is held to account too;
             * denormals carry fewer bits, so each of the 37 accumulated products may also
             * round by one denormal step (FLT_TRUE_MIN = 2^-149). */
            double worst = 0, grid = 37.0 * FLT_TRUE_MIN;
            for (int i = 0; i < 9; ++i)
                for (int h = 0; h < 2; ++h)
                    for (int d = 0; d < 3; ++d) {
                        double a = test_get4(&out.view, 0, i, h, d);
                        double r = test_get4(&reference.view, 0, i, h, d);
                        double e = fmax(fabs(a - r) - grid, 0.0) / (c->v_scale * 1e-5 + fabs(r));
                        if (!(e <= worst)) worst = e;
                    }
            CHECK(worst <= 2e-5, "%s, %s: relative error %g", c->name, kernel_names[kernel], worst);
            CHECK(denormals_preserved(), "%s, %s: the call left flush-to-zero on", c->name,
                  kernel_names[kernel]);
        }
        test_tensor_free(&q); test_tensor_free(&k); test_tensor_free(&v);
        test_tensor_free(&out); test_tensor_free(&reference);
    }
}

/* ---- decoding against 2^24 keys -------------------------------------------------------- */

static void test_decode_huge_key_count(void) {
    const int64_t tokens = (int64_t)1 << 24, spike = tokens - 5;
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1;
    config.kv_heads = 1;
    config.key_dim = 1;
    config.value_dim = 1;
    config.capacity = tokens;
    attn_kv_cache *cache = NULL;
    attn_error error;
    attn_status status = attn_kv_cache_create(&config, &cache, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "cache of 2^24 tokens");
    if (status != ATTN_OK) return;
    float *keys = calloc((size_t)tokens, sizeof(float));
    float *values = malloc((size_t)tokens * sizeof(float));
    CHECK(keys && values, "allocated 2 x 64 MiB");
    if (!keys || !values) {
        free(keys); free(values); attn_kv_cache_destroy(cache);
        return;
    }
    /* V_j cycles through 0..1023 / 1024, exactly representable; K = 0 except one key. */
    double value_sum = 0;
    for (int64_t j = 0; j < tokens; ++j) {
        values[j] = (float)(j % 1024) / 1024.0f;
        value_sum += values[j];
    }
    keys[spike] = 1.0f;
    attn_tensor k = attn_tensor_f32_4d(keys, 1, tokens, 1, 1);
    attn_tensor v = attn_tensor_f32_4d(values, 1, tokens, 1, 1);
    status = attn_kv_cache_append(cache, 0, &k, &v, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "append 2^24 tokens");

    /* Query 0: every logit 0, so O = mean(V) and LSE = log(2^24). Query 30: key `spike` has
     * logit 30 (scale 1) against 2^24 - 1 logits 0. Expected values computed in double. */
    float query_values[2] = {0.0f, 30.0f};
    for (int n = 0; n < 2 && status == ATTN_OK; ++n) {
        float q[1] = {query_values[n]}, out[1], lse[1];
        attn_tensor qt = attn_tensor_f32_4d(q, 1, 1, 1, 1), ot = attn_tensor_f32_4d(out, 1, 1, 1, 1);
        int64_t lse_shape[3] = {1, 1, 1};
        attn_tensor lt = attn_tensor_contiguous(lse, ATTN_DTYPE_F32, 3, lse_shape);
        attn_options options = attn_options_default();
        attn_execution execution = attn_execution_default();
        options.custom_scale = 1;
        options.scale = 1.0f;
        execution.num_threads = 2;
        double spike_weight = exp((double)q[0]);
        double normaliser = (double)(tokens - 1) + spike_weight;
        double expected_o = (value_sum - values[spike] + spike_weight * values[spike]) / normaliser;
        double expected_lse = log(normaliser);
        attn_status decoded = attn_decode(cache, &qt, &options, &ot, &lt, &execution, &error);
        CHECK_STATUS(decoded, ATTN_OK, &error, "decode over 2^24 keys, q = %g", q[0]);
        CHECK(fabs(out[0] - expected_o) <= 1e-5 * (1 + fabs(expected_o)) &&
                  fabs(lse[0] - expected_lse) <= 1e-6 * fabs(expected_lse),
              "decode over 2^24 keys, q = %g: O = %.8g (expected %.8g), LSE = %.8g (expected %.8g)",
              q[0], out[0], expected_o, lse[0], expected_lse);
    }
    free(keys);
    free(values);
    attn_kv_cache_destroy(cache);
}

int main(void) {
    test_huge_logits();
    test_poison_in_masked_positions();
    test_denormals();
    test_decode_huge_key_count();
    return test_finish();
}
