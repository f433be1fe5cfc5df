/*
 * layer.c — the attention layer object: config validation, parameter count, creation (one
 * zeroed block), Xavier/Glorot initialisation from a seed, destruction, and the activation
 * buffers the forward pass keeps for the backward pass.
 */
#include "layers/layer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t layer_rope_dim(const attn_layer_config *config) {
    return config->rope_dim == 0 ? config->head_dim : config->rope_dim;
}

double layer_rope_base(const attn_layer_config *config) {
    return config->rope_base == 0.0 ? 10000.0 : config->rope_base;
}

attn_rope_config layer_rope_config(const attn_layer_config *config) {
    attn_rope_config rope = {.layout = config->rope_layout, .rotary_dim = layer_rope_dim(config),
                             .base = layer_rope_base(config), .scaling = config->rope_scaling};
    return rope;
}

int layer_has_bias(const attn_layer_config *config, layer_projection projection) {
    const int own[4] = {config->bias_q, config->bias_k, config->bias_v, config->bias_o};
    return config->bias || own[projection];
}

attn_status layer_rope(const attn_layer_config *config, attn_tensor *x, const int64_t *positions,
                       int inverse, attn_error *error) {
    attn_rope_config rope = layer_rope_config(config);
    attn_tensor ids = {0}, *ids_view = NULL;
    if (positions != NULL) {
        int64_t shape[2] = {x->shape[0], x->shape[1]};
        ids = attn_tensor_contiguous((void *)positions, ATTN_DTYPE_I64, 2, shape);
        ids_view = &ids;
    }
    return attn_rope_apply_ids(x, &rope, ids_view, inverse, error);
}

/* Checks every field; the message names the field and its value. */
static attn_status check_config(const attn_layer_config *config, attn_error *error) {
    if (config == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "config = NULL");
    const struct { const char *name; int64_t value; } sizes[] = {
        {"config.model_dim", config->model_dim},
        {"config.query_heads", config->query_heads},
        {"config.kv_heads", config->kv_heads},
        {"config.head_dim", config->head_dim},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        if (sizes[i].value < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s = %lld: must be >= 1",
                             sizes[i].name, (long long)sizes[i].value);
    if (config->query_heads % config->kv_heads != 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.kv_heads = %lld: must divide config.query_heads = %lld",
                         (long long)config->kv_heads, (long long)config->query_heads);
    if (config->rope) {
        if (config->rope_layout != ATTN_ROPE_INTERLEAVED && config->rope_layout != ATTN_ROPE_HALF)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "config.rope_layout = %d: unknown",
                             (int)config->rope_layout);
        int64_t rope_dim = layer_rope_dim(config);
        if (rope_dim < 2 || rope_dim % 2 != 0 || rope_dim > config->head_dim)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "config.rope_dim = %lld: must be even and in [2, head_dim = %lld]",
                             (long long)rope_dim, (long long)config->head_dim);
        double base = layer_rope_base(config);
        if (!(base > 1.0) || !isfinite(base))
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "config.rope_base = %g: must be finite and > 1", base);
        double frequency, magnitude;
        attn_rope_config rope = layer_rope_config(config);
        rope.rotary_dim = 2; /* scaling fields only: one frequency is enough */
        attn_status status = attn_rope_frequencies(&rope, 1, &frequency, &magnitude, error);
        if (status != ATTN_OK) return status;
    }
    return ATTN_OK;
}

