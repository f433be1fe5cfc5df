/*
 * table_avx512.c — the AVX-512 ISA table: its forward part and the parts of backward_avx512.c
 * and decode_avx512.c (selected by kernels/registry.c on CPUs and OSes with AVX-512 F, DQ,
 * BW and VL).
 */
#include "kernels_avx512.h"

const attn_forward_kernels attn_avx512_forward = {
    .packed_keys_floats = attn_avx512_packed_keys_floats,
    .packed_values_floats = attn_avx512_packed_values_floats,
    .pack_keys = attn_avx512_pack_keys,
    .pack_values = attn_avx512_pack_values,
    .score_tile = attn_avx512_score_tile,
    .accumulate_values = attn_avx512_accumulate_values,
    .softmax_step = attn_avx512_softmax_step,
    .scale_rows = attn_avx512_scale_rows,
};

const attn_kernel_isa attn_isa_avx512 = {
    .name = "avx512",
    .forward = &attn_avx512_forward,
    .backward = &attn_avx512_backward,
    .decode = &attn_avx512_decode,
};
