/*
 * test_safetensors_format.c — the safetensors reader and writer: round trip (F32, BF16, F16,
 * I64, BOOL, rank 0, metadata, escaped names), BF16/F16 -> F32 conversion against exact
 * values, a table of malformed images (truncated, bad JSON with its byte, offsets out of
 * range, overlapping, holes, wrong dtype, duplicate names, unknown fields, rank 5, trailing
 * bytes, numbers with signs / fractions / exponents / leading zeros / above 2^53, \u0000,
 * invalid UTF-8, metadata that is not strings or repeats a key, a 256-byte name, a header
 * above the 100 MiB limit) whose messages name the byte, tensor or field, every truncation
 * and many byte mutations of a valid image (must fail cleanly, never crash), and the
 * layer's Hugging Face names. */
#include "test_support.h"
#include "attn_layers.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Builds an image: 8-byte length, `json`, then `data_length` bytes of `data`. */
static unsigned char *make_image(const char *json, const void *data, size_t data_length,
                                 size_t *length) {
    size_t header = strlen(json);
    *length = 8 + header + data_length;
    unsigned char *image = malloc(*length);
    for (int i = 0; i < 8; ++i) image[i] = (unsigned char)((uint64_t)header >> (8 * i));
    memcpy(image + 8, json, header);
    if (data_length) memcpy(image + 8 + header, data, data_length);
    return image;
}

typedef struct malformed_case {
    const char *what;
    const char *json;
    size_t data_length;
    const char *message_part; /* expected in the error message */
} malformed_case;

