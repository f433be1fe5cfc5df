/*
 * cmd_heatmap.c — `attn heatmap`: draws a weights file (attention probabilities, e.g. from
 * `attn forward --weights-out`) as a labelled heat map, PNG or SVG (heatmap.h).
 *
 *   attn heatmap --weights W.npy|W.safetensors[:NAME] [--labels tokens.txt] [--query-labels F]
 *                [--title T] [--layer N] [--batch N] [--head N] [--min X --max Y]
 *                --out map.png|map.svg
 *
 * W (tensor_files.h: a .npy file or one tensor of a safetensors file, default name "weights")
 * is [Tq, Tk], [H, Tq, Tk] or [B, H, Tq, Tk], float32 (or float16 / BF16, widened): one
 * picture of one batch row with a panel per head. -0.0 entries are masked pairs (heatmap.h). Errors are one line naming the option, the file and the bad value; no
 * picture is written then.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <glib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arguments.h"
#include "cli.h"
#include "figure.h"
#include "heatmap.h"
#include "npy_tensor.h"
#include "tensor_files.h"

static const char *const command = "heatmap";

#define LABEL_CAPACITY 256 /* bytes of one label, at most */

static void print_help(void) {
    printf("usage: attn heatmap --weights W --out map.png|map.svg [options]\n\n"
           "Draws attention weights as a heat map: token labels on both axes, the value in each\n"
           "cell of a small matrix (up to %d x %d), a colour bar, a title, and one panel per\n"
           "head in a grid. Masked pairs (-0.0, as attn forward --weights-out writes them) are\n"
           "hatched grey, apart from allowed weights that round to 0.\n\n"
           "options:\n"
           "  --weights W          W.npy, or W.safetensors[:NAME] (one tensor; default name\n"
           "                       weights): [Tq, Tk], [H, Tq, Tk] or [B, H, Tq, Tk], float32\n"
           "                       (float16 / BF16 widened), e.g. from attn forward\n"
           "                       --weights-out; at most %d heads, %d rows and columns\n"
           "  --out FILE           the picture: .png or .svg (written)\n"
           "  --labels FILE        UTF-8 text, one token per line: the key (column) labels, and\n"
           "                       the query (row) labels too when Tq = Tk\n"
           "  --query-labels FILE  the query (row) labels, one per line, when they differ\n"
           "  --title TEXT         the title (default: the file name, layer, batch and head)\n"
           "  --layer N            the layer the weights come from, for the default title\n"
           "  --batch N            the batch row of a rank-4 file (default 0)\n"
           "  --head N             draw only head N (default: every head, one panel each)\n"
           "  --min X, --max Y     the colour range (default 0..1 when every value lies in\n"
           "                       [0, 1], else the data's range)\n",
           CLI_HEATMAP_VALUES_UP_TO, CLI_HEATMAP_VALUES_UP_TO, CLI_HEATMAP_MAX_PANELS,
           CLI_HEATMAP_MAX_SIDE);
}

typedef struct heatmap_arguments {
    const char *weights_path, *out_path, *labels_path, *query_labels_path, *title;
    int64_t batch, head, layer; /* head -1 = all, layer -1 = not given */
    double minimum, maximum;
    bool minimum_given, maximum_given;
} heatmap_arguments;

/* The labels of `path`, one per line; NULL (after printing one line) on error. */
static char **read_labels(const char *option, const char *path, int64_t expected,
                          const char *what) {
    if (!cli_input_file(command, option, path, false)) return NULL;
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        cli_error(command, "%s %s: cannot open the file (%s)", option, path, strerror(errno));
        return NULL;
    }
    char **labels = calloc((size_t)expected, sizeof *labels);
    char line[LABEL_CAPACITY + 2];
    int64_t count = 0;
    bool ok = labels != NULL;
    while (ok && fgets(line, sizeof line, file) != NULL) {
        size_t length = strlen(line);
        if (length > 0 && line[length - 1] != '\n' && !feof(file)) {
            cli_error(command, "%s %s: line %lld is longer than %d bytes", option, path,
                      (long long)count + 1, LABEL_CAPACITY);
            ok = false;
            break;
        }
        while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r'))
            line[--length] = '\0';
        if (!g_utf8_validate(line, -1, NULL)) {
            cli_error(command, "%s %s: line %lld is not valid UTF-8", option, path,
                      (long long)count + 1);
            ok = false;
        } else if (count < expected) {
            labels[count] = strdup(line);
            ok = labels[count] != NULL;
        }
        ++count;
    }
    if (ok && ferror(file)) {
        cli_error(command, "%s %s: read error (%s)", option, path, strerror(errno));
        ok = false;
    }
    fclose(file);
    if (ok && count != expected) {
        cli_error(command, "%s %s: %lld labels for %lld %s", option, path, (long long)count,
                  (long long)expected, what);
        ok = false;
    }
    if (!ok && labels) {
        for (int64_t n = 0; n < expected; ++n) free(labels[n]);
        free(labels);
        return NULL;
    }
    return labels;
}

