/*
 * varlen.h — checks of the serving arguments shared by the packed variable-length calls
 * (varlen.c), the caller-owned KV cache (cache/kvcache_external.c) and the fuzz target:
 * cu_seqlens prefix sums and a sequence's strided views inside packed tensors.
 */
#ifndef ATTN_VARLEN_H
#define ATTN_VARLEN_H

#include <stdint.h>

#include "attn.h"

/* Checks one cu_seqlens array (`name` = "cu_seqlens_q" or "cu_seqlens_k"): int32[batch + 1],
 * starts at 0, never decreases, ends at `total`, every length <= max_seqlen (>= 1). The
 * message names the array, the sequence and the value. */
attn_status attn_varlen_check_prefix(const int32_t *cu_seqlens, int64_t batch, int64_t total,
                                     int64_t max_seqlen, const char *name, attn_error *error);

/* Checks *sequences against the packed totals total_q and total_k. */
attn_status attn_varlen_check(const attn_varlen *sequences, int64_t total_q, int64_t total_k,
                              attn_error *error);

/* The rank-4 view [1, length, H, D] of rows first .. first + length - 1 of a packed rank-3
 * tensor [total, H, D] (length >= 1). */
attn_tensor attn_varlen_rows(const attn_tensor *packed, int64_t first, int64_t length);

#endif /* ATTN_VARLEN_H */
