/*
 * memory.c — overflow-checked size arithmetic, aligned allocation and the thread count.
 */
#include "internal.h"
#include "parallel.h"

#include <stdlib.h>

bool attn_mul_i64(int64_t a, int64_t b, int64_t *result) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *result = r;
    return true;
}

bool attn_add_i64(int64_t a, int64_t b, int64_t *result) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *result = r;
    return true;
}

bool attn_mul_size(size_t a, size_t b, size_t *result) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *result = r;
    return true;
}

bool attn_add_size(size_t a, size_t b, size_t *result) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *result = r;
    return true;
}

void *attn_aligned_alloc(size_t bytes) {
    if (bytes == 0) return NULL;
    size_t rounded;
    if (!attn_add_size(bytes, 63, &rounded)) return NULL;
    rounded &= ~(size_t)63;
    return aligned_alloc(64, rounded);
}

void attn_aligned_free(void *pointer) { free(pointer); }

int attn_thread_count(int requested) { return attn_default_threads(requested); }
