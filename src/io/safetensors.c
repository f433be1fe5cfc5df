/*
 * safetensors.c — the safetensors reader's core: the header of one image checked and parsed
 * (cJSON, plus the lexical rules cJSON does not enforce), its entries validated against the
 * data buffer, tensors and metadata appended to an attn_safetensors_file, the name index,
 * lookups, and freeing. Files, mappings and sharded checkpoints: safetensors_file.c;
 * conversions and views: safetensors_tensor.c; the writer: safetensors_write.c.
 *
 * File layout: uint64 LE header length N | N bytes of JSON (an object; padded with spaces) |
 * data buffer. Each tensor entry is {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}
 * with offsets relative to the data buffer; "__metadata__" maps strings to strings.
 */
#include "io/safetensors_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "io/json.h"

/* ---- dtypes --------------------------------------------------------------------------- */

/* The format's whole-byte dtypes; those attn has no type for are ATTN_SAFETENSORS_DTYPE_OTHER. */
typedef struct safetensors_dtype_entry {
    const char *text;
    attn_dtype dtype;
    unsigned size;
} safetensors_dtype_entry;

static const safetensors_dtype_entry safetensors_dtypes[] = {
    {"F32", ATTN_DTYPE_F32, 4}, {"F16", ATTN_DTYPE_F16, 2}, {"BF16", ATTN_DTYPE_BF16, 2},
    {"F64", ATTN_DTYPE_F64, 8}, {"I32", ATTN_DTYPE_I32, 4}, {"I64", ATTN_DTYPE_I64, 8},
    {"BOOL", ATTN_DTYPE_BOOL, 1},
    {"U8", ATTN_SAFETENSORS_DTYPE_OTHER, 1},      {"I8", ATTN_SAFETENSORS_DTYPE_OTHER, 1},
    {"F8_E4M3", ATTN_SAFETENSORS_DTYPE_OTHER, 1}, {"F8_E5M2", ATTN_SAFETENSORS_DTYPE_OTHER, 1},
    {"F8_E8M0", ATTN_SAFETENSORS_DTYPE_OTHER, 1}, {"I16", ATTN_SAFETENSORS_DTYPE_OTHER, 2},
    {"U16", ATTN_SAFETENSORS_DTYPE_OTHER, 2},     {"U32", ATTN_SAFETENSORS_DTYPE_OTHER, 4},
    {"U64", ATTN_SAFETENSORS_DTYPE_OTHER, 8},
};
#define SAFETENSORS_DTYPE_COUNT (sizeof safetensors_dtypes / sizeof safetensors_dtypes[0])

const char *attn_safetensors_dtype_name(attn_dtype dtype) {
    if (dtype == ATTN_SAFETENSORS_DTYPE_OTHER) return NULL;
    for (size_t i = 0; i < SAFETENSORS_DTYPE_COUNT; ++i)
        if (safetensors_dtypes[i].dtype == dtype) return safetensors_dtypes[i].text;
    return NULL;
}

/* ---- the file's bookkeeping ------------------------------------------------------------ */

safetensors_internal *safetensors_internal_of(attn_safetensors_file *file) {
    if (file->internal == NULL) file->internal = calloc(1, sizeof(safetensors_internal));
    return file->internal;
}

char *safetensors_keep_string(attn_safetensors_file *file, char *text) {
    safetensors_internal *in = text ? safetensors_internal_of(file) : NULL;
    char **bigger = in ? realloc(in->blocks, (size_t)(in->block_count + 1) * sizeof *bigger)
                       : NULL;
    if (bigger == NULL) {
        free(text);
        return NULL;
    }
    in->blocks = bigger;
    in->blocks[in->block_count++] = text;
    return text;
}

char *safetensors_copy_string(attn_safetensors_file *file, const char *text, size_t length) {
    if (length == SIZE_MAX) return NULL;
    char *copy = malloc(length + 1);
    if (copy == NULL) return NULL;
    if (length) memcpy(copy, text, length);
    copy[length] = '\0';
    return safetensors_keep_string(file, copy);
}

static void release_image(void *address, size_t length, int mapped) {
    if (address == NULL) return;
    if (mapped) munmap(address, length);
    else free(address);
}

attn_status safetensors_keep_image(attn_safetensors_file *file, void *address, size_t length,
                                   int mapped, attn_error *error) {
    safetensors_internal *in = safetensors_internal_of(file);
    safetensors_image *bigger =
        in ? realloc(in->images, (size_t)(in->image_count + 1) * sizeof *bigger) : NULL;
    if (bigger == NULL) {
        release_image(address, length, mapped);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors: bookkeeping");
    }
    in->images = bigger;
    in->images[in->image_count++] = (safetensors_image){address, length, mapped};
    return ATTN_OK;
}

