/*
 * flash_backward.c — attn_backward: the attention backward pass by recomputation
 * (FlashAttention-2) in one pass over key tiles, deterministic by construction.
 *
 * Nothing of size Tq x Tk is ever stored: P is rebuilt tile by tile from the forward's LSE
 * (P = exp(S - lse)), and D = rowsum(dO * O) comes from the forward's stored O when that is
 * float32, else from P and dP recomputed in fp32 (compute_row_dots). Schedule:
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
#include <string.h>

#include "backward.h"
#include "flash_backward.h"

#include "../call/call.h"
#include "../core/internal.h"
#include "../core/parallel.h"

/* Default tiles: 64 query rows x 256 keys keep P and dS in L2 beside the tile's dK, dV
 * accumulators (256 x D each); each key tile streams Q, dO and the dQ partials once per query
 * head, so wider key tiles stream less (docs/backward.md, "Performance"). */
#define BACKWARD_TILE_Q 64
#define BACKWARD_TILE_K 256
#define BACKWARD_BAND_TILE_Q 32

/* Tasks per call the chunking aims at (enough for dynamic balancing on a few cores), and the
 * most chunks (each costs |dQ| floats of partial sums). */
#define TARGET_TASKS 16
#define MAX_CHUNKS 4
#define BAND_TARGET_TASKS 32

/* Most bytes of one thread's kept query tiles (band_query_tile_slots). */
#define BACKWARD_QUERY_SLOT_BYTES ((double)(8 << 20))

/* Lanes of the double sums of compute_row_dots (element c goes to lane c % DOT_LANES; the
 * lanes are added in order at the end: a fixed order the compiler can vectorise). */
enum { DOT_LANES = 8 };

/* sum_c a[c] * b[c] for c < count, unit-stride fp32 rows, in double (lanes as above). */
static double dot_unit_stride(const float *a, const float *b, int64_t count) {
    double lanes[DOT_LANES] = {0};
    int64_t c = 0;
    for (; c + DOT_LANES <= count; c += DOT_LANES)
        for (int l = 0; l < DOT_LANES; ++l) lanes[l] += (double)a[c + l] * b[c + l];
    for (int l = 0; c + l < count; ++l) lanes[l] += (double)a[c + l] * b[c + l];
    double sum = 0.0;
    for (int l = 0; l < DOT_LANES; ++l) sum += lanes[l];
    return sum;
}

/* row_dot[b][h][i] = sum_c dO[b,i,h,c] * O[b,i,h,c] for float32 dO and O, summed in double.
 * Rows are taken in memory order, (b, i) then h: the rows of one head are Hq * Dv elements
 * apart, a page or more, where the hardware prefetchers do not follow. */
static void row_dots_of(void *context, int64_t first, int64_t end, int worker) {
    const backward_plan *plan = context;
    const int64_t Hq = plan->problem.query_heads;
    const int64_t Tq = plan->problem.query_length, Dv = plan->problem.value_dim;
    for (int64_t bi = first; bi < end; ++bi) {
        const int64_t b = bi / Tq, i = bi % Tq;
        const int64_t dout_stride = plan->dout->stride[3], out_stride = plan->out->stride[3];
        for (int64_t h = 0; h < Hq; ++h) {
            double sum = 0.0;
            if (dout_stride == 1 && out_stride == 1) {
                sum = dot_unit_stride(attn_f32_at4(plan->dout, b, i, h, 0),
                                      attn_f32_at4(plan->out, b, i, h, 0), Dv);
            } else {
                const float *dout = attn_f32_at4(plan->dout, b, i, h, 0);
                const float *out = attn_f32_at4(plan->out, b, i, h, 0);
                for (int64_t c = 0; c < Dv; ++c)
                    sum += (double)dout[c * dout_stride] * out[c * out_stride];
            }
            plan->row_dot[(b * Hq + h) * Tq + i] = (float)sum;
        }
    }
}

/* The tasks of the recomputed D (16-bit O): (b, KV head, plan->dot_task_tiles query
 * tiles), claimed in order. */
typedef struct row_dot_region {
    const backward_plan *plan;
    const attn_call *call;
    int64_t next_task;
} row_dot_region;

