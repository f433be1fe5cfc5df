/*
 * instruction_rates.c — how fast this core issues the vector instructions the decode kernels
 * choose between: the fp32 FMA, VDPBF16PS (bf16 pairs), VPDPWSSD (int16 pairs), the byte
 * shuffles of the fp8 widenings (VPERMB, VPERMI2B, VPUNPCKLBW, GF2P8AFFINEQB) and VCVTPH2PS.
 * Each instruction runs on 16 independent zmm accumulators (more than its latency times its
 * rate, so the number is the issue rate, not the latency), one thread, best of `repeats`
 * rounds; instructions the CPU lacks are skipped. It prints nanoseconds per instruction, the
 * rate relative to the FMA, and multiply-adds per nanosecond for the arithmetic ones.
 *
 * Why it exists: the same instruction runs at different rates on the machines attn meets
 * (VDPBF16PS issues at the FMA's rate on AMD Zen 4, at about half of it on the AMX Xeon of
 * docs/inference.md), and the registry's choices (kernels/registry.c: the VDPBF16PS decode
 * table on AMD only; fp8 widened through IEEE halves for the FMAs) rest on these rates.
 *
 * Run: `attn-bench instruction-rates [repeats]` (x86-64 builds). Build attn-bench with clang
 * (CC=clang) for the VPDPWSSD row: GCC 12 copies each VPDPWSSD accumulator through another
 * register, which costs that row a third of its rate; the other rows are the same with either
 * compiler.
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"

#define TARGET \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni,avx512vbmi,gfni,f16c")))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Instructions per round: 16 accumulators x ROUND_STEPS steps. */
enum { ACCUMULATORS = 16, ROUND_STEPS = 4000000 };

#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
    X(12) X(13) X(14) X(15)

/* One timed loop of `OP` on the 16 accumulators a0..a15 started by `START(i)`; the empty asm keeps every accumulator live in its register (no folding), every
 * 16 steps so that it costs nothing. Returns ns per instruction. */
#define TIMED_LOOP(START, OP)                                                             \
    do {                                                                                  \
        double t0 = now();                                                                \
        EACH(START)                                                                       \
        for (long n = 0; n < ROUND_STEPS; ++n) {                                          \
            EACH(OP)                                                                      \
            if ((n & 15) == 0) { EACH(KEEP) }                                             \
        }                                                                                 \
        seconds = now() - t0;                                                             \
        EACH(SINK)                                                                        \
    } while (0)
#define KEEP(i) __asm__ volatile("" : "+v"(a##i));
#define SINK(i) __asm__ volatile("" : : "v"(a##i));

typedef enum {
    FMA, DPBF16, DPWSSD, PERMB, PERMI2B, UNPACK, AFFINE, CVTPH2PS, KINDS
} kind;

static const struct {
    const char *name, *needs;
    int multiply_adds; /* per instruction, 0 for the shuffles */
} kinds[KINDS] = {
    {"VFMADD231PS zmm (fp32)", "avx512f", 16},
    {"VDPBF16PS zmm (bf16 pairs)", "avx512bf16", 32},
    {"VPDPWSSD zmm (int16 pairs)", "avx512vnni", 32},
    {"VPERMB zmm", "avx512vbmi", 0},
    {"VPERMI2B zmm", "avx512vbmi", 0},
    {"VPUNPCKLBW zmm", "avx512bw", 0},
    {"GF2P8AFFINEQB zmm", "gfni", 0},
    {"VCVTPH2PS ymm->zmm", "avx512f", 0},
};

static int supported(kind k) {
    __builtin_cpu_init();
    switch (k) {
    case DPBF16: return __builtin_cpu_supports("avx512bf16");
    case DPWSSD: return __builtin_cpu_supports("avx512vnni");
    case PERMB:
    case PERMI2B: return __builtin_cpu_supports("avx512vbmi");
    case AFFINE: return __builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx512bw");
    case UNPACK: return __builtin_cpu_supports("avx512bw");
    default: return __builtin_cpu_supports("avx512f");
    }
}