attn_status safetensors_add_metadata(attn_safetensors_file *file, const char *key,
                                     const char *value, attn_error *error) {
    safetensors_internal *in = safetensors_internal_of(file);
    if (in == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors metadata");
    if (file->metadata_count == in->metadata_capacity) {
        int64_t grown = in->metadata_capacity ? 2 * in->metadata_capacity : 8;
        void *bigger = realloc(file->metadata, (size_t)grown * sizeof *file->metadata);
        if (bigger == NULL)
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors metadata");
        file->metadata = bigger;
        in->metadata_capacity = grown;
    }
    file->metadata[file->metadata_count++] = (attn_safetensors_metadata){key, value};
    return ATTN_OK;
}

void safetensors_prefix_message(attn_error *error, const char *prefix) {
    if (error == NULL) return;
    char message[ATTN_ERROR_MESSAGE_CAPACITY];
    snprintf(message, sizeof message, "%s", error->message);
    attn_fail(error, error->status, "%s: %s", prefix, message);
}

void attn_safetensors_free(attn_safetensors_file *file) {
    if (file == NULL) return;
    safetensors_internal *in = file->internal;
    if (in != NULL) {
        for (int64_t i = 0; i < in->image_count; ++i)
            release_image(in->images[i].address, in->images[i].length, in->images[i].mapped);
        for (int64_t i = 0; i < in->block_count; ++i) free(in->blocks[i]);
        free(in->images);
        free(in->blocks);
        free(in->by_name);
        free(in);
    }
    free(file->tensors);
    free(file->metadata);
    free(file->shards);
    memset(file, 0, sizeof *file);
}

/* ---- lexical rules cJSON does not enforce ------------------------------------------------ */

static attn_status header_fail(attn_error *error, size_t at, const char *what) {
    return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors header byte %zu: %s", at, what);
}

/* Length of the valid UTF-8 sequence at s[0, available), 0 when invalid (overlong forms,
 * surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_sequence_length(const unsigned char *s, size_t available) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t n = c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    if (n == 0 || n > available) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((s[k] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0) ||
        (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))
        return 0;
    return n;
}

/*
 * The header's tokens, before cJSON sees them: strings without control characters or
 * \u0000 (names are C strings) and with valid UTF-8; numbers that are non-negative integers
 * without leading zeros, fractions or exponents, at most 16 digits (cJSON keeps doubles;
 * the value check <= 2^53 follows). Escapes and structure are cJSON's to check.
 */
static attn_status check_header_tokens(const unsigned char *text, size_t length,
                                       attn_error *error) {
    size_t i = 0;
    while (i < length) {
        unsigned char ch = text[i];
        if (ch == '"') {
            size_t start = i++;
            for (;;) {
                if (i >= length) return header_fail(error, start, "unterminated string");
                ch = text[i];
                if (ch == '"') {
                    ++i;
                    break;
                }
                if (ch < 0x20) return header_fail(error, i, "control character in a string");
                if (ch == '\\') {
                    if (i + 1 >= length) return header_fail(error, start, "unterminated string");
                    if (text[i + 1] == 'u' && length - i >= 6 && memcmp(text + i + 2, "0000", 4) == 0)
                        return header_fail(error, i, "\\u0000 in a string");
                    i += 2;
                    continue;
                }
                size_t n = utf8_sequence_length(text + i, length - i);
                if (n == 0) return header_fail(error, i, "invalid UTF-8 in a string");
                i += n;
            }
            continue;
        }
        if (ch == '-')
            return header_fail(error, i, "negative number (shapes and offsets are "
                                         "non-negative integers)");
        if (ch >= '0' && ch <= '9') {
            size_t start = i;
            while (i < length && text[i] >= '0' && text[i] <= '9') ++i;
            if (i - start > 1 && text[start] == '0')
                return header_fail(error, start, "integer with a leading zero");
            if (i < length && (text[i] == '.' || text[i] == 'e' || text[i] == 'E'))
                return header_fail(error, start, "number with a fraction or exponent (an "
                                                 "integer is expected)");
            if (i - start > 16)
                return header_fail(error, start, "integer overflows the 2^53 limit");
            continue;
        }
        ++i;
    }
    return ATTN_OK;
}

/* ---- one image's entries ------------------------------------------------------------------ */

typedef struct parsed_entry {
    attn_safetensors_tensor tensor;
    uint64_t begin, end;   /* data_offsets */
    unsigned element_size; /* bytes of one element of the stored dtype */
} parsed_entry;

static attn_status entry_fail(attn_error *error, const char *name, const char *what,
                              const char *detail) {
    return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors tensor '%s': %s%s", name, what,
                     detail ? detail : "");
}

