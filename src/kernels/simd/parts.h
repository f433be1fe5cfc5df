/*
 * parts.h — the names of the registry parts a SIMD width exports (forward_<isa>.c,
 * backward_<isa>.c, decode_<isa>.c), for the ISA table that collects them (table_<isa>.c).
 */
#ifndef ATTN_KERNELS_SIMD_PARTS_H
#define ATTN_KERNELS_SIMD_PARTS_H

#include "kernels/registry.h"

extern const attn_forward_kernels attn_avx2_forward, attn_avx512_forward;
extern const attn_backward_kernels attn_avx2_backward, attn_avx512_backward;
extern const attn_decode_kernels attn_avx2_decode, attn_avx512_decode;
/* registry.h philox_blocks on AVX2 (philox_avx2.c): the AVX2 and AVX-512 forward tables'. */
void attn_philox_blocks_avx2(uint64_t key, uint64_t first, uint32_t row, uint32_t stream,
                             int blocks, uint32_t *draws);
/* Only the 8-bit slots (score_chunk_q8, accumulate_chunk_q8), without VNNI, VBMI, GFNI: tests. */
extern const attn_decode_kernels attn_avx512_q8_baseline;

#endif /* ATTN_KERNELS_SIMD_PARTS_H */
