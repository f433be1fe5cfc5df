/*
 * cache.c — the KV cache object: creation, the page pool (allocation, reference counts,
 * freeing), appending tokens (with storage conversion and optional RoPE), truncation,
 * prefix sharing, reading back, and footprint. Decoding is in decode.c. Layout: see
 * cache_internal.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cache/cache.h"
#include "cache/cache_internal.h"
#include "kernels/half.h"
#include "kernels/quant.h"
#include "core/internal.h"
#include "attn_layers.h"

attn_kv_cache_config attn_kv_cache_config_default(void) {
    attn_kv_cache_config config;
    memset(&config, 0, sizeof config);
    config.dtype = ATTN_DTYPE_F32;
    config.rope_layout = ATTN_ROPE_INTERLEAVED;
    return config;
}

/* ---- pool memory ---- */

enum { HUGE_PAGE_BYTES = 2 << 20 };

/* A page pool of `bytes`: 64-byte aligned; from 2 MiB on, 2 MiB aligned and (on Linux)
 * marked for transparent huge pages, so streaming a long context does not walk the page
 * tables every 4 KiB (decode reads the whole pool each step). NULL when out of memory. */
static void *pool_alloc(size_t bytes) {
    if (bytes < HUGE_PAGE_BYTES) return attn_aligned_alloc(bytes);
    size_t rounded;
    if (!attn_add_size(bytes, HUGE_PAGE_BYTES - 1, &rounded)) return NULL;
    rounded &= ~(size_t)(HUGE_PAGE_BYTES - 1);
    void *pool = aligned_alloc(HUGE_PAGE_BYTES, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (pool != NULL) (void)madvise(pool, rounded, MADV_HUGEPAGE); /* a hint; failure is fine */
#endif
    return pool;
}

/* ---- element storage ---- */

/* Stores count floats into the cache's dtype at `destination`. Q8: *row_scale receives the
 * row's scale; FP8: the elements are divided by head_scale first (kernels/quant.h). Also
 * the caller-owned caches' (kvcache_external.c). */
void attn_cache_store_elements(attn_dtype dtype, const float *source, int64_t count,
                           void *destination, float *row_scale, float head_scale) {
    if (dtype == ATTN_DTYPE_Q8) {
        int8_t *target = destination;
        const float scale = attn_q8_row_scale(count, source);
        for (int64_t e = 0; e < count; ++e) target[e] = attn_q8_encode(source[e], scale);
        *row_scale = scale;
    } else if (dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2) {
        uint8_t *target = destination;
        for (int64_t e = 0; e < count; ++e) {
            const float x = source[e] / head_scale;
            target[e] = dtype == ATTN_DTYPE_FP8_E4M3 ? attn_fp8_e4m3_encode(x)
                                                     : attn_fp8_e5m2_encode(x);
        }
    } else if (dtype == ATTN_DTYPE_F32) {
        memcpy(destination, source, (size_t)count * sizeof(float));
    } else if (dtype == ATTN_DTYPE_BF16) {
        uint16_t *target = destination;
        for (int64_t e = 0; e < count; ++e) target[e] = attn_float_to_bf16(source[e]);
    } else {
        uint16_t *target = destination;
        for (int64_t e = 0; e < count; ++e) target[e] = attn_float_to_f16(source[e]);
    }
}

/* Loads count stored elements as floats; quantized ones read back as
 * head_scale * row_scale * decode(q) (row_scale: Q8 only, else 1). */
void attn_cache_load_elements(attn_dtype dtype, const void *source, int64_t count, float *target,
                          float row_scale, float head_scale) {
    if (attn_dtype_is_quantized(dtype)) {
        const uint8_t *stored = source;
        const float factor = head_scale * row_scale;
        for (int64_t e = 0; e < count; ++e)
            target[e] = factor * attn_quant_decode(dtype, stored[e]);
    } else if (dtype == ATTN_DTYPE_F32) {
        memcpy(target, source, (size_t)count * sizeof(float));
    } else if (dtype == ATTN_DTYPE_BF16) {
        const uint16_t *stored = source;
        for (int64_t e = 0; e < count; ++e) target[e] = attn_bf16_to_float(stored[e]);
    } else {
        const uint16_t *stored = source;
        for (int64_t e = 0; e < count; ++e) target[e] = attn_f16_to_float(stored[e]);
    }
}

/* Fills `count` elements at `destination` with NaN in the cache's dtype. */
static void poison_elements(attn_dtype dtype, int64_t count, void *destination) {
    if (dtype == ATTN_DTYPE_F32) {
        float *target = destination;
        for (int64_t e = 0; e < count; ++e) target[e] = NAN;
    } else if (attn_dtype_is_quantized(dtype)) { /* Q8: 0 (its scale is NaN); FP8: NaN */
        memset(destination, dtype == ATTN_DTYPE_Q8 ? 0 : 0x7f, (size_t)count);
    } else {
        uint16_t nan_bits = dtype == ATTN_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
        uint16_t *target = destination;
        for (int64_t e = 0; e < count; ++e) target[e] = nan_bits;
    }
}

static void *key_slot(attn_kv_cache *cache, int64_t page, int64_t head, int64_t slot) {
    return (void *)attn_cache_key_address(cache, page, head, slot);
}

static void *value_slot(attn_kv_cache *cache, int64_t page, int64_t head, int64_t slot) {
    return (void *)attn_cache_value_address(cache, page, head, slot);
}

/* Q8 row scales of a slot (NULL for other dtypes). */
static float *key_scale_slot(attn_kv_cache *cache, int64_t page, int64_t head, int64_t slot) {
    return (float *)attn_cache_key_scales(cache, page, head, slot);
}

static float *value_scale_slot(attn_kv_cache *cache, int64_t page, int64_t head, int64_t slot) {
    return cache->value_scale_pool == NULL ? NULL
                                           : (float *)attn_cache_value_scales(cache, page, head, slot);
}

/* Sets `slots` row scales (NULL = none) to `value`. */
static void fill_scales(float *scales, int64_t slots, float value) {
    if (scales != NULL)
        for (int64_t e = 0; e < slots; ++e) scales[e] = value;
}

/* NaN-fills slots [first_slot, page_size) of every head of `page`. */
static void poison_page_tail(attn_kv_cache *cache, int64_t page, int64_t first_slot) {
    const int64_t slots = cache->page_size - first_slot;
    if (slots <= 0) return;
    for (int64_t head = 0; head < cache->config.kv_heads; ++head) {
        poison_elements(cache->config.dtype, slots * cache->config.key_dim,
                        key_slot(cache, page, head, first_slot));
        if (cache->value_pool != NULL)
            poison_elements(cache->config.dtype, slots * cache->config.value_dim,
                            value_slot(cache, page, head, first_slot));
        fill_scales(key_scale_slot(cache, page, head, first_slot), slots, NAN);
        fill_scales(value_scale_slot(cache, page, head, first_slot), slots, NAN);
    }
}

/* ---- page pool ---- */

static int32_t take_page(attn_kv_cache *cache) {
    int32_t page = cache->free_pages[--cache->free_count];
    cache->reference_counts[page] = 1;
    return page;
}

static void release_page(attn_kv_cache *cache, int32_t page) {
    if (--cache->reference_counts[page] == 0) {
        poison_page_tail(cache, page, 0);
        cache->free_pages[cache->free_count++] = page;
    }
}

/* Copies the first `slots` tokens of every head of page `from` into page `to`. */
static void copy_page_prefix(attn_kv_cache *cache, int32_t from, int32_t to, int64_t slots) {
    for (int64_t head = 0; head < cache->config.kv_heads; ++head) {
        memcpy(key_slot(cache, to, head, 0), key_slot(cache, from, head, 0),
               (size_t)(slots * cache->config.key_dim) * cache->element_size);
        if (cache->value_pool != NULL)
            memcpy(value_slot(cache, to, head, 0), value_slot(cache, from, head, 0),
                   (size_t)(slots * cache->config.value_dim) * cache->element_size);
        if (cache->key_scale_pool != NULL)
            memcpy(key_scale_slot(cache, to, head, 0), key_scale_slot(cache, from, head, 0),
                   (size_t)slots * sizeof(float));
        if (cache->value_scale_pool != NULL)
            memcpy(value_scale_slot(cache, to, head, 0), value_scale_slot(cache, from, head, 0),
                   (size_t)slots * sizeof(float));
    }
}

/* ceil(tokens / page_size) without forming tokens + page_size - 1, which overflows for a
 * capacity or page size near INT64_MAX. */
static int64_t pages_for(const attn_kv_cache *cache, int64_t tokens) {
    return tokens / cache->page_size + (tokens % cache->page_size != 0);
}

/* Pages an append of `tokens` to `sequence` takes from the pool: new pages, plus one when the
 * partly filled last page is shared and must be copied first. */
static int64_t pages_needed(const attn_kv_cache *cache, int64_t sequence, int64_t tokens) {
    const int64_t length = cache->lengths[sequence];
    int64_t needed = pages_for(cache, length + tokens) - pages_for(cache, length);
    if (tokens > 0 && length % cache->page_size != 0) {
        int32_t last = cache->block_tables[sequence * cache->pages_per_sequence +
                                           length / cache->page_size];
        if (cache->reference_counts[last] > 1) ++needed;
    }
    return needed;
}

/* ---- creation ---- */

static attn_status check_config(const attn_kv_cache_config *config, attn_error *error) {
    if (config == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "config is NULL");
    const struct { const char *name; int64_t value; } positive[] = {
        {"config.sequences", config->sequences}, {"config.kv_heads", config->kv_heads},
        {"config.key_dim", config->key_dim},     {"config.value_dim", config->value_dim},
        {"config.capacity", config->capacity},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; ++i)
        if (positive[i].value < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s = %lld: must be >= 1",
                             positive[i].name, (long long)positive[i].value);
    if (config->sequences > INT32_MAX || config->kv_heads > INT32_MAX)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.sequences = %lld, config.kv_heads = %lld: must fit in int32",
                         (long long)config->sequences, (long long)config->kv_heads);
    if (config->dtype != ATTN_DTYPE_F32 && config->dtype != ATTN_DTYPE_BF16 &&
        config->dtype != ATTN_DTYPE_F16 && !attn_dtype_is_quantized(config->dtype))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.dtype = %s: the cache stores float32, bfloat16, float16, "
                         "int8 (Q8), float8_e4m3 or float8_e5m2",
                         attn_dtype_name(config->dtype));
    const bool fp8 = config->dtype == ATTN_DTYPE_FP8_E4M3 || config->dtype == ATTN_DTYPE_FP8_E5M2;
    const struct { const char *name; const float *scales; } head_scales[] = {
        {"config.fp8_key_scales", config->fp8_key_scales},
        {"config.fp8_value_scales", config->values_in_keys ? NULL : config->fp8_value_scales},
    };
    for (int n = 0; n < 2; ++n) {
        if (head_scales[n].scales == NULL) continue;
        if (!fp8)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "%s is set: per-head scales are for the fp8 dtypes only (dtype %s)",
                             head_scales[n].name, attn_dtype_name(config->dtype));
        if (config->kv_heads > INT32_MAX) break; /* reported below */
        for (int64_t h = 0; h < config->kv_heads; ++h) {
            const float scale = head_scales[n].scales[h];
            if (!(scale > 0.0f) || isinf(scale))
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "%s[%lld] = %g: must be finite and > 0", head_scales[n].name,
                                 (long long)h, (double)scale);
        }
    }
    /* The head-dim limit of every attention call (docs/conventions.md), so a cache that
     * could never be decoded is refused when it is made. */
    const int64_t most_dim = (int64_t)1 << 20;
    if (config->key_dim > most_dim || config->value_dim > most_dim)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.%s = %lld: head dims are limited to 2^20 = %lld",
                         config->key_dim > most_dim ? "key_dim" : "value_dim",
                         (long long)(config->key_dim > most_dim ? config->key_dim
                                                                 : config->value_dim),
                         (long long)most_dim);
    if (config->values_in_keys && config->value_dim > config->key_dim)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.value_dim = %lld: must be <= key_dim = %lld with values_in_keys",
                         (long long)config->value_dim, (long long)config->key_dim);
    if (config->page_size < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.page_size = %lld: must be >= 1, or 0 for contiguous",
                         (long long)config->page_size);
    if (config->page_count < 0 || config->page_count > INT32_MAX)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.page_count = %lld: must be in [0, 2^31)",
                         (long long)config->page_count);
    if (config->rope_dim != 0 &&
        (config->rope_dim < 2 || config->rope_dim % 2 != 0 || config->rope_dim > config->key_dim))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.rope_dim = %lld: must be 0 or even in [2, key_dim = %lld]",
                         (long long)config->rope_dim, (long long)config->key_dim);
    if (config->rope_dim != 0 && config->rope_layout != ATTN_ROPE_INTERLEAVED &&
        config->rope_layout != ATTN_ROPE_HALF)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "config.rope_layout = %d: unknown",
                         (int)config->rope_layout);
    if (!(config->rope_base >= 0.0) || isinf(config->rope_base) ||
        (config->rope_base != 0.0 && config->rope_base <= 1.0))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.rope_base = %g: must be 0 (default 10000) or finite > 1",
                         config->rope_base);
    return ATTN_OK;
}

