/*
 * decode_amx.h — the decode part of the AMX registry (registry.h: prepare_tile_queries,
 * score_chunk_tiles, accumulate_chunk_tiles): a large group's bf16 queries against a chunk of
 * bf16 keys and values on AMX-BF16 tiles (TDPBF16PS). Included once by lowp_amx.c after
 * amx_tiles.h, so that it runs on the same tile operations (AMX_LOAD / AMX_STORE / AMX_ZERO /
 * AMX_DPBF16, with their compiler barriers) and the same tile configuration
 * (amx_tiles_configure: tiles 0-3 fp32 accumulators, 4-5 A operands, 6-7 B operands, all
 * 16 rows x 64 bytes, loaded only when the thread's configuration differs).
 *
 * Scores as Sᵀ = K · Qᵀ: the A tile is 16 stored key rows x 32 dimensions loaded straight
 * from the cache (the row stride of the cache; no packing), B the query rows of the group in
 * the pair layout [dim / 2][16 rows][2], prepared once per task. A result tile is
 * [16 keys][16 rows]; an AVX-512 16 x 16 transpose writes it as scores[row][key], the layout
 * of the loop's softmax and logit pipeline. Edges (fewer than 16 keys in the chunk, dim not
 * a multiple of 32) go through a zeroed staging tile, so no load reads past a stored row.
 * P · V: A = P [16 rows][32 keys] rounded to bf16 (zero past count and rows), B = the
 * chunk's value rows interleaved in pairs of keys [key / 2][e][2] (once per chunk, into the
 * caller's stage), C = the accumulator rows loaded from and stored back to memory around
 * the chunk's products; rows whose rescale factor is not 1 are scaled first (AVX-512).
 *
 * The AVX-512 parts carry their own target attribute: the amx folder is compiled with the AMX flags
 * only (cmake/kernels.cmake), and the registry takes this table only on CPUs with AMX, which
 * all have AVX-512 F/BW and AVX512-BF16.
 */
#include "kernels/simd/transpose16.h"

#define ATTN_DECODE_AMX_TARGET ATTN_TARGET("avx512f,avx512bw,avx512vl,avx512dq")

/* Keys ahead of the current ones whose rows score_chunk_tiles requests (PREFETCHT0): the next
 * chunk (accumulate_chunk_tiles requests the value rows after those of its call). */
#define AMX_DECODE_LOOKAHEAD ATTN_DECODE_CHUNK

static const uint16_t attn_amx_decode_zero_tile[512] __attribute__((aligned(64)));

/* prepared[(block * dim_blocks + k) * 512 + p * 32 + n * 2 + j] = bf16(query[16 block + n]
 * [32 k + 2 p + j]): tile (row block, dimension block) in the pair layout; zero past rows
 * and dim (registry.h prepare_tile_queries). Each row: 32 dims rounded at once, their 16
 * pairs scattered 64 bytes apart. */
ATTN_DECODE_AMX_TARGET static void attn_amx_prepare_tile_queries(int rows, int dim,
                                                                 const float *queries,
                                                                 uint16_t *prepared) {
    const int dim_blocks = ATTN_DECODE_PREPARED_DIM(dim) / 32;
    const __m512i pair_rows = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(16));
    uint16_t rounded[32] __attribute__((aligned(64)));
    memset(prepared, 0, ATTN_DECODE_TILE_QUERY_ELEMENTS(rows, dim) * sizeof(uint16_t));
    for (int r = 0; r < rows; ++r) {
        uint16_t *row = prepared + (size_t)(r / 16) * dim_blocks * 512 + (r % 16) * 2;
        for (int k = 0; k < dim_blocks; ++k) {
            const int valid = dim - 32 * k < 32 ? dim - 32 * k : 32;
            attn_lowp_avx512bf16_round_row(rounded, queries + (size_t)r * dim + 32 * k, valid, 32);
            _mm512_i32scatter_epi32(row + (size_t)k * 512, pair_rows,
                                    _mm512_load_si512((const void *)rounded), 4);
        }
    }
}

