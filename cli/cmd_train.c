/*
 * cmd_train.c — `attn train`: trains a small attention-only model on a synthetic task that
 * cannot be solved without attention, with the library's layers, backward pass and Adam.
 *
 *   attn train [--task reverse|copy] [--steps N] [--seed S] [--layers 1|2] [--heads H]
 *              [--kv-heads G] [--dim D] [--length L] [--vocab V] [--batch B] [--lr LR]
 *              [--threads T] [--save model.safetensors] [--out DIR] [--quiet]
 *
 * Model: token embedding + fixed sinusoidal positional encoding, then 1-2 residual
 * self-attention layers (h <- h + layer(h), non-causal, no MLP, no normalisation), then an
 * output projection to the vocabulary; softmax cross-entropy over every position; Adam.
 * Tasks: `reverse` (output i = input L-1-i: each position must find its mirror, which only
 * attention with positions can do) and `copy` (output i = input i; a sanity check).
 * Progress (a bar with the loss) goes to stderr; one summary line to stdout:
 *   "train: task reverse steps 600 loss 0.0123 accuracy 0.9990 seconds 12.3"
 * Deterministic for a fixed seed (data, init and every reduction are seeded / ordered).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "attn_layers.h"
#include "cli.h"
#include "heatmap.h"

#define TRAIN_MAX_LAYERS 2

static const char *const command = "train";

static void print_help(void) {
    printf("usage: attn train [options]\n\n"
           "Trains an attention-only model (embedding + sinusoidal positions + 1-2 residual\n"
           "attention layers + output projection, Adam) on a synthetic task.\n\n"
           "  --task reverse|copy   reverse: output i = input L-1-i (default); copy: output i =\n"
           "                        input i\n"
           "  --steps N             optimisation steps (default 600)\n"
           "  --seed S              seed of data and initialisation (default 1)\n"
           "  --layers 1|2          attention layers (default 1)\n"
           "  --heads H             query heads (default 4)\n"
           "  --kv-heads G          KV heads, dividing H (default H: MHA; 1: MQA)\n"
           "  --dim D               model width, a multiple of H (default 64)\n"
           "  --length L            sequence length (default 8)\n"
           "  --vocab V             token values (default 16)\n"
           "  --batch B             sequences per step (default 32)\n"
           "  --lr LR               Adam learning rate (default 3e-3)\n"
           "  --threads T           threads for attention (default 1: these problems are tiny;\n"
           "                        0 = the default); results are identical for any T\n"
           "  --save FILE           write the weights as safetensors (HF-style names)\n"
           "  --out DIR             write attention heat maps of one evaluation sequence (one PNG\n"
           "                        per layer, a panel per head)\n"
           "  --quiet               no progress bar\n\n"
           "Prints one summary line: task, steps, final training loss, token accuracy on 1024\n"
           "fresh sequences, seconds.\n");
}

/* ---- options -------------------------------------------------------------------------- */

typedef enum train_task { TASK_REVERSE = 0, TASK_COPY = 1 } train_task;

typedef struct train_options {
    train_task task;
    int64_t steps, layers, heads, kv_heads, dim, length, vocab, batch;
    uint64_t seed;
    double learning_rate;
    int threads, quiet;
    const char *save_path, *out_dir;
} train_options;

/* Parses an integer option value in [minimum, maximum]; prints the error. */
static int parse_integer(const char *option, const char *text, int64_t minimum, int64_t maximum,
                         int64_t *value) {
    char *end;
    errno = 0;
    long long parsed = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || end == text || parsed < minimum || parsed > maximum) {
        fprintf(stderr, "attn %s: %s '%s': expected an integer in [%lld, %lld]\n", command, option,
                text, (long long)minimum, (long long)maximum);
        return 0;
    }
    *value = parsed;
    return 1;
}

