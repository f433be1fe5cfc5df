/*
 * peak.c — this machine's ceilings, measured in the calling process for benchmarks:
 * the fp32 FMA rate (GFLOP/s) and the memory read bandwidth (GB/s), on `threads` threads.
 *
 * FMA peak: every thread runs independent FMA chains (more than latency × pipes = 4 × 2
 * needs) on the widest vectors the CPU has (AVX-512 zmm, else AVX2 ymm, else scalar), chains
 * and operands in registers: 16 chains in the 32 zmm, 12 in the 16 ymm / xmm (16 chains and
 * the two operands there make the compiler keep chains on the stack, and the store-load
 * round trip in each chain halves the rate); best of five timed runs of ≈ 0.1 s after a 0.3 s warm-up and a
 * calibration run.
 * With BENCH_CLOCK_CPU (bench_clock.h) the runs are timed in process CPU time per thread.
 * Bandwidth: every thread sums its share of a 256 MiB buffer (far larger than the L3) with
 * vector loads; best of three passes after one that faults the pages in.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench_clock.h"
#include "bench.h"

#define CHAINS 16       /* zmm chains */
#define CHAINS_NARROW 12 /* ymm or scalar chains: they and the two operands fit 16 registers */

#if defined(__x86_64__)
__attribute__((target("avx512f,fma"))) static float fma_chains_avx512(long iterations, float seed) {
    __m512 chain[CHAINS];
    for (int c = 0; c < CHAINS; ++c) chain[c] = _mm512_set1_ps(seed + (float)c);
    const __m512 multiplier = _mm512_set1_ps(0.999999f), addend = _mm512_set1_ps(1e-6f);
    for (long i = 0; i < iterations; ++i)
        for (int c = 0; c < CHAINS; ++c) chain[c] = _mm512_fmadd_ps(chain[c], multiplier, addend);
    __m512 total = chain[0];
    for (int c = 1; c < CHAINS; ++c) total = _mm512_add_ps(total, chain[c]);
    return _mm512_reduce_add_ps(total);
}

__attribute__((target("avx2,fma"))) static float fma_chains_avx2(long iterations, float seed) {
    __m256 chain[CHAINS_NARROW];
    for (int c = 0; c < CHAINS_NARROW; ++c) chain[c] = _mm256_set1_ps(seed + (float)c);
    const __m256 multiplier = _mm256_set1_ps(0.999999f), addend = _mm256_set1_ps(1e-6f);
    for (long i = 0; i < iterations; ++i)
        for (int c = 0; c < CHAINS_NARROW; ++c) chain[c] = _mm256_fmadd_ps(chain[c], multiplier, addend);
    float lanes[8], total = 0.0f;
    for (int c = 1; c < CHAINS_NARROW; ++c) chain[0] = _mm256_add_ps(chain[0], chain[c]);
    _mm256_storeu_ps(lanes, chain[0]);
    for (int i = 0; i < 8; ++i) total += lanes[i];
    return total;
}
#endif

static float fma_chains_scalar(long iterations, float seed) {
    float chain[CHAINS_NARROW];
    for (int c = 0; c < CHAINS_NARROW; ++c) chain[c] = seed + (float)c;
    for (long i = 0; i < iterations; ++i)
        for (int c = 0; c < CHAINS_NARROW; ++c) chain[c] = chain[c] * 0.999999f + 1e-6f;
    float total = 0.0f;
    for (int c = 0; c < CHAINS_NARROW; ++c) total += chain[c];
    return total;
}

/* Lanes of the widest FMA this CPU runs (16, 8 or 1). */
static int fma_lanes(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 16;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
#endif
    return 1;
}

static volatile float chain_sink;

/* Seconds of the calling thread's own CPU time. */
static double thread_cpu_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* The CPU clock is the mean of the OpenMP team threads' own CPU clocks, read inside a
 * parallel region of `threads` threads: libgomp keeps that team's threads for the next
 * region of the same size, i.e. the threads attn then runs on. (The process CPU clock
 * would do, but it sees other threads' time only at scheduler ticks, 4 ms here.) */
double bench_clock_seconds(bench_clock clock, int threads) {
    if (clock == BENCH_CLOCK_WALL) return omp_get_wtime();
    if (threads <= 0) threads = omp_get_max_threads();
    double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += thread_cpu_seconds();
    return total / threads;
}

/* Seconds for every one of `threads` threads to run `iterations` steps of `run`'s chains:
 * wall time, or (BENCH_CLOCK_CPU) the mean over threads of each thread's own CPU time for its
 * chains, so time spent descheduled or waiting for a preempted sibling is not counted. */
static double time_chains(bench_chain_function run, int threads, long iterations,
                          bench_clock clock) {
    const double start = omp_get_wtime();
    double cpu_seconds = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : cpu_seconds)
    {
        const double thread_start = thread_cpu_seconds();
        const float result = run(iterations, (float)omp_get_thread_num());
        if (result == 12345.0f) chain_sink = result;
        cpu_seconds += thread_cpu_seconds() - thread_start;
    }
    return clock == BENCH_CLOCK_CPU ? cpu_seconds / threads : omp_get_wtime() - start;
}

