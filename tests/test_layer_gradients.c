/*
 * test_layer_gradients.c — the attention layer (single-head, MHA, MQA, GQA; biases; RoPE in
 * both layouts with partial rotary dims; causal; self- and cross-attention, Tq != Tk) against
 * an independent double-precision transcription of the whole layer: the forward output, and
 * every parameter and input gradient against central finite differences of that double
 * reference (loss = Σ out ∘ G), also with per-projection biases (Qwen2: q, k, v only) and
 * RoPE at explicit position ids per batch row with YaRN scaling (cos/sin magnitude != 1).
 * Also: parameter counts (4n² for n = 512, Llama-2-70B-like 150,994,944), deterministic
 * Xavier init within its bound, argument errors.
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_case {
    const char *name;
    int64_t d, h, g, dh;
    int bias, rope;
    attn_rope_layout rope_layout;
    int64_t rope_dim;
    int causal;
    int cross; /* nonzero: x_key_value is a separate input of length Tk */
    int64_t B, Tq, Tk;
    unsigned bias_mask; /* nonzero: biases on these projections only (1 q, 2 k, 4 v, 8 o) */
    int positions;      /* nonzero: gapped position ids per batch row (attn_layer_forward_at) */
    int yarn;           /* nonzero: YaRN scaling, factor 4 over 4 trained positions */
} layer_case;

static const layer_case layer_cases[] = {
    {"single head", 6, 1, 1, 4, 0, 0, ATTN_ROPE_HALF, 0, 0, 0, 1, 5, 5, 0, 0, 0},
    {"MHA causal bias", 8, 2, 2, 4, 1, 0, ATTN_ROPE_HALF, 0, 1, 0, 2, 4, 4, 0, 0, 0},
    {"GQA rope half", 8, 4, 2, 4, 1, 1, ATTN_ROPE_HALF, 4, 1, 0, 1, 6, 6, 0, 0, 0},
    {"MQA rope interleaved partial", 5, 3, 1, 6, 0, 1, ATTN_ROPE_INTERLEAVED, 4, 0, 0, 2, 3, 3,
     0, 0, 0},
    {"cross GQA Tq<Tk causal", 7, 4, 2, 3, 1, 0, ATTN_ROPE_HALF, 0, 1, 1, 1, 3, 5, 0, 0, 0},
    {"cross MHA Tq>Tk rope", 6, 2, 2, 4, 0, 1, ATTN_ROPE_HALF, 2, 0, 1, 2, 4, 2, 0, 0, 0},
    {"GQA qkv biases, ids, YaRN", 8, 4, 2, 4, 0, 1, ATTN_ROPE_HALF, 4, 1, 0, 2, 5, 5, 7, 1, 1},
    {"MHA o bias only, ids", 6, 2, 2, 4, 0, 1, ATTN_ROPE_INTERLEAVED, 2, 0, 0, 2, 4, 4, 8, 1, 0},
    {"cross k bias, ids, YaRN", 6, 2, 1, 4, 0, 1, ATTN_ROPE_HALF, 4, 0, 1, 2, 3, 4, 2, 1, 1},
};

/* The gapped position ids of a case (row b: b * 7 + 3 t + (t > 1)), at most 2 rows x 6. */
static const int64_t *case_positions(const layer_case *lc, int keys, int64_t *storage) {
    if (!lc->positions) return NULL;
    int64_t T = keys ? lc->Tk : lc->Tq;
    for (int64_t b = 0; b < lc->B; ++b)
        for (int64_t t = 0; t < T; ++t) storage[b * T + t] = b * 7 + 3 * t + (t > 1) + keys;
    return storage;
}

static int case_has_bias(const layer_case *lc, int projection) {
    return lc->bias_mask ? (int)((lc->bias_mask >> projection) & 1u) : lc->bias;
}

