/*
 * cache.h — the narrow internal interface of the KV cache for code outside src/cache (MLA):
 * what a cache was created with. Everything else goes through the public functions of attn.h
 * (attn_kv_cache_length, attn_kv_cache_append, ...); only src/cache reads cache_internal.h.
 */
#ifndef ATTN_CACHE_H
#define ATTN_CACHE_H

#include "attn.h"

/* The configuration `cache` was created with, defaults resolved (page_size, page_count,
 * rope_base filled in). cache must not be NULL; the pointer lives as long as the cache. */
const attn_kv_cache_config *attn_kv_cache_config_of(const attn_kv_cache *cache);

#endif /* ATTN_CACHE_H */
