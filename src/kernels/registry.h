/*
 * registry.h — the one kernel contract of attn: a registry `attn_kernels` with a forward, a
 * backward and a decode part, each a table of small arithmetic slots on tiles, and the one
 * selector that picks a registry for an attn_kernel_choice.
 *
 * The loop nests (src/forward, src/backward, src/cache) own tiling, masks, threading and the
 * online-softmax bookkeeping; a registry owns only the arithmetic. Every registry starts as
 * the portable one (src/kernels/generic/) and an ISA overrides the slots it implements
 * (src/kernels/<isa>/table_<isa>.c), when CPUID and the OS allow it (cpu_features.h). The
 * selector builds each registry once per process (thread-safe) and hands out pointers to
 * those constant registries.
 *
 * Rules every implementation of a slot keeps:
 *  - deterministic: same inputs, same bits, whatever the thread count (sums in a fixed order);
 *  - results within 1e-6 relative of the generic registry's (exp to a few ulp, dot products
 *    to float rounding in another order);
 *  - sizes are small (a tile), so ints are used; strides are in floats (int64_t where they
 *    address a whole tensor or a cache); buffers from attn_aligned_alloc are 64-byte aligned.
 *
 * Packed layouts (forward part) are private to the implementation that packs: a loop only
 * asks for their size, packs through the registry, and hands the packed buffers back to the
 * same registry. Hence the slots that share a layout are overridden together (see "override
 * groups" below). Prefix property (every implementation): a buffer packed from `count` keys
 * (values) is also a valid packed buffer of its first `count2` keys (values), for any
 * 1 <= count2 <= count, as far as score_tile (accumulate_values) with count2 is concerned. The
 * forward pass packs each key tile of a head once and uses it for query tiles that need only
 * a prefix of it (tests/test_kernels_packing.c checks this).
 *
 * The online-softmax step (ONE specification, used by forward.softmax_step and
 * decode.softmax_chunk). For a row r with running maximum M = row_max[r] and running sum
 * L = row_sum[r], and the logits of one tile x_c (c < count; -inf = masked):
 *     m      = max(M, max_c x_c);            u = (m == -inf) ? 0 : m
 *     p_c    = exp(x_c - u)                   (exactly 0 for x_c = -inf; written in place,
 *                                              rounded to bf16 / fp16 when
 *                                              asked: p_type)
 *     rescale[r] = (M == -inf) ? 0 : exp(M - u)
 *     row_sum[r] = rescale[r] * L + sum_c p_c;   row_max[r] = m
 * so that after every tile, row_sum[r] * exp(row_max[r]) = sum over all keys so far of
 * exp(x), and an accumulator of p-weighted values rescaled by rescale[r] stays consistent.
 * NaN: a NaN logit x_c (an attended NaN in q, k or a bias; masked entries arrive as -inf),
 * or a +inf one (exp(x - m) = exp(inf - inf) in the exact softmax), makes rescale[r],
 * row_sum[r] and row_max[r] NaN, and a NaN M keeps them NaN, so the row's
 * O and LSE come out NaN on every registry (docs/conventions.md); the p_c of such a row are
 * unspecified (the accumulator is NaN through the rescale).
 * Why two slots for one step: the forward tile has any width (up to ATTN_MAX_TILE), a stride
 * and an optional soft-cap, and is swept twice through L1; the decode chunk is at most
 * ATTN_DECODE_CHUNK (64) floats, dense, never soft-capped by the kernel, so an ISA keeps the
 * whole chunk in registers and reads it once. The two also round x·scale − u differently on
 * SIMD (forward fuses it into one FMA; decode rounds x·scale first), within the 1e-6 rule;
 * one slot would change the bits of one path or slow the other. The generic decode slot is
 * the generic forward step itself (stride ATTN_DECODE_CHUNK, softcap 0).
 */
#ifndef ATTN_KERNELS_REGISTRY_H
#define ATTN_KERNELS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <math.h>

#include "attn.h"
#include "kernels/lowp.h"

/* The online-softmax step's rescale[r] (above): exp(old_max - shift) for the running maximum
 * old_max and the maximum used for this step, 0 for a row that had no allowed key yet; an
 * unchanged maximum (the usual case after the first chunks) gives exp(0) = 1 exactly without
 * the libm call, which is a visible part of a small group's softmax step (the same bits). */
static inline float attn_softmax_rescale(float old_max, float shift) {
    return old_max == -INFINITY ? 0.0f : old_max == shift ? 1.0f : expf(old_max - shift);
}

