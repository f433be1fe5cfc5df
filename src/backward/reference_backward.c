/*
 * reference_backward.c — attn_reference_backward: the attention backward pass written as the
 * maths state it (docs/attention-math.md §2.2), one (batch, query head)
 * at a time, with the dense Tq x Tk matrices S, P, dP and dS in double precision. It is the
 * specification a reader can check line by line and the oracle of the tests; it is slow and
 * uses O(Tq * Tk) memory on purpose. The fast tiled version is flash_backward.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"

#include "../call/call.h"
#include "../core/internal.h"
#include "../mask/dropout.h"

/* Dense double buffers of one call, freed together. */
typedef struct reference_buffers {
    double *probabilities;      /* P  [Tq][Tk] of the current (b, h) */
    double *score_gradient;     /* dS [Tq][Tk], after the soft-cap chain rule: d loss / d(s q.k) */
    double *bias_gradient;      /* dS [Tq][Tk] before the soft-cap chain rule: d loss / d bias */
    double *row_dot;            /* D  [Tq] = rowsum(dO * O) */
    double *key_gradient;       /* dK [Tk][Dk] of the current (b, kv head), summed over its group */
    double *value_gradient;     /* dV [Tk][Dv] likewise */
    double *query_gradient;     /* dQ [Tq][Dk] of the current (b, h) */
    double *dbias_total;        /* d bias with the bias's shape [Bb][Hb][Tq][Tk], or NULL */
} reference_buffers;

static void free_buffers(reference_buffers *buffers) {
    free(buffers->probabilities);
    free(buffers->score_gradient);
    free(buffers->bias_gradient);
    free(buffers->row_dot);
    free(buffers->key_gradient);
    free(buffers->value_gradient);
    free(buffers->query_gradient);
    free(buffers->dbias_total);
}

/* calloc of a*b doubles with the product checked; NULL on overflow or failure. */
static double *allocate_doubles(int64_t a, int64_t b) {
    int64_t count;
    size_t bytes;
    if (!attn_mul_i64(a, b, &count) || !attn_mul_size((size_t)count, sizeof(double), &bytes))
        return NULL;
    return calloc((size_t)count, sizeof(double));
}

/* Gradients of one (b, h): fills buffers->probabilities, score_gradient, bias_gradient
 * and adds this head's share into key_gradient / value_gradient (its KV head's sums);
 * writes query_gradient. Follows §2.2 line by line. */
