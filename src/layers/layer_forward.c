/*
 * layer_forward.c — forward pass of the attention layer: q/k/v projections (CBLAS), RoPE on
 * q and k, attention through attn_forward, output projection. Keeps q, k, v, the attention
 * output and the LSE in the caller's activations for attn_layer_backward.
 */
#include "layers/layer_internal.h"

#include <stdlib.h>
#include <string.h>

/* Keeps a copy of `positions` (int64[count], or NULL) in *kept, reusing or freeing it. */
static attn_status keep_positions(int64_t **kept, const int64_t *positions, int64_t count,
                                  attn_error *error) {
    free(*kept);
    *kept = NULL;
    if (positions == NULL) return ATTN_OK;
    size_t bytes;
    if (!attn_mul_size((size_t)count, sizeof(int64_t), &bytes))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "position ids: size overflows");
    *kept = malloc(bytes);
    if (*kept == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "activations: cannot allocate %zu bytes of position ids", bytes);
    memcpy(*kept, positions, bytes);
    return ATTN_OK;
}

attn_status attn_layer_forward(const attn_layer *layer, int64_t batch, int64_t query_length,
                               const float *x_query, int64_t key_length,
                               const float *x_key_value, const attn_options *options,
                               attn_layer_activations *activations, float *out,
                               const attn_execution *execution, attn_error *error) {
    return attn_layer_forward_at(layer, batch, query_length, x_query, NULL, key_length,
                                 x_key_value, NULL, options, activations, out, execution, error);
}

attn_status attn_layer_forward_at(const attn_layer *layer, int64_t batch, int64_t query_length,
                                  const float *x_query, const int64_t *query_positions,
                                  int64_t key_length, const float *x_key_value,
                                  const int64_t *key_positions, const attn_options *options,
                                  attn_layer_activations *activations, float *out,
                                  const attn_execution *execution, attn_error *error) {
    if (x_query == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "x_query = NULL");
    if (out == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "out = NULL");
    if (x_key_value == NULL && key_length != query_length)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "key_length = %lld: self-attention (x_key_value = NULL) needs "
                         "key_length = query_length = %lld",
                         (long long)key_length, (long long)query_length);
    layer_call_sizes sizes;
    attn_status status =
        layer_call_sizes_compute(layer, batch, query_length, key_length, &sizes, error);
    if (status != ATTN_OK) return status;
    const float *x_kv = x_key_value != NULL ? x_key_value : x_query;
    const attn_layer_config *c = &layer->config;

    attn_layer_activations local = {0};
    attn_layer_activations *kept = activations != NULL ? activations : &local;
    status = layer_activations_reserve(kept, c, &sizes, error);
    if (status != ATTN_OK) goto done;
    if (x_key_value == NULL && key_positions == NULL) key_positions = query_positions;
    if (!c->rope) query_positions = key_positions = NULL;
    if (activations != NULL) {
        status = keep_positions(&kept->query_positions, query_positions, sizes.query_rows, error);
        if (status == ATTN_OK)
            status = keep_positions(&kept->key_positions, key_positions, sizes.key_rows, error);
        if (status != ATTN_OK) goto done;
    }

    /* Projections: [B*T, d] -> [B*T, heads*dh], i.e. [B, T, heads, dh] contiguous. */
    status = attn_linear_forward(x_query, sizes.query_rows, c->model_dim, layer->q_weight,
                                 layer->q_bias, sizes.query_width, kept->q, error);
    if (status == ATTN_OK)
        status = attn_linear_forward(x_kv, sizes.key_rows, c->model_dim, layer->k_weight,
                                     layer->k_bias, sizes.kv_width, kept->k, error);
    if (status == ATTN_OK)
        status = attn_linear_forward(x_kv, sizes.key_rows, c->model_dim, layer->v_weight,
                                     layer->v_bias, sizes.kv_width, kept->v, error);
    if (status != ATTN_OK) goto done;

    attn_tensor q = attn_tensor_f32_4d(kept->q, batch, query_length, c->query_heads, c->head_dim);
    attn_tensor k = attn_tensor_f32_4d(kept->k, batch, key_length, c->kv_heads, c->head_dim);
    attn_tensor v = attn_tensor_f32_4d(kept->v, batch, key_length, c->kv_heads, c->head_dim);
    attn_tensor o =
        attn_tensor_f32_4d(kept->attention, batch, query_length, c->query_heads, c->head_dim);
    int64_t lse_shape[3] = {batch, c->query_heads, query_length};
    attn_tensor lse = attn_tensor_contiguous(kept->lse, ATTN_DTYPE_F32, 3, lse_shape);

    if (c->rope) {
        status = layer_rope(c, &q, query_positions, 0, error);
        if (status == ATTN_OK) status = layer_rope(c, &k, key_positions, 0, error);
        if (status != ATTN_OK) goto done;
    }

    status = attn_forward(&q, &k, &v, options, &o, &lse, execution, error);
    if (status != ATTN_OK) goto done;

    status = attn_linear_forward(kept->attention, sizes.query_rows, sizes.query_width,
                                 layer->o_weight, layer->o_bias, c->model_dim, out, error);
done:
    attn_layer_activations_free(&local);
    return status;
}
