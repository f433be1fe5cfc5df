/*
 * decode_q8_avx512.h — the AVX-512 decode kernels for 8-bit KV storage (registry.h:
 * dequantize_rows, score_chunk_q8, accumulate_chunk_q8; formats in kernels/quant.h). Part
 * of decode_avx512.c's translation unit (included there, after decode_body.h, whose
 * transpose_reduce and vector helpers it uses).
 *
 * int8 scores and values are computed in integers (quant.h "Q8 decode arithmetic"; the
 * kernels in simd/decode_q8_int_body.h at 16 lanes, VPDPWSSD where AVX512-VNNI is present);
 * below, the float kernels of fp8, and dequantize_rows of every format.
 * Widening 16 stored bytes to 16 floats, in registers:
 *   Q8:       vpmovsxbd + vcvtdq2ps (exact; dequantize_rows);
 *   FP8 E5M2: zero-extend to 16 bits, shift left 8 = the IEEE half with the same value,
 *             vcvtph2ps (exact);
 *   FP8 E4M3: sign-extend to 16 bits, shift left 7, clear bit 14: the half whose value is
 *             the E4M3 value / 256 (subnormals included), vcvtph2ps; the 256 is folded into
 *             the per-key scale (a power of two: the same rounding as the generic kernels).
 * The fp8 kernels are simd/decode_fp8_body.h at 16 lanes, included twice below (with and
 * without VBMI): 32 bytes widened at a time (the 16-bit steps on a whole zmm, one vcvtph2ps
 * per 16; E5M2 by one VPERMB where VBMI is present); E4M3 in lane order where GFNI is present
 * (decode_fp8_lanes_avx512.h).
 */

/* Groups of at least this many rows request their rows ahead: every group for 1-byte rows.
 * (PREFETCH_ROWS, 2, is for 2- and 4-byte rows, whose one-row stream the hardware prefetcher
 * follows; a 1-byte one it does not, so MHA requests its 1-byte rows too.) */
#define Q8_PREFETCH_ROWS 1
/* Prefetch distance in rows for 1-byte rows (LOOKAHEAD is tuned for 2- and 4-byte ones): the
 * tunable, 32 the fastest of 16 to 128 rows for GQA int8 and fp8 and for MHA fp8 (define
 * Q8_LOOKAHEAD to try another). */
#ifndef Q8_LOOKAHEAD
#define Q8_LOOKAHEAD 32
#endif

/* Requests of 1-byte rows (prefetch_row_or_next, decode_body.h: rows past the chunk in the
 * next one, which the decode loop finds through the block table) go into L2 for int8 and fp8
 * groups of 1-2 rows, into L1 for fp8 blocks of 3-4 rows, whose widening and FMAs keep the
 * core busy long enough for the rows to wait in L1; each choice is the fastest of L1, L2 and
 * PREFETCHT2 for its kind of group. */

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
                               float factor, float *target, const uint8_t *rows_ahead) {
    for (int c = 0; c < count; ++c) {
        if (rows_ahead != NULL) /* the next chunk's row c (registry.h) */
            prefetch_rows(rows_ahead, c, 1, stride, dim, 0);
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

#define DEQUANTIZE(format) \
    dequantize_rows_as(format, count, dim, source, stride, row_scales, factor, target, rows_ahead)
static void avx512_dequantize_rows(attn_dtype dtype, int count, int dim, const uint8_t *source,
                                   int64_t stride, const float *row_scales, float factor,
                                   float *target, const uint8_t *rows_ahead) {
    ATTN_QUANT_SPECIALISE(dtype, DEQUANTIZE);
}
#undef DEQUANTIZE

/* registry.h widen_fp8_bf16: load_q8's floats (E4M3: value / 256) times the power of two
 * where needed, whose low 16 bits are 0 (at most 3 mantissa bits), truncated to bf16. */
static void widen_fp8_bf16_as(const attn_dtype format, int count, int dim, const uint8_t *source,
                              int64_t stride, uint16_t *target) {
    const __m512 factor = _mm512_set1_ps(q8_format_factor(format));
    for (int c = 0; c < count; ++c)
        for (int e = 0; e < dim; e += 16) {
            const __mmask16 lanes = vmask_first(dim - e);
            __m512 x = load_q8(format, source + c * stride + e, lanes);
            if (format == ATTN_DTYPE_FP8_E4M3) x = _mm512_mul_ps(x, factor);
            _mm256_mask_storeu_epi16(target + (int64_t)c * dim + e, lanes,
                                     _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)));
        }
}