static void recompute_row_dots(void *context, int worker) {
    row_dot_region *region = context;
    const backward_plan *plan = region->plan;
    const int64_t Tq = plan->problem.query_length, Hkv = plan->problem.kv_heads;
    const int64_t task_rows = plan->dot_task_tiles * plan->tile_q;
    const int64_t row_tasks = (Tq + task_rows - 1) / task_rows;
    const int64_t count = plan->problem.batch * Hkv * row_tasks;
    backward_workspace workspace;
    backward_workspace_assign(plan, attn_call_workspace(region->call, worker), &workspace);
    for (int64_t task; (task = attn_parallel_claim(&region->next_task)) < count;) {
        const int64_t b = task / (Hkv * row_tasks), kv = task / row_tasks % Hkv;
        const int64_t first = task % row_tasks * task_rows;
        backward_query_rows_dots(plan, &workspace, b, kv, first,
                                 Tq - first < task_rows ? Tq : first + task_rows);
    }
}

/* Query tiles per task of the recomputed D: up to DOT_TASK_TILES (each key tile, widened
 * from 16 bits and packed, serves them all), fewer while that leaves under TARGET_TASKS
 * tasks. From the shape only. */
enum { DOT_TASK_TILES = 4 };

static int64_t dot_task_tiles(const backward_plan *plan) {
    const int64_t query_tiles = (plan->problem.query_length + plan->tile_q - 1) / plan->tile_q;
    const int64_t heads = plan->problem.batch * plan->problem.kv_heads;
    int64_t tiles = DOT_TASK_TILES;
    while (tiles > 1 && heads * ((query_tiles + tiles - 1) / tiles) < TARGET_TASKS) --tiles;
    return tiles;
}

/* Pass 0: D. From the stored O where it is float32 (dO . O, as the forward computed it);
 * for a 16-bit O from P and dP recomputed in fp32 (backward_query_rows_dots): dS = P (dP -
 * D) subtracts two nearly equal numbers where attention is peaked, and D from the rounded O
 * would carry O's rounding (2^-9 relative for bf16) into dS, dQ and dK whole. Costs about
 * 4 D flops per allowed pair (S and dP once more) next to the backward's 10 D. */
static void compute_row_dots(const backward_plan *plan, const attn_call *call, int threads) {
    if (plan->out->dtype == ATTN_DTYPE_F32) {
        attn_parallel_for(threads, plan->problem.batch * plan->problem.query_length, 16,
                          row_dots_of, (void *)plan);
        return;
    }
    /* load_query_tile copies D of its rows before they are computed: defined values */
    memset(plan->row_dot, 0,
           (size_t)(plan->problem.batch * plan->problem.query_heads * plan->problem.query_length) *
               sizeof(float));
    row_dot_region region = {plan, call, 0};
    attn_parallel_run(threads, recompute_row_dots, &region);
}

/* Query rows per block of reduce_query_partials. */
enum { REDUCE_ROWS = 16 };

/* dq[b, i, h, :] = scale * (the sum of the partial rows (b, h, i) of the chunks that keep
 * row i, in chunk order; 0 when none does). Blocks of REDUCE_ROWS rows of every head, so that
 * both the partials (rows of a head consecutive) and dq (heads of a row consecutive) are read
 * and written in runs of several lines, not one row per page. Returns how many finite values
 * did not fit a 16-bit dq. */
typedef struct reduce_region {
    const backward_plan *plan;
    int64_t *overflowed; /* [threads]: values that did not fit, per worker */
} reduce_region;

