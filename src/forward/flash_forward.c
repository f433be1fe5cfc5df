/*
 * flash_forward.c — attn_forward: exact attention, FlashAttention-2 style, on the CPU.
 *
 * Work is split into items (b, kv_head, query tile). An item holds the query rows of every
 * head of the GQA group (group_size heads x tile rows), walks the key tiles that the mask's
 * band allows in increasing order and keeps the online-softmax state (row max m, row sum l,
 * unnormalised accumulator) per row:
 *   EMPTY tile (per head): skipped, nothing loaded or computed for that head
 *   FULL tile:             scores, softmax step, accumulate; no per-element mask work
 *   PARTIAL tile:          the mask applied row by row (an interval for causal / window)
 * The item's last key tile (the causal diagonal) is done in chunks of rows, each only up to
 * the last key those rows may attend. A sliding window over a pure band (lengths, causal,
 * window: each row's keys are one interval) takes the band path instead: chunks of 16 rows,
 * each over only the key tiles its rows' intervals touch, with one softmax step per span of
 * keys and the mask applied as two bounds per row (forward_compute_span, forward_tile.c).
 * Finally O = acc / l and LSE = m + log l. All arithmetic on tiles goes through the kernel
 * registry (kernels/registry.h); one tile step is forward_tile.c.
 *
 * K and V are packed once per (b, KV head) into a store of packed tiles (packed_kv.h) that
 * every query tile and every query head of the GQA group then reads. Three ways to hold it
 * (choose_packing), all giving the same packed bytes and so the same results:
 *   PACK_PER_THREAD: each thread keeps the packed K/V of the head it works on and packs
 *     tiles lazily on first use; all items run in one dynamically scheduled loop, with no
 *     barrier until the end (robust when the cores are shared). Used when the threads'
 *     stores together stay small next to K and V themselves.
 *   PACK_SHARED: one store; heads one after the other, the threads first pack the head's
 *     tiles together, then share out its query tiles (two barriers per head). Used when
 *     per-thread copies would cost too much memory (few KV heads, many threads).
 *   PACK_ONE_TILE: under a tight execution.memory_limit_bytes, each thread repacks one tile
 *     per use.
 * Items (b, KV head, query tile) are handed out dynamically in order, query tiles of a head
 * last-first (causal: the longest rows first), so the threads get equal work. The band path
 * gives each thread a region of consecutive items instead, walked from its front, so that a
 * thread packs only the keys near its rows, and a thread whose region is done takes half of
 * the fullest region's rest from its back; with per-thread packing it keeps a ring of
 * packed tiles per KV head (whenever the rings are smaller than one head's store) and takes
 * items in (b, query tile, KV head) order. Each output
 * row is produced by exactly one item, whose arithmetic does not depend on which thread runs
 * it, so the result is bitwise identical for any thread count. Working memory: O(tile) per
 * thread plus the packed K/V above; nothing of size Tq x Tk is ever allocated.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "../call/call.h"
#include "../core/internal.h"
#include "../core/parallel.h"
#include "forward_small.h"
#include "../kernels/registry.h"
#include "../mask/mask.h"
#include "../mask/sinks.h"
#include "forward_internal.h"
#include "packed_kv.h"

/*
 * Default tile sizes, for a core's 32 KiB L1d and 1 MiB L2 as below (docs/performance.md,
 * "The loop"; the CPU they are tuned on: bench/results/amd-zen4.md, "Forward, fp32"):
 *  - query rows per head: 256 / group_size clamped to [16, 64] ([16, 256] on 16-bit tiles
 *    outside a window, with 256 keys per tile causal or not: FORWARD_TILES16_MAX_ROWS). With
 *    K/V packed once per head, large query tiles save no packing (128 rows are no
 *    faster than 64 without a mask); 64 rows keep the causal diagonal cheap (a diagonal tile
 *    wastes at most half of 64 x 64 pairs) and the score tile of a whole group (<= 256 rows x
 *    256 keys = 256 KiB) inside L2.
 *  - keys per tile: 256 without a window, causal too (faster than 128, and 512 no better:
 *    the per-tile softmax bookkeeping and the rescale of the accumulators are amortised over
 *    more keys, and a 64 x 256 score tile, 64 KiB, stays in L2; the causal diagonal costs no
 *    more, as its tile is computed in row chunks up to each chunk's last key), 64 with a
 *    window (finer band edges: faster than 128 for a window of 256).
 */
/* Per-thread stores are used while all of them together take at most half the bytes of K
 * and V, or at most this much. */
#define FORWARD_PER_THREAD_PACKING_BYTES ((size_t)16 << 20)

