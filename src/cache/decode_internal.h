/*
 * decode_internal.h — the parts of attn_decode shared by its three files:
 *   decode.c         plan -> run -> merge: validation, the plan of a call (split size,
 *                    threads, working memory), the worker region, the LSE merge and the
 *                    writing of an output row (empty-row policy, sinks, output type);
 *   decode_family.c  the families a task computes in, and the table that picks one: each
 *                    family is a few functions over the registry's decode slots
 *                    (kernels/registry.h) that score a chunk of stored keys against the
 *                    group's query rows and add its P · V to the accumulator;
 *   decode_task.c    the loop over a task's chunks (the same for every family) and the two
 *                    schedules of token-major pages (heads in steps, heads together).
 * Internal to libattn.
 */
#ifndef ATTN_CACHE_DECODE_INTERNAL_H
#define ATTN_CACHE_DECODE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache_internal.h"
#include "kernels/registry.h"
#include "mask/logits.h"
#include "mask/mask.h"

typedef struct decode_plan decode_plan;
typedef struct decode_scratch decode_scratch;
typedef struct decode_chunk decode_chunk;
typedef struct chunk_state chunk_state;

/* The first empty and the first overflowing output row a worker met (linear index
 * b*Hq*Tq + h*Tq + i; the call's row count when none), for the call's error. */
typedef struct row_report {
    int64_t first_empty, first_overflow;
} row_report;

/* Where accumulator element (r, e) lies: [rows][Dv]; transposed, [Dv][GROUP_STRIDE(rows)];
 * or [GROUP_STRIDE(rows)][TILE_ROW_FLOATS(Dv)] for the bf16 tiles (registry.h). */
typedef enum accumulator_layout {
    ACCUMULATOR_ROWS,
    ACCUMULATOR_TRANSPOSED,
    ACCUMULATOR_TILE_ROWS,
} accumulator_layout;

/* Who requests a chunk's values ahead of its P · V: the family's own kernels (NEVER), the
 * loop before the chunk's scores (for groups of >= 2 rows, where many FMAs per key leave the
 * memory stream time to bring them) when the rows are float32 read in place (F32) or always
 * (16-bit rows read in place), or the 8-bit in-place kernels as plan_requests says (8BIT). */
typedef enum values_request {
    VALUES_REQUEST_NEVER,
    VALUES_REQUEST_F32,
    VALUES_REQUEST_ALWAYS,
    VALUES_REQUEST_8BIT,
} values_request;

/* A family: how every task of a call computes. prepare (NULL: none) turns the task's query
 * rows (scratch->queries [rows][Dk]) into what its score kernel reads (scratch->prepared);
 * score writes the chunk's scores [rows][ATTN_DECODE_CHUNK]; values adds the chunk's P · V
 * (weights: the probabilities in the scores' place; rescale: the accumulator's factor) to the
 * accumulator, now or, with flush, later: flush (NULL: nothing is ever held back) does the
 * P · V still pending, which the loop asks for at an empty chunk and at the task's end. */
typedef struct decode_family {
    const char *name; /* what attn_decode_kernel_path answers */
    accumulator_layout accumulator;
    values_request values_request;
    bool head_scale_at_finish; /* the value head scale applies once per output (fp8 tiles) */
    void (*prepare)(const decode_plan *plan, decode_scratch *scratch);
    void (*score)(const decode_plan *plan, decode_scratch *scratch, const decode_chunk *chunk,
                  chunk_state *state, float *scores);
    void (*values)(const decode_plan *plan, decode_scratch *scratch, const decode_chunk *chunk,
                   chunk_state *state, float *weights, float *rescale);
    void (*flush)(const decode_plan *plan, decode_scratch *scratch, chunk_state *state);
} decode_family;

/* The family of a task with `rows` query rows of `query_dtype` against `storage`, on
 * token-major pages or not (decode_family.c, the table there). */
