/*
 * mla.c — multi-head latent attention (DeepSeek-V2, docs/attention-math.md §5): projections,
 * the latent KV cache (c_KV after RMSNorm and k_R after RoPE: d_c + d_rope values per token), and
 * the two ways to attend: naive (materialise every head's k and v from the latents) and
 * absorbed (q_hat = W_UK^T q_nope, attention as MQA over the latent cache via attn_decode,
 * then W_UV on the latent output). Every matrix product goes through CBLAS: the nn.Linear
 * projections (W_q, W_q_a, W_q_b, W_kv_a, W_kv_b for the naive path, W_o) through
 * attn_linear_forward, the per-head absorptions through one strided sgemm per head.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "core/internal.h"
#include "attn_layers.h"

/* C [m][n] (row stride ldc) = A [m][k] (row stride lda) times B, where B is [k][n] (row
 * stride ldb) or, when b_transposed, the transpose of a [n][k] matrix: one CBLAS sgemm for
 * the per-head products that are not nn.Linear projections (strided heads). The caller
 * checked that every size fits CBLAS's int (sizes_fit_blas). */
static void multiply_strided(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                             const float *b, int64_t ldb, int b_transposed, float *c,
                             int64_t ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, (int)m,
                (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
}

static attn_status check_config(const attn_mla_config *config, attn_error *error) {
    if (config == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "config is NULL");
    const struct { const char *name; int64_t value; } positive[] = {
        {"config.hidden", config->hidden},           {"config.heads", config->heads},
        {"config.kv_lora_rank", config->kv_lora_rank}, {"config.qk_nope_dim", config->qk_nope_dim},
        {"config.qk_rope_dim", config->qk_rope_dim}, {"config.v_head_dim", config->v_head_dim},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; ++i)
        if (positive[i].value < 1 || positive[i].value > (1 << 20))
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s = %lld: must be in [1, 2^20]",
                             positive[i].name, (long long)positive[i].value);
    if (config->q_lora_rank < 0 || config->q_lora_rank > (1 << 20))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.q_lora_rank = %lld: must be 0 (no compression) or in [1, 2^20]",
                         (long long)config->q_lora_rank);
    if (config->qk_rope_dim % 2 != 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "config.qk_rope_dim = %lld: must be even",
                         (long long)config->qk_rope_dim);
    if (!(config->scale >= 0.0f) || isinf(config->scale) || !(config->norm_eps >= 0.0f))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.scale = %g, config.norm_eps = %g: must be finite and >= 0",
                         (double)config->scale, (double)config->norm_eps);
    return ATTN_OK;
}

