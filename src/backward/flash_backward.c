/*
 * flash_backward.c — attn_backward: the attention backward pass by recomputation
 * (FlashAttention-2) in one pass over key tiles, deterministic by construction.
 *
 * Nothing of size Tq x Tk is ever stored: P is rebuilt tile by tile from the forward's LSE
 * (P = exp(S - lse)), and D = rowsum(dO * O) comes from the forward's stored O. Schedule:
 *   pass 0, over (b, h):               D[b][h][i] = sum_c dO[b,i,h,c] * O[b,i,h,c]
 *   pass 1, over (b, KV head, chunk):  for the key tiles of the chunk (tiles chunk,
 *                                      chunk + chunks, ...), ascending: dK and dV of the tile,
 *                                      and dS K added into the chunk's own dQ partial sums
 *   pass 2, over query rows:           dQ = scale * (partial_0 + partial_1 + ...), in order
 * Each output element has one owner and a fixed summation order, with no atomics, so the
 * results are bitwise identical for any thread count. The number of chunks depends only on
 * the problem's shape (and a memory limit), never on the thread count: it gives the 2-core
 * machine enough tasks when B * Hkv is small, at chunks x |dQ| floats of partial sums
 * (O(T * D) per head). Every allowed pair costs 10 D flops (S, dP, dV, dK, dQ products), where
 * a separate dQ pass would recompute S and dP (14 D). The tile work is in backward_tile.c.
 *
 * With a bias gradient, a task owns the d bias entries of its key tiles: when the bias
 * broadcasts over batches or heads, one task covers all of them, so that every entry is
 * summed by one thread in (b, h) order.
 */
#include <omp.h>
#include <string.h>

#include "backward.h"
#include "flash_backward.h"

#include "../call/call.h"
#include "../core/internal.h"

/* Default tiles: 64 query rows x 128 keys keep P and dS (32 KiB each) in L1/L2 and the
 * tile's dK, dV accumulators (128 x D each) in L2; each key tile streams Q, dO and the dQ
 * partials once per query head, so wider key tiles stream less. Measured in
 * docs/backward.md. */
#define BACKWARD_TILE_Q 64
#define BACKWARD_TILE_K 256

/* Tasks per call the chunking aims at (enough for dynamic balancing on a few cores), and the
 * most chunks (each costs |dQ| floats of partial sums). */
#define TARGET_TASKS 16
#define MAX_CHUNKS 4

/* row_dot[b][h][i] = sum_c dO[b,i,h,c] * O[b,i,h,c], summed in double. */
static void compute_row_dots(const backward_plan *plan, int threads) {
    const int64_t B = plan->problem.batch, Hq = plan->problem.query_heads;
    const int64_t Tq = plan->problem.query_length, Dv = plan->problem.value_dim;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t bh = 0; bh < B * Hq; ++bh) {
        const int64_t b = bh / Hq, h = bh % Hq;
        const int64_t dout_stride = plan->dout->stride[3], out_stride = plan->out->stride[3];
        for (int64_t i = 0; i < Tq; ++i) {
            double sum = 0.0;
            if (plan->out->dtype == ATTN_DTYPE_F32) {
                const float *dout = attn_f32_at4(plan->dout, b, i, h, 0);
                const float *out = attn_f32_at4(plan->out, b, i, h, 0);
                for (int64_t c = 0; c < Dv; ++c)
                    sum += (double)dout[c * dout_stride] * out[c * out_stride];
            } else { /* 16-bit dO and O, widened */
                const int64_t dout_first = backward_offset(plan->dout, b, i, h, 0);
                const int64_t out_first = backward_offset(plan->out, b, i, h, 0);
                for (int64_t c = 0; c < Dv; ++c)
                    sum += (double)backward_get(plan->dout, dout_first + c * dout_stride) *
                           backward_get(plan->out, out_first + c * out_stride);
            }
            plan->row_dot[bh * Tq + i] = (float)sum;
        }
    }
}

/* dq[b, i, h, :] = scale * (partial_0 + partial_1 + ...)[b][h][i][:], chunks in order.
 * Returns how many finite values did not fit a 16-bit dq. */
