/*
 * safetensors.c — Hugging Face safetensors files: a strict, bounds-checked reader (on a
 * memory image, for the fuzzer, and on a file), float conversion of F32/BF16/F16 tensors, and
 * an atomic writer (temporary file + rename).
 *
 * File layout: uint64 LE header length N | N bytes of JSON (an object; padded with spaces) |
 * data buffer. Each tensor entry is {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}
 * with offsets relative to the data buffer; "__metadata__" maps strings to strings.
 * The JSON parser is a bounded cursor over the header: it never reads past the end, rejects
 * unknown fields, duplicate names, non-integer or overflowing numbers, and trailing garbage.
 */
#define _POSIX_C_SOURCE 200809L

#include "core/internal.h"
#include "attn_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Headers larger than this are refused (the Rust reference refuses above 100 MB). */
#define SAFETENSORS_MAX_HEADER_BYTES ((uint64_t)100 << 20)

/* ---- dtypes --------------------------------------------------------------------------- */

typedef struct safetensors_dtype_name {
    const char *text;
    attn_dtype dtype;
} safetensors_dtype_name;

static const safetensors_dtype_name safetensors_dtypes[] = {
    {"F32", ATTN_DTYPE_F32}, {"F16", ATTN_DTYPE_F16}, {"BF16", ATTN_DTYPE_BF16},
    {"F64", ATTN_DTYPE_F64}, {"I32", ATTN_DTYPE_I32}, {"I64", ATTN_DTYPE_I64},
    {"BOOL", ATTN_DTYPE_BOOL},
};

static const char *safetensors_dtype_text(attn_dtype dtype) {
    for (size_t i = 0; i < sizeof safetensors_dtypes / sizeof safetensors_dtypes[0]; ++i)
        if (safetensors_dtypes[i].dtype == dtype) return safetensors_dtypes[i].text;
    return NULL;
}

/* ---- a bounded JSON cursor ------------------------------------------------------------ */

typedef struct json_cursor {
    const char *text;
    size_t length;
    size_t position;
    attn_error *error;
} json_cursor;

static attn_status json_fail(json_cursor *c, const char *what) {
    return attn_fail(c->error, ATTN_ERROR_FORMAT,
                     "safetensors header byte %zu: %s", c->position, what);
}

static void json_skip_space(json_cursor *c) {
    while (c->position < c->length) {
        char ch = c->text[c->position];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        ++c->position;
    }
}

/* Consumes `expected` (after whitespace) or fails. */
static attn_status json_expect(json_cursor *c, char expected) {
    json_skip_space(c);
    if (c->position >= c->length || c->text[c->position] != expected) {
        char what[48];
        snprintf(what, sizeof what, "expected '%c'", expected);
        return json_fail(c, what);
    }
    ++c->position;
    return ATTN_OK;
}

/* 1 and consumes it if the next non-space character is `ch`. */
static int json_accept(json_cursor *c, char ch) {
    json_skip_space(c);
    if (c->position < c->length && c->text[c->position] == ch) {
        ++c->position;
        return 1;
    }
    return 0;
}

