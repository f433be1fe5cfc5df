/*
 * test_npy_malformed.c — every way a .npy file can be wrong gets the right status and a
 * message naming the file, and the in-memory parser never reads out of bounds:
 *  - the hand-made fixtures tests/fixtures/npy_cases/bad_*.npy (one defect each), a missing
 *    file, a directory, and a memory limit below the data size;
 *  - every truncation of valid images, and many random byte mutations, through
 *    attn_npy_parse on exactly-sized heap copies (valgrind/ASan catch any overread).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "attn_io.h"
#include "test_support.h"

#define CASES ATTN_FIXTURE_DIR "/npy_cases/"

typedef struct bad_case {
    const char *file;
    attn_status expected;
    const char *message_part; /* a word the message must contain, besides the path */
} bad_case;

static const bad_case bad_cases[] = {
    {"does_not_exist.npy", ATTN_ERROR_IO, "cannot open"},
    {"bad_empty.npy", ATTN_ERROR_IO, "truncated"},
    {"bad_magic.npy", ATTN_ERROR_FORMAT, "magic"},
    {"bad_version.npy", ATTN_ERROR_FORMAT, "version 4.0"},
    {"bad_truncated_header.npy", ATTN_ERROR_IO, "truncated header"},
    {"bad_truncated_data.npy", ATTN_ERROR_IO, "truncated data"},
    {"bad_trailing_bytes.npy", ATTN_ERROR_FORMAT, "after the data"},
    {"bad_dict_syntax.npy", ATTN_ERROR_FORMAT, "malformed header"},
    {"bad_dict_missing_shape.npy", ATTN_ERROR_FORMAT, "missing key 'shape'"},
    {"bad_dict_unknown_key.npy", ATTN_ERROR_FORMAT, "'extra'"},
    {"bad_dict_repeated_key.npy", ATTN_ERROR_FORMAT, "repeated key 'descr'"},
    {"bad_dict_negative_dim.npy", ATTN_ERROR_FORMAT, "shape"},
    {"bad_dict_not_a_dict.npy", ATTN_ERROR_FORMAT, "'{'"},
    {"bad_fortran.npy", ATTN_ERROR_FORMAT, "fortran_order = True"},
    {"bad_big_endian.npy", ATTN_ERROR_FORMAT, "big-endian"},
    {"bad_complex.npy", ATTN_ERROR_FORMAT, "'<c8'"},
    {"bad_rank5.npy", ATTN_ERROR_FORMAT, "rank 5"},
    {"bad_overflow_shape.npy", ATTN_ERROR_OVERFLOW, "overflow"},
    {"bad_overflow_bytes.npy", ATTN_ERROR_OVERFLOW, "overflow"},
    {"bad_huge_dimension.npy", ATTN_ERROR_OVERFLOW, "int64"},
    {".", ATTN_ERROR_IO, "regular file"},
};

static void test_bad_files(void) {
    for (size_t c = 0; c < sizeof bad_cases / sizeof bad_cases[0]; ++c) {
        const bad_case *b = &bad_cases[c];
        char path[512];
        snprintf(path, sizeof path, CASES "%s", b->file);
        attn_npy_array array;
        attn_error error;
        memset(&error, 0, sizeof error);
        attn_status status = attn_npy_read(path, 0, &array, &error);
        CHECK_STATUS(status, b->expected, &error, "%s", b->file);
        CHECK(strstr(error.message, path) != NULL, "%s: message names the path: %s", b->file,
              error.message);
        CHECK(strstr(error.message, b->message_part) != NULL, "%s: message says '%s': %s",
              b->file, b->message_part, error.message);
        CHECK(strchr(error.message, '\n') == NULL, "%s: one-line message", b->file);
        CHECK(array.data == NULL, "%s: no data returned on error", b->file);
        if (status == ATTN_OK) attn_npy_free(&array);
    }
}