/* ---------------------------------------------------------------- forward part ---------- */
typedef struct attn_forward_kernels {
    /* Number of floats a packed tile of `count` keys (or values) of dimension `dim` needs. */
    size_t (*packed_keys_floats)(int count, int dim);
    size_t (*packed_values_floats)(int count, int dim);

    /* Packs `count` keys: key c, element d is at source[c*token_stride + d*dim_stride]. */
    void (*pack_keys)(int count, int dim, const float *source, int64_t token_stride,
                      int64_t dim_stride, float *packed);
    /* Packs `count` value rows the same way (layout suited to accumulate_values); returns
     * whether every packed value is finite (the forward then needs no zeroed copy for keys
     * that no row attends). */
    bool (*pack_values)(int count, int dim, const float *source, int64_t token_stride,
                        int64_t dim_stride, float *packed);

    /* scores[r*scores_stride + c] = sum_d queries[r*query_stride + d] * key_c[d]
     * for r < rows, c < count. queries: contiguous rows of `dim` floats (query_stride >= dim);
     * key_c: key c as packed by pack_keys. */
    void (*score_tile)(int rows, int count, int dim, const float *queries, int query_stride,
                       const float *packed_keys, float *scores, int scores_stride);

    /* accumulator[r*accumulator_stride + e] += sum_c weights[r*weights_stride + c] * value_c[e]
     * for r < rows, e < dim; value_c: value row c as packed by pack_values. */
    void (*accumulate_values)(int rows, int count, int dim, const float *weights,
                              int weights_stride, const float *packed_values,
                              float *accumulator, int accumulator_stride);

    /* The online-softmax step (above) over scores [rows][scores_stride], fused with the
     * logit transform: x_c = scores[r][c] * scale; if softcap > 0: x_c = softcap *
     * tanh(x_c / softcap) (masked entries arrive as -inf and stay -inf; scale = 1, softcap = 0
     * when the loop has already transformed the tile itself). scale > 0. p_c replaces
     * scores[r][c], as computed for p_type ATTN_DTYPE_F32, rounded for ATTN_DTYPE_BF16 /
     * ATTN_DTYPE_F16 to that type (the bits of attn_lowp_round_float on the p_c the F32 step
     * writes: convert.round_rows fused into the step, for a P·V on 16-bit operands);
     * row_sum always sums the unrounded p_c. row_max, row_sum, rescale:
     * float[rows]. */
    void (*softmax_step)(int rows, int count, float *scores, int scores_stride, float scale,
                         float softcap, attn_dtype p_type, float *row_max, float *row_sum,
                         float *rescale);

    /* accumulator[r][e] *= factor[r] for r < rows, e < dim. */
    void (*scale_rows)(int rows, int dim, const float *factor, float *accumulator,
                       int accumulator_stride);

    /* Attention dropout's draws (mask/dropout.h): draws[4 n + w] = word w of the
     * Philox-4x32-10 block (kernels/philox.h) of counter (first + n as 64 bits, row, stream)
     * under key, for n < blocks; the same bits on every registry. */
    void (*philox_blocks)(uint64_t key, uint64_t first, uint32_t row, uint32_t stream,
                          int blocks, uint32_t *draws);
} attn_forward_kernels;

/* ---------------------------------------------------------------- backward part --------- */
/* The backward pass uses forward.pack_keys + forward.score_tile for S = Q·Kᵀ and dP = dO·Vᵀ,
 * and these slots for the products that read P and dS as they are (no transposes, no value
 * packing) and for the elementwise steps. Sums over `inner` go in index order. Rows are
 * unit-stride; the `values` rows of the products are read in whole SIMD vectors: each must
 * have ATTN_BACKWARD_ROW_FLOATS(dim) readable floats (the floats past dim are read but never
 * affect the result), so the loop keeps its copies of Q, dO and K in rows padded to that. */

/* Readable floats a `values` row of dimension dim needs (dim rounded up to 16 floats). */
#define ATTN_BACKWARD_ROW_FLOATS(dim) (((dim) + 15) / 16 * 16)

typedef struct attn_backward_kernels {
    /* accumulator[o][e] += sum_i weights[o * weights_stride + i] * values[i * values_stride + e]
     * for o < outputs, e < dim, i < inner (dQ += dS · K).
     * weights [outputs][weights_stride], values [inner][values_stride],
     * accumulator [outputs][accumulator_stride]. */
    void (*accumulate)(int outputs, int inner, int dim, const float *weights, int weights_stride,
                       const float *values, int values_stride, float *accumulator,
                       int accumulator_stride);

    /* The same with the weights read transposed (dV += Pᵀ · dO, dK += dSᵀ · Q):
     * accumulator[o][e] += sum_i weights[i * weights_stride + o] * values[i * values_stride + e]
     * weights [inner][weights_stride] (o < outputs <= weights_stride). */
    void (*accumulate_transposed)(int outputs, int inner, int dim, const float *weights,
                                  int weights_stride, const float *values, int values_stride,
                                  float *accumulator, int accumulator_stride);

    /* Probabilities in place, per row r < rows, column c < count:
     *   scores[r][c] = exp(scale * scores[r][c] - row_lse[r])
     * -inf scores (masked) give exactly 0; a row with row_lse[r] = -inf (empty) gives 0s;
     * a NaN row_lse gives NaN. scores [rows][stride]. */
    void (*probabilities)(int rows, int count, float *scores, int stride, float scale,
                          const float *row_lse);

    /* dS = P * (dP - D) in place on dP: gradient[r][c] = probabilities[r][c] *
     * (gradient[r][c] - row_dot[r]). Both [rows][stride]. */
    void (*score_gradient)(int rows, int count, const float *probabilities, float *gradient,
                           int stride, const float *row_dot);
} attn_backward_kernels;

/* ---------------------------------------------------------------- decode part ----------- */
/* The arithmetic of one decoding task: convert a chunk of stored keys/values to float32,
 * score the query rows of a GQA group against a chunk of keys, take the online-softmax step
 * of every row, accumulate probability-weighted values. The loop in src/cache/decode.c owns
 * masks, the split-KV plan and the merge. Results agree with the generic part to float
 * rounding of the dot products and of exp. */

