/*
 * model_names.c — recognising attention layers in a checkpoint from its tensor names: the
 * naming schemes of Hugging Face checkpoints (Llama/Mistral/Qwen2 q/k/v/o_proj, BERT
 * attention.self.*, GPT-2 attn.c_attn, DeepSeek-V2 MLA) and attn's own layers. Each scheme is
 * one row of a table: the suffix of every role, the anchor role whose weight starts a layer
 * and the roles a complete layer needs. Self-contained: names in, layers out (used by
 * `attn inspect` and by the model loaders).
 */
#include "core/internal.h"
#include "attn_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct name_scheme {
    attn_name_scheme scheme;
    attn_name_role anchor;
    unsigned required; /* roles whose weight a complete layer has (MLA's query: see below) */
    const char *suffix[ATTN_ROLE_COUNT];
} name_scheme;

#define ROLE(r) (1u << (r))

static const name_scheme name_schemes[] = {
    {ATTN_NAMES_QKVO, ATTN_ROLE_K,
     ROLE(ATTN_ROLE_Q) | ROLE(ATTN_ROLE_K) | ROLE(ATTN_ROLE_V) | ROLE(ATTN_ROLE_O),
     {[ATTN_ROLE_Q] = "q_proj", [ATTN_ROLE_K] = "k_proj", [ATTN_ROLE_V] = "v_proj",
      [ATTN_ROLE_O] = "o_proj"}},
    {ATTN_NAMES_BERT, ATTN_ROLE_K,
     ROLE(ATTN_ROLE_Q) | ROLE(ATTN_ROLE_K) | ROLE(ATTN_ROLE_V) | ROLE(ATTN_ROLE_O),
     {[ATTN_ROLE_Q] = "self.query", [ATTN_ROLE_K] = "self.key", [ATTN_ROLE_V] = "self.value",
      [ATTN_ROLE_O] = "output.dense"}},
    {ATTN_NAMES_GPT2, ATTN_ROLE_QKV, ROLE(ATTN_ROLE_QKV) | ROLE(ATTN_ROLE_O),
     {[ATTN_ROLE_QKV] = "c_attn", [ATTN_ROLE_O] = "c_proj"}},
    /* MLA's query is either q_proj (V2-Lite) or q_a_proj + q_a_layernorm + q_b_proj (V2). */
    {ATTN_NAMES_MLA, ATTN_ROLE_KV_A,
     ROLE(ATTN_ROLE_KV_A) | ROLE(ATTN_ROLE_KV_A_NORM) | ROLE(ATTN_ROLE_KV_B) | ROLE(ATTN_ROLE_O),
     {[ATTN_ROLE_Q] = "q_proj", [ATTN_ROLE_O] = "o_proj", [ATTN_ROLE_Q_A] = "q_a_proj",
      [ATTN_ROLE_Q_A_NORM] = "q_a_layernorm", [ATTN_ROLE_Q_B] = "q_b_proj",
      [ATTN_ROLE_KV_A] = "kv_a_proj_with_mqa", [ATTN_ROLE_KV_A_NORM] = "kv_a_layernorm",
      [ATTN_ROLE_KV_B] = "kv_b_proj"}},
};
#define NAME_SCHEME_COUNT (sizeof name_schemes / sizeof name_schemes[0])

static const name_scheme *scheme_row(attn_name_scheme scheme) {
    for (size_t s = 0; s < NAME_SCHEME_COUNT; ++s)
        if (name_schemes[s].scheme == scheme) return &name_schemes[s];
    return NULL;
}

