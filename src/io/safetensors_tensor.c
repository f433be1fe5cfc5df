/*
 * safetensors_tensor.c — a parsed file's tensors as the caller needs them: copies converted
 * between F32, BF16 and F16 (widening exact, narrowing round-to-nearest-even via
 * kernels/half.h), zero-copy views into the mapped image, and "view if possible, else a
 * converted copy" for loading weights into a layer's dtype.
 */
#include "io/safetensors_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"

static int is_float_dtype(attn_dtype dtype) {
    return dtype == ATTN_DTYPE_F32 || dtype == ATTN_DTYPE_BF16 || dtype == ATTN_DTYPE_F16;
}

/* The tensor `name` with exactly shape[0..rank) into *found, or an error naming it. */
static attn_status find_shaped(const attn_safetensors_file *file, const char *name, int rank,
                               const int64_t *shape, const attn_safetensors_tensor **found,
                               attn_error *error) {
    const attn_safetensors_tensor *t = attn_safetensors_find(file, name);
    if (t == NULL)
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: tensor '%s' missing", name);
    int same = t->rank == rank;
    for (int d = 0; same && d < rank; ++d) same = t->shape[d] == shape[d];
    if (!same) {
        char stored[96], wanted[96];
        attn_format_dims(stored, sizeof stored, t->rank, t->shape);
        attn_format_dims(wanted, sizeof wanted, rank, shape);
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "safetensors tensor '%s': shape %s, expected %s", name, stored, wanted);
    }
    *found = t;
    return ATTN_OK;
}

/* Reads element i of a little-endian float tensor as float32 (exact). */
static float load_element(attn_dtype dtype, const unsigned char *source, size_t i) {
    if (dtype == ATTN_DTYPE_F32) {
        uint32_t bits = (uint32_t)source[4 * i] | (uint32_t)source[4 * i + 1] << 8 |
                        (uint32_t)source[4 * i + 2] << 16 | (uint32_t)source[4 * i + 3] << 24;
        return attn_bits_float(bits);
    }
    uint16_t bits = (uint16_t)(source[2 * i] | source[2 * i + 1] << 8);
    return dtype == ATTN_DTYPE_BF16 ? attn_bf16_to_float(bits) : attn_f16_to_float(bits);
}

/* count elements from `source` (stored dtype `from`) into `out` as `to`. */
static void convert(attn_dtype from, const unsigned char *source, size_t count, attn_dtype to,
                    void *out) {
    if (from == to) {
        memcpy(out, source, count * attn_dtype_size(from));
        return;
    }
    for (size_t i = 0; i < count; ++i) {
        float value = load_element(from, source, i);
        if (to == ATTN_DTYPE_F32) ((float *)out)[i] = value;
        else if (to == ATTN_DTYPE_BF16) ((uint16_t *)out)[i] = attn_float_to_bf16(value);
        else ((uint16_t *)out)[i] = attn_float_to_f16(value);
    }
}

/* The tensor `name` of the given shape, checked to be convertible to `dtype` (F32, BF16 or
 * F16 both ways); `verb` says in the message what the caller does with it. */
static attn_status find_convertible(const attn_safetensors_file *file, const char *name,
                                    attn_dtype dtype, int rank, const int64_t *shape,
                                    const char *verb, const attn_safetensors_tensor **found,
                                    attn_error *error) {
    if (!is_float_dtype(dtype))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "dtype = %s: tensors are %s F32, BF16 or F16 only",
                         attn_dtype_name(dtype), verb);
    if (rank < 0 || rank > ATTN_MAX_RANK)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "rank = %d (0..%d)", rank,
                         ATTN_MAX_RANK);
    const attn_safetensors_tensor *t = NULL;
    attn_status status = find_shaped(file, name, rank, shape, &t, error);
    if (status != ATTN_OK) return status;
    if (!is_float_dtype(t->dtype))
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors tensor '%s': dtype %s cannot be converted to %s (F32, "
                         "BF16 or F16 are)",
                         name, t->stored_dtype, attn_safetensors_dtype_name(dtype));
    *found = t;
    return ATTN_OK;
}