size_t attn_kv_cache_bytes_per_token(const attn_kv_cache_config *config) {
    if (check_config(config, NULL) != ATTN_OK) return 0;
    int64_t elements = config->key_dim + (config->values_in_keys ? 0 : config->value_dim);
    size_t bytes;
    if (!attn_mul_size((size_t)config->kv_heads, (size_t)elements, &bytes) ||
        !attn_mul_size(bytes, attn_dtype_size(config->dtype), &bytes))
        return 0;
    if (config->dtype == ATTN_DTYPE_Q8) /* one float32 scale per stored row */
        bytes += (size_t)config->kv_heads * (config->values_in_keys ? 1 : 2) * sizeof(float);
    return bytes;
}

/* The element and scale strides of the library's own pools (cache_internal.h). */
static void set_strides(attn_kv_cache *created) {
    /* head-outermost pools, [Hkv][page_count][page_size][D] (cache_internal.h): a page of
     * one head is page_size rows, and the pages of a head follow each other */
    created->key_page_elements = created->page_size * created->config.key_dim;
    const attn_kv_cache_config *config = &created->config;
    created->value_page_elements = config->values_in_keys ? 0 : created->page_size * config->value_dim;
    created->key_token_stride = created->config.key_dim;
    created->key_head_stride = created->page_count * created->key_page_elements;
    created->value_token_stride = created->config.value_dim;
    created->value_head_stride = created->page_count * created->value_page_elements;
    created->key_scale_page_stride = created->value_scale_page_stride = created->page_size;
    created->key_scale_head_stride = created->value_scale_head_stride =
        created->page_count * created->page_size; /* [Hkv][page_count][page_size] */
    created->key_scale_token_stride = created->value_scale_token_stride = 1;
}

