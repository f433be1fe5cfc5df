/*
 * rope.c — rotary position embedding (RoFormer, Su et al. 2021) applied in place to a
 * [B, T, H, D] float view: the interleaved layout (pairs 2i, 2i+1: GPT-J, Meta Llama) and the
 * rotate-half layout (pairs i, i + rotary_dim/2: GPT-NeoX, HF Llama), partial rotary dims,
 * any base. Angles and their sines/cosines are computed in double, one table per token.
 */
#include "core/internal.h"
#include "attn_layers.h"

#include <math.h>
#include <stdlib.h>

/* Index of the two dims rotated together by frequency `pair` (0 <= pair < rotary_dim/2). */
static void rope_pair_dims(attn_rope_layout layout, int64_t rotary_dim, int64_t pair,
                           int64_t *first, int64_t *second) {
    if (layout == ATTN_ROPE_INTERLEAVED) {
        *first = 2 * pair;
        *second = 2 * pair + 1;
    } else {
        *first = pair;
        *second = pair + rotary_dim / 2;
    }
}

/* x [B, T, H, D] F32 (any strides), rotated in place; see attn.h. */
attn_status attn_rope_apply(attn_tensor *x, attn_rope_layout layout, int64_t rotary_dim,
                            double base, const int64_t *positions, int64_t first_position,
                            int inverse, attn_error *error) {
    attn_status status = attn_check_tensor(x, "x", ATTN_DTYPE_F32, 4, error);
    if (status != ATTN_OK) return status;
    if (layout != ATTN_ROPE_INTERLEAVED && layout != ATTN_ROPE_HALF)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "layout = %d: must be ATTN_ROPE_INTERLEAVED or ATTN_ROPE_HALF",
                         (int)layout);
    int64_t head_dim = x->shape[3];
    if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rotary_dim = %lld: must be even and in [2, D = %lld]",
                         (long long)rotary_dim, (long long)head_dim);
    if (!(base > 1.0) || !isfinite(base))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "base = %g: must be finite and > 1", base);
    int64_t token_count = x->shape[1];
    int64_t last_position;
    if (positions == NULL && !attn_add_i64(first_position, token_count, &last_position))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "first_position = %lld: first_position + T overflows",
                         (long long)first_position);

    int64_t pair_count = rotary_dim / 2;
    double *cosines = malloc(2 * (size_t)pair_count * sizeof(double));
    if (cosines == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "rotary_dim = %lld: no memory",
                         (long long)rotary_dim);
    double *sines = cosines + pair_count;
    double direction = inverse ? -1.0 : 1.0;

    for (int64_t t = 0; t < token_count; ++t) {
        double position = (double)(positions != NULL ? positions[t] : first_position + t);
        for (int64_t pair = 0; pair < pair_count; ++pair) {
            double frequency = pow(base, -2.0 * (double)pair / (double)rotary_dim);
            double angle = direction * position * frequency;
            cosines[pair] = cos(angle);
            sines[pair] = sin(angle);
        }
        for (int64_t b = 0; b < x->shape[0]; ++b) {
            for (int64_t h = 0; h < x->shape[2]; ++h) {
                for (int64_t pair = 0; pair < pair_count; ++pair) {
                    int64_t first, second;
                    rope_pair_dims(layout, rotary_dim, pair, &first, &second);
                    float *x_first = attn_f32_at4(x, b, t, h, first);
                    float *x_second = attn_f32_at4(x, b, t, h, second);
                    double a = *x_first, c = *x_second;
                    *x_first = (float)(a * cosines[pair] - c * sines[pair]);
                    *x_second = (float)(a * sines[pair] + c * cosines[pair]);
                }
            }
        }
    }
    free(cosines);
    return ATTN_OK;
}
