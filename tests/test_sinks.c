/*
 * test_sinks.c — attention sinks (attn_options.sinks) wherever attention runs, against
 * independent references:
 *   - the oracle: attention without sinks in double (attn_reference_forward), the sink folded
 *     in here as the math states it, LSE' = log(e^LSE + e^s), O' = O e^(LSE - LSE');
 *     attn_reference_forward with the sinks must match it too;
 *   - attn_forward on its tiled path and its small calls (decode loop), fp32 and bf16, every
 *     mask of the table, heads without a sink (-inf), empty rows under ZERO (O = 0, LSE = s)
 *     and NaN, padding rows (O = 0, LSE = -inf): within 2e-5 (bf16: its 16-bit bound);
 *   - attn_decode on the library's caches of every storage type and attn_forward_with_kvcache
 *     on a caller's pages: against the oracle on the values the cache holds;
 *   - gradients: attn_backward's dq, dk, dv and attn_sinks_backward's dsinks against central
 *     differences of L = sum dO . O in double, written here;
 *   - sink tokens (StreamingLLM, options.sink_tokens): a window that keeps the first keys,
 *     forward (tiled and small calls), decode and backward against the same attention with
 *     the equivalent boolean mask, with and without learned sinks;
 *   - validation: a NaN or +inf sink, version-1 options (no sinks read), aliasing;
 *   - bitwise identical for 1 and 2 threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct sink_case {
    const char *name;
    int64_t B, Tq, Tk, Hq, Hkv, D;
    int causal;
    int64_t window_left; /* -2 = none */
    float softcap;
    int alibi, padded;
    attn_empty_rows empty_rows;
} sink_case;

static const sink_case cases[] = {
    {"MHA, no mask (tiled)", 2, 40, 57, 4, 4, 32, 0, -2, 0, 0, 0, 0},
    {"GQA causal (tiled)", 1, 70, 70, 8, 2, 64, 1, -2, 0, 0, 0, 0},
    {"window + soft-cap (tiled)", 1, 33, 90, 4, 2, 16, 1, 20, 30.0f, 0, 0, 0},
    {"ALiBi, padded rows (tiled)", 2, 20, 40, 4, 4, 24, 1, -2, 0, 1, 1, 0},
    {"decode step, GQA 4 (small)", 2, 1, 130, 8, 2, 64, 1, -2, 0, 0, 0, 0},
    {"3 new tokens, MQA (small)", 1, 3, 77, 4, 1, 40, 1, 16, 0, 0, 0, 0},
    {"empty rows as zeros", 1, 5, 3, 2, 1, 8, 1, -2, 0, 0, 0, ATTN_EMPTY_ROWS_ZERO},
    {"empty rows as NaN", 1, 5, 3, 2, 1, 8, 1, -2, 0, 0, 0, ATTN_EMPTY_ROWS_NAN},
};

/* Sinks of Hq heads: varied logits, one head without a sink (-inf), one dominant. */
static void fill_sinks(float *sinks, int64_t Hq, test_rng *rng) {
    for (int64_t h = 0; h < Hq; ++h) sinks[h] = (float)(test_rng_normal(rng) * 1.5);
    if (Hq > 1) sinks[1] = -INFINITY;
    if (Hq > 2) sinks[2] = 6.0f;
}

static attn_options options_of(const sink_case *c, const float *sinks, int32_t *lengths) {
    attn_options options = attn_options_default();
    options.causal = c->causal;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (c->window_left != -2) options.window = 1, options.window_left = c->window_left;
    options.softcap = c->softcap;
    options.alibi = c->alibi;
    options.empty_rows = c->empty_rows;
    options.sinks = sinks;
    if (c->padded) {
        for (int64_t b = 0; b < c->B; ++b) lengths[b] = (int32_t)(c->Tq - 1 - b);
        options.query_lengths = lengths;
    }
    return options;
}

