/*
 * test_kernels_decode.c — the decode part of every kernel registry this build, CPU and OS run
 * (attn_kernels_available), slot by slot, against double-precision evaluations of the
 * contract in src/kernels/registry.h written here, and against the generic registry on the
 * same inputs:
 *   - bf16_to_f32 / f16_to_f32: exact against a decoding of the bit patterns written here
 *     (every class: zero, subnormal, normal, inf, NaN), lengths around the vector widths;
 *   - score_chunk: Q·Kᵀ for groups of 1..17 rows (every score block and row tail), chunks of
 *     1..64 keys, head dims 1..576, key strides wider than the dim;
 *   - softmax_chunk: the online-softmax step with masked (−inf) keys, rows that are all
 *     masked, a running max that is −inf or finite; columns past count untouched; P written
 *     as bf16 / fp16 (the rounding of the float32 step's p, the same state);
 *   - accumulate_chunk: rescale·acc + P·V with zero weights (masked keys), value strides
 *     wider than the dim whose gaps hold NaN (never read into the result);
 *   - where a registry has them, score_chunk_bf16 (after prepare_bf16_queries when given)
 *     and accumulate_chunk_bf16 against the same products on the widened bfloat16 values;
 *   - where a registry has them, score_chunk_f16 and accumulate_chunk_f16 against double on
 *     the half values, and bit for bit against the same registry's f16_to_f32 followed by
 *     score_chunk / accumulate_chunk (halves of every magnitude, subnormals included; the
 *     stride gaps hold NaN);
 *   - where a registry has them, score_chunk_bf16_widened and accumulate_chunk_bf16_widened
 *     (every group size) against double on the bfloat16 values, and bit for bit against the
 *     same registry's bf16_to_f32 followed by score_chunk / accumulate_chunk;
 *   - where a registry has them, the large-group kernels score_chunk_group (after
 *     prepare_group_queries) and accumulate_chunk_group (transposed accumulator) against
 *     double and the generic score_chunk / accumulate_chunk, for every group of 1..40 rows
 *     and 128 (MLA), odd head dims, chunks shorter than 64;
 *   - widen_rows: strided bfloat16 / half rows, exact, nothing written past the rows;
 *   - the 8-bit storage slots (int8 with row scales, fp8 E4M3 / E5M2 with a head factor):
 *     dequantize_rows exact against a decoding of the bytes written here, score_chunk_q8
 *     and accumulate_chunk_q8 against double and the generic registry, strides wider than
 *     the dim whose gaps hold bytes that would poison the result; widen_fp8_bf16 exact
 *     for every finite fp8 code; the same 8-bit checks on the AVX-512 kernels without VNNI,
 *     VBMI and GFNI (attn_avx512_q8_baseline), which a CPU with them never selects;
 *   - where a registry has them (AMX), the bf16 tile kernels: prepare_tile_queries +
 *     score_chunk_tiles and accumulate_chunk_tiles (weights of up to 4 chunks, rescale 1, 0
 *     and between) against double on the bf16 values, rows 1..128, keys 1..256, dims 1..576;
 *     and the same kernels on emulated tiles (tests/support/amx_emulation.h) wherever the
 *     CPU has AVX512-BF16, AMX or not;
 *   - where a registry has them (VDPBF16PS on AMD), score_chunk_tiles_fp8 and
 *     accumulate_chunk_tiles_fp8 bit for bit against widen_fp8_bf16 + the bf16 tile kernels
 *     (both formats, rows 1..6, keys 1..256, dims 1..576, NaN codes in the stride gaps);
 *   - where a registry has them (AMX-INT8), the int8 tile kernels: prepare_q8_tile_queries +
 *     score_chunk_q8_tiles and accumulate_chunk_q8_tiles bit for bit against the generic
 *     score_chunk_q8 / accumulate_chunk_q8 (quant.h's exact integers), rows 1..128, keys
 *     1..64, dims 1..1024 (1024 with the extreme codes -128 / 127 whose int32 sums reach
 *     2^31 in part), negative weights (the signed path), a zero query row; nothing written
 *     past count; and the same kernels on emulated tiles;
 *   - a second call on the same inputs gives the same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/registry.h"
#include "kernels/simd/parts.h" /* attn_avx512_q8_baseline */
#include "test_support.h"

#if defined(ATTN_HAVE_AVX512BF16_KERNELS) && (defined(__x86_64__) || defined(__i386__))
/* The AMX decode kernels (src/kernels/amx/decode_amx.h) on emulated tiles
 * (tests/support/amx_emulation.h), so that their tile bookkeeping (edges, staging, the pair
 * layouts, the transposes) is tested on CPUs with AVX512-BF16 but no AMX too. */
#include <immintrin.h>

#include "amx_emulation.h"
#include "kernels/amx/decode_amx.h"
#include "kernels/amx/decode_q8_amx.h"
#define EMULATED_DECODE_TILES 1
#endif

#define DOT_TOLERANCE 1e-6 /* relative to sum |q k| */
#define SENTINEL 12345.0f
#define COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))

static const int group_rows[] = {1, 2, 3, 4, 5, 8, 17};
static const int large_group_dims[] = {1, 7, 33, 127, 128, 576}; /* rows 1..40 of the group kernels */
static const int chunk_counts[] = {1, 5, 15, 16, 17, 40, 63, 64};
static const int head_dims[] = {1, 7, 16, 33, 64, 100, 128, 576};
static const int q8_dims[] = {1, 7, 16, 33, 64, 100, 128, 576, 1025}; /* 1025: the wide fallback */

static const attn_kernels *generic_registry(void) {
    const attn_kernels *generic = NULL;
    attn_kernels_select(ATTN_KERNEL_GENERIC, &generic, NULL);
    return generic;
}

static float *floats(size_t count, float fill) {
    float *data = malloc((count + 1) * sizeof(float));
    for (size_t i = 0; i <= count; ++i) data[i] = fill;
    return data;
}

static double bits_to_double_bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static double bits_to_double_f16(uint16_t h) {
    const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    double value;
    if (exponent == 31) value = mantissa ? NAN : INFINITY;
    else if (exponent == 0) value = ldexp(mantissa, -24);
    else value = ldexp(1024 + mantissa, exponent - 25);
    return sign ? -value : value;
}

/* A stored 16-bit value of a finite float near N(0, 1), as bfloat16 (truncated). */
static uint16_t random_bf16(test_rng *rng) {
    const float x = (float)test_rng_normal(rng);
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return (uint16_t)(bits >> 16);
}

/* A stored IEEE half near N(0, 1) scaled by 2^-26 .. 2^4 (rounded to nearest even): normal
 * halves, and subnormal ones for the small scales. */
static uint16_t random_f16(test_rng *rng) {
    const double scale = ldexp(1.0, (int)(test_rng_uniform(rng) * 30.0) - 26);
    return attn_float_to_f16((float)(test_rng_normal(rng) * scale));
}

static void test_conversions(const attn_kernels *k, test_rng *rng) {
    static const int lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000};
    for (int n = 0; n < COUNT_OF(lengths); ++n) {
        const int count = lengths[n];
        uint16_t *source = malloc(sizeof(uint16_t) * (size_t)count);
        for (int format = 0; format < 2; ++format) {
            for (int e = 0; e < count; ++e) { /* every class of bit pattern */
                const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7fc1,
                                             0x3c00, 0x7c00, 0x7e00, 0x03ff, 0xfc00};
                source[e] = test_rng_uniform(rng) < 0.2
                                ? specials[test_rng_range(rng, 0, COUNT_OF(specials) - 1)]
                                : (uint16_t)test_rng_range(rng, 0, 0xffff);
            }
            float *target = floats((size_t)count, SENTINEL);
            (format == 0 ? k->decode.bf16_to_f32 : k->decode.f16_to_f32)(count, source, target);
            int exact = target[count] == SENTINEL;
            for (int e = 0; e < count; ++e) {
                const double want =
                    format == 0 ? bits_to_double_bf16(source[e]) : bits_to_double_f16(source[e]);
                exact &= isnan(want) ? isnan(target[e]) : (double)target[e] == want;
            }
            CHECK(exact, "%s %s_to_f32 of %d elements: exact, nothing written past", k->name,
                  format == 0 ? "bf16" : "f16", count);
            free(target);
            /* widen_rows: the same elements as rows of `dim`, contiguous and strided */
            for (int dim = 1; dim <= count; dim += count / 3 + 1)
                for (int gap = 0; gap <= 3; gap += 3) {
                    const int stride = dim + gap, rows = (count - dim) / stride + 1;
                    float *wide = floats((size_t)rows * dim, SENTINEL);
                    /* with and without the next chunk to request (a hint: the same result) */
                    k->decode.widen_rows(format == 0 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F16, rows, dim,
                                         source, stride, wide, gap == 0 ? NULL : source);
                    int same = wide[rows * dim] == SENTINEL;
                    for (int c = 0; c < rows; ++c)
                        for (int e = 0; e < dim; ++e) {
                            const uint16_t bits = source[c * stride + e];
                            const double want = format == 0 ? bits_to_double_bf16(bits)
                                                            : bits_to_double_f16(bits);
                            const float got = wide[c * dim + e];
                            same &= isnan(want) ? isnan(got) : (double)got == want;
                        }
                    CHECK(same, "%s widen_rows %s %d rows of %d, stride %d: exact, nothing past",
                          k->name, format == 0 ? "bf16" : "f16", rows, dim, stride);
                    free(wide);
                }
        }
        free(source);
    }
}

