/*
 * model_family.c — attention layers of Hugging Face checkpoints by their own tensor names:
 * the layer config of a model family, the block prefix of layer N in a file, and loading a
 * block's projections (BERT query/key/value/output.dense, GPT-2's fused Conv1D c_attn and
 * c_proj, Llama/Mistral/Qwen2 q/k/v/o_proj) into an attn_layer, and DeepSeek-V2's MLA
 * tensors into an attn_mla_layer. Names and layouts: attn.h, docs/models.md.
 */
#include "layers/layer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tensor-naming scheme of a family (the recogniser's, attn_named_layers_find); 0 = none. */
static attn_name_scheme scheme_of(attn_model_family family) {
    switch (family) {
    case ATTN_MODEL_BERT: return ATTN_NAMES_BERT;
    case ATTN_MODEL_GPT2: return ATTN_NAMES_GPT2;
    case ATTN_MODEL_LLAMA:
    case ATTN_MODEL_QWEN2: return ATTN_NAMES_QKVO;
    case ATTN_MODEL_DEEPSEEK_V2: return ATTN_NAMES_MLA;
    default: return (attn_name_scheme)0;
    }
}

/* The recogniser's suffix of `role` plus "." (e.g. "self.query."), into part[64]. */
static const char *role_part(attn_model_family family, attn_name_role role, char part[64]) {
    const char *suffix = attn_named_layer_suffix(scheme_of(family), role);
    snprintf(part, 64, "%s.", suffix != NULL ? suffix : "?");
    return part;
}

attn_status attn_model_layer_config(const attn_model_config *model, attn_layer_config *layer,
                                    attn_error *error) {
    if (model == NULL || layer == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "model or layer = NULL");
    if (model->family == ATTN_MODEL_DEEPSEEK_V2)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "model family deepseek_v2: its layers are MLA (attn_model_mla_config)");
    if (scheme_of(model->family) == 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "model.family = %d: unknown",
                         (int)model->family);
    memset(layer, 0, sizeof *layer);
    layer->model_dim = model->hidden_size;
    layer->query_heads = model->heads;
    layer->kv_heads = model->kv_heads;
    layer->head_dim = model->head_dim;
    layer->bias_q = model->bias_q;
    layer->bias_k = model->bias_k;
    layer->bias_v = model->bias_v;
    layer->bias_o = model->bias_o;
    if (model->rope) {
        layer->rope = 1;
        layer->rope_layout = model->rope_config.layout;
        layer->rope_dim = model->rope_config.rotary_dim;
        layer->rope_base = model->rope_config.base;
        layer->rope_scaling = model->rope_config.scaling;
    }
    int64_t count;
    return attn_layer_parameter_count(layer, &count, error);
}

attn_status attn_model_layer_prefix(const attn_model_config *model,
                                    const attn_safetensors_file *file, int64_t index,
                                    char *prefix, size_t capacity, attn_error *error) {
    if (model == NULL || file == NULL || prefix == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "model, file or prefix = NULL");
    attn_name_scheme scheme = scheme_of(model->family);
    if (scheme == 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "model.family = %d: unknown",
                         (int)model->family);
    if (index < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "index = %lld: must be >= 0",
                         (long long)index);
    /* The recogniser lists the file's attention layers; take the family's layer `index`. */
    int64_t count = file->tensor_count, found = 0;
    const char **names = malloc((size_t)(count > 0 ? count : 1) * sizeof *names);
    if (names == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%lld tensor names", (long long)count);
    for (int64_t i = 0; i < count; ++i) names[i] = file->tensors[i].name;
    attn_status status = attn_named_layers_find(names, count, NULL, 0, &found, error);
    attn_named_layer *layers = NULL;
    if (status == ATTN_OK && found > 0) {
        layers = malloc((size_t)found * sizeof *layers);
        status = layers == NULL ? attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                                            "%lld attention layers", (long long)found)
                                : attn_named_layers_find(names, count, layers, found, &found,
                                                         error);
    }
    const attn_named_layer *match = NULL;
    for (int64_t i = 0; status == ATTN_OK && i < found && match == NULL; ++i)
        if (layers[i].scheme == scheme && layers[i].index == index) match = &layers[i];
    if (status == ATTN_OK && match == NULL)
        status = attn_fail(error, ATTN_ERROR_FORMAT,
                           "%s layer %lld: not in the file (%lld attention layers recognised)",
                           attn_model_family_name(model->family), (long long)index,
                           (long long)found);
    if (status == ATTN_OK) {
        int written = snprintf(prefix, capacity, "%s", match->prefix);
        if (written < 0 || (size_t)written >= capacity)
            status = attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                               "capacity = %zu: the prefix '%s' needs %d bytes", capacity,
                               match->prefix, written + 1);
    }
    free(layers);
    free(names);
    return status;
}

