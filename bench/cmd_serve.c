/*
 * cmd_serve.c — `attn-bench serve`: a continuous-batching step mix on a paged KV cache
 * the benchmark owns (attn_forward_with_kvcache), for each storage type. B sequences hold
 * contexts drawn uniformly from [min, max] with a fixed seed, on shuffled pages of 16 tokens.
 * Each step gives `prefills` sequences (round robin) a prefill chunk of 512 tokens and every
 * other sequence one decode token: two calls (Tq = 512 and Tq = 1) on the same pool. The
 * appends overwrite the same slots every step, so every step does the same work. Reported per
 * storage type: ms per step, tokens/s, the GB/s of K/V the step reads (every sequence's
 * context x Hkv x (Dk + Dv) x element size) and that as a fraction of the read bandwidth
 * measured in the same run right after; the decode and prefill calls are also timed alone.
 * Storage types: f32, bf16, f16, int8 (row scales, read as part of the K/V bytes) and fp8
 * E4M3 / E5M2 (no per-head scales). Then, in the same run: decoding from a library-owned cache
 * vs the same tokens on the same pages owned by the caller (bf16, and each 8-bit storage
 * asked for; the caller's pools are filled by appends, whose rounding is the library
 * cache's: the same codes and scales); and packed variable-length prefill vs one call per sequence vs
 * the padded batch with lengths. bench/compare_serve.py times the same mix through PyTorch.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "arguments.h"
#include "attn.h"
#include "bench.h"

typedef struct serve_settings {
    int sequences, prefills, chunk, heads, kv_heads, dim, page_size, threads, seed;
    int64_t min_context, max_context;
    int dtypes; /* bits: 1 f32, 2 bf16, 4 f16, 8 int8, 16 fp8_e4m3, 32 fp8_e5m2 */
    double seconds;
    int rounds;                /* --rounds: alternated rounds of the ownership comparison (0: timed) */
    int varlen_max;            /* --varlen-max: the longest sequence of the varlen batches */
    int ownership_only;        /* --ownership: only the library- vs caller-owned comparison */
    attn_kernel_choice kernel; /* --kernel: the kernel family of every call */
} serve_settings;

/* The storage types, in --dtype's bit order. */
#define STORAGE_COUNT 6
static const attn_dtype storages[STORAGE_COUNT] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16,
                                                   ATTN_DTYPE_Q8, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
static const char *storage_names[STORAGE_COUNT] = {"f32", "bf16", "f16", "int8", "fp8_e4m3", "fp8_e5m2"};

static void usage(FILE *stream) {
    fprintf(stream,
            "usage: attn-bench serve [--quick] [--sequences N] [--context MIN MAX] [--seed S]\n"
            "                        [--prefills N] [--chunk N] [--heads HQ] [--kv-heads HKV]\n"
            "                        [--dim D] [--dtype f32|bf16|f16|int8|fp8_e4m3|fp8_e5m2|all]\n"
            "                        [--threads N] [--seconds S] [--page-size N] [--kernel K]\n"
            "                        [--ownership] [--rounds N] [--varlen-max N]\n"
            "  defaults: 64 sequences, contexts 512..32768, seed 1, 4 prefill chunks of 512\n"
            "  tokens per step, Hq 16, Hkv 2, D 128, pages of 16 tokens, every dtype\n"
            "  --quick   16 sequences, contexts 512..8192, shorter timing\n"
            "  --seconds S  timing budget of each measurement (default 2; --quick 0.6)\n"
            "  --page-size N  tokens per page of every cache (default 16)\n"
            "  --kernel K   the kernel family of every call: " CLI_KERNEL_NAMES "\n"
            "  --ownership  only the library- vs caller-owned decode, for each --dtype\n"
            "  --rounds N   that comparison in exactly N alternated rounds (1..400; default: timed)\n"
            "  --varlen-max N  the varlen prefill lines: 8 sequences of N/16..N tokens and 64 of\n"
            "               16..N/8 (128..65536; default 2048)\n"
            "On a machine shared with other jobs, run with OMP_WAIT_POLICY=passive.\n");
}

