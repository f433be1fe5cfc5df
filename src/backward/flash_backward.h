/*
 * flash_backward.h — what the tiled backward's schedule (flash_backward.c) and its tile steps
 * (backward_tile.c) share: the plan of one attn_backward call and a thread's tile buffers.
 * Private to src/backward.
 */
#ifndef ATTN_FLASH_BACKWARD_H
#define ATTN_FLASH_BACKWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "../kernels/half.h"
#include "../kernels/registry.h"
#include "../mask/dropout.h"
#include "../mask/mask.h"

/* 16-bit tensors (q, k, v, out, dout, dq, dk, dv all of one dtype, F32, BF16 or F16): inputs
 * are widened exactly when read (rows copied, K/V packed from widened rows), every step runs
 * in fp32 as for F32, and dQ, dK, dV are rounded once (nearest-even) when written; a finite
 * gradient that does not fit the dtype is counted and reported (docs/precision.md). */

/* Element offset of (a, b, c, d) in a rank-4 view. */
static inline int64_t backward_offset(const attn_tensor *t, int64_t a, int64_t b, int64_t c,
                                      int64_t d) {
    return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

/* The element at `offset` of a F32, BF16 or F16 view, as fp32 (exact). */
static inline float backward_get(const attn_tensor *t, int64_t offset) {
    switch (t->dtype) {
    case ATTN_DTYPE_BF16: return attn_bf16_to_float(((const uint16_t *)t->data)[offset]);
    case ATTN_DTYPE_F16: return attn_f16_to_float(((const uint16_t *)t->data)[offset]);
    default: return ((const float *)t->data)[offset];
    }
}

/* Stores x at `offset`, rounded to the view's dtype; returns 1 when finite x overflowed. */
static inline int backward_put(attn_tensor *t, int64_t offset, float x) {
    uint16_t h;
    switch (t->dtype) {
    case ATTN_DTYPE_BF16: h = attn_float_to_bf16(x); break;
    case ATTN_DTYPE_F16: h = attn_float_to_f16(x); break;
    default: ((float *)t->data)[offset] = x; return 0;
    }
    ((uint16_t *)t->data)[offset] = h;
    const uint16_t infinity = t->dtype == ATTN_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
    return (h & 0x7fffu) == infinity && x - x == 0.0f;
}

/* Most chunks of the key tiles of a (b, KV head) (see backward_plan). */
#define BACKWARD_MAX_CHUNKS 16

/* Stores factor * values[e] at t's elements first + e * t->stride[3], e < count, rounded to
 * the view's dtype as backward_put does (one loop per dtype, so that it vectorises); returns
 * how many finite values overflowed a 16-bit dtype. */
static inline int64_t backward_store_row(attn_tensor *t, int64_t first, int64_t count,
                                         const float *values, float factor) {
    const int64_t stride = t->stride[3];
    int64_t overflowed = 0;
    if (t->dtype == ATTN_DTYPE_F32) {
        float *row = (float *)t->data + first;
        for (int64_t e = 0; e < count; ++e) row[e * stride] = factor * values[e];
        return 0;
    }
    uint16_t *row = (uint16_t *)t->data + first;
    const bool bf16 = t->dtype == ATTN_DTYPE_BF16;
    const uint16_t infinity = bf16 ? 0x7f80u : 0x7c00u;
    for (int64_t e = 0; e < count; ++e) {
        const float x = factor * values[e];
        const uint16_t h = bf16 ? attn_float_to_bf16(x) : attn_float_to_f16(x);
        row[e * stride] = h;
        overflowed += (h & 0x7fffu) == infinity && x - x == 0.0f;
    }
    return overflowed;
}

/* Everything a task needs, read-only during the parallel loops (the buffers it points to are
 * written only where a task owns them). */
typedef struct backward_plan {
    const attn_tensor *q, *k, *v, *out, *lse, *dout;
    attn_tensor *dq, *dk, *dv, *dbias;
    const attn_mask_context *mask;
    const attn_kernels *kernels; /* forward: score_tile and key packing; backward: products,
                                    exp, dS */
    attn_problem problem;
    float scale;
    float softcap;
    attn_dropout dropout;   /* the forward's: dV and dP see the kept pairs, scaled */
    int tile_q, tile_k;     /* tiles of tile_q query rows x tile_k keys */
    int key_block;          /* keys per packed block of a key tile (above) */
    /* Query tiles a thread keeps copied per query head of the group (backward_workspace),
     * 1 unless a windowed band makes consecutive key tiles of a chunk reach the same ones. */
    int64_t query_tile_slots;
    /* The key tiles of a (b, KV head) are dealt to `chunks` chunks: every chunks-th tile to
     * each (tile t to chunk t % chunks: equal work under a causal mask), or, for a windowed
     * band (contiguous_chunks), consecutive runs of tiles, so that each chunk reaches only
     * the query rows near its keys. Chunk c keeps unscaled dQ partial sums for the query
     * rows [chunk_rows_first[c], chunk_rows_end[c]) only (whole query tiles: every row that
     * any of its key tiles can reach, over all batches), at query_partials + chunk_offset[c]
     * as [B][Hq][rows][Dk]; backward_query_partial addresses a row. */
    bool contiguous_chunks;
    int64_t chunks;
    int64_t chunk_rows_first[BACKWARD_MAX_CHUNKS], chunk_rows_end[BACKWARD_MAX_CHUNKS];
    size_t chunk_offset[BACKWARD_MAX_CHUNKS];
    /* Contiguous chunks whose tasks cover one (b, KV head) (no broadcast d bias): a task sums
     * its dQ partials in its thread's workspace (backward_workspace.task_partials, rows
     * [chunk_rows_first, chunk_rows_end) of each head of the group) and at its end writes dQ
     * itself for the rows no other chunk keeps, and copies only the rows others keep too into
     * query_partials (whose other pages are never touched). */
    bool task_partials;
    int64_t task_partial_rows; /* most rows a chunk keeps */
    float *row_dot;         /* D [B][Hq][Tq] */
    /* Query tiles per task of the recomputed D (16-bit O; compute_row_dots), 0 otherwise. */
    int64_t dot_task_tiles;
    float *query_partials;  /* the chunks' dQ partial sums, above */
} backward_plan;

/* The dQ partial row i of (b, h) of chunk `chunk` (a row the chunk keeps). */
static inline float *backward_query_partial(const backward_plan *plan, int64_t chunk, int64_t b,
                                            int64_t h, int64_t i) {
    const int64_t first = plan->chunk_rows_first[chunk];
    const int64_t rows = plan->chunk_rows_end[chunk] - first;
    return plan->query_partials + plan->chunk_offset[chunk] +
           ((b * plan->problem.query_heads + h) * rows + (i - first)) * plan->problem.key_dim;
}

/* A key tile is packed in blocks of plan->key_block keys, each packed on its own, so that a
 * query tile can compute S and dP for only the blocks its causal / window band reaches:
 * BACKWARD_KEY_BLOCK, or BACKWARD_BAND_KEY_BLOCK for a windowed band (with query tiles of
 * BACKWARD_BAND_TILE_Q rows by default): a band's edges then cross fewer partly masked blocks,
 * and a causal mask, whose one edge matters less than the wider blocks' throughput, keeps
 * BACKWARD_KEY_BLOCK. */
#define BACKWARD_KEY_BLOCK 64
#define BACKWARD_BAND_KEY_BLOCK 32

/* One thread's tile buffers (64-byte aligned, carved from one allocation). The Q, dO and K
 * rows are always copied to contiguous rows: the products then stream unit-stride rows
 * instead of rows Hq * D floats apart (which alias in L1 when that is a multiple of 4 KiB).
 * The copies of a query tile (Q, dO, LSE, D rows) are kept in slot (h % G) * S + (i0 /
 * tile_q) % S of S = plan->query_tile_slots per head and reused while their tag
 * (b, h, i0) stands. */
typedef struct backward_workspace {
    float *query_rows;            /* [tile_q][Dk] Q rows of the current query tile (a slot) */
    float *dout_rows;             /* [tile_q][Dv] dO rows */
    float *key_rows;              /* [tile_k][Dk] K rows of the current key tile (for dQ) */
    float *row_lse;               /* [tile_q] */
    float *row_dot;               /* [tile_q] */
    float *slot_queries, *slot_douts, *slot_lse, *slot_dots; /* the slots of the above */
    int64_t *slot_tags;           /* [slots][3]: (b, h, i0) held, b = -1: none */
    float *packed_keys;           /* K tile packed as keys (for S), per key block */
    float *packed_values_as_keys; /* V tile packed as keys (for dP), per key block */
    float *probabilities;         /* P [tile_q][tile_k] */
    float *score_gradient;        /* dP, then dS, [tile_q][tile_k] */
    float *softcap_derivative;    /* 1 - tanh^2 [tile_q][tile_k] (soft-cap only) */
    float *additive_row;          /* [tile_k] bias + ALiBi of one row */
    float *dropout_factors;       /* [tile_q][tile_k] of the tile (dropout only) */
    uint8_t *allowed_row;         /* [tile_k] mask predicate of one row */
    float *key_accumulator;       /* [tile_k][Dk] unscaled dK of the key tile */
    float *value_accumulator;     /* [tile_k][Dv] dV of the key tile */
    float *value_rows;            /* [tile_k][Dv] widened V rows (16-bit V only) */
    float *task_partials;         /* [G][task_partial_rows][Dk] (plan->task_partials) */
    double *dot_sums;             /* [G][dot_task_tiles * tile_q] (backward_query_rows_dots) */
    int64_t overflowed;           /* dK / dV values that did not fit a 16-bit dtype */
    int64_t query_overflowed;     /* dQ values the tasks wrote that did not fit */
} backward_workspace;

/* Floats of one workspace (each buffer rounded to 64 bytes), and carving one. */
size_t backward_workspace_floats(const backward_plan *plan);
void backward_workspace_assign(const backward_plan *plan, float *base,
                               backward_workspace *workspace);

/*
 * dK and dV of keys [j0, j0 + count) of (b, kv_head), summed over the query heads of the
 * group (ascending) and their query tiles (ascending), written to plan->dk / plan->dv; adds
 * dS · K of those keys into chunk `chunk`'s dQ partials of the query rows (the workspace's
 * task_partials with plan->task_partials, else query_partials), and (with
 * plan->dbias) dS into the d bias entries of those keys (at batch 0 / head 0 where the bias
 * broadcasts). The caller has zeroed the partials and d bias entries it owns.
 */
void backward_key_tile(const backward_plan *plan, backward_workspace *workspace, int64_t b,
                       int64_t kv_head, int64_t j0, int count, int64_t chunk);

/*
 * D[b][h][i] = sum_j P_ij dP_ij (= dO_i . O_i with O_i the unrounded fp32 output) for the
 * rows [first_row, end_row) (whole query tiles, at most plan->dot_task_tiles of them) of every
 * query head of (b, kv_head)'s group, written to plan->row_dot: P and dP recomputed with the
 * tile steps of backward_key_tile, each key tile packed once for all those rows, summed in
 * double over the keys in ascending order (the same for any thread count). For a 16-bit O,
 * whose rounding (relative 2^-9 for bf16) would otherwise dominate dP - D where attention is
 * peaked. Reads plan->row_dot of those rows (load_query_tile), so the caller sets it first.
 */
void backward_query_rows_dots(const backward_plan *plan, backward_workspace *workspace,
                              int64_t b, int64_t kv_head, int64_t first_row, int64_t end_row);

/* How many chunks keep query row i (0 to plan->chunks). */
static inline int backward_row_keepers(const backward_plan *plan, int64_t i) {
    int keepers = 0;
    for (int64_t c = 0; c < plan->chunks; ++c)
        keepers += i >= plan->chunk_rows_first[c] && i < plan->chunk_rows_end[c];
    return keepers;
}

#endif /* ATTN_FLASH_BACKWARD_H */
