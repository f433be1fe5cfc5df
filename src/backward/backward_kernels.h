/*
 * backward_kernels.h — the backward pass's own small kernel table: the tile operations that
 * the forward's table (src/kernels/kernel.h) does not have. The backward uses both tables:
 * the forward's score_tile for S = Q·Kᵀ and dP = dO·Vᵀ (keys packed by that table), and this
 * one for the products that read P and dS as they are (no transposes, no value packing) and
 * for the elementwise steps.
 *
 * Implementations: backward_kernels_generic.c (plain C, the reference the SIMD ones are
 * checked against), src/kernels/avx2/backward_avx2.c, src/kernels/avx512/backward_avx512.c.
 * Every table must be deterministic (same inputs, same bits) and sum `inner` in index order.
 * Rows are unit-stride; strides are in floats. The `values` rows of the products are read in
 * whole SIMD vectors: each must have ATTN_BACKWARD_ROW_FLOATS(dim) readable floats (the floats
 * past dim are read but never affect the result), so the loop keeps its copies of Q, dO and K
 * in rows padded to that length.
 */
#ifndef ATTN_BACKWARD_KERNELS_H
#define ATTN_BACKWARD_KERNELS_H

#include "../kernels/kernel.h"

/* Readable floats a `values` row of dimension dim needs (dim rounded up to 16 floats). */
#define ATTN_BACKWARD_ROW_FLOATS(dim) (((dim) + 15) / 16 * 16)

typedef struct attn_backward_kernel_table {
    const char *name; /* "generic", "avx2", "avx512": the forward table it pairs with */

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
} attn_backward_kernel_table;

extern const attn_backward_kernel_table attn_backward_kernels_generic;
#if defined(ATTN_HAVE_AVX2_KERNELS)
extern const attn_backward_kernel_table attn_backward_kernels_avx2;
#endif
#if defined(ATTN_HAVE_AVX512_KERNELS)
extern const attn_backward_kernel_table attn_backward_kernels_avx512;
#endif

/* The backward table of the same family as the forward table `kernels` (which
 * attn_select_kernels chose from options->kernel, so CPU support is already checked). */
const attn_backward_kernel_table *attn_backward_kernels_for(const attn_kernel_table *kernels);

#endif /* ATTN_BACKWARD_KERNELS_H */
