/*
 * kvcache_external.c — attn_forward_with_kvcache: attention against a KV cache whose memory
 * the caller owns (contiguous [B, S_max, Hkv, D] or a page pool [num_pages, page_size, Hkv, D]
 * with a block table), with the new tokens appended in place (RoPE on append) first —
 * flash_attn_with_kvcache's semantics.
 *
 * Order of work: every argument is checked (shapes, dtypes, capacities, block-table entries,
 * pages an append would write that another block uses, rotary tables, a query row the mask
 * leaves with no key under the ERROR policy) and every buffer allocated before the first
 * write into the cache or out, so a failing call leaves them untouched. Then the append (the
 * rows it overwrites saved first), the RoPE of the queries, and the attention itself, which
 * sizes its own working memory; if it fails (a memory limit: the prefill runs its longest
 * sequence first, so out is not written yet), the saved rows are put back, so the cache is
 * left as it was on that error too:
 *  - few queries per sequence (Tq <= DECODE_MOST_QUERIES): attn_decode's split-KV loop on a
 *    struct attn_kv_cache that describes the caller's memory with its own strides
 *    (cache_internal.h), so the kernels read the caller's pages in place and the result is
 *    bitwise that of a library-owned cache holding the same tokens;
 *  - more queries (a prefill chunk): the tiled forward on each sequence, its keys read as a
 *    strided view when the cache is contiguous float32, else gathered (and widened) into one
 *    float32 buffer sized for the longest sequence.
 * 8-bit storage (Q8, FP8) is quantised on append by the library cache's own rounding
 * (cache.c, kernels/quant.h), Q8 writing each new row's scale into k_scale / v_scale; its
 * scales are checked in kvcache_scales.c, and the memory an append writes (no two rows or
 * scales at one address, no new row inside it) in kvcache_layout.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "cache/kvcache_layout.h"
#include "cache/kvcache_scales.h"
#include "call/call.h"
#include "core/internal.h"
#include "core/parallel.h"
#include "kernels/half.h"
#include "kernels/quant.h"
#include "mask/mask.h"
#include "mask/sinks.h"
#include "varlen/varlen.h"

/* Largest Tq that runs on the decoding kernels. */
#define DECODE_MOST_QUERIES 16

/* The call's sizes, checked. */
typedef struct external_plan {
    const attn_tensor *q, *k_cache, *v_cache, *block_table;
    const attn_tensor *k_scale, *v_scale; /* Q8's row scales (NULL otherwise) */
    const attn_tensor *k_head, *v_head;   /* FP8's per-head scales (NULL otherwise: 1) */
    const attn_kv_append *append; /* NULL-free copy of the caller's (fields may be NULL) */
    const int32_t *cache_seqlens;
    int64_t B, Tq, Hq, Hkv, Dk, Dv, Tnew;
    int paged;
    int64_t page_size, page_count, max_pages, capacity;
    attn_dtype dtype;
    int64_t rotary_dim;      /* 0 = no RoPE */
    int rotate_each_query;   /* query i at cache_seqlens + i (causal / windowed) */
    int64_t longest;         /* the most tokens a sequence holds after the append */
} external_plan;

static int64_t table_entry(const external_plan *plan, int64_t b, int64_t block) {
    if (!plan->paged) return b;
    const attn_tensor *table = plan->block_table;
    return ((const int32_t *)table->data)[b * table->stride[0] + block * table->stride[1]];
}

/* Address of the stored row (head h, token t of sequence b) of a cache tensor. */
static void *stored_row(const external_plan *plan, const attn_tensor *cache, int64_t b,
                        int64_t t, int64_t h) {
    const int64_t page = table_entry(plan, b, t / plan->page_size), slot = t % plan->page_size;
    const int64_t element = page * cache->stride[0] + slot * cache->stride[1] + h * cache->stride[2];
    return (char *)cache->data + (size_t)element * attn_dtype_size(cache->dtype);
}

/* Q8: the scale of the stored row (head h, token t of sequence b) in k_scale / v_scale. */
static float *scale_slot(const external_plan *plan, const attn_tensor *scales, int64_t b,
                         int64_t t, int64_t h) {
    const int64_t page = table_entry(plan, b, t / plan->page_size), slot = t % plan->page_size;
    return (float *)scales->data + page * scales->stride[0] + slot * scales->stride[1] +
           h * scales->stride[2];
}

/* The dtypes of queries and outputs (and of 16/32-bit storage). */
static int operand_dtype(attn_dtype dtype) {
    return dtype == ATTN_DTYPE_F32 || dtype == ATTN_DTYPE_BF16 || dtype == ATTN_DTYPE_F16;
}

static void load_row(attn_dtype dtype, const void *source, int64_t stride, int64_t count,
                     float *row) {
    for (int64_t e = 0; e < count; ++e) {
        if (dtype == ATTN_DTYPE_F32) row[e] = ((const float *)source)[e * stride];
        else if (dtype == ATTN_DTYPE_BF16)
            row[e] = attn_bf16_to_float(((const uint16_t *)source)[e * stride]);
        else row[e] = attn_f16_to_float(((const uint16_t *)source)[e * stride]);
    }
}

/* count floats into an operand dtype (F32, BF16, F16) at target, round to nearest even. */
static void store_row(attn_dtype dtype, const float *row, int64_t count, void *target) {
    float unused;
    attn_cache_store_elements(dtype, row, count, target, &unused, 1.0f);
}

/* count contiguous stored elements of dtype `from` at source (8-bit: read back as
 * head_scale * row_scale * q) into the operand dtype `to` at target, through float32 in
 * pieces (exact between equal types and from 16-bit to float32). */
static void convert_row(attn_dtype from, const void *source, float row_scale, float head_scale,
                        attn_dtype to, int64_t count, void *target) {
    if (from == to) {
        memcpy(target, source, (size_t)count * attn_dtype_size(from));
        return;
    }
    float piece[256];
    for (int64_t first = 0; first < count; first += 256) {
        const int64_t n = count - first < 256 ? count - first : 256;
        attn_cache_load_elements(from, (const char *)source + (size_t)first * attn_dtype_size(from),
                                 n, piece, row_scale, head_scale);
        store_row(to, piece, n, (char *)target + (size_t)first * attn_dtype_size(to));
    }
}

/* RoPE of x[0 .. rotary_dim) at `position` from the tables (row `position`, rotary_dim / 2
 * columns): each pair (a, b) becomes (a cos - b sin, b cos + a sin). */
