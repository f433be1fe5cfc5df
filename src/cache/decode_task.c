/*
 * decode_task.c — one decode task: sequence b, KV head kv_head, split s, over the keys of the
 * split that the mask can allow, chunk by chunk (a chunk never crosses a page):
 *   scores [rows x chunk] = queries [rows x Dk] . keys^T     (the family's score)
 *   the logit pipeline where needed, one online-softmax step per row (§2.1)
 *   accumulator [rows x Dv] += P . values                    (the family's values)
 * then the task's normalised partial (O, LSE) into its own slot, merged by decode.c (or, when
 * every sequence is one split, its rows straight into the output). Every
 * chunk of keys (and of values) is read once and serves all rows = (Hq / Hkv) * Tq query rows
 * of the group. The loop is the same for every family (decode_family.c).
 * Token-major pages ([page, slot, head, D]: a caller's cache) run the Hkv tasks of a split on
 * one thread: chunk by chunk, every head's rows together (families that hold no P · V back),
 * else in steps of step_tokens keys per head in turn; each head sees the operations of a whole
 * task on the same chunks in the same order, hence the same bits.
 */
#include <math.h>
#include <string.h>

#include "cache/decode_internal.h"
#include "kernels/half.h"
#include "kernels/quant.h"

/* n floats rounded up to a multiple of 16 (64 bytes). */
static size_t round_floats(size_t n) { return (n + 15) / 16 * 16; }

size_t decode_accumulator_floats(const decode_plan *plan) {
    return (size_t)ATTN_DECODE_TILE_ROW_FLOATS(plan->value_dim) *
           (size_t)ATTN_DECODE_GROUP_STRIDE(plan->rows);
}

/* The largest of the prepared forms: for score_chunk_bf16, score_chunk_group, the bf16
 * tiles (bf16 elements, two per float), the int8 tiles or score_chunk_q8 on int8 (bytes). */
size_t decode_prepared_floats(const decode_plan *plan) {
    const size_t f = sizeof(float);
    size_t prepared = (size_t)plan->rows * (size_t)ATTN_DECODE_PREPARED_DIM(plan->key_dim);
    const size_t candidates[4] = {
        (size_t)plan->key_dim * (size_t)ATTN_DECODE_GROUP_STRIDE(plan->rows),
        (ATTN_DECODE_TILE_QUERY_ELEMENTS(plan->rows, plan->key_dim) + 1) / 2,
        (ATTN_DECODE_Q8_TILE_QUERY_BYTES(plan->rows, plan->key_dim) + f - 1) / f,
        (ATTN_Q8_PREPARED_BYTES(plan->rows, plan->key_dim) + f - 1) / f};
    for (int n = 0; n < 4; ++n)
        if (candidates[n] > prepared) prepared = candidates[n];
    return prepared;
}

/* ---- a task's start and end ---- */

/* Reads the queries of KV head kv_head's group of sequence b as float32 rows into
 * scratch->queries [rows][Dk] (16-bit ones widened exactly), has the family prepare them,
 * and starts the state: row_max -inf, row_sum 0, accumulator 0. */
static void task_start(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                       int64_t kv_head) {
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    const int64_t rows = plan->rows, Tq = plan->query_length, Dk = plan->key_dim;
    const attn_tensor *q = plan->q;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = kv_head * plan->group_size + r / Tq, i = r % Tq;
        const int64_t first = b * q->stride[0] + i * q->stride[1] + h * q->stride[2];
        float *row = scratch->queries + r * Dk;
        scratch->row_max[r] = -INFINITY, scratch->row_sum[r] = 0.0f;
        if (q->stride[3] == 1) { /* dense rows */
            if (q->dtype == ATTN_DTYPE_F32)
                memcpy(row, (const float *)q->data + first, (size_t)Dk * sizeof(float));
            else
                (q->dtype == ATTN_DTYPE_BF16 ? kernels->bf16_to_f32 : kernels->f16_to_f32)(
                    Dk, (const uint16_t *)q->data + first, row);
            continue;
        }
        for (int64_t d = 0; d < Dk; ++d) {
            const int64_t at = first + d * q->stride[3];
            row[d] = q->dtype == ATTN_DTYPE_BF16  ? attn_bf16_to_float(((const uint16_t *)q->data)[at])
                     : q->dtype == ATTN_DTYPE_F16 ? attn_f16_to_float(((const uint16_t *)q->data)[at])
                                                  : ((const float *)q->data)[at];
        }
    }
    if (plan->family->prepare != NULL) plan->family->prepare(plan, scratch);
    const accumulator_layout layout = plan->family->accumulator;
    const int64_t Dv = plan->value_dim, stride = ATTN_DECODE_GROUP_STRIDE(rows);
    const int64_t floats = layout == ACCUMULATOR_TILE_ROWS ? ATTN_DECODE_TILE_ROW_FLOATS(Dv) * stride
                           : layout == ACCUMULATOR_TRANSPOSED ? Dv * stride
                                                              : Dv * rows;
    memset(scratch->accumulator, 0, (size_t)floats * sizeof(float));
}

