/*
 * cmd_backward.c — `attn backward`: gradients of attention on .npy and safetensors files.
 *
 *   attn backward --q Q --k K --v V --do dO [--o O --lse LSE] --dq dQ --dk dK --dv dV
 *                 [--dbias dB] [--dtype f32|bf16|f16] [options]
 *
 * Each tensor is a .npy file or FILE.safetensors[:NAME] (tensor_files.h); --dtype is the
 * type of Q, K, V, O, dO and the gradients inside attn (inputs converted; dQ, dK, dV written
 * in it: safetensors BF16 / F16, .npy float16 for f16 and float32 otherwise).
 * Reads Q, K, V and the output gradient dO (and the forward's O and LSE when given; otherwise
 * runs attn_forward first to get them), calls attn_backward and writes dQ, dK, dV (and the
 * bias gradient, with the --bias file's shape). The mask options are the forward's, parsed
 * by the shared cli/arguments.c. On any error: one line on stderr naming the file or option
 * and the bad value, exit 1 (2 for a usage error), and no output file (every output is
 * written under a temporary name, and all are renamed into place only when all are complete).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_io.h"
#include "arguments.h"
#include "cli.h"
#include "npy_tensor.h"
#include "tensor_files.h"

static const char *const command = "backward";

static void print_help(void) {
    printf("usage: attn backward --q Q --k K --v V --do dO [--o O --lse LSE]\n"
           "                     --dq dQ --dk dK --dv dV [--dbias dB] [--dtype f32|bf16|f16]\n"
           "                     [options]\n\n"
           "Gradients of O = softmax(mask(scale * Q K^T)) V with respect to Q, K, V (and the\n"
           "additive --bias), for the loss whose gradient with respect to O is dO. Exact, by\n"
           "recomputation (FlashAttention-2); bitwise identical for any thread count.\n\n"
           "tensors (Q.npy, or Q.safetensors[:NAME]; C order):\n"
           "  --q Q                      queries [B, Tq, Hq, Dk]\n"
           "  --k K                      keys    [B, Tk, Hkv, Dk]; Hq must be a multiple of Hkv\n"
           "  --v V                      values  [B, Tk, Hkv, Dv]\n"
           "  --do dO                    gradient of the loss with respect to O [B, Tq, Hq, Dv]\n"
           "  --o O                      the forward's output [B, Tq, Hq, Dv] } both or neither;\n"
           "  --lse LSE                  the forward's log-sum-exp [B, Hq, Tq], float32\n"
           "                             } without them attn backward runs the forward first\n"
           "                             (same options and dtype)\n"
           "  --dq dQ                    dL/dQ [B, Tq, Hq, Dk] (written)\n"
           "  --dk dK                    dL/dK [B, Tk, Hkv, Dk] (written; GQA: summed over the\n"
           "                             query heads of each KV head)\n"
           "  --dv dV                    dL/dV [B, Tk, Hkv, Dv] (written; likewise)\n"
           "  --dbias dB                 dL/d(bias), the --bias file's shape (written, float32;\n"
           "                             summed over the dimensions the bias broadcasts); needs\n"
           "                             --bias\n"
           "  --dtype f32|bf16|f16       the type of Q, K, V, O, dO and dQ, dK, dV inside attn\n"
           "                             (default f32): inputs converted to it (nearest-even);\n"
           "                             the gradients are computed in fp32, rounded once to it\n"
           "                             and written in it (see below)\n\n"
           "%s\n"
           "%s\n"
           "The options must be those of the forward that produced --o and --lse.\n"
           "On an error attn backward prints one line naming the file or option and the bad\n"
           "value, exits with 1 (2 for a usage error) and writes no output file.\n",
           cli_tensor_files_help, cli_attention_options_help);
}

enum { INPUT_Q, INPUT_K, INPUT_V, INPUT_DO, INPUT_O, INPUT_LSE, INPUT_COUNT };
enum { OUTPUT_DQ, OUTPUT_DK, OUTPUT_DV, OUTPUT_DBIAS, OUTPUT_COUNT };

static const char *const input_options[INPUT_COUNT] = {"--q", "--k", "--v",
                                                       "--do", "--o", "--lse"};
static const char *const input_names[INPUT_COUNT] = {"q", "k", "v", "do", "o", "lse"};
static const char *const output_options[OUTPUT_COUNT] = {"--dq", "--dk", "--dv", "--dbias"};
static const char *const output_names[OUTPUT_COUNT] = {"dq", "dk", "dv", "dbias"};

/* The files of one call, freed together. */
typedef struct backward_files {
    const char *input_paths[INPUT_COUNT];
    const char *output_paths[OUTPUT_COUNT];
    attn_dtype dtype; /* --dtype: what attn computes in */
    cli_input inputs[INPUT_COUNT];
    void *forward_out;     /* when --o / --lse are not given: O in `dtype` */
    float *forward_lse;
    void *outputs[OUTPUT_COUNT];
    int output_ranks[OUTPUT_COUNT];
    int64_t output_shapes[OUTPUT_COUNT][4];
} backward_files;

