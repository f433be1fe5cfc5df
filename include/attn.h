/*
 * attn.h — the one public header of libattn, an exact and fast attention library in C.
 *
 * Everything a user of the library can call is declared here, grouped in sections:
 * status and errors, tensors (strided views), attention options (scale, masks, positional
 * biases), the forward and backward passes, positional encodings and layers, KV caches and
 * decoding, and file formats (.npy, safetensors). The MPI ring attention lives in attn_mpi.h.
 *
 * Conventions (see docs/conventions.md and shared/reference/attention-math.md):
 *  - Tensors are strided views whose logical dimension order is fixed: Q, K, V and O are
 *    [B, T, H, D] (batch, sequence, heads, head dim). Strides are in elements and may be any
 *    value (including 0 for broadcasting where documented), so [B, H, T, D] memory is just a
 *    view with strides {H*T*D, D, T*D, 1}.
 *  - Q [B, Tq, Hq, Dk], K [B, Tk, Hkv, Dk], V [B, Tk, Hkv, Dv], O [B, Tq, Hq, Dv], LSE [B, Hq, Tq].
 *    Hq must be divisible by Hkv; query head h uses KV head h / (Hq / Hkv).
 *  - LSE is the natural-log log-sum-exp of the final logits of a row (scale, soft-cap and bias
 *    included). A row with no allowed key has LSE = -inf when the empty-row policy allows it.
 *  - Causal alignment is always named: ATTN_ALIGN_BOTTOM_RIGHT (FlashAttention >= 2.1, query i
 *    sits at position i + Tk - Tq) or ATTN_ALIGN_TOP_LEFT (PyTorch is_causal, position i).
 *  - Boolean masks: nonzero = allowed.
 *  - Results are bitwise identical for any thread count.
 *  - No function aborts, exits or prints. Each returns an attn_status; when the caller passes
 *    an attn_error, its message names the argument and the bad value.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 1
#define ATTN_VERSION_PATCH 0

/* ======================================================================================
 * Section: status and errors
 * ====================================================================================== */

/* Every fallible function returns one of these. ATTN_OK is 0. */
typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_ERROR_NULL_ARGUMENT = 1,     /* a required pointer was NULL */
    ATTN_ERROR_INVALID_ARGUMENT = 2,  /* a value out of range (size <= 0, scale <= 0, ...) */
    ATTN_ERROR_SHAPE_MISMATCH = 3,    /* tensors that must agree do not (B, Tk, heads, dims) */
    ATTN_ERROR_OVERFLOW = 4,          /* a size product does not fit in int64 / size_t */
    ATTN_ERROR_OUT_OF_MEMORY = 5,     /* an allocation failed */
    ATTN_ERROR_EMPTY_ROW = 6,         /* a query row has no allowed key (default policy) */
    ATTN_ERROR_IO = 7,                /* a file could not be opened, read or written */
    ATTN_ERROR_FORMAT = 8,            /* a file is malformed (.npy header, safetensors JSON) */
    ATTN_ERROR_MEMORY_LIMIT = 9,      /* the request would exceed the caller's memory limit */
    ATTN_ERROR_CAPACITY = 10,         /* a cache is full or a page pool is exhausted */
    ATTN_ERROR_UNSUPPORTED = 11,      /* a valid request this build cannot serve (e.g. CPU kernel) */
    ATTN_ERROR_COMMUNICATION = 12     /* an MPI call failed or another rank reported an error */
} attn_status;

#define ATTN_ERROR_MESSAGE_CAPACITY 512

/* Filled by a failing call when the caller passes one; untouched on success. */
typedef struct attn_error {
    attn_status status;
    char message[ATTN_ERROR_MESSAGE_CAPACITY]; /* one line, no trailing newline */
} attn_error;

/* A short constant name for a status, e.g. "ATTN_ERROR_SHAPE_MISMATCH". Never NULL. */
const char *attn_status_name(attn_status status);

/* The library version as "MAJOR.MINOR.PATCH". */
const char *attn_version(void);

/* ======================================================================================
 * Section: tensors
 * ====================================================================================== */

typedef enum attn_dtype {
    ATTN_DTYPE_F32 = 0,  /* IEEE float32 */
    ATTN_DTYPE_BF16 = 1, /* bfloat16 stored as uint16_t */
    ATTN_DTYPE_F16 = 2,  /* IEEE half stored as uint16_t */
    ATTN_DTYPE_BOOL = 3, /* uint8_t, nonzero = true */
    ATTN_DTYPE_I32 = 4,  /* int32_t */
    ATTN_DTYPE_I64 = 5,  /* int64_t */
    ATTN_DTYPE_F64 = 6   /* IEEE float64 */
} attn_dtype;

#define ATTN_MAX_RANK 4

/*
 * A strided view of memory the caller owns. shape[d] >= 1 for d < rank; stride[d] is in
 * elements (not bytes) and may be negative or 0 (0 = broadcast along that dimension, only
 * where an argument's documentation allows broadcasting). The library never frees `data`.
 */
typedef struct attn_tensor {
    void *data;
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    int64_t stride[ATTN_MAX_RANK];
} attn_tensor;

/* Size in bytes of one element of `dtype` (0 for an unknown value). */
size_t attn_dtype_size(attn_dtype dtype);

/* A C-order (row-major, contiguous) view: the last dimension has stride 1. rank 1..4. */
attn_tensor attn_tensor_contiguous(void *data, attn_dtype dtype, int rank, const int64_t *shape);

/* Shorthand for a contiguous float32 [d0, d1, d2, d3] view. */
attn_tensor attn_tensor_f32_4d(float *data, int64_t d0, int64_t d1, int64_t d2, int64_t d3);

/*
 * A float32 [B, T, H, D] view of memory laid out as [B, H, T, D] (contiguous in that order):
 * strides {H*T*D, D, T*D, 1}. The result is a view, not a copy.
 */
attn_tensor attn_tensor_f32_bhtd(float *data, int64_t B, int64_t T, int64_t H, int64_t D);

/*
 * Reorders the dimensions of a view: result.shape[i] = t.shape[order[i]] (same for strides).
 * Returns ATTN_ERROR_INVALID_ARGUMENT if `order` is not a permutation of 0..rank-1.
 */
attn_status attn_tensor_permute(const attn_tensor *t, const int *order, attn_tensor *result,
                                attn_error *error);

/* Number of elements (product of the shape); -1 if the product overflows int64. */
int64_t attn_tensor_numel(const attn_tensor *t);

/* ======================================================================================
 * Section: attention options (scale, masks, positional biases)
 * ====================================================================================== */

