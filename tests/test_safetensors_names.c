/*
 * test_safetensors_names.c — recognising attention layers from checkpoint tensor names
 * (attn_named_layers_find): a table of name lists as Llama/Mistral, Qwen2, BERT (MiniLM),
 * GPT-2, DeepSeek-V2 (-Lite) MLA checkpoints and attn's own files write them, each with the
 * layers expected (family, layer number, prefix, biases, what is missing), plus near misses
 * that must not match, ordering by layer number, the capacity contract and argument errors.
 */
#include "test_support.h"
#include "attn_io.h"

#include <string.h>

#define R(role) (1u << (role))
#define QKVO (R(ATTN_ROLE_Q) | R(ATTN_ROLE_K) | R(ATTN_ROLE_V) | R(ATTN_ROLE_O))
#define MLA_LITE (R(ATTN_ROLE_Q) | R(ATTN_ROLE_O) | R(ATTN_ROLE_KV_A) | R(ATTN_ROLE_KV_A_NORM) | R(ATTN_ROLE_KV_B))
#define MLA_FULL (R(ATTN_ROLE_Q_A) | R(ATTN_ROLE_Q_A_NORM) | R(ATTN_ROLE_Q_B) | R(ATTN_ROLE_O) | \
                  R(ATTN_ROLE_KV_A) | R(ATTN_ROLE_KV_A_NORM) | R(ATTN_ROLE_KV_B))

typedef struct expected_layer {
    const char *family;
    int64_t index;
    const char *prefix;
    unsigned weights, biases, missing;
} expected_layer;

typedef struct names_case {
    const char *what;
    const char *names[24]; /* NULL-terminated */
    int64_t count;         /* layers expected */
    expected_layer layers[3];
} names_case;

