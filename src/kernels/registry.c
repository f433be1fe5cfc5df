/*
 * registry.c — the one selector (registry.h): which ISA tables exist in this build, what each
 * needs from the CPU and OS (cpu_features.h), and the registries built from them, once per
 * process. A registry is the generic table with the overrides of every ISA on its chain
 * (an ISA's `base`, then the ISA itself) applied in order.
 *
 * Adding an ISA: one line in `isas` below (and the table in its folder).
 */
#include "kernels/registry.h"

#include <pthread.h>
#include <string.h>

#include "core/internal.h"
#include "kernels/cpu_features.h"

static int usable_always(const attn_cpu_features *f) { return (void)f, 1; }
#if defined(ATTN_HAVE_AVX2_KERNELS)
/* F16C (VCVTPH2PS: the fp8 decode kernels, fp16 widening) comes with every AVX2 CPU made; it is
 * checked all the same. */
static int usable_avx2(const attn_cpu_features *f) { return f->avx2 && f->fma && f->f16c; }
#endif
#if defined(ATTN_HAVE_AVX512_KERNELS)
static int usable_avx512(const attn_cpu_features *f) {
    return f->avx512f && f->avx512dq && f->avx512bw && f->avx512vl && f->fma;
}
#endif
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
static int usable_avx512bf16(const attn_cpu_features *f) {
    return usable_avx512(f) && f->avx512_bf16 && f->f16c;
}
/* The VDPBF16PS decode kernels (avx512bf16/decode_avx512bf16.c): where VDPBF16PS issues at
 * the rate of an FMA (AMD; cpu_features.h vendor_amd) and VPERMI2B widens fp8 rows to bf16
 * (AVX512-VBMI, decode_q8_avx512.h). */
static int usable_dpbf16_decode(const attn_cpu_features *f) {
    return usable_avx512bf16(f) && f->vendor_amd && f->avx512vbmi;
}
#endif
#if defined(ATTN_HAVE_AMX_KERNELS) && defined(ATTN_HAVE_AVX512BF16_KERNELS)
/* amx_tile / amx_bf16 are 1 only with XCR0 tile state and the Linux XTILEDATA permission. */
static int usable_amx(const attn_cpu_features *f) {
    return usable_avx512bf16(f) && f->amx_tile && f->amx_bf16;
}
/* amx_fp16 (CPUID.(EAX=7,ECX=1):EAX bit 21) is 1 only when amx_tile is. */
static int usable_amx_fp16(const attn_cpu_features *f) { return usable_amx(f) && f->amx_fp16; }
/* The int8 decode tiles: AMX-INT8 (TDPBSSD / TDPBUSD), CPUID.(EAX=7,ECX=0):EDX bit 25. */
static int usable_amx_int8(const attn_cpu_features *f) { return usable_amx(f) && f->amx_int8; }
#endif

typedef struct isa_entry {
    attn_kernel_choice choice;
    const char *name;        /* attn_kernel_choice_name: "avx2" */
    const char *label;       /* as in the error messages: "AVX2" */
    attn_kernel_choice base; /* the registry this one overrides (GENERIC for the first) */
    const attn_kernel_isa *isa; /* NULL: not compiled into this build */
    int (*usable)(const attn_cpu_features *features);
    const char *requirement; /* for the error message */
    /* Optional: slots added to this same registry where one more feature is present (the
     * AMX-FP16 tiles, the AMX-INT8 decode tiles on AMX), in order; NULL = none. */
    struct {
        const attn_kernel_isa *isa;
        int (*usable)(const attn_cpu_features *features);
    } extras[2];
} isa_entry;

/* What this build compiled in: an ISA's table and its usable() predicate, or nothing. */
#define ISA_GENERIC &attn_isa_generic, usable_always
#if defined(ATTN_HAVE_AVX2_KERNELS)
#define ISA_AVX2 &attn_isa_avx2, usable_avx2
#else
#define ISA_AVX2 NULL, NULL
#endif
#if defined(ATTN_HAVE_AVX512_KERNELS)
#define ISA_AVX512 &attn_isa_avx512, usable_avx512
#else
#define ISA_AVX512 NULL, NULL
#endif
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
#define ISA_AVX512BF16 &attn_isa_avx512bf16, usable_avx512bf16
#define ISA_AVX512BF16_EXTRAS {{&attn_isa_avx512bf16_decode, usable_dpbf16_decode}, {NULL, NULL}}
#else
#define ISA_AVX512BF16 NULL, NULL
#define ISA_AVX512BF16_EXTRAS {{NULL, NULL}, {NULL, NULL}}
#endif
#if defined(ATTN_HAVE_AMX_KERNELS) && defined(ATTN_HAVE_AVX512BF16_KERNELS)
#define ISA_AMX &attn_isa_amx, usable_amx
#define ISA_AMX_EXTRAS {{&attn_isa_amx_fp16, usable_amx_fp16}, {&attn_isa_amx_int8, usable_amx_int8}}
#else
#define ISA_AMX NULL, NULL
#define ISA_AMX_EXTRAS {{NULL, NULL}, {NULL, NULL}}
#endif
#define NO_EXTRA {{NULL, NULL}, {NULL, NULL}}

