/*
 * overlap.c — the exact test of whether two strided tensors may share a byte (overlap.h).
 * A tensor's elements lie at base + (lattice of its strides) + [0, width). Two tensors share
 * no byte if their address spans are disjoint, or if no multiple of the gcd of all their
 * byte strides falls within (base_b - base_a - width_a, base_b - base_a + width_b), or else if
 * no difference of their lattice points does: an exhaustive search, largest stride first, of
 * at most 4096 steps (beyond it the answer is "undecided", which callers count as sharing).
 * Sizes: every offset is within the two tensors' spans, which attn_check_tensor keeps within
 * int64.
 */
#include "core/overlap.h"

#include <stdlib.h>

#include "core/internal.h"

void attn_region_set(attn_region *r, const attn_tensor *t, const char *name, bool fold_last) {
    const int rank = t->rank;
    r->name = name;
    r->base = (uintptr_t)t->data;
    r->element = (int64_t)attn_dtype_size(t->dtype);
    const bool folded = fold_last && (t->stride[rank - 1] == 1 || t->shape[rank - 1] == 1);
    r->dims = folded ? rank - 1 : rank;
    for (int d = 0; d < ATTN_MAX_RANK; ++d)
        r->shape[d] = d < r->dims ? t->shape[d] : 1, r->stride[d] = d < r->dims ? t->stride[d] : 0;
    r->width = (folded ? t->shape[rank - 1] : 1) * r->element;
}

void attn_region_set_bytes(attn_region *r, const void *data, int64_t count, const char *name) {
    r->name = name;
    r->base = (uintptr_t)data;
    r->dims = 0;
    for (int d = 0; d < ATTN_MAX_RANK; ++d) r->shape[d] = 1, r->stride[d] = 0;
    r->element = 1;
    r->width = count;
}


