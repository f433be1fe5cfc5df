/*
 * arguments.h — the attention options shared by `attn forward`, `attn backward` and
 * `attn ring`: parsing them from the command line, loading the .npy files they name, and
 * checking those files against the problem's sizes, so each command only handles its own
 * tensors. Every error is one line on stderr naming the option, the file and the bad value.
 *
 * Use:
 *   cli_attention_arguments arguments;
 *   cli_attention_arguments_init(&arguments);
 *   for (int i = 1; i < argc; ++i) {
 *       ... the command's own options ...
 *       cli_parse_result r = cli_parse_attention_option(&arguments, "forward", argc, argv, &i);
 *       if (r == CLI_PARSE_ERROR) return 2;
 *       if (r == CLI_PARSE_NOT_MINE) { unknown option }
 *   }
 *   ... load Q, K, V ...
 *   if (!cli_attention_arguments_load(&arguments, "forward", B, Tq, Tk, Hq)) return 1;
 *   attn_forward(..., &arguments.options, ..., &arguments.execution, &error);
 *   cli_attention_arguments_free(&arguments);
 */
#ifndef ATTN_CLI_ARGUMENTS_H
#define ATTN_CLI_ARGUMENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "attn.h"
#include "attn_io.h"

typedef enum cli_parse_result {
    CLI_PARSE_CONSUMED = 0,  /* argv[*index] (and its value) was a shared option */
    CLI_PARSE_NOT_MINE = 1,  /* not a shared option: the command handles it */
    CLI_PARSE_ERROR = 2      /* a shared option with a bad or missing value (message printed) */
} cli_parse_result;

/* The shared options: the library options (what to compute and how to run it) plus the
 * files and lists they point into. */
typedef struct cli_attention_arguments {
    attn_options options;
    attn_execution execution; /* --threads, --kernel, --memory-limit */

    /* File paths as given (NULL = option not used). */
    const char *mask_path;            /* --mask, bool [B|1, Hq|1, Tq, Tk] (rank 2..4) */
    const char *bias_path;            /* --bias, float32 [B|1, Hq|1, Tq, Tk] (rank 2..4) */
    const char *alibi_slopes_path;    /* --alibi-slopes, float32 [Hq] */
    const char *query_lengths_path;   /* --query-lengths, int32 [B] */
    const char *key_lengths_path;     /* --key-lengths, int32 [B] */
    const char *query_positions_path; /* --query-positions, int64 [Tq] */
    const char *key_positions_path;   /* --key-positions, int64 [Tk] */
    const char *block_layout_path;    /* --block-layout, bool [B|1, Hq|1, nQ, nK] (rank 2..4) */

    /* Which position-dependent option set the need for an alignment (for the message). */
    const char *needs_alignment;
    bool alignment_given;

    /* Owned storage the options point into. */
    int64_t *global_tokens;
    attn_npy_array mask_array, bias_array, alibi_slopes_array, query_lengths_array,
        key_lengths_array, query_positions_array, key_positions_array, block_layout_array;
    attn_tensor mask_tensor, bias_tensor, block_layout_tensor;
} cli_attention_arguments;

/* Sets every option to its default (attn_options_default, attn_execution_default) and every
 * path to NULL. */
void cli_attention_arguments_init(cli_attention_arguments *arguments);

/*
 * Looks at argv[*index]. If it is a shared option, parses it (and its value, advancing
 * *index past it) and returns CLI_PARSE_CONSUMED; on a bad value prints one line
 * "attn COMMAND: --option 'value': why" and returns CLI_PARSE_ERROR.
 */
cli_parse_result cli_parse_attention_option(cli_attention_arguments *arguments,
                                            const char *command, int argc, char **argv,
                                            int *index);

/*
 * Loads the files named by the options and checks them against the problem's sizes
 * (B, Tq, Tk, Hq), then points `arguments->options` at them. Also settles the alignment:
 * window, ALiBi and patterns need one when Tq != Tk and no explicit positions are given.
 * Returns false after printing one line on error.
 */
bool cli_attention_arguments_load(cli_attention_arguments *arguments, const char *command,
                                  int64_t batch, int64_t query_length, int64_t key_length,
                                  int64_t query_heads);

/* Frees what load allocated. Safe to call after a failed parse or load. */
void cli_attention_arguments_free(cli_attention_arguments *arguments);

/* The --help text of the shared options (one option per line, aligned, ends in '\n'). */
extern const char cli_attention_options_help[];

/* Parses a non-negative byte count with an optional K, M or G suffix (powers of 1024). */
bool cli_parse_bytes(const char *text, size_t *bytes);

/* Parses a kernel family name (CLI_KERNEL_NAMES) into *kernel; false for any other text.
 * Whether this CPU and build can run it is attn_kernel_name's answer (NULL: it cannot). */
#define CLI_KERNEL_NAMES "auto, generic, avx2, avx512, avx512_bf16 or amx"
bool cli_parse_kernel(const char *name, attn_kernel_choice *kernel);

/* Parses a whole string as an int64 / a finite double; false if anything is left over. */
bool cli_parse_int64(const char *text, int64_t *value);
bool cli_parse_double(const char *text, double *value);

#endif /* ATTN_CLI_ARGUMENTS_H */
