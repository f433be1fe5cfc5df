/*
 * test_dropout.c — attention dropout (attn_options.dropout_p, _seed, _offset) against
 * independent references:
 *   - the generator: Philox-4x32-10's published known-answer vectors; the keep rate of
 *     attn_dropout_mask within 5 sigma of 1 - p; the offset's counter semantics (offset + 1
 *     draws what column j + 4 drew); another seed or head gives another mask;
 *   - the forward: an oracle written here in double, O = ((P ∘ keep) / (1 - p)) V with keep
 *     from attn_dropout_mask and P the plain / causal / windowed softmax, against
 *     attn_reference_forward and attn_forward (tiled and band paths, GQA, bf16); the
 *     options the oracle does not model (soft-cap, ALiBi, sinks, padding) against
 *     attn_reference_forward; LSE unchanged by dropout; 1 and 2 threads bitwise;
 *   - E[O] over 400 seeds within 6 standard errors of O without dropout;
 *   - the backward: central differences of L = sum dO . O of the oracle, and
 *     attn_reference_backward, fp32 and bf16 (whose D is recomputed), band path too;
 *   - varlen sequences use the streams of their batch index (equal to the padded batch);
 *   - validation: dropout_p outside [0, 1) or NaN, decoding refuses it, version-2 options
 *     read no dropout fields, attn_dropout_mask's errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"
#include "kernels/registry.h"
#include "mask/dropout.h"

/* ---- the generator ---- */
static void test_philox_known_answers(void) {
    /* Random123's kat_vectors for philox4x32_10: counter, key (k1:k0), result */
    static const struct {
        uint32_t counter[4];
        uint64_t key;
        uint32_t result[4];
    } vectors[] = {
        {{0, 0, 0, 0}, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
         0xffffffffffffffffull,
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
         0x299f31d0a4093822ull,
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (size_t n = 0; n < sizeof vectors / sizeof vectors[0]; ++n) {
        uint32_t block[4];
        attn_philox4x32(vectors[n].counter, vectors[n].key, block);
        CHECK(memcmp(block, vectors[n].result, sizeof block) == 0,
              "Philox-4x32-10 known answer %zu: %08x %08x %08x %08x", n, block[0], block[1],
              block[2], block[3]);
    }
}

/* Every registry's philox_blocks against the block-by-block specification, across a carry of
 * the counter's low word and for counts around its 8-block vector loop. */
static void test_registry_blocks(void) {
    const attn_kernels *registries[8];
    const int count = attn_kernels_available(registries, 8);
    static const uint64_t firsts[] = {0, 5, 0xFFFFFFFAull, 0xFFFFFFFFFFFFFFF0ull};
    uint32_t got[4 * 40], want[4 * 40];
    for (int r = 0; r < count; ++r) {
        int same = 1;
        for (size_t f = 0; f < sizeof firsts / sizeof firsts[0]; ++f)
            for (int blocks = 1; blocks <= 40; blocks += 3) {
                registries[r]->forward.philox_blocks(0x0123456789ABCDEFull, firsts[f], 77, 9,
                                                     blocks, got);
                for (int n = 0; n < blocks; ++n) {
                    const uint64_t position = firsts[f] + (uint64_t)n;
                    const uint32_t counter[4] = {(uint32_t)position, (uint32_t)(position >> 32),
                                                 77, 9};
                    attn_philox4x32(counter, 0x0123456789ABCDEFull, want + 4 * n);
                }
                same &= memcmp(got, want, (size_t)blocks * 16) == 0;
            }
        CHECK(same, "%s philox_blocks = Philox-4x32-10 block by block", registries[r]->name);
    }
}

/* keep [B, Hq, Tq, Tk] bytes of attn_dropout_mask; NULL on failure (reported). */
static uint8_t *mask_of(const attn_options *options, int64_t B, int64_t H, int64_t Tq,
                        int64_t Tk) {
    uint8_t *keep = malloc((size_t)(B * H * Tq * Tk));
    attn_tensor view = {keep, ATTN_DTYPE_BOOL, 4, {B, H, Tq, Tk}, {H * Tq * Tk, Tq * Tk, Tk, 1}};
    attn_error error = {0};
    CHECK_STATUS(attn_dropout_mask(options, &view, &error), ATTN_OK, &error, "attn_dropout_mask");
    return keep;
}

static void test_mask_statistics(void) {
    static const float rates[] = {0.1f, 0.5f, 0.9f};
    const int64_t B = 2, H = 4, Tq = 128, Tk = 515, pairs = B * H * Tq * Tk;
    for (size_t n = 0; n < 3; ++n) {
        attn_options options = attn_options_default();
        options.dropout_p = rates[n], options.dropout_seed = 1234 + n, options.dropout_offset = 77;
        uint8_t *keep = mask_of(&options, B, H, Tq, Tk);
        int64_t kept = 0;
        for (int64_t e = 0; e < pairs; ++e) kept += keep[e];
        const double p = rates[n], sigma = sqrt(p * (1 - p) / (double)pairs);
        const double rate = (double)kept / (double)pairs;
        CHECK(fabs(rate - (1.0 - p)) <= 5 * sigma, "p = %.1f: keep rate %.5f (want %.5f +- %.5f)",
              p, rate, 1 - p, 5 * sigma);
        /* the next counter of a row draws what column j + 4 drew */
        options.dropout_offset = 78;
        uint8_t *next = mask_of(&options, B, H, Tq, Tk);
        int same = 1;
        for (int64_t row = 0; row < B * H * Tq; ++row)
            for (int64_t j = 0; j + 4 < Tk; ++j) same &= next[row * Tk + j] == keep[row * Tk + j + 4];
        CHECK(same, "p = %.1f: offset + 1 gives the draws of column j + 4", p);
        /* rows, heads and seeds differ */
        options.dropout_seed += 1;
        uint8_t *other = mask_of(&options, B, H, Tq, Tk);
        int64_t differ_seed = 0, differ_head = 0, differ_row = 0;
        for (int64_t j = 0; j < Tk; ++j) {
            differ_seed += other[j] != next[j];
            differ_head += next[j] != next[Tq * Tk + j];
            differ_row += next[j] != next[Tk + j];
        }
        CHECK(differ_seed > Tk / 20 && differ_head > Tk / 20 && differ_row > Tk / 20,
              "p = %.1f: another seed / head / row draws another mask (%lld, %lld, %lld of %lld)",
              p, (long long)differ_seed, (long long)differ_head, (long long)differ_row,
              (long long)Tk);
        free(keep), free(next), free(other);
    }
}

/* ---- the forward against an oracle in double ---- */
typedef struct dropout_case {
    const char *name;
    int64_t B, Tq, Tk, Hq, Hkv, D;
    int causal;
    int64_t window_left; /* -2 = none */
    float p;
    int tile_keys;       /* execution.tile_k, 0 = default */
} dropout_case;

static const dropout_case cases[] = {
    {"MHA, no mask", 2, 37, 300, 4, 4, 32, 0, -2, 0.2f, 0},
    {"GQA causal", 1, 90, 90, 8, 2, 64, 1, -2, 0.5f, 0},
    {"causal, small key tiles", 1, 70, 130, 2, 1, 16, 1, -2, 0.1f, 32},
    {"window (band path)", 1, 200, 200, 4, 2, 32, 1, 40, 0.3f, 0},
    {"one query row (not the decode loop)", 2, 1, 150, 8, 2, 64, 1, -2, 0.25f, 0},
    {"p = 0.9", 1, 20, 40, 2, 2, 8, 0, -2, 0.9f, 0},
};

static attn_options options_of(const dropout_case *c, uint64_t seed) {
    attn_options options = attn_options_default();
    options.causal = c->causal;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (c->window_left != -2) options.window = 1, options.window_left = c->window_left;
    options.dropout_p = c->p, options.dropout_seed = seed, options.dropout_offset = 3;
    return options;
}

static int allowed(const dropout_case *c, int64_t i, int64_t j) {
    const int64_t position = i + c->Tk - c->Tq; /* bottom-right */
    if (c->causal && j > position) return 0;
    return c->window_left == -2 || j >= position - c->window_left;
}

/* O and LSE of the case in double: softmax over the allowed keys, the kept weights times
 * 1 / (1 - p) in O. out [B][Tq][Hq][D], lse [B][Hq][Tq]. */
static void oracle_forward(const dropout_case *c, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const uint8_t *keep, double *out, double *lse) {
    const double scale = 1.0 / sqrt((double)c->D), factor = 1.0 / (1.0 - c->p);
    double *weights = malloc((size_t)c->Tk * sizeof(double));
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < c->Tq; ++i) {
                const int64_t kv = h / (c->Hq / c->Hkv);
                double top = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < c->Tk; ++j) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < c->D; ++d)
                        dot += (double)test_get4(q, b, i, h, d) * test_get4(k, b, j, kv, d);
                    weights[j] = allowed(c, i, j) ? scale * dot : -INFINITY;
                    top = fmax(top, weights[j]);
                }
                for (int64_t j = 0; j < c->Tk; ++j) sum += weights[j] = exp(weights[j] - top);
                lse[(b * c->Hq + h) * c->Tq + i] = top + log(sum);
                const uint8_t *row_keep = keep + ((b * c->Hq + h) * c->Tq + i) * c->Tk;
                for (int64_t e = 0; e < c->D; ++e) {
                    double o = 0.0;
                    for (int64_t j = 0; j < c->Tk; ++j)
                        if (row_keep[j]) o += weights[j] * factor * test_get4(v, b, j, kv, e);
                    out[((b * c->Tq + i) * c->Hq + h) * c->D + e] = o / sum;
                }
            }
    free(weights);
}

