/*
 * test_io_special_files.c — the readers never hang and never read without bound on paths that
 * are not regular files: a FIFO with no writer is refused (.npy at once; safetensors after
 * its bounded wait for a writer), /dev/zero is refused as a character device by both
 * readers, a pipe fed by an endless stream of zeros is refused after its 8-byte header
 * length, and a safetensors file sent through a pipe whose writer never closes it is read as
 * far as its header says (the same tensor as from the file). Every case runs under an alarm:
 * a hang fails the test instead of holding it.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attn_io.h"
#include "test_support.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A safetensors image: one F32 tensor "x" of 4 values 1 2 3 4 (header padded with spaces to
 * a multiple of 8 bytes, so the data are aligned). */
static size_t image(unsigned char *out) {
    char header[128] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    size_t n = strlen(header);
    while (n % 8 != 0) header[n++] = ' ';
    for (int i = 0; i < 8; ++i) out[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(out + 8, header, n);
    const float values[4] = {1, 2, 3, 4};
    memcpy(out + 8 + n, values, sizeof values);
    return 8 + n + sizeof values;
}

static void test_fifo_without_writer(const char *folder) {
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/no_writer.npy", folder);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    attn_error error = {0};
    attn_npy_array array;
    alarm(30);
    double start = now();
    attn_status status = attn_npy_read(fifo, 0, &array, &error);
    CHECK(status == ATTN_ERROR_IO && strstr(error.message, "a FIFO, not a regular file") != NULL,
          ".npy FIFO with no writer: IO error naming it a FIFO (%d: %s)", (int)status,
          error.message);
    CHECK(now() - start < 5.0, ".npy FIFO with no writer: refused at once (%.1f s)", now() - start);

    attn_safetensors_file file;
    start = now();
    status = attn_safetensors_read(fifo, 0, &file, &error);
    CHECK(status == ATTN_ERROR_IO && strstr(error.message, "FIFO") != NULL,
          "safetensors FIFO with no writer: IO error naming it a FIFO (%d: %s)", (int)status,
          error.message);
    CHECK(now() - start < 25.0, "safetensors FIFO with no writer: refused after a bounded wait "
                                "(%.1f s)", now() - start);
    alarm(0);
    remove(fifo);
}

static void test_dev_zero(void) {
    if (access("/dev/zero", R_OK) != 0) return;
    attn_error error = {0};
    attn_npy_array array;
    alarm(20);
    attn_status status = attn_npy_read("/dev/zero", 0, &array, &error);
    CHECK(status == ATTN_ERROR_IO && strstr(error.message, "a character device") != NULL,
          ".npy /dev/zero: IO error naming a character device (%d: %s)", (int)status,
          error.message);
    attn_safetensors_file file;
    status = attn_safetensors_read("/dev/zero", 0, &file, &error);
    CHECK(status == ATTN_ERROR_IO && strstr(error.message, "a character device") != NULL,
          "safetensors /dev/zero: IO error naming a character device (%d: %s)", (int)status,
          error.message);
    status = attn_safetensors_open("/dev/zero", 0, &file, &error);
    CHECK(status != ATTN_OK && strstr(error.message, "/dev/zero") != NULL,
          "safetensors_open /dev/zero: refused naming the path (%d: %s)", (int)status,
          error.message);
    alarm(0);
}

/* A child writes `bytes` into the FIFO, then (endless) zeros forever or (hold) keeps the
 * pipe open without writing until it is killed. */
static pid_t writer(const char *fifo, const unsigned char *bytes, size_t count, int endless) {
    const pid_t child = fork();
    if (child != 0) return child;
    /* Never outlive the test (a minute at most) nor hold its output open. */
    alarm(60);
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    FILE *out = fopen(fifo, "wb");
    if (out == NULL) _exit(1);
    if (count > 0) fwrite(bytes, 1, count, out);
    fflush(out);
    static unsigned char zeros[4096];
    for (;;) {
        if (endless) {
            if (fwrite(zeros, 1, sizeof zeros, out) != sizeof zeros) _exit(0);
        } else {
            pause();
        }
    }
}

static void test_pipes(const char *folder) {
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/pipe.safetensors", folder);
    attn_error error = {0};
    attn_safetensors_file file;

    /* An endless stream of zeros: header length 0, refused without reading on. */
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    pid_t child = writer(fifo, NULL, 0, 1);
    alarm(20);
    attn_status status = attn_safetensors_read(fifo, 0, &file, &error);
    alarm(0);
    CHECK(status == ATTN_ERROR_FORMAT && strstr(error.message, "too short") != NULL,
          "endless zeros through a pipe: FORMAT error after the header length (%d: %s)",
          (int)status, error.message);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    remove(fifo);

    /* A whole file whose writer keeps the pipe open: read as far as the header says. */
    unsigned char bytes[256];
    const size_t count = image(bytes);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    child = writer(fifo, bytes, count, 0);
    alarm(20);
    status = attn_safetensors_read(fifo, 0, &file, &error);
    alarm(0);
    CHECK_STATUS(status, ATTN_OK, &error, "a file through a pipe left open by its writer");
    if (status == ATTN_OK) {
        const attn_safetensors_tensor *x = attn_safetensors_find(&file, "x");
        CHECK(x != NULL && x->byte_count == 16 && ((const float *)x->data)[3] == 4.0f,
              "the pipe's tensor x = 1 2 3 4");
        attn_safetensors_free(&file);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    remove(fifo);

    /* The same bytes with a memory limit below the size the header declares: refused before
     * the data are read. */
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    child = writer(fifo, bytes, count, 0);
    alarm(20);
    status = attn_safetensors_read(fifo, count - 1, &file, &error);
    alarm(0);
    CHECK(status == ATTN_ERROR_MEMORY_LIMIT, "a pipe's declared size over the limit: "
                                             "MEMORY_LIMIT (%d: %s)", (int)status, error.message);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    remove(fifo);
}

int main(void) {
    char folder[] = "/tmp/attn_special_XXXXXX";
    if (mkdtemp(folder) == NULL) {
        CHECK(0, "mkdtemp");
        return test_finish();
    }
    signal(SIGPIPE, SIG_IGN);
    test_dev_zero();
    test_pipes(folder);
    test_fifo_without_writer(folder);
    rmdir(folder);
    return test_finish();
}
