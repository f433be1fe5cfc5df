/*
 * test_mla_paths.c — MLA (docs/attention-math.md §5, §10.11): the absorbed path equals the
 * naive path for prefill and for step-by-step decoding, with small DeepSeek-V2-like dimensions
 * (with and without query compression) and with the real V2-Lite dimensions for a few
 * tokens; both equal an independent double-precision implementation of the equations
 * written here; the cache holds exactly d_c + d_rope values per token (the RMSNormed latent
 * and the RoPEd key); the default scale is 1/sqrt(d_h + d_rope).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_layers.h"
#include "test_support.h"

typedef struct mla_model {
    attn_mla_config config;
    float *wq, *wq_a, *q_norm, *wq_b, *wkv_a, *kv_norm, *wkv_b, *wo;
    attn_mla_weights weights;
} mla_model;

static float *random_matrix(test_rng *rng, int64_t rows, int64_t columns, float stddev) {
    float *m = malloc((size_t)(rows * columns) * sizeof(float));
    test_fill_normal(rng, m, rows * columns, stddev);
    return m;
}

static mla_model make_model(const attn_mla_config *config, uint64_t seed) {
    mla_model m;
    memset(&m, 0, sizeof m);
    m.config = *config;
    test_rng rng;
    test_rng_seed(&rng, seed);
    const int64_t d = config->hidden, H = config->heads, qh = config->qk_nope_dim + config->qk_rope_dim;
    const int64_t dc = config->kv_lora_rank, dr = config->qk_rope_dim, dv = config->v_head_dim;
    if (config->q_lora_rank == 0) {
        m.wq = random_matrix(&rng, H * qh, d, 1.0f / sqrtf((float)d));
    } else {
        m.wq_a = random_matrix(&rng, config->q_lora_rank, d, 1.0f / sqrtf((float)d));
        m.q_norm = random_matrix(&rng, 1, config->q_lora_rank, 0.2f);
        for (int64_t i = 0; i < config->q_lora_rank; ++i) m.q_norm[i] += 1.0f;
        m.wq_b = random_matrix(&rng, H * qh, config->q_lora_rank,
                               1.0f / sqrtf((float)config->q_lora_rank));
    }
    m.wkv_a = random_matrix(&rng, dc + dr, d, 1.0f / sqrtf((float)d));
    m.kv_norm = random_matrix(&rng, 1, dc, 0.2f);
    for (int64_t i = 0; i < dc; ++i) m.kv_norm[i] += 1.0f;
    m.wkv_b = random_matrix(&rng, H * (config->qk_nope_dim + dv), dc, 1.0f / sqrtf((float)dc));
    m.wo = random_matrix(&rng, d, H * dv, 1.0f / sqrtf((float)(H * dv)));
    attn_mla_weights w = {m.wq, m.wq_a, m.q_norm, m.wq_b, m.wkv_a, m.kv_norm, m.wkv_b, m.wo};
    m.weights = w;
    return m;
}

static void free_model(mla_model *m) {
    free(m->wq), free(m->wq_a), free(m->q_norm), free(m->wq_b);
    free(m->wkv_a), free(m->kv_norm), free(m->wkv_b), free(m->wo);
}

/* Independent oracle: the §5.2 equations in double for one sequence of T tokens at positions
 * 0..T-1, full causal prefill. x float[T][d]; out double[T][d]; latent_out double[T][dc+dr]. */
