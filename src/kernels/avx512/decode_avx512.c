/*
 * decode_avx512.c — the AVX-512 decode kernel table (contract: src/cache/decode_kernels.h).
 *
 * Decoding reads every cached key and value once per step, so the kernel must keep up with
 * the memory stream (for MHA the keys are read key after key: one sequential stream), and
 * with GQA / MQA / MLA it must also serve many query rows per key
 * (32 rows for MQA at Hq = 32, 128 for MLA): then it is arithmetic-bound and the work is a
 * small matrix product per chunk. Hence:
 *  - scores: blocks of 16 dot products (4 rows x 4 keys, 2 x 8 or 1 x 16, whichever fits the
 *    group), each kept as a 16-lane partial sum over the head dimension, so every loaded key
 *    vector serves up to 4 rows and every query vector up to 16 keys; the 16 partial sums are
 *    reduced together by one fixed transpose-and-add tree (no per-dot horizontal sum);
 *  - softmax: the online-softmax step of a row on whole vectors with the shared vectorised
 *    exp (src/kernels/avx512/exp_avx512.h);
 *  - values: blocks of 3 rows x 128 value floats held in 24 registers across the chunk, the
 *    rescale of the accumulator fused into its load; every value vector loaded serves 3 rows.
 *    (Blocks of 4 rows x 64 floats need fewer loads but read each value row in two strided
 *    passes, which measured slower on streamed values.)
 *  - bf16 keys/values widen to float32 with a shift: in registers for groups of <= 4 rows
 *    (score_chunk_bf16 / accumulate_chunk_bf16: the stored rows are read once, no buffer;
 *    2.3x faster than converting through a buffer for MHA), through a float32 buffer for
 *    larger groups (converted once, then read by every row block); fp16 with vcvtph2ps
 *    through the buffer.
 * Deterministic: a fixed operation order for any input and thread count.
 */
#include <immintrin.h>
#include <math.h>

#include "cache/decode_kernels.h"
#include "kernels/avx512/exp_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static void avx512_bf16_to_f32(int64_t count, const uint16_t *source, float *target) {
    int64_t e = 0;
    for (; e + 16 <= count; e += 16) {
        __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(source + e)));
        _mm512_storeu_ps(target + e, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
    }
    if (e < count) {
        __mmask16 tail = (__mmask16)((1u << (count - e)) - 1u);
        __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, source + e));
        _mm512_mask_storeu_ps(target + e, tail, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
    }
}

static void avx512_f16_to_f32(int64_t count, const uint16_t *source, float *target) {
    int64_t e = 0;
    for (; e + 16 <= count; e += 16)
        _mm512_storeu_ps(target + e,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(source + e))));
    if (e < count) {
        __mmask16 tail = (__mmask16)((1u << (count - e)) - 1u);
        _mm512_mask_storeu_ps(target + e, tail,
                              _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail, source + e)));
    }
}

/* Mask of the first `lanes` of 16 (lanes may exceed 16 or be <= 0). */
static inline __mmask16 lane_mask(int lanes) {
    if (lanes >= 16) return (__mmask16)0xffff;
    return lanes <= 0 ? (__mmask16)0 : (__mmask16)((1u << lanes) - 1u);
}

/* 16 stored elements base[index ..] as float32 (lanes outside `lanes` are 0): float32
 * storage, or bfloat16 widened by a 16-bit shift (exact). */
ALWAYS_INLINE __m512 load_stored(const void *base, int64_t index, __mmask16 lanes,
                                 const int is_bf16) {
    if (is_bf16) {
        const __m512i wide =
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, (const uint16_t *)base + index));
        return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    }
    return _mm512_maskz_loadu_ps(lanes, (const float *)base + index);
}

/* Lane a of the result = the sum of the 16 lanes of v[a], by a fixed tree: 256-bit halves,
 * then 128-bit quarters (shuffle_f32x4), then within 128 bits (unpack). */
