/*
 * decode.c — attn_decode: attention of a few new query tokens per sequence against a KV
 * cache, with split-KV (flash-decoding) across threads and an exact LSE merge. (Its naive
 * oracle, attn_reference_decode, is in reference_decode.c.)
 *
 * Work: one task per (sequence b, KV head, split s), where split s covers tokens
 * [s * split_tokens, (s + 1) * split_tokens) of b, clipped to the keys the mask can allow.
 * A task streams its keys chunk by chunk (a chunk never crosses a page), converting stored
 * bf16/fp16 and dequantising 8-bit storage (int8, fp8) to float32 once per chunk into a
 * chunk-sized buffer (bf16, fp16 and fp8 for groups of <= 4 rows, 16-bit groups of up to 11
 * rows on token-major pages, int8 always: read in place by the kernel instead, scales folded
 * into scores and weights), and serves all rows = (Hq / Hkv) * Tq query rows of
 * its group from it (groups of >= ATTN_DECODE_GROUP_ROWS through the large-group kernels,
 * with the queries prepared and the accumulator kept transposed for the whole task; bf16
 * queries against bf16 storage on bf16 tiles (AMX, or VDPBF16PS on AMD) from the registry's
 * tile_rows_bf16, keys and values read in place, the P · V of up to ATTN_DECODE_TILE_CHUNKS
 * chunks per pass, and against fp8 storage on the same arithmetic from tile_rows_fp8, each
 * chunk widened exactly to bf16 first or, for small groups, read in place; int8
 * storage on AMX-INT8 tiles, scores for every group and P · V from
 * ATTN_DECODE_Q8_TILE_VALUE_ROWS rows; the one choice is decode_path_of): scores, mask,
 * online softmax, value accumulation (docs/attention-math.md §2.1),
 * each step a call into the kernel registry (kernels/registry.h, decode part: generic, AVX2,
 * AVX-512 or AMX).
 * A task's normalised partial (O, LSE) goes to its own slot; the merge then combines the
 * splits of each row in split order (§3). No shared accumulation, split boundaries
 * independent of the thread count: results are bitwise identical for any thread count.
 * On token-major pages (a caller's [page, slot, head, D]) one thread runs the Hkv tasks of a
 * split, every head's rows of a chunk together (run_split_together), each head's operations
 * those of its whole task.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "cache/decode_path.h"
#include "kernels/quant.h"
#include "kernels/registry.h"
#include "cache/merge.h"
#include "call/call.h"
#include "core/internal.h"
#include "core/parallel.h"
#include "kernels/half.h"
#include "mask/logits.h"
#include "mask/mask.h"

/* Default split size: at most 4096 tokens, and small enough that the call has about
 * TARGET_TASKS tasks even for one sequence with one KV head (MQA, MLA), so both cores work
 * on short contexts too; a multiple of the chunk, at least one chunk. It depends on the
 * cache and the query only, never on the thread count. Why 4096: a task's first chunk
 * starts cold (no earlier chunk requested its rows), and each task prepares its queries and
 * adds a partial to the merge (MLA's 128 x 576 rows), costs that smaller splits pay more
 * often, most visibly for int8 GQA and MLA. */
#define MOST_SPLIT_TOKENS 4096
#define TARGET_TASKS 16
/* An accumulator of more bytes than this takes the bf16 tiles' P · V of several chunks at
 * once (run_task); half of a 48 KiB L1. */
#define TILE_L1_BYTES (24 * 1024)
/* Token-major pages on the tiles' paths: the stored K and V bytes of all heads per step of
 * the heads of a split (run_split_stepped, step_tokens), so that the lines one head's step
 * brings in (its neighbours' rows with its own) are still in the L2 for the next head's step.
 * Whole splits one after the other, or steps of 1024 keys (4 MiB for Hkv 8, bf16, D 128),
 * outgrow the L2 between one head's step and the next's. STEP_BYTES is the tunable; the
 * ratio of flash-attn's [page, slot, head, D] pages to the library's with it:
 * bench/results/intel-xeon-amx.md, "Serving". */
#define STEP_BYTES (256 * 1024)

/* How a task computes (the one choice, used by run_task and by attn_decode_kernel_path). */
typedef enum decode_path {
    PATH_ROWS,       /* chunks converted to float32 (if stored narrower), score_chunk etc. */
    PATH_FUSED_BF16, /* small groups read bf16 storage in place (score_chunk_bf16) */
    PATH_FUSED_F16,  /* ... and IEEE half storage (score_chunk_f16: the converted path's bits) */
    PATH_WIDENED_BF16, /* bf16 storage read in place with PATH_ROWS's bits (token-major pages:
                          score_chunk_bf16_widened, layout_path) */
    PATH_FUSED_Q8,   /* 8-bit storage read in place (score_chunk_q8) */
    PATH_GROUP,      /* large groups on float32 chunks (score_chunk_group) */
    PATH_TILES,      /* bf16 queries on bf16 tiles (score_chunk_tiles: AMX, VDPBF16PS) */
    PATH_Q8_TILES,   /* int8 storage on int8 tiles (score_chunk_q8_tiles: AMX-INT8) */
    PATH_Q8_TILE_SCORES, /* ... scores on the tiles, P·V by accumulate_chunk_q8 (small groups) */
    PATH_FP8_TILES,  /* bf16 queries of large groups against fp8 storage: chunks widened to
                        bf16 (exactly), then the bf16 tiles of PATH_TILES */
} decode_path;

/* Everything a task needs, fixed for the call. */
typedef struct decode_plan {
    const attn_kv_cache *cache;
    const attn_tensor *q;                 /* [B, Tq, Hq, Dk] */
    const attn_kernels *kernels;
    decode_path path;                     /* every task's (decode_path_of, layout_path) */
    const struct decode_kind *kind;       /* ... and what follows from it (decode_kind_of) */
    const attn_mask_context *mask;        /* the call's */
    attn_logit_pipeline logits;           /* scale, soft-cap, additive terms of a chunk */
    float scale, softcap;
    int64_t query_length, group_size, rows; /* rows = group_size * Tq; row r = (r / Tq, r % Tq) */
    int64_t key_dim, value_dim;
    int64_t split_tokens;
    int64_t *split_counts;                /* [B] splits of each sequence (>= 1) */
    int64_t *first_task;                  /* [B] index of task (b, head 0, split 0) */
    int64_t task_count;
    /* Token-major pages (attn_decode): the Hkv tasks of a split on one thread, chunk by chunk
     * when `together` (heads_together), else in steps of step_tokens keys when `stepped` */
    bool interleaved, together, stepped;
    int64_t kv_heads, step_tokens;
    float *partial_out;                   /* [task][rows][Dv] */
    float *partial_lse;                   /* [task][rows] */
} decode_plan;

/* Per-thread working memory of a task (and of the merge), carved from the thread's part of
 * the call's arena. */
typedef struct decode_scratch {
    float *queries;     /* [rows][Dk] */
    float *prepared;    /* [rows][ATTN_DECODE_PREPARED_DIM(Dk)]: as score_chunk_bf16 reads them,
                           or [Dk][ATTN_DECODE_GROUP_STRIDE(rows)]: as score_chunk_group does,
                           or ATTN_DECODE_TILE_QUERY_ELEMENTS bf16: as score_chunk_tiles does,
                           or ATTN_DECODE_Q8_TILE_QUERY_BYTES: as score_chunk_q8_tiles does,
                           or ATTN_Q8_PREPARED_BYTES: as score_chunk_q8 reads int8 keys */
    float *scores;      /* [rows][ATTN_DECODE_CHUNK], or ATTN_DECODE_TILE_CHUNKS such blocks on
                           the bf16 tiles (the chunks whose P · V is pending) */
    float *accumulator; /* [rows][Dv], or [Dv][ATTN_DECODE_GROUP_STRIDE(rows)] for a large group,
                           or [ATTN_DECODE_GROUP_STRIDE(rows)][ATTN_DECODE_TILE_ROW_FLOATS(Dv)]
                           on the bf16 tiles */
    float *row_max;     /* [rows] */
    float *row_sum;     /* [rows] */
    float *rescale;     /* [2][rows] factor of each accumulator row at a chunk (two chunks'
                           when P · V runs one chunk late, run_task) */
    float *keys;        /* [ATTN_DECODE_CHUNK][Dk] converted keys */
    float *values;      /* [ATTN_DECODE_CHUNK][Dv] converted values (or a tile kernel's stage) */
    float *additive;    /* [ATTN_DECODE_CHUNK] the logit pipeline's additive terms of a row */
    uint8_t *allowed;   /* [ATTN_DECODE_CHUNK] the logit pipeline's predicate of a row */
    uint8_t *classes;   /* [group_size] tile class per query head */
    double *weights;    /* [most splits] merge weights of a row */
    float *merged;      /* [Dv] a merged row */
    float *carried;     /* [rows] bf16 tiles: the accumulator's factor over the pending chunks */
    uint16_t *keys16;   /* fp8 on bf16 tiles: [ATTN_DECODE_TILE_KEYS][Dk] keys widened to bf16 */
    uint16_t *values16; /* ... [ATTN_DECODE_TILE_KEYS][Dv] values (none with values_in_keys) */
    float *head_states; /* stepped, together: [Hkv] heads' state (head_state_floats) */
    uint8_t *head_flags; /* together: [2][Hkv] whether a chunk has any / only allowed keys for
                            a head's group */
} decode_scratch;

enum { SCRATCH_PARTS = 19 };

