/*
 * test_decode_lowp.c — attn_decode with BF16 / F16 queries and output, against bf16, fp16 and
 * fp32 caches, for every registry the CPU runs: against attn_reference_forward (float64) on the
 * same values (the cache read back, the queries widened), with the forward's 16-bit bound
 * (tests/test_forward_lowp.c, docs/precision.md):
 *   |O - O_ref| <= u |O_ref| + (u + 2.1 L + 1e-5) A   (+ Tk * 2^-25 * max|v| for fp16)
 * u of the queries' type, A = sum_j p_j |v_j| / l (the reference on |V|), L the fp32 logit
 * error bound; GQA, paged and contiguous caches, several splits (execution.tile_k), causal
 * generation rows; bitwise identical for 1 and 2 threads; mixed q / out dtypes are refused.
 * Groups of >= 5 rows with bf16 queries against a bf16 cache run on the bf16 tiles where the
 * CPU has AMX (registry.h score_chunk_tiles; the same bound: P is rounded to bf16 for P·V
 * on every path, the products are exact): MQA, MLA's latent cache (576 / 512), odd dims,
 * chunks cut by pages, soft-cap, window, P · V of several chunks at once (long splits, a split
 * starting inside a page); test_tile_path_taken checks that they take that path.
 * test_p_rounded_before_pv: P rounded to the queries' type before P · V, bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "cache/decode_path.h"
#include "test_support.h"

typedef struct decode_case {
    const char *name;
    int64_t B, T, Tq, Hq, Hkv, Dk, Dv, page_size;
    attn_dtype cache_dtype;
    int split_tokens;
    int values_in_keys;  /* MLA's latent cache: value e of a token = its key element e */
    float softcap;
    int64_t window_left; /* 0 = no window */
} decode_case;

static const decode_case cases[] = {
    {"bf16 cache, GQA, paged 16", 2, 150, 1, 8, 2, 64, 64, 16, ATTN_DTYPE_BF16, 0, 0, 0.0f, 0},
    {"fp16 cache, MQA, 3 rows", 1, 97, 3, 4, 1, 32, 24, 0, ATTN_DTYPE_F16, 32, 0, 0.0f, 0},
    {"fp32 cache, MHA", 2, 70, 2, 2, 2, 16, 16, 8, ATTN_DTYPE_F32, 0, 0, 0.0f, 0},
    {"bf16 cache, splits of 8", 1, 65, 1, 4, 2, 128, 128, 4, ATTN_DTYPE_BF16, 8, 0, 0.0f, 0},
    /* groups of >= ATTN_DECODE_TILE_ROWS rows: bf16 queries on the bf16 tiles (AMX) where the
     * CPU has them: MQA, chunks cut by pages of 48, MLA's latent cache (576 / 512 inside the
     * keys), dims that are no multiple of 32 or 16, 3 query rows (a last row block of 4),
     * 8 and 6 rows, soft-cap and window */
    {"bf16 MQA 32, paged 48", 1, 300, 1, 32, 1, 128, 128, 48, ATTN_DTYPE_BF16, 0, 0, 0.0f, 0},
    {"bf16 MLA latent 16 heads", 1, 200, 1, 16, 1, 576, 512, 64, ATTN_DTYPE_BF16, 0, 1, 0.0f, 0},
    {"bf16 MQA 12 x Tq 3, D=40/24", 2, 101, 3, 12, 1, 40, 24, 0, ATTN_DTYPE_BF16, 64, 0, 0.0f, 0},
    {"bf16 group 8, D=72/136", 1, 150, 1, 16, 2, 72, 136, 16, ATTN_DTYPE_BF16, 0, 0, 0.0f, 0},
    {"bf16 group 6, D=48/80", 1, 90, 1, 12, 2, 48, 80, 0, ATTN_DTYPE_BF16, 0, 0, 0.0f, 0},
    {"bf16 group 16, soft-cap", 1, 130, 2, 16, 2, 64, 64, 32, ATTN_DTYPE_BF16, 0, 0, 3.0f, 0},
    {"bf16 MQA 32, window 70", 1, 260, 1, 32, 1, 128, 96, 0, ATTN_DTYPE_BF16, 64, 0, 0.0f, 70},
    /* P · V of up to 4 chunks at once on the tiles (accumulators over 24 KiB): long splits, a
     * split that starts inside a page of 256 (a short chunk at the page's end), a window that
     * cuts chunks */
    {"bf16 MQA 32 D=128/256, 4-chunk", 1, 700, 1, 32, 1, 128, 256, 0, ATTN_DTYPE_BF16, 512, 0, 0.0f, 0},
    {"bf16 MLA latent, splits 300", 1, 600, 2, 16, 1, 576, 512, 256, ATTN_DTYPE_BF16, 300, 1, 0.0f, 0},
    {"bf16 group 16 x Tq 2, window", 2, 900, 2, 16, 1, 64, 200, 0, ATTN_DTYPE_BF16, 1024, 0, 0.0f, 200},
};

