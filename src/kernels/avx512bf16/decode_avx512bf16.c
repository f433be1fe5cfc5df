/*
 * decode_avx512bf16.c — the bf16 decode slots of registry.h (prepare_tile_queries,
 * score_chunk_tiles, accumulate_chunk_tiles, and score_chunk_tiles_fp8 /
 * accumulate_chunk_tiles_fp8, which read fp8 storage in place) with VDPBF16PS, for the CPUs
 * that issue it at the rate of a 16-lane FMA, i.e. with twice the multiply-adds (AMD's cores
 * with AVX512-BF16; the registry takes this table only there, registry.c usable_dpbf16_decode).
 * The same contract as the AMX tiles (decode_amx.h): bf16 queries (the caller's dtype), bf16
 * keys and values as stored or as fp8 rows widened to bf16 (exactly), products exact, sums in
 * fp32, P rounded to bf16 for P · V; VDPBF16PS flushes denormal inputs and outputs to 0, as the
 * tiles do.
 *
 * Scores: blocks of 4 rows x 4 keys (2 x 8, 1 x 16 for smaller groups), 16 fp32
 * accumulators; per 32 dimensions one zmm load per key and per row and 16 VDPBF16PS (each
 * lane a pair of dimensions), then one transpose-and-add tree (simd/transpose16.h) gives the
 * 16 dot products.
 * P · V: blocks of up to 4 rows x 64 value elements; per pair of keys the two value rows are
 * interleaved by VPUNPCK[LH]WD (lane 4L + j of the low / high half of 32 elements = element
 * 8L + j / 8L + 4 + j: the accumulator is held in that order during the call and put back
 * in natural order at its end), and each row's pair of bf16 weights is broadcast into the
 * VDPBF16PS. The values are read in place: no stage (a group of 4 rows reads each value
 * row once; larger groups read it once per 4 rows, from L1 / L2). The fp8 kernels: below,
 * "fp8 storage read in place".
 *
 * Its speed: bench/results/amd-zen4.md, "Decode, 16-bit and 8-bit storage on VDPBF16PS".
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/fp8_bf16_table.h"
#include "kernels/lowp.h"
#include "kernels/registry.h"
#include "kernels/simd/transpose16.h"
#include "kernels/simd/target.h"

/* prepared[r * ATTN_DECODE_PREPARED_DIM(dim) + d] = bf16(queries[r * dim + d]), 0 past dim:
 * the rows as the score blocks load them, 32 dimensions per zmm. */
static void dpbf16_prepare_tile_queries(int rows, int dim, const float *queries,
                                        uint16_t *prepared) {
    const int stride = ATTN_DECODE_PREPARED_DIM(dim);
    for (int r = 0; r < rows; ++r)
        attn_lowp_avx512bf16_round_row(prepared + (size_t)r * stride, queries + (size_t)r * dim,
                                       dim, stride);
}

static inline __mmask32 first_words(int n) {
    return n >= 32 ? (__mmask32)0xffffffffu : n > 0 ? (__mmask32)((1u << n) - 1u) : 0;
}

/* scores[r * ATTN_DECODE_CHUNK + k] = lane r * block_keys + k of sums, for r < rows (at most
 * block_rows), k < keys (at most block_keys): each row's lanes brought down by one VPERMPS
 * (a store of the block and masked reloads of it would wait: masked loads do not take
 * their data from the store buffer). */
static inline void store_block(__m512 sums, int block_rows, int block_keys, int rows, int keys,
                               float *scores) {
    const int valid = keys < block_keys ? keys : block_keys;
    const __mmask16 lanes = (__mmask16)((1u << valid) - 1u);
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int r = 0; r < block_rows && r < rows; ++r)
        _mm512_mask_storeu_ps(scores + (size_t)r * ATTN_DECODE_CHUNK, lanes,
                              _mm512_permutexvar_ps(_mm512_add_epi32(first, _mm512_set1_epi32(r * block_keys)), sums));
}

/* lane r * block_keys + k of *out = query_r . key_k for r < block_rows, k < block_keys
 * (block_rows * block_keys = 16); query rows prepared (zero past dim), key rows as stored.
 * full (a constant): dim is a multiple of 32, every key load whole. */
