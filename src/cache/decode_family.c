/*
 * decode_family.c — how a decode task computes: the families and the table that picks one.
 *
 * A family is a way of computing a chunk (kernels/registry.h, decode part): which form the
 * queries take once per task, which kernel scores the chunk's stored keys, which adds its
 * P · V, and whether that P · V waits for later chunks. A storage format enters a family
 * through the registry's slots for it: float32 rows read in place; 16-bit and 8-bit rows
 * either read in place by their own score / value kernels (with the scales folded into the
 * scores and the weights, quant.h) or widened once per chunk into float32 rows for the float
 * kernels; bf16 tiles for bf16 queries against bf16 or fp8 storage; int8 tiles. The loop over
 * the chunks (decode_task.c) is the same for every family.
 *
 * The choice is data (family_rules below): the first row whose storage, query type, group
 * size, key dimension and layout fit, and whose registry slots are present. A registry without
 * a slot simply never takes the rows that need it, so every CPU runs every storage format.
 */
#include <limits.h>
#include <string.h>

#include "cache/decode_internal.h"
#include "kernels/quant.h"

/* ---- float32 rows: stored float32 rows read in place, others widened once per chunk ---- */

/* `count` float32 rows of keys (values) from the chunk's stored rows: the rows themselves
 * for F32 storage (*stride = row_stride), else converted into `buffer` (*stride = dim; 8-bit
 * formats dequantised with their row scales and head factor, kernels/quant.h), the conversion
 * requesting the next chunk's rows `next` as it goes (NULL: none). */
static const float *float_rows(const decode_plan *plan, const void *stored,
                               const float *row_scales, float factor, int count, int64_t dim,
                               int64_t row_stride, const void *next, float *buffer,
                               int64_t *stride) {
    const attn_dtype dtype = plan->cache->config.dtype;
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    if (dtype == ATTN_DTYPE_F32) {
        *stride = row_stride;
        return stored;
    }
    *stride = dim;
    if (attn_dtype_is_quantized(dtype))
        kernels->dequantize_rows(dtype, count, (int)dim, stored, row_stride, row_scales, factor,
                                 buffer, next);
    else
        kernels->widen_rows(dtype, count, (int)dim, stored, row_stride, buffer, next);
    return buffer;
}

/* The chunk's keys as float32 rows (kept in state for values_in_keys, MLA). `requests`: the
 * conversion requests the next chunk's rows (the large-group kernels request their own). */
static const float *float_keys(const decode_plan *plan, decode_scratch *scratch,
                               const decode_chunk *chunk, chunk_state *state, bool requests) {
    state->keys = float_rows(plan, chunk->keys, chunk->key_scales, chunk->key_factor,
                             chunk->count, plan->key_dim, plan->cache->key_token_stride,
                             requests ? chunk->next_keys : NULL, scratch->keys,
                             &state->key_stride);
    return state->keys;
}

/* The chunk's values as float32 rows (*stride): with values_in_keys the keys' rows. */
static const float *float_values(const decode_plan *plan, decode_scratch *scratch,
                                 const decode_chunk *chunk, const chunk_state *state,
                                 bool requests, int64_t *stride) {
    *stride = state->key_stride;
    if (plan->cache->value_pool == NULL) return state->keys;
    return float_rows(plan, chunk->values, chunk->value_scales, chunk->value_factor,
                      chunk->count, plan->value_dim, attn_cache_value_row_stride(plan->cache),
                      requests ? chunk->next_values : NULL, scratch->values, stride);
}

static void score_rows(const decode_plan *plan, decode_scratch *scratch, const decode_chunk *chunk,
                       chunk_state *state, float *scores) {
    const float *keys = float_keys(plan, scratch, chunk, state, true);
    /* (rows read in place: the kernel requests the next chunk's; a buffer: its conversion did) */
    plan->kernels->decode.score_chunk((int)plan->rows, chunk->count, (int)plan->key_dim,
                                      scratch->queries, keys, state->key_stride, scores,
                                      keys == chunk->keys ? chunk->next_keys : NULL);
}

