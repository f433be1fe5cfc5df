/*
 * lowp.h — the low-precision (bf16 / fp16) micro-kernel contract: packing K and V from 16-bit
 * storage, S = Q·Kᵀ with bf16 operands and fp32 results, O += P·V with P rounded to bf16 and
 * an fp32 accumulator. These are the bf16 slots of the kernel registry's forward part; the
 * softmax step and the row rescale stay the fp32 kernels' (kernel.h), since scores, row
 * statistics and the accumulator are fp32.
 *
 * Implementations (one table each, all on the same packed layout, so a buffer packed by one
 * is valid for every other — the generic one is the tests' reference on the same bytes):
 *   generic/lowp_generic.c      portable C, the reference
 *   avx512bf16/lowp_avx512bf16.c  VDPBF16PS on zmm registers (AVX512-BF16 + AVX512F/BW/VL)
 *   amx/lowp_amx.c              TDPBF16PS on AMX tiles (AMX-TILE + AMX-BF16), needs the OS
 *                               permission for tile data (cpu_features)
 * and for fp16 operands, on the same packed bytes (the layouts move 16-bit elements as they
 * are, whatever they encode):
 *   generic/lowp_generic.c      attn_lowp_generic_f16: portable C, the reference
 *   amx/lowp_amx.c              attn_lowp_amx_fp16: TDPFP16PS (AMX-FP16, Granite Rapids on)
 * Without AMX-FP16, fp16 storage is converted to fp32 when packed (attn_lowp_convert below)
 * and the fp32 kernels of kernel.h run on it, with P rounded to fp16 before P·V (no fp16 dot
 * product instruction beats that: AVX512-FP16's VFMADDPH accumulates in fp16). bf16 can run
 * the same way (where VDPBF16PS is slower than two fp32 FMAs per cycle, as on Intel cores:
 * bench/results/intel-xeon-amx.md, "Instruction rates").
 *
 * Where rounding happens (bf16): Q, K, V are bf16 already (copied, never rounded). Each
 * product of two bf16 numbers is exact in fp32; the reduction adds the products in index
 * order into one fp32 sum, rounding to nearest-even after every addition (the pair order of
 * VDPBF16PS: for reduction pair p, first element 2p+1, then element 2p). P (fp32
 * probabilities) is rounded to bf16, nearest-even, with fp32 subnormals flushed to zero (as
 * VCVTNE2PS2BF16 does), right before P·V; the row sum l of the softmax uses the fp32 P.
 * Hardware additionally treats bf16 subnormal inputs as zero and flushes subnormal fp32
 * results (differences below 2^-126 in absolute value); the generic table does not.
 *
 * Where rounding happens (fp16 tiles): Q, K, V are fp16 already. Each product of two fp16
 * numbers is exact in fp32 (11-bit significands, exponents within fp32's range); the
 * reduction adds them in index order into one fp32 sum, rounding to nearest-even after every
 * addition, pair element 2p first, then 2p+1 (TDPFP16PS's order, the reverse of the bf16
 * tables). P is rounded to fp16, nearest-even, fp16 subnormals kept (VCVTPS2PH), right before
 * P·V; l uses the fp32 P. TDPFP16PS reads fp16 subnormal inputs as they are (unlike the bf16
 * instructions) and flushes subnormal fp32 results; the generic fp16 table does not flush.
 *
 * Packed layouts (shared by every table; all bytes 64-byte aligned, padding zero):
 *   keys:    blocks of 16 keys; block b = [key_pairs][16 keys][2], key_pairs =
 *            attn_lowp_dim_pairs(dim) = round_up(dim, 32) / 2: element (key 16b + l,
 *            d) at bf16 index b·16·2·key_pairs + (d/2)·32 + l·2 + d%2. A [16 pairs][16][2]
 *            slab is exactly one AMX B tile of Q·Kᵀ (16 keys × 32 dims) and each row of it one
 *            zmm of VDPBF16PS (16 keys × one dim pair).
 *   values:  the VNNI pair layout along the key index: [value_pairs][dim16][2] with
 *            value_pairs = round_up(count, 32) / 2 and dim16 = round_up(dim, 16): element
 *            (key c, e) at (c/2)·dim16·2 + e·2 + c%2. 16 pair rows × 16 value elements are
 *            one AMX B tile of P·V (row stride dim16·4 bytes); 16 elements of one pair row one
 *            zmm of VDPBF16PS.
 *   queries: row-major bf16 rows, query_stride ≥ attn_lowp_query_stride(dim) elements (a
 *            multiple of 32), zero in [dim, round_up(dim, 32)) of every row.
 * Prefix property (as kernel.h): a tile packed from `count` keys is a valid packing of its
 * first count2 ≤ count keys for score_tile / accumulate_values with count2; the extra keys
 * of a value pair / 32-key chunk get weight exactly 0 (0·v = 0 for finite v, so a loop that
 * uses prefixes must stage non-finite values, as it does for fp32).
 */