/* max |got - want| / (1 + |want|) over a [B, Tq, Hq, D] view and a dense double array. */
static double error_against(const attn_tensor *got, const double *want, int64_t count) {
    double worst = 0.0;
    const int64_t H = got->shape[2], D = got->shape[3], T = got->shape[1];
    for (int64_t n = 0; n < count; ++n) {
        const int64_t e = n % D, h = n / D % H, i = n / D / H % T, b = n / D / H / T;
        const double x = got->dtype == ATTN_DTYPE_F32 ? test_get4(got, b, i, h, e)
                                                      : test_half_get4(got, b, i, h, e);
        const double d = fabs(x - want[n]) / (1.0 + fabs(want[n]));
        worst = isnan(d) ? INFINITY : fmax(worst, d);
    }
    return worst;
}

static double lse_error(const attn_tensor *got, const double *want, int64_t B, int64_t H,
                        int64_t T) {
    double worst = 0.0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < T; ++i)
                worst = fmax(worst, fabs(test_get3(got, b, h, i) - want[(b * H + h) * T + i]));
    return worst;
}

static void run_forward_case(const dropout_case *c, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BHTD);
    test_tensor v = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    const attn_options options = options_of(c, seed * 31 + 7);
    uint8_t *keep = mask_of(&options, c->B, c->Hq, c->Tq, c->Tk);
    const int64_t count = c->B * c->Tq * c->Hq * c->D, rows = c->B * c->Hq * c->Tq;
    double *want = malloc((size_t)count * sizeof(double)), *want_lse = malloc((size_t)rows * sizeof(double));
    oracle_forward(c, &q.view, &k.view, &v.view, keep, want, want_lse);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor got[3], got_lse[3];
    attn_error error = {0};
    for (int n = 0; n < 3; ++n) { /* the reference, then attn_forward on 1 and 2 threads */
        got[n] = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
        got_lse[n] = test_tensor_new_shape(3, lse_shape);
        attn_execution execution = attn_execution_default();
        execution.num_threads = n, execution.tile_k = c->tile_keys;
        CHECK_STATUS(n == 0 ? attn_reference_forward(&q.view, &k.view, &v.view, &options,
                                                     &got[n].view, &got_lse[n].view, &error)
                            : attn_forward(&q.view, &k.view, &v.view, &options, &got[n].view,
                                           &got_lse[n].view, &execution, &error),
                     ATTN_OK, &error, "%s: forward %d", c->name, n);
        const double worst = error_against(&got[n].view, want, count);
        const double worst_lse = lse_error(&got_lse[n].view, want_lse, c->B, c->Hq, c->Tq);
        CHECK(worst <= (n == 0 ? 1e-6 : 2e-5) && worst_lse <= 2e-5,
              "%s: %s with dropout = the oracle (O %.2g, LSE %.2g)", c->name,
              n == 0 ? "attn_reference_forward" : "attn_forward", worst, worst_lse);
    }
    CHECK(test_bitwise_equal(&got[1].view, &got[2].view) &&
              test_bitwise_equal(&got_lse[1].view, &got_lse[2].view),
          "%s: 1 and 2 threads bitwise", c->name);
    /* bf16 q, k, v: the oracle on the rounded inputs, within bf16's rounding of P and O */
    test_half_tensor q16 = test_half_round(&q, ATTN_DTYPE_BF16);
    test_half_tensor k16 = test_half_round(&k, ATTN_DTYPE_BF16);
    test_half_tensor v16 = test_half_round(&v, ATTN_DTYPE_BF16);
    oracle_forward(c, &q.view, &k.view, &v.view, keep, want, want_lse);
    test_half_tensor o16 = test_half_like(&got[0], ATTN_DTYPE_BF16, 0);
    CHECK_STATUS(attn_forward(&q16.view, &k16.view, &v16.view, &options, &o16.view,
                              &got_lse[1].view, NULL, &error), ATTN_OK, &error, "%s: bf16", c->name);
    const double bf16_worst = error_against(&o16.view, want, count);
    CHECK(bf16_worst <= 1.5e-2, "%s: bf16 O with dropout (%.2g)", c->name, bf16_worst);
    free(q16.allocation), free(k16.allocation), free(v16.allocation), free(o16.allocation);
    for (int n = 0; n < 3; ++n) test_tensor_free(&got[n]), test_tensor_free(&got_lse[n]);
    free(keep), free(want), free(want_lse);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
}

