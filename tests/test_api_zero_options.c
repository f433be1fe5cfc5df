/*
 * test_api_zero_options.c — a zero-initialised attn_options (= {0}), NULL options, and
 * attn_options_default() all mean plain scaled dot-product attention, with a zero-initialised
 * or NULL attn_execution meaning the defaults, at every entry point: attn_forward,
 * attn_reference_forward, attn_backward, attn_reference_backward, attn_decode and
 * attn_reference_decode. Each result is checked against an independent double-precision
 * computation (test_plain_attention in tests/support):
 *   S = Q Kᵀ / sqrt(Dk),  P = softmax_rows(S),  O = P V,  LSE = log Σ_j exp(S_ij)
 *   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dO ∘ O)),  dQ = dS K / sqrt(Dk),
 *   dK = dSᵀ Q / sqrt(Dk)
 * with GQA (query head h reads KV head h / (Hq / Hkv); KV gradients sum over the group),
 * Tq != Tk and Dk != Dv, so that no mask, window or alignment is implied by zero.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { B = 2, TQ = 5, TK = 9, HQ = 4, HKV = 2, DK = 8, DV = 6, GROUP = HQ / HKV };

/* Contiguous [B][T][H][D] index. */
#define AT(t, h, d, T, H, D) ((((int64_t)(t)) * (H) + (h)) * (D) + (d))

typedef struct problem {
    float q[B * TQ * HQ * DK], k[B * TK * HKV * DK], v[B * TK * HKV * DV], dout[B * TQ * HQ * DV];
    /* The double-precision oracle. */
    double out[B * TQ * HQ * DV], lse[B * HQ * TQ];
    double dq[B * TQ * HQ * DK], dk[B * TK * HKV * DK], dv[B * TK * HKV * DV];
} problem;

/* Plain attention of batch b's Tq queries over its first `keys` keys, in double
 * (test_plain_attention): O, LSE and the gradients, accumulated into dq / dk / dv (zeroed by
 * the caller). */
static void oracle(problem *p, int64_t b, int64_t keys) {
    static const test_plain_shape shape = {TQ, TK, HQ, HKV, DK, DV};
    test_plain_attention(&shape, keys, p->q + b * TQ * HQ * DK, p->k + b * TK * HKV * DK,
                         p->v + b * TK * HKV * DV, p->dout + b * TQ * HQ * DV,
                         p->out + b * TQ * HQ * DV, p->lse + b * HQ * TQ,
                         p->dq + b * TQ * HQ * DK, p->dk + b * TK * HKV * DK,
                         p->dv + b * TK * HKV * DV);
}

/* max |actual - expected| / (1 + |expected|) over n values. */
static double worst_error(const float *actual, const double *expected, int64_t n) {
    double worst = 0.0;
    for (int64_t x = 0; x < n; ++x) {
        const double e = fabs((double)actual[x] - expected[x]) / (1.0 + fabs(expected[x]));
        if (!(e <= worst)) worst = e; /* NaN counts as the worst */
    }
    return worst;
}

/* Sets every float of a static array to NaN (so that an unwritten element fails). */
#define FILL_NAN(array)                                                                       \
    for (size_t x_ = 0; x_ < sizeof(array) / sizeof((array)[0]); ++x_) (array)[x_] = NAN

/* O [B, Tq, Hq, Dv] and LSE [B, Hq, Tq] of one run against the oracle's, 1e-5 each (the
 * oracle's LSE is [b][h][i] like the library's). */
static void check_out_lse(const float *out, const float *lse, const problem *p,
                          const char *entry, const char *which, const char *name) {
    const double out_error = worst_error(out, p->out, B * TQ * HQ * DV);
    const double lse_error = worst_error(lse, p->lse, B * HQ * TQ);
    CHECK(out_error <= 1e-5 && lse_error <= 1e-5,
          "%s (%s), %s: plain attention (O error %.3g, LSE error %.3g)", entry, which, name,
          out_error, lse_error);
}

/* The option / execution pairs that must all mean "plain attention, defaults". */
typedef struct variant {
    const char *name;
    const attn_options *options;
    const attn_execution *execution;
} variant;

static const attn_options zero_options = {0};
static const attn_execution zero_execution = {0};
static attn_options default_options;
static attn_execution default_execution;