/* Keys per chunk: the unit of scoring, masking and accumulation (a chunk never crosses a
 * page boundary, so it may be shorter). */
#define ATTN_DECODE_CHUNK 64

/* Largest group (query rows per task) that reads bfloat16 or IEEE half storage directly
 * when the registry can (score_chunk_bf16, score_chunk_f16); larger groups convert each chunk
 * once into a float32 buffer. */
#define ATTN_DECODE_FUSED_ROWS 4

/* Smallest group (query rows per task) scored by score_chunk_group when the registry has it
 * (MQA, MLA and wide GQA groups: Hq / Hkv >= 12 at Tq = 1). Below it the query rows are too
 * few to fill vector lanes, and score_chunk's blocked dot products are faster. */
#define ATTN_DECODE_GROUP_ROWS 12

/* Floats between two dimensions of the prepared queries of a large group
 * (prepare_group_queries): rows rounded up to a multiple of 16. */
#define ATTN_DECODE_GROUP_STRIDE(rows) (((rows) + 15) / 16 * 16)

/* Floats per prepared query row (prepare_bf16_queries): dim rounded up to a multiple of 32. */
#define ATTN_DECODE_PREPARED_DIM(dim) (((dim) + 31) / 32 * 32)

/* Smallest group (query rows per task) whose bf16 queries against a bf16 cache run on bf16
 * tiles (score_chunk_tiles / accumulate_chunk_tiles: AMX) when the registry has them: the
 * groups above ATTN_DECODE_FUSED_ROWS. From there on the tiles' products outpace the fp32
 * kernels; at 2 and 4 rows the in-place AVX-512 kernels stay faster, a tile of 16 rows being
 * mostly empty there. */
#define ATTN_DECODE_TILE_ROWS 5

/* uint16_t elements of the query rows prepared for the bf16 tiles (prepare_tile_queries):
 * rows rounded up to 16, dim to 32. */
#define ATTN_DECODE_TILE_QUERY_ELEMENTS(rows, dim) \
    ((size_t)ATTN_DECODE_GROUP_STRIDE(rows) * (size_t)ATTN_DECODE_PREPARED_DIM(dim))

/* Floats per row of the accumulator of the bf16 tiles (accumulate_chunk_tiles): dim rounded
 * up to 16 (one tile row). */
#define ATTN_DECODE_TILE_ROW_FLOATS(dim) (((dim) + 15) / 16 * 16)

/* Chunks of keys whose P · V the bf16 tiles accumulate in one call (accumulate_chunk_tiles):
 * the accumulator rows pass through the tiles once per call, so for a large accumulator
 * (MLA: 128 rows x 512 floats, in L2) longer calls cost less; and the keys per call. */
#define ATTN_DECODE_TILE_CHUNKS 4
#define ATTN_DECODE_TILE_KEYS (ATTN_DECODE_TILE_CHUNKS * ATTN_DECODE_CHUNK)

/* Bytes of the value staging buffer accumulate_chunk_tiles needs: ATTN_DECODE_TILE_KEYS
 * value rows interleaved in pairs of keys, [keys / 2][ATTN_DECODE_TILE_ROW_FLOATS(dim)][2]
 * bf16. */
#define ATTN_DECODE_TILE_VALUE_BYTES(dim) \
    ((size_t)ATTN_DECODE_TILE_KEYS * (size_t)ATTN_DECODE_TILE_ROW_FLOATS(dim) * 2u)

/* int8 tiles (score_chunk_q8_tiles): the widest key dimension whose exact int32 sums fit
 * (|q16| <= 16383, |k| <= 128, as the AVX-512 integer kernels); bytes of the prepared
 * queries ([rows / 8][dim / 64] operand tiles of 1 KiB, then rows floats, both rounded up);
 * bytes of the value stage (64 keys x dim rounded up to 64). */
#define ATTN_DECODE_Q8_TILE_MOST_DIM 1024
/* Smallest group (query rows per task) whose int8 P · V runs on the tiles too
 * (accumulate_chunk_q8_tiles); smaller groups score on the tiles and accumulate with
 * accumulate_chunk_q8, whose vector loads of the stored values overlap their memory latency,
 * where the tiles wait for the chunk's values to be interleaved into the stage first; from
 * this many rows on the tiles' P · V has the arithmetic to hide that wait (docs/inference.md,
 * "Quantized KV cache (int8, fp8)"; docs/kernels.md, "AMX"). */
#define ATTN_DECODE_Q8_TILE_VALUE_ROWS 5
#define ATTN_DECODE_Q8_TILE_QUERY_BYTES(rows, dim)                                       \
    ((size_t)(((rows) + 7) / 8) * (size_t)(((dim) + 63) / 64) * 1024u +                  \
     (size_t)(((rows) + 15) / 16 * 16) * sizeof(float))
#define ATTN_DECODE_Q8_TILE_VALUE_BYTES(dim) \
    ((size_t)ATTN_DECODE_CHUNK * (size_t)(((dim) + 63) / 64 * 64))

