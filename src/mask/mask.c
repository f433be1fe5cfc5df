/*
 * mask.c — the attention mask predicate and the additive logit terms (mask.h; semantics in
 * attn.h, attn_options): which (query, key) pairs are allowed, at which positions queries and
 * keys sit, and what bias and ALiBi add to a logit. The reference, the tiled forward, the
 * backward, decoding and the ring all ask these functions, so there is one definition.
 */
#include "mask.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"

attn_status attn_mask_context_init(attn_mask_context *context, const attn_options *options,
                                   const attn_problem *problem, attn_error *error) {
    if (context == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "context is NULL");
    memset(context, 0, sizeof *context);
    if (options == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "options is NULL");
    if (problem == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "problem is NULL");
    context->options = options;
    context->problem = *problem;

    if (options->alibi) {
        if (problem->query_heads > INT_MAX)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "Hq = %lld: too many heads for ALiBi", (long long)problem->query_heads);
        context->alibi_slopes = malloc((size_t)problem->query_heads * sizeof(float));
        if (context->alibi_slopes == NULL)
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "ALiBi slopes: %lld floats",
                             (long long)problem->query_heads);
        if (options->alibi_slopes != NULL) {
            memcpy(context->alibi_slopes, options->alibi_slopes,
                   (size_t)problem->query_heads * sizeof(float));
        } else {
            attn_status status =
                attn_alibi_slopes((int)problem->query_heads, context->alibi_slopes, error);
            if (status != ATTN_OK) {
                attn_mask_context_free(context);
                return status;
            }
        }
    }

    /* Global tokens flag rows and columns; sink tokens (keys at positions < sink_tokens)
     * are global columns only. */
    const bool global = options->global_token_count > 0 && options->global_tokens != NULL;
    if (global || options->sink_tokens > 0) {
        context->global_query = global ? calloc((size_t)problem->query_length, 1) : NULL;
        context->global_key = calloc((size_t)problem->key_length, 1);
        if ((global && context->global_query == NULL) || context->global_key == NULL) {
            attn_mask_context_free(context);
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "global token flags: Tq + Tk bytes");
        }
        for (int64_t n = 0; global && n < options->global_token_count; ++n) {
            int64_t token = options->global_tokens[n];
            if (token >= 0 && token < problem->query_length) context->global_query[token] = 1;
            if (token >= 0 && token < problem->key_length) context->global_key[token] = 1;
        }
        for (int64_t j = 0; j < problem->key_length && options->sink_tokens > 0; ++j)
            if ((options->key_positions != NULL ? options->key_positions[j] : j) <
                options->sink_tokens)
                context->global_key[j] = 1;
    }

    context->has_additive = options->bias != NULL || options->alibi;
    context->has_structure = options->causal || options->window_left >= 0 ||
                             options->window_right >= 0 || options->mask != NULL ||
                             options->query_lengths != NULL || options->key_lengths != NULL ||
                             options->pattern != ATTN_PATTERN_NONE ||
                             options->block_layout != NULL;
    return ATTN_OK;
}

void attn_mask_context_free(attn_mask_context *context) {
    if (context == NULL) return;
    free(context->alibi_slopes);
    free(context->global_query);
    free(context->global_key);
    context->alibi_slopes = NULL;
    context->global_query = NULL;
    context->global_key = NULL;
}

/* Inline forms of the exported count and position functions, used on the hot paths below. */
static inline int64_t query_count_of(const attn_mask_context *context, int64_t b) {
    const int32_t *lengths = context->options->query_lengths;
    return lengths != NULL ? lengths[b] : context->problem.query_length;
}

static inline int64_t key_count_of(const attn_mask_context *context, int64_t b) {
    const int32_t *lengths = context->options->key_lengths;
    return lengths != NULL ? lengths[b] : context->problem.key_length;
}

