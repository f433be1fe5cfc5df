/*
 * cmd_forward.c — `attn forward`: exact attention on .npy and safetensors files.
 *
 *   attn forward --q Q --k K --v V --out O [--lse LSE] [--dtype f32|bf16|f16] [options]
 *
 * Each tensor is a .npy file or FILE.safetensors[:NAME] (tensor_files.h). Q [B, Tq, Hq, Dk],
 * K [B, Tk, Hkv, Dk], V [B, Tk, Hkv, Dv] float32 or float16 .npy, F32 / BF16 / F16
 * safetensors; writes O [B, Tq, Hq, Dv], optionally LSE [B, Hq, Tq] and, for small calls, the
 * attention probabilities P [B, Hq, Tq, Tk] (--weights-out, probabilities.h; for `attn
 * heatmap`). --dtype f32|bf16|f16 picks the type attn computes in (inputs converted to it,
 * nearest-even); O is written in it (safetensors BF16 / F16; .npy float16 for f16, float32
 * otherwise — .npy has no bfloat16), LSE and P as float32. Inputs are used in place (a
 * safetensors file is mapped) unless converted, and the outputs are written from the buffers
 * the library filled, so peak memory is the inputs plus the outputs plus the library's
 * O(tile) workspace.
 * On any error: one line on stderr naming the file or option and the bad value, a non-zero
 * exit (2 = usage, 1 = everything else), and no output file (the outputs are written under
 * temporary names and renamed into place only when all are complete).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_io.h"
#include "arguments.h"
#include "cli.h"
#include "npy_tensor.h"
#include "probabilities.h"
#include "tensor_files.h"

static const char *const command = "forward";

static void print_help(void) {
    printf("usage: attn forward --q Q --k K --v V --out O [--lse LSE] [--weights-out W] "
           "[--dtype f32|bf16|f16] [options]\n\n"
           "Computes O = softmax(mask(scale * Q K^T)) V exactly (and the row log-sum-exp).\n\n"
           "tensors (Q.npy, or Q.safetensors[:NAME]; C order):\n"
           "  --q Q                      queries [B, Tq, Hq, Dk]\n"
           "  --k K                      keys    [B, Tk, Hkv, Dk]; Hq must be a multiple of Hkv\n"
           "                             (query head h uses KV head h / (Hq / Hkv))\n"
           "  --v V                      values  [B, Tk, Hkv, Dv]\n"
           "  --out O                    output  [B, Tq, Hq, Dv] (written; default name o)\n"
           "  --lse LSE                  log-sum-exp [B, Hq, Tq] (written, float32; natural log,\n"
           "                             -inf for an empty row under --empty-rows zero)\n"
           "  --dtype f32|bf16|f16       the type of Q, K, V and O inside attn (default f32):\n"
           "                             inputs are converted to it (nearest-even; a value beyond\n"
           "                             fp16 is an error); O is written in it (see below)\n"
           "  --weights-out W            attention probabilities [B, Hq, Tq, Tk] (written,\n"
           "                             float32; for attn heatmap): exp(logit - lse) with every\n"
           "                             option applied, pairs the mask forbids as -0.0 (drawn\n"
           "                             hatched); refused above B*Hq*Tq*Tk = 2^24 or\n"
           "                             Tk = %d; default name weights\n\n"
           "%s\n"
           "%s\n"
           "On an error attn forward prints one line naming the file or option and the bad\n"
           "value, exits with 1 (2 for a usage error) and writes no output file.\n",
           CLI_PROBABILITIES_MAX_KEYS, cli_tensor_files_help, cli_attention_options_help);
}

enum { INPUT_Q, INPUT_K, INPUT_V, INPUT_COUNT };
enum { OUTPUT_O, OUTPUT_LSE, OUTPUT_WEIGHTS, OUTPUT_COUNT };
static const char *const input_options[INPUT_COUNT] = {"--q", "--k", "--v"};
static const char *const input_names[INPUT_COUNT] = {"q", "k", "v"};

/* The inputs and outputs of one call, freed together. */
typedef struct forward_files {
    const char *input_paths[INPUT_COUNT];
    const char *out_path, *lse_path, *weights_path;
    attn_dtype dtype; /* --dtype: what attn computes in */
    cli_input inputs[INPUT_COUNT];
    float *widened[2];  /* --weights-out with a 16-bit dtype: q, k widened back to float32 */
    void *out;          /* O in `dtype` */
    float *lse, *weights;
} forward_files;

static void forward_files_free(forward_files *files) {
    for (int n = 0; n < INPUT_COUNT; ++n) cli_input_free(&files->inputs[n]);
    free(files->widened[0]);
    free(files->widened[1]);
    free(files->out);
    free(files->lse);
    free(files->weights);
}

