/*
 * reference.c — attn_reference_forward: the naive attention forward pass, written to be read
 * line by line against attn.h and docs/attention-math.md §1 (the forward pass). For each
 * (b, h) it materialises the Tq x Tk logits in double, then takes a max-subtracted softmax per row.
 * It is the specification and the tests' oracle, not a fast path.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../call/call.h"
#include "../core/internal.h"
#include "../mask/mask.h"
#include "../mask/dropout.h"
#include "../mask/sinks.h"

/* The final logit of pair (i, j) of (b, h), in double: scale, soft-cap, additive, -inf when
 * not allowed (attn.h, attn_options). q_row [Dk], k_row [Dk] with element strides. */
static double reference_logit(const attn_mask_context *mask, const attn_problem *problem,
                              int64_t b, int64_t h, int64_t i, int64_t j, const float *q_row,
                              int64_t q_dim_stride, const float *k_row, int64_t k_dim_stride) {
    if (!attn_mask_allowed(mask, b, h, i, j)) return -INFINITY;
    double dot = 0.0;
    for (int64_t d = 0; d < problem->key_dim; ++d)
        dot += (double)q_row[d * q_dim_stride] * (double)k_row[d * k_dim_stride];
    double x = (double)problem->scale * dot;
    const double softcap = (double)mask->options->softcap;
    /* (a -inf score, from infinite inputs, is a pair not allowed: the soft-cap keeps it) */
    if (softcap > 0.0 && x != -INFINITY) x = softcap * tanh(x / softcap);
    if (!mask->has_additive) return x;
    const double additive = attn_mask_additive(mask, b, h, i, j);
    return additive == -INFINITY ? -INFINITY /* not allowed, whatever x is (+inf too) */
                                 : x + additive;
}

/* Row i of (b, h) from its logits row [Tk] (overwritten with the weights): m = max x,
 * l = sum exp(x - m) (+ the head's sink), O = sum exp(x - m) v / l, LSE = m + log l; an
 * attended NaN gives NaN; a row with no allowed key (m = -inf) is empty: false under the ERROR
 * policy (nothing written), else the policy's O and LSE. With dropout the kept weights count
 * 1 / (1 - p) times in O and the dropped ones not at all (l keeps them all).
 * o_row: Dv floats, o_stride apart. */
static bool reference_row(const attn_mask_context *mask, const attn_problem *problem,
                          const attn_tensor *v, int64_t b, int64_t h, int64_t i, double *row,
                          float *o_row, int64_t o_stride, float *lse_value) {
    const attn_options *options = mask->options;
    const int64_t Tk = problem->key_length, Dv = problem->value_dim;
    const int64_t kv_head = h / problem->group_size;
    double row_max = -INFINITY;
    bool nan = false; /* an attended NaN logit: O and LSE NaN (conventions.md) */
    for (int64_t j = 0; j < Tk; ++j) {
        if (row[j] > row_max) row_max = row[j];
        nan |= isnan(row[j]);
    }
    if (nan) {
        for (int64_t e = 0; e < Dv; ++e) o_row[e * o_stride] = NAN;
        if (lse_value != NULL) *lse_value = NAN;
        return true;
    }
    if (row_max == -INFINITY) {
        const bool padding = i >= attn_mask_query_count(mask, b);
        if (!padding && options->empty_rows == ATTN_EMPTY_ROWS_ERROR) return false;
        const bool as_nan = !padding && options->empty_rows == ATTN_EMPTY_ROWS_NAN;
        for (int64_t e = 0; e < Dv; ++e) o_row[e * o_stride] = as_nan ? NAN : 0.0f;
        /* (ZERO: the sink takes the whole row, LSE = the sink's logit) */
        const float sink = attn_sink_logit(options, h);
        if (lse_value != NULL)
            *lse_value = as_nan ? NAN : padding || sink == -INFINITY ? -INFINITY : sink;
        return true;
    }
    /* The sink: one more column of logit s and value 0 (attn_options.sinks). */
    const double sink = attn_sink_logit(options, h);
    if (sink > row_max) row_max = sink;
    double row_sum = 0.0; /* row[j] becomes the weight exp(x - m) */
    for (int64_t j = 0; j < Tk; ++j) {
        row[j] = row[j] == -INFINITY ? 0.0 : exp(row[j] - row_max);
        row_sum += row[j];
    }
    if (sink != -INFINITY) row_sum += exp(sink - row_max);
    const attn_dropout dropout = attn_dropout_of(options, problem->query_heads);
    for (int64_t j = 0; j < Tk && dropout.active; ++j)
        row[j] *= attn_dropout_keeps(&dropout, b, h, i, j) ? 1.0 / (1.0 - options->dropout_p)
                                                            : 0.0;
    for (int64_t e = 0; e < Dv; ++e) {
        double weighted = 0.0;
        for (int64_t j = 0; j < Tk; ++j)
            if (row[j] != 0.0) weighted += row[j] * (double)*attn_f32_at4(v, b, j, kv_head, e);
        o_row[e * o_stride] = (float)(weighted / row_sum);
    }
    if (lse_value != NULL) *lse_value = (float)(row_max + log(row_sum));
    return true;
}

