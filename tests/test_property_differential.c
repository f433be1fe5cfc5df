/*
 * test_property_differential.c — random differential run over the library's call kinds:
 * attn_forward (tiled and small calls), attn_backward, attn_varlen_forward (and its backward
 * where the forward succeeds and no row is NaN by policy), attn_decode on
 * library caches of every storage type (F32, BF16, F16, Q8, FP8 E4M3 / E5M2; contiguous and
 * paged) and attn_forward_with_kvcache on caches the caller owns (F32, BF16, F16; contiguous
 * and paged, with appends; decoding and prefill paths). Each configuration is drawn from its
 * own seed and compared with the naive double-precision references (attn_reference_forward,
 * attn_reference_backward, attn_reference_decode, or attn_reference_forward per sequence).
 *
 * In 5% of the configurations a whole query, key or value vector is NaN, +inf or -inf. The
 * reference decides the expected result element by element (docs/conventions.md, "NaN"): an
 * element NaN there must be NaN here, an infinite one equal, a finite one within the
 * tolerance. A finite reference element may be NaN here only where the poisoned vector is a
 * key or value that some row attends (0 * NaN reaches the other rows of its tile, as on GPUs)
 * or, in a backward, where any vector is poisoned (a pair not allowed contributes 0 there, and
 * 0 times a NaN of its tile is NaN). A poisoned key that no row attends changes nothing in a
 * forward: no NaN allowed. In 5% of the
 * configurations an argument is made invalid: the call must fail with a status and a message
 * naming the argument, with out and lse (and the cache) untouched. Every call runs under an
 * alarm: a hang fails the run. One configuration in four also runs with one thread, which
 * must give bitwise the same outputs.
 *
 * Usage: test_property_differential [configurations]   (default 500; ATTN_DIFFERENTIAL_CASES
 * too); ATTN_DIFFERENTIAL_SEED=<seed> runs that one configuration verbosely, and each failure
 * prints its seed.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/registry.h"
#include "test_support.h"

enum { KIND_FORWARD, KIND_BACKWARD, KIND_VARLEN, KIND_DECODE, KIND_KVCACHE, KINDS };
static const char *const kind_names[KINDS] = {"forward", "backward", "varlen", "decode",
                                              "forward_with_kvcache"};
static const double tolerances[KINDS] = {2e-5, 1e-4, 2e-5, 1e-4, 1e-4};
static const float sentinel = 1234.5f;

/* One drawn configuration: sizes, options, execution and the injected fault. */
typedef struct config {
    uint64_t seed;
    int kind;
    int64_t B, Tq, Tk, Hq, Hkv, Dk, Dv;
    attn_options options;
    attn_execution execution;
    int poison;        /* 0 none, else the vector is set to poison_value */
    float poison_value;
    int poison_target; /* 0 q, 1 k, 2 v */
    int invalid;       /* 0 none, else which argument is made invalid (1..4) */
    double tolerance; /* relative to 1 + |reference| */
    char description[320];
} config;

typedef struct run_counts {
    uint64_t per_kind[KINDS], poisoned, refused, failures;
    uint64_t statuses[ATTN_ERROR_COMMUNICATION + 1];
} run_counts;

static run_counts counts;
static volatile uint64_t current_seed;

/* A hang: report the configuration and stop (async-signal-safe: write and _exit). */
static void on_alarm(int signal_number) {
    (void)signal_number;
    char text[96];
    int n = 0;
    const char prefix[] = "HANG: configuration seed ";
    memcpy(text, prefix, sizeof prefix - 1), n = (int)sizeof prefix - 1;
    char digits[24];
    int d = 0;
    uint64_t seed = current_seed;
    do digits[d++] = (char)('0' + seed % 10), seed /= 10;
    while (seed > 0);
    while (d > 0) text[n++] = digits[--d];
    text[n++] = '\n';
    if (write(2, text, (size_t)n) < 0) _exit(2);
    _exit(1);
}

/* ---- tensors, faults and comparison ---------------------------------------------------- */

static float *element(const attn_tensor *t, const int64_t *index) {
    ptrdiff_t offset = 0;
    for (int d = 0; d < t->rank; ++d) offset += (ptrdiff_t)(index[d] * t->stride[d]);
    return (float *)t->data + offset;
}

/* Elements of a tensor, and the index of the flat-th in logical (row-major) order. */
static int64_t element_count(const attn_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; ++d) n *= t->shape[d];
    return n;
}

static void unravel(const attn_tensor *t, int64_t flat, int64_t *index) {
    for (int d = t->rank - 1; d >= 0; --d) {
        index[d] = flat % t->shape[d];
        flat /= t->shape[d];
    }
}

static void fill_all(const attn_tensor *t, float value) {
    int64_t index[4];
    for (int64_t n = 0; n < element_count(t); ++n) {
        unravel(t, n, index);
        *element(t, index) = value;
    }
}

static int all_equal(const attn_tensor *t, float value) {
    int64_t index[4];
    for (int64_t n = 0; n < element_count(t); ++n) {
        unravel(t, n, index);
        if (*element(t, index) != value) return 0;
    }
    return 1;
}

static int any_non_finite(const attn_tensor *t) {
    int64_t index[4];
    for (int64_t n = 0; n < element_count(t); ++n) {
        unravel(t, n, index);
        if (!isfinite(*element(t, index))) return 1;
    }
    return 0;
}

/* What a NaN near a result may do besides: reach a finite reference element (0 * NaN in a
 * shared tile). */
enum { SPREAD_NAN = 1 };

/* got against the reference: NaN where it is NaN, equal infinities, finite values within
 * tolerance * (1 + |want|); otherwise only what `spread` allows. */
static int element_ok(double got, double want, double tolerance, int spread) {
    if (isnan(want)) return isnan(got);
    if (isnan(got)) return (spread & SPREAD_NAN) != 0;
    if (isinf(want) || isinf(got)) return got == want;
    return fabs(got - want) <= tolerance * (1.0 + fabs(want));
}

/* Compares two F32 tensors of one shape; on a mismatch fills `reason` and returns 0. */
static int compare(const char *name, const attn_tensor *got, const attn_tensor *want,
                   double tolerance, int spread_ok, char *reason, size_t reason_size) {
    int64_t index[4];
    for (int64_t n = 0; n < element_count(want); ++n) {
        unravel(want, n, index);
        const double a = *element(got, index), b = *element(want, index);
        if (!element_ok(a, b, tolerance, spread_ok)) {
            snprintf(reason, reason_size, "%s[%lld %lld %lld %lld] = %.9g, reference %.9g", name,
                     (long long)index[0], (long long)(want->rank > 1 ? index[1] : 0),
                     (long long)(want->rank > 2 ? index[2] : 0),
                     (long long)(want->rank > 3 ? index[3] : 0), a, b);
            return 0;
        }
    }
    return 1;
}

/* Sets vector (a, t, h) of a rank-4 (or, with a < 0, rank-3 [T, H, D]) F32 tensor to value. */
static void set_vector(const attn_tensor *tensor, int64_t a, int64_t t, int64_t h, float value) {
    const int rank = tensor->rank;
    for (int64_t e = 0; e < tensor->shape[rank - 1]; ++e) {
        int64_t index[4] = {a, t, h, e};
        if (rank == 3) index[0] = t, index[1] = h, index[2] = e;
        *element(tensor, index) = value;
    }
}

