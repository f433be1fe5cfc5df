/*
 * cmd_small.c — `attn-bench small`: the time of one small attn_forward call, the calls
 * a generation or serving loop makes (a few query rows against a cache of a few hundred keys),
 * against Tk. For each Tk it alternates rounds of one thread, of the default call and (with
 * --threads N) of N threads, and prints each one's median
 * time per call in microseconds, and one thread's GFLOP/s; the first row (Tk = 16 by default)
 * is the call's fixed cost. Another process busy on a core shows here as the default call's time
 * against one thread's (docs/architecture.md, "Threads").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn.h"
#include "bench.h"

enum { SMALL_MAX_LENGTHS = 32, SMALL_ROUNDS_DEFAULT = 21, SMALL_MODES = 3 };

typedef struct small_settings {
    int64_t query_rows, query_heads, kv_heads, head_dim;
    int64_t lengths[SMALL_MAX_LENGTHS];
    int length_count, threads, rounds;
} small_settings;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int parse_count(const char *text, int64_t low, int64_t high, int64_t *value) {
    char *end = NULL;
    const long long parsed = text != NULL ? strtoll(text, &end, 10) : 0;
    if (text == NULL || end == text || *end != '\0' || parsed < low || parsed > high) return 0;
    *value = parsed;
    return 1;
}

static int parse_lengths(const char *text, small_settings *s) {
    s->length_count = 0;
    char copy[512];
    if (text == NULL || strlen(text) >= sizeof copy) return 0;
    strcpy(copy, text);
    for (char *part = strtok(copy, ","); part != NULL; part = strtok(NULL, ",")) {
        if (s->length_count == SMALL_MAX_LENGTHS ||
            !parse_count(part, 1, 1 << 24, &s->lengths[s->length_count]))
            return 0;
        ++s->length_count;
    }
    return s->length_count > 0;
}

static void print_usage(void) {
    printf("usage: attn-bench small [--tq N] [--heads Hq] [--kv-heads Hkv] [--d D]\n"
           "                        [--lengths T1,T2,...] [--threads N] [--rounds R]\n"
           "  per-call time of attn_forward (float32, no mask) against Tk: one thread, N threads\n"
           "  (default: attn's default) and the default call, alternated round by round;\n"
           "  defaults --tq 1 --heads 16 --kv-heads 4 --d 64 --lengths 16,128,576,2048,8192\n");
}

/* 0: parsed, 1: --help, 2: a bad option (one line printed). */
static int parse_small(int argc, char **argv, small_settings *s) {
    *s = (small_settings){1, 16, 4, 64, {16, 128, 576, 2048, 8192}, 5, 0, SMALL_ROUNDS_DEFAULT};
    for (int i = 1; i < argc; ++i) {
        const char *option = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t number = 0;
        int ok = 1;
        if (!strcmp(option, "--help") || !strcmp(option, "-h")) {
            print_usage();
            return 1;
        } else if (!strcmp(option, "--lengths")) {
            ok = parse_lengths(value, s);
        } else if (!strcmp(option, "--tq") || !strcmp(option, "--heads") ||
                   !strcmp(option, "--kv-heads") || !strcmp(option, "--d") ||
                   !strcmp(option, "--threads") || !strcmp(option, "--rounds")) {
            ok = parse_count(value, 1, !strcmp(option, "--threads") ? ATTN_MAX_THREADS : 1 << 20,
                             &number);
            if (!strcmp(option, "--tq")) s->query_rows = number;
            else if (!strcmp(option, "--heads")) s->query_heads = number;
            else if (!strcmp(option, "--kv-heads")) s->kv_heads = number;
            else if (!strcmp(option, "--d")) s->head_dim = number;
            else if (!strcmp(option, "--threads")) s->threads = (int)number;
            else s->rounds = (int)(number < 201 ? number : 201);
        } else {
            fprintf(stderr, "attn-bench small: unknown option '%s' (see --help)\n", option);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "attn-bench small: %s '%s': not a valid value\n", option,
                    value ? value : "(missing)");
            return 2;
        }
        ++i;
    }
    if (s->query_heads % s->kv_heads != 0) {
        fprintf(stderr, "attn-bench small: --kv-heads %lld must divide --heads %lld\n",
                (long long)s->kv_heads, (long long)s->query_heads);
        return 2;
    }
    return 0;
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call of `calls` calls; 0 after a failed call (its message printed). */
static double time_calls(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                         attn_tensor *out, int threads, int calls) {
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    attn_error error;
    const double start = now_seconds();
    for (int call = 0; call < calls; ++call)
        if (attn_forward(q, k, v, NULL, out, NULL, &execution, &error) != ATTN_OK) {
            fprintf(stderr, "attn-bench small: %s\n", error.message);
            return 0.0;
        }
    return (now_seconds() - start) / calls;
}

