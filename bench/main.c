/*
 * main.c — entry point of the `attn-bench` tool: dispatches to a benchmark. The forward grid
 * is the default subcommand, so `attn-bench --repeats 5 ...` and `attn-bench forward
 * --repeats 5 ...` are the same run.
 */
#include <stdio.h>
#include <string.h>

#include "attn.h"
#include "bench.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"forward", bench_forward, "attn_forward (--backward: attn_backward) on a grid of shapes and masks; --peak"},
    {"decode", bench_decode, "single-token decoding against a KV cache: ms per token, K/V GB/s, MLA"},
    {"serve", bench_serve, "a continuous-batching step mix on a paged KV cache (--ownership: caller pages)"},
    {"small", bench_small, "the time of one small attn_forward call, as a generation loop makes them"},
    {"decode-steps", bench_decode_steps, "a fixed number of decode steps, untimed: for instruction counts"},
    {"lowp-kernels", bench_lowp_kernels, "one forward tile step of every kernel registry, fp32 and bf16 tiles"},
#ifdef ATTN_BENCH_INSTRUCTION_RATES
    {"instruction-rates", bench_instruction_rates, "this core's rates of the vector instructions the kernels use"},
#endif
};

static void print_usage(FILE *stream) {
    fprintf(stream, "attn-bench %s — benchmarks of the attn library\n\n"
                    "usage: attn-bench [COMMAND] [options]   (COMMAND defaults to forward)\n\n"
                    "commands:\n", attn_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
        fprintf(stream, "  %-18s %s\n", commands[i].name, commands[i].summary);
    fprintf(stream, "\n`attn-bench COMMAND --help` documents each command's options.\n"
                    "`attn-bench --version` prints the version.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { /* no command: the whole usage, on stdout (it is the answer) */
        print_usage(stdout);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("attn-bench %s\n", attn_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    if (argv[1][0] == '-') return bench_forward(argc, argv); /* the forward grid's options */
    fprintf(stderr, "attn-bench: unknown command '%s' (see attn-bench --help)\n", argv[1]);
    return 2;
}
