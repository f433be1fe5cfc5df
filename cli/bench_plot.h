/*
 * bench_plot.h — a small line chart written as PNG (libpng), for `attn bench --plot`:
 * GFLOP/s against sequence length on a log2 x axis, one coloured line per configuration,
 * a dashed horizontal reference line (the measured FMA peak), axis ticks and a legend in a
 * built-in 5×7 bitmap font (letters are drawn upper-case).
 */
#ifndef ATTN_CLI_BENCH_PLOT_H
#define ATTN_CLI_BENCH_PLOT_H

typedef struct bench_plot_series {
    const char *label;
    int point_count;
    const double *x; /* > 0 (log2 axis) */
    const double *y;
} bench_plot_series;

/* Writes the chart to `path`. reference_y <= 0 draws no reference line. Returns 0 on
 * success, -1 (with a one-line reason in `reason`, 256 bytes) on failure. */
int bench_plot_write_png(const char *path, const char *title, const char *x_label,
                         const char *y_label, const bench_plot_series *series, int series_count,
                         double reference_y, const char *reference_label, char *reason);

#endif /* ATTN_CLI_BENCH_PLOT_H */