static void backward_one_head(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                              const attn_tensor *out, const attn_tensor *lse,
                              const attn_tensor *dout, const attn_mask_context *context,
                              int64_t b, int64_t h, reference_buffers *buffers) {
    const attn_problem *problem = &context->problem;
    const int64_t Tq = problem->query_length, Tk = problem->key_length;
    const int64_t Dk = problem->key_dim, Dv = problem->value_dim;
    const int64_t kv_head = h / problem->group_size;
    const double scale = problem->scale;
    const double softcap = context->options->softcap;
    /* Dropout: O = (M ∘ P) V with M = keep / (1 - p), so dP = M ∘ dO Vᵀ and dV = (M ∘ P)ᵀ dO. */
    const attn_dropout dropout = attn_dropout_of(context->options, problem->query_heads);
    const double kept_factor = 1.0 / (1.0 - context->options->dropout_p);

    /* D_i = sum_c dO_ic * O_ic, from the forward's stored O. */
    for (int64_t i = 0; i < Tq; ++i) {
        double sum = 0.0;
        for (int64_t c = 0; c < Dv; ++c)
            sum += (double)*attn_f32_at4(dout, b, i, h, c) * *attn_f32_at4(out, b, i, h, c);
        buffers->row_dot[i] = sum;
    }

    for (int64_t i = 0; i < Tq; ++i) {
        const double row_lse = *attn_f32_at3(lse, b, h, i);
        for (int64_t j = 0; j < Tk; ++j) {
            /* Logit pipeline: x = s q.k; soft-cap; + bias + ALiBi; -inf where not allowed. */
            double dot = 0.0;
            for (int64_t d = 0; d < Dk; ++d)
                dot += (double)*attn_f32_at4(q, b, i, h, d) * *attn_f32_at4(k, b, j, kv_head, d);
            double logit = scale * dot;
            double softcap_derivative = 1.0; /* d(capped logit) / d(s q.k) */
            if (softcap > 0.0) {
                const double t = tanh(logit / softcap);
                logit = softcap * t;
                softcap_derivative = 1.0 - t * t;
            }
            double additive = 0.0;
            if (context->has_additive) additive = attn_mask_additive(context, b, h, i, j);
            const bool allowed = attn_mask_allowed(context, b, h, i, j) && additive != -INFINITY;

            /* P_ij = exp(S_ij - lse_i); 0 where masked, where the logit is -inf (a pair not
               allowed, conventions.md "NaN") or where the row is empty. */
            double probability = 0.0;
            if (allowed && row_lse != -INFINITY && logit + additive != -INFINITY)
                probability = exp(logit + additive - row_lse);

            /* dP_ij = dO_i . V_j */
            double probability_gradient = 0.0;
            for (int64_t c = 0; c < Dv; ++c)
                probability_gradient +=
                    (double)*attn_f32_at4(dout, b, i, h, c) * *attn_f32_at4(v, b, j, kv_head, c);

            const double factor =
                !dropout.active ? 1.0
                : attn_dropout_keeps(&dropout, b, h, i, j) ? kept_factor : 0.0;
            probability_gradient *= factor;

            /* dS = P * (dP - D), 0 where P = 0 (a pair not allowed contributes nothing, to a
               NaN row either); the bias sees dS, the dot product sees dS * (1 - tanh^2). */
            const double score_gradient =
                probability == 0.0 ? 0.0
                                   : probability * (probability_gradient - buffers->row_dot[i]);
            buffers->probabilities[i * Tk + j] = probability * factor;
            buffers->bias_gradient[i * Tk + j] = score_gradient;
            buffers->score_gradient[i * Tk + j] =
                score_gradient == 0.0 ? 0.0 : score_gradient * softcap_derivative;
        }
    }

    /* dQ = s * dS * K. Terms of weight 0 are skipped in the three products: a pair not
       allowed contributes nothing, so a NaN in a row or key it does not attend stays out. */
    for (int64_t i = 0; i < Tq; ++i)
        for (int64_t d = 0; d < Dk; ++d) {
            double sum = 0.0;
            for (int64_t j = 0; j < Tk; ++j)
                if (buffers->score_gradient[i * Tk + j] != 0.0)
                    sum += buffers->score_gradient[i * Tk + j] * *attn_f32_at4(k, b, j, kv_head, d);
            buffers->query_gradient[i * Dk + d] = scale * sum;
        }
    /* dK += s * dS^T * Q ;  dV += P^T * dO   (summed over the query heads of the group) */
    for (int64_t j = 0; j < Tk; ++j) {
        for (int64_t d = 0; d < Dk; ++d) {
            double sum = 0.0;
            for (int64_t i = 0; i < Tq; ++i)
                if (buffers->score_gradient[i * Tk + j] != 0.0)
                    sum += buffers->score_gradient[i * Tk + j] * *attn_f32_at4(q, b, i, h, d);
            buffers->key_gradient[j * Dk + d] += scale * sum;
        }
        for (int64_t c = 0; c < Dv; ++c) {
            double sum = 0.0;
            for (int64_t i = 0; i < Tq; ++i)
                if (buffers->probabilities[i * Tk + j] != 0.0)
                    sum += buffers->probabilities[i * Tk + j] * *attn_f32_at4(dout, b, i, h, c);
            buffers->value_gradient[j * Dv + c] += sum;
        }
    }
}

