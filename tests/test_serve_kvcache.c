/*
 * test_serve_kvcache.c — attention against a KV cache the caller owns
 * (attn_forward_with_kvcache), over tables of cases:
 *  - caller-owned equals library-owned: the same tokens on the same pages (paged) or rows
 *    (contiguous), F32 / BF16 / F16 storage, Tq = 1, 2 and 4, groups of 1 to 16 rows (8-row
 *    16-bit groups on flash-attn's pages read in place): bitwise equal to attn_decode, which
 *    equals the double-precision oracle (attn_reference_decode) within 1e-5;
 *  - chunked prefill with append in chunks of 1, 7 and 512 (and speculative verification
 *    with Tq = Tnew = 5) equals one prefill by the double-precision oracle on the whole
 *    sequence, row for row, with RoPE (either layout) applied on append and to the queries,
 *    causal bottom-right, windows, soft-cap, GQA/MQA, contiguous and shuffled paged caches;
 *  - bitwise identical for 1, 2 and 3 threads on both paths;
 *  - every malformed argument is refused with a message naming the sequence and the value,
 *    and the cache is left byte for byte as it was — among them layouts in which an append
 *    would write two rows to one address (a zero or too small stride, k and v overlapping);
 *  - layouts that look alike but do not collide are accepted: k and v interleaved in one
 *    allocation (bitwise = separate pools), any strides in a read-only call;
 *  - new rows (k_new / v_new) that alias the cache they are appended into (inside either
 *    pool, the very rows written, strided or with a negative stride) are refused naming both
 *    tensors' byte ranges, the cache untouched; new rows beside the cache in one allocation
 *    (interleaved, or after the pools) or one tensor for k_new and v_new are accepted,
 *    bitwise = separate buffers;
 *  - 1500 random layouts of k_cache, v_cache and k_new in one arena: accepted only when, byte
 *    by byte, no two written rows and no new row and written row share an address; refused
 *    (cache untouched) whenever they do.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ---- storage helpers (float <-> the cache dtype, round to nearest even) ---- */
static uint16_t to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

/* A caller-owned pool [pages, page_size, H, D] of `dtype` (element size 4 or 2). */
typedef struct pool {
    attn_tensor view;
    void *data;
    size_t bytes;
} pool;

static pool pool_new(attn_dtype dtype, int64_t pages, int64_t page_size, int64_t H, int64_t D) {
    pool p;
    const int64_t shape[4] = {pages, page_size, H, D};
    p.bytes = (size_t)(pages * page_size * H * D) * attn_dtype_size(dtype);
    p.data = malloc(p.bytes);
    memset(p.data, 0xff, p.bytes); /* NaN in every dtype: unused slots never matter */
    p.view = attn_tensor_contiguous(p.data, dtype, 4, shape);
    return p;
}

static void pool_store(pool *p, int64_t page, int64_t slot, int64_t h, const float *row, int64_t D) {
    const int64_t e = ((page * p->view.shape[1] + slot) * p->view.shape[2] + h) * D;
    for (int64_t d = 0; d < D; ++d) {
        if (p->view.dtype == ATTN_DTYPE_F32) ((float *)p->data)[e + d] = row[d];
        else if (p->view.dtype == ATTN_DTYPE_BF16) ((uint16_t *)p->data)[e + d] = to_bf16(row[d]);
        else {
            /* F16 values read back from a F16 library cache are exact halves: convert through
             * the library's own rounding by storing via a 1-token F16 cache is overkill; the
             * case table uses only values that came out of an F16 cache, so exact. */
            const float x = row[d];
            uint32_t bits;
            memcpy(&bits, &x, 4);
            const uint32_t sign = (bits >> 16) & 0x8000u;
            int exponent = (int)((bits >> 23) & 0xff) - 127 + 15;
            uint32_t mantissa = bits & 0x7fffffu;
            uint16_t h16;
            if (x == 0.0f) h16 = (uint16_t)sign;
            else if (exponent <= 0) h16 = (uint16_t)(sign | ((mantissa | 0x800000u) >> (14 - exponent)));
            else h16 = (uint16_t)(sign | ((uint32_t)exponent << 10) | (mantissa >> 13));
            ((uint16_t *)p->data)[e + d] = h16;
        }
    }
}

