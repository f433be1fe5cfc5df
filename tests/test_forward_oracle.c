/*
 * test_forward_oracle.c — checks the reference and the tiled forward against oracles that do
 * not share their code:
 *   1. an independent double-precision attention written inline below, straight from the
 *      formulas of docs/attention-math.md (its own mask logic, no call into src/mask), on a table
 *      of cases covering both causal alignments, windows, bool mask, bias, lengths, ALiBi,
 *      soft-cap, GQA;
 *   2. PyTorch's scaled_dot_product_attention, through the fixtures written by
 *      tests/fixtures/make_forward_fixtures.py (O within 1e-5, LSE within 1e-5).
 */
#include <stdlib.h>
#include <string.h>

#include "attn_io.h"
#include "test_forward_harness.h"

/* ---- 1. The inline oracle --------------------------------------------------------------- */

/* O and LSE for one case, in double, from the case's own tensors and option arrays.
 * Supports causal, window, bool mask, bias, lengths, ALiBi (standard or custom), soft-cap. */
static void oracle_forward(const forward_case *c, const forward_instance *x, double *out,
                           double *lse) {
    const int64_t group = c->Hq / c->Hkv;
    const double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->Dk);
    double *logits = malloc((size_t)c->Tk * sizeof(double));
    for (int64_t b = 0; b < c->B; ++b) {
        const int64_t Lq = x->query_lengths ? x->query_lengths[b] : c->Tq;
        const int64_t Lk = x->key_lengths ? x->key_lengths[b] : c->Tk;
        for (int64_t h = 0; h < c->Hq; ++h) {
            /* ALiBi slope of head h: custom, or 2^(-8(h+1)/n) for n a power of two. */
            const double slope = x->slopes ? x->slopes[h] : pow(2.0, -8.0 * (h + 1) / c->Hq);
            for (int64_t i = 0; i < c->Tq; ++i) {
                const int64_t pq = c->alignment == ATTN_ALIGN_BOTTOM_RIGHT ? i + Lk - Lq : i;
                double max = -INFINITY;
                for (int64_t j = 0; j < c->Tk; ++j) {
                    int allowed = i < Lq && j < Lk;
                    if (c->causal && j > pq) allowed = 0;
                    if (c->window && c->window_left >= 0 && j < pq - c->window_left) allowed = 0;
                    if (c->window && c->window_right >= 0 && j > pq + c->window_right) allowed = 0;
                    if (x->mask_data) {
                        const int64_t mb = c->mask == HARNESS_BROADCAST ? 0 : b, mh = c->mask == HARNESS_BROADCAST ? 0 : h;
                        if (!x->mask_data[((mb * (c->mask == HARNESS_BROADCAST ? 1 : c->Hq) + mh) * c->Tq + i) * c->Tk + j]) allowed = 0;
                    }
                    double logit = -INFINITY;
                    if (allowed) {
                        double dot = 0;
                        for (int64_t d = 0; d < c->Dk; ++d)
                            dot += (double)test_get4(&x->q.view, b, i, h, d) * test_get4(&x->k.view, b, j, h / group, d);
                        logit = scale * dot;
                        if (c->softcap > 0) logit = c->softcap * tanh(logit / c->softcap);
                        if (x->bias_data) {
                            const int64_t bb = c->bias == HARNESS_BROADCAST ? 0 : b, bh = c->bias == HARNESS_BROADCAST ? 0 : h;
                            logit += x->bias_data[((bb * (c->bias == HARNESS_BROADCAST ? 1 : c->Hq) + bh) * c->Tq + i) * c->Tk + j];
                        }
                        if (c->alibi) logit -= slope * fabs((double)(pq - j));
                    }
                    logits[j] = logit;
                    if (logit > max) max = logit;
                }
                double *o = out + ((b * c->Tq + i) * c->Hq + h) * c->Dv;
                if (max == -INFINITY) { /* empty or padding row: O = 0, LSE = -inf */
                    for (int64_t e = 0; e < c->Dv; ++e) o[e] = 0;
                    lse[(b * c->Hq + h) * c->Tq + i] = -INFINITY;
                    continue;
                }
                double sum = 0;
                for (int64_t e = 0; e < c->Dv; ++e) o[e] = 0;
                for (int64_t j = 0; j < c->Tk; ++j) {
                    if (logits[j] == -INFINITY) continue;
                    const double p = exp(logits[j] - max);
                    sum += p;
                    for (int64_t e = 0; e < c->Dv; ++e) o[e] += p * test_get4(&x->v.view, b, j, h / group, e);
                }
                for (int64_t e = 0; e < c->Dv; ++e) o[e] /= sum;
                lse[(b * c->Hq + h) * c->Tq + i] = max + log(sum);
            }
        }
    }
    free(logits);
}

