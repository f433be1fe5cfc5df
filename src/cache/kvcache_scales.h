/*
 * kvcache_scales.h — the 8-bit storage of a KV cache the caller owns
 * (attn_forward_with_kvcache, kvcache_external.c): checking its scale tensors and its new
 * tokens before anything is written, and reading its per-head scales. Internal to libattn.
 */
#ifndef ATTN_CACHE_KVCACHE_SCALES_H
#define ATTN_CACHE_KVCACHE_SCALES_H

#include "attn.h"

/* The scales of `cache` for storage `dtype` (attn.h, attn_kv_cache_view): Q8 needs k_scale
 * and v_scale, F32 rank 3 of shape rows = {pages (or B), page_size (or S_max), Hkv}, strides
 * >= 0 (`layout` names that shape in messages); FP8 takes NULL or F32 rank 1 [Hkv] or [1]
 * with every scale finite and > 0; other dtypes take none. has_scales = 0 (a version-1 view,
 * which has no scale fields) refuses 8-bit storage. Reads only. */
attn_status attn_kv_view_check_scales(const attn_kv_cache_view *cache, int has_scales,
                                      attn_dtype dtype, const int64_t rows[3],
                                      const char *layout, attn_error *error);

/* The FP8 per-head scale of KV head `head` in `scale` ([Hkv] or [1]); 1 when NULL. */
float attn_kv_view_head_scale(const attn_tensor *scale, int64_t head);

/* For 8-bit storage: every element of the F32 / BF16 / F16 rank-4 `x` is finite (else
 * INVALID_ARGUMENT naming `name`, the index and the value). Other storage: ATTN_OK. */
attn_status attn_kv_check_finite_input(const attn_tensor *x, const char *name, attn_dtype storage,
                                       attn_error *error);

#endif /* ATTN_CACHE_KVCACHE_SCALES_H */
