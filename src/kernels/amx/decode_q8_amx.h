/*
 * decode_q8_amx.h — int8 KV storage (Q8) decoded on AMX-INT8 tiles (registry.h:
 * prepare_q8_tile_queries, score_chunk_q8_tiles, accumulate_chunk_q8_tiles). Included by
 * lowp_amx.c after amx_tiles.h (its tile operations AMX_LOAD / AMX_STORE / AMX_ZERO and
 * AMX_DPBSSD / AMX_DPBUSD, and its one configuration: 8 tiles of 16 rows x 64 bytes), and by
 * the kernel tests on emulated tiles.
 *
 * The integers are those of quant.h "Q8 decode arithmetic", so the results are the bits of
 * every other registry's score_chunk_q8 / accumulate_chunk_q8: the int16 operands (queries
 * q16 in [-16383, 16383], weights w16 in [-32767, 32767]) are split exactly into two bytes,
 * x = 256 hi + lo, each byte's products with the stored int8 elements are summed in int32 on
 * the tiles (TDPBSSD signed x signed, TDPBUSD unsigned x signed: exact), and the sum is
 * 256 * (hi sum) + (lo sum), in wrapping int32 arithmetic, which is exact because the true
 * sum fits (dim <= ATTN_DECODE_Q8_TILE_MOST_DIM).
 *  - Queries: hi = (q16 + 128) >> 8 in [-64, 64], lo = q16 - 256 hi in [-128, 127], both
 *    signed. Prepared once per task as B operands [16 groups of 4 dimensions][16 columns]
 *    [4 bytes]: columns 0-7 the high bytes of 8 query rows, 8-15 their low bytes.
 *  - Scores as Sᵀ = K · Qᵀ: A = 16 stored key rows x 64 dimensions loaded straight from the
 *    cache (the cache's row stride; no packing), one TDPBSSD per 16 keys, 64 dimensions and
 *    8 rows, the chunk's 4 key blocks in flight per row block; each [16 keys][16 columns]
 *    result is transposed (AVX-512, transpose16.h) into scores[row][key] and scaled as
 *    quant.h states: (key factor * query scale) * float(sum).
 *  - Values: the chunk's rows interleaved by 4 keys (byte and word unpacks) into B operands
 *    [16 groups of 4 keys][16 dimensions][4 bytes], 4 per 64 dimensions (the caller's stage;
 *    the unpacks permute dimensions inside each 64, undone when the sums are added); A = the
 *    weights' bytes, rows 0-7 high, rows 8-15 low: non-negative weights (the usual case:
 *    p >= 0 and scales >= 0) are both unsigned, one TDPBUSD per 16 dimensions;
 *    otherwise the signed high bytes go through TDPBSSD and the unsigned low bytes through
 *    TDPBUSD into the same result tile (rows 0-7 and 8-15 of A zeroed in turn). The float
 *    step is quant.h's: acc = fma(s_w, float(sum), rescale * acc).
 * Edges (fewer than 16 keys, dim not a multiple of 64) go through zero-padded staging, so no
 * load reads past a stored row or past the chunk. docs/inference.md ("int8 on AMX-INT8 tiles")
 * has the measurements, and why the decode loop runs P · V here only from
 * ATTN_DECODE_Q8_TILE_VALUE_ROWS rows.
 */
#include "kernels/quant.h"
#include "kernels/simd/transpose16.h"

#define ATTN_DECODE_Q8_AMX_TARGET ATTN_TARGET("avx512f,avx512bw,avx512vl,avx512dq")

/* Bytes of one B or A operand tile, and the rows of one query block. */
enum { AMX_Q8_TILE_BYTES = 1024, AMX_Q8_BLOCK_ROWS = 8 };

/* The first `left` of 16 lanes (none for left <= 0, all for left >= 16). */
static inline __mmask16 attn_amx_q8_lanes(int left) {
    return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
}