enum {
    FORWARD_GROUP_ROWS = 256,     /* target rows per item over the group's heads */
    FORWARD_MIN_ROWS = 16,        /* rows per head, lower bound */
    FORWARD_MAX_ROWS = 64,        /* rows per head, upper bound */
    /* On 16-bit tiles (AMX), causal or not (windows keep the sizes above): up to 256 query
     * rows per head and 256 keys per tile. The tile multiplies are so fast there that
     * streaming a head's packed K/V through L2 once per query tile (flops per byte = rows per
     * item) and the accumulator's tile loads and stores per key tile (four times as many on
     * 64 keys as on 256) limit the step. Causal calls at long T gain most, non-causal ones
     * lose nothing (bench/results/intel-xeon-amx.md, "Forward, bf16 on AMX tiles"). */
    FORWARD_TILES16_MAX_ROWS = 256,
    FORWARD_KEYS = 256,           /* keys per tile without a window */
    FORWARD_BANDED_KEYS = 64,     /* keys per tile under a window (off the band path) */
    /* The last key tile of an item (the causal diagonal) is computed in row chunks of this
     * many rows, each only up to the last key its rows may attend. */
    FORWARD_DIAGONAL_ROWS = 16,
    /* The band path (forward_internal.h): keys per packed tile, rows per chunk, most keys of
     * one step. */
    FORWARD_SPAN_TILE_KEYS = 32,
    FORWARD_SPAN_ROWS = 16,
    FORWARD_SPAN_KEYS = 1024
};

static size_t round_up_floats(size_t floats) { return (floats + 15) / 16 * 16; }

/* Bytes of each part of one workspace (each rounded to 64 bytes) and their total, without
 * the packed K/V store; false on overflow. */
static bool workspace_layout(const forward_plan *plan, size_t part_bytes[WORKSPACE_PARTS],
                             size_t *total) {
    const size_t group_rows = (size_t)plan->call->problem.group_size * (size_t)plan->tile_rows;
    const size_t keys = (size_t)plan->tile_keys;
    const int dim_v = (int)plan->call->problem.value_dim;
    size_t floats[9];
    size_t span_scores = 0;
    if (plan->span_path &&
        !attn_mul_size((size_t)plan->call->problem.group_size * (size_t)plan->span_rows,
                       (size_t)plan->span_stride, &span_scores))
        return false;
    if (!attn_mul_size(group_rows, (size_t)plan->query_stride, &floats[0]) ||
        !attn_mul_size(group_rows, (size_t)plan->scores_stride, &floats[1]) ||
        !attn_mul_size(group_rows, (size_t)plan->accumulator_stride, &floats[2]) ||
        !attn_mul_size(keys, (size_t)dim_v, &floats[6]))
        return false;
    /* 16-bit K/V: value_staging also stages the conversion of a K or V tile (packed_kv.c). */
    if (plan->format.dtype != ATTN_DTYPE_F32 && plan->call->problem.key_dim > dim_v &&
        !attn_mul_size(keys, (size_t)plan->call->problem.key_dim, &floats[6]))
        return false;
    if (span_scores > floats[1]) floats[1] = span_scores;
    floats[3] = floats[4] = floats[5] = group_rows;
    floats[7] = packed_kv_value_floats(&plan->format, (int)keys, dim_v);
    floats[8] = (size_t)plan->step_keys;
    *total = 0;
    for (int n = 0; n < 9; ++n) {
        size_t bytes;
        if (!attn_mul_size(round_up_floats(floats[n]), sizeof(float), &bytes)) return false;
        part_bytes[n] = bytes;
    }
    part_bytes[9] = round_up_floats((size_t)plan->step_keys);                 /* row_allowed */
    part_bytes[10] = round_up_floats((size_t)plan->step_keys);                /* column_alive */
    part_bytes[11] = round_up_floats((size_t)plan->call->problem.group_size * sizeof(attn_tile_class));
    part_bytes[12] = round_up_floats((size_t)plan->call->problem.group_size * sizeof(row_segment));
    for (int n = 0; n < WORKSPACE_PARTS; ++n)
        if (!attn_add_size(*total, part_bytes[n], total)) return false;
    return true;
}

/* Carves one thread's workspace out of its part of the call's arena: the parts of
 * workspace_layout, then (per-thread and one-tile packing) its store of packed K/V at
 * `store_offset` bytes. */
static void workspace_carve(forward_workspace *workspace, const forward_plan *plan,
                            const size_t part_bytes[WORKSPACE_PARTS], size_t store_offset,
                            char *base) {
    packed_kv_store *head_stores = workspace->head_stores; /* set by the caller */
    memset(workspace, 0, sizeof *workspace);
    workspace->head_stores = head_stores;
    char *store_memory = base + store_offset;
    void *parts[WORKSPACE_PARTS];
    for (int n = 0; n < WORKSPACE_PARTS; ++n) {
        parts[n] = base;
        base += part_bytes[n];
    }
    workspace->queries = parts[0];
    workspace->scores = parts[1];
    workspace->accumulator = parts[2];
    workspace->row_max = parts[3];
    workspace->row_sum = parts[4];
    workspace->rescale = parts[5];
    workspace->value_staging = parts[6];
    workspace->staged_values = parts[7];
    workspace->row_additive = parts[8];
    workspace->row_allowed = parts[9];
    workspace->column_alive = parts[10];
    workspace->head_class = parts[11];
    workspace->segments = parts[12];
    if (plan->packing == PACK_SHARED) return;
    if (plan->span_ring > 0) {
        for (int64_t h = 0; h < plan->call->problem.kv_heads; ++h)
            packed_kv_store_init(&workspace->head_stores[h], &plan->format, (int)plan->tile_keys,
                                 (int)plan->call->problem.key_dim,
                                 (int)plan->call->problem.value_dim, plan->span_ring,
                                 store_memory + (size_t)h * plan->span_ring_bytes);
        return;
    }
    packed_kv_store_init(&workspace->packed, &plan->format, (int)plan->tile_keys,
                         (int)plan->call->problem.key_dim, (int)plan->call->problem.value_dim,
                         plan->packing == PACK_PER_THREAD ? plan->key_tiles : 1, store_memory);
}