static void rotate(float *x, const external_plan *plan, int64_t position) {
    const attn_tensor *cos_table = plan->append->rotary_cos, *sin_table = plan->append->rotary_sin;
    const int64_t half = plan->rotary_dim / 2;
    const int interleaved = plan->append->rotary_layout == ATTN_ROPE_INTERLEAVED;
    for (int64_t j = 0; j < half; ++j) {
        const float c = ((const float *)cos_table->data)[position * cos_table->stride[0] +
                                                         j * cos_table->stride[1]];
        const float s = ((const float *)sin_table->data)[position * sin_table->stride[0] +
                                                         j * sin_table->stride[1]];
        const int64_t first = interleaved ? 2 * j : j, second = interleaved ? 2 * j + 1 : j + half;
        const float a = x[first], b = x[second];
        x[first] = a * c - b * s;
        x[second] = b * c + a * s;
    }
}

/* A rank-4 tensor's shape against expected (-1 = any), naming the layout. */
static attn_status check_shape(const attn_tensor *t, const char *name, const int64_t *expected,
                               int rank, const char *layout, attn_error *error) {
    for (int d = 0; d < rank; ++d)
        if (expected[d] >= 0 && t->shape[d] != expected[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "%s.shape[%d] = %lld: expected %lld (%s)", name, d,
                             (long long)t->shape[d], (long long)expected[d], layout);
    return ATTN_OK;
}

static attn_status check_cache_tensor(const attn_tensor *t, const char *name, attn_error *error) {
    if (t == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache->%s is NULL", name);
    if (!operand_dtype(t->dtype) && !attn_dtype_is_quantized(t->dtype))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "cache->%s.dtype = %s: expected float32, bfloat16, float16, int8 (Q8), "
                         "float8_e4m3 or float8_e5m2",
                         name, attn_dtype_name(t->dtype));
    attn_status status = attn_check_tensor(t, name, t->dtype, 4, error);
    if (status != ATTN_OK) return status;
    if (t->stride[3] != 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "cache->%s.stride[3] = %lld: the head dimension must be contiguous (1)",
                         name, (long long)t->stride[3]);
    for (int d = 0; d < 3; ++d)
        if (t->stride[d] < 0)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "cache->%s.stride[%d] = %lld: must be >= 0", name, d,
                             (long long)t->stride[d]);
    return ATTN_OK;
}

static attn_status check_options(const attn_options *options, attn_error *error) {
    const char *name = attn_options_padded_batch_field(options);
    if (name != NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.%s is set: attn_forward_with_kvcache takes its lengths and "
                         "positions from cache_seqlens and accepts no padded-batch options",
                         name);
    /* (decoding refuses dropout, and a prefill's sequences would all draw batch row 0's mask) */
    if (options->dropout_p != 0.0f)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.dropout_p = %.9g: attn_forward_with_kvcache applies no dropout "
                         "(attn_forward and attn_varlen_forward do)",
                         (double)options->dropout_p);
    return ATTN_OK;
}

/* Tensors, sizes and the options; fills the plan. Writes nothing. */
/* q, the view (version, dtypes, shapes, block table, scales, capacity): fills the plan's
 * sizes and the operand dtype (*operand). */
static attn_status check_cache(external_plan *plan, const attn_tensor *q, const attn_kv_cache_view *cache,
                               attn_dtype *operand, attn_error *error) {
    /* q and out: F32, BF16 or F16, one dtype (the forward's and decoding's rule). */
    *operand = q != NULL && operand_dtype(q->dtype) ? q->dtype : ATTN_DTYPE_F32;
    const attn_dtype operand_type = *operand;
    attn_status status = attn_check_tensor(q, "q", operand_type, 4, error);
    if (status != ATTN_OK) return status;
    if (cache == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache is NULL");
    if (cache->version != 0 && cache->version != 1 && cache->version != ATTN_KV_CACHE_VIEW_VERSION)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "cache->version = %d: expected 0, 1 or %d", cache->version,
                         ATTN_KV_CACHE_VIEW_VERSION);
    if ((status = check_cache_tensor(cache->k_cache, "k_cache", error)) != ATTN_OK ||
        (status = check_cache_tensor(cache->v_cache, "v_cache", error)) != ATTN_OK)
        return status;
    const attn_tensor *kc = cache->k_cache, *vc = cache->v_cache;
    if (vc->dtype != kc->dtype)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "cache->v_cache.dtype = %s: must equal k_cache's %s",
                         attn_dtype_name(vc->dtype), attn_dtype_name(kc->dtype));
    plan->q = q, plan->k_cache = kc, plan->v_cache = vc, plan->block_table = cache->block_table;
    plan->B = q->shape[0], plan->Tq = q->shape[1], plan->Hq = q->shape[2], plan->Dk = q->shape[3];
    plan->Hkv = kc->shape[2], plan->Dv = vc->shape[3], plan->dtype = kc->dtype;
    plan->paged = cache->block_table != NULL;
    const char *layout = plan->paged ? "[num_pages, page_size, Hkv, Dk]" : "[B, S_max, Hkv, Dk]";
    const int64_t expected_k[4] = {plan->paged ? -1 : plan->B, -1, -1, plan->Dk};
    if ((status = check_shape(kc, "cache->k_cache", expected_k, 4, layout, error)) != ATTN_OK)
        return status;
    const int64_t expected_v[4] = {kc->shape[0], kc->shape[1], kc->shape[2], -1};
    if ((status = check_shape(vc, "cache->v_cache", expected_v, 4,
                              plan->paged ? "[num_pages, page_size, Hkv, Dv]"
                                          : "[B, S_max, Hkv, Dv]",
                              error)) != ATTN_OK)
        return status;
    if (plan->Hq % plan->Hkv != 0)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "q.shape[2] (Hq) = %lld: must be a multiple of the cache's Hkv = %lld",
                         (long long)plan->Hq, (long long)plan->Hkv);
    plan->page_size = kc->shape[1];
    plan->page_count = plan->paged ? kc->shape[0] : plan->B;
    plan->max_pages = 1;
    if (plan->paged) {
        if ((status = attn_check_tensor(cache->block_table, "cache->block_table", ATTN_DTYPE_I32, 2,
                                        error)) != ATTN_OK)
            return status;
        const int64_t expected[2] = {plan->B, -1};
        if ((status = check_shape(cache->block_table, "cache->block_table", expected, 2,
                                  "[B, max_pages]", error)) != ATTN_OK)
            return status;
        plan->max_pages = cache->block_table->shape[1];
    }
    /* 8-bit scales (a version-1 view has no scale fields: they are not read). */
    const int has_scales = cache->version != 1;
    const int64_t scale_rows[3] = {plan->page_count, plan->page_size, plan->Hkv};
    if ((status = attn_kv_view_check_scales(cache, has_scales, plan->dtype, scale_rows,
                                            plan->paged ? "[num_pages, page_size, Hkv]"
                                                        : "[B, S_max, Hkv]",
                                            error)) != ATTN_OK)
        return status;
    const int fp8 = attn_dtype_is_quantized(plan->dtype) && plan->dtype != ATTN_DTYPE_Q8;
    plan->k_scale = plan->dtype == ATTN_DTYPE_Q8 ? cache->k_scale : NULL;
    plan->v_scale = plan->dtype == ATTN_DTYPE_Q8 ? cache->v_scale : NULL;
    plan->k_head = fp8 ? cache->k_scale : NULL;
    plan->v_head = fp8 ? cache->v_scale : NULL;
    if (!attn_mul_i64(plan->max_pages, plan->page_size, &plan->capacity))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "cache->k_cache.shape[1] (page_size) = %lld: times max_pages = %lld "
                         "overflows int64",
                         (long long)plan->page_size, (long long)plan->max_pages);
    if (plan->page_count > INT32_MAX)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "cache->k_cache.shape[0] = %lld pages: at most %d are addressable",
                         (long long)plan->page_count, INT32_MAX);
    return ATTN_OK;
}

