/*
 * flash_forward.c — attn_forward: exact attention, FlashAttention-2 style, on the CPU.
 *
 * Work is split into items (b, kv_head, query tile). An item holds the query rows of every
 * head of the GQA group (group_size heads x tile rows), walks the key tiles that the mask's
 * band allows in increasing order, packs each K and V tile once for the whole group, and
 * keeps the online-softmax state (row max m, row sum l, unnormalised accumulator) per row:
 *   EMPTY tile (per head): skipped, nothing loaded or computed for that head
 *   FULL tile:             scores, softmax step, accumulate; no per-element mask work
 *   PARTIAL tile:          disallowed scores set to -inf, additive terms added per element
 * Finally O = acc / l and LSE = m + log l. All arithmetic on tiles goes through the kernel
 * table (kernel.h). Each output row is produced by exactly one thread in a fixed order, so
 * the result is bitwise identical for any thread count. Working memory is O(tile) per
 * thread; nothing of size Tq x Tk is ever allocated.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../core/internal.h"
#include "../kernels/kernel.h"
#include "../mask/mask.h"

/* Everything shared by all work items of one call (read-only during the parallel loop). */
typedef struct forward_plan {
    const attn_tensor *q, *k, *v;
    attn_tensor *out, *lse;
    const attn_options *options;
    attn_problem problem;
    attn_mask_context mask;
    const attn_kernel_table *kernels;
    int64_t tile_rows;      /* query rows per head in one work item */
    int64_t tile_keys;      /* keys per key tile */
    int64_t query_tiles;    /* ceil(Tq / tile_rows) */
    int query_stride;       /* floats between packed query rows (Dk rounded up to 16) */
    int scores_stride;      /* floats between score rows (tile_keys rounded up to 16) */
    int accumulator_stride; /* floats between accumulator rows (Dv rounded up to 16) */
    bool prescale_queries;  /* no soft-cap: queries carry the scale, scores are logits */
    bool loop_transforms;   /* soft-cap with additive terms: the loop transforms scores */
} forward_plan;

/* One thread's buffers (64-byte aligned, carved out of one allocation). */
typedef struct forward_workspace {
    float *queries;        /* [group rows][query_stride]: the item's query rows, by head */
    float *packed_keys;    /* kernel-packed K tile */
    float *packed_values;  /* kernel-packed V tile */
    float *value_staging;  /* [tile_keys][Dv]: V tile with never-attended keys zeroed */
    float *scores;         /* [group rows][scores_stride] */
    float *accumulator;    /* [group rows][accumulator_stride] */
    float *row_max;        /* [group rows] */
    float *row_sum;        /* [group rows] */
    float *rescale;        /* [group rows] */
    uint8_t *column_alive; /* [tile_keys]: some row of the tile attends this key */
    attn_tile_class *head_class; /* [group_size] */
    void *allocation;
    /* The first empty row this thread met (for ATTN_EMPTY_ROWS_ERROR). */
    bool has_empty_row;
    int64_t empty_b, empty_h, empty_i;
} forward_workspace;

static size_t round_up_floats(size_t floats) { return (floats + 15) / 16 * 16; }

/* Bytes of one workspace (each part rounded to 64 bytes); false on overflow. */
static bool workspace_layout(const forward_plan *plan, size_t part_bytes[11], size_t *total) {
    const size_t group_rows = (size_t)plan->problem.group_size * (size_t)plan->tile_rows;
    const size_t keys = (size_t)plan->tile_keys;
    const int dim_k = (int)plan->problem.key_dim, dim_v = (int)plan->problem.value_dim;
    size_t floats[9];
    if (!attn_mul_size(group_rows, (size_t)plan->query_stride, &floats[0]) ||
        !attn_mul_size(group_rows, (size_t)plan->scores_stride, &floats[4]) ||
        !attn_mul_size(group_rows, (size_t)plan->accumulator_stride, &floats[5]) ||
        !attn_mul_size(keys, (size_t)dim_v, &floats[3]))
        return false;
    floats[1] = plan->kernels->packed_keys_floats((int)keys, dim_k);
    floats[2] = plan->kernels->packed_values_floats((int)keys, dim_v);
    floats[6] = floats[7] = floats[8] = group_rows;
    *total = 0;
    for (int n = 0; n < 9; ++n) {
        size_t bytes;
        if (!attn_mul_size(round_up_floats(floats[n]), sizeof(float), &bytes)) return false;
        part_bytes[n] = bytes;
    }
    part_bytes[9] = round_up_floats(keys);                                    /* column_alive */
    part_bytes[10] = round_up_floats((size_t)plan->problem.group_size * sizeof(attn_tile_class));
    for (int n = 0; n < 11; ++n)
        if (!attn_add_size(*total, part_bytes[n], total)) return false;
    return true;
}

