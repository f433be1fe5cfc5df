/*
 * fuzz_model_config.c — libFuzzer target for the config.json reader (attn_model_config_parse:
 * the model families BERT, GPT-2, Llama/Mistral, Qwen2, DeepSeek-V2, their sizes and RoPE
 * settings) and for what is built from its result (attn_model_layer_config with
 * attn_layer_parameter_count, attn_model_mla_config with attn_mla_cache_config). The input is
 * the JSON text, exactly `size` bytes (no NUL after it, so ASan sees an overread).
 * Any input must give a status, never a crash, overflow or leak. On error the config is all
 * zero and the message is a terminated, non-empty line. On success the documented guarantees
 * hold:
 *   - family known and equal to attn_model_family_parse(model_type), model_type terminated;
 *   - hidden_size, heads, kv_heads, head_dim >= 1, kv_heads divides heads, layers >= 0;
 *   - causal for every decoder, not for BERT; RoPE exactly for Llama, Qwen2, DeepSeek-V2,
 *     with base > 1 and rotary_dim in [1, head_dim] (0 would mean "the whole head" to
 *     attn_layer_config: a config that asks for fewer rotary dims must not rotate all);
 *   - DeepSeek-V2: head_dim = qk_nope_head_dim + qk_rope_head_dim = rotary + nope dims;
 *   - a second parse of the same bytes gives the same struct, bit for bit.
 * A violation aborts (a finding).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_layers.h"

static void finding(const char *what) {
    fprintf(stderr, "fuzz_model_config: %s\n", what);
    abort();
}

static void check_error(const attn_error *error) {
    if (memchr(error->message, '\0', sizeof error->message) == NULL)
        finding("error message not terminated");
    if (error->message[0] == '\0') finding("empty error message");
}

/* The guarantees of a successful parse (see the top). */
static void check_config(const attn_model_config *c) {
    if (memchr(c->model_type, '\0', sizeof c->model_type) == NULL)
        finding("model_type not terminated");
    attn_model_family family = ATTN_MODEL_UNKNOWN;
    attn_error error;
    if (attn_model_family_parse(c->model_type, &family, &error) != ATTN_OK ||
        family != c->family)
        finding("family differs from model_type's");
    if (c->hidden_size < 1 || c->heads < 1 || c->kv_heads < 1 || c->head_dim < 1)
        finding("a size < 1");
    if (c->heads % c->kv_heads != 0) finding("kv_heads does not divide heads");
    if (c->layers < 0 || c->intermediate_size < 0 || c->vocab_size < 0 || c->max_positions < 0 ||
        c->sliding_window < 0)
        finding("a negative size");
    if (!isfinite(c->norm_eps)) finding("norm_eps not finite");
    if (c->causal != (c->family != ATTN_MODEL_BERT)) finding("causal flag");
    const int wants_rope = c->family == ATTN_MODEL_LLAMA || c->family == ATTN_MODEL_QWEN2 ||
                           c->family == ATTN_MODEL_DEEPSEEK_V2;
    if ((c->rope != 0) != wants_rope) finding("rope flag");
    if (c->rope) {
        if (!(c->rope_config.base > 1.0) || !isfinite(c->rope_config.base))
            finding("rope base not > 1");
        if (c->rope_config.rotary_dim < 1 || c->rope_config.rotary_dim > c->head_dim)
            finding("rotary_dim outside [1, head_dim] (0 means the whole head)");
    }
    if (c->family == ATTN_MODEL_DEEPSEEK_V2 &&
        (c->head_dim != c->qk_nope_head_dim + c->qk_rope_head_dim ||
         c->rope_config.rotary_dim != c->qk_rope_head_dim || c->kv_lora_rank < 1 ||
         c->v_head_dim < 1 || c->q_lora_rank < 0))
        finding("DeepSeek-V2 sizes");
}

/* What is built from a parsed config: a status each, no overflow (UBSan), counts >= 1. */
static void build_from(const attn_model_config *c) {
    attn_error error;
    if (c->family == ATTN_MODEL_DEEPSEEK_V2) {
        attn_mla_config mla;
        if (attn_model_mla_config(c, &mla, &error) != ATTN_OK) {
            check_error(&error);
            return;
        }
        attn_kv_cache_config cache;
        if (attn_mla_cache_config(&mla, 1, 16, ATTN_DTYPE_F32, 16, &cache, &error) != ATTN_OK)
            check_error(&error);
        return;
    }
    attn_layer_config layer;
    if (attn_model_layer_config(c, &layer, &error) != ATTN_OK) {
        check_error(&error);
        return;
    }
    int64_t count = 0;
    if (attn_layer_parameter_count(&layer, &count, &error) != ATTN_OK) finding("count after OK");
    if (count < 1) finding("parameter count < 1");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy: the parser must not read past `size` (libFuzzer's buffer may be
       followed by readable bytes in the replay driver). */
    char *text = malloc(size > 0 ? size : 1);
    if (text == NULL) return 0;
    if (size > 0) memcpy(text, data, size);
    attn_model_config config, again;
    attn_error error;
    memset(&config, 0xA5, sizeof config); /* the parser must overwrite everything */
    attn_status status = attn_model_config_parse(text, size, &config, &error);
    if (status != ATTN_OK) {
        check_error(&error);
        static const attn_model_config zero;
        if (memcmp(&config, &zero, sizeof config) != 0) finding("config not zeroed on error");
        free(text);
        return 0;
    }
    check_config(&config);
    memset(&again, 0x5A, sizeof again);
    if (attn_model_config_parse(text, size, &again, &error) != ATTN_OK)
        finding("second parse failed");
    if (memcmp(&config, &again, sizeof config) != 0) finding("two parses differ");
    build_from(&config);
    free(text);
    return 0;
}
