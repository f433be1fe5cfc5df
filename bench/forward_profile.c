/*
 * forward_profile.c — `attn-bench --profile`: where one forward tile step's time goes, per
 * phase, in cycles per pair, for the head dims of the grid.
 *
 * One thread runs the registry's slots (kernels/registry.h) on a tile the size the forward
 * uses without a window (64 query rows x 256 keys, Dk = Dv = D, in L1/L2): S = Q·Kᵀ, the
 * online-softmax step, the rescale of every accumulator row, O += P·V, and the packing of one
 * K/V tile (paid once per head and thread, so shared by every query row). Each phase is timed
 * by the thread's CPU time between two runs of an FMA-chain loop (12 independent chains, 2
 * FMAs per cycle on every x86-64 core with FMA), so that the clock's swings cancel: cycles =
 * phase time / chain time per cycle. The FMA bound of a pair is D/8 cycles (4·D flops at 32 per
 * cycle). Needs AVX2 and FMA (the chains are ymm); elsewhere it prints why it cannot run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench.h"
#include "core/internal.h"
#include "kernels/registry.h"

enum { PROFILE_ROWS = 64, PROFILE_KEYS = 256, PROFILE_PHASES = 5, PROFILE_ROUNDS = 9 };

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if defined(__x86_64__)
static volatile float profile_sink;

/* Seconds per cycle: 12 independent FMA chains, 6 cycles per iteration at 2 FMAs a cycle. */
__attribute__((target("avx2,fma"), noinline)) static double seconds_per_cycle(void) {
    const long iterations = 300000;
    __m256 chain[12];
    for (int c = 0; c < 12; ++c) chain[c] = _mm256_set1_ps((float)c);
    const __m256 multiplier = _mm256_set1_ps(0.999999f), addend = _mm256_set1_ps(1e-6f);
    const double start = thread_seconds();
    for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 12
        for (int c = 0; c < 12; ++c) chain[c] = _mm256_fmadd_ps(chain[c], multiplier, addend);
    const double seconds = thread_seconds() - start;
    for (int c = 1; c < 12; ++c) chain[0] = _mm256_add_ps(chain[0], chain[c]);
    profile_sink = _mm256_cvtss_f32(chain[0]);
    return seconds / (6.0 * (double)iterations);
}

/* The buffers of one tile step at head dim `dim`. */
typedef struct profile_tile {
    const attn_forward_kernels *kernels;
    int dim;
    float *queries, *scores, *accumulator, *keys, *values, *source, *row_max, *row_sum, *factor;
} profile_tile;

static void run_phase(profile_tile *t, int phase) {
    const attn_forward_kernels *k = t->kernels;
    const int rows = PROFILE_ROWS, keys = PROFILE_KEYS, dim = t->dim;
    if (phase == 0) k->score_tile(rows, keys, dim, t->queries, dim, t->keys, t->scores, keys);
    if (phase == 1) {
        for (int r = 0; r < rows; ++r) t->row_max[r] = 64.0f; /* scores stay finite */
        k->softmax_step(rows, keys, t->scores, keys, 0.125f, 0.0f, ATTN_DTYPE_F32, t->row_max, t->row_sum,
                         t->factor);
    }
    if (phase == 2) {
        for (int r = 0; r < rows; ++r) t->factor[r] = 0.5f; /* every row rescaled */
        k->scale_rows(rows, dim, t->factor, t->accumulator, dim);
        for (int r = 0; r < rows; ++r) t->row_sum[r] = 1.0f;
    }
    if (phase == 3) k->accumulate_values(rows, keys, dim, t->scores, keys, t->values, t->accumulator, dim);
    if (phase == 4) {
        k->pack_keys(keys, dim, t->source, dim, 1, t->keys);
        k->pack_values(keys, dim, t->source, dim, 1, t->values);
    }
}

