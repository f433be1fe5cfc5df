/*
 * flash_backward.c — attn_backward: the attention backward pass by recomputation
 * (FlashAttention-2), deterministic by construction.
 *
 * Nothing of size Tq x Tk is ever stored: P is rebuilt tile by tile from the forward's LSE
 * (P = exp(S - lse)), and D = rowsum(dO * O) comes from the forward's stored O. The work is
 * split so that every output element has exactly one owner and a fixed summation order
 * (FlashAttention's "deterministic" variant, here the only mode):
 *   pass 0, over (b, h):                    D[b][h][i] = sum_c dO[b,i,h,c] * O[b,i,h,c]
 *   pass 1, over (b, kv head, key tile):    dK, dV of those keys, summed over every query
 *                                           head of the group and every query tile, in order
 *   pass 2, over (bias b, bias h, q block): dQ of those queries (and d bias of those rows,
 *                                           summed over the batches / heads it broadcasts)
 * Passes 1 and 2 both recompute S = Q K^T and dP = dO V^T; that costs 14 D flops per allowed
 * pair instead of 10 D, and buys bitwise-identical results for any thread count with no
 * atomics. Tiles the mask classifies EMPTY are skipped; FULL tiles skip the predicate.
 *
 * All tile products go through the kernel table (kernel.h), so SIMD kernels speed them up:
 *   S  = Q  K^T   score_tile (K packed as keys)
 *   dP = dO V^T   score_tile (V packed as keys)
 *   dV += P^T dO  accumulate_values (P transposed, dO packed as values)
 *   dK += dS^T Q  accumulate_values (dS transposed, Q packed as values)
 *   dQ += dS K    accumulate_values (K packed as values)
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backward.h"

#include "../core/internal.h"
#include "../kernels/kernel.h"

/* Everything a task needs, read-only during the parallel passes. */
typedef struct backward_plan {
    const attn_tensor *q, *k, *v, *out, *lse, *dout;
    attn_tensor *dq, *dk, *dv, *dbias;
    const attn_mask_context *mask;
    const attn_kernel_table *kernels;
    attn_problem problem;
    float scale;
    float softcap;
    int tile_q, tile_k; /* pass 1 tiles: tile_q query rows x tile_k keys */
    int block_q;        /* pass 2 query rows per task (>= tile_q): packs K, V once per block */
    float *row_dot;     /* D [B][Hq][Tq] (pass 0) */
} backward_plan;

/* Pass 2's largest score buffer, [block_q][tile_k] floats (128 KiB). */
#define PASS2_SCORE_FLOATS 32768

/* One thread's tile buffers (64-byte aligned, carved from one allocation). */
typedef struct backward_workspace {
    float *query_rows;           /* [block_q][Dk] contiguous copy of the Q rows */
    float *dout_rows;            /* [block_q][Dv] contiguous copy of the dO rows */
    const float *query_tile;     /* the Q rows of the current tile: the copy, or the tensor */
    const float *dout_tile;      /* the dO rows likewise */
    int query_tile_stride;       /* floats between consecutive rows of query_tile */
    int dout_tile_stride;
    float *row_lse;              /* [block_q] */
    float *row_dot;              /* [block_q] */
    float *step_max;             /* [block_q] softmax_step scratch: starts as the LSE */
    float *step_sum;             /* [block_q] softmax_step scratch (unused result) */
    float *step_rescale;         /* [block_q] softmax_step scratch (unused result) */
    float *packed_keys;          /* K tile packed as keys (for S) */
    float *packed_values_as_keys;/* V tile packed as keys (for dP) */
    float *packed_keys_as_values;/* K tile packed as values (for dQ) */
    float *packed_query_values;  /* Q tile packed as values (for dK) */
    float *packed_dout_values;   /* dO tile packed as values (for dV) */
    float *probabilities;        /* P  [block_q][tile_k] */
    float *score_gradient;       /* dP, then dS, [block_q][tile_k] */
    float *softcap_derivative;   /* 1 - tanh^2 [block_q][tile_k] (soft-cap only) */
    float *transposed;           /* [tile_k][tile_q]: P^T or dS^T */
    float *key_accumulator;      /* [tile_k][Dk] */
    float *value_accumulator;    /* [tile_k][Dv] */
    float *query_accumulator;    /* [block_q][Dk] */
} backward_workspace;

