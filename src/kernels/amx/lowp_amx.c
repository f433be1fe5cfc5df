/*
 * lowp_amx.c — the AMX bf16 kernel table of lowp.h: the tile algorithms of amx_tiles.h on
 * real tiles (LDTILECFG, TILELOADD, TDPBF16PS, TILESTORED). Compiled with -mamx-tile
 * -mamx-bf16 (cmake/kernels.cmake); the registry selects it only when CPUID reports AMX-TILE
 * and AMX-BF16, XCR0 enables the tile state and Linux granted XTILEDATA to the process
 * (cpu_features). Packing is the shared pair layout, done by the AVX512-BF16 table's code
 * when that is built (every AMX CPU has AVX512-BF16), else the generic code.
 */
#include <immintrin.h>

#include "kernels/registry.h"

#define AMX_NAME(x) attn_amx_##x
#define AMX_CONFIGURE(config) _tile_loadconfig(config)
#define AMX_RELEASE() _tile_release()
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, base, stride) _tile_loadd(t, base, stride)
#define AMX_STORE(t, base, stride) _tile_stored(t, base, stride)
#define AMX_DPBF16(c, a, b) _tile_dpbf16ps(c, a, b)

/* P rounded to bf16 32 at a time by the AVX512-BF16 code (every AMX CPU has AVX512-BF16). */
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
#define AMX_ROUND_ROW(destination, source, n, padded) \
    attn_lowp_avx512bf16_round_row(destination, source, n, padded)
#endif
#include "amx_tiles.h"

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

/* The AMX ISA table: on top of the AVX512-BF16 registry, only the bf16 tiles change. */
const attn_kernel_isa attn_isa_amx = {
    .name = "amx",
    .bf16 = &attn_lowp_amx,
    .bf16_native = 1,
};