static int bitwise_same(const attn_tensor *a, const attn_tensor *b) {
    int64_t index[4];
    for (int64_t n = 0; n < element_count(a); ++n) {
        unravel(a, n, index);
        if (memcmp(element(a, index), element(b, index), sizeof(float)) != 0) return 0;
    }
    return 1;
}

/* Records one check; prints the configuration on a failure. */
static int verdict(const config *c, int ok, const char *what, const char *reason) {
    CHECK(ok, "seed %llu (%s): %s: %s\n  configuration: %s\n  rerun: "
              "ATTN_DIFFERENTIAL_SEED=%llu ./test_property_differential",
          (unsigned long long)c->seed, kind_names[c->kind], what, reason, c->description,
          (unsigned long long)c->seed);
    if (!ok) ++counts.failures;
    return ok;
}

/* ---- drawing a configuration ----------------------------------------------------------- */

static int64_t pick(test_rng *rng, int64_t lo, int64_t hi) { return test_rng_range(rng, lo, hi); }
static int chance(test_rng *rng, double p) { return test_rng_uniform(rng) < p; }

static const attn_kernel_choice kernel_choices[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_GENERIC,
                                                    ATTN_KERNEL_AVX2, ATTN_KERNEL_AVX512};

/* Options every kind accepts: causal and its alignment, a window, soft-cap, ALiBi, a custom
 * scale, the empty-row policy. */
static void draw_options(test_rng *rng, config *c) {
    attn_options *o = &c->options;
    *o = attn_options_default();
    o->alignment = chance(rng, 0.5) ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
    o->causal = chance(rng, 0.5);
    if (chance(rng, 0.25)) {
        o->window = 1;
        o->window_left = chance(rng, 0.3) ? -1 : pick(rng, 0, c->Tk);
        o->window_right = chance(rng, 0.5) ? -1 : pick(rng, 0, c->Tk);
    }
    if (chance(rng, 0.15)) o->softcap = (float)(2.0 + 30.0 * test_rng_uniform(rng));
    if (chance(rng, 0.15)) o->alibi = 1;
    if (chance(rng, 0.2)) o->custom_scale = 1, o->scale = (float)(0.05 + 1.5 * test_rng_uniform(rng));
    const double u = test_rng_uniform(rng);
    o->empty_rows = u < 0.45 ? ATTN_EMPTY_ROWS_ZERO : u < 0.9 ? ATTN_EMPTY_ROWS_NAN
                                                               : ATTN_EMPTY_ROWS_ERROR;
}

static void draw_config(uint64_t seed, int kind, config *c) {
    memset(c, 0, sizeof *c);
    test_rng rng;
    test_rng_seed(&rng, seed);
    c->seed = seed, c->kind = kind, c->tolerance = tolerances[kind];
    c->B = pick(&rng, 1, 3);
    c->Hkv = pick(&rng, 1, 2);
    c->Hq = c->Hkv * pick(&rng, 1, 3);
    c->Dk = chance(&rng, 0.2) ? pick(&rng, 33, 80) : pick(&rng, 1, 24);
    c->Dv = chance(&rng, 0.5) ? c->Dk : pick(&rng, 1, 24);
    /* Tq: small calls (few rows per KV head) and tiled ones; decoding: a few new queries */
    c->Tq = chance(&rng, 0.4) ? pick(&rng, 1, 4) : pick(&rng, 5, 40);
    c->Tk = pick(&rng, 1, kind == KIND_DECODE ? 150 : 48);
    if (kind == KIND_DECODE) c->Tq = pick(&rng, 1, 4);
    if (kind == KIND_KVCACHE) c->Tq = chance(&rng, 0.7) ? pick(&rng, 1, 6) : pick(&rng, 17, 24);
    draw_options(&rng, c);
    c->execution.num_threads = (int)pick(&rng, 1, 3);
    if (chance(&rng, 0.3)) {
        c->execution.tile_q = (int)pick(&rng, 1, 64);
        c->execution.tile_k = (int)pick(&rng, 1, 64);
        if (kind == KIND_DECODE) c->execution.tile_k = 64 * (int)pick(&rng, 1, 2);
    }
    do c->execution.kernel = kernel_choices[pick(&rng, 0, 3)];
    while (!attn_cpu_supports(c->execution.kernel));
    if (chance(&rng, 0.05)) {
        c->poison = 1;
        const double u = test_rng_uniform(&rng);
        c->poison_value = u < 0.6 ? NAN : u < 0.8 ? INFINITY : -INFINITY;
        c->poison_target = (int)pick(&rng, 0, 2);
    }
    if (!c->poison && chance(&rng, 0.05)) c->invalid = (int)pick(&rng, 1, 4);
    snprintf(c->description, sizeof c->description,
             "B=%lld Tq=%lld Tk=%lld Hq=%lld Hkv=%lld Dk=%lld Dv=%lld causal=%d align=%d "
             "window=%d(%lld,%lld) softcap=%g alibi=%d scale=%g empty=%d threads=%d tiles=%d/%d "
             "kernel=%d poison=%d(%g in %s) invalid=%d",
             (long long)c->B, (long long)c->Tq, (long long)c->Tk, (long long)c->Hq,
             (long long)c->Hkv, (long long)c->Dk, (long long)c->Dv, c->options.causal,
             (int)c->options.alignment, c->options.window, (long long)c->options.window_left,
             (long long)c->options.window_right, c->options.softcap, c->options.alibi,
             c->options.custom_scale ? c->options.scale : 0.0, (int)c->options.empty_rows,
             c->execution.num_threads, c->execution.tile_q, c->execution.tile_k,
             (int)c->execution.kernel, c->poison, c->poison_value,
             c->poison_target == 0 ? "q" : c->poison_target == 1 ? "k" : "v", c->invalid);
}

/* An invalid argument (c->invalid): made in the options or the sizes; returns the name the
 * refusal's message must contain. */
static const char *make_invalid(config *c) {
    switch (c->invalid) {
    case 1: c->options.window = 1, c->options.window_left = -2; return "window_left";
    case 2: c->options.custom_scale = 1, c->options.scale = -1.0f; return "scale";
    case 3: c->options.softcap = NAN; return "softcap";
    default: c->execution.num_threads = -3; return "num_threads";
    }
}

/* ---- attn_forward and attn_backward ------------------------------------------------------ */

/* The inputs of a padded-batch call: q, k, v in random layouts, N(0, 1), one vector poisoned
 * when the configuration says so. */
typedef struct batch_inputs {
    test_tensor q, k, v;
} batch_inputs;

static void batch_inputs_make(config *c, test_rng *rng, batch_inputs *in) {
    in->q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, (test_layout)pick(rng, 0, 3));
    in->k = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dk, (test_layout)pick(rng, 0, 3));
    in->v = test_tensor_new(c->B, c->Tk, c->Hkv, c->Dv, (test_layout)pick(rng, 0, 3));
    test_tensor_fill_normal(&in->q, rng, 1.0f);
    test_tensor_fill_normal(&in->k, rng, 1.0f);
    test_tensor_fill_normal(&in->v, rng, 1.0f);
    if (!c->poison) return;
    const test_tensor *target = c->poison_target == 0 ? &in->q : c->poison_target == 1 ? &in->k : &in->v;
    const int64_t rows = target->view.shape[1], heads = target->view.shape[2];
    const int64_t b = pick(rng, 0, c->B - 1), t = pick(rng, 0, rows - 1), h = pick(rng, 0, heads - 1);
    set_vector(&target->view, b, t, h, c->poison_value);
    snprintf(c->description + strlen(c->description),
             sizeof c->description - strlen(c->description), " at (%lld, %lld, %lld)",
             (long long)b, (long long)t, (long long)h);
}

