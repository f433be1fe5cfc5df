/*
 * test_ring_errors.c — run under mpiexec with P processes (ctest runs P = 1, 2, 3, 4): when
 * one rank's input is bad, EVERY rank returns the same error status and message, naming the
 * rank and the argument, instead of hanging (a hang fails the test by its ctest timeout).
 * Covers errors found before the compute (shapes, NULL, a rank whose sizes differ from rank
 * 0's, a layout that disagrees with the communicator, unsupported options, dropout) and during
 * it (a memory limit that only one rank sets), outputs aliasing inputs (out = q, dk = k on one
 * rank), for the forward and the backward. After each failure a correct call must still
 * succeed: nothing is left in flight.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "attn_mpi.h"
#include "test_support.h"

static int rank, rank_count;
enum { B = 1, T = 11, HQ = 2, HKV = 1, DK = 8, DV = 8 };

/* Local tensors of one rank for the contiguous layout of T tokens. */
typedef struct local_problem {
    attn_ring_layout layout;
    int64_t n;
    test_tensor q, k, v, out, lse, dout, dq, dk, dv;
} local_problem;

static void problem_new(local_problem *p) {
    p->layout = (attn_ring_layout){ATTN_RING_LAYOUT_CONTIGUOUS, T, rank_count};
    attn_ring_layout_local_length(&p->layout, rank, &p->n, NULL);
    test_rng rng;
    test_rng_seed(&rng, 77 + rank);
    p->q = test_tensor_new(B, p->n, HQ, DK, TEST_LAYOUT_BTHD);
    p->k = test_tensor_new(B, p->n, HKV, DK, TEST_LAYOUT_BTHD);
    p->v = test_tensor_new(B, p->n, HKV, DV, TEST_LAYOUT_BTHD);
    p->dout = test_tensor_new(B, p->n, HQ, DV, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&p->q, &rng, 1.0f);
    test_tensor_fill_normal(&p->k, &rng, 1.0f);
    test_tensor_fill_normal(&p->v, &rng, 1.0f);
    test_tensor_fill_normal(&p->dout, &rng, 1.0f);
    p->out = test_tensor_new(B, p->n, HQ, DV, TEST_LAYOUT_BTHD);
    int64_t lse_shape[3] = {B, HQ, p->n};
    p->lse = test_tensor_new_shape(3, lse_shape);
    p->dq = test_tensor_new(B, p->n, HQ, DK, TEST_LAYOUT_BTHD);
    p->dk = test_tensor_new(B, p->n, HKV, DK, TEST_LAYOUT_BTHD);
    p->dv = test_tensor_new(B, p->n, HKV, DV, TEST_LAYOUT_BTHD);
}

static void problem_free(local_problem *p) {
    test_tensor *all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) test_tensor_free(all[i]);
}

static attn_options causal_options(void) {
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    return options;
}

