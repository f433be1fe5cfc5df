/*
 * kernel_query.c — the public kernel queries of attn.h (attn_kernel_name,
 * attn_kernel_available): which kernel family a choice selects on this CPU and build.
 */
#include "../core/internal.h"
#include "../kernels/kernel.h"

const char *attn_kernel_name(attn_kernel_choice choice) {
    const attn_kernel_table *table = NULL;
    if (attn_select_kernels(choice, &table, NULL) != ATTN_OK || table == NULL) return NULL;
    return table->name;
}

int attn_kernel_available(attn_kernel_choice choice) { return attn_kernel_name(choice) != NULL; }