const char *attn_named_layer_suffix(attn_name_scheme scheme, attn_name_role role) {
    const name_scheme *row = scheme_row(scheme);
    if (row == NULL || (int)role < 0 || role >= ATTN_ROLE_COUNT) return NULL;
    return row->suffix[role];
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when `name` is among the sorted names. */
static int has_name(const char *const *sorted, int64_t count, const char *name) {
    return bsearch(&name, sorted, (size_t)count, sizeof *sorted, compare_names) != NULL;
}

/* The last all-digit component of a dotted prefix ("model.layers.3.self_attn." -> 3), -1. */
static int64_t layer_index(const char *prefix) {
    int64_t index = -1;
    const char *part = prefix;
    while (*part) {
        const char *end = strchr(part, '.');
        size_t n = end ? (size_t)(end - part) : strlen(part);
        int digits = n > 0 && n <= 18;
        for (size_t i = 0; digits && i < n; ++i) digits = part[i] >= '0' && part[i] <= '9';
        if (digits) index = strtoll(part, NULL, 10);
        if (end == NULL) break;
        part = end + 1;
    }
    return index;
}

static const char *family_of(const attn_named_layer *layer) {
    const unsigned qkvo = ROLE(ATTN_ROLE_Q) | ROLE(ATTN_ROLE_K) | ROLE(ATTN_ROLE_V) | ROLE(ATTN_ROLE_O);
    switch (layer->scheme) {
    case ATTN_NAMES_QKVO: {
        unsigned b = layer->biases & qkvo;
        if (b == 0) return "llama";
        if (b == (qkvo & ~ROLE(ATTN_ROLE_O))) return "qwen2";
        if (b == qkvo) return "attn";
        return "q/k/v/o_proj";
    }
    case ATTN_NAMES_BERT: return "bert";
    case ATTN_NAMES_GPT2: return "gpt2";
    case ATTN_NAMES_MLA: return "deepseek-v2";
    }
    return "unknown";
}

/* Fills `layer` for the scheme anchored at `prefix`: present weights and biases, missing. */
static int describe_layer(const name_scheme *row, const char *prefix, size_t prefix_length,
                          const char *const *sorted, int64_t count, attn_named_layer *layer) {
    memset(layer, 0, sizeof *layer);
    layer->scheme = row->scheme;
    memcpy(layer->prefix, prefix, prefix_length);
    layer->prefix[prefix_length] = '\0';
    char name[ATTN_SAFETENSORS_NAME_CAPACITY + 32];
    for (int role = 0; role < ATTN_ROLE_COUNT; ++role) {
        if (row->suffix[role] == NULL) continue;
        snprintf(name, sizeof name, "%s%s.weight", layer->prefix, row->suffix[role]);
        if (has_name(sorted, count, name)) layer->weights |= ROLE(role);
        snprintf(name, sizeof name, "%s%s.bias", layer->prefix, row->suffix[role]);
        if (has_name(sorted, count, name)) layer->biases |= ROLE(role);
    }
    layer->missing = row->required & ~layer->weights;
    if (row->scheme == ATTN_NAMES_MLA && !(layer->weights & ROLE(ATTN_ROLE_Q))) {
        unsigned low_rank = ROLE(ATTN_ROLE_Q_A) | ROLE(ATTN_ROLE_Q_A_NORM) | ROLE(ATTN_ROLE_Q_B);
        if (layer->weights & low_rank) layer->missing |= low_rank & ~layer->weights;
        else layer->missing |= ROLE(ATTN_ROLE_Q);
    }
    layer->index = layer_index(layer->prefix);
    layer->family = family_of(layer);
    return 1;
}

static int compare_layers(const void *a, const void *b) {
    const attn_named_layer *x = a, *y = b;
    if (x->index != y->index) return x->index < y->index ? -1 : 1;
    return strcmp(x->prefix, y->prefix);
}

attn_status attn_named_layers_find(const char *const *names, int64_t count,
                                   attn_named_layer *layers, int64_t capacity, int64_t *found,
                                   attn_error *error) {
    if (found == NULL || (count > 0 && names == NULL) || (capacity > 0 && layers == NULL))
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "names, layers or found = NULL");
    *found = 0;
    if (count < 0 || capacity < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "count = %lld, capacity = %lld",
                         (long long)count, (long long)capacity);
    if (count == 0) return ATTN_OK;
    for (int64_t i = 0; i < count; ++i)
        if (names[i] == NULL)
            return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "names[%lld] = NULL", (long long)i);
    const char **sorted = malloc((size_t)count * sizeof *sorted);
    if (sorted == NULL) return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "names index");
    memcpy(sorted, names, (size_t)count * sizeof *sorted);
    qsort(sorted, (size_t)count, sizeof *sorted, compare_names);
    attn_named_layer *all = NULL;
    int64_t total = 0, room = 0;
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < count && status == ATTN_OK; ++i) {
        if (i > 0 && strcmp(sorted[i - 1], sorted[i]) == 0) continue;
        size_t length = strlen(sorted[i]);
        for (size_t s = 0; s < NAME_SCHEME_COUNT; ++s) {
            const name_scheme *row = &name_schemes[s];
            const char *anchor = row->suffix[row->anchor];
            size_t anchor_length = strlen(anchor), tail = anchor_length + 7; /* ".weight" */
            if (length < tail || length - tail >= ATTN_SAFETENSORS_NAME_CAPACITY) continue;
            size_t prefix_length = length - tail;
            if (memcmp(sorted[i] + prefix_length, anchor, anchor_length) != 0 ||
                strcmp(sorted[i] + length - 7, ".weight") != 0)
                continue;
            if (prefix_length > 0 && sorted[i][prefix_length - 1] != '.') continue;
            if (total == room) {
                int64_t grown = room ? 2 * room : 16;
                attn_named_layer *bigger = realloc(all, (size_t)grown * sizeof *all);
                if (bigger == NULL) {
                    status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%lld layers",
                                       (long long)grown);
                    break;
                }
                all = bigger;
                room = grown;
            }
            describe_layer(row, sorted[i], prefix_length, sorted, count, &all[total++]);
        }
    }
    if (status == ATTN_OK) {
        if (total > 1) qsort(all, (size_t)total, sizeof *all, compare_layers);
        for (int64_t i = 0; i < total && i < capacity; ++i) layers[i] = all[i];
        *found = total;
    }
    free(all);
    free(sorted);
    return status;
}
