/*
 * test_kernels_registry.c — the kernel selector and the CPU features it decides from
 * (src/kernels/registry.h, cpu_features.h):
 *  - 8 threads make the process's first selections at once and all get the same registries;
 *  - the detected features are printed and, on Linux, equal the flags /proc/cpuinfo lists
 *    (a flag the kernel reports must be detected, and a detected one must be reported);
 *  - each choice is available exactly when the build has its table and the features allow
 *    it, then selects a registry named after it with every mandatory slot filled; AUTO is
 *    the last available one of generic < avx2 < avx512; an unavailable choice is
 *    ATTN_ERROR_UNSUPPORTED and an unknown one ATTN_ERROR_INVALID_ARGUMENT naming the value,
 *    both leaving the output pointer as it was.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/registry.h"
#include "test_support.h"

enum { THREADS = 8 };

typedef struct selection {
    const attn_kernels *automatic, *generic;
    const attn_cpu_features *features;
    attn_status status;
} selection;

static void *select_from_thread(void *argument) {
    selection *s = argument;
    attn_error error;
    s->status = attn_kernels_select(ATTN_KERNEL_AUTO, &s->automatic, &error);
    if (s->status == ATTN_OK)
        s->status = attn_kernels_select(ATTN_KERNEL_GENERIC, &s->generic, &error);
    s->features = attn_cpu_features_get();
    return NULL;
}

static void test_concurrent_first_selection(void) {
    pthread_t threads[THREADS];
    selection selections[THREADS];
    memset(selections, 0, sizeof selections);
    int started = 0;
    for (int t = 0; t < THREADS; ++t)
        started += pthread_create(&threads[t], NULL, select_from_thread, &selections[t]) == 0;
    CHECK(started == THREADS, "started %d of %d threads", started, THREADS);
    for (int t = 0; t < started; ++t) pthread_join(threads[t], NULL);
    int same = 1;
    for (int t = 0; t < started; ++t)
        same &= selections[t].status == ATTN_OK && selections[t].automatic != NULL &&
                selections[t].automatic == selections[0].automatic &&
                selections[t].generic == selections[0].generic &&
                selections[t].features == attn_cpu_features_get();
    CHECK(same, "every thread's first selection returned the same registries");
}

/* The flags word list of the first processor in /proc/cpuinfo, or 0 when unreadable. */
static int read_cpuinfo_flags(char *flags, size_t size) {
    FILE *file = fopen("/proc/cpuinfo", "r");
    if (file == NULL) return 0;
    char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof line, file) != NULL) {
        if (strncmp(line, "flags", 5) != 0) continue;
        const char *colon = strchr(line, ':');
        if (colon == NULL) continue;
        snprintf(flags, size, " %s", colon + 1);
        size_t n = strlen(flags);
        while (n > 0 && (flags[n - 1] == '\n' || flags[n - 1] == ' ')) flags[--n] = '\0';
        strncat(flags, " ", size - strlen(flags) - 1);
        found = 1;
    }
    fclose(file);
    return found;
}

static void test_features_against_cpuinfo(void) {
    const attn_cpu_features *f = attn_cpu_features_get();
    printf("cpu features: xcr0 = 0x%llx, amx permission requested %d granted %d\n",
           (unsigned long long)f->xcr0, f->amx_permission_requested,
           f->amx_permission_granted);
    for (int i = 0; i < ATTN_CPU_FEATURE_COUNT; ++i)
        printf("  %-12s %d\n", attn_cpu_feature_name(i), attn_cpu_feature_flag(f, i));
    CHECK(attn_cpu_feature_name(ATTN_CPU_FEATURE_COUNT) == NULL && attn_cpu_feature_name(-1) == NULL,
          "feature names end at ATTN_CPU_FEATURE_COUNT");
    static char flags[16384];
    if (!read_cpuinfo_flags(flags, sizeof flags)) {
        printf("no /proc/cpuinfo flags here: cross-check skipped\n");
        return;
    }
    for (int i = 0; i < ATTN_CPU_FEATURE_COUNT; ++i) {
        char word[64];
        snprintf(word, sizeof word, " %s ", attn_cpu_feature_name(i));
        int listed = strstr(flags, word) != NULL;
#if defined(ATTN_EMULATED_AVX512)
        /* the emulated build reports the extensions its AVX-512 tables take on an AVX2 CPU */
        if (f->avx2 && strstr(" avx512f avx512bw avx512dq avx512vl avx512_bf16 avx512vbmi gfni ", word))
            listed = 1;
#endif
        const int detected = attn_cpu_feature_flag(f, i);
        CHECK(listed == detected, "%s: /proc/cpuinfo %s it, detection says %d",
              attn_cpu_feature_name(i), listed ? "lists" : "does not list", detected);
    }
    /* the vendor (not a flag): /proc/cpuinfo's vendor_id line */
    FILE *cpuinfo = fopen("/proc/cpuinfo", "r");
    if (cpuinfo != NULL) {
        char line[512];
        int amd = -1;
        while (amd < 0 && fgets(line, sizeof line, cpuinfo) != NULL)
            if (strncmp(line, "vendor_id", 9) == 0) amd = strstr(line, "AuthenticAMD") != NULL;
        fclose(cpuinfo);
        if (amd >= 0)
            CHECK(amd == f->vendor_amd, "vendor_amd = %d, /proc/cpuinfo says %s", f->vendor_amd,
                  amd ? "AuthenticAMD" : "another vendor");
    }
}

