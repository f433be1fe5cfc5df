/*
 * decode.c — attn_decode: attention of a few new query tokens per sequence against a KV
 * cache, with split-KV (flash-decoding) across threads and an exact LSE merge; its naive
 * oracle, attn_reference_decode, is in reference_decode.c. Three phases:
 *   plan   the call's sizes, the split size, the family every task computes in
 *          (decode_family.c), what the loop requests ahead, threads and working memory;
 *   run    one task per (sequence b, KV head, split s), split s covering tokens
 *          [s * split_tokens, (s + 1) * split_tokens) of b clipped to the keys the mask can
 *          allow (decode_task.c); on token-major pages one work item is the Hkv tasks of a
 *          split;
 *   merge  the splits of each row combined in split order (docs/attention-math.md §3), the
 *          empty-row policy, the output type.
 * A task's normalised partial (O, LSE) goes to its own slot: no shared accumulation, split
 * boundaries independent of the thread count, hence bitwise identical results for any
 * thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/decode_internal.h"
#include "cache/decode_path.h"
#include "cache/merge.h"
#include "call/call.h"
#include "core/internal.h"
#include "core/parallel.h"
#include "kernels/quant.h"
#include "mask/sinks.h"

/* Default split size: at most 4096 tokens, and small enough that the call has about
 * TARGET_TASKS tasks even for one sequence with one KV head (MQA, MLA), so both cores work
 * on short contexts too; a multiple of the chunk, at least one chunk. It depends on the
 * cache and the query only, never on the thread count. Why 4096: a task's first chunk
 * starts cold (no earlier chunk requested its rows), and each task prepares its queries and
 * adds a partial to the merge (MLA's 128 x 576 rows), costs that smaller splits pay more
 * often. */
#define MOST_SPLIT_TOKENS 4096
#define TARGET_TASKS 16
/* An accumulator of more bytes than this takes the bf16 tiles' P · V of several chunks at
 * once; half of a 48 KiB L1. */
#define TILE_L1_BYTES (24 * 1024)
/* Token-major pages on the families that hold P · V back: the stored K and V bytes of all
 * heads per step of the heads of a split (decode_run_split_stepped), so that the lines one
 * head's step brings in are still in the L2 for the next head's step. */
#define STEP_BYTES (256 * 1024)

enum { SCRATCH_PARTS = 19 };

/* Bytes of each part of one thread's scratch (64-byte multiples, in decode_scratch order)
 * and their total; false on overflow. */
static bool scratch_layout(const decode_plan *plan, int64_t most_splits,
                           size_t bytes[SCRATCH_PARTS], size_t *total) {
    const size_t rows = (size_t)plan->rows, dk = (size_t)plan->key_dim, dv = (size_t)plan->value_dim;
    const size_t f = sizeof(float), chunk = ATTN_DECODE_CHUNK;
    /* converted values, or the value rows interleaved for the tiles */
    size_t values = chunk * dv;
    const size_t tile_values = ATTN_DECODE_TILE_VALUE_BYTES(plan->value_dim) / f;
    if (tile_values > values) values = tile_values;
    const size_t q8_values = (ATTN_DECODE_Q8_TILE_VALUE_BYTES(plan->value_dim) + f - 1) / f;
    if (q8_values > values) values = q8_values;
    /* fp8 on bf16 tiles: the pending chunks widened to bf16 */
    const bool widens_fp8 = decode_family_widens_fp8(plan->family);
    const size_t keys16 = widens_fp8 ? (size_t)ATTN_DECODE_TILE_KEYS * dk : 0;
    const size_t values16 = widens_fp8 && !plan->cache->config.values_in_keys
                                ? (size_t)ATTN_DECODE_TILE_KEYS * dv
                                : 0;
    const size_t heads = plan->stepped || plan->together
                             ? (size_t)plan->kv_heads * decode_head_state_floats(plan)
                             : 0;
    const size_t counts[SCRATCH_PARTS][2] = {
        {rows * dk, f}, {decode_prepared_floats(plan), f},
        {rows * chunk * ATTN_DECODE_TILE_CHUNKS, f}, {decode_accumulator_floats(plan), f},
        {rows, f}, {rows, f}, {2 * rows, f}, {chunk * dk, f}, {values, f}, {chunk, f},
        {chunk, 1}, {(size_t)plan->group_size, 1}, {(size_t)most_splits, sizeof(double)},
        {dv, f}, {rows, f}, {keys16, sizeof(uint16_t)}, {values16, sizeof(uint16_t)},
        {heads, f}, {plan->together ? 2 * (size_t)plan->kv_heads : 0, 1}};
    *total = 0;
    for (int n = 0; n < SCRATCH_PARTS; ++n) {
        size_t part;
        if (!attn_mul_size(counts[n][0], counts[n][1], &part) ||
            !attn_call_round_bytes(part, &part) || !attn_add_size(*total, part, total))
            return false;
        bytes[n] = part;
    }
    return true;
}

