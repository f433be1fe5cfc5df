/*
 * test_decode_tile_loop.c — the decode loop's tile paths on every CPU: the registry's tile
 * slots (kernels/registry.h: bf16 tiles, fp8 on the bf16 tiles, int8 tiles) written here in
 * plain C from their contract and installed beside the generic and the best registry's other
 * slots, then attn_decode_run on a call that uses that table. So the loop's own parts of those
 * paths (several chunks' P · V pending, page ends and empty chunks flushing them, fp8 chunks
 * widened or read in place, the int8 P · V one chunk late with its parity buffers, the
 * heads of token-major pages in steps) run where no CPU feature selects them:
 *   - bf16 queries against bf16 and fp8 caches: against attn_reference_forward (float64) on the
 *     values the cache holds, with the 16-bit bound of test_decode_lowp.c (P is rounded to
 *     bf16 for P · V, products exact);
 *   - int8 caches: bitwise the same as the same registry without the tile slots (the contract
 *     gives the int8 tiles the in-place kernels' integers; here they are those kernels);
 *   - the library's pages and the same tokens on token-major pages ([page, slot, head, D],
 *     as a caller's cache): bitwise the same; 1 and 2 threads: bitwise the same.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "call/call.h"
#include "kernels/half.h"
#include "kernels/quant.h"
#include "kernels/registry.h"
#include "test_support.h"

static const attn_kernels *generic_kernels;

/* ---- the tile slots from their contract ---- */
static float bf16_value(uint16_t h) { return attn_bf16_to_float(h); }

/* prepared[r * dim + d]: the query rows rounded to bf16 (a layout of this table's own). */
static void plain_prepare_tile_queries(int rows, int dim, const float *queries, uint16_t *prepared) {
    for (int64_t n = 0; n < (int64_t)rows * dim; ++n) prepared[n] = attn_float_to_bf16(queries[n]);
}

static void plain_score_chunk_tiles(int rows, int count, int dim, const uint16_t *prepared,
                                    const uint16_t *keys, int64_t key_stride, float *scores) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < count; ++c) {
            float sum = 0.0f;
            for (int d = 0; d < dim; ++d)
                sum += bf16_value(prepared[(int64_t)r * dim + d]) * bf16_value(keys[c * key_stride + d]);
            scores[r * ATTN_DECODE_CHUNK + c] = sum;
        }
}

static void plain_accumulate_chunk_tiles(int rows, int count, int dim, const float *weights,
                                         const float *rescale, const uint16_t *values,
                                         int64_t value_stride, void *stage, float *accumulator) {
    (void)stage;
    const int row_floats = ATTN_DECODE_TILE_ROW_FLOATS(dim);
    for (int r = 0; r < rows; ++r)
        for (int e = 0; e < dim; ++e) {
            float sum = rescale[r] * accumulator[r * row_floats + e];
            for (int c = 0; c < count; ++c) {
                const float w = weights[((c / ATTN_DECODE_CHUNK) * rows + r) * ATTN_DECODE_CHUNK +
                                        c % ATTN_DECODE_CHUNK];
                sum += bf16_value(attn_float_to_bf16(w)) * bf16_value(values[c * value_stride + e]);
            }
            accumulator[r * row_floats + e] = sum;
        }
}

/* fp8 rows widened exactly to bf16 (the generic registry's widen_fp8_bf16), then as above. */
static uint16_t *widened_fp8(attn_dtype dtype, int count, int dim, const uint8_t *rows,
                             int64_t stride) {
    uint16_t *widened = malloc(sizeof(uint16_t) * (size_t)(count > 0 ? count : 1) * (size_t)dim);
    generic_kernels->decode.widen_fp8_bf16(dtype, count, dim, rows, stride, widened);
    return widened;
}

