/*
 * decode_avx512.c — the AVX-512 decode kernel table (contract: kernels/registry.h).
 *
 * Decoding reads every cached key and value once per step, so the kernel must keep up with
 * the memory stream (for MHA the keys are read key after key: one sequential stream), and
 * with GQA / MQA / MLA it must also serve many query rows per key (4 rows for Hq = 32,
 * Hkv = 8; 32 for MQA; 128 for MLA): then the arithmetic (a small matrix product per chunk)
 * must leave the memory stream room to run, and the number of loads and conversions per FMA
 * decides the speed. Hence:
 *  - scores: blocks of 16 dot products (4 rows x 4 keys, 2 x 8 or 1 x 16, whichever fits the
 *    group), each kept as a 16-lane partial sum over the head dimension and reduced together
 *    by one fixed transpose-and-add tree (no per-dot horizontal sum). For groups of >= 3
 *    rows the keys are read dimension-major: every loaded key vector serves 4 rows and every
 *    loaded query vector 4 keys from registers (one load per two FMAs); one or two rows read
 *    key after key (a single sequential stream);
 *  - softmax: the online-softmax step of a row on whole vectors with the shared vectorised
 *    exp (src/kernels/avx512/exp_avx512.h);
 *  - values: float32 in blocks of 3 rows x 128 value floats (24 accumulator registers, each
 *    value row read whole and in order), bf16 pairs in blocks of 4 rows x 64 floats; the
 *    rescale of the accumulator fused into its load;
 *  - software prefetch of the keys and values 16 rows ahead for groups of >= 2 rows (see
 *    LOOKAHEAD): without it the core waits on memory during most of its arithmetic;
 *  - bf16 keys/values for groups of <= 4 rows are read in place as pairs (see "bfloat16 read
 *    in place" below: one integer operation per 16 widened floats); larger groups convert
 *    each chunk once into a float32 buffer read by every row block; fp16 with vcvtph2ps
 *    through the buffer.
 * Deterministic: a fixed operation order for any input and thread count.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/avx512/kernels_avx512.h"
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

/* 16 dot products over `dim`: block_rows query rows x block_keys float32 keys
 * (block_rows * block_keys = 16). out[r * block_keys + k] = row[r] . key[k]. key_major: each
 * key is read whole before the next, a purely sequential stream (the query vectors are
 * reloaded from L1 for each key); else dimension-major: each loaded key vector serves all
 * rows of the block and each loaded query vector all keys, from registers. */
ALWAYS_INLINE void score_block(const int block_rows, const int block_keys, const int key_major,
                               int dim, const float *const *row, const float *const *key,
                               float *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 16) {
                const __mmask16 lanes = lane_mask(dim - d);
                const __m512 key_vector = _mm512_maskz_loadu_ps(lanes, key[k] + d);
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
                const __m512 key_vector = _mm512_maskz_loadu_ps(lanes, key[k] + d);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] =
                        _mm512_fmadd_ps(query[r], key_vector, sums[r * block_keys + k]);
            }
        }
    }
    _mm512_storeu_ps(out, transpose_reduce16(sums));
}

/* Groups of at least this many rows score dimension-major (see score_block): measured
 * 15-20% faster than key-major for 4 rows once the keys are prefetched. */
enum { SCORE_DIMENSION_MAJOR_ROWS = 3 };

/* Software prefetch. With a group of several rows each key costs many FMAs, and the hardware
 * prefetcher alone then leaves the core waiting on its loads (profiled: most cycles at the
 * first use of a key, memory idle during the arithmetic). So the pass that reads keys
 * (values) from memory requests the row LOOKAHEAD rows ahead of the one it uses, past the end
 * of the chunk too: rows are contiguous within a page, so that is the next chunk (a prefetch
 * never faults; at a page end it is wasted). Hint T1 (into L2): measured faster than T0 or
 * NTA here, and a lookahead of 16 rows faster than 8, 32 or 64. One row per key (MHA) is a
 * plain stream the hardware prefetcher follows: prefetching it measured slower. */
enum { LOOKAHEAD = 16, PREFETCH_ROWS = 2 };