/* out [B, Tq, Hq, Dv] of the operand dtype, lse [B, Hq, Tq] float32 (optional). */
static attn_status check_outputs(const external_plan *plan, attn_dtype operand, const attn_tensor *out,
                                 const attn_tensor *lse, attn_error *error) {
    attn_status status;
    if ((status = attn_check_tensor(out, "out", operand, 4, error)) != ATTN_OK) return status;
    const int64_t expected_out[4] = {plan->B, plan->Tq, plan->Hq, plan->Dv};
    if ((status = check_shape(out, "out", expected_out, 4, "[B, Tq, Hq, Dv]", error)) != ATTN_OK)
        return status;
    if (lse != NULL) {
        if ((status = attn_check_tensor(lse, "lse", ATTN_DTYPE_F32, 3, error)) != ATTN_OK)
            return status;
        const int64_t expected[3] = {plan->B, plan->Hq, plan->Tq};
        if ((status = check_shape(lse, "lse", expected, 3, "[B, Hq, Tq]", error)) != ATTN_OK)
            return status;
    }
    return ATTN_OK;
}

/* The append's new rows (NULL-free copy in plan->append): dtypes, shapes, finite values,
 * and where they are written. */
static attn_status check_append(external_plan *plan, const attn_kv_append *append, attn_error *error) {
    attn_status status;
    const attn_tensor *kc = plan->k_cache, *vc = plan->v_cache;
    static const attn_kv_append none = {NULL, NULL, NULL, NULL, ATTN_ROPE_HALF};
    plan->append = append != NULL ? append : &none;
    append = plan->append;
    if ((append->k_new == NULL) != (append->v_new == NULL))
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "append->%s is NULL but %s is given",
                         append->k_new == NULL ? "k_new" : "v_new",
                         append->k_new == NULL ? "v_new" : "k_new");
    if (append->k_new != NULL) {
        const attn_tensor *pair[2] = {append->k_new, append->v_new};
        const char *names[2] = {"append->k_new", "append->v_new"};
        for (int n = 0; n < 2; ++n) {
            const attn_dtype dtype = pair[n]->dtype;
            if (attn_dtype_is_quantized(plan->dtype) ? !operand_dtype(dtype)
                                                     : dtype != ATTN_DTYPE_F32 && dtype != plan->dtype)
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "%s.dtype = %s: expected %s", names[n], attn_dtype_name(dtype),
                                 attn_dtype_is_quantized(plan->dtype)
                                     ? "float32, bfloat16 or float16 (quantised on append)"
                                     : "float32 or the cache's dtype");
            if ((status = attn_check_tensor(pair[n], names[n], dtype, 4, error)) != ATTN_OK)
                return status;
        }
        plan->Tnew = append->k_new->shape[1];
        const int64_t expected_kn[4] = {plan->B, -1, plan->Hkv, plan->Dk};
        const int64_t expected_vn[4] = {plan->B, plan->Tnew, plan->Hkv, plan->Dv};
        if ((status = check_shape(append->k_new, "append->k_new", expected_kn, 4,
                                  "[B, Tnew, Hkv, Dk]", error)) != ATTN_OK ||
            (status = check_shape(append->v_new, "append->v_new", expected_vn, 4,
                                  "[B, Tnew, Hkv, Dv]", error)) != ATTN_OK ||
            (status = attn_kv_check_finite_input(append->k_new, "append->k_new", plan->dtype,
                                                 error)) != ATTN_OK ||
            (status = attn_kv_check_finite_input(append->v_new, "append->v_new", plan->dtype,
                                                 error)) != ATTN_OK)
            return status;
        /* Where the append writes, no two rows (or row scales) may share an address, and
         * the new rows may not lie there. */
        if (plan->Tnew > 0 &&
            (status = attn_kv_check_append_layout(kc, vc, plan->k_scale, plan->v_scale,
                                                  append->k_new, append->v_new, error)) != ATTN_OK)
            return status;
    }
    return ATTN_OK;
}

/* cache_seqlens: held tokens >= 0, and with the append within the capacity. */
static attn_status check_lengths(external_plan *plan, const attn_kv_cache_view *cache, attn_error *error) {
    if (cache->cache_seqlens == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache->cache_seqlens is NULL");
    plan->cache_seqlens = cache->cache_seqlens;
    plan->longest = 0;
    for (int64_t b = 0; b < plan->B; ++b) {
        const int64_t held = cache->cache_seqlens[b], total = held + plan->Tnew;
        if (held < 0)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "cache->cache_seqlens[%lld] = %lld: must be >= 0", (long long)b,
                             (long long)held);
        if (total > plan->capacity || total > INT32_MAX)
            return attn_fail(error, ATTN_ERROR_CAPACITY,
                             "sequence %lld: cache_seqlens[%lld] = %lld + %lld new tokens = %lld "
                             "exceeds the cache's capacity of %lld tokens (%s)",
                             (long long)b, (long long)b, (long long)held, (long long)plan->Tnew,
                             (long long)total, (long long)plan->capacity,
                             plan->paged ? "max_pages x page_size" : "S_max");
        if (total > plan->longest) plan->longest = total;
    }
    return ATTN_OK;
}

