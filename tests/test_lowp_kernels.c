/*
 * test_lowp_kernels.c — the bf16 / fp16 kernels of src/kernels/lowp.h, the tables of every
 * registry this build, CPU and OS run (generic, AVX512_BF16, AMX: kernels/registry.h) plus the AMX tile algorithm on a portable emulation
 * of the tile operations (so its staging and layouts are tested without AMX), against an
 * independent double-precision computation on the same bf16 inputs.
 *
 * Covered: the packed layouts element by element (zero padding included) from contiguous,
 * padded and transposed sources; Q·Kᵀ and P·V on tiles whose rows / keys / dims are not
 * multiples of 2, 16 or 32 (D = 1, odd D, D = 576), prefixes of a packed tile, logits near
 * 1e30; no writes outside the tile (sentinels); the bf16 rounding of P (nearest-even,
 * subnormals flushed) by an independent rounding; bf16 / fp16 → fp32 for all 65536 patterns;
 * fp32 → bf16 / fp16 rounding and the overflow count; P rounded in place.
 *
 * Error bound of an fp32 sum of n exact products, added one by one: |s − exact| ≤
 * n · 2^-24 · Σ|products| (γ_n, n·u < 1); the tests allow (n + 2) · 2^-24 · Σ|·| + 1e-30.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "kernels/amx/amx_fp16.h"
#include "kernels/half.h"
#include "kernels/registry.h"
#include "test_support.h"
#include "amx_emulation.h"

/* The AMX tile algorithms on emulated tiles: tests/support/amx_emulation.h. */
static double f16_reference(uint16_t h);

/* ---- tables to test: the tiles and conversions of every registry this CPU runs ---- */
typedef struct table_list {
    const attn_lowp_kernels *list[8]; /* bf16 tiles */
    const attn_lowp_kernels *f16[8];  /* fp16 tiles */
    const attn_lowp_convert *convert[4];
    int count, f16_count, convert_count;
} table_list;

static table_list tables(void) {
    table_list t = {{&emulated_amx}, {&emulated_amx_f16}, {NULL}, 1, 1, 0};
    const attn_kernel_choice choices[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX512_BF16, ATTN_KERNEL_AMX};
    for (int c = 0; c < 3; ++c) {
        const attn_kernels *kernels = NULL;
        if (attn_kernels_select(choices[c], &kernels, NULL) != ATTN_OK) {
            printf("registry %s not available here: its tiles are not run\n",
                   attn_kernel_choice_name(choices[c]));
            continue;
        }
        t.list[t.count++] = &kernels->bf16;
        /* the generic fp16 tiles once, and every other (AMX-FP16 where present) */
        if (choices[c] == ATTN_KERNEL_GENERIC || strcmp(kernels->f16.name, "generic") != 0)
            t.f16[t.f16_count++] = &kernels->f16;
        if (choices[c] != ATTN_KERNEL_AMX) t.convert[t.convert_count++] = &kernels->convert;
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
        if (choices[c] == ATTN_KERNEL_AVX512_BF16) {
            t.list[t.count++] = &emulated_amx_avx512;
            t.f16[t.f16_count++] = &emulated_amx_f16_avx512;
        }
#endif
    }
    /* The AVX2 registry's own conversions (F16C), which its fp32 forward uses for 16-bit
     * operands; its tiles are the generic ones. */
    const attn_kernels *avx2 = NULL;
    if (attn_kernels_select(ATTN_KERNEL_AVX2, &avx2, NULL) == ATTN_OK &&
        strcmp(avx2->convert.name, "generic") != 0)
        t.convert[t.convert_count++] = &avx2->convert;
    return t;
}

/* ---- independent bf16 helpers (double arithmetic, not the library's bit tricks) ---- */
static double bf16_bits_to_double(uint16_t h) {
    const int sign = h >> 15, exponent = (h >> 7) & 0xff, mantissa = h & 0x7f;
    double magnitude = exponent == 0 ? ldexp(mantissa, -133) : ldexp(128 + mantissa, exponent - 134);
    return sign ? -magnitude : magnitude;
}
/* Nearest-even bf16 of x (finite, |x| < 2^127), with |x| < 2^-126 flushed to 0; as a double. */
static double bf16_round_reference(double x) {
    if (fabs(x) < ldexp(1.0, -126)) return 0.0;
    int exponent;
    frexp(x, &exponent);                      /* |x| in [2^(exponent-1), 2^exponent) */
    const double ulp = ldexp(1.0, exponent - 8);
    return nearbyint(x / ulp) * ulp;          /* default rounding: nearest, ties even */
}
static uint16_t double_to_bf16_bits(double x) { /* x representable in bf16 */
    float f = (float)x;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return (uint16_t)(bits >> 16);
}
static uint16_t random_bf16(test_rng *rng, double scale) {
    return double_to_bf16_bits(bf16_round_reference(test_rng_normal(rng) * scale));
}

/* Nearest-even fp16 of x (finite, |x| < 65504), subnormals kept (unit 2^-24); as a double. */
static double f16_round_reference(double x) {
    if (x == 0.0) return 0.0;
    const int exponent = ilogb(x) < -14 ? -14 : ilogb(x); /* |x| in [2^e, 2^(e+1)) or subnormal */
    const double ulp = ldexp(1.0, exponent - 10);
    return nearbyint(x / ulp) * ulp;
}
static uint16_t random_f16(test_rng *rng, double scale) {
    return attn_float_to_f16((float)f16_round_reference(test_rng_normal(rng) * scale)); /* exact */
}

/* The operand type of a tile table: random values, their exact value, the rounding of P. */
typedef struct operand_type {
    const char *name;
    uint16_t (*random)(test_rng *rng, double scale);
    double (*value)(uint16_t bits);
    double (*round)(double x);
    double largest_scale; /* inputs drawn at most this large (fp16 tops out at 65504) */
} operand_type;
static const operand_type bf16_type = {"bf16", random_bf16, bf16_bits_to_double, bf16_round_reference, 1e300};
static const operand_type f16_type = {"fp16", random_f16, f16_reference, f16_round_reference, 100.0};

static void *aligned_fill(size_t bytes, unsigned char fill) {
    void *p = attn_aligned_alloc(bytes + 64);
    memset(p, fill, bytes + 64);
    return p;
}

