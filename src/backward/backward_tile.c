/*
 * backward_tile.c — the work of one key tile of the tiled backward (flash_backward.c runs the
 * schedule): for every query tile that can see the key tile, recompute
 *   S = Q Kᵀ, P = exp(S' - lse), dP = dO Vᵀ, dS = P (dP - D) (· soft-cap derivative)
 * and accumulate the three products
 *   dV += Pᵀ dO,   dK += dSᵀ Q,   dQ_partial += dS K
 * S and dP go through the forward kernel table's score_tile (K and V packed once per key
 * tile); the products and elementwise steps through the backward table, which reads P and dS
 * in place. 10·D flops per allowed pair (with Dk = Dv = D), nothing of size Tq x Tk stored.
 */
#include <math.h>
#include <string.h>

#include "flash_backward.h"

#include "../mask/logits.h"

#include "../core/internal.h"

/* Rounds a float count up to a whole number of 64-byte lines. */
static size_t round_to_line(size_t floats) { return (floats + 15) / 16 * 16; }

enum { WORKSPACE_BUFFERS = 19 };

/* Floats between consecutive packed key blocks of dimension dim (whole 64-byte lines). */
static size_t packed_block_floats(const backward_plan *plan, int dim) {
    const int block = plan->tile_k < plan->key_block ? plan->tile_k : plan->key_block;
    return round_to_line(plan->kernels->forward.packed_keys_floats(block, dim));
}

/* The floats each buffer needs, in the order backward_workspace_assign carves them. */
static void workspace_sizes(const backward_plan *plan, size_t sizes[WORKSPACE_BUFFERS]) {
    const size_t tq = (size_t)plan->tile_q, tk = (size_t)plan->tile_k;
    const int dk = (int)plan->problem.key_dim, dv = (int)plan->problem.value_dim;
    const size_t slots = (size_t)plan->query_tile_slots * (size_t)plan->problem.group_size;
    sizes[0] = slots * tq * ATTN_BACKWARD_ROW_FLOATS((size_t)dk);
    sizes[1] = slots * tq * ATTN_BACKWARD_ROW_FLOATS((size_t)dv);
    sizes[2] = tk * ATTN_BACKWARD_ROW_FLOATS((size_t)dk);
    sizes[3] = slots * tq;
    sizes[4] = slots * tq;
    const size_t key_blocks = (tk + plan->key_block - 1) / plan->key_block;
    sizes[5] = key_blocks * packed_block_floats(plan, dk);
    sizes[6] = key_blocks * packed_block_floats(plan, dv);
    sizes[7] = tq * tk;
    sizes[8] = tq * tk;
    sizes[9] = plan->softcap > 0.0f ? tq * tk : 0;
    sizes[10] = tk;
    sizes[11] = tk; /* bytes only, counted as floats */
    sizes[12] = tk * (size_t)dk;
    sizes[13] = tk * (size_t)dv;
    sizes[14] = plan->v->dtype != ATTN_DTYPE_F32 ? tk * (size_t)dv : 0;
    sizes[15] = slots * 3 * sizeof(int64_t) / sizeof(float); /* the slots' tags */
    sizes[16] = plan->task_partials ? (size_t)plan->problem.group_size *
                                          (size_t)plan->task_partial_rows * (size_t)dk
                                    : 0;
    /* the double row sums of backward_query_rows_dots (16-bit O only) */
    sizes[17] = plan->out->dtype != ATTN_DTYPE_F32
                    ? 2 * (size_t)plan->problem.group_size * (size_t)plan->dot_task_tiles * tq
                    : 0;
    sizes[18] = plan->dropout.active ? tq * tk : 0;
}

size_t backward_workspace_floats(const backward_plan *plan) {
    size_t sizes[WORKSPACE_BUFFERS], total = 0;
    workspace_sizes(plan, sizes);
    /* Tiles are bounded (attn_backward checks tile x dim fits an int), so no overflow. */
    for (int s = 0; s < WORKSPACE_BUFFERS; ++s) total += round_to_line(sizes[s]);
    return total;
}

