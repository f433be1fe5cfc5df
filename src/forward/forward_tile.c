/*
 * forward_tile.c — one step of the tiled forward pass (flash_forward.c): a key tile applied
 * to some rows of every non-EMPTY head of a work item: S = Q·Kᵀ through the kernel table,
 * the mask and additive terms (row by row), the online-softmax step with the rescale of the
 * accumulators, and O += P·V. Also what keeps NaN / inf in never-attended values out.
 */
#include <math.h>
#include <string.h>

#include "../core/internal.h"
#include "forward_internal.h"

/* The logit pipeline (mask/logits.h) on one head's scores, rows [i0, i0 + rows) x keys
 * [j0, j0 + count): scores [rows][scores_stride]. Marks the keys some row attends in
 * column_alive. */
static void apply_mask_to_head(const forward_plan *plan, forward_workspace *workspace,
                               attn_tile_class tile_class, int64_t b, int64_t h, int64_t i0,
                               int64_t rows, int64_t j0, int64_t count, float *scores) {
    const attn_logit_buffers buffers = {workspace->row_allowed, workspace->row_additive, NULL,
                                        workspace->column_alive};
    for (int64_t r = 0; r < rows; ++r)
        attn_logits_row(&plan->call->mask, &plan->logits, tile_class, b, h, i0 + r, j0, count,
                        scores + r * plan->scores_stride, &buffers);
}

/* The next run of consecutive heads, from head `start` on, whose tile is not EMPTY: returns
 * its first head (group_size when there is none) and sets *run_length. Heads of one run are
 * handed to a kernel together, as run_length x rows consecutive rows. */
static int64_t next_head_run(const attn_tile_class *classes, int64_t group_size, int64_t start,
                             int64_t *run_length) {
    while (start < group_size && classes[start] == ATTN_TILE_EMPTY) ++start;
    int64_t end = start;
    while (end < group_size && classes[end] != ATTN_TILE_EMPTY) ++end;
    *run_length = end - start;
    return start;
}

/* The packed values to use with tile `packed` for keys [j0, j0 + count): the shared packed
 * tile, or, when it holds inf / NaN and some key of the tile is attended by no row, a copy
 * with those keys zeroed, so that NaN or inf in never-attended values cannot leak in as
 * 0 * NaN. */
static const float *values_for_tile(const forward_plan *plan, forward_workspace *workspace,
                                    const packed_kv_tile *packed, bool all_columns_alive,
                                    const uint8_t *alive, int64_t b, int64_t kv_head,
                                    int64_t j0, int count) {
    if (packed->values_finite || all_columns_alive) return packed->values;
    bool some_column_dead = false;
    for (int c = 0; c < count; ++c) some_column_dead |= alive[c] == 0;
    if (!some_column_dead) return packed->values;
    packed_kv_pack_values(&plan->format, plan->v, b, j0, kv_head, count,
                          (int)plan->call->problem.value_dim, alive,
                          workspace->value_staging, workspace->staged_values);
    return workspace->staged_values;
}

/* The kernel calls of one step: whole consecutive heads together when the step covers all
 * rows of a head, else one call per head. Returns how many segments it wrote. */
static int tile_segments(const forward_workspace *workspace, int64_t group_size,
                         const tile_step *step) {
    const attn_tile_class *classes = workspace->head_class;
    int n = 0;
    if (step->first_row == 0 && step->end_row == step->rows) {
        for (int64_t run, first = next_head_run(classes, group_size, 0, &run); first < group_size;
             first = next_head_run(classes, group_size, first + run, &run))
            workspace->segments[n++] = (row_segment){first * step->rows, run * step->rows};
        return n;
    }
    for (int64_t g = 0; g < group_size; ++g)
        if (classes[g] != ATTN_TILE_EMPTY)
            workspace->segments[n++] =
                (row_segment){g * step->rows + step->first_row, step->end_row - step->first_row};
    return n;
}

/* Dropout on the step's probabilities (mask/dropout.h): every row of every non-EMPTY head,
 * after the softmax step has summed them and before P·V. */
static void dropout_tile(const forward_plan *plan, forward_workspace *workspace,
                         const tile_step *step) {
    const int64_t group_size = plan->call->problem.group_size;
    for (int64_t g = 0; g < group_size; ++g) {
        if (workspace->head_class[g] == ATTN_TILE_EMPTY) continue;
        for (int64_t r = step->first_row; r < step->end_row; ++r)
            attn_dropout_apply_row(&plan->dropout, step->b, step->kv_head * group_size + g,
                                   step->i0 + r, step->j0, step->count,
                                   workspace->scores + (g * step->rows + r) * plan->scores_stride);
    }
}