/* A [count][dim] logical bf16 matrix stored in one of three layouts. */
typedef enum layout { CONTIGUOUS, PADDED, TRANSPOSED } layout;
typedef struct strided_source { uint16_t *data; int64_t token_stride, dim_stride; } strided_source;
static strided_source make_source(const uint16_t *logical, int count, int dim, layout kind) {
    strided_source s;
    const int64_t padded_dim = dim + 3;
    s.data = aligned_fill((size_t)count * padded_dim * 2 + 2, 0xAB);
    s.token_stride = kind == CONTIGUOUS ? dim : kind == PADDED ? padded_dim : 1;
    s.dim_stride = kind == TRANSPOSED ? count : 1;
    for (int c = 0; c < count; ++c)
        for (int d = 0; d < dim; ++d)
            s.data[c * s.token_stride + d * s.dim_stride] = logical[(size_t)c * dim + d];
    return s;
}

/* ---- packing: the exact layout of lowp.h ---- */
static void test_packing(const attn_lowp_kernels *table, test_rng *rng) {
    static const int counts[] = {1, 2, 15, 16, 17, 33, 64};
    static const int dims[] = {1, 2, 3, 31, 32, 33, 128};
    int key_errors = 0, value_errors = 0;
    for (size_t i = 0; i < sizeof counts / sizeof *counts; ++i)
        for (size_t j = 0; j < sizeof dims / sizeof *dims; ++j)
            for (int kind = 0; kind < 3; ++kind) {
                const int count = counts[i], dim = dims[j];
                uint16_t *logical = malloc((size_t)count * dim * 2);
                for (int n = 0; n < count * dim; ++n) logical[n] = random_bf16(rng, 1.0) | 1u;
                strided_source s = make_source(logical, count, dim, (layout)kind);
                const size_t key_bytes = attn_lowp_packed_keys_bytes(count, dim);
                const size_t value_bytes = attn_lowp_packed_values_bytes(count, dim);
                uint16_t *keys = aligned_fill(key_bytes, 0xCD), *values = aligned_fill(value_bytes, 0xCD);
                table->pack_keys(count, dim, s.data, s.token_stride, s.dim_stride, keys);
                table->pack_values(count, dim, s.data, s.token_stride, s.dim_stride, values);
                const int pairs = (dim + 31) / 32 * 16, dim16 = (dim + 15) / 16 * 16;
                for (size_t n = 0; n < key_bytes / 2; ++n) { /* n → (key, d) by the formula */
                    const int block = (int)(n / (32 * (size_t)pairs)), rest = (int)(n % (32 * (size_t)pairs));
                    const int c = block * 16 + (rest % 32) / 2, d = (rest / 32) * 2 + rest % 2;
                    const uint16_t expected = c < count && d < dim ? logical[(size_t)c * dim + d] : 0;
                    key_errors += keys[n] != expected;
                }
                for (size_t n = 0; n < value_bytes / 2; ++n) {
                    const int pair = (int)(n / (2 * (size_t)dim16)), rest = (int)(n % (2 * (size_t)dim16));
                    const int c = pair * 2 + rest % 2, e = rest / 2;
                    const uint16_t expected = c < count && e < dim ? logical[(size_t)c * dim + e] : 0;
                    value_errors += values[n] != expected;
                }
                key_errors += keys[key_bytes / 2] != 0xCDCD; /* nothing past the packed size */
                value_errors += values[value_bytes / 2] != 0xCDCD;
                attn_aligned_free(keys);
                attn_aligned_free(values);
                attn_aligned_free(s.data);
                free(logical);
            }
    CHECK(key_errors == 0, "%s pack_keys: layout of lowp.h, zero padding (%d wrong)", table->name, key_errors);
    CHECK(value_errors == 0, "%s pack_values: VNNI pair layout, zero padding (%d wrong)", table->name,
          value_errors);
}

/* ---- score_tile and accumulate_values against double ---- */
typedef struct tile_case { int rows, count, dim, packed_count; double scale; layout kind; } tile_case;
static const tile_case tile_cases[] = {
    /* rows count dim packed scale layout */
    {1, 1, 1, 1, 1.0, CONTIGUOUS},     {1, 2, 2, 2, 1.0, CONTIGUOUS},
    {3, 5, 3, 5, 1.0, PADDED},         {6, 16, 16, 16, 1.0, CONTIGUOUS},
    {7, 17, 17, 17, 1.0, TRANSPOSED},  {16, 31, 31, 31, 1.0, CONTIGUOUS},
    {17, 32, 32, 32, 1.0, PADDED},     {31, 33, 33, 33, 1.0, CONTIGUOUS},
    {33, 64, 64, 64, 1.0, CONTIGUOUS}, {13, 65, 127, 65, 1.0, TRANSPOSED},
    {32, 256, 128, 256, 1.0, CONTIGUOUS}, {40, 300, 80, 300, 1.0, PADDED},
    {5, 257, 576, 257, 1.0, CONTIGUOUS},
    /* prefixes of a packed tile: packed_count > count */
    {9, 13, 64, 64, 1.0, CONTIGUOUS},  {20, 1, 33, 17, 1.0, PADDED}, {18, 47, 96, 256, 1.0, CONTIGUOUS},
    /* huge logits: |q|, |k| ~ 1e15 gives scores ~ 1e30 */
    {6, 40, 64, 40, 1e15, CONTIGUOUS}, {17, 33, 3, 33, 3e18, PADDED},
};

