/*
 * test_backward_flash.c — attn_backward (tiled recomputation) against attn_reference_backward
 * over a table of shapes, masks and memory layouts, with T in {1, 7, 63, 64, 65, 257}, for
 * every kernel table this CPU runs and several tile sizes. O and LSE come from the test's
 * double-precision oracle forward, so the check does not depend on the forward pass.
 * Tolerance: max |flash - reference| / (1 + |reference|) <= 1e-5 for dQ, dK, dV and d bias.
 */
#include "kernels/registry.h"
#include "test_backward_oracle.h"

#define FLASH_TOLERANCE 1e-5

static const backward_case cases[] = {
    {"T=1", SIZES(1, 1, 1, 1, 1, 8, 8)},
    {"T=7 causal", SIZES(2, 7, 7, 2, 2, 16, 16), CAUSAL(BOTTOM_RIGHT)},
    {"Tq=63 Tk=65 GQA", SIZES(1, 63, 65, 4, 2, 32, 32), .layout = TEST_LAYOUT_BHTD},
    {"T=64 causal", SIZES(2, 64, 64, 2, 1, 24, 24), CAUSAL(TOP_LEFT), .layout = TEST_LAYOUT_PADDED},
    {"Tq=65 Tk=63 soft-cap bias", SIZES(2, 65, 63, 2, 2, 16, 8), .softcap = 2.0f,
     .bias = BIAS_FULL},
    {"T=257 causal", SIZES(1, 257, 257, 2, 2, 32, 32), CAUSAL(BOTTOM_RIGHT)},
    {"Tq=100 Tk=257 window", SIZES(1, 100, 257, 2, 1, 16, 16), WINDOW(40, 3),
     .alignment = ATTN_ALIGN_BOTTOM_RIGHT, .layout = TEST_LAYOUT_REVERSED_T},
    {"Tq=257 Tk=64 causal empty rows", SIZES(1, 257, 64, 2, 2, 8, 8), CAUSAL(BOTTOM_RIGHT),
     .empty_rows_zero = 1},
    {"boolean mask", SIZES(2, 65, 70, 2, 2, 16, 16), .bool_mask = 1, .empty_rows_zero = 1},
    {"Dk 48 Dv 24 MQA", SIZES(1, 66, 66, 3, 1, 48, 24), CAUSAL(BOTTOM_RIGHT)},
    {"ALiBi", SIZES(1, 70, 70, 4, 4, 16, 16), CAUSAL(BOTTOM_RIGHT), .alibi = 1},
    {"bias shared over B and H", SIZES(2, 70, 65, 4, 2, 16, 16), .bias = BIAS_SHARED,
     CAUSAL(BOTTOM_RIGHT), .softcap = 3.0f},
    {"bias per head", SIZES(2, 33, 129, 2, 2, 8, 8), .bias = BIAS_PER_HEAD},
    {"padded lengths", SIZES(3, 67, 71, 2, 2, 8, 8), CAUSAL(BOTTOM_RIGHT), .lengths = 1,
     .empty_rows_zero = 1},
    {"strided pattern", SIZES(1, 70, 70, 2, 2, 8, 8), CAUSAL(BOTTOM_RIGHT),
     .pattern = ATTN_PATTERN_STRIDED},
    {"fixed pattern", SIZES(1, 70, 70, 2, 2, 8, 8), .alignment = ATTN_ALIGN_BOTTOM_RIGHT,
     .pattern = ATTN_PATTERN_FIXED, .empty_rows_zero = 1},
    {"dilated pattern", SIZES(1, 70, 75, 2, 2, 8, 8), .alignment = ATTN_ALIGN_TOP_LEFT,
     .pattern = ATTN_PATTERN_DILATED, .empty_rows_zero = 1},
    /* Windowed bands (chunks of consecutive key tiles, flash_backward.c): narrower and wider
     * than a tile, starting mid-tile, T = 1, odd D, GQA, lengths. */
    {"Tq=1 Tk=100 window 5", SIZES(1, 1, 100, 1, 1, 8, 8), WINDOW(5, 0),
     .alignment = ATTN_ALIGN_BOTTOM_RIGHT},
    {"causal window 20 lengths GQA", SIZES(2, 150, 150, 4, 2, 16, 16), CAUSAL(BOTTOM_RIGHT),
     WINDOW(20, 0), .lengths = 1, .empty_rows_zero = 1},
    {"Tq=400 Tk=333 window 70 odd D", SIZES(1, 400, 333, 2, 1, 13, 7), WINDOW(70, 70),
     .alignment = ATTN_ALIGN_TOP_LEFT, .empty_rows_zero = 1},
    {"window 300 > tile GQA 4", SIZES(1, 600, 600, 4, 1, 8, 8), CAUSAL(BOTTOM_RIGHT),
     WINDOW(300, 0)},
    {"window, bias shared over B and H", SIZES(2, 330, 330, 2, 1, 8, 8), WINDOW(20, 5),
     .alignment = ATTN_ALIGN_TOP_LEFT, .bias = BIAS_SHARED},
    {"window, bias per head", SIZES(1, 300, 310, 2, 2, 8, 8), WINDOW(33, 0),
     .alignment = ATTN_ALIGN_BOTTOM_RIGHT, .bias = BIAS_PER_HEAD},
    {"global token + window", SIZES(1, 70, 70, 2, 2, 8, 8), WINDOW(5, 5),
     .alignment = ATTN_ALIGN_BOTTOM_RIGHT, .global_tokens = 1},
    {"block layout", SIZES(2, 70, 71, 2, 2, 8, 8), .block_layout = 1, .empty_rows_zero = 1},
};

