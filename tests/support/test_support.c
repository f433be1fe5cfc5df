/*
 * test_support.c — implementation of the shared test helpers (see test_support.h).
 */
#include "test_support.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int test_passed_count = 0;
int test_failed_count = 0;

void test_record(int ok, const char *file, int line, const char *format, ...) {
    if (ok) {
        ++test_passed_count;
        return;
    }
    ++test_failed_count;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_list arguments;
    va_start(arguments, format);
    vfprintf(stderr, format, arguments);
    va_end(arguments);
    fputc('\n', stderr);
}

void test_check_status(attn_status status, attn_status expected, const attn_error *error,
                       const char *file, int line, const char *format, ...) {
    if (status == expected) {
        ++test_passed_count;
        return;
    }
    ++test_failed_count;
    fprintf(stderr, "FAIL %s:%d: status %s, expected %s (", file, line, attn_status_name(status),
            attn_status_name(expected));
    va_list arguments;
    va_start(arguments, format);
    vfprintf(stderr, format, arguments);
    va_end(arguments);
    fprintf(stderr, ")%s%s\n", error ? ": " : "", error ? error->message : "");
}

int test_finish(void) {
    printf("%d passed, %d failed\n", test_passed_count, test_failed_count);
    return test_failed_count == 0 && test_passed_count > 0 ? 0 : 1;
}