static inline int64_t query_position_of(const attn_mask_context *context, int64_t b, int64_t i) {
    const attn_options *options = context->options;
    if (options->query_positions != NULL) return options->query_positions[i];
    if (options->alignment == ATTN_ALIGN_BOTTOM_RIGHT)
        return i + key_count_of(context, b) - query_count_of(context, b);
    return i;
}

static inline int64_t key_position_of(const attn_mask_context *context, int64_t j) {
    const int64_t *positions = context->options->key_positions;
    return positions != NULL ? positions[j] : j;
}

int64_t attn_mask_query_count(const attn_mask_context *context, int64_t b) {
    return query_count_of(context, b);
}

int64_t attn_mask_key_count(const attn_mask_context *context, int64_t b) {
    return key_count_of(context, b);
}

int64_t attn_mask_query_position(const attn_mask_context *context, int64_t b, int64_t i) {
    return query_position_of(context, b, i);
}

int64_t attn_mask_key_position(const attn_mask_context *context, int64_t b, int64_t j) {
    (void)b;
    return key_position_of(context, j);
}

/* Floor division and modulo for a divisor >= 1 (positions may be negative). */
static int64_t floor_divide(int64_t value, int64_t divisor) {
    int64_t quotient = value / divisor;
    return (value % divisor != 0 && value < 0) ? quotient - 1 : quotient;
}

static int64_t floor_modulo(int64_t value, int64_t divisor) {
    int64_t remainder = value % divisor;
    return remainder < 0 ? remainder + divisor : remainder;
}

bool attn_mask_local_allowed(const attn_mask_context *context, int64_t query_position,
                             int64_t key_position) {
    const attn_options *options = context->options;
    const int64_t distance = query_position - key_position; /* d = pq - pk */
    if (options->window_left >= 0 && distance > options->window_left) return false;
    if (options->window_right >= 0 && -distance > options->window_right) return false;
    switch (options->pattern) {
    case ATTN_PATTERN_NONE: return true;
    case ATTN_PATTERN_STRIDED: {
        const int64_t stride = options->pattern_stride;
        return (distance > -stride && distance < stride) || distance % stride == 0;
    }
    case ATTN_PATTERN_FIXED: {
        const int64_t stride = options->pattern_stride;
        return floor_divide(key_position, stride) == floor_divide(query_position, stride) ||
               floor_modulo(key_position, stride) >= stride - options->pattern_summary;
    }
    case ATTN_PATTERN_DILATED: {
        const int64_t reach = options->pattern_radius * options->pattern_dilation;
        return distance <= reach && -distance <= reach &&
               distance % options->pattern_dilation == 0;
    }
    }
    return true;
}

/* Element [b|0, h|0, row, column] of a rank-4 view whose first two dims may broadcast. */
static const void *broadcast_element(const attn_tensor *t, int64_t b, int64_t h, int64_t row,
                                     int64_t column) {
    const int64_t batch_index = t->shape[0] == 1 ? 0 : b;
    const int64_t head_index = t->shape[1] == 1 ? 0 : h;
    const int64_t offset = batch_index * t->stride[0] + head_index * t->stride[1] +
                           row * t->stride[2] + column * t->stride[3];
    return (const char *)t->data + offset * (int64_t)attn_dtype_size(t->dtype);
}

static inline bool local_constraints_active(const attn_options *options) {
    return options->window_left >= 0 || options->window_right >= 0 ||
           options->pattern != ATTN_PATTERN_NONE;
}