static const names_case cases[] = {
    {"Llama, two layers (and non-attention tensors)",
     {"model.embed_tokens.weight", "model.layers.1.self_attn.q_proj.weight",
      "model.layers.1.self_attn.k_proj.weight", "model.layers.1.self_attn.v_proj.weight",
      "model.layers.1.self_attn.o_proj.weight", "model.layers.0.self_attn.q_proj.weight",
      "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
      "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.up_proj.weight",
      "model.layers.0.input_layernorm.weight", "lm_head.weight", NULL},
     2,
     {{"llama", 0, "model.layers.0.self_attn.", QKVO, 0, 0},
      {"llama", 1, "model.layers.1.self_attn.", QKVO, 0, 0}}},
    {"Qwen2: biases on q, k, v only",
     {"model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.q_proj.bias",
      "model.layers.3.self_attn.k_proj.weight", "model.layers.3.self_attn.k_proj.bias",
      "model.layers.3.self_attn.v_proj.weight", "model.layers.3.self_attn.v_proj.bias",
      "model.layers.3.self_attn.o_proj.weight", NULL},
     1,
     {{"qwen2", 3, "model.layers.3.self_attn.", QKVO, QKVO & ~R(ATTN_ROLE_O), 0}}},
    {"attn's own layer file (no prefix, biases on all four)",
     {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "q_proj.bias",
      "k_proj.bias", "v_proj.bias", "o_proj.bias", NULL},
     1,
     {{"attn", -1, "", QKVO, QKVO, 0}}},
    {"attn train --save names",
     {"embed_tokens.weight", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
      "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight", "lm_head.weight",
      "lm_head.bias", NULL},
     1,
     {{"llama", 0, "layers.0.self_attn.", QKVO, 0, 0}}},
    {"odd bias pattern",
     {"m.0.k_proj.weight", "m.0.q_proj.weight", "m.0.v_proj.weight", "m.0.o_proj.weight",
      "m.0.o_proj.bias", NULL},
     1,
     {{"q/k/v/o_proj", 0, "m.0.", QKVO, R(ATTN_ROLE_O), 0}}},
    {"BERT / MiniLM",
     {"embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight",
      "encoder.layer.0.attention.self.query.bias", "encoder.layer.0.attention.self.key.weight",
      "encoder.layer.0.attention.self.key.bias", "encoder.layer.0.attention.self.value.weight",
      "encoder.layer.0.attention.self.value.bias",
      "encoder.layer.0.attention.output.dense.weight",
      "encoder.layer.0.attention.output.dense.bias",
      "encoder.layer.0.attention.output.LayerNorm.weight",
      "encoder.layer.0.intermediate.dense.weight", "encoder.layer.0.output.dense.weight", NULL},
     1,
     {{"bert", 0, "encoder.layer.0.attention.", QKVO, QKVO, 0}}},
    {"GPT-2 (with and without the transformer. prefix)",
     {"transformer.h.11.attn.c_attn.weight", "transformer.h.11.attn.c_attn.bias",
      "transformer.h.11.attn.c_proj.weight", "transformer.h.11.attn.c_proj.bias",
      "transformer.h.11.mlp.c_proj.weight", "h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight",
      "h.0.attn.bias", NULL},
     2,
     {{"gpt2", 0, "h.0.attn.", R(ATTN_ROLE_QKV) | R(ATTN_ROLE_O), 0, 0},
      {"gpt2", 11, "transformer.h.11.attn.", R(ATTN_ROLE_QKV) | R(ATTN_ROLE_O),
       R(ATTN_ROLE_QKV) | R(ATTN_ROLE_O), 0}}},
    {"DeepSeek-V2-Lite MLA (q_proj)",
     {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
      "model.layers.0.self_attn.kv_a_layernorm.weight", "model.layers.0.self_attn.kv_b_proj.weight",
      "model.layers.0.self_attn.o_proj.weight", NULL},
     1,
     {{"deepseek-v2", 0, "model.layers.0.self_attn.", MLA_LITE, 0, 0}}},
    {"DeepSeek-V2 MLA (low-rank query)",
     {"model.layers.5.self_attn.q_a_proj.weight", "model.layers.5.self_attn.q_a_layernorm.weight",
      "model.layers.5.self_attn.q_b_proj.weight", "model.layers.5.self_attn.kv_a_proj_with_mqa.weight",
      "model.layers.5.self_attn.kv_a_layernorm.weight", "model.layers.5.self_attn.kv_b_proj.weight",
      "model.layers.5.self_attn.o_proj.weight", NULL},
     1,
     {{"deepseek-v2", 5, "model.layers.5.self_attn.", MLA_FULL, 0, 0}}},
    {"MLA without its query",
     {"l.2.kv_a_proj_with_mqa.weight", "l.2.kv_a_layernorm.weight", "l.2.kv_b_proj.weight",
      "l.2.o_proj.weight", "l.2.q_a_proj.weight", NULL},
     1,
     {{"deepseek-v2", 2, "l.2.",
       R(ATTN_ROLE_Q_A) | R(ATTN_ROLE_O) | R(ATTN_ROLE_KV_A) | R(ATTN_ROLE_KV_A_NORM) | R(ATTN_ROLE_KV_B),
       0, R(ATTN_ROLE_Q_A_NORM) | R(ATTN_ROLE_Q_B)}}},
    {"incomplete q/k/v/o (no o_proj, no v_proj)",
     {"model.layers.7.self_attn.q_proj.weight", "model.layers.7.self_attn.k_proj.weight", NULL},
     1,
     {{"llama", 7, "model.layers.7.self_attn.", R(ATTN_ROLE_Q) | R(ATTN_ROLE_K), 0,
       R(ATTN_ROLE_V) | R(ATTN_ROLE_O)}}},
    {"near misses match nothing",
     {"xk_proj.weight", "model.k_proj.bias", "k_proj.weightx", "attention.self.keys.weight",
      "c_attn.weights", "kv_a_proj.weight", NULL},
     0,
     {{0}}},
    {"ordered by layer number, duplicates once",
     {"b.10.k_proj.weight", "b.2.k_proj.weight", "b.10.k_proj.weight", NULL},
     2,
     {{"llama", 2, "b.2.", R(ATTN_ROLE_K), 0, R(ATTN_ROLE_Q) | R(ATTN_ROLE_V) | R(ATTN_ROLE_O)},
      {"llama", 10, "b.10.", R(ATTN_ROLE_K), 0, R(ATTN_ROLE_Q) | R(ATTN_ROLE_V) | R(ATTN_ROLE_O)}}},
};