/* Soft-cap, ALiBi, sinks, padded rows, an additive bias: attn_forward and attn_backward
 * against the references with the same dropout (the oracle above checked the references). */
static void test_other_options(void) {
    const int64_t B = 2, Tq = 45, Tk = 70, Hq = 4, Hkv = 2, D = 24;
    test_rng rng;
    test_rng_seed(&rng, 99);
    test_tensor q = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(B, Tk, Hkv, D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, Tk, Hkv, D, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    const int64_t bias_shape[4] = {1, Hq, Tq, Tk};
    test_tensor bias = test_tensor_new_shape(4, bias_shape);
    test_tensor_fill_normal(&bias, &rng, 0.5f);
    float sinks[4] = {0.5f, -1.0f, 2.0f, -INFINITY};
    int32_t lengths[2] = {Tq, Tq - 5};
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_TOP_LEFT, options.softcap = 20.0f;
    options.alibi = 1, options.sinks = sinks, options.query_lengths = lengths;
    options.bias = &bias.view;
    options.dropout_p = 0.35f, options.dropout_seed = 5, options.dropout_offset = 1ull << 40;
    const int64_t lse_shape[3] = {B, Hq, Tq};
    test_tensor out[2], lse[2], dq[2], dk[2], dv[2], dbias[2];
    attn_error error = {0};
    for (int n = 0; n < 2; ++n) {
        out[n] = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD), lse[n] = test_tensor_new_shape(3, lse_shape);
        dq[n] = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD);
        dk[n] = test_tensor_new(B, Tk, Hkv, D, TEST_LAYOUT_BTHD);
        dv[n] = test_tensor_new(B, Tk, Hkv, D, TEST_LAYOUT_BTHD);
        dbias[n] = test_tensor_new_shape(4, bias_shape);
    }
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &out[0].view,
                                        &lse[0].view, &error), ATTN_OK, &error, "reference");
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out[1].view, &lse[1].view,
                              NULL, &error), ATTN_OK, &error, "forward");
    double worst = test_max_relative_error(&out[1].view, &out[0].view);
    CHECK(worst <= 2e-5, "soft-cap, ALiBi, bias, sinks, padding: O with dropout (%.2g)", worst);
    CHECK_STATUS(attn_reference_backward(&q.view, &k.view, &v.view, &out[0].view, &lse[0].view,
                                         &dout.view, &options, &dq[0].view, &dk[0].view,
                                         &dv[0].view, &dbias[0].view, &error),
                 ATTN_OK, &error, "reference backward");
    CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out[1].view, &lse[1].view, &dout.view,
                               &options, &dq[1].view, &dk[1].view, &dv[1].view, &dbias[1].view,
                               NULL, &error),
                 ATTN_OK, &error, "backward");
    worst = fmax(fmax(test_max_relative_error(&dq[1].view, &dq[0].view),
                      test_max_relative_error(&dk[1].view, &dk[0].view)),
                 fmax(test_max_relative_error(&dv[1].view, &dv[0].view),
                      test_max_relative_error(&dbias[1].view, &dbias[0].view)));
    CHECK(worst <= 5e-5, "soft-cap, ALiBi, bias, sinks, padding: dq, dk, dv, dbias with dropout (%.2g)",
          worst);
    for (int n = 0; n < 2; ++n) {
        test_tensor_free(&out[n]), test_tensor_free(&lse[n]), test_tensor_free(&dq[n]);
        test_tensor_free(&dk[n]), test_tensor_free(&dv[n]), test_tensor_free(&dbias[n]);
    }
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
    test_tensor_free(&bias);
}

