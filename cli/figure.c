/*
 * figure.c — the cairo/pango helpers of figure.h: PNG and SVG canvases written atomically,
 * text boxes, axis ticks.
 */
#define _POSIX_C_SOURCE 200809L

#include "figure.h"

#include <errno.h>
#include <cairo-svg.h>
#include <ctype.h>
#include <math.h>
#include <pango/pangocairo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy_tensor.h"

/* fontconfig resolves the family and falls back, glyph by glyph, to a font that has it
 * (WenQuanYi Micro Hei or Noto Sans CJK for 注意力). */
#define FIGURE_FONT_FAMILY "DejaVu Sans, Noto Sans CJK SC, WenQuanYi Micro Hei, sans-serif"
#define FIGURE_MAX_SIDE 16384 /* pixels */

figure_format figure_format_of(const char *path) {
    const char *dot = strrchr(path, '.');
    if (dot == NULL || strchr(dot, '/') != NULL) return FIGURE_FORMAT_UNKNOWN;
    char extension[8] = {0};
    for (size_t i = 0; i + 1 < sizeof extension && dot[i + 1]; ++i)
        extension[i] = (char)tolower((unsigned char)dot[i + 1]);
    if (strlen(dot + 1) >= sizeof extension) return FIGURE_FORMAT_UNKNOWN;
    if (strcmp(extension, "png") == 0) return FIGURE_FORMAT_PNG;
    if (strcmp(extension, "svg") == 0) return FIGURE_FORMAT_SVG;
    return FIGURE_FORMAT_UNKNOWN;
}

/* At exit: drop pango's font map, which frees the fonts and caches it keeps for the process,
 * so that memory checkers see no leak from them. (fontconfig's own configuration is never
 * freed: FcFini would abort while cairo still holds fonts; see tests/cli/fonts.supp.) */
static void release_fonts(void) { pango_cairo_font_map_set_default(NULL); }

/* LeakSanitizer's built-in suppressions (used only in sanitizer builds): fontconfig keeps a
 * few blocks of its parsed configuration unreachable for the life of the process. */
__attribute__((visibility("default"))) const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libfontconfig.so\n"; }

static void release_fonts_at_exit(void) {
    static bool registered = false;
    if (!registered) registered = atexit(release_fonts) == 0;
}

/* cairo's SVG writer hands the document over in pieces; collect them. */
static cairo_status_t collect_svg(void *closure, const unsigned char *data, unsigned int length) {
    figure *f = closure;
    if (f->svg_size + length > f->svg_capacity) {
        size_t capacity = f->svg_capacity ? f->svg_capacity : 65536;
        while (capacity < f->svg_size + length) capacity *= 2;
        unsigned char *grown = realloc(f->svg_data, capacity);
        if (grown == NULL) {
            f->svg_failed = true;
            return CAIRO_STATUS_WRITE_ERROR;
        }
        f->svg_data = grown;
        f->svg_capacity = capacity;
    }
    memcpy(f->svg_data + f->svg_size, data, length);
    f->svg_size += length;
    return CAIRO_STATUS_SUCCESS;
}

bool figure_open(figure *f, const char *path, double width, double height, char *message,
                 size_t message_capacity) {
    memset(f, 0, sizeof *f);
    release_fonts_at_exit();
    f->format = figure_format_of(path);
    if (f->format == FIGURE_FORMAT_UNKNOWN) {
        snprintf(message, message_capacity, "%s: unknown picture format (the name must end in "
                 ".png or .svg)", path);
        return false;
    }
    width = ceil(width);
    height = ceil(height);
    if (!(width >= 1 && height >= 1 && width <= FIGURE_MAX_SIDE && height <= FIGURE_MAX_SIDE)) {
        snprintf(message, message_capacity, "%s: a %.0f x %.0f picture is outside 1..%d pixels "
                 "a side", path, width, height, FIGURE_MAX_SIDE);
        return false;
    }
    f->width = width;
    f->height = height;
    if (f->format == FIGURE_FORMAT_PNG) {
        f->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)width, (int)height);
    } else {
        f->surface = cairo_svg_surface_create_for_stream(collect_svg, f, width, height);
        cairo_svg_surface_set_document_unit(f->surface, CAIRO_SVG_UNIT_PX);
    }
    f->cr = cairo_create(f->surface);
    if (cairo_status(f->cr) != CAIRO_STATUS_SUCCESS) {
        snprintf(message, message_capacity, "%s: cannot start a %.0f x %.0f picture: %s", path,
                 width, height, cairo_status_to_string(cairo_status(f->cr)));
        figure_discard(f);
        return false;
    }
    cairo_set_source_rgb(f->cr, 1, 1, 1);
    cairo_paint(f->cr);
    return true;
}

