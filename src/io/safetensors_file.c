/*
 * safetensors_file.c — safetensors files on disk: one file mapped read-only (mmap; read into
 * memory when the file cannot be mapped, e.g. a pipe) and parsed in place, so tensor data are
 * never copied (attn_safetensors_read); and checkpoints (attn_safetensors_open): a file, a
 * sharded checkpoint's model.safetensors.index.json, or a folder holding either, merged into
 * one attn_safetensors_file whose tensors span the shards.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/safetensors_internal.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "core/regular_file.h"

/* Index files larger than this are refused (a 90k-tensor index is about 10 MB). */
#define SAFETENSORS_MAX_INDEX_BYTES ((size_t)100 << 20)

static attn_status limit_fail(attn_error *error, const char *path, size_t used, size_t more,
                              size_t limit) {
    return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                     "%s: %zu bytes (with %zu already mapped) exceed memory_limit_bytes = %zu",
                     path, more, used, limit);
}

/* Reads the rest of `fd` into a malloc'ed buffer, refusing more than `cap` bytes (0 = none). */
static attn_status read_all(int fd, const char *path, size_t cap, size_t used, size_t limit,
                            void **buffer, size_t *length, attn_error *error) {
    size_t capacity = 1 << 16, have = 0;
    unsigned char *data = malloc(capacity);
    if (data == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: read buffer", path);
    for (;;) {
        if (have == capacity) {
            unsigned char *bigger = capacity <= SIZE_MAX / 2 ? realloc(data, 2 * capacity) : NULL;
            if (bigger == NULL) {
                free(data);
                return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: more than %zu bytes", path,
                                 capacity);
            }
            data = bigger;
            capacity *= 2;
        }
        ssize_t got = read(fd, data + have, capacity - have);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int code = errno;
            free(data);
            return attn_fail(error, ATTN_ERROR_IO, "%s: read failed (%s)", path, strerror(code));
        }
        if (got == 0) break;
        have += (size_t)got;
        if (cap > 0 && have > cap) {
            free(data);
            return attn_fail(error, ATTN_ERROR_FORMAT, "%s: more than %zu bytes", path, cap);
        }
        if (limit > 0 && have > limit - (used < limit ? used : limit)) {
            free(data);
            return limit_fail(error, path, used, have, limit);
        }
    }
    *buffer = data;
    *length = have;
    return ATTN_OK;
}

/* How long a FIFO may go without a writer before it is refused (its open does not wait:
 * attn_io_open). */
#define SAFETENSORS_FIFO_WAIT_MS 10000

/* Reads exactly `count` bytes (fewer only at the end of the stream); -1 on a read error. */
static ssize_t read_fully(int fd, unsigned char *data, size_t count) {
    size_t have = 0;
    while (have < count) {
        const ssize_t got = read(fd, data + have, count - have);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) break;
        have += (size_t)got;
    }
    return (ssize_t)have;
}

/* The end of the data section a header declares: the largest data_offsets[1] of its
 * entries (0 when there is none or the header is malformed: the parser reports that). */
static uint64_t declared_data_end(const unsigned char *header, size_t length) {
    cJSON *root = NULL;
    if (attn_json_parse((const char *)header, length, "safetensors header", &root, NULL) !=
        ATTN_OK)
        return 0;
    uint64_t end = 0;
    for (const cJSON *item = root != NULL ? root->child : NULL; item != NULL; item = item->next) {
        if (item->string == NULL || strcmp(item->string, "__metadata__") == 0) continue;
        const cJSON *offsets = attn_json_member(item, "data_offsets");
        const cJSON *last = cJSON_IsArray(offsets) ? cJSON_GetArrayItem(offsets, 1) : NULL;
        if (cJSON_IsNumber(last) && last->valuedouble > (double)end &&
            last->valuedouble < 18446744073709551616.0)
            end = (uint64_t)last->valuedouble;
    }
    cJSON_Delete(root);
    return end;
}

