/*
 * test_cache_quantized.c — 8-bit KV storage (attn.h ATTN_DTYPE_Q8, FP8_E4M3, FP8_E5M2;
 * docs/inference.md "Quantized KV cache"):
 *   - the formats: every finite fp8 code reads back and re-encodes to itself; random values
 *     (subnormal to beyond the largest) encode to the nearest code found by a search over
 *     all codes written here (ties to the even code), saturating; int8 rows against the
 *     documented rule (scale = max|x| / 127, round to nearest even);
 *   - the cache: attn_kv_cache_read returns exactly those dequantised values (paged, with
 *     per-head fp8 scales, MLA's values_in_keys); prefix sharing, truncation and re-append
 *     keep each row's scale with its elements;
 *   - decode, a table of formats x shapes (MHA, GQA, MQA, MLA-shaped) x lengths x kernels:
 *     equal to attn_reference_decode on the same cache (which reads the dequantised floats)
 *     to float rounding, within the documented bound of decode on an fp32 cache, and
 *     bitwise identical for 1 and 2 threads; int8 bitwise identical for the AVX-512 based
 *     choices (AVX512, AVX512_BF16, AMX, AUTO: one softmax, and the same integers in place
 *     and on AMX-INT8 tiles where they run, whose path attn_decode_kernel_path names);
 *   - int8 under a window and global key columns that empty whole chunks between allowed
 *     ones (the loop's late P·V across skipped chunks and empty splits): the AVX-512 bits;
 *   - bf16 queries against fp8 storage in groups of >= 5 rows (on the bf16 tiles where AMX
 *     runs, each chunk widened to bf16): every kernel choice within bf16's rounding of the
 *     reference and of the kernels without tiles, pages of 48 and 256, with and without a
 *     soft-cap, 1 = 2 threads bitwise;
 *   - errors: non-finite inputs refused with nothing written, per-head scales checked,
 *     bytes per token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "cache/decode_path.h"
#include "test_support.h"

#define COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))

typedef struct format_case {
    attn_dtype dtype;
    const char *name;
    int exponent_bits; /* fp8 only */
    double bound;      /* documented max relative error of decode vs an fp32 cache */
    double exact;      /* vs the reference on the stored values: float rounding, and for
                          int8 its int16 operands (quant.h; measured 4e-5) */
} format_case;

/* The bounds are docs/inference.md's: about twice the worst measured by this table (1.3e-2,
 * 3.6e-2, 8.3e-2), N(0, 1) keys, values and queries, |out - out_fp32| / (1 + |out_fp32|). */
static const format_case formats[] = {
    {ATTN_DTYPE_Q8, "int8", 0, 3e-2, 1e-4},
    {ATTN_DTYPE_FP8_E4M3, "fp8_e4m3", 4, 7e-2, 2e-5},
    {ATTN_DTYPE_FP8_E5M2, "fp8_e5m2", 5, 1.5e-1, 2e-5},
};

/* ---- the formats, from their definitions ---- */

/* The nearest finite code to x by search (ties: the even code), saturating. */
static double fp8_nearest(int exponent_bits, double x) {
    double best = NAN, best_distance = INFINITY;
    int best_code = -1;
    for (int code = 0; code < 256; ++code) {
        const double value = test_fp8_value(exponent_bits, code);
        if (isnan(value) || (signbit(value) != signbit(x) && value != 0.0)) continue;
        const double distance = fabs(value - x);
        if (distance < best_distance ||
            (distance == best_distance && (code & 1) == 0 && (best_code & 1) == 1)) {
            best = value, best_distance = distance, best_code = code;
        }
    }
    return signbit(x) && best == 0.0 ? -0.0 : best;
}

/* Values read back from a cache: k [1, T, H, D] of one sequence. */
static void read_back(const attn_kv_cache *cache, int64_t sequence, int64_t tokens, int64_t heads,
                      int64_t dk, int64_t dv, test_tensor *k, test_tensor *v) {
    *k = test_tensor_new(1, tokens, heads, dk, TEST_LAYOUT_BTHD);
    *v = test_tensor_new(1, tokens, heads, dv, TEST_LAYOUT_BTHD);
    attn_error error;
    CHECK_STATUS(attn_kv_cache_read(cache, sequence, 0, &k->view, &v->view, &error), ATTN_OK,
                 &error, "read back");
}

/* Every finite code decodes and re-encodes to itself (through the cache: one token per code),
 * and random values land on the nearest code, saturating; with a per-head scale. */
