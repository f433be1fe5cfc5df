/*
 * forward_internal.h — what flash_forward.c (plan, scheduling, rows) and forward_tile.c (one
 * key tile: scores, mask, online softmax, P·V) share: the plan of one attn_forward call, a
 * thread's workspace, and one tile step.
 */
#ifndef ATTN_FORWARD_INTERNAL_H
#define ATTN_FORWARD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "../call/call.h"
#include "../kernels/registry.h"
#include "../mask/dropout.h"
#include "../mask/logits.h"
#include "../mask/mask.h"
#include "packed_kv.h"

/* How packed K/V are held (see flash_forward.c). */
typedef enum packing_mode { PACK_PER_THREAD, PACK_SHARED, PACK_ONE_TILE } packing_mode;

/* Everything shared by all work items of one call (read-only during the parallel loop). */
typedef struct forward_plan {
    const attn_call *call;  /* options, execution, problem, mask context, kernels, threads */
    const attn_tensor *q, *k, *v;
    attn_tensor *out, *lse;
    attn_logit_pipeline logits; /* what the mask pass does to a tile's scores */
    attn_dropout dropout;       /* applied to P between the softmax step and P·V */
    int64_t tile_rows;      /* query rows per head in one work item */
    int64_t tile_keys;      /* keys per key tile */
    int64_t query_tiles;    /* ceil(Tq / tile_rows) */
    int64_t key_tiles;      /* ceil(Tk / tile_keys) */
    packing_mode packing;
    packed_kv_store *shared_packed; /* PACK_SHARED: the current head's packed K/V */
    int query_stride;       /* floats between packed query rows (Dk rounded up to 16) */
    int scores_stride;      /* floats between score rows (tile_keys rounded up to 16) */
    int accumulator_stride; /* floats between accumulator rows (Dv rounded up to 16) */
    bool prescale_queries;  /* no soft-cap, fp32 queries: queries carry the scale */
    bool loop_transforms;   /* soft-cap with additive terms: the loop transforms scores */
    /* The band path (forward_tile.c, forward_compute_span), for a pure band with a window
     * (attn_mask_is_band): an item's rows go in chunks of span_rows rows per head; each chunk
     * computes only the key tiles that the union of its rows' intervals touches, up to
     * span_keys keys per step (one softmax step over them all), and masks each row by its
     * two interval bounds. */
    bool span_path;
    int64_t span_rows;      /* rows per head of one chunk */
    int64_t span_keys;      /* most keys of one step (a multiple of tile_keys) */
    int span_stride;        /* floats between score rows of a span step */
    int64_t step_keys;      /* max(tile_keys, span_keys when span_path): row buffers */
    int64_t items_per_chunk; /* span path: consecutive items one thread takes at once */
    /* Span path with per-thread packing: [threads][2], the items [front, back) left in each
     * thread's region (changed under a lock only: flash_forward.c, span_take). */
    int64_t (*span_regions)[2];
    void *span_lock;        /* the pthread_mutex_t that guards span_regions */
    /* Span path with per-thread packing, when > 0: each thread keeps one ring of span_ring
     * packed tiles per KV head (head_stores), of span_ring_bytes each, and takes items in the
     * order (b, query tile, KV head), so that the rows of every head at the same tokens (one
     * page of a [B, T, H, D] tensor) are read together. */
    int64_t span_ring;
    size_t span_ring_bytes;
    /* Operand type (forward_dtype.c): q, k, v, out are all `format.dtype`. F32 as always;
     * BF16 / F16 converted to fp32 exactly (queries when gathered, K/V when packed), P rounded
     * to the operand type before P·V; or, with format.bf16_tiles, BF16 queries and K/V kept
     * in bf16 for the registry's bf16 tiles. O is stored in its dtype, with overflow counted. */
    packed_kv_format format;
} forward_plan;

/* One thread's buffers (64-byte aligned), carved out of its part of the call's arena. */
/* A row (b, h, i) a thread met; set: one was. */
typedef struct forward_row_mark {
    bool set;
    int64_t b, h, i;
} forward_row_mark;