void figure_discard(figure *f) {
    if (f->cr) cairo_destroy(f->cr);
    if (f->surface) {
        cairo_surface_finish(f->surface);
        cairo_surface_destroy(f->surface);
    }
    free(f->svg_data);
    memset(f, 0, sizeof *f);
}

/* Writes `text` with &, <, > and quotes escaped. */
static void write_escaped(FILE *file, const char *text) {
    for (const char *c = text; *c; ++c) switch (*c) {
        case '&': fputs("&amp;", file); break;
        case '<': fputs("&lt;", file); break;
        case '>': fputs("&gt;", file); break;
        case '"': fputs("&quot;", file); break;
        default: fputc(*c, file);
        }
}

/* The SVG document with <title> and <desc> right after the opening <svg ...> tag. */
static bool write_svg(const figure *f, const char *path, const char *title,
                      const char *description) {
    const char *data = (const char *)f->svg_data;
    const char *svg = f->svg_data ? strstr(data, "<svg") : NULL;
    const char *tag_end = svg ? strchr(svg, '>') : NULL;
    if (tag_end == NULL || (size_t)(tag_end - data) >= f->svg_size) return false;
    FILE *file = fopen(path, "wb");
    if (file == NULL) return false;
    size_t head = (size_t)(tag_end + 1 - data);
    bool ok = fwrite(data, 1, head, file) == head;
    fputs("\n<title>", file);
    write_escaped(file, title ? title : "");
    fputs("</title>\n", file);
    if (description) {
        fputs("<desc>", file);
        write_escaped(file, description);
        fputs("</desc>\n", file);
    }
    ok = ok && fwrite(data + head, 1, f->svg_size - head, file) == f->svg_size - head;
    ok = fclose(file) == 0 && ok;
    return ok;
}

bool figure_save(figure *f, const char *path, const char *title, const char *description,
                 char *message, size_t message_capacity) {
    cairo_status_t status = cairo_status(f->cr);
    if (status != CAIRO_STATUS_SUCCESS) {
        snprintf(message, message_capacity, "%s: drawing failed: %s", path,
                 cairo_status_to_string(status));
        figure_discard(f);
        return false;
    }
    char *partial = cli_partial_name(path);
    bool ok = partial != NULL;
    /* The reason of a failure: the system's (errno, e.g. a missing folder) where there is
     * one, else cairo's. */
    const char *reason = ok ? NULL : "out of memory";
    errno = 0;
    if (ok && f->format == FIGURE_FORMAT_PNG) {
        cairo_surface_flush(f->surface);
        const cairo_status_t written = cairo_surface_write_to_png(f->surface, partial);
        ok = written == CAIRO_STATUS_SUCCESS;
        if (!ok) reason = errno != 0 ? strerror(errno) : cairo_status_to_string(written);
    } else if (ok) {
        cairo_destroy(f->cr);
        f->cr = NULL;
        cairo_surface_finish(f->surface); /* flushes the document into svg_data */
        const cairo_status_t drawn = cairo_surface_status(f->surface);
        ok = !f->svg_failed && drawn == CAIRO_STATUS_SUCCESS;
        if (!ok) reason = f->svg_failed ? "the SVG document could not be built"
                                        : cairo_status_to_string(drawn);
        if (ok && !(ok = write_svg(f, partial, title, description)))
            reason = errno != 0 ? strerror(errno) : "write error";
    }
    if (ok && rename(partial, path) != 0) {
        ok = false;
        reason = strerror(errno);
    }
    if (!ok) {
        if (partial) unlink(partial);
        snprintf(message, message_capacity, "%s: cannot write the picture (%s)", path,
                 reason != NULL ? reason : "unknown reason");
    }
    free(partial);
    figure_discard(f);
    return ok;
}

