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
 * combine with `causal` for the autoregressive forms. d = pq(i) - pk(j) below. */
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

    /* Explicit absolute positions (int64[Tq] / int64[Tk], shared by all batches); when
       given they replace the alignment rule for causal, window, ALiBi and patterns. */
    const int64_t *query_positions;
    const int64_t *key_positions;

    /* Global tokens (Longformer): query row g attends to every key and key column g is
       attended by every query (still subject to causal, mask, lengths, block layout).
       Indices are query indices for rows and key indices for columns; int64[count]. */
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
       default, else the tile sizes to use (results are the same up to rounding of the
       reduction order within a row; bitwise identical across thread counts regardless). */
    int num_threads;
    int tile_q;
    int tile_k;
    attn_kernel_choice kernel;

    /* Refuse (ATTN_ERROR_MEMORY_LIMIT) a call whose working memory would exceed this many
       bytes; 0 = no limit. */
    size_t memory_limit_bytes;
} attn_options;

/* Options with every feature off: default scale, no mask, error on empty rows, auto kernel. */
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
 * O(tile) per thread (never Tq x Tk), tiles with no allowed pair skipped.
 *   q   [B, Tq, Hq, Dk] F32        k [B, Tk, Hkv, Dk] F32      v [B, Tk, Hkv, Dv] F32
 *   out [B, Tq, Hq, Dv] F32 (written)
 *   lse [B, Hq, Tq]     F32 (written; may be NULL)
 * Errors: NULL pointers, non-positive sizes, Hq % Hkv != 0, K/V disagreeing on B or Tk,
 * options out of range, mask/bias shapes that do not broadcast, overflow, an empty row under
 * ATTN_EMPTY_ROWS_ERROR (the message names b, h, i), memory limit.
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
 *   dbias: when not NULL and options->bias is set, F32 with the bias's logical shape
 *   [B|1, Hq|1, Tq, Tk] (written; broadcast dimensions are summed).
 * GQA/MQA: dk and dv of a KV head are the sums over its query heads. Empty rows (LSE = -inf)
 * get zero gradients. Deterministic: bitwise identical for any thread count.
 */
attn_status attn_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                          const attn_tensor *out, const attn_tensor *lse,
                          const attn_tensor *dout, const attn_options *options, attn_tensor *dq,
                          attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                          attn_error *error);

/* The naive backward (dense P per (b, h), double accumulation): the tests' oracle. */
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

/* Section: attention layers — declarations follow (issue: training). */

/* Section: KV cache and decoding — declarations follow (issue: inference). */

/* Section: MLA — declarations follow (issue: inference). */

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

/* Section: safetensors files — declarations follow (issue: training). */

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
