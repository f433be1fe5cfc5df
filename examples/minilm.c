/*
 * minilm.c — sentence embeddings with all-MiniLM-L6-v2 (a 6-layer BERT, d = 384, 12 heads)
 * end to end in C on libattn, from the model's own folder (config.json + model.safetensors):
 *   embeddings   word + position + token type 0, then LayerNorm
 *   6 layers     self-attention loaded by the BERT family names (attn_model_load_layer), padded
 *                keys masked with options.key_lengths; residual + LayerNorm; feed-forward
 *                (dense, exact erf GELU, dense) + residual + LayerNorm, written here
 *   pooling      mean over each sentence's real tokens, then L2 normalisation
 *                (sentence-transformers' Pooling(mean) + Normalize modules)
 * Token ids come from scripts/minilm_tokens.py (the model's own tokenizer), as .npy files.
 *   usage: example_minilm MODEL_DIR IDS.npy MASK.npy OUT.npy
 *     IDS, MASK: int64 [N, T] (right padded: each mask row is ones then zeros)
 *     OUT:       float32 [N, 384] sentence embeddings
 * Without arguments it prints this usage and exits 0 (ctest builds it; tests/models/minilm.sh
 * runs it against sentence-transformers).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_layers.h" /* attn.h, attn_io.h and the layer and model API */

/* Stops with a message when a call fails. */
static void check(attn_status status, const attn_error *error, const char *what) {
    if (status == ATTN_OK) return;
    fprintf(stderr, "minilm: %s: %s\n", what, error->message);
    exit(1);
}

/* A float32 copy of tensor `name` with the given shape (rank 1 or 2; columns 0 for rank 1). */
static float *tensor(const attn_safetensors_file *file, const char *name, int64_t rows,
                     int64_t columns) {
    float *data = malloc(sizeof(float) * (size_t)(rows * (columns ? columns : 1)));
    if (data == NULL) exit(1);
    int64_t shape[2] = {rows, columns};
    attn_error error;
    check(attn_safetensors_get_f32(file, name, columns ? 2 : 1, shape, data, &error), &error,
          name);
    return data;
}

/* x[n][:] = LayerNorm(x[n][:] + residual[n][:]) (residual may be NULL), statistics in double. */
static void add_layer_norm(float *x, const float *residual, int64_t rows, int64_t dim,
                           const float *weight, const float *bias, double eps) {
    for (int64_t n = 0; n < rows; ++n) {
        float *row = x + n * dim;
        if (residual != NULL)
            for (int64_t i = 0; i < dim; ++i) row[i] += residual[n * dim + i];
        double mean = 0.0, variance = 0.0;
        for (int64_t i = 0; i < dim; ++i) mean += row[i];
        mean /= (double)dim;
        for (int64_t i = 0; i < dim; ++i) variance += (row[i] - mean) * (row[i] - mean);
        double inverse = 1.0 / sqrt(variance / (double)dim + eps);
        for (int64_t i = 0; i < dim; ++i)
            row[i] = (float)((row[i] - mean) * inverse * weight[i] + bias[i]);
    }
}

/* BERT's "gelu": x Φ(x) = x (1 + erf(x / √2)) / 2. */
static void gelu(float *x, int64_t count) {
    for (int64_t i = 0; i < count; ++i) x[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0))));
}

/* One encoder layer's feed-forward and norms, under its block prefix. */
typedef struct feed_forward {
    float *attention_norm_weight, *attention_norm_bias;
    float *up_weight, *up_bias, *down_weight, *down_bias;
    float *output_norm_weight, *output_norm_bias;
} feed_forward;

/* `attention` is the layer's attention prefix ("encoder.layer.N.attention."); the block's other
 * tensors sit next to it. */