/* The scores of `rows` queries [rows][dim] against `count` keys in double: exact[r][c] and
 * magnitude[r][c] = sum |q k|. keys as double so that bf16 and f32 share this. */
static void exact_scores(int rows, int count, int dim, const float *queries, const double *keys,
                         int64_t key_stride, double *exact, double *magnitude) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < count; ++c) {
            double sum = 0.0, size = 1e-30;
            for (int d = 0; d < dim; ++d) {
                const double term = (double)queries[(size_t)r * dim + d] * keys[c * key_stride + d];
                sum += term;
                size += fabs(term);
            }
            exact[r * count + c] = sum;
            magnitude[r * count + c] = size;
        }
}

/* score_chunk (and the bf16 form) for one shape: worst error against double and generic. */

/* Scores [rows][ATTN_DECODE_CHUNK] (count valid columns) against the exact dot products and
 * the generic registry's, relative to magnitude (both [rows][count]): the worst errors, and
 * whether every column past count still holds SENTINEL (returned). */
static int compare_scores(int rows, int count, const float *scores, const float *generic,
                          const double *exact, const double *magnitude, double *worst,
                          double *worst_generic) {
    int untouched = 1;
    *worst = *worst_generic = 0.0;
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < count; ++c) {
            const float got = scores[r * ATTN_DECODE_CHUNK + c];
            const double error = fabs(got - exact[r * count + c]) / magnitude[r * count + c];
            const double difference =
                fabs(got - generic[r * ATTN_DECODE_CHUNK + c]) / magnitude[r * count + c];
            if (!(error <= *worst)) *worst = error;
            if (!(difference <= *worst_generic)) *worst_generic = difference;
        }
        for (int c = count; c < ATTN_DECODE_CHUNK; ++c)
            untouched &= scores[r * ATTN_DECODE_CHUNK + c] == SENTINEL;
    }
    return untouched;
}

/* A 16-bit score kernel that reads keys16 (rows key_stride apart, NaN in the gaps) in place
 * and widens each element as it loads it (score_chunk_f16, score_chunk_bf16_widened): against
 * double on the 16-bit values and the generic score_chunk, and bit for bit against the same
 * registry's `widen` followed by its score_chunk (registry.h). */
typedef void (*score16_kernel)(int rows, int count, int dim, const float *queries,
                               const uint16_t *keys, int64_t key_stride, float *scores,
                               const uint16_t *keys_ahead);
static void check_score_widened(const attn_kernels *k, const char *name, score16_kernel kernel,
                                void (*widen)(int64_t, const uint16_t *, float *), int rows,
                                int count, int dim, const float *queries, const uint16_t *keys16,
                                const double *keys16_double, int64_t key_stride) {
    double *exact = malloc(sizeof(double) * (size_t)rows * count);
    double *magnitude = malloc(sizeof(double) * (size_t)rows * count);
    exact_scores(rows, count, dim, queries, keys16_double, key_stride, exact, magnitude);
    float *widened = floats((size_t)count * key_stride, 0.0f);
    float *same = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    float *generic = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    float *scores = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    widen(count * key_stride, keys16, widened);
    k->decode.score_chunk(rows, count, dim, queries, widened, key_stride, same, NULL);
    generic_registry()->decode.score_chunk(rows, count, dim, queries, widened, key_stride, generic,
                                           NULL);
    /* (the keys again as the "next chunk" the kernel may request: a hint only) */
    kernel(rows, count, dim, queries, keys16, key_stride, scores, keys16);
    double worst, worst_generic;
    const int untouched = compare_scores(rows, count, scores, generic, exact, magnitude, &worst,
                                         &worst_generic);
    const int bitwise = memcmp(scores, same, sizeof(float) * (size_t)rows * ATTN_DECODE_CHUNK) == 0;
    CHECK(worst <= DOT_TOLERANCE && worst_generic <= DOT_TOLERANCE && untouched && bitwise,
          "%s %s %dx%d D=%d: error %.3g, vs generic %.3g, untouched %d, = widened + score_chunk "
          "bit for bit %d",
          k->name, name, rows, count, dim, worst, worst_generic, untouched, bitwise);
    free(exact), free(magnitude), free(widened), free(same), free(generic), free(scores);
}

static void check_scores(const attn_kernels *k, int rows, int count, int dim, test_rng *rng) {
    const int64_t key_stride = dim + 3;
    float *queries = floats((size_t)rows * dim, 0.0f);
    test_fill_normal(rng, queries, (int64_t)rows * dim, 1.0f);
    float *keys = floats((size_t)count * key_stride, NAN); /* the stride gaps hold NaN */
    uint16_t *keys_bf16 = malloc(sizeof(uint16_t) * (size_t)count * key_stride);
    double *keys_double = malloc(sizeof(double) * (size_t)count * key_stride);
    double *keys_bf16_double = malloc(sizeof(double) * (size_t)count * key_stride);
    for (int c = 0; c < count; ++c)
        for (int d = 0; d < key_stride; ++d) {
            const int64_t at = c * key_stride + d;
            keys[at] = d < dim ? (float)test_rng_normal(rng) : NAN;
            keys_double[at] = keys[at];
            keys_bf16[at] = d < dim ? random_bf16(rng) : 0x7fc1; /* NaN in the gaps */
            keys_bf16_double[at] = bits_to_double_bf16(keys_bf16[at]);
        }
    double *exact = malloc(sizeof(double) * (size_t)rows * count);
    double *magnitude = malloc(sizeof(double) * (size_t)rows * count);
    exact_scores(rows, count, dim, queries, keys_double, key_stride, exact, magnitude);

    float *scores = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    float *again = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    float *generic = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    /* (the keys again as the "next chunk" the kernel may request: a hint only) */
    k->decode.score_chunk(rows, count, dim, queries, keys, key_stride, scores, keys);
    k->decode.score_chunk(rows, count, dim, queries, keys, key_stride, again, NULL);
    generic_registry()->decode.score_chunk(rows, count, dim, queries, keys, key_stride, generic,
                                           NULL);
    double worst, worst_generic;
    int untouched = compare_scores(rows, count, scores, generic, exact, magnitude, &worst,
                                   &worst_generic);
    CHECK(worst <= DOT_TOLERANCE && worst_generic <= DOT_TOLERANCE && untouched &&
              memcmp(scores, again, sizeof(float) * (size_t)rows * ATTN_DECODE_CHUNK) == 0,
          "%s score_chunk %dx%d D=%d: error %.3g, vs generic %.3g, past count untouched %d, "
          "repeatable", k->name, rows, count, dim, worst, worst_generic, untouched);

    if (k->decode.score_chunk_group != NULL) { /* large-group form, valid for any rows */
        const int64_t prepared_floats = (int64_t)dim * ATTN_DECODE_GROUP_STRIDE(rows);
        float *prepared = floats((size_t)prepared_floats, NAN);
        k->decode.prepare_group_queries(rows, dim, queries, prepared);
        for (int i = 0; i < rows * ATTN_DECODE_CHUNK; ++i) scores[i] = again[i] = SENTINEL;
        k->decode.score_chunk_group(rows, count, dim, prepared, keys, key_stride, scores, keys);
        k->decode.score_chunk_group(rows, count, dim, prepared, keys, key_stride, again, NULL);
        untouched = compare_scores(rows, count, scores, generic, exact, magnitude, &worst,
                                   &worst_generic);
        CHECK(worst <= DOT_TOLERANCE && worst_generic <= DOT_TOLERANCE && untouched &&
                  memcmp(scores, again, sizeof(float) * (size_t)rows * ATTN_DECODE_CHUNK) == 0,
              "%s score_chunk_group %dx%d D=%d: error %.3g, vs generic %.3g, past count "
              "untouched %d, repeatable", k->name, rows, count, dim, worst, worst_generic,
              untouched);
        free(prepared);
    }
    if (k->decode.score_chunk_bf16 != NULL && rows <= ATTN_DECODE_FUSED_ROWS) {
        /* generic reference path: widen through generic bf16_to_f32, then score_chunk */
        exact_scores(rows, count, dim, queries, keys_bf16_double, key_stride, exact, magnitude);
        float *widened = floats((size_t)count * key_stride, 0.0f);
        generic_registry()->decode.bf16_to_f32(count * key_stride, keys_bf16, widened);
        generic_registry()->decode.score_chunk(rows, count, dim, queries, widened, key_stride,
                                               generic, NULL);
        const int prepared_dim = ATTN_DECODE_PREPARED_DIM(dim);
        float *prepared = floats((size_t)rows * prepared_dim, NAN);
        const float *bf16_queries = queries;
        if (k->decode.prepare_bf16_queries != NULL) {
            k->decode.prepare_bf16_queries(rows, dim, queries, prepared);
            bf16_queries = prepared;
        }
        for (int i = 0; i < rows * ATTN_DECODE_CHUNK; ++i) scores[i] = SENTINEL;
        /* (the keys again as the "next chunk" the kernel may request: a hint only) */
        k->decode.score_chunk_bf16(rows, count, dim, bf16_queries, keys_bf16, key_stride, scores,
                                   keys_bf16);
        untouched = compare_scores(rows, count, scores, generic, exact, magnitude, &worst,
                                   &worst_generic);
        CHECK(worst <= DOT_TOLERANCE && worst_generic <= DOT_TOLERANCE && untouched,
              "%s score_chunk_bf16 %dx%d D=%d: error %.3g, vs generic %.3g, untouched %d",
              k->name, rows, count, dim, worst, worst_generic, untouched);
        free(widened), free(prepared);
    }
    if (k->decode.score_chunk_f16 != NULL && rows <= ATTN_DECODE_FUSED_ROWS) {
        /* halves of every magnitude, subnormals included; NaN in the gaps */
        uint16_t *keys_f16 = malloc(sizeof(uint16_t) * (size_t)count * key_stride);
        double *keys_f16_double = malloc(sizeof(double) * (size_t)count * key_stride);
        for (int64_t at = 0; at < count * key_stride; ++at) {
            keys_f16[at] = at % key_stride < dim ? random_f16(rng) : 0x7e01;
            keys_f16_double[at] = bits_to_double_f16(keys_f16[at]);
        }
        check_score_widened(k, "score_chunk_f16", k->decode.score_chunk_f16, k->decode.f16_to_f32,
                            rows, count, dim, queries, keys_f16, keys_f16_double, key_stride);
        free(keys_f16), free(keys_f16_double);
    }
    if (k->decode.score_chunk_bf16_widened != NULL) /* any rows: the token-major pages' */
        check_score_widened(k, "score_chunk_bf16_widened", k->decode.score_chunk_bf16_widened,
                            k->decode.bf16_to_f32, rows, count, dim, queries, keys_bf16,
                            keys_bf16_double, key_stride);
    free(queries), free(keys), free(keys_bf16), free(keys_double), free(keys_bf16_double);
    free(exact), free(magnitude), free(scores), free(again), free(generic);
}

