/*
 * cmd_forward.c — `attn-bench [forward]`: times attn_forward (and attn_backward with
 * --backward) on a documented grid of shapes and masks and reports the median time, GFLOP/s
 * counted on allowed query–key pairs only, and the fraction of this machine's fp32 FMA peak
 * measured in the same process (peak.c). `attn-bench --peak` prints the peak and the memory
 * bandwidth.
 *
 * FLOP counts per allowed pair (i, j) and per (batch, query head): forward 2·Dk + 2·Dv
 * (= 4·D; S = Q·Kᵀ and O += P·V), backward 4·Dk + 6·Dv... counted as the usual 10·D
 * (S recomputed, dP = dO·Vᵀ, dV += Pᵀ·dO, dQ += dS·K, dK += dSᵀ·Q). Softmax work is free.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arguments.h"
#include "attn.h"
#include "bench_clock.h"
#include "bench_report.h"
#include "bench.h"

#define MAX_LIST 16

typedef struct bench_settings {
    int64_t lengths[MAX_LIST], head_dims[MAX_LIST], query_heads[MAX_LIST], groups[MAX_LIST];
    int length_count, head_dim_count, query_head_count, group_count;
    bench_mask masks[3];
    int mask_count;
    int64_t batch, window;
    int repeats, threads, backward, peak_only, reference, profile;
    attn_kernel_choice kernel;
    attn_dtype dtype;   /* --dtype: of q, k, v, out (F32, BF16 or F16) */
    bench_clock clock;  /* --clock wall (default) or cpu */
    double peak_gflops; /* > 0: given with --peak-gflops, no measurement */
    double dropout;     /* --dropout: attention dropout probability (0 = off) */
    const char *csv_path, *markdown_path, *plot_path;
} bench_settings;

static void print_help(FILE *stream) {
    fprintf(stream,
        "usage: attn-bench [forward] [options]   time attn_forward on a grid of shapes\n"
        "       attn-bench --peak                print this machine's FMA peak (and bf16\n"
        "                                        VDPBF16PS / AMX / fp16 AMX-FP16 peaks where\n"
        "                                        present) and read bandwidth\n\n"
        "The default grid (B = 1): T in 512,1024,2048,4096,8192,16384; Hq in 8,32; Hkv = Hq and\n"
        "Hq/4 (--groups 1,4); D in 64,128; masks none, causal and a causal sliding window of 256\n"
        "keys per query. Q = K = V length T. Reported: median of --repeats timed runs after one\n"
        "warm-up, GFLOP/s = 4*D*allowed_pairs*B*Hq / median (allowed pairs counted exactly:\n"
        "T^2, T(T+1)/2, sum_i min(i+1, W)), and the fraction of the FMA peak measured first.\n\n"
        "options:\n"
        "  --quick             T in 512..4096, Hq 8 (everything else as the grid)\n"
        "  --t LIST            sequence lengths, e.g. --t 4096 or --t 1024,2048\n"
        "  --d LIST            head dims (Dk = Dv)\n"
        "  --heads LIST        query heads Hq\n"
        "  --groups LIST       query heads per KV head (Hkv = Hq / group), default 1,4\n"
        "  --masks LIST        of none, causal, window (default all three)\n"
        "  --window W          keys per query of the sliding window (default 256)\n"
        "  --batch B           batch size (default 1)\n"
        "  --repeats N         timed runs per configuration after a warm-up (default 5); when\n"
        "                      the warm-up takes > 1 s it counts as a run and 3 are taken\n"
        "                      (over 4 s: 2), to keep the full grid under 10 minutes\n"
        "  --threads N         threads (default: all, as OpenMP decides)\n"
        "  --kernel NAME       auto, generic, avx2, avx512, avx512_bf16 or amx (default auto)\n"
        "  --dtype TYPE        f32, bf16 or f16: the type of Q, K, V and O (default f32); 16-bit\n"
        "                      rows say how they ran (bf16 / f16 tiles, or converted to fp32)\n"
        "                      and compare with the peak of what ran (the backward widens\n"
        "                      16-bit inputs and runs in fp32)\n"
        "  --backward          also time attn_backward (rows skipped if it is unsupported)\n"
        "  --dropout P         with attention dropout of probability P (GFLOP/s count the\n"
        "                      same pairs: the mask's cost shows as a lower rate)\n"
        "  --reference         time attn_reference_forward (the naive oracle) instead\n"
        "  --profile           then, per head dim, where one forward tile step's cycles go\n"
        "                      (scores, softmax, rescale, P.V, packing; one thread)\n"
        "  --peak-gflops X     use X as the peak instead of measuring it\n"
        "  --clock wall|cpu    time runs and the peak by wall clock (default) or by process CPU\n"
        "                      time per thread (for a shared machine: counts only running time)\n"
        "  --csv FILE          write the results as CSV\n"
        "  --markdown FILE     write the Markdown table to FILE (it is always printed)\n"
        "  --plot FILE         write a chart of GFLOP/s against T (.png or .svg)\n");
}