/* Rounds a float count up to a whole number of 64-byte lines. */
static size_t round_to_line(size_t floats) { return (floats + 15) / 16 * 16; }

enum { WORKSPACE_BUFFERS = 19 };

/* The floats one workspace needs, in the order assign_workspace carves them. */
static void workspace_sizes(const backward_plan *plan, size_t sizes[WORKSPACE_BUFFERS]) {
    const attn_kernel_table *kernels = plan->kernels;
    const size_t tq = (size_t)plan->tile_q, tk = (size_t)plan->tile_k;
    const size_t bq = (size_t)plan->block_q;
    const int dk = (int)plan->problem.key_dim, dv = (int)plan->problem.value_dim;
    sizes[0] = bq * (size_t)dk;
    sizes[1] = bq * (size_t)dv;
    sizes[2] = bq;
    sizes[3] = bq;
    sizes[4] = kernels->packed_keys_floats(plan->tile_k, dk);
    sizes[5] = kernels->packed_keys_floats(plan->tile_k, dv);
    sizes[6] = kernels->packed_values_floats(plan->tile_k, dk);
    sizes[7] = kernels->packed_values_floats(plan->tile_q, dk);
    sizes[8] = kernels->packed_values_floats(plan->tile_q, dv);
    sizes[9] = bq * tk;
    sizes[10] = bq * tk;
    sizes[11] = plan->softcap > 0.0f ? bq * tk : 0;
    sizes[12] = tk * tq;
    sizes[13] = tk * (size_t)dk;
    sizes[14] = tk * (size_t)dv;
    sizes[15] = bq * (size_t)dk;
    sizes[16] = bq;
    sizes[17] = bq;
    sizes[18] = bq;
}

static void assign_workspace(const size_t sizes[WORKSPACE_BUFFERS], float *base,
                             backward_workspace *workspace) {
    float **slots[WORKSPACE_BUFFERS] = {&workspace->query_rows, &workspace->dout_rows, &workspace->row_lse,
                         &workspace->row_dot, &workspace->packed_keys,
                         &workspace->packed_values_as_keys, &workspace->packed_keys_as_values,
                         &workspace->packed_query_values, &workspace->packed_dout_values,
                         &workspace->probabilities, &workspace->score_gradient,
                         &workspace->softcap_derivative, &workspace->transposed,
                         &workspace->key_accumulator, &workspace->value_accumulator,
                         &workspace->query_accumulator, &workspace->step_max,
                         &workspace->step_sum, &workspace->step_rescale};
    size_t offset = 0;
    for (int s = 0; s < WORKSPACE_BUFFERS; ++s) {
        *slots[s] = base + offset;
        offset += round_to_line(sizes[s]);
    }
}

/* ---- pass 0 ------------------------------------------------------------------------------ */

/* row_dot[b][h][i] = sum_c dO[b,i,h,c] * O[b,i,h,c], summed in double. */
static void compute_row_dots(const backward_plan *plan, int threads) {
    const int64_t B = plan->problem.batch, Hq = plan->problem.query_heads;
    const int64_t Tq = plan->problem.query_length, Dv = plan->problem.value_dim;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t bh = 0; bh < B * Hq; ++bh) {
        const int64_t b = bh / Hq, h = bh % Hq;
        for (int64_t i = 0; i < Tq; ++i) {
            double sum = 0.0;
            for (int64_t c = 0; c < Dv; ++c)
                sum += (double)*attn_f32_at4(plan->dout, b, i, h, c) *
                       *attn_f32_at4(plan->out, b, i, h, c);
            plan->row_dot[bh * Tq + i] = (float)sum;
        }
    }
}

/* ---- tile steps shared by passes 1 and 2 --------------------------------------------------- */

/* target[e] = source[e * stride] for e < count. */
static void copy_row(const float *source, int64_t stride, int64_t count, float *target) {
    if (stride == 1) {
        memcpy(target, source, (size_t)count * sizeof(float));
        return;
    }
    for (int64_t e = 0; e < count; ++e) target[e] = source[e * stride];
}

