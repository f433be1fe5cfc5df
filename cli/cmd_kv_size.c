/*
 * cmd_kv_size.c — `attn kv-size`: KV-cache bytes per token and for a given context, for MHA,
 * GQA, MQA and MLA configurations of one layer and of the whole model, and their ratios to
 * MHA. Sizes come from the library (attn_kv_cache_bytes_per_token on the config each layer
 * would create; MLA through attn_mla_cache_config), not from a formula repeated here.
 * Storage: f32, bf16, f16, or the quantized int8 (bytes per token include its float32 scale
 * per (token, KV head), for keys and for values) and fp8 (per-KV-head scales, fixed bytes per
 * layer, not per token; printed apart).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_layers.h"
#include "cli.h"

typedef struct model_row {
    const char *name;
    int64_t kv_heads, head_dim; /* MHA / GQA / MQA */
    int mla;                    /* nonzero: DeepSeek-V2 latent cache */
    int64_t layers;
} model_row;

static void usage(FILE *stream) {
    fprintf(stream,
            "usage: attn kv-size [--context N] [--dtype f32|bf16|f16|int8|fp8_e4m3|fp8_e5m2]"
            " [--batch B]\n"
            "  Prints KV-cache bytes per token and for N tokens (default 4096) x B sequences,\n"
            "  per layer and per model, for Llama-2-70B-like MHA/GQA/MQA (h = 64, dh = 128,\n"
            "  80 layers) and DeepSeek-V2 MLA (d_c = 512, d_rope = 64, 60 layers).\n"
            "  --dtype: the cache's storage (default bf16). int8 stores one float32 scale per\n"
            "  (token, KV head) for keys and one for values (MLA: keys only), counted in\n"
            "  bytes/tok (column 'scale B'); fp8_e4m3 / fp8_e5m2 have one float32 scale per KV\n"
            "  head for keys and for values, 2 x Hkv x 4 bytes per layer whatever the context\n"
            "  (printed below the table, not per token).\n");
}

static void human(double bytes, char *text, size_t size) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int unit = 0;
    while (bytes >= 1024.0 && unit < 4) bytes /= 1024.0, ++unit;
    snprintf(text, size, "%.2f %s", bytes, units[unit]);
}

/* Parses the value of a count option (--context, --batch): an integer >= 1. On failure
 * prints one line naming the option and the value and returns false. */
static bool parse_count(const char *option, const char *value, int64_t *count) {
    char *end;
    *count = strtoll(value, &end, 10);
    if (*end || *count < 1) {
        fprintf(stderr, "attn kv-size: %s %s: expected an integer >= 1\n", option, value);
        return false;
    }
    return true;
}