static const char *const decode_path_names[] = {"fp32 rows", "bf16 in place", "f16 in place",
                                                 "bf16 widened in place", "8-bit in place",
                                                 "fp32 large group", "bf16 tiles", "int8 tiles",
                                                 "int8 tile scores", "fp8 on bf16 tiles"};

/* The path of a task with `rows` query rows of `query_dtype` against `cache_dtype` storage. */
static decode_path decode_path_of(const attn_decode_kernels *kernels, attn_dtype cache_dtype,
                                  attn_dtype query_dtype, int64_t rows, int64_t key_dim) {
    /* int8 storage on int8 tiles where the registry has them: the same bits as the in-place
     * kernels below (registry.h), fewer instructions per stored element; small groups keep
     * the in-place P·V (ATTN_DECODE_Q8_TILE_VALUE_ROWS) */
    if (cache_dtype == ATTN_DTYPE_Q8 && kernels->score_chunk_q8_tiles != NULL &&
        key_dim <= ATTN_DECODE_Q8_TILE_MOST_DIM)
        return rows >= ATTN_DECODE_Q8_TILE_VALUE_ROWS || kernels->accumulate_chunk_q8 == NULL
                   ? PATH_Q8_TILES
                   : PATH_Q8_TILE_SCORES;
    /* bf16 queries (never float32 ones rounded) against bf16 storage on bf16 dot products
     * (AMX tiles, or VDPBF16PS where it runs at the FMA's rate) from the registry's
     * tile_rows_bf16 on; against fp8 storage, whose every value is a bf16 value, from
     * tile_rows_fp8 on: each chunk widened to bf16, the head's scales applied to the scores
     * and to the output */
    const bool tiles = kernels->score_chunk_tiles != NULL && query_dtype == ATTN_DTYPE_BF16;
    if (tiles && cache_dtype == ATTN_DTYPE_BF16 && rows >= kernels->tile_rows_bf16)
        return PATH_TILES;
    if (tiles && (cache_dtype == ATTN_DTYPE_FP8_E4M3 || cache_dtype == ATTN_DTYPE_FP8_E5M2) &&
        rows >= kernels->tile_rows_fp8)
        return PATH_FP8_TILES;
    /* Small groups read bf16 storage directly (kernels/registry.h, ATTN_DECODE_FUSED_ROWS). */
    if (cache_dtype == ATTN_DTYPE_BF16 && kernels->score_chunk_bf16 != NULL &&
        rows <= ATTN_DECODE_FUSED_ROWS)
        return PATH_FUSED_BF16;
    if (cache_dtype == ATTN_DTYPE_F16 && kernels->score_chunk_f16 != NULL &&
        rows <= ATTN_DECODE_FUSED_ROWS)
        return PATH_FUSED_F16;
    /* ... and 8-bit storage likewise, with its scales (int8: every group; its integer
     * products cost less than float FMAs even when many rows share a chunk, quant.h) */
    if (attn_dtype_is_quantized(cache_dtype) && kernels->score_chunk_q8 != NULL &&
        (rows <= ATTN_DECODE_FUSED_ROWS || cache_dtype == ATTN_DTYPE_Q8))
        return PATH_FUSED_Q8;
    /* Large groups (MQA, MLA): scores from queries prepared once per task for
     * score_chunk_group, keys widened or dequantised once per chunk (registry.h). */
    if (kernels->score_chunk_group != NULL && rows >= ATTN_DECODE_GROUP_ROWS) return PATH_GROUP;
    return PATH_ROWS;
}

/* The path of a task on token-major pages ([page, slot, head, D]: `interleaved`), where the
 * rows of one head are strided between the others': a group that would convert each 16-bit
 * chunk to float32 rows (PATH_ROWS) reads them in place instead, through the float32
 * kernels' own in-place forms (score_chunk_f16, score_chunk_bf16_widened: the same bits).
 * The conversion's pass over strided rows costs more than reading them in place there, while
 * on the library's contiguous pages converting once per chunk stays faster (docs/inference.md,
 * "Decoding"). Up to the registry's token_major_in_place_rows (AVX-512; AVX2 converts). */
static decode_path layout_path(const attn_decode_kernels *kernels, decode_path path,
                               attn_dtype cache_dtype, int64_t rows, bool interleaved) {
    if (path != PATH_ROWS || !interleaved || rows > kernels->token_major_in_place_rows)
        return path;
    if (cache_dtype == ATTN_DTYPE_F16 && kernels->score_chunk_f16 != NULL) return PATH_FUSED_F16;
    if (cache_dtype == ATTN_DTYPE_BF16 && kernels->score_chunk_bf16_widened != NULL)
        return PATH_WIDENED_BF16;
    return path;
}

/* Whether a PATH_FP8_TILES task of `rows` rows reads the stored fp8 rows in place
 * (registry.h score_chunk_tiles_fp8: small groups) instead of widening each chunk into
 * keys16 / values16 first. */
static bool fp8_tiles_in_place(const attn_decode_kernels *kernels, int64_t rows) {
    return kernels->score_chunk_tiles_fp8 != NULL && rows <= ATTN_DECODE_FUSED_ROWS;
}

/* Floats of a task's accumulator in its largest layout: [rows][Dv], transposed for a large
 * group, or with rows of ATTN_DECODE_TILE_ROW_FLOATS(Dv) for the bf16 tiles (>= rows * Dv). */
static size_t accumulator_floats(const decode_plan *plan) {
    return (size_t)ATTN_DECODE_TILE_ROW_FLOATS(plan->value_dim) *
           (size_t)ATTN_DECODE_GROUP_STRIDE(plan->rows);
}

/* n floats rounded up to a multiple of 16 (64 bytes). */
static size_t round_floats(size_t n) { return (n + 15) / 16 * 16; }

/* Floats of a task's prepared queries in their largest layout: for score_chunk_bf16, for
 * score_chunk_group, for the bf16 tiles (bf16 elements, two per float), for the int8 tiles or
 * for score_chunk_q8 on int8 storage (bytes), whichever is largest. */