static void batch_inputs_free(batch_inputs *in) {
    test_tensor_free(&in->q), test_tensor_free(&in->k), test_tensor_free(&in->v);
}

/* A refused call: a status, a message naming `name`, and the outputs as they were. */
static void check_refusal(const config *c, attn_status status, const attn_error *error,
                          const char *name, const attn_tensor *const *outputs, int count) {
    int untouched = 1;
    for (int n = 0; n < count; ++n) untouched &= all_equal(outputs[n], sentinel);
    char reason[600];
    snprintf(reason, sizeof reason, "status %s, message \"%s\", outputs %s",
             attn_status_name(status), status != ATTN_OK ? error->message : "",
             untouched ? "untouched" : "written");
    verdict(c, status != ATTN_OK && strstr(error->message, name) != NULL && untouched,
            "an invalid argument is refused, naming it, before anything is written", reason);
    ++counts.refused;
}

static void run_forward(config *c) {
    const char *invalid = c->invalid ? make_invalid(c) : NULL;
    test_rng rng;
    test_rng_seed(&rng, c->seed ^ 0x5eed);
    batch_inputs in;
    batch_inputs_make(c, &rng, &in);
    test_tensor out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, (test_layout)pick(&rng, 0, 3));
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor lse = test_tensor_new_shape(3, lse_shape), ref_lse = test_tensor_new_shape(3, lse_shape);
    test_tensor ref_out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    fill_all(&out.view, sentinel), fill_all(&lse.view, sentinel);
    attn_error error = {0}, ref_error = {0};
    const attn_status status = attn_forward(&in.q.view, &in.k.view, &in.v.view, &c->options,
                                            &out.view, &lse.view, &c->execution, &error);
    const attn_status expected = attn_reference_forward(&in.q.view, &in.k.view, &in.v.view,
                                                        &c->options, &ref_out.view, &ref_lse.view,
                                                        &ref_error);
    ++counts.statuses[status <= ATTN_ERROR_COMMUNICATION ? status : 0];
    const attn_tensor *outputs[2] = {&out.view, &lse.view};
    char reason[600] = "";
    if (invalid != NULL) {
        check_refusal(c, status, &error, invalid, outputs, 2);
    } else if (expected != ATTN_OK || status != ATTN_OK) {
        snprintf(reason, sizeof reason, "status %s (%.200s), reference %s (%.200s)",
                 attn_status_name(status), error.message, attn_status_name(expected),
                 ref_error.message);
        verdict(c, status == expected, "the same status as the reference", reason);
    } else {
        const int spread = c->poison && c->poison_target != 0 &&
                           (any_non_finite(&ref_out.view) || any_non_finite(&ref_lse.view));
        const double tolerance = c->tolerance;
        verdict(c, compare("O", &out.view, &ref_out.view, tolerance, spread, reason, sizeof reason) &&
                       compare("LSE", &lse.view, &ref_lse.view, tolerance, spread, reason, sizeof reason),
                "O and LSE equal the reference", reason);
        if (c->seed % 4 == 0 && c->execution.num_threads > 1) {
            attn_execution one = c->execution;
            one.num_threads = 1;
            test_tensor out1 = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
            test_tensor lse1 = test_tensor_new_shape(3, lse_shape);
            attn_forward(&in.q.view, &in.k.view, &in.v.view, &c->options, &out1.view,
                         &lse1.view, &one, NULL);
            verdict(c, bitwise_same(&out.view, &out1.view) && bitwise_same(&lse.view, &lse1.view),
                    "one thread gives bitwise the same O and LSE", "they differ");
            test_tensor_free(&out1), test_tensor_free(&lse1);
        }
    }
    batch_inputs_free(&in);
    test_tensor_free(&out), test_tensor_free(&lse), test_tensor_free(&ref_out), test_tensor_free(&ref_lse);
}

/* dQ, dK, dV against the reference backward's (any poison may spread in a backward: a NaN
 * row of dS meets the other rows of its tile in dS^T Q). */
static void compare_gradients(const config *c, const char *invalid, attn_status status,
                              const attn_error *error, attn_status expected,
                              const attn_error *ref_error, const attn_tensor *lse,
                              test_tensor *grads, test_tensor *refs) {
    char reason[600] = "";
    if (invalid != NULL) {
        const attn_tensor *outputs[3] = {&grads[0].view, &grads[1].view, &grads[2].view};
        check_refusal(c, status, error, invalid, outputs, 3);
        return;
    }
    if (status != ATTN_OK || expected != ATTN_OK) {
        snprintf(reason, sizeof reason, "status %s (%.200s), reference %s (%.200s)",
                 attn_status_name(status), error->message, attn_status_name(expected),
                 ref_error->message);
        verdict(c, status == expected, "the same status as the reference", reason);
        return;
    }
    (void)lse;
    const int spread = c->poison ? SPREAD_NAN : 0; /* 0 * NaN within a tile the poison is in */
    static const char *const names[3] = {"dQ", "dK", "dV"};
    int ok = 1;
    for (int g = 0; g < 3 && ok; ++g)
        ok = compare(names[g], &grads[g].view, &refs[g].view, c->tolerance, spread, reason,
                     sizeof reason);
    verdict(c, ok, "dQ, dK and dV equal the reference backward", reason);
}

/* The backward of the fast forward's outputs, against attn_reference_backward on the same
 * out, lse and dout. */
static void run_backward(config *c) {
    const char *invalid = c->invalid ? make_invalid(c) : NULL;
    test_rng rng;
    test_rng_seed(&rng, c->seed ^ 0xbacc);
    batch_inputs in;
    batch_inputs_make(c, &rng, &in);
    test_tensor out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, (test_layout)pick(&rng, 0, 3));
    test_tensor_fill_normal(&dout, &rng, 1.0f);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    attn_options forward_options = c->options;
    if (invalid != NULL) forward_options = attn_options_default(); /* the forward is valid */
    attn_error error = {0}, ref_error = {0};
    attn_status status = attn_forward(&in.q.view, &in.k.view, &in.v.view, &forward_options,
                                      &out.view, &lse.view, NULL, &error);
    test_tensor grads[3], refs[3];
    const test_tensor *shapes[3] = {&in.q, &in.k, &in.v};
    for (int g = 0; g < 3; ++g) {
        const int64_t *s = shapes[g]->view.shape;
        grads[g] = test_tensor_new(s[0], s[1], s[2], s[3], (test_layout)pick(&rng, 0, 3));
        refs[g] = test_tensor_new(s[0], s[1], s[2], s[3], TEST_LAYOUT_BTHD);
        fill_all(&grads[g].view, sentinel);
    }
    if (status == ATTN_OK) {
        status = attn_backward(&in.q.view, &in.k.view, &in.v.view, &out.view, &lse.view,
                               &dout.view, &c->options, &grads[0].view, &grads[1].view,
                               &grads[2].view, NULL, &c->execution, &error);
        const attn_status expected = attn_reference_backward(
            &in.q.view, &in.k.view, &in.v.view, &out.view, &lse.view, &dout.view, &c->options,
            &refs[0].view, &refs[1].view, &refs[2].view, NULL, &ref_error);
        ++counts.statuses[status <= ATTN_ERROR_COMMUNICATION ? status : 0];
        compare_gradients(c, invalid, status, &error, expected, &ref_error, &lse.view, grads,
                          refs);
    } else {
        ++counts.statuses[status <= ATTN_ERROR_COMMUNICATION ? status : 0];
        verdict(c, status == ATTN_ERROR_EMPTY_ROW, "the forward before the backward runs",
                error.message);
    }
    for (int g = 0; g < 3; ++g) test_tensor_free(&grads[g]), test_tensor_free(&refs[g]);
    batch_inputs_free(&in);
    test_tensor_free(&out), test_tensor_free(&dout), test_tensor_free(&lse);
}

