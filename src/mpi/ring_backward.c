/*
 * ring_backward.c — attn_ring_backward: gradients of ring attention. Each block's backward
 * uses the final (global) O and LSE of this rank's rows, so no merging is needed: P is rebuilt
 * from the global LSE. dQ accumulates locally. The dK/dV of a block accumulate as the block
 * visits the ranks: rank r adds its contribution to the accumulator it receives from rank r-1
 * (which computed the same block one step earlier) and passes it on; after the last step each
 * accumulator makes one more hop and is home, P hops after it left.
 *
 * Per step, rank r computing block o = (r - s) mod P has four messages in flight while it
 * computes: K|V of block o to r+1 (tag o) and of block o-1 from r-1; the dK|dV accumulator of
 * block o+1 (finished last step) to r+1 (tag P + o+1) and that of block o from r-1 (tag P + o).
 * Accumulators are [dK [B, n_o, Hkv, Dk] | dV [B, n_o, Hkv, Dv]], contiguous.
 *
 * BF16 / F16 tensors: K|V messages hold the 16-bit elements as stored (widened on arrival);
 * q and dout are widened once, and O is computed again in fp32 by one forward ring
 * (ring_forward_recompute), so that D comes from the unrounded O as in the single-process
 * backward; the accumulators travel in fp32; dQ, dK, dV are rounded once at the end — the
 * fp32 ring backward on the same values, given the fp32 ring's O, rounded (docs/precision.md).
 */
#include "ring_internal.h"

#include "../core/internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct backward_buffers {
    float *block[2];          /* K|V messages: the block being computed and the next one */
    int64_t block_capacity_units;
    float *gradient_incoming; /* dK|dV accumulator of the current block, from r-1 */
    float *gradient_own;      /* this rank's contribution to the current block */
    float *gradient_outgoing; /* accumulator of the previous block, to r+1 */
    int64_t gradient_capacity_units;
    float *query_gradient;    /* dQ accumulator [B, n_r, Hq, Dk] */
    float *partial_dq;        /* [B, slab rows, Hq, Dk] */
    float *partial_dk;        /* [B, block columns, Hkv, Dk] */
    float *partial_dv;        /* [B, block columns, Hkv, Dv] */
    /* 16-bit tensors only: */
    float *widened;           /* the K|V block being computed, as fp32 */
    float *queries, *out, *dout; /* this rank's q, out, dout widened */
} backward_buffers;

static void free_buffers(backward_buffers *buffers) {
    float **all[] = {&buffers->block[0], &buffers->block[1], &buffers->gradient_incoming,
                     &buffers->gradient_own, &buffers->gradient_outgoing,
                     &buffers->query_gradient, &buffers->partial_dq, &buffers->partial_dk,
                     &buffers->partial_dv, &buffers->widened, &buffers->queries, &buffers->out,
                     &buffers->dout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        attn_aligned_free(*all[i]);
        *all[i] = NULL;
    }
}

static attn_status allocate_buffers(const ring_call *call, backward_buffers *buffers,
                                    attn_error *error) {
    memset(buffers, 0, sizeof *buffers);
    int64_t B = call->batch, Hq = call->query_heads, Hkv = call->kv_heads;
    int64_t n_max = call->max_local_length, n = call->local_length;
    int64_t block_floats = B * n_max * Hkv * (call->key_dim + call->value_dim);
    int64_t message_floats = ring_message_floats(call, block_floats);
    int64_t slab = ring_slab_rows(n);
    if (slab > n) slab = n;
    buffers->block[0] = ring_buffer_alloc(message_floats, &buffers->block_capacity_units);
    buffers->block[1] = ring_buffer_alloc(message_floats, NULL);
    const bool half = call->dtype != ATTN_DTYPE_F32;
    if (half) {
        buffers->widened = ring_buffer_alloc(block_floats, NULL);
        buffers->queries = ring_buffer_alloc(B * n * Hq * call->key_dim, NULL);
        buffers->out = ring_buffer_alloc(B * n * Hq * call->value_dim, NULL);
        buffers->dout = ring_buffer_alloc(B * n * Hq * call->value_dim, NULL);
    }
    buffers->gradient_incoming = ring_buffer_alloc(block_floats, &buffers->gradient_capacity_units);
    buffers->gradient_own = ring_buffer_alloc(block_floats, NULL);
    buffers->gradient_outgoing = ring_buffer_alloc(block_floats, NULL);
    buffers->query_gradient = ring_buffer_alloc(B * n * Hq * call->key_dim, NULL);
    buffers->partial_dq = ring_buffer_alloc(B * slab * Hq * call->key_dim, NULL);
    buffers->partial_dk = ring_buffer_alloc(B * n_max * Hkv * call->key_dim, NULL);
    buffers->partial_dv = ring_buffer_alloc(B * n_max * Hkv * call->value_dim, NULL);
    if (!buffers->block[0] || !buffers->block[1] || !buffers->gradient_incoming ||
        !buffers->gradient_own || !buffers->gradient_outgoing || !buffers->query_gradient ||
        !buffers->partial_dq || !buffers->partial_dk || !buffers->partial_dv ||
        (half && (!buffers->widened || !buffers->queries || !buffers->out || !buffers->dout))) {
        free_buffers(buffers);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                         "ring backward buffers for blocks of up to %lld tokens", (long long)n_max);
    }
    return ATTN_OK;
}