/* Returns 0 to continue, or the exit code (help: 0 via *done; errors: 2). */
static int parse_options(int argc, char **argv, train_options *o, int *done) {
    *o = (train_options){TASK_REVERSE, 600, 1, 4, 0, 64, 8, 16, 32, 1, 3e-3, 1, 0, NULL, NULL};
    *done = 0;
    for (int i = 1; i < argc; ++i) {
        const char *name = argv[i];
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            print_help();
            *done = 1;
            return 0;
        }
        if (strcmp(name, "--quiet") == 0) { o->quiet = 1; continue; }
        static const char *const valued[] = {"--task", "--steps", "--seed", "--layers",
                                             "--heads", "--kv-heads", "--dim", "--length",
                                             "--vocab", "--batch", "--lr", "--threads",
                                             "--save", "--out"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; ++k)
            known |= strcmp(name, valued[k]) == 0;
        if (!known) {
            fprintf(stderr, "attn %s: unknown option '%s' (see attn train --help)\n", command, name);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "attn %s: %s: missing value (see attn train --help)\n", command, name);
            return 2;
        }
        const char *value = argv[++i];
        int64_t number = 0;
        int ok = 1;
        if (strcmp(name, "--task") == 0) {
            if (strcmp(value, "reverse") == 0) o->task = TASK_REVERSE;
            else if (strcmp(value, "copy") == 0) o->task = TASK_COPY;
            else {
                fprintf(stderr, "attn %s: --task '%s': expected reverse or copy\n", command, value);
                return 2;
            }
        } else if (strcmp(name, "--steps") == 0) ok = parse_integer(name, value, 1, 10000000, &o->steps);
        else if (strcmp(name, "--seed") == 0) {
            ok = parse_integer(name, value, 0, INT64_MAX, &number);
            o->seed = (uint64_t)number;
        } else if (strcmp(name, "--layers") == 0) ok = parse_integer(name, value, 1, TRAIN_MAX_LAYERS, &o->layers);
        else if (strcmp(name, "--heads") == 0) ok = parse_integer(name, value, 1, 64, &o->heads);
        else if (strcmp(name, "--kv-heads") == 0) ok = parse_integer(name, value, 1, 64, &o->kv_heads);
        else if (strcmp(name, "--dim") == 0) ok = parse_integer(name, value, 2, 1024, &o->dim);
        else if (strcmp(name, "--length") == 0) ok = parse_integer(name, value, 2, 256, &o->length);
        else if (strcmp(name, "--vocab") == 0) ok = parse_integer(name, value, 2, 4096, &o->vocab);
        else if (strcmp(name, "--batch") == 0) ok = parse_integer(name, value, 1, 4096, &o->batch);
        else if (strcmp(name, "--threads") == 0) {
            ok = parse_integer(name, value, 0, 1024, &number);
            o->threads = (int)number;
        } else if (strcmp(name, "--lr") == 0) {
            char *end;
            o->learning_rate = strtod(value, &end);
            if (*end != '\0' || !(o->learning_rate > 0) || !isfinite(o->learning_rate)) {
                fprintf(stderr, "attn %s: --lr '%s': expected a finite number > 0\n", command,
                        value);
                return 2;
            }
        } else if (strcmp(name, "--save") == 0) o->save_path = value;
        else if (strcmp(name, "--out") == 0) o->out_dir = value;
        else {
            fprintf(stderr, "attn %s: unknown option '%s' (see attn train --help)\n", command, name);
            return 2;
        }
        if (!ok) return 2;
    }
    if (o->kv_heads == 0) o->kv_heads = o->heads;
    if (o->heads % o->kv_heads != 0) {
        fprintf(stderr, "attn %s: --kv-heads %lld: must divide --heads %lld\n", command,
                (long long)o->kv_heads, (long long)o->heads);
        return 2;
    }
    if (o->dim % o->heads != 0) {
        fprintf(stderr, "attn %s: --dim %lld: must be a multiple of --heads %lld\n", command,
                (long long)o->dim, (long long)o->heads);
        return 2;
    }
    return 0;
}

