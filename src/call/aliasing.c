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
enum { OPTION_INPUTS = 10 };

static int option_regions(const attn_options *options, const attn_problem *problem,
                          attn_region *regions) {
    int count = 0;
    if (options == NULL) return 0;
    const attn_tensor *tensors[3] = {options->mask, options->bias, options->block_layout};
    static const char *const tensor_names[3] = {"options.mask", "options.bias",
                                                "options.block_layout"};
    for (int n = 0; n < 3; ++n)
        if (tensors[n] != NULL) attn_region_set(&regions[count++], tensors[n], tensor_names[n], true);
    if (problem == NULL) return count;
    const struct {
        const void *data;
        int64_t count, size;
        const char *name;
    } arrays[7] = {
        {options->query_lengths, problem->batch, sizeof(int32_t), "options.query_lengths"},
        {options->key_lengths, problem->batch, sizeof(int32_t), "options.key_lengths"},
        {options->query_positions, problem->query_length, sizeof(int64_t), "options.query_positions"},
        {options->key_positions, problem->key_length, sizeof(int64_t), "options.key_positions"},
        {options->global_tokens, options->global_token_count, sizeof(int64_t),
         "options.global_tokens"},
        {options->alibi ? options->alibi_slopes : NULL, problem->query_heads, sizeof(float),
         "options.alibi_slopes"},
        {options->sinks, problem->query_heads, sizeof(float), "options.sinks"},
    };
    for (int n = 0; n < 7; ++n)
        if (arrays[n].data != NULL && arrays[n].count > 0)
            attn_region_set_bytes(&regions[count++], arrays[n].data,
                                  arrays[n].count * arrays[n].size, arrays[n].name);
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
    /* Every region once (ATTN_CALL_MOST_OUTPUTS / _INPUTS bound the callers' lists). */
    if (output_count > ATTN_CALL_MOST_OUTPUTS || input_count > ATTN_CALL_MOST_INPUTS)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "attn_call_check_aliasing: %d outputs and %d inputs (at most %d and %d)",
                         output_count, input_count, ATTN_CALL_MOST_OUTPUTS, ATTN_CALL_MOST_INPUTS);
    attn_region written[ATTN_CALL_MOST_OUTPUTS], read[ATTN_CALL_MOST_INPUTS + OPTION_INPUTS];
    int written_index[ATTN_CALL_MOST_OUTPUTS], read_index[ATTN_CALL_MOST_INPUTS];
    int writes = 0, reads = 0;
    for (int m = 0; m < output_count; ++m) {
        if (outputs[m].tensor == NULL) continue;
        /* Nor may an output overlap itself (a broadcast, or strides that meet). */
        const attn_status status = attn_check_output_layout(outputs[m].tensor, outputs[m].name, error);
        if (status != ATTN_OK) return status;
        written_index[writes] = m;
        attn_region_set(&written[writes++], outputs[m].tensor, outputs[m].name, true);
    }
    for (int n = 0; n < input_count; ++n)
        if (inputs[n].tensor != NULL)
            read_index[reads] = n,
            attn_region_set(&read[reads++], inputs[n].tensor, inputs[n].name, true);
    const int tensor_reads = reads;
    reads += option_regions(options, problem, read + reads);
    for (int m = 0; m < writes; ++m) {
        const attn_tensor *output = outputs[written_index[m]].tensor;
        const attn_tensor *in_place = outputs[written_index[m]].in_place;
        for (int n = 0; n < reads; ++n) {
            const bool may_be = n < tensor_reads && in_place != NULL &&
                                same_view(inputs[read_index[n]].tensor, in_place);
            if (may_be && same_view(output, in_place)) continue; /* documented in place */
            const attn_overlap how = attn_regions_overlap(&written[m], &read[n]);
            if (how != ATTN_OVERLAP_NONE)
                return refuse(&written[m], &read[n], how, may_be ? read[n].name : NULL, error);
        }
        for (int n = m + 1; n < writes; ++n) {
            const attn_overlap how = attn_regions_overlap(&written[m], &written[n]);
            if (how != ATTN_OVERLAP_NONE) return refuse(&written[m], &written[n], how, NULL, error);
        }
    }
    return ATTN_OK;
}

attn_status attn_check_forward_aliasing(const attn_tensor *q, const attn_tensor *k,
                                        const attn_tensor *v, const attn_tensor *out,
                                        const attn_tensor *lse, const attn_options *options,
                                        const attn_problem *problem, attn_error *error) {
    const attn_call_tensor outputs[2] = {{out, "out", NULL}, {lse, "lse", NULL}};
    const attn_call_tensor inputs[3] = {{q, "q", NULL}, {k, "k", NULL}, {v, "v", NULL}};
    return attn_call_check_aliasing(outputs, 2, inputs, 3, options, problem, error);
}

attn_status attn_check_backward_aliasing(const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_tensor *out,
                                         const attn_tensor *lse, const attn_tensor *dout,
                                         const attn_tensor *dq, const attn_tensor *dk,
                                         const attn_tensor *dv, const attn_tensor *dbias,
                                         const attn_options *options, const attn_problem *problem,
                                         attn_error *error) {
    const attn_call_tensor outputs[4] = {
        {dq, "dq", NULL}, {dk, "dk", NULL}, {dv, "dv", NULL}, {dbias, "dbias", NULL}};
    const attn_call_tensor inputs[6] = {{q, "q", NULL},     {k, "k", NULL},
                                        {v, "v", NULL},     {out, "out", NULL},
                                        {lse, "lse", NULL}, {dout, "dout", NULL}};
    return attn_call_check_aliasing(outputs, 4, inputs, 6, options, problem, error);
}