/* Whether query row i of a one-sequence problem has an allowed key (the mask without
 * additive terms; the cache's options make it independent of the head). */
static int row_has_key(const attn_mask_context *context, int64_t i) {
    int64_t begin, end;
    if (attn_mask_is_band(context->options)) {
        attn_mask_band_row(context, 0, i, &begin, &end);
        return begin < end;
    }
    attn_mask_candidate_keys(context, 0, i, i + 1, &begin, &end);
    for (int64_t j = begin; j < end; ++j)
        if (attn_mask_allowed(context, 0, 0, i, j)) return 1;
    return 0;
}

/* Under ATTN_EMPTY_ROWS_ERROR, the first query row (in (b, h, i) order) that the mask leaves
 * with no key, found here, before the append and before out is written: the attention
 * itself would report it only after writing the rows of the sequences before it. */
static attn_status check_empty_rows(const external_plan *plan, const attn_options *options,
                                    const attn_problem *sizes, attn_error *error) {
    for (int64_t b = 0; b < plan->B; ++b) {
        const int64_t total = plan->cache_seqlens[b] + plan->Tnew;
        if (total == 0)
            return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                             "query row (b = %lld, h = 0, i = 0) has no allowed key: the "
                             "sequence holds no token (cache_seqlens[%lld] = 0 and nothing "
                             "appended)",
                             (long long)b, (long long)b);
        attn_problem problem = *sizes; /* sequence b alone, as the attention runs it */
        problem.batch = 1, problem.key_length = total;
        attn_mask_context context;
        attn_status status = attn_mask_context_init(&context, options, &problem, error);
        if (status != ATTN_OK) return status;
        int64_t empty = -1;
        for (int64_t i = 0; i < plan->Tq && empty < 0; ++i)
            if (!row_has_key(&context, i)) empty = i;
        attn_mask_context_free(&context);
        if (empty >= 0)
            return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                             "query row (b = %lld, h = 0, i = %lld) has no allowed key among the "
                             "sequence's %lld tokens (options.empty_rows = ERROR; use ZERO or "
                             "NAN to accept it)",
                             (long long)b, (long long)empty, (long long)total);
    }
    return ATTN_OK;
}

static attn_status check_attention(const external_plan *plan, const attn_options *options,
                                   attn_error *error) {
    attn_status status;
    /* The options as the attention will check them (scale, soft-cap, window, alignment,
     * pattern, ALiBi slopes, empty-row policy), here: the append writes before it runs. */
    attn_problem problem;
    memset(&problem, 0, sizeof problem);
    problem.batch = plan->B, problem.query_length = plan->Tq;
    problem.key_length = plan->longest > 0 ? plan->longest : 1;
    problem.query_heads = plan->Hq, problem.kv_heads = plan->Hkv;
    problem.group_size = plan->Hq / plan->Hkv;
    problem.key_dim = plan->Dk, problem.value_dim = plan->Dv;
    problem.scale = attn_effective_scale(options, plan->Dk);
    if ((status = attn_validate_options(options, &problem, error)) != ATTN_OK) return status;
    /* The attention's other refusals that do not depend on the values: head dims, and a
     * sequence left with no token under the error policy. */
    const int64_t most_dim = (int64_t)1 << 20;
    if (plan->Dk > most_dim || plan->Dv > most_dim)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "%s = %lld: head dims above %lld are not supported",
                         plan->Dk > most_dim ? "q.shape[3] (Dk)" : "cache->v_cache.shape[3] (Dv)",
                         (long long)(plan->Dk > most_dim ? plan->Dk : plan->Dv),
                         (long long)most_dim);
    if (options->empty_rows != ATTN_EMPTY_ROWS_ERROR) return ATTN_OK;
    return check_empty_rows(plan, options, &problem, error);
}

/* The rotary tables: both or neither, their shapes, layout and positions. */
static attn_status check_rotary(external_plan *plan, const attn_options *options, attn_error *error) {
    attn_status status;
    const attn_kv_append *append = plan->append;
    if ((append->rotary_cos == NULL) != (append->rotary_sin == NULL))
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "append->%s is NULL but %s is given",
                         append->rotary_cos == NULL ? "rotary_cos" : "rotary_sin",
                         append->rotary_cos == NULL ? "rotary_sin" : "rotary_cos");
    if (append->rotary_cos != NULL) {
        if ((status = attn_check_tensor(append->rotary_cos, "append->rotary_cos", ATTN_DTYPE_F32,
                                        2, error)) != ATTN_OK ||
            (status = attn_check_tensor(append->rotary_sin, "append->rotary_sin", ATTN_DTYPE_F32,
                                        2, error)) != ATTN_OK ||
            (status = check_shape(append->rotary_sin, "append->rotary_sin",
                                  append->rotary_cos->shape, 2, "rotary_cos's shape",
                                  error)) != ATTN_OK)
            return status;
        if (append->rotary_layout != ATTN_ROPE_HALF && append->rotary_layout != ATTN_ROPE_INTERLEAVED)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "append->rotary_layout = %d: unknown", (int)append->rotary_layout);
        plan->rotary_dim = 2 * append->rotary_cos->shape[1];
        if (plan->rotary_dim > plan->Dk)
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "append->rotary_cos.shape[1] = %lld: rotary_dim = %lld exceeds Dk = "
                             "%lld",
                             (long long)append->rotary_cos->shape[1], (long long)plan->rotary_dim,
                             (long long)plan->Dk);
        plan->rotate_each_query = options->causal || options->window_left >= 0 ||
                                  options->window_right >= 0;
        const int64_t positions = append->rotary_cos->shape[0];
        for (int64_t b = 0; b < plan->B; ++b) {
            const int64_t held = plan->cache_seqlens[b];
            int64_t last = held + plan->Tnew - 1; /* the last key position rotated */
            const int64_t last_query = plan->rotate_each_query ? held + plan->Tq - 1 : held;
            if (last_query > last) last = last_query;
            if (last >= positions)
                return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                                 "append->rotary_cos.shape[0] = %lld positions: sequence %lld "
                                 "needs position %lld",
                                 (long long)positions, (long long)b, (long long)last);
        }
    }
    return ATTN_OK;
}