attn_status attn_layer_parameter_count(const attn_layer_config *config, int64_t *count,
                                       attn_error *error) {
    attn_status status = check_config(config, error);
    if (status != ATTN_OK) return status;
    if (count == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "count = NULL");
    int64_t d = config->model_dim, h = config->query_heads, g = config->kv_heads,
            dh = config->head_dim;
    /* 2·d·dh·(h + g) weights, + h·dh, g·dh, g·dh, d for the biases present. */
    int64_t heads, weights, total, query_width, kv_width;
    bool ok = attn_add_i64(h, g, &heads) && attn_mul_i64(2 * d, dh, &weights) &&
              attn_mul_i64(weights, heads, &weights) && attn_mul_i64(h, dh, &query_width) &&
              attn_mul_i64(g, dh, &kv_width);
    if (!ok || d > INT64_MAX / 2 || g > INT64_MAX / 2)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "config (d = %lld, h = %lld, g = %lld, dh = %lld): parameter count "
                         "overflows", (long long)d, (long long)h, (long long)g, (long long)dh);
    total = weights;
    const int64_t bias_sizes[4] = {query_width, kv_width, kv_width, d};
    for (int p = 0; p < 4; ++p)
        if (layer_has_bias(config, (layer_projection)p) &&
            !attn_add_i64(total, bias_sizes[p], &total))
            return attn_fail(error, ATTN_ERROR_OVERFLOW, "parameter count with biases overflows");
    *count = total;
    return ATTN_OK;
}

attn_status attn_layer_create(const attn_layer_config *config, attn_layer *layer,
                              attn_error *error) {
    if (layer == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layer = NULL");
    int64_t count;
    attn_status status = attn_layer_parameter_count(config, &count, error);
    if (status != ATTN_OK) return status;
    if ((uint64_t)count > SIZE_MAX / sizeof(float))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "parameter count = %lld: too many bytes",
                         (long long)count);
    float *parameters = calloc((size_t)count, sizeof(float));
    if (parameters == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "parameter count = %lld: cannot allocate", (long long)count);
    int64_t d = config->model_dim, query_width = config->query_heads * config->head_dim,
            kv_width = config->kv_heads * config->head_dim;
    memset(layer, 0, sizeof *layer);
    layer->config = *config;
    layer->parameters = parameters;
    layer->parameter_count = count;
    float *cursor = parameters;
    layer->q_weight = cursor; cursor += query_width * d;
    layer->k_weight = cursor; cursor += kv_width * d;
    layer->v_weight = cursor; cursor += kv_width * d;
    layer->o_weight = cursor; cursor += d * query_width;
    float **biases[4] = {&layer->q_bias, &layer->k_bias, &layer->v_bias, &layer->o_bias};
    const int64_t bias_sizes[4] = {query_width, kv_width, kv_width, d};
    for (int p = 0; p < 4; ++p)
        if (layer_has_bias(config, (layer_projection)p)) {
            *biases[p] = cursor;
            cursor += bias_sizes[p];
        }
    return ATTN_OK;
}

