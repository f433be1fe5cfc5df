/*
 * test_ring_equivalence.c — run under mpiexec with P processes (ctest runs P = 1, 2, 3, 4):
 * ring attention forward and backward equal the single-process engine (attn_forward and
 * attn_backward on the whole sequence, which every rank computes itself from the same seed)
 * within 1e-5, for a table of configurations: causal and not, every layout, T not a multiple
 * of P or 2P, GQA, windows, ALiBi and soft-capping. Also: each rank's computed-pair count
 * equals a brute-force count of its allowed pairs; zigzag and striped balance it across ranks
 * (contiguous does not: the negative control); the step schedule is src = (r - s) mod P; and
 * the fully masked blocks of the contiguous causal layout are skipped.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "attn_mpi.h"
#include "mpi_test_finish.h"
#include "test_support.h"

typedef struct ring_case {
    int64_t B, T, Hq, Hkv, Dk, Dv;
    int causal;
    int64_t window_left, window_right;
    attn_ring_layout_kind layout;
    int alibi;
    float softcap;
    int sinks; /* attention sinks on every head but the second (-inf there) */
    int64_t sink_tokens; /* keys at positions below it escape the window (StreamingLLM) */
} ring_case;

static const ring_case cases[] = {
    /* B  T   Hq Hkv Dk Dv causal  wl  wr  layout               alibi softcap sinks tokens */
    {2, 24, 2, 2, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_CONTIGUOUS, 0, 0, 0, 0},
    {2, 24, 2, 2, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 0, 0},
    {2, 24, 2, 2, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 0, 0},
    {1, 37, 4, 2, 8, 12, 1, -1, -1, ATTN_RING_LAYOUT_CONTIGUOUS, 0, 0, 0, 0}, /* GQA, Dk != Dv */
    {1, 37, 4, 2, 8, 12, 1, -1, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 0, 0},
    {1, 37, 4, 2, 8, 12, 1, -1, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 0, 0},
    {2, 13, 2, 1, 16, 8, 0, -1, -1, ATTN_RING_LAYOUT_CONTIGUOUS, 0, 0, 0, 0}, /* MQA, non-causal */
    {2, 13, 2, 1, 16, 8, 0, -1, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 0, 0},
    {2, 13, 2, 1, 16, 8, 0, -1, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 0, 0},
    {1, 41, 2, 2, 8, 8, 1, 6, -1, ATTN_RING_LAYOUT_CONTIGUOUS, 0, 0, 0, 0},  /* sliding window */
    {1, 41, 2, 2, 8, 8, 1, 6, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 0, 0},
    {1, 41, 2, 2, 8, 8, 1, 6, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 0, 0},
    {1, 30, 2, 1, 8, 8, 0, 4, 3, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 0, 0},       /* two-sided window */
    {1, 29, 4, 2, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_ZIGZAG, 1, 0, 0, 0},     /* ALiBi */
    {1, 29, 2, 2, 8, 8, 0, -1, -1, ATTN_RING_LAYOUT_STRIPED, 0, 5.0f, 0, 0}, /* soft-capping */
    /* attention sinks: folded into the last merge of each row */
    {1, 37, 4, 2, 8, 12, 1, -1, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 1, 0},
    {2, 24, 2, 2, 8, 8, 1, 6, -1, ATTN_RING_LAYOUT_CONTIGUOUS, 0, 0, 1, 0},
    {2, 13, 2, 1, 16, 8, 0, -1, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 1, 0},
    /* sink tokens: the first keys kept by the window, with and without learned sinks */
    {1, 41, 2, 2, 8, 8, 1, 6, -1, ATTN_RING_LAYOUT_CONTIGUOUS, 0, 0, 0, 3},
    {1, 41, 2, 2, 8, 8, 1, 6, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 1, 3},
    {1, 41, 2, 2, 8, 8, 1, 6, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 0, 9},
    /* balance cases: T a multiple of 2P for every P in 1..4 (and of P for striped) */
    {1, 96, 2, 2, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 0, 0},
    {1, 96, 2, 2, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 0, 0},
    {1, 96, 2, 2, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_CONTIGUOUS, 0, 0, 0, 0},
    /* long enough for several row slabs per block: transfers complete during the compute */
    {1, 1031, 2, 1, 8, 8, 1, -1, -1, ATTN_RING_LAYOUT_ZIGZAG, 0, 0, 0, 0},
    {1, 1031, 2, 1, 8, 8, 0, -1, -1, ATTN_RING_LAYOUT_STRIPED, 0, 0, 0, 0},
};

static int rank, rank_count;

/* Brute force: allowed (query position p, key position t) pairs for this rank's queries. */
static int64_t count_allowed_pairs(const ring_case *c, const int64_t *positions, int64_t n) {
    int64_t count = 0;
    for (int64_t a = 0; a < n; ++a)
        for (int64_t t = 0; t < c->T; ++t) {
            int64_t p = positions[a];
            int allowed = (!c->causal || t <= p) &&
                          (((c->window_left < 0 || t >= p - c->window_left) &&
                            (c->window_right < 0 || t <= p + c->window_right)) ||
                           t < c->sink_tokens);
            count += allowed;
        }
    return count;
}