void backward_workspace_assign(const backward_plan *plan, float *base,
                               backward_workspace *workspace) {
    size_t sizes[WORKSPACE_BUFFERS];
    workspace_sizes(plan, sizes);
    float *slots[WORKSPACE_BUFFERS];
    size_t offset = 0;
    for (int s = 0; s < WORKSPACE_BUFFERS; ++s) {
        slots[s] = base + offset;
        offset += round_to_line(sizes[s]);
    }
    workspace->query_rows = workspace->slot_queries = slots[0];
    workspace->dout_rows = workspace->slot_douts = slots[1];
    workspace->key_rows = slots[2];
    workspace->row_lse = workspace->slot_lse = slots[3];
    workspace->row_dot = workspace->slot_dots = slots[4];
    workspace->slot_tags = (int64_t *)slots[15];
    for (int64_t n = 0; n < plan->query_tile_slots * plan->problem.group_size; ++n)
        workspace->slot_tags[3 * n] = -1;
    workspace->packed_keys = slots[5];
    workspace->packed_values_as_keys = slots[6];
    workspace->probabilities = slots[7];
    workspace->score_gradient = slots[8];
    workspace->softcap_derivative = slots[9];
    workspace->additive_row = slots[10];
    workspace->allowed_row = (uint8_t *)slots[11];
    workspace->key_accumulator = slots[12];
    workspace->value_accumulator = slots[13];
    workspace->value_rows = slots[14];
    workspace->task_partials = slots[16];
    workspace->dot_sums = (double *)slots[17];
    workspace->dropout_factors = slots[18];
    workspace->overflowed = 0;
    workspace->query_overflowed = 0;
}

/* target[e] = t[a, b, c, e] (widened to fp32, exactly: the registry's conversions) for
 * e < count, then zeros up to `padded` floats. */
static void copy_row(const backward_plan *plan, const attn_tensor *t, int64_t a, int64_t b,
                     int64_t c, int64_t count, int64_t padded, float *target) {
    const int64_t stride = t->stride[3];
    if (t->dtype == ATTN_DTYPE_F32 && stride == 1) {
        memcpy(target, attn_f32_at4(t, a, b, c, 0), (size_t)count * sizeof(float));
    } else if (t->dtype == ATTN_DTYPE_F32) {
        const float *source = attn_f32_at4(t, a, b, c, 0);
        for (int64_t e = 0; e < count; ++e) target[e] = source[e * stride];
    } else {
        const uint16_t *source = (const uint16_t *)t->data + backward_offset(t, a, b, c, 0);
        const attn_lowp_convert *convert = &plan->kernels->convert;
        if (t->dtype == ATTN_DTYPE_BF16)
            convert->bf16_to_f32_rows(1, (int)count, source, 0, stride, target, 0);
        else
            convert->f16_to_f32_rows(1, (int)count, source, 0, stride, target, 0);
    }
    for (int64_t e = count; e < padded; ++e) target[e] = 0.0f;
}

/* Points the workspace at the copies of rows [i0, i0 + rows) of query head h: Q and dO in
 * padded rows (ATTN_BACKWARD_ROW_FLOATS(D) apart), their LSE and D; copies them into their
 * slot unless it holds them already (backward_workspace). */