attn_status attn_reference_backward(const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v, const attn_tensor *out,
                                    const attn_tensor *lse, const attn_tensor *dout,
                                    const attn_options *caller_options, attn_tensor *dq,
                                    attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                                    attn_error *error) {
    attn_options resolved;
    attn_status status = attn_options_resolve(caller_options, &resolved, error);
    if (status != ATTN_OK) return status;
    const attn_options *options = &resolved;
    attn_problem problem;
    status = attn_backward_validate(q, k, v, out, lse, dout, options, dq, dk, dv, dbias,
                                    false, &problem, error);
    if (status != ATTN_OK) return status;
    status = attn_check_backward_aliasing(q, k, v, out, lse, dout, dq, dk, dv, dbias, options,
                                          &problem, error);
    if (status != ATTN_OK) return status;
    attn_mask_context context;
    status = attn_mask_context_init(&context, options, &problem, error);
    if (status != ATTN_OK) return status;

    const int64_t B = problem.batch, Tq = problem.query_length, Tk = problem.key_length;
    const int64_t Hkv = problem.kv_heads, G = problem.group_size;
    const int64_t Dk = problem.key_dim, Dv = problem.value_dim;
    const int64_t bias_batches = dbias ? dbias->shape[0] : 1;
    const int64_t bias_heads = dbias ? dbias->shape[1] : 1;

    reference_buffers buffers = {0};
    int64_t pairs = 0, bias_elements = 0;
    bool sizes_fit = attn_mul_i64(Tq, Tk, &pairs) &&
                     attn_mul_i64(bias_batches * bias_heads, pairs, &bias_elements);
    if (sizes_fit) {
        buffers.probabilities = allocate_doubles(Tq, Tk);
        buffers.score_gradient = allocate_doubles(Tq, Tk);
        buffers.bias_gradient = allocate_doubles(Tq, Tk);
        buffers.row_dot = allocate_doubles(Tq, 1);
        buffers.key_gradient = allocate_doubles(Tk, Dk);
        buffers.value_gradient = allocate_doubles(Tk, Dv);
        buffers.query_gradient = allocate_doubles(Tq, Dk);
        if (dbias) buffers.dbias_total = allocate_doubles(bias_elements, 1);
    }
    if (!sizes_fit || !buffers.probabilities || !buffers.score_gradient ||
        !buffers.bias_gradient || !buffers.row_dot || !buffers.key_gradient ||
        !buffers.value_gradient || !buffers.query_gradient || (dbias && !buffers.dbias_total)) {
        free_buffers(&buffers);
        attn_mask_context_free(&context);
        return attn_fail(error, sizes_fit ? ATTN_ERROR_OUT_OF_MEMORY : ATTN_ERROR_OVERFLOW,
                         "Tq x Tk = %lld x %lld: the reference backward's dense buffers do not fit",
                         (long long)Tq, (long long)Tk);
    }

    for (int64_t b = 0; b < B; ++b)
        for (int64_t kv_head = 0; kv_head < Hkv; ++kv_head) {
            memset(buffers.key_gradient, 0, (size_t)(Tk * Dk) * sizeof(double));
            memset(buffers.value_gradient, 0, (size_t)(Tk * Dv) * sizeof(double));
            for (int64_t h = kv_head * G; h < (kv_head + 1) * G; ++h) {
                backward_one_head(q, k, v, out, lse, dout, &context, b, h, &buffers);
                for (int64_t i = 0; i < Tq; ++i)
                    for (int64_t d = 0; d < Dk; ++d)
                        *attn_f32_at4(dq, b, i, h, d) = (float)buffers.query_gradient[i * Dk + d];
                if (dbias) { /* d bias = dS, summed over the dimensions the bias broadcasts */
                    const int64_t bias_b = bias_batches == 1 ? 0 : b;
                    const int64_t bias_h = bias_heads == 1 ? 0 : h;
                    double *target = buffers.dbias_total + (bias_b * bias_heads + bias_h) * pairs;
                    for (int64_t e = 0; e < pairs; ++e) target[e] += buffers.bias_gradient[e];
                }
            }
            for (int64_t j = 0; j < Tk; ++j) {
                for (int64_t d = 0; d < Dk; ++d)
                    *attn_f32_at4(dk, b, j, kv_head, d) = (float)buffers.key_gradient[j * Dk + d];
                for (int64_t c = 0; c < Dv; ++c)
                    *attn_f32_at4(dv, b, j, kv_head, c) = (float)buffers.value_gradient[j * Dv + c];
            }
        }
    if (dbias)
        for (int64_t bb = 0; bb < bias_batches; ++bb)
            for (int64_t bh = 0; bh < bias_heads; ++bh)
                for (int64_t i = 0; i < Tq; ++i)
                    for (int64_t j = 0; j < Tk; ++j)
                        *attn_f32_at4(dbias, bb, bh, i, j) =
                            (float)buffers.dbias_total[(bb * bias_heads + bh) * pairs + i * Tk + j];

    free_buffers(&buffers);
    attn_mask_context_free(&context);
    return ATTN_OK;
}
