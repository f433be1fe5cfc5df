/*
 * attn.h — the core public header of libattn, an exact and fast attention library in C.
 *
 * This header declares the attention call itself: status and errors, the version, tensors
 * (strided views), what to compute (attn_options) and how to run it (attn_execution), the
 * forward and backward passes with their naive references, the exact merge of partial
 * results, KV caches and decoding, and which CPU kernels this build and machine offer.
 * The other public headers build on it:
 *   attn_layers.h  positional encodings, embeddings, linear maps, attention layers, Adam,
 *                  RMSNorm and MLA (multi-head latent attention)
 *   attn_io.h      .npy and safetensors files
 *   attn_ring.h    ring attention token layouts (sequence sharding, no MPI needed)
 *   attn_mpi.h     ring attention over MPI (libattn_mpi)
 *
 * Conventions (docs/conventions.md states them in full, docs/attention-math.md the maths):
 *  - Tensors are strided views whose logical dimension order is fixed: Q, K, V and O are
 *    [B, T, H, D] (batch, sequence, heads, head dim). Strides are in elements and may be any
 *    value (including 0 for broadcasting where documented), so [B, H, T, D] memory is just a
 *    view with strides {H*T*D, D, T*D, 1}.
 *  - Q [B, Tq, Hq, Dk], K [B, Tk, Hkv, Dk], V [B, Tk, Hkv, Dv], O [B, Tq, Hq, Dv], LSE [B, Hq, Tq].
 *    Hq must be divisible by Hkv; query head h uses KV head h / (Hq / Hkv).
 *  - Scores, softmax and accumulators are float32; LSE is the natural-log log-sum-exp of the
 *    final logits of a row (scale, soft-cap and bias included). A row with no allowed key has
 *    LSE = -inf when the empty-row policy allows it.
 *  - Causal alignment is always named: ATTN_ALIGN_BOTTOM_RIGHT (FlashAttention >= 2.1, query i
 *    sits at position i + Tk - Tq) or ATTN_ALIGN_TOP_LEFT (PyTorch is_causal, position i).
 *  - Boolean masks: nonzero = allowed.
 *  - Results are bitwise identical for any thread count.
 *  - No function aborts, exits or prints. Each returns an attn_status; when the caller passes
 *    an attn_error, its message names the argument and the bad value. Sizes are checked
 *    before anything is allocated.
 *  - Every function may be called from several application threads at once on different
 *    outputs (a KV cache may be read by several attn_decode calls at once, but not modified
 *    while it is read).
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

/* ATTN_API marks every function the shared library exports; everything else in it is hidden
 * (the library is built with -fvisibility=hidden). */
#if defined(_WIN32)
#define ATTN_API
#elif defined(__GNUC__) || defined(__clang__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* ======================================================================================
 * Section: status and errors
 * ====================================================================================== */

/* Every fallible function returns one of these. ATTN_OK is 0. */
typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_ERROR_NULL_ARGUMENT = 1,     /* a required pointer was NULL */
    ATTN_ERROR_INVALID_ARGUMENT = 2,  /* a value out of range (size <= 0, scale <= 0, ...) */
    ATTN_ERROR_SHAPE_MISMATCH = 3,    /* tensors that must agree do not (B, Tk, heads, dims) */
    ATTN_ERROR_OVERFLOW = 4,          /* a size product does not fit in int64 / size_t, or a
                                         result does not fit a 16-bit output dtype */
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
ATTN_API const char *attn_status_name(attn_status status);

/* The library version as "MAJOR.MINOR.PATCH". */
ATTN_API const char *attn_version(void);

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
    ATTN_DTYPE_F64 = 6,  /* IEEE float64 */
    /* KV cache storage only (attn_kv_cache_config.dtype, and the k_cache / v_cache tensors
     * of a caller-owned cache, attn_kv_cache_view), never another tensor's dtype; see
     * docs/inference.md "Quantized KV cache" for the rounding and the error they cost: */
    ATTN_DTYPE_Q8 = 7,       /* int8, symmetric, one float32 scale per (token, KV head):
                                x ~ scale * q, scale = max|x| / 127, q = round(x / scale) */
    ATTN_DTYPE_FP8_E4M3 = 8, /* 8-bit float, 4 exponent / 3 mantissa bits, bias 7, no
                                infinities (the "e4m3fn" format), largest 448; saturating */
    ATTN_DTYPE_FP8_E5M2 = 9  /* 8-bit float, 5 exponent / 2 mantissa bits, bias 15 (the top
                                byte of an IEEE half), largest finite 57344; saturating */
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
ATTN_API size_t attn_dtype_size(attn_dtype dtype);

/* A C-order (row-major, contiguous) view: the last dimension has stride 1. rank 1..4. */
ATTN_API attn_tensor attn_tensor_contiguous(void *data, attn_dtype dtype, int rank,
                                            const int64_t *shape);

/* Shorthand for a contiguous float32 [d0, d1, d2, d3] view. */
ATTN_API attn_tensor attn_tensor_f32_4d(float *data, int64_t d0, int64_t d1, int64_t d2,
                                        int64_t d3);

/*
 * A float32 [B, T, H, D] view of memory laid out as [B, H, T, D] (contiguous in that order):
 * strides {H*T*D, D, T*D, 1}. The result is a view, not a copy.
 */
ATTN_API attn_tensor attn_tensor_f32_bhtd(float *data, int64_t B, int64_t T, int64_t H, int64_t D);

/*
 * Copies `source` into `destination` element by element, converting between F32, BF16 and
 * F16 (any strides; both of the same rank 1..4 and shape; the two must not overlap). Widening
 * is exact; narrowing rounds to nearest, ties to even (subnormals kept), NaN stays NaN and
 * ±inf stays ±inf. Errors: NULL, a dtype other than the three, rank or shape disagreement
 * (INVALID_ARGUMENT / SHAPE_MISMATCH), and a finite value that does not fit the destination
 * type (fp16: |x| >= 65520; ATTN_ERROR_OVERFLOW naming the index and the value) — checked
 * before anything is written, so on any error `destination` is untouched.
 */
