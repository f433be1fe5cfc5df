/*
 * validate.c — checks the tensors and options of an attention call before any work is done
 * (mask.h): sizes, shapes that must agree, broadcastable mask/bias/layout shapes, option
 * ranges, lengths, positions and pattern parameters. Every message names the argument and
 * the bad value.
 */
#include "mask.h"

#include <limits.h>
#include <math.h>

#include "../call/call.h"
#include "../core/internal.h"

/* Head dims and sequence lengths the tiled kernels index with int / int64 safely. */
#define ATTN_MAX_HEAD_DIM ((int64_t)1 << 20)

static attn_status check_dimension(const attn_tensor *t, const char *name, int dim,
                                   const char *symbol, int64_t expected, const char *source,
                                   attn_error *error) {
    if (t->shape[dim] == expected) return ATTN_OK;
    return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH, "%s.shape[%d] (%s) = %lld: %s has %s = %lld",
                     name, dim, symbol, (long long)t->shape[dim], source, symbol,
                     (long long)expected);
}

/* A [B|1, Hq|1, rows, columns] tensor of `dtype` (mask, bias, block layout). */
static attn_status check_broadcast_tensor(const attn_tensor *t, const char *name,
                                          attn_dtype dtype, const attn_problem *problem,
                                          int64_t rows, const char *rows_name, int64_t columns,
                                          const char *columns_name, attn_error *error) {
    attn_status status = attn_check_tensor(t, name, dtype, 4, error);
    if (status != ATTN_OK) return status;
    if (t->shape[0] != 1 && t->shape[0] != problem->batch)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "%s.shape[0] = %lld: must be 1 or B = %lld", name,
                         (long long)t->shape[0], (long long)problem->batch);
    if (t->shape[1] != 1 && t->shape[1] != problem->query_heads)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "%s.shape[1] = %lld: must be 1 or Hq = %lld", name,
                         (long long)t->shape[1], (long long)problem->query_heads);
    if (t->shape[2] != rows)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH, "%s.shape[2] = %lld: must be %s = %lld",
                         name, (long long)t->shape[2], rows_name, (long long)rows);
    if (t->shape[3] != columns)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH, "%s.shape[3] = %lld: must be %s = %lld",
                         name, (long long)t->shape[3], columns_name, (long long)columns);
    return ATTN_OK;
}

static attn_status check_lengths(const int32_t *lengths, const char *name, int64_t batch,
                                 int64_t limit, const char *limit_name, attn_error *error) {
    if (lengths == NULL) return ATTN_OK;
    for (int64_t b = 0; b < batch; ++b)
        if (lengths[b] < 0 || lengths[b] > limit)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "%s[%lld] = %d: must be in [0, %s = %lld]", name, (long long)b,
                             (int)lengths[b], limit_name, (long long)limit);
    return ATTN_OK;
}

static attn_status check_positions(const int64_t *positions, const char *name, int64_t count,
                                   attn_error *error) {
    if (positions == NULL) return ATTN_OK;
    for (int64_t n = 0; n < count; ++n)
        if (positions[n] < -ATTN_MAX_POSITION || positions[n] > ATTN_MAX_POSITION)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "%s[%lld] = %lld: must be within +-2^52", name, (long long)n,
                             (long long)positions[n]);
    return ATTN_OK;
}

static attn_status check_pattern(const attn_options *options, attn_error *error) {
    switch (options->pattern) {
    case ATTN_PATTERN_NONE: return ATTN_OK;
    case ATTN_PATTERN_STRIDED:
    case ATTN_PATTERN_FIXED:
        if (options->pattern_stride < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.pattern_stride = %lld: must be >= 1 for %s",
                             (long long)options->pattern_stride,
                             options->pattern == ATTN_PATTERN_STRIDED ? "STRIDED" : "FIXED");
        if (options->pattern == ATTN_PATTERN_FIXED &&
            (options->pattern_summary < 1 || options->pattern_summary > options->pattern_stride))
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.pattern_summary = %lld: must be in [1, pattern_stride = %lld]",
                             (long long)options->pattern_summary,
                             (long long)options->pattern_stride);
        return ATTN_OK;
    case ATTN_PATTERN_DILATED: {
        if (options->pattern_radius < 0)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.pattern_radius = %lld: must be >= 0",
                             (long long)options->pattern_radius);
        if (options->pattern_dilation < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.pattern_dilation = %lld: must be >= 1",
                             (long long)options->pattern_dilation);
        int64_t reach;
        if (!attn_mul_i64(options->pattern_radius, options->pattern_dilation, &reach) ||
            reach > ((int64_t)1 << 62))
            return attn_fail(error, ATTN_ERROR_OVERFLOW,
                             "options.pattern_radius = %lld times pattern_dilation = %lld overflows",
                             (long long)options->pattern_radius,
                             (long long)options->pattern_dilation);
        return ATTN_OK;
    }
    }
    return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "options.pattern = %d: unknown",
                     (int)options->pattern);
}

