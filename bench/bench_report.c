/*
 * bench_report.c — writers for `attn-bench` results: Markdown, CSV and the plot (PNG or SVG).
 */
#include "bench_report.h"

#include <stdlib.h>
#include <string.h>

#include "bench_plot.h"

const char *bench_mask_name(bench_mask mask) {
    switch (mask) {
    case BENCH_MASK_NONE: return "none";
    case BENCH_MASK_CAUSAL: return "causal";
    case BENCH_MASK_WINDOW: return "window";
    }
    return "?";
}

static void mask_label(const bench_result *r, char *text, size_t size) {
    if (r->mask == BENCH_MASK_WINDOW)
        snprintf(text, size, "window %lld", (long long)r->window);
    else
        snprintf(text, size, "%s", bench_mask_name(r->mask));
}

/* What the peak of the report is (bench_report_set_peak_name). */
static const char *peak_name = "fp32 FMA peak";

void bench_report_set_peak_name(const char *name) { peak_name = name; }

void bench_write_markdown(FILE *stream, const bench_result *results, int count, double peak_gflops,
                          double bandwidth_gbs, const char *command_line) {
    if (command_line) fprintf(stream, "Command: `%s`\n\n", command_line);
    fprintf(stream, "Measured %s: %.1f GFLOP/s", peak_name, peak_gflops);
    if (bandwidth_gbs > 0) fprintf(stream, "; memory read bandwidth: %.1f GB/s", bandwidth_gbs);
    fprintf(stream, " (same process, same threads).\n\n");
    fprintf(stream, "| pass | B | T | Hq | Hkv | D | mask | threads | kernel | runs | median ms | "
                    "GFLOP/s | %% of peak |\n");
    fprintf(stream, "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < count; ++i) {
        const bench_result *r = &results[i];
        char mask[32];
        mask_label(r, mask, sizeof mask);
        if (strcmp(r->status, "ok") != 0) {
            fprintf(stream, "| %s | %lld | %lld | %lld | %lld | %lld | %s | %d | %s | - | %s | - | - |\n",
                    r->pass, (long long)r->batch, (long long)r->length, (long long)r->query_heads,
                    (long long)r->kv_heads, (long long)r->head_dim, mask, r->threads, r->kernel,
                    r->status);
            continue;
        }
        fprintf(stream, "| %s | %lld | %lld | %lld | %lld | %lld | %s | %d | %s | %d | %.3f | %.1f | %.1f%% |\n",
                r->pass, (long long)r->batch, (long long)r->length, (long long)r->query_heads,
                (long long)r->kv_heads, (long long)r->head_dim, mask, r->threads, r->kernel,
                r->repeats, r->median_seconds * 1e3, r->gflops, r->peak_fraction * 100.0);
    }
}

void bench_write_csv(FILE *stream, const bench_result *results, int count, double peak_gflops) {
    fprintf(stream, "pass,batch,length,query_heads,kv_heads,head_dim,mask,window,threads,kernel,"
                    "repeats,median_seconds,allowed_pairs_per_head,gflops,peak_gflops,"
                    "peak_fraction,status\n");
    for (int i = 0; i < count; ++i) {
        const bench_result *r = &results[i];
        fprintf(stream, "%s,%lld,%lld,%lld,%lld,%lld,%s,%lld,%d,%s,%d,%.6g,%.0f,%.3f,%.3f,%.4f,%s\n",
                r->pass, (long long)r->batch, (long long)r->length, (long long)r->query_heads,
                (long long)r->kv_heads, (long long)r->head_dim, bench_mask_name(r->mask),
                (long long)r->window, r->threads, r->kernel, r->repeats, r->median_seconds,
                r->allowed_pairs, r->gflops, peak_gflops, r->peak_fraction, r->status);
    }
}

/* Whether two results belong to the same plotted series (everything but T). */
static int same_series(const bench_result *a, const bench_result *b) {
    return strcmp(a->pass, b->pass) == 0 && a->batch == b->batch &&
           a->query_heads == b->query_heads && a->kv_heads == b->kv_heads &&
           a->head_dim == b->head_dim && a->mask == b->mask && a->window == b->window;
}

int bench_write_plot(const char *path, const bench_result *results, int count, double peak_gflops,
                     char *reason) {
    bench_plot_series *series = calloc((size_t)count + 1, sizeof *series);
    double *xs = calloc((size_t)count + 1, sizeof *xs), *ys = calloc((size_t)count + 1, sizeof *ys);
    char (*labels)[64] = calloc((size_t)count + 1, sizeof *labels);
    int *used = calloc((size_t)count + 1, sizeof *used);
    if (!series || !xs || !ys || !labels || !used) {
        free(series), free(xs), free(ys), free(labels), free(used);
        snprintf(reason, 256, "out of memory");
        return -1;
    }
    int series_count = 0, points = 0;
    for (int i = 0; i < count; ++i) {
        if (used[i] || strcmp(results[i].status, "ok") != 0) continue;
        bench_plot_series *s = &series[series_count];
        char mask[32];
        mask_label(&results[i], mask, sizeof mask);
        snprintf(labels[series_count], sizeof labels[0], "%s%sH%lld/%lld D%lld %s",
                 strcmp(results[i].pass, "forward") == 0 ? "" : results[i].pass,
                 strcmp(results[i].pass, "forward") == 0 ? "" : " ",
                 (long long)results[i].query_heads, (long long)results[i].kv_heads,
                 (long long)results[i].head_dim, mask);
        s->label = labels[series_count];
        s->x = xs + points;
        s->y = ys + points;
        for (int j = i; j < count; ++j) {
            if (used[j] || strcmp(results[j].status, "ok") != 0 || !same_series(&results[i], &results[j]))
                continue;
            used[j] = 1;
            xs[points] = (double)results[j].length;
            ys[points] = results[j].gflops;
            ++points;
            ++s->point_count;
        }
        ++series_count;
    }
    char peak_label[64];
    snprintf(peak_label, sizeof peak_label, "measured %s %.0f GFLOP/s", peak_name, peak_gflops);
    const int result = bench_plot_write(path, "attn forward: GFLOP/s (allowed pairs) vs T",
                                        "sequence length T (log2 axis)", "GFLOP/s", series,
                                        series_count, peak_gflops, peak_label, reason);
    free(series), free(xs), free(ys), free(labels), free(used);
    return result;
}
