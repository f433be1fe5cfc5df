/*
 * heatmap.c — the labelled heat maps of heatmap.h: layout (label thinning, rotation, panel
 * grid), cells and their values, the colour bar, and the SVG description of the labels.
 */
#define _POSIX_C_SOURCE 200809L

#include "heatmap.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "figure.h"

enum {
    MARGIN = 16,       /* around the picture */
    PANEL_GAP = 28,    /* between panels of a grid */
    BAR_GAP = 22,      /* map to colour bar */
    BAR_WIDTH = 18,
    TICK_LENGTH = 5,
    LABEL_PAD = 6,     /* label to map */
    MAX_CELL = 80,     /* pixels per cell side, at most */
    VECTOR_CELLS = 128 * 128 /* larger matrices are drawn as one scaled image */
};
static const double title_size = 18, panel_title_size = 14, label_size = 14, axis_size = 13,
                    tick_size = 12, value_size_max = 14;
static const double text_grey = 0.12, nan_grey = 0.62;
/* Masked cells (-0.0): a light grey with darker diagonal hatching, HATCH_SPACING apart. */
static const double masked_grey = 0.87, hatch_grey = 0.66;
enum { HATCH_SPACING = 6, LEGEND_GAP = 10, LEGEND_SWATCH = 14 };
static const double diagonal = 0.70710678118654752; /* sin 45° */

/* viridis sampled at 9 evenly spaced points (matplotlib's table, rounded to 8 bits). */
static const unsigned char viridis_points[9][3] = {
    {68, 1, 84},    {71, 44, 122},  {59, 81, 139},   {44, 113, 142}, {33, 144, 141},
    {39, 173, 129}, {92, 200, 99},  {170, 220, 50},  {253, 231, 37},
};

void cli_viridis(double t, double rgb[3]) {
    if (!(t > 0.0)) t = 0.0; /* also NaN */
    if (t > 1.0) t = 1.0;
    double position = t * 8.0;
    int segment = (int)position;
    if (segment > 7) segment = 7;
    double fraction = position - segment;
    for (int c = 0; c < 3; ++c)
        rgb[c] = ((1.0 - fraction) * viridis_points[segment][c] +
                  fraction * viridis_points[segment + 1][c]) / 255.0;
}

/* A masked cell: the weights' -0.0, a pair the mask forbids (heatmap.h). */
static bool is_masked(float v) { return v == 0.0f && signbit(v); }

/* The fill of one cell: viridis, the NaN grey, or the masked grey. */
static void cell_colour(float v, double minimum, double range, double rgb[3]) {
    if (is_masked(v)) rgb[0] = rgb[1] = rgb[2] = masked_grey;
    else if (isfinite(v)) cli_viridis((v - minimum) / range, rgb);
    else rgb[0] = rgb[1] = rgb[2] = nan_grey;
}

/* Everything the drawing needs to know about sizes, decided before the canvas exists. */
typedef struct layout {
    int64_t rows, columns, panels;
    int grid_rows, grid_columns;
    double cell, map_width, map_height;
    double title_height;       /* 0 without a title */
    double title_width;
    double panel_title_height; /* 0 for a single panel */
    double row_axis_width, row_label_width, column_label_height, column_axis_height;
    double panel_width, panel_height;
    int row_step, column_step;  /* label every n-th row / column */
    bool rotate_columns;        /* column labels at 45° */
    bool show_values;
    double value_size;
    const char *value_format;
    double bar_left, bar_top, bar_height, width, height;
    double minimum, maximum;
    int64_t masked;             /* masked cells, all panels; > 0: a "masked" legend entry */
    double legend_top, legend_width;
} layout;

/* Row or column label n (the caller's, or the index). */
static const char *label_text(const char *const *labels, int64_t n, char *buffer, size_t capacity) {
    if (labels) return labels[n];
    snprintf(buffer, capacity, "%lld", (long long)n);
    return buffer;
}

/* The widest label and the text height. */
static void measure_labels(cairo_t *cr, const char *const *labels, int64_t count, double *width,
                           double *height) {
    *width = 0;
    *height = 0;
    char buffer[32];
    for (int64_t n = 0; n < count; ++n) {
        double w, h;
        figure_text_size(cr, label_text(labels, n, buffer, sizeof buffer), label_size, 0, &w, &h);
        if (w > *width) *width = w;
        if (h > *height) *height = h;
    }
}