/* Parses "a,b,c" of positive integers into list; returns the count, 0 on error. */
static int parse_list(const char *text, int64_t *list) {
    int count = 0;
    const char *p = text;
    while (*p && count < MAX_LIST) {
        char *end;
        const long long value = strtoll(p, &end, 10);
        if (end == p || value <= 0 || (*end != ',' && *end != '\0')) return 0;
        list[count++] = value;
        p = *end == ',' ? end + 1 : end;
    }
    return *p ? 0 : count;
}

static int set_list(const char *option, const char *value, int64_t *list, int *count) {
    *count = value ? parse_list(value, list) : 0;
    if (*count == 0) {
        fprintf(stderr, "attn-bench: %s '%s': expected a comma-separated list of positive integers\n",
                option, value ? value : "");
        return 0;
    }
    return 1;
}

static void default_settings(bench_settings *s) {
    memset(s, 0, sizeof *s);
    const int64_t lengths[] = {512, 1024, 2048, 4096, 8192, 16384};
    memcpy(s->lengths, lengths, sizeof lengths);
    s->length_count = 6;
    s->head_dims[0] = 64, s->head_dims[1] = 128, s->head_dim_count = 2;
    s->query_heads[0] = 8, s->query_heads[1] = 32, s->query_head_count = 2;
    s->groups[0] = 1, s->groups[1] = 4, s->group_count = 2;
    s->masks[0] = BENCH_MASK_NONE, s->masks[1] = BENCH_MASK_CAUSAL, s->masks[2] = BENCH_MASK_WINDOW;
    s->mask_count = 3;
    s->batch = 1;
    s->window = 256;
    s->repeats = 5;
    s->kernel = ATTN_KERNEL_AUTO;
    s->dtype = ATTN_DTYPE_F32;
}