/* Largest |x[e]|, e < count. */
ATTN_DECODE_Q8_AMX_TARGET static float attn_amx_q8_largest(int count, const float *x) {
    __m512 largest = _mm512_setzero_ps();
    for (int e = 0; e < count; e += 16) {
        const __mmask16 lanes = attn_amx_q8_lanes(count - e);
        largest = _mm512_max_ps(largest, _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes, x + e)));
    }
    return _mm512_reduce_max_ps(largest);
}

/* target[e] = round(x[e] * multiplier) (to nearest even) as int16 for e < count, 0 up to
 * padded (a multiple of 16). */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_q8_round(int count, int padded, const float *x,
                                                        float multiplier, int16_t *target) {
    const __m512 factor = _mm512_set1_ps(multiplier);
    for (int e = 0; e < padded; e += 16) {
        const __mmask16 lanes = attn_amx_q8_lanes(count - e);
        const __m512i q = _mm512_cvt_roundps_epi32(
            _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, x + e), factor),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256((__m256i *)(target + e),
                            _mm512_cvtepi32_epi16(_mm512_maskz_mov_epi32(lanes, q)));
    }
}

/* key_factors[c] = factor * row_scales[c] (row_scales NULL: factor) for c < count, 0 up to
 * ATTN_DECODE_CHUNK; key_factors 64-byte aligned. */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_q8_key_factors(int count, const float *row_scales,
                                                              float factor, float *key_factors) {
    const __m512 factors = _mm512_set1_ps(factor);
    for (int c = 0; c < ATTN_DECODE_CHUNK; c += 16) {
        const __mmask16 lanes = attn_amx_q8_lanes(count - c);
        _mm512_store_ps(key_factors + c,
                        row_scales != NULL
                            ? _mm512_maskz_mul_ps(lanes, factors, _mm512_maskz_loadu_ps(lanes, row_scales + c))
                            : _mm512_maskz_mov_ps(lanes, factors));
    }
}

/* registry.h prepare_q8_tile_queries: prepared = [row block][dim block] B tiles, then the
 * rows' scales s_q (floats). */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_prepare_q8_tile_queries(int rows, int dim,
                                                                       const float *queries,
                                                                       void *prepared) {
    const int dim_blocks = (dim + 63) / 64, row_blocks = (rows + 7) / 8;
    uint8_t *tiles = prepared;
    float *scales = (float *)(tiles + (size_t)row_blocks * dim_blocks * AMX_Q8_TILE_BYTES);
    memset(tiles, 0, (size_t)row_blocks * dim_blocks * AMX_Q8_TILE_BYTES);
    int16_t q16[ATTN_DECODE_Q8_TILE_MOST_DIM] __attribute__((aligned(64)));
    for (int r = 0; r < rows; ++r) {
        const float *query = queries + (size_t)r * dim;
        const float largest = attn_amx_q8_largest(dim, query);
        scales[r] = largest / ATTN_Q8_QUERY_LEVELS;
        attn_amx_q8_round(dim, (dim + 15) / 16 * 16, query,
                          attn_q8_multiplier(largest, ATTN_Q8_QUERY_LEVELS), q16);
        uint8_t *block = tiles + (size_t)(r / AMX_Q8_BLOCK_ROWS) * dim_blocks * AMX_Q8_TILE_BYTES;
        const int column = r % AMX_Q8_BLOCK_ROWS;
        for (int d = 0; d < dim; ++d) {
            const int low = (int8_t)(uint8_t)(q16[d] & 0xff); /* q16 - low is a multiple of 256 */
            const int high = (q16[d] - low) / 256;
            uint8_t *group = block + (size_t)(d / 64) * AMX_Q8_TILE_BYTES + (d % 64) / 4 * 64 + d % 4;
            group[4 * column] = (uint8_t)(int8_t)high;
            group[4 * (column + AMX_Q8_BLOCK_ROWS)] = (uint8_t)(int8_t)low;
        }
    }
}

