/*
 * fuzz_npy.c — libFuzzer target for the .npy parser (attn_npy_parse, the core of
 * attn_npy_read). Any input must give a status, never a crash, overread or leak; and when the
 * parse succeeds the result must be consistent: rank 0..4, byte_count = product(shape) * the
 * dtype size, and the data equal to the last byte_count bytes of the input (the parser copies
 * exactly the data that follows the header). The same bytes written to a file must read
 * (attn_npy_read) as they parse: both fail, or both give the same array. Once per process, that path as a FIFO with no writer,
 * a folder and a link to /dev/zero must each be refused with ATTN_ERROR_IO naming the path,
 * within a second and with nothing returned (fuzz/special_paths.h). A violation aborts (a
 * finding).
 */
#include "special_paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_io.h"

/* Abort with a message: libFuzzer records the input as a crash. */
static void finding(const char *what) {
    fprintf(stderr, "fuzz_npy: %s\n", what);
    abort();
}

/* Every special form of the path: refused at once, with ATTN_ERROR_IO naming the path. */
static void check_special_paths(void) {
    for (int kind = 0; kind < SPECIAL_KINDS; ++kind) {
        if (!special_make((special_kind)kind)) continue;
        attn_npy_array array;
        attn_error error;
        const double start = special_now();
        const attn_status status = attn_npy_read(special_path, 0, &array, &error);
        if (special_now() - start > 1.0) finding("a special file held the reader");
        if (status != ATTN_ERROR_IO || array.data != NULL ||
            strstr(error.message, special_path) == NULL) {
            fprintf(stderr, "fuzz_npy: %s: %s %s\n", special_kind_names[kind],
                    attn_status_name(status), error.message);
            finding("a special file was not refused with ATTN_ERROR_IO naming it");
        }
    }
    special_clear();
}

/* The input as a file: attn_npy_read gives what attn_npy_parse gave (`parsed`). */
static void check_file_read(const uint8_t *data, size_t size, attn_status status,
                            const attn_npy_array *parsed) {
    static int special_checked;
    if (!special_setup()) return;
    if (!special_checked) {
        special_checked = 1;
        check_special_paths();
    }
    if (!special_write_regular(data, size)) return;
    attn_npy_array array;
    attn_error error;
    const attn_status read = attn_npy_read(special_path, (size_t)64 << 20, &array, &error);
    if ((read == ATTN_OK) != (status == ATTN_OK)) { /* the codes may differ: a short file is IO */
        fprintf(stderr, "fuzz_npy: parse %s, read %s (%s)\n", attn_status_name(status),
                attn_status_name(read), error.message);
        finding("the file reads otherwise than the bytes parse");
    }
    if (read != ATTN_OK) return;
    if (array.dtype != parsed->dtype || array.rank != parsed->rank ||
        memcmp(array.shape, parsed->shape, sizeof array.shape) != 0 ||
        array.byte_count != parsed->byte_count ||
        (array.byte_count > 0 && memcmp(array.data, parsed->data, array.byte_count) != 0))
        finding("the file's array differs from the parsed one");
    attn_npy_free(&array);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_npy_array array;
    attn_error error;
    /* A limit keeps a header that claims gigabytes from being allocated (the parser checks the
     * claim against the bytes present, but the fuzzer must not depend on that order). */
    attn_status status = attn_npy_parse(data, size, (size_t)64 << 20, &array, &error);
    if (status != ATTN_OK) {
        if (array.data != NULL) finding("data returned on error");
        if (memchr(error.message, '\0', sizeof error.message) == NULL)
            finding("error message not terminated");
        check_file_read(data, size, status, &array);
        return 0;
    }
    if (array.rank < 0 || array.rank > ATTN_MAX_RANK) finding("rank out of range");
    size_t elements = 1;
    for (int d = 0; d < array.rank; ++d) {
        if (array.shape[d] < 0) finding("negative dimension");
        elements *= (size_t)array.shape[d];
    }
    size_t element_size = attn_dtype_size(array.dtype);
    if (element_size == 0) finding("unknown dtype returned");
    if (elements * element_size != array.byte_count) finding("byte_count != numel * dtype size");
    if (array.byte_count > size) finding("more data than input");
    if (array.data == NULL) finding("NULL data on success");
    if (array.byte_count > 0 &&
        memcmp(array.data, data + size - array.byte_count, array.byte_count) != 0)
        finding("data differs from the input's tail");
    check_file_read(data, size, status, &array);
    attn_npy_free(&array);
    if (array.data != NULL) finding("attn_npy_free left data");
    return 0;
}