/* The keys [*begin, *end) of split `split` of sequence b that the mask may allow. */
static void task_keys(const decode_plan *plan, int64_t b, int64_t split, int64_t *begin,
                      int64_t *end) {
    attn_mask_candidate_keys(plan->mask, b, 0, plan->query_length, begin, end);
    const int64_t split_begin = split * plan->split_tokens;
    if (*begin < split_begin) *begin = split_begin;
    if (*end > split_begin + plan->split_tokens) *end = split_begin + plan->split_tokens;
    if (*end > plan->cache->lengths[b]) *end = plan->cache->lengths[b];
}

/* out[e] = in[e * step] * factor + 0 for e < n (+0: -0 becomes +0, as in the merge). */
static void scale_row(int64_t n, const float *restrict in, int64_t step, float factor,
                      float *restrict out) {
    if (step == 1) /* dense rows (vectorised) */
        for (int64_t e = 0; e < n; ++e) out[e] = in[e] * factor + 0.0f;
    else
        for (int64_t e = 0; e < n; ++e) out[e] = in[e * step] * factor + 0.0f;
}

/* Writes task `task`'s normalised rows from its state: its partial (O [rows][Dv], LSE
 * [rows]), or with plan->direct the output rows themselves, with the bits the merge of a
 * single partial gives them (an empty row 0, -0 summed to +0). */
static void task_finish(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                        int64_t task, int64_t kv_head) {
    const int64_t rows = plan->rows, Dv = plan->value_dim, Tq = plan->query_length;
    const accumulator_layout layout = plan->family->accumulator;
    const int64_t row_step = layout == ACCUMULATOR_TRANSPOSED  ? 1
                             : layout == ACCUMULATOR_TILE_ROWS ? ATTN_DECODE_TILE_ROW_FLOATS(Dv)
                                                               : Dv;
    const int64_t dim_step = layout == ACCUMULATOR_TRANSPOSED ? ATTN_DECODE_GROUP_STRIDE(rows) : 1;
    const float value_scale =
        plan->family->head_scale_at_finish ? plan->cache->value_head_scales[kv_head] : 1.0f;
    /* A direct row with no LSE out and no sink uses its LSE only as "empty or not". */
    const bool lse_used = !plan->direct || plan->lse != NULL || plan->options->sinks != NULL;
    for (int64_t r = 0; r < rows; ++r) {
        const float sum = scratch->row_sum[r]; /* NaN: an attended NaN logit, kept in O, LSE */
        const float inverse = sum > 0.0f ? value_scale / sum : isnan(sum) ? NAN : 0.0f;
        const float lse = sum > 0.0f   ? (lse_used ? scratch->row_max[r] + logf(sum) : 0.0f)
                          : isnan(sum) ? NAN
                                       : -INFINITY;
        const int64_t h = kv_head * plan->group_size + r / Tq, i = r % Tq;
        float *out = plan->direct ? decode_row_target(plan, scratch, b, h, i)
                                  : plan->partial_out + (task * rows + r) * Dv;
        if (plan->direct && lse == -INFINITY)
            for (int64_t e = 0; e < Dv; ++e) out[e] = 0.0f;
        else
            scale_row(Dv, scratch->accumulator + r * row_step, dim_step, inverse, out);
        if (plan->direct)
            decode_write_row(plan, scratch, b, h, i, out, lse + 0.0f);
        else
            plan->partial_lse[task * rows + r] = lse;
    }
}

/* ---- a chunk ---- */