static void values_rows(const decode_plan *plan, decode_scratch *scratch, const decode_chunk *chunk,
                        chunk_state *state, float *weights, float *rescale) {
    int64_t stride;
    const float *values = float_values(plan, scratch, chunk, state, true, &stride);
    plan->kernels->decode.accumulate_chunk((int)plan->rows, chunk->count, (int)plan->value_dim,
                                           weights, rescale, values, stride,
                                           scratch->accumulator,
                                           values == chunk->values ? chunk->next_values : NULL);
}

/* Large groups (MQA, MLA): queries prepared once per task (for instance transposed), the
 * accumulator transposed for the whole task. */
static void prepare_group(const decode_plan *plan, decode_scratch *scratch) {
    plan->kernels->decode.prepare_group_queries((int)plan->rows, (int)plan->key_dim,
                                                scratch->queries, scratch->prepared);
}

static void score_group(const decode_plan *plan, decode_scratch *scratch,
                        const decode_chunk *chunk, chunk_state *state, float *scores) {
    const float *keys = float_keys(plan, scratch, chunk, state, false);
    plan->kernels->decode.score_chunk_group((int)plan->rows, chunk->count, (int)plan->key_dim,
                                            scratch->prepared, keys, state->key_stride, scores,
                                            keys == chunk->keys ? chunk->next_keys : NULL);
}

static void values_group(const decode_plan *plan, decode_scratch *scratch,
                         const decode_chunk *chunk, chunk_state *state, float *weights,
                         float *rescale) {
    int64_t stride;
    const float *values = float_values(plan, scratch, chunk, state, false, &stride);
    plan->kernels->decode.accumulate_chunk_group((int)plan->rows, chunk->count,
                                                 (int)plan->value_dim, weights, rescale, values,
                                                 stride, scratch->accumulator);
}

/* ---- 16-bit rows read in place (small groups; token-major pages) ---- */
static const decode_family family_bf16_in_place, family_f16_in_place;

typedef void (*score_16bit)(int rows, int count, int dim, const float *queries,
                            const uint16_t *keys, int64_t key_stride, float *scores,
                            const uint16_t *keys_ahead);
typedef void (*accumulate_16bit)(int rows, int count, int dim, const float *weights,
                                 const float *rescale, const uint16_t *values,
                                 int64_t value_stride, float *accumulator,
                                 const uint16_t *values_ahead);

static void prepare_bf16(const decode_plan *plan, decode_scratch *scratch) {
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    if (kernels->prepare_bf16_queries != NULL)
        kernels->prepare_bf16_queries((int)plan->rows, (int)plan->key_dim, scratch->queries,
                                      scratch->prepared);
}

static void score_in_place_16bit(const decode_plan *plan, decode_scratch *scratch,
                                 const decode_chunk *chunk, chunk_state *state, float *scores) {
    (void)state;
    const attn_decode_kernels *k = &plan->kernels->decode;
    const bool bf16 = plan->family == &family_bf16_in_place;
    const score_16bit score = bf16 ? k->score_chunk_bf16
                              : plan->family == &family_f16_in_place ? k->score_chunk_f16
                                                                     : k->score_chunk_bf16_widened;
    score((int)plan->rows, chunk->count, (int)plan->key_dim,
          bf16 && k->prepare_bf16_queries != NULL ? scratch->prepared : scratch->queries,
          chunk->keys, plan->cache->key_token_stride, scores, chunk->next_keys);
}

static void values_in_place_16bit(const decode_plan *plan, decode_scratch *scratch,
                                  const decode_chunk *chunk, chunk_state *state, float *weights,
                                  float *rescale) {
    (void)state;
    const attn_decode_kernels *k = &plan->kernels->decode;
    const accumulate_16bit accumulate =
        plan->family == &family_bf16_in_place ? k->accumulate_chunk_bf16
        : plan->family == &family_f16_in_place ? k->accumulate_chunk_f16
                                               : k->accumulate_chunk_bf16_widened;
    accumulate((int)plan->rows, chunk->count, (int)plan->value_dim, weights, rescale,
               chunk->values, attn_cache_value_row_stride(plan->cache), scratch->accumulator,
               chunk->next_values);
}

