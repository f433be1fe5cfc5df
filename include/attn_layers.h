/*
 * attn_layers.h — the model-building parts on top of attn.h: positional encodings
 * (sinusoidal, RoPE), token embeddings, linear maps (CBLAS), attention layers (config,
 * create, forward, backward, safetensors load/save of a layer), the Adam optimiser, RMSNorm,
 * MLA (multi-head latent attention, DeepSeek-V2), and the model families of Hugging Face
 * checkpoints (config.json + safetensors names, docs/models.md). Same conventions as attn.h.
 * Libraries (docs/install.md): the positional encodings and embeddings are in libattn itself
 * (the KV cache applies RoPE); attn_model_family_parse/_name and attn_model_config_parse/_read
 * (config.json) are in libattn_io; everything else is in libattn_models (-lattn_models, which
 * brings libattn_io and libattn; CBLAS).
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

/*
 * RoPE frequency scaling for contexts past the trained length, as Hugging Face transformers
 * defines it (config.json "rope_scaling" / "rope_parameters"; formulas in docs/models.md).
 * With rotary dims D_r, base θ and i = 0 .. D_r/2 - 1 the unscaled inverse frequencies are
 * f_i = θ^(-2i/D_r); each rule rescales them (and YaRN the cos/sin magnitude):
 *   LINEAR:  f_i / factor.
 *   DYNAMIC: NTK-aware, θ' = θ (factor L/L0 - (factor - 1))^(D_r/(D_r - 2)) where L0 =
 *            original_max_positions (config max_position_embeddings) and L = max(L0, the call's
 *            largest position id + 1). Stateless: each call decides from its own positions.
 *   LLAMA3:  wavelength λ_i = 2π/f_i; λ > L0/low_freq_factor: f/factor;
 *            λ < L0/high_freq_factor: f; in between a linear blend by s = (L0/λ - low)/(high - low).
 *   YARN:    ramp between interpolation (f/factor) and extrapolation (f) over the dims set by
 *            beta_fast / beta_slow rotations in L0 positions; cos and sin are multiplied by the
 *            attention factor (given, or from mscale / mscale_all_dim, or 0.1 ln(factor) + 1).
 * A zeroed struct means no scaling.
 */
typedef enum attn_rope_scaling_type {
    ATTN_ROPE_SCALING_NONE = 0,
    ATTN_ROPE_SCALING_LINEAR = 1,
    ATTN_ROPE_SCALING_DYNAMIC = 2,
    ATTN_ROPE_SCALING_LLAMA3 = 3,
    ATTN_ROPE_SCALING_YARN = 4
} attn_rope_scaling_type;

typedef struct attn_rope_scaling {
    attn_rope_scaling_type type;
    double factor;                  /* > 0 (every type but NONE) */
    int64_t original_max_positions; /* L0 >= 1 (DYNAMIC, LLAMA3, YARN) */
    double low_freq_factor;         /* LLAMA3: 0 < low < high */
    double high_freq_factor;        /* LLAMA3 */
    double beta_fast, beta_slow;    /* YARN: 0 = 32 and 1 */
    double mscale, mscale_all_dim;  /* YARN (DeepSeek): 0 = not given */
    double attention_factor;        /* YARN: 0 = computed from the above */
    int no_truncate;                /* YARN: nonzero = transformers' truncate = false */
} attn_rope_scaling;

/* A RoPE: layout, rotary dims (even; 0 = the head dim D of the tensor), base (0 = 10000) and
 * scaling (zeroed = none). */
typedef struct attn_rope_config {
    attn_rope_layout layout;
    int64_t rotary_dim;
    double base;
    attn_rope_scaling scaling;
} attn_rope_config;

/*
 * The inverse frequencies f[rotary_dim / 2] (written) and the cos/sin magnitude
 * (*attention_factor: 1 except under YaRN) of `rope` for a call whose largest position id is
 * sequence_length - 1 (only DYNAMIC looks at it). rope->rotary_dim must be given (not 0).
 * Errors: layout, rotary_dim, base or scaling fields out of range (the message names them).
 */