/* out[r * ATTN_DECODE_CHUNK + k] = (key_factors[k] * query_scales[r]) *
 * float(256 tile[k][r] + tile[k][8 + r]) for r < rows (<= 8), k < keys (<= 16): a stored
 * [16 keys][16 columns] int32 result tile. key_factors: 16 floats, 64-byte aligned. */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_q8_scores_out(const int32_t *tile, int rows,
                                                             int keys, const float *key_factors,
                                                             const float *query_scales,
                                                             float *out) {
    __m512 v[16];
    for (int i = 0; i < 16; ++i) v[i] = _mm512_load_ps((const float *)(tile + 16 * i));
    attn_transpose16(v); /* v[n] = column n over the 16 keys */
    const __mmask16 mask = attn_amx_q8_lanes(keys);
    const __m512 factors = _mm512_load_ps(key_factors);
    for (int r = 0; r < rows; ++r) {
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(v[r]), 8),
                                             _mm512_castps_si512(v[AMX_Q8_BLOCK_ROWS + r]));
        const __m512 scale = _mm512_mul_ps(factors, _mm512_set1_ps(query_scales[r]));
        _mm512_mask_storeu_ps(out + (size_t)r * ATTN_DECODE_CHUNK, mask,
                              _mm512_mul_ps(scale, _mm512_cvtepi32_ps(sum)));
    }
}

/* The A operand of keys [c0, c0 + 16) x dimensions [64 k, 64 k + 64): the stored rows
 * themselves when all exist (and their stride fits the tile load's), else `stage`
 * (zero-padded). */
static const uint8_t *attn_amx_q8_key_operand(const uint8_t *keys, int64_t key_stride, int c0,
                                              int count, int k, int dim, uint8_t *stage,
                                              int *stride_bytes) {
    const int valid_keys = count - c0 < 16 ? count - c0 : 16;
    const int valid_dims = dim - 64 * k < 64 ? dim - 64 * k : 64;
    const uint8_t *first = keys + (int64_t)c0 * key_stride + 64 * k;
    if (valid_keys == 16 && valid_dims == 64 && key_stride > 0 && key_stride <= INT32_MAX) {
        *stride_bytes = (int)key_stride;
        return first;
    }
    memset(stage, 0, AMX_Q8_TILE_BYTES);
    for (int c = 0; c < valid_keys; ++c)
        memcpy(stage + 64 * c, first + (int64_t)c * key_stride, (size_t)valid_dims);
    *stride_bytes = 64;
    return stage;
}

/* One dimension block k of the scores of one row block (rows <= 8) against the chunk's key
 * blocks: B (the queries) in tile BT, the key blocks in tiles 4 / 5 in turn, into result
 * tiles 0-3 (key block j in tile j). */
#define AMX_Q8_SCORE_DIM_BLOCK(BT)                                                          \
    do {                                                                                   \
        int a_stride[4];                                                                   \
        const uint8_t *a[4];                                                               \
        for (int j = 0; j < key_blocks; ++j)                                               \
            a[j] = attn_amx_q8_key_operand(keys, key_stride, 16 * j, count, k, dim,        \
                                           key_stage[j], &a_stride[j]);                   \
        AMX_LOAD(BT, tiles + (size_t)k * AMX_Q8_TILE_BYTES, 64);                           \
        AMX_LOAD(4, a[0], a_stride[0]);                                                    \
        AMX_DPBSSD(0, 4, BT);                                                              \
        if (key_blocks > 1) {                                                              \
            AMX_LOAD(5, a[1], a_stride[1]);                                                \
            AMX_DPBSSD(1, 5, BT);                                                          \
        }                                                                                  \
        if (key_blocks > 2) {                                                              \
            AMX_LOAD(4, a[2], a_stride[2]);                                                \
            AMX_DPBSSD(2, 4, BT);                                                          \
        }                                                                                  \
        if (key_blocks > 3) {                                                              \
            AMX_LOAD(5, a[3], a_stride[3]);                                                \
            AMX_DPBSSD(3, 5, BT);                                                          \
        }                                                                                  \
    } while (0)