static feed_forward load_feed_forward(const attn_safetensors_file *file, const char *attention,
                                      int64_t d, int64_t inner) {
    char name[512], prefix[256];
    size_t block = strlen(attention) - strlen("attention.");
    snprintf(prefix, sizeof prefix, "%.*s", (int)block, attention);
    feed_forward f;
#define LOAD(field, part, rows, columns)                                                       \
    snprintf(name, sizeof name, "%s%s", prefix, part);                                         \
    f.field = tensor(file, name, rows, columns)
    LOAD(attention_norm_weight, "attention.output.LayerNorm.weight", d, 0);
    LOAD(attention_norm_bias, "attention.output.LayerNorm.bias", d, 0);
    LOAD(up_weight, "intermediate.dense.weight", inner, d);
    LOAD(up_bias, "intermediate.dense.bias", inner, 0);
    LOAD(down_weight, "output.dense.weight", d, inner);
    LOAD(down_bias, "output.dense.bias", d, 0);
    LOAD(output_norm_weight, "output.LayerNorm.weight", d, 0);
    LOAD(output_norm_bias, "output.LayerNorm.bias", d, 0);
#undef LOAD
    return f;
}

static void free_feed_forward(feed_forward *f) {
    float *all[8] = {f->attention_norm_weight, f->attention_norm_bias, f->up_weight, f->up_bias,
                     f->down_weight, f->down_bias, f->output_norm_weight, f->output_norm_bias};
    for (int i = 0; i < 8; ++i) free(all[i]);
}