/* ---- E[O] over seeds ---- */
static void test_expectation(void) {
    enum { B = 1, Tq = 6, Tk = 50, H = 2, D = 8, count = B * Tq * H * D, SEEDS = 400 };
    test_rng rng;
    test_rng_seed(&rng, 17);
    test_tensor q = test_tensor_new(B, Tq, H, D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(B, Tk, H, D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, Tk, H, D, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(B, Tq, H, D, TEST_LAYOUT_BTHD);
    test_tensor plain = test_tensor_new(B, Tq, H, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 0.5f), test_tensor_fill_normal(&k, &rng, 0.5f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    attn_error error = {0};
    attn_options options = attn_options_default();
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &plain.view, NULL, NULL, &error),
                 ATTN_OK, &error, "expectation: plain");
    double sum[count] = {0}, squares[count] = {0};
    options.dropout_p = 0.3f;
    for (int s = 0; s < SEEDS; ++s) {
        options.dropout_seed = 1000 + (uint64_t)s;
        attn_forward(&q.view, &k.view, &v.view, &options, &out.view, NULL, NULL, &error);
        for (int64_t n = 0; n < count; ++n) {
            sum[n] += out.allocation[n];
            squares[n] += (double)out.allocation[n] * out.allocation[n];
        }
    }
    double worst = 0.0;
    for (int64_t n = 0; n < count; ++n) {
        const double mean = sum[n] / SEEDS, variance = squares[n] / SEEDS - mean * mean;
        const double standard_error = sqrt(fmax(variance, 0.0) / SEEDS);
        worst = fmax(worst, fabs(mean - plain.allocation[n]) / (standard_error + 1e-9));
    }
    CHECK(worst <= 6.0, "E[O] over %d seeds = O without dropout (worst %.2f standard errors)",
          SEEDS, worst);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
    test_tensor_free(&out), test_tensor_free(&plain);
}

/* ---- gradients ---- */
enum { GT = 5, GK = 9, GH = 2, GD = 4 }; /* q [1, 5, 2, 4], k / v [1, 9, 2, 4], causal */

/* L = sum dO . O of causal (bottom-right) attention with the dropout mask keep, in double. */
static double loss(const double *q, const double *k, const double *v, const double *dout,
                   const uint8_t *keep, double p) {
    const double scale = 1.0 / sqrt((double)GD);
    double total = 0.0;
    for (int h = 0; h < GH; ++h)
        for (int i = 0; i < GT; ++i) {
            double logits[GK], top = -INFINITY, sum = 0.0;
            const int last = i + (GK - GT);
            for (int j = 0; j <= last; ++j) {
                double dot = 0.0;
                for (int d = 0; d < GD; ++d) dot += q[(i * GH + h) * GD + d] * k[(j * GH + h) * GD + d];
                logits[j] = scale * dot;
                top = fmax(top, logits[j]);
            }
            for (int j = 0; j <= last; ++j) sum += exp(logits[j] - top);
            const uint8_t *row_keep = keep + (h * GT + i) * GK;
            for (int e = 0; e < GD; ++e) {
                double o = 0.0;
                for (int j = 0; j <= last; ++j)
                    if (row_keep[j]) o += exp(logits[j] - top) / sum / (1 - p) * v[(j * GH + h) * GD + e];
                total += dout[(i * GH + h) * GD + e] * o;
            }
        }
    return total;
}

static double central(double *x, int n, const double *q, const double *k, const double *v,
                      const double *dout, const uint8_t *keep, double p) {
    const double step = 1e-5, saved = x[n];
    x[n] = saved + step;
    const double up = loss(q, k, v, dout, keep, p);
    x[n] = saved - step;
    const double down = loss(q, k, v, dout, keep, p);
    x[n] = saved;
    return (up - down) / (2 * step);
}

static void test_gradients(void) {
    test_rng rng;
    test_rng_seed(&rng, 4243);
    test_tensor q = test_tensor_new(1, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(1, GK, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, GK, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(1, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.dropout_p = 0.4f, options.dropout_seed = 11, options.dropout_offset = 5;
    uint8_t *keep = mask_of(&options, 1, GH, GT, GK);
    const int64_t lse_shape[3] = {1, GH, GT};
    test_tensor out = test_tensor_new(1, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_tensor dq = test_tensor_new(1, GT, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor dk = test_tensor_new(1, GK, GH, GD, TEST_LAYOUT_BTHD);
    test_tensor dv = test_tensor_new(1, GK, GH, GD, TEST_LAYOUT_BTHD);
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view, NULL,
                              &error), ATTN_OK, &error, "gradients: forward");
    CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &dout.view,
                               &options, &dq.view, &dk.view, &dv.view, NULL, NULL, &error),
                 ATTN_OK, &error, "gradients: backward");
    double qd[GT * GH * GD], kd[GK * GH * GD], vd[GK * GH * GD], od[GT * GH * GD];
    for (int n = 0; n < GT * GH * GD; ++n) qd[n] = q.allocation[n], od[n] = dout.allocation[n];
    for (int n = 0; n < GK * GH * GD; ++n) kd[n] = k.allocation[n], vd[n] = v.allocation[n];
    const double p = options.dropout_p;
    double worst = 0.0;
    for (int n = 0; n < GT * GH * GD; ++n)
        worst = fmax(worst, fabs(dq.allocation[n] - central(qd, n, qd, kd, vd, od, keep, p)));
    for (int n = 0; n < GK * GH * GD; ++n) {
        worst = fmax(worst, fabs(dk.allocation[n] - central(kd, n, qd, kd, vd, od, keep, p)));
        worst = fmax(worst, fabs(dv.allocation[n] - central(vd, n, qd, kd, vd, od, keep, p)));
    }
    CHECK(worst <= 3e-5, "dq, dk, dv with dropout against central differences (%.2g)", worst);
    free(keep);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
    test_tensor_free(&out), test_tensor_free(&lse), test_tensor_free(&dq), test_tensor_free(&dk);
    test_tensor_free(&dv);
}

/* attn_backward against attn_reference_backward for each case, fp32 on 1 and 2 threads
 * (bitwise equal) and bf16 (D recomputed from fp32: within bf16's rounding). */
static void run_backward_case(const dropout_case *c, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    const attn_options options = options_of(c, seed);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor out = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_tensor dq[3], dk[3], dv[3];
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view, NULL,
                              &error), ATTN_OK, &error, "%s: forward", c->name);
    for (int n = 0; n < 3; ++n) {
        dq[n] = test_tensor_new(c->B, c->Tq, c->Hq, c->D, TEST_LAYOUT_BTHD);
        dk[n] = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
        dv[n] = test_tensor_new(c->B, c->Tk, c->Hkv, c->D, TEST_LAYOUT_BTHD);
        attn_execution execution = attn_execution_default();
        execution.num_threads = n;
        CHECK_STATUS(n == 0 ? attn_reference_backward(&q.view, &k.view, &v.view, &out.view,
                                                      &lse.view, &dout.view, &options,
                                                      &dq[n].view, &dk[n].view, &dv[n].view,
                                                      NULL, &error)
                            : attn_backward(&q.view, &k.view, &v.view, &out.view, &lse.view,
                                            &dout.view, &options, &dq[n].view, &dk[n].view,
                                            &dv[n].view, NULL, &execution, &error),
                     ATTN_OK, &error, "%s: backward %d", c->name, n);
    }
    const double worst = fmax(test_max_relative_error(&dq[1].view, &dq[0].view),
                              fmax(test_max_relative_error(&dk[1].view, &dk[0].view),
                                   test_max_relative_error(&dv[1].view, &dv[0].view)));
    CHECK(worst <= 5e-5, "%s: dq, dk, dv with dropout = attn_reference_backward (%.2g)", c->name,
          worst);
    CHECK(test_bitwise_equal(&dq[1].view, &dq[2].view) && test_bitwise_equal(&dk[1].view, &dk[2].view) &&
              test_bitwise_equal(&dv[1].view, &dv[2].view),
          "%s: backward on 1 and 2 threads bitwise", c->name);
    /* bf16: the gradients of the rounded inputs, within bf16's rounding */
    test_half_tensor q16 = test_half_round(&q, ATTN_DTYPE_BF16), k16 = test_half_round(&k, ATTN_DTYPE_BF16);
    test_half_tensor v16 = test_half_round(&v, ATTN_DTYPE_BF16), d16 = test_half_round(&dout, ATTN_DTYPE_BF16);
    test_half_tensor o16 = test_half_like(&out, ATTN_DTYPE_BF16, 0);
    test_half_tensor dq16 = test_half_like(&dq[0], ATTN_DTYPE_BF16, 0);
    test_half_tensor dk16 = test_half_like(&dk[0], ATTN_DTYPE_BF16, 0);
    test_half_tensor dv16 = test_half_like(&dv[0], ATTN_DTYPE_BF16, 0);
    CHECK_STATUS(attn_forward(&q16.view, &k16.view, &v16.view, &options, &o16.view, &lse.view,
                              NULL, &error), ATTN_OK, &error, "%s: bf16 forward", c->name);
    CHECK_STATUS(attn_backward(&q16.view, &k16.view, &v16.view, &o16.view, &lse.view, &d16.view,
                               &options, &dq16.view, &dk16.view, &dv16.view, NULL, NULL, &error),
                 ATTN_OK, &error, "%s: bf16 backward", c->name);
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view, NULL,
                              &error), ATTN_OK, &error, "%s: forward (rounded inputs)", c->name);
    CHECK_STATUS(attn_reference_backward(&q.view, &k.view, &v.view, &out.view, &lse.view,
                                         &dout.view, &options, &dq[0].view, &dk[0].view,
                                         &dv[0].view, NULL, &error),
                 ATTN_OK, &error, "%s: reference backward (rounded inputs)", c->name);
    double bf16_worst = 0.0;
    const test_tensor *wants[3] = {&dq[0], &dk[0], &dv[0]};
    const test_half_tensor *gots[3] = {&dq16, &dk16, &dv16};
    for (int t = 0; t < 3; ++t) {
        const attn_tensor *want = &wants[t]->view;
        double scale = 0.0;
        for (int64_t n = 0; n < wants[t]->allocation_floats; ++n)
            scale = fmax(scale, fabs(wants[t]->allocation[n]));
        for (int64_t b = 0; b < want->shape[0]; ++b)
            for (int64_t i = 0; i < want->shape[1]; ++i)
                for (int64_t h = 0; h < want->shape[2]; ++h)
                    for (int64_t e = 0; e < want->shape[3]; ++e)
                        bf16_worst = fmax(bf16_worst, fabs(test_half_get4(&gots[t]->view, b, i, h, e) -
                                                           test_get4(want, b, i, h, e)) / scale);
    }
    CHECK(bf16_worst <= 2e-2, "%s: bf16 gradients with dropout (%.2g of the largest)", c->name,
          bf16_worst);
    free(q16.allocation), free(k16.allocation), free(v16.allocation), free(d16.allocation);
    free(o16.allocation), free(dq16.allocation), free(dk16.allocation), free(dv16.allocation);
    for (int n = 0; n < 3; ++n) test_tensor_free(&dq[n]), test_tensor_free(&dk[n]), test_tensor_free(&dv[n]);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
    test_tensor_free(&out), test_tensor_free(&lse);
}

