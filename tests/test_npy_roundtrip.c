/*
 * test_npy_roundtrip.c — the .npy writer and reader agree with each other and with numpy:
 *  - every dtype x rank 0..4 (and empty arrays) survives write -> read bit for bit, and the
 *    written header is what numpy writes (64-byte aligned, ends in '\n');
 *  - files written by numpy itself (tests/fixtures/npy_cases/valid_*.npy, formats 1.0, 2.0,
 *    3.0) read back to the values make_fixtures.py put in them;
 *  - a failed write leaves no file behind, neither at the path nor as a temporary.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn_io.h"
#include "test_support.h"

#define CASES ATTN_FIXTURE_DIR "/npy_cases/"

static char scratch[256];

/* Element k of the fixtures: k * 0.5 - 1 (floats), k - 3 (integers), k % 2 (bool / uint8). */
static double fixture_value(attn_dtype dtype, int64_t k) {
    switch (dtype) {
    case ATTN_DTYPE_BOOL: return (double)(k % 2);
    case ATTN_DTYPE_I32:
    case ATTN_DTYPE_I64: return (double)(k - 3);
    default: return (double)k * 0.5 - 1.0;
    }
}

/* IEEE half -> double, for checking <f2 fixtures independently of the library. */
static double half_to_double(uint16_t h) {
    int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 0) return sign * ldexp(mantissa, -24);
    if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
    return sign * ldexp(1024 + mantissa, exponent - 25);
}

static double element(const attn_npy_array *a, int64_t k) {
    switch (a->dtype) {
    case ATTN_DTYPE_F32: return ((const float *)a->data)[k];
    case ATTN_DTYPE_F64: return ((const double *)a->data)[k];
    case ATTN_DTYPE_F16: return half_to_double(((const uint16_t *)a->data)[k]);
    case ATTN_DTYPE_BOOL: return ((const uint8_t *)a->data)[k];
    case ATTN_DTYPE_I32: return ((const int32_t *)a->data)[k];
    case ATTN_DTYPE_I64: return (double)((const int64_t *)a->data)[k];
    default: return NAN;
    }
}

typedef struct fixture_case {
    const char *file;
    attn_dtype dtype;
    int rank;
    int64_t shape[4];
} fixture_case;

static const fixture_case fixtures[] = {
    {"valid_f4_2x3.npy", ATTN_DTYPE_F32, 2, {2, 3}},
    {"valid_f8_2x3.npy", ATTN_DTYPE_F64, 2, {2, 3}},
    {"valid_f2_2x3.npy", ATTN_DTYPE_F16, 2, {2, 3}},
    {"valid_b1_2x3.npy", ATTN_DTYPE_BOOL, 2, {2, 3}},
    {"valid_u1_2x3.npy", ATTN_DTYPE_BOOL, 2, {2, 3}},
    {"valid_i4_2x3.npy", ATTN_DTYPE_I32, 2, {2, 3}},
    {"valid_i8_2x3.npy", ATTN_DTYPE_I64, 2, {2, 3}},
    {"valid_f4_scalar.npy", ATTN_DTYPE_F32, 0, {0}},
    {"valid_f4_5.npy", ATTN_DTYPE_F32, 1, {5}},
    {"valid_f4_2x3x4.npy", ATTN_DTYPE_F32, 3, {2, 3, 4}},
    {"valid_f4_2x1x3x2.npy", ATTN_DTYPE_F32, 4, {2, 1, 3, 2}},
    {"valid_f4_0.npy", ATTN_DTYPE_F32, 1, {0}},
    {"valid_f4_3x0.npy", ATTN_DTYPE_F32, 2, {3, 0}},
    {"valid_f4_2x3_format2.npy", ATTN_DTYPE_F32, 2, {2, 3}},
    {"valid_f4_2x3_format3.npy", ATTN_DTYPE_F32, 2, {2, 3}},
    {"valid_f4_2x3_reordered.npy", ATTN_DTYPE_F32, 2, {2, 3}},
};

