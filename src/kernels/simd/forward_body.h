/*
 * forward_body.h — the forward part of the registry (kernels/registry.h) written once over
 * vec.h, compiled per width by src/kernels/avx2/forward_avx2.c and
 * src/kernels/avx512/forward_avx512.c; it defines VEC_NAME(forward).
 *
 * Packed layouts (private to this part, per width; both keep the prefix property):
 *  - keys: blocks of VLANES keys; block b holds key (VLANES·b + lane) element d at
 *    [b·VLANES·dim + d·VLANES + lane], zero-filled past `count` (the key index is the SIMD
 *    dimension);
 *  - values: [count][padded_dim] with padded_dim = dim rounded up to VLANES, zero-filled
 *    (the value dimension is the SIMD dimension).
 *
 * Micro-kernels: S = Q·Kᵀ and O += P·V are register-blocked, TILE_ROWS (6) rows × TILE_BLOCKS
 * vectors, loaded once, updated for every element of the reduction in order, stored once:
 * 6 × 4 = 24 of the 32 zmm registers at 16 lanes (two FMA pipes of 4-cycle latency need ≥ 8
 * FMA chains in flight; 24 leaves room for the 4 loads and 1 broadcast of each step),
 * 6 × 2 = 12 of the 16 ymm registers at 8 lanes. The softmax step reads each row twice: (1)
 * the row maximum of the raw scores, (2) p = exp(x·scale − m) summed and written in place
 * (rounded to bf16 / fp16 when the step is asked to, in the same pass);
 * scale is folded into the exponent's FMA (max(x·s) = max(x)·s exactly for s > 0). Pass (1)
 * of row r + 1 runs inside pass (2) of row r, whose exp chain's latency bounds it.
 * Masked entries (−inf) give exactly 0; a row whose maximum is still −inf uses m = 0, so
 * nothing becomes NaN. Soft-capping uses vf_tanh.
 */
#include <math.h>
#include <stdbool.h>

#include "kernels/registry.h"
#include "kernels/simd/parts.h"
#include "kernels/simd/vmath.h"

#define TILE_ROWS 6
#if VLANES == 16
#define TILE_BLOCKS 4
#else
#define TILE_BLOCKS 2
#endif

/* The micro-tile for run-time rows <= TILE_ROWS and blocks <= TILE_BLOCKS: a switch over
 * compile-time shapes, so that the accumulators of each live in registers. */
#if TILE_BLOCKS == 4
#define TILE_CASES_FOR_ROWS(CASE, ROWS) CASE(ROWS, 1) CASE(ROWS, 2) CASE(ROWS, 3) CASE(ROWS, 4)
#else
#define TILE_CASES_FOR_ROWS(CASE, ROWS) CASE(ROWS, 1) CASE(ROWS, 2)
#endif
#define TILE_SWITCH(CASE, rows, blocks)                                                        \
    switch ((rows) * 8 + (blocks)) {                                                           \
        TILE_CASES_FOR_ROWS(CASE, 1)                                                           \
        TILE_CASES_FOR_ROWS(CASE, 2)                                                           \
        TILE_CASES_FOR_ROWS(CASE, 3)                                                           \
        TILE_CASES_FOR_ROWS(CASE, 4)                                                           \
        TILE_CASES_FOR_ROWS(CASE, 5)                                                           \
        TILE_CASES_FOR_ROWS(CASE, 6)                                                           \
    default: break;                                                                            \
    }

static inline int round_up_to_lanes(int n) { return (n + VLANES - 1) / VLANES * VLANES; }

/* ---------------------------------------------------------------- scores: S = Q·Kᵀ ------- */

static size_t packed_keys_floats(int count, int dim) {
    return (size_t)round_up_to_lanes(count) * (size_t)dim;
}

/* The block of VLANES keys (`lanes` of them, the rest zero) at keys, elements contiguous:
 * VLANES x VLANES squares loaded row by row and transposed in registers (whole squares with
 * constant trip counts, so that the square never leaves the registers). */
