/*
 * kvcache_layout.c — the memory an append into a caller-owned KV cache writes
 * (attn_forward_with_kvcache, kvcache_layout.h): every row it writes must be its own, so that
 * no append overwrites another's keys, values or Q8 scales. Two conservative rules, checked
 * before the first write (read-only calls never come here):
 *  - within one tensor, dimensions 0..2 of size > 1 sorted by stride must nest: each stride at
 *    least the extent of the smaller ones (a row of width D, or 1 for a scale); this refuses
 *    a zero stride, and rows that overlap their neighbours;
 *  - between two tensors, whose elements lie at base + (lattice of their strides) + [0, width):
 *    they may not share a byte if their address spans are disjoint, or if no multiple of the
 *    gcd of all their (byte) strides falls within (base2 - base1 - width1, base2 - base1 +
 *    width2) — so k and v interleaved in one allocation with the same strides (vLLM's
 *    [pages, 2, page_size, H, D], or [..., H, 2, D]), or scales beside the rows, are accepted.
 * Anything else that might share an address is refused, naming both tensors.
 */
#include <stdint.h>

#include "cache/kvcache_layout.h"
#include "core/internal.h"

/* One tensor as the append sees it: byte strides of dims 0..2, a row's width in bytes. */
typedef struct region {
    const char *name;
    uintptr_t base;
    int64_t shape[3], stride[3]; /* stride in elements */
    int64_t element, width;      /* bytes: one element, one row (width elements of dim 3) */
} region;

static region region_of(const attn_tensor *t, const char *name, int rank) {
    region r;
    r.name = name;
    r.base = (uintptr_t)t->data;
    r.element = (int64_t)attn_dtype_size(t->dtype);
    for (int d = 0; d < 3; ++d) r.shape[d] = t->shape[d], r.stride[d] = t->stride[d];
    r.width = (rank == 4 ? t->shape[3] : 1) * r.element;
    return r;
}

/* Dims of size > 1, sorted by stride, must nest. */
static attn_status check_nested(const region *r, attn_error *error) {
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

static int64_t gcd(int64_t a, int64_t b) {
    while (b != 0) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* Bytes [base, end) the tensor's elements may occupy. */
static uintptr_t span_end(const region *r) {
    int64_t last = 0;
    for (int d = 0; d < 3; ++d)
        if (r->shape[d] > 0) last += r->stride[d] * (r->shape[d] - 1);
    return r->base + (uintptr_t)(last * r->element + r->width);
}

/* May a and b share a byte? (Conservative: "no" is certain, "yes" may be a false alarm.) */
static int may_overlap(const region *a, const region *b) {
    if (span_end(a) <= b->base || span_end(b) <= a->base) return 0;
    int64_t g = 0;
    for (int d = 0; d < 3; ++d) {
        if (a->shape[d] > 1) g = gcd(g, a->stride[d] * a->element);
        if (b->shape[d] > 1) g = gcd(g, b->stride[d] * b->element);
    }
    /* Shared byte: delta = (b's lattice point - a's) = base_a - base_b + x - y, x in [0,
     * width_a), y in [0, width_b); lattice differences are multiples of g. */
    const int64_t low = (int64_t)(a->base - b->base) - (b->width - 1); /* wraps correctly */
    const int64_t high = (int64_t)(a->base - b->base) + (a->width - 1);
    if (g == 0) return low <= 0 && 0 <= high;
    /* Is there a multiple of g in [low, high]? */
    int64_t first = low % g == 0 ? low : low - (low % g) + (low > 0 ? g : 0);
    return first <= high;
}

attn_status attn_kv_check_append_layout(const attn_tensor *k_cache, const attn_tensor *v_cache,
                                        const attn_tensor *k_scale, const attn_tensor *v_scale,
                                        attn_error *error) {
    region regions[4];
    int count = 0;
    regions[count++] = region_of(k_cache, "k_cache", 4);
    regions[count++] = region_of(v_cache, "v_cache", 4);
    if (k_scale != NULL) regions[count++] = region_of(k_scale, "k_scale", 3);
    if (v_scale != NULL) regions[count++] = region_of(v_scale, "v_scale", 3);
    for (int n = 0; n < count; ++n) {
        attn_status status = check_nested(&regions[n], error);
        if (status != ATTN_OK) return status;
    }
    for (int m = 0; m < count; ++m)
        for (int n = m + 1; n < count; ++n)
            if (may_overlap(&regions[m], &regions[n]))
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "cache->%s (data %p) and cache->%s (data %p) may share memory: "
                                 "an append writes both, so they must not overlap",
                                 regions[m].name, (const void *)regions[m].base, regions[n].name,
                                 (const void *)regions[n].base);
    return ATTN_OK;
}
