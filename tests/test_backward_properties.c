/*
 * test_backward_properties.c — invariants of attn_backward that need no second
 * implementation, and its argument checks:
 *   - bitwise identical gradients for 1, 2 and 8 threads, and on a repeated run, also with
 *     several key tiles per KV head (dQ summed from per-chunk partial sums) and under a
 *     memory limit that leaves room for fewer partial sums (same gradients within 1e-5);
 *   - GQA/MQA: the shared KV gradient equals the sum of the gradients of K and V expanded to
 *     one KV head per query head (repeat-interleave);
 *   - D = rowsum(dO * O) = sum_j P_ij dP_ij, seen through its consequence sum_j dS_ij = 0:
 *     every row of d bias sums to zero (with a negative control: a wrong O breaks it), and
 *     softmax's shift invariance gives sum_j dK_j = 0;
 *   - empty rows (all keys masked, padded queries) get exactly zero gradients;
 *   - bad arguments fail with the right status and a message naming the argument.
 */
#include "test_backward_oracle.h"

/* Runs attn_backward on a setup with the given thread count; returns its status. */
static attn_status run_backward(backward_setup *setup, int threads, attn_error *error) {
    attn_execution execution = setup->execution;
    execution.num_threads = threads;
    return attn_backward(&setup->q.view, &setup->k.view, &setup->v.view, &setup->out.view,
                         &setup->lse.view, &setup->dout.view, &setup->options, &setup->dq.view,
                         &setup->dk.view, &setup->dv.view,
                         setup->options.bias ? &setup->dbias.view : NULL, &execution, error);
}

/* A setup with O and LSE filled from the oracle forward. */
static void prepared_setup(backward_setup *setup, const backward_case *config, uint64_t seed) {
    backward_setup_init(setup, config, seed);
    oracle_inputs oracle;
    CHECK(oracle_init(&oracle, setup), "%s: oracle mask context", config->name);
    oracle_fill_forward(&oracle, setup);
    oracle_free(&oracle);
}

