/*
 * decode_avx2.c — the AVX2 + FMA decode kernel table (contract: kernels/registry.h),
 * the same design as the AVX-512 table (src/kernels/avx512/decode_avx512.c) on 8-float
 * vectors and 16 registers:
 *  - scores: blocks of 8 dot products (4 rows x 2 keys, 2 x 4 or 1 x 8), each an 8-lane
 *    partial sum over the head dimension, reduced together by one fixed hadd tree;
 *  - softmax: whole-vector online-softmax step with the shared exp (exp_avx2.h);
 *  - values: blocks of 2 rows x 32 value floats in 8 registers across the chunk, the rescale
 *    fused into the accumulator load;
 *  - bf16 widens with a shift; fp16 uses the portable converter (kernels/half.h).
 * Deterministic: a fixed operation order for any input and thread count.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/avx2/kernels_avx2.h"
#include "kernels/half.h"
#include "kernels/avx2/exp_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static void avx2_bf16_to_f32(int64_t count, const uint16_t *source, float *target) {
    int64_t e = 0;
    for (; e + 8 <= count; e += 8) {
        __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(source + e)));
        _mm256_storeu_ps(target + e, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
    }
    for (; e < count; ++e) target[e] = attn_bf16_to_float(source[e]);
}

/* fp16 storage is not a speed target here: the portable converter (vcvtph2ps would need
 * F16C, which this table does not require). */
static void avx2_f16_to_f32(int64_t count, const uint16_t *source, float *target) {
    for (int64_t e = 0; e < count; ++e) target[e] = attn_f16_to_float(source[e]);
}

/* Loads the first `lanes` floats of p (all 8 when lanes >= 8), zeros elsewhere. */
ALWAYS_INLINE __m256 load_lanes(const float *p, int lanes) {
    return lanes >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, attn_avx2_lane_mask(lanes));
}

/* Lane a of the result = the sum of the 8 lanes of v[a], by a fixed hadd tree. */
ALWAYS_INLINE __m256 transpose_reduce8(const __m256 v[8]) {
    const __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20),
                         _mm256_permute2f128_ps(low, high, 0x31));
}

/* 8 dot products over `dim`: block_rows rows x block_keys keys (product 8).
 * out[r * block_keys + k] = row[r] . key[k]. With one row the keys are read one after the
 * other (a sequential stream, for the memory-bound MHA case); with several rows every
 * loaded key vector serves them all. */
ALWAYS_INLINE void score_block(const int block_rows, const int block_keys, int dim,
                               const float *const *row, const float *const *key, float *out) {
    __m256 sums[8];
    for (int a = 0; a < 8; ++a) sums[a] = _mm256_setzero_ps();
    if (block_rows == 1) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 8)
                sums[k] = _mm256_fmadd_ps(load_lanes(row[0] + d, dim - d),
                                          load_lanes(key[k] + d, dim - d), sums[k]);
    } else {
        for (int d = 0; d < dim; d += 8) {
            __m256 query[4];
            for (int r = 0; r < block_rows; ++r) query[r] = load_lanes(row[r] + d, dim - d);
            for (int k = 0; k < block_keys; ++k) {
                const __m256 key_vector = load_lanes(key[k] + d, dim - d);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] =
                        _mm256_fmadd_ps(query[r], key_vector, sums[r * block_keys + k]);
            }
        }
    }
    _mm256_storeu_ps(out, transpose_reduce8(sums));
}

static void avx2_score_chunk(int rows, int count, int dim, const float *queries,
                             const float *keys, int64_t key_stride, float *scores) {
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 8 / block_rows;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            /* Rows / keys past the end repeat the last one; their results are dropped. */
            const float *row[4], *key[8];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            float out[8];
            if (block_rows == 4) score_block(4, 2, dim, row, key, out);
            else if (block_rows == 2) score_block(2, 4, dim, row, key, out);
            else score_block(1, 8, dim, row, key, out);
            for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                for (int k = 0; k < block_keys && c0 + k < count; ++k)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c0 + k] = out[r * block_keys + k];
        }
}

