/*
 * attn_layers.h — the model-building parts of libattn on top of attn.h: positional encodings
 * (sinusoidal, RoPE), token embeddings, linear maps (CBLAS), attention layers (config,
 * create, forward, backward, safetensors load/save of a layer), the Adam optimiser, RMSNorm
 * and MLA (multi-head latent attention, DeepSeek-V2). Same conventions as attn.h.
 */
#ifndef ATTN_LAYERS_H
#define ATTN_LAYERS_H

#include "attn.h"
#include "attn_io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Section: positional encodings, embeddings and linear maps
 * ====================================================================================== */

/* Sinusoidal encoding (Vaswani et al. 3.5): pe[pos][2i] = sin(pos / 10000^(2i/dim)),
 * pe[pos][2i+1] = cos(...), for pos in [first_position, first_position + count).
 * pe: float[count][dim] (row-major). dim >= 1 (an odd dim ends with a sin column). */
ATTN_API attn_status attn_sinusoidal_encoding(int64_t first_position, int64_t count, int64_t dim,
                                              float *pe, attn_error *error);


/*
 * Rotary position embedding, in place, on x [B, T, H, D] F32 (any strides): the first
 * rotary_dim (even, 2..D) dims of token t rotate by angles positions[t] * base^(-2i/rotary_dim)
 * (positions: int64[T], or NULL for positions first_position + t). Angles in double.
 * inverse != 0 rotates by the negated angles (the gradient of the forward rotation).
 */
ATTN_API attn_status attn_rope_apply(attn_tensor *x, attn_rope_layout layout, int64_t rotary_dim,
                                     double base, const int64_t *positions, int64_t first_position,
                                     int inverse, attn_error *error);

/* Token embedding lookup: out[n][:] = table[tokens[n]][:], table float[vocab][dim],
 * out float[count][dim]. A token outside [0, vocab) is an error naming its index. */
ATTN_API attn_status attn_embedding_lookup(const float *table, int64_t vocab, int64_t dim,
                                           const int32_t *tokens, int64_t count, float *out,
                                           attn_error *error);

/* y[n][o] = sum_i x[n][i] * weight[o][i] + (bias ? bias[o] : 0): PyTorch nn.Linear layout
 * (weight [out_features][in_features]). x float[rows][in], y float[rows][out], row-major.
 * Goes through CBLAS sgemm. */
ATTN_API attn_status attn_linear_forward(const float *x, int64_t rows, int64_t in_features,
                                         const float *weight, const float *bias,
                                         int64_t out_features, float *y, attn_error *error);

/* Gradient of attn_embedding_lookup: grad_table[tokens[n]][:] += grad_out[n][:] for n in
 * order (repeated tokens sum; a fixed order, so bitwise reproducible). grad_out
 * float[count][dim], grad_table float[vocab][dim] (accumulated, not zeroed). Same errors. */
ATTN_API attn_status attn_embedding_backward(const int32_t *tokens, int64_t count,
                                             const float *grad_out, int64_t vocab, int64_t dim,
                                             float *grad_table, attn_error *error);

/* Gradient of attn_linear_forward given dy float[rows][out_features]:
 *   dx      float[rows][in_features]      = dy W        (overwritten; NULL = not wanted)
 *   dweight float[out_features][in_features] += dyᵀ x   (accumulated; NULL = not wanted)
 *   dbias   float[out_features]           += Σ_rows dy  (accumulated; NULL = not wanted)
 * x may be NULL when dweight is NULL; weight may be NULL when dx is NULL. Sizes must fit
 * CBLAS's int (else ATTN_ERROR_OVERFLOW). Goes through CBLAS sgemm. */
ATTN_API attn_status attn_linear_backward(const float *x, int64_t rows, int64_t in_features,
                                          const float *weight, int64_t out_features,
                                          const float *dy, float *dx, float *dweight, float *dbias,
                                          attn_error *error);

/* ======================================================================================
 * Section: attention layers
 * ====================================================================================== */

/*
 * Shape of one attention layer: model width d, h query heads, g KV heads (g divides h:
 * g = h is MHA, g = 1 MQA, otherwise GQA), head dim dh. Projections follow PyTorch nn.Linear
 * (W[out][in], y = x Wᵀ + b) and Hugging Face naming (q_proj, k_proj, v_proj, o_proj).
 * Optional RoPE is applied to q and k after projection, at positions 0..T-1 of each input.
 */
