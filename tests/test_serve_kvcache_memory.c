/*
 * test_serve_kvcache_memory.c — attn_forward_with_kvcache under execution.memory_limit_bytes:
 * a limit that the call's own buffers fit but the attention after the append (attn_decode
 * for a few queries, attn_forward per sequence for a prefill chunk) does not is refused with
 * ATTN_ERROR_MEMORY_LIMIT and leaves the caller's cache (K, V and Q8's row scales) byte for
 * byte as it was, as attn.h promises for any error; a limit the whole call fits appends and
 * gives the same cache and output bytes as the call without a limit.
 *
 * Limits are scanned from 64 bytes up by factors of 1.25 until the call succeeds, so that the
 * test does not depend on how much working memory either inner call needs; at least one
 * refusal must come from the inner call (its message names attn_decode or attn_forward).
 * Contiguous and paged caches, F32 and Q8 storage, decode (Tq = Tnew = 1 and 3) and prefill
 * (Tq = Tnew = 40: gathered from pages, or read in place).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct memory_case {
    const char *name;
    attn_dtype dtype;  /* storage: F32 or Q8 */
    int64_t page_size; /* 0: contiguous [B, S_max, H, D] */
    int64_t Tnew;      /* = Tq */
} memory_case;

static const memory_case cases[] = {
    {"contiguous f32, decode", ATTN_DTYPE_F32, 0, 1},
    {"contiguous f32, prefill in place", ATTN_DTYPE_F32, 0, 40},
    {"paged f32, decode of 3", ATTN_DTYPE_F32, 16, 3},
    {"paged f32, prefill gathered", ATTN_DTYPE_F32, 16, 40},
    {"paged q8, decode", ATTN_DTYPE_Q8, 16, 1},
    {"contiguous q8, prefill", ATTN_DTYPE_Q8, 0, 40},
};

enum { B = 2, HQ = 4, HKV = 2, D = 32, CAPACITY = 160 };

/* A byte buffer and a rank-n view of it. */
typedef struct buffer {
    void *data;
    size_t bytes;
    attn_tensor view;
} buffer;

static buffer buffer_new(attn_dtype dtype, int rank, const int64_t *shape, test_rng *rng) {
    buffer b;
    size_t elements = 1;
    for (int d = 0; d < rank; ++d) elements *= (size_t)shape[d];
    b.bytes = elements * attn_dtype_size(dtype);
    b.data = malloc(b.bytes);
    if (dtype == ATTN_DTYPE_F32)
        for (size_t e = 0; e < elements; ++e)
            ((float *)b.data)[e] = (float)test_rng_normal(rng);
    else
        for (size_t e = 0; e < b.bytes; ++e)
            ((unsigned char *)b.data)[e] = (unsigned char)(test_rng_next(rng) % 200);
    b.view = attn_tensor_contiguous(b.data, dtype, rank, shape);
    return b;
}

static buffer buffer_copy(const buffer *source) {
    buffer b = *source;
    b.data = malloc(source->bytes);
    memcpy(b.data, source->data, source->bytes);
    b.view.data = b.data;
    return b;
}

static int same_bytes(const buffer *a, const buffer *b) {
    return a->bytes == b->bytes && memcmp(a->data, b->data, a->bytes) == 0;
}

/* The cache of one run: K, V and (Q8) their row scales, copied from the originals. */
typedef struct cache_state {
    buffer k, v, k_scale, v_scale;
    int q8;
} cache_state;

static cache_state state_copy(const cache_state *s) {
    cache_state c = *s;
    c.k = buffer_copy(&s->k), c.v = buffer_copy(&s->v);
    if (s->q8) c.k_scale = buffer_copy(&s->k_scale), c.v_scale = buffer_copy(&s->v_scale);
    return c;
}

static int state_equal(const cache_state *a, const cache_state *b) {
    return same_bytes(&a->k, &b->k) && same_bytes(&a->v, &b->v) &&
           (!a->q8 || (same_bytes(&a->k_scale, &b->k_scale) && same_bytes(&a->v_scale, &b->v_scale)));
}

static void state_free(cache_state *s) {
    free(s->k.data), free(s->v.data);
    if (s->q8) free(s->k_scale.data), free(s->v_scale.data);
}

/* One call on `state` (written in place) with the given limit (0: none); out written. */
static attn_status run(const memory_case *c, cache_state *state, const attn_tensor *table,
                       const int32_t *seqlens, const attn_tensor *q, const attn_tensor *k_new,
                       const attn_tensor *v_new, buffer *out, size_t limit, attn_error *error) {
    attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, &state->k.view, &state->v.view,
                               c->page_size > 0 ? table : NULL, seqlens,
                               state->q8 ? &state->k_scale.view : NULL,
                               state->q8 ? &state->v_scale.view : NULL};
    attn_kv_append append = {k_new, v_new, NULL, NULL, ATTN_ROPE_HALF};
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_execution execution = attn_execution_default();
    execution.num_threads = 2;
    execution.memory_limit_bytes = limit;
    memset(error, 0, sizeof *error);
    return attn_forward_with_kvcache(q, &view, &append, &options, &out->view, NULL, &execution,
                                     error);
}

