/*
 * bench_clock.h — the clocks `attn-bench` can time with (--clock). On a quiet machine the
 * wall clock is the truth. On a shared one (other processes on the same cores) wall time
 * includes the time this process waited for a core; the CPU clock counts only the time its
 * threads ran (CLOCK_PROCESS_CPUTIME_ID, divided by the thread count), so the FMA peak and
 * the attention runs are both measured per running thread-second and their ratio stays
 * meaningful. Idle OpenMP threads that spin still count, so load imbalance is not hidden.
 */
#ifndef ATTN_BENCH_CLOCK_H
#define ATTN_BENCH_CLOCK_H

typedef enum bench_clock { BENCH_CLOCK_WALL = 0, BENCH_CLOCK_CPU = 1 } bench_clock;

/* Seconds on `clock`: wall time, or process CPU time divided by `threads`. */
double bench_clock_seconds(bench_clock clock, int threads);

/* One thread's share of a peak measurement: `iterations` steps of independent chains started
 * from `seed`, returning a value derived from every chain (so no step can be dropped). */
typedef float (*bench_chain_function)(long iterations, float seed);

/* GFLOP/s of `run` on all `threads` threads (flops_per_iteration per thread and iteration),
 * timed on `clock`: a ≈ 0.3 s warm-up from first_iterations, a calibration to ≈ 0.1 s per
 * run, the best of five runs (peak.c). */
double bench_best_gflops(bench_chain_function run, double flops_per_iteration,
                         long first_iterations, int threads, bench_clock clock);

/* The fp32 FMA peak (GFLOP/s, all `threads` threads) timed on `clock` (peak.c). */
double bench_measure_fma_peak(int threads, bench_clock clock);

/* The bf16 / fp16 peaks (GFLOP/s, all `threads` threads, peak_bf16.c): VDPBF16PS on zmm
 * chains, AMX TDPBF16PS and AMX-FP16 TDPFP16PS on 4 accumulator tiles; 0 where the CPU, OS
 * or build lacks them. */
double bench_measure_bf16_peak(int threads, bench_clock clock);
double bench_measure_amx_peak(int threads, bench_clock clock);
double bench_measure_amx_fp16_peak(int threads, bench_clock clock);

#endif /* ATTN_BENCH_CLOCK_H */
