/*
 * test_forward_harness.h — shared by the tests/test_forward_*.c programs: a forward-pass test
 * case as data (shapes, layout, every mask option), building its random tensors and options,
 * and running the tiled forward against the reference. Header-only (static functions) so each
 * test stays one executable.
 */
#ifndef TEST_FORWARD_HARNESS_H
#define TEST_FORWARD_HARNESS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "test_support.h"

/* Which mask/bias tensor a case uses. */
typedef enum harness_tensor_kind {
    HARNESS_NONE = 0,
    HARNESS_PER_BATCH_HEAD = 1, /* [B, Hq, Tq, Tk] */
    HARNESS_BROADCAST = 2       /* [1, 1, Tq, Tk] */
} harness_tensor_kind;

typedef struct forward_case {
    const char *name;
    int64_t B, Tq, Tk, Hq, Hkv, Dk, Dv;
    test_layout layout;
    int causal;
    attn_alignment alignment;
    int window;                        /* nonzero: use window_left / window_right */
    int64_t window_left, window_right; /* -1 = unbounded side */
    harness_tensor_kind mask;          /* random bool mask, ~70% allowed */
    harness_tensor_kind bias;          /* random N(0,1) bias with ~10% -inf */
    int lengths;                       /* random query/key lengths per batch */
    int global_count;                  /* global tokens 0, 3, 6, ... */
    attn_sparse_pattern pattern;
    int64_t pattern_stride, pattern_summary, pattern_radius, pattern_dilation;
    int64_t block_q, block_k;          /* > 0: random block layout */
    int alibi;                         /* 1 standard slopes, 2 custom slopes */
    float softcap;
    int positions;                     /* explicit shuffled-offset positions */
    float scale;                       /* 0: default 1/sqrt(Dk) */
    float input_stddev;                /* 0: 1 */
} forward_case;

/* The tensors and option arrays of one case (owned). */
typedef struct forward_instance {
    test_tensor q, k, v, out, out_reference;
    test_tensor lse, lse_reference;
    attn_tensor mask_view, bias_view, layout_view;
    uint8_t *mask_data, *layout_data;
    float *bias_data, *slopes;
    int32_t *query_lengths, *key_lengths;
    int64_t *query_positions, *key_positions, *global_tokens;
    attn_options options;
    attn_execution execution; /* defaults unless a test sets threads, tiles or a kernel */
} forward_instance;

static inline attn_tensor harness_rank4(void *data, attn_dtype dtype, int64_t d0, int64_t d1, int64_t d2,
                                 int64_t d3) {
    const int64_t shape[4] = {d0, d1, d2, d3};
    return attn_tensor_contiguous(data, dtype, 4, shape);
}

