/*
 * emulate_avx512.h — AVX-512 intrinsics in portable code (SIMDe over AVX2), for the test build
 * that runs the AVX-512 and AVX512-BF16 kernel tables on CPUs without them
 * (cmake -DATTN_EMULATE_AVX512=ON; cmake/kernels.cmake force-includes this in those tables'
 * files). Every intrinsic keeps its meaning lane for lane, masked loads read only the lanes
 * they select, and the fused multiply-adds stay fused (AVX2's FMA, half a register at a
 * time); only the order of a horizontal reduction may differ from the hardware's, so the
 * emulated tables are checked against the references and across thread counts, as every
 * table is, and are never a source of speed figures.
 *
 * SIMDe 0.7 lacks a few of the intrinsics the tables use and names one with the wrong
 * arguments; they are defined here.
 */
#ifndef ATTN_KERNELS_SIMD_EMULATE_AVX512_H
#define ATTN_KERNELS_SIMD_EMULATE_AVX512_H

#ifndef ATTN_EMULATED_AVX512
#define ATTN_EMULATED_AVX512 1
#endif
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/gfni.h>
#include <stdint.h>

#define ATTN_EMU_INLINE static inline __attribute__((always_inline, unused))

/* Masked loads and stores lane by lane: a load reads only the lanes set in k (the others
 * keep what `lanes` held), a store writes only those; `count` lanes of `size` bytes. */
ATTN_EMU_INLINE void attn_emu_load_lanes(unsigned char *lanes, const void *source, uint64_t k,
                                         int count, int size) {
    for (int i = 0; i < count; ++i)
        if ((k >> i) & 1) __builtin_memcpy(lanes + i * size, (const char *)source + i * size, (size_t)size);
}
ATTN_EMU_INLINE void attn_emu_store_lanes(void *target, const unsigned char *lanes, uint64_t k,
                                          int count, int size) {
    for (int i = 0; i < count; ++i)
        if ((k >> i) & 1) __builtin_memcpy((char *)target + i * size, lanes + i * size, (size_t)size);
}
ATTN_EMU_INLINE simde__m512 attn_emu_mask_loadu_ps(simde__m512 fill, simde__mmask16 k,
                                                   const void *source) {
    unsigned char lanes[64];
    simde_mm512_storeu_ps(lanes, fill);
    attn_emu_load_lanes(lanes, source, k, 16, 4);
    return simde_mm512_loadu_ps(lanes);
}
ATTN_EMU_INLINE simde__m512 attn_emu_maskz_loadu_ps(simde__mmask16 k, const void *source) {
    return attn_emu_mask_loadu_ps(simde_mm512_setzero_ps(), k, source);
}
ATTN_EMU_INLINE simde__m512i attn_emu_maskz_loadu_512(uint64_t k, const void *source, int size) {
    unsigned char lanes[64] = {0};
    attn_emu_load_lanes(lanes, source, k, 64 / size, size);
    return simde_mm512_loadu_si512(lanes);
}
ATTN_EMU_INLINE __m256i attn_emu_maskz_loadu_256(uint64_t k, const void *source, int size) {
    unsigned char lanes[32] = {0};
    attn_emu_load_lanes(lanes, source, k, 32 / size, size);
    return _mm256_loadu_si256((const __m256i *)lanes);
}
ATTN_EMU_INLINE __m128i attn_emu_maskz_loadu_128(uint64_t k, const void *source, int size) {
    unsigned char lanes[16] = {0};
    attn_emu_load_lanes(lanes, source, k, 16 / size, size);
    return _mm_loadu_si128((const __m128i *)lanes);
}
ATTN_EMU_INLINE void attn_emu_mask_storeu_512(void *target, uint64_t k, simde__m512i v, int size) {
    unsigned char lanes[64];
    simde_mm512_storeu_si512(lanes, v);
    attn_emu_store_lanes(target, lanes, k, 64 / size, size);
}
ATTN_EMU_INLINE void attn_emu_mask_storeu_256(void *target, uint64_t k, __m256i v, int size) {
    unsigned char lanes[32];
    _mm256_storeu_si256((__m256i *)lanes, v);
    attn_emu_store_lanes(target, lanes, k, 32 / size, size);
}
ATTN_EMU_INLINE void attn_emu_mask_storeu_128(void *target, uint64_t k, __m128i v, int size) {
    unsigned char lanes[16];
    _mm_storeu_si128((__m128i *)lanes, v);
    attn_emu_store_lanes(target, lanes, k, 16 / size, size);
}

/* One 512-bit operation as the AVX2 one on each half (exact where the AVX2 one is): `name`
 * takes a `from` (its halves in field `part`) and gives a `to` (halves in field `whole`). */