/* ---- 8-bit rows read in place: int8 queries rounded once per task (quant.h) ---- */
static void prepare_q8(const decode_plan *plan, decode_scratch *scratch) {
    if (plan->cache->config.dtype == ATTN_DTYPE_Q8)
        attn_q8_prepare_queries((int)plan->rows, (int)plan->key_dim, scratch->queries,
                                scratch->prepared);
}

static void score_in_place_8bit(const decode_plan *plan, decode_scratch *scratch,
                                const decode_chunk *chunk, chunk_state *state, float *scores) {
    (void)state;
    const attn_dtype dtype = plan->cache->config.dtype;
    plan->kernels->decode.score_chunk_q8(
        dtype, (int)plan->rows, chunk->count, (int)plan->key_dim,
        dtype == ATTN_DTYPE_Q8 ? (const void *)scratch->prepared : scratch->queries, chunk->keys,
        plan->cache->key_token_stride, chunk->key_scales, chunk->key_factor, scores,
        plan->scores_request_values ? &chunk->ahead : NULL, chunk->next_keys);
}

static void values_in_place_8bit(const decode_plan *plan, decode_scratch *scratch,
                                 const decode_chunk *chunk, chunk_state *state, float *weights,
                                 float *rescale) {
    (void)state;
    plan->kernels->decode.accumulate_chunk_q8(
        plan->cache->config.dtype, (int)plan->rows, chunk->count, (int)plan->value_dim, weights,
        rescale, chunk->values, attn_cache_value_row_stride(plan->cache), chunk->value_scales,
        chunk->value_factor, scratch->accumulator,
        plan->values_request_next ? chunk->next_values : NULL);
}

/* ---- bf16 tiles (bf16 queries against bf16 or fp8 storage) ----
 * The P · V of up to plan->tile_chunks consecutive chunks of one page runs at once (their P
 * blocks wait in scratch->scores, rescaled to the last chunk's maximum; the accumulator's
 * factor over them in scratch->carried). fp8 rows are widened exactly to bf16 first, or read
 * in place by the registry's fp8 tile kernels (small groups); the head's key scale multiplies
 * the scores, its value scale the outputs (task_finish). */
static const decode_family family_fp8_tiles_in_place;

static bool reads_fp8(const decode_plan *plan) {
    return attn_dtype_is_quantized(plan->cache->config.dtype);
}

static void prepare_tiles(const decode_plan *plan, decode_scratch *scratch) {
    plan->kernels->decode.prepare_tile_queries((int)plan->rows, (int)plan->key_dim,
                                               scratch->queries, (uint16_t *)scratch->prepared);
}

static void score_tiles(const decode_plan *plan, decode_scratch *scratch,
                        const decode_chunk *chunk, chunk_state *state, float *scores) {
    const attn_decode_kernels *k = &plan->kernels->decode;
    const attn_kv_cache *cache = plan->cache;
    const int rows = (int)plan->rows, Dk = (int)plan->key_dim;
    const attn_dtype dtype = cache->config.dtype;
    const uint16_t *keys = chunk->keys;
    int64_t stride = cache->key_token_stride;
    if (plan->family == &family_fp8_tiles_in_place) {
        k->score_chunk_tiles_fp8(dtype, rows, chunk->count, Dk, (const uint16_t *)scratch->prepared,
                                 chunk->keys, stride, scores,
                                 cache->value_pool != NULL ? &chunk->ahead : NULL);
    } else {
        if (reads_fp8(plan)) { /* widened after the pending chunks' (MLA's values are there) */
            uint16_t *widened = scratch->keys16 + (int64_t)state->pending_keys * Dk;
            k->widen_fp8_bf16(dtype, chunk->count, Dk, chunk->keys, stride, widened);
            keys = widened, stride = Dk;
        }
        k->score_chunk_tiles(rows, chunk->count, Dk, (const uint16_t *)scratch->prepared, keys,
                             stride, scores);
    }
    if (reads_fp8(plan) && chunk->key_factor != 1.0f) /* the head's key scale, per dot product */
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < chunk->count; ++c) scores[r * ATTN_DECODE_CHUNK + c] *= chunk->key_factor;
}