static attn_status check_no_aliasing(const external_plan *plan, const attn_options *options,
                                     const attn_tensor *out, const attn_tensor *lse,
                                     attn_error *error) {
    const attn_kv_append *append = plan->append;
    /* No output may share memory with the query, the cache (which the call reads, and an
     * append writes), its scales and tables, the new rows or the rotary tables, nor out with
     * lse (call.h). */
    const int64_t batch[1] = {plan->B};
    const attn_tensor seqlens = attn_tensor_contiguous((void *)plan->cache_seqlens, ATTN_DTYPE_I32,
                                                       1, batch);
    const attn_call_tensor inputs[11] = {
        {plan->q, "q", NULL},
        {plan->k_cache, "cache->k_cache", NULL},
        {plan->v_cache, "cache->v_cache", NULL},
        {plan->k_scale != NULL ? plan->k_scale : plan->k_head, "cache->k_scale", NULL},
        {plan->v_scale != NULL ? plan->v_scale : plan->v_head, "cache->v_scale", NULL},
        {plan->block_table, "cache->block_table", NULL},
        {&seqlens, "cache->cache_seqlens", NULL},
        {append->k_new, "append->k_new", NULL},
        {append->v_new, "append->v_new", NULL},
        {append->rotary_cos, "append->rotary_cos", NULL},
        {append->rotary_sin, "append->rotary_sin", NULL}};
    const attn_call_tensor outputs[2] = {{out, "out", NULL}, {lse, "lse", NULL}};
    attn_problem sizes;
    memset(&sizes, 0, sizeof sizes);
    sizes.batch = plan->B, sizes.query_length = plan->Tq, sizes.query_heads = plan->Hq;
    return attn_call_check_aliasing(outputs, 2, inputs, 11, options, &sizes, error);
}

static attn_status check_arguments(external_plan *plan, const attn_tensor *q,
                                   const attn_kv_cache_view *cache, const attn_kv_append *append,
                                   const attn_options *options, const attn_tensor *out,
                                   const attn_tensor *lse, attn_error *error) {
    attn_dtype operand;
    attn_status status;
    if ((status = check_cache(plan, q, cache, &operand, error)) != ATTN_OK ||
        (status = check_outputs(plan, operand, out, lse, error)) != ATTN_OK ||
        (status = check_options(options, error)) != ATTN_OK ||
        (status = check_append(plan, append, error)) != ATTN_OK ||
        (status = check_lengths(plan, cache, error)) != ATTN_OK ||
        (status = check_attention(plan, options, error)) != ATTN_OK ||
        (status = check_rotary(plan, options, error)) != ATTN_OK)
        return status;
    return check_no_aliasing(plan, options, out, lse, error);
}

/* ceil(tokens / page_size), without forming tokens + page_size - 1 (a page size may be near
 * INT64_MAX: a zero token stride lets any shape[1] pass the tensor check). */
static int64_t blocks_for(int64_t tokens, int64_t page_size) {
    return tokens / page_size + (tokens % page_size != 0);
}

/* Block-table entries of every block a sequence uses, and pages an append writes that any
 * other block (of another sequence, or of the same one) also uses. owner: int64[page_count]
 * scratch. Writes nothing but the scratch. */
static attn_status check_block_table(const external_plan *plan, int64_t *owner, attn_error *error) {
    if (!plan->paged) return ATTN_OK;
    const int64_t ps = plan->page_size;
    for (int64_t b = 0; b < plan->B; ++b) {
        const int64_t blocks = blocks_for(plan->cache_seqlens[b] + plan->Tnew, ps);
        for (int64_t block = 0; block < blocks; ++block) {
            const int64_t page = table_entry(plan, b, block);
            if (page < 0 || page >= plan->page_count)
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "cache->block_table[%lld, %lld] = %lld: outside the pool of %lld "
                                 "pages (sequence %lld uses %lld blocks)",
                                 (long long)b, (long long)block, (long long)page,
                                 (long long)plan->page_count, (long long)b, (long long)blocks);
        }
    }
    if (plan->Tnew == 0) return ATTN_OK;
    for (int64_t p = 0; p < plan->page_count; ++p) owner[p] = -1;
    /* Pages written by the appends: one (sequence, block) each. */
    for (int64_t b = 0; b < plan->B; ++b) {
        const int64_t first = plan->cache_seqlens[b] / ps;
        const int64_t end = blocks_for(plan->cache_seqlens[b] + plan->Tnew, ps);
        for (int64_t block = first; block < end; ++block) {
            const int64_t page = table_entry(plan, b, block);
            if (owner[page] >= 0)
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "cache->block_table[%lld, %lld] = %lld: the append of sequence "
                                 "%lld writes page %lld, which block %lld of sequence %lld "
                                 "also writes",
                                 (long long)b, (long long)block, (long long)page, (long long)b,
                                 (long long)page, (long long)(owner[page] % plan->max_pages),
                                 (long long)(owner[page] / plan->max_pages));
            owner[page] = b * plan->max_pages + block;
        }
    }
    /* Any other block that uses a written page would see (or clobber) the new tokens. */
    for (int64_t b = 0; b < plan->B; ++b) {
        const int64_t blocks = blocks_for(plan->cache_seqlens[b] + plan->Tnew, ps);
        for (int64_t block = 0; block < blocks; ++block) {
            const int64_t page = table_entry(plan, b, block);
            if (owner[page] >= 0 && owner[page] != b * plan->max_pages + block)
                return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                                 "cache->block_table[%lld, %lld] = %lld: page %lld is written by "
                                 "the append of sequence %lld (block %lld) and also used by "
                                 "sequence %lld",
                                 (long long)b, (long long)block, (long long)page, (long long)page,
                                 (long long)(owner[page] / plan->max_pages),
                                 (long long)(owner[page] % plan->max_pages), (long long)b);
        }
    }
    return ATTN_OK;
}