/* A safetensors image from a stream that cannot be mapped (a pipe), read no further than its
 * header says: the 8-byte header length first (refused past the format's limit before a
 * buffer is sized), the header, then the data bytes its data_offsets reach. An endless
 * stream is never read to its end. */
static attn_status read_stream_image(int fd, const char *path, size_t used, size_t limit,
                                     void **buffer, size_t *length, attn_error *error) {
    unsigned char prefix[8];
    const ssize_t got = read_fully(fd, prefix, sizeof prefix);
    if (got < 0)
        return attn_fail(error, ATTN_ERROR_IO, "%s: read failed (%s)", path, strerror(errno));
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = header_length << 8 | prefix[i];
    if (got == (ssize_t)sizeof prefix && header_length > ATTN_SAFETENSORS_MAX_HEADER_BYTES)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "%s: header length %llu exceeds the limit of %llu bytes (100 MiB)", path,
                         (unsigned long long)header_length,
                         (unsigned long long)ATTN_SAFETENSORS_MAX_HEADER_BYTES);
    if (got < (ssize_t)sizeof prefix) header_length = 0;
    size_t total = (size_t)got + (size_t)header_length;
    unsigned char *data = malloc(total > 0 ? total : 1);
    if (data == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: read buffer", path);
    memcpy(data, prefix, (size_t)got);
    ssize_t more = read_fully(fd, data + got, (size_t)header_length);
    if (more < 0) {
        const int code = errno;
        free(data);
        return attn_fail(error, ATTN_ERROR_IO, "%s: read failed (%s)", path, strerror(code));
    }
    total = (size_t)got + (size_t)more;
    if ((uint64_t)more == header_length && header_length > 0) {
        const uint64_t end = declared_data_end(data + 8, (size_t)header_length);
        if (end > (uint64_t)(SIZE_MAX / 2) - total) {
            free(data);
            return attn_fail(error, ATTN_ERROR_OVERFLOW, "%s: data_offsets reach byte %llu", path,
                             (unsigned long long)end);
        }
        if (limit > 0 && (used > limit || total + (size_t)end > limit - used)) {
            free(data);
            return limit_fail(error, path, used, total + (size_t)end, limit);
        }
        unsigned char *bigger = end > 0 ? realloc(data, total + (size_t)end) : data;
        if (bigger == NULL) {
            free(data);
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: %llu data bytes", path,
                             (unsigned long long)end);
        }
        data = bigger;
        more = read_fully(fd, data + total, (size_t)end);
        if (more < 0) {
            const int code = errno;
            free(data);
            return attn_fail(error, ATTN_ERROR_IO, "%s: read failed (%s)", path, strerror(code));
        }
        total += (size_t)more;
    }
    *buffer = data;
    *length = total;
    return ATTN_OK;
}