/* The oracle: the reference without sinks, each real row's sink folded in here. */
static void oracle(const sink_case *c, const attn_tensor *q, const attn_tensor *k,
                   const attn_tensor *v, attn_options options, test_tensor *out, test_tensor *lse) {
    const float *sinks = options.sinks;
    options.sinks = NULL;
    attn_error error = {0};
    CHECK_STATUS(attn_reference_forward(q, k, v, &options, &out->view, &lse->view, &error),
                 ATTN_OK, &error, "%s: reference without sinks", c->name);
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < c->Tq; ++i) {
                const int real = options.query_lengths == NULL || i < options.query_lengths[b];
                float *row_lse = (float *)lse->view.data + b * lse->view.stride[0] +
                                 h * lse->view.stride[1] + i * lse->view.stride[2];
                const double l = *row_lse, s = sinks[h];
                if (!real || s == -INFINITY || isnan(l)) continue;
                const double folded = l == -INFINITY ? s : fmax(l, s) + log(exp(l - fmax(l, s)) + exp(s - fmax(l, s)));
                const double factor = l == -INFINITY ? 0.0 : exp(l - folded);
                *row_lse = (float)folded;
                for (int64_t e = 0; e < c->D; ++e) {
                    float *o = (float *)out->view.data + b * out->view.stride[0] +
                               i * out->view.stride[1] + h * out->view.stride[2] + e;
                    *o = (float)(*o * factor);
                }
            }
}

/* |a - b| <= tolerance (1 + |b|) everywhere, NaN where the other is NaN. */
static int close_to(const attn_tensor *a, const attn_tensor *b, double tolerance, double *worst) {
    *worst = test_max_relative_error(a, b);
    return *worst <= tolerance;
}

static void run_forward_case(const sink_case *c, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    float sinks[16];
    int32_t lengths[4];
    fill_sinks(sinks, c->Hq, &rng);
    attn_options options = options_of(c, sinks, lengths);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor want = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor want_lse = test_tensor_new_shape(3, lse_shape);
    oracle(c, &q.view, &k.view, &v.view, options, &want, &want_lse);
    attn_error error = {0};
    double worst = 0.0;
    /* the reference with the sinks */
    test_tensor ref = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor ref_lse = test_tensor_new_shape(3, lse_shape);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &ref.view,
                                        &ref_lse.view, &error), ATTN_OK, &error, "%s: ref", c->name);
    CHECK(close_to(&ref.view, &want.view, 1e-6, &worst) &&
              close_to(&ref_lse.view, &want_lse.view, 1e-6, &worst),
          "%s: attn_reference_forward with sinks = the folded oracle (%.2g)", c->name, worst);
    /* attn_forward, 1 and 2 threads */
    test_tensor got[2], got_lse[2];
    for (int t = 0; t < 2; ++t) {
        got[t] = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
        got_lse[t] = test_tensor_new_shape(3, lse_shape);
        attn_execution execution = attn_execution_default();
        execution.num_threads = t + 1;
        CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &got[t].view,
                                  &got_lse[t].view, &execution, &error),
                     ATTN_OK, &error, "%s: forward", c->name);
    }
    CHECK(close_to(&got[0].view, &want.view, 2e-5, &worst), "%s: O with sinks (%.2g)", c->name, worst);
    CHECK(close_to(&got_lse[0].view, &want_lse.view, 2e-5, &worst), "%s: LSE with sinks (%.2g)",
          c->name, worst);
    CHECK(test_bitwise_equal(&got[0].view, &got[1].view) &&
              test_bitwise_equal(&got_lse[0].view, &got_lse[1].view),
          "%s: 1 and 2 threads bitwise", c->name);
    /* bf16 q, k, v: within the 16-bit rounding of O */
    if (c->empty_rows != ATTN_EMPTY_ROWS_NAN) {
        test_half_tensor q16 = test_half_round(&q, ATTN_DTYPE_BF16);
        test_half_tensor k16 = test_half_round(&k, ATTN_DTYPE_BF16);
        test_half_tensor v16 = test_half_round(&v, ATTN_DTYPE_BF16);
        oracle(c, &q.view, &k.view, &v.view, options, &want, &want_lse); /* rounded inputs */
        test_half_tensor o16 = test_half_like(&want, ATTN_DTYPE_BF16, 0);
        CHECK_STATUS(attn_forward(&q16.view, &k16.view, &v16.view, &options, &o16.view,
                                  &got_lse[0].view, NULL, &error), ATTN_OK, &error, "%s: bf16", c->name);
        double bf16_worst = 0.0;
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t i = 0; i < c->Tq; ++i)
                for (int64_t h = 0; h < c->Hq; ++h)
                    for (int64_t e = 0; e < c->D; ++e) {
                        const double w = test_get4(&want.view, b, i, h, e);
                        const double d = fabs(test_half_get4(&o16.view, b, i, h, e) - w) / (1.0 + fabs(w));
                        if (d > bf16_worst) bf16_worst = d;
                    }
        CHECK(bf16_worst <= 1.2e-2, "%s: bf16 O with sinks (%.2g)", c->name, bf16_worst);
        CHECK(close_to(&got_lse[0].view, &want_lse.view, 1e-4, &worst), "%s: bf16 LSE (%.2g)",
              c->name, worst);
        free(q16.allocation), free(k16.allocation), free(v16.allocation), free(o16.allocation);
    }
    for (int t = 0; t < 2; ++t) test_tensor_free(&got[t]), test_tensor_free(&got_lse[t]);
    test_tensor_free(&ref), test_tensor_free(&ref_lse), test_tensor_free(&want);
    test_tensor_free(&want_lse), test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
}

