/*
 * decode_fp8_avx512.h — the AVX-512 fp8 decode kernels (registry.h score_chunk_q8 and
 * accumulate_chunk_q8 for FP8 E4M3 / E5M2; the formats and the widening in
 * decode_q8_avx512.h's opening comment): the fp8 elements widened to floats in registers,
 * products and sums in float32 FMAs. Included twice by decode_q8_avx512.h: FP8_VBMI 0, and
 * FP8_VBMI 1 (functions marked target("avx512vbmi")), where E5M2's byte-to-half step is one
 * VPERMB into the high bytes instead of a zero extension and a shift (E4M3 has no shorter
 * form). The halves, hence the bits, are the same.
 * FP8(name) gives the variant's names.
 */

#if FP8_VBMI
#define FP8(name) name##_fp8_vbmi
#define FP8_TARGET ATTN_TARGET("avx512vbmi")
#else
#define FP8(name) name##_fp8
#define FP8_TARGET
#endif

/* 32 stored fp8 elements source[0 .. 32) (lanes outside `lanes` read as 0) as floats in
 * out[0] (elements 0-15) and out[1] (16-31) (E4M3: value / 256): load_q8's widening on 32
 * elements at once, the byte-to-word step and the half's bit operations on whole 512-bit
 * registers, then one VCVTPH2PS per 16. E4M3 4 instructions per 16 elements instead of 5
 * (E5M2 3.5 instead of 4). */
FP8_TARGET V_INLINE void FP8(load_pair)(const attn_dtype format, const uint8_t *source,
                                        __mmask32 lanes, __m512 out[2]) {
    const __m256i bytes = _mm256_maskz_loadu_epi8(lanes, source);
#if FP8_VBMI /* E5M2: byte i into the high byte of word i, the low byte zeroed, one VPERMB */
    const __m512i high_bytes = _mm512_set_epi64(
        0x1f001e001d001c00, 0x1b001a0019001800, 0x1700160015001400, 0x1300120011001000,
        0x0f000e000d000c00, 0x0b000a0009000800, 0x0700060005000400, 0x0300020001000000);
    const __m512i e5m2 = _mm512_maskz_permutexvar_epi8(
        (__mmask64)0xaaaaaaaaaaaaaaaaull, high_bytes, _mm512_castsi256_si512(bytes));
#else
    const __m512i e5m2 = _mm512_slli_epi16(_mm512_cvtepu8_epi16(bytes), 8);
#endif
    const __m512i half =
        format == ATTN_DTYPE_FP8_E5M2
            ? e5m2
            : _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(bytes), 7),
                               _mm512_set1_epi16((short)0xbfff));
    out[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(half));
    out[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(half, 1));
}

/* As score_block (decode_body.h) for fp8 keys: out[r * block_keys + k] = row[r] . key[k]
 * (unscaled; E4M3 / 256), 32 dimensions at a time (load_pair; each sum takes its
 * products in dimension order, 16 lanes wide). full (a constant): dim is a multiple of 32,
 * so every load is whole (unmasked, and the byte loads fold into the widening). */
FP8_TARGET V_INLINE void FP8(score_block)(const attn_dtype format, const int block_rows,
                                          const int block_keys, const int key_major, const int full,
                                          int dim, const float *const *row,
                                          const uint8_t *const *key, float *out) {
    __m512 sums[16];
    for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += 32) {
                const __mmask16 low = full ? (__mmask16)0xffff : vmask_first(dim - d);
                const __mmask16 high = full ? (__mmask16)0xffff : vmask_first(dim - d - 16);
                __m512 key_vectors[2];
                FP8(load_pair)(format, key[k] + d,
                               full ? (__mmask32)0xffffffffu : q8_mask32(dim - d), key_vectors);
                for (int r = 0; r < block_rows; ++r) {
                    __m512 *sum = &sums[r * block_keys + k];
                    *sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(low, row[r] + d), key_vectors[0],
                                           *sum);
                    *sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(high, row[r] + d + 16),
                                           key_vectors[1], *sum);
                }
            }
    } else {
        for (int d = 0; d < dim; d += 32) {
            const __mmask16 low = full ? (__mmask16)0xffff : vmask_first(dim - d);
            const __mmask16 high = full ? (__mmask16)0xffff : vmask_first(dim - d - 16);
            __m512 query[4][2];
            for (int r = 0; r < block_rows; ++r) {
                query[r][0] = _mm512_maskz_loadu_ps(low, row[r] + d);
                query[r][1] = _mm512_maskz_loadu_ps(high, row[r] + d + 16);
            }
            for (int k = 0; k < block_keys; ++k) {
                __m512 key_vectors[2];
                FP8(load_pair)(format, key[k] + d,
                               full ? (__mmask32)0xffffffffu : q8_mask32(dim - d), key_vectors);
                for (int r = 0; r < block_rows; ++r) {
                    __m512 *sum = &sums[r * block_keys + k];
                    *sum = _mm512_fmadd_ps(query[r][0], key_vectors[0], *sum);
                    *sum = _mm512_fmadd_ps(query[r][1], key_vectors[1], *sum);
                }
            }
        }
    }
    _mm512_storeu_ps(out, transpose_reduce(sums));
}