/* max |got - expected| / (1 + |expected|) over a [B, T, H, D] view vs a contiguous double array. */
static double error_against_oracle(const forward_case *c, const attn_tensor *out, const attn_tensor *lse,
                                   const double *oracle_out, const double *oracle_lse) {
    double worst = 0;
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t i = 0; i < c->Tq; ++i)
            for (int64_t h = 0; h < c->Hq; ++h) {
                for (int64_t e = 0; e < c->Dv; ++e) {
                    const double want = oracle_out[((b * c->Tq + i) * c->Hq + h) * c->Dv + e];
                    const double got = test_get4(out, b, i, h, e);
                    const double err = fabs(got - want) / (1 + fabs(want));
                    if (!(err <= worst)) worst = err; /* NaN counts as worst */
                }
                const double want = oracle_lse[(b * c->Hq + h) * c->Tq + i];
                const double got = test_get3(lse, b, h, i);
                if (isinf(want) || isinf(got)) {
                    if (want != got) worst = INFINITY;
                } else {
                    const double err = fabs(got - want) / (1 + fabs(want));
                    if (!(err <= worst)) worst = err;
                }
            }
    return worst;
}

#define BR ATTN_ALIGN_BOTTOM_RIGHT
#define TL ATTN_ALIGN_TOP_LEFT

static const forward_case oracle_cases[] = {
    {.name = "plain GQA", .B = 2, .Tq = 9, .Tk = 13, .Hq = 4, .Hkv = 2, .Dk = 7, .Dv = 5},
    {.name = "causal BR Tq<Tk", .B = 1, .Tq = 6, .Tk = 20, .Hq = 2, .Hkv = 1, .Dk = 8, .Dv = 8, .causal = 1, .alignment = BR},
    {.name = "causal BR Tq>Tk", .B = 1, .Tq = 20, .Tk = 6, .Hq = 2, .Hkv = 2, .Dk = 8, .Dv = 8, .causal = 1, .alignment = BR},
    {.name = "causal TL Tq>Tk", .B = 1, .Tq = 20, .Tk = 6, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 3, .causal = 1, .alignment = TL},
    {.name = "window BR", .B = 1, .Tq = 70, .Tk = 80, .Hq = 2, .Hkv = 1, .Dk = 8, .Dv = 8, .window = 1, .window_left = 9, .window_right = 2, .alignment = BR},
    {.name = "bool mask", .B = 2, .Tq = 17, .Tk = 23, .Hq = 2, .Hkv = 2, .Dk = 8, .Dv = 8, .mask = HARNESS_PER_BATCH_HEAD},
    {.name = "bias broadcast", .B = 2, .Tq = 17, .Tk = 23, .Hq = 2, .Hkv = 1, .Dk = 8, .Dv = 8, .bias = HARNESS_BROADCAST},
    {.name = "lengths causal", .B = 3, .Tq = 30, .Tk = 30, .Hq = 2, .Hkv = 1, .Dk = 8, .Dv = 8, .lengths = 1, .causal = 1, .alignment = BR},
    {.name = "alibi standard", .B = 1, .Tq = 40, .Tk = 40, .Hq = 8, .Hkv = 2, .Dk = 8, .Dv = 8, .alibi = 1, .causal = 1, .alignment = BR},
    {.name = "alibi custom", .B = 1, .Tq = 20, .Tk = 30, .Hq = 3, .Hkv = 1, .Dk = 8, .Dv = 8, .alibi = 2, .alignment = TL},
    {.name = "softcap bias", .B = 1, .Tq = 30, .Tk = 30, .Hq = 2, .Hkv = 2, .Dk = 8, .Dv = 8, .softcap = 2.5f, .bias = HARNESS_PER_BATCH_HEAD, .input_stddev = 2.0f},
    {.name = "all", .B = 2, .Tq = 70, .Tk = 66, .Hq = 4, .Hkv = 2, .Dk = 12, .Dv = 10, .causal = 1, .alignment = BR, .window = 1, .window_left = 20, .window_right = -1, .mask = HARNESS_BROADCAST, .bias = HARNESS_PER_BATCH_HEAD, .lengths = 1, .alibi = 1, .softcap = 4.0f, .layout = TEST_LAYOUT_PADDED},
};

static void check_inline_oracle(void) {
    for (size_t n = 0; n < sizeof oracle_cases / sizeof oracle_cases[0]; ++n) {
        const forward_case *c = &oracle_cases[n];
        forward_instance x;
        forward_instance_build(&x, c, 500 + n);
        double *oracle_out = malloc((size_t)(c->B * c->Tq * c->Hq * c->Dv) * sizeof(double));
        double *oracle_lse = malloc((size_t)(c->B * c->Hq * c->Tq) * sizeof(double));
        oracle_forward(c, &x, oracle_out, oracle_lse);
        attn_error error = {0};
        CHECK_STATUS(forward_instance_reference(&x, &error), ATTN_OK, &error, "%s reference", c->name);
        CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "%s forward", c->name);
        const double reference_error = error_against_oracle(c, &x.out_reference.view, &x.lse_reference.view, oracle_out, oracle_lse);
        const double forward_error = error_against_oracle(c, &x.out.view, &x.lse.view, oracle_out, oracle_lse);
        CHECK(reference_error <= 1e-6, "%s: reference vs inline oracle %.3g", c->name, reference_error);
        CHECK(forward_error <= 1e-5, "%s: forward vs inline oracle %.3g", c->name, forward_error);
        free(oracle_out);
        free(oracle_lse);
        forward_instance_free(&x);
    }
}

