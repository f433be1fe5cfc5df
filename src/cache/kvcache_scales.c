/*
 * kvcache_scales.c — the 8-bit storage of a KV cache the caller owns: its k_scale / v_scale
 * tensors (Q8 row scales laid out like the cache without D, FP8 per-head scales) and the
 * finiteness of the tokens an append would quantise, all checked before the first write
 * (attn.h, attn_kv_cache_view; kvcache_scales.h).
 */
#include <math.h>

#include "cache/kvcache_scales.h"
#include "core/internal.h"
#include "kernels/half.h"
#include "kernels/quant.h"

static attn_status check_row_scales(const attn_tensor *t, const char *name, const int64_t rows[3],
                                    const char *layout, attn_dtype dtype, attn_error *error) {
    if (t == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                         "cache->%s is NULL: a %s cache needs one float32 scale per (token, KV "
                         "head), %s",
                         name, attn_dtype_name(dtype), layout);
    attn_status status = attn_check_tensor(t, name, ATTN_DTYPE_F32, 3, error);
    if (status != ATTN_OK) return status;
    for (int d = 0; d < 3; ++d) {
        if (t->shape[d] != rows[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "cache->%s.shape[%d] = %lld: expected %lld (%s)", name, d,
                             (long long)t->shape[d], (long long)rows[d], layout);
        if (t->stride[d] < 0)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "cache->%s.stride[%d] = %lld: must be >= 0", name, d,
                             (long long)t->stride[d]);
    }
    return ATTN_OK;
}

static attn_status check_head_scales(const attn_tensor *t, const char *name, int64_t heads,
                                     attn_error *error) {
    if (t == NULL) return ATTN_OK; /* 1 for every head */
    attn_status status = attn_check_tensor(t, name, ATTN_DTYPE_F32, 1, error);
    if (status != ATTN_OK) return status;
    if (t->shape[0] != heads && t->shape[0] != 1)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "cache->%s.shape[0] = %lld: expected Hkv = %lld or 1 (per-head fp8 "
                         "scales)",
                         name, (long long)t->shape[0], (long long)heads);
    for (int64_t h = 0; h < t->shape[0]; ++h) {
        const float scale = ((const float *)t->data)[h * t->stride[0]];
        if (!(scale > 0.0f) || isinf(scale))
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "cache->%s[%lld] = %g: must be finite and > 0", name, (long long)h,
                             (double)scale);
    }
    return ATTN_OK;
}

attn_status attn_kv_view_check_scales(const attn_kv_cache_view *cache, int has_scales,
                                      attn_dtype dtype, const int64_t rows[3],
                                      const char *layout, attn_error *error) {
    if (!has_scales) {
        if (attn_dtype_is_quantized(dtype))
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "cache->version = 1 with k_cache.dtype = %s: 8-bit storage needs "
                             "a version-%d view (k_scale, v_scale)",
                             attn_dtype_name(dtype), ATTN_KV_CACHE_VIEW_VERSION);
        return ATTN_OK;
    }
    const attn_tensor *scales[2] = {cache->k_scale, cache->v_scale};
    const char *names[2] = {"k_scale", "v_scale"};
    for (int n = 0; n < 2; ++n) {
        attn_status status = ATTN_OK;
        if (dtype == ATTN_DTYPE_Q8)
            status = check_row_scales(scales[n], names[n], rows, layout, dtype, error);
        else if (dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2)
            status = check_head_scales(scales[n], names[n], rows[2], error);
        else if (scales[n] != NULL)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "cache->%s is set: scales are for 8-bit storage only (k_cache.dtype "
                             "= %s)",
                             names[n], attn_dtype_name(dtype));
        if (status != ATTN_OK) return status;
    }
    return ATTN_OK;
}

float attn_kv_view_head_scale(const attn_tensor *scale, int64_t head) {
    if (scale == NULL) return 1.0f;
    return ((const float *)scale->data)[(scale->shape[0] == 1 ? 0 : head) * scale->stride[0]];
}

static float element(const attn_tensor *x, int64_t offset) {
    if (x->dtype == ATTN_DTYPE_BF16) return attn_bf16_to_float(((const uint16_t *)x->data)[offset]);
    if (x->dtype == ATTN_DTYPE_F16) return attn_f16_to_float(((const uint16_t *)x->data)[offset]);
    return ((const float *)x->data)[offset];
}

attn_status attn_kv_check_finite_input(const attn_tensor *x, const char *name, attn_dtype storage,
                                       attn_error *error) {
    if (!attn_dtype_is_quantized(storage)) return ATTN_OK;
    for (int64_t a = 0; a < x->shape[0]; ++a)
        for (int64_t t = 0; t < x->shape[1]; ++t)
            for (int64_t h = 0; h < x->shape[2]; ++h)
                for (int64_t d = 0; d < x->shape[3]; ++d) {
                    const float value = element(x, a * x->stride[0] + t * x->stride[1] +
                                                       h * x->stride[2] + d * x->stride[3]);
                    if (!isfinite(value))
                        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                         "%s[%lld, %lld, %lld, %lld] = %g: %s storage holds "
                                         "finite values only",
                                         name, (long long)a, (long long)t, (long long)h,
                                         (long long)d, (double)value, attn_dtype_name(storage));
                }
    return ATTN_OK;
}
