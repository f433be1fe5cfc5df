/*
 * table_avx2.c — the AVX2 + FMA + F16C ISA table (selected by kernels/registry.c on CPUs and
 * OSes with AVX2, FMA and F16C): the shared SIMD kernels at 8 lanes, and the 16-bit
 * conversions of convert_avx2.c.
 */
#include "kernels/simd/parts.h"

const attn_kernel_isa attn_isa_avx2 = {
    .name = "avx2",
    .forward = &attn_avx2_forward,
    .backward = &attn_avx2_backward,
    .decode = &attn_avx2_decode,
    .convert = &attn_lowp_convert_avx2,
};