/* FP8's per-head scales copied from the config (1 where none is given; the keys' for
 * values_in_keys); the caller's arrays are not kept. */
static void set_head_scales(attn_kv_cache *created, const attn_kv_cache_config *config) {
    created->key_head_scales = malloc((size_t)config->kv_heads * sizeof(float));
    created->value_head_scales = malloc((size_t)config->kv_heads * sizeof(float));
    if (created->key_head_scales != NULL && created->value_head_scales != NULL)
        for (int64_t h = 0; h < config->kv_heads; ++h) {
            const float *keys = config->fp8_key_scales, *values = config->fp8_value_scales;
            if (config->values_in_keys) values = keys;
            created->key_head_scales[h] = keys != NULL ? keys[h] : 1.0f;
            created->value_head_scales[h] = values != NULL ? values[h] : 1.0f;
        }
    created->config.fp8_key_scales = NULL; /* copied: the caller's arrays are not kept */
    created->config.fp8_value_scales = NULL;
}

attn_status attn_kv_cache_create(const attn_kv_cache_config *config, attn_kv_cache **cache,
                                 attn_error *error) {
    if (cache == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache is NULL");
    *cache = NULL;
    attn_status status = check_config(config, error);
    if (status != ATTN_OK) return status;

    attn_kv_cache *created = calloc(1, sizeof *created);
    if (created == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "no memory for the cache object");
    created->config = *config;
    if (created->config.rope_base == 0.0) created->config.rope_base = 10000.0;
    created->element_size = attn_dtype_size(config->dtype);
    created->page_size = config->page_size == 0 ? config->capacity : config->page_size;
    created->pages_per_sequence = pages_for(created, config->capacity);

    int64_t full_pool, key_page, value_page = 0, key_pool_elements, value_pool_elements = 0;
    int64_t table_entries;
    bool fits = attn_mul_i64(config->sequences, created->pages_per_sequence, &full_pool) &&
                attn_mul_i64(config->kv_heads, created->page_size, &key_page) &&
                attn_mul_i64(key_page, config->key_dim, &key_page) &&
                attn_mul_i64(config->sequences, created->pages_per_sequence, &table_entries);
    created->page_count = config->page_count == 0 ? full_pool : config->page_count;
    if (fits && !config->values_in_keys)
        fits = attn_mul_i64(config->kv_heads, created->page_size, &value_page) &&
               attn_mul_i64(value_page, config->value_dim, &value_page);
    fits = fits && created->page_count <= INT32_MAX &&
           attn_mul_i64(created->page_count, key_page, &key_pool_elements) &&
           attn_mul_i64(created->page_count, value_page, &value_pool_elements) &&
           (uint64_t)key_pool_elements <= SIZE_MAX / 8 &&
           (uint64_t)value_pool_elements <= SIZE_MAX / 8 && (uint64_t)table_entries <= SIZE_MAX / 8;
    if (!fits) {
        free(created);
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "config: %lld sequences x capacity %lld (page_size = %lld, page_count = "
                         "%lld) x %lld heads x dims %lld/%lld overflows the page pool size",
                         (long long)config->sequences, (long long)config->capacity,
                         (long long)config->page_size, (long long)config->page_count,
                         (long long)config->kv_heads, (long long)config->key_dim,
                         (long long)config->value_dim);
    }
    set_strides(created);
    created->key_pool = pool_alloc((size_t)key_pool_elements * created->element_size);
    if (value_pool_elements > 0)
        created->value_pool = pool_alloc((size_t)value_pool_elements * created->element_size);
    created->reference_counts = calloc((size_t)created->page_count, sizeof(int32_t));
    created->free_pages = malloc((size_t)created->page_count * sizeof(int32_t));
    created->block_tables = malloc((size_t)table_entries * sizeof(int32_t));
    created->lengths = calloc((size_t)config->sequences, sizeof(int64_t));
    /* Q8 row scales: page_count * Hkv * page_size floats each (<= the element pool's count) */
    const size_t scale_floats = (size_t)(created->page_count * config->kv_heads) *
                                (size_t)created->page_size;
    const bool q8 = config->dtype == ATTN_DTYPE_Q8;
    if (q8) created->key_scale_pool = pool_alloc(scale_floats * sizeof(float));
    if (q8 && value_pool_elements > 0)
        created->value_scale_pool = pool_alloc(scale_floats * sizeof(float));
    set_head_scales(created, config);
    if (created->key_pool == NULL || (value_pool_elements > 0 && created->value_pool == NULL) ||
        created->reference_counts == NULL || created->free_pages == NULL ||
        created->block_tables == NULL || created->lengths == NULL ||
        (q8 && created->key_scale_pool == NULL) ||
        (q8 && value_pool_elements > 0 && created->value_scale_pool == NULL) ||
        created->key_head_scales == NULL || created->value_head_scales == NULL) {
        attn_kv_cache_destroy(created);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "config: no memory for a pool of %lld pages of %lld tokens",
                         (long long)created->page_count, (long long)created->page_size);
    }
    for (int64_t e = 0; e < table_entries; ++e) created->block_tables[e] = -1;
    /* Free stack: page 0 on top, so a fresh cache hands out pages in increasing order. */
    created->free_count = created->page_count;
    for (int64_t p = 0; p < created->page_count; ++p)
        created->free_pages[p] = (int32_t)(created->page_count - 1 - p);
    poison_elements(config->dtype, key_pool_elements, created->key_pool);
    if (created->value_pool != NULL)
        poison_elements(config->dtype, value_pool_elements, created->value_pool);
    fill_scales(created->key_scale_pool, (int64_t)scale_floats, NAN);
    fill_scales(created->value_scale_pool, (int64_t)scale_floats, NAN);
    *cache = created;
    return ATTN_OK;
}

