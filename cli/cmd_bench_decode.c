/*
 * cmd_bench_decode.c — `attn bench decode`: single-token decoding against a KV cache, the
 * memory-bound case. For Hq = 32, Hkv in {32, 8, 1}, D = 128, contexts {4096, 32768, 131072}
 * and fp32 / bf16 / int8 / fp8 storage (--dtype) it reports decode steps per second and the GB/s of K/V actually
 * read (attn_kv_cache_bytes_per_token x context per step: int8 counts its scales), against the read bandwidth
 * measured in the same run right after each row's timing, so that a machine shared with
 * other jobs compares like with like; then MLA absorbed decoding on a DeepSeek-V2 latent
 * cache (Dk = 576, Dv = 512) with V2's 128 and V2-Lite's 16 heads, and one MLA layer step
 * naive vs absorbed at a short
 * context. --clock cpu times both the decode steps and the bandwidth in the threads' own CPU
 * time (bench_clock.h), which leaves out the time they waited for a core.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "attn_layers.h"
#include "bench_clock.h"
#include "cli.h"

typedef struct bench_settings {
    int quick, threads, mla;
    int64_t only_context;  /* 0 = the standard list */
    int dtypes;            /* bit n: storage_types[n] */
    int64_t only_kv_heads; /* 0 = 32, 8 and 1 */
    double max_gib;        /* skip caches larger than this */
    bench_clock clock;     /* --clock wall (default) or cpu */
} bench_settings;

static void usage(FILE *stream) {
    fprintf(stream,
            "usage: attn bench decode [--quick] [--context N] [--dtype LIST] [--kv-heads N]\n"
            "                         [--threads N] [--no-mla] [--max-gib G] [--clock wall|cpu]\n"
            "  --quick      contexts 4096 and 32768 only, shorter timing\n"
            "  --dtype LIST storage types, comma-separated: f32, bf16, int8, fp8_e4m3, fp8_e5m2\n"
            "               (or both = f32,bf16, the default; all = every one)\n"
            "  --kv-heads N only the rows with Hkv = N (32, 8 or 1)\n"
            "  --max-gib G  skip caches larger than G GiB (default 4.5; memory stays < 8 GB)\n"
            "  --clock cpu  time decode steps and the read bandwidth in the threads' CPU time\n"
            "               (leaves out time spent waiting for a core; default: wall)\n"
            "On a machine shared with other jobs, run with OMP_WAIT_POLICY=passive (see\n"
            "docs/inference.md, Measurements).\n");
}

enum { LAYER_STEPS = 5 };

/* The storage types the table can show, in its order. */
static const struct {
    const char *name, *label;
    attn_dtype dtype;
} storage_types[] = {
    {"f32", "fp32", ATTN_DTYPE_F32},          {"bf16", "bf16", ATTN_DTYPE_BF16},
    {"int8", "int8", ATTN_DTYPE_Q8},          {"fp8_e4m3", "fp8 e4m3", ATTN_DTYPE_FP8_E4M3},
    {"fp8_e5m2", "fp8 e5m2", ATTN_DTYPE_FP8_E5M2},
};
enum { STORAGE_TYPES = sizeof storage_types / sizeof storage_types[0] };

/* The bit set of a --dtype list, 0 when a name is unknown. */
static int parse_dtypes(const char *list) {
    if (strcmp(list, "both") == 0) return 3;
    if (strcmp(list, "all") == 0) return (1 << STORAGE_TYPES) - 1;
    int bits = 0;
    while (*list != '\0') {
        const char *end = strchr(list, ',');
        const size_t length = end != NULL ? (size_t)(end - list) : strlen(list);
        int found = 0;
        for (int n = 0; n < (int)STORAGE_TYPES; ++n)
            if (strlen(storage_types[n].name) == length &&
                strncmp(storage_types[n].name, list, length) == 0)
                bits |= 1 << n, found = 1;
        if (!found) return 0;
        list += length;
        if (*list == ',') ++list;
    }
    return bits;
}

/* Median of `count` (<= 64) times. */
static double median_seconds(const double *times, int count) {
    double sorted[64];
    for (int i = 0; i < count; ++i) sorted[i] = times[i];
    for (int i = 1; i < count; ++i) /* insertion sort */
        for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; --j) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
    return sorted[count / 2];
}

