/*
 * sinusoidal.c — the fixed sinusoidal positional encoding of Vaswani et al. (2017), §3.5:
 * interleaved sin/cos columns, frequency 10000^(-2i/dim). Computed in double, stored as float.
 */
#include "core/internal.h"
#include "attn_layers.h"

#include <math.h>

/* pe: float[count][dim], row r holds the encoding of position first_position + r. */
attn_status attn_sinusoidal_encoding(int64_t first_position, int64_t count, int64_t dim,
                                     float *pe, attn_error *error) {
    if (pe == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "pe = NULL");
    if (count < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "count = %lld: must be >= 1",
                         (long long)count);
    if (dim < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "dim = %lld: must be >= 1",
                         (long long)dim);
    if (first_position < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "first_position = %lld: must be >= 0", (long long)first_position);
    int64_t element_count, last_position;
    if (!attn_mul_i64(count, dim, &element_count) ||
        !attn_add_i64(first_position, count, &last_position) ||
        (uint64_t)element_count > SIZE_MAX / sizeof(float))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "count * dim = %lld * %lld overflows",
                         (long long)count, (long long)dim);

    for (int64_t row = 0; row < count; ++row) {
        double position = (double)(first_position + row);
        float *pe_row = pe + row * dim;
        for (int64_t column = 0; column < dim; column += 2) {
            /* Columns 2i and 2i+1 share the frequency 10000^(-2i/dim). */
            double frequency = pow(10000.0, -(double)column / (double)dim);
            double angle = position * frequency;
            pe_row[column] = (float)sin(angle);
            if (column + 1 < dim) pe_row[column + 1] = (float)cos(angle);
        }
    }
    return ATTN_OK;
}