/* The Q8 row scales of `count` slots as contiguous floats: in place when they are (the
 * library's own cache), else gathered from `stride` apart into `buffer` (a caller's
 * [page, slot, head] scales); NULL stays NULL. */
static const float *contiguous_scales(const float *first, int64_t stride, int count,
                                      float *buffer) {
    if (first == NULL || stride == 1) return first;
    for (int c = 0; c < count; ++c) buffer[c] = first[c * stride];
    return buffer;
}

/* Where the chunk from key `first` of sequence b (up to key_end) lies, and the chunk after
 * it, found through the block table once per chunk: right after this one in its page, or at
 * the start of the sequence's next page. The kernels request the next chunk's rows as they
 * go (registry.h keys_ahead / values_ahead / rows_ahead): rows further at the same stride
 * would be another sequence's in a shuffled pool of small pages. */
static void chunk_place(const attn_kv_cache *cache, int64_t b, int64_t first, int64_t key_end,
                        decode_chunk *chunk) {
    const int32_t *table = cache->block_tables + b * cache->pages_per_sequence;
    const int64_t page_index = first / cache->page_size;
    chunk->b = b, chunk->first = first;
    chunk->page_end = (page_index + 1) * cache->page_size;
    chunk->page = table[page_index];
    chunk->last = first + ATTN_DECODE_CHUNK;
    if (chunk->last > key_end) chunk->last = key_end;
    if (chunk->last > chunk->page_end) chunk->last = chunk->page_end;
    chunk->count = (int)(chunk->last - first);
    chunk->slot = first - page_index * cache->page_size;
    chunk->next = (next_chunk){0, 0, 0};
    if (chunk->last < key_end) {
        const bool same_page = chunk->last < chunk->page_end;
        chunk->next.page = same_page ? chunk->page : table[page_index + 1];
        chunk->next.slot = same_page ? chunk->slot + chunk->count : 0;
        chunk->next.count = cache->page_size - chunk->next.slot;
        if (chunk->next.count > ATTN_DECODE_CHUNK) chunk->next.count = ATTN_DECODE_CHUNK;
        if (chunk->next.count > key_end - chunk->last) chunk->next.count = key_end - chunk->last;
    }
}

/* Which Q8 row scales chunk_rows gathers (a caller's [page, slot, head] scales are Hkv floats
 * apart): the heads-together schedule needs the keys' in its score phase, the values' in its
 * P · V phase. */
enum { SCALES_OF_KEYS = 1, SCALES_OF_VALUES = 2 };

/* The stored rows of head kv_head of a placed chunk, their scales (`which`, gathered into
 * gathered[2]: keys, values) and the next chunk's rows. */
static void chunk_rows(const decode_plan *plan, int64_t kv_head, int which,
                       float gathered[2][ATTN_DECODE_CHUNK], decode_chunk *chunk) {
    const attn_kv_cache *cache = plan->cache;
    const int64_t page = chunk->page, slot = chunk->slot;
    chunk->kv_head = kv_head;
    chunk->keys = attn_cache_key_address(cache, page, kv_head, slot);
    chunk->values = attn_cache_value_address(cache, page, kv_head, slot);
    chunk->ahead = (attn_rows_ahead){chunk->values,
                                     attn_cache_value_row_stride(cache) *
                                         (int64_t)cache->element_size,
                                     (int)plan->value_dim};
    chunk->key_scales = chunk->value_scales = NULL;
    if (which & SCALES_OF_KEYS)
        chunk->key_scales = contiguous_scales(attn_cache_key_scales(cache, page, kv_head, slot),
                                              cache->key_scale_token_stride, chunk->count,
                                              gathered[0]);
    if (which & SCALES_OF_VALUES)
        chunk->value_scales =
            contiguous_scales(attn_cache_value_scales(cache, page, kv_head, slot),
                              attn_cache_value_scale_stride(cache), chunk->count, gathered[1]);
    chunk->next_keys = chunk->next_values = NULL;
    if (chunk->next.count > 0) {
        chunk->next_keys = attn_cache_key_address(cache, chunk->next.page, kv_head, chunk->next.slot);
        chunk->next_values =
            attn_cache_value_address(cache, chunk->next.page, kv_head, chunk->next.slot);
    }
    chunk->key_factor = cache->key_head_scales[kv_head];
    chunk->value_factor = cache->value_head_scales[kv_head];
}