static void test_fp8_codes(const format_case *f) {
    const int heads = 2, dim = 256;
    const float head_scales[2] = {1.0f, 0.25f};
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1, config.kv_heads = heads, config.key_dim = dim, config.value_dim = dim;
    config.capacity = 4, config.page_size = 3, config.dtype = f->dtype;
    config.fp8_key_scales = head_scales, config.fp8_value_scales = head_scales;
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s cache", f->name);
    test_tensor k = test_tensor_new(1, 4, heads, dim, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, 4, heads, dim, TEST_LAYOUT_BTHD);
    test_rng rng;
    test_rng_seed(&rng, 5 + (uint64_t)f->exponent_bits);
    const double largest = f->exponent_bits == 4 ? 448.0 : 57344.0;
    for (int h = 0; h < heads; ++h)
        for (int d = 0; d < dim; ++d) {
            /* token 0: the code d itself (NaN codes -> 0); tokens 1..3: random magnitudes from
             * deep subnormal to 4x beyond the largest, both signs; value = x * head scale */
            const double code_value = test_fp8_value(f->exponent_bits, d);
            ((float *)k.allocation)[(0 * heads + h) * dim + d] =
                (float)((isnan(code_value) ? 0.0 : code_value) * head_scales[h]);
            for (int t = 1; t < 4; ++t) {
                const double magnitude =
                    exp2(test_rng_uniform(&rng) * (log2(largest) + 2.0 + 22.0) - 22.0);
                const double x = (test_rng_uniform(&rng) < 0.5 ? -1.0 : 1.0) * magnitude;
                ((float *)k.allocation)[(t * heads + h) * dim + d] = (float)(x * head_scales[h]);
            }
        }
    memcpy(v.allocation, k.allocation, sizeof(float) * 4 * heads * dim);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, &v.view, &error), ATTN_OK, &error,
                 "%s append", f->name);
    test_tensor k_read, v_read;
    read_back(cache, 0, 4, heads, dim, dim, &k_read, &v_read);
    int roundtrip = 1, nearest = 1, saturated = 0;
    for (int t = 0; t < 4; ++t)
        for (int h = 0; h < heads; ++h)
            for (int d = 0; d < dim; ++d) {
                const float input = test_get4(&k.view, 0, t, h, d);
                const double x = (double)input / head_scales[h]; /* exact: scales are 2^-n */
                const double want = fp8_nearest(f->exponent_bits, x) * head_scales[h];
                const float got = test_get4(&k_read.view, 0, t, h, d);
                const float got_value = test_get4(&v_read.view, 0, t, h, d);
                if (t == 0) roundtrip &= got == input && got_value == input;
                else nearest &= (double)got == want && got_value == got;
                saturated += fabs(x) > largest && fabs(got) == largest * head_scales[h];
            }
    CHECK(roundtrip, "%s: every finite code reads back unchanged (keys and values)", f->name);
    CHECK(nearest, "%s: random values read back as the nearest code (ties even), saturating",
          f->name);
    CHECK(saturated > 0, "%s: values beyond the largest saturate (%d seen)", f->name, saturated);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&k_read), test_tensor_free(&v_read);
    attn_kv_cache_destroy(cache);
}

/* int8 rows: s = max|x| / 127 (float), q = round-to-nearest-even(x / s), read back s * q; a
 * zero row reads back 0; values_in_keys rows too. */
static void test_int8_rows(void) {
    for (int in_keys = 0; in_keys < 2; ++in_keys) {
        const int heads = 3, dk = 40, dv = in_keys ? 32 : 24, tokens = 21;
        attn_kv_cache_config config = attn_kv_cache_config_default();
        config.sequences = 2, config.kv_heads = heads, config.key_dim = dk, config.value_dim = dv;
        config.capacity = 64, config.page_size = 8, config.dtype = ATTN_DTYPE_Q8;
        config.values_in_keys = in_keys;
        attn_kv_cache *cache = NULL;
        attn_error error;
        CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "int8 cache");
        test_rng rng;
        test_rng_seed(&rng, 21 + (uint64_t)in_keys);
        test_tensor k = test_tensor_new(1, tokens, heads, dk, TEST_LAYOUT_PADDED);
        test_tensor v = test_tensor_new(1, tokens, heads, dv, TEST_LAYOUT_BHTD);
        test_tensor_fill_normal(&k, &rng, 3.0f);
        test_tensor_fill_normal(&v, &rng, 0.5f);
        for (int d = 0; d < dk; ++d) *(float *)((float *)k.view.data + 5 * k.view.stride[1] + d) = 0.0f;
        /* token 5, head 0: a zero key row */
        CHECK_STATUS(attn_kv_cache_append(cache, 1, &k.view, in_keys ? NULL : &v.view, &error),
                     ATTN_OK, &error, "int8 append");
        test_tensor k_read, v_read;
        read_back(cache, 1, tokens, heads, dk, dv, &k_read, &v_read);
        int exact = 1;
        for (int t = 0; t < tokens; ++t)
            for (int h = 0; h < heads; ++h)
                for (int part = 0; part < 2; ++part) {
                    const attn_tensor *source = part == 0 || in_keys ? &k.view : &v.view;
                    const int dim = part == 0 ? dk : in_keys ? dk : dv;
                    const int shown = part == 0 ? dk : dv;
                    float largest = 0.0f;
                    for (int d = 0; d < dim; ++d)
                        largest = fmaxf(largest, fabsf(test_get4(source, 0, t, h, d)));
                    const float scale = largest / 127.0f;
                    for (int d = 0; d < shown; ++d) {
                        const float x = test_get4(source, 0, t, h, d);
                        const float q = scale == 0.0f ? 0.0f : fminf(127.0f, fmaxf(-127.0f, rintf(x / scale)));
                        const float got = test_get4(part == 0 ? &k_read.view : &v_read.view, 0, t, h, d);
                        exact &= got == scale * q;
                    }
                }
        CHECK(exact, "int8 rows (values_in_keys %d) read back as (max|x| / 127) * round(x / s)",
              in_keys);
        test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&k_read), test_tensor_free(&v_read);
        attn_kv_cache_destroy(cache);
    }
}

