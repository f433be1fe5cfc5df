/*
 * decode_q8_avx512.h — the AVX-512 decode kernels for 8-bit KV storage (registry.h:
 * dequantize_rows, score_chunk_q8, accumulate_chunk_q8; formats in kernels/quant.h). Part
 * of decode_avx512.c's translation unit (included there, after decode_body.h, whose
 * transpose_reduce, prefetch_row and LOOKAHEAD it uses).
 *
 * Widening 16 stored bytes to 16 floats, in registers:
 *   Q8:       vpmovsxbd + vcvtdq2ps (exact);
 *   FP8 E5M2: zero-extend to 16 bits, shift left 8 = the IEEE half with the same value,
 *             vcvtph2ps (exact);
 *   FP8 E4M3: sign-extend to 16 bits, shift left 7, clear bit 14: the half whose value is
 *             the E4M3 value / 256 (subnormals included), vcvtph2ps; the 256 is folded into
 *             the per-key scale (a power of two: the same rounding as the generic kernels).
 * The per-key scale multiplies each dot product once (scores) and each weight once
 * (values), never an element. Blocks as in decode_body.h: scores in 16-dot blocks reduced
 * by one transpose-and-add tree (4 rows x 4 keys dimension-major, 2 x 8 and 1 x 16 key
 * after key); values in blocks whose accumulators fit the registers (4 rows x 64 floats,
 * 3, 2, 1 rows x 128), each stored byte widened once per row block. The format is a
 * compile-time constant inside each block (the switch is outside the loops).
 */

/* Prefetch distance in rows for 1-byte rows (LOOKAHEAD is tuned for 2- and 4-byte ones). */
#ifndef Q8_LOOKAHEAD
#define Q8_LOOKAHEAD 64
#endif

/* The scale folded into a key's factor for `format` (see above). */
static inline float q8_format_factor(attn_dtype format) {
    return format == ATTN_DTYPE_FP8_E4M3 ? ATTN_FP8_E4M3_HALF_FACTOR : 1.0f;
}

/* 16 stored elements source[0 .. 16) (lanes outside `lanes` read as 0) as floats (E4M3:
 * value / 256). */
V_INLINE __m512 load_q8(const attn_dtype format, const uint8_t *source, __mmask16 lanes) {
    const __m128i bytes = _mm_maskz_loadu_epi8(lanes, source);
    if (format == ATTN_DTYPE_Q8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
    if (format == ATTN_DTYPE_FP8_E5M2)
        return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8));
    const __m256i half = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7);
    return _mm512_cvtph_ps(_mm256_and_si256(half, _mm256_set1_epi16((short)0xbfff)));
}

static void dequantize_rows_as(const attn_dtype format, int count, int dim,
                               const uint8_t *source, int64_t stride, const float *row_scales,
                               float factor, float *target) {
    for (int c = 0; c < count; ++c) {
        const float scale = row_scales != NULL ? factor * row_scales[c] : factor;
        const __m512 scale_vector = _mm512_set1_ps(scale * q8_format_factor(format));
        for (int e = 0; e < dim; e += 16) {
            const __mmask16 lanes = vmask_first(dim - e);
            _mm512_mask_storeu_ps(target + (int64_t)c * dim + e, lanes,
                                  _mm512_mul_ps(scale_vector,
                                                load_q8(format, source + c * stride + e, lanes)));
        }
    }
}

static void avx512_dequantize_rows(attn_dtype dtype, int count, int dim, const uint8_t *source,
                                   int64_t stride, const float *row_scales, float factor,
                                   float *target) {
    if (dtype == ATTN_DTYPE_Q8)
        dequantize_rows_as(ATTN_DTYPE_Q8, count, dim, source, stride, row_scales, factor, target);
    else if (dtype == ATTN_DTYPE_FP8_E4M3)
        dequantize_rows_as(ATTN_DTYPE_FP8_E4M3, count, dim, source, stride, row_scales, factor,
                           target);
    else
        dequantize_rows_as(ATTN_DTYPE_FP8_E5M2, count, dim, source, stride, row_scales, factor,
                           target);
}

/* As score_block (decode_body.h) for 8-bit keys: out[r * block_keys + k] = row[r] . key[k]
 * (unscaled; E4M3 / 256). */
