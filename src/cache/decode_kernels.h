/*
 * decode_kernels.h — the arithmetic of one decoding task, behind a small table so that an
 * architecture can replace it: convert a chunk of stored keys/values to float32, score query
 * rows against a chunk of keys, accumulate probability-weighted values. The loop in decode.c
 * owns masks, the online softmax and the split-KV merge. Tables: generic (decode_generic.c,
 * portable C, the naive reference of the others) and AVX-512
 * (src/kernels/avx512/decode_avx512.c). Every table is deterministic; results agree with the
 * generic table to float rounding of the dot products.
 */
#ifndef ATTN_CACHE_DECODE_KERNELS_H
#define ATTN_CACHE_DECODE_KERNELS_H

#include <stdint.h>

#include "attn.h"

/* Keys per chunk: the unit of scoring, masking and accumulation (a chunk never crosses a
 * page boundary, so it may be shorter). */
#define ATTN_DECODE_CHUNK 64

typedef struct attn_decode_kernels {
    const char *name;
    /* target[c * dim + e] = float(source[c * dim + e]) for c < count, e < dim, where source
     * holds bfloat16 (or IEEE half) elements. */
    void (*bf16_to_f32)(int64_t count, const uint16_t *source, float *target);
    void (*f16_to_f32)(int64_t count, const uint16_t *source, float *target);
    /* scores[r * ATTN_DECODE_CHUNK + c] = sum_d queries[r * dim + d] * keys[c * key_stride + d]
     * for r < rows, c < count (<= ATTN_DECODE_CHUNK). */
    void (*score_chunk)(int rows, int count, int dim, const float *queries, const float *keys,
                        int64_t key_stride, float *scores);
    /* accumulator[r * dim + e] += sum_c weights[r * ATTN_DECODE_CHUNK + c] *
     *                             values[c * value_stride + e]   for r < rows, e < dim. */
    void (*accumulate_chunk)(int rows, int count, int dim, const float *weights,
                             const float *values, int64_t value_stride, float *accumulator);
} attn_decode_kernels;

extern const attn_decode_kernels attn_decode_kernels_generic;
#if defined(ATTN_HAVE_AVX512_KERNELS)
extern const attn_decode_kernels attn_decode_kernels_avx512;
#endif

/* The table for `choice` (AUTO: the fastest this CPU runs). ATTN_ERROR_UNSUPPORTED when the
 * CPU lacks the requested family. AVX2 requests run the generic table (there is no AVX2
 * decode table; the compiler vectorises the generic one). */
attn_status attn_select_decode_kernels(attn_kernel_choice choice,
                                       const attn_decode_kernels **table, attn_error *error);

#endif /* ATTN_CACHE_DECODE_KERNELS_H */
