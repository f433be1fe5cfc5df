/*
 * decode_q8_int_body.h — the int8 decode kernels in integers (quant.h "Q8 decode arithmetic";
 * registry.h score_chunk_q8 / accumulate_chunk_q8 with ATTN_DTYPE_Q8), written once over
 * vec.h and compiled at each width: included by avx2/decode_q8_avx2.h once (Q8I_VNNI 0) and
 * by avx512/decode_q8_avx512.h twice (Q8I_VNNI 1 and 0), after decode_body.h and
 * decode_bf16_body.h; the including file defines Q8_LOOKAHEAD (and at 16 lanes
 * Q8_PREFETCH_ROWS). Its helpers that do not multiply are defined at the first inclusion;
 * Q8I(name) gives the kernels of a variant their names.
 *
 * Queries (rounded once per task by attn_q8_prepare_queries) and weights as int16, products
 * with the stored int8 elements summed exactly in int32 lanes by the dot-pairs primitive of
 * the variant: VPDPWSSD (Q8I_VNNI 1, 16 lanes only: functions marked target("avx512vnni"),
 * one instruction per 2 * VLANES products) or VPMADDWD + VPADDD (Q8I_VNNI 0). So the results
 * equal attn_q8_score_exact / attn_q8_accumulate_exact bit for bit, as on every registry.
 * A step is 2 * VLANES stored elements, sign-extended byte -> word into one vector; a tail of
 * the head dimension reads 0 past the row (nothing past a row is read).
 *
 * Scores: the pair (2d, 2d + 1) is one 32-bit lane on both sides; blocks of VLANES dot
 * products (4 rows x VLANES / 4 keys, 2 x VLANES / 2, 1 x VLANES), dimension-major, reduced by
 * the transpose tree in integers; (key factor * query scale) multiplies each sum once.
 * Values: the words of keys c and c + 1 interleaved (unpack) against the broadcast weight pair
 * (w[c], w[c + 1]); the unpack works within 128-bit lanes, so that its low / high sums hold
 * dimensions 8L + j / 8L + 4 + j of a step in lane 4L + j (each 16 dimensions as (0-3, 8-11)
 * and (4-7, 12-15)), undone once per chunk when the int32 sums are added to the float
 * accumulator. An odd last key pairs with itself at weight 0 (nothing is read past the chunk).
 * Value blocks of up to 4 rows x Q8I_SEGMENTS steps of columns.
 *
 * What differs by width (the section below): how a step's bytes are loaded with a tail, the
 * integer transpose tree, how int32 lanes are stored as int16, the unpack order's undoing, a
 * score block's stores, the segments of a value block, whether a score step holds the
 * widened keys or the query rows, the shape of the value pair loop (where an odd last key is
 * taken, unrolling), and which passes request rows ahead: at 8 lanes the score
 * pass that reads the keys, and the values through the score kernel's `ahead` (registry.h);
 * at 16 lanes also the P · V pass, the rows of values_ahead.
 */

#ifndef ATTN_DECODE_Q8_INT_BODY_HELPERS
#define ATTN_DECODE_Q8_INT_BODY_HELPERS

/* Widest head dimension whose int32 score lanes hold the sums without overflow (|q16| <=
 * 16383, |k| <= 128: 2^21 per product); wider heads take attn_q8_score_exact. */
#define Q8I_MOST_DIM 1024
/* int16 weights of a row: a chunk padded to an even count. */
#define Q8I_WEIGHT_STRIDE ATTN_DECODE_CHUNK

/* ---- per width ---- */
#if VLANES == 16
/* Steps of accumulator columns a value block holds per row: 4 rows x 2 x 2 sums, 16 of the 32
 * zmm registers. */
#define Q8I_SEGMENTS 2
/* A score step holds the query rows (score_step, below). */
#define Q8I_HOLD_KEYS(block_keys) 0
/* The value pair loop takes an odd last key in the loop (its second row the first again), not
 * unrolled: with a separate last pair or unrolled GCC 12 copies the 16 sums between registers
 * on every pair. */
#define Q8I_ODD_IN_LOOP 1
#define Q8I_PAIR_LOOP
/* Which passes request their rows ahead (see the header comment). */
#define Q8I_REQUEST_KEYS(rows) ((rows) >= Q8_PREFETCH_ROWS)
#define Q8I_REQUEST_VALUES(rows) ((rows) >= Q8_PREFETCH_ROWS)

/* The elements of a step that are loaded. */
typedef __mmask32 q8i_tail;
V_INLINE q8i_tail q8i_tail_of(int elements) { return element_mask(elements); }

/* 32 int8 elements source[0 .. 32) (past the tail: 0, not read) as 32 int16 words. */
V_INLINE vi q8_words(const int8_t *source, q8i_tail tail) {
    return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(tail, source));
}

