/*
 * regular_file.c — opening a file argument without blocking on it (regular_file.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "core/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

int attn_io_open(const char *path, struct stat *info, attn_error *error) {
    int fd;
    do fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        attn_fail(error, ATTN_ERROR_IO, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    int flags;
    if (fstat(fd, info) != 0 || (flags = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        const int code = errno;
        close(fd);
        attn_fail(error, ATTN_ERROR_IO, "%s: cannot stat (%s)", path, strerror(code));
        return -1;
    }
    return fd;
}

const char *attn_io_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

attn_status attn_io_require_regular(int fd, const struct stat *info, const char *path,
                                    attn_error *error) {
    if (S_ISREG(info->st_mode)) return ATTN_OK;
    close(fd);
    return attn_fail(error, ATTN_ERROR_IO, "%s: %s, not a regular file", path,
                     attn_io_file_kind(info->st_mode));
}