ATTN_API attn_status attn_tensor_convert(const attn_tensor *source, attn_tensor *destination,
                                attn_error *error);

/*
 * Reorders the dimensions of a view: result.shape[i] = t.shape[order[i]] (same for strides).
 * Returns ATTN_ERROR_INVALID_ARGUMENT if `order` is not a permutation of 0..rank-1.
 */
ATTN_API attn_status attn_tensor_permute(const attn_tensor *t, const int *order,
                                         attn_tensor *result, attn_error *error);

/* Number of elements (product of the shape); -1 if the product overflows int64. */
ATTN_API int64_t attn_tensor_numel(const attn_tensor *t);

/* ======================================================================================
 * Section: attention options (what to compute) and execution (how to run it)
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

/* Which implementation of the inner kernels to use (forward, backward and decoding). */
typedef enum attn_kernel_choice {
    ATTN_KERNEL_AUTO = 0,    /* the fastest this CPU supports */
    ATTN_KERNEL_GENERIC = 1, /* portable C */
    ATTN_KERNEL_AVX2 = 2,    /* AVX2 + FMA + F16C; ATTN_ERROR_UNSUPPORTED if the CPU lacks it */
    ATTN_KERNEL_AVX512 = 3,  /* AVX-512F; ATTN_ERROR_UNSUPPORTED if the CPU lacks it */
    ATTN_KERNEL_AVX512_BF16 = 4, /* AVX-512 plus AVX512-BF16 and F16C: bf16 operands run on
                                    VDPBF16PS tiles when this is asked for by name (AUTO, which
                                    may select it, widens bf16 to fp32 instead: faster where
                                    VDPBF16PS issues at half the FMA rate); fp32 and fp16 run
                                    the AVX512 kernels */
    ATTN_KERNEL_AMX = 5      /* AVX512_BF16 plus AMX tiles (TDPBF16PS) for bf16 operands
                                (also under AUTO); ATTN_ERROR_UNSUPPORTED unless CPUID, XCR0
                                and the OS's XTILEDATA permission allow AMX */
} attn_kernel_choice;

#define ATTN_OPTIONS_VERSION 3 /* the layout of attn_options below (1: without `sinks`,
                                  2: without dropout) */

/*
 * What one attention call computes, apart from the tensors. Zero means "off" or "default" in
 * every field, so a zero-initialised struct (attn_options o = {0};) is valid and means plain
 * scaled dot-product attention, softmax(q k^T / sqrt(Dk)) v; so does passing NULL. Set only
 * what you need. Unless stated, a pointer member may be NULL (= feature off) and the caller
 * keeps ownership of what it points to for the duration of the call. How the call runs
 * (threads, tiles, kernels, memory) is attn_execution, never part of these options.
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
    /* 0 or ATTN_OPTIONS_VERSION: the layout of this struct (other values are
       ATTN_ERROR_INVALID_ARGUMENT, so a later layout is never misread). */
    int version;

    /* Scale: 1/sqrt(Dk) unless custom_scale != 0, then `scale` (finite, > 0). */
    int custom_scale;
    float scale;

    attn_alignment alignment; /* required by causal, window, ALiBi and patterns */
    int causal;               /* nonzero: pk(j) <= pq(i) */

    /* FlashAttention window, applied only when `window` is nonzero:
       pq(i) - window_left <= pk(j) <= pq(i) + window_right; -1 = unbounded on that side;
       values below -1 are an error. window = 0: no window, whatever window_left / right
       hold (so a zero-initialised struct has none). */
    int window;
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

    /* version 2: */
    /* Attention sinks (gpt-oss's learned s_aux, StreamingLLM): sinks[h], float[Hq], is the
       logit of one more key column of query head h whose value vector is 0. It joins every
       row's softmax denominator, so O_i = sum_j e^{x_ij} v_j / (e^{sinks[h]} + sum_j e^{x_ij})
       and LSE_i = log(e^{sinks[h]} + sum_j e^{x_ij}), in the logit space above (after scale,
       soft-cap and bias; no mask applies to it). Each finite, or -inf for no sink on that
       head; NULL = none. A row with no allowed key is still empty (the empty-row policy
       applies); under ZERO its O is 0 and its LSE sinks[h]. Padding rows stay O = 0,
       LSE = -inf. The sinks' gradient: attn_sinks_backward. */
    const float *sinks;
    /* Sink tokens (StreamingLLM): the keys at positions [0, sink_tokens) are never cut off
       by the window or the pattern (they are global key columns: still subject to causal,
       mask, lengths and block layout). 0 = none; >= 0. */
    int64_t sink_tokens;

    /* version 3: */
    /* Attention dropout (training): each probability P_ij is dropped with probability
       dropout_p, the kept ones scaled by 1 / (1 - dropout_p), before P·V; LSE stays that of
       the whole softmax. 0 = off; else finite, in [0, 1); attn_forward, attn_backward and
       varlen only (decoding and the ring refuse it). The mask is a pure function of
       (dropout_seed, dropout_offset, b, h, i, j) (Philox-4x32-10: docs/attention-math.md
       §9.6), so the backward, given the same three fields, regenerates it, and results are
       the same for any thread count. Each row uses the counters dropout_offset +
       [0, ceil(Tk / 4)): advance the offset by that much (or change the seed) for a fresh
       mask. attn_dropout_mask writes the mask. Needs Tq, Tk < 2^32 and B x Hq < 2^32. */
    float dropout_p;
    uint64_t dropout_seed;
    uint64_t dropout_offset;
} attn_options;

/* Plain attention, with the version set: every field zero except version =
 * ATTN_OPTIONS_VERSION and window_left = window_right = -1 (so switching `window` on and
 * setting one side leaves the other unbounded). Equivalent to a zero-initialised struct. */
