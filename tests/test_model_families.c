/*
 * test_model_families.c — attention layers of Hugging Face checkpoints loaded by family name:
 * GPT-2 (fused Conv1D c_attn, F32), Qwen2 (GQA, biases on q/k/v only, BF16) and Llama (GQA 4/1,
 * head_dim != d/h, llama3 RoPE scaling, F16) checkpoints made by
 * tests/fixtures/make_family_fixtures.py with transformers; config.json through
 * attn_model_config_read, layer 1 through attn_model_load_layer, its output at the fixture's
 * position ids against transformers' attention module run in float64. Plus the config reader's
 * and the loader's errors (cases as data). BERT is covered end to end by the MiniLM test.
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct family_case {
    const char *folder;
    attn_model_family family;
    int64_t d, heads, kv_heads, head_dim;
    int bias_q, bias_o, rope;
    attn_rope_scaling_type scaling;
} family_case;

static const family_case cases[] = {
    {"gpt2", ATTN_MODEL_GPT2, 32, 4, 4, 8, 1, 1, 0, ATTN_ROPE_SCALING_NONE},
    {"qwen2", ATTN_MODEL_QWEN2, 32, 4, 2, 8, 1, 0, 1, ATTN_ROPE_SCALING_NONE},
    {"llama", ATTN_MODEL_LLAMA, 32, 4, 1, 16, 0, 0, 1, ATTN_ROPE_SCALING_LLAMA3},
};

static void fixture_path(char *path, size_t capacity, const char *folder, const char *file) {
    snprintf(path, capacity, "%s/models/%s%s%s", ATTN_FIXTURE_DIR, folder, file[0] ? "/" : "",
             file);
}

static int read_array(const char *folder, const char *file, attn_dtype dtype, int64_t count,
                      attn_npy_array *array) {
    char path[1024];
    fixture_path(path, sizeof path, folder, file);
    attn_error error;
    attn_status status = attn_npy_read(path, 0, array, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s", path);
    if (status != ATTN_OK) return 0;
    int64_t n = 1;
    for (int d = 0; d < array->rank; ++d) n *= array->shape[d];
    int ok = array->dtype == dtype && n == count;
    CHECK(ok, "%s: dtype %d, %lld elements (want %lld)", path, (int)array->dtype, (long long)n,
          (long long)count);
    if (!ok) attn_npy_free(array);
    return ok;
}

static void test_family(const family_case *fc) {
    char path[1024];
    attn_error error;
    attn_model_config model;
    fixture_path(path, sizeof path, fc->folder, "");
    attn_status status = attn_model_config_read(path, &model, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: config.json", fc->folder);
    if (status != ATTN_OK) return;
    CHECK(model.family == fc->family && model.hidden_size == fc->d && model.heads == fc->heads &&
              model.kv_heads == fc->kv_heads && model.head_dim == fc->head_dim &&
              model.layers == 2 && model.causal == 1,
          "%s: family %s d %lld heads %lld/%lld head_dim %lld layers %lld", fc->folder,
          attn_model_family_name(model.family), (long long)model.hidden_size,
          (long long)model.heads, (long long)model.kv_heads, (long long)model.head_dim,
          (long long)model.layers);
    CHECK(model.bias_q == fc->bias_q && model.bias_k == fc->bias_q && model.bias_v == fc->bias_q &&
              model.bias_o == fc->bias_o && model.rope == fc->rope &&
              model.rope_config.scaling.type == fc->scaling,
          "%s: biases q %d o %d, rope %d, scaling %d", fc->folder, model.bias_q, model.bias_o,
          model.rope, (int)model.rope_config.scaling.type);

    attn_safetensors_file file;
    fixture_path(path, sizeof path, fc->folder, "model.safetensors");
    status = attn_safetensors_read(path, 0, &file, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: safetensors", fc->folder);
    if (status != ATTN_OK) return;
    attn_layer layer;
    status = attn_model_load_layer(&model, &file, 1, &layer, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: load layer 1", fc->folder);
    int64_t B = 2, T = 7, count = B * T * fc->d;
    attn_npy_array x, positions, expected;
    if (status == ATTN_OK && read_array(fc->folder, "x.npy", ATTN_DTYPE_F64, count, &x)) {
        if (read_array(fc->folder, "positions.npy", ATTN_DTYPE_I64, B * T, &positions)) {
            if (read_array(fc->folder, "out.npy", ATTN_DTYPE_F64, count, &expected)) {
                float *input = malloc((size_t)count * sizeof(float));
                float *out = malloc((size_t)count * sizeof(float));
                for (int64_t i = 0; i < count; ++i) input[i] = (float)((double *)x.data)[i];
                attn_options options = attn_options_default();
                options.causal = 1;
                options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
                attn_layer_activations kept = {0};
                status = attn_layer_forward_at(&layer, B, T, input, positions.data, T, NULL, NULL,
                                               &options, &kept, out, NULL, &error);
                CHECK_STATUS(status, ATTN_OK, &error, "%s: forward", fc->folder);
                double worst = 0.0, largest = 0.0;
                for (int64_t i = 0; i < count; ++i) {
                    double want = ((double *)expected.data)[i];
                    double e = fabs(out[i] - want) / (1.0 + fabs(want));
                    worst = e > worst || isnan(e) ? e : worst;
                    largest = fabs(want) > largest ? fabs(want) : largest;
                }
                CHECK(worst < 2e-5 && largest > 1.0,
                      "%s: layer 1 vs transformers float64, max relative error %.3g (|out| up "
                      "to %.2f)", fc->folder, worst, largest);
                /* The kept ids are the backward's: a copy, not the caller's pointer. */
                CHECK(!fc->rope || (kept.query_positions != NULL &&
                                    kept.query_positions != positions.data &&
                                    kept.query_positions[B * T - 1] == 15 &&
                                    kept.key_positions[T] == 3),
                      "%s: activations keep copies of the position ids", fc->folder);
                /* Without the ids (positions 0..T-1 in both rows) row 1 must differ. */
                attn_layer_forward(&layer, B, T, input, T, NULL, &options, NULL, out, NULL, &error);
                double moved = 0.0;
                for (int64_t i = T * fc->d; i < count; ++i)
                    moved = fmax(moved, fabs(out[i] - ((double *)expected.data)[i]));
                CHECK(fc->rope ? moved > 1e-2 : moved < 1e-4,
                      "%s: position ids %s (row 1 moves by %.3g without them)", fc->folder,
                      fc->rope ? "matter" : "are ignored without RoPE", moved);
                attn_layer_activations_free(&kept);
                free(input);
                free(out);
                attn_npy_free(&expected);
            }
            attn_npy_free(&positions);
        }
        attn_npy_free(&x);
    }
    attn_layer_destroy(&layer);

    /* Layer 0 loads too; layer 2 does not exist. */
    status = attn_model_load_layer(&model, &file, 0, &layer, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: load layer 0", fc->folder);
    attn_layer_destroy(&layer);
    status = attn_model_load_layer(&model, &file, 2, &layer, &error);
    CHECK(status == ATTN_ERROR_FORMAT && strstr(error.message, "layer 2") != NULL &&
              layer.parameters == NULL,
          "%s: layer 2 absent: %s", fc->folder, error.message);
    attn_safetensors_free(&file);
}