static void flush_tiles(const decode_plan *plan, decode_scratch *scratch, chunk_state *state) {
    if (state->pending == 0) return;
    const attn_decode_kernels *k = &plan->kernels->decode;
    const int rows = (int)plan->rows, Dv = (int)plan->value_dim;
    if (plan->family == &family_fp8_tiles_in_place)
        k->accumulate_chunk_tiles_fp8(plan->cache->config.dtype, rows, state->pending_keys, Dv,
                                      scratch->scores, scratch->carried, state->pending_values,
                                      state->pending_stride, scratch->accumulator);
    else
        k->accumulate_chunk_tiles(rows, state->pending_keys, Dv, scratch->scores,
                                  scratch->carried, state->pending_values, state->pending_stride,
                                  scratch->values, scratch->accumulator);
    state->pending = state->pending_keys = state->slot = 0;
}

/* The pending chunks' P rescaled to this chunk's maximum; the accumulator's factor carried. */
static void carry_rescale(const decode_plan *plan, decode_scratch *scratch,
                          const chunk_state *state, const float *rescale) {
    for (int64_t r = 0; r < plan->rows; ++r) {
        const float factor = rescale[r];
        if (state->pending == 0) {
            scratch->carried[r] = factor;
            continue;
        }
        scratch->carried[r] *= factor;
        if (factor != 1.0f)
            for (int j = 0; j < state->pending; ++j) {
                float *row = scratch->scores + ((int64_t)j * plan->rows + r) * ATTN_DECODE_CHUNK;
                for (int c = 0; c < ATTN_DECODE_CHUNK; ++c) row[c] *= factor;
            }
    }
}

static void values_tiles(const decode_plan *plan, decode_scratch *scratch,
                         const decode_chunk *chunk, chunk_state *state, float *weights,
                         float *rescale) {
    (void)weights;
    const attn_kv_cache *cache = plan->cache;
    const int64_t Dk = plan->key_dim, Dv = plan->value_dim;
    const bool own_values = cache->value_pool != NULL; /* (MLA: a value starts its key row) */
    const bool widened = reads_fp8(plan) && plan->family != &family_fp8_tiles_in_place;
    carry_rescale(plan, scratch, state, rescale);
    if (state->pending == 0) {
        state->pending_values = widened ? (own_values ? (const void *)scratch->values16
                                                      : (const void *)scratch->keys16)
                                        : chunk->values;
        state->pending_stride = widened ? (own_values ? Dv : Dk)
                                        : own_values ? attn_cache_value_row_stride(cache)
                                                     : cache->key_token_stride;
    }
    if (widened && own_values) /* after the pending chunks' values */
        plan->kernels->decode.widen_fp8_bf16(cache->config.dtype, chunk->count, (int)Dv,
                                             chunk->values, attn_cache_value_row_stride(cache),
                                             scratch->values16 + (int64_t)state->pending_keys * Dv);
    ++state->pending;
    state->pending_keys += chunk->count;
    state->slot = state->pending;
    /* flushed when full, or when the next chunk is not the next keys of this page */
    if (state->pending == plan->tile_chunks || chunk->count < ATTN_DECODE_CHUNK ||
        chunk->last == chunk->page_end || chunk->next.count == 0)
        flush_tiles(plan, scratch, state);
}