/* Median cycles of one call of `phase` over PROFILE_ROUNDS rounds. */
static double phase_cycles(profile_tile *t, int phase) {
    double cycles[PROFILE_ROUNDS];
    for (int round = 0; round < PROFILE_ROUNDS; ++round) {
        const double before = seconds_per_cycle();
        long calls = 1;
        double seconds;
        for (;;) { /* the clock is read around a batch: reading it costs a system call */
            const double start = thread_seconds();
            for (long n = 0; n < calls; ++n) run_phase(t, phase);
            seconds = thread_seconds() - start;
            if (seconds > 0.004) break;
            calls *= 2;
        }
        cycles[round] = seconds / (double)calls / (0.5 * (before + seconds_per_cycle()));
    }
    for (int i = 1; i < PROFILE_ROUNDS; ++i) /* insertion sort for the median */
        for (int j = i; j > 0 && cycles[j] < cycles[j - 1]; --j) {
            const double swap = cycles[j];
            cycles[j] = cycles[j - 1], cycles[j - 1] = swap;
        }
    return cycles[PROFILE_ROUNDS / 2];
}

/* Prints one table row for head dim `dim`; 0 when out of memory. */
static int profile_dim(const attn_kernels *registry, int dim) {
    profile_tile t = {.kernels = &registry->forward, .dim = dim};
    const size_t rows = PROFILE_ROWS, keys = PROFILE_KEYS, d = (size_t)dim;
    float **buffers[] = {&t.queries, &t.scores, &t.accumulator, &t.keys, &t.values, &t.source,
                         &t.row_max, &t.row_sum, &t.factor};
    const size_t floats[] = {rows * d, rows * keys, rows * d,
                             registry->forward.packed_keys_floats((int)keys, dim),
                             registry->forward.packed_values_floats((int)keys, dim), keys * d,
                             rows, rows, rows};
    int ok = 1;
    for (int b = 0; b < 9; ++b) {
        *buffers[b] = attn_aligned_alloc((floats[b] + 16) * sizeof(float));
        if (*buffers[b] == NULL) ok = 0;
        else
            for (size_t n = 0; n < floats[b] + 16; ++n) (*buffers[b])[n] = (float)(n % 97) / 97.0f;
    }
    if (ok) {
        double cycles[PROFILE_PHASES], step = 0.0;
        run_phase(&t, 4);
        for (int phase = 0; phase < PROFILE_PHASES; ++phase) cycles[phase] = phase_cycles(&t, phase);
        const double pairs = (double)(rows * keys);
        for (int phase = 0; phase < 4; ++phase) step += cycles[phase] / pairs;
        printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f%% | %.0f |\n", dim,
               cycles[0] / pairs, cycles[1] / pairs, cycles[2] / pairs, cycles[3] / pairs, step,
               dim / 8.0, 100.0 * dim / 8.0 / step, cycles[4]);
    }
    for (int b = 0; b < 9; ++b) attn_aligned_free(*buffers[b]);
    return ok;
}

int bench_forward_profile(attn_kernel_choice kernel, const int64_t *head_dims, int count) {
    const attn_kernels *registry = NULL;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        attn_kernels_select(kernel, &registry, NULL) != ATTN_OK) {
        printf("\n--profile: needs AVX2 and FMA (its cycle calibration) and the --kernel\n");
        return 1;
    }
    printf("\nOne forward tile step (%d query rows x %d keys, %s kernels, one thread), cycles per "
           "pair against FMA chains timed in turns; rescale: every row's factor not 1; packing: "
           "cycles per K/V tile, shared by all query rows of a head:\n\n",
           PROFILE_ROWS, PROFILE_KEYS, registry->name);
    printf("| D | S = Q·Kᵀ | softmax | rescale | P·V | step | FMA bound | bound / step | "
           "packing |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < count; ++i)
        if (!profile_dim(registry, (int)head_dims[i])) return 1;
    return 0;
}
#else
int bench_forward_profile(attn_kernel_choice kernel, const int64_t *head_dims, int count) {
    (void)kernel, (void)head_dims, (void)count;
    printf("\n--profile: needs an x86-64 CPU with AVX2 and FMA (its cycle calibration)\n");
    return 1;
}
#endif
