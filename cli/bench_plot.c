/*
 * bench_plot.c — the PNG line chart of bench_plot.h: an RGB canvas, lines, markers, text in
 * a 5×7 bitmap font (drawn at 2×), and the libpng writer.
 */
#include "bench_plot.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WIDTH = 1100, HEIGHT = 640, LEFT = 90, RIGHT = 330, TOP = 50, BOTTOM = 70, SCALE = 2 };

typedef struct canvas {
    unsigned char pixels[HEIGHT * WIDTH * 3]; /* RGB rows, top to bottom */
} canvas;

typedef struct color { unsigned char r, g, b; } color;

static const color black = {0, 0, 0}, grid_gray = {225, 225, 225}, peak_red = {200, 30, 30};
static const color palette[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
                                {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {127, 127, 127},
                                {188, 189, 34}, {23, 190, 207}, {0, 0, 128},    {128, 128, 0}};

/* 5×7 glyphs, one byte per row (bit 4 = leftmost column). */
typedef struct glyph { char character; unsigned char rows[7]; } glyph;
static const glyph font[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'/', {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}}, {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}}, {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}}, {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}}, {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}}, {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
};

static void put_pixel(canvas *image, int x, int y, color c) {
    if (x < 0 || y < 0 || x >= WIDTH || y >= HEIGHT) return;
    unsigned char *pixel = image->pixels + ((size_t)y * WIDTH + (size_t)x) * 3;
    pixel[0] = c.r, pixel[1] = c.g, pixel[2] = c.b;
}

static void fill_rectangle(canvas *image, int x0, int y0, int x1, int y1, color c) {
    for (int y = y0; y <= y1; ++y)
        for (int x = x0; x <= x1; ++x) put_pixel(image, x, y, c);
}

/* A line `thickness` pixels wide; dash_length > 0 leaves gaps of the same length. */
static void draw_line(canvas *image, double x0, double y0, double x1, double y1, int thickness,
                      int dash_length, color c) {
    const double length = hypot(x1 - x0, y1 - y0);
    const int steps = (int)ceil(length) + 1;
    for (int s = 0; s <= steps; ++s) {
        if (dash_length > 0 && (s / dash_length) % 2 == 1) continue;
        const double t = (double)s / steps;
        const int x = (int)lround(x0 + t * (x1 - x0)), y = (int)lround(y0 + t * (y1 - y0));
        fill_rectangle(image, x - thickness / 2, y - thickness / 2, x + (thickness - 1) / 2,
                       y + (thickness - 1) / 2, c);
    }
}

/* Text with its top-left corner at (x, y); returns the width in pixels. */
static int draw_text(canvas *image, int x, int y, const char *text, color c) {
    int cursor = x;
    for (const char *p = text; *p; ++p) {
        char character = *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
        for (size_t g = 0; g < sizeof font / sizeof font[0]; ++g) {
            if (font[g].character != character) continue;
            for (int row = 0; row < 7; ++row)
                for (int column = 0; column < 5; ++column)
                    if (font[g].rows[row] & (0x10 >> column))
                        fill_rectangle(image, cursor + column * SCALE, y + row * SCALE,
                                       cursor + column * SCALE + SCALE - 1,
                                       y + row * SCALE + SCALE - 1, c);
        }
        cursor += 6 * SCALE;
    }
    return cursor - x;
}

static int text_width(const char *text) { return (int)strlen(text) * 6 * SCALE; }

/* A "nice" tick step (1, 2 or 5 × 10^k) giving about `target` ticks over [0, span]. */
static double tick_step(double span, int target) {
    const double raw = span / target, magnitude = pow(10.0, floor(log10(raw)));
    const double fraction = raw / magnitude;
    return (fraction < 1.5 ? 1 : fraction < 3.5 ? 2 : fraction < 7.5 ? 5 : 10) * magnitude;
}

