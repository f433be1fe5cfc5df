/*
 * forward_avx512.c — the forward part of the AVX-512 registry: src/kernels/simd/forward_body.h
 * compiled at 16 lanes.
 */
#define ATTN_VEC_WIDTH 16
#include "kernels/simd/forward_body.h"
