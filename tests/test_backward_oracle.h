/*
 * test_backward_oracle.h — what the backward tests share (header-only, static functions):
 * a tiny double-precision attention forward used as the finite-difference oracle and to
 * produce the O and LSE the backward consumes, plus a table-driven description of one
 * backward configuration (shapes, layout, masks, soft-cap, ALiBi, bias) and its tensors.
 *
 * The oracle asks the library's mask predicate (mask.h: attn_mask_allowed and, for ALiBi,
 * attn_mask_additive on a context without the bias tensor) which pairs are allowed: the mask
 * itself is tested by the mask tests; here it only selects pairs. The learnable bias is
 * added by the oracle in double so that it can be perturbed.
 */
#ifndef ATTN_TEST_BACKWARD_ORACLE_H
#define ATTN_TEST_BACKWARD_ORACLE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mask/mask.h"
#include "test_support.h"

/* ---- one configuration (a row of a test table) ---- */
typedef enum bias_kind { BIAS_NONE = 0, BIAS_FULL = 1, BIAS_PER_HEAD = 2, BIAS_SHARED = 3 } bias_kind;

typedef struct backward_case {
    const char *name;
    int64_t B, Tq, Tk, Hq, Hkv, Dk, Dv;
    test_layout layout;
    int causal;
    attn_alignment alignment;
    int64_t window_left, window_right; /* 0, 0 = "not set" is expressed by use_window */
    int use_window;
    float softcap;
    int alibi;
    int bool_mask;         /* random boolean mask [B, 1, Tq, Tk] (~75% allowed) */
    bias_kind bias;        /* FULL [B,Hq,Tq,Tk], PER_HEAD [1,Hq,Tq,Tk], SHARED [1,1,Tq,Tk] */
    int lengths;           /* random query/key lengths per batch */
    attn_sparse_pattern pattern;
    int global_tokens;     /* query/key 0 global */
    int block_layout;      /* random block layout with blocks of 3 x 4 */
    int empty_rows_zero;   /* ATTN_EMPTY_ROWS_ZERO (needed when rows can be empty) */
    float custom_scale;    /* 0 = default */
} backward_case;

/* Shorthands for table rows: SIZES(B, Tq, Tk, Hq, Hkv, Dk, Dv), CAUSAL(BOTTOM_RIGHT),
 * WINDOW(left, right). */
#define SIZES(b, tq, tk, hq, hkv, dk, dv) .B = b, .Tq = tq, .Tk = tk, .Hq = hq, .Hkv = hkv, .Dk = dk, .Dv = dv
#define CAUSAL(align) .causal = 1, .alignment = ATTN_ALIGN_##align
#define WINDOW(left, right) .use_window = 1, .window_left = left, .window_right = right

/* Tensors and options of one configuration, owning their memory. */
typedef struct backward_setup {
    backward_case config;
    test_tensor q, k, v, out, dout, dq, dk, dv;
    test_tensor lse;             /* [B, Hq, Tq] */
    test_tensor mask, bias, dbias, block_layout;
    int32_t query_lengths[8], key_lengths[8];
    int64_t global_tokens[2];
    attn_options options;
    attn_execution execution; /* zeroed: the defaults */
    attn_tensor mask_view, bias_view, block_view;
} backward_setup;

/* Rank-4 BOOL tensor that owns its memory (test_tensor is float only). */
static test_tensor oracle_bool_tensor(const int64_t shape[4]) {
    test_tensor t;
    memset(&t, 0, sizeof t);
    int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
    t.allocation = calloc((size_t)count, 1);
    t.allocation_floats = count;
    t.view = attn_tensor_contiguous(t.allocation, ATTN_DTYPE_BOOL, 4, shape);
    return t;
}

