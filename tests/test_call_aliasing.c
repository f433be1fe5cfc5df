/*
 * test_call_aliasing.c — outputs that share memory with an input or with another output are
 * refused by every entry point (call.h: attn_call_check_aliasing), over a table of cases per
 * entry point (attn_forward, attn_reference_forward, attn_backward, attn_reference_backward,
 * attn_decode, attn_reference_decode, attn_forward_with_kvcache, attn_varlen_forward,
 * attn_varlen_backward, attn_merge):
 *  - refused: out == q, out inside k (shifted by a row), lse inside out, dq overlapping dk,
 *    out inside a caller-owned cache (with and without an append), out inside a bias, out a
 *    shifted view of merge's outs[0]; INVALID_ARGUMENT, the message naming both tensors with
 *    their byte ranges (computed here from the views), and every byte of the one arena that
 *    holds all the tensors (outputs, lse, the cache) unchanged;
 *  - refused too: an output whose strides make two of its elements meet (the nested test, and
 *    the exact search for interleavings: distinct interleaved outputs are accepted);
 *  - refused too: an output that overlaps itself by a broadcast (a zero stride on a dimension
 *    of size > 1), naming the tensor, the dimension and the stride, nothing written;
 *  - accepted: outputs interleaved with the inputs in one buffer without sharing a byte
 *    ([.., 4, H, D] q / k / v / out, [.., 3, H, D] dq / dk / dv), k and v one view, merge in
 *    place (out = outs[0], lse = lses[0]): bitwise equal to the same call on separate
 *    buffers.
 */
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Sizes shared by the cases: B sequences of T tokens, H heads (MHA), head dim D. */
enum { B = 2, T = 8, H = 2, D = 16, ROW = H * D, TENSOR = B * T * ROW, LSE = B * H * T };
/* The arena: every tensor of a case lives in it, at a multiple of SLOT floats. */
enum { SLOT = 1024, SLOTS = 24, ARENA = SLOT * SLOTS };

static float *arena;        /* ARENA floats */
static float *arena_before; /* its copy before the call */

static void arena_fill(uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_fill_normal(&rng, arena, ARENA, 1.0f);
    memcpy(arena_before, arena, ARENA * sizeof(float));
}

/* A float32 view at `offset` floats into the arena: contiguous [d0, d1, d2, d3]. */
static attn_tensor at4(int64_t offset, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return attn_tensor_f32_4d(arena + offset, d0, d1, d2, d3);
}
static attn_tensor at3(int64_t offset, int64_t d0, int64_t d1, int64_t d2) {
    const int64_t shape[3] = {d0, d1, d2};
    return attn_tensor_contiguous(arena + offset, ATTN_DTYPE_F32, 3, shape);
}
/* Slot `slot` of `slots` of one [B, T, slots, H, D] buffer at `offset`, as [B, T, H, D]. */
static attn_tensor interleaved(int64_t offset, int slot, int slots) {
    attn_tensor t = at4(offset + slot * ROW, B, T, H, D);
    t.stride[1] = (int64_t)slots * ROW, t.stride[0] = (int64_t)T * slots * ROW;
    return t;
}

/* Bytes [begin, end) a view addresses, from its shape and strides. */
static void byte_range(const attn_tensor *t, uintptr_t *begin, uintptr_t *end) {
    int64_t low = 0, high = 0;
    for (int d = 0; d < t->rank; ++d) {
        const int64_t reach = t->stride[d] * (t->shape[d] - 1);
        if (reach < 0) low += reach;
        else high += reach;
    }
    const int64_t size = (int64_t)attn_dtype_size(t->dtype);
    *begin = (uintptr_t)t->data + (uintptr_t)(low * size);
    *end = (uintptr_t)t->data + (uintptr_t)((high + 1) * size);
}

/* The view called `name` among `count` named views. */
static const attn_tensor *find(const char *name, int count, const char *const *names,
                               const attn_tensor *const *views) {
    for (int n = 0; n < count; ++n)
        if (strcmp(names[n], name) == 0) return views[n];
    return NULL;
}

/* The call was refused naming `output` and `other` (two of the `count` named views) with
 * their byte ranges, and the arena is byte for byte what it was. */
static void check_refused(attn_status status, const attn_error *error, const char *output,
                          const char *other, int count, const char *const *names,
                          const attn_tensor *const *views, const char *label) {
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, error, "%s: refused", label);
    const attn_tensor *output_view = find(output, count, names, views);
    const attn_tensor *other_view = find(other, count, names, views);
    if (output_view == NULL || other_view == NULL) {
        CHECK(0, "%s: the table names %s and %s", label, output, other);
        return;
    }
    uintptr_t ob, oe, b, e;
    byte_range(output_view, &ob, &oe), byte_range(other_view, &b, &e);
    char expected[256];
    snprintf(expected, sizeof expected, "%s (bytes [%p, %p)) and %s (bytes [%p, %p)) share memory",
             output, (const void *)ob, (const void *)oe, other, (const void *)b, (const void *)e);
    CHECK(strstr(error->message, expected) != NULL, "%s: message \"%s\" contains \"%s\"", label,
          error->message, expected);
    CHECK(memcmp(arena, arena_before, ARENA * sizeof(float)) == 0,
          "%s: nothing written (outputs, lse and cache byte for byte as before)", label);
}