/* Smallest step from 1, 2, 5, 10, 20, 50, ... that is at least `needed` (index labels). */
static int nice_step(double needed) {
    for (int step = 1;; step *= 10) {
        if (step >= needed) return step;
        if (2 * step >= needed) return 2 * step;
        if (5 * step >= needed) return 5 * step;
    }
}

static int plain_step(double needed) { return needed <= 1 ? 1 : (int)ceil(needed); }

static void data_range(const cli_heatmap *map, double *minimum, double *maximum) {
    *minimum = map->minimum;
    *maximum = map->maximum;
    if (*minimum < *maximum) return;
    double low = INFINITY, high = -INFINITY;
    const int64_t count = map->panels * map->rows * map->columns;
    for (int64_t n = 0; n < count; ++n)
        if (isfinite(map->values[n]) && !is_masked(map->values[n])) {
            if (map->values[n] < low) low = map->values[n];
            if (map->values[n] > high) high = map->values[n];
        }
    if (!(low < high)) { /* constant, or no finite value */
        low = isfinite(low) ? low - 0.5 : 0.0;
        high = low + 1.0;
    }
    *minimum = low;
    *maximum = high;
}

static void compute_layout(cairo_t *cr, const cli_heatmap *map, layout *l) {
    memset(l, 0, sizeof *l);
    l->rows = map->rows;
    l->columns = map->columns;
    l->panels = map->panels;
    data_range(map, &l->minimum, &l->maximum);
    l->grid_rows = (int)floor(sqrt((double)map->panels));
    l->grid_columns = (int)((map->panels + l->grid_rows - 1) / l->grid_rows);

    /* Cells: a single map about 400 pixels on its longer side, grid panels smaller. */
    double side = 400;
    if (l->grid_columns > 1) side = fmax(160, fmin(400, 880.0 / l->grid_columns));
    const int64_t longer = map->rows > map->columns ? map->rows : map->columns;
    l->cell = fmin(MAX_CELL, side / (double)longer);
    if (l->cell < 1 && longer <= 1024) l->cell = 1; /* one pixel per cell up to 1024 */
    if (l->cell >= 2) l->cell = floor(l->cell);
    l->map_width = round(l->cell * map->columns);
    l->map_height = round(l->cell * map->rows);

    double w, h;
    if (map->title) {
        figure_text_size(cr, map->title, title_size, 1, &w, &h);
        l->title_height = h + 12;
        l->title_width = w;
    }
    if (map->panels > 1) {
        figure_text_size(cr, "head 0", panel_title_size, 1, &w, &h);
        l->panel_title_height = h + 6;
    }

    /* Row labels on the left, thinned so that they do not overlap. */
    double row_width, text_height;
    measure_labels(cr, map->row_labels, map->rows, &row_width, &text_height);
    double needed = (text_height + 1) / l->cell;
    l->row_step = map->row_labels ? plain_step(needed) : nice_step(needed);
    l->row_label_width = row_width + LABEL_PAD + 2;
    if (map->row_axis) {
        figure_text_size(cr, map->row_axis, axis_size, 0, &w, &h);
        l->row_axis_width = h + 6;
    }

    /* Column labels below: level when they fit, else at 45° (words) or thinned (indices). */
    double column_width;
    measure_labels(cr, map->column_labels, map->columns, &column_width, &text_height);
    if (column_width + 6 <= l->cell) {
        l->column_step = 1;
    } else if (map->column_labels == NULL) {
        l->column_step = nice_step((column_width + 8) / l->cell);
    } else {
        l->rotate_columns = true;
        l->column_step = plain_step((text_height + 1) / (l->cell * diagonal));
    }
    l->column_label_height =
        LABEL_PAD + (l->rotate_columns ? (column_width + text_height) * diagonal : text_height);
    if (map->column_axis) {
        figure_text_size(cr, map->column_axis, axis_size, 0, &w, &h);
        l->column_axis_height = h + 6;
    }

    /* Values in the cells of small matrices, when the cells are wide enough. */
    double largest = fmax(fabs(l->minimum), fabs(l->maximum));
    l->value_format = largest < 10 ? "%.2f" : largest < 1000 ? "%.1f" : "%.3g";
    if (map->rows <= CLI_HEATMAP_VALUES_UP_TO && map->columns <= CLI_HEATMAP_VALUES_UP_TO) {
        char sample[32];
        snprintf(sample, sizeof sample, l->value_format, -largest);
        l->value_size = fmin(value_size_max, l->cell * 0.3);
        figure_text_size(cr, sample, l->value_size, 0, &w, &h);
        l->show_values = l->value_size >= 8 && w + 4 <= l->cell;
    }

    l->panel_width = ceil(l->row_axis_width + l->row_label_width + l->map_width);
    l->panel_height = ceil(l->panel_title_height + l->map_height + l->column_label_height +
                           l->column_axis_height);
    const double grid_width = l->grid_columns * l->panel_width + (l->grid_columns - 1) * PANEL_GAP;
    const double grid_height = l->grid_rows * l->panel_height + (l->grid_rows - 1) * PANEL_GAP;

    /* The colour bar: beside the first row of maps, at least 160 pixels tall. */
    double tick_width = 0, ticks[32], step;
    int tick_count = figure_ticks(l->minimum, l->maximum, 5, ticks, 32, &step);
    for (int t = 0; t < tick_count; ++t) {
        char text[32];
        figure_tick_label(ticks[t], step, text, sizeof text);
        figure_text_size(cr, text, tick_size, 0, &w, &h);
        if (w > tick_width) tick_width = w;
    }
    l->bar_left = MARGIN + grid_width + BAR_GAP;
    l->bar_top = MARGIN + l->title_height + l->panel_title_height;
    l->bar_height = fmax(l->map_height, 160);
    const int64_t count = map->panels * map->rows * map->columns;
    for (int64_t n = 0; n < count; ++n) l->masked += is_masked(map->values[n]);
    double legend_height = 0;
    if (l->masked > 0) { /* a hatched swatch and "masked" under the colour bar */
        figure_text_size(cr, "masked", tick_size, 0, &w, &h);
        l->legend_top = l->bar_top + l->bar_height + h + LEGEND_GAP;
        l->legend_width = BAR_WIDTH + 5 + w;
        legend_height = h + LEGEND_GAP + fmax(LEGEND_SWATCH, h);
    }
    l->width = ceil(fmax(fmax(l->bar_left + BAR_WIDTH + TICK_LENGTH + 4 + tick_width + MARGIN,
                              l->bar_left + l->legend_width + MARGIN),
                         l->title_width + 2 * MARGIN));
    l->height = ceil(fmax(MARGIN + l->title_height + grid_height,
                          l->bar_top + l->bar_height + legend_height + h) + MARGIN);
}