/* ---- decode against the reference and against fp32 ---- */

typedef struct shape_case {
    const char *name;
    int64_t hq, hkv, dk, dv, tq;
    int values_in_keys;
} shape_case;

static const shape_case shapes[] = {
    {"MHA", 4, 4, 64, 64, 1, 0},
    {"GQA", 8, 2, 128, 128, 1, 0},    /* 4 rows per task: the fused kernels */
    {"GQA Tq=2", 8, 2, 48, 40, 2, 0}, /* 8 rows: dequantised per chunk; causal partial tiles */
    {"MQA", 8, 1, 128, 128, 1, 0},
    {"MLA", 16, 1, 72, 64, 1, 1},    /* latent cache: values = first Dv of each key */
};
static const int64_t lengths[] = {1, 70, 333};

static attn_kv_cache *new_paged_cache(const shape_case *s, attn_dtype dtype,
                                      const float *head_scales, int64_t page_size) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 2, config.kv_heads = s->hkv, config.key_dim = s->dk;
    config.value_dim = s->dv, config.values_in_keys = s->values_in_keys;
    config.capacity = 400, config.page_size = page_size, config.dtype = dtype;
    if (dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2) {
        config.fp8_key_scales = head_scales;
        config.fp8_value_scales = head_scales;
    }
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "create %s dtype %d",
                 s->name, (int)dtype);
    return cache;
}

static attn_kv_cache *new_cache(const shape_case *s, attn_dtype dtype, const float *head_scales) {
    return new_paged_cache(s, dtype, head_scales, 48);
}

/* The inputs of one decode case: N(0, 1) keys, values (2 sequences of `length` tokens) and
 * queries (Tq per sequence) drawn from `seed`, fp8 head scales 0.05-0.4, causal bottom-right
 * options and splits of 100 tokens (which line up with neither pages nor chunks). */
typedef struct decode_inputs {
    test_tensor k, v, q;
    float head_scales[8];
    attn_options options;
    attn_execution execution;
} decode_inputs;

static decode_inputs decode_inputs_new(const shape_case *s, int64_t length, uint64_t seed) {
    decode_inputs in;
    test_rng rng;
    test_rng_seed(&rng, seed);
    in.k = test_tensor_new(2, length, s->hkv, s->dk, TEST_LAYOUT_BTHD);
    in.v = test_tensor_new(2, length, s->hkv, s->dv, TEST_LAYOUT_BTHD);
    in.q = test_tensor_new(2, s->tq, s->hq, s->dk, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&in.k, &rng, 1.0f);
    test_tensor_fill_normal(&in.v, &rng, 1.0f);
    test_tensor_fill_normal(&in.q, &rng, 1.0f);
    for (int h = 0; h < 8; ++h) in.head_scales[h] = 0.05f * (float)(h + 1);
    in.options = attn_options_default();
    in.options.causal = 1, in.options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    in.execution = attn_execution_default();
    in.execution.tile_k = 100;
    return in;
}

static void decode_inputs_free(decode_inputs *in) {
    test_tensor_free(&in->k), test_tensor_free(&in->v), test_tensor_free(&in->q);
}

/* out[t] = attn_decode of `cache` with `kernel` on t + 1 threads (t = 0, 1), new tensors
 * [2, Tq, Hq, Dv]; `what` names the case in a failure. */
static void decode_on_1_and_2_threads(attn_kv_cache *cache, const shape_case *s,
                                      const test_tensor *q, const attn_options *options,
                                      const attn_execution *execution, attn_kernel_choice kernel,
                                      test_tensor out[2], const char *what) {
    attn_error error;
    for (int threads = 1; threads <= 2; ++threads) {
        out[threads - 1] = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
        attn_execution run = *execution;
        run.kernel = kernel, run.num_threads = threads;
        CHECK_STATUS(attn_decode(cache, &q->view, options, &out[threads - 1].view, NULL, &run,
                                 &error),
                     ATTN_OK, &error, "decode %s", what);
    }
}

/* Copies out (an output of shape s) into kept; returns 1. */
static int keep_copy(test_tensor *kept, const test_tensor *out, const shape_case *s) {
    memcpy(kept->view.data, out->view.data, sizeof(float) * (size_t)(2 * s->tq * s->hq * s->dv));
    return 1;
}

