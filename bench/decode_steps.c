/*
 * decode_steps.c — `attn-bench decode-steps`: a fixed number of attn_decode steps on one cache,
 * one thread, no timing: the program to count a decode step's instructions with a profiler
 * whose counts the machine's load does not move (valgrind --tool=callgrind; the per-step count
 * is the difference of two runs with different step counts, divided). bench/results pages
 * compare builds with it.
 *
 *   attn-bench decode-steps [--dtype f32|bf16|f16|int8|fp8_e4m3|fp8_e5m2] [--kv-heads N]
 *                           [--heads N] [--context T] [--steps S] [--token-major]
 * D 128, pages of 256 tokens, one sequence, one new query token per step; --token-major reads
 * the same tokens through a [page, slot, head, D] view (a caller's cache layout).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "bench.h"
#include "cache/cache_internal.h"

/* The cache's tokens (and Q8 row scales) in a [page, slot, head, D] view over `pool`: keys,
 * values, key scales, value scales (token_major_bytes of them). */
static size_t token_major_bytes(const attn_kv_cache *cache) {
    const size_t tokens = (size_t)(cache->page_count * cache->page_size * cache->config.kv_heads);
    return 2 * tokens * (size_t)cache->config.key_dim * cache->element_size + 2 * tokens * sizeof(float);
}

static struct attn_kv_cache token_major(const attn_kv_cache *cache, unsigned char *pool) {
    struct attn_kv_cache view = *cache;
    const int64_t P = cache->page_count, S = cache->page_size, H = cache->config.kv_heads;
    const int64_t D = cache->config.key_dim, rows = P * S * H;
    view.key_pool = pool, view.value_pool = pool + (size_t)(rows * D) * cache->element_size;
    view.key_token_stride = view.value_token_stride = H * D;
    view.key_head_stride = view.value_head_stride = D;
    view.key_page_elements = view.value_page_elements = S * H * D;
    if (cache->key_scale_pool != NULL) {
        view.key_scale_pool = (float *)(pool + 2 * (size_t)(rows * D) * cache->element_size);
        view.value_scale_pool = view.key_scale_pool + rows;
        view.key_scale_page_stride = view.value_scale_page_stride = S * H;
        view.key_scale_token_stride = view.value_scale_token_stride = H;
        view.key_scale_head_stride = view.value_scale_head_stride = 1;
    }
    for (int64_t p = 0; p < P; ++p)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t h = 0; h < H; ++h) {
                memcpy((void *)attn_cache_key_address(&view, p, h, s),
                       attn_cache_key_address(cache, p, h, s), (size_t)D * cache->element_size);
                memcpy((void *)attn_cache_value_address(&view, p, h, s),
                       attn_cache_value_address(cache, p, h, s), (size_t)D * cache->element_size);
                if (view.key_scale_pool == NULL) continue;
                *(float *)attn_cache_key_scales(&view, p, h, s) = *attn_cache_key_scales(cache, p, h, s);
                *(float *)attn_cache_value_scales(&view, p, h, s) =
                    *attn_cache_value_scales(cache, p, h, s);
            }
    return view;
}

static attn_dtype dtype_named(const char *name) {
    static const struct { const char *name; attn_dtype dtype; } names[] = {
        {"f32", ATTN_DTYPE_F32}, {"bf16", ATTN_DTYPE_BF16}, {"f16", ATTN_DTYPE_F16},
        {"int8", ATTN_DTYPE_Q8}, {"fp8_e4m3", ATTN_DTYPE_FP8_E4M3}, {"fp8_e5m2", ATTN_DTYPE_FP8_E5M2}};
    for (size_t n = 0; n < sizeof names / sizeof *names; ++n)
        if (strcmp(name, names[n].name) == 0) return names[n].dtype;
    return (attn_dtype)-1;
}