static void scratch_carve(decode_scratch *scratch, const size_t bytes[SCRATCH_PARTS],
                          char *base) {
    void *parts[SCRATCH_PARTS];
    for (int n = 0; n < SCRATCH_PARTS; ++n) {
        parts[n] = base;
        base += bytes[n];
    }
    scratch->queries = parts[0], scratch->prepared = parts[1], scratch->scores = parts[2];
    scratch->accumulator = parts[3], scratch->row_max = parts[4], scratch->row_sum = parts[5];
    scratch->rescale = parts[6], scratch->keys = parts[7], scratch->values = parts[8];
    scratch->additive = parts[9], scratch->allowed = parts[10], scratch->classes = parts[11];
    scratch->weights = parts[12], scratch->merged = parts[13], scratch->carried = parts[14];
    scratch->keys16 = parts[15], scratch->values16 = parts[16];
    scratch->head_states = parts[17], scratch->head_flags = parts[18];
}

const char *attn_decode_kernel_path(attn_kernel_choice choice, attn_dtype cache_dtype,
                                    attn_dtype query_dtype, int64_t rows) {
    const attn_kernels *kernels = NULL;
    if (rows < 1 || attn_kernels_select(choice, &kernels, NULL) != ATTN_OK || kernels == NULL)
        return NULL;
    return decode_family_of(&kernels->decode, cache_dtype, query_dtype, rows,
                            ATTN_DECODE_Q8_TILE_MOST_DIM, false)
        ->name;
}

/* Validates the call's tensors against the cache and fills the problem sizes. */
static attn_status validate_decode(const attn_kv_cache *cache, const attn_tensor *q,
                                   const attn_options *options, const attn_tensor *out,
                                   const attn_tensor *lse, attn_problem *problem,
                                   attn_error *error) {
    if (cache == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "cache is NULL");
    /* q and out: F32, BF16 or F16, one dtype (that of q) */
    const attn_dtype operand = q != NULL && (q->dtype == ATTN_DTYPE_BF16 ||
                                             q->dtype == ATTN_DTYPE_F16)
                                   ? q->dtype
                                   : ATTN_DTYPE_F32;
    attn_status status = attn_check_tensor(q, "q", operand, 4, error);
    if (status != ATTN_OK) return status;
    const attn_kv_cache_config *config = &cache->config;
    if (q->shape[0] != config->sequences || q->shape[3] != config->key_dim)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "q.shape = [%lld, %lld, %lld, %lld]: expected [B = %lld, Tq, Hq, Dk = %lld]",
                         (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                         (long long)q->shape[3], (long long)config->sequences,
                         (long long)config->key_dim);
    if (q->shape[2] % config->kv_heads != 0)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "q.shape[2] (Hq) = %lld: must be a multiple of the cache's Hkv = %lld",
                         (long long)q->shape[2], (long long)config->kv_heads);
    if ((status = attn_check_tensor(out, "out", operand, 4, error)) != ATTN_OK)
        return status;
    const int64_t expected_out[4] = {q->shape[0], q->shape[1], q->shape[2], config->value_dim};
    for (int d = 0; d < 4; ++d)
        if (out->shape[d] != expected_out[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "out.shape[%d] = %lld: expected %lld ([B, Tq, Hq, Dv])", d,
                             (long long)out->shape[d], (long long)expected_out[d]);
    if (lse != NULL) {
        if ((status = attn_check_tensor(lse, "lse", ATTN_DTYPE_F32, 3, error)) != ATTN_OK)
            return status;
        const int64_t expected_lse[3] = {q->shape[0], q->shape[2], q->shape[1]};
        for (int d = 0; d < 3; ++d)
            if (lse->shape[d] != expected_lse[d])
                return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                                 "lse.shape[%d] = %lld: expected %lld ([B, Hq, Tq])", d,
                                 (long long)lse->shape[d], (long long)expected_lse[d]);
    }
    if (options->key_lengths != NULL || options->key_positions != NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.%s is set: the cache defines key lengths and positions",
                         options->key_lengths != NULL ? "key_lengths" : "key_positions");
    int64_t longest = 1;
    for (int64_t b = 0; b < config->sequences; ++b)
        if (cache->lengths[b] > longest) longest = cache->lengths[b];
    if (longest > INT32_MAX)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "cache: a sequence of %lld tokens exceeds int32 key lengths",
                         (long long)longest);
    memset(problem, 0, sizeof *problem);
    problem->batch = config->sequences;
    problem->query_length = q->shape[1];
    problem->key_length = longest;
    problem->query_heads = q->shape[2];
    problem->kv_heads = config->kv_heads;
    problem->group_size = q->shape[2] / config->kv_heads;
    problem->key_dim = config->key_dim;
    problem->value_dim = config->value_dim;
    problem->scale = attn_effective_scale(options, config->key_dim);
    return ATTN_OK;
}