static void test_tiles(const attn_lowp_kernels *table, const operand_type *type, test_rng *rng) {
    int score_failures = 0, value_failures = 0, sentinel_failures = 0;
    double worst_score = 0.0, worst_value = 0.0;
    for (size_t n = 0; n < sizeof tile_cases / sizeof *tile_cases; ++n) {
        const tile_case tc = tile_cases[n];
        const int rows = tc.rows, count = tc.count, dim = tc.dim, packed_count = tc.packed_count;
        const double scale = tc.scale < type->largest_scale ? tc.scale : type->largest_scale;
        const int query_stride = attn_lowp_query_stride(dim) + 32; /* wider than needed */
        const int scores_stride = count + 5, accumulator_stride = dim + 7, weights_stride = count + 3;
        uint16_t *queries = aligned_fill((size_t)rows * query_stride * 2, 0);
        uint16_t *keys = malloc((size_t)packed_count * dim * 2), *values = malloc((size_t)packed_count * dim * 2);
        for (int r = 0; r < rows; ++r)
            for (int d = 0; d < dim; ++d) queries[(size_t)r * query_stride + d] = type->random(rng, scale);
        for (int i = 0; i < packed_count * dim; ++i) {
            keys[i] = type->random(rng, scale);
            values[i] = type->random(rng, scale);
        }
        strided_source ks = make_source(keys, packed_count, dim, tc.kind);
        strided_source vs = make_source(values, packed_count, dim, tc.kind);
        uint16_t *packed_keys = aligned_fill(attn_lowp_packed_keys_bytes(packed_count, dim), 0);
        uint16_t *packed_values = aligned_fill(attn_lowp_packed_values_bytes(packed_count, dim), 0);
        table->pack_keys(packed_count, dim, ks.data, ks.token_stride, ks.dim_stride, packed_keys);
        table->pack_values(packed_count, dim, vs.data, vs.token_stride, vs.dim_stride, packed_values);

        /* S = Q·Kᵀ */
        float *scores = malloc((size_t)(rows + 1) * scores_stride * sizeof(float));
        for (int i = 0; i < (rows + 1) * scores_stride; ++i) scores[i] = 12345.0f;
        table->score_tile(rows, count, dim, queries, query_stride, packed_keys, scores, scores_stride);
        for (int r = 0; r < rows + 1; ++r)
            for (int c = 0; c < scores_stride; ++c) {
                const float got = scores[(size_t)r * scores_stride + c];
                if (r == rows || c >= count) { sentinel_failures += got != 12345.0f; continue; }
                double exact = 0.0, magnitude = 0.0;
                for (int d = 0; d < dim; ++d) {
                    const double p = type->value(queries[(size_t)r * query_stride + d]) *
                                     type->value(keys[(size_t)c * dim + d]);
                    exact += p;
                    magnitude += fabs(p);
                }
                const double bound = (dim + 2) * ldexp(magnitude, -24) + 1e-30;
                const double error = fabs(got - exact);
                if (!(error <= bound)) ++score_failures;
                if (magnitude > 0 && error / magnitude > worst_score) worst_score = error / magnitude;
            }

        /* O += P·V with P in [0, 1) (a few exact zeros and tiny values too) */
        float *weights = malloc((size_t)rows * weights_stride * sizeof(float));
        float *accumulator = malloc((size_t)(rows + 1) * accumulator_stride * sizeof(float));
        float *initial = malloc((size_t)(rows + 1) * accumulator_stride * sizeof(float));
        for (int i = 0; i < rows * weights_stride; ++i) {
            const double u = test_rng_uniform(rng);
            weights[i] = u < 0.05 ? 0.0f : u < 0.1 ? (float)ldexp(u, -130)
                                           : u < 0.15 ? (float)ldexp(u, -18) /* fp16 subnormal */
                                                      : (float)u;
        }
        for (int i = 0; i < (rows + 1) * accumulator_stride; ++i)
            initial[i] = accumulator[i] = (float)(test_rng_normal(rng) * scale);
        table->accumulate_values(rows, count, dim, weights, weights_stride, packed_values,
                                 accumulator, accumulator_stride);
        for (int r = 0; r < rows + 1; ++r)
            for (int e = 0; e < accumulator_stride; ++e) {
                const size_t at = (size_t)r * accumulator_stride + e;
                if (r == rows || e >= dim) { sentinel_failures += accumulator[at] != initial[at]; continue; }
                double exact = initial[at], magnitude = fabs(initial[at]);
                for (int c = 0; c < count; ++c) {
                    const double p = type->round(weights[(size_t)r * weights_stride + c]) *
                                     type->value(values[(size_t)c * dim + e]);
                    exact += p;
                    magnitude += fabs(p);
                }
                const double bound = (count + 2) * ldexp(magnitude, -24) + 1e-30;
                const double error = fabs(accumulator[at] - exact);
                if (!(error <= bound)) ++value_failures;
                if (magnitude > 0 && error / magnitude > worst_value) worst_value = error / magnitude;
            }
        free(weights);
        free(accumulator);
        free(initial);
        free(scores);
        attn_aligned_free(packed_keys);
        attn_aligned_free(packed_values);
        attn_aligned_free(ks.data);
        attn_aligned_free(vs.data);
        attn_aligned_free(queries);
        free(keys);
        free(values);
    }
    CHECK(score_failures == 0, "%s %s score_tile within (D+2)·2^-24·Σ|q·k| of double (%d outside; worst %.3g of Σ|q·k|)",
          table->name, type->name, score_failures, worst_score);
    CHECK(value_failures == 0,
          "%s accumulate_values with P rounded to %s within (n+2)·2^-24·Σ|p·v| (%d outside; worst %.3g)",
          table->name, type->name, value_failures, worst_value);
    CHECK(sentinel_failures == 0, "%s %s writes nothing outside the tile (%d writes)", table->name,
          type->name, sentinel_failures);
}

/* ---- tables that must agree bit for bit: the AMX-FP16 algorithm and the generic fp16 tiles
 * add the same exact products in the same order (TDPFP16PS's: lowp.h) ---- */
