/*
 * ring_call.c — setting up one ring call: checks this rank's tensors and options, duplicates
 * the communicator (so MPI errors return instead of aborting and our messages never mix with
 * the caller's), checks that every rank agrees on sizes and options with rank 0, and the
 * status agreement (MPI_Allreduce MAXLOC + MPI_Bcast of the message) that makes a bad input on
 * one rank an error on every rank instead of a hang.
 */
#include "ring_internal.h"

#include "../call/call.h"
#include "../core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

attn_status ring_agree(const ring_call *call, attn_status local_status,
                       const attn_error *local_error, attn_error *error) {
    struct { int status; int rank; } mine = {(int)local_status, call->rank}, agreed;
    if (MPI_Allreduce(&mine, &agreed, 1, MPI_2INT, MPI_MAXLOC, call->comm) != MPI_SUCCESS)
        return attn_fail(error, ATTN_ERROR_COMMUNICATION,
                         "rank %d: MPI_Allreduce of the call status failed", call->rank);
    if (agreed.status == ATTN_OK) return ATTN_OK;
    char message[ATTN_ERROR_MESSAGE_CAPACITY];
    memset(message, 0, sizeof message);
    if (agreed.rank == call->rank)
        snprintf(message, sizeof message, "rank %d: %.480s", call->rank,
                 local_error != NULL ? local_error->message : "(no message)");
    if (MPI_Bcast(message, (int)sizeof message, MPI_CHAR, agreed.rank, call->comm) != MPI_SUCCESS)
        return attn_fail(error, ATTN_ERROR_COMMUNICATION,
                         "rank %d: MPI_Bcast of rank %d's error message failed", call->rank,
                         agreed.rank);
    message[sizeof message - 1] = '\0';
    return attn_fail(error, (attn_status)agreed.status, "%s", message);
}

/* Options that refer to global token indices or replace the ring's own positions. */
static attn_status check_supported_options(const attn_options *options, attn_error *error) {
    struct { const void *set; const char *name; } refused[] = {
        {options->mask, "options.mask"},
        {options->bias, "options.bias"},
        {options->query_lengths, "options.query_lengths"},
        {options->key_lengths, "options.key_lengths"},
        {options->query_positions, "options.query_positions"},
        {options->key_positions, "options.key_positions"},
        {options->global_tokens, "options.global_tokens"},
        {options->block_layout, "options.block_layout"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i)
        if (refused[i].set != NULL)
            return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                             "%s is set: ring attention supports causal, window, ALiBi and "
                             "soft-capping only (the ring sets positions itself)",
                             refused[i].name);
    if (options->pattern != ATTN_PATTERN_NONE)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                         "options.pattern = %d: sparse patterns are not supported by the ring",
                         (int)options->pattern);
    if (options->window_left < -1 || options->window_right < -1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.window_left = %lld, window_right = %lld: must be >= -1",
                         (long long)options->window_left, (long long)options->window_right);
    bool windowed = options->window_left >= 0 || options->window_right >= 0;
    if ((options->causal || windowed || options->alibi) && options->alignment != ATTN_ALIGN_BOTTOM_RIGHT &&
        options->alignment != ATTN_ALIGN_TOP_LEFT)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "options.alignment = %d: causal, window and ALiBi need a named alignment "
                         "(both agree for the ring's self-attention)",
                         (int)options->alignment);
    return ATTN_OK;
}

/* Checks one rank-4 [B, n, H, D] tensor's shape against expected values (-1 = any). */
static attn_status check_shape4(const attn_tensor *t, const char *name, attn_dtype dtype,
                                int64_t b, int64_t n, int64_t h, int64_t d, attn_error *error) {
    attn_status status = attn_check_tensor(t, name, dtype, 4, error);
    if (status != ATTN_OK) return status;
    const int64_t expected[4] = {b, n, h, d};
    const char *names[4] = {"B", "local tokens", "heads", "head dim"};
    for (int dim = 0; dim < 4; ++dim)
        if (expected[dim] >= 0 && t->shape[dim] != expected[dim])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "%s.shape[%d] (%s) = %lld: expected %lld", name, dim, names[dim],
                             (long long)t->shape[dim], (long long)expected[dim]);
    return ATTN_OK;
}