attn_status safetensors_load_image(attn_safetensors_file *file, const char *path,
                                   size_t memory_limit_bytes, size_t *memory_used,
                                   const void **bytes, size_t *byte_count, int *mapped,
                                   attn_error *error) {
    /* Opened without blocking; a regular file is mapped, a FIFO (a pipe) read as far as its
     * header says once a writer has sent something, anything else refused. */
    struct stat st;
    int fd = attn_io_open(path, &st, error);
    if (fd < 0) return ATTN_ERROR_IO;
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return attn_fail(error, ATTN_ERROR_IO, "%s: a folder, not a file", path);
    }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        close(fd);
        return attn_fail(error, ATTN_ERROR_IO, "%s: %s, not a regular file or a pipe", path,
                         attn_io_file_kind(st.st_mode));
    }
    if (S_ISFIFO(st.st_mode)) {
        struct pollfd wait = {fd, POLLIN, 0};
        int ready;
        do ready = poll(&wait, 1, SAFETENSORS_FIFO_WAIT_MS);
        while (ready < 0 && errno == EINTR);
        if (ready <= 0) {
            close(fd);
            return attn_fail(error, ATTN_ERROR_IO,
                             "%s: a FIFO with nothing written to it within %d s (no writer?)",
                             path, SAFETENSORS_FIFO_WAIT_MS / 1000);
        }
    }
    size_t used = *memory_used;
    void *address = NULL;
    size_t length = 0;
    int is_mapped = 0;
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
            close(fd);
            return attn_fail(error, ATTN_ERROR_OVERFLOW, "%s: %lld bytes", path,
                             (long long)st.st_size);
        }
        length = (size_t)st.st_size;
        if (memory_limit_bytes > 0 && (used > memory_limit_bytes ||
                                       length > memory_limit_bytes - used)) {
            close(fd);
            return limit_fail(error, path, used, length, memory_limit_bytes);
        }
        address = mmap(NULL, length, PROT_READ, MAP_PRIVATE, fd, 0);
        if (address == MAP_FAILED) address = NULL;
        else is_mapped = 1;
    }
    if (!is_mapped) {
        attn_status status =
            S_ISFIFO(st.st_mode)
                ? read_stream_image(fd, path, used, memory_limit_bytes, &address, &length, error)
                : read_all(fd, path, 0, used, memory_limit_bytes, &address, &length, error);
        if (status != ATTN_OK) {
            close(fd);
            return status;
        }
    }
    close(fd);
    attn_status status = safetensors_keep_image(file, address, length, is_mapped, error);
    if (status != ATTN_OK) return status;
    *memory_used = used + length;
    *bytes = address;
    *byte_count = length;
    *mapped = is_mapped;
    return ATTN_OK;
}

/* Maps and parses one file into `file` (appending a shard); messages name the path. */
static attn_status add_file(attn_safetensors_file *file, const char *path,
                            size_t memory_limit_bytes, size_t *memory_used, attn_error *error) {
    const void *bytes;
    size_t byte_count;
    int mapped;
    attn_status status = safetensors_load_image(file, path, memory_limit_bytes, memory_used,
                                                &bytes, &byte_count, &mapped, error);
    if (status != ATTN_OK) return status;
    status = safetensors_add_image(file, bytes, byte_count, path, mapped, error);
    if (status != ATTN_OK) safetensors_prefix_message(error, path);
    return status;
}

