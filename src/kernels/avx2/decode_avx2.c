/*
 * decode_avx2.c — the decode part of the AVX2 + FMA + F16C registry: the float32 kernels of
 * src/kernels/simd/decode_body.h and the bfloat16-in-place kernels of decode_bf16_body.h at 8
 * lanes, and the kernels that read 8-bit storage (int8, fp8) in place, in decode_q8_avx2.h,
 * part of this file.
 */
#define ATTN_VEC_WIDTH 8
#include <string.h>

#include "kernels/simd/decode_body.h"
#include "kernels/simd/decode_bf16_body.h"

/* ---- 8-bit storage (Q8, FP8), read in place ---- */
#include "kernels/quant.h"
#include "kernels/avx2/decode_q8_avx2.h"

const attn_decode_kernels attn_avx2_decode = {
    DECODE_BODY_SLOTS,
    /* score_chunk_f16, score_chunk_bf16_widened (16-bit rows widened as they are loaded):
     * none at 8 lanes, whose blocks run slower in place than converting each chunk once
     * (simd/decode_body.h "Stored rows") */
    .score_chunk_bf16 = score_chunk_bf16,
    .accumulate_chunk_bf16 = accumulate_chunk_bf16,
    .prepare_bf16_queries = prepare_bf16_queries,
    .dequantize_rows = avx2_dequantize_rows,
    .score_chunk_q8 = avx2_score_chunk_q8,
    .accumulate_chunk_q8 = avx2_accumulate_chunk_q8,
};
