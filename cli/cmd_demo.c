/*
 * cmd_demo.c — `attn demo`: a worked example of attention on one short sentence, computed with
 * the library and printed step by step, with heat maps of the attention weights.
 *
 *  1. the embedding matrix A of 我喜欢学注意力机制 (5 tokens x 4 dims, the notes' values)
 *  2. sinusoidal positional encoding (attn_sinusoidal_encoding)
 *  3. plain self-attention W = softmax(A Aᵀ), Y = W A (attn_forward, scale 1)
 *  4. one learnable head: Q = A W^Q, K = A W^K, V = A W^V (attn_linear_forward), seeded weights
 *  5. why divide by √dk: the softmax with and without it, for dk = 4 and dk = 512
 *  6. the causal mask, reproducing the notes' 5x5 masked-softmax example
 *  7. multi-head attention: 8 heads of 64 in 512 and its parameter count 4n²; 2 heads here
 *  8. GQA: 8 query heads sharing 4 KV heads, checked against MHA with repeated K/V
 *  9. KV-cache elements and bytes per token for MHA, GQA, MQA and MLA
 *
 * Attention weights are never a separate API: they are what attn_forward returns when V is
 * the identity matrix (O = softmax(...)·I), which is how this demo obtains them.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attn_layers.h"
#include "cli.h"
#include "heatmap.h"
#include "probabilities.h"
#include "npy_tensor.h"

#define TOKENS 5
#define DIMS 4

static const char *const token_labels[TOKENS] = {"我", "喜欢", "学", "注意力", "机制"};

/* The notes' embedding matrix A [5, 4]. */
static const float embedding[TOKENS][DIMS] = {
    {0.98f, 0.05f, 0.11f, 0.01f}, {0.21f, 0.65f, 0.45f, 0.03f}, {0.15f, 0.91f, 0.20f, 0.08f},
    {0.10f, 0.08f, 0.95f, 0.72f}, {0.02f, 0.01f, 0.89f, 0.93f},
};

/* The notes' masked-softmax example: logits [5, 5] (the upper triangle is masked) and the
 * rounded weights the notes print. */
static const float seed_logits[TOKENS][TOKENS] = {
    {0.4f, 0, 0, 0, 0},         {0.1f, -0.3f, 0, 0, 0},   {0.5f, 0.7f, 3.0f, 0, 0},
    {-1.2f, 1.5f, 0.4f, 0.5f, 0}, {3.2f, 1.0f, -1.0f, -0.5f, -2.0f},
};
static const float seed_weights[TOKENS][TOKENS] = {
    {1.00f, 0, 0, 0, 0},          {0.60f, 0.40f, 0, 0, 0},        {0.07f, 0.08f, 0.85f, 0, 0},
    {0.04f, 0.57f, 0.19f, 0.21f, 0}, {0.86f, 0.10f, 0.01f, 0.02f, 0.01f},
};

typedef struct demo_state {
    const char *out_directory; /* NULL: no heat maps */
    const char *picture_format; /* "png" or "svg" */
    int heatmap_count;
    attn_error error;
} demo_state;

/* ---- printing ------------------------------------------------------------------------- */

/* Display width of UTF-8 text in a terminal: CJK ideographs and full-width forms take two
 * columns, everything else one. */
static int display_width(const char *text) {
    int width = 0;
    const unsigned char *c = (const unsigned char *)text;
    while (*c) {
        uint32_t code = *c;
        int length = code >= 0xF0 ? 4 : code >= 0xE0 ? 3 : code >= 0xC0 ? 2 : 1;
        if (length > 1) code &= 0x3F >> (length - 1);
        for (int n = 1; n < length && (c[n] & 0xC0) == 0x80; ++n) code = code << 6 | (c[n] & 0x3F);
        for (int n = 0; n < length && *c; ++n) ++c;
        width += (code >= 0x2E80 && code <= 0x9FFF) || (code >= 0xF900 && code <= 0xFAFF) ||
                         (code >= 0xFF00 && code <= 0xFF60)
                     ? 2
                     : 1;
    }
    return width;
}

