/*
 * test_forward_errors.c — every bad input of attn_forward / attn_reference_forward returns
 * the right status and a message naming the argument and the bad value, and nothing aborts.
 * Each case starts from a valid call and breaks one thing (the table below); cases about the
 * execution settings apply to attn_forward only (the reference has none). NULL options and
 * NULL execution are valid (plain attention, defaults).
 */
#include <limits.h>
#include <string.h>

#include "test_support.h"

enum { B = 2, TQ = 5, TK = 6, HQ = 4, HKV = 2, DK = 8, DV = 3 };

/* A valid call's arguments, which each case modifies. */
typedef struct call {
    attn_tensor q, k, v, out, lse;
    attn_tensor *lse_pointer;
    const attn_tensor *q_pointer, *k_pointer, *v_pointer;
    attn_tensor *out_pointer;
    attn_options options;
    attn_options *options_pointer;
    attn_execution execution;
    attn_execution *execution_pointer;
    attn_tensor mask, bias, layout;
    int32_t lengths[B];
    int64_t positions[TK];
    int64_t globals[2];
    float slopes[HQ];
} call;

static float q_data[B * TQ * HQ * DK], k_data[B * TK * HKV * DK], v_data[B * TK * HKV * DV];
static float out_data[B * TQ * HQ * DV], lse_data[B * HQ * TQ], bias_data[B * HQ * TQ * TK];
static uint8_t mask_data[B * HQ * TQ * TK], layout_data[64];

static void call_init(call *c) {
    memset(c, 0, sizeof *c);
    c->q = attn_tensor_f32_4d(q_data, B, TQ, HQ, DK);
    c->k = attn_tensor_f32_4d(k_data, B, TK, HKV, DK);
    c->v = attn_tensor_f32_4d(v_data, B, TK, HKV, DV);
    c->out = attn_tensor_f32_4d(out_data, B, TQ, HQ, DV);
    const int64_t lse_shape[3] = {B, HQ, TQ};
    c->lse = attn_tensor_contiguous(lse_data, ATTN_DTYPE_F32, 3, lse_shape);
    c->q_pointer = &c->q;
    c->k_pointer = &c->k;
    c->v_pointer = &c->v;
    c->out_pointer = &c->out;
    c->lse_pointer = &c->lse;
    c->options = attn_options_default();
    c->options_pointer = &c->options;
    c->execution = attn_execution_default();
    c->execution_pointer = &c->execution;
    const int64_t mask_shape[4] = {B, HQ, TQ, TK};
    c->mask = attn_tensor_contiguous(mask_data, ATTN_DTYPE_BOOL, 4, mask_shape);
    c->bias = attn_tensor_contiguous(bias_data, ATTN_DTYPE_F32, 4, mask_shape);
    const int64_t layout_shape[4] = {1, 1, 3, 2}; /* block_q = 2, block_k = 4 */
    c->layout = attn_tensor_contiguous(layout_data, ATTN_DTYPE_BOOL, 4, layout_shape);
    c->lengths[0] = c->lengths[1] = 3;
    for (int j = 0; j < TK; ++j) c->positions[j] = j;
    c->globals[0] = 0;
    c->globals[1] = 1;
    for (int h = 0; h < HQ; ++h) c->slopes[h] = 0.5f;
}

typedef struct error_case {
    const char *name;
    void (*modify)(call *c);
    attn_status expected;
    const char *message_part; /* the message must contain this */
    int forward_only;         /* an execution setting: attn_reference_forward has none */
} error_case;

#define CASE(identifier, body)                                                                 \
    static void identifier(call *c) { body; }