attn_status attn_mla_cache_config(const attn_mla_config *config, int64_t sequences,
                                  int64_t capacity, attn_dtype dtype, int64_t page_size,
                                  attn_kv_cache_config *cache_config, attn_error *error) {
    attn_status status = check_config(config, error);
    if (status != ATTN_OK) return status;
    if (cache_config == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache_config is NULL");
    *cache_config = attn_kv_cache_config_default();
    cache_config->sequences = sequences;
    cache_config->kv_heads = 1;
    cache_config->key_dim = config->kv_lora_rank + config->qk_rope_dim;
    cache_config->value_dim = config->kv_lora_rank;
    cache_config->values_in_keys = 1;
    cache_config->dtype = dtype;
    cache_config->capacity = capacity;
    cache_config->page_size = page_size;
    return ATTN_OK;
}

/* Sizes shared by the steps of one call. */
typedef struct mla_sizes {
    int64_t B, T, rows;            /* rows = B * T new tokens */
    int64_t heads, latent, rope, nope, value, query_head; /* query_head = nope + rope */
    float scale;
} mla_sizes;

/* Naive: per sequence, materialise K [1, L, H, nope + rope] and V [1, L, H, value] from the
 * cached latents (one projection of the L latents by W_kv_b, all heads at once) and run
 * attn_forward. queries [B, T, H, nope + rope], heads_out [B, T, H, value] (contiguous). */
static attn_status attend_naive(const mla_sizes *z, const attn_mla_weights *weights,
                                const attn_kv_cache *cache, float *queries, float *heads_out,
                                attn_error *error) {
    attn_status status = ATTN_OK;
    const int64_t key_row = z->latent + z->rope, up_row = z->heads * (z->nope + z->value);
    for (int64_t b = 0; b < z->B && status == ATTN_OK; ++b) {
        const int64_t L = attn_kv_cache_length(cache, b);
        size_t latent_floats, up_floats, key_floats, value_floats;
        if (!attn_mul_size((size_t)L, (size_t)key_row, &latent_floats) ||
            !attn_mul_size((size_t)L, (size_t)up_row, &up_floats) ||
            !attn_mul_size((size_t)L, (size_t)(z->heads * z->query_head), &key_floats) ||
            !attn_mul_size((size_t)L, (size_t)(z->heads * z->value), &value_floats) ||
            up_floats > SIZE_MAX / sizeof(float))
            return attn_fail(error, ATTN_ERROR_OVERFLOW,
                             "sequence %lld: %lld tokens of materialised keys overflow",
                             (long long)b, (long long)L);
        float *latents = malloc(latent_floats * sizeof(float));  /* [L][c_KV | k_R] */
        float *compact = malloc((size_t)L * (size_t)z->latent * sizeof(float)); /* [L][c_KV] */
        float *up = malloc(up_floats * sizeof(float)); /* [L][heads][nope | value] */
        float *keys = malloc(key_floats * sizeof(float));
        float *values = malloc(value_floats * sizeof(float));
        if (latents == NULL || compact == NULL || up == NULL || keys == NULL || values == NULL) {
            free(latents), free(compact), free(up), free(keys), free(values);
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                             "no memory for %lld materialised keys", (long long)L);
        }
        attn_tensor latent_view = attn_tensor_f32_4d(latents, 1, L, 1, key_row);
        status = attn_kv_cache_read(cache, b, 0, &latent_view, NULL, error);
        for (int64_t j = 0; j < L; ++j)
            memcpy(compact + j * z->latent, latents + j * key_row,
                   (size_t)z->latent * sizeof(float));
        if (status == ATTN_OK)
            status = attn_linear_forward(compact, L, z->latent, weights->wkv_b, NULL, up_row, up,
                                         error);
        for (int64_t j = 0; j < L && status == ATTN_OK; ++j)
            for (int64_t h = 0; h < z->heads; ++h) {
                const float *head_up = up + (j * z->heads + h) * (z->nope + z->value);
                float *key = keys + (j * z->heads + h) * z->query_head;
                memcpy(key, head_up, (size_t)z->nope * sizeof(float));
                memcpy(key + z->nope, latents + j * key_row + z->latent,
                       (size_t)z->rope * sizeof(float));
                memcpy(values + (j * z->heads + h) * z->value, head_up + z->nope,
                       (size_t)z->value * sizeof(float));
            }
        attn_tensor k = attn_tensor_f32_4d(keys, 1, L, z->heads, z->query_head);
        attn_tensor v = attn_tensor_f32_4d(values, 1, L, z->heads, z->value);
        attn_tensor q = attn_tensor_f32_4d(queries + b * z->T * z->heads * z->query_head, 1, z->T,
                                           z->heads, z->query_head);
        attn_tensor o = attn_tensor_f32_4d(heads_out + b * z->T * z->heads * z->value, 1, z->T,
                                           z->heads, z->value);
        attn_options options = attn_options_default();
        options.causal = 1;
        options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
        options.custom_scale = 1;
        options.scale = z->scale;
        if (status == ATTN_OK) status = attn_forward(&q, &k, &v, &options, &o, NULL, NULL, error);
        free(latents), free(compact), free(up), free(keys), free(values);
    }
    return status;
}

/* Absorbed: q_hat = [W_UK_h^T q_nope ; q_rope] (latent + rope), attn_decode on the latent
 * cache (MQA), then heads_out_h = W_UV_h o_latent_h; both absorptions are one sgemm per head
 * over all new rows. */
