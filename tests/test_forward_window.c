/*
 * test_forward_window.c — the band path of attn_forward (a pure band: lengths, causal and a
 * sliding window; flash_forward.c, forward_compute_span) against the naive reference, with
 * the tile sizes that put the window's edges inside tiles (1, 16, 64 and odd sizes, key tiles
 * smaller and larger than the window), windows (W, 0), (0, W), (W1, W2), with and without
 * causal, Tq != Tk under both alignments, explicit query positions, key and query lengths,
 * soft-cap and ALiBi and a bias; generic and AUTO kernels. Every case also runs on 1, 2 and
 * 3 threads, which must give the same bits.
 */
#include <stdlib.h>

#include "test_forward_harness.h"

#define BR ATTN_ALIGN_BOTTOM_RIGHT
#define TL ATTN_ALIGN_TOP_LEFT

typedef struct window_case {
    forward_case base;
    int tile_q, tile_k;  /* 0 = defaults */
    int query_positions; /* explicit increasing query positions (keys implicit: still a band) */
} window_case;

#define W(NAME, B_, TQ, TK, HQ, HKV, D_, LEFT, RIGHT)                                           \
    .base = {.name = NAME, .B = B_, .Tq = TQ, .Tk = TK, .Hq = HQ, .Hkv = HKV, .Dk = D_,          \
             .Dv = D_, .window = 1, .window_left = LEFT, .window_right = RIGHT
static const window_case cases[] = {
    /* Edges inside tiles: default tiles and tile sizes 1, 16, 64, odd. */
    {W("causal window 37", 1, 300, 300, 2, 1, 16, 36, 0), .causal = 1, .alignment = BR}},
    {W("window 37 tiles 16", 1, 300, 300, 2, 2, 16, 36, 0), .causal = 1, .alignment = BR}, .tile_q = 16, .tile_k = 16},
    {W("window 37 tiles 64", 1, 300, 300, 1, 1, 24, 36, 0), .causal = 1, .alignment = BR}, .tile_q = 64, .tile_k = 64},
    {W("window 37 tiles 1", 1, 70, 70, 1, 1, 8, 36, 0), .causal = 1, .alignment = BR}, .tile_q = 1, .tile_k = 1},
    {W("window 37 tiles 7x13", 1, 200, 200, 3, 1, 16, 36, 0), .causal = 1, .alignment = BR}, .tile_q = 7, .tile_k = 13},
    {W("window 5 tiles 64x64", 1, 260, 260, 2, 2, 16, 5, 0), .causal = 1, .alignment = BR}, .tile_q = 64, .tile_k = 64},
    {W("window 200 tiles 5x3", 1, 230, 230, 1, 1, 8, 200, 0), .causal = 1, .alignment = BR}, .tile_q = 5, .tile_k = 3},
    /* (W, 0), (0, W), (W1, W2) without causal, Tq != Tk both alignments. */
    {W("(W,0) BR Tq<Tk", 1, 90, 333, 2, 1, 16, 50, 0), .alignment = BR}},
    {W("(0,W) TL Tq>Tk", 1, 333, 90, 2, 2, 16, 0, 50), .alignment = TL}},
    {W("(0,W) BR Tq<Tk tiles 16x32", 2, 100, 290, 2, 1, 16, 0, 21), .alignment = BR}, .tile_q = 16, .tile_k = 32},
    {W("(W1,W2) TL", 1, 257, 257, 2, 1, 32, 40, 17), .alignment = TL}},
    {W("(W1,W2) BR Tq>Tk tiles 9x11", 1, 300, 120, 2, 2, 16, 33, 12), .alignment = BR}, .tile_q = 9, .tile_k = 11},
    {W("(W1,W2) causal BR Tq<Tk", 1, 120, 300, 4, 2, 16, 33, 12), .causal = 1, .alignment = BR}},
    {W("(W1,W2) causal TL Tq>Tk", 1, 300, 120, 1, 1, 16, 33, 12), .causal = 1, .alignment = TL}},
    {W("(-1,W) causal", 1, 150, 150, 1, 1, 16, -1, 9), .causal = 1, .alignment = BR}},
    {W("(W,-1)", 1, 150, 180, 2, 1, 16, 9, -1), .alignment = TL}, .tile_k = 16},
    {W("window 0,0", 1, 70, 80, 2, 1, 8, 0, 0), .alignment = BR}, .tile_q = 16, .tile_k = 16},
    /* Lengths (query and key, random per batch; rows past them and rows with no key). */
    {W("lengths causal window", 3, 160, 160, 2, 1, 16, 20, 0), .causal = 1, .alignment = BR, .lengths = 1}},
    {W("lengths (W1,W2) TL tiles 16", 3, 130, 170, 2, 2, 16, 25, 6), .alignment = TL, .lengths = 1}, .tile_q = 16, .tile_k = 16},
    /* Explicit query positions (keys implicit). */
    {W("query positions causal window", 1, 100, 260, 2, 1, 16, 30, 0), .causal = 1}, .query_positions = 1},
    {W("query positions (W1,W2) tiles 13", 2, 90, 200, 1, 1, 16, 18, 7)}, .query_positions = 1, .tile_q = 13, .tile_k = 13},
    /* Additive terms and soft-cap on the band path. */
    {W("window softcap", 1, 200, 200, 2, 1, 16, 30, 0), .causal = 1, .alignment = BR, .softcap = 5.0f}},
    {W("window alibi", 1, 200, 200, 4, 2, 16, 30, 0), .causal = 1, .alignment = BR, .alibi = 1}, .tile_k = 16},
    {W("window alibi softcap", 1, 180, 200, 2, 2, 16, 24, 8), .alignment = TL, .alibi = 2, .softcap = 3.0f}, .tile_q = 16, .tile_k = 7},
    {W("window bias softcap", 2, 100, 120, 2, 1, 16, 20, 4), .alignment = BR, .bias = HARNESS_PER_BATCH_HEAD, .softcap = 4.0f}},
    {W("window bias", 1, 150, 150, 2, 2, 16, 20, 0), .causal = 1, .alignment = BR, .bias = HARNESS_BROADCAST}, .tile_q = 16, .tile_k = 16},
    /* Bigger: one span step over more tiles than the default window fits, and GQA. */
    {W("window 700 GQA", 1, 1100, 1100, 4, 1, 16, 700, 0), .causal = 1, .alignment = BR}},
    {W("window 256 D=128", 1, 700, 700, 2, 2, 128, 255, 0), .causal = 1, .alignment = BR}},
    /* Windows narrower than a key tile, bands that start mid-tile, odd D, GQA 4, one query
     * row; long enough that the packed-tile rings hold less than a head and the threads take
     * rows from each other's regions. */
    {W("window 3 odd D GQA 4", 2, 390, 390, 4, 1, 13, 3, 0), .causal = 1, .alignment = BR}},
    {W("window 40 mid-tile TL Tq>Tk tiles 24x40", 1, 333, 200, 2, 2, 16, 40, 40), .alignment = TL}, .tile_q = 24, .tile_k = 40},
    {W("Tq=1 window 5", 1, 1, 100, 2, 1, 8, 5, 0), .causal = 1, .alignment = BR}},
    {W("window 300 > tiles GQA 4 lengths", 2, 900, 900, 8, 2, 24, 300, 0), .causal = 1, .alignment = BR, .lengths = 1}},
    /* Rings of packed tiles per KV head (long sequences, several KV heads and batches). */
    {W("rings GQA B=2", 2, 1200, 1200, 4, 2, 16, 40, 0), .causal = 1, .alignment = BR}},
    {W("rings lengths (W1,W2)", 3, 900, 1000, 3, 3, 8, 30, 9), .alignment = BR, .lengths = 1}},
};

