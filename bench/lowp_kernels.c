/*
 * lowp_kernels.c — micro-benchmark of the forward tile kernels: S = Q·Kᵀ and O += P·V on one
 * tile held in L1/L2: the fp32 kernels of the AUTO registry (kernels/registry.h) against the
 * bf16 tiles (kernels/lowp.h) of every registry this CPU runs (generic, AVX512-BF16, AMX),
 * and the other steps of a forward tile. One thread; every kernel is timed in the same run, best of `repeats` rounds of
 * ~50 ms each, interleaved so that a loaded machine slows all of them alike.
 *
 * Run: attn-bench lowp-kernels [rows keys dim repeats [cpu]]  (default 64 256 128 7; cpu:
 * time by the thread's CPU time, not the wall clock)
 * Prints GFLOP/s (2·rows·keys·dim flops per call) of Q·K^T and P·V, and where one tile step's
 * time goes (score, softmax step, rescale, rounding of P, P·V) for bf16 widened to fp32 and
 * for bf16 tiles, with the packing cost of one key tile (paid once per head).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "core/internal.h"
#include "kernels/registry.h"

/* Wall clock, or this thread's CPU time (argument 5 = "cpu": on a shared machine it counts
 * only the time the thread ran). */
static clockid_t bench_clock = CLOCK_MONOTONIC;
static double now(void) {
    struct timespec t;
    clock_gettime(bench_clock, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct setup {
    int rows, keys, dim;
    const attn_forward_kernels *fp32;
    const attn_lowp_convert *convert;
    const char *fp32_name;
    const attn_lowp_kernels *bf16;
    float *queries, *packed_keys, *packed_values, *scores, *accumulator;
    uint16_t *queries16, *packed_keys16, *packed_values16;
    float *k, *v, *staging, *row_max, *row_sum, *rescale;
    uint16_t *k16, *v16;
} setup;

enum { KERNEL_COUNT = 10 };
static const char *const kernel_names[KERNEL_COUNT] = {
    "Q·K^T fp32", "Q·K^T bf16 tiles", "P·V fp32", "P·V bf16 tiles", "softmax step",
    "rescale O rows", "P rounded to bf16", "pack K+V fp32", "pack K+V bf16 -> fp32",
    "pack K+V bf16 tiles"};

static void run(const setup *s, int which) {
    switch (which) {
    case 0:
        s->fp32->score_tile(s->rows, s->keys, s->dim, s->queries, s->dim, s->packed_keys,
                            s->scores, s->keys);
        break;
    case 1:
        s->bf16->score_tile(s->rows, s->keys, s->dim, s->queries16, attn_lowp_query_stride(s->dim),
                            s->packed_keys16, s->scores, s->keys);
        break;
    case 2:
        s->fp32->accumulate_values(s->rows, s->keys, s->dim, s->scores, s->keys, s->packed_values,
                                   s->accumulator, s->dim);
        break;
    case 3:
        s->bf16->accumulate_values(s->rows, s->keys, s->dim, s->scores, s->keys,
                                   s->packed_values16, s->accumulator, s->dim);
        break;
    case 4:
        s->fp32->softmax_step(s->rows, s->keys, s->scores, s->keys, 1.0f, 0.0f, ATTN_DTYPE_F32,
                              s->row_max, s->row_sum, s->rescale);
        break;
    case 5:
        s->fp32->scale_rows(s->rows, s->dim, s->rescale, s->accumulator, s->dim);
        break;
    case 6:
        s->convert->round_rows(ATTN_DTYPE_BF16, s->rows, s->keys, s->scores, s->keys);
        break;
    case 7:
        s->fp32->pack_keys(s->keys, s->dim, s->k, s->dim, 1, s->packed_keys);
        s->fp32->pack_values(s->keys, s->dim, s->v, s->dim, 1, s->packed_values);
        break;
    case 8:
        s->convert->bf16_to_f32_rows(s->keys, s->dim, s->k16, s->dim, 1, s->staging, s->dim);
        s->fp32->pack_keys(s->keys, s->dim, s->staging, s->dim, 1, s->packed_keys);
        s->convert->bf16_to_f32_rows(s->keys, s->dim, s->v16, s->dim, 1, s->staging, s->dim);
        s->fp32->pack_values(s->keys, s->dim, s->staging, s->dim, 1, s->packed_values);
        break;
    default:
        s->bf16->pack_keys(s->keys, s->dim, s->k16, s->dim, 1, s->packed_keys16);
        s->bf16->pack_values(s->keys, s->dim, s->v16, s->dim, 1, s->packed_values16);
        break;
    }
}

/* Calls per second of kernel `which`, one round of about `seconds`. */
static double round_rate(const setup *s, int which, double seconds) {
    long calls = 0;
    const double start = now();
    double elapsed;
    do {
        for (int i = 0; i < 8; ++i) run(s, which);
        calls += 8;
        elapsed = now() - start;
    } while (elapsed < seconds);
    return calls / elapsed;
}

int bench_lowp_kernels(int argc, char **argv) {
    setup s;
    memset(&s, 0, sizeof s);
    s.rows = 64, s.keys = 256, s.dim = 128;
    int repeats = 7;
    if (argc >= 4) { s.rows = atoi(argv[1]); s.keys = atoi(argv[2]); s.dim = atoi(argv[3]); }
    if (argc >= 5) repeats = atoi(argv[4]);
    if (argc >= 6 && strcmp(argv[5], "cpu") == 0) bench_clock = CLOCK_THREAD_CPUTIME_ID;
    if (argc == 2 || argc == 3 || argc > 6 || s.rows < 1 || s.keys < 1 || s.dim < 1 ||
        repeats < 1 || (argc == 6 && strcmp(argv[5], "cpu") != 0)) {
        fprintf(stderr, "usage: attn-bench lowp-kernels [rows keys dim [repeats [cpu]]] (each >= 1)\n");
        return 2;
    }
    /* The bf16 tiles of every registry this CPU runs, and the fp32 kernels of AUTO's. */
    const attn_lowp_kernels *bf16_tables[3];
    int bf16_count = 0;
    const attn_kernel_choice choices[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX512_BF16, ATTN_KERNEL_AMX};
    for (int c = 0; c < 3; ++c) {
        const attn_kernels *kernels = NULL;
        if (attn_kernels_select(choices[c], &kernels, NULL) == ATTN_OK)
            bf16_tables[bf16_count++] = &kernels->bf16;
    }
    const attn_kernels *automatic = NULL;
    if (attn_kernels_select(ATTN_KERNEL_AUTO, &automatic, NULL) != ATTN_OK) return 1;
    s.fp32 = &automatic->forward;
    s.convert = &automatic->convert;
    s.fp32_name = automatic->name;
    const int rows = s.rows, keys = s.keys, dim = s.dim, qs = attn_lowp_query_stride(dim);
    float *k = malloc(sizeof(float) * keys * dim), *v = malloc(sizeof(float) * keys * dim);
    uint16_t *k16 = malloc(2 * (size_t)keys * dim), *v16 = malloc(2 * (size_t)keys * dim);
    s.queries = attn_aligned_alloc(sizeof(float) * rows * dim);
    s.queries16 = attn_aligned_alloc(2 * (size_t)rows * qs);
    memset(s.queries16, 0, 2 * (size_t)rows * qs);
    srand(1);
    for (int i = 0; i < rows * dim; ++i) {
        s.queries[i] = (float)rand() / RAND_MAX - 0.5f;
        s.queries16[(i / dim) * qs + i % dim] = attn_lowp_bf16_round(s.queries[i]);
    }
    for (int i = 0; i < keys * dim; ++i) {
        k[i] = (float)rand() / RAND_MAX - 0.5f;
        v[i] = (float)rand() / RAND_MAX - 0.5f;
        k16[i] = attn_lowp_bf16_round(k[i]);
        v16[i] = attn_lowp_bf16_round(v[i]);
    }
    s.packed_keys = attn_aligned_alloc(sizeof(float) * s.fp32->packed_keys_floats(keys, dim));
    s.packed_values = attn_aligned_alloc(sizeof(float) * s.fp32->packed_values_floats(keys, dim));
    s.packed_keys16 = attn_aligned_alloc(attn_lowp_packed_keys_bytes(keys, dim));
    s.packed_values16 = attn_aligned_alloc(attn_lowp_packed_values_bytes(keys, dim));
    s.scores = attn_aligned_alloc(sizeof(float) * rows * keys);
    s.accumulator = attn_aligned_alloc(sizeof(float) * rows * dim);
    s.fp32->pack_keys(keys, dim, k, dim, 1, s.packed_keys);
    s.fp32->pack_values(keys, dim, v, dim, 1, s.packed_values);
    attn_lowp_generic_pack_keys(keys, dim, k16, dim, 1, s.packed_keys16); /* one layout for all */
    attn_lowp_generic_pack_values(keys, dim, v16, dim, 1, s.packed_values16);
    for (int i = 0; i < rows * keys; ++i) s.scores[i] = 1.0f / keys;
    memset(s.accumulator, 0, sizeof(float) * rows * dim);
    s.k = k, s.v = v, s.k16 = k16, s.v16 = v16;
    s.staging = attn_aligned_alloc(sizeof(float) * keys * dim);
    s.row_max = calloc((size_t)rows, sizeof(float));
    s.row_sum = calloc((size_t)rows, sizeof(float));
    s.rescale = calloc((size_t)rows, sizeof(float));

    const double flops = 2.0 * rows * keys * dim;
    printf("tile: %d rows x %d keys, D = %d; one thread; best of %d rounds\n", rows, keys, dim,
           repeats);
    for (int t = 0; t < bf16_count; ++t) {
        s.bf16 = bf16_tables[t];
        double best[KERNEL_COUNT] = {0};
        for (int w = 0; w < KERNEL_COUNT; ++w) round_rate(&s, w, 0.05); /* warm-up */
        for (int round = 0; round < repeats; ++round)
            for (int w = 0; w < KERNEL_COUNT; ++w) {
                const double rate = round_rate(&s, w, 0.03);
                if (rate > best[w]) best[w] = rate;
            }
        printf("bf16 tiles: %s (fp32 kernels: %s)\n", s.bf16->name, s.fp32_name);
        printf("  GFLOP/s  Q·K^T fp32 %7.1f  bf16 %7.1f (ratio %.2f)   P·V fp32 %7.1f  bf16 %7.1f "
               "(ratio %.2f)\n",
               best[0] * flops * 1e-9, best[1] * flops * 1e-9, best[1] / best[0],
               best[2] * flops * 1e-9, best[3] * flops * 1e-9, best[3] / best[2]);
        printf("  microseconds per call:");
        for (int w = 0; w < KERNEL_COUNT; ++w)
            printf("%s %s %.2f", w ? "," : "", kernel_names[w], 1e6 / best[w]);
        const double converted = 1 / best[0] + 1 / best[2] + 1 / best[4] + 1 / best[5] + 1 / best[6];
        const double tiles = 1 / best[1] + 1 / best[3] + 1 / best[4] + 1 / best[5];
        printf("\n  one tile step: bf16 widened to fp32 %.2f us (Q·K^T %.0f%%, P·V %.0f%%, softmax "
               "%.0f%%, rescale %.0f%%, P rounding %.0f%%); on bf16 tiles %.2f us (Q·K^T %.0f%%, "
               "P·V %.0f%%, softmax %.0f%%, rescale %.0f%%); packing per key tile %.2f / %.2f us\n",
               1e6 * converted, 100 / best[0] / converted, 100 / best[2] / converted,
               100 / best[4] / converted, 100 / best[5] / converted, 100 / best[6] / converted,
               1e6 * tiles, 100 / best[1] / tiles, 100 / best[3] / tiles, 100 / best[4] / tiles,
               100 / best[5] / tiles, 1e6 / best[8], 1e6 / best[9]);
    }
    return 0;
}