/* ---- decode: every storage type of the library's cache, and a caller's pages ---- */
static const char *storage_name(attn_dtype dtype) {
    return dtype == ATTN_DTYPE_F32    ? "f32"
           : dtype == ATTN_DTYPE_BF16 ? "bf16"
           : dtype == ATTN_DTYPE_F16  ? "f16"
           : dtype == ATTN_DTYPE_Q8   ? "int8"
                                      : "fp8";
}

static void run_decode(attn_dtype dtype, uint64_t seed) {
    const sink_case c = {"decode", 2, 2, 150, 8, 2, 64, 1, -2, 0, 0, 0, 0};
    test_rng rng;
    test_rng_seed(&rng, seed);
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = c.B, config.kv_heads = c.Hkv, config.key_dim = config.value_dim = c.D;
    config.dtype = dtype, config.capacity = c.Tk, config.page_size = 32;
    attn_kv_cache *cache = NULL;
    attn_error error = {0};
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "cache");
    test_tensor k = test_tensor_new(c.B, c.Tk, c.Hkv, c.D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c.B, c.Tk, c.Hkv, c.D, TEST_LAYOUT_BTHD);
    test_tensor q = test_tensor_new(c.B, c.Tq, c.Hq, c.D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&k, &rng, 1.0f), test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, &v.view, &error), ATTN_OK, &error, "append");
    for (int64_t b = 0; b < c.B; ++b) { /* what the cache holds */
        attn_tensor kb = k.view, vb = v.view;
        kb.data = (float *)k.view.data + b * k.view.stride[0], kb.shape[0] = 1;
        vb.data = (float *)v.view.data + b * v.view.stride[0], vb.shape[0] = 1;
        CHECK_STATUS(attn_kv_cache_read(cache, b, 0, &kb, &vb, &error), ATTN_OK, &error, "read");
    }
    float sinks[8];
    fill_sinks(sinks, c.Hq, &rng);
    attn_options options = options_of(&c, sinks, NULL);
    const int64_t lse_shape[3] = {c.B, c.Hq, c.Tq};
    test_tensor want = test_tensor_new(c.B, c.Tq, c.Hq, c.D, TEST_LAYOUT_BTHD);
    test_tensor want_lse = test_tensor_new_shape(3, lse_shape);
    oracle(&c, &q.view, &k.view, &v.view, options, &want, &want_lse);
    test_tensor got = test_tensor_new(c.B, c.Tq, c.Hq, c.D, TEST_LAYOUT_BTHD);
    test_tensor got_lse = test_tensor_new_shape(3, lse_shape);
    double worst = 0.0, worst_lse = 0.0;
    /* int8: the queries rounded to int16 once per task (kernels/quant.h) */
    const double tolerance = dtype == ATTN_DTYPE_Q8 ? 2e-3 : 2e-5;
    CHECK_STATUS(attn_decode(cache, &q.view, &options, &got.view, &got_lse.view, NULL, &error),
                 ATTN_OK, &error, "decode %s", storage_name(dtype));
    CHECK(close_to(&got.view, &want.view, tolerance, &worst) &&
              close_to(&got_lse.view, &want_lse.view, tolerance, &worst_lse),
          "decode with sinks, %s cache (O %.2g, LSE %.2g)", storage_name(dtype), worst, worst_lse);
    if (dtype == ATTN_DTYPE_F32) { /* a caller's contiguous cache, [B, S, Hkv, D] */
        int32_t seqlens[2] = {(int32_t)c.Tk, (int32_t)c.Tk};
        attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, &k.view, &v.view, NULL, seqlens,
                                   NULL, NULL};
        CHECK_STATUS(attn_forward_with_kvcache(&q.view, &view, NULL, &options, &got.view,
                                               &got_lse.view, NULL, &error),
                     ATTN_OK, &error, "forward_with_kvcache");
        CHECK(close_to(&got.view, &want.view, 2e-5, &worst) &&
                  close_to(&got_lse.view, &want_lse.view, 2e-5, &worst_lse),
              "forward_with_kvcache with sinks (O %.2g, LSE %.2g)", worst, worst_lse);
    }
    test_tensor_free(&got), test_tensor_free(&got_lse), test_tensor_free(&want);
    test_tensor_free(&want_lse), test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
    attn_kv_cache_destroy(cache);
}

