/*
 * bench.h — the `attn-bench` tool's internal interface: one function per subcommand (each in
 * its own file) and the machine ceilings the reports compare against (peak.c).
 *
 * A subcommand receives argv starting at its own name (argv[0] = "decode") and returns the
 * process exit code: 0 on success, 1 on a runtime error, 2 on a usage error. Errors are one
 * line on stderr naming the option and the bad value.
 */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H

#include <stdint.h>

#include "attn.h"

int bench_forward(int argc, char **argv);  /* cmd_forward.c: the forward (backward) grid, --peak */
int bench_decode(int argc, char **argv);   /* cmd_decode.c: decoding against a KV cache */
int bench_serve(int argc, char **argv);    /* cmd_serve.c: a continuous-batching step mix */
int bench_small(int argc, char **argv);    /* cmd_small.c: the time of one small call */
int bench_lowp_kernels(int argc, char **argv);      /* lowp_kernels.c: one forward tile step */
int bench_decode_steps(int argc, char **argv);      /* decode_steps.c: untimed decode steps */
int bench_instruction_rates(int argc, char **argv); /* instruction_rates.c (x86-64 only) */

/* forward_profile.c: `attn-bench --profile`, the per-phase cycles of one forward tile step
 * for each of the head dims; 0, or 1 when this CPU cannot run it. */
int bench_forward_profile(attn_kernel_choice kernel, const int64_t *head_dims, int count);

/* Measured machine ceilings (peak.c): fp32 FMA GFLOP/s and memory read GB/s using `threads`
 * threads (0 = all). Each takes well under a second. */
double bench_measure_fma_peak_gflops(int threads);
double bench_measure_read_bandwidth_gbs(int threads);

#endif /* ATTN_BENCH_H */