/* ---- int8 tiles: scores on the tiles; P · V on them too, or in place for small groups ----
 * The P · V of a chunk runs after the next chunk's scores and softmax (values_late), so that
 * the next chunk's tile loads, which wait for every older store, overlap it; each chunk's P,
 * rescale and gathered scales are in the buffers of its parity. The accumulator sees the same
 * operations in the same order, hence the same bits. */
static const decode_family family_q8_tiles;

static void prepare_q8_tiles(const decode_plan *plan, decode_scratch *scratch) {
    plan->kernels->decode.prepare_q8_tile_queries((int)plan->rows, (int)plan->key_dim,
                                                  scratch->queries, scratch->prepared);
}

static void score_q8_tiles(const decode_plan *plan, decode_scratch *scratch,
                           const decode_chunk *chunk, chunk_state *state, float *scores) {
    (void)state;
    plan->kernels->decode.score_chunk_q8_tiles((int)plan->rows, chunk->count, (int)plan->key_dim,
                                               scratch->prepared, chunk->keys,
                                               plan->cache->key_token_stride, chunk->key_scales,
                                               chunk->key_factor, scores, chunk->next_keys);
}

static void flush_late(const decode_plan *plan, decode_scratch *scratch, chunk_state *state) {
    const late_values *late = &state->held;
    if (late->count == 0) return;
    const attn_decode_kernels *k = &plan->kernels->decode;
    const int rows = (int)plan->rows, Dv = (int)plan->value_dim;
    if (plan->family == &family_q8_tiles)
        k->accumulate_chunk_q8_tiles(rows, late->count, Dv, late->weights, late->rescale,
                                     late->values, late->value_stride, late->value_scales,
                                     late->value_factor, scratch->values, scratch->accumulator,
                                     late->next_values);
    else
        k->accumulate_chunk_q8(plan->cache->config.dtype, rows, late->count, Dv, late->weights,
                               late->rescale, late->values, late->value_stride,
                               late->value_scales, late->value_factor, scratch->accumulator,
                               late->next_values);
    state->held.count = 0;
}

static void values_late(const decode_plan *plan, decode_scratch *scratch,
                        const decode_chunk *chunk, chunk_state *state, float *weights,
                        float *rescale) {
    flush_late(plan, scratch, state); /* the previous chunk's P · V now, this one's held */
    state->held = (late_values){chunk->count, chunk->values,
                                attn_cache_value_row_stride(plan->cache), chunk->value_scales,
                                chunk->next_values, chunk->value_factor, weights, rescale};
    state->parity ^= 1;
    state->slot = state->parity;
}

/* ---- the families ---- */
static const decode_family family_rows = {"fp32 rows", ACCUMULATOR_ROWS, VALUES_REQUEST_F32,
                                          false, NULL, score_rows, values_rows, NULL};
static const decode_family family_group = {"fp32 large group", ACCUMULATOR_TRANSPOSED,
                                           VALUES_REQUEST_NEVER, false, prepare_group,
                                           score_group, values_group, NULL};
static const decode_family family_bf16_in_place = {
    "bf16 in place", ACCUMULATOR_ROWS, VALUES_REQUEST_ALWAYS, false, prepare_bf16,
    score_in_place_16bit, values_in_place_16bit, NULL};
static const decode_family family_f16_in_place = {
    "f16 in place", ACCUMULATOR_ROWS, VALUES_REQUEST_ALWAYS, false, NULL,
    score_in_place_16bit, values_in_place_16bit, NULL};
/* bf16 rows widened as they are loaded: the bits of family_rows (token-major pages) */
static const decode_family family_bf16_widened = {
    "bf16 widened in place", ACCUMULATOR_ROWS, VALUES_REQUEST_ALWAYS, false, NULL,
    score_in_place_16bit, values_in_place_16bit, NULL};
static const decode_family family_8bit_in_place = {
    "8-bit in place", ACCUMULATOR_ROWS, VALUES_REQUEST_8BIT, false, prepare_q8,
    score_in_place_8bit, values_in_place_8bit, NULL};