/* Stored rows a decode kernel may request ahead of their use (score_chunk_q8's `ahead`):
 * row c (c < the call's count) is the `bytes` bytes at rows + c * stride. */
typedef struct attn_rows_ahead {
    const uint8_t *rows;
    int64_t stride; /* bytes between rows */
    int bytes;      /* bytes of each row */
} attn_rows_ahead;

typedef struct attn_decode_kernels {
    /* target[e] = float(source[e]) for e < count, where source holds bfloat16 (or IEEE half)
     * elements. */
    void (*bf16_to_f32)(int64_t count, const uint16_t *source, float *target);
    void (*f16_to_f32)(int64_t count, const uint16_t *source, float *target);
    /* target[c * dim + e] = float(source[c * stride + e]) for c < count, e < dim: `count`
     * stored rows of bfloat16 (dtype BF16) or IEEE half (F16) elements, `stride` elements
     * apart, widened into dense rows in one call (a chunk of keys or values). rows_ahead:
     * as for dequantize_rows (below). */
    void (*widen_rows)(attn_dtype dtype, int count, int dim, const uint16_t *source,
                       int64_t stride, float *target, const uint16_t *rows_ahead);
    /* scores[r * ATTN_DECODE_CHUNK + c] = sum_d queries[r * dim + d] * keys[c * key_stride + d]
     * for r < rows, c < count (<= ATTN_DECODE_CHUNK).
     * keys_ahead (here and in every score kernel below that has it), values_ahead (in the
     * value kernels): NULL, or the first row of the next chunk (rows key_stride /
     * value_stride apart as the chunk's), which the kernel may request once the rows it
     * requests ahead of its own pass the chunk's end (a hint: never read, a request never
     * faults). The decode loop passes the next chunk of stored rows read in place, found
     * through the block table, so that with pages of 16 tokens the requests follow the
     * sequence's pages rather than the pool's next page (another sequence's in a shuffled
     * pool); NULL for rows converted into a buffer. */
    void (*score_chunk)(int rows, int count, int dim, const float *queries, const float *keys,
                        int64_t key_stride, float *scores, const float *keys_ahead);
    /* The online-softmax step (above) for r < rows on the logits
     * x_c = scale * scores[r * ATTN_DECODE_CHUNK + c], c < count; p_c replaces them, written
     * as forward.softmax_step writes them for p_type (rounded to bf16 / fp16 for a P·V on
     * widened 16-bit operands, the sums unrounded). */
    void (*softmax_chunk)(int rows, int count, float scale, float *scores, attn_dtype p_type,
                          float *row_max, float *row_sum, float *rescale);
    /* accumulator[r * dim + e] = rescale[r] * accumulator[r * dim + e] +
     *                            sum_c weights[r * ATTN_DECODE_CHUNK + c] *
     *                                  values[c * value_stride + e]      for r < rows, e < dim.
     * A key whose weight is 0 may be skipped (its value is never read). */
    void (*accumulate_chunk)(int rows, int count, int dim, const float *weights,
                             const float *rescale, const float *values, int64_t value_stride,
                             float *accumulator, const float *values_ahead);
    /* Optional (NULL = convert to float32 first): score_chunk and accumulate_chunk reading
     * bfloat16 keys / values as stored (strides in elements), widening them in registers.
     * Used for small groups (rows <= ATTN_DECODE_FUSED_ROWS), where each stored element is
     * read once or twice, so a conversion pass through a buffer would cost more than it
     * saves. keys_ahead / values_ahead: as for score_chunk. */
    void (*score_chunk_bf16)(int rows, int count, int dim, const float *queries,
                             const uint16_t *keys, int64_t key_stride, float *scores,
                             const uint16_t *keys_ahead);
    void (*accumulate_chunk_bf16)(int rows, int count, int dim, const float *weights,
                                  const float *rescale, const uint16_t *values,
                                  int64_t value_stride, float *accumulator,
                                  const uint16_t *values_ahead);
    /* Optional (NULL = score_chunk_bf16 reads the queries as they are): rewrites the query
     * rows [rows][dim] once per task into the order score_chunk_bf16 reads them,
     * prepared[rows][ATTN_DECODE_PREPARED_DIM(dim)] (for instance even and odd dimensions
     * apart, matching bfloat16 pairs widened without a shuffle; padding is 0). */
    void (*prepare_bf16_queries)(int rows, int dim, const float *queries, float *prepared);
    /* Optional (NULL = convert to float32 first), both or neither: score_chunk and
     * accumulate_chunk reading IEEE half (F16) keys / values as stored, for the same small
     * groups (rows <= ATTN_DECODE_FUSED_ROWS; on token-major pages up to
     * token_major_in_place_rows, below); the queries as score_chunk reads them. Every
     * half is a float32 value, so these give exactly the bits of widen_rows followed by the
     * same registry's score_chunk / accumulate_chunk (same operations, same order).
     * keys_ahead / values_ahead: as for score_chunk (rows of halves). */
    void (*score_chunk_f16)(int rows, int count, int dim, const float *queries,
                            const uint16_t *keys, int64_t key_stride, float *scores,
                            const uint16_t *keys_ahead);
    void (*accumulate_chunk_f16)(int rows, int count, int dim, const float *weights,
                                 const float *rescale, const uint16_t *values,
                                 int64_t value_stride, float *accumulator,
                                 const uint16_t *values_ahead);
    /* Optional (NULL = convert to float32 first), both or neither: score_chunk and
     * accumulate_chunk reading bfloat16 keys / values as stored, each element widened exactly
     * as it is loaded, for any rows: exactly the bits of widen_rows followed by the same
     * registry's score_chunk / accumulate_chunk (unlike score_chunk_bf16, whose order of
     * operations is its own). The decode loop takes them for the groups it would otherwise
     * convert chunk by chunk (ATTN_DECODE_FUSED_ROWS < rows < ATTN_DECODE_GROUP_ROWS) on
     * token-major pages ([page, slot, head, D]: a caller's), where the conversion's strided
     * pass cost more than reading in place, and keeps the conversion on the library's pages,
     * so both give the same bits. keys_ahead / values_ahead: as for score_chunk. (AVX-512;
     * at 8 lanes reading 16-bit rows in place is slower than converting, so the AVX2
     * registry has neither these nor score_chunk_f16.) */
    void (*score_chunk_bf16_widened)(int rows, int count, int dim, const float *queries,
                                     const uint16_t *keys, int64_t key_stride, float *scores,
                                     const uint16_t *keys_ahead);
    void (*accumulate_chunk_bf16_widened)(int rows, int count, int dim, const float *weights,
                                          const float *rescale, const uint16_t *values,
                                          int64_t value_stride, float *accumulator,
                                          const uint16_t *values_ahead);
    /* With the two above: the largest group that reads 16-bit storage in place on
     * token-major pages, through score_chunk_bf16_widened or score_chunk_f16 (0: those groups
     * convert, as on the library's pages). AVX-512: ATTN_DECODE_GROUP_ROWS - 1. */
    int token_major_in_place_rows;
    /* Optional (NULL = score_chunk): the scores of a large group (rows >=
     * ATTN_DECODE_GROUP_ROWS; any rows >= 1 are valid) from its query rows prepared once per
     * task, prepared[dim][ATTN_DECODE_GROUP_STRIDE(rows)] (prepare_group_queries; for
     * instance transposed, so that a vector holds one dimension of many rows):
     * scores[r * ATTN_DECODE_CHUNK + c] = sum_d queries[r * dim + d] * keys[c * key_stride + d]
     * for r < rows, c < count (<= ATTN_DECODE_CHUNK), float32 keys (16-bit storage widened
     * first, once per chunk, by widen_rows: every row of the group reuses them). */
    void (*prepare_group_queries)(int rows, int dim, const float *queries, float *prepared);
    void (*score_chunk_group)(int rows, int count, int dim, const float *prepared,
                              const float *keys, int64_t key_stride, float *scores,
                              const float *keys_ahead);
    /* With score_chunk_group (NULL = accumulate_chunk): accumulate_chunk for a large group
     * whose accumulator is kept transposed for the whole task,
     *   accumulator[e * ATTN_DECODE_GROUP_STRIDE(rows) + r] = rescale[r] * itself +
     *       sum_c weights[r * ATTN_DECODE_CHUNK + c] * values[c * value_stride + e]
     * for r < rows, e < dim (float32 values; the entries of rows >= rows are scratch: the
     * loop starts them at 0 and never reads them). */
    void (*accumulate_chunk_group)(int rows, int count, int dim, const float *weights,
                                   const float *rescale, const float *values,
                                   int64_t value_stride, float *accumulator);

    /* Optional (NULL = the kernels above): bf16 tiles (AMX tiles, or VDPBF16PS blocks on
     * AMD: avx512bf16/decode_avx512bf16.c) for the groups of >= tile_rows_bf16 rows (below;
     * any rows >= 1 are valid) whose queries are bf16 (the caller's dtype: never used to
     * round float32 queries) against bf16 storage, and of >= tile_rows_fp8 against fp8.
     * prepare_tile_queries: the query rows [rows][dim] (floats holding bf16 values; others
     * are rounded to nearest even) once per task into the operand layout of the tiles,
     * prepared[ATTN_DECODE_TILE_QUERY_ELEMENTS(rows, dim)] bf16 (zero past rows and dim).
     * score_chunk_tiles: scores[r * ATTN_DECODE_CHUNK + c] = sum_d query_r[d] * key_c[d] for
     * r < rows, c < count (<= ATTN_DECODE_CHUNK), keys[c * key_stride + d] bf16 as stored
     * (products exact, sums in fp32 in the tile's order; denormal inputs and outputs flush
     * to 0, on AMX and with VDPBF16PS alike).
     * accumulate_chunk_tiles: accumulator[r * ATTN_DECODE_TILE_ROW_FLOATS(dim) + e] =
     *     rescale[r] * itself + sum_c bf16(w[r][c]) * values[c * value_stride + e]
     * for r < rows, e < dim, c < count (<= ATTN_DECODE_TILE_KEYS: up to
     * ATTN_DECODE_TILE_CHUNKS chunks of one page), where the weights of chunk j = c / 64 are a
     * block [rows][ATTN_DECODE_CHUNK] of their own: w[r][c] = weights[(j * rows + r) *
     * ATTN_DECODE_CHUNK + c % ATTN_DECODE_CHUNK] (bf16() rounds to nearest even, lowp.h:
     * the loop passes P in fp32, rescaled to the last chunk's maximum). The accumulator is [ATTN_DECODE_GROUP_STRIDE(rows)]
     * [ATTN_DECODE_TILE_ROW_FLOATS(dim)] floats, started at 0 by the loop; entries past rows
     * and dim are scratch. stage: ATTN_DECODE_TILE_VALUE_BYTES(dim) bytes, 64-byte aligned,
     * where the kernel interleaves the chunk's value rows. */
    void (*prepare_tile_queries)(int rows, int dim, const float *queries, uint16_t *prepared);
    void (*score_chunk_tiles)(int rows, int count, int dim, const uint16_t *prepared,
                              const uint16_t *keys, int64_t key_stride, float *scores);
    void (*accumulate_chunk_tiles)(int rows, int count, int dim, const float *weights,
                                   const float *rescale, const uint16_t *values,
                                   int64_t value_stride, void *stage, float *accumulator);
    /* With the three above: the smallest group that runs on them against bf16 storage
     * (tile_rows_bf16) and against fp8 storage widened to bf16 (tile_rows_fp8); smaller
     * groups take the in-place kernels. */
    int tile_rows_bf16, tile_rows_fp8;
    /* Optional, with the tile slots (NULL = widen_fp8_bf16 into a buffer, then the bf16
     * tiles): fp8 storage (dtype FP8_E4M3 / FP8_E5M2) read in place by the same arithmetic,
     * for groups of rows <= ATTN_DECODE_FUSED_ROWS (each stored row is widened once per 4
     * rows, larger groups widen once into a buffer): bit for bit score_chunk_tiles /
     * accumulate_chunk_tiles on the rows widen_fp8_bf16 gives (no scales: the loop applies
     * the head's). ahead: as score_chunk_q8's (a hint; results never depend on it). */
    void (*score_chunk_tiles_fp8)(attn_dtype dtype, int rows, int count, int dim,
                                  const uint16_t *prepared, const uint8_t *keys,
                                  int64_t key_stride, float *scores,
                                  const attn_rows_ahead *ahead);
    void (*accumulate_chunk_tiles_fp8)(attn_dtype dtype, int rows, int count, int dim,
                                       const float *weights, const float *rescale,
                                       const uint8_t *values, int64_t value_stride,
                                       float *accumulator);

    /* 8-bit storage (attn_dtype Q8, FP8_E4M3, FP8_E5M2; kernels/quant.h). A stored row c
     * (elements source[c * stride + e], one byte each) stands for the floats
     *     x_c[e] = factor * row_scales[c] * decode(dtype, source[c * stride + e])
     * (row_scales: Q8's per-token scales, NULL = 1; factor: FP8's per-head scale, else 1).
     * Pointers, strides and scales only, no cache: the same slots serve any cache layout.
     * dequantize_rows: target[c * dim + e] = x_c[e] for c < count, e < dim, rounded as
     * (factor * row_scales[c]) * decode (the scales' product first). Required.
     * rows_ahead: NULL, or the first of the next chunk's rows (stride apart as these), of
     * which the kernel may request row c into L2 as it converts row c (a hint: never read;
     * the decode loop passes the next chunk found through the block table: spread over the
     * conversion, these requests do not stall the kernel's loads as a burst before it
     * would). */
    void (*dequantize_rows)(attn_dtype dtype, int count, int dim, const uint8_t *source,
                            int64_t stride, const float *row_scales, float factor,
                            float *target, const uint8_t *rows_ahead);
    /* FP8 (E4M3, E5M2) only: target[c * dim + e] = the bf16 bits of decode(dtype,
     * source[c * stride + e]) for c < count, e < dim, exact (every fp8 value is a bf16
     * value; no scale). Required. The bf16 tiles' operands for fp8 storage. */
    void (*widen_fp8_bf16)(attn_dtype dtype, int count, int dim, const uint8_t *source,
                           int64_t stride, uint16_t *target);
    /* Optional (NULL = dequantize_rows then score_chunk / accumulate_chunk), read in place,
     * for any rows; the decode loop uses them for Q8 always, for FP8 when rows <=
     * ATTN_DECODE_FUSED_ROWS:
     * score_chunk_q8: scores[r * ATTN_DECODE_CHUNK + c] = (factor * row_scales[c]) *
     *                 sum_d queries[r * dim + d] * decode(keys[c * key_stride + d]);
     *     queries: for FP8 the float rows [rows][dim]; for Q8 those rows as
     *     attn_q8_prepare_queries (quant.h) rounded them, once per task.
     * accumulate_chunk_q8: accumulator[r * dim + e] = rescale[r] * accumulator[r * dim + e] +
     *     sum_c (weights[r * ATTN_DECODE_CHUNK + c] * (factor * row_scales[c])) *
     *           decode(values[c * value_stride + e]).
     * (The scale folds into the dot product's result and into the weight: one multiply per
     * key instead of one per element.) For Q8 the products are exact integer sums of int16
     * queries / weights by the int8 elements, rounded as quant.h "Q8 decode arithmetic"
     * states; every registry gives the same bits there.
     * ahead (score_chunk_q8): NULL, or rows that the kernel may request into the L2 cache as
     * it scores, row c as it scores key c (attn_rows_ahead); a hint, the results never depend
     * on it. The decode loop passes the chunk's values (int8 and fp8), instead of requesting
     * them all before the scores, so that the P · V finds them in L2 (docs/inference.md,
     * "Quantized KV cache (int8, fp8)"); the AVX-512 fp8 P · V requests the next chunk's
     * (values_ahead) only when given them, which the loop does for token-major pages alone
     * (on the library's pages, which the hardware prefetchers follow, the requests would
     * only add instructions).
     * keys_ahead / values_ahead: as for score_chunk. */
    void (*score_chunk_q8)(attn_dtype dtype, int rows, int count, int dim, const void *queries,
                           const uint8_t *keys, int64_t key_stride, const float *row_scales,
                           float factor, float *scores, const attn_rows_ahead *ahead,
                           const uint8_t *keys_ahead);
    void (*accumulate_chunk_q8)(attn_dtype dtype, int rows, int count, int dim,
                                const float *weights, const float *rescale,
                                const uint8_t *values, int64_t value_stride,
                                const float *row_scales, float factor, float *accumulator,
                                const uint8_t *values_ahead);
    /* With the two above: 1 when accumulate_chunk_q8 requests the values_ahead rows it is
     * given (AVX-512), 0 when it ignores them (AVX2, generic: their score kernels request the
     * values, `ahead`). On token-major pages the decode loop then leaves the score kernel's
     * requests of the same rows out (decode.c score_requests_values). */
    int accumulate_q8_requests_ahead;

    /* Optional (NULL = score_chunk_q8 / accumulate_chunk_q8): int8 storage (Q8 only) on int8
     * tiles (AMX-INT8), for any group (rows >= 1) with dim <= ATTN_DECODE_Q8_TILE_MOST_DIM
     * keys; the same integers as score_chunk_q8 / accumulate_chunk_q8 with Q8, hence the same
     * bits (quant.h "Q8 decode arithmetic"; each int16 operand is split exactly into two bytes
     * on the tiles).
     * prepare_q8_tile_queries: the query rows [rows][dim] (floats) once per task, rounded to
     * int16 as quant.h states, into prepared (ATTN_DECODE_Q8_TILE_QUERY_BYTES(rows, dim)
     * bytes, 64-byte aligned: the tiles' operands and the rows' scales).
     * score_chunk_q8_tiles: score_chunk_q8(ATTN_DTYPE_Q8, rows, count, dim, queries, ...)
     * on the prepared rows (count <= ATTN_DECODE_CHUNK).
     * accumulate_chunk_q8_tiles: accumulate_chunk_q8(ATTN_DTYPE_Q8, ...), accumulator
     * [rows][dim]; stage: ATTN_DECODE_Q8_TILE_VALUE_BYTES(dim) bytes, 64-byte aligned, where
     * the kernel interleaves the chunk's value rows (any dim).
     * keys_ahead / values_ahead: NULL, or the first of `count` stored rows, key_stride /
     * value_stride apart as the chunk's, that the kernel requests (keys into L2, values into
     * L1) as it goes: the caller passes the next chunk's, found through the block table, so
     * that the requests follow a paged cache's pages (never read: a request never faults,
     * rows past the pool included). */
    void (*prepare_q8_tile_queries)(int rows, int dim, const float *queries, void *prepared);
    void (*score_chunk_q8_tiles)(int rows, int count, int dim, const void *prepared,
                                 const uint8_t *keys, int64_t key_stride,
                                 const float *row_scales, float factor, float *scores,
                                 const uint8_t *keys_ahead);
    void (*accumulate_chunk_q8_tiles)(int rows, int count, int dim, const float *weights,
                                      const float *rescale, const uint8_t *values,
                                      int64_t value_stride, const float *row_scales,
                                      float factor, void *stage, float *accumulator,
                                      const uint8_t *values_ahead);
} attn_decode_kernels;