typedef struct attn_layer_config {
    int64_t model_dim;            /* d >= 1 */
    int64_t query_heads;          /* h >= 1 */
    int64_t kv_heads;             /* g >= 1, h % g == 0 */
    int64_t head_dim;             /* dh >= 1 */
    int bias;                     /* nonzero: the four projections have biases */
    int rope;                     /* nonzero: RoPE on q and k */
    attn_rope_layout rope_layout; /* when rope */
    int64_t rope_dim;             /* rotary dims: even, 2..dh; 0 = dh */
    double rope_base;             /* > 1; 0 = 10000 */
} attn_layer_config;

/*
 * The parameters of a layer, owned by the struct (attn_layer_create allocates them zeroed in
 * one block, `parameters`, in the order below; attn_layer_destroy frees them). A second layer
 * created with the same config holds gradients (attn_layer_backward) or Adam moments.
 */
typedef struct attn_layer {
    attn_layer_config config;
    float *q_weight;  /* q_proj.weight [h*dh][d] */
    float *k_weight;  /* k_proj.weight [g*dh][d] */
    float *v_weight;  /* v_proj.weight [g*dh][d] */
    float *o_weight;  /* o_proj.weight [d][h*dh] */
    float *q_bias;    /* q_proj.bias [h*dh], NULL without biases */
    float *k_bias;    /* k_proj.bias [g*dh], NULL without biases */
    float *v_bias;    /* v_proj.bias [g*dh], NULL without biases */
    float *o_bias;    /* o_proj.bias [d], NULL without biases */
    float *parameters;       /* every parameter, contiguous, in the order above */
    int64_t parameter_count; /* number of floats in `parameters` */
} attn_layer;

/*
 * What the forward pass keeps for the backward pass. Start from a zeroed struct; the forward
 * (re)allocates the buffers as needed and overwrites them; the caller owns the struct and
 * frees it with attn_layer_activations_free. All float, contiguous, row-major:
 *   q [B, Tq, h, dh] after RoPE   k [B, Tk, g, dh] after RoPE   v [B, Tk, g, dh]
 *   attention [B, Tq, h, dh] (attention output, the input of o_proj)   lse [B, h, Tq]
 * The attention probabilities of (b, head, i, j) are exp(scale * q·k - lse): heat maps need
 * no extra storage.
 */
typedef struct attn_layer_activations {
    int64_t batch, query_length, key_length; /* shapes of the last forward; 0 = none */
    float *q, *k, *v, *attention, *lse;
    void *allocation;      /* one block holding the five buffers */
    size_t capacity_bytes; /* its size */
} attn_layer_activations;

/* Number of parameters: 2·d·dh·(h + g), plus h·dh + 2·g·dh + d with biases
 * (4·d² for MHA with h·dh = d and no bias). Errors: sizes < 1, h % g != 0, overflow. */
ATTN_API attn_status attn_layer_parameter_count(const attn_layer_config *config, int64_t *count,
                                                attn_error *error);

/* Validates `config` (sizes, divisibility, RoPE settings) and allocates zeroed parameters. */
ATTN_API attn_status attn_layer_create(const attn_layer_config *config, attn_layer *layer,
                                       attn_error *error);

/* Xavier/Glorot uniform initialisation of the four weights, U(-a, a) with
 * a = sqrt(6 / (fan_in + fan_out)); biases set to 0. Deterministic for a seed (its own
 * xoshiro256** stream, independent of threads and platform). */
ATTN_API attn_status attn_layer_init_xavier(attn_layer *layer, uint64_t seed, attn_error *error);

/* Frees the parameters and zeroes the struct. NULL is allowed. */
ATTN_API void attn_layer_destroy(attn_layer *layer);

/* Frees the buffers and zeroes the struct. NULL is allowed. */
ATTN_API void attn_layer_activations_free(attn_layer_activations *activations);

/*
 * out = o_proj(attention(RoPE(q_proj(x_query)), RoPE(k_proj(x_kv)), v_proj(x_kv))).
 *   x_query    float[B][Tq][d]
 *   x_key_value float[B][Tk][d], or NULL for self-attention (then key_length must equal
 *              query_length and x_query is used)
 *   options    passed to attn_forward as is (mask, causal, window, ...; NULL = plain); its
 *              tensors, if any, are shaped for [B, h, Tq, Tk]
 *   activations: NULL, or a struct to keep what attn_layer_backward needs (see above)
 *   out        float[B][Tq][d] (written; must not alias the inputs)
 *   execution  passed to attn_forward as is (threads, tiles, kernel, memory; NULL = defaults)
 * Errors: those of attn_forward, sizes < 1, overflow, memory.
 */
