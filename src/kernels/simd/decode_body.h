/*
 * decode_body.h — the float32 decode kernels of the registry (kernels/registry.h, decode
 * part) written once over vec.h, compiled per width by src/kernels/avx2/decode_avx2.c and
 * src/kernels/avx512/decode_avx512.c, which name them in their tables (each file adds its
 * width's kernels that read bfloat16 and 8-bit storage in place). The float32 score and
 * value kernels read IEEE half and bfloat16 storage in place too (score_chunk_f16,
 * accumulate_chunk_f16, score_chunk_bf16_widened, accumulate_chunk_bf16_widened: the same
 * code, each element widened exactly as it is loaded).
 *
 * Decoding reads every cached key and value once per step, so the kernel must keep up with
 * the memory stream (for MHA the keys are read key after key: one sequential stream), and
 * with GQA / MQA / MLA it must also serve many query rows per key (4 rows for Hq = 32,
 * Hkv = 8; 32 for MQA; 128 for MLA): then the arithmetic (a small matrix product per chunk)
 * must leave the memory stream room to run, and the number of loads per FMA decides the
 * speed. Hence:
 *  - scores: blocks of VLANES dot products (4 rows x VLANES/4 keys, 2 x VLANES/2 or
 *    1 x VLANES, whichever fits the group), each kept as a VLANES-lane partial sum over the
 *    head dimension and reduced together by one fixed transpose-and-add tree (no per-dot
 *    horizontal sum). Groups of >= DIMENSION_MAJOR_ROWS rows read the keys dimension-major:
 *    every loaded key vector serves 4 (2) rows and every loaded query vector all keys of the
 *    block, from registers; smaller groups read key after key (a single sequential stream);
 *  - softmax: the online-softmax step of a row on whole vectors with vf_exp2 (e^x as
 *    2^(x·log2 e), vmath.h), SOFTMAX_ROWS rows at a time in phases so that the rows' chains
 *    overlap;
 *  - values: blocks of VALUE_ROWS rows x VALUE_VECTORS vectors of value floats (3 x 128 =
 *    24 zmm accumulators at 16 lanes, each value row read whole and in order; 2 x 32 = 8 ymm
 *    at 8 lanes), the rescale of the accumulator fused into its load;
 *  - software prefetch of the keys and values LOOKAHEAD rows ahead for groups of >= 2 rows
 *    (see LOOKAHEAD): without it the core waits on memory during most of its arithmetic, at
 *    8 lanes as at 16 (bench/results/intel-xeon-avx512.md has the AVX2 registry's runs).
 *  - large groups (>= ATTN_DECODE_GROUP_ROWS: MQA, MLA) take the *_group kernels at the end
 *    of this file instead: the query rows as vector lanes, so a block of rows x keys (or
 *    rows x value dimensions) needs no reduction tree and reads each key / value once per
 *    48 rows; widen_rows converts a chunk of 16-bit rows for them in one call.
 * Deterministic: a fixed operation order for any input and thread count.
 */
#include <math.h>

#include "kernels/half.h"
#include "kernels/registry.h"
#include "kernels/simd/vmath.h"
#if ATTN_VEC_WIDTH == 16
#endif

#if VLANES == 16
/* Groups of at least DIMENSION_MAJOR_ROWS rows score dimension-major (see score_block): once
 * the keys are prefetched, each loaded key vector serving several rows beats key-major. */
enum { DIMENSION_MAJOR_ROWS = 3, DECODE_PREFETCH = 1, VALUE_ROWS = 3, VALUE_VECTORS = 8 };
#else
enum { DIMENSION_MAJOR_ROWS = 2, DECODE_PREFETCH = 1, VALUE_ROWS = 2, VALUE_VECTORS = 4 };
#endif

/* Software prefetch. With a group of several rows each key costs many FMAs, and the hardware
 * prefetcher alone then leaves the core waiting on its loads (most cycles at the first use of
 * a key, memory idle during the arithmetic). So the pass that reads keys (values) from memory
 * requests the row LOOKAHEAD rows ahead of the one it uses, past the end of the chunk too:
 * rows are contiguous within a page, so that is the next chunk (a prefetch never faults; at a
 * page end it is wasted). The hint T1 (into L2) and LOOKAHEAD are tuned: the fastest of the
 * hints T0 / T1 / NTA and of the distances 8 to 64 rows. One row per key (MHA, below
 * PREFETCH_ROWS) is a plain stream the hardware prefetcher follows, so it is left to it. */
enum { LOOKAHEAD = 16, PREFETCH_ROWS = 2 };

/* One 64-byte line into L1 (into_l1, a constant) or L2. */
V_INLINE void prefetch_line(uintptr_t address, const int into_l1) {
    if (into_l1) _mm_prefetch((const char *)address, _MM_HINT_T0);
    else _mm_prefetch((const char *)address, _MM_HINT_T1);
}

/* The lines [address, address + span) in order, one request a loop step: four a step issue
 * the same requests in bursts, slower on Zen 4's token-major pages (bench/results/amd-zen4.md,
 * "Decode and serving against 877d471"). */
V_INLINE void prefetch_span(uintptr_t address, int64_t span, const int into_l1) {
    for (int64_t offset = 0; offset < span; offset += 64)
        prefetch_line(address + (uintptr_t)offset, into_l1);
}

/* Requests the first `bytes` bytes of rows [first, first + count) of `stride` bytes after
 * `base` (which may lie past the pool: the addresses are formed as integers, and a prefetch
 * never faults) into L1 (into_l1, a constant) or L2: a request per 64-byte line, contiguous
 * rows (stride == bytes) as one span (a loop per row would add instructions to kernels whose
 * speed is their instruction count). */
