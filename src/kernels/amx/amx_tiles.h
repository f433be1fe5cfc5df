/*
 * amx_tiles.h — the AMX kernels of lowp.h (Q·Kᵀ and P·V on tiles) for bf16 (TDPBF16PS) and
 * fp16 (TDPFP16PS, AMX-FP16) operands, written once against tile operations that the includer
 * defines:
 *   AMX_CONFIGURE(config)       LDTILECFG: load a 64-byte tile configuration (zeroes the tiles)
 *   AMX_READ_CONFIG(config)     STTILECFG: the thread's current configuration (64 zero bytes
 *                               when the tiles are not configured: after TILERELEASE, or never)
 *   AMX_ZERO(t)                 tile t = 0
 *   AMX_LOAD(t, base, stride)   16 rows of 64 bytes from base, rows `stride` bytes apart
 *   AMX_STORE(t, base, stride)  the same, back to memory
 *   AMX_DPBF16(c, a, b)         c[m][n] += Σ_k a[m][2k]·b[k][2n] + a[m][2k+1]·b[k][2n+1] (bf16)
 *   AMX_DPFP16(c, a, b)         the same on fp16 pairs (only used when AMX_F16 is 1)
 * and, per inclusion:
 *   AMX_NAME(x)                 the prefix of the functions it defines
 *   AMX_F16                     0 (default): bf16 operands, P rounded to bf16 for P·V;
 *                               1: fp16 operands, P rounded to fp16
 *   AMX_ROUND_ROW(destination, source, n, padded)  optional: destination[c] = P[c] rounded to
 *                               the operand type for c < n, 0 for n <= c < padded (default:
 *                               the scalar roundings of lowp.h / half.h; lowp_amx.c uses
 *                               VCVTNE2PS2BF16 / VCVTPS2PH, which round the same way).
 * amx/lowp_amx.c includes it (twice: bf16, fp16) with the AMX instructions; the tests include it
 * with a portable, per-thread emulation of the same operations, so the tile bookkeeping (edges,
 * staging, the VNNI layouts, the configuration reuse) is tested on machines without AMX. Every
 * inclusion in one translation unit must see the same tile operations (the configuration part
 * below is emitted once per unit).
 *
 * Every tile is configured full size (16 rows × 64 bytes): tiles 0-3 accumulate fp32 (a 2×2
 * block of 16×16 outputs), 4-5 hold A (16 rows × 32 elements of Q or P), 6-7 hold B (16 pair
 * rows × 16 columns × 2 elements of packed K or V, lowp.h layouts; bf16 and fp16 share them).
 * Edges (fewer than 16 rows, keys or value elements) go through small zero-padded staging
 * buffers, so no tile load reads and no tile store writes outside the caller's buffers.
 *
 * Tile configuration lifetime (docs/kernels.md, "AMX"): the tile configuration is state of
 * the thread (saved and restored with the thread by the OS, like the vector registers). Every
 * kernel reads it (STTILECFG, cheap) and loads its own (LDTILECFG, which also zeroes the tile
 * data) only when the two differ: the first call on a thread, or after other code on the
 * thread configured other shapes or released the tiles. No kernel keeps tile data from one
 * call to the next, and no kernel releases the tiles (TILERELEASE) on return: the state stays
 * configured on the threads that ran AMX kernels (pool workers included), so the next call
 * on the same thread skips LDTILECFG. Code that needs the INIT state back (another library
 * that requires it, or to save the 8 KiB of tile data at context switches) may run
 * TILERELEASE at any time between attn calls; the next kernel then configures again. There is
 * no per-thread flag to go stale: the check reads the hardware state itself.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/lowp.h"

#define AMX_ROWS 16
#define AMX_CHUNK 256 /* keys of P rounded to the operand type at once for P·V */

#ifndef AMX_F16
#define AMX_F16 0
#endif
#if AMX_F16
#define AMX_DP(c, a, b) AMX_DPFP16(c, a, b)
#else
#define AMX_DP(c, a, b) AMX_DPBF16(c, a, b)
#endif
#ifndef AMX_ROUND_ROW
#if AMX_F16
#define AMX_ROUND_ROW(destination, source, n, padded)                                      \
    do {                                                                                   \
        for (int c_ = 0; c_ < (padded); ++c_)                                              \
            (destination)[c_] = c_ < (n) ? attn_float_to_f16((source)[c_]) : 0;             \
    } while (0)
#else
#define AMX_ROUND_ROW(destination, source, n, padded)                                      \
    do {                                                                                   \
        for (int c_ = 0; c_ < (padded); ++c_)                                              \
            (destination)[c_] = c_ < (n) ? attn_lowp_bf16_round((source)[c_]) : 0;          \
    } while (0)
#endif
#endif
#ifndef ATTN_AMX_TILES_SHARED
#define ATTN_AMX_TILES_SHARED
/* The one tile configuration of every kernel: palette 1, tiles 0-7 of 16 rows × 64 bytes
 * (bytes 16 + 2t: bytes per row of tile t, little-endian; byte 48 + t: its rows). */