/* softmax_chunk writing P as bf16 / fp16 operands read it: from the same logits and starting
 * state (old_max, old_sum) as the float32 step, each p is the rounding of that step's p
 * (`unrounded`) and the state (row max, sum, rescale: `state`) its bits; past count untouched. */
static void check_softmax_rounded(const attn_kernels *k, int rows, int count, float scale,
                                  const float *original, const float *old_max,
                                  const float *old_sum, const float *unrounded,
                                  const float *state) {
    static const attn_dtype types[] = {ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const size_t size = (size_t)rows * ATTN_DECODE_CHUNK;
    float *scores = floats(size, SENTINEL), *mine = floats((size_t)rows * 3, 0.0f);
    for (int t = 0; t < COUNT_OF(types); ++t) {
        memcpy(scores, original, sizeof(float) * size);
        memcpy(mine, old_max, sizeof(float) * rows);
        memcpy(mine + rows, old_sum, sizeof(float) * rows);
        k->decode.softmax_chunk(rows, count, scale, scores, types[t], mine, mine + rows,
                                mine + 2 * rows);
        int differ = memcmp(mine, state, sizeof(float) * rows * 3) != 0;
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < ATTN_DECODE_CHUNK; ++c) {
                const size_t i = (size_t)r * ATTN_DECODE_CHUNK + c;
                const float want = c >= count ? SENTINEL
                                              : attn_lowp_round_float(unrounded[i],
                                                                      types[t] == ATTN_DTYPE_BF16);
                differ += memcmp(&scores[i], &want, sizeof want) != 0;
            }
        CHECK(differ == 0, "%s softmax_chunk %dx%d as %s: p the rounding of the float32 step's, "
              "state its bits (%d differ)", k->name, rows, count,
              types[t] == ATTN_DTYPE_BF16 ? "bf16" : "fp16", differ);
    }
    free(scores), free(mine);
}

/* softmax_chunk on a [rows][ATTN_DECODE_CHUNK] block against the step in double and generic. */
static void check_softmax(const attn_kernels *k, int rows, int count, test_rng *rng) {
    const float scale = 0.125f;
    const size_t size = (size_t)rows * ATTN_DECODE_CHUNK;
    float *scores = floats(size, SENTINEL), *original = floats(size, SENTINEL);
    float *generic = floats(size, SENTINEL);
    float *state = floats((size_t)rows * 9, 0.0f); /* max, sum, rescale: mine, generic, start */
    float *row_max = state, *row_sum = state + rows, *rescale = state + 2 * rows;
    float *generic_max = state + 3 * rows, *generic_sum = state + 4 * rows,
          *generic_rescale = state + 5 * rows, *old_max = state + 6 * rows,
          *old_sum = state + 7 * rows;
    for (int r = 0; r < rows; ++r) {
        const int flavour = (int)test_rng_range(rng, 0, 3); /* plain, some masked, all masked */
        for (int c = 0; c < count; ++c) {
            float x = (float)(8.0 * test_rng_normal(rng));
            if ((flavour == 1 && test_rng_uniform(rng) < 0.3) || flavour == 2) x = -INFINITY;
            original[r * ATTN_DECODE_CHUNK + c] = x;
        }
        const int start_empty = flavour == 3 || test_rng_uniform(rng) < 0.3;
        old_max[r] = start_empty ? -INFINITY : (float)test_rng_normal(rng);
        old_sum[r] = start_empty ? 0.0f : 1.0f + (float)test_rng_uniform(rng);
        row_max[r] = generic_max[r] = old_max[r];
        row_sum[r] = generic_sum[r] = old_sum[r];
    }
    memcpy(scores, original, sizeof(float) * size);
    memcpy(generic, original, sizeof(float) * size);
    k->decode.softmax_chunk(rows, count, scale, scores, ATTN_DTYPE_F32, row_max, row_sum,
                            rescale);
    generic_registry()->decode.softmax_chunk(rows, count, scale, generic, ATTN_DTYPE_F32,
                                             generic_max, generic_sum, generic_rescale);
    double worst = 0.0;
    int exact = 1;
    for (int r = 0; r < rows; ++r) {
        double maximum = old_max[r];
        for (int c = 0; c < count; ++c)
            maximum = fmax(maximum, (double)original[r * ATTN_DECODE_CHUNK + c] * scale);
        const double used = maximum == -INFINITY ? 0.0 : maximum;
        const double unit = 1.0 + fabs(used);
        const double want_rescale = old_max[r] == -INFINITY ? 0.0 : exp(old_max[r] - used);
        double want_sum = want_rescale * old_sum[r];
        for (int c = 0; c < ATTN_DECODE_CHUNK; ++c) {
            const float got = scores[r * ATTN_DECODE_CHUNK + c];
            if (c >= count) {
                exact &= got == SENTINEL;
                continue;
            }
            const double x = (double)original[r * ATTN_DECODE_CHUNK + c] * scale;
            const double p = exp(x - used);
            want_sum += p;
            if (x == -INFINITY) {
                exact &= got == 0.0f && generic[r * ATTN_DECODE_CHUNK + c] == 0.0f;
                continue;
            }
            /* x·s and m are floats: their rounding moves exp by that much times |x| + |m| */
            const double per_unit = (p + 1e-30) * (unit + fabs(x));
            const double error = fabs(got - p) / per_unit;
            const double difference = fabs(got - generic[r * ATTN_DECODE_CHUNK + c]) / per_unit;
            if (p > 1e-30 && !(error <= worst)) worst = error;
            if (p > 1e-30 && !(difference <= worst)) worst = difference;
        }
        exact &= (maximum == -INFINITY ? row_max[r] == -INFINITY
                                       : fabs(row_max[r] - maximum) <= 1e-6 * unit) &&
                 row_max[r] == generic_max[r];
        exact &= want_rescale == 0.0 ? rescale[r] == 0.0f
                                     : fabs(rescale[r] - want_rescale) <= 1e-6 * unit * want_rescale;
        exact &= want_sum == 0.0 ? row_sum[r] == 0.0f
                                 : fabs(row_sum[r] - want_sum) <= 1e-5 * want_sum &&
                                       fabs(row_sum[r] - generic_sum[r]) <= 1e-5 * want_sum;
    }
    CHECK(worst <= 4e-7 && exact,
          "%s softmax_chunk %dx%d: p error %.3g (double and generic); masked exactly 0, state "
          "(max, rescale, sum) right, past count untouched: %d", k->name, rows, count, worst, exact);
    check_softmax_rounded(k, rows, count, scale, original, old_max, old_sum, scores, state);
    free(scores), free(original), free(generic), free(state);
}