static void pack_key_block_rows(int lanes, int dim, const float *keys, int64_t token_stride,
                                float *destination) {
    int d0 = 0;
    if (lanes == VLANES)
        for (; d0 + VLANES <= dim; d0 += VLANES) {
            vf square[VLANES];
            for (int lane = 0; lane < VLANES; ++lane)
                square[lane] = vf_loadu(keys + (int64_t)lane * token_stride + d0);
            vf_transpose_square(square);
            for (int d = 0; d < VLANES; ++d) vf_store(destination + (d0 + d) * VLANES, square[d]);
        }
    for (; d0 < dim; d0 += VLANES) {
        const int width = dim - d0 < VLANES ? dim - d0 : VLANES;
        const vmask elements = vmask_first(width);
        vf square[VLANES];
        for (int lane = 0; lane < VLANES; ++lane)
            square[lane] = lane < lanes
                               ? vf_maskz_loadu(elements, keys + (int64_t)lane * token_stride + d0)
                               : vf_zero();
        vf_transpose_square(square);
        for (int d = 0; d < width; ++d) vf_store(destination + (d0 + d) * VLANES, square[d]);
    }
}

/* source: key c, element d at source[c*token_stride + d*dim_stride], c < count, d < dim.
 * packed: blocks of [dim][VLANES], lanes past count zero. Contiguous elements are packed by
 * register transposes; otherwise each packed row of VLANES keys is one gather (lane l reads
 * key first + l) when the key offsets fit in 32 bits, else a scalar transpose. */
static void pack_keys(int count, int dim, const float *source, int64_t token_stride,
                      int64_t dim_stride, float *packed) {
    const int blocks = round_up_to_lanes(count) / VLANES;
    const bool gather = token_stride > -(INT32_MAX / VLANES) && token_stride < INT32_MAX / VLANES;
    const vi lane_offsets = vi_mullo(vi_lane_index(), vi_set1(gather ? (int)token_stride : 0));
    for (int block = 0; block < blocks; ++block) {
        float *destination = packed + (size_t)block * VLANES * dim;
        const int first = block * VLANES;
        const int lanes = count - first < VLANES ? count - first : VLANES;
        const float *keys = source + (int64_t)first * token_stride;
        if (dim_stride == 1) {
            pack_key_block_rows(lanes, dim, keys, token_stride, destination);
            continue;
        }
        if (gather) {
            const vmask mask = vmask_first(lanes);
            for (int d = 0; d < dim; ++d)
                vf_store(destination + d * VLANES,
                         vf_maskz_gather(mask, lane_offsets, keys + (int64_t)d * dim_stride));
            continue;
        }
        if (lanes < VLANES)
            for (int i = 0; i < VLANES * dim; ++i) destination[i] = 0.0f;
        for (int lane = 0; lane < lanes; ++lane) {
            const float *key = keys + (int64_t)lane * token_stride;
            for (int d = 0; d < dim; ++d)
                destination[d * VLANES + lane] = key[(int64_t)d * dim_stride];
        }
    }
}

/* One micro-tile: ROWS query rows × BLOCKS key blocks. queries [ROWS][query_stride],
 * keys = first packed block, scores [ROWS][scores_stride]; the last block stores only the
 * lanes in last_mask. */
