/*
 * test_serve_kvcache_q8.c — caller-owned 8-bit KV caches (attn_forward_with_kvcache with
 * Q8 / FP8_E4M3 / FP8_E5M2 storage, attn.h attn_kv_cache_view k_scale / v_scale), over
 * tables of cases:
 *  - caller-owned equals library-owned: the same float K/V appended in the same rounds to an
 *    attn_kv_cache and to the caller's pool (contiguous, paged in order and shuffled, row
 *    scales [page, slot, head] and a [page, head, slot] view, fp8 with and without per-head
 *    scales); every stored value equals the library's read-back and this file's own
 *    dequantisation of the caller's bytes, and attention (with an append of Tq tokens in
 *    the same call) is bitwise that of attn_decode for 1, 2 and 3 threads;
 *  - chunked prefill with append in chunks of 1, 7 and 512: each chunk within float
 *    rounding (int8: its int16 operands) of the double-precision oracle on the dequantised
 *    cache, and within the format's documented bound (docs/inference.md) of the oracle on
 *    the float32 K/V;
 *  - errors (missing, misshapen or invalid scales, scales for 16-bit storage, a
 *    non-finite new token, a version-1 view, capacity, scales or cache rows an append would
 *    write at one address: a zero stride, k_scale = v_scale, scales inside the cache; new rows
 *    inside the scales or the codes they are appended into) leave the cache and its scales
 *    byte for byte as they were, with a message naming the argument and the value; a
 *    version-1 view (no scale fields) of float32 storage is still accepted, its fields unread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/decode_path.h"
#include "test_support.h"

#define COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))

typedef struct format_case {
    attn_dtype dtype;
    const char *name;
    int exponent_bits; /* fp8 */
    double bound;      /* docs/inference.md: vs float32 storage, rows with >= 64 keys */
    double few_keys;   /* likewise, every row (a causal prefill's first rows see 1..63 keys) */
    double exact;      /* vs the oracle on the dequantised cache */
} format_case;

/* docs/inference.md's bounds; the first rows of a causal prefill, which attend to a handful
 * of keys, average fewer rounding errors (one key: the stored value itself). */
static const format_case formats[] = {
    {ATTN_DTYPE_Q8, "int8", 0, 3e-2, 3e-2, 2e-4},
    {ATTN_DTYPE_FP8_E4M3, "fp8_e4m3", 4, 7e-2, 2e-1, 2e-5},
    {ATTN_DTYPE_FP8_E5M2, "fp8_e5m2", 5, 1.5e-1, 4e-1, 2e-5},
};

/* The worst errors measured per format (printed for docs/inference.md): against the stored
 * values, fp32 on rows with >= 64 keys, fp32 on every row. */
static double worst[3][3];

/* Rows [first, T) of a [B, T, H, D] tensor. */
static attn_tensor rows_from(const test_tensor *t, int64_t first) {
    attn_tensor view = t->view;
    view.data = t->allocation + first * t->view.stride[1];
    view.shape[1] -= first;
    return view;
}

/* ---- a caller-owned 8-bit pool: elements [pages, ps, H, D], scales ---- */
typedef struct q8_pool {
    attn_tensor k, v;             /* 1-byte elements */
    attn_tensor k_scale, v_scale; /* Q8: rank 3 [pages, ps, H] views; FP8: rank 1 [H] */
    unsigned char *k_bytes, *v_bytes;
    float *k_scales, *v_scales;
    size_t element_bytes[2], scale_floats;
    int head_major; /* Q8 scales stored [pages, H, ps] (the view's strides say so) */
} q8_pool;

static q8_pool q8_pool_new(attn_dtype dtype, int64_t pages, int64_t ps, int64_t H, int64_t Dk,
                           int64_t Dv, int head_major, const float *head_scales) {
    q8_pool p;
    memset(&p, 0, sizeof p);
    p.element_bytes[0] = (size_t)(pages * ps * H * Dk), p.element_bytes[1] = (size_t)(pages * ps * H * Dv);
    p.k_bytes = malloc(p.element_bytes[0]), p.v_bytes = malloc(p.element_bytes[1]);
    memset(p.k_bytes, 0x7f, p.element_bytes[0]), memset(p.v_bytes, 0x7f, p.element_bytes[1]);
    const int64_t ks[4] = {pages, ps, H, Dk}, vs[4] = {pages, ps, H, Dv};
    p.k = attn_tensor_contiguous(p.k_bytes, dtype, 4, ks);
    p.v = attn_tensor_contiguous(p.v_bytes, dtype, 4, vs);
    p.head_major = head_major;
    if (dtype == ATTN_DTYPE_Q8) {
        p.scale_floats = (size_t)(pages * ps * H);
        p.k_scales = malloc(p.scale_floats * 4), p.v_scales = malloc(p.scale_floats * 4);
        for (size_t e = 0; e < p.scale_floats; ++e) p.k_scales[e] = p.v_scales[e] = NAN;
        const int64_t shape[3] = {pages, ps, H};
        p.k_scale = attn_tensor_contiguous(p.k_scales, ATTN_DTYPE_F32, 3, shape);
        if (head_major) p.k_scale.stride[1] = 1, p.k_scale.stride[2] = ps;
        p.v_scale = p.k_scale;
        p.v_scale.data = p.v_scales;
    } else if (head_scales != NULL) {
        p.scale_floats = (size_t)H;
        p.k_scales = malloc((size_t)H * 4), p.v_scales = malloc((size_t)H * 4);
        for (int64_t h = 0; h < H; ++h) p.k_scales[h] = head_scales[h], p.v_scales[h] = 2.0f * head_scales[h];
        p.k_scale = attn_tensor_contiguous(p.k_scales, ATTN_DTYPE_F32, 1, &H);
        p.v_scale = attn_tensor_contiguous(p.v_scales, ATTN_DTYPE_F32, 1, &H);
    }
    return p;
}

