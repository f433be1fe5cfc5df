/*
 * test_ring_layout_shard.c — the ring token layouts without MPI: local lengths and positions
 * against an independent definition written out per layout (explicit chunk lists), every
 * global token owned by exactly one rank, shard then gather reproducing the global tensor
 * (with strided views and LSE-shaped rank-3 tensors), and the errors.
 */
#include <stdlib.h>
#include <string.h>

#include "attn_ring.h"
#include "test_support.h"

/* Independent oracle: which rank owns global token t, and its index there. Written directly
 * from the definitions in attn.h (chunk c of n tokens in k chunks is [start(c), start(c+1))
 * with start(c) = c*floor(n/k) + min(c, n mod k)). */
static int64_t oracle_start(int64_t n, int64_t k, int64_t c) {
    int64_t start = 0;
    for (int64_t i = 0; i < c; ++i) start += n / k + (i < n % k ? 1 : 0);
    return start;
}

static void oracle_owner(attn_ring_layout_kind kind, int64_t T, int P, int64_t t, int *rank,
                         int64_t *index) {
    if (kind == ATTN_RING_LAYOUT_STRIPED) {
        *rank = (int)(t % P);
        *index = t / P;
        return;
    }
    int chunks = kind == ATTN_RING_LAYOUT_CONTIGUOUS ? P : 2 * P;
    int chunk = 0;
    while (t >= oracle_start(T, chunks, chunk + 1)) ++chunk;
    int64_t offset = t - oracle_start(T, chunks, chunk);
    if (kind == ATTN_RING_LAYOUT_CONTIGUOUS || chunk < P) {
        *rank = chunk;
        *index = offset;
    } else { /* late chunk 2P-1-r comes after the rank's early chunk r */
        *rank = 2 * P - 1 - chunk;
        *index = (oracle_start(T, chunks, *rank + 1) - oracle_start(T, chunks, *rank)) + offset;
    }
}

static void check_positions(attn_ring_layout_kind kind, int64_t T, int P) {
    attn_ring_layout layout = {kind, T, P};
    int64_t total = 0;
    int *seen = calloc((size_t)T, sizeof *seen);
    for (int r = 0; r < P; ++r) {
        int64_t n = -1;
        attn_error error;
        CHECK_STATUS(attn_ring_layout_local_length(&layout, r, &n, &error), ATTN_OK, &error,
                     "%s T=%lld P=%d r=%d length", attn_ring_layout_name(kind), (long long)T, P, r);
        CHECK(n >= 1, "%s T=%lld P=%d r=%d: %lld tokens (>= 1)", attn_ring_layout_name(kind),
              (long long)T, P, r, (long long)n);
        int64_t *positions = malloc((size_t)(n > 0 ? n : 1) * sizeof *positions);
        attn_ring_layout_positions(&layout, r, positions, &error);
        int ok = 1;
        for (int64_t a = 0; a < n; ++a) {
            int owner;
            int64_t index;
            oracle_owner(kind, T, P, positions[a], &owner, &index);
            if (owner != r || index != a || (a > 0 && positions[a] <= positions[a - 1])) ok = 0;
            if (positions[a] >= 0 && positions[a] < T) seen[positions[a]]++;
        }
        CHECK(ok, "%s T=%lld P=%d r=%d: positions match the oracle and increase",
              attn_ring_layout_name(kind), (long long)T, P, r);
        total += n;
        free(positions);
    }
    int each_once = total == T;
    for (int64_t t = 0; t < T; ++t) each_once &= seen[t] == 1;
    CHECK(each_once, "%s T=%lld P=%d: every token on exactly one rank",
          attn_ring_layout_name(kind), (long long)T, P);
    free(seen);
}

/* Shard a [B, T, H, D] tensor (with a reversed-T view) and an LSE [B, H, T] to every rank and
 * gather back into NaN-filled tensors: must reproduce the originals bitwise. */
static void check_roundtrip(attn_ring_layout_kind kind, int64_t T, int P, test_rng *rng) {
    attn_ring_layout layout = {kind, T, P};
    const int64_t B = 2, H = 3, D = 5;
    test_tensor global = test_tensor_new(B, T, H, D, TEST_LAYOUT_REVERSED_T);
    test_tensor_fill_normal(&global, rng, 1.0f);
    test_tensor rebuilt = test_tensor_new(B, T, H, D, TEST_LAYOUT_BHTD);
    test_tensor_fill_all(&rebuilt, NAN);
    int64_t lse_shape[3] = {B, H, T};
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    test_fill_normal(rng, lse.allocation, lse.allocation_floats, 1.0f);
    test_tensor lse_rebuilt = test_tensor_new_shape(3, lse_shape);
    test_tensor_fill_all(&lse_rebuilt, NAN);
    int ok = 1;
    for (int r = 0; r < P; ++r) {
        int64_t n = 0;
        attn_error error;
        attn_ring_layout_local_length(&layout, r, &n, NULL);
        int64_t *positions = malloc((size_t)n * sizeof *positions);
        attn_ring_layout_positions(&layout, r, positions, NULL);
        test_tensor local = test_tensor_new(B, n, H, D, TEST_LAYOUT_PADDED);
        int64_t local_lse_shape[3] = {B, H, n};
        test_tensor local_lse = test_tensor_new_shape(3, local_lse_shape);
        ok &= attn_ring_shard(&layout, r, 1, &global.view, &local.view, &error) == ATTN_OK;
        ok &= attn_ring_shard(&layout, r, 2, &lse.view, &local_lse.view, &error) == ATTN_OK;
        /* the local tensor holds exactly the rows of its positions */
        for (int64_t a = 0; a < n; ++a)
            ok &= test_get4(&local.view, 1, a, 2, 4) == test_get4(&global.view, 1, positions[a], 2, 4) &&
                  test_get3(&local_lse.view, 1, 2, a) == test_get3(&lse.view, 1, 2, positions[a]);
        ok &= attn_ring_gather(&layout, r, 1, &local.view, &rebuilt.view, &error) == ATTN_OK;
        ok &= attn_ring_gather(&layout, r, 2, &local_lse.view, &lse_rebuilt.view, &error) == ATTN_OK;
        test_tensor_free(&local);
        test_tensor_free(&local_lse);
        free(positions);
    }
    CHECK(ok, "%s T=%lld P=%d: shard picks the rows of the positions", attn_ring_layout_name(kind),
          (long long)T, P);
    CHECK(test_bitwise_equal(&rebuilt.view, &global.view) && test_bitwise_equal(&lse_rebuilt.view, &lse.view),
          "%s T=%lld P=%d: gather(shard(x)) == x bitwise", attn_ring_layout_name(kind),
          (long long)T, P);
    test_tensor_free(&global);
    test_tensor_free(&rebuilt);
    test_tensor_free(&lse);
    test_tensor_free(&lse_rebuilt);
}