/* The type the softmax step writes P in (registry.h): the 16-bit operand type when the fp32
 * kernels compute P·V on widened 16-bit operands, so that P is rounded as the P·V of lowp.h
 * reads it within the step, unless dropout scales P between the step and P·V (then
 * round_p_after_dropout rounds the scaled P); fp32 otherwise (the 16-bit tiles round P
 * themselves). */
static attn_dtype softmax_p_type(const forward_plan *plan) {
    const attn_dtype dtype = plan->format.dtype;
    const bool widened16 =
        !plan->format.bf16_tiles && (dtype == ATTN_DTYPE_BF16 || dtype == ATTN_DTYPE_F16);
    return widened16 && !plan->dropout.active ? dtype : ATTN_DTYPE_F32;
}

/* With dropout on widened 16-bit operands: P [rows][stride] (count used) rounded in place to
 * the operand type after dropout scaled it, as softmax_p_type leaves it to. */
static void round_p_after_dropout(const forward_plan *plan, int rows, int count, float *p,
                                  int stride) {
    if (!plan->dropout.active || plan->format.bf16_tiles) return;
    const attn_dtype dtype = plan->format.dtype;
    if (dtype == ATTN_DTYPE_BF16 || dtype == ATTN_DTYPE_F16)
        plan->call->kernels->convert.round_rows(dtype, rows, count, p, stride);
}

void forward_compute_tile(const forward_plan *plan, forward_workspace *workspace,
                         const tile_step *step) {
    const attn_forward_kernels *kernels = &plan->call->kernels->forward;
    const attn_problem *problem = &plan->call->problem;
    const int64_t group_size = problem->group_size;
    const int dim_k = (int)problem->key_dim, dim_v = (int)problem->value_dim;
    const int count = step->count;
    const float step_scale = plan->prescale_queries || plan->loop_transforms ? 1.0f : problem->scale;
    const float step_softcap = plan->loop_transforms ? 0.0f : plan->call->options.softcap;
    const int segment_count = tile_segments(workspace, group_size, step);
    const row_segment *segments = workspace->segments;
    const attn_dtype p_type = softmax_p_type(plan);

    /* Scores, then the mask and additive terms, for every non-empty head. */
    bool all_columns_alive = !step->needs_mask_pass;
    if (step->needs_mask_pass) memset(workspace->column_alive, 0, (size_t)count);
    const bool bf16_tiles = plan->format.bf16_tiles;
    for (int n = 0; n < segment_count; ++n) {
        float *queries = workspace->queries + segments[n].first * plan->query_stride;
        float *scores = workspace->scores + segments[n].first * plan->scores_stride;
        if (bf16_tiles) /* bf16 query rows in the same buffer (forward_gather_query) */
            attn_kernels_tiles16(plan->call->kernels, plan->format.dtype)->score_tile((int)segments[n].count, count, dim_k,
                                           (const uint16_t *)queries, 2 * plan->query_stride,
                                           (const uint16_t *)step->packed->keys, scores,
                                           plan->scores_stride);
        else
            kernels->score_tile((int)segments[n].count, count, dim_k, queries, plan->query_stride,
                                step->packed->keys, scores, plan->scores_stride);
    }
    if (step->needs_mask_pass) {
        for (int64_t g = 0; g < group_size; ++g) {
            const attn_tile_class tile_class = workspace->head_class[g];
            if (tile_class == ATTN_TILE_EMPTY) continue;
            if (!attn_logits_needed(&plan->logits, tile_class)) {
                all_columns_alive = true; /* this head attends every key of the tile */
                continue;
            }
            apply_mask_to_head(plan, workspace, tile_class, step->b,
                               step->kv_head * group_size + g, step->i0 + step->first_row,
                               step->end_row - step->first_row, step->j0, count,
                               workspace->scores +
                                   (g * step->rows + step->first_row) * plan->scores_stride);
        }
    }

    /* Online softmax: probabilities in place of the scores, rescale the accumulators. */
    for (int n = 0; n < segment_count; ++n) {
        const int64_t first = segments[n].first;
        kernels->softmax_step((int)segments[n].count, count,
                              workspace->scores + first * plan->scores_stride,
                              plan->scores_stride, step_scale, step_softcap, p_type,
                              workspace->row_max + first, workspace->row_sum + first,
                              workspace->rescale + first);
        kernels->scale_rows((int)segments[n].count, dim_v, workspace->rescale + first,
                            workspace->accumulator + first * plan->accumulator_stride,
                            plan->accumulator_stride);
    }

    if (plan->dropout.active) dropout_tile(plan, workspace, step);

    const float *values = values_for_tile(plan, workspace, step->packed, all_columns_alive,
                                          workspace->column_alive, step->b, step->kv_head, step->j0, count);
    for (int n = 0; n < segment_count; ++n) {
        const int64_t first = segments[n].first;
        float *weights = workspace->scores + first * plan->scores_stride;
        float *accumulator = workspace->accumulator + first * plan->accumulator_stride;
        const int segment_rows = (int)segments[n].count;
        if (bf16_tiles) { /* rounds P to bf16 itself */
            attn_kernels_tiles16(plan->call->kernels, plan->format.dtype)->accumulate_values(segment_rows, count, dim_v, weights,
                                                  plan->scores_stride,
                                                  (const uint16_t *)values, accumulator,
                                                  plan->accumulator_stride);
            continue;
        }
        round_p_after_dropout(plan, segment_rows, count, weights, plan->scores_stride);
        kernels->accumulate_values(segment_rows, count, dim_v, weights, plan->scores_stride,
                                   values, accumulator, plan->accumulator_stride);
    }
}


