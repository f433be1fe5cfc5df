/*
 * decode_fp8_lanes_avx512.h — fp8 E4M3 decode kernels that widen 64 codes at a time in lane
 * order (GFNI): two GF2P8AFFINEQB give every code's half as a high byte (sign, 0, exponent,
 * two mantissa bits) and a low byte (the last mantissa bit), two VPUNPCK[LH]BW interleave them
 * into 64 halves, and four VCVTPH2PS make the floats: 7 micro-operations per 32 codes,
 * conversions included, instead of 8 (simd/decode_fp8_body.h's load_pair: sign extension, shift,
 * mask, extract, two conversions of two each). The halves are load_pair's; their floats come
 * out in lane order:
 *   out[0] = elements 0-7, 16-23   out[1] = 8-15, 24-31   out[2] = 32-39, 48-55
 *   out[3] = 40-47, 56-63.
 * The score kernel permutes the query rows to that order once per call; the P · V keeps its
 * accumulator block in that order between the load and the store of each call (the
 * permutation, two 256-bit-half shuffles per pair of vectors, is its own inverse). Used for
 * groups of whole 4-row blocks with a head dimension a multiple of 64 (GQA at D 128), where the
 * decode loop waits on memory and the operations per byte decide how much of the wait the
 * core hides. Part of
 * decode_avx512.c's translation unit, after simd/decode_fp8_body.h.
 */

#define FP8_LANES_TARGET ATTN_TARGET("gfni")
/* GF2P8AFFINEQB matrices (row of output bit i in byte 7 - i): the high byte
 * s 0 e3 e2 e1 e0 m2 m1 of an E4M3 code s e3 e2 e1 e0 m2 m1 m0, and the low byte m0 0000000. */
#define E4M3_HALF_HIGH 0x0204081020400080ll
#define E4M3_HALF_LOW 0x0000000000000001ll

/* The 64 E4M3 codes at `source` as floats (value / 256) in lane order (above). */
FP8_LANES_TARGET V_INLINE void e4m3_lanes(const uint8_t *source, __m512 out[4]) {
    const __m512i codes = _mm512_loadu_si512(source);
    const __m512i high = _mm512_gf2p8affine_epi64_epi8(codes, _mm512_set1_epi64(E4M3_HALF_HIGH), 0);
    const __m512i low = _mm512_gf2p8affine_epi64_epi8(codes, _mm512_set1_epi64(E4M3_HALF_LOW), 0);
    const __m512i first = _mm512_unpacklo_epi8(low, high), second = _mm512_unpackhi_epi8(low, high);
    out[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(first));
    out[1] = _mm512_cvtph_ps(_mm512_castsi512_si256(second));
    out[2] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(first, 1));
    out[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(second, 1));
}

/* 64 floats in natural order (n[0..3], 16 each) to lane order, or back (its own inverse). */
V_INLINE void lanes_permute(const __m512 n[4], __m512 out[4]) {
    out[0] = _mm512_shuffle_f32x4(n[0], n[1], 0x44);
    out[1] = _mm512_shuffle_f32x4(n[0], n[1], 0xEE);
    out[2] = _mm512_shuffle_f32x4(n[2], n[3], 0x44);
    out[3] = _mm512_shuffle_f32x4(n[2], n[3], 0xEE);
}

/* Widest head dimension of the lane-order kernels (their permuted queries sit on the stack). */
#define FP8_LANES_MOST_DIM 1024

/* score_rows4 (simd/decode_fp8_body.h) for E4M3 in lane order: rows [4][dim], dim a multiple of
 * 64 up to FP8_LANES_MOST_DIM. */