/* One region of merge_partials: the rows it claims, each worker's report. */
typedef struct merge_region {
    const decode_plan *plan;
    const attn_call *call;
    const size_t *scratch_bytes;
    int64_t next_rows, row_total;
    row_report *reports; /* [threads] */
} merge_region;

enum { MERGE_CLAIM_ROWS = 16 }; /* rows per claim: one claim's cost against 16 rows' merges */
enum { MERGE_PARALLEL_FLOATS = 1 << 16 }; /* partial floats worth a merge on several threads */

float *decode_row_target(const decode_plan *plan, const decode_scratch *scratch, int64_t b,
                         int64_t h, int64_t i) {
    const attn_tensor *out = plan->out;
    return out->dtype == ATTN_DTYPE_F32 && out->stride[3] == 1 ? attn_f32_at4(out, b, i, h, 0)
                                                               : scratch->merged;
}

void decode_write_row(const decode_plan *plan, decode_scratch *scratch, int64_t b, int64_t h,
                      int64_t i, float *row, float lse) {
    const attn_options *options = plan->options;
    attn_tensor *out = plan->out;
    const int64_t Hq = plan->q->shape[2], Tq = plan->query_length, Dv = plan->value_dim;
    const int64_t index = (b * Hq + h) * Tq + i;
    if (i >= attn_mask_query_count(plan->mask, b)) { /* padding row */
        for (int64_t e = 0; e < Dv; ++e) row[e] = 0.0f;
        lse = -INFINITY;
    } else if (lse == -INFINITY) {
        if (options->empty_rows == ATTN_EMPTY_ROWS_ERROR && index < scratch->report->first_empty)
            scratch->report->first_empty = index;
        if (options->empty_rows == ATTN_EMPTY_ROWS_NAN) {
            for (int64_t e = 0; e < Dv; ++e) row[e] = NAN;
            lse = NAN;
        }
    }
    if (options->sinks != NULL && i < attn_mask_query_count(plan->mask, b)) { /* mask/sinks.h */
        const float factor = attn_sink_fold(&lse, attn_sink_logit(options, h));
        for (int64_t e = 0; e < Dv; ++e) row[e] *= factor;
    }
    if (out->dtype == ATTN_DTYPE_F32) {
        if (row == scratch->merged) /* a strided float32 out */
            for (int64_t e = 0; e < Dv; ++e) *attn_f32_at4(out, b, i, h, e) = row[e];
    } else { /* rounded once; a finite value beyond the type is an error */
        uint16_t *o_row = (uint16_t *)out->data + b * out->stride[0] + i * out->stride[1] +
                          h * out->stride[2];
        const int64_t stride = out->stride[3];
        const int64_t overflowed = out->dtype == ATTN_DTYPE_BF16
                                       ? plan->kernels->convert.f32_to_bf16(Dv, row, o_row, stride)
                                       : plan->kernels->convert.f32_to_f16(Dv, row, o_row, stride);
        if (overflowed > 0 && index < scratch->report->first_overflow)
            scratch->report->first_overflow = index;
    }
    if (plan->lse != NULL) *attn_f32_at3(plan->lse, b, h, i) = lse;
}