/* Where query i sits relative to the keys: named, never implied. */
typedef enum attn_alignment {
    ATTN_ALIGN_UNSET = 0,        /* error if a position-dependent option is used */
    ATTN_ALIGN_BOTTOM_RIGHT = 1, /* query i at position i + (Tk - Tq): FlashAttention >= 2.1 */
    ATTN_ALIGN_TOP_LEFT = 2      /* query i at position i: PyTorch is_causal=True */
} attn_alignment;

/* What to do with a query row that has no allowed key. */
typedef enum attn_empty_rows {
    ATTN_EMPTY_ROWS_ERROR = 0, /* fail with ATTN_ERROR_EMPTY_ROW naming (b, h, i) — default */
    ATTN_EMPTY_ROWS_ZERO = 1,  /* O row = 0, LSE = -inf (PyTorch >= 2.5 output) */
    ATTN_EMPTY_ROWS_NAN = 2    /* O row = NaN, LSE = NaN (plain softmax over all -inf) */
} attn_empty_rows;

/* Structured sparse patterns (Sparse Transformer, Longformer). They never imply causality:
 * combine with `causal` for the autoregressive forms. d = pq(i) - pk(j) below. STRIDED's local
 * part is the code's l positions (0 <= d < l when causal), not the paper's l + 1; with causal,
 * row i attends keys i-l+1..i and every key l, 2l, ... before them. */
typedef enum attn_sparse_pattern {
    ATTN_PATTERN_NONE = 0,
    ATTN_PATTERN_STRIDED = 1, /* |d| < stride  OR  d mod stride == 0   (Child et al. 2019) */
    ATTN_PATTERN_FIXED = 2,   /* floor(pk/stride) == floor(pq/stride)  OR
                                 pk mod stride >= stride - summary     (Child et al. 2019) */
    ATTN_PATTERN_DILATED = 3  /* |d| <= radius*dilation AND d mod dilation == 0 (Longformer) */
} attn_sparse_pattern;

/* Which implementation of the inner kernels to use (forward and backward). */
typedef enum attn_kernel_choice {
    ATTN_KERNEL_AUTO = 0,    /* the fastest this CPU supports */
    ATTN_KERNEL_GENERIC = 1, /* portable C */
    ATTN_KERNEL_AVX2 = 2,    /* AVX2 + FMA; ATTN_ERROR_UNSUPPORTED if the CPU lacks it */
    ATTN_KERNEL_AVX512 = 3   /* AVX-512F; ATTN_ERROR_UNSUPPORTED if the CPU lacks it */
} attn_kernel_choice;

/*
 * Everything about one attention call except the tensors. Start from attn_options_default()
 * and set what you need. Unless stated, a pointer member may be NULL (= feature off) and the
 * caller keeps ownership of what it points to for the duration of the call.
 *
 * Logit of the pair (i, j), in this order (FlashAttention, Gemma-2):
 *   x = scale * (q_i . k_j)
 *   x = softcap * tanh(x / softcap)                       if softcap > 0
 *   x += bias[b, h, i, j] + alibi(h, i, j)                if given
 *   x = -inf                                              if (i, j) is not allowed
 * allowed(b, h, i, j) =
 *       causal?(pk(j) <= pq(i))
 *   AND ( (window(i, j) AND pattern(i, j)) OR global(i) OR global(j) )
 *   AND mask[b, h, i, j] AND j < key_lengths[b] AND i < query_lengths[b]
 *   AND block_layout[b, h, i / block_q, j / block_k]
 * where pq(i), pk(j) are positions: pk(j) = j, pq(i) = i + (Tk_b - Tq_b) for bottom-right
 * alignment (Tk_b, Tq_b = the batch's valid lengths) or i for top-left, unless
 * query_positions / key_positions give them explicitly.
 * Query rows i >= query_lengths[b] are padding: their O is 0 and LSE -inf, never an error.
 */
typedef struct attn_options {
    /* Scale: 1/sqrt(Dk) unless custom_scale != 0, then `scale` (finite, > 0). */
    int custom_scale;
    float scale;

    attn_alignment alignment; /* required by causal, window, ALiBi and patterns */
    int causal;               /* nonzero: pk(j) <= pq(i) */

    /* FlashAttention window: pq(i) - window_left <= pk(j) <= pq(i) + window_right;
       -1 = unbounded on that side; values below -1 are an error. */
    int64_t window_left;
    int64_t window_right;

    /* Boolean mask, dtype BOOL, rank 4, logical shape [B|1, Hq|1, Tq, Tk] (size-1 or
       stride-0 dims broadcast). Nonzero = allowed. */
    const attn_tensor *mask;
    /* Additive bias, dtype F32, rank 4, [B|1, Hq|1, Tq, Tk]; -inf entries = not allowed. */
    const attn_tensor *bias;

    /* Valid lengths per batch for padded batches: int32[B], each in [0, Tq] / [0, Tk]. */
    const int32_t *query_lengths;
    const int32_t *key_lengths;

    /* Explicit absolute positions (int64[Tq] / int64[Tk], shared by all batches, each within
       +-2^52, any order); when given they replace the alignment rule for causal, window,
       ALiBi and patterns (query_positions given = alignment may stay UNSET). */
    const int64_t *query_positions;
    const int64_t *key_positions;

    /* Global tokens (Longformer): query row g attends to every key and key column g is
       attended by every query (still subject to causal, mask, lengths, block layout).
       Indices are query indices for rows and key indices for columns; int64[count], each
       in [0, max(Tq, Tk)). They override only the window and the pattern. */
    const int64_t *global_tokens;
    int64_t global_token_count;

    /* Structured sparse pattern and its parameters (see attn_sparse_pattern). */
    attn_sparse_pattern pattern;
    int64_t pattern_stride;   /* STRIDED, FIXED: >= 1 */
    int64_t pattern_summary;  /* FIXED: 1 <= summary <= stride */
    int64_t pattern_radius;   /* DILATED: >= 0 (one-sided window, in dilated steps) */
    int64_t pattern_dilation; /* DILATED: >= 1 */

    /* Block-sparse layout (FlexAttention BlockMask): dtype BOOL, rank 4,
       [B|1, Hq|1, ceil(Tq/block_q), ceil(Tk/block_k)]; a zero tile is never computed. */
    const attn_tensor *block_layout;
    int64_t block_q;
    int64_t block_k;

    /* ALiBi: bias -slope_h * |pq(i) - pk(j)|. Slopes: alibi_slopes (float[Hq]) if given,
       else the standard geometric slopes for Hq heads (attn_alibi_slopes). */
    int alibi;
    const float *alibi_slopes;

    /* Logit soft-capping (Gemma-2): 0 = off, otherwise a finite value > 0. */
    float softcap;

    attn_empty_rows empty_rows;

    /* Execution. num_threads: 0 = OpenMP default, else >= 1. tile_q / tile_k: 0 = tuned
       default, else the tile sizes to use, 1..4096 (tile_q query rows per head, tile_k keys;
       results are the same up to rounding of the
       reduction order within a row; bitwise identical across thread counts regardless). */
    int num_threads;
    int tile_q;
    int tile_k;
    attn_kernel_choice kernel;

    /* Refuse (ATTN_ERROR_MEMORY_LIMIT) a call whose working memory would exceed this many
       bytes; 0 = no limit. */
    size_t memory_limit_bytes;
} attn_options;