/* prefix + part + suffix into name; FORMAT-sized names are refused. */
static attn_status make_name(char name[ATTN_SAFETENSORS_NAME_CAPACITY], const char *prefix,
                             const char *part, const char *suffix, attn_error *error) {
    int written = snprintf(name, ATTN_SAFETENSORS_NAME_CAPACITY, "%s%s%s", prefix, part, suffix);
    if (written < 0 || written >= ATTN_SAFETENSORS_NAME_CAPACITY)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "prefix = '%.64s': names longer than %d bytes", prefix,
                         ATTN_SAFETENSORS_NAME_CAPACITY - 1);
    return ATTN_OK;
}

/* Loads `part`weight [rows][columns] (and `part`bias [rows] when bias != NULL); a bias in the
 * file that the layer lacks is an error. */
static attn_status load_linear(const attn_safetensors_file *file, const char *prefix,
                               const char *part, int64_t rows, int64_t columns, float *weight,
                               float *bias, const char *flag, attn_error *error) {
    char name[ATTN_SAFETENSORS_NAME_CAPACITY];
    int64_t shape[2] = {rows, columns};
    attn_status status = make_name(name, prefix, part, "weight", error);
    if (status == ATTN_OK) status = attn_safetensors_get_f32(file, name, 2, shape, weight, error);
    if (status == ATTN_OK) status = make_name(name, prefix, part, "bias", error);
    if (status != ATTN_OK) return status;
    if (bias != NULL) return attn_safetensors_get_f32(file, name, 1, shape, bias, error);
    if (attn_safetensors_find(file, name) != NULL)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "safetensors tensor '%s' present but the layer has no such bias (%s)",
                         name, flag);
    return ATTN_OK;
}

/* GPT-2: c_attn.weight [d][3 h dh] (x W: q | k | v along the output), c_attn.bias [3 h dh],
 * c_proj.weight [h dh][d], c_proj.bias [d]. Transposed into nn.Linear [out][in]. */
static attn_status load_gpt2(attn_layer *layer, const char *prefix,
                             const attn_safetensors_file *file, attn_error *error) {
    const attn_layer_config *c = &layer->config;
    int64_t d = c->model_dim, width = c->query_heads * c->head_dim;
    if (c->kv_heads != c->query_heads)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "gpt2: kv_heads = %lld must equal query_heads = %lld (fused c_attn)",
                         (long long)c->kv_heads, (long long)c->query_heads);
    int qkv_bias = layer->q_bias != NULL;
    if ((layer->k_bias != NULL) != qkv_bias || (layer->v_bias != NULL) != qkv_bias)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "gpt2: c_attn.bias is fused: q, k and v biases must all be present or "
                         "all absent");
    size_t floats = (size_t)d * (size_t)(3 * width) + (size_t)(3 * width);
    if (floats < (size_t)width * (size_t)d) floats = (size_t)width * (size_t)d;
    float *fused = malloc(floats * sizeof(float));
    if (fused == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "gpt2: %zu floats of scratch", floats);
    float *fused_bias = fused + (size_t)d * (size_t)(3 * width);
    float *targets[3] = {layer->q_weight, layer->k_weight, layer->v_weight};
    float *bias_targets[3] = {layer->q_bias, layer->k_bias, layer->v_bias};
    char name[ATTN_SAFETENSORS_NAME_CAPACITY];
    int64_t shape[2] = {d, 3 * width};
    char qkv[64], out[64];
    role_part(ATTN_MODEL_GPT2, ATTN_ROLE_QKV, qkv);
    role_part(ATTN_MODEL_GPT2, ATTN_ROLE_O, out);
    attn_status status = make_name(name, prefix, qkv, "weight", error);
    if (status == ATTN_OK) status = attn_safetensors_get_f32(file, name, 2, shape, fused, error);
    if (status == ATTN_OK) {
        for (int part = 0; part < 3; ++part)
            for (int64_t o = 0; o < width; ++o)
                for (int64_t i = 0; i < d; ++i)
                    targets[part][o * d + i] = fused[i * 3 * width + part * width + o];
        status = make_name(name, prefix, qkv, "bias", error);
    }
    if (status == ATTN_OK && qkv_bias) {
        int64_t bias_shape[1] = {3 * width};
        status = attn_safetensors_get_f32(file, name, 1, bias_shape, fused_bias, error);
        for (int part = 0; status == ATTN_OK && part < 3; ++part)
            memcpy(bias_targets[part], fused_bias + part * width, (size_t)width * sizeof(float));
    } else if (status == ATTN_OK && attn_safetensors_find(file, name) != NULL) {
        status = attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                           "safetensors tensor '%s' present but the layer has no q/k/v biases",
                           name);
    }
    if (status == ATTN_OK) {
        int64_t proj_shape[2] = {width, d};
        status = make_name(name, prefix, out, "weight", error);
        if (status == ATTN_OK)
            status = attn_safetensors_get_f32(file, name, 2, proj_shape, fused, error);
        if (status == ATTN_OK)
            for (int64_t o = 0; o < d; ++o)
                for (int64_t i = 0; i < width; ++i)
                    layer->o_weight[o * width + i] = fused[i * d + o];
    }
    if (status == ATTN_OK) status = make_name(name, prefix, out, "bias", error);
    if (status == ATTN_OK && layer->o_bias != NULL) {
        int64_t bias_shape[1] = {d};
        status = attn_safetensors_get_f32(file, name, 1, bias_shape, layer->o_bias, error);
    } else if (status == ATTN_OK && attn_safetensors_find(file, name) != NULL) {
        status = attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                           "safetensors tensor '%s' present but the layer has no o bias", name);
    }
    free(fused);
    return status;
}