V_INLINE void score_block_q8(const attn_dtype format, const int block_rows, const int block_keys,
                             const int key_major, int dim, const float *const *row,
                             const uint8_t *const *key, float *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 16) {
                const __mmask16 lanes = vmask_first(dim - d);
                const __m512 key_vector = load_q8(format, key[k] + d, lanes);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] = _mm512_fmadd_ps(
                        _mm512_maskz_loadu_ps(lanes, row[r] + d), key_vector, sums[r * block_keys + k]);
            }
    } else {
        for (int d = 0; d < dim; d += 16) {
            const __mmask16 lanes = vmask_first(dim - d);
            __m512 query[4];
            for (int r = 0; r < block_rows; ++r) query[r] = _mm512_maskz_loadu_ps(lanes, row[r] + d);
            for (int k = 0; k < block_keys; ++k) {
                const __m512 key_vector = load_q8(format, key[k] + d, lanes);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] =
                        _mm512_fmadd_ps(query[r], key_vector, sums[r * block_keys + k]);
            }
        }
    }
    _mm512_storeu_ps(out, transpose_reduce(sums));
}

static void score_chunk_q8_as(const attn_dtype format, int rows, int count, int dim,
                              const float *queries, const uint8_t *keys, int64_t key_stride,
                              const float *row_scales, float factor, float *scores) {
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = 16 / block_rows;
    const float format_factor = q8_format_factor(format);
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const float *row[4];
            const uint8_t *key[16];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (r0 == 0 && rows >= PREFETCH_ROWS)
                for (int k = 0; k < block_keys; ++k)
                    prefetch_row(keys, c0 + k + Q8_LOOKAHEAD, key_stride, 1, (size_t)dim);
            float out[16];
            if (block_rows == 4) score_block_q8(format, 4, 4, 0, dim, row, key, out);
            else if (block_rows == 2) score_block_q8(format, 2, 8, 1, dim, row, key, out);
            else score_block_q8(format, 1, 16, 1, dim, row, key, out);
            for (int k = 0; k < block_keys && c0 + k < count; ++k) {
                const int c = c0 + k;
                const float scale =
                    (row_scales != NULL ? factor * row_scales[c] : factor) * format_factor;
                for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c] = scale * out[r * block_keys + k];
            }
        }
}

static void avx512_score_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                  const float *queries, const uint8_t *keys, int64_t key_stride,
                                  const float *row_scales, float factor, float *scores) {
    if (dtype == ATTN_DTYPE_Q8)
        score_chunk_q8_as(ATTN_DTYPE_Q8, rows, count, dim, queries, keys, key_stride, row_scales,
                          factor, scores);
    else if (dtype == ATTN_DTYPE_FP8_E4M3)
        score_chunk_q8_as(ATTN_DTYPE_FP8_E4M3, rows, count, dim, queries, keys, key_stride,
                          row_scales, factor, scores);
    else
        score_chunk_q8_as(ATTN_DTYPE_FP8_E5M2, rows, count, dim, queries, keys, key_stride,
                          row_scales, factor, scores);
}

/* Accumulator rows [block_rows][dim], columns [e0, e0 + width), width <= 16 * vectors:
 * acc = rescale * acc + sum_c weight[r][c] * value_c, 8-bit values, the weights already
 * multiplied by their key's factor (scale_weights). */
V_INLINE void accumulate_block_q8(const attn_dtype format, const int block_rows,
                                  const int vectors, int count, int e0, int width, int dim,
                                  const float *weights, const float *rescale,
                                  const uint8_t *values, int64_t value_stride,
                                  float *accumulator, int prefetch) {
    __mmask16 masks[8];
    for (int x = 0; x < vectors; ++x) masks[x] = vmask_first(width - 16 * x);
    __m512 sums[4][8];
    for (int r = 0; r < block_rows; ++r) {
        const __m512 scale = _mm512_set1_ps(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x)
            sums[r][x] = _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(masks[x], row + 16 * x));
    }
    for (int c = 0; c < count; ++c) {
        /* weights arrive scaled (accumulate_chunk_q8_as): a broadcast from memory */
        __m512 weight[4];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = _mm512_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
        const uint8_t *value = values + c * value_stride + e0;
        if (prefetch) prefetch_row(values, c + Q8_LOOKAHEAD, value_stride, 1, (size_t)dim);
        for (int x = 0; x < vectors; ++x) {
            const __m512 value_vector = load_q8(format, value + 16 * x, masks[x]);
            for (int r = 0; r < block_rows; ++r)
                sums[r][x] = _mm512_fmadd_ps(weight[r], value_vector, sums[r][x]);
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x)
            _mm512_mask_storeu_ps(row + 16 * x, masks[x], sums[r][x]);
    }
}

