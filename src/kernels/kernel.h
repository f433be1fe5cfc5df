/*
 * kernel.h — the micro-kernel contract between the portable loop nest (src/forward,
 * src/backward, src/cache) and the architecture kernels (src/kernels/<arch>/).
 *
 * The loop nest owns tiling, masks, threading and the online-softmax bookkeeping; a kernel
 * table owns only the arithmetic on small packed tiles. Each architecture provides one
 * attn_kernel_table; dispatch.c picks one at run time from CPUID (or from the caller's
 * attn_kernel_choice). Every table must give results within 1e-6 relative of the generic
 * one and must be deterministic (same inputs, same bits).
 *
 * Packed layouts are private to a table: the loop only asks for their size, packs through
 * the table, and hands the packed buffers back to the same table. Buffers are 64-byte
 * aligned (attn_aligned_alloc). Sizes are small (a tile), so ints are used.
 *
 * Prefix property (every table): a buffer packed from `count` keys (values) is also a valid
 * packed buffer of its first `count2` keys (values), for any 1 <= count2 <= count, as far as
 * score_tile (accumulate_values) with count2 is concerned. The forward pass packs each key
 * tile of a head once and uses it for query tiles that need only a prefix of it
 * (tests/test_kernels_tiles.c checks this).
 */
#ifndef ATTN_KERNEL_H
#define ATTN_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

typedef struct attn_kernel_table {
    const char *name; /* "generic", "avx2", "avx512" */

    /* Preferred tile sizes for this kernel (rows of queries, columns of keys); used by the
     * backward pass. The forward pass sets its own (src/forward/flash_forward.c). */
    int tile_q;
    int tile_k;

    /* Number of floats a packed tile of `count` keys (or values) of dimension `dim` needs. */
    size_t (*packed_keys_floats)(int count, int dim);
    size_t (*packed_values_floats)(int count, int dim);

    /* Packs `count` keys: key c, element d is at source[c*token_stride + d*dim_stride]. */
    void (*pack_keys)(int count, int dim, const float *source, int64_t token_stride,
                      int64_t dim_stride, float *packed);
    /* Packs `count` value rows the same way (layout suited to accumulate_values). */
    void (*pack_values)(int count, int dim, const float *source, int64_t token_stride,
                        int64_t dim_stride, float *packed);

    /* scores[r*scores_stride + c] = sum_d queries[r*query_stride + d] * key_c[d]
     * for r < rows, c < count. queries: contiguous rows of `dim` floats (query_stride >= dim). */
    void (*score_tile)(int rows, int count, int dim, const float *queries, int query_stride,
                       const float *packed_keys, float *scores, int scores_stride);

    /* accumulator[r*accumulator_stride + e] += sum_c weights[r*weights_stride + c] * value_c[e]
     * for r < rows, e < dim. */
    void (*accumulate_values)(int rows, int count, int dim, const float *weights,
                              int weights_stride, const float *packed_values,
                              float *accumulator, int accumulator_stride);

    /*
     * One online-softmax step over a score tile, fused, per row r < rows:
     *   x_c = scores[r][c] * scale; if softcap > 0: x_c = softcap * tanh(x_c / softcap)
     *   (masked entries arrive as -inf and stay -inf; scale = 1, softcap = 0 when the loop
     *    has already transformed the tile itself)
     *   m_new = max(row_max[r], max_c x_c);  m_use = (m_new == -inf) ? 0 : m_new
     *   rescale[r] = exp(row_max[r] - m_use)   (0 when row_max[r] == -inf)
     *   scores[r][c] = exp(x_c - m_use)        (probabilities, in place)
     *   row_sum[r] = rescale[r] * row_sum[r] + sum_c scores[r][c];  row_max[r] = m_new
     */
    void (*softmax_step)(int rows, int count, float *scores, int scores_stride, float scale,
                         float softcap, float *row_max, float *row_sum, float *rescale);

    /* accumulator[r][e] *= factor[r] for r < rows, e < dim. */
    void (*scale_rows)(int rows, int dim, const float *factor, float *accumulator,
                       int accumulator_stride);
} attn_kernel_table;

/* The tables compiled into this build (a table is NULL-free once returned). */
extern const attn_kernel_table attn_kernels_generic;
#if defined(ATTN_HAVE_AVX2_KERNELS)
extern const attn_kernel_table attn_kernels_avx2;
#endif
#if defined(ATTN_HAVE_AVX512_KERNELS)
extern const attn_kernel_table attn_kernels_avx512;
#endif

/* The table for `choice` (AUTO = the best this CPU runs). ATTN_ERROR_UNSUPPORTED when the
 * CPU or the build lacks the requested one. */
attn_status attn_select_kernels(attn_kernel_choice choice, const attn_kernel_table **table,
                                attn_error *error);

/* Whether this CPU can run a kernel family (for tests that iterate over every kernel). */
int attn_cpu_supports(attn_kernel_choice choice);

#endif /* ATTN_KERNEL_H */
