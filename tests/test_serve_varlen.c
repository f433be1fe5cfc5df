/*
 * test_serve_varlen.c — packed variable-length attention (attn_varlen_forward / _backward)
 * over a table of cases (mixed and empty lengths, causal bottom-right, windows, ALiBi,
 * soft-cap, GQA/MQA, Dk != Dv):
 *  - equals the double-precision oracle (attn_reference_forward / _backward) on the padded
 *    batch with query_lengths / key_lengths, row for row (1e-5 forward, 1e-4 gradients);
 *  - equals the fast padded path with lengths (attn_forward / attn_backward) within rounding;
 *  - equals one attn_forward / attn_backward call per sequence bitwise;
 *  - is bitwise identical for 1, 2 and 3 threads;
 * and every malformed cu_seqlens / option is refused with a message naming it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static const char *attn_dtype_name_for_tests(attn_dtype dtype) {
    return dtype == ATTN_DTYPE_BF16 ? "bf16" : dtype == ATTN_DTYPE_F16 ? "f16" : "f32";
}

#define MOST_SEQUENCES 6

typedef struct varlen_case {
    const char *name;
    int B;
    int lengths_q[MOST_SEQUENCES], lengths_k[MOST_SEQUENCES];
    int Hq, Hkv, Dk, Dv;
    int causal;
    int64_t window_left, window_right; /* -2 = no window */
    int alibi;
    float softcap, scale;
} varlen_case;

static const varlen_case cases[] = {
    {"plain mixed", 3, {5, 17, 1}, {5, 17, 1}, 2, 2, 8, 8, 0, -2, -2, 0, 0.0f, 0.0f},
    {"causal bottom-right, Tq < Tk", 4, {3, 9, 1, 20}, {11, 9, 30, 20}, 4, 2, 16, 8, 1, -2, -2, 0, 0.0f, 0.0f},
    {"causal long (several tiles)", 2, {150, 70}, {150, 200}, 2, 1, 16, 16, 1, -2, -2, 0, 0.0f, 0.0f},
    {"window 4/2", 3, {12, 7, 33}, {12, 10, 33}, 2, 2, 8, 12, 0, 4, 2, 0, 0.0f, 0.0f},
    {"causal window 5, soft-cap", 2, {40, 3}, {45, 3}, 3, 1, 8, 8, 1, 5, -1, 0, 6.0f, 0.0f},
    {"ALiBi + scale", 3, {8, 14, 2}, {8, 20, 9}, 4, 4, 8, 8, 1, -2, -2, 1, 0.0f, 0.6f},
    {"empty sequences", 5, {4, 0, 6, 3, 0}, {4, 7, 0, 3, 0}, 2, 1, 8, 8, 1, -2, -2, 0, 0.0f, 0.0f},
    {"MQA D=64 many short", 6, {1, 2, 3, 65, 2, 1}, {9, 2, 3, 65, 40, 1}, 8, 1, 64, 64, 1, -2, -2, 0, 0.0f, 0.0f},
};

typedef struct packed_case {
    const varlen_case *vc;
    int32_t cu_q[MOST_SEQUENCES + 1], cu_k[MOST_SEQUENCES + 1];
    int64_t total_q, total_k, max_q, max_k;
    attn_varlen sequences;
    attn_options options;
} packed_case;

static void pack(const varlen_case *vc, packed_case *p) {
    memset(p, 0, sizeof *p);
    p->vc = vc;
    for (int b = 0; b < vc->B; ++b) {
        p->cu_q[b + 1] = p->cu_q[b] + vc->lengths_q[b];
        p->cu_k[b + 1] = p->cu_k[b] + vc->lengths_k[b];
        if (vc->lengths_q[b] > p->max_q) p->max_q = vc->lengths_q[b];
        if (vc->lengths_k[b] > p->max_k) p->max_k = vc->lengths_k[b];
    }
    p->total_q = p->cu_q[vc->B], p->total_k = p->cu_k[vc->B];
    if (p->max_q < 1) p->max_q = 1;
    if (p->max_k < 1) p->max_k = 1;
    p->sequences = (attn_varlen){vc->B, p->cu_q, p->cu_k, p->max_q, p->max_k};
    attn_options o = attn_options_default();
    o.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    o.causal = vc->causal;
    if (vc->window_left != -2) o.window = 1, o.window_left = vc->window_left, o.window_right = vc->window_right;
    o.alibi = vc->alibi;
    o.softcap = vc->softcap;
    if (vc->scale > 0) o.custom_scale = 1, o.scale = vc->scale;
    o.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    p->options = o;
}

