/*
 * aliasing.c — the one check of every entry point that no output shares memory with an
 * input or with another output (call.h: attn_call_check_aliasing). Otherwise the result would
 * depend on the order in which the kernels read and write: a silent wrong answer. Inputs may
 * overlap each other freely (q, k, v as views of one packed qkv buffer). The test is exact on
 * the strides' lattices (core/overlap.h), so interleaved views of one buffer that never share
 * a byte are accepted.
 */
#include "call.h"

#include "../core/internal.h"
#include "../core/overlap.h"

/* The inputs an entry's options carry: tensors and raw arrays (sized by the problem). */
enum { OPTION_INPUTS = 9 };

static int option_regions(const attn_options *options, const attn_problem *problem,
                          attn_region *regions) {
    int count = 0;
    if (options == NULL) return 0;
    const attn_tensor *tensors[3] = {options->mask, options->bias, options->block_layout};
    static const char *const tensor_names[3] = {"options.mask", "options.bias",
                                                "options.block_layout"};
    for (int n = 0; n < 3; ++n)
        if (tensors[n] != NULL) regions[count++] = attn_region_of(tensors[n], tensor_names[n], true);
    if (problem == NULL) return count;
    const struct {
        const void *data;
        int64_t count, size;
        const char *name;
    } arrays[6] = {
        {options->query_lengths, problem->batch, sizeof(int32_t), "options.query_lengths"},
        {options->key_lengths, problem->batch, sizeof(int32_t), "options.key_lengths"},
        {options->query_positions, problem->query_length, sizeof(int64_t), "options.query_positions"},
        {options->key_positions, problem->key_length, sizeof(int64_t), "options.key_positions"},
        {options->global_tokens, options->global_token_count, sizeof(int64_t),
         "options.global_tokens"},
        {options->alibi ? options->alibi_slopes : NULL, problem->query_heads, sizeof(float),
         "options.alibi_slopes"},
    };
    for (int n = 0; n < 6; ++n)
        if (arrays[n].data != NULL && arrays[n].count > 0)
            regions[count++] = attn_region_bytes(arrays[n].data, arrays[n].count * arrays[n].size,
                                                 arrays[n].name);
    return count;
}

/* The same view: one address, dtype, rank, shape and strides. */
static bool same_view(const attn_tensor *a, const attn_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; ++d)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->stride[d] != b->stride[d]))
            return false;
    return true;
}

static attn_status refuse(const attn_region *output, const attn_region *other, attn_overlap how,
                          const char *in_place, attn_error *error) {
    uintptr_t ob, oe, b, e;
    attn_region_span(output, &ob, &oe), attn_region_span(other, &b, &e);
    return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                     "%s (bytes [%p, %p)) and %s (bytes [%p, %p)) %s: an output must not "
                     "overlap an input or another output (the result would depend on the order "
                     "of the reads and writes)%s%s%s",
                     output->name, (const void *)ob, (const void *)oe, other->name,
                     (const void *)b, (const void *)e,
                     how == ATTN_OVERLAP_SHARED ? "share memory"
                                                : "may share memory (a layout too intricate "
                                                  "to tell apart)",
                     in_place != NULL ? "; it may be " : "", in_place != NULL ? in_place : "",
                     in_place != NULL ? " itself (the same view), in place" : "");
}

attn_status attn_call_check_aliasing(const attn_call_tensor *outputs, int output_count,
                                     const attn_call_tensor *inputs, int input_count,
                                     const attn_options *options, const attn_problem *problem,
                                     attn_error *error) {
    attn_region extra[OPTION_INPUTS];
    const int extra_count = option_regions(options, problem, extra);
    for (int m = 0; m < output_count; ++m) {
        const attn_tensor *written = outputs[m].tensor;
        if (written == NULL) continue;
        const attn_region out = attn_region_of(written, outputs[m].name, true);
        const attn_tensor *in_place = outputs[m].in_place;
        for (int n = 0; n < input_count; ++n) {
            const attn_tensor *read = inputs[n].tensor;
            if (read == NULL) continue;
            const bool may_be = in_place != NULL && same_view(read, in_place);
            if (may_be && same_view(written, read)) continue; /* documented in place */
            const attn_region in = attn_region_of(read, inputs[n].name, true);
            const attn_overlap how = attn_regions_overlap(&out, &in);
            if (how != ATTN_OVERLAP_NONE)
                return refuse(&out, &in, how, may_be ? inputs[n].name : NULL, error);
        }
        for (int n = 0; n < extra_count; ++n) {
            const attn_overlap how = attn_regions_overlap(&out, &extra[n]);
            if (how != ATTN_OVERLAP_NONE) return refuse(&out, &extra[n], how, NULL, error);
        }
        for (int n = m + 1; n < output_count; ++n) {
            if (outputs[n].tensor == NULL) continue;
            const attn_region other = attn_region_of(outputs[n].tensor, outputs[n].name, true);
            const attn_overlap how = attn_regions_overlap(&out, &other);
            if (how != ATTN_OVERLAP_NONE) return refuse(&out, &other, how, NULL, error);
        }
    }
    return ATTN_OK;
}