static int64_t reduce_query_partials(const backward_plan *plan, int threads) {
    int64_t overflowed = 0;
    const int64_t B = plan->problem.batch, Hq = plan->problem.query_heads;
    const int64_t Tq = plan->problem.query_length, Dk = plan->problem.key_dim;
    const int64_t chunk_floats = B * Hq * Tq * Dk;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : overflowed)
    for (int64_t row = 0; row < B * Hq * Tq; ++row) {
        const int64_t b = row / (Hq * Tq), h = (row / Tq) % Hq, i = row % Tq;
        const float *partial = plan->query_partials + row * Dk;
        const int64_t dq_first = backward_offset(plan->dq, b, i, h, 0);
        const int64_t dq_stride = plan->dq->stride[3];
        for (int64_t d = 0; d < Dk; ++d) {
            float sum = partial[d];
            for (int64_t chunk = 1; chunk < plan->chunks; ++chunk)
                sum += partial[chunk * chunk_floats + d];
            overflowed += backward_put(plan->dq, dq_first + d * dq_stride, plan->scale * sum);
        }
    }
    return overflowed;
}

/* The work split of pass 1: tasks over (task batch, task KV head, chunk). A task covers every
 * batch (every KV head) when d bias broadcasts over batches (heads). */
typedef struct backward_tasks {
    int64_t batches, kv_heads;     /* task batches / task KV heads */
    int64_t batch_span, kv_span;   /* batches / KV heads per task */
    int64_t key_tiles;
    int64_t count;                 /* batches * kv_heads * chunks */
} backward_tasks;

static backward_tasks plan_tasks(const backward_plan *plan) {
    const attn_tensor *dbias = plan->dbias;
    const int64_t B = plan->problem.batch, Hkv = plan->problem.kv_heads;
    backward_tasks tasks;
    tasks.batch_span = dbias != NULL && dbias->shape[0] == 1 ? B : 1;
    tasks.kv_span = dbias != NULL && dbias->shape[1] == 1 ? Hkv : 1;
    tasks.batches = B / tasks.batch_span;
    tasks.kv_heads = Hkv / tasks.kv_span;
    tasks.key_tiles = (plan->problem.key_length + plan->tile_k - 1) / plan->tile_k;
    tasks.count = tasks.batches * tasks.kv_heads * plan->chunks;
    return tasks;
}

/* Zeroes what task (task_b, task_kv, chunk) accumulates into: its dQ partials (all rows of
 * its query heads) and its d bias columns. */
static void zero_task_outputs(const backward_plan *plan, const backward_tasks *tasks,
                              int64_t task_b, int64_t task_kv, int64_t chunk) {
    const int64_t B = plan->problem.batch, Hq = plan->problem.query_heads;
    const int64_t Tq = plan->problem.query_length, Tk = plan->problem.key_length;
    const int64_t Dk = plan->problem.key_dim, G = plan->problem.group_size;
    const int64_t b_first = task_b * tasks->batch_span;
    const int64_t h_first = task_kv * tasks->kv_span * G, h_count = tasks->kv_span * G;
    for (int64_t b = b_first; b < b_first + tasks->batch_span; ++b)
        memset(plan->query_partials + ((chunk * B + b) * Hq + h_first) * Tq * Dk, 0,
               (size_t)(h_count * Tq * Dk) * sizeof(float));
    const attn_tensor *dbias = plan->dbias;
    if (dbias == NULL) return;
    const int64_t bias_b_first = dbias->shape[0] == 1 ? 0 : b_first;
    const int64_t bias_b_count = dbias->shape[0] == 1 ? 1 : tasks->batch_span;
    const int64_t bias_h_first = dbias->shape[1] == 1 ? 0 : h_first;
    const int64_t bias_h_count = dbias->shape[1] == 1 ? 1 : h_count;
    for (int64_t bb = bias_b_first; bb < bias_b_first + bias_b_count; ++bb)
        for (int64_t bh = bias_h_first; bh < bias_h_first + bias_h_count; ++bh)
            for (int64_t i = 0; i < Tq; ++i)
                for (int64_t tile = chunk; tile < tasks->key_tiles; tile += plan->chunks)
                    for (int64_t j = tile * plan->tile_k;
                         j < Tk && j < (tile + 1) * plan->tile_k; ++j)
                        *attn_f32_at4(dbias, bb, bh, i, j) = 0.0f;
}

