/*
 * test_mask_tiles.c — the mask machinery of src/mask checked by brute force:
 *   - attn_mask_classify_tile never says FULL for a tile with a disallowed pair nor EMPTY for
 *     one with an allowed pair, on random option sets combining every mask kind; for banded
 *     masks (causal, window, lengths) it is exact, so skipping really happens;
 *   - attn_mask_candidate_keys contains every allowed key of its rows, and is narrow for a
 *     narrow band;
 *   - attn_mask_allowed agrees with a direct transcription of the attn.h formula for the
 *     patterns (strided, fixed, dilated) and global tokens;
 *   - the row forms (attn_mask_allowed_row / attn_mask_additive_row) equal the per-pair ones;
 *   - the standard ALiBi slopes are exact for n in {8, 12, 16, 32}.
 */
#include <stdlib.h>
#include <string.h>

#include "mask/mask.h"
#include "test_support.h"

/* A random valid option set over a random problem, with the arrays it points to. */
typedef struct random_mask {
    attn_problem problem;
    attn_options options;
    attn_tensor mask_view, layout_view;
    uint8_t mask_data[2 * 3 * 40 * 40], layout_data[2 * 3 * 40 * 40];
    int32_t query_lengths[2], key_lengths[2];
    int64_t query_positions[40], key_positions[40], globals[3];
    bool banded_only; /* only causal / window / lengths, implicit positions */
} random_mask;

static void random_mask_build(random_mask *m, test_rng *rng) {
    memset(m, 0, sizeof *m);
    attn_problem *p = &m->problem;
    p->batch = test_rng_range(rng, 1, 2);
    p->query_length = test_rng_range(rng, 1, 40);
    p->key_length = test_rng_range(rng, 1, 40);
    p->query_heads = test_rng_range(rng, 1, 3);
    p->kv_heads = 1;
    p->group_size = p->query_heads;
    p->key_dim = p->value_dim = 4;
    p->scale = 0.5f;
    attn_options *o = &m->options;
    *o = attn_options_default();
    o->alignment = test_rng_range(rng, 0, 1) ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
    o->causal = (int)test_rng_range(rng, 0, 1);
    if (test_rng_range(rng, 0, 1)) {
        o->window = 1;
        o->window_left = test_rng_range(rng, -1, 12);
        o->window_right = test_rng_range(rng, -1, 12);
    }
    m->banded_only = true;
    if (test_rng_range(rng, 0, 2) == 0) {
        for (int64_t b = 0; b < p->batch; ++b) {
            m->query_lengths[b] = (int32_t)test_rng_range(rng, 0, p->query_length);
            m->key_lengths[b] = (int32_t)test_rng_range(rng, 0, p->key_length);
        }
        o->query_lengths = m->query_lengths;
        o->key_lengths = m->key_lengths;
    }
    const int64_t extra = test_rng_range(rng, 0, 5); /* which non-banded feature, if any */
    if (extra == 1) {
        const int64_t mask_shape[4] = {p->batch, p->query_heads, p->query_length, p->key_length};
        const double density = test_rng_uniform(rng);
        for (int64_t n = 0; n < p->batch * p->query_heads * p->query_length * p->key_length; ++n)
            m->mask_data[n] = test_rng_uniform(rng) < density;
        m->mask_view = attn_tensor_contiguous(m->mask_data, ATTN_DTYPE_BOOL, 4, mask_shape);
        o->mask = &m->mask_view;
    } else if (extra == 2) {
        o->pattern = (attn_sparse_pattern)test_rng_range(rng, 1, 3);
        o->pattern_stride = test_rng_range(rng, 1, 9);
        o->pattern_summary = test_rng_range(rng, 1, o->pattern_stride);
        o->pattern_radius = test_rng_range(rng, 0, 4);
        o->pattern_dilation = test_rng_range(rng, 1, 4);
    } else if (extra == 3) {
        o->block_q = test_rng_range(rng, 1, 7);
        o->block_k = test_rng_range(rng, 1, 7);
        const int64_t layout_shape[4] = {1, p->query_heads, (p->query_length - 1) / o->block_q + 1,
                                         (p->key_length - 1) / o->block_k + 1};
        for (int64_t n = 0; n < layout_shape[1] * layout_shape[2] * layout_shape[3]; ++n)
            m->layout_data[n] = test_rng_uniform(rng) < 0.5;
        m->layout_view = attn_tensor_contiguous(m->layout_data, ATTN_DTYPE_BOOL, 4, layout_shape);
        o->block_layout = &m->layout_view;
    } else if (extra == 4) {
        const int64_t limit = p->query_length > p->key_length ? p->query_length : p->key_length;
        for (int n = 0; n < 3; ++n) m->globals[n] = test_rng_range(rng, 0, limit - 1);
        o->global_tokens = m->globals;
        o->global_token_count = 3;
        if (o->window_left < 0 && o->window_right < 0) o->window = 1, o->window_left = 2;
    } else if (extra == 5) {
        int64_t position = test_rng_range(rng, -5, 5);
        for (int64_t j = 0; j < p->key_length; ++j) m->key_positions[j] = (position += test_rng_range(rng, 0, 3));
        position = test_rng_range(rng, -5, 20);
        for (int64_t i = 0; i < p->query_length; ++i) m->query_positions[i] = (position += test_rng_range(rng, 0, 2));
        o->key_positions = m->key_positions;
        o->query_positions = m->query_positions;
        if (test_rng_range(rng, 0, 1)) { /* shuffle: positions need not be monotone */
            for (int64_t j = p->key_length - 1; j > 0; --j) {
                int64_t s = test_rng_range(rng, 0, j), t = m->key_positions[j];
                m->key_positions[j] = m->key_positions[s];
                m->key_positions[s] = t;
            }
        }
    }
    m->banded_only = extra == 0 || extra > 5;
}