static void test_same_bits(const attn_lowp_kernels *a, const attn_lowp_kernels *b,
                           const operand_type *type, test_rng *rng) {
    int packing = 0, differing = 0, compared = 0;
    for (size_t n = 0; n < sizeof tile_cases / sizeof *tile_cases; ++n) {
        const tile_case tc = tile_cases[n];
        const int rows = tc.rows, count = tc.count, dim = tc.dim, packed_count = tc.packed_count;
        const double scale = tc.scale < type->largest_scale ? tc.scale : type->largest_scale;
        const int query_stride = attn_lowp_query_stride(dim);
        uint16_t *queries = aligned_fill((size_t)rows * query_stride * 2, 0);
        uint16_t *rows_k = malloc((size_t)packed_count * dim * 2), *rows_v = malloc((size_t)packed_count * dim * 2);
        for (int r = 0; r < rows; ++r)
            for (int d = 0; d < dim; ++d) queries[(size_t)r * query_stride + d] = type->random(rng, scale);
        for (int i = 0; i < packed_count * dim; ++i) {
            rows_k[i] = type->random(rng, scale);
            rows_v[i] = type->random(rng, scale);
        }
        const size_t key_bytes = attn_lowp_packed_keys_bytes(packed_count, dim);
        const size_t value_bytes = attn_lowp_packed_values_bytes(packed_count, dim);
        uint16_t *packed[2][2]; /* [table][keys, values] */
        float *scores[2], *accumulator[2];
        float *weights = malloc((size_t)rows * count * sizeof(float));
        for (int i = 0; i < rows * count; ++i) {
            const double u = test_rng_uniform(rng);
            weights[i] = u < 0.1 ? (float)ldexp(u, -18) : (float)u;
        }
        for (int t = 0; t < 2; ++t) {
            const attn_lowp_kernels *table = t ? b : a;
            packed[t][0] = aligned_fill(key_bytes, 0);
            packed[t][1] = aligned_fill(value_bytes, 0);
            table->pack_keys(packed_count, dim, rows_k, dim, 1, packed[t][0]);
            table->pack_values(packed_count, dim, rows_v, dim, 1, packed[t][1]);
            scores[t] = malloc((size_t)rows * count * sizeof(float));
            accumulator[t] = malloc((size_t)rows * dim * sizeof(float));
            table->score_tile(rows, count, dim, queries, query_stride, packed[t][0], scores[t], count);
            test_rng copy = *rng; /* the same initial accumulator for both */
            for (int i = 0; i < rows * dim; ++i) accumulator[t][i] = (float)(test_rng_normal(&copy) * scale);
            table->accumulate_values(rows, count, dim, weights, count, packed[t][1], accumulator[t], dim);
        }
        packing += memcmp(packed[0][0], packed[1][0], key_bytes) != 0;
        packing += memcmp(packed[0][1], packed[1][1], value_bytes) != 0;
        for (int i = 0; i < rows * count; ++i) differing += scores[0][i] != scores[1][i];
        for (int i = 0; i < rows * dim; ++i) differing += accumulator[0][i] != accumulator[1][i];
        compared += rows * count + rows * dim;
        for (int t = 0; t < 2; ++t) {
            attn_aligned_free(packed[t][0]);
            attn_aligned_free(packed[t][1]);
            free(scores[t]);
            free(accumulator[t]);
        }
        free(weights);
        free(rows_k);
        free(rows_v);
        attn_aligned_free(queries);
    }
    CHECK(packing == 0 && differing == 0,
          "%s and %s (%s): the same packed bytes and the same scores and P·V bit for bit (%d packings, %d of %d results differ)",
          a->name, b->name, type->name, packing, differing, compared);
}

/* ---- the tile configuration: loaded per thread exactly when the thread's differs ---- */
enum { CONFIG_ROWS = 21, CONFIG_KEYS = 40, CONFIG_DIM = 72 };
typedef struct config_inputs {
    uint16_t *queries[2];               /* bf16, fp16: [CONFIG_ROWS][query stride] */
    uint16_t *keys[2], *values[2];       /* packed */
    float weights[CONFIG_ROWS * CONFIG_KEYS];
} config_inputs;
typedef struct config_outputs {
    float scores[2][CONFIG_ROWS * CONFIG_KEYS];
    float accumulator[2][CONFIG_ROWS * CONFIG_DIM];
} config_outputs;
typedef struct config_report {
    int steps, wrong_loads, differing, faults;
} config_report;

/* The four AMX kernels (bf16 and fp16 Q·Kᵀ and P·V) on the inputs. */
static void config_run(const config_inputs *in, config_outputs *out) {
    const attn_lowp_kernels *table[2] = {&emulated_amx, &emulated_amx_f16};
    const int query_stride = attn_lowp_query_stride(CONFIG_DIM);
    for (int t = 0; t < 2; ++t) {
        table[t]->score_tile(CONFIG_ROWS, CONFIG_KEYS, CONFIG_DIM, in->queries[t], query_stride,
                             in->keys[t], out->scores[t], CONFIG_KEYS);
        for (int i = 0; i < CONFIG_ROWS * CONFIG_DIM; ++i) out->accumulator[t][i] = (float)(i % 7) - 3.0f;
        table[t]->accumulate_values(CONFIG_ROWS, CONFIG_KEYS, CONFIG_DIM, in->weights, CONFIG_KEYS,
                                    in->values[t], out->accumulator[t], CONFIG_DIM);
    }
}

/* One run of the kernels on this thread: it must load the configuration once if the
 * thread's differed from the kernels' before, else never, and give the expected bits. */
static void config_step(const config_inputs *in, const config_outputs *expected, config_report *report) {
    config_outputs *out = malloc(sizeof *out);
    const int needed = memcmp(emulated_config, amx_tiles_config, 64) != 0;
    const int before = emulated_config_loads;
    config_run(in, out);
    report->wrong_loads += emulated_config_loads - before != needed;
    report->differing += memcmp(out, expected, sizeof *out) != 0;
    report->steps += 1;
    free(out);
}

/* A thread's whole story: first use, reuse, another library's configurations, a release. */
typedef struct config_task { const config_inputs *in; const config_outputs *expected; config_report report; } config_task;
static void *config_sequence(void *argument) {
    config_task *task = argument;
    const int faults = emulated_faults;
    config_step(task->in, task->expected, &task->report); /* first use on this thread */
    config_step(task->in, task->expected, &task->report); /* reuse */
    uint8_t foreign[64];
    memcpy(foreign, amx_tiles_config, 64);
    foreign[48 + 7] = 8; /* one tile of 8 rows: differs in one byte */
    emulated_configure(foreign);
    config_step(task->in, task->expected, &task->report);
    memset(foreign, 0, 64);
    foreign[0] = 1;
    for (int t = 0; t < 16; ++t) foreign[16 + 2 * t] = 32, foreign[48 + t] = 4; /* other shapes */
    emulated_configure(foreign);
    config_step(task->in, task->expected, &task->report);
    emulated_release();
    config_step(task->in, task->expected, &task->report);
    config_step(task->in, task->expected, &task->report);
    task->report.faults = emulated_faults - faults;
    return NULL;
}

