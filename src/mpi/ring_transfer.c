/*
 * ring_transfer.c — moving blocks one hop around the ring: padded message buffers, packing a
 * strided view into contiguous memory (and back), views of a block's rows or columns, and the
 * nonblocking sends and receives of one step (posted before the compute, polled between row
 * slabs so MPI progresses them, completed after it).
 */
#include "ring_internal.h"

#include "../core/internal.h"
#include "../kernels/half.h"

#include <stdlib.h>
#include <string.h>

float *ring_buffer_alloc(int64_t floats, int64_t *capacity_units) {
    int64_t units = ring_units(floats > 0 ? floats : 1);
    float *buffer = attn_aligned_alloc((size_t)units * RING_UNIT_FLOATS * sizeof(float));
    if (buffer != NULL) memset(buffer, 0, (size_t)units * RING_UNIT_FLOATS * sizeof(float));
    if (capacity_units != NULL) *capacity_units = units;
    return buffer;
}

void ring_pack(const attn_tensor *view, float *contiguous) {
    int64_t n = 0;
    for (int64_t a = 0; a < view->shape[0]; ++a)
        for (int64_t b = 0; b < view->shape[1]; ++b)
            for (int64_t c = 0; c < view->shape[2]; ++c) {
                const float *row = attn_f32_at4(view, a, b, c, 0);
                for (int64_t d = 0; d < view->shape[3]; ++d) contiguous[n++] = row[d * view->stride[3]];
            }
}

void ring_pack16(const attn_tensor *view, uint16_t *contiguous) {
    int64_t n = 0;
    for (int64_t a = 0; a < view->shape[0]; ++a)
        for (int64_t b = 0; b < view->shape[1]; ++b)
            for (int64_t c = 0; c < view->shape[2]; ++c) {
                const uint16_t *row = (const uint16_t *)view->data + a * view->stride[0] +
                                      b * view->stride[1] + c * view->stride[2];
                for (int64_t d = 0; d < view->shape[3]; ++d) contiguous[n++] = row[d * view->stride[3]];
            }
}

void ring_widen16(const uint16_t *source, attn_dtype dtype, int64_t count, float *target) {
    for (int64_t n = 0; n < count; ++n)
        target[n] = dtype == ATTN_DTYPE_BF16 ? attn_bf16_to_float(source[n])
                                             : attn_f16_to_float(source[n]);
}

void ring_unpack(const float *contiguous, attn_tensor *view) {
    int64_t n = 0;
    for (int64_t a = 0; a < view->shape[0]; ++a)
        for (int64_t b = 0; b < view->shape[1]; ++b)
            for (int64_t c = 0; c < view->shape[2]; ++c) {
                float *row = attn_f32_at4(view, a, b, c, 0);
                for (int64_t d = 0; d < view->shape[3]; ++d) row[d * view->stride[3]] = contiguous[n++];
            }
}

attn_tensor ring_view_rows(float *data, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                           int64_t begin, int64_t end) {
    attn_tensor whole = attn_tensor_f32_4d(data, d0, d1, d2, d3);
    return ring_restrict(&whole, 1, begin, end);
}

attn_tensor ring_restrict(const attn_tensor *view, int dimension, int64_t begin, int64_t end) {
    attn_tensor part = *view;
    part.data = (float *)view->data + begin * view->stride[dimension];
    part.shape[dimension] = end - begin;
    return part;
}

void ring_transfer_reset(ring_transfer *transfer) {
    transfer->count = 0;
    transfer->completed = false;
    for (int i = 0; i < 4; ++i) transfer->requests[i] = MPI_REQUEST_NULL;
}

attn_status ring_transfer_send(ring_call *call, ring_transfer *transfer, const float *buffer,
                               int64_t units, int tag, attn_ring_stats *stats, attn_error *error) {
    int right = (call->rank + 1) % call->rank_count;
    int slot = transfer->count++;
    transfer->expected_tag[slot] = -1;
    transfer->expected_units[slot] = 0;
    if (units > INT32_MAX ||
        MPI_Isend(buffer, (int)units, call->unit, right, tag, call->comm,
                  &transfer->requests[slot]) != MPI_SUCCESS)
        return attn_fail(error, ATTN_ERROR_COMMUNICATION,
                         "MPI_Isend of %lld units to rank %d failed", (long long)units, right);
    if (stats != NULL) stats->bytes_sent += units * RING_UNIT_FLOATS * (int64_t)sizeof(float);
    return ATTN_OK;
}

attn_status ring_transfer_receive(ring_call *call, ring_transfer *transfer, float *buffer,
                                  int64_t capacity_units, int64_t expected_units,
                                  int expected_tag, attn_error *error) {
    int left = (call->rank + call->rank_count - 1) % call->rank_count;
    int slot = transfer->count++;
    transfer->expected_tag[slot] = expected_tag;
    transfer->expected_units[slot] = expected_units;
    if (capacity_units > INT32_MAX ||
        MPI_Irecv(buffer, (int)capacity_units, call->unit, left, MPI_ANY_TAG, call->comm,
                  &transfer->requests[slot]) != MPI_SUCCESS)
        return attn_fail(error, ATTN_ERROR_COMMUNICATION, "MPI_Irecv from rank %d failed", left);
    return ATTN_OK;
}

void ring_transfer_poll(ring_transfer *transfer) {
    if (transfer->count == 0 || transfer->completed) return;
    /* Either every request completes (and its status is kept for the wait) or none changes. */
    int done = 0;
    MPI_Testall(transfer->count, transfer->requests, &done, transfer->statuses);
    if (done) transfer->completed = true;
}

attn_status ring_transfer_wait(ring_call *call, ring_transfer *transfer, int *received_tags,
                               attn_error *error) {
    MPI_Status *statuses = transfer->statuses;
    int count = transfer->count;
    bool completed = transfer->completed;
    transfer->count = 0;
    transfer->completed = false;
    if (count == 0) return ATTN_OK;
    if (!completed && MPI_Waitall(count, transfer->requests, statuses) != MPI_SUCCESS)
        return attn_fail(error, ATTN_ERROR_COMMUNICATION, "MPI_Waitall on the ring transfer failed");
    int received = 0;
    for (int slot = 0; slot < count; ++slot) {
        if (transfer->expected_tag[slot] < 0) continue;
        int units = 0;
        MPI_Get_count(&statuses[slot], call->unit, &units);
        int tag = statuses[slot].MPI_TAG;
        if (received_tags != NULL) received_tags[received++] = tag;
        if (tag != transfer->expected_tag[slot] || units != transfer->expected_units[slot])
            return attn_fail(error, ATTN_ERROR_COMMUNICATION,
                             "received a message with tag %d and %d units from the left "
                             "neighbour; expected tag %d and %lld units",
                             tag, units, transfer->expected_tag[slot],
                             (long long)transfer->expected_units[slot]);
    }
    return ATTN_OK;
}
