/*
 * forward_small.c — attn_forward's small calls on the decode loop. A call with few query rows
 * per KV head (a generation step, a short chunk) is dominated by reading K and V once; the
 * tiled forward would pack them into tiles first, on every call. Here K and V are read where
 * they lie: a struct attn_kv_cache describes the [B, Tk, Hkv, D] views as one page of Tk
 * slots per sequence, with the views' own strides (as the caller-owned caches of
 * kvcache_external.c are described), and attn_decode runs on it with the call's options.
 * The result is the same attention (causal, windows, ALiBi, soft-cap, query lengths and the
 * empty-row policy; element-wise masks, patterns and explicit positions stay on the tiled
 * path), within the same tolerance of the reference, and bitwise identical for any thread
 * count.
 */
#include "forward_small.h"

#include <stdlib.h>
#include <string.h>

#include "../cache/cache_internal.h"
#include "../core/internal.h"

bool attn_forward_small_applies(const attn_call *call, const attn_tensor *k,
                                const attn_tensor *v) {
    const attn_problem *problem = &call->problem;
    const attn_options *options = &call->options;
    if (options->key_lengths != NULL || options->key_positions != NULL) return false;
    if (options->dropout_p > 0.0f) return false; /* the decode kernels apply no dropout */
    /* Element-wise masks stay on the tiled path, whose handling of what they mask out
     * (a NaN there changes nothing) the decode kernels do not all share. */
    if (options->mask != NULL || options->bias != NULL || options->block_layout != NULL ||
        options->pattern != ATTN_PATTERN_NONE || options->global_token_count > 0 ||
        options->query_positions != NULL)
        return false;
    if (problem->group_size * problem->query_length > ATTN_FORWARD_SMALL_ROWS) return false;
    if (problem->key_length > INT32_MAX) return false;
    for (int d = 0; d < 4; ++d)
        if (k->stride[d] < 0 || v->stride[d] < 0) return false; /* pages lie forwards */
    return k->stride[3] == 1 && v->stride[3] == 1;
}

/* Sequences whose bookkeeping (block table, length) fits on the stack. */
enum { SMALL_STACK_SEQUENCES = 64 };

attn_status attn_forward_small(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, attn_tensor *out, attn_tensor *lse,
                               attn_error *error) {
    const attn_problem *problem = &call->problem;
    const int64_t B = problem->batch, Tk = problem->key_length, Hkv = problem->kv_heads;
    int32_t stack_tables[SMALL_STACK_SEQUENCES];
    int64_t stack_lengths[SMALL_STACK_SEQUENCES];
    float stack_scales[2 * SMALL_STACK_SEQUENCES];
    const bool on_stack = B <= SMALL_STACK_SEQUENCES && Hkv <= SMALL_STACK_SEQUENCES;
    int32_t *tables = on_stack ? stack_tables : malloc((size_t)B * sizeof *tables);
    int64_t *lengths = on_stack ? stack_lengths : malloc((size_t)B * sizeof *lengths);
    float *head_scales = on_stack ? stack_scales : malloc((size_t)(2 * Hkv) * sizeof *head_scales);
    if (tables == NULL || lengths == NULL || head_scales == NULL) {
        if (!on_stack) free(tables), free(lengths), free(head_scales);
        attn_call_end(call);
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "attn_forward: no memory for %lld "
                         "sequences' bookkeeping", (long long)B);
    }
    for (int64_t b = 0; b < B; ++b) tables[b] = (int32_t)b, lengths[b] = Tk;
    for (int64_t h = 0; h < 2 * Hkv; ++h) head_scales[h] = 1.0f;

    struct attn_kv_cache view;
    memset(&view, 0, sizeof view);
    view.config = attn_kv_cache_config_default();
    view.config.sequences = B;
    view.config.kv_heads = Hkv;
    view.config.key_dim = problem->key_dim;
    view.config.value_dim = problem->value_dim;
    view.config.dtype = k->dtype;
    view.config.capacity = Tk;
    view.config.page_size = Tk;
    view.config.page_count = B;
    view.element_size = attn_dtype_size(k->dtype);
    view.page_size = Tk;
    view.page_count = B;
    view.pages_per_sequence = 1;
    view.key_page_elements = k->stride[0];
    view.value_page_elements = v->stride[0];
    view.key_pool = k->data;
    view.value_pool = v->data;
    view.key_token_stride = k->stride[1];
    view.key_head_stride = k->stride[2];
    view.value_token_stride = v->stride[1];
    view.value_head_stride = v->stride[2];
    view.block_tables = tables;
    view.lengths = lengths;
    view.key_head_scales = head_scales;
    view.value_head_scales = head_scales + Hkv;
    view.keys_name = "k";

    const attn_status status = attn_decode_run(call, &view, q, out, lse, error);
    attn_call_end(call); /* validated, never reserved: nothing of its own to free */
    if (!on_stack) free(tables), free(lengths), free(head_scales);
    return status;
}