/* ---- 2. PyTorch fixtures ------------------------------------------------------------------ */

typedef struct fixture_case {
    const char *name;
    int causal;          /* is_causal=True: top-left */
    const char *mask;    /* "mask" (bool), "bias" (float) or NULL */
    float scale;         /* 0: default */
} fixture_case;

static const fixture_case fixtures[] = {
    {"plain", 0, NULL, 0},         {"causal", 1, NULL, 0},    {"causal_tall", 1, NULL, 0},
    {"boolmask", 0, "mask", 0},    {"bias", 0, "bias", 0},    {"gqa", 0, NULL, 0},
    {"gqa_causal_scale", 1, NULL, 0.3f},
};

static int read_fixture(const char *case_name, const char *part, attn_npy_array *array) {
    char path[1024];
    snprintf(path, sizeof path, "%s/forward_%s_%s.npy", ATTN_FIXTURE_DIR, case_name, part);
    attn_error error = {0};
    attn_status status = attn_npy_read(path, 0, array, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "read %s", path);
    return status == ATTN_OK;
}

static attn_tensor fixture_view(attn_npy_array *array) {
    return attn_tensor_contiguous(array->data, array->dtype, array->rank, array->shape);
}

static void check_pytorch_fixtures(void) {
    for (size_t n = 0; n < sizeof fixtures / sizeof fixtures[0]; ++n) {
        const fixture_case *f = &fixtures[n];
        attn_npy_array q, k, v, o, lse, mask;
        memset(&mask, 0, sizeof mask);
        if (!read_fixture(f->name, "q", &q) || !read_fixture(f->name, "k", &k) ||
            !read_fixture(f->name, "v", &v) || !read_fixture(f->name, "o", &o) ||
            !read_fixture(f->name, "lse", &lse) || (f->mask && !read_fixture(f->name, f->mask, &mask)))
            continue;
        attn_tensor q_view = fixture_view(&q), k_view = fixture_view(&k), v_view = fixture_view(&v);
        attn_tensor o_expected = fixture_view(&o), lse_expected = fixture_view(&lse);
        attn_tensor mask_view = fixture_view(&mask);
        test_tensor out = test_tensor_new_shape(4, o.shape), out_reference = test_tensor_new_shape(4, o.shape);
        test_tensor lse_out = test_tensor_new_shape(3, lse.shape), lse_reference = test_tensor_new_shape(3, lse.shape);
        attn_options options = attn_options_default();
        if (f->causal) {
            options.causal = 1;
            options.alignment = ATTN_ALIGN_TOP_LEFT; /* PyTorch is_causal */
        }
        if (f->mask && strcmp(f->mask, "mask") == 0) options.mask = &mask_view;
        if (f->mask && strcmp(f->mask, "bias") == 0) options.bias = &mask_view;
        if (f->scale > 0) {
            options.custom_scale = 1;
            options.scale = f->scale;
        }
        attn_error error = {0};
        CHECK_STATUS(attn_forward(&q_view, &k_view, &v_view, &options, &out.view, &lse_out.view, NULL, &error),
                     ATTN_OK, &error, "fixture %s forward", f->name);
        CHECK_STATUS(attn_reference_forward(&q_view, &k_view, &v_view, &options, &out_reference.view,
                                            &lse_reference.view, &error),
                     ATTN_OK, &error, "fixture %s reference", f->name);
        const double forward_o = test_max_relative_error(&out.view, &o_expected);
        const double forward_lse = test_max_relative_error(&lse_out.view, &lse_expected);
        const double reference_o = test_max_relative_error(&out_reference.view, &o_expected);
        const double reference_lse = test_max_relative_error(&lse_reference.view, &lse_expected);
        CHECK(forward_o <= 1e-5 && forward_lse <= 1e-5, "fixture %s: forward vs PyTorch O %.3g LSE %.3g",
              f->name, forward_o, forward_lse);
        CHECK(reference_o <= 1e-6 && reference_lse <= 1e-6, "fixture %s: reference vs PyTorch O %.3g LSE %.3g",
              f->name, reference_o, reference_lse);
        test_tensor_free(&out);
        test_tensor_free(&out_reference);
        test_tensor_free(&lse_out);
        test_tensor_free(&lse_reference);
        attn_npy_free(&q);
        attn_npy_free(&k);
        attn_npy_free(&v);
        attn_npy_free(&o);
        attn_npy_free(&lse);
        attn_npy_free(&mask);
    }
}

int main(void) {
    check_inline_oracle();
    check_pytorch_fixtures();
    return test_finish();
}
