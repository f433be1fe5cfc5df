/*
 * fp8_bf16_table.c — builds the fp8-to-bf16 byte tables of fp8_bf16_table.h once per process.
 */
#include "kernels/fp8_bf16_table.h"

#include <pthread.h>

#include "kernels/half.h"
#include "kernels/quant.h"

static attn_fp8_bf16_lookup table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void) {
    for (int f = 0; f < 2; ++f)
        for (int code = 0; code < 128; ++code) {
            const float value = f == 0 ? attn_fp8_e4m3_decode((uint8_t)code)
                                       : attn_fp8_e5m2_decode((uint8_t)code);
            const uint32_t bits = attn_float_bits(value);
            table.low[f][code] = (uint8_t)(bits >> 16);
            table.high[f][code] = (uint8_t)(bits >> 24);
        }
    for (int half = 0; half < 2; ++half)
        for (int j = 0; j < 32; ++j) {
            table.place[half][2 * j] = (uint8_t)(32 * half + j);
            table.place[half][2 * j + 1] = (uint8_t)(64 + 32 * half + j);
        }
}

const attn_fp8_bf16_lookup *attn_fp8_bf16_lookup_get(void) {
    pthread_once(&table_once, table_build);
    return &table;
}
