/*
 * bench_report.h — one measured configuration of `attn-bench` and how the results are
 * written: a Markdown table (stdout and --markdown), CSV (--csv) and the plot (--plot).
 */
#ifndef ATTN_ATTN_BENCH_REPORT_H
#define ATTN_ATTN_BENCH_REPORT_H

#include <stdint.h>
#include <stdio.h>

typedef enum bench_mask { BENCH_MASK_NONE = 0, BENCH_MASK_CAUSAL = 1, BENCH_MASK_WINDOW = 2 } bench_mask;

typedef struct bench_result {
    const char *pass;        /* "forward" or "backward" */
    int64_t batch, length, query_heads, kv_heads, head_dim; /* B, T (= Tq = Tk), Hq, Hkv, D */
    bench_mask mask;
    int64_t window;          /* keys per query for BENCH_MASK_WINDOW */
    int threads;
    const char *kernel;      /* kernel table name */
    int repeats;             /* timed runs behind the median */
    double median_seconds;
    double allowed_pairs;    /* per (batch, query head), counted exactly */
    double gflops;           /* flops counted on allowed pairs only / median time */
    double peak_fraction;    /* gflops / measured peak (0 when no peak) */
    const char *status;      /* "ok" or the attn_status name when the call failed */
} bench_result;

const char *bench_mask_name(bench_mask mask);

/* What the peak the reports compare with is ("fp32 FMA peak" unless set: the bf16 VDPBF16PS
 * or AMX peak when bf16 runs on tiles). A string that outlives the reports. */
void bench_report_set_peak_name(const char *name);

void bench_write_markdown(FILE *stream, const bench_result *results, int count, double peak_gflops,
                          double bandwidth_gbs, const char *command_line);
void bench_write_csv(FILE *stream, const bench_result *results, int count, double peak_gflops);

/* One line per (pass, Hq, Hkv, D, mask) series of GFLOP/s against T. Returns 0 or -1 (reason
 * in `reason`, 256 bytes). */
int bench_write_plot(const char *path, const bench_result *results, int count, double peak_gflops,
                     char *reason);

#endif /* ATTN_ATTN_BENCH_REPORT_H */