/* The same with AVX512-VBMI, 64 stored bytes at a time: two 128-entry byte lookups on the
 * 7-bit magnitude (VPERMI2B) give each value's bf16 low and high byte, the sign is ORed into
 * the high one, and two more VPERMI2B interleave them into 64 bf16 words in order: 5
 * instructions per 64 elements instead of about 34. The tables: kernels/fp8_bf16_table.h. */
/* Rows ahead that widen_fp8_bf16_vbmi requests (the fp8 groups on bf16 tiles: MQA, MLA), so
 * that the widening of a chunk does not wait for its bytes: the tunable, 32 rows, faster than
 * none or 64. (The widening through halves, for CPUs without VBMI, requests nothing.) */
#define FP8_WIDEN_LOOKAHEAD 32

ATTN_TARGET("avx512vbmi") static void widen_fp8_bf16_vbmi(attn_dtype dtype, int count,
                                                                      int dim,
                                                                      const uint8_t *source,
                                                                      int64_t stride,
                                                                      uint16_t *target) {
    const attn_fp8_bf16_lookup *t = attn_fp8_bf16_lookup_get();
    const int f = dtype == ATTN_DTYPE_FP8_E4M3 ? 0 : 1;
    const __m512i low0 = _mm512_load_si512(t->low[f]), low1 = _mm512_load_si512(t->low[f] + 64);
    const __m512i high0 = _mm512_load_si512(t->high[f]);
    const __m512i high1 = _mm512_load_si512(t->high[f] + 64);
    const __m512i place0 = _mm512_load_si512(t->place[0]), place1 = _mm512_load_si512(t->place[1]);
    const __m512i sign = _mm512_set1_epi8((char)0x80);
    for (int c = 0; c < count; ++c)
        for (int e = 0; e < dim; e += 64) {
            const int n = dim - e < 64 ? dim - e : 64;
            const __mmask64 bytes = n == 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1u);
            const __m512i x = _mm512_maskz_loadu_epi8(bytes, source + c * stride + e);
            /* the row FP8_WIDEN_LOOKAHEAD further, into L2, one line per line widened (past
             * the chunk: the next chunk of the page; a prefetch never faults) */
            _mm_prefetch((const char *)(source + (c + FP8_WIDEN_LOOKAHEAD) * stride + e),
                         _MM_HINT_T1);
            const __m512i low = _mm512_permutex2var_epi8(low0, x, low1);
            const __m512i high = /* magnitude's high byte | (x & 0x80) */
                _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(high0, x, high1), x, sign, 0xf8);
            uint16_t *row = target + (int64_t)c * dim + e;
            const __mmask32 first = n >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << n) - 1u);
            _mm512_mask_storeu_epi16(row, first, _mm512_permutex2var_epi8(low, place0, high));
            if (n > 32)
                _mm512_mask_storeu_epi16(row + 32, n == 64 ? ~(__mmask32)0 : (((__mmask32)1 << (n - 32)) - 1u),
                                         _mm512_permutex2var_epi8(low, place1, high));
        }
}

/* The CPU's features, read once (attn_cpu_features_get behind a cached pointer): which
 * variants the dispatchers below take. */
static const attn_cpu_features *cpu(void) {
    static const attn_cpu_features *known;
    const attn_cpu_features *features = __atomic_load_n(&known, __ATOMIC_ACQUIRE);
    if (features == NULL) {
        features = attn_cpu_features_get();
        __atomic_store_n(&known, features, __ATOMIC_RELEASE);
    }
    return features;
}

