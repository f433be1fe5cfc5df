/*
 * cache_internal.h — the layout of attn_kv_cache, shared by the cache bookkeeping (cache.c)
 * and the decoding loop (decode.c). Internal to libattn.
 *
 * Storage is a pool of pages. A page holds `page_size` tokens of every KV head, and the pool
 * is head-outermost:
 *   keys   of page p, head h: key_pool   + (h * page_count + p) * page_size * Dk, [page_size][Dk]
 *   values of page p, head h: value_pool + (h * page_count + p) * page_size * Dv, [page_size][Dv]
 * i.e. [Hkv][page_count][page_size][D]: the keys of one head inside a page are contiguous rows
 * of Dk elements (what decoding streams), and so are those of consecutive pages, which a fresh
 * cache hands out in increasing order (a sequence appended in one go, a prefill, is one run per
 * head: the hardware prefetchers and the kernels' requests for the rows ahead continue into
 * the next page, which a page-major pool would interrupt at every page). A contiguous cache
 * is the special case page_size =
 * capacity, one page per sequence. Sequence s's token t lives in page
 * block_tables[s][t / page_size], slot t % page_size. Pages are reference counted: a page
 * shared by several sequences (a common prefix) is copied before any of them writes into it.
 * Every slot that holds no token is NaN.
 * When values_in_keys is set there is no value pool: the value of a token is the first Dv
 * elements of its key (MLA's latent cache).
 * Quantized storage (kernels/quant.h): elements are 1 byte. Q8 keeps one float32 scale per
 * stored row beside the pools, laid out like them: the library's own are
 * key_scale_pool + (h * page_count + p) * page_size, [page_size] (values likewise; with
 * values_in_keys a value uses its key's scale); a caller-owned cache's are wherever its
 * k_scale / v_scale tensors put them (the scale strides below). FP8
 * keeps one float32 scale per KV head (head_scales, 1 when none was given). A stored element
 * q of row (token, head) reads back as head_scale[head] * row_scale * decode(q), with the
 * factors that do not apply equal to 1. Empty slots of a Q8 cache hold NaN scales and 0
 * elements; of an FP8 cache the NaN code 0x7f.
 */
#ifndef ATTN_CACHE_INTERNAL_H
#define ATTN_CACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

struct attn_kv_cache {
    attn_kv_cache_config config; /* as created, with defaults resolved */
    size_t element_size;         /* bytes per stored element (4 or 2) */
    int64_t page_size;           /* tokens per page */
    int64_t page_count;          /* pages in the pool */
    int64_t pages_per_sequence;  /* ceil(capacity / page_size): block table length */
    int64_t key_page_elements;   /* elements between pages of a head: page_size * Dk */
    int64_t value_page_elements; /* page_size * Dv, or 0 when values_in_keys */
    unsigned char *key_pool;     /* [Hkv][page_count] pages of one head's keys */
    unsigned char *value_pool;   /* the same for values, or NULL */
    int32_t *reference_counts;   /* [page_count]: sequences using the page (0 = free) */
    int32_t *free_pages;         /* stack of free page indices */
    int64_t free_count;
    int32_t *block_tables;       /* [sequences][pages_per_sequence] */
    int64_t *lengths;            /* [sequences] tokens held */
    float *key_scale_pool;       /* Q8: [Hkv][page_count][page_size] row scales, else NULL */
    float *value_scale_pool;     /* Q8 without values_in_keys: the same for values */
    float *key_head_scales;      /* [Hkv] FP8 per-head scales (1 for other dtypes) */
    float *value_head_scales;    /* [Hkv] (the key ones with values_in_keys) */
    /* Element strides: between the slots of one head and between heads. The library's own
       pool is head-outermost (token stride Dk, head stride page_count * page_size * Dk); a
       cache the caller owns (attn_forward_with_kvcache, kvcache_external.c) is described by
       the same struct over its [page, slot, head, dim] memory, with its own strides. */
    int64_t key_token_stride, key_head_stride;
    int64_t value_token_stride, value_head_stride;
    /* Q8 row-scale strides (in floats) between pages, heads and slots: the library's own
       {page_size, page_count * page_size, 1}; a caller's follow its k_scale / v_scale tensors. */
    int64_t key_scale_page_stride, key_scale_head_stride, key_scale_token_stride;
    int64_t value_scale_page_stride, value_scale_head_stride, value_scale_token_stride;
    /* How messages name where the keys are: NULL = "the cache"; attn_forward's small calls
       (forward_small.c) name their k tensor. */
    const char *keys_name;
};

