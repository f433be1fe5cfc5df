/*
 * varlen.c — attention over packed variable-length sequences (attn_varlen_forward /
 * attn_varlen_backward, flash_attn_varlen_func's semantics) on the prepared call.
 *
 * Sequence b is a batch of one: strided views of its rows of the packed Q, K, V (and O, LSE,
 * gradients) run through attn_forward_run / attn_backward_run on a copy of one begun call, so
 * every option means exactly what it means for attn_forward and nothing is padded. Work
 * split: a sequence with enough work items of its own (KV heads x query tiles >= 2 x threads)
 * runs alone on every thread; the others run side by side, one thread each, longest first
 * (a parallel loop of the pool). Each sequence's result is bitwise identical for any thread count
 * (attn_forward's guarantee), so neither the split nor the schedule changes a bit.
 */
#include "varlen.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "core/internal.h"
#include "core/parallel.h"

/* Query rows per work item the split assumes (the forward's usual query tile). */
#define ROWS_PER_ITEM 64

attn_status attn_varlen_check_prefix(const int32_t *cu_seqlens, int64_t batch, int64_t total,
                                     int64_t max_seqlen, const char *name, attn_error *error) {
    if (cu_seqlens == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "sequences.%s is NULL", name);
    if (cu_seqlens[0] != 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s[0] = %d: must be 0", name,
                         (int)cu_seqlens[0]);
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t length = (int64_t)cu_seqlens[b + 1] - cu_seqlens[b];
        if (length < 0)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "%s[%lld] = %d < %s[%lld] = %d: sequence %lld has a negative "
                             "length (cu_seqlens must not decrease)",
                             name, (long long)(b + 1), (int)cu_seqlens[b + 1], name,
                             (long long)b, (int)cu_seqlens[b], (long long)b);
        if (length > max_seqlen)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "%s: sequence %lld has length %lld > max_seqlen_%c = %lld", name,
                             (long long)b, (long long)length, name[strlen(name) - 1],
                             (long long)max_seqlen);
    }
    if (cu_seqlens[batch] != total)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "%s[%lld] = %d: must equal the packed total %lld", name,
                         (long long)batch, (int)cu_seqlens[batch], (long long)total);
    return ATTN_OK;
}

attn_status attn_varlen_check(const attn_varlen *sequences, int64_t total_q, int64_t total_k,
                              attn_error *error) {
    if (sequences == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "sequences is NULL");
    if (sequences->batch < 1 || sequences->batch > INT32_MAX)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "sequences.batch = %lld: must be 1..%d", (long long)sequences->batch,
                         INT32_MAX);
    if (sequences->max_seqlen_q < 1 || sequences->max_seqlen_k < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "sequences.max_seqlen_%c = %lld: must be >= 1",
                         sequences->max_seqlen_q < 1 ? 'q' : 'k',
                         (long long)(sequences->max_seqlen_q < 1 ? sequences->max_seqlen_q
                                                                 : sequences->max_seqlen_k));
    attn_status status =
        attn_varlen_check_prefix(sequences->cu_seqlens_q, sequences->batch, total_q,
                                 sequences->max_seqlen_q, "cu_seqlens_q", error);
    if (status != ATTN_OK) return status;
    return attn_varlen_check_prefix(sequences->cu_seqlens_k, sequences->batch, total_k,
                                    sequences->max_seqlen_k, "cu_seqlens_k", error);
}

attn_tensor attn_varlen_rows(const attn_tensor *packed, int64_t first, int64_t length) {
    attn_tensor view;
    memset(&view, 0, sizeof view);
    view.data = (char *)packed->data +
                (ptrdiff_t)(first * packed->stride[0]) * (ptrdiff_t)attn_dtype_size(packed->dtype);
    view.dtype = packed->dtype;
    view.rank = 4;
    const int64_t shape[4] = {1, length, packed->shape[1], packed->shape[2]};
    const int64_t stride[4] = {packed->stride[0] * length, packed->stride[0], packed->stride[1],
                               packed->stride[2]};
    memcpy(view.shape, shape, sizeof shape);
    memcpy(view.stride, stride, sizeof stride);
    return view;
}