/* Each row of a span step masked to its interval [begin, end) of the `columns` scores from
 * first_key (the band; -inf outside), with the logit pipeline (additive terms, loop
 * transforms) on the interval only; alive[c]: some row attends column c. */
static void span_mask_rows(const forward_plan *plan, forward_workspace *workspace,
                           const span_step *step, int64_t first_key, int64_t columns,
                           uint8_t *alive) {
    const attn_mask_context *mask = &plan->call->mask;
    const int64_t group_size = plan->call->problem.group_size, stride = plan->span_stride;
    const int64_t rows = step->end_row - step->first_row;
    const bool transform = attn_logits_needed(&plan->logits, ATTN_TILE_FULL);
    memset(alive, 0, (size_t)columns);
    const attn_logit_buffers buffers = {workspace->row_allowed, workspace->row_additive, NULL,
                                        NULL};
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = step->i0 + step->first_row + r;
        int64_t begin, end;
        attn_mask_band_row(mask, step->b, i, &begin, &end);
        begin = begin < first_key ? 0 : begin - first_key;
        end = end - first_key > columns ? columns : end - first_key;
        if (end < begin) end = begin;
        for (int64_t g = 0; g < group_size; ++g) {
            float *row = workspace->scores + (g * plan->span_rows + r) * stride;
            for (int64_t c = 0; c < begin; ++c) row[c] = -INFINITY;
            for (int64_t c = end; c < columns; ++c) row[c] = -INFINITY;
            if (end == begin) continue;
            if (transform) {
                attn_logit_buffers row_buffers = buffers;
                row_buffers.live = alive + begin;
                attn_logits_row(mask, &plan->logits, ATTN_TILE_FULL, step->b,
                                step->kv_head * group_size + g, i, first_key + begin,
                                end - begin, row + begin, &row_buffers);
            } else {
                memset(alive + begin, 1, (size_t)(end - begin));
            }
        }
    }
}

/* The packed tile `tile` of the step's (b, KV head): the shared store's, or this thread's
 * (packed on first use, or repacked into its one slot under a tight memory limit). */
static const packed_kv_tile *span_tile(const forward_plan *plan, forward_workspace *workspace,
                                       int64_t b, int64_t kv_head, int64_t tile) {
    if (plan->packing == PACK_SHARED) return &plan->shared_packed->slot[tile];
    packed_kv_store *store = plan->span_ring > 0 ? &workspace->head_stores[kv_head]
                                                 : &workspace->packed;
    return packed_kv_get(store, plan->k, plan->v, b, kv_head, tile,
                         attn_mask_key_count(&plan->call->mask, b), workspace->value_staging);
}

