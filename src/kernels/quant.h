/*
 * quant.h — the 8-bit KV storage formats (attn.h: ATTN_DTYPE_Q8, FP8_E4M3, FP8_E5M2), one
 * scalar definition each, used by the cache on append and read-back, by the generic decode
 * kernels and by the tests. Internal to libattn. docs/inference.md states the rounding:
 *  - Q8: a row x[0..n) (one token, one KV head) is stored as q[e] = round(x[e] / s) in
 *    [-127, 127] with s = max|x| / 127 (s = 0 for a zero row: every q = 0), round = to
 *    nearest, ties to even; it reads back as s * q[e].
 *  - FP8: x / head_scale rounded to the nearest fp8 value (ties to even on the mantissa),
 *    saturating at the largest finite magnitude (448 for E4M3, 57344 for E5M2) instead of
 *    overflowing; subnormals kept. Neither format ever stores an infinity or NaN: the cache
 *    refuses non-finite inputs for them.
 * The SIMD decode kernels widen FP8 through IEEE half bits (E5M2 is the top byte of a half;
 * E4M3 re-biased into one is exactly the value / 256), so ATTN_FP8_E4M3_HALF_FACTOR is the
 * power of two they fold into the scale.
 */
#ifndef ATTN_KERNELS_QUANT_H
#define ATTN_KERNELS_QUANT_H

#include <math.h>
#include <stdint.h>

#include "attn.h"
#include "kernels/half.h"

/* x rounded to the nearest integer, ties to even, for |x| <= 2^22 (adding and subtracting
 * 1.5 * 2^23 in float rounds there: exact IEEE arithmetic, no libm call, no SSE4.1; the
 * library is never built with -ffast-math, which would fold it). */
static inline float attn_round_small(float x) {
    /* volatile: x arrives rounded (a product feeding it is never contracted into an FMA
     * with the addition, which would round differently where FMA is enabled) */
    volatile float rounded_input = x;
    return (rounded_input + 12582912.0f) - 12582912.0f; /* not folded without -ffast-math */
}

/* 1 for the 8-bit storage formats. */
static inline int attn_dtype_is_quantized(attn_dtype dtype) {
    return dtype == ATTN_DTYPE_Q8 || dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2;
}

/* CALL(format) with `format` the compile-time constant equal to the 8-bit `dtype` (Q8,
 * FP8_E4M3, else FP8_E5M2), so that a kernel written for every format (the format a
 * constant argument of an inlined function) is compiled once per format. */
#define ATTN_QUANT_SPECIALISE(dtype, CALL)                                                  \
    ((dtype) == ATTN_DTYPE_Q8         ? CALL(ATTN_DTYPE_Q8)                                  \
     : (dtype) == ATTN_DTYPE_FP8_E4M3 ? CALL(ATTN_DTYPE_FP8_E4M3)                            \
                                      : CALL(ATTN_DTYPE_FP8_E5M2))
/* The same for the two fp8 formats (FP8_E4M3, else FP8_E5M2). */
#define ATTN_FP8_SPECIALISE(dtype, CALL) \
    ((dtype) == ATTN_DTYPE_FP8_E4M3 ? CALL(ATTN_DTYPE_FP8_E4M3) : CALL(ATTN_DTYPE_FP8_E5M2))

/* ---- Q8 ---- */
static inline float attn_q8_row_scale(int64_t count, const float *x) {
    float largest = 0.0f;
    for (int64_t e = 0; e < count; ++e) {
        const float a = fabsf(x[e]);
        if (a > largest) largest = a;
    }
    return largest / 127.0f;
}

static inline int8_t attn_q8_encode(float x, float scale) {
    if (scale == 0.0f) return 0;
    float q = attn_round_small(x / scale); /* |x / scale| <= 127 (to nearest, ties even) */
    if (q > 127.0f) q = 127.0f;
    if (q < -127.0f) q = -127.0f;
    return (int8_t)q;
}

/* ---- FP8 ---- */
/* Nearest fp8 code of x (finite) with `mantissa_bits`, exponent `bias` and largest finite
 * code `largest` (sign apart), saturating. */
static inline uint8_t attn_fp8_encode(float x, int mantissa_bits, int bias, uint32_t largest) {
    const uint8_t sign = signbit(x) ? 0x80u : 0u;
    const float a = fabsf(x);
    const float smallest_normal = ldexpf(1.0f, 1 - bias);
    uint32_t code;
    if (a < smallest_normal) { /* subnormal: units of 2^(1 - bias - mantissa_bits) */
        code = (uint32_t)attn_round_small(a * ldexpf(1.0f, bias - 1 + mantissa_bits));
        /* code = 2^mantissa_bits is the smallest normal's code: the carry is correct */
    } else {
        uint32_t bits = attn_float_bits(a);
        const int drop = 23 - mantissa_bits;
        bits += ((1u << (drop - 1)) - 1u) + ((bits >> drop) & 1u); /* round to nearest even */
        const int exponent = (int)(bits >> 23) - 127 + bias;
        const uint32_t mantissa = (bits >> drop) & ((1u << mantissa_bits) - 1u);
        code = exponent > 30 ? largest : ((uint32_t)exponent << mantissa_bits) | mantissa;
    }
    if (code > largest) code = largest; /* saturate */
    return (uint8_t)(sign | code);
}