attn_status attn_layer_load_family(attn_layer *layer, attn_model_family family,
                                   const char *prefix, const attn_safetensors_file *file,
                                   attn_error *error) {
    if (layer == NULL || layer->parameters == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layer = NULL or not created");
    if (file == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "file = NULL");
    if (prefix == NULL) prefix = "";
    if (family == ATTN_MODEL_GPT2) return load_gpt2(layer, prefix, file, error);
    if (family == ATTN_MODEL_DEEPSEEK_V2)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "family deepseek_v2: MLA layers load with attn_model_load_mla");
    if (scheme_of(family) == 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "family = %d: unknown", (int)family);
    const attn_layer_config *c = &layer->config;
    int64_t d = c->model_dim, qw = c->query_heads * c->head_dim, kw = c->kv_heads * c->head_dim;
    const int64_t rows[4] = {qw, kw, kw, d}, columns[4] = {d, d, d, qw};
    float *weights[4] = {layer->q_weight, layer->k_weight, layer->v_weight, layer->o_weight};
    float *biases[4] = {layer->q_bias, layer->k_bias, layer->v_bias, layer->o_bias};
    const char *flags[4] = {"config.bias_q", "config.bias_k", "config.bias_v", "config.bias_o"};
    attn_status status = ATTN_OK;
    char part[64];
    for (int p = 0; status == ATTN_OK && p < 4; ++p)
        status = load_linear(file, prefix, role_part(family, (attn_name_role)p, part), rows[p],
                             columns[p], weights[p], biases[p], flags[p], error);
    return status;
}

attn_status attn_model_load_layer(const attn_model_config *model,
                                  const attn_safetensors_file *file, int64_t index,
                                  attn_layer *layer, attn_error *error) {
    if (layer == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layer = NULL");
    memset(layer, 0, sizeof *layer);
    attn_layer_config config;
    char prefix[ATTN_SAFETENSORS_NAME_CAPACITY];
    attn_status status = attn_model_layer_config(model, &config, error);
    if (status == ATTN_OK)
        status = attn_model_layer_prefix(model, file, index, prefix, sizeof prefix, error);
    if (status == ATTN_OK) status = attn_layer_create(&config, layer, error);
    if (status == ATTN_OK)
        status = attn_layer_load_family(layer, model->family, prefix, file, error);
    if (status != ATTN_OK) attn_layer_destroy(layer);
    return status;
}

/* ---- DeepSeek-V2 MLA ---- */

attn_status attn_model_mla_config(const attn_model_config *model, attn_mla_config *mla,
                                  attn_error *error) {
    if (model == NULL || mla == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "model or mla = NULL");
    if (model->family != ATTN_MODEL_DEEPSEEK_V2)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "model family %s: not MLA (only deepseek_v2 is)",
                         attn_model_family_name(model->family));
    memset(mla, 0, sizeof *mla);
    mla->hidden = model->hidden_size;
    mla->heads = model->heads;
    mla->q_lora_rank = model->q_lora_rank;
    mla->kv_lora_rank = model->kv_lora_rank;
    mla->qk_nope_dim = model->qk_nope_head_dim;
    mla->qk_rope_dim = model->qk_rope_head_dim;
    mla->v_head_dim = model->v_head_dim;
    mla->rope_base = model->rope_config.base;
    mla->norm_eps = (float)model->norm_eps;
    double scale = 1.0 / sqrt((double)(model->qk_nope_head_dim + model->qk_rope_head_dim));
    const attn_rope_scaling *s = &model->rope_config.scaling;
    if (s->type != ATTN_ROPE_SCALING_NONE && s->mscale_all_dim != 0.0 && s->factor > 1.0) {
        double m = 0.1 * s->mscale_all_dim * log(s->factor) + 1.0;
        scale *= m * m;
    }
    mla->scale = (float)scale;
    mla->rope_scaling = *s;
    return ATTN_OK;
}