static int hex_value(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits of a \u escape. */
static attn_status json_read_hex4(json_cursor *c, uint32_t *value) {
    if (c->length - c->position < 4) return json_fail(c, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
        int digit = hex_value(c->text[c->position + (size_t)i]);
        if (digit < 0) return json_fail(c, "bad hex digit in \\u escape");
        v = v * 16 + (uint32_t)digit;
    }
    c->position += 4;
    *value = v;
    return ATTN_OK;
}

/* Appends code point `cp` as UTF-8 to out[*used], within capacity - 1 (room for NUL). */
static int utf8_append(char *out, size_t capacity, size_t *used, uint32_t cp) {
    char bytes[4];
    size_t n;
    if (cp < 0x80) { bytes[0] = (char)cp; n = 1; }
    else if (cp < 0x800) {
        bytes[0] = (char)(0xC0 | (cp >> 6)); bytes[1] = (char)(0x80 | (cp & 0x3F)); n = 2;
    } else if (cp < 0x10000) {
        bytes[0] = (char)(0xE0 | (cp >> 12)); bytes[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        bytes[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        bytes[0] = (char)(0xF0 | (cp >> 18)); bytes[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        bytes[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); bytes[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    if (*used + n >= capacity) return 0;
    memcpy(out + *used, bytes, n);
    *used += n;
    return 1;
}

/* Reads a JSON string into out[capacity] (NUL-terminated); too long is a FORMAT error.
 * Embedded NUL characters (\u0000) are refused: names are C strings. */
static attn_status json_read_string(json_cursor *c, char *out, size_t capacity) {
    attn_status status = json_expect(c, '"');
    if (status != ATTN_OK) return status;
    size_t used = 0;
    for (;;) {
        if (c->position >= c->length) return json_fail(c, "unterminated string");
        unsigned char ch = (unsigned char)c->text[c->position++];
        if (ch == '"') break;
        if (ch < 0x20) return json_fail(c, "control character in string");
        uint32_t cp = ch;
        if (ch == '\\') {
            if (c->position >= c->length) return json_fail(c, "unterminated escape");
            char e = c->text[c->position++];
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u': {
                if ((status = json_read_hex4(c, &cp)) != ATTN_OK) return status;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return json_fail(c, "lone low surrogate");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t low;
                    if (c->length - c->position < 2 || c->text[c->position] != '\\' ||
                        c->text[c->position + 1] != 'u')
                        return json_fail(c, "high surrogate without low surrogate");
                    c->position += 2;
                    if ((status = json_read_hex4(c, &low)) != ATTN_OK) return status;
                    if (low < 0xDC00 || low > 0xDFFF) return json_fail(c, "bad low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                }
                if (cp == 0) return json_fail(c, "\\u0000 in string");
                break;
            }
            default: return json_fail(c, "unknown escape");
            }
            if (!utf8_append(out, capacity, &used, cp)) return json_fail(c, "string too long");
            continue;
        }
        /* Raw bytes (UTF-8 passes through unchanged). */
        if (used + 1 >= capacity) return json_fail(c, "string too long");
        out[used++] = (char)ch;
    }
    out[used] = '\0';
    return ATTN_OK;
}

/* Reads a non-negative integer without sign, fraction or exponent, fitting in int64. */
static attn_status json_read_count(json_cursor *c, uint64_t *value) {
    json_skip_space(c);
    size_t start = c->position;
    uint64_t v = 0;
    while (c->position < c->length && c->text[c->position] >= '0' &&
           c->text[c->position] <= '9') {
        uint64_t digit = (uint64_t)(c->text[c->position] - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10) return json_fail(c, "integer overflows int64");
        v = v * 10 + digit;
        ++c->position;
    }
    if (c->position == start) return json_fail(c, "expected a non-negative integer");
    if (c->position - start > 1 && c->text[start] == '0')
        return json_fail(c, "integer with a leading zero");
    if (c->position < c->length &&
        (c->text[c->position] == '.' || c->text[c->position] == 'e' || c->text[c->position] == 'E'))
        return json_fail(c, "expected an integer, found a fraction or exponent");
    *value = v;
    return ATTN_OK;
}

/* ---- parsing one tensor entry ----------------------------------------------------------- */

typedef struct parsed_entry {
    attn_safetensors_tensor tensor;
    uint64_t begin, end; /* data_offsets */
} parsed_entry;

/* {"dtype": "...", "shape": [...], "data_offsets": [b, e]} in any order, each exactly once. */
static attn_status parse_tensor_entry(json_cursor *c, parsed_entry *entry) {
    attn_status status = json_expect(c, '{');
    if (status != ATTN_OK) return status;
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    char dtype_text[16];
    do {
        char key[32];
        if ((status = json_read_string(c, key, sizeof key)) != ATTN_OK) return status;
        if ((status = json_expect(c, ':')) != ATTN_OK) return status;
        if (strcmp(key, "dtype") == 0 && !have_dtype) {
            have_dtype = 1;
            if ((status = json_read_string(c, dtype_text, sizeof dtype_text)) != ATTN_OK)
                return status;
            int known = 0;
            for (size_t i = 0; i < sizeof safetensors_dtypes / sizeof safetensors_dtypes[0]; ++i)
                if (strcmp(dtype_text, safetensors_dtypes[i].text) == 0) {
                    entry->tensor.dtype = safetensors_dtypes[i].dtype;
                    known = 1;
                }
            if (!known)
                return attn_fail(c->error, ATTN_ERROR_FORMAT,
                                 "safetensors tensor '%s': dtype '%s' not supported (F32, F16, "
                                 "BF16, F64, I32, I64, BOOL)",
                                 entry->tensor.name, dtype_text);
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            have_shape = 1;
            if ((status = json_expect(c, '[')) != ATTN_OK) return status;
            int rank = 0;
            if (!json_accept(c, ']')) {
                do {
                    uint64_t dim;
                    if (rank == ATTN_MAX_RANK)
                        return attn_fail(c->error, ATTN_ERROR_FORMAT,
                                         "safetensors tensor '%s': rank > %d not supported",
                                         entry->tensor.name, ATTN_MAX_RANK);
                    if ((status = json_read_count(c, &dim)) != ATTN_OK) return status;
                    entry->tensor.shape[rank++] = (int64_t)dim;
                } while (json_accept(c, ','));
                if ((status = json_expect(c, ']')) != ATTN_OK) return status;
            }
            entry->tensor.rank = rank;
        } else if (strcmp(key, "data_offsets") == 0 && !have_offsets) {
            have_offsets = 1;
            if ((status = json_expect(c, '[')) != ATTN_OK) return status;
            if ((status = json_read_count(c, &entry->begin)) != ATTN_OK) return status;
            if ((status = json_expect(c, ',')) != ATTN_OK) return status;
            if ((status = json_read_count(c, &entry->end)) != ATTN_OK) return status;
            if ((status = json_expect(c, ']')) != ATTN_OK) return status;
        } else {
            return attn_fail(c->error, ATTN_ERROR_FORMAT,
                             "safetensors tensor '%s': unknown or repeated field '%s'",
                             entry->tensor.name, key);
        }
    } while (json_accept(c, ','));
    if ((status = json_expect(c, '}')) != ATTN_OK) return status;
    if (!have_dtype || !have_shape || !have_offsets)
        return attn_fail(c->error, ATTN_ERROR_FORMAT,
                         "safetensors tensor '%s': missing %s", entry->tensor.name,
                         !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return ATTN_OK;
}

/* "__metadata__": {"key": "value", ...} appended to a growing array. */
static attn_status parse_metadata(json_cursor *c, attn_safetensors_file *file) {
    attn_status status = json_expect(c, '{');
    if (status != ATTN_OK) return status;
    if (json_accept(c, '}')) return ATTN_OK;
    int64_t capacity = 0;
    do {
        if (file->metadata_count == capacity) {
            int64_t grown = capacity == 0 ? 8 : capacity * 2;
            void *bigger = realloc(file->metadata, (size_t)grown * sizeof *file->metadata);
            if (bigger == NULL)
                return attn_fail(c->error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors metadata");
            file->metadata = bigger;
            capacity = grown;
        }
        attn_safetensors_metadata *m = &file->metadata[file->metadata_count];
        if ((status = json_read_string(c, m->key, sizeof m->key)) != ATTN_OK) return status;
        if ((status = json_expect(c, ':')) != ATTN_OK) return status;
        if ((status = json_read_string(c, m->value, sizeof m->value)) != ATTN_OK) return status;
        for (int64_t i = 0; i < file->metadata_count; ++i)
            if (strcmp(file->metadata[i].key, m->key) == 0)
                return attn_fail(c->error, ATTN_ERROR_FORMAT,
                                 "safetensors __metadata__: duplicate key '%s'", m->key);
        ++file->metadata_count;
    } while (json_accept(c, ','));
    return json_expect(c, '}');
}

static int compare_entries_by_offset(const void *a, const void *b) {
    const parsed_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(((const parsed_entry *)a)->tensor.name, ((const parsed_entry *)b)->tensor.name);
}

/* Checks sizes, offsets, coverage and names of the parsed entries; fills the tensors. */
static attn_status validate_entries(parsed_entry *entries, int64_t count, const unsigned char *data,
                                    uint64_t data_length, attn_error *error) {
    for (int64_t i = 0; i < count; ++i) {
        attn_safetensors_tensor *t = &entries[i].tensor;
        uint64_t bytes = attn_dtype_size(t->dtype);
        for (int d = 0; d < t->rank; ++d) {
            uint64_t product;
            if (__builtin_mul_overflow(bytes, (uint64_t)t->shape[d], &product) ||
                product > (uint64_t)INT64_MAX)
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "safetensors tensor '%s': shape product overflows", t->name);
            bytes = product;
        }
        if (entries[i].begin > entries[i].end || entries[i].end > data_length)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "safetensors tensor '%s': data_offsets [%llu, %llu] outside the "
                             "data buffer of %llu bytes",
                             t->name, (unsigned long long)entries[i].begin,
                             (unsigned long long)entries[i].end,
                             (unsigned long long)data_length);
        if (entries[i].end - entries[i].begin != bytes)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "safetensors tensor '%s': data_offsets span %llu bytes, dtype and "
                             "shape need %llu",
                             t->name, (unsigned long long)(entries[i].end - entries[i].begin),
                             (unsigned long long)bytes);
        t->byte_count = (size_t)bytes;
        t->data = data + entries[i].begin;
    }
    if (count > 1) {
        qsort(entries, (size_t)count, sizeof *entries, compare_names);
        for (int64_t i = 1; i < count; ++i)
            if (strcmp(entries[i - 1].tensor.name, entries[i].tensor.name) == 0)
                return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: duplicate tensor '%s'",
                                 entries[i].tensor.name);
    }
    if (count > 1) qsort(entries, (size_t)count, sizeof *entries, compare_entries_by_offset);
    uint64_t expected_begin = 0;
    for (int64_t i = 0; i < count; ++i) {
        if (entries[i].begin < expected_begin)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "safetensors tensor '%s': data_offsets [%llu, %llu] overlap the "
                             "previous tensor (ending at %llu)",
                             entries[i].tensor.name, (unsigned long long)entries[i].begin,
                             (unsigned long long)entries[i].end,
                             (unsigned long long)expected_begin);
        if (entries[i].begin > expected_begin)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "safetensors tensor '%s': hole in the data buffer before offset %llu",
                             entries[i].tensor.name, (unsigned long long)entries[i].begin);
        expected_begin = entries[i].end;
    }
    if (expected_begin != data_length)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors: data buffer has %llu bytes, tensors cover %llu",
                         (unsigned long long)data_length, (unsigned long long)expected_begin);
    return ATTN_OK;
}