/* Element (a, b, c, d) of a rank-4 float32 view, writable. */
static float *at4(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return (float *)t->data + a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

/* ---- 1. caller-owned = library-owned ---- */
typedef struct same_case {
    const char *name;
    attn_dtype dtype;
    int64_t B, Hq, Hkv, Dk, Dv, capacity, page_size; /* page_size 0 = contiguous */
    int lengths[4];
    int64_t Tq;
    int64_t window_left;
    float softcap;
} same_case;

static const same_case same_cases[] = {
    {"f32 paged 16, GQA", ATTN_DTYPE_F32, 3, 8, 2, 32, 32, 200, 16, {150, 37, 200}, 1, -1, 0.0f},
    {"bf16 paged 16, GQA, Tq 4", ATTN_DTYPE_BF16, 3, 8, 2, 64, 64, 200, 16, {150, 5, 199}, 4, -1, 0.0f},
    {"f16 paged 8, MQA, window", ATTN_DTYPE_F16, 2, 4, 1, 16, 8, 90, 8, {90, 41}, 1, 20, 0.0f},
    {"bf16 contiguous, soft-cap", ATTN_DTYPE_BF16, 2, 4, 4, 16, 16, 70, 0, {70, 12}, 2, -1, 5.0f},
    {"f32 contiguous MHA", ATTN_DTYPE_F32, 4, 2, 2, 8, 8, 33, 0, {1, 33, 20, 7}, 1, -1, 0.0f},
    /* groups of 5..11 rows on token-major pages: 16-bit rows read in place (decode.c
     * layout_path), the library's converted chunk by chunk: the same bits */
    {"bf16 paged 16, GQA 8 rows, soft-cap (widened in place)", ATTN_DTYPE_BF16, 3, 16, 2, 40, 24,
     1500, 16, {1500, 37, 1100}, 1, -1, 7.0f},
    {"f16 paged 16, GQA, Tq 2, 8 rows, window (in place)", ATTN_DTYPE_F16, 2, 8, 2, 72, 72, 300,
     16, {300, 77}, 2, 50, 0.0f},
    /* the heads of a split together, chunk by chunk (decode.c run_split_together), with the
     * large-group kernels, and with pages of 5 slots (chunks of 5 keys or fewer) */
    {"f32 paged 16, 16 rows a group (large-group kernels)", ATTN_DTYPE_F32, 2, 32, 2, 32, 32, 700,
     16, {700, 300}, 1, -1, 0.0f},
    {"bf16 paged 5, GQA, Tq 3, window, soft-cap", ATTN_DTYPE_BF16, 3, 8, 2, 24, 16, 400, 5,
     {400, 9, 333}, 3, 37, 4.0f},
    /* B x Hkv >= 16 and splits above 1024 keys: several splits, each with its heads together
     * (decode.c run_split_together; run_split_stepped on the tiles' paths), the same bits as
     * whole tasks */
    {"bf16 paged 16, GQA, long (several splits)", ATTN_DTYPE_BF16, 4, 8, 4, 64, 64, 3100, 16,
     {3100, 1500, 2047, 700}, 1, -1, 0.0f},
    {"f32 contiguous, long, window, Tq 2 (several splits)", ATTN_DTYPE_F32, 4, 8, 4, 32, 32, 2600,
     0, {2600, 2100, 1030, 40}, 2, 1500, 0.0f},
};

static attn_options causal_options(int64_t window_left, float softcap) {
    attn_options o = attn_options_default();
    o.causal = 1;
    o.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (window_left >= 0) o.window = 1, o.window_left = window_left, o.window_right = -1;
    o.softcap = softcap;
    return o;
}

static void test_same_as_library(const same_case *sc, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = sc->B, config.kv_heads = sc->Hkv, config.key_dim = sc->Dk;
    config.value_dim = sc->Dv, config.dtype = sc->dtype, config.capacity = sc->capacity;
    config.page_size = sc->page_size;
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s: create", sc->name);
    /* Append in a few rounds, sequences interleaved, so that pages are not in order. */
    for (int round = 0; round < 3; ++round)
        for (int64_t b = 0; b < sc->B; ++b) {
            const int64_t have = attn_kv_cache_length(cache, b);
            int64_t count = round == 2 ? sc->lengths[b] - have : sc->lengths[b] / 3;
            if (count <= 0) continue;
            test_tensor kn = test_tensor_new(1, count, sc->Hkv, sc->Dk, TEST_LAYOUT_BTHD);
            test_tensor vn = test_tensor_new(1, count, sc->Hkv, sc->Dv, TEST_LAYOUT_BTHD);
            test_tensor_fill_normal(&kn, &rng, 1.0f), test_tensor_fill_normal(&vn, &rng, 1.0f);
            CHECK_STATUS(attn_kv_cache_append(cache, b, &kn.view, &vn.view, &error), ATTN_OK, &error, "append");
            test_tensor_free(&kn), test_tensor_free(&vn);
        }
    const int64_t ps = sc->page_size > 0 ? sc->page_size : sc->capacity;
    const int64_t max_pages = (sc->capacity + ps - 1) / ps;
    const int64_t pages = sc->page_size > 0 ? sc->B * max_pages : sc->B;
    pool kp = pool_new(sc->dtype, pages, ps, sc->Hkv, sc->Dk), vp = pool_new(sc->dtype, pages, ps, sc->Hkv, sc->Dv);
    int32_t *table = calloc((size_t)(sc->B * max_pages), sizeof(int32_t));
    int32_t seqlens[4];
    for (int64_t b = 0; b < sc->B; ++b) {
        const int64_t length = sc->lengths[b];
        seqlens[b] = (int32_t)length;
        const int32_t *pages_of = NULL;
        int64_t page_count = 0;
        if (sc->page_size > 0) {
            attn_kv_cache_block_table(cache, b, &pages_of, &page_count, &error);
            for (int64_t p = 0; p < page_count; ++p) table[b * max_pages + p] = pages_of[p];
        }
        test_tensor kr = test_tensor_new(1, length, sc->Hkv, sc->Dk, TEST_LAYOUT_BTHD);
        test_tensor vr = test_tensor_new(1, length, sc->Hkv, sc->Dv, TEST_LAYOUT_BTHD);
        attn_kv_cache_read(cache, b, 0, &kr.view, &vr.view, &error);
        for (int64_t t = 0; t < length; ++t)
            for (int64_t h = 0; h < sc->Hkv; ++h) {
                const int64_t page = sc->page_size > 0 ? pages_of[t / ps] : b;
                pool_store(&kp, page, t % ps, h, kr.allocation + (t * sc->Hkv + h) * sc->Dk, sc->Dk);
                pool_store(&vp, page, t % ps, h, vr.allocation + (t * sc->Hkv + h) * sc->Dv, sc->Dv);
            }
        test_tensor_free(&kr), test_tensor_free(&vr);
    }
    const int64_t table_shape[2] = {sc->B, max_pages};
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, table_shape);
    attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, &kp.view, &vp.view,
                               sc->page_size > 0 ? &table_view : NULL, seqlens, NULL, NULL};
    test_tensor q = test_tensor_new(sc->B, sc->Tq, sc->Hq, sc->Dk, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    attn_options options = causal_options(sc->window_left, sc->softcap);
    const int64_t lse_shape[3] = {sc->B, sc->Hq, sc->Tq};
    test_tensor lib_out = test_tensor_new(sc->B, sc->Tq, sc->Hq, sc->Dv, TEST_LAYOUT_BTHD);
    test_tensor lib_lse = test_tensor_new_shape(3, lse_shape);
    CHECK_STATUS(attn_decode(cache, &q.view, &options, &lib_out.view, &lib_lse.view, NULL, &error), ATTN_OK, &error,
                 "%s: library decode", sc->name);
    /* the library-owned result against the double-precision oracle on the same stored values
     * (so the caller-owned one, equal to it bit for bit below, is checked against it too) */
    test_tensor oracle = test_tensor_new(sc->B, sc->Tq, sc->Hq, sc->Dv, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_decode(cache, &q.view, &options, &oracle.view, NULL, &error), ATTN_OK, &error,
                 "%s: reference decode", sc->name);
    const double oracle_error = test_max_relative_error(&lib_out.view, &oracle.view);
    CHECK(oracle_error <= 1e-5, "%s: library-owned decode = double-precision oracle (err %.3g)", sc->name,
          oracle_error);
    test_tensor_free(&oracle);
    for (int threads = 1; threads <= 3; ++threads) {
        attn_execution execution = attn_execution_default();
        execution.num_threads = threads;
        test_tensor out = test_tensor_new(sc->B, sc->Tq, sc->Hq, sc->Dv, TEST_LAYOUT_BTHD);
        test_tensor lse = test_tensor_new_shape(3, lse_shape);
        attn_status status = attn_forward_with_kvcache(&q.view, &view, NULL, &options, &out.view, &lse.view,
                                                       &execution, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s: caller-owned", sc->name);
        CHECK(test_bitwise_equal(&out.view, &lib_out.view) && test_bitwise_equal(&lse.view, &lib_lse.view),
              "%s, %d threads: caller-owned = library-owned, bitwise (err %.3g)", sc->name, threads,
              test_max_relative_error(&out.view, &lib_out.view));
        test_tensor_free(&out), test_tensor_free(&lse);
    }
    test_tensor_free(&q), test_tensor_free(&lib_out), test_tensor_free(&lib_lse);
    free(kp.data), free(vp.data), free(table);
    attn_kv_cache_destroy(cache);
}

/* ---- 2. chunked prefill with append = one prefill ---- */
typedef struct chunk_case {
    const char *name;
    int64_t B, T, Hq, Hkv, Dk, Dv;
    int64_t page_size;     /* 0 = contiguous */
    int64_t rotary_dim;    /* 0 = none */
    attn_rope_layout layout;
    int64_t window_left;
    float softcap;
} chunk_case;

static const chunk_case chunk_cases[] = {
    {"paged 16, GQA, RoPE half", 2, 600, 4, 2, 32, 16, 16, 16, ATTN_ROPE_HALF, -1, 0.0f},
    {"contiguous, MQA, RoPE interleaved, window", 2, 530, 4, 1, 16, 16, 0, 16, ATTN_ROPE_INTERLEAVED, 100, 0.0f},
    {"paged 7, MHA, soft-cap, no RoPE", 1, 520, 2, 2, 16, 8, 7, 0, ATTN_ROPE_HALF, -1, 4.0f},
};

/* RoPE in double, as the tables give it. */
static void rope_reference(float *x, int64_t rotary_dim, attn_rope_layout layout, const float *cos_table,
                           const float *sin_table, int64_t position) {
    const int64_t half = rotary_dim / 2;
    for (int64_t j = 0; j < half; ++j) {
        const double c = cos_table[position * half + j], s = sin_table[position * half + j];
        const int64_t i0 = layout == ATTN_ROPE_INTERLEAVED ? 2 * j : j;
        const int64_t i1 = layout == ATTN_ROPE_INTERLEAVED ? 2 * j + 1 : j + half;
        const double a = x[i0], b = x[i1];
        x[i0] = (float)(a * c - b * s), x[i1] = (float)(b * c + a * s);
    }
}

static void test_chunked(const chunk_case *cc, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    const int64_t B = cc->B, T = cc->T;
    test_tensor q = test_tensor_new(B, T, cc->Hq, cc->Dk, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(B, T, cc->Hkv, cc->Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, T, cc->Hkv, cc->Dv, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f), test_tensor_fill_normal(&v, &rng, 1.0f);
    const int64_t half = cc->rotary_dim / 2 > 0 ? cc->rotary_dim / 2 : 1;
    float *cos_table = malloc((size_t)(T * half) * 4), *sin_table = malloc((size_t)(T * half) * 4);
    for (int64_t p = 0; p < T; ++p)
        for (int64_t j = 0; j < half; ++j) {
            const double angle = (double)p * pow(10000.0, -2.0 * (double)j / (double)(2 * half));
            cos_table[p * half + j] = (float)cos(angle), sin_table[p * half + j] = (float)sin(angle);
        }
    const int64_t table_shape[2] = {T, half};
    attn_tensor cos_view = attn_tensor_contiguous(cos_table, ATTN_DTYPE_F32, 2, table_shape);
    attn_tensor sin_view = attn_tensor_contiguous(sin_table, ATTN_DTYPE_F32, 2, table_shape);

    /* The oracle: RoPE'd copies, one reference prefill over the whole sequence. */
    test_tensor qr = test_tensor_new(B, T, cc->Hq, cc->Dk, TEST_LAYOUT_BTHD);
    test_tensor kr = test_tensor_new(B, T, cc->Hkv, cc->Dk, TEST_LAYOUT_BTHD);
    memcpy(qr.allocation, q.allocation, (size_t)q.allocation_floats * 4);
    memcpy(kr.allocation, k.allocation, (size_t)k.allocation_floats * 4);
    if (cc->rotary_dim > 0)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) {
                for (int64_t h = 0; h < cc->Hq; ++h)
                    rope_reference(qr.allocation + ((b * T + t) * cc->Hq + h) * cc->Dk, cc->rotary_dim, cc->layout,
                                   cos_table, sin_table, t);
                for (int64_t h = 0; h < cc->Hkv; ++h)
                    rope_reference(kr.allocation + ((b * T + t) * cc->Hkv + h) * cc->Dk, cc->rotary_dim, cc->layout,
                                   cos_table, sin_table, t);
            }
    attn_options options = causal_options(cc->window_left, cc->softcap);
    attn_error error;
    test_tensor expected = test_tensor_new(B, T, cc->Hq, cc->Dv, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_forward(&qr.view, &kr.view, &v.view, &options, &expected.view, NULL, &error), ATTN_OK,
                 &error, "%s: reference", cc->name);

    const int64_t chunks[4] = {1, 7, 512, 5};
    for (int c = 0; c < 4; ++c) {
        const int64_t ps = cc->page_size > 0 ? cc->page_size : T;
        const int64_t max_pages = (T + ps - 1) / ps, pages = cc->page_size > 0 ? B * max_pages : B;
        pool kp = pool_new(ATTN_DTYPE_F32, pages, ps, cc->Hkv, cc->Dk);
        pool vp = pool_new(ATTN_DTYPE_F32, pages, ps, cc->Hkv, cc->Dv);
        int32_t *table = malloc((size_t)(B * max_pages) * sizeof(int32_t));
        for (int64_t p = 0; p < B * max_pages; ++p) table[p] = (int32_t)p;
        for (int64_t p = B * max_pages - 1; p > 0; --p) { /* shuffled pages */
            const int64_t r = test_rng_range(&rng, 0, p);
            const int32_t t = table[p];
            table[p] = table[r], table[r] = t;
        }
        const int64_t tshape[2] = {B, max_pages};
        attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
        int32_t seqlens[4] = {0, 0, 0, 0};
        attn_kv_cache_view view = {0, &kp.view, &vp.view, cc->page_size > 0 ? &table_view : NULL, seqlens, NULL, NULL};
        double worst = 0.0;
        for (int64_t first = 0; first < T;) {
            int64_t count = chunks[c];
            if (count > T - first) count = T - first;
            attn_tensor qn = q.view, kn = k.view, vn = v.view;
            qn.data = q.allocation + first * q.view.stride[1], qn.shape[1] = count;
            kn.data = k.allocation + first * k.view.stride[1], kn.shape[1] = count;
            vn.data = v.allocation + first * v.view.stride[1], vn.shape[1] = count;
            attn_kv_append append = {&kn, &vn, cc->rotary_dim > 0 ? &cos_view : NULL,
                                     cc->rotary_dim > 0 ? &sin_view : NULL, cc->layout};
            test_tensor out = test_tensor_new(B, count, cc->Hq, cc->Dv, TEST_LAYOUT_BTHD);
            attn_execution execution = attn_execution_default();
            execution.num_threads = (int)(first % 3) + 1;
            attn_status status = attn_forward_with_kvcache(&qn, &view, &append, &options, &out.view, NULL,
                                                           &execution, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "%s: chunk %lld at %lld", cc->name, (long long)chunks[c],
                         (long long)first);
            if (status != ATTN_OK) break;
            attn_tensor slice = expected.view;
            slice.data = expected.allocation + first * expected.view.stride[1], slice.shape[1] = count;
            const double e = test_max_relative_error(&out.view, &slice);
            if (e > worst) worst = e;
            test_tensor_free(&out);
            for (int64_t b = 0; b < B; ++b) seqlens[b] += (int32_t)count;
            first += count;
        }
        CHECK(worst <= 2e-5, "%s: append + attend in chunks of %lld = one prefill (err %.3g)", cc->name,
              (long long)chunks[c], worst);
        free(kp.data), free(vp.data), free(table);
    }
    free(cos_table), free(sin_table);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&qr), test_tensor_free(&kr);
    test_tensor_free(&expected);
}