static int64_t gcd(int64_t a, int64_t b) {
    a = a < 0 ? -a : a, b = b < 0 ? -b : b;
    while (b != 0) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

void attn_region_span(const attn_region *r, uintptr_t *begin, uintptr_t *end) {
    int64_t low = 0, high = 0; /* elements from base */
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
static int collect_terms(const attn_region *r, int sign, term *terms, int count) {
    for (int d = 0; d < r->dims; ++d) {
        /* a dimension of size 1 may have any stride (the tensor check bounds only the others'
         * reach), so its byte stride is not formed */
        if (r->shape[d] <= 1) continue;
        const int64_t s = sign * r->stride[d] * r->element;
        if (s == 0) continue;
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
 * the answer is "yes" (the caller then reads the budget to say "undecided"). */
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

/* Terms sorted largest stride first, and their rest_min / rest_max [count + 1]. */
static void prepare_terms(term *terms, int count, int64_t *rest_min, int64_t *rest_max) {
    for (int i = 1; i < count; ++i)
        for (int j = i; j > 0 && terms[j].stride > terms[j - 1].stride; --j) {
            const term swap = terms[j];
            terms[j] = terms[j - 1], terms[j - 1] = swap;
        }
    rest_min[count] = rest_max[count] = 0;
    for (int i = count - 1; i >= 0; --i)
        rest_min[i] = rest_min[i + 1] + terms[i].low * terms[i].stride,
        rest_max[i] = rest_max[i + 1] + terms[i].high * terms[i].stride;
}

attn_overlap attn_region_self_overlap(const attn_region *r) {
    int dims[ATTN_MAX_RANK], n = 0; /* the dims of size > 1, by byte stride ascending */
    for (int d = 0; d < r->dims; ++d) {
        if (r->shape[d] <= 1) continue;
        if (r->stride[d] == 0) return ATTN_OVERLAP_SHARED;
        int j = n++;
        for (; j > 0 && llabs(r->stride[dims[j - 1]]) > llabs(r->stride[d]); --j) dims[j] = dims[j - 1];
        dims[j] = d;
    }
    int64_t extent = r->width; /* bytes the smaller dims and one lattice point cover */
    bool nested = true;
    for (int i = 0; i < n && nested; ++i) {
        const int64_t s = llabs(r->stride[dims[i]]) * r->element;
        nested = s >= extent;
        extent += s * (r->shape[dims[i]] - 1);
    }
    if (nested) return ATTN_OVERLAP_NONE;
    /* Two index vectors x != y share a byte iff their difference, whose first nonzero entry
     * (dims[p], in stride order) may be taken positive, puts the lattice points less than a
     * width apart: for each p, dims[p] moves by 1 .. shape - 1, the larger dims by any amount
     * in either direction, the smaller ones not at all. */
    bool undecided = false;
    for (int p = 0; p < n; ++p) {
        term terms[ATTN_MAX_RANK];
        int count = 0;
        for (int i = p; i < n; ++i) {
            const int64_t s = r->stride[dims[i]] * r->element, most = r->shape[dims[i]] - 1;
            terms[count].stride = s > 0 ? s : -s;
            terms[count].low = i > p ? -most : s > 0 ? 1 : -most;
            terms[count].high = i > p ? most : s > 0 ? most : -1;
            ++count;
        }
        int64_t rest_min[ATTN_MAX_RANK + 1], rest_max[ATTN_MAX_RANK + 1];
        prepare_terms(terms, count, rest_min, rest_max);
        int budget = 4096;
        if (reachable(terms, count, 0, rest_min, rest_max, -(r->width - 1), r->width - 1, &budget)) {
            if (budget >= 0) return ATTN_OVERLAP_SHARED;
            undecided = true;
        }
    }
    return undecided ? ATTN_OVERLAP_UNDECIDED : ATTN_OVERLAP_NONE;
}

attn_status attn_check_output_layout(const attn_tensor *t, const char *name, attn_error *error) {
    for (int d = 0; d < t->rank; ++d)
        if (t->stride[d] == 0 && t->shape[d] > 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "%s.stride[%d] = 0 with shape[%d] = %lld: an output cannot broadcast",
                             name, d, d, (long long)t->shape[d]);
    attn_region r;
    attn_region_set(&r, t, name, true);
    if (attn_region_self_overlap(&r) != ATTN_OVERLAP_NONE) {
        char shape[96], strides[96];
        attn_format_dims(shape, sizeof shape, t->rank, t->shape);
        attn_format_dims(strides, sizeof strides, t->rank, t->stride);
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "%s: shape %s, strides %s: two of its elements share memory; an output "
                         "needs its own bytes for every element", name, shape, strides);
    }
    return ATTN_OK;
}

attn_overlap attn_regions_overlap(const attn_region *a, const attn_region *b) {
    uintptr_t a_begin, a_end, b_begin, b_end;
    attn_region_span(a, &a_begin, &a_end), attn_region_span(b, &b_begin, &b_end);
    if (a_end <= b_begin || b_end <= a_begin) return ATTN_OVERLAP_NONE;
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
    if (g == 0) return low <= 0 && 0 <= high ? ATTN_OVERLAP_SHARED : ATTN_OVERLAP_NONE;
    const int64_t first = -floor_div(-low, g) * g; /* the least multiple of g >= low */
    if (first > high) return ATTN_OVERLAP_NONE;
    /* Else search the differences themselves: b's dims count up, a's down. This separates
     * k and v pages of one page ([pages, 2, page_size, H, D]), which share every stride. */
    term terms[2 * ATTN_MAX_RANK];
    int count = collect_terms(b, 1, terms, 0);
    count = collect_terms(a, -1, terms, count);
    int64_t rest_min[2 * ATTN_MAX_RANK + 1], rest_max[2 * ATTN_MAX_RANK + 1];
    prepare_terms(terms, count, rest_min, rest_max); /* largest stride first */
    int budget = 4096;
    if (!reachable(terms, count, 0, rest_min, rest_max, low, high, &budget)) return ATTN_OVERLAP_NONE;
    return budget < 0 ? ATTN_OVERLAP_UNDECIDED : ATTN_OVERLAP_SHARED;
}
