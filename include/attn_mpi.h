/*
 * attn_mpi.h — the public header of libattn_mpi: exact ring attention (context parallelism)
 * over an MPI communicator, for sequences too long for one process. Link with -lattn_mpi
 * -lattn and your MPI. The token layouts (attn_ring_layout, attn_ring_shard/gather) are in
 * attn_ring.h, included here, because they are part of libattn and need no MPI.
 *
 * Model (docs/attention-math.md §6): P ranks each hold the Q, K and V of their
 * local tokens (a layout decides which tokens). At step s = 0..P-1 rank r computes its queries
 * against the K/V block that rank (r - s) mod P owns, with global positions for causal and
 * window masking, and merges the partial result by LSE (exact). While it computes, the next
 * block travels one hop around the ring (MPI_Isend to r+1, MPI_Irecv from r-1, two buffers).
 * Blocks with no allowed pair are not computed (still forwarded), and a computed block is
 * trimmed to the rows and columns that have allowed pairs, which is what makes the zigzag and
 * striped layouts balance causal work.
 *
 * Supported options: scale, causal, window, alignment, softcap, ALiBi (slopes are per query
 * head, positions global), empty_rows (NULL options = plain attention). Every execution
 * setting applies to each block's computation (NULL = defaults). Options that index the
 * global sequence (mask, bias, query/key lengths, query/key positions, global tokens, sparse
 * patterns, block layouts) are refused with ATTN_ERROR_UNSUPPORTED. The sequence is self-attention: local Tq = local Tk.
 *
 * Collective: every rank of `comm` must call with the same layout, options and head/dim sizes.
 * A rank whose input is bad makes EVERY rank return the same status and message (the message
 * names the rank and the argument): ranks agree on the status (MPI_Allreduce) before and after
 * the compute, and a rank that fails during the compute keeps forwarding blocks so nobody
 * hangs. MPI errors inside the call are returned as ATTN_ERROR_COMMUNICATION (the call works
 * on a duplicate of `comm` with MPI_ERRORS_RETURN; the caller's communicator is untouched).
 * Results are deterministic (fixed merge and accumulation order) and bitwise identical for any
 * thread count. Call MPI_Init first; MPI_THREAD_SINGLE is enough (only the calling thread uses
 * MPI).
 */
#ifndef ATTN_MPI_H
#define ATTN_MPI_H

#include <mpi.h>

#include "attn.h"
#include "attn_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What one ring call did on this rank (all counts local to the rank). Pass NULL if unwanted.
 * computed_pairs counts the (batch, query head, query, key) quadruples allowed by the causal
 * and window constraints inside the blocks this rank computed: the work measure the layouts
 * balance. step_sources, when not NULL, is caller memory of int[P] and receives the owner of
 * the K/V block computed at each step (read from the message, not recomputed): (r - s) mod P.
 */
typedef struct attn_ring_stats {
    int64_t computed_pairs;   /* allowed pairs computed, summed over B and Hq */
    int blocks_computed;      /* steps whose block had at least one allowed pair */
    int blocks_skipped;       /* steps whose block was fully masked (no compute) */
    int64_t bytes_sent;       /* bytes this rank sent (each message rounded up to 1 KiB) */
    double compute_seconds;   /* wall time spent in attention kernels and merges */
    double wait_seconds;      /* wall time spent waiting for transfers to complete */
    double total_seconds;     /* wall time of the whole call */
    int *step_sources;        /* in: NULL or int[P]; out: block owner per step */
} attn_ring_stats;

/*
 * Ring attention forward pass (collective over comm).
 *   q   [B, n_r, Hq, Dk] F32, k [B, n_r, Hkv, Dk] F32, v [B, n_r, Hkv, Dv] F32: this rank's
 *       tokens, n_r = attn_ring_layout_local_length(layout, r), in the layout's local order
 *       (attn_ring_shard makes them from global tensors). Any strides.
 *   out [B, n_r, Hq, Dv] F32 (written): this rank's rows of the global attention output.
 *   lse [B, Hq, n_r] F32 (written; may be NULL): the global LSE of those rows.
 * q, k, v and out may instead all be BF16 or all F16 (the same on every rank; lse F32): K/V
 * blocks then travel as 16-bit elements (half the bytes), each rank widens them and its
 * queries exactly, computes and merges in fp32, and rounds O once (a finite O beyond the
 * type's range is ATTN_ERROR_OVERFLOW): O is the fp32 ring's O on the same values, rounded.
 * attn_ring_backward takes 16-bit tensors the same way (q, k, v, out, dout, dq, dk, dv of one
 * type; lse F32; the dK|dV accumulators travel in fp32; gradients rounded once).
 * layout->rank_count must equal the size of comm. Errors: those of attn_forward for the local
 * tensors, a layout that disagrees with comm or with the local lengths, sizes that differ
 * between ranks (SHAPE_MISMATCH naming the rank), unsupported options, an empty row under
 * ATTN_EMPTY_ROWS_ERROR (naming b, h and the global position), ATTN_ERROR_COMMUNICATION,
 * and out or lse sharing a byte with q, k, v or each other on any rank (INVALID_ARGUMENT
 * naming both and their byte ranges, found before the ring starts, as attn_forward's).
 * On other errors out and lse may have been partly written.
 */
ATTN_API attn_status attn_ring_forward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                                       const attn_tensor *v, const attn_options *options,
                                       const attn_ring_layout *layout, attn_tensor *out,
                                       attn_tensor *lse, attn_ring_stats *stats,
                                       const attn_execution *execution, attn_error *error);

/*
 * Ring attention backward pass (collective over comm). out and lse are the results of
 * attn_ring_forward on the same inputs and options (the global O and LSE of this rank's rows);
 * dout [B, n_r, Hq, Dv] is the gradient of out. Writes this rank's gradients:
 *   dq [B, n_r, Hq, Dk], dk [B, n_r, Hkv, Dk], dv [B, n_r, Hkv, Dv] F32 (overwritten).
 * dQ accumulates locally; the dK/dV accumulators of each block travel the ring with its K and
 * V and arrive at their owner after P hops. Same errors as attn_ring_forward; dq, dk, dv may
 * share no byte with q, k, v, out, lse, dout or each other.
 */
ATTN_API attn_status attn_ring_backward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                                        const attn_tensor *v, const attn_tensor *out,
                                        const attn_tensor *lse, const attn_tensor *dout,
                                        const attn_options *options, const attn_ring_layout *layout,
                                        attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                        attn_ring_stats *stats, const attn_execution *execution,
                                        attn_error *error);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_MPI_H */