static void backward_files_free(backward_files *files) {
    for (int i = 0; i < INPUT_COUNT; ++i) cli_input_free(&files->inputs[i]);
    free(files->forward_out);
    free(files->forward_lse);
    for (int o = 0; o < OUTPUT_COUNT; ++o) free(files->outputs[o]);
}

/* The outputs as the writer sees them (dq, dk, dv in the computation's dtype, dbias F32). */
static void describe_outputs(const backward_files *files, cli_output outputs[OUTPUT_COUNT]) {
    for (int o = 0; o < OUTPUT_COUNT; ++o) {
        outputs[o] = (cli_output){output_options[o], files->output_paths[o], output_names[o],
                                  o == OUTPUT_DBIAS ? ATTN_DTYPE_F32 : files->dtype,
                                  files->output_ranks[o], {0}, files->outputs[o]};
        memcpy(outputs[o].shape, files->output_shapes[o], sizeof outputs[o].shape);
    }
}

/* Parses argv; returns 0 to go on, or the exit code (help: 0 and *done). */
static int parse_arguments(int argc, char **argv, backward_files *files,
                           cli_attention_arguments *arguments, bool *done) {
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help();
            *done = true;
            return 0;
        }
        if (strcmp(argv[i], "--dtype") == 0) {
            if (!cli_parse_compute_dtype(command, i + 1 < argc ? argv[++i] : "", &files->dtype))
                return 2;
            continue;
        }
        const char **target = NULL;
        for (int p = 0; p < INPUT_COUNT; ++p)
            if (strcmp(argv[i], input_options[p]) == 0) target = &files->input_paths[p];
        for (int p = 0; p < OUTPUT_COUNT; ++p)
            if (strcmp(argv[i], output_options[p]) == 0) target = &files->output_paths[p];
        if (target != NULL) {
            if (i + 1 >= argc) {
                cli_error(command, "%s needs a file name", argv[i]);
                return 2;
            }
            *target = argv[++i];
            continue;
        }
        cli_parse_result result = cli_parse_attention_option(arguments, command, argc, argv, &i);
        if (result == CLI_PARSE_ERROR) return 2;
        if (result == CLI_PARSE_NOT_MINE) {
            cli_error(command, "unknown option '%s' (see attn backward --help)", argv[i]);
            return 2;
        }
    }
    const char *usage = "usage: attn backward --q Q --k K --v V --do dO "
                        "--dq dQ --dk dK --dv dV [options]";
    for (int p = INPUT_Q; p <= INPUT_DO; ++p)
        if (files->input_paths[p] == NULL) {
            cli_error(command, "missing %s (%s)", input_options[p], usage);
            return 2;
        }
    for (int p = OUTPUT_DQ; p <= OUTPUT_DV; ++p)
        if (files->output_paths[p] == NULL) {
            cli_error(command, "missing %s (%s)", output_options[p], usage);
            return 2;
        }
    if ((files->input_paths[INPUT_O] == NULL) != (files->input_paths[INPUT_LSE] == NULL)) {
        const int given = files->input_paths[INPUT_O] ? INPUT_O : INPUT_LSE;
        cli_error(command, "%s %s: give both --o and --lse (the forward's results) or neither",
                  input_options[given], files->input_paths[given]);
        return 2;
    }
    if (files->output_paths[OUTPUT_DBIAS] != NULL && arguments->bias_path == NULL) {
        cli_error(command, "--dbias %s: needs --bias (there is no bias to differentiate)",
                  files->output_paths[OUTPUT_DBIAS]);
        return 2;
    }
    for (int p = 0; p < INPUT_COUNT; ++p)
        if (files->input_paths[p] != NULL &&
            !cli_location_valid(command, input_options[p], files->input_paths[p]))
            return 2;
    cli_output outputs[OUTPUT_COUNT];
    describe_outputs(files, outputs);
    return cli_outputs_distinct(command, outputs, OUTPUT_COUNT) ? 0 : 2;
}