#define ATTN_EMU_PER_HALF(name, to, whole, from, part, op)                                      \
    ATTN_EMU_INLINE to name(from v) {                                                          \
        from##_private a = from##_to_private(v);                                               \
        to##_private r;                                                                        \
        r.whole[0] = op(a.part[0]);                                                            \
        r.whole[1] = op(a.part[1]);                                                            \
        return to##_from_private(r);                                                           \
    }
ATTN_EMU_PER_HALF(attn_emu_cvtph_ps, simde__m512, m256, simde__m256i, m128i, _mm256_cvtph_ps)
ATTN_EMU_PER_HALF(attn_emu_cvtepi32_ps, simde__m512, m256, simde__m512i, m256i, _mm256_cvtepi32_ps)
ATTN_EMU_PER_HALF(attn_emu_cvtps_epi32, simde__m512i, m256i, simde__m512, m256, _mm256_cvtps_epi32)
/* One float as bf16 the way VCVTNE2PS2BF16 rounds: nearest even, a NaN made quiet, denormal
 * inputs and outputs as zero of their sign. */
ATTN_EMU_INLINE uint16_t attn_emu_bf16(float x) {
    uint32_t bits;
    __builtin_memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7f800000u) == 0) return (uint16_t)((bits >> 16) & 0x8000u);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
/* Words 0-15 from b, 16-31 from a. */
ATTN_EMU_INLINE simde__m512bh attn_emu_cvtne2ps_pbh(simde__m512 a, simde__m512 b) {
    simde__m512_private x = simde__m512_to_private(a), y = simde__m512_to_private(b);
    simde__m512bh_private r;
    for (int i = 0; i < 16; ++i) {
        r.u16[i] = attn_emu_bf16(y.f32[i]);
        r.u16[16 + i] = attn_emu_bf16(x.f32[i]);
    }
    return simde__m512bh_from_private(r);
}
ATTN_EMU_INLINE simde__m256bh attn_emu_cvtneps_pbh(simde__m512 a) {
    simde__m512_private x = simde__m512_to_private(a);
    simde__m256bh_private r;
    for (int i = 0; i < 16; ++i) r.u16[i] = attn_emu_bf16(x.f32[i]);
    return simde__m256bh_from_private(r);
}
/* VSHUFF32X4: 128-bit blocks 0, 1 of a and 2, 3 of b, chosen by two bits each of imm. */
ATTN_EMU_INLINE simde__m512 attn_emu_shuffle_f32x4(simde__m512 a, simde__m512 b, int imm) {
    simde__m512_private x = simde__m512_to_private(a), y = simde__m512_to_private(b), r;
    r.m128[0] = x.m128[imm & 3];
    r.m128[1] = x.m128[(imm >> 2) & 3];
    r.m128[2] = y.m128[(imm >> 4) & 3];
    r.m128[3] = y.m128[(imm >> 6) & 3];
    return simde__m512_from_private(r);
}
ATTN_EMU_INLINE simde__m512i attn_emu_mask_i32gather_epi32(simde__m512i fill, simde__mmask16 k,
                                                         simde__m512i offsets, const void *base,
                                                         int scale) {
    simde__m512i_private r = simde__m512i_to_private(fill), o = simde__m512i_to_private(offsets);
    for (int i = 0; i < 16; ++i)
        if ((k >> i) & 1)
        {
            int32_t x;
            __builtin_memcpy(&x, (const char *)base + (int64_t)o.i32[i] * scale, 4);
            r.i32[i] = x;
        }
    return simde__m512i_from_private(r);
}
/* The horizontal reductions in GCC's order (avx512fintrin.h): halves, quarters, pairs. */
ATTN_EMU_INLINE float attn_emu_reduce_add_ps(simde__m512 v) {
    simde__m512_private a = simde__m512_to_private(v);
    const __m256 t3 = _mm256_add_ps(a.m256[1], a.m256[0]);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, 0x4e));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 0x55));
}
ATTN_EMU_INLINE float attn_emu_reduce_max_ps(simde__m512 v) {
    simde__m512_private a = simde__m512_to_private(v);
    const __m256 t3 = _mm256_max_ps(a.m256[1], a.m256[0]);
    const __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, 0x4e));
    return _mm_cvtss_f32(_mm_max_ps(t8, _mm_shuffle_ps(t8, t8, 0x11)));
}
ATTN_EMU_INLINE simde__m512 attn_emu_mask_i32gather_ps(simde__m512 fill, simde__mmask16 k,
                                                     simde__m512i offsets, const void *base,
                                                     int scale) {
    simde__m512_private r = simde__m512_to_private(fill);
    simde__m512i_private o = simde__m512i_to_private(offsets);
    for (int i = 0; i < 16; ++i)
        if ((k >> i) & 1)
        {
            float x;
            __builtin_memcpy(&x, (const char *)base + (int64_t)o.i32[i] * scale, 4);
            r.f32[i] = x;
        }
    return simde__m512_from_private(r);
}
ATTN_EMU_INLINE __m256 attn_emu_half_ps(simde__m512 v, int high) {
    return simde__m512_to_private(v).m256[high];
}
ATTN_EMU_INLINE simde__m512i attn_emu_cvtepi8_epi32(__m128i v) {
    int8_t bytes[16];
    _mm_storeu_si128((__m128i *)bytes, v);
    simde__m512i_private r;
    for (int i = 0; i < 16; ++i) r.i32[i] = bytes[i];
    return simde__m512i_from_private(r);
}
/* VPMOVDW: each 32-bit lane's low 16 bits. */
ATTN_EMU_INLINE __m256i attn_emu_cvtepi32_epi16(simde__m512i v) {
    simde__m512i_private a = simde__m512i_to_private(v);
    int16_t words[16];
    for (int i = 0; i < 16; ++i) words[i] = (int16_t)a.i32[i];
    return _mm256_loadu_si256((const __m256i *)words);
}
ATTN_EMU_INLINE simde__mmask16 attn_emu_cmpeq_epi16_mask_256(__m256i a, __m256i b) {
    const uint32_t bytes = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(a, b));
    simde__mmask16 k = 0;
    for (int i = 0; i < 16; ++i) k |= (simde__mmask16)(((bytes >> (2 * i)) & 1u) << i);
    return k;
}
ATTN_EMU_INLINE simde__m512i attn_emu_cvtepu8_epi16(__m256i v) {
    simde__m512i_private r;
    r.m256i[0] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v));
    r.m256i[1] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1));
    return simde__m512i_from_private(r);
}
/* A bf16 or float32 denormal as zero of its sign (VDPBF16PS's DAZ and FTZ). */
ATTN_EMU_INLINE float attn_emu_flush(float x) {
    uint32_t bits;
    __builtin_memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
    __builtin_memcpy(&x, &bits, sizeof x);
    return x;
}
/* VDPBF16PS: each lane adds the product of its odd bf16 pair, then of its even pair, each
 * product exact and each addition rounded to nearest, denormals as zero. */