/* Seconds per decode step of query q against `cache` on `clock`: one warm-up step, then the
 * median of 3 to 64 steps within `budget_seconds` of wall time; -1 on error. */
static double time_decode(attn_kv_cache *cache, const attn_tensor *q,
                          const attn_options *options, attn_tensor *out, double budget_seconds,
                          bench_clock clock, int threads, attn_error *error) {
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    if (attn_decode(cache, q, options, out, NULL, &execution, error) != ATTN_OK) return -1.0;
    double times[64];
    int repeats = 0;
    const double start = omp_get_wtime(); /* the budget is wall time */
    while (repeats < 64 && (repeats < 3 || omp_get_wtime() - start < budget_seconds)) {
        const double before = bench_clock_seconds(clock, threads);
        attn_decode(cache, q, options, out, NULL, &execution, error);
        times[repeats++] = bench_clock_seconds(clock, threads) - before;
    }
    return median_seconds(times, repeats);
}

static volatile float bandwidth_sink;

/* Read bandwidth (GB/s) of `threads` threads summing a 256 MiB buffer they first-touched,
 * best of 3 passes: cli_measure_read_bandwidth_gbs (peak.c) for the wall clock; the same
 * measurement timed in the threads' CPU time for BENCH_CLOCK_CPU. */
static double read_bandwidth_gbs(int threads, bench_clock clock) {
    if (clock == BENCH_CLOCK_WALL) return cli_measure_read_bandwidth_gbs(threads);
    const size_t bytes = (size_t)256 << 20, count = bytes / sizeof(float);
    float *buffer = malloc(bytes);
    if (buffer == NULL) return 0.0;
    double best = 0.0;
    for (int pass = 0; pass < 4; ++pass) {
        const double start = bench_clock_seconds(clock, threads);
        float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const int thread = omp_get_thread_num(), thread_count = omp_get_num_threads();
            const size_t first = count / (size_t)thread_count * (size_t)thread;
            const size_t last = thread == thread_count - 1 ? count
                                                           : first + count / (size_t)thread_count;
            if (pass == 0) { /* first touch by the reading thread */
                for (size_t i = first; i < last; ++i) buffer[i] = (float)(i & 7);
            } else {
                float partial[16] = {0};
                for (size_t i = first; i + 16 <= last; i += 16)
                    for (int lane = 0; lane < 16; ++lane) partial[lane] += buffer[i + lane];
                for (int lane = 0; lane < 16; ++lane) total += partial[lane];
            }
        }
        const double seconds = bench_clock_seconds(clock, threads) - start;
        bandwidth_sink = total;
        if (pass > 0 && seconds > 0 && bytes / seconds > best) best = bytes / seconds;
    }
    free(buffer);
    return best * 1e-9;
}

/* Fills sequence 0 of `cache` to `context` tokens from one random chunk of 1024 tokens
 * appended repeatedly (keys [chunk, Hkv, Dk], values [chunk, Hkv, Dv] unless values_in_keys). */