static inline uint8_t attn_fp8_e4m3_encode(float x) { return attn_fp8_encode(x, 3, 7, 0x7eu); }
static inline uint8_t attn_fp8_e5m2_encode(float x) { return attn_fp8_encode(x, 2, 15, 0x7bu); }

static inline float attn_fp8_e4m3_decode(uint8_t code) {
    const int exponent = (code >> 3) & 15, mantissa = code & 7;
    float a;
    if ((code & 0x7f) == 0x7f) a = NAN;
    else if (exponent == 0) a = ldexpf((float)mantissa, -9);
    else a = ldexpf(1.0f + (float)mantissa / 8.0f, exponent - 7);
    return (code & 0x80) ? -a : a;
}

static inline float attn_fp8_e5m2_decode(uint8_t code) {
    return attn_f16_to_float((uint16_t)((uint16_t)code << 8));
}

/* E4M3 code c as the IEEE half with bits (sign << 15) | ((c & 0x7f) << 7) is the value / 256. */
#define ATTN_FP8_E4M3_HALF_FACTOR 256.0f

/* The power of two the SIMD kernels fold into a key's scale for `format` after widening it
 * through halves: 256 for E4M3, 1 otherwise. */
static inline float q8_format_factor(attn_dtype format) {
    return format == ATTN_DTYPE_FP8_E4M3 ? ATTN_FP8_E4M3_HALF_FACTOR : 1.0f;
}

/* The value of one stored element of an 8-bit format (before any scale). */
static inline float attn_quant_decode(attn_dtype dtype, uint8_t stored) {
    if (dtype == ATTN_DTYPE_Q8) return (float)(int8_t)stored;
    return dtype == ATTN_DTYPE_FP8_E4M3 ? attn_fp8_e4m3_decode(stored)
                                        : attn_fp8_e5m2_decode(stored);
}

/* ---- Q8 decode arithmetic (registry.h: score_chunk_q8 / accumulate_chunk_q8 with Q8) ----
 * The int8 kernels multiply int16 operands by int8 stored elements in integers (exact sums:
 * VPDPWSSD / VPMADDWD), so two more rounding points exist, both far below int8's own:
 *  - each query row, once per decode task (attn_q8_prepare_queries, below): with
 *    m = max_d |q[d]|, q16[d] = round(q[d] * (16383 / m)) and s_q = m / 16383 (15 bits:
 *    error <= 2^-15 of the row's largest element);
 *  - each row's weights of a chunk, w'[c] = p[c] * (key factor c): with m = max_c |w'[c]|,
 *    w16[c] = round(w'[c] * (32767 / m)), s_w = m / 32767.
 * (m = 0: every operand and the scale are 0; the quotients are one float division each.)
 * Scores are (key factor c * s_q) * float(sum_d q16[d] k[c][d]); the accumulator becomes
 * fma(s_w, float(sum_c w16[c] v[c][e]), rescale * acc). A zero row has scale 0 and gives 0.
 * These inline references are the generic registry's kernels and every SIMD kernel's
 * fallback (the SIMD ones give the same integers, hence the same bits). */
#define ATTN_Q8_QUERY_LEVELS 16383.0f
#define ATTN_Q8_WEIGHT_LEVELS 32767.0f

static inline float attn_q8_largest(int count, const float *x) {
    float largest = 0.0f;
    for (int e = 0; e < count; ++e) largest = fmaxf(largest, fabsf(x[e]));
    return largest;
}

/* levels / largest (0 for largest 0): what an operand is multiplied by before rounding. */
static inline float attn_q8_multiplier(float largest, float levels) {
    return largest == 0.0f ? 0.0f : levels / largest;
}

static inline int32_t attn_q8_operand(float x, float multiplier) {
    const float scaled = x * multiplier; /* |scaled| <= 32767, or NaN from a NaN operand */
    if (scaled != scaled) return -32768; /* as AVX2 converts and packs it (NaN -> int32 min) */
    return (int32_t)attn_round_small(scaled);
}

/* ---- Q8 queries, rounded once per decode task ----
 * score_chunk_q8 with Q8 reads its query rows as attn_q8_prepare_queries leaves them (every
 * registry the same rows, so the same integers): first the rows' scales s_q, rows floats
 * padded to ATTN_Q8_QUERY_SCALE_FLOATS(rows), then row r's int16 elements q16 at
 * attn_q8_query_row(prepared, rows, dim, r), ATTN_Q8_QUERY_STRIDE(dim) of them, 0 past dim.
 * In a 64-byte aligned buffer both parts and every row are 64-byte aligned. They are rounded
 * once per task instead of once per chunk, so that the int8 score kernels, whose speed is
 * their instruction count, do not repeat the rounding for every chunk of keys. */