/* transpose_reduce (decode_body.h) on int32 lanes: lane a = sum of the lanes of v[a]. */
V_INLINE vi transpose_reduce_i32(const vi v[16]) {
    vi w[16], halves[8], quarters[4];
    for (int i = 0; i < 16; ++i) w[i] = v[(i % 4) * 4 + i / 4];
    for (int i = 0; i < 8; ++i)
        halves[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(w[2 * i], w[2 * i + 1], 0x44),
                                     _mm512_shuffle_i32x4(w[2 * i], w[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)
        quarters[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(halves[2 * i], halves[2 * i + 1], 0x88),
                                       _mm512_shuffle_i32x4(halves[2 * i], halves[2 * i + 1], 0xDD));
    const vi pair01 = _mm512_add_epi32(_mm512_unpacklo_epi32(quarters[0], quarters[1]),
                                       _mm512_unpackhi_epi32(quarters[0], quarters[1]));
    const vi pair23 = _mm512_add_epi32(_mm512_unpacklo_epi32(quarters[2], quarters[3]),
                                       _mm512_unpackhi_epi32(quarters[2], quarters[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(pair01, pair23),
                            _mm512_unpackhi_epi64(pair01, pair23));
}

/* target[0 .. 16) = the int32 lanes of q (each |q| <= 32767) as int16. */
V_INLINE void store_words(int16_t *target, vi q) {
    _mm256_storeu_si256((__m256i *)target, _mm512_cvtepi32_epi16(q));
}

/* target[0 .. 32) = the lanes of low, then of high, as int16. */
V_INLINE void store_word_pairs(int16_t *target, vi low, vi high) {
    store_words(target, low);
    store_words(target + 16, high);
}

/* The sums of a step in natural order from the unpack order (see the header comment). */
V_INLINE void unpacked_halves(vf low, vf high, vf halves[2]) {
    const __m512i first_index =
        _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second_index =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    halves[0] = _mm512_permutex2var_ps(low, first_index, high);
    halves[1] = _mm512_permutex2var_ps(low, second_index, high);
}

/* scores[r * ATTN_DECODE_CHUNK + k] = (key_factor[k] * row_factors[a]) * sums[a], a = r *
 * block_keys + k, for r < rows_left, k < keys_left, as attn_q8_score_exact rounds;
 * key_factor is readable for block_keys entries. */
V_INLINE void store_q8_scores(const int block_rows, const int block_keys, int rows_left,
                              int keys_left, const float *key_factor, vf row_factors, vf sums,
                              float *scores) {
    vf factors;
    if (block_keys == 4) factors = _mm512_broadcast_f32x4(_mm_loadu_ps(key_factor));
    else if (block_keys == 8) factors = _mm512_broadcast_f32x8(_mm256_loadu_ps(key_factor));
    else factors = vf_loadu(key_factor);
    const vf result = vf_mul(vf_mul(factors, row_factors), sums);
    const __mmask8 keys = (__mmask8)vmask_first(keys_left);
    if (block_rows == 4) {
        _mm_mask_storeu_ps(scores, keys, _mm512_extractf32x4_ps(result, 0));
        if (rows_left > 1)
            _mm_mask_storeu_ps(scores + ATTN_DECODE_CHUNK, keys, _mm512_extractf32x4_ps(result, 1));
        if (rows_left > 2)
            _mm_mask_storeu_ps(scores + 2 * ATTN_DECODE_CHUNK, keys, _mm512_extractf32x4_ps(result, 2));
        if (rows_left > 3)
            _mm_mask_storeu_ps(scores + 3 * ATTN_DECODE_CHUNK, keys, _mm512_extractf32x4_ps(result, 3));
    } else if (block_rows == 2) { /* (128-bit stores: the emulated build has no 256-bit ones) */
        const __mmask8 high_keys = (__mmask8)(keys >> 4);
        _mm_mask_storeu_ps(scores, keys, _mm512_extractf32x4_ps(result, 0));
        _mm_mask_storeu_ps(scores + 4, high_keys, _mm512_extractf32x4_ps(result, 1));
        if (rows_left > 1) {
            _mm_mask_storeu_ps(scores + ATTN_DECODE_CHUNK, keys, _mm512_extractf32x4_ps(result, 2));
            _mm_mask_storeu_ps(scores + ATTN_DECODE_CHUNK + 4, high_keys, _mm512_extractf32x4_ps(result, 3));
        }
    } else vf_mask_storeu(scores, vmask_first(keys_left), result);
}
#else
/* Steps of accumulator columns a value block holds per row: 4 rows x 1 x 2 sums, 8 of the 16
 * ymm registers. */
#define Q8I_SEGMENTS 1
/* Up to 4 keys a score step holds the widened keys (score_step, below). */
#define Q8I_HOLD_KEYS(block_keys) ((block_keys) <= 4)
/* The value pair loop: whole pairs, unrolled twice, then an odd last key on its own. */
#define Q8I_ODD_IN_LOOP 0
#define Q8I_PAIR_LOOP _Pragma("GCC unroll 2")
/* Which passes request their rows ahead (see the header comment): the P · V none, since the
 * score kernel asked for the chunk's values as it scored (the `ahead` rows), and requesting
 * the next rows too only adds instructions. */
#define Q8I_REQUEST_KEYS(rows) 1
#define Q8I_REQUEST_VALUES(rows) 0

/* The elements of a step that are loaded: their count (a whole step from 16 on). */
typedef int q8i_tail;
V_INLINE q8i_tail q8i_tail_of(int elements) { return elements; }

/* 16 int8 elements (past the tail: 0, not read: the tail is copied into zeros) as 16 int16
 * words. */
V_INLINE vi q8_words(const int8_t *source, q8i_tail elements) {
    return _mm256_cvtepi8_epi16(q8_load16((const uint8_t *)source, elements));
}

/* transpose_reduce on int32 lanes: lane a = the sum of the lanes of v[a] (exact). */
V_INLINE vi transpose_reduce_i32(const vi v[8]) {
    const vi low = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const vi high = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20),
                            _mm256_permute2x128_si256(low, high, 0x31));
}

/* target[0 .. 8) = the int32 lanes of q (each |q| <= 32767: the saturating pack is exact) as
 * int16. */
V_INLINE void store_words(int16_t *target, vi q) {
    _mm_storeu_si128((__m128i *)target,
                     _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
}

/* target[0 .. 16) = the lanes of low, then of high, as int16 (the pack works within 128-bit
 * lanes, the 64-bit permute orders them). */
V_INLINE void store_word_pairs(int16_t *target, vi low, vi high) {
    _mm256_storeu_si256((__m256i *)target,
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), 0xd8));
}

/* The sums of a step in natural order from the unpack order (see the header comment). */
V_INLINE void unpacked_halves(vf low, vf high, vf halves[2]) {
    halves[0] = _mm256_permute2f128_ps(low, high, 0x20);
    halves[1] = _mm256_permute2f128_ps(low, high, 0x31);
}

/* decode_bf16_body.h's store_block_scores with each lane's row factor: (key factor * query
 * scale) * sum, as attn_q8_score_exact rounds. */
V_INLINE void store_q8_scores(const int block_rows, const int block_keys, int rows_left,
                              int keys_left, const float *key_factor, vf row_factors, vf sums,
                              float *scores) {
    store_block_scores(block_rows, block_keys, 1, rows_left, keys_left, key_factor, row_factors,
                       sums, scores);
}
#endif

/* ---- helpers, the same at both widths ---- */

/* Pairs of keys the value pair loop takes (Q8I_ODD_IN_LOOP, per width). */
#define Q8I_LOOP_PAIRS(count) (Q8I_ODD_IN_LOOP ? ((count) + 1) & ~1 : (count) & ~1)

/* Largest |x[e]|, e < count (exact, any order). */
static float largest_magnitude(int count, const float *x) {
    vf largest = vf_zero();
    for (int e = 0; e < count; e += VLANES)
        largest = vf_max(largest, vf_abs(vf_maskz_loadu(vmask_first(count - e), x + e)));
    return vf_reduce_max(largest);
}

/* target[e] = round(x[e] * multiplier) as int16 for e < count, 0 up to padded (a multiple of
 * VLANES); round to nearest even (the MXCSR default), as attn_q8_operand. */
static void round_to_i16(int count, int padded, const float *x, float multiplier,
                         int16_t *target) {
    const vf factor = vf_set1(multiplier);
    for (int e = 0; e < padded; e += VLANES) {
        const vmask lanes = vmask_first(count - e);
        store_words(target + e,
                    vi_maskz(lanes, vf_to_vi(vf_mul(vf_maskz_loadu(lanes, x + e), factor))));
    }
}

/* Rows r < rows (<= 4) of a chunk's weights times their key factors, as int16 with one scale
 * per row (quant.h): w16 [4][Q8I_WEIGHT_STRIDE], 0 past count. */
static void pack_weights_i16(int rows, int count, const float *weights, const float *row_scales,
                             float factor, int16_t *w16, float *scale) {
    float scaled[ATTN_DECODE_CHUNK] __attribute__((aligned(4 * VLANES)));
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < count; c += VLANES) {
            const vmask lanes = vmask_first(count - c);
            const vf key_factor = row_scales != NULL
                                      ? vf_mul(vf_set1(factor), vf_maskz_loadu(lanes, row_scales + c))
                                      : vf_set1(factor);
            vf_mask_storeu(scaled + c, lanes,
                           vf_mul(vf_maskz_loadu(lanes, weights + r * ATTN_DECODE_CHUNK + c),
                                  key_factor));
        }
        const float largest = largest_magnitude(count, scaled);
        scale[r] = largest / ATTN_Q8_WEIGHT_LEVELS;
        round_to_i16(count, Q8I_WEIGHT_STRIDE, scaled,
                     attn_q8_multiplier(largest, ATTN_Q8_WEIGHT_LEVELS),
                     w16 + r * Q8I_WEIGHT_STRIDE);
    }
}