/* ---------------------------------------------------------------- the registry ---------- */
typedef struct attn_kernels {
    const char *name; /* "generic", "avx2", "avx512", ...: the ISA of the last override */
    attn_forward_kernels forward;
    attn_backward_kernels backward;
    attn_decode_kernels decode;
    /* Low precision (kernels/lowp.h): bf16 tile kernels (AMX > AVX512-BF16 > generic) and
     * the 16-bit <-> fp32 conversions. bf16.name says which tiles run. */
    attn_lowp_kernels bf16;
    attn_lowp_convert convert;
    /* fp16 tile kernels (lowp.h, the same packed layouts): AMX-FP16 where the CPU has it,
     * else the generic reference; f16.name says which. */
    attn_lowp_kernels f16;
    /* 1 when the bf16 tiles beat the fp32 kernels on converted operands (AMX), so that the
     * forward pass computes bf16 operands on them; 0 when converting bf16 to fp32 at packing is
     * as fast or faster (VDPBF16PS runs at half the fp32 FMA rate on Intel cores:
     * bench/results/intel-xeon-amx.md, "Instruction rates"). ATTN_KERNEL_AVX512_BF16 chosen
     * explicitly runs the VDPBF16PS tiles regardless. */
    int bf16_native;
    /* 1 when the forward pass computes F16 operands on the f16 tiles (AMX-FP16); 0: F16 is
     * widened to fp32 at packing and runs on the fp32 kernels. */
    int f16_native;
} attn_kernels;