/* ---- data ----------------------------------------------------------------------------- */

/* xoshiro256** seeded by splitmix64: the data stream, independent of the library's. */
typedef struct train_rng { uint64_t s[4]; } train_rng;

static uint64_t train_rng_next(train_rng *r) {
    uint64_t *s = r->s, result = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t;
    s[3] = s[3] << 45 | s[3] >> 19;
    return result;
}

static void train_rng_seed(train_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; ++i) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        r->s[i] = z ^ (z >> 31);
    }
}

/* tokens, targets: int32[batch][length]. */
static void make_batch(const train_options *o, train_rng *rng, int32_t *tokens, int32_t *targets) {
    for (int64_t b = 0; b < o->batch; ++b)
        for (int64_t i = 0; i < o->length; ++i)
            tokens[b * o->length + i] = (int32_t)(train_rng_next(rng) % (uint64_t)o->vocab);
    for (int64_t b = 0; b < o->batch; ++b)
        for (int64_t i = 0; i < o->length; ++i)
            targets[b * o->length + i] =
                tokens[b * o->length + (o->task == TASK_REVERSE ? o->length - 1 - i : i)];
}

/* ---- the model ------------------------------------------------------------------------ */

/* Embedding, output projection and the layers; a second instance holds gradients, two more
 * the Adam moments. `head` is one block: embedding [V][d] | out_weight [V][d] | out_bias [V]. */
typedef struct train_model {
    int64_t layer_count, vocab, dim;
    float *head;
    int64_t head_count;
    float *embedding, *out_weight, *out_bias;
    attn_layer layers[TRAIN_MAX_LAYERS];
} train_model;

static void model_free(train_model *m) {
    free(m->head);
    for (int64_t l = 0; l < m->layer_count; ++l) attn_layer_destroy(&m->layers[l]);
    memset(m, 0, sizeof *m);
}

static int model_create(train_model *m, const train_options *o, attn_error *error) {
    memset(m, 0, sizeof *m);
    m->vocab = o->vocab;
    m->dim = o->dim;
    m->head_count = 2 * o->vocab * o->dim + o->vocab;
    m->head = calloc((size_t)m->head_count, sizeof(float));
    if (m->head == NULL) {
        snprintf(error->message, sizeof error->message, "out of memory");
        return 0;
    }
    m->embedding = m->head;
    m->out_weight = m->head + o->vocab * o->dim;
    m->out_bias = m->out_weight + o->vocab * o->dim;
    attn_layer_config config = {0};
    config.model_dim = o->dim;
    config.query_heads = o->heads;
    config.kv_heads = o->kv_heads;
    config.head_dim = o->dim / o->heads;
    config.bias = 1;
    for (int64_t l = 0; l < o->layers; ++l) {
        if (attn_layer_create(&config, &m->layers[l], error) != ATTN_OK) {
            model_free(m);
            return 0;
        }
        m->layer_count = l + 1;
    }
    return 1;
}

/* N(0, 1) embedding (as nn.Embedding), U(±1/sqrt(d)) output projection (as nn.Linear),
 * Xavier layers. */