static test_tensor packed_tensor(int64_t total, int64_t H, int64_t D) {
    const int64_t shape[3] = {total, H, D};
    return test_tensor_new_shape(3, shape);
}

/* Copies rows of packed [total, H, D] into padded [B, T, H, D] (zeros elsewhere), or back. */
static void copy_padded(const packed_case *p, const int32_t *cu, const test_tensor *packed,
                        test_tensor *padded, int to_padded) {
    const int64_t H = packed->view.shape[1], D = packed->view.shape[2];
    for (int b = 0; b < p->vc->B; ++b)
        for (int64_t t = 0; t < cu[b + 1] - cu[b]; ++t)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t d = 0; d < D; ++d) {
                    float *x = packed->allocation + ((cu[b] + t) * H + h) * D + d;
                    float *y = padded->allocation + ((b * padded->view.shape[1] + t) * H + h) * D + d;
                    if (to_padded) *y = *x;
                    else *x = *y;
                }
}

/* max |a - b| / (1 + |b|) over packed rows of a packed tensor vs rows of a padded one. */
static double packed_vs_padded(const packed_case *p, const int32_t *cu, const test_tensor *packed,
                               const test_tensor *padded) {
    test_tensor copy = packed_tensor(packed->view.shape[0], packed->view.shape[1], packed->view.shape[2]);
    copy_padded(p, cu, &copy, (test_tensor *)padded, 0);
    double worst = test_max_relative_error(&packed->view, &copy.view);
    test_tensor_free(&copy);
    return worst;
}

/* LSE [Hq, total_q] vs padded [B, Hq, Tq] rows. */
static double lse_vs_padded(const packed_case *p, const test_tensor *lse, const test_tensor *padded) {
    const int64_t Hq = lse->view.shape[0], T = padded->view.shape[2];
    double worst = 0;
    for (int b = 0; b < p->vc->B; ++b)
        for (int64_t i = 0; i < p->cu_q[b + 1] - p->cu_q[b]; ++i)
            for (int64_t h = 0; h < Hq; ++h) {
                const float x = lse->allocation[h * p->total_q + p->cu_q[b] + i];
                const float y = padded->allocation[(b * Hq + h) * T + i];
                double e = (x == y) ? 0.0 : fabs((double)x - y) / (1 + fabs((double)y));
                if (isnan(e)) e = INFINITY;
                if (e > worst) worst = e;
            }
    return worst;
}