V_INLINE void prefetch_rows(const void *base, int64_t first, int count, int64_t stride,
                            int64_t bytes, const int into_l1) {
    uintptr_t row = (uintptr_t)base + (uintptr_t)(first * stride);
    const int64_t span = stride == bytes ? (int64_t)count * bytes : bytes;
    for (int r = 0; r < (stride == bytes ? 1 : count); ++r, row += (uintptr_t)stride)
        prefetch_span(row, span, into_l1);
}

/* The stored row `lookahead` rows after row c of a chunk of `count` rows at `base`, `stride`
 * bytes apart (row_ahead: its address; prefetch_row_or_next: requests `bytes` bytes of it
 * into L1 (into_l1, a constant) or L2). Past the chunk's end the row lies in the next chunk,
 * whose rows start at `next`, as far into it as it would lie past the end (lookahead <
 * count), else its row c (one chunk ahead: the chunk after the next is unknown here); none
 * (NULL) when next is NULL. The decode loop finds the next chunk through the block table
 * (registry.h keys_ahead / values_ahead): with pages of 16 tokens the rows past a chunk lie in
 * another page, in a shuffled pool another sequence's. */
V_INLINE const char *row_ahead(const void *base, const void *next, int c, const int lookahead,
                               int count, int64_t stride) {
    int64_t row = (int64_t)c + lookahead;
    if (row >= count) {
        if (next == NULL) return NULL;
        base = next, row = lookahead >= count ? c : row - count;
    }
    return (const char *)((uintptr_t)base + (uintptr_t)(row * stride)); /* (as prefetch_rows) */
}

V_INLINE void prefetch_row_or_next(const void *base, const void *next, int c, const int lookahead,
                                   int count, int64_t stride, int64_t bytes, const int into_l1) {
    const char *row = row_ahead(base, next, c, lookahead, count, stride);
    if (row != NULL) prefetch_rows(row, 0, 1, stride, bytes, into_l1);
}

/* Row c of `ahead` (registry.h attn_rows_ahead) into L2: the fp8 score kernels request each
 * key's value row as they score the key, so that the P · V after them finds the chunk's
 * values in L2 (docs/inference.md, "Quantized KV cache (int8, fp8)"). */
V_INLINE void prefetch_row_ahead(const attn_rows_ahead *ahead, int c) {
    prefetch_span((uintptr_t)ahead->rows + (uintptr_t)((int64_t)c * ahead->stride), ahead->bytes, 0);
}

/* key[k] = row c0 + k of `stride` bytes after keys, k < block_keys; past count the last
 * row again (a block's lanes there are dropped). */
V_INLINE void q8_block_keys(const void *keys, int c0, const int block_keys, int count,
                            int64_t stride, const uint8_t **key) {
    const uint8_t *first = (const uint8_t *)keys + c0 * stride;
    if (c0 + block_keys <= count)
        for (int k = 0; k < block_keys; ++k) key[k] = first + k * stride;
    else
        for (int k = 0; k < block_keys; ++k) key[k] = first + (c0 + k < count ? k : count - 1 - c0) * stride;
}

/* The first `lanes` floats of p (lanes may exceed VLANES), zeros elsewhere. At 8 lanes a
 * whole vector is a plain load (a masked one costs more there). */
V_INLINE vf load_first(const float *p, int lanes) {
#if VLANES == 8
    if (lanes >= 8) return vf_loadu(p);
#endif
    return vf_maskz_loadu(vmask_first(lanes), p);
}

/* Lane a of the result = the sum of the VLANES lanes of v[a], by a fixed tree. The trees
 * differ by width (the shuffles that exist): at 8 lanes hadd pairs then the 128-bit halves;
 * at 16 lanes 256-bit halves, then 128-bit quarters (shuffle_f32x4), then within 128 bits
 * (unpack). */
#if VLANES == 16
V_INLINE vf transpose_reduce(const vf v[16]) { return attn_transpose_reduce16(v); }
#else
V_INLINE vf transpose_reduce(const vf v[8]) {
    const vf low = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const vf high = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return vf_add(_mm256_permute2f128_ps(low, high, 0x20), _mm256_permute2f128_ps(low, high, 0x31));
}
#endif

/* target[e] = float(source[e]) for bfloat16 source: zero-extend to 32 bits, shift up. */
static void bf16_to_f32(int64_t count, const uint16_t *source, float *target) {
    int64_t e = 0;
    for (; e + VLANES <= count; e += VLANES) {
#if VLANES == 16
        const vi wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(source + e)));
#else
        const vi wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(source + e)));
#endif
        vf_storeu(target + e, vi_as_vf(vi_slli(wide, 16)));
    }
    for (; e < count; ++e) target[e] = attn_bf16_to_float(source[e]);
}

/* target[e] = float(source[e]) for IEEE half source: vcvtph2ps (part of AVX-512F at 16
 * lanes; F16C, which the AVX2 registry requires, at 8), exact. */
static void f16_to_f32(int64_t count, const uint16_t *source, float *target) {
    int64_t e = 0;
#if VLANES == 16
    for (; e + 16 <= count; e += 16)
        vf_storeu(target + e, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(source + e))));
    if (e < count) {
        const vmask tail = vmask_first((int)(count - e));
        vf_mask_storeu(target + e, tail,
                       _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail, source + e)));
        return;
    }
#else
    for (; e + 8 <= count; e += 8)
        vf_storeu(target + e, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(source + e))));
#endif
    for (; e < count; ++e) target[e] = attn_f16_to_float(source[e]);
}

/* ---- Stored rows of float32, IEEE half or bfloat16, read in place ----
 * The score and value kernels below read keys and values through load_stored: float32 rows
 * as they are, or (`stored`, a constant) IEEE half rows widened in registers by vcvtph2ps
 * (STORED_F16: the F16 storage of small groups, registry.h score_chunk_f16) or bfloat16 rows
 * widened by a 16-bit shift (STORED_BF16: groups of more rows on token-major pages,
 * score_chunk_bf16_widened), exactly. The operations and their order are those of the
 * float32 kernels on the widened values, so a 16-bit chunk read in place gives the bits of
 * widen_rows followed by score_chunk / accumulate_chunk. Only the 16-lane registry names
 * them: at 8 lanes the widening in registers costs more than converting each chunk once
 * (widen_rows), for groups of 2 rows too. */
