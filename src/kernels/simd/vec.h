/*
 * vec.h — the small vector abstraction the SIMD kernels are written over, so that each kernel
 * body (src/kernels/simd/<part>_body.h) exists once and is compiled once per width:
 *   ATTN_VEC_WIDTH 16: AVX-512 (F, DQ, BW, VL) + FMA, 16 floats, 32 registers, mask registers;
 *   ATTN_VEC_WIDTH 8:  AVX2 + FMA + F16C, 8 floats, 16 registers, lane masks held in a vector.
 * A translation unit defines ATTN_VEC_WIDTH, then includes this and the bodies; it is built
 * with that width's compiler flags (cmake/kernels.cmake) and is selected at run time only on
 * CPUs that have them (kernels/registry.c).
 *
 * Types: vf (floats), vi (32-bit integers), vmask (which lanes). Names: VLANES, VEC_NAME(x)
 * (attn_avx512_x or attn_avx2_x, for what a width exports). Every operation is one or two
 * instructions (but the roundings to the 16-bit types at the end, a few each) and exact where
 * the ISA is (no operation here rounds differently at the two widths; the reductions use a
 * fixed tree). Lane-wise arithmetic is the same instruction at both widths and written once
 * (VX pastes the width's prefix); what differs (masks, gathers, horizontal reductions,
 * rounding) is written per width, each a line or two.
 */
#ifndef ATTN_KERNELS_SIMD_VEC_H
#define ATTN_KERNELS_SIMD_VEC_H

#include <immintrin.h>
#include <stdint.h>

#define ATTN_VEC_PASTE_(a, b) a##b
#define ATTN_VEC_PASTE(a, b) ATTN_VEC_PASTE_(a, b)
#define V_INLINE static inline __attribute__((always_inline))

#if ATTN_VEC_WIDTH == 16
typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vmask;
#define VX(name) _mm512_##name
#define VEC_ISA avx512
#elif ATTN_VEC_WIDTH == 8
typedef __m256 vf;
typedef __m256i vi;
typedef __m256i vmask; /* all-ones lanes are selected (the form maskload / blendv read) */
#define VX(name) _mm256_##name
#define VEC_ISA avx2
#else
#error "define ATTN_VEC_WIDTH as 8 (AVX2) or 16 (AVX-512) before including vec.h"
#endif

#define VLANES ATTN_VEC_WIDTH
/* attn_<isa>_<x>: the names a width exports (its parts of the registry). */
#define VEC_NAME(x) ATTN_VEC_PASTE(ATTN_VEC_PASTE(attn_, VEC_ISA), ATTN_VEC_PASTE(_, x))

