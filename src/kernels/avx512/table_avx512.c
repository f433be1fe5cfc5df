/*
 * table_avx512.c — the AVX-512 kernel table (selected by dispatch.c on CPUs with AVX-512 F,
 * DQ, BW and VL). Tile sizes: see docs/performance.md for the measurements behind them.
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