/*
 * What an ISA folder provides: one table naming its parts. A NULL part, or a NULL slot in a
 * part, keeps what the registry below it has. Override groups (slots that share a private
 * layout, taken together when the first is given, whatever the others hold):
 *   forward {pack_keys, packed_keys_floats, score_tile},
 *   forward {pack_values, packed_values_floats, accumulate_values},
 *   decode  {score_chunk_bf16, prepare_bf16_queries},
 *   decode  {score_chunk_f16, accumulate_chunk_f16},
 *   decode  {score_chunk_bf16_widened, accumulate_chunk_bf16_widened, token_major_in_place_rows},
 *   decode  {score_chunk_group, prepare_group_queries, accumulate_chunk_group},
 *   decode  {score_chunk_q8, accumulate_chunk_q8, accumulate_q8_requests_ahead},
 *   decode  {score_chunk_tiles, prepare_tile_queries, accumulate_chunk_tiles},
 *   decode  {score_chunk_q8_tiles, prepare_q8_tile_queries, accumulate_chunk_q8_tiles}.
 */
typedef struct attn_kernel_isa {
    const char *name;
    const attn_forward_kernels *forward;
    const attn_backward_kernels *backward;
    const attn_decode_kernels *decode;
    const attn_lowp_kernels *bf16;     /* all four slots together (one shared layout) */
    const attn_lowp_convert *convert;  /* all slots together */
    int bf16_native;                   /* taken with bf16 */
    const attn_lowp_kernels *f16;      /* all four slots together */
    int f16_native;                    /* taken with f16 */
} attn_kernel_isa;