static void run_case(const varlen_case *vc, uint64_t seed) {
    packed_case p;
    pack(vc, &p);
    test_rng rng;
    test_rng_seed(&rng, seed);
    test_tensor q = packed_tensor(p.total_q, vc->Hq, vc->Dk), k = packed_tensor(p.total_k, vc->Hkv, vc->Dk);
    test_tensor v = packed_tensor(p.total_k, vc->Hkv, vc->Dv), dout = packed_tensor(p.total_q, vc->Hq, vc->Dv);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f), test_tensor_fill_normal(&dout, &rng, 1.0f);
    test_tensor out = packed_tensor(p.total_q, vc->Hq, vc->Dv);
    const int64_t lse_shape[2] = {vc->Hq, p.total_q};
    test_tensor lse = test_tensor_new_shape(2, lse_shape);
    attn_error error;
    attn_status status = attn_varlen_forward(&q.view, &k.view, &v.view, &p.sequences, &p.options,
                                             &out.view, &lse.view, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: varlen forward", vc->name);
    test_tensor dq = packed_tensor(p.total_q, vc->Hq, vc->Dk), dk = packed_tensor(p.total_k, vc->Hkv, vc->Dk);
    test_tensor dv = packed_tensor(p.total_k, vc->Hkv, vc->Dv);
    status = attn_varlen_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &dout.view,
                                  &p.sequences, &p.options, &dq.view, &dk.view, &dv.view, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: varlen backward", vc->name);

    /* The padded batch with lengths: the oracle and the fast path. */
    int32_t lengths_q[MOST_SEQUENCES], lengths_k[MOST_SEQUENCES];
    for (int b = 0; b < vc->B; ++b) lengths_q[b] = vc->lengths_q[b], lengths_k[b] = vc->lengths_k[b];
    attn_options padded_options = p.options;
    padded_options.query_lengths = lengths_q, padded_options.key_lengths = lengths_k;
    const int64_t B = vc->B, Tq = p.max_q, Tk = p.max_k;
    test_tensor Q = test_tensor_new(B, Tq, vc->Hq, vc->Dk, TEST_LAYOUT_BTHD);
    test_tensor K = test_tensor_new(B, Tk, vc->Hkv, vc->Dk, TEST_LAYOUT_BTHD);
    test_tensor V = test_tensor_new(B, Tk, vc->Hkv, vc->Dv, TEST_LAYOUT_BTHD);
    test_tensor dO = test_tensor_new(B, Tq, vc->Hq, vc->Dv, TEST_LAYOUT_BTHD);
    copy_padded(&p, p.cu_q, &q, &Q, 1), copy_padded(&p, p.cu_k, &k, &K, 1);
    copy_padded(&p, p.cu_k, &v, &V, 1), copy_padded(&p, p.cu_q, &dout, &dO, 1);
    const int64_t padded_lse_shape[3] = {B, vc->Hq, Tq};
    for (int fast = 0; fast <= 1; ++fast) {
        test_tensor O = test_tensor_new(B, Tq, vc->Hq, vc->Dv, TEST_LAYOUT_BTHD);
        test_tensor L = test_tensor_new_shape(3, padded_lse_shape);
        status = fast ? attn_forward(&Q.view, &K.view, &V.view, &padded_options, &O.view, &L.view, NULL, &error)
                      : attn_reference_forward(&Q.view, &K.view, &V.view, &padded_options, &O.view, &L.view, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s: padded forward (%s)", vc->name, fast ? "fast" : "reference");
        const double tolerance = fast ? 1e-5 : 1e-5;
        double eo = packed_vs_padded(&p, p.cu_q, &out, &O), el = lse_vs_padded(&p, &lse, &L);
        CHECK(eo <= tolerance && el <= tolerance, "%s: varlen forward = padded %s with lengths (out %.3g, lse %.3g)",
              vc->name, fast ? "attn_forward" : "reference", eo, el);
        test_tensor dQ = test_tensor_new(B, Tq, vc->Hq, vc->Dk, TEST_LAYOUT_BTHD);
        test_tensor dK = test_tensor_new(B, Tk, vc->Hkv, vc->Dk, TEST_LAYOUT_BTHD);
        test_tensor dV = test_tensor_new(B, Tk, vc->Hkv, vc->Dv, TEST_LAYOUT_BTHD);
        status = fast ? attn_backward(&Q.view, &K.view, &V.view, &O.view, &L.view, &dO.view, &padded_options,
                                      &dQ.view, &dK.view, &dV.view, NULL, NULL, &error)
                      : attn_reference_backward(&Q.view, &K.view, &V.view, &O.view, &L.view, &dO.view,
                                                &padded_options, &dQ.view, &dK.view, &dV.view, NULL, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s: padded backward (%s)", vc->name, fast ? "fast" : "reference");
        double gq = packed_vs_padded(&p, p.cu_q, &dq, &dQ), gk = packed_vs_padded(&p, p.cu_k, &dk, &dK);
        double gv = packed_vs_padded(&p, p.cu_k, &dv, &dV);
        CHECK(gq <= 1e-4 && gk <= 1e-4 && gv <= 1e-4,
              "%s: varlen backward = padded %s with lengths (dq %.3g, dk %.3g, dv %.3g)", vc->name,
              fast ? "attn_backward" : "reference", gq, gk, gv);
        test_tensor_free(&O), test_tensor_free(&L), test_tensor_free(&dQ), test_tensor_free(&dK), test_tensor_free(&dV);
    }

    /* One call per sequence: bitwise. */
    int same = 1;
    for (int b = 0; b < vc->B && same; ++b) {
        const int64_t lq = vc->lengths_q[b], lk = vc->lengths_k[b];
        if (lq == 0 || lk == 0) continue;
        test_tensor qs = test_tensor_new(1, lq, vc->Hq, vc->Dk, TEST_LAYOUT_BTHD);
        test_tensor ks = test_tensor_new(1, lk, vc->Hkv, vc->Dk, TEST_LAYOUT_BTHD);
        test_tensor vs = test_tensor_new(1, lk, vc->Hkv, vc->Dv, TEST_LAYOUT_BTHD);
        test_tensor os = test_tensor_new(1, lq, vc->Hq, vc->Dv, TEST_LAYOUT_BTHD);
        test_tensor ds = test_tensor_new(1, lq, vc->Hq, vc->Dv, TEST_LAYOUT_BTHD);
        const int64_t ls_shape[3] = {1, vc->Hq, lq};
        test_tensor ls = test_tensor_new_shape(3, ls_shape);
        memcpy(qs.allocation, q.allocation + p.cu_q[b] * vc->Hq * vc->Dk, (size_t)qs.allocation_floats * 4);
        memcpy(ks.allocation, k.allocation + p.cu_k[b] * vc->Hkv * vc->Dk, (size_t)ks.allocation_floats * 4);
        memcpy(vs.allocation, v.allocation + p.cu_k[b] * vc->Hkv * vc->Dv, (size_t)vs.allocation_floats * 4);
        memcpy(ds.allocation, dout.allocation + p.cu_q[b] * vc->Hq * vc->Dv, (size_t)ds.allocation_floats * 4);
        attn_forward(&qs.view, &ks.view, &vs.view, &p.options, &os.view, &ls.view, NULL, &error);
        same &= memcmp(os.allocation, out.allocation + p.cu_q[b] * vc->Hq * vc->Dv, (size_t)os.allocation_floats * 4) == 0;
        for (int64_t h = 0; h < vc->Hq; ++h)
            same &= memcmp(ls.allocation + h * lq, lse.allocation + h * p.total_q + p.cu_q[b], (size_t)lq * 4) == 0;
        test_tensor dqs = test_tensor_new(1, lq, vc->Hq, vc->Dk, TEST_LAYOUT_BTHD);
        test_tensor dks = test_tensor_new(1, lk, vc->Hkv, vc->Dk, TEST_LAYOUT_BTHD);
        test_tensor dvs = test_tensor_new(1, lk, vc->Hkv, vc->Dv, TEST_LAYOUT_BTHD);
        attn_backward(&qs.view, &ks.view, &vs.view, &os.view, &ls.view, &ds.view, &p.options, &dqs.view,
                      &dks.view, &dvs.view, NULL, NULL, &error);
        same &= memcmp(dqs.allocation, dq.allocation + p.cu_q[b] * vc->Hq * vc->Dk, (size_t)dqs.allocation_floats * 4) == 0;
        same &= memcmp(dks.allocation, dk.allocation + p.cu_k[b] * vc->Hkv * vc->Dk, (size_t)dks.allocation_floats * 4) == 0;
        same &= memcmp(dvs.allocation, dv.allocation + p.cu_k[b] * vc->Hkv * vc->Dv, (size_t)dvs.allocation_floats * 4) == 0;
        test_tensor_free(&qs), test_tensor_free(&ks), test_tensor_free(&vs), test_tensor_free(&os);
        test_tensor_free(&ds), test_tensor_free(&ls), test_tensor_free(&dqs), test_tensor_free(&dks), test_tensor_free(&dvs);
    }
    CHECK(same, "%s: varlen forward and backward = one call per sequence, bitwise", vc->name);

    /* Thread counts. */
    for (int threads = 1; threads <= 3; ++threads) {
        attn_execution execution = attn_execution_default();
        execution.num_threads = threads;
        test_tensor o2 = packed_tensor(p.total_q, vc->Hq, vc->Dv), l2 = test_tensor_new_shape(2, lse_shape);
        test_tensor dq2 = packed_tensor(p.total_q, vc->Hq, vc->Dk), dk2 = packed_tensor(p.total_k, vc->Hkv, vc->Dk);
        test_tensor dv2 = packed_tensor(p.total_k, vc->Hkv, vc->Dv);
        attn_varlen_forward(&q.view, &k.view, &v.view, &p.sequences, &p.options, &o2.view, &l2.view, &execution, &error);
        attn_varlen_backward(&q.view, &k.view, &v.view, &o2.view, &l2.view, &dout.view, &p.sequences, &p.options,
                             &dq2.view, &dk2.view, &dv2.view, &execution, &error);
        CHECK(test_bitwise_equal(&o2.view, &out.view) && test_bitwise_equal(&l2.view, &lse.view) &&
                  test_bitwise_equal(&dq2.view, &dq.view) && test_bitwise_equal(&dk2.view, &dk.view) &&
                  test_bitwise_equal(&dv2.view, &dv.view),
              "%s: %d threads bitwise = the default", vc->name, threads);
        test_tensor_free(&o2), test_tensor_free(&l2), test_tensor_free(&dq2), test_tensor_free(&dk2), test_tensor_free(&dv2);
    }
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&dout);
    test_tensor_free(&out), test_tensor_free(&lse), test_tensor_free(&dq), test_tensor_free(&dk), test_tensor_free(&dv);
    test_tensor_free(&Q), test_tensor_free(&K), test_tensor_free(&V), test_tensor_free(&dO);
}

/* Malformed arguments: status and a message naming the argument and value. */
typedef struct error_case {
    const char *name;
    int32_t cu_q[4], cu_k[4];
    int64_t max_q, max_k;
    int set_mask;
    attn_status expected;
    const char *needle;
} error_case;

static const error_case error_cases[] = {
    {"cu_seqlens_q decreasing", {0, 5, 3, 8}, {0, 2, 4, 6}, 8, 8, 0, ATTN_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[2] = 3 < cu_seqlens_q[1] = 5"},
    {"cu_seqlens_k not from 0", {0, 2, 4, 8}, {1, 2, 4, 6}, 8, 8, 0, ATTN_ERROR_INVALID_ARGUMENT, "cu_seqlens_k[0] = 1"},
    {"cu_seqlens_q not ending at total", {0, 2, 4, 7}, {0, 2, 4, 6}, 8, 8, 0, ATTN_ERROR_SHAPE_MISMATCH, "cu_seqlens_q[3] = 7: must equal the packed total 8"},
    {"cu_seqlens_k beyond total", {0, 2, 4, 8}, {0, 2, 4, 9}, 8, 8, 0, ATTN_ERROR_SHAPE_MISMATCH, "cu_seqlens_k[3] = 9"},
    {"length above max_seqlen_q", {0, 2, 7, 8}, {0, 2, 4, 6}, 4, 8, 0, ATTN_ERROR_INVALID_ARGUMENT, "sequence 1 has length 5 > max_seqlen_q = 4"},
    {"length above max_seqlen_k", {0, 2, 4, 8}, {0, 1, 5, 6}, 8, 3, 0, ATTN_ERROR_INVALID_ARGUMENT, "sequence 1 has length 4 > max_seqlen_k = 3"},
    {"max_seqlen 0", {0, 2, 4, 8}, {0, 2, 4, 6}, 0, 8, 0, ATTN_ERROR_INVALID_ARGUMENT, "max_seqlen_q = 0"},
    {"padded-batch option", {0, 2, 4, 8}, {0, 2, 4, 6}, 8, 8, 1, ATTN_ERROR_INVALID_ARGUMENT, "options.mask is set"},
};

static void test_errors(void) {
    test_tensor q = packed_tensor(8, 2, 4), k = packed_tensor(6, 1, 4), v = packed_tensor(6, 1, 4);
    test_tensor out = packed_tensor(8, 2, 4), dq = packed_tensor(8, 2, 4), dk = packed_tensor(6, 1, 4), dv = packed_tensor(6, 1, 4);
    const int64_t lse_shape[2] = {2, 8};
    test_tensor lse = test_tensor_new_shape(2, lse_shape);
    const int64_t mask_shape[4] = {1, 1, 8, 6};
    test_tensor mask_holder = test_tensor_new_shape(4, mask_shape);
    for (size_t n = 0; n < sizeof error_cases / sizeof error_cases[0]; ++n) {
        const error_case *ec = &error_cases[n];
        attn_varlen sequences = {3, ec->cu_q, ec->cu_k, ec->max_q, ec->max_k};
        attn_options options = attn_options_default();
        if (ec->set_mask) options.mask = &mask_holder.view;
        for (int backward = 0; backward <= 1; ++backward) {
            attn_error error;
            memset(&error, 0, sizeof error);
            for (int64_t e = 0; e < out.allocation_floats; ++e) out.allocation[e] = 7.0f;
            attn_status status = backward ? attn_varlen_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &out.view,
                                                                 &sequences, &options, &dq.view, &dk.view, &dv.view, NULL, &error)
                                          : attn_varlen_forward(&q.view, &k.view, &v.view, &sequences, &options, &out.view,
                                                                &lse.view, NULL, &error);
            CHECK(status == ec->expected && strstr(error.message, ec->needle) != NULL,
                  "%s (%s): %s \"%s\"", ec->name, backward ? "backward" : "forward", attn_status_name(status), error.message);
            CHECK(backward || out.allocation[0] == 7.0f, "%s: nothing written", ec->name);
        }
    }
    /* The LSE layout is [Hq, total_q]. */
    const int32_t cu_q[4] = {0, 2, 4, 8}, cu_k[4] = {0, 2, 4, 6};
    attn_varlen sequences = {3, cu_q, cu_k, 8, 8};
    const int64_t wrong_shape[2] = {8, 2};
    test_tensor wrong = test_tensor_new_shape(2, wrong_shape);
    attn_error error;
    attn_status status = attn_varlen_forward(&q.view, &k.view, &v.view, &sequences, NULL, &out.view, &wrong.view, NULL, &error);
    CHECK(status == ATTN_ERROR_SHAPE_MISMATCH && strstr(error.message, "[Hq, total_q]") != NULL, "lse [total_q, Hq] refused: %s",
          error.message);
    status = attn_varlen_forward(&q.view, &k.view, &v.view, NULL, NULL, &out.view, NULL, NULL, &error);
    CHECK(status == ATTN_ERROR_NULL_ARGUMENT, "NULL sequences refused: %s", error.message);
    /* An empty row under the default policy names the sequence. */
    const int32_t cu_k0[4] = {0, 2, 2, 6};
    sequences.cu_seqlens_k = cu_k0;
    status = attn_varlen_forward(&q.view, &k.view, &v.view, &sequences, NULL, &out.view, NULL, NULL, &error);
    CHECK(status == ATTN_ERROR_EMPTY_ROW && strstr(error.message, "sequence 1") != NULL, "keyless sequence: %s", error.message);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&out), test_tensor_free(&lse);
    test_tensor_free(&dq), test_tensor_free(&dk), test_tensor_free(&dv), test_tensor_free(&mask_holder), test_tensor_free(&wrong);
}