static bool workspace_create(forward_workspace *workspace, const size_t part_bytes[11],
                             size_t total) {
    memset(workspace, 0, sizeof *workspace);
    char *base = attn_aligned_alloc(total);
    if (base == NULL) return false;
    workspace->allocation = base;
    void *parts[11];
    for (int n = 0; n < 11; ++n) {
        parts[n] = base;
        base += part_bytes[n];
    }
    workspace->queries = parts[0];
    workspace->packed_keys = parts[1];
    workspace->packed_values = parts[2];
    workspace->value_staging = parts[3];
    workspace->scores = parts[4];
    workspace->accumulator = parts[5];
    workspace->row_max = parts[6];
    workspace->row_sum = parts[7];
    workspace->rescale = parts[8];
    workspace->column_alive = parts[9];
    workspace->head_class = parts[10];
    return true;
}

/* Applies the mask and the additive terms to one head's scores, rows [i0, i0 + rows) x keys
 * [j0, j0 + count): scores [rows][scores_stride]. Marks the keys some row attends in
 * column_alive. */
static void apply_mask_to_head(const forward_plan *plan, forward_workspace *workspace,
                               attn_tile_class tile_class, int64_t b, int64_t h, int64_t i0,
                               int64_t rows, int64_t j0, int64_t count, float *scores) {
    const attn_mask_context *mask = &plan->mask;
    const float scale = plan->problem.scale, softcap = plan->options->softcap;
    for (int64_t r = 0; r < rows; ++r) {
        float *row = scores + r * plan->scores_stride;
        for (int64_t c = 0; c < count; ++c) {
            if (tile_class == ATTN_TILE_PARTIAL && !attn_mask_allowed(mask, b, h, i0 + r, j0 + c)) {
                row[c] = -INFINITY;
                continue;
            }
            if (plan->loop_transforms) row[c] = attn_transform_logit(row[c], scale, softcap);
            if (mask->has_additive) {
                const float additive = attn_mask_additive(mask, b, h, i0 + r, j0 + c);
                if (additive == -INFINITY) {
                    row[c] = -INFINITY;
                    continue;
                }
                row[c] += additive;
            }
            workspace->column_alive[c] = 1;
        }
    }
}

/* Records (b, h, i) as an empty row if it precedes the thread's earlier one. */
static void note_empty_row(forward_workspace *workspace, int64_t b, int64_t h, int64_t i) {
    if (workspace->has_empty_row &&
        (b > workspace->empty_b || (b == workspace->empty_b && h > workspace->empty_h) ||
         (b == workspace->empty_b && h == workspace->empty_h && i > workspace->empty_i)))
        return;
    workspace->has_empty_row = true;
    workspace->empty_b = b;
    workspace->empty_h = h;
    workspace->empty_i = i;
}

/* Writes one output row and its LSE: O = acc / l, LSE = m + log l, or the empty-row policy
 * (padding rows beyond query_lengths[b] are always O = 0, LSE = -inf). */