static void free_labels(char **labels, int64_t count) {
    if (labels == NULL) return;
    for (int64_t n = 0; n < count; ++n) free(labels[n]);
    free(labels);
}

/* Parses argv; returns 0 to go on, or the exit code (help: 0 with *done). */
static int parse_arguments(int argc, char **argv, heatmap_arguments *a, bool *done) {
    struct { const char *name; const char **target; } texts[] = {
        {"--weights", &a->weights_path}, {"--out", &a->out_path},
        {"--labels", &a->labels_path},   {"--query-labels", &a->query_labels_path},
        {"--title", &a->title},
    };
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help();
            *done = true;
            return 0;
        }
        bool matched = false;
        for (size_t t = 0; t < sizeof texts / sizeof texts[0] && !matched; ++t)
            if (strcmp(argv[i], texts[t].name) == 0) {
                if (i + 1 >= argc) {
                    cli_error(command, "%s needs a value", argv[i]);
                    return 2;
                }
                *texts[t].target = argv[++i];
                matched = true;
            }
        if (matched) continue;
        const bool is_index = strcmp(argv[i], "--batch") == 0 || strcmp(argv[i], "--head") == 0 ||
                              strcmp(argv[i], "--layer") == 0;
        const bool is_bound = strcmp(argv[i], "--min") == 0 || strcmp(argv[i], "--max") == 0;
        if (!is_index && !is_bound) {
            cli_error(command, "unknown option '%s' (see attn heatmap --help)", argv[i]);
            return 2;
        }
        if (i + 1 >= argc) {
            cli_error(command, "%s needs a value", argv[i]);
            return 2;
        }
        const char *option = argv[i], *value = argv[++i];
        if (is_index) {
            int64_t n;
            if (!cli_parse_int64(value, &n) || n < 0) {
                cli_error(command, "%s '%s': expected an index >= 0", option, value);
                return 2;
            }
            *(strcmp(option, "--batch") == 0   ? &a->batch
              : strcmp(option, "--layer") == 0 ? &a->layer
                                               : &a->head) = n;
        } else {
            double x;
            if (!cli_parse_double(value, &x)) {
                cli_error(command, "%s '%s': expected a finite number", option, value);
                return 2;
            }
            if (strcmp(option, "--min") == 0) a->minimum = x, a->minimum_given = true;
            else a->maximum = x, a->maximum_given = true;
        }
    }
    if (a->weights_path == NULL || a->out_path == NULL) {
        cli_error(command, "missing %s (usage: attn heatmap --weights W --out map.png|map.svg "
                  "[options])", a->weights_path == NULL ? "--weights" : "--out");
        return 2;
    }
    if (figure_format_of(a->out_path) == FIGURE_FORMAT_UNKNOWN) {
        cli_error(command, "--out %s: unknown picture format (the name must end in .png or .svg)",
                  a->out_path);
        return 2;
    }
    if (a->minimum_given != a->maximum_given || (a->minimum_given && !(a->minimum < a->maximum))) {
        cli_error(command, "--min and --max go together, with min < max");
        return 2;
    }
    if (!cli_location_valid(command, "--weights", a->weights_path)) return 2;
    if (a->title && !g_utf8_validate(a->title, -1, NULL)) {
        cli_error(command, "--title: not valid UTF-8");
        return 2;
    }
    return 0;
}

