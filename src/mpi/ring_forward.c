/*
 * ring_forward.c — attn_ring_forward: this rank's queries against every rank's K/V block,
 * one block per step, merged by LSE; the next block travels while the current one computes.
 *
 * Message of a block (owner o, n_o tokens): K [B, n_o, Hkv, Dk] then V [B, n_o, Hkv, Dv],
 * contiguous, in one buffer padded to whole units, sent with tag o. BF16 / F16 tensors: the
 * message holds the 16-bit elements as stored (half the bytes on the wire); each rank widens
 * its queries once and every block it computes to fp32 (exact), runs the fp32 blocks and
 * merges in fp32, and rounds O once at the end (docs/precision.md).
 */
#include "ring_internal.h"

#include "../core/internal.h"
#include "../mask/sinks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Working memory of one forward call. */
typedef struct forward_buffers {
    float *block[2];           /* K|V messages: the block being computed and the next one */
    int64_t block_capacity_units;
    float *partial_out;        /* [B, slab rows, Hq, Dv] */
    float *partial_lse;        /* [B, Hq, slab rows] */
    float *own_lse;            /* [B, Hq, n_r] when the caller passed no lse */
    /* 16-bit tensors only: */
    float *widened;            /* the block being computed, widened: K|V as fp32 */
    float *queries;            /* [B, n_r, Hq, Dk] this rank's queries, widened */
    float *merged;             /* [B, n_r, Hq, Dv] the running merge of O in fp32 */
} forward_buffers;

static void free_buffers(forward_buffers *buffers) {
    attn_aligned_free(buffers->block[0]);
    attn_aligned_free(buffers->block[1]);
    attn_aligned_free(buffers->partial_out);
    attn_aligned_free(buffers->partial_lse);
    attn_aligned_free(buffers->own_lse);
    attn_aligned_free(buffers->widened);
    attn_aligned_free(buffers->queries);
    attn_aligned_free(buffers->merged);
    memset(buffers, 0, sizeof *buffers);
}

static attn_status allocate_buffers(const ring_call *call, bool need_lse, forward_buffers *buffers,
                                    attn_error *error) {
    memset(buffers, 0, sizeof *buffers);
    int64_t B = call->batch, Hq = call->query_heads, n_max = call->max_local_length;
    int64_t block_elements = B * n_max * call->kv_heads * (call->key_dim + call->value_dim);
    int64_t block_floats = ring_message_floats(call, block_elements);
    int64_t slab = ring_slab_rows(call->local_length);
    if (slab > call->local_length) slab = call->local_length;
    buffers->block[0] = ring_buffer_alloc(block_floats, &buffers->block_capacity_units);
    buffers->block[1] = ring_buffer_alloc(block_floats, NULL);
    const bool half = call->dtype != ATTN_DTYPE_F32;
    if (half) {
        buffers->widened = ring_buffer_alloc(block_elements, NULL);
        buffers->queries = ring_buffer_alloc(B * call->local_length * Hq * call->key_dim, NULL);
        buffers->merged = ring_buffer_alloc(B * call->local_length * Hq * call->value_dim, NULL);
    }
    buffers->partial_out = ring_buffer_alloc(B * slab * Hq * call->value_dim, NULL);
    buffers->partial_lse = ring_buffer_alloc(B * Hq * slab, NULL);
    if (need_lse) buffers->own_lse = ring_buffer_alloc(B * Hq * call->local_length, NULL);
    if (buffers->block[0] == NULL || buffers->block[1] == NULL || buffers->partial_out == NULL ||
        buffers->partial_lse == NULL || (need_lse && buffers->own_lse == NULL) ||
        (half && (buffers->widened == NULL || buffers->queries == NULL || buffers->merged == NULL))) {
        free_buffers(buffers);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "ring buffers for blocks of up to %lld tokens", (long long)n_max);
    }
    return ATTN_OK;
}