void attn_kv_cache_destroy(attn_kv_cache *cache) {
    if (cache == NULL) return;
    attn_aligned_free(cache->key_pool);
    attn_aligned_free(cache->value_pool);
    free(cache->reference_counts);
    free(cache->free_pages);
    free(cache->block_tables);
    free(cache->lengths);
    attn_aligned_free(cache->key_scale_pool);
    attn_aligned_free(cache->value_scale_pool);
    free(cache->key_head_scales);
    free(cache->value_head_scales);
    free(cache);
}

/* ---- queries ---- */

const attn_kv_cache_config *attn_kv_cache_config_of(const attn_kv_cache *cache) {
    return &cache->config;
}

int64_t attn_kv_cache_length(const attn_kv_cache *cache, int64_t sequence) {
    if (cache == NULL || sequence < 0 || sequence >= cache->config.sequences) return -1;
    return cache->lengths[sequence];
}

int64_t attn_kv_cache_free_pages(const attn_kv_cache *cache) {
    return cache == NULL ? -1 : cache->free_count;
}

size_t attn_kv_cache_footprint_bytes(const attn_kv_cache *cache) {
    if (cache == NULL) return 0;
    size_t pool = (size_t)(cache->page_count * cache->config.kv_heads *
                           (cache->key_page_elements + cache->value_page_elements)) *
                  cache->element_size;
    size_t tables = (size_t)cache->page_count * 2 * sizeof(int32_t) +
                    (size_t)(cache->config.sequences * cache->pages_per_sequence) *
                        sizeof(int32_t) +
                    (size_t)cache->config.sequences * sizeof(int64_t);
    const size_t scale_pool = (size_t)(cache->page_count * cache->config.kv_heads *
                                       cache->page_size) * sizeof(float);
    size_t scales = 2 * (size_t)cache->config.kv_heads * sizeof(float);
    if (cache->key_scale_pool != NULL) scales += scale_pool;
    if (cache->value_scale_pool != NULL) scales += scale_pool;
    return pool + tables + scales + sizeof *cache;
}

