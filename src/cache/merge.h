/*
 * merge.h — the exact LSE merge of partial attention results (docs/attention-math.md §3), as
 * a row primitive shared by attn_merge (public, strided tensors) and split-KV decoding (packed
 * partial buffers). Internal to libattn.
 */
#ifndef ATTN_CACHE_MERGE_H
#define ATTN_CACHE_MERGE_H

#include <stdint.h>

/*
 * Merges `count` partial results of one query row, in the order s = 0..count-1:
 *   partial_lse[s * lse_stride]            the partial's LSE (-inf = empty partial)
 *   partial_out[s * out_stride + e]        the partial's normalised output, e < dim
 * weights: scratch, double[count]. Writes out[e] (e < dim) and *lse. With M = max_s lse_s:
 *   lse = M + log sum_s exp(lse_s - M),  out = sum_s exp(lse_s - lse) * out_s,
 * accumulated in double; an empty partial is skipped (its output is never read, so NaN there
 * is harmless); when every partial is empty, out = 0 and lse = -inf.
 * `out` may be the same memory as partial 0's output (each element is read before written).
 */
void attn_merge_row(int count, const float *partial_lse, int64_t lse_stride,
                    const float *partial_out, int64_t out_stride, int64_t dim, double *weights,
                    float *out, float *lse);

#endif /* ATTN_CACHE_MERGE_H */
