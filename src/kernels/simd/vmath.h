/*
 * vmath.h — vectorised exp and tanh over vec.h, shared by every SIMD kernel body.
 *
 * exp (Cephes expf style): n = round(x·log2 e), r = x − n·ln 2 in two FMA steps (ln 2 split
 * into a high part exact in float and a low correction), e^r ≈ 1 + r + r²·p(r) with a degree-5
 * polynomial on |r| ≤ ln 2 / 2, then e^x = e^r · 2^n. The last step is the one place the
 * widths differ, because AVX2 has no counterpart of vscalefps:
 *  - AVX-512: 2^n by vscalefps (exact, handles underflow to subnormals and to 0); inputs are
 *    clamped to 88.72 above, and x ≤ −104 (where the result rounds to exactly +0), −inf and
 *    NaN give +0 without running vscalefps on them: an underflowing vscalefps lane costs a
 *    microcode assist for the whole vector (many times the cost of the exp), which every
 *    masked logit would otherwise pay;
 *  - AVX2: 2^n built in the exponent bits, so inputs are clamped to [−87, 88.37] (n within
 *    the normal range) and results for x < −87 are set to exactly 0 (expf would give at most
 *    1.6e-38 there; such terms never change a softmax whose sum is ≥ 1).
 * Either way −inf (a masked logit) gives exactly 0, never NaN. Measured against glibc expf on
 * [−87, 88] (tests/test_kernels_tiles.c): max relative error 8.1e-8 (1.4 ulp at 2^-24).
 *
 * tanh: for |y| < 0.5 the odd Taylor polynomial to y^15 (truncation < 1e-8 relative there),
 * else 1 − 2 / (exp(2|y|) + 1) with the sign of y (|2y| capped at 80, where tanh is 1 in
 * float). About 2 ulp; checked against tanh in double by test_kernels_tiles.
 */
#ifndef ATTN_KERNELS_SIMD_VMATH_H
#define ATTN_KERNELS_SIMD_VMATH_H

#include "attn.h" /* attn_dtype */
#include "kernels/simd/vec.h"

V_INLINE vf vf_exp(vf x) {
#if ATTN_VEC_WIDTH == 16
    /* x <= -104 (-inf: every masked logit) and NaN give exactly 0, as clamping at -104 did;
     * those lanes are computed from x = 0 and zeroed at the end, because a vscalefps whose
     * result underflows costs a microcode assist (many times the whole exp) whenever any
     * lane does. */
    const __mmask16 zero_lanes = _mm512_cmp_ps_mask(x, vf_set1(-104.0f), _CMP_NGT_UQ);
    x = _mm512_mask_mov_ps(x, zero_lanes, vf_zero());
    x = vf_min(x, vf_set1(88.72283935546875f));
#else
    const vmask underflow = vf_less(x, vf_set1(-87.0f));
    x = vf_max(x, vf_set1(-87.0f));
    x = vf_min(x, vf_set1(88.37f));
#endif
    const vf n = vf_round(vf_mul(x, vf_set1(1.44269504088896341f)));
    vf r = vf_fnmadd(n, vf_set1(0.693359375f), x);
    r = vf_fnmadd(n, vf_set1(-2.12194440e-4f), r);
    vf p = vf_set1(1.9875691500e-4f);
    p = vf_fmadd(p, r, vf_set1(1.3981999507e-3f));
    p = vf_fmadd(p, r, vf_set1(8.3334519073e-3f));
    p = vf_fmadd(p, r, vf_set1(4.1665795894e-2f));
    p = vf_fmadd(p, r, vf_set1(1.6666665459e-1f));
    p = vf_fmadd(p, r, vf_set1(5.0000001201e-1f));
    const vf y = vf_add(vf_fmadd(p, vf_mul(r, r), r), vf_set1(1.0f));
#if ATTN_VEC_WIDTH == 16
    return _mm512_maskz_scalef_ps((__mmask16)~zero_lanes, y, n);
#else
    const vi exponent = vi_slli(vi_add(vf_to_vi(n), vi_set1(127)), 23);
    return _mm256_andnot_ps(_mm256_castsi256_ps(underflow), vf_mul(y, vi_as_vf(exponent)));
#endif
}