static inline __attribute__((always_inline)) void score_block(const int block_rows,
                                                              const int block_keys,
                                                              const int full, int dim,
                                                              const uint16_t *const *row,
                                                              const uint16_t *const *key,
                                                              __m512 *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    for (int d = 0; d < dim; d += 32) {
        const __mmask32 mask = full ? (__mmask32)0xffffffffu : first_words(dim - d);
        __m512i keys[16];
        for (int k = 0; k < block_keys; ++k) keys[k] = _mm512_maskz_loadu_epi16(mask, key[k] + d);
        for (int r = 0; r < block_rows; ++r) {
            const __m512bh query = (__m512bh)_mm512_loadu_si512((const void *)(row[r] + d));
            for (int k = 0; k < block_keys; ++k)
                sums[r * block_keys + k] =
                    _mm512_dpbf16_ps(sums[r * block_keys + k], query, (__m512bh)keys[k]);
        }
    }
    *out = attn_transpose_reduce16(sums);
}

/* registry.h score_chunk_tiles. */
static void dpbf16_score_chunk_tiles(int rows, int count, int dim, const uint16_t *prepared,
                                     const uint16_t *keys, int64_t key_stride, float *scores) {
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    const int stride = ATTN_DECODE_PREPARED_DIM(dim), full = dim % 32 == 0;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const uint16_t *row[4], *key[16];
            for (int r = 0; r < block_rows; ++r) /* (rows past the group repeat the last) */
                row[r] = prepared + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * stride;
            for (int k = 0; k < block_keys; ++k) /* (keys past count likewise) */
                key[k] = keys + (int64_t)(c0 + k < count ? c0 + k : count - 1) * key_stride;
            __m512 out;
            if (block_rows == 4 && full) score_block(4, 4, 1, dim, row, key, &out);
            else if (block_rows == 4) score_block(4, 4, 0, dim, row, key, &out);
            else if (block_rows == 2 && full) score_block(2, 8, 1, dim, row, key, &out);
            else if (block_rows == 2) score_block(2, 8, 0, dim, row, key, &out);
            else if (full) score_block(1, 16, 1, dim, row, key, &out);
            else score_block(1, 16, 0, dim, row, key, &out);
            store_block(out, block_rows, block_keys, rows - r0, count - c0,
                        scores + (size_t)r0 * ATTN_DECODE_CHUNK + c0);
        }
}

/* The accumulator's 32 elements [e, e + 32) in the unpack order (see the top) and back. */
static inline void to_unpack_order(__m512 first, __m512 second, __m512 *low, __m512 *high) {
    const __m512i low_index =
        _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i high_index =
        _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    *low = _mm512_permutex2var_ps(first, low_index, second);
    *high = _mm512_permutex2var_ps(first, high_index, second);
}

static inline void to_natural_order(__m512 low, __m512 high, __m512 *first, __m512 *second) {
    const __m512i first_index =
        _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second_index =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    *first = _mm512_permutex2var_ps(low, first_index, high);
    *second = _mm512_permutex2var_ps(low, second_index, high);
}

/* Weights of one row block as bf16, [4][ATTN_DECODE_TILE_KEYS] (an odd count padded with 0). */
typedef struct weight_pairs {
    uint16_t w[4][ATTN_DECODE_TILE_KEYS] __attribute__((aligned(64)));
} weight_pairs;

/* The weights of rows [r0, r0 + block_rows) rounded to bf16 into pairs (chunk j: keys
 * [64 j, 64 j + 64), its block of the loop's weights). */
static void round_weights(int rows, int r0, int block_rows, int count, const float *weights,
                          weight_pairs *pairs) {
    const int padded = (count + 1) / 2 * 2;
    for (int r = 0; r < block_rows; ++r)
        for (int j = 0; 64 * j < count; ++j) {
            const int n = count - 64 * j < 64 ? count - 64 * j : 64;
            attn_lowp_avx512bf16_round_row(
                pairs->w[r] + 64 * j, weights + ((size_t)j * rows + r0 + r) * ATTN_DECODE_CHUNK,
                n, padded - 64 * j < 64 ? padded - 64 * j : 64);
        }
}

/* Accumulator rows r < block_rows (row r at accumulator + r * width), elements [e0, e0 +
 * 32 * halves) (those past width untouched): rescale[r] * itself + sum_c w[r][c] *
 * values[c][e], c < count. `halves` (1 or 2, a constant) blocks of 32 elements. */
