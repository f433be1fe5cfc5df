/*
 * figure.h — the drawing helpers shared by the CLI's pictures (heat maps, the benchmark
 * plot): a cairo canvas that becomes a PNG or an SVG file by the path's extension, text
 * through pango (fontconfig picks the fonts, CJK included), "nice" axis ticks and their
 * labels. Files are written under a temporary name and renamed into place, so a failed
 * picture never leaves a partial file.
 */
#ifndef ATTN_CLI_FIGURE_H
#define ATTN_CLI_FIGURE_H

#include <cairo.h>
#include <stdbool.h>
#include <stddef.h>

#define FIGURE_PI 3.14159265358979323846

typedef enum figure_format {
    FIGURE_FORMAT_UNKNOWN = -1,
    FIGURE_FORMAT_PNG = 0,
    FIGURE_FORMAT_SVG = 1
} figure_format;

/* The format `path` asks for by its extension (.png / .svg, any case). */
figure_format figure_format_of(const char *path);

typedef struct figure {
    figure_format format;
    double width, height;   /* in pixels (SVG: px units) */
    cairo_surface_t *surface;
    cairo_t *cr;            /* draw with this */
    /* SVG: the document collects here until figure_save. */
    unsigned char *svg_data;
    size_t svg_size, svg_capacity;
    bool svg_failed;
} figure;

/*
 * Starts a white width x height canvas for `path` (PNG or SVG by extension). Returns false
 * with a one-line reason naming the path in `message` (an unknown extension, too large).
 */
bool figure_open(figure *f, const char *path, double width, double height, char *message,
                 size_t message_capacity);

/*
 * Writes the picture to `path` and frees the canvas. SVG files get a <title> (`title`) and a
 * <desc> (`description`, may be NULL) so their text can be read without the glyph shapes.
 * Returns false with a reason naming the path (no file is left behind).
 */
bool figure_save(figure *f, const char *path, const char *title, const char *description,
                 char *message, size_t message_capacity);

/* Frees the canvas without writing anything. */
void figure_discard(figure *f);

/* A cairo context for measuring text before the canvas size is known (a 1x1 image);
 * free with figure_measure_end. NULL when out of memory. */
cairo_t *figure_measure_begin(void);
void figure_measure_end(cairo_t *cr);

/* Text drawing. `size` is the font size in pixels; bold != 0 for the bold face. */
void figure_text_size(cairo_t *cr, const char *text, double size, int bold, double *width,
                      double *height);

/*
 * Draws `text` in the current source colour so that the point (anchor_x, anchor_y) of its box
 * (fractions: 0 = left/top, 0.5 = centre, 1 = right/bottom) lies at (x, y), rotated by
 * `angle` radians (clockwise, about that point).
 */
void figure_text(cairo_t *cr, const char *text, double x, double y, double size, int bold,
                 double anchor_x, double anchor_y, double angle);

/*
 * "Nice" ticks (1, 2 or 5 x 10^k apart, about `target` of them) covering [low, high]: writes
 * the values inside [low, high] to ticks (at most `capacity`) and returns their count; *step
 * receives the spacing.
 */
int figure_ticks(double low, double high, int target, double *ticks, int capacity,
                 double *step);

/* A tick value as text with just the decimals `step` needs ("0.2", "1500", "1e+06"). */
void figure_tick_label(double value, double step, char *buffer, size_t capacity);

#endif /* ATTN_CLI_FIGURE_H */