/* pack_weights_i16 for a whole chunk (count = ATTN_DECODE_CHUNK): the same operands (each
 * weight times its key's factor, the row's largest magnitude, round to nearest even), with
 * the key factors formed once for the rows, each row's products kept in registers from the
 * multiply to the rounding, and no masks (the masked per-row passes cost about 130
 * instructions a row at 8 lanes). */
static void pack_chunk_weights_i16(int rows, const float *weights, const float *row_scales,
                                   float factor, int16_t *w16, float *scale) {
    enum { VECTORS = ATTN_DECODE_CHUNK / VLANES };
    vf key_factor[VECTORS];
    for (int v = 0; v < VECTORS; ++v)
        key_factor[v] = row_scales != NULL ? vf_mul(vf_set1(factor), vf_loadu(row_scales + VLANES * v))
                                           : vf_set1(factor);
    for (int r = 0; r < rows; ++r) {
        vf scaled[VECTORS], largest = vf_zero();
        for (int v = 0; v < VECTORS; ++v) {
            scaled[v] = vf_mul(vf_loadu(weights + r * ATTN_DECODE_CHUNK + VLANES * v), key_factor[v]);
            largest = vf_max(largest, vf_abs(scaled[v]));
        }
        const float row_largest = vf_reduce_max(largest);
        scale[r] = row_largest / ATTN_Q8_WEIGHT_LEVELS;
        const vf multiplier = vf_set1(attn_q8_multiplier(row_largest, ATTN_Q8_WEIGHT_LEVELS));
        for (int v = 0; v < VECTORS; v += 2)
            store_word_pairs(w16 + r * Q8I_WEIGHT_STRIDE + VLANES * v,
                             vf_to_vi(vf_mul(scaled[v], multiplier)),
                             vf_to_vi(vf_mul(scaled[v + 1], multiplier)));
    }
}