#ifndef ATTN_KERNELS_LOWP_H
#define ATTN_KERNELS_LOWP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn.h" /* attn_dtype */
#include "kernels/half.h"

typedef struct attn_lowp_kernels {
    const char *name; /* "generic", "avx512bf16", "amx" (bf16); "generic", "amx_fp16" (fp16) */

    /* Packs `count` keys (values) of `dim` bf16 elements: element (c, d) at
     * source[c*token_stride + d*dim_stride]; packed: attn_lowp_packed_*_bytes bytes. */
    void (*pack_keys)(int count, int dim, const uint16_t *source, int64_t token_stride,
                      int64_t dim_stride, uint16_t *packed);
    void (*pack_values)(int count, int dim, const uint16_t *source, int64_t token_stride,
                        int64_t dim_stride, uint16_t *packed);

    /* scores[r*scores_stride + c] = sum_d q[r][d] * k_c[d] (fp32, pair order above) for
     * r < rows, c < count; queries [rows][query_stride] bf16 (layout above). */
    void (*score_tile)(int rows, int count, int dim, const uint16_t *queries, int query_stride,
                       const uint16_t *packed_keys, float *scores, int scores_stride);

    /* accumulator[r*accumulator_stride + e] += sum_c bf16(weights[r*weights_stride + c]) *
     * v_c[e] for r < rows, e < dim (keys in index order, in pairs as above). */
    void (*accumulate_values)(int rows, int count, int dim, const float *weights,
                              int weights_stride, const uint16_t *packed_values,
                              float *accumulator, int accumulator_stride);
} attn_lowp_kernels;

/* Conversions between the 16-bit storage types and fp32: the packing of K/V (and the query
 * gather) for the fp32 kernels, the rounding of P to the operand type when the fp32 kernels
 * compute P·V for bf16 / fp16 operands (a product of two bf16 or two fp16 numbers is exact in
 * fp32, so fp32 FMAs on rounded P and converted V give the pair products of lowp.h), and the
 * output store. All roundings are nearest-even; bf16 rounding flushes fp32 subnormals to 0
 * (attn_lowp_bf16_round); fp16 keeps its subnormals. */
typedef struct attn_lowp_convert {
    const char *name; /* "generic", "avx512" */
    /* destination[c*destination_stride + d] = source[c*token_stride + d*dim_stride] as fp32
     * (exact), c < count, d < dim; source bf16 / fp16 bits. */
    void (*bf16_to_f32_rows)(int count, int dim, const uint16_t *source, int64_t token_stride,
                             int64_t dim_stride, float *destination, int64_t destination_stride);
    void (*f16_to_f32_rows)(int count, int dim, const uint16_t *source, int64_t token_stride,
                            int64_t dim_stride, float *destination, int64_t destination_stride);
    /* destination[e*stride] = bf16 / fp16 of source[e] for e < count; returns how many finite
     * sources became ±inf (fp16: |x| ≥ 65520; bf16: |x| beyond the largest bf16 by half an
     * ulp), 0 when all fit. NaN stays NaN, inf stays inf (neither is counted). */
    int64_t (*f32_to_bf16)(int64_t count, const float *source, uint16_t *destination,
                           int64_t stride);
    int64_t (*f32_to_f16)(int64_t count, const float *source, uint16_t *destination,
                          int64_t stride);
    /* values[r*stride + c] = fp32 of the rounding of itself to `type` (ATTN_DTYPE_BF16 or
     * ATTN_DTYPE_F16), r < rows, c < count (P rounded to the operand type, in place). */
    void (*round_rows)(attn_dtype type, int rows, int count, float *values, int stride);
} attn_lowp_convert;