static inline __attribute__((always_inline)) void accumulate_block(
    const int block_rows, const int halves, int count, int dim, int width, int e0,
    const weight_pairs *pairs, const float *rescale, const uint16_t *values, int64_t value_stride,
    float *accumulator) {
    __m512 low[4][2], high[4][2];
    __mmask16 keep[2][2]; /* [half][vector]: elements below width */
    __mmask32 read[2];    /* [half]: elements below dim */
    for (int h = 0; h < halves; ++h) {
        const int at = e0 + 32 * h;
        keep[h][0] = width - at >= 16 ? (__mmask16)0xffff : 0;
        keep[h][1] = width - at >= 32 ? (__mmask16)0xffff : 0;
        read[h] = first_words(dim - at);
    }
    for (int r = 0; r < block_rows; ++r) {
        const __m512 factor = _mm512_set1_ps(rescale[r]);
        for (int h = 0; h < halves; ++h) {
            const float *at = accumulator + (size_t)r * width + e0 + 32 * h;
            to_unpack_order(_mm512_mul_ps(factor, _mm512_maskz_loadu_ps(keep[h][0], at)),
                            _mm512_mul_ps(factor, _mm512_maskz_loadu_ps(keep[h][1], at + 16)),
                            &low[r][h], &high[r][h]);
        }
    }
    for (int c = 0; c < count; c += 2) {
        const uint16_t *even = values + (int64_t)c * value_stride + e0;
        const uint16_t *odd = c + 1 < count ? even + value_stride : even;
        __m512bh lows[2], highs[2];
        for (int h = 0; h < halves; ++h) {
            const __m512i a = _mm512_maskz_loadu_epi16(read[h], even + 32 * h);
            const __m512i b = c + 1 < count ? _mm512_maskz_loadu_epi16(read[h], odd + 32 * h)
                                            : _mm512_setzero_si512(); /* (weight 0) */
            lows[h] = (__m512bh)_mm512_unpacklo_epi16(a, b);
            highs[h] = (__m512bh)_mm512_unpackhi_epi16(a, b);
        }
        for (int r = 0; r < block_rows; ++r) {
            int32_t pair;
            memcpy(&pair, &pairs->w[r][c], sizeof pair);
            const __m512bh weight = (__m512bh)_mm512_set1_epi32(pair);
            for (int h = 0; h < halves; ++h) {
                low[r][h] = _mm512_dpbf16_ps(low[r][h], lows[h], weight);
                high[r][h] = _mm512_dpbf16_ps(high[r][h], highs[h], weight);
            }
        }
    }
    for (int r = 0; r < block_rows; ++r)
        for (int h = 0; h < halves; ++h) {
            float *at = accumulator + (size_t)r * width + e0 + 32 * h;
            __m512 first, second;
            to_natural_order(low[r][h], high[r][h], &first, &second);
            _mm512_mask_storeu_ps(at, keep[h][0], first);
            _mm512_mask_storeu_ps(at + 16, keep[h][1], second);
        }
}

/* ---- fp8 storage read in place (registry.h score_chunk_tiles_fp8 / accumulate_chunk_tiles_fp8) ----
 * 64 stored bytes at a time, widened to bf16 in registers as widen_fp8_bf16 does with VBMI
 * (fp8_bf16_table.h): two VPERMI2B on the 7-bit magnitude give each value's low and high
 * byte, a VPTERNLOGD ORs the sign into the high one; then for the scores two more VPERMI2B
 * put the words in element order (the prepared queries' order), for P · V two VPUNPCK[LH]BW
 * of the bytes of two rows first interleave the keys, so that after the lookups two
 * VPUNPCK[LH]BW give pairs of keys per element: vector m of 16 elements (m < 4) holds element
 * 16 L + 4 m + j in lane 4 L + j (the accumulator kept in that order during the call). */
#define FP8_TARGET ATTN_TARGET("avx512vbmi")
/* Rows ahead whose keys the fp8 scores request into L1, one row per key scored (as the
 * AVX-512 fp8 kernels' Q8_LOOKAHEAD). */
#define FP8_KEY_AHEAD 32

typedef struct fp8_widener {
    __m512i low0, low1, high0, high1, place0, place1;
} fp8_widener;