/* Writes the new tokens (RoPE'd keys) at cache_seqlens[b] + t. */
static void append_tokens(const external_plan *plan, float *rows) {
    const attn_kv_append *append = plan->append;
    for (int64_t b = 0; b < plan->B; ++b)
        for (int64_t t = 0; t < plan->Tnew; ++t) {
            const int64_t position = plan->cache_seqlens[b] + t;
            for (int64_t h = 0; h < plan->Hkv; ++h) {
                const attn_tensor *kn = append->k_new, *vn = append->v_new;
                const size_t ks = attn_dtype_size(kn->dtype), vs = attn_dtype_size(vn->dtype);
                /* signed offsets: the new rows may have negative strides */
                const char *key = (const char *)kn->data +
                                  (ptrdiff_t)(b * kn->stride[0] + t * kn->stride[1] +
                                              h * kn->stride[2]) * (ptrdiff_t)ks;
                const char *value = (const char *)vn->data +
                                    (ptrdiff_t)(b * vn->stride[0] + t * vn->stride[1] +
                                                h * vn->stride[2]) * (ptrdiff_t)vs;
                float row_scale; /* Q8: written beside the row */
                load_row(kn->dtype, key, kn->stride[3], plan->Dk, rows);
                if (plan->rotary_dim > 0) rotate(rows, plan, position);
                attn_cache_store_elements(plan->dtype, rows, plan->Dk,
                                          stored_row(plan, plan->k_cache, b, position, h),
                                          &row_scale, attn_kv_view_head_scale(plan->k_head, h));
                if (plan->dtype == ATTN_DTYPE_Q8)
                    *scale_slot(plan, plan->k_scale, b, position, h) = row_scale;
                load_row(vn->dtype, value, vn->stride[3], plan->Dv, rows);
                attn_cache_store_elements(plan->dtype, rows, plan->Dv,
                                          stored_row(plan, plan->v_cache, b, position, h),
                                          &row_scale, attn_kv_view_head_scale(plan->v_head, h));
                if (plan->dtype == ATTN_DTYPE_Q8)
                    *scale_slot(plan, plan->v_scale, b, position, h) = row_scale;
            }
        }
}

/* Bytes of the stored rows (and Q8 row scales) an append overwrites: saved before it, put
 * back when the attention after it fails. */
static bool overwritten_bytes(const external_plan *plan, size_t *bytes) {
    int64_t rows;
    size_t row_bytes;
    return attn_mul_i64(plan->B * plan->Tnew, plan->Hkv, &rows) &&
           attn_mul_size((size_t)(plan->Dk + plan->Dv), attn_dtype_size(plan->dtype),
                         &row_bytes) &&
           attn_add_size(row_bytes, plan->dtype == ATTN_DTYPE_Q8 ? 2 * sizeof(float) : 0,
                         &row_bytes) &&
           attn_mul_size((size_t)rows, row_bytes, bytes);
}

/* Copies the stored rows (and Q8 scales) at cache_seqlens[b] + t, t < Tnew, to `saved`
 * (restore = 0), or back from it (restore = 1), in append_tokens' order. */
static void swap_overwritten(const external_plan *plan, char *saved, int restore) {
    const size_t size = attn_dtype_size(plan->dtype);
    const size_t key_bytes = (size_t)plan->Dk * size, value_bytes = (size_t)plan->Dv * size;
    for (int64_t b = 0; b < plan->B; ++b)
        for (int64_t t = 0; t < plan->Tnew; ++t) {
            const int64_t position = plan->cache_seqlens[b] + t;
            for (int64_t h = 0; h < plan->Hkv; ++h) {
                void *places[4] = {stored_row(plan, plan->k_cache, b, position, h),
                                   stored_row(plan, plan->v_cache, b, position, h), NULL, NULL};
                size_t sizes[4] = {key_bytes, value_bytes, sizeof(float), sizeof(float)};
                if (plan->dtype == ATTN_DTYPE_Q8) {
                    places[2] = scale_slot(plan, plan->k_scale, b, position, h);
                    places[3] = scale_slot(plan, plan->v_scale, b, position, h);
                }
                for (int n = 0; n < 4 && places[n] != NULL; ++n) {
                    if (restore) memcpy(places[n], saved, sizes[n]);
                    else memcpy(saved, places[n], sizes[n]);
                    saved += sizes[n];
                }
            }
        }
}

/* Fills rows of a sequence with no key by the empty-row policy. */
static attn_status empty_sequence(const attn_options *options, int64_t b, const attn_tensor *out,
                                  const attn_tensor *lse, attn_error *error) {
    if (options->empty_rows == ATTN_EMPTY_ROWS_ERROR)
        return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                         "query row (b = %lld, h = 0, i = 0) has no allowed key: the sequence "
                         "holds no token (cache_seqlens[%lld] = 0 and nothing appended)",
                         (long long)b, (long long)b);
    const int nan = options->empty_rows == ATTN_EMPTY_ROWS_NAN;
    const float fill = nan ? NAN : 0.0f;
    const size_t size = attn_dtype_size(out->dtype);
    for (int64_t i = 0; i < out->shape[1]; ++i)
        for (int64_t h = 0; h < out->shape[2]; ++h) {
            for (int64_t e = 0; e < out->shape[3]; ++e)
                store_row(out->dtype, &fill, 1,
                          (char *)out->data + (ptrdiff_t)(b * out->stride[0] + i * out->stride[1] +
                                                          h * out->stride[2] + e * out->stride[3]) *
                                                  (ptrdiff_t)size);
            if (lse != NULL) /* (ZERO: the head's sink takes the whole row, mask/sinks.h) */
                *attn_f32_at3(lse, b, h, i) = nan ? NAN : attn_sink_logit(options, h);
        }
    return ATTN_OK;
}

/* A rank-4 view of batch row b of a [B, ...] tensor as a batch of one. */
static attn_tensor batch_row(const attn_tensor *t, int64_t b) {
    attn_tensor view = *t;
    view.data = (char *)t->data + (ptrdiff_t)(b * t->stride[0]) * (ptrdiff_t)attn_dtype_size(t->dtype);
    view.shape[0] = 1;
    return view;
}

/* The rows of sequence b widened into contiguous [token, head, D] K and V operands. */
typedef struct gather_region {
    const external_plan *plan;
    int64_t b;
    attn_dtype operand;
    char *keys, *values;
} gather_region;