static int parse(int argc, char **argv, serve_settings *s) {
    *s = (serve_settings){64, 4, 512, 16, 2, 128, 16, 0, 1, 512, 32768, 63, 2.0, 0, 2048, 0,
                          ATTN_KERNEL_AUTO};
    int rounds_given = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const int more = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--quick") == 0) {
            s->sequences = 16, s->min_context = 512, s->max_context = 8192, s->seconds = 0.6;
        } else if (strcmp(a, "--sequences") == 0 && more) s->sequences = atoi(argv[++i]);
        else if (strcmp(a, "--context") == 0 && i + 2 < argc) {
            s->min_context = atoll(argv[++i]);
            s->max_context = atoll(argv[++i]);
        } else if (strcmp(a, "--seed") == 0 && more) s->seed = atoi(argv[++i]);
        else if (strcmp(a, "--prefills") == 0 && more) s->prefills = atoi(argv[++i]);
        else if (strcmp(a, "--chunk") == 0 && more) s->chunk = atoi(argv[++i]);
        else if (strcmp(a, "--heads") == 0 && more) s->heads = atoi(argv[++i]);
        else if (strcmp(a, "--kv-heads") == 0 && more) s->kv_heads = atoi(argv[++i]);
        else if (strcmp(a, "--dim") == 0 && more) s->dim = atoi(argv[++i]);
        else if (strcmp(a, "--threads") == 0 && more) {
            const char *value = argv[++i];
            int64_t threads;
            if (!cli_parse_int64(value, &threads) || threads < 1 || threads > ATTN_MAX_THREADS) {
                fprintf(stderr, "attn-bench serve: --threads '%s': expected an integer in 1..%d (the "
                        "library's ATTN_MAX_THREADS)\n", value, ATTN_MAX_THREADS);
                return 2;
            }
            s->threads = (int)threads;
        }
        else if (strcmp(a, "--seconds") == 0 && more) s->seconds = atof(argv[++i]);
        else if (strcmp(a, "--page-size") == 0 && more) s->page_size = atoi(argv[++i]);
        else if (strcmp(a, "--rounds") == 0 && more) s->rounds = atoi(argv[++i]), rounds_given = 1;
        else if (strcmp(a, "--ownership") == 0) s->ownership_only = 1;
        else if (strcmp(a, "--varlen-max") == 0 && more) s->varlen_max = atoi(argv[++i]);
        else if (strcmp(a, "--kernel") == 0 && more) {
            const char *k = argv[++i];
            if (!cli_parse_kernel(k, &s->kernel)) {
                fprintf(stderr, "attn-bench serve: --kernel '%s': expected " CLI_KERNEL_NAMES "\n", k);
                return 2;
            }
            if (attn_kernel_name(s->kernel) == NULL) {
                fprintf(stderr, "attn-bench serve: --kernel '%s': this CPU or build cannot run it\n", k);
                return 2;
            }
        }
        else if (strcmp(a, "--dtype") == 0 && more) {
            const char *d = argv[++i];
            s->dtypes = strcmp(d, "all") == 0 ? 63 : 0;
            for (int n = 0; n < STORAGE_COUNT; ++n)
                if (strcmp(d, storage_names[n]) == 0) s->dtypes = 1 << n;
            if (s->dtypes == 0) {
                fprintf(stderr, "attn-bench serve: --dtype '%s': expected f32, bf16, f16, int8, fp8_e4m3, "
                                "fp8_e5m2 or all\n", d);
                return 2;
            }
        } else {
            fprintf(stderr, "attn-bench serve: unknown or incomplete option '%s' (see attn-bench serve "
                            "--help)\n", a);
            return 2;
        }
    }
    const char *bad = s->sequences < 2                                 ? "--sequences (>= 2)"
                      : s->prefills < 1 || s->prefills >= s->sequences ? "--prefills (1 .. --sequences - 1)"
                      : s->chunk < 1                                   ? "--chunk (>= 1)"
                      : s->heads < 1 || s->kv_heads < 1 || s->heads % s->kv_heads != 0
                          ? "--heads / --kv-heads (Hq a multiple of Hkv >= 1)"
                      : s->dim < 1                                     ? "--dim (>= 1)"
                      : !(s->seconds > 0 && s->seconds <= 600)         ? "--seconds (0 < S <= 600)"
                      : s->page_size < 1 || s->page_size > 65536       ? "--page-size (1 .. 65536)"
                      : s->rounds < 0 || s->rounds > 400 || (s->rounds == 0 && rounds_given)
                          ? "--rounds (1 .. 400)"
                      : s->min_context < 1 || s->max_context < s->min_context
                          ? "--context (1 <= MIN <= MAX)"
                      : s->varlen_max < 128 || s->varlen_max > 65536 ? "--varlen-max (128 .. 65536)"
                                                                      : NULL;
    if (bad != NULL) {
        fprintf(stderr, "attn-bench serve: %s is out of range (sequences %d, prefills %d, chunk %d, "
                        "heads %d/%d, dim %d, context %lld..%lld, seconds %g, page size %d, rounds %d)\n",
                bad, s->sequences, s->prefills, s->chunk, s->heads, s->kv_heads, s->dim,
                (long long)s->min_context, (long long)s->max_context, s->seconds, s->page_size,
                s->rounds);
        return 2;
    }
    return 0;
}

/* splitmix64: the benchmark's fixed-seed draws. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float random_float(uint64_t *state) {
    return (float)((double)(next_random(state) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static uint16_t to_bits16(attn_dtype dtype, float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if (dtype == ATTN_DTYPE_BF16) return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    /* f16 of a value in (-1, 1): sign, exponent, top mantissa bits (truncated; data only). */
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const int exponent = (int)((bits >> 23) & 0xff) - 127 + 15;
    if (exponent <= 0) return (uint16_t)sign;
    return (uint16_t)(sign | ((uint32_t)exponent << 10) | ((bits & 0x7fffffu) >> 13));
}

/* A page pool's memory as a server would allocate it: 2 MiB aligned and marked for
 * transparent huge pages (as the library's own cache is), so that the comparison with the
 * library-owned cache measures the layout and not the TLB. Free with free(). */
static void *pool_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20, rounded = (bytes + huge - 1) / huge * huge;
    void *pool = aligned_alloc(huge, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (pool != NULL) (void)madvise(pool, rounded, MADV_HUGEPAGE);
#endif
    return pool;
}

/* Fills `count` elements of `dtype` with values in (-1, 1) (int8: codes in [-127, 127], read
 * with a scale of 1/127; fp8: codes of magnitude < 1, no NaN or infinity). */
static void fill_random(void *data, attn_dtype dtype, size_t count, uint64_t seed) {
#pragma omp parallel
    {
        uint64_t state = seed + 7919u * (uint64_t)omp_get_thread_num();
#pragma omp for schedule(static)
        for (size_t e = 0; e < count; ++e) {
            const float x = random_float(&state);
            if (dtype == ATTN_DTYPE_F32) ((float *)data)[e] = x;
            else if (dtype == ATTN_DTYPE_Q8) ((int8_t *)data)[e] = (int8_t)lrintf(x * 127.0f);
            else if (attn_dtype_size(dtype) == 1) /* fp8: exponent below the bias */
                ((uint8_t *)data)[e] = (uint8_t)(next_random(&state) & 0xb7u);
            else ((uint16_t *)data)[e] = to_bits16(dtype, x);
        }
    }
}