attn_status attn_safetensors_read(const char *path, size_t memory_limit_bytes,
                                  attn_safetensors_file *file, attn_error *error) {
    if (file == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file = NULL");
    memset(file, 0, sizeof *file);
    if (path == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path = NULL");
    size_t used = 0;
    attn_status status = add_file(file, path, memory_limit_bytes, &used, error);
    if (status == ATTN_OK) {
        status = safetensors_index_names(file, error);
        if (status != ATTN_OK) safetensors_prefix_message(error, path);
    }
    if (status != ATTN_OK) {
        attn_safetensors_free(file);
        return status;
    }
    file->bytes = file->shards[0].bytes;
    file->byte_count = file->shards[0].byte_count;
    return ATTN_OK;
}

/* ---- sharded checkpoints ------------------------------------------------------------------- */

/* A weight_map entry: tensor name -> shard file name. */
typedef struct index_entry {
    const char *tensor;
    const char *shard;
} index_entry;

static int compare_index_by_tensor(const void *a, const void *b) {
    return strcmp(((const index_entry *)a)->tensor, ((const index_entry *)b)->tensor);
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard name must stay inside the index's folder: relative, no ".." component. */
static int shard_name_ok(const char *name) {
    if (name[0] == '\0' || name[0] == '/') return 0;
    for (const char *part = name; *part;) {
        const char *end = strchr(part, '/');
        size_t n = end ? (size_t)(end - part) : strlen(part);
        if (n == 2 && part[0] == '.' && part[1] == '.') return 0;
        if (end == NULL) break;
        part = end + 1;
    }
    return 1;
}

/* The index's "metadata" object: strings as they are, other values as their JSON text. */
static attn_status add_index_metadata(attn_safetensors_file *file, const cJSON *object,
                                      const char *path, attn_error *error) {
    if (object == NULL) return ATTN_OK;
    if (!cJSON_IsObject(object))
        return attn_fail(error, ATTN_ERROR_FORMAT, "%s: \"metadata\" is not an object", path);
    for (const cJSON *m = object->child; m != NULL; m = m->next) {
        for (const cJSON *other = object->child; other != m; other = other->next)
            if (strcmp(other->string, m->string) == 0)
                return attn_fail(error, ATTN_ERROR_FORMAT, "%s: metadata key '%.64s' repeated",
                                 path, m->string);
        char *key = safetensors_copy_string(file, m->string, strlen(m->string));
        char *value = NULL;
        if (cJSON_IsString(m)) {
            value = safetensors_copy_string(file, m->valuestring, strlen(m->valuestring));
        } else {
            char *printed = cJSON_PrintUnformatted(m);
            if (printed) value = safetensors_copy_string(file, printed, strlen(printed));
            cJSON_free(printed);
        }
        if (key == NULL || value == NULL)
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: metadata", path);
        attn_status status = safetensors_add_metadata(file, key, value, error);
        if (status != ATTN_OK) return status;
    }
    return ATTN_OK;
}

/* Checks the weight_map against the merged shards: every entry found in its shard, every
 * tensor listed. entries: sorted by tensor; shard_names[s] is the name of file->shards[s]. */
static attn_status check_weight_map(const attn_safetensors_file *file, const index_entry *entries,
                                    int64_t count, const char *const *shard_names,
                                    const char *path, attn_error *error) {
    for (int64_t i = 0; i < count; ++i) {
        const attn_safetensors_tensor *t = attn_safetensors_find(file, entries[i].tensor);
        if (t == NULL)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: weight_map lists tensor '%s' in %s, which does not hold it",
                             path, entries[i].tensor, entries[i].shard);
        if (strcmp(shard_names[t->shard], entries[i].shard) != 0)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: weight_map lists tensor '%s' in %s, but it is in %s", path,
                             entries[i].tensor, entries[i].shard, shard_names[t->shard]);
    }
    if (file->tensor_count != count) /* names are unique on both sides: find the extra one */
        for (int64_t i = 0; i < file->tensor_count; ++i) {
            index_entry key = {file->tensors[i].name, NULL};
            if (bsearch(&key, entries, (size_t)count, sizeof *entries, compare_index_by_tensor) ==
                NULL)
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "%s: tensor '%s' of %s is not listed in weight_map", path,
                                 file->tensors[i].name, shard_names[file->tensors[i].shard]);
        }
    return ATTN_OK;
}