/* Writes one output row and its LSE: O = acc / l, LSE = m + log l, or the empty-row policy
 * (padding rows beyond query_lengths[b] are always O = 0, LSE = -inf); then the head's sink. row: the row's
 * accumulator (overwritten with O), or for padding rows any Dv floats to use as scratch. */
static void write_row(const forward_plan *plan, forward_workspace *workspace, int64_t b,
                      int64_t h, int64_t i, float *row, float row_max, float row_sum,
                      bool padding) {
    const int64_t dim_v = plan->call->problem.value_dim;
    float lse_value;
    if (!padding && row_sum != 0.0f) {
        for (int64_t e = 0; e < dim_v; ++e) row[e] = row[e] / row_sum;
        lse_value = row_max + logf(row_sum);
    } else {
        const bool as_nan = !padding && plan->call->options.empty_rows == ATTN_EMPTY_ROWS_NAN;
        if (!padding && plan->call->options.empty_rows == ATTN_EMPTY_ROWS_ERROR)
            forward_row_mark_note(&workspace->empty_row, b, h, i);
        for (int64_t e = 0; e < dim_v; ++e) row[e] = as_nan ? NAN : 0.0f;
        lse_value = as_nan ? NAN : -INFINITY;
    }
    if (!padding && plan->call->options.sinks != NULL) { /* mask/sinks.h */
        const float factor = attn_sink_fold(&lse_value, attn_sink_logit(&plan->call->options, h));
        for (int64_t e = 0; e < dim_v; ++e) row[e] *= factor;
    }
    forward_store_output(plan, workspace, b, i, h, row);
    if (plan->lse != NULL) *attn_f32_at3(plan->lse, b, h, i) = lse_value;
}

/* The band path of a work item (rows [i0, i0 + rows) of batch b, KV head kv_head): row chunks,
 * each walking the key tiles its rows' intervals touch, span_keys at a time
 * (forward_compute_span). */
static void run_spans(const forward_plan *plan, forward_workspace *workspace, int64_t b,
                      int64_t kv_head, int64_t i0, int64_t rows) {
    for (int64_t r0 = 0; r0 < rows; r0 += plan->span_rows) {
        const int64_t r1 = r0 + plan->span_rows < rows ? r0 + plan->span_rows : rows;
        int64_t chunk_begin, chunk_end;
        attn_mask_candidate_keys(&plan->call->mask, b, i0 + r0, i0 + r1, &chunk_begin, &chunk_end);
        const int64_t tiles_per_step = plan->span_keys / plan->tile_keys;
        for (int64_t key_tile = chunk_begin / plan->tile_keys;
             key_tile * plan->tile_keys < chunk_end; key_tile += tiles_per_step) {
            int64_t last = key_tile + tiles_per_step - 1;
            if ((last + 1) * plan->tile_keys > chunk_end) last = (chunk_end - 1) / plan->tile_keys;
            const span_step step = {b, kv_head, i0, rows, r0, r1, key_tile, last, chunk_end};
            forward_compute_span(plan, workspace, &step);
        }
    }
}

/* Computes one work item: query tile `tile` (rows [i0, i1)) of batch b for every query head
 * of KV head kv_head. */
