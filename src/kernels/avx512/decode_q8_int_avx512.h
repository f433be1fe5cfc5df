/*
 * decode_q8_int_avx512.h — int8 KV decode in integers (quant.h "Q8 decode arithmetic"):
 * queries and weights rounded to int16, products with the stored int8 elements summed
 * exactly in int32 lanes, so the results equal attn_q8_score_exact / _accumulate_exact bit
 * for bit. Included twice by decode_q8_avx512.h: Q8I_VNNI 1 (functions marked
 * target("avx512vnni"): VPDPWSSD, one instruction per 32 products) and 0 (AVX512-BW: VPMADDWD + VPADDD).
 * Q8I(name) gives the variant's names.
 *
 * Scores: pairs of dimensions (2d, 2d + 1) are the int16 pair of a 32-bit lane on both sides
 * (queries rounded once per task by attn_q8_prepare_queries, keys sign-extended byte -> word,
 * one instruction per 32),
 * blocks of 4 rows x 4 keys (2 x 8, 1 x 16) reduced by the transpose tree in integers.
 * Values: pairs of keys (c, c + 1): the words of rows c and c + 1 interleaved (unpack) so
 * that lane e holds (v[c][e'], v[c + 1][e']) against the broadcast weight pair (w[c],
 * w[c + 1]); the unpack permutes dimensions inside 32-dimension blocks, undone once per
 * chunk when the int32 sums are added to the float accumulator. An odd last key pairs with
 * itself at weight 0 (nothing is read past the chunk).
 */

#if Q8I_VNNI
#define Q8I(name) name##_vnni
#define Q8I_TARGET ATTN_TARGET("avx512vnni")
Q8I_TARGET V_INLINE __m512i Q8I(dot_pairs)(__m512i sum, __m512i a, __m512i b) {
    return _mm512_dpwssd_epi32(sum, a, b);
}
#else
#define Q8I(name) name##_bw
#define Q8I_TARGET
Q8I_TARGET V_INLINE __m512i Q8I(dot_pairs)(__m512i sum, __m512i a, __m512i b) {
    return _mm512_add_epi32(sum, _mm512_madd_epi16(a, b));
}
#endif

/* 32 int8 elements source[0 .. 32) (past `elements`: 0) as 32 int16 words. */
Q8I_TARGET V_INLINE __m512i Q8I(load_words)(const int8_t *source, __mmask32 elements) {
    return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(elements, source));
}

/* Lane r * block_keys + k = sum_d q16[r][d] * key_k[d] (int32, exact). */
Q8I_TARGET V_INLINE __m512i Q8I(score_block)(const int block_rows, const int block_keys, int dim,
                                  const int16_t *const *row, const int8_t *const *key) {
    __m512i sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_si512();
    for (int d = 0; d < dim; d += 32) {
        const __mmask32 elements = element_mask(dim - d);
        __m512i query[4];
        for (int r = 0; r < block_rows; ++r) query[r] = _mm512_loadu_si512(row[r] + d);
        for (int k = 0; k < block_keys; ++k) {
            const __m512i key_words = Q8I(load_words)(key[k] + d, elements);
            for (int r = 0; r < block_rows; ++r)
                sums[r * block_keys + k] = Q8I(dot_pairs)(sums[r * block_keys + k], query[r], key_words);
        }
    }
    return transpose_reduce_i32(sums);
}

