/*
 * test_ring_zero_options.c — run under mpiexec with P processes (ctest runs P = 1, 2, 3, 4):
 * attn_ring_forward and attn_ring_backward with a zero-initialised attn_options (= {0}) or
 * NULL options, and a zero-initialised or NULL attn_execution, compute plain scaled
 * dot-product attention over the whole sequence, for every token layout. Every rank checks its
 * rows of O, LSE, dQ and its tokens' dK, dV against an independent double-precision oracle
 * of the whole sequence (test_plain_attention in tests/support; every rank computes it from
 * the same seed):
 *   S = Q Kᵀ / sqrt(Dk), P = softmax_rows(S), O = P V, LSE = log Σ_j exp(S_ij),
 *   dS = P ∘ (dO Vᵀ − rowsum(dO ∘ O)), dQ = dS K / sqrt(Dk), dK = dSᵀ Q / sqrt(Dk), dV = Pᵀ dO
 * (GQA: query head h reads KV head h / (Hq / Hkv); KV gradients sum over the group).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_mpi.h"
#include "mpi_test_finish.h"
#include "test_support.h"

enum { B = 1, T = 13, HQ = 4, HKV = 2, DK = 8, DV = 6 };

/* Global tensors, contiguous [B][T][H][D], and the oracle's results. */
static float q[B * T * HQ * DK], k[B * T * HKV * DK], v[B * T * HKV * DV], dout[B * T * HQ * DV];
static double out[B * T * HQ * DV], lse[B * HQ * T];
static double dq[B * T * HQ * DK], dk[B * T * HKV * DK], dv[B * T * HKV * DV];

#define AT(b, t, h, d, H, D) (((((int64_t)(b)) * T + (t)) * (H) + (h)) * (D) + (d))

/* The whole sequence's O, LSE and gradients in double (test_plain_attention). */
static void oracle(void) {
    static const test_plain_shape shape = {T, T, HQ, HKV, DK, DV};
    memset(dq, 0, sizeof dq), memset(dk, 0, sizeof dk), memset(dv, 0, sizeof dv);
    for (int64_t b = 0; b < B; ++b)
        test_plain_attention(&shape, T, q + b * T * HQ * DK, k + b * T * HKV * DK,
                             v + b * T * HKV * DV, dout + b * T * HQ * DV, out + b * T * HQ * DV,
                             lse + b * HQ * T, dq + b * T * HQ * DK, dk + b * T * HKV * DK,
                             dv + b * T * HKV * DV);
}

/* max |local - oracle| / (1 + |oracle|) over a rank's tokens: local [B][n][H][D] holds the
 * global tokens positions[0..n) of `global` [B][T][H][D]. */
static double rows_error(const float *local, const double *global, const int64_t *positions,
                         int64_t n, int64_t heads, int64_t dim) {
    double worst = 0.0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t a = 0; a < n; ++a)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t d = 0; d < dim; ++d) {
                    const double expected = global[AT(b, positions[a], h, d, heads, dim)];
                    const double actual = local[((b * n + a) * heads + h) * dim + d];
                    const double e = fabs(actual - expected) / (1.0 + fabs(expected));
                    if (!(e <= worst)) worst = e;
                }
    return worst;
}

static attn_tensor view(float *data, int64_t length, int64_t heads, int64_t dim) {
    return attn_tensor_f32_4d(data, B, length, heads, dim);
}