/* out[n * out_stride + m] = tile[m * 16 + n] for n < rows, m < columns: a 16 x 16 fp32 tile
 * (as TILESTORED wrote it, row m = key m) transposed (row n = query row n). */
ATTN_DECODE_AMX_TARGET static void attn_amx_transpose_out(const float *tile, int rows,
                                                          int columns, float *out,
                                                          int out_stride) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(tile + 16 * i);
    attn_transpose16(r);
    const __mmask16 mask = columns >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << columns) - 1u);
    for (int n = 0; n < rows; ++n) _mm512_mask_storeu_ps(out + (size_t)n * out_stride, mask, r[n]);
}

/* The A operand of keys [c0, c0 + 16) x dimensions [32 k, 32 k + 32): the stored rows
 * themselves when all 16 keys and 32 dimensions exist, else `stage` (zero-padded). */
static const uint16_t *attn_amx_key_operand(const uint16_t *keys, int64_t key_stride, int c0,
                                            int count, int k, int dim, uint16_t *stage,
                                            int *stride_bytes) {
    const int valid_keys = count - c0 < 16 ? count - c0 : 16;
    const int valid_dims = dim - 32 * k < 32 ? dim - 32 * k : 32;
    if (valid_keys <= 0) {
        *stride_bytes = 64;
        return attn_amx_decode_zero_tile;
    }
    const uint16_t *first = keys + (int64_t)c0 * key_stride + 32 * k;
    if (valid_keys == 16 && valid_dims == 32) {
        *stride_bytes = (int)(key_stride * 2);
        return first;
    }
    memset(stage, 0, 1024);
    for (int c = 0; c < valid_keys; ++c)
        memcpy(stage + 32 * c, first + (int64_t)c * key_stride, (size_t)valid_dims * 2);
    *stride_bytes = 64;
    return stage;
}

/* registry.h score_chunk_tiles: Sᵀ tiles of 32 keys x 32 rows at a time. */
ATTN_DECODE_AMX_TARGET static void attn_amx_score_chunk_tiles(int rows, int count, int dim,
                                                              const uint16_t *prepared,
                                                              const uint16_t *keys,
                                                              int64_t key_stride,
                                                              float *scores) {
    uint16_t key_stage[2][16 * 32] __attribute__((aligned(64)));
    float out_stage[16 * 16] __attribute__((aligned(64)));
    const int dim_blocks = ATTN_DECODE_PREPARED_DIM(dim) / 32;
    const int row_blocks = ATTN_DECODE_GROUP_STRIDE(rows) / 16;
    amx_tiles_configure();
    for (int c0 = 0; c0 < count; c0 += 32)
        for (int block = 0; block < row_blocks; block += 2) {
            const int second = block + 1 < row_blocks; /* rows 16 (block + 1) .. exist */
            AMX_ZERO(0);
            AMX_ZERO(1);
            AMX_ZERO(2);
            AMX_ZERO(3);
            for (int k = 0; k < dim_blocks; ++k) {
                if (block == 0) /* the next chunk's keys (prefetch never faults) */
                    for (int c = 0; c < 32; ++c) {
                        const int64_t ahead = AMX_DECODE_LOOKAHEAD + c0 + c;
                        _mm_prefetch((const char *)(keys + ahead * key_stride + 32 * k),
                                     _MM_HINT_T0);
                    }
                int a_stride[2];
                const uint16_t *a0 = attn_amx_key_operand(keys, key_stride, c0, count, k, dim,
                                                          key_stage[0], &a_stride[0]);
                const uint16_t *a1 = attn_amx_key_operand(keys, key_stride, c0 + 16, count, k,
                                                          dim, key_stage[1], &a_stride[1]);
                const uint16_t *b0 = prepared + ((size_t)block * dim_blocks + k) * 512;
                AMX_LOAD(4, a0, a_stride[0]);
                AMX_LOAD(5, a1, a_stride[1]);
                AMX_LOAD(6, b0, 64);
                AMX_DPBF16(0, 4, 6); /* keys c0.., rows of block */
                AMX_DPBF16(2, 5, 6); /* keys c0 + 16.. */
                if (second) { /* rows of block + 1 */
                    AMX_LOAD(7, b0 + (size_t)dim_blocks * 512, 64);
                    AMX_DPBF16(1, 4, 7);
                    AMX_DPBF16(3, 5, 7);
                }
            }
            for (int t = 0; t < 4; ++t) {
                const int key_first = c0 + 16 * (t >> 1), row_first = 16 * (block + (t & 1));
                if (key_first >= count || row_first >= rows) continue;
                switch (t) {
                case 0: AMX_STORE(0, out_stage, 64); break;
                case 1: AMX_STORE(1, out_stage, 64); break;
                case 2: AMX_STORE(2, out_stage, 64); break;
                default: AMX_STORE(3, out_stage, 64); break;
                }
                attn_amx_transpose_out(out_stage, rows - row_first < 16 ? rows - row_first : 16,
                                       count - key_first,
                                       scores + (size_t)row_first * ATTN_DECODE_CHUNK + key_first,
                                       ATTN_DECODE_CHUNK);
            }
        }
}