/* accumulate_chunk (and the bf16 form) for one shape against double and generic. */
static void check_accumulate(const attn_kernels *k, int rows, int count, int dim, test_rng *rng) {
    const int64_t value_stride = dim + 5;
    float *weights = floats((size_t)rows * ATTN_DECODE_CHUNK, NAN); /* past count: NaN */
    float *rescale = floats((size_t)rows, 0.0f);
    float *values = floats((size_t)count * value_stride, NAN);
    uint16_t *values_bf16 = malloc(sizeof(uint16_t) * (size_t)count * value_stride);
    uint16_t *values_f16 = malloc(sizeof(uint16_t) * (size_t)count * value_stride);
    float *start = floats((size_t)rows * dim, 0.0f);
    test_fill_normal(rng, start, (int64_t)rows * dim, 1.0f);
    int *masked = calloc((size_t)count, sizeof(int));
    for (int c = 0; c < count; ++c) masked[c] = count > 1 && test_rng_uniform(rng) < 0.25;
    for (int r = 0; r < rows; ++r) {
        rescale[r] = r % 3 == 0 ? 1.0f : (float)test_rng_uniform(rng);
        for (int c = 0; c < count; ++c)
            weights[r * ATTN_DECODE_CHUNK + c] = masked[c] ? 0.0f : (float)test_rng_uniform(rng);
    }
    for (int c = 0; c < count; ++c)
        for (int e = 0; e < value_stride; ++e) {
            const int64_t at = c * value_stride + e;
            /* the stride gaps hold NaN: never read into the result */
            values[at] = e < dim ? (float)test_rng_normal(rng) : NAN;
            values_bf16[at] = e < dim ? random_bf16(rng) : 0x7fc1;
            values_f16[at] = e < dim ? random_f16(rng) : 0x7e01;
        }
    const int stride = ATTN_DECODE_GROUP_STRIDE(rows); /* the group form's accumulator */
    for (int form = 0; form < 5; ++form) {
        if (form == 1 && (k->decode.accumulate_chunk_bf16 == NULL || rows > ATTN_DECODE_FUSED_ROWS))
            continue;
        if (form == 4 && k->decode.accumulate_chunk_bf16_widened == NULL) continue;
        if (form == 3 && (k->decode.accumulate_chunk_f16 == NULL || rows > ATTN_DECODE_FUSED_ROWS))
            continue;
        if (form == 2 && k->decode.accumulate_chunk_group == NULL) continue;
        float *accumulator = floats((size_t)rows * dim, 0.0f);
        float *generic = floats((size_t)rows * dim, 0.0f);
        float *widened = floats((size_t)count * value_stride, 0.0f);
        memcpy(accumulator, start, sizeof(float) * (size_t)rows * dim);
        memcpy(generic, start, sizeof(float) * (size_t)rows * dim);
        if (form == 0) {
            memcpy(widened, values, sizeof(float) * (size_t)count * value_stride);
            k->decode.accumulate_chunk(rows, count, dim, weights, rescale, values, value_stride,
                                       accumulator, values);
        } else if (form == 1) {
            generic_registry()->decode.bf16_to_f32(count * value_stride, values_bf16, widened);
            k->decode.accumulate_chunk_bf16(rows, count, dim, weights, rescale, values_bf16,
                                            value_stride, accumulator, values_bf16);
        } else if (form == 3 || form == 4) { /* 16-bit in place: the bits of widening +
                                                 accumulate_chunk */
            const uint16_t *stored = form == 3 ? values_f16 : values_bf16;
            (form == 3 ? k->decode.f16_to_f32 : k->decode.bf16_to_f32)(count * value_stride,
                                                                      stored, widened);
            float *same = floats((size_t)rows * dim, 0.0f);
            memcpy(same, start, sizeof(float) * (size_t)rows * dim);
            k->decode.accumulate_chunk(rows, count, dim, weights, rescale, widened, value_stride,
                                       same, NULL);
            (form == 3 ? k->decode.accumulate_chunk_f16 : k->decode.accumulate_chunk_bf16_widened)(
                rows, count, dim, weights, rescale, stored, value_stride, accumulator, stored);
            CHECK(memcmp(same, accumulator, sizeof(float) * (size_t)rows * dim) == 0,
                  "%s %s %dx%d D=%d = widened + accumulate_chunk bit for bit", k->name,
                  form == 3 ? "accumulate_chunk_f16" : "accumulate_chunk_bf16_widened", rows,
                  count, dim);
            free(same);
        } else { /* transposed accumulator [dim][stride], padding rows 0 */
            memcpy(widened, values, sizeof(float) * (size_t)count * value_stride);
            float *transposed = floats((size_t)dim * stride, 0.0f);
            for (int r = 0; r < rows; ++r)
                for (int e = 0; e < dim; ++e)
                    transposed[(size_t)e * stride + r] = start[(size_t)r * dim + e];
            k->decode.accumulate_chunk_group(rows, count, dim, weights, rescale, values,
                                             value_stride, transposed);
            for (int r = 0; r < rows; ++r)
                for (int e = 0; e < dim; ++e)
                    accumulator[(size_t)r * dim + e] = transposed[(size_t)e * stride + r];
            free(transposed);
        }
        generic_registry()->decode.accumulate_chunk(rows, count, dim, weights, rescale, widened,
                                                    value_stride, generic, NULL);
        double worst = 0.0;
        for (int r = 0; r < rows; ++r)
            for (int e = 0; e < dim; ++e) {
                double want = (double)rescale[r] * start[(size_t)r * dim + e];
                double size = fabs(want) + 1e-30;
                for (int c = 0; c < count; ++c) {
                    if (masked[c]) continue;
                    const double term =
                        (double)weights[r * ATTN_DECODE_CHUNK + c] * widened[c * value_stride + e];
                    want += term;
                    size += fabs(term);
                }
                const float got = accumulator[(size_t)r * dim + e];
                const double error = fabs(got - want) / size;
                const double difference = fabs(got - generic[(size_t)r * dim + e]) / size;
                if (!(error <= worst)) worst = error; /* NaN counts as the worst */
                if (!(difference <= worst)) worst = difference;
            }
        static const char *const forms[] = {"accumulate_chunk", "accumulate_chunk_bf16",
                                            "accumulate_chunk_group", "accumulate_chunk_f16",
                                            "accumulate_chunk_bf16_widened"};
        CHECK(worst <= DOT_TOLERANCE, "%s %s %dx%d D=%d: error %.3g (double and generic)",
              k->name, forms[form], rows, count, dim, worst);
        free(accumulator), free(generic), free(widened);
    }
    free(weights), free(rescale), free(values), free(values_bf16), free(values_f16), free(start);
    free(masked);
}

/* ---- bf16 tiles (AMX): prepare_tile_queries, score_chunk_tiles, accumulate_chunk_tiles ----
 * bf16 queries and keys / values (stride gaps hold NaN), against double on the same bf16
 * values: the scores exact products summed in fp32; the accumulator with P rounded to bf16
 * (nearest even) over up to ATTN_DECODE_TILE_CHUNKS chunks whose weights are blocks of their
 * own, rescale factors of 1, 0 and between. Relative to the sum of |terms|, as above. */
static void check_tiles(const attn_kernels *k, int rows, int count, int dim, test_rng *rng) {
    const int64_t stride = dim + 3;
    const int score_count = count < ATTN_DECODE_CHUNK ? count : ATTN_DECODE_CHUNK;
    float *queries = floats((size_t)rows * dim, 0.0f);
    for (int i = 0; i < rows * dim; ++i) queries[i] = (float)bits_to_double_bf16(random_bf16(rng));
    uint16_t *rows_bf16 = malloc(sizeof(uint16_t) * (size_t)count * stride);
    double *rows_double = malloc(sizeof(double) * (size_t)count * stride);
    for (int c = 0; c < count; ++c)
        for (int d = 0; d < stride; ++d) {
            rows_bf16[c * stride + d] = d < dim ? random_bf16(rng) : 0x7fc1;
            rows_double[c * stride + d] = bits_to_double_bf16(rows_bf16[c * stride + d]);
        }
    /* scores of the first chunk */
    uint16_t *prepared = malloc(sizeof(uint16_t) * ATTN_DECODE_TILE_QUERY_ELEMENTS(rows, dim));
    for (size_t i = 0; i < ATTN_DECODE_TILE_QUERY_ELEMENTS(rows, dim); ++i) prepared[i] = 0x7fc1;
    double *exact = malloc(sizeof(double) * (size_t)rows * score_count);
    double *magnitude = malloc(sizeof(double) * (size_t)rows * score_count);
    exact_scores(rows, score_count, dim, queries, rows_double, stride, exact, magnitude);
    float *scores = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    float *again = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    k->decode.prepare_tile_queries(rows, dim, queries, prepared);
    k->decode.score_chunk_tiles(rows, score_count, dim, prepared, rows_bf16, stride, scores);
    k->decode.score_chunk_tiles(rows, score_count, dim, prepared, rows_bf16, stride, again);
    double worst = 0.0;
    int untouched = 1;
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < score_count; ++c) {
            const double error = fabs(scores[r * ATTN_DECODE_CHUNK + c] - exact[r * score_count + c]) /
                                 magnitude[r * score_count + c];
            if (!(error <= worst)) worst = error;
        }
        for (int c = score_count; c < ATTN_DECODE_CHUNK; ++c)
            untouched &= scores[r * ATTN_DECODE_CHUNK + c] == SENTINEL;
    }
    CHECK(worst <= DOT_TOLERANCE && untouched &&
              memcmp(scores, again, sizeof(float) * (size_t)rows * ATTN_DECODE_CHUNK) == 0,
          "%s score_chunk_tiles %dx%d D=%d: error %.3g, past count untouched %d, repeatable",
          k->name, rows, score_count, dim, worst, untouched);

    /* P · V over `count` keys: weights [chunk][rows][64], accumulator [rows16][dim16] */
    const int blocks = (count + ATTN_DECODE_CHUNK - 1) / ATTN_DECODE_CHUNK;
    const int width = ATTN_DECODE_TILE_ROW_FLOATS(dim);
    float *weights = floats((size_t)blocks * rows * ATTN_DECODE_CHUNK, NAN); /* past count: NaN */
    float *rescale = floats((size_t)rows, 0.0f);
    const size_t accumulator_floats = (size_t)ATTN_DECODE_GROUP_STRIDE(rows) * width;
    float *accumulator = floats(accumulator_floats, 0.0f);
    float *start = floats(accumulator_floats, 0.0f);
    test_fill_normal(rng, start, (int64_t)accumulator_floats, 1.0f);
    for (int r = 0; r < rows; ++r) {
        rescale[r] = r % 3 == 0 ? 1.0f : r % 3 == 1 ? (float)test_rng_uniform(rng) : 0.0f;
        for (int c = 0; c < count; ++c)
            weights[((size_t)(c / ATTN_DECODE_CHUNK) * rows + r) * ATTN_DECODE_CHUNK +
                    c % ATTN_DECODE_CHUNK] = c % 7 == 3 ? 0.0f : (float)test_rng_uniform(rng);
    }
    void *stage = aligned_alloc(64, (ATTN_DECODE_TILE_VALUE_BYTES(dim) + 63) / 64 * 64);
    memcpy(accumulator, start, sizeof(float) * accumulator_floats);
    k->decode.accumulate_chunk_tiles(rows, count, dim, weights, rescale, rows_bf16, stride, stage,
                                     accumulator);
    worst = 0.0;
    for (int r = 0; r < rows; ++r)
        for (int e = 0; e < dim; ++e) {
            double want = (double)rescale[r] * start[(size_t)r * width + e];
            double size = fabs(want) + 1e-30;
            for (int c = 0; c < count; ++c) {
                const float w = weights[((size_t)(c / ATTN_DECODE_CHUNK) * rows + r) *
                                            ATTN_DECODE_CHUNK + c % ATTN_DECODE_CHUNK];
                const double term =
                    bits_to_double_bf16(attn_lowp_bf16_round(w)) * rows_double[c * stride + e];
                want += term;
                size += fabs(term);
            }
            const double error = fabs(accumulator[(size_t)r * width + e] - want) / size;
            if (!(error <= worst)) worst = error; /* NaN counts as the worst */
        }
    CHECK(worst <= DOT_TOLERANCE, "%s accumulate_chunk_tiles %dx%d D=%d: error %.3g", k->name,
          rows, count, dim, worst);
    free(queries), free(rows_bf16), free(rows_double), free(prepared), free(exact);
    free(magnitude), free(scores), free(again), free(weights), free(rescale), free(accumulator);
    free(start), free(stage);
}