attn_status attn_safetensors_parse(const void *bytes, size_t byte_count,
                                   size_t memory_limit_bytes, attn_safetensors_file *file,
                                   attn_error *error) {
    if (file == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file = NULL");
    memset(file, 0, sizeof *file);
    if (bytes == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "bytes = NULL");
    if (memory_limit_bytes > 0 && byte_count > memory_limit_bytes)
        return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                         "safetensors image of %zu bytes exceeds memory_limit_bytes = %zu",
                         byte_count, memory_limit_bytes);
    if (byte_count < 8)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors: %zu bytes, shorter than the 8-byte header length",
                         byte_count);
    const unsigned char *image = bytes;
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = header_length << 8 | image[i];
    if (header_length > SAFETENSORS_MAX_HEADER_BYTES || header_length > byte_count - 8)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors: header length %llu exceeds the %zu bytes that follow "
                         "(or the 100 MiB limit)",
                         (unsigned long long)header_length, byte_count - 8);
    if (header_length < 2)
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: header length %llu too short",
                         (unsigned long long)header_length);

    json_cursor c = {(const char *)image + 8, (size_t)header_length, 0, error};
    parsed_entry *entries = NULL;
    int64_t count = 0, capacity = 0;
    attn_status status = json_expect(&c, '{');
    int have_metadata = 0;
    if (status == ATTN_OK && !json_accept(&c, '}')) {
        do {
            char name[ATTN_SAFETENSORS_NAME_CAPACITY];
            if ((status = json_read_string(&c, name, sizeof name)) != ATTN_OK) break;
            if ((status = json_expect(&c, ':')) != ATTN_OK) break;
            if (strcmp(name, "__metadata__") == 0) {
                if (have_metadata) {
                    status = json_fail(&c, "repeated __metadata__");
                    break;
                }
                have_metadata = 1;
                if ((status = parse_metadata(&c, file)) != ATTN_OK) break;
                continue;
            }
            if (count == capacity) {
                int64_t grown = capacity == 0 ? 16 : capacity * 2;
                void *bigger = realloc(entries, (size_t)grown * sizeof *entries);
                if (bigger == NULL) {
                    status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors entries");
                    break;
                }
                entries = bigger;
                capacity = grown;
            }
            parsed_entry *entry = &entries[count];
            memset(entry, 0, sizeof *entry);
            memcpy(entry->tensor.name, name, sizeof name);
            if ((status = parse_tensor_entry(&c, entry)) != ATTN_OK) break;
            ++count;
        } while (json_accept(&c, ','));
        if (status == ATTN_OK) status = json_expect(&c, '}');
    }
    if (status == ATTN_OK) {
        /* Only space padding may follow the object. */
        while (c.position < c.length && c.text[c.position] == ' ') ++c.position;
        if (c.position != c.length) status = json_fail(&c, "trailing bytes after the JSON object");
    }
    const unsigned char *data = image + 8 + header_length;
    uint64_t data_length = byte_count - 8 - header_length;
    if (status == ATTN_OK) status = validate_entries(entries, count, data, data_length, error);
    if (status == ATTN_OK && count > 0) {
        file->tensors = malloc((size_t)count * sizeof *file->tensors);
        if (file->tensors == NULL)
            status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors tensors");
        else
            for (int64_t i = 0; i < count; ++i) file->tensors[i] = entries[i].tensor;
    }
    free(entries);
    if (status != ATTN_OK) {
        attn_safetensors_free(file);
        return status;
    }
    file->tensor_count = count;
    file->bytes = bytes;
    file->byte_count = byte_count;
    return ATTN_OK;
}