/* Which position-dependent option (if any) needs an explicit alignment. */
static const char *positional_option_in_use(const attn_options *options) {
    if (options->causal) return "options.causal";
    if (options->window_left != -1 || options->window_right != -1) return "options.window";
    if (options->alibi) return "options.alibi";
    if (options->pattern != ATTN_PATTERN_NONE) return "options.pattern";
    return NULL;
}

/* scale, soft-cap, alignment, window, pattern: the options that need no tensor. */
static attn_status check_scalars(const attn_options *options, attn_error *error) {
    attn_status status;
    if (options->custom_scale && (!isfinite(options->scale) || options->scale <= 0.0f))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.scale = %.9g: must be finite and > 0", (double)options->scale);
    if (!isfinite(options->softcap) || options->softcap < 0.0f)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.softcap = %.9g: must be 0 (off) or finite and > 0",
                         (double)options->softcap);

    if (options->alignment != ATTN_ALIGN_UNSET && options->alignment != ATTN_ALIGN_BOTTOM_RIGHT &&
        options->alignment != ATTN_ALIGN_TOP_LEFT)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "options.alignment = %d: unknown",
                         (int)options->alignment);
    if (options->window_left < -1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.window_left = %lld: must be >= -1 (-1 = unbounded)",
                         (long long)options->window_left);
    if (options->window_right < -1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.window_right = %lld: must be >= -1 (-1 = unbounded)",
                         (long long)options->window_right);
    if (!isfinite(options->dropout_p) || options->dropout_p < 0.0f || options->dropout_p >= 1.0f)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.dropout_p = %.9g: must be 0 (off) or in (0, 1)",
                         (double)options->dropout_p);
    status = check_pattern(options, error);
    if (status != ATTN_OK) return status;
    const char *positional = positional_option_in_use(options);
    if (positional != NULL && options->alignment == ATTN_ALIGN_UNSET &&
        options->query_positions == NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.alignment = UNSET: %s needs ATTN_ALIGN_BOTTOM_RIGHT or "
                         "ATTN_ALIGN_TOP_LEFT (or explicit query_positions)",
                         positional);

    return ATTN_OK;
}

/* mask, bias, query / key lengths and positions against the problem's sizes. */
static attn_status check_tensors(const attn_options *options, const attn_problem *problem,
                                     attn_error *error) {
    attn_status status;
    if (options->mask != NULL) {
        status = check_broadcast_tensor(options->mask, "options.mask", ATTN_DTYPE_BOOL, problem,
                                        problem->query_length, "Tq", problem->key_length, "Tk",
                                        error);
        if (status != ATTN_OK) return status;
    }
    if (options->bias != NULL) {
        status = check_broadcast_tensor(options->bias, "options.bias", ATTN_DTYPE_F32, problem,
                                        problem->query_length, "Tq", problem->key_length, "Tk",
                                        error);
        if (status != ATTN_OK) return status;
    }

    status = check_lengths(options->query_lengths, "options.query_lengths", problem->batch,
                           problem->query_length, "Tq", error);
    if (status != ATTN_OK) return status;
    status = check_lengths(options->key_lengths, "options.key_lengths", problem->batch,
                           problem->key_length, "Tk", error);
    if (status != ATTN_OK) return status;
    status = check_positions(options->query_positions, "options.query_positions",
                             problem->query_length, error);
    if (status != ATTN_OK) return status;
    status = check_positions(options->key_positions, "options.key_positions",
                             problem->key_length, error);
    if (status != ATTN_OK) return status;

    return ATTN_OK;
}