/* attn_decode on a begun call (call.h: options and execution resolved, kernels selected,
 * nothing reserved yet), which it copies, runs and ends; attn_forward's small calls hand
 * theirs over instead of resolving everything again. */
struct attn_call;
attn_status attn_decode_run(const struct attn_call *begun, const attn_kv_cache *cache,
                            const attn_tensor *q, attn_tensor *out, attn_tensor *lse,
                            attn_error *error);

/* Address of the first stored key (value) element of slot `slot` of KV head `head` in page
 * `page`; elements of one token follow contiguously. */
static inline const void *attn_cache_key_address(const struct attn_kv_cache *cache, int64_t page,
                                                 int64_t head, int64_t slot) {
    int64_t element = page * cache->key_page_elements + head * cache->key_head_stride +
                      slot * cache->key_token_stride;
    return cache->key_pool + (size_t)element * cache->element_size;
}

static inline const void *attn_cache_value_address(const struct attn_kv_cache *cache,
                                                   int64_t page, int64_t head, int64_t slot) {
    if (cache->value_pool == NULL) return attn_cache_key_address(cache, page, head, slot);
    int64_t element = page * cache->value_page_elements + head * cache->value_head_stride +
                      slot * cache->value_token_stride;
    return cache->value_pool + (size_t)element * cache->element_size;
}

/* The Q8 row scale of slot `slot` of `head` in `page` (the next slots follow
 * key_scale_token_stride floats apart: 1 in the library's own cache), or NULL for other
 * dtypes. */
static inline const float *attn_cache_key_scales(const struct attn_kv_cache *cache,
                                                 int64_t page, int64_t head, int64_t slot) {
    if (cache->key_scale_pool == NULL) return NULL;
    return cache->key_scale_pool + page * cache->key_scale_page_stride +
           head * cache->key_scale_head_stride + slot * cache->key_scale_token_stride;
}

static inline const float *attn_cache_value_scales(const struct attn_kv_cache *cache,
                                                   int64_t page, int64_t head, int64_t slot) {
    if (cache->value_scale_pool == NULL) return attn_cache_key_scales(cache, page, head, slot);
    return cache->value_scale_pool + page * cache->value_scale_page_stride +
           head * cache->value_scale_head_stride + slot * cache->value_scale_token_stride;
}

/* Floats between the row scales of consecutive slots of one head's values (keys:
 * key_scale_token_stride). */
static inline int64_t attn_cache_value_scale_stride(const struct attn_kv_cache *cache) {
    return cache->value_scale_pool == NULL ? cache->key_scale_token_stride
                                           : cache->value_scale_token_stride;
}

/* Rows of the cache's storage dtype <-> float32 (cache.c; kernels/quant.h for the 8-bit
 * formats): count elements at `destination`, contiguous. Q8: *row_scale receives the row's
 * scale; FP8: x / head_scale is encoded. Loading reads back head_scale * row_scale *
 * decode(q) for the 8-bit formats (row_scale 1 except Q8). */
void attn_cache_store_elements(attn_dtype dtype, const float *source, int64_t count,
                               void *destination, float *row_scale, float head_scale);
void attn_cache_load_elements(attn_dtype dtype, const void *source, int64_t count, float *target,
                              float row_scale, float head_scale);

/* Row stride (in elements) between consecutive tokens of one head's values (keys:
 * key_token_stride). */
static inline int64_t attn_cache_value_row_stride(const struct attn_kv_cache *cache) {
    return cache->value_pool == NULL ? cache->key_token_stride : cache->value_token_stride;
}

#endif /* ATTN_CACHE_INTERNAL_H */
