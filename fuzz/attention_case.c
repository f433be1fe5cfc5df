/*
 * attention_case.c — builds, runs and compares one randomised attention call (see
 * attention_case.h). Sizes are kept small (T <= 12, D <= 9, heads <= 9) so the naive reference
 * stays cheap and thousands of cases run per second; about one case in sixteen is deliberately
 * invalid (scale, window, mask shape, lengths, global token, pattern parameters, soft-cap) to
 * check that the fast path and the reference refuse the same requests with the same status.
 */
#include "attention_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t case_take(case_bytes *bytes, uint32_t range) {
    uint32_t value = 0;
    for (uint32_t span = range - 1; span > 0; span >>= 8) {
        uint8_t next = bytes->position < bytes->size ? bytes->data[bytes->position] : 0;
        ++bytes->position;
        value = (value << 8) | next;
    }
    return range <= 1 ? 0 : value % range;
}

/* ---- values: a small deterministic generator seeded from the bytes ---- */

typedef struct value_generator { uint64_t state; } value_generator;

static uint64_t generator_next(value_generator *g) {
    uint64_t z = (g->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float generator_signed(value_generator *g) {
    return (float)((double)(generator_next(g) >> 11) * 0x1.0p-52 - 1.0);
}

/* ---- strided tensors ---- */

/* Memory layouts of a logical [B, T, H, D] tensor (or the lse's [B, H, T]). */
enum case_layout {
    CASE_LAYOUT_CONTIGUOUS = 0, /* C order */
    CASE_LAYOUT_HEADS_OUTER,    /* the two middle dims swapped in memory: [B, H, T, D] */
    CASE_LAYOUT_PADDED,         /* C order, each innermost row padded by 3 floats */
    CASE_LAYOUT_NEGATIVE_T,     /* C order with the sequence dimension reversed */
    CASE_LAYOUT_NEGATIVE_D,     /* swapped as above, and the last dimension reversed */
    CASE_LAYOUT_COUNT
};

static const char *const layout_names[CASE_LAYOUT_COUNT] = {"C-order", "swapped", "padded",
                                                            "negative-seq", "swapped-negative-last"};

/* Allocates a NaN-filled float tensor of logical shape `shape` (rank 3 or 4) in `layout`.
 * For rank 3 (the lse [B, H, T]) the "sequence" dimension is 2. */
static int case_tensor_new(case_tensor *t, int rank, const int64_t *shape, int layout) {
    memset(t, 0, sizeof *t);
    int order[4] = {0, 1, 2, 3}; /* memory order, outermost first, of logical dims */
    int sequence_dim = rank == 4 ? 1 : 2;
    if (layout == CASE_LAYOUT_HEADS_OUTER || layout == CASE_LAYOUT_NEGATIVE_D) {
        order[1] = 2; /* swap the two middle dimensions in memory */
        order[2] = 1;
    }
    int64_t padding = layout == CASE_LAYOUT_PADDED ? 3 : 0;
    int64_t stride[4] = {0}, running = 1;
    for (int m = rank - 1; m >= 0; --m) {
        int dim = order[m];
        stride[dim] = running;
        running *= shape[dim] + (m == rank - 1 ? padding : 0);
    }
    t->allocation_floats = running;
    t->allocation = malloc((size_t)running * sizeof(float));
    if (!t->allocation) return -1;
    for (int64_t n = 0; n < running; ++n) t->allocation[n] = NAN;
    float *origin = t->allocation;
    int negative_dim = layout == CASE_LAYOUT_NEGATIVE_T ? sequence_dim
                       : layout == CASE_LAYOUT_NEGATIVE_D ? rank - 1 : -1;
    if (negative_dim >= 0) {
        origin += (shape[negative_dim] - 1) * stride[negative_dim];
        stride[negative_dim] = -stride[negative_dim];
    }
    t->view.data = origin;
    t->view.dtype = ATTN_DTYPE_F32;
    t->view.rank = rank;
    for (int d = 0; d < rank; ++d) {
        t->view.shape[d] = shape[d];
        t->view.stride[d] = stride[d];
    }
    return 0;
}

static void case_tensor_free(case_tensor *t) {
    free(t->allocation);
    memset(t, 0, sizeof *t);
}

/* Offset of a logical index in a view. */
static int64_t view_offset(const attn_tensor *view, const int64_t *index) {
    int64_t offset = 0;
    for (int d = 0; d < view->rank; ++d) offset += index[d] * view->stride[d];
    return offset;
}

/* The float at a logical index of a view. */
static float view_value(const attn_tensor *view, const int64_t *index) {
    return ((const float *)view->data)[view_offset(view, index)];
}

/* Advances a logical index in C order; returns 0 after the last element. */
static int next_index(const attn_tensor *view, int64_t *index) {
    for (int d = view->rank - 1; d >= 0; --d) {
        if (++index[d] < view->shape[d]) return 1;
        index[d] = 0;
    }
    return 0;
}

/* Writes magnitude * uniform(-1, 1) into every element of the view. */
static void fill_view(case_tensor *t, value_generator *g, float magnitude) {
    int64_t index[4] = {0};
    do {
        ((float *)t->view.data)[view_offset(&t->view, index)] = magnitude * generator_signed(g);
    } while (next_index(&t->view, index));
}

/* ---- options ---- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* A BOOL tensor [B|1, Hq|1, rows, columns], sometimes with a stride-0 broadcast dim; about one
 * in eight allowed. Returns 0 or -1 on allocation failure. */
static int build_bool_tensor(case_bytes *bytes, value_generator *g, const attention_case *c,
                             int64_t rows, int64_t columns, int wrong_shape, attn_tensor *view,
                             uint8_t **allocation) {
    int64_t shape[4] = {case_take(bytes, 2) ? c->batch : 1, case_take(bytes, 2) ? c->query_heads : 1,
                        rows, columns + (wrong_shape ? 1 : 0)};
    int broadcast_heads = shape[1] > 1 && case_take(bytes, 4) == 0; /* stride 0 over heads */
    int density = (int)case_take(bytes, 4);                         /* 0: sparse .. 3: dense */
    int64_t count = shape[0] * (broadcast_heads ? 1 : shape[1]) * shape[2] * shape[3];
    *allocation = malloc((size_t)count);
    if (!*allocation) return -1;
    for (int64_t n = 0; n < count; ++n)
        (*allocation)[n] = (uint8_t)((generator_next(g) % 8) < (uint64_t)(2 + 2 * density)
                                         ? 1 + generator_next(g) % 200 : 0);
    *view = attn_tensor_contiguous(*allocation, ATTN_DTYPE_BOOL, 4, shape);
    if (broadcast_heads) {
        view->stride[1] = 0;
        view->stride[0] = shape[2] * shape[3];
    }
    return 0;
}

static int build_options(case_bytes *bytes, value_generator *g, attention_case *c) {
    attn_options *o = &c->options;
    *o = attn_options_default();
    int invalid = case_take(bytes, 16) == 0;           /* this case is deliberately wrong */
    int invalid_kind = (int)case_take(bytes, 8);

    if (case_take(bytes, 4) == 0) {
        o->custom_scale = 1;
        static const float scales[] = {0.05f, 0.5f, 1.0f, 3.0f};
        o->scale = scales[case_take(bytes, 4)];
        if (invalid && invalid_kind == 0) o->scale = case_take(bytes, 2) ? 0.0f : -1.0f;
    }
    /* Usually an alignment (position-dependent options need one); UNSET one time in eight. */
    o->alignment = case_take(bytes, 8) == 0 ? ATTN_ALIGN_UNSET
                                            : (attn_alignment)(1 + case_take(bytes, 2));
    o->causal = case_take(bytes, 2);
    o->window = 1;
    o->window_left = (int64_t)case_take(bytes, 8) - 1;  /* -1 (unbounded) .. 6 */
    o->window_right = (int64_t)case_take(bytes, 8) - 1;
    if (case_take(bytes, 2)) o->window = 1, o->window_left = o->window_right = -1; /* often no window */
    if (invalid && invalid_kind == 1) o->window = 1, o->window_left = -2;

    int with_mask = case_take(bytes, 4) == 0;
    if (with_mask) {
        if (build_bool_tensor(bytes, g, c, c->query_length, c->key_length,
                              invalid && invalid_kind == 2, &c->mask, &c->mask_allocation))
            return -1;
        o->mask = &c->mask;
    }
    if (case_take(bytes, 5) == 0) { /* additive bias with some -inf entries */
        int64_t shape[4] = {case_take(bytes, 2) ? c->batch : 1,
                            case_take(bytes, 2) ? c->query_heads : 1, c->query_length,
                            c->key_length};
        int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
        c->bias_allocation = malloc((size_t)count * sizeof(float));
        if (!c->bias_allocation) return -1;
        for (int64_t n = 0; n < count; ++n)
            c->bias_allocation[n] = generator_next(g) % 6 == 0 ? -INFINITY
                                                               : 2.0f * generator_signed(g);
        c->bias = attn_tensor_contiguous(c->bias_allocation, ATTN_DTYPE_F32, 4, shape);
        o->bias = &c->bias;
    }
    if (case_take(bytes, 4) == 0) {
        c->query_lengths = malloc((size_t)c->batch * sizeof(int32_t));
        if (!c->query_lengths) return -1;
        for (int64_t b = 0; b < c->batch; ++b)
            c->query_lengths[b] = (int32_t)case_take(bytes, (uint32_t)c->query_length + 1);
        if (invalid && invalid_kind == 3) c->query_lengths[0] = (int32_t)c->query_length + 1;
        o->query_lengths = c->query_lengths;
    }
    if (case_take(bytes, 3) == 0) {
        c->key_lengths = malloc((size_t)c->batch * sizeof(int32_t));
        if (!c->key_lengths) return -1;
        for (int64_t b = 0; b < c->batch; ++b)
            c->key_lengths[b] = (int32_t)case_take(bytes, (uint32_t)c->key_length + 1);
        if (invalid && invalid_kind == 4) c->key_lengths[0] = -1;
        o->key_lengths = c->key_lengths;
        c->poisoned_padding_keys = case_take(bytes, 2);
    }
    if (case_take(bytes, 6) == 0) { /* explicit positions, not necessarily monotonic */
        c->query_positions = malloc((size_t)c->query_length * sizeof(int64_t));
        c->key_positions = malloc((size_t)c->key_length * sizeof(int64_t));
        if (!c->query_positions || !c->key_positions) return -1;
        int64_t offset = (int64_t)case_take(bytes, 8);
        int shuffled = case_take(bytes, 3) == 0;
        for (int64_t i = 0; i < c->query_length; ++i)
            c->query_positions[i] = shuffled ? (int64_t)case_take(bytes, 16) - 4 : i + offset;
        for (int64_t j = 0; j < c->key_length; ++j)
            c->key_positions[j] = shuffled ? (int64_t)case_take(bytes, 16) - 4 : j;
        o->query_positions = c->query_positions;
        o->key_positions = c->key_positions;
    }
    if (case_take(bytes, 6) == 0) {
        int64_t count = 1 + case_take(bytes, 3);
        int64_t limit = c->query_length < c->key_length ? c->query_length : c->key_length;
        c->global_tokens = malloc((size_t)count * sizeof(int64_t));
        if (!c->global_tokens) return -1;
        for (int64_t n = 0; n < count; ++n) c->global_tokens[n] = case_take(bytes, (uint32_t)limit);
        if (invalid && invalid_kind == 5) c->global_tokens[0] = -1;
        o->global_tokens = c->global_tokens;
        o->global_token_count = count;
    }
    o->pattern = (attn_sparse_pattern)(case_take(bytes, 2) ? 0 : case_take(bytes, 4));
    o->pattern_stride = 1 + case_take(bytes, 4);
    o->pattern_summary = 1 + case_take(bytes, (uint32_t)o->pattern_stride);
    o->pattern_radius = case_take(bytes, 4);
    o->pattern_dilation = 1 + case_take(bytes, 3);
    if (invalid && invalid_kind == 6) {
        o->pattern = ATTN_PATTERN_FIXED;
        o->pattern_summary = o->pattern_stride + 1;
    }
    if (case_take(bytes, 6) == 0) {
        o->block_q = 1 + case_take(bytes, 4);
        o->block_k = 1 + case_take(bytes, 4);
        if (build_bool_tensor(bytes, g, c, ceil_div(c->query_length, o->block_q),
                              ceil_div(c->key_length, o->block_k), 0, &c->block_layout,
                              &c->block_allocation))
            return -1;
        o->block_layout = &c->block_layout;
    }
    if (case_take(bytes, 5) == 0) {
        o->alibi = 1;
        if (case_take(bytes, 2)) {
            c->alibi_slopes = malloc((size_t)c->query_heads * sizeof(float));
            if (!c->alibi_slopes) return -1;
            for (int64_t h = 0; h < c->query_heads; ++h)
                c->alibi_slopes[h] = 0.5f * (1.0f + generator_signed(g));
            o->alibi_slopes = c->alibi_slopes;
        }
    }
    if (case_take(bytes, 5) == 0) {
        static const float caps[] = {0.5f, 2.0f, 30.0f};
        o->softcap = caps[case_take(bytes, 3)];
        if (invalid && invalid_kind == 7) o->softcap = -1.0f;
    }
    o->empty_rows = (attn_empty_rows)case_take(bytes, 3);
    c->execution = attn_execution_default();
    c->execution.tile_q = case_take(bytes, 2) ? 0 : (int)case_take(bytes, 9) + 1;
    c->execution.tile_k = case_take(bytes, 2) ? 0 : (int)case_take(bytes, 9) + 1;
    return 0;
}

/* NaN in every K/V row that no query may see (j >= key_lengths[b]). */
static void poison_padding_keys(attention_case *c) {
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t j = c->key_lengths[b]; j < c->key_length; ++j)
            for (int64_t h = 0; h < c->kv_heads; ++h) {
                for (int64_t d = 0; d < c->key_dim; ++d) {
                    int64_t index[4] = {b, j, h, d};
                    ((float *)c->k.view.data)[view_offset(&c->k.view, index)] = NAN;
                }
                for (int64_t d = 0; d < c->value_dim; ++d) {
                    int64_t index[4] = {b, j, h, d};
                    ((float *)c->v.view.data)[view_offset(&c->v.view, index)] = -INFINITY;
                }
            }
}

int attention_case_build(case_bytes *bytes, attention_case *c) {
    memset(c, 0, sizeof *c);
    value_generator g = {0};
    for (int n = 0; n < 4; ++n) g.state = (g.state << 8) | case_take(bytes, 256);

    c->batch = 1 + case_take(bytes, 2);
    c->query_length = 1 + case_take(bytes, 12);
    c->key_length = 1 + case_take(bytes, 12);
    c->kv_heads = 1 + case_take(bytes, 3);
    c->query_heads = c->kv_heads * (1 + case_take(bytes, 3)); /* GQA ratios 1, 2, 3 */
    c->key_dim = 1 + case_take(bytes, 9);
    c->value_dim = case_take(bytes, 2) ? c->key_dim : 1 + case_take(bytes, 9);
    c->with_lse = case_take(bytes, 4) != 0;

    int layouts[5];
    for (int n = 0; n < 5; ++n) layouts[n] = (int)case_take(bytes, CASE_LAYOUT_COUNT);
    int64_t q_shape[4] = {c->batch, c->query_length, c->query_heads, c->key_dim};
    int64_t k_shape[4] = {c->batch, c->key_length, c->kv_heads, c->key_dim};
    int64_t v_shape[4] = {c->batch, c->key_length, c->kv_heads, c->value_dim};
    int64_t o_shape[4] = {c->batch, c->query_length, c->query_heads, c->value_dim};
    int64_t l_shape[3] = {c->batch, c->query_heads, c->query_length};
    if (case_tensor_new(&c->q, 4, q_shape, layouts[0]) ||
        case_tensor_new(&c->k, 4, k_shape, layouts[1]) ||
        case_tensor_new(&c->v, 4, v_shape, layouts[2]) ||
        case_tensor_new(&c->out, 4, o_shape, layouts[3]) ||
        case_tensor_new(&c->lse, 3, l_shape, layouts[4] % 4) ||
        case_tensor_new(&c->reference_out, 4, o_shape, CASE_LAYOUT_CONTIGUOUS) ||
        case_tensor_new(&c->reference_lse, 3, l_shape, CASE_LAYOUT_CONTIGUOUS)) {
        attention_case_free(c);
        return -1;
    }
    static const float magnitudes[] = {1.0f, 3.0f, 0.25f, 8.0f};
    float magnitude = magnitudes[case_take(bytes, 4)];
    fill_view(&c->q, &g, magnitude);
    fill_view(&c->k, &g, magnitude);
    fill_view(&c->v, &g, 1.0f);
    if (build_options(bytes, &g, c)) {
        attention_case_free(c);
        return -1;
    }
    if (c->key_lengths && c->poisoned_padding_keys) {
        int lengths_valid = 1;
        for (int64_t b = 0; b < c->batch; ++b)
            if (c->key_lengths[b] < 0 || c->key_lengths[b] > c->key_length) lengths_valid = 0;
        if (lengths_valid) poison_padding_keys(c);
    }
    /* One NaN in a query or key element, or an infinity, in about one case in eight: the
     * rows that attend it must be NaN (or follow the infinity) exactly as the reference's
     * (docs/conventions.md, NaN), every other row unchanged. */
    const int64_t injected = case_take(bytes, 8);
    if (injected < 2) {
        const attn_tensor *target = injected == 0 ? &c->q.view : &c->k.view;
        int64_t index[4];
        for (int d = 0; d < 4; ++d) index[d] = (int64_t)(generator_next(&g) % (uint64_t)target->shape[d]);
        ((float *)target->data)[view_offset(target, index)] =
            case_take(bytes, 3) == 0 ? INFINITY : NAN;
    }
    c->reference_status = ATTN_ERROR_UNSUPPORTED;
    snprintf(c->reference_error.message, sizeof c->reference_error.message, "not run");
    c->execution.num_threads = 1;
    c->layout_codes[0] = layouts[0];
    c->layout_codes[1] = layouts[1];
    c->layout_codes[2] = layouts[2];
    c->layout_codes[3] = layouts[3];
    c->layout_codes[4] = layouts[4] % 4;
    return 0;
}

void attention_case_free(attention_case *c) {
    case_tensor_free(&c->q);
    case_tensor_free(&c->k);
    case_tensor_free(&c->v);
    case_tensor_free(&c->out);
    case_tensor_free(&c->lse);
    case_tensor_free(&c->reference_out);
    case_tensor_free(&c->reference_lse);
    free(c->mask_allocation);
    free(c->block_allocation);
    free(c->bias_allocation);
    free(c->query_lengths);
    free(c->key_lengths);
    free(c->query_positions);
    free(c->key_positions);
    free(c->global_tokens);
    free(c->alibi_slopes);
    memset(c, 0, sizeof *c);
}

void attention_case_run_reference(attention_case *c) {
    memset(&c->reference_error, 0, sizeof c->reference_error);
    c->reference_status = attn_reference_forward(
        &c->q.view, &c->k.view, &c->v.view, &c->options, &c->reference_out.view,
        c->with_lse ? &c->reference_lse.view : NULL, &c->reference_error);
}

attn_status attention_case_run_forward(attention_case *c, attn_kernel_choice kernel, int threads,
                                       attn_error *error) {
    attn_execution execution = c->execution;
    execution.kernel = kernel;
    execution.num_threads = threads;
    /* Fresh NaN outputs each run, so an element the forward forgets to write is caught. */
    for (int64_t n = 0; n < c->out.allocation_floats; ++n) c->out.allocation[n] = NAN;
    for (int64_t n = 0; n < c->lse.allocation_floats; ++n) c->lse.allocation[n] = NAN;
    return attn_forward(&c->q.view, &c->k.view, &c->v.view, &c->options, &c->out.view,
                        c->with_lse ? &c->lse.view : NULL, &execution, error);
}

/* |a - b| / (1 + |b|) with NaN == NaN and equal infinities as 0; mismatches as +inf. */
static double element_error(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0.0 : INFINITY;
    if (isinf(a) || isinf(b)) return a == b ? 0.0 : INFINITY;
    return fabs((double)a - (double)b) / (1.0 + fabs((double)b));
}

/* Worst element error between two equal-shape views; `worst_index` gets its logical index. */
static double worst_error(const attn_tensor *a, const attn_tensor *b, int64_t *worst_index) {
    int64_t index[4] = {0};
    double worst = 0;
    do {
        float x = ((const float *)a->data)[view_offset(a, index)];
        float y = ((const float *)b->data)[view_offset(b, index)];
        double e = element_error(x, y);
        if (e > worst || (isinf(e) && worst == 0)) {
            worst = e;
            memcpy(worst_index, index, sizeof index);
        }
    } while (next_index(a, index));
    return worst;
}

int attention_case_compare(const attention_case *c, attn_status status, double tolerance,
                           char *reason, size_t reason_size) {
    if (status != c->reference_status) {
        snprintf(reason, reason_size, "status %s but reference %s (%s)", attn_status_name(status),
                 attn_status_name(c->reference_status), c->reference_error.message);
        return 0;
    }
    if (status != ATTN_OK) return 1;
    int64_t index[4] = {0};
    double error = worst_error(&c->out.view, &c->reference_out.view, index);
    if (!(error <= tolerance)) {
        snprintf(reason, reason_size, "O[%lld,%lld,%lld,%lld] = %.9g, reference %.9g (error %.3g)",
                 (long long)index[0], (long long)index[1], (long long)index[2],
                 (long long)index[3], view_value(&c->out.view, index),
                 view_value(&c->reference_out.view, index), error);
        return 0;
    }
    if (c->with_lse) {
        error = worst_error(&c->lse.view, &c->reference_lse.view, index);
        if (!(error <= tolerance)) {
            snprintf(reason, reason_size, "LSE[%lld,%lld,%lld] = %.9g, reference %.9g (error %.3g)",
                     (long long)index[0], (long long)index[1], (long long)index[2],
                     view_value(&c->lse.view, index), view_value(&c->reference_lse.view, index),
                     error);
            return 0;
        }
    }
    return 1;
}

int64_t attention_case_output_count(const attention_case *c) {
    return c->batch * c->query_length * c->query_heads * (c->value_dim + 1);
}

void attention_case_copy_output(const attention_case *c, float *dense) {
    int64_t index[4] = {0}, n = 0;
    do dense[n++] = ((const float *)c->out.view.data)[view_offset(&c->out.view, index)];
    while (next_index(&c->out.view, index));
    memset(index, 0, sizeof index);
    do dense[n++] = c->with_lse ? ((const float *)c->lse.view.data)[view_offset(&c->lse.view, index)]
                                : 0.0f;
    while (next_index(&c->lse.view, index));
}

void attention_case_describe(const attention_case *c, char *text, size_t text_size) {
    const attn_options *o = &c->options;
    snprintf(text, text_size,
             "B=%lld Tq=%lld Tk=%lld Hq=%lld Hkv=%lld Dk=%lld Dv=%lld layouts q=%s k=%s v=%s "
             "out=%s lse=%s%s | scale=%s%g align=%d causal=%d window=(%lld,%lld) mask=%s "
             "bias=%s qlen=%s klen=%s%s positions=%s global=%lld pattern=%d(%lld,%lld,%lld,%lld) "
             "blocks=%s(%lldx%lld) alibi=%d%s softcap=%g empty_rows=%d tiles=%dx%d",
             (long long)c->batch, (long long)c->query_length, (long long)c->key_length,
             (long long)c->query_heads, (long long)c->kv_heads, (long long)c->key_dim,
             (long long)c->value_dim, layout_names[c->layout_codes[0]],
             layout_names[c->layout_codes[1]], layout_names[c->layout_codes[2]],
             layout_names[c->layout_codes[3]], layout_names[c->layout_codes[4]],
             c->with_lse ? "" : "(none)", o->custom_scale ? "" : "default/",
             o->custom_scale ? o->scale : 0.0f, (int)o->alignment, o->causal,
             (long long)o->window_left, (long long)o->window_right, o->mask ? "yes" : "no",
             o->bias ? "yes" : "no", o->query_lengths ? "yes" : "no",
             o->key_lengths ? "yes" : "no", c->poisoned_padding_keys ? "(NaN padding)" : "",
             o->query_positions ? "yes" : "no", (long long)o->global_token_count,
             (int)o->pattern, (long long)o->pattern_stride, (long long)o->pattern_summary,
             (long long)o->pattern_radius, (long long)o->pattern_dilation,
             o->block_layout ? "yes" : "no", (long long)o->block_q, (long long)o->block_k,
             o->alibi, o->alibi_slopes ? "(custom)" : "", o->softcap, (int)o->empty_rows,
             c->execution.tile_q, c->execution.tile_k);
}
