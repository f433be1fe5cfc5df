/*
 * fuzz_serve.c — libFuzzer target for the serving arguments (include/attn.h, "serving"):
 * the input's bytes choose small sizes, cu_seqlens arrays, max_seqlen values, a page pool,
 * block-table entries, cache_seqlens, the number of new tokens and queries, the storage dtype
 * (16/32-bit or 8-bit: int8's row-scale tensors present or not, of the right shape or one
 * off, slot- or head-major; fp8's per-head scales absent, [Hkv] or [1], possibly <= 0; now
 * and then an infinite new token) and a few options, all unchecked, and the target calls attn_varlen_forward /
 * attn_varlen_backward and attn_forward_with_kvcache with them. Findings: any crash,
 * overread or UB; a varlen call that succeeds without every cu_seqlens rule holding, or whose
 * output differs from attn_reference_forward on one sequence; a cache call that fails but
 * changed the pool, or succeeds with rules broken (a length beyond capacity, a table entry
 * outside the pool, 8-bit storage without valid scales or with a non-finite new token, new
 * rows read out of the pool or the int8 scales the append writes) or with a non-finite
 * output (unless an infinite new key went into 16/32-bit storage); a failing call that
 * changed the scales.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"

typedef struct reader {
    const uint8_t *data;
    size_t size, at;
} reader;

static uint8_t next_byte(reader *r) { return r->at < r->size ? r->data[r->at++] : 0; }
static int8_t next_signed(reader *r) { return (int8_t)next_byte(r); }

static void fill(float *x, size_t count, uint32_t seed) {
    for (size_t e = 0; e < count; ++e) {
        seed = seed * 1664525u + 1013904223u;
        x[e] = (float)((int)(seed >> 9) % 2001 - 1000) / 1000.0f;
    }
}

static void fuzz_varlen(reader *r) {
    const int64_t B = 1 + next_byte(r) % 4, Hkv = 1 + next_byte(r) % 2, Hq = Hkv * (1 + next_byte(r) % 2);
    const int64_t D = 1 + next_byte(r) % 8;
    int32_t cu_q[5], cu_k[5];
    for (int64_t b = 0; b <= B; ++b) cu_q[b] = next_signed(r) / 4, cu_k[b] = next_signed(r) / 4;
    if (next_byte(r) & 1) { /* mostly well-formed: prefix sums of small lengths */
        cu_q[0] = cu_k[0] = 0;
        for (int64_t b = 0; b < B; ++b) cu_q[b + 1] = cu_q[b] + next_byte(r) % 9, cu_k[b + 1] = cu_k[b] + next_byte(r) % 9;
    }
    const int64_t total_q = 1 + next_byte(r) % 40, total_k = 1 + next_byte(r) % 40;
    attn_varlen sequences = {B, cu_q, cu_k, (int64_t)next_signed(r), (int64_t)next_signed(r)};
    attn_options options = attn_options_default();
    options.causal = next_byte(r) & 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    if (next_byte(r) & 1) options.window = 1, options.window_left = next_byte(r) % 5, options.window_right = -1;
    float *q = malloc((size_t)(total_q * Hq * D) * 4), *k = malloc((size_t)(total_k * Hkv * D) * 4);
    float *v = malloc((size_t)(total_k * Hkv * D) * 4), *o = malloc((size_t)(total_q * Hq * D) * 4);
    float *lse = malloc((size_t)(total_q * Hq) * 4);
    float *dq = malloc((size_t)(total_q * Hq * D) * 4), *dk = malloc((size_t)(total_k * Hkv * D) * 4);
    float *dv = malloc((size_t)(total_k * Hkv * D) * 4);
    fill(q, (size_t)(total_q * Hq * D), 1), fill(k, (size_t)(total_k * Hkv * D), 2), fill(v, (size_t)(total_k * Hkv * D), 3);
    const int64_t qs[3] = {total_q, Hq, D}, ks[3] = {total_k, Hkv, D}, ls[2] = {Hq, total_q};
    attn_tensor qt = attn_tensor_contiguous(q, ATTN_DTYPE_F32, 3, qs), kt = attn_tensor_contiguous(k, ATTN_DTYPE_F32, 3, ks);
    attn_tensor vt = attn_tensor_contiguous(v, ATTN_DTYPE_F32, 3, ks), ot = attn_tensor_contiguous(o, ATTN_DTYPE_F32, 3, qs);
    attn_tensor lt = attn_tensor_contiguous(lse, ATTN_DTYPE_F32, 2, ls);
    attn_tensor dqt = attn_tensor_contiguous(dq, ATTN_DTYPE_F32, 3, qs), dkt = attn_tensor_contiguous(dk, ATTN_DTYPE_F32, 3, ks);
    attn_tensor dvt = attn_tensor_contiguous(dv, ATTN_DTYPE_F32, 3, ks);
    attn_error error;
    attn_status status = attn_varlen_forward(&qt, &kt, &vt, &sequences, &options, &ot, &lt, NULL, &error);
    if (status == ATTN_OK) {
        /* The rules held. */
        if (cu_q[0] != 0 || cu_k[0] != 0 || cu_q[B] != total_q || cu_k[B] != total_k) abort();
        for (int64_t b = 0; b < B; ++b)
            if (cu_q[b + 1] < cu_q[b] || cu_k[b + 1] < cu_k[b] || cu_q[b + 1] - cu_q[b] > sequences.max_seqlen_q ||
                cu_k[b + 1] - cu_k[b] > sequences.max_seqlen_k)
                abort();
        /* Sequence 0 against the oracle. */
        const int64_t lq = cu_q[1], lk = cu_k[1];
        if (lq > 0 && lk > 0) {
            attn_tensor q0 = attn_tensor_f32_4d(q, 1, lq, Hq, D), k0 = attn_tensor_f32_4d(k, 1, lk, Hkv, D);
            attn_tensor v0 = attn_tensor_f32_4d(v, 1, lk, Hkv, D);
            float *reference = malloc((size_t)(lq * Hq * D) * 4);
            attn_tensor r0 = attn_tensor_f32_4d(reference, 1, lq, Hq, D);
            if (attn_reference_forward(&q0, &k0, &v0, &options, &r0, NULL, &error) != ATTN_OK) abort();
            for (int64_t e = 0; e < lq * Hq * D; ++e)
                if (!(fabsf(reference[e] - o[e]) <= 1e-4f * (1.0f + fabsf(reference[e])))) abort();
            free(reference);
        }
        float *dout = malloc((size_t)(total_q * Hq * D) * 4);
        fill(dout, (size_t)(total_q * Hq * D), 4);
        attn_tensor dot = attn_tensor_contiguous(dout, ATTN_DTYPE_F32, 3, qs);
        if (attn_varlen_backward(&qt, &kt, &vt, &ot, &lt, &dot, &sequences, &options, &dqt, &dkt, &dvt, NULL, &error) != ATTN_OK)
            abort();
        for (int64_t e = 0; e < total_k * Hkv * D; ++e)
            if (!isfinite(dk[e]) || !isfinite(dv[e])) abort();
        free(dout);
    }
    free(q), free(k), free(v), free(o), free(lse), free(dq), free(dk), free(dv);
}