/* Every rank got `expected`, and the same message, which contains each of the fragments. */
static void check_everyone(attn_status status, const attn_error *error, attn_status expected,
                           const char *what, const char *fragment1, const char *fragment2) {
    int mine = status == expected, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    CHECK_STATUS(status, expected, error, "%s (rank %d)", what, rank);
    CHECK(all == 1, "%s: every rank returned %s", what, attn_status_name(expected));
    if (status == ATTN_OK) return;
    CHECK(strstr(error->message, fragment1) != NULL && strstr(error->message, fragment2) != NULL,
          "%s: message names '%s' and '%s': %s", what, fragment1, fragment2, error->message);
    char root_message[ATTN_ERROR_MESSAGE_CAPACITY];
    memcpy(root_message, error->message, sizeof root_message);
    MPI_Bcast(root_message, sizeof root_message, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK(strcmp(root_message, error->message) == 0, "%s: rank %d has rank 0's message", what, rank);
}

/* A correct forward and backward after a failure: nothing was left in flight. */
static void check_recovers(local_problem *p, const char *after) {
    attn_options options = causal_options();
    attn_error error;
    attn_status status = attn_ring_forward(MPI_COMM_WORLD, &p->q.view, &p->k.view, &p->v.view,
                                           &options, &p->layout, &p->out.view, &p->lse.view, NULL,
                                           NULL, &error);
    if (status == ATTN_OK)
        status = attn_ring_backward(MPI_COMM_WORLD, &p->q.view, &p->k.view, &p->v.view,
                                    &p->out.view, &p->lse.view, &p->dout.view, &options,
                                    &p->layout, &p->dq.view, &p->dk.view, &p->dv.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "a correct call after %s (rank %d)", after, rank);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rank_count);
    const int bad = rank_count - 1; /* the rank that misbehaves */
    char bad_rank[32];
    snprintf(bad_rank, sizeof bad_rank, "rank %d:", bad);
    local_problem p;
    problem_new(&p);
    attn_options options = causal_options();
    attn_error error;
    attn_status status;

    /* 1. The last rank's K has the wrong head dim. */
    test_tensor wrong_k = test_tensor_new(B, p.n, HKV, DK + 1, TEST_LAYOUT_BTHD);
    status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, rank == bad ? &wrong_k.view : &p.k.view,
                               &p.v.view, &options, &p.layout, &p.out.view, &p.lse.view, NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_SHAPE_MISMATCH, "forward, bad k on the last rank",
                   bad_rank, "k.shape[3]");
    check_recovers(&p, "a bad k");

    /* 2. The last rank passes q = NULL to the backward. */
    status = attn_ring_backward(MPI_COMM_WORLD, rank == bad ? NULL : &p.q.view, &p.k.view, &p.v.view,
                                &p.out.view, &p.lse.view, &p.dout.view, &options, &p.layout,
                                &p.dq.view, &p.dk.view, &p.dv.view, NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_NULL_ARGUMENT, "backward, NULL q on the last rank",
                   bad_rank, "q is NULL");

    /* 3. The last rank holds one token too many for the layout. */
    test_tensor long_q = test_tensor_new(B, p.n + 1, HQ, DK, TEST_LAYOUT_BTHD);
    status = attn_ring_forward(MPI_COMM_WORLD, rank == bad ? &long_q.view : &p.q.view, &p.k.view,
                               &p.v.view, &options, &p.layout, &p.out.view, &p.lse.view, NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_SHAPE_MISMATCH, "forward, wrong local length",
                   bad_rank, "q.shape[1]");

    /* 4. Locally consistent, but the last rank disagrees with rank 0 on the options. */
    if (rank_count > 1) {
        attn_options other = options;
        if (rank == bad) other.window = 1, other.window_left = 3;
        status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &other,
                                   &p.layout, &p.out.view, &p.lse.view, NULL, NULL, &error);
        check_everyone(status, &error, ATTN_ERROR_SHAPE_MISMATCH, "options differ from rank 0's",
                       bad_rank, "options.window_left = 3 differs from rank 0's -1");
    }

    /* 5. A layout for another number of ranks (every rank). */
    attn_ring_layout wrong_layout = {ATTN_RING_LAYOUT_CONTIGUOUS, T, rank_count + 1};
    status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &options,
                               &wrong_layout, &p.out.view, &p.lse.view, NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_INVALID_ARGUMENT, "layout for P+1 ranks", "rank 0:",
                   "layout.rank_count");

    /* 6. An option the ring cannot shard. */
    int32_t lengths[1] = {3};
    attn_options unsupported = options;
    if (rank == bad) unsupported.key_lengths = lengths;
    status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &unsupported,
                               &p.layout, &p.out.view, &p.lse.view, NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_UNSUPPORTED, "key_lengths on the last rank", bad_rank,
                   "options.key_lengths");

    /* 7. A failure during the compute, on one rank only: a 1-byte memory limit (an execution
     *    setting, not part of the agreed options) makes that rank's first attn_forward / attn_backward fail while
     *    the others compute and exchange blocks. */
    attn_execution limited = attn_execution_default();
    if (rank == bad) limited.memory_limit_bytes = 1;
    status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &options,
                               &p.layout, &p.out.view, &p.lse.view, NULL, &limited, &error);
    check_everyone(status, &error, ATTN_ERROR_MEMORY_LIMIT, "forward, memory limit on one rank",
                   bad_rank, "memory_limit_bytes");
    check_recovers(&p, "a compute failure");
    status = attn_ring_backward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &p.out.view,
                                &p.lse.view, &p.dout.view, &options, &p.layout, &p.dq.view,
                                &p.dk.view, &p.dv.view, NULL, &limited, &error);
    check_everyone(status, &error, ATTN_ERROR_MEMORY_LIMIT, "backward, memory limit on one rank",
                   bad_rank, "memory_limit_bytes");
    check_recovers(&p, "a backward compute failure");

    /* 8. Causal without a named alignment (every rank). */
    attn_options unaligned = options;
    unaligned.alignment = ATTN_ALIGN_UNSET;
    status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &unaligned,
                               &p.layout, &p.out.view, &p.lse.view, NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_INVALID_ARGUMENT, "causal without alignment",
                   "rank 0:", "options.alignment");

    /* 8b. Dropout (every rank): the ring applies none. */
    attn_options dropout = options;
    dropout.dropout_p = 0.1f;
    status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &dropout,
                               &p.layout, &p.out.view, &p.lse.view, NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_INVALID_ARGUMENT, "dropout", "rank 0:",
                   "options.dropout_p");

    /* 9. Outputs aliasing inputs on the last rank (out = q; dk = k): refused before the ring
     *    starts, q and k unchanged. */
    const size_t q_bytes = (size_t)p.q.allocation_floats * sizeof(float);
    const size_t k_bytes = (size_t)p.k.allocation_floats * sizeof(float);
    float *q_before = malloc(q_bytes), *k_before = malloc(k_bytes);
    memcpy(q_before, p.q.allocation, q_bytes);
    memcpy(k_before, p.k.allocation, k_bytes);
    status = attn_ring_forward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &options,
                               &p.layout, rank == bad ? &p.q.view : &p.out.view, &p.lse.view,
                               NULL, NULL, &error);
    check_everyone(status, &error, ATTN_ERROR_INVALID_ARGUMENT, "forward, out = q on the last rank",
                   bad_rank, ") and q (bytes [");
    status = attn_ring_backward(MPI_COMM_WORLD, &p.q.view, &p.k.view, &p.v.view, &p.out.view,
                                &p.lse.view, &p.dout.view, &options, &p.layout, &p.dq.view,
                                rank == bad ? &p.k.view : &p.dk.view, &p.dv.view, NULL, NULL,
                                &error);
    check_everyone(status, &error, ATTN_ERROR_INVALID_ARGUMENT, "backward, dk = k on the last rank",
                   "dk (bytes [", ") and k (bytes [");
    CHECK(memcmp(q_before, p.q.allocation, q_bytes) == 0 &&
              memcmp(k_before, p.k.allocation, k_bytes) == 0,
          "aliased outputs: q and k unchanged (rank %d)", rank);
    free(q_before), free(k_before);
    check_recovers(&p, "aliased outputs");

    test_tensor_free(&wrong_k);
    test_tensor_free(&long_q);
    problem_free(&p);
    int code = test_finish();
    MPI_Finalize();
    return code;
}