static const malformed_case malformed_cases[] = {
    {"not an object", "[1, 2]", 0, "does not start with '{'"},
    {"truncated JSON", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "malformed JSON at byte 53"},
    {"bad JSON token", "{\"a\":{\"dtype\":F32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "malformed JSON at byte 14"},
    {"offsets out of range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside the data buffer"},
    {"offsets reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "outside"},
    {"size disagrees with shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "need 8"},
    {"overlapping", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
    {"hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole"},
    {"bytes not covered", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "cover"},
    {"unknown dtype", "{\"w\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'w': dtype 'F4' not supported"},
    {"size of an other dtype", "{\"w\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "'w': data_offsets span 2 bytes, dtype and shape need 4"},
    {"duplicate names", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate tensor 'a'"},
    {"unknown field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown or repeated field 'x'"},
    {"repeated field", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "repeated field"},
    {"missing field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing data_offsets"},
    {"rank 5", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "rank > 4"},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative integer"},
    {"fractional offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 4, "fraction"},
    {"overflowing dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4, "overflows"},
    {"overflowing product", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "overflows"},
    {"trailing garbage", "{}x", 0, "trailing bytes"},
    {"unterminated string", "{\"abc", 0, "unterminated string"},
    {"bad escape", "{\"a\\q\":{}}", 0, "malformed JSON at byte"},
    {"lone surrogate", "{\"\\ud800\":{}}", 0, "malformed JSON at byte"},
    {"metadata not strings", "{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ 'k': the value is not a string"},
    {"control character", "{\"a\tb\":{}}", 0, "control character"},
    {"leading zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "byte 29: integer with a leading zero"},
    {"exponent", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4e0]}}", 4, "fraction or exponent"},
    {"17 digits", "{\"a\":{\"dtype\":\"F32\",\"shape\":[10000000000000000],\"data_offsets\":[0,4]}}", 4, "2^53"},
    {"above 2^53", "{\"a\":{\"dtype\":\"F32\",\"shape\":[9999999999999999],\"data_offsets\":[0,4]}}", 4, "'a': shape[0] is not a non-negative integer <= 2^53"},
    {"boolean dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,true],\"data_offsets\":[0,4]}}", 4, "'a': shape[1] is not"},
    {"NUL in a name", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\\u0000"},
    {"invalid UTF-8", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "byte 3: invalid UTF-8"},
    {"overlong UTF-8", "{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "invalid UTF-8"},
    {"UTF-8 surrogate", "{\"a\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "invalid UTF-8"},
    {"entry not an object", "{\"a\":[0,4]}", 4, "'a': entry is not a JSON object"},
    {"dtype not a string", "{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'a': dtype is not a string"},
    {"shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, "'a': shape is not an array"},
    {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, "'a': data_offsets is not [begin, end]"},
    {"offsets as strings", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}", 4, "'a': data_offsets is not"},
    {"metadata not an object", "{\"__metadata__\":[\"k\"]}", 0, "__metadata__ is not an object"},
    {"repeated metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "repeated __metadata__"},
    {"duplicate metadata key", "{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0, "duplicate key 'k'"},
    {"two JSON values", "{} {}", 0, "trailing bytes after the JSON value at byte 3"},
};

static void test_malformed(void) {
    static const unsigned char zeros[16] = {0};
    for (size_t c = 0; c < sizeof malformed_cases / sizeof malformed_cases[0]; ++c) {
        const malformed_case *mc = &malformed_cases[c];
        size_t length;
        unsigned char *image = make_image(mc->json, zeros, mc->data_length, &length);
        attn_safetensors_file file;
        attn_error error = {0};
        attn_status status = attn_safetensors_parse(image, length, 0, &file, &error);
        CHECK_STATUS(status, ATTN_ERROR_FORMAT, &error, "%s", mc->what);
        CHECK(strstr(error.message, mc->message_part) != NULL, "%s: message '%s' mentions '%s'",
              mc->what, error.message, mc->message_part);
        CHECK(file.tensors == NULL && file.tensor_count == 0, "%s: file left empty", mc->what);
        free(image);
    }
    /* A 256-byte name (the limit is 255) names its length. */
    char long_name[400];
    memset(long_name, 0, sizeof long_name);
    strcpy(long_name, "{\"");
    memset(long_name + 2, 'n', 256);
    strcat(long_name, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
    {
        size_t length;
        unsigned char *image = make_image(long_name, zeros, 4, &length);
        attn_safetensors_file file;
        attn_error error = {0};
        CHECK_STATUS(attn_safetensors_parse(image, length, 0, &file, &error), ATTN_ERROR_FORMAT,
                     &error, "256-byte name");
        CHECK(strstr(error.message, "name of 256 bytes, longer than 255") != NULL, "message: %s",
              error.message);
        long_name[2 + 255] = '\0';
        strcat(long_name, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
        free(image);
        image = make_image(long_name, zeros, 4, &length);
        CHECK_STATUS(attn_safetensors_parse(image, length, 0, &file, &error), ATTN_OK, &error,
                     "255-byte name");
        CHECK(file.tensor_count == 1 && strlen(file.tensors[0].name) == 255, "255-byte name kept");
        attn_safetensors_free(&file);
        free(image);
    }
    /* The header limit: a length just above 100 MiB is refused before anything is read. */
    {
        unsigned char big[16] = {0, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
        uint64_t over = ATTN_SAFETENSORS_MAX_HEADER_BYTES + 1;
        for (int i = 0; i < 8; ++i) big[i] = (unsigned char)(over >> (8 * i));
        attn_safetensors_file file;
        attn_error error = {0};
        CHECK_STATUS(attn_safetensors_parse(big, sizeof big, 0, &file, &error), ATTN_ERROR_FORMAT,
                     &error, "header above the limit");
        CHECK(strstr(error.message, "exceeds the limit of 104857600 bytes") != NULL,
              "limit message: %s", error.message);
    }
    /* Header length beyond the image, and images shorter than 8 bytes. */
    unsigned char short_image[12] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    attn_safetensors_file file;
    attn_error error;
    CHECK_STATUS(attn_safetensors_parse(short_image, sizeof short_image, 0, &file, &error),
                 ATTN_ERROR_FORMAT, &error, "header length 200 > 4 bytes");
    CHECK_STATUS(attn_safetensors_parse(short_image, 5, 0, &file, &error), ATTN_ERROR_FORMAT,
                 &error, "5-byte image");
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    CHECK_STATUS(attn_safetensors_parse(huge, sizeof huge, 0, &file, &error), ATTN_ERROR_FORMAT,
                 &error, "header length 2^64-1");
    CHECK_STATUS(attn_safetensors_parse(short_image, sizeof short_image, 4, &file, &error),
                 ATTN_ERROR_MEMORY_LIMIT, &error, "memory limit");
    CHECK_STATUS(attn_safetensors_read("/nonexistent/x.safetensors", 0, &file, &error),
                 ATTN_ERROR_IO, &error, "missing file");
    CHECK(strstr(error.message, "/nonexistent/x.safetensors") != NULL, "IO message names path");
}

/* A small valid file of several dtypes, written by the library, then read back. */
static void test_round_trip_and_mutations(void) {
    float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    uint16_t bf16[3] = {0x3F80, 0xC040, 0x7F80};   /* 1, -3, +inf */
    uint16_t f16[4] = {0x3C00, 0xC500, 0x0001, 0x7BFF}; /* 1, -5, 2^-24, 65504 */
    int64_t i64[2] = {-7, INT64_MAX};
    uint8_t flags[3] = {1, 0, 1};
    float scalar = 42.0f;
    attn_safetensors_tensor tensors[6];
    memset(tensors, 0, sizeof tensors);
    const struct { const char *name; attn_dtype dtype; int rank; int64_t s0, s1; const void *data; } specs[6] = {
        {"model.weight", ATTN_DTYPE_F32, 2, 2, 3, f32}, {"half/bf16", ATTN_DTYPE_BF16, 1, 3, 0, bf16},
        {"h\"alf\\16", ATTN_DTYPE_F16, 2, 2, 2, f16},  {"ids", ATTN_DTYPE_I64, 1, 2, 0, i64},
        {"flags", ATTN_DTYPE_BOOL, 1, 3, 0, flags},     {"scalar", ATTN_DTYPE_F32, 0, 0, 0, &scalar},
    };
    for (int i = 0; i < 6; ++i) {
        strcpy(tensors[i].name, specs[i].name);
        tensors[i].dtype = specs[i].dtype;
        tensors[i].rank = specs[i].rank;
        tensors[i].shape[0] = specs[i].s0;
        tensors[i].shape[1] = specs[i].s1;
        tensors[i].data = specs[i].data;
    }
    attn_safetensors_metadata metadata[1] = {{"format", "pt"}};
    char path[] = "/tmp/attn_test_safetensors_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    attn_error error;
    CHECK_STATUS(attn_safetensors_write(path, tensors, 6, metadata, 1, &error), ATTN_OK, &error,
                 "write");
    attn_safetensors_file file;
    CHECK_STATUS(attn_safetensors_read(path, 0, &file, &error), ATTN_OK, &error, "read back");
    CHECK(file.tensor_count == 6 && file.metadata_count == 1 &&
              strcmp(file.metadata[0].value, "pt") == 0,
          "6 tensors and the metadata read back");
    CHECK(((size_t)((const unsigned char *)file.tensors[0].data -
                                                    (const unsigned char *)file.bytes) % 8) == 0,
          "data buffer 8-byte aligned (header padded)");
    for (int i = 0; i < 6; ++i) {
        const attn_safetensors_tensor *t = attn_safetensors_find(&file, specs[i].name);
        CHECK(t != NULL && t->dtype == specs[i].dtype && t->rank == specs[i].rank,
              "tensor '%s' found with its dtype and rank", specs[i].name);
        if (t != NULL)
            CHECK(memcmp(t->data, specs[i].data, t->byte_count) == 0, "'%s' bytes round trip",
                  specs[i].name);
    }
    float out[6];
    const int64_t shape23[2] = {2, 3}, shape3[1] = {3}, shape22[2] = {2, 2};
    CHECK_STATUS(attn_safetensors_get_f32(&file, "half/bf16", 1, shape3, out, &error), ATTN_OK,
                 &error, "bf16 -> f32");
    CHECK(out[0] == 1.0f && out[1] == -3.0f && out[2] == INFINITY, "bf16 values exact");
    CHECK_STATUS(attn_safetensors_get_f32(&file, "h\"alf\\16", 2, shape22, out, &error), ATTN_OK,
                 &error, "f16 -> f32");
    CHECK(out[0] == 1.0f && out[1] == -5.0f && out[2] == ldexpf(1.0f, -24) && out[3] == 65504.0f,
          "f16 values exact (incl. subnormal)");
    CHECK_STATUS(attn_safetensors_get_f32(&file, "model.weight", 2, shape23, out, &error),
                 ATTN_OK, &error, "f32");
    CHECK(memcmp(out, f32, sizeof f32) == 0, "f32 values bitwise");
    CHECK_STATUS(attn_safetensors_get_f32(&file, "model.weight", 2, shape22, out, &error),
                 ATTN_ERROR_SHAPE_MISMATCH, &error, "wrong shape");
    CHECK(strstr(error.message, "'model.weight': shape [2, 3], expected [2, 2]") != NULL,
          "shape message: %s", error.message);
    CHECK_STATUS(attn_safetensors_get_f32(&file, "nope", 1, shape3, out, &error),
                 ATTN_ERROR_FORMAT, &error, "missing tensor");
    CHECK(strstr(error.message, "'nope' missing") != NULL, "missing message: %s", error.message);
    const int64_t shape2[1] = {2};
    CHECK_STATUS(attn_safetensors_get_f32(&file, "ids", 1, shape2, out, &error),
                 ATTN_ERROR_FORMAT, &error, "I64 is not a float dtype");

    /* Every truncation and single-byte mutations of the valid image fail cleanly (FORMAT) or
     * parse to a consistent file; under ASan/valgrind this also proves no out-of-bounds read. */
    size_t length = file.byte_count;
    unsigned char *copy = malloc(length);
    int clean = 1;
    for (size_t cut = 0; cut < length; ++cut) {
        memcpy(copy, file.bytes, cut);
        attn_safetensors_file truncated;
        attn_status status = attn_safetensors_parse(copy, cut, 0, &truncated, NULL);
        if (status != ATTN_ERROR_FORMAT) clean = 0;
        attn_safetensors_free(&truncated);
    }
    CHECK(clean, "all %zu truncations are FORMAT errors", length);
    test_rng rng;
    test_rng_seed(&rng, 51);
    int consistent = 1;
    for (int trial = 0; trial < 4000; ++trial) {
        memcpy(copy, file.bytes, length);
        int flips = 1 + (int)test_rng_range(&rng, 0, 3);
        for (int f = 0; f < flips; ++f)
            copy[test_rng_range(&rng, 0, (int64_t)length - 1)] = (unsigned char)test_rng_next(&rng);
        attn_safetensors_file mutated;
        attn_status status = attn_safetensors_parse(copy, length, 0, &mutated, NULL);
        if (status == ATTN_OK) {
            for (int64_t i = 0; i < mutated.tensor_count; ++i) {
                const unsigned char *begin = mutated.tensors[i].data;
                if (begin < copy || begin + mutated.tensors[i].byte_count > copy + length)
                    consistent = 0;
            }
        } else if (status != ATTN_ERROR_FORMAT) {
            consistent = 0;
        }
        attn_safetensors_free(&mutated);
    }
    CHECK(consistent, "4000 mutated images: FORMAT or in-bounds tensors");
    free(copy);
    attn_safetensors_free(&file);

    /* Writer errors. */
    strcpy(tensors[1].name, tensors[0].name);
    CHECK_STATUS(attn_safetensors_write(path, tensors, 2, NULL, 0, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "duplicate names refused");
    CHECK_STATUS(attn_safetensors_write("/nonexistent/dir/x.safetensors", tensors, 1, NULL, 0,
                                        &error),
                 ATTN_ERROR_IO, &error, "unwritable path");
    remove(path);
}

/* Layer tensors under HF names; save, load into a fresh layer, compare bitwise. */
static void test_layer_round_trip(void) {
    attn_layer_config config = {0};
    config.model_dim = 12; config.query_heads = 4; config.kv_heads = 2; config.head_dim = 3;
    config.bias = 1;
    attn_layer layer, loaded;
    attn_error error;
    attn_layer_create(&config, &layer, NULL);
    attn_layer_create(&config, &loaded, NULL);
    attn_layer_init_xavier(&layer, 3, NULL);
    for (int i = 0; i < 6 + 6 + 12; ++i) layer.q_bias[i] = 0.01f * (float)i;
    attn_safetensors_tensor entries[8];
    int count = 0;
    CHECK_STATUS(attn_layer_safetensors_entries(&layer, "model.layers.0.self_attn.", entries,
                                                &count, &error),
                 ATTN_OK, &error, "entries");
    CHECK(count == 8 && strcmp(entries[0].name, "model.layers.0.self_attn.q_proj.weight") == 0 &&
              strcmp(entries[7].name, "model.layers.0.self_attn.o_proj.bias") == 0 &&
              entries[1].shape[0] == 6 && entries[1].shape[1] == 12 && entries[3].shape[0] == 12,
          "HF names and PyTorch [out, in] shapes");
    char path[] = "/tmp/attn_test_layer_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_STATUS(attn_layer_save_safetensors(&layer, "", path, &error), ATTN_OK, &error, "save");
    attn_safetensors_file file;
    CHECK_STATUS(attn_safetensors_read(path, 0, &file, &error), ATTN_OK, &error, "read");
    CHECK_STATUS(attn_layer_load_safetensors(&loaded, "", &file, &error), ATTN_OK, &error, "load");
    CHECK(memcmp(layer.parameters, loaded.parameters,
                 (size_t)layer.parameter_count * sizeof(float)) == 0,
          "parameters round trip bitwise");
    /* Loading into a layer of another shape names the tensor. */
    attn_layer other;
    config.kv_heads = 4;
    attn_layer_create(&config, &other, NULL);
    CHECK_STATUS(attn_layer_load_safetensors(&other, "", &file, &error),
                 ATTN_ERROR_SHAPE_MISMATCH, &error, "kv_heads 4 vs file 2");
    CHECK(strstr(error.message, "k_proj.weight") != NULL, "message names k_proj: %s",
          error.message);
    CHECK_STATUS(attn_layer_load_safetensors(&other, "model.", &file, &error), ATTN_ERROR_FORMAT,
                 &error, "missing prefixed names");
    CHECK(strstr(error.message, "'model.q_proj.weight' missing") != NULL, "message: %s",
          error.message);
    attn_layer_destroy(&other);
    attn_safetensors_free(&file);
    remove(path);
    attn_layer_destroy(&layer);
    attn_layer_destroy(&loaded);
}

int main(void) {
    test_malformed();
    test_round_trip_and_mutations();
    test_layer_round_trip();
    return test_finish();
}
