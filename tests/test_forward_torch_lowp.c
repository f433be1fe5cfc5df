/*
 * test_forward_torch_lowp.c — attn's bf16 / fp16 forward is no less accurate than PyTorch's own
 * 16-bit CPU SDPA on the same inputs, from the fixtures tests/fixtures/make_lowp_fixtures.py
 * wrote (plain, causal GQA, GQA, boolean mask, bias; each in bf16 and fp16): q, k, v already
 * rounded to the type, PyTorch's 16-bit output, and float64 SDPA on the same inputs.
 *
 * For every registry the CPU runs, with E(x) = x - o_reference over all elements: RMS(E_attn)
 * <= 1.05 RMS(E_torch) and max|E_attn| <= 1.25 max|E_torch| (both round P and O at the same
 * points, docs/precision.md, so the two errors are samples of the same size; the margins
 * absorb which elements happen to round which way). The library's own float64 reference must
 * match o_reference to 1e-5, so the fixtures and attn agree on the problem.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/registry.h"
#include "attn_io.h"
#include "test_support.h"

typedef struct torch_case {
    const char *name;
    int causal, bool_mask, bias;
} torch_case;

static const torch_case cases[] = {
    {"plain", 0, 0, 0}, {"causal_gqa", 1, 0, 0}, {"gqa", 0, 0, 0}, {"boolmask", 0, 1, 0},
    {"bias", 0, 0, 1},
};
static const attn_kernel_choice kernel_choices[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_GENERIC,
                                                    ATTN_KERNEL_AVX512_BF16, ATTN_KERNEL_AMX};

static int load(const char *case_name, const char *type, const char *name, attn_npy_array *array) {
    char path[512];
    snprintf(path, sizeof path, "%s/lowp_%s_%s_%s.npy", ATTN_FIXTURE_DIR, case_name, type, name);
    attn_error error;
    attn_status status = attn_npy_read(path, 0, array, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "reading %s", path);
    return status == ATTN_OK;
}

static int64_t numel(const attn_npy_array *a) {
    int64_t n = 1;
    for (int d = 0; d < a->rank; ++d) n *= a->shape[d];
    return n;
}

/* A 16-bit copy of a float32 array (exact: the values are representable) as a tensor. */
static attn_tensor half_tensor(const attn_npy_array *a, attn_dtype dtype, uint16_t **storage) {
    const int64_t n = numel(a);
    *storage = malloc((size_t)n * sizeof(uint16_t));
    const float *x = a->data;
    for (int64_t i = 0; i < n; ++i)
        (*storage)[i] = dtype == ATTN_DTYPE_BF16 ? attn_float_to_bf16(x[i]) : attn_float_to_f16(x[i]);
    return attn_tensor_contiguous(*storage, dtype, 4, a->shape);
}

