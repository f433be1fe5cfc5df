/*
 * test_forward_invariants.c — properties attn_forward must have whatever its inputs:
 * bitwise identical output for 1, 2 and 8 threads and from run to run; tile-size invariance
 * (tile_q, tile_k in {1, 16, 64, 128}) within 1e-6; permutation invariance of non-causal
 * attention; no overflow for logits of magnitude 1e4 (argmax one-hot); NaN in never-attended
 * K/V entries leaves O unchanged; top-left == bottom-right when Tq == Tk; a window wider than
 * T equals no window; window (0, 0) copies V; the three empty-row policies.
 */
#include "test_forward_harness.h"

static float *attn_f32_at4_test(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return (float *)t->data + a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

/* A mixed-mask case used by the thread and tile checks. */
static const forward_case mixed_cases[] = {
    {.name = "causal GQA", .B = 2, .Tq = 130, .Tk = 130, .Hq = 4, .Hkv = 2, .Dk = 24, .Dv = 16, .causal = 1, .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
    {.name = "mask bias lengths", .B = 3, .Tq = 70, .Tk = 90, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 20, .mask = HARNESS_BROADCAST, .bias = HARNESS_PER_BATCH_HEAD, .lengths = 1},
    {.name = "window alibi softcap", .B = 1, .Tq = 150, .Tk = 150, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .window = 1, .window_left = 20, .window_right = 3, .alignment = ATTN_ALIGN_TOP_LEFT, .alibi = 1, .softcap = 3.0f},
};

static void check_threads_and_repeats(const forward_case *c) {
    forward_instance x;
    forward_instance_build(&x, c, 77);
    attn_error error = {0};
    x.execution.num_threads = 1;
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "%s 1 thread", c->name);
    test_tensor first_out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor first_lse = test_tensor_new_shape(3, lse_shape);
    for (int64_t n = 0; n < first_out.allocation_floats; ++n) first_out.allocation[n] = 0;
    /* Copy the 1-thread result through the views. */
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t i = 0; i < c->Tq; ++i)
            for (int64_t h = 0; h < c->Hq; ++h) {
                for (int64_t e = 0; e < c->Dv; ++e)
                    first_out.allocation[((b * c->Tq + i) * c->Hq + h) * c->Dv + e] = test_get4(&x.out.view, b, i, h, e);
                first_lse.allocation[(b * c->Hq + h) * c->Tq + i] = test_get3(&x.lse.view, b, h, i);
            }
    const int thread_counts[] = {2, 8, 1, 8};
    for (int n = 0; n < 4; ++n) {
        test_tensor_fill_all(&x.out, -7.0f);
        x.execution.num_threads = thread_counts[n];
        CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "%s %d threads", c->name,
                     thread_counts[n]);
        CHECK(test_bitwise_equal(&x.out.view, &first_out.view), "%s: O with %d threads differs bitwise",
              c->name, thread_counts[n]);
        CHECK(test_bitwise_equal(&x.lse.view, &first_lse.view), "%s: LSE with %d threads differs bitwise",
              c->name, thread_counts[n]);
    }
    test_tensor_free(&first_out);
    test_tensor_free(&first_lse);
    forward_instance_free(&x);
}

static void check_tile_sizes(const forward_case *c) {
    const int tiles[] = {1, 16, 64, 128};
    forward_instance x;
    forward_instance_build(&x, c, 78);
    attn_error error = {0};
    CHECK_STATUS(forward_instance_reference(&x, &error), ATTN_OK, &error, "%s reference", c->name);
    for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
            x.execution.tile_q = tiles[a];
            x.execution.tile_k = tiles[b];
            CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "%s tiles %d x %d",
                         c->name, tiles[a], tiles[b]);
            double e = test_max_relative_error(&x.out.view, &x.out_reference.view);
            double l = test_max_relative_error(&x.lse.view, &x.lse_reference.view);
            /* Each tiling is within 5e-7 of the double reference, hence within 1e-6 of each other. */
            CHECK(e <= 5e-7 && l <= 5e-7, "%s tiles %d x %d: error O %.3g LSE %.3g", c->name,
                  tiles[a], tiles[b], e, l);
        }
    forward_instance_free(&x);
}