/* The polynomial of vf_exp2 and vf_exp2_nonpositive: 2^f ~ 1 + C1 f + ... + C6 f^6 on
 * |f| <= 0.5. */
#define VMATH_EXP2_C1 6.9314718246e-01f
#define VMATH_EXP2_C2 2.4022647738e-01f
#define VMATH_EXP2_C3 5.5503323674e-02f
#define VMATH_EXP2_C4 9.6184369177e-03f
#define VMATH_EXP2_C5 1.3398875017e-03f
#define VMATH_EXP2_C6 1.5353361960e-04f

/* 2^t, the exp of the softmax passes: e^x = 2^t with t = x·log2 e (one multiply after the
 * FMA that forms x = logit·s − m, which stays as exact as it was), n = round(t), f = t − n
 * exactly (|f| ≤ ½), 2^f by a degree-6 polynomial (fitted for relative error on [−½, ½]: 7.9e-8
 * = 1.3 ulp at most, evaluated in float), times 2^n: about 13 vector operations against 19 for
 * vf_exp (no two-step range reduction, no clamp). The price is the rounding of t: its absolute
 * error ≤ ulp(t)/2 makes the relative error grow with |x| — 2.6e-6 at x = −87 against 8e-8 for
 * vf_exp — the same order as the error that rounding x itself to float already puts in e^x
 * (|x|·6e-8); per unit of 1 + |x| it stays below 1e-7 (test_kernels_tiles measures it so).
 * Terms that small next to the row's largest, 1, never move a softmax row sum.
 *  - AVX-512: t ≤ −150 (2^t rounds to +0; −inf: every masked logit) and NaN give exactly 0,
 *    computed from t = 0 and zeroed by the mask of vscalefps (no underflowing lane, so no
 *    microcode assist: see vf_exp); a finite t above 128 gives +inf, t = +inf NaN
 *    (vf_exp clamped x at 88.7 instead: a finite, meaningless 3.4e38).
 *  - AVX2: t is clamped to [−126, 127.99] (n in the normal exponent range) and t < −126 gives
 *    exactly 0 (2^t < 1.2e-38 there); NaN becomes −126 in the clamp and gives 1.2e-38, as
 *    vf_exp's AVX2 path gives e^−87.
 * Either way −inf gives exactly 0, never NaN. */
V_INLINE vf vf_exp2(vf t) {
#if ATTN_VEC_WIDTH == 16
    const __mmask16 zero_lanes = _mm512_cmp_ps_mask(t, vf_set1(-150.0f), _CMP_NGT_UQ);
    t = _mm512_mask_mov_ps(t, zero_lanes, vf_zero());
#else
    const vmask underflow = vf_less(t, vf_set1(-126.0f));
    t = vf_max(t, vf_set1(-126.0f));
    t = vf_min(t, vf_set1(127.99f));
#endif
    const vf n = vf_round(t);
    const vf f = vf_sub(t, n);
    vf p = vf_set1(VMATH_EXP2_C6);
    p = vf_fmadd(p, f, vf_set1(VMATH_EXP2_C5));
    p = vf_fmadd(p, f, vf_set1(VMATH_EXP2_C4));
    p = vf_fmadd(p, f, vf_set1(VMATH_EXP2_C3));
    p = vf_fmadd(p, f, vf_set1(VMATH_EXP2_C2));
    p = vf_fmadd(p, f, vf_set1(VMATH_EXP2_C1));
    p = vf_fmadd(p, f, vf_set1(1.0f));
#if ATTN_VEC_WIDTH == 16
    return _mm512_maskz_scalef_ps((__mmask16)~zero_lanes, p, n);
#else
    const vi exponent = vi_slli(vi_add(vf_to_vi(n), vi_set1(127)), 23);
    return _mm256_andnot_ps(_mm256_castsi256_ps(underflow), vf_mul(p, vi_as_vf(exponent)));
#endif
}

