/*
 * test_positional_rope_scaling.c — RoPE at explicit position ids per batch row with the
 * scaling rules of transformers (linear, dynamic NTK, Llama 3, YaRN), against fixtures made by
 * tests/fixtures/make_rope_fixtures.py with transformers' LlamaRotaryEmbedding: each case's
 * config.json goes through attn_model_config_read, the frequencies and attention factor must
 * match the module's, and the rotated tensor its apply_rotary_pos_emb. Plus: a double-precision
 * transcription per batch row (rows rotate independently), the transpose property of inverse
 * (inverse(forward(x)) = a² x), stateless dynamic scaling, and argument errors.
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct scaling_case {
    const char *name;
    attn_rope_scaling_type type; /* what the config reader must find */
    double factor;
    double attention_factor;     /* expected cos/sin magnitude */
} scaling_case;

static const scaling_case cases[] = {
    {"default", ATTN_ROPE_SCALING_NONE, 0.0, 1.0},
    {"linear", ATTN_ROPE_SCALING_LINEAR, 4.0, 1.0},
    {"dynamic", ATTN_ROPE_SCALING_DYNAMIC, 2.5, 1.0},
    {"dynamic_short", ATTN_ROPE_SCALING_DYNAMIC, 2.5, 1.0},
    {"llama3", ATTN_ROPE_SCALING_LLAMA3, 8.0, 1.0},
    {"yarn", ATTN_ROPE_SCALING_YARN, 4.0, 0.1 * 1.3862943611198906 + 1.0},
    {"yarn_mscale", ATTN_ROPE_SCALING_YARN, 8.0,
     (0.1 * 2.0794415416798357 + 1.0) / (0.05 * 2.0794415416798357 + 1.0)},
    {"yarn_untruncated", ATTN_ROPE_SCALING_YARN, 3.0, 1.25},
};

static int read_npy(const char *folder, const char *file, attn_dtype dtype, int64_t count,
                    attn_npy_array *array) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/rope_%s/%s", ATTN_FIXTURE_DIR, folder, file);
    attn_error error;
    attn_status status = attn_npy_read(path, 0, array, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s", path);
    if (status != ATTN_OK) return 0;
    int64_t n = 1;
    for (int d = 0; d < array->rank; ++d) n *= array->shape[d];
    CHECK(array->dtype == dtype && n == count, "%s: dtype %d, %lld elements (want %lld)", path,
          (int)array->dtype, (long long)n, (long long)count);
    if (array->dtype != dtype || n != count) {
        attn_npy_free(array);
        return 0;
    }
    return 1;
}

