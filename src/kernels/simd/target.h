/*
 * target.h — ATTN_TARGET(isa): builds one function for an ISA extension beyond its file's
 * compiler flags (VBMI, GFNI, VNNI, AVX-512 in the AMX unit); the caller runs it only where
 * cpu_features reports the extension. In the emulated AVX-512 build (emulate_avx512.h) the
 * intrinsics are portable code and the attribute is left out.
 */
#ifndef ATTN_KERNELS_SIMD_TARGET_H
#define ATTN_KERNELS_SIMD_TARGET_H

#if defined(ATTN_EMULATED_AVX512)
#define ATTN_TARGET(isa)
#else
#define ATTN_TARGET(isa) __attribute__((target(isa)))
#endif

#endif /* ATTN_KERNELS_SIMD_TARGET_H */