/* log2 e in float: the factor the callers of vf_exp2 fold into their scale and shift. */
#define VMATH_LOG2E 1.44269504088896341f

V_INLINE vf vf_tanh(vf y) {
    const vf one = vf_set1(1.0f);
    const vf magnitude = vf_abs(y);
    const vf e = vf_exp(vf_min(vf_add(magnitude, magnitude), vf_set1(80.0f)));
    const vf large = vf_sub(one, vf_div(vf_set1(2.0f), vf_add(e, one)));
    const vf square = vf_mul(magnitude, magnitude);
    vf p = vf_set1(-929569.0f / 638512875.0f);
    p = vf_fmadd(p, square, vf_set1(21844.0f / 6081075.0f));
    p = vf_fmadd(p, square, vf_set1(-1382.0f / 155925.0f));
    p = vf_fmadd(p, square, vf_set1(62.0f / 2835.0f));
    p = vf_fmadd(p, square, vf_set1(-17.0f / 315.0f));
    p = vf_fmadd(p, square, vf_set1(2.0f / 15.0f));
    p = vf_fmadd(p, square, vf_set1(-1.0f / 3.0f));
    const vf small = vf_fmadd(vf_mul(p, square), magnitude, magnitude);
    const vf result = vf_select(vf_less(magnitude, vf_set1(0.5f)), large, small);
    return vf_or(result, vf_and(y, vf_set1(-0.0f))); /* sign of y */
}

/* 2^t for the softmax's exponents, t = (x·scale − m)·log2 e ≤ 0 up to rounding (m is the row
 * maximum): a shorter dependency chain than vf_exp2 (the exp pass runs at the latency of its
 * chain, not at the rate of its operations). t is clamped below at −127 only: −inf (a masked
 * logit), NaN and t < −126.5 give exactly 0 (n = −127 builds the exponent bits 0); t must
 * stay below 128. The polynomial is vf_exp2's, evaluated by Estrin's scheme (three FMA
 * levels instead of six), the same at every width (no vscalefps). */
V_INLINE vf vf_exp2_nonpositive(vf t) {
    t = vf_max(t, vf_set1(-127.0f)); /* NaN gives −127: vmaxps returns its second operand */
    const vf n = vf_round(t);
    const vf f = vf_sub(t, n);
    const vf f2 = vf_mul(f, f);
    const vf low = vf_fmadd(vf_set1(VMATH_EXP2_C1), f, vf_set1(1.0f));
    const vf middle = vf_fmadd(vf_set1(VMATH_EXP2_C3), f, vf_set1(VMATH_EXP2_C2));
    const vf high = vf_fmadd(vf_set1(VMATH_EXP2_C5), f, vf_set1(VMATH_EXP2_C4));
    const vf f4 = vf_mul(f2, f2);
    const vf lower = vf_fmadd(middle, f2, low);
    const vf upper = vf_fmadd(vf_set1(VMATH_EXP2_C6), f2, high);
    const vf p = vf_fmadd(upper, f4, lower);
    const vi exponent = vi_slli(vi_add(vf_to_vi(n), vi_set1(127)), 23);
    return vf_mul(p, vi_as_vf(exponent));
}

/* p as a softmax step writes it for a P·V on p_type operands (registry.h): as computed for
 * ATTN_DTYPE_F32, else rounded to bf16 / fp16 in the same pass instead of a pass of its own
 * over P. The steps' p come from vf_exp2 or vf_exp2_nonpositive and are never negative or
 * NaN, where vf_round_bf16_nonnegative and the bare VCVTPS2PH round trip give the bits of
 * vf_round_bf16 and vf_round_f16 (vec.h). */
V_INLINE vf vf_softmax_p_as(const attn_dtype p_type, vf p) {
    return p_type == ATTN_DTYPE_BF16 ? vf_round_bf16_nonnegative(p)
           : p_type == ATTN_DTYPE_F16 ? vf_through_f16(p)
                                      : p;
}

#endif /* ATTN_KERNELS_SIMD_VMATH_H */