ATTN_API attn_options attn_options_default(void);

#define ATTN_EXECUTION_VERSION 1 /* the layout of attn_execution below */
#define ATTN_MAX_THREADS 1024     /* the most threads a call may ask for */

/*
 * How a call runs; never changes what it computes beyond float rounding. NULL, or a
 * zero-initialised struct, means the defaults in every field. Results are bitwise identical
 * for any num_threads; tile sizes and kernels change only the rounding of the reduction
 * order within a row.
 */
typedef struct attn_execution {
    int version;     /* 0 or ATTN_EXECUTION_VERSION (other values: INVALID_ARGUMENT) */
    /* The most threads the call may use: 0 = the default (OMP_NUM_THREADS when set, else the
       CPUs this process may run on), else 1..ATTN_MAX_THREADS. A call uses fewer when its
       work is small (one thread for a tiny call); threads are attn's own pool, safe across
       fork() (docs/architecture.md, "Threads"). */
    int num_threads;
    /* Tiles: 0 = tuned default, else 1..4096: tile_q query rows per head, tile_k keys per
       tile. For attn_decode tile_k is the split-KV split size in tokens (0 = automatic). */
    int tile_q;
    int tile_k;
    attn_kernel_choice kernel; /* 0 = ATTN_KERNEL_AUTO; UNSUPPORTED if the CPU lacks it */
    /* Refuse (ATTN_ERROR_MEMORY_LIMIT, before allocating anything) a call whose working
       memory would exceed this many bytes; 0 = no limit. */
    size_t memory_limit_bytes;
} attn_execution;

/* The defaults: every field zero except version = ATTN_EXECUTION_VERSION. */
ATTN_API attn_execution attn_execution_default(void);

/* Tells attn whether another thread pool of this process keeps its workers spinning on the
 * cores between its parallel regions, as PyTorch's OpenMP threads do after every operator
 * (unless OMP_WAIT_POLICY=passive, which this call then respects): a helper thread of attn's
 * would share a core with one of them, so while `present` is nonzero a call takes a second
 * thread only for about a millisecond of work per thread (docs/architecture.md, "Threads").
 * attn.torch sets it when imported. Results never depend on it. Default: 0. */
ATTN_API void attn_set_spinning_neighbours(int present);

/* A parallel region of attn handed to another thread pool: the runner calls
 * body(body_context, w) exactly once for each w in [0, n), for some 1 <= n <= threads of its
 * choosing, on threads of its own (w = 0 may be the calling thread), and returns when every
 * one of them has returned. attn divides a region's work through shared counters, so any n
 * gives the same results. */
typedef void (*attn_region_body)(void *body_context, int worker);
typedef void (*attn_region_runner)(void *runner_context, int threads, attn_region_body body,
                                   void *body_context);

/* Runs attn's parallel regions on `runner` (NULL: attn's own worker pool, the default), for
 * example on the OpenMP threads of a framework that keeps them spinning between its
 * operators, so that attn's regions find those threads awake instead of competing with them
 * for the cores (attn.torch installs PyTorch's; docs/architecture.md, "Threads"). While a
 * runner is set, attn_set_spinning_neighbours no longer limits the threads of a call, the
 * runner's pool being those neighbours. A region opened inside a region runs on its caller
 * alone, as with the own pool. A forked child starts without a runner (the pool behind it is
 * not usable there) and uses attn's own pool until one is set again. */
ATTN_API void attn_set_region_runner(attn_region_runner runner, void *runner_context);

/* The kernel family `choice` selects on this CPU and build ("generic", "avx2", "avx512",
 * "avx512_bf16", "amx"; AUTO resolves to the fastest available), or NULL when it is not
 * available here or unknown. */
ATTN_API const char *attn_kernel_name(attn_kernel_choice choice);

/* 1 when this CPU and build can run `choice` (AUTO and GENERIC always), else 0. */
ATTN_API int attn_kernel_available(attn_kernel_choice choice);

/* How bf16 operands run under `choice` on this CPU: the name of the bf16 tile kernels
 * ("amx", "avx512bf16") when attn_forward computes bf16 on them, or NULL when it widens bf16
 * to fp32 at packing and runs the fp32 kernels (docs/precision.md), or
 * when `choice` is not available. */
ATTN_API const char *attn_kernel_bf16_tiles(attn_kernel_choice choice);

/* How fp16 operands run under `choice` on this CPU: "amx_fp16" when attn_forward computes
 * fp16 on the AMX-FP16 tiles (TDPFP16PS: the CPU has AMX-FP16, CPUID.(EAX=7,ECX=1):EAX bit
 * 21, Granite Rapids and later, and `choice` is AMX or AUTO resolving to it), or NULL when it
 * widens fp16 to fp32 at packing and runs the fp32 kernels, or when `choice` is not
 * available. */
ATTN_API const char *attn_kernel_f16_tiles(attn_kernel_choice choice);

/*
 * The standard ALiBi slopes for `num_heads` heads (Press et al.): for n a power of two,
 * 2^(-8k/n), k = 1..n; otherwise those of the largest power of two c < n followed by every
 * other slope of 2c. slopes: float[num_heads].
 */
