/*
 * npy_tensor.c — .npy loading with option-naming messages, and rank-4 views for the CLI.
 */
#include "attn_io.h"
#include "npy_tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_error(const char *command, const char *format, ...) {
    char message[1024];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);
    for (char *c = message; *c; ++c)
        if (*c == '\n' || *c == '\r') *c = ' ';
    fprintf(stderr, "attn %s: %s\n", command, message);
}

bool cli_input_file(const char *command, const char *option, const char *path,
                    bool folder_allowed) {
    const char *space = option[0] != '\0' ? " " : "";
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        cli_error(command, "%s%s%s: cannot open (%s)", option, space, path, strerror(errno));
        return false;
    }
    struct stat info;
    const int stated = fstat(fd, &info);
    close(fd);
    if (stated != 0) {
        cli_error(command, "%s%s%s: cannot stat (%s)", option, space, path, strerror(errno));
        return false;
    }
    if (S_ISREG(info.st_mode) || (folder_allowed && S_ISDIR(info.st_mode))) return true;
    const char *kind = S_ISDIR(info.st_mode)    ? "a folder"
                       : S_ISFIFO(info.st_mode) ? "a FIFO"
                       : S_ISCHR(info.st_mode)  ? "a character device"
                       : S_ISBLK(info.st_mode)  ? "a block device"
                       : S_ISSOCK(info.st_mode) ? "a socket"
                                                : "not a regular file";
    cli_error(command, "%s%s%s: %s, not a regular file%s", option, space, path, kind,
              folder_allowed ? " or a folder" : "");
    return false;
}

const char *cli_shape_text(int rank, const int64_t *shape, char *buffer, size_t capacity) {
    size_t used = (size_t)snprintf(buffer, capacity, "[");
    for (int d = 0; d < rank && used < capacity; ++d)
        used += (size_t)snprintf(buffer + used, capacity - used, "%s%lld", d ? ", " : "",
                                 (long long)shape[d]);
    if (used < capacity) snprintf(buffer + used, capacity - used, "]");
    return buffer;
}

/* cli_load_npy with `dtype`, or also `other` when other != dtype. */
static bool load_npy(const char *command, const char *option, const char *path, attn_dtype dtype,
                     attn_dtype other, int min_rank, int max_rank, const char *hint,
                     attn_npy_array *array) {
    attn_error error;
    memset(array, 0, sizeof *array);
    if (attn_npy_read(path, 0, array, &error) != ATTN_OK) {
        cli_error(command, "%s %s", option, error.message);
        return false;
    }
    static const char *dtype_names[] = {"float32", "bfloat16", "float16", "bool",
                                        "int32",   "int64",    "float64"};
    if (array->dtype == other) dtype = other;
    if (array->dtype != dtype) {
        cli_error(command, "%s %s: dtype %s, expected %s%s%s", option, path,
                  dtype_names[array->dtype], dtype_names[dtype], hint ? " " : "",
                  hint ? hint : "");
        attn_npy_free(array);
        return false;
    }
    if (array->rank < min_rank || array->rank > max_rank) {
        char shape[96];
        cli_shape_text(array->rank, array->shape, shape, sizeof shape);
        if (min_rank == max_rank)
            cli_error(command, "%s %s: shape %s has rank %d, expected rank %d", option, path,
                      shape, array->rank, min_rank);
        else
            cli_error(command, "%s %s: shape %s has rank %d, expected rank %d..%d", option, path,
                      shape, array->rank, min_rank, max_rank);
        attn_npy_free(array);
        return false;
    }
    for (int d = 0; d < array->rank; ++d)
        if (array->shape[d] == 0) {
            char shape[96];
            cli_shape_text(array->rank, array->shape, shape, sizeof shape);
            cli_error(command, "%s %s: shape %s is empty (dimension %d is 0)", option, path,
                      shape, d);
            attn_npy_free(array);
            return false;
        }
    return true;
}

bool cli_load_npy(const char *command, const char *option, const char *path, attn_dtype dtype,
                  int min_rank, int max_rank, const char *hint, attn_npy_array *array) {
    return load_npy(command, option, path, dtype, dtype, min_rank, max_rank, hint, array);
}

bool cli_load_npy_float(const char *command, const char *option, const char *path, int min_rank,
                        int max_rank, attn_npy_array *array) {
    return load_npy(command, option, path, ATTN_DTYPE_F32, ATTN_DTYPE_F16, min_rank, max_rank,
                    "or float16 (write it with astype(np.float32))", array);
}

attn_tensor cli_tensor_rank4(const attn_npy_array *array) {
    int64_t shape[4] = {1, 1, 1, 1};
    int missing = 4 - array->rank;
    for (int d = 0; d < array->rank; ++d) shape[missing + d] = array->shape[d];
    return attn_tensor_contiguous(array->data, array->dtype, 4, shape);
}

char *cli_partial_name(const char *path) {
    size_t length = strlen(path) + 32;
    char *name = malloc(length);
    if (name) snprintf(name, length, "%s.partial-%ld", path, (long)getpid());
    return name;
}

float *cli_allocate_floats(const char *command, int rank, const int64_t *dims, const char *what) {
    size_t bytes = sizeof(float);
    for (int i = 0; i < rank; ++i)
        if (dims[i] < 0 || __builtin_mul_overflow(bytes, (size_t)dims[i], &bytes)) {
            cli_error(command, "%s: the output size overflows", what);
            return NULL;
        }
    float *data = malloc(bytes);
    if (data == NULL) cli_error(command, "%s: cannot allocate %zu bytes", what, bytes);
    return data;
}