static inline FP8_TARGET fp8_widener fp8_widener_of(attn_dtype dtype) {
    const attn_fp8_bf16_lookup *t = attn_fp8_bf16_lookup_get();
    const int f = dtype == ATTN_DTYPE_FP8_E4M3 ? 0 : 1;
    return (fp8_widener){_mm512_load_si512(t->low[f]), _mm512_load_si512(t->low[f] + 64),
                         _mm512_load_si512(t->high[f]), _mm512_load_si512(t->high[f] + 64),
                         _mm512_load_si512(t->place[0]), _mm512_load_si512(t->place[1])};
}

/* The bf16 low and high bytes of the 64 codes of x (sign included in high). */
static inline __attribute__((always_inline)) FP8_TARGET void fp8_bytes(const fp8_widener *w,
                                                                        __m512i x, __m512i *low,
                                                                        __m512i *high) {
    *low = _mm512_permutex2var_epi8(w->low0, x, w->low1);
    *high = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(w->high0, x, w->high1), x,
                                      _mm512_set1_epi8((char)0x80), 0xf8); /* a | (b & c) */
}

static inline __mmask64 first_bytes(int n) {
    return n >= 64 ? ~(__mmask64)0 : n > 0 ? (((__mmask64)1 << n) - 1u) : 0;
}

/* score_block on fp8 keys: 64 dimensions per step, each key widened once per step. */
static inline __attribute__((always_inline)) FP8_TARGET void score_block_fp8(
    const fp8_widener *w, const int block_rows, const int block_keys, const int full, int dim,
    const uint16_t *const *row, const uint8_t *const *key, __m512 *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    for (int d = 0; d < dim; d += 64) {
        const int second = full || d + 32 < dim; /* elements [d + 32, d + 64) exist */
        for (int k = 0; k < block_keys; ++k) {
            const __m512i x = full ? _mm512_loadu_si512((const void *)(key[k] + d))
                                   : _mm512_maskz_loadu_epi8(first_bytes(dim - d), key[k] + d);
            __m512i low, high;
            fp8_bytes(w, x, &low, &high);
            const __m512bh first = (__m512bh)_mm512_permutex2var_epi8(low, w->place0, high);
            for (int r = 0; r < block_rows; ++r)
                sums[r * block_keys + k] = _mm512_dpbf16_ps(
                    sums[r * block_keys + k],
                    (__m512bh)_mm512_loadu_si512((const void *)(row[r] + d)), first);
            if (second) {
                const __m512bh next = (__m512bh)_mm512_permutex2var_epi8(low, w->place1, high);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] = _mm512_dpbf16_ps(
                        sums[r * block_keys + k],
                        (__m512bh)_mm512_loadu_si512((const void *)(row[r] + d + 32)), next);
            }
        }
    }
    *out = attn_transpose_reduce16(sums);
}

/* registry.h score_chunk_tiles_fp8. */
static FP8_TARGET void dpbf16_score_chunk_tiles_fp8(attn_dtype dtype, int rows, int count,
                                                    int dim, const uint16_t *prepared,
                                                    const uint8_t *keys, int64_t key_stride,
                                                    float *scores, const attn_rows_ahead *ahead) {
    const fp8_widener w = fp8_widener_of(dtype);
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    const int stride = ATTN_DECODE_PREPARED_DIM(dim), full = dim % 64 == 0;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const uint16_t *row[4];
            const uint8_t *key[16];
            for (int r = 0; r < block_rows; ++r)
                row[r] = prepared + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * stride;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (int64_t)(c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0) /* requests: the key rows ahead, the chunk's value rows (hint) */
                for (int k = 0; k < block_keys; ++k) {
                    const uintptr_t next = /* (may lie past the pool: never dereferenced) */
                        (uintptr_t)keys + (uintptr_t)((c0 + k + FP8_KEY_AHEAD) * key_stride);
                    for (int d = 0; d < dim; d += 64) _mm_prefetch((const char *)(next + d), _MM_HINT_T0);
                    if (ahead != NULL && c0 + k < count) {
                        const char *value = (const char *)ahead->rows + (c0 + k) * ahead->stride;
                        for (int b = 0; b < ahead->bytes; b += 64) _mm_prefetch(value + b, _MM_HINT_T1);
                    }
                }
            __m512 out;
            if (block_rows == 4 && full) score_block_fp8(&w, 4, 4, 1, dim, row, key, &out);
            else if (block_rows == 4) score_block_fp8(&w, 4, 4, 0, dim, row, key, &out);
            else if (block_rows == 2 && full) score_block_fp8(&w, 2, 8, 1, dim, row, key, &out);
            else if (block_rows == 2) score_block_fp8(&w, 2, 8, 0, dim, row, key, &out);
            else if (full) score_block_fp8(&w, 1, 16, 1, dim, row, key, &out);
            else score_block_fp8(&w, 1, 16, 0, dim, row, key, &out);
            store_block(out, block_rows, block_keys, rows - r0, count - c0,
                        scores + (size_t)r0 * ATTN_DECODE_CHUNK + c0);
        }
}