/* destination[i] += source[i] for the elements of a contiguous [d0, d1, d2, d3] view of
 * `source` into the same-shaped view `destination`. */
static void add_into(attn_tensor *destination, const float *source) {
    int64_t n = 0;
    for (int64_t a = 0; a < destination->shape[0]; ++a)
        for (int64_t b = 0; b < destination->shape[1]; ++b)
            for (int64_t c = 0; c < destination->shape[2]; ++c) {
                float *row = attn_f32_at4(destination, a, b, c, 0);
                for (int64_t d = 0; d < destination->shape[3]; ++d) row[d] += source[n++];
            }
}

/*
 * This rank's contribution to the gradients of one block: adds into buffers->query_gradient
 * (dQ of our rows) and into gradient (dK|dV of the block's key_count tokens, zeroed by the
 * caller). Row slabs poll the pending transfer.
 */
static attn_status compute_block(ring_call *call, const ring_tensors *tensors, float *block,
                                 int64_t key_count, float *gradient, backward_buffers *buffers,
                                 ring_transfer *transfer, attn_ring_stats *stats,
                                 attn_error *error) {
    int64_t B = call->batch, Hq = call->query_heads, Hkv = call->kv_heads;
    int64_t Dk = call->key_dim, Dv = call->value_dim;
    ring_block_geometry geometry;
    if (!ring_plan_block(call, key_count, stats, &geometry)) return ATTN_OK; /* nothing allowed */
    if (call->dtype != ATTN_DTYPE_F32) { /* a 16-bit message: compute on its fp32 widening */
        ring_widen16((const uint16_t *)block, call->dtype, B * key_count * Hkv * (Dk + Dv),
                     buffers->widened);
        block = buffers->widened;
    }
    int64_t column_begin = geometry.column_begin, column_end = geometry.column_end;
    int64_t columns = column_end - column_begin;
    attn_tensor keys = ring_view_rows(block, B, key_count, Hkv, Dk, column_begin, column_end);
    attn_tensor values = ring_view_rows(block + B * key_count * Hkv * Dk, B, key_count, Hkv, Dv,
                                        column_begin, column_end);
    attn_tensor block_dk = ring_view_rows(gradient, B, key_count, Hkv, Dk, column_begin, column_end);
    attn_tensor block_dv = ring_view_rows(gradient + B * key_count * Hkv * Dk, B, key_count, Hkv,
                                          Dv, column_begin, column_end);
    attn_tensor partial_dk = attn_tensor_f32_4d(buffers->partial_dk, B, columns, Hkv, Dk);
    attn_tensor partial_dv = attn_tensor_f32_4d(buffers->partial_dv, B, columns, Hkv, Dv);
    /* The call prepared once for the ring, with this block's positions. */
    attn_call block_call = call->prepared;
    block_call.options.empty_rows = ATTN_EMPTY_ROWS_ZERO; /* no key in this block: zero grads */
    block_call.options.key_positions = call->block_positions + column_begin;

    int64_t slab = ring_slab_rows(geometry.row_end - geometry.row_begin);
    for (int64_t row = geometry.row_begin; row < geometry.row_end; row += slab) {
        int64_t row_end = row + slab < geometry.row_end ? row + slab : geometry.row_end;
        attn_tensor queries = ring_restrict(tensors->q, 1, row, row_end);
        attn_tensor out = ring_restrict(tensors->out, 1, row, row_end);
        attn_tensor lse = ring_restrict(tensors->lse, 2, row, row_end);
        attn_tensor dout = ring_restrict(tensors->dout, 1, row, row_end);
        attn_tensor partial_dq = attn_tensor_f32_4d(buffers->partial_dq, B, row_end - row, Hq, Dk);
        block_call.options.query_positions = call->local_positions + row;
        attn_status status = attn_backward_run(&block_call, &queries, &keys, &values, &out, &lse,
                                               &dout, &partial_dq, &partial_dk, &partial_dv, NULL,
                                               error);
        if (status != ATTN_OK) return status;
        attn_tensor dq_rows = ring_view_rows(buffers->query_gradient, B, call->local_length, Hq,
                                             Dk, row, row_end);
        add_into(&dq_rows, buffers->partial_dq);
        add_into(&block_dk, buffers->partial_dk);
        add_into(&block_dv, buffers->partial_dv);
        ring_transfer_poll(transfer);
    }
    return ATTN_OK;
}