/* Whether rows of `t` (dims 1 and 3) can be handed to the kernels in place: unit element
 * stride and a positive row stride >= dim that fits an int. */
static bool rows_usable_in_place(const attn_tensor *t) {
    return t->stride[3] == 1 && t->stride[1] >= t->shape[3] && t->stride[1] <= INT32_MAX;
}

/* Points the workspace at rows [i0, i0 + rows) of query head h of Q and dO (in place when
 * their rows are unit-stride, else as contiguous copies) and loads their LSE and D. */
static void load_query_tile(const backward_plan *plan, backward_workspace *workspace, int64_t b,
                            int64_t h, int64_t i0, int rows) {
    const int64_t Dk = plan->problem.key_dim, Dv = plan->problem.value_dim;
    const int64_t Tq = plan->problem.query_length, Hq = plan->problem.query_heads;
    const bool query_in_place = rows_usable_in_place(plan->q);
    const bool dout_in_place = rows_usable_in_place(plan->dout);
    workspace->query_tile = query_in_place ? attn_f32_at4(plan->q, b, i0, h, 0)
                                           : workspace->query_rows;
    workspace->query_tile_stride = query_in_place ? (int)plan->q->stride[1] : (int)Dk;
    workspace->dout_tile = dout_in_place ? attn_f32_at4(plan->dout, b, i0, h, 0)
                                         : workspace->dout_rows;
    workspace->dout_tile_stride = dout_in_place ? (int)plan->dout->stride[1] : (int)Dv;
    for (int r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        if (!query_in_place)
            copy_row(attn_f32_at4(plan->q, b, i, h, 0), plan->q->stride[3], Dk,
                     workspace->query_rows + r * Dk);
        if (!dout_in_place)
            copy_row(attn_f32_at4(plan->dout, b, i, h, 0), plan->dout->stride[3], Dv,
                     workspace->dout_rows + r * Dv);
        workspace->row_lse[r] = *attn_f32_at3(plan->lse, b, h, i);
        workspace->row_dot[r] = plan->row_dot[(b * Hq + h) * Tq + i];
    }
}

/* Packs keys [j0, j0 + count) of KV head kv_head as "keys" for score_tile (K for S, and V
 * for dP). */
static void pack_key_tile(const backward_plan *plan, backward_workspace *workspace, int64_t b,
                          int64_t kv_head, int64_t j0, int count) {
    const attn_kernel_table *kernels = plan->kernels;
    const attn_tensor *k = plan->k, *v = plan->v;
    kernels->pack_keys(count, (int)plan->problem.key_dim, attn_f32_at4(k, b, j0, kv_head, 0),
                       k->stride[1], k->stride[3], workspace->packed_keys);
    kernels->pack_keys(count, (int)plan->problem.value_dim, attn_f32_at4(v, b, j0, kv_head, 0),
                       v->stride[1], v->stride[3], workspace->packed_values_as_keys);
}

/*
 * For the tile rows [i0, i0 + rows) x keys [j0, j0 + count) of (b, h), with the query tile
 * loaded and the key tile packed, computes
 *   probabilities  P  = exp(S - lse)          (0 where not allowed or the row is empty)
 *   score_gradient dS = P * (dP - D), then times (1 - tanh^2) when soft-capping
 * and, when bias_rows is not NULL, adds dS (before the soft-cap factor) into the bias
 * gradient rows: bias_rows[r * bias_row_stride + (j - j0) * bias_column_stride].
 */
