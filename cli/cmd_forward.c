/*
 * cmd_forward.c — `attn forward`: exact attention on .npy files.
 *
 *   attn forward --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [options]
 *
 * Q [B, Tq, Hq, Dk], K [B, Tk, Hkv, Dk], V [B, Tk, Hkv, Dv] float32 or float16 C-order;
 * writes O [B, Tq, Hq, Dv], optionally LSE [B, Hq, Tq] and, for small calls, the attention
 * probabilities P [B, Hq, Tq, Tk] (--weights-out, probabilities.h; for `attn heatmap`).
 * --dtype f32|bf16|f16 picks the type attn computes in (inputs converted to it, nearest-even;
 * O float16 for f16, float32 otherwise — .npy has no bfloat16 — and LSE float32). The files
 * are read straight into the
 * tensors handed to attn_forward and the outputs are written from the buffers the library
 * filled, so peak memory is the inputs plus the outputs plus the library's O(tile) workspace.
 * On any error: one line on stderr naming the file or option and the bad value, a non-zero
 * exit (2 = usage, 1 = everything else), and no output file (the outputs are written under
 * temporary names and renamed into place only when all are complete).
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
#include "probabilities.h"

static const char *const command = "forward";

static void print_help(void) {
    printf("usage: attn forward --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] "
           "[--weights-out W.npy] [options]\n\n"
           "Computes O = softmax(mask(scale * Q K^T)) V exactly (and the row log-sum-exp).\n\n"
           "tensors (float32 or float16, C order):\n"
           "  --q Q.npy                  queries [B, Tq, Hq, Dk]\n"
           "  --k K.npy                  keys    [B, Tk, Hkv, Dk]; Hq must be a multiple of Hkv\n"
           "                             (query head h uses KV head h / (Hq / Hkv))\n"
           "  --v V.npy                  values  [B, Tk, Hkv, Dv]\n"
           "  --out O.npy                output  [B, Tq, Hq, Dv] (written)\n"
           "  --lse LSE.npy              log-sum-exp [B, Hq, Tq] (written; natural log, -inf for\n"
           "                             an empty row under --empty-rows zero)\n"
           "  --dtype f32|bf16|f16       the type of Q, K, V and O inside attn (default f32):\n"
           "                             inputs are converted to it (nearest-even); O is written\n"
           "                             as float16 for f16, else float32 (bf16 values widened)\n"
           "  --weights-out W.npy        attention probabilities [B, Hq, Tq, Tk] (written; for\n"
           "                             attn heatmap): exp(logit - lse) with every option\n"
           "                             applied; refused above B*Hq*Tq*Tk = 2^24 or Tk = %d\n\n"
           "%s\n"
           "On an error attn forward prints one line naming the file or option and the bad\n"
           "value, exits with 1 (2 for a usage error) and writes no output file.\n",
           CLI_PROBABILITIES_MAX_KEYS, cli_attention_options_help);
}

/* The inputs and outputs of one call, freed together. */
typedef struct forward_files {
    const char *q_path, *k_path, *v_path, *out_path, *lse_path, *weights_path;
    attn_dtype dtype; /* --dtype: what attn computes in */
    attn_npy_array q, k, v;
    void *converted[3]; /* q, k, v in `dtype` when the file holds another type */
    uint16_t *out16;    /* O in a 16-bit dtype */
    float *widened[2];  /* --weights-out with a 16-bit dtype: q, k widened back to float32 */
    float *out, *lse, *weights;
    char *out_partial, *lse_partial, *weights_partial; /* temporary names of the outputs */
} forward_files;

static void forward_files_free(forward_files *files) {
    attn_npy_free(&files->q);
    attn_npy_free(&files->k);
    attn_npy_free(&files->v);
    for (int n = 0; n < 3; ++n) free(files->converted[n]);
    free(files->widened[0]);
    free(files->widened[1]);
    free(files->out16);
    free(files->out);
    free(files->lse);
    free(files->weights);
    if (files->out_partial) unlink(files->out_partial);
    if (files->lse_partial) unlink(files->lse_partial);
    if (files->weights_partial) unlink(files->weights_partial);
    free(files->out_partial);
    free(files->lse_partial);
    free(files->weights_partial);
}