/* FP8(score_block)'s 4 x 4 blocks for four whole rows (queries [4][dim], dim a multiple of
 * 32) over the chunk, written out for the common GQA group: one key pointer and the stride
 * instead of a pointer table, the first products multiplied instead of added to zeroed
 * sums, the reduction stored straight to the rows. The decode loop waits on memory, and the
 * fewer instructions a block issues, the further ahead the core's window reaches; the sums
 * take the same products in the same order as FP8(score_block) (a zero sum may come out as
 * -0 instead of +0). requests: the chunk's values (`ahead`) and the keys Q8_LOOKAHEAD rows
 * further, as FP8(score_chunk) requests them for its first row block. */
/* One step of 32 dimensions [d, d + 32) of FP8(score_rows4): sums[4r + k] += row r . key k
 * (first: the sums start from these products). */
FP8_TARGET V_INLINE void FP8(score_step4)(const int first, const attn_dtype format,
                                          const float *queries, int dim, int d,
                                          const uint8_t *keys, const int64_t strides[4],
                                          __m512 sums[16]) {
    __m512 low[4], high[4];
    for (int r = 0; r < 4; ++r) {
        low[r] = _mm512_loadu_ps(queries + (int64_t)r * dim + d);
        high[r] = _mm512_loadu_ps(queries + (int64_t)r * dim + d + 16);
    }
    for (int k = 0; k < 4; ++k) {
        __m512 key_vectors[2];
        FP8(load_pair)(format, keys + strides[k] + d, (__mmask32)0xffffffffu, key_vectors);
        for (int r = 0; r < 4; ++r) {
            __m512 *sum = &sums[r * 4 + k];
            *sum = first ? _mm512_mul_ps(low[r], key_vectors[0])
                         : _mm512_fmadd_ps(low[r], key_vectors[0], *sum);
            *sum = _mm512_fmadd_ps(high[r], key_vectors[1], *sum);
        }
    }
}

FP8_TARGET static void FP8(score_rows4)(const attn_dtype format, int count, int dim,
                                        const float *queries, const uint8_t *keys,
                                        int64_t key_stride, const float *row_scales, float factor,
                                        float *scores, const attn_rows_ahead *ahead,
                                        const uint8_t *keys_ahead, int requests) {
    const float format_factor = q8_format_factor(format);
    for (int c0 = 0; c0 < count; c0 += 4) {
        const int valid = count - c0 < 4 ? count - c0 : 4;
        const uint8_t *k0 = keys + c0 * key_stride; /* keys past count: the last one again */
        const int64_t s1 = valid > 1 ? key_stride : 0, s2 = valid > 2 ? 2 * key_stride : s1,
                      s3 = valid > 3 ? 3 * key_stride : s2;
        if (requests) {
            /* (the block's rows ahead from its first one's: one test per block, not per key) */
            const char *ahead_row =
                row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
            for (int k = 0; k < valid; ++k) {
                if (ahead != NULL) prefetch_row_ahead(ahead, c0 + k);
                if (ahead_row != NULL) prefetch_rows(ahead_row, k, 1, key_stride, dim, 1);
            }
        }
        const int64_t strides[4] = {0, s1, s2, s3};
        __m512 sums[16];
        FP8(score_step4)(1, format, queries, dim, 0, k0, strides, sums);
        for (int d = 32; d < dim; d += 32)
            FP8(score_step4)(0, format, queries, dim, d, k0, strides, sums);
        /* lane 4r + k: row r, key k */
        const __mmask8 lanes = (__mmask8)((1u << valid) - 1u);
        const __m128 key_factor =
            row_scales != NULL
                ? _mm_mul_ps(_mm_set1_ps(factor), _mm_maskz_loadu_ps(lanes, row_scales + c0))
                : _mm_set1_ps(factor);
        const __m512 out = _mm512_mul_ps(
            _mm512_broadcast_f32x4(_mm_mul_ps(key_factor, _mm_set1_ps(format_factor))),
            transpose_reduce(sums));
        _mm_mask_storeu_ps(scores + c0, lanes, _mm512_castps512_ps128(out));
        _mm_mask_storeu_ps(scores + ATTN_DECODE_CHUNK + c0, lanes, _mm512_extractf32x4_ps(out, 1));
        _mm_mask_storeu_ps(scores + 2 * ATTN_DECODE_CHUNK + c0, lanes,
                           _mm512_extractf32x4_ps(out, 2));
        _mm_mask_storeu_ps(scores + 3 * ATTN_DECODE_CHUNK + c0, lanes,
                           _mm512_extractf32x4_ps(out, 3));
    }
}

