/*
 * layer_backward.c — backward pass of the attention layer: through the output projection,
 * attention (attn_backward, recomputing P from the kept LSE), the inverse RoPE rotation, and
 * the q/k/v projections, giving every parameter gradient and the input gradients.
 */
#include "layers/layer_internal.h"

#include <string.h>

/* The call against the layer, its activations and its gradients (shapes, NULLs, the
 * self-attention rules); fills the sizes. */
static attn_status check_backward_call(const attn_layer *layer, int64_t batch,
                                       int64_t query_length, const float *x_query,
                                       int64_t key_length, const float *x_key_value,
                                       const attn_layer_activations *activations,
                                       const float *dout, const attn_layer *gradients,
                                       const float *dx_key_value, layer_call_sizes *sizes,
                                       attn_error *error) {
    if (x_query == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "x_query = NULL");
    if (dout == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "dout = NULL");
    if (activations == NULL || activations->allocation == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                         "activations = NULL or empty: run attn_layer_forward with them first");
    if (gradients == NULL || gradients->parameters == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "gradients = NULL or not created");
    if (x_key_value == NULL && key_length != query_length)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "key_length = %lld: self-attention needs key_length = query_length = %lld",
                         (long long)key_length, (long long)query_length);
    if (x_key_value == NULL && dx_key_value != NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "dx_key_value != NULL: self-attention returns the whole gradient in "
                         "dx_query");
    attn_status status =
        layer_call_sizes_compute(layer, batch, query_length, key_length, sizes, error);
    if (status != ATTN_OK) return status;
    if (activations->batch != batch || activations->query_length != query_length ||
        activations->key_length != key_length)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "activations hold B = %lld, Tq = %lld, Tk = %lld; the call has %lld, "
                         "%lld, %lld",
                         (long long)activations->batch, (long long)activations->query_length,
                         (long long)activations->key_length, (long long)batch,
                         (long long)query_length, (long long)key_length);
    const attn_layer_config *c = &layer->config;
    const attn_layer_config *g = &gradients->config;
    if (g->model_dim != c->model_dim || g->query_heads != c->query_heads ||
        g->kv_heads != c->kv_heads || g->head_dim != c->head_dim ||
        layer_has_bias(g, LAYER_Q) != layer_has_bias(c, LAYER_Q) ||
        layer_has_bias(g, LAYER_K) != layer_has_bias(c, LAYER_K) ||
        layer_has_bias(g, LAYER_V) != layer_has_bias(c, LAYER_V) ||
        layer_has_bias(g, LAYER_O) != layer_has_bias(c, LAYER_O))
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "gradients: config differs from the layer's (create it with the same "
                         "config)");
    return ATTN_OK;
}

/* dq, dk, dv of the attention from the kept q, k, v (post-RoPE), output and LSE, and the
 * gradient of its output d_attention. */
static attn_status attention_backward(const attn_layer *layer, int64_t batch,
                                      int64_t query_length, int64_t key_length,
                                      const attn_options *options,
                                      const attn_layer_activations *activations,
                                      float *d_attention, float *dq, float *dk, float *dv,
                                      const attn_execution *execution, attn_error *error) {
    const attn_layer_config *c = &layer->config;
    attn_tensor q = attn_tensor_f32_4d(activations->q, batch, query_length, c->query_heads,
                                       c->head_dim);
    attn_tensor k = attn_tensor_f32_4d(activations->k, batch, key_length, c->kv_heads, c->head_dim);
    attn_tensor v = attn_tensor_f32_4d(activations->v, batch, key_length, c->kv_heads, c->head_dim);
    attn_tensor o = attn_tensor_f32_4d(activations->attention, batch, query_length,
                                       c->query_heads, c->head_dim);
    int64_t lse_shape[3] = {batch, c->query_heads, query_length};
    attn_tensor lse = attn_tensor_contiguous(activations->lse, ATTN_DTYPE_F32, 3, lse_shape);
    attn_tensor d_o = attn_tensor_f32_4d(d_attention, batch, query_length, c->query_heads,
                                         c->head_dim);
    attn_tensor d_q = attn_tensor_f32_4d(dq, batch, query_length, c->query_heads, c->head_dim);
    attn_tensor d_k = attn_tensor_f32_4d(dk, batch, key_length, c->kv_heads, c->head_dim);
    attn_tensor d_v = attn_tensor_f32_4d(dv, batch, key_length, c->kv_heads, c->head_dim);
    return attn_backward(&q, &k, &v, &o, &lse, &d_o, options, &d_q, &d_k, &d_v, NULL, execution,
                           error);
}

