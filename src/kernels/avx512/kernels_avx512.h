/*
 * kernels_avx512.h — the functions of the AVX-512 kernel table (table_avx512.c), one file per
 * family: scores_avx512.c (pack_keys, score_tile), values_avx512.c (pack_values,
 * accumulate_values, scale_rows), softmax_avx512.c (softmax_step). Contract: registry.h.
 *
 * Packed layouts (private to this table):
 *  - keys: blocks of 16 keys; block b holds key (16b + lane) element d at
 *    [b·16·dim + d·16 + lane], zero-filled past `count` (the key index is the SIMD dimension).
 *  - values: [count][padded_dim] with padded_dim = dim rounded up to 16, zero-filled
 *    (the value dimension is the SIMD dimension).
 */
#ifndef ATTN_KERNELS_AVX512_H
#define ATTN_KERNELS_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/registry.h"

#define ATTN_AVX512_LANES 16

size_t attn_avx512_packed_keys_floats(int count, int dim);
size_t attn_avx512_packed_values_floats(int count, int dim);
void attn_avx512_pack_keys(int count, int dim, const float *source, int64_t token_stride,
                           int64_t dim_stride, float *packed);
void attn_avx512_pack_values(int count, int dim, const float *source, int64_t token_stride,
                             int64_t dim_stride, float *packed);
void attn_avx512_score_tile(int rows, int count, int dim, const float *queries,
                            int query_stride, const float *packed_keys, float *scores,
                            int scores_stride);
void attn_avx512_accumulate_values(int rows, int count, int dim, const float *weights,
                                   int weights_stride, const float *packed_values,
                                   float *accumulator, int accumulator_stride);
void attn_avx512_softmax_step(int rows, int count, float *scores, int scores_stride,
                              float scale, float softcap, float *row_max, float *row_sum,
                              float *rescale);
void attn_avx512_scale_rows(int rows, int dim, const float *factor, float *accumulator,
                            int accumulator_stride);

/* The parts of the avx512 ISA table (table_avx512.c). */
extern const attn_forward_kernels attn_avx512_forward;
extern const attn_backward_kernels attn_avx512_backward; /* backward_avx512.c */
extern const attn_decode_kernels attn_avx512_decode;     /* decode_avx512.c */

#endif /* ATTN_KERNELS_AVX512_H */