/* Returns 0 to run, 1 to exit successfully (help), 2 on a usage error. */
static int parse_arguments(int argc, char **argv, bench_settings *s) {
    default_settings(s);
    for (int i = 1; i < argc; ++i) {
        const char *option = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t number[MAX_LIST];
        if (!strcmp(option, "--help") || !strcmp(option, "-h")) {
            print_help(stdout);
            return 1;
        } else if (!strcmp(option, "--quick")) {
            const int64_t lengths[] = {512, 1024, 2048, 4096};
            memcpy(s->lengths, lengths, sizeof lengths);
            s->length_count = 4;
            s->query_heads[0] = 8, s->query_head_count = 1;
        } else if (!strcmp(option, "--peak")) {
            s->peak_only = 1;
        } else if (!strcmp(option, "--dtype")) {
            ++i;
            if (value && !strcmp(value, "f32")) s->dtype = ATTN_DTYPE_F32;
            else if (value && !strcmp(value, "bf16")) s->dtype = ATTN_DTYPE_BF16;
            else if (value && !strcmp(value, "f16")) s->dtype = ATTN_DTYPE_F16;
            else {
                fprintf(stderr, "attn-bench: --dtype '%s': expected f32, bf16 or f16\n",
                        value ? value : "");
                return 2;
            }
        } else if (!strcmp(option, "--backward")) {
            s->backward = 1;
        } else if (!strcmp(option, "--reference")) {
            s->reference = 1;
        } else if (!strcmp(option, "--profile")) {
            s->profile = 1;
        } else if (!strcmp(option, "--t")) {
            if (!set_list(option, value, s->lengths, &s->length_count)) return 2;
            ++i;
        } else if (!strcmp(option, "--d")) {
            if (!set_list(option, value, s->head_dims, &s->head_dim_count)) return 2;
            ++i;
        } else if (!strcmp(option, "--heads")) {
            if (!set_list(option, value, s->query_heads, &s->query_head_count)) return 2;
            ++i;
        } else if (!strcmp(option, "--groups")) {
            if (!set_list(option, value, s->groups, &s->group_count)) return 2;
            ++i;
        } else if (!strcmp(option, "--window") || !strcmp(option, "--batch") ||
                   !strcmp(option, "--repeats") || !strcmp(option, "--threads")) {
            if (!value || parse_list(value, number) != 1) {
                fprintf(stderr, "attn-bench: %s '%s': expected one positive integer\n", option,
                        value ? value : "");
                return 2;
            }
            if (!strcmp(option, "--threads") && number[0] > ATTN_MAX_THREADS) {
                fprintf(stderr, "attn-bench: --threads '%s': expected an integer in 1..%d (the "
                        "library's ATTN_MAX_THREADS)\n", value, ATTN_MAX_THREADS);
                return 2;
            }
            if (!strcmp(option, "--window")) s->window = number[0];
            else if (!strcmp(option, "--batch")) s->batch = number[0];
            else if (!strcmp(option, "--repeats")) s->repeats = (int)number[0];
            else s->threads = (int)number[0];
            ++i;
        } else if (!strcmp(option, "--masks")) {
            s->mask_count = 0;
            char copy[128];
            snprintf(copy, sizeof copy, "%s", value ? value : "");
            for (char *name = strtok(copy, ","); name; name = strtok(NULL, ",")) {
                bench_mask mask;
                if (!strcmp(name, "none")) mask = BENCH_MASK_NONE;
                else if (!strcmp(name, "causal")) mask = BENCH_MASK_CAUSAL;
                else if (!strcmp(name, "window")) mask = BENCH_MASK_WINDOW;
                else {
                    fprintf(stderr, "attn-bench: --masks '%s': '%s' is not none, causal or window\n",
                            value, name);
                    return 2;
                }
                if (s->mask_count < 3) s->masks[s->mask_count++] = mask;
            }
            if (s->mask_count == 0) {
                fprintf(stderr, "attn-bench: --masks '%s': expected none, causal and/or window\n",
                        value ? value : "");
                return 2;
            }
            ++i;
        } else if (!strcmp(option, "--kernel")) {
            if (!cli_parse_kernel(value, &s->kernel)) {
                fprintf(stderr, "attn-bench: --kernel '%s': expected " CLI_KERNEL_NAMES "\n",
                        value ? value : "");
                return 2;
            }
            ++i;
        } else if (!strcmp(option, "--clock")) {
            if (value && !strcmp(value, "wall")) s->clock = BENCH_CLOCK_WALL;
            else if (value && !strcmp(value, "cpu")) s->clock = BENCH_CLOCK_CPU;
            else {
                fprintf(stderr, "attn-bench: --clock '%s': expected wall or cpu\n", value ? value : "");
                return 2;
            }
            ++i;
        } else if (!strcmp(option, "--dropout")) {
            char *end = NULL;
            s->dropout = value ? strtod(value, &end) : -1;
            if (!value || *end || !(s->dropout >= 0 && s->dropout < 1)) {
                fprintf(stderr, "attn-bench: --dropout '%s': expected a probability in [0, 1)\n",
                        value ? value : "");
                return 2;
            }
            ++i;
        } else if (!strcmp(option, "--peak-gflops")) {
            char *end = NULL;
            s->peak_gflops = value ? strtod(value, &end) : 0;
            if (!value || *end || !(s->peak_gflops > 0)) {
                fprintf(stderr, "attn-bench: --peak-gflops '%s': expected a positive number\n",
                        value ? value : "");
                return 2;
            }
            ++i;
        } else if (!strcmp(option, "--csv") || !strcmp(option, "--markdown") ||
                   !strcmp(option, "--plot")) {
            if (!value) {
                fprintf(stderr, "attn-bench: %s: expected a file name\n", option);
                return 2;
            }
            if (!strcmp(option, "--csv")) s->csv_path = value;
            else if (!strcmp(option, "--markdown")) s->markdown_path = value;
            else s->plot_path = value;
            ++i;
        } else {
            fprintf(stderr, "attn-bench: unknown option '%s' (see attn-bench --help)\n", option);
            return 2;
        }
    }
    for (int g = 0; g < s->group_count; ++g)
        for (int h = 0; h < s->query_head_count; ++h)
            if (s->query_heads[h] % s->groups[g] != 0) {
                fprintf(stderr, "attn-bench: --groups %lld does not divide --heads %lld\n",
                        (long long)s->groups[g], (long long)s->query_heads[h]);
                return 2;
            }
    return 0;
}