static void load_query_tile(const backward_plan *plan, backward_workspace *workspace, int64_t b,
                            int64_t h, int64_t i0, int rows) {
    const int64_t Dk = plan->problem.key_dim, Dv = plan->problem.value_dim;
    const int64_t Tq = plan->problem.query_length, Hq = plan->problem.query_heads;
    const int64_t slot = h % plan->problem.group_size * plan->query_tile_slots +
                         i0 / plan->tile_q % plan->query_tile_slots;
    const size_t tile_q = (size_t)plan->tile_q;
    workspace->query_rows = workspace->slot_queries + slot * tile_q * ATTN_BACKWARD_ROW_FLOATS(Dk);
    workspace->dout_rows = workspace->slot_douts + slot * tile_q * ATTN_BACKWARD_ROW_FLOATS(Dv);
    workspace->row_lse = workspace->slot_lse + slot * tile_q;
    workspace->row_dot = workspace->slot_dots + slot * tile_q;
    int64_t *tag = workspace->slot_tags + 3 * slot;
    if (tag[0] == b && tag[1] == h && tag[2] == i0) return;
    tag[0] = b, tag[1] = h, tag[2] = i0;
    for (int r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        copy_row(plan, plan->q, b, i, h, Dk, ATTN_BACKWARD_ROW_FLOATS(Dk),
                 workspace->query_rows + r * ATTN_BACKWARD_ROW_FLOATS(Dk));
        copy_row(plan, plan->dout, b, i, h, Dv, ATTN_BACKWARD_ROW_FLOATS(Dv),
                 workspace->dout_rows + r * ATTN_BACKWARD_ROW_FLOATS(Dv));
        workspace->row_lse[r] = *attn_f32_at3(plan->lse, b, h, i);
        workspace->row_dot[r] = plan->row_dot[(b * Hq + h) * Tq + i];
    }
}

/* Packs keys [j0, j0 + count) of KV head kv_head as "keys" for score_tile (K for S, V for
 * dP), block by block of plan->key_block keys, and copies the K rows to padded rows (for
 * dQ += dS K). */
static void load_key_tile(const backward_plan *plan, backward_workspace *workspace, int64_t b,
                          int64_t kv_head, int64_t j0, int count) {
    const attn_forward_kernels *kernels = &plan->kernels->forward;
    const attn_tensor *k = plan->k, *v = plan->v;
    const int64_t Dk = plan->problem.key_dim, Dv = plan->problem.value_dim;
    const size_t key_block_floats = packed_block_floats(plan, (int)Dk);
    const size_t value_block_floats = packed_block_floats(plan, (int)Dv);
    for (int c = 0; c < count; ++c)
        copy_row(plan, k, b, j0 + c, kv_head, Dk, ATTN_BACKWARD_ROW_FLOATS(Dk),
                 workspace->key_rows + c * ATTN_BACKWARD_ROW_FLOATS(Dk));
    /* 16-bit K / V: packed from the widened rows (K: key_rows; V: value_rows). */
    const bool widened = k->dtype != ATTN_DTYPE_F32;
    if (widened)
        for (int c = 0; c < count; ++c)
            copy_row(plan, v, b, j0 + c, kv_head, Dv, Dv, workspace->value_rows + c * Dv);
    for (int first = 0, block = 0; first < count; first += plan->key_block, ++block) {
        const int keys = count - first < plan->key_block ? count - first : plan->key_block;
        if (widened) {
            kernels->pack_keys(keys, (int)Dk,
                               workspace->key_rows + (size_t)first * ATTN_BACKWARD_ROW_FLOATS(Dk),
                               ATTN_BACKWARD_ROW_FLOATS(Dk), 1,
                               workspace->packed_keys + block * key_block_floats);
            kernels->pack_keys(keys, (int)Dv, workspace->value_rows + (size_t)first * Dv, Dv, 1,
                               workspace->packed_values_as_keys + block * value_block_floats);
            continue;
        }
        kernels->pack_keys(keys, (int)Dk, attn_f32_at4(k, b, j0 + first, kv_head, 0),
                           k->stride[1], k->stride[3],
                           workspace->packed_keys + block * key_block_floats);
        kernels->pack_keys(keys, (int)Dv, attn_f32_at4(v, b, j0 + first, kv_head, 0),
                           v->stride[1], v->stride[3],
                           workspace->packed_values_as_keys + block * value_block_floats);
    }
}