static void oracle_mla(const mla_model *m, int64_t T, const float *x, double *out,
                       double *latent_out) {
    const attn_mla_config *c = &m->config;
    const int64_t d = c->hidden, H = c->heads, dn = c->qk_nope_dim, dr = c->qk_rope_dim;
    const int64_t dc = c->kv_lora_rank, dv = c->v_head_dim, qh = dn + dr, ql = c->q_lora_rank;
    double *q = calloc((size_t)(T * H * qh), sizeof(double));
    double *kv = calloc((size_t)(T * (dc + dr)), sizeof(double));
    double *o = calloc((size_t)(T * H * dv), sizeof(double));
    double *cq = calloc((size_t)(ql > 0 ? ql : 1), sizeof(double));
    for (int64_t t = 0; t < T; ++t) {
        const float *xt = x + t * d;
        if (ql == 0) {
            for (int64_t r = 0; r < H * qh; ++r) {
                double s = 0;
                for (int64_t i = 0; i < d; ++i) s += (double)m->wq[r * d + i] * xt[i];
                q[t * H * qh + r] = s;
            }
        } else {
            double squares = 0;
            for (int64_t r = 0; r < ql; ++r) {
                double s = 0;
                for (int64_t i = 0; i < d; ++i) s += (double)m->wq_a[r * d + i] * xt[i];
                cq[r] = s, squares += s * s;
            }
            double inverse = 1.0 / sqrt(squares / ql + 1e-6);
            for (int64_t r = 0; r < ql; ++r) cq[r] *= inverse * m->q_norm[r];
            for (int64_t r = 0; r < H * qh; ++r) {
                double s = 0;
                for (int64_t i = 0; i < ql; ++i) s += (double)m->wq_b[r * ql + i] * cq[i];
                q[t * H * qh + r] = s;
            }
        }
        double squares = 0;
        for (int64_t r = 0; r < dc + dr; ++r) {
            double s = 0;
            for (int64_t i = 0; i < d; ++i) s += (double)m->wkv_a[r * d + i] * xt[i];
            kv[t * (dc + dr) + r] = s;
            if (r < dc) squares += s * s;
        }
        double inverse = 1.0 / sqrt(squares / dc + 1e-6);
        for (int64_t r = 0; r < dc; ++r) kv[t * (dc + dr) + r] *= inverse * m->kv_norm[r];
        /* Interleaved RoPE at position t on k_R and every head's q_R; with rope_scaling, the
           frequencies and magnitude of attn_rope_frequencies (checked against transformers
           in test_positional_rope_scaling). */
        double frequencies[64], magnitude = 1.0;
        attn_rope_config rope = {.layout = ATTN_ROPE_INTERLEAVED, .rotary_dim = dr,
                                 .base = 10000.0, .scaling = c->rope_scaling};
        attn_error error;
        if (c->rope_scaling.type != ATTN_ROPE_SCALING_NONE)
            attn_rope_frequencies(&rope, T, frequencies, &magnitude, &error);
        for (int64_t pair = 0; pair < dr / 2; ++pair) {
            double f = c->rope_scaling.type != ATTN_ROPE_SCALING_NONE
                           ? frequencies[pair] : pow(10000.0, -2.0 * pair / dr);
            double angle = t * f, cs = magnitude * cos(angle), sn = magnitude * sin(angle);
            for (int64_t h = -1; h < H; ++h) {
                double *v = h < 0 ? kv + t * (dc + dr) + dc : q + (t * H + h) * qh + dn;
                double a = v[2 * pair], b = v[2 * pair + 1];
                v[2 * pair] = a * cs - b * sn, v[2 * pair + 1] = a * sn + b * cs;
            }
        }
    }
    const double scale = 1.0 / sqrt((double)qh);
    double *logits = malloc((size_t)T * sizeof(double));
    for (int64_t h = 0; h < H; ++h) {
        const float *w_uk = m->wkv_b + h * (dn + dv) * dc, *w_uv = w_uk + dn * dc;
        for (int64_t i = 0; i < T; ++i) {
            double maximum = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= i; ++j) {
                double s = 0;
                for (int64_t e = 0; e < dn; ++e) {
                    double k = 0;
                    for (int64_t a = 0; a < dc; ++a) k += (double)w_uk[e * dc + a] * kv[j * (dc + dr) + a];
                    s += q[(i * H + h) * qh + e] * k;
                }
                for (int64_t e = 0; e < dr; ++e)
                    s += q[(i * H + h) * qh + dn + e] * kv[j * (dc + dr) + dc + e];
                logits[j] = s * scale;
                if (logits[j] > maximum) maximum = logits[j];
            }
            for (int64_t j = 0; j <= i; ++j) sum += exp(logits[j] - maximum);
            for (int64_t e = 0; e < dv; ++e) {
                double acc = 0;
                for (int64_t j = 0; j <= i; ++j) {
                    double v = 0;
                    for (int64_t a = 0; a < dc; ++a) v += (double)w_uv[e * dc + a] * kv[j * (dc + dr) + a];
                    acc += exp(logits[j] - maximum) / sum * v;
                }
                o[(i * H + h) * dv + e] = acc;
            }
        }
    }
    for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < d; ++r) {
            double s = 0;
            for (int64_t i = 0; i < H * dv; ++i) s += (double)m->wo[r * H * dv + i] * o[t * H * dv + i];
            out[t * d + r] = s;
        }
    memcpy(latent_out, kv, (size_t)(T * (dc + dr)) * sizeof(double));
    free(q), free(kv), free(o), free(cq), free(logits);
}

