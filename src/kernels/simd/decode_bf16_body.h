/*
 * decode_bf16_body.h — the decode kernels that read bfloat16 keys and values in place, as
 * pairs (registry.h score_chunk_bf16, accumulate_chunk_bf16, prepare_bf16_queries), written
 * once over vec.h and compiled at each width (included by decode_avx2.c and decode_avx512.c
 * after decode_body.h). Used for groups of <= ATTN_DECODE_FUSED_ROWS rows, where each stored
 * element is read once or twice; larger groups convert each chunk once into a float32 buffer.
 *
 * A vector of 32-bit lanes loaded from 2 * VLANES bfloat16 values holds the pair (2i, 2i + 1)
 * in lane i: shifted left by 16 it is element 2i as a float32, with its low 16 bits cleared
 * element 2i + 1 (two integer operations per 2 * VLANES values, no shuffle). So the lanes hold
 * the even and the odd dimensions apart: the queries are prepared in that order once per task,
 * and a value block splits its accumulator columns into even / odd when it loads them and
 * merges them when it stores them (a permute or two per 2 * VLANES floats per chunk).
 * Widening is exact; only the order of the dot products' partial sums differs from the
 * float32 path. A head dimension that is not a multiple of 2 * VLANES ends in a block whose
 * elements past the row read as 0 (nothing past a row is read). The pass that reads a chunk's
 * keys (values) requests the row LOOKAHEAD rows ahead of each one it uses (decode_body.h).
 *
 * What differs by width is how 2 * VLANES values are loaded with a tail, how floats are split
 * into and merged from even / odd dimensions, and how a block's sums are stored (below); the
 * blocks are the same: scores in blocks of VLANES dot products (4 rows x VLANES / 4 keys
 * dimension-major, 2 x VLANES / 2 and 1 x VLANES key after key), values in blocks of up to 4
 * rows x BF16_SEGMENTS segments of 2 * VLANES floats.
 */

/* Segments of 2 * VLANES accumulator floats a value block holds per row (blocks of 3 or 4
 * rows, and of 1 or 2): 16 of the 32 zmm registers, 8 of the 16 ymm ones. */
#define BF16_SEGMENTS(block_rows) (VLANES == 16 ? ((block_rows) > 2 ? 2 : 4) : 1)

/* ---- per width: a tail of 16-bit values, even / odd splitting, a block's stores ---- */
#if VLANES == 16
/* Mask of the first `elements` of 32 16-bit elements (any int; also the 8-bit kernels'). */
V_INLINE __mmask32 element_mask(int elements) {
    if (elements >= 32) return (__mmask32)0xffffffffu;
    return elements <= 0 ? (__mmask32)0 : (__mmask32)((1u << elements) - 1u);
}

/* The 32 16-bit values source[0 .. 32), those past `elements` 0 and not read. */
V_INLINE __m512i load_words(const uint16_t *source, int elements) {
    return _mm512_maskz_loadu_epi16(element_mask(elements), source);
}

/* 32 floats source[0 .. 32) (those past `valid` read as 0) split into even / odd dimensions. */
V_INLINE void load_split(const float *source, int valid, vf *even, vf *odd) {
    const __m512i even_index =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_index =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const vf low = vf_maskz_loadu(vmask_first(valid), source);
    const vf high = vf_maskz_loadu(vmask_first(valid - 16), source + 16);
    *even = _mm512_permutex2var_ps(low, even_index, high);
    *odd = _mm512_permutex2var_ps(low, odd_index, high);
}

/* The inverse of load_split: target[0 .. valid) = the interleaved even / odd dimensions. */
V_INLINE void store_merged(float *target, int valid, vf even, vf odd) {
    const __m512i low_index =
        _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high_index =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    vf_mask_storeu(target, vmask_first(valid), _mm512_permutex2var_ps(even, low_index, odd));
    vf_mask_storeu(target + 16, vmask_first(valid - 16), _mm512_permutex2var_ps(even, high_index, odd));
}

/* scores[r * ATTN_DECODE_CHUNK + k] = lane r * block_keys + k of sums, for r < rows_left,
 * k < keys_left. */
V_INLINE void store_block_sums(const int block_rows, const int block_keys, int rows_left,
                               int keys_left, vf sums, float *scores) {
    float out[16];
    vf_storeu(out, sums);
    for (int r = 0; r < block_rows && r < rows_left; ++r)
        for (int k = 0; k < block_keys && k < keys_left; ++k)
            scores[r * ATTN_DECODE_CHUNK + k] = out[r * block_keys + k];
}
#else
V_INLINE __m256i load_words(const uint16_t *source, int elements) {
    if (elements >= 16) return _mm256_loadu_si256((const __m256i *)source);
    uint16_t padded[16] = {0};
    if (elements > 0) memcpy(padded, source, (size_t)elements * sizeof(uint16_t));
    return _mm256_loadu_si256((const __m256i *)padded);
}

