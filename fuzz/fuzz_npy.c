/*
 * fuzz_npy.c — libFuzzer target for the .npy parser (attn_npy_parse, the core of
 * attn_npy_read). Any input must give a status, never a crash, overread or leak; and when the
 * parse succeeds the result must be consistent: rank 0..4, byte_count = product(shape) * the
 * dtype size, and the data equal to the last byte_count bytes of the input (the parser copies
 * exactly the data that follows the header). A violation aborts (a finding).
 */
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
    attn_npy_free(&array);
    if (array.data != NULL) finding("attn_npy_free left data");
    return 0;
}