static void run_work_item(const forward_plan *plan, forward_workspace *workspace, int64_t b,
                          int64_t kv_head, int64_t tile) {
    const attn_problem *problem = &plan->call->problem;
    const attn_mask_context *mask = &plan->call->mask;
    const int64_t group_size = problem->group_size;
    const int64_t i0 = tile * plan->tile_rows;
    const int64_t tile_end = i0 + plan->tile_rows < problem->query_length
                                 ? i0 + plan->tile_rows : problem->query_length;
    const int64_t query_count = attn_mask_query_count(mask, b);
    const int64_t i1 = tile_end < query_count ? tile_end : query_count; /* valid rows end */

    /* Padding rows (i >= query_lengths[b]) are O = 0, LSE = -inf. */
    for (int64_t g = 0; g < group_size; ++g)
        for (int64_t i = (i1 > i0 ? i1 : i0); i < tile_end; ++i)
            write_row(plan, workspace, b, kv_head * group_size + g, i, workspace->accumulator,
                      0.0f, 0.0f, true);
    if (i1 <= i0) return;
    const int64_t rows = i1 - i0;

    /* Gather the group's query rows (row g * rows + r = head g, query i0 + r). */
    const float query_factor = plan->prescale_queries ? problem->scale : 1.0f;
    for (int64_t g = 0; g < group_size; ++g)
        for (int64_t r = 0; r < rows; ++r)
            forward_gather_query(plan, b, i0 + r, kv_head * group_size + g, query_factor,
                                 workspace->queries + (g * rows + r) * plan->query_stride);
    const int64_t group_rows = group_size * rows;
    for (int64_t n = 0; n < group_rows; ++n) {
        workspace->row_max[n] = -INFINITY;
        workspace->row_sum[n] = 0.0f;
    }
    memset(workspace->accumulator, 0,
           (size_t)group_rows * (size_t)plan->accumulator_stride * sizeof(float));

    const int64_t key_count = attn_mask_key_count(mask, b);
    int64_t key_begin, key_end;
    attn_mask_candidate_keys(mask, b, i0, i1, &key_begin, &key_end);
    attn_tile_class *classes = workspace->head_class;

    if (plan->span_path) {
        run_spans(plan, workspace, b, kv_head, i0, rows);
        key_end = key_begin; /* done: skip the tile loop */
    }

    for (int64_t key_tile = key_begin / plan->tile_keys; key_tile * plan->tile_keys < key_end;
         ++key_tile) {
        const int64_t j0 = key_tile * plan->tile_keys;
        const int64_t j1 = j0 + plan->tile_keys < key_end ? j0 + plan->tile_keys : key_end;

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

        /* The tile packed for the whole head; its first `count` keys are ours (prefix). */
        const packed_kv_tile *packed =
            plan->packing == PACK_SHARED
                ? &plan->shared_packed->slot[key_tile]
                : packed_kv_get(&workspace->packed, plan->k, plan->v, b, kv_head, key_tile,
                                key_count, workspace->value_staging);
        const int count = (int)(j1 - j0) < packed->count ? (int)(j1 - j0) : packed->count;
        tile_step step = {b, kv_head, i0, rows, 0, rows, j0, count, needs_mask_pass, packed};
        if (j1 < key_end || rows <= FORWARD_DIAGONAL_ROWS || !mask->has_structure) {
            forward_compute_tile(plan, workspace, &step);
            continue;
        }
        /* The last tile: row chunks, each up to the last key one of its rows may attend (a
         * prefix of the packed tile); masked columns beyond it would add exact zeros. */
        for (int64_t r0 = 0; r0 < rows; r0 += FORWARD_DIAGONAL_ROWS) {
            const int64_t r1 = r0 + FORWARD_DIAGONAL_ROWS < rows ? r0 + FORWARD_DIAGONAL_ROWS : rows;
            int64_t chunk_begin, chunk_end;
            attn_mask_candidate_keys(mask, b, i0 + r0, i0 + r1, &chunk_begin, &chunk_end);
            const int64_t chunk_count = chunk_end - j0 < count ? chunk_end - j0 : count;
            if (chunk_count <= 0) continue; /* no key of this tile: the rows' state is unchanged */
            step.first_row = r0;
            step.end_row = r1;
            step.count = (int)chunk_count;
            forward_compute_tile(plan, workspace, &step);
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

/* Chooses the tile sizes (see the defaults at the top) and the strides. */
static void choose_tiles(forward_plan *plan) {
    const attn_problem *problem = &plan->call->problem;
    const attn_options *options = (&plan->call->options);
    const attn_execution *execution = (&plan->call->execution);
    /* A window narrows the band only when it is shorter than every possible distance. */
    const bool windowed =
        attn_mask_window_narrows(options, problem->query_length, problem->key_length);
    /* 16-bit tiles (AMX) outside a window: larger query and key tiles (see the enum). */
    const bool large_tiles = plan->format.bf16_tiles && !windowed;
    const int64_t max_rows = large_tiles ? FORWARD_TILES16_MAX_ROWS : FORWARD_MAX_ROWS;
    int64_t default_rows = FORWARD_GROUP_ROWS / problem->group_size;
    if (default_rows < FORWARD_MIN_ROWS) default_rows = FORWARD_MIN_ROWS;
    if (default_rows > max_rows) default_rows = max_rows;
    /* The band path: a pure band (lengths, causal, window) with a window narrower than the
     * sequences. */
    plan->span_path = windowed && attn_mask_is_band(options);
    plan->tile_rows = clamp_tile(execution->tile_q, default_rows, problem->query_length);
    plan->tile_keys = clamp_tile(execution->tile_k,
                                 plan->span_path ? FORWARD_SPAN_TILE_KEYS
                                 : windowed && !large_tiles ? FORWARD_BANDED_KEYS
                                                 : FORWARD_KEYS,
                                 problem->key_length);
    plan->query_tiles = (problem->query_length + plan->tile_rows - 1) / plan->tile_rows;
    plan->key_tiles = (problem->key_length + plan->tile_keys - 1) / plan->tile_keys;
    plan->query_stride = (int)round_up_floats((size_t)problem->key_dim);
    plan->scores_stride = (int)round_up_floats((size_t)plan->tile_keys);
    plan->step_keys = plan->tile_keys;
    if (plan->span_path) {
        plan->span_rows = plan->tile_rows < FORWARD_SPAN_ROWS ? plan->tile_rows : FORWARD_SPAN_ROWS;
        /* The band of a chunk: its rows' window plus the chunk and a tile of slack. */
        int64_t left, right;
        attn_mask_band_sides(options, problem->query_length, problem->key_length, &left, &right);
        int64_t band = left + right + 1 + plan->span_rows + plan->tile_keys;
        if (band > FORWARD_SPAN_KEYS) band = FORWARD_SPAN_KEYS;
        int64_t tiles = (band + plan->tile_keys - 1) / plan->tile_keys;
        if (tiles > FORWARD_SPAN_TILES) tiles = FORWARD_SPAN_TILES;
        if (tiles > plan->key_tiles) tiles = plan->key_tiles;
        plan->span_keys = tiles * plan->tile_keys;
        plan->span_stride = (int)round_up_floats((size_t)plan->span_keys);
        plan->step_keys = plan->span_keys;
    }
    plan->accumulator_stride = (int)round_up_floats((size_t)problem->value_dim);
}

/*
 * Chooses how packed K/V are held (see the top of the file) and sizes the working memory of
 * the call: each thread's part of the arena (*workspace_bytes: the parts of workspace_layout,
 * *parts_bytes of them rounded to 64, then its packed store for PACK_PER_THREAD /
 * PACK_ONE_TILE) and the shared part (*shared_bytes: the store of PACK_SHARED). The roomiest
 * choice that fits execution.memory_limit_bytes is taken; when not even PACK_ONE_TILE fits,
 * attn_call_reserve refuses the call.
 */
static attn_status choose_packing(forward_plan *plan, int thread_count,
                                  size_t part_bytes[WORKSPACE_PARTS], size_t *parts_bytes,
                                  size_t *workspace_bytes, size_t *shared_bytes,
                                  attn_error *error) {
    const attn_problem *problem = &plan->call->problem;
    const size_t limit = plan->call->execution.memory_limit_bytes;
    const int tile_keys = (int)plan->tile_keys, dim_k = (int)problem->key_dim,
              dim_v = (int)problem->value_dim;
    size_t parts, one_tile, one_tile_part, one_tile_total;
    if (!workspace_layout(plan, part_bytes, &parts) || !attn_call_round_bytes(parts, &parts) ||
        !packed_kv_store_bytes(&plan->format, tile_keys, dim_k, dim_v, 1, &one_tile) ||
        !attn_add_size(parts, one_tile, &one_tile_part) ||
        !attn_call_round_bytes(one_tile_part, &one_tile_part) ||
        !attn_mul_size(one_tile_part, (size_t)thread_count, &one_tile_total))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "working memory for Dk = %lld, Dv = %lld, group size %lld overflows",
                         (long long)problem->key_dim, (long long)problem->value_dim,
                         (long long)problem->group_size);
    *parts_bytes = parts;
    plan->packing = PACK_ONE_TILE;
    *workspace_bytes = one_tile_part;
    *shared_bytes = 0;
    if (limit > 0 && one_tile_total > limit) return ATTN_OK; /* refused by the reserve */

    size_t head_store, workspaces, shared_total, per_thread_part, per_thread_total,
        per_thread_stores, key_value_bytes;
    if (!packed_kv_store_bytes(&plan->format, tile_keys, dim_k, dim_v, plan->key_tiles, &head_store) ||
        !attn_mul_size(parts, (size_t)thread_count, &workspaces) ||
        !attn_add_size(workspaces, head_store, &shared_total) ||
        !attn_add_size(parts, head_store, &per_thread_part) ||
        !attn_call_round_bytes(per_thread_part, &per_thread_part) ||
        !attn_mul_size(per_thread_part, (size_t)thread_count, &per_thread_total) ||
        !attn_mul_size(head_store, (size_t)thread_count, &per_thread_stores) ||
        !attn_mul_size((size_t)(problem->batch * problem->key_length * problem->kv_heads),
                       (size_t)(dim_k + dim_v) * attn_dtype_size(plan->format.dtype),
                       &key_value_bytes))
        return ATTN_OK; /* huge: repack per use */
    const bool per_thread_is_cheap = per_thread_stores <= key_value_bytes / 2 ||
                                     per_thread_stores <= FORWARD_PER_THREAD_PACKING_BYTES;
    /* The span path: a ring of tiles per KV head and thread, whenever the rings take less
     * than one head's store (they hold a band, not a head: small whatever Tk and the thread
     * count, so they are preferred to a shared store as well). */
    const int64_t ring = plan->span_keys / plan->tile_keys + plan->tile_rows / plan->tile_keys + 2;
    size_t ring_bytes, rings, ring_part, ring_total;
    if (plan->span_path && ring < plan->key_tiles &&
        packed_kv_store_bytes(&plan->format, tile_keys, dim_k, dim_v, ring, &ring_bytes) &&
        attn_call_round_bytes(ring_bytes, &ring_bytes) &&
        attn_mul_size(ring_bytes, (size_t)problem->kv_heads, &rings) && rings <= head_store &&
        attn_add_size(parts, rings, &ring_part) &&
        attn_mul_size(ring_part, (size_t)thread_count, &ring_total) &&
        (limit == 0 || ring_total <= limit)) {
        plan->packing = PACK_PER_THREAD;
        plan->span_ring = ring;
        plan->span_ring_bytes = ring_bytes;
        *workspace_bytes = ring_part;
    } else if (per_thread_is_cheap && (limit == 0 || per_thread_total <= limit)) {
        plan->packing = PACK_PER_THREAD;
        *workspace_bytes = per_thread_part;
    } else if (limit == 0 || shared_total <= limit) {
        plan->packing = PACK_SHARED;
        *workspace_bytes = parts;
        *shared_bytes = head_store;
    }
    return ATTN_OK;
}

/* A work item: query tile `tile` of batch b, every query head of KV head kv_head. */
typedef struct work_item { int64_t b, kv_head, tile; } work_item;

/* Item number `item` of the band path's order: (b, query tile, KV head) with rings of
 * packed tiles per KV head (the rows of every head at the same tokens, one page of a
 * [B, T, H, D] tensor, are read together), else (b, KV head, query tile). */
static work_item span_item(const forward_plan *plan, int64_t item) {
    const int64_t kv_heads = plan->call->problem.kv_heads, tiles = plan->query_tiles;
    if (plan->span_ring > 0)
        return (work_item){item / (tiles * kv_heads), item % kv_heads, item / kv_heads % tiles};
    return (work_item){item / tiles / kv_heads, item / tiles % kv_heads, item % tiles};
}

/* The band path's next run for thread `self` (see run_span_worker): items [*first, *end) of its
 * own region's front, or else of the back of the region with the most items left; an empty
 * run when every region is done. The regions' bounds are shared (plan->span_regions), so
 * they change under one lock; which thread runs an item never changes its result. */
static void span_take(const forward_plan *plan, int64_t self, int64_t *first, int64_t *end) {
    int64_t(*regions)[2] = plan->span_regions;
    const int64_t count = plan->call->threads;
    pthread_mutex_lock((pthread_mutex_t *)plan->span_lock);
    {
        int64_t *own = regions[self];
        if (own[0] < own[1]) {
            *first = own[0];
            *end = own[1] - own[0] > plan->items_per_chunk ? own[0] + plan->items_per_chunk
                                                           : own[1];
            own[0] = *end;
        } else {
            int64_t fullest = -1, most = 0;
            for (int64_t r = 0; r < count; ++r)
                if (regions[r][1] - regions[r][0] > most) {
                    most = regions[r][1] - regions[r][0];
                    fullest = r;
                }
            if (fullest >= 0) {
                const int64_t taken = most / 2 > 0 ? most / 2 : 1;
                *end = regions[fullest][1];
                *first = *end - taken;
                regions[fullest][1] = *first;
            }
        }
    }
    pthread_mutex_unlock((pthread_mutex_t *)plan->span_lock);
}

/* One region of the forward: the plan, every worker's workspace, and the shared counters. */
typedef struct forward_region {
    const forward_plan *plan;
    forward_workspace *workspaces; /* [threads] */
    const attn_tensor *k, *v;
    int64_t next_item;             /* the next (batch, KV head, query tile) item to claim */
    int64_t head;                  /* PACK_SHARED: the (batch, KV head) being run */
} forward_region;

/* The band path: runs of consecutive items, ascending, so that a worker packs only the key
 * tiles near its own rows (workers taking alternate tiles would each pack the whole head). The
 * items are cut into one region per worker; each walks its own region from the front,
 * plan->items_per_chunk items at a time (its rings still hold the band: nothing is repacked),
 * and when it is done takes half of what is left of the fullest region from its back, until
 * nothing is left; a worker that never starts leaves its region to the others. */
static void run_span_worker(forward_region *region, int worker) {
    const forward_plan *plan = region->plan;
    for (;;) {
        int64_t first = 0, end = 0;
        span_take(plan, worker, &first, &end);
        if (first >= end) return;
        for (int64_t item = first; item < end; ++item) {
            const work_item this_one = span_item(plan, item);
            run_work_item(plan, &region->workspaces[worker], this_one.b, this_one.kv_head,
                          this_one.tile);
        }
    }
}

/* Each worker packs its own K/V tiles: items (batch, KV head, query tile), the longest query
 * tiles of a head first. */
static void run_items_worker(void *context, int worker) {
    forward_region *region = context;
    const forward_plan *plan = region->plan;
    if (plan->span_path) {
        run_span_worker(region, worker);
        return;
    }
    const attn_problem *problem = &plan->call->problem;
    const int64_t item_count = problem->batch * problem->kv_heads * plan->query_tiles;
    for (int64_t item; (item = attn_parallel_claim(&region->next_item)) < item_count;) {
        const int64_t head = item / plan->query_tiles;
        run_work_item(plan, &region->workspaces[worker], head / problem->kv_heads,
                      head % problem->kv_heads, plan->query_tiles - 1 - item % plan->query_tiles);
    }
}

/* PACK_SHARED: the key tiles [first, end) of the current head into the shared store. */
static void pack_shared_tiles(void *context, int64_t first, int64_t end, int worker) {
    forward_region *region = context;
    const forward_plan *plan = region->plan;
    const attn_problem *problem = &plan->call->problem;
    const int64_t b = region->head / problem->kv_heads, kv_head = region->head % problem->kv_heads;
    const int64_t key_count = attn_mask_key_count(&plan->call->mask, b);
    for (int64_t key_tile = first; key_tile < end; ++key_tile)
        packed_kv_pack_tile(plan->shared_packed, region->k, region->v, b, kv_head, key_tile,
                            key_count, region->workspaces[worker].value_staging);
}

/* PACK_SHARED: the query tiles [first, end) (longest first) of the current head. */
static void run_shared_tiles(void *context, int64_t first, int64_t end, int worker) {
    forward_region *region = context;
    const forward_plan *plan = region->plan;
    const int64_t kv_heads = plan->call->problem.kv_heads;
    for (int64_t order = first; order < end; ++order)
        run_work_item(plan, &region->workspaces[worker], region->head / kv_heads,
                      region->head % kv_heads, plan->query_tiles - 1 - order);
}

/* Runs every item of the plan on up to `threads` workers (see the top of the file). Which
 * worker runs an item never changes its result. */
static void run_items(forward_region *region, int threads) {
    const forward_plan *plan = region->plan;
    if (plan->packing != PACK_SHARED) {
        attn_parallel_run(threads, run_items_worker, region);
        return;
    }
    const attn_problem *problem = &plan->call->problem;
    for (region->head = 0; region->head < problem->batch * problem->kv_heads; ++region->head) {
        attn_parallel_for(threads, plan->key_tiles, 1, pack_shared_tiles, region);
        attn_parallel_for(threads, plan->query_tiles, 1, run_shared_tiles, region);
    }
}

/* The plan's tensors, formats and tiles. bf16 runs on the registry's bf16 tiles where they
 * beat widening to fp32 (AMX), or when asked for by name (registry.h:
 * attn_kernels_bf16_on_tiles); fp16 on the f16 tiles where the CPU has AMX-FP16
 * (attn_kernels_f16_on_tiles), else through fp32. format.bf16_tiles means "16-bit tiles": the
 * tile table is attn_kernels_tiles16(kernels, dtype). */
static void plan_call(forward_plan *plan, attn_call *call, const attn_tensor *q,
                      const attn_tensor *k, const attn_tensor *v, attn_tensor *out,
                      attn_tensor *lse) {
    memset(plan, 0, sizeof *plan);
    plan->call = call;
    plan->format.kernels = call->kernels;
    plan->format.dtype = q->dtype;
    plan->format.bf16_tiles =
        (q->dtype == ATTN_DTYPE_BF16 &&
         attn_kernels_bf16_on_tiles(call->kernels, call->execution.kernel)) ||
        (q->dtype == ATTN_DTYPE_F16 && attn_kernels_f16_on_tiles(call->kernels));
    plan->q = q;
    plan->k = k;
    plan->v = v;
    plan->out = out;
    plan->lse = lse;
    choose_tiles(plan);
    const float softcap = call->options.softcap;
    plan->prescale_queries = softcap == 0.0f && !plan->format.bf16_tiles;
    /* Additive terms need logits first: the loop scales (and soft-caps) them unless the
     * queries carry the scale (bf16 tiles read the queries as stored). */
    plan->loop_transforms = (softcap > 0.0f || plan->format.bf16_tiles) &&
                            (call->options.bias != NULL || call->options.alibi);
    plan->dropout = attn_dropout_of(&call->options, call->problem.query_heads);
    plan->dropout.first_batch = call->dropout_first_batch;
    plan->dropout.blocks = call->kernels->forward.philox_blocks;
}

/* The threads for `item_count` items, by the call's work: every allowed pair's products (at
 * most B Tq Tk of them: masks only lower it) and one read of Q, K, V and O. */
static int forward_threads(const attn_call *call, int64_t item_count, attn_dtype dtype) {
    const attn_problem *problem = &call->problem;
    const double row_floats = (double)(problem->key_dim + problem->value_dim);
    const double pairs =
        (double)problem->batch * (double)problem->query_length * (double)problem->key_length;
    const double elements = (double)problem->batch *
                            ((double)problem->key_length * (double)problem->kv_heads +
                             (double)problem->query_length * (double)problem->query_heads) *
                            row_floats;
    return attn_call_threads_for_work(call, item_count,
                                      2.0 * pairs * (double)problem->query_heads * row_floats,
                                      elements * (double)attn_dtype_size(dtype));
}

/* The band path's items per run: about 2 bands of rows of a worker's own region at a time.
 * Its runs follow one another, so the size sets only how often it takes the lock; a run that
 * did not follow the worker's previous one would pack the band before its first row again. */
static int64_t span_run_items(const forward_plan *plan) {
    const int64_t band_tiles = (plan->span_keys + plan->tile_rows - 1) / plan->tile_rows;
    const int64_t run =
        2 * band_tiles * (plan->span_ring > 0 ? plan->call->problem.kv_heads : 1);
    return run < 1 ? 1 : run;
}

/* The band path's regions: one per thread, consecutive items (run_span_worker). */
static void cut_span_regions(int64_t (*regions)[2], int threads, int64_t item_count) {
    const int64_t region_items = (item_count + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
        regions[t][0] = t * region_items < item_count ? t * region_items : item_count;
        regions[t][1] = (t + 1) * region_items < item_count ? (t + 1) * region_items : item_count;
    }
}

/* ATTN_ERROR_EMPTY_ROW naming the first empty row in (b, h, i) order over all workers, or OK. */
static attn_status empty_row_status(const forward_workspace *workspaces, int threads,
                                    attn_error *error) {
    const forward_row_mark none = {false, 0, 0, 0};
    const forward_row_mark *first = &none;
    for (int t = 0; t < threads; ++t)
        if (forward_row_mark_earlier(&workspaces[t].empty_row, first)) first = &workspaces[t].empty_row;
    if (!first->set) return ATTN_OK;
    return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                     "query row b = %lld, h = %lld, i = %lld has no allowed key "
                     "(options.empty_rows = ERROR; use ZERO or NAN to accept it)",
                     (long long)first->b, (long long)first->h, (long long)first->i);
}

attn_status attn_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                         const attn_options *options, attn_tensor *out, attn_tensor *lse,
                         const attn_execution *execution, attn_error *error) {
    attn_call call;
    attn_status status = attn_call_begin(&call, options, execution, error);
    if (status != ATTN_OK) {
        attn_call_end(&call);
        return status;
    }
    return attn_forward_run(&call, q, k, v, out, lse, error);
}