/* The RoPE of a case (YaRN scaling when asked). */
static attn_rope_config case_rope(const layer_case *lc) {
    attn_rope_config rope = {.layout = lc->rope_layout,
                             .rotary_dim = lc->rope_dim ? lc->rope_dim : lc->dh,
                             .base = 10000.0};
    if (lc->yarn)
        rope.scaling = (attn_rope_scaling){.type = ATTN_ROPE_SCALING_YARN, .factor = 4.0,
                                           .original_max_positions = 4};
    return rope;
}

/* ---- the double-precision reference layer ---- */

/* y[rows][out] = x[rows][in] Wᵀ + b, all double. */
static void linear_double(const double *x, int64_t rows, int64_t in, const double *w,
                          const double *b, int64_t out, double *y) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double sum = b ? b[o] : 0.0;
            for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
            y[r * out + o] = sum;
        }
}

/* RoPE on [B][T][heads][dh] double at positions[b][t] (NULL: t), frequencies f[i] (NULL:
 * 10000^(-2i/rotary_dim)), cos/sin times `magnitude`. */
static void rope_double(double *x, int64_t B, int64_t T, int64_t heads, int64_t dh,
                        attn_rope_layout layout, int64_t rotary_dim, const int64_t *positions,
                        const double *frequencies, double magnitude) {
    int64_t half = rotary_dim / 2;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < heads; ++h) {
                double *v = x + ((b * T + t) * heads + h) * dh;
                double position = positions ? (double)positions[b * T + t] : (double)t;
                for (int64_t i = 0; i < half; ++i) {
                    double f = frequencies ? frequencies[i]
                                           : pow(10000.0, -2.0 * (double)i / (double)rotary_dim);
                    double angle = position * f;
                    int64_t p = layout == ATTN_ROPE_INTERLEAVED ? 2 * i : i;
                    int64_t q = layout == ATTN_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
                    double a = v[p], c = v[q];
                    v[p] = magnitude * (a * cos(angle) - c * sin(angle));
                    v[q] = magnitude * (a * sin(angle) + c * cos(angle));
                }
            }
}

/* Parameters as doubles in the attn_layer order (q, k, v, o weights, then biases). */
typedef struct double_layer {
    double *q_weight, *k_weight, *v_weight, *o_weight, *q_bias, *k_bias, *v_bias, *o_bias;
} double_layer;

static double_layer double_layer_view(double *parameters, const layer_case *lc) {
    double_layer p = {0};
    int64_t qw = lc->h * lc->dh, kw = lc->g * lc->dh;
    double *cursor = parameters;
    p.q_weight = cursor; cursor += qw * lc->d;
    p.k_weight = cursor; cursor += kw * lc->d;
    p.v_weight = cursor; cursor += kw * lc->d;
    p.o_weight = cursor; cursor += lc->d * qw;
    if (case_has_bias(lc, 0)) { p.q_bias = cursor; cursor += qw; }
    if (case_has_bias(lc, 1)) { p.k_bias = cursor; cursor += kw; }
    if (case_has_bias(lc, 2)) { p.v_bias = cursor; cursor += kw; }
    if (case_has_bias(lc, 3)) p.o_bias = cursor;
    return p;
}