static const variant *variants(int *count) {
    default_options = attn_options_default();
    default_execution = attn_execution_default();
    static variant table[4];
    table[0] = (variant){"options = {0}, execution = {0}", &zero_options, &zero_execution};
    table[1] = (variant){"options = NULL, execution = NULL", NULL, NULL};
    table[2] = (variant){"options = {0}, execution = NULL", &zero_options, NULL};
    table[3] = (variant){"attn_options_default(), attn_execution_default()", &default_options,
                         &default_execution};
    *count = 4;
    return table;
}

static void test_forward_and_backward(problem *p) {
    memset(p->dq, 0, sizeof p->dq), memset(p->dk, 0, sizeof p->dk), memset(p->dv, 0, sizeof p->dv);
    for (int64_t b = 0; b < B; ++b) oracle(p, b, TK);
    static float out[B * TQ * HQ * DV], lse[B * HQ * TQ];
    static float dq[B * TQ * HQ * DK], dk[B * TK * HKV * DK], dv[B * TK * HKV * DV];
    attn_tensor q_view = attn_tensor_f32_4d(p->q, B, TQ, HQ, DK);
    attn_tensor k_view = attn_tensor_f32_4d(p->k, B, TK, HKV, DK);
    attn_tensor v_view = attn_tensor_f32_4d(p->v, B, TK, HKV, DV);
    attn_tensor dout_view = attn_tensor_f32_4d(p->dout, B, TQ, HQ, DV);
    attn_tensor out_view = attn_tensor_f32_4d(out, B, TQ, HQ, DV);
    const int64_t lse_shape[3] = {B, HQ, TQ};
    attn_tensor lse_view = attn_tensor_contiguous(lse, ATTN_DTYPE_F32, 3, lse_shape);
    attn_tensor dq_view = attn_tensor_f32_4d(dq, B, TQ, HQ, DK);
    attn_tensor dk_view = attn_tensor_f32_4d(dk, B, TK, HKV, DK);
    attn_tensor dv_view = attn_tensor_f32_4d(dv, B, TK, HKV, DV);

    int count;
    const variant *table = variants(&count);
    for (int n = 0; n < count; ++n) {
        const variant *w = &table[n];
        for (int reference = 0; reference < 2; ++reference) {
            const char *which = reference ? "reference" : "tiled";
            attn_error error;
            FILL_NAN(out);
            FILL_NAN(lse);
            attn_status status =
                reference ? attn_reference_forward(&q_view, &k_view, &v_view, w->options,
                                                   &out_view, &lse_view, &error)
                          : attn_forward(&q_view, &k_view, &v_view, w->options, &out_view,
                                         &lse_view, w->execution, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "forward (%s), %s", which, w->name);
            check_out_lse(out, lse, p, "forward", which, w->name);

            FILL_NAN(dq);
            FILL_NAN(dk);
            FILL_NAN(dv);
            status = reference
                         ? attn_reference_backward(&q_view, &k_view, &v_view, &out_view,
                                                   &lse_view, &dout_view, w->options, &dq_view,
                                                   &dk_view, &dv_view, NULL, &error)
                         : attn_backward(&q_view, &k_view, &v_view, &out_view, &lse_view,
                                         &dout_view, w->options, &dq_view, &dk_view, &dv_view,
                                         NULL, w->execution, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "backward (%s), %s", which, w->name);
            const double dq_error = worst_error(dq, p->dq, B * TQ * HQ * DK);
            const double dk_error = worst_error(dk, p->dk, B * TK * HKV * DK);
            const double dv_error = worst_error(dv, p->dv, B * TK * HKV * DV);
            CHECK(dq_error <= 1e-5 && dk_error <= 1e-5 && dv_error <= 1e-5,
                  "backward (%s), %s: plain attention gradients (dQ %.3g, dK %.3g, dV %.3g)",
                  which, w->name, dq_error, dk_error, dv_error);
        }
    }
}

/* Decoding: the cache holds sequence b's first lengths[b] keys; the TQ queries attend to all
 * of them (no causality: zero options imply none). */