attn_status attn_safetensors_get(const attn_safetensors_file *file, const char *name,
                                 attn_dtype dtype, int rank, const int64_t *shape, void *out,
                                 attn_error *error) {
    if (file == NULL || name == NULL || out == NULL || (rank > 0 && shape == NULL))
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file, name, shape or out = NULL");
    const attn_safetensors_tensor *t = NULL;
    attn_status status = find_convertible(file, name, dtype, rank, shape, "converted to", &t,
                                          error);
    if (status != ATTN_OK) return status;
    convert(t->dtype, t->data, t->byte_count / attn_dtype_size(t->dtype), dtype, out);
    return ATTN_OK;
}

attn_status attn_safetensors_get_f32(const attn_safetensors_file *file, const char *name,
                                     int rank, const int64_t *shape, float *out,
                                     attn_error *error) {
    return attn_safetensors_get(file, name, ATTN_DTYPE_F32, rank, shape, out, error);
}

/* The contiguous view of t (its dtype, a scalar as [1]); no checks. */
static attn_tensor view_of(const attn_safetensors_tensor *t, void *data, attn_dtype dtype) {
    int64_t one = 1;
    return attn_tensor_contiguous(data, dtype, t->rank ? t->rank : 1, t->rank ? t->shape : &one);
}

attn_status attn_safetensors_view(const attn_safetensors_file *file, const char *name,
                                  attn_tensor *view, attn_error *error) {
    if (file == NULL || name == NULL || view == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file, name or view = NULL");
    const attn_safetensors_tensor *t = attn_safetensors_find(file, name);
    if (t == NULL)
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: tensor '%s' missing", name);
    size_t element = attn_dtype_size(t->dtype);
    if (t->dtype == ATTN_SAFETENSORS_DTYPE_OTHER || element == 0)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "safetensors tensor '%s': dtype %s has no attn type to view it as",
                         name, t->stored_dtype);
    if (t->byte_count == 0)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "safetensors tensor '%s': no elements, nothing to view", name);
    if ((uintptr_t)t->data % element != 0) {
        const unsigned char *image =
            file->shards && t->shard >= 0 && t->shard < file->shard_count
                ? file->shards[t->shard].bytes : t->data;
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "safetensors tensor '%s': data at offset %llu of its file are not "
                         "aligned to the %zu-byte %s element (attn_safetensors_get copies)",
                         name,
                         (unsigned long long)((const unsigned char *)t->data - image), element,
                         t->stored_dtype);
    }
    *view = view_of(t, (void *)(uintptr_t)t->data, t->dtype);
    return ATTN_OK;
}

attn_status attn_safetensors_tensor_as(const attn_safetensors_file *file, const char *name,
                                       attn_dtype dtype, int rank, const int64_t *shape,
                                       attn_tensor *out, void **owned, attn_error *error) {
    if (owned != NULL) *owned = NULL;
    if (file == NULL || name == NULL || out == NULL || owned == NULL ||
        (rank > 0 && shape == NULL))
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                         "file, name, shape, out or owned = NULL");
    const attn_safetensors_tensor *t = NULL;
    attn_status status = find_convertible(file, name, dtype, rank, shape, "loaded as", &t,
                                          error);
    if (status != ATTN_OK) return status;
    size_t element = attn_dtype_size(dtype);
    if (t->dtype == dtype && t->byte_count > 0 && (uintptr_t)t->data % element == 0) {
        *out = view_of(t, (void *)(uintptr_t)t->data, dtype);
        return ATTN_OK;
    }
    size_t count = t->byte_count / attn_dtype_size(t->dtype), bytes;
    if (!attn_mul_size(count ? count : 1, element, &bytes))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "safetensors tensor '%s': size", name);
    void *copy = malloc(bytes);
    if (copy == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "safetensors tensor '%s': cannot allocate %zu bytes", name, bytes);
    status = attn_safetensors_get(file, name, dtype, rank, shape, copy, error);
    if (status != ATTN_OK) {
        free(copy);
        return status;
    }
    *out = view_of(t, copy, dtype);
    *owned = copy;
    return ATTN_OK;
}
