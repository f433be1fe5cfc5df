/*
 * cmd_ring.c — `attn ring`: ring attention across MPI processes, on the same files (.npy, or
 * FILE.safetensors[:NAME] tensors: ../tensor_files.h), options and --dtype as `attn forward`,
 * so the two outputs can be compared directly.
 *
 *   mpirun -np P attn ring --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy]
 *                          [--dtype f32|bf16|f16] [--layout contiguous|zigzag|striped]
 *                          [--repeat N] [--backward] [--stats] [--compare] [attention options]
 *
 * Rank 0 reads Q, K, V (self-attention: Tq = Tk; float32 or 16-bit files, as attn forward),
 * cuts them into each rank's share under the layout (in float32), rounds each share to
 * --dtype (nearest-even, as attn forward rounds its inputs) and sends each rank only its
 * share; the ring runs in that dtype (16-bit K/V blocks on the wire, fp32 merges); rank 0
 * gathers O (and LSE, always float32) back into global order and writes them (O in --dtype
 * as attn forward writes it; under temporary names, all renamed when all are complete). --stats
 * prints per-rank timings, work and bytes sent; --compare also times the single-process
 * attn_forward on rank 0 and prints the largest difference; --backward also times the ring
 * backward (with dO = 1) for benchmarks. Errors: one line on rank 0's stderr, every rank exits
 * with 1 (2 for usage errors).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_io.h"
#include "../arguments.h"
#include "../cli.h"
#include "../npy_tensor.h"
#include "../tensor_files.h"
#include "attn_mpi.h"

static const char *const command = "ring";

static void print_help(void) {
    printf("usage: mpirun -np P attn ring --q Q.npy --k K.npy --v V.npy --out O.npy "
           "[--lse LSE.npy] [options]\n\n"
           "Ring attention over P MPI processes: each process keeps its share of the queries and\n"
           "passes key/value blocks around the ring, merging partial results by log-sum-exp.\n"
           "The result equals `attn forward` on the same files (self-attention, Tq = Tk).\n\n"
           "tensors (C order; read and written by rank 0): Q.npy (float32 or float16), or a\n"
           "tensor of a safetensors file (F32, BF16, F16), FILE.safetensors:NAME\n"
           "(FILE.safetensors alone: the tensor named after the option: q, k, v, o, lse);\n"
           "outputs naming one safetensors file are written into it together\n"
           "  --q Q.npy                  queries [B, T, Hq, Dk]\n"
           "  --k K.npy                  keys    [B, T, Hkv, Dk]\n"
           "  --v V.npy                  values  [B, T, Hkv, Dv]\n"
           "  --out O.npy                output  [B, T, Hq, Dv] (written)\n"
           "  --lse LSE.npy              log-sum-exp [B, Hq, T] (written, float32)\n"
           "  --dtype f32|bf16|f16       the type of Q, K, V and O in the ring (default f32),\n"
           "                             as in attn forward: inputs rounded to it (nearest-\n"
           "                             even), K/V blocks sent in it, O written in it\n"
           "                             (safetensors BF16/F16; .npy float16 for f16, float32\n"
           "                             for f32 and bf16)\n\n"
           "ring options:\n"
           "  --layout NAME              contiguous, zigzag (default) or striped: which tokens\n"
           "                             each rank holds (zigzag and striped balance causal work)\n"
           "  --repeat N                 run the forward N times (timings: the fastest run)\n"
           "  --backward                 also time the ring backward (dO = 1), N times\n"
           "  --stats                    print per-rank time, allowed pairs and bytes sent\n"
           "  --compare                  also run the single-process attn_forward on rank 0:\n"
           "                             its time and the largest |O_ring - O_single|\n\n"
           "%s\n"
           "Only causal, window, ALiBi, soft-capping, scale and empty-row options apply to the\n"
           "ring; the others are refused.\n",
           cli_attention_options_help);
}

typedef struct ring_arguments {
    const char *q_path, *k_path, *v_path, *out_path, *lse_path;
    attn_ring_layout_kind layout;
    int64_t repeat;
    bool backward, stats, compare;
    attn_dtype dtype; /* --dtype: what the ring computes in */
} ring_arguments;

/* Parses argv (identically on every rank). Returns 0 to go on, else the exit code; *done
 * after --help. */