attn_status attn_safetensors_read(const char *path, size_t memory_limit_bytes,
                                  attn_safetensors_file *file, attn_error *error) {
    if (file == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file = NULL");
    memset(file, 0, sizeof *file);
    if (path == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path = NULL");
    FILE *stream = fopen(path, "rb");
    if (stream == NULL) return attn_fail(error, ATTN_ERROR_IO, "%s: cannot open", path);
    long size = -1;
    if (fseek(stream, 0, SEEK_END) == 0) size = ftell(stream);
    if (size < 0 || fseek(stream, 0, SEEK_SET) != 0) {
        fclose(stream);
        return attn_fail(error, ATTN_ERROR_IO, "%s: cannot determine the size", path);
    }
    if (memory_limit_bytes > 0 && (size_t)size > memory_limit_bytes) {
        fclose(stream);
        return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                         "%s: %ld bytes exceed memory_limit_bytes = %zu", path, size,
                         memory_limit_bytes);
    }
    void *image = malloc(size > 0 ? (size_t)size : 1);
    if (image == NULL) {
        fclose(stream);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %ld bytes", path,
                         size);
    }
    size_t got = fread(image, 1, (size_t)size, stream);
    fclose(stream);
    if (got != (size_t)size) {
        free(image);
        return attn_fail(error, ATTN_ERROR_IO, "%s: read %zu of %ld bytes", path, got, size);
    }
    attn_status status = attn_safetensors_parse(image, (size_t)size, 0, file, error);
    if (status != ATTN_OK) {
        free(image);
        if (error != NULL) {
            /* Prefix the path, keeping the parser's message. */
            char message[ATTN_ERROR_MESSAGE_CAPACITY];
            snprintf(message, sizeof message, "%s", error->message);
            attn_fail(error, status, "%s: %s", path, message);
        }
        return status;
    }
    file->owned_bytes = image;
    return ATTN_OK;
}