/* Builds the case's random tensors and options (empty rows allowed as ZERO). */
static inline void forward_instance_build(forward_instance *x, const forward_case *c, uint64_t seed) {
    memset(x, 0, sizeof *x);
    test_rng rng;
    test_rng_seed(&rng, seed);
    const float stddev = c->input_stddev > 0 ? c->input_stddev : 1.0f;
    x->q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, c->layout);
    x->k = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dk, c->layout);
    x->v = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, c->layout);
    x->out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, c->layout);
    x->out_reference = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&x->q, &rng, stddev);
    test_tensor_fill_normal(&x->k, &rng, stddev);
    test_tensor_fill_normal(&x->v, &rng, 1.0f);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    x->lse = test_tensor_new_shape(3, lse_shape);
    x->lse_reference = test_tensor_new_shape(3, lse_shape);

    attn_options *o = &x->options;
    *o = attn_options_default();
    x->execution = attn_execution_default();
    o->empty_rows = ATTN_EMPTY_ROWS_ZERO;
    o->causal = c->causal;
    o->alignment = c->alignment;
    o->window = c->window;
    o->window_left = c->window ? c->window_left : -1;
    o->window_right = c->window ? c->window_right : -1;
    if (c->scale > 0) {
        o->custom_scale = 1;
        o->scale = c->scale;
    }
    o->softcap = c->softcap;
    const int64_t pairs = c->Tq * c->Tk;
    if (c->mask != HARNESS_NONE) {
        const int64_t mb = c->mask == HARNESS_BROADCAST ? 1 : c->B;
        const int64_t mh = c->mask == HARNESS_BROADCAST ? 1 : c->Hq;
        x->mask_data = malloc((size_t)(mb * mh * pairs));
        for (int64_t n = 0; n < mb * mh * pairs; ++n) x->mask_data[n] = test_rng_uniform(&rng) < 0.7;
        x->mask_view = harness_rank4(x->mask_data, ATTN_DTYPE_BOOL, mb, mh, c->Tq, c->Tk);
        o->mask = &x->mask_view;
    }
    if (c->bias != HARNESS_NONE) {
        const int64_t bb = c->bias == HARNESS_BROADCAST ? 1 : c->B;
        const int64_t bh = c->bias == HARNESS_BROADCAST ? 1 : c->Hq;
        x->bias_data = malloc((size_t)(bb * bh * pairs) * sizeof(float));
        for (int64_t n = 0; n < bb * bh * pairs; ++n)
            x->bias_data[n] = test_rng_uniform(&rng) < 0.1 ? -INFINITY : (float)test_rng_normal(&rng);
        x->bias_view = harness_rank4(x->bias_data, ATTN_DTYPE_F32, bb, bh, c->Tq, c->Tk);
        o->bias = &x->bias_view;
    }
    if (c->lengths) {
        x->query_lengths = malloc((size_t)c->B * sizeof(int32_t));
        x->key_lengths = malloc((size_t)c->B * sizeof(int32_t));
        for (int64_t b = 0; b < c->B; ++b) {
            x->query_lengths[b] = (int32_t)test_rng_range(&rng, 0, c->Tq);
            x->key_lengths[b] = (int32_t)test_rng_range(&rng, 0, c->Tk);
        }
        x->query_lengths[0] = (int32_t)c->Tq; /* batch 0 full, the others random */
        o->query_lengths = x->query_lengths;
        o->key_lengths = x->key_lengths;
    }
    if (c->global_count > 0) {
        x->global_tokens = malloc((size_t)c->global_count * sizeof(int64_t));
        const int64_t limit = c->Tq > c->Tk ? c->Tq : c->Tk;
        for (int n = 0; n < c->global_count; ++n) x->global_tokens[n] = test_rng_range(&rng, 0, limit - 1);
        o->global_tokens = x->global_tokens;
        o->global_token_count = c->global_count;
    }
    o->pattern = c->pattern;
    o->pattern_stride = c->pattern_stride;
    o->pattern_summary = c->pattern_summary;
    o->pattern_radius = c->pattern_radius;
    o->pattern_dilation = c->pattern_dilation;
    if (c->block_q > 0) {
        const int64_t rows = (c->Tq + c->block_q - 1) / c->block_q;
        const int64_t columns = (c->Tk + c->block_k - 1) / c->block_k;
        x->layout_data = malloc((size_t)(c->B * rows * columns));
        for (int64_t n = 0; n < c->B * rows * columns; ++n) x->layout_data[n] = test_rng_uniform(&rng) < 0.6;
        x->layout_view = harness_rank4(x->layout_data, ATTN_DTYPE_BOOL, c->B, 1, rows, columns);
        o->block_layout = &x->layout_view;
        o->block_q = c->block_q;
        o->block_k = c->block_k;
    }
    if (c->alibi) {
        o->alibi = 1;
        if (c->alibi == 2) {
            x->slopes = malloc((size_t)c->Hq * sizeof(float));
            for (int64_t h = 0; h < c->Hq; ++h) x->slopes[h] = (float)(0.05 + 0.3 * test_rng_uniform(&rng));
            o->alibi_slopes = x->slopes;
        }
    }
    if (c->positions) {
        /* Increasing positions with random gaps and a common offset (chunked prefill). */
        x->query_positions = malloc((size_t)c->Tq * sizeof(int64_t));
        x->key_positions = malloc((size_t)c->Tk * sizeof(int64_t));
        int64_t position = 0;
        for (int64_t j = 0; j < c->Tk; ++j) x->key_positions[j] = (position += test_rng_range(&rng, 1, 2));
        position = x->key_positions[c->Tk - 1] / 2;
        for (int64_t i = 0; i < c->Tq; ++i) x->query_positions[i] = (position += test_rng_range(&rng, 0, 2));
        o->query_positions = x->query_positions;
        o->key_positions = x->key_positions;
    }
}

static inline void forward_instance_free(forward_instance *x) {
    test_tensor_free(&x->q);
    test_tensor_free(&x->k);
    test_tensor_free(&x->v);
    test_tensor_free(&x->out);
    test_tensor_free(&x->out_reference);
    test_tensor_free(&x->lse);
    test_tensor_free(&x->lse_reference);
    free(x->mask_data);
    free(x->layout_data);
    free(x->bias_data);
    free(x->slopes);
    free(x->query_lengths);
    free(x->key_lengths);
    free(x->query_positions);
    free(x->key_positions);
    free(x->global_tokens);
}

/* Runs the reference into out_reference / lse_reference. */
static inline attn_status forward_instance_reference(forward_instance *x, attn_error *error) {
    return attn_reference_forward(&x->q.view, &x->k.view, &x->v.view, &x->options,
                                  &x->out_reference.view, &x->lse_reference.view, error);
}

/* Runs attn_forward into out / lse. */
static inline attn_status forward_instance_forward(forward_instance *x, attn_error *error) {
    return attn_forward(&x->q.view, &x->k.view, &x->v.view, &x->options, &x->out.view,
                        &x->lse.view, &x->execution, error);
}

/* Builds the case, runs reference and forward (with the given kernel), checks O and LSE
 * within `tolerance` relative. Returns the worst error seen. */
static inline double forward_case_check(const forward_case *c, uint64_t seed, attn_kernel_choice kernel,
                                 double tolerance) {
    forward_instance x;
    forward_instance_build(&x, c, seed);
    x.execution.kernel = kernel;
    attn_error error = {0};
    attn_status status = forward_instance_reference(&x, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: reference", c->name);
    status = forward_instance_forward(&x, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: forward", c->name);
    double out_error = test_max_relative_error(&x.out.view, &x.out_reference.view);
    double lse_error = test_max_relative_error(&x.lse.view, &x.lse_reference.view);
    CHECK(out_error <= tolerance, "%s: O relative error %.3g > %.1g", c->name, out_error, tolerance);
    CHECK(lse_error <= tolerance, "%s: LSE relative error %.3g > %.1g", c->name, lse_error, tolerance);
    forward_instance_free(&x);
    return out_error > lse_error ? out_error : lse_error;
}

#endif /* TEST_FORWARD_HARNESS_H */
