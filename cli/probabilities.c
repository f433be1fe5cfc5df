/*
 * probabilities.c — attention probabilities through attn_forward with one-hot values (see
 * probabilities.h).
 */
#include "probabilities.h"

#include <math.h>
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

/* The bias of the allowed-pairs pass: bias [B|1, Hq|1, Tq, Tk] (any strides) with every finite
 * entry 0 and every -inf kept, contiguous, into `zeroed` (allocated). NULL on no memory. */
static float *mask_of_bias(const attn_tensor *bias, attn_tensor *zeroed) {
    const int64_t *n = bias->shape;
    float *data = malloc((size_t)(n[0] * n[1] * n[2] * n[3]) * sizeof(float));
    if (data == NULL) return NULL;
    const float *source = bias->data;
    float *out = data;
    for (int64_t a = 0; a < n[0]; ++a)
        for (int64_t b = 0; b < n[1]; ++b)
            for (int64_t c = 0; c < n[2]; ++c)
                for (int64_t d = 0; d < n[3]; ++d) {
                    const float x = source[a * bias->stride[0] + b * bias->stride[1] +
                                           c * bias->stride[2] + d * bias->stride[3]];
                    *out++ = x == -INFINITY ? -INFINITY : isnan(x) ? x : 0.0f;
                }
    *zeroed = attn_tensor_f32_4d(data, n[0], n[1], n[2], n[3]);
    return data;
}

attn_status cli_attention_probabilities(const attn_tensor *q, const attn_tensor *k,
                                        const attn_options *options,
                                        const attn_execution *execution, float *probabilities,
                                        attn_error *error) {
    const int64_t B = q->shape[0], Tq = q->shape[1], Hq = q->shape[2], Dk = q->shape[3];
    const int64_t Tk = k->shape[1], Hkv = k->shape[2], count = B * Hq * Tq * Tk;
    /* The Tk x Tk identity, the allowed pass's P [B, Hq, Tq, Tk], zero Q/K rows [Dk]. */
    float *identity = calloc((size_t)(Tk * Tk), sizeof(float));
    float *allowed = malloc((size_t)count * sizeof(float));
    float *zeros = calloc((size_t)Dk, sizeof(float));
    float *bias = NULL;
    attn_options plain = options ? *options : attn_options_default();
    attn_tensor zeroed_bias;
    if (plain.bias != NULL && identity && allowed && zeros) {
        bias = mask_of_bias(plain.bias, &zeroed_bias);
        plain.bias = &zeroed_bias;
    }
    if (identity == NULL || allowed == NULL || zeros == NULL || (plain.bias && bias == NULL)) {
        free(identity), free(allowed), free(zeros), free(bias);
        error->status = ATTN_ERROR_OUT_OF_MEMORY;
        snprintf(error->message, sizeof error->message,
                 "cannot allocate the %lld x %lld identity and the %lld masked-pair flags for "
                 "the probabilities", (long long)Tk, (long long)Tk, (long long)count);
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
    if (status == ATTN_OK) {
        /* The allowed pass: Q = K = 0 and no soft-cap, ALiBi or finite bias, so every logit
           is 0 or -inf and P = 1/(allowed keys of the row) > 0 exactly where allowed. */
        attn_tensor zq = attn_tensor_f32_4d(zeros, B, Tq, Hq, Dk);
        attn_tensor zk = attn_tensor_f32_4d(zeros, B, Tk, Hkv, Dk);
        zq.stride[0] = zq.stride[1] = zq.stride[2] = 0;
        zk.stride[0] = zk.stride[1] = zk.stride[2] = 0;
        plain.softcap = 0.0f;
        plain.alibi = 0;
        plain.alibi_slopes = NULL;
        plain.custom_scale = 0;
        attn_tensor allowed_out = attn_tensor_f32_bhtd(allowed, B, Tq, Hq, Tk);
        status = attn_forward(&zq, &zk, &v, &plain, &allowed_out, NULL, execution, error);
        for (int64_t n = 0; status == ATTN_OK && n < count; ++n)
            if (allowed[n] == 0.0f) probabilities[n] = -0.0f; /* forbidden; NaN rows stay */
    }
    free(identity), free(allowed), free(zeros), free(bias);
    return status;
}
