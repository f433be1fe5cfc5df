/*
 * rope.c — rotary position embedding (RoFormer, Su et al. 2021) applied in place to a
 * [B, T, H, D] float view: the interleaved layout (pairs 2i, 2i+1: GPT-J, Meta Llama) and the
 * rotate-half layout (pairs i, i + rotary_dim/2: GPT-NeoX, HF Llama), partial rotary dims,
 * any base, explicit position ids per batch row, and the frequency-scaling rules of long-context
 * checkpoints (linear, dynamic NTK, Llama 3, YaRN; docs/models.md). Frequencies, angles and their
 * sines/cosines are computed in double, one table per token.
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

static double rope_base_of(const attn_rope_config *rope) {
    return rope->base == 0.0 ? 10000.0 : rope->base;
}

/* YaRN's attention-magnitude correction 0.1 * m * ln(s) + 1 (1 for s <= 1). */
static double yarn_magnitude(double factor, double m) {
    return factor <= 1.0 ? 1.0 : 0.1 * m * log(factor) + 1.0;
}

/* The dim index (in rotary dims) whose wavelength makes `rotations` turns over `length`
 * positions: d = D ln(L / (2π r)) / (2 ln base). */
static double yarn_correction_dim(double rotations, double rotary_dim, double base,
                                  double length) {
    return rotary_dim * log(length / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

static attn_status check_scaling(const attn_rope_scaling *s, attn_error *error) {
    switch (s->type) {
    case ATTN_ROPE_SCALING_NONE: return ATTN_OK;
    case ATTN_ROPE_SCALING_LINEAR:
    case ATTN_ROPE_SCALING_DYNAMIC:
    case ATTN_ROPE_SCALING_LLAMA3:
    case ATTN_ROPE_SCALING_YARN: break;
    default:
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "rope.scaling.type = %d: unknown",
                         (int)s->type);
    }
    if (!(s->factor > 0.0) || !isfinite(s->factor))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.scaling.factor = %g: must be finite and > 0", s->factor);
    if (s->type != ATTN_ROPE_SCALING_LINEAR && s->original_max_positions < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.scaling.original_max_positions = %lld: must be >= 1",
                         (long long)s->original_max_positions);
    if (s->type == ATTN_ROPE_SCALING_LLAMA3 &&
        !(s->high_freq_factor > s->low_freq_factor && s->low_freq_factor > 0.0))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.scaling low_freq_factor = %g, high_freq_factor = %g: need "
                         "0 < low < high", s->low_freq_factor, s->high_freq_factor);
    if (s->type == ATTN_ROPE_SCALING_YARN &&
        (s->beta_fast < 0.0 || s->beta_slow < 0.0 || s->attention_factor < 0.0 ||
         !isfinite(s->beta_fast + s->beta_slow + s->attention_factor + s->mscale +
                   s->mscale_all_dim)))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.scaling (yarn): beta_fast = %g, beta_slow = %g, attention_factor "
                         "= %g: must be finite and >= 0", s->beta_fast, s->beta_slow,
                         s->attention_factor);
    return ATTN_OK;
}

/* Checks `rope` against a head dim (0 = not known yet) and resolves rotary_dim (0 = D). */
static attn_status check_rope(const attn_rope_config *rope, int64_t head_dim,
                              int64_t *rotary_dim, attn_error *error) {
    if (rope == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "rope = NULL");
    if (rope->layout != ATTN_ROPE_INTERLEAVED && rope->layout != ATTN_ROPE_HALF)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.layout = %d: must be ATTN_ROPE_INTERLEAVED or ATTN_ROPE_HALF",
                         (int)rope->layout);
    int64_t dim = rope->rotary_dim == 0 ? head_dim : rope->rotary_dim;
    if (dim < 2 || dim % 2 != 0 || (head_dim > 0 && dim > head_dim))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.rotary_dim = %lld: must be even and in [2, D = %lld]",
                         (long long)dim, (long long)head_dim);
    double base = rope_base_of(rope);
    if (!(base > 1.0) || !isfinite(base))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.base = %g: must be finite and > 1", base);
    *rotary_dim = dim;
    return check_scaling(&rope->scaling, error);
}