/* Scores of one row block (<= 8 rows): the whole chunk's key blocks in flight at once (4
 * result tiles), the queries' B tile loaded once per dimension block; ahead: NULL, or rows to
 * request into L2 (registry.h keys_ahead; the first row block passes them). */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_q8_score_rows8(
    int rows, int count, int dim, const uint8_t *tiles, const float *query_scales,
    const uint8_t *keys, int64_t key_stride, const float *key_factors, float *scores,
    const uint8_t *ahead) {
    const int dim_blocks = (dim + 63) / 64, key_blocks = (count + 15) / 16;
    uint8_t key_stage[4][AMX_Q8_TILE_BYTES] __attribute__((aligned(64)));
    int32_t out_stage[4][256] __attribute__((aligned(64)));
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    AMX_ZERO(3);
    for (int k = 0; k < dim_blocks; ++k) {
        if (k % 2 == 0) AMX_Q8_SCORE_DIM_BLOCK(6);
        else AMX_Q8_SCORE_DIM_BLOCK(7);
    }
    AMX_STORE(0, out_stage[0], 64);
    if (key_blocks > 1) AMX_STORE(1, out_stage[1], 64);
    if (key_blocks > 2) AMX_STORE(2, out_stage[2], 64);
    if (key_blocks > 3) AMX_STORE(3, out_stage[3], 64);
    for (int j = 0; j < key_blocks; ++j) {
        /* the rows ahead, 16 per block of results (spread out: a burst of requests would
         * wait for fill buffers and stall the arithmetic), into L2 (T1: requested into L1
         * with T0, a long context's keys run slower) */
        for (int c = 16 * j; ahead != NULL && c < 16 * j + 16 && c < count; ++c)
            for (int d = 0; d < dim; d += 64)
                _mm_prefetch((const char *)(ahead + (int64_t)c * key_stride + d), _MM_HINT_T1);
        attn_amx_q8_scores_out(out_stage[j], rows, count - 16 * j < 16 ? count - 16 * j : 16,
                               key_factors + 16 * j, query_scales, scores + 16 * j);
    }
}

/* registry.h score_chunk_q8_tiles: one row block after the other (the later ones read the
 * keys from L1). */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_score_chunk_q8_tiles(
    int rows, int count, int dim, const void *prepared, const uint8_t *keys, int64_t key_stride,
    const float *row_scales, float factor, float *scores, const uint8_t *keys_ahead) {
    const int dim_blocks = (dim + 63) / 64, row_blocks = (rows + 7) / 8;
    const uint8_t *tiles = prepared;
    const size_t block_bytes = (size_t)dim_blocks * AMX_Q8_TILE_BYTES; /* one row block */
    const float *query_scales = (const float *)(tiles + (size_t)row_blocks * block_bytes);
    float key_factors[ATTN_DECODE_CHUNK] __attribute__((aligned(64)));
    attn_amx_q8_key_factors(count, row_scales, factor, key_factors);
    amx_tiles_configure();
    for (int b = 0; b < row_blocks; ++b) {
        const int r0 = b * AMX_Q8_BLOCK_ROWS;
        attn_amx_q8_score_rows8(rows - r0 < AMX_Q8_BLOCK_ROWS ? rows - r0 : AMX_Q8_BLOCK_ROWS,
                                count, dim, tiles + (size_t)b * block_bytes, query_scales + r0,
                                keys, key_stride, key_factors,
                                scores + (size_t)r0 * ATTN_DECODE_CHUNK,
                                b == 0 ? keys_ahead : NULL);
    }
}