ATTN_API attn_status attn_alibi_slopes(int num_heads, float *slopes, attn_error *error);

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
 *   q   [B, Tq, Hq, Dk]        k [B, Tk, Hkv, Dk]      v [B, Tk, Hkv, Dv]
 *   out [B, Tq, Hq, Dv] (written)
 *   lse [B, Hq, Tq]     F32 (written; may be NULL)
 * q, k, v and out are all F32, all BF16 or all F16 (docs/precision.md): 16-bit inputs are
 * read exactly; scores, softmax, statistics and the accumulator are fp32; P is rounded to the
 * operand type for P·V (the row sums use the unrounded P); O is rounded once when written. bf16
 * runs on bf16 tiles where they are faster (AMX; or asked for with ATTN_KERNEL_AVX512_BF16,
 * attn_kernel_bf16_tiles), else widened to fp32 at packing; fp16 runs on the AMX-FP16 tiles
 * where the CPU has them (attn_kernel_f16_tiles), else widened the same way.
 * Errors: NULL pointers, mixed or unsupported dtypes, a finite O beyond the range of a 16-bit
 * out (ATTN_ERROR_OVERFLOW naming the first such row; the other rows are written), non-positive sizes, Hq % Hkv != 0, K/V disagreeing on B or Tk,
 * options out of range, mask/bias shapes that do not broadcast, overflow, an empty row under
 * ATTN_EMPTY_ROWS_ERROR (the message names the first one in (b, h, i) order), memory limit
 * (the per-thread workspaces exceed execution->memory_limit_bytes), unsupported kernel,
 * an unknown options->version / execution->version, a zero stride on a dimension of size > 1
 * of out or lse (an output cannot broadcast), and out or lse sharing a byte with q, k,
 * v, the options' mask / bias / block_layout / arrays, or each other (INVALID_ARGUMENT naming
 * both tensors and their byte ranges, checked exactly on the strides' lattices before
 * anything is written: outputs interleaved with the inputs in one buffer without sharing a
 * byte are fine, and the inputs may overlap each other freely; docs/conventions.md "Outputs
 * never share memory with inputs or with each other").
 *   options   NULL = plain attention (as a zero-initialised struct)
 *   execution NULL = defaults (as a zero-initialised struct)
 * On error `out` and `lse` may have been partly written.
 */
ATTN_API attn_status attn_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const attn_options *options, attn_tensor *out, attn_tensor *lse,
                                  const attn_execution *execution, attn_error *error);

/*
 * The naive reference: materialises the Tq x Tk logits of one (b, h) at a time and
 * accumulates in double. Same arguments, conventions and errors as attn_forward (options NULL
 * = plain attention), F32 tensors only, without an execution part: single-threaded, no memory limit. It is the
 * specification a reader can follow line by line and the oracle of the tests; it is slow.
 */
ATTN_API attn_status attn_reference_forward(const attn_tensor *q, const attn_tensor *k,
                                            const attn_tensor *v, const attn_options *options,
                                            attn_tensor *out, attn_tensor *lse, attn_error *error);

/* ======================================================================================
 * Section: backward pass
 * ====================================================================================== */

/*
 * Gradients of attention by recomputation (FlashAttention-2): P is rebuilt tile by tile from
 * the forward's LSE, D = rowsum(dO * O), never a Tq x Tk buffer. Same options as the forward
 * (the call must use the options the forward used; NULL = plain attention). execution: as
 * attn_forward's (NULL = defaults); it may differ from the forward's.
 *   q, k, v, out, lse: as produced/consumed by attn_forward; dout [B, Tq, Hq, Dv]
 *   dq [B, Tq, Hq, Dk], dk [B, Tk, Hkv, Dk], dv [B, Tk, Hkv, Dv] (written, overwritten)
 *   q, k, v, out, dout, dq, dk, dv all F32, all BF16 or all F16 (lse, dbias F32): 16-bit
 *   inputs are widened exactly, the computation is the fp32 one, and dq, dk, dv are rounded
 *   once; a finite gradient beyond the 16-bit range is ATTN_ERROR_OVERFLOW (docs/precision.md)
 *   dbias: NULL, or (only when options->bias is set) F32 with exactly the bias's shape
 *   [B|1, Hq|1, Tq, Tk] (written; a size-1 dimension sums over B or Hq). ALiBi has no
 *   gradient. Outputs may use any strides but no zero stride on a dimension of size > 1,
 *   and may share no byte with q, k, v, out, lse, dout, the options' tensors and arrays, or
 *   each other (INVALID_ARGUMENT naming both and their byte ranges, nothing written;
 *   interleaved in one buffer without sharing a byte is fine, as in attn_forward).
 * With soft-cap c the chain rule dS * (1 - tanh^2(x / c)) is applied (x = scale * q.k).
 * GQA/MQA: dk and dv of a KV head are the sums over its query heads. Empty rows (LSE = -inf,
 * and padded query rows) get zero gradients; a NaN LSE (ATTN_EMPTY_ROWS_NAN) gives NaN.
 * Deterministic: bitwise identical for any thread count (one owner per output element, fixed
 * summation order, no atomics; see docs/backward.md). Working memory: B*Hq*Tq floats (D),
 * 1 to 4 partial sums of dQ (B*Hq*Tq*Dk floats each; their number depends on the shape and
 * the memory limit, never on the thread count) and a tile workspace per thread.
 * Errors: those of attn_forward's validation, plus NULL out / lse / dout, gradient shapes
 * that differ from the above (ATTN_ERROR_SHAPE_MISMATCH naming e.g. "dk.shape[1] (Tk)"),
 * dbias without options->bias, a broadcasting (zero-stride) output, the memory limit
 * (execution->memory_limit_bytes).
 */
ATTN_API attn_status attn_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                   const attn_tensor *out, const attn_tensor *lse,
                                   const attn_tensor *dout, const attn_options *options,
                                   attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                   attn_tensor *dbias, const attn_execution *execution,
                                   attn_error *error);

/*
 * The gradient of the sink logits (attn_options.sinks): for each query head h,
 *   dsinks[h] = - sum over b and the real query rows i of  e^{sinks[h] - LSE[b,h,i]} * D[b,h,i]
 * with D = rowsum(dO * O): the sink's probability times the row's D, as its value is 0.
 * out, lse, dout: as given to attn_backward (the forward's, computed with the sinks);
 * options: the forward's (sinks set; padding rows beyond query_lengths give nothing).
 * out and dout [B, Tq, Hq, Dv] of one dtype (F32, BF16 or F16), lse F32 [B, Hq, Tq];
 * dsinks: float[Hq], written. Summed in double in a fixed order (deterministic). attn_backward
 * gives dq, dk, dv with the sinks already (its P comes from this LSE).
 */