static void test_decode_table(void) {
    const attn_kernel_choice kernels[] = {ATTN_KERNEL_GENERIC,     ATTN_KERNEL_AVX2,
                                          ATTN_KERNEL_AVX512,      ATTN_KERNEL_AVX512_BF16,
                                          ATTN_KERNEL_AMX,         ATTN_KERNEL_AUTO};
    double worst[COUNT_OF(formats)] = {0};
    for (int si = 0; si < COUNT_OF(shapes); ++si)
        for (int li = 0; li < COUNT_OF(lengths); ++li) {
            const shape_case *s = &shapes[si];
            const int64_t length = lengths[li];
            if (length < s->tq) continue;
            decode_inputs in = decode_inputs_new(s, length, 100 + (uint64_t)(si * 10 + li));
            test_tensor k = in.k, v = in.v, q = in.q;
            const float *head_scales = in.head_scales;
            const attn_options options = in.options;
            const attn_execution execution = in.execution;
            attn_error error;
            attn_kv_cache *exact = new_cache(s, ATTN_DTYPE_F32, NULL);
            CHECK_STATUS(attn_kv_cache_append(exact, 0, &k.view, s->values_in_keys ? NULL : &v.view,
                                              &error),
                         ATTN_OK, &error, "append fp32");
            test_tensor expected = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
            CHECK_STATUS(attn_decode(exact, &q.view, &options, &expected.view, NULL, &execution,
                                     &error),
                         ATTN_OK, &error, "decode fp32");
            for (int fi = 0; fi < COUNT_OF(formats); ++fi) {
                const format_case *f = &formats[fi];
                attn_kv_cache *cache = new_cache(s, f->dtype, head_scales);
                CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view,
                                                  s->values_in_keys ? NULL : &v.view, &error),
                             ATTN_OK, &error, "append %s", f->name);
                test_tensor reference = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
                test_tensor first = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
                int have_first = 0;
                CHECK_STATUS(attn_reference_decode(cache, &q.view, &options, &reference.view, NULL,
                                                   &error),
                             ATTN_OK, &error, "reference %s", f->name);
                for (int ki = 0; ki < COUNT_OF(kernels); ++ki) {
                    if (!attn_kernel_available(kernels[ki])) continue;
                    test_tensor out[2];
                    decode_on_1_and_2_threads(cache, s, &q, &options, &execution, kernels[ki], out,
                                              f->name);
                    const double against_reference =
                        test_max_relative_error(&out[0].view, &reference.view);
                    const double against_fp32 = test_max_relative_error(&out[0].view, &expected.view);
                    CHECK(against_reference <= f->exact && against_fp32 <= f->bound &&
                              test_bitwise_equal(&out[0].view, &out[1].view),
                          "%s %s T=%lld kernel %s: vs reference on the stored values %.3g <= %.0e, "
                          "vs fp32 %.3g <= %.0e, 1 = 2 threads bitwise",
                          f->name, s->name, (long long)length, attn_kernel_name(kernels[ki]),
                          against_reference, f->exact, against_fp32, f->bound);
                    if (against_fp32 > worst[fi]) worst[fi] = against_fp32;
                    const int avx512_based = kernels[ki] != ATTN_KERNEL_GENERIC &&
                                             kernels[ki] != ATTN_KERNEL_AVX2;
                    if (f->dtype == ATTN_DTYPE_Q8 && avx512_based && have_first)
                        CHECK(test_bitwise_equal(&out[0].view, &first.view),
                              "int8 %s T=%lld kernel %s (%s): the bits of the AVX-512 kernels",
                              s->name, (long long)length, attn_kernel_name(kernels[ki]),
                              attn_decode_kernel_path(kernels[ki], ATTN_DTYPE_Q8, ATTN_DTYPE_F32,
                                                      s->hq / s->hkv * s->tq));
                    if (avx512_based && !have_first) have_first = keep_copy(&first, &out[0], s);
                    test_tensor_free(&out[0]), test_tensor_free(&out[1]);
                }
                test_tensor_free(&reference), test_tensor_free(&first);
                attn_kv_cache_destroy(cache);
            }
            attn_kv_cache_destroy(exact);
            decode_inputs_free(&in);
            test_tensor_free(&expected);
        }
    for (int fi = 0; fi < COUNT_OF(formats); ++fi)
        printf("%s storage: worst relative error of decode vs fp32 storage = %.3g (bound %.0e)\n",
               formats[fi].name, worst[fi], formats[fi].bound);
}

/* bf16 queries against fp8 storage, groups of >= 5 rows: on the bf16 tiles where the registry
 * has them ("fp8 on bf16 tiles": each chunk widened exactly to bf16, the head's key scale on
 * the scores, its value scale on the output), elsewhere dequantised to fp32 with P rounded to
 * bf16. Every kernel choice against the reference on the stored values (fp32 queries holding
 * the same bf16 values, fp32 out) within bf16's rounding of P and of out, against the
 * kernels without tiles likewise, 1 = 2 threads bitwise; and the path named for each group. */
