/*
 * scores_avx512.c — S = Q·Kᵀ on a tile with AVX-512: packing keys transposed in blocks of 16
 * (the key index is the SIMD dimension) and a register-blocked micro-kernel of up to
 * 6 query rows × 4 key blocks = 24 independent zmm accumulators (Zen 4 needs ≥ 8 FMA chains in
 * flight per core; 24 leaves room for the 4 key loads and 1 broadcast of each step).
 */
#include <immintrin.h>
#include <stdbool.h>

#include "kernels_avx512.h"

#define SCORE_ROWS 6   /* query rows per micro-tile */
#define SCORE_BLOCKS 4 /* key blocks of 16 per micro-tile */

static inline int key_blocks(int count) {
    return (count + ATTN_AVX512_LANES - 1) / ATTN_AVX512_LANES;
}

size_t attn_avx512_packed_keys_floats(int count, int dim) {
    return (size_t)key_blocks(count) * ATTN_AVX512_LANES * (size_t)dim;
}

/* source: key c, element d at source[c*token_stride + d*dim_stride], c < count, d < dim.
 * packed: key_blocks(count) blocks of [dim][16], lanes past count zero. Each packed row of
 * 16 keys is one gather (lane l reads key first + l) when the key offsets fit in 32 bits;
 * otherwise a scalar transpose. */
void attn_avx512_pack_keys(int count, int dim, const float *source, int64_t token_stride,
                           int64_t dim_stride, float *packed) {
    const int blocks = key_blocks(count);
    const bool gather = token_stride > -(INT32_MAX / ATTN_AVX512_LANES) &&
                        token_stride < INT32_MAX / ATTN_AVX512_LANES;
    const __m512i lane_offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(gather ? (int)token_stride : 0));
    for (int block = 0; block < blocks; ++block) {
        float *destination = packed + (size_t)block * ATTN_AVX512_LANES * dim;
        const int first = block * ATTN_AVX512_LANES;
        const int lanes = count - first < ATTN_AVX512_LANES ? count - first : ATTN_AVX512_LANES;
        const float *keys = source + (int64_t)first * token_stride;
        if (gather) {
            const __mmask16 mask = (__mmask16)((1u << lanes) - 1u);
            for (int d = 0; d < dim; ++d)
                _mm512_store_ps(destination + d * ATTN_AVX512_LANES,
                                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, lane_offsets,
                                                         keys + (int64_t)d * dim_stride, 4));
            continue;
        }
        if (lanes < ATTN_AVX512_LANES)
            for (int i = 0; i < ATTN_AVX512_LANES * dim; ++i) destination[i] = 0.0f;
        for (int lane = 0; lane < lanes; ++lane) {
            const float *key = keys + (int64_t)lane * token_stride;
            for (int d = 0; d < dim; ++d)
                destination[d * ATTN_AVX512_LANES + lane] = key[(int64_t)d * dim_stride];
        }
    }
}

/* One micro-tile: ROWS query rows × BLOCKS key blocks. queries [ROWS][query_stride],
 * keys = first packed block, scores [ROWS][scores_stride]; the last block stores only the
 * lanes in last_mask. ROWS and BLOCKS are compile-time constants at every call site, so the
 * accumulators live in registers. */
static inline __attribute__((always_inline)) void score_micro_tile(
    const int ROWS, const int BLOCKS, int dim, const float *queries, int query_stride,
    const float *keys, float *scores, int scores_stride, __mmask16 last_mask) {
    __m512 accumulator[SCORE_ROWS][SCORE_BLOCKS];
    for (int r = 0; r < ROWS; ++r)
        for (int b = 0; b < BLOCKS; ++b) accumulator[r][b] = _mm512_setzero_ps();
    const size_t block_floats = (size_t)ATTN_AVX512_LANES * dim;
    for (int d = 0; d < dim; ++d) {
        __m512 key[SCORE_BLOCKS];
        for (int b = 0; b < BLOCKS; ++b)
            key[b] = _mm512_load_ps(keys + b * block_floats + (size_t)d * ATTN_AVX512_LANES);
        for (int r = 0; r < ROWS; ++r) {
            const __m512 query = _mm512_set1_ps(queries[(size_t)r * query_stride + d]);
            for (int b = 0; b < BLOCKS; ++b)
                accumulator[r][b] = _mm512_fmadd_ps(query, key[b], accumulator[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        for (int b = 0; b < BLOCKS - 1; ++b)
            _mm512_storeu_ps(row + b * ATTN_AVX512_LANES, accumulator[r][b]);
        _mm512_mask_storeu_ps(row + (BLOCKS - 1) * ATTN_AVX512_LANES, last_mask,
                              accumulator[r][BLOCKS - 1]);
    }
}

#define SCORE_CASE(ROWS, BLOCKS)                                                               \
    case (ROWS)*8 + (BLOCKS):                                                                  \
        score_micro_tile(ROWS, BLOCKS, dim, queries, query_stride, keys, scores, scores_stride, \
                         last_mask);                                                           \
        break;
#define SCORE_CASES_FOR_ROWS(ROWS) \
    SCORE_CASE(ROWS, 1) SCORE_CASE(ROWS, 2) SCORE_CASE(ROWS, 3) SCORE_CASE(ROWS, 4)

/* Dispatches a micro-tile of `rows` ≤ 6 rows and `blocks` ≤ 4 key blocks. */
static void score_micro_tile_any(int rows, int blocks, int dim, const float *queries,
                                 int query_stride, const float *keys, float *scores,
                                 int scores_stride, __mmask16 last_mask) {
    switch (rows * 8 + blocks) {
        SCORE_CASES_FOR_ROWS(1)
        SCORE_CASES_FOR_ROWS(2)
        SCORE_CASES_FOR_ROWS(3)
        SCORE_CASES_FOR_ROWS(4)
        SCORE_CASES_FOR_ROWS(5)
        SCORE_CASES_FOR_ROWS(6)
    default: break;
    }
}

/* scores[r][c] = queries[r]·key_c for r < rows, c < count. queries [rows][query_stride],
 * packed_keys from attn_avx512_pack_keys(count, dim), scores [rows][scores_stride]. */
void attn_avx512_score_tile(int rows, int count, int dim, const float *queries,
                            int query_stride, const float *packed_keys, float *scores,
                            int scores_stride) {
    const int blocks = key_blocks(count);
    const size_t block_floats = (size_t)ATTN_AVX512_LANES * dim;
    for (int first_block = 0; first_block < blocks; first_block += SCORE_BLOCKS) {
        const int micro_blocks =
            blocks - first_block < SCORE_BLOCKS ? blocks - first_block : SCORE_BLOCKS;
        const int last_key = (first_block + micro_blocks) * ATTN_AVX512_LANES;
        const int tail = count - (last_key - ATTN_AVX512_LANES); /* 1..16 in the last chunk */
        const __mmask16 last_mask = /* > 16 when more blocks follow */
            tail >= ATTN_AVX512_LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << tail) - 1u);
        const float *keys = packed_keys + (size_t)first_block * block_floats;
        for (int first_row = 0; first_row < rows; first_row += SCORE_ROWS) {
            const int micro_rows = rows - first_row < SCORE_ROWS ? rows - first_row : SCORE_ROWS;
            score_micro_tile_any(micro_rows, micro_blocks, dim,
                                 queries + (size_t)first_row * query_stride, query_stride, keys,
                                 scores + (size_t)first_row * scores_stride +
                                     first_block * ATTN_AVX512_LANES,
                                 scores_stride, last_mask);
        }
    }
}