static int parse_arguments(int argc, char **argv, int rank, ring_arguments *ring,
                           cli_attention_arguments *arguments, bool *done) {
    struct { const char *name; const char **target; } paths[] = {
        {"--q", &ring->q_path},     {"--k", &ring->k_path},     {"--v", &ring->v_path},
        {"--out", &ring->out_path}, {"--lse", &ring->lse_path},
    };
    int code = 0;
    for (int i = 1; i < argc && code == 0 && !*done; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (rank == 0) print_help();
            *done = true;
            break;
        }
        if (strcmp(argv[i], "--backward") == 0) { ring->backward = true; continue; }
        if (strcmp(argv[i], "--stats") == 0) { ring->stats = true; continue; }
        if (strcmp(argv[i], "--compare") == 0) { ring->compare = true; continue; }
        if (strcmp(argv[i], "--dtype") == 0) {
            if (!cli_parse_compute_dtype(command, i + 1 < argc ? argv[++i] : "", &ring->dtype))
                code = 2;
            continue;
        }
        if (strcmp(argv[i], "--layout") == 0 || strcmp(argv[i], "--repeat") == 0) {
            if (i + 1 >= argc) {
                cli_error(command, "%s needs a value", argv[i]);
                code = 2;
                break;
            }
            const char *value = argv[++i];
            if (strcmp(argv[i - 1], "--repeat") == 0) {
                if (!cli_parse_int64(value, &ring->repeat) || ring->repeat < 1) {
                    cli_error(command, "--repeat '%s': expected an integer >= 1", value);
                    code = 2;
                }
            } else if (strcmp(value, "contiguous") == 0) {
                ring->layout = ATTN_RING_LAYOUT_CONTIGUOUS;
            } else if (strcmp(value, "zigzag") == 0) {
                ring->layout = ATTN_RING_LAYOUT_ZIGZAG;
            } else if (strcmp(value, "striped") == 0) {
                ring->layout = ATTN_RING_LAYOUT_STRIPED;
            } else {
                cli_error(command, "--layout '%s': expected contiguous, zigzag or striped", value);
                code = 2;
            }
            continue;
        }
        bool matched = false;
        for (size_t p = 0; p < sizeof paths / sizeof paths[0] && !matched; ++p)
            if (strcmp(argv[i], paths[p].name) == 0) {
                if (i + 1 >= argc) {
                    cli_error(command, "%s needs a file name", argv[i]);
                    code = 2;
                } else {
                    *paths[p].target = argv[++i];
                }
                matched = true;
            }
        if (matched) continue;
        cli_parse_result result = cli_parse_attention_option(arguments, command, argc, argv, &i);
        if (result == CLI_PARSE_ERROR) code = 2;
        if (result == CLI_PARSE_NOT_MINE) {
            cli_error(command, "unknown option '%s' (see attn ring --help)", argv[i]);
            code = 2;
        }
    }
    for (size_t p = 0; p < 4 && code == 0 && !*done; ++p)
        if (*paths[p].target == NULL) {
            cli_error(command, "missing %s (usage: mpirun -np P attn ring --q Q.npy --k K.npy "
                      "--v V.npy --out O.npy [--lse LSE.npy] [options])", paths[p].name);
            code = 2;
        }
    return code;
}

/* Point-to-point copies of `count` elements of `size` bytes, any length (MPI counts are int:
 * sent as bytes in pieces of 1 GiB). */
static void send_elements(const void *data, int64_t count, size_t size, int destination,
                          MPI_Comm comm) {
    const int64_t piece = (int64_t)1 << 30, bytes = count * (int64_t)size;
    for (int64_t offset = 0; offset < bytes; offset += piece)
        MPI_Send((const char *)data + offset, (int)(bytes - offset < piece ? bytes - offset : piece),
                 MPI_BYTE, destination, 0, comm);
}

static void receive_elements(void *data, int64_t count, size_t size, int source, MPI_Comm comm) {
    const int64_t piece = (int64_t)1 << 30, bytes = count * (int64_t)size;
    for (int64_t offset = 0; offset < bytes; offset += piece)
        MPI_Recv((char *)data + offset, (int)(bytes - offset < piece ? bytes - offset : piece),
                 MPI_BYTE, source, 0, comm, MPI_STATUS_IGNORE);
}