/* scores[r][c] = row r of `rows` . key c, for the columns [first_column, first_column +
 * columns) of the key tile, one packed key block at a time (first_column is a block start;
 * the range ends at a block end or at the tile's end, so every block is used with the key
 * count it was packed with). rows: [rows][row_stride]; scores: [rows][tile_k]. */
static void score_columns(const backward_plan *plan, int rows, int first_column, int columns,
                          int dim, const float *row_data, int row_stride,
                          const float *packed_blocks, float *scores) {
    const size_t block_floats = packed_block_floats(plan, dim);
    const int end = first_column + columns;
    for (int first = first_column; first < end; first += plan->key_block) {
        const int keys = end - first < plan->key_block ? end - first : plan->key_block;
        plan->kernels->forward.score_tile(rows, keys, dim, row_data, row_stride,
                                  packed_blocks + (first / plan->key_block) * block_floats,
                                  scores + first, plan->tile_k);
    }
}

/*
 * For the rows [i0, i0 + rows) of (b, h) and the columns [first_column, first_column +
 * columns) of the key tile starting at key j0, with the query tile loaded and the key tile
 * packed, computes (in those columns of the tile buffers)
 *   probabilities  P  = exp(S' - lse)        (0 where not allowed or the row is empty)
 *   score_gradient dP = dO V^T
 * where S' is the logit (scale, soft-cap, + bias + ALiBi, -inf where not allowed), and with
 * a soft-cap its derivative 1 - tanh^2 (softcap_derivative).
 */
static void tile_probabilities(const backward_plan *plan, backward_workspace *workspace,
                               int64_t b, int64_t h, int64_t i0, int rows, int64_t j0,
                               int first_column, int columns, attn_tile_class tile_class) {
    const attn_mask_context *mask = plan->mask;
    const attn_backward_kernels *products = &plan->kernels->backward;
    const int stride = plan->tile_k;
    const float scale = plan->scale, softcap = plan->softcap;
    const int Dk = (int)plan->problem.key_dim, Dv = (int)plan->problem.value_dim;
    const int64_t first_key = j0 + first_column;
    float *probabilities = workspace->probabilities + first_column;
    float *softcap_derivative = workspace->softcap_derivative + first_column;

    score_columns(plan, rows, first_column, columns, Dk, workspace->query_rows,
                  ATTN_BACKWARD_ROW_FLOATS(Dk), workspace->packed_keys,
                  workspace->probabilities);
    const bool needs_predicate = tile_class == ATTN_TILE_PARTIAL;
    /* Without soft-cap, bias, ALiBi or predicate, the exp kernel applies the scale itself;
     * otherwise the logit pipeline (mask/logits.h) does it, with the soft-cap derivative. */
    const bool transform_here = softcap > 0.0f || mask->has_additive || needs_predicate;
    const attn_logit_pipeline pipeline = {scale, softcap, mask->has_additive};
    for (int r = 0; r < rows && transform_here; ++r) {
        float *row = probabilities + (size_t)r * stride;
        float *derivative = softcap > 0.0f ? softcap_derivative + (size_t)r * stride : NULL;
        if (workspace->row_lse[r] == -INFINITY) { /* empty row: P = 0, all its gradients 0 */
            if (derivative != NULL) /* defined, so that dS = 0 * derivative stays 0 */
                memset(derivative, 0, (size_t)columns * sizeof(float));
            continue;
        }
        const attn_logit_buffers buffers = {workspace->allowed_row, workspace->additive_row,
                                            derivative, NULL};
        attn_logits_row(mask, &pipeline, tile_class, b, h, i0 + r, first_key, columns, row,
                        &buffers);
    }
    products->probabilities(rows, columns, probabilities, stride, transform_here ? 1.0f : scale,
                            workspace->row_lse);

    score_columns(plan, rows, first_column, columns, Dv, workspace->dout_rows,
                  ATTN_BACKWARD_ROW_FLOATS(Dv), workspace->packed_values_as_keys,
                  workspace->score_gradient);
}