/* shuffle_ps takes dimensions (0, 2, 8, 10 | 4, 6, 12, 14), the 64-bit permute orders them. */
V_INLINE void load_split(const float *source, int valid, vf *even, vf *odd) {
    const vf low = load_first(source, valid);
    const vf high = load_first(source + 8, valid - 8);
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(low, high, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(low, high, 0xDD)), 0xD8));
}

/* unpack gives dimensions (0-3 | 8-11) and (4-7 | 12-15), the 128-bit permute orders them. */
V_INLINE void store_merged(float *target, int valid, vf even, vf odd) {
    const vf first = _mm256_unpacklo_ps(even, odd), second = _mm256_unpackhi_ps(even, odd);
    const vf low = _mm256_permute2f128_ps(first, second, 0x20);
    const vf high = _mm256_permute2f128_ps(first, second, 0x31);
    if (valid >= 8) vf_storeu(target, low);
    else vf_mask_storeu(target, vmask_first(valid), low);
    if (valid >= 16) vf_storeu(target + 8, high);
    else if (valid > 8) vf_mask_storeu(target + 8, vmask_first(valid - 8), high);
}

/* scores[r * ATTN_DECODE_CHUNK + k] = factors[k] * row_factor(r) * sums[r * block_keys + k]
 * for r < rows_left (<= block_rows), k < keys_left (<= block_keys); lane a of sums is
 * (r, k) = (a / block_keys, a % block_keys). with_rows (a constant): row_factors holds each
 * lane's row factor, multiplied into the key factor first, (key_factor * row_factor) * sum,
 * as attn_q8_score_exact rounds; else the key factor alone; key_factor NULL: the sums as
 * they are (no factor at all). key_factor is readable for block_keys entries. Stores of a
 * whole block are 64-, 128- or 256-bit (also the 8-bit kernels', decode_q8_avx2.h). */
V_INLINE void store_block_scores(const int block_rows, const int block_keys, const int with_rows,
                                 int rows_left, int keys_left, const float *key_factor,
                                 __m256 row_factors, __m256 sums, float *scores) {
    __m256 result = sums;
    if (key_factor != NULL) {
        __m256 factors;
        if (block_keys == 2) factors = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)key_factor));
        else if (block_keys == 4) factors = _mm256_broadcast_ps((const __m128 *)key_factor);
        else factors = _mm256_loadu_ps(key_factor);
        if (with_rows) factors = _mm256_mul_ps(factors, row_factors);
        result = _mm256_mul_ps(factors, sums);
    }
    if (rows_left >= block_rows && keys_left >= block_keys) {
        const __m128 low = _mm256_castps256_ps128(result), high = _mm256_extractf128_ps(result, 1);
        if (block_keys == 2) {
            _mm_storel_pi((__m64 *)scores, low);
            _mm_storeh_pi((__m64 *)(scores + ATTN_DECODE_CHUNK), low);
            _mm_storel_pi((__m64 *)(scores + 2 * ATTN_DECODE_CHUNK), high);
            _mm_storeh_pi((__m64 *)(scores + 3 * ATTN_DECODE_CHUNK), high);
        } else if (block_keys == 4) {
            _mm_storeu_ps(scores, low);
            _mm_storeu_ps(scores + ATTN_DECODE_CHUNK, high);
        } else _mm256_storeu_ps(scores, result);
        return;
    }
    float out[8];
    _mm256_storeu_ps(out, result);
    for (int r = 0; r < rows_left && r < block_rows; ++r)
        for (int k = 0; k < keys_left && k < block_keys; ++k)
            scores[r * ATTN_DECODE_CHUNK + k] = out[r * block_keys + k];
}

V_INLINE void store_block_sums(const int block_rows, const int block_keys, int rows_left,
                               int keys_left, vf sums, float *scores) {
    store_block_scores(block_rows, block_keys, 0, rows_left, keys_left, NULL, vf_zero(), sums, scores);
}
#endif

/* ---- the kernels, the same at both widths ---- */

/* The 2 * VLANES bfloat16 values source[0 .. 2 VLANES) (past `elements`: 0, not read) as
 * float32 even (dimensions 0, 2, ..) and odd (1, 3, ..) vectors. */
V_INLINE void load_bf16_pairs(const uint16_t *source, int elements, vf *even, vf *odd) {
    const vi pairs = load_words(source, elements);
    *even = vi_as_vf(vi_slli(pairs, 16));
    *odd = vf_and(vi_as_vf(pairs), vi_as_vf(vi_set1((int)0xffff0000u)));
}

