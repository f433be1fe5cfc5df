/*
 * amx_emulation.h — the AMX tile algorithms of src/kernels/amx/amx_tiles.h (bf16 TDPBF16PS and
 * fp16 TDPFP16PS; the int8 TDPBSSD / TDPBUSD of amx/decode_q8_amx.h) on a portable emulation
 * of the tile instructions, for the tests on machines
 * without AMX: test_lowp_kernels.c (the kernels against double, the configuration reuse) and
 * test_forward_lowp.c (the forward pass on emulated AMX-FP16 tiles). Each test that includes
 * it gets its own static copy.
 *
 * Tables: emulated_amx / emulated_amx_f16 (generic packing, scalar rounding of P), and with
 * the AVX512-BF16 build emulated_amx_avx512 / emulated_amx_f16_avx512, configured exactly as
 * src/kernels/amx/lowp_amx.c is (AVX512-BF16 packing; P rounded by VCVTNE2PS2BF16 / VCVTPS2PH;
 * these need a CPU with AVX512-BF16).
 */
#ifndef ATTN_TEST_AMX_EMULATION_H
#define ATTN_TEST_AMX_EMULATION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/lowp.h"

/* ---- the AMX tile algorithm on emulated tiles (16 rows × 64 bytes each) ----
 * The state is per thread, as the hardware's is: the tiles, the loaded configuration (64 zero
 * bytes = not configured: never loaded, or released), how many LDTILECFGs this thread ran, and
 * how many tile operations ran on a tile not configured as 16 rows × 64 bytes (a fault on
 * hardware: #UD without a configuration, truncated rows with another one). */
static _Thread_local unsigned char emulated_tiles[8][16][64];
static _Thread_local uint8_t emulated_config[64];
static _Thread_local int emulated_config_loads, emulated_faults;

static void emulated_check(int t) {
    emulated_faults += emulated_config[0] != 1 || emulated_config[16 + 2 * t] != 64 ||
                       emulated_config[17 + 2 * t] != 0 || emulated_config[48 + t] != 16;
}
static void emulated_configure(const void *config) { /* LDTILECFG zeroes the tiles */
    memcpy(emulated_config, config, 64);
    memset(emulated_tiles, 0, sizeof emulated_tiles);
    ++emulated_config_loads;
}
static inline void emulated_release(void) { /* TILERELEASE: back to INIT */
    memset(emulated_config, 0, 64);
    memset(emulated_tiles, 0, sizeof emulated_tiles);
}
static void emulated_load(int t, const void *base, int stride) {
    emulated_check(t);
    for (int r = 0; r < 16; ++r) memcpy(emulated_tiles[t][r], (const char *)base + (size_t)r * stride, 64);
}
static void emulated_store(int t, void *base, int stride) {
    emulated_check(t);
    for (int r = 0; r < 16; ++r) memcpy((char *)base + (size_t)r * stride, emulated_tiles[t][r], 64);
}
static void emulated_zero(int t) {
    emulated_check(t);
    memset(emulated_tiles[t], 0, sizeof emulated_tiles[t]);
}
static float emulated_bf16_value(const unsigned char *bytes) {
    uint16_t h;
    memcpy(&h, bytes, 2);
    uint32_t bits = (uint32_t)h << 16;
    float x;
    memcpy(&x, &bits, 4);
    return x;
}
static float emulated_f16_value(const unsigned char *bytes) { /* finite fp16 (the kernels' operands) */
    uint16_t h;
    memcpy(&h, bytes, 2);
    const int exponent = (h >> 10) & 31, mantissa = h & 1023;
    const double magnitude = exponent == 0 ? ldexp(mantissa, -24) : ldexp(1024 + mantissa, exponent - 25);
    return (float)(h >> 15 ? -magnitude : magnitude); /* exact: every fp16 value is a float */
}
/* TDPBF16PS / TDPFP16PS as the Intel SDM writes them: for each pair k, the product of the even
 * elements added first, then the odd ones, each addition rounded to fp32 (the products of two
 * bf16 or two fp16 numbers are exact in fp32). Not modelled: the hardware's flushing of fp32
 * subnormal results (and, for bf16, of subnormal inputs). */
static void emulated_dp(int c, int a, int b, float (*value)(const unsigned char *)) {
    emulated_check(c);
    emulated_check(a);
    emulated_check(b);
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
            float sum;
            memcpy(&sum, &emulated_tiles[c][m][4 * n], 4);
            for (int k = 0; k < 16; ++k) {
                sum += value(&emulated_tiles[a][m][4 * k]) * value(&emulated_tiles[b][k][4 * n]);
                sum += value(&emulated_tiles[a][m][4 * k + 2]) * value(&emulated_tiles[b][k][4 * n + 2]);
            }
            memcpy(&emulated_tiles[c][m][4 * n], &sum, 4);
        }
}
/* TDPBSSD / TDPBUSD: c[m][n] += sum_k sum_i a[m][4k + i] * b[k][4n + i] over bytes, a signed
 * (TDPBSSD) or unsigned (TDPBUSD), b signed; int32 sums wrapping as the hardware's (exact
 * wherever the kernels use them). */