/* check_tiles over rows, keys and dims around the tile sizes. */
static void check_tile_shapes(const attn_kernels *k, test_rng *rng) {
    static const int tile_rows[] = {1, 2, 5, 15, 16, 17, 32, 33, 48, 128};
    static const int tile_counts[] = {1, 15, 16, 17, 33, 64, 65, 100, 192, 256};
    static const int tile_dims[] = {1, 7, 31, 32, 33, 100, 128, 512, 576};
    for (int n = 0; n < COUNT_OF(tile_rows); ++n)
        for (int c = 0; c < COUNT_OF(tile_counts); c += 1 + n % 2)
            check_tiles(k, tile_rows[n], tile_counts[c], tile_dims[(n + c) % COUNT_OF(tile_dims)],
                        rng);
}

/* ---- 8-bit storage ---- */
static const attn_dtype q8_formats[] = {ATTN_DTYPE_Q8, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
static const char *const q8_names[] = {"int8", "fp8_e4m3", "fp8_e5m2"};

/* The value of a stored byte, decoded here from the format's definition (attn.h). */
static double q8_value(attn_dtype format, uint8_t code) {
    if (format == ATTN_DTYPE_Q8) return (double)(int8_t)code;
    const int sign = code >> 7;
    const int exponent_bits = format == ATTN_DTYPE_FP8_E4M3 ? 4 : 5;
    const int mantissa_bits = 7 - exponent_bits, bias = format == ATTN_DTYPE_FP8_E4M3 ? 7 : 15;
    const int exponent = (code & 0x7f) >> mantissa_bits, mantissa = code & ((1 << mantissa_bits) - 1);
    const double value = exponent == 0
                             ? ldexp(mantissa, 1 - bias - mantissa_bits)
                             : ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits);
    return sign ? -value : value;
}

/* A random stored byte of the format: int8 in [-127, 127], fp8 any finite code. */
static uint8_t q8_random(attn_dtype format, test_rng *rng) {
    for (;;) {
        const uint8_t code = (uint8_t)test_rng_range(rng, 0, 255);
        if (format == ATTN_DTYPE_Q8 && code == 0x80) continue;
        if (format == ATTN_DTYPE_FP8_E4M3 && (code & 0x7f) == 0x7f) continue;
        if (format == ATTN_DTYPE_FP8_E5M2 && (code & 0x7c) == 0x7c) continue;
        return code;
    }
}

/* dequantize_rows, score_chunk_q8, accumulate_chunk_q8 for one format and shape. */
static void check_q8(const attn_kernels *k, int f, int rows, int count, int dim, test_rng *rng) {
    const attn_dtype format = q8_formats[f];
    const int64_t stride = dim + 7;
    uint8_t *stored = malloc((size_t)count * stride);
    for (int64_t i = 0; i < count * stride; ++i)
        stored[i] = i % stride < dim ? q8_random(format, rng) : 0x7f; /* gaps: 127, 448, NaN */
    float *row_scales = floats((size_t)count, 0.0f);
    for (int c = 0; c < count; ++c) row_scales[c] = (float)(0.001 + 0.02 * test_rng_uniform(rng));
    const int with_rows = format == ATTN_DTYPE_Q8; /* fp8: a head factor only */
    const float factor = with_rows ? 1.0f : (float)(0.5 + test_rng_uniform(rng));
    const float *scales = with_rows ? row_scales : NULL;
    float *key_factor = floats((size_t)count, 0.0f); /* (factor * row scale) as a float */
    for (int c = 0; c < count; ++c) key_factor[c] = with_rows ? factor * row_scales[c] : factor;

    /* dequantize_rows: exactly (factor * scale) * value */
    float *target = floats((size_t)count * dim, SENTINEL);
    k->decode.dequantize_rows(format, count, dim, stored, stride, scales, factor, target,
                              stored); /* (the rows again as the "next chunk": a hint only) */
    int exact = target[(size_t)count * dim] == SENTINEL;
    for (int c = 0; c < count; ++c)
        for (int e = 0; e < dim; ++e)
            exact &= target[(size_t)c * dim + e] ==
                     (float)((double)key_factor[c] * q8_value(format, stored[c * stride + e]));
    CHECK(exact, "%s dequantize_rows %s %dx%d: exact, nothing past", k->name, q8_names[f], count,
          dim);

    if (k->decode.score_chunk_q8 != NULL) {
        float *queries = floats((size_t)rows * dim, 0.0f);
        test_fill_normal(rng, queries, (int64_t)rows * dim, 1.0f);
        float *scores = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
        float *generic = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
        /* the fast kernel with a prefetch hint (the stored rows themselves), the generic one
         * without: the results must not depend on it */
        const attn_rows_ahead ahead = {stored, stride, dim};
        /* int8 keys: the rows rounded to int16 once, as the decode loop does (quant.h) */
        void *rounded = floats(ATTN_Q8_PREPARED_BYTES(rows, dim) / sizeof(float) + 1, 0.0f);
        if (format == ATTN_DTYPE_Q8) attn_q8_prepare_queries(rows, dim, queries, rounded);
        const void *operand = format == ATTN_DTYPE_Q8 ? rounded : (const void *)queries;
        k->decode.score_chunk_q8(format, rows, count, dim, operand, stored, stride, scales, factor,
                                 scores, &ahead, stored);
        generic_registry()->decode.score_chunk_q8(format, rows, count, dim, operand, stored,
                                                  stride, scales, factor, generic, NULL, NULL);
        double worst = 0.0;
        int untouched = 1;
        for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < count; ++c) {
                double sum = 0.0, size = 1e-30;
                for (int d = 0; d < dim; ++d) {
                    const double term =
                        (double)queries[(size_t)r * dim + d] * q8_value(format, stored[c * stride + d]);
                    sum += term, size += fabs(term);
                }
                sum *= key_factor[c], size *= key_factor[c];
                const float got = scores[r * ATTN_DECODE_CHUNK + c];
                const double error = fabs(got - sum) / size;
                const double difference = fabs(got - generic[r * ATTN_DECODE_CHUNK + c]) / size;
                if (!(error <= worst)) worst = error;
                if (!(difference <= worst)) worst = difference;
            }
            for (int c = count; c < ATTN_DECODE_CHUNK; ++c)
                untouched &= scores[r * ATTN_DECODE_CHUNK + c] == SENTINEL;
        }
        CHECK((format == ATTN_DTYPE_Q8 || worst <= DOT_TOLERANCE) && untouched,
              "%s score_chunk_q8 %s %dx%d D=%d: error %.3g (double and generic), untouched %d",
              k->name, q8_names[f], rows, count, dim, worst, untouched);
        if (format == ATTN_DTYPE_Q8) { /* int16 queries, exact integer sums: these bits */
            int same = 1;
            double rounding = 0.0;
            for (int r = 0; r < rows; ++r) {
                const float *query = queries + (size_t)r * dim;
                float largest = 0.0f;
                for (int d = 0; d < dim; ++d) largest = fmaxf(largest, fabsf(query[d]));
                const float query_scale = largest / 16383.0f;
                const float multiplier = largest == 0.0f ? 0.0f : 16383.0f / largest;
                for (int c = 0; c < count; ++c) {
                    double sum = 0.0, plain = 0.0, size = 1e-30;
                    for (int d = 0; d < dim; ++d) {
                        const double key = (double)(int8_t)stored[c * stride + d];
                        sum += rintf(query[d] * multiplier) * key;
                        plain += query[d] * key, size += fabs(query[d] * key);
                    }
                    const float want = (key_factor[c] * query_scale) * (float)sum;
                    same &= scores[r * ATTN_DECODE_CHUNK + c] == want &&
                            generic[r * ATTN_DECODE_CHUNK + c] == want;
                    rounding = fmax(rounding, fabs(want - plain * key_factor[c]) /
                                                  (size * key_factor[c]));
                }
            }
            CHECK(same && rounding <= 1e-4,
                  "%s score_chunk_q8 int8 %dx%d D=%d: the int16-query sums bit for bit "
                  "(generic too); their rounding %.3g <= 1e-4 of sum |q k|",
                  k->name, rows, count, dim, rounding);
        }

        float *weights = floats((size_t)rows * ATTN_DECODE_CHUNK, NAN);
        float *rescale = floats((size_t)rows, 0.0f);
        float *start = floats((size_t)rows * dim, 0.0f);
        test_fill_normal(rng, start, (int64_t)rows * dim, 1.0f);
        for (int r = 0; r < rows; ++r) {
            rescale[r] = r % 3 == 0 ? 1.0f : (float)test_rng_uniform(rng);
            for (int c = 0; c < count; ++c)
                weights[r * ATTN_DECODE_CHUNK + c] =
                    test_rng_uniform(rng) < 0.2 ? 0.0f : (float)test_rng_uniform(rng);
        }
        float *accumulator = floats((size_t)rows * dim, 0.0f);
        float *generic_accumulator = floats((size_t)rows * dim, 0.0f);
        memcpy(accumulator, start, sizeof(float) * (size_t)rows * dim);
        memcpy(generic_accumulator, start, sizeof(float) * (size_t)rows * dim);
        k->decode.accumulate_chunk_q8(format, rows, count, dim, weights, rescale, stored, stride,
                                      scales, factor, accumulator, stored);
        generic_registry()->decode.accumulate_chunk_q8(format, rows, count, dim, weights, rescale,
                                                       stored, stride, scales, factor,
                                                       generic_accumulator, NULL);
        worst = 0.0;
        for (int r = 0; r < rows; ++r)
            for (int e = 0; e < dim; ++e) {
                double want = (double)rescale[r] * start[(size_t)r * dim + e];
                double size = fabs(want) + 1e-30;
                for (int c = 0; c < count; ++c) {
                    const double term = (double)weights[r * ATTN_DECODE_CHUNK + c] * key_factor[c] *
                                        q8_value(format, stored[c * stride + e]);
                    want += term, size += fabs(term);
                }
                const float got = accumulator[(size_t)r * dim + e];
                const double error = fabs(got - want) / size;
                const double difference = fabs(got - generic_accumulator[(size_t)r * dim + e]) / size;
                if (!(error <= worst)) worst = error;
                if (!(difference <= worst)) worst = difference;
            }
        CHECK(worst <= (format == ATTN_DTYPE_Q8 ? 1e-4 : DOT_TOLERANCE),
              "%s accumulate_chunk_q8 %s %dx%d D=%d: error %.3g", k->name, q8_names[f], rows,
              count, dim, worst);
        if (format == ATTN_DTYPE_Q8) { /* int16 weights, exact integer sums: these bits */
            int same = 1;
            for (int r = 0; r < rows; ++r) {
                float scaled[ATTN_DECODE_CHUNK], largest = 0.0f;
                for (int c = 0; c < count; ++c) {
                    scaled[c] = weights[r * ATTN_DECODE_CHUNK + c] * key_factor[c];
                    largest = fmaxf(largest, fabsf(scaled[c]));
                }
                const float weight_scale = largest / 32767.0f;
                const float multiplier = largest == 0.0f ? 0.0f : 32767.0f / largest;
                for (int e = 0; e < dim; ++e) {
                    double sum = 0.0;
                    for (int c = 0; c < count; ++c)
                        sum += rintf(scaled[c] * multiplier) *
                               (double)(int8_t)stored[c * stride + e];
                    const float want =
                        fmaf(weight_scale, (float)sum, rescale[r] * start[(size_t)r * dim + e]);
                    same &= accumulator[(size_t)r * dim + e] == want &&
                            generic_accumulator[(size_t)r * dim + e] == want;
                }
            }
            CHECK(same, "%s accumulate_chunk_q8 int8 %dx%d D=%d: the int16-weight sums bit for bit",
                  k->name, rows, count, dim);
        }
        free(queries), free(rounded), free(scores), free(generic), free(weights), free(rescale), free(start);
        free(accumulator), free(generic_accumulator);
    }
    free(stored), free(row_scales), free(key_factor), free(target);
}

