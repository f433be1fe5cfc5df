/*
 * causal_gqa.c — the smallest complete use of libattn: causal grouped-query attention on a
 * [B, H, T, D] buffer (viewed, not copied, as attn's canonical [B, T, H, D]), checked against
 * the naive reference. Build: see CMakeLists.txt (target example_causal_gqa); it is also run
 * by ctest. Read top to bottom.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn.h"

int main(void) {
    /* One sequence of 100 tokens, 8 query heads sharing 2 KV heads (GQA), head dim 64. */
    const int64_t B = 1, T = 100, Hq = 8, Hkv = 2, D = 64;

    /* PyTorch-style memory: [B, H, T, D]. */
    float *q = malloc(sizeof(float) * B * Hq * T * D);
    float *k = malloc(sizeof(float) * B * Hkv * T * D);
    float *v = malloc(sizeof(float) * B * Hkv * T * D);
    float *out = malloc(sizeof(float) * B * T * Hq * D);       /* [B, T, H, D] */
    float *expected = malloc(sizeof(float) * B * T * Hq * D);
    float *lse = malloc(sizeof(float) * B * Hq * T);            /* [B, H, T] */
    if (!q || !k || !v || !out || !expected || !lse) return 1;
    unsigned state = 12345;
    float *buffers[3] = {q, k, v};
    int64_t counts[3] = {B * Hq * T * D, B * Hkv * T * D, B * Hkv * T * D};
    for (int n = 0; n < 3; ++n)
        for (int64_t i = 0; i < counts[n]; ++i) {
            state = state * 1103515245u + 12345u;
            buffers[n][i] = (float)((state >> 8) & 0xffff) / 65536.0f - 0.5f;
        }

    /* Views: [B, H, T, D] memory seen as [B, T, H, D]. No copy. */
    attn_tensor q_view = attn_tensor_f32_bhtd(q, B, T, Hq, D);
    attn_tensor k_view = attn_tensor_f32_bhtd(k, B, T, Hkv, D);
    attn_tensor v_view = attn_tensor_f32_bhtd(v, B, T, Hkv, D);
    attn_tensor out_view = attn_tensor_f32_4d(out, B, T, Hq, D);
    attn_tensor expected_view = attn_tensor_f32_4d(expected, B, T, Hq, D);
    const int64_t lse_shape[3] = {B, Hq, T};
    attn_tensor lse_view = attn_tensor_contiguous(lse, ATTN_DTYPE_F32, 3, lse_shape);

    /* What to compute: zero (or attn_options_default()) is plain attention; causal needs its
     * alignment named. How to run it: NULL execution = defaults (threads, tiles, kernel). */
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;

    attn_error error;
    if (attn_forward(&q_view, &k_view, &v_view, &options, &out_view, &lse_view, NULL, &error) !=
            ATTN_OK ||
        attn_reference_forward(&q_view, &k_view, &v_view, &options, &expected_view, NULL,
                               &error) != ATTN_OK) {
        fprintf(stderr, "attn: %s: %s\n", attn_status_name(error.status), error.message);
        return 1;
    }

    /* The tiled fast path equals the naive reference to float rounding. */
    double worst = 0;
    for (int64_t i = 0; i < B * T * Hq * D; ++i) {
        double e = fabs((double)out[i] - expected[i]) / (1.0 + fabs((double)expected[i]));
        if (e > worst) worst = e;
    }
    /* Token 0 can only see itself, so its LSE is its own logit: q0.k0 / sqrt(D). */
    double self = 0;
    for (int64_t d = 0; d < D; ++d) self += (double)q[d] * k[d];
    self /= sqrt((double)D);

    printf("causal GQA attention: out [%lld, %lld, %lld, %lld], lse[0,0,0] = %.6f (expected %.6f)\n",
           (long long)B, (long long)T, (long long)Hq, (long long)D, lse[0], self);
    printf("max relative difference from the reference: %.2e\n", worst);

    /* A bad call gets a status and a message naming the argument. */
    options.alignment = ATTN_ALIGN_UNSET;
    attn_status status =
        attn_forward(&q_view, &k_view, &v_view, &options, &out_view, NULL, NULL, &error);
    printf("without an alignment: %s: %s\n", attn_status_name(status), error.message);

    int ok = worst < 1e-5 && fabs(lse[0] - self) < 1e-5 && status == ATTN_ERROR_INVALID_ARGUMENT;
    printf("%d passed, %d failed\n", ok ? 1 : 0, ok ? 0 : 1);
    free(q); free(k); free(v); free(out); free(expected); free(lse);
    return ok ? 0 : 1;
}
