/*
 * layer_internal.h — what the attention layer's files share: the resolved RoPE settings of a
 * config and the sizes of one forward/backward call, validated and overflow-checked once.
 */
#ifndef ATTN_LAYER_INTERNAL_H
#define ATTN_LAYER_INTERNAL_H

#include "core/internal.h"
#include "attn_layers.h"

/* Sizes of one layer call: B, Tq, Tk and the row counts / widths of the projections. */
typedef struct layer_call_sizes {
    int64_t batch, query_length, key_length;
    int64_t query_rows; /* B*Tq */
    int64_t key_rows;   /* B*Tk */
    int64_t query_width; /* h*dh */
    int64_t kv_width;    /* g*dh */
} layer_call_sizes;

/* Validates a call's sizes against the layer (self-attention: key_length == query_length). */
attn_status layer_call_sizes_compute(const attn_layer *layer, int64_t batch, int64_t query_length,
                                     int64_t key_length, layer_call_sizes *sizes,
                                     attn_error *error);

/* The rotary dims and base a config resolves to (0 = defaults). */
int64_t layer_rope_dim(const attn_layer_config *config);
double layer_rope_base(const attn_layer_config *config);

/* The whole RoPE of a config (layout, resolved dims and base, scaling). */
attn_rope_config layer_rope_config(const attn_layer_config *config);

/* The four projections, in parameter order. */
typedef enum layer_projection {
    LAYER_Q = 0, LAYER_K = 1, LAYER_V = 2, LAYER_O = 3
} layer_projection;

/* Nonzero when `projection` has a bias under `config` (config->bias or its own flag). */
int layer_has_bias(const attn_layer_config *config, layer_projection projection);

/* Applies the config's RoPE to q [B, T, H, dh] (a view of contiguous floats) at position ids
 * int64 [B][T] (NULL = 0..T-1); inverse != 0 = the transpose (for the backward pass). */
attn_status layer_rope(const attn_layer_config *config, attn_tensor *x, const int64_t *positions,
                       int inverse, attn_error *error);

/* Grows `activations` to hold the buffers of a call of these sizes and sets its pointers. */
attn_status layer_activations_reserve(attn_layer_activations *activations,
                                      const attn_layer_config *config,
                                      const layer_call_sizes *sizes, attn_error *error);

#endif /* ATTN_LAYER_INTERNAL_H */