static attn_status attend_absorbed(const mla_sizes *z, const attn_mla_weights *weights,
                                   const attn_kv_cache *cache, const float *queries,
                                   float *heads_out, attn_error *error) {
    const int64_t key_row = z->latent + z->rope, units = z->rows * z->heads;
    float *absorbed = malloc((size_t)(units * key_row) * sizeof(float));
    float *latent_out = malloc((size_t)(units * z->latent) * sizeof(float));
    if (absorbed == NULL || latent_out == NULL) {
        free(absorbed), free(latent_out);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "no memory for absorbed queries");
    }
    for (int64_t h = 0; h < z->heads; ++h) {
        /* absorbed[n][h][0:latent] = q_nope[n][h] [rows x nope] . W_UK_h [nope x latent] */
        const float *w_uk = weights->wkv_b + h * (z->nope + z->value) * z->latent;
        multiply_strided(z->rows, z->latent, z->nope, queries + h * z->query_head,
                         z->heads * z->query_head, w_uk, z->latent, 0, absorbed + h * key_row,
                         z->heads * key_row);
    }
    for (int64_t unit = 0; unit < units; ++unit) /* unit = (row, head): q_rope unchanged */
        memcpy(absorbed + unit * key_row + z->latent, queries + unit * z->query_head + z->nope,
               (size_t)z->rope * sizeof(float));
    attn_tensor q = attn_tensor_f32_4d(absorbed, z->B, z->T, z->heads, key_row);
    attn_tensor o = attn_tensor_f32_4d(latent_out, z->B, z->T, z->heads, z->latent);
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.custom_scale = 1;
    options.scale = z->scale;
    attn_status status = attn_decode(cache, &q, &options, &o, NULL, NULL, error);
    for (int64_t h = 0; h < z->heads && status == ATTN_OK; ++h) {
        /* heads_out[n][h] = o_latent[n][h] [rows x latent] . W_UV_h^T (W_UV_h: [value][latent]) */
        const float *w_uv = weights->wkv_b + (h * (z->nope + z->value) + z->nope) * z->latent;
        multiply_strided(z->rows, z->value, z->latent, latent_out + h * z->latent,
                         z->heads * z->latent, w_uv, z->latent, 1, heads_out + h * z->value,
                         z->heads * z->value);
    }
    free(absorbed), free(latent_out);
    return status;
}

/* Every buffer of the call is rows x (a width below) floats, and CBLAS takes int sizes and
 * leading dimensions: checks both before anything is allocated. */
static attn_status sizes_fit_blas(const mla_sizes *z, const attn_mla_config *config,
                                  int64_t capacity, attn_error *error) {
    const int64_t widths[] = {config->hidden, config->q_lora_rank, z->heads * z->query_head,
                              z->heads * (z->nope + z->value), z->heads * (z->latent + z->rope),
                              z->heads * z->latent, z->heads * z->value};
    const int64_t rows = z->rows > capacity ? z->rows : capacity;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; ++w) {
        int64_t floats;
        if (rows > INT_MAX || widths[w] > INT_MAX || !attn_mul_i64(rows, widths[w], &floats) ||
            (uint64_t)floats > SIZE_MAX / sizeof(float))
            return attn_fail(error, ATTN_ERROR_OVERFLOW,
                             "hidden: %lld rows x %lld values exceed CBLAS's int or size_t",
                             (long long)rows, (long long)widths[w]);
    }
    return ATTN_OK;
}

static attn_status check_weights(const attn_mla_config *config, const attn_mla_weights *weights,
                                 attn_error *error) {
    if (weights == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "weights is NULL");
    const struct { const char *name; const float *pointer; bool needed; } fields[] = {
        {"weights->wq", weights->wq, config->q_lora_rank == 0},
        {"weights->wq_a", weights->wq_a, config->q_lora_rank > 0},
        {"weights->q_norm", weights->q_norm, config->q_lora_rank > 0},
        {"weights->wq_b", weights->wq_b, config->q_lora_rank > 0},
        {"weights->wkv_a", weights->wkv_a, true},
        {"weights->kv_norm", weights->kv_norm, true},
        {"weights->wkv_b", weights->wkv_b, true},
        {"weights->wo", weights->wo, true},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i)
        if (fields[i].needed && fields[i].pointer == NULL)
            return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s is NULL (q_lora_rank = %lld)",
                             fields[i].name, (long long)config->q_lora_rank);
    return ATTN_OK;
}

/* The call's arguments against the config and the cache (hidden / out [B, T, hidden], the
 * attn_mla_cache_config layout, room for T tokens per sequence); fills the sizes. */
