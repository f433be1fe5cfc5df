/*
 * kvcache_layout.c — the memory an append into a caller-owned KV cache writes
 * (attn_forward_with_kvcache, kvcache_layout.h): every row it writes must be its own, so that
 * no append overwrites another's keys, values or Q8 scales, and the new rows it reads must not
 * lie in that memory, so that no copy reads what another has just written. Conservative
 * rules, checked before the first write (read-only calls never come here):
 *  - within one written tensor, dimensions 0..2 of size > 1 sorted by stride must nest: each
 *    stride at least the extent of the smaller ones (a row of width D, or 1 for a scale); this
 *    refuses a zero stride, and rows that overlap their neighbours;
 *  - between two tensors, whose elements lie at base + (lattice of their strides) + [0, width):
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

/* One tensor as the append sees it: its lattice dims (0..2, and 3 when its last dim is not
 * contiguous: new rows only) and the bytes at each lattice point (a row of dim 3, or one
 * element). */
typedef struct region {
    const char *name;
    uintptr_t base;              /* element [0, ..., 0] */
    int dims;                    /* 3 or 4 */
    int64_t shape[4], stride[4]; /* stride in elements, any sign */
    int64_t element, width;      /* bytes: one element, one lattice point */
} region;

static region region_of(const attn_tensor *t, const char *name, int rank) {
    region r;
    r.name = name;
    r.base = (uintptr_t)t->data;
    r.element = (int64_t)attn_dtype_size(t->dtype);
    const int folded = rank == 3 || t->stride[3] == 1 || t->shape[3] == 1; /* dim 3 is a row */
    r.dims = folded ? 3 : 4;
    for (int d = 0; d < r.dims; ++d) r.shape[d] = t->shape[d], r.stride[d] = t->stride[d];
    r.width = (rank == 4 && folded ? t->shape[3] : 1) * r.element;
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
    a = a < 0 ? -a : a, b = b < 0 ? -b : b;
    while (b != 0) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* Bytes [*begin, *end) the tensor's elements may occupy (strides of any sign). */
static void span(const region *r, uintptr_t *begin, uintptr_t *end) {
    int64_t low = 0, high = 0; /* elements from base; < 2^63 bytes: the tensor was checked */
    for (int d = 0; d < r->dims; ++d) {
        const int64_t reach = r->stride[d] * (r->shape[d] - 1);
        if (reach < 0) low += reach;
        else high += reach;
    }
    *begin = r->base + (uintptr_t)(low * r->element); /* wraps correctly for low < 0 */
    *end = r->base + (uintptr_t)(high * r->element + r->width);
}

/* One lattice dimension of a difference of addresses: coefficient in [low, high] times a
 * byte stride > 0. */
typedef struct term {
    int64_t stride, low, high;
} term;

/* The nonzero strides of r's dims of size > 1, each times sign (+1 or -1), into terms. */
static int collect_terms(const region *r, int sign, term *terms, int count) {
    for (int d = 0; d < r->dims; ++d) {
        const int64_t s = sign * r->stride[d] * r->element;
        if (r->shape[d] <= 1 || s == 0) continue;
        terms[count].stride = s > 0 ? s : -s;
        terms[count].low = s > 0 ? 0 : -(r->shape[d] - 1);
        terms[count].high = s > 0 ? r->shape[d] - 1 : 0;
        ++count;
    }
    return count;
}

static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); } /* b > 0 */

/* Is some sum of k_j * terms[j].stride over j >= i (k_j within its term's range) in
 * [low, high]? rest_min / rest_max [count + 1]: the least and greatest such sums from each j.
 * Exhaustive, largest stride first; every call spends one of *budget, and once it is spent
 * the answer is "yes" (the conservative side). */
