/*
 * lowp_avx512bf16.c — the bf16 kernels of lowp.h with VDPBF16PS (AVX512-BF16), for CPUs without
 * AMX (AMD Zen 4/5, Cooper Lake); its packing is also the AMX table's. Compiled with -mavx512f
 * -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mf16c -mfma (cmake/kernels.cmake); selected
 * only where CPUID says so.
 *
 * Q·Kᵀ: a micro-tile of up to 6 query rows × 4 blocks of 16 keys = 24 zmm accumulators; per
 * dim pair one zmm load per key block (16 keys × the pair, one row of the packed layout), one
 * 32-bit broadcast of the query pair per row, 24 VDPBF16PS (2 multiply-adds per lane each).
 * P·V: the weights of up to 6 rows are rounded to bf16 pairs (VCVTNE2PS2BF16) for a chunk of
 * 256 keys, then up to 6 rows × 4 vectors of 16 value elements accumulate, one zmm load per
 * vector and key pair. Both keep the lowp.h pair order, so they agree with the generic table
 * except for hardware flushing of subnormals (lowp.h).
 */
#include <immintrin.h>

#include "kernels/lowp.h"

#define LANES 16
#define SCORE_ROWS 6
#define SCORE_BLOCKS 4
#define VALUE_ROWS 6
#define VALUE_BLOCKS 4
#define VALUE_CHUNK 256 /* keys whose weights are rounded at once (per row group) */

static inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

/* ---- packing ---- */

/* Keys with dim_stride 1: packed row p of a block (16 keys × one dim pair, 32-bit each) is one
 * gather of the 32-bit pair p of the 16 key rows. The last pair of an odd dim and strided or
 * huge-stride sources go through the generic packing. */
void attn_lowp_avx512bf16_pack_keys(int count, int dim, const uint16_t *source, int64_t token_stride,
                      int64_t dim_stride, uint16_t *packed) {
    const int64_t limit = INT32_MAX / (2 * LANES);
    if (dim_stride != 1 || token_stride <= -limit || token_stride >= limit || dim < 2) {
        attn_lowp_generic_pack_keys(count, dim, source, token_stride, dim_stride, packed);
        return;
    }
    const int pairs = attn_lowp_dim_pairs(dim), full_pairs = dim / 2;
    const __m512i offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)token_stride * 2));
    for (int first = 0; first < count; first += LANES) {
        const int lanes = count - first < LANES ? count - first : LANES;
        const __mmask16 mask = (__mmask16)((1u << lanes) - 1u);
        const uint16_t *keys = source + (int64_t)first * token_stride;
        uint32_t *block = (uint32_t *)(packed + (size_t)first * 2 * pairs);
        for (int p = 0; p < full_pairs; ++p)
            _mm512_store_si512(block + (size_t)p * LANES,
                               _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets,
                                                           keys + 2 * p, 1));
        for (int p = full_pairs; p < pairs; ++p) {
            uint32_t row[LANES] = {0};
            if (p * 2 < dim)
                for (int l = 0; l < lanes; ++l) row[l] = keys[(int64_t)l * token_stride + 2 * p];
            _mm512_store_si512(block + (size_t)p * LANES, _mm512_loadu_si512(row));
        }
    }
}

/* Values with dim_stride 1: each packed pair row interleaves two value rows, 16 elements at a
 * time (zero-extended to 32 bits, the odd key shifted into the high half). */
