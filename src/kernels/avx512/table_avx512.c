/*
 * table_avx512.c — the AVX-512 kernel table (selected by dispatch.c on CPUs with AVX-512 F,
 * DQ, BW and VL).
 * Tile sizes (rows per work item over the GQA group's heads, keys per tile), measured on the
 * 2-core Zen 4 dev machine (docs/performance.md): 256 query rows amortise the per-item packing
 * of each K/V tile 4x better than 64 (+20% GFLOP per CPU-second at D = 64, T = 2048); 128 keys
 * keep a packed K tile (128 x D floats, 32-64 KiB) near L1 and the score tile in L2.
 */
#include "../kernel.h"
#include "kernels_avx512.h"

const attn_kernel_table attn_kernels_avx512 = {
    .name = "avx512",
    .tile_q = 256,
    .tile_k = 128,
    .packed_keys_floats = attn_avx512_packed_keys_floats,
    .packed_values_floats = attn_avx512_packed_values_floats,
    .pack_keys = attn_avx512_pack_keys,
    .pack_values = attn_avx512_pack_values,
    .score_tile = attn_avx512_score_tile,
    .accumulate_values = attn_avx512_accumulate_values,
    .softmax_step = attn_avx512_softmax_step,
    .scale_rows = attn_avx512_scale_rows,
};