/* stage[(i * width + e) * 2 + j] = values[(2 i + j) * value_stride + e] for 2 i + j < count,
 * e < dim; 0 for the keys up to `keys` (a multiple of 32) and e up to width (dim rounded up
 * to 16): the chunk's value rows as B operands (pairs of keys). */
ATTN_DECODE_AMX_TARGET static void attn_amx_pack_values(int count, int keys, int dim,
                                                        const uint16_t *values,
                                                        int64_t value_stride,
                                                        uint16_t *stage) {
    const int width = ATTN_DECODE_TILE_ROW_FLOATS(dim);
    const __m512i low = _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003,
                                          0x00240004, 0x00250005, 0x00260006, 0x00270007,
                                          0x00280008, 0x00290009, 0x002a000a, 0x002b000b,
                                          0x002c000c, 0x002d000d, 0x002e000e, 0x002f000f);
    const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
    for (int i = 0; i < keys / 2; ++i) {
        uint16_t *row = stage + (size_t)i * width * 2;
        const uint16_t *next = values + (int64_t)(keys + 2 * i) * value_stride;
        for (int e0 = 0; e0 < dim; e0 += 32) { /* the next keys' values */
            _mm_prefetch((const char *)(next + e0), _MM_HINT_T0);
            _mm_prefetch((const char *)(next + value_stride + e0), _MM_HINT_T0);
        }
        const uint16_t *first = values + (int64_t)(2 * i) * value_stride;
        for (int e0 = 0; e0 < width; e0 += 32) {
            const int valid = dim - e0;
            const __mmask32 mask = valid >= 32 ? (__mmask32)0xffffffffu
                                               : (__mmask32)((1u << valid) - 1u);
            const __m512i even = 2 * i < count ? _mm512_maskz_loadu_epi16(mask, first + e0)
                                               : _mm512_setzero_si512();
            const __m512i odd = 2 * i + 1 < count
                                    ? _mm512_maskz_loadu_epi16(mask, first + value_stride + e0)
                                    : _mm512_setzero_si512();
            _mm512_store_si512((void *)(row + 2 * e0), _mm512_permutex2var_epi16(even, low, odd));
            if (e0 + 16 < width)
                _mm512_store_si512((void *)(row + 2 * e0 + 32),
                                   _mm512_permutex2var_epi16(even, high, odd));
        }
    }
}