/* {"dtype": "...", "shape": [...], "data_offsets": [b, e]}, each field exactly once. */
static attn_status parse_entry(const cJSON *item, parsed_entry *entry, attn_error *error) {
    const char *name = entry->tensor.name;
    if (!cJSON_IsObject(item)) return entry_fail(error, name, "entry is not a JSON object", NULL);
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    for (const cJSON *field = item->child; field != NULL; field = field->next) {
        const char *key = field->string;
        if (strcmp(key, "dtype") == 0 && !have_dtype) {
            have_dtype = 1;
            if (!cJSON_IsString(field)) return entry_fail(error, name, "dtype is not a string", NULL);
            const safetensors_dtype_entry *known = NULL;
            for (size_t i = 0; i < SAFETENSORS_DTYPE_COUNT && known == NULL; ++i)
                if (strcmp(field->valuestring, safetensors_dtypes[i].text) == 0)
                    known = &safetensors_dtypes[i];
            if (known == NULL)
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "safetensors tensor '%s': dtype '%.32s' not supported (F32, "
                                 "F16, BF16, F64, I32, I64, BOOL, U8, I8, I16, U16, U32, U64, "
                                 "F8_E4M3, F8_E5M2, F8_E8M0)",
                                 name, field->valuestring);
            entry->tensor.dtype = known->dtype;
            entry->element_size = known->size;
            snprintf(entry->tensor.stored_dtype, sizeof entry->tensor.stored_dtype, "%s",
                     known->text);
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            have_shape = 1;
            if (!cJSON_IsArray(field)) return entry_fail(error, name, "shape is not an array", NULL);
            int rank = 0;
            for (const cJSON *dim = field->child; dim != NULL; dim = dim->next) {
                uint64_t value;
                if (rank == ATTN_MAX_RANK)
                    return attn_fail(error, ATTN_ERROR_FORMAT,
                                     "safetensors tensor '%s': rank > %d not supported", name,
                                     ATTN_MAX_RANK);
                if (!attn_json_count(dim, &value))
                    return attn_fail(error, ATTN_ERROR_FORMAT,
                                     "safetensors tensor '%s': shape[%d] is not a "
                                     "non-negative integer <= 2^53",
                                     name, rank);
                entry->tensor.shape[rank++] = (int64_t)value;
            }
            entry->tensor.rank = rank;
        } else if (strcmp(key, "data_offsets") == 0 && !have_offsets) {
            have_offsets = 1;
            if (!cJSON_IsArray(field) || cJSON_GetArraySize(field) != 2 ||
                !attn_json_count(field->child, &entry->begin) ||
                !attn_json_count(field->child->next, &entry->end))
                return entry_fail(error, name, "data_offsets is not [begin, end] of "
                                               "non-negative integers <= 2^53", NULL);
        } else {
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "safetensors tensor '%s': unknown or repeated field '%.64s'", name,
                             key);
        }
    }
    if (!have_dtype || !have_shape || !have_offsets)
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors tensor '%s': missing %s", name,
                         !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return ATTN_OK;
}