void attn_lowp_avx512bf16_pack_values(int count, int dim, const uint16_t *source, int64_t token_stride,
                        int64_t dim_stride, uint16_t *packed) {
    if (dim_stride != 1) {
        attn_lowp_generic_pack_values(count, dim, source, token_stride, dim_stride, packed);
        return;
    }
    const int dim16 = attn_lowp_round_up(dim, 16);
    const int value_pairs = attn_lowp_round_up(count, 32) / 2;
    for (int p = 0; p < value_pairs; ++p) {
        uint32_t *row = (uint32_t *)(packed + (size_t)p * dim16 * 2);
        const int c0 = 2 * p, c1 = 2 * p + 1;
        /* rows past count are never formed as pointers (they may lie outside the source) */
        const uint16_t *even = c0 < count ? source + (int64_t)c0 * token_stride : source;
        const uint16_t *odd = c1 < count ? source + (int64_t)c1 * token_stride : source;
        for (int e = 0; e < dim16; e += LANES) {
            const __mmask16 mask =
                dim - e >= LANES ? (__mmask16)0xFFFF
                                 : dim > e ? (__mmask16)((1u << (dim - e)) - 1u) : 0;
            const __m512i lo = c0 < count ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, even + e))
                                          : _mm512_setzero_si512();
            const __m512i hi = c1 < count ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, odd + e))
                                          : _mm512_setzero_si512();
            _mm512_store_si512(row + e, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* ---- S = Q·Kᵀ ---- */

static inline __attribute__((always_inline)) void score_micro_tile(
    const int ROWS, const int BLOCKS, int used_pairs, const uint16_t *queries, int query_stride,
    const uint16_t *keys, size_t block_elements, float *scores, int scores_stride,
    __mmask16 last_mask) {
    __m512 sum[SCORE_ROWS][SCORE_BLOCKS];
    for (int r = 0; r < ROWS; ++r)
        for (int b = 0; b < BLOCKS; ++b) sum[r][b] = _mm512_setzero_ps();
    for (int p = 0; p < used_pairs; ++p) {
        __m512i key[SCORE_BLOCKS];
        for (int b = 0; b < BLOCKS; ++b)
            key[b] = _mm512_load_si512(keys + b * block_elements + (size_t)p * 2 * LANES);
        for (int r = 0; r < ROWS; ++r) {
            uint32_t pair;
            memcpy(&pair, queries + (size_t)r * query_stride + 2 * p, sizeof pair);
            const __m512i query = _mm512_set1_epi32((int)pair);
            for (int b = 0; b < BLOCKS; ++b)
                sum[r][b] = _mm512_dpbf16_ps(sum[r][b], as_bh(query), as_bh(key[b]));
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) _mm512_storeu_ps(row + b * LANES, sum[r][b]);
        _mm512_mask_storeu_ps(row + (BLOCKS - 1) * LANES, last_mask, sum[r][BLOCKS - 1]);
    }
}

#define SCORE_CASE(ROWS, BLOCKS)                                                              \
    case (ROWS)*8 + (BLOCKS):                                                                 \
        score_micro_tile(ROWS, BLOCKS, used_pairs, queries, query_stride, keys,              \
                         block_elements, scores, scores_stride, last_mask);                  \
        break;
#define SCORE_CASES(ROWS) SCORE_CASE(ROWS, 1) SCORE_CASE(ROWS, 2) SCORE_CASE(ROWS, 3) SCORE_CASE(ROWS, 4)

static void score_micro_tile_any(int rows, int blocks, int used_pairs, const uint16_t *queries,
                                 int query_stride, const uint16_t *keys, size_t block_elements,
                                 float *scores, int scores_stride, __mmask16 last_mask) {
    switch (rows * 8 + blocks) {
        SCORE_CASES(1) SCORE_CASES(2) SCORE_CASES(3) SCORE_CASES(4) SCORE_CASES(5) SCORE_CASES(6)
    default: break;
    }
}

static void score_tile(int rows, int count, int dim, const uint16_t *queries, int query_stride,
                       const uint16_t *packed_keys, float *scores, int scores_stride) {
    const int blocks = (count + LANES - 1) / LANES, used_pairs = (dim + 1) / 2;
    const size_t block_elements = (size_t)LANES * 2 * attn_lowp_dim_pairs(dim);
    for (int first_block = 0; first_block < blocks; first_block += SCORE_BLOCKS) {
        const int micro_blocks = blocks - first_block < SCORE_BLOCKS ? blocks - first_block : SCORE_BLOCKS;
        const int tail = count - (first_block + micro_blocks - 1) * LANES;
        const __mmask16 last_mask = tail >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << tail) - 1u);
        for (int first_row = 0; first_row < rows; first_row += SCORE_ROWS) {
            const int micro_rows = rows - first_row < SCORE_ROWS ? rows - first_row : SCORE_ROWS;
            score_micro_tile_any(micro_rows, micro_blocks, used_pairs,
                                 queries + (size_t)first_row * query_stride, query_stride,
                                 packed_keys + (size_t)first_block * block_elements,
                                 block_elements,
                                 scores + (size_t)first_row * scores_stride + first_block * LANES,
                                 scores_stride, last_mask);
        }
    }
}