/* destination [d0, d1, d2, d3] of `dtype` (written) = source float32 [same], nearest-even.
 * false with the library's message (an fp16 overflow) in `error`. */
static bool convert_from_f32(const float *source, void *destination, attn_dtype dtype,
                             const int64_t shape[4], attn_error *error) {
    attn_tensor from = attn_tensor_contiguous((void *)source, ATTN_DTYPE_F32, 4, shape);
    attn_tensor to = attn_tensor_contiguous(destination, dtype, 4, shape);
    return attn_tensor_convert(&from, &to, error) == ATTN_OK;
}

/* destination float32 [d0, d1, d2, d3] (written) = source of `dtype` [same], exactly. */
static void widen_to_f32(const void *source, attn_dtype dtype, float *destination,
                         const int64_t shape[4]) {
    attn_tensor from = attn_tensor_contiguous((void *)source, dtype, 4, shape);
    attn_tensor to = attn_tensor_contiguous(destination, ATTN_DTYPE_F32, 4, shape);
    attn_tensor_convert(&from, &to, NULL);
}

/* Sizes rank 0 found in the files, broadcast to everyone: ok, B, T, Hq, Hkv, Dk, Dv. */
enum { SIZE_OK, SIZE_B, SIZE_T, SIZE_HQ, SIZE_HKV, SIZE_DK, SIZE_DV, SIZE_COUNT };

/* Rank 0's global inputs: Q, K, V rounded to --dtype (`typed`, kept by the cli_inputs) and
 * their float32 views for attn_ring_shard (`global`: the typed data when f32, else an exact
 * widened copy in `widened`). */
typedef struct ring_inputs {
    cli_input files[3];
    attn_tensor typed[3], global[3];
    float *widened[3];
} ring_inputs;

static void ring_inputs_free(ring_inputs *inputs) {
    for (int i = 0; i < 3; ++i) {
        cli_input_free(&inputs->files[i]);
        free(inputs->widened[i]);
    }
}

static bool load_inputs(const ring_arguments *ring, ring_inputs *inputs, int64_t sizes[SIZE_COUNT]) {
    cli_input *arrays = inputs->files;
    if (!cli_input_load(command, "--q", ring->q_path, "q", 4, 4, true, &arrays[0]) ||
        !cli_input_load(command, "--k", ring->k_path, "k", 4, 4, true, &arrays[1]) ||
        !cli_input_load(command, "--v", ring->v_path, "v", 4, 4, true, &arrays[2]))
        return false;
    const int64_t *q = arrays[0].shape, *k = arrays[1].shape, *v = arrays[2].shape;
    if (k[0] != q[0] || k[1] != q[1] || k[3] != q[3]) {
        cli_error(command, "--k %s: [B, T, -, Dk] = [%lld, %lld, -, %lld] differs from --q %s "
                  "[%lld, %lld, -, %lld] (the ring computes self-attention: Tq = Tk)",
                  ring->k_path, (long long)k[0], (long long)k[1], (long long)k[3], ring->q_path,
                  (long long)q[0], (long long)q[1], (long long)q[3]);
        return false;
    }
    if (v[0] != k[0] || v[1] != k[1] || v[2] != k[2]) {
        cli_error(command, "--v %s: [B, T, Hkv] = [%lld, %lld, %lld] differs from --k %s",
                  ring->v_path, (long long)v[0], (long long)v[1], (long long)v[2], ring->k_path);
        return false;
    }
    for (int i = 0; i < 3; ++i) {
        if (!cli_input_as(command, &arrays[i], ring->dtype, &inputs->typed[i])) return false;
        inputs->global[i] = inputs->typed[i];
        if (ring->dtype == ATTN_DTYPE_F32) continue;
        const int64_t *shape = inputs->typed[i].shape;
        inputs->widened[i] = malloc((size_t)(shape[0] * shape[1] * shape[2] * shape[3]) *
                                    sizeof(float));
        if (inputs->widened[i] == NULL) {
            cli_error(command, "%s %s: out of memory widening it for the shards", arrays[i].option,
                      arrays[i].argument);
            return false;
        }
        widen_to_f32(inputs->typed[i].data, ring->dtype, inputs->widened[i], shape);
        inputs->global[i] = attn_tensor_f32_4d(inputs->widened[i], shape[0], shape[1], shape[2],
                                               shape[3]);
    }
    int64_t values[SIZE_COUNT] = {1, q[0], q[1], q[2], k[2], q[3], v[3]};
    memcpy(sizes, values, sizeof values);
    return true;
}