static void run_case(size_t index, const ring_case *c) {
    const char *layout_name = attn_ring_layout_name(c->layout);
    char label[160];
    snprintf(label, sizeof label,
             "case %zu (%s, T=%lld, causal=%d, window=(%lld,%lld), sinks=%d, P=%d, rank %d)",
             index, layout_name, (long long)c->T, c->causal, (long long)c->window_left,
             (long long)c->window_right, c->sinks, rank_count, rank);
    attn_error error;
    attn_options options = attn_options_default();
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.causal = c->causal;
    options.window = 1;
    options.window_left = c->window_left;
    options.window_right = c->window_right;
    options.alibi = c->alibi;
    options.softcap = c->softcap;
    static const float sink_logits[4] = {0.8f, -INFINITY, 2.5f, -1.0f};
    if (c->sinks) options.sinks = sink_logits;
    options.sink_tokens = c->sink_tokens;

    /* The whole problem, identical on every rank, and the single-process results. */
    test_rng rng;
    test_rng_seed(&rng, 1000 + index);
    test_tensor q = test_tensor_new(c->B, c->T, c->Hq, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(c->B, c->T, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(c->B, c->T, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&dout, &rng, 1.0f);
    test_tensor out = test_tensor_new(c->B, c->T, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    int64_t lse_shape[3] = {c->B, c->Hq, c->T};
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_tensor dq = test_tensor_new(c->B, c->T, c->Hq, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor dk = test_tensor_new(c->B, c->T, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor dv = test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    attn_status status = attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: single-process forward", label);
    status = attn_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &dout.view, &options,
                           &dq.view, &dk.view, &dv.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: single-process backward", label);

    /* This rank's share (padded strides, to exercise strided local views). */
    attn_ring_layout layout = {c->layout, c->T, rank_count};
    int64_t n = 0;
    attn_ring_layout_local_length(&layout, rank, &n, NULL);
    int64_t *positions = malloc((size_t)n * sizeof *positions);
    attn_ring_layout_positions(&layout, rank, positions, NULL);
    test_tensor tensors[2][9];
    test_tensor *global[9] = {&q, &k, &v, &dout, &out, &lse, &dq, &dk, &dv};
    for (int i = 0; i < 9; ++i) {
        const attn_tensor *g = &global[i]->view;
        for (int copy = 0; copy < 2; ++copy) {
            if (g->rank == 3) {
                int64_t shape[3] = {g->shape[0], g->shape[1], n};
                tensors[copy][i] = test_tensor_new_shape(3, shape);
            } else {
                tensors[copy][i] = test_tensor_new(g->shape[0], n, g->shape[2], g->shape[3],
                                                   TEST_LAYOUT_PADDED);
            }
        }
        attn_ring_shard(&layout, rank, g->rank == 3 ? 2 : 1, g, &tensors[0][i].view, NULL);
        test_tensor_fill_all(&tensors[1][i], NAN); /* ring outputs start as NaN */
    }
    /* [0][i]: shard of the single-process tensor i; [1][i]: what the ring writes */
    enum { Q, K, V, DOUT, OUT, LSE, DQ, DK, DV };
    int sources[64];
    attn_ring_stats stats;
    memset(&stats, 0, sizeof stats);
    stats.step_sources = sources;
    status = attn_ring_forward(MPI_COMM_WORLD, &tensors[0][Q].view, &tensors[0][K].view,
                               &tensors[0][V].view, &options, &layout, &tensors[1][OUT].view,
                               &tensors[1][LSE].view, &stats, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: ring forward", label);
    double out_error = test_max_relative_error(&tensors[1][OUT].view, &tensors[0][OUT].view);
    double lse_error = test_max_relative_error(&tensors[1][LSE].view, &tensors[0][LSE].view);
    CHECK(out_error <= 1e-5 && lse_error <= 1e-5, "%s: forward O error %.2e, LSE error %.2e (<= 1e-5)",
          label, out_error, lse_error);
    int schedule_ok = 1;
    for (int s = 0; s < rank_count; ++s) schedule_ok &= sources[s] == ((rank - s) % rank_count + rank_count) % rank_count;
    CHECK(schedule_ok, "%s: forward step sources are (r - s) mod P", label);
    int64_t expected_pairs = count_allowed_pairs(c, positions, n) * c->B * c->Hq;
    CHECK(stats.computed_pairs == expected_pairs, "%s: computed pairs %lld == brute force %lld",
          label, (long long)stats.computed_pairs, (long long)expected_pairs);
    CHECK(stats.blocks_computed + stats.blocks_skipped == rank_count,
          "%s: %d computed + %d skipped blocks == P", label, stats.blocks_computed, stats.blocks_skipped);
    if (c->layout == ATTN_RING_LAYOUT_CONTIGUOUS && c->causal && c->window_left < 0)
        CHECK(stats.blocks_skipped == rank_count - 1 - rank,
              "%s: contiguous causal skips the %d blocks from later ranks (skipped %d)", label,
              rank_count - 1 - rank, stats.blocks_skipped);

    /* Balance: the per-rank pair counts across the ring. */
    int64_t pair_counts[64];
    MPI_Allgather(&stats.computed_pairs, 1, MPI_INT64_T, pair_counts, 1, MPI_INT64_T, MPI_COMM_WORLD);
    int64_t most = pair_counts[0], fewest = pair_counts[0];
    for (int r = 1; r < rank_count; ++r) {
        if (pair_counts[r] > most) most = pair_counts[r];
        if (pair_counts[r] < fewest) fewest = pair_counts[r];
    }
    bool balance_case = c->causal && c->window_left < 0 && c->T % (2 * rank_count) == 0;
    if (balance_case && c->layout == ATTN_RING_LAYOUT_ZIGZAG)
        CHECK(most == fewest, "%s: zigzag pair counts equal across ranks (%lld .. %lld)", label,
              (long long)fewest, (long long)most);
    if (balance_case && c->layout == ATTN_RING_LAYOUT_STRIPED) /* equal up to the diagonal */
        CHECK(most - fewest <= (rank_count - 1) * n * c->B * c->Hq,
              "%s: striped pair counts equal up to the diagonals (%lld .. %lld)", label,
              (long long)fewest, (long long)most);
    if (balance_case && c->layout == ATTN_RING_LAYOUT_CONTIGUOUS && rank_count > 1)
        CHECK(most >= 2 * fewest, "%s: contiguous is unbalanced (%lld .. %lld)", label,
              (long long)fewest, (long long)most);

    /* Backward from the ring's own O and LSE. */
    memset(sources, -1, sizeof sources);
    status = attn_ring_backward(MPI_COMM_WORLD, &tensors[0][Q].view, &tensors[0][K].view,
                                &tensors[0][V].view, &tensors[1][OUT].view, &tensors[1][LSE].view,
                                &tensors[0][DOUT].view, &options, &layout, &tensors[1][DQ].view,
                                &tensors[1][DK].view, &tensors[1][DV].view, &stats, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: ring backward", label);
    double dq_error = test_max_relative_error(&tensors[1][DQ].view, &tensors[0][DQ].view);
    double dk_error = test_max_relative_error(&tensors[1][DK].view, &tensors[0][DK].view);
    double dv_error = test_max_relative_error(&tensors[1][DV].view, &tensors[0][DV].view);
    CHECK(dq_error <= 1e-5 && dk_error <= 1e-5 && dv_error <= 1e-5,
          "%s: backward dQ %.2e, dK %.2e, dV %.2e (<= 1e-5)", label, dq_error, dk_error, dv_error);
    schedule_ok = 1;
    for (int s = 0; s < rank_count; ++s) schedule_ok &= sources[s] == ((rank - s) % rank_count + rank_count) % rank_count;
    CHECK(schedule_ok, "%s: backward step sources are (r - s) mod P", label);
    CHECK(stats.computed_pairs == expected_pairs, "%s: backward computed pairs %lld == %lld", label,
          (long long)stats.computed_pairs, (long long)expected_pairs);

    /* Deterministic: a second backward gives bitwise the same gradients. */
    test_tensor again = test_tensor_new(c->B, n, c->Hkv, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor dq_again = test_tensor_new(c->B, n, c->Hq, c->Dk, TEST_LAYOUT_BTHD);
    test_tensor dv_again = test_tensor_new(c->B, n, c->Hkv, c->Dv, TEST_LAYOUT_BTHD);
    status = attn_ring_backward(MPI_COMM_WORLD, &tensors[0][Q].view, &tensors[0][K].view,
                                &tensors[0][V].view, &tensors[1][OUT].view, &tensors[1][LSE].view,
                                &tensors[0][DOUT].view, &options, &layout, &dq_again.view,
                                &again.view, &dv_again.view, NULL, NULL, &error);
    CHECK(status == ATTN_OK && test_bitwise_equal(&again.view, &tensors[1][DK].view) &&
              test_bitwise_equal(&dq_again.view, &tensors[1][DQ].view),
          "%s: backward repeats bitwise", label);
    test_tensor_free(&again);
    test_tensor_free(&dq_again);
    test_tensor_free(&dv_again);

    for (int i = 0; i < 9; ++i) {
        test_tensor_free(&tensors[0][i]);
        test_tensor_free(&tensors[1][i]);
    }
    for (int i = 0; i < 9; ++i) test_tensor_free(global[i]);
    free(positions);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rank_count);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (cases[i].T >= rank_count) run_case(i, &cases[i]);
    return mpi_test_finish(rank, rank_count);
}
