/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader: every input is given
 *  1. to attn_safetensors_parse as a file image (the cJSON header parser, the lexical checks,
 *     the entry validation), and
 *  2. to the index-file parser (safetensors_open_index_text) as the JSON of a
 *     model.safetensors.index.json placed in a folder holding two valid shards,
 *     "model-00001-of-00002.safetensors" (tensors a, b) and "model-00002-of-00002.safetensors"
 *     (tensor c), made once per process; so weight maps that name them, miss them, list
 *     tensors twice or in the wrong shard, or name paths outside the folder are explored.
 * Any input must give a status, never a crash, overread or leak; on error the file is left
 * empty; on success the description must keep the documented guarantees: ranks 0..4,
 * byte_count = numel * dtype size, every tensor's data inside its shard's image (the input,
 * or the mapped shard), names NUL-terminated and unique, attn_safetensors_find finding each
 * one, metadata strings non-NULL; every tensor and metadata byte is read (so ASan sees a bad
 * pointer). The same bytes as a file (attn_safetensors_read) must read as they parse (both
 * fail, or both give the same tensors), and sent through a FIFO by a writer that then closes
 * it, must read as they parse whenever they parse (a pipe is read as far as the header says),
 * within 5 s. Once per process, that path as a folder and a link to /dev/zero must each be
 * refused with ATTN_ERROR_IO naming the path within a second, and a FIFO whose writer sends
 * nothing refused likewise (an empty image: FORMAT) (fuzz/special_paths.h; a FIFO that never gets a writer waits 10 s by design, which
 * tests/test_io_special_files.c covers). A violation aborts (a finding).
 */
#define _POSIX_C_SOURCE 200809L

#include "special_paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn.h"
#include "attn_io.h"
#include "io/safetensors_internal.h"

static void finding(const char *what, const char *name) {
    fprintf(stderr, "fuzz_safetensors: %s (%s)\n", what, name ? name : "");
    abort();
}

/* Checks a parsed file; returns a checksum of every byte it describes. */
static unsigned check_file(const attn_safetensors_file *file) {
    unsigned checksum = 0;
    for (int64_t t = 0; t < file->tensor_count; ++t) {
        const attn_safetensors_tensor *tensor = &file->tensors[t];
        if (memchr(tensor->name, '\0', sizeof tensor->name) == NULL)
            finding("name not terminated", NULL);
        if (tensor->rank < 0 || tensor->rank > ATTN_MAX_RANK) finding("rank", tensor->name);
        if (tensor->shard < 0 || tensor->shard >= file->shard_count) finding("shard", tensor->name);
        size_t elements = 1;
        for (int d = 0; d < tensor->rank; ++d) {
            if (tensor->shape[d] < 0) finding("negative dimension", tensor->name);
            elements *= (size_t)tensor->shape[d];
        }
        size_t element = attn_dtype_size(tensor->dtype);
        if (tensor->dtype == ATTN_SAFETENSORS_DTYPE_OTHER) /* 1, 2, 4 or 8 bytes */
            element = elements ? tensor->byte_count / elements : 1;
        if ((element != 1 && element != 2 && element != 4 && element != 8) ||
            elements * element != tensor->byte_count)
            finding("byte_count != numel * dtype size", tensor->name);
        if (memchr(tensor->stored_dtype, '\0', sizeof tensor->stored_dtype) == NULL)
            finding("stored_dtype not terminated", tensor->name);
        const uint8_t *begin = file->shards[tensor->shard].bytes,
                      *end = begin + file->shards[tensor->shard].byte_count;
        const uint8_t *first = tensor->data;
        if (tensor->byte_count > 0 &&
            (first < begin || first > end || tensor->byte_count > (size_t)(end - first)))
            finding("data outside the shard's image", tensor->name);
        for (size_t n = 0; n < tensor->byte_count; ++n) checksum += first[n];
        if (attn_safetensors_find(file, tensor->name) != tensor) finding("find", tensor->name);
    }
    for (int64_t m = 0; m < file->metadata_count; ++m) {
        if (file->metadata[m].key == NULL || file->metadata[m].value == NULL)
            finding("metadata NULL", NULL);
        checksum += (unsigned)strlen(file->metadata[m].key) + (unsigned)strlen(file->metadata[m].value);
    }
    return checksum;
}

static void check_empty(const attn_safetensors_file *file) {
    if (file->tensors != NULL || file->metadata != NULL || file->shards != NULL ||
        file->internal != NULL || file->tensor_count != 0)
        finding("allocations kept on error", NULL);
}

/* The folder with the two shards, made on first use and removed at exit. */
static char shard_folder[64], index_path[96];

static void remove_shards(void) {
    char path[160];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", shard_folder);
    remove(path);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", shard_folder);
    remove(path);
    rmdir(shard_folder);
}