/* The outputs as the writer sees them (data and shapes filled in by run_forward). */
static void describe_outputs(const forward_files *files, cli_output outputs[OUTPUT_COUNT]) {
    memset(outputs, 0, OUTPUT_COUNT * sizeof *outputs);
    outputs[OUTPUT_O] = (cli_output){"--out", files->out_path, "o", files->dtype, 4, {0}, NULL};
    outputs[OUTPUT_LSE] = (cli_output){"--lse", files->lse_path, "lse", ATTN_DTYPE_F32, 3, {0}, NULL};
    outputs[OUTPUT_WEIGHTS] = (cli_output){"--weights-out", files->weights_path, "weights",
                                           ATTN_DTYPE_F32, 4, {0}, NULL};
}

/* Checks that Q, K, V agree (B, Tk, Dk, Hq % Hkv), naming the files. */
static bool check_shapes(const forward_files *f) {
    const int64_t *q = f->inputs[INPUT_Q].shape, *k = f->inputs[INPUT_K].shape,
                  *v = f->inputs[INPUT_V].shape;
    const char *q_path = f->input_paths[INPUT_Q], *k_path = f->input_paths[INPUT_K];
    if (k[0] != q[0]) {
        cli_error(command, "--k %s: batch %lld differs from --q %s batch %lld", k_path,
                  (long long)k[0], q_path, (long long)q[0]);
        return false;
    }
    if (k[3] != q[3]) {
        cli_error(command, "--k %s: head dim Dk = %lld differs from --q %s Dk = %lld", k_path,
                  (long long)k[3], q_path, (long long)q[3]);
        return false;
    }
    if (v[0] != k[0] || v[1] != k[1] || v[2] != k[2]) {
        cli_error(command, "--v %s: [B, Tk, Hkv] = [%lld, %lld, %lld] differs from --k %s "
                  "[%lld, %lld, %lld]", f->input_paths[INPUT_V], (long long)v[0], (long long)v[1],
                  (long long)v[2], k_path, (long long)k[0], (long long)k[1], (long long)k[2]);
        return false;
    }
    if (q[2] % k[2] != 0) {
        cli_error(command, "--q %s: Hq = %lld is not a multiple of Hkv = %lld in --k %s",
                  q_path, (long long)q[2], (long long)k[2], k_path);
        return false;
    }
    return true;
}


/* Parses argv; returns 0 to go on, or the exit code (help: 0 via *done). */
static int parse_arguments(int argc, char **argv, forward_files *files,
                           cli_attention_arguments *arguments, bool *done) {
    struct { const char *name; const char **target; } paths[] = {
        {"--q", &files->input_paths[INPUT_Q]}, {"--k", &files->input_paths[INPUT_K]},
        {"--v", &files->input_paths[INPUT_V]}, {"--out", &files->out_path},
        {"--lse", &files->lse_path},           {"--weights-out", &files->weights_path},
    };
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help();
            *done = true;
            return 0;
        }
        bool matched = false;
        for (size_t p = 0; p < sizeof paths / sizeof paths[0] && !matched; ++p)
            if (strcmp(argv[i], paths[p].name) == 0) {
                if (i + 1 >= argc) {
                    cli_error(command, "%s needs a file name", argv[i]);
                    return 2;
                }
                *paths[p].target = argv[++i];
                matched = true;
            }
        if (matched) continue;
        if (strcmp(argv[i], "--dtype") == 0) {
            if (!cli_parse_compute_dtype(command, i + 1 < argc ? argv[++i] : "", &files->dtype))
                return 2;
            continue;
        }
        cli_parse_result result = cli_parse_attention_option(arguments, command, argc, argv, &i);
        if (result == CLI_PARSE_ERROR) return 2;
        if (result == CLI_PARSE_NOT_MINE) {
            cli_error(command, "unknown option '%s' (see attn forward --help)", argv[i]);
            return 2;
        }
    }
    for (size_t p = 0; p < 4; ++p)
        if (*paths[p].target == NULL) {
            cli_error(command, "missing %s (usage: attn forward --q Q --k K --v V --out O "
                      "[--lse LSE] [options])", paths[p].name);
            return 2;
        }
    for (int n = 0; n < INPUT_COUNT; ++n)
        if (!cli_location_valid(command, input_options[n], files->input_paths[n])) return 2;
    cli_output outputs[OUTPUT_COUNT];
    describe_outputs(files, outputs);
    return cli_outputs_distinct(command, outputs, OUTPUT_COUNT) ? 0 : 2;
}