/* The LSE view [1, Hq, length] of columns first .. first + length - 1 of lse [Hq, total_q]. */
static attn_tensor lse_columns(const attn_tensor *lse, int64_t first, int64_t length) {
    attn_tensor view;
    memset(&view, 0, sizeof view);
    view.data = (float *)lse->data + first * lse->stride[1];
    view.dtype = lse->dtype;
    view.rank = 3;
    const int64_t shape[3] = {1, lse->shape[0], length};
    const int64_t stride[3] = {lse->stride[0] * lse->shape[0], lse->stride[0], lse->stride[1]};
    memcpy(view.shape, shape, sizeof shape);
    memcpy(view.stride, stride, sizeof stride);
    return view;
}

/* Options that only mean something on a padded batch are refused. */
static attn_status check_varlen_options(const attn_options *options, attn_error *error) {
    const char *name = attn_options_padded_batch_field(options);
    if (name != NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.%s is set: packed variable-length calls take no padded-batch "
                         "options (cu_seqlens define the lengths and positions)",
                         name);
    return ATTN_OK;
}

/* The operand dtype of a call: q's, when it is F32, BF16 or F16 (else F32, which the check
 * then refuses naming q's). */
static attn_dtype operand_dtype(const attn_tensor *q) {
    if (q != NULL && (q->dtype == ATTN_DTYPE_BF16 || q->dtype == ATTN_DTYPE_F16)) return q->dtype;
    return ATTN_DTYPE_F32;
}