/* Allowed (query, key) pairs of one (batch, head) with Tq = Tk = length. */
static double allowed_pairs(bench_mask mask, int64_t length, int64_t window) {
    const double t = (double)length;
    if (mask == BENCH_MASK_NONE) return t * t;
    if (mask == BENCH_MASK_CAUSAL) return t * (t + 1) / 2;
    double pairs = 0; /* query i sees keys max(0, i - window + 1) .. i */
    for (int64_t i = 0; i < length; ++i) pairs += (double)(i + 1 < window ? i + 1 : window);
    return pairs;
}

static attn_options make_options(const bench_settings *s, bench_mask mask) {
    attn_options options = attn_options_default();
    if (mask != BENCH_MASK_NONE) {
        options.causal = 1;
        options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    }
    if (mask == BENCH_MASK_WINDOW) {
        options.window = 1;
        options.window_left = s->window - 1;
        options.window_right = 0;
    }
    options.dropout_p = (float)s->dropout;
    options.dropout_seed = 1;
    return options;
}

static attn_execution make_execution(const bench_settings *s) {
    attn_execution execution = attn_execution_default();
    execution.num_threads = s->threads;
    execution.kernel = s->kernel;
    return execution;
}

static void fill_uniform(float *data, size_t count, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) {
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
        data[i] = (float)((double)(x >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The tensors of one configuration (forward; backward ones when asked). */
typedef struct bench_tensors {
    float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
    uint16_t *half[8]; /* --dtype bf16 / f16: q, k, v, out, dout, dq, dk, dv */
    attn_tensor tq, tk, tv, tout, tlse, tdout, tdq, tdk, tdv;
} bench_tensors;

static void free_tensors(bench_tensors *t) {
    free(t->q), free(t->k), free(t->v), free(t->out), free(t->lse);
    free(t->dout), free(t->dq), free(t->dk), free(t->dv);
    for (int n = 0; n < 8; ++n) free(t->half[n]);
}

/* Replaces the fp32 view *view by a `dtype` tensor of its shape: a copy of it (rounded to
 * nearest) for an input, uninitialised for an output; 0 when out of memory. */
static int to_half_view(attn_tensor *view, attn_dtype dtype, uint16_t **storage, int input) {
    const size_t count = (size_t)(view->shape[0] * view->shape[1] * view->shape[2] * view->shape[3]);
    *storage = malloc(count * sizeof(uint16_t));
    if (*storage == NULL) return 0;
    attn_tensor half = attn_tensor_contiguous(*storage, dtype, 4, view->shape);
    if (input && attn_tensor_convert(view, &half, NULL) != ATTN_OK) return 0; /* [-1, 1] fits */
    *view = half;
    return 1;
}

static int allocate_tensors(bench_tensors *t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                            int64_t D, int backward, attn_dtype dtype) {
    memset(t, 0, sizeof *t);
    const size_t query_floats = (size_t)(B * T * Hq * D), key_floats = (size_t)(B * T * Hkv * D);
    t->q = malloc(query_floats * 4), t->out = malloc(query_floats * 4);
    t->k = malloc(key_floats * 4), t->v = malloc(key_floats * 4);
    t->lse = malloc((size_t)(B * Hq * T) * 4);
    if (backward) {
        t->dout = malloc(query_floats * 4), t->dq = malloc(query_floats * 4);
        t->dk = malloc(key_floats * 4), t->dv = malloc(key_floats * 4);
    }
    if (!t->q || !t->out || !t->k || !t->v || !t->lse ||
        (backward && (!t->dout || !t->dq || !t->dk || !t->dv))) {
        free_tensors(t);
        return 0;
    }
    fill_uniform(t->q, query_floats, 1), fill_uniform(t->k, key_floats, 2);
    fill_uniform(t->v, key_floats, 3);
    t->tq = attn_tensor_f32_4d(t->q, B, T, Hq, D), t->tout = attn_tensor_f32_4d(t->out, B, T, Hq, D);
    t->tk = attn_tensor_f32_4d(t->k, B, T, Hkv, D), t->tv = attn_tensor_f32_4d(t->v, B, T, Hkv, D);
    const int64_t lse_shape[3] = {B, Hq, T};
    t->tlse = attn_tensor_contiguous(t->lse, ATTN_DTYPE_F32, 3, lse_shape);
    if (backward) {
        fill_uniform(t->dout, query_floats, 4);
        t->tdout = attn_tensor_f32_4d(t->dout, B, T, Hq, D);
        t->tdq = attn_tensor_f32_4d(t->dq, B, T, Hq, D);
        t->tdk = attn_tensor_f32_4d(t->dk, B, T, Hkv, D);
        t->tdv = attn_tensor_f32_4d(t->dv, B, T, Hkv, D);
    }
    if (dtype != ATTN_DTYPE_F32) {
        attn_tensor *views[8] = {&t->tq, &t->tk, &t->tv, &t->tout,
                                 &t->tdout, &t->tdq, &t->tdk, &t->tdv};
        for (int n = 0; n < (backward ? 8 : 4); ++n)
            if (!to_half_view(views[n], dtype, &t->half[n], n < 3 || n == 4)) {
                free_tensors(t);
                return 0;
            }
    }
    return 1;
}

static attn_status run_once(int backward, int reference, bench_tensors *t,
                            const attn_options *options, const attn_execution *execution,
                            attn_error *error) {
    if (reference)
        return attn_reference_forward(&t->tq, &t->tk, &t->tv, options, &t->tout, &t->tlse, error);
    if (!backward)
        return attn_forward(&t->tq, &t->tk, &t->tv, options, &t->tout, &t->tlse, execution, error);
    return attn_backward(&t->tq, &t->tk, &t->tv, &t->tout, &t->tlse, &t->tdout, options, &t->tdq,
                         &t->tdk, &t->tdv, NULL, execution, error);
}

/* Times one configuration into `result` (status "ok" or the failing status's name). */
static void measure(const bench_settings *s, bench_tensors *t, int backward, bench_result *result) {
    const attn_options options = make_options(s, result->mask);
    const attn_execution execution = make_execution(s);
    attn_error error;
    double times[64];
    attn_status status = ATTN_OK;
    if (backward)
        status = attn_forward(&t->tq, &t->tk, &t->tv, &options, &t->tout, &t->tlse, &execution,
                              &error);
    int repeats = s->repeats < 64 ? s->repeats : 64;
    const int threads = s->threads > 0 ? s->threads : omp_get_max_threads();
    /* The warm-up is timed too: a run of over 1 s warms up everything that matters within its
     * first milliseconds, so it then counts as the first sample and 3 (over 4 s: 2) samples
     * are taken in all, which keeps the full grid near 8 minutes on a quiet machine. */
    int first = 0;
    if (status == ATTN_OK) {
        const double start = bench_clock_seconds(s->clock, threads);
        status = run_once(backward, s->reference, t, &options, &execution, &error);
        const double warm_up = bench_clock_seconds(s->clock, threads) - start;
        if (warm_up > 1.0) {
            times[0] = warm_up;
            first = 1;
            repeats = warm_up > 4.0 ? 2 : 3;
            if (repeats > s->repeats) repeats = s->repeats;
        }
    }
    for (int r = first; status == ATTN_OK && r < repeats; ++r) {
        const double start = bench_clock_seconds(s->clock, threads);
        status = run_once(backward, s->reference, t, &options, &execution, &error);
        times[r] = bench_clock_seconds(s->clock, threads) - start;
    }
    if (status != ATTN_OK) {
        result->status = attn_status_name(status);
        return;
    }
    qsort(times, (size_t)repeats, sizeof times[0], compare_doubles);
    result->repeats = repeats;
    result->median_seconds = repeats % 2 ? times[repeats / 2]
                                         : 0.5 * (times[repeats / 2 - 1] + times[repeats / 2]);
    const double flops_per_pair = (backward ? 10.0 : 4.0) * (double)result->head_dim;
    result->gflops = flops_per_pair * result->allowed_pairs * (double)(result->batch * result->query_heads) /
                     result->median_seconds * 1e-9;
    result->status = "ok";
}

static void draw_progress(int done, int total, const bench_result *current) {
    if (!isatty(STDERR_FILENO)) return;
    const int width = 30, filled = total > 0 ? done * width / total : width;
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; ++i) fputc(i < filled ? '#' : '.', stderr);
    if (current)
        fprintf(stderr, "] %d/%d %s T=%lld Hq=%lld Hkv=%lld D=%lld %-7s", done, total, current->pass,
                (long long)current->length, (long long)current->query_heads,
                (long long)current->kv_heads, (long long)current->head_dim,
                bench_mask_name(current->mask));
    else
        fprintf(stderr, "] %d/%d done%40s\n", done, total, "");
    fflush(stderr);
}

static int write_outputs(const bench_settings *s, const bench_result *results, int count,
                         double peak, double bandwidth, const char *command_line) {
    bench_write_markdown(stdout, results, count, peak, bandwidth, command_line);
    fflush(stdout); /* before --csv /dev/stdout writes through its own stream */
    int ok = 1;
    if (s->markdown_path) {
        FILE *file = fopen(s->markdown_path, "w");
        if (file) bench_write_markdown(file, results, count, peak, bandwidth, command_line);
        if (!file || fclose(file) != 0) {
            fprintf(stderr, "attn-bench: --markdown '%s': cannot write the file\n", s->markdown_path);
            ok = 0;
        }
    }
    if (s->csv_path) {
        FILE *file = fopen(s->csv_path, "w");
        if (file) bench_write_csv(file, results, count, peak);
        if (!file || fclose(file) != 0) {
            fprintf(stderr, "attn-bench: --csv '%s': cannot write the file\n", s->csv_path);
            ok = 0;
        }
    }
    if (s->plot_path) {
        char reason[256];
        if (bench_write_plot(s->plot_path, results, count, peak, reason) != 0) {
            fprintf(stderr, "attn-bench: --plot '%s': %s\n", s->plot_path, reason);
            ok = 0;
        }
    }
    return ok;
}

/* One line of `attn-bench --peak`: "<name> peak: X GFLOP/s (how)", or why it is missing
 * (peak <= 0: the CPU, the OS or the build lacks the unit). */
static void print_peak_line(const char *name, double peak, const char *clock_note,
                            const char *how, const char *missing) {
    if (peak > 0)
        printf("%s peak: %.1f GFLOP/s%s (%s)\n", name, peak, clock_note, how);
    else
        printf("%s peak: not available (%s)\n", name, missing);
}

int bench_forward(int argc, char **argv) {
    bench_settings s;
    const int parsed = parse_arguments(argc, argv, &s);
    if (parsed != 0) return parsed == 1 ? 0 : 2;
    const int threads = s.threads > 0 ? s.threads : omp_get_max_threads();

    if (s.peak_only) {
        const char *clock_note = s.clock == BENCH_CLOCK_CPU ? " (CPU time)" : "";
        printf("threads: %d\nfp32 FMA peak: %.1f GFLOP/s%s\n", threads,
               bench_measure_fma_peak(threads, s.clock), clock_note);
        print_peak_line("bf16 VDPBF16PS", bench_measure_bf16_peak(threads, s.clock), clock_note,
                        "16 zmm chains, 64 flops each", "CPU or build without AVX512-BF16");
        print_peak_line("bf16 AMX TDPBF16PS", bench_measure_amx_peak(threads, s.clock),
                        clock_note, "4 accumulator tiles, no loads",
                        "CPU, OS permission or build without AMX");
        print_peak_line("fp16 AMX-FP16 TDPFP16PS", bench_measure_amx_fp16_peak(threads, s.clock),
                        clock_note, "4 accumulator tiles, no loads",
                        "CPU without AMX-FP16, OS permission or build");
        printf("memory read bandwidth: %.1f GB/s\n", bench_measure_read_bandwidth_gbs(threads));
        return 0;
    }
    const char *kernel_name = attn_kernel_name(s.kernel);
    if (kernel_name == NULL) {
        fprintf(stderr, "attn-bench: --kernel: this CPU or build cannot run the %s kernels\n",
                s.kernel == ATTN_KERNEL_AVX2 ? "AVX2" : s.kernel == ATTN_KERNEL_AVX512 ? "AVX-512" : "requested");
        return 1;
    }
    /* What runs: fp32 kernels (f32, f16 / bf16 widened at packing) against the FMA peak, or
     * bf16 / fp16 tiles against their own peak. */
    const char *bf16_tiles = s.dtype == ATTN_DTYPE_BF16 ? attn_kernel_bf16_tiles(s.kernel) : NULL;
    const char *f16_tiles = s.dtype == ATTN_DTYPE_F16 ? attn_kernel_f16_tiles(s.kernel) : NULL;
    static char kernel_label[96];
    if (s.dtype == ATTN_DTYPE_F32)
        snprintf(kernel_label, sizeof kernel_label, "%s", kernel_name);
    else if (bf16_tiles != NULL)
        snprintf(kernel_label, sizeof kernel_label, "%s bf16 tiles (%s)", kernel_name, bf16_tiles);
    else if (f16_tiles != NULL)
        snprintf(kernel_label, sizeof kernel_label, "%s f16 tiles (%s)", kernel_name, f16_tiles);
    else
        snprintf(kernel_label, sizeof kernel_label, "%s %s as fp32", kernel_name,
                 s.dtype == ATTN_DTYPE_BF16 ? "bf16" : "f16");
    double peak = s.peak_gflops;
    if (!(peak > 0) && bf16_tiles != NULL) {
        const int amx = strcmp(bf16_tiles, "amx") == 0;
        peak = amx ? bench_measure_amx_peak(threads, s.clock) : bench_measure_bf16_peak(threads, s.clock);
        bench_report_set_peak_name(amx ? "bf16 AMX TDPBF16PS peak" : "bf16 VDPBF16PS peak");
    } else if (!(peak > 0) && f16_tiles != NULL) {
        peak = bench_measure_amx_fp16_peak(threads, s.clock);
        bench_report_set_peak_name("fp16 AMX-FP16 TDPFP16PS peak");
    }
    if (!(peak > 0)) peak = bench_measure_fma_peak(threads, s.clock);

    /* The command as run, with the OpenMP wait policy when set (it matters for --clock cpu). */
    char command_line[512] = "";
    const char *wait_policy = getenv("OMP_WAIT_POLICY");
    if (wait_policy != NULL && strlen(wait_policy) < 64)
        snprintf(command_line, sizeof command_line, "OMP_WAIT_POLICY=%s ", wait_policy);
    strncat(command_line, "attn-bench", sizeof command_line - strlen(command_line) - 1);
    for (int i = 1; i < argc; ++i) {
        strncat(command_line, " ", sizeof command_line - strlen(command_line) - 1);
        strncat(command_line, argv[i], sizeof command_line - strlen(command_line) - 1);
    }

    const int passes = s.backward && !s.reference ? 2 : 1;
    const int total = s.query_head_count * s.group_count * s.head_dim_count * s.mask_count *
                      s.length_count * passes;
    bench_result *results = calloc((size_t)total, sizeof *results);
    if (!results) {
        fprintf(stderr, "attn-bench: out of memory\n");
        return 1;
    }
    int count = 0, backward_supported = 1;
    for (int pass = 0; pass < passes; ++pass)
        for (int h = 0; h < s.query_head_count; ++h)
            for (int g = 0; g < s.group_count; ++g)
                for (int d = 0; d < s.head_dim_count; ++d)
                    for (int m = 0; m < s.mask_count; ++m)
                        for (int l = 0; l < s.length_count; ++l) {
                            bench_result *r = &results[count++];
                            r->pass = pass ? "backward" : s.reference ? "reference" : "forward";
                            r->batch = s.batch, r->length = s.lengths[l];
                            r->query_heads = s.query_heads[h];
                            r->kv_heads = s.query_heads[h] / s.groups[g];
                            r->head_dim = s.head_dims[d], r->mask = s.masks[m];
                            r->window = r->mask == BENCH_MASK_WINDOW ? s.window : 0;
                            r->threads = threads, r->kernel = kernel_label;
                            r->allowed_pairs = allowed_pairs(r->mask, r->length, s.window);
                            draw_progress(count - 1, total, r);
                            if (pass == 1 && !backward_supported) {
                                r->status = "ATTN_ERROR_UNSUPPORTED";
                                continue;
                            }
                            bench_tensors tensors;
                            if (!allocate_tensors(&tensors, r->batch, r->length, r->query_heads,
                                                  r->kv_heads, r->head_dim, pass, s.dtype)) {
                                r->status = "out-of-memory";
                                continue;
                            }
                            measure(&s, &tensors, pass, r);
                            if (pass == 1 && strcmp(r->status, "ATTN_ERROR_UNSUPPORTED") == 0)
                                backward_supported = 0;
                            r->peak_fraction = peak > 0 ? r->gflops / peak : 0;
                            free_tensors(&tensors);
                        }
    draw_progress(count, total, NULL);
    if (!backward_supported)
        fprintf(stderr, "attn-bench: attn_backward is not available in this build; backward rows skipped\n");
    int ok = write_outputs(&s, results, count, peak, 0.0, command_line);
    free(results);
    if (s.profile && bench_forward_profile(s.kernel, s.head_dims, s.head_dim_count) != 0) ok = 0;
    return ok ? 0 : 1;
}
