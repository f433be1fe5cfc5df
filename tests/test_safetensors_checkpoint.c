/*
 * test_safetensors_checkpoint.c — safetensors files as real checkpoints come: a file written
 * by the `safetensors` package with 10 kB of metadata (quotes, backslashes, newlines, CJK,
 * emoji) and every F32/BF16/F16 conversion compared bitwise with PyTorch's
 * (tests/fixtures/make_safetensors_fixtures.py); metadata of any length and escaped strings
 * through the writer and a hand-written header; tensors of dtypes attn has no type for
 * (F8_E4M3, U8, I16, U64: listed, refused by conversions and views); zero-copy views (the pointer inside the
 * read-only mapping) and copies where alignment or dtype forbid a view; a file read through a
 * pipe (no mapping); sharded checkpoints (2 shards + model.safetensors.index.json, opened by
 * folder and by index) and a table of broken indexes, each a clear error.
 */
#include "test_support.h"
#include "attn_io.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the file written by the safetensors package ---------------------------------------- */

/* The fixture's "long" metadata value: LONG_PATTERN repeated to 10240 bytes, a cut UTF-8
 * character at the end dropped (as the script does). */
static size_t long_value(char *out) {
    static const char pattern[] = "ab\"c\\d\ne\tf \xc3\xa9 \xe6\xb3\xa8\xe6\x84\x8f\xe5\x8a\x9b "
                                  "\xf0\x9f\x98\x80 / ";
    size_t p = sizeof pattern - 1, n = 10240;
    for (size_t i = 0; i < n; ++i) out[i] = pattern[i % p];
    size_t start = n; /* the last character's first byte */
    while (start > 0 && ((unsigned char)out[start - 1] & 0xC0) == 0x80) --start;
    if (start > 0) {
        unsigned char lead = (unsigned char)out[start - 1];
        size_t need = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
        if (n - (start - 1) < need) n = start - 1;
    }
    out[n] = '\0';
    return n;
}

static int same_bits_or_both_nan(attn_dtype dtype, const void *a, const void *b, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        if (dtype == ATTN_DTYPE_F32) {
            float x = ((const float *)a)[i], y = ((const float *)b)[i];
            if (isnan(x) && isnan(y)) continue;
            if (memcmp(&x, &y, 4) != 0) return 0;
        } else {
            uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
            int exponent_bits = dtype == ATTN_DTYPE_BF16 ? 0x7F80 : 0x7C00,
                mantissa_bits = dtype == ATTN_DTYPE_BF16 ? 0x007F : 0x03FF;
            int x_nan = (x & exponent_bits) == exponent_bits && (x & mantissa_bits);
            int y_nan = (y & exponent_bits) == exponent_bits && (y & mantissa_bits);
            if (x_nan && y_nan) continue;
            if (x != y) return 0;
        }
    }
    return 1;
}

