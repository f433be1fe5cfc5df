/*
 * tiles.c — classifies a tile of (query, key) pairs as EMPTY, FULL or PARTIAL (mask.h), so
 * the tiled loops skip tiles with no allowed pair and do no per-element mask work on tiles
 * where every pair is allowed.
 *
 * The predicate is an AND of factors (lengths, block layout, causal, local OR global, bool
 * mask); each factor is classified on its own and the classes are combined:
 *   AND: any EMPTY -> EMPTY, all FULL -> FULL, else PARTIAL
 *   OR:  any FULL  -> FULL,  all EMPTY -> EMPTY, else PARTIAL
 * which can only err towards PARTIAL, never say FULL or EMPTY wrongly. Position-based factors
 * (causal, window, strided and dilated patterns) depend on d = pq - pk only; with implicit
 * positions the tile holds every d between its extremes, so scanning that range is exact.
 */
#include "mask.h"

#include "../core/internal.h"

static attn_tile_class class_and(attn_tile_class a, attn_tile_class b) {
    if (a == ATTN_TILE_EMPTY || b == ATTN_TILE_EMPTY) return ATTN_TILE_EMPTY;
    if (a == ATTN_TILE_FULL && b == ATTN_TILE_FULL) return ATTN_TILE_FULL;
    return ATTN_TILE_PARTIAL;
}

static attn_tile_class class_or(attn_tile_class a, attn_tile_class b) {
    if (a == ATTN_TILE_FULL || b == ATTN_TILE_FULL) return ATTN_TILE_FULL;
    if (a == ATTN_TILE_EMPTY && b == ATTN_TILE_EMPTY) return ATTN_TILE_EMPTY;
    return ATTN_TILE_PARTIAL;
}

/* From counts of allowed and total elements. */
static attn_tile_class class_from_count(int64_t allowed, int64_t total) {
    if (allowed == 0) return ATTN_TILE_EMPTY;
    return allowed == total ? ATTN_TILE_FULL : ATTN_TILE_PARTIAL;
}

/* Smallest and largest position of rows [i0, i1) (queries) or columns [j0, j1) (keys). */
static void position_range(const attn_mask_context *context, int64_t b, bool queries,
                           int64_t first, int64_t last, int64_t *lowest, int64_t *highest) {
    const int64_t *explicit_positions =
        queries ? context->options->query_positions : context->options->key_positions;
    if (explicit_positions == NULL) { /* implicit positions increase with the index */
        *lowest = queries ? attn_mask_query_position(context, b, first)
                          : attn_mask_key_position(context, b, first);
        *highest = queries ? attn_mask_query_position(context, b, last - 1)
                           : attn_mask_key_position(context, b, last - 1);
        return;
    }
    *lowest = INT64_MAX;
    *highest = INT64_MIN;
    for (int64_t n = first; n < last; ++n) {
        if (explicit_positions[n] < *lowest) *lowest = explicit_positions[n];
        if (explicit_positions[n] > *highest) *highest = explicit_positions[n];
    }
}

/* Longest range of d or of key positions scanned exhaustively for the modular patterns; a
 * longer range (only possible with sparse explicit positions) is classified PARTIAL. */
static int64_t scan_limit(int64_t rows, int64_t columns) { return 4 * (rows + columns) + 256; }

/* window AND pattern, for a tile whose d = pq - pk spans [d_low, d_high] and whose positions
 * span [query_low, query_high] x [key_low, key_high]. */
static attn_tile_class classify_local(const attn_mask_context *context, int64_t rows,
                                      int64_t columns, int64_t query_low, int64_t query_high,
                                      int64_t key_low, int64_t key_high) {
    const attn_options *options = context->options;
    const int64_t d_low = query_low - key_high, d_high = query_high - key_low;
    const int64_t left = options->window_left, right = options->window_right;

    /* The window alone: allowed iff -right <= d <= left (a side at -1 is unbounded). */
    attn_tile_class window_class = ATTN_TILE_PARTIAL;
    if ((left >= 0 && d_low > left) || (right >= 0 && d_high < -right))
        window_class = ATTN_TILE_EMPTY;
    else if ((left < 0 || d_high <= left) && (right < 0 || d_low >= -right))
        window_class = ATTN_TILE_FULL;
    if (window_class == ATTN_TILE_EMPTY || options->pattern == ATTN_PATTERN_NONE)
        return window_class;

    if (options->pattern == ATTN_PATTERN_STRIDED || options->pattern == ATTN_PATTERN_DILATED) {
        /* window(d) AND pattern(d): scan every d of the tile's range. */
        if (d_high - d_low > scan_limit(rows, columns)) return ATTN_TILE_PARTIAL;
        int64_t allowed = 0;
        for (int64_t d = d_low; d <= d_high; ++d)
            allowed += attn_mask_local_allowed(context, d, 0) ? 1 : 0;
        return class_from_count(allowed, d_high - d_low + 1);
    }

    /* FIXED: a key is allowed for every row when it is a summary column, else for the rows
     * in its own stride block. Scan key positions; rows span blocks [row_block_low, high]. */
    if (key_high - key_low > scan_limit(rows, columns)) return ATTN_TILE_PARTIAL;
    const int64_t stride = options->pattern_stride;
    const int64_t row_block_low = query_low >= 0 ? query_low / stride : -((-query_low + stride - 1) / stride);
    const int64_t row_block_high = query_high >= 0 ? query_high / stride : -((-query_high + stride - 1) / stride);
    bool all_allowed = true, none_allowed = true;
    for (int64_t key = key_low; key <= key_high; ++key) {
        const int64_t key_block = key >= 0 ? key / stride : -((-key + stride - 1) / stride);
        const int64_t key_offset = key - key_block * stride;
        if (key_offset >= stride - options->pattern_summary) {
            none_allowed = false;
        } else if (row_block_low == row_block_high && row_block_low == key_block) {
            none_allowed = false;
        } else if (key_block >= row_block_low && key_block <= row_block_high) {
            all_allowed = none_allowed = false;
        } else {
            all_allowed = false;
        }
    }
    attn_tile_class fixed_class = all_allowed    ? ATTN_TILE_FULL
                                  : none_allowed ? ATTN_TILE_EMPTY
                                                 : ATTN_TILE_PARTIAL;
    return class_and(window_class, fixed_class);
}