/* Diagonal hatching lines (bottom-left to top-right) over the box (x, y, width, height), in
 * the hatch grey; the caller clips them to the masked cells. */
static void hatch(cairo_t *cr, double x, double y, double width, double height) {
    cairo_set_source_rgb(cr, hatch_grey, hatch_grey, hatch_grey);
    cairo_set_line_width(cr, 1.5);
    for (double offset = 0; offset < width + height; offset += HATCH_SPACING) {
        cairo_move_to(cr, x + offset - height, y + height);
        cairo_line_to(cr, x + offset, y);
    }
    cairo_stroke(cr);
}

/* The cells of panel p with their top-left corner at (x, y). */
static void draw_cells(cairo_t *cr, const cli_heatmap *map, const layout *l, int64_t p, double x,
                       double y) {
    const float *values = map->values + p * map->rows * map->columns;
    const double range = l->maximum - l->minimum;
    double rgb[3];
    if (map->rows * map->columns <= VECTOR_CELLS) {
        for (int64_t i = 0; i < map->rows; ++i)
            for (int64_t j = 0; j < map->columns; ++j) {
                cell_colour(values[i * map->columns + j], l->minimum, range, rgb);
                cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
                cairo_rectangle(cr, x + j * l->cell, y + i * l->cell, l->cell, l->cell);
                cairo_fill(cr);
            }
        if (l->cell >= HATCH_SPACING) { /* hatch the masked cells, clipped to them */
            bool any = false;
            for (int64_t i = 0; i < map->rows; ++i)
                for (int64_t j = 0; j < map->columns; ++j)
                    if (is_masked(values[i * map->columns + j])) {
                        cairo_rectangle(cr, x + j * l->cell, y + i * l->cell, l->cell, l->cell);
                        any = true;
                    }
            if (any) {
                cairo_save(cr);
                cairo_clip(cr);
                hatch(cr, x, y, l->map_width, l->map_height);
                cairo_restore(cr);
            }
        }
        if (l->cell >= 12) { /* thin white lines between the cells */
            cairo_set_source_rgb(cr, 1, 1, 1);
            cairo_set_line_width(cr, 1);
            for (int64_t i = 1; i < map->rows; ++i) {
                cairo_move_to(cr, x, y + i * l->cell + 0.5);
                cairo_line_to(cr, x + l->map_width, y + i * l->cell + 0.5);
            }
            for (int64_t j = 1; j < map->columns; ++j) {
                cairo_move_to(cr, x + j * l->cell + 0.5, y);
                cairo_line_to(cr, x + j * l->cell + 0.5, y + l->map_height);
            }
            cairo_stroke(cr);
        }
    } else { /* one pixel per cell, scaled */
        cairo_surface_t *image = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)map->columns,
                                                            (int)map->rows);
        if (cairo_surface_status(image) != CAIRO_STATUS_SUCCESS) {
            cairo_surface_destroy(image);
            return;
        }
        cairo_surface_flush(image);
        unsigned char *pixels = cairo_image_surface_get_data(image);
        const int stride = cairo_image_surface_get_stride(image);
        for (int64_t i = 0; i < map->rows; ++i)
            for (int64_t j = 0; j < map->columns; ++j) {
                cell_colour(values[i * map->columns + j], l->minimum, range, rgb);
                uint32_t pixel = (uint32_t)lrint(rgb[0] * 255) << 16 |
                                 (uint32_t)lrint(rgb[1] * 255) << 8 | (uint32_t)lrint(rgb[2] * 255);
                memcpy(pixels + i * stride + j * 4, &pixel, 4);
            }
        cairo_surface_mark_dirty(image);
        cairo_save(cr);
        cairo_rectangle(cr, x, y, l->map_width, l->map_height);
        cairo_clip(cr);
        cairo_translate(cr, x, y);
        cairo_scale(cr, l->cell, l->cell);
        cairo_set_source_surface(cr, image, 0, 0);
        cairo_pattern_set_filter(cairo_get_source(cr),
                                 l->cell >= 1 ? CAIRO_FILTER_NEAREST : CAIRO_FILTER_GOOD);
        cairo_paint(cr);
        cairo_restore(cr);
        cairo_surface_destroy(image);
    }
    if (l->show_values) {
        char text[32];
        for (int64_t i = 0; i < map->rows; ++i)
            for (int64_t j = 0; j < map->columns; ++j) {
                const float v = values[i * map->columns + j];
                if (!isfinite(v) || is_masked(v)) continue; /* masked cells stay blank */
                cli_viridis((v - l->minimum) / range, rgb);
                const double luminance = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2];
                const double ink = luminance < 0.45 ? 1.0 : text_grey;
                cairo_set_source_rgb(cr, ink, ink, ink);
                snprintf(text, sizeof text, l->value_format, v);
                figure_text(cr, text, x + (j + 0.5) * l->cell, y + (i + 0.5) * l->cell,
                            l->value_size, 0, 0.5, 0.5, 0);
            }
    }
}