static double median(double *times, int count) {
    for (int i = 1; i < count; ++i)
        for (int j = i; j > 0 && times[j] < times[j - 1]; --j) {
            const double t = times[j];
            times[j] = times[j - 1], times[j - 1] = t;
        }
    return times[count / 2];
}

/* One batch of sequences for a call: their rows of the block table, lengths, and tensors. */
typedef struct serve_call {
    int count;            /* sequences in the call */
    int tokens;           /* Tq = Tnew */
    int32_t *table;       /* [count][max_pages] */
    int32_t *seqlens;     /* [count] */
    float *q, *k_new, *v_new, *out;
    attn_tensor table_view, q_view, k_view, v_view, out_view;
    double kv_bytes;      /* K/V bytes the call reads */
} serve_call;

static void call_free(serve_call *c) {
    free(c->table), free(c->seqlens), free(c->q), free(c->k_new), free(c->v_new), free(c->out);
    memset(c, 0, sizeof *c);
}

static int call_init(serve_call *c, int count, int tokens, int64_t max_pages, const serve_settings *s) {
    memset(c, 0, sizeof *c);
    c->count = count, c->tokens = tokens;
    const size_t qn = (size_t)count * tokens * s->heads * s->dim, kn = (size_t)count * tokens * s->kv_heads * s->dim;
    c->table = calloc((size_t)count * (size_t)max_pages, sizeof(int32_t));
    c->seqlens = calloc((size_t)count, sizeof(int32_t));
    c->q = malloc(qn * 4), c->out = malloc(qn * 4), c->k_new = malloc(kn * 4), c->v_new = malloc(kn * 4);
    if (!c->table || !c->seqlens || !c->q || !c->out || !c->k_new || !c->v_new) return -1;
    fill_random(c->q, ATTN_DTYPE_F32, qn, 11), fill_random(c->k_new, ATTN_DTYPE_F32, kn, 12);
    fill_random(c->v_new, ATTN_DTYPE_F32, kn, 13);
    const int64_t tshape[2] = {count, max_pages};
    c->table_view = attn_tensor_contiguous(c->table, ATTN_DTYPE_I32, 2, tshape);
    c->q_view = attn_tensor_f32_4d(c->q, count, tokens, s->heads, s->dim);
    c->out_view = attn_tensor_f32_4d(c->out, count, tokens, s->heads, s->dim);
    c->k_view = attn_tensor_f32_4d(c->k_new, count, tokens, s->kv_heads, s->dim);
    c->v_view = attn_tensor_f32_4d(c->v_new, count, tokens, s->kv_heads, s->dim);
    return 0;
}

/* Points the call at sequences `members` of the pool. */
static void call_select(serve_call *c, const int *members, const int32_t *tables, const int64_t *contexts,
                        int64_t max_pages, double token_bytes) {
    c->kv_bytes = 0;
    for (int n = 0; n < c->count; ++n) {
        memcpy(c->table + n * max_pages, tables + members[n] * max_pages, (size_t)max_pages * sizeof(int32_t));
        c->seqlens[n] = (int32_t)contexts[members[n]];
        c->kv_bytes += (double)(contexts[members[n]] + c->tokens) * token_bytes;
    }
}

/* scales: int8's k_scale, v_scale (NULL otherwise). */
static attn_status call_run(serve_call *c, attn_tensor *k_pool, attn_tensor *v_pool, attn_tensor *scales,
                            const attn_options *options, const attn_execution *execution, attn_error *error) {
    attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, k_pool, v_pool, &c->table_view, c->seqlens,
                               scales != NULL ? &scales[0] : NULL, scales != NULL ? &scales[1] : NULL};
    attn_kv_append append = {&c->k_view, &c->v_view, NULL, NULL, ATTN_ROPE_HALF};
    return attn_forward_with_kvcache(&c->q_view, &view, &append, options, &c->out_view, NULL, execution, error);
}

/* Median seconds of `run(ctx)` over repeats within `budget` seconds (at least 3, one warm-up). */
typedef attn_status (*timed_fn)(void *context, attn_error *error);
static double time_median(timed_fn run, void *context, double budget, attn_error *error) {
    if (run(context, error) != ATTN_OK) return -1;
    double times[64];
    int repeats = 0;
    const double start = omp_get_wtime();
    while (repeats < 64 && (repeats < 3 || omp_get_wtime() - start < budget)) {
        const double before = omp_get_wtime();
        if (run(context, error) != ATTN_OK) return -1;
        times[repeats++] = omp_get_wtime() - before;
    }
    return median(times, repeats);
}

typedef struct step_context {
    serve_call *prefill, *decode;
    attn_tensor *k_pool, *v_pool, *scales;
    const attn_options *options;
    const attn_execution *execution;
    int which; /* 0 both, 1 decode only, 2 prefill only */
} step_context;

static attn_status run_step(void *context, attn_error *error) {
    step_context *c = context;
    attn_status status = ATTN_OK;
    if (c->which != 2) status = call_run(c->decode, c->k_pool, c->v_pool, c->scales, c->options, c->execution, error);
    if (status == ATTN_OK && c->which != 1)
        status = call_run(c->prefill, c->k_pool, c->v_pool, c->scales, c->options, c->execution, error);
    return status;
}

static const char *dtype_label(attn_dtype d) {
    for (int n = 0; n < STORAGE_COUNT; ++n)
        if (storages[n] == d) return storage_names[n];
    return "?";
}

/* int8 storage: k_scale and v_scale [pages, ps, Hkv] float32, every scale 1/127 (scales[0],
 * scales[1]; their memory in *memory, free with free()). Other storage: NULL, nothing
 * allocated. head_major: stored [head, page, slot] (the library's order). */