static void reduce_blocks(void *context, int64_t first, int64_t end, int worker) {
    const reduce_region *region = context;
    const backward_plan *plan = region->plan;
    int64_t overflowed = 0;
    const int64_t Hq = plan->problem.query_heads;
    const int64_t Tq = plan->problem.query_length, Dk = plan->problem.key_dim;
    const int64_t blocks = (Tq + REDUCE_ROWS - 1) / REDUCE_ROWS;
    for (int64_t block = first; block < end; ++block) {
        const int64_t b = block / blocks, i0 = block % blocks * REDUCE_ROWS;
        const int64_t i1 = i0 + REDUCE_ROWS < Tq ? i0 + REDUCE_ROWS : Tq;
        float sums[256];
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = i0; i < i1; ++i) {
                /* With task partials, the one chunk that keeps a row has written it. */
                if (plan->task_partials && backward_row_keepers(plan, i) == 1) continue;
                const int64_t dq_first = backward_offset(plan->dq, b, i, h, 0);
                const int64_t dq_stride = plan->dq->stride[3];
                /* The sum goes straight into an F32 unit-stride dq row, else through `sums`
                 * in pieces of up to 256 floats. */
                const bool direct = plan->dq->dtype == ATTN_DTYPE_F32 && dq_stride == 1;
                for (int64_t d0 = 0; d0 < Dk; d0 += direct ? Dk : 256) {
                    const int64_t n = direct ? Dk : (Dk - d0 < 256 ? Dk - d0 : 256);
                    float *row_sum = direct ? (float *)plan->dq->data + dq_first : sums;
                    bool any = false;
                    for (int64_t chunk = 0; chunk < plan->chunks; ++chunk) {
                        if (i < plan->chunk_rows_first[chunk] || i >= plan->chunk_rows_end[chunk])
                            continue;
                        const float *partial = backward_query_partial(plan, chunk, b, h, i) + d0;
                        if (!any)
                            for (int64_t d = 0; d < n; ++d) row_sum[d] = partial[d];
                        else
                            for (int64_t d = 0; d < n; ++d) row_sum[d] += partial[d];
                        any = true;
                    }
                    if (!any)
                        for (int64_t d = 0; d < n; ++d) row_sum[d] = 0.0f;
                    if (direct) {
                        for (int64_t d = 0; d < n; ++d) row_sum[d] *= plan->scale;
                        continue;
                    }
                    overflowed += backward_store_row(plan->dq, dq_first + d0 * dq_stride, n,
                                                     row_sum, plan->scale);
                }
            }
    }
    region->overflowed[worker] += overflowed;
}