static void q8_pool_free(q8_pool *p) {
    free(p->k_bytes), free(p->v_bytes), free(p->k_scales), free(p->v_scales);
}

static attn_kv_cache_view q8_view(q8_pool *p, const attn_tensor *table, const int32_t *seqlens) {
    const int scaled = p->k_scales != NULL;
    attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, &p->k, &p->v, table, seqlens,
                               scaled ? &p->k_scale : NULL, scaled ? &p->v_scale : NULL};
    return view;
}

/* This file's own reading of stored row (page, slot, h) of keys (values = 1): dequantised
 * by the format's definition, independent of libattn. */
static void dequantise_row(const format_case *f, const q8_pool *p, int values, int64_t page,
                           int64_t slot, int64_t h, float *row) {
    const attn_tensor *t = values ? &p->v : &p->k;
    const int64_t D = t->shape[3];
    const unsigned char *codes =
        (const unsigned char *)t->data + page * t->stride[0] + slot * t->stride[1] + h * t->stride[2];
    double factor = 1.0;
    if (f->dtype == ATTN_DTYPE_Q8) {
        const attn_tensor *s = values ? &p->v_scale : &p->k_scale;
        factor = ((const float *)s->data)[page * s->stride[0] + slot * s->stride[1] + h * s->stride[2]];
    } else if (p->k_scales != NULL) {
        factor = (values ? p->v_scales : p->k_scales)[h];
    }
    for (int64_t d = 0; d < D; ++d) {
        const double q = f->dtype == ATTN_DTYPE_Q8 ? (double)(signed char)codes[d]
                                                   : test_fp8_value(f->exponent_bits, codes[d]);
        row[d] = (float)(factor * q);
    }
}

/* Every stored token of sequence b (pages from `table`, ps tokens each) dequantised into
 * K [1, length, H, Dk], V [1, length, H, Dv]. */
static void dequantise_sequence(const format_case *f, const q8_pool *p, const int32_t *table_row,
                                int64_t ps, int64_t length, test_tensor *K, test_tensor *V) {
    const int64_t H = p->k.shape[2], Dk = p->k.shape[3], Dv = p->v.shape[3];
    for (int64_t t = 0; t < length; ++t)
        for (int64_t h = 0; h < H; ++h) {
            dequantise_row(f, p, 0, table_row[t / ps], t % ps, h, K->allocation + (t * H + h) * Dk);
            dequantise_row(f, p, 1, table_row[t / ps], t % ps, h, V->allocation + (t * H + h) * Dv);
        }
}

static attn_options causal_options(int64_t window_left, float softcap) {
    attn_options o = attn_options_default();
    o.causal = 1;
    o.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (window_left >= 0) o.window = 1, o.window_left = window_left, o.window_right = -1;
    o.softcap = softcap;
    return o;
}

/* Appends K/V tokens [first, first + count) of sequence b (rows of kk [1, T, H, D]) to the
 * caller's cache through a one-sequence view (block-table row b, or row b of a contiguous
 * pool), with a one-token query. */
static attn_status append_one(q8_pool *p, const int32_t *table, int64_t max_pages, int paged, int64_t b,
                              int32_t *held, const test_tensor *kk, const test_tensor *vv, int64_t first,
                              int64_t count, int64_t Hq, attn_error *error) {
    q8_pool row = *p;
    if (!paged) { /* row b of [B, S_max, ...] */
        row.k.data = (char *)p->k.data + b * p->k.stride[0], row.k.shape[0] = 1;
        row.v.data = (char *)p->v.data + b * p->v.stride[0], row.v.shape[0] = 1;
        if (p->k.dtype == ATTN_DTYPE_Q8) {
            row.k_scale.data = (float *)p->k_scale.data + b * p->k_scale.stride[0], row.k_scale.shape[0] = 1;
            row.v_scale.data = (float *)p->v_scale.data + b * p->v_scale.stride[0], row.v_scale.shape[0] = 1;
        }
    }
    const int64_t tshape[2] = {1, max_pages};
    attn_tensor table_row = attn_tensor_contiguous((void *)(table + b * max_pages), ATTN_DTYPE_I32, 2, tshape);
    attn_kv_cache_view view = q8_view(&row, paged ? &table_row : NULL, held);
    attn_tensor kn = kk->view, vn = vv->view;
    kn.data = kk->allocation + first * kk->view.stride[1], kn.shape[1] = count;
    vn.data = vv->allocation + first * vv->view.stride[1], vn.shape[1] = count;
    const int64_t Dk = p->k.shape[3], Dv = p->v.shape[3];
    test_tensor q = test_tensor_new(1, 1, Hq, Dk, TEST_LAYOUT_BTHD), out = test_tensor_new(1, 1, Hq, Dv, TEST_LAYOUT_BTHD);
    test_tensor_fill_all(&q, 0.5f);
    attn_kv_append append = {&kn, &vn, NULL, NULL, ATTN_ROPE_HALF};
    attn_options options = causal_options(-1, 0.0f);
    const attn_status status = attn_forward_with_kvcache(&q.view, &view, &append, &options, &out.view, NULL,
                                                         NULL, error);
    test_tensor_free(&q), test_tensor_free(&out);
    return status;
}

/* ---- 1. caller-owned = library-owned ---- */
typedef struct same_case {
    const char *name;
    int64_t B, Hq, Hkv, Dk, Dv, capacity, page_size; /* page_size 0 = contiguous */
    int lengths[3];
    int64_t Tq;        /* queries = tokens appended in the compared call */
    int shuffled;      /* block table in a random page order */
    int head_major;    /* Q8 scales as a [page, head, slot] view */
    int head_scales;   /* fp8 per-head scales */
    int64_t window_left;
    float softcap;
    int bf16_queries; /* q and out bf16 (fp8, >= 5 rows: the bf16 tiles where AMX runs) */
} same_case;