enum { STORED_F32 = 0, STORED_F16 = 1, STORED_BF16 = 2 };

#if VLANES == 16
/* The halves p[0 .. lanes) as floats, zeros past lanes (lanes may exceed VLANES). */
V_INLINE vf load_half(const uint16_t *p, int lanes) {
    if (lanes >= 16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(vmask_first(lanes), p));
}

/* The bfloat16 values p[0 .. lanes) as floats (each the upper half of its float's bits, as
 * bf16_to_f32 widens them), zeros past lanes (lanes may exceed VLANES). */
V_INLINE vf load_bf16(const uint16_t *p, int lanes) {
    const __m256i bits = lanes >= 16 ? _mm256_loadu_si256((const __m256i *)p)
                                     : _mm256_maskz_loadu_epi16(vmask_first(lanes), p);
    return vi_as_vf(vi_slli(_mm512_cvtepu16_epi32(bits), 16));
}
#endif

/* Elements [index, index + lanes) of a stored row (float32, or `stored` 16-bit at 16 lanes)
 * as floats, zeros past lanes. */
V_INLINE vf load_stored(const void *row, int64_t index, int lanes, const int stored) {
#if VLANES == 16
    if (stored == STORED_F16) return load_half((const uint16_t *)row + index, lanes);
    if (stored == STORED_BF16) return load_bf16((const uint16_t *)row + index, lanes);
#else
    (void)stored; /* (float32 only: no 16-bit in-place kernels at 8 lanes) */
#endif
    return load_first((const float *)row + index, lanes);
}

/* VLANES dot products over `dim`: block_rows query rows x block_keys stored keys (float32,
 * or `stored` 16-bit; block_rows * block_keys = VLANES). out[r * block_keys + k] =
 * row[r] . key[k]. key_major: each key is read whole before the next, a purely sequential
 * stream (the query vectors are reloaded from L1 for each key); else dimension-major: each
 * loaded key vector serves all rows of the block and each loaded query vector all keys, from
 * registers. */
V_INLINE void score_block(const int block_rows, const int block_keys, const int key_major,
                          const int stored, int dim, const float *const *row,
                          const void *const *key, float *out) {
    vf sums[VLANES];
    for (int a = 0; a < VLANES; ++a) sums[a] = vf_zero();
    if (key_major) {
        for (int k = 0; k < block_keys; ++k)
            for (int d = 0; d < dim; d += VLANES) {
                const vf key_vector = load_stored(key[k], d, dim - d, stored);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] = vf_fmadd(load_first(row[r] + d, dim - d),
                                                        key_vector, sums[r * block_keys + k]);
            }
    } else {
        for (int d = 0; d < dim; d += VLANES) {
            vf query[4];
            for (int r = 0; r < block_rows; ++r) query[r] = load_first(row[r] + d, dim - d);
            for (int k = 0; k < block_keys; ++k) {
                const vf key_vector = load_stored(key[k], d, dim - d, stored);
                for (int r = 0; r < block_rows; ++r)
                    sums[r * block_keys + k] =
                        vf_fmadd(query[r], key_vector, sums[r * block_keys + k]);
            }
        }
    }
    vf_storeu(out, transpose_reduce(sums));
}

/* Lanes [r * VLANES / 4, (r + 1) * VLANES / 4) of `block` (row r of a block of 4 rows x
 * VLANES / 4 keys) to scores + r * ATTN_DECODE_CHUNK, r < 4: a quarter register a row. */
V_INLINE void store_block_rows(vf block, float *scores) {
#if VLANES == 16
    _mm_storeu_ps(scores, _mm512_extractf32x4_ps(block, 0));
    _mm_storeu_ps(scores + ATTN_DECODE_CHUNK, _mm512_extractf32x4_ps(block, 1));
    _mm_storeu_ps(scores + 2 * ATTN_DECODE_CHUNK, _mm512_extractf32x4_ps(block, 2));
    _mm_storeu_ps(scores + 3 * ATTN_DECODE_CHUNK, _mm512_extractf32x4_ps(block, 3));
#else
    const __m128 low = _mm256_castps256_ps128(block), high = _mm256_extractf128_ps(block, 1);
    _mm_storel_pi((__m64 *)scores, low);
    _mm_storeh_pi((__m64 *)(scores + ATTN_DECODE_CHUNK), low);
    _mm_storel_pi((__m64 *)(scores + 2 * ATTN_DECODE_CHUNK), high);
    _mm_storeh_pi((__m64 *)(scores + 3 * ATTN_DECODE_CHUNK), high);
#endif
}

/* A whole block of score_stored_chunk: rows r0 .. r0 + 3 (queries at `queries`) x keys
 * c0 .. c0 + VLANES / 4, all inside the chunk, with the block's bookkeeping unrolled (the
 * same dot products, in the same order, as the general block). */
V_INLINE void score_whole_block(const int stored, int count, int dim, const float *queries,
                                const void *keys, int64_t key_bytes, int c0, int prefetch,
                                float *scores, const void *keys_ahead) {
    enum { KEYS = VLANES / 4 };
    const float *row[4] = {queries, queries + dim, queries + 2 * dim, queries + 3 * dim};
    const void *key[KEYS];
    for (int k = 0; k < KEYS; ++k) key[k] = (const char *)keys + (c0 + k) * key_bytes;
    if (DECODE_PREFETCH && prefetch)
        for (int k = 0; k < KEYS; ++k)
            prefetch_row_or_next(keys, keys_ahead, c0 + k, LOOKAHEAD, count, key_bytes,
                                 dim * (stored != STORED_F32 ? 2 : 4), 0);
    float out[VLANES];
    score_block(4, KEYS, 0, stored, dim, row, key, out);
    store_block_rows(vf_loadu(out), scores + c0);
}