static void test_numpy_fixtures(void) {
    for (size_t c = 0; c < sizeof fixtures / sizeof fixtures[0]; ++c) {
        const fixture_case *f = &fixtures[c];
        char path[512];
        snprintf(path, sizeof path, CASES "%s", f->file);
        attn_npy_array array;
        attn_error error;
        attn_status status = attn_npy_read(path, 0, &array, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s", f->file);
        if (status != ATTN_OK) continue;
        CHECK(array.dtype == f->dtype, "%s: dtype %d, expected %d", f->file, array.dtype, f->dtype);
        CHECK(array.rank == f->rank, "%s: rank %d, expected %d", f->file, array.rank, f->rank);
        int64_t count = 1;
        for (int d = 0; d < f->rank; ++d) {
            CHECK(array.shape[d] == f->shape[d], "%s: shape[%d] = %lld", f->file, d,
                  (long long)array.shape[d]);
            count *= f->shape[d];
        }
        CHECK(array.byte_count == (size_t)count * attn_dtype_size(f->dtype), "%s: byte_count %zu",
              f->file, array.byte_count);
        int mismatches = 0;
        for (int64_t k = 0; k < count; ++k)
            if (element(&array, k) != fixture_value(f->dtype, k)) ++mismatches;
        CHECK(mismatches == 0, "%s: %d elements differ from numpy's", f->file, mismatches);
        attn_npy_free(&array);
        CHECK(array.data == NULL, "attn_npy_free zeroes the array");
    }
}

/* Writes and reads back every dtype at every rank, with a few data patterns. */
static void test_round_trips(void) {
    static const attn_dtype dtypes[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F64, ATTN_DTYPE_F16,
                                        ATTN_DTYPE_BOOL, ATTN_DTYPE_I32, ATTN_DTYPE_I64};
    static const int64_t shapes[][4] = {{3, 5, 2, 7}, {1, 1, 1, 1}, {4, 0, 2, 3}};
    test_rng rng;
    test_rng_seed(&rng, 7);
    for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; ++t)
        for (int rank = 0; rank <= 4; ++rank)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
                attn_dtype dtype = dtypes[t];
                int64_t count = 1;
                for (int d = 0; d < rank; ++d) count *= shapes[s][d];
                size_t bytes = (size_t)count * attn_dtype_size(dtype);
                uint8_t *data = malloc(bytes + 1);
                for (size_t i = 0; i < bytes; ++i) data[i] = (uint8_t)test_rng_next(&rng);
                if (dtype == ATTN_DTYPE_BOOL)
                    for (size_t i = 0; i < bytes; ++i) data[i] &= 1;
                char path[512];
                snprintf(path, sizeof path, "%s/rt_%d_%d_%zu.npy", scratch, (int)dtype, rank, s);
                attn_error error;
                attn_status status = attn_npy_write(path, dtype, rank, shapes[s], data, &error);
                CHECK_STATUS(status, ATTN_OK, &error, "write dtype %d rank %d", (int)dtype, rank);
                /* numpy's layout: total header 64-aligned, ending in '\n'. */
                FILE *file = fopen(path, "rb");
                unsigned char preamble[10] = {0};
                if (file) {
                    CHECK(fread(preamble, 1, 10, file) == 10, "%s: preamble", path);
                    size_t header_length = preamble[8] | (size_t)preamble[9] << 8;
                    CHECK((10 + header_length) % 64 == 0, "%s: header length %zu", path,
                          header_length);
                    fseek(file, (long)(10 + header_length - 1), SEEK_SET);
                    CHECK(fgetc(file) == '\n', "%s: header ends in newline", path);
                    fclose(file);
                }
                attn_npy_array array;
                status = attn_npy_read(path, 0, &array, &error);
                CHECK_STATUS(status, ATTN_OK, &error, "read back dtype %d rank %d", (int)dtype,
                             rank);
                if (status == ATTN_OK) {
                    int same = array.dtype == dtype && array.rank == rank &&
                               array.byte_count == bytes &&
                               (bytes == 0 || memcmp(array.data, data, bytes) == 0);
                    for (int d = 0; d < rank; ++d) same = same && array.shape[d] == shapes[s][d];
                    CHECK(same, "round trip dtype %d rank %d shape case %zu",
                          (int)dtype, rank, s);
                    attn_npy_free(&array);
                }
                /* The same image through the in-memory parser. */
                file = fopen(path, "rb");
                if (file) {
                    unsigned char image[4096 + 512];
                    size_t n = fread(image, 1, sizeof image, file);
                    fclose(file);
                    if (n < sizeof image) {
                        status = attn_npy_parse(image, n, 0, &array, &error);
                        CHECK_STATUS(status, ATTN_OK, &error, "parse dtype %d rank %d", (int)dtype,
                                     rank);
                        if (status == ATTN_OK) {
                            CHECK(array.byte_count == bytes &&
                                      (bytes == 0 || memcmp(array.data, data, bytes) == 0),
                                  "parse matches the data");
                            attn_npy_free(&array);
                        }
                    }
                }
                unlink(path);
                free(data);
            }
}

