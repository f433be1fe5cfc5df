/*
 * safetensors_write.c — the safetensors writer: header JSON (names and metadata escaped),
 * the data buffer padded to start 8-byte aligned as the reference implementation does, and
 * an atomic write (temporary file in the same folder, renamed into place).
 */
#define _POSIX_C_SOURCE 200809L

#include "core/internal.h"
#include "attn_io.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* Appends `text` as a JSON string (quotes, escapes) to a growing buffer. */
typedef struct text_buffer {
    char *data;
    size_t length, capacity;
    int failed;
} text_buffer;

static void text_append(text_buffer *b, const char *text, size_t n) {
    if (b->failed) return;
    if (b->length + n + 1 > b->capacity) {
        size_t grown = b->capacity ? b->capacity : 256;
        while (grown < b->length + n + 1) grown *= 2;
        char *bigger = realloc(b->data, grown);
        if (bigger == NULL) { b->failed = 1; return; }
        b->data = bigger;
        b->capacity = grown;
    }
    memcpy(b->data + b->length, text, n);
    b->length += n;
    b->data[b->length] = '\0';
}

static void text_printf(text_buffer *b, const char *format, ...) ATTN_PRINTF_LIKE(2, 3);
static void text_printf(text_buffer *b, const char *format, ...) {
    char piece[128];
    va_list arguments;
    va_start(arguments, format);
    int n = vsnprintf(piece, sizeof piece, format, arguments);
    va_end(arguments);
    if (n < 0 || (size_t)n >= sizeof piece) { b->failed = 1; return; }
    text_append(b, piece, (size_t)n);
}

static void text_append_json_string(text_buffer *b, const char *s) {
    text_append(b, "\"", 1);
    for (; *s; ++s) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            char escaped[2] = {'\\', (char)ch};
            text_append(b, escaped, 2);
        } else if (ch < 0x20) {
            text_printf(b, "\\u%04x", ch);
        } else {
            text_append(b, (const char *)&ch, 1);
        }
    }
    text_append(b, "\"", 1);
}

/* Each tensor's name (non-empty, terminated, not reserved, unique), dtype, rank, shape and data;
 * sizes[i] receives its bytes. */
static attn_status check_tensors(const attn_safetensors_tensor *tensors, int64_t tensor_count,
                                 size_t *sizes, attn_error *error) {
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < tensor_count && status == ATTN_OK; ++i) {
        const attn_safetensors_tensor *t = &tensors[i];
        size_t name_length = strnlen(t->name, ATTN_SAFETENSORS_NAME_CAPACITY);
        if (name_length == 0 || name_length == ATTN_SAFETENSORS_NAME_CAPACITY ||
            strcmp(t->name, "__metadata__") == 0) {
            status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                               "tensors[%lld].name: empty, unterminated or reserved",
                               (long long)i);
            break;
        }
        for (int64_t j = 0; j < i; ++j)
            if (strcmp(tensors[j].name, t->name) == 0)
                status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                   "tensors[%lld].name = '%s': duplicate", (long long)i, t->name);
        if (attn_safetensors_dtype_name(t->dtype) == NULL || t->rank < 0 || t->rank > ATTN_MAX_RANK)
            status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                               "tensor '%s': dtype %d or rank %d not writable", t->name,
                               (int)t->dtype, t->rank);
        size_t bytes = attn_dtype_size(t->dtype);
        for (int d = 0; d < t->rank && status == ATTN_OK; ++d)
            if (t->shape[d] < 0 || !attn_mul_size(bytes, (size_t)t->shape[d], &bytes))
                status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                   "tensor '%s': shape[%d] = %lld invalid or overflowing",
                                   t->name, d, (long long)t->shape[d]);
        if (status == ATTN_OK && bytes > 0 && t->data == NULL)
            status = attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "tensor '%s': data = NULL",
                               t->name);
        sizes[i] = bytes;
    }
    return status;
}

/* The JSON header (metadata, then each tensor's dtype, shape and data offsets), padded with
 * spaces so that the data starts 8-byte aligned, as the reference writer does. */