/* scores[r * ATTN_DECODE_CHUNK + c] = queries[r] . keys[c] for stored keys of
 * `element_size` bytes (4: float32; 2: `stored` 16-bit), key_stride elements apart. */
V_INLINE void score_stored_chunk(const int stored, int rows, int count, int dim,
                                 const float *queries, const void *keys, int64_t key_stride,
                                 float *scores, const void *keys_ahead) {
    const int64_t element_size = stored != STORED_F32 ? 2 : 4;
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = VLANES / block_rows;
    for (int r0 = 0; r0 < rows; r0 += block_rows)
        for (int c0 = 0; c0 < count; c0 += block_keys) {
            if (block_rows == 4 && r0 + 4 <= rows && c0 + block_keys <= count) {
                score_whole_block(stored, count, dim, queries + (int64_t)r0 * dim, keys,
                                  key_stride * element_size, c0,
                                  r0 == 0 && rows >= PREFETCH_ROWS,
                                  scores + r0 * ATTN_DECODE_CHUNK, keys_ahead);
                continue;
            }
            /* Rows / keys past the end repeat the last one; their results are dropped. */
            const float *row[4];
            const void *key[VLANES];
            for (int r = 0; r < block_rows; ++r)
                row[r] = queries + (int64_t)(r0 + r < rows ? r0 + r : rows - 1) * dim;
            for (int k = 0; k < block_keys; ++k)
                key[k] = (const char *)keys +
                         (c0 + k < count ? c0 + k : count - 1) * key_stride * element_size;
            if (DECODE_PREFETCH && r0 == 0 && rows >= PREFETCH_ROWS) /* the pass that reads keys */
                for (int k = 0; k < block_keys; ++k)
                    prefetch_row_or_next(keys, keys_ahead, c0 + k, LOOKAHEAD, count,
                                         key_stride * element_size, dim * element_size, 0);
            float out[VLANES];
            /* 4 rows: always >= DIMENSION_MAJOR_ROWS; 1 row: always key after key */
            if (block_rows == 4) score_block(4, VLANES / 4, 0, stored, dim, row, key, out);
            else if (block_rows == 2)
                score_block(2, VLANES / 2, 2 < DIMENSION_MAJOR_ROWS, stored, dim, row, key, out);
            else score_block(1, VLANES, 1, stored, dim, row, key, out);
            for (int r = 0; r < block_rows && r0 + r < rows; ++r)
                for (int k = 0; k < block_keys && c0 + k < count; ++k)
                    scores[(r0 + r) * ATTN_DECODE_CHUNK + c0 + k] = out[r * block_keys + k];
        }
}

/* score_chunk (registry.h) for float32 keys. */
static void score_chunk(int rows, int count, int dim, const float *queries, const float *keys,
                        int64_t key_stride, float *scores, const float *keys_ahead) {
    score_stored_chunk(STORED_F32, rows, count, dim, queries, keys, key_stride, scores,
                       keys_ahead);
}

#if VLANES == 16
/* score_chunk_f16 (registry.h): IEEE half keys read in place, the bits of score_chunk on
 * them widened. */
static void score_chunk_f16(int rows, int count, int dim, const float *queries,
                            const uint16_t *keys, int64_t key_stride, float *scores,
                            const uint16_t *keys_ahead) {
    score_stored_chunk(STORED_F16, rows, count, dim, queries, keys, key_stride, scores,
                       keys_ahead);
}

/* score_chunk_bf16_widened (registry.h): bfloat16 keys read in place, the bits of
 * score_chunk on them widened. */
static void score_chunk_bf16_widened(int rows, int count, int dim, const float *queries,
                                     const uint16_t *keys, int64_t key_stride, float *scores,
                                     const uint16_t *keys_ahead) {
    score_stored_chunk(STORED_BF16, rows, count, dim, queries, keys, key_stride, scores,
                       keys_ahead);
}
#endif

/* The online-softmax step (registry.h) of one chunk, each row held in registers, the rows
 * SOFTMAX_ROWS at a time in phases (all maxima, then all exponentials, then the row
 * statistics): a row's chain of maximum, reduction, shift and exponentials does not wait
 * for the previous row's. Each row takes the same operations as one row alone. p is written
 * as P_TYPE asks (vf_softmax_p_as); the sums take it unrounded. */
