/*
 * packed_kv.c — stores of packed K/V tiles in the call's arena (see packed_kv.h).
 */
#include <string.h>

#include "../core/internal.h"
#include "packed_kv.h"

static size_t round_up_to_16(size_t floats) { return (floats + 15) / 16 * 16; }

bool packed_kv_store_bytes(const attn_kernels *kernels, int tile_keys, int key_dim,
                           int value_dim, int64_t slots, size_t *bytes) {
    const size_t tile_floats = round_up_to_16(kernels->forward.packed_keys_floats(tile_keys, key_dim)) +
                               round_up_to_16(kernels->forward.packed_values_floats(tile_keys, value_dim));
    size_t per_slot, total;
    if (slots < 1 ||
        !attn_mul_size(tile_floats, sizeof(float), &per_slot) ||
        !attn_add_size(per_slot, sizeof(int64_t) + sizeof(packed_kv_tile), &per_slot) ||
        !attn_mul_size(per_slot, (size_t)slots, &total) ||
        !attn_add_size(total, 256, &total)) /* alignment of the three parts */
        return false;
    *bytes = total;
    return true;
}

void packed_kv_store_init(packed_kv_store *store, const attn_kernels *kernels, int tile_keys,
                          int key_dim, int value_dim, int64_t slots, void *memory) {
    memset(store, 0, sizeof *store);
    char *base = memory;
    store->kernels = kernels;
    store->tile_keys = tile_keys;
    store->key_dim = key_dim;
    store->value_dim = value_dim;
    store->slots = slots;
    store->key_tile_floats = round_up_to_16(kernels->forward.packed_keys_floats(tile_keys, key_dim));
    store->value_tile_floats = round_up_to_16(kernels->forward.packed_values_floats(tile_keys, value_dim));
    /* Small bookkeeping first (touched now), then the large tile arrays (touched lazily). */
    store->slot_tile = (int64_t *)base;
    store->slot = (packed_kv_tile *)(base + (((size_t)slots * sizeof(int64_t) + 63) / 64 * 64));
    char *tiles = (char *)store->slot + ((size_t)slots * sizeof(packed_kv_tile) + 63) / 64 * 64;
    store->keys = (float *)tiles;
    store->values = store->keys + (size_t)slots * store->key_tile_floats;
    for (int64_t s = 0; s < slots; ++s) store->slot_tile[s] = -1;
    store->owner_batch = store->owner_kv_head = -1;
}

/* Whether all `count` floats are finite (exponent bits not all ones; an integer test the
 * compiler vectorises). */
static bool all_finite(const float *values, size_t count) {
    uint32_t non_finite = 0;
    for (size_t n = 0; n < count; ++n) {
        uint32_t bits;
        memcpy(&bits, &values[n], sizeof bits);
        non_finite |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    return non_finite == 0;
}

const packed_kv_tile *packed_kv_pack_tile(packed_kv_store *store, const attn_tensor *k,
                                          const attn_tensor *v, int64_t b, int64_t kv_head,
                                          int64_t tile, int64_t key_count) {
    const int64_t s = tile % store->slots;
    packed_kv_tile *packed = &store->slot[s];
    const int64_t j0 = tile * store->tile_keys;
    const int64_t j1 = j0 + store->tile_keys < key_count ? j0 + store->tile_keys : key_count;
    float *keys = store->keys + (size_t)s * store->key_tile_floats;
    float *values = store->values + (size_t)s * store->value_tile_floats;
    packed->keys = keys;
    packed->values = values;
    packed->count = j1 > j0 ? (int)(j1 - j0) : 0;
    packed->values_finite = true;
    store->slot_tile[s] = tile;
    if (packed->count == 0) return packed;
    store->kernels->forward.pack_keys(packed->count, store->key_dim, attn_f32_at4(k, b, j0, kv_head, 0),
                              k->stride[1], k->stride[3], keys);
    store->kernels->forward.pack_values(packed->count, store->value_dim,
                                attn_f32_at4(v, b, j0, kv_head, 0), v->stride[1], v->stride[3],
                                values);
    packed->values_finite =
        all_finite(values, store->kernels->forward.packed_values_floats(packed->count, store->value_dim));
    return packed;
}

const packed_kv_tile *packed_kv_get(packed_kv_store *store, const attn_tensor *k,
                                    const attn_tensor *v, int64_t b, int64_t kv_head,
                                    int64_t tile, int64_t key_count) {
    if (store->owner_batch != b || store->owner_kv_head != kv_head) {
        for (int64_t s = 0; s < store->slots; ++s) store->slot_tile[s] = -1;
        store->owner_batch = b;
        store->owner_kv_head = kv_head;
    }
    const int64_t s = tile % store->slots;
    if (store->slot_tile[s] == tile) return &store->slot[s];
    return packed_kv_pack_tile(store, k, v, b, kv_head, tile, key_count);
}