/* Both paths (Tq = 2 decoding, Tq = 40 prefill) bitwise for 1, 2 and 3 threads. */
static void test_threads(void) {
    test_rng rng;
    test_rng_seed(&rng, 7);
    const int64_t B = 3, Hq = 4, Hkv = 2, D = 32, ps = 16, max_pages = 8;
    pool kp = pool_new(ATTN_DTYPE_BF16, B * max_pages, ps, Hkv, D), vp = pool_new(ATTN_DTYPE_BF16, B * max_pages, ps, Hkv, D);
    uint16_t *kd = kp.data, *vd = vp.data;
    for (size_t e = 0; e < kp.bytes / 2; ++e) kd[e] = to_bf16((float)test_rng_normal(&rng)), vd[e] = to_bf16((float)test_rng_normal(&rng));
    int32_t table[24];
    for (int p = 0; p < 24; ++p) table[p] = (p * 7) % 24;
    const int64_t tshape[2] = {B, max_pages};
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
    int32_t seqlens[3] = {80, 45, 120};
    attn_kv_cache_view view = {0, &kp.view, &vp.view, &table_view, seqlens, NULL, NULL};
    attn_options options = causal_options(-1, 0.0f);
    const int64_t tq[2] = {2, 40};
    for (int path = 0; path < 2; ++path) {
        test_tensor q = test_tensor_new(B, tq[path], Hq, D, TEST_LAYOUT_BTHD);
        test_tensor_fill_normal(&q, &rng, 1.0f);
        test_tensor first = test_tensor_new(B, tq[path], Hq, D, TEST_LAYOUT_BTHD);
        int same = 1;
        for (int threads = 1; threads <= 3; ++threads) {
            attn_execution execution = attn_execution_default();
            execution.num_threads = threads;
            test_tensor out = test_tensor_new(B, tq[path], Hq, D, TEST_LAYOUT_BTHD);
            attn_error error;
            CHECK_STATUS(attn_forward_with_kvcache(&q.view, &view, NULL, &options, &out.view, NULL, &execution, &error),
                         ATTN_OK, &error, "threads %d", threads);
            if (threads == 1) memcpy(first.allocation, out.allocation, (size_t)out.allocation_floats * 4);
            else same &= test_bitwise_equal(&out.view, &first.view);
            /* Against the oracle on the gathered keys of sequence 1. */
            if (threads == 1) {
                const int64_t L = seqlens[1];
                test_tensor K = test_tensor_new(1, L, Hkv, D, TEST_LAYOUT_BTHD), V = test_tensor_new(1, L, Hkv, D, TEST_LAYOUT_BTHD);
                for (int64_t t = 0; t < L; ++t)
                    for (int64_t h = 0; h < Hkv; ++h)
                        for (int64_t d = 0; d < D; ++d) {
                            const int64_t e = ((table[1 * max_pages + t / ps] * ps + t % ps) * Hkv + h) * D + d;
                            K.allocation[(t * Hkv + h) * D + d] = from_bf16(kd[e]);
                            V.allocation[(t * Hkv + h) * D + d] = from_bf16(vd[e]);
                        }
                attn_tensor q1 = q.view, o1 = out.view;
                q1.data = q.allocation + q.view.stride[0], q1.shape[0] = 1;
                o1.data = out.allocation + out.view.stride[0], o1.shape[0] = 1;
                test_tensor ref = test_tensor_new(1, tq[path], Hq, D, TEST_LAYOUT_BTHD);
                attn_reference_forward(&q1, &K.view, &V.view, &options, &ref.view, NULL, &error);
                const double e = test_max_relative_error(&o1, &ref.view);
                CHECK(e <= 1e-5, "%s path, bf16 paged: sequence 1 = oracle (err %.3g)", path ? "prefill" : "decode", e);
                test_tensor_free(&K), test_tensor_free(&V), test_tensor_free(&ref);
            }
            test_tensor_free(&out);
        }
        CHECK(same, "%s path: 1, 2, 3 threads bitwise", path ? "prefill" : "decode");
        test_tensor_free(&q), test_tensor_free(&first);
    }
    free(kp.data), free(vp.data);
}