#define SOFTMAX_ROWS (VLANES == 16 ? 4 : 2) /* rows x ATTN_DECODE_CHUNK floats in registers */
V_INLINE void softmax_rows(const attn_dtype P_TYPE, const int block_rows, int count, float scale,
                           float *scores, float *row_max, float *row_sum, float *rescale) {
    enum { VECTORS = ATTN_DECODE_CHUNK / VLANES };
    const int vectors = (count + VLANES - 1) / VLANES;
    vmask masks[VECTORS];
    for (int v = 0; v < VECTORS; ++v) masks[v] = vmask_first(count - VLANES * v);
    const vf minus_infinity = vf_set1(-INFINITY), scale_vector = vf_set1(scale),
             log2e = vf_set1(VMATH_LOG2E);
    vf logits[SOFTMAX_ROWS][VECTORS], sums[SOFTMAX_ROWS];
    float old_max[SOFTMAX_ROWS], new_max[SOFTMAX_ROWS], use_max[SOFTMAX_ROWS];
    int nan_rows = 0; /* bit r: a NaN logit in row r (the maximum and vf_exp2 drop NaN) */
    for (int r = 0; r < block_rows; ++r) {
        const float *row = scores + r * ATTN_DECODE_CHUNK;
        vf maximum = minus_infinity;
        vmask nan = vf_is_nan(minus_infinity);
        for (int v = 0; v < vectors; ++v) { /* lanes past the chunk are masked keys */
            logits[r][v] =
                vf_mul(vf_mask_loadu_or(minus_infinity, masks[v], row + VLANES * v), scale_vector);
            maximum = vf_max(maximum, logits[r][v]);
            nan = vmask_or(nan, vf_is_nan(logits[r][v]));
        }
        const float chunk_max = vf_reduce_max(maximum);
        nan_rows |= (vmask_any(nan) || chunk_max == INFINITY) << r; /* (+inf - +inf: NaN) */
        old_max[r] = row_max[r];
        new_max[r] = chunk_max > old_max[r] ? chunk_max : old_max[r];
        use_max[r] = new_max[r] == -INFINITY ? 0.0f : new_max[r];
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = scores + r * ATTN_DECODE_CHUNK;
        const vf shift = vf_set1(use_max[r]);
        sums[r] = vf_zero();
        for (int v = 0; v < vectors; ++v) {
            const vf p = vf_exp2(vf_mul(vf_sub(logits[r][v], shift), log2e)); /* -inf -> 0 */
            sums[r] = vf_add(sums[r], p);
            vf_mask_storeu(row + VLANES * v, masks[v], vf_softmax_p_as(P_TYPE, p));
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        rescale[r] = attn_softmax_rescale(old_max[r], use_max[r]);
        row_sum[r] = rescale[r] * row_sum[r] + vf_reduce_add(sums[r]);
        row_max[r] = new_max[r];
        if (nan_rows >> r & 1) /* NaN from here on: O and LSE of the row (registry.h) */
            rescale[r] = row_sum[r] = row_max[r] = NAN;
    }
}

V_INLINE void softmax_chunk_as(const attn_dtype P_TYPE, int rows, int count, float scale,
                               float *scores, float *row_max, float *row_sum, float *rescale) {
    int r = 0;
    for (; r + SOFTMAX_ROWS <= rows; r += SOFTMAX_ROWS)
        softmax_rows(P_TYPE, SOFTMAX_ROWS, count, scale, scores + r * ATTN_DECODE_CHUNK,
                     row_max + r, row_sum + r, rescale + r);
    for (; r < rows; ++r)
        softmax_rows(P_TYPE, 1, count, scale, scores + r * ATTN_DECODE_CHUNK, row_max + r,
                     row_sum + r, rescale + r);
}

static void softmax_chunk(int rows, int count, float scale, float *scores, attn_dtype p_type,
                          float *row_max, float *row_sum, float *rescale) {
    if (p_type == ATTN_DTYPE_BF16)
        softmax_chunk_as(ATTN_DTYPE_BF16, rows, count, scale, scores, row_max, row_sum, rescale);
    else if (p_type == ATTN_DTYPE_F16)
        softmax_chunk_as(ATTN_DTYPE_F16, rows, count, scale, scores, row_max, row_sum, rescale);
    else
        softmax_chunk_as(ATTN_DTYPE_F32, rows, count, scale, scores, row_max, row_sum, rescale);
}

/* accumulator rows [block_rows][dim], columns [e0, e0 + width) with width <= VLANES *
 * vectors: acc = rescale * acc + sum_c weight[r][c] * values[c] for stored values (float32,
 * or `stored` 16-bit), value_stride elements apart. whole (a constant): width is VLANES *
 * vectors, so float32 rows are read and written in whole vectors (the same values as the
 * masked forms, fewer instructions at 8 lanes). */
V_INLINE void accumulate_block(const int block_rows, const int vectors, const int stored,
                               int count, int e0, int width, int dim, const float *weights,
                               const float *rescale, const void *values, int64_t value_stride,
                               float *accumulator, const int prefetch, const void *values_ahead,
                               const int whole) {
    const int64_t element_size = stored != STORED_F32 ? 2 : 4;
    vmask masks[VALUE_VECTORS];
    for (int x = 0; x < vectors; ++x) masks[x] = vmask_first(whole ? VLANES : width - VLANES * x);
    vf sums[VALUE_ROWS][VALUE_VECTORS];
    for (int r = 0; r < block_rows; ++r) {
        const vf factor = vf_set1(rescale[r]);
        const float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x)
            sums[r][x] = vf_mul(factor, whole ? vf_loadu(row + VLANES * x)
                                              : vf_maskz_loadu(masks[x], row + VLANES * x));
    }
    for (int c = 0; c < count; ++c) {
        vf weight[VALUE_ROWS];
        for (int r = 0; r < block_rows; ++r)
            weight[r] = vf_set1(weights[r * ATTN_DECODE_CHUNK + c]);
        const char *value = (const char *)values + (c * value_stride + e0) * element_size;
        if (DECODE_PREFETCH && prefetch)
            prefetch_row_or_next(values, values_ahead, c, LOOKAHEAD, count,
                                 value_stride * element_size, dim * element_size, 0);
        for (int x = 0; x < vectors; ++x) {
            const vf value_vector =
                stored == STORED_F32
                    ? (whole ? vf_loadu((const float *)value + VLANES * x)
                             : vf_maskz_loadu(masks[x], (const float *)value + VLANES * x))
                    : load_stored(value, VLANES * x, width - VLANES * x, stored);
            for (int r = 0; r < block_rows; ++r)
                sums[r][x] = vf_fmadd(weight[r], value_vector, sums[r][x]);
        }
    }
    for (int r = 0; r < block_rows; ++r) {
        float *row = accumulator + (int64_t)r * dim + e0;
        for (int x = 0; x < vectors; ++x) {
            if (whole) vf_storeu(row + VLANES * x, sums[r][x]);
            else vf_mask_storeu(row + VLANES * x, masks[x], sums[r][x]);
        }
    }
}

/* Rows [0, block_rows) of accumulate_chunk over all of dim, in column blocks of
 * VLANES * VALUE_VECTORS floats. */