ATTN_EMU_INLINE simde__m512 attn_emu_dpbf16_ps(simde__m512 sum, simde__m512bh a, simde__m512bh b) {
    simde__m512_private r = simde__m512_to_private(sum);
    simde__m512bh_private x = simde__m512bh_to_private(a), y = simde__m512bh_to_private(b);
    for (int i = 0; i < 16; ++i) {
        float acc = r.f32[i];
        for (int half = 1; half >= 0; --half) {
            const uint32_t xb = (uint32_t)x.u16[2 * i + half] << 16, yb = (uint32_t)y.u16[2 * i + half] << 16;
            float xf, yf;
            __builtin_memcpy(&xf, &xb, 4);
            __builtin_memcpy(&yf, &yb, 4);
            acc = attn_emu_flush(acc + attn_emu_flush(xf) * attn_emu_flush(yf));
        }
        r.f32[i] = acc;
    }
    return simde__m512_from_private(r);
}
ATTN_EMU_INLINE simde__m512i attn_emu_join_epi32(__m256i low, __m256i high) {
    simde__m512i_private r;
    r.m256i[0] = low;
    r.m256i[1] = high;
    return simde__m512i_from_private(r);
}
ATTN_EMU_INLINE void attn_emu_i32scatter_epi32(void *base, simde__m512i offsets, simde__m512i v,
                                               int scale) {
    simde__m512i_private o = simde__m512i_to_private(offsets), a = simde__m512i_to_private(v);
    for (int i = 0; i < 16; ++i) {
        const int32_t x = a.i32[i];
        __builtin_memcpy((char *)base + (int64_t)o.i32[i] * scale, &x, 4);
    }
}
ATTN_EMU_INLINE simde__m512i attn_emu_cvtepu16_epi32(simde__m256i v) {
    simde__m256i_private a = simde__m256i_to_private(v);
    simde__m512i_private r;
    for (int i = 0; i < 16; ++i) r.i32[i] = (int32_t)a.u16[i];
    return simde__m512i_from_private(r);
}