/* Every rank's status in one: true only if all are true. */
static bool all_ranks(bool ok) {
    int mine = ok, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all != 0;
}

/* O and LSE as the writer sees them (data NULL until gathered). */
static void describe_outputs(const ring_arguments *ring, cli_output outputs[2]) {
    outputs[0] = (cli_output){"--out", ring->out_path, "o", ring->dtype, 4, {0}, NULL};
    outputs[1] = (cli_output){"--lse", ring->lse_path, "lse", ATTN_DTYPE_F32, 3, {0}, NULL};
}

/* The whole command after parsing; every rank runs it. Returns the exit code. */
static int run_ring(const ring_arguments *ring, cli_attention_arguments *arguments, int rank,
                    int rank_count) {
    ring_inputs inputs;
    memset(&inputs, 0, sizeof inputs);
    int64_t sizes[SIZE_COUNT] = {0};
    if (rank == 0 && !load_inputs(ring, &inputs, sizes)) sizes[SIZE_OK] = 0;
    MPI_Bcast(sizes, SIZE_COUNT, MPI_INT64_T, 0, MPI_COMM_WORLD);
    int code = 1;
    const attn_dtype dtype = ring->dtype;
    const size_t element = attn_dtype_size(dtype);
    /* q, k, v, out [B, n, H, D] in dtype, lse [B, Hq, n] float32 */
    void *local[5] = {NULL, NULL, NULL, NULL, NULL};
    /* rank 0: O and LSE in global order (float32), O in dtype for the writer, scratch for
       the shares (float32 and typed) */
    float *global_out = NULL, *global_lse = NULL, *scratch = NULL;
    void *typed_out = NULL, *typed_scratch = NULL, *gradients[4] = {NULL};
    if (!sizes[SIZE_OK]) goto done;
    const int64_t B = sizes[SIZE_B], T = sizes[SIZE_T], Hq = sizes[SIZE_HQ], Hkv = sizes[SIZE_HKV],
                  Dk = sizes[SIZE_DK], Dv = sizes[SIZE_DV];
    if (!all_ranks(cli_attention_arguments_load(arguments, command, B, T, T, Hq))) goto done;
    attn_ring_layout layout = {ring->layout, T, rank_count};
    attn_error error;
    int64_t n = 0;
    if (attn_ring_layout_local_length(&layout, rank, &n, &error) != ATTN_OK) {
        if (rank == 0) cli_error(command, "--q %s: %s", ring->q_path, error.message);
        goto done;
    }
    /* Each rank's buffers: q, k, v, out [B, n, H, D] and lse [B, Hq, n]. */
    const int64_t heads[5] = {Hq, Hkv, Hkv, Hq, Hq}, dims[5] = {Dk, Dk, Dv, Dv, 1};
    bool allocated = true;
    for (int i = 0; i < 5; ++i) {
        local[i] = malloc((size_t)(B * n * heads[i] * dims[i]) * (i < 4 ? element : sizeof(float)));
        allocated &= local[i] != NULL;
    }
    if (!all_ranks(allocated)) {
        if (rank == 0) cli_error(command, "cannot allocate the local blocks (%lld tokens)", (long long)n);
        goto done;
    }
    attn_tensor views[4];
    for (int i = 0; i < 4; ++i) {
        const int64_t shape[4] = {B, n, heads[i], dims[i]};
        views[i] = attn_tensor_contiguous(local[i], dtype, 4, shape);
    }
    int64_t lse_shape[3] = {B, Hq, n};
    attn_tensor lse_view = attn_tensor_contiguous(local[4], ATTN_DTYPE_F32, 3, lse_shape);

    /* Rank 0 cuts each rank's share of Q, K, V out of the (rounded) inputs in float32, narrows
       it back to dtype (exact: the values are the dtype's) and sends it. */
    if (rank == 0) {
        for (int r = rank_count - 1; r >= 0; --r) {
            int64_t length = 0;
            attn_ring_layout_local_length(&layout, r, &length, NULL);
            for (int i = 0; i < 3; ++i) {
                const int64_t count = B * length * heads[i] * dims[i];
                const int64_t shape[4] = {B, length, heads[i], dims[i]};
                const bool direct = r == 0 && dtype == ATTN_DTYPE_F32; /* shard into local */
                float *share = direct ? local[i] : malloc((size_t)count * sizeof(float));
                void *typed = r == 0 ? local[i]
                              : dtype == ATTN_DTYPE_F32 ? (void *)share
                                                        : malloc((size_t)count * element);
                if (share == NULL || typed == NULL) { /* rank 0's own share fit above */
                    cli_error(command, "cannot allocate rank %d's share", r);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                attn_tensor share_view = attn_tensor_f32_4d(share, B, length, heads[i], dims[i]);
                attn_ring_shard(&layout, r, 1, &inputs.global[i], &share_view, NULL);
                if (dtype != ATTN_DTYPE_F32) convert_from_f32(share, typed, dtype, shape, NULL);
                if (r != 0) send_elements(typed, count, element, r, MPI_COMM_WORLD);
                if (!direct) free(share);
                if (r != 0 && typed != share) free(typed);
            }
        }
    } else {
        for (int i = 0; i < 3; ++i)
            receive_elements(local[i], B * n * heads[i] * dims[i], element, 0, MPI_COMM_WORLD);
    }

    /* The ring, `repeat` times; timings are the fastest run. */
    attn_ring_stats stats, best; /* step_sources = NULL: not recorded */
    memset(&stats, 0, sizeof stats);
    memset(&best, 0, sizeof best);
    for (int64_t run = 0; run < ring->repeat; ++run) {
        MPI_Barrier(MPI_COMM_WORLD);
        attn_status status = attn_ring_forward(MPI_COMM_WORLD, &views[0], &views[1], &views[2],
                                               &arguments->options, &layout, &views[3], &lse_view,
                                               &stats, &arguments->execution, &error);
        if (status != ATTN_OK) { /* every rank has the same status and message */
            if (rank == 0) cli_error(command, "%s", error.message);
            goto done;
        }
        if (run == 0 || stats.total_seconds < best.total_seconds) best = stats;
    }
    double backward_seconds = 0, backward_wait = 0;
    int64_t backward_bytes = 0;
    if (ring->backward) {
        const int64_t gradient_dims[4] = {Dv, Dk, Dk, Dv}, gradient_heads[4] = {Hq, Hq, Hkv, Hkv};
        bool ok = true;
        for (int i = 0; i < 4; ++i) {
            gradients[i] = malloc((size_t)(B * n * gradient_heads[i] * gradient_dims[i]) * element);
            ok &= gradients[i] != NULL;
        }
        float *ones = malloc((size_t)(B * n * Hq * Dv) * sizeof(float));
        if (!all_ranks(ok && ones != NULL)) {
            free(ones);
            if (rank == 0) cli_error(command, "--backward: cannot allocate the gradients");
            goto done;
        }
        for (int64_t i = 0; i < B * n * Hq * Dv; ++i) ones[i] = 1.0f; /* dO */
        const int64_t dout_shape[4] = {B, n, Hq, Dv};
        if (dtype == ATTN_DTYPE_F32) memcpy(gradients[0], ones, (size_t)(B * n * Hq * Dv) * sizeof(float));
        else convert_from_f32(ones, gradients[0], dtype, dout_shape, NULL);
        free(ones);
        attn_tensor g[4];
        for (int i = 0; i < 4; ++i) {
            const int64_t shape[4] = {B, n, gradient_heads[i], gradient_dims[i]};
            g[i] = attn_tensor_contiguous(gradients[i], dtype, 4, shape);
        }
        for (int64_t run = 0; run < ring->repeat; ++run) {
            MPI_Barrier(MPI_COMM_WORLD);
            attn_status status = attn_ring_backward(MPI_COMM_WORLD, &views[0], &views[1], &views[2],
                                                    &views[3], &lse_view, &g[0], &arguments->options,
                                                    &layout, &g[1], &g[2], &g[3], &stats, &arguments->execution, &error);
            if (status != ATTN_OK) {
                if (rank == 0) cli_error(command, "--backward: %s", error.message);
                goto done;
            }
            if (run == 0 || stats.total_seconds < backward_seconds) {
                backward_seconds = stats.total_seconds;
                backward_wait = stats.wait_seconds;
                backward_bytes = stats.bytes_sent;
            }
        }
    }

    /* Rank 0 gathers O and LSE into global order. */
    const int64_t out_shape[4] = {B, T, Hq, Dv}, global_lse_shape[3] = {B, Hq, T};
    bool gathered = true;
    if (rank == 0) {
        global_out = malloc((size_t)(B * T * Hq * Dv) * sizeof(float));
        global_lse = malloc((size_t)(B * Hq * T) * sizeof(float));
        int64_t longest = 0; /* the largest share of any rank */
        for (int r = 0; r < rank_count; ++r) {
            int64_t length = 0;
            attn_ring_layout_local_length(&layout, r, &length, NULL);
            if (length > longest) longest = length;
        }
        scratch = malloc((size_t)(B * longest * Hq * Dv) * sizeof(float));
        typed_scratch = malloc((size_t)(B * longest * Hq * Dv) * element);
        typed_out = dtype == ATTN_DTYPE_F32 ? NULL : malloc((size_t)(B * T * Hq * Dv) * element);
        gathered = global_out != NULL && global_lse != NULL && scratch != NULL &&
                   typed_scratch != NULL && (dtype == ATTN_DTYPE_F32 || typed_out != NULL);
    }
    if (!all_ranks(gathered)) {
        if (rank == 0) cli_error(command, "--out %s: cannot allocate the gathered output", ring->out_path);
        goto done;
    }
    if (rank == 0) {
        attn_tensor out_global = attn_tensor_f32_4d(global_out, B, T, Hq, Dv);
        attn_tensor lse_global = attn_tensor_contiguous(global_lse, ATTN_DTYPE_F32, 3, global_lse_shape);
        attn_ring_gather(&layout, 0, 2, &lse_view, &lse_global, NULL);
        for (int r = 0; r < rank_count; ++r) { /* each share of O widened to float32 (exact) */
            int64_t length = 0;
            attn_ring_layout_local_length(&layout, r, &length, NULL);
            const int64_t share_shape[4] = {B, length, Hq, Dv};
            const void *typed = local[3];
            if (r != 0) {
                receive_elements(typed_scratch, B * length * Hq * Dv, element, r, MPI_COMM_WORLD);
                typed = typed_scratch;
            }
            widen_to_f32(typed, dtype, scratch, share_shape);
            attn_tensor share = attn_tensor_f32_4d(scratch, B, length, Hq, Dv);
            attn_ring_gather(&layout, r, 1, &share, &out_global, NULL);
            if (r == 0) continue;
            int64_t share_lse_shape[3] = {B, Hq, length};
            attn_tensor share_lse = attn_tensor_contiguous(scratch, ATTN_DTYPE_F32, 3, share_lse_shape);
            receive_elements(scratch, B * Hq * length, sizeof(float), r, MPI_COMM_WORLD);
            attn_ring_gather(&layout, r, 2, &share_lse, &lse_global, NULL);
        }
        if (dtype != ATTN_DTYPE_F32) convert_from_f32(global_out, typed_out, dtype, out_shape, NULL);
    } else {
        send_elements(local[3], B * n * Hq * Dv, element, 0, MPI_COMM_WORLD);
        send_elements(local[4], B * Hq * n, sizeof(float), 0, MPI_COMM_WORLD);
    }

    /* Per-rank statistics, printed by rank 0. */
    double mine[8] = {best.total_seconds, best.compute_seconds, best.wait_seconds,
                      (double)best.computed_pairs, (double)best.bytes_sent, backward_seconds,
                      backward_wait, (double)backward_bytes};
    double *everyone = rank == 0 ? calloc((size_t)rank_count * 8, sizeof(double)) : NULL;
    MPI_Gather(mine, 8, MPI_DOUBLE, everyone, 8, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0 && ring->stats && everyone != NULL) {
        printf("ring: P = %d, layout %s, B = %lld, T = %lld, Hq = %lld, Hkv = %lld, Dk = %lld, "
               "Dv = %lld, best of %lld\n", rank_count, attn_ring_layout_name(ring->layout),
               (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)Dk,
               (long long)Dv, (long long)ring->repeat);
        printf("rank  forward_ms  compute_ms  wait_ms  allowed_pairs  sent_MB%s\n",
               ring->backward ? "  backward_ms  bwd_wait_ms  bwd_sent_MB" : "");
        for (int r = 0; r < rank_count; ++r) {
            const double *s = everyone + 8 * r;
            printf("%4d  %10.3f  %10.3f  %7.3f  %13.0f  %7.3f", r, 1e3 * s[0], 1e3 * s[1],
                   1e3 * s[2], s[3], s[4] / 1e6);
            if (ring->backward) printf("  %11.3f  %11.3f  %11.3f", 1e3 * s[5], 1e3 * s[6], s[7] / 1e6);
            printf("\n");
        }
    }
    free(everyone);

    if (rank == 0 && ring->compare) {
        float *single = malloc((size_t)(B * T * Hq * Dv) * sizeof(float));
        void *single_typed = malloc((size_t)(B * T * Hq * Dv) * element);
        if (single != NULL && single_typed != NULL) {
            attn_tensor q = inputs.typed[0], k = inputs.typed[1], v = inputs.typed[2];
            attn_tensor single_out = attn_tensor_contiguous(single_typed, dtype, 4, out_shape);
            double best_seconds = 0;
            attn_status status = ATTN_OK;
            for (int64_t run = 0; run < ring->repeat && status == ATTN_OK; ++run) {
                double start = MPI_Wtime();
                status = attn_forward(&q, &k, &v, &arguments->options, &single_out, NULL,
                                      &arguments->execution, &error);
                double seconds = MPI_Wtime() - start;
                if (run == 0 || seconds < best_seconds) best_seconds = seconds;
            }
            if (status == ATTN_OK) {
                widen_to_f32(single_typed, dtype, single, out_shape);
                double largest = 0;
                for (int64_t i = 0; i < B * T * Hq * Dv; ++i) {
                    double difference = fabs((double)single[i] - (double)global_out[i]);
                    if (!(difference <= largest)) largest = difference;
                }
                printf("single-process attn_forward: %.3f ms; largest |O_ring - O_single| = %.3g\n",
                       1e3 * best_seconds, largest);
            } else {
                cli_error(command, "--compare: %s", error.message);
            }
        }
        free(single);
        free(single_typed);
    }

    code = 0;
    if (rank == 0) {
        cli_output outputs[2];
        describe_outputs(ring, outputs);
        memcpy(outputs[0].shape, out_shape, sizeof out_shape);
        outputs[0].data = dtype == ATTN_DTYPE_F32 ? (const void *)global_out : typed_out;
        memcpy(outputs[1].shape, global_lse_shape, sizeof global_lse_shape);
        outputs[1].data = global_lse;
        if (!cli_outputs_write(command, outputs, 2)) code = 1;
    }
    if (!all_ranks(code == 0)) code = 1;
done:
    ring_inputs_free(&inputs);
    for (int i = 0; i < 5; ++i) free(local[i]);
    for (int i = 0; i < 4; ++i) free(gradients[i]);
    free(global_out);
    free(global_lse);
    free(scratch);
    free(typed_out);
    free(typed_scratch);
    return code;
}

int cli_ring(int argc, char **argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(&argc, &argv);
    int rank = 0, rank_count = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rank_count);
    /* Every rank parses the same arguments and agrees on every error, so only rank 0 speaks. */
    if (rank != 0 && freopen("/dev/null", "w", stderr) == NULL) return 1;
    ring_arguments ring = {NULL, NULL, NULL, NULL, NULL, ATTN_RING_LAYOUT_ZIGZAG, 1, false, false,
                           false, ATTN_DTYPE_F32};
    cli_attention_arguments arguments;
    cli_attention_arguments_init(&arguments);
    bool done = false;
    int code = parse_arguments(argc, argv, rank, &ring, &arguments, &done);
    if (code == 0 && !done) {
        cli_output outputs[2];
        describe_outputs(&ring, outputs);
        const char *inputs[3][2] = {{"--q", ring.q_path}, {"--k", ring.k_path}, {"--v", ring.v_path}};
        bool valid = cli_outputs_distinct(command, outputs, 2);
        for (int i = 0; i < 3 && valid; ++i) valid = cli_location_valid(command, inputs[i][0], inputs[i][1]);
        if (!valid) { /* every rank agrees; only rank 0's stderr is open */
            code = 2;
        } else {
            code = run_ring(&ring, &arguments, rank, rank_count);
        }
    }
    cli_attention_arguments_free(&arguments);
    MPI_Finalize();
    return code;
}
