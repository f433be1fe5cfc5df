/*
 * decode_fp8_body.h — the fp8 decode kernels (registry.h score_chunk_q8 and accumulate_chunk_q8
 * for FP8 E4M3 / E5M2) written once over vec.h and compiled at each width: the stored bytes
 * widened to floats in registers (E4M3 as value / 256, the 256 folded into the per-key scale),
 * products and sums in float32 FMAs, each sum in dimension order, so the two widths and the
 * generic kernel give the same bits (but for the order of the lanes' final sums). The per-key
 * scale multiplies each dot product once (scores) and each weight once (values), never an
 * element.
 *
 * Part of decode_avx2.c's and decode_avx512.c's translation units, after decode_body.h and the
 * width's 8-bit helpers (decode_q8_<isa>.h: q8_format_factor and, at 8 lanes, q8_load16 and
 * fp8_widen16). At 16 lanes it is included twice: FP8_VBMI 0, and FP8_VBMI 1 (functions marked
 * ATTN_TARGET("avx512vbmi")), where E5M2's byte-to-half step is one VPERMB into the high bytes
 * instead of a zero extension and a shift (the same halves); FP8(name) gives the variant's
 * names. At 8 lanes FP8_VBMI is 0.
 *
 * Blocks: scores in blocks of VLANES dot products reduced by one transpose-and-add tree (4
 * rows x VLANES / 4 keys dimension-major, 2 x VLANES / 2 and 1 x VLANES with each query vector
 * loaded once per step where the head dimension is whole); at 16 lanes whole groups of 4 rows
 * run a written-out 4 x 4 block (score_rows4). Values in blocks whose accumulators fit the
 * registers (FP8_VECTORS), each stored byte widened once per row block. The format is a
 * compile-time constant inside each block (the switch is outside the loops), and so is whether
 * every load is whole (head dimension a multiple of 2 * VLANES).
 * Requests ahead (software prefetch, 1-byte rows, decode_q8_<isa>.h "Q8_LOOKAHEAD"): the score
 * kernel requests each key's value row (`ahead`) as it scores the key, and the keys
 * Q8_LOOKAHEAD rows ahead, into L1 for blocks of 3-4 rows (whose widening and FMAs keep the core
 * busy long enough) and L2 otherwise; at 16 lanes the P · V requests the next chunk's rows
 * where the hardware cannot follow them (values_ahead, token-major pages).
 */

#if VLANES == 16 && FP8_VBMI
#define FP8(name) name##_fp8_vbmi
#define FP8_TARGET ATTN_TARGET("avx512vbmi")
#else
#define FP8(name) name##_fp8
#define FP8_TARGET
#endif

#ifndef ATTN_DECODE_FP8_BODY_SHARED
#define ATTN_DECODE_FP8_BODY_SHARED
/* Accumulator vectors a value block holds per row: 4 rows x 64 floats or 3, 2, 1 rows x 128
 * at 16 lanes (up to 16 of the 32 zmm registers), up to 4 rows x 16 floats at 8. */
#define FP8_VECTORS(block_rows) (VLANES == 16 ? ((block_rows) == 4 ? 4 : 8) : 2)

/* Whether the P · V requests values_ahead (token-major pages): at 16 lanes; at 8 it requests
 * nothing (the score kernel requested the chunk's values), as the int8 P · V. */
#define FP8_VALUE_REQUESTS (VLANES == 16)

/* The 2 * VLANES floats source[0 .. 2 VLANES) (past `valid`: 0, not read) as two vectors.
 * full (a constant): all of them valid. */
V_INLINE void load_floats_pair(const int full, const float *source, int valid, vf out[2]) {
    out[0] = full ? vf_loadu(source) : load_first(source, valid);
    out[1] = full ? vf_loadu(source + VLANES) : load_first(source + VLANES, valid - VLANES);
}

/* key_factors[c] = (factor * row_scales[c]) * format factor for c < count (the rounding of
 * the generic kernel), 0 up to count + VLANES (a block's lanes past count are dropped). */
static void fp8_key_factors(const attn_dtype format, int count, const float *row_scales,
                            float factor, float *key_factors) {
    const float format_factor = q8_format_factor(format);
    if (row_scales != NULL)
        for (int c = 0; c < count; ++c) key_factors[c] = factor * row_scales[c] * format_factor;
    else
        for (int c = 0; c < count; ++c) key_factors[c] = factor * format_factor;
    for (int c = count; c < count + VLANES; ++c) key_factors[c] = 0.0f;
}