FP8_LANES_TARGET static void score_rows4_e4m3_lanes(int count, int dim, const float *queries,
                                                    const uint8_t *keys, int64_t key_stride,
                                                    const float *row_scales, float factor,
                                                    float *scores, const attn_rows_ahead *ahead,
                                                    const uint8_t *keys_ahead, int requests) {
    float permuted[4 * FP8_LANES_MOST_DIM] __attribute__((aligned(64)));
    for (int e = 0; e < 4 * dim; e += 64) {
        const __m512 n[4] = {_mm512_loadu_ps(queries + e), _mm512_loadu_ps(queries + e + 16),
                             _mm512_loadu_ps(queries + e + 32), _mm512_loadu_ps(queries + e + 48)};
        __m512 lanes[4];
        lanes_permute(n, lanes);
        for (int x = 0; x < 4; ++x) _mm512_store_ps(permuted + e + 16 * x, lanes[x]);
    }
    const float format_factor = q8_format_factor(ATTN_DTYPE_FP8_E4M3);
    for (int c0 = 0; c0 < count; c0 += 4) {
        const int valid = count - c0 < 4 ? count - c0 : 4;
        const uint8_t *k0 = keys + c0 * key_stride; /* keys past count: the last one again */
        const int64_t s1 = valid > 1 ? key_stride : 0, s2 = valid > 2 ? 2 * key_stride : s1,
                      s3 = valid > 3 ? 3 * key_stride : s2;
        const int64_t strides[4] = {0, s1, s2, s3};
        if (requests) {
            /* (the block's rows ahead from its first one's: one test per block, not per key) */
            const char *ahead_row =
                row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
            for (int k = 0; k < valid; ++k) {
                if (ahead != NULL) prefetch_row_ahead(ahead, c0 + k);
                if (ahead_row != NULL) prefetch_rows(ahead_row, k, 1, key_stride, dim, 1);
            }
        }
        __m512 sums[16];
        for (int a = 0; a < 16; ++a) sums[a] = _mm512_setzero_ps();
        for (int d = 0; d < dim; d += 64)
            for (int k = 0; k < 4; ++k) {
                __m512 key_vectors[4];
                e4m3_lanes(k0 + strides[k] + d, key_vectors);
                for (int r = 0; r < 4; ++r) {
                    const float *row = permuted + (int64_t)r * dim + d;
                    __m512 *sum = &sums[r * 4 + k];
                    for (int x = 0; x < 4; ++x)
                        *sum = _mm512_fmadd_ps(_mm512_load_ps(row + 16 * x), key_vectors[x], *sum);
                }
            }
        /* lane 4r + k: row r, key k (the block's start and end are score_rows4's, written out
         * again: shared through helpers they run slower here, GCC 12 allocating the
         * registers of the key loop differently) */
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

/* accumulate_rows (simd/decode_fp8_body.h, 4 rows) for E4M3 in lane order: accumulator [4][dim],
 * dim a multiple of 64; weights [4][ATTN_DECODE_CHUNK] already scaled (scale_weights). */
FP8_LANES_TARGET static void accumulate_rows4_e4m3_lanes(int count, int dim, const float *weights,
                                                         const float *rescale,
                                                         const uint8_t *values,
                                                         int64_t value_stride,
                                                         float *accumulator,
                                                         const uint8_t *values_ahead) {
    for (int e0 = 0; e0 < dim; e0 += 64) {
        __m512 sums[4][4];
        for (int r = 0; r < 4; ++r) {
            const __m512 scale = _mm512_set1_ps(rescale[r]);
            const float *row = accumulator + (int64_t)r * dim + e0;
            const __m512 n[4] = {_mm512_loadu_ps(row), _mm512_loadu_ps(row + 16),
                                 _mm512_loadu_ps(row + 32), _mm512_loadu_ps(row + 48)};
            __m512 lanes[4];
            lanes_permute(n, lanes);
            for (int x = 0; x < 4; ++x) sums[r][x] = _mm512_mul_ps(scale, lanes[x]);
        }
        for (int c = 0; c < count; ++c) {
            __m512 value_vectors[4];
            if (values_ahead != NULL && e0 == 0)
                prefetch_row_or_next(values, values_ahead, c, Q8_LOOKAHEAD, count, value_stride,
                                     dim, 0);
            e4m3_lanes(values + c * value_stride + e0, value_vectors);
            for (int r = 0; r < 4; ++r) {
                const __m512 weight = _mm512_set1_ps(weights[r * ATTN_DECODE_CHUNK + c]);
                for (int x = 0; x < 4; ++x)
                    sums[r][x] = _mm512_fmadd_ps(weight, value_vectors[x], sums[r][x]);
            }
        }
        for (int r = 0; r < 4; ++r) {
            __m512 n[4];
            lanes_permute(sums[r], n);
            float *row = accumulator + (int64_t)r * dim + e0;
            for (int x = 0; x < 4; ++x) _mm512_storeu_ps(row + 16 * x, n[x]);
        }
    }
}

/* score_chunk_q8 for E4M3 with GFNI: whole 4-row blocks with dim a multiple of 64 in lane
 * order, any other shape by score_chunk_fp8. */
static void score_chunk_e4m3_lanes(int rows, int count, int dim, const float *queries,
                                   const uint8_t *keys, int64_t key_stride,
                                   const float *row_scales, float factor, float *scores,
                                   const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    if (rows % 4 != 0 || dim % 64 != 0 || dim > FP8_LANES_MOST_DIM) {
        score_chunk_fp8(ATTN_DTYPE_FP8_E4M3, rows, count, dim, queries, keys, key_stride,
                        row_scales, factor, scores, ahead, keys_ahead);
        return;
    }
    for (int r0 = 0; r0 < rows; r0 += 4)
        score_rows4_e4m3_lanes(count, dim, queries + (int64_t)r0 * dim, keys, key_stride,
                               row_scales, factor, scores + r0 * ATTN_DECODE_CHUNK, ahead,
                               keys_ahead, r0 == 0 && rows >= Q8_PREFETCH_ROWS);
}

/* accumulate_chunk_q8 for E4M3 with GFNI, as score_chunk_e4m3_lanes. */
static void accumulate_chunk_e4m3_lanes(int rows, int count, int dim, const float *weights,
                                        const float *rescale, const uint8_t *values,
                                        int64_t value_stride, const float *row_scales,
                                        float factor, float *accumulator,
                                        const uint8_t *values_ahead) {
    if (rows % 4 != 0 || dim % 64 != 0) {
        accumulate_chunk_fp8(ATTN_DTYPE_FP8_E4M3, rows, count, dim, weights, rescale, values,
                             value_stride, row_scales, factor, accumulator, values_ahead);
        return;
    }
    float scaled[4 * ATTN_DECODE_CHUNK];
    for (int r = 0; r < rows; r += 4) {
        scale_weights(ATTN_DTYPE_FP8_E4M3, 4, count, weights + r * ATTN_DECODE_CHUNK, row_scales,
                      factor, scaled);
        accumulate_rows4_e4m3_lanes(count, dim, scaled, rescale + r, values, value_stride,
                                    accumulator + (int64_t)r * dim, r == 0 ? values_ahead : NULL);
    }
}

#undef FP8_LANES_TARGET
