/*
 * error.c — status names, the version string and the one place that formats error messages.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

void attn_format_dims(char *out, size_t capacity, int count, const int64_t *values) {
    if (capacity == 0) return;
    size_t used = (size_t)snprintf(out, capacity, "[");
    for (int d = 0; d < count && used < capacity; ++d)
        used += (size_t)snprintf(out + used, capacity - used, d ? ", %lld" : "%lld",
                                 (long long)values[d]);
    if (used < capacity) snprintf(out + used, capacity - used, "]");
}

attn_status attn_fail(attn_error *error, attn_status status, const char *format, ...) {
    if (error != NULL) {
        va_list arguments;
        va_start(arguments, format);
        error->status = status;
        vsnprintf(error->message, sizeof error->message, format, arguments);
        va_end(arguments);
        /* Keep messages on one line. */
        for (char *c = error->message; *c; ++c)
            if (*c == '\n' || *c == '\r') *c = ' ';
    }
    return status;
}

const char *attn_status_name(attn_status status) {
    switch (status) {
    case ATTN_OK: return "ATTN_OK";
    case ATTN_ERROR_NULL_ARGUMENT: return "ATTN_ERROR_NULL_ARGUMENT";
    case ATTN_ERROR_INVALID_ARGUMENT: return "ATTN_ERROR_INVALID_ARGUMENT";
    case ATTN_ERROR_SHAPE_MISMATCH: return "ATTN_ERROR_SHAPE_MISMATCH";
    case ATTN_ERROR_OVERFLOW: return "ATTN_ERROR_OVERFLOW";
    case ATTN_ERROR_OUT_OF_MEMORY: return "ATTN_ERROR_OUT_OF_MEMORY";
    case ATTN_ERROR_EMPTY_ROW: return "ATTN_ERROR_EMPTY_ROW";
    case ATTN_ERROR_IO: return "ATTN_ERROR_IO";
    case ATTN_ERROR_FORMAT: return "ATTN_ERROR_FORMAT";
    case ATTN_ERROR_MEMORY_LIMIT: return "ATTN_ERROR_MEMORY_LIMIT";
    case ATTN_ERROR_CAPACITY: return "ATTN_ERROR_CAPACITY";
    case ATTN_ERROR_UNSUPPORTED: return "ATTN_ERROR_UNSUPPORTED";
    case ATTN_ERROR_COMMUNICATION: return "ATTN_ERROR_COMMUNICATION";
    }
    return "ATTN_ERROR_UNKNOWN";
}

const char *attn_version(void) {
#define ATTN_STRINGIFY_INNER(x) #x
#define ATTN_STRINGIFY(x) ATTN_STRINGIFY_INNER(x)
    return ATTN_STRINGIFY(ATTN_VERSION_MAJOR) "." ATTN_STRINGIFY(ATTN_VERSION_MINOR) "." ATTN_STRINGIFY(
        ATTN_VERSION_PATCH);
}