/* Checks a packed tensor's dtype, rank and shape against the expected one (-1 = any). */
static attn_status check_packed(const attn_tensor *t, const char *name, attn_dtype dtype,
                                const int64_t *expected, const char *layout, int rank,
                                attn_error *error) {
    attn_status status = attn_check_tensor(t, name, dtype, rank, error);
    if (status != ATTN_OK) return status;
    for (int d = 0; d < rank; ++d)
        if (expected[d] >= 0 && t->shape[d] != expected[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH, "%s.shape[%d] = %lld: expected %lld (%s)",
                             name, d, (long long)t->shape[d], (long long)expected[d], layout);
    return ATTN_OK;
}

/* Prefixes the message of a failing sequence with its index. */
static void name_sequence(attn_error *error, int64_t b) {
    if (error == NULL) return;
    char prefix[48];
    const size_t added = (size_t)snprintf(prefix, sizeof prefix, "sequence %lld: ", (long long)b);
    size_t length = 0; /* the message is NUL-terminated within its capacity */
    while (length < ATTN_ERROR_MESSAGE_CAPACITY - 1 && error->message[length] != '\0') ++length;
    if (added + length > ATTN_ERROR_MESSAGE_CAPACITY - 1)
        length = ATTN_ERROR_MESSAGE_CAPACITY - 1 - added;
    memmove(error->message + added, error->message, length);
    memcpy(error->message, prefix, added);
    error->message[added + length] = '\0';
}

/* One varlen call's arguments, shared by the sequences. */
typedef struct varlen_job {
    const attn_call *call; /* begun, never reserved: each sequence runs on a copy */
    const attn_varlen *sequences;
    const attn_tensor *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
    int backward;
} varlen_job;

/* Sets rows first .. first + length - 1 of a packed tensor to 0 (nan = 0) or NaN, in its
 * dtype. */
static void fill_rows(const attn_tensor *packed, int64_t first, int64_t length, int nan) {
    const uint16_t half_bits = !nan ? 0 : packed->dtype == ATTN_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
    for (int64_t t = first; t < first + length; ++t)
        for (int64_t h = 0; h < packed->shape[1]; ++h)
            for (int64_t d = 0; d < packed->shape[2]; ++d) {
                const int64_t at = t * packed->stride[0] + h * packed->stride[1] + d * packed->stride[2];
                if (packed->dtype == ATTN_DTYPE_F32) ((float *)packed->data)[at] = nan ? NAN : 0.0f;
                else ((uint16_t *)packed->data)[at] = half_bits;
            }
}

/* Runs sequence b with `threads` threads; its error (if any) goes to *error. */
static attn_status run_sequence(const varlen_job *job, int64_t b, int threads, attn_error *error) {
    const int64_t q0 = job->sequences->cu_seqlens_q[b], k0 = job->sequences->cu_seqlens_k[b];
    const int64_t Tq = job->sequences->cu_seqlens_q[b + 1] - q0;
    const int64_t Tk = job->sequences->cu_seqlens_k[b + 1] - k0;
    const attn_options *options = &job->call->options;
    if (job->backward && (Tq == 0 || Tk == 0)) { /* nothing attends: zero gradients */
        if (Tq > 0) fill_rows(job->dq, q0, Tq, 0);
        if (Tk > 0) fill_rows(job->dk, k0, Tk, 0), fill_rows(job->dv, k0, Tk, 0);
        return ATTN_OK;
    }
    if (Tq == 0) return ATTN_OK;
    if (Tk == 0) { /* every row empty: the empty-row policy */
        if (options->empty_rows == ATTN_EMPTY_ROWS_ERROR)
            return attn_fail(error, ATTN_ERROR_EMPTY_ROW,
                             "sequence %lld: query row (h = 0, i = 0) has no allowed key "
                             "(cu_seqlens_k gives it no keys)",
                             (long long)b);
        fill_rows(job->out, q0, Tq, options->empty_rows == ATTN_EMPTY_ROWS_NAN);
        if (job->lse != NULL)
            for (int64_t h = 0; h < job->lse->shape[0]; ++h)
                for (int64_t i = q0; i < q0 + Tq; ++i)
                    ((float *)job->lse->data)[h * job->lse->stride[0] + i * job->lse->stride[1]] =
                        options->empty_rows == ATTN_EMPTY_ROWS_NAN ? NAN : -INFINITY;
        return ATTN_OK;
    }
    attn_call call = *job->call;
    call.execution.num_threads = threads;
    call.dropout_first_batch = b; /* the sequence's dropout stream is that of batch b */
    attn_tensor q = attn_varlen_rows(job->q, q0, Tq), k = attn_varlen_rows(job->k, k0, Tk);
    attn_tensor v = attn_varlen_rows(job->v, k0, Tk), out = attn_varlen_rows(job->out, q0, Tq);
    attn_tensor lse;
    if (job->lse != NULL) lse = lse_columns(job->lse, q0, Tq);
    attn_status status;
    if (!job->backward) {
        status = attn_forward_run(&call, &q, &k, &v, &out, job->lse != NULL ? &lse : NULL, error);
    } else {
        attn_tensor dout = attn_varlen_rows(job->dout, q0, Tq);
        attn_tensor dq = attn_varlen_rows(job->dq, q0, Tq), dk = attn_varlen_rows(job->dk, k0, Tk);
        attn_tensor dv = attn_varlen_rows(job->dv, k0, Tk);
        status = attn_backward_run(&call, &q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, NULL,
                                   error);
    }
    if (status != ATTN_OK) name_sequence(error, b);
    return status;
}

typedef struct sequence_cost {
    int64_t b;
    double cost;
} sequence_cost;

static int by_cost_descending(const void *a, const void *b) {
    const sequence_cost *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? 1 : -1;
    return x->b < y->b ? -1 : (x->b > y->b);
}

/* The narrow sequences of run_sequences, most costly first, each on one thread; the failure
 * kept is that of the lowest-numbered sequence, whichever worker met it. */
typedef struct narrow_region {
    const varlen_job *job;
    const sequence_cost *narrow;
    pthread_mutex_t lock; /* guards the failure below */
    int64_t failed;
    attn_status failed_status;
    attn_error failed_error;
} narrow_region;

static void run_narrow(void *context, int64_t first, int64_t end, int worker) {
    narrow_region *region = context;
    for (int64_t n = first; n < end; ++n) {
        attn_error local;
        const attn_status status = run_sequence(region->job, region->narrow[n].b, 1, &local);
        if (status == ATTN_OK) continue;
        pthread_mutex_lock(&region->lock);
        if (region->narrow[n].b < region->failed) {
            region->failed = region->narrow[n].b;
            region->failed_status = status;
            region->failed_error = local;
        }
        pthread_mutex_unlock(&region->lock);
    }
}

/* Runs every sequence of the job (see the file comment). The wide sequences run first, in
 * order, and the first that fails stops the call; otherwise the narrow ones run and the error
 * reported is that of the lowest-numbered one that failed. */
static attn_status run_sequences(const varlen_job *job, attn_error *error) {
    const int64_t B = job->sequences->batch;
    const int threads = attn_call_thread_count(job->call, 0);
    const int64_t kv_heads = job->k->shape[1];
    sequence_cost *narrow = malloc((size_t)B * sizeof *narrow);
    if (narrow == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "no memory for the sequence plan");
    int64_t narrow_count = 0, failed = B;
    attn_status failed_status = ATTN_OK;
    attn_error failed_error;
    memset(&failed_error, 0, sizeof failed_error);
    for (int64_t b = 0; b < B; ++b) {
        const int64_t Tq = job->sequences->cu_seqlens_q[b + 1] - job->sequences->cu_seqlens_q[b];
        const int64_t Tk = job->sequences->cu_seqlens_k[b + 1] - job->sequences->cu_seqlens_k[b];
        const int64_t items = kv_heads * ((Tq + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM);
        if (threads > 1 && items < 2 * (int64_t)threads) {
            narrow[narrow_count++] = (sequence_cost){b, (double)(Tq + 1) * (double)(Tk + 1)};
            continue;
        }
        attn_error local;
        attn_status status = run_sequence(job, b, threads, &local);
        if (status != ATTN_OK) {
            failed = b, failed_status = status, failed_error = local;
            break;
        }
    }
    if (failed == B && narrow_count > 0) {
        qsort(narrow, (size_t)narrow_count, sizeof *narrow, by_cost_descending);
        narrow_region region = {.job = job, .narrow = narrow, .failed = failed};
        pthread_mutex_init(&region.lock, NULL);
        attn_parallel_for(threads, narrow_count, 1, run_narrow, &region);
        pthread_mutex_destroy(&region.lock);
        failed = region.failed, failed_status = region.failed_status;
        if (failed_status != ATTN_OK) failed_error = region.failed_error;
    }
    free(narrow);
    if (failed_status != ATTN_OK && error != NULL) *error = failed_error;
    return failed_status;
}

/* No output may share memory with an input (q, k, v, the cu_seqlens arrays; in the backward
 * also out, lse, dout) or with another output (call.h). dq == NULL: the forward (out, lse
 * written). */
static attn_status check_aliasing(const attn_call *call, const attn_tensor *q,
                                  const attn_tensor *k, const attn_tensor *v,
                                  const attn_tensor *out, const attn_tensor *lse,
                                  const attn_tensor *dout, const attn_tensor *dq,
                                  const attn_tensor *dk, const attn_tensor *dv,
                                  const attn_varlen *sequences, attn_error *error) {
    const int64_t entries[1] = {sequences->batch + 1};
    const attn_tensor cu_q = attn_tensor_contiguous((void *)sequences->cu_seqlens_q,
                                                    ATTN_DTYPE_I32, 1, entries);
    const attn_tensor cu_k = attn_tensor_contiguous((void *)sequences->cu_seqlens_k,
                                                    ATTN_DTYPE_I32, 1, entries);
    const attn_call_tensor inputs[8] = {
        {q, "q", NULL},     {k, "k", NULL},       {v, "v", NULL},
        {&cu_q, "sequences->cu_seqlens_q", NULL}, {&cu_k, "sequences->cu_seqlens_k", NULL},
        {out, "out", NULL}, {lse, "lse", NULL},   {dout, "dout", NULL}};
    const attn_call_tensor forward_outputs[2] = {{out, "out", NULL}, {lse, "lse", NULL}};
    const attn_call_tensor backward_outputs[3] = {
        {dq, "dq", NULL}, {dk, "dk", NULL}, {dv, "dv", NULL}};
    return dq == NULL
               ? attn_call_check_aliasing(forward_outputs, 2, inputs, 5, &call->options, NULL, error)
               : attn_call_check_aliasing(backward_outputs, 3, inputs, 8, &call->options, NULL,
                                          error);
}

/* Every option checked once, before any sequence runs (each sequence's run checks them again
 * against its own lengths, which can then no longer fail on them): the problem of the
 * longest sequences, with the batch's B for dropout's streams. */
static attn_status check_options_once(const attn_call *call, const attn_tensor *q,
                                      const attn_tensor *k, const attn_tensor *v,
                                      const attn_varlen *sequences, attn_error *error) {
    attn_problem problem;
    memset(&problem, 0, sizeof problem);
    problem.batch = sequences->batch;
    problem.query_length = sequences->max_seqlen_q;
    problem.key_length = sequences->max_seqlen_k;
    problem.query_heads = q->shape[1];
    problem.kv_heads = k->shape[1];
    problem.group_size = q->shape[1] / k->shape[1];
    problem.key_dim = q->shape[2];
    problem.value_dim = v->shape[2];
    problem.scale = attn_effective_scale(&call->options, problem.key_dim);
    return attn_validate_options(&call->options, &problem, error);
}

/* The checks both directions share; fills the call. */
static attn_status begin_varlen(attn_call *call, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_tensor *out,
                                const attn_tensor *lse, const attn_varlen *sequences,
                                const attn_options *options, const attn_execution *execution,
                                attn_error *error) {
    attn_status status = attn_call_begin(call, options, execution, error);
    if (status == ATTN_OK) status = check_varlen_options(&call->options, error);
    const int64_t any[3] = {-1, -1, -1};
    const attn_dtype operand = operand_dtype(q);
    if (status == ATTN_OK) status = check_packed(q, "q", operand, any, "[total_q, Hq, Dk]", 3, error);
    if (status == ATTN_OK) {
        const int64_t expected[3] = {-1, -1, q->shape[2]};
        status = check_packed(k, "k", operand, expected, "[total_k, Hkv, Dk]", 3, error);
    }
    if (status == ATTN_OK) {
        const int64_t expected[3] = {k->shape[0], k->shape[1], -1};
        status = check_packed(v, "v", operand, expected, "[total_k, Hkv, Dv]", 3, error);
    }
    if (status == ATTN_OK && q->shape[1] % k->shape[1] != 0)
        status = attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                           "q.shape[1] (Hq) = %lld: must be a multiple of k.shape[1] (Hkv) = %lld",
                           (long long)q->shape[1], (long long)k->shape[1]);
    if (status == ATTN_OK) {
        const int64_t expected[3] = {q->shape[0], q->shape[1], v->shape[2]};
        status = check_packed(out, "out", operand, expected, "[total_q, Hq, Dv]", 3, error);
    }
    if (status == ATTN_OK && lse != NULL) {
        const int64_t expected[2] = {q->shape[1], q->shape[0]};
        status = check_packed(lse, "lse", ATTN_DTYPE_F32, expected, "[Hq, total_q]", 2, error);
    }
    if (status == ATTN_OK) status = attn_varlen_check(sequences, q->shape[0], k->shape[0], error);
    if (status == ATTN_OK) status = check_options_once(call, q, k, v, sequences, error);
    if (status != ATTN_OK) attn_call_end(call);
    return status;
}

attn_status attn_varlen_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_varlen *sequences, const attn_options *options,
                                attn_tensor *out, attn_tensor *lse,
                                const attn_execution *execution, attn_error *error) {
    attn_call call;
    attn_status status =
        begin_varlen(&call, q, k, v, out, lse, sequences, options, execution, error);
    if (status != ATTN_OK) return status;
    status = check_aliasing(&call, q, k, v, out, lse, NULL, NULL, NULL, NULL, sequences, error);
    if (status == ATTN_OK) {
        const varlen_job job = {&call, sequences, q, k, v, out, lse, NULL, NULL, NULL, NULL, 0};
        status = run_sequences(&job, error);
    }
    attn_call_end(&call);
    return status;
}