/* ---- the tables (kernels/generic, kernels/avx512bf16, kernels/amx) ---- */
extern const attn_lowp_kernels attn_lowp_generic;
extern const attn_lowp_convert attn_lowp_convert_generic;
#if defined(ATTN_HAVE_AVX2_KERNELS)
extern const attn_lowp_convert attn_lowp_convert_avx2; /* + F16C */
#endif
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
extern const attn_lowp_kernels attn_lowp_avx512bf16;
extern const attn_lowp_convert attn_lowp_convert_avx512; /* + F16C, AVX512-BF16 */
#endif
extern const attn_lowp_kernels attn_lowp_generic_f16; /* fp16 operands */
#if defined(ATTN_HAVE_AMX_KERNELS)
extern const attn_lowp_kernels attn_lowp_amx;
extern const attn_lowp_kernels attn_lowp_amx_fp16; /* fp16 operands, AMX-FP16 */
#endif

/* The packing functions of the tables (also used by other tables on the same layout). */
void attn_lowp_generic_pack_keys(int count, int dim, const uint16_t *source,
                                 int64_t token_stride, int64_t dim_stride, uint16_t *packed);
void attn_lowp_generic_pack_values(int count, int dim, const uint16_t *source,
                                   int64_t token_stride, int64_t dim_stride, uint16_t *packed);
void attn_lowp_avx512bf16_pack_keys(int count, int dim, const uint16_t *source,
                                    int64_t token_stride, int64_t dim_stride, uint16_t *packed);
void attn_lowp_avx512bf16_pack_values(int count, int dim, const uint16_t *source,
                                      int64_t token_stride, int64_t dim_stride,
                                      uint16_t *packed);

/* destination[c] = bf16(source[c]) (attn_lowp_bf16_round) for c < n, 0 for n <= c < padded;
 * VCVTNE2PS2BF16, 32 at a time (the AMX table's rounding of P). */
void attn_lowp_avx512bf16_round_row(uint16_t *destination, const float *source, int n,
                                    int padded);
/* The same rounding to fp16 (nearest-even, fp16 subnormals kept: attn_float_to_f16), 16 at
 * a time with VCVTPS2PH (the AMX-FP16 table's rounding of P). */
void attn_lowp_avx512_round_row_f16(uint16_t *destination, const float *source, int n,
                                    int padded);

/* ---- layout sizes (shared by every table) ---- */
static inline int attn_lowp_round_up(int n, int multiple) {
    return (n + multiple - 1) / multiple * multiple;
}
static inline int attn_lowp_dim_pairs(int dim) { return attn_lowp_round_up(dim, 32) / 2; }
static inline int attn_lowp_query_stride(int dim) { return attn_lowp_round_up(dim, 32); }
/* Bytes of a packed key / value tile of `count` keys of `dim` elements. */
static inline size_t attn_lowp_packed_keys_bytes(int count, int dim) {
    return (size_t)attn_lowp_round_up(count, 16) * (size_t)attn_lowp_dim_pairs(dim) * 2 * 2;
}
static inline size_t attn_lowp_packed_values_bytes(int count, int dim) {
    return (size_t)(attn_lowp_round_up(count, 32) / 2) * (size_t)attn_lowp_round_up(dim, 16) *
           2 * 2;
}

/* ---- scalar bf16 rounding with the hardware's rounding points ---- */
/* fp32 → bf16 bits, nearest-even; fp32 subnormals → signed zero (as VCVTNE2PS2BF16); NaN
 * stays a quiet NaN. */
static inline uint16_t attn_lowp_bf16_round(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u);
    if ((bits & 0x7f800000u) == 0) return (uint16_t)((bits >> 16) & 0x8000u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
static inline float attn_lowp_bf16_to_float(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* x rounded to bf16 (attn_lowp_bf16_round) or to fp16 (attn_float_to_f16) and widened back
 * to fp32 exactly: P as a 16-bit P·V reads it (convert.round_rows, and the softmax steps'
 * rounding of P, registry.h). */
static inline float attn_lowp_round_float(float x, int bf16) {
    return bf16 ? attn_lowp_bf16_to_float(attn_lowp_bf16_round(x))
                : attn_f16_to_float(attn_float_to_f16(x));
}

#endif /* ATTN_KERNELS_LOWP_H */