int bench_decode_steps(int argc, char **argv) {
    const char *dtype_name = "bf16";
    long heads = 32, kv_heads = 8, context = 4096, steps = 5;
    int token_major_pages = 0;
    for (int a = 1; a < argc; ++a) {
        const char *arg = argv[a], *value = a + 1 < argc ? argv[a + 1] : NULL;
        if (strcmp(arg, "--token-major") == 0) token_major_pages = 1;
        else if (value != NULL && strcmp(arg, "--dtype") == 0) dtype_name = value, ++a;
        else if (value != NULL && strcmp(arg, "--heads") == 0) heads = strtol(value, NULL, 10), ++a;
        else if (value != NULL && strcmp(arg, "--kv-heads") == 0) kv_heads = strtol(value, NULL, 10), ++a;
        else if (value != NULL && strcmp(arg, "--context") == 0) context = strtol(value, NULL, 10), ++a;
        else if (value != NULL && strcmp(arg, "--steps") == 0) steps = strtol(value, NULL, 10), ++a;
        else {
            fprintf(stderr, "attn-bench decode-steps: unknown argument %s (see bench/decode_steps.c)\n", arg);
            return 2;
        }
    }
    const attn_dtype dtype = dtype_named(dtype_name);
    if ((int)dtype < 0 || kv_heads < 1 || heads < kv_heads || heads % kv_heads != 0 ||
        context < 1 || context > (1 << 20) || steps < 0 || (token_major_pages && kv_heads < 2)) {
        fprintf(stderr, "attn-bench decode-steps: bad --dtype, --heads, --kv-heads, --context or "
                        "--steps (--token-major needs --kv-heads >= 2)\n");
        return 2;
    }
    enum { D = 128 };
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1, config.kv_heads = kv_heads, config.key_dim = config.value_dim = D;
    config.dtype = dtype, config.capacity = context, config.page_size = 256;
    attn_kv_cache *cache = NULL;
    attn_error error = {0};
    const size_t floats = (size_t)context * (size_t)kv_heads * D;
    float *k = malloc(floats * sizeof(float)), *v = malloc(floats * sizeof(float));
    float *q = malloc((size_t)heads * D * sizeof(float)), *o = malloc((size_t)heads * D * sizeof(float));
    int status = attn_kv_cache_create(&config, &cache, &error) != ATTN_OK || !k || !v || !q || !o;
    unsigned char *pool = status ? NULL : malloc(token_major_bytes(cache));
    status |= pool == NULL;
    for (size_t n = 0; !status && n < floats; ++n) /* values in [-0.5, 0.5), no generator state */
        k[n] = (float)((n * 7919) % 1000) / 1000.0f - 0.5f, v[n] = (float)((n * 104729) % 1000) / 1000.0f - 0.5f;
    for (long n = 0; !status && n < heads * D; ++n) q[n] = (float)(n % 13) / 13.0f;
    const attn_tensor kt = {k, ATTN_DTYPE_F32, 4, {1, context, kv_heads, D}, {(int64_t)floats, kv_heads * D, D, 1}};
    const attn_tensor vt = {v, ATTN_DTYPE_F32, 4, {1, context, kv_heads, D}, {(int64_t)floats, kv_heads * D, D, 1}};
    const attn_tensor qt = {q, ATTN_DTYPE_F32, 4, {1, 1, heads, D}, {heads * D, heads * D, D, 1}};
    attn_tensor ot = {o, ATTN_DTYPE_F32, 4, {1, 1, heads, D}, {heads * D, heads * D, D, 1}};
    if (!status) status = attn_kv_cache_append(cache, 0, &kt, &vt, &error) != ATTN_OK;
    struct attn_kv_cache view;
    if (!status && token_major_pages) view = token_major(cache, pool);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_execution execution = attn_execution_default();
    execution.num_threads = 1;
    for (long s = 0; !status && s < steps; ++s)
        status = attn_decode(token_major_pages ? &view : cache, &qt, &options, &ot, NULL,
                             &execution, &error) != ATTN_OK;
    if (status) fprintf(stderr, "attn-bench decode-steps: %s\n", error.message[0] ? error.message : "no memory");
    else printf("%ld decode steps, %s cache, Hq %ld, Hkv %ld, context %ld%s: o[0] = %.6f\n", steps,
                dtype_name, heads, kv_heads, context, token_major_pages ? ", token-major pages" : "",
                o[0]);
    attn_kv_cache_destroy(cache);
    free(k), free(v), free(q), free(o), free(pool);
    return status ? 1 : 0;
}