#define WIDEN_FP8(format) widen_fp8_bf16_as(format, count, dim, source, stride, target)
static void avx512_widen_fp8_bf16(attn_dtype dtype, int count, int dim, const uint8_t *source,
                                  int64_t stride, uint16_t *target) {
    if (cpu()->avx512vbmi) /* VPERMI2B: byte lookups */
        widen_fp8_bf16_vbmi(dtype, count, dim, source, stride, target);
    else
        ATTN_FP8_SPECIALISE(dtype, WIDEN_FP8);
}
#undef WIDEN_FP8

/* The first `left` of 32 lanes (none for left <= 0). */
V_INLINE __mmask32 q8_mask32(int left) {
    return left >= 32 ? (__mmask32)0xffffffffu : left > 0 ? (__mmask32)((1u << left) - 1u) : 0;
}

/* The fp8 float kernels (simd/decode_fp8_body.h), with and without VBMI. */
#define FP8_VBMI 0
#include "kernels/simd/decode_fp8_body.h"
#undef FP8_VBMI
#define FP8_VBMI 1
#include "kernels/simd/decode_fp8_body.h"
#undef FP8_VBMI

/* E5M2 with a VPERMB where the CPU has VBMI (simd/decode_fp8_body.h): the same halves. */
static int have_vbmi(void) { return cpu()->avx512vbmi; }

/* E4M3 in lane order where the CPU has GFNI (decode_fp8_lanes_avx512.h). */
#include "kernels/avx512/decode_fp8_lanes_avx512.h"
static int have_gfni(void) { return cpu()->gfni; }

/* ---- int8 in integers (quant.h "Q8 decode arithmetic"; simd/decode_q8_int_body.h) ---- */

/* The int8 kernels with VPMADDWD + VPADDD (score_chunk_madd, accumulate_chunk_madd) and with
 * VPDPWSSD (score_chunk_vnni, accumulate_chunk_vnni): the same integers. */
#define Q8I_VNNI 0
#include "kernels/simd/decode_q8_int_body.h"
#undef Q8I_VNNI
#define Q8I_VNNI 1
#include "kernels/simd/decode_q8_int_body.h"
#undef Q8I_VNNI

/* VPDPWSSD where the CPU has it, else VPMADDWD: the same integers. */
static int have_vnni(void) { return cpu()->avx512_vnni; }

/* score_chunk_q8 with VNNI (int8), VBMI (E5M2) and GFNI (E4M3, lane order) where `extensions`
 * and the CPU have them; without (attn_avx512_q8_baseline), by the AVX-512BW routes: the same
 * bits but for E4M3's scores, whose lane-order sums add the products in other lanes. */
V_INLINE void score_chunk_q8_with(int extensions, attn_dtype dtype, int rows, int count, int dim,
                                  const void *queries, const uint8_t *keys, int64_t key_stride,
                                  const float *row_scales, float factor, float *scores,
                                  const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    if (dtype == ATTN_DTYPE_Q8 && dim > Q8I_MOST_DIM)
        attn_q8_score_exact(rows, count, dim, queries, (const int8_t *)keys, key_stride,
                            row_scales, factor, scores, ATTN_DECODE_CHUNK);
    else if (dtype == ATTN_DTYPE_Q8 && extensions && have_vnni())
        score_chunk_vnni(rows, count, dim, queries, (const int8_t *)keys, key_stride, row_scales,
                         factor, scores, ahead, (const int8_t *)keys_ahead);
    else if (dtype == ATTN_DTYPE_Q8)
        score_chunk_madd(rows, count, dim, queries, (const int8_t *)keys, key_stride, row_scales,
                         factor, scores, ahead, (const int8_t *)keys_ahead);
    else if (dtype == ATTN_DTYPE_FP8_E4M3 && extensions && have_gfni())
        score_chunk_e4m3_lanes(rows, count, dim, (const float *)queries, keys, key_stride,
                               row_scales, factor, scores, ahead, keys_ahead);
    else if (dtype == ATTN_DTYPE_FP8_E4M3)
        score_chunk_fp8(ATTN_DTYPE_FP8_E4M3, rows, count, dim, (const float *)queries, keys,
                        key_stride, row_scales, factor, scores, ahead, keys_ahead);
    else if (extensions && have_vbmi())
        score_chunk_fp8_vbmi(ATTN_DTYPE_FP8_E5M2, rows, count, dim, (const float *)queries, keys,
                             key_stride, row_scales, factor, scores, ahead, keys_ahead);
    else
        score_chunk_fp8(ATTN_DTYPE_FP8_E5M2, rows, count, dim, (const float *)queries, keys,
                        key_stride, row_scales, factor, scores, ahead, keys_ahead);
}