static attn_tensor *scales_new(attn_dtype dtype, int64_t pages, int64_t ps, int64_t H, int head_major,
                               attn_tensor scales[2], float **memory) {
    *memory = NULL;
    if (dtype != ATTN_DTYPE_Q8) return NULL;
    const size_t count = (size_t)(pages * ps * H);
    if ((*memory = pool_alloc(2 * count * sizeof(float))) == NULL) return NULL;
    for (size_t e = 0; e < 2 * count; ++e) (*memory)[e] = 1.0f / 127.0f;
    const int64_t shape[3] = {pages, ps, H};
    for (int n = 0; n < 2; ++n) {
        scales[n] = attn_tensor_contiguous(*memory + n * count, ATTN_DTYPE_F32, 3, shape);
        if (head_major) scales[n].stride[0] = ps, scales[n].stride[1] = 1, scales[n].stride[2] = pages * ps;
    }
    return scales;
}

/* The step mix for one storage type; prints three rows. */
static int bench_storage(const serve_settings *s, attn_dtype dtype, const int64_t *contexts, int threads) {
    const int64_t ps = s->page_size, B = s->sequences;
    int64_t max_pages = 0, pages = 0;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t need = (contexts[b] + s->chunk + ps - 1) / ps;
        if (need > max_pages) max_pages = need;
        pages += need;
    }
    const size_t element = attn_dtype_size(dtype);
    const size_t row = (size_t)ps * s->kv_heads * s->dim;
    void *k_data = pool_alloc((size_t)pages * row * element), *v_data = pool_alloc((size_t)pages * row * element);
    int32_t *tables = calloc((size_t)(B * max_pages), sizeof(int32_t));
    int32_t *order = malloc((size_t)pages * sizeof(int32_t));
    int *members = malloc((size_t)B * sizeof(int));
    if (!k_data || !v_data || !tables || !order || !members) {
        fprintf(stderr, "attn-bench serve: no memory for a pool of %lld pages\n", (long long)pages);
        free(k_data), free(v_data), free(tables), free(order), free(members);
        return 1;
    }
    fill_random(k_data, dtype, (size_t)pages * row, 21), fill_random(v_data, dtype, (size_t)pages * row, 22);
    uint64_t state = (uint64_t)s->seed * 977u;
    for (int64_t p = 0; p < pages; ++p) order[p] = (int32_t)p;
    for (int64_t p = pages - 1; p > 0; --p) { /* shuffled pages: a fragmented pool */
        const int64_t r = (int64_t)(next_random(&state) % (uint64_t)(p + 1));
        const int32_t t = order[p];
        order[p] = order[r], order[r] = t;
    }
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t need = (contexts[b] + s->chunk + ps - 1) / ps;
        for (int64_t p = 0; p < need; ++p) tables[b * max_pages + p] = order[next++];
    }
    const int64_t shape[4] = {pages, ps, s->kv_heads, s->dim};
    attn_tensor k_pool = attn_tensor_contiguous(k_data, dtype, 4, shape);
    attn_tensor v_pool = attn_tensor_contiguous(v_data, dtype, 4, shape);
    attn_tensor scale_views[2];
    float *scale_memory;
    attn_tensor *scales = scales_new(dtype, pages, ps, s->kv_heads, 0, scale_views, &scale_memory);
    /* K/V bytes a token reads; int8 also reads a float scale per (token, head) of each */
    const double token_bytes = (double)s->kv_heads * 2.0 * ((double)s->dim * (double)element +
                                                             (dtype == ATTN_DTYPE_Q8 ? 4.0 : 0.0));

    serve_call prefill, decode;
    int ok = call_init(&prefill, s->prefills, s->chunk, max_pages, s) == 0 &&
             call_init(&decode, (int)B - s->prefills, 1, max_pages, s) == 0 &&
             (dtype != ATTN_DTYPE_Q8 || scales != NULL);
    if (!ok) fprintf(stderr, "attn-bench serve: no memory for the calls\n");
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    execution.kernel = s->kernel;
    /* Step 0's split: prefill sequences 0..P-1, decode the rest (every step is alike). */
    for (int n = 0; n < s->prefills; ++n) members[n] = n;
    call_select(&prefill, members, tables, contexts, max_pages, token_bytes);
    for (int n = 0; n < (int)B - s->prefills; ++n) members[n] = s->prefills + n;
    call_select(&decode, members, tables, contexts, max_pages, token_bytes);
    attn_error error;
    const char *labels[3] = {"step", "decode", "prefill"};
    for (int which = 0; ok && which < 3; ++which) {
        step_context context = {&prefill, &decode, &k_pool, &v_pool, scales, &options, &execution, which};
        const double seconds = time_median(run_step, &context, s->seconds, &error);
        if (seconds < 0) {
            fprintf(stderr, "attn-bench serve: %s\n", error.message);
            ok = 0;
            break;
        }
        const double bandwidth = bench_measure_read_bandwidth_gbs(threads);
        const double tokens = which == 1 ? decode.count : which == 2 ? (double)prefill.count * s->chunk
                                                                      : decode.count + (double)prefill.count * s->chunk;
        const double bytes = which == 1 ? decode.kv_bytes : which == 2 ? prefill.kv_bytes
                                                                       : decode.kv_bytes + prefill.kv_bytes;
        const double gbs = bytes / seconds * 1e-9;
        printf("%-8s %-8s %10.3f %12.0f %9.2f %10.2f %9.3f\n", dtype_label(dtype), labels[which], seconds * 1e3,
               tokens / seconds, gbs, bandwidth, bandwidth > 0 ? gbs / bandwidth : 0.0);
        fflush(stdout);
    }
    call_free(&prefill), call_free(&decode);
    free(k_data), free(v_data), free(tables), free(order), free(members), free(scale_memory);
    return ok ? 0 : 1;
}