/* Everything that can be checked on this rank alone. Fills the sizes of `call`. */
static attn_status check_local(ring_call *call, const ring_tensors *tensors,
                               const attn_ring_layout *layout, attn_error *error) {
    attn_status status;
    if (layout == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "layout is NULL");
    if (layout->rank_count != call->rank_count)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "layout.rank_count = %d: the communicator has %d ranks",
                         layout->rank_count, call->rank_count);
    if (call->rank_count > RING_MAX_RANKS)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED, "communicator size = %d: at most %d ranks",
                         call->rank_count, RING_MAX_RANKS);
    status = attn_ring_layout_local_length(layout, call->rank, &call->local_length, error);
    if (status != ATTN_OK) return status;
    call->layout = *layout;
    if ((status = check_supported_options(&call->prepared.options, error)) != ATTN_OK) return status;

    /* q, k, v, out (and dout, dq, dk, dv) of one dtype: F32, BF16 or F16; lse F32. */
    call->dtype = tensors->q != NULL &&
                          (tensors->q->dtype == ATTN_DTYPE_BF16 || tensors->q->dtype == ATTN_DTYPE_F16)
                      ? tensors->q->dtype
                      : ATTN_DTYPE_F32;
    const attn_dtype dtype = call->dtype;
    if ((status = attn_check_tensor(tensors->q, "q", dtype, 4, error)) != ATTN_OK)
        return status;
    const attn_tensor *q = tensors->q;
    int64_t B = q->shape[0], n = call->local_length, Hq = q->shape[2], Dk = q->shape[3];
    if (q->shape[1] != n)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "q.shape[1] = %lld: rank %d holds %lld of the %lld tokens under the %s "
                         "layout",
                         (long long)q->shape[1], call->rank, (long long)n,
                         (long long)layout->sequence_length, attn_ring_layout_name(layout->kind));
    if ((status = check_shape4(tensors->k, "k", dtype, B, n, -1, Dk, error)) != ATTN_OK) return status;
    int64_t Hkv = tensors->k->shape[2];
    if (Hq % Hkv != 0)
        return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                         "k.shape[2] (Hkv) = %lld: must divide q.shape[2] (Hq) = %lld",
                         (long long)Hkv, (long long)Hq);
    if ((status = check_shape4(tensors->v, "v", dtype, B, n, Hkv, -1, error)) != ATTN_OK) return status;
    int64_t Dv = tensors->v->shape[3];
    call->batch = B;
    call->query_heads = Hq;
    call->kv_heads = Hkv;
    call->key_dim = Dk;
    call->value_dim = Dv;

    /* The output (forward) or the forward's output (backward): the query rows' shapes. */
    if ((status = check_shape4(tensors->out, "out", dtype, B, n, Hq, Dv, error)) != ATTN_OK) return status;
    if (tensors->backward && tensors->lse == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "lse is NULL (the backward needs it)");
    if (tensors->lse != NULL) {
        if ((status = attn_check_tensor(tensors->lse, "lse", ATTN_DTYPE_F32, 3, error)) != ATTN_OK)
            return status;
        const int64_t expected[3] = {B, Hq, n};
        for (int dim = 0; dim < 3; ++dim)
            if (tensors->lse->shape[dim] != expected[dim])
                return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                                 "lse.shape[%d] = %lld: expected %lld ([B, Hq, local tokens])",
                                 dim, (long long)tensors->lse->shape[dim],
                                 (long long)expected[dim]);
    }
    if (tensors->backward) {
        if ((status = check_shape4(tensors->dout, "dout", dtype, B, n, Hq, Dv, error)) != ATTN_OK ||
            (status = check_shape4(tensors->dq, "dq", dtype, B, n, Hq, Dk, error)) != ATTN_OK ||
            (status = check_shape4(tensors->dk, "dk", dtype, B, n, Hkv, Dk, error)) != ATTN_OK ||
            (status = check_shape4(tensors->dv, "dv", dtype, B, n, Hkv, Dv, error)) != ATTN_OK)
            return status;
    }
    /* No output may share memory with an input or another output (call.h). */
    const attn_tensor *q_in = tensors->q, *k_in = tensors->k, *v_in = tensors->v;
    status = tensors->backward
                 ? attn_check_backward_aliasing(q_in, k_in, v_in, tensors->out, tensors->lse,
                                                tensors->dout, tensors->dq, tensors->dk,
                                                tensors->dv, NULL, &call->prepared.options, NULL,
                                                error)
                 : attn_check_forward_aliasing(q_in, k_in, v_in, tensors->out, tensors->lse,
                                               &call->prepared.options, NULL, error);
    if (status != ATTN_OK) return status;
    /* The largest block that can visit, and the buffer sizes it implies, must fit. */
    int64_t max_length = 0;
    for (int owner = 0; owner < call->rank_count; ++owner) {
        int64_t length = ring_local_length_of(call, owner);
        if (length > max_length) max_length = length;
    }
    call->max_local_length = max_length;
    int64_t floats;
    if (!attn_mul_i64(B, max_length, &floats) || !attn_mul_i64(floats, Hkv > Hq ? Hkv : Hq, &floats) ||
        !attn_mul_i64(floats, 2 * (Dk > Dv ? Dk : Dv) + 2, &floats) ||
        (uint64_t)floats > SIZE_MAX / (8 * sizeof(float)))
        return attn_fail(error, ATTN_ERROR_OVERFLOW,
                         "buffers for a block of %lld tokens x B = %lld x heads x dims overflow",
                         (long long)max_length, (long long)B);
    call->local_positions = malloc((size_t)n * sizeof(int64_t));
    call->block_positions = malloc((size_t)max_length * sizeof(int64_t));
    if (call->local_positions == NULL || call->block_positions == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "positions: %lld int64 values",
                         (long long)(n + max_length));
    attn_ring_layout_positions(layout, call->rank, call->local_positions, NULL);
    return ATTN_OK;
}