static size_t prepared_floats(const decode_plan *plan) {
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

/* Floats of one head's state in a split whose heads take turns (run_split_stepped,
 * run_split_together; head_state): row_max [rows], row_sum [rows] (each rounded up to 16
 * floats, 64 bytes), the accumulator, the head's queries [rows][Dk] and prepared queries
 * (prepared_floats), made at its first step and kept for the others, and (together) its
 * scores [rows][ATTN_DECODE_CHUNK] and rescale factors [rows] of a chunk (each part a
 * multiple of 16 floats). */
static size_t head_state_floats(const decode_plan *plan) {
    return 2 * (size_t)ATTN_DECODE_GROUP_STRIDE(plan->rows) + round_floats(accumulator_floats(plan)) +
           round_floats((size_t)plan->rows * (size_t)plan->key_dim) +
           round_floats(prepared_floats(plan)) +
           round_floats((size_t)plan->rows * ATTN_DECODE_CHUNK) + round_floats((size_t)plan->rows);
}

/* Bytes of each part of one thread's scratch (64-byte multiples, in decode_scratch order)
 * and their total; false on overflow. */
static bool scratch_layout(const decode_plan *plan, int64_t most_splits,
                           size_t bytes[SCRATCH_PARTS], size_t *total) {
    const size_t rows = (size_t)plan->rows, dk = (size_t)plan->key_dim, dv = (size_t)plan->value_dim;
    const size_t f = sizeof(float), chunk = ATTN_DECODE_CHUNK;
    const size_t prepared = prepared_floats(plan); /* whichever layout runs */
    /* the accumulator: [rows][Dv], transposed for a large group, or with rows of
     * ATTN_DECODE_TILE_ROW_FLOATS(Dv) for the bf16 tiles, whichever is largest */
    const size_t accumulator = accumulator_floats(plan);
    /* converted values, or the value rows interleaved for the bf16 tiles */
    size_t values = chunk * dv;
    const size_t tile_values = ATTN_DECODE_TILE_VALUE_BYTES(plan->value_dim) / f;
    if (tile_values > values) values = tile_values;
    const size_t q8_values = (ATTN_DECODE_Q8_TILE_VALUE_BYTES(plan->value_dim) + f - 1) / f;
    if (q8_values > values) values = q8_values;
    /* fp8 on bf16 tiles: the pending chunks widened to bf16 (only when that path runs) */
    const attn_kv_cache_config *config = &plan->cache->config;
    const bool widens_fp8 = plan->path == PATH_FP8_TILES &&
                           !fp8_tiles_in_place(&plan->kernels->decode, plan->rows);
    const size_t keys16 = widens_fp8 ? (size_t)ATTN_DECODE_TILE_KEYS * dk : 0;
    const size_t values16 =
        widens_fp8 && !config->values_in_keys ? (size_t)ATTN_DECODE_TILE_KEYS * dv : 0;
    const size_t counts[SCRATCH_PARTS][2] = {
        {rows * dk, f}, {prepared, f}, {rows * chunk * ATTN_DECODE_TILE_CHUNKS, f}, {accumulator, f},
        {rows, f},      {rows, f},                {2 * rows, f},     {chunk * dk, f},
        {values, f},    {chunk, f},              {chunk, 1},        {(size_t)plan->group_size, 1},
        {(size_t)most_splits, sizeof(double)},    {dv, f}, {rows, f},
        {keys16, sizeof(uint16_t)}, {values16, sizeof(uint16_t)},
        {plan->stepped || plan->together ? (size_t)plan->kv_heads * head_state_floats(plan) : 0, f},
        {plan->together ? 2 * (size_t)plan->kv_heads : 0, 1}};
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

/* Pointer to `count` float32 rows of keys (values) of tokens [token, token + count) of one
 * head, all in one page: the stored rows themselves for F32, else converted into `buffer`
 * (8-bit formats: dequantised with their row scales and head factor, kernels/quant.h), the
 * conversion requesting the next chunk's rows `next` as it goes (NULL for none). */
static const float *chunk_rows(const decode_plan *plan, const void *stored,
                               const float *row_scales, float factor, int64_t count,
                               int64_t dim, int64_t row_stride, const void *next, float *buffer,
                               int64_t *stride) {
    const attn_kv_cache *cache = plan->cache;
    if (cache->config.dtype == ATTN_DTYPE_F32) {
        *stride = row_stride;
        return stored;
    }
    *stride = dim;
    if (attn_dtype_is_quantized(cache->config.dtype)) {
        plan->kernels->decode.dequantize_rows(cache->config.dtype, (int)count, (int)dim, stored,
                                              row_stride, row_scales, factor, buffer, next);
        return buffer;
    }
    /* one call per chunk, strided (token-major pages) or not */
    plan->kernels->decode.widen_rows(cache->config.dtype, (int)count, (int)dim, stored,
                                     row_stride, buffer, next);
    return buffer;
}

/* The Q8 row scales of a chunk's `count` slots as contiguous floats: in place when they are
 * (the library's own cache), else gathered from `stride` apart into `buffer` (a caller-owned
 * cache whose scales are [page, slot, head]); NULL stays NULL (no row scales). */
static const float *chunk_scales(const float *first, int64_t stride, int count, float *buffer) {
    if (first == NULL || stride == 1) return first;
    for (int c = 0; c < count; ++c) buffer[c] = first[c * stride];
    return buffer;
}

/* The P · V of one chunk, held back while the next chunk is scored: run_task calls it after
 * the next chunk's softmax, so that the out-of-order core can overlap this P · V, which
 * needs nothing of the next chunk, with the next chunk's scores and softmax (a chain of
 * latencies: the softmax's reductions, and the tile loads of int8 scores, which wait for the
 * older stores, the accumulator's among them). The accumulator sees the same operations in
 * the same order, hence the same bits. */
typedef struct late_values {
    int count;                 /* 0: none held */
    const void *values;        /* the chunk's stored value rows, value_stride elements apart */
    int64_t value_stride;
    const float *value_scales; /* Q8 row scales (NULL for none) */
    const void *next_values;   /* rows for the kernel to request (registry.h values_ahead) */
    const float *weights;      /* [rows][ATTN_DECODE_CHUNK] the chunk's P */
    const float *rescale;      /* [rows] the accumulator's factor at the chunk */
} late_values;

static void accumulate_late(const attn_decode_kernels *kernels, decode_path path, attn_dtype dtype,
                            int64_t rows, int64_t Dv, float value_factor, const late_values *late,
                            decode_scratch *scratch) {
    if (path == PATH_Q8_TILES)
        kernels->accumulate_chunk_q8_tiles((int)rows, late->count, (int)Dv, late->weights,
                                           late->rescale, late->values, late->value_stride,
                                           late->value_scales, value_factor, scratch->values,
                                           scratch->accumulator, late->next_values);
    else /* PATH_Q8_TILE_SCORES: P · V in place */
        kernels->accumulate_chunk_q8(dtype, (int)rows, late->count, (int)Dv, late->weights,
                                     late->rescale, late->values, late->value_stride,
                                     late->value_scales, value_factor, scratch->accumulator,
                                     late->next_values);
}

/* Requests `count` stored rows of `row_bytes` bytes, `stride_bytes` apart, into the L2 cache.
 * run_task asks for a chunk's values before scoring the chunk, so that for a GQA group (many
 * FMAs per key) they arrive during the score arithmetic instead of stalling the value pass
 * (on top of the kernels' own prefetch). */
static void prefetch_rows(const void *first_row, int count, int64_t stride_bytes,
                          int64_t row_bytes) {
    for (int c = 0; c < count; ++c)
        for (int64_t offset = 0; offset < row_bytes; offset += 64)
            __builtin_prefetch((const char *)first_row + c * stride_bytes + offset, 0, 2);
}

/* The chunk after the current one (run_task): `count` tokens (0: none) on pool page `page`
 * from slot `slot`. */
typedef struct next_chunk {
    int64_t page, slot, count;
} next_chunk;

/* Requests the Q8 row scales of the keys and values of head kv_head of the next chunk (a
 * short stream of their own, in another page of the pool, that the kernels would otherwise
 * wait for at the start of each chunk; in a caller's [page, slot, head] scales a head's are
 * Hkv floats apart). */
static void prefetch_scales(const attn_kv_cache *cache, int64_t kv_head, const next_chunk *next) {
    const int64_t page = next->page, slot = next->slot, count = next->count;
    if (count == 0) return;
    const int64_t f = (int64_t)sizeof(float);
    prefetch_rows(attn_cache_key_scales(cache, page, kv_head, slot), 1, 0,
                  ((count - 1) * cache->key_scale_token_stride + 1) * f);
    if (cache->value_pool != NULL)
        prefetch_rows(attn_cache_value_scales(cache, page, kv_head, slot), 1, 0,
                      ((count - 1) * attn_cache_value_scale_stride(cache) + 1) * f);
}

const char *attn_decode_kernel_path(attn_kernel_choice choice, attn_dtype cache_dtype,
                                    attn_dtype query_dtype, int64_t rows) {
    const attn_kernels *kernels = NULL;
    if (rows < 1 || attn_kernels_select(choice, &kernels, NULL) != ATTN_OK || kernels == NULL)
        return NULL;
    return decode_path_names[decode_path_of(&kernels->decode, cache_dtype, query_dtype, rows,
                                            ATTN_DECODE_Q8_TILE_MOST_DIM)];
}

/* The bf16 tiles' pending P · V: `chunks` chunks of `keys` keys in all (one page, from
 * `values`: bf16 rows, or with `stored` FP8_E4M3 / FP8_E5M2 the stored fp8 rows read in
 * place), their P blocks in scratch->scores, the accumulator's factor in scratch->carried. */
static void flush_tiles(const attn_decode_kernels *kernels, decode_scratch *scratch,
                        attn_dtype stored, int64_t rows, int64_t Dv, int keys,
                        const void *values, int64_t value_stride) {
    if (stored == ATTN_DTYPE_FP8_E4M3 || stored == ATTN_DTYPE_FP8_E5M2)
        kernels->accumulate_chunk_tiles_fp8(stored, (int)rows, keys, (int)Dv, scratch->scores,
                                            scratch->carried, values, value_stride,
                                            scratch->accumulator);
    else
        kernels->accumulate_chunk_tiles((int)rows, keys, (int)Dv, scratch->scores,
                                        scratch->carried, values, value_stride, scratch->values,
                                        scratch->accumulator);
}

/* What every task of the call computes with (its one decode_path) and what its kernels
 * request, fixed for the call (decode_kind_of). */
typedef struct decode_kind {
    decode_path path;
    bool fused_bf16, fused_f16, widened_bf16, fused_q8, group;
    bool fp8_tiles, fp8_in_place, tiles;  /* bf16 tiles (stored bf16 or fp8 rows) */
    attn_dtype tile_rows_dtype;           /* the rows the tiles' P · V reads */
    int tile_chunks;                      /* chunks per tile P · V */
    bool q8_values_on_tiles, q8_scores_on_tiles, late;
    bool bf16_prepared, q8_prepared;      /* queries prepared for score_chunk_bf16 / _q8 */
    bool transform;                       /* logits need more than the scale */
    bool per_head_classes;                /* a chunk's class differs between query heads */
    bool values_ahead, values_next_in_pv, score_requests_values;
    bool own_prefetch, converted, in_place, passes_next;
} decode_kind;

static decode_kind decode_kind_of(const decode_plan *plan) {
    const attn_kv_cache *cache = plan->cache;
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    const attn_dtype dtype = cache->config.dtype;
    const int64_t rows = plan->rows;
    decode_kind kind;
    memset(&kind, 0, sizeof kind);
    const decode_path path = kind.path = plan->path;
    kind.fused_bf16 = path == PATH_FUSED_BF16, kind.fused_q8 = path == PATH_FUSED_Q8;
    kind.fused_f16 = path == PATH_FUSED_F16, kind.widened_bf16 = path == PATH_WIDENED_BF16;
    kind.group = path == PATH_GROUP;
    /* bf16 tiles, on the stored bf16 rows or on fp8 rows widened to bf16 (fp8_tiles) */
    kind.fp8_tiles = path == PATH_FP8_TILES;
    /* ... read in place by the tile arithmetic where the registry can, for small groups
     * (registry.h score_chunk_tiles_fp8), else widened into keys16 / values16 first */
    kind.fp8_in_place = kind.fp8_tiles && fp8_tiles_in_place(kernels, rows);
    kind.tiles = path == PATH_TILES || kind.fp8_tiles;
    /* the rows the tiles' P · V reads: bf16 (stored or widened), or the stored fp8 rows */
    kind.tile_rows_dtype = kind.fp8_in_place ? dtype : ATTN_DTYPE_BF16;
    /* int8 tiles: scores on them in both paths, P·V too in PATH_Q8_TILES */
    kind.q8_values_on_tiles = path == PATH_Q8_TILES;
    kind.q8_scores_on_tiles = kind.q8_values_on_tiles || path == PATH_Q8_TILE_SCORES;
    kind.bf16_prepared = kind.fused_bf16 && kernels->prepare_bf16_queries != NULL;
    /* int8 storage read in place: the queries rounded to int16 once for the task (quant.h) */
    kind.q8_prepared = kind.fused_q8 && dtype == ATTN_DTYPE_Q8;
    /* Logits need more than the scale when a soft-cap or additive term applies. */
    kind.transform = plan->softcap > 0.0f || plan->mask->has_additive;
    /* A chunk's class depends on the query head only through a per-head block layout or
     * boolean mask (src/mask/tiles.c); otherwise one classification serves the group (MQA:
     * one call per chunk instead of 32). */
    const attn_options *mask_options = plan->mask->options;
    kind.per_head_classes = mask_options->block_layout != NULL || mask_options->mask != NULL;
    /* bf16 tiles: P · V of up to ATTN_DECODE_TILE_CHUNKS consecutive chunks of one page at once
     * (registry.h accumulate_chunk_tiles) */
    /* (an accumulator that stays in L1, MQA's 32 x 128 floats, gains nothing from it, and the
     * value stage of 4 chunks would leave L1) */
    /* fp8 read in place: up to ATTN_DECODE_TILE_CHUNKS chunks too, so that a chunk's P · V
     * runs after the next chunks' scores */
    const int64_t tile_row = ATTN_DECODE_TILE_ROW_FLOATS(plan->value_dim);
    kind.tile_chunks =
        kind.fp8_in_place || rows * tile_row * (int64_t)sizeof(float) > TILE_L1_BYTES
            ? ATTN_DECODE_TILE_CHUNKS
            : 1;
    /* int8 scores on the tiles: P · V one chunk late (late_values), each chunk's P, rescale
     * and gathered value scales in the buffers of its parity, so that the next chunk's tile
     * loads, which wait for every older store, overlap the P · V (docs/inference.md,
     * "Quantized KV cache (int8, fp8)"). bf16 and fp8 in place gain nothing from it: their
     * scores do not wait. */
    _Static_assert(ATTN_DECODE_TILE_CHUNKS >= 2, "late_values: two chunks' scores in scratch");
    kind.late = kind.q8_scores_on_tiles;
    /* fp8 in place: the score kernel requests each key's value row as it scores the key
     * (registry.h score_chunk_q8, `ahead`), instead of the burst before the scores or the P·V
     * requesting them, so that the P · V finds them in L2; int8 likewise (docs/inference.md,
     * "Quantized KV cache (int8, fp8)") */
    kind.values_ahead = kind.fused_q8 && cache->value_pool != NULL;
    /* The in-place 8-bit P · V requests the next chunk's values: int8 always, fp8 where the
     * hardware prefetchers cannot follow a head's rows (token-major pages, one row in Hkv):
     * there the requests keep the values coming; on the library's pages, which the
     * prefetchers follow, the same requests would only add to the score loop's instructions */
    kind.values_next_in_pv = kind.fused_q8 && (dtype == ATTN_DTYPE_Q8 || plan->interleaved);
    /* ... so on token-major pages the score kernel does not request the chunk's values again
     * where the previous chunk's P · V did (AVX-512: registry.h accumulate_q8_requests_ahead):
     * a second request for the same rows only adds instructions */
    kind.score_requests_values =
        kind.values_ahead && !(plan->interleaved && kernels->accumulate_q8_requests_ahead);
    /* The next chunk's rows (`next` in the loop below): the tile kernels request them themselves;
     * the kernels reading stored rows in place (8-bit, bf16 in place, float32 storage) and
     * the conversions into a buffer (16-bit widened, 8-bit dequantised: chunk_rows) are
     * passed them and request them as they go, row by row. (A burst of requests for the
     * whole next chunk before the scores would stall the kernels' own loads, which follow the
     * block table already; docs/inference.md, "Decoding".) */
    kind.own_prefetch = kind.group || kind.tiles || kind.q8_scores_on_tiles;
    const bool quantized = attn_dtype_is_quantized(dtype);
    kind.converted = (quantized && !kind.fused_q8) ||
                     (!quantized && !kind.fused_bf16 && !kind.fused_f16 && !kind.widened_bf16 &&
                      dtype != ATTN_DTYPE_F32);
    kind.in_place = kind.q8_scores_on_tiles || kind.fused_bf16 || kind.fused_f16 ||
                    kind.widened_bf16 || kind.fused_q8 || (dtype == ATTN_DTYPE_F32 && !kind.tiles);
    kind.passes_next = kind.in_place || (kind.converted && !kind.own_prefetch);
    return kind;
}

/* Whether the heads of a split on token-major pages run together, chunk by chunk
 * (run_split_together): every path but the tiles', whose P · V of a chunk may wait for later
 * chunks in the thread's scratch (pending tiles, late values), and not for a cache whose
 * values are its keys (MLA, one head). */
static bool heads_together(const decode_plan *plan) {
    const decode_path path = plan->path;
    return plan->interleaved && plan->cache->value_pool != NULL && path != PATH_TILES &&
           path != PATH_FP8_TILES && path != PATH_Q8_TILES && path != PATH_Q8_TILE_SCORES;
}

/* Reads the queries of KV head kv_head's group of sequence b as float32 rows into
 * scratch->queries [rows][Dk], prepares them for the path's score kernel
 * (scratch->prepared), and starts the state: row_max -inf, row_sum 0, accumulator 0. */
static void task_start(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                       int64_t kv_head) {
    const decode_kind *kind = plan->kind;
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    const int64_t rows = plan->rows, Tq = plan->query_length, Dk = plan->key_dim,
                  Dv = plan->value_dim;
    const attn_tensor *q = plan->q;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = kv_head * plan->group_size + r / Tq, i = r % Tq;
        const int64_t first = b * q->stride[0] + i * q->stride[1] + h * q->stride[2];
        scratch->row_max[r] = -INFINITY, scratch->row_sum[r] = 0.0f;
        if (q->dtype != ATTN_DTYPE_F32 && q->stride[3] == 1) { /* dense 16-bit rows, exactly */
            (q->dtype == ATTN_DTYPE_BF16 ? kernels->bf16_to_f32 : kernels->f16_to_f32)(
                Dk, (const uint16_t *)q->data + first, scratch->queries + r * Dk);
            continue;
        }
        for (int64_t d = 0; d < Dk; ++d) { /* 16-bit queries widened exactly */
            const int64_t at = first + d * q->stride[3];
            scratch->queries[r * Dk + d] =
                q->dtype == ATTN_DTYPE_BF16  ? attn_bf16_to_float(((const uint16_t *)q->data)[at])
                : q->dtype == ATTN_DTYPE_F16 ? attn_f16_to_float(((const uint16_t *)q->data)[at])
                                             : ((const float *)q->data)[at];
        }
    }
    if (kind->bf16_prepared)
        kernels->prepare_bf16_queries((int)rows, (int)Dk, scratch->queries, scratch->prepared);
    if (kind->group)
        kernels->prepare_group_queries((int)rows, (int)Dk, scratch->queries, scratch->prepared);
    if (kind->tiles)
        kernels->prepare_tile_queries((int)rows, (int)Dk, scratch->queries,
                                      (uint16_t *)scratch->prepared);
    if (kind->q8_scores_on_tiles)
        kernels->prepare_q8_tile_queries((int)rows, (int)Dk, scratch->queries, scratch->prepared);
    if (kind->q8_prepared)
        attn_q8_prepare_queries((int)rows, (int)Dk, scratch->queries, scratch->prepared);
    /* the accumulator, [rows][Dv], (large group) [Dv][ATTN_DECODE_GROUP_STRIDE(rows)] or
     * (tiles) [ATTN_DECODE_GROUP_STRIDE(rows)][ATTN_DECODE_TILE_ROW_FLOATS(Dv)] */
    memset(scratch->accumulator, 0,
           (size_t)(kind->tiles   ? ATTN_DECODE_TILE_ROW_FLOATS(Dv) * ATTN_DECODE_GROUP_STRIDE(rows)
                    : kind->group ? Dv * ATTN_DECODE_GROUP_STRIDE(rows)
                                  : Dv * rows) *
               sizeof(float));
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

/* Writes task `task`'s normalised partial (O [rows][Dv], LSE [rows]) from its state. */
static void task_finish(const decode_plan *plan, const decode_scratch *scratch, int64_t task,
                        int64_t kv_head) {
    const decode_kind *kind = plan->kind;
    const int64_t rows = plan->rows, Dv = plan->value_dim;
    float *out = plan->partial_out + task * rows * Dv;
    float *lse = plan->partial_lse + task * rows;
    /* accumulator element (r, e): [r][Dv], transposed for a large group, rows of tile_row
     * floats on the tiles */
    const int64_t row_step = kind->group ? 1 : kind->tiles ? ATTN_DECODE_TILE_ROW_FLOATS(Dv) : Dv;
    const int64_t dim_step = kind->group ? ATTN_DECODE_GROUP_STRIDE(rows) : 1;
    /* fp8 on the tiles: the head's value scale, once per output (the tiles summed P · v) */
    const float value_scale = kind->fp8_tiles ? plan->cache->value_head_scales[kv_head] : 1.0f;
    for (int64_t r = 0; r < rows; ++r) {
        const float sum = scratch->row_sum[r];
        const float inverse = sum > 0.0f ? value_scale / sum : 0.0f;
        const float *row = scratch->accumulator + r * row_step;
        if (dim_step == 1) /* dense rows (vectorised) */
            for (int64_t e = 0; e < Dv; ++e) out[r * Dv + e] = row[e] * inverse;
        else
            for (int64_t e = 0; e < Dv; ++e) out[r * Dv + e] = row[e * dim_step] * inverse;
        lse[r] = sum > 0.0f ? scratch->row_max[r] + logf(sum) : -INFINITY;
    }
}

/* A chunk of keys [first, last) of a sequence, on pool page `page` from slot `slot` (never
 * across a page), and the chunk after it (chunk_at). */
typedef struct chunk_place {
    int64_t first, last, page_end, page, slot;
    int count;
    next_chunk next;
} chunk_place;

/* The chunk from key `first` of sequence b, up to key_end. The next chunk is found through the
 * block table once per chunk (no division): right after this one in its page, or at the start
 * of the sequence's next page. The kernels request its rows as they go (registry.h keys_ahead
 * / values_ahead / rows_ahead). Rows ATTN_DECODE_CHUNK or LOOKAHEAD further at the same
 * stride would send the requests to another sequence's rows in a shuffled pool of small
 * pages (docs/inference.md, "Decoding"; bench/results/intel-xeon-amx.md, "Serving", for such
 * a pool). */
static chunk_place chunk_at(const attn_kv_cache *cache, int64_t b, int64_t first,
                            int64_t key_end) {
    const int32_t *table = cache->block_tables + b * cache->pages_per_sequence;
    /* (one division per chunk: the loop's overhead is a few percent of a one-row chunk) */
    const int64_t page_index = first / cache->page_size;
    const int64_t page_end = (page_index + 1) * cache->page_size;
    chunk_place at = {first, first + ATTN_DECODE_CHUNK, page_end, table[page_index], 0, 0, {0, 0, 0}};
    if (at.last > key_end) at.last = key_end;
    if (at.last > page_end) at.last = page_end;
    at.count = (int)(at.last - first);
    at.slot = first - page_index * cache->page_size;
    if (at.last < key_end) {
        at.next.page = at.last < page_end ? at.page : table[page_index + 1];
        at.next.slot = at.last < page_end ? at.slot + at.count : 0;
        at.next.count = cache->page_size - at.next.slot;
        if (at.next.count > ATTN_DECODE_CHUNK) at.next.count = ATTN_DECODE_CHUNK;
        if (at.next.count > key_end - at.last) at.next.count = key_end - at.last;
    }
    return at;
}

/* The tile class of chunk [first, last) for each query head of KV head kv_head's group
 * (scratch->classes); returns whether any key of it is allowed, *all_full whether all are. */
static bool chunk_classes(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                          int64_t kv_head, int64_t first, int64_t last, bool *all_full) {
    bool any = false;
    *all_full = true;
    for (int64_t g = 0; g < plan->group_size; ++g) {
        scratch->classes[g] = g > 0 && !plan->kind->per_head_classes
                                  ? scratch->classes[0]
                                  : (uint8_t)attn_mask_classify_tile(
                                        plan->mask, b, kv_head * plan->group_size + g, 0,
                                        plan->query_length, first, last);
        any |= scratch->classes[g] != ATTN_TILE_EMPTY;
        *all_full &= scratch->classes[g] == ATTN_TILE_FULL;
    }
    return any;
}

/* Scores [rows][ATTN_DECODE_CHUNK] of a chunk of `count` stored key rows (head kv_head, from
 * `stored_keys`) on every path but the tiles': read in place, or converted to float32 rows
 * first (returned, with *key_stride, for values_in_keys; NULL when read in place). The
 * kernels request the next chunk's rows (next_keys) and, fp8, this chunk's values (ahead). */
static const float *chunk_scores(const decode_plan *plan, decode_scratch *scratch,
                                 int64_t kv_head, const void *stored_keys,
                                 const float *key_scales, const attn_rows_ahead *ahead,
                                 const void *next_keys, int count, float *scores,
                                 int64_t *key_stride) {
    const decode_kind *kind = plan->kind;
    const attn_kv_cache *cache = plan->cache;
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    const int rows = (int)plan->rows, Dk = (int)plan->key_dim;
    const int64_t stride = cache->key_token_stride;
    const float key_factor = cache->key_head_scales[kv_head]; /* (8-bit: the head's factor) */
    *key_stride = Dk;
    if (kind->fused_bf16) {
        kernels->score_chunk_bf16(rows, count, Dk,
                                  kind->bf16_prepared ? scratch->prepared : scratch->queries,
                                  stored_keys, stride, scores, (const uint16_t *)next_keys);
        return NULL;
    }
    if (kind->fused_f16 || kind->widened_bf16) {
        (kind->fused_f16 ? kernels->score_chunk_f16 : kernels->score_chunk_bf16_widened)(
            rows, count, Dk, scratch->queries, stored_keys, stride, scores,
            (const uint16_t *)next_keys);
        return NULL;
    }
    if (kind->fused_q8) {
        kernels->score_chunk_q8(cache->config.dtype, rows, count, Dk,
                                kind->q8_prepared ? (const void *)scratch->prepared
                                                  : scratch->queries,
                                stored_keys, stride, key_scales, key_factor, scores,
                                kind->score_requests_values ? ahead : NULL, next_keys);
        return NULL;
    }
    const float *keys = chunk_rows(plan, stored_keys, key_scales, key_factor, count, Dk, stride,
                                   next_keys, scratch->keys, key_stride);
    /* (float32 storage read in place: the next chunk's rows; a buffer: none) */
    const float *keys_ahead = keys == stored_keys ? (const float *)next_keys : NULL;
    if (kind->group)
        kernels->score_chunk_group(rows, count, Dk, scratch->prepared, keys, *key_stride,
                                   scores, keys_ahead);
    else
        kernels->score_chunk(rows, count, Dk, scratch->queries, keys, *key_stride, scores,
                             keys_ahead);
    return keys;
}

/* The chunk's probabilities: the logit pipeline where the chunk needs more than the scale
 * (soft-cap, additive terms, a partial chunk: then a softmax at scale 1), one online-softmax
 * step per row (rescale [rows]: the accumulator's factor), and for 16-bit queries off the
 * tiles P rounded to their type for P · V, as attn_forward does (the row sums keep the
 * unrounded P; the bf16 tiles round it themselves, after the pending chunks' P is rescaled to
 * the last one's maximum). */
static void chunk_probabilities(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                                int64_t kv_head, int64_t first, int count, bool all_full,
                                float *scores, float *rescale) {
    const int64_t rows = plan->rows, Tq = plan->query_length;
    float scale = plan->scale;
    if (plan->kind->transform || !all_full) { /* the logit pipeline, then a softmax at scale 1 */
        const attn_logit_buffers buffers = {scratch->allowed, scratch->additive, NULL, NULL};
        for (int64_t r = 0; r < rows; ++r)
            attn_logits_row(plan->mask, &plan->logits, (attn_tile_class)scratch->classes[r / Tq],
                            b, kv_head * plan->group_size + r / Tq, r % Tq, first, count,
                            scores + r * ATTN_DECODE_CHUNK, &buffers);
        scale = 1.0f;
    }
    plan->kernels->decode.softmax_chunk((int)rows, count, scale, scores, scratch->row_max,
                                        scratch->row_sum, rescale);
    if (plan->kind->tiles) return;
    if (plan->q->dtype == ATTN_DTYPE_BF16)
        plan->kernels->convert.round_bf16_rows((int)rows, count, scores, ATTN_DECODE_CHUNK);
    else if (plan->q->dtype == ATTN_DTYPE_F16)
        plan->kernels->convert.round_f16_rows((int)rows, count, scores, ATTN_DECODE_CHUNK);
}

/* accumulator += P · V of a chunk of `count` stored value rows (head kv_head, from
 * `stored_values`) on every path but the tiles' and the late one's: read in place, or
 * converted to float32 rows first (values_in_keys, MLA: the converted keys, `keys`). The
 * kernels request the next chunk's rows (next_values). */
static void chunk_values(const decode_plan *plan, decode_scratch *scratch, int64_t kv_head,
                         const void *stored_values, const float *value_scales,
                         const void *next_values, const float *keys, int64_t key_stride,
                         int count, const float *weights, const float *rescale) {
    const decode_kind *kind = plan->kind;
    const attn_kv_cache *cache = plan->cache;
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    const int rows = (int)plan->rows, Dv = (int)plan->value_dim;
    const int64_t stride = attn_cache_value_row_stride(cache);
    const float value_factor = cache->value_head_scales[kv_head];
    if (kind->fused_bf16) {
        kernels->accumulate_chunk_bf16(rows, count, Dv, weights, rescale, stored_values, stride,
                                       scratch->accumulator, (const uint16_t *)next_values);
        return;
    }
    if (kind->fused_f16 || kind->widened_bf16) {
        (kind->fused_f16 ? kernels->accumulate_chunk_f16 : kernels->accumulate_chunk_bf16_widened)(
            rows, count, Dv, weights, rescale, stored_values, stride, scratch->accumulator,
            (const uint16_t *)next_values);
        return;
    }
    if (kind->fused_q8) {
        kernels->accumulate_chunk_q8(cache->config.dtype, rows, count, Dv, weights, rescale,
                                     stored_values, stride, value_scales, value_factor,
                                     scratch->accumulator,
                                     kind->values_next_in_pv ? next_values : NULL);
        return;
    }
    /* With values_in_keys (MLA) a value is the start of its key row: reuse the converted
     * keys. */
    const float *values = keys;
    int64_t value_stride = key_stride;
    if (cache->value_pool != NULL)
        values = chunk_rows(plan, stored_values, value_scales, value_factor, count, Dv, stride,
                            next_values, scratch->values, &value_stride);
    /* (float32 storage read in place: the next chunk's rows; a buffer: none) */
    const float *values_ahead_f32 = values == stored_values ? (const float *)next_values : NULL;
    if (kind->group)
        kernels->accumulate_chunk_group(rows, count, Dv, weights, rescale, values, value_stride,
                                        scratch->accumulator);
    else
        kernels->accumulate_chunk(rows, count, Dv, weights, rescale, values, value_stride,
                                  scratch->accumulator, values_ahead_f32);
}

/* A task run in steps (the interleaved heads of token-major pages, on the tiles' paths,
 * attn_decode): each call resumes at `from` (the task's first key when `resume` is false)
 * and stops at the first chunk boundary at least `tokens` keys later where no tile P · V is
 * pending, so the chunks, and the operations on the head's state in scratch (row_max,
 * row_sum, accumulator, and the queries and prepared queries, made at the first step: the
 * caller points them at the head's own), are those of one whole call: the same bits. */
typedef struct task_step {
    bool resume;    /* false: the task's first step (state started here) */
    int64_t from;   /* the key to resume at (resume) */
    int64_t tokens; /* keys per step */
    int64_t next;   /* out: the key the next step resumes at */
    bool done;      /* out: the task's keys are all done (its partial written) */
} task_step;

/* One task: sequence b, KV head kv_head, split `split`; writes its partial (O, LSE).
 * Every chunk of keys (and of values) is read once and serves all `rows` query rows of the
 * group: scores [rows x chunk] = queries [rows x Dk] . keys^T, one softmax step per row,
 * accumulator [rows x Dv] += probabilities . values. */
static void run_task(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                     int64_t kv_head, int64_t split, int64_t task, task_step *step) {
    /* the queries, read and prepared at the task's first step (a later step finds them, with
     * the head's state, where its first left them: run_split_stepped) */
    if (step == NULL || !step->resume) task_start(plan, scratch, b, kv_head);
    const decode_kind *kind = plan->kind;
    const attn_kv_cache *cache = plan->cache;
    const attn_decode_kernels *kernels = &plan->kernels->decode;
    const int64_t rows = plan->rows, Dk = plan->key_dim, Dv = plan->value_dim;
    int64_t key_begin, key_end;
    task_keys(plan, b, split, &key_begin, &key_end);
    const int64_t element_size = (int64_t)attn_dtype_size(cache->config.dtype);
    const attn_dtype dtype = cache->config.dtype;
    const bool tiles = kind->tiles, late = kind->late;
    const bool fp8_tiles = kind->fp8_tiles, fp8_in_place = kind->fp8_in_place;
    /* (8-bit storage: key / value head factors, FP8) */
    const float key_factor = cache->key_head_scales[kv_head];
    const float value_factor = cache->value_head_scales[kv_head];
    /* bf16 tiles: the pending chunks (kind->tile_chunks at most), from pending_values on */
    int pending = 0, pending_keys = 0;
    const void *pending_values = NULL;
    int64_t pending_stride = 0;
    late_values held = {0};
    int parity = 0;
    float gathered_scales[2][2][ATTN_DECODE_CHUNK]; /* [parity][keys, values]: Q8 scales of a caller's cache */
    int64_t first = step != NULL && step->resume ? step->from : key_begin;
    const int64_t step_end = step != NULL ? first + step->tokens : key_end;
    for (; first < key_end;) {
        if (first >= step_end && pending == 0) break; /* a step's end (held: flushed below) */
        const chunk_place at = chunk_at(cache, b, first, key_end);
        const int64_t last = at.last;
        const int count = at.count;
        bool all_full;
        const bool any = chunk_classes(plan, scratch, b, kv_head, first, last, &all_full);
        if (!any && pending > 0) { /* the pending chunks end here */
            flush_tiles(kernels, scratch, kind->tile_rows_dtype, rows, Dv, pending_keys,
                        pending_values, pending_stride);
            pending = pending_keys = 0;
        }
        if (any) {
            float *scores = scratch->scores +
                            (int64_t)(late ? parity : pending) * rows * ATTN_DECODE_CHUNK;
            float *rescale = scratch->rescale + (late ? parity * rows : 0);
            const int64_t page = at.page, slot = at.slot;
            const void *stored_keys = attn_cache_key_address(cache, page, kv_head, slot);
            const void *stored_values = attn_cache_value_address(cache, page, kv_head, slot);
            const int64_t stored_value_stride = attn_cache_value_row_stride(cache);
            const attn_rows_ahead ahead = {stored_values, stored_value_stride * element_size,
                                           (int)Dv};
            /* the chunk's values before its scores, for groups reading them in place (one
             * row: a stream the hardware follows; converted values: requested a chunk
             * earlier by their conversion, and bf16 groups of 8 rows faster without) */
            if (!kind->own_prefetch && !kind->values_ahead && !kind->converted && rows >= 2 &&
                cache->value_pool != NULL)
                prefetch_rows(stored_values, count, stored_value_stride * element_size,
                              Dv * element_size);
            const float *key_scales =
                chunk_scales(attn_cache_key_scales(cache, page, kv_head, slot),
                             cache->key_scale_token_stride, count, gathered_scales[parity][0]);
            const float *value_scales =
                chunk_scales(attn_cache_value_scales(cache, page, kv_head, slot),
                             attn_cache_value_scale_stride(cache), count, gathered_scales[parity][1]);
            if (key_scales != NULL) /* int8: the next chunk's row scales */
                prefetch_scales(cache, kv_head, &at.next);
            const uint8_t *next_keys = NULL, *next_values = NULL;
            if (kind->passes_next && at.next.count > 0) {
                next_keys = attn_cache_key_address(cache, at.next.page, kv_head, at.next.slot);
                next_values = attn_cache_value_address(cache, at.next.page, kv_head, at.next.slot);
            }
            int64_t key_stride = Dk;
            const float *keys = NULL;
            if (tiles) {
                const uint16_t *tile_keys = stored_keys;
                int64_t tile_key_stride = cache->key_token_stride;
                if (fp8_in_place)
                    kernels->score_chunk_tiles_fp8(dtype, (int)rows, count, (int)Dk,
                                                   (const uint16_t *)scratch->prepared,
                                                   stored_keys, cache->key_token_stride, scores,
                                                   cache->value_pool != NULL ? &ahead : NULL);
                else if (fp8_tiles) { /* after the pending chunks' (MLA's values are read there) */
                    uint16_t *widened = scratch->keys16 + (int64_t)pending_keys * Dk;
                    kernels->widen_fp8_bf16(dtype, count, (int)Dk, stored_keys,
                                            cache->key_token_stride, widened);
                    tile_keys = widened, tile_key_stride = Dk;
                }
                if (!fp8_in_place)
                    kernels->score_chunk_tiles((int)rows, count, (int)Dk,
                                               (const uint16_t *)scratch->prepared, tile_keys,
                                               tile_key_stride, scores);
                if (fp8_tiles && key_factor != 1.0f) /* the head's key scale, per dot product */
                    for (int64_t r = 0; r < rows; ++r)
                        for (int c = 0; c < count; ++c) scores[r * ATTN_DECODE_CHUNK + c] *= key_factor;
            } else if (kind->q8_scores_on_tiles)
                kernels->score_chunk_q8_tiles((int)rows, count, (int)Dk, scratch->prepared,
                                              stored_keys, cache->key_token_stride, key_scales,
                                              key_factor, scores, next_keys);
            else
                keys = chunk_scores(plan, scratch, kv_head, stored_keys, key_scales, &ahead,
                                    next_keys, count, scores, &key_stride);
            chunk_probabilities(plan, scratch, b, kv_head, first, count, all_full, scores,
                                rescale);
            if (tiles) {
                for (int64_t r = 0; r < rows; ++r) {
                    const float factor = rescale[r];
                    if (pending == 0) {
                        scratch->carried[r] = factor;
                        continue;
                    }
                    scratch->carried[r] *= factor;
                    if (factor != 1.0f)
                        for (int j = 0; j < pending; ++j) {
                            float *row = scratch->scores + ((int64_t)j * rows + r) * ATTN_DECODE_CHUNK;
                            for (int c = 0; c < ATTN_DECODE_CHUNK; ++c) row[c] *= factor;
                        }
                }
                /* MLA (values_in_keys): a value is the start of its key row */
                const bool own_values = cache->value_pool != NULL;
                if (pending == 0) {
                    pending_values = own_values ? stored_values : stored_keys;
                    pending_stride = own_values ? stored_value_stride : cache->key_token_stride;
                    if (fp8_tiles && !fp8_in_place) { /* the widened rows (values_in_keys: the keys') */
                        pending_values = own_values ? scratch->values16 : scratch->keys16;
                        pending_stride = own_values ? Dv : Dk;
                    }
                }
                if (fp8_tiles && !fp8_in_place && own_values) /* after the pending chunks' values */
                    kernels->widen_fp8_bf16(dtype, count, (int)Dv, stored_values,
                                            stored_value_stride,
                                            scratch->values16 + (int64_t)pending_keys * Dv);
                ++pending;
                pending_keys += count;
                /* flushed when full, or when the next chunk is not the next keys of this page */
                if (pending == kind->tile_chunks || count < ATTN_DECODE_CHUNK ||
                    last == at.page_end || last >= key_end) {
                    flush_tiles(kernels, scratch, kind->tile_rows_dtype, rows, Dv, pending_keys,
                                pending_values, pending_stride);
                    pending = pending_keys = 0;
                }
            } else if (late) { /* the previous chunk's P · V now, this one's held */
                if (held.count > 0)
                    accumulate_late(kernels, kind->path, dtype, rows, Dv, value_factor, &held,
                                    scratch);
                held = (late_values){count, stored_values, stored_value_stride, value_scales,
                                     next_values, scores, rescale};
                parity ^= 1;
            } else
                chunk_values(plan, scratch, kv_head, stored_values, value_scales, next_values,
                             keys, key_stride, count, scores, rescale);
        }
        first = last;
    }
    if (pending > 0)
        flush_tiles(kernels, scratch, kind->tile_rows_dtype, rows, Dv, pending_keys,
                    pending_values, pending_stride);
    if (held.count > 0)
        accumulate_late(kernels, kind->path, dtype, rows, Dv, value_factor, &held, scratch);
    if (step != NULL) {
        step->next = first;
        step->done = first >= key_end;
        if (!step->done) return; /* more steps: the state stays in scratch */
    }
    task_finish(plan, scratch, task, kv_head);
}

/* Where each head's state lies in scratch->head_states (head_state_floats), in floats from
 * the head's first: row_max, row_sum at 0 and `rows` apart, then the others. */
typedef struct head_layout {
    size_t stride, rows, accumulator, queries, prepared, scores, rescale;
} head_layout;

static head_layout head_layout_of(const decode_plan *plan) {
    head_layout at;
    at.stride = head_state_floats(plan);
    at.rows = ATTN_DECODE_GROUP_STRIDE(plan->rows);
    at.accumulator = 2 * at.rows;
    at.queries = at.accumulator + round_floats(accumulator_floats(plan));
    at.prepared = at.queries + round_floats((size_t)plan->rows * (size_t)plan->key_dim);
    at.scores = at.prepared + round_floats(prepared_floats(plan));
    at.rescale = at.scores + round_floats((size_t)plan->rows * ATTN_DECODE_CHUNK);
    return at;
}

/* Points scratch's per-task state (row_max, row_sum, accumulator, queries, prepared) at head
 * `head`'s own (run_split_stepped, run_split_together), and returns where that head's scores
 * [rows][ATTN_DECODE_CHUNK] and rescale factors [rows] lie. */
static float *head_state(decode_scratch *scratch, const head_layout *at, int64_t head,
                         float **rescale) {
    float *mine = scratch->head_states + (size_t)head * at->stride;
    scratch->row_max = mine, scratch->row_sum = mine + at->rows;
    scratch->accumulator = mine + at->accumulator;
    scratch->queries = mine + at->queries, scratch->prepared = mine + at->prepared;
    *rescale = mine + at->rescale;
    return mine + at->scores;
}

/* The Hkv tasks of split `split` of sequence b (token-major pages on the tiles' paths,
 * plan->stepped): every head plan->step_tokens keys at a time in turn, each head's row_max,
 * row_sum and accumulator kept in scratch->head_states between its steps (run_task's
 * task_step: the same bits as whole tasks). The heads share the split's keys, so they stop
 * and resume at the same key. */
static void run_split_stepped(const decode_plan *plan, decode_scratch *scratch, int64_t b,
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
            run_task(plan, scratch, b, head, split,
                     plan->first_task[b] + head * plan->split_counts[b] + split, &step);
        }
        step.resume = true;
    }
    *scratch = own;
}