static int count_entries(const char *directory) {
    DIR *dir = opendir(directory);
    int count = 0;
    if (!dir) return -1;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) ++count;
    closedir(dir);
    return count;
}

static void test_failed_writes_leave_nothing(void) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    attn_error error;
    char path[512];

    snprintf(path, sizeof path, "%s/no-such-dir/out.npy", scratch);
    attn_status status = attn_npy_write(path, ATTN_DTYPE_F32, 2, shape, data, &error);
    CHECK_STATUS(status, ATTN_ERROR_IO, &error, "write into a missing directory");
    CHECK(strstr(error.message, path) != NULL, "message names the path: %s", error.message);

    /* The target is a directory: the temporary is written, the rename fails, and it is removed. */
    char target[512];
    snprintf(target, sizeof target, "%s/dir-target", scratch);
    mkdir(target, 0755);
    int before = count_entries(scratch);
    status = attn_npy_write(target, ATTN_DTYPE_F32, 2, shape, data, &error);
    CHECK_STATUS(status, ATTN_ERROR_IO, &error, "rename onto a directory");
    CHECK(count_entries(scratch) == before, "no temporary left behind (%d entries, %d before)",
          count_entries(scratch), before);
    rmdir(target);

    /* An existing file survives a failed write (bad arguments fail before touching it). */
    snprintf(path, sizeof path, "%s/keep.npy", scratch);
    CHECK_STATUS(attn_npy_write(path, ATTN_DTYPE_F32, 2, shape, data, &error), ATTN_OK, &error,
                 "write keep.npy");
    int64_t bad_shape[2] = {2, -1};
    CHECK_STATUS(attn_npy_write(path, ATTN_DTYPE_F32, 2, bad_shape, data, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "negative dimension");
    CHECK_STATUS(attn_npy_write(path, ATTN_DTYPE_BF16, 2, shape, data, &error),
                 ATTN_ERROR_UNSUPPORTED, &error, "bfloat16 has no .npy dtype");
    CHECK_STATUS(attn_npy_write(path, ATTN_DTYPE_F32, 5, shape, data, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "rank 5");
    CHECK_STATUS(attn_npy_write(path, ATTN_DTYPE_F32, 2, shape, NULL, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "NULL data");
    int64_t huge[2] = {INT64_MAX / 2, 4};
    CHECK_STATUS(attn_npy_write(path, ATTN_DTYPE_F32, 2, huge, data, &error), ATTN_ERROR_OVERFLOW,
                 &error, "overflowing shape");
    attn_npy_array array;
    CHECK_STATUS(attn_npy_read(path, 0, &array, &error), ATTN_OK, &error, "keep.npy intact");
    if (array.data) CHECK(((float *)array.data)[5] == 6.0f, "keep.npy data intact");
    attn_npy_free(&array);
    attn_npy_free(NULL);
    unlink(path);
}

int main(void) {
    snprintf(scratch, sizeof scratch, "/tmp/attn-npy-XXXXXX");
    if (mkdtemp(scratch) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_numpy_fixtures();
    test_round_trips();
    test_failed_writes_leave_nothing();
    rmdir(scratch);
    return test_finish();
}