/* Global rows and columns: FULL if every row or every column of the tile is global. */
static attn_tile_class classify_global(const attn_mask_context *context, int64_t i0, int64_t i1,
                                       int64_t j0, int64_t j1) {
    if (context->global_key == NULL) return ATTN_TILE_EMPTY;
    int64_t global_rows = 0, global_columns = 0; /* (sink tokens: global columns only) */
    for (int64_t i = i0; i < i1 && context->global_query != NULL; ++i)
        global_rows += context->global_query[i];
    for (int64_t j = j0; j < j1; ++j) global_columns += context->global_key[j];
    if (global_rows == i1 - i0 || global_columns == j1 - j0) return ATTN_TILE_FULL;
    return (global_rows == 0 && global_columns == 0) ? ATTN_TILE_EMPTY : ATTN_TILE_PARTIAL;
}

/* Counts the nonzero entries of a bool [B|1, Hq|1, rows, columns] view over a rectangle. */
static attn_tile_class classify_bool_rectangle(const attn_tensor *t, int64_t b, int64_t h,
                                               int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const uint8_t *base = (const uint8_t *)t->data + (t->shape[0] == 1 ? 0 : b) * t->stride[0] +
                          (t->shape[1] == 1 ? 0 : h) * t->stride[1];
    int64_t allowed = 0;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) allowed += base[r * t->stride[2] + c * t->stride[3]] != 0;
    return class_from_count(allowed, (r1 - r0) * (c1 - c0));
}

attn_tile_class attn_mask_classify_tile(const attn_mask_context *context, int64_t b, int64_t h,
                                        int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const attn_options *options = context->options;
    attn_tile_class result = ATTN_TILE_FULL;

    /* Lengths: pairs outside the valid counts are never allowed; classify the rest. */
    const int64_t query_count = attn_mask_query_count(context, b);
    const int64_t key_count = attn_mask_key_count(context, b);
    if (i1 > query_count) { i1 = query_count; result = ATTN_TILE_PARTIAL; }
    if (j1 > key_count) { j1 = key_count; result = ATTN_TILE_PARTIAL; }
    if (i0 >= i1 || j0 >= j1) return ATTN_TILE_EMPTY;

    if (options->block_layout != NULL) {
        result = class_and(result, classify_bool_rectangle(
                                       options->block_layout, b, h, i0 / options->block_q,
                                       (i1 - 1) / options->block_q + 1, j0 / options->block_k,
                                       (j1 - 1) / options->block_k + 1));
        if (result == ATTN_TILE_EMPTY) return result;
    }

    const bool local_active = options->window_left >= 0 || options->window_right >= 0 ||
                              options->pattern != ATTN_PATTERN_NONE;
    if (options->causal || local_active) {
        int64_t query_low, query_high, key_low, key_high;
        position_range(context, b, true, i0, i1, &query_low, &query_high);
        position_range(context, b, false, j0, j1, &key_low, &key_high);
        if (options->causal) { /* pk <= pq, i.e. d >= 0 */
            const int64_t d_low = query_low - key_high, d_high = query_high - key_low;
            attn_tile_class causal_class = d_low >= 0  ? ATTN_TILE_FULL
                                           : d_high < 0 ? ATTN_TILE_EMPTY
                                                        : ATTN_TILE_PARTIAL;
            result = class_and(result, causal_class);
            if (result == ATTN_TILE_EMPTY) return result;
        }
        if (local_active) {
            attn_tile_class local_class = classify_local(context, i1 - i0, j1 - j0, query_low,
                                                         query_high, key_low, key_high);
            if (local_class != ATTN_TILE_FULL)
                local_class = class_or(local_class, classify_global(context, i0, i1, j0, j1));
            result = class_and(result, local_class);
            if (result == ATTN_TILE_EMPTY) return result;
        }
    }

    if (options->mask != NULL)
        result = class_and(result, classify_bool_rectangle(options->mask, b, h, i0, i1, j0, j1));
    return result;
}