static int reachable(const term *terms, int count, int i, const int64_t *rest_min,
                     const int64_t *rest_max, int64_t low, int64_t high, int *budget) {
    if (--*budget < 0) return 1;
    if (i == count) return low <= 0 && 0 <= high;
    const int64_t s = terms[i].stride;
    int64_t first = -floor_div(-(low - rest_max[i + 1]), s), last = floor_div(high - rest_min[i + 1], s);
    if (first < terms[i].low) first = terms[i].low;
    if (last > terms[i].high) last = terms[i].high;
    for (int64_t k = first; k <= last; ++k)
        if (reachable(terms, count, i + 1, rest_min, rest_max, low - k * s, high - k * s, budget))
            return 1;
    return 0;
}

/* May a and b share a byte? (Conservative: "no" is certain, "yes" may be a false alarm, for
 * layouts too intricate to settle within the search budget.) Sizes: every offset below is
 * within the two tensors' spans, which were checked to fit in int64 and meet. */
static int may_overlap(const region *a, const region *b) {
    uintptr_t a_begin, a_end, b_begin, b_end;
    span(a, &a_begin, &a_end), span(b, &b_begin, &b_end);
    if (a_end <= b_begin || b_end <= a_begin) return 0;
    /* Shared byte: (b's lattice point - a's) = base_a - base_b + x - y, x in [0, width_a),
     * y in [0, width_b). */
    const int64_t low = (int64_t)(a->base - b->base) - (b->width - 1); /* wraps correctly */
    const int64_t high = (int64_t)(a->base - b->base) + (a->width - 1);
    /* Lattice differences are multiples of g, the gcd of all the byte strides: no multiple
     * of g in [low, high], no shared byte. */
    int64_t g = 0;
    for (int d = 0; d < a->dims; ++d)
        if (a->shape[d] > 1) g = gcd(g, a->stride[d] * a->element);
    for (int d = 0; d < b->dims; ++d)
        if (b->shape[d] > 1) g = gcd(g, b->stride[d] * b->element);
    if (g == 0) return low <= 0 && 0 <= high;
    const int64_t first = -floor_div(-low, g) * g; /* the least multiple of g >= low */
    if (first > high) return 0;
    /* Else search the differences themselves: b's dims count up, a's down. This separates
     * k and v pages of one page ([pages, 2, page_size, H, D]), which share every stride. */
    term terms[8];
    int count = collect_terms(b, 1, terms, 0);
    count = collect_terms(a, -1, terms, count);
    for (int i = 1; i < count; ++i) /* largest stride first */
        for (int j = i; j > 0 && terms[j].stride > terms[j - 1].stride; --j) {
            const term swap = terms[j];
            terms[j] = terms[j - 1], terms[j - 1] = swap;
        }
    int64_t rest_min[9], rest_max[9];
    rest_min[count] = rest_max[count] = 0;
    for (int i = count - 1; i >= 0; --i)
        rest_min[i] = rest_min[i + 1] + terms[i].low * terms[i].stride,
        rest_max[i] = rest_max[i + 1] + terms[i].high * terms[i].stride;
    int budget = 4096;
    return reachable(terms, count, 0, rest_min, rest_max, low, high, &budget);
}

attn_status attn_kv_check_append_layout(const attn_tensor *k_cache, const attn_tensor *v_cache,
                                        const attn_tensor *k_scale, const attn_tensor *v_scale,
                                        const attn_tensor *k_new, const attn_tensor *v_new,
                                        attn_error *error) {
    region written[4], read[2];
    int count = 0, sources = 0;
    written[count++] = region_of(k_cache, "k_cache", 4);
    written[count++] = region_of(v_cache, "v_cache", 4);
    if (k_scale != NULL) written[count++] = region_of(k_scale, "k_scale", 3);
    if (v_scale != NULL) written[count++] = region_of(v_scale, "v_scale", 3);
    if (k_new != NULL) read[sources++] = region_of(k_new, "k_new", 4);
    if (v_new != NULL) read[sources++] = region_of(v_new, "v_new", 4);
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
                span(&read[m], &rb, &re), span(&written[n], &wb, &we);
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