/* Tile sizes tried on every case: the kernel's default and a few odd ones. */
static const int tile_sizes[][2] = {{0, 0}, {16, 16}, {7, 13}, {128, 32}};

int main(void) {
    const attn_kernel_choice kernels[] = {ATTN_KERNEL_GENERIC, ATTN_KERNEL_AVX2,
                                          ATTN_KERNEL_AVX512};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; ++t) {
        const backward_case *config = &cases[t];
        backward_setup setup;
        backward_setup_init(&setup, config, 2000 + t);
        oracle_inputs oracle;
        CHECK(oracle_init(&oracle, &setup), "%s: oracle mask context", config->name);
        oracle_fill_forward(&oracle, &setup);
        oracle_free(&oracle);
        attn_tensor *dbias = setup.options.bias ? &setup.dbias.view : NULL;

        attn_error error;
        attn_status status = attn_reference_backward(
            &setup.q.view, &setup.k.view, &setup.v.view, &setup.out.view, &setup.lse.view,
            &setup.dout.view, &setup.options, &setup.dq.view, &setup.dk.view, &setup.dv.view,
            dbias, &error);
        CHECK_STATUS(status, ATTN_OK, &error, "%s: reference", config->name);
        /* The reference results move to their own tensors; the flash run refills setup's. */
        backward_setup expected;
        backward_setup_init(&expected, config, 2000 + t);
        const test_tensor *from[] = {&setup.dq, &setup.dk, &setup.dv, &setup.dbias};
        test_tensor *to[] = {&expected.dq, &expected.dk, &expected.dv, &expected.dbias};
        for (int e = 0; e < 4; ++e)
            if (from[e]->allocation)
                memcpy(to[e]->allocation, from[e]->allocation,
                       sizeof(float) * (size_t)from[e]->allocation_floats);

        double worst = 0;
        for (size_t kernel = 0; kernel < sizeof kernels / sizeof kernels[0]; ++kernel) {
            if (!attn_cpu_supports(kernels[kernel])) continue;
            for (size_t tile = 0; tile < sizeof tile_sizes / sizeof tile_sizes[0]; ++tile) {
                attn_execution execution = attn_execution_default();
                execution.kernel = kernels[kernel];
                execution.tile_q = tile_sizes[tile][0];
                execution.tile_k = tile_sizes[tile][1];
                test_tensor_fill_all(&setup.dq, NAN);
                test_tensor_fill_all(&setup.dk, NAN);
                test_tensor_fill_all(&setup.dv, NAN);
                if (dbias) test_tensor_fill_all(&setup.dbias, NAN);
                status = attn_backward(&setup.q.view, &setup.k.view, &setup.v.view,
                                       &setup.out.view, &setup.lse.view, &setup.dout.view,
                                       &setup.options, &setup.dq.view, &setup.dk.view,
                                       &setup.dv.view, dbias, &execution, &error);
                CHECK_STATUS(status, ATTN_OK, &error, "%s: kernel %d tiles %dx%d", config->name,
                             (int)kernels[kernel], execution.tile_q, execution.tile_k);
                const double errors[4] = {
                    test_max_relative_error(&setup.dq.view, &expected.dq.view),
                    test_max_relative_error(&setup.dk.view, &expected.dk.view),
                    test_max_relative_error(&setup.dv.view, &expected.dv.view),
                    dbias ? test_max_relative_error(dbias, &expected.dbias.view) : 0.0};
                static const char *const names[4] = {"dQ", "dK", "dV", "d bias"};
                for (int e = 0; e < 4; ++e) {
                    CHECK(errors[e] <= FLASH_TOLERANCE,
                          "%s: kernel %d tiles %dx%d: %s error %.3g", config->name,
                          (int)kernels[kernel], execution.tile_q, execution.tile_k, names[e],
                          errors[e]);
                    if (!(errors[e] <= worst)) worst = errors[e];
                }
            }
        }
        printf("%-34s worst relative error %.2e\n", config->name, worst);
        backward_setup_free(&expected);
        backward_setup_free(&setup);
    }
    return test_finish();
}
