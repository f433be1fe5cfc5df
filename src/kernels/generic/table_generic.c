/*
 * table_generic.c — the portable ISA table: the base of every registry (kernels/registry.h).
 */
#include "kernels/generic/generic.h"

const attn_kernel_isa attn_isa_generic = {
    .name = "generic",
    .forward = &attn_generic_forward,
    .backward = &attn_generic_backward,
    .decode = &attn_generic_decode,
    .bf16 = &attn_lowp_generic,
    .convert = &attn_lowp_convert_generic,
    .bf16_native = 0,
    .f16 = &attn_lowp_generic_f16,
    .f16_native = 0,
};