static void test_tile_configuration(test_rng *rng) {
    config_inputs in;
    const int query_stride = attn_lowp_query_stride(CONFIG_DIM);
    const operand_type *types[2] = {&bf16_type, &f16_type};
    for (int t = 0; t < 2; ++t) {
        uint16_t *k = malloc(CONFIG_KEYS * CONFIG_DIM * 2), *v = malloc(CONFIG_KEYS * CONFIG_DIM * 2);
        in.queries[t] = aligned_fill((size_t)CONFIG_ROWS * query_stride * 2, 0);
        for (int r = 0; r < CONFIG_ROWS; ++r)
            for (int d = 0; d < CONFIG_DIM; ++d) in.queries[t][r * query_stride + d] = types[t]->random(rng, 1.0);
        for (int i = 0; i < CONFIG_KEYS * CONFIG_DIM; ++i) k[i] = types[t]->random(rng, 1.0), v[i] = types[t]->random(rng, 1.0);
        in.keys[t] = aligned_fill(attn_lowp_packed_keys_bytes(CONFIG_KEYS, CONFIG_DIM), 0);
        in.values[t] = aligned_fill(attn_lowp_packed_values_bytes(CONFIG_KEYS, CONFIG_DIM), 0);
        attn_lowp_generic_pack_keys(CONFIG_KEYS, CONFIG_DIM, k, CONFIG_DIM, 1, in.keys[t]);
        attn_lowp_generic_pack_values(CONFIG_KEYS, CONFIG_DIM, v, CONFIG_DIM, 1, in.values[t]);
        free(k);
        free(v);
    }
    for (int i = 0; i < CONFIG_ROWS * CONFIG_KEYS; ++i) in.weights[i] = (float)test_rng_uniform(rng);
    /* The expected bits: the generic tables on the same packed bytes agree with the emulated
     * fp16 tiles bit for bit (test_same_bits); the bf16 ones are checked against double by
     * test_tiles, so here the reference is the first run on a released (INIT) thread. */
    config_outputs *expected = malloc(sizeof *expected);
    emulated_release();
    config_run(&in, expected);

    /* The emulation catches what real tiles would refuse: a tile load with nothing configured. */
    emulated_release();
    const int faults = emulated_faults;
    emulated_load(4, in.queries[0], 64);
    CHECK(emulated_faults == faults + 1, "emulated tiles: a tile load after TILERELEASE is a fault");

    /* The calling (user) thread, then four user threads at once, each with its own state. */
    config_task main_task = {&in, expected, {0}};
    config_sequence(&main_task);
    CHECK(main_task.report.wrong_loads == 0 && main_task.report.differing == 0 &&
              main_task.report.faults == 0 && main_task.report.steps == 6,
          "calling thread: LDTILECFG exactly when the thread's configuration differs (%d wrong of %d steps), "
          "results identical (%d differ), no tile used unconfigured (%d faults)",
          main_task.report.wrong_loads, main_task.report.steps, main_task.report.differing,
          main_task.report.faults);
    CHECK(memcmp(emulated_config, amx_tiles_config, 64) == 0,
          "the kernels leave their configuration loaded on the thread (no TILERELEASE on return)");
    enum { USERS = 4 };
    config_task tasks[USERS];
    pthread_t threads[USERS];
    int started = 0;
    for (int u = 0; u < USERS; ++u) {
        tasks[u] = (config_task){&in, expected, {0}};
        started += pthread_create(&threads[u], NULL, config_sequence, &tasks[u]) == 0;
    }
    config_report users = {0};
    for (int u = 0; u < started; ++u) {
        pthread_join(threads[u], NULL);
        users.steps += tasks[u].report.steps, users.wrong_loads += tasks[u].report.wrong_loads;
        users.differing += tasks[u].report.differing, users.faults += tasks[u].report.faults;
    }
    CHECK(started == USERS && users.steps == 6 * USERS && users.wrong_loads == 0 && users.differing == 0 &&
              users.faults == 0,
          "%d user threads at once: each loads its own configuration exactly when needed (%d wrong of %d), "
          "identical results (%d differ), no faults (%d)",
          started, users.wrong_loads, users.steps, users.differing, users.faults);

    /* OpenMP: two parallel regions; the pool's threads keep their configuration between them. */
    config_report pool[2] = {{0}, {0}};
    int reused[2] = {0, 0};
    for (int region = 0; region < 2; ++region) {
#pragma omp parallel num_threads(4) reduction(+ : reused[region])
        {
            config_report mine = {0};
            reused[region] += memcmp(emulated_config, amx_tiles_config, 64) == 0;
            const int faults_before = emulated_faults;
            config_step(&in, expected, &mine);
            config_step(&in, expected, &mine);
            mine.faults = emulated_faults - faults_before;
#pragma omp critical
            {
                pool[region].steps += mine.steps, pool[region].wrong_loads += mine.wrong_loads;
                pool[region].differing += mine.differing, pool[region].faults += mine.faults;
            }
        }
        CHECK(pool[region].steps >= 2 && pool[region].wrong_loads == 0 && pool[region].differing == 0 &&
                  pool[region].faults == 0,
              "OpenMP region %d: LDTILECFG exactly when a pool thread's configuration differs (%d wrong of %d), "
              "identical results (%d differ), no faults (%d); %d threads found it loaded already",
              region + 1, pool[region].wrong_loads, pool[region].steps, pool[region].differing,
              pool[region].faults, reused[region]);
    }
    free(expected);
    for (int t = 0; t < 2; ++t) {
        attn_aligned_free(in.queries[t]);
        attn_aligned_free(in.keys[t]);
        attn_aligned_free(in.values[t]);
    }
}

/* ---- TDPFP16PS written as bytes (kernels/amx/amx_fp16.h): binutils 2.40's encodings ---- */
static void test_tdpfp16ps_bytes(void) {
    /* `tdpfp16ps %tmm6, %tmm4, %tmm0` = c4 e2 4b 5c c4; `tdpfp16ps %tmm7, %tmm5, %tmm3` =
     * c4 e2 43 5c dd (objdump of GNU as 2.40); TDPBF16PS differs only in pp (4a / 42). */
    CHECK(ATTN_TDPFP16PS_VEX2(6) == 0x4b && ATTN_TDPFP16PS_MODRM(0, 4) == 0xc4 &&
              ATTN_TDPFP16PS_VEX2(7) == 0x43 && ATTN_TDPFP16PS_MODRM(3, 5) == 0xdd,
          "TDPFP16PS bytes: VEX vvvv/pp and ModRM as the assembler encodes them");
}