/* max |a - b| / (1 + |b|) over a rank-4 bf16 view a and an F32 or BF16 view b of its shape. */
static double bf16_relative_error(const attn_tensor *a, const attn_tensor *b) {
    double worst = 0;
    for (int64_t i = 0; i < a->shape[0]; ++i)
        for (int64_t j = 0; j < a->shape[1]; ++j)
            for (int64_t h = 0; h < a->shape[2]; ++h)
                for (int64_t d = 0; d < a->shape[3]; ++d) {
                    const double x = test_half_get4(a, i, j, h, d);
                    const double y = b->dtype == ATTN_DTYPE_F32 ? test_get4(b, i, j, h, d)
                                                                : test_half_get4(b, i, j, h, d);
                    const double e = fabs(x - y) / (1.0 + fabs(y));
                    if (!(e <= worst)) worst = e; /* NaN propagates */
                }
    return worst;
}

static void test_fp8_bf16_tiles(void) {
    const attn_kernel_choice kernels[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX512, ATTN_KERNEL_AMX,
                                          ATTN_KERNEL_AUTO};
    const double bound = 5e-3; /* bf16 out (2^-9) and bf16 P against fp32 (measured 1.8e-3) */
    /* the table's groups of >= 5 rows on pages of 48 (every chunk flushed at its page's end),
     * and groups whose accumulator leaves L1 on pages of 256, so that the tiles take up to 4
     * chunks' values at once from the widened rows */
    const shape_case large[] = {
        {"MLA 64 heads", 64, 1, 160, 128, 1, 1},
        {"GQA 40 rows", 40, 1, 96, 200, 1, 0},
    };
    const int cases = COUNT_OF(shapes) + COUNT_OF(large);
    /* the tiles (AMX, or VDPBF16PS on AMD) from the registry's tile_rows_fp8 on: 5 on AMX,
     * 1 with VDPBF16PS (small groups read fp8 in place there, score_chunk_tiles_fp8) */
    const attn_kernels *best = NULL;
    CHECK(attn_kernels_select(ATTN_KERNEL_AUTO, &best, NULL) == ATTN_OK, "AUTO registry");
    const int tiles = best != NULL && best->decode.score_chunk_tiles != NULL;
    const int least = tiles ? best->decode.tile_rows_fp8 : 0;
    CHECK(!tiles || (least >= 1 && (least == ATTN_DECODE_TILE_ROWS ||
                                    best->decode.score_chunk_tiles_fp8 != NULL)),
          "tile_rows_fp8 = %d: AMX's %d, or in-place fp8 kernels for smaller groups", least,
          ATTN_DECODE_TILE_ROWS);
    for (int64_t rows = 1; rows <= 40; ++rows) {
        const char *path =
            attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_BF16, rows);
        const int on_tiles = path != NULL && strcmp(path, "fp8 on bf16 tiles") == 0;
        CHECK(path != NULL && on_tiles == (tiles && rows >= least),
              "%lld rows of bf16 queries against fp8: %s", (long long)rows, path ? path : "(null)");
    }
    const char *fp32_queries =
        attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_F32, 16);
    CHECK(fp32_queries != NULL && strcmp(fp32_queries, "fp8 on bf16 tiles") != 0,
          "float32 queries are never rounded to bf16 for the tiles (%s)",
          fp32_queries ? fp32_queries : "(null)");
    double worst = 0;
    for (int si = 0; si < cases; ++si) {
        const shape_case *s = si < COUNT_OF(shapes) ? &shapes[si] : &large[si - COUNT_OF(shapes)];
        const int64_t page_size = si < COUNT_OF(shapes) ? 48 : 256;
        if (s->hq / s->hkv * s->tq < 5) continue; /* the groups of the tiles */
        for (int li = 0; li < COUNT_OF(lengths); ++li) {
            const int64_t length = lengths[li];
            if (length < s->tq) continue;
            decode_inputs in = decode_inputs_new(s, length, 700 + (uint64_t)(si * 10 + li));
            test_tensor k = in.k, q = in.q, v = in.v;
            test_half_tensor q16 = test_half_round(&in.q, ATTN_DTYPE_BF16); /* q: the same values */
            const float *head_scales = in.head_scales;
            attn_options options = in.options;
            if (li == 1) options.softcap = 4.0f; /* the key scale before the logit pipeline */
            const attn_execution execution = in.execution;
            attn_error error;
            for (int fi = 1; fi < COUNT_OF(formats); ++fi) { /* fp8 only */
                const format_case *f = &formats[fi];
                attn_kv_cache *cache = new_paged_cache(s, f->dtype, head_scales, page_size);
                CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view,
                                                  s->values_in_keys ? NULL : &v.view, &error),
                             ATTN_OK, &error, "append %s", f->name);
                test_tensor reference = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
                CHECK_STATUS(attn_reference_decode(cache, &q.view, &options, &reference.view, NULL,
                                                   &error),
                             ATTN_OK, &error, "reference %s", f->name);
                test_tensor shape_out = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
                test_half_tensor without_tiles = test_half_like(&shape_out, ATTN_DTYPE_BF16, 0);
                int have_without = 0;
                for (int ki = 0; ki < COUNT_OF(kernels); ++ki) {
                    if (!attn_kernel_available(kernels[ki])) continue;
                    test_half_tensor out[2];
                    for (int threads = 1; threads <= 2; ++threads) {
                        out[threads - 1] = test_half_like(&shape_out, ATTN_DTYPE_BF16, 0xffff);
                        attn_execution run = execution;
                        run.kernel = kernels[ki], run.num_threads = threads;
                        CHECK_STATUS(attn_decode(cache, &q16.view, &options, &out[threads - 1].view,
                                                 NULL, &run, &error),
                                     ATTN_OK, &error, "decode %s bf16 queries", f->name);
                    }
                    const double against_reference =
                        bf16_relative_error(&out[0].view, &reference.view);
                    double against_without = 0;
                    if (kernels[ki] == ATTN_KERNEL_AVX512) {
                        memcpy(without_tiles.allocation, out[0].allocation,
                               sizeof(uint16_t) * (size_t)(2 * s->tq * s->hq * s->dv));
                        have_without = 1;
                    } else if (have_without)
                        against_without = bf16_relative_error(&out[0].view, &without_tiles.view);
                    const char *path = attn_decode_kernel_path(kernels[ki], f->dtype, ATTN_DTYPE_BF16,
                                                               s->hq / s->hkv * s->tq);
                    CHECK(against_reference <= bound && against_without <= bound &&
                              memcmp(out[0].allocation, out[1].allocation,
                                     sizeof(uint16_t) * (size_t)(2 * s->tq * s->hq * s->dv)) == 0,
                          "%s %s T=%lld kernel %s (%s), bf16 queries: vs reference %.3g, vs the "
                          "AVX-512 kernels %.3g (<= %.1e), 1 = 2 threads bitwise",
                          f->name, s->name, (long long)length, attn_kernel_name(kernels[ki]),
                          path ? path : "?", against_reference, against_without, bound);
                    if (against_reference > worst) worst = against_reference;
                    free(out[0].allocation), free(out[1].allocation);
                }
                free(without_tiles.allocation);
                test_tensor_free(&reference), test_tensor_free(&shape_out);
                attn_kv_cache_destroy(cache);
            }
            free(q16.allocation);
            decode_inputs_free(&in);
        }
    }
    printf("fp8 storage, bf16 queries: worst relative error vs the reference = %.3g (bound %.1e)\n",
           worst, bound);
}