static void write_row(const forward_plan *plan, forward_workspace *workspace, int64_t b,
                      int64_t h, int64_t i, const float *accumulator, float row_max,
                      float row_sum, bool padding) {
    float *o_row = attn_f32_at4(plan->out, b, i, h, 0);
    const int64_t o_stride = plan->out->stride[3];
    float lse_value;
    if (!padding && row_sum != 0.0f) {
        for (int64_t e = 0; e < plan->problem.value_dim; ++e)
            o_row[e * o_stride] = accumulator[e] / row_sum;
        lse_value = row_max + logf(row_sum);
    } else {
        const bool as_nan = !padding && plan->options->empty_rows == ATTN_EMPTY_ROWS_NAN;
        if (!padding && plan->options->empty_rows == ATTN_EMPTY_ROWS_ERROR)
            note_empty_row(workspace, b, h, i);
        for (int64_t e = 0; e < plan->problem.value_dim; ++e) o_row[e * o_stride] = as_nan ? NAN : 0.0f;
        lse_value = as_nan ? NAN : -INFINITY;
    }
    if (plan->lse != NULL) *attn_f32_at3(plan->lse, b, h, i) = lse_value;
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

/* Computes one work item: query rows [i0, i1) of batch b for every head of KV head kv_head. */
static void run_work_item(const forward_plan *plan, forward_workspace *workspace, int64_t item) {
    const attn_kernel_table *kernels = plan->kernels;
    const attn_problem *problem = &plan->problem;
    const attn_mask_context *mask = &plan->mask;
    const int64_t group_size = problem->group_size;
    const int64_t b = item / (problem->kv_heads * plan->query_tiles);
    const int64_t kv_head = item / plan->query_tiles % problem->kv_heads;
    const int64_t tile = item % plan->query_tiles;
    const int64_t i0 = tile * plan->tile_rows;
    const int64_t tile_end = i0 + plan->tile_rows < problem->query_length
                                 ? i0 + plan->tile_rows : problem->query_length;
    const int64_t query_count = attn_mask_query_count(mask, b);
    const int64_t i1 = tile_end < query_count ? tile_end : query_count; /* valid rows end */

    /* Padding rows (i >= query_lengths[b]) are O = 0, LSE = -inf. */
    for (int64_t g = 0; g < group_size; ++g)
        for (int64_t i = (i1 > i0 ? i1 : i0); i < tile_end; ++i)
            write_row(plan, workspace, b, kv_head * group_size + g, i, NULL, 0.0f, 0.0f, true);
    if (i1 <= i0) return;
    const int64_t rows = i1 - i0;
    const int dim_k = (int)problem->key_dim, dim_v = (int)problem->value_dim;

    /* Gather the group's query rows (row g * rows + r = head g, query i0 + r). */
    const float query_factor = plan->prescale_queries ? problem->scale : 1.0f;
    for (int64_t g = 0; g < group_size; ++g)
        for (int64_t r = 0; r < rows; ++r) {
            const float *source = attn_f32_at4(plan->q, b, i0 + r, kv_head * group_size + g, 0);
            float *row = workspace->queries + (g * rows + r) * plan->query_stride;
            for (int d = 0; d < dim_k; ++d) row[d] = source[d * plan->q->stride[3]] * query_factor;
        }
    const int64_t group_rows = group_size * rows;
    for (int64_t n = 0; n < group_rows; ++n) {
        workspace->row_max[n] = -INFINITY;
        workspace->row_sum[n] = 0.0f;
    }
    memset(workspace->accumulator, 0,
           (size_t)group_rows * (size_t)plan->accumulator_stride * sizeof(float));

    const float step_scale = plan->prescale_queries || plan->loop_transforms ? 1.0f : problem->scale;
    const float step_softcap = plan->loop_transforms ? 0.0f : plan->options->softcap;
    int64_t key_begin, key_end;
    attn_mask_candidate_keys(mask, b, i0, i1, &key_begin, &key_end);
    attn_tile_class *classes = workspace->head_class;

    for (int64_t j0 = key_begin / plan->tile_keys * plan->tile_keys; j0 < key_end; j0 += plan->tile_keys) {
        const int64_t j1 = j0 + plan->tile_keys < key_end ? j0 + plan->tile_keys : key_end;
        const int count = (int)(j1 - j0);

        /* Classify the tile for each head; skip it when every head is EMPTY. */
        bool any_work = false, needs_mask_pass = mask->has_additive || plan->loop_transforms;
        for (int64_t g = 0; g < group_size; ++g) {
            classes[g] = mask->has_structure
                             ? attn_mask_classify_tile(mask, b, kv_head * group_size + g, i0, i1, j0, j1)
                             : ATTN_TILE_FULL;
            any_work |= classes[g] != ATTN_TILE_EMPTY;
            needs_mask_pass |= classes[g] == ATTN_TILE_PARTIAL;
        }
        if (!any_work) continue;

        const float *key_source = attn_f32_at4(plan->k, b, j0, kv_head, 0);
        kernels->pack_keys(count, dim_k, key_source, plan->k->stride[1], plan->k->stride[3],
                           workspace->packed_keys);

        /* Scores, then the mask and additive terms, for every non-empty head. */
        bool all_columns_alive = !needs_mask_pass;
        if (needs_mask_pass) memset(workspace->column_alive, 0, (size_t)count);
        for (int64_t run, first = next_head_run(classes, group_size, 0, &run); first < group_size;
             first = next_head_run(classes, group_size, first + run, &run)) {
            kernels->score_tile((int)(run * rows), count, dim_k,
                                workspace->queries + first * rows * plan->query_stride,
                                plan->query_stride, workspace->packed_keys,
                                workspace->scores + first * rows * plan->scores_stride,
                                plan->scores_stride);
        }
        if (needs_mask_pass) {
            for (int64_t g = 0; g < group_size; ++g) {
                if (classes[g] == ATTN_TILE_EMPTY) continue;
                if (classes[g] == ATTN_TILE_FULL && !mask->has_additive && !plan->loop_transforms) {
                    all_columns_alive = true; /* this head attends every key of the tile */
                    continue;
                }
                apply_mask_to_head(plan, workspace, classes[g], b, kv_head * group_size + g, i0,
                                   rows, j0, count, workspace->scores + g * rows * plan->scores_stride);
            }
        }

        /* Online softmax: probabilities in place of the scores, rescale the accumulators. */
        for (int64_t run, first = next_head_run(classes, group_size, 0, &run); first < group_size;
             first = next_head_run(classes, group_size, first + run, &run)) {
            const int64_t offset = first * rows;
            kernels->softmax_step((int)(run * rows), count,
                                  workspace->scores + offset * plan->scores_stride,
                                  plan->scores_stride, step_scale, step_softcap,
                                  workspace->row_max + offset, workspace->row_sum + offset,
                                  workspace->rescale + offset);
            kernels->scale_rows((int)(run * rows), dim_v, workspace->rescale + offset,
                                workspace->accumulator + offset * plan->accumulator_stride,
                                plan->accumulator_stride);
        }

        /* Pack V once for the group. Keys no row attends are zeroed first, so that NaN or
         * inf in never-attended values cannot leak in as 0 * NaN. */
        const float *value_source = attn_f32_at4(plan->v, b, j0, kv_head, 0);
        int64_t value_token_stride = plan->v->stride[1], value_dim_stride = plan->v->stride[3];
        bool some_column_dead = false;
        if (!all_columns_alive)
            for (int c = 0; c < count; ++c) some_column_dead |= workspace->column_alive[c] == 0;
        if (some_column_dead) {
            for (int c = 0; c < count; ++c) {
                float *staged = workspace->value_staging + (size_t)c * dim_v;
                const float *source_row = value_source + c * value_token_stride;
                for (int e = 0; e < dim_v; ++e)
                    staged[e] = workspace->column_alive[c] ? source_row[e * value_dim_stride] : 0.0f;
            }
            value_source = workspace->value_staging;
            value_token_stride = dim_v;
            value_dim_stride = 1;
        }
        kernels->pack_values(count, dim_v, value_source, value_token_stride, value_dim_stride,
                             workspace->packed_values);
        for (int64_t run, first = next_head_run(classes, group_size, 0, &run); first < group_size;
             first = next_head_run(classes, group_size, first + run, &run)) {
            const int64_t offset = first * rows;
            kernels->accumulate_values((int)(run * rows), count, dim_v,
                                       workspace->scores + offset * plan->scores_stride,
                                       plan->scores_stride, workspace->packed_values,
                                       workspace->accumulator + offset * plan->accumulator_stride,
                                       plan->accumulator_stride);
        }
    }

    for (int64_t g = 0; g < group_size; ++g)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t n = g * rows + r;
            write_row(plan, workspace, b, kv_head * group_size + g, i0 + r,
                      workspace->accumulator + n * plan->accumulator_stride,
                      workspace->row_max[n], workspace->row_sum[n], false);
        }
}