static void test_table(void) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const names_case *nc = &cases[c];
        int64_t count = 0;
        while (nc->names[count]) ++count;
        attn_named_layer layers[4];
        int64_t found = -1;
        attn_error error;
        CHECK_STATUS(attn_named_layers_find(nc->names, count, layers, 4, &found, &error), ATTN_OK,
                     &error, "%s", nc->what);
        CHECK(found == nc->count, "%s: %lld layers (expected %lld)", nc->what, (long long)found,
              (long long)nc->count);
        for (int64_t i = 0; i < found && i < nc->count; ++i) {
            const expected_layer *e = &nc->layers[i];
            const attn_named_layer *l = &layers[i];
            CHECK(strcmp(l->family, e->family) == 0 && l->index == e->index &&
                      strcmp(l->prefix, e->prefix) == 0 && l->weights == e->weights &&
                      l->biases == e->biases && l->missing == e->missing,
                  "%s: layer %lld = %s %lld '%s' weights %#x biases %#x missing %#x (expected %s "
                  "%lld '%s' %#x %#x %#x)",
                  nc->what, (long long)i, l->family, (long long)l->index, l->prefix, l->weights,
                  l->biases, l->missing, e->family, (long long)e->index, e->prefix, e->weights,
                  e->biases, e->missing);
        }
    }
}

static void test_suffixes_and_errors(void) {
    CHECK(strcmp(attn_named_layer_suffix(ATTN_NAMES_BERT, ATTN_ROLE_O), "output.dense") == 0 &&
              strcmp(attn_named_layer_suffix(ATTN_NAMES_GPT2, ATTN_ROLE_QKV), "c_attn") == 0 &&
              strcmp(attn_named_layer_suffix(ATTN_NAMES_MLA, ATTN_ROLE_KV_A),
                     "kv_a_proj_with_mqa") == 0 &&
              attn_named_layer_suffix(ATTN_NAMES_QKVO, ATTN_ROLE_QKV) == NULL &&
              attn_named_layer_suffix((attn_name_scheme)99, ATTN_ROLE_Q) == NULL,
          "role suffixes");
    /* Capacity smaller than what is found: the count is still complete. */
    const char *names[] = {"a.3.k_proj.weight", "a.1.k_proj.weight", "a.2.k_proj.weight"};
    attn_named_layer one;
    int64_t found = 0;
    attn_error error;
    CHECK_STATUS(attn_named_layers_find(names, 3, &one, 1, &found, &error), ATTN_OK, &error,
                 "capacity 1");
    CHECK(found == 3 && one.index == 1, "found = 3, the first written is layer 1");
    CHECK_STATUS(attn_named_layers_find(names, 3, NULL, 0, &found, &error), ATTN_OK, &error,
                 "capacity 0 counts");
    CHECK(found == 3, "counted without room");
    CHECK_STATUS(attn_named_layers_find(names, 3, NULL, 2, &found, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "layers NULL with capacity 2");
    CHECK_STATUS(attn_named_layers_find(names, -1, &one, 1, &found, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "count -1");
    const char *with_null[] = {"a", NULL};
    CHECK_STATUS(attn_named_layers_find(with_null, 2, &one, 1, &found, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "names[1] NULL");
    CHECK(strstr(error.message, "names[1]") != NULL, "message: %s", error.message);
}

int main(void) {
    test_table();
    test_suffixes_and_errors();
    return test_finish();
}