#define ATTN_Q8_QUERY_STRIDE(dim) (((dim) + 31) / 32 * 32)
#define ATTN_Q8_QUERY_SCALE_FLOATS(rows) (((rows) + 15) / 16 * 16)
#define ATTN_Q8_PREPARED_BYTES(rows, dim)                                                   \
    ((size_t)ATTN_Q8_QUERY_SCALE_FLOATS(rows) * sizeof(float) +                            \
     (size_t)(rows) * (size_t)ATTN_Q8_QUERY_STRIDE(dim) * sizeof(int16_t))

static inline const float *attn_q8_query_scales(const void *prepared) {
    return (const float *)prepared;
}

/* q16 of row r (< rows) of the prepared rows [rows][dim]. */
static inline const int16_t *attn_q8_query_row(const void *prepared, int rows, int dim, int r) {
    const float *after_scales = (const float *)prepared + ATTN_Q8_QUERY_SCALE_FLOATS(rows);
    return (const int16_t *)after_scales + (int64_t)r * ATTN_Q8_QUERY_STRIDE(dim);
}

/* queries [rows][dim] (floats) -> prepared (ATTN_Q8_PREPARED_BYTES(rows, dim) bytes), each
 * row rounded as "Q8 decode arithmetic" states; a row with a NaN or infinite element gets 0
 * operands and a NaN scale (its scores are NaN, as float arithmetic would give). */
static inline void attn_q8_prepare_queries(int rows, int dim, const float *queries,
                                           void *prepared) {
    float *scales = (float *)prepared;
    for (int r = 0; r < ATTN_Q8_QUERY_SCALE_FLOATS(rows); ++r) scales[r] = 0.0f;
    for (int r = 0; r < rows; ++r) {
        const float *query = queries + (int64_t)r * dim;
        int16_t *row = (int16_t *)attn_q8_query_row(prepared, rows, dim, r);
        int finite = 1;
        for (int d = 0; d < dim; ++d) finite &= isfinite(query[d]) != 0;
        if (!finite) { /* a non-finite query: 0 operands and a NaN scale, so NaN scores */
            for (int d = 0; d < ATTN_Q8_QUERY_STRIDE(dim); ++d) row[d] = 0;
            scales[r] = NAN;
            continue;
        }
        const float largest = attn_q8_largest(dim, query);
        const float multiplier = attn_q8_multiplier(largest, ATTN_Q8_QUERY_LEVELS);
        for (int d = 0; d < ATTN_Q8_QUERY_STRIDE(dim); ++d)
            row[d] = d < dim ? (int16_t)attn_q8_operand(query[d], multiplier) : 0;
        scales[r] = largest / ATTN_Q8_QUERY_LEVELS;
    }
}

/* scores[r * chunk_stride + c] for int8 keys, exactly as above; `prepared`: the query rows
 * [rows][dim] as attn_q8_prepare_queries leaves them. */
static inline void attn_q8_score_exact(int rows, int count, int dim, const void *prepared,
                                       const int8_t *keys, int64_t key_stride,
                                       const float *row_scales, float factor, float *scores,
                                       int chunk_stride) {
    for (int r = 0; r < rows; ++r) {
        const int16_t *query = attn_q8_query_row(prepared, rows, dim, r);
        const float query_scale = attn_q8_query_scales(prepared)[r];
        for (int c = 0; c < count; ++c) {
            int64_t sum = 0;
            for (int d = 0; d < dim; ++d) sum += (int64_t)query[d] * keys[c * key_stride + d];
            const float key_factor = row_scales != NULL ? factor * row_scales[c] : factor;
            scores[r * chunk_stride + c] = (key_factor * query_scale) * (float)sum;
        }
    }
}

/* accumulator rows for int8 values, exactly as above; weights [rows][chunk_stride]. */
static inline void attn_q8_accumulate_exact(int rows, int count, int dim, const float *weights,
                                            const float *rescale, const int8_t *values,
                                            int64_t value_stride, const float *row_scales,
                                            float factor, float *accumulator, int chunk_stride) {
    for (int r = 0; r < rows; ++r) {
        float scaled[256]; /* count <= chunk_stride <= 256 */
        for (int c = 0; c < count; ++c)
            scaled[c] = weights[r * chunk_stride + c] *
                        (row_scales != NULL ? factor * row_scales[c] : factor);
        const float largest = attn_q8_largest(count, scaled);
        const float weight_scale = largest / ATTN_Q8_WEIGHT_LEVELS;
        const float multiplier = attn_q8_multiplier(largest, ATTN_Q8_WEIGHT_LEVELS);
        float *row = accumulator + (int64_t)r * dim;
        for (int e = 0; e < dim; ++e) {
            int32_t sum = 0;
            for (int c = 0; c < count; ++c)
                sum += attn_q8_operand(scaled[c], multiplier) * values[c * value_stride + e];
            row[e] = fmaf(weight_scale, (float)sum, rescale[r] * row[e]);
        }
    }
}

#endif /* ATTN_KERNELS_QUANT_H */
