/*
 * model_config.c — a Hugging Face config.json read into attn_model_config: the model family
 * from "model_type", each family's size keys (BERT, GPT-2, Llama/Mistral, Qwen2, DeepSeek-V2),
 * and RoPE (rope_theta, partial_rotary_factor, rope_scaling / rope_parameters with the
 * defaults transformers applies). Parsing goes through cJSON (io/json.h); docs/models.md lists
 * the keys.
 */
#include "core/internal.h"
#include "attn_layers.h"

#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct { const char *name; attn_model_family family; } family_names[] = {
    {"bert", ATTN_MODEL_BERT},   {"gpt2", ATTN_MODEL_GPT2},   {"llama", ATTN_MODEL_LLAMA},
    {"mistral", ATTN_MODEL_LLAMA}, {"qwen2", ATTN_MODEL_QWEN2},
    {"deepseek_v2", ATTN_MODEL_DEEPSEEK_V2},
};

attn_status attn_model_family_parse(const char *model_type, attn_model_family *family,
                                    attn_error *error) {
    if (model_type == NULL || family == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "model_type or family = NULL");
    for (size_t i = 0; i < sizeof family_names / sizeof family_names[0]; ++i)
        if (strcmp(model_type, family_names[i].name) == 0) {
            *family = family_names[i].family;
            return ATTN_OK;
        }
    return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                     "model_type = '%.64s': not a supported family (bert, gpt2, llama, mistral, "
                     "qwen2, deepseek_v2)", model_type);
}

const char *attn_model_family_name(attn_model_family family) {
    switch (family) {
    case ATTN_MODEL_BERT: return "bert";
    case ATTN_MODEL_GPT2: return "gpt2";
    case ATTN_MODEL_LLAMA: return "llama";
    case ATTN_MODEL_QWEN2: return "qwen2";
    case ATTN_MODEL_DEEPSEEK_V2: return "deepseek_v2";
    default: return "unknown";
    }
}

/* ---- typed access to members; `found` reports presence (JSON null counts as absent) ---- */

static const cJSON *member(const cJSON *object, const char *key) {
    const cJSON *item = attn_json_member(object, key);
    return item == NULL || cJSON_IsNull(item) ? NULL : item;
}

/* An integer-valued member in [minimum, 2^53]; absent = *value untouched (returns OK). */
static attn_status read_int(const cJSON *object, const char *key, int64_t minimum,
                            int64_t *value, attn_error *error) {
    const cJSON *item = member(object, key);
    if (item == NULL) return ATTN_OK;
    double number = cJSON_IsNumber(item) ? item->valuedouble : NAN;
    if (!(number >= (double)minimum && number <= 9007199254740992.0) || number != floor(number))
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "config.json: \"%s\" must be an integer >= %lld", key,
                         (long long)minimum);
    *value = (int64_t)number;
    return ATTN_OK;
}

static attn_status read_double(const cJSON *object, const char *key, double *value,
                               attn_error *error) {
    const cJSON *item = member(object, key);
    if (item == NULL) return ATTN_OK;
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: \"%s\" must be a finite number",
                         key);
    *value = item->valuedouble;
    return ATTN_OK;
}

static attn_status read_bool(const cJSON *object, const char *key, int *value,
                             attn_error *error) {
    const cJSON *item = member(object, key);
    if (item == NULL) return ATTN_OK;
    if (!cJSON_IsBool(item))
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: \"%s\" must be true or false",
                         key);
    *value = cJSON_IsTrue(item);
    return ATTN_OK;
}

/* A string member or NULL when absent; a non-string is a FORMAT error. */
static attn_status read_string(const cJSON *object, const char *key, const char **value,
                               attn_error *error) {
    const cJSON *item = member(object, key);
    *value = NULL;
    if (item == NULL) return ATTN_OK;
    if (!cJSON_IsString(item) || item->valuestring == NULL)
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: \"%s\" must be a string", key);
    *value = item->valuestring;
    return ATTN_OK;
}