/* Prefix sharing (copy on write of a partial page), truncation and re-append keep each row's
 * elements and its int8 scale together: every sequence reads back what a fresh cache given
 * the same tokens reads back. */
static void test_pages_keep_scales(void) {
    for (int fi = 0; fi < COUNT_OF(formats); ++fi) {
        attn_kv_cache_config config = attn_kv_cache_config_default();
        config.sequences = 2, config.kv_heads = 2, config.key_dim = 8, config.value_dim = 6;
        config.capacity = 16, config.page_size = 4, config.dtype = formats[fi].dtype;
        attn_kv_cache *cache = NULL, *fresh = NULL;
        attn_error error;
        CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "paged");
        config.sequences = 1, config.page_size = 0;
        CHECK_STATUS(attn_kv_cache_create(&config, &fresh, &error), ATTN_OK, &error, "fresh");
        test_rng rng;
        test_rng_seed(&rng, 40 + (uint64_t)fi);
        test_tensor k = test_tensor_new(1, 12, 2, 8, TEST_LAYOUT_BTHD);
        test_tensor v = test_tensor_new(1, 12, 2, 6, TEST_LAYOUT_BTHD);
        test_tensor_fill_normal(&k, &rng, 2.0f), test_tensor_fill_normal(&v, &rng, 2.0f);
        attn_tensor first_k = k.view, first_v = v.view, last_k = k.view, last_v = v.view;
        first_k.shape[1] = first_v.shape[1] = 10; /* tokens 0..9 */
        last_k.shape[1] = last_v.shape[1] = 2;    /* tokens 10, 11 */
        last_k.data = (float *)k.view.data + 10 * k.view.stride[1];
        last_v.data = (float *)v.view.data + 10 * v.view.stride[1];
        attn_kv_cache_append(cache, 0, &first_k, &first_v, &error);
        CHECK_STATUS(attn_kv_cache_share_prefix(cache, 0, 1, 6, &error), ATTN_OK, &error, "share");
        attn_kv_cache_truncate(cache, 1, 5, &error); /* drop token 5 of the copied page */
        attn_tensor token5_k = k.view, token5_v = v.view;
        token5_k.shape[1] = token5_v.shape[1] = 1;
        token5_k.data = (float *)k.view.data + 5 * k.view.stride[1];
        token5_v.data = (float *)v.view.data + 5 * v.view.stride[1];
        attn_kv_cache_append(cache, 1, &token5_k, &token5_v, &error); /* and append it again */
        attn_kv_cache_append(cache, 1, &last_k, &last_v, &error);     /* 0..5, 10, 11 */
        attn_kv_cache_append(cache, 0, &last_k, &last_v, &error);     /* 0..11 */
        attn_kv_cache_append(fresh, 0, &k.view, &v.view, &error);
        test_tensor want_k, want_v, got_k, got_v;
        read_back(fresh, 0, 12, 2, 8, 6, &want_k, &want_v);
        read_back(cache, 0, 12, 2, 8, 6, &got_k, &got_v);
        int same = test_bitwise_equal(&got_k.view, &want_k.view) &&
                   test_bitwise_equal(&got_v.view, &want_v.view);
        test_tensor_free(&got_k), test_tensor_free(&got_v);
        read_back(cache, 1, 8, 2, 8, 6, &got_k, &got_v);
        for (int t = 0; t < 8; ++t) {
            const int source = t < 6 ? t : t + 4;
            for (int h = 0; h < 2; ++h) {
                for (int d = 0; d < 8; ++d)
                    same &= test_get4(&got_k.view, 0, t, h, d) == test_get4(&want_k.view, 0, source, h, d);
                for (int d = 0; d < 6; ++d)
                    same &= test_get4(&got_v.view, 0, t, h, d) == test_get4(&want_v.view, 0, source, h, d);
            }
        }
        CHECK(same, "%s: shared prefix, truncate and re-append read back as a fresh cache",
              formats[fi].name);
        test_tensor_free(&got_k), test_tensor_free(&got_v), test_tensor_free(&want_k);
        test_tensor_free(&want_v), test_tensor_free(&k), test_tensor_free(&v);
        attn_kv_cache_destroy(cache), attn_kv_cache_destroy(fresh);
    }
}