V_INLINE void accumulate_rows(const int block_rows, const int stored, int count, int dim,
                              const float *weights, const float *rescale, const void *values,
                              int64_t value_stride, float *accumulator, int prefetch,
                              const void *values_ahead) {
    enum { BLOCK = VLANES * VALUE_VECTORS };
    for (int e0 = 0; e0 < dim; e0 += BLOCK) {
        const int width = dim - e0 < BLOCK ? dim - e0 : BLOCK;
        /* (the prefetch request and whole vectors: constants inside each block) */
        if (prefetch && e0 == 0 && width == BLOCK)
            accumulate_block(block_rows, VALUE_VECTORS, stored, count, e0, width, dim, weights,
                             rescale, values, value_stride, accumulator, 1, values_ahead, 1);
        else if (prefetch && e0 == 0)
            accumulate_block(block_rows, VALUE_VECTORS, stored, count, e0, width, dim, weights,
                             rescale, values, value_stride, accumulator, 1, values_ahead, 0);
        else if (width == BLOCK)
            accumulate_block(block_rows, VALUE_VECTORS, stored, count, e0, width, dim, weights,
                             rescale, values, value_stride, accumulator, 0, values_ahead, 1);
        else
            accumulate_block(block_rows, VALUE_VECTORS, stored, count, e0, width, dim, weights,
                             rescale, values, value_stride, accumulator, 0, values_ahead, 0);
    }
}

/* accumulate_chunk for stored values (float32, or `stored` 16-bit): blocks of
 * VALUE_ROWS rows (the first block reads each value row whole, in order), then the remaining
 * rows. (At 16 lanes, blocks of 4 rows x 64 floats need fewer loads but read each value row
 * in two strided passes, which streamed values pay for.) */
V_INLINE void accumulate_stored_chunk(const int stored, int rows, int count, int dim,
                                      const float *weights, const float *rescale,
                                      const void *values, int64_t value_stride,
                                      float *accumulator, const void *values_ahead) {
    const int prefetch = rows >= PREFETCH_ROWS; /* by the first block, which reads memory */
    int r = 0;
    for (; r + VALUE_ROWS <= rows; r += VALUE_ROWS)
        accumulate_rows(VALUE_ROWS, stored, count, dim, weights + r * ATTN_DECODE_CHUNK,
                        rescale + r, values, value_stride, accumulator + (int64_t)r * dim,
                        prefetch && r == 0, values_ahead);
    const float *tail_weights = weights + r * ATTN_DECODE_CHUNK;
    float *tail = accumulator + (int64_t)r * dim;
    if (rows - r == 2) /* only when VALUE_ROWS is 3 */
        accumulate_rows(2, stored, count, dim, tail_weights, rescale + r, values, value_stride,
                        tail, prefetch && r == 0, values_ahead);
    else if (rows - r == 1)
        accumulate_rows(1, stored, count, dim, tail_weights, rescale + r, values, value_stride,
                        tail, prefetch && r == 0, values_ahead);
}

/* accumulate_chunk (registry.h) for float32 values. */
static void accumulate_chunk(int rows, int count, int dim, const float *weights,
                             const float *rescale, const float *values, int64_t value_stride,
                             float *accumulator, const float *values_ahead) {
    accumulate_stored_chunk(STORED_F32, rows, count, dim, weights, rescale, values,
                            value_stride, accumulator, values_ahead);
}

#if VLANES == 16
/* accumulate_chunk_f16 (registry.h): IEEE half values read in place, the bits of
 * accumulate_chunk on them widened. */
static void accumulate_chunk_f16(int rows, int count, int dim, const float *weights,
                                 const float *rescale, const uint16_t *values,
                                 int64_t value_stride, float *accumulator,
                                 const uint16_t *values_ahead) {
    accumulate_stored_chunk(STORED_F16, rows, count, dim, weights, rescale, values,
                            value_stride, accumulator, values_ahead);
}

/* accumulate_chunk_bf16_widened (registry.h): bfloat16 values read in place, the bits of
 * accumulate_chunk on them widened. */
static void accumulate_chunk_bf16_widened(int rows, int count, int dim, const float *weights,
                                          const float *rescale, const uint16_t *values,
                                          int64_t value_stride, float *accumulator,
                                          const uint16_t *values_ahead) {
    accumulate_stored_chunk(STORED_BF16, rows, count, dim, weights, rescale, values,
                            value_stride, accumulator, values_ahead);
}
#endif

/* ---- 16-bit storage widened a chunk at a time ----
 * widen_rows (registry.h): `count` stored rows of `dim` bfloat16 / half elements, `stride`
 * apart, into dense float32 rows, in one call per chunk (strided rows, as in a token-major
 * page [page, slot, head, D], cost one call per row before). */
static void widen_rows(attn_dtype dtype, int count, int dim, const uint16_t *source,
                       int64_t stride, float *target, const uint16_t *rows_ahead) {
    void (*convert)(int64_t, const uint16_t *, float *) =
        dtype == ATTN_DTYPE_BF16 ? bf16_to_f32 : f16_to_f32;
    if (stride == dim && rows_ahead == NULL) { /* contiguous rows: one pass */
        convert((int64_t)count * dim, source, target);
        return;
    }
    for (int c = 0; c < count; ++c) {
        if (rows_ahead != NULL) /* the next chunk's row c (registry.h dequantize_rows) */
            prefetch_rows(rows_ahead, c, 1, stride * 2, dim * 2, 0);
        convert(dim, source + c * stride, target + (int64_t)c * dim);
    }
}

/* ---- large groups (rows >= ATTN_DECODE_GROUP_ROWS): the query rows as vector lanes ----
 * A group of many rows (32 for MQA at Hq = 32, 128 for MLA) against one chunk is a small
 * matrix product, scores [rows x count] = Q [rows x dim] . K^T. Instead of VLANES-lane
 * partial dot products reduced by a transpose-and-add tree (score_block: about 45 shuffles
 * and adds per 16 dot products of 8 FMAs each at D = 128), the queries are prepared once per
 * task transposed, prepared[d][row] (prepare_group_queries), so that one vector holds
 * dimension d of VLANES rows: a block of GROUP_VECTORS row vectors x GROUP_KEYS keys keeps
 * its GROUP_VECTORS * GROUP_KEYS sums in registers, and each step d loads GROUP_VECTORS
 * query vectors and broadcasts GROUP_KEYS key elements (a memory operand of the FMA at 16
 * lanes): GROUP_VECTORS * GROUP_KEYS FMAs per GROUP_VECTORS + GROUP_KEYS loads, no
 * reduction. Each sum is one sequential chain over d (deterministic). The sums of a row
 * block are stored key-major into a tile and transposed into the scores' row-major layout,
 * VLANES x VLANES at a time (about 1.5% of the FMAs for 32 rows). */
