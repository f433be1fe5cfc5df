/*
 * convert.c — attn_tensor_convert: element-wise copies between float32, bfloat16 and IEEE half
 * tensors of any strides (attn.h), with the overflow of a narrowing conversion found before
 * anything is written. Scalar: meant for preparing inputs and reading outputs, not for the
 * attention loops (those convert tiles with the registry's convert part, kernels/lowp.h).
 */
#include "core/internal.h"
#include "core/overlap.h"
#include "kernels/half.h"

static int is_float_type(attn_dtype dtype) {
    return dtype == ATTN_DTYPE_F32 || dtype == ATTN_DTYPE_BF16 || dtype == ATTN_DTYPE_F16;
}

static float load(const attn_tensor *t, int64_t offset) {
    switch (t->dtype) {
    case ATTN_DTYPE_BF16: return attn_bf16_to_float(((const uint16_t *)t->data)[offset]);
    case ATTN_DTYPE_F16: return attn_f16_to_float(((const uint16_t *)t->data)[offset]);
    default: return ((const float *)t->data)[offset];
    }
}

/* The element offset of linear index n (C order over shape) in t. */
static int64_t offset_of(const attn_tensor *t, int64_t n) {
    int64_t offset = 0;
    for (int d = t->rank - 1; d >= 0; --d) {
        offset += (n % t->shape[d]) * t->stride[d];
        n /= t->shape[d];
    }
    return offset;
}

/* Whether finite x becomes ±inf in `dtype`. */
static int overflows(float x, attn_dtype dtype) {
    if (x - x != 0.0f) return 0; /* NaN or inf */
    if (dtype == ATTN_DTYPE_F16) return (attn_float_to_f16(x) & 0x7fffu) == 0x7c00u;
    if (dtype == ATTN_DTYPE_BF16) return (attn_float_to_bf16(x) & 0x7fffu) == 0x7f80u;
    return 0;
}

attn_status attn_tensor_convert(const attn_tensor *source, attn_tensor *destination,
                                attn_error *error) {
    if (source == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "source is NULL");
    if (destination == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "destination is NULL");
    if (!is_float_type(source->dtype))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "source.dtype = %s: expected float32, bfloat16 or float16",
                         attn_dtype_name(source->dtype));
    attn_status status = attn_check_tensor(source, "source", source->dtype, source->rank, error);
    if (status != ATTN_OK) return status;
    if (!is_float_type(destination->dtype))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "destination.dtype = %s: expected float32, bfloat16 or float16",
                         attn_dtype_name(destination->dtype));
    status = attn_check_tensor(destination, "destination", destination->dtype, source->rank, error);
    if (status != ATTN_OK) return status;
    int64_t count = 1;
    for (int d = 0; d < source->rank; ++d) {
        if (destination->shape[d] != source->shape[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "destination.shape[%d] = %lld: source.shape[%d] = %lld", d,
                             (long long)destination->shape[d], d, (long long)source->shape[d]);
        count *= source->shape[d]; /* fits: attn_check_tensor bounded the span */
    }
    /* Elements are read and written in one pass: a destination that shares a byte with the
     * source would read values already overwritten (a destination one element past the
     * source copies the first value everywhere). The test is exact on the strided lattices. */
    attn_region from, to;
    attn_region_set(&from, source, "source", false);
    attn_region_set(&to, destination, "destination", false);
    const attn_overlap shared = attn_regions_overlap(&to, &from);
    if (shared != ATTN_OVERLAP_NONE) {
        uintptr_t tb, te, fb, fe;
        attn_region_span(&to, &tb, &te), attn_region_span(&from, &fb, &fe);
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "destination (bytes [%p, %p)) and source (bytes [%p, %p)) %s: they "
                         "must not overlap",
                         (const void *)tb, (const void *)te, (const void *)fb, (const void *)fe,
                         shared == ATTN_OVERLAP_SHARED ? "share memory"
                                                       : "may share memory (a layout too "
                                                         "intricate to tell apart)");
    }
    if ((status = attn_check_output_layout(destination, "destination", error)) != ATTN_OK)
        return status;
    if (destination->dtype != ATTN_DTYPE_F32)
        for (int64_t n = 0; n < count; ++n) {
            const float x = load(source, offset_of(source, n));
            if (overflows(x, destination->dtype))
                return attn_fail(error, ATTN_ERROR_OVERFLOW,
                                 "source element %lld (C order) = %g does not fit %s (largest %g)",
                                 (long long)n, (double)x, attn_dtype_name(destination->dtype),
                                 destination->dtype == ATTN_DTYPE_F16 ? 65504.0 : 3.3895313892515355e38);
        }
    for (int64_t n = 0; n < count; ++n) {
        const float x = load(source, offset_of(source, n));
        const int64_t at = offset_of(destination, n);
        switch (destination->dtype) {
        case ATTN_DTYPE_BF16: ((uint16_t *)destination->data)[at] = attn_float_to_bf16(x); break;
        case ATTN_DTYPE_F16: ((uint16_t *)destination->data)[at] = attn_float_to_f16(x); break;
        default: ((float *)destination->data)[at] = x; break;
        }
    }
    return ATTN_OK;
}
