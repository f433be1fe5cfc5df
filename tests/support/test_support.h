/*
 * test_support.h — what every test program shares: a seeded random generator, tensor
 * allocation in [B, T, H, D] with optional padded/permuted strides, comparisons with
 * tolerances, and CHECK macros that count failures. Each test program returns
 * test_finish(), which prints "N passed, M failed" and exits non-zero on any failure.
 */
#ifndef ATTN_TEST_SUPPORT_H
#define ATTN_TEST_SUPPORT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "attn.h"

/* ---- counting checks ---- */
extern int test_passed_count;
extern int test_failed_count;

void test_record(int ok, const char *file, int line, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

/* CHECK(condition, "printf-style description of the case", ...) */
#define CHECK(condition, ...) test_record((condition) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

/* Checks that `status` equals `expected`; on failure prints the error message. */
#define CHECK_STATUS(status, expected, error_pointer, ...)                                       \
    test_check_status((status), (expected), (error_pointer), __FILE__, __LINE__, __VA_ARGS__)
void test_check_status(attn_status status, attn_status expected, const attn_error *error,
                       const char *file, int line, const char *format, ...)
    __attribute__((format(printf, 6, 7)));

/* Prints the summary line and returns the process exit code (0 = all passed). */
int test_finish(void);

/* ---- random numbers (xoshiro256**, deterministic) ---- */
typedef struct test_rng { uint64_t s[4]; } test_rng;
void test_rng_seed(test_rng *rng, uint64_t seed);
uint64_t test_rng_next(test_rng *rng);
double test_rng_uniform(test_rng *rng);                 /* [0, 1) */
double test_rng_normal(test_rng *rng);                  /* N(0, 1) */
int64_t test_rng_range(test_rng *rng, int64_t lo, int64_t hi); /* [lo, hi] */
void test_fill_normal(test_rng *rng, float *data, int64_t count, float stddev);

/* ---- tensors ---- */
/* Memory layouts for a logical [B, T, H, D] tensor. */
typedef enum test_layout {
    TEST_LAYOUT_BTHD = 0,        /* contiguous [B, T, H, D] */
    TEST_LAYOUT_BHTD = 1,        /* memory [B, H, T, D] viewed as [B, T, H, D] */
    TEST_LAYOUT_PADDED = 2,      /* [B, T, H, D] with every row padded by 3 floats */
    TEST_LAYOUT_REVERSED_T = 3   /* [B, T, H, D] with a negative T stride */
} test_layout;

/* A float32 [B, T, H, D] tensor that owns its memory (free with test_tensor_free). */
typedef struct test_tensor {
    attn_tensor view;
    float *allocation;
    int64_t allocation_floats;
} test_tensor;

test_tensor test_tensor_new(int64_t B, int64_t T, int64_t H, int64_t D, test_layout layout);
/* A float32 contiguous tensor of any rank 1..4. */
test_tensor test_tensor_new_shape(int rank, const int64_t *shape);
void test_tensor_fill_normal(test_tensor *t, test_rng *rng, float stddev);
/* Sets every element of the allocation (padding included) to `value` (e.g. NAN). */
void test_tensor_fill_all(test_tensor *t, float value);
void test_tensor_free(test_tensor *t);
/* Element access on a rank-4 or rank-3 view. */
float test_get4(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
float test_get3(const attn_tensor *t, int64_t a, int64_t b, int64_t c);

/* max over b, i, h, j of sum_d |q[b,i,h,d] k[b,j,h/(Hq/Hkv),d]| for float32 views q
 * [B, Tq, Hq, Dk] and k [B, Tk, Hkv, Dk]: the largest unscaled |logit| any kernel can sum,
 * the base of the tests' bounds on the fp32 error of one logit. */
double test_largest_abs_dot(const attn_tensor *q, const attn_tensor *k);

/* The shape of one sequence for test_plain_attention: Tq queries of Hq heads, Tk keys of Hkv
 * heads, head dims Dk (queries, keys) and Dv (values). */
typedef struct test_plain_shape {
    int64_t Tq, Tk, Hq, Hkv, Dk, Dv;
} test_plain_shape;

/* Plain scaled dot-product attention of one sequence, in double, on contiguous float inputs
 * q [Tq][Hq][Dk], k [Tk][Hkv][Dk], v [Tk][Hkv][Dv], dout [Tq][Hq][Dv]; the queries attend
 * to the first `keys` keys (keys <= Tk), query head h reads KV head h / (Hq / Hkv):
 *   S = Q Kᵀ / sqrt(Dk), P = softmax_rows(S), O = P V, LSE = log Σ_j exp(S_ij),
 *   dS = P ∘ (dO Vᵀ − rowsum(dO ∘ O)), dQ = dS K / sqrt(Dk), dK = dSᵀ Q / sqrt(Dk), dV = Pᵀ dO.
 * Writes out [Tq][Hq][Dv] and lse [Hq][Tq]; adds the gradients into dq [Tq][Hq][Dk],
 * dk [Tk][Hkv][Dk] and dv [Tk][Hkv][Dv] (zeroed by the caller; KV gradients sum over the
 * group). Independent of libattn: the oracle of the zero-options tests. */
void test_plain_attention(const test_plain_shape *shape, int64_t keys, const float *q,
                          const float *k, const float *v, const float *dout, double *out,
                          double *lse, double *dq, double *dk, double *dv);

/* ---- comparisons ---- */
/* max over elements of |a - b| / (1 + |b|) for two rank-4 (or rank-3) views of equal shape.
 * NaN in exactly one of them counts as +inf; equal infinities count as 0. */
double test_max_relative_error(const attn_tensor *a, const attn_tensor *b);
/* 1 if the two views hold bitwise identical floats, element for element. */
int test_bitwise_equal(const attn_tensor *a, const attn_tensor *b);

/* ---- 16-bit copies (bf16 / fp16) of float32 test tensors ---- */
/* A BF16 or F16 tensor with the shape and strides of a test_tensor (free with free(allocation)). */
typedef struct test_half_tensor { attn_tensor view; uint16_t *allocation; } test_half_tensor;
/* Rounds every float of t's allocation to `dtype` (nearest-even) in place and returns a 16-bit
 * tensor holding the same values with the same layout. */
test_half_tensor test_half_round(test_tensor *t, attn_dtype dtype);
/* A 16-bit tensor laid out like t, every element (padding included) set to `fill` bits. */
test_half_tensor test_half_like(const test_tensor *t, attn_dtype dtype, uint16_t fill);
/* The raw bits and the value (widened exactly) of element (a, b, c, d) of a rank-4 view. */
uint16_t test_half_bits4(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
double test_half_get4(const attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
/* Nearest-even bf16 / fp16 bits of x and the value of 16-bit bits (independent of libattn). */
uint16_t test_half_from_float(float x, attn_dtype dtype);
double test_half_to_double(uint16_t h, attn_dtype dtype);

/* ---- 8-bit storage ---- */
/* The value of an fp8 code with 4 (E4M3, "e4m3fn") or 5 (E5M2) exponent bits, from the
 * format's definition (NaN for the codes that are not finite). */
double test_fp8_value(int exponent_bits, int code);

#endif /* ATTN_TEST_SUPPORT_H */