/* Options with every feature off: default scale, no mask, window (-1, -1), alignment UNSET,
 * error on empty rows, auto kernel. Always start from this: a zero-initialised struct means
 * window (0, 0), i.e. each query sees only the key at its own position. */
attn_options attn_options_default(void);

/*
 * The standard ALiBi slopes for `num_heads` heads (Press et al.): for n a power of two,
 * 2^(-8k/n), k = 1..n; otherwise those of the largest power of two c < n followed by every
 * other slope of 2c. slopes: float[num_heads].
 */
attn_status attn_alibi_slopes(int num_heads, float *slopes, attn_error *error);

/* ======================================================================================
 * Section: forward pass
 * ====================================================================================== */

/*
 * Exact attention, FlashAttention-style: tiled with an online softmax, working memory
 * O(tile) per thread (never Tq x Tk), tiles with no allowed pair skipped (causal costs about
 * half of full attention, a sliding window O(T * window)). Work is split over (batch,
 * KV head, query tile); the query heads of a GQA group share each packed K/V tile. The
 * output is bitwise identical for any num_threads and from run to run. K/V rows that no
 * query of the call attends (beyond key_lengths, after the causal diagonal, masked for every
 * row) may hold NaN or inf without affecting the result.
 *   q   [B, Tq, Hq, Dk] F32        k [B, Tk, Hkv, Dk] F32      v [B, Tk, Hkv, Dv] F32
 *   out [B, Tq, Hq, Dv] F32 (written)
 *   lse [B, Hq, Tq]     F32 (written; may be NULL)
 * Errors: NULL pointers, non-positive sizes, Hq % Hkv != 0, K/V disagreeing on B or Tk,
 * options out of range, mask/bias shapes that do not broadcast, overflow, an empty row under
 * ATTN_EMPTY_ROWS_ERROR (the message names the first one in (b, h, i) order), memory limit
 * (the per-thread workspaces exceed options->memory_limit_bytes), unsupported kernel.
 * On error `out` and `lse` may have been partly written.
 */
attn_status attn_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                         const attn_options *options, attn_tensor *out, attn_tensor *lse,
                         attn_error *error);

/*
 * The naive reference: materialises the Tq x Tk logits of one (b, h) at a time and
 * accumulates in double. Same arguments, conventions and errors as attn_forward. It is the
 * specification a reader can follow line by line and the oracle of the tests; it is slow.
 */
attn_status attn_reference_forward(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_options *options,
                                   attn_tensor *out, attn_tensor *lse, attn_error *error);

/* ======================================================================================
 * Section: backward pass
 * ====================================================================================== */

/*
 * Gradients of attention by recomputation (FlashAttention-2): P is rebuilt tile by tile from
 * the forward's LSE, D = rowsum(dO * O), never a Tq x Tk buffer. Same options as the forward
 * (the call must use the options the forward used).
 *   q, k, v, out, lse: as produced/consumed by attn_forward; dout [B, Tq, Hq, Dv] F32
 *   dq [B, Tq, Hq, Dk], dk [B, Tk, Hkv, Dk], dv [B, Tk, Hkv, Dv] F32 (written, overwritten)
 *   dbias: NULL, or (only when options->bias is set) F32 with exactly the bias's shape
 *   [B|1, Hq|1, Tq, Tk] (written; a size-1 dimension sums over B or Hq). ALiBi has no
 *   gradient. Outputs may use any strides but no zero stride on a dimension of size > 1,
 *   and must not overlap the inputs.
 * With soft-cap c the chain rule dS * (1 - tanh^2(x / c)) is applied (x = scale * q.k).
 * GQA/MQA: dk and dv of a KV head are the sums over its query heads. Empty rows (LSE = -inf,
 * and padded query rows) get zero gradients; a NaN LSE (ATTN_EMPTY_ROWS_NAN) gives NaN.
 * Deterministic: bitwise identical for any thread count (one owner per output element, fixed
 * summation order, no atomics; see docs/backward.md). Working memory: B*Hq*Tq floats (D),
 * 1 to 4 partial sums of dQ (B*Hq*Tq*Dk floats each; their number depends on the shape and
 * the memory limit, never on the thread count) and a tile workspace per thread.
 * Errors: those of attn_forward's validation, plus NULL out / lse / dout, gradient shapes
 * that differ from the above (ATTN_ERROR_SHAPE_MISMATCH naming e.g. "dk.shape[1] (Tk)"),
 * dbias without options->bias, a broadcasting (zero-stride) output, the memory limit.
 */
attn_status attn_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                          const attn_tensor *out, const attn_tensor *lse,
                          const attn_tensor *dout, const attn_options *options, attn_tensor *dq,
                          attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                          attn_error *error);

/* The naive backward, written as shared/reference/attention-math.md §2.2 states it: dense
 * S, P, dP, dS per (b, h) in double (O(Tq * Tk) memory), single-threaded. Same arguments,
 * conventions and errors as attn_backward (no memory limit). The tests' oracle; slow. */
attn_status attn_reference_backward(const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v, const attn_tensor *out,
                                    const attn_tensor *lse, const attn_tensor *dout,
                                    const attn_options *options, attn_tensor *dq,
                                    attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                                    attn_error *error);

/* ======================================================================================
 * Section: merging partial results (split-KV, cascade, ring)
 * ====================================================================================== */

/*
 * Merges `count` partial results of the same queries over disjoint key sets, exactly:
 *   M = max_s lse_s;  lse = M + log sum_s exp(lse_s - M);  O = sum_s exp(lse_s - lse) O_s
 * outs[s] [B, T, H, Dv] F32, lses[s] [B, H, T] F32; a partial with lse = -inf is empty and
 * contributes nothing; when every partial of a row is empty, O = 0 and lse = -inf.
 * out / lse may alias outs[0] / lses[0] (in-place accumulation).
 */
attn_status attn_merge(int count, const attn_tensor *const *outs, const attn_tensor *const *lses,
                       attn_tensor *out, attn_tensor *lse, attn_error *error);