CASE(null_q, c->q_pointer = NULL)
CASE(null_k, c->k_pointer = NULL)
CASE(null_v, c->v_pointer = NULL)
CASE(null_out, c->out_pointer = NULL)
CASE(options_version, c->options.version = 7)
CASE(execution_version, c->execution.version = 3)
CASE(null_q_data, c->q.data = NULL)
CASE(zero_batch, c->q.shape[0] = 0)
CASE(negative_dim, c->k.shape[3] = -2)
CASE(wrong_dtype, c->v.dtype = ATTN_DTYPE_F64)
CASE(wrong_rank, c->q.rank = 3)
CASE(heads_not_divisible, { c->q.shape[2] = 3; c->out.shape[2] = 3; })
CASE(kv_batch, c->v.shape[0] = 1)
CASE(kv_length, c->v.shape[1] = 5)
CASE(kv_heads, c->v.shape[2] = 1)
CASE(qk_dim, c->k.shape[3] = 7)
CASE(out_dim, c->out.shape[3] = 4)
CASE(out_length, c->out.shape[1] = 4)
CASE(lse_shape, c->lse.shape[2] = 6)
CASE(overflowing_stride, c->q.stride[0] = INT64_MAX / 2)
CASE(scale_zero, { c->options.custom_scale = 1; c->options.scale = 0.0f; })
CASE(scale_negative, { c->options.custom_scale = 1; c->options.scale = -1.0f; })
CASE(scale_nan, { c->options.custom_scale = 1; c->options.scale = NAN; })
CASE(scale_inf, { c->options.custom_scale = 1; c->options.scale = INFINITY; })
CASE(softcap_negative, c->options.softcap = -1.0f)
CASE(softcap_inf, c->options.softcap = INFINITY)
CASE(window_left, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.window = 1; c->options.window_left = -2; })
CASE(window_right, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.window = 1; c->options.window_right = -5; })
CASE(causal_unaligned, c->options.causal = 1)
CASE(window_unaligned, { c->options.window = 1; c->options.window_left = 3; })
CASE(alibi_unaligned, c->options.alibi = 1)
CASE(pattern_unaligned, { c->options.pattern = ATTN_PATTERN_STRIDED; c->options.pattern_stride = 2; })
CASE(bad_alignment, c->options.alignment = (attn_alignment)7)
CASE(mask_batch, { c->mask.shape[0] = 3; c->options.mask = &c->mask; })
CASE(mask_heads, { c->mask.shape[1] = 2; c->options.mask = &c->mask; })
CASE(mask_rows, { c->mask.shape[2] = 4; c->options.mask = &c->mask; })
CASE(mask_columns, { c->mask.shape[3] = 7; c->options.mask = &c->mask; })
CASE(mask_dtype, { c->mask.dtype = ATTN_DTYPE_F32; c->options.mask = &c->mask; })
CASE(bias_columns, { c->bias.shape[3] = 5; c->options.bias = &c->bias; })
CASE(bias_dtype, { c->bias.dtype = ATTN_DTYPE_BOOL; c->options.bias = &c->bias; })
CASE(query_length_big, { c->lengths[1] = TQ + 1; c->options.query_lengths = c->lengths; })
CASE(key_length_negative, { c->lengths[1] = -1; c->options.key_lengths = c->lengths; })
CASE(position_huge, { c->positions[2] = (int64_t)1 << 60; c->options.key_positions = c->positions; })
CASE(global_count_negative, c->options.global_token_count = -1)
CASE(global_null, c->options.global_token_count = 2)
CASE(global_range, { c->globals[1] = 6; c->options.global_tokens = c->globals; c->options.global_token_count = 2; })
CASE(pattern_stride, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.pattern = ATTN_PATTERN_STRIDED; })
CASE(pattern_summary, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.pattern = ATTN_PATTERN_FIXED; c->options.pattern_stride = 4; c->options.pattern_summary = 5; })
CASE(pattern_dilation, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.pattern = ATTN_PATTERN_DILATED; c->options.pattern_radius = 2; })
CASE(pattern_radius, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.pattern = ATTN_PATTERN_DILATED; c->options.pattern_radius = -1; c->options.pattern_dilation = 1; })
CASE(pattern_overflow, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.pattern = ATTN_PATTERN_DILATED; c->options.pattern_radius = INT64_MAX / 2; c->options.pattern_dilation = 3; })
CASE(pattern_unknown, c->options.pattern = (attn_sparse_pattern)9)
CASE(layout_block_q, { c->options.block_layout = &c->layout; c->options.block_k = 4; })
CASE(layout_shape, { c->options.block_layout = &c->layout; c->options.block_q = 2; c->options.block_k = 2; })
CASE(alibi_slope_nan, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.alibi = 1; c->slopes[3] = NAN; c->options.alibi_slopes = c->slopes; })
CASE(empty_rows_unknown, c->options.empty_rows = (attn_empty_rows)5)
CASE(threads_negative, c->execution.num_threads = -3)
CASE(threads_too_many, c->execution.num_threads = ATTN_MAX_THREADS + 1)
CASE(tile_q_negative, c->execution.tile_q = -1)
CASE(tile_k_huge, c->execution.tile_k = 1 << 20)
CASE(kernel_unknown, c->execution.kernel = (attn_kernel_choice)42)
CASE(empty_row, { c->options.alignment = ATTN_ALIGN_TOP_LEFT; c->options.window = 1; c->options.window_left = 0; c->options.window_right = 0; c->lengths[0] = 5; c->lengths[1] = 2; c->options.key_lengths = c->lengths; })
CASE(memory_limit, c->execution.memory_limit_bytes = 64)