/* 16-bit queries (both paths, bf16 pages, with an append and RoPE): out in q's dtype within
 * its rounding of the float32-query result. */
static void test_half_queries(void) {
    test_rng rng;
    test_rng_seed(&rng, 8);
    const int64_t B = 2, Hq = 4, Hkv = 2, D = 16, ps = 8, max_pages = 12;
    const attn_dtype dtypes[2] = {ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    for (int path = 0; path < 2; ++path)
        for (int n = 0; n < 2; ++n) {
            const int64_t Tq = path == 0 ? 3 : 30;
            int32_t table[24];
            for (int p = 0; p < 24; ++p) table[p] = (p * 5) % 24;
            const int64_t tshape[2] = {B, max_pages};
            attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
            float cos_sin[2 * 128 * 4];
            for (int e = 0; e < 128 * 4; ++e)
                cos_sin[e] = cosf(0.05f * (float)e), cos_sin[128 * 4 + e] = sinf(0.05f * (float)e);
            const int64_t rshape[2] = {128, 4};
            attn_tensor cos_view = attn_tensor_contiguous(cos_sin, ATTN_DTYPE_F32, 2, rshape);
            attn_tensor sin_view = attn_tensor_contiguous(cos_sin + 128 * 4, ATTN_DTYPE_F32, 2, rshape);
            test_tensor q = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD), kn = test_tensor_new(B, Tq, Hkv, D, TEST_LAYOUT_BTHD);
            test_tensor vn = test_tensor_new(B, Tq, Hkv, D, TEST_LAYOUT_BTHD);
            test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&kn, &rng, 1.0f), test_tensor_fill_normal(&vn, &rng, 1.0f);
            uint16_t *qh = malloc((size_t)q.allocation_floats * 2), *oh = malloc((size_t)(B * Tq * Hq * D) * 2);
            attn_tensor qv = q.view;
            qv.data = qh, qv.dtype = dtypes[n];
            attn_error error;
            attn_tensor_convert(&q.view, &qv, &error);
            test_tensor q_rounded = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD);
            attn_tensor_convert(&qv, &q_rounded.view, &error);
            attn_tensor ov = attn_tensor_f32_4d(NULL, B, Tq, Hq, D);
            ov.data = oh, ov.dtype = dtypes[n];
            test_tensor expected = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD), got = test_tensor_new(B, Tq, Hq, D, TEST_LAYOUT_BTHD);
            attn_options options = causal_options(-1, 0.0f);
            for (int half = 0; half <= 1; ++half) {
                pool kp = pool_new(ATTN_DTYPE_BF16, 24, ps, Hkv, D), vp = pool_new(ATTN_DTYPE_BF16, 24, ps, Hkv, D);
                test_rng fill;
                test_rng_seed(&fill, 99);
                for (size_t e = 0; e < kp.bytes / 2; ++e)
                    ((uint16_t *)kp.data)[e] = to_bf16((float)test_rng_normal(&fill)), ((uint16_t *)vp.data)[e] = to_bf16((float)test_rng_normal(&fill));
                int32_t seqlens[2] = {40, 17};
                attn_kv_cache_view view = {0, &kp.view, &vp.view, &table_view, seqlens, NULL, NULL};
                attn_kv_append append = {&kn.view, &vn.view, &cos_view, &sin_view, ATTN_ROPE_HALF};
                attn_status status = attn_forward_with_kvcache(half ? &qv : &q_rounded.view, &view, &append, &options,
                                                               half ? &ov : &expected.view, NULL, NULL, &error);
                CHECK_STATUS(status, ATTN_OK, &error, "16-bit queries, Tq %lld", (long long)Tq);
                free(kp.data), free(vp.data);
            }
            attn_tensor_convert(&ov, &got.view, &error);
            const double e = test_max_relative_error(&got.view, &expected.view);
            CHECK(e <= (dtypes[n] == ATTN_DTYPE_BF16 ? 3e-2 : 4e-3),
                  "%s queries, %s path: = float32 queries within the rounding (err %.3g)",
                  dtypes[n] == ATTN_DTYPE_BF16 ? "bf16" : "f16", path ? "prefill" : "decode", e);
            free(qh), free(oh);
            test_tensor_free(&q), test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&q_rounded);
            test_tensor_free(&expected), test_tensor_free(&got);
        }
}

/* ---- 3. errors: status, message, cache untouched ---- */
typedef enum error_kind {
    E_CAPACITY, E_NEGATIVE_LENGTH, E_PAGE_OUTSIDE, E_APPEND_COLLIDE, E_APPEND_SHARED_READ, E_SAME_SEQUENCE_TWICE,
    E_ROTARY_SHORT, E_K_WITHOUT_V, E_BAD_DTYPE, E_KEY_LENGTHS, E_MIXED_DTYPES, E_MEMORY_LIMIT, E_TABLE_SHAPE,
    E_PAGE_STRIDE_ZERO, E_SLOT_STRIDE_ZERO, E_ROWS_OVERLAP, E_KV_SAME, E_KV_OVERLAP
} error_kind;

typedef struct error_case {
    const char *name;
    error_kind kind;
    attn_status expected;
    const char *needle;
} error_case;

