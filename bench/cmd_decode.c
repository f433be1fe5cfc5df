/*
 * cmd_decode.c — `attn-bench decode`: single-token decoding against a KV cache, the
 * memory-bound case. For Hq = 32, Hkv in {32, 8, 1}, D = 128, contexts {4096, 32768, 131072}
 * and fp32 / bf16 / int8 / fp8 storage (--dtype) it reports decode steps per second and the GB/s of K/V actually
 * read (attn_kv_cache_bytes_per_token x context per step: int8 counts its scales), against the read bandwidth
 * measured in the same run right after each configuration's timing, so that a machine shared
 * with other jobs compares like with like. The storage types of one configuration are timed
 * together, one step of each in turn (time_cases), and each row gives its tokens/s against
 * the bf16 row of its configuration ("vs bf16"): a drift of the machine falls on all of them,
 * and no cache stays in the last-level cache between its steps because the others pass
 * through it; then MLA absorbed decoding on a DeepSeek-V2 latent cache (Dk = 576, Dv = 512)
 * with V2's 128 and V2-Lite's 16 heads, and one MLA layer step naive vs absorbed at a short
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
#include "arguments.h"
#include "bench.h"
#include "../src/cache/decode_path.h" /* a benchmark names the decode path it ran */

typedef struct bench_settings {
    int quick, threads, mla;
    int64_t only_context;  /* 0 = the standard list */
    int dtypes;            /* bit n: storage_types[n] */
    int64_t only_kv_heads; /* 0 = 32, 8 and 1 */
    double max_gib;        /* skip caches larger than this */
    bench_clock clock;     /* --clock wall (default) or cpu */
    attn_kernel_choice kernel; /* --kernel: the kernel family of every decode step */
} bench_settings;