/* Loader errors: a family's names missing, a bias mismatch in either direction. */
static void test_load_errors(void) {
    char path[1024];
    attn_error error;
    attn_safetensors_file qwen2, llama;
    fixture_path(path, sizeof path, "qwen2", "model.safetensors");
    attn_status status = attn_safetensors_read(path, 0, &qwen2, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "qwen2 file");
    fixture_path(path, sizeof path, "llama", "model.safetensors");
    status = attn_safetensors_read(path, 0, &llama, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "llama file");
    if (status != ATTN_OK) return;
    attn_layer_config qwen2_config = {.model_dim = 32, .query_heads = 4, .kv_heads = 2,
                                      .head_dim = 8, .bias_q = 1, .bias_k = 1, .bias_v = 1};
    attn_layer_config all_biases = qwen2_config;
    all_biases.bias = 1;
    attn_layer_config no_biases = {.model_dim = 32, .query_heads = 4, .kv_heads = 2,
                                   .head_dim = 8};
    const char *prefix = "model.layers.0.self_attn.";
    struct {
        const char *what;
        attn_layer_config config;
        attn_model_family family;
        const attn_safetensors_file *file;
        attn_status expected;
        const char *needle;
    } table[] = {
        {"qwen2 as qwen2", qwen2_config, ATTN_MODEL_QWEN2, &qwen2, ATTN_OK, ""},
        {"qwen2 with an o bias", all_biases, ATTN_MODEL_QWEN2, &qwen2, ATTN_ERROR_FORMAT,
         "o_proj.bias"},
        {"qwen2 without biases", no_biases, ATTN_MODEL_QWEN2, &qwen2, ATTN_ERROR_SHAPE_MISMATCH,
         "q_proj.bias' present"},
        {"qwen2 as bert", qwen2_config, ATTN_MODEL_BERT, &qwen2, ATTN_ERROR_FORMAT,
         "self.query.weight"},
        {"qwen2 as gpt2", qwen2_config, ATTN_MODEL_GPT2, &qwen2, ATTN_ERROR_INVALID_ARGUMENT,
         "kv_heads = 2"},
        {"qwen2 as deepseek", qwen2_config, ATTN_MODEL_DEEPSEEK_V2, &qwen2,
         ATTN_ERROR_INVALID_ARGUMENT, "attn_model_load_mla"},
        {"llama shapes wrong", qwen2_config, ATTN_MODEL_LLAMA, &llama, ATTN_ERROR_SHAPE_MISMATCH,
         "q_proj.weight"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        attn_layer layer;
        status = attn_layer_create(&table[i].config, &layer, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s: create", table[i].what);
        error.message[0] = '\0';
        status = attn_layer_load_family(&layer, table[i].family, prefix, table[i].file, &error);
        CHECK(status == table[i].expected && strstr(error.message, table[i].needle) != NULL,
              "load '%s': %s (%s)", table[i].what, attn_status_name(status), error.message);
        attn_layer_destroy(&layer);
    }
    attn_safetensors_free(&qwen2);
    attn_safetensors_free(&llama);
}

/* config.json errors and defaults, from text. */
static void test_config_parse(void) {
    struct {
        const char *what, *json;
        attn_status expected;
        const char *needle;
    } table[] = {
        {"malformed", "{\"model_type\": \"bert\",", ATTN_ERROR_FORMAT, "malformed JSON"},
        {"not an object", "[1, 2]", ATTN_ERROR_FORMAT, "not a JSON object"},
        {"no model_type", "{\"hidden_size\": 8}", ATTN_ERROR_FORMAT, "model_type"},
        {"unknown family", "{\"model_type\": \"t5\"}", ATTN_ERROR_FORMAT, "'t5'"},
        {"no hidden size", "{\"model_type\": \"llama\", \"num_attention_heads\": 2}",
         ATTN_ERROR_FORMAT, "\"hidden_size\" missing"},
        {"fractional heads", "{\"model_type\": \"bert\", \"hidden_size\": 8, "
         "\"num_attention_heads\": 2.5}", ATTN_ERROR_FORMAT, "num_attention_heads"},
        {"kv heads not dividing", "{\"model_type\": \"mistral\", \"hidden_size\": 8, "
         "\"num_attention_heads\": 4, \"num_key_value_heads\": 3}", ATTN_ERROR_FORMAT,
         "num_key_value_heads = 3"},
        {"longrope", "{\"model_type\": \"llama\", \"hidden_size\": 8, \"num_attention_heads\": 2,"
         " \"max_position_embeddings\": 8, \"rope_scaling\": {\"type\": \"longrope\"}}",
         ATTN_ERROR_FORMAT, "'longrope' not supported"},
        {"llama3 without factors", "{\"model_type\": \"llama\", \"hidden_size\": 8, "
         "\"num_attention_heads\": 2, \"max_position_embeddings\": 8, \"rope_scaling\": "
         "{\"rope_type\": \"llama3\", \"factor\": 8}}", ATTN_ERROR_FORMAT, "low_freq_factor"},
        {"linear without factor", "{\"model_type\": \"qwen2\", \"hidden_size\": 8, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"linear\"}}",
         ATTN_ERROR_FORMAT, "\"factor\" missing"},
        {"relative positions", "{\"model_type\": \"bert\", \"hidden_size\": 8, "
         "\"num_attention_heads\": 2, \"position_embedding_type\": \"relative_key\"}",
         ATTN_ERROR_FORMAT, "relative_key"},
        {"gpt2 by layer", "{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, "
         "\"scale_attn_by_inverse_layer_idx\": true}", ATTN_ERROR_FORMAT,
         "scale_attn_by_inverse_layer_idx = true"},
        /* fuzz/regressions/model_config: 0 rotary dims used to mean the whole head */
        {"partial rotary to 0 dims", "{\"model_type\": \"llama\", \"hidden_size\": 64, "
         "\"num_attention_heads\": 4, \"partial_rotary_factor\": 0.01}", ATTN_ERROR_FORMAT,
         "head_dim 16 x 0.01 = 0 rotary dims"},
        {"partial rotary to odd dims", "{\"model_type\": \"qwen2\", \"hidden_size\": 64, "
         "\"num_attention_heads\": 4, \"partial_rotary_factor\": 0.2}", ATTN_ERROR_FORMAT,
         "= 3 rotary dims (must be even"},
        {"mistral ok", "{\"model_type\": \"mistral\", \"hidden_size\": 64, "
         "\"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"sliding_window\": 4096, "
         "\"rope_theta\": 1e6, \"rope_scaling\": null}", ATTN_OK, ""},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        attn_model_config config;
        attn_error error = {0};
        attn_status status =
            attn_model_config_parse(table[i].json, strlen(table[i].json), &config, &error);
        CHECK(status == table[i].expected && strstr(error.message, table[i].needle) != NULL,
              "config '%s': %s (%s)", table[i].what, attn_status_name(status), error.message);
        if (status == ATTN_OK)
            CHECK(config.family == ATTN_MODEL_LLAMA && strcmp(config.model_type, "mistral") == 0 &&
                      config.head_dim == 8 && config.kv_heads == 2 &&
                      config.sliding_window == 4096 && config.rope_config.base == 1e6 &&
                      config.rope_config.rotary_dim == 8 && !config.bias_q,
                  "mistral: defaults (head_dim = d/h, sliding window, theta)");
    }
    /* DeepSeek-V2-Lite-shaped config: MLA sizes, YaRN, interleaved RoPE, softmax scale. */
    const char *deepseek =
        "{\"model_type\": \"deepseek_v2\", \"hidden_size\": 2048, \"num_attention_heads\": 16,"
        " \"num_key_value_heads\": 16, \"q_lora_rank\": null, \"kv_lora_rank\": 512,"
        " \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128,"
        " \"max_position_embeddings\": 163840, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000,"
        " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"beta_fast\": 32,"
        " \"beta_slow\": 1, \"mscale\": 0.707, \"mscale_all_dim\": 0.707,"
        " \"original_max_position_embeddings\": 4096}}";
    attn_model_config config;
    attn_error error;
    attn_status status = attn_model_config_parse(deepseek, strlen(deepseek), &config, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "deepseek_v2 config");
    attn_mla_config mla;
    status = attn_model_mla_config(&config, &mla, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "deepseek_v2 mla config");
    double m = 0.1 * 0.707 * log(40.0) + 1.0, scale = m * m / sqrt(192.0);
    CHECK(mla.q_lora_rank == 0 && mla.kv_lora_rank == 512 && mla.qk_rope_dim == 64 &&
              fabs(mla.scale - scale) < 1e-6 * scale && config.rope_config.rotary_dim == 64 &&
              config.rope_config.layout == ATTN_ROPE_INTERLEAVED &&
              config.rope_config.scaling.type == ATTN_ROPE_SCALING_YARN &&
              config.rope_config.scaling.original_max_positions == 4096,
          "deepseek_v2: MLA sizes, scale %.9g (want %.9g), YaRN", mla.scale, scale);
    attn_layer_config layer;
    CHECK(attn_model_layer_config(&config, &layer, &error) == ATTN_ERROR_INVALID_ARGUMENT,
          "deepseek_v2 has no attn_layer config");
    /* Reading: a folder without config.json and a missing file are IO errors naming the path;
       the rope fixture folders hold one each. */
    status = attn_model_config_read("/nonexistent/attn_models", &config, &error);
    CHECK(status == ATTN_ERROR_IO && strstr(error.message, "/nonexistent/attn_models") != NULL,
          "missing config.json: %s", error.message);
    status = attn_model_config_read(ATTN_FIXTURE_DIR "/models", &config, &error);
    CHECK(status == ATTN_ERROR_IO && strstr(error.message, "models/config.json") != NULL,
          "folder without config.json: %s", error.message);
    attn_model_family family;
    CHECK(attn_model_family_parse("mistral", &family, &error) == ATTN_OK &&
              family == ATTN_MODEL_LLAMA &&
              attn_model_family_parse("Llama", &family, &error) == ATTN_ERROR_INVALID_ARGUMENT &&
              strcmp(attn_model_family_name(ATTN_MODEL_QWEN2), "qwen2") == 0,
          "family names");
}

/* MLA loading by DeepSeek-V2 names, from a file written here (random weights, V2 shapes with
 * q_lora_rank > 0), checked tensor by tensor. */
static void test_mla_load(void) {
    const int64_t d = 16, h = 2, qr = 8, kr = 6, nope = 4, rope = 2, v = 3;
    struct { const char *name; int64_t rows, columns; } specs[] = {
        {"model.layers.0.self_attn.q_a_proj.weight", qr, d},
        {"model.layers.0.self_attn.q_a_layernorm.weight", qr, 0},
        {"model.layers.0.self_attn.q_b_proj.weight", h * (nope + rope), qr},
        {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", kr + rope, d},
        {"model.layers.0.self_attn.kv_a_layernorm.weight", kr, 0},
        {"model.layers.0.self_attn.kv_b_proj.weight", h * (nope + v), kr},
        {"model.layers.0.self_attn.o_proj.weight", d, h * v},
    };
    enum { N = sizeof specs / sizeof specs[0] };
    attn_safetensors_tensor tensors[N];
    float *values[N];
    test_rng rng;
    test_rng_seed(&rng, 3);
    for (int i = 0; i < N; ++i) {
        int64_t count = specs[i].rows * (specs[i].columns ? specs[i].columns : 1);
        values[i] = malloc((size_t)count * sizeof(float));
        test_fill_normal(&rng, values[i], count, 1.0f);
        memset(&tensors[i], 0, sizeof tensors[i]);
        snprintf(tensors[i].name, sizeof tensors[i].name, "%s", specs[i].name);
        tensors[i].dtype = ATTN_DTYPE_F32;
        tensors[i].rank = specs[i].columns ? 2 : 1;
        tensors[i].shape[0] = specs[i].rows;
        tensors[i].shape[1] = specs[i].columns;
        tensors[i].data = values[i];
    }
    char path[256];
    snprintf(path, sizeof path, "/tmp/attn_test_mla_%d.safetensors", (int)getpid());
    attn_error error;
    attn_status status = attn_safetensors_write(path, tensors, N, NULL, 0, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "write mla file");
    attn_safetensors_file file;
    status = attn_safetensors_read(path, 0, &file, &error);
    remove(path);
    CHECK_STATUS(status, ATTN_OK, &error, "read mla file");
    if (status != ATTN_OK) return;
    char json[512];
    snprintf(json, sizeof json,
             "{\"model_type\": \"deepseek_v2\", \"hidden_size\": %lld, \"num_attention_heads\":"
             " %lld, \"q_lora_rank\": %lld, \"kv_lora_rank\": %lld, \"qk_nope_head_dim\": %lld,"
             " \"qk_rope_head_dim\": %lld, \"v_head_dim\": %lld, \"num_hidden_layers\": 1}",
             (long long)d, (long long)h, (long long)qr, (long long)kr, (long long)nope,
             (long long)rope, (long long)v);
    attn_model_config model;
    status = attn_model_config_parse(json, strlen(json), &model, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "mla config");
    attn_mla_layer layer;
    status = attn_model_load_mla(&model, &file, 0, &layer, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "load mla layer 0");
    if (status == ATTN_OK) {
        const float *slots[N] = {layer.weights.wq_a, layer.weights.q_norm, layer.weights.wq_b,
                                 layer.weights.wkv_a, layer.weights.kv_norm, layer.weights.wkv_b,
                                 layer.weights.wo};
        for (int i = 0; i < N; ++i) {
            int64_t count = specs[i].rows * (specs[i].columns ? specs[i].columns : 1);
            CHECK(slots[i] != NULL &&
                      memcmp(slots[i], values[i], (size_t)count * sizeof(float)) == 0,
                  "mla: %s in its attn_mla_weights slot", specs[i].name);
        }
        CHECK(layer.weights.wq == NULL && layer.config.q_lora_rank == qr, "mla: wq unused");
    }
    attn_mla_layer_destroy(&layer);
    status = attn_model_load_mla(&model, &file, 1, &layer, &error);
    CHECK(status == ATTN_ERROR_FORMAT && layer.parameters == NULL, "mla layer 1 absent: %s",
          error.message);
    attn_safetensors_free(&file);
    for (int i = 0; i < N; ++i) free(values[i]);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) test_family(&cases[i]);
    test_load_errors();
    test_config_parse();
    test_mla_load();
    return test_finish();
}