/* ---- varlen: sequence b draws the streams of batch b ---- */
static void test_varlen(void) {
    const int64_t B = 3, T = 40, H = 4, D = 16;
    test_rng rng;
    test_rng_seed(&rng, 8);
    test_tensor q = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor padded = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor packed_out = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.dropout_p = 0.2f, options.dropout_seed = 3;
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &padded.view, NULL, NULL, &error),
                 ATTN_OK, &error, "varlen: padded forward");
    /* the same memory as packed [B * T, H, D] */
    attn_tensor pq = {q.view.data, ATTN_DTYPE_F32, 3, {B * T, H, D}, {H * D, D, 1}};
    attn_tensor pk = pq, pv = pq, po = pq;
    pk.data = k.view.data, pv.data = v.view.data, po.data = packed_out.view.data;
    const int32_t cu[4] = {0, T, 2 * T, 3 * T};
    const attn_varlen sequences = {B, cu, cu, T, T};
    CHECK_STATUS(attn_varlen_forward(&pq, &pk, &pv, &sequences, &options, &po, NULL, NULL, &error),
                 ATTN_OK, &error, "varlen: forward");
    CHECK(test_bitwise_equal(&packed_out.view, &padded.view),
          "varlen with dropout = the padded batch (sequence b draws batch b's mask)");
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v);
    test_tensor_free(&padded), test_tensor_free(&packed_out);
}