static void fuzz_kvcache(reader *r) {
    const int64_t B = 1 + next_byte(r) % 3, Hkv = 1 + next_byte(r) % 2, Hq = Hkv * (1 + next_byte(r) % 2);
    const int64_t D = 2 * (1 + next_byte(r) % 4);
    const int paged = next_byte(r) & 1;
    const int64_t page_size = 1 + next_byte(r) % 4, max_pages = 1 + next_byte(r) % 4;
    const int64_t pages = paged ? 1 + next_byte(r) % 8 : B, slots = paged ? page_size : page_size * max_pages;
    const attn_dtype dtypes[6] = {ATTN_DTYPE_F32,      ATTN_DTYPE_BF16,     ATTN_DTYPE_F16,
                                  ATTN_DTYPE_Q8, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    const attn_dtype dtype = dtypes[next_byte(r) % 6];
    const int q8 = dtype == ATTN_DTYPE_Q8, fp8 = dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2;
    const int64_t Tnew = next_byte(r) % 4, Tq = 1 + next_byte(r) % 20;
    int32_t table[12], seqlens[3];
    for (int64_t e = 0; e < B * max_pages; ++e) table[e] = next_signed(r) % 10;
    for (int64_t b = 0; b < B; ++b) seqlens[b] = next_signed(r) % 20;
    const size_t element = attn_dtype_size(dtype), pool_elements = (size_t)(pages * slots * Hkv * D);
    uint8_t *kp = malloc(pool_elements * element), *vp = malloc(pool_elements * element);
    for (size_t e = 0; e < pool_elements * element; ++e) kp[e] = vp[e] = (uint8_t)(e % 61); /* finite in every dtype */
    uint8_t *k_before = malloc(pool_elements * element), *v_before = malloc(pool_elements * element);
    memcpy(k_before, kp, pool_elements * element), memcpy(v_before, vp, pool_elements * element);
    const int64_t ps[4] = {pages, slots, Hkv, D}, ts[2] = {B, max_pages};
    attn_tensor kt = attn_tensor_contiguous(kp, dtype, 4, ps), vt = attn_tensor_contiguous(vp, dtype, 4, ps);
    attn_tensor tt = attn_tensor_contiguous(table, ATTN_DTYPE_I32, 2, ts);
    attn_kv_cache_view view = {0, &kt, &vt, paged ? &tt : NULL, seqlens, NULL, NULL};
    /* Scales: int8 rows [pages, slots, Hkv] (one dimension perhaps off by one, perhaps a
     * head-major view), fp8 heads [Hkv] or [1] from the input's bytes; any dtype may get them. */
    const uint8_t scale_choice = next_byte(r);
    const size_t scale_floats = (size_t)(pages * (slots + 1) * Hkv);
    float *ks = malloc(scale_floats * 4), *vs = malloc(scale_floats * 4);
    for (size_t e = 0; e < scale_floats; ++e) ks[e] = 0.01f * (float)(e % 7), vs[e] = 0.02f * (float)(e % 5);
    float heads[2][2] = {{(float)(next_signed(r) % 9) / 8.0f, 0.5f}, {0.25f, (float)(next_signed(r) % 9) / 8.0f}};
    attn_tensor kst, vst;
    if (scale_choice % 4 != 0 && (q8 || (scale_choice & 16))) { /* rows */
        const int64_t ss[3] = {pages, slots + (scale_choice % 4 == 3), Hkv};
        kst = attn_tensor_contiguous(ks, ATTN_DTYPE_F32, 3, ss), vst = attn_tensor_contiguous(vs, ATTN_DTYPE_F32, 3, ss);
        if (scale_choice & 32) kst.stride[1] = vst.stride[1] = 1, kst.stride[2] = vst.stride[2] = ss[1];
        view.k_scale = &kst, view.v_scale = (scale_choice % 4 == 2) ? NULL : &vst;
    } else if (scale_choice % 4 != 0 && (fp8 || (scale_choice & 16))) { /* heads */
        const int64_t hs = (scale_choice % 4 == 3) ? 1 : Hkv;
        kst = attn_tensor_contiguous(heads[0], ATTN_DTYPE_F32, 1, &hs), vst = attn_tensor_contiguous(heads[1], ATTN_DTYPE_F32, 1, &hs);
        view.k_scale = &kst, view.v_scale = (scale_choice % 4 == 2) ? NULL : &vst;
    }
    float *ks_before = malloc(scale_floats * 4), *vs_before = malloc(scale_floats * 4);
    memcpy(ks_before, ks, scale_floats * 4), memcpy(vs_before, vs, scale_floats * 4);
    float *q = malloc((size_t)(B * Tq * Hq * D) * 4), *o = malloc((size_t)(B * Tq * Hq * D) * 4);
    const int64_t new_count = Tnew > 0 ? Tnew : 1;
    float *kn = malloc((size_t)(B * new_count * Hkv * D) * 4), *vn = malloc((size_t)(B * new_count * Hkv * D) * 4);
    fill(q, (size_t)(B * Tq * Hq * D), 5), fill(kn, (size_t)(B * new_count * Hkv * D), 6);
    fill(vn, (size_t)(B * new_count * Hkv * D), 7);
    const int infinite_new = (scale_choice & 64) && (scale_choice & 128);
    if (infinite_new) kn[B * new_count * Hkv * D - 1] = INFINITY;
    attn_tensor qt = attn_tensor_f32_4d(q, B, Tq, Hq, D), ot = attn_tensor_f32_4d(o, B, Tq, Hq, D);
    attn_tensor knt = attn_tensor_f32_4d(kn, B, new_count, Hkv, D), vnt = attn_tensor_f32_4d(vn, B, new_count, Hkv, D);
    float rotary[2 * 64];
    for (int e = 0; e < 64; ++e) rotary[e] = cosf(0.1f * (float)e), rotary[64 + e] = sinf(0.1f * (float)e);
    const int64_t positions = next_byte(r) % 33;
    const int64_t rs[2] = {positions > 0 ? positions : 1, 1};
    attn_tensor cos_t = attn_tensor_contiguous(rotary, ATTN_DTYPE_F32, 2, rs);
    attn_tensor sin_t = attn_tensor_contiguous(rotary + 64, ATTN_DTYPE_F32, 2, rs);
    const int rope = positions > 0;
    attn_kv_append append = {Tnew > 0 ? &knt : NULL, Tnew > 0 ? &vnt : NULL, rope ? &cos_t : NULL, rope ? &sin_t : NULL,
                             (attn_rope_layout)(next_byte(r) % 2)};
    attn_options options = attn_options_default();
    options.causal = next_byte(r) & 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    /* Now and then the new rows (float32, contiguous) lie inside memory the append writes:
     * k_new at the start of the key pool (1), v_new of the value pool (2), k_new over the
     * int8 key scales (3), when the allocation holds them. */
    const int alias = next_byte(r) % 8;
    const size_t new_bytes = (size_t)(B * new_count * Hkv * D) * 4;
    void *alias_home = alias == 1 ? (void *)kp : alias == 2 ? (void *)vp : alias == 3 ? (void *)ks : NULL;
    const size_t home_bytes = alias == 3 ? scale_floats * 4 : pool_elements * element;
    attn_tensor alias_new = alias == 2 ? vnt : knt;
    if (alias_home != NULL && new_bytes <= home_bytes && Tnew > 0) {
        alias_new.data = alias_home;
        if (alias == 2) append.v_new = &alias_new;
        else append.k_new = &alias_new;
    } else {
        alias_home = NULL;
    }
    const int aliases_written = alias_home != NULL && (alias != 3 || (q8 && view.k_scale == &kst && kst.data == ks));
    attn_error error;
    attn_status status = attn_forward_with_kvcache(&qt, &view, &append, &options, &ot, NULL, NULL, &error);
    if (status != ATTN_OK) {
        if (memcmp(k_before, kp, pool_elements * element) != 0 || memcmp(v_before, vp, pool_elements * element) != 0 ||
            memcmp(ks_before, ks, scale_floats * 4) != 0 || memcmp(vs_before, vs, scale_floats * 4) != 0)
            abort(); /* a failing call wrote into the cache or its scales */
    } else {
        const int64_t capacity = paged ? page_size * max_pages : slots;
        for (int64_t b = 0; b < B; ++b) {
            const int64_t total = seqlens[b] + Tnew;
            if (seqlens[b] < 0 || total > capacity) abort();
            if (paged)
                for (int64_t block = 0; block < (total + page_size - 1) / page_size; ++block)
                    if (table[b * max_pages + block] < 0 || table[b * max_pages + block] >= pages) abort();
        }
        /* 8-bit storage: valid scales (int8 rows of the pool's shape, fp8 heads > 0), finite
         * new tokens; other storage: no scales. */
        if (q8 && (view.k_scale == NULL || view.v_scale == NULL || view.k_scale->rank != 3 ||
                   view.k_scale->shape[1] != slots))
            abort();
        if (fp8 && view.k_scale != NULL &&
            (view.k_scale->rank != 1 || !(heads[0][0] > 0.0f) || (view.v_scale != NULL && view.v_scale->shape[0] == 2 && !(heads[1][1] > 0.0f))))
            abort();
        if (!q8 && !fp8 && (view.k_scale != NULL || view.v_scale != NULL)) abort();
        if ((q8 || fp8) && infinite_new && append.k_new == &knt) abort();
        if (aliases_written) abort(); /* the new rows were read out of memory the append wrote */
        /* 16/32-bit storage takes an infinite new key as it is (rows that attend it may
         * come out non-finite, as in attn_forward); otherwise every output is finite. */
        if (!(infinite_new && append.k_new == &knt))
            for (int64_t e = 0; e < B * Tq * Hq * D; ++e)
                if (!isfinite(o[e])) abort();
    }
    free(kp), free(vp), free(k_before), free(v_before), free(q), free(o), free(kn), free(vn);
    free(ks), free(vs), free(ks_before), free(vs_before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size, 0};
    if (next_byte(&r) & 1) fuzz_varlen(&r);
    else fuzz_kvcache(&r);
    return 0;
}