V_INLINE void score_micro_tile(const int ROWS, const int BLOCKS, int dim, const float *queries,
                               int query_stride, const float *keys, float *scores,
                               int scores_stride, vmask last_mask) {
    vf accumulator[TILE_ROWS][TILE_BLOCKS];
    for (int r = 0; r < ROWS; ++r)
        for (int b = 0; b < BLOCKS; ++b) accumulator[r][b] = vf_zero();
    const size_t block_floats = (size_t)VLANES * dim;
#pragma GCC unroll 2
    for (int d = 0; d < dim; ++d) {
        vf key[TILE_BLOCKS];
        for (int b = 0; b < BLOCKS; ++b)
            key[b] = vf_load(keys + b * block_floats + (size_t)d * VLANES);
        for (int r = 0; r < ROWS; ++r) {
            const vf query = vf_set1(queries[(size_t)r * query_stride + d]);
            for (int b = 0; b < BLOCKS; ++b)
                accumulator[r][b] = vf_fmadd(query, key[b], accumulator[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) vf_storeu(row + b * VLANES, accumulator[r][b]);
        vf_mask_storeu(row + (BLOCKS - 1) * VLANES, last_mask, accumulator[r][BLOCKS - 1]);
    }
}

#define SCORE_CASE(ROWS, BLOCKS)                                                               \
    case (ROWS)*8 + (BLOCKS):                                                                  \
        score_micro_tile(ROWS, BLOCKS, dim, queries, query_stride, keys, scores, scores_stride, \
                         last_mask);                                                           \
        break;

static void score_micro_tile_any(int rows, int blocks, int dim, const float *queries,
                                 int query_stride, const float *keys, float *scores,
                                 int scores_stride, vmask last_mask) {
    TILE_SWITCH(SCORE_CASE, rows, blocks)
}

/* scores[r][c] = queries[r]·key_c for r < rows, c < count. queries [rows][query_stride],
 * packed_keys from pack_keys(count, dim), scores [rows][scores_stride]. */
static void score_tile(int rows, int count, int dim, const float *queries, int query_stride,
                       const float *packed_keys, float *scores, int scores_stride) {
    const int blocks = round_up_to_lanes(count) / VLANES;
    const size_t block_floats = (size_t)VLANES * dim;
    for (int first_block = 0; first_block < blocks; first_block += TILE_BLOCKS) {
        const int micro_blocks =
            blocks - first_block < TILE_BLOCKS ? blocks - first_block : TILE_BLOCKS;
        const int last_key = (first_block + micro_blocks) * VLANES;
        const vmask last_mask = vmask_first(count - (last_key - VLANES));
        const float *keys = packed_keys + (size_t)first_block * block_floats;
        for (int first_row = 0; first_row < rows; first_row += TILE_ROWS) {
            const int micro_rows = rows - first_row < TILE_ROWS ? rows - first_row : TILE_ROWS;
            score_micro_tile_any(micro_rows, micro_blocks, dim,
                                 queries + (size_t)first_row * query_stride, query_stride, keys,
                                 scores + (size_t)first_row * scores_stride +
                                     first_block * VLANES,
                                 scores_stride, last_mask);
        }
    }
}

/* ---------------------------------------------------------------- values: O += P·V ------ */

static size_t packed_values_floats(int count, int dim) {
    return (size_t)count * (size_t)round_up_to_lanes(dim);
}

/* source: value c, element e at source[c*token_stride + e*dim_stride].
 * packed: [count][round_up_to_lanes(dim)], zero past dim. Returns whether every value is
 * finite: a lane whose exponent bits are all ones (inf, NaN) is caught as it is copied. */
static bool pack_values(int count, int dim, const float *source, int64_t token_stride,
                        int64_t dim_stride, float *packed) {
    const int row_floats = round_up_to_lanes(dim);
    const vf exponent = vi_as_vf(vi_set1(0x7f800000));
    vmask non_finite = vf_less(exponent, exponent); /* no lane */
    for (int c = 0; c < count; ++c) {
        const float *value = source + (int64_t)c * token_stride;
        float *destination = packed + (size_t)c * row_floats;
        if (dim_stride != 1) {
            for (int e = 0; e < dim; ++e) destination[e] = value[(int64_t)e * dim_stride];
            for (int e = dim; e < row_floats; ++e) destination[e] = 0.0f;
        }
        for (int e = 0; e < dim; e += VLANES) {
            const vf element = dim_stride != 1 ? vf_load(destination + e)
                               : e + VLANES <= dim
                                   ? vf_loadu(value + e)
                                   : vf_maskz_loadu(vmask_first(dim - e), value + e);
            if (dim_stride == 1) vf_store(destination + e, element);
            non_finite = vmask_or(non_finite, vf_equal(vf_and(element, exponent), exponent));
        }
    }
    return !vmask_any(non_finite);
}

/* One micro-tile: accumulator rows [ROWS][accumulator_stride], BLOCKS vectors; the last
 * vector touches only the lanes in last_mask. */
V_INLINE void value_micro_tile(const int ROWS, const int BLOCKS, int count,
                               const float *weights, int weights_stride, const float *values,
                               int value_row_floats, float *accumulator,
                               int accumulator_stride, vmask last_mask) {
    vf sum[TILE_ROWS][TILE_BLOCKS];
    for (int r = 0; r < ROWS; ++r) {
        const float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) sum[r][b] = vf_loadu(row + b * VLANES);
        sum[r][BLOCKS - 1] = vf_maskz_loadu(last_mask, row + (BLOCKS - 1) * VLANES);
    }
#pragma GCC unroll 2
    for (int c = 0; c < count; ++c) {
        vf value[TILE_BLOCKS];
        const float *value_row = values + (size_t)c * value_row_floats;
        for (int b = 0; b < BLOCKS; ++b) value[b] = vf_load(value_row + b * VLANES);
        for (int r = 0; r < ROWS; ++r) {
            const vf weight = vf_set1(weights[(size_t)r * weights_stride + c]);
            for (int b = 0; b < BLOCKS; ++b) sum[r][b] = vf_fmadd(weight, value[b], sum[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) vf_storeu(row + b * VLANES, sum[r][b]);
        vf_mask_storeu(row + (BLOCKS - 1) * VLANES, last_mask, sum[r][BLOCKS - 1]);
    }
}

#define VALUE_CASE(ROWS, BLOCKS)                                                              \
    case (ROWS)*8 + (BLOCKS):                                                                 \
        value_micro_tile(ROWS, BLOCKS, count, weights, weights_stride, values,                \
                         value_row_floats, accumulator, accumulator_stride, last_mask);       \
        break;

static void value_micro_tile_any(int rows, int blocks, int count, const float *weights,
                                 int weights_stride, const float *values, int value_row_floats,
                                 float *accumulator, int accumulator_stride, vmask last_mask) {
    TILE_SWITCH(VALUE_CASE, rows, blocks)
}

/* accumulator[r][e] += sum_c weights[r][c] * value_c[e], r < rows, e < dim, c < count.
 * weights [rows][weights_stride], packed_values from pack_values(count, dim),
 * accumulator [rows][accumulator_stride]. Keys are summed in index order. */
static void accumulate_values(int rows, int count, int dim, const float *weights,
                              int weights_stride, const float *packed_values,
                              float *accumulator, int accumulator_stride) {
    const int value_row_floats = round_up_to_lanes(dim);
    const int vectors = value_row_floats / VLANES;
    for (int first_vector = 0; first_vector < vectors; first_vector += TILE_BLOCKS) {
        const int blocks =
            vectors - first_vector < TILE_BLOCKS ? vectors - first_vector : TILE_BLOCKS;
        const int last_element = (first_vector + blocks) * VLANES;
        const vmask last_mask = vmask_first(dim - (last_element - VLANES));
        const int first_element = first_vector * VLANES;
        for (int first_row = 0; first_row < rows; first_row += TILE_ROWS) {
            const int micro_rows = rows - first_row < TILE_ROWS ? rows - first_row : TILE_ROWS;
            value_micro_tile_any(micro_rows, blocks, count,
                                 weights + (size_t)first_row * weights_stride, weights_stride,
                                 packed_values + first_element, value_row_floats,
                                 accumulator + (size_t)first_row * accumulator_stride +
                                     first_element,
                                 accumulator_stride, last_mask);
        }
    }
}

/* accumulator[r][e] *= factor[r], r < rows, e < dim. A row whose factor is 1 (its maximum
 * did not grow: most rows after the first tiles) is left as it is, which is the same bits. */
static void scale_rows(int rows, int dim, const float *factor, float *accumulator,
                       int accumulator_stride) {
    for (int r = 0; r < rows; ++r) {
        if (factor[r] == 1.0f) continue;
        float *row = accumulator + (size_t)r * accumulator_stride;
        const vf scale = vf_set1(factor[r]);
        int e = 0;
        for (; e + VLANES <= dim; e += VLANES) vf_storeu(row + e, vf_mul(vf_loadu(row + e), scale));
        if (e < dim) {
            const vmask mask = vmask_first(dim - e);
            vf_mask_storeu(row + e, mask, vf_mul(vf_maskz_loadu(mask, row + e), scale));
        }
    }
}

/* ---------------------------------------------------------------- the softmax step ------ */

/* Soft-capping in place: x = softcap * tanh(x * scale / softcap), −inf stays −inf. */
static void apply_softcap(float *row, int count, float scale, float softcap) {
    const vf scale_vector = vf_set1(scale), cap = vf_set1(softcap);
    const vf minus_infinity = vf_set1(-INFINITY);
    for (int c = 0; c < count; c += VLANES) {
        const vmask lanes = vmask_first(count - c);
        const vf x = vf_maskz_loadu(lanes, row + c);
        const vf capped = vf_mul(cap, vf_tanh(vf_div(vf_mul(x, scale_vector), cap)));
        /* -inf (masked) stays -inf, NaN stays NaN (vf_tanh would make it finite) */
        const vf kept = vf_select(vf_equal(x, minus_infinity), capped, minus_infinity);
        vf_mask_storeu(row + c, lanes, vf_select(vf_is_nan(x), kept, x));
    }
}

/* The maximum of one row's raw scores and its NaN lanes (the maxima and vf_exp2_nonpositive
 * drop NaN: NaN lanes are gathered on the side, registry.h). */
typedef struct row_scan {
    vf maximum;
    vmask nan;
} row_scan;

V_INLINE row_scan row_scan_start(void) {
    const vf minus_infinity = vf_set1(-INFINITY);
    return (row_scan){minus_infinity, vf_is_nan(minus_infinity)};
}

V_INLINE void row_scan_add(row_scan *scan, vf x) {
    scan->maximum = vf_max(scan->maximum, x);
    scan->nan = vmask_or(scan->nan, vf_is_nan(x));
}

/* The scan of a whole row on its own (the first row of a step): four chains, so that it runs
 * at the load rate instead of the latency of one chain of maxima. */
V_INLINE row_scan scan_row(const float *row, int count) {
    row_scan scan = row_scan_start(), scan1 = scan, scan2 = scan, scan3 = scan;
    int c = 0;
    for (; c + 4 * VLANES <= count; c += 4 * VLANES) {
        row_scan_add(&scan, vf_loadu(row + c)), row_scan_add(&scan1, vf_loadu(row + c + VLANES));
        row_scan_add(&scan2, vf_loadu(row + c + 2 * VLANES));
        row_scan_add(&scan3, vf_loadu(row + c + 3 * VLANES));
    }
    row_scan_add(&scan, scan1.maximum), row_scan_add(&scan2, scan3.maximum);
    row_scan_add(&scan, scan2.maximum);
    scan.nan = vmask_or(vmask_or(scan.nan, scan1.nan), vmask_or(scan2.nan, scan3.nan));
    for (; c + VLANES <= count; c += VLANES) row_scan_add(&scan, vf_loadu(row + c));
    if (c < count)
        row_scan_add(&scan, vf_mask_loadu_or(vf_set1(-INFINITY), vmask_first(count - c), row + c));
    return scan;
}

/* The exp pass of one row: p = exp(x · scale − m) = 2^((x · scale − m) · log2 e) in place
 * (x · scale − m in one FMA, the factor log2 e after it; written as vf_softmax_p_as), returning
 * the sum of the unrounded p. With SCAN_NEXT it also scans the next row (`next`, same count)
 * into *next_scan: that scan's loads and maxima run in the shadow of the exp chain, whose
 * latency bounds the pass. */
V_INLINE float exp_pass(const bool SCAN_NEXT, const attn_dtype P_TYPE, float *row, int count,
                        float scale, float max_used, const float *next, row_scan *next_scan) {
    const vf scale_vector = vf_set1(scale), max_vector = vf_set1(max_used);
    const vf log2e = vf_set1(VMATH_LOG2E), minus_infinity = vf_set1(-INFINITY);
    vf sum = vf_zero();
    int c = 0;
    for (; c + VLANES <= count; c += VLANES) {
        const vf p = vf_exp2_nonpositive(
            vf_mul(vf_fmsub(vf_loadu(row + c), scale_vector, max_vector), log2e));
        vf_storeu(row + c, vf_softmax_p_as(P_TYPE, p));
        sum = vf_add(sum, p);
        if (SCAN_NEXT) row_scan_add(next_scan, vf_loadu(next + c));
    }
    if (c < count) {
        const vmask mask = vmask_first(count - c);
        const vf x = vf_mul(vf_fmsub(vf_mask_loadu_or(minus_infinity, mask, row + c),
                                     scale_vector, max_vector),
                            log2e);
        const vf p = vf_maskz(mask, vf_exp2_nonpositive(x));
        vf_mask_storeu(row + c, mask, vf_softmax_p_as(P_TYPE, p));
        sum = vf_add(sum, p);
        if (SCAN_NEXT) row_scan_add(next_scan, vf_mask_loadu_or(minus_infinity, mask, next + c));
    }
    return vf_reduce_add(sum);
}

/* The online-softmax step (registry.h) with P written as P_TYPE asks. scores
 * [rows][scores_stride]; row_max, row_sum, rescale: float[rows]. Each row's maximum is scanned
 * during the previous row's exp pass (soft-capping, when asked, is applied to a row before its
 * scan). */
V_INLINE void softmax_rows(const attn_dtype P_TYPE, int rows, int count, float *scores,
                           int scores_stride, float scale, float softcap, float *row_max,
                           float *row_sum, float *rescale) {
    /* Soft-capped scores are already multiplied by scale (scale > 0 keeps the order, so the
     * maximum of the raw scores times scale is the maximum of the scaled ones). */
    const float row_scale = softcap > 0.0f ? 1.0f : scale;
    if (rows <= 0) return;
    if (softcap > 0.0f) apply_softcap(scores, count, scale, softcap);
    row_scan scan = scan_row(scores, count);
    for (int r = 0; r < rows; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        const float tile_max = vf_reduce_max(scan.maximum) * row_scale;
        const bool has_nan = vmask_any(scan.nan) || tile_max == INFINITY; /* (+inf - +inf) */
        const float new_max = tile_max > row_max[r] ? tile_max : row_max[r];
        const float max_used = new_max == -INFINITY ? 0.0f : new_max;
        rescale[r] = attn_softmax_rescale(row_max[r], max_used);
        float sum;
        if (r + 1 < rows) {
            float *next = row + scores_stride;
            if (softcap > 0.0f) apply_softcap(next, count, scale, softcap);
            scan = row_scan_start();
            sum = exp_pass(true, P_TYPE, row, count, row_scale, max_used, next, &scan);
        } else {
            sum = exp_pass(false, P_TYPE, row, count, row_scale, max_used, NULL, NULL);
        }
        row_sum[r] = rescale[r] * row_sum[r] + sum;
        row_max[r] = new_max;
        if (has_nan) /* NaN from here on: O and LSE of the row (registry.h) */
            rescale[r] = row_sum[r] = row_max[r] = NAN;
    }
}

/* One compiled step per type P is written in, each a function of its own, so that the exp
 * loop tests nothing and each loop has the registers to itself. */
#define SOFTMAX_STEP_WRITING(P_TYPE, name)                                                     \
    static __attribute__((noinline)) void name(int rows, int count, float *scores,            \
                                               int scores_stride, float scale, float softcap, \
                                               float *row_max, float *row_sum,                \
                                               float *rescale) {                              \
        softmax_rows(P_TYPE, rows, count, scores, scores_stride, scale, softcap, row_max,      \
                     row_sum, rescale);                                                        \
    }
SOFTMAX_STEP_WRITING(ATTN_DTYPE_F32, softmax_step_f32)
SOFTMAX_STEP_WRITING(ATTN_DTYPE_BF16, softmax_step_bf16)
SOFTMAX_STEP_WRITING(ATTN_DTYPE_F16, softmax_step_f16)

static void softmax_step(int rows, int count, float *scores, int scores_stride, float scale,
                         float softcap, attn_dtype p_type, float *row_max, float *row_sum,
                         float *rescale) {
    void (*step)(int, int, float *, int, float, float, float *, float *, float *) =
        p_type == ATTN_DTYPE_BF16 ? softmax_step_bf16
        : p_type == ATTN_DTYPE_F16 ? softmax_step_f16
                                   : softmax_step_f32;
    step(rows, count, scores, scores_stride, scale, softcap, row_max, row_sum, rescale);
}

const attn_forward_kernels VEC_NAME(forward) = {
    .packed_keys_floats = packed_keys_floats,
    .packed_values_floats = packed_values_floats,
    .pack_keys = pack_keys,
    .pack_values = pack_values,
    .score_tile = score_tile,
    .accumulate_values = accumulate_values,
    .softmax_step = softmax_step,
    .scale_rows = scale_rows,
#if defined(ATTN_HAVE_AVX2_KERNELS)
    .philox_blocks = attn_philox_blocks_avx2,
#endif
};
