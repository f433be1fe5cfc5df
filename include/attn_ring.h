/*
 * attn_ring.h — ring attention token layouts: how the tokens of one global sequence are
 * sharded over P ranks, and the copies between global and per-rank tensors. Part of libattn
 * and free of MPI (attn_mpi.h, the ring attention itself, builds on it).
 */
#ifndef ATTN_RING_H
#define ATTN_RING_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Section: ring attention token layouts (sequence sharding; MPI-free, used by attn_mpi.h)
 * ====================================================================================== */

/*
 * How the T tokens of a global sequence are spread over P ranks for ring attention. Chunks
 * of uneven size are allowed: splitting n tokens into c chunks gives the first (n mod c)
 * chunks one token more than the others (floor(n / c) + 1 vs floor(n / c)).
 *  CONTIGUOUS: P chunks; rank r holds chunk r. Causal load is unbalanced (the last rank does
 *              about twice the average work).
 *  ZIGZAG:     2P chunks; rank r holds chunk r followed by chunk 2P-1-r (ring-flash-attention's
 *              zigzag): every rank gets one early and one late chunk, balancing causal work.
 *  STRIPED:    token t lives on rank t mod P (Striped Attention, Brandon et al. 2023): local
 *              token a of rank r is global token a*P + r.
 * In every layout a rank's local tokens are in increasing global order, and every rank must
 * hold at least one token (T >= P).
 */
typedef enum attn_ring_layout_kind {
    ATTN_RING_LAYOUT_CONTIGUOUS = 0,
    ATTN_RING_LAYOUT_ZIGZAG = 1,
    ATTN_RING_LAYOUT_STRIPED = 2
} attn_ring_layout_kind;

typedef struct attn_ring_layout {
    attn_ring_layout_kind kind;
    int64_t sequence_length; /* T, the global number of tokens: T >= rank_count */
    int rank_count;          /* P >= 1 */
} attn_ring_layout;

/* Name of a layout kind ("contiguous", "zigzag", "striped"); "unknown" otherwise. */
ATTN_API const char *attn_ring_layout_name(attn_ring_layout_kind kind);

/* Number of tokens rank `rank` holds (>= 1). Errors: bad layout or rank out of [0, P). */
ATTN_API attn_status attn_ring_layout_local_length(const attn_ring_layout *layout, int rank,
                                                   int64_t *local_length, attn_error *error);

/* Global position of each of the rank's local tokens, increasing.
 * positions: int64[local_length] (written). */
ATTN_API attn_status attn_ring_layout_positions(const attn_ring_layout *layout, int rank,
                                                int64_t *positions, attn_error *error);

/*
 * Copies the rank's tokens out of a global tensor: local[..., a, ...] = global[..., pos(a), ...]
 * along dimension `sequence_dim` (1 for Q/K/V/O [B, T, H, D], 2 for LSE [B, H, T]).
 *   global: F32, rank 3 or 4, shape[sequence_dim] = T
 *   local:  F32, same rank, shape[sequence_dim] = local_length, other dims equal (written)
 * Any strides. Errors: NULL, dtype/rank/shape disagreement, bad layout or rank.
 */
ATTN_API attn_status attn_ring_shard(const attn_ring_layout *layout, int rank, int sequence_dim,
                                     const attn_tensor *global, attn_tensor *local,
                                     attn_error *error);

/* The inverse of attn_ring_shard: writes the rank's local tokens into their global places
 * (global[..., pos(a), ...] = local[..., a, ...]); other tokens of `global` are untouched,
 * so calling it for every rank reassembles the sequence. Same arguments and errors. */
ATTN_API attn_status attn_ring_gather(const attn_ring_layout *layout, int rank, int sequence_dim,
                                      const attn_tensor *local, attn_tensor *global,
                                      attn_error *error);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_RING_H */