void attn_safetensors_free(attn_safetensors_file *file) {
    if (file == NULL) return;
    free(file->tensors);
    free(file->metadata);
    free(file->owned_bytes);
    memset(file, 0, sizeof *file);
}

const attn_safetensors_tensor *attn_safetensors_find(const attn_safetensors_file *file,
                                                     const char *name) {
    if (file == NULL || name == NULL) return NULL;
    for (int64_t i = 0; i < file->tensor_count; ++i)
        if (strcmp(file->tensors[i].name, name) == 0) return &file->tensors[i];
    return NULL;
}

/* Exact widening of a bfloat16 / IEEE half bit pattern to float32. */
static float bf16_to_f32(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &wide, sizeof value);
    return value;
}

static float f16_to_f32(uint16_t bits) {
    uint32_t sign = (uint32_t)(bits >> 15) << 31, exponent = (bits >> 10) & 0x1F,
             mantissa = bits & 0x3FF, wide;
    if (exponent == 0x1F) {
        wide = sign | 0x7F800000u | (mantissa << 13); /* inf / NaN */
    } else if (exponent != 0) {
        wide = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        wide = sign; /* ±0 */
    } else {         /* subnormal: normalise */
        int shift = 0;
        while ((mantissa & 0x400) == 0) { mantissa <<= 1; ++shift; }
        wide = sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3FF) << 13);
    }
    float value;
    memcpy(&value, &wide, sizeof value);
    return value;
}