/* ---- int8 tiles (AMX-INT8): prepare_q8_tile_queries, score_chunk_q8_tiles,
 * accumulate_chunk_q8_tiles, bit for bit the generic Q8 kernels ---- */
static const int q8_tile_rows[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 33};
static const int q8_tile_dims[] = {1, 7, 16, 33, 64, 100, 128, 576, 1024};

/* widen_fp8_bf16: every finite code of both formats, in rows of `dim` bytes `stride` apart
 * (the gaps hold codes that would show if read), against the bf16 bits of the value from the
 * format's definition (test_fp8_value: exact in bf16); nothing written past count * dim. */
static void check_widen_fp8(const attn_kernels *k, int count, int dim, int stride) {
    for (int exponent_bits = 4; exponent_bits <= 5; ++exponent_bits) {
        const attn_dtype dtype = exponent_bits == 4 ? ATTN_DTYPE_FP8_E4M3 : ATTN_DTYPE_FP8_E5M2;
        uint8_t *source = malloc((size_t)count * stride);
        uint16_t *target = malloc(((size_t)count * dim + 8) * sizeof(uint16_t));
        for (int i = 0; i < count * stride; ++i) {
            int code = (i * 37 + exponent_bits) & 0xff;
            while (!isfinite(test_fp8_value(exponent_bits, code))) code = (code + 1) & 0xff;
            source[i] = (uint8_t)code;
        }
        for (int i = 0; i < count * dim + 8; ++i) target[i] = 0xbeef;
        k->decode.widen_fp8_bf16(dtype, count, dim, source, stride, target);
        int wrong = 0;
        for (int c = 0; c < count; ++c)
            for (int e = 0; e < dim; ++e) {
                const float value = (float)test_fp8_value(exponent_bits, source[c * stride + e]);
                uint32_t bits;
                memcpy(&bits, &value, sizeof bits);
                wrong += (bits & 0xffffu) != 0 || target[c * dim + e] != (uint16_t)(bits >> 16);
            }
        for (int i = count * dim; i < count * dim + 8; ++i) wrong += target[i] != 0xbeef;
        CHECK(wrong == 0, "registry %s widen_fp8_bf16 E%dM%d, %d rows x %d (stride %d): %d wrong",
              k->name, exponent_bits, 7 - exponent_bits, count, dim, stride, wrong);
        free(source), free(target);
    }
}

static void *aligned_bytes(size_t bytes);
/* score_chunk_tiles_fp8 / accumulate_chunk_tiles_fp8 (fp8 read in place by the tile
 * arithmetic): bit for bit the registry's own widen_fp8_bf16 followed by score_chunk_tiles /
 * accumulate_chunk_tiles, on random finite codes with NaN codes in the stride gaps (a read
 * past dim would poison the result); nothing written past count; rescale 1, 0 and between. */
static void check_tiles_fp8(const attn_kernels *k, attn_dtype format, int rows, int count,
                            int dim, test_rng *rng) {
    const attn_decode_kernels *d = &k->decode;
    const int64_t stride = dim + 5;
    const uint8_t nan_code = format == ATTN_DTYPE_FP8_E4M3 ? 0x7f : 0x7e;
    uint8_t *stored = malloc((size_t)count * stride);
    for (int c = 0; c < count; ++c)
        for (int e = 0; e < stride; ++e)
            stored[c * stride + e] = e < dim ? q8_random(format, rng) : nan_code;
    uint16_t *widened = malloc(sizeof(uint16_t) * (size_t)count * dim);
    d->widen_fp8_bf16(format, count, dim, stored, stride, widened);
    float *queries = floats((size_t)rows * dim, 0.0f);
    for (int i = 0; i < rows * dim; ++i) queries[i] = (float)bits_to_double_bf16(random_bf16(rng));
    uint16_t *prepared = malloc(sizeof(uint16_t) * ATTN_DECODE_TILE_QUERY_ELEMENTS(rows, dim));
    d->prepare_tile_queries(rows, dim, queries, prepared);
    const int score_count = count < ATTN_DECODE_CHUNK ? count : ATTN_DECODE_CHUNK;
    float *want = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    float *got = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    d->score_chunk_tiles(rows, score_count, dim, prepared, widened, dim, want);
    const attn_rows_ahead ahead = {stored, stride, dim}; /* a hint: any rows */
    d->score_chunk_tiles_fp8(format, rows, score_count, dim, prepared, stored, stride, got,
                             rows % 2 ? &ahead : NULL);
    CHECK(memcmp(want, got, sizeof(float) * (size_t)rows * ATTN_DECODE_CHUNK) == 0,
          "%s score_chunk_tiles_fp8 %s %dx%d D=%d: the bits of widen + score_chunk_tiles, "
          "nothing past count", k->name, format == ATTN_DTYPE_FP8_E4M3 ? "E4M3" : "E5M2", rows,
          score_count, dim);
    const int blocks = (count + ATTN_DECODE_CHUNK - 1) / ATTN_DECODE_CHUNK;
    const int width = ATTN_DECODE_TILE_ROW_FLOATS(dim);
    float *weights = floats((size_t)blocks * rows * ATTN_DECODE_CHUNK, NAN); /* past count: NaN */
    float *rescale = floats((size_t)rows, 0.0f);
    for (int r = 0; r < rows; ++r) {
        rescale[r] = r % 3 == 0 ? 1.0f : r % 3 == 1 ? (float)test_rng_uniform(rng) : 0.0f;
        for (int c = 0; c < count; ++c)
            weights[((size_t)(c / ATTN_DECODE_CHUNK) * rows + r) * ATTN_DECODE_CHUNK +
                    c % ATTN_DECODE_CHUNK] = c % 5 == 2 ? 0.0f : (float)test_rng_uniform(rng);
    }
    const size_t accumulator_floats = (size_t)ATTN_DECODE_GROUP_STRIDE(rows) * width;
    float *expected = floats(accumulator_floats, 0.0f), *accumulator = floats(accumulator_floats, 0.0f);
    test_fill_normal(rng, expected, (int64_t)accumulator_floats, 1.0f);
    memcpy(accumulator, expected, sizeof(float) * accumulator_floats);
    void *stage = aligned_bytes(ATTN_DECODE_TILE_VALUE_BYTES(dim));
    d->accumulate_chunk_tiles(rows, count, dim, weights, rescale, widened, dim, stage, expected);
    d->accumulate_chunk_tiles_fp8(format, rows, count, dim, weights, rescale, stored, stride,
                                  accumulator);
    int same = 1;
    for (int r = 0; r < rows; ++r) /* (entries past dim are scratch) */
        same &= memcmp(expected + (size_t)r * width, accumulator + (size_t)r * width,
                       sizeof(float) * (size_t)dim) == 0;
    CHECK(same, "%s accumulate_chunk_tiles_fp8 %s %dx%d D=%d: the bits of widen + "
          "accumulate_chunk_tiles", k->name, format == ATTN_DTYPE_FP8_E4M3 ? "E4M3" : "E5M2",
          rows, count, dim);
    free(stored), free(widened), free(queries), free(prepared), free(want), free(got);
    free(weights), free(rescale), free(expected), free(accumulator), free(stage);
}