/* Accumulator starts empty: O = 0, LSE = -inf for every row. */
static void clear_accumulator(attn_tensor *out, attn_tensor *lse) {
    for (int64_t b = 0; b < out->shape[0]; ++b)
        for (int64_t i = 0; i < out->shape[1]; ++i)
            for (int64_t h = 0; h < out->shape[2]; ++h)
                for (int64_t d = 0; d < out->shape[3]; ++d) *attn_f32_at4(out, b, i, h, d) = 0.0f;
    for (int64_t b = 0; b < lse->shape[0]; ++b)
        for (int64_t h = 0; h < lse->shape[1]; ++h)
            for (int64_t i = 0; i < lse->shape[2]; ++i) *attn_f32_at3(lse, b, h, i) = -INFINITY;
}

/*
 * Computes this rank's queries against one block and merges the result into (out, lse).
 *   q [B, n_r, Hq, Dk]; block: the owner's K|V message holding key_count tokens at
 *   call->block_positions; out [B, n_r, Hq, Dv] and lse [B, Hq, n_r]: the running merge.
 */
static attn_status compute_block(ring_call *call, const attn_tensor *q, float *block,
                                 int64_t key_count, attn_tensor *out, attn_tensor *lse,
                                 forward_buffers *buffers, ring_transfer *transfer,
                                 attn_ring_stats *stats, attn_error *error) {
    int64_t B = call->batch, Hq = call->query_heads, Hkv = call->kv_heads;
    ring_block_geometry geometry;
    if (!ring_plan_block(call, key_count, stats, &geometry)) return ATTN_OK; /* nothing allowed */
    if (call->dtype != ATTN_DTYPE_F32) { /* a 16-bit message: compute on its fp32 widening */
        ring_widen16((const uint16_t *)block, call->dtype,
                     B * key_count * Hkv * (call->key_dim + call->value_dim), buffers->widened);
        block = buffers->widened;
    }
    attn_tensor keys = ring_view_rows(block, B, key_count, Hkv, call->key_dim,
                                      geometry.column_begin, geometry.column_end);
    attn_tensor values = ring_view_rows(block + B * key_count * Hkv * call->key_dim, B, key_count,
                                        Hkv, call->value_dim, geometry.column_begin,
                                        geometry.column_end);
    /* The call prepared once for the ring (options, execution, kernels), with this block's
     * positions; each slab runs on it. */
    attn_call block_call = call->prepared;
    block_call.options.empty_rows = ATTN_EMPTY_ROWS_ZERO; /* a partial may have rows with no key */
    block_call.options.sinks = NULL; /* folded into the last merge (finish_rows) */
    block_call.options.key_positions = call->block_positions + geometry.column_begin;

    int64_t slab = ring_slab_rows(geometry.row_end - geometry.row_begin);
    for (int64_t row = geometry.row_begin; row < geometry.row_end; row += slab) {
        int64_t row_end = row + slab < geometry.row_end ? row + slab : geometry.row_end;
        int64_t rows = row_end - row;
        attn_tensor queries = ring_restrict(q, 1, row, row_end);
        attn_tensor partial_out = attn_tensor_f32_4d(buffers->partial_out, B, rows, Hq, call->value_dim);
        int64_t lse_shape[3] = {B, Hq, rows};
        attn_tensor partial_lse = attn_tensor_contiguous(buffers->partial_lse, ATTN_DTYPE_F32, 3, lse_shape);
        block_call.options.query_positions = call->local_positions + row;
        attn_status status = attn_forward_run(&block_call, &queries, &keys, &values,
                                              &partial_out, &partial_lse, error);
        if (status != ATTN_OK) return status;
        attn_tensor merged_out = ring_restrict(out, 1, row, row_end);
        attn_tensor merged_lse = ring_restrict(lse, 2, row, row_end);
        const attn_tensor *outs[2] = {&merged_out, &partial_out};
        const attn_tensor *lses[2] = {&merged_lse, &partial_lse};
        status = attn_merge(2, outs, lses, &merged_out, &merged_lse, error);
        if (status != ATTN_OK) return status;
        ring_transfer_poll(transfer);
    }
    return ATTN_OK;
}

/* Applies the caller's empty-row policy to rows no block reached (LSE = -inf), then folds
 * each head's sink into every row (mask/sinks.h). */