/* The Hkv tasks of split `split` of sequence b (token-major pages, heads_together): chunk by
 * chunk, the scores and probabilities of every head's rows of the chunk, then every head's
 * P · V, so that each page's K rows of all heads, and then its V rows, are read together: on
 * token-major pages no hardware prefetcher follows one head's rows, and reading the heads of
 * a page together keeps the lines each brings in. Each head's state, scores and rescale
 * factors are its own (head_state), and each head sees the operations of run_task on the
 * same chunks in the same order: the same bits. */
static void run_split_together(const decode_plan *plan, decode_scratch *scratch, int64_t b,
                               int64_t split) {
    const decode_kind *kind = plan->kind;
    const attn_kv_cache *cache = plan->cache;
    const decode_scratch own = *scratch;
    const head_layout layout = head_layout_of(plan);
    const int64_t H = plan->kv_heads, rows = plan->rows, Dk = plan->key_dim,
                  Dv = plan->value_dim;
    const int64_t element_size = (int64_t)attn_dtype_size(cache->config.dtype);
    const int64_t value_stride = attn_cache_value_row_stride(cache);
    int64_t key_begin, key_end;
    task_keys(plan, b, split, &key_begin, &key_end);
    float *rescale;
    for (int64_t head = 0; head < H; ++head) {
        (void)head_state(scratch, &layout, head, &rescale);
        task_start(plan, scratch, b, head);
    }
    /* [Hkv]: whether the chunk has keys for the head's group, and all its keys */
    uint8_t *any = scratch->head_flags, *full = scratch->head_flags + H;
    float gathered[ATTN_DECODE_CHUNK]; /* Q8 scales of a caller's cache */
    for (int64_t first = key_begin; first < key_end;) {
        const chunk_place at = chunk_at(cache, b, first, key_end);
        /* one classification for every head unless the mask has per-head parts (as a
         * group's query heads share one, chunk_classes) */
        for (int64_t head = 0; head < H; ++head) {
            bool all_full = true;
            any[head] = head > 0 && !kind->per_head_classes
                            ? any[0]
                            : chunk_classes(plan, scratch, b, head, first, at.last, &all_full);
            full[head] = head > 0 && !kind->per_head_classes ? full[0] : all_full;
        }
        for (int64_t head = 0; head < H; ++head) { /* scores */
            if (!any[head]) continue;
            float *scores = head_state(scratch, &layout, head, &rescale);
            const void *stored_values = attn_cache_value_address(cache, at.page, head, at.slot);
            const attn_rows_ahead ahead = {stored_values, value_stride * element_size, (int)Dv};
            /* the chunk's values before the scores, as run_task requests them, for float32
             * storage only: 16-bit rows read in place run faster without it, float32 rows
             * slower */
            if (!kind->own_prefetch && !kind->values_ahead && !kind->converted && rows >= 2 &&
                cache->config.dtype == ATTN_DTYPE_F32)
                prefetch_rows(stored_values, at.count, value_stride * element_size,
                              Dv * element_size);
            const float *key_scales =
                chunk_scales(attn_cache_key_scales(cache, at.page, head, at.slot),
                             cache->key_scale_token_stride, at.count, gathered);
            if (key_scales != NULL) prefetch_scales(cache, head, &at.next);
            const void *next_keys =
                kind->passes_next && at.next.count > 0
                    ? attn_cache_key_address(cache, at.next.page, head, at.next.slot)
                    : NULL;
            int64_t key_stride;
            (void)chunk_scores(plan, scratch, head,
                               attn_cache_key_address(cache, at.page, head, at.slot), key_scales,
                               &ahead, next_keys, at.count, scores, &key_stride);
        }
        for (int64_t head = 0; head < H; ++head) { /* probabilities */
            if (!any[head]) continue;
            if (kind->per_head_classes) /* (scratch->classes holds the last head's) */
                (void)chunk_classes(plan, scratch, b, head, first, at.last, &(bool){true});
            float *scores = head_state(scratch, &layout, head, &rescale);
            chunk_probabilities(plan, scratch, b, head, first, at.count, full[head], scores,
                                rescale);
        }
        for (int64_t head = 0; head < H; ++head) { /* P · V */
            if (!any[head]) continue;
            float *scores = head_state(scratch, &layout, head, &rescale);
            const float *value_scales =
                chunk_scales(attn_cache_value_scales(cache, at.page, head, at.slot),
                             attn_cache_value_scale_stride(cache), at.count, gathered);
            const void *next_values =
                kind->passes_next && at.next.count > 0
                    ? attn_cache_value_address(cache, at.next.page, head, at.next.slot)
                    : NULL;
            chunk_values(plan, scratch, head,
                         attn_cache_value_address(cache, at.page, head, at.slot), value_scales,
                         next_values, NULL, Dk, at.count, scores, rescale);
        }
        first = at.last;
    }
    for (int64_t head = 0; head < H; ++head) {
        (void)head_state(scratch, &layout, head, &rescale);
        task_finish(plan, scratch, plan->first_task[b] + head * plan->split_counts[b] + split,
                    head);
    }
    *scratch = own;
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
    problem->scale = options->custom_scale ? options->scale
                                           : (float)(1.0 / sqrt((double)config->key_dim));
    return ATTN_OK;
}