static int64_t clamp_tile(int64_t requested, int64_t fallback, int64_t limit) {
    int64_t tile = requested > 0 ? requested : fallback;
    if (tile < 1) tile = 1;
    return tile < limit ? tile : limit;
}

attn_status attn_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                         const attn_options *options, attn_tensor *out, attn_tensor *lse,
                         attn_error *error) {
    forward_plan plan;
    memset(&plan, 0, sizeof plan);
    attn_status status = attn_validate_call(q, k, v, options, out, lse, &plan.problem, error);
    if (status != ATTN_OK) return status;
    status = attn_select_kernels(options->kernel, &plan.kernels, error);
    if (status != ATTN_OK) return status;
    plan.q = q;
    plan.k = k;
    plan.v = v;
    plan.out = out;
    plan.lse = lse;
    plan.options = options;
    const attn_problem *problem = &plan.problem;

    /* Tiles: by default about kernels->tile_q rows per item in total over the group's heads. */
    int64_t default_rows = plan.kernels->tile_q / problem->group_size;
    if (default_rows < 16) default_rows = 16;
    plan.tile_rows = clamp_tile(options->tile_q, default_rows, problem->query_length);
    plan.tile_keys = clamp_tile(options->tile_k, plan.kernels->tile_k, problem->key_length);
    plan.query_tiles = (problem->query_length + plan.tile_rows - 1) / plan.tile_rows;
    plan.query_stride = (int)round_up_floats((size_t)problem->key_dim);
    plan.scores_stride = (int)round_up_floats((size_t)plan.tile_keys);
    plan.accumulator_stride = (int)round_up_floats((size_t)problem->value_dim);
    plan.prescale_queries = options->softcap == 0.0f;
    plan.loop_transforms = options->softcap > 0.0f && (options->bias != NULL || options->alibi);

    int64_t item_count;
    if (!attn_mul_i64(problem->batch, problem->kv_heads, &item_count) ||
        !attn_mul_i64(item_count, plan.query_tiles, &item_count))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "B x Hkv x query tiles overflows int64");
    int thread_count = attn_thread_count(options->num_threads);
    if (thread_count > item_count) thread_count = (int)item_count;

    /* Working memory: one workspace per thread, checked against the caller's limit. */
    size_t part_bytes[11], workspace_bytes, total_bytes;
    if (!workspace_layout(&plan, part_bytes, &workspace_bytes) ||
        !attn_mul_size(workspace_bytes, (size_t)thread_count, &total_bytes))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "working memory for Dk = %lld, Dv = %lld, group size %lld overflows",
                         (long long)problem->key_dim, (long long)problem->value_dim,
                         (long long)problem->group_size);
    if (options->memory_limit_bytes > 0 && total_bytes > options->memory_limit_bytes)
        return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                         "options.memory_limit_bytes = %zu: attn_forward needs %zu bytes of "
                         "working memory (%d threads x %zu)",
                         options->memory_limit_bytes, total_bytes, thread_count, workspace_bytes);

    status = attn_mask_context_init(&plan.mask, options, problem, error);
    if (status != ATTN_OK) return status;
    forward_workspace *workspaces = calloc((size_t)thread_count, sizeof *workspaces);
    bool allocated = workspaces != NULL;
    for (int t = 0; allocated && t < thread_count; ++t)
        allocated = workspace_create(&workspaces[t], part_bytes, workspace_bytes);
    if (!allocated) {
        if (workspaces != NULL)
            for (int t = 0; t < thread_count; ++t) attn_aligned_free(workspaces[t].allocation);
        free(workspaces);
        attn_mask_context_free(&plan.mask);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "attn_forward: %d workspaces of %zu bytes", thread_count, workspace_bytes);
    }