/* ---- gradients against central differences in double ---- */
enum { GB = 1, GT = 5, GK = 7, GH = 2, GD = 4 }; /* q [1, 5, 2, 4], k / v [1, 7, 2, 4] */

/* L = sum dO . O of causal (bottom-right) attention with sinks, in double. */
static double loss(const double *q, const double *k, const double *v, const double *sinks,
                   const double *dout) {
    const double scale = 1.0 / sqrt((double)GD);
    double total = 0.0;
    for (int h = 0; h < GH; ++h)
        for (int i = 0; i < GT; ++i) {
            double logits[GK], top = sinks[h], sum = 0.0;
            const int last = i + (GK - GT);
            for (int j = 0; j <= last; ++j) {
                double dot = 0.0;
                for (int d = 0; d < GD; ++d) dot += q[(i * GH + h) * GD + d] * k[(j * GH + h) * GD + d];
                logits[j] = scale * dot;
                if (logits[j] > top) top = logits[j];
            }
            for (int j = 0; j <= last; ++j) sum += exp(logits[j] - top);
            sum += exp(sinks[h] - top);
            for (int e = 0; e < GD; ++e) {
                double o = 0.0;
                for (int j = 0; j <= last; ++j) o += exp(logits[j] - top) / sum * v[(j * GH + h) * GD + e];
                total += dout[(i * GH + h) * GD + e] * o;
            }
        }
    return total;
}

/* d loss / d x[n] by central differences (x is one of the loss's arrays). */
static double central(double *x, int n, const double *q, const double *k, const double *v,
                      const double *sinks, const double *dout) {
    const double step = 1e-5, saved = x[n];
    x[n] = saved + step;
    const double up = loss(q, k, v, sinks, dout);
    x[n] = saved - step;
    const double down = loss(q, k, v, sinks, dout);
    x[n] = saved;
    return (up - down) / (2 * step);
}