const decode_family *decode_family_of(const attn_decode_kernels *kernels, attn_dtype storage,
                                      attn_dtype query_dtype, int64_t rows, int64_t key_dim,
                                      bool token_major);
/* Whether a family reads fp8 storage into bf16 buffers first (scratch keys16 / values16). */
bool decode_family_widens_fp8(const decode_family *family);

/* Everything a task needs, fixed for the call. */
struct decode_plan {
    const attn_kv_cache *cache;
    const attn_tensor *q;                 /* [B, Tq, Hq, Dk] */
    const attn_kernels *kernels;
    const decode_family *family;          /* every task's */
    /* The type the softmax writes P in (registry.h softmax_chunk): the queries' for 16-bit
     * queries off the tiles, as attn_forward rounds P for P · V; float32 otherwise (the bf16
     * tiles round P themselves) */
    attn_dtype p_type;
    const attn_mask_context *mask;        /* the call's */
    attn_logit_pipeline logits;           /* scale, soft-cap, additive terms of a chunk */
    float scale, softcap;
    int64_t query_length, group_size, rows; /* rows = group_size * Tq; row r = (r / Tq, r % Tq) */
    int64_t key_dim, value_dim;
    int64_t split_tokens;
    int64_t *split_counts;                /* [B] splits of each sequence (>= 1) */
    int64_t *first_task;                  /* [B] index of task (b, head 0, split 0) */
    int64_t task_count;
    /* Token-major pages: the Hkv tasks of a split on one thread, chunk by chunk when
     * `together`, else in steps of step_tokens keys when `stepped` (decode_task.c) */
    bool interleaved, together, stepped;
    int64_t kv_heads, step_tokens;
    /* What the loop and the kernels request ahead (decode.c plan_requests) */
    bool values_before_scores; /* the chunk's values, before its scores */
    bool scores_request_values; /* 8-bit score kernels request the chunk's values (`ahead`) */
    bool values_request_next;   /* 8-bit P · V requests the next chunk's values */
    bool transform;             /* logits need more than the scale (soft-cap, additive terms) */
    bool per_head_classes;      /* a chunk's mask class differs between query heads */
    int tile_chunks;            /* bf16 tiles: chunks per P · V */
    /* Every sequence in one split (`direct`): each task writes its rows straight into out /
     * lse (decode_write_row), with the bits the merge of a single partial gives; otherwise
     * tasks write partials, merged afterwards. */
    bool direct;
    float *partial_out;         /* [task][rows][Dv] (none when direct) */
    float *partial_lse;         /* [task][rows] */
    const attn_options *options; /* the call's (empty-row policy, sinks) */
    attn_tensor *out, *lse;     /* [B, Tq, Hq, Dv], [B, Hq, Tq] (lse: NULL for none) */
};

/* Per-thread working memory of a task (and of the merge), carved from the thread's part of
 * the call's arena (decode.c scratch_layout). */
struct decode_scratch {
    float *queries;     /* [rows][Dk] */
    float *prepared;    /* the queries as the family's score kernel reads them */
    float *scores;      /* [rows][ATTN_DECODE_CHUNK], or ATTN_DECODE_TILE_CHUNKS such blocks
                           (the bf16 tiles' pending chunks; the int8 tiles' two parities) */
    float *accumulator; /* the family's accumulator_layout */
    float *row_max;     /* [rows] */
    float *row_sum;     /* [rows] */
    float *rescale;     /* [2][rows] the accumulator's factor at a chunk (two parities) */
    float *keys;        /* [ATTN_DECODE_CHUNK][Dk] converted keys */
    float *values;      /* [ATTN_DECODE_CHUNK][Dv] converted values (or a tile kernel's stage) */
    float *additive;    /* [ATTN_DECODE_CHUNK] the logit pipeline's additive terms of a row */
    uint8_t *allowed;   /* [ATTN_DECODE_CHUNK] the logit pipeline's predicate of a row */
    uint8_t *classes;   /* [group_size] tile class per query head */
    double *weights;    /* [most splits] merge weights of a row */
    float *merged;      /* [Dv] a merged row */
    float *carried;     /* [rows] bf16 tiles: the accumulator's factor over the pending chunks */
    uint16_t *keys16;   /* fp8 on bf16 tiles: [ATTN_DECODE_TILE_KEYS][Dk] keys widened to bf16 */
    uint16_t *values16; /* ... [ATTN_DECODE_TILE_KEYS][Dv] values (none with values_in_keys) */
    float *head_states; /* stepped, together: [Hkv] heads' state (decode_head_state_floats) */
    uint8_t *head_flags; /* together: [2][Hkv] whether a chunk has any / only allowed keys */
    row_report *report; /* the worker's (decode_write_row) */
};