/* scores[r * ATTN_DECODE_CHUNK + k] = key_factors[k] * lane (r * block_keys + k) of sums, for
 * r < rows_left, k < keys_left. */
V_INLINE void store_scaled_sums(const int block_rows, const int block_keys, int rows_left,
                                int keys_left, const float *key_factors, vf sums, float *scores) {
#if VLANES == 16
    const __m512 factors = block_keys == 4   ? _mm512_broadcast_f32x4(_mm_loadu_ps(key_factors))
                           : block_keys == 8 ? _mm512_castpd_ps(_mm512_broadcast_f64x4(
                                                   _mm256_loadu_pd((const double *)key_factors)))
                                             : _mm512_loadu_ps(key_factors);
    float out[16];
    vf_storeu(out, vf_mul(factors, sums));
    for (int r = 0; r < block_rows && r < rows_left; ++r)
        for (int k = 0; k < block_keys && k < keys_left; ++k)
            scores[r * ATTN_DECODE_CHUNK + k] = out[r * block_keys + k];
#else
    store_block_scores(block_rows, block_keys, 0, rows_left, keys_left, key_factors, vf_zero(),
                       sums, scores);
#endif
}

/* scaled[r][c] = weights[r][c] * ((factor * row_scales[c]) * format factor), r < rows (<= 4):
 * the per-key scale applied once per weight, rounded as the generic kernel does. */
static void scale_weights(const attn_dtype format, int rows, int count, const float *weights,
                          const float *row_scales, float factor, float *scaled) {
    const vf format_factor = vf_set1(q8_format_factor(format));
    for (int c0 = 0; c0 < count; c0 += VLANES) {
        const vmask lanes = vmask_first(count - c0);
        const vf scale =
            row_scales != NULL
                ? vf_mul(vf_mul(vf_set1(factor), vf_maskz_loadu(lanes, row_scales + c0)), format_factor)
                : vf_mul(vf_set1(factor), format_factor);
        for (int r = 0; r < rows; ++r)
            vf_mask_storeu(scaled + r * ATTN_DECODE_CHUNK + c0, lanes,
                           vf_mul(vf_maskz_loadu(lanes, weights + r * ATTN_DECODE_CHUNK + c0), scale));
    }
}
#endif /* ATTN_DECODE_FP8_BODY_SHARED */

/* 2 * VLANES stored fp8 elements source[0 .. 2 VLANES) (past `elements`: 0, not read) as
 * floats out[0] (the first VLANES) and out[1] (E4M3: value / 256). At 16 lanes the
 * byte-to-word step and the half's bit operations run on whole 512-bit registers, then one
 * VCVTPH2PS per 16; at 8, fp8_widen16 (decode_q8_avx2.h). */
FP8_TARGET V_INLINE void FP8(load_pair)(const attn_dtype format, const uint8_t *source,
                                        int elements, vf out[2]) {
#if VLANES == 16
    const __m256i bytes = _mm256_maskz_loadu_epi8(q8_mask32(elements), source);
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
#else
    fp8_widen16(format, q8_load16(source, elements), out);
#endif
}

/* out = the block_rows x block_keys dot products row[r] . key[k] (unscaled; E4M3 / 256) as
 * lanes r * block_keys + k, 2 * VLANES dimensions at a time. key_major: blocks of <= 2 rows
 * (with `full`, dimension-major all the same: each query vector loaded once per step for the
 * keys); else dimension-major, each widened key serving the 4 rows. full (a constant): dim %
 * (2 * VLANES) == 0. */