ATTN_API attn_status attn_sinks_backward(const attn_tensor *out, const attn_tensor *lse,
                                         const attn_tensor *dout, const attn_options *options,
                                         float *dsinks, attn_error *error);

/*
 * The dropout mask a call with these options applies (attn_options.dropout_p): keep[b, h, i,
 * j] = 1 where the pair's probability is kept (and scaled by 1 / (1 - dropout_p)), 0 where
 * it is dropped, for every pair whether or not the mask allows it. keep: BOOL, rank 4,
 * [B, Hq, Tq, Tk], any strides without a zero stride on a dimension of size > 1 (written).
 * dropout_p = 0 keeps every pair. For tests and for reproducing a call: attn_forward applies
 * exactly this mask, and attn_backward's gradients are those of O = ((P ∘ keep) / (1 - p)) V.
 * Errors: an invalid dropout_p, sizes beyond the generator's (Tq, Tk, B x Hq >= 2^32).
 */
ATTN_API attn_status attn_dropout_mask(const attn_options *options, attn_tensor *keep,
                                       attn_error *error);

/* The naive backward, written as docs/attention-math.md §2.2 states it: dense
 * S, P, dP, dS per (b, h) in double (O(Tq * Tk) memory), single-threaded. Same arguments,
 * conventions and errors as attn_backward (options NULL = plain attention), F32 tensors
 * only, without an execution part (no memory limit). The tests' oracle; slow. */
ATTN_API attn_status attn_reference_backward(const attn_tensor *q, const attn_tensor *k,
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
 * outs[s] [B, T, H, Dv] F32, BF16 or F16 (all of one dtype, out too: summed in double, O
 * rounded once to nearest-even), lses[s] [B, H, T] F32; a partial with lse = -inf is empty and
 * contributes nothing; when every partial of a row is empty, O = 0 and lse = -inf.
 * In place: out may be outs[0] itself and lse lses[0] itself (the same views: data, dtype,
 * shape and strides; in-place accumulation). Any other byte shared by out or lse with a
 * partial (outs[s], lses[s], a shifted view of outs[0]) or by out with lse is
 * ATTN_ERROR_INVALID_ARGUMENT naming both and their byte ranges, before anything is written.
 */
ATTN_API attn_status attn_merge(int count, const attn_tensor *const *outs,
                                const attn_tensor *const *lses, attn_tensor *out, attn_tensor *lse,
                                attn_error *error);

/* ======================================================================================
 * Section: KV cache and decoding
 * ====================================================================================== */

/* How RoPE pairs the dimensions it rotates (KV caches and attn_layers.h use it). */
typedef enum attn_rope_layout {
    ATTN_ROPE_INTERLEAVED = 0, /* pairs (2i, 2i+1): GPT-J, RoFormer, Meta Llama, DeepSeek */
    ATTN_ROPE_HALF = 1         /* pairs (i, i + rotary_dim/2): GPT-NeoX, HF Llama */
} attn_rope_layout;

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
    /* ATTN_DTYPE_F32, BF16 or F16, or a quantized format: Q8, FP8_E4M3, FP8_E5M2 (rounded
       on append, dequantised inside the decode kernels; docs/inference.md) */
    attn_dtype dtype;
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
    /* FP8 storage only (NULL otherwise, and NULL = 1): per-KV-head float32 scales [Hkv] of
       keys and values, copied at creation; a key element x is stored as fp8(x / scale[h])
       and read back as scale[h] * fp8 (vLLM's k_scale / v_scale, one per head). Each must
       be finite and > 0. value_scales is ignored with values_in_keys. */
    const float *fp8_key_scales;
    const float *fp8_value_scales;
} attn_kv_cache_config;

/* A config with every size 0 (to be filled in), F32 storage, contiguous layout, no RoPE. */
ATTN_API attn_kv_cache_config attn_kv_cache_config_default(void);

/* Allocates a cache (every sequence empty). Errors: sizes out of range (the message names the
 * field), an unsupported dtype, values_in_keys with Dv > Dk, size overflow, out of memory. */
ATTN_API attn_status attn_kv_cache_create(const attn_kv_cache_config *config, attn_kv_cache **cache,
                                          attn_error *error);

/* Frees the cache. NULL is allowed. */
ATTN_API void attn_kv_cache_destroy(attn_kv_cache *cache);

/*
 * Appends T tokens to each of the sequences first_sequence .. first_sequence + n - 1:
 *   k [n, T, Hkv, Dk] F32 (any strides), v [n, T, Hkv, Dv] F32 (NULL when values_in_keys).
 * Sequence s's new tokens get positions length(s) .. length(s) + T - 1 (RoPE uses them).
 * All or nothing: ATTN_ERROR_CAPACITY (nothing written) when a sequence would exceed its
 * capacity or the page pool cannot supply the pages needed; never an overflow.
 */
ATTN_API attn_status attn_kv_cache_append(attn_kv_cache *cache, int64_t first_sequence,
                                          const attn_tensor *k, const attn_tensor *v,
                                          attn_error *error);

/* Shortens `sequence` to `length` tokens (0 <= length <= its current length); pages no longer
 * used by any sequence return to the pool. */
ATTN_API attn_status attn_kv_cache_truncate(attn_kv_cache *cache, int64_t sequence, int64_t length,
                                            attn_error *error);

/* Empties every sequence and returns every page to the pool. */
ATTN_API void attn_kv_cache_reset(attn_kv_cache *cache);

/*
 * Makes the empty sequence `destination` start with the first `length` tokens of `source`
 * (a common prompt prefix): full pages are shared (reference counted, no copy); a partial
 * last page is copied. A shared page is copied before either sequence writes into it.
 * Errors: destination not empty, length > length(source), pool exhausted (CAPACITY).
 */
ATTN_API attn_status attn_kv_cache_share_prefix(attn_kv_cache *cache, int64_t source,
                                                int64_t destination, int64_t length,
                                                attn_error *error);