/* Requests the `bytes` bytes of the stored row `rows` rows of `stride` elements of
 * `element_size` bytes after `base` (which may lie past the pool: the address is formed as
 * an integer, and a prefetch never faults). */
ALWAYS_INLINE void prefetch_row(const void *base, int64_t rows, int64_t stride,
                                size_t element_size, size_t bytes) {
    const uintptr_t row = (uintptr_t)base + (uintptr_t)(rows * stride) * element_size;
    for (size_t offset = 0; offset < bytes; offset += 64)
        _mm_prefetch((const char *)(row + offset), _MM_HINT_T1);
}

/* score_chunk for float32 keys. */
static void avx512_score_chunk(int rows, int count, int dim, const float *queries,
                               const float *keys, int64_t key_stride, float *scores) {
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    const int key_major = rows < SCORE_DIMENSION_MAJOR_ROWS;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            /* Rows / keys past the end repeat the last one; their results are dropped. */
            const float *row[4];
            const float *key[16];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0 && rows >= PREFETCH_ROWS) /* the pass that reads the keys from memory */
                for (int k = 0; k < block_keys; ++k)
                    prefetch_row(keys, c0 + k + LOOKAHEAD, key_stride, sizeof(float),
                                 dim * sizeof(float));
            float out[16];
            if (block_rows == 4 && key_major) score_block(4, 4, 1, dim, row, key, out);
            else if (block_rows == 4) score_block(4, 4, 0, dim, row, key, out);
            else if (block_rows == 2) score_block(2, 8, 1, dim, row, key, out);
            else score_block(1, 16, 1, dim, row, key, out);
            for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                for (int k = 0; k < block_keys && c0 + k < count; ++k)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c0 + k] = out[r * block_keys + k];
        }
}

/* ---- bfloat16 read in place, as pairs ----
 * A 512-bit load holds 32 bfloat16 values, the pair (2i, 2i + 1) in 32-bit lane i. Shifting
 * a lane left by 16 gives element 2i as a float32, clearing its low 16 bits gives element
 * 2i + 1: two plain integer operations per 32 values, no shuffle (vpmovzxwd + shift costs two
 * operations per 16). The lanes then hold the even and the odd dimensions apart: the queries
 * are prepared in that order once per task (prepare_bf16_queries), and the accumulator is
 * split into even / odd dimensions when a value block loads it and merged back when it
 * stores it (one permute per 16 floats per chunk). Widening is exact; only the order of the
 * dot products' partial sums differs from the float32 path. */

/* Mask of the first `elements` of 32 16-bit elements (elements may exceed 32 or be <= 0). */
static inline __mmask32 element_mask(int elements) {
    if (elements >= 32) return (__mmask32)0xffffffffu;
    return elements <= 0 ? (__mmask32)0 : (__mmask32)((1u << elements) - 1u);
}

/* The 32 bfloat16 values source[0 .. 32) (those past `elements` read as 0) as float32:
 * *even = dimensions 0, 2, .., 30, *odd = 1, 3, .., 31. */
ALWAYS_INLINE void load_bf16_pairs(const uint16_t *source, __mmask32 elements, __m512 *even,
                                   __m512 *odd) {
    const __m512i pairs = _mm512_maskz_loadu_epi16(elements, source);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32((int)0xffff0000u)));
}

/* 32 floats source[0 .. 32) (those past `valid` read as 0) split into even / odd dimensions. */
ALWAYS_INLINE void load_split(const float *source, int valid, __m512 *even, __m512 *odd) {
    const __m512i even_index =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_index =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 low = _mm512_maskz_loadu_ps(lane_mask(valid), source);
    const __m512 high = _mm512_maskz_loadu_ps(lane_mask(valid - 16), source + 16);
    *even = _mm512_permutex2var_ps(low, even_index, high);
    *odd = _mm512_permutex2var_ps(low, odd_index, high);
}