attn_status attn_varlen_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                 const attn_tensor *out, const attn_tensor *lse,
                                 const attn_tensor *dout, const attn_varlen *sequences,
                                 const attn_options *options, attn_tensor *dq, attn_tensor *dk,
                                 attn_tensor *dv, const attn_execution *execution,
                                 attn_error *error) {
    attn_call call;
    attn_status status =
        begin_varlen(&call, q, k, v, out, lse, sequences, options, execution, error);
    if (status != ATTN_OK) return status;
    if (lse == NULL)
        status = attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "lse is NULL");
    if (status == ATTN_OK)
        status = check_packed(dout, "dout", q->dtype, out->shape, "[total_q, Hq, Dv]", 3, error);
    if (status == ATTN_OK) status = check_packed(dq, "dq", q->dtype, q->shape, "[total_q, Hq, Dk]", 3, error);
    if (status == ATTN_OK) status = check_packed(dk, "dk", q->dtype, k->shape, "[total_k, Hkv, Dk]", 3, error);
    if (status == ATTN_OK) status = check_packed(dv, "dv", q->dtype, v->shape, "[total_k, Hkv, Dv]", 3, error);
    if (status == ATTN_OK)
        status = check_aliasing(&call, q, k, v, out, lse, dout, dq, dk, dv, sequences, error);
    if (status == ATTN_OK) {
        const varlen_job job = {&call, sequences, q, k, v, out, lse, dout, dq, dk, dv, 1};
        status = run_sequences(&job, error);
    }
    attn_call_end(&call);
    return status;
}
