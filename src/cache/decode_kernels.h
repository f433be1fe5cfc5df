/*
 * decode_kernels.h — the arithmetic of one decoding task, behind a small table so that an
 * architecture can replace it: convert a chunk of stored keys/values to float32, score the
 * query rows of a GQA group against a chunk of keys, take the online-softmax step of every
 * row, accumulate probability-weighted values. The loop in decode.c owns masks, the split-KV
 * plan and the merge. Tables: generic (decode_generic.c, portable C, the naive reference of
 * the others), AVX2 (src/kernels/avx2/decode_avx2.c) and AVX-512
 * (src/kernels/avx512/decode_avx512.c). Every table is deterministic (a fixed operation
 * order for any input and thread count); results agree with the generic table to float
 * rounding of the dot products and of exp.
 */
#ifndef ATTN_CACHE_DECODE_KERNELS_H
#define ATTN_CACHE_DECODE_KERNELS_H

#include <stdint.h>

#include "attn.h"

/* Keys per chunk: the unit of scoring, masking and accumulation (a chunk never crosses a
 * page boundary, so it may be shorter). */
#define ATTN_DECODE_CHUNK 64

/* Largest group (query rows per task) that reads bfloat16 storage directly when the table
 * can (score_chunk_bf16); larger groups convert each chunk once into a float32 buffer. */
#define ATTN_DECODE_FUSED_ROWS 4

typedef struct attn_decode_kernels {
    const char *name;
    /* target[e] = float(source[e]) for e < count, where source holds bfloat16 (or IEEE half)
     * elements. */
    void (*bf16_to_f32)(int64_t count, const uint16_t *source, float *target);
    void (*f16_to_f32)(int64_t count, const uint16_t *source, float *target);
    /* scores[r * ATTN_DECODE_CHUNK + c] = sum_d queries[r * dim + d] * keys[c * key_stride + d]
     * for r < rows, c < count (<= ATTN_DECODE_CHUNK). */
    void (*score_chunk)(int rows, int count, int dim, const float *queries, const float *keys,
                        int64_t key_stride, float *scores);
    /* The online-softmax step of one chunk for r < rows (math reference §2.1), on the logits
     * x[c] = scale * scores[r * ATTN_DECODE_CHUNK + c] (c < count; -inf = masked):
     *   m = max(row_max[r], max_c x[c]);  u = (m == -inf ? 0 : m)
     *   scores[r * ATTN_DECODE_CHUNK + c] = exp(x[c] - u)   (exactly 0 for a masked key)
     *   rescale[r] = row_max[r] == -inf ? 0 : exp(row_max[r] - u)
     *   row_sum[r] = rescale[r] * row_sum[r] + sum_c exp(x[c] - u);  row_max[r] = m. */
    void (*softmax_chunk)(int rows, int count, float scale, float *scores, float *row_max,
                          float *row_sum, float *rescale);
    /* accumulator[r * dim + e] = rescale[r] * accumulator[r * dim + e] +
     *                            sum_c weights[r * ATTN_DECODE_CHUNK + c] *
     *                                  values[c * value_stride + e]      for r < rows, e < dim. */
    void (*accumulate_chunk)(int rows, int count, int dim, const float *weights,
                             const float *rescale, const float *values, int64_t value_stride,
                             float *accumulator);
    /* Optional (NULL = convert to float32 first): score_chunk and accumulate_chunk reading
     * bfloat16 keys / values as stored (strides in elements), widening them in registers.
     * Used for small groups (rows <= ATTN_DECODE_FUSED_ROWS), where each stored element is
     * read once or twice, so a conversion pass through a buffer would cost more than it
     * saves. */
    void (*score_chunk_bf16)(int rows, int count, int dim, const float *queries,
                             const uint16_t *keys, int64_t key_stride, float *scores);
    void (*accumulate_chunk_bf16)(int rows, int count, int dim, const float *weights,
                                  const float *rescale, const uint16_t *values,
                                  int64_t value_stride, float *accumulator);
    /* Optional (NULL = score_chunk_bf16 reads the queries as they are): rewrites the query
     * rows [rows][dim] once per task into the order score_chunk_bf16 reads them,
     * prepared[rows][ATTN_DECODE_PREPARED_DIM(dim)] (for instance even and odd dimensions
     * apart, matching bfloat16 pairs widened without a shuffle; padding is 0). */
    void (*prepare_bf16_queries)(int rows, int dim, const float *queries, float *prepared);
} attn_decode_kernels;

/* Floats per prepared query row: dim rounded up to a multiple of 32. */
#define ATTN_DECODE_PREPARED_DIM(dim) (((dim) + 31) / 32 * 32)

extern const attn_decode_kernels attn_decode_kernels_generic;
#if defined(ATTN_HAVE_AVX2_KERNELS)
extern const attn_decode_kernels attn_decode_kernels_avx2;
#endif
#if defined(ATTN_HAVE_AVX512_KERNELS)
extern const attn_decode_kernels attn_decode_kernels_avx512;
#endif

/* The table for `choice` (AUTO: the fastest this CPU runs, AVX-512 then AVX2 then generic).
 * ATTN_ERROR_UNSUPPORTED when the CPU or the build lacks the requested family. */
attn_status attn_select_decode_kernels(attn_kernel_choice choice,
                                       const attn_decode_kernels **table, attn_error *error);

#endif /* ATTN_CACHE_DECODE_KERNELS_H */