ATTN_API attn_status attn_layer_forward(const attn_layer *layer, int64_t batch,
                                        int64_t query_length, const float *x_query,
                                        int64_t key_length, const float *x_key_value,
                                        const attn_options *options,
                                        attn_layer_activations *activations, float *out,
                                        const attn_execution *execution, attn_error *error);

/*
 * Gradients of the layer, given the activations of the matching attn_layer_forward call (same
 * inputs, options and parameters) and dout float[B][Tq][d]:
 *   gradients:    a layer created with the same config; every parameter gradient is written
 *                 (overwritten, not accumulated)
 *   dx_query:     float[B][Tq][d] (written; NULL = not wanted). For self-attention
 *                 (x_key_value NULL) it is the whole input gradient (query + key + value paths)
 *   dx_key_value: float[B][Tk][d] (written; NULL = not wanted); cross-attention only
 * Attention gradients come from attn_backward (deterministic: bitwise identical for any
 * thread count, given a deterministic BLAS), run with `execution` (NULL = defaults).
 */
ATTN_API attn_status attn_layer_backward(const attn_layer *layer, int64_t batch,
                                         int64_t query_length, const float *x_query,
                                         int64_t key_length, const float *x_key_value,
                                         const attn_options *options,
                                         const attn_layer_activations *activations,
                                         const float *dout, attn_layer *gradients, float *dx_query,
                                         float *dx_key_value, const attn_execution *execution,
                                         attn_error *error);

/* Adam (Kingma & Ba; PyTorch torch.optim.Adam semantics, L2 weight decay added to the
 * gradient when weight_decay > 0). */
typedef struct attn_adam_config {
    float learning_rate; /* > 0; default 1e-3 */
    float beta1;         /* [0, 1); default 0.9 */
    float beta2;         /* [0, 1); default 0.999 */
    float epsilon;       /* > 0; default 1e-8 */
    float weight_decay;  /* >= 0; default 0 */
} attn_adam_config;

/* The defaults above. */
ATTN_API attn_adam_config attn_adam_default(void);

/*
 * One Adam step on `count` parameters, step = 1, 2, ... (for bias correction):
 *   g = gradient + weight_decay·p;  m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
 *   p -= lr · (m / (1-β1^step)) / (sqrt(v / (1-β2^step)) + ε)
 * parameters, gradients, first_moment, second_moment: float[count] (moments start at 0, are
 * updated in place). Element-wise, so independent of threads.
 */
ATTN_API attn_status attn_adam_step(const attn_adam_config *config, int64_t step, float *parameters,
                                    const float *gradients, float *first_moment,
                                    float *second_moment, int64_t count, attn_error *error);

/* ======================================================================================
 * Section: layers in safetensors files (Hugging Face names)
 * ====================================================================================== */

/*
 * The tensors of an attention layer under Hugging Face names, each prefixed by `prefix`
 * ("" or e.g. "model.layers.0.self_attn."): q_proj.weight, k_proj.weight, v_proj.weight,
 * o_proj.weight, and with biases q_proj.bias, k_proj.bias, v_proj.bias, o_proj.bias.
 * entries: room for 8; *count receives 4 or 8. The entries point at the layer's parameters.
 */
ATTN_API attn_status attn_layer_safetensors_entries(const attn_layer *layer, const char *prefix,
                                                    attn_safetensors_tensor *entries, int *count,
                                                    attn_error *error);

/* Saves a layer's tensors (names as above) to `path`, atomically. */
ATTN_API attn_status attn_layer_save_safetensors(const attn_layer *layer, const char *prefix,
                                                 const char *path, attn_error *error);

/* Loads a created layer's parameters from a parsed file (names as above, F32/BF16/F16).
 * Errors name the missing or misshapen tensor; on error the layer may be partly written. */
ATTN_API attn_status attn_layer_load_safetensors(attn_layer *layer, const char *prefix,
                                                 const attn_safetensors_file *file,
                                                 attn_error *error);

/* ======================================================================================
 * Section: MLA (multi-head latent attention, DeepSeek-V2)
 * ====================================================================================== */

/* RMSNorm: y[n][i] = weight[i] * x[n][i] / sqrt(mean_i(x[n][i]^2) + eps), accumulated in
 * double. x, y float[rows][dim] (row-major; y may equal x); weight float[dim]; eps >= 0. */
