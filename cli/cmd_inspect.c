/*
 * cmd_inspect.c — `attn inspect PATH`: what a weight file holds. PATH is a .npy array, a
 * .safetensors file, a sharded checkpoint's model.safetensors.index.json, or a checkpoint
 * folder. Prints the shards, the metadata (long values shortened, control characters
 * escaped), every tensor (name, dtype, shape, bytes, shard) and the attention layers the
 * library recognises in the names (attn_named_layers_find: family, layer number, prefix,
 * the shapes of the projections, biases, what is missing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "attn_io.h"
#include "npy_tensor.h"

#define INSPECT_VALUE_SHOWN 80 /* metadata values longer than this many bytes are shortened */

static void usage(FILE *stream) {
    fprintf(stream,
            "usage: attn inspect PATH [--no-tensors]\n"
            "  PATH: a .npy file, a .safetensors file, a model.safetensors.index.json, or a\n"
            "        checkpoint folder (its index, model.safetensors, or its only\n"
            "        .safetensors file).\n"
            "  Prints dtypes, shapes and bytes of the arrays / tensors, the metadata, and the\n"
            "  attention layers recognised from the tensor names (Llama/Mistral/Qwen2\n"
            "  q/k/v/o_proj, BERT attention.self.*, GPT-2 attn.c_attn, DeepSeek-V2 MLA, attn's\n"
            "  own layers).\n"
            "  --no-tensors  leave out the list of tensors (shards, metadata and layers only)\n");
}

/* 1 when `path` is a file starting with the .npy magic "\x93NUMPY". */
static int is_npy(const char *path) {
    FILE *stream = fopen(path, "rb");
    char magic[6] = {0};
    size_t got = stream ? fread(magic, 1, sizeof magic, stream) : 0;
    if (stream) fclose(stream);
    return got == sizeof magic && memcmp(magic, "\x93NUMPY", 6) == 0;
}

static int inspect_npy(const char *path) {
    attn_npy_array array;
    attn_error error;
    if (attn_npy_read(path, 0, &array, &error) != ATTN_OK) {
        cli_error("inspect", "%s", error.message);
        return 1;
    }
    char shape[128];
    cli_shape_text(array.rank, array.shape, shape, sizeof shape);
    printf("%s: .npy array\n  dtype %s, shape %s, %zu bytes\n", path,
           attn_safetensors_dtype_name(array.dtype), shape, array.byte_count);
    attn_npy_free(&array);
    return 0;
}

/* Prints a metadata string with control characters, quotes and backslashes escaped, at most
 * INSPECT_VALUE_SHOWN bytes of it (not cutting a UTF-8 character). */
static void print_value(const char *value) {
    size_t length = strlen(value), shown = length;
    if (shown > INSPECT_VALUE_SHOWN) {
        shown = INSPECT_VALUE_SHOWN;
        while (shown > 0 && ((unsigned char)value[shown] & 0xC0) == 0x80) --shown;
    }
    putchar('"');
    for (size_t i = 0; i < shown; ++i) {
        unsigned char ch = (unsigned char)value[i];
        if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '\t') fputs("\\t", stdout);
        else if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) printf("\\x%02x", ch);
        else putchar(ch);
    }
    putchar('"');
    if (shown < length) printf("... (%zu bytes)", length);
}

static const char *const role_labels[ATTN_ROLE_COUNT] = {
    [ATTN_ROLE_Q] = "q", [ATTN_ROLE_K] = "k", [ATTN_ROLE_V] = "v", [ATTN_ROLE_O] = "o",
    [ATTN_ROLE_QKV] = "qkv", [ATTN_ROLE_Q_A] = "q_a", [ATTN_ROLE_Q_A_NORM] = "q_a_norm",
    [ATTN_ROLE_Q_B] = "q_b", [ATTN_ROLE_KV_A] = "kv_a", [ATTN_ROLE_KV_A_NORM] = "kv_a_norm",
    [ATTN_ROLE_KV_B] = "kv_b",
};