/* Merges the splits of row `index` = b*Hq*Tq + h*Tq + i and writes it. */
static void merge_row(const decode_plan *plan, decode_scratch *scratch, int64_t index) {
    const int64_t Hq = plan->q->shape[2], Tq = plan->query_length, Dv = plan->value_dim;
    const int64_t rows = plan->rows;
    const int64_t b = index / (Hq * Tq), h = index / Tq % Hq, i = index % Tq;
    const int64_t kv_head = h / plan->group_size;
    const int64_t r = (h % plan->group_size) * Tq + i;
    const int64_t task = plan->first_task[b] + kv_head * plan->split_counts[b];
    float *row = decode_row_target(plan, scratch, b, h, i);
    float merged_lse;
    attn_merge_row((int)plan->split_counts[b], plan->partial_lse + task * rows + r, rows,
                   plan->partial_out + (task * rows + r) * Dv, rows * Dv, Dv, scratch->weights,
                   row, &merged_lse);
    decode_write_row(plan, scratch, b, h, i, row, merged_lse);
}

static void merge_worker(void *context, int worker) {
    merge_region *region = context;
    decode_scratch scratch;
    scratch_carve(&scratch, region->scratch_bytes, attn_call_workspace(region->call, worker));
    scratch.report = &region->reports[worker];
    for (int64_t first; (first = attn_parallel_claim(&region->next_rows) * MERGE_CLAIM_ROWS) <
                        region->row_total;) {
        const int64_t end = first + MERGE_CLAIM_ROWS < region->row_total ? first + MERGE_CLAIM_ROWS
                                                                          : region->row_total;
        for (int64_t index = first; index < end; ++index) merge_row(region->plan, &scratch, index);
    }
}

/* Writes the merged rows of every (b, h, i) into out / lse (decode_write_row), each worker's
 * findings into reports [threads]. */
static void merge_partials(const decode_plan *plan, const attn_call *call,
                           const size_t scratch_bytes[SCRATCH_PARTS], row_report *reports) {
    const int64_t B = plan->cache->config.sequences, Hq = plan->q->shape[2];
    const int64_t row_total = B * Hq * plan->query_length;
    merge_region region = {.plan = plan, .call = call, .scratch_bytes = scratch_bytes,
                           .row_total = row_total, .reports = reports};
    /* The merge reads every split's partial rows: below MERGE_PARALLEL_FLOATS of them a
     * second thread's hand-off costs more than it saves. */
    double partial_floats = 0.0;
    for (int64_t b = 0; b < B; ++b)
        partial_floats += (double)plan->split_counts[b] * (double)(Hq * plan->query_length * plan->value_dim);
    attn_parallel_run(partial_floats < MERGE_PARALLEL_FLOATS ? 1 : call->threads, merge_worker,
                      &region);
}

/* The call's status from the workers' reports: the first empty row under
 * ATTN_EMPTY_ROWS_ERROR, else the first overflowing one. */
