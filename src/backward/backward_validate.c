/*
 * backward_validate.c — argument checks of a backward call (attn_backward and
 * attn_reference_backward share them): the forward's checks through attn_validate_call, then
 * the shapes of dout and of the gradient outputs. The flash backward also takes BF16 / F16
 * tensors (all of one dtype; lse and dbias F32): attn_backward_validate_typed.
 */
#include "backward.h"

#include "../core/internal.h"
#include "../core/overlap.h"

/* Checks that `t` is a rank-4 view of `dtype` and shape {d0, d1, d2, d3}; names each
 * dimension. */
static attn_status check_shape4(const attn_tensor *t, const char *name, attn_dtype dtype,
                                const int64_t expected[4], const char *const dimension_names[4],
                                attn_error *error) {
    attn_status status = attn_check_tensor(t, name, dtype, 4, error);
    if (status != ATTN_OK) return status;
    for (int d = 0; d < 4; ++d)
        if (t->shape[d] != expected[d])
            return attn_fail(error, ATTN_ERROR_SHAPE_MISMATCH,
                             "%s.shape[%d] (%s) = %lld: expected %lld", name, d,
                             dimension_names[d], (long long)t->shape[d], (long long)expected[d]);
    return ATTN_OK;
}

/* attn_backward_validate with q, k, v, out, dout, dq, dk, dv of one dtype: F32, or with
 * `typed` the dtype of q when it is BF16 or F16. */
static attn_status validate(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_tensor *out, const attn_tensor *lse,
                            const attn_tensor *dout, const attn_options *options,
                            const attn_tensor *dq, const attn_tensor *dk, const attn_tensor *dv,
                            const attn_tensor *dbias, attn_problem *problem, bool typed,
                            attn_error *error) {
    if (options == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "options is NULL");
    if (out == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                         "out is NULL: the backward needs the forward's output");
    if (lse == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                         "lse is NULL: the backward needs the forward's log-sum-exp");
    attn_status status = typed ? attn_validate_call_typed(q, k, v, options, out, lse, problem, error)
                               : attn_validate_call(q, k, v, options, out, lse, problem, error);
    if (status != ATTN_OK) return status;
    const attn_dtype dtype = q->dtype; /* k, v, out agree (checked above) */

    const int64_t B = problem->batch, Tq = problem->query_length, Tk = problem->key_length;
    const int64_t Hq = problem->query_heads, Hkv = problem->kv_heads;
    const int64_t Dk = problem->key_dim, Dv = problem->value_dim;
    static const char *const query_names[4] = {"B", "Tq", "Hq", "Dv"};
    static const char *const query_key_names[4] = {"B", "Tq", "Hq", "Dk"};
    static const char *const key_names[4] = {"B", "Tk", "Hkv", "Dk"};
    static const char *const value_names[4] = {"B", "Tk", "Hkv", "Dv"};

    const int64_t dout_shape[4] = {B, Tq, Hq, Dv};
    const int64_t dq_shape[4] = {B, Tq, Hq, Dk};
    const int64_t dk_shape[4] = {B, Tk, Hkv, Dk};
    const int64_t dv_shape[4] = {B, Tk, Hkv, Dv};
    if ((status = check_shape4(dout, "dout", dtype, dout_shape, query_names, error)) != ATTN_OK ||
        (status = check_shape4(dq, "dq", dtype, dq_shape, query_key_names, error)) != ATTN_OK ||
        (status = check_shape4(dk, "dk", dtype, dk_shape, key_names, error)) != ATTN_OK ||
        (status = check_shape4(dv, "dv", dtype, dv_shape, value_names, error)) != ATTN_OK ||
        (status = attn_check_output_layout(dq, "dq", error)) != ATTN_OK ||
        (status = attn_check_output_layout(dk, "dk", error)) != ATTN_OK ||
        (status = attn_check_output_layout(dv, "dv", error)) != ATTN_OK)
        return status;

    if (dbias != NULL) {
        if (options->bias == NULL)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "dbias is given but options.bias is NULL: there is no bias to "
                             "differentiate");
        static const char *const bias_names[4] = {"B|1", "Hq|1", "Tq", "Tk"};
        if ((status = check_shape4(dbias, "dbias", ATTN_DTYPE_F32, options->bias->shape, bias_names, error)) !=
                ATTN_OK ||
            (status = attn_check_output_layout(dbias, "dbias", error)) != ATTN_OK)
            return status;
    }
    return ATTN_OK;
}

attn_status attn_backward_validate(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_tensor *out,
                                   const attn_tensor *lse, const attn_tensor *dout,
                                   const attn_options *options, const attn_tensor *dq,
                                   const attn_tensor *dk, const attn_tensor *dv,
                                   const attn_tensor *dbias, bool allow_16bit,
                                   attn_problem *problem, attn_error *error) {
    return validate(q, k, v, out, lse, dout, options, dq, dk, dv, dbias, problem, allow_16bit,
                    error);
}