/* The inverse of load_split: target[0 .. valid) = the interleaved even / odd dimensions. */
ALWAYS_INLINE void store_merged(float *target, int valid, __m512 even, __m512 odd) {
    const __m512i low_index =
        _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high_index =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    _mm512_mask_storeu_ps(target, lane_mask(valid), _mm512_permutex2var_ps(even, low_index, odd));
    _mm512_mask_storeu_ps(target + 16, lane_mask(valid - 16),
                          _mm512_permutex2var_ps(even, high_index, odd));
}

/* prepared[r][32 s .. 32 s + 16) = even dimensions of queries[r][32 s .. 32 s + 32),
 * prepared[r][32 s + 16 .. 32 s + 32) = the odd ones; zero past dim. */
static void avx512_prepare_bf16_queries(int rows, int dim, const float *queries,
                                        float *prepared) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    for (int r = 0; r < rows; ++r)
        for (int d = 0; d < dim; d += 32) {
            __m512 even, odd;
            load_split(queries + (int64_t)r * dim + d, dim - d, &even, &odd);
            _mm512_storeu_ps(prepared + (int64_t)r * prepared_dim + d, even);
            _mm512_storeu_ps(prepared + (int64_t)r * prepared_dim + d + 16, odd);
        }
}

/* As score_block for bfloat16 keys read as pairs; row[r] are prepared query rows. */
ALWAYS_INLINE void score_block_bf16(const int block_rows, const int block_keys,
                                    const int key_major, int dim, const float *const *row,
                                    const uint16_t *const *key, float *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 32) {
                __m512 even, odd;
                load_bf16_pairs(key[k] + d, element_mask(dim - d), &even, &odd);
                for (int r = 0; r < block_rows; ++r) {
                    __m512 *sum = &sums[r * block_keys + k];
                    *sum = _mm512_fmadd_ps(_mm512_loadu_ps(row[r] + d), even, *sum);
                    *sum = _mm512_fmadd_ps(_mm512_loadu_ps(row[r] + d + 16), odd, *sum);
                }
            }
    } else {
        for (int d = 0; d < dim; d += 32) {
            const __mmask32 elements = element_mask(dim - d);
            __m512 query_even[4], query_odd[4];
            for (int r = 0; r < block_rows; ++r) {
                query_even[r] = _mm512_loadu_ps(row[r] + d);
                query_odd[r] = _mm512_loadu_ps(row[r] + d + 16);
            }
            for (int k = 0; k < block_keys; ++k) {
                __m512 even, odd;
                load_bf16_pairs(key[k] + d, elements, &even, &odd);
                for (int r = 0; r < block_rows; ++r) {
                    __m512 *sum = &sums[r * block_keys + k];
                    *sum = _mm512_fmadd_ps(query_even[r], even, *sum);
                    *sum = _mm512_fmadd_ps(query_odd[r], odd, *sum);
                }
            }
        }
    }
    _mm512_storeu_ps(out, transpose_reduce16(sums));
}

/* score_chunk for bfloat16 keys; `queries` as prepared by avx512_prepare_bf16_queries. */
static void avx512_score_chunk_bf16(int rows, int count, int dim, const float *queries,
                                    const uint16_t *keys, int64_t key_stride, float *scores) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    const int key_major = rows < SCORE_DIMENSION_MAJOR_ROWS;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const float *row[4];
            const uint16_t *key[16];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * prepared_dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0 && rows >= PREFETCH_ROWS)
                for (int k = 0; k < block_keys; ++k)
                    prefetch_row(keys, c0 + k + LOOKAHEAD, key_stride, sizeof(uint16_t),
                                 dim * sizeof(uint16_t));
            float out[16];
            if (block_rows == 4 && key_major) score_block_bf16(4, 4, 1, dim, row, key, out);
            else if (block_rows == 4) score_block_bf16(4, 4, 0, dim, row, key, out);
            else if (block_rows == 2) score_block_bf16(2, 8, 1, dim, row, key, out);
            else score_block_bf16(1, 16, 1, dim, row, key, out);
            for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                for (int k = 0; k < block_keys && c0 + k < count; ++k)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c0 + k] = out[r * block_keys + k];
        }
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

/* accumulator rows [block_rows][dim], columns [e0, e0 + width) with width <= 16 * vectors:
 * acc = rescale * acc + sum_c weight[r][c] * values[c] for float32 values. */