static const same_case same_cases[] = {
    {"paged 16 in order, GQA 4", 3, 8, 2, 64, 64, 300, 16, {150, 37, 290}, 1, 0, 0, 1, -1, 0.0f, 0},
    {"paged 16 shuffled, GQA 4, Tq 4", 3, 8, 2, 64, 64, 300, 16, {150, 5, 291}, 4, 1, 0, 1, -1, 0.0f, 0},
    {"paged 8 shuffled, head-major scales, MQA, window", 2, 8, 1, 32, 16, 200, 8, {190, 41}, 2, 1, 1, 0, 30, 0.0f, 0},
    {"contiguous, GQA 8 (fp8 dequantised per chunk), soft-cap", 2, 16, 2, 32, 32, 180, 0, {170, 12}, 1, 0, 0, 1, -1, 5.0f, 0},
    {"contiguous, head-major scales, MHA", 3, 2, 2, 16, 16, 70, 0, {1, 66, 20}, 3, 0, 1, 0, -1, 0.0f, 0},
    {"paged 64 shuffled, MQA 16, bf16 queries", 2, 16, 1, 64, 48, 300, 64, {290, 77}, 1, 1, 0, 1, -1, 0.0f, 1},
    {"contiguous, GQA 8, Tq 2, bf16 queries, soft-cap", 2, 8, 2, 32, 32, 180, 0, {170, 12}, 2, 0, 0, 1, -1, 5.0f, 1},
    /* B x Hkv >= 16, splits above 1024 keys: the heads of a split together chunk by chunk
     * (decode.c run_split_together), or on the tiles' paths in steps (run_split_stepped;
     * int8's late P · V and the tiles' pending chunks at a step's end) */
    {"paged 16 in order, GQA 2, long (several splits)", 3, 16, 8, 32, 32, 2600, 16, {2500, 1100, 300}, 1, 0, 0, 1, -1, 0.0f, 0},
    {"paged 64 shuffled, GQA 6, long, bf16 queries (several splits)", 3, 48, 8, 32, 32, 2600, 64, {2500, 1400, 90}, 1, 1, 0, 1, -1, 0.0f, 1},
};