/* ======================================================================================
 * Section: positional encodings, embeddings and linear maps
 * ====================================================================================== */

/* Sinusoidal encoding (Vaswani et al. 3.5): pe[pos][2i] = sin(pos / 10000^(2i/dim)),
 * pe[pos][2i+1] = cos(...), for pos in [first_position, first_position + count).
 * pe: float[count][dim] (row-major). dim >= 1 (an odd dim ends with a sin column). */
attn_status attn_sinusoidal_encoding(int64_t first_position, int64_t count, int64_t dim,
                                     float *pe, attn_error *error);

typedef enum attn_rope_layout {
    ATTN_ROPE_INTERLEAVED = 0, /* pairs (2i, 2i+1): GPT-J, RoFormer, Meta Llama, DeepSeek */
    ATTN_ROPE_HALF = 1         /* pairs (i, i + rotary_dim/2): GPT-NeoX, HF Llama */
} attn_rope_layout;

/*
 * Rotary position embedding, in place, on x [B, T, H, D] F32 (any strides): the first
 * rotary_dim (even, 2..D) dims of token t rotate by angles positions[t] * base^(-2i/rotary_dim)
 * (positions: int64[T], or NULL for positions first_position + t). Angles in double.
 * inverse != 0 rotates by the negated angles (the gradient of the forward rotation).
 */