static const error_case error_cases[] = {
    {"cache_seqlens + new beyond capacity", E_CAPACITY, ATTN_ERROR_CAPACITY, "sequence 1: cache_seqlens[1] = 30 + 3 new tokens = 33 exceeds"},
    {"negative cache_seqlens", E_NEGATIVE_LENGTH, ATTN_ERROR_INVALID_ARGUMENT, "cache_seqlens[0] = -1"},
    {"block_table entry outside the pool", E_PAGE_OUTSIDE, ATTN_ERROR_INVALID_ARGUMENT, "block_table[1, 1] = 99: outside the pool of 8 pages"},
    {"two appends write one page", E_APPEND_COLLIDE, ATTN_ERROR_INVALID_ARGUMENT, "also writes"},
    {"an append writes a page another sequence reads", E_APPEND_SHARED_READ, ATTN_ERROR_INVALID_ARGUMENT, "also used by sequence 1"},
    {"one sequence maps two blocks to one written page", E_SAME_SEQUENCE_TWICE, ATTN_ERROR_INVALID_ARGUMENT, "also used by sequence 0"},
    {"rotary tables too short", E_ROTARY_SHORT, ATTN_ERROR_SHAPE_MISMATCH, "rotary_cos.shape[0] = 4 positions: sequence 0 needs position"},
    {"k_new without v_new", E_K_WITHOUT_V, ATTN_ERROR_NULL_ARGUMENT, "append->v_new is NULL"},
    {"int32 cache", E_BAD_DTYPE, ATTN_ERROR_INVALID_ARGUMENT, "k_cache.dtype = int32"},
    {"options.key_lengths", E_KEY_LENGTHS, ATTN_ERROR_INVALID_ARGUMENT, "options.key_lengths is set"},
    {"k/v dtypes differ", E_MIXED_DTYPES, ATTN_ERROR_INVALID_ARGUMENT, "v_cache.dtype"},
    {"memory limit", E_MEMORY_LIMIT, ATTN_ERROR_MEMORY_LIMIT, "execution.memory_limit_bytes = 64"},
    {"block_table rows != B", E_TABLE_SHAPE, ATTN_ERROR_SHAPE_MISMATCH, "block_table.shape[0] = 3"},
    /* layouts in which appends would write two rows to one address */
    {"k_cache pages at stride 0", E_PAGE_STRIDE_ZERO, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_cache.stride[0] = 0 (shape[0] = 8): an append would write two rows to one address"},
    {"v_cache slots at stride 0", E_SLOT_STRIDE_ZERO, ATTN_ERROR_INVALID_ARGUMENT, "cache->v_cache.stride[1] = 0 (shape[1] = 8)"},
    {"k_cache rows overlapping", E_ROWS_OVERLAP, ATTN_ERROR_INVALID_ARGUMENT,
     "cache->k_cache.stride[1] = 2 (shape[1] = 8): an append would write two rows to one address (each dimension's "
     "stride must be at least 4"},
    {"v_cache = k_cache", E_KV_SAME, ATTN_ERROR_INVALID_ARGUMENT, "and cache->v_cache (data"},
    {"v_cache starts inside k_cache", E_KV_OVERLAP, ATTN_ERROR_INVALID_ARGUMENT, "may share memory: an append writes both"},
};

static void test_errors(void) {
    const int64_t B = 2, H = 1, D = 4, ps = 8, max_pages = 4, pages = 8;
    for (size_t n = 0; n < sizeof error_cases / sizeof error_cases[0]; ++n) {
        const error_case *ec = &error_cases[n];
        pool kp = pool_new(ATTN_DTYPE_F32, pages, ps, H, D), vp = pool_new(ATTN_DTYPE_F32, pages, ps, H, D);
        for (size_t e = 0; e < kp.bytes / 4; ++e) ((float *)kp.data)[e] = (float)e, ((float *)vp.data)[e] = -(float)e;
        int32_t table[12] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0};
        int32_t seqlens[2] = {10, 12};
        int64_t tshape[2] = {B, max_pages};
        const int64_t Tnew = ec->kind == E_MEMORY_LIMIT ? 17 : 3;
        test_tensor kn = test_tensor_new(B, Tnew, H, D, TEST_LAYOUT_BTHD), vn = test_tensor_new(B, Tnew, H, D, TEST_LAYOUT_BTHD);
        test_tensor q = test_tensor_new(B, Tnew, H, D, TEST_LAYOUT_BTHD), out = test_tensor_new(B, Tnew, H, D, TEST_LAYOUT_BTHD);
        float rot[8] = {1, 1, 1, 1, 0, 0, 0, 0};
        const int64_t rshape[2] = {4, 1};
        attn_tensor cos_view = attn_tensor_contiguous(rot, ATTN_DTYPE_F32, 2, rshape);
        attn_tensor sin_view = attn_tensor_contiguous(rot + 4, ATTN_DTYPE_F32, 2, rshape);
        attn_kv_append append = {&kn.view, &vn.view, NULL, NULL, ATTN_ROPE_HALF};
        attn_options options = causal_options(-1, 0.0f);
        attn_execution execution = attn_execution_default();
        int32_t lengths[2] = {1, 1};
        attn_tensor bad = kp.view;
        attn_tensor *kc = &kp.view, *vc = &vp.view;
        switch (ec->kind) {
        case E_CAPACITY: seqlens[1] = 30; break;
        case E_NEGATIVE_LENGTH: seqlens[0] = -1; break;
        case E_PAGE_OUTSIDE: table[5] = 99; break;
        case E_APPEND_COLLIDE: table[5] = 1; break;                  /* both append into page 1 */
        case E_APPEND_SHARED_READ: seqlens[0] = 14, table[4] = 1; break; /* seq 0 writes page 1, seq 1 reads it */
        case E_SAME_SEQUENCE_TWICE: table[0] = 1; break;            /* seq 0: blocks 0 and 1 = page 1 */
        case E_ROTARY_SHORT: append.rotary_cos = &cos_view, append.rotary_sin = &sin_view; break;
        case E_K_WITHOUT_V: append.v_new = NULL; break;
        case E_BAD_DTYPE: bad.dtype = ATTN_DTYPE_I32, kc = &bad; break;
        case E_KEY_LENGTHS: options.key_lengths = lengths; break;
        case E_MIXED_DTYPES: bad = vp.view, bad.dtype = ATTN_DTYPE_BF16, vc = &bad; break;
        case E_MEMORY_LIMIT: execution.memory_limit_bytes = 64; break;
        case E_TABLE_SHAPE: tshape[0] = 3; break;
        case E_PAGE_STRIDE_ZERO: bad.stride[0] = 0, kc = &bad; break;
        case E_SLOT_STRIDE_ZERO: bad = vp.view, bad.stride[1] = 0, vc = &bad; break;
        case E_ROWS_OVERLAP: bad.stride[1] = 2, kc = &bad; break;
        case E_KV_SAME: vc = &kp.view; break;
        case E_KV_OVERLAP: bad.data = (float *)kp.data + 2, vc = &bad; break; /* never reaches past page 5 */
        }
        attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
        attn_kv_cache_view view = {0, kc, vc, &table_view, seqlens, NULL, NULL};
        void *k_before = malloc(kp.bytes), *v_before = malloc(vp.bytes);
        memcpy(k_before, kp.data, kp.bytes), memcpy(v_before, vp.data, vp.bytes);
        attn_error error;
        memset(&error, 0, sizeof error);
        attn_status status = attn_forward_with_kvcache(&q.view, &view, &append, &options, &out.view, NULL, &execution, &error);
        CHECK(status == ec->expected && strstr(error.message, ec->needle) != NULL, "%s: %s \"%s\"", ec->name,
              attn_status_name(status), error.message);
        CHECK(memcmp(k_before, kp.data, kp.bytes) == 0 && memcmp(v_before, vp.data, vp.bytes) == 0,
              "%s: the cache is untouched", ec->name);
        free(k_before), free(v_before), free(kp.data), free(vp.data);
        test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&q), test_tensor_free(&out);
    }
    /* Shared read-only prefix pages without an append into them are fine. */
    pool kp = pool_new(ATTN_DTYPE_F32, 4, 8, 1, 4), vp = pool_new(ATTN_DTYPE_F32, 4, 8, 1, 4);
    for (size_t e = 0; e < kp.bytes / 4; ++e) ((float *)kp.data)[e] = 0.01f * (float)e, ((float *)vp.data)[e] = 1.0f;
    int32_t table[4] = {0, 1, 0, 2}; /* page 0 shared, appends go to pages 1 and 2 */
    int32_t seqlens[2] = {8, 8};
    const int64_t tshape[2] = {2, 2};
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
    attn_kv_cache_view view = {0, &kp.view, &vp.view, &table_view, seqlens, NULL, NULL};
    test_tensor kn = test_tensor_new(2, 1, 1, 4, TEST_LAYOUT_BTHD), vn = test_tensor_new(2, 1, 1, 4, TEST_LAYOUT_BTHD);
    for (int e = 0; e < 8; ++e) vn.allocation[e] = 1.0f;
    test_tensor q = test_tensor_new(2, 1, 1, 4, TEST_LAYOUT_BTHD), out = test_tensor_new(2, 1, 1, 4, TEST_LAYOUT_BTHD);
    attn_kv_append append = {&kn.view, &vn.view, NULL, NULL, ATTN_ROPE_HALF};
    attn_options options = causal_options(-1, 0.0f);
    attn_error error;
    attn_status status = attn_forward_with_kvcache(&q.view, &view, &append, &options, &out.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "a shared prefix page with appends elsewhere");
    CHECK(out.allocation[0] == 1.0f && out.allocation[7] == 1.0f, "every value 1: output 1 (%g)", out.allocation[0]);
    CHECK(((float *)kp.data)[1 * 32 + 0] == 0.0f, "the new key went to page 1, slot 0");
    free(kp.data), free(vp.data);
    test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&q), test_tensor_free(&out);
}