int cli_kv_size(int argc, char **argv) {
    int64_t context = 4096, batch = 1;
    attn_dtype dtype = ATTN_DTYPE_BF16;
    const char *dtype_name = "bf16";
    for (int i = 1; i < argc; ++i) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--context") == 0 && value) {
            if (!parse_count(argv[i], value, &context)) return 2;
            ++i;
        } else if (strcmp(argv[i], "--batch") == 0 && value) {
            if (!parse_count(argv[i], value, &batch)) return 2;
            ++i;
        } else if (strcmp(argv[i], "--dtype") == 0 && value) {
            static const struct { const char *name; attn_dtype dtype; } storages[] = {
                {"f32", ATTN_DTYPE_F32},  {"bf16", ATTN_DTYPE_BF16},
                {"f16", ATTN_DTYPE_F16},  {"int8", ATTN_DTYPE_Q8},
                {"fp8_e4m3", ATTN_DTYPE_FP8_E4M3}, {"fp8_e5m2", ATTN_DTYPE_FP8_E5M2},
            };
            size_t s = 0;
            while (s < sizeof storages / sizeof storages[0] && strcmp(value, storages[s].name))
                ++s;
            if (s == sizeof storages / sizeof storages[0]) {
                fprintf(stderr, "attn kv-size: --dtype %s: expected f32, bf16, f16, int8, "
                        "fp8_e4m3 or fp8_e5m2\n", value);
                return 2;
            }
            dtype = storages[s].dtype;
            dtype_name = value;
            ++i;
        } else {
            fprintf(stderr, "attn kv-size: unknown option or missing value: %s (see attn kv-size "
                            "--help)\n", argv[i]);
            return 2;
        }
    }
    const model_row rows[] = {
        {"MHA  (Llama-2-70B-like, h = g = 64, dh = 128)", 64, 128, 0, 80},
        {"GQA  (Llama-2-70B, h = 64, g = 8, dh = 128)", 8, 128, 0, 80},
        {"MQA  (h = 64, g = 1, dh = 128)", 1, 128, 0, 80},
        {"MLA  (DeepSeek-V2, d_c = 512, d_rope = 64)", 0, 0, 1, 60},
        {"MHA  (DeepSeek-V2 without MLA: 128 heads x (192 k + 128 v))", 0, 0, 2, 60},
    };
    printf("KV cache per sequence, %s storage, context %lld tokens, batch %lld\n\n", dtype_name,
           (long long)context, (long long)batch);
    printf("%-62s %10s %12s %8s %14s %14s %8s\n", "configuration", "elem/tok", "bytes/tok",
           "scale B", "layer x ctx", "model x ctx", "vs MHA");
    double mha_bytes = 0, deepseek_mha_bytes = 0, mla_bytes = 0, mla_elements = 0;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
        attn_kv_cache_config config = attn_kv_cache_config_default();
        attn_error error;
        if (rows[r].mla == 1) {
            attn_mla_config mla = {5120, 128, 1536, 512, 128, 64, 128, 0.0, 0.0f, 0.0f, {0}};
            if (attn_mla_cache_config(&mla, 1, 1, dtype, 0, &config, &error) != ATTN_OK) {
                fprintf(stderr, "attn kv-size: %s\n", error.message);
                return 1;
            }
        } else {
            config.sequences = 1, config.capacity = 1, config.dtype = dtype;
            config.kv_heads = rows[r].mla == 2 ? 128 : rows[r].kv_heads;
            config.key_dim = rows[r].mla == 2 ? 192 : rows[r].head_dim;
            config.value_dim = rows[r].mla == 2 ? 128 : rows[r].head_dim;
        }
        /* stored elements per token; bytes per token from the library (int8: + its scales) */
        const double elements = (double)(config.kv_heads * (config.key_dim +
                                                            (config.values_in_keys ? 0 : config.value_dim)));
        const double per_token = (double)attn_kv_cache_bytes_per_token(&config);
        const double scale_bytes = per_token - elements * (double)attn_dtype_size(dtype);
        const double layer = per_token * (double)context * (double)batch;
        const double model = layer * (double)rows[r].layers;
        if (r == 0) mha_bytes = per_token;
        if (rows[r].mla == 1) mla_bytes = per_token, mla_elements = elements;
        if (rows[r].mla == 2) deepseek_mha_bytes = per_token;
        char layer_text[32], model_text[32];
        human(layer, layer_text, sizeof layer_text);
        human(model, model_text, sizeof model_text);
        printf("%-62s %10.0f %12.0f %8.0f %14s %14s %7.1f%%\n", rows[r].name, elements, per_token,
               scale_bytes, layer_text, model_text, 100.0 * per_token / mha_bytes);
    }
    printf("\nMLA stores %.0f values/token/layer (= GQA with %.2f groups of dh = 128);\n"
           "its cache is %.1fx smaller than the same model's MHA cache and %.1fx smaller than\n"
           "Llama-2-70B-like MHA per layer.\n",
           mla_elements, mla_elements / 256.0, deepseek_mha_bytes / mla_bytes,
           mha_bytes / mla_bytes);
    if (dtype == ATTN_DTYPE_Q8)
        printf("int8: bytes/tok include one float32 scale per (token, KV head) for keys and one\n"
               "for values (MLA: keys only), the 'scale B' column.\n");
    if (dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2)
        printf("fp8: plus one float32 scale per KV head for keys and one for values, fixed\n"
               "whatever the context: 2 x Hkv x 4 bytes per layer (512 B for MHA, 64 B for GQA,\n"
               "8 B for MQA, 4 B for MLA: keys only, 1024 B for DeepSeek-V2 MHA), not counted\n"
               "in bytes/tok.\n");
    return 0;
}