/* Tokens held by `sequence` (-1 when cache is NULL or sequence out of range). */
ATTN_API int64_t attn_kv_cache_length(const attn_kv_cache *cache, int64_t sequence);

/* The block table of `sequence`: *pages points to ceil(length / page_size) page indices owned
 * by the cache (valid until the next modification). */
ATTN_API attn_status attn_kv_cache_block_table(const attn_kv_cache *cache, int64_t sequence,
                                               const int32_t **pages, int64_t *page_count,
                                               attn_error *error);

/* Pages currently free in the pool (-1 when cache is NULL). */
ATTN_API int64_t attn_kv_cache_free_pages(const attn_kv_cache *cache);

/* Bytes of K/V storage per token (all Hkv heads of one sequence, this layer):
 * Hkv * (Dk + (values_in_keys ? 0 : Dv)) * sizeof(dtype), plus for Q8 its float32 scales,
 * Hkv * (values_in_keys ? 1 : 2) * 4. 0 for an invalid config. */
ATTN_API size_t attn_kv_cache_bytes_per_token(const attn_kv_cache_config *config);

/* Total bytes the cache holds allocated: the page pool plus its tables. */
ATTN_API size_t attn_kv_cache_footprint_bytes(const attn_kv_cache *cache);

/*
 * Copies tokens [first_token, first_token + T) of `sequence` out of the cache as float32:
 *   k [1, T, Hkv, Dk] F32 (written), v [1, T, Hkv, Dv] F32 (written; may be NULL).
 * With values_in_keys, v receives the first Dv elements of each key.
 */
ATTN_API attn_status attn_kv_cache_read(const attn_kv_cache *cache, int64_t sequence,
                                        int64_t first_token, attn_tensor *k, attn_tensor *v,
                                        attn_error *error);

/*
 * Attention of new queries against everything in the cache (append the new tokens' K/V
 * first): for each sequence b, O[b] = attention(q[b], K_b, V_b) where K_b, V_b are its
 * length(b) cached tokens. The result equals attn_forward on those K/V with the same options
 * (use alignment ATTN_ALIGN_BOTTOM_RIGHT + causal for generation: query i sits at position
 * length(b) - Tq + i); window, ALiBi, soft-cap, custom scale, query_lengths, masks and biases
 * (logical Tk = the longest sequence's length) all apply.
 *   q   [B, Tq, Hq, Dk] (B = config.sequences, Hq a multiple of Hkv)
 *   out [B, Tq, Hq, Dv] (written);  lse [B, Hq, Tq] F32 (written; may be NULL)
 * q and out are both F32, both BF16 or both F16 (any cache dtype): 16-bit queries are widened
 * exactly, P is rounded to their type for P·V as in attn_forward, O is rounded once, and a
 * finite O beyond a 16-bit range is ATTN_ERROR_OVERFLOW (docs/precision.md).
 * Split-KV (flash-decoding): each sequence's keys are cut into splits of execution->tile_k
 * tokens, fixed independently of the thread count (0 = automatic: at most 4096 tokens, and
 * fewer when B x Hkv < 16 so that there are about 16 tasks, a multiple of 64 tokens; it
 * depends only on the cache's lengths, B and Hkv); each (sequence, KV head, split) is one
 * task that reads its pages once for all Hq / Hkv query heads of the group and all Tq rows,
 * and the partial (O, LSE) are merged exactly as attn_merge does, in split order, so the
 * output is bitwise identical for any thread count. execution->kernel picks the kernel table
 * (generic, AVX2 or AVX-512; AUTO = the fastest this CPU runs).
 * Errors: as attn_forward, plus options->key_lengths / key_positions set (the cache defines
 * them: INVALID_ARGUMENT), an empty row under ATTN_EMPTY_ROWS_ERROR (e.g. a sequence with
 * fewer tokens than Tq under bottom-right causality), memory limit, out or lse sharing a byte
 * with q, the options' tensors and arrays, or each other (INVALID_ARGUMENT naming both and
 * their byte ranges, as in attn_forward). options NULL = plain attention, execution NULL =
 * defaults.
 */
ATTN_API attn_status attn_decode(const attn_kv_cache *cache, const attn_tensor *q,
                                 const attn_options *options, attn_tensor *out, attn_tensor *lse,
                                 const attn_execution *execution, attn_error *error);

/* The naive oracle of attn_decode: reads each sequence back as float32 (attn_kv_cache_read)
 * and calls attn_reference_forward on it, one sequence at a time (options NULL = plain
 * attention; F32 q and out only). Slow; for tests. */
ATTN_API attn_status attn_reference_decode(const attn_kv_cache *cache, const attn_tensor *q,
                                           const attn_options *options, attn_tensor *out,
                                           attn_tensor *lse, attn_error *error);

/* ======================================================================================
 * Section: serving — packed variable-length batches and KV caches the caller owns
 * (docs/inference.md, "Serving")
 * ====================================================================================== */

/*
 * B sequences packed without padding (flash-attn's cu_seqlens): sequence b's queries are the
 * rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of the packed query tensor, its keys the rows
 * cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1 of the packed key tensor. Both arrays are int32
 * [B + 1], start at 0, never decrease and end at total_q / total_k (the packed tensors' first
 * dimension); every length is at most max_seqlen_q / max_seqlen_k (>= 1). A sequence may be
 * empty (equal neighbours).
 */
typedef struct attn_varlen {
    int64_t batch;                /* B >= 1 */
    const int32_t *cu_seqlens_q;  /* int32[B + 1] */
    const int32_t *cu_seqlens_k;  /* int32[B + 1] */
    int64_t max_seqlen_q;         /* >= 1 and >= every query length */
    int64_t max_seqlen_k;         /* >= 1 and >= every key length */
} attn_varlen;