static void check_errors(void) {
    attn_error error;
    int64_t n;
    attn_ring_layout too_short = {ATTN_RING_LAYOUT_ZIGZAG, 3, 4};
    CHECK_STATUS(attn_ring_layout_local_length(&too_short, 0, &n, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "T = 3 < P = 4");
    CHECK(strstr(error.message, "sequence_length = 3") != NULL, "message names T: %s", error.message);
    attn_ring_layout layout = {ATTN_RING_LAYOUT_STRIPED, 10, 3};
    CHECK_STATUS(attn_ring_layout_local_length(&layout, 3, &n, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "rank 3 of 3");
    CHECK(strstr(error.message, "rank = 3") != NULL, "message names the rank: %s", error.message);
    attn_ring_layout bad_kind = {(attn_ring_layout_kind)7, 10, 3};
    CHECK_STATUS(attn_ring_layout_local_length(&bad_kind, 0, &n, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "unknown layout kind");
    CHECK_STATUS(attn_ring_layout_local_length(NULL, 0, &n, &error), ATTN_ERROR_NULL_ARGUMENT,
                 &error, "NULL layout");
    test_tensor global = test_tensor_new(1, 10, 1, 2, TEST_LAYOUT_BTHD);
    test_tensor wrong = test_tensor_new(1, 3, 1, 2, TEST_LAYOUT_BTHD); /* rank 0 holds 4 */
    CHECK_STATUS(attn_ring_shard(&layout, 0, 1, &global.view, &wrong.view, &error),
                 ATTN_ERROR_SHAPE_MISMATCH, &error, "local tensor of the wrong length");
    CHECK(strstr(error.message, "local.shape[1] = 3") != NULL, "message: %s", error.message);
    CHECK_STATUS(attn_ring_shard(&layout, 0, 4, &global.view, &wrong.view, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "sequence_dim out of range");
    test_tensor_free(&global);
    test_tensor_free(&wrong);
}

int main(void) {
    static const attn_ring_layout_kind kinds[] = {ATTN_RING_LAYOUT_CONTIGUOUS, ATTN_RING_LAYOUT_ZIGZAG,
                                                  ATTN_RING_LAYOUT_STRIPED};
    static const int rank_counts[] = {1, 2, 3, 4, 8};
    static const int64_t lengths[] = {8, 9, 13, 16, 17, 31, 64};
    test_rng rng;
    test_rng_seed(&rng, 6);
    for (size_t k = 0; k < 3; ++k)
        for (size_t p = 0; p < sizeof rank_counts / sizeof rank_counts[0]; ++p)
            for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; ++t) {
                if (lengths[t] < rank_counts[p]) continue;
                check_positions(kinds[k], lengths[t], rank_counts[p]);
                check_roundtrip(kinds[k], lengths[t], rank_counts[p], &rng);
            }
    /* Zigzag when T < 2P: some late chunks are empty, every rank still has a token. */
    check_positions(ATTN_RING_LAYOUT_ZIGZAG, 5, 4);
    check_positions(ATTN_RING_LAYOUT_ZIGZAG, 4, 4);
    /* A worked example, by hand: zigzag T = 10, P = 2 -> chunks 3,3,2,2: rank 0 = {0,1,2,8,9},
     * rank 1 = {3,4,5,6,7}. */
    attn_ring_layout example = {ATTN_RING_LAYOUT_ZIGZAG, 10, 2};
    int64_t positions[5];
    attn_ring_layout_positions(&example, 0, positions, NULL);
    CHECK(positions[0] == 0 && positions[2] == 2 && positions[3] == 8 && positions[4] == 9,
          "zigzag T=10 P=2 rank 0 = {0,1,2,8,9}");
    attn_ring_layout_positions(&example, 1, positions, NULL);
    CHECK(positions[0] == 3 && positions[4] == 7, "zigzag T=10 P=2 rank 1 = {3..7}");
    check_errors();
    return test_finish();
}