/* The frequencies once `rope` is checked and rotary_dim resolved; see attn.h. */
static void rope_frequencies(const attn_rope_config *rope, int64_t rotary_dim,
                             int64_t sequence_length, double *inverse_frequencies,
                             double *attention_factor) {
    const attn_rope_scaling *s = &rope->scaling;
    double base = rope_base_of(rope), dim = (double)rotary_dim;
    int64_t pairs = rotary_dim / 2;
    *attention_factor = 1.0;
    if (s->type == ATTN_ROPE_SCALING_DYNAMIC) {
        /* NTK-aware: raise the base once the call reaches past the trained length. */
        double length = (double)s->original_max_positions;
        double seen = sequence_length > s->original_max_positions ? (double)sequence_length
                                                                  : length;
        base *= pow(s->factor * seen / length - (s->factor - 1.0), dim / (dim - 2.0));
    }
    for (int64_t i = 0; i < pairs; ++i)
        inverse_frequencies[i] = pow(base, -2.0 * (double)i / dim);
    if (s->type == ATTN_ROPE_SCALING_LINEAR) {
        for (int64_t i = 0; i < pairs; ++i) inverse_frequencies[i] /= s->factor;
    } else if (s->type == ATTN_ROPE_SCALING_LLAMA3) {
        double trained = (double)s->original_max_positions;
        double long_wave = trained / s->low_freq_factor, short_wave = trained / s->high_freq_factor;
        for (int64_t i = 0; i < pairs; ++i) {
            double f = inverse_frequencies[i], wavelength = 2.0 * M_PI / f;
            if (wavelength > long_wave) {
                inverse_frequencies[i] = f / s->factor;
            } else if (wavelength >= short_wave) {
                double smooth = (trained / wavelength - s->low_freq_factor) /
                                (s->high_freq_factor - s->low_freq_factor);
                inverse_frequencies[i] = (1.0 - smooth) * f / s->factor + smooth * f;
            }
        }
    } else if (s->type == ATTN_ROPE_SCALING_YARN) {
        double fast = s->beta_fast == 0.0 ? 32.0 : s->beta_fast;
        double slow = s->beta_slow == 0.0 ? 1.0 : s->beta_slow;
        double trained = (double)s->original_max_positions;
        double low = yarn_correction_dim(fast, dim, base, trained);
        double high = yarn_correction_dim(slow, dim, base, trained);
        if (!s->no_truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0.0) low = 0.0;
        if (high > dim - 1.0) high = dim - 1.0;
        if (low == high) high += 0.001;
        for (int64_t i = 0; i < pairs; ++i) {
            double ramp = ((double)i - low) / (high - low);
            ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
            double keep = 1.0 - ramp; /* share of the unscaled (extrapolated) frequency */
            double f = inverse_frequencies[i];
            inverse_frequencies[i] = f / s->factor * (1.0 - keep) + f * keep;
        }
        if (s->attention_factor > 0.0)
            *attention_factor = s->attention_factor;
        else if (s->mscale != 0.0 && s->mscale_all_dim != 0.0)
            *attention_factor =
                yarn_magnitude(s->factor, s->mscale) / yarn_magnitude(s->factor, s->mscale_all_dim);
        else
            *attention_factor = yarn_magnitude(s->factor, 1.0);
    }
}

attn_status attn_rope_frequencies(const attn_rope_config *rope, int64_t sequence_length,
                                  double *inverse_frequencies, double *attention_factor,
                                  attn_error *error) {
    int64_t rotary_dim = 0;
    attn_status status = check_rope(rope, 0, &rotary_dim, error);
    if (status != ATTN_OK) return status;
    if (rope->rotary_dim == 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "rope.rotary_dim = 0: give the rotary dims explicitly here");
    if (inverse_frequencies == NULL || attention_factor == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                         "inverse_frequencies or attention_factor = NULL");
    rope_frequencies(rope, rotary_dim, sequence_length, inverse_frequencies, attention_factor);
    return ATTN_OK;
}

/* Rotates x in place. Token (b, t) sits at position positions[b * row_stride + t] (row_stride 0:
 * one row shared by the batch; positions NULL: first_position + t). cos/sin scaled by
 * `magnitude`; inverse rotates by the negated angles. */