static attn_status check_sequence(const attn_kv_cache *cache, int64_t sequence, const char *name,
                                  attn_error *error) {
    if (cache == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache is NULL");
    if (sequence < 0 || sequence >= cache->config.sequences)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "%s = %lld: must be in [0, sequences = %lld)", name,
                         (long long)sequence, (long long)cache->config.sequences);
    return ATTN_OK;
}

attn_status attn_kv_cache_block_table(const attn_kv_cache *cache, int64_t sequence,
                                      const int32_t **pages, int64_t *page_count,
                                      attn_error *error) {
    attn_status status = check_sequence(cache, sequence, "sequence", error);
    if (status != ATTN_OK) return status;
    if (pages == NULL || page_count == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s is NULL",
                         pages == NULL ? "pages" : "page_count");
    *pages = cache->block_tables + sequence * cache->pages_per_sequence;
    *page_count = pages_for(cache, cache->lengths[sequence]);
    return ATTN_OK;
}

/* ---- modification ---- */

/* Makes the page holding token `token` of `sequence` writable: allocates it when the token
 * starts a new page, copies it first when it is shared. The pool has been checked. */
static int32_t writable_page(attn_kv_cache *cache, int64_t sequence, int64_t token) {
    int32_t *table = cache->block_tables + sequence * cache->pages_per_sequence;
    const int64_t logical = token / cache->page_size, slot = token % cache->page_size;
    if (slot == 0 && table[logical] < 0) {
        table[logical] = take_page(cache);
    } else if (cache->reference_counts[table[logical]] > 1) {
        int32_t copy = take_page(cache);
        copy_page_prefix(cache, table[logical], copy, slot);
        release_page(cache, table[logical]);
        table[logical] = copy;
    }
    return table[logical];
}