static const decode_family family_bf16_tiles = {"bf16 tiles", ACCUMULATOR_TILE_ROWS,
                                                VALUES_REQUEST_NEVER, false, prepare_tiles,
                                                score_tiles, values_tiles, flush_tiles};
static const decode_family family_fp8_tiles = {"fp8 on bf16 tiles", ACCUMULATOR_TILE_ROWS,
                                               VALUES_REQUEST_NEVER, true, prepare_tiles,
                                               score_tiles, values_tiles, flush_tiles};
static const decode_family family_fp8_tiles_in_place = {
    "fp8 on bf16 tiles", ACCUMULATOR_TILE_ROWS, VALUES_REQUEST_NEVER, true, prepare_tiles,
    score_tiles, values_tiles, flush_tiles};
static const decode_family family_q8_tiles = {"int8 tiles", ACCUMULATOR_ROWS,
                                              VALUES_REQUEST_NEVER, false, prepare_q8_tiles,
                                              score_q8_tiles, values_late, flush_late};
static const decode_family family_q8_tile_scores = {"int8 tile scores", ACCUMULATOR_ROWS,
                                                    VALUES_REQUEST_NEVER, false,
                                                    prepare_q8_tiles, score_q8_tiles,
                                                    values_late, flush_late};

bool decode_family_widens_fp8(const decode_family *family) { return family == &family_fp8_tiles; }

/* ---- the choice ---- */
#define STORAGE(dtype) (1u << (dtype))
#define STORAGE_FP8 (STORAGE(ATTN_DTYPE_FP8_E4M3) | STORAGE(ATTN_DTYPE_FP8_E5M2))
#define STORAGE_ANY (~0u)
#define SLOT(name) offsetof(attn_decode_kernels, name)
#define NONE 0

/* One row of the choice: the family, for storage in `storage`, queries of any type or bf16
 * only, any layout or token-major pages only, when the registry has slots `slot` and
 * `second_slot` (offsets into attn_decode_kernels; NONE: no need), for groups of least_rows
 * to most_rows rows (or the registry's own bound: the int field at rows_field) and key dims
 * up to most_key_dim. */
typedef struct family_rule {
    const decode_family *family;
    unsigned storage;
    bool bf16_queries, token_major;
    size_t slot, second_slot;
    int least_rows, most_rows;
    size_t least_rows_field, most_rows_field;
    int64_t most_key_dim;
} family_rule;

/* In order; the first that fits is taken. Why each is where it is:
 * - int8 on int8 tiles: the in-place kernels' bits in fewer instructions per element; small
 *   groups keep the in-place P · V;
 * - bf16 queries (never float32 ones rounded) against bf16 storage on the bf16 tiles from
 *   the registry's tile_rows_bf16 on; against fp8 (every fp8 value is a bf16 value) from
 *   tile_rows_fp8 on, small groups reading the fp8 rows in place;
 * - small groups (<= ATTN_DECODE_FUSED_ROWS) read 16-bit and 8-bit storage in place (a
 *   conversion pass would cost more than it saves), int8 in every group (its integer
 *   products cost less than float FMAs even when many rows share a chunk);
 * - large groups (MQA, MLA) on queries prepared once per task;
 * - on token-major pages, mid-sized groups read 16-bit rows in place with the bits of the
 *   conversion (its strided pass costs more there), up to token_major_in_place_rows;
 * - the rest converts each chunk to float32 rows once. */
