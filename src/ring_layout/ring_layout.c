/*
 * ring_layout.c — how ring attention spreads a global sequence over P ranks (contiguous,
 * zigzag, striped), each local token's global position, and the copies between a global
 * [.., T, ..] tensor and one rank's local share (shard) and back (gather). No MPI here: the
 * functions are plain index arithmetic, so they live in libattn and are tested without mpirun.
 */
#include "../core/internal.h"
#include "attn_ring.h"

#include <stdlib.h>
#include <string.h>

const char *attn_ring_layout_name(attn_ring_layout_kind kind) {
    switch (kind) {
    case ATTN_RING_LAYOUT_CONTIGUOUS: return "contiguous";
    case ATTN_RING_LAYOUT_ZIGZAG: return "zigzag";
    case ATTN_RING_LAYOUT_STRIPED: return "striped";
    }
    return "unknown";
}

/* First token of chunk `chunk` when `length` tokens are cut into `chunk_count` chunks, the
 * first (length mod chunk_count) of them one token longer. chunk may equal chunk_count (the
 * end). */
static int64_t chunk_start(int64_t length, int64_t chunk_count, int64_t chunk) {
    int64_t base = length / chunk_count, extra = length % chunk_count;
    return chunk * base + (chunk < extra ? chunk : extra);
}

static attn_status check_layout(const attn_ring_layout *layout, int rank, attn_error *error) {
    if (layout == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layout is NULL");
    if (layout->kind != ATTN_RING_LAYOUT_CONTIGUOUS && layout->kind != ATTN_RING_LAYOUT_ZIGZAG &&
        layout->kind != ATTN_RING_LAYOUT_STRIPED)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "layout.kind = %d: expected contiguous (0), zigzag (1) or striped (2)",
                         (int)layout->kind);
    if (layout->rank_count < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "layout.rank_count = %d: must be >= 1",
                         layout->rank_count);
    if (layout->sequence_length < layout->rank_count)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "layout.sequence_length = %lld: must be >= rank_count = %d (every rank "
                         "needs at least one token)",
                         (long long)layout->sequence_length, layout->rank_count);
    /* Zigzag counts 2P chunks: keep 2P (and chunk arithmetic) far from overflow. */
    if (layout->sequence_length > INT64_MAX / 4)
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "layout.sequence_length = %lld: too large",
                         (long long)layout->sequence_length);
    if (rank < 0 || rank >= layout->rank_count)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "rank = %d: must be in [0, %d)", rank,
                         layout->rank_count);
    return ATTN_OK;
}

/* The rank's tokens as at most two runs of consecutive global positions (contiguous and
 * zigzag), or a stride (striped). */
typedef struct token_runs {
    int64_t run_start[2];
    int64_t run_length[2];
    int run_count;
} token_runs;

static token_runs layout_runs(const attn_ring_layout *layout, int rank) {
    token_runs runs = {{0, 0}, {0, 0}, 0};
    int64_t T = layout->sequence_length, P = layout->rank_count;
    if (layout->kind == ATTN_RING_LAYOUT_CONTIGUOUS) {
        runs.run_start[0] = chunk_start(T, P, rank);
        runs.run_length[0] = chunk_start(T, P, rank + 1) - runs.run_start[0];
        runs.run_count = 1;
    } else { /* zigzag: chunk r, then chunk 2P-1-r (possibly empty when T < 2P) */
        int64_t late = 2 * P - 1 - rank;
        runs.run_start[0] = chunk_start(T, 2 * P, rank);
        runs.run_length[0] = chunk_start(T, 2 * P, rank + 1) - runs.run_start[0];
        runs.run_start[1] = chunk_start(T, 2 * P, late);
        runs.run_length[1] = chunk_start(T, 2 * P, late + 1) - runs.run_start[1];
        runs.run_count = 2;
    }
    return runs;
}

static int64_t local_length_of(const attn_ring_layout *layout, int rank) {
    if (layout->kind == ATTN_RING_LAYOUT_STRIPED) /* tokens rank, rank + P, ... < T */
        return (layout->sequence_length - rank + layout->rank_count - 1) / layout->rank_count;
    token_runs runs = layout_runs(layout, rank);
    return runs.run_length[0] + (runs.run_count > 1 ? runs.run_length[1] : 0);
}

attn_status attn_ring_layout_local_length(const attn_ring_layout *layout, int rank,
                                          int64_t *local_length, attn_error *error) {
    attn_status status = check_layout(layout, rank, error);
    if (status != ATTN_OK) return status;
    if (local_length == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "local_length is NULL");
    *local_length = local_length_of(layout, rank);
    return ATTN_OK;
}