static attn_status report_rows(const decode_plan *plan, const attn_call *call,
                               const row_report *reports, attn_error *error) {
    const int64_t Hq = plan->q->shape[2], Tq = plan->query_length;
    const int64_t row_total = plan->cache->config.sequences * Hq * Tq;
    int64_t first_empty = row_total, first_overflow = row_total;
    for (int t = 0; t < call->threads; ++t) {
        if (reports[t].first_empty < first_empty) first_empty = reports[t].first_empty;
        if (reports[t].first_overflow < first_overflow) first_overflow = reports[t].first_overflow;
    }
    if (first_empty >= row_total && first_overflow < row_total)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "out (%s) at b = %lld, i = %lld, h = %lld: the attention output does not "
                         "fit (largest %g); use a float32 or bfloat16 out",
                         attn_dtype_name(plan->out->dtype), (long long)(first_overflow / (Hq * Tq)),
                         (long long)(first_overflow % Tq), (long long)(first_overflow / Tq % Hq),
                         plan->out->dtype == ATTN_DTYPE_F16 ? 65504.0 : 3.3895313892515355e38);
    if (first_empty < row_total)
        return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                         "query row (b = %lld, h = %lld, i = %lld) has no allowed key in %s "
                         "(options.empty_rows = ERROR; use ZERO or NAN to accept it)",
                         (long long)(first_empty / (Hq * Tq)), (long long)(first_empty / Tq % Hq),
                         (long long)(first_empty % Tq),
                         plan->cache->keys_name != NULL ? plan->cache->keys_name : "the cache");
    return ATTN_OK;
}


/* Keys per step of the heads of a split (run_split_stepped): STEP_BYTES of stored K and V
 * of all Hkv heads, a multiple of the chunk, at least one chunk. */
static int64_t step_tokens(const attn_kv_cache *cache, int64_t kv_heads) {
    const attn_kv_cache_config *config = &cache->config;
    const int64_t token_bytes = kv_heads * (config->key_dim + (cache->value_pool != NULL ? config->value_dim : 0)) *
                                (int64_t)attn_dtype_size(config->dtype);
    const int64_t tokens = STEP_BYTES / token_bytes / ATTN_DECODE_CHUNK * ATTN_DECODE_CHUNK;
    return tokens < ATTN_DECODE_CHUNK ? ATTN_DECODE_CHUNK : tokens;
}


/* A decode's work: every cached key's products with every query row, and one read of the
 * keys and values (the threads by work, and the split-KV cap). */
static void decode_work(const attn_kv_cache *cache, const attn_problem *problem, double *flops,
                        double *bytes) {
    double keys = 0.0;
    for (int64_t b = 0; b < cache->config.sequences; ++b) keys += (double)cache->lengths[b];
    const double row_floats = (double)(problem->key_dim + problem->value_dim);
    *flops = 2.0 * keys * (double)(problem->query_heads * problem->query_length) * row_floats;
    *bytes = keys * (double)problem->kv_heads * row_floats *
             (double)attn_dtype_size(cache->config.dtype);
}

static int64_t default_split_tokens(const attn_kv_cache *cache, const attn_problem *problem) {
    int64_t longest = 1;
    for (int64_t b = 0; b < cache->config.sequences; ++b)
        if (cache->lengths[b] > longest) longest = cache->lengths[b];
    const int64_t groups = cache->config.sequences * problem->kv_heads;
    int64_t splits_wanted = groups >= TARGET_TASKS ? 1 : (TARGET_TASKS + groups - 1) / groups;
    /* No more splits than threads the work keeps busy: a call too small for a second thread
     * merges no partials (from the shapes only, so the same for any thread count). */
    double flops, bytes;
    decode_work(cache, problem, &flops, &bytes);
    const int64_t worth = attn_call_threads_worth(flops, bytes);
    if (splits_wanted > worth) splits_wanted = worth;
    int64_t tokens = (longest + splits_wanted - 1) / splits_wanted;
    tokens = (tokens + ATTN_DECODE_CHUNK - 1) / ATTN_DECODE_CHUNK * ATTN_DECODE_CHUNK;
    return tokens > MOST_SPLIT_TOKENS ? MOST_SPLIT_TOKENS : tokens;
}


/* What the loop and the kernels request ahead, and what the mask asks of each chunk, fixed
 * for the call (once call->mask is made). */
