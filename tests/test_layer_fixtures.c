/*
 * test_layer_fixtures.c — the layer and RoPE against PyTorch fixtures made by
 * tests/fixtures/make_layer_fixtures.py: HF rotate-half RoPE (partial dims) and Meta's
 * complex-view interleaved RoPE (base 500000, offset positions); an nn.Module with Hugging Face
 * names (weights loaded from its safetensors file) for GQA + biases + RoPE + causal self-
 * attention and MQA cross-attention with Tq != Tk: output, input gradients and every parameter
 * gradient from autograd (float64).
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads tests/fixtures/<name> as doubles (from <f4 or <f8); NULL (and a failed check) if absent. */
static double *load_fixture(const char *name, int64_t expected_count) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", ATTN_FIXTURE_DIR, name);
    attn_npy_array array;
    attn_error error;
    attn_status status = attn_npy_read(path, 0, &array, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "fixture %s", name);
    if (status != ATTN_OK) return NULL;
    int64_t count = 1;
    for (int d = 0; d < array.rank; ++d) count *= array.shape[d];
    CHECK(count == expected_count, "%s: %lld elements, expected %lld", name, (long long)count,
          (long long)expected_count);
    double *values = NULL;
    if (count == expected_count) {
        values = malloc((size_t)count * sizeof(double));
        for (int64_t i = 0; i < count; ++i)
            values[i] = array.dtype == ATTN_DTYPE_F64 ? ((const double *)array.data)[i]
                                                       : ((const float *)array.data)[i];
    }
    attn_npy_free(&array);
    return values;
}

static float *to_floats(const double *values, int64_t count) {
    float *floats = malloc((size_t)count * sizeof(float));
    for (int64_t i = 0; i < count; ++i) floats[i] = (float)values[i];
    return floats;
}