FP8_TARGET static void FP8(score_chunk)(const attn_dtype format, int rows, int count, int dim,
                                        const float *queries, const uint8_t *keys,
                                        int64_t key_stride, const float *row_scales, float factor,
                                        float *scores, const attn_rows_ahead *ahead,
                                        const uint8_t *keys_ahead) {
    if (rows % 4 == 0 && dim % 32 == 0) { /* whole 4-row blocks (GQA groups of 4, 8, ..) */
        for (int r0 = 0; r0 < rows; r0 += 4)
            FP8(score_rows4)(format, count, dim, queries + (int64_t)r0 * dim, keys, key_stride,
                             row_scales, factor, scores + r0 * ATTN_DECODE_CHUNK, ahead,
                             keys_ahead, r0 == 0 && rows >= Q8_PREFETCH_ROWS);
        return;
    }
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
            if (r0 == 0 && rows >= Q8_PREFETCH_ROWS) {
                /* (the block's rows ahead from its first one's, as score_rows4) */
                const char *ahead_row =
                row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
                for (int k = 0; k < block_keys; ++k) {
                    if (ahead != NULL && c0 + k < count) /* registry.h: the chunk's values */
                        prefetch_row_ahead(ahead, c0 + k);
                    if (ahead_row != NULL && block_rows == 4) /* (a group of >= 3 rows) */
                        prefetch_rows(ahead_row, k, 1, key_stride, dim, 1);
                    else if (ahead_row != NULL)
                        prefetch_rows(ahead_row, k, 1, key_stride, dim, 0);
                }
            }
            float out[16];
            const int full = dim % 32 == 0;
            if (block_rows == 4 && full) FP8(score_block)(format, 4, 4, 0, 1, dim, row, key, out);
            else if (block_rows == 4) FP8(score_block)(format, 4, 4, 0, 0, dim, row, key, out);
            else if (block_rows == 2 && full) FP8(score_block)(format, 2, 8, 1, 1, dim, row, key, out);
            else if (block_rows == 2) FP8(score_block)(format, 2, 8, 1, 0, dim, row, key, out);
            else if (full) FP8(score_block)(format, 1, 16, 1, 1, dim, row, key, out);
            else FP8(score_block)(format, 1, 16, 1, 0, dim, row, key, out);
            if (block_rows == 4) { /* lane 4r + k: row r, key k; the scalar rounding below */
                const int valid = count - c0 < 4 ? count - c0 : 4;
                const __mmask8 lanes = (__mmask8)((1u << valid) - 1u);
                const __m128 key_factor =
                    row_scales != NULL
                        ? _mm_mul_ps(_mm_set1_ps(factor), _mm_maskz_loadu_ps(lanes, row_scales + c0))
                        : _mm_set1_ps(factor);
                _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_mul_ps(
                                                        key_factor, _mm_set1_ps(format_factor))),
                                                    _mm512_loadu_ps(out)));
                for (int r = 0; r < 4 && r0 + r < rows; ++r)
                    _mm_mask_storeu_ps(scores + (r0 + r) * ATTN_DECODE_CHUNK + c0, lanes,
                                       _mm_loadu_ps(out + 4 * r));
                continue;
            }
            for (int k = 0; k < block_keys && c0 + k < count; ++k) {
                const int c = c0 + k;
                const float scale =
                    (row_scales != NULL ? factor * row_scales[c] : factor) * format_factor;
                for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c] = scale * out[r * block_keys + k];
            }
        }
}

/* Accumulator rows [block_rows][dim], columns [e0, e0 + width), width <= 16 * vectors:
 * acc = rescale * acc + sum_c weight[r][c] * value_c, fp8 values (32 at a time,
 * load_pair), the weights already multiplied by their key's factor (scale_weights). full
 * (a constant): width = 16 * vectors (unmasked loads). The score kernel requested the chunk's
 * values (registry.h score_chunk_q8, `ahead`); values_ahead (non-NULL only where the
 * hardware cannot follow the rows: token-major pages): the next chunk's rows, requested
 * value row by value row (row_ahead), as the int8 P · V does. */