/* Non-causal attention without positional terms: permuting K and V rows jointly leaves O
 * unchanged; permuting Q rows permutes O rows. */
static void check_permutation(void) {
    const forward_case c = {.name = "permutation", .B = 1, .Tq = 37, .Tk = 53, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 12};
    forward_instance x, y;
    forward_instance_build(&x, &c, 5);
    forward_instance_build(&y, &c, 5);
    test_rng rng;
    test_rng_seed(&rng, 9);
    int64_t key_order[53], query_order[37];
    for (int64_t j = 0; j < c.Tk; ++j) key_order[j] = j;
    for (int64_t i = 0; i < c.Tq; ++i) query_order[i] = i;
    for (int64_t j = c.Tk - 1; j > 0; --j) {
        int64_t s = test_rng_range(&rng, 0, j), t = key_order[j];
        key_order[j] = key_order[s];
        key_order[s] = t;
    }
    for (int64_t i = c.Tq - 1; i > 0; --i) {
        int64_t s = test_rng_range(&rng, 0, i), t = query_order[i];
        query_order[i] = query_order[s];
        query_order[s] = t;
    }
    for (int64_t j = 0; j < c.Tk; ++j)
        for (int64_t d = 0; d < c.Dk; ++d) {
            y.k.allocation[j * c.Dk + d] = x.k.allocation[key_order[j] * c.Dk + d];
            y.v.allocation[j * c.Dv + d % c.Dv] = x.v.allocation[key_order[j] * c.Dv + d % c.Dv];
        }
    for (int64_t i = 0; i < c.Tq; ++i)
        for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t d = 0; d < c.Dk; ++d)
                y.q.allocation[(i * c.Hq + h) * c.Dk + d] = x.q.allocation[(query_order[i] * c.Hq + h) * c.Dk + d];
    attn_error error = {0};
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "permutation x");
    CHECK_STATUS(forward_instance_forward(&y, &error), ATTN_OK, &error, "permutation y");
    double worst = 0;
    for (int64_t i = 0; i < c.Tq; ++i)
        for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t e = 0; e < c.Dv; ++e) {
                double a = test_get4(&y.out.view, 0, i, h, e), b = test_get4(&x.out.view, 0, query_order[i], h, e);
                if (fabs(a - b) / (1 + fabs(b)) > worst) worst = fabs(a - b) / (1 + fabs(b));
            }
    CHECK(worst <= 1e-6, "permuted K/V and Q: O differs by %.3g", worst);
    forward_instance_free(&x);
    forward_instance_free(&y);
}

/* Q and K scaled so logits reach ~1e4: no inf/NaN, and O is V of the argmax key. */
static void check_large_logits(void) {
    const int64_t T = 40, D = 8;
    test_tensor q = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD), k = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD), o = test_tensor_new(1, T, 1, D, TEST_LAYOUT_BTHD);
    const int64_t lse_shape[3] = {1, 1, T};
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_rng rng;
    test_rng_seed(&rng, 3);
    test_tensor_fill_normal(&q, &rng, 100.0f);
    test_tensor_fill_normal(&k, &rng, 100.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    attn_options options = attn_options_default();
    options.custom_scale = 1;
    options.scale = 1.0f; /* |logits| ~ 1e4 .. 1e5 */
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &o.view, &lse.view, NULL, &error), ATTN_OK,
                 &error, "large logits");
    int finite = 1, one_hot = 1;
    for (int64_t i = 0; i < T; ++i) {
        double best = -INFINITY;
        int64_t argmax = 0;
        for (int64_t j = 0; j < T; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += (double)q.allocation[i * D + d] * k.allocation[j * D + d];
            if (dot > best) { best = dot; argmax = j; }
        }
        finite &= isfinite(lse.allocation[i]) && fabs(lse.allocation[i] - best) <= 1e-5 * fabs(best) + 1e-2;
        for (int64_t d = 0; d < D; ++d) {
            finite &= isfinite(o.allocation[i * D + d]);
            one_hot &= fabs(o.allocation[i * D + d] - v.allocation[argmax * D + d]) <= 1e-6;
        }
    }
    CHECK(finite, "logits of magnitude 1e4: O and LSE finite, LSE = max logit");
    CHECK(one_hot, "logits of magnitude 1e4: O = V[argmax]");
    test_tensor_free(&q); test_tensor_free(&k); test_tensor_free(&v); test_tensor_free(&o); test_tensor_free(&lse);
}