static void usage(FILE *stream) {
    fprintf(stream,
            "usage: attn-bench decode [--quick] [--context N] [--dtype LIST] [--kv-heads N]\n"
            "                         [--threads N] [--no-mla] [--max-gib G] [--clock wall|cpu]\n"
            "                         [--kernel K]\n"
            "  --quick      contexts 4096 and 32768 only, shorter timing\n"
            "  --dtype LIST storage types, comma-separated: f32, bf16, int8, fp8_e4m3, fp8_e5m2\n"
            "               (or both = f32,bf16, the default; all = every one)\n"
            "  --kv-heads N only the rows with Hkv = N (32, 8 or 1)\n"
            "  --max-gib G  skip caches larger than G GiB (default 4.5; the caches of one\n"
            "               configuration exist together: <= 9.1 GiB with --dtype all)\n"
            "  --clock cpu  time decode steps and the read bandwidth in the threads' CPU time\n"
            "               (leaves out time spent waiting for a core; default: wall)\n"
            "  --kernel K   the decode steps' kernel family: " CLI_KERNEL_NAMES "\n"
            "               (default auto, the best this CPU runs; the MLA layer step runs auto)\n"
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

static volatile float bandwidth_sink;

/* Read bandwidth (GB/s) of `threads` threads summing a 256 MiB buffer they first-touched,
 * best of 3 passes: bench_measure_read_bandwidth_gbs (peak.c) for the wall clock; the same
 * measurement timed in the threads' CPU time for BENCH_CLOCK_CPU. */
static double read_bandwidth_gbs(int threads, bench_clock clock) {
    if (clock == BENCH_CLOCK_WALL) return bench_measure_read_bandwidth_gbs(threads);
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
/* One row of the table: a cache of one storage type, its query and out, and its step times. */
typedef struct decode_case {
    char label[64];
    attn_dtype dtype;
    int64_t context;
    attn_kv_cache *cache; /* NULL: skipped (too large) */
    float *query, *output;
    attn_tensor q, out;
    attn_options options;
    const char *path;
    double bytes_per_step, gib;
    double times[64];
    int repeats;
} decode_case;

static void case_free(decode_case *c) {
    free(c->query), free(c->output);
    attn_kv_cache_destroy(c->cache);
    c->query = c->output = NULL, c->cache = NULL;
}

/* Creates and fills the cache of `config` at `context` tokens with its query and out (Hq =
 * query_heads); a cache above --max-gib is left NULL (skipped). 1 on error (printed). */
static int case_prepare(decode_case *c, const char *label, attn_kv_cache_config config,
                        int64_t query_heads, int64_t context, float scale,
                        const bench_settings *s) {
    memset(c, 0, sizeof *c);
    snprintf(c->label, sizeof c->label, "%s", label);
    c->dtype = config.dtype, c->context = context;
    config.capacity = context;
    config.page_size = 256;
    c->bytes_per_step = (double)attn_kv_cache_bytes_per_token(&config) * (double)context;
    c->gib = c->bytes_per_step / (1024.0 * 1024.0 * 1024.0);
    if (c->gib > s->max_gib) return 0;
    attn_error error;
    if (attn_kv_cache_create(&config, &c->cache, &error) != ATTN_OK ||
        fill_cache(c->cache, context, config.kv_heads, config.key_dim, config.value_dim,
                   config.values_in_keys, &error) != ATTN_OK) {
        fprintf(stderr, "attn-bench decode: %s\n", error.message);
        case_free(c);
        return 1;
    }
    c->query = malloc((size_t)(query_heads * config.key_dim) * sizeof(float));
    c->output = malloc((size_t)(query_heads * config.value_dim) * sizeof(float));
    if (c->query == NULL || c->output == NULL) {
        fprintf(stderr, "attn-bench decode: out of memory\n");
        case_free(c);
        return 1;
    }
    for (int64_t i = 0; i < query_heads * config.key_dim; ++i)
        c->query[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
    c->q = attn_tensor_f32_4d(c->query, 1, 1, query_heads, config.key_dim);
    c->out = attn_tensor_f32_4d(c->output, 1, 1, query_heads, config.value_dim);
    /* A bf16 cache serves a bf16 model, and so does an fp8 one (as vLLM's fp8 KV caches do):
     * bf16 queries and out (in the first half of the same buffers), which may run on bf16
     * tiles (AMX); fp32 queries for the fp32 and int8 caches. */
    const attn_dtype query_dtype = config.dtype == ATTN_DTYPE_BF16 ||
                                           config.dtype == ATTN_DTYPE_FP8_E4M3 ||
                                           config.dtype == ATTN_DTYPE_FP8_E5M2
                                       ? ATTN_DTYPE_BF16
                                       : ATTN_DTYPE_F32;
    if (query_dtype == ATTN_DTYPE_BF16) {
        uint16_t *query16 = (uint16_t *)c->query;
        for (int64_t i = 0; i < query_heads * config.key_dim; ++i) {
            uint32_t bits;
            memcpy(&bits, &c->query[i], sizeof bits);
            query16[i] = (uint16_t)(bits >> 16); /* the same values, truncated to bf16 */
        }
        c->q.dtype = c->out.dtype = ATTN_DTYPE_BF16;
    }
    c->path = attn_decode_kernel_path(s->kernel, config.dtype, query_dtype,
                                      query_heads / config.kv_heads);
    c->options = attn_options_default();
    c->options.causal = 1;
    c->options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    if (scale > 0) c->options.custom_scale = 1, c->options.scale = scale;
    return 0;
}

/* Times the `count` cases together: one warm-up step each, then rounds of one step per case
 * (starting one case later each round, so that no case always follows the same one) until
 * every case has 3 steps and `budget_seconds` per case of wall time have passed, at most 64
 * rounds: whatever the machine does meanwhile (another job, a bandwidth that drifts) falls
 * on all the rows of the configuration alike, so their ratios compare like with like.
 * 1 on error (printed). */
static int time_cases(decode_case *cases, int count, double budget_seconds, bench_clock clock,
                      int threads, attn_kernel_choice kernel) {
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    execution.kernel = kernel;
    attn_error error;
    int live = 0;
    for (int i = 0; i < count; ++i) {
        if (cases[i].cache == NULL) continue;
        ++live;
        if (attn_decode(cases[i].cache, &cases[i].q, &cases[i].options, &cases[i].out, NULL,
                        &execution, &error) != ATTN_OK) {
            fprintf(stderr, "attn-bench decode: %s\n", error.message);
            return 1;
        }
    }
    const double start = omp_get_wtime(); /* the budget is wall time */
    for (int round = 0;
         round < 64 && (round < 3 || omp_get_wtime() - start < budget_seconds * live); ++round)
        for (int k = 0; k < count; ++k) {
            decode_case *c = &cases[(k + round) % count];
            if (c->cache == NULL) continue;
            const double before = bench_clock_seconds(clock, threads);
            if (attn_decode(c->cache, &c->q, &c->options, &c->out, NULL, &execution, &error) !=
                ATTN_OK) {
                fprintf(stderr, "attn-bench decode: %s\n", error.message);
                return 1;
            }
            c->times[c->repeats++] = bench_clock_seconds(clock, threads) - before;
        }
    return 0;
}

/* The table's row of one case: tokens/s, ms/token, K/V GB/s, the read bandwidth measured
 * after the configuration's steps and the fraction of it, tokens/s against the bf16 row of
 * the same configuration (reference: its median seconds, <= 0 when there is none), and the
 * kernels that ran. */
static void print_case(const decode_case *c, double bandwidth, double reference_seconds,
                       const bench_settings *s) {
    if (c->cache == NULL) {
        printf("%-42s %8lld   skipped (cache %.1f GiB > --max-gib %.1f)\n", c->label,
               (long long)c->context, c->gib, s->max_gib);
        return;
    }
    const double seconds = median_seconds(c->times, c->repeats);
    const double gbs = c->bytes_per_step / seconds / 1e9;
    char ratio[16] = "-";
    if (reference_seconds > 0) snprintf(ratio, sizeof ratio, "%.2fx", reference_seconds / seconds);
    printf("%-42s %8lld %10.1f %9.3f %9.1f %9.1f %7.0f%% %8s  %s %s\n", c->label,
           (long long)c->context, 1.0 / seconds, seconds * 1e3, gbs, bandwidth,
           100.0 * gbs / bandwidth, ratio, attn_kernel_name(s->kernel),
           c->path != NULL ? c->path : "?");
}

/* One configuration in every selected storage type: prepared, timed together, printed in the
 * table's order, freed. configs[dt] for each dt in s->dtypes; labels likewise. */
static int bench_configuration(const attn_kv_cache_config *configs, char labels[][64],
                               int64_t query_heads, int64_t context, float scale, int threads,
                               const bench_settings *s) {
    decode_case cases[STORAGE_TYPES];
    int count = 0, failed = 0, reference = -1;
    for (int dt = 0; dt < (int)STORAGE_TYPES && !failed; ++dt) {
        if (!(s->dtypes & (1 << dt))) continue;
        failed |= case_prepare(&cases[count], labels[dt], configs[dt], query_heads, context,
                               scale, s);
        if (!failed && storage_types[dt].dtype == ATTN_DTYPE_BF16 && cases[count].cache != NULL)
            reference = count;
        if (!failed) ++count;
    }
    if (!failed)
        failed = time_cases(cases, count, s->quick ? 0.15 : 0.5, s->clock, threads, s->kernel);
    if (!failed) {
        const double bandwidth = read_bandwidth_gbs(threads, s->clock); /* now, for these rows */
        const double reference_seconds =
            reference >= 0 ? median_seconds(cases[reference].times, cases[reference].repeats) : 0.0;
        for (int i = 0; i < count; ++i) print_case(&cases[i], bandwidth, reference_seconds, s);
    }
    fflush(stdout);
    for (int i = 0; i < count; ++i) case_free(&cases[i]);
    return failed;
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
            fprintf(stderr, "attn-bench decode: %s\n", error.message);
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

int bench_decode(int argc, char **argv) {
    bench_settings s = {0, 0, 1, 0, 3, 0, 4.5, BENCH_CLOCK_WALL, ATTN_KERNEL_AUTO};
    const char *kernel_text = "auto"; /* as given, for the error below */
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
                fprintf(stderr, "attn-bench decode: --context %s: expected >= 1\n", value);
                return 2;
            }
        } else if (strcmp(argv[i], "--threads") == 0 && value) {
            int64_t threads = 0;
            ++i;
            if (!cli_parse_int64(value, &threads) || threads < 1 || threads > ATTN_MAX_THREADS) {
                fprintf(stderr, "attn-bench decode: --threads '%s': expected an integer in 1..%d "
                        "(the library's ATTN_MAX_THREADS)\n", value, ATTN_MAX_THREADS);
                return 2;
            }
            s.threads = (int)threads;
        } else if (strcmp(argv[i], "--max-gib") == 0 && value) {
            s.max_gib = atof(value), ++i;
            if (!(s.max_gib > 0)) {
                fprintf(stderr, "attn-bench decode: --max-gib %s: expected > 0\n", value);
                return 2;
            }
        } else if (strcmp(argv[i], "--clock") == 0 && value) {
            if (strcmp(value, "wall") != 0 && strcmp(value, "cpu") != 0) {
                fprintf(stderr, "attn-bench decode: --clock %s: expected wall or cpu\n", value);
                return 2;
            }
            s.clock = strcmp(value, "cpu") == 0 ? BENCH_CLOCK_CPU : BENCH_CLOCK_WALL;
            ++i;
        } else if (strcmp(argv[i], "--dtype") == 0 && value) {
            s.dtypes = parse_dtypes(value);
            if (s.dtypes == 0) {
                fprintf(stderr,
                        "attn-bench decode: --dtype %s: expected a comma-separated list of f32, "
                        "bf16, int8, fp8_e4m3, fp8_e5m2 (or both, all)\n",
                        value);
                return 2;
            }
            ++i;
        } else if (strcmp(argv[i], "--kernel") == 0 && value) {
            if (!cli_parse_kernel(value, &s.kernel)) {
                fprintf(stderr, "attn-bench decode: --kernel %s: expected " CLI_KERNEL_NAMES "\n",
                        value);
                return 2;
            }
            kernel_text = value;
            ++i;
        } else if (strcmp(argv[i], "--kv-heads") == 0 && value) {
            s.only_kv_heads = atoll(value), ++i;
            if (s.only_kv_heads != 32 && s.only_kv_heads != 8 && s.only_kv_heads != 1) {
                fprintf(stderr, "attn-bench decode: --kv-heads %s: expected 32, 8 or 1\n", value);
                return 2;
            }
        } else {
            fprintf(stderr, "attn-bench decode: unknown option or missing value: %s (see attn-bench "
                            "decode --help)\n", argv[i]);
            return 2;
        }
    }
    if (attn_kernel_name(s.kernel) == NULL) {
        fprintf(stderr, "attn-bench decode: --kernel %s: this CPU or build cannot run it\n",
                kernel_text);
        return 1;
    }
    const int threads = s.threads > 0 ? s.threads : omp_get_max_threads();
    const double bandwidth = read_bandwidth_gbs(threads, s.clock);
    printf("decode benchmark: 1 sequence, 1 new token, Hq = 32, D = 128, %d threads, %s clock\n",
           threads, s.clock == BENCH_CLOCK_CPU ? "CPU-time" : "wall");
    printf("measured read bandwidth: %.1f GB/s (and again after each row: \"read GB/s\")\n\n",
           bandwidth);
    printf("%-42s %8s %10s %9s %9s %9s %8s %8s  %s\n", "configuration", "context", "tokens/s",
           "ms/token", "K/V GB/s", "read GB/s", "of read", "vs bf16",
           "kernels (queries bf16 for bf16 and fp8 caches)");
    int64_t contexts[3] = {4096, 32768, 131072};
    int context_count = s.quick ? 2 : 3;
    if (s.only_context) contexts[0] = s.only_context, context_count = 1;
    const int64_t kv_head_options[3] = {32, 8, 1};
    int failed = 0;
    for (int h = 0; h < 3; ++h)
        for (int c = 0; c < context_count; ++c) {
            if (s.only_kv_heads && s.only_kv_heads != kv_head_options[h]) continue;
            attn_kv_cache_config configs[STORAGE_TYPES];
            char labels[STORAGE_TYPES][64];
            for (int dt = 0; dt < (int)STORAGE_TYPES; ++dt) {
                configs[dt] = attn_kv_cache_config_default();
                configs[dt].sequences = 1, configs[dt].kv_heads = kv_head_options[h];
                configs[dt].key_dim = configs[dt].value_dim = 128;
                configs[dt].dtype = storage_types[dt].dtype;
                snprintf(labels[dt], sizeof labels[dt], "%s Hq=32 Hkv=%lld", storage_types[dt].label,
                         (long long)kv_head_options[h]);
            }
            failed |= bench_configuration(configs, labels, 32, contexts[c], 0.0f, threads, &s);
        }
    if (s.mla) {
        /* DeepSeek-V2 (128 heads) and V2-Lite (16 heads): the same latent cache (d_c 512 +
         * rope 64), 8x fewer query rows per key */
        const attn_mla_config models[2] = {
            {5120, 128, 1536, 512, 128, 64, 128, 0.0, 0.0f, 0.0f, {0}},
            {2048, 16, 0, 512, 128, 64, 128, 0.0, 0.0f, 0.0f, {0}}};
        for (int m = 0; m < 2; ++m)
            for (int c = 0; c < context_count; ++c) {
                attn_kv_cache_config configs[STORAGE_TYPES];
                char labels[STORAGE_TYPES][64];
                for (int dt = 0; dt < (int)STORAGE_TYPES; ++dt) {
                    attn_mla_cache_config(&models[m], 1, 1, storage_types[dt].dtype, 0,
                                          &configs[dt], NULL);
                    snprintf(labels[dt], sizeof labels[dt], "%s MLA absorbed (%s, %lld heads)",
                             storage_types[dt].label, m == 0 ? "V2" : "V2-Lite",
                             (long long)models[m].heads);
                }
                failed |= bench_configuration(configs, labels, models[m].heads, contexts[c],
                                              1.0f / sqrtf(192.0f), threads, &s);
            }
        failed |= bench_mla_layer(s.quick ? 256 : 1024, &s);
    }
    return failed ? 1 : 0;
}