attn_status attn_forward_run(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, attn_tensor *out, attn_tensor *lse,
                             attn_error *error) {
    attn_status status = attn_call_validate_forward(call, q, k, v, out, lse, error);
    if (status != ATTN_OK) {
        attn_call_end(call);
        return status;
    }
    if (attn_forward_small_applies(call, k, v))
        return attn_forward_small(call, q, k, v, out, lse, error);
    forward_plan plan;
    plan_call(&plan, call, q, k, v, out, lse);
    const attn_problem *problem = &call->problem;
    const float softcap = call->options.softcap;

    int64_t item_count;
    if (!attn_mul_i64(problem->batch, problem->kv_heads, &item_count) ||
        !attn_mul_i64(item_count, plan.query_tiles, &item_count)) {
        attn_call_end(call);
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "B x Hkv x query tiles overflows int64");
    }
    const int thread_count = forward_threads(call, item_count, q->dtype);

    /* Working memory: one part of the arena per thread (+ a shared store), sized once. */
    size_t part_bytes[WORKSPACE_PARTS], parts_bytes = 0, workspace_bytes = 0, shared_bytes = 0;
    status = choose_packing(&plan, thread_count, part_bytes, &parts_bytes, &workspace_bytes,
                            &shared_bytes, error);
    if (plan.span_path) plan.items_per_chunk = span_run_items(&plan);
    if (status == ATTN_OK)
        status = attn_call_reserve(call, thread_count, workspace_bytes, shared_bytes,
                                   "attn_forward", error);
    forward_workspace *workspaces =
        status == ATTN_OK ? calloc((size_t)thread_count, sizeof *workspaces) : NULL;
    packed_kv_store *head_stores =
        status == ATTN_OK && plan.span_ring > 0
            ? calloc((size_t)thread_count * (size_t)problem->kv_heads, sizeof *head_stores)
            : NULL;
    int64_t(*span_regions)[2] =
        status == ATTN_OK && plan.span_path ? calloc((size_t)thread_count, sizeof *span_regions)
                                            : NULL;
    if (status == ATTN_OK && ((plan.span_ring > 0 && head_stores == NULL) ||
                              (plan.span_path && span_regions == NULL))) {
        free(workspaces);
        workspaces = NULL;
    }
    if (status == ATTN_OK && workspaces == NULL)
        status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "attn_forward: %d workspaces",
                           thread_count);
    if (status != ATTN_OK) {
        free(span_regions);
        free(head_stores);
        attn_call_end(call);
        return status;
    }
    pthread_mutex_t span_lock; /* guards span_regions (span_take) */
    if (plan.span_path) {
        cut_span_regions(span_regions, thread_count, item_count);
        plan.span_regions = span_regions;
        pthread_mutex_init(&span_lock, NULL);
        plan.span_lock = &span_lock;
    }
    /* Soft-cap with additive terms: the loop transforms the scores (scale, cap, add, mask);
     * otherwise the loop only adds and masks (queries prescaled, or the kernel caps). */
    plan.logits = (attn_logit_pipeline){plan.loop_transforms ? problem->scale : 1.0f,
                                        plan.loop_transforms ? softcap : 0.0f,
                                        call->mask.has_additive};
    packed_kv_store shared_store;
    if (plan.packing == PACK_SHARED) {
        packed_kv_store_init(&shared_store, &plan.format, (int)plan.tile_keys,
                             (int)problem->key_dim, (int)problem->value_dim, plan.key_tiles,
                             attn_call_shared(call));
        plan.shared_packed = &shared_store;
    }
    for (int t = 0; t < thread_count; ++t) {
        if (head_stores != NULL) workspaces[t].head_stores = head_stores + (size_t)t * problem->kv_heads;
        workspace_carve(&workspaces[t], &plan, part_bytes, parts_bytes,
                        attn_call_workspace(call, t));
    }

    forward_region region = {&plan, workspaces, k, v, 0, 0};
    run_items(&region, thread_count);

    status = empty_row_status(workspaces, thread_count, error);
    if (status == ATTN_OK) status = forward_overflow_status(&plan, workspaces, thread_count, error);

    if (plan.span_path) pthread_mutex_destroy(&span_lock);
    free(span_regions);
    free(head_stores);
    free(workspaces);
    attn_call_end(call);
    return status;
}