static void print_layer(const attn_safetensors_file *file, const attn_named_layer *layer) {
    if (layer->index >= 0) printf("  layer %-4lld %-12s '%s'\n", (long long)layer->index,
                                  layer->family, layer->prefix);
    else printf("  layer -    %-12s '%s'\n", layer->family, layer->prefix);
    printf("   ");
    for (int role = 0; role < ATTN_ROLE_COUNT; ++role) {
        if (!(layer->weights & (1u << role))) continue;
        char name[ATTN_SAFETENSORS_NAME_CAPACITY + 40], shape[96];
        snprintf(name, sizeof name, "%s%s.weight", layer->prefix,
                 attn_named_layer_suffix(layer->scheme, (attn_name_role)role));
        const attn_safetensors_tensor *t = attn_safetensors_find(file, name);
        printf("%s%s %s", role == 0 || !(layer->weights & ((1u << role) - 1)) ? " " : "  ",
               role_labels[role],
               t ? cli_shape_text(t->rank, t->shape, shape, sizeof shape) : "?");
    }
    printf("\n    bias:");
    if (layer->biases == 0) printf(" none");
    for (int role = 0; role < ATTN_ROLE_COUNT; ++role)
        if (layer->biases & (1u << role)) printf(" %s", role_labels[role]);
    printf("\n");
    if (layer->missing) {
        printf("    incomplete, missing:");
        for (int role = 0; role < ATTN_ROLE_COUNT; ++role)
            if (layer->missing & (1u << role))
                printf(" %s%s.weight", layer->prefix,
                       attn_named_layer_suffix(layer->scheme, (attn_name_role)role));
        printf("\n");
    }
}

static int inspect_safetensors(const char *path, int list_tensors) {
    attn_safetensors_file file;
    attn_error error;
    if (attn_safetensors_open(path, 0, &file, &error) != ATTN_OK) {
        cli_error("inspect", "%s", error.message);
        return 1;
    }
    size_t data_bytes = 0;
    for (int64_t i = 0; i < file.tensor_count; ++i) data_bytes += file.tensors[i].byte_count;
    printf("%s: safetensors, %lld shard%s, %lld tensors, %zu bytes of tensor data\n", path,
           (long long)file.shard_count, file.shard_count == 1 ? "" : "s",
           (long long)file.tensor_count, data_bytes);
    printf("shards:\n");
    for (int64_t s = 0; s < file.shard_count; ++s)
        printf("  [%lld] %s  %zu bytes (header %zu)%s\n", (long long)s, file.shards[s].path,
               file.shards[s].byte_count, file.shards[s].data_offset,
               file.shards[s].mapped ? ", mapped" : ", read");
    printf("metadata (%lld):\n", (long long)file.metadata_count);
    for (int64_t m = 0; m < file.metadata_count; ++m) {
        printf("  ");
        print_value(file.metadata[m].key);
        printf(" = ");
        print_value(file.metadata[m].value);
        printf("\n");
    }
    if (list_tensors) {
        printf("tensors (%lld):\n", (long long)file.tensor_count);
        for (int64_t i = 0; i < file.tensor_count; ++i) {
            const attn_safetensors_tensor *t = &file.tensors[i];
            char shape[96];
            printf("  %-48s %-7s %-18s %12zu", t->name, t->stored_dtype,
                   cli_shape_text(t->rank, t->shape, shape, sizeof shape), t->byte_count);
            if (file.shard_count > 1) printf("  [%d]", t->shard);
            printf("\n");
        }
    }
    const char **names = malloc((size_t)(file.tensor_count ? file.tensor_count : 1) * sizeof *names);
    int status = 0;
    int64_t found = 0;
    attn_named_layer *layers = NULL;
    if (names != NULL) {
        for (int64_t i = 0; i < file.tensor_count; ++i) names[i] = file.tensors[i].name;
        if (attn_named_layers_find(names, file.tensor_count, NULL, 0, &found, &error) == ATTN_OK &&
            found > 0)
            layers = malloc((size_t)found * sizeof *layers);
        if (found > 0 && (layers == NULL || attn_named_layers_find(names, file.tensor_count, layers,
                                                                   found, &found, &error) != ATTN_OK))
            status = 1;
    } else {
        status = 1;
    }
    if (status != 0) {
        cli_error("inspect", "%s: out of memory recognising layers", path);
    } else {
        printf("attention layers (%lld):\n", (long long)found);
        for (int64_t l = 0; l < found; ++l) print_layer(&file, &layers[l]);
        if (found == 0) printf("  none recognised\n");
    }
    free(layers);
    free(names);
    attn_safetensors_free(&file);
    return status;
}

int cli_inspect(int argc, char **argv) {
    const char *path = NULL;
    int list_tensors = 1;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--no-tensors") == 0) {
            list_tensors = 0;
        } else if (argv[i][0] == '-' || path != NULL) {
            fprintf(stderr, "attn inspect: unexpected argument '%s' (see attn inspect --help)\n",
                    argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (path == NULL) {
        fprintf(stderr, "attn inspect: no PATH given (usage: attn inspect PATH [--no-tensors]; see "
                        "attn inspect --help)\n");
        return 2;
    }
    if (!cli_input_file("inspect", "", path, true)) return 1;
    if (is_npy(path)) return inspect_npy(path);
    return inspect_safetensors(path, list_tensors);
}