extern const attn_kernel_isa attn_isa_generic; /* complete: every slot but the optional ones */
#if defined(ATTN_HAVE_AVX2_KERNELS)
extern const attn_kernel_isa attn_isa_avx2;
#endif
#if defined(ATTN_HAVE_AVX512_KERNELS)
extern const attn_kernel_isa attn_isa_avx512;
#endif
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
extern const attn_kernel_isa attn_isa_avx512bf16; /* on top of avx512 */
extern const attn_kernel_isa attn_isa_avx512bf16_decode; /* added to it on AMD (registry.c) */
#endif
#if defined(ATTN_HAVE_AMX_KERNELS)
extern const attn_kernel_isa attn_isa_amx; /* on top of avx512bf16 */
extern const attn_kernel_isa attn_isa_amx_fp16; /* added to amx where AMX-FP16 is present */
extern const attn_kernel_isa attn_isa_amx_int8; /* added to amx where AMX-INT8 is present */
#endif

/* The registry for `choice` (AUTO = the best this CPU and OS run). Thread-safe; the
 * registry is constant and lives for the whole process. ATTN_ERROR_UNSUPPORTED when the
 * CPU, the OS or the build lacks the requested one; ATTN_ERROR_INVALID_ARGUMENT for a value
 * that is no attn_kernel_choice. On failure *kernels is left as it was. */
