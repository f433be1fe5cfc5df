/*
 * table_avx2.c — the AVX2 ISA table: its forward part and the parts of backward_avx2.c and
 * decode_avx2.c (selected by kernels/registry.c on CPUs and OSes with AVX2 and FMA).
 */
#include "kernels_avx2.h"

const attn_forward_kernels attn_avx2_forward = {
    .packed_keys_floats = attn_avx2_packed_keys_floats,
    .packed_values_floats = attn_avx2_packed_values_floats,
    .pack_keys = attn_avx2_pack_keys,
    .pack_values = attn_avx2_pack_values,
    .score_tile = attn_avx2_score_tile,
    .accumulate_values = attn_avx2_accumulate_values,
    .softmax_step = attn_avx2_softmax_step,
    .scale_rows = attn_avx2_scale_rows,
};

const attn_kernel_isa attn_isa_avx2 = {
    .name = "avx2",
    .forward = &attn_avx2_forward,
    .backward = &attn_avx2_backward,
    .decode = &attn_avx2_decode,
};