static void __attribute__((unused)) emulated_dp_int8(int c, int a, int b, int a_signed) {
    emulated_check(c);
    emulated_check(a);
    emulated_check(b);
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
            int32_t sum;
            memcpy(&sum, &emulated_tiles[c][m][4 * n], 4);
            uint32_t total = (uint32_t)sum;
            for (int k = 0; k < 16; ++k)
                for (int i = 0; i < 4; ++i) {
                    const unsigned char x = emulated_tiles[a][m][4 * k + i];
                    const int av = a_signed ? (int)(int8_t)x : (int)x;
                    total += (uint32_t)(av * (int)(int8_t)emulated_tiles[b][k][4 * n + i]);
                }
            sum = (int32_t)total;
            memcpy(&emulated_tiles[c][m][4 * n], &sum, 4);
        }
}
#define AMX_CONFIGURE(config) emulated_configure(config)
#define AMX_READ_CONFIG(config) memcpy(config, emulated_config, 64)
#define AMX_ZERO(t) emulated_zero(t)
#define AMX_LOAD(t, base, stride) emulated_load(t, base, stride)
#define AMX_STORE(t, base, stride) emulated_store(t, base, stride)
#define AMX_DPBF16(c, a, b) emulated_dp(c, a, b, emulated_bf16_value)
#define AMX_DPFP16(c, a, b) emulated_dp(c, a, b, emulated_f16_value)
#define AMX_DPBSSD(c, a, b) emulated_dp_int8(c, a, b, 1)
#define AMX_DPBUSD(c, a, b) emulated_dp_int8(c, a, b, 0)

#define AMX_NAME(x) emulated_amx_##x
#include "kernels/amx/amx_tiles.h"
#undef AMX_NAME
#define AMX_NAME(x) emulated_amx_f16_##x
#define AMX_F16 1
#include "kernels/amx/amx_tiles.h"
#undef AMX_NAME

static const attn_lowp_kernels __attribute__((unused)) emulated_amx = {
    .name = "amx (emulated tiles)",
    .pack_keys = attn_lowp_generic_pack_keys,
    .pack_values = attn_lowp_generic_pack_values,
    .score_tile = emulated_amx_score_tile,
    .accumulate_values = emulated_amx_accumulate_values,
};
static const attn_lowp_kernels __attribute__((unused)) emulated_amx_f16 = {
    .name = "amx_fp16 (emulated tiles)",
    .pack_keys = attn_lowp_generic_pack_keys,
    .pack_values = attn_lowp_generic_pack_values,
    .score_tile = emulated_amx_f16_score_tile,
    .accumulate_values = emulated_amx_f16_accumulate_values,
};

#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
/* The same algorithms configured as lowp_amx.c is: AVX512-BF16 packing, P rounded by
 * VCVTNE2PS2BF16 / VCVTPS2PH. */
#define AMX_NAME(x) emulated_amx_avx512_##x
#define AMX_ROUND_ROW(destination, source, n, padded) \
    attn_lowp_avx512bf16_round_row(destination, source, n, padded)
#include "kernels/amx/amx_tiles.h"
#undef AMX_NAME
#define AMX_NAME(x) emulated_amx_f16_avx512_##x
#define AMX_F16 1
#define AMX_ROUND_ROW(destination, source, n, padded) \
    attn_lowp_avx512_round_row_f16(destination, source, n, padded)
#include "kernels/amx/amx_tiles.h"
#undef AMX_NAME

static const attn_lowp_kernels __attribute__((unused)) emulated_amx_avx512 = {
    .name = "amx (emulated tiles, AVX512-BF16 packing and rounding)",
    .pack_keys = attn_lowp_avx512bf16_pack_keys,
    .pack_values = attn_lowp_avx512bf16_pack_values,
    .score_tile = emulated_amx_avx512_score_tile,
    .accumulate_values = emulated_amx_avx512_accumulate_values,
};
static const attn_lowp_kernels __attribute__((unused)) emulated_amx_f16_avx512 = {
    .name = "amx_fp16 (emulated tiles, AVX512-BF16 packing, VCVTPS2PH rounding)",
    .pack_keys = attn_lowp_avx512bf16_pack_keys,
    .pack_values = attn_lowp_avx512bf16_pack_values,
    .score_tile = emulated_amx_f16_avx512_score_tile,
    .accumulate_values = emulated_amx_f16_avx512_accumulate_values,
};
#endif

#endif /* ATTN_TEST_AMX_EMULATION_H */