static attn_status finish_rows(const ring_call *call, attn_tensor *out, attn_tensor *lse,
                               attn_error *error) {
    const attn_options *options = &call->prepared.options;
    for (int64_t b = 0; b < lse->shape[0]; ++b)
        for (int64_t h = 0; h < lse->shape[1]; ++h)
            for (int64_t i = 0; i < lse->shape[2]; ++i) {
                float *row_lse = attn_f32_at3(lse, b, h, i);
                if (*row_lse == -INFINITY && options->empty_rows == ATTN_EMPTY_ROWS_ERROR)
                    return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                                     "query row (b = %lld, h = %lld, global position %lld) has no "
                                     "allowed key (set options.empty_rows to allow it)",
                                     (long long)b, (long long)h,
                                     (long long)call->local_positions[i]);
                if (*row_lse == -INFINITY && options->empty_rows == ATTN_EMPTY_ROWS_NAN) {
                    *row_lse = NAN;
                    for (int64_t d = 0; d < out->shape[3]; ++d) *attn_f32_at4(out, b, i, h, d) = NAN;
                }
                if (options->sinks == NULL) continue;
                const float factor = attn_sink_fold(row_lse, attn_sink_logit(options, h));
                for (int64_t d = 0; d < out->shape[3]; ++d) *attn_f32_at4(out, b, i, h, d) *= factor;
            }
    return ATTN_OK;
}

/* The P steps. Returns this rank's local status; keeps forwarding blocks after a local
 * compute failure so the other ranks never wait for a message that does not come. */
static attn_status run_ring(ring_call *call, const ring_tensors *tensors, attn_tensor *out,
                            attn_tensor *lse, forward_buffers *buffers, attn_ring_stats *stats,
                            attn_error *error) {
    int64_t B = call->batch, Hkv = call->kv_heads;
    int P = call->rank_count, r = call->rank;
    attn_status compute_status = ATTN_OK;
    int current = 0;
    const int64_t elements_per_token = B * Hkv * (call->key_dim + call->value_dim);
    {   /* The first block is our own: pack K then V (16-bit: as stored). */
        float *block = buffers->block[current];
        if (call->dtype == ATTN_DTYPE_F32) {
            ring_pack(tensors->k, block);
            ring_pack(tensors->v, block + B * call->local_length * Hkv * call->key_dim);
        } else {
            ring_pack16(tensors->k, (uint16_t *)block);
            ring_pack16(tensors->v, (uint16_t *)block + B * call->local_length * Hkv * call->key_dim);
        }
    }
    /* 16-bit queries, widened once (the blocks are widened as they are computed) */
    const attn_tensor *queries = tensors->q;
    attn_tensor widened_queries;
    if (call->dtype != ATTN_DTYPE_F32) {
        widened_queries = attn_tensor_f32_4d(buffers->queries, B, call->local_length,
                                             call->query_heads, call->key_dim);
        attn_tensor_convert(tensors->q, &widened_queries, NULL); /* exact */
        queries = &widened_queries;
    }
    clear_accumulator(out, lse);
    ring_transfer transfer;
    ring_transfer_reset(&transfer);
    int owner = r; /* of the block in hand: ours, then the tag of each received message */
    for (int step = 0; step < P; ++step) {
        int64_t key_count = ring_local_length_of(call, owner);
        if (stats != NULL && stats->step_sources != NULL) stats->step_sources[step] = owner;
        double start = MPI_Wtime();
        if (step + 1 < P) { /* pass this block on and fetch the next one */
            int next_owner = ring_step_owner(r, step + 1, P);
            int64_t next_floats =
                ring_message_floats(call, ring_local_length_of(call, next_owner) * elements_per_token);
            int64_t floats = ring_message_floats(call, key_count * elements_per_token);
            attn_status status = ring_transfer_receive(call, &transfer, buffers->block[1 - current],
                                                       buffers->block_capacity_units,
                                                       ring_units(next_floats), next_owner, error);
            if (status == ATTN_OK)
                status = ring_transfer_send(call, &transfer, buffers->block[current],
                                            ring_units(floats), owner, stats, error);
            if (status != ATTN_OK) return status; /* MPI itself failed: nothing more to do */
        }
        if (compute_status == ATTN_OK) {
            ring_load_block_positions(call, owner);
            compute_status = compute_block(call, queries, buffers->block[current], key_count,
                                           out, lse, buffers, &transfer, stats, error);
        }
        double computed = MPI_Wtime();
        int received_tag = -1;
        attn_error transfer_error;
        attn_status status = ring_transfer_wait(call, &transfer, &received_tag, &transfer_error);
        if (status != ATTN_OK) {
            if (error != NULL) *error = transfer_error;
            return status;
        }
        owner = received_tag; /* checked against the schedule (r - s - 1) mod P by the wait */
        if (stats != NULL) {
            stats->compute_seconds += computed - start;
            stats->wait_seconds += MPI_Wtime() - computed;
        }
        current = 1 - current;
    }
    if (compute_status == ATTN_OK) compute_status = finish_rows(call, out, lse, error);
    return compute_status;
}