/* Runs task (task_b, task_kv, chunk): its batches, KV heads, and key tiles in order. */
static void run_task(const backward_plan *plan, const backward_tasks *tasks,
                     backward_workspace *workspace, int64_t task) {
    const int64_t chunk = task % plan->chunks;
    const int64_t task_kv = (task / plan->chunks) % tasks->kv_heads;
    const int64_t task_b = task / (plan->chunks * tasks->kv_heads);
    const int64_t Tk = plan->problem.key_length;
    zero_task_outputs(plan, tasks, task_b, task_kv, chunk);
    for (int64_t b = task_b * tasks->batch_span; b < (task_b + 1) * tasks->batch_span; ++b)
        for (int64_t kv = task_kv * tasks->kv_span; kv < (task_kv + 1) * tasks->kv_span; ++kv)
            for (int64_t tile = chunk; tile < tasks->key_tiles; tile += plan->chunks) {
                const int64_t j0 = tile * plan->tile_k;
                const int count = (int)(Tk - j0 < plan->tile_k ? Tk - j0 : plan->tile_k);
                backward_key_tile(plan, workspace, b, kv, j0, count, chunk);
            }
}

/* The number of dQ chunks: from the shape only, never the thread count (B * Hkv * chunks
 * should reach TARGET_TASKS; at most MAX_CHUNKS and the number of key tiles), fewer while
 * the partial sums and D would take more than half of execution->memory_limit_bytes.
 * partial_floats: B*Hq*Tq*Dk (one chunk). */
static int64_t choose_chunks(backward_plan *plan, const attn_execution *execution,
                             size_t partial_floats, size_t row_dot_floats) {
    plan->chunks = 1;
    const backward_tasks unchunked = plan_tasks(plan);
    const int64_t base_tasks = unchunked.batches * unchunked.kv_heads;
    int64_t chunks = (TARGET_TASKS + base_tasks - 1) / base_tasks;
    if (chunks > MAX_CHUNKS) chunks = MAX_CHUNKS;
    if (chunks > unchunked.key_tiles) chunks = unchunked.key_tiles;
    const size_t half_limit_floats = execution->memory_limit_bytes / sizeof(float) / 2;
    size_t floats;
    while (chunks > 1 && execution->memory_limit_bytes > 0 &&
           (!attn_mul_size(partial_floats, (size_t)chunks, &floats) ||
            !attn_add_size(floats, row_dot_floats, &floats) || floats > half_limit_floats))
        chunks -= 1;
    return chunks;
}

/* ---- the public entry point ------------------------------------------------------------- */

attn_status attn_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                          const attn_tensor *out, const attn_tensor *lse,
                          const attn_tensor *dout, const attn_options *options,
                          attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                          const attn_execution *execution, attn_error *error) {
    attn_call call;
    attn_status status = attn_call_begin(&call, options, execution, error);
    if (status != ATTN_OK) {
        attn_call_end(&call);
        return status;
    }
    return attn_backward_run(&call, q, k, v, out, lse, dout, dq, dk, dv, dbias, error);
}