static void backward_setup_init(backward_setup *setup, const backward_case *config, uint64_t seed) {
    memset(setup, 0, sizeof *setup);
    setup->config = *config;
    const backward_case *c = config;
    test_rng rng;
    test_rng_seed(&rng, seed);
    setup->q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, c->layout);
    setup->k = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dk, c->layout);
    setup->v = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, c->layout);
    setup->out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, c->layout);
    setup->dout = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, c->layout);
    setup->dq = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, c->layout);
    setup->dk = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dk, c->layout);
    setup->dv = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, c->layout);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    setup->lse = test_tensor_new_shape(3, lse_shape);
    test_tensor_fill_normal(&setup->q, &rng, 1.0f);
    test_tensor_fill_normal(&setup->k, &rng, 1.0f);
    test_tensor_fill_normal(&setup->v, &rng, 1.0f);
    test_tensor_fill_normal(&setup->dout, &rng, 1.0f);
    /* Outputs start as NaN everywhere (padding included): every element must be written. */
    test_tensor_fill_all(&setup->dq, NAN);
    test_tensor_fill_all(&setup->dk, NAN);
    test_tensor_fill_all(&setup->dv, NAN);

    attn_options *o = &setup->options;
    *o = attn_options_default();
    o->alignment = c->alignment;
    o->causal = c->causal;
    if (c->use_window) {
        o->window = 1;
        o->window_left = c->window_left;
        o->window_right = c->window_right;
    }
    o->softcap = c->softcap;
    o->alibi = c->alibi;
    if (c->custom_scale > 0) {
        o->custom_scale = 1;
        o->scale = c->custom_scale;
    }
    if (c->empty_rows_zero) o->empty_rows = ATTN_EMPTY_ROWS_ZERO;
    if (c->bool_mask) {
        const int64_t shape[4] = {c->B, 1, c->Tq, c->Tk};
        setup->mask = oracle_bool_tensor(shape);
        uint8_t *m = (uint8_t *)setup->mask.allocation;
        for (int64_t e = 0; e < setup->mask.allocation_floats; ++e)
            m[e] = test_rng_uniform(&rng) < 0.75;
        setup->mask_view = setup->mask.view;
        o->mask = &setup->mask_view;
    }
    if (c->bias != BIAS_NONE) {
        const int64_t shape[4] = {c->bias == BIAS_FULL ? c->B : 1,
                                  c->bias == BIAS_SHARED ? 1 : c->Hq, c->Tq, c->Tk};
        setup->bias = test_tensor_new_shape(4, shape);
        setup->dbias = test_tensor_new_shape(4, shape);
        test_tensor_fill_normal(&setup->bias, &rng, 0.7f);
        test_tensor_fill_all(&setup->dbias, NAN);
        setup->bias_view = setup->bias.view;
        o->bias = &setup->bias_view;
    }
    if (c->lengths) {
        for (int64_t b = 0; b < c->B && b < 8; ++b) {
            setup->query_lengths[b] = (int32_t)test_rng_range(&rng, 1, c->Tq);
            setup->key_lengths[b] = (int32_t)test_rng_range(&rng, 1, c->Tk);
        }
        setup->query_lengths[0] = (int32_t)c->Tq; /* one batch unpadded */
        o->query_lengths = setup->query_lengths;
        o->key_lengths = setup->key_lengths;
    }
    if (c->pattern != ATTN_PATTERN_NONE) {
        o->pattern = c->pattern;
        o->pattern_stride = 3;
        o->pattern_summary = 1;
        o->pattern_radius = 2;
        o->pattern_dilation = 2;
    }
    if (c->global_tokens) {
        setup->global_tokens[0] = 0;
        o->global_tokens = setup->global_tokens;
        o->global_token_count = 1;
    }
    if (c->block_layout) {
        o->block_q = 3;
        o->block_k = 4;
        const int64_t shape[4] = {1, c->Hq, (c->Tq + 2) / 3, (c->Tk + 3) / 4};
        setup->block_layout = oracle_bool_tensor(shape);
        uint8_t *m = (uint8_t *)setup->block_layout.allocation;
        for (int64_t e = 0; e < setup->block_layout.allocation_floats; ++e)
            m[e] = test_rng_uniform(&rng) < 0.7;
        setup->block_view = setup->block_layout.view;
        o->block_layout = &setup->block_view;
    }
}

