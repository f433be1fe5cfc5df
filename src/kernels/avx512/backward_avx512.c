/*
 * backward_avx512.c — the backward part of the AVX-512 registry:
 * src/kernels/simd/backward_body.h compiled at 16 lanes.
 */
#define ATTN_VEC_WIDTH 16
#include "kernels/simd/backward_body.h"