#if VLANES == 16
enum { GROUP_VECTORS = 3, GROUP_KEYS = 8 }; /* 24 zmm sums + 3 query vectors */
#else
enum { GROUP_VECTORS = 2, GROUP_KEYS = 4 }; /* 8 ymm sums + 2 query vectors + 1 broadcast */
#endif
enum { GROUP_TILE = GROUP_VECTORS * VLANES }; /* rows per row block (tile row length) */

/* prepared[d * ATTN_DECODE_GROUP_STRIDE(rows) + r] = queries[r * dim + d], 0 for r >= rows. */
static void prepare_group_queries(int rows, int dim, const float *queries, float *prepared) {
    const int stride = ATTN_DECODE_GROUP_STRIDE(rows);
    for (int d = 0; d < dim; ++d) {
        float *column = prepared + (int64_t)d * stride;
        for (int r = 0; r < rows; ++r) column[r] = queries[(int64_t)r * dim + d];
        for (int r = rows; r < stride; ++r) column[r] = 0.0f;
    }
}

/* tile[k * GROUP_TILE + v * VLANES + lane] = sum_d column_d[v * VLANES + lane] * key[k][d]
 * for v < vectors, k < GROUP_KEYS; column_d = prepared + d * stride. */
V_INLINE void group_block(const int vectors, int dim, const float *prepared, int stride,
                          const float *const *key, float *tile) {
    vf sums[GROUP_VECTORS][GROUP_KEYS];
    for (int v = 0; v < vectors; ++v)
        for (int k = 0; k < GROUP_KEYS; ++k) sums[v][k] = vf_zero();
    for (int d = 0; d < dim; ++d) {
        const float *column = prepared + (int64_t)d * stride;
        vf query[GROUP_VECTORS];
        for (int v = 0; v < vectors; ++v) query[v] = vf_loadu(column + v * VLANES);
        for (int k = 0; k < GROUP_KEYS; ++k) {
            const vf element = vf_set1(key[k][d]);
            for (int v = 0; v < vectors; ++v)
                sums[v][k] = vf_fmadd(query[v], element, sums[v][k]);
        }
    }
    for (int k = 0; k < GROUP_KEYS; ++k)
        for (int v = 0; v < vectors; ++v) vf_storeu(tile + k * GROUP_TILE + v * VLANES, sums[v][k]);
}

/* scores[r * ATTN_DECODE_CHUNK + c] = tile[c * GROUP_TILE + r - r0] for r0 <= r < r_end,
 * c < count (columns past count untouched). */
static void store_tile(int r0, int r_end, int count, const float *tile, float *scores) {
    for (int c0 = 0; c0 < count; c0 += VLANES)
        for (int v0 = 0; r0 + v0 < r_end; v0 += VLANES) {
            vf block[VLANES];
            for (int i = 0; i < VLANES; ++i)
                block[i] = c0 + i < count ? vf_loadu(tile + (c0 + i) * GROUP_TILE + v0) : vf_zero();
            vf_transpose_square(block);
            const vmask columns = vmask_first(count - c0);
            for (int j = 0; j < VLANES && r0 + v0 + j < r_end; ++j)
                vf_mask_storeu(scores + (int64_t)(r0 + v0 + j) * ATTN_DECODE_CHUNK + c0, columns,
                               block[j]);
        }
}

/* score_chunk_group (registry.h): scores of float32 keys for queries prepared by
 * prepare_group_queries. */
static void score_chunk_group(int rows, int count, int dim, const float *prepared,
                              const float *keys, int64_t key_stride, float *scores,
                              const float *keys_ahead) {
    const int stride = ATTN_DECODE_GROUP_STRIDE(rows);
    float tile[ATTN_DECODE_CHUNK * GROUP_TILE];
    for (int r0 = 0; r0 < rows; r0 += GROUP_TILE) {
        const int left = (rows - r0 + VLANES - 1) / VLANES;
        const int vectors = left < GROUP_VECTORS ? left : GROUP_VECTORS;
        for (int c0 = 0; c0 < count; c0 += GROUP_KEYS) {
            const float *key[GROUP_KEYS]; /* keys past the end repeat the last one */
            for (int k = 0; k < GROUP_KEYS; ++k)
                key[k] = keys + (c0 + k < count ? c0 + k : count - 1) * key_stride;
            if (DECODE_PREFETCH && r0 == 0) /* the pass that reads the keys */
                for (int k = 0; k < GROUP_KEYS; ++k)
                    prefetch_row_or_next(keys, keys_ahead, c0 + k, LOOKAHEAD, count,
                                         key_stride * 4, dim * 4, 0);
            const float *columns = prepared + r0;
            float *block = tile + c0 * GROUP_TILE;
            if (vectors == GROUP_VECTORS) group_block(GROUP_VECTORS, dim, columns, stride, key, block);
#if VLANES == 16
            else if (vectors == 2) group_block(2, dim, columns, stride, key, block);
#endif
            else group_block(1, dim, columns, stride, key, block);
        }
        store_tile(r0, r0 + vectors * VLANES < rows ? r0 + vectors * VLANES : rows, count, tile,
                   scores);
    }
}