/* row[0 .. valid) (valid <= 2 * VLANES) = fma(weight_scale, float(sums in natural order),
 * factor * row), where low / high hold the step's sums in the unpack order. */
V_INLINE void add_unpacked_sums(float *row, int valid, vi low, vi high, vf weight_scale,
                                vf factor) {
    vf halves[2];
    unpacked_halves(vi_to_vf(low), vi_to_vf(high), halves);
    for (int x = 0; x < 2; ++x) {
        const int lanes = valid - VLANES * x;
        if (lanes >= VLANES) {
            const vf old = vf_loadu(row + VLANES * x);
            vf_storeu(row + VLANES * x, vf_fmadd(weight_scale, halves[x], vf_mul(factor, old)));
        } else if (lanes > 0) {
            const vmask m = vmask_first(lanes);
            const vf old = vf_maskz_loadu(m, row + VLANES * x);
            vf_mask_storeu(row + VLANES * x, m, vf_fmadd(weight_scale, halves[x], vf_mul(factor, old)));
        }
    }
}

/* The stored rows c and c + 1 Q8_LOOKAHEAD further (past the chunk: in the next one,
 * values_ahead), requested whole into L2. */
V_INLINE void request_value_pair(const int8_t *values, const int8_t *values_ahead, int c,
                                 int count, int64_t value_stride, int dim) {
    prefetch_row_or_next(values, values_ahead, c, Q8_LOOKAHEAD, count, value_stride, dim, 0);
    prefetch_row_or_next(values, values_ahead, c + 1, Q8_LOOKAHEAD, count, value_stride, dim, 0);
}

#endif /* ATTN_DECODE_Q8_INT_BODY_HELPERS */

/* ---- the variant's dot-pairs primitive: sum + the int32 pair products of a and b ---- */
#if Q8I_VNNI
#if VLANES != 16
#error "Q8I_VNNI 1 is the 16-lane VPDPWSSD variant"
#endif
#define Q8I(name) name##_vnni
#define Q8I_TARGET ATTN_TARGET("avx512vnni")
Q8I_TARGET V_INLINE vi Q8I(dot_pairs)(vi sum, vi a, vi b) { return _mm512_dpwssd_epi32(sum, a, b); }
#else
#define Q8I(name) name##_madd
#define Q8I_TARGET
V_INLINE vi Q8I(dot_pairs)(vi sum, vi a, vi b) { return vi_add(sum, vi_madd_pairs(a, b)); }
#endif

/* ---- scores ---- */