/* n with thousands separators ("1,048,576") into `buffer`; returns buffer. */
static const char *with_commas(long long n, char *buffer, size_t capacity) {
    char digits[32];
    int length = snprintf(digits, sizeof digits, "%lld", n);
    size_t out = 0;
    for (int i = 0; i < length && out + 2 < capacity; ++i) {
        if (i > 0 && digits[i - 1] != '-' && (length - i) % 3 == 0) buffer[out++] = ',';
        buffer[out++] = digits[i];
    }
    buffer[out] = '\0';
    return buffer;
}

static void print_padded(const char *text, int width) {
    printf("%s%*s", text, width - display_width(text) > 0 ? width - display_width(text) : 0, "");
}

/* Prints values [rows, columns] (row stride = columns) with a title, its shape, row labels
 * (token names, or indices when NULL) and column labels ("prefix0", "prefix1", ...). */
static void print_matrix(const char *title, const float *values, int rows, int columns,
                         const char *const *row_labels, const char *column_prefix, int decimals) {
    printf("\n  %s  [%d x %d]\n  ", title, rows, columns);
    print_padded("", 8);
    for (int j = 0; j < columns; ++j) {
        char label[32];
        if (column_prefix == NULL) snprintf(label, sizeof label, "%s", token_labels[j]);
        else snprintf(label, sizeof label, "%s%d", column_prefix, j + 1);
        printf("%*s", 9 - display_width(label) + (int)strlen(label), label);
    }
    printf("\n");
    for (int i = 0; i < rows; ++i) {
        char index[16];
        snprintf(index, sizeof index, "%d", i + 1);
        printf("  ");
        print_padded(row_labels ? row_labels[i] : index, 8);
        for (int j = 0; j < columns; ++j) /* + 0: a masked -0.0 prints as 0 */
            printf("%9.*f", decimals, values[i * columns + j] + 0.0f);
        printf("\n");
    }
}

static void print_heading(const char *number, const char *title) {
    printf("\n\n== %s %s ", number, title);
    for (int i = display_width(title) + (int)strlen(number); i < 86; ++i) printf("=");
    printf("\n");
}

/* ---- computing with the library ----------------------------------------------------------- */

static bool report(demo_state *state, attn_status status) {
    if (status == ATTN_OK) return true;
    cli_error("demo", "%s", state->error.message);
    return false;
}

/* out [T_q, H, Dv] = attention of q [Tq, H, Dk] over k [Tk, Hkv, Dk], v [Tk, Hkv, Dv]
 * (batch 1, contiguous) with `options`. */
static bool attention(demo_state *state, const float *q, const float *k, const float *v,
                      int64_t query_length, int64_t key_length, int64_t heads, int64_t kv_heads,
                      int64_t key_dim, int64_t value_dim, const attn_options *options,
                      float *out) {
    attn_tensor tq = attn_tensor_f32_4d((float *)q, 1, query_length, heads, key_dim);
    attn_tensor tk = attn_tensor_f32_4d((float *)k, 1, key_length, kv_heads, key_dim);
    attn_tensor tv = attn_tensor_f32_4d((float *)v, 1, key_length, kv_heads, value_dim);
    attn_tensor to = attn_tensor_f32_4d(out, 1, query_length, heads, value_dim);
    return report(state, attn_forward(&tq, &tk, &tv, options, &to, NULL, NULL, &state->error));
}

/* weights [Tq, Tk] of one head (probabilities.h: attention with V = the identity, masked
 * pairs -0.0 so the heat maps draw them apart from tiny weights). */
static bool attention_weights(demo_state *state, const float *q, const float *k,
                              int64_t query_length, int64_t key_length, int64_t key_dim,
                              const attn_options *options, float *weights) {
    attn_tensor tq = attn_tensor_f32_4d((float *)q, 1, query_length, 1, key_dim);
    attn_tensor tk = attn_tensor_f32_4d((float *)k, 1, key_length, 1, key_dim);
    return report(state, cli_attention_probabilities(&tq, &tk, options, NULL, weights,
                                                     &state->error));
}

static attn_options scale_options(float scale) {
    attn_options options = attn_options_default();
    if (scale > 0) {
        options.custom_scale = 1;
        options.scale = scale;
    }
    return options;
}

/* Writes a heat map of weights [panels, rows, columns] (values 0..1), rows and columns
 * labelled with the tokens, into the output folder as NAME.png (or .svg). */