static void tile_score_gradients(const backward_plan *plan, backward_workspace *workspace,
                                 int64_t b, int64_t h, int64_t i0, int rows, int64_t j0,
                                 int count, attn_tile_class tile_class, float *bias_rows,
                                 int64_t bias_row_stride, int64_t bias_column_stride) {
    const attn_kernel_table *kernels = plan->kernels;
    const attn_mask_context *mask = plan->mask;
    const int stride = plan->tile_k;
    const float scale = plan->scale, softcap = plan->softcap;
    float *probabilities = workspace->probabilities;
    float *score_gradient = workspace->score_gradient;

    /* S = Q K^T, then the logit pipeline and P = exp(x - lse), row by row. */
    kernels->score_tile(rows, count, (int)plan->problem.key_dim, workspace->query_tile,
                        workspace->query_tile_stride, workspace->packed_keys, probabilities,
                        stride);
    const bool needs_predicate = tile_class == ATTN_TILE_PARTIAL;
    /* Without soft-cap, bias, ALiBi or predicate, softmax_step applies the scale itself. */
    const bool transform_here = softcap > 0.0f || mask->has_additive || needs_predicate;
    for (int r = 0; r < rows; ++r) {
        float *row = probabilities + (size_t)r * stride;
        workspace->step_max[r] = workspace->row_lse[r];
        workspace->step_sum[r] = 0.0f;
        if (workspace->row_lse[r] == -INFINITY) { /* empty row: P = 0, all its gradients 0 */
            for (int c = 0; c < count; ++c) row[c] = -INFINITY;
            if (softcap > 0.0f) /* defined, so that dS = 0 * derivative stays 0 */
                memset(workspace->softcap_derivative + (size_t)r * stride, 0,
                       (size_t)count * sizeof(float));
            continue;
        }
        if (!transform_here) continue;
        if (softcap > 0.0f) {
            float *derivative = workspace->softcap_derivative + (size_t)r * stride;
            for (int c = 0; c < count; ++c) {
                const float t = tanhf(row[c] * scale / softcap);
                row[c] = softcap * t;
                derivative[c] = 1.0f - t * t;
            }
        } else {
            for (int c = 0; c < count; ++c) row[c] *= scale;
        }
        if (mask->has_additive)
            for (int c = 0; c < count; ++c)
                row[c] += attn_mask_additive(mask, b, h, i0 + r, j0 + c); /* -inf = masked */
        if (needs_predicate)
            for (int c = 0; c < count; ++c)
                if (!attn_mask_allowed(mask, b, h, i0 + r, j0 + c)) row[c] = -INFINITY;
    }
    /* P = exp(x - lse) with the kernel's vectorised exp: one softmax step whose running max
     * starts at the LSE computes exp(x - max(lse, max_c x)), which is exp(x - lse) since
     * lse >= max_c x (up to rounding, where it can only lower P by an ulp-sized factor);
     * masked and empty entries (-inf) give exactly 0. */
    kernels->softmax_step(rows, count, probabilities, stride, transform_here ? 1.0f : scale, 0.0f,
                          workspace->step_max, workspace->step_sum, workspace->step_rescale);

    /* dP = dO V^T, then dS = P * (dP - D). */
    kernels->score_tile(rows, count, (int)plan->problem.value_dim, workspace->dout_tile,
                        workspace->dout_tile_stride, workspace->packed_values_as_keys,
                        score_gradient, stride);
    for (int r = 0; r < rows; ++r) {
        const float *probability_row = probabilities + (size_t)r * stride;
        float *row = score_gradient + (size_t)r * stride;
        const float row_dot = workspace->row_dot[r];
        for (int c = 0; c < count; ++c) row[c] = probability_row[c] * (row[c] - row_dot);
        if (bias_rows != NULL) {
            float *bias_row = bias_rows + r * bias_row_stride;
            for (int c = 0; c < count; ++c) bias_row[c * bias_column_stride] += row[c];
        }
        if (softcap > 0.0f) {
            const float *derivative = workspace->softcap_derivative + (size_t)r * stride;
            for (int c = 0; c < count; ++c) row[c] *= derivative[c];
        }
    }
}

/* transposed[c * tile_q + r] = source[r * tile_k + c] for r < rows, c < count. */
static void transpose_tile(const backward_plan *plan, const float *source, int rows, int count,
                           float *transposed) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < count; ++c)
            transposed[(size_t)c * plan->tile_q + r] = source[(size_t)r * plan->tile_k + c];
}

/* ---- pass 1: dK and dV, one task per (b, kv head, key tile) ------------------------------- */

