/*
 * attn_io.h — file formats of libattn on top of attn.h: NumPy .npy arrays and Hugging Face
 * safetensors files (read, strictly validated, and written atomically). Same conventions as
 * attn.h: no function aborts or prints; messages name the path, the tensor or the byte offset.
 */
#ifndef ATTN_IO_H
#define ATTN_IO_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Section: NumPy .npy files
 * ====================================================================================== */

/*
 * An array read from a .npy file. The library allocates `data` (free with attn_npy_free).
 * Only little-endian, C-order arrays of dtype <f4, <f8, |b1 / |u1, <i4, <i8, <f2 are read;
 * Fortran order, big-endian data, object arrays, rank > 4 and truncated files are errors.
 */
typedef struct attn_npy_array {
    attn_dtype dtype;
    int rank;                       /* 0..4; a 0-d array has rank 0 and one element */
    int64_t shape[ATTN_MAX_RANK];
    void *data;
    size_t byte_count;
} attn_npy_array;

/* Reads `path`. Errors: ATTN_ERROR_IO (missing, unreadable, truncated), ATTN_ERROR_FORMAT
 * (bad magic, malformed header, Fortran order, unsupported dtype or rank), overflow, memory
 * (memory_limit_bytes > 0 caps the data size). The message names the path. */
ATTN_API attn_status attn_npy_read(const char *path, size_t memory_limit_bytes,
                                   attn_npy_array *array, attn_error *error);

/* Parses a .npy image already in memory (the reader's core; used by the fuzzer). */
ATTN_API attn_status attn_npy_parse(const void *bytes, size_t byte_count, size_t memory_limit_bytes,
                                    attn_npy_array *array, attn_error *error);

/* Writes a C-order .npy (format 1.0). The file is written to a temporary name and renamed,
 * so a failure never leaves a partial file at `path`. `data` is contiguous. */
ATTN_API attn_status attn_npy_write(const char *path, attn_dtype dtype, int rank,
                                    const int64_t *shape, const void *data, attn_error *error);

/* Frees an array's data and zeroes it. NULL is allowed. */
ATTN_API void attn_npy_free(attn_npy_array *array);

/* ======================================================================================
 * Section: safetensors files
 * ====================================================================================== */

/*
 * safetensors (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}   (optional metadata, strings only)
 * padded with spaces, then the data buffer; offsets are relative to the buffer's start.
 * The reader is strict: every tensor's [begin, end) lies in the buffer, end - begin equals
 * numel × dtype size, tensors neither overlap nor leave holes (the buffer is covered exactly),
 * names are unique, JSON is well formed (no unknown fields, no trailing garbage other than
 * spaces), ranks are 0..4. Dtypes read: F32, F16, BF16, F64, I32, I64, BOOL; others are
 * ATTN_ERROR_FORMAT naming the tensor and the dtype.
 */
#define ATTN_SAFETENSORS_NAME_CAPACITY 256 /* longest name + 1; longer names: FORMAT error */

/* One tensor: a parsed file's entry, or one to write. */
typedef struct attn_safetensors_tensor {
    char name[ATTN_SAFETENSORS_NAME_CAPACITY]; /* NUL-terminated UTF-8 */
    attn_dtype dtype;
    int rank;                     /* 0..4 (0: a scalar of one element) */
    int64_t shape[ATTN_MAX_RANK]; /* each >= 0 */
    const void *data;             /* little-endian elements, C order; not necessarily aligned */
    size_t byte_count;            /* numel × dtype size (ignored by the writer) */
} attn_safetensors_tensor;

/* A metadata entry ("__metadata__"): NUL-terminated strings. */
typedef struct attn_safetensors_metadata {
    char key[ATTN_SAFETENSORS_NAME_CAPACITY];
    char value[ATTN_SAFETENSORS_NAME_CAPACITY]; /* longer values: FORMAT error */
} attn_safetensors_metadata;

/*
 * A parsed file. `tensors` and `metadata` are allocated by the parser; the tensors' `data`
 * point into `bytes`, which attn_safetensors_read owns (copy of the file) and
 * attn_safetensors_parse borrows (the caller's buffer must outlive the struct).
 * attn_safetensors_free releases what the struct owns.
 */
typedef struct attn_safetensors_file {
    int64_t tensor_count;
    attn_safetensors_tensor *tensors; /* in file order of their data offsets */
    int64_t metadata_count;
    attn_safetensors_metadata *metadata;
    const void *bytes;  /* the whole file image */
    size_t byte_count;
    void *owned_bytes;  /* == bytes when the struct owns the image, else NULL */
} attn_safetensors_file;

/* Parses a file image in memory (the reader's core; the fuzzer's entry point). Errors:
 * ATTN_ERROR_FORMAT (message names the byte offset or the tensor), overflow, memory
 * (memory_limit_bytes > 0 caps the image size). On error `file` is left empty. */
ATTN_API attn_status attn_safetensors_parse(const void *bytes, size_t byte_count,
                                            size_t memory_limit_bytes, attn_safetensors_file *file,
                                            attn_error *error);

/* Reads and parses `path`; ATTN_ERROR_IO when it cannot be read. Messages name the path. */
ATTN_API attn_status attn_safetensors_read(const char *path, size_t memory_limit_bytes,
                                           attn_safetensors_file *file, attn_error *error);

/* Frees what `file` owns and zeroes it. NULL is allowed. */
ATTN_API void attn_safetensors_free(attn_safetensors_file *file);

/* The tensor called `name`, or NULL. */
ATTN_API const attn_safetensors_tensor *attn_safetensors_find(const attn_safetensors_file *file,
                                                              const char *name);

/*
 * Copies tensor `name` into out float[numel], converting F32, BF16 or F16 to float32 (exact).
 * The stored shape must equal shape[0..rank) exactly. Errors name the tensor: missing
 * (ATTN_ERROR_FORMAT), wrong rank or shape (ATTN_ERROR_SHAPE_MISMATCH, both shapes given),
 * a dtype that is not a float type (ATTN_ERROR_FORMAT).
 */
ATTN_API attn_status attn_safetensors_get_f32(const attn_safetensors_file *file, const char *name,
                                              int rank, const int64_t *shape, float *out,
                                              attn_error *error);

/*
 * Writes `tensor_count` tensors (their data contiguous, in the order given) and optional
 * metadata (NULL / 0 for none) to `path`, via a temporary file renamed into place, so a
 * failure never leaves a partial file at `path`. Names must be unique, non-empty and not
 * "__metadata__". Errors: ATTN_ERROR_IO, ATTN_ERROR_INVALID_ARGUMENT naming the tensor.
 */
ATTN_API attn_status attn_safetensors_write(const char *path,
                                            const attn_safetensors_tensor *tensors,
                                            int64_t tensor_count,
                                            const attn_safetensors_metadata *metadata,
                                            int64_t metadata_count, attn_error *error);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_IO_H */