/* Rows [0, block_rows) over all of dim in column blocks of 16 * vectors floats. */
V_INLINE void accumulate_rows_q8(const attn_dtype format, const int block_rows,
                                 const int vectors, int count, int dim, const float *weights,
                                 const float *rescale, const uint8_t *values,
                                 int64_t value_stride, float *accumulator, int prefetch) {
    for (int e0 = 0; e0 < dim; e0 += 16 * vectors) {
        const int width = dim - e0 < 16 * vectors ? dim - e0 : 16 * vectors;
        accumulate_block_q8(format, block_rows, vectors, count, e0, width, dim, weights, rescale,
                            values, value_stride, accumulator, prefetch && e0 == 0);
    }
}

/* scaled[r][c] = weights[r][c] * (factor * row_scales[c] * format factor), r < rows (<= 4):
 * the per-key scale applied once per weight, vectorised. */
static void scale_weights(const attn_dtype format, int rows, int count, const float *weights,
                          const float *row_scales, float factor, float *scaled) {
    const float key_factor = factor * q8_format_factor(format);
    for (int c0 = 0; c0 < count; c0 += 16) {
        const __mmask16 lanes = vmask_first(count - c0);
        /* (factor * row_scale) first, then the power of two: as the generic kernel rounds */
        const __m512 scale =
            row_scales != NULL
                ? _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(factor),
                                              _mm512_maskz_loadu_ps(lanes, row_scales + c0)),
                                _mm512_set1_ps(q8_format_factor(format)))
                : _mm512_set1_ps(key_factor);
        for (int r = 0; r < rows; ++r)
            _mm512_mask_storeu_ps(
                scaled + r * ATTN_DECODE_CHUNK + c0, lanes,
                _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, weights + r * ATTN_DECODE_CHUNK + c0),
                              scale));
    }
}

static void accumulate_chunk_q8_as(const attn_dtype format, int rows, int count, int dim,
                                   const float *weights, const float *rescale,
                                   const uint8_t *values, int64_t value_stride,
                                   const float *row_scales, float factor, float *accumulator) {
    const int prefetch = rows >= PREFETCH_ROWS;
    float scaled[4 * ATTN_DECODE_CHUNK];
    int r = 0;
    for (; r + 4 <= rows; r += 4) {
        scale_weights(format, 4, count, weights + r * ATTN_DECODE_CHUNK, row_scales, factor,
                      scaled);
        accumulate_rows_q8(format, 4, 4, count, dim, scaled, rescale + r, values, value_stride,
                           accumulator + (int64_t)r * dim, prefetch && r == 0);
    }
    scale_weights(format, rows - r, count, weights + r * ATTN_DECODE_CHUNK, row_scales, factor,
                  scaled);
    const float *tail_weights = scaled;
    float *tail = accumulator + (int64_t)r * dim;
    const int tail_prefetch = prefetch && r == 0;
    if (rows - r == 3)
        accumulate_rows_q8(format, 3, 8, count, dim, tail_weights, rescale + r, values,
                           value_stride, tail, tail_prefetch);
    else if (rows - r == 2)
        accumulate_rows_q8(format, 2, 8, count, dim, tail_weights, rescale + r, values,
                           value_stride, tail, tail_prefetch);
    else if (rows - r == 1)
        accumulate_rows_q8(format, 1, 8, count, dim, tail_weights, rescale + r, values,
                           value_stride, tail, tail_prefetch);
}

static void avx512_accumulate_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                       const float *weights, const float *rescale,
                                       const uint8_t *values, int64_t value_stride,
                                       const float *row_scales, float factor,
                                       float *accumulator) {
    if (dtype == ATTN_DTYPE_Q8)
        accumulate_chunk_q8_as(ATTN_DTYPE_Q8, rows, count, dim, weights, rescale, values,
                               value_stride, row_scales, factor, accumulator);
    else if (dtype == ATTN_DTYPE_FP8_E4M3)
        accumulate_chunk_q8_as(ATTN_DTYPE_FP8_E4M3, rows, count, dim, weights, rescale, values,
                               value_stride, row_scales, factor, accumulator);
    else
        accumulate_chunk_q8_as(ATTN_DTYPE_FP8_E5M2, rows, count, dim, weights, rescale, values,
                               value_stride, row_scales, factor, accumulator);
}