/* Layouts an append may write: k and v interleaved in one allocation, per head ([pages, ps,
 * H, 2, D]) or per page (vLLM's [pages, 2, ps, H, D]: the same strides, k and v apart only by
 * the half page between them), equal separate pools bitwise; a read-only call accepts any
 * strides (a zero page stride: every page the same memory). */
static void test_layouts(void) {
    enum { PAGES = 4, PS = 8, H = 2, D = 8, B = 2 };
    static float joint[PAGES * PS * H * 2 * D];
    pool kp = pool_new(ATTN_DTYPE_F32, PAGES, PS, H, D), vp = pool_new(ATTN_DTYPE_F32, PAGES, PS, H, D);
    test_rng rng;
    test_rng_seed(&rng, 91);
    test_tensor kn = test_tensor_new(B, 2, H, D, TEST_LAYOUT_BTHD), vn = test_tensor_new(B, 2, H, D, TEST_LAYOUT_BTHD);
    test_tensor q = test_tensor_new(B, 2, 2 * H, D, TEST_LAYOUT_BTHD);
    test_tensor outs[2] = {test_tensor_new(B, 2, 2 * H, D, TEST_LAYOUT_BTHD), test_tensor_new(B, 2, 2 * H, D, TEST_LAYOUT_BTHD)};
    test_tensor_fill_normal(&kn, &rng, 1.0f), test_tensor_fill_normal(&vn, &rng, 1.0f), test_tensor_fill_normal(&q, &rng, 1.0f);
    attn_kv_append append = {&kn.view, &vn.view, NULL, NULL, ATTN_ROPE_HALF};
    attn_options options = causal_options(-1, 0.0f);
    attn_error error;
    int32_t table[4] = {2, 0, 1, 3};
    const int64_t tshape[2] = {B, 2};
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
    for (int per_page = 0; per_page < 2; ++per_page) {
        const char *name = per_page ? "k and v pages interleaved ([pages, 2, ps, H, D])"
                                    : "k and v heads interleaved ([pages, ps, H, 2, D])";
        const int64_t shape[4] = {PAGES, PS, H, D};
        attn_tensor kj = attn_tensor_contiguous(joint, ATTN_DTYPE_F32, 4, shape), vj;
        kj.stride[0] = PS * H * 2 * D;
        kj.stride[1] = per_page ? H * D : H * 2 * D, kj.stride[2] = per_page ? D : 2 * D;
        vj = kj, vj.data = joint + (per_page ? PS * H * D : D);
        for (int e = 0; e < PAGES * PS * H * D; ++e) {
            const int64_t p = e / (PS * H * D), s = e / (H * D) % PS, h = e / D % H, d = e % D;
            const float key = 0.01f * (float)(e % 97), value = 0.5f - 0.003f * (float)(e % 89);
            ((float *)kp.data)[e] = *at4(&kj, p, s, h, d) = key;
            ((float *)vp.data)[e] = *at4(&vj, p, s, h, d) = value;
        }
        int32_t seqlens[2] = {9, 5};
        for (int form = 0; form < 2; ++form) {
            attn_kv_cache_view view = {0, form ? &kj : &kp.view, form ? &vj : &vp.view, &table_view, seqlens, NULL, NULL};
            CHECK_STATUS(attn_forward_with_kvcache(&q.view, &view, &append, &options, &outs[form].view, NULL, NULL, &error),
                         ATTN_OK, &error, "append into %s", form ? name : "two pools");
        }
        CHECK(test_bitwise_equal(&outs[0].view, &outs[1].view), "%s = separate pools, bitwise", name);
        int same = 1;
        for (int e = 0; e < PAGES * PS * H * D; ++e) {
            const int64_t p = e / (PS * H * D), s = e / (H * D) % PS, h = e / D % H, d = e % D;
            same = same && *at4(&kj, p, s, h, d) == ((float *)kp.data)[e] && *at4(&vj, p, s, h, d) == ((float *)vp.data)[e];
        }
        CHECK(same, "%s: every stored element = the separate pools'", name);
    }
    /* Read-only: every page at one address is accepted (no append writes it). */
    attn_tensor k_one = kp.view, v_one = vp.view;
    k_one.stride[0] = 0, v_one.stride[0] = 0;
    int32_t held[2] = {8, 3};
    int32_t one_table[4] = {0, 0, 0, 0};
    attn_tensor one_view = attn_tensor_contiguous(one_table, ATTN_DTYPE_I32, 2, tshape);
    attn_kv_cache_view view = {0, &k_one, &v_one, &one_view, held, NULL, NULL};
    CHECK_STATUS(attn_forward_with_kvcache(&q.view, &view, NULL, &options, &outs[0].view, NULL, NULL, &error), ATTN_OK,
                 &error, "read-only call with page stride 0");
    free(kp.data), free(vp.data);
    test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&q), test_tensor_free(&outs[0]), test_tensor_free(&outs[1]);
}

/* ---- 4. the new rows may not alias the cache they are appended into ---- */
/* k_new or v_new [2, 3, 1, 4] laid over a pool [8, 8, 1, 4] (seq 0 on pages 0-3 appends at
 * 10..12, seq 1 on pages 4-7 at 12..14): refused with both tensors' exact byte ranges. */
