/*
 * table_avx2.c — the AVX2 kernel table (selected by dispatch.c on CPUs with AVX2 and FMA).
 * Tile sizes (rows per work item over the GQA group's heads, keys per tile), measured on the
 * 2-core Zen 4 dev machine (docs/performance.md): 256 query rows amortise the per-item packing
 * of each K/V tile 4x better than 64 (+20% GFLOP per CPU-second at D = 64, T = 2048); 128 keys
 * keep a packed K tile (128 x D floats, 32-64 KiB) near L1 and the score tile in L2.
 */
#include "../kernel.h"
#include "kernels_avx2.h"

const attn_kernel_table attn_kernels_avx2 = {
    .name = "avx2",
    .tile_q = 256,
    .tile_k = 128,
    .packed_keys_floats = attn_avx2_packed_keys_floats,
    .packed_values_floats = attn_avx2_packed_values_floats,
    .pack_keys = attn_avx2_pack_keys,
    .pack_values = attn_avx2_pack_values,
    .score_tile = attn_avx2_score_tile,
    .accumulate_values = attn_avx2_accumulate_values,
    .softmax_step = attn_avx2_softmax_step,
    .scale_rows = attn_avx2_scale_rows,
};