/* ns per instruction of kind k, one round. */
TARGET static double time_kind(kind k) {
    double seconds = 0.0;
    __m512 fxv = _mm512_set1_ps(0.999f), fyv = _mm512_set1_ps(1e-7f);
    __m512i ixv = _mm512_set1_epi16(3), iyv = _mm512_set1_epi16(5);
    __asm__ volatile("" : "+v"(fxv), "+v"(fyv), "+v"(ixv), "+v"(iyv)); /* not constants */
    const __m512bh bx = (__m512bh)ixv, by = (__m512bh)iyv;
#define START_F(i) __m512 a##i = _mm512_set1_ps((float)(i) * 1e-3f);
#define START_I(i) __m512i a##i = _mm512_set1_epi32(i);
#define OP_FMA(i) a##i = _mm512_fmadd_ps(a##i, fxv, fyv);
#define OP_DPBF16(i) a##i = _mm512_dpbf16_ps(a##i, bx, by);
#define OP_DPWSSD(i) a##i = _mm512_dpwssd_epi32(a##i, ixv, iyv);
#define OP_PERMB(i) a##i = _mm512_permutexvar_epi8(a##i, ixv);
#define OP_PERMI2B(i) a##i = _mm512_permutex2var_epi8(ixv, a##i, iyv);
#define OP_UNPACK(i) a##i = _mm512_unpacklo_epi8(a##i, ixv);
#define OP_AFFINE(i) a##i = _mm512_gf2p8affine_epi64_epi8(a##i, ixv, 0);
#define OP_CVTPH2PS(i) a##i = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_castps_si512(a##i)));
    switch (k) {
    case FMA: TIMED_LOOP(START_F, OP_FMA); break;
    case DPBF16: TIMED_LOOP(START_F, OP_DPBF16); break;
    case DPWSSD: TIMED_LOOP(START_I, OP_DPWSSD); break;
    case PERMB: TIMED_LOOP(START_I, OP_PERMB); break;
    case PERMI2B: TIMED_LOOP(START_I, OP_PERMI2B); break;
    case UNPACK: TIMED_LOOP(START_I, OP_UNPACK); break;
    case AFFINE: TIMED_LOOP(START_I, OP_AFFINE); break;
    default: TIMED_LOOP(START_F, OP_CVTPH2PS); break;
    }
#undef START_F
#undef START_I
    return seconds * 1e9 / ((double)ROUND_STEPS * ACCUMULATORS);
}

int bench_instruction_rates(int argc, char **argv) {
    const int repeats = argc > 1 ? atoi(argv[1]) : 5;
    if (repeats < 1 || !supported(FMA)) {
        fprintf(stderr, repeats < 1 ? "usage: attn-bench instruction-rates [repeats >= 1]\n"
                                    : "attn-bench instruction-rates: this CPU has no AVX-512F\n");
        return 2;
    }
    double best[KINDS];
    for (int k = 0; k < KINDS; ++k) best[k] = 0.0;
    for (int round = 0; round < repeats; ++round) /* interleaved: a drift falls on all */
        for (int k = 0; k < KINDS; ++k) {
            if (!supported((kind)k)) continue;
            const double ns = time_kind((kind)k);
            if (best[k] == 0.0 || ns < best[k]) best[k] = ns;
        }
    printf("one thread, %d accumulators, best of %d rounds of %d instructions\n", ACCUMULATORS,
           repeats, ROUND_STEPS * ACCUMULATORS);
    printf("%-28s %10s %12s %16s\n", "instruction", "ns/instr", "rate vs FMA",
           "multiply-adds/ns");
    for (int k = 0; k < KINDS; ++k) {
        if (best[k] == 0.0) {
            printf("%-28s %10s   (needs %s)\n", kinds[k].name, "-", kinds[k].needs);
            continue;
        }
        printf("%-28s %10.3f %11.2fx", kinds[k].name, best[k], best[FMA] / best[k]);
        if (kinds[k].multiply_adds > 0) printf(" %16.1f", kinds[k].multiply_adds / best[k]);
        printf("\n");
    }
    return 0;
}
