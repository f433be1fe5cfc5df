/*
 * embedding.c — token embedding lookup (a row gather from a [vocab][dim] table) and its
 * gradient (a scatter-add of the output gradient rows into the table's gradient).
 */
#include "core/internal.h"
#include "attn_layers.h"

#include <string.h>

/* Validates sizes and every token id; shared by the lookup and its gradient. */
static attn_status check_embedding_arguments(int64_t vocab, int64_t dim, const int32_t *tokens,
                                             int64_t count, attn_error *error) {
    if (tokens == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "tokens = NULL");
    if (vocab < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "vocab = %lld: must be >= 1",
                         (long long)vocab);
    if (dim < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "dim = %lld: must be >= 1",
                         (long long)dim);
    if (count < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "count = %lld: must be >= 1",
                         (long long)count);
    int64_t product;
    if (!attn_mul_i64(vocab, dim, &product) || !attn_mul_i64(count, dim, &product))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "vocab = %lld, count = %lld, dim = %lld: sizes overflow",
                         (long long)vocab, (long long)count, (long long)dim);
    for (int64_t n = 0; n < count; ++n)
        if (tokens[n] < 0 || tokens[n] >= vocab)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "tokens[%lld] = %d: outside [0, vocab = %lld)", (long long)n,
                             (int)tokens[n], (long long)vocab);
    return ATTN_OK;
}

/* table float[vocab][dim], tokens int32[count] -> out float[count][dim]. */
attn_status attn_embedding_lookup(const float *table, int64_t vocab, int64_t dim,
                                  const int32_t *tokens, int64_t count, float *out,
                                  attn_error *error) {
    if (table == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "table = NULL");
    if (out == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "out = NULL");
    attn_status status = check_embedding_arguments(vocab, dim, tokens, count, error);
    if (status != ATTN_OK) return status;
    for (int64_t n = 0; n < count; ++n)
        memcpy(out + n * dim, table + (int64_t)tokens[n] * dim, (size_t)dim * sizeof(float));
    return ATTN_OK;
}

/* grad_out float[count][dim] added into grad_table float[vocab][dim], in token order. */
attn_status attn_embedding_backward(const int32_t *tokens, int64_t count, const float *grad_out,
                                    int64_t vocab, int64_t dim, float *grad_table,
                                    attn_error *error) {
    if (grad_out == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "grad_out = NULL");
    if (grad_table == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "grad_table = NULL");
    attn_status status = check_embedding_arguments(vocab, dim, tokens, count, error);
    if (status != ATTN_OK) return status;
    /* Sequential over tokens: a fixed summation order, so the result never depends on threads. */
    for (int64_t n = 0; n < count; ++n) {
        float *row = grad_table + (int64_t)tokens[n] * dim;
        const float *grad_row = grad_out + n * dim;
        for (int64_t c = 0; c < dim; ++c) row[c] += grad_row[c];
    }
    return ATTN_OK;
}
