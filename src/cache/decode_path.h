/*
 * decode_path.h — which arithmetic attn_decode runs, named for tests and benchmarks. Not part
 * of the public API (the paths are internals that change with the kernels); linked from
 * libattn.a by the CLI's benchmarks and the tests.
 */
#ifndef ATTN_DECODE_PATH_H
#define ATTN_DECODE_PATH_H

#include <stdint.h>

#include "attn.h"

/* Which arithmetic attn_decode runs under `choice` on this CPU for a cache of `cache_dtype`
 * and queries of `query_dtype`, with `rows` = (Hq / Hkv) * Tq query rows per KV head:
 * "bf16 tiles" (AMX: bf16 queries against bf16 storage, rows >= 5), "bf16 in place"
 * (groups of <= 4 rows reading bf16 storage), "f16 in place" (groups of <= 4 rows reading
 * fp16 storage, AVX-512: the bits of "fp32 rows"), "int8 tiles" (AMX-INT8: int8 storage,
 * rows >= 5, key dims <= 1024), "int8 tile scores" (the same for rows <= 4: scores on the
 * tiles, P·V in place), "fp8 on bf16 tiles" (AMX: bf16 queries against fp8 storage, rows >= 5,
 * each chunk widened exactly to bf16), "8-bit in place" (int8 elsewhere, fp8 for <= 4 rows),
 * "fp32 large group" (>= 12 rows on chunks converted to float32) or "fp32 rows" (the rest);
 * NULL when `choice` is not available here or rows < 1. This is the path of the library's own
 * cache; on token-major pages (a caller's [page, slot, head, D], attn_forward_with_kvcache)
 * groups of 5..11 rows that would run "fp32 rows" on 16-bit storage read it in place
 * instead, with the same bits (docs/inference.md). */
const char *attn_decode_kernel_path(attn_kernel_choice choice, attn_dtype cache_dtype,
                                    attn_dtype query_dtype, int64_t rows);

#endif /* ATTN_DECODE_PATH_H */