static attn_status check_call(const attn_mla_config *config, const attn_mla_weights *weights,
                              const attn_kv_cache *cache, const attn_tensor *hidden,
                              attn_mla_path path, const attn_tensor *out, mla_sizes *sizes,
                              attn_error *error) {
    attn_status status = check_config(config, error);
    if (status == ATTN_OK) status = check_weights(config, weights, error);
    if (status != ATTN_OK) return status;
    if (cache == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache is NULL");
    if (path != ATTN_MLA_NAIVE && path != ATTN_MLA_ABSORBED)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "path = %d: unknown", (int)path);
    if ((status = attn_check_tensor(hidden, "hidden", ATTN_DTYPE_F32, 3, error)) != ATTN_OK ||
        (status = attn_check_tensor(out, "out", ATTN_DTYPE_F32, 3, error)) != ATTN_OK)
        return status;
    const attn_kv_cache_config *cc = attn_kv_cache_config_of(cache);
    mla_sizes z = {hidden->shape[0], hidden->shape[1], 0, config->heads, config->kv_lora_rank,
                   config->qk_rope_dim, config->qk_nope_dim, config->v_head_dim,
                   config->qk_nope_dim + config->qk_rope_dim, 0.0f};
    z.rows = z.B * z.T;
    z.scale = config->scale > 0.0f ? config->scale : (float)(1.0 / sqrt((double)z.query_head));
    if (cc->kv_heads != 1 || !cc->values_in_keys || cc->key_dim != z.latent + z.rope ||
        cc->value_dim != z.latent || cc->sequences != z.B)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "cache: expected the attn_mla_cache_config layout for %lld sequences "
                         "(1 head, key %lld = d_c + d_rope, values in keys)",
                         (long long)z.B, (long long)(z.latent + z.rope));
    if (hidden->shape[2] != config->hidden || out->shape[0] != z.B || out->shape[1] != z.T ||
        out->shape[2] != config->hidden)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "hidden / out shapes [%lld, %lld, %lld] / [%lld, %lld, %lld]: expected "
                         "[B, T, hidden = %lld] both",
                         (long long)hidden->shape[0], (long long)hidden->shape[1],
                         (long long)hidden->shape[2], (long long)out->shape[0],
                         (long long)out->shape[1], (long long)out->shape[2],
                         (long long)config->hidden);
    for (int64_t b = 0; b < z.B; ++b)
        if (z.T > cc->capacity - attn_kv_cache_length(cache, b))
            return attn_fail(error, ATTN_ERROR_CAPACITY,
                             "sequence %lld: %lld tokens + %lld new exceed capacity %lld",
                             (long long)b, (long long)attn_kv_cache_length(cache, b),
                             (long long)z.T, (long long)cc->capacity);
    *sizes = z;
    return ATTN_OK;
}

/* queries [rows][heads][nope | rope] (through the query latent and its RMSNorm when
 * q_lora_rank > 0) and latents [rows][c_KV | k_R] (RMSNorm on c_KV) from x [rows][hidden]. */
static attn_status project(const mla_sizes *sizes, const attn_mla_config *config,
                           const attn_mla_weights *weights, const float *x, float *query_latent,
                           float *queries, float *latents, attn_error *error) {
    const mla_sizes z = *sizes;
    const int64_t d = config->hidden, query_width = z.heads * z.query_head;
    const int64_t key_row = z.latent + z.rope, q_latent = config->q_lora_rank;
    attn_status status;
    /* Queries: [rows][heads][nope | rope]. */
    if (q_latent == 0) {
        status = attn_linear_forward(x, z.rows, d, weights->wq, NULL, query_width, queries, error);
    } else {
        status = attn_linear_forward(x, z.rows, d, weights->wq_a, NULL, q_latent, query_latent,
                                     error);
        if (status == ATTN_OK)
            status = attn_rms_norm(query_latent, z.rows, q_latent, weights->q_norm,
                                   config->norm_eps > 0 ? config->norm_eps : 1e-6f, query_latent,
                                   error);
        if (status == ATTN_OK)
            status = attn_linear_forward(query_latent, z.rows, q_latent, weights->wq_b, NULL,
                                         query_width, queries, error);
    }
    /* Latents: [rows][c_KV | k_R]; RMSNorm on c_KV only. */
    if (status == ATTN_OK)
        status = attn_linear_forward(x, z.rows, d, weights->wkv_a, NULL, key_row, latents, error);
    for (int64_t n = 0; n < z.rows && status == ATTN_OK; ++n)
        status = attn_rms_norm(latents + n * key_row, 1, z.latent, weights->kv_norm,
                               config->norm_eps > 0 ? config->norm_eps : 1e-6f,
                               latents + n * key_row, error);
    return status;
}

/* RoPE (interleaved, scaled as config->rope_scaling says) on q_R and k_R at each token's
 * absolute position (the cache's length plus its index). */