static const attn_kernel_choice kernel_choices[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_GENERIC,
                                                    ATTN_KERNEL_AVX512_BF16, ATTN_KERNEL_AMX};

static void run_case(const decode_case *c, attn_dtype dtype, uint64_t seed) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
    const double unit = dtype == ATTN_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    test_rng rng;
    test_rng_seed(&rng, seed);
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = c->B, config.kv_heads = c->Hkv, config.key_dim = c->Dk;
    config.value_dim = c->Dv, config.dtype = c->cache_dtype, config.capacity = c->T;
    config.page_size = c->page_size, config.values_in_keys = c->values_in_keys;
    attn_kv_cache *cache = NULL;
    attn_error error = {0};
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s: cache", c->name);
    test_tensor k = test_tensor_new(c->B, c->T, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, TEST_LAYOUT_PADDED);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, c->values_in_keys ? NULL : &v.view,
                                      &error),
                 ATTN_OK, &error, "%s: append", c->name);
    /* what the cache holds, read back as fp32, and |V| */
    for (int64_t b = 0; b < c->B; ++b) {
        attn_tensor kb = k.view, vb = v.view;
        kb.data = (float *)k.view.data + b * k.view.stride[0];
        vb.data = (float *)v.view.data + b * v.view.stride[0];
        kb.shape[0] = vb.shape[0] = 1;
        CHECK_STATUS(attn_kv_cache_read(cache, b, 0, &kb, c->values_in_keys ? NULL : &vb, &error),
                     ATTN_OK, &error, "read");
        if (c->values_in_keys) /* the values are the first Dv elements of the stored keys */
            for (int64_t t = 0; t < c->T; ++t)
                for (int64_t h = 0; h < c->Hkv; ++h)
                    for (int64_t e = 0; e < c->Dv; ++e)
                        ((float *)v.view.data)[b * v.view.stride[0] + t * v.view.stride[1] +
                                               h * v.view.stride[2] + e] =
                            test_get4(&k.view, b, t, h, e);
    }
    test_tensor absolute_v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    double v_max = 0.0;
    for (int64_t n = 0; n < v.allocation_floats; ++n) {
        absolute_v.allocation[n] = fabsf(v.allocation[n]);
        v_max = fmax(v_max, absolute_v.allocation[n]);
    }
    test_half_tensor q16 = test_half_round(&q, dtype);

    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.softcap = c->softcap;
    if (c->window_left > 0) options.window = 1, options.window_left = c->window_left;
    test_tensor expected = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor absolute = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &expected.view, NULL,
                                        &error),
                 ATTN_OK, &error, "%s: reference", c->name);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &absolute_v.view, &options,
                                        &absolute.view, NULL, &error),
                 ATTN_OK, &error, "%s: reference on |V|", c->name);
    const double scale = 1.0 / sqrt((double)c->Dk);
    const double largest_sum = test_largest_abs_dot(&q.view, &k.view);
    const double logit_error = (c->Dk + 2) * ldexp(scale * largest_sum, -24) +
                               ldexp(scale * largest_sum, -22);
    const double subnormal_p = dtype == ATTN_DTYPE_F16 ? c->T * ldexp(v_max, -25) : 0.0;

    for (size_t kc = 0; kc < sizeof kernel_choices / sizeof *kernel_choices; ++kc) {
        if (!attn_kernel_available(kernel_choices[kc])) continue;
        const char *name = attn_kernel_choice_name(kernel_choices[kc]);
        test_half_tensor out[2];
        for (int t = 0; t < 2; ++t) {
            out[t] = test_half_like(&expected, dtype, 0x7bcd);
            attn_execution execution = attn_execution_default();
            execution.kernel = kernel_choices[kc];
            execution.num_threads = t + 1;
            execution.tile_k = c->split_tokens;
            CHECK_STATUS(attn_decode(cache, &q16.view, &options, &out[t].view, NULL, &execution,
                                     &error),
                         ATTN_OK, &error, "%s %s [%s]: decode, %d threads", c->name, type, name, t + 1);
        }
        int failures = 0;
        double worst = 0.0;
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t i = 0; i < c->Tq; ++i)
                for (int64_t h = 0; h < c->Hq; ++h)
                    for (int64_t e = 0; e < c->Dv; ++e) {
                        const double reference = test_get4(&expected.view, b, i, h, e);
                        const double got = test_half_get4(&out[0].view, b, i, h, e);
                        const double bound = unit * fabs(reference) + subnormal_p +
                                             (unit + 2.1 * logit_error + 1e-5) *
                                                 test_get4(&absolute.view, b, i, h, e);
                        failures += !(fabs(got - reference) <= bound);
                        if (bound > 0 && fabs(got - reference) / bound > worst)
                            worst = fabs(got - reference) / bound;
                    }
        printf("%-28s %s %-12s O error <= %.2f of its bound\n", c->name, type, name, worst);
        CHECK(failures == 0, "%s %s [%s]: O within the 16-bit bound (%d outside, worst %.2f)",
              c->name, type, name, failures, worst);
        CHECK(memcmp(out[0].allocation, out[1].allocation,
                     (size_t)expected.allocation_floats * sizeof(uint16_t)) == 0,
              "%s %s [%s]: bitwise identical for 1 and 2 threads", c->name, type, name);
        for (int t = 0; t < 2; ++t) free(out[t].allocation);
    }
    /* q bf16 with a float32 out: refused, naming out */
    attn_status status = attn_decode(cache, &q16.view, &options, &expected.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "%s %s: float32 out", c->name, type);
    CHECK(strstr(error.message, "out.dtype") != NULL, "message names out.dtype: %s", error.message);

    free(q16.allocation);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&q), test_tensor_free(&absolute_v);
    test_tensor_free(&expected), test_tensor_free(&absolute);
    attn_kv_cache_destroy(cache);
}