/* ---- attn_varlen_forward ------------------------------------------------------------------ */

/* A [1, rows, H, D] view of rows first.. of a packed contiguous [total, H, D] tensor. */
static attn_tensor packed_rows(const test_tensor *packed, int64_t first, int64_t rows) {
    const int64_t H = packed->view.shape[1], D = packed->view.shape[2];
    const int64_t shape[4] = {1, rows, H, D};
    return attn_tensor_contiguous(packed->allocation + first * H * D, ATTN_DTYPE_F32, 4, shape);
}

/* Expected rows of sequence b into ref_out / ref_lse (packed like out and lse): the reference
 * on its rows, or the empty-row policy when it has no key. Returns the reference's status. */
static attn_status varlen_expected(const config *c, const int32_t *cu_q, const int32_t *cu_k,
                                   int64_t b, const test_tensor *q, const test_tensor *k,
                                   const test_tensor *v, test_tensor *ref_out,
                                   test_tensor *ref_lse, attn_error *error) {
    const int64_t rows = cu_q[b + 1] - cu_q[b], keys = cu_k[b + 1] - cu_k[b];
    const int64_t total_q = ref_lse->view.shape[1];
    if (rows == 0) return ATTN_OK;
    if (keys == 0) { /* only empty rows */
        if (c->options.empty_rows == ATTN_EMPTY_ROWS_ERROR) return ATTN_ERROR_EMPTY_ROW;
        const int nan = c->options.empty_rows == ATTN_EMPTY_ROWS_NAN;
        for (int64_t i = cu_q[b]; i < cu_q[b + 1]; ++i)
            for (int64_t h = 0; h < c->Hq; ++h) {
                for (int64_t e = 0; e < c->Dv; ++e)
                    ref_out->allocation[(i * c->Hq + h) * c->Dv + e] = nan ? NAN : 0.0f;
                ref_lse->allocation[h * total_q + i] = nan ? NAN : -INFINITY;
            }
        return ATTN_OK;
    }
    attn_tensor qb = packed_rows(q, cu_q[b], rows), kb = packed_rows(k, cu_k[b], keys);
    attn_tensor vb = packed_rows(v, cu_k[b], keys), ob = packed_rows(ref_out, cu_q[b], rows);
    const int64_t lse_shape[3] = {1, c->Hq, rows};
    attn_tensor lb = attn_tensor_contiguous(ref_lse->allocation + cu_q[b], ATTN_DTYPE_F32, 3, lse_shape);
    lb.stride[1] = total_q, lb.stride[0] = 0;
    return attn_reference_forward(&qb, &kb, &vb, &c->options, &ob, &lb, error);
}

/* The verdict of a call whose expected outputs are ref_out and ref_lse (`expected` the
 * references' status): a refusal, the same status, or the outputs. */
static void varlen_verdict(const config *c, const char *invalid, attn_status status,
                           const attn_error *error, attn_status expected,
                           const attn_error *ref_error, const attn_tensor *const *outputs,
                           const test_tensor *ref_out, const test_tensor *ref_lse) {
    char reason[600] = "";
    if (invalid != NULL) {
        check_refusal(c, status, error, invalid, outputs, 2);
    } else if (status != ATTN_OK || expected != ATTN_OK) {
        snprintf(reason, sizeof reason, "status %s (%.200s), reference %s (%.200s)",
                 attn_status_name(status), error->message, attn_status_name(expected),
                 ref_error->message);
        verdict(c, status == expected, "the same status as the reference", reason);
    } else {
        const int spread = c->poison && c->poison_target != 0 &&
                           (any_non_finite(&ref_out->view) || any_non_finite(&ref_lse->view));
        verdict(c, compare("O", outputs[0], &ref_out->view, c->tolerance, spread, reason,
                           sizeof reason) &&
                       compare("LSE", outputs[1], &ref_lse->view, c->tolerance, spread,
                               reason, sizeof reason),
                "O and LSE equal the reference", reason);
    }
}

/* The varlen backward of a varlen forward that succeeded, against attn_reference_backward
 * on each sequence's rows (a sequence without queries or keys: zero gradients). */
static void varlen_backward_check(const config *c, test_rng *rng, const attn_varlen *sequences,
                                  const test_tensor *const *inputs, const test_tensor *out,
                                  const test_tensor *lse) {
    const int32_t *cu[2] = {sequences->cu_seqlens_q, sequences->cu_seqlens_k};
    test_tensor dout = test_tensor_new_shape(3, out->view.shape), grads[3], refs[3];
    test_tensor_fill_normal(&dout, rng, 1.0f);
    for (int g = 0; g < 3; ++g) {
        grads[g] = test_tensor_new_shape(3, inputs[g]->view.shape);
        refs[g] = test_tensor_new_shape(3, inputs[g]->view.shape); /* zeros */
    }
    attn_error error = {0}, ref_error = {0};
    const attn_status status = attn_varlen_backward(
        &inputs[0]->view, &inputs[1]->view, &inputs[2]->view, &out->view, &lse->view, &dout.view,
        sequences, &c->options, &grads[0].view, &grads[1].view, &grads[2].view, &c->execution,
        &error);
    attn_status expected = ATTN_OK;
    const int64_t total_q = lse->view.shape[1];
    for (int64_t b = 0; b < c->B && expected == ATTN_OK; ++b) {
        const int64_t rows = cu[0][b + 1] - cu[0][b], keys = cu[1][b + 1] - cu[1][b];
        if (rows == 0 || keys == 0) continue;
        attn_tensor views[7], gradient_views[3];
        for (int g = 0; g < 3; ++g) {
            const int side = g == 0 ? 0 : 1;
            views[g] = packed_rows(inputs[g], cu[side][b], side ? keys : rows);
            gradient_views[g] = packed_rows(&refs[g], cu[side][b], side ? keys : rows);
        }
        views[3] = packed_rows(out, cu[0][b], rows), views[4] = packed_rows(&dout, cu[0][b], rows);
        const int64_t lse_shape[3] = {1, c->Hq, rows};
        views[5] = attn_tensor_contiguous(lse->allocation + cu[0][b], ATTN_DTYPE_F32, 3, lse_shape);
        views[5].stride[1] = total_q, views[5].stride[0] = 0;
        expected = attn_reference_backward(&views[0], &views[1], &views[2], &views[3], &views[5],
                                           &views[4], &c->options, &gradient_views[0],
                                           &gradient_views[1], &gradient_views[2], NULL, &ref_error);
    }
    config backward = *c; /* gradients: the backward's tolerance */
    backward.tolerance = tolerances[KIND_BACKWARD];
    compare_gradients(&backward, NULL, status, &error, expected, &ref_error, &lse->view, grads,
                      refs);
    for (int g = 0; g < 3; ++g) test_tensor_free(&grads[g]), test_tensor_free(&refs[g]);
    test_tensor_free(&dout);
}