static bool heatmap(demo_state *state, const char *name, const char *title, const float *weights,
                    int panels, int rows, int columns) {
    static const char *const head_titles[] = {"head 1", "head 2", "head 3", "head 4"};
    if (state->out_directory == NULL) return true;
    char path[1024], message[1200];
    snprintf(path, sizeof path, "%s/%s.%s", state->out_directory, name, state->picture_format);
    const cli_heatmap map = {
        .values = weights, .panels = panels, .rows = rows, .columns = columns, .title = title,
        .row_labels = rows == TOKENS ? token_labels : NULL,
        .column_labels = columns == TOKENS ? token_labels : NULL,
        .panel_titles = panels > 1 && panels <= 4 ? head_titles : NULL,
        .row_axis = "query", .column_axis = "key", .minimum = 0.0f, .maximum = 1.0f,
    };
    if (cli_heatmap_write(path, &map, message, sizeof message) != 0) {
        cli_error("demo", "%s", message);
        return false;
    }
    printf("  heat map: %s\n", path);
    ++state->heatmap_count;
    return true;
}

/* Deterministic uniform numbers in [-1, 1) (splitmix64), for the seeded weights. */
static float seeded_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static float seeded_normal(uint64_t *state) {
    double u1 = (seeded_uniform(state) + 1.0) * 0.5, u2 = (seeded_uniform(state) + 1.0) * 0.5;
    if (u1 < 1e-12) u1 = 1e-12;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* x [rows, in] times w [in, out] as in the notes (Q = A W^Q), through attn_linear_forward,
 * which takes nn.Linear's weight [out, in] = wᵀ. */
static bool project(demo_state *state, const float *x, int64_t rows, const float *w,
                    int64_t in_features, int64_t out_features, float *y) {
    float *transposed = malloc((size_t)(in_features * out_features) * sizeof(float));
    if (transposed == NULL) return false;
    for (int64_t i = 0; i < in_features; ++i)
        for (int64_t o = 0; o < out_features; ++o)
            transposed[o * in_features + i] = w[i * out_features + o];
    bool ok = report(state, attn_linear_forward(x, rows, in_features, transposed, NULL,
                                                out_features, y, &state->error));
    free(transposed);
    return ok;
}

/* ---- the walk-through ------------------------------------------------------------------- */

static bool section_embedding_and_positions(demo_state *state) {
    print_heading("1", "词嵌入 Embedding: 我喜欢学注意力机制 -> 5 tokens x 4 dims");
    printf("  Each token becomes a row vector; stacked, they form the embedding matrix A.\n");
    print_matrix("A = embeddings", &embedding[0][0], TOKENS, DIMS, token_labels, "d", 2);

    print_heading("2", "位置编码 Sinusoidal positional encoding (Vaswani et al. 3.5)");
    printf("  PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d))\n");
    float pe[TOKENS * DIMS], x[TOKENS * DIMS];
    if (!report(state, attn_sinusoidal_encoding(0, TOKENS, DIMS, pe, &state->error)))
        return false;
    print_matrix("PE (positions 0..4)", pe, TOKENS, DIMS, token_labels, "d", 4);
    for (int n = 0; n < TOKENS * DIMS; ++n) x[n] = (&embedding[0][0])[n] + pe[n];
    print_matrix("A + PE (what a Transformer layer would see)", x, TOKENS, DIMS, token_labels,
                 "d", 4);
    printf("  Low dimensions oscillate fast (local order), high ones slowly (global position).\n"
           "  The notes' walk-through continues with A itself, and so do we.\n");
    return true;
}

static bool section_self_attention(demo_state *state) {
    print_heading("3", "自注意力 Plain self-attention: W = softmax(A·Aᵀ), Y = W·A");
    printf("  Every token scores every token by a dot product; softmax turns each row into\n"
           "  weights that sum to 1; Y re-mixes the rows of A with those weights.\n"
           "  (attn_forward with Q = K = V = A and scale 1.)\n");
    const attn_options options = scale_options(1.0f);
    float scores[TOKENS * TOKENS], weights[TOKENS * TOKENS], y[TOKENS * DIMS];
    for (int i = 0; i < TOKENS; ++i)
        for (int j = 0; j < TOKENS; ++j) {
            float dot = 0;
            for (int d = 0; d < DIMS; ++d) dot += embedding[i][d] * embedding[j][d];
            scores[i * TOKENS + j] = dot;
        }
    print_matrix("A·Aᵀ (dot products)", scores, TOKENS, TOKENS, token_labels, NULL, 4);
    if (!attention_weights(state, &embedding[0][0], &embedding[0][0], TOKENS, TOKENS, DIMS,
                           &options, weights) ||
        !attention(state, &embedding[0][0], &embedding[0][0], &embedding[0][0], TOKENS, TOKENS, 1,
                   1, DIMS, DIMS, &options, y))
        return false;
    print_matrix("W = softmax(A·Aᵀ) (rows sum to 1)", weights, TOKENS, TOKENS, token_labels, NULL,
                 4);
    print_matrix("Y = W·A (each token, now with its context)", y, TOKENS, DIMS, token_labels, "d",
                 4);
    return heatmap(state, "01_self_attention", "self-attention softmax(A·Aᵀ), one head", weights, 1,
                   TOKENS, TOKENS);
}

/* The learnable head's projections, shared by later sections. */
typedef struct head_projections {
    float wq[DIMS * DIMS], wk[DIMS * DIMS], wv[DIMS * DIMS];
    float q[TOKENS * DIMS], k[TOKENS * DIMS], v[TOKENS * DIMS];
} head_projections;

static bool section_single_head(demo_state *state, head_projections *head) {
    print_heading("4", "单头注意力 One learnable head: Q = A·W^Q, K = A·W^K, V = A·W^V");
    printf("  Three trainable 4x4 matrices give A three roles: asking (Q), being matched (K)\n"
           "  and being mixed (V). Here they are seeded random numbers in [-1, 1) (seed 2024);\n"
           "  training would tune them. Projections through attn_linear_forward.\n");
    uint64_t seed = 2024;
    float *weights[3] = {head->wq, head->wk, head->wv};
    for (int m = 0; m < 3; ++m)
        for (int n = 0; n < DIMS * DIMS; ++n) weights[m][n] = seeded_uniform(&seed);
    if (!project(state, &embedding[0][0], TOKENS, head->wq, DIMS, DIMS, head->q) ||
        !project(state, &embedding[0][0], TOKENS, head->wk, DIMS, DIMS, head->k) ||
        !project(state, &embedding[0][0], TOKENS, head->wv, DIMS, DIMS, head->v))
        return false;
    print_matrix("W^Q", head->wq, DIMS, DIMS, NULL, "d", 4);
    print_matrix("Q = A·W^Q", head->q, TOKENS, DIMS, token_labels, "d", 4);
    print_matrix("K = A·W^K", head->k, TOKENS, DIMS, token_labels, "d", 4);
    print_matrix("V = A·W^V", head->v, TOKENS, DIMS, token_labels, "d", 4);
    const attn_options options = attn_options_default(); /* scale 1/√dk = 1/2 */
    float p[TOKENS * TOKENS], y[TOKENS * DIMS];
    if (!attention_weights(state, head->q, head->k, TOKENS, TOKENS, DIMS, &options, p) ||
        !attention(state, head->q, head->k, head->v, TOKENS, TOKENS, 1, 1, DIMS, DIMS, &options,
                   y))
        return false;
    print_matrix("P = softmax(Q·Kᵀ / √4)", p, TOKENS, TOKENS, token_labels, NULL, 4);
    print_matrix("Y = P·V", y, TOKENS, DIMS, token_labels, "d", 4);
    return heatmap(state, "02_single_head", "layer 1, head 1: softmax(Q·Kᵀ/√4)", p, 1, TOKENS,
                   TOKENS);
}

/* Largest softmax gradient entry p_i (1 - p_i) of one row: how much learning signal flows. */
static float largest_gradient(const float *p, int count) {
    float largest = 0;
    for (int j = 0; j < count; ++j) largest = fmaxf(largest, p[j] * (1.0f - p[j]));
    return largest;
}

static bool section_scaling(demo_state *state, const head_projections *head) {
    print_heading("5", "为什么除以 √dk  Why divide by √dk");
    printf("  A dot product of two dk-dimensional vectors with unit-variance entries has\n"
           "  standard deviation √dk. Large logits push softmax into saturation (one weight\n"
           "  ~1, the rest ~0), where its gradient p(1 - p) vanishes. Dividing by √dk brings\n"
           "  the logits back to unit scale.\n");
    float unscaled[TOKENS * TOKENS];
    const attn_options one = scale_options(1.0f);
    if (!attention_weights(state, head->q, head->k, TOKENS, TOKENS, DIMS, &one, unscaled))
        return false;
    print_matrix("the head of section 4 without scaling: softmax(Q·Kᵀ)", unscaled, TOKENS,
                 TOKENS, token_labels, NULL, 4);
    if (!heatmap(state, "03_single_head_unscaled", "layer 1, head 1 without √dk: softmax(Q·Kᵀ)",
                 unscaled, 1, TOKENS, TOKENS)) return false;

    enum { WIDE = 512, KEYS = 5 };
    float *q = malloc(WIDE * sizeof(float)), *k = malloc(KEYS * WIDE * sizeof(float));
    if (q == NULL || k == NULL) {
        free(q);
        free(k);
        return false;
    }
    uint64_t seed = 512;
    for (int n = 0; n < WIDE; ++n) q[n] = seeded_normal(&seed);
    for (int n = 0; n < KEYS * WIDE; ++n) k[n] = seeded_normal(&seed);
    float logits[KEYS], raw[KEYS], scaled[KEYS];
    for (int j = 0; j < KEYS; ++j) {
        double dot = 0;
        for (int d = 0; d < WIDE; ++d) dot += (double)q[d] * k[j * WIDE + d];
        logits[j] = (float)dot;
    }
    const attn_options default_scale = attn_options_default();
    bool ok = attention_weights(state, q, k, 1, KEYS, WIDE, &one, raw) &&
              attention_weights(state, q, k, 1, KEYS, WIDE, &default_scale, scaled);
    free(q);
    free(k);
    if (!ok) return false;
    printf("\n  dk = 512: one query against 5 keys, entries ~ N(0, 1), so q·k has std √512 = 22.6\n");
    print_matrix("q·k_j", logits, 1, KEYS, NULL, "k", 2);
    print_matrix("softmax(q·k_j)          (saturated)", raw, 1, KEYS, NULL, "k", 4);
    print_matrix("softmax(q·k_j / √512)   (healthy)", scaled, 1, KEYS, NULL, "k", 4);
    printf("  largest gradient entry p(1 - p): %.2e without scaling, %.4f with it\n",
           largest_gradient(raw, KEYS), largest_gradient(scaled, KEYS));
    return true;
}

static bool section_causal(demo_state *state, const head_projections *head) {
    print_heading("6", "掩码注意力 The causal mask: softmax(QKᵀ/√dk + M)");
    printf("  A generator must not peek at later tokens: M is 0 on and below the diagonal and\n"
           "  -inf above it, so softmax gives the future exactly 0. The notes' example: these\n"
           "  logits, masked causally (attn_forward: the logits as --bias, --causal top-left).\n");
    float logits[TOKENS * TOKENS], weights[TOKENS * TOKENS];
    for (int i = 0; i < TOKENS; ++i)
        for (int j = 0; j < TOKENS; ++j)
            logits[i * TOKENS + j] = j <= i ? seed_logits[i][j] : -INFINITY;
    printf("\n  logits + M  [5 x 5]\n");
    for (int i = 0; i < TOKENS; ++i) {
        printf("          ");
        for (int j = 0; j < TOKENS; ++j)
            if (j <= i) printf("%8.1f", logits[i * TOKENS + j]);
            else printf("%8s", "-inf");
        printf("\n");
    }
    /* Q·Kᵀ = 0 (one zero dimension), scale 1, so the logits are exactly the bias. */
    float zeros[TOKENS] = {0};
    const int64_t bias_shape[4] = {1, 1, TOKENS, TOKENS};
    float bias[TOKENS * TOKENS];
    for (int n = 0; n < TOKENS * TOKENS; ++n) bias[n] = (&seed_logits[0][0])[n];
    attn_tensor bias_tensor = attn_tensor_contiguous(bias, ATTN_DTYPE_F32, 4, bias_shape);
    attn_options options = scale_options(1.0f);
    options.bias = &bias_tensor;
    options.causal = 1;
    options.alignment = ATTN_ALIGN_TOP_LEFT;
    if (!attention_weights(state, zeros, zeros, TOKENS, TOKENS, 1, &options, weights))
        return false;
    printf("\n  softmax(logits + M): computed (4 decimals) | rounded | the notes\n");
    int differing = 0;
    for (int i = 0; i < TOKENS; ++i) {
        printf("  ");
        for (int j = 0; j < TOKENS; ++j) printf("%7.4f", weights[i * TOKENS + j] + 0.0f);
        printf("  |");
        for (int j = 0; j < TOKENS; ++j) printf("%5.2f", weights[i * TOKENS + j] + 0.0f);
        printf("  |");
        for (int j = 0; j < TOKENS; ++j) {
            printf("%5.2f", seed_weights[i][j]);
            char ours[16], theirs[16];
            snprintf(ours, sizeof ours, "%.2f", weights[i * TOKENS + j] + 0.0f);
            snprintf(theirs, sizeof theirs, "%.2f", seed_weights[i][j]);
            differing += strcmp(ours, theirs) != 0;
        }
        printf("\n");
    }
    printf("  Rows 1-4 match the notes digit for digit. In row 5 the exact weights 0.8650 and\n"
           "  0.0048 round to 0.87 and 0.00; the notes print 0.86 and 0.01 so that the row\n"
           "  adds up to 1.00 (%d of 25 rounded entries differ, none by more than 0.01).\n",
           differing);
    if (!heatmap(state, "04_causal_notes_example", "the causal mask example: softmax(logits + M)",
                 weights, 1, TOKENS, TOKENS)) return false;

    float p[TOKENS * TOKENS];
    attn_options causal = attn_options_default();
    causal.causal = 1;
    causal.alignment = ATTN_ALIGN_TOP_LEFT;
    if (!attention_weights(state, head->q, head->k, TOKENS, TOKENS, DIMS, &causal, p))
        return false;
    print_matrix("the head of section 4, causal: softmax(Q·Kᵀ/√4 + M)", p, TOKENS, TOKENS,
                 token_labels, NULL, 4);
    return heatmap(state, "05_single_head_causal", "layer 1, head 1, causal: softmax(Q·Kᵀ/√4 + M)", p,
                   1, TOKENS, TOKENS);
}

static bool section_multi_head(demo_state *state, const head_projections *head) {
    print_heading("7", "多头注意力 Multi-head attention (MHA)");
    char mha[32], general[32];
    printf("  h heads each attend in their own d/h-dimensional subspace; their outputs are\n"
           "  concatenated and mixed by W^O:  MultiHead = Concat(head_1..head_h)·W^O.\n"
           "  GPT-2-like: d = 512, h = 8 heads of 512/8 = 64 dims.\n"
           "  Parameters: W^Q, W^K, W^V are d x (h·64) = d x d each, W^O is d x d:\n"
           "    4·d² = 4·512² = %s  (the same as one head of width 512)\n"
           "  General form with g KV heads of width dh:  2·d·dh·(h + g)\n"
           "    MHA (g = h = 8):  2·512·64·(8 + 8) = %s\n",
           with_commas(4LL * 512 * 512, mha, sizeof mha),
           with_commas(2LL * 512 * 64 * (8 + 8), general, sizeof general));
    printf("\n  On our example: d = 4 split into 2 heads of 2 dims (Q, K, V of section 4 viewed\n"
           "  as [5 tokens, 2 heads, 2 dims]; scale 1/√2).\n");
    float out[TOKENS * DIMS];
    const attn_options options = attn_options_default();
    if (!attention(state, head->q, head->k, head->v, TOKENS, TOKENS, 2, 2, 2, 2, &options, out))
        return false;
    float heads[2 * TOKENS * TOKENS];
    for (int h = 0; h < 2; ++h) {
        float q[TOKENS * 2], k[TOKENS * 2], *p = heads + h * TOKENS * TOKENS;
        for (int t = 0; t < TOKENS; ++t)
            for (int d = 0; d < 2; ++d) {
                q[t * 2 + d] = head->q[t * DIMS + h * 2 + d];
                k[t * 2 + d] = head->k[t * DIMS + h * 2 + d];
            }
        if (!attention_weights(state, q, k, TOKENS, TOKENS, 2, &options, p)) return false;
        char title[64], name[64];
        snprintf(title, sizeof title, "head %d weights", h + 1);
        print_matrix(title, p, TOKENS, TOKENS, token_labels, NULL, 4);
        snprintf(title, sizeof title, "layer 1, head %d of 2: softmax(Q·Kᵀ/√2)", h + 1);
        snprintf(name, sizeof name, "06_mha_head%d", h + 1);
        if (!heatmap(state, name, title, p, 1, TOKENS, TOKENS)) return false;
    }
    if (!heatmap(state, "07_mha_layer", "layer 1: both heads (d = 4 split into 2 heads of 2)",
                 heads, 2, TOKENS, TOKENS))
        return false;
    print_matrix("Concat(head_1, head_2)  (then ·W^O)", out, TOKENS, DIMS, token_labels, "d", 4);
    return true;
}

static bool section_gqa(demo_state *state) {
    print_heading("8", "分组查询注意力 Grouped-query attention (GQA)");
    printf("  8 query heads share 4 KV heads: each group of 8/4 = 2 query heads reads one K/V\n"
           "  head. Query head i (from 0) uses KV head floor(i / 2):\n");
    for (int g = 0; g < 4; ++g)
        printf("    group %d: Q%d, Q%d -> K%d, V%d\n", g + 1, 2 * g + 1, 2 * g + 2, g + 1, g + 1);
    char mha[32], gqa[32], mqa[32];
    printf("  Parameters 2·d·dh·(h + g) for d = 512, dh = 64, h = 8:\n"
           "    MHA (g = 8) %s, GQA (g = 4) %s, MQA (g = 1) %s\n",
           with_commas(2LL * 512 * 64 * 16, mha, sizeof mha),
           with_commas(2LL * 512 * 64 * 12, gqa, sizeof gqa),
           with_commas(2LL * 512 * 64 * 9, mqa, sizeof mqa));

    enum { H = 8, G = 4, D = 16 };
    float *q = malloc(TOKENS * H * D * sizeof(float));
    float *k = malloc(TOKENS * G * D * sizeof(float)), *v = malloc(TOKENS * G * D * sizeof(float));
    float *k_full = malloc(TOKENS * H * D * sizeof(float));
    float *v_full = malloc(TOKENS * H * D * sizeof(float));
    float *out_gqa = malloc(TOKENS * H * D * sizeof(float));
    float *out_mha = malloc(TOKENS * H * D * sizeof(float));
    bool ok = q && k && v && k_full && v_full && out_gqa && out_mha;
    if (ok) {
        uint64_t seed = 8;
        for (int n = 0; n < TOKENS * H * D; ++n) q[n] = seeded_normal(&seed);
        for (int n = 0; n < TOKENS * G * D; ++n) k[n] = seeded_normal(&seed);
        for (int n = 0; n < TOKENS * G * D; ++n) v[n] = seeded_normal(&seed);
        /* MHA equivalent: repeat each KV head for its 2 query heads (repeat_interleave). */
        for (int t = 0; t < TOKENS; ++t)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d) {
                    k_full[(t * H + h) * D + d] = k[(t * G + h / (H / G)) * D + d];
                    v_full[(t * H + h) * D + d] = v[(t * G + h / (H / G)) * D + d];
                }
        const attn_options options = attn_options_default();
        ok = attention(state, q, k, v, TOKENS, TOKENS, H, G, D, D, &options, out_gqa) &&
             attention(state, q, k_full, v_full, TOKENS, TOKENS, H, H, D, D, &options, out_mha);
    }
    if (ok) {
        float largest = 0;
        for (int n = 0; n < TOKENS * H * D; ++n)
            largest = fmaxf(largest, fabsf(out_gqa[n] - out_mha[n]));
        printf("  Check on random Q [5, 8, 16], K, V [5, 4, 16]: GQA against MHA with each KV\n"
               "  head repeated for its group: max |difference| = %g; the KV tensors GQA keeps\n"
               "  are half the size.\n", largest);
    }
    free(q);
    free(k);
    free(v);
    free(k_full);
    free(v_full);
    free(out_gqa);
    free(out_mha);
    return ok;
}