/* Draws the parsed request; returns the exit code. */
static int draw(const heatmap_arguments *a) {
    cli_input weights;
    attn_tensor view; /* [B, H, Tq, Tk] float32, contiguous */
    if (!cli_input_load(command, "--weights", a->weights_path, "weights", 2, 4, true, &weights) ||
        !cli_input_as(command, &weights, ATTN_DTYPE_F32, &view)) {
        cli_input_free(&weights);
        return 1;
    }
    const int64_t B = view.shape[0], H = view.shape[1], Tq = view.shape[2], Tk = view.shape[3];
    char shape_text[96];
    cli_shape_text(weights.rank, weights.shape, shape_text, sizeof shape_text);
    int code = 1;
    char **key_labels = NULL, **query_labels = NULL;
    const int64_t panels = a->head >= 0 ? 1 : H;
    if (a->batch >= B) {
        cli_error(command, "--batch %lld: --weights %s %s has %lld batch rows", (long long)a->batch,
                  a->weights_path, shape_text, (long long)B);
        goto done;
    }
    if (a->head >= H) {
        cli_error(command, "--head %lld: --weights %s %s has %lld heads", (long long)a->head,
                  a->weights_path, shape_text, (long long)H);
        goto done;
    }
    if (Tq > CLI_HEATMAP_MAX_SIDE || Tk > CLI_HEATMAP_MAX_SIDE || panels > CLI_HEATMAP_MAX_PANELS) {
        cli_error(command, "--weights %s: shape %s is too large for one picture (at most %d heads "
                  "of %d x %d; --head N draws one head)", a->weights_path, shape_text,
                  CLI_HEATMAP_MAX_PANELS, CLI_HEATMAP_MAX_SIDE, CLI_HEATMAP_MAX_SIDE);
        goto done;
    }
    if (a->labels_path &&
        (key_labels = read_labels("--labels", a->labels_path, Tk, "keys (Tk)")) == NULL)
        goto done;
    if (a->query_labels_path) {
        if ((query_labels = read_labels("--query-labels", a->query_labels_path, Tq,
                                        "queries (Tq)")) == NULL)
            goto done;
    }

    const float *values = (const float *)view.data +
                          (a->batch * H + (a->head >= 0 ? a->head : 0)) * Tq * Tk;
    float minimum = (float)a->minimum, maximum = (float)a->maximum;
    if (!a->minimum_given) { /* 0..1 for probabilities, else the data's range */
        bool probabilities = true;
        for (int64_t n = 0; n < panels * Tq * Tk && probabilities; ++n)
            probabilities = !(values[n] < 0.0f || values[n] > 1.0f); /* NaN passes */
        minimum = 0.0f;
        maximum = probabilities ? 1.0f : 0.0f; /* 0..0: the data's range */
    }
    char title[512], message[1024];
    if (a->title) snprintf(title, sizeof title, "%s", a->title);
    else {
        const char *name = strrchr(a->weights_path, '/');
        name = name ? name + 1 : a->weights_path;
        int used = snprintf(title, sizeof title, "%s", name);
        if (a->layer >= 0 && used < (int)sizeof title)
            used += snprintf(title + used, sizeof title - (size_t)used, ", layer %lld",
                             (long long)a->layer);
        if (B > 1 && used < (int)sizeof title) used += snprintf(title + used, sizeof title - (size_t)used, ", batch %lld",
                                    (long long)a->batch);
        if (a->head >= 0 && used < (int)sizeof title)
            snprintf(title + used, sizeof title - (size_t)used, ", head %lld", (long long)a->head);
        if (!g_utf8_validate(title, -1, NULL)) snprintf(title, sizeof title, "attention weights");
    }
    char head_title[32];
    const char *single_title[1] = {head_title};
    snprintf(head_title, sizeof head_title, "head %lld", (long long)a->head);
    const cli_heatmap map = {
        .values = values, .panels = panels, .rows = Tq, .columns = Tk, .title = title,
        .panel_titles = a->head >= 0 ? single_title : NULL,
        .row_labels = (const char *const *)(query_labels ? query_labels
                                                         : Tq == Tk ? key_labels : NULL),
        .column_labels = (const char *const *)key_labels,
        .row_axis = "query", .column_axis = "key", .minimum = minimum, .maximum = maximum,
    };
    if (cli_heatmap_write(a->out_path, &map, message, sizeof message) != 0) {
        cli_error(command, "--out %s", message);
        goto done;
    }
    code = 0;
done:
    free_labels(key_labels, Tk);
    free_labels(query_labels, Tq);
    cli_input_free(&weights);
    return code;
}

int cli_heatmap_command(int argc, char **argv) {
    heatmap_arguments a;
    memset(&a, 0, sizeof a);
    a.head = -1;
    a.layer = -1;
    bool done = false;
    int code = parse_arguments(argc, argv, &a, &done);
    if (code == 0 && !done) code = draw(&a);
    return code;
}