/* Requests `count` rows of `row_bytes` bytes, `stride_bytes` apart, into the L2 cache. */
static void request_rows(const void *first_row, int64_t count, int64_t stride_bytes,
                         int64_t row_bytes) {
    for (int64_t c = 0; c < count; ++c)
        for (int64_t offset = 0; offset < row_bytes; offset += 64)
            __builtin_prefetch((const char *)first_row + c * stride_bytes + offset, 0, 2);
}

/* Before a chunk's scores: its values where the plan asks (for a GQA group they arrive during
 * the score arithmetic instead of stalling the value pass), and the next chunk's Q8 row scales
 * (a short stream of their own that the kernels would otherwise wait for). */
static void chunk_requests(const decode_plan *plan, const decode_chunk *chunk) {
    const attn_kv_cache *cache = plan->cache;
    const int64_t f = (int64_t)sizeof(float), size = (int64_t)cache->element_size;
    if (plan->values_before_scores)
        request_rows(chunk->values, chunk->count, attn_cache_value_row_stride(cache) * size,
                     plan->value_dim * size);
    const next_chunk *next = &chunk->next;
    if (chunk->key_scales == NULL || next->count == 0) return;
    request_rows(attn_cache_key_scales(cache, next->page, chunk->kv_head, next->slot), 1, 0,
                 ((next->count - 1) * cache->key_scale_token_stride + 1) * f);
    if (cache->value_pool != NULL)
        request_rows(attn_cache_value_scales(cache, next->page, chunk->kv_head, next->slot), 1, 0,
                     ((next->count - 1) * attn_cache_value_scale_stride(cache) + 1) * f);
}

/* The mask class of the chunk for each query head of kv_head's group (scratch->classes);
 * returns whether any key of it is allowed, and sets chunk->all_full (all are). */
static bool chunk_classes(const decode_plan *plan, decode_scratch *scratch, int64_t kv_head,
                          decode_chunk *chunk) {
    bool any = false;
    chunk->all_full = true;
    for (int64_t g = 0; g < plan->group_size; ++g) {
        scratch->classes[g] = g > 0 && !plan->per_head_classes
                                  ? scratch->classes[0]
                                  : (uint8_t)attn_mask_classify_tile(
                                        plan->mask, chunk->b, kv_head * plan->group_size + g, 0,
                                        plan->query_length, chunk->first, chunk->last);
        any |= scratch->classes[g] != ATTN_TILE_EMPTY;
        chunk->all_full &= scratch->classes[g] == ATTN_TILE_FULL;
    }
    return any;
}

/* The chunk's probabilities: the logit pipeline where the chunk needs more than the scale
 * (soft-cap, additive terms, a partial chunk: then a softmax at scale 1), then one
 * online-softmax step per row (rescale [rows]: the accumulator's factor) writing P as
 * plan->p_type (the row sums keep the unrounded P). */
static void chunk_probabilities(const decode_plan *plan, decode_scratch *scratch,
                                const decode_chunk *chunk, float *scores, float *rescale) {
    const int64_t rows = plan->rows, Tq = plan->query_length;
    float scale = plan->scale;
    if (plan->transform || !chunk->all_full) {
        const attn_logit_buffers buffers = {scratch->allowed, scratch->additive, NULL, NULL};
        for (int64_t r = 0; r < rows; ++r)
            attn_logits_row(plan->mask, &plan->logits, (attn_tile_class)scratch->classes[r / Tq],
                            chunk->b, chunk->kv_head * plan->group_size + r / Tq, r % Tq,
                            chunk->first, chunk->count, scores + r * ATTN_DECODE_CHUNK, &buffers);
        scale = 1.0f;
    }
    plan->kernels->decode.softmax_chunk((int)rows, chunk->count, scale, scores, plan->p_type,
                                        scratch->row_max, scratch->row_sum, rescale);
}

/* ---- the loop ---- */

/* A task run in steps (the heads of token-major pages take turns): each call resumes at
 * `from` (the task's first key when `resume` is false) and stops at the first chunk boundary
 * at least `tokens` keys later where no P · V is pending, so that the chunks and the
 * operations on the head's state (in scratch, pointed at the head's own by the caller) are
 * those of one whole call: the same bits. */