/* Panel p (title, labels, axis names, cells) with its top-left corner at (x, y). */
static void draw_panel(cairo_t *cr, const cli_heatmap *map, const layout *l, int64_t p, double x,
                       double y) {
    char buffer[64];
    cairo_set_source_rgb(cr, text_grey, text_grey, text_grey);
    const double map_x = x + l->row_axis_width + l->row_label_width;
    const double map_y = y + l->panel_title_height;
    if (map->panels > 1) {
        const char *title = map->panel_titles ? map->panel_titles[p] : NULL;
        if (title == NULL) {
            snprintf(buffer, sizeof buffer, "head %lld", (long long)p);
            title = buffer;
        }
        figure_text(cr, title, map_x + l->map_width / 2, y, panel_title_size, 1, 0.5, 0, 0);
    }
    for (int64_t i = 0; i < map->rows; i += l->row_step)
        figure_text(cr, label_text(map->row_labels, i, buffer, sizeof buffer), map_x - LABEL_PAD,
                    map_y + (i + 0.5) * l->cell, label_size, 0, 1, 0.5, 0);
    for (int64_t j = 0; j < map->columns; j += l->column_step) {
        const char *text = label_text(map->column_labels, j, buffer, sizeof buffer);
        const double cx = map_x + (j + 0.5) * l->cell, cy = map_y + l->map_height + LABEL_PAD;
        if (l->rotate_columns) figure_text(cr, text, cx, cy, label_size, 0, 1, 0, -FIGURE_PI / 4);
        else figure_text(cr, text, cx, cy, label_size, 0, 0.5, 0, 0);
    }
    if (map->row_axis)
        figure_text(cr, map->row_axis, x, map_y + l->map_height / 2, axis_size, 0, 0.5, 0,
                    -FIGURE_PI / 2);
    if (map->column_axis)
        figure_text(cr, map->column_axis, map_x + l->map_width / 2,
                    map_y + l->map_height + l->column_label_height + 4, axis_size, 0, 0.5, 0, 0);
    draw_cells(cr, map, l, p, map_x, map_y);
}