static const error_case cases[] = {
    {"q NULL", null_q, ATTN_ERROR_NULL_ARGUMENT, "q is NULL", 0},
    {"k NULL", null_k, ATTN_ERROR_NULL_ARGUMENT, "k is NULL", 0},
    {"v NULL", null_v, ATTN_ERROR_NULL_ARGUMENT, "v is NULL", 0},
    {"out NULL", null_out, ATTN_ERROR_NULL_ARGUMENT, "out is NULL", 0},
    {"options.version 7", options_version, ATTN_ERROR_INVALID_ARGUMENT, "options.version = 7", 0},
    {"execution.version 3", execution_version, ATTN_ERROR_INVALID_ARGUMENT, "execution.version = 3", 1},
    {"q.data NULL", null_q_data, ATTN_ERROR_NULL_ARGUMENT, "q.data is NULL", 0},
    {"B = 0", zero_batch, ATTN_ERROR_INVALID_ARGUMENT, "q.shape[0] = 0", 0},
    {"Dk < 0", negative_dim, ATTN_ERROR_INVALID_ARGUMENT, "k.shape[3] = -2", 0},
    {"v float64", wrong_dtype, ATTN_ERROR_INVALID_ARGUMENT, "v.dtype = float64", 0},
    {"q rank 3", wrong_rank, ATTN_ERROR_INVALID_ARGUMENT, "q.rank = 3", 0},
    {"Hq % Hkv", heads_not_divisible, ATTN_ERROR_SHAPE_MISMATCH, "(Hq) = 3", 0},
    {"K/V batch", kv_batch, ATTN_ERROR_SHAPE_MISMATCH, "v.shape[0] (B) = 1", 0},
    {"K/V length", kv_length, ATTN_ERROR_SHAPE_MISMATCH, "v.shape[1] (Tk) = 5", 0},
    {"K/V heads", kv_heads, ATTN_ERROR_SHAPE_MISMATCH, "v.shape[2] (Hkv) = 1", 0},
    {"Q/K dim", qk_dim, ATTN_ERROR_SHAPE_MISMATCH, "k.shape[3] (Dk) = 7", 0},
    {"out Dv", out_dim, ATTN_ERROR_SHAPE_MISMATCH, "out.shape[3] (Dv) = 4", 0},
    {"out Tq", out_length, ATTN_ERROR_SHAPE_MISMATCH, "out.shape[1] (Tq) = 4", 0},
    {"lse Tq", lse_shape, ATTN_ERROR_SHAPE_MISMATCH, "lse.shape[2] (Tq) = 6", 0},
    {"stride overflow", overflowing_stride, ATTN_ERROR_OVERFLOW, "q: ", 0},
    {"scale 0", scale_zero, ATTN_ERROR_INVALID_ARGUMENT, "options.scale = 0", 0},
    {"scale < 0", scale_negative, ATTN_ERROR_INVALID_ARGUMENT, "options.scale = -1", 0},
    {"scale NaN", scale_nan, ATTN_ERROR_INVALID_ARGUMENT, "options.scale = nan", 0},
    {"scale inf", scale_inf, ATTN_ERROR_INVALID_ARGUMENT, "options.scale = inf", 0},
    {"softcap < 0", softcap_negative, ATTN_ERROR_INVALID_ARGUMENT, "options.softcap = -1", 0},
    {"softcap inf", softcap_inf, ATTN_ERROR_INVALID_ARGUMENT, "options.softcap = inf", 0},
    {"window_left -2", window_left, ATTN_ERROR_INVALID_ARGUMENT, "options.window_left = -2", 0},
    {"window_right -5", window_right, ATTN_ERROR_INVALID_ARGUMENT, "options.window_right = -5", 0},
    {"causal unaligned", causal_unaligned, ATTN_ERROR_INVALID_ARGUMENT, "options.causal needs", 0},
    {"window unaligned", window_unaligned, ATTN_ERROR_INVALID_ARGUMENT, "options.window needs", 0},
    {"alibi unaligned", alibi_unaligned, ATTN_ERROR_INVALID_ARGUMENT, "options.alibi needs", 0},
    {"pattern unaligned", pattern_unaligned, ATTN_ERROR_INVALID_ARGUMENT, "options.pattern needs", 0},
    {"alignment 7", bad_alignment, ATTN_ERROR_INVALID_ARGUMENT, "options.alignment = 7", 0},
    {"mask batch 3", mask_batch, ATTN_ERROR_SHAPE_MISMATCH, "options.mask.shape[0] = 3", 0},
    {"mask heads 2", mask_heads, ATTN_ERROR_SHAPE_MISMATCH, "options.mask.shape[1] = 2", 0},
    {"mask rows 4", mask_rows, ATTN_ERROR_SHAPE_MISMATCH, "options.mask.shape[2] = 4", 0},
    {"mask columns 7", mask_columns, ATTN_ERROR_SHAPE_MISMATCH, "options.mask.shape[3] = 7", 0},
    {"mask float", mask_dtype, ATTN_ERROR_INVALID_ARGUMENT, "options.mask.dtype = float32", 0},
    {"bias columns 5", bias_columns, ATTN_ERROR_SHAPE_MISMATCH, "options.bias.shape[3] = 5", 0},
    {"bias bool", bias_dtype, ATTN_ERROR_INVALID_ARGUMENT, "options.bias.dtype = bool", 0},
    {"query length 6", query_length_big, ATTN_ERROR_INVALID_ARGUMENT, "options.query_lengths[1] = 6", 0},
    {"key length -1", key_length_negative, ATTN_ERROR_INVALID_ARGUMENT, "options.key_lengths[1] = -1", 0},
    {"position 2^60", position_huge, ATTN_ERROR_INVALID_ARGUMENT, "options.key_positions[2] = ", 0},
    {"global count -1", global_count_negative, ATTN_ERROR_INVALID_ARGUMENT, "options.global_token_count = -1", 0},
    {"globals NULL", global_null, ATTN_ERROR_NULL_ARGUMENT, "options.global_tokens is NULL", 0},
    {"global 6", global_range, ATTN_ERROR_INVALID_ARGUMENT, "options.global_tokens[1] = 6", 0},
    {"stride 0", pattern_stride, ATTN_ERROR_INVALID_ARGUMENT, "options.pattern_stride = 0", 0},
    {"summary 5", pattern_summary, ATTN_ERROR_INVALID_ARGUMENT, "options.pattern_summary = 5", 0},
    {"dilation 0", pattern_dilation, ATTN_ERROR_INVALID_ARGUMENT, "options.pattern_dilation = 0", 0},
    {"radius -1", pattern_radius, ATTN_ERROR_INVALID_ARGUMENT, "options.pattern_radius = -1", 0},
    {"radius overflow", pattern_overflow, ATTN_ERROR_OVERFLOW, "options.pattern_radius", 0},
    {"pattern 9", pattern_unknown, ATTN_ERROR_INVALID_ARGUMENT, "options.pattern = 9", 0},
    {"block_q 0", layout_block_q, ATTN_ERROR_INVALID_ARGUMENT, "options.block_q = 0", 0},
    {"layout shape", layout_shape, ATTN_ERROR_SHAPE_MISMATCH, "options.block_layout.shape[3] = 2", 0},
    {"slope NaN", alibi_slope_nan, ATTN_ERROR_INVALID_ARGUMENT, "options.alibi_slopes[3] = nan", 0},
    {"empty_rows 5", empty_rows_unknown, ATTN_ERROR_INVALID_ARGUMENT, "options.empty_rows = 5", 0},
    {"threads -3", threads_negative, ATTN_ERROR_INVALID_ARGUMENT, "execution.num_threads = -3", 1},
    {"threads 1025", threads_too_many, ATTN_ERROR_INVALID_ARGUMENT, "execution.num_threads = 1025", 1},
    {"tile_q -1", tile_q_negative, ATTN_ERROR_INVALID_ARGUMENT, "execution.tile_q = -1", 1},
    {"tile_k 2^20", tile_k_huge, ATTN_ERROR_INVALID_ARGUMENT, "execution.tile_k = 1048576", 1},
    {"kernel 42", kernel_unknown, ATTN_ERROR_INVALID_ARGUMENT, "execution.kernel = 42", 1},
    {"empty row", empty_row, ATTN_ERROR_EMPTY_ROW, "b = 1, h = 0, i = 2", 0},
};