ALWAYS_INLINE __m512 transpose_reduce16(const __m512 v[16]) {
    /* The tree below yields lane 4k + j = sum(w[4j + k]); feeding w[4j + k] = v[4k + j]
     * makes lane a = sum(v[a]). */
    __m512 w[16];
    for (int i = 0; i < 16; ++i) w[i] = v[(i % 4) * 4 + i / 4];
    __m512 halves[8], quarters[4];
    for (int i = 0; i < 8; ++i) /* blocks [a0+a2, a1+a3, b0+b2, b1+b3] */
        halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x44),
                                  _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i) /* block m = 4-lane partial of w[4i + m] */
        quarters[i] = _mm512_add_ps(_mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0x88),
                                    _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0xDD));
    const __m512 pair01 = _mm512_add_ps(_mm512_unpacklo_ps(quarters[0], quarters[1]),
                                        _mm512_unpackhi_ps(quarters[0], quarters[1]));
    const __m512 pair23 = _mm512_add_ps(_mm512_unpacklo_ps(quarters[2], quarters[3]),
                                        _mm512_unpackhi_ps(quarters[2], quarters[3]));
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(pair01), _mm512_castps_pd(pair23));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(pair01), _mm512_castps_pd(pair23));
    return _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
}

/* 16 dot products over `dim`: block_rows query rows x block_keys keys
 * (block_rows * block_keys = 16). out[r * block_keys + k] = row[r] . key[k], the keys stored
 * as float32 or bfloat16 (is_bf16). key_major: each key is read whole before the next, a
 * purely sequential stream (the query vectors are reloaded from L1 for each key); else
 * dimension-major: each loaded key vector serves all rows of the block from registers (fewer
 * loads, for groups large enough to be arithmetic-bound). */
ALWAYS_INLINE void score_block(const int block_rows, const int block_keys, const int is_bf16,
                               const int key_major, int dim, const float *const *row,
                               const void *const *key, float *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 16) {
                const __mmask16 lanes = lane_mask(dim - d);
                const __m512 key_vector = load_stored(key[k], d, lanes, is_bf16);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] =
                        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lanes, row[r] + d), key_vector,
                                        sums[r * block_keys + k]);
            }
    } else {
        for (int d = 0; d < dim; d += 16) {
            const __mmask16 lanes = lane_mask(dim - d);
            __m512 query[4];
            for (int r = 0; r < block_rows; ++r)
                query[r] = _mm512_maskz_loadu_ps(lanes, row[r] + d);
            for (int k = 0; k < block_keys; ++k) {
                const __m512 key_vector = load_stored(key[k], d, lanes, is_bf16);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] =
                        _mm512_fmadd_ps(query[r], key_vector, sums[r * block_keys + k]);
            }
        }
    }
    _mm512_storeu_ps(out, transpose_reduce16(sums));
}

/* With several rows a block reads its keys dimension-major (a line of each key in turn),
 * which the hardware prefetcher follows poorly; the first row block therefore asks for the
 * keys KEY_LOOKAHEAD rows ahead (measured +20-50% for Hq = 32, Hkv = 8 fp32; for one row the
 * keys are read sequentially and prefetching measured slower). */
enum { KEY_LOOKAHEAD = 8 };

/* Prefetches rows [first, first + rows) of the chunk's keys (those < count). */
static inline void prefetch_keys(int first, int rows, int count, const void *keys,
                                 int64_t key_stride, int dim, size_t element_size) {
    for (int c = first; c < first + rows && c < count; ++c) {
        const char *row = (const char *)keys + (size_t)(c * key_stride) * element_size;
        for (size_t offset = 0; offset < (size_t)dim * element_size; offset += 64)
            _mm_prefetch(row + offset, _MM_HINT_T0);
    }
}