static void format_shape(char *out, size_t capacity, int rank, const int64_t *shape) {
    size_t used = (size_t)snprintf(out, capacity, "[");
    for (int d = 0; d < rank && used < capacity; ++d)
        used += (size_t)snprintf(out + used, capacity - used, d ? ", %lld" : "%lld",
                                 (long long)shape[d]);
    if (used < capacity) snprintf(out + used, capacity - used, "]");
}

attn_status attn_safetensors_get_f32(const attn_safetensors_file *file, const char *name,
                                     int rank, const int64_t *shape, float *out,
                                     attn_error *error) {
    if (file == NULL || name == NULL || out == NULL || (rank > 0 && shape == NULL))
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file, name, shape or out = NULL");
    const attn_safetensors_tensor *t = attn_safetensors_find(file, name);
    if (t == NULL)
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: tensor '%s' missing", name);
    int same = t->rank == rank;
    for (int d = 0; same && d < rank; ++d) same = t->shape[d] == shape[d];
    if (!same) {
        char stored[96], wanted[96];
        format_shape(stored, sizeof stored, t->rank, t->shape);
        format_shape(wanted, sizeof wanted, rank, shape);
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "safetensors tensor '%s': shape %s, expected %s", name, stored, wanted);
    }
    size_t element_size = attn_dtype_size(t->dtype), count = t->byte_count / element_size;
    const unsigned char *source = t->data;
    switch (t->dtype) {
    case ATTN_DTYPE_F32:
        memcpy(out, source, t->byte_count);
        break;
    case ATTN_DTYPE_BF16:
    case ATTN_DTYPE_F16:
        for (size_t i = 0; i < count; ++i) {
            uint16_t bits = (uint16_t)(source[2 * i] | source[2 * i + 1] << 8);
            out[i] = t->dtype == ATTN_DTYPE_BF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
        }
        break;
    default:
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors tensor '%s': dtype %s is not F32, BF16 or F16", name,
                         safetensors_dtype_text(t->dtype));
    }
    return ATTN_OK;
}

/* ---- writer ---------------------------------------------------------------------------- */

/* Appends `text` as a JSON string (quotes, escapes) to a growing buffer. */
typedef struct text_buffer {
    char *data;
    size_t length, capacity;
    int failed;
} text_buffer;

static void text_append(text_buffer *b, const char *text, size_t n) {
    if (b->failed) return;
    if (b->length + n + 1 > b->capacity) {
        size_t grown = b->capacity ? b->capacity : 256;
        while (grown < b->length + n + 1) grown *= 2;
        char *bigger = realloc(b->data, grown);
        if (bigger == NULL) { b->failed = 1; return; }
        b->data = bigger;
        b->capacity = grown;
    }
    memcpy(b->data + b->length, text, n);
    b->length += n;
    b->data[b->length] = '\0';
}

static void text_printf(text_buffer *b, const char *format, ...) ATTN_PRINTF_LIKE(2, 3);
static void text_printf(text_buffer *b, const char *format, ...) {
    char piece[128];
    va_list arguments;
    va_start(arguments, format);
    int n = vsnprintf(piece, sizeof piece, format, arguments);
    va_end(arguments);
    if (n < 0 || (size_t)n >= sizeof piece) { b->failed = 1; return; }
    text_append(b, piece, (size_t)n);
}

static void text_append_json_string(text_buffer *b, const char *s) {
    text_append(b, "\"", 1);
    for (; *s; ++s) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            char escaped[2] = {'\\', (char)ch};
            text_append(b, escaped, 2);
        } else if (ch < 0x20) {
            text_printf(b, "\\u%04x", ch);
        } else {
            text_append(b, (const char *)&ch, 1);
        }
    }
    text_append(b, "\"", 1);
}

