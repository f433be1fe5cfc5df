/*
 * lowp_generic.c — portable C versions of the low-precision kernels of lowp.h: bf16 packing
 * of K and V into the shared pair layouts, Q·Kᵀ and P·V with the rounding points of
 * VDPBF16PS (each exact bf16 product added into the fp32 sum in turn, pair element 2p+1
 * first), the same on fp16 operands with the rounding points of TDPFP16PS (element 2p first;
 * P rounded to fp16), and the fp16 → fp32 / fp32 → fp16 row conversions. These are the reference of the
 * tests and the fallback on CPUs without AVX512-BF16 or AMX.
 */
#include "kernels/lowp.h"
#include "kernels/half.h"

/* keys: element (c, d) at (c/16)·16·2·pairs + (d/2)·32 + (c%16)·2 + d%2; zero padding. */
void attn_lowp_generic_pack_keys(int count, int dim, const uint16_t *source,
                                 int64_t token_stride, int64_t dim_stride, uint16_t *packed) {
    const int pairs = attn_lowp_dim_pairs(dim);
    const size_t total = attn_lowp_packed_keys_bytes(count, dim) / 2;
    memset(packed, 0, total * 2);
    for (int c = 0; c < count; ++c) {
        const uint16_t *key = source + (int64_t)c * token_stride;
        uint16_t *block = packed + (size_t)(c / 16) * 16 * 2 * pairs + (size_t)(c % 16) * 2;
        for (int d = 0; d < dim; ++d)
            block[(size_t)(d / 2) * 32 + d % 2] = key[(int64_t)d * dim_stride];
    }
}

/* values: element (c, e) at (c/2)·dim16·2 + e·2 + c%2; zero padding. */
void attn_lowp_generic_pack_values(int count, int dim, const uint16_t *source,
                                   int64_t token_stride, int64_t dim_stride, uint16_t *packed) {
    const int dim16 = attn_lowp_round_up(dim, 16);
    memset(packed, 0, attn_lowp_packed_values_bytes(count, dim));
    for (int c = 0; c < count; ++c) {
        const uint16_t *value = source + (int64_t)c * token_stride;
        uint16_t *row = packed + (size_t)(c / 2) * dim16 * 2 + c % 2;
        for (int e = 0; e < dim; ++e) row[(size_t)e * 2] = value[(int64_t)e * dim_stride];
    }
}

/* One pair step, the products exact in fp32. bf16 (f16 = 0), VDPBF16PS's order: sum + a1·b1
 * (rounded), then + a0·b0 (rounded). fp16 (f16 = 1), TDPFP16PS's order: a0·b0 first, then
 * a1·b1. f16 is a constant at every call, so the choice folds away. */
static inline float pair_step(float sum, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1,
                              int f16) {
    if (f16) {
        sum += attn_f16_to_float(a0) * attn_f16_to_float(b0);
        sum += attn_f16_to_float(a1) * attn_f16_to_float(b1);
        return sum;
    }
    sum += attn_lowp_bf16_to_float(a1) * attn_lowp_bf16_to_float(b1);
    sum += attn_lowp_bf16_to_float(a0) * attn_lowp_bf16_to_float(b0);
    return sum;
}

/* P rounded to the operand type: bf16 (subnormals flushed) or fp16 (subnormals kept). */
static inline uint16_t round_weight(float p, int f16) {
    return f16 ? attn_float_to_f16(p) : attn_lowp_bf16_round(p);
}

/* Per block of 16 keys, the 16 sums advance one dim pair at a time (each sum in pair order;
 * written across keys so that the compiler vectorises it without reordering any sum). */
static inline void score_tile16(int rows, int count, int dim, const uint16_t *queries,
                                int query_stride, const uint16_t *packed_keys, float *scores,
                                int scores_stride, int f16) {
    const int pairs = attn_lowp_dim_pairs(dim), used_pairs = (dim + 1) / 2;
    for (int r = 0; r < rows; ++r) {
        const uint16_t *query = queries + (size_t)r * query_stride;
        for (int c0 = 0; c0 < count; c0 += 16) {
            const uint16_t *block = packed_keys + (size_t)(c0 / 16) * 16 * 2 * pairs;
            float sum[16] = {0};
            for (int p = 0; p < used_pairs; ++p) {
                const uint16_t *key = block + (size_t)p * 32;
                for (int l = 0; l < 16; ++l)
                    sum[l] = pair_step(sum[l], query[2 * p], query[2 * p + 1], key[2 * l],
                                       key[2 * l + 1], f16);
            }
            for (int l = 0; l < 16 && c0 + l < count; ++l)
                scores[(size_t)r * scores_stride + c0 + l] = sum[l];
        }
    }
}

static inline void accumulate_values16(int rows, int count, int dim, const float *weights,
                                       int weights_stride, const uint16_t *packed_values,
                                       float *accumulator, int accumulator_stride, int f16) {
    const int dim16 = attn_lowp_round_up(dim, 16), used_pairs = (count + 1) / 2;
    for (int r = 0; r < rows; ++r) {
        const float *weight = weights + (size_t)r * weights_stride;
        float *out = accumulator + (size_t)r * accumulator_stride;
        for (int p = 0; p < used_pairs; ++p) {
            const uint16_t w0 = round_weight(weight[2 * p], f16);
            const uint16_t w1 = 2 * p + 1 < count ? round_weight(weight[2 * p + 1], f16) : 0;
            const uint16_t *value = packed_values + (size_t)p * dim16 * 2;
            for (int e = 0; e < dim; ++e)
                out[e] = pair_step(out[e], w0, w1, value[2 * e], value[2 * e + 1], f16);
        }
    }
}