attn_status attn_ring_layout_positions(const attn_ring_layout *layout, int rank,
                                       int64_t *positions, attn_error *error) {
    attn_status status = check_layout(layout, rank, error);
    if (status != ATTN_OK) return status;
    if (positions == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "positions is NULL");
    if (layout->kind == ATTN_RING_LAYOUT_STRIPED) {
        int64_t count = local_length_of(layout, rank);
        for (int64_t a = 0; a < count; ++a) positions[a] = a * layout->rank_count + rank;
        return ATTN_OK;
    }
    token_runs runs = layout_runs(layout, rank);
    int64_t a = 0;
    for (int run = 0; run < runs.run_count; ++run)
        for (int64_t t = 0; t < runs.run_length[run]; ++t) positions[a++] = runs.run_start[run] + t;
    return ATTN_OK;
}

/* Shared by shard and gather: checks the pair of tensors and copies between them along
 * `sequence_dim`, local -> global when `to_global`, else global -> local. */
static attn_status copy_tokens(const attn_ring_layout *layout, int rank, int sequence_dim,
                               const attn_tensor *global, const attn_tensor *local,
                               bool to_global, attn_error *error) {
    attn_status status = check_layout(layout, rank, error);
    if (status != ATTN_OK) return status;
    if (global == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "global is NULL");
    if (local == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "local is NULL");
    int tensor_rank = global->rank;
    if (tensor_rank != 3 && tensor_rank != 4)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "global.rank = %d: expected 3 or 4",
                         tensor_rank);
    if ((status = attn_check_tensor(global, "global", ATTN_DTYPE_F32, tensor_rank, error)) != ATTN_OK ||
        (status = attn_check_tensor(local, "local", ATTN_DTYPE_F32, tensor_rank, error)) != ATTN_OK)
        return status;
    if (sequence_dim < 0 || sequence_dim >= tensor_rank)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "sequence_dim = %d: must be in [0, %d)",
                         sequence_dim, tensor_rank);
    if (global->shape[sequence_dim] != layout->sequence_length)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "global.shape[%d] = %lld: expected layout.sequence_length = %lld",
                         sequence_dim, (long long)global->shape[sequence_dim],
                         (long long)layout->sequence_length);
    int64_t local_length = local_length_of(layout, rank);
    if (local->shape[sequence_dim] != local_length)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "local.shape[%d] = %lld: rank %d holds %lld tokens under the %s layout",
                         sequence_dim, (long long)local->shape[sequence_dim], rank,
                         (long long)local_length, attn_ring_layout_name(layout->kind));
    for (int d = 0; d < tensor_rank; ++d)
        if (d != sequence_dim && local->shape[d] != global->shape[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "local.shape[%d] = %lld: must equal global.shape[%d] = %lld", d,
                             (long long)local->shape[d], d, (long long)global->shape[d]);

    int64_t *positions = malloc((size_t)local_length * sizeof *positions);
    if (positions == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "positions: %lld int64 values",
                         (long long)local_length);
    attn_ring_layout_positions(layout, rank, positions, NULL);

    /* Treat both views as rank 4 by padding a leading size-1 dimension. */
    int64_t shape[4] = {1, 1, 1, 1}, global_stride[4] = {0, 0, 0, 0}, local_stride[4] = {0, 0, 0, 0};
    int offset = 4 - tensor_rank, seq = sequence_dim + offset;
    for (int d = 0; d < tensor_rank; ++d) {
        shape[d + offset] = local->shape[d];
        global_stride[d + offset] = global->stride[d];
        local_stride[d + offset] = local->stride[d];
    }
    float *global_data = global->data, *local_data = local->data;
    int64_t index[4];
    for (index[0] = 0; index[0] < shape[0]; ++index[0])
        for (index[1] = 0; index[1] < shape[1]; ++index[1])
            for (index[2] = 0; index[2] < shape[2]; ++index[2])
                for (index[3] = 0; index[3] < shape[3]; ++index[3]) {
                    int64_t global_offset = 0, local_offset = 0;
                    for (int d = 0; d < 4; ++d) {
                        int64_t global_index = d == seq ? positions[index[d]] : index[d];
                        global_offset += global_index * global_stride[d];
                        local_offset += index[d] * local_stride[d];
                    }
                    if (to_global)
                        global_data[global_offset] = local_data[local_offset];
                    else
                        local_data[local_offset] = global_data[global_offset];
                }
    free(positions);
    return ATTN_OK;
}

attn_status attn_ring_shard(const attn_ring_layout *layout, int rank, int sequence_dim,
                            const attn_tensor *global, attn_tensor *local, attn_error *error) {
    return copy_tokens(layout, rank, sequence_dim, global, local, false, error);
}

attn_status attn_ring_gather(const attn_ring_layout *layout, int rank, int sequence_dim,
                             const attn_tensor *local, attn_tensor *global, attn_error *error) {
    return copy_tokens(layout, rank, sequence_dim, global, local, true, error);
}