/* ---- lane-wise, the same instruction at both widths ---- */
V_INLINE vf vf_zero(void) { return VX(setzero_ps)(); }
V_INLINE vf vf_set1(float x) { return VX(set1_ps)(x); }
V_INLINE vf vf_load(const float *p) { return VX(load_ps)(p); } /* 64-byte aligned */
V_INLINE vf vf_loadu(const float *p) { return VX(loadu_ps)(p); }
V_INLINE void vf_store(float *p, vf v) { VX(store_ps)(p, v); } /* 64-byte aligned */
V_INLINE void vf_storeu(float *p, vf v) { VX(storeu_ps)(p, v); }
V_INLINE vf vf_add(vf a, vf b) { return VX(add_ps)(a, b); }
V_INLINE vf vf_sub(vf a, vf b) { return VX(sub_ps)(a, b); }
V_INLINE vf vf_mul(vf a, vf b) { return VX(mul_ps)(a, b); }
V_INLINE vf vf_div(vf a, vf b) { return VX(div_ps)(a, b); }
V_INLINE vf vf_max(vf a, vf b) { return VX(max_ps)(a, b); }
V_INLINE vf vf_min(vf a, vf b) { return VX(min_ps)(a, b); }
V_INLINE vf vf_and(vf a, vf b) { return VX(and_ps)(a, b); }
V_INLINE vf vf_or(vf a, vf b) { return VX(or_ps)(a, b); }
V_INLINE vf vf_andnot(vf a, vf b) { return VX(andnot_ps)(a, b); } /* ~a & b */
V_INLINE vf vf_fmadd(vf a, vf b, vf c) { return VX(fmadd_ps)(a, b, c); }   /* a*b + c */
V_INLINE vf vf_fmsub(vf a, vf b, vf c) { return VX(fmsub_ps)(a, b, c); }   /* a*b - c */
V_INLINE vf vf_fnmadd(vf a, vf b, vf c) { return VX(fnmadd_ps)(a, b, c); } /* c - a*b */
V_INLINE vf vf_abs(vf a) { return vf_andnot(vf_set1(-0.0f), a); }
V_INLINE vi vi_set1(int x) { return VX(set1_epi32)(x); }
V_INLINE vi vi_add(vi a, vi b) { return VX(add_epi32)(a, b); }
V_INLINE vi vi_mullo(vi a, vi b) { return VX(mullo_epi32)(a, b); }
V_INLINE vi vi_slli(vi a, int bits) { return VX(slli_epi32)(a, bits); }
V_INLINE vi vi_srli(vi a, int bits) { return VX(srli_epi32)(a, bits); } /* logical */
V_INLINE vi vf_to_vi(vf a) { return VX(cvtps_epi32)(a); } /* round to nearest */
V_INLINE vf vi_to_vf(vi a) { return VX(cvtepi32_ps)(a); }
/* 16-bit lanes: lane i of the result = a[2i] * b[2i] + a[2i + 1] * b[2i + 1] (VPMADDWD,
 * exact in 32 bits but for all four operands -32768); the words of a and b interleaved
 * within each 128-bit lane, low (high) four of each. */
V_INLINE vi vi_madd_pairs(vi a, vi b) { return VX(madd_epi16)(a, b); }
V_INLINE vi vi_unpacklo_words(vi a, vi b) { return VX(unpacklo_epi16)(a, b); }
V_INLINE vi vi_unpackhi_words(vi a, vi b) { return VX(unpackhi_epi16)(a, b); }

