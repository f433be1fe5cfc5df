/*
 * cmd_backward.c — `attn backward`: gradients of attention on .npy files.
 *
 *   attn backward --q Q.npy --k K.npy --v V.npy --do dO.npy [--o O.npy --lse LSE.npy]
 *                 --dq dQ.npy --dk dK.npy --dv dV.npy [--dbias dB.npy] [options]
 *
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
#include <unistd.h>

#include "attn_io.h"
#include "arguments.h"
#include "cli.h"
#include "npy_tensor.h"

static const char *const command = "backward";

static void print_help(void) {
    printf("usage: attn backward --q Q.npy --k K.npy --v V.npy --do dO.npy\n"
           "                     [--o O.npy --lse LSE.npy] --dq dQ.npy --dk dK.npy --dv dV.npy\n"
           "                     [--dbias dB.npy] [options]\n\n"
           "Gradients of O = softmax(mask(scale * Q K^T)) V with respect to Q, K, V (and the\n"
           "additive --bias), for the loss whose gradient with respect to O is dO. Exact, by\n"
           "recomputation (FlashAttention-2); bitwise identical for any thread count.\n\n"
           "tensors (float32, C order):\n"
           "  --q Q.npy                  queries [B, Tq, Hq, Dk]\n"
           "  --k K.npy                  keys    [B, Tk, Hkv, Dk]; Hq must be a multiple of Hkv\n"
           "  --v V.npy                  values  [B, Tk, Hkv, Dv]\n"
           "  --do dO.npy                gradient of the loss with respect to O [B, Tq, Hq, Dv]\n"
           "  --o O.npy                  the forward's output [B, Tq, Hq, Dv] } both or neither;\n"
           "  --lse LSE.npy              the forward's log-sum-exp [B, Hq, Tq] } without them\n"
           "                             attn backward runs the forward first (same options)\n"
           "  --dq dQ.npy                dL/dQ [B, Tq, Hq, Dk] (written)\n"
           "  --dk dK.npy                dL/dK [B, Tk, Hkv, Dk] (written; GQA: summed over the\n"
           "                             query heads of each KV head)\n"
           "  --dv dV.npy                dL/dV [B, Tk, Hkv, Dv] (written; likewise)\n"
           "  --dbias dB.npy             dL/d(bias), the --bias file's shape (written; summed over\n"
           "                             the dimensions the bias broadcasts); needs --bias\n\n"
           "%s\n"
           "The options must be those of the forward that produced --o and --lse.\n"
           "On an error attn backward prints one line naming the file or option and the bad\n"
           "value, exits with 1 (2 for a usage error) and writes no output file.\n",
           cli_attention_options_help);
}

enum { INPUT_Q, INPUT_K, INPUT_V, INPUT_DO, INPUT_O, INPUT_LSE, INPUT_COUNT };
enum { OUTPUT_DQ, OUTPUT_DK, OUTPUT_DV, OUTPUT_DBIAS, OUTPUT_COUNT };

static const char *const input_options[INPUT_COUNT] = {"--q", "--k", "--v",
                                                       "--do", "--o", "--lse"};
static const char *const output_options[OUTPUT_COUNT] = {"--dq", "--dk", "--dv", "--dbias"};

/* The files of one call, freed together. */
typedef struct backward_files {
    const char *input_paths[INPUT_COUNT];
    const char *output_paths[OUTPUT_COUNT];
    attn_npy_array inputs[INPUT_COUNT];
    float *forward_out, *forward_lse;       /* when --o / --lse are not given */
    float *outputs[OUTPUT_COUNT];
    int output_ranks[OUTPUT_COUNT];
    int64_t output_shapes[OUTPUT_COUNT][4];
    char *partial_names[OUTPUT_COUNT];      /* temporary names of the outputs */
    bool renamed[OUTPUT_COUNT];
} backward_files;