static void run_varlen(config *c) {
    const char *invalid = c->invalid ? make_invalid(c) : NULL;
    test_rng rng;
    test_rng_seed(&rng, c->seed ^ 0x7a71);
    int32_t cu_q[4] = {0}, cu_k[4] = {0};
    int64_t longest_q = 1, longest_k = 1;
    for (int64_t b = 0; b < c->B; ++b) {
        const int64_t rows = pick(&rng, b == 0 ? 1 : 0, c->Tq), keys = pick(&rng, b == 0 ? 1 : 0, c->Tk);
        cu_q[b + 1] = cu_q[b] + (int32_t)rows, cu_k[b + 1] = cu_k[b] + (int32_t)keys;
        if (rows > longest_q) longest_q = rows;
        if (keys > longest_k) longest_k = keys;
    }
    const int64_t total_q = cu_q[c->B], total_k = cu_k[c->B];
    const int64_t qs[3] = {total_q, c->Hq, c->Dk}, ks[3] = {total_k, c->Hkv, c->Dk};
    const int64_t vs[3] = {total_k, c->Hkv, c->Dv}, os[3] = {total_q, c->Hq, c->Dv};
    const int64_t ls[2] = {c->Hq, total_q};
    test_tensor q = test_tensor_new_shape(3, qs), k = test_tensor_new_shape(3, ks);
    test_tensor v = test_tensor_new_shape(3, vs), out = test_tensor_new_shape(3, os);
    test_tensor ref_out = test_tensor_new_shape(3, os), ref_lse = test_tensor_new_shape(2, ls);
    const int64_t lse_shape[2] = {c->Hq, total_q};
    test_tensor lse = test_tensor_new_shape(2, lse_shape);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    fill_all(&out.view, sentinel), fill_all(&lse.view, sentinel);
    if (c->poison) {
        const test_tensor *t = c->poison_target == 0 ? &q : c->poison_target == 1 ? &k : &v;
        set_vector(&t->view, -1, pick(&rng, 0, t->view.shape[0] - 1),
                   pick(&rng, 0, t->view.shape[1] - 1), c->poison_value);
    }
    const attn_varlen sequences = {c->B, cu_q, cu_k, longest_q, longest_k};
    attn_error error = {0}, ref_error = {0};
    const attn_status status = attn_varlen_forward(&q.view, &k.view, &v.view, &sequences,
                                                   &c->options, &out.view, &lse.view,
                                                   &c->execution, &error);
    ++counts.statuses[status <= ATTN_ERROR_COMMUNICATION ? status : 0];
    attn_status expected = ATTN_OK;
    for (int64_t b = 0; b < c->B && expected == ATTN_OK; ++b)
        expected = varlen_expected(c, cu_q, cu_k, b, &q, &k, &v, &ref_out, &ref_lse, &ref_error);
    const attn_tensor *outputs[2] = {&out.view, &lse.view};
    varlen_verdict(c, invalid, status, &error, expected, &ref_error, outputs, &ref_out, &ref_lse);
    if (invalid == NULL && status == ATTN_OK && expected == ATTN_OK) {
        const test_tensor *inputs[3] = {&q, &k, &v};
        varlen_backward_check(c, &rng, &sequences, inputs, &out, &lse);
    }
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&out);
    test_tensor_free(&lse), test_tensor_free(&ref_out), test_tensor_free(&ref_lse);
}

/* ---- attn_decode on library caches -------------------------------------------------------- */

static const char *dtype_name(attn_dtype dtype) {
    static const char *const names[] = {"f32", "bf16", "f16", "bool", "i32", "i64", "f64",
                                         "q8", "fp8_e4m3", "fp8_e5m2"};
    return (unsigned)dtype < sizeof names / sizeof names[0] ? names[dtype] : "?";
}

static const attn_dtype cache_dtypes[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16,
                                          ATTN_DTYPE_Q8, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};

/* A library cache of a random storage type and layout, sequence b holding lengths[b] tokens
 * appended in one or two steps; a poisoned key or value lands in 16/32-bit storage only (the
 * 8-bit formats quantise, so the poison goes to the queries there). NULL on failure. */