/* Checks that Q, K, V agree (B, Tk, Dk, Hq % Hkv), naming the files. */
static bool check_shapes(const forward_files *f) {
    const int64_t *q = f->q.shape, *k = f->k.shape, *v = f->v.shape;
    if (k[0] != q[0]) {
        cli_error(command, "--k %s: batch %lld differs from --q %s batch %lld", f->k_path,
                  (long long)k[0], f->q_path, (long long)q[0]);
        return false;
    }
    if (k[3] != q[3]) {
        cli_error(command, "--k %s: head dim Dk = %lld differs from --q %s Dk = %lld", f->k_path,
                  (long long)k[3], f->q_path, (long long)q[3]);
        return false;
    }
    if (v[0] != k[0] || v[1] != k[1] || v[2] != k[2]) {
        cli_error(command, "--v %s: [B, Tk, Hkv] = [%lld, %lld, %lld] differs from --k %s "
                  "[%lld, %lld, %lld]", f->v_path, (long long)v[0], (long long)v[1],
                  (long long)v[2], f->k_path, (long long)k[0], (long long)k[1], (long long)k[2]);
        return false;
    }
    if (q[2] % k[2] != 0) {
        cli_error(command, "--q %s: Hq = %lld is not a multiple of Hkv = %lld in --k %s",
                  f->q_path, (long long)q[2], (long long)k[2], f->k_path);
        return false;
    }
    return true;
}


/* Parses argv; returns 0 to go on, or the exit code (help: 0 via *done). */
static int parse_arguments(int argc, char **argv, forward_files *files,
                           cli_attention_arguments *arguments, bool *done) {
    struct { const char *name; const char **target; } paths[] = {
        {"--q", &files->q_path},     {"--k", &files->k_path},     {"--v", &files->v_path},
        {"--out", &files->out_path}, {"--lse", &files->lse_path},
        {"--weights-out", &files->weights_path},
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
            const char *value = i + 1 < argc ? argv[++i] : "";
            if (strcmp(value, "f32") == 0) files->dtype = ATTN_DTYPE_F32;
            else if (strcmp(value, "bf16") == 0) files->dtype = ATTN_DTYPE_BF16;
            else if (strcmp(value, "f16") == 0) files->dtype = ATTN_DTYPE_F16;
            else {
                cli_error(command, "--dtype '%s': expected f32, bf16 or f16", value);
                return 2;
            }
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
            cli_error(command, "missing %s (usage: attn forward --q Q.npy --k K.npy --v V.npy "
                      "--out O.npy [--lse LSE.npy] [options])", paths[p].name);
            return 2;
        }
    if (files->lse_path != NULL && strcmp(files->lse_path, files->out_path) == 0) {
        cli_error(command, "--lse %s: the same file as --out", files->lse_path);
        return 2;
    }
    if (files->weights_path != NULL &&
        (strcmp(files->weights_path, files->out_path) == 0 ||
         (files->lse_path != NULL && strcmp(files->weights_path, files->lse_path) == 0))) {
        cli_error(command, "--weights-out %s: the same file as --%s", files->weights_path,
                  strcmp(files->weights_path, files->out_path) == 0 ? "out" : "lse");
        return 2;
    }
    return 0;
}

/* The view of a loaded input in the computation's dtype: the file's data, or a converted
 * copy in *converted; false (message printed) when a value does not fit the dtype. */
