/*
 * heatmap.h — labelled heat maps of matrices (attention weights, typically) as PNG or SVG,
 * drawn with cairo and pango (figure.h). Used by `attn demo`, `attn heatmap` and `attn train`.
 *
 * One picture shows one matrix, or a grid of panels (all heads of a layer) that share one
 * colour scale:
 *   - a title on top (e.g. "layer 0, head 1"), a small title over each panel of a grid;
 *   - row labels (queries) on the left, column labels (keys) below, rotated when they do not
 *     fit; thinned out to every n-th when the cells are too small for all of them;
 *   - the viridis colour map (dark purple = low, yellow = high; grey = NaN or infinite);
 *   - masked cells: a value of -0.0 is a pair the mask forbids (probabilities.h writes them
 *     so; an allowed weight that rounds to 0 is +0.0 and purple). They are drawn light grey
 *     with darker diagonal hatching (flat light grey when cells are under 6 pixels), print no
 *     value, take no part in the data's range, and get a "masked" entry under the colour bar;
 *   - the value printed in each cell when the matrix is small (at most 16 x 16), in white on
 *     dark cells and black on light ones;
 *   - a colour bar on the right with ticks and their values.
 */
#ifndef ATTN_CLI_HEATMAP_H
#define ATTN_CLI_HEATMAP_H

#include <stddef.h>
#include <stdint.h>

#define CLI_HEATMAP_MAX_SIDE 4096   /* rows and columns of one panel */
#define CLI_HEATMAP_MAX_PANELS 256
#define CLI_HEATMAP_VALUES_UP_TO 16 /* values are printed in matrices up to 16 x 16 */

typedef struct cli_heatmap {
    /* values [panels, rows, columns], C order (element (p, i, j) at (p * rows + i) * columns + j). */
    const float *values;
    int64_t panels, rows, columns;          /* panels 1..256, rows and columns 1..4096 */
    const char *title;                      /* over the whole picture; may be NULL */
    const char *const *panel_titles;        /* [panels] or NULL ("head 0", "head 1", ...) */
    const char *const *row_labels;          /* [rows] or NULL (indices 0, 1, ...) */
    const char *const *column_labels;       /* [columns] or NULL (indices) */
    const char *row_axis, *column_axis;     /* axis names, e.g. "query", "key"; may be NULL */
    /* Colour range: values at or below `minimum` are darkest, at or above `maximum` lightest.
       minimum >= maximum: the finite range of the data (masked cells left out). */
    float minimum, maximum;
} cli_heatmap;

/*
 * Writes the picture to `path`: PNG or SVG by the extension. Returns 0, or -1 with a one-line
 * reason naming the path in `message` (bad sizes, unknown extension, a write error); no file
 * is left behind on error.
 */
int cli_heatmap_write(const char *path, const cli_heatmap *map, char *message,
                      size_t message_capacity);

/* The viridis colour of t in [0, 1] (clamped; NaN = 0) as RGB in [0, 1]. */
void cli_viridis(double t, double rgb[3]);

#endif /* ATTN_CLI_HEATMAP_H */