static const char *kernel_name(attn_kernel_choice kernel) {
    return kernel == ATTN_KERNEL_GENERIC ? "generic" : "auto";
}

/* A copy of t (same layout, its own allocation; free its allocation). */
static test_tensor copy_of(const test_tensor *t) {
    test_tensor copy = *t;
    copy.allocation = malloc((size_t)t->allocation_floats * sizeof(float));
    memcpy(copy.allocation, t->allocation, (size_t)t->allocation_floats * sizeof(float));
    copy.view.data = copy.allocation + ((float *)t->view.data - t->allocation);
    return copy;
}

/* Runs the case with `threads` threads into x->out / x->lse. */
static attn_status run(forward_instance *x, int threads, attn_error *error) {
    x->execution.num_threads = threads;
    return forward_instance_forward(x, error);
}

static double check_case(const window_case *c, uint64_t seed, attn_kernel_choice kernel) {
    forward_instance x;
    forward_instance_build(&x, &c->base, seed);
    int64_t *positions = NULL;
    if (c->query_positions) {
        /* Increasing with random gaps (0..2), starting inside the keys. */
        test_rng rng;
        test_rng_seed(&rng, seed + 77);
        positions = malloc((size_t)c->base.Tq * sizeof(int64_t));
        int64_t position = c->base.Tk / 4;
        for (int64_t i = 0; i < c->base.Tq; ++i)
            positions[i] = (position += test_rng_range(&rng, 0, 2));
        x.options.query_positions = positions;
    }
    x.execution.kernel = kernel;
    x.execution.tile_q = c->tile_q;
    x.execution.tile_k = c->tile_k;
    attn_error error = {0};
    CHECK_STATUS(forward_instance_reference(&x, &error), ATTN_OK, &error, "%s: reference",
                 c->base.name);
    CHECK_STATUS(run(&x, 1, &error), ATTN_OK, &error, "%s: forward", c->base.name);
    const double out_error = test_max_relative_error(&x.out.view, &x.out_reference.view);
    const double lse_error = test_max_relative_error(&x.lse.view, &x.lse_reference.view);
    CHECK(out_error <= 1e-5, "%s (%s): O relative error %.3g", c->base.name,
          kernel_name(kernel), out_error);
    CHECK(lse_error <= 1e-5, "%s (%s): LSE relative error %.3g", c->base.name,
          kernel_name(kernel), lse_error);

    /* 2 and 3 threads: the same bits as 1. */
    test_tensor one = copy_of(&x.out), one_lse = copy_of(&x.lse);
    for (int threads = 2; threads <= 3; ++threads) {
        test_tensor_fill_all(&x.out, NAN);
        CHECK_STATUS(run(&x, threads, &error), ATTN_OK, &error, "%s: %d threads", c->base.name,
                     threads);
        CHECK(test_bitwise_equal(&x.out.view, &one.view) &&
                  test_bitwise_equal(&x.lse.view, &one_lse.view),
              "%s (%s): %d threads differ from 1", c->base.name,
              kernel_name(kernel), threads);
    }
    free(one.allocation), free(one_lse.allocation);
    x.options.query_positions = NULL;
    free(positions);
    forward_instance_free(&x);
    return out_error > lse_error ? out_error : lse_error;
}

int main(void) {
    const int case_count = (int)(sizeof cases / sizeof cases[0]);
    double worst_generic = 0, worst_auto = 0;
    for (int n = 0; n < case_count; ++n) {
        double e = check_case(&cases[n], 5000 + (uint64_t)n, ATTN_KERNEL_GENERIC);
        if (e > worst_generic) worst_generic = e;
        e = check_case(&cases[n], 5000 + (uint64_t)n, ATTN_KERNEL_AUTO);
        if (e > worst_auto) worst_auto = e;
    }
    printf("%d window cases: worst relative error generic %.3g, auto %.3g\n", case_count,
           worst_generic, worst_auto);
    return test_finish();
}