/* The chunk's value rows as B operands, 4 keys interleaved: for each 64-element segment
 * (4 KiB of stage, dim rounded up to 64, zero past dim and for the keys past count), the
 * rows of 4 keys g: the 256 bytes at stage + segment * 4096 + g * 256 hold
 *   stage[... + 64 m + 4 n + i] = values[(4 g + i) * value_stride + 64 segment + e(m, n)],
 *   e(m, n) = 16 (n / 4) + 4 m + n % 4,
 * the order VPUNPCKLBW / VPUNPCKHBW then VPUNPCKLWD / VPUNPCKHWD leave (within 128-bit
 * lanes): the B operand m of a segment is its 16 rows of 64 bytes at offset 64 m, 256 bytes
 * apart, and result column n of that operand is element e(m, n) (values_out undoes it). */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_q8_pack_values(int count, int dim,
                                                              const uint8_t *values,
                                                              int64_t value_stride,
                                                              const uint8_t *ahead,
                                                              uint8_t *stage) {
    for (int s = 0; s < dim; s += 64) {
        const __mmask64 mask = dim - s >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (dim - s)) - 1u);
        uint8_t *segment = stage + (size_t)(s / 64) * 4 * AMX_Q8_TILE_BYTES;
        for (int g = 0; g < 16; ++g) {
            uint8_t *row = segment + (size_t)g * 256;
            if (4 * g >= count) { /* no key of the group: zero */
                for (int part = 0; part < 4; ++part)
                    _mm512_store_si512((void *)(row + 64 * part), _mm512_setzero_si512());
                continue;
            }
            __m512i x[4];
            for (int i = 0; i < 4; ++i) {
                const int key = 4 * g + i;
                const uint8_t *value = values + (int64_t)key * value_stride + s;
                if (key >= count) {
                    x[i] = _mm512_setzero_si512();
                    continue;
                }
                /* the row ahead (registry.h values_ahead), for the chunk's keys only:
                 * requesting rows for all 64 slots of a chunk of 16 would bring four pages
                 * of other rows into L1 per chunk (pages of 16) */
                if (ahead != NULL)
                    _mm_prefetch((const char *)(ahead + (int64_t)key * value_stride + s),
                                 _MM_HINT_T0);
                x[i] = _mm512_maskz_loadu_epi8(mask, value);
            }
            const __m512i ab_low = _mm512_unpacklo_epi8(x[0], x[1]);
            const __m512i ab_high = _mm512_unpackhi_epi8(x[0], x[1]);
            const __m512i cd_low = _mm512_unpacklo_epi8(x[2], x[3]);
            const __m512i cd_high = _mm512_unpackhi_epi8(x[2], x[3]);
            _mm512_store_si512((void *)row, _mm512_unpacklo_epi16(ab_low, cd_low));
            _mm512_store_si512((void *)(row + 64), _mm512_unpackhi_epi16(ab_low, cd_low));
            _mm512_store_si512((void *)(row + 128), _mm512_unpacklo_epi16(ab_high, cd_high));
            _mm512_store_si512((void *)(row + 192), _mm512_unpackhi_epi16(ab_high, cd_high));
        }
    }
}

/* A operands of up to 8 rows' int16 weights w16 [8][ATTN_DECODE_CHUNK]: unsigned_tile rows
 * 0-7 the high bytes, rows 8-15 the low bytes (all weights >= 0); or, when some weight is
 * negative, high_tile rows 0-7 the signed high bytes (rows 8-15 zero) and unsigned_tile rows
 * 8-15 the unsigned low bytes (rows 0-7 zero). Returns whether a weight is negative. */
ATTN_DECODE_Q8_AMX_TARGET static int attn_amx_q8_weight_operands(int rows, const int16_t *w16,
                                                                 uint8_t *unsigned_tile,
                                                                 uint8_t *high_tile) {
    __m512i any = _mm512_setzero_si512();
    for (int r = 0; r < rows; ++r)
        for (int half = 0; half < 2; ++half)
            any = _mm512_or_si512(any, _mm512_loadu_si512(w16 + r * ATTN_DECODE_CHUNK + 32 * half));
    const int negative = _mm512_movepi16_mask(any) != 0;
    memset(unsigned_tile, 0, AMX_Q8_TILE_BYTES);
    if (negative) memset(high_tile, 0, AMX_Q8_TILE_BYTES);
    uint8_t *high_rows = negative ? high_tile : unsigned_tile;
    for (int r = 0; r < rows; ++r)
        for (int half = 0; half < 2; ++half) {
            const __m512i w = _mm512_loadu_si512(w16 + r * ATTN_DECODE_CHUNK + 32 * half);
            _mm256_storeu_si256((__m256i *)(high_rows + 64 * r + 32 * half),
                                _mm512_cvtepi16_epi8(_mm512_srai_epi16(w, 8)));
            _mm256_storeu_si256((__m256i *)(unsigned_tile + 64 * (AMX_Q8_BLOCK_ROWS + r) + 32 * half),
                                _mm512_cvtepi16_epi8(w)); /* the low byte */
        }
    return negative;
}