/* ---- decode: library-owned vs caller-owned, the same tokens on the same pages ---- */
typedef struct owned_context {
    attn_kv_cache *cache;
    attn_tensor *q, *out, *k_pool, *v_pool, *scales, *table; /* scales: int8's, or NULL */
    int32_t *seqlens;
    const attn_execution *execution;
    const attn_options *options;
    int caller;
} owned_context;

static attn_status run_owned(void *context, attn_error *error) {
    owned_context *c = context;
    if (c->caller == 0) return attn_decode(c->cache, c->q, c->options, c->out, NULL, c->execution, error);
    attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, c->k_pool, c->v_pool, c->table, c->seqlens,
                               c->scales != NULL ? &c->scales[0] : NULL, c->scales != NULL ? &c->scales[1] : NULL};
    return attn_forward_with_kvcache(c->q, &view, NULL, c->options, c->out, NULL, c->execution, error);
}

/* The caller-owned pools of bench_ownership: sequence b's tokens appended to them (in chunks
 * of `chunk` f32 rows of k / v, the library cache's own rounding) on its pages table[b]. */
static int fill_caller_pool(const serve_settings *s, int B, const int64_t *contexts, int32_t *table,
                            int64_t max_pages, attn_tensor *k_pool, attn_tensor *v_pool, attn_tensor *scales,
                            const float *k, const float *v, int64_t chunk, const attn_execution *execution,
                            attn_error *error) {
    const int H = s->kv_heads, D = s->dim;
    float *qd = calloc((size_t)s->heads * D, 4), *od = malloc((size_t)s->heads * D * 4);
    attn_tensor q = attn_tensor_f32_4d(qd, 1, 1, s->heads, D), out = attn_tensor_f32_4d(od, 1, 1, s->heads, D);
    attn_status status = qd != NULL && od != NULL ? ATTN_OK : ATTN_ERROR_OUT_OF_MEMORY;
    if (status != ATTN_OK) snprintf(error->message, sizeof error->message, "no memory for the fill");
    for (int b = 0; b < B && status == ATTN_OK; ++b)
        for (int64_t have = 0; have < contexts[b] && status == ATTN_OK;) {
            const int64_t n = contexts[b] - have < chunk ? contexts[b] - have : chunk;
            const int64_t tshape[2] = {1, max_pages};
            attn_tensor row = attn_tensor_contiguous(table + b * max_pages, ATTN_DTYPE_I32, 2, tshape);
            attn_tensor kv = attn_tensor_f32_4d((float *)k, 1, n, H, D), vv = attn_tensor_f32_4d((float *)v, 1, n, H, D);
            int32_t held = (int32_t)have;
            attn_kv_cache_view view = {ATTN_KV_CACHE_VIEW_VERSION, k_pool, v_pool, &row, &held,
                                       scales != NULL ? &scales[0] : NULL, scales != NULL ? &scales[1] : NULL};
            attn_kv_append append = {&kv, &vv, NULL, NULL, ATTN_ROPE_HALF};
            status = attn_forward_with_kvcache(&q, &view, &append, NULL, &out, NULL, execution, error);
            have += n;
        }
    free(qd), free(od);
    return status == ATTN_OK ? 0 : 1;
}

/* Decoding B <= 16 sequences from a library-owned cache of `dtype` vs the same tokens on the
 * same pages in two caller-owned pools (token-major, and the library's own head-outermost order);
 * prints one line. */