static void test_memory_limit(void) {
    const char *path = CASES "valid_f4_2x3.npy"; /* 24 bytes of data */
    attn_npy_array array;
    attn_error error;
    attn_status status = attn_npy_read(path, 23, &array, &error);
    CHECK_STATUS(status, ATTN_ERROR_MEMORY_LIMIT, &error, "limit 23 < 24 bytes");
    CHECK(strstr(error.message, path) != NULL, "memory limit message names the path");
    CHECK(strstr(error.message, "24 bytes") != NULL, "message gives the size: %s", error.message);
    status = attn_npy_read(path, 24, &array, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "limit 24 = 24 bytes");
    attn_npy_free(&array);
    CHECK_STATUS(attn_npy_read(NULL, 0, &array, &error), ATTN_ERROR_NULL_ARGUMENT, &error,
                 "NULL path");
    CHECK_STATUS(attn_npy_read(path, 0, NULL, &error), ATTN_ERROR_NULL_ARGUMENT, &error,
                 "NULL array");
    CHECK_STATUS(attn_npy_parse(NULL, 10, 0, &array, &error), ATTN_ERROR_NULL_ARGUMENT, &error,
                 "NULL bytes");
}

/* Loads a whole file into an exactly-sized heap block. */
static unsigned char *load(const char *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) return NULL;
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)length + 1);
    *size = fread(bytes, 1, (size_t)length, file);
    fclose(file);
    return bytes;
}

/* Parses `image[0, size)` from an exactly-sized copy; returns the status. */
static attn_status parse_exact(const unsigned char *image, size_t size, attn_error *error) {
    unsigned char *copy = malloc(size > 0 ? size : 1);
    if (size > 0) memcpy(copy, image, size);
    attn_npy_array array;
    attn_status status = attn_npy_parse(copy, size, 0, &array, error);
    if (status == ATTN_OK) attn_npy_free(&array);
    free(copy);
    return status;
}

static void test_truncations_and_mutations(void) {
    static const char *sources[] = {"valid_f4_2x3.npy", "valid_f4_2x3_format2.npy",
                                    "valid_i8_2x3.npy", "valid_f4_scalar.npy"};
    test_rng rng;
    test_rng_seed(&rng, 11);
    for (size_t s = 0; s < sizeof sources / sizeof sources[0]; ++s) {
        char path[512];
        snprintf(path, sizeof path, CASES "%s", sources[s]);
        size_t size = 0;
        unsigned char *image = load(path, &size);
        CHECK(image != NULL && size > 64, "%s loaded", sources[s]);
        if (!image) continue;
        attn_error error;
        CHECK_STATUS(parse_exact(image, size, &error), ATTN_OK, &error, "%s whole", sources[s]);
        /* Every proper prefix is an error: truncated (IO), or FORMAT when the cut leaves a
         * header that no longer ends properly. Never OK, never a crash. */
        int prefix_failures = 0;
        for (size_t cut = 0; cut < size; ++cut) {
            attn_status status = parse_exact(image, cut, &error);
            if (status != ATTN_ERROR_IO && status != ATTN_ERROR_FORMAT) ++prefix_failures;
        }
        CHECK(prefix_failures == 0, "%s: %d prefixes parsed wrongly", sources[s], prefix_failures);
        /* Random byte mutations in the preamble and header: any status, no overread. A
         * mutation that parses must still describe a size that fits the image. */
        int bad_success = 0;
        for (int trial = 0; trial < 3000; ++trial) {
            unsigned char *mutated = malloc(size);
            memcpy(mutated, image, size);
            int flips = 1 + (int)test_rng_range(&rng, 0, 3);
            for (int f = 0; f < flips; ++f) {
                size_t where = (size_t)test_rng_range(&rng, 0, 79 < size - 1 ? 79 : (int64_t)size - 1);
                mutated[where] = (uint8_t)test_rng_next(&rng);
            }
            attn_npy_array array;
            attn_status status = attn_npy_parse(mutated, size, 0, &array, &error);
            if (status == ATTN_OK) {
                if (array.byte_count > size) ++bad_success;
                attn_npy_free(&array);
            }
            free(mutated);
        }
        CHECK(bad_success == 0, "%s: mutated headers claiming more data than present", sources[s]);
        free(image);
    }
}

int main(void) {
    test_bad_files();
    test_memory_limit();
    test_truncations_and_mutations();
    return test_finish();
}
