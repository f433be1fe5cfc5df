/*
 * reference_decode.c — attn_reference_decode, the oracle of attn_decode: each sequence is
 * read back from the cache as float32 and handed to attn_reference_forward (the naive
 * double-precision attention) with its own key length, one sequence at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "call/call.h"
#include "core/internal.h"
#include "mask/sinks.h"

/* The batch-b slice [1|.., .., .., key_length] of a [B|1, Hq|1, Tq, Tk] mask or bias view. */
static attn_tensor slice_batch(const attn_tensor *t, int64_t b, int64_t key_length) {
    attn_tensor slice = *t;
    if (t->shape[0] > 1) {
        slice.data = (char *)t->data + (size_t)(b * t->stride[0]) * attn_dtype_size(t->dtype);
        slice.shape[0] = 1;
    }
    slice.shape[3] = key_length;
    return slice;
}

/* Rows of sequence b when it holds no token: every real row is empty. */
static attn_status fill_empty_sequence(const attn_options *options, int64_t b,
                                       const attn_tensor *q, attn_tensor *out, attn_tensor *lse,
                                       attn_error *error) {
    const int64_t Tq = q->shape[1], Hq = q->shape[2], Dv = out->shape[3];
    const int64_t real_rows = options->query_lengths ? options->query_lengths[b] : Tq;
    for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
            const bool padding = i >= real_rows;
            if (!padding && options->empty_rows == ATTN_EMPTY_ROWS_ERROR)
                return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                                 "query row (b = %lld, h = %lld, i = %lld) has no allowed key in "
                                 "the cache",
                                 (long long)b, (long long)h, (long long)i);
            const float fill = (!padding && options->empty_rows == ATTN_EMPTY_ROWS_NAN) ? NAN : 0.0f;
            for (int64_t e = 0; e < Dv; ++e) *attn_f32_at4(out, b, i, h, e) = fill;
            /* (ZERO: the head's sink takes the whole row, mask/sinks.h) */
            const float sink = padding ? -INFINITY : attn_sink_logit(options, h);
            if (lse != NULL) *attn_f32_at3(lse, b, h, i) = fill == 0.0f ? sink : NAN;
        }
    return ATTN_OK;
}

/* attn_reference_forward ran on sequence b alone, so a row in its message says "b = 0":
 * rewrites that to the real sequence; any other message gets "sequence b: " in front. */
static attn_status name_sequence(attn_error *error, attn_status status, const attn_error *local,
                                 int64_t b) {
    static const char batch_zero[] = " b = 0,";
    const char *row = strstr(local->message, batch_zero);
    if (row == NULL)
        return attn_fail(error, status, "sequence %lld: %s", (long long)b, local->message);
    return attn_fail(error, status, "%.*s b = %lld,%s", (int)(row - local->message),
                     local->message, (long long)b, row + strlen(batch_zero));
}

attn_status attn_reference_decode(const attn_kv_cache *cache, const attn_tensor *q,
                                  const attn_options *caller_options, attn_tensor *out,
                                  attn_tensor *lse, attn_error *error) {
    if (cache == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache is NULL");
    attn_options resolved;
    attn_status status = attn_options_resolve(caller_options, &resolved, error);
    if (status != ATTN_OK) return status;
    const attn_options *options = &resolved;
    status = attn_check_tensor(q, "q", ATTN_DTYPE_F32, 4, error);
    if (status != ATTN_OK) return status;
    if ((status = attn_check_tensor(out, "out", ATTN_DTYPE_F32, 4, error)) != ATTN_OK)
        return status;
    const attn_kv_cache_config *config = &cache->config;
    if (q->shape[0] != config->sequences || out->shape[0] != config->sequences)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "q.shape[0] = %lld: expected the cache's %lld sequences",
                         (long long)q->shape[0], (long long)config->sequences);
    if (options->key_lengths != NULL || options->key_positions != NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.%s is set: the cache defines key lengths and positions",
                         options->key_lengths != NULL ? "key_lengths" : "key_positions");
    if (lse != NULL && (status = attn_check_tensor(lse, "lse", ATTN_DTYPE_F32, 3, error)) != ATTN_OK)
        return status;
    const attn_call_tensor outputs[2] = {{out, "out", NULL}, {lse, "lse", NULL}};
    const attn_call_tensor inputs[1] = {{q, "q", NULL}};
    if ((status = attn_call_check_aliasing(outputs, 2, inputs, 1, options, NULL, error)) != ATTN_OK)
        return status;
    for (int64_t b = 0; b < config->sequences && status == ATTN_OK; ++b) {
        const int64_t length = cache->lengths[b];
        if (length == 0) {
            status = fill_empty_sequence(options, b, q, out, lse, error);
            continue;
        }
        float *keys = malloc((size_t)(length * config->kv_heads * config->key_dim) * sizeof(float));
        float *values =
            malloc((size_t)(length * config->kv_heads * config->value_dim) * sizeof(float));
        if (keys == NULL || values == NULL) {
            free(keys), free(values);
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "no memory for sequence %lld",
                             (long long)b);
        }
        attn_tensor k = attn_tensor_f32_4d(keys, 1, length, config->kv_heads, config->key_dim);
        attn_tensor v = attn_tensor_f32_4d(values, 1, length, config->kv_heads, config->value_dim);
        status = attn_kv_cache_read(cache, b, 0, &k, &v, error);
        /* Batch b of q, out, lse, and of every per-batch option. */
        attn_tensor q_b = *q, out_b = *out, lse_b;
        q_b.data = attn_f32_at4(q, b, 0, 0, 0), q_b.shape[0] = 1;
        out_b.data = attn_f32_at4(out, b, 0, 0, 0), out_b.shape[0] = 1;
        if (lse != NULL) lse_b = *lse, lse_b.data = attn_f32_at3(lse, b, 0, 0), lse_b.shape[0] = 1;
        attn_options local = *options;
        attn_tensor mask_b, bias_b, layout_b;
        if (options->mask) mask_b = slice_batch(options->mask, b, length), local.mask = &mask_b;
        if (options->bias) bias_b = slice_batch(options->bias, b, length), local.bias = &bias_b;
        if (options->block_layout && options->block_k > 0) {
            layout_b = slice_batch(options->block_layout, b,
                                   (length + options->block_k - 1) / options->block_k);
            local.block_layout = &layout_b;
        }
        if (options->query_lengths) local.query_lengths = options->query_lengths + b;
        if (status == ATTN_OK) {
            attn_error sequence_error;
            status = attn_reference_forward(&q_b, &k, &v, &local, &out_b,
                                            lse != NULL ? &lse_b : NULL, &sequence_error);
            if (status != ATTN_OK) status = name_sequence(error, status, &sequence_error, b);
        }
        free(keys), free(values);
    }
    return status;
}