static void kv_row(const char *name, long long elements) {
    char count[32], bytes[32];
    printf("    ");
    print_padded(name, 32);
    printf("%8s elements  %8s bytes in bf16\n", with_commas(elements, count, sizeof count),
           with_commas(2 * elements, bytes, sizeof bytes));
}

static void section_kv_cache(void) {
    print_heading("9", "KV cache per token");
    printf("  Decoding keeps K and V of every past token: per token and layer 2·g·dh elements\n"
           "  (g KV heads of width dh). MLA caches one compressed latent c_KV (d_c) plus one\n"
           "  shared RoPE key (d_rope) instead: d_c + d_rope elements.\n"
           "  Our d = 512 model (h = 8, dh = 64):\n");
    kv_row("MHA (g = 8): 2·8·64", 2LL * 8 * 64);
    kv_row("GQA (g = 4): 2·4·64", 2LL * 4 * 64);
    kv_row("MQA (g = 1): 2·1·64", 2LL * 1 * 64);
    printf("  DeepSeek-V3 scale (128 heads of 128; MLA d_c = 512, d_rope = 64):\n");
    kv_row("MHA (g = 128): 2·128·128", 2LL * 128 * 128);
    kv_row("GQA (g = 8): 2·8·128", 2LL * 8 * 128);
    kv_row("MQA (g = 1): 2·1·128", 2LL * 1 * 128);
    kv_row("MLA: d_c + d_rope = 512 + 64", 512 + 64);
    printf("  Multiply by layers x tokens x batch for the whole cache (attn kv-size computes it).\n");
}

