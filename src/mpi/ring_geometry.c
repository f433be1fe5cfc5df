/*
 * ring_geometry.c — which part of a (query block, key block) pair the ring must compute.
 * Both blocks hold increasing global positions (every layout guarantees it), and causal and
 * window masking allow, for a query at position p, exactly the keys with positions in
 * [p - lower, p + upper]. Binary searches give each row's allowed keys, hence the rows and
 * columns that hold allowed pairs (the block is trimmed to them: the zigzag "half blocks" and
 * the striped "q[1:] against k[:-1]" fall out of this) and the number of allowed pairs.
 */
#include "ring_internal.h"

/* First index in sorted[0..count) whose value is >= value. */
static int64_t lower_bound(const int64_t *sorted, int64_t count, int64_t value) {
    int64_t low = 0, high = count;
    while (low < high) {
        int64_t middle = low + (high - low) / 2;
        if (sorted[middle] < value)
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

/* First index in sorted[0..count) whose value is > value. */
static int64_t upper_bound(const int64_t *sorted, int64_t count, int64_t value) {
    int64_t low = 0, high = count;
    while (low < high) {
        int64_t middle = low + (high - low) / 2;
        if (sorted[middle] <= value)
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

ring_block_geometry ring_block_geometry_of(const attn_options *options,
                                           const int64_t *query_positions, int64_t query_count,
                                           const int64_t *key_positions, int64_t key_count,
                                           int64_t sequence_length) {
    /* Allowed key positions for a query at p: [p - lower, p + upper]. Offsets beyond the
     * sequence length are the same as unbounded, so clamp them (no overflow below). */
    int64_t unbounded = sequence_length;
    int64_t lower = options->window_left >= 0 && options->window_left < unbounded
                        ? options->window_left : unbounded;
    int64_t upper = options->window_right >= 0 && options->window_right < unbounded
                        ? options->window_right : unbounded;
    if (options->causal && upper > 0) upper = 0;

    ring_block_geometry geometry = {0, 0, 0, 0, 0};
    int64_t first_row = -1, last_row = -1, first_column = key_count, end_column = 0;
    for (int64_t i = 0; i < query_count; ++i) {
        int64_t begin = lower_bound(key_positions, key_count, query_positions[i] - lower);
        int64_t end = upper_bound(key_positions, key_count, query_positions[i] + upper);
        if (end < begin) end = begin;
        /* sink tokens: the keys at positions < sink_tokens (and within the upper bound) */
        int64_t sinks = 0;
        if (options->sink_tokens > 0) {
            const int64_t limit = query_positions[i] + upper < options->sink_tokens - 1
                                      ? query_positions[i] + upper
                                      : options->sink_tokens - 1;
            sinks = upper_bound(key_positions, key_count, limit);
        }
        const int64_t pairs = sinks > begin ? (end > sinks ? end : sinks) : sinks + end - begin;
        if (pairs == 0) continue;
        if (sinks > 0) begin = 0;
        if (sinks > end) end = sinks;
        if (first_row < 0) first_row = i;
        last_row = i;
        if (begin < first_column) first_column = begin;
        if (end > end_column) end_column = end;
        geometry.allowed_pairs += pairs;
    }
    if (first_row >= 0) {
        geometry.row_begin = first_row;
        geometry.row_end = last_row + 1;
        geometry.column_begin = first_column;
        geometry.column_end = end_column;
    }
    return geometry;
}

int64_t ring_slab_rows(int64_t row_count) {
    int64_t rows = (row_count + RING_SLABS_PER_BLOCK - 1) / RING_SLABS_PER_BLOCK;
    return rows < RING_SLAB_MIN_ROWS ? RING_SLAB_MIN_ROWS : rows;
}

bool ring_plan_block(const ring_call *call, int64_t key_count, attn_ring_stats *stats,
                     ring_block_geometry *geometry) {
    *geometry = ring_block_geometry_of(&call->prepared.options, call->local_positions,
                                       call->local_length, call->block_positions, key_count,
                                       call->layout.sequence_length);
    if (geometry->allowed_pairs == 0) {
        if (stats != NULL) stats->blocks_skipped++;
        return false;
    }
    if (stats != NULL) {
        stats->blocks_computed++;
        stats->computed_pairs += geometry->allowed_pairs * call->batch * call->query_heads;
    }
    return true;
}