static void key_tile_gradients(const backward_plan *plan, backward_workspace *workspace,
                               int64_t b, int64_t kv_head, int64_t j0, int count) {
    const attn_kernel_table *kernels = plan->kernels;
    const int64_t Tq = plan->problem.query_length, G = plan->problem.group_size;
    const int Dk = (int)plan->problem.key_dim, Dv = (int)plan->problem.value_dim;
    memset(workspace->key_accumulator, 0, (size_t)count * Dk * sizeof(float));
    memset(workspace->value_accumulator, 0, (size_t)count * Dv * sizeof(float));
    pack_key_tile(plan, workspace, b, kv_head, j0, count);

    for (int64_t h = kv_head * G; h < (kv_head + 1) * G; ++h)
        for (int64_t i0 = 0; i0 < Tq; i0 += plan->tile_q) {
            const int rows = (int)(Tq - i0 < plan->tile_q ? Tq - i0 : plan->tile_q);
            const attn_tile_class tile_class =
                attn_mask_classify_tile(plan->mask, b, h, i0, i0 + rows, j0, j0 + count);
            if (tile_class == ATTN_TILE_EMPTY) continue;
            load_query_tile(plan, workspace, b, h, i0, rows);
            tile_score_gradients(plan, workspace, b, h, i0, rows, j0, count, tile_class, NULL, 0,
                                 0);
            /* dV += P^T dO */
            transpose_tile(plan, workspace->probabilities, rows, count, workspace->transposed);
            kernels->pack_values(rows, Dv, workspace->dout_tile, workspace->dout_tile_stride, 1,
                                 workspace->packed_dout_values);
            kernels->accumulate_values(count, rows, Dv, workspace->transposed, plan->tile_q,
                                       workspace->packed_dout_values,
                                       workspace->value_accumulator, Dv);
            /* dK += dS^T Q   (times the scale, applied once when writing) */
            transpose_tile(plan, workspace->score_gradient, rows, count, workspace->transposed);
            kernels->pack_values(rows, Dk, workspace->query_tile, workspace->query_tile_stride, 1,
                                 workspace->packed_query_values);
            kernels->accumulate_values(count, rows, Dk, workspace->transposed, plan->tile_q,
                                       workspace->packed_query_values,
                                       workspace->key_accumulator, Dk);
        }

    for (int c = 0; c < count; ++c) {
        for (int d = 0; d < Dk; ++d)
            *attn_f32_at4(plan->dk, b, j0 + c, kv_head, d) =
                plan->scale * workspace->key_accumulator[(size_t)c * Dk + d];
        for (int e = 0; e < Dv; ++e)
            *attn_f32_at4(plan->dv, b, j0 + c, kv_head, e) =
                workspace->value_accumulator[(size_t)c * Dv + e];
    }
}

/* ---- pass 2: dQ (and d bias), one task per (bias batch, bias head, query tile) ------------ */

/* dQ rows [i0, i0 + rows) of (b, h); adds their dS into the bias gradient rows when given. */
static void query_tile_gradients(const backward_plan *plan, backward_workspace *workspace,
                                 int64_t b, int64_t h, int64_t i0, int rows,
                                 int64_t bias_b, int64_t bias_h) {
    const attn_kernel_table *kernels = plan->kernels;
    const int64_t Tk = plan->problem.key_length, kv_head = h / plan->problem.group_size;
    const int Dk = (int)plan->problem.key_dim;
    memset(workspace->query_accumulator, 0, (size_t)rows * Dk * sizeof(float));
    load_query_tile(plan, workspace, b, h, i0, rows);

    /* Only the key tiles the causal / window band and the key length can reach. */
    int64_t key_begin, key_end;
    attn_mask_candidate_keys(plan->mask, b, i0, i0 + rows, &key_begin, &key_end);
    for (int64_t j0 = key_begin / plan->tile_k * plan->tile_k; j0 < key_end; j0 += plan->tile_k) {
        const int count = (int)(Tk - j0 < plan->tile_k ? Tk - j0 : plan->tile_k);
        const attn_tile_class tile_class =
            attn_mask_classify_tile(plan->mask, b, h, i0, i0 + rows, j0, j0 + count);
        if (tile_class == ATTN_TILE_EMPTY) continue;
        pack_key_tile(plan, workspace, b, kv_head, j0, count);
        float *bias_rows = NULL;
        if (plan->dbias != NULL) bias_rows = attn_f32_at4(plan->dbias, bias_b, bias_h, i0, j0);
        tile_score_gradients(plan, workspace, b, h, i0, rows, j0, count, tile_class, bias_rows,
                             plan->dbias ? plan->dbias->stride[2] : 0,
                             plan->dbias ? plan->dbias->stride[3] : 0);
        /* dQ += dS K   (times the scale, applied once when writing) */
        kernels->pack_values(count, Dk, attn_f32_at4(plan->k, b, j0, kv_head, 0),
                             plan->k->stride[1], plan->k->stride[3],
                             workspace->packed_keys_as_values);
        kernels->accumulate_values(rows, count, Dk, workspace->score_gradient, plan->tile_k,
                                   workspace->packed_keys_as_values,
                                   workspace->query_accumulator, Dk);
    }
    for (int r = 0; r < rows; ++r)
        for (int d = 0; d < Dk; ++d)
            *attn_f32_at4(plan->dq, b, i0 + r, h, d) =
                plan->scale * workspace->query_accumulator[(size_t)r * Dk + d];
}