/* The one mapping from attn_kernel_choice to a registry, from the portable table up; AUTO
 * takes the last usable entry. A base comes before the ISAs built on it. New choices
 * (AVX512_BF16, AMX, ...) are one line each, with their ISA_ macro above. */
static const isa_entry isas[] = {
    /* choice, name, label, base, table + usable, what it needs[, extra table + usable] */
    {ATTN_KERNEL_GENERIC, "generic", "GENERIC", ATTN_KERNEL_GENERIC, ISA_GENERIC, "", NO_EXTRA},
    {ATTN_KERNEL_AVX2, "avx2", "AVX2", ATTN_KERNEL_GENERIC, ISA_AVX2, "AVX2 + FMA + F16C", NO_EXTRA},
    {ATTN_KERNEL_AVX512, "avx512", "AVX512", ATTN_KERNEL_GENERIC, ISA_AVX512, "AVX-512 F/DQ/BW/VL", NO_EXTRA},
    {ATTN_KERNEL_AVX512_BF16, "avx512_bf16", "AVX512_BF16", ATTN_KERNEL_AVX512, ISA_AVX512BF16,
     "AVX-512 F/DQ/BW/VL + AVX512-BF16 + F16C", ISA_AVX512BF16_EXTRAS},
    {ATTN_KERNEL_AMX, "amx", "AMX", ATTN_KERNEL_AVX512_BF16, ISA_AMX,
     "AMX-TILE + AMX-BF16 (CPUID, XCR0 tile state and the OS's XTILEDATA permission)",
     ISA_AMX_EXTRAS},
};
enum { ISA_COUNT = sizeof isas / sizeof isas[0] };

static attn_kernels registries[ISA_COUNT];
static int available[ISA_COUNT];
static int best = 0;
static pthread_once_t built_once = PTHREAD_ONCE_INIT;

static int entry_of(attn_kernel_choice choice) {
    for (int i = 0; i < ISA_COUNT; ++i)
        if (isas[i].choice == choice) return i;
    return -1;
}

#define TAKE(part, slot) \
    if (isa->part->slot != NULL) into->part.slot = isa->part->slot

/* Applies the slots `isa` gives over `into` (override groups as in registry.h). */
static void apply(attn_kernels *into, const attn_kernel_isa *isa) {
    into->name = isa->name;
    if (isa->forward != NULL) {
        const attn_forward_kernels *from = isa->forward;
        if (from->pack_keys != NULL) {
            into->forward.pack_keys = from->pack_keys;
            into->forward.packed_keys_floats = from->packed_keys_floats;
            into->forward.score_tile = from->score_tile;
        }
        if (from->pack_values != NULL) {
            into->forward.pack_values = from->pack_values;
            into->forward.packed_values_floats = from->packed_values_floats;
            into->forward.accumulate_values = from->accumulate_values;
        }
        TAKE(forward, softmax_step);
        TAKE(forward, scale_rows);
        TAKE(forward, philox_blocks);
    }
    if (isa->backward != NULL) {
        TAKE(backward, accumulate);
        TAKE(backward, accumulate_transposed);
        TAKE(backward, probabilities);
        TAKE(backward, score_gradient);
    }
    if (isa->decode != NULL) {
        TAKE(decode, bf16_to_f32);
        TAKE(decode, f16_to_f32);
        TAKE(decode, widen_rows);
        TAKE(decode, score_chunk);
        TAKE(decode, softmax_chunk);
        TAKE(decode, accumulate_chunk);
        TAKE(decode, accumulate_chunk_bf16);
        TAKE(decode, dequantize_rows);
        TAKE(decode, widen_fp8_bf16);
        if (isa->decode->score_chunk_q8 != NULL) {
            into->decode.score_chunk_q8 = isa->decode->score_chunk_q8;
            into->decode.accumulate_chunk_q8 = isa->decode->accumulate_chunk_q8;
            into->decode.accumulate_q8_requests_ahead = isa->decode->accumulate_q8_requests_ahead;
        }
        if (isa->decode->score_chunk_f16 != NULL) {
            into->decode.score_chunk_f16 = isa->decode->score_chunk_f16;
            into->decode.accumulate_chunk_f16 = isa->decode->accumulate_chunk_f16;
        }
        if (isa->decode->score_chunk_bf16_widened != NULL) {
            into->decode.score_chunk_bf16_widened = isa->decode->score_chunk_bf16_widened;
            into->decode.accumulate_chunk_bf16_widened = isa->decode->accumulate_chunk_bf16_widened;
            into->decode.token_major_in_place_rows = isa->decode->token_major_in_place_rows;
        }
        if (isa->decode->score_chunk_bf16 != NULL) {
            into->decode.score_chunk_bf16 = isa->decode->score_chunk_bf16;
            into->decode.prepare_bf16_queries = isa->decode->prepare_bf16_queries;
        }
        if (isa->decode->score_chunk_tiles != NULL) {
            into->decode.score_chunk_tiles = isa->decode->score_chunk_tiles;
            into->decode.prepare_tile_queries = isa->decode->prepare_tile_queries;
            into->decode.accumulate_chunk_tiles = isa->decode->accumulate_chunk_tiles;
            into->decode.tile_rows_bf16 = isa->decode->tile_rows_bf16;
            into->decode.tile_rows_fp8 = isa->decode->tile_rows_fp8;
            into->decode.score_chunk_tiles_fp8 = isa->decode->score_chunk_tiles_fp8;
            into->decode.accumulate_chunk_tiles_fp8 = isa->decode->accumulate_chunk_tiles_fp8;
        }
        if (isa->decode->score_chunk_q8_tiles != NULL) {
            into->decode.score_chunk_q8_tiles = isa->decode->score_chunk_q8_tiles;
            into->decode.prepare_q8_tile_queries = isa->decode->prepare_q8_tile_queries;
            into->decode.accumulate_chunk_q8_tiles = isa->decode->accumulate_chunk_q8_tiles;
        }
        if (isa->decode->score_chunk_group != NULL) {
            into->decode.score_chunk_group = isa->decode->score_chunk_group;
            into->decode.prepare_group_queries = isa->decode->prepare_group_queries;
            into->decode.accumulate_chunk_group = isa->decode->accumulate_chunk_group;
        }
    }
    if (isa->bf16 != NULL) {
        into->bf16 = *isa->bf16;
        into->bf16_native = isa->bf16_native;
    }
    if (isa->f16 != NULL) {
        into->f16 = *isa->f16;
        into->f16_native = isa->f16_native;
    }
    if (isa->convert != NULL) into->convert = *isa->convert;
}

