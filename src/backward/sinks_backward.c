/*
 * sinks_backward.c — attn_sinks_backward: the gradient of the sink logits (attn.h,
 * attn_options.sinks). A sink is one more softmax column of logit s_h whose value is 0, so
 * with p = e^{s_h - LSE} its probability in row i, dL/ds_h = sum_i p_i (dO_i . 0 - D_i) =
 * - sum_i p_i D_i, D_i = dO_i . O_i (docs/attention-math.md §2.2, the column j of dS with
 * v_j = 0). dq, dk, dv need nothing more: attn_backward's P = e^{S - LSE} already takes the
 * sink's share out of each row.
 */
#include <math.h>

#include "../call/call.h"
#include "../core/internal.h"
#include "../kernels/half.h"

/* Element (b, i, h, e) of a rank-4 F32, BF16 or F16 tensor as a double. */
static double element(const attn_tensor *t, int64_t b, int64_t i, int64_t h, int64_t e) {
    const int64_t at = b * t->stride[0] + i * t->stride[1] + h * t->stride[2] + e * t->stride[3];
    if (t->dtype == ATTN_DTYPE_BF16) return attn_bf16_to_float(((const uint16_t *)t->data)[at]);
    if (t->dtype == ATTN_DTYPE_F16) return attn_f16_to_float(((const uint16_t *)t->data)[at]);
    return ((const float *)t->data)[at];
}

static attn_status check_sinks_backward(const attn_tensor *out, const attn_tensor *lse,
                                        const attn_tensor *dout, const attn_options *options,
                                        const float *dsinks, attn_error *error) {
    const attn_dtype dtype = out != NULL && (out->dtype == ATTN_DTYPE_BF16 ||
                                             out->dtype == ATTN_DTYPE_F16)
                                 ? out->dtype
                                 : ATTN_DTYPE_F32;
    attn_status status;
    if ((status = attn_check_tensor(out, "out", dtype, 4, error)) != ATTN_OK ||
        (status = attn_check_tensor(dout, "dout", dtype, 4, error)) != ATTN_OK ||
        (status = attn_check_tensor(lse, "lse", ATTN_DTYPE_F32, 3, error)) != ATTN_OK)
        return status;
    for (int d = 0; d < 4; ++d)
        if (dout->shape[d] != out->shape[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "dout.shape[%d] = %lld: expected out's %lld", d,
                             (long long)dout->shape[d], (long long)out->shape[d]);
    const int64_t expected_lse[3] = {out->shape[0], out->shape[2], out->shape[1]};
    for (int d = 0; d < 3; ++d)
        if (lse->shape[d] != expected_lse[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "lse.shape[%d] = %lld: expected %lld ([B, Hq, Tq] of out)", d,
                             (long long)lse->shape[d], (long long)expected_lse[d]);
    if (options->sinks == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "options.sinks is NULL: no sinks");
    if (dsinks == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "dsinks is NULL");
    for (int64_t h = 0; h < out->shape[2]; ++h)
        if (!(isfinite(options->sinks[h]) || options->sinks[h] == -INFINITY))
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.sinks[%lld] = %.9g: must be finite, or -inf for no sink",
                             (long long)h, (double)options->sinks[h]);
    for (int64_t b = 0; options->query_lengths != NULL && b < out->shape[0]; ++b)
        if (options->query_lengths[b] < 0 || options->query_lengths[b] > out->shape[1])
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.query_lengths[%lld] = %d: must be in [0, Tq = %lld]",
                             (long long)b, options->query_lengths[b], (long long)out->shape[1]);
    return ATTN_OK;
}

attn_status attn_sinks_backward(const attn_tensor *out, const attn_tensor *lse,
                                const attn_tensor *dout, const attn_options *options,
                                float *dsinks, attn_error *error) {
    attn_options resolved;
    attn_status status = attn_options_resolve(options, &resolved, error);
    if (status == ATTN_OK)
        status = check_sinks_backward(out, lse, dout, &resolved, dsinks, error);
    if (status != ATTN_OK) return status;
    const int64_t B = out->shape[0], Tq = out->shape[1], Hq = out->shape[2], Dv = out->shape[3];
    for (int64_t h = 0; h < Hq; ++h) {
        const double sink = resolved.sinks[h];
        double gradient = 0.0;
        for (int64_t b = 0; b < B && sink != -INFINITY; ++b) {
            const int64_t rows = resolved.query_lengths != NULL ? resolved.query_lengths[b] : Tq;
            for (int64_t i = 0; i < rows; ++i) {
                const double row_lse = *attn_f32_at3(lse, b, h, i);
                double dot = 0.0; /* D = dO . O */
                for (int64_t e = 0; e < Dv; ++e)
                    dot += element(dout, b, i, h, e) * element(out, b, i, h, e);
                gradient -= exp(sink - row_lse) * dot;
            }
        }
        dsinks[h] = (float)gradient;
    }
    return ATTN_OK;
}
