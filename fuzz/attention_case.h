/*
 * attention_case.h — one randomised attention call built from a string of bytes: shapes, head
 * counts, strided layouts (permuted, padded, negative), every mask option and combination,
 * empty-row policy, tiles, threads. Shared by the libFuzzer target fuzz/fuzz_forward.c (bytes
 * from the fuzzer) and the property test tests/test_property_forward.c (bytes from a seeded
 * generator), so a property failure and a fuzz finding are the same kind of object.
 *
 * Contract checked by attention_case_compare: attn_forward (any kernel family, any thread
 * count) and attn_reference_forward either both succeed with outputs that agree within a
 * tolerance, or both fail with the same status.
 *
 * Every buffer is filled with NaN before the views' elements are written, so a read of padding
 * or of memory outside a view poisons the output and is caught; rows of K and V that no query
 * may attend to (beyond key_lengths) are NaN too when the case asks for it.
 */
#ifndef ATTN_ATTENTION_CASE_H
#define ATTN_ATTENTION_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* A reader over the input bytes; past the end it yields zeros (a short input is still a case). */
typedef struct case_bytes {
    const uint8_t *data;
    size_t size;
    size_t position;
} case_bytes;

/* A value in [0, range) taken from the next byte(s); range >= 1. */
uint32_t case_take(case_bytes *bytes, uint32_t range);

/* A float tensor that owns its (NaN-initialised) allocation. */
typedef struct case_tensor {
    attn_tensor view;
    float *allocation;
    int64_t allocation_floats;
} case_tensor;

typedef struct attention_case {
    /* Sizes: B, Tq, Tk, Hq, Hkv, Dk, Dv. */
    int64_t batch, query_length, key_length, query_heads, kv_heads, key_dim, value_dim;
    case_tensor q, k, v;          /* [B, Tq, Hq, Dk], [B, Tk, Hkv, Dk], [B, Tk, Hkv, Dv] */
    case_tensor out, lse;         /* [B, Tq, Hq, Dv], [B, Hq, Tq]: attn_forward's outputs */
    case_tensor reference_out;    /* contiguous [B, Tq, Hq, Dv]: the reference's outputs */
    case_tensor reference_lse;    /* contiguous [B, Hq, Tq] */
    int with_lse;                 /* 0: both calls get lse = NULL */
    attn_options options;
    attn_execution execution;     /* tiles from the bytes; kernel and threads set per run */
    attn_tensor mask, bias, block_layout; /* views used when options points to them */
    uint8_t *mask_allocation, *block_allocation;
    float *bias_allocation;
    int32_t *query_lengths, *key_lengths;
    int64_t *query_positions, *key_positions, *global_tokens;
    float *alibi_slopes;
    int layout_codes[5];          /* memory layouts of q, k, v, out, lse (for descriptions) */
    int poisoned_padding_keys;    /* K/V rows j >= key_lengths[b] hold NaN */
    attn_status reference_status;
    attn_error reference_error;
} attention_case;

/* Builds a case from `bytes`. Returns 0, or -1 if an allocation failed (then nothing is held). */
int attention_case_build(case_bytes *bytes, attention_case *c);
void attention_case_free(attention_case *c);

/* Runs attn_reference_forward once (result kept in the case). */
void attention_case_run_reference(attention_case *c);

/* Runs attn_forward with the case's options but the given kernel family and thread count. */
attn_status attention_case_run_forward(attention_case *c, attn_kernel_choice kernel, int threads,
                                       attn_error *error);

/* Compares the last forward (status `status`) with the reference: returns 1 when they agree
 * (same status, and when OK every O and LSE element within tolerance * (1 + |reference|), NaN
 * matching NaN and infinities equal), else 0 with a one-line reason in `reason`. */
int attention_case_compare(const attention_case *c, attn_status status, double tolerance,
                           char *reason, size_t reason_size);

/* Copies the forward's O then LSE (logical order) into `dense`, which holds
 * attention_case_output_count(c) floats; for bitwise comparisons between runs. */
int64_t attention_case_output_count(const attention_case *c);
void attention_case_copy_output(const attention_case *c, float *dense);

/* One line describing the case (sizes, layouts, options) for failure messages. */
void attention_case_describe(const attention_case *c, char *text, size_t text_size);

#endif /* ATTN_ATTENTION_CASE_H */