static void plan_requests(decode_plan *plan, const attn_call *call) {
    const attn_kv_cache *cache = plan->cache;
    const attn_dtype dtype = cache->config.dtype;
    const decode_family *family = plan->family;
    const bool values = cache->value_pool != NULL, f32 = dtype == ATTN_DTYPE_F32;
    /* The chunk's values before its scores, for groups reading them in place (one row: a
     * stream the hardware follows; converted values: requested a chunk earlier by their
     * conversion). With the heads of a split together, float32 storage only: 16-bit rows
     * read in place run faster without. */
    const values_request request = family->values_request;
    plan->values_before_scores =
        plan->rows >= 2 && values &&
        (request == VALUES_REQUEST_ALWAYS || (request == VALUES_REQUEST_F32 && f32)) &&
        (!plan->together || f32);
    /* 8-bit in place: the score kernel requests each key's value row as it scores the key
     * (registry.h score_chunk_q8, `ahead`), so that the P · V finds them in L2; the P · V
     * requests the next chunk's values for int8, and for fp8 where the hardware prefetchers
     * cannot follow a head's rows (token-major pages); there the score kernel leaves out
     * the rows the previous chunk's P · V requested already (accumulate_q8_requests_ahead) */
    const bool in_place_8bit = request == VALUES_REQUEST_8BIT;
    plan->values_request_next = in_place_8bit && (dtype == ATTN_DTYPE_Q8 || plan->interleaved);
    plan->scores_request_values =
        in_place_8bit && values &&
        !(plan->interleaved && plan->kernels->decode.accumulate_q8_requests_ahead);
    /* Logits need more than the scale when a soft-cap or additive term applies; a chunk's
     * class depends on the query head only through a per-head block layout or boolean mask
     * (otherwise one classification serves the group). */
    plan->transform = plan->softcap > 0.0f || call->mask.has_additive;
    plan->per_head_classes =
        call->options.block_layout != NULL || call->options.mask != NULL;
    /* bf16 tiles: P · V of up to ATTN_DECODE_TILE_CHUNKS chunks of one page at once for an
     * accumulator that leaves L1 (one that stays there gains nothing, and the value stage
     * of 4 chunks would leave L1), and for fp8 read in place (a chunk's P · V after the next
     * chunks' scores) */
    const int64_t tile_row = ATTN_DECODE_TILE_ROW_FLOATS(plan->value_dim);
    const bool fp8_in_place = family->head_scale_at_finish && !decode_family_widens_fp8(family);
    plan->tile_chunks = fp8_in_place ||
                                plan->rows * tile_row * (int64_t)sizeof(float) > TILE_L1_BYTES
                            ? ATTN_DECODE_TILE_CHUNKS
                            : 1;
}

/* Fills the plan from the begun call and the cache: sizes, split size, the family and how
 * the heads of a split run, the splits of each sequence and the first task of each; returns
 * the most splits of a sequence. */
static int64_t plan_decode(decode_plan *plan, const attn_call *call, const attn_kv_cache *cache,
                           const attn_tensor *q) {
    const attn_problem *problem = &call->problem;
    plan->cache = cache;
    plan->q = q;
    plan->kernels = call->kernels;
    plan->scale = problem->scale;
    plan->softcap = call->options.softcap;
    plan->query_length = problem->query_length;
    plan->group_size = problem->group_size;
    plan->rows = problem->group_size * problem->query_length;
    plan->key_dim = problem->key_dim;
    plan->value_dim = problem->value_dim;
    plan->split_tokens = call->execution.tile_k > 0 ? call->execution.tile_k
                                                    : default_split_tokens(cache, problem);
    plan->kv_heads = problem->kv_heads;
    plan->interleaved = cache->key_head_stride < cache->key_token_stride && problem->kv_heads > 1;
    plan->family = decode_family_of(&call->kernels->decode, cache->config.dtype, q->dtype,
                                    plan->rows, plan->key_dim, plan->interleaved);
    const bool p_rounded = plan->family->accumulator != ACCUMULATOR_TILE_ROWS &&
                           (q->dtype == ATTN_DTYPE_BF16 || q->dtype == ATTN_DTYPE_F16);
    plan->p_type = p_rounded ? q->dtype : ATTN_DTYPE_F32;
    /* token-major pages: the heads of a split together chunk by chunk, unless the family
     * holds a chunk's P · V back (the tiles') or the values are the keys (MLA, one head) */
    plan->together = plan->interleaved && cache->value_pool != NULL && plan->family->flush == NULL;
    plan->step_tokens = step_tokens(cache, problem->kv_heads);
    plan->stepped = plan->interleaved && !plan->together && plan->split_tokens > plan->step_tokens;
    int64_t most_splits = 1;
    for (int64_t b = 0; b < problem->batch; ++b) {
        const int64_t splits = (cache->lengths[b] + plan->split_tokens - 1) / plan->split_tokens;
        plan->split_counts[b] = splits < 1 ? 1 : splits;
        if (plan->split_counts[b] > most_splits) most_splits = plan->split_counts[b];
        plan->first_task[b] = plan->task_count;
        plan->task_count += problem->kv_heads * plan->split_counts[b];
    }
    return most_splits;
}