/* Floats of a block's dK|dV accumulator (fp32) for rank owner's tokens; its K|V message
 * takes ring_message_floats of that many elements. */
static int64_t block_floats(const ring_call *call, int owner) {
    return call->batch * ring_local_length_of(call, owner) * call->kv_heads *
           (call->key_dim + call->value_dim);
}

/* Stores a contiguous fp32 [B, n, H, D] buffer into `view` (any dtype; 16-bit: rounded once,
 * a finite value beyond the type an error). */
static attn_status store_gradient(const float *contiguous, attn_tensor *view, attn_error *error) {
    if (view->dtype == ATTN_DTYPE_F32) {
        ring_unpack(contiguous, view);
        return ATTN_OK;
    }
    const attn_tensor source = attn_tensor_contiguous((void *)contiguous, ATTN_DTYPE_F32, 4, view->shape);
    return attn_tensor_convert(&source, view, error);
}

static attn_status run_ring(ring_call *call, const ring_tensors *tensors,
                            backward_buffers *buffers, attn_ring_stats *stats, attn_error *error) {
    int64_t B = call->batch, Hkv = call->kv_heads;
    int P = call->rank_count, r = call->rank;
    attn_status compute_status = ATTN_OK, status;
    int current = 0, owner = r;
    if (call->dtype == ATTN_DTYPE_F32) {
        ring_pack(tensors->k, buffers->block[current]);
        ring_pack(tensors->v, buffers->block[current] + B * call->local_length * Hkv * call->key_dim);
    } else {
        ring_pack16(tensors->k, (uint16_t *)buffers->block[current]);
        ring_pack16(tensors->v, (uint16_t *)buffers->block[current] +
                                    B * call->local_length * Hkv * call->key_dim);
    }
    ring_transfer transfer;
    ring_transfer_reset(&transfer);
    for (int step = 0; step < P; ++step) {
        int64_t key_count = ring_local_length_of(call, owner);
        int64_t floats = block_floats(call, owner);
        if (stats != NULL && stats->step_sources != NULL) stats->step_sources[step] = owner;
        double start = MPI_Wtime();
        status = ATTN_OK;
        if (step + 1 < P) {
            int next_owner = ring_step_owner(r, step + 1, P);
            status = ring_transfer_receive(
                call, &transfer, buffers->block[1 - current], buffers->block_capacity_units,
                ring_units(ring_message_floats(call, block_floats(call, next_owner))), next_owner,
                error);
            if (status == ATTN_OK)
                status = ring_transfer_send(call, &transfer, buffers->block[current],
                                            ring_units(ring_message_floats(call, floats)), owner,
                                            stats, error);
        }
        if (step > 0 && status == ATTN_OK) {
            int previous_owner = (owner + 1) % P;
            status = ring_transfer_receive(call, &transfer, buffers->gradient_incoming,
                                           buffers->gradient_capacity_units, ring_units(floats),
                                           P + owner, error);
            if (status == ATTN_OK)
                status = ring_transfer_send(call, &transfer, buffers->gradient_outgoing,
                                            ring_units(block_floats(call, previous_owner)),
                                            P + previous_owner, stats, error);
        }
        if (status != ATTN_OK) return status;

        memset(buffers->gradient_own, 0, (size_t)floats * sizeof(float));
        if (compute_status == ATTN_OK) {
            ring_load_block_positions(call, owner);
            compute_status = compute_block(call, tensors, buffers->block[current], key_count,
                                           buffers->gradient_own, buffers, &transfer, stats, error);
        }
        double computed = MPI_Wtime();
        int received_tags[2] = {-1, -1};
        attn_error transfer_error;
        status = ring_transfer_wait(call, &transfer, received_tags, &transfer_error);
        if (status != ATTN_OK) {
            if (error != NULL) *error = transfer_error;
            return status;
        }
        if (stats != NULL) {
            stats->compute_seconds += computed - start;
            stats->wait_seconds += MPI_Wtime() - computed;
        }
        /* accumulator of this block = what earlier ranks accumulated + our contribution */
        if (step > 0)
            for (int64_t i = 0; i < floats; ++i)
                buffers->gradient_own[i] = buffers->gradient_incoming[i] + buffers->gradient_own[i];
        float *finished = buffers->gradient_own;
        buffers->gradient_own = buffers->gradient_outgoing;
        buffers->gradient_outgoing = finished;
        if (step + 1 < P) owner = received_tags[0]; /* checked against the schedule */
        current = 1 - current;
    }
    /* The last hop: the accumulator in hand belongs to rank r+1; ours arrives from r-1. */
    float *own_gradient = buffers->gradient_outgoing;
    if (P > 1) {
        status = ring_transfer_receive(call, &transfer, buffers->gradient_incoming,
                                       buffers->gradient_capacity_units,
                                       ring_units(block_floats(call, r)), P + r, error);
        if (status == ATTN_OK)
            status = ring_transfer_send(call, &transfer, buffers->gradient_outgoing,
                                        ring_units(block_floats(call, owner)), P + owner, stats,
                                        error);
        if (status == ATTN_OK) status = ring_transfer_wait(call, &transfer, NULL, error);
        if (status != ATTN_OK) return status;
        own_gradient = buffers->gradient_incoming;
    }
    if (compute_status != ATTN_OK) return compute_status;
    if ((status = store_gradient(buffers->query_gradient, tensors->dq, error)) != ATTN_OK ||
        (status = store_gradient(own_gradient, tensors->dk, error)) != ATTN_OK ||
        (status = store_gradient(own_gradient + B * call->local_length * Hkv * call->key_dim,
                                 tensors->dv, error)) != ATTN_OK)
        return status;
    return ATTN_OK;
}