/* Whether key j of batch b is attended by no query row of case `n` below (cases 4.. are
 * cases 0.. in the [B, H, T, D] layout, whose value rows the forward reads in place). */
static int key_is_dead(int n, const forward_instance *x, int64_t b, int64_t j) {
    switch (n % 4) {
    case 0: return j >= x->key_lengths[b];     /* padding keys */
    case 1: return j >= 20;                    /* top-left causal, Tq = 20 */
    case 2: return j >= 25;                    /* top-left window (5, 5), Tq = 20 */
    default: return j % 7 == 3;                /* columns cleared in the bool mask */
    }
}

/* Sets K and V of keys nobody attends to NaN: O must not change (bitwise). Keys attended by
 * some rows of a tile but not others are out of scope: 0 * NaN is NaN for them, as on GPUs. */
static void check_nan_in_masked_keys(void) {
    static const forward_case cases[] = {
        {.name = "NaN beyond key_lengths", .B = 3, .Tq = 20, .Tk = 70, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .lengths = 1},
        {.name = "NaN beyond top-left causal", .B = 1, .Tq = 20, .Tk = 70, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .causal = 1, .alignment = ATTN_ALIGN_TOP_LEFT},
        {.name = "NaN outside window", .B = 1, .Tq = 20, .Tk = 100, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 8, .window = 1, .window_left = 5, .window_right = 5, .alignment = ATTN_ALIGN_TOP_LEFT},
        {.name = "NaN in masked columns", .B = 2, .Tq = 30, .Tk = 40, .Hq = 2, .Hkv = 2, .Dk = 8, .Dv = 8, .mask = HARNESS_BROADCAST, .layout = TEST_LAYOUT_BHTD},
        {.name = "NaN beyond key_lengths, values in place", .B = 3, .Tq = 20, .Tk = 70, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 32, .lengths = 1, .layout = TEST_LAYOUT_BHTD},
        {.name = "NaN beyond top-left causal, values in place", .B = 1, .Tq = 20, .Tk = 70, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 64, .causal = 1, .alignment = ATTN_ALIGN_TOP_LEFT, .layout = TEST_LAYOUT_BHTD},
        {.name = "NaN outside window, values in place", .B = 1, .Tq = 20, .Tk = 100, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 16, .window = 1, .window_left = 5, .window_right = 5, .alignment = ATTN_ALIGN_TOP_LEFT, .layout = TEST_LAYOUT_BHTD},
    };
    for (int n = 0; n < (int)(sizeof cases / sizeof cases[0]); ++n) {
        const forward_case *c = &cases[n];
        forward_instance x;
        forward_instance_build(&x, c, 40 + (uint64_t)n);
        if (c->mask)
            for (int64_t i = 0; i < c->Tq; ++i)
                for (int64_t j = 3; j < c->Tk; j += 7) x.mask_data[i * c->Tk + j] = 0;
        attn_error error = {0};
        CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "%s clean", c->name);
        test_tensor clean = x.out;
        x.out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, c->layout);
        int64_t poisoned = 0;
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t j = 0; j < c->Tk; ++j) {
                if (!key_is_dead(n, &x, b, j)) continue;
                for (int64_t h = 0; h < c->Hkv; ++h) {
                    for (int64_t d = 0; d < c->Dk; ++d) *attn_f32_at4_test(&x.k.view, b, j, h, d) = NAN;
                    for (int64_t d = 0; d < c->Dv; ++d) *attn_f32_at4_test(&x.v.view, b, j, h, d) = NAN;
                }
                ++poisoned;
            }
        CHECK(poisoned > 0, "%s: the case poisons some key", c->name);
        CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "%s poisoned", c->name);
        CHECK(test_bitwise_equal(&x.out.view, &clean.view), "%s: O changed", c->name);
        test_tensor_free(&clean);
        forward_instance_free(&x);
    }
}