typedef struct task_step {
    bool resume;
    int64_t from, tokens;
    int64_t next; /* out: the key the next step resumes at */
    bool done;    /* out: the task's keys are all done (its partial written) */
} task_step;

/* Task (b, kv_head, split), or one step of it (step != NULL); writes its partial at the end. */
static void run_chunks(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                       int64_t kv_head, int64_t split, int64_t task, task_step *step) {
    if (step == NULL || !step->resume) task_start(plan, scratch, b, kv_head);
    const decode_family *family = plan->family;
    int64_t key_begin, key_end;
    task_keys(plan, b, split, &key_begin, &key_end);
    chunk_state state;
    state.slot = state.parity = state.pending = state.pending_keys = 0;
    state.held.count = 0;
    int64_t first = step != NULL && step->resume ? step->from : key_begin;
    const int64_t step_end = step != NULL ? first + step->tokens : key_end;
    while (first < key_end && (first < step_end || state.pending > 0)) {
        decode_chunk chunk;
        chunk_place(plan->cache, b, first, key_end, &chunk);
        first = chunk.last;
        if (!chunk_classes(plan, scratch, kv_head, &chunk)) { /* no key allowed */
            if (family->flush != NULL) family->flush(plan, scratch, &state);
            continue;
        }
        chunk_rows(plan, kv_head, SCALES_OF_KEYS | SCALES_OF_VALUES, state.gathered[state.parity],
                   &chunk);
        float *scores = scratch->scores + (int64_t)state.slot * plan->rows * ATTN_DECODE_CHUNK;
        float *rescale = scratch->rescale + (int64_t)state.parity * plan->rows;
        chunk_requests(plan, &chunk);
        family->score(plan, scratch, &chunk, &state, scores);
        chunk_probabilities(plan, scratch, &chunk, scores, rescale);
        family->values(plan, scratch, &chunk, &state, scores, rescale);
    }
    if (family->flush != NULL) family->flush(plan, scratch, &state);
    if (step != NULL) {
        step->next = first;
        step->done = first >= key_end;
        if (!step->done) return; /* more steps: the state stays in scratch */
    }
    task_finish(plan, scratch, b, task, kv_head);
}

void decode_run_task(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                     int64_t kv_head, int64_t split, int64_t task) {
    run_chunks(plan, scratch, b, kv_head, split, task, NULL);
}

/* ---- token-major pages: the heads of a split on one thread ---- */

/* Where each head's state lies in scratch->head_states, in floats from the head's first:
 * row_max and row_sum [rows] (rounded to 16 floats each), the accumulator, the queries
 * [rows][Dk], the prepared queries, made at its first step and kept for the others, and
 * (together) its scores [rows][ATTN_DECODE_CHUNK] and rescale factors [rows] of a chunk. */
typedef struct head_layout {
    size_t stride, rows, accumulator, queries, prepared, scores, rescale;
} head_layout;

static head_layout head_layout_of(const decode_plan *plan) {
    head_layout at;
    at.rows = ATTN_DECODE_GROUP_STRIDE(plan->rows);
    at.accumulator = 2 * at.rows;
    at.queries = at.accumulator + round_floats(decode_accumulator_floats(plan));
    at.prepared = at.queries + round_floats((size_t)plan->rows * (size_t)plan->key_dim);
    at.scores = at.prepared + round_floats(decode_prepared_floats(plan));
    at.rescale = at.scores + round_floats((size_t)plan->rows * ATTN_DECODE_CHUNK);
    at.stride = at.rescale + round_floats((size_t)plan->rows);
    return at;
}

size_t decode_head_state_floats(const decode_plan *plan) { return head_layout_of(plan).stride; }

/* Points scratch's per-task state (row_max, row_sum, accumulator, queries, prepared) at head
 * `head`'s own, and returns where that head's scores and (*rescale) rescale factors lie. */
static float *head_state(decode_scratch *scratch, const head_layout *at, int64_t head,
                         float **rescale) {
    float *mine = scratch->head_states + (size_t)head * at->stride;
    scratch->row_max = mine, scratch->row_sum = mine + at->rows;
    scratch->accumulator = mine + at->accumulator;
    scratch->queries = mine + at->queries, scratch->prepared = mine + at->prepared;
    *rescale = mine + at->rescale;
    return mine + at->scores;
}