static void test_fixture(const scaling_case *sc) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/rope_%s", ATTN_FIXTURE_DIR, sc->name);
    attn_model_config model;
    attn_error error;
    attn_status status = attn_model_config_read(path, &model, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: config", sc->name);
    if (status != ATTN_OK) return;
    const attn_rope_config *rope = &model.rope_config;
    CHECK(model.family == ATTN_MODEL_LLAMA && model.rope && rope->layout == ATTN_ROPE_HALF,
          "%s: llama family, RoPE rotate-half", sc->name);
    CHECK(rope->scaling.type == sc->type && rope->scaling.factor == sc->factor,
          "%s: scaling type %d factor %g (want %d, %g)", sc->name, (int)rope->scaling.type,
          rope->scaling.factor, (int)sc->type, sc->factor);
    int64_t B = 2, T = 6, H = model.heads, D = model.head_dim, count = B * T * H * D;
    attn_npy_array x, positions, y, freq;
    if (!read_npy(sc->name, "x.npy", ATTN_DTYPE_F32, count, &x)) return;
    if (!read_npy(sc->name, "positions.npy", ATTN_DTYPE_I64, B * T, &positions)) return;
    if (!read_npy(sc->name, "y.npy", ATTN_DTYPE_F32, count, &y)) return;
    if (!read_npy(sc->name, "freq.npy", ATTN_DTYPE_F64, D / 2 + 1, &freq)) return;

    const int64_t *ids = positions.data;
    int64_t longest = 0;
    for (int64_t i = 0; i < B * T; ++i) longest = ids[i] + 1 > longest ? ids[i] + 1 : longest;
    double *inverse_frequencies = malloc((size_t)(D / 2) * sizeof(double)), magnitude = 0.0;
    status = attn_rope_frequencies(rope, longest, inverse_frequencies, &magnitude, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: frequencies", sc->name);
    const double *expected = freq.data;
    double worst = 0.0;
    for (int64_t i = 0; i < D / 2; ++i) {
        double e = fabs(inverse_frequencies[i] - expected[i]) / expected[i];
        worst = e > worst || isnan(e) ? e : worst;
    }
    /* transformers computes the frequencies in float32: a few ulps of 2^-24. */
    CHECK(worst < 2e-6, "%s: inverse frequencies, max relative error %.3g", sc->name, worst);
    CHECK(fabs(magnitude - expected[D / 2]) < 1e-6 && fabs(magnitude - sc->attention_factor) < 1e-9,
          "%s: attention factor %.9f (transformers %.9f, formula %.9f)", sc->name, magnitude,
          expected[D / 2], sc->attention_factor);

    float *rotated = malloc((size_t)count * sizeof(float));
    memcpy(rotated, x.data, (size_t)count * sizeof(float));
    attn_tensor view = attn_tensor_f32_4d(rotated, B, T, H, D);
    int64_t id_shape[2] = {B, T};
    attn_tensor id_view = attn_tensor_contiguous(positions.data, ATTN_DTYPE_I64, 2, id_shape);
    status = attn_rope_apply_ids(&view, rope, &id_view, 0, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: apply", sc->name);
    /* float32 angles in transformers: error ~ position × 2^-24 per angle. */
    double max_error = 0.0, tolerance = 1e-5 + 4e-7 * (double)longest;
    for (int64_t i = 0; i < count; ++i) {
        double e = fabs(rotated[i] - ((const float *)y.data)[i]);
        max_error = e > max_error || isnan(e) ? e : max_error;
    }
    CHECK(max_error < tolerance, "%s: rotated vs transformers, max abs error %.3g (tol %.3g)",
          sc->name, max_error, tolerance);

    /* inverse is the transpose: inverse(forward(x)) = a² x. */
    status = attn_rope_apply_ids(&view, rope, &id_view, 1, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: inverse", sc->name);
    double round_trip = 0.0;
    for (int64_t i = 0; i < count; ++i) {
        double want = magnitude * magnitude * ((const float *)x.data)[i];
        double e = fabs(rotated[i] - want);
        round_trip = e > round_trip ? e : round_trip;
    }
    CHECK(round_trip < 1e-5, "%s: inverse(forward(x)) = a^2 x, max error %.3g", sc->name,
          round_trip);
    free(rotated);
    free(inverse_frequencies);
    attn_npy_free(&x);
    attn_npy_free(&positions);
    attn_npy_free(&y);
    attn_npy_free(&freq);
}

/* Each batch row rotates at its own ids, exactly as the old one-row API does at those ids. */
static void test_rows_independent(void) {
    test_rng rng;
    test_rng_seed(&rng, 5);
    const int64_t B = 3, T = 4, H = 2, D = 10;
    const int64_t ids[3][4] = {{0, 1, 2, 3}, {7, 3, 100, -2}, {4096, 4097, 9, 9}};
    float data[3 * 4 * 2 * 10], expected[3 * 4 * 2 * 10];
    test_fill_normal(&rng, data, B * T * H * D, 1.0f);
    memcpy(expected, data, sizeof data);
    attn_error error;
    for (int64_t b = 0; b < B; ++b) {
        attn_tensor row = attn_tensor_f32_4d(expected + b * T * H * D, 1, T, H, D);
        attn_status status =
            attn_rope_apply(&row, ATTN_ROPE_INTERLEAVED, 8, 500000.0, ids[b], 0, 0, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "row %lld by attn_rope_apply", (long long)b);
    }
    attn_tensor all = attn_tensor_f32_4d(data, B, T, H, D);
    int64_t shape[2] = {B, T};
    attn_tensor id_view = attn_tensor_contiguous((void *)ids, ATTN_DTYPE_I64, 2, shape);
    attn_rope_config rope = {.layout = ATTN_ROPE_INTERLEAVED, .rotary_dim = 8, .base = 500000.0};
    attn_status status = attn_rope_apply_ids(&all, &rope, &id_view, 0, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "rows by attn_rope_apply_ids");
    CHECK(memcmp(data, expected, sizeof data) == 0, "per-row ids = one call per row (bitwise)");

    /* NULL ids = 0..T-1 in every row. */
    float zero_based[3 * 4 * 2 * 10], reference[3 * 4 * 2 * 10];
    test_fill_normal(&rng, zero_based, B * T * H * D, 1.0f);
    memcpy(reference, zero_based, sizeof reference);
    attn_tensor a = attn_tensor_f32_4d(zero_based, B, T, H, D);
    attn_tensor r = attn_tensor_f32_4d(reference, B, T, H, D);
    attn_rope_apply_ids(&a, &rope, NULL, 0, &error);
    attn_rope_apply(&r, ATTN_ROPE_INTERLEAVED, 8, 500000.0, NULL, 0, 0, &error);
    CHECK(memcmp(zero_based, reference, sizeof reference) == 0, "NULL ids = positions 0..T-1");
}

/* Dynamic NTK is stateless: the same ids give the same result whatever came before, and ids
 * within the trained length give plain RoPE. */
static void test_dynamic_rule(void) {
    attn_rope_config rope = {.layout = ATTN_ROPE_HALF, .rotary_dim = 16, .base = 10000.0,
                             .scaling = {.type = ATTN_ROPE_SCALING_DYNAMIC, .factor = 2.0,
                                         .original_max_positions = 32}};
    attn_rope_config plain = {.layout = ATTN_ROPE_HALF, .rotary_dim = 16, .base = 10000.0};
    double f[8], g[8], magnitude;
    attn_error error;
    attn_rope_frequencies(&rope, 32, f, &magnitude, &error);
    attn_rope_frequencies(&plain, 32, g, &magnitude, &error);
    CHECK(memcmp(f, g, sizeof f) == 0, "dynamic at L <= L0 = plain frequencies");
    attn_rope_frequencies(&rope, 64, f, &magnitude, &error);
    /* θ' = θ (2·64/32 - 1)^(16/14) = θ 3^(8/7); f_1 = θ'^(-2/16). */
    double base = 10000.0 * pow(3.0, 16.0 / 14.0);
    CHECK(fabs(f[1] - pow(base, -2.0 / 16.0)) < 1e-15 && f[0] == 1.0,
          "dynamic at L = 64: f_1 = %.17g (want %.17g)", f[1], pow(base, -2.0 / 16.0));
}

static void test_errors(void) {
    float data[2 * 3 * 1 * 4] = {0};
    attn_tensor x = attn_tensor_f32_4d(data, 2, 3, 1, 4);
    int64_t ids[6] = {0}, bad_shape[2] = {1, 3}, shape[2] = {2, 3};
    attn_tensor wrong = attn_tensor_contiguous(ids, ATTN_DTYPE_I64, 2, bad_shape);
    attn_tensor wrong_type = attn_tensor_contiguous(ids, ATTN_DTYPE_I32, 2, shape);
    attn_rope_config ok = {.layout = ATTN_ROPE_HALF};
    struct {
        const char *what;
        attn_rope_config rope;
        const attn_tensor *ids;
        attn_status expected;
        const char *needle;
    } table[] = {
        {"ids [1, 3] for B = 2", ok, &wrong, ATTN_ERROR_SHAPE_MISMATCH, "position_ids.shape"},
        {"ids int32", ok, &wrong_type, ATTN_ERROR_INVALID_ARGUMENT, "position_ids"},
        {"rotary_dim 5", {.layout = ATTN_ROPE_HALF, .rotary_dim = 5}, NULL,
         ATTN_ERROR_INVALID_ARGUMENT, "rope.rotary_dim = 5"},
        {"rotary_dim 6 > D", {.layout = ATTN_ROPE_HALF, .rotary_dim = 6}, NULL,
         ATTN_ERROR_INVALID_ARGUMENT, "rope.rotary_dim = 6"},
        {"base 1", {.layout = ATTN_ROPE_HALF, .base = 1.0}, NULL, ATTN_ERROR_INVALID_ARGUMENT,
         "rope.base = 1"},
        {"layout 7", {.layout = (attn_rope_layout)7}, NULL, ATTN_ERROR_INVALID_ARGUMENT,
         "rope.layout = 7"},
        {"scaling type 9", {.scaling = {.type = (attn_rope_scaling_type)9}}, NULL,
         ATTN_ERROR_INVALID_ARGUMENT, "rope.scaling.type = 9"},
        {"linear factor 0", {.scaling = {.type = ATTN_ROPE_SCALING_LINEAR}}, NULL,
         ATTN_ERROR_INVALID_ARGUMENT, "rope.scaling.factor = 0"},
        {"yarn without L0", {.scaling = {.type = ATTN_ROPE_SCALING_YARN, .factor = 2}}, NULL,
         ATTN_ERROR_INVALID_ARGUMENT, "original_max_positions = 0"},
        {"llama3 low >= high",
         {.scaling = {.type = ATTN_ROPE_SCALING_LLAMA3, .factor = 8, .original_max_positions = 8,
                      .low_freq_factor = 4, .high_freq_factor = 1}},
         NULL, ATTN_ERROR_INVALID_ARGUMENT, "low_freq_factor = 4"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        attn_error error = {0};
        attn_status status = attn_rope_apply_ids(&x, &table[i].rope, table[i].ids, 0, &error);
        CHECK(status == table[i].expected && strstr(error.message, table[i].needle) != NULL,
              "error case '%s': %s (%s)", table[i].what, attn_status_name(status), error.message);
    }
    attn_error error = {0};
    CHECK(attn_rope_apply_ids(&x, NULL, NULL, 0, &error) == ATTN_ERROR_NULL_ARGUMENT,
          "rope = NULL");
    double f[2], a;
    CHECK(attn_rope_frequencies(&ok, 8, f, &a, &error) == ATTN_ERROR_INVALID_ARGUMENT,
          "frequencies need an explicit rotary_dim");
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) test_fixture(&cases[i]);
    test_rows_independent();
    test_dynamic_rule();
    test_errors();
    return test_finish();
}