/* k [n, T, Hkv, Dk] and v [n, T, Hkv, Dv] (none with values_in_keys) float32 for sequences
 * first_sequence .. + n - 1; 8-bit storage takes finite values only (kernels/quant.h). */
static attn_status check_append_tensors(const attn_kv_cache *cache, int64_t first_sequence,
                                        const attn_tensor *k, const attn_tensor *v,
                                        attn_error *error) {
    attn_status status;
    const attn_kv_cache_config *config = &cache->config;
    if ((status = attn_check_tensor(k, "k", ATTN_DTYPE_F32, 4, error)) != ATTN_OK) return status;
    const int64_t count = k->shape[0], tokens = k->shape[1];
    if (k->shape[2] != config->kv_heads || k->shape[3] != config->key_dim)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "k.shape = [%lld, %lld, %lld, %lld]: expected [n, T, Hkv = %lld, Dk = %lld]",
                         (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2],
                         (long long)k->shape[3], (long long)config->kv_heads,
                         (long long)config->key_dim);
    if (count > config->sequences - first_sequence)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "k.shape[0] = %lld: only %lld sequences from first_sequence = %lld",
                         (long long)count, (long long)(config->sequences - first_sequence),
                         (long long)first_sequence);
    if (config->values_in_keys) {
        if (v != NULL)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "v is not NULL: this cache takes values from the keys");
    } else {
        if ((status = attn_check_tensor(v, "v", ATTN_DTYPE_F32, 4, error)) != ATTN_OK)
            return status;
        if (v->shape[0] != count || v->shape[1] != tokens || v->shape[2] != config->kv_heads ||
            v->shape[3] != config->value_dim)
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "v.shape = [%lld, %lld, %lld, %lld]: expected [%lld, %lld, %lld, %lld]",
                             (long long)v->shape[0], (long long)v->shape[1],
                             (long long)v->shape[2], (long long)v->shape[3], (long long)count,
                             (long long)tokens, (long long)config->kv_heads,
                             (long long)config->value_dim);
    }
    if (!attn_dtype_is_quantized(config->dtype)) return ATTN_OK;
    const attn_tensor *inputs[2] = {k, config->values_in_keys ? NULL : v};
    for (int n = 0; n < 2; ++n) {
        const attn_tensor *x = inputs[n];
        if (x == NULL) continue;
        for (int64_t a = 0; a < x->shape[0]; ++a)
            for (int64_t t = 0; t < x->shape[1]; ++t)
                for (int64_t h = 0; h < x->shape[2]; ++h)
                    for (int64_t d = 0; d < x->shape[3]; ++d)
                        if (!isfinite(*attn_f32_at4(x, a, t, h, d)))
                            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                             "%s[%lld, %lld, %lld, %lld] = %g: a %s cache stores "
                                             "finite values only",
                                             n == 0 ? "k" : "v", (long long)a, (long long)t,
                                             (long long)h, (long long)d,
                                             (double)*attn_f32_at4(x, a, t, h, d),
                                             attn_dtype_name(config->dtype));
    }
    return ATTN_OK;
}

/* All or nothing: every sequence's capacity and the pool's free pages, before writing. */
static attn_status check_append_room(const attn_kv_cache *cache, int64_t first_sequence,
                                     int64_t count, int64_t tokens, attn_error *error) {
    const attn_kv_cache_config *config = &cache->config;
    int64_t pages = 0;
    for (int64_t n = 0; n < count; ++n) {
        const int64_t sequence = first_sequence + n, length = cache->lengths[sequence];
        if (tokens > config->capacity - length)
            return attn_fail(error, ATTN_ERROR_CAPACITY,
                             "sequence %lld: %lld tokens + %lld appended exceed capacity %lld",
                             (long long)sequence, (long long)length, (long long)tokens,
                             (long long)config->capacity);
        pages += pages_needed(cache, sequence, tokens);
    }
    if (pages > cache->free_count)
        return attn_fail(error, ATTN_ERROR_CAPACITY,
                         "k: appending needs %lld pages, the pool has %lld free of %lld",
                         (long long)pages, (long long)cache->free_count,
                         (long long)cache->page_count);

    return ATTN_OK;
}

/* Writes sequence `sequence`'s keys [1, T, Hkv, Dk] (rotated already) and values v[n] at its
 * end; row: float[max(Dk, Dv)]. */