/* IEEE half storage: groups of <= ATTN_DECODE_FUSED_ROWS rows read it in place where the
 * registry has score_chunk_f16 (the cases above then test them: the same bits as the
 * converted path), larger groups convert each chunk. */
static void test_f16_path_taken(void) {
    const attn_kernels *best = NULL;
    CHECK(attn_kernels_select(ATTN_KERNEL_AUTO, &best, NULL) == ATTN_OK && best != NULL,
          "AUTO registry");
    if (best == NULL) return;
    const char *small = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_F16, ATTN_DTYPE_F32, 4);
    const char *large = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_F16, ATTN_DTYPE_F32, 8);
    const char *want = best->decode.score_chunk_f16 != NULL ? "f16 in place" : "fp32 rows";
    CHECK(small != NULL && strcmp(small, want) == 0, "f16, 4 rows: %s (%s expected on %s)",
          small != NULL ? small : "NULL", want, best->name);
    CHECK(large != NULL && strcmp(large, "fp32 rows") == 0, "f16, 8 rows converted (%s)",
          large != NULL ? large : "NULL");
}

/* Where the CPU has AMX, bf16 queries of a large group against bf16 storage run on the bf16
 * tiles (the cases above then test them); float32 queries never do (they are not rounded). */
static void test_tile_path_taken(void) {
    const char *mqa = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 32);
    const char *f32 = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 32);
    const char *small = attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 4);
    CHECK(mqa != NULL && f32 != NULL && small != NULL, "attn_decode_kernel_path answers for AUTO");
    CHECK(attn_decode_kernel_path(ATTN_KERNEL_AUTO, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 0) == NULL,
          "attn_decode_kernel_path: rows = 0 gives NULL");
    if (mqa == NULL || f32 == NULL || small == NULL) return;
    CHECK(strcmp(f32, "bf16 tiles") != 0, "float32 queries never run on the bf16 tiles (%s)", f32);
    CHECK(strcmp(small, "bf16 in place") == 0, "4 rows read bf16 in place (%s)", small);
    if (!attn_kernel_available(ATTN_KERNEL_AMX)) {
        /* VDPBF16PS in the tile slots where it runs at the FMA's rate (AMD), else none */
        const attn_kernels *best = NULL;
        CHECK(attn_kernels_select(ATTN_KERNEL_AUTO, &best, NULL) == ATTN_OK, "AUTO registry");
        const int dpbf16 = best != NULL && best->decode.score_chunk_tiles != NULL;
        printf("no AMX on this CPU or build: the bf16 tile cases ran on %s\n",
               dpbf16 ? "the VDPBF16PS tile slots" : "the other kernels");
        CHECK(dpbf16 == (strcmp(mqa, "bf16 tiles") == 0),
              "MQA (32 rows) on bf16 tiles exactly when the registry has them (%s)", mqa);
        CHECK(!dpbf16 || best->decode.tile_rows_bf16 == ATTN_DECODE_TILE_ROWS,
              "bf16 groups of <= 4 rows stay in place (tile_rows_bf16 = %d)",
              dpbf16 ? best->decode.tile_rows_bf16 : 0);
        return;
    }
    const attn_kernels *amx = NULL;
    CHECK(attn_kernels_select(ATTN_KERNEL_AMX, &amx, NULL) == ATTN_OK &&
              amx->decode.score_chunk_tiles != NULL && amx->decode.accumulate_chunk_tiles != NULL,
          "the AMX registry has the decode tile slots");
    CHECK(strcmp(mqa, "bf16 tiles") == 0, "MQA (32 rows) with AMX runs on bf16 tiles (%s)", mqa);
    for (int64_t rows = ATTN_DECODE_TILE_ROWS; rows <= 160; rows += 19)
        CHECK(strcmp(attn_decode_kernel_path(ATTN_KERNEL_AMX, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16,
                                             rows),
                     "bf16 tiles") == 0,
              "%lld rows with AMX run on bf16 tiles", (long long)rows);
}