static void plain_score_chunk_tiles_fp8(attn_dtype dtype, int rows, int count, int dim,
                                        const uint16_t *prepared, const uint8_t *keys,
                                        int64_t key_stride, float *scores,
                                        const attn_rows_ahead *ahead) {
    (void)ahead;
    uint16_t *widened = widened_fp8(dtype, count, dim, keys, key_stride);
    plain_score_chunk_tiles(rows, count, dim, prepared, widened, dim, scores);
    free(widened);
}

static void plain_accumulate_chunk_tiles_fp8(attn_dtype dtype, int rows, int count, int dim,
                                             const float *weights, const float *rescale,
                                             const uint8_t *values, int64_t value_stride,
                                             float *accumulator) {
    uint16_t *widened = widened_fp8(dtype, count, dim, values, value_stride);
    plain_accumulate_chunk_tiles(rows, count, dim, weights, rescale, widened, dim, NULL,
                                 accumulator);
    free(widened);
}

/* int8 tiles: the in-place int8 kernels' integers, here those kernels themselves. */
static void plain_prepare_q8_tile_queries(int rows, int dim, const float *queries, void *prepared) {
    attn_q8_prepare_queries(rows, dim, queries, prepared);
}

static void plain_score_chunk_q8_tiles(int rows, int count, int dim, const void *prepared,
                                       const uint8_t *keys, int64_t key_stride,
                                       const float *row_scales, float factor, float *scores,
                                       const uint8_t *keys_ahead) {
    generic_kernels->decode.score_chunk_q8(ATTN_DTYPE_Q8, rows, count, dim, prepared, keys,
                                           key_stride, row_scales, factor, scores, NULL,
                                           keys_ahead);
}

static void plain_accumulate_chunk_q8_tiles(int rows, int count, int dim, const float *weights,
                                            const float *rescale, const uint8_t *values,
                                            int64_t value_stride, const float *row_scales,
                                            float factor, void *stage, float *accumulator,
                                            const uint8_t *values_ahead) {
    (void)stage;
    generic_kernels->decode.accumulate_chunk_q8(ATTN_DTYPE_Q8, rows, count, dim, weights, rescale,
                                                values, value_stride, row_scales, factor,
                                                accumulator, values_ahead);
}

/* `base` with the tile slots above: bf16 tiles from 5 rows, fp8 from 2 (read in place up to
 * ATTN_DECODE_FUSED_ROWS rows, widened beyond). */
static attn_kernels with_tiles(const attn_kernels *base) {
    attn_kernels k = *base;
    attn_decode_kernels *d = &k.decode;
    d->prepare_tile_queries = plain_prepare_tile_queries;
    d->score_chunk_tiles = plain_score_chunk_tiles;
    d->accumulate_chunk_tiles = plain_accumulate_chunk_tiles;
    d->tile_rows_bf16 = 5, d->tile_rows_fp8 = 2;
    d->score_chunk_tiles_fp8 = plain_score_chunk_tiles_fp8;
    d->accumulate_chunk_tiles_fp8 = plain_accumulate_chunk_tiles_fp8;
    d->prepare_q8_tile_queries = plain_prepare_q8_tile_queries;
    d->score_chunk_q8_tiles = plain_score_chunk_q8_tiles;
    d->accumulate_chunk_q8_tiles = plain_accumulate_chunk_q8_tiles;
    return k;
}

/* ---- the cases ---- */
typedef struct tile_case {
    const char *name;
    int64_t B, T, Tq, Hq, Hkv, Dk, Dv, page_size;
    attn_dtype cache_dtype;
    int64_t split_tokens;
    int values_in_keys;
    int64_t window_left; /* 0 = none */
} tile_case;

