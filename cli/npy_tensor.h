/*
 * npy_tensor.h — loading .npy files for the CLI commands: dtype and rank checks whose
 * one-line messages name the option and the file, and views of the loaded data as the
 * attn_tensor arguments of the library (no copy: the tensor points into the array).
 */
#ifndef ATTN_CLI_NPY_TENSOR_H
#define ATTN_CLI_NPY_TENSOR_H

#include <stdbool.h>

#include "attn.h"
#include "attn_io.h"

#if defined(__GNUC__)
#define CLI_PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CLI_PRINTF_LIKE(fmt_index, first_arg)
#endif

/* Prints "attn COMMAND: MESSAGE" as one line on stderr. */
void cli_error(const char *command, const char *format, ...) CLI_PRINTF_LIKE(2, 3);

/* Whether `path` (given to `option`; "" for a positional argument) is a file the CLI may
 * read: opened without blocking (a FIFO with no writer would hold a plain open forever) and
 * checked to be a regular file, or a folder when folder_allowed. Otherwise prints one line
 * naming the path and what it is (a FIFO, a character device such as /dev/zero, ...). */
bool cli_input_file(const char *command, const char *option, const char *path,
                    bool folder_allowed);

/* "PATH.partial-PID" (malloc'ed; NULL when out of memory): where an output file is written
 * before it is renamed into place, so a failed command never leaves a partial file at PATH. */
char *cli_partial_name(const char *path);

/* malloc's a float32 array of dims[0] x ... x dims[rank-1] after an overflow check; on
 * failure prints one line naming `what` and returns NULL. */
float *cli_allocate_floats(const char *command, int rank, const int64_t *dims, const char *what);

/*
 * Reads `path` (given to `option`, e.g. "--q") into `array`, requiring `dtype` and a rank in
 * [min_rank, max_rank]. On failure prints one line naming the option, the file and the bad
 * value, leaves `array` empty and returns false. `hint` (may be NULL) is appended to a dtype
 * error, e.g. "astype(np.float32)".
 */
bool cli_load_npy(const char *command, const char *option, const char *path, attn_dtype dtype,
                  int min_rank, int max_rank, const char *hint, attn_npy_array *array);

/* cli_load_npy accepting float32 or float16 files (the CLI's attention tensors). */
bool cli_load_npy_float(const char *command, const char *option, const char *path, int min_rank,
                        int max_rank, attn_npy_array *array);

/* A contiguous rank-4 view of `array` (rank <= 4): missing leading dimensions become size 1,
 * so a [Tq, Tk] mask is the [1, 1, Tq, Tk] tensor that broadcasts over batch and heads. */
attn_tensor cli_tensor_rank4(const attn_npy_array *array);

/* The shape as text, "[2, 3, 4]", into `buffer`; returns buffer. */
const char *cli_shape_text(int rank, const int64_t *shape, char *buffer, size_t capacity);

#endif /* ATTN_CLI_NPY_TENSOR_H */
