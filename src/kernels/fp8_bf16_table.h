/*
 * fp8_bf16_table.h — the byte tables that widen fp8 (E4M3, E5M2) codes to bf16 with 128-entry
 * byte lookups (VPERMI2B, AVX512-VBMI): for each 7-bit magnitude code, the low and the high
 * byte of the bf16 bits of its value (kernels/quant.h decode: exact, every fp8 value is a
 * bf16 value); the sign bit is ORed into the high byte by the caller. Built once per process;
 * read by the AVX-512 widening (avx512/decode_q8_avx512.h) and by the VDPBF16PS kernels that
 * read fp8 in place (avx512bf16/decode_avx512bf16.c).
 */
#ifndef ATTN_KERNELS_FP8_BF16_TABLE_H
#define ATTN_KERNELS_FP8_BF16_TABLE_H

#include <stdint.h>

typedef struct attn_fp8_bf16_lookup {
    uint8_t low[2][128] __attribute__((aligned(64)));  /* [E4M3, E5M2][magnitude code] */
    uint8_t high[2][128] __attribute__((aligned(64)));
    /* place[half][2 j], [2 j + 1] = byte indexes (into low : high, 128 bytes) of word j of
     * elements [32 half, 32 half + 32): low[32 half + j], high[32 half + j] */
    uint8_t place[2][64] __attribute__((aligned(64)));
} attn_fp8_bf16_lookup;

/* The tables (built on the first call; thread-safe; never NULL). */
const attn_fp8_bf16_lookup *attn_fp8_bf16_lookup_get(void);

#endif /* ATTN_KERNELS_FP8_BF16_TABLE_H */