FP8_TARGET V_INLINE vf FP8(score_block)(const attn_dtype format, const int block_rows,
                                        const int block_keys, const int key_major, const int full,
                                        int dim, const float *const *row, const uint8_t *const *key) {
    enum { STEP = 2 * VLANES };
    vf sums[VLANES];
    for (int a = 0; a < VLANES; ++a) sums[a] = vf_zero();
    if (key_major && full) {
        for (int d = 0; d < dim; d += STEP) {
            vf query[2][2]; /* [row][half]: block_rows <= 2 here */
            for (int r = 0; r < block_rows; ++r) load_floats_pair(1, row[r] + d, STEP, query[r]);
            for (int k = 0; k < block_keys; ++k) {
                vf key_vectors[2];
                FP8(load_pair)(format, key[k] + d, STEP, key_vectors);
                for (int r = 0; r < block_rows; ++r) {
                    vf *sum = &sums[r * block_keys + k];
                    *sum = vf_fmadd(query[r][0], key_vectors[0], *sum);
                    *sum = vf_fmadd(query[r][1], key_vectors[1], *sum);
                }
            }
        }
    } else if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += STEP) {
                vf key_vectors[2], query[2];
                FP8(load_pair)(format, key[k] + d, dim - d, key_vectors);
                for (int r = 0; r < block_rows; ++r) {
                    load_floats_pair(0, row[r] + d, dim - d, query);
                    vf *sum = &sums[r * block_keys + k];
                    *sum = vf_fmadd(query[0], key_vectors[0], *sum);
                    *sum = vf_fmadd(query[1], key_vectors[1], *sum);
                }
            }
    } else {
        for (int d = 0; d < dim; d += STEP) {
            vf key_vectors[VLANES / 4][2]; /* [key][half] */
            for (int k = 0; k < block_keys; ++k)
                FP8(load_pair)(format, key[k] + d, full ? STEP : dim - d, key_vectors[k]);
            for (int r = 0; r < block_rows; ++r) {
                vf query[2];
                load_floats_pair(full, row[r] + d, dim - d, query);
                for (int k = 0; k < block_keys; ++k) {
                    vf *sum = &sums[r * block_keys + k];
                    *sum = vf_fmadd(query[0], key_vectors[k][0], *sum);
                    *sum = vf_fmadd(query[1], key_vectors[k][1], *sum);
                }
            }
        }
    }
    return transpose_reduce(sums);
}

/* A block of (4, VLANES / 4) dimension-major, (2, VLANES / 2) or (1, VLANES) key-major. */
FP8_TARGET V_INLINE vf FP8(score_block_rows)(const attn_dtype format, const int block_rows,
                                             const int full, int dim, const float *const *row,
                                             const uint8_t *const *key) {
    return FP8(score_block)(format, block_rows, VLANES / block_rows, block_rows < 4, full, dim,
                            row, key);
}

#if VLANES == 16
/* FP8(score_block)'s 4 x 4 blocks for four whole rows (queries [4][dim], dim a multiple of
 * 32) over the chunk, written out for the common GQA group: one key pointer and the stride
 * instead of a pointer table, the first products multiplied instead of added to zeroed
 * sums, the reduction stored straight to the rows. The decode loop waits on memory, and the
 * fewer instructions a block issues, the further ahead the core's window reaches; the sums
 * take the same products in the same order as FP8(score_block) (a zero sum may come out as
 * -0 instead of +0). requests: as FP8(score_chunk) makes them for its first row block. */
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
        FP8(load_pair)(format, keys + strides[k] + d, 32, key_vectors);
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
                                        int64_t key_stride, const float *key_factors,
                                        float *scores, const attn_rows_ahead *ahead,
                                        const uint8_t *keys_ahead, int requests) {
    for (int c0 = 0; c0 < count; c0 += 4) {
        const int valid = count - c0 < 4 ? count - c0 : 4;
        const uint8_t *k0 = keys + c0 * key_stride; /* keys past count: the last one again */
        const int64_t s1 = valid > 1 ? key_stride : 0, s2 = valid > 2 ? 2 * key_stride : s1,
                      s3 = valid > 3 ? 3 * key_stride : s2;
        if (requests) {
            /* (the block's rows ahead from its first one's: one test per block, not per key) */
            const char *ahead_row = row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
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
        const __m512 out = _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(key_factors + c0)),
                                         transpose_reduce(sums));
        _mm_mask_storeu_ps(scores + c0, lanes, _mm512_castps512_ps128(out));
        _mm_mask_storeu_ps(scores + ATTN_DECODE_CHUNK + c0, lanes, _mm512_extractf32x4_ps(out, 1));
        _mm_mask_storeu_ps(scores + 2 * ATTN_DECODE_CHUNK + c0, lanes, _mm512_extractf32x4_ps(out, 2));
        _mm_mask_storeu_ps(scores + 3 * ATTN_DECODE_CHUNK + c0, lanes, _mm512_extractf32x4_ps(out, 3));
    }
}
#endif