/* score_chunk for keys stored as float32 or bfloat16 (element_size 4 or 2 bytes). */
ALWAYS_INLINE void score_chunk(const int is_bf16, int rows, int count, int dim,
                               const float *queries, const void *keys, int64_t key_stride,
                               float *scores) {
    const size_t element_size = is_bf16 ? sizeof(uint16_t) : sizeof(float);
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    const int key_major = rows <= 4; /* one row block: a single pass over the keys */
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            /* Rows / keys past the end repeat the last one; their results are dropped. */
            const float *row[4];
            const void *key[16];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * dim;
            for (int k = 0; k < block_keys; ++k) {
                const int c = c0 + k < count ? c0 + k : count - 1;
                key[k] = (const char *)keys + (size_t)(c * key_stride) * element_size;
            }
            if (r0 == 0 && !key_major) /* the pass that reads the keys from memory */
                prefetch_keys(c0 + KEY_LOOKAHEAD, block_keys, count, keys, key_stride, dim,
                              element_size);
            float out[16];
            if (block_rows == 4 && key_major) score_block(4, 4, is_bf16, 1, dim, row, key, out);
            else if (block_rows == 4) score_block(4, 4, is_bf16, 0, dim, row, key, out);
            else if (block_rows == 2) score_block(2, 8, is_bf16, 1, dim, row, key, out);
            else score_block(1, 16, is_bf16, 1, dim, row, key, out);
            for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                for (int k = 0; k < block_keys && c0 + k < count; ++k)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c0 + k] = out[r * block_keys + k];
        }
}

static void avx512_score_chunk(int rows, int count, int dim, const float *queries,
                               const float *keys, int64_t key_stride, float *scores) {
    score_chunk(0, rows, count, dim, queries, keys, key_stride, scores);
}

static void avx512_score_chunk_bf16(int rows, int count, int dim, const float *queries,
                                    const uint16_t *keys, int64_t key_stride, float *scores) {
    score_chunk(1, rows, count, dim, queries, keys, key_stride, scores);
}

static void avx512_softmax_chunk(int rows, int count, float scale, float *scores,
                                 float *row_max, float *row_sum, float *rescale) {
    enum { VECTORS = ATTN_DECODE_CHUNK / 16 };
    const int vectors = (count + 15) / 16;
    __mmask16 masks[VECTORS];
    for (int v = 0; v < VECTORS; ++v) masks[v] = lane_mask(count - 16 * v);
    const __m512 minus_infinity = _mm512_set1_ps(-INFINITY), scale_vector = _mm512_set1_ps(scale);
    for (int r = 0; r < rows; ++r) {
        float *row = scores + r * ATTN_DECODE_CHUNK;
        __m512 logits[VECTORS], maximum = minus_infinity;
        for (int v = 0; v < vectors; ++v) {
            logits[v] = _mm512_mul_ps(_mm512_mask_loadu_ps(minus_infinity, masks[v], row + 16 * v),
                                      scale_vector);
            maximum = _mm512_max_ps(maximum, logits[v]);
        }
        const float chunk_max = _mm512_reduce_max_ps(maximum);
        const float old_max = row_max[r];
        const float new_max = chunk_max > old_max ? chunk_max : old_max;
        const float use_max = new_max == -INFINITY ? 0.0f : new_max;
        const __m512 shift = _mm512_set1_ps(use_max);
        __m512 sum = _mm512_setzero_ps();
        for (int v = 0; v < vectors; ++v) {
            const __m512 p = attn_exp_avx512(_mm512_sub_ps(logits[v], shift)); /* -inf -> 0 */
            sum = _mm512_add_ps(sum, p);
            _mm512_mask_storeu_ps(row + 16 * v, masks[v], p);
        }
        rescale[r] = old_max == -INFINITY ? 0.0f : expf(old_max - use_max);
        row_sum[r] = rescale[r] * row_sum[r] + _mm512_reduce_add_ps(sum);
        row_max[r] = new_max;
    }
}