static int compare_entries_by_offset(const void *a, const void *b) {
    const parsed_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Checks sizes, offsets and coverage of an image's entries; fills byte_count and data. */
static attn_status validate_entries(parsed_entry *entries, int64_t count, const unsigned char *data,
                                    uint64_t data_length, attn_error *error) {
    for (int64_t i = 0; i < count; ++i) {
        attn_safetensors_tensor *t = &entries[i].tensor;
        uint64_t bytes = entries[i].element_size;
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

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "__metadata__": {"key": "value", ...}: strings, keys unique within the image. Keys the
 * file already lists (an index's metadata, an earlier shard) are skipped. */
static attn_status add_image_metadata(attn_safetensors_file *file, const cJSON *object,
                                      attn_error *error) {
    if (!cJSON_IsObject(object))
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors __metadata__ is not an object");
    int64_t count = 0;
    for (const cJSON *m = object->child; m != NULL; m = m->next) {
        if (!cJSON_IsString(m))
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "safetensors __metadata__ '%.64s': the value is not a string",
                             m->string);
        ++count;
    }
    if (count == 0) return ATTN_OK;
    const char **keys = malloc((size_t)count * sizeof *keys);
    if (keys == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors metadata");
    int64_t k = 0;
    for (const cJSON *m = object->child; m != NULL; m = m->next) keys[k++] = m->string;
    qsort(keys, (size_t)count, sizeof *keys, compare_strings);
    attn_status status = ATTN_OK;
    for (int64_t i = 1; i < count && status == ATTN_OK; ++i)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            status = attn_fail(error, ATTN_ERROR_FORMAT,
                               "safetensors __metadata__: duplicate key '%.64s'", keys[i]);
    free(keys);
    int64_t earlier = file->metadata_count;
    for (const cJSON *m = object->child; m != NULL && status == ATTN_OK; m = m->next) {
        int listed = 0;
        for (int64_t i = 0; i < earlier && !listed; ++i)
            listed = strcmp(file->metadata[i].key, m->string) == 0;
        if (listed) continue;
        char *key = safetensors_copy_string(file, m->string, strlen(m->string));
        char *value = safetensors_copy_string(file, m->valuestring, strlen(m->valuestring));
        status = key && value ? safetensors_add_metadata(file, key, value, error)
                              : attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors metadata");
    }
    return status;
}

/* Appends the shard entry and the image's tensors (entries in offset order). */
static attn_status append_shard(attn_safetensors_file *file, const parsed_entry *entries,
                                int64_t count, const void *bytes, size_t byte_count,
                                size_t data_offset, const char *path, int mapped,
                                attn_error *error) {
    safetensors_internal *in = safetensors_internal_of(file);
    if (in == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors bookkeeping");
    const char *kept_path = path ? safetensors_copy_string(file, path, strlen(path)) : NULL;
    attn_safetensors_shard *shards =
        realloc(file->shards, (size_t)(file->shard_count + 1) * sizeof *shards);
    if (shards != NULL) file->shards = shards;
    if ((path && kept_path == NULL) || shards == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors shards");
    int shard = (int)file->shard_count++;
    shards[shard] = (attn_safetensors_shard){kept_path, bytes, byte_count, data_offset, mapped};
    if (count > INT64_MAX / 2 - file->tensor_count)
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "safetensors: too many tensors");
    if (file->tensor_count + count > in->tensor_capacity) {
        int64_t grown = in->tensor_capacity ? in->tensor_capacity : 16;
        while (grown < file->tensor_count + count) grown *= 2;
        void *bigger = NULL;
        size_t bytes_needed;
        if (attn_mul_size((size_t)grown, sizeof *file->tensors, &bytes_needed))
            bigger = realloc(file->tensors, bytes_needed);
        if (bigger == NULL)
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors: %lld tensors",
                             (long long)grown);
        file->tensors = bigger;
        in->tensor_capacity = grown;
    }
    for (int64_t i = 0; i < count; ++i) {
        file->tensors[file->tensor_count] = entries[i].tensor;
        file->tensors[file->tensor_count].shard = shard;
        ++file->tensor_count;
    }
    return ATTN_OK;
}

attn_status safetensors_add_image(attn_safetensors_file *file, const void *bytes,
                                  size_t byte_count, const char *path, int mapped,
                                  attn_error *error) {
    if (byte_count < 8)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors: %zu bytes, shorter than the 8-byte header length",
                         byte_count);
    const unsigned char *image = bytes;
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = header_length << 8 | image[i];
    if (header_length > ATTN_SAFETENSORS_MAX_HEADER_BYTES)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors: header length %llu exceeds the limit of %llu bytes "
                         "(100 MiB)",
                         (unsigned long long)header_length,
                         (unsigned long long)ATTN_SAFETENSORS_MAX_HEADER_BYTES);
    if (header_length > byte_count - 8)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "safetensors: header length %llu exceeds the %zu bytes that follow",
                         (unsigned long long)header_length, byte_count - 8);
    if (header_length < 2)
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: header length %llu too short",
                         (unsigned long long)header_length);
    const unsigned char *header = image + 8;
    if (header[0] != '{')
        return header_fail(error, 0, "the header does not start with '{'");
    attn_status status = check_header_tokens(header, (size_t)header_length, error);
    if (status != ATTN_OK) return status;
    cJSON *root = NULL;
    status = attn_json_parse((const char *)header, (size_t)header_length, "safetensors header",
                             &root, error);
    if (status != ATTN_OK) return status;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return header_fail(error, 0, "the header is not a JSON object");
    }
    int64_t count = 0;
    const cJSON *metadata = NULL;
    for (const cJSON *item = root->child; item != NULL; item = item->next) {
        if (strcmp(item->string, "__metadata__") != 0) {
            ++count;
        } else if (metadata != NULL) {
            cJSON_Delete(root);
            return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: repeated __metadata__");
        } else {
            metadata = item;
        }
    }
    parsed_entry *entries = count ? calloc((size_t)count, sizeof *entries) : NULL;
    if (count && entries == NULL) {
        cJSON_Delete(root);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors: %lld entries",
                         (long long)count);
    }
    int64_t e = 0;
    for (const cJSON *item = root->child; item != NULL && status == ATTN_OK; item = item->next) {
        if (item == metadata) continue;
        size_t name_length = strlen(item->string);
        if (name_length >= ATTN_SAFETENSORS_NAME_CAPACITY) {
            status = attn_fail(error, ATTN_ERROR_FORMAT,
                               "safetensors: tensor name of %zu bytes, longer than %d ('%.48s...')",
                               name_length, ATTN_SAFETENSORS_NAME_CAPACITY - 1, item->string);
            break;
        }
        memcpy(entries[e].tensor.name, item->string, name_length + 1);
        status = parse_entry(item, &entries[e], error);
        ++e;
    }
    size_t data_offset = 8 + (size_t)header_length;
    if (status == ATTN_OK)
        status = validate_entries(entries, count, image + data_offset, byte_count - data_offset,
                                  error);
    if (status == ATTN_OK && metadata != NULL)
        status = add_image_metadata(file, metadata, error);
    if (status == ATTN_OK)
        status = append_shard(file, entries, count, bytes, byte_count, data_offset, path, mapped,
                              error);
    free(entries);
    cJSON_Delete(root);
    return status;
}