attn_status safetensors_open_index_text(const char *text, size_t length, const char *path,
                                        size_t memory_limit_bytes, attn_safetensors_file *file,
                                        attn_error *error) {
    cJSON *root = NULL;
    attn_status status = attn_json_parse(text, length, path, &root, error);
    if (status != ATTN_OK) return status;
    const cJSON *weight_map = attn_json_member(root, "weight_map");
    index_entry *entries = NULL;
    const char **shard_names = NULL, **order = NULL;
    int64_t count = 0, shard_count = 0;
    if (!cJSON_IsObject(root) || !cJSON_IsObject(weight_map))
        status = attn_fail(error, ATTN_ERROR_FORMAT, "%s: not an object with a \"weight_map\" "
                                                     "object", path);
    if (status == ATTN_OK) status = add_index_metadata(file, attn_json_member(root, "metadata"),
                                                       path, error);
    if (status == ATTN_OK) {
        count = cJSON_GetArraySize(weight_map);
        entries = calloc((size_t)count + 1, sizeof *entries);
        order = calloc((size_t)count + 1, sizeof *order);
        shard_names = calloc((size_t)count + 1, sizeof *shard_names);
        if (entries == NULL || order == NULL || shard_names == NULL)
            status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: %lld entries", path,
                               (long long)count);
    }
    int64_t e = 0;
    for (const cJSON *m = status == ATTN_OK ? weight_map->child : NULL; m != NULL; m = m->next) {
        if (!cJSON_IsString(m) || !shard_name_ok(m->valuestring)) {
            status = attn_fail(error, ATTN_ERROR_FORMAT,
                               "%s: weight_map['%.64s'] is not a shard file name inside the "
                               "folder (a relative path without '..')",
                               path, m->string);
            break;
        }
        entries[e] = (index_entry){m->string, m->valuestring};
        order[e++] = m->valuestring;
    }
    if (status == ATTN_OK && count > 1) {
        qsort(entries, (size_t)count, sizeof *entries, compare_index_by_tensor);
        for (int64_t i = 1; i < count && status == ATTN_OK; ++i)
            if (strcmp(entries[i - 1].tensor, entries[i].tensor) == 0)
                status = attn_fail(error, ATTN_ERROR_FORMAT, "%s: weight_map lists '%s' twice",
                                   path, entries[i].tensor);
    }
    if (status == ATTN_OK && count > 0) { /* the distinct shard names, sorted */
        qsort(order, (size_t)count, sizeof *order, compare_strings);
        for (int64_t i = 0; i < count; ++i)
            if (shard_count == 0 || strcmp(shard_names[shard_count - 1], order[i]) != 0)
                shard_names[shard_count++] = order[i];
    }
    /* The shards live next to the index. */
    const char *slash = strrchr(path, '/');
    size_t folder_length = slash ? (size_t)(slash - path) + 1 : 0;
    size_t used = 0;
    for (int64_t s = 0; s < shard_count && status == ATTN_OK; ++s) {
        size_t name_length = strlen(shard_names[s]);
        char *shard_path = malloc(folder_length + name_length + 1);
        if (shard_path == NULL) {
            status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: shard path", path);
            break;
        }
        memcpy(shard_path, path, folder_length);
        memcpy(shard_path + folder_length, shard_names[s], name_length + 1);
        status = add_file(file, shard_path, memory_limit_bytes, &used, error);
        free(shard_path);
    }
    if (status == ATTN_OK) status = safetensors_index_names(file, error);
    if (status == ATTN_OK)
        status = check_weight_map(file, entries, count, shard_names, path, error);
    free(entries);
    free(order);
    free(shard_names);
    cJSON_Delete(root);
    return status;
}

/* Opens the shards an index file lists. */
static attn_status open_index(const char *path, size_t memory_limit_bytes,
                              attn_safetensors_file *file, attn_error *error) {
    struct stat st;
    int fd = attn_io_open(path, &st, error);
    if (fd < 0) return ATTN_ERROR_IO;
    attn_status opened = attn_io_require_regular(fd, &st, path, error);
    if (opened != ATTN_OK) return opened;
    void *text = NULL;
    size_t length = 0;
    attn_status status =
        read_all(fd, path, SAFETENSORS_MAX_INDEX_BYTES, 0, 0, &text, &length, error);
    close(fd);
    if (status != ATTN_OK) return status;
    status = safetensors_open_index_text(text, length, path, memory_limit_bytes, file, error);
    free(text);
    return status;
}

static int is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *text, const char *suffix) {
    size_t n = strlen(text), m = strlen(suffix);
    return n >= m && strcmp(text + n - m, suffix) == 0;
}

/* path + "/" + name, malloc'ed (NULL when out of memory). */
static char *join_path(const char *folder, const char *name) {
    size_t n = strlen(folder), m = strlen(name);
    char *joined = malloc(n + m + 2);
    if (joined != NULL)
        snprintf(joined, n + m + 2, "%s%s%s", folder, n && folder[n - 1] == '/' ? "" : "/", name);
    return joined;
}

