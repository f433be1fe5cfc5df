/*
 * heatmap.c — heat-map PNGs (see heatmap.h): layout, the viridis colour map, libpng output.
 */
#define _POSIX_C_SOURCE 200809L

#include "heatmap.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HEATMAP_TARGET_PIXELS 480 /* the longer side of the matrix area, roughly */
#define HEATMAP_MAX_CELL 64
#define HEATMAP_MAX_CELLS 4096
#define HEATMAP_MARGIN 8
#define HEATMAP_BAR_GAP 12
#define HEATMAP_BAR_WIDTH 18

/* viridis sampled at 9 evenly spaced points (matplotlib's table, rounded). */
static const unsigned char viridis_points[9][3] = {
    {68, 1, 84},    {71, 44, 122},  {59, 81, 139},   {44, 113, 142}, {33, 144, 141},
    {39, 173, 129}, {92, 200, 99},  {170, 220, 50},  {253, 231, 37},
};

void cli_viridis(float t, unsigned char rgb[3]) {
    if (!(t > 0.0f)) t = 0.0f; /* also NaN */
    if (t > 1.0f) t = 1.0f;
    float position = t * 8.0f;
    int segment = (int)position;
    if (segment > 7) segment = 7;
    float fraction = position - (float)segment;
    for (int c = 0; c < 3; ++c)
        rgb[c] = (unsigned char)lrintf((1.0f - fraction) * viridis_points[segment][c] +
                                       fraction * viridis_points[segment + 1][c]);
}

/* Geometry of the picture. */
typedef struct heatmap_layout {
    int cell;             /* pixels per cell side, grid line included */
    int grid;             /* 1 when grid lines are drawn */
    int width, height;    /* whole image */
    int map_width, map_height;
    int bar_left;         /* x of the colour bar */
} heatmap_layout;

static heatmap_layout layout_for(int64_t rows, int64_t columns) {
    heatmap_layout l;
    int64_t longer = rows > columns ? rows : columns;
    l.cell = (int)(HEATMAP_TARGET_PIXELS / longer);
    if (l.cell < 1) l.cell = 1;
    if (l.cell > HEATMAP_MAX_CELL) l.cell = HEATMAP_MAX_CELL;
    l.grid = l.cell >= 12;
    l.map_width = (int)columns * l.cell + l.grid;
    l.map_height = (int)rows * l.cell + l.grid;
    l.bar_left = HEATMAP_MARGIN + l.map_width + HEATMAP_BAR_GAP;
    l.width = l.bar_left + HEATMAP_BAR_WIDTH + HEATMAP_MARGIN;
    l.height = l.map_height + 2 * HEATMAP_MARGIN;
    return l;
}

/* Fills one image row y (RGB) of the picture. */
static void render_row(const heatmap_layout *l, int y, const float *values, int64_t row_stride,
                       float minimum, float range, unsigned char *row) {
    static const unsigned char background[3] = {255, 255, 255}, grid[3] = {255, 255, 255},
                               nan_grey[3] = {150, 150, 150}, frame[3] = {60, 60, 60};
    for (int x = 0; x < l->width; ++x) memcpy(row + 3 * x, background, 3);
    int map_y = y - HEATMAP_MARGIN;
    if (map_y < 0 || map_y >= l->map_height) return;
    /* The matrix. */
    bool grid_row = l->grid && map_y % l->cell == 0;
    int64_t i = map_y / l->cell;
    if (i * l->cell >= l->map_height - l->grid) i = -1;
    for (int map_x = 0; map_x < l->map_width; ++map_x) {
        unsigned char *pixel = row + 3 * (HEATMAP_MARGIN + map_x);
        bool grid_column = l->grid && map_x % l->cell == 0;
        int64_t j = map_x / l->cell;
        if (grid_row || grid_column || i < 0 || j * l->cell >= l->map_width - l->grid) {
            memcpy(pixel, grid, 3);
            continue;
        }
        float value = values[i * row_stride + j];
        if (isnan(value)) memcpy(pixel, nan_grey, 3);
        else cli_viridis((value - minimum) / range, pixel);
    }
    /* The colour bar: high at the top, with a thin frame. */
    for (int x = 0; x < HEATMAP_BAR_WIDTH; ++x) {
        unsigned char *pixel = row + 3 * (l->bar_left + x);
        if (x == 0 || x == HEATMAP_BAR_WIDTH - 1 || map_y == 0 || map_y == l->map_height - 1)
            memcpy(pixel, frame, 3);
        else
            cli_viridis(1.0f - (float)map_y / (float)(l->map_height - 1), pixel);
    }
}

/* Encodes the picture into `file`; false when libpng reports an error. No variable of this
 * function changes after setjmp, as longjmp requires. */
static bool write_png(FILE *file, const heatmap_layout *l, const float *values,
                      int64_t row_stride, float minimum, float range) {
    unsigned char *row = malloc((size_t)l->width * 3);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (row == NULL || png == NULL || info == NULL || setjmp(png_jmpbuf(png))) {
        /* libpng errors long-jump here. */
        png_destroy_write_struct(&png, &info);
        free(row);
        return false;
    }
    png_init_io(png, file);
    png_set_IHDR(png, info, (png_uint_32)l->width, (png_uint_32)l->height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < l->height; ++y) {
        render_row(l, y, values, row_stride, minimum, range, row);
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    return true;
}

int cli_write_heatmap_png(const char *path, const float *values, int64_t rows, int64_t columns,
                          int64_t row_stride, float minimum, float maximum, char *message,
                          size_t message_capacity) {
    if (rows < 1 || columns < 1 || rows > HEATMAP_MAX_CELLS || columns > HEATMAP_MAX_CELLS ||
        row_stride < columns) {
        snprintf(message, message_capacity, "%s: a heat map needs 1..%d rows and columns "
                 "(got %lld x %lld)", path, HEATMAP_MAX_CELLS, (long long)rows,
                 (long long)columns);
        return -1;
    }
    if (!(minimum < maximum)) {
        minimum = INFINITY;
        maximum = -INFINITY;
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < columns; ++j) {
                float v = values[i * row_stride + j];
                if (isfinite(v)) {
                    if (v < minimum) minimum = v;
                    if (v > maximum) maximum = v;
                }
            }
        if (!(minimum < maximum)) { /* constant or no finite values */
            minimum = isfinite(minimum) ? minimum - 0.5f : 0.0f;
            maximum = minimum + 1.0f;
        }
    }
    heatmap_layout l = layout_for(rows, columns);
    FILE *file = fopen(path, "wb");
    if (file == NULL) {
        snprintf(message, message_capacity, "%s: cannot create the heat map file", path);
        return -1;
    }
    bool written = write_png(file, &l, values, row_stride, minimum, maximum - minimum);
    if (fclose(file) != 0 || !written) {
        unlink(path);
        snprintf(message, message_capacity, "%s: writing the PNG failed", path);
        return -1;
    }
    return 0;
}