static const uint8_t amx_tiles_config[64] __attribute__((aligned(64))) = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* Makes amx_tiles_config the calling thread's configuration, loading it only when the
 * thread's current one (STTILECFG) differs (see "Tile configuration lifetime" above). */
static void amx_tiles_configure(void) {
    uint8_t current[64] __attribute__((aligned(64)));
    AMX_READ_CONFIG(current);
    if (memcmp(current, amx_tiles_config, sizeof current) != 0)
        AMX_CONFIGURE(amx_tiles_config);
}
#endif

static inline int AMX_NAME(clamp16)(int n) { return n < 0 ? 0 : n > 16 ? 16 : n; }

/* Stores fp32 tile data (16 × 16, `stage`) rows < rows, columns < columns into out. */
static void AMX_NAME(copy_out)(const float *stage, int rows, int columns, float *out,
                               int out_stride) {
    for (int r = 0; r < rows; ++r)
        memcpy(out + (size_t)r * out_stride, stage + r * 16, (size_t)columns * sizeof(float));
}

/* scores[r][c] = q_r · k_c for r < rows, c < count (lowp.h score_tile). */
static void AMX_NAME(score_tile)(int rows, int count, int dim, const uint16_t *queries,
                                 int query_stride, const uint16_t *packed_keys, float *scores,
                                 int scores_stride) {
    static const uint16_t zero_tile[512] __attribute__((aligned(64)));
    uint16_t query_stage[2][16 * 32] __attribute__((aligned(64)));
    float out_stage[16 * 16] __attribute__((aligned(64)));
    const int chunks = attn_lowp_round_up(dim, 32) / 32;
    const size_t block_elements = (size_t)16 * 2 * attn_lowp_dim_pairs(dim);
    amx_tiles_configure();
    for (int r0 = 0; r0 < rows; r0 += 32) {
        const int row_count[2] = {AMX_NAME(clamp16)(rows - r0), AMX_NAME(clamp16)(rows - r0 - 16)};
        for (int c0 = 0; c0 < count; c0 += 32) {
            const int key_count[2] = {AMX_NAME(clamp16)(count - c0),
                                      AMX_NAME(clamp16)(count - c0 - 16)};
            AMX_ZERO(0);
            AMX_ZERO(1);
            AMX_ZERO(2);
            AMX_ZERO(3);
            for (int k = 0; k < chunks; ++k) {
                const uint16_t *a[2];
                int a_stride[2];
                for (int h = 0; h < 2; ++h) {
                    const uint16_t *first = row_count[h] > 0 /* else never read */
                                                ? queries + (size_t)(r0 + 16 * h) * query_stride + 32 * k
                                                : queries;
                    if (row_count[h] == 16) {
                        a[h] = first;
                        a_stride[h] = query_stride * 2;
                        continue;
                    }
                    memset(query_stage[h], 0, sizeof query_stage[h]);
                    for (int r = 0; r < row_count[h]; ++r)
                        memcpy(query_stage[h] + r * 32, first + (size_t)r * query_stride, 64);
                    a[h] = query_stage[h];
                    a_stride[h] = 64;
                }
                const uint16_t *b0 = packed_keys + (size_t)(c0 / 16) * block_elements + (size_t)k * 512;
                const uint16_t *b1 = key_count[1] > 0 ? b0 + block_elements : zero_tile;
                AMX_LOAD(4, a[0], a_stride[0]);
                AMX_LOAD(5, a[1], a_stride[1]);
                AMX_LOAD(6, b0, 64);
                AMX_LOAD(7, b1, 64);
                AMX_DP(0, 4, 6);
                AMX_DP(1, 4, 7);
                AMX_DP(2, 5, 6);
                AMX_DP(3, 5, 7);
            }
            for (int h = 0; h < 2; ++h)
                for (int j = 0; j < 2; ++j) {
                    if (row_count[h] == 0 || key_count[j] == 0) continue;
                    float *out = scores + (size_t)(r0 + 16 * h) * scores_stride + c0 + 16 * j;
                    const int direct = row_count[h] == 16 && key_count[j] == 16;
                    float *target = direct ? out : out_stage;
                    const int stride = direct ? scores_stride * 4 : 64;
                    switch (2 * h + j) {
                    case 0: AMX_STORE(0, target, stride); break;
                    case 1: AMX_STORE(1, target, stride); break;
                    case 2: AMX_STORE(2, target, stride); break;
                    default: AMX_STORE(3, target, stride); break;
                    }
                    if (!direct)
                        AMX_NAME(copy_out)(out_stage, row_count[h], key_count[j], out, scores_stride);
                }
        }
    }
}

/* accumulator[r][e] += Σ_c round(weights[r][c]) · v_c[e], round = bf16 or fp16 (AMX_F16)
 * (lowp.h accumulate_values). */