/* prepared[r][2V s .. 2V s + V) = even dimensions of queries[r][2V s .. 2V s + 2V),
 * prepared[r][2V s + V .. 2V s + 2V) = the odd ones (V = VLANES); zero past dim (prepared
 * rows of ATTN_DECODE_PREPARED_DIM(dim) floats). */
static void prepare_bf16_queries(int rows, int dim, const float *queries, float *prepared) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    for (int r = 0; r < rows; ++r)
        for (int d = 0; d < prepared_dim; d += 2 * VLANES) {
            vf even = vf_zero(), odd = even;
            if (d < dim) load_split(queries + (int64_t)r * dim + d, dim - d, &even, &odd);
            vf_storeu(prepared + (int64_t)r * prepared_dim + d, even);
            vf_storeu(prepared + (int64_t)r * prepared_dim + d + VLANES, odd);
        }
}

/* The block_rows x block_keys dot products of prepared query rows row[r] with bfloat16 keys
 * key[k], 2 * VLANES dimensions at a time, as lanes r * block_keys + k of the result;
 * key_major: each key read whole before the next, else dimension-major (each key vector
 * serving every row). full (a constant): dim % (2 * VLANES) == 0. */
V_INLINE vf score_block_bf16(const int block_rows, const int block_keys, const int key_major,
                             const int full, int dim, const float *const *row,
                             const uint16_t *const *key) {
    vf sums[VLANES];
    for (int a = 0; a < VLANES; ++a) sums[a] = vf_zero();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 2 * VLANES) {
                vf even, odd;
                load_bf16_pairs(key[k] + d, full ? 2 * VLANES : dim - d, &even, &odd);
                for (int r = 0; r < block_rows; ++r) {
                    vf *sum = &sums[r * block_keys + k];
                    *sum = vf_fmadd(vf_loadu(row[r] + d), even, *sum);
                    *sum = vf_fmadd(vf_loadu(row[r] + d + VLANES), odd, *sum);
                }
            }
    } else {
        for (int d = 0; d < dim; d += 2 * VLANES) {
            vf even[VLANES / 4], odd[VLANES / 4];
            for (int k = 0; k < block_keys; ++k)
                load_bf16_pairs(key[k] + d, full ? 2 * VLANES : dim - d, &even[k], &odd[k]);
            for (int r = 0; r < block_rows; ++r) {
                const vf query_even = vf_loadu(row[r] + d), query_odd = vf_loadu(row[r] + d + VLANES);
                for (int k = 0; k < block_keys; ++k) {
                    vf *sum = &sums[r * block_keys + k];
                    *sum = vf_fmadd(query_even, even[k], *sum);
                    *sum = vf_fmadd(query_odd, odd[k], *sum);
                }
            }
        }
    }
    return transpose_reduce(sums);
}

/* A block of (4, VLANES / 4) dimension-major, (2, VLANES / 2) or (1, VLANES) key-major. */
V_INLINE vf score_block_bf16_rows(const int block_rows, const int full, int dim,
                                  const float *const *row, const uint16_t *const *key) {
    return score_block_bf16(block_rows, VLANES / block_rows, block_rows < 4, full, dim, row, key);
}

/* score_chunk for bfloat16 keys; `queries` as prepared by prepare_bf16_queries. */
static void score_chunk_bf16(int rows, int count, int dim, const float *queries,
                             const uint16_t *keys, int64_t key_stride, float *scores,
                             const uint16_t *keys_ahead) {
    const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = VLANES / block_rows;
    const int full = dim % (2 * VLANES) == 0;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const float *row[4];
            const uint16_t *key[VLANES];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * prepared_dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0 && rows >= PREFETCH_ROWS) /* the pass that reads the keys */
                for (int k = 0; k < block_keys; ++k)
                    prefetch_row_or_next(keys, keys_ahead, c0 + k, LOOKAHEAD, count,
                                         key_stride * 2, dim * 2, 0);
            vf sums;
            if (block_rows == 4) sums = full ? score_block_bf16_rows(4, 1, dim, row, key)
                                             : score_block_bf16_rows(4, 0, dim, row, key);
            else if (block_rows == 2) sums = full ? score_block_bf16_rows(2, 1, dim, row, key)
                                                  : score_block_bf16_rows(2, 0, dim, row, key);
            else sums = full ? score_block_bf16_rows(1, 1, dim, row, key)
                             : score_block_bf16_rows(1, 0, dim, row, key);
            float *target = scores + r0 * ATTN_DECODE_CHUNK + c0;
            if (block_rows == 4) store_block_sums(4, VLANES / 4, rows - r0, count - c0, sums, target);
            else if (block_rows == 2) store_block_sums(2, VLANES / 2, rows - r0, count - c0, sums, target);
            else store_block_sums(1, VLANES, rows - r0, count - c0, sums, target);
        }
}