Q8I_TARGET static void Q8I(score_chunk)(int rows, int count, int dim, const void *prepared,
                             const int8_t *keys, int64_t key_stride, const float *row_scales,
                             float factor, float *scores, const attn_rows_ahead *ahead,
                             const int8_t *keys_ahead) {
    float query_scale[4];
    float key_factors[ATTN_DECODE_CHUNK + 4] = {0}; /* factor * row scale of each key */
    for (int c = 0; c < count; ++c)
        key_factors[c] = row_scales != NULL ? factor * row_scales[c] : factor;
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    for (int r0 = 0; r0 < rows; r0 += block_rows) {
        const int16_t *row[4];
        for (int r = 0; r < block_rows; ++r) {
            const int source = r0 + r < rows ? r0 + r : rows - 1;
            query_scale[r] = attn_q8_query_scales(prepared)[source];
            row[r] = attn_q8_query_row(prepared, rows, dim, source);
        }
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const int8_t *key[16];
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0 && rows >= Q8_PREFETCH_ROWS) {
                /* (the block's rows ahead from its first one's: one test per block) */
                const char *ahead_row =
                    row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
                for (int k = 0; ahead_row != NULL && k < block_keys; ++k)
                    prefetch_rows(ahead_row, k, 1, key_stride, dim, 0);
            }
            if (r0 == 0 && ahead != NULL) /* registry.h: the chunk's values */
                for (int k = 0; k < block_keys && c0 + k < count; ++k) prefetch_row_ahead(ahead, c0 + k);
            if (block_rows == 4) { /* scores = (key factor * query scale) * sum, 16 at once */
                const __m512 sums = _mm512_cvtepi32_ps(Q8I(score_block)(4, 4, dim, row, key));
                const __m512 scale = _mm512_mul_ps(
                    _mm512_broadcast_f32x4(_mm_loadu_ps(key_factors + c0)),
                    _mm512_setr_ps(query_scale[0], query_scale[0], query_scale[0], query_scale[0],
                                   query_scale[1], query_scale[1], query_scale[1], query_scale[1],
                                   query_scale[2], query_scale[2], query_scale[2], query_scale[2],
                                   query_scale[3], query_scale[3], query_scale[3], query_scale[3]));
                const __m512 result = _mm512_mul_ps(scale, sums);
                const __mmask8 keys_left = (__mmask8)vmask_first(count - c0);
                float *target = scores + r0 * ATTN_DECODE_CHUNK + c0;
                const int rows_left = rows - r0;
                _mm_mask_storeu_ps(target, keys_left, _mm512_extractf32x4_ps(result, 0));
                if (rows_left > 1)
                    _mm_mask_storeu_ps(target + ATTN_DECODE_CHUNK, keys_left,
                                       _mm512_extractf32x4_ps(result, 1));
                if (rows_left > 2)
                    _mm_mask_storeu_ps(target + 2 * ATTN_DECODE_CHUNK, keys_left,
                                       _mm512_extractf32x4_ps(result, 2));
                if (rows_left > 3)
                    _mm_mask_storeu_ps(target + 3 * ATTN_DECODE_CHUNK, keys_left,
                                       _mm512_extractf32x4_ps(result, 3));
                continue;
            }
            int32_t out[16] __attribute__((aligned(64)));
            _mm512_store_si512(out, block_rows == 2 ? Q8I(score_block)(2, 8, dim, row, key)
                                                    : Q8I(score_block)(1, 16, dim, row, key));
            for (int k = 0; k < block_keys && c0 + k < count; ++k) {
                const int c = c0 + k;
                for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c] =
                        (key_factors[c] * query_scale[r]) * (float)out[r * block_keys + k];
            }
        }
    }
}

/* Rows [0, block_rows) (1 to 3; 4 rows take accumulate_block4) of the value accumulation
 * over columns [e0, e0 + width), width <= 32 * segments; w16[r][c] int16 weights (c padded
 * to even with 0). */