static int make_shards(void) {
    if (index_path[0]) return 1;
    snprintf(shard_folder, sizeof shard_folder, "/tmp/attn_fuzz_shards_XXXXXX");
    if (mkdtemp(shard_folder) == NULL) return 0;
    float a[4] = {1, 2, 3, 4}, c[2] = {5, 6};
    uint16_t b[3] = {0x3F80, 0x4000, 0x4040};
    attn_safetensors_tensor first[2] = {
        {.name = "a", .dtype = ATTN_DTYPE_F32, .rank = 2, .shape = {2, 2}, .data = a},
        {.name = "b", .dtype = ATTN_DTYPE_BF16, .rank = 1, .shape = {3}, .data = b}};
    attn_safetensors_tensor second[1] = {
        {.name = "c", .dtype = ATTN_DTYPE_F32, .rank = 1, .shape = {2}, .data = c}};
    attn_safetensors_metadata format = {"format", "pt"};
    char path[160];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", shard_folder);
    if (attn_safetensors_write(path, first, 2, &format, 1, NULL) != ATTN_OK) return 0;
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", shard_folder);
    if (attn_safetensors_write(path, second, 1, NULL, 0, NULL) != ATTN_OK) return 0;
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", shard_folder);
    atexit(remove_shards);
    return 1;
}

/* A file read from a path has the tensors (names, dtypes, bytes) of `parsed`. */
static void check_same_tensors(const attn_safetensors_file *read,
                               const attn_safetensors_file *parsed, const char *how) {
    if (read->tensor_count != parsed->tensor_count) finding("tensor count differs", how);
    for (int64_t t = 0; t < read->tensor_count; ++t) {
        const attn_safetensors_tensor *a = &read->tensors[t], *b = &parsed->tensors[t];
        if (strcmp(a->name, b->name) != 0 || a->dtype != b->dtype || a->rank != b->rank ||
            a->byte_count != b->byte_count ||
            (a->byte_count > 0 && memcmp(a->data, b->data, a->byte_count) != 0))
            finding("tensor differs from the parsed one", how);
    }
}

/* The path as a folder or a link to /dev/zero (ATTN_ERROR_IO), a FIFO whose writer sends
 * nothing (an error naming the path), each refused within a second. */
static void check_special_paths(void) {
    for (int kind = SPECIAL_FIFO; kind < SPECIAL_KINDS; ++kind) {
        special_feed feed;
        const int fed = kind == SPECIAL_FIFO;
        if (fed ? !special_feed_begin(&feed, NULL, 0) : !special_make((special_kind)kind))
            continue;
        attn_safetensors_file file;
        attn_error error;
        const double start = special_now();
        const attn_status status = attn_safetensors_read(special_path, 0, &file, &error);
        if (fed) special_feed_end(&feed);
        if (special_now() - start > 1.0) finding("a special file held the reader", NULL);
        check_empty(&file);
        /* (an empty stream is a malformed image: FORMAT) */
        if ((fed ? status == ATTN_OK : status != ATTN_ERROR_IO) ||
            strstr(error.message, special_path) == NULL) {
            fprintf(stderr, "fuzz_safetensors: %s: %s %s\n",
                    fed ? "a FIFO whose writer sends nothing" : special_kind_names[kind],
                    attn_status_name(status), error.message);
            finding("a special file was not refused with ATTN_ERROR_IO naming it", NULL);
        }
    }
    special_clear();
}

/* The input as a regular file and through a FIFO, against its parse (`parsed`, valid when
 * parse_status is ATTN_OK). */
static void check_file_reads(const uint8_t *data, size_t size, attn_status parse_status,
                             const attn_safetensors_file *parsed) {
    static int special_checked;
    if (!special_setup()) return;
    if (!special_checked) {
        special_checked = 1;
        check_special_paths();
    }
    attn_safetensors_file file;
    attn_error error;
    if (special_write_regular(data, size)) {
        const attn_status status = attn_safetensors_read(special_path, (size_t)64 << 20, &file,
                                                         &error);
        if ((status == ATTN_OK) != (parse_status == ATTN_OK))
            finding("the file reads otherwise than the bytes parse", error.message);
        if (status == ATTN_OK) check_same_tensors(&file, parsed, "regular file");
        else check_empty(&file);
        attn_safetensors_free(&file);
    }
    special_feed feed;
    if (!special_feed_begin(&feed, data, size)) return;
    const double start = special_now();
    const attn_status status = attn_safetensors_read(special_path, (size_t)64 << 20, &file, &error);
    special_feed_end(&feed);
    if (special_now() - start > 5.0) finding("the FIFO held the reader", NULL);
    if (parse_status == ATTN_OK && status != ATTN_OK)
        finding("bytes that parse do not read through a FIFO", error.message);
    if (status == ATTN_OK && parse_status == ATTN_OK) check_same_tensors(&file, parsed, "FIFO");
    if (status != ATTN_OK) check_empty(&file);
    attn_safetensors_free(&file);
    special_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned checksum = 0;
    attn_safetensors_file file;
    attn_error error;
    attn_status status = attn_safetensors_parse(data, size, (size_t)64 << 20, &file, &error);
    if (status != ATTN_OK) {
        check_empty(&file);
    } else {
        if (file.shard_count != 1 || file.shards[0].bytes != data) finding("image shard", NULL);
        checksum += check_file(&file);
    }
    check_file_reads(data, size, status, &file);
    if (status == ATTN_OK) attn_safetensors_free(&file);

    if (make_shards()) {
        memset(&file, 0, sizeof file);
        status = safetensors_open_index_text((const char *)data, size, index_path, 0, &file,
                                             &error);
        if (status == ATTN_OK) checksum += check_file(&file);
        attn_safetensors_free(&file);
    }
    return checksum == 0xFFFFFFFFu ? -1 : 0; /* uses the reads of every byte */
}