static int64_t reduce_query_partials(const backward_plan *plan, int threads) {
    int64_t overflowed[threads]; /* threads <= ATTN_MAX_THREADS */
    for (int t = 0; t < threads; ++t) overflowed[t] = 0;
    const reduce_region region = {plan, overflowed};
    const int64_t blocks = (plan->problem.query_length + REDUCE_ROWS - 1) / REDUCE_ROWS;
    attn_parallel_for(threads, plan->problem.batch * blocks, 1, reduce_blocks, (void *)&region);
    int64_t total = 0;
    for (int t = 0; t < threads; ++t) total += overflowed[t];
    return total;
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

/* The key tiles of chunk `chunk`: tiles first, first + step, ... below end (see
 * backward_plan). */
static void chunk_tiles(const backward_plan *plan, int64_t key_tiles, int64_t chunk,
                        int64_t *first, int64_t *end, int64_t *step) {
    if (plan->contiguous_chunks) {
        *first = chunk * key_tiles / plan->chunks;
        *end = (chunk + 1) * key_tiles / plan->chunks;
        *step = 1;
    } else {
        *first = chunk;
        *end = key_tiles;
        *step = plan->chunks;
    }
}

/* Zeroes what task (task_b, task_kv, chunk) accumulates into: its dQ partials (the rows the
 * chunk keeps, of its query heads) and its d bias columns. */
static void zero_task_outputs(const backward_plan *plan, const backward_tasks *tasks,
                              int64_t task_b, int64_t task_kv, int64_t chunk) {
    const int64_t Tq = plan->problem.query_length, Tk = plan->problem.key_length;
    const int64_t Dk = plan->problem.key_dim, G = plan->problem.group_size;
    const int64_t b_first = task_b * tasks->batch_span;
    const int64_t h_first = task_kv * tasks->kv_span * G, h_count = tasks->kv_span * G;
    const int64_t rows = plan->chunk_rows_end[chunk] - plan->chunk_rows_first[chunk];
    for (int64_t b = b_first; b < b_first + tasks->batch_span && rows > 0 && !plan->task_partials;
         ++b)
        memset(backward_query_partial(plan, chunk, b, h_first, plan->chunk_rows_first[chunk]), 0,
               (size_t)(h_count * rows * Dk) * sizeof(float));
    int64_t tile_first, tile_end, tile_step;
    chunk_tiles(plan, tasks->key_tiles, chunk, &tile_first, &tile_end, &tile_step);
    const attn_tensor *dbias = plan->dbias;
    if (dbias == NULL) return;
    const int64_t bias_b_first = dbias->shape[0] == 1 ? 0 : b_first;
    const int64_t bias_b_count = dbias->shape[0] == 1 ? 1 : tasks->batch_span;
    const int64_t bias_h_first = dbias->shape[1] == 1 ? 0 : h_first;
    const int64_t bias_h_count = dbias->shape[1] == 1 ? 1 : h_count;
    for (int64_t bb = bias_b_first; bb < bias_b_first + bias_b_count; ++bb)
        for (int64_t bh = bias_h_first; bh < bias_h_first + bias_h_count; ++bh)
            for (int64_t i = 0; i < Tq; ++i)
                for (int64_t tile = tile_first; tile < tile_end; tile += tile_step)
                    for (int64_t j = tile * plan->tile_k;
                         j < Tk && j < (tile + 1) * plan->tile_k; ++j)
                        *attn_f32_at4(dbias, bb, bh, i, j) = 0.0f;
}

/* The end of a task with plan->task_partials (b, KV head kv_head, chunk): for each row the
 * chunk keeps, of each head of the group, dQ = scale * partial when no other chunk keeps the
 * row (what pass 2 would compute from one partial), else the partial row copied to
 * query_partials for pass 2. */
static void flush_task_partials(const backward_plan *plan, backward_workspace *workspace,
                                int64_t b, int64_t kv_head, int64_t chunk) {
    const int64_t G = plan->problem.group_size, Dk = plan->problem.key_dim;
    const int64_t first = plan->chunk_rows_first[chunk], end = plan->chunk_rows_end[chunk];
    for (int64_t g = 0; g < G; ++g) {
        const int64_t h = kv_head * G + g;
        for (int64_t i = first; i < end; ++i) {
            const float *partial =
                workspace->task_partials + (g * plan->task_partial_rows + i - first) * Dk;
            if (backward_row_keepers(plan, i) > 1) {
                memcpy(backward_query_partial(plan, chunk, b, h, i), partial,
                       (size_t)Dk * sizeof(float));
                continue;
            }
            workspace->query_overflowed += backward_store_row(
                plan->dq, backward_offset(plan->dq, b, i, h, 0), Dk, partial, plan->scale);
        }
    }
}

/* Runs task (task_b, task_kv, chunk): its batches, KV heads, and key tiles in order. */
static void run_task(const backward_plan *plan, const backward_tasks *tasks,
                     backward_workspace *workspace, int64_t task) {
    const int64_t chunk = task % plan->chunks;
    const int64_t task_kv = (task / plan->chunks) % tasks->kv_heads;
    const int64_t task_b = task / (plan->chunks * tasks->kv_heads);
    const int64_t Tk = plan->problem.key_length;
    zero_task_outputs(plan, tasks, task_b, task_kv, chunk);
    int64_t tile_first, tile_end, tile_step;
    chunk_tiles(plan, tasks->key_tiles, chunk, &tile_first, &tile_end, &tile_step);
    const int64_t kept = plan->chunk_rows_end[chunk] - plan->chunk_rows_first[chunk];
    for (int64_t b = task_b * tasks->batch_span; b < (task_b + 1) * tasks->batch_span; ++b)
        for (int64_t kv = task_kv * tasks->kv_span; kv < (task_kv + 1) * tasks->kv_span; ++kv) {
            if (plan->task_partials) /* one (b, KV head) per task: see backward_plan */
                memset(workspace->task_partials, 0,
                       (size_t)(plan->problem.group_size * plan->task_partial_rows *
                                plan->problem.key_dim) * sizeof(float));
            for (int64_t tile = tile_first; tile < tile_end; tile += tile_step) {
                const int64_t j0 = tile * plan->tile_k;
                const int count = (int)(Tk - j0 < plan->tile_k ? Tk - j0 : plan->tile_k);
                backward_key_tile(plan, workspace, b, kv, j0, count, chunk);
            }
            if (plan->task_partials && kept > 0) flush_task_partials(plan, workspace, b, kv, chunk);
        }
}

/* Fills the chunks' kept query rows and their offsets (backward_plan) for plan->chunks
 * chunks: all rows for dealt chunks; for contiguous ones, the query tiles whose candidate
 * keys (over every batch) meet the chunk's keys. *floats: the floats of all partial sums;
 * false on overflow. */
static bool plan_chunk_rows(backward_plan *plan, const attn_mask_context *mask,
                            size_t *floats) {
    const int64_t B = plan->problem.batch, Hq = plan->problem.query_heads;
    const int64_t Tq = plan->problem.query_length, Tk = plan->problem.key_length;
    const int64_t key_tiles = (Tk + plan->tile_k - 1) / plan->tile_k;
    size_t total = 0;
    for (int64_t chunk = 0; chunk < plan->chunks; ++chunk) {
        int64_t first = 0, end = Tq;
        if (plan->contiguous_chunks) {
            int64_t tile_first, tile_end, tile_step;
            chunk_tiles(plan, key_tiles, chunk, &tile_first, &tile_end, &tile_step);
            const int64_t j_first = tile_first * plan->tile_k;
            const int64_t j_end = tile_end * plan->tile_k < Tk ? tile_end * plan->tile_k : Tk;
            first = Tq, end = 0;
            for (int64_t b = 0; b < B; ++b)
                for (int64_t i0 = 0; i0 < Tq; i0 += plan->tile_q) {
                    const int64_t i1 = i0 + plan->tile_q < Tq ? i0 + plan->tile_q : Tq;
                    int64_t key_begin, key_end;
                    attn_mask_candidate_keys(mask, b, i0, i1, &key_begin, &key_end);
                    if (key_begin >= key_end || key_end <= j_first || key_begin >= j_end)
                        continue;
                    if (i0 < first) first = i0;
                    if (i1 > end) end = i1;
                }
            if (end <= first) first = end = 0; /* reaches no row */
        }
        plan->chunk_rows_first[chunk] = first;
        plan->chunk_rows_end[chunk] = end;
        plan->chunk_offset[chunk] = total;
        size_t chunk_floats;
        if (!attn_mul_size((size_t)(B * Hq), (size_t)(end - first), &chunk_floats) ||
            !attn_mul_size(chunk_floats, (size_t)plan->problem.key_dim, &chunk_floats) ||
            !attn_add_size(total, chunk_floats, &total))
            return false;
    }
    *floats = total;
    return true;
}

/* The number of dQ chunks and their rows (plan_chunk_rows): from the shape only, never the
 * thread count (B * Hkv * chunks should reach TARGET_TASKS, or BAND_TARGET_TASKS for
 * contiguous chunks, whose partial sums cost little more than one |dQ|; at most MAX_CHUNKS
 * (BACKWARD_MAX_CHUNKS) and the number of key tiles), fewer while the partial sums and D
 * would take more than half of execution->memory_limit_bytes. *partial_floats: the partial
 * sums' floats; false on overflow. */
static bool choose_chunks(backward_plan *plan, const attn_execution *execution,
                          const attn_mask_context *mask, size_t row_dot_floats,
                          size_t *partial_floats) {
    plan->chunks = 1;
    const backward_tasks unchunked = plan_tasks(plan);
    const int64_t base_tasks = unchunked.batches * unchunked.kv_heads;
    const int64_t target = plan->contiguous_chunks ? BAND_TARGET_TASKS : TARGET_TASKS;
    int64_t chunks = (target + base_tasks - 1) / base_tasks;
    const int64_t most = plan->contiguous_chunks ? BACKWARD_MAX_CHUNKS : MAX_CHUNKS;
    if (chunks > most) chunks = most;
    if (chunks > unchunked.key_tiles) chunks = unchunked.key_tiles;
    const size_t half_limit_floats = execution->memory_limit_bytes / sizeof(float) / 2;
    for (;; --chunks) {
        plan->chunks = chunks;
        size_t floats;
        if (!plan_chunk_rows(plan, mask, partial_floats)) {
            if (chunks == 1) return false;
            continue;
        }
        if (chunks == 1 || execution->memory_limit_bytes == 0 ||
            (attn_add_size(*partial_floats, row_dot_floats, &floats) &&
             floats <= half_limit_floats))
            return true;
    }
}

/* Query tiles kept per head for a windowed band (backward_workspace): those one key tile
 * reaches, rows [j0 - right, j0 + tile_k + left) for aligned positions, and two more, so
 * that the next key tile of the chunk finds the ones they share; at most all query tiles,
 * and 1 when the copies of a group would pass BACKWARD_QUERY_SLOT_BYTES (a wide window). */
static int64_t band_query_tile_slots(const backward_plan *plan, const attn_options *options) {
    const int64_t Tq = plan->problem.query_length;
    int64_t left, right;
    attn_mask_band_sides(options, Tq, plan->problem.key_length, &left, &right);
    const int64_t query_tiles = (Tq + plan->tile_q - 1) / plan->tile_q;
    int64_t slots = (plan->tile_k + left + right + plan->tile_q - 1) / plan->tile_q + 2;
    if (slots > query_tiles) slots = query_tiles;
    const double bytes = (double)slots * (double)plan->problem.group_size * plan->tile_q *
                         (double)(ATTN_BACKWARD_ROW_FLOATS(plan->problem.key_dim) +
                                  ATTN_BACKWARD_ROW_FLOATS(plan->problem.value_dim) + 2) *
                         sizeof(float);
    return bytes <= BACKWARD_QUERY_SLOT_BYTES ? slots : 1;
}

/* The backward's task loop: each worker claims tasks in ascending order; a task writes only
 * its own dK/dV rows and dQ partials, so which worker runs it never changes a bit. */
typedef struct task_region {
    const backward_plan *plan;
    const backward_tasks *tasks;
    const attn_call *call;
    int64_t *overflows; /* [threads][2] */
    int64_t next_task;
} task_region;

static void run_tasks(void *context, int worker) {
    task_region *region = context;
    backward_workspace workspace;
    backward_workspace_assign(region->plan, attn_call_workspace(region->call, worker), &workspace);
    for (int64_t task; (task = attn_parallel_claim(&region->next_task)) < region->tasks->count;)
        run_task(region->plan, region->tasks, &workspace, task);
    region->overflows[2 * worker] = workspace.overflowed;
    region->overflows[2 * worker + 1] = workspace.query_overflowed;
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

/* Tile sizes and the band chunking of the plan (from the options and the execution). */
static void plan_tiles(backward_plan *plan, const attn_call *call) {
    const int64_t Tq = plan->problem.query_length, Tk = plan->problem.key_length;
    /* A windowed pure band: chunks of consecutive key tiles (backward_plan) and finer tiles
     * (flash_backward.h). */
    plan->contiguous_chunks =
        attn_mask_is_band(&call->options) && attn_mask_window_narrows(&call->options, Tq, Tk);
    plan->key_block = plan->contiguous_chunks ? BACKWARD_BAND_KEY_BLOCK : BACKWARD_KEY_BLOCK;
    plan->tile_q = call->execution.tile_q > 0 ? call->execution.tile_q
                   : plan->contiguous_chunks  ? BACKWARD_BAND_TILE_Q
                                              : BACKWARD_TILE_Q;
    plan->tile_k = call->execution.tile_k > 0 ? call->execution.tile_k : BACKWARD_TILE_K;
    plan->query_tile_slots = 1;
    if (plan->tile_q > Tq) plan->tile_q = (int)Tq;
    if (plan->tile_k > Tk) plan->tile_k = (int)Tk;
    if (plan->contiguous_chunks)
        plan->query_tile_slots = band_query_tile_slots(plan, &call->options);
}

/* The tasks on `threads` workers (D first), the dQ partials reduced, the call ended; an
 * OVERFLOW status when 16-bit gradients do not fit. */
static attn_status run_backward(backward_plan *plan, attn_call *call, int threads,
                                int64_t row_dot_count, const attn_tensor *dq, attn_error *error) {
    plan->mask = &call->mask;
    plan->row_dot = attn_call_shared(call);
    plan->query_partials = plan->row_dot + ((size_t)row_dot_count + 15) / 16 * 16;
    compute_row_dots(plan, call, threads);

    const backward_tasks tasks = plan_tasks(plan);
    int64_t overflows[2 * threads]; /* per worker: dk/dv values, then dq values */
    for (int t = 0; t < 2 * threads; ++t) overflows[t] = 0;
    task_region region = {plan, &tasks, call, overflows, 0};
    attn_parallel_run(threads, run_tasks, &region);
    int64_t key_overflows = 0, task_query_overflows = 0;
    for (int t = 0; t < threads; ++t) {
        key_overflows += overflows[2 * t];
        task_query_overflows += overflows[2 * t + 1];
    }
    const int64_t query_overflows = reduce_query_partials(plan, threads) + task_query_overflows;

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

attn_status attn_backward_run(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_tensor *out,
                              const attn_tensor *lse, const attn_tensor *dout, attn_tensor *dq,
                              attn_tensor *dk, attn_tensor *dv, attn_tensor *dbias,
                              attn_error *error) {
    attn_status status =
        attn_call_validate_backward(call, q, k, v, out, lse, dout, dq, dk, dv, dbias, error);
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
    plan.dropout = attn_dropout_of(&call->options, plan.problem.query_heads);
    plan.dropout.first_batch = call->dropout_first_batch;
    plan.dropout.blocks = call->kernels->forward.philox_blocks;
    const int64_t B = plan.problem.batch, Tq = plan.problem.query_length;
    const int64_t Tk = plan.problem.key_length, Hq = plan.problem.query_heads;
    plan_tiles(&plan, call);
    const int64_t Dk = plan.problem.key_dim;
    /* The backward's products: about 2.5 times the forward's (S, P, dP, dS, dQ, dK, dV). */
    const double pairs = (double)B * (double)Tq * (double)Tk;
    const int threads = attn_call_threads_for_work(
        call, 0, 5.0 * pairs * (double)Hq * (double)(plan.problem.key_dim + plan.problem.value_dim),
        (double)B * ((double)Tq * (double)Hq + (double)Tk * (double)plan.problem.kv_heads) * 4.0 *
            (double)(plan.problem.key_dim + plan.problem.value_dim) * 4.0);
    /* The kernels index tiles with int: a tile of the largest dimension must fit. */
    const int64_t largest_dim = Dk > plan.problem.value_dim ? Dk : plan.problem.value_dim;
    const int64_t largest_tile = plan.tile_q > plan.tile_k ? plan.tile_q : plan.tile_k;
    if (largest_dim > INT32_MAX / 16 / largest_tile) {
        attn_call_end(call);
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "head dimension %lld: too large for the backward's tiles of %lld rows",
                         (long long)largest_dim, (long long)largest_tile);
    }

    /* The rows of contiguous chunks come from the mask, whose context the reserve below sets
     * up: a copy of it answers first. */
    attn_mask_context rows_mask;
    if (plan.contiguous_chunks) {
        status = attn_mask_context_init(&rows_mask, &call->options, &call->problem, error);
        if (status != ATTN_OK) {
            attn_call_end(call);
            return status;
        }
    }

    /* Working memory: one workspace per thread, then the shared D [B][Hq][Tq] and the
     * chunks' dQ partials, all overflow-checked and reserved at once. */
    int64_t row_dot_count, partial_count;
    bool fits = attn_mul_i64(B * Hq, Tq, &row_dot_count) &&
                attn_mul_i64(row_dot_count, Dk, &partial_count);
    size_t fixed_floats = 0, shared_bytes = 0;
    if (fits) {
        const size_t row_dot_floats = (size_t)row_dot_count + 16; /* + partials' alignment */
        size_t partial_floats = 0;
        fits = choose_chunks(&plan, &call->execution, plan.contiguous_chunks ? &rows_mask : NULL,
                             row_dot_floats, &partial_floats) &&
               attn_add_size(partial_floats, row_dot_floats, &fixed_floats) &&
               attn_mul_size(fixed_floats, sizeof(float), &shared_bytes);
    }
    if (plan.contiguous_chunks) attn_mask_context_free(&rows_mask);
    /* Task partials (backward_plan) where each task covers one (b, KV head) and the extra
     * workspace fits the memory limit. */
    const backward_tasks chunked = plan_tasks(&plan);
    plan.task_partials = fits && plan.contiguous_chunks && chunked.batch_span == 1 &&
                         chunked.kv_span == 1;
    for (int64_t c = 0; c < plan.chunks && plan.task_partials; ++c)
        if (plan.chunk_rows_end[c] - plan.chunk_rows_first[c] > plan.task_partial_rows)
            plan.task_partial_rows = plan.chunk_rows_end[c] - plan.chunk_rows_first[c];
    plan.dot_task_tiles = out->dtype != ATTN_DTYPE_F32 ? dot_task_tiles(&plan) : 0;
    size_t workspace_floats = backward_workspace_floats(&plan);
    const size_t limit = call->execution.memory_limit_bytes;
    if (plan.task_partials && limit > 0 &&
        (double)workspace_floats * sizeof(float) * threads + (double)shared_bytes > (double)limit) {
        plan.task_partials = false;
        workspace_floats = backward_workspace_floats(&plan);
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
    return run_backward(&plan, call, threads, row_dot_count, dq, error);
}