static void test_package_fixture(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/safetensors_package.safetensors", ATTN_FIXTURE_DIR);
    attn_safetensors_file file;
    attn_error error;
    CHECK_STATUS(attn_safetensors_read(path, 0, &file, &error), ATTN_OK, &error,
                 "read the safetensors package's file");
    if (file.tensor_count == 0) return;
    CHECK(file.shard_count == 1 && file.shards[0].mapped == 1 && file.bytes == file.shards[0].bytes,
          "one shard, mapped");
    static char expected[10300];
    size_t expected_length = long_value(expected);
    const char *value = attn_safetensors_metadata_value(&file, "long");
    CHECK(value != NULL && strlen(value) == expected_length && strcmp(value, expected) == 0,
          "10 kB metadata value read exactly (%zu bytes)", expected_length);
    CHECK(expected_length > 10200, "the value is long (%zu bytes)", expected_length);
    const char *format = attn_safetensors_metadata_value(&file, "format");
    CHECK(format != NULL && strcmp(format, "pt") == 0, "format = pt");

    /* Each conversion against PyTorch's: source tensor, target dtype, PyTorch's result. */
    static const struct {
        const char *source;
        attn_dtype dtype;
        const char *expected;
    } conversions[] = {
        {"x.f32", ATTN_DTYPE_F32, "x.f32"},       {"x.f32", ATTN_DTYPE_BF16, "x.bf16"},
        {"x.f32", ATTN_DTYPE_F16, "x.f16"},       {"x.bf16", ATTN_DTYPE_F32, "x.bf16.f32"},
        {"x.f16", ATTN_DTYPE_F32, "x.f16.f32"},   {"x.bf16", ATTN_DTYPE_F16, "x.bf16.f16"},
        {"x.f16", ATTN_DTYPE_BF16, "x.f16.bf16"}, {"x.bf16", ATTN_DTYPE_BF16, "x.bf16"},
        {"x.f16", ATTN_DTYPE_F16, "x.f16"},
    };
    for (size_t c = 0; c < sizeof conversions / sizeof conversions[0]; ++c) {
        const attn_safetensors_tensor *source = attn_safetensors_find(&file, conversions[c].source),
                                      *wanted = attn_safetensors_find(&file, conversions[c].expected);
        if (source == NULL || wanted == NULL || wanted->dtype != conversions[c].dtype) {
            CHECK(0, "fixture tensors %s / %s", conversions[c].source, conversions[c].expected);
            continue;
        }
        int64_t count = source->shape[0];
        void *out = malloc((size_t)count * 4);
        CHECK_STATUS(attn_safetensors_get(&file, conversions[c].source, conversions[c].dtype, 1,
                                          source->shape, out, &error),
                     ATTN_OK, &error, "get %s as %s", conversions[c].source,
                     attn_safetensors_dtype_name(conversions[c].dtype));
        CHECK(same_bits_or_both_nan(conversions[c].dtype, out, wanted->data, (size_t)count),
              "%s -> %s equals PyTorch's %s bitwise (%lld values)", conversions[c].source,
              attn_safetensors_dtype_name(conversions[c].dtype), conversions[c].expected, (long long)count);
        /* The same through attn_safetensors_tensor_as (view or copy). */
        attn_tensor as;
        void *owned = NULL;
        CHECK_STATUS(attn_safetensors_tensor_as(&file, conversions[c].source, conversions[c].dtype,
                                                1, source->shape, &as, &owned, &error),
                     ATTN_OK, &error, "tensor_as %s", conversions[c].source);
        CHECK((owned == NULL) == (source->dtype == conversions[c].dtype),
              "%s as %s: a view exactly when the dtypes agree", conversions[c].source,
              attn_safetensors_dtype_name(conversions[c].dtype));
        CHECK(as.rank == 1 && as.shape[0] == count && as.dtype == conversions[c].dtype &&
                  same_bits_or_both_nan(conversions[c].dtype, as.data, wanted->data, (size_t)count),
              "tensor_as %s -> %s values", conversions[c].source,
              attn_safetensors_dtype_name(conversions[c].dtype));
        free(owned);
        free(out);
    }
    /* get_f32 of a 2-D tensor, exact values 0.5 * (i - 5). */
    float w[12];
    const int64_t shape34[2] = {3, 4};
    CHECK_STATUS(attn_safetensors_get_f32(&file, "w.f32", 2, shape34, w, &error), ATTN_OK, &error,
                 "w.f32");
    int exact = 1;
    for (int i = 0; i < 12; ++i) exact &= w[i] == 0.5f * (float)(i - 5);
    CHECK(exact, "w.f32 values");
    CHECK_STATUS(attn_safetensors_get(&file, "w.f32", ATTN_DTYPE_I32, 2, shape34, w, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "I32 is not a target dtype");
    attn_safetensors_free(&file);
}

/* ---- metadata of any length, escaped strings ---------------------------------------------- */

static void test_metadata(void) {
    enum { LONG = 20000 };
    char *long_key = malloc(1001), *long_text = malloc(LONG + 1);
    for (int i = 0; i < 1000; ++i) long_key[i] = (char)('a' + i % 26);
    long_key[1000] = '\0';
    for (int i = 0; i < LONG; ++i) long_text[i] = "x\"\\\n\t/\x01z"[i % 8];
    long_text[LONG] = '\0';
    float one = 1.0f;
    attn_safetensors_tensor t = {.name = "t", .dtype = ATTN_DTYPE_F32, .rank = 1, .shape = {1},
                                 .data = &one};
    attn_safetensors_metadata metadata[3] = {
        {long_key, "short"}, {"long", long_text}, {"\xe6\xb3\xa8\xe6\x84\x8f", ""}};
    char path[] = "/tmp/attn_test_metadata_XXXXXX";
    close(mkstemp(path));
    attn_error error;
    CHECK_STATUS(attn_safetensors_write(path, &t, 1, metadata, 3, &error), ATTN_OK, &error,
                 "write 20 kB of metadata");
    attn_safetensors_file file;
    CHECK_STATUS(attn_safetensors_read(path, 0, &file, &error), ATTN_OK, &error, "read it back");
    const char *v = attn_safetensors_metadata_value(&file, "long");
    CHECK(file.metadata_count == 3 && v != NULL && strcmp(v, long_text) == 0,
          "20 000-byte value with escapes and a control character round trips");
    v = attn_safetensors_metadata_value(&file, long_key);
    CHECK(v != NULL && strcmp(v, "short") == 0, "1000-byte key round trips");
    v = attn_safetensors_metadata_value(&file, "\xe6\xb3\xa8\xe6\x84\x8f");
    CHECK(v != NULL && v[0] == '\0', "UTF-8 key with an empty value");
    attn_safetensors_free(&file);
    remove(path);
    free(long_key);
    free(long_text);

    /* Escapes as other writers produce them, decoded to UTF-8. */
    const char *json = "{\"__metadata__\":{\"k\\u00e9y\":\"a\\nb\\\"c\\td\\/e\\\\f\\u6ce8"
                       "\\ud83d\\ude00\"},\"n\\u0041me\":{\"dtype\":\"F32\",\"shape\":[],"
                       "\"data_offsets\":[0,4]}}  ";
    size_t header = strlen(json), length = 8 + header + 4;
    unsigned char *image = calloc(1, length);
    for (int i = 0; i < 8; ++i) image[i] = (unsigned char)((uint64_t)header >> (8 * i));
    memcpy(image + 8, json, header);
    CHECK_STATUS(attn_safetensors_parse(image, length, 0, &file, &error), ATTN_OK, &error,
                 "escaped header");
    v = attn_safetensors_metadata_value(&file, "k\xc3\xa9y");
    CHECK(v != NULL && strcmp(v, "a\nb\"c\td/e\\f\xe6\xb3\xa8\xf0\x9f\x98\x80") == 0,
          "escapes decoded (\\n \\\" \\t \\/ \\\\ \\u6ce8, a surrogate pair)");
    CHECK(attn_safetensors_find(&file, "nAme") != NULL && file.shards[0].mapped == 0 &&
              file.tensors[0].rank == 0 && file.tensors[0].byte_count == 4,
          "escaped name, a scalar, parsed image not mapped");
    attn_safetensors_free(&file);
    free(image);
}

/* ---- dtypes attn has no type for ------------------------------------------------------------ */

static void test_other_dtypes(void) {
    const char *json = "{\"fp8\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[0,3]},"
                       "\"u8\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]},"
                       "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[4,8]},"
                       "\"u64\":{\"dtype\":\"U64\",\"shape\":[1,1],\"data_offsets\":[8,16]}}";
    size_t header = strlen(json), length = 8 + header + 16;
    unsigned char *image = calloc(1, length);
    for (int i = 0; i < 8; ++i) image[i] = (unsigned char)((uint64_t)header >> (8 * i));
    memcpy(image + 8, json, header);
    attn_safetensors_file file;
    attn_error error;
    CHECK_STATUS(attn_safetensors_parse(image, length, 0, &file, &error), ATTN_OK, &error,
                 "F8_E4M3, U8, I16, U64 tensors parse");
    static const struct { const char *name, *stored; size_t bytes; } expected[4] = {
        {"fp8", "F8_E4M3", 3}, {"u8", "U8", 1}, {"i16", "I16", 4}, {"u64", "U64", 8}};
    for (int i = 0; i < 4 && file.tensor_count == 4; ++i) {
        const attn_safetensors_tensor *t = attn_safetensors_find(&file, expected[i].name);
        CHECK(t && t->dtype == ATTN_SAFETENSORS_DTYPE_OTHER &&
                  strcmp(t->stored_dtype, expected[i].stored) == 0 &&
                  t->byte_count == expected[i].bytes,
              "%s: dtype OTHER, stored_dtype %s, %zu bytes", expected[i].name, expected[i].stored,
              expected[i].bytes);
    }
    float out[3];
    const int64_t shape3[1] = {3};
    CHECK_STATUS(attn_safetensors_get_f32(&file, "fp8", 1, shape3, out, &error),
                 ATTN_ERROR_FORMAT, &error, "F8_E4M3 is not converted");
    CHECK(strstr(error.message, "'fp8': dtype F8_E4M3 cannot be converted to F32") != NULL,
          "message: %s", error.message);
    attn_tensor view;
    void *owned = (void *)1;
    CHECK_STATUS(attn_safetensors_view(&file, "u8", &view, &error), ATTN_ERROR_UNSUPPORTED,
                 &error, "no view of U8");
    CHECK(strstr(error.message, "'u8': dtype U8 has no attn type") != NULL, "message: %s",
          error.message);
    CHECK_STATUS(attn_safetensors_tensor_as(&file, "fp8", ATTN_DTYPE_BF16, 1, shape3, &view,
                                            &owned, &error),
                 ATTN_ERROR_FORMAT, &error, "tensor_as refuses F8_E4M3");
    CHECK(owned == NULL, "nothing allocated");
    /* The writer writes only attn's dtypes. */
    char path[] = "/tmp/attn_test_other_XXXXXX";
    close(mkstemp(path));
    CHECK_STATUS(attn_safetensors_write(path, &file.tensors[0], 1, NULL, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "writing an OTHER dtype");
    remove(path);
    attn_safetensors_free(&file);
    free(image);
}

/* ---- zero-copy views -------------------------------------------------------------------- */

static void test_views(void) {
    uint8_t flags[3] = {1, 0, 1};
    float odd[2] = {2.5f, -7.0f}, even[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    uint16_t half[2] = {0x3C00, 0xC000}; /* f16 1, -2 */
    int64_t ids[1] = {42};
    /* In file order: even (offset 0), flags (16), odd (19: misaligned), half (27: misaligned),
     * ids (31: misaligned). */
    attn_safetensors_tensor t[5] = {
        {.name = "even", .dtype = ATTN_DTYPE_F32, .rank = 2, .shape = {2, 2}, .data = even},
        {.name = "flags", .dtype = ATTN_DTYPE_BOOL, .rank = 1, .shape = {3}, .data = flags},
        {.name = "odd", .dtype = ATTN_DTYPE_F32, .rank = 1, .shape = {2}, .data = odd},
        {.name = "half", .dtype = ATTN_DTYPE_F16, .rank = 1, .shape = {2}, .data = half},
        {.name = "ids", .dtype = ATTN_DTYPE_I64, .rank = 1, .shape = {1}, .data = ids},
    };
    char path[] = "/tmp/attn_test_views_XXXXXX";
    close(mkstemp(path));
    attn_error error;
    CHECK_STATUS(attn_safetensors_write(path, t, 5, NULL, 0, &error), ATTN_OK, &error, "write");
    attn_safetensors_file file;
    CHECK_STATUS(attn_safetensors_read(path, 0, &file, &error), ATTN_OK, &error, "read");
    if (file.tensor_count != 5) return;
    const unsigned char *begin = file.shards[0].bytes, *end = begin + file.shards[0].byte_count;
    CHECK(file.shards[0].mapped == 1 && ((uintptr_t)begin & 4095) == 0,
          "the file is mapped (page-aligned image)");
    attn_tensor view;
    CHECK_STATUS(attn_safetensors_view(&file, "even", &view, &error), ATTN_OK, &error, "view");
    const unsigned char *p = view.data;
    CHECK(p == attn_safetensors_find(&file, "even")->data && p >= begin && p + 16 <= end &&
              p == begin + file.shards[0].data_offset,
          "the view points into the mapping, at the data buffer's start");
    CHECK(view.rank == 2 && view.shape[0] == 2 && view.shape[1] == 2 && view.stride[0] == 2 &&
              view.stride[1] == 1 && view.dtype == ATTN_DTYPE_F32 && ((float *)view.data)[3] == 4.0f,
          "the view's shape, strides and values");
    CHECK_STATUS(attn_safetensors_view(&file, "flags", &view, &error), ATTN_OK, &error,
                 "a 1-byte dtype is always aligned");
    CHECK_STATUS(attn_safetensors_view(&file, "odd", &view, &error), ATTN_ERROR_UNSUPPORTED,
                 &error, "misaligned F32");
    CHECK(strstr(error.message, "'odd'") && strstr(error.message, "offset") &&
              strstr(error.message, "not aligned"),
          "message: %s", error.message);
    CHECK_STATUS(attn_safetensors_view(&file, "ids", &view, &error), ATTN_ERROR_UNSUPPORTED,
                 &error, "misaligned I64");
    CHECK_STATUS(attn_safetensors_view(&file, "nope", &view, &error), ATTN_ERROR_FORMAT, &error,
                 "missing");
    /* tensor_as: a view when it can, a copy when it must. */
    const int64_t shape22[2] = {2, 2}, shape2[1] = {2}, shape1[1] = {1};
    void *owned = (void *)1;
    CHECK_STATUS(attn_safetensors_tensor_as(&file, "even", ATTN_DTYPE_F32, 2, shape22, &view,
                                            &owned, &error),
                 ATTN_OK, &error, "even as F32");
    CHECK(owned == NULL && (const unsigned char *)view.data >= begin &&
              (const unsigned char *)view.data < end,
          "aligned, same dtype: zero-copy");
    CHECK_STATUS(attn_safetensors_tensor_as(&file, "odd", ATTN_DTYPE_F32, 1, shape2, &view, &owned,
                                            &error),
                 ATTN_OK, &error, "odd as F32");
    CHECK(owned != NULL && view.data == owned && ((float *)view.data)[0] == 2.5f &&
              ((float *)view.data)[1] == -7.0f,
          "misaligned: an aligned copy with the values");
    free(owned);
    CHECK_STATUS(attn_safetensors_tensor_as(&file, "half", ATTN_DTYPE_F32, 1, shape2, &view, &owned,
                                            &error),
                 ATTN_OK, &error, "half as F32");
    CHECK(owned != NULL && ((float *)view.data)[0] == 1.0f && ((float *)view.data)[1] == -2.0f,
          "F16 -> F32 copy");
    free(owned);
    CHECK_STATUS(attn_safetensors_tensor_as(&file, "ids", ATTN_DTYPE_F32, 1, shape1, &view, &owned,
                                            &error),
                 ATTN_ERROR_FORMAT, &error, "I64 cannot become F32");
    CHECK(owned == NULL && strstr(error.message, "'ids': dtype I64 cannot be converted to F32"),
          "message: %s", error.message);
    CHECK_STATUS(attn_safetensors_tensor_as(&file, "even", ATTN_DTYPE_F32, 1, shape2, &view,
                                            &owned, &error),
                 ATTN_ERROR_SHAPE_MISMATCH, &error, "wrong shape");
    attn_safetensors_free(&file);
    /* The memory limit caps the mapped size. */
    CHECK_STATUS(attn_safetensors_read(path, 64, &file, &error), ATTN_ERROR_MEMORY_LIMIT, &error,
                 "64-byte limit");
    /* A pipe cannot be mapped: the file is read instead. */
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/attn_test_fifo_%ld", (long)getpid());
    if (mkfifo(fifo, 0600) == 0) {
        pid_t child = fork();
        if (child == 0) {
            FILE *in = fopen(path, "rb"), *out = fopen(fifo, "wb");
            char buffer[4096];
            size_t n;
            while (in && out && (n = fread(buffer, 1, sizeof buffer, in)) > 0) fwrite(buffer, 1, n, out);
            if (out) fclose(out);
            if (in) fclose(in);
            _exit(0);
        }
        attn_status status = attn_safetensors_read(fifo, 0, &file, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "read through a pipe");
        if (status == ATTN_OK) {
            CHECK(file.shards[0].mapped == 0 && file.tensor_count == 5 &&
                      ((const float *)attn_safetensors_find(&file, "even")->data)[2] == 3.0f,
                  "pipe: read into memory, same tensors");
            attn_safetensors_free(&file);
        }
        waitpid(child, NULL, 0);
        remove(fifo);
    }
    remove(path);
}

/* ---- sharded checkpoints ---------------------------------------------------------------- */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

typedef struct index_case {
    const char *what;
    const char *json;
    attn_status status;
    const char *message_part;
} index_case;

static const index_case index_cases[] = {
    {"tensor in the wrong shard",
     "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD2 "\",\"c\":\"" SHARD2 "\"}}",
     ATTN_ERROR_FORMAT, "tensor 'b' in " SHARD2 ", but it is in " SHARD1},
    {"tensor missing from its shard",
     "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\",\"d\":\"" SHARD2 "\"}}",
     ATTN_ERROR_FORMAT, "tensor 'd' in " SHARD2 ", which does not hold it"},
    {"tensor not listed", "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}",
     ATTN_ERROR_FORMAT, "tensor 'b' of "},
    {"missing shard file", "{\"weight_map\":{\"a\":\"model-gone.safetensors\"}}", ATTN_ERROR_IO,
     "model-gone.safetensors: cannot open"},
    {"shard outside the folder", "{\"weight_map\":{\"a\":\"../" SHARD1 "\"}}", ATTN_ERROR_FORMAT,
     "weight_map['a'] is not a shard file name"},
    {"absolute shard path", "{\"weight_map\":{\"a\":\"/etc/passwd\"}}", ATTN_ERROR_FORMAT,
     "weight_map['a'] is not a shard file name"},
    {"shard name not a string", "{\"weight_map\":{\"a\":1}}", ATTN_ERROR_FORMAT,
     "weight_map['a'] is not"},
    {"no weight_map", "{\"metadata\":{}}", ATTN_ERROR_FORMAT, "\"weight_map\" object"},
    {"weight_map not an object", "{\"weight_map\":[]}", ATTN_ERROR_FORMAT, "\"weight_map\" object"},
    {"malformed JSON", "{\"weight_map\":{\"a\":}", ATTN_ERROR_FORMAT, "malformed JSON at byte 19"},
    {"trailing bytes", "{\"weight_map\":{}} x", ATTN_ERROR_FORMAT, "trailing bytes"},
    {"listed twice",
     "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"a\":\"" SHARD1 "\"}}",
     ATTN_ERROR_FORMAT, "lists 'a' twice"},
    {"metadata not an object", "{\"metadata\":1,\"weight_map\":{}}", ATTN_ERROR_FORMAT,
     "\"metadata\" is not an object"},
    {"a tensor in two shards",
     "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"dup.safetensors\"}}",
     ATTN_ERROR_FORMAT, "tensor 'a' in two shards"},
};

static void test_sharded(void) {
    char folder[] = "/tmp/attn_test_shards_XXXXXX";
    if (mkdtemp(folder) == NULL) {
        CHECK(0, "mkdtemp");
        return;
    }
    char path[256], index_path[256];
    float a[6] = {1, 2, 3, 4, 5, 6}, c[3] = {-1, -2, -3};
    uint16_t b[2] = {0x3F80, 0x4000}; /* bf16 1, 2 */
    attn_safetensors_tensor first[2] = {
        {.name = "a", .dtype = ATTN_DTYPE_F32, .rank = 2, .shape = {2, 3}, .data = a},
        {.name = "b", .dtype = ATTN_DTYPE_BF16, .rank = 1, .shape = {2}, .data = b}};
    attn_safetensors_tensor second[1] = {
        {.name = "c", .dtype = ATTN_DTYPE_F32, .rank = 1, .shape = {3}, .data = c}};
    attn_safetensors_tensor duplicate[2] = {second[0], first[0]};
    attn_safetensors_metadata format = {"format", "pt"};
    attn_error error;
    snprintf(path, sizeof path, "%s/" SHARD1, folder);
    CHECK_STATUS(attn_safetensors_write(path, first, 2, &format, 1, &error), ATTN_OK, &error, "s1");
    snprintf(path, sizeof path, "%s/" SHARD2, folder);
    CHECK_STATUS(attn_safetensors_write(path, second, 1, &format, 1, &error), ATTN_OK, &error, "s2");
    snprintf(path, sizeof path, "%s/dup.safetensors", folder);
    CHECK_STATUS(attn_safetensors_write(path, duplicate, 2, NULL, 0, &error), ATTN_OK, &error, "dup");
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", folder);
    write_text(index_path, "{\"metadata\": {\"total_size\": 44, \"note\": \"two shards\"},\n"
                           " \"weight_map\": {\"c\": \"" SHARD2 "\", \"a\": \"" SHARD1 "\",\n"
                           "                \"b\": \"" SHARD1 "\"}}\n");
    for (int by_index = 0; by_index < 2; ++by_index) {
        attn_safetensors_file file;
        const char *opened = by_index ? index_path : folder;
        CHECK_STATUS(attn_safetensors_open(opened, 0, &file, &error), ATTN_OK, &error,
                     "open %s", opened);
        if (file.tensor_count != 3) continue;
        const attn_safetensors_tensor *tc = attn_safetensors_find(&file, "c"),
                                      *ta = attn_safetensors_find(&file, "a");
        CHECK(file.shard_count == 2 && file.bytes == NULL && tc && ta && tc->shard == 1 &&
                  ta->shard == 0 && strstr(file.shards[1].path, SHARD2) &&
                  file.shards[0].mapped && file.shards[1].mapped,
              "3 tensors across 2 mapped shards (shards sorted by name)");
        const unsigned char *s1 = file.shards[1].bytes;
        CHECK((const unsigned char *)tc->data >= s1 &&
                  (const unsigned char *)tc->data + 12 <= s1 + file.shards[1].byte_count,
              "c points into shard 2's mapping");
        float out[6];
        const int64_t shape2[1] = {2}, shape3[1] = {3};
        CHECK_STATUS(attn_safetensors_get_f32(&file, "b", 1, shape2, out, &error), ATTN_OK, &error,
                     "b");
        CHECK(out[0] == 1.0f && out[1] == 2.0f, "b's bf16 values");
        CHECK_STATUS(attn_safetensors_get_f32(&file, "c", 1, shape3, out, &error), ATTN_OK, &error,
                     "c");
        CHECK(out[0] == -1.0f && out[2] == -3.0f, "c's values");
        const char *total = attn_safetensors_metadata_value(&file, "total_size"),
                   *note = attn_safetensors_metadata_value(&file, "note"),
                   *fmt = attn_safetensors_metadata_value(&file, "format");
        CHECK(file.metadata_count == 3 && total && strcmp(total, "44") == 0 && note &&
                  strcmp(note, "two shards") == 0 && fmt && strcmp(fmt, "pt") == 0,
              "metadata: the index's (a number as text), then the shards' once");
        attn_safetensors_free(&file);
    }
    attn_safetensors_file file;
    CHECK_STATUS(attn_safetensors_open(index_path, 40, &file, &error), ATTN_ERROR_MEMORY_LIMIT,
                 &error, "a 40-byte limit over the shards");
    for (size_t i = 0; i < sizeof index_cases / sizeof index_cases[0]; ++i) {
        const index_case *ic = &index_cases[i];
        snprintf(path, sizeof path, "%s/bad.index.json", folder);
        write_text(path, ic->json);
        attn_status status = attn_safetensors_open(path, 0, &file, &error);
        CHECK_STATUS(status, ic->status, &error, "%s", ic->what);
        CHECK(status != ATTN_OK && strstr(error.message, ic->message_part) != NULL,
              "%s: message '%s' mentions '%s'", ic->what, error.message, ic->message_part);
        CHECK(file.tensors == NULL && file.shards == NULL && file.internal == NULL,
              "%s: file left empty", ic->what);
        remove(path);
    }
    /* A folder with a single model.safetensors; a folder with neither; a missing path. */
    snprintf(path, sizeof path, "%s/single", folder);
    mkdir(path, 0700);
    CHECK_STATUS(attn_safetensors_open(path, 0, &file, &error), ATTN_ERROR_IO, &error,
                 "empty folder");
    CHECK(strstr(error.message, "without model.safetensors.index.json, model.safetensors"),
          "message: %s", error.message);
    /* A folder's only .safetensors file (an adapter), then two of them: ambiguous. */
    snprintf(path, sizeof path, "%s/single/adapter_model.safetensors", folder);
    CHECK_STATUS(attn_safetensors_write(path, first, 2, NULL, 0, &error), ATTN_OK, &error, "adapter");
    snprintf(path, sizeof path, "%s/single", folder);
    CHECK_STATUS(attn_safetensors_open(path, 0, &file, &error), ATTN_OK, &error,
                 "folder with one adapter_model.safetensors");
    CHECK(file.tensor_count == 2 && strstr(file.shards[0].path, "adapter_model.safetensors"),
          "the folder's only .safetensors file opened");
    attn_safetensors_free(&file);
    snprintf(path, sizeof path, "%s/single/other.safetensors", folder);
    CHECK_STATUS(attn_safetensors_write(path, second, 1, NULL, 0, &error), ATTN_OK, &error, "other");
    snprintf(path, sizeof path, "%s/single", folder);
    CHECK_STATUS(attn_safetensors_open(path, 0, &file, &error), ATTN_ERROR_IO, &error,
                 "two .safetensors files");
    CHECK(strstr(error.message, "with 2 .safetensors files"), "message: %s", error.message);
    snprintf(path, sizeof path, "%s/single/adapter_model.safetensors", folder);
    remove(path);
    snprintf(path, sizeof path, "%s/single/other.safetensors", folder);
    remove(path);
    snprintf(path, sizeof path, "%s/single", folder);
    snprintf(path, sizeof path, "%s/single/model.safetensors", folder);
    CHECK_STATUS(attn_safetensors_write(path, second, 1, NULL, 0, &error), ATTN_OK, &error, "single");
    snprintf(path, sizeof path, "%s/single", folder);
    CHECK_STATUS(attn_safetensors_open(path, 0, &file, &error), ATTN_OK, &error,
                 "folder with model.safetensors");
    CHECK(file.tensor_count == 1 && file.shard_count == 1 && file.bytes != NULL,
          "one file, bytes set");
    attn_safetensors_free(&file);
    CHECK_STATUS(attn_safetensors_open("/nonexistent/model", 0, &file, &error), ATTN_ERROR_IO,
                 &error, "missing path");
    /* Clean up. */
    const char *names[] = {SHARD1, SHARD2, "dup.safetensors", "model.safetensors.index.json",
                           "single/model.safetensors", "single"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        snprintf(path, sizeof path, "%s/%s", folder, names[i]);
        remove(path);
    }
    rmdir(folder);
}

int main(void) {
    test_package_fixture();
    test_metadata();
    test_other_dtypes();
    test_views();
    test_sharded();
    return test_finish();
}