/* ---- errors and sizes ---- */
static void test_errors(void) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1, config.kv_heads = 2, config.key_dim = 8, config.value_dim = 4;
    config.capacity = 10, config.dtype = ATTN_DTYPE_Q8;
    CHECK(attn_kv_cache_bytes_per_token(&config) == 2 * (8 + 4) + 2 * 2 * sizeof(float),
          "int8 bytes per token: elements + one float scale per row");
    config.dtype = ATTN_DTYPE_FP8_E4M3;
    CHECK(attn_kv_cache_bytes_per_token(&config) == 2 * (8 + 4), "fp8 bytes per token");
    attn_error error;
    attn_kv_cache *cache = NULL;
    const float bad[2] = {1.0f, 0.0f}, good[2] = {1.0f, 2.0f};
    config.fp8_key_scales = bad;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "a zero per-head scale");
    CHECK(strstr(error.message, "fp8_key_scales[1]") != NULL, "message names the scale: %s",
          error.message);
    config.dtype = ATTN_DTYPE_Q8, config.fp8_key_scales = good;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "per-head scales on an int8 cache");
    config.fp8_key_scales = NULL;
    for (int fi = 0; fi < COUNT_OF(formats); ++fi) {
        config.dtype = formats[fi].dtype;
        CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "create");
        test_tensor k = test_tensor_new(1, 3, 2, 8, TEST_LAYOUT_BTHD);
        test_tensor v = test_tensor_new(1, 3, 2, 4, TEST_LAYOUT_BTHD);
        test_tensor_fill_all(&k, 1.0f), test_tensor_fill_all(&v, 1.0f);
        const float specials[2] = {NAN, INFINITY};
        for (int n = 0; n < 2; ++n) {
            ((float *)v.view.data)[2 * 2 * 4 + 5] = specials[n]; /* token 2, head 1, d 1 */
            CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, &v.view, &error),
                         ATTN_ERROR_INVALID_ARGUMENT, &error, "%s: non-finite value refused",
                         formats[fi].name);
            CHECK(attn_kv_cache_length(cache, 0) == 0 && strstr(error.message, "v[0, 2, 1, 1]"),
                  "%s: nothing written, the message names v[0, 2, 1, 1]: %s", formats[fi].name,
                  error.message);
        }
        attn_kv_cache_destroy(cache);
        test_tensor_free(&k), test_tensor_free(&v);
    }
}

/* int8 with 4 rows per task, whose P·V the loop runs one chunk late where the scores are on
 * the tiles (decode.c late_values), under a mask that empties whole chunks between allowed
 * ones: a window of 60 keys behind the query and two global key columns (2 and 5), so that
 * chunks 1.. before the window are skipped while chunk 0's P·V is held, and some splits have
 * no allowed key at all. Every AVX-512 based choice (late on the tiles, in order without them)
 * bitwise equal, within int8's operand rounding of the reference, 1 = 2 threads bitwise;
 * pages of 48 and 256, default splits and splits of 100. */
