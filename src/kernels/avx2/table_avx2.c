/*
 * table_avx2.c — the AVX2 kernel table (selected by dispatch.c on CPUs with AVX2 and FMA).
 * tile_q / tile_k: the tile sizes the backward pass starts from (src/backward). The forward
 * pass no longer uses them: since it packs K/V once per head, it picks its own, smaller query
 * tiles (src/forward/flash_forward.c, measured there; docs/performance.md).
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