static void avx512_score_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                  const void *queries, const uint8_t *keys, int64_t key_stride,
                                  const float *row_scales, float factor, float *scores,
                                  const attn_rows_ahead *ahead, const uint8_t *keys_ahead) {
    score_chunk_q8_with(1, dtype, rows, count, dim, queries, keys, key_stride, row_scales, factor,
                        scores, ahead, keys_ahead);
}

static void avx512_score_chunk_q8_baseline(attn_dtype dtype, int rows, int count, int dim,
                                           const void *queries, const uint8_t *keys,
                                           int64_t key_stride, const float *row_scales,
                                           float factor, float *scores,
                                           const attn_rows_ahead *ahead,
                                           const uint8_t *keys_ahead) {
    score_chunk_q8_with(0, dtype, rows, count, dim, queries, keys, key_stride, row_scales, factor,
                        scores, ahead, keys_ahead);
}

/* accumulate_chunk_q8 with or without VNNI, VBMI and GFNI, as score_chunk_q8_with. */
V_INLINE void accumulate_chunk_q8_with(int extensions, attn_dtype dtype, int rows, int count,
                                       int dim, const float *weights, const float *rescale,
                                       const uint8_t *values, int64_t value_stride,
                                       const float *row_scales, float factor,
                                       float *accumulator, const uint8_t *values_ahead) {
    if (dtype == ATTN_DTYPE_Q8 && extensions && have_vnni())
        accumulate_chunk_vnni(rows, count, dim, weights, rescale, (const int8_t *)values,
                              value_stride, row_scales, factor, accumulator,
                              (const int8_t *)values_ahead);
    else if (dtype == ATTN_DTYPE_Q8)
        accumulate_chunk_madd(rows, count, dim, weights, rescale, (const int8_t *)values,
                              value_stride, row_scales, factor, accumulator,
                              (const int8_t *)values_ahead);
    else if (dtype == ATTN_DTYPE_FP8_E4M3 && extensions && have_gfni())
        accumulate_chunk_e4m3_lanes(rows, count, dim, weights, rescale, values, value_stride,
                                    row_scales, factor, accumulator, values_ahead);
    else if (dtype == ATTN_DTYPE_FP8_E4M3)
        accumulate_chunk_fp8(ATTN_DTYPE_FP8_E4M3, rows, count, dim, weights, rescale, values,
                             value_stride, row_scales, factor, accumulator, values_ahead);
    else if (extensions && have_vbmi())
        accumulate_chunk_fp8_vbmi(ATTN_DTYPE_FP8_E5M2, rows, count, dim, weights, rescale, values,
                                  value_stride, row_scales, factor, accumulator, values_ahead);
    else
        accumulate_chunk_fp8(ATTN_DTYPE_FP8_E5M2, rows, count, dim, weights, rescale, values,
                             value_stride, row_scales, factor, accumulator, values_ahead);
}

static void avx512_accumulate_chunk_q8(attn_dtype dtype, int rows, int count, int dim,
                                       const float *weights, const float *rescale,
                                       const uint8_t *values, int64_t value_stride,
                                       const float *row_scales, float factor,
                                       float *accumulator, const uint8_t *values_ahead) {
    accumulate_chunk_q8_with(1, dtype, rows, count, dim, weights, rescale, values, value_stride,
                             row_scales, factor, accumulator, values_ahead);
}

static void avx512_accumulate_chunk_q8_baseline(attn_dtype dtype, int rows, int count, int dim,
                                                const float *weights, const float *rescale,
                                                const uint8_t *values, int64_t value_stride,
                                                const float *row_scales, float factor,
                                                float *accumulator,
                                                const uint8_t *values_ahead) {
    accumulate_chunk_q8_with(0, dtype, rows, count, dim, weights, rescale, values, value_stride,
                             row_scales, factor, accumulator, values_ahead);
}
