/*
 * tensor_files.h — the attention tensors of `attn forward` and `attn backward` as files: each
 * option names a .npy file or one tensor of a safetensors file, `FILE.safetensors:NAME`
 * (`FILE.safetensors` alone means the option's own name, e.g. "q"). Inputs are loaded,
 * checked (dtype, rank, no empty dimension) and converted to the computation's dtype
 * (--dtype); outputs are written all or nothing: every file under a temporary name first,
 * then all renamed into place, several outputs naming one safetensors file written into it
 * together. Every error is one line on stderr naming the option, the file, the tensor and the
 * bad value. docs/formats.md, "In the CLI", describes the rules.
 */
#ifndef ATTN_CLI_TENSOR_FILES_H
#define ATTN_CLI_TENSOR_FILES_H

#include <stdbool.h>
#include <stdint.h>

#include "attn.h"
#include "attn_io.h"

/* Where one tensor lives: a .npy file, or a tensor of a safetensors file. */
typedef struct cli_location {
    char *path;       /* malloc'ed: the file */
    const char *name; /* safetensors: the tensor's name (into the argument, or the default);
                         NULL for .npy */
} cli_location;

/* Splits an option's argument: "A.safetensors:NAME" (at the first ".safetensors:"),
 * "A.safetensors" (name = default_name), anything else is a .npy path. false (message
 * printed) when out of memory or the name is empty. */
bool cli_location_parse(const char *command, const char *option, const char *argument,
                        const char *default_name, cli_location *location);
void cli_location_free(cli_location *location);

/* Usage check of an input's argument before any work (cli_location_parse's checks). */
bool cli_location_valid(const char *command, const char *option, const char *argument);

/* A loaded input: the file's data (or a copy) and, after cli_input_as, its view in the
 * computation's dtype. */
typedef struct cli_input {
    const char *option, *argument; /* "--q", the text given (for messages) */
    int rank;                      /* as stored, 1..4 */
    int64_t shape[4];              /* as stored, each >= 1 */
    attn_tensor stored;            /* rank 4 (leading 1s), the stored dtype */
    attn_npy_array array;          /* .npy: the data */
    attn_safetensors_file file;    /* safetensors: the mapped file */
    void *owned;                   /* safetensors: a copy when the data are not aligned */
    void *converted;               /* the data in another dtype (cli_input_as) */
} cli_input;

/*
 * Loads `argument` (given to `option`; default_name as cli_location_parse) into `input`:
 * rank in [min_rank, max_rank], no dimension 0, dtype float32 — or also float16 (.npy) /
 * BF16 and F16 (safetensors) when allow_16bit. false after printing one line naming the
 * option, the file, the tensor and the bad value; `input` is then safe to free.
 */
bool cli_input_load(const char *command, const char *option, const char *argument,
                    const char *default_name, int min_rank, int max_rank, bool allow_16bit,
                    cli_input *input);

/* The input's rank-4 view in `dtype` (F32, BF16 or F16): the data as loaded, or a converted
 * copy (nearest-even) the input keeps. false (message printed) when a value does not fit the
 * dtype (fp16: |x| >= 65520) or memory runs out. */
bool cli_input_as(const char *command, cli_input *input, attn_dtype dtype, attn_tensor *view);

void cli_input_free(cli_input *input);

/* One output to write: data contiguous of `dtype` (F32, BF16 or F16), rank 1..4. A .npy file
 * gets float32 for F32 and BF16 (widened exactly: .npy has no bfloat16) and float16 for F16;
 * a safetensors tensor keeps `dtype`. */
typedef struct cli_output {
    const char *option, *argument, *default_name;
    attn_dtype dtype;
    int rank;
    int64_t shape[4];
    const void *data;
} cli_output;

/* Usage check before any work: false (message printed) when two outputs name the same .npy
 * file, the same tensor of a safetensors file, or one file both as .npy and as safetensors.
 * outputs[i].argument NULL = not requested. */
bool cli_outputs_distinct(const char *command, const cli_output *outputs, int count);

/* Writes every requested output (argument != NULL) under temporary names, then renames all
 * into place; on any failure nothing is left at the outputs' paths. false after one line. */
bool cli_outputs_write(const char *command, const cli_output *outputs, int count);

/* Parses --dtype's value: f32, bf16 or f16. false after one line naming the value. */
bool cli_parse_compute_dtype(const char *command, const char *value, attn_dtype *dtype);

/* The help lines that explain FILE.safetensors[:NAME] and the output dtypes. */
extern const char cli_tensor_files_help[];

#endif /* ATTN_CLI_TENSOR_FILES_H */