void attn_lowp_generic_score_tile(int rows, int count, int dim, const uint16_t *queries,
                                  int query_stride, const uint16_t *packed_keys, float *scores,
                                  int scores_stride) {
    score_tile16(rows, count, dim, queries, query_stride, packed_keys, scores, scores_stride, 0);
}

void attn_lowp_generic_accumulate_values(int rows, int count, int dim, const float *weights,
                                         int weights_stride, const uint16_t *packed_values,
                                         float *accumulator, int accumulator_stride) {
    accumulate_values16(rows, count, dim, weights, weights_stride, packed_values, accumulator,
                        accumulator_stride, 0);
}

static void generic_f16_score_tile(int rows, int count, int dim, const uint16_t *queries,
                                   int query_stride, const uint16_t *packed_keys, float *scores,
                                   int scores_stride) {
    score_tile16(rows, count, dim, queries, query_stride, packed_keys, scores, scores_stride, 1);
}

static void generic_f16_accumulate_values(int rows, int count, int dim, const float *weights,
                                          int weights_stride, const uint16_t *packed_values,
                                          float *accumulator, int accumulator_stride) {
    accumulate_values16(rows, count, dim, weights, weights_stride, packed_values, accumulator,
                        accumulator_stride, 1);
}

const attn_lowp_kernels attn_lowp_generic = {
    .name = "generic",
    .pack_keys = attn_lowp_generic_pack_keys,
    .pack_values = attn_lowp_generic_pack_values,
    .score_tile = attn_lowp_generic_score_tile,
    .accumulate_values = attn_lowp_generic_accumulate_values,
};

/* fp16 tiles: the same packed bytes (packing moves 16-bit elements as they are), fp16
 * arithmetic; the reference of the AMX-FP16 table. */
const attn_lowp_kernels attn_lowp_generic_f16 = {
    .name = "generic",
    .pack_keys = attn_lowp_generic_pack_keys,
    .pack_values = attn_lowp_generic_pack_values,
    .score_tile = generic_f16_score_tile,
    .accumulate_values = generic_f16_accumulate_values,
};

/* The two 16-bit formats: each conversion below is written once over `bf16` (1: bfloat16,
 * 0: IEEE half), a constant at every call so that it folds away. */
static inline float widen16(uint16_t h, int bf16) {
    return bf16 ? attn_lowp_bf16_to_float(h) : attn_f16_to_float(h);
}

static inline uint16_t narrow16(float x, int bf16) {
    return bf16 ? attn_lowp_bf16_round(x) : attn_float_to_f16(x);
}

static inline void widen_rows(int count, int dim, const uint16_t *source, int64_t token_stride,
                              int64_t dim_stride, float *destination,
                              int64_t destination_stride, int bf16) {
    for (int c = 0; c < count; ++c)
        for (int d = 0; d < dim; ++d)
            destination[(int64_t)c * destination_stride + d] =
                widen16(source[(int64_t)c * token_stride + (int64_t)d * dim_stride], bf16);
}

static void generic_bf16_to_f32_rows(int count, int dim, const uint16_t *source,
                                     int64_t token_stride, int64_t dim_stride,
                                     float *destination, int64_t destination_stride) {
    widen_rows(count, dim, source, token_stride, dim_stride, destination, destination_stride, 1);
}

static void generic_f16_to_f32_rows(int count, int dim, const uint16_t *source,
                                    int64_t token_stride, int64_t dim_stride, float *destination,
                                    int64_t destination_stride) {
    widen_rows(count, dim, source, token_stride, dim_stride, destination, destination_stride, 0);
}

/* Whether x is finite (exponent bits not all ones). */
static inline int is_finite_bits(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return (bits & 0x7f800000u) != 0x7f800000u;
}

/* Narrows count floats to destination[e*stride]; returns how many finite ones became ±inf. */
static inline int64_t narrow(int64_t count, const float *source, uint16_t *destination,
                             int64_t stride, int bf16) {
    const uint16_t inf = bf16 ? 0x7f80u : 0x7c00u;
    int64_t overflowed = 0;
    for (int64_t e = 0; e < count; ++e) {
        const uint16_t h = narrow16(source[e], bf16);
        overflowed += (h & 0x7fffu) == inf && is_finite_bits(source[e]);
        destination[e * stride] = h;
    }
    return overflowed;
}

static int64_t generic_f32_to_bf16(int64_t count, const float *source, uint16_t *destination,
                                   int64_t stride) {
    return narrow(count, source, destination, stride, 1);
}

static int64_t generic_f32_to_f16(int64_t count, const float *source, uint16_t *destination,
                                  int64_t stride) {
    return narrow(count, source, destination, stride, 0);
}

/* Rounds rows of floats in place to the 16-bit format `type` (narrow, then widen). */
static void generic_round_rows(attn_dtype type, int rows, int count, float *values,
                               int stride) {
    const int bf16 = type == ATTN_DTYPE_BF16;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < count; ++c) {
            float *x = values + (size_t)r * stride + c;
            *x = attn_lowp_round_float(*x, bf16);
        }
}

const attn_lowp_convert attn_lowp_convert_generic = {
    .name = "generic",
    .bf16_to_f32_rows = generic_bf16_to_f32_rows,
    .f16_to_f32_rows = generic_f16_to_f32_rows,
    .f32_to_bf16 = generic_f32_to_bf16,
    .f32_to_f16 = generic_f32_to_f16,
    .round_rows = generic_round_rows,
};