/* ---- the public entry point ------------------------------------------------------------- */

attn_status attn_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                          const attn_tensor *out, const attn_tensor *lse,
                          const attn_tensor *dout, const attn_options *options, attn_tensor *dq,
                          attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                          attn_error *error) {
    backward_plan plan;
    memset(&plan, 0, sizeof plan);
    attn_status status = attn_backward_validate(q, k, v, out, lse, dout, options, dq, dk, dv,
                                                dbias, &plan.problem, error);
    if (status != ATTN_OK) return status;
    status = attn_select_kernels(options->kernel, &plan.kernels, error);
    if (status != ATTN_OK) return status;

    plan.q = q, plan.k = k, plan.v = v, plan.out = out, plan.lse = lse, plan.dout = dout;
    plan.dq = dq, plan.dk = dk, plan.dv = dv, plan.dbias = dbias;
    plan.scale = plan.problem.scale;
    plan.softcap = options->softcap;
    plan.tile_q = options->tile_q > 0 ? options->tile_q : plan.kernels->tile_q;
    plan.tile_k = options->tile_k > 0 ? options->tile_k : plan.kernels->tile_k;
    const int64_t B = plan.problem.batch, Tq = plan.problem.query_length;
    const int64_t Tk = plan.problem.key_length, Hq = plan.problem.query_heads;
    const int64_t Hkv = plan.problem.kv_heads;
    if (plan.tile_q > Tq) plan.tile_q = (int)Tq;
    if (plan.tile_k > Tk) plan.tile_k = (int)Tk;
    /* Pass 2 packs each K / V tile once per block of query rows: blocks of up to 4 tiles keep
     * the packing cost small while the score buffers ([block_q][tile_k]) stay in L2. */
    plan.block_q = plan.tile_q;
    while (plan.block_q < 4 * plan.tile_q && plan.block_q < Tq &&
           (int64_t)(plan.block_q + plan.tile_q) * plan.tile_k <= PASS2_SCORE_FLOATS)
        plan.block_q += plan.tile_q;
    if (plan.block_q > Tq) plan.block_q = (int)Tq;
    const int threads = attn_thread_count(options->num_threads);
    /* The kernels index tiles with int: a tile of the largest dimension must fit. */
    const int64_t largest_dim = plan.problem.key_dim > plan.problem.value_dim
                                    ? plan.problem.key_dim : plan.problem.value_dim;
    const int64_t largest_tile = plan.block_q > plan.tile_k ? plan.block_q : plan.tile_k;
    if (largest_dim > INT32_MAX / 16 / largest_tile)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "head dimension %lld: too large for the backward's tiles of %lld rows",
                         (long long)largest_dim, (long long)largest_tile);

    /* Working memory: D [B][Hq][Tq] plus one workspace per thread, all overflow-checked. */
    size_t sizes[WORKSPACE_BUFFERS], workspace_floats = 0, row_dot_floats, total_bytes;
    workspace_sizes(&plan, sizes);
    bool fits = true;
    for (int s = 0; s < WORKSPACE_BUFFERS; ++s) fits = fits && attn_add_size(workspace_floats,
                                                              round_to_line(sizes[s]),
                                                              &workspace_floats);
    int64_t row_dot_count;
    fits = fits && attn_mul_i64(B * Hq, Tq, &row_dot_count);
    row_dot_floats = fits ? round_to_line((size_t)row_dot_count) : 0;
    size_t all_floats;
    fits = fits && attn_mul_size(workspace_floats, (size_t)threads, &all_floats) &&
           attn_add_size(all_floats, row_dot_floats, &all_floats) &&
           attn_mul_size(all_floats, sizeof(float), &total_bytes);
    if (!fits)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "backward working memory for B*Hq*Tq = %lld*%lld*%lld overflows",
                         (long long)B, (long long)Hq, (long long)Tq);
    if (options->memory_limit_bytes > 0 && total_bytes > options->memory_limit_bytes)
        return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                         "options.memory_limit_bytes = %zu: the backward needs %zu bytes",
                         options->memory_limit_bytes, total_bytes);

    attn_mask_context mask;
    status = attn_mask_context_init(&mask, options, &plan.problem, error);
    if (status != ATTN_OK) return status;
    plan.mask = &mask;
    float *memory = attn_aligned_alloc(total_bytes);
    if (memory == NULL) {
        attn_mask_context_free(&mask);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "the backward's %zu bytes of working memory could not be allocated",
                         total_bytes);
    }
    plan.row_dot = memory;
    compute_row_dots(&plan, threads);

    /* Pass 1: dK, dV. */
    const int64_t key_tiles = (Tk + plan.tile_k - 1) / plan.tile_k;
    const int64_t key_tasks = B * Hkv * key_tiles;
    /* Pass 2: dQ (+ d bias). A broadcast bias dimension folds that dimension into the task. */
    const int64_t query_blocks = (Tq + plan.block_q - 1) / plan.block_q;
    const int64_t bias_batches = (dbias && dbias->shape[0] == 1) ? 1 : B;
    const int64_t bias_heads = (dbias && dbias->shape[1] == 1) ? 1 : Hq;
    const int64_t query_tasks = bias_batches * bias_heads * query_blocks;