/* out[B][Tq][d] of the layer in double: the specification, line by line. */
static void layer_forward_double(const layer_case *lc, const double *parameters,
                                 const double *x_query, const double *x_kv, double *out) {
    double_layer p = double_layer_view((double *)parameters, lc);
    int64_t B = lc->B, Tq = lc->Tq, Tk = lc->Tk, qw = lc->h * lc->dh, kw = lc->g * lc->dh;
    double *q = malloc((size_t)(B * Tq * qw) * sizeof(double));
    double *k = malloc((size_t)(B * Tk * kw) * sizeof(double));
    double *v = malloc((size_t)(B * Tk * kw) * sizeof(double));
    double *o = malloc((size_t)(B * Tq * qw) * sizeof(double));
    double *logits = malloc((size_t)Tk * sizeof(double));
    linear_double(x_query, B * Tq, lc->d, p.q_weight, p.q_bias, qw, q);
    linear_double(x_kv, B * Tk, lc->d, p.k_weight, p.k_bias, kw, k);
    linear_double(x_kv, B * Tk, lc->d, p.v_weight, p.v_bias, kw, v);
    if (lc->rope) {
        /* Scaled frequencies and magnitude from attn_rope_frequencies (checked against
           transformers in test_positional_rope_scaling); NULL = the plain formula here. */
        attn_rope_config rope = case_rope(lc);
        int64_t rotary = rope.rotary_dim, query_ids[12], key_ids[12];
        double frequencies[8], magnitude = 1.0;
        attn_error error;
        if (lc->yarn) attn_rope_frequencies(&rope, 64, frequencies, &magnitude, &error);
        const int64_t *query_positions = case_positions(lc, 0, query_ids);
        const int64_t *key_positions = lc->cross ? case_positions(lc, 1, key_ids)
                                                 : query_positions;
        rope_double(q, B, Tq, lc->h, lc->dh, lc->rope_layout, rotary, query_positions,
                    lc->yarn ? frequencies : NULL, magnitude);
        rope_double(k, B, Tk, lc->g, lc->dh, lc->rope_layout, rotary, key_positions,
                    lc->yarn ? frequencies : NULL, magnitude);
    }
    double scale = 1.0 / sqrt((double)lc->dh);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < lc->h; ++h) {
            int64_t kv_head = h / (lc->h / lc->g); /* contiguous groups */
            for (int64_t i = 0; i < Tq; ++i) {
                const double *qi = q + ((b * Tq + i) * lc->h + h) * lc->dh;
                double maximum = -INFINITY;
                for (int64_t j = 0; j < Tk; ++j) {
                    /* bottom-right causal: key j allowed iff j <= i + Tk - Tq */
                    if (lc->causal && j > i + Tk - Tq) { logits[j] = -INFINITY; continue; }
                    const double *kj = k + ((b * Tk + j) * lc->g + kv_head) * lc->dh;
                    double s = 0.0;
                    for (int64_t c = 0; c < lc->dh; ++c) s += qi[c] * kj[c];
                    logits[j] = scale * s;
                    if (logits[j] > maximum) maximum = logits[j];
                }
                double total = 0.0;
                for (int64_t j = 0; j < Tk; ++j) {
                    logits[j] = isinf(logits[j]) ? 0.0 : exp(logits[j] - maximum);
                    total += logits[j];
                }
                double *oi = o + ((b * Tq + i) * lc->h + h) * lc->dh;
                for (int64_t c = 0; c < lc->dh; ++c) {
                    double sum = 0.0;
                    for (int64_t j = 0; j < Tk; ++j)
                        sum += logits[j] * v[((b * Tk + j) * lc->g + kv_head) * lc->dh + c];
                    oi[c] = sum / total;
                }
            }
        }
    linear_double(o, B * Tq, qw, p.o_weight, p.o_bias, lc->d, out);
    free(q); free(k); free(v); free(o); free(logits);
}

static double loss_double(const layer_case *lc, const double *parameters, const double *x_query,
                          const double *x_kv, const double *weights_g, double *scratch) {
    layer_forward_double(lc, parameters, x_query, x_kv, scratch);
    double loss = 0.0;
    for (int64_t i = 0; i < lc->B * lc->Tq * lc->d; ++i) loss += scratch[i] * weights_g[i];
    return loss;
}

/* Central finite difference of the loss with respect to values[index], in double. */
static double finite_difference(const layer_case *lc, double *parameters, double *x_query,
                                double *x_kv, const double *weights_g, double *scratch,
                                double *values, int64_t index) {
    const double step = 1e-6;
    double saved = values[index];
    values[index] = saved + step;
    double plus = loss_double(lc, parameters, x_query, x_kv, weights_g, scratch);
    values[index] = saved - step;
    double minus = loss_double(lc, parameters, x_query, x_kv, weights_g, scratch);
    values[index] = saved;
    return (plus - minus) / (2 * step);
}

