/*
 * lowp_kernels.c — micro-benchmark of the forward tile kernels: S = Q·Kᵀ and O += P·V on one
 * tile held in L1/L2: the fp32 kernels of the AUTO registry (kernels/registry.h) against the
 * bf16 tiles (kernels/lowp.h) of every registry this CPU runs (generic, AVX512-BF16, AMX). One thread; every kernel is timed in the same run, best of `repeats` rounds of
 * ~50 ms each, interleaved so that a loaded machine slows all of them alike.
 *
 * Build (from the repository root, after building libattn into build/):
 *   cc -O2 -Iinclude -Isrc bench/lowp_kernels.c build/libattn.a -fopenmp -lm -lpthread \
 *      -o build/lowp_kernels
 *   build/lowp_kernels [rows keys dim repeats]      (default 64 256 128 7)
 * Prints GFLOP/s (2·rows·keys·dim flops per call) per kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "kernels/registry.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct setup {
    int rows, keys, dim;
    const attn_forward_kernels *fp32;
    const char *fp32_name;
    const attn_lowp_kernels *bf16;
    float *queries, *packed_keys, *packed_values, *scores, *accumulator;
    uint16_t *queries16, *packed_keys16, *packed_values16;
} setup;

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
    default:
        s->bf16->accumulate_values(s->rows, s->keys, s->dim, s->scores, s->keys,
                                   s->packed_values16, s->accumulator, s->dim);
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

int main(int argc, char **argv) {
    setup s;
    memset(&s, 0, sizeof s);
    s.rows = 64, s.keys = 256, s.dim = 128;
    int repeats = 7;
    if (argc >= 4) { s.rows = atoi(argv[1]); s.keys = atoi(argv[2]); s.dim = atoi(argv[3]); }
    if (argc >= 5) repeats = atoi(argv[4]);
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

    const double flops = 2.0 * rows * keys * dim;
    printf("tile: %d rows x %d keys, D = %d; one thread; best of %d rounds; GFLOP/s\n", rows, keys,
           dim, repeats);
    for (int t = 0; t < bf16_count; ++t) {
        s.bf16 = bf16_tables[t];
        double best[4] = {0, 0, 0, 0};
        const double seconds = 0.05;
        for (int w = 0; w < 4; ++w) round_rate(&s, w, 0.1); /* warm-up */
        for (int round = 0; round < repeats; ++round)
            for (int w = 0; w < 4; ++w) {
                const double rate = round_rate(&s, w, seconds);
                if (rate > best[w]) best[w] = rate;
            }
        printf("  Q·K^T  fp32 %-8s %8.1f   bf16 %-10s %8.1f   ratio %.2f\n", s.fp32_name,
               best[0] * flops * 1e-9, s.bf16->name, best[1] * flops * 1e-9, best[1] / best[0]);
        printf("  P·V    fp32 %-8s %8.1f   bf16 %-10s %8.1f   ratio %.2f\n", s.fp32_name,
               best[2] * flops * 1e-9, s.bf16->name, best[3] * flops * 1e-9, best[3] / best[2]);
    }
    return 0;
}
