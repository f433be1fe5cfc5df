/*
 * test_positional_sinusoidal.c — attn_sinusoidal_encoding against the double formula of
 * Vaswani et al. §3.5 (PE(0,2i) = 0, PE(0,2i+1) = 1, offsets, odd dims) and its errors; and
 * attn_embedding_lookup / attn_embedding_backward against explicit gathers and scatter-adds.
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_sinusoidal(void) {
    const int64_t cases[][3] = {/* first_position, count, dim */
                                {0, 1, 2}, {0, 16, 64}, {5, 7, 9}, {1000, 3, 512}, {0, 4, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        int64_t first = cases[c][0], count = cases[c][1], dim = cases[c][2];
        float *pe = malloc((size_t)(count * dim) * sizeof(float));
        attn_error error;
        CHECK_STATUS(attn_sinusoidal_encoding(first, count, dim, pe, &error), ATTN_OK, &error,
                     "case %zu", c);
        double worst = 0.0;
        for (int64_t p = 0; p < count; ++p)
            for (int64_t i = 0; i < dim; ++i) {
                double angle = (double)(first + p) / pow(10000.0, (double)(i - i % 2) / (double)dim);
                double expected = i % 2 == 0 ? sin(angle) : cos(angle);
                double e = fabs(pe[p * dim + i] - expected);
                if (e > worst) worst = e;
            }
        CHECK(worst < 1e-7, "case %zu: max error %.3g vs double formula", c, worst);
        if (first == 0) {
            int exact = 1;
            for (int64_t i = 0; i < dim; ++i)
                if (pe[i] != (i % 2 == 0 ? 0.0f : 1.0f)) exact = 0;
            CHECK(exact, "case %zu: PE(0, 2i) = 0 and PE(0, 2i+1) = 1 exactly", c);
        }
        free(pe);
    }
    float pe[4];
    attn_error error;
    CHECK_STATUS(attn_sinusoidal_encoding(0, 0, 4, pe, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "count = 0");
    CHECK_STATUS(attn_sinusoidal_encoding(0, 1, 0, pe, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "dim = 0");
    CHECK_STATUS(attn_sinusoidal_encoding(-1, 1, 4, pe, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "first_position = -1");
    CHECK_STATUS(attn_sinusoidal_encoding(0, 1, 4, NULL, &error), ATTN_ERROR_NULL_ARGUMENT,
                 &error, "pe = NULL");
    CHECK_STATUS(attn_sinusoidal_encoding(0, INT64_MAX / 2, 4, pe, &error), ATTN_ERROR_OVERFLOW,
                 &error, "count * dim overflows");
}

static void test_embedding(void) {
    enum { VOCAB = 7, DIM = 5, COUNT = 9 };
    test_rng rng;
    test_rng_seed(&rng, 21);
    float table[VOCAB * DIM], out[COUNT * DIM], grad_out[COUNT * DIM], grad_table[VOCAB * DIM];
    test_fill_normal(&rng, table, VOCAB * DIM, 1.0f);
    test_fill_normal(&rng, grad_out, COUNT * DIM, 1.0f);
    const int32_t tokens[COUNT] = {3, 0, 6, 3, 3, 1, 6, 2, 0};
    attn_error error;
    CHECK_STATUS(attn_embedding_lookup(table, VOCAB, DIM, tokens, COUNT, out, &error), ATTN_OK,
                 &error, "lookup");
    int gathered = 1;
    for (int n = 0; n < COUNT; ++n)
        if (memcmp(out + n * DIM, table + tokens[n] * DIM, DIM * sizeof(float)) != 0) gathered = 0;
    CHECK(gathered, "lookup copies table rows exactly");

    /* The gradient: start from ones to check it accumulates rather than overwrites. */
    for (int i = 0; i < VOCAB * DIM; ++i) grad_table[i] = 1.0f;
    CHECK_STATUS(attn_embedding_backward(tokens, COUNT, grad_out, VOCAB, DIM, grad_table, &error),
                 ATTN_OK, &error, "backward");
    double worst = 0.0;
    for (int v = 0; v < VOCAB; ++v)
        for (int c = 0; c < DIM; ++c) {
            double expected = 1.0;
            for (int n = 0; n < COUNT; ++n)
                if (tokens[n] == v) expected += grad_out[n * DIM + c];
            double e = fabs(grad_table[v * DIM + c] - expected);
            if (e > worst) worst = e;
        }
    CHECK(worst < 1e-6, "embedding gradient = scatter-add (+ the previous 1), error %.3g", worst);
    /* Untouched vocabulary rows (token 4, 5 never used) keep exactly their previous value. */
    CHECK(grad_table[4 * DIM] == 1.0f && grad_table[5 * DIM + 4] == 1.0f, "unused rows unchanged");

    const int32_t bad_tokens[3] = {1, 7, 2};
    CHECK_STATUS(attn_embedding_lookup(table, VOCAB, DIM, bad_tokens, 3, out, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "token 7 >= vocab");
    CHECK(strstr(error.message, "tokens[1] = 7") != NULL, "message names the index: %s",
          error.message);
    const int32_t negative[1] = {-1};
    CHECK_STATUS(attn_embedding_backward(negative, 1, grad_out, VOCAB, DIM, grad_table, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "token -1");
    CHECK_STATUS(attn_embedding_lookup(NULL, VOCAB, DIM, tokens, COUNT, out, &error),
                 ATTN_ERROR_NULL_ARGUMENT, &error, "table = NULL");
    CHECK_STATUS(attn_embedding_lookup(table, VOCAB, DIM, tokens, 0, out, &error),
                 ATTN_ERROR_INVALID_ARGUMENT, &error, "count = 0");
}

int main(void) {
    test_sinusoidal();
    test_embedding();
    return test_finish();
}