Q8I_TARGET V_INLINE void Q8I(accumulate_block)(const int block_rows, const int segments, int count, int e0,
                                    int width, int dim, const int16_t *w16, const float *scale,
                                    const float *rescale, const int8_t *values,
                                    int64_t value_stride, float *accumulator, int prefetch,
                                    const int8_t *values_ahead) {
    __mmask32 elements[2];
    for (int x = 0; x < segments; ++x) elements[x] = element_mask(width - 32 * x);
    __m512i low[4][2], high[4][2];
    for (int r = 0; r < block_rows; ++r)
        for (int x = 0; x < segments; ++x)
            low[r][x] = high[r][x] = _mm512_setzero_si512();
    for (int c = 0; c < count; c += 2) {
        const int8_t *second;
        const int8_t *first = pair_rows(values, c, count, e0, value_stride, dim, prefetch,
                                       values_ahead, &second);
        __m512i weight[4];
        for (int r = 0; r < block_rows; ++r) {
            int32_t pair;
            memcpy(&pair, w16 + r * ATTN_Q8_WEIGHT_STRIDE + c, sizeof pair);
            weight[r] = _mm512_set1_epi32(pair);
        }
        for (int x = 0; x < segments; ++x) {
            const __m512i a = Q8I(load_words)(first + 32 * x, elements[x]);
            const __m512i b = Q8I(load_words)(second + 32 * x, elements[x]);
            const __m512i pairs_low = _mm512_unpacklo_epi16(a, b);
            const __m512i pairs_high = _mm512_unpackhi_epi16(a, b);
            for (int r = 0; r < block_rows; ++r) {
                low[r][x] = Q8I(dot_pairs)(low[r][x], pairs_low, weight[r]);
                high[r][x] = Q8I(dot_pairs)(high[r][x], pairs_high, weight[r]);
            }
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        const __m512 weight_scale = _mm512_set1_ps(scale[r]), factor = _mm512_set1_ps(rescale[r]);
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < segments; ++x)
            add_unpacked_sums(row + 32 * x, width - 32 * x, low[r][x], high[r][x], weight_scale,
                              factor);
    }
}

/* One 32-column segment X of accumulate_block4's key pair: the two rows' words interleaved,
 * then 2 x 4 products into the named sums of segment X. */
#define Q8I_BLOCK4_SEGMENT(X, ELEMENTS)                                                    \
    do {                                                                                  \
        const __m512i a = Q8I(load_words)(first + 32 * X, ELEMENTS);                      \
        const __m512i b = Q8I(load_words)(second + 32 * X, ELEMENTS);                     \
        const __m512i pairs_low = _mm512_unpacklo_epi16(a, b);                            \
        const __m512i pairs_high = _mm512_unpackhi_epi16(a, b);                           \
        low_0##X = Q8I(dot_pairs)(low_0##X, pairs_low, weight0);                          \
        high_0##X = Q8I(dot_pairs)(high_0##X, pairs_high, weight0);                       \
        low_1##X = Q8I(dot_pairs)(low_1##X, pairs_low, weight1);                          \
        high_1##X = Q8I(dot_pairs)(high_1##X, pairs_high, weight1);                       \
        low_2##X = Q8I(dot_pairs)(low_2##X, pairs_low, weight2);                          \
        high_2##X = Q8I(dot_pairs)(high_2##X, pairs_high, weight2);                       \
        low_3##X = Q8I(dot_pairs)(low_3##X, pairs_low, weight3);                          \
        high_3##X = Q8I(dot_pairs)(high_3##X, pairs_high, weight3);                       \
    } while (0)

/* accumulate_block for 4 rows over 64 columns (2 segments), the common GQA group: its 16
 * sums in named registers. (With accumulate_block's arrays GCC 12 keeps the sums in
 * registers but also stores all 16 to the stack on every key pair.) */