static uint64_t rotate_left(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void test_rng_seed(test_rng *rng, uint64_t seed) {
    /* splitmix64 to expand the seed */
    for (int i = 0; i < 4; ++i) {
        seed += 0x9E3779B97F4A7C15ull;
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        rng->s[i] = z ^ (z >> 31);
    }
}

uint64_t test_rng_next(test_rng *rng) {
    uint64_t *s = rng->s;
    const uint64_t result = rotate_left(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotate_left(s[3], 45);
    return result;
}

double test_rng_uniform(test_rng *rng) { return (double)(test_rng_next(rng) >> 11) * 0x1.0p-53; }

double test_rng_normal(test_rng *rng) {
    double u1 = test_rng_uniform(rng), u2 = test_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t test_rng_range(test_rng *rng, int64_t lo, int64_t hi) {
    return lo + (int64_t)(test_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

void test_fill_normal(test_rng *rng, float *data, int64_t count, float stddev) {
    for (int64_t i = 0; i < count; ++i) data[i] = (float)(stddev * test_rng_normal(rng));
}

/* `floats` zeroed floats on a 64-byte boundary (as PyTorch's and attn's own allocations are,
 * so that the paths that read rows in place when aligned are the ones the tests run); freed
 * with free(). NULL for none. */
static float *zeroed_floats(int64_t floats) {
    void *memory = NULL;
    const size_t bytes = (size_t)(floats > 0 ? floats : 1) * sizeof(float);
    if (posix_memalign(&memory, 64, bytes) != 0) return NULL;
    memset(memory, 0, bytes);
    return memory;
}

test_tensor test_tensor_new(int64_t B, int64_t T, int64_t H, int64_t D, test_layout layout) {
    test_tensor t;
    memset(&t, 0, sizeof t);
    int64_t row = D, floats = B * T * H * D;
    if (layout == TEST_LAYOUT_PADDED) {
        row = D + 3;
        floats = B * T * H * row;
    }
    t.allocation = zeroed_floats(floats);
    t.allocation_floats = floats;
    t.view.data = t.allocation;
    t.view.dtype = ATTN_DTYPE_F32;
    t.view.rank = 4;
    t.view.shape[0] = B; t.view.shape[1] = T; t.view.shape[2] = H; t.view.shape[3] = D;
    switch (layout) {
    case TEST_LAYOUT_BTHD:
    case TEST_LAYOUT_REVERSED_T:
        t.view.stride[3] = 1; t.view.stride[2] = D; t.view.stride[1] = H * D;
        t.view.stride[0] = T * H * D;
        if (layout == TEST_LAYOUT_REVERSED_T) {
            t.view.data = t.allocation + (T - 1) * H * D;
            t.view.stride[1] = -H * D;
        }
        break;
    case TEST_LAYOUT_BHTD:
        t.view.stride[3] = 1; t.view.stride[1] = D; t.view.stride[2] = T * D;
        t.view.stride[0] = H * T * D;
        break;
    case TEST_LAYOUT_PADDED:
        t.view.stride[3] = 1; t.view.stride[2] = row; t.view.stride[1] = H * row;
        t.view.stride[0] = T * H * row;
        break;
    }
    return t;
}

test_tensor test_tensor_new_shape(int rank, const int64_t *shape) {
    test_tensor t;
    memset(&t, 0, sizeof t);
    int64_t floats = 1;
    for (int d = 0; d < rank; ++d) floats *= shape[d];
    t.allocation = zeroed_floats(floats);
    t.allocation_floats = floats;
    t.view = attn_tensor_contiguous(t.allocation, ATTN_DTYPE_F32, rank, shape);
    return t;
}

void test_tensor_fill_normal(test_tensor *t, test_rng *rng, float stddev) {
    test_fill_normal(rng, t->allocation, t->allocation_floats, stddev);
}

void test_tensor_fill_all(test_tensor *t, float value) {
    for (int64_t i = 0; i < t->allocation_floats; ++i) t->allocation[i] = value;
}

void test_tensor_free(test_tensor *t) {
    free(t->allocation);
    memset(t, 0, sizeof *t);
}

float test_get4(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return ((const float *)t->data)[a * t->stride[0] + b * t->stride[1] + c * t->stride[2] +
                                    d * t->stride[3]];
}

float test_get3(const attn_tensor *t, int64_t a, int64_t b, int64_t c) {
    return ((const float *)t->data)[a * t->stride[0] + b * t->stride[1] + c * t->stride[2]];
}

static float get_any(const attn_tensor *t, const int64_t *index) {
    int64_t offset = 0;
    for (int d = 0; d < t->rank; ++d) offset += index[d] * t->stride[d];
    return ((const float *)t->data)[offset];
}

/* Calls visit(a_value, b_value, state) for each element of two equal-shape views. */
static void for_each_pair(const attn_tensor *a, const attn_tensor *b,
                          void (*visit)(float, float, void *), void *state) {
    int64_t index[ATTN_MAX_RANK] = {0};
    int64_t total = attn_tensor_numel(a);
    for (int64_t n = 0; n < total; ++n) {
        visit(get_any(a, index), get_any(b, index), state);
        for (int d = a->rank - 1; d >= 0; --d) {
            if (++index[d] < a->shape[d]) break;
            index[d] = 0;
        }
    }
}

static void visit_relative(float x, float y, void *state) {
    double *worst = (double *)state;
    double e;
    if (isnan(x) && isnan(y)) e = 0;
    else if (isnan(x) || isnan(y)) e = INFINITY;
    else if (isinf(x) || isinf(y)) e = (x == y) ? 0 : INFINITY;
    else e = fabs((double)x - (double)y) / (1.0 + fabs((double)y));
    if (e > *worst) *worst = e;
}

void test_plain_attention(const test_plain_shape *shape, int64_t keys, const float *q,
                          const float *k, const float *v, const float *dout, double *out,
                          double *lse, double *dq, double *dk, double *dv) {
    const int64_t Tq = shape->Tq, Hq = shape->Hq, Hkv = shape->Hkv;
    const int64_t Dk = shape->Dk, Dv = shape->Dv, group = Hq / Hkv;
    const double scale = 1.0 / sqrt((double)Dk);
    /* contiguous [T][H][D] index */
#define PLAIN_AT(t, h, d, H, D) (((int64_t)(t) * (H) + (h)) * (D) + (d))
    double *s = malloc(2 * (size_t)(keys > 0 ? keys : 1) * sizeof(double));
    if (s == NULL) abort(); /* a test helper: no memory is the end of the test */
    double *p = s + keys;
    for (int64_t h = 0; h < Hq; ++h) {
        const int64_t g = h / group;
        for (int64_t i = 0; i < Tq; ++i) {
            double m = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < keys; ++j) {
                double dot = 0.0;
                for (int64_t d = 0; d < Dk; ++d)
                    dot += (double)q[PLAIN_AT(i, h, d, Hq, Dk)] * (double)k[PLAIN_AT(j, g, d, Hkv, Dk)];
                s[j] = dot * scale;
                if (s[j] > m) m = s[j];
            }
            for (int64_t j = 0; j < keys; ++j) sum += exp(s[j] - m);
            lse[h * Tq + i] = m + log(sum);
            for (int64_t j = 0; j < keys; ++j) p[j] = exp(s[j] - m) / sum;
            double row_dot = 0.0;
            for (int64_t e = 0; e < Dv; ++e) {
                double o = 0.0;
                for (int64_t j = 0; j < keys; ++j) o += p[j] * (double)v[PLAIN_AT(j, g, e, Hkv, Dv)];
                out[PLAIN_AT(i, h, e, Hq, Dv)] = o;
                row_dot += (double)dout[PLAIN_AT(i, h, e, Hq, Dv)] * o;
            }
            for (int64_t j = 0; j < keys; ++j) {
                double dp = 0.0;
                for (int64_t e = 0; e < Dv; ++e) {
                    dp += (double)dout[PLAIN_AT(i, h, e, Hq, Dv)] * (double)v[PLAIN_AT(j, g, e, Hkv, Dv)];
                    dv[PLAIN_AT(j, g, e, Hkv, Dv)] += p[j] * (double)dout[PLAIN_AT(i, h, e, Hq, Dv)];
                }
                const double ds = p[j] * (dp - row_dot);
                for (int64_t d = 0; d < Dk; ++d) {
                    dq[PLAIN_AT(i, h, d, Hq, Dk)] += ds * (double)k[PLAIN_AT(j, g, d, Hkv, Dk)] * scale;
                    dk[PLAIN_AT(j, g, d, Hkv, Dk)] += ds * (double)q[PLAIN_AT(i, h, d, Hq, Dk)] * scale;
                }
            }
        }
    }
#undef PLAIN_AT
    free(s);
}

double test_largest_abs_dot(const attn_tensor *q, const attn_tensor *k) {
    const int64_t group = q->shape[2] / k->shape[2];
    double largest = 0.0;
    for (int64_t b = 0; b < q->shape[0]; ++b)
        for (int64_t h = 0; h < q->shape[2]; ++h)
            for (int64_t i = 0; i < q->shape[1]; ++i)
                for (int64_t j = 0; j < k->shape[1]; ++j) {
                    double sum = 0.0;
                    for (int64_t d = 0; d < q->shape[3]; ++d)
                        sum += fabs(test_get4(q, b, i, h, d) * test_get4(k, b, j, h / group, d));
                    if (sum > largest) largest = sum;
                }
    return largest;
}

double test_max_relative_error(const attn_tensor *a, const attn_tensor *b) {
    if (a->rank != b->rank) return INFINITY;
    for (int d = 0; d < a->rank; ++d)
        if (a->shape[d] != b->shape[d]) return INFINITY;
    double worst = 0;
    for_each_pair(a, b, visit_relative, &worst);
    return worst;
}

static void visit_bitwise(float x, float y, void *state) {
    if (memcmp(&x, &y, sizeof x) != 0) *(int *)state = 0;
}

int test_bitwise_equal(const attn_tensor *a, const attn_tensor *b) {
    if (a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; ++d)
        if (a->shape[d] != b->shape[d]) return 0;
    int equal = 1;
    for_each_pair(a, b, visit_bitwise, &equal);
    return equal;
}

/* ---- 16-bit copies ---- */

double test_half_to_double(uint16_t h, attn_dtype dtype) {
    const int sign = h >> 15;
    double magnitude;
    if (dtype == ATTN_DTYPE_BF16) {
        const int exponent = (h >> 7) & 0xff, mantissa = h & 0x7f;
        magnitude = exponent == 0xff ? (mantissa ? NAN : INFINITY)
                    : exponent == 0  ? ldexp(mantissa, -133)
                                     : ldexp(128 + mantissa, exponent - 134);
    } else {
        const int exponent = (h >> 10) & 31, mantissa = h & 1023;
        magnitude = exponent == 31 ? (mantissa ? NAN : INFINITY)
                    : exponent == 0 ? ldexp(mantissa, -24)
                                    : ldexp(1024 + mantissa, exponent - 25);
    }
    return sign ? -magnitude : magnitude;
}

/* Nearest-even, by exhaustive comparison of the two neighbours: the largest pattern of the
 * same sign whose value is <= |x| and the next one (test data are finite and in range). */
uint16_t test_half_from_float(float x, attn_dtype dtype) {
    if (x != x) return dtype == ATTN_DTYPE_BF16 ? 0x7fc0 : 0x7e00;
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double magnitude = fabs((double)x);
    const uint16_t infinity = dtype == ATTN_DTYPE_BF16 ? 0x7f80 : 0x7c00;
    uint16_t low = 0, high = infinity; /* binary search: value(low) <= magnitude < value(high) */
    if (magnitude >= test_half_to_double(infinity - 1, dtype)) {
        const double top = test_half_to_double(infinity - 1, dtype);
        const double half_step = (top - test_half_to_double(infinity - 2, dtype)) / 2;
        return sign | (magnitude < top + half_step ? (uint16_t)(infinity - 1) : infinity);
    }
    while (high - low > 1) {
        const uint16_t middle = (uint16_t)((low + high) / 2);
        if (test_half_to_double(middle, dtype) <= magnitude) low = middle;
        else high = middle;
    }
    const double below = test_half_to_double(low, dtype), above = test_half_to_double(high, dtype);
    uint16_t nearest;
    if (magnitude - below < above - magnitude) nearest = low;
    else if (magnitude - below > above - magnitude) nearest = high;
    else nearest = (low & 1) ? high : low;
    return sign | nearest;
}

test_half_tensor test_half_round(test_tensor *t, attn_dtype dtype) {
    test_half_tensor h;
    h.allocation = malloc((size_t)t->allocation_floats * sizeof(uint16_t) + 2);
    for (int64_t n = 0; n < t->allocation_floats; ++n) {
        h.allocation[n] = test_half_from_float(t->allocation[n], dtype);
        t->allocation[n] = (float)test_half_to_double(h.allocation[n], dtype);
    }
    h.view = t->view;
    h.view.dtype = dtype;
    h.view.data = h.allocation + ((float *)t->view.data - t->allocation);
    return h;
}

test_half_tensor test_half_like(const test_tensor *t, attn_dtype dtype, uint16_t fill) {
    test_half_tensor h;
    h.allocation = malloc((size_t)t->allocation_floats * sizeof(uint16_t) + 2);
    for (int64_t n = 0; n < t->allocation_floats; ++n) h.allocation[n] = fill;
    h.view = t->view;
    h.view.dtype = dtype;
    h.view.data = h.allocation + ((float *)t->view.data - t->allocation);
    return h;
}

uint16_t test_half_bits4(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return ((const uint16_t *)t->data)[a * t->stride[0] + b * t->stride[1] + c * t->stride[2] +
                                       d * t->stride[3]];
}

double test_half_get4(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return test_half_to_double(test_half_bits4(t, a, b, c, d), t->dtype);
}

/* Value of an fp8 code (NaN for the codes that are not finite). */
double test_fp8_value(int exponent_bits, int code) {
    const int mantissa_bits = 7 - exponent_bits, bias = (1 << (exponent_bits - 1)) - 1;
    const int exponent = (code & 0x7f) >> mantissa_bits, mantissa = code & ((1 << mantissa_bits) - 1);
    const int top = (1 << exponent_bits) - 1;
    if (exponent_bits == 4 && (code & 0x7f) == 0x7f) return NAN; /* e4m3fn: one NaN, no inf */
    if (exponent_bits == 5 && exponent == top) return NAN;       /* e5m2: inf / NaN: never stored */
    const double value = exponent == 0
                             ? ldexp(mantissa, 1 - bias - mantissa_bits)
                             : ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits);
    return (code & 0x80) ? -value : value;
}