static void test_same_as_library(const format_case *f, const same_case *sc, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    float head_scales[8];
    for (int h = 0; h < 8; ++h) head_scales[h] = 0.05f * (float)(h + 2);
    const int fp8 = f->dtype != ATTN_DTYPE_Q8, with_head_scales = fp8 && sc->head_scales;
    float value_scales[8];
    for (int h = 0; h < 8; ++h) value_scales[h] = 2.0f * head_scales[h]; /* as q8_pool_new */
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = sc->B, config.kv_heads = sc->Hkv, config.key_dim = sc->Dk;
    config.value_dim = sc->Dv, config.dtype = f->dtype, config.capacity = sc->capacity;
    config.page_size = sc->page_size;
    if (with_head_scales) config.fp8_key_scales = head_scales, config.fp8_value_scales = value_scales;
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s %s: create", f->name, sc->name);
    const int paged = sc->page_size > 0;
    const int64_t ps = paged ? sc->page_size : sc->capacity, max_pages = (sc->capacity + ps - 1) / ps;
    const int64_t pages = paged ? sc->B * max_pages : sc->B;
    q8_pool pool = q8_pool_new(f->dtype, pages, ps, sc->Hkv, sc->Dk, sc->Dv, sc->head_major,
                               with_head_scales ? head_scales : NULL);
    int32_t *table = malloc((size_t)(sc->B * max_pages) * sizeof(int32_t));
    for (int64_t e = 0; e < sc->B * max_pages; ++e) table[e] = paged ? (int32_t)e : (int32_t)(e / max_pages);
    if (sc->shuffled)
        for (int64_t e = sc->B * max_pages - 1; e > 0; --e) {
            const int64_t r = test_rng_range(&rng, 0, e);
            const int32_t t = table[e];
            table[e] = table[r], table[r] = t;
        }
    /* The same tokens, in three rounds per sequence, into both caches. */
    int32_t seqlens[3] = {0, 0, 0};
    int ok = 1;
    for (int64_t b = 0; b < sc->B; ++b) {
        const int64_t length = sc->lengths[b];
        test_tensor kk = test_tensor_new(1, length, sc->Hkv, sc->Dk, TEST_LAYOUT_BTHD);
        test_tensor vv = test_tensor_new(1, length, sc->Hkv, sc->Dv, TEST_LAYOUT_BTHD);
        test_tensor_fill_normal(&kk, &rng, 1.0f), test_tensor_fill_normal(&vv, &rng, 1.0f);
        for (int64_t first = 0; first < length;) {
            int64_t count = length / 3 + 1;
            if (count > length - first) count = length - first;
            attn_tensor kn = kk.view, vn = vv.view;
            kn.data = kk.allocation + first * kk.view.stride[1], kn.shape[1] = count;
            vn.data = vv.allocation + first * vv.view.stride[1], vn.shape[1] = count;
            ok &= attn_kv_cache_append(cache, b, &kn, &vn, &error) == ATTN_OK;
            ok &= append_one(&pool, table, max_pages, paged, b, &seqlens[b], &kk, &vv, first, count, sc->Hq,
                             &error) == ATTN_OK;
            seqlens[b] += (int32_t)count;
            first += count;
        }
        test_tensor_free(&kk), test_tensor_free(&vv);
    }
    CHECK(ok, "%s %s: appends (%s)", f->name, sc->name, error.message);
    /* Stored values: the library's read-back = this file's reading of the caller's bytes. */
    int same_values = 1;
    for (int64_t b = 0; b < sc->B; ++b) {
        const int64_t length = sc->lengths[b];
        test_tensor kl = test_tensor_new(1, length, sc->Hkv, sc->Dk, TEST_LAYOUT_BTHD);
        test_tensor vl = test_tensor_new(1, length, sc->Hkv, sc->Dv, TEST_LAYOUT_BTHD);
        test_tensor kc = test_tensor_new(1, length, sc->Hkv, sc->Dk, TEST_LAYOUT_BTHD);
        test_tensor vc = test_tensor_new(1, length, sc->Hkv, sc->Dv, TEST_LAYOUT_BTHD);
        attn_kv_cache_read(cache, b, 0, &kl.view, &vl.view, &error);
        dequantise_sequence(f, &pool, table + b * max_pages, ps, length, &kc, &vc);
        same_values &= test_bitwise_equal(&kl.view, &kc.view) && test_bitwise_equal(&vl.view, &vc.view);
        test_tensor_free(&kl), test_tensor_free(&vl), test_tensor_free(&kc), test_tensor_free(&vc);
    }
    CHECK(same_values, "%s %s: caller's stored values = the library cache's", f->name, sc->name);

    /* Append Tq more tokens to every sequence and attend, in both. */
    test_tensor q = test_tensor_new(sc->B, sc->Tq, sc->Hq, sc->Dk, TEST_LAYOUT_BTHD);
    test_tensor kn = test_tensor_new(sc->B, sc->Tq, sc->Hkv, sc->Dk, TEST_LAYOUT_BTHD);
    test_tensor vn = test_tensor_new(sc->B, sc->Tq, sc->Hkv, sc->Dv, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&kn, &rng, 1.0f);
    test_tensor_fill_normal(&vn, &rng, 1.0f);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &kn.view, &vn.view, &error), ATTN_OK, &error, "library append");
    attn_options options = causal_options(sc->window_left, sc->softcap);
    const int64_t lse_shape[3] = {sc->B, sc->Hq, sc->Tq};
    test_tensor lib_out = test_tensor_new(sc->B, sc->Tq, sc->Hq, sc->Dv, TEST_LAYOUT_BTHD);
    test_tensor lib_lse = test_tensor_new_shape(3, lse_shape);
    /* bf16 queries and out: q rounded in place (the float copy keeps the same values) */
    test_half_tensor q16 = {0}, lib_out16 = {0};
    if (sc->bf16_queries) {
        q16 = test_half_round(&q, ATTN_DTYPE_BF16);
        lib_out16 = test_half_like(&lib_out, ATTN_DTYPE_BF16, 0xffff);
    }
    const attn_tensor *queries = sc->bf16_queries ? &q16.view : &q.view;
    attn_tensor *lib_target = sc->bf16_queries ? &lib_out16.view : &lib_out.view;
    CHECK_STATUS(attn_decode(cache, queries, &options, lib_target, &lib_lse.view, NULL, &error), ATTN_OK, &error,
                 "%s %s: library decode", f->name, sc->name);
    const int64_t table_shape[2] = {sc->B, max_pages};
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, table_shape);
    const size_t kb = pool.element_bytes[0], vb = pool.element_bytes[1];
    unsigned char *k_saved = malloc(kb), *v_saved = malloc(vb);
    float *scales_saved = malloc(2 * pool.scale_floats * 4 + 4);
    memcpy(k_saved, pool.k_bytes, kb), memcpy(v_saved, pool.v_bytes, vb);
    if (pool.scale_floats > 0) {
        memcpy(scales_saved, pool.k_scales, pool.scale_floats * 4);
        memcpy(scales_saved + pool.scale_floats, pool.v_scales, pool.scale_floats * 4);
    }
    for (int threads = 1; threads <= 3; ++threads) {
        /* the same starting bytes for each run (each appends the same Tq tokens) */
        memcpy(pool.k_bytes, k_saved, kb), memcpy(pool.v_bytes, v_saved, vb);
        if (pool.scale_floats > 0) {
            memcpy(pool.k_scales, scales_saved, pool.scale_floats * 4);
            memcpy(pool.v_scales, scales_saved + pool.scale_floats, pool.scale_floats * 4);
        }
        attn_execution execution = attn_execution_default();
        execution.num_threads = threads;
        test_tensor out = test_tensor_new(sc->B, sc->Tq, sc->Hq, sc->Dv, TEST_LAYOUT_BTHD);
        test_tensor lse = test_tensor_new_shape(3, lse_shape);
        test_half_tensor out16 = {0};
        if (sc->bf16_queries) out16 = test_half_like(&out, ATTN_DTYPE_BF16, 0);
        attn_kv_cache_view view = q8_view(&pool, paged ? &table_view : NULL, seqlens);
        attn_kv_append append = {&kn.view, &vn.view, NULL, NULL, ATTN_ROPE_HALF};
        CHECK_STATUS(attn_forward_with_kvcache(queries, &view, &append, &options,
                                               sc->bf16_queries ? &out16.view : &out.view, &lse.view,
                                               &execution, &error),
                     ATTN_OK, &error, "%s %s: caller-owned", f->name, sc->name);
        const int same_out =
            sc->bf16_queries
                ? memcmp(out16.allocation, lib_out16.allocation,
                         sizeof(uint16_t) * (size_t)(sc->B * sc->Tq * sc->Hq * sc->Dv)) == 0
                : test_bitwise_equal(&out.view, &lib_out.view);
        CHECK(same_out && test_bitwise_equal(&lse.view, &lib_lse.view),
              "%s %s, %d threads (%s): caller-owned = library-owned, bitwise (err %.3g)", f->name,
              sc->name, threads,
              attn_decode_kernel_path(ATTN_KERNEL_AUTO, f->dtype, queries->dtype,
                                      sc->Hq / sc->Hkv * sc->Tq),
              sc->bf16_queries ? 0.0 : test_max_relative_error(&out.view, &lib_out.view));
        free(out16.allocation);
        test_tensor_free(&out), test_tensor_free(&lse);
    }
    free(k_saved), free(v_saved), free(scales_saved);
    free(q16.allocation), free(lib_out16.allocation);
    test_tensor_free(&q), test_tensor_free(&kn), test_tensor_free(&vn);
    test_tensor_free(&lib_out), test_tensor_free(&lib_lse);
    q8_pool_free(&pool), free(table);
    attn_kv_cache_destroy(cache);
}