/* sums[r * block_keys + k] += q16[r][d .. d + 2 VLANES) . key_k[d .. d + 2 VLANES) in int32
 * lanes (exact), the keys read to `tail`. Dimension-major: each key is widened once per step.
 * Where Q8I_HOLD_KEYS (8 lanes, up to 4 keys) the widened keys stay in registers while each
 * row meets them (GCC folds the query load into every VPMADDWD, which runs faster than
 * holding it in a register); else the query rows are loaded once per step and each widened
 * key meets them (16 lanes; one row of 8 keys at 8 lanes: key after key). */
Q8I_TARGET V_INLINE void Q8I(score_step)(const int block_rows, const int block_keys, int d,
                                         q8i_tail tail, const int16_t *const *row,
                                         const int8_t *const *key, vi *sums) {
    if (Q8I_HOLD_KEYS(block_keys)) {
        vi key_words[4];
        for (int k = 0; k < block_keys; ++k) key_words[k] = q8_words(key[k] + d, tail);
        for (int r = 0; r < block_rows; ++r) {
            const vi query = vi_loadu(row[r] + d);
            for (int k = 0; k < block_keys; ++k)
                sums[r * block_keys + k] = Q8I(dot_pairs)(sums[r * block_keys + k], query, key_words[k]);
        }
    } else {
        vi query[4];
        for (int r = 0; r < block_rows; ++r) query[r] = vi_loadu(row[r] + d);
        for (int k = 0; k < block_keys; ++k) {
            const vi key_words = q8_words(key[k] + d, tail);
            for (int r = 0; r < block_rows; ++r)
                sums[r * block_keys + k] = Q8I(dot_pairs)(sums[r * block_keys + k], query[r], key_words);
        }
    }
}

/* Lane r * block_keys + k = sum_d q16[r][d] * key_k[d] (int32, exact); the query rows are
 * attn_q8_prepare_queries' (aligned, 0 past dim, padded to a multiple of 32). full (a
 * constant): dim % (2 * VLANES) == 0; else each key's tail reads 0. */
Q8I_TARGET V_INLINE vi Q8I(score_block)(const int block_rows, const int block_keys, const int full,
                                        int dim, const int16_t *const *row,
                                        const int8_t *const *key) {
    vi sums[VLANES];
    for (int a = 0; a < VLANES; ++a) sums[a] = vi_zero();
    for (int d = 0; d < dim; d += 2 * VLANES)
        Q8I(score_step)(block_rows, block_keys, d, q8i_tail_of(full ? 2 * VLANES : dim - d), row,
                        key, sums);
    return transpose_reduce_i32(sums);
}

/* The 4-row blocks of a chunk with dim % (2 * VLANES) == 0 (a GQA group of 4, or 4 rows of a
 * larger one): scores[r * ATTN_DECODE_CHUNK + c] for the whole blocks of VLANES / 4 keys (the
 * keys past the last whole block are the caller's), one block at a time with its pointers
 * stepped, its look-ahead requests (`prefetch`: the pass that reads the keys from memory;
 * values_ahead: the chunk's values) and its scores stored whole: the general block loop spent
 * about 100 instructions per block on pointers, tests and spills (8 lanes). */
Q8I_TARGET static void Q8I(score_blocks4)(int count, int dim, const int16_t *const *row,
                                          vf row_factors, const int8_t *keys, int64_t key_stride,
                                          const float *key_factors, const int prefetch,
                                          const attn_rows_ahead *values_ahead,
                                          const int8_t *keys_ahead, float *scores) {
    enum { BLOCK_KEYS = VLANES / 4 };
    const int8_t *first = keys;
    for (int c0 = 0; c0 + BLOCK_KEYS <= count; c0 += BLOCK_KEYS, first += BLOCK_KEYS * key_stride) {
        const int8_t *key[BLOCK_KEYS];
        for (int k = 0; k < BLOCK_KEYS; ++k) key[k] = first + k * key_stride;
        if (prefetch) { /* (inline, not prefetch_rows: fewer of the kernel's instructions) */
            /* the block's rows ahead from its first one's (NULL: none) */
            const char *ahead = row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
            for (int offset = 0; ahead != NULL && offset < dim; offset += 64)
                for (int k = 0; k < BLOCK_KEYS; ++k)
                    _mm_prefetch(ahead + k * key_stride + offset, _MM_HINT_T1);
        }
        if (values_ahead != NULL)
            for (int k = 0; k < BLOCK_KEYS; ++k) prefetch_row_ahead(values_ahead, c0 + k);
        const vf sums = vi_to_vf(Q8I(score_block)(4, BLOCK_KEYS, 1, dim, row, key));
        store_q8_scores(4, BLOCK_KEYS, 4, BLOCK_KEYS, key_factors + c0, row_factors, sums,
                        scores + c0);
    }
}

