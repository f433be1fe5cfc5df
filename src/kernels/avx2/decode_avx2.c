/*
 * decode_avx2.c — the decode part of the AVX2 + FMA + F16C registry: the float32 kernels of
 * src/kernels/simd/decode_body.h at 8 lanes (bfloat16 is converted to float32 first), and the
 * kernels that read 8-bit storage (int8, fp8) in place, in decode_q8_avx2.h, part of this
 * file.
 */
#define ATTN_VEC_WIDTH 8
#include "kernels/simd/decode_body.h"

/* ---- 8-bit storage (Q8, FP8), read in place ---- */
#include "kernels/quant.h"
#include "kernels/avx2/decode_q8_avx2.h"

const attn_decode_kernels attn_avx2_decode = {
    .bf16_to_f32 = bf16_to_f32,
    .f16_to_f32 = f16_to_f32,
    .widen_rows = widen_rows,
    .score_chunk = score_chunk,
    .prepare_group_queries = prepare_group_queries,
    .score_chunk_group = score_chunk_group,
    .accumulate_chunk_group = accumulate_chunk_group,
    .softmax_chunk = softmax_chunk,
    .accumulate_chunk = accumulate_chunk,
    .dequantize_rows = avx2_dequantize_rows,
    .score_chunk_q8 = avx2_score_chunk_q8,
    .accumulate_chunk_q8 = avx2_accumulate_chunk_q8,
};
