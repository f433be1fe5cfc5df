/*
 * ring_internal.h — what the ring forward and backward share inside libattn_mpi: the
 * validated call (sizes, positions, a private duplicate of the communicator), the agreement
 * of every rank on one status, the geometry of a (query block, key block) pair (which rows and
 * columns hold allowed pairs, how many pairs), and the double-buffered one-hop transfer.
 */
#ifndef ATTN_RING_INTERNAL_H
#define ATTN_RING_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "attn_mpi.h"
#include "../call/call.h"

/* Messages are counted in units of this many floats (an MPI contiguous type), so blocks of
 * more than INT_MAX floats still travel in one message; buffers are padded to whole units. */
#define RING_UNIT_FLOATS 256

/* A computed block is processed in row slabs of at least this many rows (and at most four
 * slabs), polling the pending transfer between slabs so that MPI progresses it while we
 * compute. The slab rule depends only on sizes: results do not depend on timing. */
#define RING_SLAB_MIN_ROWS 64
#define RING_SLABS_PER_BLOCK 4

/* Tags: K/V of block `owner` travel with tag owner; dK/dV accumulators with tag P + owner. */
#define RING_MAX_RANKS 16000

/* One validated ring call on this rank. */
typedef struct ring_call {
    MPI_Comm comm;          /* a duplicate of the caller's communicator (errors return) */
    MPI_Datatype unit;      /* RING_UNIT_FLOATS contiguous floats */
    int rank;               /* r */
    int rank_count;         /* P */
    attn_ring_layout layout;
    attn_call prepared;       /* options and execution resolved, kernels selected, once
                                 (call.h); every block runs on a copy of it */
    int64_t batch, query_heads, kv_heads, key_dim, value_dim;
    attn_dtype dtype;       /* of q, k, v, out (dout, dq, dk, dv): F32, BF16 or F16 (K/V
                               blocks then travel in it; the compute widens them) */
    int64_t local_length;   /* n_r: this rank's tokens */
    int64_t max_local_length;
    int64_t *local_positions;  /* int64[n_r]: global positions of this rank's tokens */
    int64_t *block_positions;  /* int64[max n]: scratch for the positions of a visiting block */
    double start;              /* MPI_Wtime() when the call began (stats->total_seconds) */
} ring_call;

/* The tensors a ring call was given. The forward has no dout, dq, dk, dv (NULL) and lse
 * may be NULL; the backward needs them all. */
typedef struct ring_tensors {
    bool backward;
    const attn_tensor *q, *k, *v, *out, *lse, *dout;
    attn_tensor *dq, *dk, *dv;
} ring_tensors;

/*
 * Validates this rank's arguments, duplicates comm and checks that every rank agrees on the
 * sizes and options (collective). Returns the agreed status: on error every rank gets the same
 * status and message, and `call` holds nothing to free.
 */
/* (It first zeroes the caller's stats, NULL allowed, keeping its step_sources pointer.) */
attn_status ring_call_begin(ring_call *call, MPI_Comm comm, const ring_tensors *tensors,
                            const attn_options *options, const attn_ring_layout *layout,
                            const attn_execution *execution, attn_ring_stats *stats,
                            attn_error *error);
void ring_call_end(ring_call *call);
/* ring_call_end, then stats->total_seconds (stats may be NULL): the end of a begun call. */
void ring_call_finish(ring_call *call, attn_ring_stats *stats);

/*
 * Collective: every rank passes its local status (and its error when not OK); every rank
 * returns the same status, the largest status code reported, with the message of the lowest
 * rank that reported it, prefixed "rank R: ". MPI failures give ATTN_ERROR_COMMUNICATION.
 */
/* The fp32 O of this rank's rows by the forward ring on tensors->q, k, v (ring_forward.c):
 * out F32 [B, n_r, Hq, Dv]. Collective. */
attn_status ring_forward_recompute(ring_call *call, const ring_tensors *tensors, attn_tensor *out,
                                   attn_error *error);

attn_status ring_agree(const ring_call *call, attn_status local_status,
                       const attn_error *local_error, attn_error *error);

/* The owner of the block computed at step s on rank r: (r - s) mod P. */
static inline int ring_step_owner(int rank, int step, int rank_count) {
    return ((rank - step) % rank_count + rank_count) % rank_count;
}

/* Rows [row_begin, row_end) x columns [column_begin, column_end) of a (query block, key
 * block) pair hold every allowed pair; allowed_pairs counts them (per batch and head). */