static void test_thread_invariance(void) {
    static const backward_case cases[] = {
        {"threads: GQA causal shared bias soft-cap", SIZES(2, 150, 140, 4, 2, 24, 16),
         CAUSAL(BOTTOM_RIGHT), .bias = BIAS_SHARED, .softcap = 5.0f},
        {"threads: padded lengths per-head bias", SIZES(3, 90, 130, 2, 1, 16, 16), .lengths = 1,
         .bias = BIAS_PER_HEAD, .empty_rows_zero = 1},
        {"threads: 3 key tiles, window GQA", SIZES(1, 200, 700, 4, 2, 16, 16), WINDOW(300, 40),
         .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
        {"threads: causal window 50, lengths, 3 chunks", SIZES(2, 600, 600, 2, 1, 8, 8),
         CAUSAL(BOTTOM_RIGHT), WINDOW(50, 0), .lengths = 1, .empty_rows_zero = 1},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; ++t) {
        backward_setup one, other;
        prepared_setup(&one, &cases[t], 300 + t);
        prepared_setup(&other, &cases[t], 300 + t);
        attn_error error;
        CHECK_STATUS(run_backward(&one, 1, &error), ATTN_OK, &error, "%s: 1 thread", cases[t].name);
        const int counts[] = {2, 8, 2};
        for (int c = 0; c < 3; ++c) {
            CHECK_STATUS(run_backward(&other, counts[c], &error), ATTN_OK, &error, "%s: %d threads",
                         cases[t].name, counts[c]);
            const int equal = test_bitwise_equal(&one.dq.view, &other.dq.view) &&
                              test_bitwise_equal(&one.dk.view, &other.dk.view) &&
                              test_bitwise_equal(&one.dv.view, &other.dv.view) &&
                              (one.options.bias == NULL ||
                               test_bitwise_equal(&one.dbias.view, &other.dbias.view));
            CHECK(equal, "%s: %d threads (run %d) bitwise equal to 1 thread", cases[t].name,
                  counts[c], c);
        }
        backward_setup_free(&one);
        backward_setup_free(&other);
    }
}

/* Copies KV head h / group of `grouped` into head h of `expanded` ([B, T, Hq, D]). */
static void expand_heads(const attn_tensor *grouped, attn_tensor *expanded, int64_t group) {
    for (int64_t b = 0; b < grouped->shape[0]; ++b)
        for (int64_t t = 0; t < grouped->shape[1]; ++t)
            for (int64_t h = 0; h < expanded->shape[2]; ++h)
                for (int64_t d = 0; d < grouped->shape[3]; ++d)
                    ((float *)expanded->data)[b * expanded->stride[0] + t * expanded->stride[1] +
                                              h * expanded->stride[2] + d * expanded->stride[3]] =
                        test_get4(grouped, b, t, h / group, d);
}

/* max over (b, t, kv head, d) of |grouped - sum over the group of expanded| / (1 + |.|) */
static double group_sum_error(const attn_tensor *grouped, const attn_tensor *expanded,
                              int64_t group) {
    double worst = 0;
    for (int64_t b = 0; b < grouped->shape[0]; ++b)
        for (int64_t t = 0; t < grouped->shape[1]; ++t)
            for (int64_t g = 0; g < grouped->shape[2]; ++g)
                for (int64_t d = 0; d < grouped->shape[3]; ++d) {
                    double sum = 0;
                    for (int64_t h = g * group; h < (g + 1) * group; ++h)
                        sum += test_get4(expanded, b, t, h, d);
                    const double error = fabs(test_get4(grouped, b, t, g, d) - sum) / (1 + fabs(sum));
                    if (!(error <= worst)) worst = error;
                }
    return worst;
}

static void test_grouped_equals_expanded(void) {
    static const backward_case cases[] = {
        {"GQA 6/2 causal", SIZES(2, 70, 75, 6, 2, 16, 12), CAUSAL(BOTTOM_RIGHT)},
        {"MQA 4/1 window", SIZES(1, 80, 80, 4, 1, 8, 8), WINDOW(10, 0),
         .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; ++t) {
        const backward_case *grouped_case = &cases[t];
        backward_case expanded_case = *grouped_case;
        expanded_case.Hkv = grouped_case->Hq;
        backward_setup grouped, expanded;
        prepared_setup(&grouped, grouped_case, 400 + t);
        backward_setup_init(&expanded, &expanded_case, 400 + t);
        const int64_t group = grouped_case->Hq / grouped_case->Hkv;
        /* Same Q, dO, O, LSE; K and V repeat-interleaved to one head per query head. */
        memcpy(expanded.q.allocation, grouped.q.allocation, sizeof(float) * grouped.q.allocation_floats);
        memcpy(expanded.dout.allocation, grouped.dout.allocation,
               sizeof(float) * grouped.dout.allocation_floats);
        memcpy(expanded.out.allocation, grouped.out.allocation,
               sizeof(float) * grouped.out.allocation_floats);
        memcpy(expanded.lse.allocation, grouped.lse.allocation,
               sizeof(float) * grouped.lse.allocation_floats);
        expand_heads(&grouped.k.view, &expanded.k.view, group);
        expand_heads(&grouped.v.view, &expanded.v.view, group);
        attn_error error;
        CHECK_STATUS(run_backward(&grouped, 2, &error), ATTN_OK, &error, "%s", grouped_case->name);
        CHECK_STATUS(run_backward(&expanded, 2, &error), ATTN_OK, &error, "%s expanded",
                     grouped_case->name);
        const double error_k = group_sum_error(&grouped.dk.view, &expanded.dk.view, group);
        const double error_v = group_sum_error(&grouped.dv.view, &expanded.dv.view, group);
        CHECK(error_k <= 1e-5, "%s: dK = group sum of expanded dK, error %.3g", grouped_case->name,
              error_k);
        CHECK(error_v <= 1e-5, "%s: dV = group sum of expanded dV, error %.3g", grouped_case->name,
              error_v);
        CHECK(test_bitwise_equal(&grouped.dq.view, &expanded.dq.view),
              "%s: dQ equal to the expanded run's", grouped_case->name);
        backward_setup_free(&grouped);
        backward_setup_free(&expanded);
    }
}

/* max over the lines along `axis` of a rank-4 view of |sum of the line| / (1 + sum of |line|):
 * axis 3 of dbias [B][H][Tq][Tk] (each row of dbias sums to 0), axis 1 of dK [B][Tk][Hkv][Dk]
 * (the keys' gradients sum to 0). Lines are visited in index order of the other three axes. */
static double axis_sum_error(const attn_tensor *t, int axis) {
    int64_t outer[4];
    for (int a = 0; a < 4; ++a) outer[a] = a == axis ? 1 : t->shape[a];
    double worst = 0;
    for (int64_t i0 = 0; i0 < outer[0]; ++i0)
        for (int64_t i1 = 0; i1 < outer[1]; ++i1)
            for (int64_t i2 = 0; i2 < outer[2]; ++i2)
                for (int64_t i3 = 0; i3 < outer[3]; ++i3) {
                    int64_t at[4] = {i0, i1, i2, i3};
                    double sum = 0, magnitude = 0;
                    for (int64_t j = 0; j < t->shape[axis]; ++j) {
                        at[axis] = j;
                        const float x = test_get4(t, at[0], at[1], at[2], at[3]);
                        sum += x;
                        magnitude += fabs(x);
                    }
                    const double error = fabs(sum) / (1 + magnitude);
                    if (!(error <= worst)) worst = error;
                }
    return worst;
}

static double bias_row_sum_error(const attn_tensor *dbias) { return axis_sum_error(dbias, 3); }

static double key_sum_error(const attn_tensor *dk) { return axis_sum_error(dk, 1); }

static void test_row_dot_identity(void) {
    const backward_case config = {"identity: causal GQA full bias", SIZES(2, 70, 66, 4, 2, 16, 8),
                                  CAUSAL(BOTTOM_RIGHT), .bias = BIAS_FULL};
    backward_setup setup;
    prepared_setup(&setup, &config, 500);
    attn_error error;
    CHECK_STATUS(run_backward(&setup, 2, &error), ATTN_OK, &error, "%s", config.name);
    const double bias_error = bias_row_sum_error(&setup.dbias.view);
    const double key_error = key_sum_error(&setup.dk.view);
    CHECK(bias_error <= 1e-6, "%s: rows of d bias sum to 0, error %.3g", config.name, bias_error);
    CHECK(key_error <= 1e-6, "%s: dK sums to 0 over keys, error %.3g", config.name, key_error);

    /* Negative control: an O that is not the forward's output breaks D = sum_j P dP. */
    for (int64_t e = 0; e < setup.out.allocation_floats; ++e) setup.out.allocation[e] *= 1.1f;
    CHECK_STATUS(run_backward(&setup, 2, &error), ATTN_OK, &error, "%s: wrong O", config.name);
    const double broken = bias_row_sum_error(&setup.dbias.view);
    CHECK(broken > 1e-3, "%s: negative control, a wrong O gives row sums %.3g", config.name,
          broken);
    backward_setup_free(&setup);
}

/* 1 if every element of a rank-4 view is finite. */
static int all_finite(const attn_tensor *t) {
    for (int64_t a = 0; a < t->shape[0]; ++a)
        for (int64_t b = 0; b < t->shape[1]; ++b)
            for (int64_t c = 0; c < t->shape[2]; ++c)
                for (int64_t d = 0; d < t->shape[3]; ++d)
                    if (!isfinite(test_get4(t, a, b, c, d))) return 0;
    return 1;
}

static void test_empty_rows(void) {
    const backward_case config = {"empty rows", SIZES(2, 20, 20, 2, 1, 8, 8), .bool_mask = 1,
                                  .lengths = 1, .empty_rows_zero = 1};
    backward_setup setup;
    backward_setup_init(&setup, &config, 600);
    /* Batch 0, every head: rows 3 and 11 see no key (the mask broadcasts over heads). */
    uint8_t *mask = (uint8_t *)setup.mask.allocation;
    for (int64_t j = 0; j < config.Tk; ++j) mask[3 * config.Tk + j] = mask[11 * config.Tk + j] = 0;
    oracle_inputs oracle;
    CHECK(oracle_init(&oracle, &setup), "empty rows: oracle");
    oracle_fill_forward(&oracle, &setup);
    oracle_free(&oracle);
    attn_error error;
    CHECK_STATUS(run_backward(&setup, 2, &error), ATTN_OK, &error, "empty rows");
    int rows_checked = 0, all_zero = 1, dq_finite = 1;
    for (int64_t b = 0; b < config.B; ++b)
        for (int64_t h = 0; h < config.Hq; ++h)
            for (int64_t i = 0; i < config.Tq; ++i) {
                const int empty = (b == 0 && (i == 3 || i == 11)) || i >= setup.query_lengths[b];
                for (int64_t d = 0; d < config.Dk; ++d) {
                    const float value = test_get4(&setup.dq.view, b, i, h, d);
                    if (!isfinite(value)) dq_finite = 0;
                    if (empty && value != 0.0f) all_zero = 0;
                }
                rows_checked += empty;
            }
    CHECK(rows_checked >= 4, "empty rows: %d empty rows exist", rows_checked);
    CHECK(all_zero, "empty rows: their dQ is exactly 0");
    CHECK(dq_finite, "empty rows: dQ finite everywhere");
    CHECK(all_finite(&setup.dk.view) && all_finite(&setup.dv.view), "empty rows: dK, dV finite");
    backward_setup_free(&setup);
}

/* ---- bad arguments ---- */
typedef enum mutation {
    NULL_LSE, NULL_OUT, NULL_DOUT, WRONG_DOUT_DIM, WRONG_DQ_HEADS, WRONG_DK_LENGTH, WRONG_DV_DIM,
    DV_DTYPE, DQ_BROADCAST, DBIAS_WITHOUT_BIAS, DBIAS_WRONG_SHAPE, BAD_SOFTCAP, WRONG_LSE_SHAPE,
    TINY_MEMORY_LIMIT
} mutation;

typedef struct bad_case {
    const char *name;
    mutation change;
    attn_status expected;
    const char *message_names; /* must appear in the error message */
} bad_case;

static void test_bad_arguments(void) {
    static const bad_case cases[] = {
        {"lse NULL", NULL_LSE, ATTN_ERROR_NULL_ARGUMENT, "lse"},
        {"out NULL", NULL_OUT, ATTN_ERROR_NULL_ARGUMENT, "out"},
        {"dout NULL", NULL_DOUT, ATTN_ERROR_NULL_ARGUMENT, "dout"},
        {"dout wrong Dv", WRONG_DOUT_DIM, ATTN_ERROR_SHAPE_MISMATCH, "dout.shape[3]"},
        {"dq wrong Hq", WRONG_DQ_HEADS, ATTN_ERROR_SHAPE_MISMATCH, "dq.shape[2]"},
        {"dk wrong Tk", WRONG_DK_LENGTH, ATTN_ERROR_SHAPE_MISMATCH, "dk.shape[1]"},
        {"dv wrong Dv", WRONG_DV_DIM, ATTN_ERROR_SHAPE_MISMATCH, "dv.shape[3]"},
        {"dv dtype", DV_DTYPE, ATTN_ERROR_INVALID_ARGUMENT, "dv.dtype"},
        {"dq stride 0", DQ_BROADCAST, ATTN_ERROR_INVALID_ARGUMENT, "dq.stride[1]"},
        {"dbias without bias", DBIAS_WITHOUT_BIAS, ATTN_ERROR_INVALID_ARGUMENT, "dbias"},
        {"dbias wrong shape", DBIAS_WRONG_SHAPE, ATTN_ERROR_SHAPE_MISMATCH, "dbias.shape[3]"},
        {"negative soft-cap", BAD_SOFTCAP, ATTN_ERROR_INVALID_ARGUMENT, "softcap"},
        {"lse wrong shape", WRONG_LSE_SHAPE, ATTN_ERROR_SHAPE_MISMATCH, "lse"},
        {"memory limit", TINY_MEMORY_LIMIT, ATTN_ERROR_MEMORY_LIMIT, "memory_limit_bytes"},
    };
    const backward_case config = {"bad", SIZES(2, 9, 10, 2, 1, 4, 3), .bias = BIAS_FULL};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; ++t) {
        for (int reference = 0; reference < 2; ++reference) {
            if (reference && cases[t].change == TINY_MEMORY_LIMIT) continue; /* flash only */
            backward_setup setup;
            prepared_setup(&setup, &config, 700);
            attn_tensor q = setup.q.view, k = setup.k.view, v = setup.v.view;
            attn_tensor out = setup.out.view, lse = setup.lse.view, dout = setup.dout.view;
            attn_tensor dq = setup.dq.view, dk = setup.dk.view, dv = setup.dv.view;
            attn_tensor dbias = setup.dbias.view;
            attn_tensor *out_pointer = &out, *lse_pointer = &lse, *dout_pointer = &dout;
            attn_options options = setup.options;
            attn_execution execution = setup.execution;
            switch (cases[t].change) {
            case NULL_LSE: lse_pointer = NULL; break;
            case NULL_OUT: out_pointer = NULL; break;
            case NULL_DOUT: dout_pointer = NULL; break;
            case WRONG_DOUT_DIM: dout.shape[3] = 2; break;
            case WRONG_DQ_HEADS: dq.shape[2] = 1; break;
            case WRONG_DK_LENGTH: dk.shape[1] = 9; break;
            case WRONG_DV_DIM: dv.shape[3] = 4; dv.stride[2] = 4; break;
            case DV_DTYPE: dv.dtype = ATTN_DTYPE_F64; break;
            case DQ_BROADCAST: dq.stride[1] = 0; break;
            case DBIAS_WITHOUT_BIAS: options.bias = NULL; break;
            case DBIAS_WRONG_SHAPE: dbias.shape[3] = 9; break;
            case BAD_SOFTCAP: options.softcap = -1.0f; break;
            case WRONG_LSE_SHAPE: lse.shape[2] = 8; break;
            case TINY_MEMORY_LIMIT: execution.memory_limit_bytes = 100; break;
            }
            attn_error error = {ATTN_OK, ""};
            attn_status status =
                reference ? attn_reference_backward(&q, &k, &v, out_pointer, lse_pointer,
                                                    dout_pointer, &options, &dq, &dk, &dv, &dbias,
                                                    &error)
                          : attn_backward(&q, &k, &v, out_pointer, lse_pointer, dout_pointer,
                                          &options, &dq, &dk, &dv, &dbias, &execution, &error);
            CHECK_STATUS(status, cases[t].expected, &error, "%s (%s)", cases[t].name,
                         reference ? "reference" : "flash");
            CHECK(strstr(error.message, cases[t].message_names) != NULL,
                  "%s (%s): message '%s' names '%s'", cases[t].name,
                  reference ? "reference" : "flash", error.message, cases[t].message_names);
            backward_setup_free(&setup);
        }
    }
}

/* A memory limit that fits the workspaces but only one dQ partial sum (see flash_backward.c:
 * partial sums may take at most half the limit; here one takes 0.62 MB, two 1.24 MB, of a
 * 2 MB limit): same gradients within rounding, and still identical for any thread count.
 * 600 queries x 700 keys, 3 key tiles of 256: 3 chunks without the limit. */
static void test_memory_limited_chunks(void) {
    static const backward_case config = {"memory-limited chunks", SIZES(1, 600, 700, 4, 2, 64, 64),
                                         CAUSAL(BOTTOM_RIGHT)};
    backward_setup unlimited, limited, other;
    prepared_setup(&unlimited, &config, 77);
    prepared_setup(&limited, &config, 77);
    prepared_setup(&other, &config, 77);
    limited.execution.memory_limit_bytes = other.execution.memory_limit_bytes = 2000000;
    attn_error error;
    CHECK_STATUS(run_backward(&unlimited, 2, &error), ATTN_OK, &error, "%s: unlimited", config.name);
    CHECK_STATUS(run_backward(&limited, 1, &error), ATTN_OK, &error, "%s: 1 thread", config.name);
    CHECK_STATUS(run_backward(&other, 2, &error), ATTN_OK, &error, "%s: 2 threads", config.name);
    const double difference = test_max_relative_error(&limited.dq.view, &unlimited.dq.view);
    CHECK(difference <= 1e-5, "%s: dQ within %.3g of the unlimited run", config.name, difference);
    CHECK(test_bitwise_equal(&limited.dk.view, &unlimited.dk.view) &&
              test_bitwise_equal(&limited.dv.view, &unlimited.dv.view),
          "%s: dK and dV do not depend on the chunks", config.name);
    CHECK(test_bitwise_equal(&limited.dq.view, &other.dq.view),
          "%s: 1 and 2 threads bitwise equal", config.name);
    backward_setup_free(&unlimited);
    backward_setup_free(&limited);
    backward_setup_free(&other);
}

int main(void) {
    test_thread_invariance();
    test_memory_limited_chunks();
    test_grouped_equals_expanded();
    test_row_dot_identity();
    test_empty_rows();
    test_bad_arguments();
    return test_finish();
}
