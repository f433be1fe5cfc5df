/*
 * packed_kv.c — stores of packed K/V tiles in the call's arena (see packed_kv.h), and the
 * packing of one tile from F32, BF16 or F16 storage.
 */
#include <string.h>

#include "../core/internal.h"
#include "packed_kv.h"

static size_t round_up_to_16(size_t floats) { return (floats + 15) / 16 * 16; }

size_t packed_kv_key_floats(const packed_kv_format *format, int count, int key_dim) {
    if (format->bf16_tiles) return (attn_lowp_packed_keys_bytes(count, key_dim) + 3) / 4;
    return format->kernels->forward.packed_keys_floats(count, key_dim);
}

size_t packed_kv_value_floats(const packed_kv_format *format, int count, int value_dim) {
    if (format->bf16_tiles) return (attn_lowp_packed_values_bytes(count, value_dim) + 3) / 4;
    return format->kernels->forward.packed_values_floats(count, value_dim);
}

bool packed_kv_store_bytes(const packed_kv_format *format, int tile_keys, int key_dim,
                           int value_dim, int64_t slots, size_t *bytes) {
    const size_t tile_floats = round_up_to_16(packed_kv_key_floats(format, tile_keys, key_dim)) +
                               round_up_to_16(packed_kv_value_floats(format, tile_keys, value_dim));
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

void packed_kv_store_init(packed_kv_store *store, const packed_kv_format *format,
                          int tile_keys, int key_dim, int value_dim, int64_t slots, void *memory) {
    memset(store, 0, sizeof *store);
    char *base = memory;
    store->format = *format;
    store->tile_keys = tile_keys;
    store->key_dim = key_dim;
    store->value_dim = value_dim;
    store->slots = slots;
    store->key_tile_floats = round_up_to_16(packed_kv_key_floats(format, tile_keys, key_dim));
    store->value_tile_floats = round_up_to_16(packed_kv_value_floats(format, tile_keys, value_dim));
    /* Small bookkeeping first (touched now), then the large tile arrays (touched lazily). */
    store->slot_tile = (int64_t *)base;
    store->slot = (packed_kv_tile *)(base + (((size_t)slots * sizeof(int64_t) + 63) / 64 * 64));
    char *tiles = (char *)store->slot + ((size_t)slots * sizeof(packed_kv_tile) + 63) / 64 * 64;
    store->keys = (float *)tiles;
    store->values = store->keys + (size_t)slots * store->key_tile_floats;
    for (int64_t s = 0; s < slots; ++s) store->slot_tile[s] = -1;
    store->owner_batch = store->owner_kv_head = -1;
}

/* Whether all `count` bf16 elements are finite (exponent bits not all ones). */
static bool all_finite_bf16(const uint16_t *values, size_t count) {
    uint32_t non_finite = 0;
    for (size_t n = 0; n < count; ++n) non_finite |= (values[n] & 0x7f80u) == 0x7f80u;
    return non_finite == 0;
}

/* Converts `count` rows of `dim` 16-bit elements at source (strides in elements) to fp32
 * rows [count][dim] in staging. */
static void convert_rows(const packed_kv_format *format, int count, int dim,
                         const uint16_t *source, int64_t token_stride, int64_t dim_stride,
                         float *staging) {
    const attn_lowp_convert *convert = &format->kernels->convert;
    if (format->dtype == ATTN_DTYPE_BF16)
        convert->bf16_to_f32_rows(count, dim, source, token_stride, dim_stride, staging, dim);
    else
        convert->f16_to_f32_rows(count, dim, source, token_stride, dim_stride, staging, dim);
}

/* Element (b, t, h, 0) of a 16-bit [B, T, H, D] view. */
static const uint16_t *u16_at4(const attn_tensor *t, int64_t b, int64_t i, int64_t h) {
    return (const uint16_t *)t->data + b * t->stride[0] + i * t->stride[1] + h * t->stride[2];
}

/* Packs `count` keys of (b, j0.., kv_head). */
static void pack_keys(const packed_kv_format *format, const attn_tensor *k, int64_t b,
                      int64_t j0, int64_t kv_head, int count, int dim, float *staging,
                      float *packed) {
    const attn_kernels *kernels = format->kernels;
    if (format->dtype == ATTN_DTYPE_F32) {
        kernels->forward.pack_keys(count, dim, attn_f32_at4(k, b, j0, kv_head, 0), k->stride[1],
                                   k->stride[3], packed);
    } else if (format->bf16_tiles) {
        attn_kernels_tiles16(kernels, format->dtype)->pack_keys(count, dim, u16_at4(k, b, j0, kv_head), k->stride[1],
                                k->stride[3], (uint16_t *)packed);
    } else {
        convert_rows(format, count, dim, u16_at4(k, b, j0, kv_head), k->stride[1], k->stride[3],
                     staging);
        kernels->forward.pack_keys(count, dim, staging, dim, 1, packed);
    }
}

bool packed_kv_pack_values(const packed_kv_format *format, const attn_tensor *v, int64_t b,
                           int64_t j0, int64_t kv_head, int count, int dim,
                           const uint8_t *alive, float *staging, float *packed) {
    const attn_kernels *kernels = format->kernels;
    if (format->dtype == ATTN_DTYPE_F32 && alive == NULL)
        return kernels->forward.pack_values(count, dim, attn_f32_at4(v, b, j0, kv_head, 0),
                                            v->stride[1], v->stride[3], packed);
    if (format->bf16_tiles) {
        const uint16_t *source = u16_at4(v, b, j0, kv_head);
        if (alive == NULL) {
            attn_kernels_tiles16(kernels, format->dtype)->pack_values(count, dim, source, v->stride[1], v->stride[3],
                                      (uint16_t *)packed);
            return all_finite_bf16((const uint16_t *)packed,
                                   attn_lowp_packed_values_bytes(count, dim) / 2);
        }
        uint16_t *rows = (uint16_t *)staging; /* [count][dim] bf16, dead keys zero */
        for (int c = 0; c < count; ++c)
            for (int e = 0; e < dim; ++e)
                rows[(size_t)c * dim + e] =
                    alive[c] ? source[c * v->stride[1] + e * v->stride[3]] : 0;
        attn_kernels_tiles16(kernels, format->dtype)->pack_values(count, dim, rows, dim, 1, (uint16_t *)packed);
        return all_finite_bf16((const uint16_t *)packed,
                               attn_lowp_packed_values_bytes(count, dim) / 2);
    }
    if (format->dtype == ATTN_DTYPE_F32) {
        const float *source = attn_f32_at4(v, b, j0, kv_head, 0);
        for (int c = 0; c < count; ++c)
            for (int e = 0; e < dim; ++e)
                staging[(size_t)c * dim + e] =
                    alive[c] ? source[c * v->stride[1] + e * v->stride[3]] : 0.0f;
    } else {
        convert_rows(format, count, dim, u16_at4(v, b, j0, kv_head), v->stride[1], v->stride[3],
                     staging);
        if (alive != NULL)
            for (int c = 0; c < count; ++c)
                if (!alive[c]) memset(staging + (size_t)c * dim, 0, (size_t)dim * sizeof(float));
    }
    return kernels->forward.pack_values(count, dim, staging, dim, 1, packed);
}

/* V's rows of the tile where they are already in the packed layout — a dense head of float32
 * rows of exactly Dv floats, Dv a multiple of the vector width (a packed row has no padding
 * then), as [B, H, T, D] tensors have — so that no copy is made; NULL otherwise. */
static const float *values_in_place(const packed_kv_store *store, const attn_tensor *v,
                                    int64_t b, int64_t j0, int64_t kv_head) {
    const packed_kv_format *format = &store->format;
    const int64_t dim = store->value_dim;
    if (format->dtype != ATTN_DTYPE_F32 || format->bf16_tiles || v->stride[3] != 1 ||
        v->stride[1] != dim || (int64_t)packed_kv_value_floats(format, 1, (int)dim) != dim)
        return NULL;
    const float *rows = attn_f32_at4(v, b, j0, kv_head, 0);
    return (uintptr_t)rows % 64 == 0 ? rows : NULL;
}

const packed_kv_tile *packed_kv_pack_tile(packed_kv_store *store, const attn_tensor *k,
                                          const attn_tensor *v, int64_t b, int64_t kv_head,
                                          int64_t tile, int64_t key_count, float *staging) {
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
    pack_keys(&store->format, k, b, j0, kv_head, packed->count, store->key_dim, staging, keys);
    const float *in_place = values_in_place(store, v, b, j0, kv_head);
    if (in_place != NULL) {
        packed->values = in_place;
        packed->values_finite = false;
        return packed;
    }
    packed->values_finite = packed_kv_pack_values(&store->format, v, b, j0, kv_head,
                                                  packed->count, store->value_dim, NULL, staging,
                                                  values);
    return packed;
}

const packed_kv_tile *packed_kv_get(packed_kv_store *store, const attn_tensor *k,
                                    const attn_tensor *v, int64_t b, int64_t kv_head,
                                    int64_t tile, int64_t key_count, float *staging) {
    if (store->owner_batch != b || store->owner_kv_head != kv_head) {
        for (int64_t s = 0; s < store->slots; ++s) store->slot_tile[s] = -1;
        store->owner_batch = b;
        store->owner_kv_head = kv_head;
    }
    const int64_t s = tile % store->slots;
    if (store->slot_tile[s] == tile) return &store->slot[s];
    return packed_kv_pack_tile(store, k, v, b, kv_head, tile, key_count, staging);
}