/* The dropout factors (mask/dropout.h: 0 or 1 / (1 - p)) of rows [i0, i0 + rows) x keys
 * [first_key, first_key + columns) of (b, h), into workspace->dropout_factors [rows][tile_k],
 * drawn once per tile for dP and P. */
static void dropout_factors(const backward_plan *plan, backward_workspace *workspace, int64_t b,
                            int64_t h, int64_t i0, int rows, int64_t first_key, int columns) {
    for (int r = 0; r < rows; ++r)
        attn_dropout_row_factors(&plan->dropout, b, h, i0 + r, first_key, columns,
                                 workspace->dropout_factors + (size_t)r * plan->tile_k);
}

/* rows [0, rows) x columns [0, columns) of `tile` (tile_k apart) times the factors: the kept
 * pairs scaled, the dropped ones exactly 0. */
static void dropout_scale(const backward_plan *plan, const backward_workspace *workspace,
                          int rows, int columns, float *tile) {
    for (int r = 0; r < rows; ++r)
        attn_dropout_scale_row(columns, workspace->dropout_factors + (size_t)r * plan->tile_k,
                               tile + (size_t)r * plan->tile_k);
}

/*
 * tile_probabilities, then
 *   score_gradient dS = P * (dP - D), then times (1 - tanh^2) when soft-capping
 * When bias_rows is not NULL (the entry of row i0, key j0 + first_column), adds dS (before
 * the soft-cap factor) into the bias gradient: bias_rows[r * bias_row_stride + c *
 * bias_column_stride] for c < columns.
 */
static void tile_score_gradients(const backward_plan *plan, backward_workspace *workspace,
                                 int64_t b, int64_t h, int64_t i0, int rows, int64_t j0,
                                 int first_column, int columns, attn_tile_class tile_class,
                                 float *bias_rows, int64_t bias_row_stride,
                                 int64_t bias_column_stride) {
    const attn_backward_kernels *products = &plan->kernels->backward;
    const int stride = plan->tile_k;
    const float softcap = plan->softcap;
    float *probabilities = workspace->probabilities + first_column;
    float *score_gradient = workspace->score_gradient + first_column;
    float *softcap_derivative = workspace->softcap_derivative + first_column;
    tile_probabilities(plan, workspace, b, h, i0, rows, j0, first_column, columns, tile_class);
    if (plan->dropout.active) { /* dP <- M dP: O = (M P) V */
        dropout_factors(plan, workspace, b, h, i0, rows, j0 + first_column, columns);
        dropout_scale(plan, workspace, rows, columns, score_gradient);
    }
    products->score_gradient(rows, columns, probabilities, score_gradient, stride,
                             workspace->row_dot);
    if (plan->dropout.active) /* P <- M P, for dV = (M P)ᵀ dO */
        dropout_scale(plan, workspace, rows, columns, probabilities);
    if (bias_rows != NULL)
        for (int r = 0; r < rows; ++r) {
            const float *row = score_gradient + (size_t)r * stride;
            float *bias_row = bias_rows + r * bias_row_stride;
            for (int c = 0; c < columns; ++c) bias_row[c * bias_column_stride] += row[c];
        }
    if (softcap > 0.0f)
        for (int r = 0; r < rows; ++r) {
            float *row = score_gradient + (size_t)r * stride;
            const float *derivative = softcap_derivative + (size_t)r * stride;
            for (int c = 0; c < columns; ++c) /* (0 stays 0: a NaN derivative too) */
                row[c] = row[c] == 0.0f ? 0.0f : row[c] * derivative[c];
        }
}

/* The columns [*first_column, *first_column + *columns) of the key tile [j0, j0 + count)
 * that query rows [i0, i1) of batch b can reach (their causal / window band), widened to
 * whole key blocks; *columns = 0 when none. */