/* 16-bit operands: bf16 / f16 packed tensors give one attn_forward call per sequence in that
 * dtype bitwise, and the float32 result within the operand's rounding. */
static void test_half_operands(void) {
    const varlen_case *vc = &cases[1];
    packed_case p;
    pack(vc, &p);
    test_rng rng;
    test_rng_seed(&rng, 77);
    test_tensor q = packed_tensor(p.total_q, vc->Hq, vc->Dk), k = packed_tensor(p.total_k, vc->Hkv, vc->Dk);
    test_tensor v = packed_tensor(p.total_k, vc->Hkv, vc->Dv);
    test_tensor_fill_normal(&q, &rng, 1.0f), test_tensor_fill_normal(&k, &rng, 1.0f), test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor out32 = packed_tensor(p.total_q, vc->Hq, vc->Dv);
    attn_error error;
    attn_varlen_forward(&q.view, &k.view, &v.view, &p.sequences, &p.options, &out32.view, NULL, NULL, &error);
    const attn_dtype dtypes[2] = {ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    for (int n = 0; n < 2; ++n) {
        const attn_dtype dtype = dtypes[n];
        uint16_t *qh = malloc((size_t)q.allocation_floats * 2), *kh = malloc((size_t)k.allocation_floats * 2);
        uint16_t *vh = malloc((size_t)v.allocation_floats * 2), *oh = malloc((size_t)out32.allocation_floats * 2);
        attn_tensor qv = q.view, kv = k.view, vv = v.view, ov = out32.view;
        qv.data = qh, kv.data = kh, vv.data = vh, ov.data = oh;
        qv.dtype = kv.dtype = vv.dtype = ov.dtype = dtype;
        attn_tensor_convert(&q.view, &qv, &error), attn_tensor_convert(&k.view, &kv, &error), attn_tensor_convert(&v.view, &vv, &error);
        attn_status status = attn_varlen_forward(&qv, &kv, &vv, &p.sequences, &p.options, &ov, NULL, NULL, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s varlen", attn_dtype_name_for_tests(dtype));
        test_tensor widened = packed_tensor(p.total_q, vc->Hq, vc->Dv);
        attn_tensor_convert(&ov, &widened.view, &error);
        const double e = test_max_relative_error(&widened.view, &out32.view);
        CHECK(e <= (dtype == ATTN_DTYPE_BF16 ? 3e-2 : 4e-3), "%s operands: varlen = float32 within rounding (err %.3g)",
              attn_dtype_name_for_tests(dtype), e);
        /* Sequence 3 alone in the same dtype: bitwise. */
        const int b = 3;
        attn_tensor qs = qv, ks = kv, vs = vv, os = ov;
        qs.rank = ks.rank = vs.rank = os.rank = 4;
        const int64_t lq = vc->lengths_q[b], lk = vc->lengths_k[b];
        const int64_t qshape[4] = {1, lq, vc->Hq, vc->Dk}, kshape[4] = {1, lk, vc->Hkv, vc->Dk};
        const int64_t vshape[4] = {1, lk, vc->Hkv, vc->Dv}, oshape[4] = {1, lq, vc->Hq, vc->Dv};
        qs = attn_tensor_contiguous(qh + p.cu_q[b] * vc->Hq * vc->Dk, dtype, 4, qshape);
        ks = attn_tensor_contiguous(kh + p.cu_k[b] * vc->Hkv * vc->Dk, dtype, 4, kshape);
        vs = attn_tensor_contiguous(vh + p.cu_k[b] * vc->Hkv * vc->Dv, dtype, 4, vshape);
        uint16_t *alone = malloc((size_t)(lq * vc->Hq * vc->Dv) * 2);
        os = attn_tensor_contiguous(alone, dtype, 4, oshape);
        CHECK_STATUS(attn_forward(&qs, &ks, &vs, &p.options, &os, NULL, NULL, &error), ATTN_OK, &error, "alone");
        CHECK(memcmp(alone, oh + p.cu_q[b] * vc->Hq * vc->Dv, (size_t)(lq * vc->Hq * vc->Dv) * 2) == 0,
              "%s operands: sequence %d = attn_forward alone, bitwise", attn_dtype_name_for_tests(dtype), b);
        free(qh), free(kh), free(vh), free(oh), free(alone), test_tensor_free(&widened);
    }
    /* Mixed dtypes are refused, naming the argument. */
    attn_tensor kb = k.view;
    kb.dtype = ATTN_DTYPE_BF16;
    attn_status status = attn_varlen_forward(&q.view, &kb, &v.view, &p.sequences, &p.options, &out32.view, NULL, NULL, &error);
    CHECK(status == ATTN_ERROR_INVALID_ARGUMENT && strstr(error.message, "k.dtype") != NULL, "mixed dtypes: %s", error.message);
    test_tensor_free(&q), test_tensor_free(&k), test_tensor_free(&v), test_tensor_free(&out32);
}

int main(void) {
    test_half_operands();
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; ++n) run_case(&cases[n], 1000 + n);
    test_errors();
    return test_finish();
}