typedef struct alias_case {
    const char *name;
    int value;         /* 0: k_new is laid over the pool, 1: v_new */
    int value_pool;    /* the pool it lies in: 0 k_cache, 1 v_cache */
    int64_t offset;    /* floats from the pool's start to element [0, 0, 0, 0] */
    int64_t stride[4]; /* its strides (floats) */
    int64_t first, end; /* the floats it spans, from element [0, 0, 0, 0] */
} alias_case;

static const alias_case alias_cases[] = {
    {"k_new inside k_cache's last page", 0, 0, 224, {12, 4, 4, 1}, 0, 24},
    {"v_new = the very rows it is appended into", 1, 1, 40, {136, 4, 4, 1}, 0, 148},
    {"k_new inside v_cache", 0, 1, 100, {12, 4, 4, 1}, 0, 24},
    {"k_new on every other float, between k_cache's elements", 0, 0, 1, {24, 8, 8, 2}, 0, 47},
    {"v_new with a negative token stride inside k_cache", 1, 0, 40, {12, -4, 4, 1}, -8, 16},
};

static void test_new_rows_alias(void) {
    enum { PAGES = 8, PS = 8, H = 1, D = 4, B = 2, T = 3 };
    int32_t table[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t seqlens[2] = {10, 12};
    const int64_t tshape[2] = {B, 4};
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
    attn_options options = causal_options(-1, 0.0f);
    for (size_t n = 0; n < sizeof alias_cases / sizeof alias_cases[0]; ++n) {
        const alias_case *ac = &alias_cases[n];
        pool kp = pool_new(ATTN_DTYPE_F32, PAGES, PS, H, D), vp = pool_new(ATTN_DTYPE_F32, PAGES, PS, H, D);
        for (size_t e = 0; e < kp.bytes / 4; ++e) ((float *)kp.data)[e] = 0.01f * (float)e, ((float *)vp.data)[e] = 1.0f - 0.002f * (float)e;
        test_tensor kn = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD), vn = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
        test_tensor q = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD), out = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
        test_tensor_fill_all(&kn, 0.5f), test_tensor_fill_all(&vn, 2.0f), test_tensor_fill_all(&q, 0.1f);
        const pool *home = ac->value_pool ? &vp : &kp;
        attn_tensor alias = ac->value ? vn.view : kn.view;
        alias.data = (float *)home->data + ac->offset;
        for (int d = 0; d < 4; ++d) alias.stride[d] = ac->stride[d];
        attn_kv_append append = {ac->value ? &kn.view : &alias, ac->value ? &alias : &vn.view, NULL, NULL, ATTN_ROPE_HALF};
        attn_kv_cache_view view = {0, &kp.view, &vp.view, &table_view, seqlens, NULL, NULL};
        char expected[256];
        snprintf(expected, sizeof expected,
                 "append->%s (bytes [%p, %p)) and cache->%s (bytes [%p, %p)) may share memory: the new rows must not "
                 "alias the cache they are appended into",
                 ac->value ? "v_new" : "k_new", (void *)((float *)alias.data + ac->first),
                 (void *)((float *)alias.data + ac->end), ac->value_pool ? "v_cache" : "k_cache", home->data,
                 (void *)((char *)home->data + home->bytes));
        void *k_before = malloc(kp.bytes), *v_before = malloc(vp.bytes);
        memcpy(k_before, kp.data, kp.bytes), memcpy(v_before, vp.data, vp.bytes);
        attn_error error;
        memset(&error, 0, sizeof error);
        const attn_status status = attn_forward_with_kvcache(&q.view, &view, &append, &options, &out.view, NULL, NULL, &error);
        CHECK(status == ATTN_ERROR_INVALID_ARGUMENT && strstr(error.message, expected) != NULL, "%s: %s \"%s\" (expected \"%s\")",
              ac->name, attn_status_name(status), error.message, expected);
        CHECK(memcmp(k_before, kp.data, kp.bytes) == 0 && memcmp(v_before, vp.data, vp.bytes) == 0,
              "%s: the cache is untouched", ac->name);
        free(k_before), free(v_before), free(kp.data), free(vp.data);
        test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&q), test_tensor_free(&out);
    }
}

/* New rows that share an allocation with the cache but none of its bytes, or one tensor for
 * both k_new and v_new (both only read), are accepted: the output and every stored element
 * equal those of separate buffers holding the same values, bitwise. */
typedef enum beside_form {
    BESIDE_INTERLEAVED, /* [pages, ps, H, 4, D]: k, v, k_new, v_new rows side by side */
    BESIDE_AFTER_POOLS, /* one allocation: k pool, v pool, k_new, v_new one after the other */
    BESIDE_ONE_TENSOR   /* as BESIDE_AFTER_POOLS, but append.k_new = append.v_new */
} beside_form;

static void test_new_rows_beside(void) {
    enum { PAGES = 4, PS = 8, H = 2, D = 4, B = 2, T = 3, HQ = 4 };
    const char *names[3] = {"new rows interleaved with k and v in one allocation",
                            "new rows after the pools in one allocation", "k_new = v_new"};
    const int64_t pool_floats = PAGES * PS * H * D, new_floats = B * T * H * D;
    int32_t table[4] = {2, 0, 1, 3};
    int32_t seqlens[2] = {9, 5};
    const int64_t tshape[2] = {B, 2}, shape[4] = {PAGES, PS, H, D}, new_shape[4] = {B, T, H, D};
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
    attn_options options = causal_options(-1, 0.0f);
    test_rng rng;
    test_rng_seed(&rng, 93);
    test_tensor q = test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    for (int form = BESIDE_INTERLEAVED; form <= BESIDE_ONE_TENSOR; ++form) {
        float *arena = malloc((size_t)(4 * pool_floats) * sizeof(float));
        attn_tensor kc = attn_tensor_contiguous(arena, ATTN_DTYPE_F32, 4, shape), vc = kc;
        attn_tensor knew = attn_tensor_contiguous(arena + 2 * pool_floats, ATTN_DTYPE_F32, 4, new_shape), vnew = knew;
        if (form == BESIDE_INTERLEAVED) {
            attn_tensor *all[4] = {&kc, &vc, &knew, &vnew};
            for (int n = 0; n < 4; ++n)
                all[n]->stride[0] = PS * H * 4 * D, all[n]->stride[1] = H * 4 * D, all[n]->stride[2] = 4 * D;
            vc.data = arena + D, knew.data = arena + 2 * D, vnew.data = arena + 3 * D;
        } else {
            vc.data = arena + pool_floats;
            vnew.data = form == BESIDE_AFTER_POOLS ? arena + 2 * pool_floats + new_floats : knew.data;
        }
        pool kp = pool_new(ATTN_DTYPE_F32, PAGES, PS, H, D), vp = pool_new(ATTN_DTYPE_F32, PAGES, PS, H, D);
        test_tensor kn = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD), vn = test_tensor_new(B, T, H, D, TEST_LAYOUT_BTHD);
        for (int64_t e = 0; e < pool_floats; ++e) {
            const int64_t p = e / (PS * H * D), s = e / (H * D) % PS, h = e / D % H, d = e % D;
            *at4(&kc, p, s, h, d) = ((float *)kp.data)[e] = 0.01f * (float)(e % 97);
            *at4(&vc, p, s, h, d) = ((float *)vp.data)[e] = 0.5f - 0.003f * (float)(e % 89);
        }
        for (int64_t e = 0; e < new_floats; ++e) {
            const int64_t b = e / (T * H * D), t = e / (H * D) % T, h = e / D % H, d = e % D;
            kn.allocation[e] = sinf(0.37f * (float)e);
            vn.allocation[e] = form == BESIDE_ONE_TENSOR ? kn.allocation[e] : cosf(0.29f * (float)e);
            *at4(&knew, b, t, h, d) = kn.allocation[e];
            *at4(&vnew, b, t, h, d) = vn.allocation[e];
        }
        test_tensor outs[2] = {test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD), test_tensor_new(B, T, HQ, D, TEST_LAYOUT_BTHD)};
        attn_error error;
        for (int run = 0; run < 2; ++run) {
            attn_kv_cache_view view = {0, run ? &kc : &kp.view, run ? &vc : &vp.view, &table_view, seqlens, NULL, NULL};
            attn_kv_append append = {run ? &knew : &kn.view, run ? &vnew : &vn.view, NULL, NULL, ATTN_ROPE_HALF};
            CHECK_STATUS(attn_forward_with_kvcache(&q.view, &view, &append, &options, &outs[run].view, NULL, NULL, &error),
                         ATTN_OK, &error, "%s (%s)", names[form], run ? "as laid out" : "separate buffers");
        }
        CHECK(test_bitwise_equal(&outs[0].view, &outs[1].view), "%s: output = separate buffers', bitwise", names[form]);
        int same = 1;
        for (int64_t e = 0; e < pool_floats; ++e) {
            const int64_t p = e / (PS * H * D), s = e / (H * D) % PS, h = e / D % H, d = e % D;
            same = same && *at4(&kc, p, s, h, d) == ((float *)kp.data)[e] && *at4(&vc, p, s, h, d) == ((float *)vp.data)[e];
        }
        CHECK(same, "%s: every stored element = the separate pools'", names[form]);
        free(arena), free(kp.data), free(vp.data);
        test_tensor_free(&kn), test_tensor_free(&vn), test_tensor_free(&outs[0]), test_tensor_free(&outs[1]);
    }
    test_tensor_free(&q);
}