/* The chunk after the current one: `count` tokens (0: none) on pool page `page` from `slot`. */
typedef struct next_chunk {
    int64_t page, slot, count;
} next_chunk;

/* A chunk of keys [first, last) of sequence b, KV head kv_head, on pool page `page` from
 * slot `slot` (never across a page), with what its kernels read. */
struct decode_chunk {
    int64_t b, kv_head, first, last, page_end, page, slot;
    int count;
    next_chunk next;
    bool all_full;                        /* every key allowed for every row (no mask work) */
    const void *keys, *values;            /* the stored rows (values: the keys' with
                                             values_in_keys) */
    const float *key_scales, *value_scales; /* Q8 row scales, contiguous; NULL: none */
    const void *next_keys, *next_values;  /* the next chunk's rows; NULL at the task's end */
    attn_rows_ahead ahead;                /* this chunk's value rows (8-bit score kernels) */
    float key_factor, value_factor;       /* the head's scales (FP8; else 1) */
};

/* The P · V of one int8 chunk held back while the next chunk is scored (decode_family.c). */
typedef struct late_values {
    int count; /* 0: none held */
    const void *values;
    int64_t value_stride;
    const float *value_scales;
    const void *next_values;
    float value_factor;
    const float *weights;
    const float *rescale;
} late_values;

/* What a task carries from chunk to chunk besides the softmax state. */
struct chunk_state {
    int slot;                        /* the scores block (and rescale, gathered scales:
                                        parity_slot) the next chunk uses */
    int parity;                      /* int8 tiles: 0 / 1 */
    int pending, pending_keys;       /* bf16 tiles: chunks (keys) whose P · V waits */
    const void *pending_values;
    int64_t pending_stride;
    late_values held;                /* int8 tiles: the chunk whose P · V waits */
    const float *keys;               /* converted keys of the chunk (values_in_keys) */
    int64_t key_stride;
    float gathered[2][2][ATTN_DECODE_CHUNK]; /* [parity][keys, values] Q8 scales gathered */
};

/* decode.c: where output row (b, h, i) is computed before decode_write_row: the row of a
 * dense float32 out itself, else scratch->merged [Dv]. */
float *decode_row_target(const decode_plan *plan, const decode_scratch *scratch, int64_t b,
                         int64_t h, int64_t i);
/* Writes output row (b, h, i), computed in `row` (decode_row_target), and its LSE: a padding
 * query row as zeros (LSE -inf), the empty-row policy, the head's sink, the output type (a
 * 16-bit out rounded once; a finite value beyond it is reported). */
void decode_write_row(const decode_plan *plan, decode_scratch *scratch, int64_t b, int64_t h,
                      int64_t i, float *row, float lse);

/* decode_task.c */
void decode_run_task(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                     int64_t kv_head, int64_t split, int64_t task);
void decode_run_split_stepped(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                              int64_t split);
void decode_run_split_together(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                               int64_t split);
/* Floats of one head's state in a split whose heads take turns. */
size_t decode_head_state_floats(const decode_plan *plan);
/* Floats of a task's accumulator and prepared queries in their largest layouts. */
size_t decode_accumulator_floats(const decode_plan *plan);
size_t decode_prepared_floats(const decode_plan *plan);

#endif /* ATTN_CACHE_DECODE_INTERNAL_H */