static double relative_error(double got, double expected) {
    return fabs(got - expected) / (1e-3 + fabs(expected));
}

static void test_layer_case(const layer_case *lc, test_rng *rng) {
    attn_layer_config config = {0};
    config.model_dim = lc->d;
    config.query_heads = lc->h;
    config.kv_heads = lc->g;
    config.head_dim = lc->dh;
    config.bias = lc->bias;
    config.rope = lc->rope;
    config.rope_layout = lc->rope_layout;
    config.rope_dim = lc->rope_dim;
    if (lc->bias_mask) {
        config.bias_q = lc->bias_mask & 1u;
        config.bias_k = (lc->bias_mask >> 1) & 1u;
        config.bias_v = (lc->bias_mask >> 2) & 1u;
        config.bias_o = (lc->bias_mask >> 3) & 1u;
    }
    config.rope_scaling = case_rope(lc).scaling;
    attn_layer layer, gradients;
    attn_error error;
    CHECK_STATUS(attn_layer_create(&config, &layer, &error), ATTN_OK, &error, "%s", lc->name);
    CHECK_STATUS(attn_layer_create(&config, &gradients, &error), ATTN_OK, &error, "%s", lc->name);
    CHECK_STATUS(attn_layer_init_xavier(&layer, 1234, &error), ATTN_OK, &error, "%s", lc->name);
    /* Non-zero biases so their paths are exercised. */
    float *biases[4] = {layer.q_bias, layer.k_bias, layer.v_bias, layer.o_bias};
    const int64_t bias_sizes[4] = {lc->h * lc->dh, lc->g * lc->dh, lc->g * lc->dh, lc->d};
    for (int p = 0; p < 4; ++p) {
        CHECK((biases[p] != NULL) == case_has_bias(lc, p), "%s: bias %d present as configured",
              lc->name, p);
        if (biases[p] != NULL) test_fill_normal(rng, biases[p], bias_sizes[p], 0.3f);
    }
    int64_t n_query = lc->B * lc->Tq * lc->d, n_kv = lc->B * lc->Tk * lc->d;
    float *x_query = malloc((size_t)n_query * sizeof(float));
    float *x_kv = lc->cross ? malloc((size_t)n_kv * sizeof(float)) : NULL;
    float *out = malloc((size_t)n_query * sizeof(float));
    float *g = malloc((size_t)n_query * sizeof(float));
    float *dx_query = malloc((size_t)n_query * sizeof(float));
    float *dx_kv = lc->cross ? malloc((size_t)n_kv * sizeof(float)) : NULL;
    test_fill_normal(rng, x_query, n_query, 1.0f);
    if (x_kv) test_fill_normal(rng, x_kv, n_kv, 1.0f);
    test_fill_normal(rng, g, n_query, 1.0f);

    attn_options options = attn_options_default();
    if (lc->causal) {
        options.causal = 1;
        options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    }
    attn_layer_activations activations = {0};
    int64_t query_ids[12], key_ids[12];
    attn_status status = attn_layer_forward_at(
        &layer, lc->B, lc->Tq, x_query, case_positions(lc, 0, query_ids), lc->Tk, x_kv,
        lc->cross ? case_positions(lc, 1, key_ids) : NULL, &options, &activations, out, NULL,
        &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s forward", lc->name);
    if (status == ATTN_OK) {
        status = attn_layer_backward(&layer, lc->B, lc->Tq, x_query, lc->Tk, x_kv, &options,
                                     &activations, g, &gradients, dx_query, dx_kv, NULL, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s backward", lc->name);
    }

    /* Double copies of everything. */
    int64_t P = layer.parameter_count;
    double *parameters = malloc((size_t)P * sizeof(double));
    double *xq = calloc((size_t)n_query, sizeof(double));
    double *xkv = lc->cross ? malloc((size_t)n_kv * sizeof(double)) : xq;
    double *gd = malloc((size_t)n_query * sizeof(double));
    double *scratch = malloc((size_t)n_query * sizeof(double));
    for (int64_t i = 0; i < P; ++i) parameters[i] = layer.parameters[i];
    for (int64_t i = 0; i < n_query; ++i) { xq[i] = x_query[i]; gd[i] = g[i]; }
    if (lc->cross) for (int64_t i = 0; i < n_kv; ++i) xkv[i] = x_kv[i];

    layer_forward_double(lc, parameters, xq, xkv, scratch);
    double forward_error = 0.0;
    for (int64_t i = 0; i < n_query; ++i) {
        double e = fabs(out[i] - scratch[i]) / (1.0 + fabs(scratch[i]));
        if (e > forward_error) forward_error = e;
    }
    CHECK(status == ATTN_OK && forward_error < 1e-5, "%s: forward vs double reference %.3g",
          lc->name, forward_error);

    if (status == ATTN_OK) {
        double worst_parameter = 0.0, worst_input = 0.0;
        for (int64_t i = 0; i < P; ++i) {
            double fd = finite_difference(lc, parameters, xq, xkv, gd, scratch, parameters, i);
            double e = relative_error(gradients.parameters[i], fd);
            if (e > worst_parameter) worst_parameter = e;
        }
        for (int64_t i = 0; i < n_query; ++i) {
            double fd = finite_difference(lc, parameters, xq, xkv, gd, scratch, xq, i);
            double e = relative_error(dx_query[i], fd);
            if (e > worst_input) worst_input = e;
        }
        if (lc->cross)
            for (int64_t i = 0; i < n_kv; ++i) {
                double fd = finite_difference(lc, parameters, xq, xkv, gd, scratch, xkv, i);
                double e = relative_error(dx_kv[i], fd);
                if (e > worst_input) worst_input = e;
            }
        CHECK(worst_parameter < 2e-3, "%s: %lld parameter gradients vs finite differences %.3g",
              lc->name, (long long)P, worst_parameter);
        CHECK(worst_input < 2e-3, "%s: input gradients vs finite differences %.3g", lc->name,
              worst_input);
    }

    attn_layer_activations_free(&activations);
    attn_layer_destroy(&layer);
    attn_layer_destroy(&gradients);
    free(x_query); free(x_kv); free(out); free(g); free(dx_query); free(dx_kv);
    free(parameters); free(xq); if (lc->cross) free(xkv); free(gd); free(scratch);
}

static void test_parameter_counts(void) {
    const struct { int64_t d, h, g, dh; int bias; int64_t expected; } cases[] = {
        {512, 8, 8, 64, 0, 4LL * 512 * 512},             /* MHA: 4n² */
        {512, 8, 8, 64, 1, 4LL * 512 * 512 + 4 * 512},   /* + 4n with biases */
        {8192, 64, 8, 128, 0, 150994944LL},              /* Llama-2-70B-like GQA */
        {4096, 32, 1, 128, 0, 2LL * 4096 * 4096 + 2LL * 4096 * 128}, /* MQA: 2d² + 2·d·dh */
        {4096, 32, 1, 128, 1, 2LL * 4096 * 4096 + 2LL * 4096 * 128 + 2 * 4096 + 2 * 128},
        {10, 3, 3, 7, 1, 2LL * 10 * 7 * 6 + 3 * 7 + 2 * 3 * 7 + 10},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        attn_layer_config config = {0};
        config.model_dim = cases[c].d;
        config.query_heads = cases[c].h;
        config.kv_heads = cases[c].g;
        config.head_dim = cases[c].dh;
        config.bias = cases[c].bias;
        int64_t count = -1;
        attn_error error;
        CHECK_STATUS(attn_layer_parameter_count(&config, &count, &error), ATTN_OK, &error,
                     "count case %zu", c);
        CHECK(count == cases[c].expected, "case %zu: %lld parameters, expected %lld", c,
              (long long)count, (long long)cases[c].expected);
    }
    attn_layer_config config = {0};
    config.model_dim = 16; config.query_heads = 6; config.kv_heads = 4; config.head_dim = 4;
    int64_t count;
    attn_error error;
    CHECK_STATUS(attn_layer_parameter_count(&config, &count, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "kv_heads 4 does not divide 6");
    CHECK(strstr(error.message, "config.kv_heads = 4") != NULL, "message: %s", error.message);
    config.kv_heads = 2; config.rope = 1; config.rope_dim = 3;
    CHECK_STATUS(attn_layer_parameter_count(&config, &count, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "odd rope_dim");
    config.rope = 0; config.model_dim = INT64_MAX / 4; config.head_dim = 1 << 20;
    CHECK_STATUS(attn_layer_parameter_count(&config, &count, &error), ATTN_ERROR_OVERFLOW, &error,
                 "overflowing count");
}

static void test_xavier(void) {
    attn_layer_config config = {0};
    config.model_dim = 32; config.query_heads = 4; config.kv_heads = 2; config.head_dim = 8;
    config.bias = 1;
    attn_layer a, b;
    attn_error error;
    CHECK_STATUS(attn_layer_create(&config, &a, &error), ATTN_OK, &error, "create a");
    CHECK_STATUS(attn_layer_create(&config, &b, &error), ATTN_OK, &error, "create b");
    attn_layer_init_xavier(&a, 7, NULL);
    attn_layer_init_xavier(&b, 7, NULL);
    CHECK(memcmp(a.parameters, b.parameters, (size_t)a.parameter_count * sizeof(float)) == 0,
          "same seed, same weights");
    attn_layer_init_xavier(&b, 8, NULL);
    CHECK(memcmp(a.parameters, b.parameters, (size_t)a.parameter_count * sizeof(float)) != 0,
          "different seed, different weights");
    /* q_proj: fan_in 32, fan_out 32 -> bound sqrt(6/64); k_proj: 32, 16 -> sqrt(6/48). */
    double bound_q = sqrt(6.0 / 64.0), bound_k = sqrt(6.0 / 48.0), max_q = 0, max_k = 0, sum = 0;
    for (int64_t i = 0; i < 32 * 32; ++i) {
        max_q = fmax(max_q, fabs(a.q_weight[i]));
        sum += a.q_weight[i];
    }
    for (int64_t i = 0; i < 16 * 32; ++i) max_k = fmax(max_k, fabs(a.k_weight[i]));
    CHECK(max_q <= bound_q && max_q > 0.9 * bound_q, "q_proj within and near its bound: %.4f / %.4f",
          max_q, bound_q);
    CHECK(max_k <= bound_k && max_k > 0.9 * bound_k, "k_proj bound %.4f / %.4f", max_k, bound_k);
    CHECK(fabs(sum / 1024) < 0.05, "q_proj mean %.4f near 0", sum / 1024);
    int zero_biases = 1;
    for (int64_t i = 0; i < 16 + 8 + 8 + 32; ++i) if (a.q_bias[i] != 0.0f) zero_biases = 0;
    CHECK(zero_biases, "biases start at 0");
    attn_layer_destroy(&a);
    attn_layer_destroy(&b);
}

int main(void) {
    test_rng rng;
    test_rng_seed(&rng, 41);
    test_parameter_counts();
    test_xavier();
    for (size_t c = 0; c < sizeof layer_cases / sizeof layer_cases[0]; ++c)
        test_layer_case(&layer_cases[c], &rng);
    return test_finish();
}