/* The call through attn_forward or attn_reference_forward. */
static attn_status run(const call *c, int reference, attn_error *error) {
    if (reference)
        return attn_reference_forward(c->q_pointer, c->k_pointer, c->v_pointer,
                                      c->options_pointer, c->out_pointer, c->lse_pointer, error);
    return attn_forward(c->q_pointer, c->k_pointer, c->v_pointer, c->options_pointer,
                        c->out_pointer, c->lse_pointer, c->execution_pointer, error);
}

int main(void) {
    /* The valid call succeeds, also with NULL options (plain attention) and NULL execution. */
    for (int reference = 0; reference < 2; ++reference)
        for (int nulls = 0; nulls < 2; ++nulls) {
            call c;
            call_init(&c);
            if (nulls) c.options_pointer = NULL, c.execution_pointer = NULL;
            attn_error error;
            CHECK_STATUS(run(&c, reference, &error), ATTN_OK, &error, "valid call (%s, %s)",
                         reference ? "reference" : "forward", nulls ? "NULL options" : "options");
        }
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; ++n) {
        for (int reference = 0; reference < 2; ++reference) {
            if (reference && cases[n].forward_only) continue;
            call c;
            call_init(&c);
            cases[n].modify(&c);
            attn_error error;
            memset(&error, 0, sizeof error);
            attn_status status = run(&c, reference, &error);
            const char *which = reference ? "attn_reference_forward" : "attn_forward";
            CHECK_STATUS(status, cases[n].expected, &error, "%s: %s", which, cases[n].name);
            CHECK(error.status == cases[n].expected, "%s: %s: error.status is set", which, cases[n].name);
            CHECK(strstr(error.message, cases[n].message_part) != NULL,
                  "%s: %s: message '%s' lacks '%s'", which, cases[n].name, error.message,
                  cases[n].message_part);
            /* A NULL error pointer is allowed and gives the same status. */
            status = run(&c, reference, NULL);
            CHECK(status == cases[n].expected, "%s: %s without error pointer", which, cases[n].name);
        }
    }
    /* The memory limit (an execution setting) applies to the forward's working memory. */
    call c;
    call_init(&c);
    memory_limit(&c);
    attn_error error;
    CHECK_STATUS(run(&c, 0, &error), ATTN_ERROR_MEMORY_LIMIT, &error, "memory limit 64 bytes");
    CHECK(strstr(error.message, "execution.memory_limit_bytes = 64") != NULL, "memory message: %s",
          error.message);
    /* attn_alibi_slopes argument checks. */
    float slopes[4];
    CHECK_STATUS(attn_alibi_slopes(0, slopes, &error), ATTN_ERROR_INVALID_ARGUMENT, &error, "0 heads");
    CHECK(strstr(error.message, "num_heads = 0") != NULL, "alibi message: %s", error.message);
    CHECK_STATUS(attn_alibi_slopes(4, NULL, &error), ATTN_ERROR_NULL_ARGUMENT, &error, "NULL slopes");
    /* A valid call passes (the baseline every case breaks). */
    call_init(&c);
    CHECK_STATUS(attn_forward(&c.q, &c.k, &c.v, &c.options, &c.out, &c.lse, NULL, &error), ATTN_OK, &error,
                 "baseline");
    return test_finish();
}
