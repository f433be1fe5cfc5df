/*
 * fuzz_forward.c — libFuzzer target for the public attention API: the input bytes choose
 * shapes, head counts (GQA ratios), strided layouts, every mask option, the empty-row policy,
 * tiles, kernel family and thread count (see attention_case.h). attn_forward must agree with
 * attn_reference_forward within 1e-4 * (1 + |reference|), or both must fail with the same
 * status; a disagreement aborts (a finding), and so does any sanitizer report.
 */
#include <stdio.h>
#include <stdlib.h>

#include "attention_case.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    case_bytes bytes = {data, size, 0};
    attention_case c;
    if (attention_case_build(&bytes, &c) != 0) return 0;
    static const attn_kernel_choice kernels[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_GENERIC,
                                                 ATTN_KERNEL_AVX2, ATTN_KERNEL_AVX512};
    attn_kernel_choice kernel = kernels[case_take(&bytes, 4)];
    if (!attn_kernel_available(kernel)) kernel = ATTN_KERNEL_GENERIC;
    int threads = 1 + (int)case_take(&bytes, 2);

    attention_case_run_reference(&c);
    attn_error error = {0};
    attn_status status = attention_case_run_forward(&c, kernel, threads, &error);
    char reason[512];
    if (!attention_case_compare(&c, status, 1e-4, reason, sizeof reason)) {
        char description[1024];
        attention_case_describe(&c, description, sizeof description);
        fprintf(stderr, "fuzz_forward: kernel %d threads %d: %s\n  case: %s\n  forward: %s\n",
                (int)kernel, threads, reason, description, error.message);
        abort();
    }
    attention_case_free(&c);
    return 0;
}
