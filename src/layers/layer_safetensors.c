/*
 * layer_safetensors.c — an attention layer's parameters as safetensors tensors under the
 * Hugging Face names (q_proj.weight, ..., o_proj.bias), saving and loading them.
 */
#include "core/internal.h"
#include "attn_layers.h"

#include <stdio.h>
#include <string.h>

/* One parameter tensor of a layer: its HF name suffix, data and [rows][columns] shape
 * (columns = 0 for a bias vector). */
typedef struct layer_tensor_spec {
    const char *suffix;
    float *data;
    int64_t rows, columns;
} layer_tensor_spec;

/* The layer's tensors in file order; returns how many (4 or 8). */
static int layer_tensor_specs(const attn_layer *layer, layer_tensor_spec specs[8]) {
    const attn_layer_config *c = &layer->config;
    int64_t d = c->model_dim, qw = c->query_heads * c->head_dim, kw = c->kv_heads * c->head_dim;
    layer_tensor_spec all[8] = {
        {"q_proj.weight", layer->q_weight, qw, d}, {"k_proj.weight", layer->k_weight, kw, d},
        {"v_proj.weight", layer->v_weight, kw, d}, {"o_proj.weight", layer->o_weight, d, qw},
        {"q_proj.bias", layer->q_bias, qw, 0},     {"k_proj.bias", layer->k_bias, kw, 0},
        {"v_proj.bias", layer->v_bias, kw, 0},     {"o_proj.bias", layer->o_bias, d, 0},
    };
    int count = 4;
    memcpy(specs, all, 4 * sizeof *specs);
    for (int p = 4; p < 8; ++p) /* a bias is present when its pointer is */
        if (all[p].data != NULL) specs[count++] = all[p];
    return count;
}

attn_status attn_layer_safetensors_entries(const attn_layer *layer, const char *prefix,
                                           attn_safetensors_tensor *entries, int *count,
                                           attn_error *error) {
    if (layer == NULL || layer->parameters == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layer = NULL or not created");
    if (entries == NULL || count == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "entries or count = NULL");
    if (prefix == NULL) prefix = "";
    layer_tensor_spec specs[8];
    int n = layer_tensor_specs(layer, specs);
    for (int i = 0; i < n; ++i) {
        attn_safetensors_tensor *e = &entries[i];
        memset(e, 0, sizeof *e);
        int written = snprintf(e->name, sizeof e->name, "%s%s", prefix, specs[i].suffix);
        if (written < 0 || (size_t)written >= sizeof e->name)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "prefix = '%s': names longer than %d bytes", prefix,
                             ATTN_SAFETENSORS_NAME_CAPACITY - 1);
        e->dtype = ATTN_DTYPE_F32;
        e->data = specs[i].data;
        e->rank = specs[i].columns ? 2 : 1;
        e->shape[0] = specs[i].rows;
        e->shape[1] = specs[i].columns;
        e->byte_count = (size_t)(specs[i].rows * (specs[i].columns ? specs[i].columns : 1)) *
                        sizeof(float);
    }
    *count = n;
    return ATTN_OK;
}

attn_status attn_layer_save_safetensors(const attn_layer *layer, const char *prefix,
                                        const char *path, attn_error *error) {
    attn_safetensors_tensor entries[8];
    int count;
    attn_status status = attn_layer_safetensors_entries(layer, prefix, entries, &count, error);
    if (status != ATTN_OK) return status;
    return attn_safetensors_write(path, entries, count, NULL, 0, error);
}

attn_status attn_layer_load_safetensors(attn_layer *layer, const char *prefix,
                                        const attn_safetensors_file *file, attn_error *error) {
    if (file == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file = NULL");
    attn_safetensors_tensor entries[8];
    int count;
    attn_status status = attn_layer_safetensors_entries(layer, prefix, entries, &count, error);
    for (int i = 0; status == ATTN_OK && i < count; ++i)
        status = attn_safetensors_get_f32(file, entries[i].name, entries[i].rank,
                                          entries[i].shape, (float *)entries[i].data, error);
    /* A file with a bias the layer lacks is a mismatch, not something to drop. */
    const char *projections[4] = {"q", "k", "v", "o"};
    const float *biases[4] = {layer->q_bias, layer->k_bias, layer->v_bias, layer->o_bias};
    for (int p = 0; status == ATTN_OK && p < 4; ++p) {
        if (biases[p] != NULL) continue;
        char name[ATTN_SAFETENSORS_NAME_CAPACITY];
        snprintf(name, sizeof name, "%s%s_proj.bias", prefix ? prefix : "", projections[p]);
        if (attn_safetensors_find(file, name) != NULL)
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "safetensors tensor '%s' present but the layer has no %s bias "
                             "(config.bias = 0, config.bias_%s = 0)", name, projections[p],
                             projections[p]);
    }
    return status;
}