/* Warm up for ≈ 0.3 s first: the first fraction of a second of a process sometimes runs at
 * well under half speed here (threads waking, clocks ramping), which used to make the
 * measured peak, and so every "% of peak", wrong by 2.5x. Then calibrate to ≈ 0.1 s per run
 * and keep the best of five. */
double bench_best_gflops(bench_chain_function run, double flops_per_iteration,
                         long first_iterations, int threads, bench_clock clock) {
    if (threads <= 0) threads = omp_get_max_threads();
    long iterations = first_iterations;
    for (double elapsed = 0.0; elapsed < 0.3;) {
        const double seconds = time_chains(run, threads, iterations, clock);
        elapsed += seconds;
        if (seconds > 0 && seconds < 0.05) iterations *= 2;
    }
    const double calibration = time_chains(run, threads, iterations, clock);
    if (calibration > 0) iterations = (long)(iterations * 0.1 / calibration) + 1;
    double best = 0.0;
    for (int r = 0; r < 5; ++r) {
        const double seconds = time_chains(run, threads, iterations, clock);
        const double flops = flops_per_iteration * (double)iterations * threads;
        if (seconds > 0 && flops / seconds > best) best = flops / seconds;
    }
    return best * 1e-9;
}

double bench_measure_fma_peak(int threads, bench_clock clock) {
    const int lanes = fma_lanes();
    bench_chain_function run = fma_chains_scalar;
#if defined(__x86_64__)
    if (lanes == 16) run = fma_chains_avx512;
    else if (lanes == 8) run = fma_chains_avx2;
#endif
    return bench_best_gflops(run, 2.0 * (lanes == 16 ? CHAINS : CHAINS_NARROW) * lanes, 200000,
                             threads, clock);
}

double bench_measure_fma_peak_gflops(int threads) {
    return bench_measure_fma_peak(threads, BENCH_CLOCK_WALL);
}


static volatile double bandwidth_sink;

/* The 256 MiB the read bandwidth is measured on: allocated and first-touched by the first
 * measurement, then kept for the process, so that a benchmark that measures the bandwidth
 * after every row (attn-bench serve, decode) pays the page faults once. */
static float *bandwidth_buffer;

double bench_measure_read_bandwidth_gbs(int threads) {
    if (threads <= 0) threads = omp_get_max_threads();
    const size_t bytes = (size_t)256 << 20;
    const size_t count = bytes / sizeof(float);
    const int fresh = bandwidth_buffer == NULL;
    if (fresh) bandwidth_buffer = malloc(bytes);
    float *buffer = bandwidth_buffer;
    if (!buffer) return 0.0;
    double best = 0.0;
    for (int pass = fresh ? 0 : 1; pass < 4; ++pass) {
        double total = 0.0;
        const double start = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            /* Each thread first-touches (pass 0, in the first measurement) and reads its share. */
            const int thread = omp_get_thread_num(), thread_count = omp_get_num_threads();
            const size_t first = count / thread_count * thread;
            const size_t last = thread == thread_count - 1 ? count : first + count / thread_count;
            if (pass == 0) {
                for (size_t i = first; i < last; ++i) buffer[i] = (float)(i & 7);
            } else {
                float partial[16] = {0};
                size_t i = first;
                for (; i + 16 <= last; i += 16)
                    for (int lane = 0; lane < 16; ++lane) partial[lane] += buffer[i + lane];
                for (; i < last; ++i) partial[0] += buffer[i];
                for (int lane = 0; lane < 16; ++lane) total += partial[lane];
            }
        }
        const double seconds = omp_get_wtime() - start;
        bandwidth_sink = total;
        if (pass > 0 && seconds > 0 && bytes / seconds > best) best = bytes / seconds;
    }
    return best * 1e-9;
}