/* ---- the library's scalar bf16 rounding (used by the generic and AMX tables) ---- */
static void test_bf16_rounding(test_rng *rng) {
    int failures = 0;
    const float special[] = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 1.0f + 0x1p-8f + 0x1p-20f,
                             3.3895313e38f, 0x1p-126f, 0x1.fffffep-127f, -0x1p-140f, 65504.0f};
    for (size_t i = 0; i < sizeof special / sizeof *special; ++i)
        failures += bf16_bits_to_double(attn_lowp_bf16_round(special[i])) != bf16_round_reference(special[i]);
    for (int i = 0; i < 100000; ++i) {
        const float x = (float)(test_rng_normal(rng) * ldexp(1.0, (int)test_rng_range(rng, -140, 120)));
        failures += bf16_bits_to_double(attn_lowp_bf16_round(x)) != bf16_round_reference(x);
    }
    CHECK(failures == 0, "bf16 rounding: nearest-even, subnormals flushed (%d wrong of 100011)", failures);
    CHECK(isnan(attn_lowp_bf16_to_float(attn_lowp_bf16_round(NAN))), "bf16 rounding keeps NaN");
    CHECK(isinf(attn_lowp_bf16_to_float(attn_lowp_bf16_round(INFINITY))), "bf16 rounding keeps inf");
}

#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
/* attn_lowp_avx512bf16_round_row / attn_lowp_avx512_round_row_f16: the rounding of P of the
 * AMX tables (bf16; fp16 with its subnormals). */
static void test_round_row(test_rng *rng) {
    for (int f16 = 0; f16 < 2; ++f16) {
        int failures = 0;
        float source[80];
        uint16_t destination[96];
        for (int n = 0; n <= 70; n += 7)
            for (int padded = (n + 31) / 32 * 32; padded <= 64; padded += 32) {
                for (int c = 0; c < 80; ++c)
                    source[c] = (float)(test_rng_uniform(rng) *
                                        ldexp(1.0, (int)test_rng_range(rng, f16 ? -28 : -135, 0)));
                for (int c = 0; c < 96; ++c) destination[c] = 0xABCD;
                (f16 ? attn_lowp_avx512_round_row_f16 : attn_lowp_avx512bf16_round_row)(destination, source, n,
                                                                                     padded);
                for (int c = 0; c < 96; ++c) {
                    const double expected = c >= n ? 0.0 : f16 ? f16_round_reference(source[c])
                                                               : bf16_round_reference(source[c]);
                    if (c >= padded) failures += destination[c] != 0xABCD;
                    else failures += (f16 ? f16_reference(destination[c]) : bf16_bits_to_double(destination[c])) !=
                                     expected;
                }
            }
        CHECK(failures == 0, "AVX-512 round_row %s: P rounded, zero-padded, nothing past `padded` (%d wrong)",
              f16 ? "fp16" : "bf16", failures);
    }
}
#endif

/* ---- conversions ---- */
static double f16_reference(uint16_t h) {
    const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    double magnitude = exponent == 0 ? ldexp(mantissa, -24)
                       : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                        : ldexp(1024 + mantissa, exponent - 25);
    return sign ? -magnitude : magnitude;
}
static double bf16_reference(uint16_t h) {
    const int exponent = (h >> 7) & 0xff;
    if (exponent == 0xff) return (h & 0x7f) ? NAN : (h >> 15) ? -INFINITY : INFINITY;
    return bf16_bits_to_double(h);
}
/* Whether `got` (a 16-bit pattern decoded by `decode`) is the nearest-even value of x among
 * the format's values (fp16: subnormals kept; bf16: |x| < 2^-126 gives 0). */
static int rounds_correctly(double x, uint16_t bits, int is_f16) {
    const double got = is_f16 ? f16_reference(bits) : bf16_reference(bits);
    if (isnan(x)) return isnan(got);
    if (isinf(x)) return got == x;
    const double largest = is_f16 ? 65504.0 : ldexp(255.0, 120), half_step = is_f16 ? 16.0 : ldexp(1.0, 119);
    if (fabs(x) >= largest + half_step) return isinf(got) && (got > 0) == (x > 0);
    if (!is_f16) return got == bf16_round_reference(x);
    const double step = fabs(got) < ldexp(1.0, -14) ? ldexp(1.0, -24)
                                                    : ldexp(1.0, ilogb(got != 0 ? got : 1.0) - 10);
    const double error = fabs(got - x);
    return error < step / 2 || (error == step / 2 && !(bits & 1));
}