static void run_layout(attn_ring_layout_kind kind, int rank, int rank_count) {
    const attn_ring_layout layout = {kind, T, rank_count};
    int64_t n = 0;
    attn_error error;
    CHECK_STATUS(attn_ring_layout_local_length(&layout, rank, &n, &error), ATTN_OK, &error,
                 "local length");
    int64_t *positions = malloc((size_t)n * sizeof(int64_t));
    float *lq = malloc((size_t)(B * n * HQ * DK) * sizeof(float));
    float *lk = malloc((size_t)(B * n * HKV * DK) * sizeof(float));
    float *lv = malloc((size_t)(B * n * HKV * DV) * sizeof(float));
    float *ldout = malloc((size_t)(B * n * HQ * DV) * sizeof(float));
    float *lout = malloc((size_t)(B * n * HQ * DV) * sizeof(float));
    float *llse = malloc((size_t)(B * HQ * n) * sizeof(float));
    float *ldq = malloc((size_t)(B * n * HQ * DK) * sizeof(float));
    float *ldk = malloc((size_t)(B * n * HKV * DK) * sizeof(float));
    float *ldv = malloc((size_t)(B * n * HKV * DV) * sizeof(float));
    attn_ring_layout_positions(&layout, rank, positions, NULL);
    attn_tensor gq = view(q, T, HQ, DK), gk = view(k, T, HKV, DK), gv = view(v, T, HKV, DV);
    attn_tensor gdout = view(dout, T, HQ, DV);
    attn_tensor vq = view(lq, n, HQ, DK), vk = view(lk, n, HKV, DK), vv = view(lv, n, HKV, DV);
    attn_tensor vdout = view(ldout, n, HQ, DV), vout = view(lout, n, HQ, DV);
    attn_tensor vdq = view(ldq, n, HQ, DK), vdk = view(ldk, n, HKV, DK), vdv = view(ldv, n, HKV, DV);
    const int64_t lse_shape[3] = {B, HQ, n};
    attn_tensor vlse = attn_tensor_contiguous(llse, ATTN_DTYPE_F32, 3, lse_shape);
    attn_ring_shard(&layout, rank, 1, &gq, &vq, NULL);
    attn_ring_shard(&layout, rank, 1, &gk, &vk, NULL);
    attn_ring_shard(&layout, rank, 1, &gv, &vv, NULL);
    attn_ring_shard(&layout, rank, 1, &gdout, &vdout, NULL);

    /* The oracle's LSE rows of this rank, [B][Hq][n]. */
    double local_lse_expected[B * HQ * T];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < HQ; ++h)
            for (int64_t a = 0; a < n; ++a)
                local_lse_expected[(b * HQ + h) * n + a] = lse[(b * HQ + h) * T + positions[a]];

    static const attn_options zero_options = {0};
    static const attn_execution zero_execution = {0};
    const struct { const char *name; const attn_options *o; const attn_execution *e; } variants[] = {
        {"options = {0}, execution = {0}", &zero_options, &zero_execution},
        {"options = NULL, execution = NULL", NULL, NULL},
    };
    for (size_t w = 0; w < sizeof variants / sizeof variants[0]; ++w) {
        const char *layout_name = attn_ring_layout_name(kind);
        for (int64_t x = 0; x < B * n * HQ * DV; ++x) lout[x] = NAN;
        attn_status status = attn_ring_forward(MPI_COMM_WORLD, &vq, &vk, &vv, variants[w].o,
                                               &layout, &vout, &vlse, NULL, variants[w].e, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "ring forward, %s, %s, rank %d", layout_name,
                     variants[w].name, rank);
        double lse_error = 0.0;
        for (int64_t x = 0; x < B * HQ * n; ++x) {
            const double e = fabs(llse[x] - local_lse_expected[x]) / (1.0 + fabs(local_lse_expected[x]));
            if (!(e <= lse_error)) lse_error = e;
        }
        const double out_error = rows_error(lout, out, positions, n, HQ, DV);
        CHECK(out_error <= 1e-5 && lse_error <= 1e-5,
              "ring forward, %s, %s, rank %d: plain attention (O %.3g, LSE %.3g)", layout_name,
              variants[w].name, rank, out_error, lse_error);

        for (int64_t x = 0; x < B * n * HQ * DK; ++x) ldq[x] = NAN;
        status = attn_ring_backward(MPI_COMM_WORLD, &vq, &vk, &vv, &vout, &vlse, &vdout,
                                    variants[w].o, &layout, &vdq, &vdk, &vdv, NULL, variants[w].e,
                                    &error);
        CHECK_STATUS(status, ATTN_OK, &error, "ring backward, %s, %s, rank %d", layout_name,
                     variants[w].name, rank);
        const double dq_error = rows_error(ldq, dq, positions, n, HQ, DK);
        const double dk_error = rows_error(ldk, dk, positions, n, HKV, DK);
        const double dv_error = rows_error(ldv, dv, positions, n, HKV, DV);
        CHECK(dq_error <= 1e-5 && dk_error <= 1e-5 && dv_error <= 1e-5,
              "ring backward, %s, %s, rank %d: plain gradients (dQ %.3g, dK %.3g, dV %.3g)",
              layout_name, variants[w].name, rank, dq_error, dk_error, dv_error);
    }
    free(positions), free(lq), free(lk), free(lv), free(ldout), free(lout), free(llse);
    free(ldq), free(ldk), free(ldv);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, rank_count = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rank_count);
    test_rng rng;
    test_rng_seed(&rng, 4242); /* the same global tensors on every rank */
    test_fill_normal(&rng, q, B * T * HQ * DK, 1.0f);
    test_fill_normal(&rng, k, B * T * HKV * DK, 1.0f);
    test_fill_normal(&rng, v, B * T * HKV * DV, 1.0f);
    test_fill_normal(&rng, dout, B * T * HQ * DV, 1.0f);
    oracle();
    const attn_ring_layout_kind kinds[] = {ATTN_RING_LAYOUT_CONTIGUOUS, ATTN_RING_LAYOUT_ZIGZAG,
                                           ATTN_RING_LAYOUT_STRIPED};
    for (size_t n = 0; n < sizeof kinds / sizeof kinds[0]; ++n)
        if (kinds[n] != ATTN_RING_LAYOUT_ZIGZAG || T >= 2 * rank_count)
            run_layout(kinds[n], rank, rank_count);
    return mpi_test_finish(rank, rank_count);
}