/*
 * Attention over packed variable-length sequences: sequence b is attn_forward of its own
 * rows (its queries against its keys only), so every option that depends on positions does
 * so per sequence: causal and windows with ATTN_ALIGN_BOTTOM_RIGHT put query i of b at
 * i + len_k(b) - len_q(b) (flash_attn_varlen_func), ALiBi uses the same positions, soft-cap,
 * custom scale, patterns and the empty-row policy apply as in attn_forward; GQA/MQA as there.
 * No work is spent on padding: nothing is padded. Bitwise identical for any thread count
 * (each sequence's result is that of attn_forward on its rows; short sequences run side by
 * side, one thread each, long ones one after another on every thread).
 *   q   [total_q, Hq, Dk]      k [total_k, Hkv, Dk]      v [total_k, Hkv, Dv]
 *   out [total_q, Hq, Dv] (written)
 *   lse [Hq, total_q]     F32 (written; may be NULL) — flash-attn's varlen LSE layout
 * q, k, v and out are all F32, all BF16 or all F16, with attn_forward's precision rules.
 * A sequence with queries but no keys has only empty rows (the empty-row policy decides).
 * execution->memory_limit_bytes bounds each sequence's working memory (sequences that run
 * side by side each have their own).
 * Errors: those of attn_forward, plus a NULL or malformed `sequences` (a cu_seqlens entry
 * that decreases, does not start at 0 or end at the total, a length above max_seqlen: the
 * message names the array, the sequence and the value), and options that are defined on a
 * padded batch (mask, bias, query/key lengths, explicit positions, global tokens, block
 * layout: INVALID_ARGUMENT), out or lse sharing a byte with q, k, v, the cu_seqlens arrays or
 * each other (INVALID_ARGUMENT naming both and their byte ranges, checked before anything is
 * written, as in attn_forward). Every option is checked before the first sequence runs; on
 * errors found while the sequences run (an empty row, a memory limit) `out` and `lse` may
 * have been partly written.
 */
ATTN_API attn_status attn_varlen_forward(const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_varlen *sequences,
                                         const attn_options *options, attn_tensor *out,
                                         attn_tensor *lse, const attn_execution *execution,
                                         attn_error *error);

/*
 * Gradients of attn_varlen_forward (same sequences and options), sequence by sequence as
 * attn_backward computes them: q, k, v, out, lse as above, dout [total_q, Hq, Dv];
 * dq [total_q, Hq, Dk], dk [total_k, Hkv, Dk], dv [total_k, Hkv, Dv] (written, in q's
 * dtype; rows of sequences with no queries or no keys get zeros). Deterministic for any
 * thread count.
 * Errors: those of attn_varlen_forward and attn_backward; dq, dk, dv may share no byte with
 * q, k, v, out, lse, dout, the cu_seqlens arrays or each other.
 */
ATTN_API attn_status attn_varlen_backward(const attn_tensor *q, const attn_tensor *k,
                                          const attn_tensor *v, const attn_tensor *out,
                                          const attn_tensor *lse, const attn_tensor *dout,
                                          const attn_varlen *sequences,
                                          const attn_options *options, attn_tensor *dq,
                                          attn_tensor *dk, attn_tensor *dv,
                                          const attn_execution *execution, attn_error *error);

/* The layout of attn_kv_cache_view below: 2 added k_scale / v_scale (8-bit storage). A view
 * that says version 1 has the older layout (the scale fields are not read, so only F32,
 * BF16 and F16 storage); 0 means the current layout. */
#define ATTN_KV_CACHE_VIEW_VERSION 2

/*
 * A KV cache whose memory the caller owns (flash_attn_with_kvcache, vLLM):
 *  - contiguous: k_cache [B, S_max, Hkv, Dk], v_cache [B, S_max, Hkv, Dv], block_table NULL;
 *    sequence b's token t is k_cache[b, t];
 *  - paged: k_cache [num_pages, page_size, Hkv, Dk], v_cache [num_pages, page_size, Hkv, Dv]
 *    and block_table int32 [B, max_pages]; token t of b is in page block_table[b, t /
 *    page_size], slot t % page_size. Pages may be shared between sequences (a common prefix)
 *    as long as no append writes into a page another sequence (or another block of the same
 *    sequence) uses.
 * Storage dtype F32, BF16, F16 or one of the 8-bit formats Q8, FP8_E4M3, FP8_E5M2 (keys and
 * values alike; rounding as in the library's cache, docs/inference.md "Quantized KV cache");
 * the last dimension has stride 1, other strides are free (>= 0; with an append, rows must
 * not share addresses: see attn_forward_with_kvcache's errors). cache_seqlens int32[B]:
 * tokens already held by each sequence (0 <= cache_seqlens[b]; capacity S_max or max_pages *
 * page_size). The library never changes cache_seqlens: after an append the caller adds the
 * new tokens itself.
 * Scales of the 8-bit formats, F32, any strides >= 0 (NULL for F32 / BF16 / F16 storage):
 *  - Q8: k_scale and v_scale are required, one scale per stored row (token, KV head), laid
 *    out like the cache without D: contiguous [B, S_max, Hkv], paged [num_pages, page_size,
 *    Hkv] (token t of b: k_scale[block_table[b, t / page_size], t % page_size, h]). Row
 *    (t, h) reads back as k_scale[., ., h] * q. An append writes the new rows' scales
 *    (max|x| / 127, kernels' rounding as the library's cache); the held tokens' scales are
 *    used as they are (a NaN or infinite one spoils only the rows that read it).
 *  - FP8: optional per-KV-head scales (vLLM's k_scale / v_scale): rank 1, [Hkv] or [1] (one
 *    scale for every head), each finite and > 0; NULL = 1. An element x is stored as
 *    fp8(x / scale[h]) and reads back as scale[h] * fp8. Never written.
 */
