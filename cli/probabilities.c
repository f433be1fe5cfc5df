/*
 * probabilities.c — attention probabilities through attn_forward with one-hot values (see
 * probabilities.h).
 */
#include "probabilities.h"

#include <stdio.h>
#include <stdlib.h>

/* n with thousands separators ("16,777,216") into `buffer`. */
static const char *grouped(int64_t n, char *buffer, size_t capacity) {
    char digits[32];
    int length = snprintf(digits, sizeof digits, "%lld", (long long)n);
    size_t out = 0;
    for (int i = 0; i < length && out + 2 < capacity; ++i) {
        if (i > 0 && (length - i) % 3 == 0) buffer[out++] = ',';
        buffer[out++] = digits[i];
    }
    buffer[out] = '\0';
    return buffer;
}

bool cli_probabilities_fit(int64_t batch, int64_t query_length, int64_t query_heads,
                           int64_t key_length, char *message, size_t message_capacity) {
    char count[32], limit[32];
    if (key_length > CLI_PROBABILITIES_MAX_KEYS) {
        snprintf(message, message_capacity, "Tk = %s keys is above the limit of %s keys",
                 grouped(key_length, count, sizeof count),
                 grouped(CLI_PROBABILITIES_MAX_KEYS, limit, sizeof limit));
        return false;
    }
    int64_t total = 0;
    bool overflow = __builtin_mul_overflow(batch, query_heads, &total) ||
                    __builtin_mul_overflow(total, query_length, &total) ||
                    __builtin_mul_overflow(total, key_length, &total);
    if (overflow || total > CLI_PROBABILITIES_LIMIT) {
        snprintf(message, message_capacity, "B*Hq*Tq*Tk = %lld*%lld*%lld*%lld = %s "
                 "probabilities is above the limit of %s (2^24)", (long long)batch,
                 (long long)query_heads, (long long)query_length, (long long)key_length,
                 overflow ? "more than 2^63" : grouped(total, count, sizeof count),
                 grouped(CLI_PROBABILITIES_LIMIT, limit, sizeof limit));
        return false;
    }
    return true;
}

attn_status cli_attention_probabilities(const attn_tensor *q, const attn_tensor *k,
                                        const attn_options *options,
                                        const attn_execution *execution, float *probabilities,
                                        attn_error *error) {
    const int64_t B = q->shape[0], Tq = q->shape[1], Hq = q->shape[2];
    const int64_t Tk = k->shape[1], Hkv = k->shape[2];
    float *identity = calloc((size_t)(Tk * Tk), sizeof(float));
    if (identity == NULL) {
        error->status = ATTN_ERROR_OUT_OF_MEMORY;
        snprintf(error->message, sizeof error->message,
                 "cannot allocate the %lld x %lld identity for the probabilities", (long long)Tk,
                 (long long)Tk);
        return error->status;
    }
    for (int64_t j = 0; j < Tk; ++j) identity[j * Tk + j] = 1.0f;
    /* v [B, Tk, Hkv, Tk]: value j of every batch and KV head is the j-th unit vector. */
    attn_tensor v = attn_tensor_f32_4d(identity, B, Tk, Hkv, Tk);
    v.stride[0] = 0;
    v.stride[1] = Tk;
    v.stride[2] = 0;
    /* out [B, Tq, Hq, Tk] viewed over P's [B, Hq, Tq, Tk] memory. */
    attn_tensor out = attn_tensor_f32_bhtd(probabilities, B, Tq, Hq, Tk);
    attn_status status = attn_forward(q, k, &v, options, &out, NULL, execution, error);
    free(identity);
    return status;
}
