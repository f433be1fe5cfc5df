/*
 * scores_avx2.c — S = Q·Kᵀ on a tile with AVX2 + FMA: keys packed transposed in blocks of 8
 * (the key index is the SIMD dimension) and a register-blocked micro-kernel of up to
 * 6 query rows × 2 key blocks = 12 independent ymm accumulators (16 ymm registers: 12
 * accumulators, 2 key loads, 1 broadcast).
 */
#include <immintrin.h>
#include <stdbool.h>

#include "exp_avx2.h"
#include "kernels_avx2.h"

#define SCORE_ROWS 6   /* query rows per micro-tile */
#define SCORE_BLOCKS 2 /* key blocks of 8 per micro-tile */

static inline int key_blocks(int count) {
    return (count + ATTN_AVX2_LANES - 1) / ATTN_AVX2_LANES;
}

size_t attn_avx2_packed_keys_floats(int count, int dim) {
    return (size_t)key_blocks(count) * ATTN_AVX2_LANES * (size_t)dim;
}

/* source: key c, element d at source[c*token_stride + d*dim_stride], c < count, d < dim.
 * packed: key_blocks(count) blocks of [dim][8]. */
void attn_avx2_pack_keys(int count, int dim, const float *source, int64_t token_stride,
                         int64_t dim_stride, float *packed) {
    const int blocks = key_blocks(count);
    /* Each packed row of 8 keys is one gather when the key offsets fit in 32 bits. */
    const bool gather = token_stride > -(INT32_MAX / ATTN_AVX2_LANES) &&
                        token_stride < INT32_MAX / ATTN_AVX2_LANES;
    const __m256i lane_offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                    _mm256_set1_epi32(gather ? (int)token_stride : 0));
    for (int block = 0; block < blocks; ++block) {
        float *destination = packed + (size_t)block * ATTN_AVX2_LANES * dim;
        const int first = block * ATTN_AVX2_LANES;
        const int lanes = count - first < ATTN_AVX2_LANES ? count - first : ATTN_AVX2_LANES;
        const float *keys = source + (int64_t)first * token_stride;
        if (gather) {
            const __m256 mask = _mm256_castsi256_ps(attn_avx2_lane_mask(lanes));
            for (int d = 0; d < dim; ++d)
                _mm256_store_ps(destination + d * ATTN_AVX2_LANES,
                                _mm256_mask_i32gather_ps(_mm256_setzero_ps(),
                                                         keys + (int64_t)d * dim_stride,
                                                         lane_offsets, mask, 4));
            continue;
        }
        if (lanes < ATTN_AVX2_LANES)
            for (int i = 0; i < ATTN_AVX2_LANES * dim; ++i) destination[i] = 0.0f;
        for (int lane = 0; lane < lanes; ++lane) {
            const float *key = keys + (int64_t)lane * token_stride;
            for (int d = 0; d < dim; ++d)
                destination[d * ATTN_AVX2_LANES + lane] = key[(int64_t)d * dim_stride];
        }
    }
}

/* One micro-tile: ROWS query rows × BLOCKS key blocks (compile-time constants at every call
 * site). queries [ROWS][query_stride], scores [ROWS][scores_stride]; the last block stores
 * only the lanes of last_mask. */
static inline __attribute__((always_inline)) void score_micro_tile(
    const int ROWS, const int BLOCKS, int dim, const float *queries, int query_stride,
    const float *keys, float *scores, int scores_stride, __m256i last_mask) {
    __m256 accumulator[SCORE_ROWS][SCORE_BLOCKS];
    for (int r = 0; r < ROWS; ++r)
        for (int b = 0; b < BLOCKS; ++b) accumulator[r][b] = _mm256_setzero_ps();
    const size_t block_floats = (size_t)ATTN_AVX2_LANES * dim;
    for (int d = 0; d < dim; ++d) {
        __m256 key[SCORE_BLOCKS];
        for (int b = 0; b < BLOCKS; ++b)
            key[b] = _mm256_load_ps(keys + b * block_floats + (size_t)d * ATTN_AVX2_LANES);
        for (int r = 0; r < ROWS; ++r) {
            const __m256 query = _mm256_broadcast_ss(queries + (size_t)r * query_stride + d);
            for (int b = 0; b < BLOCKS; ++b)
                accumulator[r][b] = _mm256_fmadd_ps(query, key[b], accumulator[r][b]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float *row = scores + (size_t)r * scores_stride;
        for (int b = 0; b < BLOCKS - 1; ++b)
            _mm256_storeu_ps(row + b * ATTN_AVX2_LANES, accumulator[r][b]);
        _mm256_maskstore_ps(row + (BLOCKS - 1) * ATTN_AVX2_LANES, last_mask,
                            accumulator[r][BLOCKS - 1]);
    }
}

#define SCORE_CASE(ROWS, BLOCKS)                                                               \
    case (ROWS)*8 + (BLOCKS):                                                                  \
        score_micro_tile(ROWS, BLOCKS, dim, queries, query_stride, keys, scores, scores_stride, \
                         last_mask);                                                           \
        break;
#define SCORE_CASES_FOR_ROWS(ROWS) SCORE_CASE(ROWS, 1) SCORE_CASE(ROWS, 2)

static void score_micro_tile_any(int rows, int blocks, int dim, const float *queries,
                                 int query_stride, const float *keys, float *scores,
                                 int scores_stride, __m256i last_mask) {
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
 * packed_keys from attn_avx2_pack_keys(count, dim), scores [rows][scores_stride]. */
void attn_avx2_score_tile(int rows, int count, int dim, const float *queries, int query_stride,
                          const float *packed_keys, float *scores, int scores_stride) {
    const int blocks = key_blocks(count);
    const size_t block_floats = (size_t)ATTN_AVX2_LANES * dim;
    for (int first_block = 0; first_block < blocks; first_block += SCORE_BLOCKS) {
        const int micro_blocks =
            blocks - first_block < SCORE_BLOCKS ? blocks - first_block : SCORE_BLOCKS;
        const int last_key = (first_block + micro_blocks) * ATTN_AVX2_LANES;
        const __m256i last_mask = attn_avx2_lane_mask(count - (last_key - ATTN_AVX2_LANES));
        const float *keys = packed_keys + (size_t)first_block * block_floats;
        for (int first_row = 0; first_row < rows; first_row += SCORE_ROWS) {
            const int micro_rows = rows - first_row < SCORE_ROWS ? rows - first_row : SCORE_ROWS;
            score_micro_tile_any(micro_rows, micro_blocks, dim,
                                 queries + (size_t)first_row * query_stride, query_stride, keys,
                                 scores + (size_t)first_row * scores_stride +
                                     first_block * ATTN_AVX2_LANES,
                                 scores_stride, last_mask);
        }
    }
}
