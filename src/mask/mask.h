/*
 * mask.h — the one definition of "which (query, key) pairs are allowed and what is added to
 * their logits", shared by the reference, the tiled forward, the backward, decoding and the
 * ring. Also the validation of an attention call's tensors and options.
 *
 * Implemented in src/mask/ (mask.c: predicate and additive terms; tiles.c: tile
 * classification; validate.c: argument checks). See attn.h, attn_options, for the semantics.
 */
#ifndef ATTN_MASK_H
#define ATTN_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "attn.h"

/* The validated sizes of one attention call. */
typedef struct attn_problem {
    int64_t batch;         /* B */
    int64_t query_length;  /* Tq */
    int64_t key_length;    /* Tk */
    int64_t query_heads;   /* Hq */
    int64_t kv_heads;      /* Hkv */
    int64_t group_size;    /* Hq / Hkv: query head h uses KV head h / group_size */
    int64_t key_dim;       /* Dk */
    int64_t value_dim;     /* Dv */
    float scale;           /* the effective softmax scale */
} attn_problem;

/*
 * Checks q, k, v, out (and lse when not NULL) and every option against each other, and fills
 * `problem`. `options` is resolved (attn_options_resolve: not NULL, window folded in). out must be F32 [B, Tq, Hq, Dv]; lse F32 [B, Hq, Tq]. Every error of attn_forward
 * except empty rows and memory limits is detected here, with a message naming the argument.
 */
attn_status attn_validate_call(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_options *options, const attn_tensor *out,
                               const attn_tensor *lse, attn_problem *problem, attn_error *error);

/* The same, except that q, k, v and out may be F32, BF16 or F16, all four of one dtype (the
 * operand type; lse stays F32). */
attn_status attn_validate_call_typed(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_options *options,
                                     const attn_tensor *out, const attn_tensor *lse,
                                     attn_problem *problem, attn_error *error);

/* The scale a call uses: options->scale when custom_scale, else 1/sqrt(key_dim) (attn.h);
 * every entry point that builds its own problem takes it from here. */
float attn_effective_scale(const attn_options *options, int64_t key_dim);

/* Checks only the options against a problem's sizes (used by decode and ring, which build
 * their problem themselves). */
attn_status attn_validate_options(const attn_options *options, const attn_problem *problem,
                                  attn_error *error);

/* Everything the predicate needs, resolved once per call (ALiBi slopes, global-token lookup
 * tables, per-batch lengths). Read-only after init, so threads share it. */
typedef struct attn_mask_context {
    const attn_options *options;
    attn_problem problem;
    float *alibi_slopes;          /* Hq floats, or NULL when ALiBi is off */
    uint8_t *global_query;        /* Tq flags, or NULL */
    uint8_t *global_key;          /* Tk flags, or NULL */
    bool has_additive;            /* a bias tensor or ALiBi is active */
    bool has_structure;           /* any constraint beyond "all pairs allowed" */
} attn_mask_context;

attn_status attn_mask_context_init(attn_mask_context *context, const attn_options *options,
                                   const attn_problem *problem, attn_error *error);
void attn_mask_context_free(attn_mask_context *context);

/* Valid query / key counts of batch b (query_lengths / key_lengths or the full lengths). */
int64_t attn_mask_query_count(const attn_mask_context *context, int64_t b);
int64_t attn_mask_key_count(const attn_mask_context *context, int64_t b);

/* Positions used by causal, window, ALiBi and patterns. */
int64_t attn_mask_query_position(const attn_mask_context *context, int64_t b, int64_t i);
int64_t attn_mask_key_position(const attn_mask_context *context, int64_t b, int64_t j);

/* Whether query i of (b, h) may attend to key j (before the additive bias's -inf entries). */
bool attn_mask_allowed(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                       int64_t j);

/* bias[b, h, i, j] + ALiBi(h, i, j): the additive term (may be -inf, which means masked). */
float attn_mask_additive(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                         int64_t j);