/* xoshiro256** seeded through splitmix64: a small, portable, documented generator. */
typedef struct layer_rng { uint64_t state[4]; } layer_rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotate_left(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t layer_rng_next(layer_rng *rng) {
    uint64_t *s = rng->state;
    uint64_t result = rotate_left(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotate_left(s[3], 45);
    return result;
}

/* Uniform in [-bound, bound). */
static float layer_rng_uniform(layer_rng *rng, double bound) {
    double unit = (double)(layer_rng_next(rng) >> 11) * 0x1.0p-53;
    return (float)((2.0 * unit - 1.0) * bound);
}

/* weight [fan_out][fan_in] ~ U(-a, a), a = sqrt(6 / (fan_in + fan_out)). */
static void xavier_fill(float *weight, int64_t fan_out, int64_t fan_in, layer_rng *rng) {
    double bound = sqrt(6.0 / (double)(fan_in + fan_out));
    for (int64_t i = 0; i < fan_out * fan_in; ++i) weight[i] = layer_rng_uniform(rng, bound);
}

attn_status attn_layer_init_xavier(attn_layer *layer, uint64_t seed, attn_error *error) {
    if (layer == NULL || layer->parameters == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layer = NULL or not created");
    layer_rng rng;
    uint64_t seed_state = seed;
    for (int i = 0; i < 4; ++i) rng.state[i] = splitmix64(&seed_state);
    const attn_layer_config *c = &layer->config;
    int64_t d = c->model_dim, query_width = c->query_heads * c->head_dim,
            kv_width = c->kv_heads * c->head_dim;
    memset(layer->parameters, 0, (size_t)layer->parameter_count * sizeof(float));
    xavier_fill(layer->q_weight, query_width, d, &rng);
    xavier_fill(layer->k_weight, kv_width, d, &rng);
    xavier_fill(layer->v_weight, kv_width, d, &rng);
    xavier_fill(layer->o_weight, d, query_width, &rng);
    return ATTN_OK;
}

void attn_layer_destroy(attn_layer *layer) {
    if (layer == NULL) return;
    free(layer->parameters);
    memset(layer, 0, sizeof *layer);
}

void attn_layer_activations_free(attn_layer_activations *activations) {
    if (activations == NULL) return;
    attn_aligned_free(activations->allocation);
    free(activations->query_positions);
    free(activations->key_positions);
    memset(activations, 0, sizeof *activations);
}

attn_status layer_call_sizes_compute(const attn_layer *layer, int64_t batch, int64_t query_length,
                                     int64_t key_length, layer_call_sizes *sizes,
                                     attn_error *error) {
    if (layer == NULL || layer->parameters == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layer = NULL or not created");
    const struct { const char *name; int64_t value; } checks[] = {
        {"batch", batch}, {"query_length", query_length}, {"key_length", key_length}};
    for (size_t i = 0; i < 3; ++i)
        if (checks[i].value < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s = %lld: must be >= 1",
                             checks[i].name, (long long)checks[i].value);
    const attn_layer_config *c = &layer->config;
    sizes->batch = batch;
    sizes->query_length = query_length;
    sizes->key_length = key_length;
    sizes->query_width = c->query_heads * c->head_dim;
    sizes->kv_width = c->kv_heads * c->head_dim;
    int64_t product;
    bool ok = attn_mul_i64(batch, query_length, &sizes->query_rows) &&
              attn_mul_i64(batch, key_length, &sizes->key_rows) &&
              attn_mul_i64(sizes->query_rows, sizes->query_width + c->model_dim, &product) &&
              attn_mul_i64(sizes->key_rows, 2 * sizes->kv_width + c->model_dim, &product);
    if (!ok)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "batch = %lld, query_length = %lld, key_length = %lld: sizes overflow",
                         (long long)batch, (long long)query_length, (long long)key_length);
    return ATTN_OK;
}

attn_status layer_activations_reserve(attn_layer_activations *activations,
                                      const attn_layer_config *config,
                                      const layer_call_sizes *sizes, attn_error *error) {
    /* q, attention: query_rows*query_width each; k, v: key_rows*kv_width; lse: B*h*Tq. */
    int64_t q_floats = sizes->query_rows * sizes->query_width;
    int64_t kv_floats = sizes->key_rows * sizes->kv_width;
    int64_t lse_floats = sizes->query_rows * config->query_heads;
    /* Round each buffer up to 16 floats (64 bytes) so every buffer stays aligned. */
    int64_t padded[5] = {q_floats, kv_floats, kv_floats, q_floats, lse_floats};
    size_t total = 0;
    for (int i = 0; i < 5; ++i) {
        size_t floats = ((size_t)padded[i] + 15) & ~(size_t)15, bytes;
        if (!attn_mul_size(floats, sizeof(float), &bytes) || !attn_add_size(total, bytes, &total))
            return attn_fail(error, ATTN_ERROR_OVERFLOW, "activation buffers: size overflows");
        padded[i] = (int64_t)floats;
    }
    if (total > activations->capacity_bytes) {
        void *allocation = attn_aligned_alloc(total);
        if (allocation == NULL)
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                             "activations: cannot allocate %zu bytes", total);
        attn_aligned_free(activations->allocation);
        activations->allocation = allocation;
        activations->capacity_bytes = total;
    }
    float *cursor = activations->allocation;
    activations->q = cursor; cursor += padded[0];
    activations->k = cursor; cursor += padded[1];
    activations->v = cursor; cursor += padded[2];
    activations->attention = cursor; cursor += padded[3];
    activations->lse = cursor;
    activations->batch = sizes->batch;
    activations->query_length = sizes->query_length;
    activations->key_length = sizes->key_length;
    return ATTN_OK;
}