static void backward_setup_free(backward_setup *setup) {
    test_tensor *all[] = {&setup->q,  &setup->k,    &setup->v,     &setup->out,
                          &setup->dout, &setup->dq, &setup->dk,    &setup->dv,
                          &setup->lse, &setup->bias, &setup->dbias};
    for (size_t t = 0; t < sizeof all / sizeof all[0]; ++t)
        if (all[t]->allocation) test_tensor_free(all[t]);
    free(setup->mask.allocation);
    free(setup->block_layout.allocation);
}

/* ---- the double-precision forward ---- */

/* Double copies of the inputs in contiguous [B][T][H][D] order, plus the bias [Bb][Hb][Tq][Tk]. */
typedef struct oracle_inputs {
    int64_t B, Tq, Tk, Hq, Hkv, Dk, Dv, bias_batches, bias_heads;
    double scale, softcap;
    double *q, *k, *v, *bias;
    attn_mask_context mask; /* the call's predicate and ALiBi, without the bias tensor */
    attn_options mask_options;
} oracle_inputs;

static void oracle_copy(const attn_tensor *t, double *target) {
    int64_t n = 0;
    for (int64_t a = 0; a < t->shape[0]; ++a)
        for (int64_t b = 0; b < t->shape[1]; ++b)
            for (int64_t c = 0; c < t->shape[2]; ++c)
                for (int64_t d = 0; d < t->shape[3]; ++d) target[n++] = test_get4(t, a, b, c, d);
}

static int oracle_init(oracle_inputs *oracle, backward_setup *setup) {
    const backward_case *c = &setup->config;
    memset(oracle, 0, sizeof *oracle);
    oracle->B = c->B, oracle->Tq = c->Tq, oracle->Tk = c->Tk, oracle->Hq = c->Hq;
    oracle->Hkv = c->Hkv, oracle->Dk = c->Dk, oracle->Dv = c->Dv;
    oracle->scale = c->custom_scale > 0 ? c->custom_scale : 1.0 / sqrt((double)c->Dk);
    oracle->softcap = c->softcap;
    oracle->q = malloc(sizeof(double) * (size_t)(c->B * c->Tq * c->Hq * c->Dk));
    oracle->k = malloc(sizeof(double) * (size_t)(c->B * c->Tk * c->Hkv * c->Dk));
    oracle->v = malloc(sizeof(double) * (size_t)(c->B * c->Tk * c->Hkv * c->Dv));
    oracle_copy(&setup->q.view, oracle->q);
    oracle_copy(&setup->k.view, oracle->k);
    oracle_copy(&setup->v.view, oracle->v);
    if (setup->options.bias) {
        oracle->bias_batches = setup->bias.view.shape[0];
        oracle->bias_heads = setup->bias.view.shape[1];
        oracle->bias = malloc(sizeof(double) *
                              (size_t)(oracle->bias_batches * oracle->bias_heads * c->Tq * c->Tk));
        oracle_copy(&setup->bias.view, oracle->bias);
    }
    oracle->mask_options = setup->options;
    oracle->mask_options.bias = NULL;
    attn_problem problem = {c->B, c->Tq, c->Tk, c->Hq, c->Hkv, c->Hq / c->Hkv, c->Dk, c->Dv,
                            (float)oracle->scale};
    attn_error error;
    return attn_mask_context_init(&oracle->mask, &oracle->mask_options, &problem, &error) == ATTN_OK;
}

static void oracle_free(oracle_inputs *oracle) {
    free(oracle->q);
    free(oracle->k);
    free(oracle->v);
    free(oracle->bias);
    attn_mask_context_free(&oracle->mask);
}