/* A required size: absent or zero is an error naming the key. */
static attn_status require(int64_t value, const char *key, attn_error *error) {
    if (value < 1)
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: \"%s\" missing or < 1", key);
    return ATTN_OK;
}

#define TRY(call)                                                                              \
    do {                                                                                       \
        attn_status try_status_ = (call);                                                      \
        if (try_status_ != ATTN_OK) return try_status_;                                        \
    } while (0)

/* ---- RoPE ---- */

/* rope_scaling / rope_parameters (either spelling of the type key) into config->rope_config;
 * the rope_theta and partial_rotary_factor already read may be overridden by the dict. */
static attn_status read_rope_scaling(const cJSON *root, attn_model_config *config,
                                     double *partial_rotary_factor, attn_error *error) {
    const cJSON *dict = member(root, "rope_parameters");
    const char *dict_key = "rope_parameters";
    if (dict == NULL) {
        dict = member(root, "rope_scaling");
        dict_key = "rope_scaling";
    }
    if (dict == NULL) return ATTN_OK;
    if (!cJSON_IsObject(dict))
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: \"%s\" must be an object",
                         dict_key);
    attn_rope_scaling *s = &config->rope_config.scaling;
    TRY(read_double(dict, "rope_theta", &config->rope_config.base, error));
    TRY(read_double(dict, "partial_rotary_factor", partial_rotary_factor, error));
    const char *type = NULL;
    TRY(read_string(dict, "rope_type", &type, error));
    if (type == NULL) TRY(read_string(dict, "type", &type, error));
    if (type == NULL || strcmp(type, "default") == 0) return ATTN_OK;
    static const struct { const char *name; attn_rope_scaling_type type; } types[] = {
        {"linear", ATTN_ROPE_SCALING_LINEAR}, {"dynamic", ATTN_ROPE_SCALING_DYNAMIC},
        {"llama3", ATTN_ROPE_SCALING_LLAMA3}, {"yarn", ATTN_ROPE_SCALING_YARN}};
    s->type = ATTN_ROPE_SCALING_NONE;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i)
        if (strcmp(type, types[i].name) == 0) s->type = types[i].type;
    if (s->type == ATTN_ROPE_SCALING_NONE)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "config.json: %s type '%.32s' not supported (default, linear, dynamic, "
                         "llama3, yarn)", dict_key, type);
    /* The trained length: a top-level original_max_position_embeddings wins (as transformers
       does for Phi-3), then the dict's, then max_position_embeddings. DYNAMIC uses the last. */
    int64_t original = 0;
    TRY(read_int(dict, "original_max_position_embeddings", 1, &original, error));
    TRY(read_int(root, "original_max_position_embeddings", 1, &original, error));
    if (original == 0 || s->type == ATTN_ROPE_SCALING_DYNAMIC) original = config->max_positions;
    s->original_max_positions = original;
    if (s->type != ATTN_ROPE_SCALING_LINEAR)
        TRY(require(original, "max_position_embeddings", error));
    TRY(read_double(dict, "factor", &s->factor, error));
    if (s->factor == 0.0 && s->type == ATTN_ROPE_SCALING_YARN && original > 0)
        s->factor = (double)config->max_positions / (double)original;
    if (!(s->factor > 0.0))
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: %s \"factor\" missing or <= 0",
                         dict_key);
    if (s->type == ATTN_ROPE_SCALING_LLAMA3) {
        TRY(read_double(dict, "low_freq_factor", &s->low_freq_factor, error));
        TRY(read_double(dict, "high_freq_factor", &s->high_freq_factor, error));
        if (!(s->high_freq_factor > s->low_freq_factor && s->low_freq_factor > 0.0))
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "config.json: %s llama3 needs 0 < low_freq_factor < "
                             "high_freq_factor", dict_key);
    }
    if (s->type == ATTN_ROPE_SCALING_YARN) {
        TRY(read_double(dict, "beta_fast", &s->beta_fast, error));
        TRY(read_double(dict, "beta_slow", &s->beta_slow, error));
        TRY(read_double(dict, "mscale", &s->mscale, error));
        TRY(read_double(dict, "mscale_all_dim", &s->mscale_all_dim, error));
        TRY(read_double(dict, "attention_factor", &s->attention_factor, error));
        int truncate = 1;
        TRY(read_bool(dict, "truncate", &truncate, error));
        s->no_truncate = !truncate;
    }
    return ATTN_OK;
}