/* ---- command ------------------------------------------------------------------------------ */

static void print_help(void) {
    printf("usage: attn demo [--out DIR] [--svg] [--no-heatmaps]\n\n"
           "Walks through the worked example of the study notes (我喜欢学注意力机制, 5 tokens x\n"
           "4 dims) with the library: embeddings, sinusoidal positions, plain self-attention,\n"
           "one learnable head, the √dk scaling, the causal mask (the notes' 5x5 example),\n"
           "multi-head attention and its parameter count, GQA, and KV-cache sizes. Prints every\n"
           "matrix with its shape and writes heat maps of the attention weights, labelled with the\n"
           "tokens, the weight in each cell and a colour scale.\n\n"
           "options:\n"
           "  --out DIR        folder for the heat maps (default ./attn-demo; created)\n"
           "  --svg            write SVG pictures instead of PNG\n"
           "  --no-heatmaps    print only, write no files\n");
}

/* mkdir -p for `path`; false (with a message) on failure. */
static bool make_directories(const char *path) {
    char buffer[1024];
    if (strlen(path) >= sizeof buffer) {
        cli_error("demo", "--out %s: path too long", path);
        return false;
    }
    strcpy(buffer, path);
    for (char *c = buffer + 1;; ++c) {
        if (*c == '/' || *c == '\0') {
            char saved = *c;
            *c = '\0';
            if (mkdir(buffer, 0755) != 0 && errno != EEXIST) {
                cli_error("demo", "--out %s: cannot create %s: %s", path, buffer, strerror(errno));
                return false;
            }
            *c = saved;
            if (saved == '\0') break;
        }
    }
    struct stat info;
    if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode)) {
        cli_error("demo", "--out %s: not a directory", path);
        return false;
    }
    return true;
}