attn_status attn_layer_backward(const attn_layer *layer, int64_t batch, int64_t query_length,
                                const float *x_query, int64_t key_length,
                                const float *x_key_value, const attn_options *options,
                                const attn_layer_activations *activations, const float *dout,
                                attn_layer *gradients, float *dx_query, float *dx_key_value,
                                const attn_execution *execution, attn_error *error) {
    layer_call_sizes sizes;
    attn_status status = check_backward_call(layer, batch, query_length, x_query, key_length,
                                             x_key_value, activations, dout, gradients,
                                             dx_key_value, &sizes, error);
    if (status != ATTN_OK) return status;
    const attn_layer_config *c = &layer->config;
    const float *x_kv = x_key_value != NULL ? x_key_value : x_query;

    /* Scratch: d_attention and dq [B*Tq, h*dh]; dk, dv [B*Tk, g*dh]; two dx [B*Tk, d]. */
    int64_t q_floats = sizes.query_rows * sizes.query_width;
    int64_t kv_floats = sizes.key_rows * sizes.kv_width;
    int64_t x_floats = sizes.key_rows * c->model_dim;
    size_t total_floats = 0, total_bytes;
    const int64_t parts[6] = {q_floats, q_floats, kv_floats, kv_floats, x_floats, x_floats};
    for (int i = 0; i < 6; ++i)
        if (!attn_add_size(total_floats, (size_t)parts[i], &total_floats))
            return attn_fail(error, ATTN_ERROR_OVERFLOW, "backward scratch: size overflows");
    if (!attn_mul_size(total_floats, sizeof(float), &total_bytes))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "backward scratch: size overflows");
    float *scratch = attn_aligned_alloc(total_bytes);
    if (scratch == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "backward scratch: cannot allocate %zu bytes", total_bytes);
    float *d_attention = scratch;
    float *dq = d_attention + q_floats;
    float *dk = dq + q_floats;
    float *dv = dk + kv_floats;
    float *dx_from_k = dv + kv_floats;
    float *dx_from_v = dx_from_k + x_floats;

    memset(gradients->parameters, 0, (size_t)gradients->parameter_count * sizeof(float));

    /* Output projection: d_attention = dout Wo; dWo = doutᵀ attention; dbo = Σ dout. */
    status = attn_linear_backward(activations->attention, sizes.query_rows, sizes.query_width,
                                  layer->o_weight, c->model_dim, dout, d_attention,
                                  gradients->o_weight, gradients->o_bias, error);
    if (status != ATTN_OK) goto done;

    /* Attention: dq, dk, dv (attention_backward). */
    status = attention_backward(layer, batch, query_length, key_length, options, activations,
                                d_attention, dq, dk, dv, execution, error);
    if (status != ATTN_OK) goto done;

    /* RoPE is a (scaled) rotation: its gradient is the transpose at the same positions. */
    if (c->rope) {
        attn_tensor d_q = attn_tensor_f32_4d(dq, batch, query_length, c->query_heads, c->head_dim);
        attn_tensor d_k = attn_tensor_f32_4d(dk, batch, key_length, c->kv_heads, c->head_dim);
        status = layer_rope(c, &d_q, activations->query_positions, 1, error);
        if (status == ATTN_OK) status = layer_rope(c, &d_k, activations->key_positions, 1, error);
        if (status != ATTN_OK) goto done;
    }

    /* Input projections: weight and bias gradients, and the input gradients. */
    status = attn_linear_backward(x_query, sizes.query_rows, c->model_dim, layer->q_weight,
                                  sizes.query_width, dq, dx_query, gradients->q_weight,
                                  gradients->q_bias, error);
    int want_dx_kv = dx_key_value != NULL || (x_key_value == NULL && dx_query != NULL);
    if (status == ATTN_OK)
        status = attn_linear_backward(x_kv, sizes.key_rows, c->model_dim, layer->k_weight,
                                      sizes.kv_width, dk, want_dx_kv ? dx_from_k : NULL,
                                      gradients->k_weight, gradients->k_bias, error);
    if (status == ATTN_OK)
        status = attn_linear_backward(x_kv, sizes.key_rows, c->model_dim, layer->v_weight,
                                      sizes.kv_width, dv, want_dx_kv ? dx_from_v : NULL,
                                      gradients->v_weight, gradients->v_bias, error);
    if (status != ATTN_OK || !want_dx_kv) goto done;
    float *dx_kv_target = x_key_value != NULL ? dx_key_value : dx_query;
    if (x_key_value != NULL) /* cross-attention: dx_kv = k path + v path */
        for (int64_t i = 0; i < x_floats; ++i) dx_kv_target[i] = dx_from_k[i] + dx_from_v[i];
    else /* self-attention: dx = q path + k path + v path */
        for (int64_t i = 0; i < x_floats; ++i) dx_kv_target[i] += dx_from_k[i] + dx_from_v[i];
done:
    attn_aligned_free(scratch);
    return status;
}
