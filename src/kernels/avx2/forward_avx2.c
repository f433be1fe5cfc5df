/*
 * forward_avx2.c — the forward part of the AVX2 + FMA + F16C registry: src/kernels/simd/forward_body.h
 * compiled at 8 lanes.
 */
#define ATTN_VEC_WIDTH 8
#include "kernels/simd/forward_body.h"