/* acc[r][e] = fma(weight_scale[r], float(sum[r][e]), rescale[r] * acc[r][e]) for r < rows,
 * e < width (<= 64) of a 64-element segment, from its 4 stored [16][16] int32 result tiles:
 * sum[r][e(m, n)] = 256 tiles[m][r][n] + tiles[m][8 + r][n] (e(m, n) as pack_values). */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_q8_values_out(const int32_t (*tiles)[256],
                                                             int rows, int width,
                                                             const float *weight_scale,
                                                             const float *rescale,
                                                             float *accumulator, int dim) {
    for (int r = 0; r < rows; ++r) {
        __m512i x[4];
        for (int m = 0; m < 4; ++m) /* x[m] lane 4 L + j: element 16 L + 4 m + j */
            x[m] = _mm512_add_epi32(
                _mm512_slli_epi32(_mm512_load_si512((const void *)(tiles[m] + 16 * r)), 8),
                _mm512_load_si512((const void *)(tiles[m] + 16 * (AMX_Q8_BLOCK_ROWS + r))));
        /* the 4 x 4 transpose of 128-bit blocks: y[L] = elements 16 L .. 16 L + 15 */
        const __m512i t0 = _mm512_shuffle_i32x4(x[0], x[1], 0x44);
        const __m512i t1 = _mm512_shuffle_i32x4(x[0], x[1], 0xEE);
        const __m512i t2 = _mm512_shuffle_i32x4(x[2], x[3], 0x44);
        const __m512i t3 = _mm512_shuffle_i32x4(x[2], x[3], 0xEE);
        const __m512i y[4] = {_mm512_shuffle_i32x4(t0, t2, 0x88), _mm512_shuffle_i32x4(t0, t2, 0xDD),
                              _mm512_shuffle_i32x4(t1, t3, 0x88), _mm512_shuffle_i32x4(t1, t3, 0xDD)};
        const __m512 scale = _mm512_set1_ps(weight_scale[r]), factor = _mm512_set1_ps(rescale[r]);
        float *row = accumulator + (size_t)r * dim;
        for (int l = 0; l < 4 && 16 * l < width; ++l) {
            const __mmask16 mask = attn_amx_q8_lanes(width - 16 * l);
            const __m512 old = _mm512_maskz_loadu_ps(mask, row + 16 * l);
            _mm512_mask_storeu_ps(row + 16 * l, mask,
                                  _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(y[l]),
                                                  _mm512_mul_ps(factor, old)));
        }
    }
}

/* registry.h accumulate_chunk_q8_tiles: per 8 rows, 64 value elements (4 result tiles) at a
 * time. */
