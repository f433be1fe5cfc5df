/*
 * bench_plot.h — the line chart of `attn-bench --plot`, drawn with cairo and pango
 * (figure.h) as PNG or SVG by the file's extension: GFLOP/s against sequence length on a
 * log2 x axis, one coloured line with markers per configuration, a dashed horizontal
 * reference line (the measured FMA peak) with its label, a grid, ticks, axis titles and a
 * legend.
 */
#ifndef ATTN_ATTN_BENCH_PLOT_H
#define ATTN_ATTN_BENCH_PLOT_H

typedef struct bench_plot_series {
    const char *label;
    int point_count;
    const double *x; /* > 0 (log2 axis) */
    const double *y;
} bench_plot_series;

/* Writes the chart to `path` (.png or .svg). reference_y <= 0 draws no reference line.
 * Returns 0 on success, -1 (with a one-line reason naming the path in `reason`, 256 bytes)
 * on failure; no file is left behind then. */
int bench_plot_write(const char *path, const char *title, const char *x_label,
                     const char *y_label, const bench_plot_series *series, int series_count,
                     double reference_y, const char *reference_label, char *reason);

#endif /* ATTN_ATTN_BENCH_PLOT_H */