/* global tokens, the block layout, ALiBi slopes, sinks, dropout sizes, the empty-row policy. */
static attn_status check_structure(const attn_options *options, const attn_problem *problem,
                                     attn_error *error) {
    attn_status status;
    if (options->global_token_count < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.global_token_count = %lld: must be >= 0",
                         (long long)options->global_token_count);
    if (options->global_token_count > 0) {
        if (options->global_tokens == NULL)
            return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                             "options.global_tokens is NULL with global_token_count = %lld",
                             (long long)options->global_token_count);
        const int64_t limit = problem->query_length > problem->key_length ? problem->query_length
                                                                          : problem->key_length;
        for (int64_t n = 0; n < options->global_token_count; ++n)
            if (options->global_tokens[n] < 0 || options->global_tokens[n] >= limit)
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "options.global_tokens[%lld] = %lld: must be in [0, max(Tq, Tk) = %lld)",
                                 (long long)n, (long long)options->global_tokens[n],
                                 (long long)limit);
    }

    if (options->block_layout != NULL) {
        if (options->block_q < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.block_q = %lld: must be >= 1 with a block_layout",
                             (long long)options->block_q);
        if (options->block_k < 1)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.block_k = %lld: must be >= 1 with a block_layout",
                             (long long)options->block_k);
        const int64_t block_rows = (problem->query_length - 1) / options->block_q + 1;
        const int64_t block_columns = (problem->key_length - 1) / options->block_k + 1;
        status = check_broadcast_tensor(options->block_layout, "options.block_layout",
                                        ATTN_DTYPE_BOOL, problem, block_rows, "ceil(Tq/block_q)",
                                        block_columns, "ceil(Tk/block_k)", error);
        if (status != ATTN_OK) return status;
    }

    if (options->alibi) {
        if (problem->query_heads > INT_MAX)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "Hq = %lld: too many heads for ALiBi", (long long)problem->query_heads);
        if (options->alibi_slopes != NULL)
            for (int64_t h = 0; h < problem->query_heads; ++h)
                if (!isfinite(options->alibi_slopes[h]))
                    return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                     "options.alibi_slopes[%lld] = %.9g: must be finite", (long long)h,
                                     (double)options->alibi_slopes[h]);
    }

    if (options->sink_tokens < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.sink_tokens = %lld: must be >= 0", (long long)options->sink_tokens);
    if (options->sinks != NULL)
        for (int64_t h = 0; h < problem->query_heads; ++h)
            if (!(isfinite(options->sinks[h]) || options->sinks[h] == -INFINITY))
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "options.sinks[%lld] = %.9g: must be finite, or -inf for no sink",
                                 (long long)h, (double)options->sinks[h]);
    /* The dropout generator's counter holds i, the key block and b * Hq + h in 32 bits each. */
    if (options->dropout_p > 0.0f &&
        (problem->query_length >= ((int64_t)1 << 32) || problem->key_length >= ((int64_t)1 << 32) ||
         problem->batch * problem->query_heads >= ((int64_t)1 << 32)))
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "options.dropout_p = %.9g with Tq = %lld, Tk = %lld, B x Hq = %lld: "
                         "dropout needs each below 2^32",
                         (double)options->dropout_p, (long long)problem->query_length,
                         (long long)problem->key_length,
                         (long long)(problem->batch * problem->query_heads));
    if (options->empty_rows != ATTN_EMPTY_ROWS_ERROR && options->empty_rows != ATTN_EMPTY_ROWS_ZERO &&
        options->empty_rows != ATTN_EMPTY_ROWS_NAN)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "options.empty_rows = %d: unknown",
                         (int)options->empty_rows);
    return ATTN_OK;
}

float attn_effective_scale(const attn_options *options, int64_t key_dim) {
    return options->custom_scale ? options->scale : (float)(1.0 / sqrt((double)key_dim));
}

attn_status attn_validate_options(const attn_options *options, const attn_problem *problem,
                                  attn_error *error) {
    if (options == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "options is NULL");
    if (problem == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "problem is NULL");
    attn_status status = check_scalars(options, error);
    if (status == ATTN_OK) status = check_tensors(options, problem, error);
    if (status == ATTN_OK) status = check_structure(options, problem, error);
    return status;
}