static void AMX_NAME(accumulate_values)(int rows, int count, int dim, const float *weights,
                                        int weights_stride, const uint16_t *packed_values,
                                        float *accumulator, int accumulator_stride) {
    static const uint16_t zero_tile[512] __attribute__((aligned(64)));
    uint16_t p_stage[32 * AMX_CHUNK] __attribute__((aligned(64))); /* [32 rows][chunk] 16-bit */
    float out_stage[4][16 * 16] __attribute__((aligned(64)));
    const int dim16 = attn_lowp_round_up(dim, 16);
    const size_t pair_row_elements = (size_t)dim16 * 2;
    amx_tiles_configure();
    for (int r0 = 0; r0 < rows; r0 += 32) {
        const int row_count[2] = {AMX_NAME(clamp16)(rows - r0), AMX_NAME(clamp16)(rows - r0 - 16)};
        for (int c0 = 0; c0 < count; c0 += AMX_CHUNK) {
            const int n = count - c0 < AMX_CHUNK ? count - c0 : AMX_CHUNK;
            const int n32 = attn_lowp_round_up(n, 32);
            /* P rows r0.. r0+31, keys c0..c0+n32, rounded; zero past rows and n. */
            for (int r = 0; r < 32; ++r) {
                uint16_t *row = p_stage + (size_t)r * AMX_CHUNK;
                if (r0 + r < rows)
                    AMX_ROUND_ROW(row, weights + (size_t)(r0 + r) * weights_stride + c0, n, n32);
                else
                    memset(row, 0, (size_t)n32 * sizeof(uint16_t));
            }
            const uint16_t *values = packed_values + (size_t)(c0 / 2) * pair_row_elements;
            for (int e0 = 0; e0 < dim; e0 += 32) {
                const int element_count[2] = {AMX_NAME(clamp16)(dim - e0),
                                              AMX_NAME(clamp16)(dim - e0 - 16)};
                float *out[4];
                int direct[4];
                for (int h = 0; h < 2; ++h)
                    for (int j = 0; j < 2; ++j) {
                        const int t = 2 * h + j;
                        out[t] = row_count[h] > 0 && element_count[j] > 0 /* else never used */
                                     ? accumulator + (size_t)(r0 + 16 * h) * accumulator_stride + e0 + 16 * j
                                     : accumulator;
                        direct[t] = row_count[h] == 16 && element_count[j] == 16;
                        if (direct[t]) continue;
                        memset(out_stage[t], 0, sizeof out_stage[t]);
                        for (int r = 0; r < row_count[h]; ++r)
                            memcpy(out_stage[t] + r * 16, out[t] + (size_t)r * accumulator_stride,
                                   (size_t)element_count[j] * sizeof(float));
                    }
#define AMX_C_SOURCE(t) (direct[t] ? (void *)out[t] : (void *)out_stage[t])
#define AMX_C_STRIDE(t) (direct[t] ? accumulator_stride * 4 : 64)
                AMX_LOAD(0, AMX_C_SOURCE(0), AMX_C_STRIDE(0));
                AMX_LOAD(1, AMX_C_SOURCE(1), AMX_C_STRIDE(1));
                AMX_LOAD(2, AMX_C_SOURCE(2), AMX_C_STRIDE(2));
                AMX_LOAD(3, AMX_C_SOURCE(3), AMX_C_STRIDE(3));
                for (int k = 0; k < n32; k += 32) {
                    const uint16_t *b0 = values + (size_t)(k / 2) * pair_row_elements + (size_t)e0 * 2;
                    const uint16_t *b1 = element_count[1] > 0 ? b0 + 32 : zero_tile;
                    const int b1_stride = element_count[1] > 0 ? (int)pair_row_elements * 2 : 64;
                    AMX_LOAD(4, p_stage + k, AMX_CHUNK * 2);
                    AMX_LOAD(5, p_stage + (size_t)16 * AMX_CHUNK + k, AMX_CHUNK * 2);
                    AMX_LOAD(6, b0, (int)pair_row_elements * 2);
                    AMX_LOAD(7, b1, b1_stride);
                    AMX_DP(0, 4, 6);
                    AMX_DP(1, 4, 7);
                    AMX_DP(2, 5, 6);
                    AMX_DP(3, 5, 7);
                }
                AMX_STORE(0, AMX_C_SOURCE(0), AMX_C_STRIDE(0));
                AMX_STORE(1, AMX_C_SOURCE(1), AMX_C_STRIDE(1));
                AMX_STORE(2, AMX_C_SOURCE(2), AMX_C_STRIDE(2));
                AMX_STORE(3, AMX_C_SOURCE(3), AMX_C_STRIDE(3));
#undef AMX_C_SOURCE
#undef AMX_C_STRIDE
                for (int h = 0; h < 2; ++h)
                    for (int j = 0; j < 2; ++j) {
                        const int t = 2 * h + j;
                        if (!direct[t])
                            AMX_NAME(copy_out)(out_stage[t], row_count[h], element_count[j],
                                               out[t], accumulator_stride);
                    }
            }
        }
    }
}

/* Per-inclusion settings end here (the next inclusion sets its own). */
#undef AMX_DP
#undef AMX_ROUND_ROW
#undef AMX_F16