static void reachable_columns(const backward_plan *plan, int64_t b, int64_t i0, int64_t i1,
                              int64_t j0, int count, int *first_column, int *columns) {
    int64_t key_begin, key_end;
    attn_mask_candidate_keys(plan->mask, b, i0, i1, &key_begin, &key_end);
    int64_t first = key_begin - j0 < 0 ? 0 : key_begin - j0;
    int64_t end = key_end - j0 > count ? count : key_end - j0;
    first = first / plan->key_block * plan->key_block;
    end = (end + plan->key_block - 1) / plan->key_block * plan->key_block;
    if (end > count) end = count;
    *first_column = (int)first;
    *columns = end > first ? (int)(end - first) : 0;
}

void backward_key_tile(const backward_plan *plan, backward_workspace *workspace, int64_t b,
                       int64_t kv_head, int64_t j0, int count, int64_t chunk) {
    const attn_backward_kernels *products = &plan->kernels->backward;
    const int64_t Tq = plan->problem.query_length, G = plan->problem.group_size;
    const int Dk = (int)plan->problem.key_dim, Dv = (int)plan->problem.value_dim;
    const int key_row = ATTN_BACKWARD_ROW_FLOATS(Dk), value_row = ATTN_BACKWARD_ROW_FLOATS(Dv);
    const int stride = plan->tile_k;
    const attn_tensor *dbias = plan->dbias;
    memset(workspace->key_accumulator, 0, (size_t)count * Dk * sizeof(float));
    memset(workspace->value_accumulator, 0, (size_t)count * Dv * sizeof(float));
    load_key_tile(plan, workspace, b, kv_head, j0, count);

    for (int64_t h = kv_head * G; h < (kv_head + 1) * G; ++h) {
        /* Only the query tiles the chunk keeps partials for can reach its keys. */
        for (int64_t i0 = plan->chunk_rows_first[chunk]; i0 < plan->chunk_rows_end[chunk];
             i0 += plan->tile_q) {
            const int rows = (int)(Tq - i0 < plan->tile_q ? Tq - i0 : plan->tile_q);
            int first, columns;
            reachable_columns(plan, b, i0, i0 + rows, j0, count, &first, &columns);
            if (columns == 0) continue;
            const attn_tile_class tile_class = attn_mask_classify_tile(
                plan->mask, b, h, i0, i0 + rows, j0 + first, j0 + first + columns);
            if (tile_class == ATTN_TILE_EMPTY) continue;
            load_query_tile(plan, workspace, b, h, i0, rows);
            float *bias_rows = NULL;
            if (dbias != NULL)
                bias_rows = attn_f32_at4(dbias, dbias->shape[0] == 1 ? 0 : b,
                                         dbias->shape[1] == 1 ? 0 : h, i0, j0 + first);
            tile_score_gradients(plan, workspace, b, h, i0, rows, j0, first, columns,
                                 tile_class, bias_rows, dbias ? dbias->stride[2] : 0,
                                 dbias ? dbias->stride[3] : 0);
            /* dV += P^T dO;  dK += dS^T Q;  dQ += dS K   (dK, dQ times the scale later) */
            const float *probabilities = workspace->probabilities + first;
            const float *score_gradient = workspace->score_gradient + first;
            products->accumulate_transposed(columns, rows, Dv, probabilities, stride,
                                            workspace->dout_rows, value_row,
                                            workspace->value_accumulator + (size_t)first * Dv,
                                            Dv);
            products->accumulate_transposed(columns, rows, Dk, score_gradient, stride,
                                            workspace->query_rows, key_row,
                                            workspace->key_accumulator + (size_t)first * Dk,
                                            Dk);
            products->accumulate(rows, columns, Dk, score_gradient, stride,
                                 workspace->key_rows + (size_t)first * key_row, key_row,
                                 plan->task_partials
                                     ? workspace->task_partials +
                                           ((h - kv_head * G) * plan->task_partial_rows + i0 -
                                            plan->chunk_rows_first[chunk]) * Dk
                                     : backward_query_partial(plan, chunk, b, h, i0),
                                 Dk);
        }
    }

    for (int c = 0; c < count; ++c) {
        const int64_t dk_first = backward_offset(plan->dk, b, j0 + c, kv_head, 0);
        const int64_t dv_first = backward_offset(plan->dv, b, j0 + c, kv_head, 0);
        workspace->overflowed += backward_store_row(
            plan->dk, dk_first, Dk, workspace->key_accumulator + (size_t)c * Dk, plan->scale);
        workspace->overflowed += backward_store_row(
            plan->dv, dv_first, Dv, workspace->value_accumulator + (size_t)c * Dv, 1.0f);
    }
}