static void append_rows(attn_kv_cache *cache, int64_t sequence, const attn_tensor *keys,
                        const attn_tensor *v, int64_t n, float *row) {
    const attn_kv_cache_config *config = &cache->config;
    const int64_t length = cache->lengths[sequence], tokens = keys->shape[1];
    for (int64_t t = 0; t < tokens; ++t) {
        const int64_t token = length + t;
        const int32_t page = writable_page(cache, sequence, token);
        const int64_t slot = token % cache->page_size;
        for (int64_t head = 0; head < config->kv_heads; ++head) {
            float scale = 1.0f; /* Q8's row scale */
            for (int64_t d = 0; d < config->key_dim; ++d)
                row[d] = *attn_f32_at4(keys, 0, t, head, d);
            attn_cache_store_elements(config->dtype, row, config->key_dim,
                                      key_slot(cache, page, head, slot), &scale,
                                      cache->key_head_scales[head]);
            fill_scales(key_scale_slot(cache, page, head, slot), 1, scale);
            if (config->values_in_keys) continue;
            for (int64_t d = 0; d < config->value_dim; ++d)
                row[d] = *attn_f32_at4(v, n, t, head, d);
            attn_cache_store_elements(config->dtype, row, config->value_dim,
                                      value_slot(cache, page, head, slot), &scale,
                                      cache->value_head_scales[head]);
            fill_scales(value_scale_slot(cache, page, head, slot), 1, scale);
        }
        cache->lengths[sequence] = token + 1;
    }
}

attn_status attn_kv_cache_append(attn_kv_cache *cache, int64_t first_sequence,
                                 const attn_tensor *k, const attn_tensor *v, attn_error *error) {
    attn_status status = check_sequence(cache, first_sequence, "first_sequence", error);
    if (status == ATTN_OK) status = check_append_tensors(cache, first_sequence, k, v, error);
    if (status != ATTN_OK) return status;
    const attn_kv_cache_config *config = &cache->config;
    const int64_t count = k->shape[0], tokens = k->shape[1];
    if ((status = check_append_room(cache, first_sequence, count, tokens, error)) != ATTN_OK)
        return status;
    const int64_t key_dim = config->key_dim, value_dim = config->value_dim;
    float *row = malloc((size_t)(key_dim > value_dim ? key_dim : value_dim) * sizeof(float));
    float *rotated = NULL;
    if (config->rope_dim > 0) {
        size_t floats;
        if (!attn_mul_size((size_t)tokens, (size_t)(config->kv_heads * key_dim), &floats) ||
            !attn_mul_size(floats, sizeof(float), &floats))
            return free(row), attn_fail(error, ATTN_ERROR_OVERFLOW, "k: RoPE buffer overflows");
        rotated = malloc(floats);
    }
    if (row == NULL || (config->rope_dim > 0 && rotated == NULL)) {
        free(row), free(rotated);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "k: no memory for an append buffer");
    }
    for (int64_t n = 0; n < count && status == ATTN_OK; ++n) {
        const int64_t sequence = first_sequence + n, length = cache->lengths[sequence];
        attn_tensor keys = *k; /* [1, T, Hkv, Dk] of this sequence */
        keys.data = attn_f32_at4(k, n, 0, 0, 0);
        keys.shape[0] = 1;
        if (rotated != NULL) {
            const int64_t shape[4] = {1, tokens, config->kv_heads, key_dim};
            attn_tensor copy = attn_tensor_contiguous(rotated, ATTN_DTYPE_F32, 4, shape);
            for (int64_t t = 0; t < tokens; ++t)
                for (int64_t head = 0; head < config->kv_heads; ++head)
                    for (int64_t d = 0; d < key_dim; ++d)
                        *attn_f32_at4(&copy, 0, t, head, d) = *attn_f32_at4(&keys, 0, t, head, d);
            status = attn_rope_apply(&copy, config->rope_layout, config->rope_dim,
                                     config->rope_base, NULL, length, 0, error);
            keys = copy; /* (a validated config cannot fail) */
        }
        if (status == ATTN_OK) append_rows(cache, sequence, &keys, v, n, row);
    }
    free(row), free(rotated);
    return status;
}

attn_status attn_kv_cache_truncate(attn_kv_cache *cache, int64_t sequence, int64_t length,
                                   attn_error *error) {
    attn_status status = check_sequence(cache, sequence, "sequence", error);
    if (status != ATTN_OK) return status;
    const int64_t current = cache->lengths[sequence];
    if (length < 0 || length > current)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "length = %lld: must be in [0, current length = %lld]", (long long)length,
                         (long long)current);
    int32_t *table = cache->block_tables + sequence * cache->pages_per_sequence;
    for (int64_t logical = pages_for(cache, length); logical < pages_for(cache, current);
         ++logical) {
        release_page(cache, table[logical]);
        table[logical] = -1;
    }
    /* A kept, partly emptied page that this sequence alone uses: NaN its dropped slots. */
    if (length % cache->page_size != 0) {
        int32_t last = table[length / cache->page_size];
        if (cache->reference_counts[last] == 1)
            poison_page_tail(cache, last, length % cache->page_size);
    }
    cache->lengths[sequence] = length;
    return ATTN_OK;
}

void attn_kv_cache_reset(attn_kv_cache *cache) {
    if (cache == NULL) return;
    for (int64_t s = 0; s < cache->config.sequences; ++s) attn_kv_cache_truncate(cache, s, 0, NULL);
}

