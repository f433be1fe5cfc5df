/*
 * test_forward_configs.c — the tiled forward (attn_forward) against the naive reference
 * (attn_reference_forward) over a table of configurations: shapes (T = 1 .. 257, Tq != Tk
 * both ways, Dk != Dv, odd head dims), MHA/GQA/MQA, every tensor layout, every mask kind and
 * combinations of them. O and LSE must agree within 1e-5 relative, with the generic kernels
 * and with the kernels AUTO picks on this CPU.
 */
#include "test_forward_harness.h"

#define BR ATTN_ALIGN_BOTTOM_RIGHT
#define TL ATTN_ALIGN_TOP_LEFT

static const forward_case cases[] = {
    /* Shapes and layouts, no mask. */
    {.name = "T=1", .B = 1, .Tq = 1, .Tk = 1, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 8},
    {.name = "T=2 D=3", .B = 1, .Tq = 2, .Tk = 2, .Hq = 1, .Hkv = 1, .Dk = 3, .Dv = 3},
    {.name = "T=7 BHTD", .B = 2, .Tq = 7, .Tk = 7, .Hq = 2, .Hkv = 2, .Dk = 31, .Dv = 31, .layout = TEST_LAYOUT_BHTD},
    {.name = "T=63 padded", .B = 1, .Tq = 63, .Tk = 63, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .layout = TEST_LAYOUT_PADDED},
    {.name = "T=64 reversed", .B = 1, .Tq = 64, .Tk = 64, .Hq = 1, .Hkv = 1, .Dk = 80, .Dv = 80, .layout = TEST_LAYOUT_REVERSED_T},
    {.name = "T=65 GQA", .B = 2, .Tq = 65, .Tk = 65, .Hq = 6, .Hkv = 2, .Dk = 32, .Dv = 32},
    {.name = "T=257 MQA", .B = 1, .Tq = 257, .Tk = 257, .Hq = 4, .Hkv = 1, .Dk = 16, .Dv = 24},
    {.name = "Tq<Tk Dk!=Dv", .B = 2, .Tq = 5, .Tk = 70, .Hq = 2, .Hkv = 2, .Dk = 96, .Dv = 40},
    {.name = "Tq>Tk", .B = 1, .Tq = 70, .Tk = 9, .Hq = 3, .Hkv = 1, .Dk = 160, .Dv = 7},
    {.name = "D=3 Dv=1", .B = 3, .Tq = 33, .Tk = 17, .Hq = 2, .Hkv = 1, .Dk = 3, .Dv = 1},
    {.name = "custom scale", .B = 1, .Tq = 20, .Tk = 20, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 8, .scale = 0.7f},
    /* Causal, both alignments, square and not. */
    {.name = "causal BR square", .B = 2, .Tq = 65, .Tk = 65, .Hq = 4, .Hkv = 2, .Dk = 16, .Dv = 16, .causal = 1, .alignment = BR},
    {.name = "causal BR Tq<Tk", .B = 1, .Tq = 30, .Tk = 100, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .causal = 1, .alignment = BR, .layout = TEST_LAYOUT_BHTD},
    {.name = "causal BR Tq>Tk", .B = 1, .Tq = 100, .Tk = 30, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .causal = 1, .alignment = BR},
    {.name = "causal TL Tq<Tk", .B = 1, .Tq = 30, .Tk = 100, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .causal = 1, .alignment = TL},
    {.name = "causal TL Tq>Tk", .B = 1, .Tq = 100, .Tk = 30, .Hq = 1, .Hkv = 1, .Dk = 16, .Dv = 16, .causal = 1, .alignment = TL, .layout = TEST_LAYOUT_REVERSED_T},
    /* Windows. */
    {.name = "window 8,0", .B = 1, .Tq = 257, .Tk = 257, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .window = 1, .window_left = 8, .window_right = 0, .alignment = BR},
    {.name = "window 20,5 TL", .B = 1, .Tq = 90, .Tk = 120, .Hq = 1, .Hkv = 1, .Dk = 16, .Dv = 16, .window = 1, .window_left = 20, .window_right = 5, .alignment = TL},
    {.name = "window -1,3 causal", .B = 1, .Tq = 70, .Tk = 70, .Hq = 1, .Hkv = 1, .Dk = 16, .Dv = 16, .window = 1, .window_left = -1, .window_right = 3, .causal = 1, .alignment = BR},
    {.name = "window 0,0", .B = 1, .Tq = 40, .Tk = 50, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 8, .window = 1, .alignment = BR},
    /* Tensors: bool mask, bias, both broadcast and per (b, h). */
    {.name = "bool mask", .B = 2, .Tq = 65, .Tk = 70, .Hq = 4, .Hkv = 2, .Dk = 16, .Dv = 16, .mask = HARNESS_PER_BATCH_HEAD},
    {.name = "bool mask broadcast", .B = 2, .Tq = 33, .Tk = 33, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .mask = HARNESS_BROADCAST, .layout = TEST_LAYOUT_PADDED},
    {.name = "bias", .B = 2, .Tq = 40, .Tk = 66, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .bias = HARNESS_PER_BATCH_HEAD},
    {.name = "bias broadcast causal", .B = 1, .Tq = 66, .Tk = 66, .Hq = 3, .Hkv = 1, .Dk = 16, .Dv = 16, .bias = HARNESS_BROADCAST, .causal = 1, .alignment = TL},
    /* Lengths (padded batches). */
    {.name = "lengths", .B = 4, .Tq = 37, .Tk = 70, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .lengths = 1},
    {.name = "lengths causal BR", .B = 4, .Tq = 70, .Tk = 70, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .lengths = 1, .causal = 1, .alignment = BR},
    /* Global tokens, patterns, block layout. */
    {.name = "globals window", .B = 1, .Tq = 100, .Tk = 100, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .global_count = 3, .window = 1, .window_left = 4, .window_right = 4, .alignment = BR},
    {.name = "globals window causal", .B = 1, .Tq = 80, .Tk = 80, .Hq = 1, .Hkv = 1, .Dk = 16, .Dv = 16, .global_count = 4, .window = 1, .window_left = 6, .window_right = 6, .causal = 1, .alignment = BR},
    {.name = "strided", .B = 1, .Tq = 130, .Tk = 130, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .pattern = ATTN_PATTERN_STRIDED, .pattern_stride = 8, .causal = 1, .alignment = BR},
    {.name = "strided bidirectional", .B = 1, .Tq = 70, .Tk = 90, .Hq = 1, .Hkv = 1, .Dk = 16, .Dv = 16, .pattern = ATTN_PATTERN_STRIDED, .pattern_stride = 5, .alignment = TL},
    {.name = "fixed", .B = 1, .Tq = 130, .Tk = 130, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .pattern = ATTN_PATTERN_FIXED, .pattern_stride = 16, .pattern_summary = 2, .causal = 1, .alignment = BR},
    {.name = "fixed bidirectional", .B = 1, .Tq = 50, .Tk = 50, .Hq = 1, .Hkv = 1, .Dk = 8, .Dv = 8, .pattern = ATTN_PATTERN_FIXED, .pattern_stride = 7, .pattern_summary = 3, .alignment = TL},
    {.name = "dilated", .B = 1, .Tq = 130, .Tk = 130, .Hq = 1, .Hkv = 1, .Dk = 16, .Dv = 16, .pattern = ATTN_PATTERN_DILATED, .pattern_radius = 4, .pattern_dilation = 3, .alignment = BR},
    {.name = "dilated globals", .B = 1, .Tq = 90, .Tk = 90, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .pattern = ATTN_PATTERN_DILATED, .pattern_radius = 3, .pattern_dilation = 2, .global_count = 2, .alignment = BR},
    {.name = "block layout", .B = 2, .Tq = 100, .Tk = 90, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .block_q = 16, .block_k = 32},
    {.name = "block layout odd", .B = 1, .Tq = 70, .Tk = 70, .Hq = 1, .Hkv = 1, .Dk = 16, .Dv = 16, .block_q = 7, .block_k = 5, .causal = 1, .alignment = BR},
    /* ALiBi, soft-cap, positions. */
    {.name = "alibi", .B = 1, .Tq = 70, .Tk = 70, .Hq = 8, .Hkv = 2, .Dk = 16, .Dv = 16, .alibi = 1, .causal = 1, .alignment = BR},
    {.name = "alibi custom bidirectional", .B = 1, .Tq = 40, .Tk = 60, .Hq = 3, .Hkv = 3, .Dk = 16, .Dv = 16, .alibi = 2, .alignment = TL},
    {.name = "softcap", .B = 1, .Tq = 70, .Tk = 70, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .softcap = 5.0f, .input_stddev = 2.0f},
    {.name = "softcap causal alibi", .B = 1, .Tq = 70, .Tk = 70, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .softcap = 3.0f, .alibi = 1, .causal = 1, .alignment = BR},
    {.name = "softcap bias mask", .B = 2, .Tq = 30, .Tk = 40, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .softcap = 2.0f, .bias = HARNESS_BROADCAST, .mask = HARNESS_PER_BATCH_HEAD},
    {.name = "positions causal window", .B = 1, .Tq = 50, .Tk = 120, .Hq = 2, .Hkv = 1, .Dk = 16, .Dv = 16, .positions = 1, .causal = 1, .window = 1, .window_left = 30, .window_right = -1},
    {.name = "positions alibi strided", .B = 1, .Tq = 50, .Tk = 100, .Hq = 2, .Hkv = 2, .Dk = 16, .Dv = 16, .positions = 1, .alibi = 1, .pattern = ATTN_PATTERN_STRIDED, .pattern_stride = 6},
    /* Everything at once. */
    {.name = "combined", .B = 3, .Tq = 67, .Tk = 75, .Hq = 4, .Hkv = 2, .Dk = 24, .Dv = 20, .causal = 1, .alignment = BR, .window = 1, .window_left = 30, .window_right = -1, .mask = HARNESS_BROADCAST, .bias = HARNESS_PER_BATCH_HEAD, .lengths = 1, .global_count = 2, .block_q = 16, .block_k = 16, .alibi = 1, .softcap = 4.0f, .layout = TEST_LAYOUT_BHTD},
};

int main(void) {
    const int case_count = (int)(sizeof cases / sizeof cases[0]);
    double worst_generic = 0, worst_auto = 0;
    for (int n = 0; n < case_count; ++n) {
        double e = forward_case_check(&cases[n], 1000 + (uint64_t)n, ATTN_KERNEL_GENERIC, 1e-5);
        if (e > worst_generic) worst_generic = e;
        e = forward_case_check(&cases[n], 1000 + (uint64_t)n, ATTN_KERNEL_AUTO, 1e-5);
        if (e > worst_auto) worst_auto = e;
    }
    printf("%d cases: worst relative error generic %.3g, auto %.3g\n", case_count, worst_generic,
           worst_auto);
    return test_finish();
}