static void *aligned_bytes(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == NULL) abort();
    return p;
}

/* extreme: every stored code -128 or 127 and every query element +-1 (the largest sums);
 * negative: some weights < 0 (the signed high bytes). */
/* int8 keys, a query row with a NaN / an infinite element: attn_q8_prepare_queries gives it
 * 0 operands and a NaN scale, and score_chunk_q8 NaN scores for that row only (finite ones
 * for the others; nothing undefined on the way: the ASan + UBSan build runs this too). */
static void check_q8_nonfinite_query(const attn_kernels *k) {
    if (k->decode.score_chunk_q8 == NULL) return;
    enum { ROWS = 4, COUNT = 64, DIM = 128 };
    float queries[ROWS * DIM];
    int8_t stored[COUNT * DIM];
    for (int e = 0; e < ROWS * DIM; ++e) queries[e] = (float)((e * 7) % 23 - 11) / 8.0f;
    for (int e = 0; e < COUNT * DIM; ++e) stored[e] = (int8_t)((e * 13) % 255 - 127);
    queries[1 * DIM + 5] = NAN, queries[2 * DIM + 77] = INFINITY;
    float *prepared = floats(ATTN_Q8_PREPARED_BYTES(ROWS, DIM) / sizeof(float), 0.0f);
    attn_q8_prepare_queries(ROWS, DIM, queries, prepared);
    int zero_rows = 1;
    for (int r = 1; r <= 2; ++r)
        for (int d = 0; d < DIM; ++d) zero_rows &= attn_q8_query_row(prepared, ROWS, DIM, r)[d] == 0;
    const float *scales = attn_q8_query_scales(prepared);
    float scores[ROWS * ATTN_DECODE_CHUNK];
    k->decode.score_chunk_q8(ATTN_DTYPE_Q8, ROWS, COUNT, DIM, prepared, (const uint8_t *)stored,
                             DIM, NULL, 1.0f, scores, NULL, NULL);
    int nan_rows = 1, finite_rows = 1;
    for (int c = 0; c < COUNT; ++c) {
        nan_rows &= isnan(scores[1 * ATTN_DECODE_CHUNK + c]) && isnan(scores[2 * ATTN_DECODE_CHUNK + c]);
        finite_rows &= isfinite(scores[c]) && isfinite(scores[3 * ATTN_DECODE_CHUNK + c]);
    }
    CHECK(zero_rows && isnan(scales[1]) && isnan(scales[2]) && isfinite(scales[0]) && nan_rows &&
              finite_rows,
          "%s score_chunk_q8 int8: rows with a NaN / infinite query element give NaN scores "
          "(0 operands, NaN scale), the others finite",
          k->name);
    free(prepared);
}

static void check_q8_tiles(const attn_kernels *k, int rows, int count, int dim, int extreme,
                           int negative, test_rng *rng) {
    const attn_decode_kernels *d = &k->decode;
    const attn_decode_kernels *g = &generic_registry()->decode;
    const int64_t stride = dim + 7;
    uint8_t *stored = aligned_bytes((size_t)count * stride);
    for (int64_t i = 0; i < count * stride; ++i)
        stored[i] = i % stride >= dim ? 0x7f /* gaps */
                    : extreme         ? (test_rng_uniform(rng) < 0.9 ? 0x80 : 0x7f)
                                      : q8_random(ATTN_DTYPE_Q8, rng);
    float *row_scales = floats((size_t)count, 0.0f);
    for (int c = 0; c < count; ++c) row_scales[c] = (float)(0.001 + 0.02 * test_rng_uniform(rng));
    float *queries = floats((size_t)rows * dim, 0.0f);
    test_fill_normal(rng, queries, (int64_t)rows * dim, 1.0f);
    if (extreme)
        for (int64_t i = 0; i < (int64_t)rows * dim; ++i) queries[i] = i % 11 == 5 ? 1.0f : -1.0f;
    if (rows >= 3)
        for (int e = 0; e < dim; ++e) queries[dim + e] = 0.0f; /* row 1: scale 0 */
    void *prepared = aligned_bytes(ATTN_DECODE_Q8_TILE_QUERY_BYTES(rows, dim));
    float *scores = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    float *want = floats((size_t)rows * ATTN_DECODE_CHUNK, SENTINEL);
    d->prepare_q8_tile_queries(rows, dim, queries, prepared);
    /* rows to request ahead: none, or (odd counts) rows past the chunk that a paged cache's
     * block table could name; a request reads nothing, so the bits cannot change */
    const uint8_t *ahead = count % 2 == 1 ? stored + (int64_t)count * stride : NULL;
    d->score_chunk_q8_tiles(rows, count, dim, prepared, stored, stride, row_scales, 1.0f, scores,
                            ahead);
    /* the generic kernel reads int8 scores from the rows attn_q8_prepare_queries rounded */
    void *rounded = aligned_bytes(ATTN_Q8_PREPARED_BYTES(rows, dim));
    attn_q8_prepare_queries(rows, dim, queries, rounded);
    g->score_chunk_q8(ATTN_DTYPE_Q8, rows, count, dim, rounded, stored, stride, row_scales, 1.0f,
                      want, NULL, NULL);
    int same = memcmp(scores, want, sizeof(float) * (size_t)rows * ATTN_DECODE_CHUNK) == 0;
    CHECK(same, "%s score_chunk_q8_tiles %dx%d D=%d%s: the generic bits, nothing past count",
          k->name, rows, count, dim, extreme ? " (extreme codes)" : "");

    float *weights = floats((size_t)rows * ATTN_DECODE_CHUNK, NAN);
    float *rescale = floats((size_t)rows, 0.0f);
    for (int r = 0; r < rows; ++r) {
        rescale[r] = r % 3 == 0 ? 1.0f : (float)test_rng_uniform(rng);
        for (int c = 0; c < count; ++c) {
            const double u = test_rng_uniform(rng);
            weights[r * ATTN_DECODE_CHUNK + c] =
                u < 0.2 ? 0.0f : negative && u > 0.8 ? -(float)u : (float)u;
        }
    }
    float *accumulator = floats((size_t)rows * dim + 1, SENTINEL);
    float *expected = floats((size_t)rows * dim + 1, SENTINEL);
    test_fill_normal(rng, accumulator, (int64_t)rows * dim, 1.0f);
    memcpy(expected, accumulator, sizeof(float) * (size_t)rows * dim);
    uint8_t *stage = aligned_bytes(ATTN_DECODE_Q8_TILE_VALUE_BYTES(dim));
    d->accumulate_chunk_q8_tiles(rows, count, dim, weights, rescale, stored, stride, row_scales,
                                 1.0f, stage, accumulator, ahead);
    g->accumulate_chunk_q8(ATTN_DTYPE_Q8, rows, count, dim, weights, rescale, stored, stride,
                           row_scales, 1.0f, expected, NULL);
    same = memcmp(accumulator, expected, sizeof(float) * ((size_t)rows * dim + 1)) == 0;
    CHECK(same, "%s accumulate_chunk_q8_tiles %dx%d D=%d%s%s: the generic bits, nothing past",
          k->name, rows, count, dim, negative ? " (negative weights)" : "",
          extreme ? " (extreme codes)" : "");
    free(stored), free(row_scales), free(queries), free(prepared), free(rounded), free(scores);
    free(want), free(weights), free(rescale), free(accumulator), free(expected), free(stage);
}

/* The int8 tile kernels over the shape table, the dims, the large groups and the edges. */
static void check_q8_tile_shapes(const attn_kernels *k, test_rng *rng) {
    for (int r = 0; r < COUNT_OF(q8_tile_rows); ++r)
        for (int c = 0; c < COUNT_OF(chunk_counts); ++c)
            check_q8_tiles(k, q8_tile_rows[r], chunk_counts[c],
                           q8_tile_dims[(r + c) % COUNT_OF(q8_tile_dims)], 0, c % 3 == 1, rng);
    for (int n = 0; n < COUNT_OF(q8_tile_dims); ++n) {
        check_q8_tiles(k, 4, 64, q8_tile_dims[n], 0, 0, rng);
        check_q8_tiles(k, 8, 37, q8_tile_dims[n], 0, 1, rng);
    }
    check_q8_tiles(k, 128, 64, 576, 0, 0, rng); /* MLA-sized group */
    check_q8_tiles(k, 4, 64, 1024, 1, 0, rng);  /* the widest exact sums */
    check_q8_tiles(k, 9, 64, 1024, 1, 1, rng);
    check_q8_tiles(k, 1, 1, 1, 1, 1, rng);
}

