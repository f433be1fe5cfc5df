/*
 * test_ring_lowp.c — run under mpiexec with P processes (ctest runs P = 1, 2, 3, 4): ring
 * attention forward and backward on BF16 and F16 tensors. K/V blocks travel as 16-bit
 * elements and each rank widens them (and its q, dout) exactly before computing in fp32, so
 * O, dQ, dK, dV must be bitwise the fp32 ring's results on the same (widened) inputs rounded
 * once to the type (the backward's D from the fp32 O, as the single-process backward takes
 * it), and LSE bitwise the fp32 ring's LSE (docs/precision.md). Causal and not, every layout,
 * GQA, windows, T not a multiple of P. Peaked attention (large logits, where D from the
 * rounded O would swamp dS = P (dP - D)): the 16-bit ring backward against the single-process
 * 16-bit backward. Also: a k of another dtype than q is refused on every rank.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "attn_mpi.h"
#include "mpi_test_finish.h"
#include "test_support.h"

typedef struct ring_case {
    int64_t B, T, Hq, Hkv, Dk, Dv;
    int causal;
    int64_t window_left;
    attn_ring_layout_kind layout;
} ring_case;

static const ring_case cases[] = {
    {2, 24, 2, 2, 8, 8, 1, -1, ATTN_RING_LAYOUT_ZIGZAG},
    {1, 37, 4, 2, 8, 12, 1, -1, ATTN_RING_LAYOUT_CONTIGUOUS},
    {2, 13, 2, 1, 16, 8, 0, -1, ATTN_RING_LAYOUT_STRIPED},
    {1, 41, 2, 2, 8, 8, 1, 6, ATTN_RING_LAYOUT_ZIGZAG},
    {1, 300, 2, 1, 32, 32, 1, -1, ATTN_RING_LAYOUT_STRIPED},
};

static int rank, rank_count;

static void run_case(size_t index, const ring_case *c, attn_dtype dtype) {
    const char *type = dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
    char label[128];
    snprintf(label, sizeof label, "case %zu %s (%s, T=%lld, P=%d, rank %d)", index, type,
             attn_ring_layout_name(c->layout), (long long)c->T, rank_count, rank);
    attn_options options = attn_options_default();
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.causal = c->causal;
    options.window = 1;
    options.window_left = c->window_left;
    options.window_right = -1;

    test_rng rng;
    test_rng_seed(&rng, 5000 + index);
    test_tensor global[3] = {test_tensor_new(c->B, c->T, c->Hq, c->Dk, TEST_LAYOUT_BTHD),
                             test_tensor_new(c->B, c->T, c->Hkv, c->Dk, TEST_LAYOUT_BTHD),
                             test_tensor_new(c->B, c->T, c->Hkv, c->Dv, TEST_LAYOUT_BTHD)};
    for (int i = 0; i < 3; ++i) test_tensor_fill_normal(&global[i], &rng, 1.0f);
    attn_ring_layout layout = {c->layout, c->T, rank_count};
    int64_t n = 0;
    attn_ring_layout_local_length(&layout, rank, &n, NULL);
    test_tensor local[3];
    test_half_tensor half[3];
    attn_error error = {0};
    for (int i = 0; i < 3; ++i) {
        const attn_tensor *g = &global[i].view;
        local[i] = test_tensor_new(g->shape[0], n, g->shape[2], g->shape[3], TEST_LAYOUT_PADDED);
        attn_ring_shard(&layout, rank, 1, g, &local[i].view, NULL);
        half[i] = test_half_round(&local[i], dtype); /* local[i] now holds the widened values */
    }
    test_tensor out32 = test_tensor_new(c->B, n, c->Hq, c->Dv, TEST_LAYOUT_BTHD);
    test_tensor out_shape = test_tensor_new(c->B, n, c->Hq, c->Dv, TEST_LAYOUT_PADDED);
    test_half_tensor out16 = test_half_like(&out_shape, dtype, 0x7bcd);
    const int64_t lse_shape[3] = {c->B, c->Hq, n};
    test_tensor lse32 = test_tensor_new_shape(3, lse_shape), lse16 = test_tensor_new_shape(3, lse_shape);
    attn_status status = attn_ring_forward(MPI_COMM_WORLD, &local[0].view, &local[1].view,
                                           &local[2].view, &options, &layout, &out32.view,
                                           &lse32.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: fp32 ring on the widened inputs", label);
    status = attn_ring_forward(MPI_COMM_WORLD, &half[0].view, &half[1].view, &half[2].view,
                               &options, &layout, &out16.view, &lse16.view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: 16-bit ring", label);
    int differences = 0;
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t i = 0; i < n; ++i)
            for (int64_t h = 0; h < c->Hq; ++h)
                for (int64_t e = 0; e < c->Dv; ++e)
                    differences += test_half_bits4(&out16.view, b, i, h, e) !=
                                   test_half_from_float(test_get4(&out32.view, b, i, h, e), dtype);
    CHECK(differences == 0, "%s: O = the fp32 ring's O rounded once (%d differ)", label, differences);
    CHECK(memcmp(lse16.allocation, lse32.allocation, (size_t)lse32.allocation_floats * sizeof(float)) == 0,
          "%s: LSE bitwise the fp32 ring's", label);

    /* The backward from the 16-bit O and LSE, against the fp32 ring backward on the widened
     * values given the fp32 ring's O: the 16-bit ring takes D = rowsum(dO * O) from O
     * computed again in fp32, not from the rounded O. */
    test_tensor dout = test_tensor_new(c->B, n, c->Hq, c->Dv, TEST_LAYOUT_PADDED);
    test_tensor_fill_normal(&dout, &rng, 1.0f);
    test_half_tensor dout16 = test_half_round(&dout, dtype);
    test_tensor grads32[3] = {test_tensor_new(c->B, n, c->Hq, c->Dk, TEST_LAYOUT_BTHD),
                              test_tensor_new(c->B, n, c->Hkv, c->Dk, TEST_LAYOUT_BTHD),
                              test_tensor_new(c->B, n, c->Hkv, c->Dv, TEST_LAYOUT_BTHD)};
    test_half_tensor grads16[3];
    for (int g = 0; g < 3; ++g) grads16[g] = test_half_like(&grads32[g], dtype, 0x7bcd);
    status = attn_ring_backward(MPI_COMM_WORLD, &local[0].view, &local[1].view, &local[2].view,
                                &out32.view, &lse16.view, &dout.view, &options, &layout,
                                &grads32[0].view, &grads32[1].view, &grads32[2].view, NULL, NULL,
                                &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: fp32 ring backward on the widened values", label);
    status = attn_ring_backward(MPI_COMM_WORLD, &half[0].view, &half[1].view, &half[2].view,
                                &out16.view, &lse16.view, &dout16.view, &options, &layout,
                                &grads16[0].view, &grads16[1].view, &grads16[2].view, NULL, NULL,
                                &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: 16-bit ring backward", label);
    differences = 0;
    for (int g = 0; g < 3; ++g)
        for (int64_t n32 = 0; n32 < grads32[g].allocation_floats; ++n32)
            differences += grads16[g].allocation[n32] !=
                           test_half_from_float(grads32[g].allocation[n32], dtype);
    CHECK(differences == 0, "%s: dQ, dK, dV = the fp32 ring's rounded once (%d differ)", label,
          differences);
    for (int g = 0; g < 3; ++g) {
        test_tensor_free(&grads32[g]);
        free(grads16[g].allocation);
    }
    test_tensor_free(&dout);
    free(dout16.allocation);

    /* k of another dtype: refused on every rank with the same message */
    attn_tensor wrong_k = half[1].view;
    wrong_k.dtype = dtype == ATTN_DTYPE_BF16 ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
    status = attn_ring_forward(MPI_COMM_WORLD, &half[0].view, &wrong_k, &half[2].view, &options,
                               &layout, &out16.view, NULL, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "%s: k of another dtype", label);
    CHECK(strstr(error.message, "k.dtype") != NULL, "%s: message names k.dtype: %s", label,
          error.message);

    for (int i = 0; i < 3; ++i) {
        test_tensor_free(&global[i]);
        test_tensor_free(&local[i]);
        free(half[i].allocation);
    }
    free(out16.allocation);
    test_tensor_free(&out32), test_tensor_free(&out_shape);
    test_tensor_free(&lse32), test_tensor_free(&lse16);
}

/* A global fp32 tensor holding 16-bit values (from test_half_get4 of `half`). */
static test_tensor widen_global(const attn_tensor *half) {
    test_tensor wide = test_tensor_new(half->shape[0], half->shape[1], half->shape[2],
                                       half->shape[3], TEST_LAYOUT_BTHD);
    int64_t n = 0;
    for (int64_t b = 0; b < half->shape[0]; ++b)
        for (int64_t i = 0; i < half->shape[1]; ++i)
            for (int64_t h = 0; h < half->shape[2]; ++h)
                for (int64_t e = 0; e < half->shape[3]; ++e)
                    wide.allocation[n++] = (float)test_half_get4(half, b, i, h, e);
    return wide;
}

/* A 16-bit gradient against the single-process one (fp32 view of its 16-bit values): within
 * one rounding step of the type at the largest gradient. */
static void check_within_step(const attn_tensor *got, const attn_tensor *reference, attn_dtype dtype,
                              const char *label, const char *name) {
    double largest = 0.0, worst = 0.0;
    for (int64_t i = 0; i < reference->shape[1]; ++i)
        for (int64_t h = 0; h < reference->shape[2]; ++h)
            for (int64_t e = 0; e < reference->shape[3]; ++e) {
                const double want = test_get4(reference, 0, i, h, e);
                const double difference = fabs(test_half_get4(got, 0, i, h, e) - want);
                if (fabs(want) > largest) largest = fabs(want);
                if (difference > worst) worst = difference;
            }
    const double step = largest * (dtype == ATTN_DTYPE_BF16 ? 0x1p-8 : 0x1p-11);
    CHECK(worst <= step, "%s: %s within one 16-bit step of the single-process backward "
          "(largest difference %.3g, step %.3g)", label, name, worst, step);
}

/* Peaked attention (scale 1, D = 64: logits of standard deviation 8): the 16-bit ring
 * backward against attn_backward on the whole 16-bit problem. Both take D from the fp32 O
 * (the ring sums dK / dV over blocks in another order, so a few values differ by a rounding);
 * D from the rounded O puts errors of up to three 16-bit steps into dQ and dK here. */
static void run_peaked_case(attn_dtype dtype, attn_ring_layout_kind kind) {
    enum { T = 40, HQ = 2, HKV = 1, DIM = 64 };
    char label[128];
    snprintf(label, sizeof label, "peaked %s (%s, P=%d, rank %d)",
             dtype == ATTN_DTYPE_BF16 ? "bf16" : "fp16", attn_ring_layout_name(kind), rank_count,
             rank);
    attn_options options = attn_options_default();
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.causal = 1;
    options.custom_scale = 1, options.scale = 1.0f;
    test_rng rng;
    test_rng_seed(&rng, 7100);
    /* q, k, v, dout, out, dq, dk, dv: global 16-bit tensors, and their fp32 widenings */
    const int64_t heads[8] = {HQ, HKV, HKV, HQ, HQ, HQ, HKV, HKV};
    test_tensor wide[8];
    test_half_tensor half[8];
    for (int t = 0; t < 8; ++t) {
        wide[t] = test_tensor_new(1, T, heads[t], DIM, TEST_LAYOUT_BTHD);
        if (t < 4) test_tensor_fill_normal(&wide[t], &rng, 1.0f);
        half[t] = test_half_round(&wide[t], dtype); /* wide[t] holds the rounded values */
    }
    const int64_t lse_shape[3] = {1, HQ, T};
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    attn_error error = {0};
    CHECK_STATUS(attn_forward(&half[0].view, &half[1].view, &half[2].view, &options, &half[4].view,
                              &lse.view, NULL, &error),
                 ATTN_OK, &error, "%s: single-process forward", label);
    CHECK_STATUS(attn_backward(&half[0].view, &half[1].view, &half[2].view, &half[4].view,
                               &lse.view, &half[3].view, &options, &half[5].view, &half[6].view,
                               &half[7].view, NULL, NULL, &error),
                 ATTN_OK, &error, "%s: single-process backward", label);
    for (int t = 4; t < 8; ++t) {
        test_tensor_free(&wide[t]);
        wide[t] = widen_global(&half[t].view);
    }
    attn_ring_layout layout = {kind, T, rank_count};
    int64_t n = 0;
    attn_ring_layout_local_length(&layout, rank, &n, NULL);
    /* the rank's shards, rounded back to 16 bits (exact) */
    test_tensor local[8];
    test_half_tensor local16[8];
    for (int t = 0; t < 8; ++t) {
        local[t] = test_tensor_new(1, n, heads[t], DIM, TEST_LAYOUT_BTHD);
        attn_ring_shard(&layout, rank, 1, &wide[t].view, &local[t].view, NULL);
        local16[t] = test_half_round(&local[t], dtype);
    }
    const int64_t local_lse_shape[3] = {1, HQ, n};
    test_tensor local_lse = test_tensor_new_shape(3, local_lse_shape);
    attn_ring_shard(&layout, rank, 2, &lse.view, &local_lse.view, NULL);
    test_half_tensor grads[3];
    for (int g = 0; g < 3; ++g) grads[g] = test_half_like(&local[5 + g], dtype, 0x7bcd);
    attn_status status = attn_ring_backward(
        MPI_COMM_WORLD, &local16[0].view, &local16[1].view, &local16[2].view, &local16[4].view,
        &local_lse.view, &local16[3].view, &options, &layout, &grads[0].view, &grads[1].view,
        &grads[2].view, NULL, NULL, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "%s: 16-bit ring backward", label);
    static const char *const names[3] = {"dQ", "dK", "dV"};
    for (int g = 0; g < 3; ++g) check_within_step(&grads[g].view, &local[5 + g].view, dtype, label,
                                                  names[g]);
    for (int t = 0; t < 8; ++t) {
        test_tensor_free(&wide[t]);
        test_tensor_free(&local[t]);
        free(half[t].allocation);
        free(local16[t].allocation);
    }
    for (int g = 0; g < 3; ++g) free(grads[g].allocation);
    test_tensor_free(&lse);
    test_tensor_free(&local_lse);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rank_count);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (cases[i].T >= rank_count) {
            run_case(i, &cases[i], ATTN_DTYPE_BF16);
            run_case(i, &cases[i], ATTN_DTYPE_F16);
        }
    for (int layout = 0; layout < 2; ++layout) {
        const attn_ring_layout_kind kind = layout ? ATTN_RING_LAYOUT_ZIGZAG : ATTN_RING_LAYOUT_CONTIGUOUS;
        run_peaked_case(ATTN_DTYPE_BF16, kind);
        run_peaked_case(ATTN_DTYPE_F16, kind);
    }
    return mpi_test_finish(rank, rank_count);
}