FP8_TARGET V_INLINE void FP8(accumulate_block)(const attn_dtype format, const int block_rows,
                                               const int vectors, const int full, int count, int e0,
                                               int width, int dim, const float *weights,
                                               const float *rescale, const uint8_t *values,
                                               int64_t value_stride, float *accumulator,
                                               const uint8_t *values_ahead) {
    __mmask16 masks[8];
    for (int x = 0; x < vectors; ++x)
        masks[x] = full ? (__mmask16)0xffff : vmask_first(width - 16 * x);
    __m512 sums[4][8];
    for (int r = 0; r < block_rows; ++r) {
        const __m512 scale = _mm512_set1_ps(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x)
            sums[r][x] = _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(masks[x], row + 16 * x));
    }
    for (int c = 0; c < count; ++c) {
        /* weights arrive scaled (FP8(accumulate_chunk)): a broadcast from memory */
        __m512 weight[4];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = _mm512_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
        const uint8_t *value = values + c * value_stride + e0;
        if (values_ahead != NULL)
            prefetch_row_or_next(values, values_ahead, c, Q8_LOOKAHEAD, count, value_stride, dim, 0);
        for (int x = 0; x < vectors; x += 2) {
            __m512 value_vectors[2];
            FP8(load_pair)(format, value + 16 * x,
                          full ? (__mmask32)0xffffffffu : q8_mask32(width - 16 * x), value_vectors);
            for (int r = 0; r < block_rows; ++r) {
                sums[r][x] = _mm512_fmadd_ps(weight[r], value_vectors[0], sums[r][x]);
                sums[r][x + 1] = _mm512_fmadd_ps(weight[r], value_vectors[1], sums[r][x + 1]);
            }
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x)
            _mm512_mask_storeu_ps(row + 16 * x, masks[x], sums[r][x]);
    }
}

/* Rows [0, block_rows) over all of dim in column blocks of 16 * vectors floats. */
FP8_TARGET V_INLINE void FP8(accumulate_rows)(const attn_dtype format, const int block_rows,
                                              const int vectors, int count, int dim,
                                              const float *weights, const float *rescale,
                                              const uint8_t *values, int64_t value_stride,
                                              float *accumulator, const uint8_t *values_ahead) {
    for (int e0 = 0; e0 < dim; e0 += 16 * vectors) {
        const uint8_t *ahead = e0 == 0 ? values_ahead : NULL;
        const int width = dim - e0 < 16 * vectors ? dim - e0 : 16 * vectors;
        if (width == 16 * vectors)
            FP8(accumulate_block)(format, block_rows, vectors, 1, count, e0, width, dim, weights,
                                rescale, values, value_stride, accumulator, ahead);
        else
            FP8(accumulate_block)(format, block_rows, vectors, 0, count, e0, width, dim, weights,
                                rescale, values, value_stride, accumulator, ahead);
    }
}

FP8_TARGET static void FP8(accumulate_chunk)(const attn_dtype format, int rows, int count, int dim,
                                             const float *weights, const float *rescale,
                                             const uint8_t *values, int64_t value_stride,
                                             const float *row_scales, float factor,
                                             float *accumulator, const uint8_t *values_ahead) {
    float scaled[4 * ATTN_DECODE_CHUNK];
    int r = 0;
    for (; r + 4 <= rows; r += 4) {
        scale_weights(format, 4, count, weights + r * ATTN_DECODE_CHUNK, row_scales, factor,
                      scaled);
        FP8(accumulate_rows)(format, 4, 4, count, dim, scaled, rescale + r, values, value_stride,
                           accumulator + (int64_t)r * dim, r == 0 ? values_ahead : NULL);
    }
    scale_weights(format, rows - r, count, weights + r * ATTN_DECODE_CHUNK, row_scales, factor,
                  scaled);
    const float *tail_weights = scaled;
    float *tail = accumulator + (int64_t)r * dim;
    if (rows - r == 3)
        FP8(accumulate_rows)(format, 3, 8, count, dim, tail_weights, rescale + r, values,
                           value_stride, tail, r == 0 ? values_ahead : NULL);
    else if (rows - r == 2)
        FP8(accumulate_rows)(format, 2, 8, count, dim, tail_weights, rescale + r, values,
                           value_stride, tail, r == 0 ? values_ahead : NULL);
    else if (rows - r == 1)
        FP8(accumulate_rows)(format, 1, 8, count, dim, tail_weights, rescale + r, values,
                           value_stride, tail, r == 0 ? values_ahead : NULL);
}

#undef FP8
#undef FP8_TARGET
