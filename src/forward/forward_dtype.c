/*
 * forward_dtype.c — the steps of the forward pass that depend on the operand type of q, k, v
 * and out (F32, BF16 or F16; forward_internal.h): gathering a query row and storing an output
 * row. The packing of K/V from each type is packed_kv.c; P is rounded before P·V by the softmax
 * step (kernels/registry.h), or after dropout in forward_tile.c.
 *
 * Where rounding happens for 16-bit operands (docs/precision.md): the inputs are exact in
 * fp32; Q·Kᵀ sums exact products in fp32; scale, soft-cap, masks, the online softmax, the row
 * statistics and the O accumulator are fp32; P is rounded to the operand type (nearest-even)
 * for P·V, the row sum l using the unrounded P; O = acc / l is rounded once to out's dtype
 * (nearest-even). A finite O beyond the dtype's range is an error (ATTN_ERROR_OVERFLOW), never
 * a silent inf; LSE is fp32.
 */
#include <math.h>
#include <string.h>

#include "../core/internal.h"
#include "forward_internal.h"

static const uint16_t *u16_at4(const attn_tensor *t, int64_t b, int64_t i, int64_t h) {
    return (const uint16_t *)t->data + b * t->stride[0] + i * t->stride[1] + h * t->stride[2];
}

void forward_gather_query(const forward_plan *plan, int64_t b, int64_t i, int64_t h,
                          float factor, float *row) {
    const attn_tensor *q = plan->q;
    const int dim = (int)plan->call->problem.key_dim;
    const int64_t dim_stride = q->stride[3];
    if (plan->format.dtype == ATTN_DTYPE_F32) {
        const float *source = attn_f32_at4(q, b, i, h, 0);
        if (dim_stride == 1)
            for (int d = 0; d < dim; ++d) row[d] = source[d] * factor;
        else
            for (int d = 0; d < dim; ++d) row[d] = source[d * dim_stride] * factor;
        return;
    }
    const uint16_t *source = u16_at4(q, b, i, h);
    if (plan->format.bf16_tiles) {
        uint16_t *bf16_row = (uint16_t *)row;
        const int padded = attn_lowp_query_stride(dim);
        for (int d = 0; d < dim; ++d) bf16_row[d] = source[d * dim_stride];
        for (int d = dim; d < padded; ++d) bf16_row[d] = 0;
        return;
    }
    const attn_lowp_convert *convert = &plan->format.kernels->convert;
    if (plan->format.dtype == ATTN_DTYPE_BF16)
        convert->bf16_to_f32_rows(1, dim, source, 0, dim_stride, row, 0);
    else
        convert->f16_to_f32_rows(1, dim, source, 0, dim_stride, row, 0);
    if (factor != 1.0f)
        for (int d = 0; d < dim; ++d) row[d] *= factor;
}

void forward_store_output(const forward_plan *plan, forward_workspace *workspace, int64_t b,
                          int64_t i, int64_t h, float *values) {
    const attn_tensor *out = plan->out;
    const int64_t dim = plan->call->problem.value_dim, stride = out->stride[3];
    if (plan->format.dtype == ATTN_DTYPE_F32) {
        float *o_row = attn_f32_at4(out, b, i, h, 0);
        if (stride == 1) memcpy(o_row, values, (size_t)dim * sizeof(float));
        else
            for (int64_t e = 0; e < dim; ++e) o_row[e * stride] = values[e];
        return;
    }
    uint16_t *o_row = (uint16_t *)u16_at4(out, b, i, h);
    const attn_lowp_convert *convert = &plan->format.kernels->convert;
    const int64_t overflowed = plan->format.dtype == ATTN_DTYPE_BF16
                                   ? convert->f32_to_bf16(dim, values, o_row, stride)
                                   : convert->f32_to_f16(dim, values, o_row, stride);
    if (overflowed == 0) return;
    const forward_row_mark row = {true, b, h, i};
    if (!forward_row_mark_earlier(&row, &workspace->overflow_row)) return;
    float largest = 0.0f;
    for (int64_t e = 0; e < dim; ++e)
        if (isfinite(values[e]) && fabsf(values[e]) > fabsf(largest)) largest = values[e];
    workspace->overflow_row = row;
    workspace->overflow_value = largest;
}

attn_status forward_overflow_status(const forward_plan *plan, const forward_workspace *workspaces,
                                    int count, attn_error *error) {
    const forward_row_mark none = {false, 0, 0, 0};
    const forward_workspace *first = NULL;
    for (int t = 0; t < count; ++t)
        if (forward_row_mark_earlier(&workspaces[t].overflow_row,
                                     first != NULL ? &first->overflow_row : &none))
            first = &workspaces[t];
    if (first == NULL) return ATTN_OK;
    const bool half = plan->format.dtype == ATTN_DTYPE_F16;
    return attn_fail(error, ATTN_ERROR_OVERFLOW,
                     "out (%s) at b = %lld, i = %lld, h = %lld: the attention output %g does not "
                     "fit (largest %s is %g); use a float32 or bfloat16 out",
                     attn_dtype_name(plan->format.dtype), (long long)first->overflow_row.b,
                     (long long)first->overflow_row.i, (long long)first->overflow_row.h,
                     (double)first->overflow_value, half ? "float16" : "bfloat16",
                     half ? 65504.0 : 3.3895313892515355e38);
}
