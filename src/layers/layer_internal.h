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

/* Grows `activations` to hold the buffers of a call of these sizes and sets its pointers. */
attn_status layer_activations_reserve(attn_layer_activations *activations,
                                      const attn_layer_config *config,
                                      const layer_call_sizes *sizes, attn_error *error);

#endif /* ATTN_LAYER_INTERNAL_H */