static attn_status rope_rotate(attn_tensor *x, attn_rope_layout layout, int64_t rotary_dim,
                               const double *inverse_frequencies, double magnitude,
                               const int64_t *positions, int64_t row_stride,
                               int64_t position_stride, int64_t first_position, int inverse,
                               attn_error *error) {
    int64_t pair_count = rotary_dim / 2;
    double *cosines = malloc(2 * (size_t)pair_count * sizeof(double));
    if (cosines == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "rotary_dim = %lld: no memory",
                         (long long)rotary_dim);
    double *sines = cosines + pair_count;
    double direction = inverse ? -1.0 : 1.0;
    /* One position row per batch entry, or one row shared by all of them. */
    int64_t rows = positions != NULL && row_stride != 0 ? x->shape[0] : 1;
    for (int64_t row = 0; row < rows; ++row) {
        for (int64_t t = 0; t < x->shape[1]; ++t) {
            double position = positions != NULL
                                  ? (double)positions[row * row_stride + t * position_stride]
                                  : (double)(first_position + t);
            for (int64_t pair = 0; pair < pair_count; ++pair) {
                double angle = direction * position * inverse_frequencies[pair];
                cosines[pair] = magnitude * cos(angle);
                sines[pair] = magnitude * sin(angle);
            }
            int64_t b_first = rows == 1 ? 0 : row, b_last = rows == 1 ? x->shape[0] : row + 1;
            for (int64_t b = b_first; b < b_last; ++b) {
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
    }
    free(cosines);
    return ATTN_OK;
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
    int64_t last_position;
    if (positions == NULL && !attn_add_i64(first_position, x->shape[1], &last_position))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "first_position = %lld: first_position + T overflows",
                         (long long)first_position);
    attn_rope_config rope = {.layout = layout, .rotary_dim = rotary_dim, .base = base};
    double *frequencies = malloc((size_t)(rotary_dim / 2) * sizeof(double)), magnitude;
    if (frequencies == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "rotary_dim = %lld: no memory",
                         (long long)rotary_dim);
    rope_frequencies(&rope, rotary_dim, 0, frequencies, &magnitude);
    status = rope_rotate(x, layout, rotary_dim, frequencies, magnitude, positions, 0, 1,
                         first_position, inverse, error);
    free(frequencies);
    return status;
}

attn_status attn_rope_apply_ids(attn_tensor *x, const attn_rope_config *rope,
                                const attn_tensor *position_ids, int inverse, attn_error *error) {
    attn_status status = attn_check_tensor(x, "x", ATTN_DTYPE_F32, 4, error);
    if (status != ATTN_OK) return status;
    int64_t rotary_dim = 0;
    status = check_rope(rope, x->shape[3], &rotary_dim, error);
    if (status != ATTN_OK) return status;
    const int64_t *ids = NULL;
    int64_t row_stride = 0, position_stride = 1, longest = x->shape[1];
    if (position_ids != NULL) {
        status = attn_check_tensor(position_ids, "position_ids", ATTN_DTYPE_I64, 2, error);
        if (status != ATTN_OK) return status;
        if (position_ids->shape[0] != x->shape[0] || position_ids->shape[1] != x->shape[1])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "position_ids.shape = [%lld, %lld]: must be [B, T] = [%lld, %lld]",
                             (long long)position_ids->shape[0], (long long)position_ids->shape[1],
                             (long long)x->shape[0], (long long)x->shape[1]);
        ids = position_ids->data;
        row_stride = position_ids->stride[0];
        position_stride = position_ids->stride[1];
        /* The dynamic rule sees the call's longest reach: max position id + 1. */
        longest = INT64_MIN;
        for (int64_t b = 0; b < x->shape[0]; ++b)
            for (int64_t t = 0; t < x->shape[1]; ++t) {
                int64_t p = ids[b * row_stride + t * position_stride];
                if (p > longest) longest = p;
            }
        longest = longest == INT64_MAX ? INT64_MAX : longest + 1;
    }
    double *frequencies = malloc((size_t)(rotary_dim / 2) * sizeof(double)), magnitude;
    if (frequencies == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "rotary_dim = %lld: no memory",
                         (long long)rotary_dim);
    rope_frequencies(rope, rotary_dim, longest, frequencies, &magnitude);
    status = rope_rotate(x, rope->layout, rotary_dim, frequencies, magnitude, ids, row_stride,
                         position_stride, 0, inverse, error);
    free(frequencies);
    return status;
}
