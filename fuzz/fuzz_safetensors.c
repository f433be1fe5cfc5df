/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors parser (attn_safetensors_parse,
 * the core of attn_safetensors_read). Any input must give a status, never a crash, overread or
 * leak; on success the description must be consistent with the documented guarantees: ranks
 * 0..4, byte_count = numel * dtype size, every tensor's data inside the input, names
 * NUL-terminated and unique, attn_safetensors_find finding each one; every tensor's bytes are
 * read (so ASan sees a bad pointer). A violation aborts (a finding).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_io.h"

static void finding(const char *what, const char *name) {
    fprintf(stderr, "fuzz_safetensors: %s (%s)\n", what, name ? name : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_safetensors_file file;
    attn_error error;
    attn_status status = attn_safetensors_parse(data, size, (size_t)64 << 20, &file, &error);
    if (status != ATTN_OK) {
        if (file.tensors != NULL || file.metadata != NULL)
            finding("allocations kept on error", NULL);
        return 0;
    }
    const uint8_t *end = data + size;
    unsigned checksum = 0;
    for (int64_t t = 0; t < file.tensor_count; ++t) {
        const attn_safetensors_tensor *tensor = &file.tensors[t];
        if (memchr(tensor->name, '\0', sizeof tensor->name) == NULL)
            finding("name not terminated", NULL);
        if (tensor->rank < 0 || tensor->rank > ATTN_MAX_RANK) finding("rank", tensor->name);
        size_t elements = 1;
        for (int d = 0; d < tensor->rank; ++d) {
            if (tensor->shape[d] < 0) finding("negative dimension", tensor->name);
            elements *= (size_t)tensor->shape[d];
        }
        if (elements * attn_dtype_size(tensor->dtype) != tensor->byte_count)
            finding("byte_count != numel * dtype size", tensor->name);
        const uint8_t *first = tensor->data;
        if (tensor->byte_count > 0 &&
            (first < data || first > end || tensor->byte_count > (size_t)(end - first)))
            finding("data outside the input", tensor->name);
        for (size_t n = 0; n < tensor->byte_count; ++n) checksum += first[n];
        if (attn_safetensors_find(&file, tensor->name) != tensor) finding("find", tensor->name);
    }
    for (int64_t m = 0; m < file.metadata_count; ++m)
        if (memchr(file.metadata[m].key, '\0', sizeof file.metadata[m].key) == NULL ||
            memchr(file.metadata[m].value, '\0', sizeof file.metadata[m].value) == NULL)
            finding("metadata not terminated", NULL);
    attn_safetensors_free(&file);
    return checksum == 0xFFFFFFFFu ? -1 : 0; /* uses the reads of every data byte */
}