ATTN_API attn_status attn_rope_frequencies(const attn_rope_config *rope,
                                           int64_t sequence_length, double *inverse_frequencies,
                                           double *attention_factor, attn_error *error);

/*
 * RoPE in place on x [B, T, H, D] F32 (any strides), token (b, t) at position
 * position_ids[b, t] (I64 [B, T], any strides; NULL = positions 0..T-1 in every row), with the
 * frequencies of attn_rope_frequencies (DYNAMIC: sequence_length = max position id + 1 of the
 * call): the pair (x1, x2) of frequency f becomes a (x1 cos(pf) - x2 sin(pf), x1 sin(pf) +
 * x2 cos(pf)), a = the attention factor. inverse != 0 applies the transpose (angles negated,
 * the same a): the gradient of the forward map. Dims past rotary_dim are untouched.
 * Errors: as attn_rope_frequencies, position_ids not [B, T] I64.
 */
ATTN_API attn_status attn_rope_apply_ids(attn_tensor *x, const attn_rope_config *rope,
                                         const attn_tensor *position_ids, int inverse,
                                         attn_error *error);

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
 * Optional RoPE is applied to q and k after projection, at positions 0..T-1 of each input or
 * at the position ids given to attn_layer_forward_at, with optional frequency scaling.
 * Biases: `bias` gives all four projections one; bias_q .. bias_o give one projection one
 * (Qwen2: q, k, v but not o). A projection has a bias when bias or its own flag is nonzero,
 * so a zeroed struct has none and bias = 1 alone keeps its old meaning.
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
    int bias_q, bias_k, bias_v, bias_o; /* nonzero: that projection has a bias (see above) */
    attn_rope_scaling rope_scaling;     /* when rope; zeroed = none */
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
    float *q_bias;    /* q_proj.bias [h*dh], NULL without a q bias */
    float *k_bias;    /* k_proj.bias [g*dh], NULL without a k bias */
    float *v_bias;    /* v_proj.bias [g*dh], NULL without a v bias */
    float *o_bias;    /* o_proj.bias [d], NULL without an o bias */
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
    /* The position ids of the last forward (int64 [B][Tq] and [B][Tk], copies owned by the
       struct), or NULL when it used positions 0..T-1; the backward rotates back with them. */
    int64_t *query_positions, *key_positions;
} attn_layer_activations;

/* Number of parameters: 2·d·dh·(h + g), plus h·dh, g·dh, g·dh, d for each projection with
 * a bias (4·d² for MHA with h·dh = d and no bias). Errors: sizes < 1, h % g != 0, overflow. */
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
 * attn_layer_forward with RoPE at explicit position ids (Hugging Face position_ids): query
 * token (b, i) is rotated at query_positions[b * Tq + i], key token (b, j) at
 * key_positions[b * Tk + j] (int64, row-major [B][T]). NULL query_positions = 0..Tq-1 in every
 * row; NULL key_positions = query_positions for self-attention (x_key_value NULL), else
 * 0..Tk-1. Ignored when the layer has no RoPE. With activations, the ids are copied into them
 * for attn_layer_backward. attn_layer_forward(...) = attn_layer_forward_at(..., NULL, NULL).
 * These positions only rotate q and k; masking follows `options` as in attn_forward.
 */