static const tile_case cases[] = {
    {"bf16 MQA 32, pages of 48", 1, 300, 1, 32, 1, 128, 128, 48, ATTN_DTYPE_BF16, 0, 0, 0},
    {"bf16 MLA latent 576/512", 1, 200, 1, 16, 1, 576, 512, 64, ATTN_DTYPE_BF16, 0, 1, 0},
    {"bf16 MQA D=128/256, 4 chunks", 1, 700, 1, 32, 1, 128, 256, 0, ATTN_DTYPE_BF16, 512, 0, 0},
    {"bf16 group 16 x Tq 2, window", 2, 900, 2, 16, 1, 64, 200, 0, ATTN_DTYPE_BF16, 1024, 0, 200},
    {"bf16 group 8, Hkv 2, stepped", 1, 1500, 1, 16, 2, 128, 128, 64, ATTN_DTYPE_BF16, 1024, 0, 0},
    {"fp8 e4m3 group 8, widened", 2, 400, 1, 16, 2, 64, 80, 16, ATTN_DTYPE_FP8_E4M3, 0, 0, 0},
    {"fp8 e5m2 group 3, in place", 1, 300, 1, 6, 2, 48, 48, 32, ATTN_DTYPE_FP8_E5M2, 128, 0, 90},
    {"fp8 e4m3 MLA latent", 1, 260, 1, 16, 1, 576, 512, 64, ATTN_DTYPE_FP8_E4M3, 0, 1, 0},
    {"fp8 e4m3 group 8, stepped", 1, 1300, 1, 16, 2, 128, 128, 64, ATTN_DTYPE_FP8_E4M3, 1024, 0, 0},
    {"int8 group 8 (P·V on tiles)", 2, 700, 1, 16, 2, 64, 64, 16, ATTN_DTYPE_Q8, 0, 0, 0},
    {"int8 group 2 (scores only)", 1, 300, 1, 4, 2, 128, 96, 32, ATTN_DTYPE_Q8, 128, 0, 100},
    {"int8 MLA latent", 1, 200, 1, 16, 1, 576, 512, 64, ATTN_DTYPE_Q8, 0, 1, 0},
    {"int8 group 8, long splits", 1, 1300, 1, 16, 2, 128, 128, 64, ATTN_DTYPE_Q8, 1024, 0, 0},
};

/* attn_decode_run on a call that uses `kernels`. */
static attn_status decode_with(const attn_kernels *kernels, const attn_kv_cache *cache,
                               const attn_tensor *q, const attn_options *options,
                               attn_tensor *out, int threads, int64_t split, attn_error *error) {
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    execution.tile_k = split;
    attn_call call;
    const attn_status status = attn_call_begin(&call, options, &execution, error);
    if (status != ATTN_OK) {
        attn_call_end(&call);
        return status;
    }
    call.kernels = kernels;
    return attn_decode_run(&call, cache, q, out, NULL, error);
}

/* The library cache's tokens on token-major pages ([page, slot, head, D], a caller's layout,
 * the same pages and block tables): a view whose storage the caller frees (view->key_pool,
 * value_pool, key_scale_pool, value_scale_pool). */
static struct attn_kv_cache token_major(const attn_kv_cache *cache) {
    struct attn_kv_cache view = *cache;
    const int64_t P = cache->page_count, S = cache->page_size, H = cache->config.kv_heads;
    const int64_t Dk = cache->config.key_dim, Dv = cache->config.value_dim;
    const size_t size = cache->element_size;
    view.key_pool = calloc((size_t)(P * S * H * Dk), size);
    view.value_pool = cache->value_pool != NULL ? calloc((size_t)(P * S * H * Dv), size) : NULL;
    view.key_token_stride = H * Dk, view.key_head_stride = Dk, view.key_page_elements = S * H * Dk;
    view.value_token_stride = H * Dv, view.value_head_stride = Dv;
    view.value_page_elements = view.value_pool != NULL ? S * H * Dv : 0;
    if (cache->key_scale_pool != NULL) {
        view.key_scale_pool = calloc((size_t)(P * S * H), sizeof(float));
        view.value_scale_pool =
            cache->value_scale_pool != NULL ? calloc((size_t)(P * S * H), sizeof(float)) : NULL;
        view.key_scale_page_stride = view.value_scale_page_stride = S * H;
        view.key_scale_token_stride = view.value_scale_token_stride = H;
        view.key_scale_head_stride = view.value_scale_head_stride = 1;
    }
    for (int64_t p = 0; p < P; ++p)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t h = 0; h < H; ++h) {
                memcpy((void *)attn_cache_key_address(&view, p, h, s),
                       attn_cache_key_address(cache, p, h, s), (size_t)Dk * size);
                if (view.value_pool != NULL)
                    memcpy((void *)attn_cache_value_address(&view, p, h, s),
                           attn_cache_value_address(cache, p, h, s), (size_t)Dv * size);
                if (view.key_scale_pool != NULL)
                    *(float *)attn_cache_key_scales(&view, p, h, s) =
                        *attn_cache_key_scales(cache, p, h, s);
                if (view.value_scale_pool != NULL)
                    *(float *)attn_cache_value_scales(&view, p, h, s) =
                        *attn_cache_value_scales(cache, p, h, s);
            }
    return view;
}