Q8I_TARGET static void Q8I(accumulate_block4)(int count, int e0, int width, int dim,
                                              const int16_t *w16, const float *scale,
                                              const float *rescale, const int8_t *values,
                                              int64_t value_stride, float *accumulator,
                                              int prefetch, const int8_t *values_ahead) {
    const __mmask32 elements0 = element_mask(width), elements1 = element_mask(width - 32);
    /* low_rx / high_rx: row r, segment x (accumulate_block's low[r][x], high[r][x]) */
    __m512i low_00 = _mm512_setzero_si512(), low_01 = low_00, low_10 = low_00, low_11 = low_00,
            low_20 = low_00, low_21 = low_00, low_30 = low_00, low_31 = low_00;
    __m512i high_00 = low_00, high_01 = low_00, high_10 = low_00, high_11 = low_00,
            high_20 = low_00, high_21 = low_00, high_30 = low_00, high_31 = low_00;
    for (int c = 0; c < count; c += 2) {
        const int8_t *second;
        const int8_t *first = pair_rows(values, c, count, e0, value_stride, dim, prefetch,
                                       values_ahead, &second);
        int32_t pair[4];
        for (int r = 0; r < 4; ++r) memcpy(&pair[r], w16 + r * ATTN_Q8_WEIGHT_STRIDE + c, sizeof pair[r]);
        const __m512i weight0 = _mm512_set1_epi32(pair[0]), weight1 = _mm512_set1_epi32(pair[1]);
        const __m512i weight2 = _mm512_set1_epi32(pair[2]), weight3 = _mm512_set1_epi32(pair[3]);
        Q8I_BLOCK4_SEGMENT(0, elements0);
        Q8I_BLOCK4_SEGMENT(1, elements1);
    }
    const __m512i low[4][2] = {{low_00, low_01}, {low_10, low_11}, {low_20, low_21}, {low_30, low_31}};
    const __m512i high[4][2] = {{high_00, high_01}, {high_10, high_11}, {high_20, high_21},
                                {high_30, high_31}};
    for (int r = 0; r < 4; ++r) {
        const __m512 weight_scale = _mm512_set1_ps(scale[r]), factor = _mm512_set1_ps(rescale[r]);
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < 2; ++x)
            add_unpacked_sums(row + 32 * x, width - 32 * x, low[r][x], high[r][x], weight_scale,
                              factor);
    }
}

#undef Q8I_BLOCK4_SEGMENT

Q8I_TARGET static void Q8I(accumulate_chunk)(int rows, int count, int dim, const float *weights,
                                  const float *rescale, const int8_t *values,
                                  int64_t value_stride, const float *row_scales, float factor,
                                  float *accumulator, const int8_t *values_ahead) {
    const int prefetch = rows >= Q8_PREFETCH_ROWS;
    int16_t w16[4 * ATTN_Q8_WEIGHT_STRIDE] __attribute__((aligned(64)));
    float scale[4];
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4;
        pack_weights_i16(block_rows, count, weights + r0 * ATTN_DECODE_CHUNK, row_scales, factor,
                         w16, scale);
        const int segments = 2;
        for (int e0 = 0; e0 < dim; e0 += 32 * segments) {
            const int width = dim - e0 < 32 * segments ? dim - e0 : 32 * segments;
            if (block_rows == 4)
                Q8I(accumulate_block4)(count, e0, width, dim, w16, scale, rescale + r0, values,
                                       value_stride, accumulator + (int64_t)r0 * dim,
                                       prefetch && r0 == 0 && e0 == 0, values_ahead);
            else if (block_rows == 3)
                Q8I(accumulate_block)(3, 2, count, e0, width, dim, w16, scale, rescale + r0,
                                      values, value_stride, accumulator + (int64_t)r0 * dim,
                                      prefetch && r0 == 0 && e0 == 0, values_ahead);
            else if (block_rows == 2)
                Q8I(accumulate_block)(2, 2, count, e0, width, dim, w16, scale, rescale + r0,
                                      values, value_stride, accumulator + (int64_t)r0 * dim,
                                      prefetch && r0 == 0 && e0 == 0, values_ahead);
            else
                Q8I(accumulate_block)(1, 2, count, e0, width, dim, w16, scale, rescale + r0,
                                      values, value_stride, accumulator + (int64_t)r0 * dim,
                                      prefetch && r0 == 0 && e0 == 0, values_ahead);
        }
    }
}

#undef Q8I
#undef Q8I_TARGET