/* One block of rows [r0, r0 + block_rows) x keys [c0, c0 + VLANES / block_rows): its
 * requests (`request`: the pass that reads the keys from memory; ahead: the chunk's values)
 * and its scores (row_factors: lane a holds the query scale of row a / block_keys). */
Q8I_TARGET V_INLINE void Q8I(score_keys)(const int block_rows, const int full, int rows, int r0,
                                         int count, int c0, int dim, const int16_t *const *row,
                                         vf row_factors, const int8_t *keys, int64_t key_stride,
                                         const float *key_factors, int request,
                                         const attn_rows_ahead *ahead, const int8_t *keys_ahead,
                                         float *scores) {
    const int block_keys = VLANES / block_rows;
    const int8_t *key[VLANES];
    q8_block_keys(keys, c0, block_keys, count, key_stride, (const uint8_t **)key);
    if (request) { /* the block's rows ahead from its first one's: one test per block */
        const char *ahead_row = row_ahead(keys, keys_ahead, c0, Q8_LOOKAHEAD, count, key_stride);
        for (int k = 0; ahead_row != NULL && k < block_keys; ++k)
            prefetch_rows(ahead_row, k, 1, key_stride, dim, 0);
    }
    if (ahead != NULL) /* registry.h: the chunk's values */
        for (int k = 0; k < block_keys && c0 + k < count; ++k) prefetch_row_ahead(ahead, c0 + k);
    const vf sums = vi_to_vf(Q8I(score_block)(block_rows, block_keys, full, dim, row, key));
    store_q8_scores(block_rows, block_keys, rows - r0, count - c0, key_factors + c0, row_factors,
                    sums, scores + r0 * ATTN_DECODE_CHUNK + c0);
}

/* score_chunk_q8 for ATTN_DTYPE_Q8 and dim <= Q8I_MOST_DIM; `prepared` as
 * attn_q8_prepare_queries leaves the rows. */
Q8I_TARGET static void Q8I(score_chunk)(int rows, int count, int dim, const void *prepared,
                                        const int8_t *keys, int64_t key_stride,
                                        const float *row_scales, float factor, float *scores,
                                        const attn_rows_ahead *ahead, const int8_t *keys_ahead) {
    const float *query_scales = attn_q8_query_scales(prepared);
    /* factor * row scale of each key; 0 past count (a block's lanes there are dropped) */
    float key_factors[ATTN_DECODE_CHUNK + VLANES] = {0};
    for (int c = 0; c < count; ++c)
        key_factors[c] = row_scales != NULL ? factor * row_scales[c] : factor;
    const int block_rows = rows >= 3 ? 4 : rows, block_keys = VLANES / block_rows;
    const int full = dim % (2 * VLANES) == 0;
    for (int r0 = 0; r0 < rows; r0 += block_rows) {
        const int16_t *row[4];
        float query_scale[4];
        for (int r = 0; r < block_rows; ++r) {
            const int source = r0 + r < rows ? r0 + r : rows - 1;
            row[r] = attn_q8_query_row(prepared, rows, dim, source);
            query_scale[r] = query_scales[source];
        }
        float lane_scales[VLANES]; /* lane a: the query scale of its row, a / block_keys */
        for (int a = 0; a < VLANES; ++a) lane_scales[a] = query_scale[a / block_keys];
        const vf row_factors = vf_loadu(lane_scales);
        const int request = r0 == 0 && Q8I_REQUEST_KEYS(rows);
        const attn_rows_ahead *values = r0 == 0 ? ahead : NULL;
        int c0 = 0;
        if (block_rows == 4 && full && r0 + 4 <= rows) {
            Q8I(score_blocks4)(count, dim, row, row_factors, keys, key_stride, key_factors,
                               request, values, keys_ahead, scores + r0 * ATTN_DECODE_CHUNK);
            c0 = count & ~(VLANES / 4 - 1);
        }
#define Q8I_SCORE_KEYS(block_rows, full)                                                          \
    Q8I(score_keys)(block_rows, full, rows, r0, count, c0, dim, row, row_factors, keys, key_stride, \
                    key_factors, request, values, keys_ahead, scores)
        for (; c0 < count; c0 += block_keys) {
            if (block_rows == 4 && full) Q8I_SCORE_KEYS(4, 1);
            else if (block_rows == 4) Q8I_SCORE_KEYS(4, 0);
            else if (block_rows == 2 && full) Q8I_SCORE_KEYS(2, 1);
            else if (block_rows == 2) Q8I_SCORE_KEYS(2, 0);
            else if (full) Q8I_SCORE_KEYS(1, 1);
            else Q8I_SCORE_KEYS(1, 0);
        }
#undef Q8I_SCORE_KEYS
    }
}

/* ---- values ---- */

/* Rows r < block_rows of the block at `block` (rows dim floats apart, columns [0, width)):
 * the sums low[r][x] / high[r][x] of its segments added (add_unpacked_sums) with row r's
 * weight scale and rescale. */
