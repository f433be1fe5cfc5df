/*
 * table_avx512bf16.c — the AVX512-BF16 ISA table: on top of the AVX-512 registry, the
 * VDPBF16PS bf16 tiles (lowp_avx512bf16.c) and the AVX-512 / F16C conversions
 * (convert_avx512.c). fp32 slots are the AVX-512 ones. bf16_native = 0: Intel cores issue
 * VDPBF16PS (32 flops) at half the rate of two 16-lane FMAs (64 flops;
 * bench/results/intel-xeon-amx.md, "Instruction rates"), so AUTO computes bf16 operands with
 * the fp32 kernels after conversion at packing; choosing ATTN_KERNEL_AVX512_BF16 runs these
 * tiles.
 */
#include "kernels/registry.h"

const attn_kernel_isa attn_isa_avx512bf16 = {
    .name = "avx512_bf16",
    .bf16 = &attn_lowp_avx512bf16,
    .convert = &attn_lowp_convert_avx512,
    .bf16_native = 0,
};