attn_status attn_rope_apply(attn_tensor *x, attn_rope_layout layout, int64_t rotary_dim,
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
 *   LLAMA3:  wavelength λ_i = 2π/f_i; λ > L0/low_freq_factor: f/factor; λ < L0/high_freq_factor:
 *            f; in between a linear blend by s = (L0/λ - low)/(high - low).
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
attn_status attn_rope_frequencies(const attn_rope_config *rope, int64_t sequence_length,
                                  double *inverse_frequencies, double *attention_factor,
                                  attn_error *error);

/*
 * RoPE in place on x [B, T, H, D] F32 (any strides), token (b, t) at position
 * position_ids[b, t] (I64 [B, T], any strides; NULL = positions 0..T-1 in every row), with the
 * frequencies of attn_rope_frequencies (DYNAMIC: sequence_length = max position id + 1 of the
 * call): the pair (x1, x2) of frequency f becomes a (x1 cos(pf) - x2 sin(pf), x1 sin(pf) +
 * x2 cos(pf)), a = the attention factor. inverse != 0 applies the transpose (angles negated,
 * the same a): the gradient of the forward map. Dims past rotary_dim are untouched.
 * Errors: as attn_rope_frequencies, position_ids not [B, T] I64.
 */
attn_status attn_rope_apply_ids(attn_tensor *x, const attn_rope_config *rope,
                                const attn_tensor *position_ids, int inverse, attn_error *error);

/* Token embedding lookup: out[n][:] = table[tokens[n]][:], table float[vocab][dim],
 * out float[count][dim]. A token outside [0, vocab) is an error naming its index. */
attn_status attn_embedding_lookup(const float *table, int64_t vocab, int64_t dim,
                                  const int32_t *tokens, int64_t count, float *out,
                                  attn_error *error);

/* y[n][o] = sum_i x[n][i] * weight[o][i] + (bias ? bias[o] : 0): PyTorch nn.Linear layout
 * (weight [out_features][in_features]). x float[rows][in], y float[rows][out], row-major.
 * Goes through CBLAS sgemm. */
attn_status attn_linear_forward(const float *x, int64_t rows, int64_t in_features,
                                const float *weight, const float *bias, int64_t out_features,
                                float *y, attn_error *error);

/* Gradient of attn_embedding_lookup: grad_table[tokens[n]][:] += grad_out[n][:] for n in
 * order (repeated tokens sum; a fixed order, so bitwise reproducible). grad_out
 * float[count][dim], grad_table float[vocab][dim] (accumulated, not zeroed). Same errors. */
attn_status attn_embedding_backward(const int32_t *tokens, int64_t count, const float *grad_out,
                                    int64_t vocab, int64_t dim, float *grad_table,
                                    attn_error *error);

/* Gradient of attn_linear_forward given dy float[rows][out_features]:
 *   dx      float[rows][in_features]      = dy W        (overwritten; NULL = not wanted)
 *   dweight float[out_features][in_features] += dyᵀ x   (accumulated; NULL = not wanted)
 *   dbias   float[out_features]           += Σ_rows dy  (accumulated; NULL = not wanted)
 * x may be NULL when dweight is NULL; weight may be NULL when dx is NULL. Sizes must fit
 * CBLAS's int (else ATTN_ERROR_OVERFLOW). Goes through CBLAS sgemm. */
attn_status attn_linear_backward(const float *x, int64_t rows, int64_t in_features,
                                 const float *weight, int64_t out_features, const float *dy,
                                 float *dx, float *dweight, float *dbias, attn_error *error);

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
attn_status attn_layer_parameter_count(const attn_layer_config *config, int64_t *count,
                                       attn_error *error);

/* Validates `config` (sizes, divisibility, RoPE settings) and allocates zeroed parameters. */
attn_status attn_layer_create(const attn_layer_config *config, attn_layer *layer,
                              attn_error *error);

/* Xavier/Glorot uniform initialisation of the four weights, U(-a, a) with
 * a = sqrt(6 / (fan_in + fan_out)); biases set to 0. Deterministic for a seed (its own
 * xoshiro256** stream, independent of threads and platform). */
attn_status attn_layer_init_xavier(attn_layer *layer, uint64_t seed, attn_error *error);

/* Frees the parameters and zeroes the struct. NULL is allowed. */
void attn_layer_destroy(attn_layer *layer);

/* Frees the buffers and zeroes the struct. NULL is allowed. */
void attn_layer_activations_free(attn_layer_activations *activations);

/*
 * out = o_proj(attention(RoPE(q_proj(x_query)), RoPE(k_proj(x_kv)), v_proj(x_kv))).
 *   x_query    float[B][Tq][d]
 *   x_key_value float[B][Tk][d], or NULL for self-attention (then key_length must equal
 *              query_length and x_query is used)
 *   options    passed to attn_forward as is (mask, causal, window, ...; NULL = defaults); its
 *              tensors, if any, are shaped for [B, h, Tq, Tk]
 *   activations: NULL, or a struct to keep what attn_layer_backward needs (see above)
 *   out        float[B][Tq][d] (written; must not alias the inputs)
 * Errors: those of attn_forward, sizes < 1, overflow, memory.
 */
attn_status attn_layer_forward(const attn_layer *layer, int64_t batch, int64_t query_length,
                               const float *x_query, int64_t key_length,
                               const float *x_key_value, const attn_options *options,
                               attn_layer_activations *activations, float *out,
                               attn_error *error);

/*
 * attn_layer_forward with RoPE at explicit position ids (Hugging Face position_ids): query
 * token (b, i) is rotated at query_positions[b * Tq + i], key token (b, j) at
 * key_positions[b * Tk + j] (int64, row-major [B][T]). NULL query_positions = 0..Tq-1 in every
 * row; NULL key_positions = query_positions for self-attention (x_key_value NULL), else
 * 0..Tk-1. Ignored when the layer has no RoPE. With activations, the ids are copied into them
 * for attn_layer_backward. attn_layer_forward(...) = attn_layer_forward_at(..., NULL, NULL).
 * These positions only rotate q and k; masking follows `options` as in attn_forward.
 */
attn_status attn_layer_forward_at(const attn_layer *layer, int64_t batch, int64_t query_length,
                                  const float *x_query, const int64_t *query_positions,
                                  int64_t key_length, const float *x_key_value,
                                  const int64_t *key_positions, const attn_options *options,
                                  attn_layer_activations *activations, float *out,
                                  attn_error *error);

/*
 * Gradients of the layer, given the activations of the matching attn_layer_forward call (same
 * inputs, options and parameters) and dout float[B][Tq][d]:
 *   gradients:    a layer created with the same config; every parameter gradient is written
 *                 (overwritten, not accumulated)
 *   dx_query:     float[B][Tq][d] (written; NULL = not wanted). For self-attention
 *                 (x_key_value NULL) it is the whole input gradient (query + key + value paths)
 *   dx_key_value: float[B][Tk][d] (written; NULL = not wanted); cross-attention only
 * Attention gradients come from attn_backward (deterministic: bitwise identical for any
 * thread count, given a deterministic BLAS).
 */
attn_status attn_layer_backward(const attn_layer *layer, int64_t batch, int64_t query_length,
                                const float *x_query, int64_t key_length,
                                const float *x_key_value, const attn_options *options,
                                const attn_layer_activations *activations, const float *dout,
                                attn_layer *gradients, float *dx_query, float *dx_key_value,
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
attn_adam_config attn_adam_default(void);

/*
 * One Adam step on `count` parameters, step = 1, 2, ... (for bias correction):
 *   g = gradient + weight_decay·p;  m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
 *   p -= lr · (m / (1-β1^step)) / (sqrt(v / (1-β2^step)) + ε)
 * parameters, gradients, first_moment, second_moment: float[count] (moments start at 0, are
 * updated in place). Element-wise, so independent of threads.
 */
attn_status attn_adam_step(const attn_adam_config *config, int64_t step, float *parameters,
                           const float *gradients, float *first_moment, float *second_moment,
                           int64_t count, attn_error *error);

/* ======================================================================================
 * Section: KV cache and decoding
 * ====================================================================================== */

/*
 * A KV cache for one layer: `sequences` sequences x Hkv heads, each holding up to `capacity`
 * tokens. Storage is a pool of pages of `page_size` tokens (vLLM / FlashAttention paged
 * layout) with one block table per sequence; page_size = 0 gives the contiguous layout (one
 * page of `capacity` tokens per sequence, memory [sequences][Hkv][capacity][D]). Keys and
 * values are stored as F32, BF16 or F16 (converted on append with round-to-nearest-even,
 * converted back in the decoding kernel, accumulated in fp32). Slots that hold no token are
 * kept NaN, so no result can depend on them. Opaque; create and destroy it with the
 * functions below. Not thread-safe for concurrent modification; attn_decode only reads it.
 */
typedef struct attn_kv_cache attn_kv_cache;

typedef struct attn_kv_cache_config {
    int64_t sequences; /* B >= 1 */
    int64_t kv_heads;  /* Hkv >= 1 */
    int64_t key_dim;   /* Dk >= 1 */
    int64_t value_dim; /* Dv >= 1 */
    /* Nonzero: values are not stored; the value of a token is the first Dv (<= Dk) elements
       of its key. This is MLA's latent cache (key = [c_KV ; k_R], value = c_KV). */
    int values_in_keys;
    attn_dtype dtype;  /* ATTN_DTYPE_F32, ATTN_DTYPE_BF16 or ATTN_DTYPE_F16 */
    int64_t capacity;  /* most tokens one sequence may hold, >= 1 */
    int64_t page_size; /* tokens per page, >= 1; 0 = contiguous (page_size = capacity) */
    /* Pages in the pool; 0 = enough for every sequence at full capacity,
       sequences * ceil(capacity / page_size). Fewer pages overcommit the pool (sequences
       share it; appending when it is exhausted is ATTN_ERROR_CAPACITY). */
    int64_t page_count;
    /* RoPE applied to keys at append time, at each token's absolute position (its index in
       its sequence): rotary_dim 0 = off, else even, 2..Dk (the first rotary_dim dims). */
    int64_t rope_dim;
    attn_rope_layout rope_layout;
    double rope_base;  /* 0 = 10000 */
} attn_kv_cache_config;

/* A config with every size 0 (to be filled in), F32 storage, contiguous layout, no RoPE. */
attn_kv_cache_config attn_kv_cache_config_default(void);

/* Allocates a cache (every sequence empty). Errors: sizes out of range (the message names the
 * field), an unsupported dtype, values_in_keys with Dv > Dk, size overflow, out of memory. */
attn_status attn_kv_cache_create(const attn_kv_cache_config *config, attn_kv_cache **cache,
                                 attn_error *error);

/* Frees the cache. NULL is allowed. */
void attn_kv_cache_destroy(attn_kv_cache *cache);

/*
 * Appends T tokens to each of the sequences first_sequence .. first_sequence + n - 1:
 *   k [n, T, Hkv, Dk] F32 (any strides), v [n, T, Hkv, Dv] F32 (NULL when values_in_keys).
 * Sequence s's new tokens get positions length(s) .. length(s) + T - 1 (RoPE uses them).
 * All or nothing: ATTN_ERROR_CAPACITY (nothing written) when a sequence would exceed its
 * capacity or the page pool cannot supply the pages needed; never an overflow.
 */
attn_status attn_kv_cache_append(attn_kv_cache *cache, int64_t first_sequence,
                                 const attn_tensor *k, const attn_tensor *v, attn_error *error);

/* Shortens `sequence` to `length` tokens (0 <= length <= its current length); pages no longer
 * used by any sequence return to the pool. */
attn_status attn_kv_cache_truncate(attn_kv_cache *cache, int64_t sequence, int64_t length,
                                   attn_error *error);

/* Empties every sequence and returns every page to the pool. */
void attn_kv_cache_reset(attn_kv_cache *cache);

/*
 * Makes the empty sequence `destination` start with the first `length` tokens of `source`
 * (a common prompt prefix): full pages are shared (reference counted, no copy); a partial
 * last page is copied. A shared page is copied before either sequence writes into it.
 * Errors: destination not empty, length > length(source), pool exhausted (CAPACITY).
 */
attn_status attn_kv_cache_share_prefix(attn_kv_cache *cache, int64_t source,
                                       int64_t destination, int64_t length, attn_error *error);

/* Tokens held by `sequence` (-1 when cache is NULL or sequence out of range). */
int64_t attn_kv_cache_length(const attn_kv_cache *cache, int64_t sequence);

/* The block table of `sequence`: *pages points to ceil(length / page_size) page indices owned
 * by the cache (valid until the next modification). */
attn_status attn_kv_cache_block_table(const attn_kv_cache *cache, int64_t sequence,
                                      const int32_t **pages, int64_t *page_count,
                                      attn_error *error);

/* Pages currently free in the pool (-1 when cache is NULL). */
int64_t attn_kv_cache_free_pages(const attn_kv_cache *cache);

/* Bytes of K/V storage per token (all Hkv heads of one sequence, this layer):
 * Hkv * (Dk + (values_in_keys ? 0 : Dv)) * sizeof(dtype). 0 for an invalid config. */
size_t attn_kv_cache_bytes_per_token(const attn_kv_cache_config *config);

/* Total bytes the cache holds allocated: the page pool plus its tables. */
size_t attn_kv_cache_footprint_bytes(const attn_kv_cache *cache);

/*
 * Copies tokens [first_token, first_token + T) of `sequence` out of the cache as float32:
 *   k [1, T, Hkv, Dk] F32 (written), v [1, T, Hkv, Dv] F32 (written; may be NULL).
 * With values_in_keys, v receives the first Dv elements of each key.
 */
attn_status attn_kv_cache_read(const attn_kv_cache *cache, int64_t sequence, int64_t first_token,
                               attn_tensor *k, attn_tensor *v, attn_error *error);

/*
 * Attention of new queries against everything in the cache (append the new tokens' K/V
 * first): for each sequence b, O[b] = attention(q[b], K_b, V_b) where K_b, V_b are its
 * length(b) cached tokens. The result equals attn_forward on those K/V with the same options
 * (use alignment ATTN_ALIGN_BOTTOM_RIGHT + causal for generation: query i sits at position
 * length(b) - Tq + i); window, ALiBi, soft-cap, custom scale, query_lengths, masks and biases
 * (logical Tk = the longest sequence's length) all apply.
 *   q   [B, Tq, Hq, Dk] F32 (B = config.sequences, Hq a multiple of Hkv)
 *   out [B, Tq, Hq, Dv] F32 (written);  lse [B, Hq, Tq] F32 (written; may be NULL)
 * Split-KV (flash-decoding): each sequence's keys are cut into splits of options->tile_k
 * tokens, fixed independently of the thread count (0 = automatic: at most 1024 tokens, and
 * fewer when B x Hkv < 16 so that there are about 16 tasks, a multiple of 64 tokens; it
 * depends only on the cache's lengths, B and Hkv); each (sequence, KV head, split) is one
 * task that reads its pages once for all Hq / Hkv query heads of the group and all Tq rows,
 * and the partial (O, LSE) are merged exactly as attn_merge does, in split order, so the
 * output is bitwise identical for any thread count. options->kernel picks the kernel table
 * (generic, AVX2 or AVX-512; AUTO = the fastest this CPU runs).
 * Errors: as attn_forward, plus options->key_lengths / key_positions set (the cache defines
 * them: INVALID_ARGUMENT), an empty row under ATTN_EMPTY_ROWS_ERROR (e.g. a sequence with
 * fewer tokens than Tq under bottom-right causality), memory limit.
 */
attn_status attn_decode(const attn_kv_cache *cache, const attn_tensor *q,
                        const attn_options *options, attn_tensor *out, attn_tensor *lse,
                        attn_error *error);

/* The naive oracle of attn_decode: reads each sequence back as float32 (attn_kv_cache_read)
 * and calls attn_reference_forward on it, one sequence at a time. Slow; for tests. */
attn_status attn_reference_decode(const attn_kv_cache *cache, const attn_tensor *q,
                                  const attn_options *options, attn_tensor *out,
                                  attn_tensor *lse, attn_error *error);

/* ======================================================================================
 * Section: MLA (multi-head latent attention, DeepSeek-V2)
 * ====================================================================================== */

/* RMSNorm: y[n][i] = weight[i] * x[n][i] / sqrt(mean_i(x[n][i]^2) + eps), accumulated in
 * double. x, y float[rows][dim] (row-major; y may equal x); weight float[dim]; eps >= 0. */
attn_status attn_rms_norm(const float *x, int64_t rows, int64_t dim, const float *weight,
                          float eps, float *y, attn_error *error);

/* Sizes of one MLA layer (math reference §5; DeepSeek-V2: hidden 5120, heads 128,
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
attn_status attn_mla_cache_config(const attn_mla_config *config, int64_t sequences,
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
 * CBLAS sgemm (projections via attn_linear_forward). Errors: shapes, missing weights, cache
 * capacity (nothing appended), sizes beyond CBLAS's int (OVERFLOW), as attn_decode /
 * attn_forward.
 */
attn_status attn_mla_forward(const attn_mla_config *config, const attn_mla_weights *weights,
                             attn_kv_cache *cache, const attn_tensor *hidden, attn_mla_path path,
                             attn_tensor *out, attn_error *error);

/* ======================================================================================
 * Section: ring attention token layouts (sequence sharding; MPI-free, used by attn_mpi.h)
 * ====================================================================================== */

/*
 * How the T tokens of a global sequence are spread over P ranks for ring attention. Chunks
 * of uneven size are allowed: splitting n tokens into c chunks gives the first (n mod c)
 * chunks one token more than the others (floor(n / c) + 1 vs floor(n / c)).
 *  CONTIGUOUS: P chunks; rank r holds chunk r. Causal load is unbalanced (the last rank does
 *              about twice the average work).
 *  ZIGZAG:     2P chunks; rank r holds chunk r followed by chunk 2P-1-r (ring-flash-attention's
 *              zigzag): every rank gets one early and one late chunk, balancing causal work.
 *  STRIPED:    token t lives on rank t mod P (Striped Attention, Brandon et al. 2023): local
 *              token a of rank r is global token a*P + r.
 * In every layout a rank's local tokens are in increasing global order, and every rank must
 * hold at least one token (T >= P).
 */
typedef enum attn_ring_layout_kind {
    ATTN_RING_LAYOUT_CONTIGUOUS = 0,
    ATTN_RING_LAYOUT_ZIGZAG = 1,
    ATTN_RING_LAYOUT_STRIPED = 2
} attn_ring_layout_kind;

typedef struct attn_ring_layout {
    attn_ring_layout_kind kind;
    int64_t sequence_length; /* T, the global number of tokens: T >= rank_count */
    int rank_count;          /* P >= 1 */
} attn_ring_layout;

/* Name of a layout kind ("contiguous", "zigzag", "striped"); "unknown" otherwise. */
const char *attn_ring_layout_name(attn_ring_layout_kind kind);

/* Number of tokens rank `rank` holds (>= 1). Errors: bad layout or rank out of [0, P). */
attn_status attn_ring_layout_local_length(const attn_ring_layout *layout, int rank,
                                          int64_t *local_length, attn_error *error);

/* Global position of each of the rank's local tokens, increasing.
 * positions: int64[local_length] (written). */
attn_status attn_ring_layout_positions(const attn_ring_layout *layout, int rank,
                                       int64_t *positions, attn_error *error);

/*
 * Copies the rank's tokens out of a global tensor: local[..., a, ...] = global[..., pos(a), ...]
 * along dimension `sequence_dim` (1 for Q/K/V/O [B, T, H, D], 2 for LSE [B, H, T]).
 *   global: F32, rank 3 or 4, shape[sequence_dim] = T
 *   local:  F32, same rank, shape[sequence_dim] = local_length, other dims equal (written)
 * Any strides. Errors: NULL, dtype/rank/shape disagreement, bad layout or rank.
 */
attn_status attn_ring_shard(const attn_ring_layout *layout, int rank, int sequence_dim,
                            const attn_tensor *global, attn_tensor *local, attn_error *error);

/* The inverse of attn_ring_shard: writes the rank's local tokens into their global places
 * (global[..., pos(a), ...] = local[..., a, ...]); other tokens of `global` are untouched,
 * so calling it for every rank reassembles the sequence. Same arguments and errors. */
attn_status attn_ring_gather(const attn_ring_layout *layout, int rank, int sequence_dim,
                             const attn_tensor *local, attn_tensor *global, attn_error *error);

/* ======================================================================================
 * Section: NumPy .npy files
 * ====================================================================================== */

/*
 * An array read from a .npy file. The library allocates `data` (free with attn_npy_free).
 * Only little-endian, C-order arrays of dtype <f4, <f8, |b1 / |u1, <i4, <i8, <f2 are read;
 * Fortran order, big-endian data, object arrays, rank > 4 and truncated files are errors.
 */
typedef struct attn_npy_array {
    attn_dtype dtype;
    int rank;                       /* 0..4; a 0-d array has rank 0 and one element */
    int64_t shape[ATTN_MAX_RANK];
    void *data;
    size_t byte_count;
} attn_npy_array;

/* Reads `path`. Errors: ATTN_ERROR_IO (missing, unreadable, truncated), ATTN_ERROR_FORMAT
 * (bad magic, malformed header, Fortran order, unsupported dtype or rank), overflow, memory
 * (memory_limit_bytes > 0 caps the data size). The message names the path. */
attn_status attn_npy_read(const char *path, size_t memory_limit_bytes, attn_npy_array *array,
                          attn_error *error);

/* Parses a .npy image already in memory (the reader's core; used by the fuzzer). */
attn_status attn_npy_parse(const void *bytes, size_t byte_count, size_t memory_limit_bytes,
                           attn_npy_array *array, attn_error *error);

/* Writes a C-order .npy (format 1.0). The file is written to a temporary name and renamed,
 * so a failure never leaves a partial file at `path`. `data` is contiguous. */
attn_status attn_npy_write(const char *path, attn_dtype dtype, int rank, const int64_t *shape,
                           const void *data, attn_error *error);

/* Frees an array's data and zeroes it. NULL is allowed. */
void attn_npy_free(attn_npy_array *array);

/* ======================================================================================
 * Section: safetensors files
 * ====================================================================================== */

/*
 * safetensors (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}   (optional metadata, strings only)
 * padded with spaces, then the data buffer; offsets are relative to the buffer's start.
 * The reader is strict: every tensor's [begin, end) lies in the buffer, end - begin equals
 * numel × dtype size, tensors neither overlap nor leave holes (the buffer is covered exactly),
 * names are unique, JSON is well formed (no unknown fields, no trailing garbage other than
 * spaces), ranks are 0..4. Dtypes read: F32, F16, BF16, F64, I32, I64, BOOL; others are
 * ATTN_ERROR_FORMAT naming the tensor and the dtype.
 */
#define ATTN_SAFETENSORS_NAME_CAPACITY 256 /* longest name + 1; longer names: FORMAT error */

/* One tensor: a parsed file's entry, or one to write. */
typedef struct attn_safetensors_tensor {
    char name[ATTN_SAFETENSORS_NAME_CAPACITY]; /* NUL-terminated UTF-8 */
    attn_dtype dtype;
    int rank;                     /* 0..4 (0: a scalar of one element) */
    int64_t shape[ATTN_MAX_RANK]; /* each >= 0 */
    const void *data;             /* little-endian elements, C order; not necessarily aligned */
    size_t byte_count;            /* numel × dtype size (ignored by the writer) */
} attn_safetensors_tensor;

/* A metadata entry ("__metadata__"): NUL-terminated strings. */
typedef struct attn_safetensors_metadata {
    char key[ATTN_SAFETENSORS_NAME_CAPACITY];
    char value[ATTN_SAFETENSORS_NAME_CAPACITY]; /* longer values: FORMAT error */
} attn_safetensors_metadata;

/*
 * A parsed file. `tensors` and `metadata` are allocated by the parser; the tensors' `data`
 * point into `bytes`, which attn_safetensors_read owns (copy of the file) and
 * attn_safetensors_parse borrows (the caller's buffer must outlive the struct).
 * attn_safetensors_free releases what the struct owns.
 */
typedef struct attn_safetensors_file {
    int64_t tensor_count;
    attn_safetensors_tensor *tensors; /* in file order of their data offsets */
    int64_t metadata_count;
    attn_safetensors_metadata *metadata;
    const void *bytes;  /* the whole file image */
    size_t byte_count;
    void *owned_bytes;  /* == bytes when the struct owns the image, else NULL */
} attn_safetensors_file;

/* Parses a file image in memory (the reader's core; the fuzzer's entry point). Errors:
 * ATTN_ERROR_FORMAT (message names the byte offset or the tensor), overflow, memory
 * (memory_limit_bytes > 0 caps the image size). On error `file` is left empty. */
attn_status attn_safetensors_parse(const void *bytes, size_t byte_count,
                                   size_t memory_limit_bytes, attn_safetensors_file *file,
                                   attn_error *error);

/* Reads and parses `path`; ATTN_ERROR_IO when it cannot be read. Messages name the path. */
attn_status attn_safetensors_read(const char *path, size_t memory_limit_bytes,
                                  attn_safetensors_file *file, attn_error *error);

/* Frees what `file` owns and zeroes it. NULL is allowed. */
void attn_safetensors_free(attn_safetensors_file *file);

/* The tensor called `name`, or NULL. */
const attn_safetensors_tensor *attn_safetensors_find(const attn_safetensors_file *file,
                                                     const char *name);

/*
 * Copies tensor `name` into out float[numel], converting F32, BF16 or F16 to float32 (exact).
 * The stored shape must equal shape[0..rank) exactly. Errors name the tensor: missing
 * (ATTN_ERROR_FORMAT), wrong rank or shape (ATTN_ERROR_SHAPE_MISMATCH, both shapes given),
 * a dtype that is not a float type (ATTN_ERROR_FORMAT).
 */
attn_status attn_safetensors_get_f32(const attn_safetensors_file *file, const char *name,
                                     int rank, const int64_t *shape, float *out,
                                     attn_error *error);

/*
 * Writes `tensor_count` tensors (their data contiguous, in the order given) and optional
 * metadata (NULL / 0 for none) to `path`, via a temporary file renamed into place, so a
 * failure never leaves a partial file at `path`. Names must be unique, non-empty and not
 * "__metadata__". Errors: ATTN_ERROR_IO, ATTN_ERROR_INVALID_ARGUMENT naming the tensor.
 */
attn_status attn_safetensors_write(const char *path, const attn_safetensors_tensor *tensors,
                                   int64_t tensor_count,
                                   const attn_safetensors_metadata *metadata,
                                   int64_t metadata_count, attn_error *error);

/*
 * The tensors of an attention layer under Hugging Face names, each prefixed by `prefix`
 * ("" or e.g. "model.layers.0.self_attn."): q_proj.weight, k_proj.weight, v_proj.weight,
 * o_proj.weight, and with biases q_proj.bias, k_proj.bias, v_proj.bias, o_proj.bias.
 * entries: room for 8; *count receives 4 plus one per bias the layer has (4..8). The entries
 * point at the layer's parameters.
 */
attn_status attn_layer_safetensors_entries(const attn_layer *layer, const char *prefix,
                                           attn_safetensors_tensor *entries, int *count,
                                           attn_error *error);

/* Saves a layer's tensors (names as above) to `path`, atomically. */
attn_status attn_layer_save_safetensors(const attn_layer *layer, const char *prefix,
                                        const char *path, attn_error *error);

/* Loads a created layer's parameters from a parsed file (names as above, F32/BF16/F16).
 * Errors name the missing or misshapen tensor; on error the layer may be partly written. */
attn_status attn_layer_load_safetensors(attn_layer *layer, const char *prefix,
                                        const attn_safetensors_file *file, attn_error *error);

/* ======================================================================================
 * Section: model families (Hugging Face checkpoints: config.json + safetensors)
 * ====================================================================================== */

/*
 * The attention layers of a checkpoint, named as its Hugging Face safetensors name them
 * (P = the attention module's prefix, e.g. "encoder.layer.3.attention.", "h.3.attn.",
 * "model.layers.3.self_attn."):
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
attn_status attn_model_family_parse(const char *model_type, attn_model_family *family,
                                    attn_error *error);

/* The family's name ("bert", "gpt2", "llama", "qwen2", "deepseek_v2"; "unknown"). */
const char *attn_model_family_name(attn_model_family family);

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
attn_status attn_model_config_parse(const char *json, size_t length, attn_model_config *config,
                                    attn_error *error);

/* Reads `path`: a config.json, or a checkpoint folder holding one. ATTN_ERROR_IO when it
 * cannot be read; otherwise as attn_model_config_parse, messages naming the path. */
attn_status attn_model_config_read(const char *path, attn_model_config *config,
                                   attn_error *error);

/* The attn_layer_config of one attention layer of the model (sizes, per-projection biases,
 * RoPE). Errors: family DEEPSEEK_V2 (use attn_model_mla_config), sizes out of range. */
attn_status attn_model_layer_config(const attn_model_config *model, attn_layer_config *layer,
                                    attn_error *error);

/*
 * The attention prefix of layer `index` (0-based) in `file`: the family's module name
 * ("encoder.layer.N.attention.", "h.N.attn.", "layers.N.self_attn.") under the first root that
 * names a tensor of it in the file (BERT "", "bert."; GPT-2 "", "transformer."; others
 * "model.", ""). prefix: char[capacity]. Errors: no such layer (FORMAT, naming what was looked
 * for), capacity too small.
 */
attn_status attn_model_layer_prefix(const attn_model_config *model,
                                    const attn_safetensors_file *file, int64_t index,
                                    char *prefix, size_t capacity, attn_error *error);

/*
 * Loads the attention parameters under `prefix` (as above) into a created layer (its config
 * gives the shapes and biases) by `family`'s names, converting F32/BF16/F16 to float32 and
 * GPT-2's Conv1D [in][out] layout (fused q | k | v) to nn.Linear [out][in]. Errors name the
 * tensor: missing, misshapen, a bias in the file the layer lacks or the reverse. On error the
 * layer may be partly written. DEEPSEEK_V2 is not an attn_layer (attn_model_load_mla).
 */
attn_status attn_layer_load_family(attn_layer *layer, attn_model_family family,
                                   const char *prefix, const attn_safetensors_file *file,
                                   attn_error *error);

/* attn_model_layer_config + attn_layer_create + attn_model_layer_prefix +
 * attn_layer_load_family: layer `index` of the model, ready to run. On error nothing is
 * left allocated (layer zeroed). */
attn_status attn_model_load_layer(const attn_model_config *model,
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
attn_status attn_model_mla_config(const attn_model_config *model, attn_mla_config *mla,
                                  attn_error *error);

/* Loads MLA layer `index` of a DeepSeek-V2 checkpoint (names above, HF layouts, which
 * attn_mla_weights shares). On error nothing is left allocated. */
attn_status attn_model_load_mla(const attn_model_config *model,
                                const attn_safetensors_file *file, int64_t index,
                                attn_mla_layer *layer, attn_error *error);

/* Frees an MLA layer's weights and zeroes it. NULL is allowed. */
void attn_mla_layer_destroy(attn_mla_layer *layer);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