static void gather_tokens(void *context, int64_t first, int64_t end, int worker) {
    const gather_region *region = context;
    const external_plan *plan = region->plan;
    const int64_t b = region->b, Hkv = plan->Hkv, Dk = plan->Dk, Dv = plan->Dv;
    const size_t operand_size = attn_dtype_size(region->operand);
    const int q8 = plan->dtype == ATTN_DTYPE_Q8;
    for (int64_t t = first; t < end; ++t)
        for (int64_t h = 0; h < Hkv; ++h) {
            convert_row(plan->dtype, stored_row(plan, plan->k_cache, b, t, h),
                        q8 ? *scale_slot(plan, plan->k_scale, b, t, h) : 1.0f,
                        attn_kv_view_head_scale(plan->k_head, h), region->operand, Dk,
                        region->keys + (size_t)((t * Hkv + h) * Dk) * operand_size);
            convert_row(plan->dtype, stored_row(plan, plan->v_cache, b, t, h),
                        q8 ? *scale_slot(plan, plan->v_scale, b, t, h) : 1.0f,
                        attn_kv_view_head_scale(plan->v_head, h), region->operand, Dv,
                        region->values + (size_t)((t * Hkv + h) * Dv) * operand_size);
        }
}

/* The prefill path: attn_forward per sequence on its tokens [0, total). The longest sequence
 * runs first: its working memory is the largest, so a memory limit stops the call before any
 * row of out is written (empty rows were refused by check_empty_rows). */
static attn_status prefill(const external_plan *plan, const attn_tensor *q,
                           const attn_options *options, attn_tensor *out, attn_tensor *lse,
                           const attn_execution *execution, void *gathered, attn_error *error) {
    const attn_dtype operand = q->dtype; /* K/V go to the forward in the queries' dtype */
    const size_t operand_size = attn_dtype_size(operand);
    const int direct = !plan->paged && plan->dtype == operand;
    int64_t longest = 0;
    for (int64_t b = 1; b < plan->B; ++b)
        if (plan->cache_seqlens[b] > plan->cache_seqlens[longest]) longest = b;
    for (int64_t n = 0; n < plan->B; ++n) {
        /* longest, then the others in order */
        const int64_t b = n == 0 ? longest : n <= longest ? n - 1 : n;
        const int64_t total = plan->cache_seqlens[b] + plan->Tnew;
        attn_status status;
        if (total == 0) {
            if ((status = empty_sequence(options, b, out, lse, error)) != ATTN_OK) return status;
            continue;
        }
        attn_tensor k, v;
        if (direct) {
            k = batch_row(plan->k_cache, b), v = batch_row(plan->v_cache, b);
            k.shape[1] = v.shape[1] = total;
        } else {
            const int64_t Hkv = plan->Hkv, Dk = plan->Dk, Dv = plan->Dv;
            char *keys = (char *)gathered;
            char *values = keys + (size_t)(plan->longest * Hkv * Dk) * operand_size;
            gather_region region = {plan, b, operand, keys, values};
            attn_parallel_for(attn_thread_count(execution != NULL ? execution->num_threads : 0),
                              total, 64, gather_tokens, &region);
            const int64_t kshape[4] = {1, total, Hkv, Dk}, vshape[4] = {1, total, Hkv, Dv};
            k = attn_tensor_contiguous(keys, operand, 4, kshape);
            v = attn_tensor_contiguous(values, operand, 4, vshape);
        }
        attn_tensor qb = batch_row(q, b), ob = batch_row(out, b), lb;
        if (lse != NULL) lb = batch_row(lse, b);
        status = attn_forward(&qb, &k, &v, options, &ob, lse != NULL ? &lb : NULL, execution, error);
        if (status != ATTN_OK) {
            if (error != NULL) {
                attn_error named = *error;
                attn_fail(error, status, "sequence %lld: %.480s", (long long)b, named.message);
            }
            return status;
        }
    }
    return ATTN_OK;
}

/* The decoding path: attn_decode on a struct attn_kv_cache over the caller's memory. */
static attn_status decode(const external_plan *plan, const attn_tensor *q,
                          const attn_options *options, attn_tensor *out, attn_tensor *lse,
                          const attn_execution *execution, int32_t *tables, int64_t *lengths,
                          float *head_factors, attn_error *error) {
    /* head_factors [2][Hkv]: the keys' and the values' per-head scales (1 except FP8) */
    struct attn_kv_cache view;
    memset(&view, 0, sizeof view);
    view.config = attn_kv_cache_config_default();
    view.config.sequences = plan->B;
    view.config.kv_heads = plan->Hkv;
    view.config.key_dim = plan->Dk;
    view.config.value_dim = plan->Dv;
    view.config.dtype = plan->dtype;
    view.config.capacity = plan->capacity;
    view.config.page_size = plan->page_size;
    view.config.page_count = plan->page_count;
    view.element_size = attn_dtype_size(plan->dtype);
    view.page_size = plan->page_size;
    view.page_count = plan->page_count;
    view.pages_per_sequence = plan->max_pages;
    view.key_page_elements = plan->k_cache->stride[0];
    view.value_page_elements = plan->v_cache->stride[0];
    view.key_pool = plan->k_cache->data;
    view.value_pool = plan->v_cache->data;
    view.key_token_stride = plan->k_cache->stride[1];
    view.key_head_stride = plan->k_cache->stride[2];
    view.value_token_stride = plan->v_cache->stride[1];
    view.value_head_stride = plan->v_cache->stride[2];
    for (int64_t b = 0; b < plan->B; ++b) {
        lengths[b] = plan->cache_seqlens[b] + plan->Tnew;
        for (int64_t block = 0; block < plan->max_pages; ++block)
            tables[b * plan->max_pages + block] =
                (int32_t)(plan->paged ? table_entry(plan, b, block) : b);
    }
    view.block_tables = tables;
    view.lengths = lengths;
    for (int64_t h = 0; h < plan->Hkv; ++h) {
        head_factors[h] = attn_kv_view_head_scale(plan->k_head, h);
        head_factors[plan->Hkv + h] = attn_kv_view_head_scale(plan->v_head, h);
    }
    view.key_head_scales = head_factors;
    view.value_head_scales = head_factors + plan->Hkv;
    if (plan->dtype == ATTN_DTYPE_Q8) { /* row scales read in place, with their strides */
        const attn_tensor *ks = plan->k_scale, *vs = plan->v_scale;
        view.key_scale_pool = ks->data, view.value_scale_pool = vs->data;
        view.key_scale_page_stride = ks->stride[0], view.value_scale_page_stride = vs->stride[0];
        view.key_scale_token_stride = ks->stride[1], view.value_scale_token_stride = vs->stride[1];
        view.key_scale_head_stride = ks->stride[2], view.value_scale_head_stride = vs->stride[2];
    }
    return attn_decode(&view, q, options, out, lse, execution, error);
}