/* ---- attn_forward and attn_reference_forward ---------------------------------------- */

/* Placement of one forward case (offsets in floats; -1 = the default slot). The message
 * names `output` first (out is checked before lse, each against the inputs, then out against
 * lse), then `other`. */
typedef struct forward_case {
    const char *label;
    int64_t out, lse;
    int bias; /* options.bias at slot 10 */
    const char *output, *other;
} forward_case;

static void test_forward(int reference) {
    const char *who = reference ? "attn_reference_forward" : "attn_forward";
    /* q @ slot 0, k @ 1, v @ 2, out @ 3, lse @ 4, bias @ 10 */
    const forward_case cases[] = {
        {"out == q", 0, -1, 0, "out", "q"},
        {"out inside k (one row on)", SLOT + ROW, -1, 0, "out", "k"},
        {"out overlapping v's tail", 2 * SLOT + TENSOR - ROW, -1, 0, "out", "v"},
        {"lse inside out", -1, 3 * SLOT + 100, 0, "out", "lse"},
        {"lse == q's first floats", -1, 0, 0, "lse", "q"},
        {"out inside options.bias", 10 * SLOT, -1, 1, "out", "options.bias"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const forward_case *fc = &cases[c];
        arena_fill(100 + c);
        attn_tensor q = at4(0, B, T, H, D), k = at4(SLOT, B, T, H, D), v = at4(2 * SLOT, B, T, H, D);
        attn_tensor out = at4(fc->out >= 0 ? fc->out : 3 * SLOT, B, T, H, D);
        attn_tensor lse = at3(fc->lse >= 0 ? fc->lse : 4 * SLOT, B, H, T);
        attn_tensor bias = at4(10 * SLOT, B, H, T, T);
        attn_options options = attn_options_default();
        options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
        if (fc->bias) options.bias = &bias;
        attn_error error;
        const attn_status status = reference
                                       ? attn_reference_forward(&q, &k, &v, &options, &out, &lse, &error)
                                       : attn_forward(&q, &k, &v, &options, &out, &lse, NULL, &error);
        const attn_tensor *const views[] = {&q, &k, &v, &out, &lse, &bias};
        const char *const names[] = {"q", "k", "v", "out", "lse", "options.bias"};
        char label[128];
        snprintf(label, sizeof label, "%s, %s", who, fc->label);
        check_refused(status, &error, fc->output, fc->other, 6, names, views, label);
    }

    /* Accepted: q, k, v, out interleaved in one [B, T, 4, H, D] buffer (out shares no byte
     * with the inputs), and k and v one view; bitwise the same as separate buffers. */
    arena_fill(7);
    attn_tensor q = interleaved(0, 0, 4), k = interleaved(0, 1, 4), v = interleaved(0, 2, 4);
    attn_tensor out = interleaved(0, 3, 4), lse = at3(8 * SLOT, B, H, T);
    attn_tensor q2 = at4(12 * SLOT, B, T, H, D), k2 = at4(13 * SLOT, B, T, H, D);
    attn_tensor out2 = at4(14 * SLOT, B, T, H, D), lse2 = at3(15 * SLOT, B, H, T);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t d = 0; d < D; ++d) {
                    *((float *)q2.data + ((b * T + t) * H + h) * D + d) = test_get4(&q, b, t, h, d);
                    *((float *)k2.data + ((b * T + t) * H + h) * D + d) = test_get4(&k, b, t, h, d);
                }
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_error error;
    attn_status status = reference ? attn_reference_forward(&q, &k, &k, &options, &out, &lse, &error)
                                   : attn_forward(&q, &k, &k, &options, &out, &lse, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: q, k = v and out interleaved in one buffer", who);
    (void)v;
    status = reference ? attn_reference_forward(&q2, &k2, &k2, &options, &out2, &lse2, &error)
                       : attn_forward(&q2, &k2, &k2, &options, &out2, &lse2, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: separate buffers", who);
    CHECK(test_bitwise_equal(&out, &out2) && test_bitwise_equal(&lse, &lse2),
          "%s: interleaved out and lse bitwise equal to separate buffers", who);
}

/* ---- attn_backward and attn_reference_backward --------------------------------------- */

static void test_backward(int reference) {
    const char *who = reference ? "attn_reference_backward" : "attn_backward";
    /* q 0, k 1, v 2, out 3, lse 4, dout 5, dq 6, dk 7, dv 8 */
    typedef struct {
        const char *label;
        int64_t dq, dk, dv;
        const char *output, *other;
    } backward_case;
    const backward_case cases[] = {
        {"dq overlapping dk", 7 * SLOT + 8, -1, -1, "dq", "dk"},
        {"dq == q", 0, -1, -1, "dq", "q"},
        {"dv inside dout", -1, -1, 5 * SLOT + ROW, "dv", "dout"},
        {"dk inside out", -1, 3 * SLOT + 4, -1, "dk", "out"},
        {"dv overlapping lse", -1, -1, 4 * SLOT - TENSOR + 1, "dv", "lse"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const backward_case *bc = &cases[c];
        arena_fill(200 + c);
        attn_tensor q = at4(0, B, T, H, D), k = at4(SLOT, B, T, H, D), v = at4(2 * SLOT, B, T, H, D);
        attn_tensor out = at4(3 * SLOT, B, T, H, D), lse = at3(4 * SLOT, B, H, T);
        attn_tensor dout = at4(5 * SLOT, B, T, H, D);
        attn_tensor dq = at4(bc->dq >= 0 ? bc->dq : 6 * SLOT, B, T, H, D);
        attn_tensor dk = at4(bc->dk >= 0 ? bc->dk : 7 * SLOT, B, T, H, D);
        attn_tensor dv = at4(bc->dv >= 0 ? bc->dv : 8 * SLOT, B, T, H, D);
        for (int64_t n = 0; n < LSE; ++n) ((float *)lse.data)[n] = 3.0f; /* finite */
        memcpy(arena_before, arena, ARENA * sizeof(float));
        attn_options options = attn_options_default();
        attn_error error;
        const attn_status status =
            reference ? attn_reference_backward(&q, &k, &v, &out, &lse, &dout, &options, &dq, &dk,
                                                &dv, NULL, &error)
                      : attn_backward(&q, &k, &v, &out, &lse, &dout, &options, &dq, &dk, &dv, NULL,
                                      NULL, &error);
        const attn_tensor *const views[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv};
        const char *const names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};
        char label[128];
        snprintf(label, sizeof label, "%s, %s", who, bc->label);
        check_refused(status, &error, bc->output, bc->other, 9, names, views, label);
    }

    /* Accepted: dq, dk, dv interleaved in one [B, T, 3, H, D] buffer; bitwise the same as
     * separate buffers. The forward first, for a consistent out and lse. */
    arena_fill(9);
    attn_tensor q = at4(0, B, T, H, D), k = at4(SLOT, B, T, H, D), v = at4(2 * SLOT, B, T, H, D);
    attn_tensor out = at4(3 * SLOT, B, T, H, D), lse = at3(4 * SLOT, B, H, T);
    attn_tensor dout = at4(5 * SLOT, B, T, H, D);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_error error;
    attn_status status = attn_reference_forward(&q, &k, &v, &options, &out, &lse, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: the forward", who);
    attn_tensor dq = interleaved(6 * SLOT, 0, 3), dk = interleaved(6 * SLOT, 1, 3);
    attn_tensor dv = interleaved(6 * SLOT, 2, 3);
    attn_tensor dq2 = at4(12 * SLOT, B, T, H, D), dk2 = at4(13 * SLOT, B, T, H, D);
    attn_tensor dv2 = at4(14 * SLOT, B, T, H, D);
    status = reference ? attn_reference_backward(&q, &k, &v, &out, &lse, &dout, &options, &dq, &dk,
                                                 &dv, NULL, &error)
                       : attn_backward(&q, &k, &v, &out, &lse, &dout, &options, &dq, &dk, &dv,
                                       NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: dq, dk, dv interleaved in one buffer", who);
    status = reference ? attn_reference_backward(&q, &k, &v, &out, &lse, &dout, &options, &dq2,
                                                 &dk2, &dv2, NULL, &error)
                       : attn_backward(&q, &k, &v, &out, &lse, &dout, &options, &dq2, &dk2, &dv2,
                                       NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: separate buffers", who);
    CHECK(test_bitwise_equal(&dq, &dq2) && test_bitwise_equal(&dk, &dk2) &&
              test_bitwise_equal(&dv, &dv2),
          "%s: interleaved gradients bitwise equal to separate buffers", who);
}

/* ---- attn_decode and attn_reference_decode (a library-owned cache) -------------------- */

static void test_decode(int reference) {
    const char *who = reference ? "attn_reference_decode" : "attn_decode";
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = B, config.kv_heads = H, config.key_dim = D, config.value_dim = D;
    config.capacity = 2 * T;
    attn_kv_cache *cache = NULL;
    attn_error error;
    CHECK_STATUS(attn_kv_cache_create(&config, &cache, &error), ATTN_OK, &error, "%s: cache", who);
    arena_fill(11);
    attn_tensor k = at4(SLOT, B, T, H, D), v = at4(2 * SLOT, B, T, H, D);
    CHECK_STATUS(attn_kv_cache_append(cache, 0, &k, &v, &error), ATTN_OK, &error, "%s: append",
                 who);
    /* q [B, 1, H, D] @ slot 0; out, lse default @ slots 3, 4 */
    typedef struct {
        const char *label;
        int64_t out, lse;
        const char *output, *other;
    } decode_case;
    const decode_case cases[] = {
        {"out == q", 0, -1, "out", "q"},
        {"out overlapping q's second row", ROW, -1, "out", "q"},
        {"lse inside out", -1, 3 * SLOT + 3, "out", "lse"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const decode_case *dc = &cases[c];
        arena_fill(300 + c);
        attn_tensor q = at4(0, B, 1, H, D);
        attn_tensor out = at4(dc->out >= 0 ? dc->out : 3 * SLOT, B, 1, H, D);
        attn_tensor lse = at3(dc->lse >= 0 ? dc->lse : 4 * SLOT, B, H, 1);
        const attn_status status =
            reference ? attn_reference_decode(cache, &q, NULL, &out, &lse, &error)
                      : attn_decode(cache, &q, NULL, &out, &lse, NULL, &error);
        char label[128];
        snprintf(label, sizeof label, "%s, %s", who, dc->label);
        const attn_tensor *const views[] = {&q, &out, &lse};
        const char *const names[] = {"q", "out", "lse"};
        check_refused(status, &error, dc->output, dc->other, 3, names, views, label);
    }
    /* Accepted: q and out interleaved in one [B, 1, 2, H, D] buffer. */
    arena_fill(12);
    attn_tensor q = at4(0, B, 1, H, D), out = at4(ROW, B, 1, H, D);
    q.stride[0] = out.stride[0] = 2 * ROW;
    attn_tensor q2 = at4(8 * SLOT, B, 1, H, D), out2 = at4(9 * SLOT, B, 1, H, D);
    for (int64_t b = 0; b < B; ++b) memcpy(arena + 8 * SLOT + b * ROW, arena + b * 2 * ROW, ROW * 4);
    attn_tensor lse = at3(4 * SLOT, B, H, 1), lse2 = at3(5 * SLOT, B, H, 1);
    attn_status status = reference ? attn_reference_decode(cache, &q, NULL, &out, &lse, &error)
                                   : attn_decode(cache, &q, NULL, &out, &lse, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: q and out interleaved", who);
    status = reference ? attn_reference_decode(cache, &q2, NULL, &out2, &lse2, &error)
                       : attn_decode(cache, &q2, NULL, &out2, &lse2, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: separate buffers", who);
    CHECK(test_bitwise_equal(&out, &out2) && test_bitwise_equal(&lse, &lse2),
          "%s: interleaved bitwise equal to separate buffers", who);
    attn_kv_cache_destroy(cache);
}

/* ---- attn_forward_with_kvcache (a cache the caller owns, in the arena) ---------------- */

static void test_kvcache(void) {
    /* k_cache, v_cache [B, S_max = 2T, H, D] @ slots 6..7 and 8..9; q [B, 1, H, D] @ 0,
     * k_new, v_new [B, 1, H, D] @ 1, 2; out @ 3, lse @ 4 */
    const int32_t seqlens[B] = {T, T - 3};
    typedef struct {
        const char *label;
        int append;
        int64_t out, lse;
        const char *output, *other;
    } kv_case;
    const kv_case cases[] = {
        {"out inside k_cache (read only)", 0, 6 * SLOT + 5 * ROW, -1, "out", "cache->k_cache"},
        {"out inside v_cache, with an append", 1, 8 * SLOT + 40, -1, "out", "cache->v_cache"},
        {"out on the very rows the append writes", 1, 6 * SLOT + T * ROW, -1, "out",
         "cache->k_cache"},
        {"lse inside k_cache", 1, -1, 6 * SLOT + 11, "lse", "cache->k_cache"},
        {"out == q", 1, 0, -1, "out", "q"},
        {"out inside k_new", 1, SLOT + 3, -1, "out", "append->k_new"},
        {"lse inside out", 0, -1, 3 * SLOT + 1, "out", "lse"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const kv_case *kc = &cases[c];
        arena_fill(400 + c);
        attn_tensor q = at4(0, B, 1, H, D);
        attn_tensor k_new = at4(SLOT, B, 1, H, D), v_new = at4(2 * SLOT, B, 1, H, D);
        attn_tensor out = at4(kc->out >= 0 ? kc->out : 3 * SLOT, B, 1, H, D);
        attn_tensor lse = at3(kc->lse >= 0 ? kc->lse : 4 * SLOT, B, H, 1);
        attn_tensor k_cache = at4(6 * SLOT, B, 2 * T, H, D), v_cache = at4(8 * SLOT, B, 2 * T, H, D);
        attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, &k_cache, &v_cache, NULL, seqlens,
                                   NULL, NULL};
        attn_kv_append append = {&k_new, &v_new, NULL, NULL, ATTN_ROPE_HALF};
        attn_options options = attn_options_default();
        options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
        attn_error error;
        const attn_status status = attn_forward_with_kvcache(
            &q, &view, kc->append ? &append : NULL, &options, &out, &lse, NULL, &error);
        const attn_tensor *const views[] = {&q, &k_new, &out, &lse, &k_cache, &v_cache};
        const char *const names[] = {"q", "append->k_new", "out", "lse", "cache->k_cache",
                               "cache->v_cache"};
        char label[128];
        snprintf(label, sizeof label, "attn_forward_with_kvcache, %s", kc->label);
        check_refused(status, &error, kc->output, kc->other, 6, names, views, label);
    }
    /* Accepted: q and out interleaved in one buffer, with an append: bitwise as separate
     * buffers (the second call on a fresh copy of the cache). */
    arena_fill(13);
    memcpy(arena + 16 * SLOT, arena + 6 * SLOT, 4 * SLOT * sizeof(float)); /* the cache's copy */
    attn_tensor q = at4(0, B, 1, H, D), out = at4(ROW, B, 1, H, D);
    q.stride[0] = out.stride[0] = 2 * ROW;
    attn_tensor q2 = at4(10 * SLOT, B, 1, H, D), out2 = at4(11 * SLOT, B, 1, H, D);
    for (int64_t b = 0; b < B; ++b) memcpy(arena + 10 * SLOT + b * ROW, arena + b * 2 * ROW, ROW * 4);
    attn_tensor k_new = at4(SLOT, B, 1, H, D), v_new = at4(2 * SLOT, B, 1, H, D);
    attn_tensor lse = at3(4 * SLOT, B, H, 1), lse2 = at3(5 * SLOT, B, H, 1);
    attn_tensor k_cache = at4(6 * SLOT, B, 2 * T, H, D), v_cache = at4(8 * SLOT, B, 2 * T, H, D);
    attn_tensor k_cache2 = at4(16 * SLOT, B, 2 * T, H, D), v_cache2 = at4(18 * SLOT, B, 2 * T, H, D);
    attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, &k_cache, &v_cache, NULL, seqlens,
                               NULL, NULL};
    attn_kv_cache_view view2 = {ATTN_KV_CACHE_VIEW_VERSION, &k_cache2, &v_cache2, NULL, seqlens,
                                NULL, NULL};
    attn_kv_append append = {&k_new, &v_new, NULL, NULL, ATTN_ROPE_HALF};
    attn_error error;
    attn_status status = attn_forward_with_kvcache(&q, &view, &append, NULL, &out, &lse, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "attn_forward_with_kvcache: q and out interleaved");
    status = attn_forward_with_kvcache(&q2, &view2, &append, NULL, &out2, &lse2, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "attn_forward_with_kvcache: separate buffers");
    CHECK(test_bitwise_equal(&out, &out2) && test_bitwise_equal(&lse, &lse2) &&
              memcmp(arena + 6 * SLOT, arena + 16 * SLOT, 4 * SLOT * sizeof(float)) == 0,
          "attn_forward_with_kvcache: interleaved bitwise equal to separate buffers, the caches "
          "too");
}

/* ---- attn_varlen_forward and attn_varlen_backward ------------------------------------ */

static void test_varlen(void) {
    /* packed [total = B * T, H, D]: q 0, k 1, v 2, out 3, lse [H, total] 4, dout 5, dq 6,
     * dk 7, dv 8 */
    const int32_t cu[B + 1] = {0, 5, B * T};
    const attn_varlen sequences = {B, cu, cu, T + 3, T + 3};
    typedef struct {
        const char *label;
        int backward;
        int64_t out, lse, dq, dk;
        const char *output, *other;
    } varlen_case;
    const varlen_case cases[] = {
        {"out == q", 0, 0, -1, -1, -1, "out", "q"},
        {"out inside k", 0, SLOT + 2 * ROW, -1, -1, -1, "out", "k"},
        {"lse inside out", 0, -1, 3 * SLOT + 64, -1, -1, "out", "lse"},
        {"dq overlapping dk", 1, -1, -1, 7 * SLOT - ROW, -1, "dq", "dk"},
        {"dk == v", 1, -1, -1, -1, 2 * SLOT, "dk", "v"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const varlen_case *vc = &cases[c];
        arena_fill(500 + c);
        attn_tensor q = at3(0, B * T, H, D), k = at3(SLOT, B * T, H, D), v = at3(2 * SLOT, B * T, H, D);
        attn_tensor out = at3(vc->out >= 0 ? vc->out : 3 * SLOT, B * T, H, D);
        const int64_t lse_shape[2] = {H, B * T};
        attn_tensor lse = attn_tensor_contiguous(arena + (vc->lse >= 0 ? vc->lse : 4 * SLOT),
                                                 ATTN_DTYPE_F32, 2, lse_shape);
        attn_tensor dout = at3(5 * SLOT, B * T, H, D);
        attn_tensor dq = at3(vc->dq >= 0 ? vc->dq : 6 * SLOT, B * T, H, D);
        attn_tensor dk = at3(vc->dk >= 0 ? vc->dk : 7 * SLOT, B * T, H, D);
        attn_tensor dv = at3(8 * SLOT, B * T, H, D);
        attn_error error;
        const attn_status status =
            vc->backward ? attn_varlen_backward(&q, &k, &v, &out, &lse, &dout, &sequences, NULL, &dq,
                                                &dk, &dv, NULL, &error)
                         : attn_varlen_forward(&q, &k, &v, &sequences, NULL, &out, &lse, NULL, &error);
        const attn_tensor *const views[] = {&q, &k, &v, &out, &lse, &dq, &dk};
        const char *const names[] = {"q", "k", "v", "out", "lse", "dq", "dk"};
        char label[128];
        snprintf(label, sizeof label, "attn_varlen_%s, %s", vc->backward ? "backward" : "forward",
                 vc->label);
        check_refused(status, &error, vc->output, vc->other, 7, names, views, label);
    }
    /* Accepted: q and out interleaved as [total, 2, H, D]: bitwise as separate buffers. */
    arena_fill(14);
    attn_tensor q = at3(0, B * T, H, D), out = at3(ROW, B * T, H, D);
    q.stride[0] = out.stride[0] = 2 * ROW;
    attn_tensor q2 = at3(10 * SLOT, B * T, H, D), out2 = at3(11 * SLOT, B * T, H, D);
    for (int64_t t = 0; t < B * T; ++t) memcpy(arena + 10 * SLOT + t * ROW, arena + t * 2 * ROW, ROW * 4);
    attn_tensor k = at3(SLOT, B * T, H, D), v = at3(2 * SLOT, B * T, H, D);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_error error;
    attn_status status = attn_varlen_forward(&q, &k, &v, &sequences, &options, &out, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "attn_varlen_forward: q and out interleaved");
    status = attn_varlen_forward(&q2, &k, &v, &sequences, &options, &out2, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "attn_varlen_forward: separate buffers");
    int equal = 1;
    for (int64_t t = 0; t < B * T; ++t)
        equal &= memcmp(arena + ROW + t * 2 * ROW, arena + 11 * SLOT + t * ROW, ROW * 4) == 0;
    CHECK(equal, "attn_varlen_forward: interleaved bitwise equal to separate buffers");
}

/* ---- attn_merge: in place on outs[0] / lses[0] only ---------------------------------- */

static void test_merge(void) {
    /* outs[0] 0, outs[1] 1, lses[0] 2, lses[1] 3, out 4, lse 5 */
    typedef struct {
        const char *label;
        int64_t out, lse;
        const char *output, *other;
    } merge_case;
    const merge_case cases[] = {
        {"out == outs[1]", SLOT, -1, "out", "outs[1]"},
        {"out one row into outs[0]", ROW, -1, "out", "outs[0]"},
        {"lse inside out", -1, 4 * SLOT + 7, "out", "lse"},
        {"lse == outs[0]'s first floats", -1, 0, "lse", "outs[0]"},
        {"lse one float into lses[0]", -1, 2 * SLOT + 1, "lse", "lses[0]"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const merge_case *mc = &cases[c];
        arena_fill(600 + c);
        attn_tensor o0 = at4(0, B, T, H, D), o1 = at4(SLOT, B, T, H, D);
        attn_tensor l0 = at3(2 * SLOT, B, H, T), l1 = at3(3 * SLOT, B, H, T);
        attn_tensor out = at4(mc->out >= 0 ? mc->out : 4 * SLOT, B, T, H, D);
        attn_tensor lse = at3(mc->lse >= 0 ? mc->lse : 5 * SLOT, B, H, T);
        const attn_tensor *outs[2] = {&o0, &o1}, *lses[2] = {&l0, &l1};
        attn_error error;
        const attn_status status = attn_merge(2, outs, lses, &out, &lse, &error);
        const attn_tensor *const views[] = {&o0, &o1, &l0, &out, &lse};
        const char *const names[] = {"outs[0]", "outs[1]", "lses[0]", "out", "lse"};
        char label[128];
        snprintf(label, sizeof label, "attn_merge, %s", mc->label);
        check_refused(status, &error, mc->output, mc->other, 5, names, views, label);
    }
    /* Accepted: in place (out = outs[0], lse = lses[0], other descriptors of the same views):
     * bitwise as out of place. */
    arena_fill(15);
    attn_tensor o0 = at4(0, B, T, H, D), o1 = at4(SLOT, B, T, H, D);
    attn_tensor l0 = at3(2 * SLOT, B, H, T), l1 = at3(3 * SLOT, B, H, T);
    attn_tensor out = at4(4 * SLOT, B, T, H, D), lse = at3(5 * SLOT, B, H, T);
    const attn_tensor *outs[2] = {&o0, &o1}, *lses[2] = {&l0, &l1};
    attn_error error;
    CHECK_STATUS(attn_merge(2, outs, lses, &out, &lse, &error), ATTN_OK, &error,
                 "attn_merge: out of place");
    attn_tensor in_out = o0, in_lse = l0;
    CHECK_STATUS(attn_merge(2, outs, lses, &in_out, &in_lse, &error), ATTN_OK, &error,
                 "attn_merge: in place");
    CHECK(test_bitwise_equal(&o0, &out) && test_bitwise_equal(&l0, &lse),
          "attn_merge: in place bitwise equal to out of place");
}

/* ---- an output that overlaps itself (a zero stride), in every entry point -------------- */

static void check_broadcast_refused(attn_status status, const attn_error *error,
                                    const char *expected, const char *label) {
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, error, "%s: refused", label);
    CHECK(strstr(error->message, expected) != NULL, "%s: message \"%s\" contains \"%s\"", label,
          error->message, expected);
    CHECK(memcmp(arena, arena_before, ARENA * sizeof(float)) == 0, "%s: nothing written", label);
}

static void test_broadcast_outputs(void) {
    arena_fill(16);
    attn_tensor q = at4(0, B, T, H, D), k = at4(SLOT, B, T, H, D), v = at4(2 * SLOT, B, T, H, D);
    attn_tensor out = at4(3 * SLOT, B, T, H, D), lse = at3(4 * SLOT, B, H, T);
    attn_tensor flat_out = out, flat_lse = lse;
    flat_out.stride[1] = 0, flat_lse.stride[2] = 0;
    attn_error error;
    check_broadcast_refused(attn_forward(&q, &k, &v, NULL, &flat_out, &lse, NULL, &error), &error,
                            "out.stride[1] = 0 with shape[1] = 8: an output cannot broadcast",
                            "attn_forward, out with a zero T stride");
    check_broadcast_refused(attn_reference_forward(&q, &k, &v, NULL, &out, &flat_lse, &error),
                            &error, "lse.stride[2] = 0 with shape[2] = 8",
                            "attn_reference_forward, lse with a zero T stride");
    attn_tensor o1 = at4(5 * SLOT, B, T, H, D), l1 = at3(6 * SLOT, B, H, T);
    const attn_tensor *outs[2] = {&out, &o1}, *lses[2] = {&lse, &l1};
    attn_tensor merged = at4(7 * SLOT, B, T, H, D), merged_lse = at3(8 * SLOT, B, H, T);
    merged.stride[2] = 0;
    check_broadcast_refused(attn_merge(2, outs, lses, &merged, &merged_lse, &error), &error,
                            "out.stride[2] = 0 with shape[2] = 2", "attn_merge, out with a zero H stride");
    /* A caller-owned cache with an append: nothing appended either. */
    const int32_t seqlens[B] = {2, 3};
    attn_tensor q1 = at4(0, B, 1, H, D), out1 = at4(3 * SLOT, B, 1, H, D);
    out1.stride[0] = 0;
    attn_tensor k_cache = at4(10 * SLOT, B, T, H, D), v_cache = at4(11 * SLOT, B, T, H, D);
    attn_tensor k_new = at4(SLOT, B, 1, H, D);
    attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, &k_cache, &v_cache, NULL, seqlens, NULL,
                               NULL};
    attn_kv_append append = {&k_new, &k_new, NULL, NULL, ATTN_ROPE_HALF};
    check_broadcast_refused(attn_forward_with_kvcache(&q1, &view, &append, NULL, &out1, NULL, NULL,
                                                      &error),
                            &error, "out.stride[0] = 0 with shape[0] = 2",
                            "attn_forward_with_kvcache, out with a zero B stride");
    attn_tensor pq = at3(0, B * T, H, D), pk = at3(SLOT, B * T, H, D), pv = at3(2 * SLOT, B * T, H, D);
    attn_tensor pout = at3(3 * SLOT, B * T, H, D);
    pout.stride[0] = 0;
    const int32_t cu[B + 1] = {0, 5, B * T};
    const attn_varlen sequences = {B, cu, cu, T + 3, T + 3};
    check_broadcast_refused(attn_varlen_forward(&pq, &pk, &pv, &sequences, NULL, &pout, NULL, NULL,
                                                &error),
                            &error, "out.stride[0] = 0 with shape[0] = 16",
                            "attn_varlen_forward, out with a zero token stride");
}

/* ---- an output whose nonzero strides make two elements meet, and layouts that do not ---- */

static void test_self_overlapping_outputs(void) {
    arena_fill(17);
    attn_tensor q = at4(0, B, T, H, D), k = at4(SLOT, B, T, H, D), v = at4(2 * SLOT, B, T, H, D);
    attn_tensor lse = at3(4 * SLOT, B, H, T);
    attn_error error;
    /* tokens D floats apart, heads D apart too: token t, head 1 is token t + 1, head 0 */
    attn_tensor meet = at4(3 * SLOT, B, T, H, D);
    meet.stride[1] = D;
    meet.stride[0] = (int64_t)(T + 1) * D;
    check_broadcast_refused(attn_forward(&q, &k, &v, NULL, &meet, &lse, NULL, &error), &error,
                            "out: shape [2, 8, 2, 16], strides [144, 16, 16, 1]: two of its "
                            "elements share memory",
                            "attn_forward, out with rows that meet");
    /* the same with a 16-digit batch stride (never dereferenced: refused first): the whole
     * layout still fits the message */
    attn_tensor far = meet;
    far.stride[0] = 1000000000000000LL;
    check_broadcast_refused(attn_forward(&q, &k, &v, NULL, &far, &lse, NULL, &error), &error,
                            "out: shape [2, 8, 2, 16], strides [1000000000000000, 16, 16, 1]: two "
                            "of its elements share memory",
                            "attn_forward, out with rows that meet and a far batch stride");
    /* lse [B, H, T] with the T stride 1 and the H stride 5 < T: head 1 meets head 0 */
    attn_tensor out = at4(3 * SLOT, B, T, H, D), short_lse = at3(4 * SLOT, B, H, T);
    short_lse.stride[1] = 5;
    check_broadcast_refused(attn_forward(&q, &k, &v, NULL, &out, &short_lse, NULL, &error), &error,
                            "lse: shape [2, 2, 8], strides [16, 5, 1]: two of its elements share",
                            "attn_forward, lse with heads that meet");
    /* dq of a backward whose dims (2 floats apart) and heads (4 apart) interleave onto the
     * same floats: head 1, dim 0 is head 0, dim 2 (the nested test cannot place the strides;
     * the exact search finds the pair) */
    attn_tensor o = at4(5 * SLOT, B, T, H, D), dout = at4(6 * SLOT, B, T, H, D);
    attn_tensor dq = at4(7 * SLOT, B, T, H, D), dk = at4(8 * SLOT, B, T, H, D), dv = at4(9 * SLOT, B, T, H, D);
    attn_tensor dq_meet = dq;
    dq_meet.stride[3] = 2, dq_meet.stride[2] = 4, dq_meet.stride[1] = 48, dq_meet.stride[0] = 48 * T;
    check_broadcast_refused(attn_backward(&q, &k, &v, &o, &lse, &dout, NULL, &dq_meet, &dk, &dv,
                                          NULL, NULL, &error),
                            &error, "dq: shape [2, 8, 2, 16], strides [384, 48, 4, 2]: two of its",
                            "attn_backward, dq whose heads and dims meet");
    /* Interleaved but distinct: dims 2 apart and heads 1 apart (heads in the odd floats,
     * nested strides) is accepted, and so is a layout the nested test cannot place but the
     * exact search clears: dims 2 apart (floats 0..30) and heads 3 apart (head 1 on the odd
     * floats 3..33). */
    attn_tensor odd = at4(10 * SLOT, B, T, H, D);
    odd.stride[3] = 2, odd.stride[2] = 1, odd.stride[1] = 2 * D * H, odd.stride[0] = 2 * D * H * T;
    CHECK_STATUS(attn_forward(&q, &k, &v, NULL, &odd, &lse, NULL, &error), ATTN_OK, &error,
                 "attn_forward: out with heads interleaved into the dims (no element shared)");
    attn_tensor threes = at4(10 * SLOT, B, T, H, D);
    threes.stride[3] = 2, threes.stride[2] = 3, threes.stride[1] = 4 * D, threes.stride[0] = 4 * D * T;
    CHECK_STATUS(attn_forward(&q, &k, &v, NULL, &threes, &lse, NULL, &error), ATTN_OK, &error,
                 "attn_forward: out with dims 2 and heads 3 floats apart (no element shared)");
}

int main(void) {
    arena = malloc(ARENA * sizeof(float));
    arena_before = malloc(ARENA * sizeof(float));
    for (int reference = 0; reference < 2; ++reference) {
        test_forward(reference);
        test_backward(reference);
        test_decode(reference);
    }
    test_kvcache();
    test_varlen();
    test_merge();
    test_broadcast_outputs();
    test_self_overlapping_outputs();
    free(arena), free(arena_before);
    return test_finish();
}