static void draw_colour_bar(cairo_t *cr, const layout *l) {
    const double x = l->bar_left, y = l->bar_top, h = l->bar_height;
    cairo_pattern_t *gradient = cairo_pattern_create_linear(0, y + h, 0, y);
    for (int s = 0; s <= 16; ++s) {
        double rgb[3];
        cli_viridis(s / 16.0, rgb);
        cairo_pattern_add_color_stop_rgb(gradient, s / 16.0, rgb[0], rgb[1], rgb[2]);
    }
    cairo_rectangle(cr, x, y, BAR_WIDTH, h);
    cairo_set_source(cr, gradient);
    cairo_fill(cr);
    cairo_pattern_destroy(gradient);
    cairo_set_source_rgb(cr, text_grey, text_grey, text_grey);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, x + 0.5, y + 0.5, BAR_WIDTH - 1, h - 1);
    cairo_stroke(cr);
    double ticks[32], step;
    const int count = figure_ticks(l->minimum, l->maximum, 5, ticks, 32, &step);
    for (int t = 0; t < count; ++t) {
        const double ty = round(y + h - (ticks[t] - l->minimum) / (l->maximum - l->minimum) * h) + 0.5;
        cairo_move_to(cr, x + BAR_WIDTH, ty);
        cairo_line_to(cr, x + BAR_WIDTH + TICK_LENGTH, ty);
        cairo_stroke(cr);
        char text[32];
        figure_tick_label(ticks[t], step, text, sizeof text);
        figure_text(cr, text, x + BAR_WIDTH + TICK_LENGTH + 3, ty, tick_size, 0, 0, 0.5, 0);
    }
    if (l->masked > 0) { /* the legend of the masked cells */
        const double top = l->legend_top;
        cairo_set_source_rgb(cr, masked_grey, masked_grey, masked_grey);
        cairo_rectangle(cr, x, top, BAR_WIDTH, LEGEND_SWATCH);
        cairo_fill_preserve(cr);
        cairo_save(cr);
        cairo_clip(cr);
        hatch(cr, x, top, BAR_WIDTH, LEGEND_SWATCH);
        cairo_restore(cr);
        cairo_set_source_rgb(cr, text_grey, text_grey, text_grey);
        cairo_set_line_width(cr, 1);
        cairo_rectangle(cr, x + 0.5, top + 0.5, BAR_WIDTH - 1, LEGEND_SWATCH - 1);
        cairo_stroke(cr);
        figure_text(cr, "masked", x + BAR_WIDTH + 5, top + LEGEND_SWATCH / 2.0, tick_size, 0, 0,
                    0.5, 0);
    }
}