/* Checks that input `which` has exactly `rank` dims `expected`, naming the file. */
static bool check_input_shape(const backward_files *files, int which, int rank,
                              const int64_t *expected, const char *layout) {
    const cli_input *input = &files->inputs[which];
    bool equal = input->rank == rank;
    for (int d = 0; equal && d < rank; ++d) equal = input->shape[d] == expected[d];
    if (!equal) {
        char actual_text[96], expected_text[96];
        cli_error(command, "%s %s: shape %s, expected %s %s", input_options[which],
                  files->input_paths[which],
                  cli_shape_text(input->rank, input->shape, actual_text, sizeof actual_text),
                  layout, cli_shape_text(rank, expected, expected_text, sizeof expected_text));
    }
    return equal;
}

/* Checks that Q, K, V agree (B, Dk, [B, Tk, Hkv], Hq % Hkv), naming the files. */
static bool check_qkv(const backward_files *files) {
    const int64_t *q = files->inputs[INPUT_Q].shape, *k = files->inputs[INPUT_K].shape;
    const int64_t key_shape[4] = {q[0], k[1], k[2], q[3]};
    if (!check_input_shape(files, INPUT_K, 4, key_shape, "[B, Tk, Hkv, Dk] =")) return false;
    const int64_t value_shape[4] = {k[0], k[1], k[2], files->inputs[INPUT_V].shape[3]};
    if (!check_input_shape(files, INPUT_V, 4, value_shape, "[B, Tk, Hkv, Dv] =")) return false;
    if (q[2] % k[2] != 0) {
        cli_error(command, "--q %s: Hq = %lld is not a multiple of Hkv = %lld in --k %s",
                  files->input_paths[INPUT_Q], (long long)q[2], (long long)k[2],
                  files->input_paths[INPUT_K]);
        return false;
    }
    return true;
}

/* Loads input `which` (rank 4, or 3 for the LSE), float32 or (not the LSE) 16-bit. */
static bool load_input(backward_files *files, int which) {
    const int rank = which == INPUT_LSE ? 3 : 4;
    return cli_input_load(command, input_options[which], files->input_paths[which],
                          input_names[which], rank, rank, which != INPUT_LSE,
                          &files->inputs[which]);
}