attn_status attn_kernels_select(attn_kernel_choice choice, const attn_kernels **kernels,
                                attn_error *error);

/* Whether attn_kernels_select(choice) succeeds on this build, CPU and OS (1) or not (0);
 * AUTO and GENERIC always do. For tests and tools that iterate over every registry. */
int attn_cpu_supports(attn_kernel_choice choice);

/* Every registry this build, CPU and OS run, generic first, in the selector's order (the last
 * is AUTO's): writes up to `capacity` of them to list[] and returns how many there are. For
 * the kernel tests, which check every slot of each against the generic registry. */
int attn_kernels_available(const attn_kernels **list, int capacity);

/* Whether the forward pass computes BF16 operands on the registry's bf16 tiles (its
 * bf16_native, or ATTN_KERNEL_AVX512_BF16 asked for by name) rather than widening them to
 * fp32 at packing; `choice` is the one `kernels` was selected for. */
static inline int attn_kernels_bf16_on_tiles(const attn_kernels *kernels,
                                             attn_kernel_choice choice) {
    return kernels->bf16_native || choice == ATTN_KERNEL_AVX512_BF16;
}

/* Whether the forward pass computes F16 operands on the registry's f16 tiles (f16_native:
 * AMX-FP16) rather than widening them to fp32 at packing. */
static inline int attn_kernels_f16_on_tiles(const attn_kernels *kernels) {
    return kernels->f16_native;
}

/* The 16-bit tile kernels for operands of `dtype`: f16 for ATTN_DTYPE_F16, else bf16. */
static inline const attn_lowp_kernels *attn_kernels_tiles16(const attn_kernels *kernels,
                                                           attn_dtype dtype) {
    return dtype == ATTN_DTYPE_F16 ? &kernels->f16 : &kernels->bf16;
}

/* The name of a choice ("auto", "generic", "avx2", "avx512", "avx512_bf16", "amx"), or NULL
 * for an unknown value,
 * and the inverse: 1 and *choice set for a known name, 0 (and *choice untouched) otherwise.
 * Built or not, every choice has its name (the CLI's --kernel values). */
const char *attn_kernel_choice_name(attn_kernel_choice choice);
int attn_kernel_choice_from_name(const char *name, attn_kernel_choice *choice);

#endif /* ATTN_KERNELS_REGISTRY_H */