static bool operand_view(const forward_files *files, const char *option, const char *path,
                         const attn_npy_array *array, void **converted, attn_tensor *view) {
    *view = cli_tensor_rank4(array);
    if (array->dtype == files->dtype) return true;
    size_t count = 1;
    for (int d = 0; d < 4; ++d) count *= (size_t)view->shape[d];
    *converted = malloc(count * (files->dtype == ATTN_DTYPE_F32 ? 4 : 2));
    if (*converted == NULL) {
        cli_error(command, "%s %s: out of memory converting it", option, path);
        return false;
    }
    attn_tensor destination = attn_tensor_contiguous(*converted, files->dtype, 4, view->shape);
    attn_error error;
    if (attn_tensor_convert(view, &destination, &error) != ATTN_OK) {
        cli_error(command, "%s %s: %s", option, path, error.message);
        return false;
    }
    *view = destination;
    return true;
}

/* Runs the call once the arguments are parsed; returns the exit code. */
static int run_forward(forward_files *files, cli_attention_arguments *arguments) {
    if (!cli_load_npy_float(command, "--q", files->q_path, 4, 4, &files->q) ||
        !cli_load_npy_float(command, "--k", files->k_path, 4, 4, &files->k) ||
        !cli_load_npy_float(command, "--v", files->v_path, 4, 4, &files->v) ||
        !check_shapes(files))
        return 1;
    const int64_t B = files->q.shape[0], Tq = files->q.shape[1], Hq = files->q.shape[2];
    const int64_t Tk = files->k.shape[1], Dv = files->v.shape[3];
    char reason[256];
    if (files->weights_path != NULL && !cli_probabilities_fit(B, Tq, Hq, Tk, reason, sizeof reason)) {
        cli_error(command, "--weights-out %s: %s", files->weights_path, reason);
        return 1;
    }
    if (!cli_attention_arguments_load(arguments, command, B, Tq, Tk, Hq)) return 1;

    const int64_t out_shape[4] = {B, Tq, Hq, Dv};
    const int64_t lse_shape[3] = {B, Hq, Tq};
    files->out = cli_allocate_floats(command, 4, out_shape, files->out_path);
    if (files->out == NULL) return 1;
    if (files->lse_path != NULL) {
        files->lse = cli_allocate_floats(command, 3, lse_shape, files->lse_path);
        if (files->lse == NULL) return 1;
    }
    attn_tensor q, k, v;
    if (!operand_view(files, "--q", files->q_path, &files->q, &files->converted[0], &q) ||
        !operand_view(files, "--k", files->k_path, &files->k, &files->converted[1], &k) ||
        !operand_view(files, "--v", files->v_path, &files->v, &files->converted[2], &v))
        return 1;
    attn_tensor out = attn_tensor_f32_4d(files->out, B, Tq, Hq, Dv);
    if (files->dtype != ATTN_DTYPE_F32) { /* O in the computation's dtype, written below */
        files->out16 = malloc((size_t)(B * Tq * Hq * Dv) * sizeof(uint16_t));
        if (files->out16 == NULL) {
            cli_error(command, "%s: out of memory", files->out_path);
            return 1;
        }
        out = attn_tensor_contiguous(files->out16, files->dtype, 4, out_shape);
    }
    attn_tensor lse = attn_tensor_contiguous(files->lse, ATTN_DTYPE_F32, 3, lse_shape);
    attn_error error;
    if (attn_forward(&q, &k, &v, &arguments->options, &out, files->lse ? &lse : NULL,
                     &arguments->execution, &error) !=
        ATTN_OK) {
        /* The library names its option fields; point CLI users at the flag. */
        cli_error(command, "%s%s", error.message,
                  error.status == ATTN_ERROR_EMPTY_ROW ? " [CLI: --empty-rows zero|nan]" : "");
        return 1;
    }

    /* O as written: float16 for f16, float32 otherwise (bf16 widened exactly). */
    const attn_dtype out_dtype = files->dtype == ATTN_DTYPE_F16 ? ATTN_DTYPE_F16 : ATTN_DTYPE_F32;
    if (files->dtype == ATTN_DTYPE_BF16) {
        attn_tensor widened = attn_tensor_f32_4d(files->out, B, Tq, Hq, Dv);
        attn_tensor_convert(&out, &widened, NULL); /* exact */
    }
    const void *out_data = out_dtype == ATTN_DTYPE_F16 ? (const void *)files->out16 : files->out;

    if (files->weights_path != NULL) {
        const int64_t weights_shape[4] = {B, Hq, Tq, Tk};
        files->weights = cli_allocate_floats(command, 4, weights_shape, files->weights_path);
        if (files->weights == NULL) return 1;
        /* P of the computation's (rounded) Q and K, in float32 */
        attn_tensor q32 = q, k32 = k;
        if (files->dtype != ATTN_DTYPE_F32) {
            for (int n = 0; n < 2; ++n) {
                attn_tensor *view = n == 0 ? &q32 : &k32;
                const int64_t count = view->shape[0] * view->shape[1] * view->shape[2] * view->shape[3];
                files->widened[n] = malloc((size_t)count * sizeof(float));
                if (files->widened[n] == NULL) {
                    cli_error(command, "--weights-out %s: out of memory", files->weights_path);
                    return 1;
                }
                attn_tensor widened = attn_tensor_contiguous(files->widened[n], ATTN_DTYPE_F32, 4,
                                                             view->shape);
                attn_tensor_convert(view, &widened, NULL); /* exact */
                *view = widened;
            }
        }
        if (cli_attention_probabilities(&q32, &k32, &arguments->options, &arguments->execution,
                                        files->weights, &error) != ATTN_OK) {
            cli_error(command, "--weights-out %s: %s", files->weights_path, error.message);
            return 1;
        }
        files->weights_partial = cli_partial_name(files->weights_path);
        if (files->weights_partial == NULL ||
            attn_npy_write(files->weights_partial, ATTN_DTYPE_F32, 4, weights_shape,
                           files->weights, &error) != ATTN_OK) {
            cli_error(command, "--weights-out %s: %s", files->weights_path,
                      files->weights_partial ? error.message : "out of memory");
            return 1;
        }
    }

    /* The outputs complete under temporary names, then renamed into place. */
    files->out_partial = cli_partial_name(files->out_path);
    if (files->out_partial == NULL ||
        attn_npy_write(files->out_partial, out_dtype, 4, out_shape, out_data, &error) !=
            ATTN_OK) {
        cli_error(command, "--out %s: %s", files->out_path, files->out_partial ? error.message
                                                                              : "out of memory");
        return 1;
    }
    if (files->lse != NULL) {
        files->lse_partial = cli_partial_name(files->lse_path);
        if (files->lse_partial == NULL ||
            attn_npy_write(files->lse_partial, ATTN_DTYPE_F32, 3, lse_shape, files->lse,
                           &error) != ATTN_OK) {
            cli_error(command, "--lse %s: %s", files->lse_path,
                      files->lse_partial ? error.message : "out of memory");
            return 1;
        }
        if (rename(files->lse_partial, files->lse_path) != 0) {
            cli_error(command, "--lse %s: cannot rename the finished file into place",
                      files->lse_path);
            return 1;
        }
        free(files->lse_partial);
        files->lse_partial = NULL;
    }
    if (files->weights_partial != NULL) {
        if (rename(files->weights_partial, files->weights_path) != 0) {
            cli_error(command, "--weights-out %s: cannot rename the finished file into place",
                      files->weights_path);
            if (files->lse_path) unlink(files->lse_path);
            return 1;
        }
        free(files->weights_partial);
        files->weights_partial = NULL;
    }
    if (rename(files->out_partial, files->out_path) != 0) {
        cli_error(command, "--out %s: cannot rename the finished file into place",
                  files->out_path);
        if (files->lse_path) unlink(files->lse_path);
        if (files->weights_path) unlink(files->weights_path);
        return 1;
    }
    free(files->out_partial);
    files->out_partial = NULL;
    return 0;
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