/* ---- families ---- */

static attn_status read_bert(const cJSON *root, attn_model_config *c, attn_error *error) {
    TRY(read_int(root, "hidden_size", 1, &c->hidden_size, error));
    TRY(read_int(root, "num_attention_heads", 1, &c->heads, error));
    TRY(read_int(root, "num_hidden_layers", 0, &c->layers, error));
    TRY(read_int(root, "intermediate_size", 1, &c->intermediate_size, error));
    TRY(read_int(root, "vocab_size", 1, &c->vocab_size, error));
    TRY(read_int(root, "max_position_embeddings", 1, &c->max_positions, error));
    c->type_vocab_size = 2;
    TRY(read_int(root, "type_vocab_size", 0, &c->type_vocab_size, error));
    c->norm_eps = 1e-12;
    TRY(read_double(root, "layer_norm_eps", &c->norm_eps, error));
    const char *positions = NULL;
    TRY(read_string(root, "position_embedding_type", &positions, error));
    if (positions != NULL && strcmp(positions, "absolute") != 0)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "config.json: position_embedding_type '%.32s' not supported (absolute)",
                         positions);
    c->bias_q = c->bias_k = c->bias_v = c->bias_o = 1;
    return ATTN_OK;
}

static attn_status read_gpt2(const cJSON *root, attn_model_config *c, attn_error *error) {
    TRY(read_int(root, "n_embd", 1, &c->hidden_size, error));
    TRY(read_int(root, "n_head", 1, &c->heads, error));
    TRY(read_int(root, "n_layer", 0, &c->layers, error));
    TRY(read_int(root, "vocab_size", 1, &c->vocab_size, error));
    TRY(read_int(root, "n_positions", 1, &c->max_positions, error));
    c->intermediate_size = 4 * c->hidden_size;
    TRY(read_int(root, "n_inner", 1, &c->intermediate_size, error));
    c->norm_eps = 1e-5;
    TRY(read_double(root, "layer_norm_epsilon", &c->norm_eps, error));
    int by_layer = 0, scaled = 1;
    TRY(read_bool(root, "scale_attn_by_inverse_layer_idx", &by_layer, error));
    TRY(read_bool(root, "scale_attn_weights", &scaled, error));
    if (by_layer || !scaled)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "config.json: scale_attn_by_inverse_layer_idx = %s, scale_attn_weights "
                         "= %s: only the 1/sqrt(head_dim) scale is supported",
                         by_layer ? "true" : "false", scaled ? "true" : "false");
    c->causal = 1;
    c->bias_q = c->bias_k = c->bias_v = c->bias_o = 1;
    return ATTN_OK;
}

/* Llama, Mistral, Qwen2 and DeepSeek-V2 share these keys. */
static attn_status read_decoder(const cJSON *root, attn_model_config *c, attn_error *error) {
    TRY(read_int(root, "hidden_size", 1, &c->hidden_size, error));
    TRY(read_int(root, "num_attention_heads", 1, &c->heads, error));
    TRY(read_int(root, "num_key_value_heads", 1, &c->kv_heads, error));
    TRY(read_int(root, "num_hidden_layers", 0, &c->layers, error));
    TRY(read_int(root, "intermediate_size", 1, &c->intermediate_size, error));
    TRY(read_int(root, "vocab_size", 1, &c->vocab_size, error));
    TRY(read_int(root, "max_position_embeddings", 1, &c->max_positions, error));
    TRY(read_int(root, "head_dim", 1, &c->head_dim, error));
    c->norm_eps = 1e-6;
    TRY(read_double(root, "rms_norm_eps", &c->norm_eps, error));
    c->causal = 1;
    c->rope = 1;
    c->rope_config.layout = ATTN_ROPE_HALF;
    c->rope_config.base = 10000.0;
    TRY(read_double(root, "rope_theta", &c->rope_config.base, error));
    return ATTN_OK;
}