/* The values every rank must agree on, compared with rank 0's. */
enum { DESCRIPTOR_FIELDS = 17 };
static const char *const descriptor_names[DESCRIPTOR_FIELDS] = {
    "B", "Hq", "Hkv", "Dk", "Dv", "q.dtype", "layout.sequence_length", "layout.kind",
    "options.causal", "options.window_left", "options.window_right", "options.alignment",
    "options.alibi", "options.empty_rows", "options.scale (bits)", "options.softcap (bits)",
    "options.sink_tokens"};

static void describe(const ring_call *call, int64_t descriptor[DESCRIPTOR_FIELDS]) {
    const attn_options *o = &call->prepared.options;
    uint32_t scale_bits = 0, softcap_bits = 0;
    float scale = o->custom_scale ? o->scale : 0.0f;
    memcpy(&scale_bits, &scale, sizeof scale_bits);
    memcpy(&softcap_bits, &o->softcap, sizeof softcap_bits);
    int64_t values[DESCRIPTOR_FIELDS] = {
        call->batch, call->query_heads, call->kv_heads, call->key_dim, call->value_dim,
        call->dtype, call->layout.sequence_length, call->layout.kind, o->causal != 0, o->window_left,
        o->window_right, o->alignment, o->alibi != 0, o->empty_rows, scale_bits, softcap_bits,
        o->sink_tokens};
    memcpy(descriptor, values, sizeof values);
}

/* Zeroes a caller's stats (NULL allowed), keeping its caller-owned step_sources pointer. */
static void ring_stats_reset(attn_ring_stats *stats) {
    if (stats == NULL) return;
    int *step_sources = stats->step_sources;
    memset(stats, 0, sizeof *stats);
    stats->step_sources = step_sources;
}