/* ---- O += P·V ---- */

/* Rounds weights[r][c] for r < rows, c in [c0, c0 + n) to bf16 pairs: pairs[r][p] holds keys
 * c0 + 2p (low half) and c0 + 2p + 1 (high half); keys past n are 0. */
static void round_weights(int rows, int n, const float *weights, int weights_stride, int c0,
                          uint32_t pairs[VALUE_ROWS][VALUE_CHUNK / 2]) {
    for (int r = 0; r < rows; ++r) {
        const float *row = weights + (size_t)r * weights_stride + c0;
        for (int c = 0; c < n; c += 2 * LANES) {
            const int left = n - c;
            const __mmask16 lo_mask = left >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
            const __mmask16 hi_mask = left >= 2 * LANES ? (__mmask16)0xFFFF
                                      : left > LANES ? (__mmask16)((1u << (left - LANES)) - 1u) : 0;
            const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, row + c);
            const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, row + c + LANES);
            const __m512bh rounded = _mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(&pairs[r][c / 2], (__m512i)rounded);
        }
    }
}

static inline __attribute__((always_inline)) void value_micro_tile(
    const int ROWS, const int BLOCKS, int used_pairs, uint32_t pairs[VALUE_ROWS][VALUE_CHUNK / 2],
    const uint16_t *values, size_t pair_row_elements, float *accumulator,
    int accumulator_stride, __mmask16 last_mask) {
    __m512 sum[VALUE_ROWS][VALUE_BLOCKS];
    for (int r = 0; r < ROWS; ++r) {
        const float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) sum[r][b] = _mm512_loadu_ps(row + b * LANES);
        sum[r][BLOCKS - 1] = _mm512_maskz_loadu_ps(last_mask, row + (BLOCKS - 1) * LANES);
    }
    for (int p = 0; p < used_pairs; ++p) {
        __m512i value[VALUE_BLOCKS];
        for (int b = 0; b < BLOCKS; ++b)
            value[b] = _mm512_load_si512(values + (size_t)p * pair_row_elements + b * 2 * LANES);
        for (int r = 0; r < ROWS; ++r) {
            const __m512i weight = _mm512_set1_epi32((int)pairs[r][p]);
            for (int b = 0; b < BLOCKS; ++b)
                sum[r][b] = _mm512_dpbf16_ps(sum[r][b], as_bh(weight), as_bh(value[b]));
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = accumulator + (size_t)r * accumulator_stride;
        for (int b = 0; b < BLOCKS - 1; ++b) _mm512_storeu_ps(row + b * LANES, sum[r][b]);
        _mm512_mask_storeu_ps(row + (BLOCKS - 1) * LANES, last_mask, sum[r][BLOCKS - 1]);
    }
}

#define VALUE_CASE(ROWS, BLOCKS)                                                             \
    case (ROWS)*8 + (BLOCKS):                                                                \
        value_micro_tile(ROWS, BLOCKS, used_pairs, pairs, values, pair_row_elements,        \
                         accumulator, accumulator_stride, last_mask);                       \
        break;
#define VALUE_CASES(ROWS) VALUE_CASE(ROWS, 1) VALUE_CASE(ROWS, 2) VALUE_CASE(ROWS, 3) VALUE_CASE(ROWS, 4)

static void value_micro_tile_any(int rows, int blocks, int used_pairs,
                                 uint32_t pairs[VALUE_ROWS][VALUE_CHUNK / 2],
                                 const uint16_t *values, size_t pair_row_elements,
                                 float *accumulator, int accumulator_stride,
                                 __mmask16 last_mask) {
    switch (rows * 8 + blocks) {
        VALUE_CASES(1) VALUE_CASES(2) VALUE_CASES(3) VALUE_CASES(4) VALUE_CASES(5) VALUE_CASES(6)
    default: break;
    }
}

