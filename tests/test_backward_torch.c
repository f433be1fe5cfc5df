/*
 * test_backward_torch.c — attn_backward and attn_reference_backward against PyTorch autograd
 * through torch.nn.functional.scaled_dot_product_attention (float64), from the fixtures that
 * tests/fixtures/make_backward_fixtures.py wrote: plain, top-left causal with Tq != Tk, a
 * boolean mask, GQA (enable_gqa), a learnable bias broadcast over the batch (d bias summed
 * over B), and a custom scale with MQA. Fixture arrays are [B, H, T, D] and are read as
 * [B, T, H, D] views (attn_tensor_f32_bhtd). Tolerance 1e-5 relative; the library's
 * reference forward must also reproduce PyTorch's O and LSE.
 */
#include <stdlib.h>
#include <string.h>

#include "attn_io.h"
#include "test_support.h"

typedef struct torch_case {
    const char *name;
    int causal_top_left;
    int bool_mask;
    int bias;
    float custom_scale; /* 0 = default */
} torch_case;

static const torch_case cases[] = {
    {"plain", 0, 0, 0, 0.0f},    {"causal", 1, 0, 0, 0.0f}, {"boolmask", 0, 1, 0, 0.0f},
    {"gqa", 1, 0, 0, 0.0f},      {"bias", 0, 0, 1, 0.0f},   {"scale", 0, 0, 0, 0.3f},
};

/* Reads backward_<case>_<name>.npy; returns 0 (and records a failure) when it cannot. */
static int load(const char *case_name, const char *name, attn_npy_array *array) {
    char path[512];
    snprintf(path, sizeof path, "%s/backward_%s_%s.npy", ATTN_FIXTURE_DIR, case_name, name);
    attn_error error;
    attn_status status = attn_npy_read(path, 0, array, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "reading %s", path);
    return status == ATTN_OK;
}

/* A [B, T, H, D] view of a [B, H, T, D] array. */
static attn_tensor bhtd_view(attn_npy_array *array) {
    return attn_tensor_f32_bhtd((float *)array->data, array->shape[0], array->shape[2],
                                array->shape[1], array->shape[3]);
}

/* max |actual - expected| / (1 + |expected|) over two float buffers of `count` elements. */
static double buffer_error(const float *actual, const float *expected, int64_t count) {
    double worst = 0;
    for (int64_t e = 0; e < count; ++e) {
        const double error = fabs((double)actual[e] - expected[e]) / (1 + fabs((double)expected[e]));
        if (!(error <= worst)) worst = error;
    }
    return worst;
}

