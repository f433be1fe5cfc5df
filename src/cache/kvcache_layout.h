/*
 * kvcache_layout.h — the memory an append into a caller-owned KV cache writes
 * (attn_forward_with_kvcache, kvcache_external.c): refusing layouts in which two appended rows,
 * or a row and a scale, would share an address, or in which the new rows alias that memory.
 * Internal to libattn.
 */
#ifndef ATTN_CACHE_KVCACHE_LAYOUT_H
#define ATTN_CACHE_KVCACHE_LAYOUT_H

#include "attn.h"

/* k_cache, v_cache: rank 4 [., ., Hkv, D] (stride[3] = 1, strides >= 0, checked); k_scale,
 * v_scale: Q8's rank-3 row scales or NULL (all four written by the append); k_new, v_new: the
 * rows appended, rank 4 [B, Tnew, Hkv, D], any strides (checked), or NULL (only read).
 * INVALID_ARGUMENT (naming the tensor, dimension and stride, or both tensors) when, within
 * one written tensor, dims 0..2 of size > 1 sorted by stride do not nest (a zero stride,
 * rows overlapping), or when two written tensors, or a new-row tensor and a written one
 * (naming both and their byte ranges), may share a byte (their address spans meet and
 * neither the gcd of their byte strides nor a bounded search of the differences of their
 * lattice points keeps their rows apart). k_new and v_new may overlap
 * each other. Conservative: a layout it accepts never collides; a few exotic ones that would
 * not are refused. Reads only the tensors' descriptions. */
attn_status attn_kv_check_append_layout(const attn_tensor *k_cache, const attn_tensor *v_cache,
                                        const attn_tensor *k_scale, const attn_tensor *v_scale,
                                        const attn_tensor *k_new, const attn_tensor *v_new,
                                        attn_error *error);

#endif /* ATTN_CACHE_KVCACHE_LAYOUT_H */