static void test_int8_late_values_with_gaps(void) {
    const shape_case *s = &shapes[1]; /* GQA, 4 rows */
    const int64_t length = 333;
    const int64_t globals[2] = {2, 5};
    const attn_kernel_choice kernels[] = {ATTN_KERNEL_AVX512, ATTN_KERNEL_AMX, ATTN_KERNEL_AUTO};
    for (int pi = 0; pi < 2; ++pi)
        for (int split = 0; split < 2; ++split) {
            const int64_t page_size = pi == 0 ? 48 : 256;
            decode_inputs in = decode_inputs_new(s, length, 900 + (uint64_t)(pi * 2 + split));
            in.options.window = 1, in.options.window_left = 60, in.options.window_right = -1;
            in.options.global_tokens = globals, in.options.global_token_count = 2;
            in.execution.tile_k = split == 0 ? 0 : 100;
            attn_error error;
            attn_kv_cache *cache = new_paged_cache(s, ATTN_DTYPE_Q8, NULL, page_size);
            CHECK_STATUS(attn_kv_cache_append(cache, 0, &in.k.view, &in.v.view, &error), ATTN_OK,
                         &error, "append int8");
            test_tensor reference = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
            CHECK_STATUS(attn_reference_decode(cache, &in.q.view, &in.options, &reference.view,
                                               NULL, &error),
                         ATTN_OK, &error, "reference int8 with gaps");
            test_tensor first = test_tensor_new(2, s->tq, s->hq, s->dv, TEST_LAYOUT_BTHD);
            int have_first = 0;
            for (int ki = 0; ki < COUNT_OF(kernels); ++ki) {
                if (!attn_kernel_available(kernels[ki])) continue;
                test_tensor out[2];
                decode_on_1_and_2_threads(cache, s, &in.q, &in.options, &in.execution, kernels[ki],
                                          out, "int8 with gaps");
                const double error_vs_reference =
                    test_max_relative_error(&out[0].view, &reference.view);
                CHECK(error_vs_reference <= formats[0].exact &&
                          test_bitwise_equal(&out[0].view, &out[1].view) &&
                          (!have_first || test_bitwise_equal(&out[0].view, &first.view)),
                      "int8 with empty chunks, pages of %lld, tile_k %lld, kernel %s (%s): vs "
                      "reference %.3g <= %.0e, 1 = 2 threads and the AVX-512 bits",
                      (long long)page_size, (long long)in.execution.tile_k,
                      attn_kernel_name(kernels[ki]),
                      attn_decode_kernel_path(kernels[ki], ATTN_DTYPE_Q8, ATTN_DTYPE_F32, 4),
                      error_vs_reference, formats[0].exact);
                if (!have_first) have_first = keep_copy(&first, &out[0], s);
                test_tensor_free(&out[0]), test_tensor_free(&out[1]);
            }
            test_tensor_free(&reference), test_tensor_free(&first);
            attn_kv_cache_destroy(cache);
            decode_inputs_free(&in);
        }
}

/* Where the AMX registry has the int8 tiles, int8 decode runs on them: scores for every group,
 * P·V too from ATTN_DECODE_Q8_TILE_VALUE_ROWS (5) rows; fp8 never does. */
static void test_int8_tile_path(void) {
    const char *four = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_Q8, ATTN_DTYPE_F32, 4);
    const char *eight = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_Q8, ATTN_DTYPE_F32, 8);
    const char *fp8 = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_F32, 8);
    CHECK(four != NULL && eight != NULL && fp8 != NULL, "attn_decode_kernel_path answers for int8");
    if (four == NULL || eight == NULL || fp8 == NULL) return;
    CHECK(strstr(fp8, "int8") == NULL, "fp8 never runs on the int8 tiles (%s)", fp8);
    const int tiles = strcmp(eight, "int8 tiles") == 0;
    printf("int8 decode: 4 rows %s, 8 rows %s\n", four, eight);
    if (!tiles) {
        CHECK(strcmp(four, "8-bit in place") == 0 && strcmp(eight, "8-bit in place") == 0,
              "without AMX-INT8, int8 reads in place (%s, %s)", four, eight);
        return;
    }
    CHECK(strcmp(four, "int8 tile scores") == 0, "4 rows: scores on the tiles (%s)", four);
    for (int64_t rows = 1; rows <= 130; rows += 3) {
        const char *path = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_Q8, ATTN_DTYPE_BF16, rows);
        CHECK(path != NULL && strcmp(path, rows >= 5 ? "int8 tiles" : "int8 tile scores") == 0,
              "%lld rows of int8: %s", (long long)rows, path ? path : "(null)");
    }
}

int main(void) {
    test_fp8_codes(&formats[1]);
    test_fp8_codes(&formats[2]);
    test_int8_rows();
    test_pages_keep_scales();
    test_decode_table();
    test_int8_tile_path();
    test_int8_late_values_with_gaps();
    test_fp8_bf16_tiles();
    test_errors();
    return test_finish();
}