/* ---- the name index -------------------------------------------------------------------- */

static int compare_tensor_names(const void *a, const void *b) {
    const attn_safetensors_tensor *x = *(const attn_safetensors_tensor *const *)a,
                                  *y = *(const attn_safetensors_tensor *const *)b;
    return strcmp(x->name, y->name);
}

attn_status safetensors_index_names(attn_safetensors_file *file, attn_error *error) {
    safetensors_internal *in = safetensors_internal_of(file);
    if (in == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors bookkeeping");
    free(in->by_name);
    in->by_name = NULL;
    if (file->tensor_count == 0) return ATTN_OK;
    in->by_name = malloc((size_t)file->tensor_count * sizeof *in->by_name);
    if (in->by_name == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "safetensors name index");
    for (int64_t i = 0; i < file->tensor_count; ++i) in->by_name[i] = &file->tensors[i];
    qsort(in->by_name, (size_t)file->tensor_count, sizeof *in->by_name, compare_tensor_names);
    for (int64_t i = 1; i < file->tensor_count; ++i) {
        const attn_safetensors_tensor *a = in->by_name[i - 1], *b = in->by_name[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->shard == b->shard)
            return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: duplicate tensor '%s'",
                             a->name);
        const char *pa = file->shards[a->shard].path, *pb = file->shards[b->shard].path;
        return attn_fail(error, ATTN_ERROR_FORMAT, "safetensors: tensor '%s' in two shards, %s and %s",
                         a->name, pa ? pa : "?", pb ? pb : "?");
    }
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
    attn_status status = safetensors_add_image(file, bytes, byte_count, NULL, 0, error);
    if (status == ATTN_OK) status = safetensors_index_names(file, error);
    if (status != ATTN_OK) {
        attn_safetensors_free(file);
        return status;
    }
    file->bytes = bytes;
    file->byte_count = byte_count;
    return ATTN_OK;
}

/* ---- lookups ------------------------------------------------------------------------------ */

const attn_safetensors_tensor *attn_safetensors_find(const attn_safetensors_file *file,
                                                     const char *name) {
    if (file == NULL || name == NULL) return NULL;
    const safetensors_internal *in = file->internal;
    if (in == NULL || in->by_name == NULL) { /* a struct not built by the reader */
        for (int64_t i = 0; i < file->tensor_count; ++i)
            if (strcmp(file->tensors[i].name, name) == 0) return &file->tensors[i];
        return NULL;
    }
    int64_t low = 0, high = file->tensor_count;
    while (low < high) {
        int64_t middle = low + (high - low) / 2;
        int order = strcmp(in->by_name[middle]->name, name);
        if (order == 0) return in->by_name[middle];
        if (order < 0) low = middle + 1;
        else high = middle;
    }
    return NULL;
}

const char *attn_safetensors_metadata_value(const attn_safetensors_file *file, const char *key) {
    if (file == NULL || key == NULL) return NULL;
    for (int64_t i = 0; i < file->metadata_count; ++i)
        if (strcmp(file->metadata[i].key, key) == 0) return file->metadata[i].value;
    return NULL;
}