static void test_gradients(void) {
    test_rng rng;
    test_rng_seed(&rng, 4242);
    test_tensor q = test_tensor_new(GB, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(GB, GK, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(GB, GK, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(GB, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    float sinks[GH] = {0.7f, -0.4f};
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT, options.sinks = sinks;
    const int64_t lse_shape[3] = {GB, GH, GT};
    test_tensor out = test_tensor_new(GB, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_tensor dq = test_tensor_new(GB, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor dk = test_tensor_new(GB, GK, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor dv = test_tensor_new(GB, GK, GH, GD, TEST_LAYOUT_BTHD);
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view, NULL,
                              &error), ATTN_OK, &error, "gradients: forward");
    CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &dout.view,
                               &options, &dq.view, &dk.view, &dv.view, NULL, NULL, &error),
                 ATTN_OK, &error, "gradients: backward");
    float dsinks[GH];
    CHECK_STATUS(attn_sinks_backward(&out.view, &lse.view, &dout.view, &options, dsinks, &error),
                 ATTN_OK, &error, "gradients: attn_sinks_backward");
    double qd[GT * GH * GD], kd[GK * GH * GD], vd[GK * GH * GD], od[GT * GH * GD], sd[GH];
    for (int n = 0; n < GT * GH * GD; ++n) qd[n] = q.allocation[n], od[n] = dout.allocation[n];
    for (int n = 0; n < GK * GH * GD; ++n) kd[n] = k.allocation[n], vd[n] = v.allocation[n];
    for (int h = 0; h < GH; ++h) sd[h] = sinks[h];
    double worst = 0.0;
    for (int n = 0; n < GT * GH * GD; ++n)
        worst = fmax(worst, fabs(dq.allocation[n] - central(qd, n, qd, kd, vd, sd, od)));
    for (int n = 0; n < GK * GH * GD; ++n) {
        worst = fmax(worst, fabs(dk.allocation[n] - central(kd, n, qd, kd, vd, sd, od)));
        worst = fmax(worst, fabs(dv.allocation[n] - central(vd, n, qd, kd, vd, sd, od)));
    }
    CHECK(worst <= 2e-5, "dq, dk, dv with sinks against central differences (%.2g)", worst);
    double sink_worst = 0.0;
    for (int h = 0; h < GH; ++h)
        sink_worst = fmax(sink_worst, fabs(dsinks[h] - central(sd, h, qd, kd, vd, sd, od)));
    CHECK(sink_worst <= 2e-5, "dsinks against central differences (%.2g)", sink_worst);
    /* misuse: no sinks, NULL dsinks */
    attn_options none = attn_options_default();
    CHECK_STATUS(attn_sinks_backward(&out.view, &lse.view, &dout.view, &none, dsinks, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "attn_sinks_backward without sinks");
    CHECK(strstr(error.message, "options.sinks") != NULL, "names options.sinks: %s", error.message);
    CHECK_STATUS(attn_sinks_backward(&out.view, &lse.view, &dout.view, &options, NULL, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "attn_sinks_backward with NULL dsinks");
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
    test_tensor_free(&out), test_tensor_free(&lse), test_tensor_free(&dq), test_tensor_free(&dk);
    test_tensor_free(&dv);
}

/* ---- sink tokens: the first keys kept by the window (StreamingLLM) ---- */
typedef struct token_case {
    const char *name;
    int64_t B, Tq, Tk, Hq, Hkv, D, window_left, sink_tokens;
    int learned; /* learned sinks too */
} token_case;

static const token_case token_cases[] = {
    {"prefill, window 16, 4 sink tokens", 1, 90, 90, 4, 2, 32, 16, 4, 0},
    {"chunk of 20, window 8, 1 sink token, learned", 2, 20, 150, 4, 1, 16, 8, 1, 1},
    {"decode step, window 32, 4 sink tokens", 2, 1, 300, 8, 2, 64, 32, 4, 1},
    {"more sink tokens than the window", 1, 40, 40, 2, 2, 8, 3, 10, 0},
};

/* The same attention as a boolean mask [B, 1, Tq, Tk]: causal (bottom-right) AND (window OR
 * key < sink_tokens). */
static test_tensor token_mask(const token_case *c, uint8_t **storage) {
    *storage = malloc((size_t)(c->B * c->Tq * c->Tk));
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t i = 0; i < c->Tq; ++i)
            for (int64_t j = 0; j < c->Tk; ++j) {
                const int64_t position = i + c->Tk - c->Tq;
                (*storage)[(b * c->Tq + i) * c->Tk + j] =
                    j <= position && (position - j <= c->window_left || j < c->sink_tokens);
            }
    test_tensor mask = {0};
    const int64_t shape[4] = {c->B, 1, c->Tq, c->Tk};
    mask.view = attn_tensor_contiguous(*storage, ATTN_DTYPE_BOOL, 4, shape);
    return mask;
}

static void run_token_case(const token_case *c, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    float sinks[8];
    fill_sinks(sinks, c->Hq, &rng);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.window = 1, options.window_left = c->window_left;
    options.sink_tokens = c->sink_tokens;
    if (c->learned) options.sinks = sinks;
    uint8_t *storage;
    test_tensor mask = token_mask(c, &storage);
    attn_options masked = attn_options_default();
    masked.mask = &mask.view, masked.sinks = options.sinks;
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor out[2], lse[2], dq[2], dk[2], dv[2];
    attn_error error = {0};
    for (int n = 0; n < 2; ++n) { /* [0]: sink tokens, [1]: the mask */
        out[n] = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
        lse[n] = test_tensor_new_shape(3, lse_shape);
        dq[n] = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
        dk[n] = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
        dv[n] = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
        const attn_options *o = n == 0 ? &options : &masked;
        CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, o, &out[n].view, &lse[n].view, NULL,
                                  &error), ATTN_OK, &error, "%s: forward %d", c->name, n);
        CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out[n].view, &lse[n].view,
                                   &dout.view, o, &dq[n].view, &dk[n].view, &dv[n].view, NULL,
                                   NULL, &error), ATTN_OK, &error, "%s: backward %d", c->name, n);
    }
    double worst = test_max_relative_error(&out[0].view, &out[1].view);
    worst = fmax(worst, test_max_relative_error(&lse[0].view, &lse[1].view));
    CHECK(worst <= 2e-5, "%s: forward = the equivalent mask (%.2g)", c->name, worst);
    worst = test_max_relative_error(&dq[0].view, &dq[1].view);
    worst = fmax(worst, test_max_relative_error(&dk[0].view, &dk[1].view));
    worst = fmax(worst, test_max_relative_error(&dv[0].view, &dv[1].view));
    CHECK(worst <= 2e-5, "%s: backward = the equivalent mask (%.2g)", c->name, worst);
    /* decode on a cache (the queries are the newest tokens) */
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = c->B, config.kv_heads = c->Hkv, config.key_dim = config.value_dim = c->D;
    config.capacity = c->Tk, config.page_size = 64;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "cache");
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, &v.view, &error), ATTN_OK, &error, "append");
    CHECK_STATUS(attn_decode(cache, &q.view, &options, &out[0].view, &lse[0].view, NULL, &error),
                 ATTN_OK, &error, "%s: decode", c->name);
    worst = fmax(test_max_relative_error(&out[0].view, &out[1].view),
                 test_max_relative_error(&lse[0].view, &lse[1].view));
    CHECK(worst <= 2e-5, "%s: decode = the equivalent mask (%.2g)", c->name, worst);
    attn_kv_cache_destroy(cache);
    for (int n = 0; n < 2; ++n) {
        test_tensor_free(&out[n]), test_tensor_free(&lse[n]), test_tensor_free(&dq[n]);
        test_tensor_free(&dk[n]), test_tensor_free(&dv[n]);
    }
    free(storage);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
}