/* Options that must give identical results: top-left vs bottom-right at Tq == Tk; a window
 * of at least T vs no window. */
static void check_equivalent_options(void) {
    const forward_case c = {.name = "square", .B = 2, .Tq = 70, .Tk = 70, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .causal = 1, .alignment = ATTN_ALIGN_TOP_LEFT};
    forward_instance x;
    forward_instance_build(&x, &c, 11);
    attn_error error = {0};
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "top-left");
    test_tensor first = x.out;
    x.out = test_tensor_new(c.B, c.Tq, c.Hq, c.Dv, c.layout);
    x.options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "bottom-right");
    CHECK(test_bitwise_equal(&x.out.view, &first.view), "top-left == bottom-right when Tq == Tk");
    x.options.window = 1;
    x.options.window_left = 70; /* >= T: same as causal alone */
    x.options.window_right = 1000;
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "wide window");
    CHECK(test_bitwise_equal(&x.out.view, &first.view), "window >= T equals no window (causal)");
    x.options.causal = 0;
    x.options.window = 1;
    x.options.window_left = 69;
    x.options.window_right = 69;
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "wide window");
    CHECK_STATUS(forward_instance_reference(&x, &error), ATTN_OK, &error, "wide window reference");
    x.options.window = 0; /* no window */
    x.options.window_left = x.options.window_right = -1;
    x.options.alignment = ATTN_ALIGN_UNSET;
    test_tensor windowed = x.out;
    x.out = test_tensor_new(c.B, c.Tq, c.Hq, c.Dv, c.layout);
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "full");
    CHECK(test_bitwise_equal(&x.out.view, &windowed.view), "window (T-1, T-1) equals full attention");
    test_tensor_free(&first);
    test_tensor_free(&windowed);
    forward_instance_free(&x);

    /* Window (0, 0), bottom-right, Tq < Tk: O_i = V_{i + Tk - Tq} exactly. */
    const forward_case w = {.name = "diagonal", .B = 2, .Tq = 33, .Tk = 70, .Hq = 4, .Hkv = 2, .Dk = 16, .Dv = 9, .window = 1, .window_left = 0, .window_right = 0, .alignment = ATTN_ALIGN_BOTTOM_RIGHT, .layout = TEST_LAYOUT_PADDED};
    forward_instance y;
    forward_instance_build(&y, &w, 12);
    CHECK_STATUS(forward_instance_forward(&y, &error), ATTN_OK, &error, "window (0, 0)");
    int copies = 1;
    for (int64_t b = 0; b < w.B; ++b)
        for (int64_t i = 0; i < w.Tq; ++i)
            for (int64_t h = 0; h < w.Hq; ++h)
                for (int64_t e = 0; e < w.Dv; ++e)
                    copies &= test_get4(&y.out.view, b, i, h, e) ==
                              test_get4(&y.v.view, b, i + w.Tk - w.Tq, h / 2, e);
    CHECK(copies, "window (0, 0): O_i = V_{i + Tk - Tq}");
    forward_instance_free(&y);
}