/* Reads an int64 [N, T] .npy. */
static attn_npy_array read_ids(const char *path) {
    attn_npy_array array;
    attn_error error;
    check(attn_npy_read(path, 0, &array, &error), &error, path);
    if (array.dtype != ATTN_DTYPE_I64 || array.rank != 2) {
        fprintf(stderr, "minilm: %s: need int64 [N, T]\n", path);
        exit(1);
    }
    return array;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        printf("usage: example_minilm MODEL_DIR IDS.npy MASK.npy OUT.npy\n"
               "  MODEL_DIR: all-MiniLM-L6-v2 (config.json, model.safetensors)\n"
               "  IDS, MASK: int64 [N, T] from scripts/minilm_tokens.py\n");
        return argc == 1 ? 0 : 2;
    }
    attn_error error;
    attn_model_config model;
    check(attn_model_config_read(argv[1], &model, &error), &error, "config.json");
    if (model.family != ATTN_MODEL_BERT) {
        fprintf(stderr, "minilm: %s is a %s model, not BERT\n", argv[1], model.model_type);
        return 1;
    }
    attn_safetensors_file file; /* model.safetensors, or the shards of an index, mapped */
    check(attn_safetensors_open(argv[1], 0, &file, &error), &error, "weights");

    attn_npy_array ids = read_ids(argv[2]), mask = read_ids(argv[3]);
    const int64_t N = ids.shape[0], T = ids.shape[1], d = model.hidden_size;
    if (mask.shape[0] != N || mask.shape[1] != T || T > model.max_positions) {
        fprintf(stderr, "minilm: ids [%lld, %lld], mask [%lld, %lld], at most %lld tokens\n",
                (long long)N, (long long)T, (long long)mask.shape[0], (long long)mask.shape[1],
                (long long)model.max_positions);
        return 1;
    }
    /* Each sentence's length; the mask must be ones then zeros (right padding). */
    int32_t *lengths = malloc(sizeof(int32_t) * (size_t)N);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(N * T));
    const int64_t *id = ids.data, *keep = mask.data;
    for (int64_t n = 0; n < N; ++n) {
        lengths[n] = 0;
        for (int64_t t = 0; t < T; ++t) {
            if (keep[n * T + t] != 0 && lengths[n] != t) {
                fprintf(stderr, "minilm: mask row %lld is not right padded\n", (long long)n);
                return 1;
            }
            lengths[n] += keep[n * T + t] != 0;
            tokens[n * T + t] = (int32_t)id[n * T + t];
        }
    }

    /* Embeddings: word[token] + position[t] + token_type[0], LayerNorm. */
    float *hidden = malloc(sizeof(float) * (size_t)(N * T * d));
    float *word = tensor(&file, "embeddings.word_embeddings.weight", model.vocab_size, d);
    float *position =
        tensor(&file, "embeddings.position_embeddings.weight", model.max_positions, d);
    float *type =
        tensor(&file, "embeddings.token_type_embeddings.weight", model.type_vocab_size, d);
    float *norm_weight = tensor(&file, "embeddings.LayerNorm.weight", d, 0);
    float *norm_bias = tensor(&file, "embeddings.LayerNorm.bias", d, 0);
    check(attn_embedding_lookup(word, model.vocab_size, d, tokens, N * T, hidden, &error), &error,
          "word embeddings");
    for (int64_t n = 0; n < N; ++n)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < d; ++i)
                hidden[(n * T + t) * d + i] += position[t * d + i] + type[i];
    add_layer_norm(hidden, NULL, N * T, d, norm_weight, norm_bias, model.norm_eps);

    /* Encoder layers. Keys past a sentence's length are masked; padded query rows are computed
       but never pooled. */
    attn_options options = attn_options_default();
    options.key_lengths = lengths;
    float *attention = malloc(sizeof(float) * (size_t)(N * T * d));
    float *inner = malloc(sizeof(float) * (size_t)(N * T * model.intermediate_size));
    float *down = malloc(sizeof(float) * (size_t)(N * T * d));
    for (int64_t l = 0; l < model.layers; ++l) {
        attn_layer layer;
        char prefix[256];
        check(attn_model_load_layer(&model, &file, l, &layer, &error), &error, "attention layer");
        check(attn_model_layer_prefix(&model, &file, l, prefix, sizeof prefix, &error), &error,
              "layer prefix"); /* "encoder.layer.L.attention." */
        feed_forward f = load_feed_forward(&file, prefix, d, model.intermediate_size);
        check(attn_layer_forward(&layer, N, T, hidden, T, NULL, &options, NULL, attention, NULL,
                                 &error),
              &error, "attention");
        add_layer_norm(attention, hidden, N * T, d, f.attention_norm_weight,
                       f.attention_norm_bias, model.norm_eps);
        check(attn_linear_forward(attention, N * T, d, f.up_weight, f.up_bias,
                                  model.intermediate_size, inner, &error), &error, "intermediate");
        gelu(inner, N * T * model.intermediate_size);
        check(attn_linear_forward(inner, N * T, model.intermediate_size, f.down_weight, f.down_bias,
                                  d, down, &error), &error, "output dense");
        add_layer_norm(down, attention, N * T, d, f.output_norm_weight, f.output_norm_bias,
                       model.norm_eps);
        memcpy(hidden, down, sizeof(float) * (size_t)(N * T * d));
        free_feed_forward(&f);
        attn_layer_destroy(&layer);
    }

    /* Mean pooling over real tokens, then L2 normalisation (eps 1e-12, as torch's normalize). */
    float *embeddings = malloc(sizeof(float) * (size_t)(N * d));
    for (int64_t n = 0; n < N; ++n) {
        double norm = 0.0, count = lengths[n] > 0 ? lengths[n] : 1e-9;
        for (int64_t i = 0; i < d; ++i) {
            double sum = 0.0;
            for (int64_t t = 0; t < lengths[n]; ++t) sum += hidden[(n * T + t) * d + i];
            embeddings[n * d + i] = (float)(sum / count);
            norm += (double)embeddings[n * d + i] * embeddings[n * d + i];
        }
        norm = fmax(sqrt(norm), 1e-12);
        for (int64_t i = 0; i < d; ++i)
            embeddings[n * d + i] = (float)(embeddings[n * d + i] / norm);
    }
    int64_t shape[2] = {N, d};
    check(attn_npy_write(argv[4], ATTN_DTYPE_F32, 2, shape, embeddings, &error), &error, argv[4]);
    printf("minilm: %lld sentences, %lld tokens at most, %lld layers -> %s [%lld, %lld]\n",
           (long long)N, (long long)T, (long long)model.layers, argv[4], (long long)N,
           (long long)d);

    free(embeddings); free(down); free(inner); free(attention);
    free(word); free(position); free(type); free(norm_weight); free(norm_bias);
    free(hidden); free(tokens); free(lengths);
    attn_npy_free(&ids);
    attn_npy_free(&mask);
    attn_safetensors_free(&file);
    return 0;
}