static int complete(const attn_kernels *k) {
    const attn_forward_kernels *f = &k->forward;
    const attn_backward_kernels *b = &k->backward;
    const attn_decode_kernels *d = &k->decode;
    return k->name && f->packed_keys_floats && f->packed_values_floats && f->pack_keys &&
           f->pack_values && f->score_tile && f->accumulate_values && f->softmax_step &&
           f->scale_rows && b->accumulate && b->accumulate_transposed && b->probabilities &&
           b->score_gradient && d->bf16_to_f32 && d->f16_to_f32 && d->score_chunk &&
           d->softmax_chunk && d->accumulate_chunk &&
           /* the optional bf16 pair comes together (accumulate may exist alone) */
           (d->prepare_bf16_queries == NULL || d->score_chunk_bf16 != NULL) &&
           /* the 16-bit tile parts, each complete */
           k->bf16.name && k->bf16.pack_keys && k->bf16.pack_values && k->bf16.score_tile &&
           k->bf16.accumulate_values && k->f16.name && k->f16.pack_keys && k->f16.pack_values &&
           k->f16.score_tile && k->f16.accumulate_values;
}

static void test_choices(void) {
    const attn_cpu_features *f = attn_cpu_features_get();
    (void)f; /* unused when the build has no SIMD tables */
    const struct {
        attn_kernel_choice choice;
        const char *name;
        int built, allowed;
    } choices[] = {
        {ATTN_KERNEL_GENERIC, "generic", 1, 1},
#if defined(ATTN_HAVE_AVX2_KERNELS)
        {ATTN_KERNEL_AVX2, "avx2", 1, f->avx2 && f->fma},
#else
        {ATTN_KERNEL_AVX2, "avx2", 0, 0},
#endif
#if defined(ATTN_HAVE_AVX512_KERNELS)
        {ATTN_KERNEL_AVX512, "avx512", 1,
         f->avx512f && f->avx512dq && f->avx512bw && f->avx512vl && f->fma},
#else
        {ATTN_KERNEL_AVX512, "avx512", 0, 0},
#endif
#if defined(ATTN_HAVE_AVX512BF16_KERNELS)
        {ATTN_KERNEL_AVX512_BF16, "avx512_bf16", 1,
         f->avx512f && f->avx512dq && f->avx512bw && f->avx512vl && f->fma && f->avx512_bf16 &&
             f->f16c},
#else
        {ATTN_KERNEL_AVX512_BF16, "avx512_bf16", 0, 0},
#endif
        /* AMX: only where CPUID, XCR0 and the OS's XTILEDATA permission allow it (the flags
         * are 1 only then); elsewhere UNSUPPORTED and AUTO falls back to the entry above. */
#if defined(ATTN_HAVE_AMX_KERNELS) && defined(ATTN_HAVE_AVX512BF16_KERNELS)
        {ATTN_KERNEL_AMX, "amx", 1,
         f->avx512f && f->avx512dq && f->avx512bw && f->avx512vl && f->fma && f->avx512_bf16 &&
             f->f16c && f->amx_tile && f->amx_bf16},
#else
        {ATTN_KERNEL_AMX, "amx", 0, 0},
#endif
    };
    const attn_kernels *best = NULL;
    for (size_t c = 0; c < sizeof choices / sizeof choices[0]; ++c) {
        const int expected = choices[c].built && choices[c].allowed;
        CHECK(attn_cpu_supports(choices[c].choice) == expected, "%s available = %d",
              choices[c].name, expected);
        attn_kernel_choice parsed = ATTN_KERNEL_AUTO;
        CHECK(strcmp(attn_kernel_choice_name(choices[c].choice), choices[c].name) == 0 &&
                  attn_kernel_choice_from_name(choices[c].name, &parsed) &&
                  parsed == choices[c].choice,
              "choice name %s, and back", choices[c].name);
        const attn_kernels *sentinel = (const attn_kernels *)&choices[c];
        const attn_kernels *kernels = sentinel;
        attn_error error;
        const attn_status status = attn_kernels_select(choices[c].choice, &kernels, &error);
        printf("registry %-8s built %d allowed %d -> %s\n", choices[c].name, choices[c].built,
               choices[c].allowed, status == ATTN_OK ? kernels->name : error.message);
        if (!expected) {
            CHECK_STATUS(status, ATTN_ERROR_UNSUPPORTED, &error, "%s unsupported",
                         choices[c].name);
            CHECK(kernels == sentinel, "%s: output untouched on failure", choices[c].name);
            continue;
        }
        CHECK_STATUS(status, ATTN_OK, &error, "select %s", choices[c].name);
        if (status != ATTN_OK) continue;
        CHECK(strcmp(kernels->name, choices[c].name) == 0, "registry %s is named %s",
              choices[c].name, kernels->name);
        CHECK(complete(kernels), "registry %s fills every mandatory slot", kernels->name);
        const char *bf16_tiles = choices[c].choice == ATTN_KERNEL_AMX           ? "amx"
                                 : choices[c].choice == ATTN_KERNEL_AVX512_BF16 ? "avx512bf16"
                                                                                : "generic";
        CHECK(kernels->bf16.name && strcmp(kernels->bf16.name, bf16_tiles) == 0 &&
                  kernels->bf16_native == (choices[c].choice == ATTN_KERNEL_AMX),
              "registry %s: bf16 tiles %s (native %d)", choices[c].name,
              kernels->bf16.name ? kernels->bf16.name : "(none)", kernels->bf16_native);
        /* fp16 on tiles only in the AMX registry, and there only with AMX-FP16 (CPUID 7.1 EAX
         * bit 21); everywhere else the generic fp16 tiles, unused by the forward pass. */
        const int f16_tiles = choices[c].choice == ATTN_KERNEL_AMX && f->amx_fp16;
        CHECK(kernels->f16.name && strcmp(kernels->f16.name, f16_tiles ? "amx_fp16" : "generic") == 0 &&
                  kernels->f16_native == f16_tiles && attn_kernels_f16_on_tiles(kernels) == f16_tiles,
              "registry %s: fp16 tiles %s (native %d)", choices[c].name,
              kernels->f16.name ? kernels->f16.name : "(none)", kernels->f16_native);
        const char *query = attn_kernel_f16_tiles(choices[c].choice);
        CHECK(f16_tiles ? query != NULL && strcmp(query, "amx_fp16") == 0 : query == NULL,
              "attn_kernel_f16_tiles(%s) = %s", choices[c].name, query ? query : "NULL");
        CHECK(attn_kernels_tiles16(kernels, ATTN_DTYPE_F16) == &kernels->f16 &&
                  attn_kernels_tiles16(kernels, ATTN_DTYPE_BF16) == &kernels->bf16,
              "registry %s: the tile table of each 16-bit dtype", choices[c].name);
        best = kernels;
    }
    const attn_kernels *automatic = NULL;
    attn_error error;
    CHECK_STATUS(attn_kernels_select(ATTN_KERNEL_AUTO, &automatic, &error), ATTN_OK, &error,
                 "select AUTO");
    CHECK(automatic == best, "AUTO is the best available registry (%s)",
          best ? best->name : "none");
    CHECK(attn_cpu_supports(ATTN_KERNEL_AUTO), "AUTO is always available");

    const attn_kernels *untouched = best;
    const attn_status status = attn_kernels_select((attn_kernel_choice)42, &untouched, &error);
    CHECK_STATUS(status, ATTN_ERROR_INVALID_ARGUMENT, &error, "unknown choice 42");
    CHECK(status != ATTN_OK && strstr(error.message, "42") != NULL,
          "message names the value: %s", error.message);
    CHECK(untouched == best, "output untouched for an unknown choice");
    CHECK(!attn_cpu_supports((attn_kernel_choice)42), "an unknown choice is not available");
    CHECK(attn_kernel_choice_name((attn_kernel_choice)42) == NULL, "no name for 42");
    attn_kernel_choice parsed = ATTN_KERNEL_AVX2;
    CHECK(!attn_kernel_choice_from_name("avx3", &parsed) && parsed == ATTN_KERNEL_AVX2 &&
              !attn_kernel_choice_from_name(NULL, &parsed),
          "unknown names are refused, the choice untouched");
    CHECK(attn_kernel_choice_from_name("auto", &parsed) && parsed == ATTN_KERNEL_AUTO &&
              strcmp(attn_kernel_choice_name(ATTN_KERNEL_AUTO), "auto") == 0,
          "auto, both ways");
}

int main(void) {
    test_concurrent_first_selection(); /* first: the once-only build runs under contention */
    test_features_against_cpuinfo();
    test_choices();
    return test_finish();
}