/* ---- 2. chunked prefill: each chunk against the oracles ---- */
typedef struct chunk_case {
    const char *name;
    int64_t B, T, Hq, Hkv, Dk, Dv, page_size; /* 0 = contiguous */
    int head_major;
} chunk_case;

static const chunk_case chunk_cases[] = {
    {"paged 16 shuffled, GQA 4", 2, 560, 8, 2, 64, 64, 16, 0},
    {"contiguous, MQA, head-major scales", 1, 530, 4, 1, 64, 32, 0, 1},
};

static void test_chunked(const format_case *f, const chunk_case *cc, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    const int64_t B = cc->B, T = cc->T;
    test_tensor q = test_tensor_new(B, T, cc->Hq, cc->Dk, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(B, T, cc->Hkv, cc->Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, T, cc->Hkv, cc->Dv, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    float head_scales[4] = {0.05f, 0.1f, 0.2f, 0.4f};
    attn_options options = causal_options(-1, 0.0f);
    attn_error error;
    test_tensor expected = test_tensor_new(B, T, cc->Hq, cc->Dv, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_forward(&q.view, &k.view, &v.view, &options, &expected.view, NULL, &error), ATTN_OK,
                 &error, "%s: fp32 reference", cc->name);
    const int64_t chunks[3] = {1, 7, 512};
    const int paged = cc->page_size > 0;
    const int64_t ps = paged ? cc->page_size : T, max_pages = (T + ps - 1) / ps, pages = paged ? B * max_pages : B;
    for (int c = 0; c < 3; ++c) {
        q8_pool pool = q8_pool_new(f->dtype, pages, ps, cc->Hkv, cc->Dk, cc->Dv, cc->head_major,
                                   f->dtype == ATTN_DTYPE_Q8 ? NULL : head_scales);
        int32_t *table = malloc((size_t)(B * max_pages) * sizeof(int32_t));
        for (int64_t p = 0; p < B * max_pages; ++p) table[p] = paged ? (int32_t)p : (int32_t)(p / max_pages);
        for (int64_t p = B * max_pages - 1; paged && p > 0; --p) {
            const int64_t r = test_rng_range(&rng, 0, p);
            const int32_t t = table[p];
            table[p] = table[r], table[r] = t;
        }
        const int64_t tshape[2] = {B, max_pages};
        attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
        int32_t seqlens[2] = {0, 0};
        test_tensor got = test_tensor_new(B, T, cc->Hq, cc->Dv, TEST_LAYOUT_BTHD);
        int ok = 1;
        for (int64_t first = 0; first < T && ok;) {
            int64_t count = chunks[c] < T - first ? chunks[c] : T - first;
            attn_tensor qn = q.view, kn = k.view, vn = v.view, on = got.view;
            qn.data = q.allocation + first * q.view.stride[1], qn.shape[1] = count;
            kn.data = k.allocation + first * k.view.stride[1], kn.shape[1] = count;
            vn.data = v.allocation + first * v.view.stride[1], vn.shape[1] = count;
            on.data = got.allocation + first * got.view.stride[1], on.shape[1] = count;
            attn_kv_cache_view view = q8_view(&pool, paged ? &table_view : NULL, seqlens);
            attn_kv_append append = {&kn, &vn, NULL, NULL, ATTN_ROPE_HALF};
            attn_execution execution = attn_execution_default();
            execution.num_threads = (int)(first % 2) + 1;
            ok = attn_forward_with_kvcache(&qn, &view, &append, &options, &on, NULL, &execution, &error) == ATTN_OK;
            CHECK(ok, "%s %s: chunk %lld at %lld (%s)", f->name, cc->name, (long long)chunks[c], (long long)first,
                  error.message);
            for (int64_t b = 0; b < B; ++b) seqlens[b] += (int32_t)count;
            first += count;
        }
        /* Rows are quantised one by one, so the final pool holds what every chunk read. */
        test_tensor kd = test_tensor_new(B, T, cc->Hkv, cc->Dk, TEST_LAYOUT_BTHD);
        test_tensor vd = test_tensor_new(B, T, cc->Hkv, cc->Dv, TEST_LAYOUT_BTHD);
        for (int64_t b = 0; b < B; ++b) {
            test_tensor kb = test_tensor_new(1, T, cc->Hkv, cc->Dk, TEST_LAYOUT_BTHD);
            test_tensor vb = test_tensor_new(1, T, cc->Hkv, cc->Dv, TEST_LAYOUT_BTHD);
            dequantise_sequence(f, &pool, table + b * max_pages, ps, T, &kb, &vb);
            memcpy(kd.allocation + b * T * cc->Hkv * cc->Dk, kb.allocation, (size_t)(T * cc->Hkv * cc->Dk) * 4);
            memcpy(vd.allocation + b * T * cc->Hkv * cc->Dv, vb.allocation, (size_t)(T * cc->Hkv * cc->Dv) * 4);
            test_tensor_free(&kb), test_tensor_free(&vb);
        }
        test_tensor on_stored = test_tensor_new(B, T, cc->Hq, cc->Dv, TEST_LAYOUT_BTHD);
        CHECK_STATUS(attn_reference_forward(&q.view, &kd.view, &vd.view, &options, &on_stored.view, NULL, &error),
                     ATTN_OK, &error, "reference on the stored values");
        const double against_stored = test_max_relative_error(&got.view, &on_stored.view);
        const double against_fp32 = test_max_relative_error(&got.view, &expected.view);
        const attn_tensor got_long = rows_from(&got, 64), expected_long = rows_from(&expected, 64);
        const double long_rows = test_max_relative_error(&got_long, &expected_long);
        const double measured[3] = {against_stored, long_rows, against_fp32};
        for (int m = 0; m < 3; ++m)
            if (measured[m] > worst[f - formats][m]) worst[f - formats][m] = measured[m];
        CHECK(ok && against_stored <= f->exact && long_rows <= f->bound && against_fp32 <= f->few_keys,
              "%s %s, chunks of %lld: %.3g (<= %.0e) from the oracle on the stored values; from fp32 "
              "storage %.3g (<= %.0e) on rows with >= 64 keys, %.3g (<= %.0e) on all",
              f->name, cc->name, (long long)chunks[c], against_stored, f->exact, long_rows, f->bound,
              against_fp32, f->few_keys);
        test_tensor_free(&kd), test_tensor_free(&vd), test_tensor_free(&on_stored), test_tensor_free(&got);
        q8_pool_free(&pool), free(table);
    }
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&expected);
}

/* ---- 3. errors: status, message, cache and scales untouched ---- */
typedef enum error_kind {
    E_NO_K_SCALE, E_SCALE_SHAPE, E_SCALE_DTYPE, E_SCALE_STRIDE, E_FP8_SCALE_ZERO, E_FP8_SCALE_NAN,
    E_FP8_SCALE_SHAPE, E_SCALE_FOR_F32, E_NONFINITE_NEW, E_NEW_DTYPE, E_VERSION_1, E_CAPACITY,
    E_SCALE_SLOT_STRIDE_ZERO, E_SCALE_HEAD_STRIDE_ZERO, E_SCALE_PAGE_STRIDE_ZERO, E_SCALES_SHARED, E_SCALE_IN_CACHE,
    E_CACHE_STRIDE_ZERO, E_NEW_IN_SCALES, E_NEW_IN_CODES
} error_kind;

typedef struct error_case {
    const char *name;
    attn_dtype dtype;
    error_kind kind;
    attn_status expected;
    const char *needle;
} error_case;

static const error_case error_cases[] = {
    {"Q8 without k_scale", ATTN_DTYPE_Q8, E_NO_K_SCALE, ATTN_ERROR_NULL_ARGUMENT, "cache->k_scale is NULL"},
    {"Q8 scales of the wrong shape", ATTN_DTYPE_Q8, E_SCALE_SHAPE, ATTN_ERROR_SHAPE_MISMATCH,
     "cache->v_scale.shape[1] = 4: expected 8 ([num_pages, page_size, Hkv])"},
    {"Q8 scales not float32", ATTN_DTYPE_Q8, E_SCALE_DTYPE, ATTN_ERROR_INVALID_ARGUMENT, "k_scale.dtype = bfloat16"},
    {"Q8 scales with a negative stride", ATTN_DTYPE_Q8, E_SCALE_STRIDE, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_scale.stride[1] = -1: must be >= 0"},
    {"fp8 scale 0", ATTN_DTYPE_FP8_E4M3, E_FP8_SCALE_ZERO, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->v_scale[1] = 0: must be finite and > 0"},
    {"fp8 scale NaN", ATTN_DTYPE_FP8_E5M2, E_FP8_SCALE_NAN, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_scale[0] = nan: must be finite and > 0"},
    {"fp8 scales of the wrong length", ATTN_DTYPE_FP8_E4M3, E_FP8_SCALE_SHAPE, ATTN_ERROR_SHAPE_MISMATCH,
     "cache->k_scale.shape[0] = 3: expected Hkv = 2 or 1"},
    {"scales for float32 storage", ATTN_DTYPE_F32, E_SCALE_FOR_F32, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_scale is set: scales are for 8-bit storage only"},
    {"a new key that is infinite", ATTN_DTYPE_Q8, E_NONFINITE_NEW, ATTN_ERROR_INVALID_ARGUMENT,
     "append->k_new[1, 2, 0, 3] = inf: int8 (scaled) storage holds finite values only"},
    {"new tokens given as fp8", ATTN_DTYPE_FP8_E5M2, E_NEW_DTYPE, ATTN_ERROR_INVALID_ARGUMENT,
     "append->k_new.dtype = float8_e5m2: expected float32, bfloat16 or float16"},
    {"8-bit storage in a version-1 view", ATTN_DTYPE_Q8, E_VERSION_1, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->version = 1 with k_cache.dtype = int8 (scaled)"},
    {"beyond capacity", ATTN_DTYPE_Q8, E_CAPACITY, ATTN_ERROR_CAPACITY, "sequence 1: cache_seqlens[1] = 30"},
    /* layouts in which an append would write two rows or scales to one address */
    {"Q8 scales of all slots at one address", ATTN_DTYPE_Q8, E_SCALE_SLOT_STRIDE_ZERO, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_scale.stride[1] = 0 (shape[1] = 8): an append would write two rows to one address"},
    {"Q8 scales of both heads at one address", ATTN_DTYPE_Q8, E_SCALE_HEAD_STRIDE_ZERO, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->v_scale.stride[2] = 0 (shape[2] = 2)"},
    {"Q8 scales of all pages at one address", ATTN_DTYPE_Q8, E_SCALE_PAGE_STRIDE_ZERO, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_scale.stride[0] = 0 (shape[0] = 8)"},
    {"Q8 k_scale = v_scale", ATTN_DTYPE_Q8, E_SCALES_SHARED, ATTN_ERROR_INVALID_ARGUMENT,
     "and cache->v_scale (data"},
    {"Q8 scales inside the key cache", ATTN_DTYPE_Q8, E_SCALE_IN_CACHE, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_cache (data"},
    {"fp8 cache heads at one address", ATTN_DTYPE_FP8_E4M3, E_CACHE_STRIDE_ZERO, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_cache.stride[2] = 0 (shape[2] = 2)"},
    /* new rows that alias the memory the append writes */
    {"Q8 k_new inside k_scale", ATTN_DTYPE_Q8, E_NEW_IN_SCALES, ATTN_ERROR_INVALID_ARGUMENT,
     ") and cache->k_scale (bytes [0x"},
    {"fp8 v_new (float32) over v_cache's codes", ATTN_DTYPE_FP8_E5M2, E_NEW_IN_CODES, ATTN_ERROR_INVALID_ARGUMENT,
     ") and cache->v_cache (bytes [0x"},
};

static void test_errors(void) {
    const int64_t B = 2, Hq = 2, H = 2, D = 4, ps = 8, max_pages = 4, pages = 8, Tnew = 3;
    for (int n = 0; n < COUNT_OF(error_cases); ++n) {
        const error_case *ec = &error_cases[n];
        const float fp8_scales[2] = {0.5f, 0.25f};
        const int q8 = ec->dtype == ATTN_DTYPE_Q8, fp8 = attn_dtype_size(ec->dtype) == 1 && !q8;
        q8_pool pool = q8_pool_new(ec->dtype == ATTN_DTYPE_F32 ? ATTN_DTYPE_Q8 : ec->dtype, pages, ps, H, D, D, 0,
                                   fp8 ? fp8_scales : NULL);
        for (size_t e = 0; e < pool.element_bytes[0]; ++e) pool.k_bytes[e] = (unsigned char)(e % 101), pool.v_bytes[e] = (unsigned char)(e % 37);
        for (size_t e = 0; e < pool.scale_floats && q8; ++e) pool.k_scales[e] = 0.01f * (float)e, pool.v_scales[e] = 0.02f;
        float f32_pool[8 * 8 * 2 * 4];
        const int64_t f32_shape[4] = {pages, ps, H, D};
        attn_tensor f32_view = attn_tensor_contiguous(f32_pool, ATTN_DTYPE_F32, 4, f32_shape);
        int32_t table[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        int32_t seqlens[2] = {10, 12};
        const int64_t tshape[2] = {B, max_pages};
        attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
        test_tensor kn = test_tensor_new(B, Tnew, H, D, TEST_LAYOUT_BTHD), vn = test_tensor_new(B, Tnew, H, D, TEST_LAYOUT_BTHD);
        test_tensor q = test_tensor_new(B, Tnew, Hq, D, TEST_LAYOUT_BTHD), out = test_tensor_new(B, Tnew, Hq, D, TEST_LAYOUT_BTHD);
        test_tensor_fill_all(&kn, 1.0f), test_tensor_fill_all(&vn, 2.0f), test_tensor_fill_all(&q, 0.1f);
        attn_kv_cache_view view = q8_view(&pool, &table_view, seqlens);
        attn_kv_append append = {&kn.view, &vn.view, NULL, NULL, ATTN_ROPE_HALF};
        attn_tensor bad_scale = pool.k_scale, bad_new = kn.view;
        const int64_t three = 3;
        switch (ec->kind) {
        case E_NO_K_SCALE: view.k_scale = NULL; break;
        case E_SCALE_SHAPE: bad_scale = pool.v_scale, bad_scale.shape[1] = 4, view.v_scale = &bad_scale; break;
        case E_SCALE_DTYPE: bad_scale.dtype = ATTN_DTYPE_BF16, view.k_scale = &bad_scale; break;
        case E_SCALE_STRIDE: bad_scale.stride[1] = -1, view.k_scale = &bad_scale; break;
        case E_FP8_SCALE_ZERO: pool.v_scales[1] = 0.0f; break;
        case E_FP8_SCALE_NAN: pool.k_scales[0] = NAN; break;
        case E_FP8_SCALE_SHAPE: bad_scale = attn_tensor_contiguous(pool.k_scales, ATTN_DTYPE_F32, 1, &three), view.k_scale = &bad_scale; break;
        case E_SCALE_FOR_F32: view.k_cache = &f32_view, view.v_cache = &f32_view; break;
        case E_NONFINITE_NEW: kn.allocation[((1 * Tnew + 2) * H + 0) * D + 3] = INFINITY; break;
        case E_NEW_DTYPE: bad_new.data = pool.k_bytes, bad_new.dtype = ec->dtype, append.k_new = &bad_new; break;
        case E_VERSION_1: view.version = 1; break;
        case E_CAPACITY: seqlens[1] = 30; break;
        case E_SCALE_SLOT_STRIDE_ZERO: bad_scale.stride[1] = 0, view.k_scale = &bad_scale; break;
        case E_SCALE_HEAD_STRIDE_ZERO: bad_scale = pool.v_scale, bad_scale.stride[2] = 0, view.v_scale = &bad_scale; break;
        case E_SCALE_PAGE_STRIDE_ZERO: bad_scale.stride[0] = 0, view.k_scale = &bad_scale; break;
        case E_SCALES_SHARED: view.v_scale = &pool.k_scale; break;
        case E_SCALE_IN_CACHE: bad_scale.data = pool.k_bytes, view.k_scale = &bad_scale; break; /* 512 bytes each */
        case E_CACHE_STRIDE_ZERO: pool.k.stride[2] = 0; break;
        case E_NEW_IN_SCALES: bad_new.data = pool.k_scales, append.k_new = &bad_new; break; /* 48 of its 128 floats */
        case E_NEW_IN_CODES: bad_new = vn.view, bad_new.data = pool.v_bytes, append.v_new = &bad_new; break; /* 192 of 512 bytes */
        }
        unsigned char *k_before = malloc(pool.element_bytes[0]), *v_before = malloc(pool.element_bytes[1]);
        memcpy(k_before, pool.k_bytes, pool.element_bytes[0]), memcpy(v_before, pool.v_bytes, pool.element_bytes[1]);
        const size_t scale_bytes = pool.scale_floats * 4;
        float *ks_before = malloc(scale_bytes + 4), *vs_before = malloc(scale_bytes + 4);
        if (scale_bytes > 0) memcpy(ks_before, pool.k_scales, scale_bytes), memcpy(vs_before, pool.v_scales, scale_bytes);
        attn_error error;
        memset(&error, 0, sizeof error);
        attn_options options = causal_options(-1, 0.0f);
        const attn_status status = attn_forward_with_kvcache(&q.view, &view, &append, &options, &out.view, NULL, NULL,
                                                             &error);
        CHECK(status == ec->expected && strstr(error.message, ec->needle) != NULL, "%s: %s \"%s\"", ec->name,
              attn_status_name(status), error.message);
        CHECK(memcmp(k_before, pool.k_bytes, pool.element_bytes[0]) == 0 &&
                  memcmp(v_before, pool.v_bytes, pool.element_bytes[1]) == 0 &&
                  (scale_bytes == 0 || (memcmp(ks_before, pool.k_scales, scale_bytes) == 0 &&
                                        memcmp(vs_before, pool.v_scales, scale_bytes) == 0)),
              "%s: the cache and its scales are untouched", ec->name);
        free(k_before), free(v_before), free(ks_before), free(vs_before);
        test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&q), test_tensor_free(&out);
        q8_pool_free(&pool);
    }
}

/* A version-1 view (the layout before k_scale / v_scale) of float32 storage still works, and
 * its scale fields are never read: here they hold a tensor that version 2 would refuse. */
static void test_version_1_view(void) {
    const int64_t B = 1, H = 1, D = 4, S = 8;
    float k_pool[8 * 4], v_pool[8 * 4], q_data[4] = {1, 0, 0, 0}, out_data[4];
    for (int e = 0; e < 32; ++e) k_pool[e] = 0.1f * (float)(e % 5), v_pool[e] = 2.0f;
    attn_tensor kc = attn_tensor_f32_4d(k_pool, B, S, H, D), vc = attn_tensor_f32_4d(v_pool, B, S, H, D);
    attn_tensor q = attn_tensor_f32_4d(q_data, B, 1, H, D), out = attn_tensor_f32_4d(out_data, B, 1, H, D);
    attn_tensor not_read = kc; /* rank 4: never a valid scale */
    int32_t seqlens[1] = {5};
    attn_kv_cache_view view = {1, &kc, &vc, NULL, seqlens, &not_read, &not_read};
    attn_error error;
    CHECK_STATUS(attn_forward_with_kvcache(&q, &view, NULL, NULL, &out, NULL, NULL, &error), ATTN_OK, &error,
                 "a version-1 view of float32 storage");
    CHECK(fabsf(out_data[0] - 2.0f) <= 1e-6f && fabsf(out_data[3] - 2.0f) <= 1e-6f,
          "version-1 view: every value 2, output 2 (%.9g, %.9g)", out_data[0], out_data[3]);
    view.version = 2;
    CHECK(attn_forward_with_kvcache(&q, &view, NULL, NULL, &out, NULL, NULL, &error) == ATTN_ERROR_INVALID_ARGUMENT &&
              strstr(error.message, "cache->k_scale is set") != NULL,
          "the same view as version 2 reads the scale fields: \"%s\"", error.message);
}

/* One fp8 scale for every head ([1]) = the same scale given per head ([Hkv]), bitwise. */
static void test_broadcast_head_scale(void) {
    test_rng rng;
    test_rng_seed(&rng, 77);
    const int64_t B = 1, Hq = 4, H = 2, D = 16, S = 40, Tq = 2;
    const float scale = 0.125f, per_head[2] = {scale, scale};
    test_tensor q = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD), kn = test_tensor_new(B, S, H, D, TEST_LAYOUT_BTHD);
    test_tensor vn = test_tensor_new(B, S, H, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&kn, &rng, 1.0f), test_tensor_fill_normal(&vn, &rng, 1.0f);
    test_tensor outs[2] = {test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD), test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD)};
    for (int form = 0; form < 2; ++form) {
        q8_pool pool = q8_pool_new(ATTN_DTYPE_FP8_E4M3, B, S, H, D, D, 0, per_head);
        const int64_t one = 1;
        attn_tensor single = attn_tensor_contiguous((void *)&scale, ATTN_DTYPE_F32, 1, &one);
        int32_t seqlens[1] = {0};
        attn_kv_cache_view view = q8_view(&pool, NULL, seqlens);
        if (form == 1) view.k_scale = &single, view.v_scale = &single;
        else pool.v_scales[0] = pool.v_scales[1] = scale;
        attn_kv_append append = {&kn.view, &vn.view, NULL, NULL, ATTN_ROPE_HALF};
        attn_options options = causal_options(-1, 0.0f);
        attn_error error;
        CHECK_STATUS(attn_forward_with_kvcache(&q.view, &view, &append, &options, &outs[form].view, NULL, NULL, &error),
                     ATTN_OK, &error, "fp8 scale form %d", form);
        q8_pool_free(&pool);
    }
    CHECK(test_bitwise_equal(&outs[0].view, &outs[1].view), "fp8: a [1] scale = the same scale per head, bitwise");
    test_tensor_free(&q), test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&outs[0]), test_tensor_free(&outs[1]);
}

int main(void) {
    for (int fi = 0; fi < COUNT_OF(formats); ++fi) {
        for (int n = 0; n < COUNT_OF(same_cases); ++n) test_same_as_library(&formats[fi], &same_cases[n], 100 + 10 * fi + n);
        for (int n = 0; n < COUNT_OF(chunk_cases); ++n) test_chunked(&formats[fi], &chunk_cases[n], 300 + 10 * fi + n);
    }
    for (int fi = 0; fi < COUNT_OF(formats); ++fi)
        printf("%s caller-owned chunked prefill: worst relative error %.3g vs the stored values, vs fp32 "
               "storage %.3g (rows with >= 64 keys) and %.3g (every row)\n",
               formats[fi].name, worst[fi][0], worst[fi][1], worst[fi][2]);
    test_errors();
    test_version_1_view();
    test_broadcast_head_scale();
    return test_finish();
}
