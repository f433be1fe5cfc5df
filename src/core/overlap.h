/*
 * overlap.h — may two tensors share a byte? The exact lattice test that every check of
 * written memory uses: the caller-owned cache's append (cache/kvcache_layout.c) and the
 * outputs of every entry point (call/aliasing.c). Internal to libattn.
 */
#ifndef ATTN_CORE_OVERLAP_H
#define ATTN_CORE_OVERLAP_H

#include <stdbool.h>
#include <stdint.h>

#include "attn.h"

/* One tensor's memory: elements at base + sum_d i_d * stride[d] * element (0 <= i_d <
 * shape[d]), each covering `width` bytes from there (one element, or a whole contiguous row
 * when the last dimension was folded in). */
typedef struct attn_region {
    const char *name;                                   /* for messages */
    uintptr_t base;                                     /* element [0, ..., 0] */
    int dims;                                           /* lattice dimensions, 0..ATTN_MAX_RANK */
    int64_t shape[ATTN_MAX_RANK], stride[ATTN_MAX_RANK]; /* stride in elements, any sign */
    int64_t element, width;                             /* bytes: one element, one lattice point */
} attn_region;

/* *r = the region of a checked tensor (attn_check_tensor: rank 1..4, shapes >= 1, span
 * within int64). fold_last: a last dimension of stride 1 (or of size 1) becomes one row of
 * shape[rank - 1] elements (fewer lattice dimensions, the same bytes). Filled in place, not
 * returned: the checks run once per call, and a returned struct costs store-forwarding stalls
 * that were most of their time. */
void attn_region_set(attn_region *r, const attn_tensor *t, const char *name, bool fold_last);

/* *r = `count` contiguous bytes from `data` (a raw array such as options.query_lengths). */
void attn_region_set_bytes(attn_region *r, const void *data, int64_t count, const char *name);

/* Bytes [*begin, *end) that the region's elements may occupy (strides of any sign). */
void attn_region_span(const attn_region *r, uintptr_t *begin, uintptr_t *end);

/* May a and b share a byte? ATTN_OVERLAP_NONE is certain (disjoint address spans, or no
 * multiple of the gcd of their byte strides between their offsets, or an exhaustive search
 * of their lattice differences, largest stride first, finding none); ATTN_OVERLAP_SHARED is
 * certain too (the search found a shared byte); ATTN_OVERLAP_UNDECIDED: the search spent its
 * budget of 4096 steps (only very intricate interleavings) and the caller counts them as
 * sharing. So two interleaved views of one buffer that never meet (k and v of one packed kv
 * buffer, [..., 2, H, D]) are told apart. */
typedef enum attn_overlap {
    ATTN_OVERLAP_NONE = 0,
    ATTN_OVERLAP_SHARED = 1,
    ATTN_OVERLAP_UNDECIDED = 2
} attn_overlap;
attn_overlap attn_regions_overlap(const attn_region *a, const attn_region *b);

/* May two distinct elements of r share a byte? NONE at once for nested strides (sorted by
 * size, each at least the extent of the smaller ones: every dense, permuted or sliced
 * layout), else the same exhaustive search as attn_regions_overlap over the differences of
 * two index vectors, with its answers (SHARED, or UNDECIDED past its budget). */
attn_overlap attn_region_self_overlap(const attn_region *r);

/* An output must give every element its own memory: INVALID_ARGUMENT naming the tensor when
 * it has a zero stride on a dimension of size > 1 (a broadcast, naming the dimension) or
 * strides that make two of its elements share a byte (or that the search cannot tell apart:
 * attn_region_self_overlap UNDECIDED, counted as sharing, as the outputs' other checks
 * count it). */
attn_status attn_check_output_layout(const attn_tensor *t, const char *name, attn_error *error);

#endif /* ATTN_CORE_OVERLAP_H */