static attn_status rotate(const mla_sizes *sizes, const attn_mla_config *config,
                          const attn_kv_cache *cache, float *queries, float *latents,
                          attn_error *error) {
    const mla_sizes z = *sizes;
    const int64_t query_width = z.heads * z.query_head, key_row = z.latent + z.rope;
    attn_status status = ATTN_OK;
    const attn_rope_config rope = {.layout = ATTN_ROPE_INTERLEAVED, .rotary_dim = z.rope,
                                   .base = config->rope_base > 0 ? config->rope_base : 10000.0,
                                   .scaling = config->rope_scaling};
    int64_t *positions = status == ATTN_OK ? malloc((size_t)z.T * sizeof(int64_t)) : NULL;
    if (status == ATTN_OK && positions == NULL)
        status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "mla: %lld position ids",
                           (long long)z.T);
    for (int64_t b = 0; b < z.B && status == ATTN_OK; ++b) {
        attn_tensor q_rope = {queries + b * z.T * query_width + z.nope, ATTN_DTYPE_F32, 4,
                              {1, z.T, z.heads, z.rope}, {0, query_width, z.query_head, 1}};
        attn_tensor k_rope = {latents + b * z.T * key_row + z.latent, ATTN_DTYPE_F32, 4,
                              {1, z.T, 1, z.rope}, {0, key_row, key_row, 1}};
        for (int64_t t = 0; t < z.T; ++t) positions[t] = attn_kv_cache_length(cache, b) + t;
        const int64_t id_shape[2] = {1, z.T};
        attn_tensor ids = attn_tensor_contiguous(positions, ATTN_DTYPE_I64, 2, id_shape);
        status = attn_rope_apply_ids(&q_rope, &rope, &ids, 0, error);
        if (status == ATTN_OK) status = attn_rope_apply_ids(&k_rope, &rope, &ids, 0, error);
    }
    free(positions);
    return status;
}

attn_status attn_mla_forward(const attn_mla_config *config, const attn_mla_weights *weights,
                             attn_kv_cache *cache, const attn_tensor *hidden, attn_mla_path path,
                             attn_tensor *out, attn_error *error) {
    mla_sizes z = {0};
    attn_status status = check_call(config, weights, cache, hidden, path, out, &z, error);
    if (status != ATTN_OK) return status;
    const attn_kv_cache_config *cc = attn_kv_cache_config_of(cache);
    if ((status = sizes_fit_blas(&z, config, cc->capacity, error)) != ATTN_OK) return status;
    const int64_t d = config->hidden, query_width = z.heads * z.query_head;
    const int64_t key_row = z.latent + z.rope, q_latent = config->q_lora_rank;
    float *x = malloc((size_t)(z.rows * d) * sizeof(float));
    float *queries = malloc((size_t)(z.rows * query_width) * sizeof(float));
    float *latents = malloc((size_t)(z.rows * key_row) * sizeof(float));
    float *query_latent = q_latent > 0 ? malloc((size_t)(z.rows * q_latent) * sizeof(float)) : NULL;
    float *heads_out = malloc((size_t)(z.rows * z.heads * z.value) * sizeof(float));
    float *projected = malloc((size_t)(z.rows * d) * sizeof(float));
    if (!x || !queries || !latents || (q_latent > 0 && !query_latent) || !heads_out || !projected) {
        status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "no memory for %lld tokens of MLA",
                           (long long)z.rows);
        goto done;
    }
    for (int64_t b = 0; b < z.B; ++b)
        for (int64_t t = 0; t < z.T; ++t)
            for (int64_t i = 0; i < d; ++i)
                x[(b * z.T + t) * d + i] = *((const float *)hidden->data + b * hidden->stride[0] +
                                            t * hidden->stride[1] + i * hidden->stride[2]);
    status = project(&z, config, weights, x, query_latent, queries, latents, error);
    if (status == ATTN_OK) status = rotate(&z, config, cache, queries, latents, error);
    if (status == ATTN_OK) {
        attn_tensor new_latents = attn_tensor_f32_4d(latents, z.B, z.T, 1, key_row);
        status = attn_kv_cache_append(cache, 0, &new_latents, NULL, error);
    }
    if (status == ATTN_OK)
        status = path == ATTN_MLA_NAIVE
                     ? attend_naive(&z, weights, cache, queries, heads_out, error)
                     : attend_absorbed(&z, weights, cache, queries, heads_out, error);
    if (status == ATTN_OK)
        status = attn_linear_forward(heads_out, z.rows, z.heads * z.value, weights->wo, NULL, d,
                                     projected, error);
    if (status == ATTN_OK) {
        for (int64_t b = 0; b < z.B; ++b)
            for (int64_t t = 0; t < z.T; ++t)
                for (int64_t i = 0; i < d; ++i)
                    *((float *)out->data + b * out->stride[0] + t * out->stride[1] +
                      i * out->stride[2]) = projected[(b * z.T + t) * d + i];
    }
done:
    free(x), free(queries), free(latents), free(query_latent), free(heads_out), free(projected);
    return status;
}
