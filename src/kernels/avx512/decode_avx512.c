/*
 * decode_avx512.c — the decode part of the AVX-512 registry: the float32 kernels of
 * src/kernels/simd/decode_body.h and the bfloat16-in-place kernels of decode_bf16_body.h at
 * 16 lanes, and the kernels that read 8-bit storage (int8, fp8) in place, in
 * decode_q8_avx512.h, part of this file.
 */
#define ATTN_VEC_WIDTH 16
#include <string.h>

#include "kernels/simd/decode_body.h"
#include "kernels/simd/decode_bf16_body.h"

/* ---- 8-bit storage (Q8, FP8), read in place ---- */
#include "kernels/cpu_features.h"
#include "kernels/quant.h"
#include "kernels/fp8_bf16_table.h"
#include "kernels/avx512/decode_q8_avx512.h"

const attn_decode_kernels attn_avx512_decode = {
    DECODE_BODY_SLOTS,
    .score_chunk_f16 = score_chunk_f16,
    .accumulate_chunk_f16 = accumulate_chunk_f16,
    .score_chunk_bf16_widened = score_chunk_bf16_widened,
    .accumulate_chunk_bf16_widened = accumulate_chunk_bf16_widened,
    .token_major_in_place_rows = ATTN_DECODE_GROUP_ROWS - 1,
    .score_chunk_bf16 = score_chunk_bf16,
    .accumulate_chunk_bf16 = accumulate_chunk_bf16,
    .prepare_bf16_queries = prepare_bf16_queries,
    .dequantize_rows = avx512_dequantize_rows,
    .widen_fp8_bf16 = avx512_widen_fp8_bf16,
    .score_chunk_q8 = avx512_score_chunk_q8,
    .accumulate_chunk_q8 = avx512_accumulate_chunk_q8,
    .accumulate_q8_requests_ahead = 1,
};

/* The 8-bit slots without VNNI, VBMI and GFNI (the AVX-512BW integer kernels, fp8 widened 32
 * codes at a time in natural order): int8 and E5M2 give the same bits, E4M3 scores sum their
 * products in other lanes (decode_fp8_lanes_avx512.h); tests/test_kernels_decode.c runs them
 * on CPUs that have the extensions, so that every 8-bit kernel is tested wherever AVX-512 is. */
const attn_decode_kernels attn_avx512_q8_baseline = {
    .score_chunk_q8 = avx512_score_chunk_q8_baseline,
    .accumulate_chunk_q8 = avx512_accumulate_chunk_q8_baseline,
    .accumulate_q8_requests_ahead = 1,
};