attn_status attn_backward_run(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_tensor *out,
                              const attn_tensor *lse, const attn_tensor *dout, attn_tensor *dq,
                              attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                              attn_error *error) {
    attn_status status = attn_backward_validate(q, k, v, out, lse, dout, &call->options, dq,
                                                dk, dv, dbias, true, &call->problem, error);
    if (status != ATTN_OK) {
        attn_call_end(call);
        return status;
    }
    backward_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.kernels = call->kernels;
    plan.problem = call->problem;
    plan.q = q, plan.k = k, plan.v = v, plan.out = out, plan.lse = lse, plan.dout = dout;
    plan.dq = dq, plan.dk = dk, plan.dv = dv, plan.dbias = dbias;
    plan.scale = plan.problem.scale;
    plan.softcap = call->options.softcap;
    plan.tile_q = call->execution.tile_q > 0 ? call->execution.tile_q : BACKWARD_TILE_Q;
    plan.tile_k = call->execution.tile_k > 0 ? call->execution.tile_k : BACKWARD_TILE_K;
    const int64_t B = plan.problem.batch, Tq = plan.problem.query_length;
    const int64_t Tk = plan.problem.key_length, Hq = plan.problem.query_heads;
    const int64_t Dk = plan.problem.key_dim;
    if (plan.tile_q > Tq) plan.tile_q = (int)Tq;
    if (plan.tile_k > Tk) plan.tile_k = (int)Tk;
    const int threads = attn_call_thread_count(call, 0);
    /* The kernels index tiles with int: a tile of the largest dimension must fit. */
    const int64_t largest_dim = Dk > plan.problem.value_dim ? Dk : plan.problem.value_dim;
    const int64_t largest_tile = plan.tile_q > plan.tile_k ? plan.tile_q : plan.tile_k;
    if (largest_dim > INT32_MAX / 16 / largest_tile) {
        attn_call_end(call);
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "head dimension %lld: too large for the backward's tiles of %lld rows",
                         (long long)largest_dim, (long long)largest_tile);
    }

    /* Working memory: one workspace per thread, then the shared D [B][Hq][Tq] and chunks x
     * dQ partials [B][Hq][Tq][Dk], all overflow-checked and reserved at once. */
    int64_t row_dot_count, partial_count;
    bool fits = attn_mul_i64(B * Hq, Tq, &row_dot_count) &&
                attn_mul_i64(row_dot_count, Dk, &partial_count);
    const size_t workspace_floats = backward_workspace_floats(&plan);
    size_t fixed_floats = 0, shared_bytes = 0;
    if (fits) {
        const size_t row_dot_floats = (size_t)row_dot_count + 16; /* + partials' alignment */
        plan.chunks = choose_chunks(&plan, &call->execution, (size_t)partial_count,
                                    row_dot_floats);
        fits = attn_mul_size((size_t)partial_count, (size_t)plan.chunks, &fixed_floats) &&
               attn_add_size(fixed_floats, row_dot_floats, &fixed_floats) &&
               attn_mul_size(fixed_floats, sizeof(float), &shared_bytes);
    }
    if (!fits) {
        attn_call_end(call);
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "backward working memory for B*Hq*Tq*Dk = %lld*%lld*%lld*%lld overflows",
                         (long long)B, (long long)Hq, (long long)Tq, (long long)Dk);
    }
    status = attn_call_reserve(call, threads, workspace_floats * sizeof(float), shared_bytes,
                               "attn_backward", error);
    if (status != ATTN_OK) {
        attn_call_end(call);
        return status;
    }
    plan.mask = &call->mask;
    plan.row_dot = attn_call_shared(call);
    plan.query_partials = plan.row_dot + ((size_t)row_dot_count + 15) / 16 * 16;
    compute_row_dots(&plan, threads);

    const backward_tasks tasks = plan_tasks(&plan);
    int64_t key_overflows = 0;
#pragma omp parallel num_threads(threads) reduction(+ : key_overflows)
    {
        backward_workspace workspace;
        backward_workspace_assign(&plan, attn_call_workspace(call, omp_get_thread_num()),
                                  &workspace);
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks.count; ++task)
            run_task(&plan, &tasks, &workspace, task);
        key_overflows += workspace.overflowed;
    }
    const int64_t query_overflows = reduce_query_partials(&plan, threads);

    attn_call_end(call);
    if (key_overflows + query_overflows > 0)
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "%lld gradient values (dq: %lld, dk and dv: %lld) do not fit %s (largest "
                         "%g); use float32 or bfloat16 gradients",
                         (long long)(key_overflows + query_overflows), (long long)query_overflows,
                         (long long)key_overflows, attn_dtype_name(dq->dtype),
                         dq->dtype == ATTN_DTYPE_F16 ? 65504.0 : 3.3895313892515355e38);
    return ATTN_OK;
}