FP8_TARGET V_INLINE void FP8(score_chunk_as)(const attn_dtype format, int rows, int count, int dim,
                                        const float *queries, const uint8_t *keys,
                                        int64_t key_stride, const float *row_scales, float factor,
                                        float *scores, const attn_rows_ahead *ahead,
                                        const uint8_t *keys_ahead) {
    float key_factors[ATTN_DECODE_CHUNK + VLANES];
    fp8_key_factors(format, count, row_scales, factor, key_factors);
#if VLANES == 16
    if (rows % 4 == 0 && dim % 32 == 0) { /* whole 4-row blocks (GQA groups of 4, 8, ..) */
        for (int r0 = 0; r0 < rows; r0 += 4)
            FP8(score_rows4)(format, count, dim, queries + (int64_t)r0 * dim, keys, key_stride,
                             key_factors, scores + r0 * ATTN_DECODE_CHUNK, ahead, keys_ahead, r0 == 0);
        return;
    }
#endif
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = VLANES / block_rows;
    const int full = dim % (2 * VLANES) == 0;
    for (int r0 = 0; r0 < rows; r0 += block_rows) {
        const float *row[4];
        for (int r = 0; r < block_rows; ++r)
            row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * dim;
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            const uint8_t *key[VLANES];
            q8_block_keys(keys, c0, block_keys, count, key_stride, key);
            if (r0 == 0) { /* the pass that reads the keys from memory */
                for (int k = 0; ahead != NULL && k < block_keys && c0 + k < count; ++k)
                    prefetch_row_ahead(ahead, c0 + k);
                if (block_rows == 4)
                    for (int k = 0; k < block_keys; ++k)
                        prefetch_row_or_next(keys, keys_ahead, c0 + k, Q8_LOOKAHEAD, count, key_stride, dim, 1);
                else
                    for (int k = 0; k < block_keys; ++k)
                        prefetch_row_or_next(keys, keys_ahead, c0 + k, Q8_LOOKAHEAD, count, key_stride, dim, 0);
            }
            vf sums;
            if (block_rows == 4)
                sums = full ? FP8(score_block_rows)(format, 4, 1, dim, row, key)
                            : FP8(score_block_rows)(format, 4, 0, dim, row, key);
            else if (block_rows == 2)
                sums = full ? FP8(score_block_rows)(format, 2, 1, dim, row, key)
                            : FP8(score_block_rows)(format, 2, 0, dim, row, key);
            else
                sums = full ? FP8(score_block_rows)(format, 1, 1, dim, row, key)
                            : FP8(score_block_rows)(format, 1, 0, dim, row, key);
            float *target = scores + r0 * ATTN_DECODE_CHUNK + c0;
            if (block_rows == 4)
                store_scaled_sums(4, VLANES / 4, rows - r0, count - c0, key_factors + c0, sums, target);
            else if (block_rows == 2)
                store_scaled_sums(2, VLANES / 2, rows - r0, count - c0, key_factors + c0, sums, target);
            else
                store_scaled_sums(1, VLANES, rows - r0, count - c0, key_factors + c0, sums, target);
        }
    }
}

/* Accumulator rows [block_rows][dim], columns [e0, e0 + width), width <= VLANES * vectors:
 * acc = rescale * acc + sum_c weight[r][c] * value_c, the weights already multiplied by their
 * key's factor (scale_weights). full (a constant): width = VLANES * vectors. prefetch (a
 * constant): request values_ahead (non-NULL only where the hardware cannot follow the rows:
 * token-major pages), the next chunk's rows, value row by value row. */
FP8_TARGET V_INLINE void FP8(accumulate_block)(const attn_dtype format, const int block_rows,
                                               const int vectors, const int full, int count, int e0,
                                               int width, int dim, const float *weights,
                                               const float *rescale, const uint8_t *values,
                                               int64_t value_stride, float *accumulator,
                                               const int prefetch, const uint8_t *values_ahead) {
    vf sums[4][FP8_VECTORS(1)];
    for (int r = 0; r < block_rows; ++r) {
        const vf scale = vf_set1(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; x += 2) {
            load_floats_pair(full, row + VLANES * x, width - VLANES * x, &sums[r][x]);
            sums[r][x] = vf_mul(scale, sums[r][x]);
            sums[r][x + 1] = vf_mul(scale, sums[r][x + 1]);
        }
    }
#if VLANES == 8
#pragma GCC unroll 2
#endif
    for (int c = 0; c < count; ++c) {
        vf weight[4];
        for (int r = 0; r < block_rows; ++r) weight[r] = vf_set1(weights[r * ATTN_DECODE_CHUNK + c]);
        const uint8_t *value = values + c * value_stride + e0;
        if (prefetch)
            prefetch_row_or_next(values, values_ahead, c, Q8_LOOKAHEAD, count, value_stride, dim, 0);
        for (int x = 0; x < vectors; x += 2) {
            vf value_vectors[2];
            FP8(load_pair)(format, value + VLANES * x, full ? 2 * VLANES : width - VLANES * x,
                           value_vectors);
            for (int r = 0; r < block_rows; ++r) {
                sums[r][x] = vf_fmadd(weight[r], value_vectors[0], sums[r][x]);
                sums[r][x + 1] = vf_fmadd(weight[r], value_vectors[1], sums[r][x + 1]);
            }
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x) {
            if (full) vf_storeu(row + VLANES * x, sums[r][x]);
            else vf_mask_storeu(row + VLANES * x, vmask_first(width - VLANES * x), sums[r][x]);
        }
    }
}

