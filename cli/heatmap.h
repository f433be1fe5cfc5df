/*
 * heatmap.h — heat-map PNGs of a matrix (attention weights, typically), written with libpng.
 * Used by `attn demo` and available to any command (e.g. `attn train`).
 *
 * The picture: one square cell per matrix entry, scaled up so that even a 5x5 map is large
 * and clear (about 480 pixels on its longer side, 1..64 pixels per cell), thin grid lines
 * between cells when they are big enough, the perceptually uniform viridis colour map (dark
 * purple = low, yellow = high; NaN = grey), and a colour bar on the right from low (bottom)
 * to high (top).
 */
#ifndef ATTN_CLI_HEATMAP_H
#define ATTN_CLI_HEATMAP_H

#include <stddef.h>
#include <stdint.h>

/*
 * Writes values [rows, columns] (element (i, j) at values[i * row_stride + j]) to `path` as
 * a PNG. Colours span [minimum, maximum]; pass minimum >= maximum to use the finite data
 * range instead (attention weights: 0 and 1). rows and columns must be in 1..4096.
 * Returns 0, or -1 with a one-line reason naming the path in `message` (no file is left).
 */
int cli_write_heatmap_png(const char *path, const float *values, int64_t rows, int64_t columns,
                          int64_t row_stride, float minimum, float maximum, char *message,
                          size_t message_capacity);

/* The viridis colour of t in [0, 1] (clamped) as 8-bit RGB. */
void cli_viridis(float t, unsigned char rgb[3]);

#endif /* ATTN_CLI_HEATMAP_H */