/* The 4 x 4 transpose of 128-bit blocks: v[m] block q <-> v[q] block m (the natural order of
 * 64 accumulator elements and the fp8 P · V order above, either way). */
static inline void transpose_blocks(__m512 v[4]) {
    const __m512 t0 = _mm512_shuffle_f32x4(v[0], v[1], 0x44), t1 = _mm512_shuffle_f32x4(v[2], v[3], 0x44);
    const __m512 t2 = _mm512_shuffle_f32x4(v[0], v[1], 0xee), t3 = _mm512_shuffle_f32x4(v[2], v[3], 0xee);
    v[0] = _mm512_shuffle_f32x4(t0, t1, 0x88);
    v[1] = _mm512_shuffle_f32x4(t0, t1, 0xdd);
    v[2] = _mm512_shuffle_f32x4(t2, t3, 0x88);
    v[3] = _mm512_shuffle_f32x4(t2, t3, 0xdd);
}

/* accumulate_block on fp8 values: rows r < block_rows, elements [e0, e0 + 64) (those past
 * width untouched). */
static inline __attribute__((always_inline)) FP8_TARGET void accumulate_block_fp8(
    const fp8_widener *w, const int block_rows, int count, int dim, int width, int e0,
    const weight_pairs *pairs, const float *rescale, const uint8_t *values, int64_t value_stride,
    float *accumulator) {
    __m512 sums[4][4];
    __mmask16 keep[4];
    for (int q = 0; q < 4; ++q) keep[q] = width - e0 >= 16 * (q + 1) ? (__mmask16)0xffff : 0;
    const __mmask64 read = first_bytes(dim - e0);
    for (int r = 0; r < block_rows; ++r) {
        const __m512 factor = _mm512_set1_ps(rescale[r]);
        const float *at = accumulator + (size_t)r * width + e0;
        for (int q = 0; q < 4; ++q)
            sums[r][q] = _mm512_mul_ps(factor, _mm512_maskz_loadu_ps(keep[q], at + 16 * q));
        transpose_blocks(sums[r]);
    }
    for (int c = 0; c < count; c += 2) {
        const uint8_t *even = values + (int64_t)c * value_stride + e0;
        const __m512i a = _mm512_maskz_loadu_epi8(read, even);
        const __m512i b = c + 1 < count ? _mm512_maskz_loadu_epi8(read, even + value_stride)
                                        : _mm512_setzero_si512(); /* (weight 0) */
        __m512bh pair[4];
        for (int half = 0; half < 2; ++half) {
            const __m512i x = half == 0 ? _mm512_unpacklo_epi8(a, b) : _mm512_unpackhi_epi8(a, b);
            __m512i low, high;
            fp8_bytes(w, x, &low, &high);
            pair[2 * half] = (__m512bh)_mm512_unpacklo_epi8(low, high);
            pair[2 * half + 1] = (__m512bh)_mm512_unpackhi_epi8(low, high);
        }
        for (int r = 0; r < block_rows; ++r) {
            int32_t weight_pair;
            memcpy(&weight_pair, &pairs->w[r][c], sizeof weight_pair);
            const __m512bh weight = (__m512bh)_mm512_set1_epi32(weight_pair);
            for (int m = 0; m < 4; ++m) sums[r][m] = _mm512_dpbf16_ps(sums[r][m], pair[m], weight);
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        transpose_blocks(sums[r]);
        float *at = accumulator + (size_t)r * width + e0;
        for (int q = 0; q < 4; ++q) _mm512_mask_storeu_ps(at + 16 * q, keep[q], sums[r][q]);
    }
}

/* Accumulator rows [rows][ATTN_DECODE_TILE_ROW_FLOATS(dim)] += the chunk's P · V, 4 rows x
 * 64 elements at a time, from bf16 value rows (`stored` BF16: accumulate_block) or fp8 ones
 * (FP8_E4M3 / FP8_E5M2: accumulate_block_fp8); each row block's weights rounded once. */
static FP8_TARGET void accumulate_rows(attn_dtype stored, int rows, int count, int dim,
                                       const float *weights, const float *rescale,
                                       const void *values, int64_t value_stride,
                                       float *accumulator) {
    const int fp8 = stored != ATTN_DTYPE_BF16;
    const fp8_widener w = fp8_widener_of(fp8 ? stored : ATTN_DTYPE_FP8_E4M3);
    const int width = ATTN_DECODE_TILE_ROW_FLOATS(dim);
    weight_pairs pairs;
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4;
        round_weights(rows, r0, block_rows, count, weights, &pairs);
        float *block = accumulator + (size_t)r0 * width;
        for (int e0 = 0; e0 < width; e0 += 64) {
#define ACCUMULATE(R, H)                                                                         \
    accumulate_block(R, H, count, dim, width, e0, &pairs, rescale + r0, values, value_stride,   \
                     block)
#define ACCUMULATE_FP8(R)                                                                        \
    accumulate_block_fp8(&w, R, count, dim, width, e0, &pairs, rescale + r0, values,            \
                         value_stride, block)
            if (fp8) {
                switch (block_rows) {
                case 4: ACCUMULATE_FP8(4); break;
                case 3: ACCUMULATE_FP8(3); break;
                case 2: ACCUMULATE_FP8(2); break;
                default: ACCUMULATE_FP8(1); break;
                }
                continue;
            }
            switch (block_rows * 2 + (width - e0 > 32 ? 2 : 1) - 1) { /* rows, 32-element halves */
            case 8: ACCUMULATE(4, 1); break;
            case 9: ACCUMULATE(4, 2); break;
            case 6: ACCUMULATE(3, 1); break;
            case 7: ACCUMULATE(3, 2); break;
            case 4: ACCUMULATE(2, 1); break;
            case 5: ACCUMULATE(2, 2); break;
            case 2: ACCUMULATE(1, 1); break;
            default: ACCUMULATE(1, 2); break;
            }
#undef ACCUMULATE
#undef ACCUMULATE_FP8
        }
    }
}