/*
 * What to open in a checkpoint folder: model.safetensors.index.json, else model.safetensors,
 * else the folder's only *.safetensors.index.json, else its only *.safetensors file (e.g.
 * adapter_model.safetensors). *candidate: malloc'ed path; *is_index: 1 for an index.
 */
static attn_status choose_in_folder(const char *folder, char **candidate, int *is_index,
                                    attn_error *error) {
    static const char *const preferred[2] = {"model.safetensors.index.json", "model.safetensors"};
    for (int c = 0; c < 2; ++c) {
        char *path = join_path(folder, preferred[c]);
        if (path == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s", folder);
        if (is_regular_file(path)) {
            *candidate = path;
            *is_index = c == 0;
            return ATTN_OK;
        }
        free(path);
    }
    DIR *dir = opendir(folder);
    if (dir == NULL)
        return attn_fail(error, ATTN_ERROR_IO, "%s: cannot list (%s)", folder, strerror(errno));
    char *found[2] = {NULL, NULL}; /* [0]: an index, [1]: a .safetensors file */
    int counts[2] = {0, 0};
    attn_status status = ATTN_OK;
    for (struct dirent *entry; status == ATTN_OK && (entry = readdir(dir)) != NULL;) {
        int kind = ends_with(entry->d_name, ".safetensors.index.json") ? 0
                   : ends_with(entry->d_name, ".safetensors")          ? 1
                                                                        : -1;
        if (kind < 0) continue;
        char *path = join_path(folder, entry->d_name);
        if (path == NULL) {
            status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s", folder);
        } else if (!is_regular_file(path)) {
            free(path);
        } else {
            ++counts[kind];
            free(found[kind]);
            found[kind] = path;
        }
    }
    closedir(dir);
    int kind = counts[0] > 0 ? 0 : 1;
    if (status == ATTN_OK && counts[kind] == 0)
        status = attn_fail(error, ATTN_ERROR_IO,
                           "%s: a folder without model.safetensors.index.json, model.safetensors "
                           "or another .safetensors file", folder);
    else if (status == ATTN_OK && counts[kind] > 1)
        status = attn_fail(error, ATTN_ERROR_IO,
                           "%s: a folder with %d %s files and no model.safetensors.index.json or "
                           "model.safetensors: open one of them", folder, counts[kind],
                           kind == 0 ? "*.safetensors.index.json" : ".safetensors");
    if (status == ATTN_OK) {
        *candidate = found[kind];
        found[kind] = NULL;
        *is_index = kind == 0;
    }
    free(found[0]);
    free(found[1]);
    return status;
}

attn_status attn_safetensors_open(const char *path, size_t memory_limit_bytes,
                                  attn_safetensors_file *file, attn_error *error) {
    if (file == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file = NULL");
    memset(file, 0, sizeof *file);
    if (path == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path = NULL");
    struct stat st;
    if (stat(path, &st) != 0)
        return attn_fail(error, ATTN_ERROR_IO, "%s: cannot open (%s)", path, strerror(errno));
    if (!S_ISDIR(st.st_mode) && !ends_with(path, ".json"))
        return attn_safetensors_read(path, memory_limit_bytes, file, error);
    attn_status status;
    if (S_ISDIR(st.st_mode)) {
        char *candidate = NULL;
        int is_index = 0;
        status = choose_in_folder(path, &candidate, &is_index, error);
        if (status == ATTN_OK && !is_index) {
            status = attn_safetensors_read(candidate, memory_limit_bytes, file, error);
            free(candidate);
            return status;
        }
        if (status == ATTN_OK) status = open_index(candidate, memory_limit_bytes, file, error);
        free(candidate);
    } else {
        status = open_index(path, memory_limit_bytes, file, error);
    }
    if (status != ATTN_OK) {
        attn_safetensors_free(file);
        return status;
    }
    if (file->shard_count == 1) {
        file->bytes = file->shards[0].bytes;
        file->byte_count = file->shards[0].byte_count;
    }
    return ATTN_OK;
}