/* attn_mask_allowed for a pair inside the valid lengths, with pq(i) already known. */
static inline bool allowed_at_position(const attn_mask_context *context, int64_t b, int64_t h,
                                       int64_t i, int64_t query_position, int64_t j) {
    const attn_options *options = context->options;
    const bool local_active = local_constraints_active(options);
    if (options->causal || local_active) {
        const int64_t key_position = key_position_of(context, j);
        if (options->causal && key_position > query_position) return false;
        if (local_active && !attn_mask_local_allowed(context, query_position, key_position)) {
            const bool global = (context->global_query != NULL && context->global_query[i]) ||
                                (context->global_key != NULL && context->global_key[j]);
            if (!global) return false;
        }
    }
    if (options->mask != NULL && *(const uint8_t *)broadcast_element(options->mask, b, h, i, j) == 0)
        return false;
    if (options->block_layout != NULL &&
        *(const uint8_t *)broadcast_element(options->block_layout, b, h, i / options->block_q,
                                            j / options->block_k) == 0)
        return false;
    return true;
}

bool attn_mask_allowed(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                       int64_t j) {
    if (i >= query_count_of(context, b) || j >= key_count_of(context, b)) return false;
    return allowed_at_position(context, b, h, i, query_position_of(context, b, i), j);
}

void attn_mask_allowed_row(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                           int64_t j0, int64_t j1, uint8_t *allowed) {
    const attn_options *options = context->options;
    if (j1 <= j0) return;
    memset(allowed, 0, (size_t)(j1 - j0));
    if (i >= query_count_of(context, b)) return;
    int64_t begin = j0, end = j1 < key_count_of(context, b) ? j1 : key_count_of(context, b);
    const int64_t query_position = query_position_of(context, b, i);

    /* With implicit key positions (pk = j), causal and the window are an interval of j;
     * global tokens (and sink tokens) lift the window, so then only causal narrows it. */
    bool band_is_interval = false;
    if (options->key_positions == NULL) {
        if (options->causal && query_position + 1 < end) end = query_position + 1;
        if (context->global_query == NULL && context->global_key == NULL) {
            if (options->window_left >= 0 && options->window_left < query_position - begin)
                begin = query_position - options->window_left;
            if (options->window_right >= 0 && options->window_right < end - query_position - 1)
                end = query_position + options->window_right + 1;
            band_is_interval = true;
        }
    }
    if (begin >= end) return;
    const bool per_element = !band_is_interval || options->pattern != ATTN_PATTERN_NONE ||
                             options->mask != NULL || options->block_layout != NULL;
    if (!per_element) {
        memset(allowed + (begin - j0), 1, (size_t)(end - begin));
        return;
    }
    for (int64_t j = begin; j < end; ++j)
        allowed[j - j0] = allowed_at_position(context, b, h, i, query_position, j);
}

float attn_mask_additive(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                         int64_t j) {
    const attn_options *options = context->options;
    float additive = 0.0f;
    if (options->bias != NULL) additive = *(const float *)broadcast_element(options->bias, b, h, i, j);
    if (context->alibi_slopes != NULL) {
        int64_t distance = query_position_of(context, b, i) - key_position_of(context, j);
        if (distance < 0) distance = -distance;
        additive -= context->alibi_slopes[h] * (float)distance;
    }
    return additive;
}

void attn_mask_additive_row(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                            int64_t j0, int64_t j1, float *additive) {
    const attn_options *options = context->options;
    for (int64_t j = j0; j < j1; ++j) additive[j - j0] = 0.0f;
    if (options->bias != NULL)
        for (int64_t j = j0; j < j1; ++j)
            additive[j - j0] = *(const float *)broadcast_element(options->bias, b, h, i, j);
    if (context->alibi_slopes != NULL) {
        const int64_t query_position = query_position_of(context, b, i);
        const float slope = context->alibi_slopes[h];
        for (int64_t j = j0; j < j1; ++j) {
            int64_t distance = query_position - key_position_of(context, j);
            if (distance < 0) distance = -distance;
            additive[j - j0] -= slope * (float)distance;
        }
    }
}

