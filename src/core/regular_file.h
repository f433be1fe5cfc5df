/*
 * regular_file.h — opening a file argument without blocking on it. open() of a FIFO with no
 * writer waits for one, and a device such as /dev/zero never ends: every reader of a path
 * (the .npy reader, the safetensors reader, index files) opens with O_NONBLOCK, looks at what
 * the path is (fstat), and only then reads, from a descriptor that blocks again. Internal to
 * libattn (the .npy reader here, the safetensors reader of libattn_io through its private
 * copy of these objects).
 */
#ifndef ATTN_CORE_REGULAR_FILE_H
#define ATTN_CORE_REGULAR_FILE_H

#include <sys/stat.h>

#include "attn.h"

/* Opens `path` read-only (O_CLOEXEC) without blocking, fills *info (fstat) and clears
 * O_NONBLOCK again. Returns the descriptor, or -1 with ATTN_ERROR_IO naming the path. */
int attn_io_open(const char *path, struct stat *info, attn_error *error);

/* What a file of `mode` is, for messages ("a FIFO", "a character device", "a folder", ...). */
const char *attn_io_file_kind(mode_t mode);

/* A descriptor from attn_io_open of a path that must be a regular file: ATTN_OK, or
 * ATTN_ERROR_IO naming the path and what it is instead (the descriptor is then closed). */
attn_status attn_io_require_regular(int fd, const struct stat *info, const char *path,
                                    attn_error *error);

#endif /* ATTN_CORE_REGULAR_FILE_H */
