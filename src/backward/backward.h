/*
 * backward.h — what the two backward implementations (reference_backward.c, the dense oracle,
 * and flash_backward.c, the tiled FlashAttention-2 recomputation) share: the validation of a
 * backward call's twelve arguments. Never exported; the public API is in attn.h.
 */
#ifndef ATTN_BACKWARD_H
#define ATTN_BACKWARD_H

#include <stdbool.h>

#include "attn.h"
#include "../mask/mask.h"

/*
 * Checks every argument of attn_backward / attn_reference_backward and fills `problem`:
 *   q, k, v, out, lse and options as for attn_forward (lse is required here);
 *   dout [B, Tq, Hq, Dv], dq [B, Tq, Hq, Dk], dk [B, Tk, Hkv, Dk], dv [B, Tk, Hkv, Dv], F32;
 *   dbias: NULL, or (only when options->bias is set) F32 with exactly the bias's shape.
 * With allow_16bit (the flash backward), q, k, v, out, dout, dq, dk, dv may instead all be
 * BF16 or F16 (q's dtype; lse and dbias stay F32); the reference takes F32 only.
 * Gradient outputs must not have a zero stride along a dimension of size > 1 (two elements
 * would share memory and the result would depend on write order).
 */
attn_status attn_backward_validate(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_tensor *out,
                                   const attn_tensor *lse, const attn_tensor *dout,
                                   const attn_options *options, const attn_tensor *dq,
                                   const attn_tensor *dk, const attn_tensor *dv,
                                   const attn_tensor *dbias, bool allow_16bit,
                                   attn_problem *problem, attn_error *error);

#endif /* ATTN_BACKWARD_H */
