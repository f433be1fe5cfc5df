/*
 * lowp_amx.c — the AMX kernel tables of lowp.h: the tile algorithms of amx_tiles.h on real
 * tiles (STTILECFG / LDTILECFG, TILELOADD, TDPBF16PS or TDPFP16PS, TILESTORED), once for bf16
 * operands (attn_lowp_amx, AMX-BF16) and once for fp16 operands (attn_lowp_amx_fp16,
 * AMX-FP16, TDPFP16PS written as bytes: amx_fp16.h). Compiled with -mamx-tile -mamx-bf16
 * -mamx-int8
 * (cmake/kernels.cmake); the registry selects the bf16 table only when CPUID reports AMX-TILE
 * and AMX-BF16, XCR0 enables the tile state and Linux granted XTILEDATA to the process
 * (cpu_features), the fp16 table only when CPUID also reports AMX-FP16, and the int8 decode
 * table (decode_q8_amx.h, TDPBSSD / TDPBUSD) only with AMX-INT8. Packing is the
 * shared pair layout (the same bytes for bf16 and fp16), done by the AVX512-BF16 table's code
 * when that is built (every AMX CPU has AVX512-BF16), else the generic code.
 */
#include <immintrin.h>

#include "kernels/amx/amx_fp16.h"
#include "kernels/registry.h"

/* gcc's tile-load intrinsic (gcc 12) declares no memory input, so the compiler may sink the
 * stores that fill a staging buffer past the TILELOADD that reads it (or drop them as dead):
 * a compiler barrier before each tile instruction that reads or writes memory keeps program
 * order. TILESTORED, LDTILECFG and STTILECFG declare their memory; the barrier costs nothing
 * on them either. */
#define AMX_BARRIER() __asm__ volatile("" ::: "memory")
#define AMX_CONFIGURE(config)                                                               \
    do {                                                                                   \
        AMX_BARRIER();                                                                     \
        _tile_loadconfig(config);                                                          \
    } while (0)
#define AMX_READ_CONFIG(config)                                                             \
    do {                                                                                   \
        AMX_BARRIER();                                                                     \
        _tile_storeconfig(config);                                                         \
        AMX_BARRIER();                                                                     \
    } while (0)
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, base, stride)                                                           \
    do {                                                                                   \
        AMX_BARRIER();                                                                     \
        _tile_loadd(t, base, stride);                                                      \
    } while (0)
#define AMX_STORE(t, base, stride)                                                          \
    do {                                                                                   \
        _tile_stored(t, base, stride);                                                     \
        AMX_BARRIER();                                                                     \
    } while (0)
#define AMX_DPBF16(c, a, b) _tile_dpbf16ps(c, a, b)
#define AMX_DPFP16(c, a, b) ATTN_TDPFP16PS(c, a, b)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define AMX_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)

/* bf16: P rounded 32 at a time by VCVTNE2PS2BF16 (every AMX CPU has AVX512-BF16). */
#define AMX_NAME(x) attn_amx_##x
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
#define AMX_ROUND_ROW(destination, source, n, padded) \
    attn_lowp_avx512bf16_round_row(destination, source, n, padded)
#endif
#include "amx_tiles.h"
#undef AMX_NAME

/* fp16: P rounded 16 at a time by VCVTPS2PH (F16C / AVX512F). */
#define AMX_NAME(x) attn_amx_fp16_##x
#define AMX_F16 1
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
#define AMX_ROUND_ROW(destination, source, n, padded) \
    attn_lowp_avx512_round_row_f16(destination, source, n, padded)
#endif
#include "amx_tiles.h"
#undef AMX_NAME

/* Packing: the AVX512-BF16 table's (every AMX CPU has AVX512-BF16), else the generic one. */
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
#define AMX_PACK(x) attn_lowp_avx512bf16_##x
#else
#define AMX_PACK(x) attn_lowp_generic_##x
#endif

const attn_lowp_kernels attn_lowp_amx = {
    .name = "amx",
    .pack_keys = AMX_PACK(pack_keys),
    .pack_values = AMX_PACK(pack_values),
    .score_tile = attn_amx_score_tile,
    .accumulate_values = attn_amx_accumulate_values,
};

const attn_lowp_kernels attn_lowp_amx_fp16 = {
    .name = "amx_fp16",
    .pack_keys = AMX_PACK(pack_keys),
    .pack_values = AMX_PACK(pack_values),
    .score_tile = attn_amx_fp16_score_tile,
    .accumulate_values = attn_amx_fp16_accumulate_values,
};

#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
#include "decode_amx.h" /* the decode part: bf16 queries of large groups on tiles */
#endif
#include "decode_q8_amx.h" /* ... and int8 storage on int8 tiles (AMX-INT8) */

/* The AMX ISA table: on top of the AVX512-BF16 registry, the bf16 tiles (and the decode tiles) change. */
const attn_kernel_isa attn_isa_amx = {
    .name = "amx",
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
    .decode = &attn_amx_decode,
#endif
    .bf16 = &attn_lowp_amx,
    .bf16_native = 1,
};

/* Added to the AMX registry where the CPU also has AMX-FP16: fp16 operands on the tiles. */
const attn_kernel_isa attn_isa_amx_fp16 = {
    .name = "amx",
    .f16 = &attn_lowp_amx_fp16,
    .f16_native = 1,
};

/* Added to the AMX registry where the CPU also has AMX-INT8: int8 KV storage decoded on int8
 * tiles. */
const attn_kernel_isa attn_isa_amx_int8 = {
    .name = "amx",
    .decode = &attn_amx_q8_decode,
};