/* Rows [0, block_rows) over all of dim in column blocks of VLANES * FP8_VECTORS floats; the
 * first block requests values_ahead. */
FP8_TARGET V_INLINE void FP8(accumulate_rows)(const attn_dtype format, const int block_rows,
                                              int count, int dim, const float *weights,
                                              const float *rescale, const uint8_t *values,
                                              int64_t value_stride, float *accumulator,
                                              const uint8_t *values_ahead) {
    const int vectors = FP8_VECTORS(block_rows), block = VLANES * vectors;
    for (int e0 = 0; e0 < dim; e0 += block) {
        const int whole = dim - e0 >= block, width = whole ? block : dim - e0;
        if (FP8_VALUE_REQUESTS && e0 == 0 && values_ahead != NULL) /* (a constant per block) */
            FP8(accumulate_block)(format, block_rows, vectors, whole, count, e0, width, dim, weights,
                                  rescale, values, value_stride, accumulator, 1, values_ahead);
        else if (whole)
            FP8(accumulate_block)(format, block_rows, vectors, 1, count, e0, block, dim, weights,
                                  rescale, values, value_stride, accumulator, 0, NULL);
        else
            FP8(accumulate_block)(format, block_rows, vectors, 0, count, e0, width, dim, weights,
                                  rescale, values, value_stride, accumulator, 0, NULL);
    }
}

FP8_TARGET V_INLINE void FP8(accumulate_chunk_as)(const attn_dtype format, int rows, int count, int dim,
                                             const float *weights, const float *rescale,
                                             const uint8_t *values, int64_t value_stride,
                                             const float *row_scales, float factor,
                                             float *accumulator, const uint8_t *values_ahead) {
    float scaled[4 * ATTN_DECODE_CHUNK];
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4;
        const uint8_t *ahead = r0 == 0 ? values_ahead : NULL;
        scale_weights(format, block_rows, count, weights + r0 * ATTN_DECODE_CHUNK, row_scales,
                      factor, scaled);
        float *block = accumulator + (int64_t)r0 * dim;
        if (block_rows == 4)
            FP8(accumulate_rows)(format, 4, count, dim, scaled, rescale + r0, values, value_stride, block, ahead);
        else if (block_rows == 3)
            FP8(accumulate_rows)(format, 3, count, dim, scaled, rescale + r0, values, value_stride, block, ahead);
        else if (block_rows == 2)
            FP8(accumulate_rows)(format, 2, count, dim, scaled, rescale + r0, values, value_stride, block, ahead);
        else
            FP8(accumulate_rows)(format, 1, count, dim, scaled, rescale + r0, values, value_stride, block, ahead);
    }
}

/* The slots' fp8 kernels: one copy of each chunk kernel per format (the block loops then test
 * no format), each a function of its own (kept apart from the int8 code they are dispatched
 * beside, for the register allocation of both). */
#define FP8_SCORE(format)                                                                      \
    FP8(score_chunk_as)(format, rows, count, dim, queries, keys, key_stride, row_scales, factor, \
                        scores, ahead, keys_ahead)
FP8_TARGET __attribute__((noinline)) static void FP8(score_chunk)(
    const attn_dtype format, int rows, int count, int dim, const float *queries,
    const uint8_t *keys, int64_t key_stride, const float *row_scales, float factor,
    float *scores, const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    ATTN_FP8_SPECIALISE(format, FP8_SCORE);
}
#undef FP8_SCORE

#define FP8_ACCUMULATE(format)                                                                 \
    FP8(accumulate_chunk_as)(format, rows, count, dim, weights, rescale, values, value_stride, \
                             row_scales, factor, accumulator, values_ahead)
FP8_TARGET __attribute__((noinline)) static void FP8(accumulate_chunk)(
    const attn_dtype format, int rows, int count, int dim, const float *weights,
    const float *rescale, const uint8_t *values, int64_t value_stride, const float *row_scales,
    float factor, float *accumulator, const uint8_t *values_ahead) {
    ATTN_FP8_SPECIALISE(format, FP8_ACCUMULATE);
}
#undef FP8_ACCUMULATE

#undef FP8
#undef FP8_TARGET
