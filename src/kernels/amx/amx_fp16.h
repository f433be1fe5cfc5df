/*
 * amx_fp16.h — TDPFP16PS (AMX-FP16: Granite Rapids and later; CPUID.(EAX=7,ECX=1):EAX bit 21)
 * as the bytes of the instruction, because the toolchains attn supports do not all know it:
 * gcc 12 has no -mamx-fp16 (no _tile_dpfp16ps), and clang 14's assembler rejects the
 * mnemonic (binutils 2.40 accepts it). The bytes assemble everywhere and need no target
 * flag; the CPU feature is checked at run time (cpu_features, registry.c).
 *
 * Encoding (Intel SDM: VEX.128.F2.0F38.W0 5C 11:rrr:bbb, TDPFP16PS tmm1, tmm2, tmm3 — tmm1
 * in ModRM.reg (accumulator, read and written), tmm2 in ModRM.r/m, tmm3 in VEX.vvvv):
 *   C4                    three-byte VEX
 *   E2                    R̄ X̄ B̄ = 111 (tile numbers < 8), map 0F38
 *   (~b & 15) << 3 | 3    W = 0, vvvv = one's complement of tmm3, L = 0, pp = 11 (F2)
 *   5C                    opcode (the same as TDPBF16PS, whose pp is 10: F3)
 *   C0 | c << 3 | a       ModRM: mod = 11, reg = tmm1 (c), r/m = tmm2 (a)
 * e.g. TDPFP16PS tmm0, tmm4, tmm6 = C4 E2 4B 5C C4 (what binutils 2.40 emits for
 * `tdpfp16ps %tmm6, %tmm4, %tmm0`; tests/test_lowp_kernels.c checks the bytes of this macro
 * against that listing). c, a, b: integer constants 0..7.
 */
#ifndef ATTN_KERNELS_AMX_FP16_H
#define ATTN_KERNELS_AMX_FP16_H

/* The five bytes of TDPFP16PS tmm(c), tmm(a), tmm(b), as constants (for tests and asm). */
#define ATTN_TDPFP16PS_VEX2(b) ((((~(b)) & 15) << 3) | 3)
#define ATTN_TDPFP16PS_MODRM(c, a) (0xc0 | ((c) << 3) | (a))

/* tmm(c) += fp16 pair products of tmm(a) and tmm(b) (see above). The memory clobber keeps
 * the compiler from moving loads and stores of tile buffers across it, as for every tile
 * instruction of lowp_amx.c. */
#define ATTN_TDPFP16PS(c, a, b)                                                             \
    __asm__ volatile(".byte 0xc4, 0xe2, %c0, 0x5c, %c1"                                     \
                     :                                                                     \
                     : "i"(ATTN_TDPFP16PS_VEX2(b)), "i"(ATTN_TDPFP16PS_MODRM(c, a))         \
                     : "memory")

#endif /* ATTN_KERNELS_AMX_FP16_H */