void backward_query_rows_dots(const backward_plan *plan, backward_workspace *workspace,
                              int64_t b, int64_t kv_head, int64_t first_row, int64_t end_row) {
    const int64_t Tq = plan->problem.query_length, Tk = plan->problem.key_length;
    const int64_t Hq = plan->problem.query_heads, G = plan->problem.group_size;
    const int64_t task_rows = end_row - first_row;
    const int stride = plan->tile_k;
    double *sums = workspace->dot_sums; /* [G][task_rows] */
    for (int64_t n = 0; n < G * task_rows; ++n) sums[n] = 0.0;
    int64_t key_begin, key_end;
    attn_mask_candidate_keys(plan->mask, b, first_row, end_row, &key_begin, &key_end);
    if (key_begin < 0) key_begin = 0;
    if (key_end > Tk) key_end = Tk;
    /* Key tiles of tile_k keys from the first candidate's key block, ascending; each is
     * packed once for all the query tiles of the rows. */
    for (int64_t j0 = key_begin / plan->key_block * plan->key_block; j0 < key_end;
         j0 += plan->tile_k) {
        const int count = (int)(Tk - j0 < plan->tile_k ? Tk - j0 : plan->tile_k);
        bool packed = false;
        for (int64_t i0 = first_row; i0 < end_row; i0 += plan->tile_q) {
            const int rows = (int)(end_row - i0 < plan->tile_q ? end_row - i0 : plan->tile_q);
            int first, columns;
            reachable_columns(plan, b, i0, i0 + rows, j0, count, &first, &columns);
            if (columns == 0) continue;
            for (int64_t g = 0; g < G; ++g) {
                const int64_t h = kv_head * G + g;
                const attn_tile_class tile_class = attn_mask_classify_tile(
                    plan->mask, b, h, i0, i0 + rows, j0 + first, j0 + first + columns);
                if (tile_class == ATTN_TILE_EMPTY) continue;
                if (!packed) load_key_tile(plan, workspace, b, kv_head, j0, count);
                packed = true;
                load_query_tile(plan, workspace, b, h, i0, rows);
                tile_probabilities(plan, workspace, b, h, i0, rows, j0, first, columns,
                                   tile_class);
                if (plan->dropout.active) { /* D = sum_j P_ij M_ij dP_ij */
                    dropout_factors(plan, workspace, b, h, i0, rows, j0 + first, columns);
                    dropout_scale(plan, workspace, rows, columns,
                                  workspace->probabilities + first);
                }
                for (int r = 0; r < rows; ++r) {
                    const float *p = workspace->probabilities + (size_t)r * stride + first;
                    const float *dp = workspace->score_gradient + (size_t)r * stride + first;
                    double sum = 0.0;
                    for (int c = 0; c < columns; ++c) sum += (double)p[c] * dp[c];
                    sums[g * task_rows + i0 - first_row + r] += sum;
                }
            }
        }
    }
    for (int64_t g = 0; g < G; ++g)
        for (int64_t r = 0; r < task_rows; ++r)
            plan->row_dot[(b * Hq + kv_head * G + g) * Tq + first_row + r] =
                (float)sums[g * task_rows + r];
}