static void accumulate_values(int rows, int count, int dim, const float *weights,
                              int weights_stride, const uint16_t *packed_values,
                              float *accumulator, int accumulator_stride) {
    const int dim16 = attn_lowp_round_up(dim, 16), vectors = dim16 / LANES;
    const size_t pair_row_elements = (size_t)dim16 * 2;
    uint32_t pairs[VALUE_ROWS][VALUE_CHUNK / 2] __attribute__((aligned(64)));
    for (int first_row = 0; first_row < rows; first_row += VALUE_ROWS) {
        const int micro_rows = rows - first_row < VALUE_ROWS ? rows - first_row : VALUE_ROWS;
        for (int c0 = 0; c0 < count; c0 += VALUE_CHUNK) {
            const int n = count - c0 < VALUE_CHUNK ? count - c0 : VALUE_CHUNK;
            round_weights(micro_rows, n, weights + (size_t)first_row * weights_stride,
                          weights_stride, c0, pairs);
            const uint16_t *values = packed_values + (size_t)(c0 / 2) * pair_row_elements;
            for (int first_vector = 0; first_vector < vectors; first_vector += VALUE_BLOCKS) {
                const int blocks = vectors - first_vector < VALUE_BLOCKS ? vectors - first_vector
                                                                         : VALUE_BLOCKS;
                const int tail = dim - (first_vector + blocks - 1) * LANES;
                const __mmask16 last_mask =
                    tail >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << tail) - 1u);
                value_micro_tile_any(micro_rows, blocks, (n + 1) / 2, pairs,
                                     values + (size_t)first_vector * 2 * LANES, pair_row_elements,
                                     accumulator + (size_t)first_row * accumulator_stride +
                                         first_vector * LANES,
                                     accumulator_stride, last_mask);
            }
        }
    }
}

void attn_lowp_avx512bf16_round_row(uint16_t *destination, const float *source, int n,
                                    int padded) {
    for (int c = 0; c < padded; c += 2 * LANES) {
        const int left = n - c;
        const __mmask16 lo = left >= LANES ? (__mmask16)0xFFFF
                             : left > 0    ? (__mmask16)((1u << left) - 1u) : 0;
        const __mmask16 hi = left >= 2 * LANES ? (__mmask16)0xFFFF
                             : left > LANES    ? (__mmask16)((1u << (left - LANES)) - 1u) : 0;
        const __m512bh rounded = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, source + c + LANES),
                                                     _mm512_maskz_loadu_ps(lo, source + c));
        const int stored = padded - c < 2 * LANES ? padded - c : 2 * LANES;
        _mm512_mask_storeu_epi16(destination + c, (__mmask32)(stored == 32 ? 0xFFFFFFFFu : (1u << stored) - 1u),
                                 (__m512i)rounded);
    }
}

void attn_lowp_avx512_round_row_f16(uint16_t *destination, const float *source, int n,
                                    int padded) {
    for (int c = 0; c < padded; c += LANES) {
        const int left = n - c;
        const __mmask16 keep = left >= LANES ? (__mmask16)0xFFFF
                               : left > 0    ? (__mmask16)((1u << left) - 1u) : 0;
        /* VCVTPS2PH, nearest-even, fp16 subnormals kept (MXCSR.FTZ does not apply to it) */
        const __m256i rounded = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(keep, source + c),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const int stored = padded - c < LANES ? padded - c : LANES;
        _mm256_mask_storeu_epi16(destination + c, (__mmask16)(stored == 16 ? 0xFFFFu : (1u << stored) - 1u),
                                 rounded);
    }
}

const attn_lowp_kernels attn_lowp_avx512bf16 = {
    .name = "avx512bf16",
    .pack_keys = attn_lowp_avx512bf16_pack_keys,
    .pack_values = attn_lowp_avx512bf16_pack_values,
    .score_tile = score_tile,
    .accumulate_values = accumulate_values,
};