attn_status attn_reference_forward(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_options *caller_options,
                                   attn_tensor *out, attn_tensor *lse, attn_error *error) {
    attn_options resolved;
    attn_status status = attn_options_resolve(caller_options, &resolved, error);
    if (status != ATTN_OK) return status;
    const attn_options *options = &resolved;
    attn_problem problem;
    status = attn_validate_call(q, k, v, options, out, lse, &problem, error);
    if (status != ATTN_OK) return status;
    status = attn_check_forward_aliasing(q, k, v, out, lse, options, &problem, error);
    if (status != ATTN_OK) return status;

    const int64_t Tq = problem.query_length, Tk = problem.key_length;
    size_t logit_count, logit_bytes;
    if (!attn_mul_size((size_t)Tq, (size_t)Tk, &logit_count) ||
        !attn_mul_size(logit_count, sizeof(double), &logit_bytes))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "Tq = %lld x Tk = %lld logits overflow size_t", (long long)Tq, (long long)Tk);

    attn_mask_context mask;
    status = attn_mask_context_init(&mask, options, &problem, error);
    if (status != ATTN_OK) return status;
    double *logits = malloc(logit_bytes); /* [Tq][Tk] of one (b, h) */
    if (logits == NULL) {
        attn_mask_context_free(&mask);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "reference logits: %zu bytes", logit_bytes);
    }

    for (int64_t b = 0; b < problem.batch; ++b) {
        for (int64_t h = 0; h < problem.query_heads; ++h) {
            const int64_t kv_head = h / problem.group_size;

            /* 1. Logits x[i][j] for every pair (-inf where not allowed). */
            for (int64_t i = 0; i < Tq; ++i)
                for (int64_t j = 0; j < Tk; ++j)
                    logits[i * Tk + j] = reference_logit(
                        &mask, &problem, b, h, i, j, attn_f32_at4(q, b, i, h, 0), q->stride[3],
                        attn_f32_at4(k, b, j, kv_head, 0), k->stride[3]);

            /* 2. Per row: the softmax and O (reference_row). */
            for (int64_t i = 0; i < Tq; ++i)
                if (!reference_row(&mask, &problem, v, b, h, i, logits + i * Tk,
                                   attn_f32_at4(out, b, i, h, 0), out->stride[3],
                                   lse != NULL ? attn_f32_at3(lse, b, h, i) : NULL)) {
                    free(logits);
                    attn_mask_context_free(&mask);
                    return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                                     "query row b = %lld, h = %lld, i = %lld has no allowed key "
                                     "(options.empty_rows = ERROR; use ZERO or NAN to accept it)",
                                     (long long)b, (long long)h, (long long)i);
                }
        }
    }
    free(logits);
    attn_mask_context_free(&mask);
    return ATTN_OK;
}