static void run_case(const torch_case *c, attn_dtype dtype) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "f16";
    enum { Q, K, V, O_TORCH, O_REFERENCE, MASK, BIAS, COUNT };
    static const char *const names[COUNT] = {"q", "k", "v", "o_torch", "o_reference", "mask", "bias"};
    attn_npy_array arrays[COUNT];
    memset(arrays, 0, sizeof arrays);
    int loaded = 1;
    for (int n = 0; n < COUNT; ++n) {
        if ((n == MASK && !c->bool_mask) || (n == BIAS && !c->bias)) continue;
        loaded &= load(c->name, type, names[n], &arrays[n]);
    }
    if (!loaded) {
        for (int n = 0; n < COUNT; ++n) attn_npy_free(&arrays[n]);
        return;
    }
    attn_options options = attn_options_default();
    attn_execution execution = attn_execution_default();
    if (c->causal) {
        options.causal = 1;
        options.alignment = ATTN_ALIGN_TOP_LEFT;
    }
    attn_tensor mask, bias;
    if (c->bool_mask) {
        mask = attn_tensor_contiguous(arrays[MASK].data, ATTN_DTYPE_BOOL, 4, arrays[MASK].shape);
        options.mask = &mask;
    }
    if (c->bias) {
        bias = attn_tensor_contiguous(arrays[BIAS].data, ATTN_DTYPE_F32, 4, arrays[BIAS].shape);
        options.bias = &bias;
    }
    const int64_t count = numel(&arrays[O_REFERENCE]);
    const float *reference = arrays[O_REFERENCE].data, *torch_out = arrays[O_TORCH].data;

    /* the fixtures and attn's reference agree on the problem */
    float *check = malloc((size_t)count * sizeof(float));
    attn_tensor q32 = attn_tensor_contiguous(arrays[Q].data, ATTN_DTYPE_F32, 4, arrays[Q].shape);
    attn_tensor k32 = attn_tensor_contiguous(arrays[K].data, ATTN_DTYPE_F32, 4, arrays[K].shape);
    attn_tensor v32 = attn_tensor_contiguous(arrays[V].data, ATTN_DTYPE_F32, 4, arrays[V].shape);
    attn_tensor check_view = attn_tensor_contiguous(check, ATTN_DTYPE_F32, 4, arrays[O_REFERENCE].shape);
    attn_error error = {0};
    attn_status status = attn_reference_forward(&q32, &k32, &v32, &options, &check_view, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s %s: attn_reference_forward", c->name, type);
    double agreement = 0.0;
    for (int64_t i = 0; i < count; ++i)
        agreement = fmax(agreement, fabs(check[i] - reference[i]) / (1 + fabs(reference[i])));
    CHECK(agreement <= 1e-5, "%s %s: attn's float64 reference = PyTorch's float64 SDPA (%.2g)",
          c->name, type, agreement);

    double torch_sum = 0.0, torch_max = 0.0;
    for (int64_t i = 0; i < count; ++i) {
        const double e = torch_out[i] - (double)reference[i];
        torch_sum += e * e;
        torch_max = fmax(torch_max, fabs(e));
    }
    const double torch_rms = sqrt(torch_sum / count);

    uint16_t *q16, *k16, *v16, *o16 = malloc((size_t)count * sizeof(uint16_t));
    attn_tensor q = half_tensor(&arrays[Q], dtype, &q16), k = half_tensor(&arrays[K], dtype, &k16),
                v = half_tensor(&arrays[V], dtype, &v16);
    attn_tensor out = attn_tensor_contiguous(o16, dtype, 4, arrays[O_REFERENCE].shape);
    for (size_t kc = 0; kc < sizeof kernel_choices / sizeof *kernel_choices; ++kc) {
        if (!attn_cpu_supports(kernel_choices[kc])) continue;
        const char *kernel = attn_kernel_choice_name(kernel_choices[kc]);
        execution.kernel = kernel_choices[kc];
        status = attn_forward(&q, &k, &v, &options, &out, NULL, &execution, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s %s [%s]: forward", c->name, type, kernel);
        double sum = 0.0, largest = 0.0;
        for (int64_t i = 0; i < count; ++i) {
            const double got = dtype == ATTN_DTYPE_BF16 ? attn_bf16_to_float(o16[i]) : attn_f16_to_float(o16[i]);
            const double e = got - reference[i];
            sum += e * e;
            largest = fmax(largest, fabs(e));
        }
        const double rms = sqrt(sum / count);
        printf("%-10s %-4s %-12s attn RMS %.3g max %.3g | PyTorch RMS %.3g max %.3g\n", c->name,
               type, kernel, rms, largest, torch_rms, torch_max);
        CHECK(rms <= 1.05 * torch_rms, "%s %s [%s]: RMS error %.3g <= 1.05 x PyTorch's %.3g",
              c->name, type, kernel, rms, torch_rms);
        CHECK(largest <= 1.25 * torch_max, "%s %s [%s]: max error %.3g <= 1.25 x PyTorch's %.3g",
              c->name, type, kernel, largest, torch_max);
    }
    free(check);
    free(q16);
    free(k16);
    free(v16);
    free(o16);
    for (int n = 0; n < COUNT; ++n) attn_npy_free(&arrays[n]);
}

int main(void) {
    for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) {
        run_case(&cases[n], ATTN_DTYPE_BF16);
        run_case(&cases[n], ATTN_DTYPE_F16);
    }
    return test_finish();
}