/*
 * O [B][Tq][Hq][Dv] and LSE [B][Hq][Tq] in double, by the definition: x = s q.k, soft-cap,
 * + bias + ALiBi, -inf where not allowed; P = softmax; O = P V. Empty rows: O = 0, LSE = -inf.
 * logits: scratch of Tk doubles.
 */
static void oracle_forward(const oracle_inputs *o, double *out, double *lse, double *logits) {
    const int64_t G = o->Hq / o->Hkv;
    for (int64_t b = 0; b < o->B; ++b)
        for (int64_t h = 0; h < o->Hq; ++h)
            for (int64_t i = 0; i < o->Tq; ++i) {
                double maximum = -INFINITY;
                for (int64_t j = 0; j < o->Tk; ++j) {
                    double x = -INFINITY;
                    if (attn_mask_allowed(&o->mask, b, h, i, j)) {
                        double dot = 0;
                        for (int64_t d = 0; d < o->Dk; ++d)
                            dot += o->q[((b * o->Tq + i) * o->Hq + h) * o->Dk + d] *
                                   o->k[((b * o->Tk + j) * o->Hkv + h / G) * o->Dk + d];
                        x = o->scale * dot;
                        if (o->softcap > 0) x = o->softcap * tanh(x / o->softcap);
                        if (o->mask.has_additive) x += attn_mask_additive(&o->mask, b, h, i, j);
                        if (o->bias) {
                            const int64_t bb = o->bias_batches == 1 ? 0 : b;
                            const int64_t bh = o->bias_heads == 1 ? 0 : h;
                            x += o->bias[((bb * o->bias_heads + bh) * o->Tq + i) * o->Tk + j];
                        }
                    }
                    logits[j] = x;
                    if (x > maximum) maximum = x;
                }
                double *row = out + ((b * o->Tq + i) * o->Hq + h) * o->Dv;
                for (int64_t c = 0; c < o->Dv; ++c) row[c] = 0;
                if (maximum == -INFINITY) {
                    lse[(b * o->Hq + h) * o->Tq + i] = -INFINITY;
                    continue;
                }
                double sum = 0;
                for (int64_t j = 0; j < o->Tk; ++j) sum += exp(logits[j] - maximum);
                for (int64_t j = 0; j < o->Tk; ++j) {
                    const double p = exp(logits[j] - maximum) / sum;
                    if (p == 0) continue;
                    for (int64_t c = 0; c < o->Dv; ++c)
                        row[c] += p * o->v[((b * o->Tk + j) * o->Hkv + h / G) * o->Dv + c];
                }
                lse[(b * o->Hq + h) * o->Tq + i] = maximum + log(sum);
            }
}

/* Runs the oracle forward and stores O and LSE (rounded to float) in the setup's tensors. */
static void oracle_fill_forward(const oracle_inputs *o, backward_setup *setup) {
    double *out = malloc(sizeof(double) * (size_t)(o->B * o->Tq * o->Hq * o->Dv));
    double *lse = malloc(sizeof(double) * (size_t)(o->B * o->Hq * o->Tq));
    double *logits = malloc(sizeof(double) * (size_t)o->Tk);
    oracle_forward(o, out, lse, logits);
    for (int64_t b = 0; b < o->B; ++b)
        for (int64_t i = 0; i < o->Tq; ++i)
            for (int64_t h = 0; h < o->Hq; ++h) {
                for (int64_t c = 0; c < o->Dv; ++c)
                    *((float *)setup->out.view.data + b * setup->out.view.stride[0] +
                      i * setup->out.view.stride[1] + h * setup->out.view.stride[2] +
                      c * setup->out.view.stride[3]) =
                        (float)out[((b * o->Tq + i) * o->Hq + h) * o->Dv + c];
                setup->lse.allocation[(b * o->Hq + h) * o->Tq + i] =
                    (float)lse[(b * o->Hq + h) * o->Tq + i];
            }
    free(out);
    free(lse);
    free(logits);
}

#endif /* ATTN_TEST_BACKWARD_ORACLE_H */