/* attn_validate_call with q, k, v, out of dtype `operand`. */
static attn_status validate_call(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                 const attn_options *options, const attn_tensor *out,
                                 const attn_tensor *lse, attn_problem *problem, attn_dtype operand,
                                 attn_error *error) {
    attn_status status;
    if ((status = attn_check_tensor(q, "q", operand, 4, error)) != ATTN_OK) return status;
    if ((status = attn_check_tensor(k, "k", operand, 4, error)) != ATTN_OK) return status;
    if ((status = attn_check_tensor(v, "v", operand, 4, error)) != ATTN_OK) return status;
    if ((status = attn_check_tensor(out, "out", operand, 4, error)) != ATTN_OK)
        return status;
    if (options == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "options is NULL");
    if (problem == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "problem is NULL");

    attn_problem p;
    p.batch = q->shape[0];
    p.query_length = q->shape[1];
    p.query_heads = q->shape[2];
    p.key_dim = q->shape[3];
    p.key_length = k->shape[1];
    p.kv_heads = k->shape[2];
    p.value_dim = v->shape[3];

    if ((status = check_dimension(k, "k", 0, "B", p.batch, "q", error)) != ATTN_OK) return status;
    if ((status = check_dimension(k, "k", 3, "Dk", p.key_dim, "q", error)) != ATTN_OK) return status;
    if (p.query_heads % p.kv_heads != 0)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "k.shape[2] (Hkv) = %lld: must divide q.shape[2] (Hq) = %lld",
                         (long long)p.kv_heads, (long long)p.query_heads);
    if ((status = check_dimension(v, "v", 0, "B", p.batch, "k", error)) != ATTN_OK) return status;
    if ((status = check_dimension(v, "v", 1, "Tk", p.key_length, "k", error)) != ATTN_OK)
        return status;
    if ((status = check_dimension(v, "v", 2, "Hkv", p.kv_heads, "k", error)) != ATTN_OK)
        return status;
    if ((status = check_dimension(out, "out", 0, "B", p.batch, "q", error)) != ATTN_OK) return status;
    if ((status = check_dimension(out, "out", 1, "Tq", p.query_length, "q", error)) != ATTN_OK)
        return status;
    if ((status = check_dimension(out, "out", 2, "Hq", p.query_heads, "q", error)) != ATTN_OK)
        return status;
    if ((status = check_dimension(out, "out", 3, "Dv", p.value_dim, "v", error)) != ATTN_OK)
        return status;
    if (lse != NULL) {
        if ((status = attn_check_tensor(lse, "lse", ATTN_DTYPE_F32, 3, error)) != ATTN_OK)
            return status;
        if ((status = check_dimension(lse, "lse", 0, "B", p.batch, "q", error)) != ATTN_OK)
            return status;
        if ((status = check_dimension(lse, "lse", 1, "Hq", p.query_heads, "q", error)) != ATTN_OK)
            return status;
        if ((status = check_dimension(lse, "lse", 2, "Tq", p.query_length, "q", error)) != ATTN_OK)
            return status;
    }
    if (p.key_dim > ATTN_MAX_HEAD_DIM)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "q.shape[3] (Dk) = %lld: head dims above %lld are not supported",
                         (long long)p.key_dim, (long long)ATTN_MAX_HEAD_DIM);
    if (p.value_dim > ATTN_MAX_HEAD_DIM)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "v.shape[3] (Dv) = %lld: head dims above %lld are not supported",
                         (long long)p.value_dim, (long long)ATTN_MAX_HEAD_DIM);
    /* Every (b, h, i) row index and every (b, h, j) pair count must fit in int64. */
    int64_t rows, pairs;
    if (!attn_mul_i64(p.batch, p.query_heads, &rows) || !attn_mul_i64(rows, p.query_length, &rows) ||
        !attn_mul_i64(p.query_length, p.key_length, &pairs))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "B = %lld, Hq = %lld, Tq = %lld, Tk = %lld: size products overflow int64",
                         (long long)p.batch, (long long)p.query_heads, (long long)p.query_length,
                         (long long)p.key_length);
    p.group_size = p.query_heads / p.kv_heads;
    p.scale = attn_effective_scale(options, p.key_dim);

    status = attn_validate_options(options, &p, error);
    if (status != ATTN_OK) return status;
    *problem = p;
    return ATTN_OK;
}

attn_status attn_validate_call(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_options *options, const attn_tensor *out,
                               const attn_tensor *lse, attn_problem *problem, attn_error *error) {
    return validate_call(q, k, v, options, out, lse, problem, ATTN_DTYPE_F32, error);
}

attn_status attn_validate_call_typed(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_options *options,
                                     const attn_tensor *out, const attn_tensor *lse,
                                     attn_problem *problem, attn_error *error) {
    attn_dtype operand = ATTN_DTYPE_F32;
    if (q != NULL && (q->dtype == ATTN_DTYPE_BF16 || q->dtype == ATTN_DTYPE_F16))
        operand = q->dtype; /* k, v, out must then match q; any other q dtype: "expected F32" */
    return validate_call(q, k, v, options, out, lse, problem, operand, error);
}