typedef struct attn_kv_cache_view {
    int version;                    /* 0, 1 (no scale fields) or ATTN_KV_CACHE_VIEW_VERSION */
    attn_tensor *k_cache;           /* rank 4, see above */
    attn_tensor *v_cache;           /* rank 4, see above */
    const attn_tensor *block_table; /* NULL = contiguous; else I32 rank 2 [B, max_pages] */
    const int32_t *cache_seqlens;   /* int32[B] */
    /* version 2: */
    attn_tensor *k_scale;           /* Q8: rank 3 (written on append); FP8: rank 1 or NULL */
    attn_tensor *v_scale;           /* likewise for the values */
} attn_kv_cache_view;

/*
 * New tokens to append before attending (all optional; NULL = none):
 *   k_new [B, Tnew, Hkv, Dk], v_new [B, Tnew, Hkv, Dv]: F32 or the cache's dtype (8-bit
 *   storage: F32, BF16 or F16, finite), any strides; written at tokens cache_seqlens[b] ..
 *   cache_seqlens[b] + Tnew - 1 (converted to the storage dtype with round-to-nearest-even;
 *   8-bit storage quantised in place, Q8 writing each row's scale into k_scale / v_scale).
 *   rotary_cos, rotary_sin: F32 [positions, rotary_dim / 2] (rotary_dim even, <= Dk): RoPE of
 *   the first rotary_dim dimensions of the new keys at their absolute positions (row p of the
 *   tables for position p), applied on append, and of the queries: query i of b at position
 *   cache_seqlens[b] + i when causal or windowed, else at cache_seqlens[b] (flash-attn's
 *   rule). rotary_layout: ATTN_ROPE_HALF (pairs d, d + rotary_dim / 2: flash-attn's
 *   rotary_interleaved = False) or ATTN_ROPE_INTERLEAVED (pairs 2d, 2d + 1).
 */
typedef struct attn_kv_append {
    const attn_tensor *k_new;
    const attn_tensor *v_new;
    const attn_tensor *rotary_cos;
    const attn_tensor *rotary_sin;
    attn_rope_layout rotary_layout;
} attn_kv_append;

/*
 * flash_attn_with_kvcache: appends the new tokens (if any) in place, then computes attention
 * of Tq >= 1 new queries per sequence against its cache_seqlens[b] + Tnew tokens. With causal
 * and ATTN_ALIGN_BOTTOM_RIGHT, query i of b sits at position cache_seqlens[b] + Tnew - Tq + i,
 * so chunked prefill (Tq = Tnew = a chunk) and speculative verification (Tq = Tnew = the draft)
 * are the same call as decoding (Tq = Tnew = 1). Window, soft-cap, ALiBi, custom scale and
 * GQA/MQA as in attn_forward. Small Tq runs the split-KV decoding kernels of attn_decode
 * (reading the caller's pages in place), large Tq the tiled forward on each sequence's keys;
 * the caller never chooses, and each path is bitwise identical for any thread count.
 *   q   [B, Tq, Hq, Dk];   out [B, Tq, Hq, Dv] (written);  lse [B, Hq, Tq] F32 or NULL
 * q and out are both F32, both BF16 or both F16, any storage dtype (attn_decode's and
 * attn_forward's precision rules; RoPE'd queries are rounded to their dtype once).
 * Everything is validated before the first write: shapes and dtypes, cache_seqlens[b] < 0,
 * cache_seqlens[b] + Tnew beyond the capacity (ATTN_ERROR_CAPACITY naming b and the values),
 * a block_table entry outside [0, num_pages) among the blocks a sequence uses, a page written
 * by one append and used elsewhere (INVALID_ARGUMENT naming both sequences and blocks),
 * rotary tables too short for the positions, options the cache defines (key_lengths,
 * key_positions) or that need a padded batch (mask, bias, block layout), dropout_p (refused:
 * inference applies no dropout), a query row the options leave with no key under
 * ATTN_EMPTY_ROWS_ERROR (ATTN_ERROR_EMPTY_ROW naming b, h, i), 8-bit scales
 * missing, given for 16/32-bit storage, of the wrong shape or dtype, a non-positive or
 * non-finite FP8 scale (naming the argument, the head and the value), a non-finite new
 * token for 8-bit storage (naming the element); and, when an append writes (Tnew > 0), a
 * layout in which two written rows could share an address, by a conservative rule: within
 * k_cache, v_cache and Q8's k_scale / v_scale, dims 0..2 of size > 1 sorted by stride must
 * nest (each stride >= the extent of the smaller ones, a row being D elements, a scale 1:
 * a zero stride is refused, naming the tensor, dimension and stride), and no two of them may
 * share a byte (judged by their address spans, the gcd of their byte strides and a bounded
 * exact search of their offsets, so k and v interleaved in one allocation with equal
 * strides, per head or per page, are accepted; naming both tensors); nor
 * may append->k_new or v_new share a byte with any of those four (the new rows may not alias
 * the cache they are appended into; by the same rule, naming both tensors and their byte
 * ranges; k_new and v_new may share memory with each other).
 * Read-only calls accept any strides >= 0. Whatever the call, out and lse may share no byte
 * with q, the cache (k_cache, v_cache, k_scale, v_scale, block_table, cache_seqlens), the new
 * rows, the rotary tables or each other (INVALID_ARGUMENT naming both and their byte ranges,
 * e.g. "out (bytes [a, b)) and cache->k_cache (bytes [c, d)) share memory: ..."; exact, as in
 * attn_forward). On any of these errors nothing is written to the cache, to its scales, to
 * out or to lse.
 * 8-bit storage: Tq <= 16 runs attn_decode's kernels in place on the caller's pages and
 * scales, bitwise as a library-owned 8-bit cache holding the same tokens; a prefill chunk
 * dequantises each sequence's keys (head_scale * row_scale * q, then the queries' dtype)
 * into the gathered buffer.
 */
ATTN_API attn_status attn_forward_with_kvcache(const attn_tensor *q,
                                               const attn_kv_cache_view *cache,
                                               const attn_kv_append *append,
                                               const attn_options *options, attn_tensor *out,
                                               attn_tensor *lse, const attn_execution *execution,
                                               attn_error *error);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