/* One row: Tk = `length`; medians[mode] in seconds per call of one thread, the default call
 * and (with --threads) the threads asked for. */
static int measure_length(const small_settings *s, int64_t length, double medians[SMALL_MODES]) {
    const int mode_count = s->threads > 0 ? 3 : 2;
    const int64_t q_shape[4] = {1, s->query_rows, s->query_heads, s->head_dim};
    const int64_t kv_shape[4] = {1, length, s->kv_heads, s->head_dim};
    const size_t q_floats = (size_t)(s->query_rows * s->query_heads * s->head_dim);
    const size_t kv_floats = (size_t)(length * s->kv_heads * s->head_dim);
    float *q_data = malloc(q_floats * 4), *out_data = malloc(q_floats * 4);
    float *k_data = malloc(kv_floats * 4), *v_data = malloc(kv_floats * 4);
    double *times = malloc((size_t)SMALL_MODES * (size_t)s->rounds * sizeof *times);
    int ok = q_data && out_data && k_data && v_data && times;
    for (size_t i = 0; ok && i < q_floats; ++i) q_data[i] = (float)((i * 37) % 101) / 101.0f;
    for (size_t i = 0; ok && i < kv_floats; ++i) {
        k_data[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
        v_data[i] = (float)((i * 29) % 89) / 89.0f;
    }
    const attn_tensor q = attn_tensor_contiguous(q_data, ATTN_DTYPE_F32, 4, q_shape);
    const attn_tensor k = attn_tensor_contiguous(k_data, ATTN_DTYPE_F32, 4, kv_shape);
    const attn_tensor v = attn_tensor_contiguous(v_data, ATTN_DTYPE_F32, 4, kv_shape);
    attn_tensor out = attn_tensor_contiguous(out_data, ATTN_DTYPE_F32, 4, q_shape);
    const int modes[SMALL_MODES] = {1, 0, s->threads};
    /* Calls per round: about 2 ms of work, at least 3. */
    const double probe = ok ? time_calls(&q, &k, &v, &out, 1, 3) : 0.0;
    ok = ok && probe > 0.0;
    const int calls = ok ? (probe * 3 > 2e-3 ? 3 : (int)(2e-3 / probe)) : 0;
    for (int round = 0; ok && round < s->rounds; ++round)
        for (int mode = 0; ok && mode < mode_count; ++mode) {
            const double t = time_calls(&q, &k, &v, &out, modes[mode], calls);
            times[mode * s->rounds + round] = t;
            ok = t > 0.0;
        }
    for (int mode = 0; ok && mode < mode_count; ++mode) {
        qsort(times + mode * s->rounds, (size_t)s->rounds, sizeof *times, compare_doubles);
        medians[mode] = times[mode * s->rounds + s->rounds / 2];
    }
    free(q_data), free(out_data), free(k_data), free(v_data), free(times);
    return ok;
}

int bench_small(int argc, char **argv) {
    small_settings s;
    const int parsed = parse_small(argc, argv, &s);
    if (parsed != 0) return parsed == 1 ? 0 : 2;
    printf("attn-bench small: attn_forward float32, Tq %lld, Hq %lld, Hkv %lld, D %lld, kernel "
           "%s; median of %d alternated rounds\n",
           (long long)s.query_rows, (long long)s.query_heads, (long long)s.kv_heads,
           (long long)s.head_dim, attn_kernel_name(ATTN_KERNEL_AUTO), s.rounds);
    if (s.threads > 0)
        printf("| Tk | 1 thread (us) | default (us) | %d threads (us) | GFLOP/s (1 thread) |\n"
               "|---|---|---|---|---|\n", s.threads);
    else
        printf("| Tk | 1 thread (us) | default (us) | GFLOP/s (1 thread) |\n|---|---|---|---|\n");
    for (int l = 0; l < s.length_count; ++l) {
        double medians[SMALL_MODES];
        if (!measure_length(&s, s.lengths[l], medians)) return 1;
        const double flops = 4.0 * (double)(s.query_rows * s.query_heads * s.lengths[l]) *
                             (double)s.head_dim;
        printf("| %lld | %.1f | %.1f |", (long long)s.lengths[l], medians[0] * 1e6,
               medians[1] * 1e6);
        if (s.threads > 0) printf(" %.1f |", medians[2] * 1e6);
        printf(" %.1f |\n", flops / medians[0] * 1e-9);
        fflush(stdout);
    }
    return 0;
}