static void backward_files_free(backward_files *files) {
    for (int i = 0; i < INPUT_COUNT; ++i) attn_npy_free(&files->inputs[i]);
    free(files->forward_out);
    free(files->forward_lse);
    for (int o = 0; o < OUTPUT_COUNT; ++o) {
        free(files->outputs[o]);
        if (files->partial_names[o]) unlink(files->partial_names[o]);
        free(files->partial_names[o]);
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
    const char *usage = "usage: attn backward --q Q.npy --k K.npy --v V.npy --do dO.npy "
                        "--dq dQ.npy --dk dK.npy --dv dV.npy [options]";
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
    for (int a = 0; a < OUTPUT_COUNT; ++a)
        for (int b = a + 1; b < OUTPUT_COUNT; ++b)
            if (files->output_paths[a] && files->output_paths[b] &&
                strcmp(files->output_paths[a], files->output_paths[b]) == 0) {
                cli_error(command, "%s %s: the same file as %s", output_options[b],
                          files->output_paths[b], output_options[a]);
                return 2;
            }
    return 0;
}

/* Checks that input `which` has exactly `rank` dims `expected`, naming the file. */
static bool check_input_shape(const backward_files *files, int which, int rank,
                              const int64_t *expected, const char *layout) {
    const attn_npy_array *array = &files->inputs[which];
    bool equal = array->rank == rank;
    for (int d = 0; equal && d < rank; ++d) equal = array->shape[d] == expected[d];
    if (!equal) {
        char actual_text[96], expected_text[96];
        cli_error(command, "%s %s: shape %s, expected %s %s", input_options[which],
                  files->input_paths[which],
                  cli_shape_text(array->rank, array->shape, actual_text, sizeof actual_text),
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

/* Writes every output under its temporary name, then renames all of them into place. */
static int write_outputs(backward_files *files) {
    attn_error error;
    for (int o = 0; o < OUTPUT_COUNT; ++o) {
        if (files->outputs[o] == NULL) continue;
        files->partial_names[o] = cli_partial_name(files->output_paths[o]);
        if (files->partial_names[o] == NULL ||
            attn_npy_write(files->partial_names[o], ATTN_DTYPE_F32, files->output_ranks[o],
                           files->output_shapes[o], files->outputs[o], &error) != ATTN_OK) {
            cli_error(command, "%s %s: %s", output_options[o], files->output_paths[o],
                      files->partial_names[o] ? error.message : "out of memory");
            return 1;
        }
    }
    for (int o = 0; o < OUTPUT_COUNT; ++o) {
        if (files->outputs[o] == NULL) continue;
        if (rename(files->partial_names[o], files->output_paths[o]) != 0) {
            cli_error(command, "%s %s: cannot rename the finished file into place",
                      output_options[o], files->output_paths[o]);
            for (int r = 0; r < o; ++r) /* no partial result: remove what was renamed */
                if (files->renamed[r]) unlink(files->output_paths[r]);
            return 1;
        }
        files->renamed[o] = true;
        free(files->partial_names[o]);
        files->partial_names[o] = NULL;
    }
    return 0;
}

/* Runs the call once the arguments are parsed; returns the exit code. */
static int run_backward(backward_files *files, cli_attention_arguments *arguments) {
    const char *hint = "(write it with astype(np.float32))";
    const bool have_forward = files->input_paths[INPUT_O] != NULL;
    for (int i = INPUT_Q; i <= INPUT_DO; ++i)
        if (!cli_load_npy(command, input_options[i], files->input_paths[i], ATTN_DTYPE_F32, 4, 4,
                          hint, &files->inputs[i]))
            return 1;
    if (!check_qkv(files)) return 1;
    const int64_t *q_shape = files->inputs[INPUT_Q].shape;
    const int64_t B = q_shape[0], Tq = q_shape[1], Hq = q_shape[2], Dk = q_shape[3];
    const int64_t Tk = files->inputs[INPUT_K].shape[1], Hkv = files->inputs[INPUT_K].shape[2];
    const int64_t Dv = files->inputs[INPUT_V].shape[3];
    const int64_t out_shape[4] = {B, Tq, Hq, Dv};
    const int64_t lse_shape[3] = {B, Hq, Tq};
    if (!check_input_shape(files, INPUT_DO, 4, out_shape, "[B, Tq, Hq, Dv] =")) return 1;
    if (have_forward &&
        (!cli_load_npy(command, "--o", files->input_paths[INPUT_O], ATTN_DTYPE_F32, 4, 4, hint,
                       &files->inputs[INPUT_O]) ||
         !check_input_shape(files, INPUT_O, 4, out_shape, "[B, Tq, Hq, Dv] =") ||
         !cli_load_npy(command, "--lse", files->input_paths[INPUT_LSE], ATTN_DTYPE_F32, 3, 3,
                       hint, &files->inputs[INPUT_LSE]) ||
         !check_input_shape(files, INPUT_LSE, 3, lse_shape, "[B, Hq, Tq] =")))
        return 1;
    if (!cli_attention_arguments_load(arguments, command, B, Tq, Tk, Hq)) return 1;

    attn_tensor q = cli_tensor_rank4(&files->inputs[INPUT_Q]);
    attn_tensor k = cli_tensor_rank4(&files->inputs[INPUT_K]);
    attn_tensor v = cli_tensor_rank4(&files->inputs[INPUT_V]);
    attn_tensor dout = cli_tensor_rank4(&files->inputs[INPUT_DO]);
    attn_tensor out, lse;
    attn_error error;
    if (have_forward) {
        out = cli_tensor_rank4(&files->inputs[INPUT_O]);
        lse = attn_tensor_contiguous(files->inputs[INPUT_LSE].data, ATTN_DTYPE_F32, 3, lse_shape);
    } else { /* no saved forward: compute O and LSE with the same options */
        files->forward_out = cli_allocate_floats(command, 4, out_shape, "the forward's output");
        files->forward_lse = cli_allocate_floats(command, 3, lse_shape, "the forward's log-sum-exp");
        if (files->forward_out == NULL || files->forward_lse == NULL) return 1;
        out = attn_tensor_f32_4d(files->forward_out, B, Tq, Hq, Dv);
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
    for (int o = 0; o < OUTPUT_COUNT; ++o) {
        if (files->output_paths[o] == NULL) continue;
        files->outputs[o] = cli_allocate_floats(command, files->output_ranks[o], files->output_shapes[o],
                                            files->output_paths[o]);
        if (files->outputs[o] == NULL) return 1;
    }
    attn_tensor dq = attn_tensor_f32_4d(files->outputs[OUTPUT_DQ], B, Tq, Hq, Dk);
    attn_tensor dk = attn_tensor_f32_4d(files->outputs[OUTPUT_DK], B, Tk, Hkv, Dk);
    attn_tensor dv = attn_tensor_f32_4d(files->outputs[OUTPUT_DV], B, Tk, Hkv, Dv);
    attn_tensor dbias = arguments->bias_tensor; /* rank-4 view of the bias's shape */
    dbias.data = files->outputs[OUTPUT_DBIAS];
    if (attn_backward(&q, &k, &v, &out, &lse, &dout, &arguments->options, &dq, &dk, &dv,
                      want_bias_gradient ? &dbias : NULL, &arguments->execution, &error) != ATTN_OK) {
        cli_error(command, "%s", error.message);
        return 1;
    }
    return write_outputs(files);
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