static attn_kv_cache *mla_cache(const attn_mla_config *config, int64_t B, int64_t capacity,
                                int64_t page_size) {
    attn_kv_cache_config cache_config;
    attn_error error;
    CHECK_STATUS(attn_mla_cache_config(config, B, capacity, ATTN_DTYPE_F32, page_size,
                                       &cache_config, &error),
                 ATTN_OK, &error, "mla cache config");
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cache_config, &cache, &error), ATTN_OK, &error, "cache");
    CHECK(attn_kv_cache_bytes_per_token(&cache_config) ==
              (size_t)(config->kv_lora_rank + config->qk_rope_dim) * sizeof(float),
          "the MLA cache stores exactly d_c + d_rope = %lld values per token",
          (long long)(config->kv_lora_rank + config->qk_rope_dim));
    return cache;
}

static double max_relative(const float *a, const float *b, int64_t count) {
    double worst = 0;
    for (int64_t i = 0; i < count; ++i) {
        double e = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Prefill of `prefill` tokens then `steps` single-token steps, naive vs absorbed, for B
 * sequences; with `oracle`, B = 1 and the prefill is also compared with oracle_mla. */
static void compare_paths(const char *name, const attn_mla_config *config, int64_t B,
                          int64_t prefill, int64_t steps, int oracle, uint64_t seed) {
    mla_model m = make_model(config, seed);
    const int64_t d = config->hidden, T = prefill + steps;
    test_rng rng;
    test_rng_seed(&rng, seed + 1);
    float *x = random_matrix(&rng, B * T, d, 1.0f);
    attn_kv_cache *naive_cache = mla_cache(config, B, T, 16);
    attn_kv_cache *absorbed_cache = mla_cache(config, B, T, 0);
    double worst = 0;
    attn_error error;
    float *oracle_check = NULL;
    for (int64_t first = 0; first < T;) {
        const int64_t count = first == 0 ? prefill : 1;
        attn_tensor hidden = {x + first * d, ATTN_DTYPE_F32, 3, {B, count, d}, {T * d, d, 1}};
        float *naive = malloc((size_t)(B * count * d) * sizeof(float));
        float *absorbed = malloc((size_t)(B * count * d) * sizeof(float));
        attn_tensor naive_out = {naive, ATTN_DTYPE_F32, 3, {B, count, d}, {count * d, d, 1}};
        attn_tensor absorbed_out = {absorbed, ATTN_DTYPE_F32, 3, {B, count, d}, {count * d, d, 1}};
        CHECK_STATUS(attn_mla_forward(config, &m.weights, naive_cache, &hidden, ATTN_MLA_NAIVE,
                                      &naive_out, &error),
                     ATTN_OK, &error, "%s naive at %lld", name, (long long)first);
        CHECK_STATUS(attn_mla_forward(config, &m.weights, absorbed_cache, &hidden,
                                      ATTN_MLA_ABSORBED, &absorbed_out, &error),
                     ATTN_OK, &error, "%s absorbed at %lld", name, (long long)first);
        double e = max_relative(absorbed, naive, B * count * d);
        if (e > worst) worst = e;
        if (first == 0 && oracle) oracle_check = naive, naive = NULL;
        free(naive), free(absorbed);
        first += count;
    }
    CHECK(worst <= 1e-5, "%s: absorbed = naive, prefill %lld + %lld steps (err %.3g)", name,
          (long long)prefill, (long long)steps, worst);
    if (oracle) {
        double *expected = malloc((size_t)(T * d) * sizeof(double));
        const int64_t key_row = config->kv_lora_rank + config->qk_rope_dim;
        double *latents = malloc((size_t)(T * key_row) * sizeof(double));
        oracle_mla(&m, T, x, expected, latents);
        double e = 0;
        for (int64_t i = 0; i < prefill * d; ++i) {
            double r = fabs(oracle_check[i] - expected[i]) / (1.0 + fabs(expected[i]));
            if (!(r <= e)) e = r;
        }
        CHECK(e <= 1e-5, "%s: prefill = double-precision oracle of the equations (err %.3g)",
              name, e);
        float *stored = malloc((size_t)(T * key_row) * sizeof(float));
        attn_tensor stored_view = attn_tensor_f32_4d(stored, 1, T, 1, key_row);
        CHECK_STATUS(attn_kv_cache_read(absorbed_cache, 0, 0, &stored_view, NULL, &error), ATTN_OK,
                     &error, "read latents");
        double latent_error = 0;
        for (int64_t i = 0; i < T * key_row; ++i) {
            double r = fabs(stored[i] - latents[i]) / (1.0 + fabs(latents[i]));
            if (!(r <= latent_error)) latent_error = r;
        }
        CHECK(latent_error <= 1e-5,
              "%s: cached values = RMSNorm(c_KV) and RoPE(k_R) at absolute positions (%.3g)", name,
              latent_error);
        free(expected), free(latents), free(stored);
    }
    free(oracle_check);
    attn_kv_cache_destroy(naive_cache), attn_kv_cache_destroy(absorbed_cache);
    free(x), free_model(&m);
}

int main(void) {
    /* Small DeepSeek-V2-like: query compression, and none (V2-Lite style). */
    attn_mla_config small = {32, 4, 16, 12, 8, 4, 6, 0.0, 0.0f, 0.0f, {0}};
    compare_paths("small, q_lora_rank 16", &small, 1, 7, 5, 1, 1);
    compare_paths("small, q_lora_rank 16, B = 3", &small, 3, 6, 4, 0, 2);
    attn_mla_config lite_small = small;
    lite_small.q_lora_rank = 0;
    compare_paths("small, q_lora_rank 0", &lite_small, 1, 9, 3, 1, 3);
    /* DeepSeek-V2's YaRN on the RoPE dims (magnitude m(4, 1) / m(4, 0.5) != 1). */
    attn_mla_config yarn = small;
    yarn.rope_scaling = (attn_rope_scaling){.type = ATTN_ROPE_SCALING_YARN, .factor = 4.0,
                                            .original_max_positions = 4, .mscale = 1.0,
                                            .mscale_all_dim = 0.5};
    compare_paths("small, YaRN", &yarn, 1, 8, 4, 1, 5);

    /* The real DeepSeek-V2-Lite attention dimensions, a few tokens. */
    attn_mla_config lite = {2048, 16, 0, 512, 128, 64, 128, 0.0, 0.0f, 0.0f, {0}};
    compare_paths("V2-Lite dims", &lite, 1, 3, 2, 0, 4);

    /* Errors: a missing weight names it; a cache of the wrong layout. */
    mla_model m = make_model(&small, 9);
    attn_mla_weights missing = m.weights;
    missing.wq_b = NULL;
    attn_kv_cache *cache = mla_cache(&small, 1, 4, 0);
    float x[32] = {0}, y[32];
    attn_tensor hidden = {x, ATTN_DTYPE_F32, 3, {1, 1, 32}, {32, 32, 1}};
    attn_tensor out = {y, ATTN_DTYPE_F32, 3, {1, 1, 32}, {32, 32, 1}};
    attn_error error;
    CHECK_STATUS(attn_mla_forward(&small, &missing, cache, &hidden, ATTN_MLA_ABSORBED, &out, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "missing wq_b");
    CHECK(strstr(error.message, "wq_b") != NULL, "message names wq_b: %s", error.message);
    attn_tensor five = hidden;
    five.shape[1] = 5;
    attn_tensor five_out = out;
    five_out.shape[1] = 5;
    float x5[160] = {0}, y5[160];
    five.data = x5, five_out.data = y5;
    five.stride[0] = five_out.stride[0] = 160;
    CHECK_STATUS(attn_mla_forward(&small, &m.weights, cache, &five, ATTN_MLA_NAIVE, &five_out, &error),
                 ATTN_ERROR_CAPACITY, &error, "5 tokens into a capacity-4 cache");
    CHECK(attn_kv_cache_length(cache, 0) == 0, "nothing appended on a capacity error");
    attn_kv_cache_destroy(cache);
    free_model(&m);
    return test_finish();
}