static void model_init(train_model *m, uint64_t seed) {
    train_rng rng;
    train_rng_seed(&rng, seed ^ 0xE3B0C44298FC1C14ull);
    for (int64_t i = 0; i < m->vocab * m->dim; ++i) {
        double u1 = ((double)(train_rng_next(&rng) >> 11) + 1.0) * 0x1.0p-53;
        double u2 = (double)(train_rng_next(&rng) >> 11) * 0x1.0p-53;
        m->embedding[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    double bound = 1.0 / sqrt((double)m->dim);
    for (int64_t i = 0; i < m->vocab * m->dim + m->vocab; ++i)
        m->out_weight[i] =
            (float)((2.0 * (double)(train_rng_next(&rng) >> 11) * 0x1.0p-53 - 1.0) * bound);
    for (int64_t l = 0; l < m->layer_count; ++l)
        attn_layer_init_xavier(&m->layers[l], seed + 1000 + (uint64_t)l, NULL);
}

/* Buffers of one batch: hidden states h_0..h_layers [B*L][d], logits [B*L][V], gradients. */
typedef struct train_buffers {
    float *hidden[TRAIN_MAX_LAYERS + 1];
    float *layer_out, *logits, *d_hidden, *d_layer_in, *positional;
    attn_layer_activations activations[TRAIN_MAX_LAYERS];
} train_buffers;

static void buffers_free(train_buffers *b) {
    for (int l = 0; l <= TRAIN_MAX_LAYERS; ++l) free(b->hidden[l]);
    free(b->layer_out); free(b->logits); free(b->d_hidden); free(b->d_layer_in); free(b->positional);
    for (int l = 0; l < TRAIN_MAX_LAYERS; ++l) attn_layer_activations_free(&b->activations[l]);
    memset(b, 0, sizeof *b);
}

static int buffers_create(train_buffers *b, const train_options *o, int64_t batch) {
    memset(b, 0, sizeof *b);
    size_t rows = (size_t)(batch * o->length), width = (size_t)o->dim;
    int ok = 1;
    for (int64_t l = 0; l <= o->layers; ++l) ok &= (b->hidden[l] = malloc(rows * width * sizeof(float))) != NULL;
    ok &= (b->layer_out = malloc(rows * width * sizeof(float))) != NULL;
    ok &= (b->d_hidden = malloc(rows * width * sizeof(float))) != NULL;
    ok &= (b->d_layer_in = malloc(rows * width * sizeof(float))) != NULL;
    ok &= (b->logits = malloc(rows * (size_t)o->vocab * sizeof(float))) != NULL;
    ok &= (b->positional = malloc((size_t)o->length * width * sizeof(float))) != NULL;
    if (ok) ok = attn_sinusoidal_encoding(0, o->length, o->dim, b->positional, NULL) == ATTN_OK;
    if (!ok) buffers_free(b);
    return ok;
}

/* Forward through the model; returns the mean cross-entropy and counts correct tokens. */
static attn_status model_forward(const train_model *m, const train_options *o,
                                 const attn_options *attention, train_buffers *b, int64_t batch,
                                 const int32_t *tokens, const int32_t *targets, double *loss,
                                 int64_t *correct, attn_error *error) {
    attn_execution execution = attn_execution_default();
    execution.num_threads = o->threads; /* --threads: for the attention calls */
    int64_t rows = batch * o->length, d = o->dim, V = o->vocab;
    attn_status status = attn_embedding_lookup(m->embedding, V, d, tokens, rows, b->hidden[0], error);
    if (status != ATTN_OK) return status;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c) b->hidden[0][r * d + c] += b->positional[(r % o->length) * d + c];
    for (int64_t l = 0; l < m->layer_count; ++l) {
        status = attn_layer_forward(&m->layers[l], batch, o->length, b->hidden[l], o->length, NULL,
                                    attention, &b->activations[l], b->layer_out, &execution,
                                    error);
        if (status != ATTN_OK) return status;
        for (int64_t i = 0; i < rows * d; ++i) b->hidden[l + 1][i] = b->hidden[l][i] + b->layer_out[i];
    }
    status = attn_linear_forward(b->hidden[m->layer_count], rows, d, m->out_weight, m->out_bias, V,
                                 b->logits, error);
    if (status != ATTN_OK) return status;
    /* Softmax in place (the logits become probabilities), loss and accuracy. */
    double total = 0.0;
    int64_t right = 0;
    for (int64_t r = 0; r < rows; ++r) {
        float *row = b->logits + r * V;
        int64_t best = 0;
        for (int64_t v = 1; v < V; ++v) if (row[v] > row[best]) best = v;
        double maximum = row[best], sum = 0.0;
        for (int64_t v = 0; v < V; ++v) sum += exp((double)row[v] - maximum);
        total += maximum + log(sum) - row[targets[r]];
        for (int64_t v = 0; v < V; ++v) row[v] = (float)(exp((double)row[v] - maximum) / sum);
        right += best == targets[r];
    }
    *loss = total / (double)rows;
    *correct = right;
    return ATTN_OK;
}

/* Backward from the probabilities left in b->logits; writes every gradient of `g`. */
static attn_status model_backward(const train_model *m, const train_options *o,
                                  const attn_options *attention, train_buffers *b, int64_t batch,
                                  const int32_t *tokens, const int32_t *targets, train_model *g,
                                  attn_error *error) {
    attn_execution execution = attn_execution_default();
    execution.num_threads = o->threads; /* --threads: for the attention calls */
    int64_t rows = batch * o->length, d = o->dim, V = o->vocab;
    memset(g->head, 0, (size_t)g->head_count * sizeof(float));
    /* d logits = (softmax - onehot) / rows, in place. */
    for (int64_t r = 0; r < rows; ++r) {
        b->logits[r * V + targets[r]] -= 1.0f;
        for (int64_t v = 0; v < V; ++v) b->logits[r * V + v] /= (float)rows;
    }
    attn_status status = attn_linear_backward(b->hidden[m->layer_count], rows, d, m->out_weight, V,
                                              b->logits, b->d_hidden, g->out_weight, g->out_bias,
                                              error);
    for (int64_t l = m->layer_count - 1; status == ATTN_OK && l >= 0; --l) {
        status = attn_layer_backward(&m->layers[l], batch, o->length, b->hidden[l], o->length,
                                     NULL, attention, &b->activations[l], b->d_hidden,
                                     &g->layers[l], b->d_layer_in, NULL, &execution, error);
        /* Residual: the input gradient is the output gradient plus the layer's. */
        for (int64_t i = 0; status == ATTN_OK && i < rows * d; ++i) b->d_hidden[i] += b->d_layer_in[i];
    }
    if (status == ATTN_OK)
        status = attn_embedding_backward(tokens, rows, b->d_hidden, V, d, g->embedding, error);
    return status;
}

/* Adam on every parameter block of the model. */
static attn_status model_adam(train_model *m, const train_model *g, train_model *m1,
                              train_model *m2, const attn_adam_config *adam, int64_t step,
                              attn_error *error) {
    attn_status status = attn_adam_step(adam, step, m->head, g->head, m1->head, m2->head,
                                        m->head_count, error);
    for (int64_t l = 0; status == ATTN_OK && l < m->layer_count; ++l)
        status = attn_adam_step(adam, step, m->layers[l].parameters, g->layers[l].parameters,
                                m1->layers[l].parameters, m2->layers[l].parameters,
                                m->layers[l].parameter_count, error);
    return status;
}

/* ---- outputs --------------------------------------------------------------------------- */

static int save_model(const train_model *m, const train_options *o, attn_error *error) {
    attn_safetensors_tensor tensors[3 + 8 * TRAIN_MAX_LAYERS];
    memset(tensors, 0, sizeof tensors);
    const struct { const char *name; const float *data; int rank; int64_t s0, s1; } head[3] = {
        {"embed_tokens.weight", m->embedding, 2, o->vocab, o->dim},
        {"lm_head.weight", m->out_weight, 2, o->vocab, o->dim},
        {"lm_head.bias", m->out_bias, 1, o->vocab, 0},
    };
    int64_t count = 0;
    for (int i = 0; i < 3; ++i, ++count) {
        snprintf(tensors[count].name, sizeof tensors[count].name, "%s", head[i].name);
        tensors[count].dtype = ATTN_DTYPE_F32;
        tensors[count].rank = head[i].rank;
        tensors[count].shape[0] = head[i].s0;
        tensors[count].shape[1] = head[i].s1;
        tensors[count].data = head[i].data;
    }
    for (int64_t l = 0; l < m->layer_count; ++l) {
        char prefix[64];
        int layer_count;
        snprintf(prefix, sizeof prefix, "layers.%lld.self_attn.", (long long)l);
        if (attn_layer_safetensors_entries(&m->layers[l], prefix, tensors + count, &layer_count,
                                           error) != ATTN_OK)
            return 0;
        count += layer_count;
    }
    attn_safetensors_metadata metadata[6];
    const char *keys[6] = {"format", "task", "length", "vocab", "heads", "kv_heads"};
    long long values[6] = {0, 0, o->length, o->vocab, o->heads, o->kv_heads};
    char texts[6][24];
    for (int i = 0; i < 6; ++i) {
        snprintf(texts[i], sizeof texts[i], "%lld", values[i]);
        metadata[i] = (attn_safetensors_metadata){keys[i], texts[i]};
    }
    metadata[0].value = "pt";
    metadata[1].value = o->task == TASK_REVERSE ? "reverse" : "copy";
    return attn_safetensors_write(o->save_path, tensors, count, metadata, 6, error) == ATTN_OK;
}

/* Attention probabilities of sequence 0, one picture per layer with all its heads:
 * P[h][i][j] = exp(scale * q_i . k_j - lse_i) from the kept activations. */
static int write_heatmaps(const train_model *m, const train_options *o, const train_buffers *b) {
    if (mkdir(o->out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn %s: --out '%s': cannot create the directory\n", command, o->out_dir);
        return 0;
    }
    int64_t L = o->length, H = o->heads, G = o->kv_heads, dh = o->dim / o->heads;
    float *map = malloc((size_t)(H * L * L) * sizeof(float));
    if (map == NULL) return 0;
    double scale = 1.0 / sqrt((double)dh);
    for (int64_t l = 0; l < m->layer_count; ++l) {
        const attn_layer_activations *a = &b->activations[l];
        for (int64_t h = 0; h < H; ++h) {
            int64_t kv = h / (H / G);
            for (int64_t i = 0; i < L; ++i)
                for (int64_t j = 0; j < L; ++j) {
                    double dot = 0.0;
                    for (int64_t c = 0; c < dh; ++c)
                        dot += (double)a->q[(i * H + h) * dh + c] * a->k[(j * G + kv) * dh + c];
                    map[(h * L + i) * L + j] = (float)exp(scale * dot - a->lse[h * L + i]);
                }
        }
        char path[4096], title[96], message[4200];
        snprintf(path, sizeof path, "%s/attention_layer%lld.png", o->out_dir, (long long)l);
        snprintf(title, sizeof title, "layer %lld: attention of evaluation sequence 0", (long long)l);
        const cli_heatmap picture = {.values = map, .panels = H, .rows = L, .columns = L,
                                     .title = title, .row_axis = "query", .column_axis = "key",
                                     .minimum = 0.0f, .maximum = 1.0f};
        if (cli_heatmap_write(path, &picture, message, sizeof message) != 0) {
            fprintf(stderr, "attn %s: %s\n", command, message);
            free(map);
            return 0;
        }
    }
    free(map);
    return 1;
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void draw_progress(int64_t step, int64_t steps, double loss, double accuracy,
                          double seconds) {
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int64_t filled = step * WIDTH / steps;
    for (int i = 0; i < WIDTH; ++i) bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\r[%s] step %lld/%lld  loss %.4f  batch accuracy %5.1f%%  %.1fs", bar,
            (long long)step, (long long)steps, loss, 100.0 * accuracy, seconds);
    if (step == steps) fputc('\n', stderr);
    fflush(stderr);
}

int cli_train(int argc, char **argv) {
    train_options o;
    int done;
    int code = parse_options(argc, argv, &o, &done);
    if (code != 0 || done) return code;

    attn_error error = {0};
    train_model model, gradients, moment1, moment2;
    int created = model_create(&model, &o, &error) + model_create(&gradients, &o, &error) +
                  model_create(&moment1, &o, &error) + model_create(&moment2, &o, &error);
    const int64_t eval_batch = 1024;
    train_buffers buffers, eval_buffers;
    int64_t tokens_count = (o.batch > eval_batch ? o.batch : eval_batch) * o.length;
    int32_t *tokens = malloc((size_t)tokens_count * sizeof(int32_t));
    int32_t *targets = malloc((size_t)tokens_count * sizeof(int32_t));
    if (created != 4 || tokens == NULL || targets == NULL || !buffers_create(&buffers, &o, o.batch) ||
        !buffers_create(&eval_buffers, &o, eval_batch)) {
        fprintf(stderr, "attn %s: cannot allocate the model: %s\n", command, error.message);
        return 1;
    }
    model_init(&model, o.seed);
    attn_options attention = attn_options_default();
    attn_adam_config adam = attn_adam_default();
    adam.learning_rate = (float)o.learning_rate;

    train_rng rng;
    train_rng_seed(&rng, o.seed);
    double start = seconds_now(), loss = 0.0, last_draw = -1.0;
    attn_status status = ATTN_OK;
    for (int64_t step = 1; step <= o.steps && status == ATTN_OK; ++step) {
        make_batch(&o, &rng, tokens, targets);
        int64_t correct = 0;
        status = model_forward(&model, &o, &attention, &buffers, o.batch, tokens, targets, &loss,
                               &correct, &error);
        if (status == ATTN_OK)
            status = model_backward(&model, &o, &attention, &buffers, o.batch, tokens, targets,
                                    &gradients, &error);
        if (status == ATTN_OK)
            status = model_adam(&model, &gradients, &moment1, &moment2, &adam, step, &error);
        double now = seconds_now() - start;
        if (!o.quiet && (step == o.steps || now - last_draw > 0.2)) {
            draw_progress(step, o.steps, loss, (double)correct / (double)(o.batch * o.length), now);
            last_draw = now;
        }
    }
    double seconds = seconds_now() - start;

    /* Evaluation on fresh sequences (a separate seeded stream). */
    double accuracy = 0.0;
    if (status == ATTN_OK) {
        train_options eval = o;
        eval.batch = eval_batch;
        train_rng eval_rng;
        train_rng_seed(&eval_rng, o.seed ^ 0x5DEECE66Dull);
        make_batch(&eval, &eval_rng, tokens, targets);
        double eval_loss;
        int64_t correct = 0;
        status = model_forward(&model, &eval, &attention, &eval_buffers, eval_batch, tokens,
                               targets, &eval_loss, &correct, &error);
        accuracy = (double)correct / (double)(eval_batch * o.length);
    }
    if (status != ATTN_OK) {
        fprintf(stderr, "attn %s: %s: %s\n", command, attn_status_name(status), error.message);
        code = 1;
    } else {
        printf("train: task %s steps %lld loss %.6f accuracy %.4f seconds %.2f\n",
               o.task == TASK_REVERSE ? "reverse" : "copy", (long long)o.steps, loss, accuracy,
               seconds);
        if (o.save_path != NULL && !save_model(&model, &o, &error)) {
            fprintf(stderr, "attn %s: --save '%s': %s\n", command, o.save_path, error.message);
            code = 1;
        }
        if (code == 0 && o.out_dir != NULL && !write_heatmaps(&model, &o, &eval_buffers)) code = 1;
    }
    buffers_free(&buffers);
    buffers_free(&eval_buffers);
    model_free(&model);
    model_free(&gradients);
    model_free(&moment1);
    model_free(&moment2);
    free(tokens);
    free(targets);
    return code;
}
