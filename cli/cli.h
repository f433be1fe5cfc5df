/*
 * cli.h — the `attn` command-line tool's internal interface: one function per subcommand
 * (each in its own cmd_*.c file) and the small helpers they share (options parsing, .npy
 * and safetensors tensors, heat maps). The benchmarks are the separate tool attn-bench
 * (bench/).
 *
 * A subcommand receives argv starting at its own name (argv[0] = "forward") and returns the
 * process exit code: 0 on success, 1 on a runtime error, 2 on a usage error. Errors are one
 * line on stderr naming the file or option and the bad value.
 */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"

int cli_demo(int argc, char **argv);       /* cmd_demo.c: a worked example, step by step */
int cli_forward(int argc, char **argv);    /* cmd_forward.c: attention on .npy / safetensors */
int cli_backward(int argc, char **argv);   /* cmd_backward.c: gradients, likewise */
int cli_train(int argc, char **argv);      /* cmd_train.c: a small model that learns */
int cli_kv_size(int argc, char **argv);    /* cmd_kv_size.c: KV-cache bytes per token */
int cli_inspect(int argc, char **argv);    /* cmd_inspect.c: weight files and their layers */
int cli_heatmap_command(int argc, char **argv); /* cmd_heatmap.c: draw a weights file */
#ifdef ATTN_HAVE_MPI
int cli_ring(int argc, char **argv);       /* mpi/cmd_ring.c: ring attention under mpirun */
#endif

#endif /* ATTN_CLI_H */