/* The threads by the call's work (decode_work). Items: the tasks, or on token-major pages
 * (where one worker takes every head of a split, so that the lines it brings in for head h
 * serve head h + 1) the splits. */
static int decode_threads(const decode_plan *plan, const attn_call *call) {
    double flops, bytes;
    decode_work(plan->cache, &call->problem, &flops, &bytes);
    const int64_t items =
        plan->interleaved ? plan->task_count / call->problem.kv_heads : plan->task_count;
    return attn_call_threads_for_work(call, items, flops, bytes);
}


/* One region of attn_decode: the work items it claims (a task, or on token-major pages the
 * Hkv tasks of one split). Each task writes its own partial, merged in split order, so which
 * worker runs an item never changes a bit. */
typedef struct decode_region {
    const decode_plan *plan;
    const size_t *scratch_bytes;
    const attn_call *call;
    int64_t next_item;
    row_report *reports; /* [threads] */
} decode_region;

static void decode_worker(void *context, int worker) {
    decode_region *region = context;
    const decode_plan *plan = region->plan;
    decode_scratch scratch;
    scratch_carve(&scratch, region->scratch_bytes, attn_call_workspace(region->call, worker));
    scratch.report = &region->reports[worker];
    const int64_t B = plan->cache->config.sequences;
    const int64_t per_item = plan->interleaved ? plan->kv_heads : 1;
    const int64_t item_count = plan->task_count / per_item;
    for (int64_t item; (item = attn_parallel_claim(&region->next_item)) < item_count;) {
        int64_t b = 0; /* first_task[b] is a multiple of Hkv */
        while (b + 1 < B && plan->first_task[b + 1] / per_item <= item) ++b;
        const int64_t local = item - plan->first_task[b] / per_item;
        if (plan->together) {
            decode_run_split_together(plan, &scratch, b, local);
            continue;
        }
        if (plan->stepped) {
            decode_run_split_stepped(plan, &scratch, b, local);
            continue;
        }
        for (int64_t n = 0; n < per_item; ++n) {
            const int64_t head = plan->interleaved ? n : local / plan->split_counts[b];
            const int64_t split = plan->interleaved ? local : local % plan->split_counts[b];
            decode_run_task(plan, &scratch, b, head, split,
                            plan->first_task[b] + head * plan->split_counts[b] + split);
        }
    }
}

attn_status attn_decode(const attn_kv_cache *cache, const attn_tensor *q,
                        const attn_options *options, attn_tensor *out, attn_tensor *lse,
                        const attn_execution *execution, attn_error *error) {
    attn_call call;
    const attn_status status = attn_call_begin(&call, options, execution, error);
    if (status != ATTN_OK) {
        attn_call_end(&call);
        return status;
    }
    return attn_decode_run(&call, cache, q, out, lse, error);
}