void attn_mask_candidate_keys(const attn_mask_context *context, int64_t b, int64_t i0,
                              int64_t i1, int64_t *key_begin, int64_t *key_end) {
    const attn_options *options = context->options;
    int64_t begin = 0;
    int64_t end = attn_mask_key_count(context, b);
    const int64_t query_count = attn_mask_query_count(context, b);
    if (i1 > query_count) i1 = query_count;
    if (i0 >= i1 || end <= 0) {
        *key_begin = *key_end = 0;
        return;
    }
    /* With implicit key positions pk(j) = j, so a bound on positions is a bound on j. */
    if (options->key_positions == NULL &&
        (options->causal || options->window_left >= 0 || options->window_right >= 0 ||
         options->pattern == ATTN_PATTERN_DILATED)) {
        int64_t lowest = INT64_MAX, highest = INT64_MIN;
        if (options->query_positions == NULL) {
            lowest = attn_mask_query_position(context, b, i0);
            highest = attn_mask_query_position(context, b, i1 - 1);
        } else {
            for (int64_t i = i0; i < i1; ++i) {
                const int64_t position = options->query_positions[i];
                if (position < lowest) lowest = position;
                if (position > highest) highest = position;
            }
        }
        /* causal: pk <= pq, global tokens included. */
        if (options->causal && highest + 1 < end) end = highest + 1 > 0 ? highest + 1 : 0;
        /* The local band (window AND dilated reach) bounds keys only without global tokens. */
        if (context->global_key == NULL) {
            int64_t left = options->window_left, right = options->window_right;
            if (options->pattern == ATTN_PATTERN_DILATED) {
                const int64_t reach = options->pattern_radius * options->pattern_dilation;
                if (left < 0 || reach < left) left = reach;
                if (right < 0 || reach < right) right = reach;
            }
            if (left >= 0 && left < lowest) {
                const int64_t first = lowest - left;
                if (first > begin) begin = first;
            }
            if (right >= 0 && right < end - highest) {
                const int64_t last = highest + right + 1; /* exclusive */
                if (last < end) end = last > 0 ? last : 0;
            }
        }
    }
    if (begin > end) begin = end;
    *key_begin = begin;
    *key_end = end;
}

bool attn_mask_is_band(const attn_options *options) {
    return options->key_positions == NULL && options->pattern == ATTN_PATTERN_NONE &&
           options->mask == NULL && options->block_layout == NULL &&
           !(options->global_token_count > 0 && options->global_tokens != NULL) &&
           options->sink_tokens == 0;
}

bool attn_mask_window_narrows(const attn_options *options, int64_t query_length,
                              int64_t key_length) {
    const int64_t longest = (query_length > key_length ? query_length : key_length) - 1;
    return (options->window_left >= 0 && options->window_left < longest) ||
           (options->window_right >= 0 && options->window_right < longest);
}

void attn_mask_band_sides(const attn_options *options, int64_t query_length, int64_t key_length,
                          int64_t *left, int64_t *right) {
    const int64_t longest = (query_length > key_length ? query_length : key_length) - 1;
    *left = options->window_left >= 0 && options->window_left < longest ? options->window_left
                                                                          : longest;
    *right = options->causal ? 0
             : options->window_right >= 0 && options->window_right < longest
                 ? options->window_right
                 : longest;
}

void attn_mask_band_row(const attn_mask_context *context, int64_t b, int64_t i,
                        int64_t *key_begin, int64_t *key_end) {
    const attn_options *options = context->options;
    int64_t begin = 0, end = key_count_of(context, b);
    if (i >= query_count_of(context, b)) end = 0;
    const int64_t query_position = query_position_of(context, b, i);
    /* pk = j: causal is j <= pq, the window pq - left <= j <= pq + right. */
    if (options->causal && query_position + 1 < end) end = query_position + 1;
    if (options->window_left >= 0 && query_position - options->window_left > begin)
        begin = query_position - options->window_left;
    if (options->window_right >= 0 && query_position + options->window_right + 1 < end)
        end = query_position + options->window_right + 1;
    if (end < 0) end = 0;
    if (begin > end) begin = end;
    *key_begin = begin;
    *key_end = end;
}
