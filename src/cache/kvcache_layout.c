/*
 * kvcache_layout.c — the memory an append into a caller-owned KV cache writes
 * (attn_forward_with_kvcache, kvcache_layout.h): every row it writes must be its own, so that
 * no append overwrites another's keys, values or Q8 scales, and the new rows it reads must not
 * lie in that memory, so that no copy reads what another has just written. Conservative
 * rules, checked before the first write (read-only calls never come here):
 *  - within one written tensor, dimensions 0..2 of size > 1 sorted by stride must nest: each
 *    stride at least the extent of the smaller ones (a row of width D, or 1 for a scale); this
 *    refuses a zero stride, and rows that overlap their neighbours;
 *  - between two tensors, whose elements lie at base + (lattice of their strides) + [0, width)
 *    (the test of core/overlap.c, which the outputs' check of every entry point shares):
 *    they share no byte if their address spans are disjoint, or if no multiple of the gcd of
 *    all their (byte) strides falls within (base2 - base1 - width1, base2 - base1 + width2),
 *    or else if no difference of their lattice points does (an exhaustive search, largest
 *    stride first, of at most 4096 steps: beyond, they count as sharing) — so k and v
 *    interleaved in one allocation with the same strides (vLLM's [pages, 2, page_size, H, D],
 *    or [..., H, 2, D]), or scales beside the rows, are accepted.
 *    Written tensors are checked against each other, and the new rows (k_new, v_new: read,
 *    any strides) against every written one; k_new and v_new may share memory.
 * Anything else that might share an address is refused, naming both tensors.
 */
#include <stdint.h>

#include "cache/kvcache_layout.h"
#include "core/internal.h"
#include "core/overlap.h"

/* One tensor as the append sees it (core/overlap.h): its lattice dims (0..2, and 3 when its
 * last dim is not contiguous: new rows only) and the bytes at each lattice point (a row of
 * dim 3, or one element of a rank-3 scale). */
static void region_of(attn_region *r, const attn_tensor *t, const char *name, int rank) {
    attn_region_set(r, t, name, rank == 4);
}

/* Dims of size > 1, sorted by stride, must nest. */
static attn_status check_nested(const attn_region *r, attn_error *error) {
    int order[3] = {0, 1, 2};
    for (int i = 1; i < 3; ++i)
        for (int j = i; j > 0 && r->stride[order[j]] < r->stride[order[j - 1]]; --j) {
            const int swap = order[j];
            order[j] = order[j - 1], order[j - 1] = swap;
        }
    int64_t extent = r->width / r->element; /* elements covered by the dims so far */
    for (int i = 0; i < 3; ++i) {
        const int d = order[i];
        if (r->shape[d] <= 1) continue;
        if (r->stride[d] < extent)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "cache->%s.stride[%d] = %lld (shape[%d] = %lld): an append would "
                             "write two rows to one address (each dimension's stride must be at "
                             "least %lld, the extent of the smaller ones)",
                             r->name, d, (long long)r->stride[d], d, (long long)r->shape[d],
                             (long long)extent);
        extent += r->stride[d] * (r->shape[d] - 1); /* < 2^63: the tensor was checked */
    }
    return ATTN_OK;
}

/* May a and b share a byte? (Conservative: an undecided search counts as sharing.) */
static int may_overlap(const attn_region *a, const attn_region *b) {
    return attn_regions_overlap(a, b) != ATTN_OVERLAP_NONE;
}

attn_status attn_kv_check_append_layout(const attn_tensor *k_cache, const attn_tensor *v_cache,
                                        const attn_tensor *k_scale, const attn_tensor *v_scale,
                                        const attn_tensor *k_new, const attn_tensor *v_new,
                                        attn_error *error) {
    attn_region written[4], read[2];
    int count = 0, sources = 0;
    region_of(&written[count++], k_cache, "k_cache", 4);
    region_of(&written[count++], v_cache, "v_cache", 4);
    if (k_scale != NULL) region_of(&written[count++], k_scale, "k_scale", 3);
    if (v_scale != NULL) region_of(&written[count++], v_scale, "v_scale", 3);
    if (k_new != NULL) region_of(&read[sources++], k_new, "k_new", 4);
    if (v_new != NULL) region_of(&read[sources++], v_new, "v_new", 4);
    for (int n = 0; n < count; ++n) {
        attn_status status = check_nested(&written[n], error);
        if (status != ATTN_OK) return status;
    }
    for (int m = 0; m < count; ++m)
        for (int n = m + 1; n < count; ++n)
            if (may_overlap(&written[m], &written[n]))
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "cache->%s (data %p) and cache->%s (data %p) may share memory: "
                                 "an append writes both, so they must not overlap",
                                 written[m].name, (const void *)written[m].base, written[n].name,
                                 (const void *)written[n].base);
    for (int m = 0; m < sources; ++m)
        for (int n = 0; n < count; ++n)
            if (may_overlap(&read[m], &written[n])) {
                uintptr_t rb, re, wb, we;
                attn_region_span(&read[m], &rb, &re), attn_region_span(&written[n], &wb, &we);
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "append->%s (bytes [%p, %p)) and cache->%s (bytes [%p, %p)) may "
                                 "share memory: the new rows must not alias the cache they are "
                                 "appended into (the result would depend on the order of the "
                                 "copies)",
                                 read[m].name, (const void *)rb, (const void *)re, written[n].name,
                                 (const void *)wb, (const void *)we);
            }
    return ATTN_OK;
}