attn_status ring_call_begin(ring_call *call, MPI_Comm comm, const ring_tensors *tensors,
                            const attn_options *options, const attn_ring_layout *layout,
                            const attn_execution *execution, attn_ring_stats *stats,
                            attn_error *error) {
    ring_stats_reset(stats);
    memset(call, 0, sizeof *call);
    call->start = MPI_Wtime();
    call->comm = MPI_COMM_NULL;
    call->unit = MPI_DATATYPE_NULL;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
        return attn_fail(error, ATTN_ERROR_COMMUNICATION, "MPI is not initialized: call MPI_Init");
    if (comm == MPI_COMM_NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "comm = MPI_COMM_NULL");
    if (MPI_Comm_dup(comm, &call->comm) != MPI_SUCCESS) {
        call->comm = MPI_COMM_NULL;
        return attn_fail(error, ATTN_ERROR_COMMUNICATION, "MPI_Comm_dup(comm) failed");
    }
    MPI_Comm_set_errhandler(call->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(call->comm, &call->rank);
    MPI_Comm_size(call->comm, &call->rank_count);
    if (MPI_Type_contiguous(RING_UNIT_FLOATS, MPI_FLOAT, &call->unit) != MPI_SUCCESS ||
        MPI_Type_commit(&call->unit) != MPI_SUCCESS) {
        call->unit = MPI_DATATYPE_NULL;
        ring_call_end(call);
        return attn_fail(error, ATTN_ERROR_COMMUNICATION, "MPI_Type_contiguous failed");
    }

    attn_error local_error = {ATTN_OK, ""};
    attn_status status = attn_call_begin(&call->prepared, options, execution, &local_error);
    /* Each block would draw its dropout mask at block-local key indices: refused. */
    if (status == ATTN_OK && call->prepared.options.dropout_p != 0.0f)
        status = attn_fail(&local_error, ATTN_ERROR_INVALID_ARGUMENT,
                           "options.dropout_p = %.9g: ring attention applies no dropout "
                           "(attn_forward, attn_backward and varlen do)",
                           (double)call->prepared.options.dropout_p);
    if (status == ATTN_OK) status = check_local(call, tensors, layout, &local_error);
    status = ring_agree(call, status, &local_error, error);
    if (status != ATTN_OK) {
        ring_call_end(call);
        return status;
    }

    /* Every rank compares its sizes and options with rank 0's. */
    int64_t mine[DESCRIPTOR_FIELDS], root[DESCRIPTOR_FIELDS];
    describe(call, mine);
    memcpy(root, mine, sizeof root);
    status = ATTN_OK;
    if (MPI_Bcast(root, DESCRIPTOR_FIELDS, MPI_INT64_T, 0, call->comm) != MPI_SUCCESS)
        status = attn_fail(&local_error, ATTN_ERROR_COMMUNICATION, "MPI_Bcast of sizes failed");
    for (int field = 0; status == ATTN_OK && field < DESCRIPTOR_FIELDS; ++field)
        if (mine[field] != root[field])
            status = attn_fail(&local_error, ATTN_ERROR_SHAPE_MISMATCH,
                               "%s = %lld differs from rank 0's %lld (every rank must pass the "
                               "same sizes, layout and options)",
                               descriptor_names[field], (long long)mine[field],
                               (long long)root[field]);
    status = ring_agree(call, status, &local_error, error);
    if (status != ATTN_OK) ring_call_end(call);
    return status;
}

void ring_call_end(ring_call *call) {
    free(call->local_positions);
    free(call->block_positions);
    call->local_positions = call->block_positions = NULL;
    attn_call_end(&call->prepared);
    if (call->unit != MPI_DATATYPE_NULL) MPI_Type_free(&call->unit);
    if (call->comm != MPI_COMM_NULL) MPI_Comm_free(&call->comm);
}

void ring_call_finish(ring_call *call, attn_ring_stats *stats) {
    ring_call_end(call);
    if (stats != NULL) stats->total_seconds = MPI_Wtime() - call->start;
}

int64_t ring_local_length_of(const ring_call *call, int owner) {
    int64_t length = 0;
    attn_ring_layout_local_length(&call->layout, owner, &length, NULL);
    return length;
}

void ring_load_block_positions(ring_call *call, int owner) {
    attn_ring_layout_positions(&call->layout, owner, call->block_positions, NULL);
}

