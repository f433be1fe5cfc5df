/*
 * kernels_avx2.h — the functions of the AVX2 kernel table (table_avx2.c), one file per
 * family: scores_avx2.c (pack_keys, score_tile), values_avx2.c (pack_values,
 * accumulate_values, scale_rows), softmax_avx2.c (softmax_step). Contract: registry.h.
 *
 * Packed layouts (private to this table):
 *  - keys: blocks of 8 keys; block b holds key (8b + lane) element d at
 *    [b·8·dim + d·8 + lane], zero-filled past `count` (the key index is the SIMD dimension).
 *  - values: [count][padded_dim] with padded_dim = dim rounded up to 8, zero-filled
 *    (the value dimension is the SIMD dimension).
 */
#ifndef ATTN_KERNELS_AVX2_H
#define ATTN_KERNELS_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/registry.h"

#define ATTN_AVX2_LANES 8

size_t attn_avx2_packed_keys_floats(int count, int dim);
size_t attn_avx2_packed_values_floats(int count, int dim);
void attn_avx2_pack_keys(int count, int dim, const float *source, int64_t token_stride,
                         int64_t dim_stride, float *packed);
void attn_avx2_pack_values(int count, int dim, const float *source, int64_t token_stride,
                           int64_t dim_stride, float *packed);
void attn_avx2_score_tile(int rows, int count, int dim, const float *queries,
                          int query_stride, const float *packed_keys, float *scores,
                          int scores_stride);
void attn_avx2_accumulate_values(int rows, int count, int dim, const float *weights,
                                 int weights_stride, const float *packed_values,
                                 float *accumulator, int accumulator_stride);
void attn_avx2_softmax_step(int rows, int count, float *scores, int scores_stride,
                            float scale, float softcap, float *row_max, float *row_sum,
                            float *rescale);
void attn_avx2_scale_rows(int rows, int dim, const float *factor, float *accumulator,
                          int accumulator_stride);

/* The parts of the avx2 ISA table (table_avx2.c). */
extern const attn_forward_kernels attn_avx2_forward;
extern const attn_backward_kernels attn_avx2_backward; /* backward_avx2.c */
extern const attn_decode_kernels attn_avx2_decode;     /* decode_avx2.c */

#endif /* ATTN_KERNELS_AVX2_H */