ALWAYS_INLINE void accumulate_block(const int block_rows, const int vectors, int count, int e0,
                                    int width, int dim, const float *weights,
                                    const float *rescale, const float *values,
                                    int64_t value_stride, float *accumulator, int prefetch) {
    __mmask16 masks[8];
    for (int x = 0; x < vectors; ++x) masks[x] = lane_mask(width - 16 * x);
    __m512 sums[4][8];
    for (int r = 0; r < block_rows; ++r) {
        const __m512 factor = _mm512_set1_ps(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x)
            sums[r][x] = _mm512_mul_ps(factor, _mm512_maskz_loadu_ps(masks[x], row + 16 * x));
    }
    for (int c = 0; c < count; ++c) {
        __m512 weight[4];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = _mm512_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
        const float *value = values + c * value_stride + e0;
        if (prefetch)
            prefetch_row(values, c + LOOKAHEAD, value_stride, sizeof(float), dim * sizeof(float));
        for (int x = 0; x < vectors; ++x) {
            const __m512 value_vector = _mm512_maskz_loadu_ps(masks[x], value + 16 * x);
            for (int r = 0; r < block_rows; ++r)
                sums[r][x] = _mm512_fmadd_ps(weight[r], value_vector, sums[r][x]);
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x) _mm512_mask_storeu_ps(row + 16 * x, masks[x], sums[r][x]);
    }
}

/* Rows [0, block_rows) of accumulate_chunk over all of dim, in column blocks of
 * 16 * vectors floats. */
ALWAYS_INLINE void accumulate_rows(const int block_rows, const int vectors, int count, int dim,
                                   const float *weights, const float *rescale,
                                   const float *values, int64_t value_stride,
                                   float *accumulator, int prefetch) {
    for (int e0 = 0; e0 < dim; e0 += 16 * vectors) {
        const int width = dim - e0 < 16 * vectors ? dim - e0 : 16 * vectors;
        accumulate_block(block_rows, vectors, count, e0, width, dim, weights, rescale, values,
                         value_stride, accumulator, prefetch && e0 == 0);
    }
}

/* accumulate_chunk for float32 values: blocks of 3 rows x 128 floats (24 accumulator
 * registers; the first block reads each value row whole, in order), then the remaining 2 or
 * 1 rows. (Blocks of 4 rows x 64 floats need fewer loads but read each value row in two
 * strided passes, which measured slower on streamed values.) */
static void avx512_accumulate_chunk(int rows, int count, int dim, const float *weights,
                                    const float *rescale, const float *values,
                                    int64_t value_stride, float *accumulator) {
    const int prefetch = rows >= PREFETCH_ROWS; /* by the first block, which reads memory */
    int r = 0;
    for (; r + 3 <= rows; r += 3)
        accumulate_rows(3, 8, count, dim, weights + r * ATTN_DECODE_CHUNK, rescale + r, values,
                        value_stride, accumulator + (int64_t)r * dim, prefetch && r == 0);
    const float *tail_weights = weights + r * ATTN_DECODE_CHUNK;
    float *tail = accumulator + (int64_t)r * dim;
    if (rows - r == 2)
        accumulate_rows(2, 8, count, dim, tail_weights, rescale + r, values, value_stride, tail,
                        prefetch && r == 0);
    else if (rows - r == 1)
        accumulate_rows(1, 8, count, dim, tail_weights, rescale + r, values, value_stride, tail,
                        prefetch && r == 0);
}

/* As accumulate_block for bfloat16 values read as pairs: columns [e0, e0 + width) with
 * width <= 32 * segments, each segment of 32 floats held as even / odd dimensions. */