static attn_kv_cache *decode_cache(config *c, test_rng *rng, int64_t *lengths) {
    attn_kv_cache_config cfg = attn_kv_cache_config_default();
    cfg.sequences = c->B, cfg.kv_heads = c->Hkv, cfg.key_dim = c->Dk, cfg.value_dim = c->Dv;
    cfg.dtype = cache_dtypes[pick(rng, 0, 5)];
    cfg.capacity = c->Tk + 4;
    cfg.page_size = chance(rng, 0.5) ? 0 : pick(rng, 1, 40);
    attn_kv_cache *cache = NULL;
    if (attn_kv_cache_create(&cfg, &cache, NULL) != ATTN_OK) return NULL;
    if (c->poison && cfg.dtype >= ATTN_DTYPE_Q8) c->poison_target = 0;
    /* int8 scores from int16 queries: docs/inference.md says 1e-4; 1.3e-4 is seen at the
     * default scale (Dk = 78), and the logits' error grows with scale * sqrt(Dk) */
    const double scale = c->options.custom_scale ? c->options.scale : 1.0 / sqrt((double)c->Dk);
    if (cfg.dtype == ATTN_DTYPE_Q8)
        c->tolerance = 2e-4 * (scale * sqrt((double)c->Dk) > 1.0 ? scale * sqrt((double)c->Dk) : 1.0);
    snprintf(c->description + strlen(c->description),
             sizeof c->description - strlen(c->description), " cache=%s page=%lld",
             dtype_name(cfg.dtype), (long long)cfg.page_size);
    const int64_t poisoned_b = pick(rng, 0, c->B - 1);
    for (int64_t b = 0; b < c->B; ++b) {
        lengths[b] = pick(rng, chance(rng, 0.9) ? 1 : 0, c->Tk);
        for (int64_t done = 0, step; done < lengths[b]; done += step) {
            step = done == 0 && lengths[b] > 1 ? pick(rng, 1, lengths[b]) : lengths[b] - done;
            test_tensor k = test_tensor_new(1, step, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
            test_tensor v = test_tensor_new(1, step, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
            test_tensor_fill_normal(&k, rng, 1.0f), test_tensor_fill_normal(&v, rng, 1.0f);
            if (c->poison && c->poison_target != 0 && b == poisoned_b && done == 0)
                set_vector(c->poison_target == 1 ? &k.view : &v.view, 0, pick(rng, 0, step - 1),
                           pick(rng, 0, c->Hkv - 1), c->poison_value);
            attn_status status = attn_kv_cache_append(cache, b, &k.view, &v.view, NULL);
            test_tensor_free(&k), test_tensor_free(&v);
            if (status != ATTN_OK) {
                attn_kv_cache_destroy(cache);
                return NULL;
            }
        }
    }
    if (c->poison && c->poison_target != 0 && lengths[poisoned_b] == 0) c->poison = 0;
    return cache;
}

static void run_decode(config *c) {
    const char *invalid = c->invalid ? make_invalid(c) : NULL;
    test_rng rng;
    test_rng_seed(&rng, c->seed ^ 0xdec0);
    int64_t lengths[3];
    attn_kv_cache *cache = decode_cache(c, &rng, lengths);
    if (!verdict(c, cache != NULL, "a cache is made and filled", "create or append failed")) return;
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, (test_layout)pick(&rng, 0, 3));
    test_tensor_fill_normal(&q, &rng, 1.0f);
    if (c->poison && c->poison_target == 0)
        set_vector(&q.view, pick(&rng, 0, c->B - 1), pick(&rng, 0, c->Tq - 1),
                   pick(&rng, 0, c->Hq - 1), c->poison_value);
    test_tensor out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, (test_layout)pick(&rng, 0, 3));
    test_tensor ref_out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor lse = test_tensor_new_shape(3, lse_shape), ref_lse = test_tensor_new_shape(3, lse_shape);
    fill_all(&out.view, sentinel), fill_all(&lse.view, sentinel);
    attn_error error = {0}, ref_error = {0};
    const attn_status status = attn_decode(cache, &q.view, &c->options, &out.view, &lse.view,
                                           &c->execution, &error);
    ++counts.statuses[status <= ATTN_ERROR_COMMUNICATION ? status : 0];
    const attn_status expected = attn_reference_decode(cache, &q.view, &c->options, &ref_out.view,
                                                       &ref_lse.view, &ref_error);
    const attn_tensor *outputs[2] = {&out.view, &lse.view};
    varlen_verdict(c, invalid, status, &error, expected, &ref_error, outputs, &ref_out, &ref_lse);
    if (invalid == NULL && status == ATTN_OK && c->seed % 4 == 0 && c->execution.num_threads > 1) {
        attn_execution one = c->execution;
        one.num_threads = 1;
        test_tensor out1 = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
        test_tensor lse1 = test_tensor_new_shape(3, lse_shape);
        attn_decode(cache, &q.view, &c->options, &out1.view, &lse1.view, &one, NULL);
        verdict(c, bitwise_same(&out.view, &out1.view) && bitwise_same(&lse.view, &lse1.view),
                "one thread gives bitwise the same O and LSE", "they differ");
        test_tensor_free(&out1), test_tensor_free(&lse1);
    }
    attn_kv_cache_destroy(cache);
    test_tensor_free(&q), test_tensor_free(&out), test_tensor_free(&lse);
    test_tensor_free(&ref_out), test_tensor_free(&ref_lse);
}

/* ---- attn_forward_with_kvcache on caches the caller owns ---------------------------------- */

/* A caller-owned cache (F32, BF16 or F16; contiguous [B, S, Hkv, D] or pages [pages,
 * page_size, Hkv, D] under a block table) and its shadow: the float value every slot must
 * hold (NaN where no token is). */
typedef struct owned_cache {
    attn_dtype dtype;
    int64_t B, S, Hkv, Dk, Dv, page_size, max_pages, pages;
    void *data[2];     /* keys, values */
    float *shadow[2];
    size_t bytes[2];
    int32_t *table;    /* [B][max_pages] */
    attn_tensor views[2], table_view;
} owned_cache;

static size_t slot_of(const owned_cache *oc, int64_t b, int64_t t) {
    return (size_t)(oc->table[b * oc->max_pages + t / oc->page_size] * oc->page_size +
                    t % oc->page_size);
}

/* Stores x at element `index` of keys (which = 0) or values (1), rounded to the storage type,
 * and records the stored value in the shadow. */
static void owned_store(owned_cache *oc, int which, size_t index, float x) {
    if (oc->dtype == ATTN_DTYPE_F32) {
        ((float *)oc->data[which])[index] = x;
        oc->shadow[which][index] = x;
    } else {
        const uint16_t bits = test_half_from_float(x, oc->dtype);
        ((uint16_t *)oc->data[which])[index] = bits;
        oc->shadow[which][index] = (float)test_half_to_double(bits, oc->dtype);
    }
}

