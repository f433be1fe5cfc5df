/*
 * half.h — conversions between float32 and the two 16-bit storage formats of the KV cache:
 * bfloat16 (the top half of a float32) and IEEE binary16. Rounding is to nearest, ties to
 * even; NaN stays NaN; values beyond the fp16 range become +-inf. Internal to libattn.
 */
#ifndef ATTN_KERNELS_HALF_H
#define ATTN_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t attn_float_bits(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

static inline float attn_bits_float(uint32_t bits) {
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static inline uint16_t attn_float_to_bf16(float x) {
    uint32_t bits = attn_float_bits(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u); /* NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static inline float attn_bf16_to_float(uint16_t h) { return attn_bits_float((uint32_t)h << 16); }

static inline uint16_t attn_float_to_f16(float x) {
    uint32_t bits = attn_float_bits(x);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);      /* NaN */
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* >= 65520: inf */
    if (magnitude < 0x38800000u) {                                       /* subnormal or 0 */
        /* value = magnitude as float; f16 subnormal unit is 2^-24. */
        float scaled = attn_bits_float(magnitude) * 16777216.0f;         /* * 2^24 */
        /* Round half to even through the float addition of 2^23 (exact for < 2^10 units). */
        float rounded = (scaled + 8388608.0f) - 8388608.0f;
        return (uint16_t)(sign | (uint16_t)rounded);
    }
    uint32_t exponent_and_mantissa = magnitude - 0x38000000u;           /* rebias 127 -> 15 */
    exponent_and_mantissa += 0x0fffu + ((exponent_and_mantissa >> 13) & 1u);
    return (uint16_t)(sign | (uint16_t)(exponent_and_mantissa >> 13));
}

static inline float attn_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24 */
        float value = (float)mantissa * (1.0f / 16777216.0f);
        return attn_bits_float(attn_float_bits(value) | sign);
    }
    if (exponent == 31) return attn_bits_float(sign | 0x7f800000u | (mantissa << 13));
    return attn_bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

#endif /* ATTN_KERNELS_HALF_H */