Q8I_TARGET V_INLINE void Q8I(add_block_sums)(const int block_rows, int width, int dim,
                                             const vi low[][2], const vi high[][2],
                                             const float *scale, const float *rescale,
                                             float *block) {
    for (int r = 0; r < block_rows; ++r) {
        const vf weight_scale = vf_set1(scale[r]), factor = vf_set1(rescale[r]);
        float *row = block + (int64_t)r * dim;
        for (int x = 0; x < Q8I_SEGMENTS; ++x)
            add_unpacked_sums(row + 2 * VLANES * x, width - 2 * VLANES * x, low[r][x], high[r][x],
                              weight_scale, factor);
    }
}

/* The products of row r (< block_rows) of segment X (0 or 1): its sums += the interleaved
 * pairs times the row's weight pair. */
#define Q8I_ROW_PRODUCTS(r, X)                                                                \
    do {                                                                                     \
        if (block_rows > r) {                                                                \
            low_##r##X = Q8I(dot_pairs)(low_##r##X, pairs_low, weight##r);                   \
            high_##r##X = Q8I(dot_pairs)(high_##r##X, pairs_high, weight##r);                \
        }                                                                                    \
    } while (0)

/* Segment X of a block's key pair (first, second): the two rows' words interleaved (2 *
 * VLANES elements from 2 * VLANES * X, read to tail##X), then the products of each row. */