/* registry.h accumulate_chunk_tiles: 32 rows x 32 value elements per group of C tiles. */
ATTN_DECODE_AMX_TARGET static void attn_amx_accumulate_chunk_tiles(
    int rows, int count, int dim, const float *weights, const float *rescale,
    const uint16_t *values, int64_t value_stride, void *stage, float *accumulator) {
    const int width = ATTN_DECODE_TILE_ROW_FLOATS(dim);
    const int keys = (count + 31) / 32 * 32;
    uint16_t *packed = stage;
    enum { P_STRIDE = ATTN_DECODE_TILE_KEYS }; /* p_stage: [32 rows][ATTN_DECODE_TILE_KEYS] */
    uint16_t p_stage[32 * P_STRIDE] __attribute__((aligned(64)));
    /* rows rescaled by a factor other than 1 (after the first chunks: rarely) */
    for (int r = 0; r < rows; ++r) {
        if (rescale[r] == 1.0f) continue;
        const __m512 factor = _mm512_set1_ps(rescale[r]);
        float *row = accumulator + (size_t)r * width;
        for (int e = 0; e < width; e += 16)
            _mm512_storeu_ps(row + e, _mm512_mul_ps(factor, _mm512_loadu_ps(row + e)));
    }
    attn_amx_pack_values(count, keys, dim, values, value_stride, packed);
    amx_tiles_configure();
    const int pair_bytes = width * 4; /* bytes from one pair row of `packed` to the next */
    for (int r0 = 0; r0 < rows; r0 += 32) {
        const int second = r0 + 16 < rows;
        for (int r = 0; r < 32; ++r) {
            uint16_t *row = p_stage + r * P_STRIDE;
            if (r0 + r < rows) /* block j: keys [64 j, 64 j + 64) */
                for (int j = 0; 64 * j < count; ++j) {
                    const int n = count - 64 * j < 64 ? count - 64 * j : 64;
                    const int padded = 64 * j + 64 >= count ? keys - 64 * j : 64;
                    attn_lowp_avx512bf16_round_row(
                        row + 64 * j,
                        weights + ((size_t)j * rows + r0 + r) * ATTN_DECODE_CHUNK, n, padded);
                }
            else if (r < 16 || second)
                memset(row, 0, (size_t)keys * sizeof(uint16_t));
        }
        float *c_rows[2] = {accumulator + (size_t)r0 * width,
                            accumulator + (size_t)(r0 + 16) * width};
        for (int e0 = 0; e0 < width; e0 += 32) {
            const int right = e0 + 16 < width;
            AMX_LOAD(0, c_rows[0] + e0, width * 4);
            if (right) AMX_LOAD(1, c_rows[0] + e0 + 16, width * 4);
            if (second) AMX_LOAD(2, c_rows[1] + e0, width * 4);
            if (second && right) AMX_LOAD(3, c_rows[1] + e0 + 16, width * 4);
            for (int k = 0; k < keys; k += 32) {
                const uint16_t *b = packed + (size_t)(k / 2) * width * 2 + (size_t)e0 * 2;
                AMX_LOAD(4, p_stage + k, P_STRIDE * 2);
                AMX_LOAD(6, b, pair_bytes);
                AMX_DPBF16(0, 4, 6);
                if (right) {
                    AMX_LOAD(7, b + 32, pair_bytes);
                    AMX_DPBF16(1, 4, 7);
                }
                if (second) {
                    AMX_LOAD(5, p_stage + 16 * P_STRIDE + k, P_STRIDE * 2);
                    AMX_DPBF16(2, 5, 6);
                    if (right) AMX_DPBF16(3, 5, 7);
                }
            }
            AMX_STORE(0, c_rows[0] + e0, width * 4);
            if (right) AMX_STORE(1, c_rows[0] + e0 + 16, width * 4);
            if (second) AMX_STORE(2, c_rows[1] + e0, width * 4);
            if (second && right) AMX_STORE(3, c_rows[1] + e0 + 16, width * 4);
        }
    }
}

static const attn_decode_kernels attn_amx_decode = {
    .prepare_tile_queries = attn_amx_prepare_tile_queries,
    .score_chunk_tiles = attn_amx_score_chunk_tiles,
    .accumulate_chunk_tiles = attn_amx_accumulate_chunk_tiles,
    .tile_rows_bf16 = ATTN_DECODE_TILE_ROWS,
    .tile_rows_fp8 = ATTN_DECODE_TILE_ROWS,
};