/* One region of merge_partials: the rows it claims, and per worker the first empty and the
 * first overflowing row it met (linear index b*Hq*Tq + h*Tq + i; row_total when none). */
typedef struct merge_region {
    const decode_plan *plan;
    const attn_call *call;
    const size_t *scratch_bytes;
    attn_tensor *out, *lse;
    int64_t next_rows, row_total;
    int64_t *first_empty, *first_overflow; /* [threads] each */
} merge_region;

enum { MERGE_CLAIM_ROWS = 16 }; /* rows per claim: one claim's cost against 16 rows' merges */
enum { MERGE_PARALLEL_FLOATS = 1 << 16 }; /* partial floats worth a merge on several threads */

/* Merges row `index` = b*Hq*Tq + h*Tq + i into out / lse (the empty-row policy applied);
 * records it in *first_empty / *first_overflow when it is the first such row seen. */
static void merge_row(const merge_region *region, decode_scratch *scratch, int64_t index,
                      int64_t *first_empty, int64_t *first_overflow) {
    const decode_plan *plan = region->plan;
    const attn_options *options = &region->call->options;
    attn_tensor *out = region->out, *lse = region->lse;
    const int64_t Hq = plan->q->shape[2], Tq = plan->query_length, Dv = plan->value_dim;
    const int64_t rows = plan->rows;
    const int64_t b = index / (Hq * Tq), h = index / Tq % Hq, i = index % Tq;
    const int64_t kv_head = h / plan->group_size;
    const int64_t r = (h % plan->group_size) * Tq + i;
    const int64_t task = plan->first_task[b] + kv_head * plan->split_counts[b];
    float *row = scratch->merged;
    float merged_lse;
    attn_merge_row((int)plan->split_counts[b], plan->partial_lse + task * rows + r, rows,
                   plan->partial_out + (task * rows + r) * Dv, rows * Dv, Dv, scratch->weights,
                   row, &merged_lse);
    if (i >= attn_mask_query_count(plan->mask, b)) { /* padding row */
        for (int64_t e = 0; e < Dv; ++e) row[e] = 0.0f;
        merged_lse = -INFINITY;
    } else if (merged_lse == -INFINITY) {
        if (options->empty_rows == ATTN_EMPTY_ROWS_ERROR && index < *first_empty)
            *first_empty = index;
        if (options->empty_rows == ATTN_EMPTY_ROWS_NAN) {
            for (int64_t e = 0; e < Dv; ++e) row[e] = NAN;
            merged_lse = NAN;
        }
    }
    if (out->dtype == ATTN_DTYPE_F32) {
        for (int64_t e = 0; e < Dv; ++e) *attn_f32_at4(out, b, i, h, e) = row[e];
    } else { /* rounded once; a finite value beyond the type is an error */
        uint16_t *o_row = (uint16_t *)out->data + b * out->stride[0] + i * out->stride[1] +
                          h * out->stride[2];
        const int64_t stride = out->stride[3];
        const int64_t overflowed = out->dtype == ATTN_DTYPE_BF16
                                       ? plan->kernels->convert.f32_to_bf16(Dv, row, o_row, stride)
                                       : plan->kernels->convert.f32_to_f16(Dv, row, o_row, stride);
        if (overflowed > 0 && index < *first_overflow) *first_overflow = index;
    }
    if (lse != NULL) *attn_f32_at3(lse, b, h, i) = merged_lse;
}