typedef struct forward_workspace {
    float *queries;        /* [group rows][query_stride]: the item's query rows, by head */
    float *scores;         /* [group rows][scores_stride] */
    float *accumulator;    /* [group rows][accumulator_stride] */
    float *row_max;        /* [group rows] */
    float *row_sum;        /* [group rows] */
    float *rescale;        /* [group rows] */
    float *value_staging;  /* [tile_keys][Dv]: V tile with never-attended keys zeroed */
    float *staged_values;  /* kernel-packed value_staging */
    float *row_additive;   /* [tile_keys]: additive terms of one row */
    uint8_t *row_allowed;  /* [tile_keys]: mask of one row */
    uint8_t *column_alive; /* [tile_keys]: some row of the tile attends this key */
    attn_tile_class *head_class; /* [group_size] */
    struct row_segment *segments; /* [group_size] */
    packed_kv_store packed;      /* PACK_PER_THREAD / PACK_ONE_TILE: this thread's store */
    packed_kv_store *head_stores; /* [kv_heads] when plan->span_ring > 0 */
    /* The first empty row this thread met (for ATTN_EMPTY_ROWS_ERROR). */
    forward_row_mark empty_row;
    /* The first output row whose value does not fit a 16-bit out dtype (forward_dtype.c),
     * and that value. */
    forward_row_mark overflow_row;
    float overflow_value;
} forward_workspace;

/* Whether mark a is set and holds an earlier row in (b, h, i) order than b (or b is unset). */
static inline bool forward_row_mark_earlier(const forward_row_mark *a, const forward_row_mark *b) {
    return a->set && (!b->set || a->b < b->b ||
                      (a->b == b->b && (a->h < b->h || (a->h == b->h && a->i < b->i))));
}

/* Marks row (b, h, i) unless the mark holds an earlier one. */
static inline void forward_row_mark_note(forward_row_mark *mark, int64_t b, int64_t h,
                                         int64_t i) {
    const forward_row_mark row = {true, b, h, i};
    if (forward_row_mark_earlier(&row, mark)) *mark = row;
}

enum { WORKSPACE_PARTS = 13 }; /* parts of a workspace */

/* Rows [first, first + count) of the workspace's group rows, handed to one kernel call. */
typedef struct row_segment { int64_t first, count; } row_segment;

/* One key tile applied to rows [first_row, end_row) of every non-EMPTY head of an item. */
typedef struct tile_step {
    int64_t b, kv_head, i0, rows;  /* the item: query rows [i0, i0 + rows) of each head */
    int64_t first_row, end_row;    /* the rows of each head this step updates */
    int64_t j0;                    /* first key of the tile */
    int count;                     /* keys [j0, j0 + count): a prefix of the packed tile */
    bool needs_mask_pass;          /* some head PARTIAL, or additive terms / transforms */
    const packed_kv_tile *packed;
} tile_step;

/* One span step (the band path): rows [first_row, end_row) of every head of an item against
 * key tiles [first_tile, last_tile] (keys [first_tile * tile_keys, key_end)), each row masked
 * to its interval. */
enum { FORWARD_SPAN_TILES = 64 }; /* most key tiles of one span step */

typedef struct span_step {
    int64_t b, kv_head, i0, rows;
    int64_t first_row, end_row;
    int64_t first_tile, last_tile;
    int64_t key_end;               /* one past the last key any row of the step attends */
} span_step;

/* Scores, per-row interval mask, one online-softmax step and P·V of a span step
 * (forward_tile.c). */
void forward_compute_span(const forward_plan *plan, forward_workspace *workspace,
                          const span_step *step);

/* Gathers query row (b, i, h) into row[]: fp32 multiplied by `factor` (F32 / converted), or
 * with format.bf16_tiles the bf16 elements as they are, zero-padded to
 * attn_lowp_query_stride(Dk) (row is then read as uint16_t). */
void forward_gather_query(const forward_plan *plan, int64_t b, int64_t i, int64_t h,
                          float factor, float *row);

/* Stores output row (b, i, h) = values[0..Dv) in out's dtype; for 16-bit dtypes `values` may
 * be overwritten. Records the first row that overflows the dtype in `workspace`. */
void forward_store_output(const forward_plan *plan, forward_workspace *workspace, int64_t b,
                          int64_t i, int64_t h, float *values);

/* The first overflowed output row over all workspaces as an error (ATTN_OK if none). */
attn_status forward_overflow_status(const forward_plan *plan, const forward_workspace *workspaces,
                                    int count, attn_error *error);

/* Scores, mask, online-softmax step and P·V of one key tile for the rows of `step`
 * (forward_tile.c). Updates the rows' max, sum and accumulator in `workspace`. */
void forward_compute_tile(const forward_plan *plan, forward_workspace *workspace,
                          const tile_step *step);

#endif /* ATTN_FORWARD_INTERNAL_H */