static void test_convert(const attn_lowp_convert *convert, test_rng *rng) {
    uint16_t *all = malloc(65536 * 2);
    float *out = malloc(65536 * sizeof(float));
    for (int i = 0; i < 65536; ++i) all[i] = (uint16_t)i;
    for (int is_f16 = 0; is_f16 < 2; ++is_f16) {
        const char *type = is_f16 ? "fp16" : "bf16";
        void (*to_f32)(int, int, const uint16_t *, int64_t, int64_t, float *, int64_t) =
            is_f16 ? convert->f16_to_f32_rows : convert->bf16_to_f32_rows;
        int failures = 0;
        for (int transposed = 0; transposed < 2; ++transposed) { /* as [256][256] both ways */
            for (int i = 0; i < 65536; ++i) out[i] = 0.0f;
            to_f32(255, 253, all, transposed ? 1 : 256, transposed ? 256 : 1, out, 256);
            for (int c = 0; c < 256; ++c)
                for (int d = 0; d < 256; ++d) {
                    const float got = out[c * 256 + d];
                    if (c >= 255 || d >= 253) { failures += got != 0.0f; continue; }
                    const uint16_t h = (uint16_t)(transposed ? d * 256 + c : c * 256 + d);
                    const double expected = is_f16 ? f16_reference(h) : bf16_reference(h);
                    failures += isnan(expected) ? !isnan(got) : (double)got != expected;
                }
        }
        CHECK(failures == 0, "%s %s -> fp32: every pattern, contiguous and strided, nothing past the rows (%d wrong)",
              convert->name, type, failures);

        enum { N = 20003 };
        float *source = malloc(N * sizeof(float)), *rounded = malloc(N * sizeof(float));
        uint16_t *half = malloc(2 * N * 2);
        const int low = is_f16 ? -26 : -140, high = is_f16 ? 14 : 126;
        for (int i = 0; i < N; ++i)
            source[i] = (float)(test_rng_normal(rng) * ldexp(1.0, (int)test_rng_range(rng, low, high)));
        const float edges[] = {65504.0f, 65519.99f, 65520.0f, -65520.0f, 3.4028235e38f, INFINITY,
                               0x1p-25f, 0x1.8p-24f, 0x1p-24f + 0x1p-40f, -0.0f, NAN, -3.3962e38f,
                               3.3963e38f, 0x1p-127f, 1.00390625f, 1.01171875f};
        for (int i = 0; i < 16; ++i) source[i] = edges[i];
        int64_t expected_overflows = 0;
        for (int i = 0; i < N; ++i)
            expected_overflows += isfinite(source[i]) &&
                                  fabs(source[i]) >= (is_f16 ? 65520.0 : ldexp(255.0, 120) + ldexp(1.0, 119));
        const int64_t overflowed = (is_f16 ? convert->f32_to_f16 : convert->f32_to_bf16)(N, source, half, 2);
        failures = 0;
        for (int i = 0; i < N; ++i) failures += !rounds_correctly(source[i], half[2 * i], is_f16);
        CHECK(failures == 0, "%s fp32 -> %s nearest-even, strided store (%d wrong of %d)", convert->name,
              type, failures, N);
        CHECK(overflowed == expected_overflows && expected_overflows >= 3,
              "%s fp32 -> %s counts the finite values that overflow (got %lld, expected %lld)",
              convert->name, type, (long long)overflowed, (long long)expected_overflows);
        /* the same rows stored contiguously (the vector path), a tail past the last 8 */
        uint16_t *dense = malloc(N * 2);
        const int64_t dense_overflowed =
            (is_f16 ? convert->f32_to_f16 : convert->f32_to_bf16)(N, source, dense, 1);
        failures = 0;
        for (int i = 0; i < N; ++i) failures += dense[i] != half[2 * i];
        CHECK(failures == 0 && dense_overflowed == expected_overflows,
              "%s fp32 -> %s contiguous store: the strided store's bits (%d differ) and overflow "
              "count (%lld, expected %lld)", convert->name, type, failures,
              (long long)dense_overflowed, (long long)expected_overflows);
        free(dense);

        /* in-place rounding of P rows: [N / 103 rows][100 used of stride 103] */
        memcpy(rounded, source, N * sizeof(float));
        const int rows = N / 103;
        convert->round_rows(is_f16 ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16, rows, 100, rounded, 103);
        failures = 0;
        for (int i = 0; i < N; ++i) {
            if (i >= rows * 103 || i % 103 >= 100) {
                failures += memcmp(&rounded[i], &source[i], sizeof(float)) != 0;
                continue;
            }
            const double x = source[i], got = rounded[i];
            uint16_t h;
            if (is_f16) {
                /* got must be an fp16 value: find its pattern through the library-free route */
                const float g = (float)got;
                h = 0;
                int found = isinf(g) || isnan(g);
                if (!found) { /* fp16 values are integers times 2^-24 below 65536 */
                    const double units = fabs(got) * 16777216.0;
                    found = units == floor(units) && fabs(got) <= 65504.0;
                }
                failures += !found;
                if (!found || isnan(g)) { failures += isnan(g) != isnan(x); continue; }
                if (isinf(g)) { failures += !rounds_correctly(x, (uint16_t)(g > 0 ? 0x7c00 : 0xfc00), 1); continue; }
                /* rebuild the pattern from the value */
                const double a = fabs(got);
                if (a < ldexp(1.0, -14)) h = (uint16_t)(a * 16777216.0);
                else {
                    const int e = ilogb(a);
                    h = (uint16_t)(((e + 15) << 10) | (int)(ldexp(a, 10 - e) - 1024));
                }
                if (got < 0 || (got == 0 && signbit(got))) h |= 0x8000;
                failures += !rounds_correctly(x, h, 1);
            } else {
                failures += isnan(x) ? !isnan(got) : got != bf16_round_reference(x) && !(isinf(got) && fabs(x) > 3.3e38);
            }
        }
        CHECK(failures == 0, "%s rounds P rows to %s in place, nothing past the rows (%d wrong)",
              convert->name, type, failures);
        free(source);
        free(rounded);
        free(half);
    }
    free(all);
    free(out);
}

/* ---- the softmax step writing P rounded to the operand type (registry.h) ---- */
/* One tile of logits for the fused step: rows x count of stride `stride`, each row a flavour
 * (0 ordinary, 1 some -inf, 2 all -inf, 3 a NaN logit, 4 a +inf logit, 5 a NaN running max,
 * 6 the maximum 0 and the scaled logits within 20 below it (p down to fp16 subnormals and
 * below) or near -87.5 (p = e^-87.5 ~ 2^-126.2: fp32 subnormals and 0)). */
typedef struct fused_case {
    int rows, count, stride;
    float scale, softcap;
    int flavours[4]; /* row r takes flavours[r % 4] */
} fused_case;

static const fused_case fused_cases[] = {
    {1, 1, 1, 1.0f, 0.0f, {0}},          {1, 7, 9, 0.125f, 0.0f, {1}},
    {3, 8, 8, 1.0f, 0.0f, {0, 1, 6, 0}}, {3, 9, 11, 0.5f, 0.0f, {6, 3, 0, 0}},
    {7, 15, 16, 1.0f, 0.0f, {0, 2, 4, 6}}, {5, 16, 20, 0.25f, 30.0f, {0, 1, 5, 6}},
    {6, 17, 17, 1.0f, 0.0f, {5, 0, 1, 6}}, {4, 33, 40, 1.0f, 0.0f, {6, 6, 1, 0}},
    {2, 100, 103, 0.125f, 0.0f, {0, 3, 6, 1}}, {9, 257, 260, 1.0f, 0.0f, {1, 6, 0, 4}},
};

/* Logits of one row of flavour `flavour` (scaled by `scale` in the step) and its running
 * (max, sum) before the step. */
