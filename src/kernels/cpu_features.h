/*
 * cpu_features.h — what this CPU and OS let the kernels use, detected once per process with
 * CPUID and XGETBV (x86-64; elsewhere every flag is 0).
 *
 * A flag is 1 only when the CPU reports the instructions AND the OS saves the register state
 * they need: XCR0 bits 1-2 (SSE/AVX state) for avx2 / fma / f16c; in addition bits 5-7
 * (opmask, ZMM upper halves, ZMM16-31) for the AVX-512 flags; bits 17-18 (XTILECFG,
 * XTILEDATA) for the AMX flags, and on Linux a granted arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA) request (made once, the first time features are read, and only when the
 * CPU and XCR0 say AMX exists; if the kernel refuses, the AMX flags stay 0 and nothing else
 * changes).
 */
#ifndef ATTN_KERNELS_CPU_FEATURES_H
#define ATTN_KERNELS_CPU_FEATURES_H

#include <stdint.h>

typedef struct attn_cpu_features {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512dq, avx512vl;
    int avx512_bf16, avx512_fp16;
    int avx512_vnni; /* VPDPWSSD (int8 KV decode, kernels/avx512/decode_q8_avx512.h) */
    int avx512vbmi;  /* VPERMI2B (fp8 rows widened to bf16, kernels/avx512/decode_q8_avx512.h) */
    int gfni;        /* GF2P8AFFINEQB (E4M3 widened in lane order, avx512/decode_fp8_lanes_avx512.h) */
    int amx_tile, amx_bf16, amx_fp16;
    int amx_int8; /* TDPBSSD / TDPBUSD (int8 decode tiles, amx/decode_q8_amx.h) */
    /* Not an instruction set: 1 when CPUID's vendor string is "AuthenticAMD". AMD's
     * AVX512-BF16 cores issue VDPBF16PS at the rate of a 16-lane FMA (twice its
     * multiply-adds), Intel's at half that rate; the registry takes the VDPBF16PS decode
     * kernels on AMD only (registry.c). Not in the named flags below. */
    int vendor_amd;
    /* What the detection saw, for logs: XCR0 (0 without OSXSAVE), and whether the Linux AMX
     * permission request was made (1) and granted (1). */
    uint64_t xcr0;
    int amx_permission_requested, amx_permission_granted;
} attn_cpu_features;

/* The features of this process (detected on the first call; thread-safe; never NULL). */
const attn_cpu_features *attn_cpu_features_get(void);

/* The names and flags of attn_cpu_features in order, for logs and tests: the i-th flag
 * (i < ATTN_CPU_FEATURE_COUNT) is named attn_cpu_feature_name(i) as /proc/cpuinfo spells it
 * ("avx2", "fma", "f16c", "avx512f", ..., "amx_int8", "avx512vbmi", "gfni"). */
enum { ATTN_CPU_FEATURE_COUNT = 15 };
const char *attn_cpu_feature_name(int index);
int attn_cpu_feature_flag(const attn_cpu_features *features, int index);

#endif /* ATTN_KERNELS_CPU_FEATURES_H */