/* Random layouts of k_cache, v_cache and k_new [B, S, H, D] in one float arena (non-negative
 * strides, some zero, some multiples of D, some arbitrary), each appended into at slot 0:
 * whenever the bytes say two written rows share an address (within k_cache, within v_cache,
 * or between them) or k_new shares one with either, the call is refused, cache untouched;
 * whenever the call is accepted, they share none (the rule is conservative, never wrong). The
 * truth is counted byte by byte over the arena, independently of the library's rule. */
static void test_layout_property(void) {
    enum { ARENA = 2048, TRIALS = 1500 };
    static float arena[ARENA], before[ARENA];
    static unsigned char owner[ARENA * 4];
    test_rng rng;
    test_rng_seed(&rng, 97);
    int accepted = 0, refused = 0, interleaved_accepted = 0;
    for (int trial = 0; trial < TRIALS; ++trial) {
        const int64_t B = test_rng_range(&rng, 1, 2), S = test_rng_range(&rng, 1, 3), H = test_rng_range(&rng, 1, 2);
        const int64_t D = test_rng_range(&rng, 1, 4);
        const int64_t shape[4] = {B, S, H, D}, new_shape[4] = {B, 1, H, D};
        attn_tensor t[3]; /* k_cache, v_cache, k_new */
        int64_t reach[3];
        for (int n = 0; n < 3; ++n) {
            t[n] = attn_tensor_contiguous(arena, ATTN_DTYPE_F32, 4, n == 2 ? new_shape : shape);
            reach[n] = D - 1;
            for (int d = 0; d < 3; ++d) {
                const int64_t pick = test_rng_range(&rng, 0, 5);
                t[n].stride[d] = pick == 0 ? 0 : pick == 1 ? D * test_rng_range(&rng, 1, 8)
                               : pick == 2 ? 2 * D * test_rng_range(&rng, 1, 4) : test_rng_range(&rng, 1, 3 * S * H * D);
                if (n == 1 && test_rng_range(&rng, 0, 3) > 0) t[n].stride[d] = t[0].stride[d]; /* v often k's strides */
                reach[n] += t[n].stride[d] * (t[n].shape[d] - 1);
            }
        }
        int64_t start[3];
        for (int n = 0; n < 3; ++n) { /* v often just after k's first row */
            start[n] = n == 1 && test_rng_range(&rng, 0, 1) ? start[0] + test_rng_range(&rng, 1, 2 * D)
                                                            : test_rng_range(&rng, 0, ARENA - 1 - reach[n]);
            if (start[n] + reach[n] >= ARENA) start[n] = 0;
            t[n].data = arena + start[n];
        }
        /* The truth: bytes of each written row, and of each new row. */
        int collide = 0;
        memset(owner, 0, sizeof owner);
        for (int n = 0; n < 3; ++n)
            for (int64_t b = 0; b < B; ++b)
                for (int64_t s = 0; s < t[n].shape[1]; ++s)
                    for (int64_t h = 0; h < H; ++h) {
                        const int64_t row = (const float *)t[n].data - arena + b * t[n].stride[0] + s * t[n].stride[1] + h * t[n].stride[2];
                        for (int64_t byte = row * 4; byte < (row + D) * 4; ++byte) {
                            if (n < 2) collide = collide || owner[byte] != 0, owner[byte] = 1;
                            else collide = collide || owner[byte] == 1;
                        }
                    }
        for (int e = 0; e < ARENA; ++e) arena[e] = before[e] = 0.001f * (float)(e % 113);
        int32_t seqlens[2] = {0, 0};
        attn_kv_cache_view view = {0, &t[0], &t[1], NULL, seqlens, NULL, NULL};
        attn_kv_append append = {&t[2], &t[2], NULL, NULL, ATTN_ROPE_HALF};
        float q_data[2 * 2 * 4] = {0}, out_data[2 * 2 * 4];
        attn_tensor q = attn_tensor_f32_4d(q_data, B, 1, H, D), out = attn_tensor_f32_4d(out_data, B, 1, H, D);
        attn_error error;
        memset(&error, 0, sizeof error);
        const attn_status status = attn_forward_with_kvcache(&q, &view, &append, NULL, &out, NULL, NULL, &error);
        if (status == ATTN_OK) {
            ++accepted;
            interleaved_accepted += start[1] > start[0] && start[1] <= start[0] + 2 * D &&
                                    memcmp(t[0].stride, t[1].stride, sizeof t[0].stride) == 0;
            CHECK(!collide, "trial %d: accepted, but rows share an address (B %lld S %lld H %lld D %lld)", trial,
                  (long long)B, (long long)S, (long long)H, (long long)D);
        } else {
            ++refused;
            CHECK(status == ATTN_ERROR_INVALID_ARGUMENT && strstr(error.message, "cache->") != NULL &&
                      memcmp(arena, before, sizeof arena) == 0,
                  "trial %d: refused with %s \"%s\", the cache untouched", trial, attn_status_name(status), error.message);
        }
        if (collide && status == ATTN_OK) break;
    }
    CHECK(accepted > TRIALS / 10 && refused > TRIALS / 10 && interleaved_accepted > 0,
          "random layouts: %d accepted (%d with k and v interleaved), %d refused", accepted, interleaved_accepted, refused);
}

int main(void) {
    for (size_t n = 0; n < sizeof same_cases / sizeof same_cases[0]; ++n) test_same_as_library(&same_cases[n], 10 + n);
    for (size_t n = 0; n < sizeof chunk_cases / sizeof chunk_cases[0]; ++n) test_chunked(&chunk_cases[n], 50 + n);
    test_threads();
    test_half_queries();
    test_errors();
    test_layouts();
    test_new_rows_alias();
    test_new_rows_beside();
    test_layout_property();
    return test_finish();
}