/* Counts the allowed pairs of a rectangle. */
static int64_t count_allowed(const attn_mask_context *context, int64_t b, int64_t h, int64_t i0,
                             int64_t i1, int64_t j0, int64_t j1) {
    int64_t allowed = 0;
    for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) allowed += attn_mask_allowed(context, b, h, i, j);
    return allowed;
}

static void check_classification(void) {
    test_rng rng;
    test_rng_seed(&rng, 2024);
    int64_t wrong = 0, inexact_banded = 0, tiles = 0, skipped = 0, candidate_misses = 0, row_mismatches = 0;
    for (int trial = 0; trial < 400; ++trial) {
        random_mask m;
        random_mask_build(&m, &rng);
        attn_error error = {0};
        attn_status status = attn_validate_options(&m.options, &m.problem, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "trial %d options valid", trial);
        if (status != ATTN_OK) continue;
        attn_mask_context context;
        CHECK_STATUS(attn_mask_context_init(&context, &m.options, &m.problem, &error), ATTN_OK,
                     &error, "trial %d context", trial);
        const int64_t tile_q = test_rng_range(&rng, 1, 16), tile_k = test_rng_range(&rng, 1, 16);
        for (int64_t b = 0; b < m.problem.batch; ++b)
            for (int64_t h = 0; h < m.problem.query_heads; ++h)
                for (int64_t i0 = 0; i0 < m.problem.query_length; i0 += tile_q) {
                    const int64_t i1 = i0 + tile_q < m.problem.query_length ? i0 + tile_q : m.problem.query_length;
                    int64_t key_begin, key_end;
                    attn_mask_candidate_keys(&context, b, i0, i1, &key_begin, &key_end);
                    for (int64_t j0 = 0; j0 < m.problem.key_length; j0 += tile_k) {
                        const int64_t j1 = j0 + tile_k < m.problem.key_length ? j0 + tile_k : m.problem.key_length;
                        const attn_tile_class c = attn_mask_classify_tile(&context, b, h, i0, i1, j0, j1);
                        const int64_t allowed = count_allowed(&context, b, h, i0, i1, j0, j1);
                        const int64_t total = (i1 - i0) * (j1 - j0);
                        ++tiles;
                        skipped += c == ATTN_TILE_EMPTY;
                        if ((c == ATTN_TILE_FULL && allowed != total) || (c == ATTN_TILE_EMPTY && allowed != 0)) {
                            ++wrong;
                            fprintf(stderr, "trial %d: tile [%lld,%lld)x[%lld,%lld) class %d, %lld of %lld allowed\n",
                                    trial, (long long)i0, (long long)i1, (long long)j0, (long long)j1, (int)c,
                                    (long long)allowed, (long long)total);
                        }
                        if (m.banded_only && m.options.mask == NULL &&
                            ((allowed == 0 && c != ATTN_TILE_EMPTY) || (allowed == total && c != ATTN_TILE_FULL)))
                            ++inexact_banded;
                        for (int64_t j = j0; j < j1; ++j)
                            if ((j < key_begin || j >= key_end) && count_allowed(&context, b, h, i0, i1, j, j + 1) > 0)
                                ++candidate_misses;
                    }
                }
        /* The row forms equal the per-pair functions. */
        for (int64_t b = 0; b < m.problem.batch; ++b)
            for (int64_t h = 0; h < m.problem.query_heads; ++h)
                for (int64_t i = 0; i < m.problem.query_length; ++i) {
                    uint8_t row[40];
                    const int64_t j0 = test_rng_range(&rng, 0, m.problem.key_length - 1);
                    const int64_t j1 = test_rng_range(&rng, j0 + 1, m.problem.key_length);
                    attn_mask_allowed_row(&context, b, h, i, j0, j1, row);
                    for (int64_t j = j0; j < j1; ++j)
                        row_mismatches += row[j - j0] != (uint8_t)attn_mask_allowed(&context, b, h, i, j);
                }
        attn_mask_context_free(&context);
    }
    CHECK(wrong == 0, "classify_tile: %lld wrong FULL/EMPTY of %lld tiles", (long long)wrong, (long long)tiles);
    CHECK(inexact_banded == 0, "classify_tile: %lld banded tiles not classified exactly", (long long)inexact_banded);
    CHECK(row_mismatches == 0, "attn_mask_allowed_row: %lld keys differ from attn_mask_allowed", (long long)row_mismatches);
    CHECK(candidate_misses == 0, "candidate_keys: %lld allowed keys outside the range", (long long)candidate_misses);
    CHECK(skipped > tiles / 10, "classification skips tiles (%lld of %lld EMPTY)", (long long)skipped, (long long)tiles);
}