/* check_q8 over the formats, every group up to ATTN_DECODE_FUSED_ROWS and every head
 * dimension, and the non-finite query case. */
static void check_q8_shapes(const attn_kernels *k, test_rng *rng) {
    for (int f = 0; f < COUNT_OF(q8_formats); ++f)
        for (int rows = 1; rows <= ATTN_DECODE_FUSED_ROWS; ++rows)
            for (int c = 0; c < COUNT_OF(chunk_counts); c += 2)
                check_q8(k, f, rows, chunk_counts[c],
                         head_dims[(rows + c + f) % COUNT_OF(head_dims)], rng);
    for (int f = 0; f < COUNT_OF(q8_formats); ++f)
        for (int n = 0; n < COUNT_OF(q8_dims); ++n) check_q8(k, f, 4, 64, q8_dims[n], rng);
    check_q8_nonfinite_query(k);
}

int main(void) {
    const attn_kernels *registries[8];
    const int count = attn_kernels_available(registries, 8);
    CHECK(count >= 1 && count <= 8, "%d registries available", count);
    for (int i = 0; i < count && i < 8; ++i) {
        const attn_kernels *k = registries[i];
        const attn_decode_kernels *d = &k->decode;
        CHECK(d->bf16_to_f32 && d->f16_to_f32 && d->widen_rows && d->score_chunk &&
                  d->softmax_chunk && d->accumulate_chunk,
              "registry %s fills every mandatory decode slot", k->name);
        CHECK((d->score_chunk_f16 == NULL) == (d->accumulate_chunk_f16 == NULL),
              "registry %s has both f16 in-place slots or neither", k->name);
        CHECK((d->score_chunk_bf16_widened == NULL) == (d->accumulate_chunk_bf16_widened == NULL),
              "registry %s has both bf16 widened in-place slots or neither", k->name);
        printf("registry %s: bf16 in place %s; f16 in place %s; large-group kernels %s; bf16 "
               "tiles %s\n", k->name,
               d->score_chunk_bf16 ? "score and accumulate" : "no (converted first)",
               d->score_chunk_f16 ? "score and accumulate" : "no (converted first)",
               d->score_chunk_group ? "yes" : "no (score_chunk, accumulate_chunk)",
               d->score_chunk_tiles ? "yes" : "no (none on this CPU or registry)");
        printf("registry %s: int8 tiles %s\n", k->name,
               d->score_chunk_q8_tiles ? "yes" : "no (none on this CPU or registry)");
        test_rng rng;
        test_rng_seed(&rng, 77 + i);
        test_conversions(k, &rng);
        for (int g = 0; g < COUNT_OF(group_rows); ++g)
            for (int c = 0; c < COUNT_OF(chunk_counts); c += 1 + g % 2) {
                const int dim = head_dims[(g + c) % COUNT_OF(head_dims)];
                check_scores(k, group_rows[g], chunk_counts[c], dim, &rng);
                check_softmax(k, group_rows[g], chunk_counts[c], &rng);
                check_accumulate(k, group_rows[g], chunk_counts[c], dim, &rng);
            }
        for (int n = 0; n < COUNT_OF(head_dims); ++n) { /* every dim with the common groups */
            check_scores(k, 4, 64, head_dims[n], &rng);
            check_scores(k, 1, 17, head_dims[n], &rng);
            check_accumulate(k, 3, 64, head_dims[n], &rng);
            check_accumulate(k, 2, 33, head_dims[n], &rng);
        }
        test_rng group_rng; /* its own draws: the other cases keep their inputs */
        test_rng_seed(&group_rng, 1077 + i);
        if (d->score_chunk_group != NULL) /* every group size of the large-group kernels */
            for (int rows = 1; rows <= 40; ++rows) {
                const int chunk = chunk_counts[rows % COUNT_OF(chunk_counts)];
                const int dim = large_group_dims[rows % COUNT_OF(large_group_dims)];
                check_scores(k, rows, chunk, dim, &group_rng);
                check_accumulate(k, rows, chunk, dim, &group_rng);
            }
        if (d->score_chunk_group != NULL) { /* MLA absorbed: 128 rows, latent 512 + rope 64 */
            check_scores(k, 128, 64, 576, &group_rng);
            check_scores(k, 128, 17, 576, &group_rng);
            check_accumulate(k, 128, 63, 512, &group_rng);
        }
        if (d->score_chunk_tiles != NULL) { /* bf16 tiles: rows, keys, dims around the tiles */
            CHECK(d->prepare_tile_queries != NULL && d->accumulate_chunk_tiles != NULL,
                  "registry %s has all three tile slots", k->name);
            check_tile_shapes(k, &group_rng);
        }
        if (d->score_chunk_q8_tiles != NULL) { /* int8 tiles: rows, keys, dims, edges */
            CHECK(d->prepare_q8_tile_queries != NULL && d->accumulate_chunk_q8_tiles != NULL,
                  "registry %s has all three int8 tile slots", k->name);
            check_q8_tile_shapes(k, &group_rng);
        }
        CHECK(d->dequantize_rows != NULL && d->widen_fp8_bf16 != NULL,
              "registry %s has dequantize_rows and widen_fp8_bf16", k->name);
        check_widen_fp8(k, 64, 128, 1024); /* every code: 64 x 128 bytes cover them */
        check_widen_fp8(k, 3, 1, 1);
        check_widen_fp8(k, 17, 72, 200);
        check_widen_fp8(k, 64, 576, 576);
        if (d->score_chunk_tiles_fp8 != NULL) { /* fp8 in place on the tile arithmetic */
            CHECK(d->score_chunk_tiles != NULL && d->accumulate_chunk_tiles_fp8 != NULL,
                  "registry %s has both fp8 tile slots beside the bf16 ones", k->name);
            static const int fp8_counts[] = {1, 2, 15, 33, 64, 65, 128, 256};
            static const int fp8_dims[] = {1, 31, 32, 63, 64, 72, 100, 128, 200, 576};
            test_rng fp8_rng; /* (its own stream: the cases after keep theirs) */
            test_rng_seed(&fp8_rng, 4099 + i);
            for (int f = 1; f < COUNT_OF(q8_formats); ++f)
                for (int rows = 1; rows <= 6; ++rows)
                    for (int c = 0; c < COUNT_OF(fp8_counts); ++c)
                        check_tiles_fp8(k, q8_formats[f], rows, fp8_counts[c],
                                        fp8_dims[(rows + c + f) % COUNT_OF(fp8_dims)], &fp8_rng);
        }
        check_q8_shapes(k, &rng);
    }
#if defined(ATTN_HAVE_AVX512_KERNELS)
    const attn_kernels *avx512 = NULL;
    if (attn_kernels_select(ATTN_KERNEL_AVX512, &avx512, NULL) == ATTN_OK) {
        /* the AVX-512 8-bit kernels without VNNI, VBMI and GFNI (never picked where they exist) */
        attn_kernels baseline = *avx512;
        baseline.name = "avx512 8-bit without VNNI, VBMI and GFNI";
        baseline.decode.score_chunk_q8 = attn_avx512_q8_baseline.score_chunk_q8;
        baseline.decode.accumulate_chunk_q8 = attn_avx512_q8_baseline.accumulate_chunk_q8;
        test_rng rng;
        test_rng_seed(&rng, 5077);
        check_q8_shapes(&baseline, &rng);
        printf("%s: checked as the registries above\n", baseline.name);
    }
#endif
#if defined(EMULATED_DECODE_TILES)
    const attn_kernels *avx512bf16 = NULL;
    if (attn_kernels_select(ATTN_KERNEL_AVX512_BF16, &avx512bf16, NULL) == ATTN_OK) {
        attn_kernels emulated = *avx512bf16; /* its decode part, plus the AMX decode slots */
        emulated.name = "amx decode (emulated tiles)";
        emulated.decode.prepare_tile_queries = attn_amx_decode.prepare_tile_queries;
        emulated.decode.score_chunk_tiles = attn_amx_decode.score_chunk_tiles;
        emulated.decode.accumulate_chunk_tiles = attn_amx_decode.accumulate_chunk_tiles;
        test_rng rng;
        test_rng_seed(&rng, 4077);
        check_tile_shapes(&emulated, &rng);
        emulated.name = "amx int8 decode (emulated tiles)";
        emulated.decode.prepare_q8_tile_queries = attn_amx_q8_decode.prepare_q8_tile_queries;
        emulated.decode.score_chunk_q8_tiles = attn_amx_q8_decode.score_chunk_q8_tiles;
        emulated.decode.accumulate_chunk_q8_tiles = attn_amx_q8_decode.accumulate_chunk_q8_tiles;
        check_q8_tile_shapes(&emulated, &rng);
        CHECK(emulated_faults == 0 && emulated_config_loads >= 1,
              "emulated tiles: configured (%d loads), no operation on a tile not configured "
              "16 x 64 (%d)", emulated_config_loads, emulated_faults);
    } else {
        printf("no AVX512-BF16 here: the AMX decode kernels are not run on emulated tiles\n");
    }
#else
    printf("build without AVX512-BF16 kernels: the AMX decode kernels are not run on emulated tiles\n");
#endif
    return test_finish();
}