static void merge_worker(void *context, int worker) {
    merge_region *region = context;
    decode_scratch scratch;
    scratch_carve(&scratch, region->scratch_bytes, attn_call_workspace(region->call, worker));
    int64_t first_empty = region->row_total, first_overflow = region->row_total;
    for (int64_t first; (first = attn_parallel_claim(&region->next_rows) * MERGE_CLAIM_ROWS) <
                        region->row_total;) {
        const int64_t end = first + MERGE_CLAIM_ROWS < region->row_total ? first + MERGE_CLAIM_ROWS
                                                                          : region->row_total;
        for (int64_t index = first; index < end; ++index)
            merge_row(region, &scratch, index, &first_empty, &first_overflow);
    }
    region->first_empty[worker] = first_empty;
    region->first_overflow[worker] = first_overflow;
}

/* Writes the merged rows of every (b, h, i) into out / lse and applies the empty-row policy;
 * returns the first empty row under ATTN_EMPTY_ROWS_ERROR. */
static attn_status merge_partials(const decode_plan *plan, const attn_call *call,
                                  const size_t scratch_bytes[SCRATCH_PARTS], attn_tensor *out,
                                  attn_tensor *lse, attn_error *error) {
    const int64_t B = plan->cache->config.sequences, Hq = plan->q->shape[2];
    const int64_t Tq = plan->query_length, row_total = B * Hq * Tq;
    int64_t firsts[2 * call->threads]; /* at most ATTN_MAX_THREADS pairs */
    merge_region region = {.plan = plan, .call = call, .scratch_bytes = scratch_bytes,
                           .out = out, .lse = lse, .row_total = row_total,
                           .first_empty = firsts, .first_overflow = firsts + call->threads};
    for (int t = 0; t < 2 * call->threads; ++t) firsts[t] = row_total;
    /* The merge reads every split's partial rows: below MERGE_PARALLEL_FLOATS of them a
     * second thread's hand-off costs more than it saves. */
    double partial_floats = 0.0;
    for (int64_t b = 0; b < B; ++b)
        partial_floats += (double)plan->split_counts[b] * (double)(Hq * Tq * plan->value_dim);
    attn_parallel_run(partial_floats < MERGE_PARALLEL_FLOATS ? 1 : call->threads, merge_worker,
                      &region);
    int64_t first_empty = row_total, first_overflow = row_total;
    for (int t = 0; t < call->threads; ++t) {
        if (region.first_empty[t] < first_empty) first_empty = region.first_empty[t];
        if (region.first_overflow[t] < first_overflow) first_overflow = region.first_overflow[t];
    }
    if (first_empty >= row_total && first_overflow < row_total)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "out (%s) at b = %lld, i = %lld, h = %lld: the attention output does not "
                         "fit (largest %g); use a float32 or bfloat16 out",
                         attn_dtype_name(out->dtype), (long long)(first_overflow / (Hq * Tq)),
                         (long long)(first_overflow % Tq), (long long)(first_overflow / Tq % Hq),
                         out->dtype == ATTN_DTYPE_F16 ? 65504.0 : 3.3895313892515355e38);
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