static void test_decode(problem *p) {
    const int64_t lengths[B] = {TK, 4};
    for (int64_t b = 0; b < B; ++b) oracle(p, b, lengths[b]);
    attn_kv_cache_config config = {0};
    config.sequences = B;
    config.kv_heads = HKV;
    config.key_dim = DK;
    config.value_dim = DV;
    config.dtype = ATTN_DTYPE_F32;
    config.capacity = TK;
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "cache");
    if (cache == NULL) return;
    for (int64_t b = 0; b < B; ++b) {
        attn_tensor k_view = attn_tensor_f32_4d(p->k + b * TK * HKV * DK, 1, lengths[b], HKV, DK);
        attn_tensor v_view = attn_tensor_f32_4d(p->v + b * TK * HKV * DV, 1, lengths[b], HKV, DV);
        CHECK_STATUS(attn_kv_cache_append(cache, b, &k_view, &v_view, &error), ATTN_OK, &error,
                     "append sequence %lld", (long long)b);
    }
    static float out[B * TQ * HQ * DV], lse[B * HQ * TQ];
    attn_tensor q_view = attn_tensor_f32_4d(p->q, B, TQ, HQ, DK);
    attn_tensor out_view = attn_tensor_f32_4d(out, B, TQ, HQ, DV);
    const int64_t lse_shape[3] = {B, HQ, TQ};
    attn_tensor lse_view = attn_tensor_contiguous(lse, ATTN_DTYPE_F32, 3, lse_shape);
    int count;
    const variant *table = variants(&count);
    for (int n = 0; n < count; ++n) {
        const variant *w = &table[n];
        for (int reference = 0; reference < 2; ++reference) {
            const char *which = reference ? "reference" : "split-KV";
            FILL_NAN(out);
            FILL_NAN(lse);
            attn_status status =
                reference ? attn_reference_decode(cache, &q_view, w->options, &out_view,
                                                  &lse_view, &error)
                          : attn_decode(cache, &q_view, w->options, &out_view, &lse_view,
                                        w->execution, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "decode (%s), %s", which, w->name);
            check_out_lse(out, lse, p, "decode", which, w->name);
        }
    }
    attn_kv_cache_destroy(cache);
}

/* A control: the oracle is not trivially satisfied (causal attention differs from it). */
static void test_control(problem *p) {
    for (int64_t b = 0; b < B; ++b) oracle(p, b, TK);
    static float out[B * TQ * HQ * DV];
    attn_tensor q_view = attn_tensor_f32_4d(p->q, B, TQ, HQ, DK);
    attn_tensor k_view = attn_tensor_f32_4d(p->k, B, TK, HKV, DK);
    attn_tensor v_view = attn_tensor_f32_4d(p->v, B, TK, HKV, DV);
    attn_tensor out_view = attn_tensor_f32_4d(out, B, TQ, HQ, DV);
    attn_options causal = {0};
    causal.causal = 1;
    causal.alignment = ATTN_ALIGN_TOP_LEFT;
    attn_error error;
    CHECK_STATUS(attn_forward(&q_view, &k_view, &v_view, &causal, &out_view, NULL, NULL, &error),
                 ATTN_OK, &error, "causal control");
    CHECK(worst_error(out, p->out, B * TQ * HQ * DV) > 1e-2,
          "control: causal attention differs from the plain oracle");
    /* A window switched on with zero bounds is the diagonal only: it differs too. */
    attn_options diagonal = {0};
    diagonal.window = 1;
    diagonal.alignment = ATTN_ALIGN_TOP_LEFT;
    CHECK_STATUS(attn_forward(&q_view, &k_view, &v_view, &diagonal, &out_view, NULL, NULL, &error),
                 ATTN_OK, &error, "window (0, 0) control");
    double worst = 0.0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < TQ; ++i)
            for (int64_t h = 0; h < HQ; ++h)
                for (int64_t e = 0; e < DV; ++e) {
                    const double expected = p->v[b * TK * HKV * DV + AT(i, h / GROUP, e, TK, HKV, DV)];
                    const double actual = out[b * TQ * HQ * DV + AT(i, h, e, TQ, HQ, DV)];
                    const double err = fabs(actual - expected) / (1.0 + fabs(expected));
                    if (err > worst) worst = err;
                }
    CHECK(worst <= 1e-6, "window = 1 with (0, 0): O_i = V_i (error %.3g)", worst);
}

int main(void) {
    static problem p;
    test_rng rng;
    test_rng_seed(&rng, 2024);
    test_fill_normal(&rng, p.q, B * TQ * HQ * DK, 1.0f);
    test_fill_normal(&rng, p.k, B * TK * HKV * DK, 1.0f);
    test_fill_normal(&rng, p.v, B * TK * HKV * DV, 1.0f);
    test_fill_normal(&rng, p.dout, B * TQ * HQ * DV, 1.0f);
    test_forward_and_backward(&p);
    test_decode(&p);
    test_control(&p);
    return test_finish();
}