static double max_relative(const float *got, const double *expected, int64_t count) {
    double worst = 0.0;
    for (int64_t i = 0; i < count; ++i) {
        double e = fabs(got[i] - expected[i]) / (1.0 + fabs(expected[i]));
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static void test_rope_fixture(const char *stem, int64_t B, int64_t T, int64_t H, int64_t D,
                              attn_rope_layout layout, int64_t rotary_dim, double base,
                              int64_t first_position) {
    char name[256];
    int64_t count = B * T * H * D;
    snprintf(name, sizeof name, "layer_rope_%s_x.npy", stem);
    double *x = load_fixture(name, count);
    snprintf(name, sizeof name, "layer_rope_%s_y.npy", stem);
    double *y = load_fixture(name, count);
    if (x == NULL || y == NULL) { free(x); free(y); return; }
    float *data = to_floats(x, count);
    attn_tensor view = attn_tensor_f32_4d(data, B, T, H, D);
    attn_error error;
    CHECK_STATUS(attn_rope_apply(&view, layout, rotary_dim, base, NULL, first_position, 0, &error),
                 ATTN_OK, &error, "rope %s", stem);
    double e = max_relative(data, y, count);
    CHECK(e < 1e-6, "rope %s vs PyTorch: %.3g", stem, e);
    free(x); free(y); free(data);
}

typedef struct fixture_layer {
    const char *name;
    attn_layer_config config;
    int64_t B, Tq, Tk;
    int cross, causal;
} fixture_layer;

static void test_layer_fixture(const fixture_layer *f) {
    char name[2 * ATTN_SAFETENSORS_NAME_CAPACITY + 64], path[1024];
    attn_layer layer, gradients;
    attn_error error;
    CHECK_STATUS(attn_layer_create(&f->config, &layer, &error), ATTN_OK, &error, "%s", f->name);
    CHECK_STATUS(attn_layer_create(&f->config, &gradients, &error), ATTN_OK, &error, "%s", f->name);
    snprintf(path, sizeof path, "%s/layer_%s.safetensors", ATTN_FIXTURE_DIR, f->name);
    attn_safetensors_file file;
    attn_status status = attn_safetensors_read(path, 0, &file, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "read %s", path);
    if (status == ATTN_OK) {
        CHECK_STATUS(attn_layer_load_safetensors(&layer, "", &file, &error), ATTN_OK, &error,
                     "load %s (written by the Python safetensors package)", f->name);
        attn_safetensors_free(&file);
    }
    int64_t d = f->config.model_dim, nq = f->B * f->Tq * d, nkv = f->B * f->Tk * d;
    snprintf(name, sizeof name, "layer_%s_x.npy", f->name);
    double *x = load_fixture(name, nq);
    snprintf(name, sizeof name, "layer_%s_dout.npy", f->name);
    double *dout = load_fixture(name, nq);
    snprintf(name, sizeof name, "layer_%s_out.npy", f->name);
    double *out_expected = load_fixture(name, nq);
    snprintf(name, sizeof name, "layer_%s_dx.npy", f->name);
    double *dx_expected = load_fixture(name, nq);
    double *kv = NULL, *dkv_expected = NULL;
    if (f->cross) {
        snprintf(name, sizeof name, "layer_%s_kv.npy", f->name);
        kv = load_fixture(name, nkv);
        snprintf(name, sizeof name, "layer_%s_dkv.npy", f->name);
        dkv_expected = load_fixture(name, nkv);
    }
    if (x && dout && out_expected && dx_expected && (!f->cross || (kv && dkv_expected))) {
        float *xf = to_floats(x, nq), *doutf = to_floats(dout, nq);
        float *kvf = f->cross ? to_floats(kv, nkv) : NULL;
        float *out = malloc((size_t)nq * sizeof(float)), *dx = malloc((size_t)nq * sizeof(float));
        float *dkv = f->cross ? malloc((size_t)nkv * sizeof(float)) : NULL;
        attn_options options = attn_options_default();
        options.causal = f->causal;
        options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
        attn_layer_activations activations = {0};
        status = attn_layer_forward(&layer, f->B, f->Tq, xf, f->Tk, kvf, &options, &activations,
                                    out, NULL, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s forward", f->name);
        if (status == ATTN_OK) {
            double e = max_relative(out, out_expected, nq);
            CHECK(e < 1e-5, "%s: output vs PyTorch %.3g", f->name, e);
            status = attn_layer_backward(&layer, f->B, f->Tq, xf, f->Tk, kvf, &options,
                                         &activations, doutf, &gradients, dx, dkv, NULL, &error);
            CHECK_STATUS(status, ATTN_OK, &error, "%s backward", f->name);
        }
        if (status == ATTN_OK) {
            double e = max_relative(dx, dx_expected, nq);
            CHECK(e < 1e-5, "%s: dx vs autograd %.3g", f->name, e);
            if (f->cross) {
                e = max_relative(dkv, dkv_expected, nkv);
                CHECK(e < 1e-5, "%s: dkv vs autograd %.3g", f->name, e);
            }
            attn_safetensors_tensor entries[8];
            int count = 0;
            attn_layer_safetensors_entries(&gradients, "", entries, &count, NULL);
            for (int i = 0; i < count; ++i) {
                char stem[ATTN_SAFETENSORS_NAME_CAPACITY];
                memcpy(stem, entries[i].name, sizeof stem);
                for (char *c = stem; *c; ++c) if (*c == '.') *c = '_';
                snprintf(name, sizeof name, "layer_%s_grad_%s.npy", f->name, stem);
                int64_t n = (int64_t)(entries[i].byte_count / sizeof(float));
                double *expected = load_fixture(name, n);
                if (expected == NULL) continue;
                e = max_relative(entries[i].data, expected, n);
                CHECK(e < 1e-5, "%s: gradient of %s vs autograd %.3g", f->name, entries[i].name, e);
                free(expected);
            }
        }
        attn_layer_activations_free(&activations);
        free(xf); free(doutf); free(kvf); free(out); free(dx); free(dkv);
    }
    free(x); free(dout); free(out_expected); free(dx_expected); free(kv); free(dkv_expected);
    attn_layer_destroy(&layer);
    attn_layer_destroy(&gradients);
}

int main(void) {
    test_rope_fixture("half", 2, 5, 3, 16, ATTN_ROPE_HALF, 12, 10000.0, 0);
    test_rope_fixture("interleaved", 1, 6, 2, 8, ATTN_ROPE_INTERLEAVED, 8, 500000.0, 5);
    const fixture_layer layers[] = {
        {"gqa_rope_causal", {16, 4, 2, 4, 1, 1, ATTN_ROPE_HALF, 4, 0.0, 0, 0, 0, 0, {0}}, 2, 5, 5, 0, 1},
        {"mqa_cross", {12, 3, 1, 8, 0, 0, ATTN_ROPE_HALF, 0, 0.0, 0, 0, 0, 0, {0}}, 1, 3, 7, 1, 0},
    };
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; ++i) test_layer_fixture(&layers[i]);
    return test_finish();
}
