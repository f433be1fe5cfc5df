/*
 * peak_bf16.c — the bf16 ceilings `attn-bench --peak` prints next to the fp32 FMA peak
 * (peak.c), measured in the calling process on `threads` threads:
 *  - VDPBF16PS: 16 independent accumulator chains of zmm dot products (each instruction 16
 *    lanes × 2 multiply-adds = 64 flops), operands in registers;
 *  - AMX TDPBF16PS: a chain on 4 accumulator tiles (2 × 2 blocks of 16 × 16 fp32) from 2 A
 *    and 2 B tiles loaded once (each instruction 16 × 16 × 32 × 2 = 16384 flops), i.e. the
 *    tile unit without loads; only where attn may run AMX (attn_kernel_available: CPUID, XCR0
 *    and the OS's permission);
 *  - AMX-FP16 TDPFP16PS: the same chain on fp16 pairs, only where attn runs fp16 on the tiles
 *    (attn_kernel_f16_tiles(ATTN_KERNEL_AMX)). The instruction is written as its bytes (gcc 12
 *    and clang 14 do not know it; the encoding is documented in src/kernels/amx/amx_fp16.h):
 *    TDPFP16PS tmm c, tmm a, tmm b = C4 E2 (~b & 15) << 3 | 3, 5C, C0 | c << 3 | a.
 * Timed like the FMA peak, by bench_best_gflops (peak.c): a 0.3 s warm-up, a calibration to
 * ≈ 0.1 s per run, best of five.
 */
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "attn.h"
#include "bench_clock.h"

#define CHAINS 16

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_chains(long iterations,
                                                                           float seed) {
    __m512 chain[CHAINS];
    for (int c = 0; c < CHAINS; ++c) chain[c] = _mm512_set1_ps(seed + (float)c);
    /* pairs of bf16 1/1024 (0x3a80): each step adds 2^-19 per lane, far from overflow */
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3a803a80), b = a;
    for (long i = 0; i < iterations; ++i)
        for (int c = 0; c < CHAINS; ++c) chain[c] = _mm512_dpbf16_ps(chain[c], a, b);
    __m512 total = chain[0];
    for (int c = 1; c < CHAINS; ++c) total = _mm512_add_ps(total, chain[c]);
    return _mm512_reduce_add_ps(total);
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
/* The chains' setup: 8 tiles of 16 rows × 64 bytes, accumulators 0-3 zero, operand tiles 4-7
 * loaded (zeros). */
__attribute__((target("amx-tile"))) static void amx_chains_begin(void) {
    uint8_t config[64] __attribute__((aligned(64)));
    memset(config, 0, sizeof config);
    config[0] = 1;
    for (int t = 0; t < 8; ++t) config[16 + 2 * t] = 64, config[48 + t] = 16;
    static const uint16_t operands[512] __attribute__((aligned(64))); /* zeros */
    _tile_loadconfig(config);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, operands, 64);
    _tile_loadd(5, operands, 64);
    _tile_loadd(6, operands, 64);
    _tile_loadd(7, operands, 64);
    __asm__ volatile("" ::: "memory");
}

/* Stores accumulator 0, releases the tiles; a result that depends on the chains. */
__attribute__((target("amx-tile"))) static float amx_chains_end(float seed) {
    float out[256] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0] + seed;
}

__attribute__((target("amx-tile,amx-bf16"))) static float amx_chains(long iterations,
                                                                       float seed) {
    amx_chains_begin();
    for (long i = 0; i < iterations; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    return amx_chains_end(seed);
}

/* tmm0 += tmm4·tmm6, tmm1 += tmm4·tmm7, tmm2 += tmm5·tmm6, tmm3 += tmm5·tmm7 on fp16 pairs. */
#define TDPFP16PS_2X2                                                                       \
    ".byte 0xc4, 0xe2, 0x4b, 0x5c, 0xc4\n\t" /* tdpfp16ps tmm0, tmm4, tmm6 */               \
    ".byte 0xc4, 0xe2, 0x43, 0x5c, 0xcc\n\t" /* tdpfp16ps tmm1, tmm4, tmm7 */               \
    ".byte 0xc4, 0xe2, 0x4b, 0x5c, 0xd5\n\t" /* tdpfp16ps tmm2, tmm5, tmm6 */               \
    ".byte 0xc4, 0xe2, 0x43, 0x5c, 0xdd\n\t" /* tdpfp16ps tmm3, tmm5, tmm7 */

__attribute__((target("amx-tile"))) static float amx_fp16_chains(long iterations, float seed) {
    amx_chains_begin();
    for (long i = 0; i < iterations; ++i) __asm__ volatile(TDPFP16PS_2X2 ::: "memory");
    return amx_chains_end(seed);
}
#endif

double bench_measure_bf16_peak(int threads, bench_clock clock) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (attn_kernel_available(ATTN_KERNEL_AVX512_BF16))
        return bench_best_gflops(dpbf16_chains, 64.0 * CHAINS, 20000, threads, clock);
#endif
    (void)threads, (void)clock;
    return 0.0;
}

double bench_measure_amx_peak(int threads, bench_clock clock) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (attn_kernel_available(ATTN_KERNEL_AMX))
        return bench_best_gflops(amx_chains, 4.0 * 16 * 16 * 32 * 2, 20000, threads, clock);
#endif
    (void)threads, (void)clock;
    return 0.0;
}

double bench_measure_amx_fp16_peak(int threads, bench_clock clock) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (attn_kernel_f16_tiles(ATTN_KERNEL_AMX) != NULL)
        return bench_best_gflops(amx_fp16_chains, 4.0 * 16 * 16 * 32 * 2, 20000, threads, clock);
#endif
    (void)threads, (void)clock;
    return 0.0;
}