/* The split size when execution.tile_k = 0 (see MOST_SPLIT_TOKENS). */
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

/* Fills the plan from the begun call and the cache: sizes, split size, the path and how the
 * heads of a split run, the splits of each sequence and the first task of each; returns the
 * most splits of a sequence. */
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
    plan->path = layout_path(&call->kernels->decode,
                             decode_path_of(&call->kernels->decode, cache->config.dtype, q->dtype,
                                            plan->rows, plan->key_dim),
                             cache->config.dtype, plan->rows, plan->interleaved);
    plan->together = heads_together(plan);
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

/* One region of attn_decode: the work items it claims (a task, or on interleaved pages the
 * Hkv tasks of one split). Each task writes its own partial, merged in split order, so which
 * worker runs an item never changes a bit. */
typedef struct decode_region {
    const decode_plan *plan;
    const size_t *scratch_bytes;
    const attn_call *call;
    int64_t next_item;
} decode_region;

static void decode_worker(void *context, int worker) {
    decode_region *region = context;
    const decode_plan *plan = region->plan;
    decode_scratch scratch;
    scratch_carve(&scratch, region->scratch_bytes, attn_call_workspace(region->call, worker));
    const int64_t B = plan->cache->config.sequences;
    const int64_t per_item = plan->interleaved ? plan->kv_heads : 1;
    const int64_t item_count = plan->task_count / per_item;
    for (int64_t item; (item = attn_parallel_claim(&region->next_item)) < item_count;) {
        int64_t b = 0; /* first_task[b] is a multiple of Hkv */
        while (b + 1 < B && plan->first_task[b + 1] / per_item <= item) ++b;
        const int64_t local = item - plan->first_task[b] / per_item;
        if (plan->together) { /* the heads of the split chunk by chunk */
            run_split_together(plan, &scratch, b, local);
            continue;
        }
        if (plan->stepped) { /* the heads of the split a step at a time in turn */
            run_split_stepped(plan, &scratch, b, local);
            continue;
        }
        for (int64_t n = 0; n < per_item; ++n) {
            const int64_t head = plan->interleaved ? n : local / plan->split_counts[b];
            const int64_t split = plan->interleaved ? local : local % plan->split_counts[b];
            run_task(plan, &scratch, b, head, split,
                     plan->first_task[b] + head * plan->split_counts[b] + split, NULL);
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
        validate_decode(cache, q, &call.options, out, lse, &call.problem, error);
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
        /* Working memory: a scratch per thread, then the partial results shared by the
         * tasks and the merge, task_count * rows * (Dv + 1) floats. */
        size_t partial_floats;
        if (!scratch_layout(&plan, most_splits, scratch_bytes, &scratch_total) ||
            !attn_mul_size((size_t)plan.task_count, (size_t)plan.rows, &partial_floats) ||
            !attn_mul_size(partial_floats, (size_t)problem->value_dim + 1, &partial_floats) ||
            !attn_mul_size(partial_floats, sizeof(float), &partial_bytes))
            status = attn_fail(error, ATTN_ERROR_OVERFLOW,
                               "q: the split-KV partial buffer overflows");
    }
    if (status == ATTN_OK)
        status = attn_call_reserve(&call, decode_threads(&plan, &call), scratch_total,
                                   partial_bytes, "attn_decode", error);
    decode_kind kind;
    if (status == ATTN_OK) {
        plan.mask = &call.mask;
        kind = decode_kind_of(&plan);
        plan.kind = &kind;
        /* Soft-cap or additive terms (or a PARTIAL chunk): the loop's pipeline applies the
         * scale too, and the softmax runs at scale 1 (run_task). */
        plan.logits = (attn_logit_pipeline){plan.scale, plan.softcap, call.mask.has_additive};
        plan.partial_out = attn_call_shared(&call);
        plan.partial_lse = plan.partial_out + plan.task_count * plan.rows * plan.value_dim;
        decode_region region = {&plan, scratch_bytes, &call, 0};
        attn_parallel_run(call.threads, decode_worker, &region);
        status = merge_partials(&plan, &call, scratch_bytes, out, lse, error);
    }
    attn_call_end(&call);
    if (!on_stack) free(key_lengths), free(plan.split_counts), free(plan.first_task);
    return status;
}