/* ---- validation ---- */
static void test_validation(void) {
    test_rng rng;
    test_rng_seed(&rng, 7);
    test_tensor q = test_tensor_new(1, 4, 2, 8, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(1, 6, 2, 8, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(1, 4, 2, 8, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    attn_error error = {0};
    const float bad[3] = {NAN, INFINITY, 0.0f};
    for (int n = 0; n < 2; ++n) {
        float sinks[2] = {0.5f, bad[n]};
        attn_options options = attn_options_default();
        options.sinks = sinks;
        CHECK_STATUS(attn_forward(&q.view, &k.view, &k.view, &options, &out.view, NULL, NULL, &error),
                     ATTN_ERROR_INVALID_ARGUMENT, &error, "sink %g refused", (double)bad[n]);
        CHECK(strstr(error.message, "options.sinks[1]") != NULL, "message names options.sinks[1]: %s",
              error.message);
    }
    attn_options negative = attn_options_default();
    negative.sink_tokens = -1;
    CHECK_STATUS(attn_forward(&q.view, &k.view, &k.view, &negative, &out.view, NULL, NULL, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "sink_tokens = -1 refused");
    CHECK(strstr(error.message, "options.sink_tokens") != NULL, "names options.sink_tokens: %s",
          error.message);
    /* version 1: the struct before `sinks`; the field is never read */
    attn_options old = attn_options_default();
    old.version = 1;
    old.sinks = (const float *)&old; /* garbage a version-1 caller could not have set */
    test_tensor plain = test_tensor_new(1, 4, 2, 8, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_forward(&q.view, &k.view, &k.view, &old, &out.view, NULL, NULL, &error),
                 ATTN_OK, &error, "version-1 options");
    CHECK_STATUS(attn_forward(&q.view, &k.view, &k.view, NULL, &plain.view, NULL, NULL, &error),
                 ATTN_OK, &error, "no options");
    CHECK(test_bitwise_equal(&out.view, &plain.view), "version-1 options read no sinks");
    /* the sinks are an input: out may not overlap them */
    attn_options overlapping = attn_options_default();
    overlapping.sinks = out.allocation;
    CHECK_STATUS(attn_forward(&q.view, &k.view, &k.view, &overlapping, &out.view, NULL, NULL,
                              &error), ATTN_ERROR_INVALID_ARGUMENT, &error, "out over the sinks");
    CHECK(strstr(error.message, "options.sinks") != NULL, "names options.sinks: %s", error.message);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&out), test_tensor_free(&plain);
}

/* ---- varlen: each sequence gets its head's sink, forward and backward ---- */
static void test_varlen(void) {
    enum { B = 3, T = 24, H = 4, D = 16 };
    test_rng rng;
    test_rng_seed(&rng, 808);
    test_tensor q = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    float sinks[H];
    fill_sinks(sinks, H, &rng);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT, options.sinks = sinks;
    const int64_t lse_shape[3] = {B, H, T}, packed_lse_shape[2] = {H, B * T};
    test_tensor out = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_tensor packed_out = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor packed_lse = test_tensor_new_shape(2, packed_lse_shape);
    test_tensor grads[6];
    for (int n = 0; n < 6; ++n) grads[n] = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view, NULL,
                              &error), ATTN_OK, &error, "varlen: padded forward");
    CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &dout.view,
                               &options, &grads[0].view, &grads[1].view, &grads[2].view, NULL,
                               NULL, &error), ATTN_OK, &error, "varlen: padded backward");
    /* the same memory as packed [B * T, H, D]; the packed LSE is [H, B * T] */
    const attn_tensor row = {NULL, ATTN_DTYPE_F32, 3, {B * T, H, D}, {H * D, D, 1}};
    attn_tensor pq = row, pk = row, pv = row, po = row, pd = row, pg[3] = {row, row, row};
    pq.data = q.view.data, pk.data = k.view.data, pv.data = v.view.data;
    po.data = packed_out.view.data, pd.data = dout.view.data;
    for (int n = 0; n < 3; ++n) pg[n].data = grads[3 + n].view.data;
    const int32_t cu[B + 1] = {0, T, 2 * T, 3 * T};
    const attn_varlen sequences = {B, cu, cu, T, T};
    CHECK_STATUS(attn_varlen_forward(&pq, &pk, &pv, &sequences, &options, &po, &packed_lse.view,
                                     NULL, &error), ATTN_OK, &error, "varlen: forward");
    int lse_equal = 1;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < T; ++i)
                lse_equal &= test_get3(&lse.view, b, h, i) == packed_lse.allocation[h * B * T + b * T + i];
    CHECK(test_bitwise_equal(&packed_out.view, &out.view) && lse_equal,
          "varlen with sinks: O and LSE = the padded batch's, bitwise");
    CHECK_STATUS(attn_varlen_backward(&pq, &pk, &pv, &po, &packed_lse.view, &pd, &sequences,
                                      &options, &pg[0], &pg[1], &pg[2], NULL, &error),
                 ATTN_OK, &error, "varlen: backward");
    CHECK(test_bitwise_equal(&grads[3].view, &grads[0].view) &&
              test_bitwise_equal(&grads[4].view, &grads[1].view) &&
              test_bitwise_equal(&grads[5].view, &grads[2].view),
          "varlen with sinks: dq, dk, dv = the padded batch's, bitwise");
    for (int n = 0; n < 6; ++n) test_tensor_free(&grads[n]);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
    test_tensor_free(&out), test_tensor_free(&lse), test_tensor_free(&packed_out);
    test_tensor_free(&packed_lse);
}

int main(void) {
    for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) run_forward_case(&cases[n], 300 + n);
    const attn_dtype storage[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16, ATTN_DTYPE_Q8,
                                  ATTN_DTYPE_FP8_E4M3};
    for (size_t n = 0; n < sizeof storage / sizeof *storage; ++n) run_decode(storage[n], 500 + n);
    for (size_t n = 0; n < sizeof token_cases / sizeof *token_cases; ++n)
        run_token_case(&token_cases[n], 700 + n);
    test_gradients();
    test_varlen();
    test_validation();
    return test_finish();
}