/* registry.h accumulate_chunk_tiles (stage unused: the values are read in place). */
static void dpbf16_accumulate_chunk_tiles(int rows, int count, int dim, const float *weights,
                                          const float *rescale, const uint16_t *values,
                                          int64_t value_stride, void *stage,
                                          float *accumulator) {
    (void)stage;
    accumulate_rows(ATTN_DTYPE_BF16, rows, count, dim, weights, rescale, values, value_stride,
                    accumulator);
}

/* registry.h accumulate_chunk_tiles_fp8. */
static void dpbf16_accumulate_chunk_tiles_fp8(attn_dtype dtype, int rows, int count, int dim,
                                              const float *weights, const float *rescale,
                                              const uint8_t *values, int64_t value_stride,
                                              float *accumulator) {
    accumulate_rows(dtype, rows, count, dim, weights, rescale, values, value_stride, accumulator);
}

/* The decode slots this table adds (registry.h): the bf16 groups and the fp8 groups with
 * bf16 queries, from `tile_rows` rows on. */
static const attn_decode_kernels dpbf16_decode = {
    .prepare_tile_queries = dpbf16_prepare_tile_queries,
    .score_chunk_tiles = dpbf16_score_chunk_tiles,
    .accumulate_chunk_tiles = dpbf16_accumulate_chunk_tiles,
    .tile_rows_bf16 = ATTN_DECODE_TILE_ROWS,
    .tile_rows_fp8 = 1,
    .score_chunk_tiles_fp8 = dpbf16_score_chunk_tiles_fp8,
    .accumulate_chunk_tiles_fp8 = dpbf16_accumulate_chunk_tiles_fp8,
};

const attn_kernel_isa attn_isa_avx512bf16_decode = {
    .name = "avx512_bf16",
    .decode = &dpbf16_decode,
};