static void free_view(struct attn_kv_cache *view) {
    free(view->key_pool), free(view->value_pool);
    free(view->key_scale_pool), free(view->value_scale_pool);
}

/* The worst error of out (16-bit) against the reference on the values the cache holds, as a
 * fraction of test_decode_lowp.c's bound (<= 1 passes). */
static double bf16_bound_fraction(const tile_case *c, const attn_kv_cache *cache,
                                  const test_tensor *q, const attn_options *options,
                                  const attn_tensor *out) {
    test_tensor k = test_tensor_new(c->B, c->T, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    attn_error error = {0};
    for (int64_t b = 0; b < c->B; ++b) {
        attn_tensor kb = k.view;
        kb.data = (float *)k.view.data + b * k.view.stride[0];
        kb.shape[0] = 1;
        attn_tensor vb = v.view;
        vb.data = (float *)v.view.data + b * v.view.stride[0];
        vb.shape[0] = 1;
        CHECK_STATUS(attn_kv_cache_read(cache, b, 0, &kb, c->values_in_keys ? NULL : &vb, &error),
                     ATTN_OK, &error, "%s: read back", c->name);
        if (c->values_in_keys)
            for (int64_t t = 0; t < c->T; ++t)
                for (int64_t h = 0; h < c->Hkv; ++h)
                    for (int64_t e = 0; e < c->Dv; ++e)
                        ((float *)v.view.data)[b * v.view.stride[0] + t * v.view.stride[1] +
                                               h * v.view.stride[2] + e] =
                            test_get4(&k.view, b, t, h, e);
    }
    test_tensor absolute_v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    for (int64_t n = 0; n < v.allocation_floats; ++n) absolute_v.allocation[n] = fabsf(v.allocation[n]);
    test_tensor expected = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor absolute = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    CHECK_STATUS(attn_reference_forward(&q->view, &k.view, &v.view, options, &expected.view, NULL,
                                        &error), ATTN_OK, &error, "%s: reference", c->name);
    CHECK_STATUS(attn_reference_forward(&q->view, &k.view, &absolute_v.view, options,
                                        &absolute.view, NULL, &error), ATTN_OK, &error,
                 "%s: reference on |V|", c->name);
    const double unit = ldexp(1.0, -8), scale = 1.0 / sqrt((double)c->Dk);
    const double largest_sum = test_largest_abs_dot(&q->view, &k.view);
    const double logit_error = (c->Dk + 2) * ldexp(scale * largest_sum, -24) +
                               ldexp(scale * largest_sum, -22);
    double worst = 0.0;
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t i = 0; i < c->Tq; ++i)
            for (int64_t h = 0; h < c->Hq; ++h)
                for (int64_t e = 0; e < c->Dv; ++e) {
                    const double reference = test_get4(&expected.view, b, i, h, e);
                    const double got = test_half_get4(out, b, i, h, e);
                    const double bound = unit * fabs(reference) +
                                         (unit + 2.1 * logit_error + 1e-5) *
                                             test_get4(&absolute.view, b, i, h, e);
                    const double fraction = fabs(got - reference) / (bound > 0 ? bound : 1e-30);
                    if (!(fraction <= worst)) worst = isnan(fraction) ? INFINITY : fraction;
                }
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&absolute_v);
    test_tensor_free(&expected), test_tensor_free(&absolute);
    return worst;
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void run_case(const tile_case *c, const attn_kernels *base, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = c->B, config.kv_heads = c->Hkv, config.key_dim = c->Dk;
    config.value_dim = c->Dv, config.dtype = c->cache_dtype, config.capacity = c->T;
    config.page_size = c->page_size, config.values_in_keys = c->values_in_keys;
    attn_kv_cache *cache = NULL;
    attn_error error = {0};
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s: cache", c->name);
    if (cache == NULL) return;
    test_tensor k = test_tensor_new(c->B, c->T, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k.view, c->values_in_keys ? NULL : &v.view, &error),
                 ATTN_OK, &error, "%s: append", c->name);
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (c->window_left > 0) options.window = 1, options.window_left = c->window_left;
    const int int8 = c->cache_dtype == ATTN_DTYPE_Q8;
    test_half_tensor q16 = test_half_round(&q, ATTN_DTYPE_BF16);
    const attn_tensor *query = int8 ? &q.view : &q16.view;
    const attn_kernels tiles = with_tiles(base);
    struct attn_kv_cache view = token_major(cache);
    const size_t elements = (size_t)(c->B * c->Tq * c->Hq * c->Dv);
    const size_t bytes = elements * (int8 ? sizeof(float) : sizeof(uint16_t));
    void *outs[4];
    /* [0]: tiles, 1 thread; [1]: 2 threads; [2]: token-major pages; [3]: without the tile
     * slots (int8 only: bf16 is held to the reference instead) */
    test_tensor shape = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    for (int n = 0; n < 4; ++n) {
        test_half_tensor out16 = test_half_like(&shape, ATTN_DTYPE_BF16, 0x7bcd);
        attn_tensor out = int8 ? shape.view : out16.view;
        outs[n] = int8 ? malloc(bytes) : (void *)out16.allocation;
        if (int8) free(out16.allocation), out.data = outs[n];
        if (n == 3 && !int8) continue;
        CHECK_STATUS(decode_with(n == 3 ? base : &tiles, n == 2 ? &view : cache, query, &options,
                                 &out, n == 1 ? 2 : 1, c->split_tokens, &error),
                     ATTN_OK, &error, "%s [%s]: decode %d", c->name, base->name, n);
        if (n == 0 && !int8) {
            const double worst = bf16_bound_fraction(c, cache, &q, &options, &out);
            printf("%-32s %-8s O error <= %.2f of its bound\n", c->name, base->name, worst);
            CHECK(worst <= 1.0, "%s [%s]: O within the 16-bit bound (worst %.2f)", c->name,
                  base->name, worst);
        }
    }
    test_tensor_free(&shape);
    CHECK(same_bits(outs[0], outs[1], bytes), "%s [%s]: 1 and 2 threads bitwise", c->name, base->name);
    CHECK(same_bits(outs[0], outs[2], bytes), "%s [%s]: token-major pages bitwise", c->name,
          base->name);
    if (int8)
        CHECK(same_bits(outs[0], outs[3], bytes), "%s [%s]: int8 tiles = in-place kernels, bitwise",
              c->name, base->name);
    for (int n = 0; n < 4; ++n) free(outs[n]);
    free_view(&view);
    free(q16.allocation);
    test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&q);
    attn_kv_cache_destroy(cache);
}

int main(void) {
    attn_kernels_select(ATTN_KERNEL_GENERIC, &generic_kernels, NULL);
    const attn_kernels *best = NULL;
    attn_kernels_select(ATTN_KERNEL_AUTO, &best, NULL);
    const attn_kernels *bases[2] = {generic_kernels, best};
    for (int n = 0; n < 2; ++n) {
        if (n == 1 && best == generic_kernels) break;
        for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c)
            run_case(&cases[c], bases[n], 900 + c);
    }
    return test_finish();
}