static void build(void) {
    const attn_cpu_features *features = attn_cpu_features_get();
    for (int i = 0; i < ISA_COUNT; ++i) {
        const isa_entry *entry = &isas[i];
        const int base = entry_of(entry->base);
        if (entry->isa == NULL || !entry->usable(features) || base < 0 || base > i ||
            (base < i && !available[base]))
            continue;
        if (base < i) registries[i] = registries[base];
        apply(&registries[i], entry->isa);
        for (int x = 0; x < 2; ++x)
            if (entry->extras[x].isa != NULL && entry->extras[x].usable(features))
                apply(&registries[i], entry->extras[x].isa);
        available[i] = 1;
        best = i;
    }
}

static int usable_entry(attn_kernel_choice choice) {
    pthread_once(&built_once, build);
    if (choice == ATTN_KERNEL_AUTO) return best;
    const int i = entry_of(choice);
    return i >= 0 && available[i] ? i : -1;
}

attn_status attn_kernels_select(attn_kernel_choice choice, const attn_kernels **kernels,
                                attn_error *error) {
    const int i = usable_entry(choice);
    if (i >= 0) {
        *kernels = &registries[i];
        return ATTN_OK;
    }
    const int known = entry_of(choice);
    if (known < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "execution.kernel = %d: unknown",
                         (int)choice);
    return attn_fail(error, ATTN_ERROR_UNSUPPORTED,
                     "execution.kernel = %s: this CPU, OS or build has no %s kernels",
                     isas[known].label, isas[known].requirement);
}

int attn_kernels_available(const attn_kernels **list, int capacity) {
    pthread_once(&built_once, build);
    int count = 0;
    for (int i = 0; i < ISA_COUNT; ++i) {
        if (!available[i]) continue;
        if (count < capacity) list[count] = &registries[i];
        ++count;
    }
    return count;
}

int attn_cpu_supports(attn_kernel_choice choice) { return usable_entry(choice) >= 0; }

const char *attn_kernel_choice_name(attn_kernel_choice choice) {
    if (choice == ATTN_KERNEL_AUTO) return "auto";
    const int i = entry_of(choice);
    return i >= 0 ? isas[i].name : NULL;
}

int attn_kernel_choice_from_name(const char *name, attn_kernel_choice *choice) {
    if (name == NULL) return 0;
    if (strcmp(name, "auto") == 0) {
        *choice = ATTN_KERNEL_AUTO;
        return 1;
    }
    for (int i = 0; i < ISA_COUNT; ++i)
        if (strcmp(name, isas[i].name) == 0) {
            *choice = isas[i].choice;
            return 1;
        }
    return 0;
}