/* Runs the call once the arguments are parsed; returns the exit code. */
static int run_backward(backward_files *files, cli_attention_arguments *arguments) {
    const bool have_forward = files->input_paths[INPUT_O] != NULL;
    for (int i = INPUT_Q; i <= INPUT_DO; ++i)
        if (!load_input(files, i)) return 1;
    if (!check_qkv(files)) return 1;
    const int64_t *q_shape = files->inputs[INPUT_Q].shape;
    const int64_t B = q_shape[0], Tq = q_shape[1], Hq = q_shape[2], Dk = q_shape[3];
    const int64_t Tk = files->inputs[INPUT_K].shape[1], Hkv = files->inputs[INPUT_K].shape[2];
    const int64_t Dv = files->inputs[INPUT_V].shape[3];
    const int64_t out_shape[4] = {B, Tq, Hq, Dv};
    const int64_t lse_shape[3] = {B, Hq, Tq};
    if (!check_input_shape(files, INPUT_DO, 4, out_shape, "[B, Tq, Hq, Dv] =")) return 1;
    if (have_forward &&
        (!load_input(files, INPUT_O) ||
         !check_input_shape(files, INPUT_O, 4, out_shape, "[B, Tq, Hq, Dv] =") ||
         !load_input(files, INPUT_LSE) ||
         !check_input_shape(files, INPUT_LSE, 3, lse_shape, "[B, Hq, Tq] =")))
        return 1;
    if (!cli_attention_arguments_load(arguments, command, B, Tq, Tk, Hq)) return 1;

    attn_tensor q, k, v, dout, out, lse;
    if (!cli_input_as(command, &files->inputs[INPUT_Q], files->dtype, &q) ||
        !cli_input_as(command, &files->inputs[INPUT_K], files->dtype, &k) ||
        !cli_input_as(command, &files->inputs[INPUT_V], files->dtype, &v) ||
        !cli_input_as(command, &files->inputs[INPUT_DO], files->dtype, &dout))
        return 1;
    attn_error error;
    if (have_forward) {
        if (!cli_input_as(command, &files->inputs[INPUT_O], files->dtype, &out)) return 1;
        lse = attn_tensor_contiguous(files->inputs[INPUT_LSE].stored.data, ATTN_DTYPE_F32, 3,
                                     lse_shape);
    } else { /* no saved forward: compute O and LSE with the same options */
        files->forward_out = cli_allocate_floats(command, 4, out_shape, "the forward's output");
        files->forward_lse = cli_allocate_floats(command, 3, lse_shape, "the forward's log-sum-exp");
        if (files->forward_out == NULL || files->forward_lse == NULL) return 1;
        out = attn_tensor_contiguous(files->forward_out, files->dtype, 4, out_shape);
        lse = attn_tensor_contiguous(files->forward_lse, ATTN_DTYPE_F32, 3, lse_shape);
        if (attn_forward(&q, &k, &v, &arguments->options, &out, &lse, &arguments->execution,
                         &error) != ATTN_OK) {
            cli_error(command, "forward pass: %s", error.message);
            return 1;
        }
    }

    /* Gradient buffers: dQ, dK, dV, and d bias with the --bias file's own shape. */
    const int64_t shapes[3][4] = {{B, Tq, Hq, Dk}, {B, Tk, Hkv, Dk}, {B, Tk, Hkv, Dv}};
    for (int o = OUTPUT_DQ; o <= OUTPUT_DV; ++o) {
        files->output_ranks[o] = 4;
        memcpy(files->output_shapes[o], shapes[o], sizeof shapes[o]);
    }
    const bool want_bias_gradient = files->output_paths[OUTPUT_DBIAS] != NULL;
    if (want_bias_gradient) {
        files->output_ranks[OUTPUT_DBIAS] = arguments->bias_array.rank;
        memcpy(files->output_shapes[OUTPUT_DBIAS], arguments->bias_array.shape,
               sizeof arguments->bias_array.shape);
    }
    for (int o = 0; o < OUTPUT_COUNT; ++o) { /* float32-sized: room for any dtype */
        if (files->output_paths[o] == NULL) continue;
        files->outputs[o] = cli_allocate_floats(command, files->output_ranks[o],
                                                files->output_shapes[o], files->output_paths[o]);
        if (files->outputs[o] == NULL) return 1;
    }
    attn_tensor dq = attn_tensor_contiguous(files->outputs[OUTPUT_DQ], files->dtype, 4, shapes[0]);
    attn_tensor dk = attn_tensor_contiguous(files->outputs[OUTPUT_DK], files->dtype, 4, shapes[1]);
    attn_tensor dv = attn_tensor_contiguous(files->outputs[OUTPUT_DV], files->dtype, 4, shapes[2]);
    attn_tensor dbias = arguments->bias_tensor; /* rank-4 view of the bias's shape */
    dbias.data = files->outputs[OUTPUT_DBIAS];
    if (attn_backward(&q, &k, &v, &out, &lse, &dout, &arguments->options, &dq, &dk, &dv,
                      want_bias_gradient ? &dbias : NULL, &arguments->execution, &error) != ATTN_OK) {
        cli_error(command, "%s", error.message);
        return 1;
    }
    cli_output outputs[OUTPUT_COUNT];
    describe_outputs(files, outputs);
    return cli_outputs_write(command, outputs, OUTPUT_COUNT) ? 0 : 1;
}

int cli_backward(int argc, char **argv) {
    backward_files files;
    memset(&files, 0, sizeof files);
    cli_attention_arguments arguments;
    cli_attention_arguments_init(&arguments);
    bool done = false;
    int code = parse_arguments(argc, argv, &files, &arguments, &done);
    if (code == 0 && !done) code = run_backward(&files, &arguments);
    backward_files_free(&files);
    cli_attention_arguments_free(&arguments);
    return code;
}