static int owned_cache_make(owned_cache *oc, const config *c, test_rng *rng) {
    memset(oc, 0, sizeof *oc);
    static const attn_dtype types[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    oc->dtype = types[pick(rng, 0, 2)];
    oc->B = c->B, oc->S = c->Tk + 4, oc->Hkv = c->Hkv, oc->Dk = c->Dk, oc->Dv = c->Dv;
    const int paged = chance(rng, 0.5);
    oc->page_size = paged ? pick(rng, 1, 8) : oc->S;
    oc->max_pages = (oc->S + oc->page_size - 1) / oc->page_size;
    oc->pages = paged ? oc->B * oc->max_pages + 2 : oc->B;
    oc->table = malloc((size_t)(oc->B * oc->max_pages) * sizeof(int32_t));
    int32_t *order = malloc((size_t)oc->pages * sizeof(int32_t));
    if (oc->table == NULL || order == NULL) return free(order), 0;
    for (int64_t p = 0; p < oc->pages; ++p) order[p] = (int32_t)p;
    for (int64_t p = oc->pages - 1; paged && p > 0; --p) { /* a random permutation */
        const int64_t other = pick(rng, 0, p);
        const int32_t keep = order[p];
        order[p] = order[other], order[other] = keep;
    }
    for (int64_t n = 0; n < oc->B * oc->max_pages; ++n) oc->table[n] = order[n];
    free(order);
    const size_t element = oc->dtype == ATTN_DTYPE_F32 ? 4 : 2;
    const int64_t dims[2] = {oc->Dk, oc->Dv};
    for (int w = 0; w < 2; ++w) {
        const size_t count = (size_t)(oc->pages * oc->page_size * oc->Hkv * dims[w]);
        oc->bytes[w] = count * element;
        oc->data[w] = malloc(oc->bytes[w]);
        oc->shadow[w] = malloc(count * sizeof(float));
        if (oc->data[w] == NULL || oc->shadow[w] == NULL) return 0;
        for (size_t n = 0; n < count; ++n) owned_store(oc, w, n, NAN);
        const int64_t shape[4] = {oc->pages, oc->page_size, oc->Hkv, dims[w]};
        oc->views[w] = attn_tensor_contiguous(oc->data[w], oc->dtype, 4, shape);
    }
    const int64_t table_shape[2] = {oc->B, oc->max_pages};
    oc->table_view = attn_tensor_contiguous(oc->table, ATTN_DTYPE_I32, 2, table_shape);
    if (!paged) oc->table_view.data = NULL; /* contiguous: no block table */
    return 1;
}

static void owned_cache_free(owned_cache *oc) {
    for (int w = 0; w < 2; ++w) free(oc->data[w]), free(oc->shadow[w]);
    free(oc->table);
}

/* Token t of sequence b, head h: keys (which = 0) or values (1) set to `row` (D floats). */
static void owned_token(owned_cache *oc, int which, int64_t b, int64_t t, int64_t h,
                        const float *row) {
    const int64_t D = which == 0 ? oc->Dk : oc->Dv;
    for (int64_t e = 0; e < D; ++e)
        owned_store(oc, which, (slot_of(oc, b, t) * (size_t)oc->Hkv + (size_t)h) * (size_t)D + (size_t)e,
                    row[e]);
}

/* Sequence b's first `total` tokens from the shadow as contiguous [1, total, Hkv, D]. */
static test_tensor owned_sequence(const owned_cache *oc, int which, int64_t b, int64_t total) {
    const int64_t D = which == 0 ? oc->Dk : oc->Dv;
    test_tensor t = test_tensor_new(1, total, oc->Hkv, D, TEST_LAYOUT_BTHD);
    for (int64_t j = 0; j < total; ++j)
        memcpy(t.allocation + j * oc->Hkv * D,
               oc->shadow[which] + slot_of(oc, b, j) * (size_t)(oc->Hkv * D),
               (size_t)(oc->Hkv * D) * sizeof(float));
    return t;
}

/* Whether the storage holds exactly the shadow's values (NaN where NaN). */
static int owned_matches_shadow(const owned_cache *oc) {
    for (int w = 0; w < 2; ++w) {
        const size_t count = oc->bytes[w] / (oc->dtype == ATTN_DTYPE_F32 ? 4 : 2);
        for (size_t n = 0; n < count; ++n) {
            const double stored = oc->dtype == ATTN_DTYPE_F32
                                      ? ((const float *)oc->data[w])[n]
                                      : test_half_to_double(((const uint16_t *)oc->data[w])[n], oc->dtype);
            const double want = oc->shadow[w][n];
            if (!(stored == want || (isnan(stored) && isnan(want)))) return 0;
        }
    }
    return 1;
}

/* A [1, ...] view of batch row b of a [B, ...] F32 tensor. */
static attn_tensor batch_row(const attn_tensor *t, int64_t b) {
    attn_tensor view = *t;
    view.data = (float *)t->data + b * t->stride[0];
    view.shape[0] = 1;
    return view;
}

/* The expected O and LSE of every sequence (reference on the shadow after the append, or the
 * empty-row policy for a sequence with no token); returns the status the call must give. */
static attn_status kvcache_expected(const config *c, const owned_cache *oc, const int32_t *held,
                                    int64_t Tnew, const test_tensor *q, test_tensor *ref_out,
                                    test_tensor *ref_lse, attn_error *error) {
    for (int64_t b = 0; b < c->B; ++b) {
        const int64_t total = held[b] + Tnew;
        attn_tensor qb = batch_row(&q->view, b), ob = batch_row(&ref_out->view, b);
        attn_tensor lb = batch_row(&ref_lse->view, b);
        if (total == 0) {
            if (c->options.empty_rows == ATTN_EMPTY_ROWS_ERROR) return ATTN_ERROR_EMPTY_ROW;
            const int nan = c->options.empty_rows == ATTN_EMPTY_ROWS_NAN;
            fill_all(&ob, nan ? NAN : 0.0f), fill_all(&lb, nan ? NAN : -INFINITY);
            continue;
        }
        test_tensor k = owned_sequence(oc, 0, b, total), v = owned_sequence(oc, 1, b, total);
        const attn_status status = attn_reference_forward(&qb, &k.view, &v.view, &c->options,
                                                          &ob, &lb, error);
        test_tensor_free(&k), test_tensor_free(&v);
        if (status != ATTN_OK) return status;
    }
    return ATTN_OK;
}

/* Held tokens, the append's new rows (applied to the shadow only: `before` keeps the
 * storage as the call finds it) and the poisoned vector. */
static int64_t kvcache_fill(config *c, test_rng *rng, owned_cache *oc, int32_t *held,
                            test_tensor *k_new, test_tensor *v_new, void **before) {
    const int64_t Tnew = chance(rng, 0.6) ? pick(rng, 1, 3) : 0;
    float row[80];
    for (int64_t b = 0; b < c->B; ++b) {
        held[b] = (int32_t)(chance(rng, 0.1) ? 0 : pick(rng, 0, oc->S - Tnew));
        for (int64_t t = 0; t < held[b]; ++t)
            for (int64_t h = 0; h < oc->Hkv; ++h)
                for (int w = 0; w < 2; ++w) {
                    test_fill_normal(rng, row, w == 0 ? oc->Dk : oc->Dv, 1.0f);
                    owned_token(oc, w, b, t, h, row);
                }
    }
    *k_new = test_tensor_new(c->B, Tnew > 0 ? Tnew : 1, c->Hkv, c->Dk, (test_layout)pick(rng, 0, 3));
    *v_new = test_tensor_new(c->B, Tnew > 0 ? Tnew : 1, c->Hkv, c->Dv, (test_layout)pick(rng, 0, 3));
    test_tensor_fill_normal(k_new, rng, 1.0f), test_tensor_fill_normal(v_new, rng, 1.0f);
    const int64_t b = pick(rng, 0, c->B - 1), h = pick(rng, 0, c->Hkv - 1);
    if (c->poison && c->poison_target != 0) {
        const int which = c->poison_target - 1;
        if (Tnew > 0) {
            set_vector(which == 0 ? &k_new->view : &v_new->view, b, pick(rng, 0, Tnew - 1), h,
                       c->poison_value);
        } else if (held[b] > 0) {
            for (int64_t e = 0; e < 80; ++e) row[e] = c->poison_value;
            owned_token(oc, which, b, pick(rng, 0, held[b] - 1), h, row);
        } else {
            c->poison = 0;
        }
    }
    for (int w = 0; w < 2; ++w) memcpy(before[w], oc->data[w], oc->bytes[w]);
    for (int64_t s = 0; s < c->B; ++s) /* the append, on the shadow */
        for (int64_t t = 0; t < Tnew; ++t)
            for (int64_t g = 0; g < oc->Hkv; ++g)
                for (int w = 0; w < 2; ++w) {
                    const attn_tensor *source = w == 0 ? &k_new->view : &v_new->view;
                    for (int64_t e = 0; e < source->shape[3]; ++e) row[e] = test_get4(source, s, t, g, e);
                    owned_token(oc, w, s, held[s] + t, g, row);
                }
    for (int w = 0; w < 2; ++w) memcpy(oc->data[w], before[w], oc->bytes[w]);
    return Tnew;
}

/* The verdict of a forward_with_kvcache call: a refusal or an expected error leaves out, lse
 * and the cache as they were; a success matches the references and the append. */
static void kvcache_verdict(const config *c, const char *invalid, attn_status status,
                            const attn_error *error, attn_status expected,
                            const attn_error *ref_error, const attn_tensor *const *outputs,
                            const test_tensor *ref_out, const test_tensor *ref_lse,
                            const owned_cache *oc, void *const *before) {
    const int cache_untouched = memcmp(before[0], oc->data[0], oc->bytes[0]) == 0 &&
                                memcmp(before[1], oc->data[1], oc->bytes[1]) == 0;
    if (invalid != NULL) {
        check_refusal(c, status, error, invalid, outputs, 2);
        verdict(c, cache_untouched, "a refused call leaves the cache", "the cache was written");
        return;
    }
    if (expected != ATTN_OK || status != ATTN_OK) {
        char reason[600];
        const int untouched = all_equal(outputs[0], sentinel) && all_equal(outputs[1], sentinel);
        snprintf(reason, sizeof reason, "status %s (%.200s), reference %s (%.200s); out and lse %s, "
                 "cache %s", attn_status_name(status), error->message, attn_status_name(expected),
                 ref_error->message, untouched ? "untouched" : "written",
                 cache_untouched ? "untouched" : "written");
        verdict(c, status == expected && untouched && cache_untouched,
                "the reference's status, with nothing written", reason);
        if (status != ATTN_OK) ++counts.refused;
        return;
    }
    varlen_verdict(c, NULL, status, error, expected, ref_error, outputs, ref_out, ref_lse);
    verdict(c, owned_matches_shadow(oc), "the append stores the new tokens and nothing else",
            "the cache differs");
}

static void run_kvcache(config *c) {
    const char *invalid = c->invalid ? make_invalid(c) : NULL;
    test_rng rng;
    test_rng_seed(&rng, c->seed ^ 0xcac4e);
    owned_cache oc;
    const int made = owned_cache_make(&oc, c, &rng);
    void *before[2] = {made ? malloc(oc.bytes[0]) : NULL, made ? malloc(oc.bytes[1]) : NULL};
    if (!verdict(c, made && before[0] && before[1], "a cache is made", "out of memory")) {
        owned_cache_free(&oc), free(before[0]), free(before[1]);
        return;
    }
    int32_t held[3];
    test_tensor k_new, v_new;
    const int64_t Tnew = kvcache_fill(c, &rng, &oc, held, &k_new, &v_new, before);
    snprintf(c->description + strlen(c->description),
             sizeof c->description - strlen(c->description), " storage=%s page=%lld Tnew=%lld",
             dtype_name(oc.dtype), (long long)oc.page_size, (long long)Tnew);
    test_tensor q = test_tensor_new(c->B, c->Tq, c->Hq, c->Dk, (test_layout)pick(&rng, 0, 3));
    test_tensor_fill_normal(&q, &rng, 1.0f);
    if (c->poison && c->poison_target == 0)
        set_vector(&q.view, pick(&rng, 0, c->B - 1), pick(&rng, 0, c->Tq - 1),
                   pick(&rng, 0, c->Hq - 1), c->poison_value);
    test_tensor out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, (test_layout)pick(&rng, 0, 3));
    test_tensor ref_out = test_tensor_new(c->B, c->Tq, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    const int64_t lse_shape[3] = {c->B, c->Hq, c->Tq};
    test_tensor lse = test_tensor_new_shape(3, lse_shape), ref_lse = test_tensor_new_shape(3, lse_shape);
    fill_all(&out.view, sentinel), fill_all(&lse.view, sentinel);
    attn_kv_cache_view view = {0};
    view.k_cache = &oc.views[0], view.v_cache = &oc.views[1], view.cache_seqlens = held;
    view.block_table = oc.table_view.data != NULL ? &oc.table_view : NULL;
    const attn_kv_append append = {&k_new.view, &v_new.view, NULL, NULL, ATTN_ROPE_HALF};
    attn_error error = {0}, ref_error = {0};
    const attn_status status = attn_forward_with_kvcache(&q.view, &view, Tnew > 0 ? &append : NULL,
                                                         &c->options, &out.view, &lse.view,
                                                         &c->execution, &error);
    ++counts.statuses[status <= ATTN_ERROR_COMMUNICATION ? status : 0];
    const attn_status expected = kvcache_expected(c, &oc, held, Tnew, &q, &ref_out, &ref_lse,
                                                  &ref_error);
    const attn_tensor *outputs[2] = {&out.view, &lse.view};
    kvcache_verdict(c, invalid, status, &error, expected, &ref_error, outputs, &ref_out, &ref_lse,
                    &oc, before);
    owned_cache_free(&oc), free(before[0]), free(before[1]);
    test_tensor_free(&k_new), test_tensor_free(&v_new), test_tensor_free(&q);
    test_tensor_free(&out), test_tensor_free(&lse), test_tensor_free(&ref_out), test_tensor_free(&ref_lse);
}

/* ---- the run ------------------------------------------------------------------------------ */

static void (*const runners[KINDS])(config *) = {run_forward, run_backward, run_varlen,
                                                  run_decode, run_kvcache};

/* The seed of configuration `index` (splitmix64 of base + index). */
static uint64_t configuration_seed(uint64_t base, uint64_t index) {
    uint64_t z = base + index * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Runs one configuration under a 30 s alarm; the kind follows from the seed. */
static void run_configuration(uint64_t seed, int verbose) {
    config c;
    draw_config(seed, (int)(seed % KINDS), &c);
    current_seed = seed;
    ++counts.per_kind[c.kind];
    const uint64_t failures = counts.failures;
    alarm(30);
    runners[c.kind](&c);
    alarm(0);
    counts.poisoned += c.poison != 0; /* (a runner drops a poison that has no token to land on) */
    if (verbose)
        printf("seed %llu (%s): %s\n  %s\n", (unsigned long long)seed, kind_names[c.kind],
               counts.failures == failures ? "ok" : "FAILED", c.description);
}

int main(int argc, char **argv) {
    signal(SIGALRM, on_alarm);
    const char *one = getenv("ATTN_DIFFERENTIAL_SEED");
    if (one != NULL && *one) {
        run_configuration(strtoull(one, NULL, 0), 1);
        return test_finish();
    }
    const char *count_text = argc > 1 ? argv[1] : getenv("ATTN_DIFFERENTIAL_CASES");
    const uint64_t count = count_text != NULL && *count_text ? strtoull(count_text, NULL, 0) : 500;
    const uint64_t base = 20261207;
    const double start = (double)clock() / CLOCKS_PER_SEC;
    uint64_t run = 0;
    for (; run < count && counts.failures < 20; ++run)
        run_configuration(configuration_seed(base, run), 0);
    printf("differential: %llu configurations in %.1f s of CPU time, %llu failed checks\n",
           (unsigned long long)run, (double)clock() / CLOCKS_PER_SEC - start,
           (unsigned long long)counts.failures);
    for (int k = 0; k < KINDS; ++k)
        printf("  %-22s %llu\n", kind_names[k], (unsigned long long)counts.per_kind[k]);
    printf("  NaN/inf injected       %llu\n  refused (as expected)  %llu\n  call statuses:",
           (unsigned long long)counts.poisoned, (unsigned long long)counts.refused);
    for (int s = 0; s <= ATTN_ERROR_COMMUNICATION; ++s)
        if (counts.statuses[s])
            printf(" %s %llu", attn_status_name((attn_status)s), (unsigned long long)counts.statuses[s]);
    printf("\n");
    /* the draw must reach every kind and inject faults, or the run tests little */
    for (int k = 0; k < KINDS; ++k)
        CHECK(run < 50 || counts.per_kind[k] * KINDS * 2 >= run, "kind %s ran %llu times",
              kind_names[k], (unsigned long long)counts.per_kind[k]);
    CHECK(run < 200 || counts.poisoned > 0, "no configuration was poisoned");
    return test_finish();
}