/* ---- per width: masks, comparisons, selection ---- */
#if ATTN_VEC_WIDTH == 16
/* The first `lanes` lanes (none for lanes <= 0, all for lanes >= 16). */
V_INLINE vmask vmask_first(int lanes) {
    return lanes >= 16 ? (vmask)0xFFFF : lanes <= 0 ? (vmask)0 : (vmask)((1u << lanes) - 1u);
}
V_INLINE vf vf_maskz_loadu(vmask m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
V_INLINE vf vf_mask_loadu_or(vf fill, vmask m, const float *p) {
    return _mm512_mask_loadu_ps(fill, m, p); /* p where m, fill elsewhere */
}
V_INLINE void vf_mask_storeu(float *p, vmask m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
V_INLINE vf vf_select(vmask m, vf when_clear, vf when_set) {
    return _mm512_mask_blend_ps(m, when_clear, when_set);
}
V_INLINE vf vf_maskz(vmask m, vf v) { return _mm512_maskz_mov_ps(m, v); }
V_INLINE vmask vf_less(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
V_INLINE vmask vf_equal(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
V_INLINE vmask vf_is_nan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
V_INLINE vmask vmask_or(vmask a, vmask b) { return (vmask)(a | b); }
V_INLINE int vmask_any(vmask m) { return m != 0; }
V_INLINE vi vi_maskz(vmask m, vi v) { return _mm512_maskz_mov_epi32(m, v); }
V_INLINE vi vi_zero(void) { return _mm512_setzero_si512(); }
V_INLINE vi vi_loadu(const void *p) { return _mm512_loadu_si512(p); }
V_INLINE vi vi_and(vi a, vi b) { return _mm512_and_si512(a, b); }
V_INLINE vi vi_or(vi a, vi b) { return _mm512_or_si512(a, b); }
V_INLINE vi vi_select(vmask m, vi when_clear, vi when_set) {
    return _mm512_mask_blend_epi32(m, when_clear, when_set);
}
V_INLINE vmask vi_equal(vi a, vi b) { return _mm512_cmpeq_epi32_mask(a, b); }
V_INLINE vmask vi_greater(vi a, vi b) { return _mm512_cmpgt_epi32_mask(a, b); } /* signed */
#else
V_INLINE vmask vmask_first(int lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
V_INLINE vf vf_maskz_loadu(vmask m, const float *p) { return _mm256_maskload_ps(p, m); }
V_INLINE vf vf_mask_loadu_or(vf fill, vmask m, const float *p) {
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
/* A full mask stores plainly: VMASKMOVPS to memory costs many times a plain store on some
 * cores, and the softmax and weight passes store whole chunks through masks. */
V_INLINE void vf_mask_storeu(float *p, vmask m, vf v) {
    if (_mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xff) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, m, v);
}
V_INLINE vf vf_select(vmask m, vf when_clear, vf when_set) {
    return _mm256_blendv_ps(when_clear, when_set, _mm256_castsi256_ps(m));
}
V_INLINE vf vf_maskz(vmask m, vf v) { return _mm256_and_ps(_mm256_castsi256_ps(m), v); }
V_INLINE vmask vf_less(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
V_INLINE vmask vf_equal(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)); }
V_INLINE vmask vf_is_nan(vf a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
V_INLINE vmask vmask_or(vmask a, vmask b) { return _mm256_or_si256(a, b); }
V_INLINE int vmask_any(vmask m) { return !_mm256_testz_si256(m, m); }
V_INLINE vi vi_maskz(vmask m, vi v) { return _mm256_and_si256(m, v); }
V_INLINE vi vi_zero(void) { return _mm256_setzero_si256(); }
V_INLINE vi vi_loadu(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
V_INLINE vi vi_and(vi a, vi b) { return _mm256_and_si256(a, b); }
V_INLINE vi vi_or(vi a, vi b) { return _mm256_or_si256(a, b); }
V_INLINE vi vi_select(vmask m, vi when_clear, vi when_set) {
    return _mm256_blendv_epi8(when_clear, when_set, m);
}
V_INLINE vmask vi_equal(vi a, vi b) { return _mm256_cmpeq_epi32(a, b); }
V_INLINE vmask vi_greater(vi a, vi b) { return _mm256_cmpgt_epi32(a, b); }
#endif

/* ---- per width: rounding, gathers, horizontal reductions, the square transpose ---- */
#if ATTN_VEC_WIDTH == 16
#include "kernels/simd/transpose16.h"

V_INLINE vf vf_round(vf x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
V_INLINE vf vi_as_vf(vi a) { return _mm512_castsi512_ps(a); } /* the same bits */
V_INLINE vi vf_as_vi(vf a) { return _mm512_castps_si512(a); }
/* x to IEEE half (VCVTPS2PH, nearest-even) and back (VCVTPH2PS). */
V_INLINE vf vf_through_f16(vf x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
V_INLINE vi vi_lane_index(void) {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
/* Lane l = base[offsets[l]] where m, 0 elsewhere. */
V_INLINE vf vf_maskz_gather(vmask m, vi offsets, const float *base) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, offsets, base, 4);
}
/* Fixed halving trees (upper half onto lower half down to one lane), so a sum is
 * deterministic. */
V_INLINE float vf_reduce_add(vf v) { return _mm512_reduce_add_ps(v); }
V_INLINE float vf_reduce_max(vf v) { return _mm512_reduce_max_ps(v); }
/* v[i] = row i of a VLANES x VLANES block -> v[j] = column j, in place. */
V_INLINE void vf_transpose_square(vf v[VLANES]) { attn_transpose16(v); }
#else
V_INLINE vf vf_round(vf x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
V_INLINE vf vi_as_vf(vi a) { return _mm256_castsi256_ps(a); }
V_INLINE vi vf_as_vi(vf a) { return _mm256_castps_si256(a); }
V_INLINE vf vf_through_f16(vf x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
V_INLINE vi vi_lane_index(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
V_INLINE vf vf_maskz_gather(vmask m, vi offsets, const float *base) {
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, offsets, _mm256_castsi256_ps(m), 4);
}
V_INLINE float vf_reduce_add(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
V_INLINE float vf_reduce_max(vf v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
V_INLINE void vf_transpose_square(vf v[VLANES]) {
    vf a[8], b[8];
    for (int i = 0; i < 4; ++i) {
        a[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            const __m256d x = _mm256_castps_pd(a[4 * i + j]), y = _mm256_castps_pd(a[4 * i + j + 2]);
            b[4 * i + 2 * j] = _mm256_castpd_ps(_mm256_unpacklo_pd(x, y));
            b[4 * i + 2 * j + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(x, y));
        }
    for (int j = 0; j < 4; ++j) {
        v[j] = _mm256_permute2f128_ps(b[j], b[4 + j], 0x20);
        v[4 + j] = _mm256_permute2f128_ps(b[j], b[4 + j], 0x31);
    }
}
#endif

/* ---- both widths: rounding to the 16-bit operand types (kernels/lowp.h), lane by lane ---- */
/* The fp32 bits plus half a bf16 ulp, ties to even: the top 16 bits are the bf16 nearest to
 * every finite or infinite x (a subnormal's carry stays below its sign bit). */
V_INLINE vi vi_bf16_rounding_sum(vi bits) {
    return vi_add(vi_add(bits, vi_set1(0x7fff)), vi_and(vi_srli(bits, 16), vi_set1(1)));
}

/* x rounded to bfloat16 and widened back: the bits of attn_lowp_bf16_round (nearest-even;
 * an fp32 subnormal gives the zero of its sign, NaN the quiet NaN of its top 16 bits). */
V_INLINE vf vf_round_bf16(vf x) {
    const vi bits = vf_as_vi(x);
    const vi rounded =
        vi_select(vf_is_nan(x), vi_bf16_rounding_sum(bits), vi_or(bits, vi_set1(0x00400000)));
    const vmask subnormal = vi_equal(vi_and(bits, vi_set1(0x7f800000)), vi_zero());
    const vi kept = vi_select(subnormal, vi_set1((int)0xffff0000u), vi_set1((int)0x80000000u));
    return vi_as_vf(vi_and(rounded, kept));
}

/* vf_round_bf16 for lanes x >= +0 that are not NaN (+inf included), in 7 operations instead
 * of 11: no NaN to quiet, no sign to keep (a subnormal gives +0). The softmax step's p, which
 * are never negative or NaN (vmath.h, vf_exp2_nonpositive). */
V_INLINE vf vf_round_bf16_nonnegative(vf x) {
    const vi bits = vf_as_vi(x);
    const vi rounded = vi_and(vi_bf16_rounding_sum(bits), vi_set1((int)0xffff0000u));
    return vi_as_vf(vi_maskz(vi_greater(bits, vi_set1(0x007fffff)), rounded));
}

/* x rounded to IEEE half and widened back: the bits of attn_float_to_f16 (nearest-even, half
 * subnormals kept, |x| >= 65520 to inf; NaN gives the quiet NaN of its sign, 0x7e00 as a
 * half, where VCVTPS2PH would keep payload bits). */
V_INLINE vf vf_round_f16(vf x) {
    const vf quiet = vf_or(vf_and(x, vf_set1(-0.0f)), vi_as_vf(vi_set1(0x7fc00000)));
    return vf_select(vf_is_nan(x), vf_through_f16(x), quiet);
}

#endif /* ATTN_KERNELS_SIMD_VEC_H */