int cli_demo(int argc, char **argv) {
    demo_state state;
    memset(&state, 0, sizeof state);
    state.out_directory = "attn-demo";
    state.picture_format = "png";
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help();
            return 0;
        } else if (strcmp(argv[i], "--out") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                cli_error("demo", "--out needs a folder name");
                return 2;
            }
            state.out_directory = argv[++i];
        } else if (strcmp(argv[i], "--svg") == 0) {
            state.picture_format = "svg";
        } else if (strcmp(argv[i], "--no-heatmaps") == 0) {
            state.out_directory = NULL;
        } else {
            cli_error("demo", "unknown option '%s' (see attn demo --help)", argv[i]);
            return 2;
        }
    }
    if (state.out_directory != NULL && !make_directories(state.out_directory)) return 1;

    printf("attn demo — the attention mechanism, step by step, on 我喜欢学注意力机制\n");
    head_projections head;
    bool ok = section_embedding_and_positions(&state) && section_self_attention(&state) &&
              section_single_head(&state, &head) && section_scaling(&state, &head) &&
              section_causal(&state, &head) && section_multi_head(&state, &head) &&
              section_gqa(&state);
    if (!ok) return 1;
    section_kv_cache();
    if (state.out_directory != NULL)
        printf("\n%d heat maps (viridis: dark purple = 0, yellow = 1) written to %s/\n",
               state.heatmap_count, state.out_directory);
    return 0;
}