static int bench_ownership(const serve_settings *s, const int64_t *contexts, int threads, attn_dtype dtype) {
    const int B = s->sequences < 16 ? s->sequences : 16, ps = s->page_size, H = s->kv_heads, D = s->dim;
    int64_t capacity = 0;
    for (int b = 0; b < B; ++b) capacity = contexts[b] > capacity ? contexts[b] : capacity;
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = B, config.kv_heads = H, config.key_dim = D, config.value_dim = D;
    config.dtype = dtype, config.capacity = capacity, config.page_size = ps;
    attn_kv_cache *cache = NULL;
    attn_error error;
    if (attn_kv_cache_create(&config, &cache, &error) != ATTN_OK) {
        fprintf(stderr, "attn-bench serve: %s\n", error.message);
        return 1;
    }
    const int64_t chunk = 1024;
    float *k = malloc((size_t)(chunk * H * D) * 4), *v = malloc((size_t)(chunk * H * D) * 4);
    fill_random(k, ATTN_DTYPE_F32, (size_t)(chunk * H * D), 31), fill_random(v, ATTN_DTYPE_F32, (size_t)(chunk * H * D), 32);
    for (int b = 0; b < B; ++b)
        for (int64_t have = 0; have < contexts[b];) {
            const int64_t n = contexts[b] - have < chunk ? contexts[b] - have : chunk;
            attn_tensor kv = attn_tensor_f32_4d(k, 1, n, H, D), vv = attn_tensor_f32_4d(v, 1, n, H, D);
            attn_kv_cache_append(cache, b, &kv, &vv, &error);
            have += n;
        }
    const int64_t max_pages = (capacity + ps - 1) / ps, pages = (int64_t)B * max_pages;
    /* Two caller-owned pools: flash-attn's token-major pages [page, slot, head, D], and the
     * library's order [head, page, slot, D] viewed through strides (int8: scales
     * [page, slot, head] and [head, page, slot]). */
    const size_t bytes = (size_t)(pages * ps * H * D) * attn_dtype_size(dtype);
    void *kp = pool_alloc(bytes), *vp = pool_alloc(bytes), *kh = pool_alloc(bytes), *vh = pool_alloc(bytes);
    attn_tensor scale_views[2][2];
    float *scale_memory[2];
    attn_tensor *scales[2] = {scales_new(dtype, pages, ps, H, 0, scale_views[0], &scale_memory[0]),
                              scales_new(dtype, pages, ps, H, 1, scale_views[1], &scale_memory[1])};
    int32_t *table = calloc((size_t)(B * max_pages), sizeof(int32_t));
    int32_t *seqlens = malloc((size_t)B * sizeof(int32_t));
    int ok = kp && vp && kh && vh && table && seqlens && (dtype != ATTN_DTYPE_Q8 || (scales[0] && scales[1]));
    if (!ok) fprintf(stderr, "attn-bench serve: no memory for caller-owned pools of %lld pages\n", (long long)pages);
    for (int b = 0; ok && b < B; ++b) { /* the library's pages */
        const int32_t *own = NULL;
        int64_t count = 0;
        attn_kv_cache_block_table(cache, b, &own, &count, &error);
        memcpy(table + b * max_pages, own, (size_t)count * sizeof(int32_t));
        seqlens[b] = (int32_t)contexts[b];
    }
    const int64_t shape[4] = {pages, ps, H, D}, tshape[2] = {B, max_pages};
    attn_tensor k_pool = attn_tensor_contiguous(kp, dtype, 4, shape);
    attn_tensor v_pool = attn_tensor_contiguous(vp, dtype, 4, shape);
    attn_tensor table_view = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, tshape);
    attn_tensor kh_pool = k_pool, vh_pool = v_pool;
    kh_pool.data = kh, vh_pool.data = vh;
    kh_pool.stride[0] = vh_pool.stride[0] = (int64_t)ps * D;         /* page */
    kh_pool.stride[1] = vh_pool.stride[1] = D;                       /* slot */
    kh_pool.stride[2] = vh_pool.stride[2] = (int64_t)pages * ps * D; /* head */
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    execution.kernel = s->kernel;
    if (ok && (fill_caller_pool(s, B, contexts, table, max_pages, &k_pool, &v_pool, scales[0], k, v, chunk,
                                &execution, &error) != 0 ||
               fill_caller_pool(s, B, contexts, table, max_pages, &kh_pool, &vh_pool, scales[1], k, v, chunk,
                                &execution, &error) != 0)) {
        fprintf(stderr, "attn-bench serve: %s\n", error.message);
        ok = 0;
    }
    float *qd = malloc((size_t)B * s->heads * D * 4), *od = malloc((size_t)B * s->heads * D * 4);
    ok = ok && qd != NULL && od != NULL;
    if (ok) fill_random(qd, ATTN_DTYPE_F32, (size_t)B * s->heads * D, 33);
    attn_tensor q = attn_tensor_f32_4d(qd, B, 1, s->heads, D), out = attn_tensor_f32_4d(od, B, 1, s->heads, D);
    /* The three decodes one call each in turn (after a warm-up), so that a change of the
     * machine's speed (another job, the host) falls on all three alike: the ratios are the
     * medians of each round's ratios, the times the medians of each layout's calls. */
    enum { MOST_ROUNDS = 400 };
    double times[3][MOST_ROUNDS], ratios[2][MOST_ROUNDS];
    owned_context contexts_of[3];
    for (int caller = 0; caller <= 2; ++caller)
        contexts_of[caller] = (owned_context){cache, &q, &out, caller == 2 ? &kh_pool : &k_pool,
                                              caller == 2 ? &vh_pool : &v_pool, scales[caller == 2],
                                              &table_view, seqlens, &execution, &options, caller};
    int rounds = 0;
    const double start = omp_get_wtime();
    /* --rounds: exactly that many; else at least 5 and about 1.5 x --seconds */
    for (int round = -2; ok && round < MOST_ROUNDS &&
                         (s->rounds > 0 ? round < s->rounds
                                        : round < 5 || omp_get_wtime() - start < 1.5 * s->seconds);
         ++round)
        for (int caller = 0; caller <= 2 && ok; ++caller) {
            const double before = omp_get_wtime();
            if (run_owned(&contexts_of[caller], &error) != ATTN_OK) {
                fprintf(stderr, "attn-bench serve: %s\n", error.message);
                ok = 0;
            }
            if (round >= 0) times[caller][round] = omp_get_wtime() - before;
            if (round >= 0 && caller == 2) {
                ratios[0][round] = times[1][round] / times[0][round];
                ratios[1][round] = times[2][round] / times[0][round];
                rounds = round + 1;
            }
        }
    if (ok)
        printf("decode, %s, %d sequences, same pages, %d alternated rounds: library-owned %.3f ms; caller-owned "
               "[page, slot, head, D] %.3f ms (caller / library = %.3f); caller-owned "
               "[head, page, slot, D] %.3f ms (caller / library = %.3f)\n",
               dtype_label(dtype), B, rounds, median(times[0], rounds) * 1e3, median(times[1], rounds) * 1e3,
               median(ratios[0], rounds), median(times[2], rounds) * 1e3, median(ratios[1], rounds));
    attn_kv_cache_destroy(cache);
    free(k), free(v), free(kp), free(vp), free(kh), free(vh), free(table), free(seqlens), free(qd), free(od);
    free(scale_memory[0]), free(scale_memory[1]);
    return ok ? 0 : 1;
}