cairo_t *figure_measure_begin(void) {
    release_fonts_at_exit();
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *cr = cairo_create(surface);
    cairo_surface_destroy(surface); /* the context keeps a reference */
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
        cairo_destroy(cr);
        return NULL;
    }
    return cr;
}

void figure_measure_end(cairo_t *cr) {
    if (cr) cairo_destroy(cr);
}

static PangoLayout *text_layout(cairo_t *cr, const char *text, double size, int bold) {
    PangoLayout *layout = pango_cairo_create_layout(cr);
    PangoFontDescription *font = pango_font_description_from_string(FIGURE_FONT_FAMILY);
    pango_font_description_set_absolute_size(font, size * PANGO_SCALE);
    pango_font_description_set_weight(font, bold ? PANGO_WEIGHT_BOLD : PANGO_WEIGHT_NORMAL);
    pango_layout_set_font_description(layout, font);
    pango_font_description_free(font);
    pango_layout_set_text(layout, text, -1);
    return layout;
}

void figure_text_size(cairo_t *cr, const char *text, double size, int bold, double *width,
                      double *height) {
    PangoLayout *layout = text_layout(cr, text, size, bold);
    PangoRectangle logical;
    pango_layout_get_extents(layout, NULL, &logical);
    *width = (double)logical.width / PANGO_SCALE;
    *height = (double)logical.height / PANGO_SCALE;
    g_object_unref(layout);
}

void figure_text(cairo_t *cr, const char *text, double x, double y, double size, int bold,
                 double anchor_x, double anchor_y, double angle) {
    PangoLayout *layout = text_layout(cr, text, size, bold);
    PangoRectangle logical;
    pango_layout_get_extents(layout, NULL, &logical);
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, angle);
    cairo_move_to(cr, -anchor_x * logical.width / PANGO_SCALE - (double)logical.x / PANGO_SCALE,
                  -anchor_y * logical.height / PANGO_SCALE - (double)logical.y / PANGO_SCALE);
    pango_cairo_show_layout(cr, layout);
    cairo_restore(cr);
    g_object_unref(layout);
}

int figure_ticks(double low, double high, int target, double *ticks, int capacity,
                 double *step) {
    if (!(high > low)) {
        if (capacity > 0) ticks[0] = low;
        *step = 1;
        return capacity > 0;
    }
    const double raw = (high - low) / (target > 0 ? target : 1);
    const double magnitude = pow(10.0, floor(log10(raw)));
    const double fraction = raw / magnitude;
    *step = (fraction < 1.5 ? 1 : fraction < 3.5 ? 2 : fraction < 7.5 ? 5 : 10) * magnitude;
    int count = 0;
    const double slack = *step * 1e-9;
    for (double n = ceil((low - slack) / *step); count < capacity; ++n) {
        double value = n * *step;
        if (value > high + slack) break;
        ticks[count++] = fabs(value) < slack ? 0.0 : value;
    }
    return count;
}

void figure_tick_label(double value, double step, char *buffer, size_t capacity) {
    if (fabs(value) >= 1e6 || (value != 0 && fabs(value) < 1e-4)) {
        snprintf(buffer, capacity, "%.3g", value);
        return;
    }
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (decimals > 6) decimals = 6;
    snprintf(buffer, capacity, "%.*f", decimals, value);
}