/* The Hkv tasks of split `split` of sequence b in steps of plan->step_tokens keys, every head
 * in turn (the families that hold P · V back), so that the lines one head's step brings in
 * (its neighbours' rows with its own) are still in the L2 for the next head's step. */
void decode_run_split_stepped(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                              int64_t split) {
    const decode_scratch own = *scratch;
    const head_layout layout = head_layout_of(plan);
    task_step step = {false, 0, plan->step_tokens, 0, false};
    while (!step.done) {
        const int64_t from = step.next;
        for (int64_t head = 0; head < plan->kv_heads; ++head) {
            float *rescale;
            (void)head_state(scratch, &layout, head, &rescale);
            step.from = from;
            run_chunks(plan, scratch, b, head, split,
                       plan->first_task[b] + head * plan->split_counts[b] + split, &step);
        }
        step.resume = true;
    }
    *scratch = own;
}

/* One chunk of every head of a split: all heads' scores and probabilities, then all heads'
 * P · V, so that a page's K rows of all heads, then its V rows, are read together (no
 * hardware prefetcher follows one head's rows on token-major pages). any / full [Hkv]: per
 * head, whether the chunk has allowed keys for its group, and only such keys. */
static void chunk_of_heads(const decode_plan *plan, decode_scratch *scratch,
                           const head_layout *layout, const decode_chunk *placed,
                           chunk_state *state, uint8_t *any, uint8_t *full) {
    const int64_t H = plan->kv_heads;
    float *rescale;
    for (int64_t head = 0; head < H; ++head) { /* one class for all heads unless per head */
        decode_chunk chunk = *placed;
        if (head > 0 && !plan->per_head_classes) {
            any[head] = any[0], full[head] = full[0];
            continue;
        }
        any[head] = chunk_classes(plan, scratch, head, &chunk);
        full[head] = chunk.all_full;
    }
    for (int64_t head = 0; head < H; ++head) { /* scores, probabilities */
        if (!any[head]) continue;
        decode_chunk chunk = *placed;
        if (plan->per_head_classes) (void)chunk_classes(plan, scratch, head, &chunk);
        chunk.all_full = full[head];
        chunk_rows(plan, head, SCALES_OF_KEYS, state->gathered[0], &chunk);
        float *scores = head_state(scratch, layout, head, &rescale);
        chunk_requests(plan, &chunk);
        plan->family->score(plan, scratch, &chunk, state, scores);
        chunk_probabilities(plan, scratch, &chunk, scores, rescale);
    }
    for (int64_t head = 0; head < H; ++head) { /* P · V */
        if (!any[head]) continue;
        decode_chunk chunk = *placed;
        chunk_rows(plan, head, SCALES_OF_VALUES, state->gathered[0], &chunk);
        float *scores = head_state(scratch, layout, head, &rescale);
        plan->family->values(plan, scratch, &chunk, state, scores, rescale);
    }
}

/* The Hkv tasks of split `split` of sequence b chunk by chunk (chunk_of_heads); each head's
 * state, scores and rescale factors are its own. */
void decode_run_split_together(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                               int64_t split) {
    const decode_scratch own = *scratch;
    const head_layout layout = head_layout_of(plan);
    const int64_t H = plan->kv_heads;
    int64_t key_begin, key_end;
    task_keys(plan, b, split, &key_begin, &key_end);
    float *rescale;
    for (int64_t head = 0; head < H; ++head) {
        (void)head_state(scratch, &layout, head, &rescale);
        task_start(plan, scratch, b, head);
    }
    chunk_state state;
    state.slot = state.parity = state.pending = state.pending_keys = 0;
    state.held.count = 0;
    for (int64_t first = key_begin; first < key_end;) {
        decode_chunk placed;
        chunk_place(plan->cache, b, first, key_end, &placed);
        chunk_of_heads(plan, scratch, &layout, &placed, &state, scratch->head_flags,
                       scratch->head_flags + H);
        first = placed.last;
    }
    for (int64_t head = 0; head < H; ++head) {
        (void)head_state(scratch, &layout, head, &rescale);
        task_finish(plan, scratch, b, plan->first_task[b] + head * plan->split_counts[b] + split,
                    head);
    }
    *scratch = own;
}
