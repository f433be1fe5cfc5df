/*
 * probabilities.h — the attention probabilities P of a call, for pictures and inspection
 * (`attn forward --weights-out`), from the public API only.
 *
 * P[b, h, i, j] = exp(x_ij - lse_i), x the logits the options define (scale, soft-cap,
 * bias, ALiBi, every mask), lse the row's log-sum-exp: exactly the weights the forward
 * applies to V. They are obtained from attn_forward itself with V = the identity matrix
 * (value j = the j-th unit vector, so O = P·I = P), so every option means what it means in
 * the forward, with nothing re-implemented here.
 *
 * Forbidden pairs (the mask, causal, window, pattern, lengths, block layout or a -inf bias
 * rule them out) are written as -0.0, allowed ones as their weight (an allowed weight that
 * underflows is +0.0): -0.0 == 0 for every tool reading the file, and its sign bit tells a
 * masked cell from a tiny weight (heatmap.h draws it hatched grey; numpy: np.signbit(P)).
 * Which pairs are allowed comes from a second forward call with Q = K = 0 and the same
 * options less soft-cap, ALiBi and the finite part of the bias: there every logit is 0 or
 * -inf, so P > 0 exactly where allowed. Cost: 2·B·Hq·Tq·Tk² multiply-adds; memory: P, a
 * second P-sized buffer, the Tk x Tk identity (broadcast over batch and heads by zero
 * strides) and, with a bias, a copy of it.
 */
#ifndef ATTN_CLI_PROBABILITIES_H
#define ATTN_CLI_PROBABILITIES_H

#include <stdbool.h>
#include <stdint.h>

#include "attn.h"

#define CLI_PROBABILITIES_LIMIT (1 << 24) /* B·Hq·Tq·Tk, at most */
#define CLI_PROBABILITIES_MAX_KEYS 4096   /* Tk, at most (the identity is Tk x Tk) */

/*
 * Checks the size of P for q [B, Tq, Hq, Dk] and Tk keys against the limits above. Returns
 * true, or false with a one-line reason in `message` naming the sizes and the limit.
 */
bool cli_probabilities_fit(int64_t batch, int64_t query_length, int64_t query_heads,
                           int64_t key_length, char *message, size_t message_capacity);

/*
 * probabilities [B, Hq, Tq, Tk] float32, C order (written) for q [B, Tq, Hq, Dk],
 * k [B, Tk, Hkv, Dk], `options` and `execution` (as for attn_forward; both may be NULL).
 * Rows the options leave empty are -0.0 (ATTN_EMPTY_ROWS_ZERO, padded query rows: every pair
 * is forbidden) or NaN (ATTN_EMPTY_ROWS_NAN). Returns the status of the forward calls
 * (ATTN_ERROR_OUT_OF_MEMORY when the buffers above cannot be allocated); `error` names the
 * problem.
 */
attn_status cli_attention_probabilities(const attn_tensor *q, const attn_tensor *k,
                                        const attn_options *options,
                                        const attn_execution *execution, float *probabilities,
                                        attn_error *error);

#endif /* ATTN_CLI_PROBABILITIES_H */