attn_status attn_kv_cache_share_prefix(attn_kv_cache *cache, int64_t source,
                                       int64_t destination, int64_t length, attn_error *error) {
    attn_status status = check_sequence(cache, source, "source", error);
    if (status == ATTN_OK) status = check_sequence(cache, destination, "destination", error);
    if (status != ATTN_OK) return status;
    if (destination == source || cache->lengths[destination] != 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "destination = %lld: must be another, empty sequence (length %lld)",
                         (long long)destination, (long long)cache->lengths[destination]);
    if (length < 0 || length > cache->lengths[source])
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "length = %lld: must be in [0, length(source) = %lld]", (long long)length,
                         (long long)cache->lengths[source]);
    const int64_t full_pages = length / cache->page_size;
    const int64_t partial = length % cache->page_size;
    if (partial != 0 && cache->free_count < 1)
        return attn_fail(error, ATTN_ERROR_CAPACITY,
                         "length = %lld: copying the partial last page needs a free page, the "
                         "pool of %lld has none",
                         (long long)length, (long long)cache->page_count);
    const int32_t *from = cache->block_tables + source * cache->pages_per_sequence;
    int32_t *to = cache->block_tables + destination * cache->pages_per_sequence;
    for (int64_t logical = 0; logical < full_pages; ++logical) {
        to[logical] = from[logical];
        ++cache->reference_counts[from[logical]];
    }
    if (partial != 0) {
        to[full_pages] = take_page(cache);
        copy_page_prefix(cache, from[full_pages], to[full_pages], partial);
    }
    cache->lengths[destination] = length;
    return ATTN_OK;
}

attn_status attn_kv_cache_read(const attn_kv_cache *cache, int64_t sequence, int64_t first_token,
                               attn_tensor *k, attn_tensor *v, attn_error *error) {
    attn_status status = check_sequence(cache, sequence, "sequence", error);
    if (status != ATTN_OK) return status;
    const attn_kv_cache_config *config = &cache->config;
    if ((status = attn_check_tensor(k, "k", ATTN_DTYPE_F32, 4, error)) != ATTN_OK) return status;
    const int64_t tokens = k->shape[1];
    if (k->shape[0] != 1 || k->shape[2] != config->kv_heads || k->shape[3] != config->key_dim)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "k.shape = [%lld, %lld, %lld, %lld]: expected [1, T, %lld, %lld]",
                         (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2],
                         (long long)k->shape[3], (long long)config->kv_heads,
                         (long long)config->key_dim);
    if (v != NULL) {
        if ((status = attn_check_tensor(v, "v", ATTN_DTYPE_F32, 4, error)) != ATTN_OK)
            return status;
        if (v->shape[0] != 1 || v->shape[1] != tokens || v->shape[2] != config->kv_heads ||
            v->shape[3] != config->value_dim)
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "v.shape = [%lld, %lld, %lld, %lld]: expected [1, %lld, %lld, %lld]",
                             (long long)v->shape[0], (long long)v->shape[1],
                             (long long)v->shape[2], (long long)v->shape[3], (long long)tokens,
                             (long long)config->kv_heads, (long long)config->value_dim);
    }
    if (first_token < 0 || first_token > cache->lengths[sequence] - tokens)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "first_token = %lld: %lld tokens from there are not all in sequence "
                         "%lld (length %lld)",
                         (long long)first_token, (long long)tokens, (long long)sequence,
                         (long long)cache->lengths[sequence]);
    const int64_t widest = config->key_dim > config->value_dim ? config->key_dim : config->value_dim;
    float *row = malloc((size_t)widest * sizeof(float));
    if (row == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "no memory for a row");
    const int32_t *table = cache->block_tables + sequence * cache->pages_per_sequence;
    for (int64_t t = 0; t < tokens; ++t) {
        const int64_t token = first_token + t;
        const int32_t page = table[token / cache->page_size];
        const int64_t slot = token % cache->page_size;
        for (int64_t head = 0; head < config->kv_heads; ++head) {
            const float *key_scale = attn_cache_key_scales(cache, page, head, slot);
            const float *value_scale = attn_cache_value_scales(cache, page, head, slot);
            attn_cache_load_elements(config->dtype, attn_cache_key_address(cache, page, head, slot),
                          config->key_dim, row, key_scale != NULL ? *key_scale : 1.0f,
                          cache->key_head_scales[head]);
            for (int64_t d = 0; d < config->key_dim; ++d) *attn_f32_at4(k, 0, t, head, d) = row[d];
            if (v == NULL) continue;
            attn_cache_load_elements(config->dtype, attn_cache_value_address(cache, page, head, slot),
                          config->value_dim, row, value_scale != NULL ? *value_scale : 1.0f,
                          cache->value_head_scales[head]);
            for (int64_t d = 0; d < config->value_dim; ++d)
                *attn_f32_at4(v, 0, t, head, d) = row[d];
        }
    }
    free(row);
    return ATTN_OK;
}