/* ---- varlen prefill vs per-sequence calls vs the padded batch ---- */
typedef struct varlen_context {
    int mode; /* 0 varlen, 1 per sequence, 2 padded with lengths, 4 padded with a key mask,
                 5 padded with neither (every tile computed) */
    int B;
    const int32_t *cu;
    int64_t max_length;
    attn_tensor *q, *k, *v, *out;          /* packed [total, H, D] */
    attn_tensor *Q, *K, *V, *O;            /* padded [B, max, H, D] */
    const attn_options *options;
    const attn_execution *execution;
    int32_t *lengths;
    const attn_tensor *key_mask;           /* [B, 1, max, max] bool, stride 0 over queries */
} varlen_context;

static attn_tensor sequence_view(const attn_tensor *packed, int64_t first, int64_t length) {
    attn_tensor t = attn_tensor_f32_4d((float *)packed->data + first * packed->stride[0], 1, length, packed->shape[1],
                                       packed->shape[2]);
    return t;
}

static attn_status run_varlen(void *context, attn_error *error) {
    varlen_context *c = context;
    if (c->mode == 0) {
        attn_varlen sequences = {c->B, c->cu, c->cu, c->max_length, c->max_length};
        return attn_varlen_forward(c->q, c->k, c->v, &sequences, c->options, c->out, NULL, c->execution, error);
    }
    if (c->mode == 1) {
        for (int b = 0; b < c->B; ++b) {
            const int64_t first = c->cu[b], length = c->cu[b + 1] - c->cu[b];
            attn_tensor q = sequence_view(c->q, first, length), k = sequence_view(c->k, first, length);
            attn_tensor v = sequence_view(c->v, first, length), o = sequence_view(c->out, first, length);
            attn_status status = attn_forward(&q, &k, &v, c->options, &o, NULL, c->execution, error);
            if (status != ATTN_OK) return status;
        }
        return ATTN_OK;
    }
    attn_options padded = *c->options;
    if (c->mode == 4) /* keys masked: attn skips the tiles whose keys are all padding */
        padded.mask = c->key_mask;
    else if (c->mode == 2)
        padded.query_lengths = c->lengths, padded.key_lengths = c->lengths;
    /* mode 5: causal alone, every tile of the padded batch computed, the work of a framework
     * that pads (its padding keys are not masked: the time, not the result, is used) */
    return attn_forward(c->Q, c->K, c->V, &padded, c->O, NULL, c->execution, error);
}

/* B sequences of lengths low..high (fixed seed) with Hkv KV heads. */
static int bench_varlen(const serve_settings *s, int threads, int B, int low, int high, int Hkv) {
    enum { MOST = 64 };
    int32_t cu[MOST + 1] = {0}, lengths[MOST];
    uint64_t state = (uint64_t)s->seed * 131u + (uint64_t)B;
    int64_t longest = 0;
    for (int b = 0; b < B; ++b) {
        lengths[b] = low + (int32_t)(next_random(&state) % (uint64_t)(high - low + 1));
        cu[b + 1] = cu[b] + lengths[b];
        longest = lengths[b] > longest ? lengths[b] : longest;
    }
    /* (query, key) pairs the causal mask allows: of the sequences (the useful work), of the
     * padded batch with its padding keys masked, and of the whole padded batch */
    double useful = 0, key_masked = 0;
    for (int b = 0; b < B; ++b) {
        const double L = lengths[b];
        useful += L * (L + 1) / 2;
        key_masked += L * (L + 1) / 2 + (double)(longest - lengths[b]) * L;
    }
    const double padded_pairs = (double)B * (double)longest * (double)(longest + 1) / 2;
    const int64_t H = s->heads, D = s->dim, total = cu[B];
    float *q = malloc((size_t)(total * H * D) * 4), *k = malloc((size_t)(total * Hkv * D) * 4);
    float *v = malloc((size_t)(total * Hkv * D) * 4), *o = malloc((size_t)(total * H * D) * 4);
    float *Q = calloc((size_t)(B * longest * H * D), 4), *K = calloc((size_t)(B * longest * Hkv * D), 4);
    float *V = calloc((size_t)(B * longest * Hkv * D), 4), *O = calloc((size_t)(B * longest * H * D), 4);
    if (!q || !k || !v || !o || !Q || !K || !V || !O) {
        fprintf(stderr, "attn-bench serve: no memory for the varlen batch\n");
        return 1;
    }
    fill_random(q, ATTN_DTYPE_F32, (size_t)(total * H * D), 41), fill_random(k, ATTN_DTYPE_F32, (size_t)(total * Hkv * D), 42);
    fill_random(v, ATTN_DTYPE_F32, (size_t)(total * Hkv * D), 43);
    for (int b = 0; b < B; ++b) {
        memcpy(Q + b * longest * H * D, q + cu[b] * H * D, (size_t)(lengths[b] * H * D) * 4);
        memcpy(K + b * longest * Hkv * D, k + cu[b] * Hkv * D, (size_t)(lengths[b] * Hkv * D) * 4);
        memcpy(V + b * longest * Hkv * D, v + cu[b] * Hkv * D, (size_t)(lengths[b] * Hkv * D) * 4);
    }
    const int64_t qs[3] = {total, H, D}, ks[3] = {total, Hkv, D};
    attn_tensor qv = attn_tensor_contiguous(q, ATTN_DTYPE_F32, 3, qs), kv = attn_tensor_contiguous(k, ATTN_DTYPE_F32, 3, ks);
    attn_tensor vv = attn_tensor_contiguous(v, ATTN_DTYPE_F32, 3, ks), ov = attn_tensor_contiguous(o, ATTN_DTYPE_F32, 3, qs);
    attn_tensor Qv = attn_tensor_f32_4d(Q, B, longest, H, D), Kv = attn_tensor_f32_4d(K, B, longest, Hkv, D);
    attn_tensor Vv = attn_tensor_f32_4d(V, B, longest, Hkv, D), Ov = attn_tensor_f32_4d(O, B, longest, H, D);
    attn_options options = attn_options_default();
    options.causal = 1, options.alignment = ATTN_ALIGN_BOTTOM_RIGHT, options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    execution.kernel = s->kernel;
    attn_execution one_thread = execution;
    one_thread.num_threads = 1;
    /* The key-padding mask of the padded batch ([B][max] flags viewed as [B, 1, max, max]);
     * sequences start at 0 and have len_q = len_k, so causal needs no lengths there. */
    uint8_t *flags = calloc((size_t)(B * longest), 1);
    for (int b = 0; b < B; ++b) memset(flags + b * longest, 1, (size_t)lengths[b]);
    attn_tensor key_mask = {flags, ATTN_DTYPE_BOOL, 4, {B, 1, longest, longest}, {longest, 0, 0, 1}};
    double seconds[6] = {0, 0, 0, 0, 0, 0};
    attn_error error;
    for (int round = 0; round < 3; ++round) /* interleaved rounds, best median of each */
        for (int mode = 0; mode < 6; ++mode) { /* mode 3: varlen on one thread (the split's speedup) */
            if (mode == 3 && threads == 1) continue;
            varlen_context context = {mode == 3 ? 0 : mode, B, cu, longest, &qv, &kv, &vv, &ov, &Qv, &Kv, &Vv, &Ov,
                                      &options, mode == 3 ? &one_thread : &execution, lengths, &key_mask};
            const double t = time_median(run_varlen, &context, s->seconds / 3, &error);
            if (t < 0) {
                fprintf(stderr, "attn-bench serve: %s\n", error.message);
                return 1;
            }
            if (round == 0 || t < seconds[mode]) seconds[mode] = t;
        }
    const double token_ratio = (double)B * (double)longest / (double)total;
    printf("varlen causal prefill, %d sequences of %d..%d tokens, Hkv %d (%lld in all, longest %lld): varlen %.2f ms, "
           "one call per sequence %.2f ms (varlen / separate = %.3f), padded batch with lengths %.2f ms "
           "(padded / varlen = %.2f), padded batch with a key mask %.2f ms (padded / varlen = %.2f; its allowed pairs / "
           "the sequences' = %.2f), padded batch computing every tile %.2f ms (padded / varlen = %.2f; padding ratio of "
           "the work, causal pairs of B x max / of the sequences = %.2f, of the tokens = %.2f); varlen on 1 thread "
           "%.2f ms (speedup of %d threads %.2f)\n",
           B, low, high, Hkv, (long long)total, (long long)longest, seconds[0] * 1e3, seconds[1] * 1e3, seconds[0] / seconds[1],
           seconds[2] * 1e3, seconds[2] / seconds[0], seconds[4] * 1e3, seconds[4] / seconds[0], key_masked / useful,
           seconds[5] * 1e3, seconds[5] / seconds[0], padded_pairs / useful, token_ratio, seconds[3] * 1e3, threads,
           seconds[3] > 0 ? seconds[3] / seconds[0] : 1.0);
    free(q), free(k), free(v), free(o), free(Q), free(K), free(V), free(O), free(flags);
    return 0;
}