static attn_status fill_cache(attn_kv_cache *cache, int64_t context, int64_t kv_heads,
                              int64_t key_dim, int64_t value_dim, int values_in_keys,
                              attn_error *error) {
    const int64_t chunk = 1024;
    float *keys = malloc((size_t)(chunk * kv_heads * key_dim) * sizeof(float));
    float *values = malloc((size_t)(chunk * kv_heads * value_dim) * sizeof(float));
    if (keys == NULL || values == NULL) {
        free(keys), free(values);
        return ATTN_ERROR_OUT_OF_MEMORY;
    }
    unsigned state = 12345u;
    for (int64_t i = 0; i < chunk * kv_heads * key_dim; ++i)
        keys[i] = (float)((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int64_t i = 0; i < chunk * kv_heads * value_dim; ++i)
        values[i] = (float)((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    attn_status status = ATTN_OK;
    for (int64_t filled = 0; filled < context && status == ATTN_OK; filled += chunk) {
        int64_t count = context - filled < chunk ? context - filled : chunk;
        attn_tensor k = attn_tensor_f32_4d(keys, 1, count, kv_heads, key_dim);
        attn_tensor v = attn_tensor_f32_4d(values, 1, count, kv_heads, value_dim);
        status = attn_kv_cache_append(cache, 0, &k, values_in_keys ? NULL : &v, error);
    }
    free(keys), free(values);
    return status;
}

/* One benchmark row: creates the cache, fills it, times decode, prints. */
static int bench_row(const char *label, attn_kv_cache_config config, int64_t query_heads,
                     int64_t context, float scale, int threads, const bench_settings *s) {
    config.capacity = context;
    const double bytes_per_step = (double)attn_kv_cache_bytes_per_token(&config) * (double)context;
    if (bytes_per_step / (1024.0 * 1024.0 * 1024.0) > s->max_gib) {
        printf("%-42s %8lld   skipped (cache %.1f GiB > --max-gib %.1f)\n", label,
               (long long)context, bytes_per_step / (1024.0 * 1024.0 * 1024.0), s->max_gib);
        return 0;
    }
    attn_error error;
    attn_kv_cache *cache = NULL;
    config.capacity = context;
    config.page_size = 256;
    if (attn_kv_cache_create(&config, &cache, &error) != ATTN_OK ||
        fill_cache(cache, context, config.kv_heads, config.key_dim, config.value_dim,
                   config.values_in_keys, &error) != ATTN_OK) {
        fprintf(stderr, "attn bench decode: %s\n", error.message);
        attn_kv_cache_destroy(cache);
        return 1;
    }
    float *query = malloc((size_t)(query_heads * config.key_dim) * sizeof(float));
    float *output = malloc((size_t)(query_heads * config.value_dim) * sizeof(float));
    for (int64_t i = 0; i < query_heads * config.key_dim; ++i)
        query[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
    attn_tensor q = attn_tensor_f32_4d(query, 1, 1, query_heads, config.key_dim);
    attn_tensor out = attn_tensor_f32_4d(output, 1, 1, query_heads, config.value_dim);
    /* A bf16 cache serves a bf16 model: bf16 queries and out (in the first half of the same
     * buffers), which may run on bf16 tiles (AMX). */
    const attn_dtype query_dtype = config.dtype == ATTN_DTYPE_BF16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
    if (query_dtype == ATTN_DTYPE_BF16) {
        uint16_t *query16 = (uint16_t *)query;
        for (int64_t i = 0; i < query_heads * config.key_dim; ++i) {
            uint32_t bits;
            memcpy(&bits, &query[i], sizeof bits);
            query16[i] = (uint16_t)(bits >> 16); /* the same values, truncated to bf16 */
        }
        q.dtype = out.dtype = ATTN_DTYPE_BF16;
    }
    const char *path = attn_decode_kernel_path(ATTN_KERNEL_AUTO, config.dtype, query_dtype,
                                               query_heads / config.kv_heads);
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (scale > 0) options.custom_scale = 1, options.scale = scale;
    double seconds = time_decode(cache, &q, &options, &out, s->quick ? 0.15 : 0.5, s->clock,
                                 threads, &error);
    const double bandwidth = read_bandwidth_gbs(threads, s->clock); /* now, for this row */
    if (seconds < 0) {
        fprintf(stderr, "attn bench decode: %s\n", error.message);
    } else {
        double gbs = bytes_per_step / seconds / 1e9;
        printf("%-42s %8lld %10.1f %9.3f %9.1f %9.1f %7.0f%%  %s %s\n", label, (long long)context,
               1.0 / seconds, seconds * 1e3, gbs, bandwidth, 100.0 * gbs / bandwidth,
               attn_kernel_name(ATTN_KERNEL_AUTO), path != NULL ? path : "?");
    }
    fflush(stdout);
    free(query), free(output);
    attn_kv_cache_destroy(cache);
    return seconds < 0;
}

/* One MLA layer decode step (V2-Lite dims) after a prefill of `context` tokens, naive vs
 * absorbed: what weight absorption buys. */
static int bench_mla_layer(int64_t context, const bench_settings *s) {
    attn_mla_config config = {2048, 16, 0, 512, 128, 64, 128, 0.0, 0.0f, 0.0f, {0}};
    const int64_t d = config.hidden, H = config.heads;
    const size_t sizes[5] = {(size_t)(H * 192 * d), (size_t)(576 * d), 512, (size_t)(H * 256 * 512),
                             (size_t)(d * H * 128)};
    float *w[5];
    unsigned state = 7u;
    for (int i = 0; i < 5; ++i) {
        w[i] = malloc(sizes[i] * sizeof(float));
        for (size_t j = 0; j < sizes[i]; ++j)
            w[i][j] = ((float)((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f) *
                      0.05f;
    }
    for (size_t j = 0; j < 512; ++j) w[2][j] = 1.0f;
    attn_mla_weights weights = {w[0], NULL, NULL, NULL, w[1], w[2], w[3], w[4]};
    float *hidden = calloc((size_t)d, sizeof(float)), *out = calloc((size_t)d, sizeof(float));
    for (int64_t i = 0; i < d; ++i) hidden[i] = (float)((i * 31) % 17) / 17.0f - 0.5f;
    attn_tensor x = {hidden, ATTN_DTYPE_F32, 3, {1, 1, d}, {d, d, 1}};
    attn_tensor y = {out, ATTN_DTYPE_F32, 3, {1, 1, d}, {d, d, 1}};
    printf("\nMLA layer step (V2-Lite: hidden 2048, 16 heads, d_c 512), context %lld, fp32\n"
           "(projections + attention + output; median of %d steps after a warm-up):\n",
           (long long)context, LAYER_STEPS);
    int failed = 0;
    double median[2] = {0.0, 0.0};
    for (int path = 0; path < 2 && !failed; ++path) {
        attn_kv_cache_config cache_config;
        attn_error error;
        attn_kv_cache *cache = NULL;
        attn_mla_cache_config(&config, 1, context + 1 + LAYER_STEPS, ATTN_DTYPE_F32, 256,
                              &cache_config, &error);
        failed |= attn_kv_cache_create(&cache_config, &cache, &error) != ATTN_OK;
        failed |= !failed && fill_cache(cache, context, 1, 576, 512, 1, &error) != ATTN_OK;
        double times[LAYER_STEPS + 1];
        for (int step = 0; step <= LAYER_STEPS && !failed; ++step) {
            double start = omp_get_wtime();
            failed |= attn_mla_forward(&config, &weights, cache, &x, (attn_mla_path)path, &y,
                                       &error) != ATTN_OK;
            times[step] = omp_get_wtime() - start;
        }
        if (failed) {
            fprintf(stderr, "attn bench decode: %s\n", error.message);
        } else {
            median[path] = median_seconds(times + 1, LAYER_STEPS);
            printf("  %-9s %10.2f ms per token\n", path ? "absorbed" : "naive", median[path] * 1e3);
        }
        attn_kv_cache_destroy(cache);
    }
    if (!failed && median[1] > 0)
        printf("  absorbed is %.1fx faster than naive\n", median[0] / median[1]);
    (void)s;
    for (int i = 0; i < 5; ++i) free(w[i]);
    free(hidden), free(out);
    return failed;
}

int cli_bench_decode(int argc, char **argv) {
    bench_settings s = {0, 0, 1, 0, 3, 0, 4.5, BENCH_CLOCK_WALL};
    for (int i = 1; i < argc; ++i) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--quick") == 0) {
            s.quick = 1;
        } else if (strcmp(argv[i], "--no-mla") == 0) {
            s.mla = 0;
        } else if (strcmp(argv[i], "--context") == 0 && value) {
            s.only_context = atoll(value), ++i;
            if (s.only_context < 1) {
                fprintf(stderr, "attn bench decode: --context %s: expected >= 1\n", value);
                return 2;
            }
        } else if (strcmp(argv[i], "--threads") == 0 && value) {
            s.threads = atoi(value), ++i;
            if (s.threads < 1) {
                fprintf(stderr, "attn bench decode: --threads %s: expected >= 1\n", value);
                return 2;
            }
        } else if (strcmp(argv[i], "--max-gib") == 0 && value) {
            s.max_gib = atof(value), ++i;
            if (!(s.max_gib > 0)) {
                fprintf(stderr, "attn bench decode: --max-gib %s: expected > 0\n", value);
                return 2;
            }
        } else if (strcmp(argv[i], "--clock") == 0 && value) {
            if (strcmp(value, "wall") != 0 && strcmp(value, "cpu") != 0) {
                fprintf(stderr, "attn bench decode: --clock %s: expected wall or cpu\n", value);
                return 2;
            }
            s.clock = strcmp(value, "cpu") == 0 ? BENCH_CLOCK_CPU : BENCH_CLOCK_WALL;
            ++i;
        } else if (strcmp(argv[i], "--dtype") == 0 && value) {
            s.dtypes = parse_dtypes(value);
            if (s.dtypes == 0) {
                fprintf(stderr,
                        "attn bench decode: --dtype %s: expected a comma-separated list of f32, "
                        "bf16, int8, fp8_e4m3, fp8_e5m2 (or both, all)\n",
                        value);
                return 2;
            }
            ++i;
        } else if (strcmp(argv[i], "--kv-heads") == 0 && value) {
            s.only_kv_heads = atoll(value), ++i;
            if (s.only_kv_heads != 32 && s.only_kv_heads != 8 && s.only_kv_heads != 1) {
                fprintf(stderr, "attn bench decode: --kv-heads %s: expected 32, 8 or 1\n", value);
                return 2;
            }
        } else {
            fprintf(stderr, "attn bench decode: unknown option or missing value: %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    const int threads = s.threads > 0 ? s.threads : omp_get_max_threads();
    const double bandwidth = read_bandwidth_gbs(threads, s.clock);
    printf("decode benchmark: 1 sequence, 1 new token, Hq = 32, D = 128, %d threads, %s clock\n",
           threads, s.clock == BENCH_CLOCK_CPU ? "CPU-time" : "wall");
    printf("measured read bandwidth: %.1f GB/s (and again after each row: \"read GB/s\")\n\n",
           bandwidth);
    printf("%-42s %8s %10s %9s %9s %9s %8s  %s\n", "configuration", "context", "tokens/s",
           "ms/token", "K/V GB/s", "read GB/s", "of read", "kernels (queries bf16 for bf16 caches)");
    int64_t contexts[3] = {4096, 32768, 131072};
    int context_count = s.quick ? 2 : 3;
    if (s.only_context) contexts[0] = s.only_context, context_count = 1;
    const int64_t kv_head_options[3] = {32, 8, 1};
    int failed = 0;
    for (int dt = 0; dt < (int)STORAGE_TYPES; ++dt) {
        if (!(s.dtypes & (1 << dt))) continue;
        for (int h = 0; h < 3; ++h)
            for (int c = 0; c < context_count; ++c) {
                if (s.only_kv_heads && s.only_kv_heads != kv_head_options[h]) continue;
                attn_kv_cache_config config = attn_kv_cache_config_default();
                config.sequences = 1, config.kv_heads = kv_head_options[h];
                config.key_dim = config.value_dim = 128;
                config.dtype = storage_types[dt].dtype;
                char label[64];
                snprintf(label, sizeof label, "%s Hq=32 Hkv=%lld", storage_types[dt].label,
                         (long long)kv_head_options[h]);
                failed |= bench_row(label, config, 32, contexts[c], 0.0f, threads, &s);
            }
    }
    if (s.mla) {
        /* DeepSeek-V2 (128 heads) and V2-Lite (16 heads): the same latent cache (d_c 512 +
         * rope 64), 8x fewer query rows per key */
        const attn_mla_config models[2] = {
            {5120, 128, 1536, 512, 128, 64, 128, 0.0, 0.0f, 0.0f, {0}},
            {2048, 16, 0, 512, 128, 64, 128, 0.0, 0.0f, 0.0f, {0}}};
        for (int dt = 0; dt < (int)STORAGE_TYPES; ++dt) {
            if (!(s.dtypes & (1 << dt))) continue;
            for (int m = 0; m < 2; ++m)
                for (int c = 0; c < context_count; ++c) {
                    attn_kv_cache_config config;
                    attn_mla_cache_config(&models[m], 1, 1, storage_types[dt].dtype, 0, &config,
                                          NULL);
                    char label[64];
                    snprintf(label, sizeof label, "%s MLA absorbed (%s, %lld heads)",
                             storage_types[dt].label, m == 0 ? "V2" : "V2-Lite",
                             (long long)models[m].heads);
                    failed |= bench_row(label, config, models[m].heads, contexts[c],
                                        1.0f / sqrtf(192.0f), threads, &s);
                }
        }
        failed |= bench_mla_layer(s.quick ? 256 : 1024, &s);
    }
    return failed ? 1 : 0;
}