void forward_compute_span(const forward_plan *plan, forward_workspace *workspace,
                          const span_step *step) {
    const attn_forward_kernels *kernels = &plan->call->kernels->forward;
    const attn_kernels *registry = plan->call->kernels;
    const attn_problem *problem = &plan->call->problem;
    const int64_t group_size = problem->group_size;
    const int dim_k = (int)problem->key_dim, dim_v = (int)problem->value_dim;
    const int64_t tile_keys = plan->tile_keys, stride = plan->span_stride;
    const int64_t first_key = step->first_tile * tile_keys;
    const int64_t rows = step->end_row - step->first_row;
    const float step_scale = plan->prescale_queries || plan->loop_transforms ? 1.0f : problem->scale;
    const float step_softcap = plan->loop_transforms ? 0.0f : plan->call->options.softcap;
    const bool bf16_tiles = plan->format.bf16_tiles;

    /* The step's tiles and their key counts; columns = keys from first_key to the last one
     * the step uses. */
    int counts[FORWARD_SPAN_TILES];
    const int64_t tile_count = step->last_tile - step->first_tile + 1;
    int64_t columns = 0;

    /* Scores of each head's rows, tile by tile, into one row of `columns` scores. A tile is
     * asked for again for P·V below: with one slot (a tight memory limit) it is repacked. */
    for (int64_t t = 0; t < tile_count; ++t) {
        const packed_kv_tile *tile =
            span_tile(plan, workspace, step->b, step->kv_head, step->first_tile + t);
        const int64_t start = (step->first_tile + t) * tile_keys;
        int64_t count = step->key_end - start < tile_keys ? step->key_end - start : tile_keys;
        if (count > tile->count) count = tile->count;
        counts[t] = (int)count;
        columns = start - first_key + count;
        for (int64_t g = 0; g < group_size; ++g) {
            const float *queries =
                workspace->queries + (g * step->rows + step->first_row) * plan->query_stride;
            float *target = workspace->scores + g * plan->span_rows * stride + t * tile_keys;
            if (bf16_tiles)
                attn_kernels_tiles16(registry, plan->format.dtype)->score_tile((int)rows, (int)count, dim_k, (const uint16_t *)queries,
                                          2 * plan->query_stride, (const uint16_t *)tile->keys,
                                          target, (int)stride);
            else
                kernels->score_tile((int)rows, (int)count, dim_k, queries, plan->query_stride,
                                    tile->keys, target, (int)stride);
        }
    }

    /* Each row masked to its interval (span_mask_rows). */
    uint8_t *alive = workspace->column_alive;
    span_mask_rows(plan, workspace, step, first_key, columns, alive);

    /* One online-softmax step over the whole span, then P·V tile by tile. */
    const attn_dtype p_type = softmax_p_type(plan);
    for (int64_t g = 0; g < group_size; ++g) {
        const int64_t first = g * step->rows + step->first_row;
        float *scores = workspace->scores + g * plan->span_rows * stride;
        float *accumulator = workspace->accumulator + first * plan->accumulator_stride;
        kernels->softmax_step((int)rows, (int)columns, scores, (int)stride, step_scale,
                              step_softcap, p_type, workspace->row_max + first,
                              workspace->row_sum + first, workspace->rescale + first);
        kernels->scale_rows((int)rows, dim_v, workspace->rescale + first, accumulator,
                            plan->accumulator_stride);
        for (int64_t r = 0; r < rows && plan->dropout.active; ++r)
            attn_dropout_apply_row(&plan->dropout, step->b, step->kv_head * group_size + g,
                                   step->i0 + step->first_row + r, first_key, columns,
                                   scores + r * stride);
        round_p_after_dropout(plan, (int)rows, (int)columns, scores, (int)stride);
    }
    for (int64_t t = 0; t < tile_count; ++t) {
        const int64_t offset = t * tile_keys;
        const packed_kv_tile *tile =
            span_tile(plan, workspace, step->b, step->kv_head, step->first_tile + t);
        const float *values = values_for_tile(plan, workspace, tile, false, alive + offset,
                                              step->b, step->kv_head, first_key + offset,
                                              counts[t]);
        for (int64_t g = 0; g < group_size; ++g) {
            const int64_t first = g * step->rows + step->first_row;
            const float *weights = workspace->scores + g * plan->span_rows * stride + offset;
            float *accumulator = workspace->accumulator + first * plan->accumulator_stride;
            if (bf16_tiles)
                attn_kernels_tiles16(registry, plan->format.dtype)->accumulate_values((int)rows, counts[t], dim_v, weights,
                                                 (int)stride, (const uint16_t *)values,
                                                 accumulator, plan->accumulator_stride);
            else
                kernels->accumulate_values((int)rows, counts[t], dim_v, weights, (int)stride,
                                           values, accumulator, plan->accumulator_stride);
        }
    }
}
