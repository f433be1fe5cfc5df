/*
 * safetensors_internal.h — what the safetensors files of src/io share: the bookkeeping
 * behind attn_safetensors_file.internal (a name index for O(log n) lookups, the storage the
 * struct owns: mappings, read images, strings) and the steps of building a parsed file,
 * one image after another (attn_safetensors_parse parses one; attn_safetensors_open merges
 * the shards of a checkpoint). Internal to libattn.
 */
#ifndef ATTN_IO_SAFETENSORS_INTERNAL_H
#define ATTN_IO_SAFETENSORS_INTERNAL_H

#include "core/internal.h"
#include "attn_io.h"

/* One image the file owns: munmap'ed (mapped = 1) or free'd. */
typedef struct safetensors_image {
    void *address;
    size_t length;
    int mapped;
} safetensors_image;

typedef struct safetensors_internal {
    const attn_safetensors_tensor **by_name; /* tensor_count pointers sorted by name */
    safetensors_image *images;
    int64_t image_count;
    char **blocks; /* malloc'ed strings (metadata, paths) */
    int64_t block_count;
    int64_t tensor_capacity, metadata_capacity; /* allocated lengths of the file's lists */
} safetensors_internal;

/* The file's bookkeeping, allocated on first use; NULL when out of memory. */
safetensors_internal *safetensors_internal_of(attn_safetensors_file *file);

/* Takes ownership of a malloc'ed string; returns it, or NULL (and frees it) on failure. */
char *safetensors_keep_string(attn_safetensors_file *file, char *text);
/* Copies text[0, length) into a string the file owns (NUL-terminated); NULL when out of
 * memory. */
char *safetensors_copy_string(attn_safetensors_file *file, const char *text, size_t length);
/* Takes ownership of an image (mapped or malloc'ed); ATTN_ERROR_OUT_OF_MEMORY otherwise
 * (the image is then released). */
attn_status safetensors_keep_image(attn_safetensors_file *file, void *address, size_t length,
                                   int mapped, attn_error *error);
/* Appends a metadata entry (the strings must belong to the file). */
attn_status safetensors_add_metadata(attn_safetensors_file *file, const char *key,
                                     const char *value, attn_error *error);

/* Appends a shard (its image bytes[0, byte_count); path may be NULL; mapped as in
 * attn_safetensors_shard) to `file`: parses its header, appends a shard entry, its tensors
 * (in data-offset order) and its metadata. Messages are not prefixed with the path. */
attn_status safetensors_add_image(attn_safetensors_file *file, const void *bytes,
                                  size_t byte_count, const char *path, int mapped,
                                  attn_error *error);

/* Builds the name index; FORMAT error when a name repeats (naming both shards when they
 * differ). Call once every image is added. */
attn_status safetensors_index_names(attn_safetensors_file *file, attn_error *error);

/* Maps (or reads) `path` into memory the file then owns; *bytes / *byte_count receive the
 * image. memory_used / memory_limit_bytes account for the images of a checkpoint. */
attn_status safetensors_load_image(attn_safetensors_file *file, const char *path,
                                   size_t memory_limit_bytes, size_t *memory_used,
                                   const void **bytes, size_t *byte_count, int *mapped,
                                   attn_error *error);

/* The index file's core (the fuzzer's entry point for index files): text[0, length) is the
 * JSON of an index at `path` (shards are looked up next to it; messages name it). Appends
 * the shards to an empty `file` and builds its name index; on error the caller frees it. */
attn_status safetensors_open_index_text(const char *text, size_t length, const char *path,
                                        size_t memory_limit_bytes, attn_safetensors_file *file,
                                        attn_error *error);

/* Rewrites error->message as "PREFIX: MESSAGE" (keeps the status). */
void safetensors_prefix_message(attn_error *error, const char *prefix);

#endif /* ATTN_IO_SAFETENSORS_INTERNAL_H */