typedef struct ring_block_geometry {
    int64_t row_begin, row_end, column_begin, column_end;
    int64_t allowed_pairs;
} ring_block_geometry;

/*
 * Geometry under the causal and window options, for increasing positions: query_positions
 * int64[query_count], key_positions int64[key_count]. allowed_pairs = 0 means the block is
 * fully masked (and the ranges are empty).
 */
ring_block_geometry ring_block_geometry_of(const attn_options *options,
                                           const int64_t *query_positions, int64_t query_count,
                                           const int64_t *key_positions, int64_t key_count,
                                           int64_t sequence_length);

/* The geometry of this rank's queries against a received block of `key_count` keys; counts
 * the block in `stats` (NULL allowed) as computed or skipped. Returns false when no pair of
 * the block is allowed (skip it: no compute). */
bool ring_plan_block(const ring_call *call, int64_t key_count, attn_ring_stats *stats,
                     ring_block_geometry *geometry);

/* Row slabs of a block: slab s of count covers rows [begin + s*size, min(end, ...)). */
int64_t ring_slab_rows(int64_t row_count);

/* A buffer of `floats` floats rounded up to whole units, zeroed. NULL on failure. */
float *ring_buffer_alloc(int64_t floats, int64_t *capacity_units);

/* Units needed for `floats` floats. */
static inline int64_t ring_units(int64_t floats) {
    return (floats + RING_UNIT_FLOATS - 1) / RING_UNIT_FLOATS;
}

/* Copies a rank-4 F32 view into contiguous memory (C order) and back. */
void ring_pack(const attn_tensor *view, float *contiguous);
/* The same for a BF16 / F16 view, as 16-bit elements. */
void ring_pack16(const attn_tensor *view, uint16_t *contiguous);
/* target[n] = the fp32 value of 16-bit element source[n] of `dtype`, n < count (exact). */
void ring_widen16(const uint16_t *source, attn_dtype dtype, int64_t count, float *target);

/* Floats of a message of `elements` elements of the call's dtype (two 16-bit ones per float). */
static inline int64_t ring_message_floats(const ring_call *call, int64_t elements) {
    return call->dtype == ATTN_DTYPE_F32 ? elements : (elements + 1) / 2;
}
void ring_unpack(const float *contiguous, attn_tensor *view);

/* A contiguous [d0, d1, d2, d3] F32 view of `data` restricted to indices [begin, end) of
 * dimension 1 (a block's rows or columns). */
attn_tensor ring_view_rows(float *data, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                           int64_t begin, int64_t end);

/* The same restriction on any rank-4 view (dimension 1) or rank-3 view (dimension 2). */
attn_tensor ring_restrict(const attn_tensor *view, int dimension, int64_t begin, int64_t end);

/*
 * Pending messages of one step: up to two sends and two receives. `poll` lets MPI progress
 * them (MPI_Testall); `wait` completes them and checks that each receive carried the expected
 * tag (the block's owner) and unit count.
 */
typedef struct ring_transfer {
    MPI_Request requests[4];
    MPI_Status statuses[4];    /* filled by the poll that completed everything, if any */
    bool completed;            /* a poll completed every request (they are now NULL) */
    int expected_tag[4];       /* for receives; -1 for sends */
    int64_t expected_units[4]; /* for receives */
    int count;
} ring_transfer;

void ring_transfer_reset(ring_transfer *transfer);
attn_status ring_transfer_send(ring_call *call, ring_transfer *transfer, const float *buffer,
                               int64_t units, int tag, attn_ring_stats *stats, attn_error *error);
attn_status ring_transfer_receive(ring_call *call, ring_transfer *transfer, float *buffer,
                                  int64_t capacity_units, int64_t expected_units,
                                  int expected_tag, attn_error *error);
void ring_transfer_poll(ring_transfer *transfer);
/* Completes everything; received_tags (may be NULL) gets the tag of each receive in order. */
attn_status ring_transfer_wait(ring_call *call, ring_transfer *transfer, int *received_tags,
                               attn_error *error);

/* Local length of rank `owner` (already validated by ring_call_begin). */
int64_t ring_local_length_of(const ring_call *call, int owner);

/* Fills call->block_positions with the positions of rank owner's tokens. */
void ring_load_block_positions(ring_call *call, int owner);

#endif /* ATTN_RING_INTERNAL_H */
