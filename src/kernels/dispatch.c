/*
 * dispatch.c — picks the kernel table at run time from what the CPU supports.
 */
#include "kernel.h"
#include "../core/internal.h"

int attn_cpu_supports(attn_kernel_choice choice) {
    switch (choice) {
    case ATTN_KERNEL_AUTO:
    case ATTN_KERNEL_GENERIC: return 1;
    case ATTN_KERNEL_AVX2:
#if defined(ATTN_HAVE_AVX2_KERNELS) && (defined(__x86_64__) || defined(__i386__))
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
        return 0;
#endif
    case ATTN_KERNEL_AVX512:
#if defined(ATTN_HAVE_AVX512_KERNELS) && (defined(__x86_64__) || defined(__i386__))
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
        return 0;
#endif
    }
    return 0;
}

attn_status attn_select_kernels(attn_kernel_choice choice, const attn_kernel_table **table,
                                attn_error *error) {
    switch (choice) {
    case ATTN_KERNEL_AUTO:
#if defined(ATTN_HAVE_AVX512_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX512)) { *table = &attn_kernels_avx512; return ATTN_OK; }
#endif
#if defined(ATTN_HAVE_AVX2_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX2)) { *table = &attn_kernels_avx2; return ATTN_OK; }
#endif
        *table = &attn_kernels_generic;
        return ATTN_OK;
    case ATTN_KERNEL_GENERIC: *table = &attn_kernels_generic; return ATTN_OK;
    case ATTN_KERNEL_AVX2:
#if defined(ATTN_HAVE_AVX2_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX2)) { *table = &attn_kernels_avx2; return ATTN_OK; }
#endif
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "options.kernel = AVX2: this CPU or build has no AVX2+FMA kernels");
    case ATTN_KERNEL_AVX512:
#if defined(ATTN_HAVE_AVX512_KERNELS)
        if (attn_cpu_supports(ATTN_KERNEL_AVX512)) { *table = &attn_kernels_avx512; return ATTN_OK; }
#endif
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "options.kernel = AVX512: this CPU or build has no AVX-512 kernels");
    }
    return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "options.kernel = %d: unknown", (int)choice);
}