attn_status attn_safetensors_write(const char *path, const attn_safetensors_tensor *tensors,
                                   int64_t tensor_count,
                                   const attn_safetensors_metadata *metadata,
                                   int64_t metadata_count, attn_error *error) {
    if (path == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path = NULL");
    if (tensor_count < 0 || (tensor_count > 0 && tensors == NULL))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "tensor_count = %lld with tensors %s", (long long)tensor_count,
                         tensors ? "given" : "NULL");
    if (metadata_count < 0 || (metadata_count > 0 && metadata == NULL))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "metadata_count = %lld",
                         (long long)metadata_count);
    size_t *sizes = calloc((size_t)tensor_count + 1, sizeof *sizes);
    if (sizes == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors writer");
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < tensor_count && status == ATTN_OK; ++i) {
        const attn_safetensors_tensor *t = &tensors[i];
        size_t name_length = strnlen(t->name, ATTN_SAFETENSORS_NAME_CAPACITY);
        if (name_length == 0 || name_length == ATTN_SAFETENSORS_NAME_CAPACITY ||
            strcmp(t->name, "__metadata__") == 0) {
            status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                               "tensors[%lld].name: empty, unterminated or reserved",
                               (long long)i);
            break;
        }
        for (int64_t j = 0; j < i; ++j)
            if (strcmp(tensors[j].name, t->name) == 0)
                status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                   "tensors[%lld].name = '%s': duplicate", (long long)i, t->name);
        if (safetensors_dtype_text(t->dtype) == NULL || t->rank < 0 || t->rank > ATTN_MAX_RANK)
            status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                               "tensor '%s': dtype %d or rank %d not writable", t->name,
                               (int)t->dtype, t->rank);
        size_t bytes = attn_dtype_size(t->dtype);
        for (int d = 0; d < t->rank && status == ATTN_OK; ++d)
            if (t->shape[d] < 0 || !attn_mul_size(bytes, (size_t)t->shape[d], &bytes))
                status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                   "tensor '%s': shape[%d] = %lld invalid or overflowing",
                                   t->name, d, (long long)t->shape[d]);
        if (status == ATTN_OK && bytes > 0 && t->data == NULL)
            status = attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "tensor '%s': data = NULL",
                               t->name);
        sizes[i] = bytes;
    }
    text_buffer header = {0};
    if (status == ATTN_OK) {
        text_append(&header, "{", 1);
        int first = 1;
        if (metadata_count > 0) {
            text_append(&header, "\"__metadata__\":{", 16);
            for (int64_t m = 0; m < metadata_count; ++m) {
                if (m) text_append(&header, ",", 1);
                text_append_json_string(&header, metadata[m].key);
                text_append(&header, ":", 1);
                text_append_json_string(&header, metadata[m].value);
            }
            text_append(&header, "}", 1);
            first = 0;
        }
        size_t offset = 0;
        for (int64_t i = 0; i < tensor_count; ++i) {
            const attn_safetensors_tensor *t = &tensors[i];
            if (!first) text_append(&header, ",", 1);
            first = 0;
            text_append_json_string(&header, t->name);
            text_printf(&header, ":{\"dtype\":\"%s\",\"shape\":[", safetensors_dtype_text(t->dtype));
            for (int d = 0; d < t->rank; ++d)
                text_printf(&header, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            text_printf(&header, "],\"data_offsets\":[%zu,%zu]}", offset, offset + sizes[i]);
            offset += sizes[i];
        }
        text_append(&header, "}", 1);
        /* Pad with spaces so the data buffer starts 8-byte aligned, as the reference does. */
        while (!header.failed && header.length % 8 != 0) text_append(&header, " ", 1);
        if (header.failed)
            status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors header");
    }
    if (status == ATTN_OK) {
        size_t path_length = strlen(path);
        char *temporary = malloc(path_length + 32);
        if (temporary == NULL) {
            status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: temporary name", path);
        } else {
            snprintf(temporary, path_length + 32, "%s.tmp.%ld", path, (long)getpid());
            FILE *stream = fopen(temporary, "wb");
            if (stream == NULL) {
                status = attn_fail(error, ATTN_ERROR_IO, "%s: cannot create", temporary);
            } else {
                unsigned char length_bytes[8];
                uint64_t length = header.length;
                for (int i = 0; i < 8; ++i) length_bytes[i] = (unsigned char)(length >> (8 * i));
                int ok = fwrite(length_bytes, 1, 8, stream) == 8 &&
                         fwrite(header.data, 1, header.length, stream) == header.length;
                for (int64_t i = 0; ok && i < tensor_count; ++i)
                    ok = sizes[i] == 0 || fwrite(tensors[i].data, 1, sizes[i], stream) == sizes[i];
                if (fclose(stream) != 0) ok = 0;
                if (!ok || rename(temporary, path) != 0) {
                    remove(temporary);
                    status = attn_fail(error, ATTN_ERROR_IO, "%s: write failed", path);
                }
            }
            free(temporary);
        }
    }
    free(header.data);
    free(sizes);
    return status;
}
