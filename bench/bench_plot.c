/*
 * bench_plot.c — the line chart of bench_plot.h: data ranges, the log2 x axis, grid and
 * ticks, lines with markers, the dashed peak line and the legend, on a figure.h canvas.
 */
#include "bench_plot.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "figure.h"

enum { WIDTH = 1100, HEIGHT = 640, LEFT = 90, RIGHT = 320, TOP = 56, BOTTOM = 74 };
static const double title_size = 18, label_size = 14, tick_size = 13, legend_size = 13;

/* Matplotlib's "tab10" cycle followed by a few darker colours. */
static const double palette[][3] = {
    {0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
    {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50},
    {0.74, 0.74, 0.13}, {0.09, 0.75, 0.81}, {0.00, 0.00, 0.50}, {0.50, 0.50, 0.00}};
static const double peak_colour[3] = {0.15, 0.15, 0.15}; /* not a series colour */

int bench_plot_write(const char *path, const char *title, const char *x_label,
                     const char *y_label, const bench_plot_series *series, int series_count,
                     double reference_y, const char *reference_label, char *reason) {
    /* Data ranges: x in log2, y from 0. */
    double x_min = INFINITY, x_max = -INFINITY, y_max = reference_y > 0 ? reference_y : 0;
    for (int s = 0; s < series_count; ++s)
        for (int p = 0; p < series[s].point_count; ++p) {
            const double lx = log2(series[s].x[p]);
            if (lx < x_min) x_min = lx;
            if (lx > x_max) x_max = lx;
            if (series[s].y[p] > y_max) y_max = series[s].y[p];
        }
    if (!(x_min <= x_max)) x_min = 0, x_max = 1;
    if (x_max - x_min < 1) x_max = x_min + 1;
    if (y_max <= 0) y_max = 1;
    double y_ticks[32], y_step;
    int y_count = figure_ticks(0, y_max * 1.05, 8, y_ticks, 31, &y_step);
    const double y_top = ceil(y_max * 1.05 / y_step) * y_step;
    if (y_count > 0 && y_ticks[y_count - 1] < y_top - y_step * 1e-9) y_ticks[y_count++] = y_top;

    figure f;
    if (!figure_open(&f, path, WIDTH, HEIGHT, reason, 256)) return -1;
    cairo_t *cr = f.cr;
    const double plot_left = LEFT, plot_right = WIDTH - RIGHT, plot_top = TOP,
                 plot_bottom = HEIGHT - BOTTOM;
#define MAP_X(lx) (plot_left + ((lx) - x_min) / (x_max - x_min) * (plot_right - plot_left))
#define MAP_Y(v) (plot_bottom - (v) / y_top * (plot_bottom - plot_top))

    /* Grid, ticks and their labels. */
    char text[64];
    cairo_set_line_width(cr, 1);
    for (int t = 0; t < y_count; ++t) {
        const double y = round(MAP_Y(y_ticks[t])) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, plot_left, y);
        cairo_line_to(cr, plot_right, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, plot_left - 5, y);
        cairo_line_to(cr, plot_left, y);
        cairo_stroke(cr);
        figure_tick_label(y_ticks[t], y_step, text, sizeof text);
        figure_text(cr, text, plot_left - 8, y, tick_size, 0, 1, 0.5, 0);
    }
    for (int lx = (int)ceil(x_min); lx <= (int)floor(x_max); ++lx) {
        const double x = round(MAP_X(lx)) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, x, plot_top);
        cairo_line_to(cr, x, plot_bottom);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, x, plot_bottom);
        cairo_line_to(cr, x, plot_bottom + 5);
        cairo_stroke(cr);
        snprintf(text, sizeof text, "%.0f", pow(2.0, lx));
        figure_text(cr, text, x, plot_bottom + 8, tick_size, 0, 0.5, 0, 0);
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 1.5);
    cairo_move_to(cr, plot_left, plot_top);
    cairo_line_to(cr, plot_left, plot_bottom);
    cairo_line_to(cr, plot_right, plot_bottom);
    cairo_stroke(cr);
    figure_text(cr, x_label, (plot_left + plot_right) / 2, plot_bottom + 34, label_size, 0, 0.5,
                0, 0);
    figure_text(cr, y_label, 24, (plot_top + plot_bottom) / 2, label_size, 0, 0.5, 0.5,
                -FIGURE_PI / 2);
    figure_text(cr, title, WIDTH / 2.0, 16, title_size, 1, 0.5, 0, 0);

    /* The peak line, dashed, labelled above its left end. */
    if (reference_y > 0) {
        const double y = round(MAP_Y(reference_y)) + 0.5, dash[1] = {8};
        cairo_set_source_rgb(cr, peak_colour[0], peak_colour[1], peak_colour[2]);
        cairo_set_line_width(cr, 2);
        cairo_set_dash(cr, dash, 1, 0);
        cairo_move_to(cr, plot_left, y);
        cairo_line_to(cr, plot_right, y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        if (reference_label)
            figure_text(cr, reference_label, plot_left + 8, y - 4, tick_size, 0, 0, 1, 0);
    }

    /* Series (lines with round markers) and the legend on the right. */
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (int s = 0; s < series_count; ++s) {
        const double *c = palette[s % (int)(sizeof palette / sizeof palette[0])];
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_set_line_width(cr, 2);
        for (int p = 0; p < series[s].point_count; ++p) {
            const double x = MAP_X(log2(series[s].x[p])), y = MAP_Y(series[s].y[p]);
            if (p == 0) cairo_move_to(cr, x, y);
            else cairo_line_to(cr, x, y);
        }
        cairo_stroke(cr);
        for (int p = 0; p < series[s].point_count; ++p) {
            cairo_arc(cr, MAP_X(log2(series[s].x[p])), MAP_Y(series[s].y[p]), 3.5, 0, 2 * FIGURE_PI);
            cairo_fill(cr);
        }
        const double legend_y = plot_top + s * 21 + 8;
        if (legend_y + 10 < HEIGHT) {
            cairo_move_to(cr, plot_right + 18, legend_y);
            cairo_line_to(cr, plot_right + 42, legend_y);
            cairo_stroke(cr);
            cairo_arc(cr, plot_right + 30, legend_y, 3.5, 0, 2 * FIGURE_PI);
            cairo_fill(cr);
            cairo_set_source_rgb(cr, 0, 0, 0);
            figure_text(cr, series[s].label, plot_right + 50, legend_y, legend_size, 0, 0, 0.5, 0);
        }
    }
#undef MAP_X
#undef MAP_Y
    return figure_save(&f, path, title, NULL, reason, 256) ? 0 : -1;
}