ATTN_API attn_status attn_rms_norm(const float *x, int64_t rows, int64_t dim, const float *weight,
                                   float eps, float *y, attn_error *error);

/* Sizes of one MLA layer (docs/attention-math.md §5; DeepSeek-V2: hidden 5120, heads 128,
 * q_lora_rank 1536, kv_lora_rank 512, qk_nope_dim 128, qk_rope_dim 64, v_head_dim 128;
 * V2-Lite: hidden 2048, heads 16, q_lora_rank 0). */
typedef struct attn_mla_config {
    int64_t hidden;       /* d, >= 1 */
    int64_t heads;        /* n_h, >= 1 */
    int64_t q_lora_rank;  /* d_c' (query latent); 0 = no query compression (V2-Lite) */
    int64_t kv_lora_rank; /* d_c (KV latent), >= 1 */
    int64_t qk_nope_dim;  /* d_h, >= 1 */
    int64_t qk_rope_dim;  /* d_rope, even, >= 2: the decoupled RoPE part of q and k */
    int64_t v_head_dim;   /* d_v, >= 1 */
    double rope_base;     /* 0 = 10000; interleaved pairs (DeepSeek reference layout) */
    float scale;          /* softmax scale; 0 = 1/sqrt(d_h + d_rope) (multiply by YaRN's
                             mscale^2 yourself when it applies) */
    float norm_eps;       /* RMSNorm epsilon; 0 = 1e-6 */
} attn_mla_config;

/* The layer's weights, PyTorch nn.Linear layout ([out][in], row-major), no biases. */
typedef struct attn_mla_weights {
    const float *wq;      /* [heads * (d_h + d_rope)][hidden]          (q_lora_rank == 0) */
    const float *wq_a;    /* [q_lora_rank][hidden]                     (q_lora_rank > 0) */
    const float *q_norm;  /* [q_lora_rank]                             (q_lora_rank > 0) */
    const float *wq_b;    /* [heads * (d_h + d_rope)][q_lora_rank]     (q_lora_rank > 0) */
    const float *wkv_a;   /* [d_c + d_rope][hidden]: latent rows, then the RoPE key rows */
    const float *kv_norm; /* [d_c] */
    const float *wkv_b;   /* [heads][d_h + d_v][d_c]: per head W_UK (d_h rows), W_UV (d_v rows) */
    const float *wo;      /* [hidden][heads * d_v] */
} attn_mla_weights;

typedef enum attn_mla_path {
    ATTN_MLA_NAIVE = 0,   /* materialise per-head k = [W_UK c ; k_R] and v = W_UV c (prefill) */
    ATTN_MLA_ABSORBED = 1 /* fold W_UK into q and W_UV into the output: attention runs as MQA
                             on the latent cache, Dk = d_c + d_rope, Dv = d_c (decoding) */
} attn_mla_path;

/* The cache config an MLA layer needs: 1 KV head, key = [c_KV (RMSNormed) ; k_R (RoPEd)]
 * (d_c + d_rope values per token, nothing else), value = the key's first d_c values. */
ATTN_API attn_status attn_mla_cache_config(const attn_mla_config *config, int64_t sequences,
                                           int64_t capacity, attn_dtype dtype, int64_t page_size,
                                           attn_kv_cache_config *cache_config, attn_error *error);

/*
 * One MLA layer over T new tokens of every sequence: computes the queries and the latent
 * (c_KV, k_R) of each new token at its absolute position (its sequence's length before the
 * call + t), appends the latents to `cache` (made with attn_mla_cache_config), and attends
 * causally (bottom-right) over everything cached.
 *   hidden [B, T, hidden] F32 (any strides; B = the cache's sequences)
 *   out    [B, T, hidden] F32 (written; must not overlap hidden)
 * Both paths give the same result up to float rounding. The matrix products run through
 * CBLAS sgemm (projections via attn_linear_forward); attention runs with the default
 * execution settings (attn_execution). Errors: shapes, missing weights, cache
 * capacity (nothing appended), sizes beyond CBLAS's int (OVERFLOW), as attn_decode /
 * attn_forward.
 */
ATTN_API attn_status attn_mla_forward(const attn_mla_config *config,
                                      const attn_mla_weights *weights, attn_kv_cache *cache,
                                      const attn_tensor *hidden, attn_mla_path path,
                                      attn_tensor *out, attn_error *error);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_LAYERS_H */