#pragma omp parallel num_threads(threads)
    {
        backward_workspace workspace;
        assign_workspace(sizes, memory + row_dot_floats + workspace_floats * omp_get_thread_num(),
                         &workspace);
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < key_tasks; ++task) {
            const int64_t b = task / (Hkv * key_tiles);
            const int64_t kv_head = (task / key_tiles) % Hkv;
            const int64_t j0 = (task % key_tiles) * plan.tile_k;
            const int count = (int)(Tk - j0 < plan.tile_k ? Tk - j0 : plan.tile_k);
            key_tile_gradients(&plan, &workspace, b, kv_head, j0, count);
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < query_tasks; ++task) {
            const int64_t task_b = task / (bias_heads * query_blocks);
            const int64_t task_h = (task / query_blocks) % bias_heads;
            const int64_t i0 = (task % query_blocks) * plan.block_q;
            const int rows = (int)(Tq - i0 < plan.block_q ? Tq - i0 : plan.block_q);
            /* The (b, h) this task owns: one, or every one a broadcast bias row sums over. */
            const int64_t b_first = bias_batches == 1 && B > 1 ? 0 : task_b;
            const int64_t b_last = bias_batches == 1 && B > 1 ? B : task_b + 1;
            const int64_t h_first = bias_heads == 1 && Hq > 1 ? 0 : task_h;
            const int64_t h_last = bias_heads == 1 && Hq > 1 ? Hq : task_h + 1;
            if (dbias != NULL)
                for (int r = 0; r < rows; ++r)
                    for (int64_t j = 0; j < Tk; ++j)
                        *attn_f32_at4(dbias, task_b, task_h, i0 + r, j) = 0.0f;
            for (int64_t b = b_first; b < b_last; ++b)
                for (int64_t h = h_first; h < h_last; ++h)
                    query_tile_gradients(&plan, &workspace, b, h, i0, rows, task_b, task_h);
        }
    }

    attn_aligned_free(memory);
    attn_mask_context_free(&mask);
    return ATTN_OK;
}