/* Bottom-right causal with Tq > Tk leaves the first Tq - Tk rows empty. */
static void check_empty_row_policies(void) {
    const forward_case c = {.name = "empty", .B = 2, .Tq = 9, .Tk = 4, .Hq = 3, .Hkv = 1, .Dk = 8, .Dv = 8, .causal = 1, .alignment = ATTN_ALIGN_BOTTOM_RIGHT};
    forward_instance x;
    forward_instance_build(&x, &c, 13);
    attn_error error = {0};
    x.options.empty_rows = ATTN_EMPTY_ROWS_ERROR;
    for (int threads = 1; threads <= 4; threads *= 2) {
        x.execution.num_threads = threads;
        CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_ERROR_EMPTY_ROW, &error, "empty rows ERROR");
        CHECK(strstr(error.message, "b = 0, h = 0, i = 0") != NULL, "empty row message names (0, 0, 0): %s", error.message);
        CHECK_STATUS(forward_instance_reference(&x, &error), ATTN_ERROR_EMPTY_ROW, &error, "reference ERROR");
        CHECK(strstr(error.message, "b = 0, h = 0, i = 0") != NULL, "reference names (0, 0, 0): %s", error.message);
    }
    x.options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "ZERO");
    int zero = 1, nan = 1, others_finite = 1;
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t i = 0; i < c.Tq; ++i) {
                const int empty = i < c.Tq - c.Tk;
                for (int64_t e = 0; e < c.Dv; ++e) {
                    if (empty) zero &= test_get4(&x.out.view, b, i, h, e) == 0.0f;
                    else others_finite &= isfinite(test_get4(&x.out.view, b, i, h, e));
                }
                if (empty) zero &= test_get3(&x.lse.view, b, h, i) == -INFINITY;
            }
    CHECK(zero, "ZERO: empty rows have O = 0 and LSE = -inf");
    CHECK(others_finite, "ZERO: the other rows are finite");
    x.options.empty_rows = ATTN_EMPTY_ROWS_NAN;
    CHECK_STATUS(forward_instance_forward(&x, &error), ATTN_OK, &error, "NAN");
    for (int64_t i = 0; i < c.Tq - c.Tk; ++i) {
        nan &= isnan(test_get3(&x.lse.view, 1, 2, i));
        for (int64_t e = 0; e < c.Dv; ++e) nan &= isnan(test_get4(&x.out.view, 1, i, 2, e));
    }
    CHECK(nan, "NAN: empty rows are NaN");
    forward_instance_free(&x);

    /* Padding rows (i >= query_lengths[b]) are O = 0, LSE = -inf, never an error. */
    const forward_case p = {.name = "padding", .B = 2, .Tq = 10, .Tk = 10, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 8};
    forward_instance y;
    forward_instance_build(&y, &p, 14);
    int32_t query_lengths[2] = {10, 3};
    y.options.query_lengths = query_lengths;
    y.options.empty_rows = ATTN_EMPTY_ROWS_ERROR;
    CHECK_STATUS(forward_instance_forward(&y, &error), ATTN_OK, &error, "padding rows are not errors");
    int padding_zero = 1;
    for (int64_t i = 3; i < 10; ++i) {
        padding_zero &= test_get3(&y.lse.view, 1, 0, i) == -INFINITY;
        for (int64_t e = 0; e < p.Dv; ++e) padding_zero &= test_get4(&y.out.view, 1, i, 0, e) == 0.0f;
    }
    CHECK(padding_zero, "padding rows: O = 0, LSE = -inf");
    forward_instance_free(&y);
}

int main(void) {
    for (size_t n = 0; n < sizeof mixed_cases / sizeof mixed_cases[0]; ++n) {
        check_threads_and_repeats(&mixed_cases[n]);
        check_tile_sizes(&mixed_cases[n]);
    }
    check_permutation();
    check_large_logits();
    check_nan_in_masked_keys();
    check_equivalent_options();
    check_empty_row_policies();
    return test_finish();
}
