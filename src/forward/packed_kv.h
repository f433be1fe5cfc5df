/*
 * packed_kv.h — a store of kernel-packed K and V tiles of one (batch, KV head), so that every
 * key tile is packed once and then reused by every query tile and every query head of the
 * GQA group (flash_forward.c).
 *
 * Key tile t holds keys [t * tile_keys, min((t + 1) * tile_keys, key_count)) of the owner
 * (b, kv_head), key_count being the valid key count of batch b. Two uses:
 *  - shared: slots = key tiles (O(Tk · (Dk + Dv)) floats, one head); the threads pack the
 *    tiles together with packed_kv_pack_tile, then read them;
 *  - per thread, under a tight memory limit: one slot that packed_kv_get repacks whenever
 *    another tile is asked for.
 * Either way the packed bytes are the same, so results do not depend on the choice.
 *
 * Packed tiles rely on the prefix property of kernels/registry.h: the packing of a tile's keys is also
 * a valid packing of its first `count` keys, for any count up to the tile's.
 *
 * Storage types (packed_kv_format): F32 K/V are packed by the forward kernels; BF16 / F16 K/V
 * are either converted to fp32 (exactly) through the calling thread's staging buffer and then
 * packed by the forward kernels, or (bf16_tiles) packed as bf16 by the registry's bf16 tiles
 * in the layouts of kernels/lowp.h. Tile pointers are `float *` in every case; with
 * bf16_tiles they point at bf16 data (sizes counted in floats, two bf16 per float).
 */
#ifndef ATTN_PACKED_KV_H
#define ATTN_PACKED_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "../kernels/registry.h"

/* How K and V are stored and packed. */
typedef struct packed_kv_format {
    const attn_kernels *kernels;
    attn_dtype dtype; /* of K and V: F32, BF16 or F16 */
    bool bf16_tiles;  /* BF16 packed by kernels->bf16 (lowp.h) instead of converted */
} packed_kv_format;

/* Floats of one packed key / value tile of `count` keys in `format`. */
size_t packed_kv_key_floats(const packed_kv_format *format, int count, int key_dim);
size_t packed_kv_value_floats(const packed_kv_format *format, int count, int value_dim);

/* Packs `count` values of `dim` elements of V from (b, j0, kv_head) on into `packed`, in
 * `format`; the values of keys c with alive[c] == 0 become zeros (alive NULL: all kept).
 * staging: count * dim floats of the calling thread. Returns whether every packed value is
 * finite. */
bool packed_kv_pack_values(const packed_kv_format *format, const attn_tensor *v, int64_t b,
                           int64_t j0, int64_t kv_head, int count, int dim,
                           const uint8_t *alive, float *staging, float *packed);

/* One packed key tile and its value tile. */
typedef struct packed_kv_tile {
    const float *keys;   /* kernels->forward.pack_keys of `count` keys */
    const float *values; /* kernels->forward.pack_values of the same `count` values, or V's
                          * own rows where they are laid out so already (float32 rows, unit
                          * element stride, the packed row length as token stride, aligned) */
    int count;           /* keys in the tile (tile_keys except at the end of the head) */
    bool values_finite;  /* no inf or NaN among the tile's values (false: not known, for
                          * values read in place) */
} packed_kv_tile;

typedef struct packed_kv_store {
    packed_kv_format format;
    int tile_keys, key_dim, value_dim;
    int64_t slots;            /* tiles held at once: all key tiles of a head, or 1 */
    size_t key_tile_floats;   /* floats per packed key tile (64-byte multiple) */
    size_t value_tile_floats; /* floats per packed value tile (64-byte multiple) */
    float *keys;              /* [slots][key_tile_floats] */
    float *values;            /* [slots][value_tile_floats] */
    int64_t *slot_tile;       /* [slots]: key tile held by each slot, -1 = none */
    packed_kv_tile *slot;     /* [slots] */
    int64_t owner_batch, owner_kv_head; /* whose tiles the slots hold (-1: nobody's) */
} packed_kv_store;

/* Bytes of a store with `slots` slots for tiles of tile_keys keys of Dk / Dv dims; false
 * on overflow. */
bool packed_kv_store_bytes(const packed_kv_format *format, int tile_keys, int key_dim,
                           int value_dim, int64_t slots, size_t *bytes);

/* Sets up a store in `memory` (64-byte aligned, packed_kv_store_bytes of it, owned by the
 * caller: a part of the call's arena). Pages of slots never used are never touched. */
void packed_kv_store_init(packed_kv_store *store, const packed_kv_format *format,
                          int tile_keys, int key_dim, int value_dim, int64_t slots, void *memory);

/* Packs key tile `tile` of (b, kv_head) into slot tile % slots and returns it (count 0 when
 * the tile holds no valid key). k, v: [B, Tk, Hkv, D] views; key_count: valid keys of b;
 * staging: tile_keys * max(Dk, Dv) floats of the calling thread (used for F16 / converted
 * BF16; may be NULL for F32 and bf16_tiles). */
const packed_kv_tile *packed_kv_pack_tile(packed_kv_store *store, const attn_tensor *k,
                                          const attn_tensor *v, int64_t b, int64_t kv_head,
                                          int64_t tile, int64_t key_count, float *staging);

/* The packed key tile `tile` of (b, kv_head), packing it first when the store does not hold
 * it (the per-thread use). Arguments as packed_kv_pack_tile. */
const packed_kv_tile *packed_kv_get(packed_kv_store *store, const attn_tensor *k,
                                    const attn_tensor *v, int64_t b, int64_t kv_head,
                                    int64_t tile, int64_t key_count, float *staging);

#endif /* ATTN_PACKED_KV_H */