/* P of the computation's (rounded) Q and K, in float32, into files->weights. */
static bool compute_weights(forward_files *files, cli_attention_arguments *arguments,
                            attn_tensor q32, attn_tensor k32, const int64_t weights_shape[4]) {
    files->weights = cli_allocate_floats(command, 4, weights_shape, files->weights_path);
    if (files->weights == NULL) return false;
    if (files->dtype != ATTN_DTYPE_F32) {
        for (int n = 0; n < 2; ++n) {
            attn_tensor *view = n == 0 ? &q32 : &k32;
            files->widened[n] = cli_allocate_floats(command, 4, view->shape, files->weights_path);
            if (files->widened[n] == NULL) return false;
            attn_tensor widened = attn_tensor_contiguous(files->widened[n], ATTN_DTYPE_F32, 4,
                                                         view->shape);
            attn_tensor_convert(view, &widened, NULL); /* exact */
            *view = widened;
        }
    }
    attn_error error;
    if (cli_attention_probabilities(&q32, &k32, &arguments->options, &arguments->execution,
                                    files->weights, &error) != ATTN_OK) {
        cli_error(command, "--weights-out %s: %s", files->weights_path, error.message);
        return false;
    }
    return true;
}

/* Runs the call once the arguments are parsed; returns the exit code. */
static int run_forward(forward_files *files, cli_attention_arguments *arguments) {
    for (int n = 0; n < INPUT_COUNT; ++n)
        if (!cli_input_load(command, input_options[n], files->input_paths[n], input_names[n], 4,
                            4, true, &files->inputs[n]))
            return 1;
    if (!check_shapes(files)) return 1;
    const int64_t B = files->inputs[INPUT_Q].shape[0], Tq = files->inputs[INPUT_Q].shape[1];
    const int64_t Hq = files->inputs[INPUT_Q].shape[2];
    const int64_t Tk = files->inputs[INPUT_K].shape[1], Dv = files->inputs[INPUT_V].shape[3];
    char reason[256];
    if (files->weights_path != NULL && !cli_probabilities_fit(B, Tq, Hq, Tk, reason, sizeof reason)) {
        cli_error(command, "--weights-out %s: %s", files->weights_path, reason);
        return 1;
    }
    if (!cli_attention_arguments_load(arguments, command, B, Tq, Tk, Hq)) return 1;

    const int64_t out_shape[4] = {B, Tq, Hq, Dv};
    const int64_t lse_shape[3] = {B, Hq, Tq};
    files->out = cli_allocate_floats(command, 4, out_shape, files->out_path); /* >= O's bytes */
    if (files->out == NULL) return 1;
    if (files->lse_path != NULL) {
        files->lse = cli_allocate_floats(command, 3, lse_shape, files->lse_path);
        if (files->lse == NULL) return 1;
    }
    attn_tensor q, k, v;
    if (!cli_input_as(command, &files->inputs[INPUT_Q], files->dtype, &q) ||
        !cli_input_as(command, &files->inputs[INPUT_K], files->dtype, &k) ||
        !cli_input_as(command, &files->inputs[INPUT_V], files->dtype, &v))
        return 1;
    attn_tensor out = attn_tensor_contiguous(files->out, files->dtype, 4, out_shape);
    attn_tensor lse = attn_tensor_contiguous(files->lse, ATTN_DTYPE_F32, 3, lse_shape);
    attn_error error;
    if (attn_forward(&q, &k, &v, &arguments->options, &out, files->lse ? &lse : NULL,
                     &arguments->execution, &error) != ATTN_OK) {
        /* The library names its option fields; point CLI users at the flag. */
        cli_error(command, "%s%s", error.message,
                  error.status == ATTN_ERROR_EMPTY_ROW ? " [CLI: --empty-rows zero|nan]" : "");
        return 1;
    }
    const int64_t weights_shape[4] = {B, Hq, Tq, Tk};
    if (files->weights_path != NULL && !compute_weights(files, arguments, q, k, weights_shape))
        return 1;

    cli_output outputs[OUTPUT_COUNT];
    describe_outputs(files, outputs);
    memcpy(outputs[OUTPUT_O].shape, out_shape, sizeof out_shape);
    outputs[OUTPUT_O].data = files->out;
    memcpy(outputs[OUTPUT_LSE].shape, lse_shape, sizeof lse_shape);
    outputs[OUTPUT_LSE].data = files->lse;
    memcpy(outputs[OUTPUT_WEIGHTS].shape, weights_shape, sizeof weights_shape);
    outputs[OUTPUT_WEIGHTS].data = files->weights;
    return cli_outputs_write(command, outputs, OUTPUT_COUNT) ? 0 : 1;
}

int cli_forward(int argc, char **argv) {
    forward_files files;
    memset(&files, 0, sizeof files);
    cli_attention_arguments arguments;
    cli_attention_arguments_init(&arguments);
    bool done = false;
    int code = parse_arguments(argc, argv, &files, &arguments, &done);
    if (code == 0 && !done) code = run_forward(&files, &arguments);
    forward_files_free(&files);
    cli_attention_arguments_free(&arguments);
    return code;
}
