/*
 * decode_avx512.c — the AVX-512 decode kernel table (contract: src/cache/decode_kernels.h).
 * Decoding is memory-bound, so the aim is simply to keep up with the memory stream: bf16
 * keys/values widen to float32 with a shift, fp16 with vcvtph2ps; each dot product runs over
 * the head dimension in 16-float vectors (two accumulators, masked tail) and reduces with a
 * fixed shuffle tree; value accumulation keeps up to 128 accumulator floats of a row in
 * registers across a chunk of keys. Deterministic: a fixed operation order for any input.
 */
#include <immintrin.h>

#include "cache/decode_kernels.h"

static void avx512_bf16_to_f32(int64_t count, const uint16_t *source, float *target) {
    int64_t e = 0;
    for (; e + 16 <= count; e += 16) {
        __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(source + e)));
        _mm512_storeu_ps(target + e, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
    }
    if (e < count) {
        __mmask16 tail = (__mmask16)((1u << (count - e)) - 1u);
        __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, source + e));
        _mm512_mask_storeu_ps(target + e, tail, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
    }
}

static void avx512_f16_to_f32(int64_t count, const uint16_t *source, float *target) {
    int64_t e = 0;
    for (; e + 16 <= count; e += 16)
        _mm512_storeu_ps(target + e,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(source + e))));
    if (e < count) {
        __mmask16 tail = (__mmask16)((1u << (count - e)) - 1u);
        _mm512_mask_storeu_ps(target + e, tail,
                              _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail, source + e)));
    }
}

/* sum of the 16 lanes, by a fixed tree (256 + 256, 128 + 128, then within 128 bits). */
static inline float reduce_sum(__m512 x) {
    __m256 half = _mm256_add_ps(_mm512_castps512_ps256(x),
                                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m128 quarter = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    quarter = _mm_add_ps(quarter, _mm_movehl_ps(quarter, quarter));
    quarter = _mm_add_ss(quarter, _mm_movehdup_ps(quarter));
    return _mm_cvtss_f32(quarter);
}

static inline float dot_product(int dim, const float *a, const float *b) {
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
    int d = 0;
    for (; d + 32 <= dim; d += 32) {
        even = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), _mm512_loadu_ps(b + d), even);
        odd = _mm512_fmadd_ps(_mm512_loadu_ps(a + d + 16), _mm512_loadu_ps(b + d + 16), odd);
    }
    for (; d < dim; d += 16) {
        __mmask16 lanes = dim - d >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (dim - d)) - 1u);
        even = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lanes, a + d), _mm512_maskz_loadu_ps(lanes, b + d),
                               even);
    }
    return reduce_sum(_mm512_add_ps(even, odd));
}

static void avx512_score_chunk(int rows, int count, int dim, const float *queries,
                               const float *keys, int64_t key_stride, float *scores) {
    for (int c = 0; c < count; ++c) {
        const float *key = keys + c * key_stride;
        for (int r = 0; r < rows; ++r)
            scores[r * ATTN_DECODE_CHUNK + c] = dot_product(dim, queries + (int64_t)r * dim, key);
    }
}

enum { REGISTER_FLOATS = 128 }; /* accumulator floats of one row kept in registers */

static void avx512_accumulate_chunk(int rows, int count, int dim, const float *weights,
                                    const float *values, int64_t value_stride,
                                    float *accumulator) {
    for (int r = 0; r < rows; ++r) {
        const float *row_weights = weights + r * ATTN_DECODE_CHUNK;
        float *row = accumulator + (int64_t)r * dim;
        for (int e0 = 0; e0 < dim; e0 += REGISTER_FLOATS) {
            const int width = dim - e0 < REGISTER_FLOATS ? dim - e0 : REGISTER_FLOATS;
            const int vectors = (width + 15) / 16;
            __mmask16 masks[REGISTER_FLOATS / 16];
            __m512 sums[REGISTER_FLOATS / 16];
            for (int x = 0; x < vectors; ++x) {
                int left = width - 16 * x;
                masks[x] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
                sums[x] = _mm512_maskz_loadu_ps(masks[x], row + e0 + 16 * x);
            }
            for (int c = 0; c < count; ++c) {
                const float weight = row_weights[c];
                if (weight == 0.0f) continue; /* masked key: its value is never read */
                const __m512 w = _mm512_set1_ps(weight);
                const float *value = values + c * value_stride + e0;
                for (int x = 0; x < vectors; ++x)
                    sums[x] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(masks[x], value + 16 * x),
                                              sums[x]);
            }
            for (int x = 0; x < vectors; ++x)
                _mm512_mask_storeu_ps(row + e0 + 16 * x, masks[x], sums[x]);
        }
    }
}

const attn_decode_kernels attn_decode_kernels_avx512 = {
    "avx512", avx512_bf16_to_f32, avx512_f16_to_f32, avx512_score_chunk, avx512_accumulate_chunk,
};