/* As accumulate_block for bfloat16 values read as pairs: rows [0, block_rows) (<= 4), columns
 * [e0, e0 + width) with width <= 2 * VLANES * segments, each segment held as even / odd
 * dimensions; full (a constant): width is the whole block; prefetch (a constant): this block
 * requests the rows ahead. */
V_INLINE void accumulate_block_bf16(const int block_rows, const int segments, const int full,
                                    const int prefetch, int count, int e0, int width, int dim,
                                    const float *weights, const float *rescale,
                                    const uint16_t *values, int64_t value_stride,
                                    float *accumulator, const uint16_t *values_ahead) {
    enum { SEGMENT = 2 * VLANES };
    vf even[4][4], odd[4][4];
    for (int r = 0; r < block_rows; ++r) {
        const vf factor = vf_set1(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < segments; ++x) {
            load_split(row + SEGMENT * x, full ? SEGMENT : width - SEGMENT * x, &even[r][x], &odd[r][x]);
            even[r][x] = vf_mul(factor, even[r][x]);
            odd[r][x] = vf_mul(factor, odd[r][x]);
        }
    }
    for (int c = 0; c < count; ++c) {
        vf weight[4];
        for (int r = 0; r < block_rows; ++r) weight[r] = vf_set1(weights[r * ATTN_DECODE_CHUNK + c]);
        const uint16_t *value = values + c * value_stride + e0;
        if (prefetch)
            prefetch_row_or_next(values, values_ahead, c, LOOKAHEAD, count, value_stride * 2,
                                 dim * 2, 0);
        for (int x = 0; x < segments; ++x) {
            vf value_even, value_odd;
            load_bf16_pairs(value + SEGMENT * x, full ? SEGMENT : width - SEGMENT * x, &value_even,
                            &value_odd);
            for (int r = 0; r < block_rows; ++r) {
                even[r][x] = vf_fmadd(weight[r], value_even, even[r][x]);
                odd[r][x] = vf_fmadd(weight[r], value_odd, odd[r][x]);
            }
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < segments; ++x)
            store_merged(row + SEGMENT * x, full ? SEGMENT : width - SEGMENT * x, even[r][x], odd[r][x]);
    }
}

/* Rows [0, block_rows) over all of dim in blocks of BF16_SEGMENTS(block_rows) segments; with
 * `prefetch` the first block requests the rows ahead. (Whole blocks and the request are
 * constants inside each block: the tail path costs more instructions per key.) */
V_INLINE void accumulate_rows_bf16(const int block_rows, int count, int dim, const float *weights,
                                   const float *rescale, const uint16_t *values,
                                   int64_t value_stride, float *accumulator, int prefetch,
                                   const uint16_t *values_ahead) {
    const int segments = BF16_SEGMENTS(block_rows), block = 2 * VLANES * segments;
    for (int e0 = 0; e0 < dim; e0 += block) {
        const int first = prefetch && e0 == 0;
        if (dim - e0 >= block && first)
            accumulate_block_bf16(block_rows, segments, 1, 1, count, e0, block, dim, weights,
                                  rescale, values, value_stride, accumulator, values_ahead);
        else if (dim - e0 >= block)
            accumulate_block_bf16(block_rows, segments, 1, 0, count, e0, block, dim, weights,
                                  rescale, values, value_stride, accumulator, values_ahead);
        else if (first)
            accumulate_block_bf16(block_rows, segments, 0, 1, count, e0, dim - e0, dim, weights,
                                  rescale, values, value_stride, accumulator, values_ahead);
        else
            accumulate_block_bf16(block_rows, segments, 0, 0, count, e0, dim - e0, dim, weights,
                                  rescale, values, value_stride, accumulator, values_ahead);
    }
}

/* accumulate_chunk for bfloat16 values: blocks of 4 rows, then the remaining 3, 2 or 1; the
 * first block of the chunk requests the rows ahead. */
static void accumulate_chunk_bf16(int rows, int count, int dim, const float *weights,
                                  const float *rescale, const uint16_t *values,
                                  int64_t value_stride, float *accumulator,
                                  const uint16_t *values_ahead) {
    const int prefetch = rows >= PREFETCH_ROWS;
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4, first = prefetch && r0 == 0;
        const float *block_weights = weights + r0 * ATTN_DECODE_CHUNK;
        float *block = accumulator + (int64_t)r0 * dim;
        if (block_rows == 4)
            accumulate_rows_bf16(4, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
        else if (block_rows == 3)
            accumulate_rows_bf16(3, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
        else if (block_rows == 2)
            accumulate_rows_bf16(2, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
        else
            accumulate_rows_bf16(1, count, dim, block_weights, rescale + r0, values, value_stride,
                                 block, first, values_ahead);
    }
}