static attn_status read_family(const cJSON *root, attn_model_config *c, attn_error *error) {
    if (c->family == ATTN_MODEL_BERT) return read_bert(root, c, error);
    if (c->family == ATTN_MODEL_GPT2) return read_gpt2(root, c, error);
    TRY(read_decoder(root, c, error));
    if (c->family == ATTN_MODEL_LLAMA) {
        int bias = 0;
        TRY(read_bool(root, "attention_bias", &bias, error));
        c->bias_q = c->bias_k = c->bias_v = c->bias_o = bias;
        TRY(read_int(root, "sliding_window", 1, &c->sliding_window, error));
    } else if (c->family == ATTN_MODEL_QWEN2) {
        c->bias_q = c->bias_k = c->bias_v = 1;
        int sliding = 0;
        TRY(read_bool(root, "use_sliding_window", &sliding, error));
        if (sliding) TRY(read_int(root, "sliding_window", 1, &c->sliding_window, error));
    } else { /* DeepSeek-V2: MLA; RoPE on the decoupled dims, interleaved pairs */
        TRY(read_int(root, "q_lora_rank", 0, &c->q_lora_rank, error));
        TRY(read_int(root, "kv_lora_rank", 1, &c->kv_lora_rank, error));
        TRY(read_int(root, "qk_nope_head_dim", 1, &c->qk_nope_head_dim, error));
        TRY(read_int(root, "qk_rope_head_dim", 1, &c->qk_rope_head_dim, error));
        TRY(read_int(root, "v_head_dim", 1, &c->v_head_dim, error));
        TRY(require(c->kv_lora_rank, "kv_lora_rank", error));
        TRY(require(c->qk_nope_head_dim, "qk_nope_head_dim", error));
        TRY(require(c->qk_rope_head_dim, "qk_rope_head_dim", error));
        TRY(require(c->v_head_dim, "v_head_dim", error));
        c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
        c->rope_config.layout = ATTN_ROPE_INTERLEAVED;
        c->rope_config.rotary_dim = c->qk_rope_head_dim;
    }
    return ATTN_OK;
}