static void test_case(const memory_case *c, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    const int q8 = c->dtype == ATTN_DTYPE_Q8;
    const int64_t pages = c->page_size > 0 ? 2 * CAPACITY / c->page_size : B;
    const int64_t slots = c->page_size > 0 ? c->page_size : CAPACITY;
    const int64_t max_pages = c->page_size > 0 ? CAPACITY / c->page_size : 1;
    const int64_t cache_shape[4] = {pages, slots, HKV, D}, scale_shape[3] = {pages, slots, HKV};
    cache_state original;
    memset(&original, 0, sizeof original);
    original.q8 = q8;
    original.k = buffer_new(c->dtype, 4, cache_shape, &rng);
    original.v = buffer_new(c->dtype, 4, cache_shape, &rng);
    if (q8) {
        original.k_scale = buffer_new(ATTN_DTYPE_F32, 3, scale_shape, &rng);
        original.v_scale = buffer_new(ATTN_DTYPE_F32, 3, scale_shape, &rng);
        for (size_t e = 0; e < original.k_scale.bytes / 4; ++e) {
            ((float *)original.k_scale.data)[e] = 0.01f;
            ((float *)original.v_scale.data)[e] = 0.02f;
        }
    }
    /* sequence b uses pages b, b + 2, b + 4, ... (interleaved, so the pages are gathered) */
    int32_t table_data[B * CAPACITY];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t block = 0; block < max_pages; ++block)
            table_data[b * max_pages + block] = (int32_t)(b + B * block);
    const int64_t table_shape[2] = {B, max_pages};
    const attn_tensor table = attn_tensor_contiguous(table_data, ATTN_DTYPE_I32, 2, table_shape);
    const int32_t seqlens[B] = {57, 90};
    const int64_t q_shape[4] = {B, c->Tnew, HQ, D}, new_shape[4] = {B, c->Tnew, HKV, D};
    buffer q = buffer_new(ATTN_DTYPE_F32, 4, q_shape, &rng);
    buffer k_new = buffer_new(ATTN_DTYPE_F32, 4, new_shape, &rng);
    buffer v_new = buffer_new(ATTN_DTYPE_F32, 4, new_shape, &rng);
    buffer out = buffer_new(ATTN_DTYPE_F32, 4, q_shape, &rng);
    attn_error error;

    /* Without a limit: the cache and output every successful call must give. */
    cache_state expected = state_copy(&original);
    buffer expected_out = buffer_copy(&out);
    CHECK_STATUS(run(c, &expected, &table, seqlens, &q.view, &k_new.view, &v_new.view,
                     &expected_out, 0, &error),
                 ATTN_OK, &error, "%s: without a memory limit", c->name);
    CHECK(!state_equal(&expected, &original), "%s: the call appends", c->name);

    int inner_refusals = 0, untouched = 1, succeeded = 0;
    for (double limit = 64; limit < 1 << 28 && !succeeded; limit *= 1.25) {
        cache_state state = state_copy(&original);
        buffer result = buffer_copy(&out);
        const attn_status status = run(c, &state, &table, seqlens, &q.view, &k_new.view,
                                       &v_new.view, &result, (size_t)limit, &error);
        if (status == ATTN_OK) {
            succeeded = 1;
            CHECK(state_equal(&state, &expected) && same_bytes(&result, &expected_out),
                  "%s: with a limit of %.0f bytes that fits, the same cache and output as "
                  "without a limit",
                  c->name, limit);
        } else {
            CHECK_STATUS(status, ATTN_ERROR_MEMORY_LIMIT, &error, "%s: limit %.0f", c->name,
                         limit);
            const int inner = strstr(error.message, "attn_decode") != NULL ||
                              strstr(error.message, "attn_forward needs") != NULL;
            inner_refusals += inner;
            if (!state_equal(&state, &original)) {
                if (untouched)
                    CHECK(0, "%s: refused at a limit of %.0f bytes (%s), the cache is untouched",
                          c->name, limit, error.message);
                untouched = 0;
            }
        }
        state_free(&state);
        free(result.data);
    }
    CHECK(succeeded, "%s: some limit fits", c->name);
    CHECK(inner_refusals > 0, "%s: some limit fails in the attention after the checks (%d)",
          c->name, inner_refusals);
    CHECK(untouched, "%s: every refusal leaves the cache as it was", c->name);

    state_free(&expected), state_free(&original);
    free(expected_out.data), free(q.data), free(k_new.data), free(v_new.data), free(out.data);
}

int main(void) {
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; ++n) test_case(&cases[n], 70 + n);
    return test_finish();
}
