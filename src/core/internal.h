/*
 * internal.h — helpers shared by every part of libattn and never exported: error reporting,
 * overflow-checked size arithmetic, element access on strided views, aligned allocation.
 */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define ATTN_PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define ATTN_PRINTF_LIKE(fmt_index, first_arg)
#endif

/* Records `status` and a printf-formatted message in `error` (if not NULL); returns status.
 * Use: return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "q.shape[3] (Dk) = %lld: ...", x); */
attn_status attn_fail(attn_error *error, attn_status status, const char *format, ...)
    ATTN_PRINTF_LIKE(3, 4);

/* out = "[a, b, c]", the first `count` values, truncated to `capacity` bytes (always
 * terminated): shapes and strides in error messages. */
void attn_format_dims(char *out, size_t capacity, int count, const int64_t *values);

/* Checked arithmetic: return false on overflow (result untouched then). */
bool attn_mul_i64(int64_t a, int64_t b, int64_t *result);
bool attn_add_i64(int64_t a, int64_t b, int64_t *result);
bool attn_mul_size(size_t a, size_t b, size_t *result);
bool attn_add_size(size_t a, size_t b, size_t *result);

/* 64-byte aligned allocation (for SIMD tiles). attn_aligned_free(NULL) is allowed.
 * Returns NULL on failure or when bytes == 0. */
void *attn_aligned_alloc(size_t bytes);
void attn_aligned_free(void *pointer);

/* Pointer to element (i0, i1, i2, i3) of a float32 view of rank 4. No bounds check. */
static inline float *attn_f32_at4(const attn_tensor *t, int64_t i0, int64_t i1, int64_t i2,
                                  int64_t i3) {
    return (float *)t->data + i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] +
           i3 * t->stride[3];
}

/* Pointer to element (i0, i1, i2) of a float32 view of rank 3. No bounds check. */
static inline float *attn_f32_at3(const attn_tensor *t, int64_t i0, int64_t i1, int64_t i2) {
    return (float *)t->data + i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2];
}

/*
 * Validates that `t` is a usable view: non-NULL, non-NULL data, the expected dtype and rank,
 * every shape >= 1, and that the byte span it addresses fits in int64 / size_t. `name` names
 * the argument in the message ("q", "options.mask", ...).
 */
attn_status attn_check_tensor(const attn_tensor *t, const char *name, attn_dtype dtype, int rank,
                              attn_error *error);

/* Name of a dtype for messages ("float32", "bool", ...). */
const char *attn_dtype_name(attn_dtype dtype);

/* The effective thread count for a call: execution->num_threads or the default
 * (attn_default_threads in parallel.h). */
int attn_thread_count(int requested);

#endif /* ATTN_INTERNAL_H */