#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) attn_emu_maskz_loadu_ps(k, p)
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, v) attn_emu_mask_storeu_512(p, k, simde_mm512_castps_si512(v), 4)
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(v) attn_emu_cvtepu16_epi32(v)
#undef _mm512_mask_loadu_ps
#define _mm512_mask_loadu_ps(fill, k, p) attn_emu_mask_loadu_ps(fill, k, p)
#undef _mm512_maskz_loadu_epi16
#define _mm512_maskz_loadu_epi16(k, p) attn_emu_maskz_loadu_512(k, p, 2)
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(h) attn_emu_cvtph_ps(h)
#undef _mm512_cvtne2ps_pbh
#define _mm512_cvtne2ps_pbh(a, b) attn_emu_cvtne2ps_pbh(a, b)
#undef _mm512_cvtneps_pbh
#define _mm512_cvtneps_pbh(a) attn_emu_cvtneps_pbh(a)
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm) attn_emu_shuffle_f32x4(a, b, imm)
#undef _mm512_mask_i32gather_epi32
#define _mm512_mask_i32gather_epi32(fill, k, offsets, base, scale) \
    attn_emu_mask_i32gather_epi32(fill, k, offsets, base, scale)
/* VCVTPS2PH, 16 floats: F16C's conversion of each 8 (the same rounding). */
#undef _mm512_cvtps_ph
#define _mm512_cvtps_ph(v, rounding)                                                            \
    simde_mm256_set_m128i(_mm256_cvtps_ph(attn_emu_half_ps(v, 1), rounding),         \
                          _mm256_cvtps_ph(attn_emu_half_ps(v, 0), rounding))
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(v) attn_emu_reduce_add_ps(v)
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps(v) attn_emu_reduce_max_ps(v)
#undef _mm512_mask_i32gather_ps
#define _mm512_mask_i32gather_ps(fill, k, offsets, base, scale) \
    attn_emu_mask_i32gather_ps(fill, k, offsets, base, scale)
#undef _mm512_maskz_loadu_epi8
#define _mm512_maskz_loadu_epi8(k, p) attn_emu_maskz_loadu_512(k, p, 1)
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16(k, p) attn_emu_maskz_loadu_256(k, p, 2)
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(v) attn_emu_cvtepi32_ps(v)
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32(v) attn_emu_cvtepi8_epi32(v)
#undef _mm_maskz_loadu_epi8
#define _mm_maskz_loadu_epi8(k, p) attn_emu_maskz_loadu_128(k, p, 1)
#undef _mm512_mask_storeu_epi16
#define _mm512_mask_storeu_epi16(p, k, v) attn_emu_mask_storeu_512(p, k, v, 2)
#undef _mm256_mask_storeu_epi16
#define _mm256_mask_storeu_epi16(p, k, v) attn_emu_mask_storeu_256(p, k, v, 2)
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16(v) attn_emu_cvtepi32_epi16(v)
#undef _mm256_cmpeq_epi16_mask
#define _mm256_cmpeq_epi16_mask(a, b) attn_emu_cmpeq_epi16_mask_256(a, b)
#undef _mm512_cvtepu8_epi16
#define _mm512_cvtepu8_epi16(v) attn_emu_cvtepu8_epi16(v)
#undef _mm256_maskz_loadu_epi8
#define _mm256_maskz_loadu_epi8(k, p) attn_emu_maskz_loadu_256(k, p, 1)
#undef _mm_maskz_loadu_ps
#define _mm_maskz_loadu_ps(k, p) _mm_castsi128_ps(attn_emu_maskz_loadu_128(k, p, 4))
#undef _mm_mask_storeu_ps
#define _mm_mask_storeu_ps(p, k, v) attn_emu_mask_storeu_128(p, k, _mm_castps_si128(v), 4)
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(v) attn_emu_cvtps_epi32(v)
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps(sum, a, b) attn_emu_dpbf16_ps(sum, a, b)
/* VCVTPS2DQ with a rounding mode: each half rounded in that mode, then converted (exact). */
#undef _mm512_cvt_roundps_epi32
#define _mm512_cvt_roundps_epi32(v, mode)                                                       \
    attn_emu_join_epi32(_mm256_cvtps_epi32(_mm256_round_ps(attn_emu_half_ps(v, 0), mode)),      \
                        _mm256_cvtps_epi32(_mm256_round_ps(attn_emu_half_ps(v, 1), mode)))
#undef _mm512_i32scatter_epi32
#define _mm512_i32scatter_epi32(base, offsets, v, scale) attn_emu_i32scatter_epi32(base, offsets, v, scale)
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)

#endif /* ATTN_KERNELS_SIMD_EMULATE_AVX512_H */