/* A narrow window gives a narrow candidate range: O(window), not O(Tk). */
static void check_candidate_range_is_narrow(void) {
    attn_problem p = {.batch = 1, .query_length = 100000, .key_length = 100000, .query_heads = 1,
                      .kv_heads = 1, .group_size = 1, .key_dim = 4, .value_dim = 4, .scale = 1};
    attn_options o = attn_options_default();
    o.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    o.causal = 1;
    o.window = 1;
    o.window_left = 100;
    attn_mask_context context;
    attn_error error;
    CHECK_STATUS(attn_mask_context_init(&context, &o, &p, &error), ATTN_OK, &error, "context");
    int64_t begin, end;
    attn_mask_candidate_keys(&context, 0, 50000, 50064, &begin, &end);
    CHECK(begin == 49900 && end == 50064, "window (100, 0) rows [50000, 50064): keys [%lld, %lld)",
          (long long)begin, (long long)end);
    o.window = 1;
    o.window_left = -1;
    attn_mask_candidate_keys(&context, 0, 50000, 50064, &begin, &end);
    CHECK(begin == 0 && end == 50064, "causal rows [50000, 50064): keys [%lld, %lld)", (long long)begin,
          (long long)end);
    attn_mask_context_free(&context);
}

/* Direct transcription of the pattern definitions in attn.h (d = pq - pk). */
static int pattern_by_definition(attn_sparse_pattern pattern, int64_t stride, int64_t summary,
                                 int64_t radius, int64_t dilation, int64_t pq, int64_t pk) {
    const int64_t d = pq - pk;
    switch (pattern) {
    case ATTN_PATTERN_STRIDED: return llabs(d) < stride || ((d % stride) + stride) % stride == 0;
    case ATTN_PATTERN_FIXED: {
        const double block_q = floor((double)pq / (double)stride), block_k = floor((double)pk / (double)stride);
        return block_q == block_k || ((pk % stride) + stride) % stride >= stride - summary;
    }
    case ATTN_PATTERN_DILATED: return llabs(d) <= radius * dilation && d % dilation == 0;
    default: return 1;
    }
}

