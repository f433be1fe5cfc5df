/*
 * kernel_query.c — the public kernel queries of attn.h (attn_kernel_name,
 * attn_kernel_available, attn_kernel_bf16_tiles, attn_kernel_f16_tiles): which kernel registry a choice selects on
 * this CPU and build.
 */
#include "../core/internal.h"
#include "../kernels/registry.h"

const char *attn_kernel_name(attn_kernel_choice choice) {
    const attn_kernels *kernels = NULL;
    if (attn_kernels_select(choice, &kernels, NULL) != ATTN_OK || kernels == NULL) return NULL;
    return kernels->name;
}

int attn_kernel_available(attn_kernel_choice choice) { return attn_kernel_name(choice) != NULL; }

const char *attn_kernel_bf16_tiles(attn_kernel_choice choice) {
    const attn_kernels *kernels = NULL;
    if (attn_kernels_select(choice, &kernels, NULL) != ATTN_OK || kernels == NULL) return NULL;
    return attn_kernels_bf16_on_tiles(kernels, choice) ? kernels->bf16.name : NULL;
}

const char *attn_kernel_f16_tiles(attn_kernel_choice choice) {
    const attn_kernels *kernels = NULL;
    if (attn_kernels_select(choice, &kernels, NULL) != ATTN_OK || kernels == NULL) return NULL;
    return attn_kernels_f16_on_tiles(kernels) ? kernels->f16.name : NULL;
}