/* P is rounded to the queries' type before P · V on every decode path (as attn_forward does),
 * shown where it decides the output's bits: two keys, logits 0 and x (p = 1 and exp(x), just
 * below a rounding midpoint of the type), values 0 and 1, so that O = round(exp x) /
 * (1 + exp x) and the unrounded exp(x) / (1 + exp x) fall on either side of an output
 * midpoint. Float32 cache; groups of 1 (rows read in place) and 16 (the large-group
 * kernels); every registry this CPU runs; the expected bits from double precision. */
static void test_p_rounded_before_pv(attn_dtype dtype) {
    const int bf16 = dtype == ATTN_DTYPE_BF16;
    /* p just below the midpoint under 1: 1 - 3 * 2^-10 (bf16), 1 - 3 * 2^-13 (fp16) */
    const double p = 1.0 - 3.0 * ldexp(1.0, bf16 ? -10 : -13);
    const float x = (float)log(p);
    const double p_used = exp((double)x), p_rounded = attn_lowp_round_float((float)p_used, bf16);
    const float want = attn_lowp_round_float((float)(p_rounded / (1.0 + p_used)), bf16);
    const float unrounded = attn_lowp_round_float((float)(p_used / (1.0 + p_used)), bf16);
    CHECK(want != unrounded, "%s: the case separates rounded and unrounded P (%.9g, %.9g)",
          bf16 ? "bf16" : "fp16", (double)want, (double)unrounded);
    static const int groups[] = {1, 16};
    static const attn_kernel_choice choices[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX2,
                                                 ATTN_KERNEL_AVX512, ATTN_KERNEL_AVX512_BF16,
                                                 ATTN_KERNEL_AMX};
    for (size_t g = 0; g < sizeof groups / sizeof *groups; ++g) {
        const int64_t Hq = groups[g];
        attn_kv_cache_config config = attn_kv_cache_config_default();
        config.sequences = 1, config.kv_heads = 1, config.key_dim = 2, config.value_dim = 2;
        config.dtype = ATTN_DTYPE_F32, config.capacity = 2;
        attn_kv_cache *cache = NULL;
        attn_error error;
        CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "create");
        float keys[4] = {0.0f, 0.0f, x, 0.0f}, values[4] = {0.0f, 0.0f, 1.0f, 1.0f};
        const int64_t kv_shape[4] = {1, 2, 1, 2}, q_shape[4] = {1, 1, Hq, 2};
        attn_tensor k = attn_tensor_contiguous(keys, ATTN_DTYPE_F32, 4, kv_shape);
        attn_tensor v = attn_tensor_contiguous(values, ATTN_DTYPE_F32, 4, kv_shape);
        CHECK_STATUS(attn_kv_cache_append(cache, 0, &k, &v, &error), ATTN_OK, &error, "append");
        uint16_t q_bits[32], out_bits[32];
        for (int64_t e = 0; e < Hq * 2; ++e) q_bits[e] = e % 2 == 0 ? (bf16 ? 0x3f80 : 0x3c00) : 0;
        attn_tensor q = attn_tensor_contiguous(q_bits, dtype, 4, q_shape);
        attn_tensor out = attn_tensor_contiguous(out_bits, dtype, 4, q_shape);
        attn_options options = attn_options_default();
        options.custom_scale = 1, options.scale = 1.0f;
        for (size_t c = 0; c < sizeof choices / sizeof *choices; ++c) {
            if (!attn_kernel_available(choices[c])) continue;
            attn_execution execution = attn_execution_default();
            execution.kernel = choices[c];
            CHECK_STATUS(attn_decode(cache, &q, &options, &out, NULL, &execution, &error),
                         ATTN_OK, &error, "decode");
            int wrong = 0;
            for (int64_t e = 0; e < Hq * 2; ++e) {
                const float got = bf16 ? attn_lowp_bf16_to_float(out_bits[e])
                                       : attn_f16_to_float(out_bits[e]);
                wrong += got != want;
            }
            CHECK(wrong == 0, "%s group %lld [%s]: O = round(P) . V / l, %.9g expected "
                  "(%.9g with P unrounded): %d elements differ", bf16 ? "bf16" : "fp16",
                  (long long)Hq, attn_kernel_choice_name(choices[c]), (double)want,
                  (double)unrounded, wrong);
        }
        attn_kv_cache_destroy(cache);
    }
}

int main(void) {
    test_tile_path_taken();
    test_f16_path_taken();
    test_p_rounded_before_pv(ATTN_DTYPE_BF16);
    test_p_rounded_before_pv(ATTN_DTYPE_F16);
    for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) {
        run_case(&cases[n], ATTN_DTYPE_BF16, 700 + n);
        run_case(&cases[n], ATTN_DTYPE_F16, 800 + n);
    }
    return test_finish();
}
