/*
 * generic.h — the portable parts of the kernel registry (kernels/registry.h), one file each:
 * forward_generic.c, backward_generic.c, decode_generic.c; table_generic.c names them.
 */
#ifndef ATTN_KERNELS_GENERIC_H
#define ATTN_KERNELS_GENERIC_H

#include "kernels/registry.h"

extern const attn_forward_kernels attn_generic_forward;
extern const attn_backward_kernels attn_generic_backward;
extern const attn_decode_kernels attn_generic_decode;

/* forward.softmax_step of the generic part (the decode part calls it too). */
void attn_generic_softmax_step(int rows, int count, float *scores, int scores_stride,
                               float scale, float softcap, attn_dtype p_type, float *row_max,
                               float *row_sum, float *rescale);

#endif /* ATTN_KERNELS_GENERIC_H */