static void check_patterns(void) {
    attn_problem p = {.batch = 1, .query_length = 30, .key_length = 30, .query_heads = 1,
                      .kv_heads = 1, .group_size = 1, .key_dim = 4, .value_dim = 4, .scale = 1};
    const attn_sparse_pattern patterns[] = {ATTN_PATTERN_STRIDED, ATTN_PATTERN_FIXED, ATTN_PATTERN_DILATED};
    int64_t mismatches = 0, strided_row_count = 0;
    for (int n = 0; n < 3; ++n)
        for (int64_t stride = 1; stride <= 6; ++stride) {
            attn_options o = attn_options_default();
            o.alignment = ATTN_ALIGN_TOP_LEFT;
            o.pattern = patterns[n];
            o.pattern_stride = stride;
            o.pattern_summary = (stride + 1) / 2;
            o.pattern_radius = stride - 1;
            o.pattern_dilation = 1 + stride % 3;
            o.causal = stride % 2;
            attn_mask_context context;
            attn_error error;
            CHECK_STATUS(attn_mask_context_init(&context, &o, &p, &error), ATTN_OK, &error, "context");
            for (int64_t i = 0; i < 30; ++i)
                for (int64_t j = 0; j < 30; ++j) {
                    int expected = pattern_by_definition(o.pattern, stride, o.pattern_summary,
                                                         o.pattern_radius, o.pattern_dilation, i, j);
                    if (o.causal && j > i) expected = 0;
                    mismatches += expected != attn_mask_allowed(&context, 0, 0, i, j);
                    if (n == 0 && stride == 5 && i == 29) strided_row_count += expected;
                }
            attn_mask_context_free(&context);
        }
    CHECK(mismatches == 0, "patterns: %lld pairs differ from the definition", (long long)mismatches);
    /* Causal strided, l = 5, row 29: local keys 25..29 (|d| < 5) plus 24, 19, 14, 9, 4 = 10. */
    CHECK(strided_row_count == 10, "causal strided l = 5, row 29 attends %lld keys (expected 10)",
          (long long)strided_row_count);

    /* Global tokens: a global row sees all keys, a global key is seen by all rows (window 1). */
    attn_options o = attn_options_default();
    o.alignment = ATTN_ALIGN_TOP_LEFT;
    o.window = 1;
    o.window_left = o.window_right = 1;
    int64_t globals[1] = {7};
    o.global_tokens = globals;
    o.global_token_count = 1;
    attn_mask_context context;
    attn_error error;
    CHECK_STATUS(attn_mask_context_init(&context, &o, &p, &error), ATTN_OK, &error, "globals");
    int64_t global_mismatches = 0;
    for (int64_t i = 0; i < 30; ++i)
        for (int64_t j = 0; j < 30; ++j) {
            const int expected = llabs(i - j) <= 1 || i == 7 || j == 7;
            global_mismatches += expected != attn_mask_allowed(&context, 0, 0, i, j);
        }
    CHECK(global_mismatches == 0, "global tokens: %lld pairs differ", (long long)global_mismatches);
    attn_mask_context_free(&context);
}

/* attn_mask_additive_row equals attn_mask_additive (bias + ALiBi, explicit positions). */
static void check_additive_row(void) {
    attn_problem p = {.batch = 2, .query_length = 9, .key_length = 13, .query_heads = 3,
                      .kv_heads = 1, .group_size = 3, .key_dim = 4, .value_dim = 4, .scale = 1};
    float bias_data[2 * 1 * 9 * 13];
    test_rng rng;
    test_rng_seed(&rng, 8);
    test_fill_normal(&rng, bias_data, 2 * 9 * 13, 1.0f);
    const int64_t bias_shape[4] = {2, 1, 9, 13};
    attn_tensor bias = attn_tensor_contiguous(bias_data, ATTN_DTYPE_F32, 4, bias_shape);
    int64_t key_positions[13];
    for (int j = 0; j < 13; ++j) key_positions[j] = 3 * j - 7;
    int64_t mismatches = 0;
    for (int variant = 0; variant < 3; ++variant) {
        attn_options o = attn_options_default();
        o.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
        o.alibi = 1;
        if (variant >= 1) o.bias = &bias;
        if (variant == 2) o.key_positions = key_positions;
        attn_mask_context context;
        attn_error error;
        CHECK_STATUS(attn_mask_context_init(&context, &o, &p, &error), ATTN_OK, &error, "additive context");
        for (int64_t b = 0; b < 2; ++b)
            for (int64_t h = 0; h < 3; ++h)
                for (int64_t i = 0; i < 9; ++i) {
                    float row[13];
                    attn_mask_additive_row(&context, b, h, i, 2, 13, row);
                    for (int64_t j = 2; j < 13; ++j)
                        mismatches += row[j - 2] != attn_mask_additive(&context, b, h, i, j);
                }
        attn_mask_context_free(&context);
    }
    CHECK(mismatches == 0, "attn_mask_additive_row: %lld values differ", (long long)mismatches);
}

static void check_alibi_slopes(void) {
    float slopes[32];
    attn_error error;
    const int counts[] = {8, 12, 16, 32};
    for (int n = 0; n < 4; ++n) {
        const int heads = counts[n];
        CHECK_STATUS(attn_alibi_slopes(heads, slopes, &error), ATTN_OK, &error, "slopes %d", heads);
        int exact = 1;
        for (int k = 0; k < heads; ++k) {
            double expected;
            if (heads == 12) /* 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 */
                expected = k < 8 ? pow(2.0, -(k + 1)) : pow(2.0, -0.5 - (k - 8));
            else
                expected = pow(2.0, -8.0 * (k + 1) / heads);
            exact &= slopes[k] == (float)expected;
        }
        CHECK(exact, "ALiBi slopes for %d heads are exact", heads);
    }
    CHECK_STATUS(attn_alibi_slopes(1, slopes, &error), ATTN_OK, &error, "1 head");
    CHECK(slopes[0] == 1.0f / 256.0f, "1 head: slope 2^-8, got %g", (double)slopes[0]);
}

int main(void) {
    check_classification();
    check_candidate_range_is_narrow();
    check_patterns();
    check_alibi_slopes();
    check_additive_row();
    return test_finish();
}