static const family_rule family_rules[] = {
    {&family_q8_tile_scores, STORAGE(ATTN_DTYPE_Q8), false, false, SLOT(score_chunk_q8_tiles),
     SLOT(accumulate_chunk_q8), 1, ATTN_DECODE_Q8_TILE_VALUE_ROWS - 1, NONE, NONE,
     ATTN_DECODE_Q8_TILE_MOST_DIM},
    {&family_q8_tiles, STORAGE(ATTN_DTYPE_Q8), false, false, SLOT(score_chunk_q8_tiles), NONE, 1,
     INT_MAX, NONE, NONE, ATTN_DECODE_Q8_TILE_MOST_DIM},
    {&family_bf16_tiles, STORAGE(ATTN_DTYPE_BF16), true, false, SLOT(score_chunk_tiles), NONE, 0,
     INT_MAX, SLOT(tile_rows_bf16), NONE, INT64_MAX},
    {&family_fp8_tiles_in_place, STORAGE_FP8, true, false, SLOT(score_chunk_tiles),
     SLOT(score_chunk_tiles_fp8), 0, ATTN_DECODE_FUSED_ROWS, SLOT(tile_rows_fp8), NONE,
     INT64_MAX},
    {&family_fp8_tiles, STORAGE_FP8, true, false, SLOT(score_chunk_tiles), NONE, 0, INT_MAX,
     SLOT(tile_rows_fp8), NONE, INT64_MAX},
    {&family_bf16_in_place, STORAGE(ATTN_DTYPE_BF16), false, false, SLOT(score_chunk_bf16), NONE,
     1, ATTN_DECODE_FUSED_ROWS, NONE, NONE, INT64_MAX},
    {&family_f16_in_place, STORAGE(ATTN_DTYPE_F16), false, false, SLOT(score_chunk_f16), NONE, 1,
     ATTN_DECODE_FUSED_ROWS, NONE, NONE, INT64_MAX},
    {&family_8bit_in_place, STORAGE(ATTN_DTYPE_Q8), false, false, SLOT(score_chunk_q8), NONE, 1,
     INT_MAX, NONE, NONE, INT64_MAX},
    {&family_8bit_in_place, STORAGE_FP8, false, false, SLOT(score_chunk_q8), NONE, 1,
     ATTN_DECODE_FUSED_ROWS, NONE, NONE, INT64_MAX},
    {&family_group, STORAGE_ANY, false, false, SLOT(score_chunk_group), NONE,
     ATTN_DECODE_GROUP_ROWS, INT_MAX, NONE, NONE, INT64_MAX},
    {&family_f16_in_place, STORAGE(ATTN_DTYPE_F16), false, true, SLOT(score_chunk_f16), NONE, 1,
     0, NONE, SLOT(token_major_in_place_rows), INT64_MAX},
    {&family_bf16_widened, STORAGE(ATTN_DTYPE_BF16), false, true,
     SLOT(score_chunk_bf16_widened), NONE, 1, 0, NONE, SLOT(token_major_in_place_rows), INT64_MAX},
    {&family_rows, STORAGE_ANY, false, false, NONE, NONE, 1, INT_MAX, NONE, NONE, INT64_MAX},
};

static bool has_slot(const attn_decode_kernels *kernels, size_t slot) {
    void (*function)(void);
    if (slot == NONE) return true;
    memcpy(&function, (const char *)kernels + slot, sizeof function);
    return function != NULL;
}

static int bound(const attn_decode_kernels *kernels, int constant, size_t field) {
    int value = constant;
    if (field != NONE) memcpy(&value, (const char *)kernels + field, sizeof value);
    return value;
}

const decode_family *decode_family_of(const attn_decode_kernels *kernels, attn_dtype storage,
                                      attn_dtype query_dtype, int64_t rows, int64_t key_dim,
                                      bool token_major) {
    for (size_t n = 0; n < sizeof family_rules / sizeof *family_rules; ++n) {
        const family_rule *rule = &family_rules[n];
        if (!(rule->storage & STORAGE(storage)) || (rule->token_major && !token_major) ||
            (rule->bf16_queries && query_dtype != ATTN_DTYPE_BF16) || key_dim > rule->most_key_dim ||
            !has_slot(kernels, rule->slot) || !has_slot(kernels, rule->second_slot) ||
            rows < bound(kernels, rule->least_rows, rule->least_rows_field) ||
            rows > bound(kernels, rule->most_rows, rule->most_rows_field))
            continue;
        return rule->family;
    }
    return &family_rows;
}