#pragma omp parallel for schedule(static) num_threads(thread_count)
    for (int64_t item = 0; item < item_count; ++item) {
#ifdef _OPENMP
        forward_workspace *workspace = &workspaces[omp_get_thread_num()];
#else
        forward_workspace *workspace = &workspaces[0];
#endif
        run_work_item(&plan, workspace, item);
    }

    /* The first empty row in (b, h, i) order over all threads. */
    forward_workspace *first_empty = NULL;
    for (int t = 0; t < thread_count; ++t) {
        forward_workspace *w = &workspaces[t];
        if (!w->has_empty_row) continue;
        if (first_empty == NULL || w->empty_b < first_empty->empty_b ||
            (w->empty_b == first_empty->empty_b &&
             (w->empty_h < first_empty->empty_h ||
              (w->empty_h == first_empty->empty_h && w->empty_i < first_empty->empty_i))))
            first_empty = w;
    }
    if (first_empty != NULL)
        status = attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                           "query row b = %lld, h = %lld, i = %lld has no allowed key "
                           "(options.empty_rows = ERROR; use ZERO or NAN to accept it)",
                           (long long)first_empty->empty_b, (long long)first_empty->empty_h,
                           (long long)first_empty->empty_i);

    for (int t = 0; t < thread_count; ++t) attn_aligned_free(workspaces[t].allocation);
    free(workspaces);
    attn_mask_context_free(&plan.mask);
    return status;
}