ATTN_API attn_status attn_layer_forward_at(const attn_layer *layer, int64_t batch,
                                           int64_t query_length, const float *x_query,
                                           const int64_t *query_positions, int64_t key_length,
                                           const float *x_key_value,
                                           const int64_t *key_positions,
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
 * entries: room for 8; *count receives 4 plus one per bias the layer has (4..8). The entries
 * point at the layer's parameters.
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
    attn_rope_scaling rope_scaling; /* frequency scaling of the RoPE dims (DeepSeek-V2: YaRN);
                                       zeroed = none. The YaRN magnitude multiplies q_R and k_R */
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

/* ======================================================================================
 * Section: model families (Hugging Face checkpoints: config.json + safetensors)
 * ====================================================================================== */

/*
 * The attention layers of a checkpoint, named as its Hugging Face safetensors name them
 * (P = the attention module's prefix, e.g. "encoder.layer.3.attention.", "h.3.attn.",
 * "model.layers.3.self_attn."; the suffixes are attn_named_layer_suffix's):
 *   BERT     P self.{query,key,value}.{weight,bias}, P output.dense.{weight,bias}
 *            (nn.Linear [out][in], biases on all four; roots "" or "bert.")
 *   GPT2     P c_attn.{weight [d][3d], bias [3d]} (Conv1D [in][out], q | k | v along the
 *            output), P c_proj.{weight [d][d], bias} (roots "" or "transformer.")
 *   LLAMA    P {q,k,v,o}_proj.weight (no biases unless config attention_bias; GQA)
 *            Llama, Mistral (roots "model." or "")
 *   QWEN2    as LLAMA with q_proj, k_proj, v_proj biases and none on o_proj
 *   DEEPSEEK_V2  MLA: P q_proj (V2-Lite) or q_a_proj, q_a_layernorm, q_b_proj (V2), and
 *            kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj (attn_mla_weights)
 */
typedef enum attn_model_family {
    ATTN_MODEL_UNKNOWN = 0,
    ATTN_MODEL_BERT = 1,
    ATTN_MODEL_GPT2 = 2,
    ATTN_MODEL_LLAMA = 3, /* also Mistral */
    ATTN_MODEL_QWEN2 = 4,
    ATTN_MODEL_DEEPSEEK_V2 = 5
} attn_model_family;

/* The family of a config.json "model_type" ("bert", "gpt2", "llama", "mistral", "qwen2",
 * "deepseek_v2"; exact, lower case). Errors: NULL, an unknown name (INVALID_ARGUMENT, the
 * message lists the known ones). */
ATTN_API attn_status attn_model_family_parse(const char *model_type,
                                             attn_model_family *family, attn_error *error);

/* The family's name ("bert", "gpt2", "llama", "qwen2", "deepseek_v2"; "unknown"). */
ATTN_API const char *attn_model_family_name(attn_model_family family);

/*
 * What attn reads from a config.json (docs/models.md lists the keys of each family).
 * Sizes absent from the file are 0, except those with a documented default in transformers
 * (kv_heads = heads, head_dim = hidden / heads, GPT-2's n_inner = 4 d, rope_theta = 10000).
 */
typedef struct attn_model_config {
    attn_model_family family;
    char model_type[32];       /* as written ("mistral" is family LLAMA) */
    int64_t hidden_size;       /* d: hidden_size / n_embd */
    int64_t layers;            /* num_hidden_layers / n_layer */
    int64_t heads;             /* num_attention_heads / n_head */
    int64_t kv_heads;          /* num_key_value_heads (= heads when absent) */
    int64_t head_dim;          /* head_dim (= d / heads when absent; MLA: nope + rope dims) */
    int64_t intermediate_size; /* intermediate_size / n_inner */
    int64_t vocab_size;
    int64_t max_positions;     /* max_position_embeddings / n_positions */
    int64_t type_vocab_size;   /* BERT token types */
    double norm_eps;           /* layer_norm_eps / layer_norm_epsilon / rms_norm_eps */
    int causal;                /* decoders 1, BERT 0 */
    int bias_q, bias_k, bias_v, bias_o; /* which projections the checkpoint gives biases */
    int rope;                  /* nonzero: RoPE on q and k (LLAMA, QWEN2, DEEPSEEK_V2) */
    attn_rope_config rope_config; /* layout (HF rotate-half; DeepSeek interleaved), rotary dims
                                     (head_dim × partial_rotary_factor; MLA qk_rope_head_dim),
                                     rope_theta, rope_scaling / rope_parameters */
    int64_t sliding_window;    /* Mistral sliding_window, Qwen2 when use_sliding_window; 0 = none */
    /* DeepSeek-V2 MLA sizes (0 elsewhere; q_lora_rank 0 = V2-Lite's uncompressed queries). */
    int64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
} attn_model_config;

/*
 * Parses config.json text json[0, length). Errors (FORMAT, naming the key): malformed JSON, a
 * missing or non-integer size, an unsupported model_type, rope type (supported: default,
 * linear, dynamic, llama3, yarn) or setting (BERT position_embedding_type other than
 * "absolute", GPT-2 scale_attn_by_inverse_layer_idx).
 */
ATTN_API attn_status attn_model_config_parse(const char *json, size_t length,
                                             attn_model_config *config, attn_error *error);

/* Reads `path`: a config.json, or a checkpoint folder holding one. ATTN_ERROR_IO when it
 * cannot be read; otherwise as attn_model_config_parse, messages naming the path. */
ATTN_API attn_status attn_model_config_read(const char *path, attn_model_config *config,
                                            attn_error *error);

/* The attn_layer_config of one attention layer of the model (sizes, per-projection biases,
 * RoPE). Errors: family DEEPSEEK_V2 (use attn_model_mla_config), sizes out of range. */
ATTN_API attn_status attn_model_layer_config(const attn_model_config *model,
                                             attn_layer_config *layer, attn_error *error);

/*
 * The attention prefix of layer `index` (0-based) in `file`, as attn_named_layers_find
 * recognises it: the layer of the family's naming scheme whose last numeric prefix part is
 * `index` (e.g. "encoder.layer.3.attention.", "h.3.attn.", "model.layers.3.self_attn.",
 * whatever root the checkpoint uses). prefix: char[capacity]. Errors: no such layer (FORMAT),
 * capacity too small, memory.
 */
ATTN_API attn_status attn_model_layer_prefix(const attn_model_config *model,
                                             const attn_safetensors_file *file, int64_t index,
                                             char *prefix, size_t capacity, attn_error *error);

/*
 * Loads the attention parameters under `prefix` (as above) into a created layer (its config
 * gives the shapes and biases) by `family`'s names, converting F32/BF16/F16 to float32 and
 * GPT-2's Conv1D [in][out] layout (fused q | k | v) to nn.Linear [out][in]. Errors name the
 * tensor: missing, misshapen, a bias in the file the layer lacks or the reverse. On error the
 * layer may be partly written. DEEPSEEK_V2 is not an attn_layer (attn_model_load_mla).
 */
ATTN_API attn_status attn_layer_load_family(attn_layer *layer, attn_model_family family,
                                            const char *prefix,
                                            const attn_safetensors_file *file,
                                            attn_error *error);

/* attn_model_layer_config + attn_layer_create + attn_model_layer_prefix +
 * attn_layer_load_family: layer `index` of the model, ready to run. On error nothing is
 * left allocated (layer zeroed). */
ATTN_API attn_status attn_model_load_layer(const attn_model_config *model,
                                           const attn_safetensors_file *file, int64_t index,
                                           attn_layer *layer, attn_error *error);

/* An MLA layer's config and weights, owning them (attn_mla_layer_destroy frees them). */
typedef struct attn_mla_layer {
    attn_mla_config config;
    attn_mla_weights weights;  /* point into `parameters` */
    float *parameters;
    int64_t parameter_count;
} attn_mla_layer;

/*
 * The attn_mla_config of a DeepSeek-V2 model: sizes, rope_theta, rope_scaling, norm eps and
 * the softmax scale (q_head_dim^-1/2, times mscale² = (0.1 mscale_all_dim ln(factor) + 1)²
 * under YaRN scaling, as DeepSeek does).
 */
ATTN_API attn_status attn_model_mla_config(const attn_model_config *model,
                                           attn_mla_config *mla, attn_error *error);

/* Loads MLA layer `index` of a DeepSeek-V2 checkpoint (names above, HF layouts, which
 * attn_mla_weights shares). On error nothing is left allocated. */
ATTN_API attn_status attn_model_load_mla(const attn_model_config *model,
                                         const attn_safetensors_file *file, int64_t index,
                                         attn_mla_layer *layer, attn_error *error);

/* Frees an MLA layer's weights and zeroes it. NULL is allowed. */
ATTN_API void attn_mla_layer_destroy(attn_mla_layer *layer);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_LAYERS_H */