/* "rows (query): 我, 喜欢, ...; columns (key): ...": the SVG's <desc>. NULL when out of memory. */
static char *describe(const cli_heatmap *map, const layout *l) {
    size_t capacity = 4096, used = 0;
    char *text = malloc(capacity);
    if (text == NULL) return NULL;
    text[0] = '\0';
    const char *const *lists[2] = {map->row_labels, map->column_labels};
    const int64_t counts[2] = {map->rows, map->columns};
    const char *names[2] = {"rows", "columns"}, *axes[2] = {map->row_axis, map->column_axis};
    for (int a = 0; a < 2; ++a) {
        char head[128];
        snprintf(head, sizeof head, "%s%s%s%s (%lld): ", a ? "; " : "", names[a],
                 axes[a] ? " " : "", axes[a] ? axes[a] : "", (long long)counts[a]);
        for (int64_t n = -1; n < counts[a] && n < 256; ++n) {
            char buffer[32];
            const char *piece = n < 0 ? head : label_text(lists[a], n, buffer, sizeof buffer);
            size_t length = strlen(piece) + 2;
            if (used + length + 1 > capacity) {
                while (used + length + 1 > capacity) capacity *= 2;
                char *grown = realloc(text, capacity);
                if (grown == NULL) {
                    free(text);
                    return NULL;
                }
                text = grown;
            }
            used += (size_t)sprintf(text + used, "%s%s", n > 0 ? ", " : "", piece);
        }
    }
    char tail[160];
    snprintf(tail, sizeof tail, "; panels: %lld; colour scale %g to %g (viridis); masked cells: "
             "%lld (hatched grey)", (long long)map->panels, l->minimum, l->maximum,
             (long long)l->masked);
    if (used + strlen(tail) + 1 > capacity) {
        char *grown = realloc(text, used + strlen(tail) + 1);
        if (grown == NULL) {
            free(text);
            return NULL;
        }
        text = grown;
    }
    strcpy(text + used, tail);
    return text;
}

int cli_heatmap_write(const char *path, const cli_heatmap *map, char *message,
                      size_t message_capacity) {
    if (map->values == NULL || map->rows < 1 || map->columns < 1 ||
        map->rows > CLI_HEATMAP_MAX_SIDE || map->columns > CLI_HEATMAP_MAX_SIDE ||
        map->panels < 1 || map->panels > CLI_HEATMAP_MAX_PANELS) {
        snprintf(message, message_capacity, "%s: a heat map needs 1..%d rows and columns and "
                 "1..%d panels (got %lld panels of %lld x %lld)", path, CLI_HEATMAP_MAX_SIDE,
                 CLI_HEATMAP_MAX_PANELS, (long long)map->panels, (long long)map->rows,
                 (long long)map->columns);
        return -1;
    }
    if (figure_format_of(path) == FIGURE_FORMAT_UNKNOWN) {
        snprintf(message, message_capacity, "%s: unknown picture format (the name must end in "
                 ".png or .svg)", path);
        return -1;
    }
    cairo_t *measure = figure_measure_begin();
    if (measure == NULL) {
        snprintf(message, message_capacity, "%s: out of memory", path);
        return -1;
    }
    layout l;
    compute_layout(measure, map, &l);
    figure_measure_end(measure);

    figure f;
    if (!figure_open(&f, path, l.width, l.height, message, message_capacity)) return -1;
    if (map->title) {
        cairo_set_source_rgb(f.cr, text_grey, text_grey, text_grey);
        /* Centred over the maps, but never cut off. */
        const double centre = fmin(fmax((l.bar_left - BAR_GAP + MARGIN) / 2,
                                        MARGIN + l.title_width / 2),
                                   l.width - MARGIN - l.title_width / 2);
        figure_text(f.cr, map->title, centre, MARGIN, title_size, 1, 0.5, 0, 0);
    }
    for (int64_t p = 0; p < map->panels; ++p) {
        const int gr = (int)(p / l.grid_columns), gc = (int)(p % l.grid_columns);
        draw_panel(f.cr, map, &l, p, MARGIN + gc * (l.panel_width + PANEL_GAP),
                   MARGIN + l.title_height + gr * (l.panel_height + PANEL_GAP));
    }
    draw_colour_bar(f.cr, &l);
    char *description = describe(map, &l);
    bool ok = figure_save(&f, path, map->title ? map->title : "heat map", description, message,
                          message_capacity);
    free(description);
    return ok ? 0 : -1;
}