ALWAYS_INLINE void accumulate_block_bf16(const int block_rows, const int segments, int count,
                                         int e0, int width, int dim, const float *weights,
                                         const float *rescale, const uint16_t *values,
                                         int64_t value_stride, float *accumulator,
                                         int prefetch) {
    __mmask32 elements[4];
    for (int x = 0; x < segments; ++x) elements[x] = element_mask(width - 32 * x);
    __m512 even[4][4], odd[4][4];
    for (int r = 0; r < block_rows; ++r) {
        const __m512 factor = _mm512_set1_ps(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < segments; ++x) {
            load_split(row + 32 * x, width - 32 * x, &even[r][x], &odd[r][x]);
            even[r][x] = _mm512_mul_ps(factor, even[r][x]);
            odd[r][x] = _mm512_mul_ps(factor, odd[r][x]);
        }
    }
    for (int c = 0; c < count; ++c) {
        __m512 weight[4];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = _mm512_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
        const uint16_t *value = values + c * value_stride + e0;
        if (prefetch)
            prefetch_row(values, c + LOOKAHEAD, value_stride, sizeof(uint16_t),
                         dim * sizeof(uint16_t));
        for (int x = 0; x < segments; ++x) {
            __m512 value_even, value_odd;
            load_bf16_pairs(value + 32 * x, elements[x], &value_even, &value_odd);
            for (int r = 0; r < block_rows; ++r) {
                even[r][x] = _mm512_fmadd_ps(weight[r], value_even, even[r][x]);
                odd[r][x] = _mm512_fmadd_ps(weight[r], value_odd, odd[r][x]);
            }
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < segments; ++x)
            store_merged(row + 32 * x, width - 32 * x, even[r][x], odd[r][x]);
    }
}

/* Rows [0, block_rows) of accumulate_chunk_bf16 over all of dim. */
ALWAYS_INLINE void accumulate_rows_bf16(const int block_rows, const int segments, int count,
                                        int dim, const float *weights, const float *rescale,
                                        const uint16_t *values, int64_t value_stride,
                                        float *accumulator, int prefetch) {
    for (int e0 = 0; e0 < dim; e0 += 32 * segments) {
        const int width = dim - e0 < 32 * segments ? dim - e0 : 32 * segments;
        accumulate_block_bf16(block_rows, segments, count, e0, width, dim, weights, rescale,
                              values, value_stride, accumulator, prefetch && e0 == 0);
    }
}

/* accumulate_chunk for bfloat16 values: blocks of 4 rows x 64 floats, the remaining 3 rows
 * x 64, 2 or 1 rows x 128 floats (at most 16 accumulator registers). */
static void avx512_accumulate_chunk_bf16(int rows, int count, int dim, const float *weights,
                                         const float *rescale, const uint16_t *values,
                                         int64_t value_stride, float *accumulator) {
    const int prefetch = rows >= PREFETCH_ROWS; /* by the first block, which reads memory */
    int r = 0;
    for (; r + 4 <= rows; r += 4)
        accumulate_rows_bf16(4, 2, count, dim, weights + r * ATTN_DECODE_CHUNK, rescale + r,
                             values, value_stride, accumulator + (int64_t)r * dim,
                             prefetch && r == 0);
    const float *tail_weights = weights + r * ATTN_DECODE_CHUNK;
    float *tail = accumulator + (int64_t)r * dim;
    const int tail_prefetch = prefetch && r == 0;
    if (rows - r == 3)
        accumulate_rows_bf16(3, 2, count, dim, tail_weights, rescale + r, values, value_stride,
                             tail, tail_prefetch);
    else if (rows - r == 2)
        accumulate_rows_bf16(2, 4, count, dim, tail_weights, rescale + r, values, value_stride,
                             tail, tail_prefetch);
    else if (rows - r == 1)
        accumulate_rows_bf16(1, 4, count, dim, tail_weights, rescale + r, values, value_stride,
                             tail, tail_prefetch);
}

const attn_decode_kernels attn_avx512_decode = {
    .bf16_to_f32 = avx512_bf16_to_f32,
    .f16_to_f32 = avx512_f16_to_f32,
    .score_chunk = avx512_score_chunk,
    .softmax_chunk = avx512_softmax_chunk,
    .accumulate_chunk = avx512_accumulate_chunk,
    .score_chunk_bf16 = avx512_score_chunk_bf16,
    .accumulate_chunk_bf16 = avx512_accumulate_chunk_bf16,
    .prepare_bf16_queries = avx512_prepare_bf16_queries,
};