static int write_png(const char *path, const canvas *image, char *reason) {
    FILE *file = fopen(path, "wb");
    if (!file) {
        snprintf(reason, 256, "cannot open '%s' for writing", path);
        return -1;
    }
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(file);
        snprintf(reason, 256, "libpng failed while writing '%s'", path);
        return -1;
    }
    png_init_io(png, file);
    png_set_IHDR(png, info, WIDTH, HEIGHT, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < HEIGHT; ++y) png_write_row(png, image->pixels + (size_t)y * WIDTH * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(file) != 0) {
        snprintf(reason, 256, "error closing '%s'", path);
        return -1;
    }
    return 0;
}

int bench_plot_write_png(const char *path, const char *title, const char *x_label,
                         const char *y_label, const bench_plot_series *series, int series_count,
                         double reference_y, const char *reference_label, char *reason) {
    canvas *image = malloc(sizeof *image);
    if (!image) {
        snprintf(reason, 256, "out of memory for a %dx%d image", WIDTH, HEIGHT);
        return -1;
    }
    memset(image, 255, sizeof *image);

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
    const double y_step = tick_step(y_max * 1.05, 8);
    const double y_top = ceil(y_max * 1.05 / y_step) * y_step;
    const int plot_left = LEFT, plot_right = WIDTH - RIGHT, plot_top = TOP,
              plot_bottom = HEIGHT - BOTTOM;
#define MAP_X(lx) (plot_left + ((lx)-x_min) / (x_max - x_min) * (plot_right - plot_left))
#define MAP_Y(v) (plot_bottom - (v) / y_top * (plot_bottom - plot_top))

    /* Grid, ticks and labels. */
    char text[64];
    for (double v = 0; v <= y_top + 1e-9; v += y_step) {
        const double y = MAP_Y(v);
        draw_line(image, plot_left, y, plot_right, y, 1, 0, grid_gray);
        snprintf(text, sizeof text, "%g", v);
        draw_text(image, plot_left - 8 - text_width(text), (int)y - 7, text, black);
    }
    for (int lx = (int)ceil(x_min); lx <= (int)floor(x_max); ++lx) {
        const double x = MAP_X(lx);
        draw_line(image, x, plot_top, x, plot_bottom, 1, 0, grid_gray);
        snprintf(text, sizeof text, "%.0f", pow(2.0, lx));
        draw_text(image, (int)x - text_width(text) / 2, plot_bottom + 8, text, black);
    }
    draw_line(image, plot_left, plot_top, plot_left, plot_bottom, 2, 0, black);
    draw_line(image, plot_left, plot_bottom, plot_right, plot_bottom, 2, 0, black);
    draw_text(image, (plot_left + plot_right - text_width(x_label)) / 2, plot_bottom + 36,
              x_label, black);
    draw_text(image, 8, plot_top - 30, y_label, black);
    draw_text(image, (WIDTH - text_width(title)) / 2, 10, title, black);

    if (reference_y > 0) {
        const double y = MAP_Y(reference_y);
        draw_line(image, plot_left, y, plot_right, y, 2, 8, peak_red);
        if (reference_label) draw_text(image, plot_left + 6, (int)y - 18, reference_label, peak_red);
    }

    /* Series and legend. */
    for (int s = 0; s < series_count; ++s) {
        const color c = palette[s % (sizeof palette / sizeof palette[0])];
        for (int p = 0; p < series[s].point_count; ++p) {
            const double x = MAP_X(log2(series[s].x[p])), y = MAP_Y(series[s].y[p]);
            fill_rectangle(image, (int)x - 3, (int)y - 3, (int)x + 3, (int)y + 3, c);
            if (p > 0)
                draw_line(image, MAP_X(log2(series[s].x[p - 1])), MAP_Y(series[s].y[p - 1]), x, y,
                          2, 0, c);
        }
        const int legend_y = plot_top + s * 20;
        if (legend_y + 14 < HEIGHT) {
            fill_rectangle(image, plot_right + 16, legend_y + 3, plot_right + 36, legend_y + 9, c);
            draw_text(image, plot_right + 44, legend_y, series[s].label, black);
        }
    }
#undef MAP_X
#undef MAP_Y
    const int result = write_png(path, image, reason);
    free(image);
    return result;
}