#define Q8I_SEGMENT_PRODUCTS(X)                                                               \
    do {                                                                                     \
        const vi a = q8_words(first + 2 * VLANES * X, tail##X);                              \
        const vi b = q8_words(second + 2 * VLANES * X, tail##X);                             \
        const vi pairs_low = vi_unpacklo_words(a, b), pairs_high = vi_unpackhi_words(a, b);  \
        Q8I_ROW_PRODUCTS(0, X);                                                              \
        Q8I_ROW_PRODUCTS(1, X);                                                              \
        Q8I_ROW_PRODUCTS(2, X);                                                              \
        Q8I_ROW_PRODUCTS(3, X);                                                              \
    } while (0)

/* One key pair (first, second) of a block: each row's weight pair w[r * Q8I_WEIGHT_STRIDE +
 * 0, 1] broadcast, then the segments' products. */
#define Q8I_PAIR_PRODUCTS(first, second, w)                                                  \
    do {                                                                                     \
        int32_t pair[4] = {0};                                                               \
        for (int r = 0; r < block_rows; ++r)                                                 \
            memcpy(&pair[r], (w) + r * Q8I_WEIGHT_STRIDE, sizeof pair[r]);                   \
        const vi weight0 = vi_set1(pair[0]), weight1 = vi_set1(pair[1]);                     \
        const vi weight2 = vi_set1(pair[2]), weight3 = vi_set1(pair[3]);                     \
        Q8I_SEGMENT_PRODUCTS(0);                                                             \
        if (Q8I_SEGMENTS > 1) Q8I_SEGMENT_PRODUCTS(1);                                       \
    } while (0)

/* Accumulator rows [block_rows][dim] (<= 4), columns [e0, e0 + width) (width <= 2 * VLANES *
 * Q8I_SEGMENTS; full, a constant: width is the whole block): the int32 sums over the chunk's
 * key pairs, added to the accumulator at the end. The sums are named variables, low_rx /
 * high_rx for row r and segment x (with arrays GCC 12 keeps the 16 sums of 4 rows at 16 lanes
 * in registers but also stores them all to the stack on every key pair). The pair loop steps
 * one pointer per operand (no per-pair test: 8 of its 32 instructions were loop control at 8
 * lanes); an odd last key pairs with itself at weight 0 (w16 is 0 past count). prefetch (a
 * constant): the rows Q8_LOOKAHEAD ahead of each pair are requested. */
Q8I_TARGET V_INLINE void Q8I(accumulate_block)(const int block_rows, const int full,
                                               const int prefetch, int count, int e0, int width,
                                               int dim, const int16_t *w16, const float *scale,
                                               const float *rescale, const int8_t *values,
                                               int64_t value_stride, float *accumulator,
                                               const int8_t *values_ahead) {
    enum { SEGMENT = 2 * VLANES };
    const q8i_tail tail0 = q8i_tail_of(full ? SEGMENT : width);
    const q8i_tail tail1 = q8i_tail_of(full ? SEGMENT : width - SEGMENT);
    vi low_00 = vi_zero(), low_01 = low_00, low_10 = low_00, low_11 = low_00, low_20 = low_00,
       low_21 = low_00, low_30 = low_00, low_31 = low_00;
    vi high_00 = low_00, high_01 = low_00, high_10 = low_00, high_11 = low_00, high_20 = low_00,
       high_21 = low_00, high_30 = low_00, high_31 = low_00;
    const int8_t *first = values + e0;
    const int16_t *w = w16;
    Q8I_PAIR_LOOP
    for (const int16_t *end = w16 + Q8I_LOOP_PAIRS(count); w < end; w += 2, first += 2 * value_stride) {
        if (prefetch)
            request_value_pair(values, values_ahead, (int)(w - w16), count, value_stride, dim);
        const int8_t *second = Q8I_ODD_IN_LOOP && w + 1 - w16 == count ? first : first + value_stride;
        Q8I_PAIR_PRODUCTS(first, second, w);
    }
    if (!Q8I_ODD_IN_LOOP && (count & 1)) {
        if (prefetch) request_value_pair(values, values_ahead, count - 1, count, value_stride, dim);
        const int8_t *second = first;
        Q8I_PAIR_PRODUCTS(first, second, w);
    }
    const vi low[4][2] = {{low_00, low_01}, {low_10, low_11}, {low_20, low_21}, {low_30, low_31}};
    const vi high[4][2] = {{high_00, high_01}, {high_10, high_11}, {high_20, high_21},
                           {high_30, high_31}};
    Q8I(add_block_sums)(block_rows, width, dim, low, high, scale, rescale, accumulator + e0);
}

#undef Q8I_PAIR_PRODUCTS
#undef Q8I_SEGMENT_PRODUCTS
#undef Q8I_ROW_PRODUCTS

/* Rows [0, block_rows) over all of dim in blocks of Q8I_SEGMENTS steps; with `prefetch` the
 * first block requests the rows ahead. (Whole blocks and the request are constants inside
 * each block.) */
Q8I_TARGET V_INLINE void Q8I(accumulate_rows)(const int block_rows, int count, int dim,
                                              const int16_t *w16, const float *scale,
                                              const float *rescale, const int8_t *values,
                                              int64_t value_stride, float *accumulator,
                                              int prefetch, const int8_t *values_ahead) {
    enum { BLOCK = 2 * VLANES * Q8I_SEGMENTS };
#define Q8I_ACCUMULATE_BLOCK(full, first, width)                                                  \
    Q8I(accumulate_block)(block_rows, full, first, count, e0, width, dim, w16, scale, rescale,   \
                          values, value_stride, accumulator, values_ahead)
    for (int e0 = 0; e0 < dim; e0 += BLOCK) {
        const int first = prefetch && e0 == 0;
        if (dim - e0 >= BLOCK && first) Q8I_ACCUMULATE_BLOCK(1, 1, BLOCK);
        else if (dim - e0 >= BLOCK) Q8I_ACCUMULATE_BLOCK(1, 0, BLOCK);
        else if (first) Q8I_ACCUMULATE_BLOCK(0, 1, dim - e0);
        else Q8I_ACCUMULATE_BLOCK(0, 0, dim - e0);
    }
#undef Q8I_ACCUMULATE_BLOCK
}

/* accumulate_chunk_q8 for ATTN_DTYPE_Q8: blocks of 4 rows, then the remaining 3, 2 or 1, each
 * with its weights packed to int16 first. */
Q8I_TARGET static void Q8I(accumulate_chunk)(int rows, int count, int dim, const float *weights,
                                             const float *rescale, const int8_t *values,
                                             int64_t value_stride, const float *row_scales,
                                             float factor, float *accumulator,
                                             const int8_t *values_ahead) {
    int16_t w16[4 * Q8I_WEIGHT_STRIDE] __attribute__((aligned(4 * VLANES)));
    float scale[4];
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int block_rows = rows - r0 < 4 ? rows - r0 : 4;
        if (count == ATTN_DECODE_CHUNK)
            pack_chunk_weights_i16(block_rows, weights + r0 * ATTN_DECODE_CHUNK, row_scales,
                                   factor, w16, scale);
        else
            pack_weights_i16(block_rows, count, weights + r0 * ATTN_DECODE_CHUNK, row_scales,
                             factor, w16, scale);
        const int prefetch = Q8I_REQUEST_VALUES(rows) && r0 == 0;
        float *block = accumulator + (int64_t)r0 * dim;
#define Q8I_ACCUMULATE_ROWS(block_rows)                                                        \
    Q8I(accumulate_rows)(block_rows, count, dim, w16, scale, rescale + r0, values, value_stride, \
                         block, prefetch, values_ahead)
        if (block_rows == 4) Q8I_ACCUMULATE_ROWS(4);
        else if (block_rows == 3) Q8I_ACCUMULATE_ROWS(3);
        else if (block_rows == 2) Q8I_ACCUMULATE_ROWS(2);
        else Q8I_ACCUMULATE_ROWS(1);
#undef Q8I_ACCUMULATE_ROWS
    }
}

#undef Q8I
#undef Q8I_TARGET