/* One MLA tensor: its role, rank, [rows][columns] (columns 0 for a vector)
 * and the attn_mla_weights pointer it fills. */
typedef struct mla_part {
    attn_name_role role; /* its name: the recogniser's suffix + ".weight" */
    int rank;
    int64_t rows, columns;
    const float **slot;
} mla_part;

void attn_mla_layer_destroy(attn_mla_layer *layer) {
    if (layer == NULL) return;
    free(layer->parameters);
    memset(layer, 0, sizeof *layer);
}

attn_status attn_model_load_mla(const attn_model_config *model,
                                const attn_safetensors_file *file, int64_t index,
                                attn_mla_layer *layer, attn_error *error) {
    if (layer == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layer = NULL");
    memset(layer, 0, sizeof *layer);
    attn_mla_config *c = &layer->config;
    char prefix[ATTN_SAFETENSORS_NAME_CAPACITY];
    attn_status status = attn_model_mla_config(model, c, error);
    if (status == ATTN_OK)
        status = attn_model_layer_prefix(model, file, index, prefix, sizeof prefix, error);
    if (status != ATTN_OK) return status;
    int64_t d = c->hidden, h = c->heads, qr = c->q_lora_rank, kr = c->kv_lora_rank;
    int64_t qk = c->qk_nope_dim + c->qk_rope_dim, v = c->v_head_dim;
    /* Tensors in load order: name, rank, shape, and where attn_mla_weights points. */
    mla_part parts[7];
    int n = 0;
    attn_mla_weights *w = &layer->weights;
    if (qr == 0) {
        parts[n++] = (mla_part){ATTN_ROLE_Q, 2, h * qk, d, &w->wq};
    } else {
        parts[n++] = (mla_part){ATTN_ROLE_Q_A, 2, qr, d, &w->wq_a};
        parts[n++] = (mla_part){ATTN_ROLE_Q_A_NORM, 1, qr, 0, &w->q_norm};
        parts[n++] = (mla_part){ATTN_ROLE_Q_B, 2, h * qk, qr, &w->wq_b};
    }
    parts[n++] = (mla_part){ATTN_ROLE_KV_A, 2,
                                    kr + c->qk_rope_dim, d, &w->wkv_a};
    parts[n++] = (mla_part){ATTN_ROLE_KV_A_NORM, 1, kr, 0, &w->kv_norm};
    parts[n++] = (mla_part){ATTN_ROLE_KV_B, 2, h * (c->qk_nope_dim + v),
                                    kr, &w->wkv_b};
    parts[n++] = (mla_part){ATTN_ROLE_O, 2, d, h * v, &w->wo};
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
        int64_t count;
        if (!attn_mul_i64(parts[i].rows, parts[i].rank == 2 ? parts[i].columns : 1, &count) ||
            !attn_add_i64(total, count, &total) || (uint64_t)total > SIZE_MAX / sizeof(float))
            return attn_fail(error, ATTN_ERROR_OVERFLOW, "mla layer: parameter count overflows");
    }
    float *parameters = malloc((size_t)total * sizeof(float));
    if (parameters == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "mla layer: %lld floats",
                         (long long)total);
    float *cursor = parameters;
    for (int i = 0; status == ATTN_OK && i < n; ++i) {
        char name[ATTN_SAFETENSORS_NAME_CAPACITY];
        int64_t shape[2] = {parts[i].rows, parts[i].columns};
        char part[64];
        status = make_name(name, prefix, role_part(ATTN_MODEL_DEEPSEEK_V2, parts[i].role, part),
                           "weight", error);
        if (status == ATTN_OK)
            status = attn_safetensors_get_f32(file, name, parts[i].rank, shape, cursor, error);
        *parts[i].slot = cursor;
        cursor += parts[i].rows * (parts[i].rank == 2 ? parts[i].columns : 1);
    }
    if (status != ATTN_OK) {
        free(parameters);
        memset(layer, 0, sizeof *layer);
        return status;
    }
    layer->parameters = parameters;
    layer->parameter_count = total;
    return ATTN_OK;
}