/* The value side of a large group, in the same form: the accumulator of the task is kept
 * transposed, accumulator[e][row] (ATTN_DECODE_GROUP_STRIDE(rows) floats per dimension), the
 * chunk's probabilities are transposed once into a tile [count][GROUP_TILE], and a block of
 * GROUP_VECTORS row vectors x GROUP_KEYS value dimensions keeps its sums in registers: each
 * key loads GROUP_VECTORS probability vectors and broadcasts GROUP_KEYS value elements, so the
 * chunk's values are read once per row block (accumulate_chunk's blocks of VALUE_ROWS rows
 * re-read the whole chunk, 32 KiB at D = 128 in float32, once per VALUE_ROWS rows, from L2). */

/* tile[c * GROUP_TILE + r - r0] = weights[r * ATTN_DECODE_CHUNK + c] for c < count,
 * r0 <= r < r0 + lanes, 0 for rows r >= r_end. */
static void load_tile(int r0, int r_end, int lanes, int count, const float *weights,
                      float *tile) {
    for (int c0 = 0; c0 < count; c0 += VLANES)
        for (int v0 = 0; v0 < lanes; v0 += VLANES) {
            vf block[VLANES];
            const vmask columns = vmask_first(count - c0);
            for (int i = 0; i < VLANES; ++i)
                block[i] = r0 + v0 + i < r_end
                               ? vf_maskz_loadu(columns, weights + (int64_t)(r0 + v0 + i) *
                                                                       ATTN_DECODE_CHUNK + c0)
                               : vf_zero();
            vf_transpose_square(block);
            for (int j = 0; j < VLANES && c0 + j < count; ++j)
                vf_storeu(tile + (c0 + j) * GROUP_TILE + v0, block[j]);
        }
}

/* accumulator[e][v * VLANES + lane] (e < width, v < vectors; rows of `stride` floats) =
 * factor[v] * itself + sum_c tile[c][v * VLANES + lane] * value_c[e]. */
V_INLINE void value_block(const int vectors, const int width, int count, const float *tile,
                          const vf *factor, const float *values, int64_t value_stride,
                          float *accumulator, int stride) {
    vf sums[GROUP_VECTORS][GROUP_KEYS];
    for (int e = 0; e < width; ++e)
        for (int v = 0; v < vectors; ++v)
            sums[v][e] = vf_mul(factor[v], vf_loadu(accumulator + (int64_t)e * stride + v * VLANES));
    for (int c = 0; c < count; ++c) {
        vf weight[GROUP_VECTORS];
        for (int v = 0; v < vectors; ++v) weight[v] = vf_loadu(tile + c * GROUP_TILE + v * VLANES);
        const float *value = values + c * value_stride;
        for (int e = 0; e < width; ++e) {
            const vf element = vf_set1(value[e]);
            for (int v = 0; v < vectors; ++v) sums[v][e] = vf_fmadd(weight[v], element, sums[v][e]);
        }
    }
    for (int e = 0; e < width; ++e)
        for (int v = 0; v < vectors; ++v)
            vf_storeu(accumulator + (int64_t)e * stride + v * VLANES, sums[v][e]);
}

/* Row block [r0, r0 + vectors * VLANES) of accumulate_chunk_group over all of dim. */
V_INLINE void value_rows(const int vectors, int count, int dim, const float *tile,
                         const vf *factor, const float *values, int64_t value_stride,
                         float *accumulator, int stride) {
    int e0 = 0;
    for (; e0 + GROUP_KEYS <= dim; e0 += GROUP_KEYS)
        value_block(vectors, GROUP_KEYS, count, tile, factor, values + e0, value_stride,
                    accumulator + (int64_t)e0 * stride, stride);
    for (; e0 < dim; ++e0) /* the last dim % GROUP_KEYS dimensions, one at a time */
        value_block(vectors, 1, count, tile, factor, values + e0, value_stride,
                    accumulator + (int64_t)e0 * stride, stride);
}

/* accumulate_chunk_group (registry.h): accumulator [dim][ATTN_DECODE_GROUP_STRIDE(rows)]. */
static void accumulate_chunk_group(int rows, int count, int dim, const float *weights,
                                   const float *rescale, const float *values,
                                   int64_t value_stride, float *accumulator) {
    const int stride = ATTN_DECODE_GROUP_STRIDE(rows);
    float tile[ATTN_DECODE_CHUNK * GROUP_TILE];
    for (int r0 = 0; r0 < rows; r0 += GROUP_TILE) {
        const int left = (rows - r0 + VLANES - 1) / VLANES;
        const int vectors = left < GROUP_VECTORS ? left : GROUP_VECTORS;
        const int r_end = r0 + vectors * VLANES < rows ? r0 + vectors * VLANES : rows;
        load_tile(r0, r_end, vectors * VLANES, count, weights, tile);
        vf factor[GROUP_VECTORS]; /* 0 for the padding rows */
        for (int v = 0; v < vectors; ++v)
            factor[v] = vf_maskz_loadu(vmask_first(r_end - r0 - v * VLANES), rescale + r0 + v * VLANES);
        float *block = accumulator + r0;
        if (vectors == GROUP_VECTORS)
            value_rows(GROUP_VECTORS, count, dim, tile, factor, values, value_stride, block, stride);
#if VLANES == 16
        else if (vectors == 2)
            value_rows(2, count, dim, tile, factor, values, value_stride, block, stride);
#endif
        else value_rows(1, count, dim, tile, factor, values, value_stride, block, stride);
    }
}

/* The registry slots this body fills, for the tables of the files that compile it. */
#define DECODE_BODY_SLOTS                                                                  \
    .bf16_to_f32 = bf16_to_f32, .f16_to_f32 = f16_to_f32, .widen_rows = widen_rows,        \
    .score_chunk = score_chunk, .softmax_chunk = softmax_chunk,                             \
    .accumulate_chunk = accumulate_chunk, .prepare_group_queries = prepare_group_queries,  \
    .score_chunk_group = score_chunk_group, .accumulate_chunk_group = accumulate_chunk_group