attn_status attn_ring_backward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *out,
                               const attn_tensor *lse, const attn_tensor *dout,
                               const attn_options *options, const attn_ring_layout *layout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               attn_ring_stats *stats, const attn_execution *execution,
                               attn_error *error) {
    ring_tensors tensors = {true, q, k, v, out, lse, dout, dq, dk, dv};
    ring_call call;
    attn_status status = ring_call_begin(&call, comm, &tensors, options, layout, execution, stats,
                                         error);
    if (status != ATTN_OK) return status;
    attn_error local_error = {ATTN_OK, ""};
    backward_buffers buffers;
    status = ring_agree(&call, allocate_buffers(&call, &buffers, &local_error), &local_error,
                        error);
    if (status == ATTN_OK) {
        /* 16-bit tensors: the blocks see q and dout widened once (exact), and O as the
         * forward ring computes it in fp32 before rounding: D = rowsum(dO * O) from the
         * rounded O would carry its rounding into dS = P (dP - D), where dP and D nearly
         * cancel (as the single-process backward, docs/backward.md "D for 16-bit operands") */
        ring_tensors computed = tensors;
        attn_tensor widened[3];
        if (call.dtype != ATTN_DTYPE_F32) {
            const attn_tensor *sources[3] = {q, out, dout};
            float *targets[3] = {buffers.queries, buffers.out, buffers.dout};
            for (int i = 0; i < 3; ++i) {
                widened[i] = attn_tensor_contiguous(targets[i], ATTN_DTYPE_F32, 4, sources[i]->shape);
                if (i != 1) attn_tensor_convert(sources[i], &widened[i], NULL); /* exact */
            }
            computed.q = &widened[0], computed.out = &widened[1], computed.dout = &widened[2];
            status = ring_forward_recompute(&call, &tensors, &widened[1], &local_error);
        }
        if (status == ATTN_OK) status = run_ring(&call, &computed, &buffers, stats, &local_error);
        status = ring_agree(&call, status, &local_error, error);
    }
    free_buffers(&buffers);
    ring_call_finish(&call, stats);
    return status;
}