int bench_serve(int argc, char **argv) {
    serve_settings s;
    const int parsed = parse(argc, argv, &s);
    if (parsed != 0) return parsed == 1 ? 0 : 2;
    const int threads = s.threads > 0 ? s.threads : omp_get_max_threads();
    int64_t *contexts = malloc((size_t)s.sequences * sizeof(int64_t));
    if (contexts == NULL) return 1;
    uint64_t state = (uint64_t)s.seed;
    for (int b = 0; b < s.sequences; ++b)
        contexts[b] = s.min_context + (int64_t)(next_random(&state) % (uint64_t)(s.max_context - s.min_context + 1));
    printf("attn-bench serve: %d sequences, contexts %lld..%lld (seed %d), Hq %d, Hkv %d, D %d, pages of %d, "
           "each step %d prefill chunks of %d tokens + %d decode tokens, causal, %d threads, kernels %s\n",
           s.sequences, (long long)s.min_context, (long long)s.max_context, s.seed, s.heads, s.kv_heads, s.dim,
           s.page_size, s.prefills, s.chunk, s.sequences - s.prefills, threads, attn_kernel_name(s.kernel));
    int status = 0;
    if (s.ownership_only) { /* --ownership: the comparison alone, for each storage asked for */
        for (int d = 0; d < STORAGE_COUNT && status == 0; ++d)
            if (s.dtypes & (1 << d)) status = bench_ownership(&s, contexts, threads, storages[d]);
        free(contexts);
        return status;
    }
    printf("%-8s %-8s %10s %12s %9s %10s %9s\n", "storage", "part", "ms/step", "tokens/s", "KV GB/s", "read GB/s",
           "fraction");
    for (int d = 0; d < STORAGE_COUNT && status == 0; ++d)
        if (s.dtypes & (1 << d)) status = bench_storage(&s, storages[d], contexts, threads);
    /* Library- vs caller-owned decode: bf16 always, and each 8-bit storage asked for. */
    if (status == 0) status = bench_ownership(&s, contexts, threads, ATTN_DTYPE_BF16);
    for (int d = 3; d < STORAGE_COUNT && status == 0; ++d)
        if (s.dtypes & (1 << d)) status = bench_ownership(&s, contexts, threads, storages[d]);
    if (status == 0) status = bench_varlen(&s, threads, 8, s.varlen_max / 16, s.varlen_max, s.kv_heads);
    /* Many short MQA sequences: few work items each, so they run side by side. */
    if (status == 0) status = bench_varlen(&s, threads, 64, 16, s.varlen_max / 8, 1);
    free(contexts);
    return status;
}