/* ---- validation ---- */
static void test_validation(void) {
    const int64_t B = 1, T = 8, H = 2, D = 8;
    test_tensor q = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_tensor out2 = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
    test_rng rng;
    test_rng_seed(&rng, 2);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    attn_error error = {0};
    static const float bad[] = {-0.1f, 1.0f, 1.5f, NAN, INFINITY};
    for (size_t n = 0; n < sizeof bad / sizeof bad[0]; ++n) {
        attn_options options = attn_options_default();
        options.dropout_p = bad[n];
        test_tensor_fill_all(&out, 7.0f);
        CHECK_STATUS(attn_forward(&q.view, &q.view, &q.view, &options, &out.view, NULL, NULL, &error),
                     ATTN_ERROR_INVALID_ARGUMENT, &error, "dropout_p = %g refused", (double)bad[n]);
        CHECK(strstr(error.message, "options.dropout_p") != NULL && out.allocation[0] == 7.0f,
              "dropout_p = %g: the message names it, nothing written: %s", (double)bad[n],
              error.message);
    }
    /* version 2 options: the dropout fields are not read */
    attn_options old = attn_options_default();
    old.version = 2, old.dropout_p = 0.5f;
    attn_options none = attn_options_default();
    CHECK_STATUS(attn_forward(&q.view, &q.view, &q.view, &old, &out.view, NULL, NULL, &error),
                 ATTN_OK, &error, "version-2 options");
    CHECK_STATUS(attn_forward(&q.view, &q.view, &q.view, &none, &out2.view, NULL, NULL, &error),
                 ATTN_OK, &error, "no dropout");
    CHECK(test_bitwise_equal(&out.view, &out2.view), "version-2 options read no dropout field");
    /* decoding refuses dropout */
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1, config.kv_heads = H, config.key_dim = config.value_dim = D;
    config.capacity = 16;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "cache");
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &q.view, &q.view, &error), ATTN_OK, &error, "append");
    attn_options options = attn_options_default();
    options.dropout_p = 0.1f;
    attn_tensor q1 = q.view, o1 = out.view;
    q1.shape[1] = o1.shape[1] = 1;
    CHECK_STATUS(attn_decode(cache, &q1, &options, &o1, NULL, NULL, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "attn_decode refuses dropout");
    CHECK(strstr(error.message, "dropout_p") != NULL, "names dropout_p: %s", error.message);
    attn_kv_cache_destroy(cache);
    /* attn_dropout_mask: a broadcasting output, p = 1 */
    uint8_t keep[64];
    attn_tensor broadcast = {keep, ATTN_DTYPE_BOOL, 4, {1, 2, 4, 8}, {0, 0, 8, 1}};
    CHECK_STATUS(attn_dropout_mask(&options, &broadcast, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "attn_dropout_mask: zero stride refused");
    attn_tensor view = {keep, ATTN_DTYPE_BOOL, 4, {1, 2, 4, 8}, {64, 32, 8, 1}};
    options.dropout_p = 1.0f;
    CHECK_STATUS(attn_dropout_mask(&options, &view, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "attn_dropout_mask: p = 1 refused");
    options.dropout_p = 0.0f;
    CHECK_STATUS(attn_dropout_mask(&options, &view, &error), ATTN_OK, &error, "p = 0");
    int all = 1;
    for (int n = 0; n < 64; ++n) all &= keep[n] == 1;
    CHECK(all, "attn_dropout_mask with p = 0 keeps every pair");
    test_tensor_free(&q), test_tensor_free(&out), test_tensor_free(&out2);
}

int main(void) {
    test_philox_known_answers();
    test_registry_blocks();
    test_mask_statistics();
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; ++n) {
        run_forward_case(&cases[n], 100 + n);
        run_backward_case(&cases[n], 200 + n);
    }
    test_other_options();
    test_expectation();
    test_gradients();
    test_varlen();
    test_validation();
    return test_finish();
}