static void fused_row(test_rng *rng, int flavour, int count, float scale, float *row, float *max,
                      float *sum) {
    for (int c = 0; c < count; ++c) {
        const double low = c % 2 ? -20.0 * test_rng_uniform(rng) : -87.0 - test_rng_uniform(rng);
        row[c] = flavour == 6 ? (float)(low / scale) : (float)(4.0 * test_rng_normal(rng));
    }
    if (flavour == 1 || flavour == 6)
        for (int c = 0; c < count; c += 3) row[c] = -INFINITY;
    if (flavour == 2)
        for (int c = 0; c < count; ++c) row[c] = -INFINITY;
    if (flavour == 6) row[count / 2] = 0.0f; /* the maximum, so the rest spreads below it */
    if (flavour == 3) row[count / 2] = NAN;
    if (flavour == 4) row[count - 1] = INFINITY;
    const int fresh = test_rng_range(rng, 0, 1) == 0;
    *max = flavour == 5 ? NAN : fresh ? -INFINITY : (float)test_rng_normal(rng);
    *sum = flavour == 5 ? NAN : fresh ? 0.0f : (float)(1.0 + test_rng_uniform(rng));
}

/* The rounding of the unrounded p by the test's own nearest-even (independent of libattn);
 * whether `got` is it (NaN for NaN). */
static int p_rounded_correctly(float unrounded, float got, attn_dtype type) {
    if (isnan(unrounded)) return isnan(got);
    const double expected = type == ATTN_DTYPE_BF16
                                ? bf16_round_reference(unrounded)
                                : test_half_to_double(test_half_from_float(unrounded, type), type);
    return (double)got == expected;
}

/* softmax_step with p_type BF16 / F16 against the F32 step followed by the registry's rounding
 * pass (convert.round_*_rows), bit for bit: P, row_max, row_sum, rescale, and the floats past
 * count untouched; and the rounded P against the test's own rounding of the F32 step's P. */
static void test_fused_p_rounding(const attn_kernels *kernels, test_rng *rng) {
    for (int type_index = 0; type_index < 2; ++type_index) {
        const attn_dtype type = type_index ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
        int differ = 0, wrong = 0, states_differ = 0, outside = 0, cases = 0;
        for (size_t n = 0; n < sizeof fused_cases / sizeof fused_cases[0]; ++n) {
            const fused_case *k = &fused_cases[n];
            const size_t floats = (size_t)k->rows * k->stride;
            float *logits = malloc(floats * sizeof(float)), *separate = malloc(floats * sizeof(float));
            float *fused = malloc(floats * sizeof(float)), *unrounded = malloc(floats * sizeof(float));
            float state[6][16]; /* max, sum, rescale: separate, then fused */
            for (size_t i = 0; i < floats; ++i) logits[i] = 12345.0f; /* past count: untouched */
            for (int r = 0; r < k->rows; ++r)
                fused_row(rng, k->flavours[r % 4], k->count, k->scale, logits + (size_t)r * k->stride,
                          &state[0][r], &state[1][r]);
            for (int r = 0; r < k->rows; ++r) state[3][r] = state[0][r], state[4][r] = state[1][r];
            memcpy(separate, logits, floats * sizeof(float));
            memcpy(fused, logits, floats * sizeof(float));
            kernels->forward.softmax_step(k->rows, k->count, separate, k->stride, k->scale, k->softcap,
                                          ATTN_DTYPE_F32, state[0], state[1], state[2]);
            memcpy(unrounded, separate, floats * sizeof(float));
            kernels->convert.round_rows(type, k->rows, k->count, separate, k->stride);
            kernels->forward.softmax_step(k->rows, k->count, fused, k->stride, k->scale, k->softcap,
                                          type, state[3], state[4], state[5]);
            differ += memcmp(separate, fused, floats * sizeof(float)) != 0;
            for (int part = 0; part < 3; ++part)
                states_differ += memcmp(state[part], state[part + 3], (size_t)k->rows * sizeof(float)) != 0;
            for (int r = 0; r < k->rows; ++r)
                for (int c = 0; c < k->stride; ++c) {
                    const size_t i = (size_t)r * k->stride + c;
                    if (c >= k->count) outside += memcmp(&fused[i], &logits[i], sizeof(float)) != 0;
                    else wrong += !p_rounded_correctly(unrounded[i], fused[i], type);
                }
            ++cases;
            free(logits), free(separate), free(fused), free(unrounded);
        }
        const char *name = type == ATTN_DTYPE_BF16 ? "bf16" : "fp16";
        CHECK(differ == 0 && states_differ == 0,
              "%s softmax_step writing P as %s: the F32 step then round_%s_rows, bit for bit "
              "(P of %d of %d cases differ, row max / sum / rescale of %d)", kernels->name, name,
              type == ATTN_DTYPE_BF16 ? "bf16" : "f16", differ, cases, states_differ);
        CHECK(wrong == 0 && outside == 0,
              "%s softmax_step writing P as %s: each p the nearest-even %s of the F32 step's "
              "(%d wrong), nothing written past count (%d)", kernels->name, name, name, wrong,
              outside);
    }
}

int main(void) {
    test_rng rng;
    test_rng_seed(&rng, 11);
    test_bf16_rounding(&rng);
    const table_list list = tables();
    for (int t = 0; t < list.count; ++t) {
        test_packing(list.list[t], &rng);
        test_tiles(list.list[t], &bf16_type, &rng);
    }
    for (int t = 0; t < list.f16_count; ++t) {
        test_packing(list.f16[t], &rng);
        test_tiles(list.f16[t], &f16_type, &rng);
        if (list.f16[t] != &attn_lowp_generic_f16 && strcmp(list.f16[t]->name, "generic") != 0)
            test_same_bits(&attn_lowp_generic_f16, list.f16[t], &f16_type, &rng);
    }
    CHECK(emulated_faults == 0, "emulated tiles: the kernels never used a tile not configured (%d faults)",
          emulated_faults);
    test_tile_configuration(&rng);
    test_tdpfp16ps_bytes();
    for (int t = 0; t < list.convert_count; ++t) test_convert(list.convert[t], &rng);
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
    if (attn_cpu_supports(ATTN_KERNEL_AVX512_BF16)) test_round_row(&rng);
#endif
    const attn_kernels *registries[16];
    const int registry_count = attn_kernels_available(registries, 16);
    for (int r = 0; r < registry_count; ++r) test_fused_p_rounding(registries[r], &rng);
    return test_finish();
}