static void run_case(const torch_case *config) {
    enum { Q, K, V, DO, O, LSE, DQ, DK, DV, MASK, BIAS, DBIAS, ARRAY_COUNT };
    static const char *const names[ARRAY_COUNT] = {"q",  "k",  "v",  "do",   "o",    "lse",
                                                   "dq", "dk", "dv", "mask", "bias", "dbias"};
    attn_npy_array arrays[ARRAY_COUNT];
    memset(arrays, 0, sizeof arrays);
    int loaded = 1;
    for (int a = 0; a < ARRAY_COUNT; ++a) {
        if (a == MASK && !config->bool_mask) continue;
        if ((a == BIAS || a == DBIAS) && !config->bias) continue;
        loaded = loaded && load(config->name, names[a], &arrays[a]);
    }
    if (!loaded) goto done;

    attn_tensor q = bhtd_view(&arrays[Q]), k = bhtd_view(&arrays[K]), v = bhtd_view(&arrays[V]);
    attn_tensor dout = bhtd_view(&arrays[DO]), expected_out = bhtd_view(&arrays[O]);
    attn_tensor lse = attn_tensor_contiguous(arrays[LSE].data, ATTN_DTYPE_F32, 3, arrays[LSE].shape);
    attn_tensor mask, bias;
    attn_options options = attn_options_default();
    if (config->causal_top_left) {
        options.causal = 1;
        options.alignment = ATTN_ALIGN_TOP_LEFT; /* PyTorch is_causal=True */
    }
    if (config->bool_mask) {
        mask = attn_tensor_contiguous(arrays[MASK].data, ATTN_DTYPE_BOOL, 4, arrays[MASK].shape);
        options.mask = &mask;
    }
    if (config->bias) {
        bias = attn_tensor_contiguous(arrays[BIAS].data, ATTN_DTYPE_F32, 4, arrays[BIAS].shape);
        options.bias = &bias;
    }
    if (config->custom_scale > 0) {
        options.custom_scale = 1;
        options.scale = config->custom_scale;
    }

    /* Gradient outputs in the same [B, H, T, D] memory layout as PyTorch's. */
    float *gradients[3], *bias_gradient = NULL;
    attn_tensor gradient_views[3], dbias_view;
    for (int g = 0; g < 3; ++g) {
        gradients[g] = calloc(arrays[DQ + g].byte_count, 1);
        gradient_views[g] = bhtd_view(&arrays[DQ + g]);
        gradient_views[g].data = gradients[g];
    }
    if (config->bias) {
        bias_gradient = calloc(arrays[DBIAS].byte_count, 1);
        dbias_view = attn_tensor_contiguous(bias_gradient, ATTN_DTYPE_F32, 4, arrays[DBIAS].shape);
    }

    for (int implementation = 0; implementation < 2; ++implementation) {
        const char *which = implementation ? "reference" : "flash";
        attn_error error;
        attn_tensor *dbias = config->bias ? &dbias_view : NULL;
        attn_status status =
            implementation
                ? attn_reference_backward(&q, &k, &v, &expected_out, &lse, &dout, &options,
                                          &gradient_views[0], &gradient_views[1],
                                          &gradient_views[2], dbias, &error)
                : attn_backward(&q, &k, &v, &expected_out, &lse, &dout, &options,
                                &gradient_views[0], &gradient_views[1], &gradient_views[2], dbias,
                                NULL, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s (%s)", config->name, which);
        for (int g = 0; g < 3; ++g) {
            const double error_value =
                buffer_error(gradients[g], arrays[DQ + g].data,
                             (int64_t)(arrays[DQ + g].byte_count / sizeof(float)));
            CHECK(error_value <= 1e-5, "%s (%s): %s vs PyTorch, error %.3g", config->name, which,
                  names[DQ + g], error_value);
        }
        if (config->bias) {
            const double error_value =
                buffer_error(bias_gradient, arrays[DBIAS].data,
                             (int64_t)(arrays[DBIAS].byte_count / sizeof(float)));
            CHECK(error_value <= 1e-5, "%s (%s): dbias vs PyTorch, error %.3g", config->name, which,
                  error_value);
        }
    }

    /* The library's reference forward reproduces PyTorch's O and the fixture's LSE. */
    float *out_data = calloc(arrays[O].byte_count, 1), *lse_data = calloc(arrays[LSE].byte_count, 1);
    attn_tensor out = expected_out, lse_out = lse;
    out.data = out_data;
    lse_out.data = lse_data;
    attn_error error;
    CHECK_STATUS(attn_reference_forward(&q, &k, &v, &options, &out, &lse_out, &error), ATTN_OK,
                 &error, "%s: reference forward", config->name);
    const double out_error = buffer_error(out_data, arrays[O].data,
                                          (int64_t)(arrays[O].byte_count / sizeof(float)));
    const double lse_error = buffer_error(lse_data, arrays[LSE].data,
                                          (int64_t)(arrays[LSE].byte_count / sizeof(float)));
    CHECK(out_error <= 1e-5 && lse_error <= 1e-5, "%s: forward O error %.3g, LSE error %.3g",
          config->name, out_error, lse_error);
    printf("%-10s forward O %.2e LSE %.2e\n", config->name, out_error, lse_error);
    free(out_data);
    free(lse_data);
    for (int g = 0; g < 3; ++g) free(gradients[g]);
    free(bias_gradient);
done:
    for (int a = 0; a < ARRAY_COUNT; ++a) attn_npy_free(&arrays[a]);
}

int main(void) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) run_case(&cases[c]);
    return test_finish();
}
