/*
 * special_paths.h — what the file-reader fuzz targets (fuzz_npy, fuzz_safetensors) share to
 * give their input to the readers as files: a scratch folder per process (removed at exit),
 * the input written to a regular file there, the same path turned into a FIFO with no writer,
 * a folder or a link to /dev/zero, and a FIFO fed with the input by a writer thread that
 * closes it after the last byte. Header-only (static functions), so the targets need no
 * extra source in cmake/fuzz.cmake.
 */
#ifndef ATTN_FUZZ_SPECIAL_PATHS_H
#define ATTN_FUZZ_SPECIAL_PATHS_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef enum special_kind { SPECIAL_FIFO, SPECIAL_FOLDER, SPECIAL_DEVICE, SPECIAL_KINDS } special_kind;

static const char *const special_kind_names[SPECIAL_KINDS] = {
    "a FIFO with no writer", "a folder", "a link to /dev/zero"};

static char special_folder[64];
static char special_path[96]; /* <folder>/input: the one path every form takes */

static inline void special_clear(void) {
    if (unlink(special_path) != 0) rmdir(special_path); /* a folder, or nothing there */
}

static inline void special_remove_folder(void) {
    special_clear();
    rmdir(special_folder);
}

/* The scratch folder, made on first use (0 when it cannot be made: the checks are skipped).
 * A reader that stops early closes the FIFO under its writer: SIGPIPE is ignored, so the
 * writer's write fails with EPIPE instead. */
static inline int special_setup(void) {
    if (special_folder[0]) return 1;
    snprintf(special_folder, sizeof special_folder, "/tmp/attn_fuzz_files_XXXXXX");
    if (mkdtemp(special_folder) == NULL) {
        special_folder[0] = '\0';
        return 0;
    }
    snprintf(special_path, sizeof special_path, "%s/input", special_folder);
    signal(SIGPIPE, SIG_IGN);
    atexit(special_remove_folder);
    return 1;
}

static inline double special_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The input as a regular file at special_path; 0 on failure. */
static inline int special_write_regular(const uint8_t *data, size_t size) {
    special_clear();
    FILE *file = fopen(special_path, "wb");
    if (file == NULL) return 0;
    const int ok = fwrite(data, 1, size, file) == size;
    return fclose(file) == 0 && ok;
}

/* special_path as `kind`; 0 on failure. */
static inline int special_make(special_kind kind) {
    special_clear();
    switch (kind) {
    case SPECIAL_FIFO: return mkfifo(special_path, 0600) == 0;
    case SPECIAL_FOLDER: return mkdir(special_path, 0700) == 0;
    case SPECIAL_DEVICE: return symlink("/dev/zero", special_path) == 0;
    default: return 0;
    }
}

/* A writer of special_path (a FIFO): waits (at most 2 s) for the reader to open it, writes
 * the bytes and closes it. */
typedef struct special_feed {
    const uint8_t *data;
    size_t size;
    pthread_t thread;
} special_feed;

static inline void *special_feed_run(void *context) {
    special_feed *feed = context;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 2000; ++tries) {
        fd = open(special_path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && errno != ENXIO) return NULL; /* ENXIO: no reader yet */
        if (fd < 0) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (fd < 0) return NULL;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    for (size_t done = 0; done < feed->size;) {
        const ssize_t wrote = write(fd, feed->data + done, feed->size - done);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) break; /* EPIPE: the reader has what it wanted */
        done += (size_t)wrote;
    }
    close(fd);
    return NULL;
}

/* special_path as a FIFO with a writer thread sending the bytes; 0 on failure. Join with
 * special_feed_end after the read. */
static inline int special_feed_begin(special_feed *feed, const uint8_t *data, size_t size) {
    feed->data = data, feed->size = size;
    if (!special_make(SPECIAL_FIFO)) return 0;
    return pthread_create(&feed->thread, NULL, special_feed_run, feed) == 0;
}

static inline void special_feed_end(special_feed *feed) { pthread_join(feed->thread, NULL); }

#endif /* ATTN_FUZZ_SPECIAL_PATHS_H */