enum { VALUE_BLOCK = 128 }; /* value floats of a row held in registers (8 vectors) */

/* accumulator rows [block_rows][dim], columns [e0, e0 + width) with width <= VALUE_BLOCK:
 * acc = rescale * acc + sum_c weight[r][c] * values[c], values stored as float32 or
 * bfloat16 (is_bf16). */
ALWAYS_INLINE void accumulate_block(const int block_rows, const int is_bf16, int count, int e0,
                                    int width, int dim, const float *weights,
                                    const float *rescale, const void *values,
                                    int64_t value_stride, float *accumulator) {
    enum { VECTORS = VALUE_BLOCK / 16 };
    __mmask16 masks[VECTORS];
    for (int x = 0; x < VECTORS; ++x) masks[x] = lane_mask(width - 16 * x);
    __m512 sums[3][VECTORS];
    for (int r = 0; r < block_rows; ++r) {
        const __m512 factor = _mm512_set1_ps(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < VECTORS; ++x)
            sums[r][x] = _mm512_mul_ps(factor, _mm512_maskz_loadu_ps(masks[x], row + 16 * x));
    }
    for (int c = 0; c < count; ++c) {
        __m512 weight[3];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = _mm512_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
        const int64_t first = c * value_stride + e0;
        for (int x = 0; x < VECTORS; ++x) {
            const __m512 value_vector = load_stored(values, first + 16 * x, masks[x], is_bf16);
            for (int r = 0; r < block_rows; ++r)
                sums[r][x] = _mm512_fmadd_ps(weight[r], value_vector, sums[r][x]);
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < VECTORS; ++x) _mm512_mask_storeu_ps(row + 16 * x, masks[x], sums[r][x]);
    }
}

/* accumulate_chunk for values stored as float32 or bfloat16: blocks of 3 rows, then the
 * remaining 2 or 1. */
ALWAYS_INLINE void accumulate_chunk(const int is_bf16, int rows, int count, int dim,
                                    const float *weights, const float *rescale,
                                    const void *values, int64_t value_stride,
                                    float *accumulator) {
    for (int e0 = 0; e0 < dim; e0 += VALUE_BLOCK) {
        const int width = dim - e0 < VALUE_BLOCK ? dim - e0 : VALUE_BLOCK;
        int r = 0;
        for (; r + 3 <= rows; r += 3)
            accumulate_block(3, is_bf16, count, e0, width, dim, weights + r * ATTN_DECODE_CHUNK,
                             rescale + r, values, value_stride, accumulator + (int64_t)r * dim);
        if (rows - r == 2)
            accumulate_block(2, is_bf16, count, e0, width, dim, weights + r * ATTN_DECODE_CHUNK,
                             rescale + r, values, value_stride, accumulator + (int64_t)r * dim);
        else if (rows - r == 1)
            accumulate_block(1, is_bf16, count, e0, width, dim, weights + r * ATTN_DECODE_CHUNK,
                             rescale + r, values, value_stride, accumulator + (int64_t)r * dim);
    }
}

static void avx512_accumulate_chunk(int rows, int count, int dim, const float *weights,
                                    const float *rescale, const float *values,
                                    int64_t value_stride, float *accumulator) {
    accumulate_chunk(0, rows, count, dim, weights, rescale, values, value_stride, accumulator);
}

static void avx512_accumulate_chunk_bf16(int rows, int count, int dim, const float *weights,
                                         const float *rescale, const uint16_t *values,
                                         int64_t value_stride, float *accumulator) {
    accumulate_chunk(1, rows, count, dim, weights, rescale, values, value_stride, accumulator);
}

const attn_decode_kernels attn_decode_kernels_avx512 = {
    "avx512",           avx512_bf16_to_f32,   avx512_f16_to_f32,
    avx512_score_chunk, avx512_softmax_chunk, avx512_accumulate_chunk,
    avx512_score_chunk_bf16, avx512_accumulate_chunk_bf16,
};
