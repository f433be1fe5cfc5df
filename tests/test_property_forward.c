/*
 * test_property_forward.c — randomised property test of the forward pass: thousands of small
 * random attention calls (shapes, GQA ratios, permuted / padded / negative-stride layouts, every
 * mask kind and combination, empty-row policies, tiles; built by fuzz/attention_case.c) run
 * through attn_forward with every kernel family this CPU supports and compared with
 * attn_reference_forward (same status, outputs within 2e-5 * (1 + |reference|)). One case in
 * eight is also run with 1, 2 and 3 threads, which must give bitwise identical results.
 *
 * Each case is built from its own 64-bit seed, printed on failure. Environment:
 *   ATTN_PROPERTY_SEED=<seed>   run only that case, and print its description
 *   ATTN_PROPERTY_CASES=<n>     number of cases (default 3000)
 *   ATTN_PROPERTY_BASE=<n>      base of the seed sequence (default 20240601)
 */
#include <stdlib.h>
#include <string.h>

#include "attention_case.h"
#include "kernels/registry.h"
#include "test_support.h"

#define CASE_BYTES 192
static const double tolerance = 2e-5;

/* The seed of case number `index` (splitmix64 of base + index, so neighbours are unrelated). */
static uint64_t case_seed(uint64_t base, uint64_t index) {
    uint64_t z = base + index * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Runs one case from its seed: every supported kernel family against the reference, and for
 * some seeds the thread-count invariance. Returns the number of failed checks. */
static int run_case(uint64_t seed, int verbose, attn_status *reference_status) {
    uint8_t data[CASE_BYTES];
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int n = 0; n < CASE_BYTES; ++n) data[n] = (uint8_t)test_rng_next(&rng);
    case_bytes bytes = {data, sizeof data, 0};
    attention_case c;
    if (attention_case_build(&bytes, &c) != 0) {
        CHECK(0, "seed %llu: allocation failed", (unsigned long long)seed);
        return 1;
    }
    char description[1024];
    attention_case_describe(&c, description, sizeof description);
    if (verbose) printf("seed %llu: %s\n", (unsigned long long)seed, description);
    attention_case_run_reference(&c);
    *reference_status = c.reference_status;
    if (verbose)
        printf("  reference: %s %s\n", attn_status_name(c.reference_status),
               c.reference_status ? c.reference_error.message : "");

    int failures = 0;
    static const attn_kernel_choice kernels[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX2,
                                                 ATTN_KERNEL_AVX512, ATTN_KERNEL_AUTO};
    static const char *const kernel_names[] = {"generic", "avx2", "avx512", "auto"};
    for (int n = 0; n < 4; ++n) {
        if (!attn_cpu_supports(kernels[n])) continue;
        attn_error error = {0};
        attn_status status = attention_case_run_forward(&c, kernels[n], 1, &error);
        char reason[512] = "";
        int ok = attention_case_compare(&c, status, tolerance, reason, sizeof reason);
        if (verbose) printf("  %s: %s %s\n", kernel_names[n], attn_status_name(status), reason);
        CHECK(ok, "seed %llu kernel %s: %s\n  case: %s\n  forward: %s\n  rerun: "
                  "ATTN_PROPERTY_SEED=%llu ./test_property_forward",
              (unsigned long long)seed, kernel_names[n], reason, description,
              status ? error.message : "ok", (unsigned long long)seed);
        failures += !ok;
    }

    if (seed % 8 == 0) { /* thread-count invariance: bitwise identical outputs */
        int64_t count = attention_case_output_count(&c);
        float *single = malloc((size_t)count * sizeof(float));
        float *multi = malloc((size_t)count * sizeof(float));
        if (single && multi) {
            attn_status first = attention_case_run_forward(&c, ATTN_KERNEL_AUTO, 1, NULL);
            attention_case_copy_output(&c, single);
            for (int threads = 2; threads <= 3; ++threads) {
                attn_status status = attention_case_run_forward(&c, ATTN_KERNEL_AUTO, threads, NULL);
                attention_case_copy_output(&c, multi);
                int same = status == first &&
                           (status != ATTN_OK ||
                            memcmp(single, multi, (size_t)count * sizeof(float)) == 0);
                CHECK(same, "seed %llu: %d threads differ from 1 thread (status %s vs %s)\n"
                            "  case: %s\n  rerun: ATTN_PROPERTY_SEED=%llu ./test_property_forward",
                      (unsigned long long)seed, threads, attn_status_name(status),
                      attn_status_name(first), description, (unsigned long long)seed);
                failures += !same;
            }
        }
        free(single);
        free(multi);
    }
    attention_case_free(&c);
    return failures;
}

int main(void) {
    const char *one = getenv("ATTN_PROPERTY_SEED");
    if (one && *one) {
        attn_status reference_status;
        run_case(strtoull(one, NULL, 0), 1, &reference_status);
        return test_finish();
    }
    const char *count_text = getenv("ATTN_PROPERTY_CASES");
    const char *base_text = getenv("ATTN_PROPERTY_BASE");
    uint64_t count = count_text && *count_text ? strtoull(count_text, NULL, 0) : 3000;
    uint64_t base = base_text && *base_text ? strtoull(base_text, NULL, 0) : 20240601;
    int failed_cases = 0;
    uint64_t status_counts[ATTN_ERROR_COMMUNICATION + 1] = {0}, run = 0;
    for (uint64_t index = 0; index < count && failed_cases < 10; ++index, ++run) {
        attn_status reference_status = ATTN_OK;
        failed_cases += run_case(case_seed(base, index), 0, &reference_status) > 0;
        if ((unsigned)reference_status <= ATTN_ERROR_COMMUNICATION) ++status_counts[reference_status];
    }
    printf("property_forward: %llu cases from base %llu, %d failed; reference statuses:",
           (unsigned long long)run, (unsigned long long)base, failed_cases);
    for (int s = 0; s <= ATTN_ERROR_COMMUNICATION; ++s)
        if (status_counts[s]) printf(" %s %llu", attn_status_name((attn_status)s),
                                     (unsigned long long)status_counts[s]);
    printf("\n");
    /* The generator must mostly produce valid calls, or the comparison tests little. */
    CHECK(status_counts[ATTN_OK] * 2 >= run, "only %llu of %llu cases were valid calls",
          (unsigned long long)status_counts[ATTN_OK], (unsigned long long)run);
    return test_finish();
}