/* Fixed-order horizontal maximum and sum of 8 lanes. */
ALWAYS_INLINE float horizontal_max(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

ALWAYS_INLINE float horizontal_sum(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static void avx2_softmax_chunk(int rows, int count, float scale, float *scores,
                               float *row_max, float *row_sum, float *rescale) {
    enum { VECTORS = ATTN_DECODE_CHUNK / 8 };
    const int vectors = (count + 7) / 8;
    const __m256 minus_infinity = _mm256_set1_ps(-INFINITY), scale_vector = _mm256_set1_ps(scale);
    for (int r = 0; r < rows; ++r) {
        float *row = scores + r * ATTN_DECODE_CHUNK;
        __m256 logits[VECTORS], maximum = minus_infinity;
        for (int v = 0; v < vectors; ++v) {
            const int lanes = count - 8 * v;
            __m256 x = _mm256_mul_ps(load_lanes(row + 8 * v, lanes), scale_vector);
            if (lanes < 8) /* lanes past the chunk are masked keys */
                x = _mm256_blendv_ps(minus_infinity, x,
                                     _mm256_castsi256_ps(attn_avx2_lane_mask(lanes)));
            logits[v] = x;
            maximum = _mm256_max_ps(maximum, x);
        }
        const float chunk_max = horizontal_max(maximum);
        const float old_max = row_max[r];
        const float new_max = chunk_max > old_max ? chunk_max : old_max;
        const float use_max = new_max == -INFINITY ? 0.0f : new_max;
        const __m256 shift = _mm256_set1_ps(use_max);
        __m256 sum = _mm256_setzero_ps();
        for (int v = 0; v < vectors; ++v) {
            const __m256 p = attn_exp_avx2(_mm256_sub_ps(logits[v], shift)); /* -inf -> 0 */
            sum = _mm256_add_ps(sum, p);
            const int lanes = count - 8 * v;
            if (lanes >= 8) _mm256_storeu_ps(row + 8 * v, p);
            else _mm256_maskstore_ps(row + 8 * v, attn_avx2_lane_mask(lanes), p);
        }
        rescale[r] = old_max == -INFINITY ? 0.0f : expf(old_max - use_max);
        row_sum[r] = rescale[r] * row_sum[r] + horizontal_sum(sum);
        row_max[r] = new_max;
    }
}

enum { VALUE_BLOCK = 32 }; /* value floats of a row held in registers (4 vectors) */

/* accumulator rows [block_rows][dim], columns [e0, e0 + width), width <= VALUE_BLOCK:
 * acc = rescale * acc + sum_c weight[r][c] * values[c]. */
ALWAYS_INLINE void accumulate_block(const int block_rows, int count, int e0, int width,
                                    int dim, const float *weights, const float *rescale,
                                    const float *values, int64_t value_stride,
                                    float *accumulator) {
    enum { VECTORS = VALUE_BLOCK / 8 };
    __m256i masks[VECTORS];
    for (int x = 0; x < VECTORS; ++x) masks[x] = attn_avx2_lane_mask(width - 8 * x);
    __m256 sums[2][VECTORS];
    for (int r = 0; r < block_rows; ++r) {
        const __m256 factor = _mm256_set1_ps(rescale[r]);
        for (int x = 0; x < VECTORS; ++x)
            sums[r][x] = _mm256_mul_ps(
                factor, _mm256_maskload_ps(accumulator + (int64_t)r * dim + e0 + 8 * x, masks[x]));
    }
    for (int c = 0; c < count; ++c) {
        __m256 weight[2];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = _mm256_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
        const float *value = values + c * value_stride + e0;
        for (int x = 0; x < VECTORS; ++x) {
            const __m256 value_vector = _mm256_maskload_ps(value + 8 * x, masks[x]);
            for (int r = 0; r < block_rows; ++r)
                sums[r][x] = _mm256_fmadd_ps(weight[r], value_vector, sums[r][x]);
        }
    }
    for (int r = 0; r < block_rows; ++r)
        for (int x = 0; x < VECTORS; ++x)
            _mm256_maskstore_ps(accumulator + (int64_t)r * dim + e0 + 8 * x, masks[x], sums[r][x]);
}

static void avx2_accumulate_chunk(int rows, int count, int dim, const float *weights,
                                  const float *rescale, const float *values,
                                  int64_t value_stride, float *accumulator) {
    for (int e0 = 0; e0 < dim; e0 += VALUE_BLOCK) {
        const int width = dim - e0 < VALUE_BLOCK ? dim - e0 : VALUE_BLOCK;
        int r = 0;
        for (; r + 2 <= rows; r += 2)
            accumulate_block(2, count, e0, width, dim, weights + r * ATTN_DECODE_CHUNK,
                             rescale + r, values, value_stride, accumulator + (int64_t)r * dim);
        if (r < rows)
            accumulate_block(1, count, e0, width, dim, weights + r * ATTN_DECODE_CHUNK,
                             rescale + r, values, value_stride, accumulator + (int64_t)r * dim);
    }
}

const attn_decode_kernels attn_avx2_decode = {
    .bf16_to_f32 = avx2_bf16_to_f32,
    .f16_to_f32 = avx2_f16_to_f32,
    .score_chunk = avx2_score_chunk,
    .softmax_chunk = avx2_softmax_chunk,
    .accumulate_chunk = avx2_accumulate_chunk,
    /* no bf16-in-place slots: bf16 is converted to float32 first */
};