static attn_status build_header(const char *path, const attn_safetensors_tensor *tensors,
                                int64_t tensor_count, const size_t *sizes,
                                const attn_safetensors_metadata *metadata,
                                int64_t metadata_count, text_buffer *header, attn_error *error) {
    attn_status status = ATTN_OK;
    text_append(header, "{", 1);
    int first = 1;
    if (metadata_count > 0) {
        text_append(header, "\"__metadata__\":{", 16);
        for (int64_t m = 0; m < metadata_count; ++m) {
            if (m) text_append(header, ",", 1);
            text_append_json_string(header, metadata[m].key);
            text_append(header, ":", 1);
            text_append_json_string(header, metadata[m].value);
        }
        text_append(header, "}", 1);
        first = 0;
    }
    size_t offset = 0;
    for (int64_t i = 0; i < tensor_count; ++i) {
        const attn_safetensors_tensor *t = &tensors[i];
        if (!first) text_append(header, ",", 1);
        first = 0;
        text_append_json_string(header, t->name);
        text_printf(header, ":{\"dtype\":\"%s\",\"shape\":[", attn_safetensors_dtype_name(t->dtype));
        for (int d = 0; d < t->rank; ++d)
            text_printf(header, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        text_printf(header, "],\"data_offsets\":[%zu,%zu]}", offset, offset + sizes[i]);
        offset += sizes[i];
    }
    text_append(header, "}", 1);
    /* Pad with spaces so the data buffer starts 8-byte aligned, as the reference does. */
    while (!header->failed && header->length % 8 != 0) text_append(header, " ", 1);
    if (header->failed)
        status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors header");
    else if (header->length > ATTN_SAFETENSORS_MAX_HEADER_BYTES)
        status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                           "%s: a header of %zu bytes exceeds the format's limit of %llu",
                           path, header->length,
                           (unsigned long long)ATTN_SAFETENSORS_MAX_HEADER_BYTES);
    return status;
}

/* The file written under a temporary name and renamed into place (nothing at `path` on error). */
static attn_status write_file(const char *path, const text_buffer *header,
                              const attn_safetensors_tensor *tensors, int64_t tensor_count,
                              const size_t *sizes, attn_error *error) {
    attn_status status = ATTN_OK;
    size_t path_length = strlen(path);
    char *temporary = malloc(path_length + 32);
    if (temporary == NULL) {
        status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: temporary name", path);
    } else {
        snprintf(temporary, path_length + 32, "%s.tmp.%ld", path, (long)getpid());
        FILE *stream = fopen(temporary, "wb");
        if (stream == NULL) {
            status = attn_fail(error, ATTN_ERROR_IO, "%s: cannot create", temporary);
        } else {
            unsigned char length_bytes[8];
            uint64_t length = header->length;
            for (int i = 0; i < 8; ++i) length_bytes[i] = (unsigned char)(length >> (8 * i));
            int ok = fwrite(length_bytes, 1, 8, stream) == 8 &&
                     fwrite(header->data, 1, header->length, stream) == header->length;
            for (int64_t i = 0; ok && i < tensor_count; ++i)
                ok = sizes[i] == 0 || fwrite(tensors[i].data, 1, sizes[i], stream) == sizes[i];
            if (fclose(stream) != 0) ok = 0;
            if (!ok || rename(temporary, path) != 0) {
                remove(temporary);
                status = attn_fail(error, ATTN_ERROR_IO, "%s: write failed", path);
            }
        }
        free(temporary);
    }
    return status;
}

attn_status attn_safetensors_write(const char *path, const attn_safetensors_tensor *tensors,
                                   int64_t tensor_count,
                                   const attn_safetensors_metadata *metadata,
                                   int64_t metadata_count, attn_error *error) {
    if (path == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path = NULL");
    if (tensor_count < 0 || (tensor_count > 0 && tensors == NULL))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "tensor_count = %lld with tensors %s", (long long)tensor_count,
                         tensors ? "given" : "NULL");
    if (metadata_count < 0 || (metadata_count > 0 && metadata == NULL))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "metadata_count = %lld",
                         (long long)metadata_count);
    for (int64_t m = 0; m < metadata_count; ++m)
        if (metadata[m].key == NULL || metadata[m].value == NULL)
            return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "metadata[%lld].%s = NULL",
                             (long long)m, metadata[m].key == NULL ? "key" : "value");
    size_t *sizes = calloc((size_t)tensor_count + 1, sizeof *sizes);
    if (sizes == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors writer");
    text_buffer header = {0};
    attn_status status = check_tensors(tensors, tensor_count, sizes, error);
    if (status == ATTN_OK)
        status = build_header(path, tensors, tensor_count, sizes, metadata, metadata_count,
                              &header, error);
    if (status == ATTN_OK) status = write_file(path, &header, tensors, tensor_count, sizes, error);
    free(header.data);
    free(sizes);
    return status;
}