/* The fp32 O of this rank's rows, computed again by the forward ring on the call's q, k, v
 * (16-bit: widened, as attn_ring_forward computes them before rounding O): the 16-bit ring
 * backward reads it for D = rowsum(dO * O) instead of the rounded O (ring_backward.c). Rows
 * no block reaches are 0 here, whatever the empty-row policy; sinks are folded in. Collective:
 * every rank calls it, and all return the same status. */
attn_status ring_forward_recompute(ring_call *call, const ring_tensors *tensors, attn_tensor *out,
                                   attn_error *error) {
    attn_error local_error = {ATTN_OK, ""};
    forward_buffers buffers;
    attn_status status = ring_agree(call, allocate_buffers(call, true, &buffers, &local_error),
                                    &local_error, error);
    if (status == ATTN_OK) {
        const int64_t shape[3] = {call->batch, call->query_heads, call->local_length};
        attn_tensor lse = attn_tensor_contiguous(buffers.own_lse, ATTN_DTYPE_F32, 3, shape);
        const attn_empty_rows policy = call->prepared.options.empty_rows;
        call->prepared.options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
        status = run_ring(call, tensors, out, &lse, &buffers, NULL, &local_error);
        call->prepared.options.empty_rows = policy;
        status = ring_agree(call, status, &local_error, error);
    }
    free_buffers(&buffers);
    return status;
}

attn_status attn_ring_forward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_options *options,
                              const attn_ring_layout *layout, attn_tensor *out, attn_tensor *lse,
                              attn_ring_stats *stats, const attn_execution *execution,
                              attn_error *error) {
    ring_tensors tensors = {false, q, k, v, out, lse, NULL, NULL, NULL, NULL};
    ring_call call;
    attn_status status = ring_call_begin(&call, comm, &tensors, options, layout, execution, stats,
                                         error);
    if (status != ATTN_OK) return status;

    attn_error local_error = {ATTN_OK, ""};
    forward_buffers buffers;
    status = ring_agree(&call, allocate_buffers(&call, lse == NULL, &buffers, &local_error),
                        &local_error, error);
    if (status == ATTN_OK) {
        attn_tensor own_lse;
        if (lse == NULL) {
            int64_t shape[3] = {call.batch, call.query_heads, call.local_length};
            own_lse = attn_tensor_contiguous(buffers.own_lse, ATTN_DTYPE_F32, 3, shape);
        }
        /* 16-bit out: the merge runs in fp32, O is rounded once at the end */
        attn_tensor merged = *out;
        if (call.dtype != ATTN_DTYPE_F32)
            merged = attn_tensor_f32_4d(buffers.merged, call.batch, call.local_length,
                                        call.query_heads, call.value_dim);
        status = run_ring(&call, &tensors, &merged, lse != NULL ? lse : &own_lse, &buffers, stats,
                          &local_error);
        if (status == ATTN_OK && call.dtype != ATTN_DTYPE_F32)
            status = attn_tensor_convert(&merged, out, &local_error); /* overflow: an error */
        status = ring_agree(&call, status, &local_error, error);
    }
    free_buffers(&buffers);
    ring_call_finish(&call, stats);
    return status;
}
