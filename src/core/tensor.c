/*
 * tensor.c — constructing and validating strided views (attn_tensor).
 */
#include "internal.h"

#include <string.h>

size_t attn_dtype_size(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_DTYPE_F32: return 4;
    case ATTN_DTYPE_BF16: return 2;
    case ATTN_DTYPE_F16: return 2;
    case ATTN_DTYPE_BOOL: return 1;
    case ATTN_DTYPE_I32: return 4;
    case ATTN_DTYPE_I64: return 8;
    case ATTN_DTYPE_F64: return 8;
    case ATTN_DTYPE_Q8: return 1; /* plus its scales, held apart */
    case ATTN_DTYPE_FP8_E4M3: return 1;
    case ATTN_DTYPE_FP8_E5M2: return 1;
    }
    return 0;
}

const char *attn_dtype_name(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_DTYPE_F32: return "float32";
    case ATTN_DTYPE_BF16: return "bfloat16";
    case ATTN_DTYPE_F16: return "float16";
    case ATTN_DTYPE_BOOL: return "bool";
    case ATTN_DTYPE_I32: return "int32";
    case ATTN_DTYPE_I64: return "int64";
    case ATTN_DTYPE_F64: return "float64";
    case ATTN_DTYPE_Q8: return "int8 (scaled)";
    case ATTN_DTYPE_FP8_E4M3: return "float8_e4m3";
    case ATTN_DTYPE_FP8_E5M2: return "float8_e5m2";
    }
    return "unknown";
}

attn_tensor attn_tensor_contiguous(void *data, attn_dtype dtype, int rank, const int64_t *shape) {
    attn_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    if (rank < 0 || rank > ATTN_MAX_RANK || (rank > 0 && shape == NULL)) {
        t.rank = -1; /* rejected by attn_check_tensor */
        return t;
    }
    t.rank = rank;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
        t.shape[d] = shape[d];
        t.stride[d] = stride;
        if (!attn_mul_i64(stride, shape[d] > 0 ? shape[d] : 1, &stride)) stride = 0;
    }
    return t;
}

attn_tensor attn_tensor_f32_4d(float *data, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const int64_t shape[4] = {d0, d1, d2, d3};
    return attn_tensor_contiguous(data, ATTN_DTYPE_F32, 4, shape);
}

attn_tensor attn_tensor_f32_bhtd(float *data, int64_t B, int64_t T, int64_t H, int64_t D) {
    attn_tensor t = attn_tensor_f32_4d(data, B, T, H, D);
    t.stride[3] = 1;
    t.stride[1] = D;     /* T */
    t.stride[2] = T * D; /* H */
    t.stride[0] = H * T * D;
    return t;
}

attn_status attn_tensor_permute(const attn_tensor *t, const int *order, attn_tensor *result,
                                attn_error *error) {
    if (t == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "tensor is NULL");
    if (order == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "order is NULL");
    if (result == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "result is NULL");
    if (t->rank < 1 || t->rank > ATTN_MAX_RANK)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "tensor.rank = %d: must be 1..%d",
                         t->rank, ATTN_MAX_RANK);
    int seen[ATTN_MAX_RANK] = {0};
    attn_tensor out = *t;
    for (int d = 0; d < t->rank; ++d) {
        if (order[d] < 0 || order[d] >= t->rank || seen[order[d]])
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "order[%d] = %d: not a permutation of 0..%d", d, order[d],
                             t->rank - 1);
        seen[order[d]] = 1;
        out.shape[d] = t->shape[order[d]];
        out.stride[d] = t->stride[order[d]];
    }
    *result = out;
    return ATTN_OK;
}

int64_t attn_tensor_numel(const attn_tensor *t) {
    if (t == NULL || t->rank < 0 || t->rank > ATTN_MAX_RANK) return -1;
    int64_t n = 1;
    for (int d = 0; d < t->rank; ++d)
        if (t->shape[d] < 0 || !attn_mul_i64(n, t->shape[d], &n)) return -1;
    return n;
}

attn_status attn_check_tensor(const attn_tensor *t, const char *name, attn_dtype dtype, int rank,
                              attn_error *error) {
    if (t == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s is NULL", name);
    if (t->dtype != dtype)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s.dtype = %s: expected %s", name,
                         attn_dtype_name(t->dtype), attn_dtype_name(dtype));
    if (t->rank != rank)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s.rank = %d: expected %d", name,
                         t->rank, rank);
    /* The furthest element addressed, in elements, must fit; so must its byte offset. */
    int64_t span = 0;
    for (int d = 0; d < rank; ++d)
        if (t->shape[d] < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s.shape[%d] = %lld: must be >= 1",
                             name, d, (long long)t->shape[d]);
    /* A span that overflows is reported against the dimension that reaches furthest (the
     * one whose stride is too large), not the one whose addition happened to overflow. */
    int widest = 0;
    int64_t widest_extent = -1;
    for (int d = 0; d < rank; ++d) {
        /* INT64_MIN has no magnitude in int64: refused before it is negated */
        int64_t extent = INT64_MAX;
        const int fits = t->stride[d] != INT64_MIN &&
                         attn_mul_i64(t->shape[d] - 1, t->stride[d] < 0 ? -t->stride[d] : t->stride[d],
                                      &extent);
        if (!fits) extent = INT64_MAX;
        if (extent > widest_extent) widest = d, widest_extent = extent;
        if (!fits || !attn_add_i64(span, extent, &span)) span = INT64_MAX;
    }
    if (span == INT64_MAX)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "%s: shape[%d] = %lld with stride %lld overflows the address range",
                         name, widest, (long long)t->shape[widest], (long long)t->stride[widest]);
    /* (after the shape: an empty tensor of PyTorch or NumPy may have no data pointer, and its
     * size is what is wrong) */
    if (t->data == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s.data is NULL", name);
    int64_t bytes; /* span < INT64_MAX here, so span + 1 fits */
    if (!attn_mul_i64(span + 1, (int64_t)attn_dtype_size(dtype), &bytes) ||
        (uint64_t)bytes > (uint64_t)(SIZE_MAX / 2))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "%s: shape[%d] = %lld with stride %lld: the addressed span of %lld "
                         "elements overflows the address range",
                         name, widest, (long long)t->shape[widest], (long long)t->stride[widest],
                         (long long)(span + 1));
    return ATTN_OK;
}