/* Row forms for the tiled loops, same values as the per-pair functions for keys [j0, j1):
 * allowed[c] = attn_mask_allowed(b, h, i, j0 + c) (0 or 1), with causal and window limits
 * applied as one interval rather than per key; additive[c] = attn_mask_additive(b, h, i,
 * j0 + c). allowed: uint8[j1 - j0], additive: float[j1 - j0]. */
void attn_mask_allowed_row(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                           int64_t j0, int64_t j1, uint8_t *allowed);
void attn_mask_additive_row(const attn_mask_context *context, int64_t b, int64_t h, int64_t i,
                            int64_t j0, int64_t j1, float *additive);

typedef enum attn_tile_class {
    ATTN_TILE_EMPTY = 0,   /* no allowed pair: skip */
    ATTN_TILE_FULL = 1,    /* every pair allowed: no per-element predicate needed */
    ATTN_TILE_PARTIAL = 2  /* evaluate attn_mask_allowed per element */
} attn_tile_class;

/* Classifies rows [i0, i1) x columns [j0, j1) of (b, h). Exact for banded constraints
 * (causal, window, lengths); conservative (PARTIAL) only where an exhaustive check would
 * cost more than the tile. Never says FULL or EMPTY wrongly. Additive terms are not part of
 * the class (see has_additive). */
attn_tile_class attn_mask_classify_tile(const attn_mask_context *context, int64_t b, int64_t h,
                                        int64_t i0, int64_t i1, int64_t j0, int64_t j1);

/* window(i, j) AND pattern(i, j) for query position pq and key position pk: the "local"
 * part of the predicate that global tokens override (see attn_options). */
bool attn_mask_local_allowed(const attn_mask_context *context, int64_t query_position,
                             int64_t key_position);

/* The keys [*key_begin, *key_end) that rows [i0, i1) of batch b can possibly attend to, from
 * the valid key count and the causal / window / dilated band (the whole valid range when
 * explicit key positions or global tokens make the band unusable). Every allowed key of
 * those rows lies inside; the loops iterate over key tiles of this range only, so a narrow
 * band costs O(band), not O(Tk). */
void attn_mask_candidate_keys(const attn_mask_context *context, int64_t b, int64_t i0,
                              int64_t i1, int64_t *key_begin, int64_t *key_end);

/* Whether the predicate of (resolved) options is a pure band: valid lengths AND causal AND window only (implicit
 * key positions pk = j; no pattern, bool mask, block layout or global tokens; query
 * positions implicit, aligned, or explicit). Then the allowed keys of each query row form one
 * interval, attn_mask_band_row, and the tiled loops may skip whole columns and apply the mask
 * per row as two bounds instead of a predicate per key. */
bool attn_mask_is_band(const attn_options *options);

/* Whether the window of (resolved) options narrows the band, i.e. one of its sides is
 * shorter than the longest possible distance max(Tq, Tk) - 1 (then the tiled loops take
 * their band paths: forward_compute_span, the backward's contiguous chunks). */
bool attn_mask_window_narrows(const attn_options *options, int64_t query_length,
                              int64_t key_length);

/* How far a row's band reaches (resolved options, aligned positions): at most *left keys
 * before its position and *right after it (causal: 0; no window side: max(Tq, Tk) - 1). */
void attn_mask_band_sides(const attn_options *options, int64_t query_length, int64_t key_length,
                          int64_t *left, int64_t *right);

/* For a pure band (attn_mask_is_band): the allowed keys of query row i of batch b are exactly
 * [*key_begin, *key_end) (empty: *key_begin == *key_end; rows past query_lengths[b] are
 * empty). Additive terms are not part of it. */
void attn_mask_band_row(const attn_mask_context *context, int64_t b, int64_t i,
                        int64_t *key_begin, int64_t *key_end);

/* Largest |position| accepted in query_positions / key_positions (differences and ALiBi
 * distances stay exact in int64 and double). */
#define ATTN_MAX_POSITION ((int64_t)1 << 52)

#endif /* ATTN_MASK_H */