attn_status attn_decode_run(const attn_call *begun, const attn_kv_cache *cache,
                            const attn_tensor *q, attn_tensor *out, attn_tensor *lse,
                            attn_error *error) {
    attn_call call = *begun;
    attn_status status =
        call.options.dropout_p != 0.0f
            ? attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                        "options.dropout_p = %.9g: decoding applies no dropout (attn_forward, "
                        "attn_backward and varlen do)",
                        (double)call.options.dropout_p)
            : validate_decode(cache, q, &call.options, out, lse, &call.problem, error);
    if (status == ATTN_OK) { /* out and lse against q and the options (call.h) */
        const attn_call_tensor outputs[2] = {{out, "out", NULL}, {lse, "lse", NULL}};
        const attn_call_tensor inputs[1] = {{q, "q", NULL}};
        status = attn_call_check_aliasing(outputs, 2, inputs, 1, &call.options, &call.problem,
                                          error);
    }
    if (status != ATTN_OK) {
        attn_call_end(&call);
        return status;
    }
    const attn_problem *problem = &call.problem;
    decode_plan plan;
    memset(&plan, 0, sizeof plan);
    /* The plan's bookkeeping (B entries each); the cache defines the key lengths. */
    const int64_t B = problem->batch;
    enum { STACK_SEQUENCES = 64 }; /* a small batch's bookkeeping needs no allocation */
    int32_t stack_lengths[STACK_SEQUENCES];
    int64_t stack_splits[STACK_SEQUENCES], stack_first[STACK_SEQUENCES];
    const bool on_stack = B <= STACK_SEQUENCES;
    int32_t *key_lengths = on_stack ? stack_lengths : malloc((size_t)B * sizeof(int32_t));
    plan.split_counts = on_stack ? stack_splits : malloc((size_t)B * sizeof(int64_t));
    plan.first_task = on_stack ? stack_first : malloc((size_t)B * sizeof(int64_t));
    if (key_lengths == NULL || plan.split_counts == NULL || plan.first_task == NULL)
        status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "no memory for the decode plan");
    if (status == ATTN_OK) {
        for (int64_t b = 0; b < B; ++b) key_lengths[b] = (int32_t)cache->lengths[b];
        call.options.key_lengths = key_lengths;
        status = attn_validate_options(&call.options, problem, error);
    }

    size_t scratch_bytes[SCRATCH_PARTS], scratch_total = 0, partial_bytes = 0;
    if (status == ATTN_OK) {
        const int64_t most_splits = plan_decode(&plan, &call, cache, q);
        /* Working memory: a scratch per thread, then (unless direct) the partial results
         * shared by the tasks and the merge, task_count * rows * (Dv + 1) floats. */
        size_t partial_floats;
        if (!scratch_layout(&plan, most_splits, scratch_bytes, &scratch_total) ||
            !attn_mul_size((size_t)plan.task_count, (size_t)plan.rows, &partial_floats) ||
            !attn_mul_size(partial_floats, (size_t)problem->value_dim + 1, &partial_floats) ||
            !attn_mul_size(partial_floats, sizeof(float), &partial_bytes))
            status = attn_fail(error, ATTN_ERROR_OVERFLOW,
                               "q: the split-KV partial buffer overflows");
        plan.direct = most_splits == 1;
        if (plan.direct) partial_bytes = 0;
    }
    if (status == ATTN_OK)
        status = attn_call_reserve(&call, decode_threads(&plan, &call), scratch_total,
                                   partial_bytes, "attn_decode", error);
    if (status == ATTN_OK) {
        plan.mask = &call.mask; /* (the mask context is made by attn_call_reserve) */
        plan_requests(&plan, &call);
        /* Soft-cap or additive terms (or a PARTIAL chunk): the loop's pipeline applies the
         * scale too, and the softmax runs at scale 1 (decode_task.c). */
        plan.logits = (attn_logit_pipeline){plan.scale, plan.softcap, call.mask.has_additive};
        plan.options = &call.options, plan.out = out, plan.lse = lse;
        plan.partial_out = plan.direct ? NULL : attn_call_shared(&call);
        plan.partial_lse =
            plan.direct ? NULL : plan.partial_out + plan.task_count * plan.rows * plan.value_dim;
        row_report reports[call.threads]; /* at most ATTN_MAX_THREADS */
        const int64_t row_total = problem->batch * problem->query_heads * problem->query_length;
        for (int t = 0; t < call.threads; ++t) reports[t] = (row_report){row_total, row_total};
        decode_region region = {&plan, scratch_bytes, &call, 0, reports};
        attn_parallel_run(call.threads, decode_worker, &region);
        if (!plan.direct) merge_partials(&plan, &call, scratch_bytes, reports);
        status = report_rows(&plan, &call, reports, error);
    }
    attn_call_end(&call);
    if (!on_stack) free(key_lengths), free(plan.split_counts), free(plan.first_task);
    return status;
}