/* The queries with RoPE at their positions, rotated in fp32 and stored contiguous in q's
 * dtype (rounded once for 16-bit queries) in `rotated`; row: float[Dk]. */
static attn_tensor rotate_queries(const external_plan *plan, const attn_tensor *q, char *rotated,
                                  float *row) {
    const size_t size = attn_dtype_size(q->dtype);
    const int64_t shape[4] = {plan->B, plan->Tq, plan->Hq, plan->Dk};
    for (int64_t b = 0; b < plan->B; ++b)
        for (int64_t i = 0; i < plan->Tq; ++i)
            for (int64_t h = 0; h < plan->Hq; ++h) {
                load_row(q->dtype,
                         (const char *)q->data +
                             (ptrdiff_t)(b * q->stride[0] + i * q->stride[1] + h * q->stride[2]) *
                                 (ptrdiff_t)size,
                         q->stride[3], plan->Dk, row);
                rotate(row, plan, plan->cache_seqlens[b] + (plan->rotate_each_query ? i : 0));
                store_row(q->dtype, row, plan->Dk,
                          rotated + (size_t)(((b * plan->Tq + i) * plan->Hq + h) * plan->Dk) * size);
            }
    return attn_tensor_contiguous(rotated, q->dtype, 4, shape);
}

attn_status attn_forward_with_kvcache(const attn_tensor *q, const attn_kv_cache_view *cache,
                                      const attn_kv_append *append, const attn_options *options,
                                      attn_tensor *out, attn_tensor *lse,
                                      const attn_execution *execution, attn_error *error) {
    attn_options resolved;
    attn_execution how;
    attn_status status = attn_options_resolve(options, &resolved, error);
    if (status == ATTN_OK) status = attn_execution_resolve(execution, &how, error);
    external_plan plan;
    memset(&plan, 0, sizeof plan);
    if (status == ATTN_OK)
        status = check_arguments(&plan, q, cache, append, &resolved, out, lse, error);
    if (status != ATTN_OK) return status;

    /* Every buffer before the first write. The attention after the append sizes its own
     * working memory (attn_decode, attn_forward) only when it runs; should it then fail (its
     * memory limit, say), the rows the append overwrote are put back from bytes[5], so that
     * the cache is left as it was on any error. */
    enum { BUFFERS = 6 };
    const int use_decode = plan.Tq <= DECODE_MOST_QUERIES;
    const int gather = !use_decode && (plan.paged || plan.dtype != q->dtype);
    /* owner, rotated queries, a row, tables + lengths, gathered K/V, overwritten rows */
    size_t bytes[BUFFERS] = {0};
    int fits = attn_mul_size((size_t)(plan.paged && plan.Tnew > 0 ? plan.page_count : 0),
                             sizeof(int64_t), &bytes[0]);
    if (plan.Tnew > 0) fits = fits && overwritten_bytes(&plan, &bytes[5]);
    if (plan.rotary_dim > 0) {
        int64_t elements;
        fits = fits && attn_mul_i64(plan.B * plan.Tq, plan.Hq * plan.Dk, &elements) &&
               attn_mul_size((size_t)elements, attn_dtype_size(q->dtype), &bytes[1]);
    }
    bytes[2] = (size_t)(plan.Dk > plan.Dv ? plan.Dk : plan.Dv) * sizeof(float); /* a row */
    if (use_decode) {
        int64_t entries;
        /* lengths int64[B], head factors float[2][Hkv], tables int32[B][max_pages] */
        fits = fits && attn_mul_i64(plan.B, plan.max_pages, &entries) &&
               attn_mul_size((size_t)entries, sizeof(int32_t) + sizeof(int64_t), &bytes[3]) &&
               attn_add_size(bytes[3], (size_t)(2 * plan.Hkv) * sizeof(float) + 8, &bytes[3]);
    }
    if (gather) {
        int64_t elements;
        fits = fits && attn_mul_i64(plan.longest, plan.Hkv * (plan.Dk + plan.Dv), &elements) &&
               attn_mul_size((size_t)elements, attn_dtype_size(q->dtype), &bytes[4]);
    }
    if (!fits)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "attn_forward_with_kvcache: working memory size overflows");
    size_t total = 0;
    for (int n = 0; n < BUFFERS; ++n) total += bytes[n]; /* each fits; the sum is far below SIZE_MAX */
    if (how.memory_limit_bytes > 0 && total > how.memory_limit_bytes)
        return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                         "execution.memory_limit_bytes = %zu: attn_forward_with_kvcache needs "
                         "%zu bytes (block-table checks, rotated queries, gathered K/V, the "
                         "rows an append overwrites)",
                         how.memory_limit_bytes, total);
    void *buffers[BUFFERS] = {NULL};
    for (int n = 0; n < BUFFERS; ++n)
        if (bytes[n] > 0 && (buffers[n] = attn_aligned_alloc(bytes[n])) == NULL) {
            for (int m = 0; m < n; ++m) attn_aligned_free(buffers[m]);
            return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY,
                             "attn_forward_with_kvcache: %zu bytes could not be allocated",
                             bytes[n]);
        }
    status = check_block_table(&plan, buffers[0], error);

    /* Nothing has been written so far. */
    const int appended = status == ATTN_OK && plan.Tnew > 0;
    if (appended) {
        swap_overwritten(&plan, buffers[5], 0);
        append_tokens(&plan, buffers[2]);
    }
    attn_tensor rotated_q = *q;
    if (status == ATTN_OK && plan.rotary_dim > 0)
        rotated_q = rotate_queries(&plan, q, buffers[1], buffers[2]);
    if (status == ATTN_OK) {
        if (use_decode) {
            int64_t *lengths = buffers[3]; /* [B] int64, [2][Hkv] float, [B][max_pages] int32 */
            float *head_factors = (float *)(lengths + plan.B);
            int32_t *tables = (int32_t *)(head_factors + 2 * plan.Hkv);
            status = decode(&plan, &rotated_q, &resolved, out, lse, execution, tables, lengths,
                            head_factors, error);
        } else {
            status = prefill(&plan, &rotated_q, &resolved, out, lse, execution, buffers[4], error);
        }
    }
    if (appended && status != ATTN_OK) swap_overwritten(&plan, buffers[5], 1);
    for (int n = 0; n < BUFFERS; ++n) attn_aligned_free(buffers[n]);
    return status;
}
