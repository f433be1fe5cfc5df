/*
 * main.c — entry point of the `attn` tool: dispatches to a subcommand.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"demo", cli_demo, "walk through a worked example of attention; writes labelled heat maps (no arguments)"},
    {"forward", cli_forward, "attention forward pass on .npy / safetensors tensors, every mask option"},
    {"backward", cli_backward, "attention backward pass (dQ, dK, dV) on .npy / safetensors tensors"},
    {"train", cli_train, "train a small attention-only model on a synthetic task"},
    {"heatmap", cli_heatmap_command, "draw attention weights (.npy) as a labelled heat map, PNG or SVG"},
    {"kv-size", cli_kv_size, "KV-cache bytes per token for MHA, GQA, MQA and MLA (f32 .. int8, fp8)"},
    {"inspect", cli_inspect, "what a .npy, .safetensors or checkpoint folder holds; attention layers found"},
#ifdef ATTN_HAVE_MPI
    {"ring", cli_ring, "ring attention across MPI processes (run under mpirun)"},
#endif
};

static void print_usage(FILE *stream) {
    fprintf(stream, "attn %s — exact, fast attention\n\nusage: attn COMMAND [options]\n\ncommands:\n",
            attn_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
        fprintf(stream, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(stream, "\n`attn COMMAND --help` documents each command's options.\n"
                    "`attn --version` prints the version.\n");
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
        printf("attn %s\n", attn_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "attn: unknown command '%s' (see attn --help)\n", argv[1]);
    return 2;
}
