/*
 * table_avx512.c — the AVX-512 ISA table (selected by kernels/registry.c on CPUs and OSes with
 * AVX-512 F, DQ, BW and VL): the shared SIMD kernels at 16 lanes, and the bfloat16 decode
 * kernels of this width.
 */
#include "kernels/simd/parts.h"

const attn_kernel_isa attn_isa_avx512 = {
    .name = "avx512",
    .forward = &attn_avx512_forward,
    .backward = &attn_avx512_backward,
    .decode = &attn_avx512_decode,
};