ATTN_DECODE_Q8_AMX_TARGET static void attn_amx_accumulate_chunk_q8_tiles(
    int rows, int count, int dim, const float *weights, const float *rescale,
    const uint8_t *values, int64_t value_stride, const float *row_scales, float factor,
    void *stage, float *accumulator, const uint8_t *values_ahead) {
    uint8_t *packed = stage;
    float key_factors[ATTN_DECODE_CHUNK] __attribute__((aligned(64)));
    attn_amx_q8_key_factors(count, row_scales, factor, key_factors);
    int16_t w16[AMX_Q8_BLOCK_ROWS * ATTN_DECODE_CHUNK] __attribute__((aligned(64)));
    float scaled[ATTN_DECODE_CHUNK] __attribute__((aligned(64)));
    float weight_scale[AMX_Q8_BLOCK_ROWS];
    uint8_t unsigned_tile[AMX_Q8_TILE_BYTES] __attribute__((aligned(64)));
    uint8_t high_tile[AMX_Q8_TILE_BYTES] __attribute__((aligned(64)));
    int32_t out_stage[2][4][256] __attribute__((aligned(64)));
    attn_amx_q8_pack_values(count, dim, values, value_stride, values_ahead, packed);
    amx_tiles_configure();
    for (int r0 = 0; r0 < rows; r0 += AMX_Q8_BLOCK_ROWS) {
        const int block_rows = rows - r0 < AMX_Q8_BLOCK_ROWS ? rows - r0 : AMX_Q8_BLOCK_ROWS;
        for (int r = 0; r < block_rows; ++r) { /* w' = p * key factor, rounded per row */
            const float *p = weights + (size_t)(r0 + r) * ATTN_DECODE_CHUNK;
            for (int c = 0; c < ATTN_DECODE_CHUNK; c += 16) {
                const __mmask16 lanes = attn_amx_q8_lanes(count - c);
                _mm512_store_ps(scaled + c, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, p + c),
                                                          _mm512_load_ps(key_factors + c)));
            }
            const float largest = attn_amx_q8_largest(count, scaled);
            weight_scale[r] = largest / ATTN_Q8_WEIGHT_LEVELS;
            attn_amx_q8_round(count, ATTN_DECODE_CHUNK, scaled,
                              attn_q8_multiplier(largest, ATTN_Q8_WEIGHT_LEVELS),
                              w16 + r * ATTN_DECODE_CHUNK);
        }
        const int negative =
            attn_amx_q8_weight_operands(block_rows, w16, unsigned_tile, high_tile);
        for (int s0 = 0; s0 < dim; s0 += 128) { /* two segments of 64 elements in flight */
            for (int half = 0; half < 2 && s0 + 64 * half < dim; ++half) {
                const uint8_t *b = packed + (size_t)(s0 / 64 + half) * 4 * AMX_Q8_TILE_BYTES;
                int32_t(*out)[256] = out_stage[half];
                AMX_ZERO(0);
                AMX_ZERO(1);
                AMX_ZERO(2);
                AMX_ZERO(3);
                if (s0 == 0 && half == 0) {
                    AMX_LOAD(4, unsigned_tile, 64);
                    if (negative) AMX_LOAD(5, high_tile, 64);
                }
                AMX_LOAD(6, b, 256);
                AMX_DPBUSD(0, 4, 6);
                if (negative) AMX_DPBSSD(0, 5, 6);
                AMX_LOAD(7, b + 64, 256);
                AMX_DPBUSD(1, 4, 7);
                if (negative) AMX_DPBSSD(1, 5, 7);
                AMX_LOAD(6, b + 128, 256);
                AMX_DPBUSD(2, 4, 6);
                if (negative) AMX_DPBSSD(2, 5, 6);
                AMX_LOAD(7, b + 192, 256);
                AMX_DPBUSD(3, 4, 7);
                if (negative) AMX_DPBSSD(3, 5, 7);
                AMX_STORE(0, out[0], 64);
                AMX_STORE(1, out[1], 64);
                AMX_STORE(2, out[2], 64);
                AMX_STORE(3, out[3], 64);
            }
            for (int half = 0; half < 2 && s0 + 64 * half < dim; ++half) {
                const int s = s0 + 64 * half;
                attn_amx_q8_values_out((const int32_t(*)[256])out_stage[half], block_rows,
                                       dim - s < 64 ? dim - s : 64, weight_scale, rescale + r0,
                                       accumulator + (size_t)r0 * dim + s, dim);
            }
        }
    }
}

static const attn_decode_kernels attn_amx_q8_decode = {
    .prepare_q8_tile_queries = attn_amx_prepare_q8_tile_queries,
    .score_chunk_q8_tiles = attn_amx_score_chunk_q8_tiles,
    .accumulate_chunk_q8_tiles = attn_amx_accumulate_chunk_q8_tiles,
};