static attn_status parse_root(const cJSON *root, attn_model_config *c, attn_error *error) {
    if (!cJSON_IsObject(root))
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: not a JSON object");
    const char *model_type = NULL;
    TRY(read_string(root, "model_type", &model_type, error));
    if (model_type == NULL)
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: \"model_type\" missing");
    attn_status status = attn_model_family_parse(model_type, &c->family, error);
    if (status != ATTN_OK)
        return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: model_type '%.32s' not a "
                         "supported family (bert, gpt2, llama, mistral, qwen2, deepseek_v2)",
                         model_type);
    snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    TRY(read_family(root, c, error));
    TRY(require(c->hidden_size, c->family == ATTN_MODEL_GPT2 ? "n_embd" : "hidden_size", error));
    TRY(require(c->heads, c->family == ATTN_MODEL_GPT2 ? "n_head" : "num_attention_heads",
                error));
    if (c->kv_heads == 0) c->kv_heads = c->heads;
    if (c->head_dim == 0) {
        if (c->hidden_size % c->heads != 0)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "config.json: hidden size %lld not a multiple of %lld heads (and "
                             "no head_dim)", (long long)c->hidden_size, (long long)c->heads);
        c->head_dim = c->hidden_size / c->heads;
    }
    if (c->heads % c->kv_heads != 0)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "config.json: num_key_value_heads = %lld must divide "
                         "num_attention_heads = %lld", (long long)c->kv_heads,
                         (long long)c->heads);
    if (c->rope) {
        double partial = 1.0;
        TRY(read_double(root, "partial_rotary_factor", &partial, error));
        TRY(read_rope_scaling(root, c, &partial, error));
        if (c->rope_config.rotary_dim == 0) {
            if (!(partial > 0.0 && partial <= 1.0))
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "config.json: partial_rotary_factor = %g: must be in (0, 1]",
                                 partial);
            /* transformers: int(head_dim * partial_rotary_factor) dims rotate. 0 would mean
               "the whole head" to attn_rope_config, an odd count pairs nothing: refused. */
            const int64_t rotary = (int64_t)((double)c->head_dim * partial);
            if (rotary < 2 || rotary % 2 != 0)
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "config.json: partial_rotary_factor = %g: head_dim %lld x %g = "
                                 "%lld rotary dims (must be even and >= 2)", partial,
                                 (long long)c->head_dim, partial, (long long)rotary);
            c->rope_config.rotary_dim = rotary;
        }
        if (!(c->rope_config.base > 1.0))
            return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: rope_theta = %g: must be > 1",
                             c->rope_config.base);
        double frequency, magnitude;
        attn_rope_config probe = c->rope_config;
        probe.rotary_dim = 2; /* the scaling fields only; the layer config checks the dims */
        if (attn_rope_frequencies(&probe, 1, &frequency, &magnitude, error) != ATTN_OK)
            return attn_fail(error, ATTN_ERROR_FORMAT, "config.json: rope settings: %s",
                             error != NULL ? error->message : "out of range");
    }
    return ATTN_OK;
}

attn_status attn_model_config_parse(const char *json, size_t length, attn_model_config *config,
                                    attn_error *error) {
    if (json == NULL || config == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "json or config = NULL");
    memset(config, 0, sizeof *config);
    cJSON *root = NULL;
    attn_status status = attn_json_parse(json, length, "config.json", &root, error);
    if (status != ATTN_OK) return status;
    status = parse_root(root, config, error);
    cJSON_Delete(root);
    if (status != ATTN_OK) memset(config, 0, sizeof *config);
    return status;
}

attn_status attn_model_config_read(const char *path, attn_model_config *config,
                                   attn_error *error) {
    if (path == NULL || config == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path or config = NULL");
    char file_path[4096];
    struct stat info;
    int folder = stat(path, &info) == 0 && S_ISDIR(info.st_mode);
    int written = snprintf(file_path, sizeof file_path, folder ? "%s/config.json" : "%s", path);
    if (written < 0 || (size_t)written >= sizeof file_path)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "path: longer than %zu bytes",
                         sizeof file_path - 1);
    FILE *file = fopen(file_path, "rb");
    if (file == NULL)
        return attn_fail(error, ATTN_ERROR_IO, "%s: cannot open (%s)", file_path,
                         strerror(errno));
    const long limit = 16L << 20; /* config.json files are a few kB; refuse anything huge */
    long size = fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
    if (size < 0 || size > limit || fseek(file, 0, SEEK_SET) != 0) {
        fclose(file);
        return attn_fail(error, size > limit ? ATTN_ERROR_FORMAT : ATTN_ERROR_IO,
                         "%s: cannot read (size %ld; at most %ld bytes)", file_path, size, limit);
    }
    char *text = malloc((size_t)size + 1);
    if (text == NULL) {
        fclose(file);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: %ld bytes", file_path, size);
    }
    size_t got = fread(text, 1, (size_t)size, file);
    fclose(file);
    if (got != (size_t)size) {
        free(text);
        return attn_fail(error, ATTN_ERROR_IO, "%s: short read", file_path);
    }
    attn_status status = attn_model_config_parse(text, (size_t)size, config, error);
    free(text);
    if (status != ATTN_OK && error != NULL) {
        char message[sizeof error->message];
        snprintf(message, sizeof message, "%s", error->message);
        return attn_fail(error, status, "%s: %s", file_path, message);
    }
    return status;
}
