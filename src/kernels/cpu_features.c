/*
 * cpu_features.c — CPUID + XGETBV detection of the instruction sets the kernels use, and the
 * Linux permission request for AMX tile data (see cpu_features.h). Runs once per process
 * (pthread_once); afterwards a read-only struct.
 *
 * CPUID bits used (Intel SDM vol. 2, CPUID): leaf 1 ECX: 12 FMA, 27 OSXSAVE, 28 AVX,
 * 29 F16C; leaf 7.0 EBX: 5 AVX2, 16 AVX512F, 17 AVX512DQ, 30 AVX512BW, 31 AVX512VL;
 * leaf 7.0 ECX: 11 AVX512-VNNI; leaf 7.0 EDX: 22 AMX-BF16, 23 AVX512-FP16,
 * 24 AMX-TILE, 25 AMX-INT8; leaf 7.1 EAX: 5 AVX512-BF16,
 * 21 AMX-FP16. XCR0 bits: 1 SSE, 2 AVX, 5 opmask, 6 ZMM0-15 upper, 7 ZMM16-31, 17 XTILECFG,
 * 18 XTILEDATA. Leaf 0 EBX, EDX, ECX: the vendor string ("AuthenticAMD").
 */
#include "kernels/cpu_features.h"

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ATTN_X86 1
#endif
#if defined(ATTN_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ATTN_ARCH_REQ_XCOMP_PERM 0x1023
#define ATTN_XFEATURE_XTILEDATA 18
#endif

static attn_cpu_features detected;
static pthread_once_t detected_once = PTHREAD_ONCE_INIT;

#if defined(ATTN_X86)
static int bit(uint32_t word, int index) { return (int)((word >> index) & 1u); }

/* XCR0 through XGETBV (ECX = 0); only called when CPUID says OSXSAVE. Written as the
 * instruction's bytes so the file needs no -mxsave. */
static uint64_t read_xcr0(void) {
    uint32_t low, high;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(low), "=d"(high) : "c"(0));
    return ((uint64_t)high << 32) | low;
}

/* Linux keeps AMX tile data off until a process asks (kernel 5.16+); 1 when granted. */
static int request_amx_permission(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, ATTN_ARCH_REQ_XCOMP_PERM, ATTN_XFEATURE_XTILEDATA) == 0;
#else
    return 1; /* other systems enable the state through XCR0 alone */
#endif
}

static void detect(void) {
    attn_cpu_features f = {0};
    uint32_t a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) { detected = f; return; }
    const int fma = bit(c, 12), osxsave = bit(c, 27), avx = bit(c, 28), f16c = bit(c, 29);
    uint32_t max_leaf = __get_cpuid_max(0, 0);
    uint32_t vendor[3];
    __cpuid(0, a, vendor[0], vendor[2], vendor[1]); /* EBX, EDX, ECX: "Auth" "enti" "cAMD" */
    f.vendor_amd = vendor[0] == 0x68747541u && vendor[1] == 0x69746e65u && vendor[2] == 0x444d4163u;
    uint32_t b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (max_leaf >= 7) {
        uint32_t a7;
        __cpuid_count(7, 0, a7, b7, c7, d7);
        if (a7 >= 1) {
            uint32_t b71, c71, d71;
            __cpuid_count(7, 1, a71, b71, c71, d71);
        }
    }
    f.xcr0 = osxsave ? read_xcr0() : 0;
    const int os_avx = avx && (f.xcr0 & 0x6) == 0x6;
    const int os_avx512 = os_avx && (f.xcr0 & 0xe0) == 0xe0;
    const int os_amx = (f.xcr0 & 0x60000) == 0x60000;

    f.avx2 = os_avx && bit(b7, 5);
    f.fma = os_avx && fma;
    f.f16c = os_avx && f16c;
    f.avx512f = os_avx512 && bit(b7, 16);
    f.avx512dq = os_avx512 && bit(b7, 17);
    f.avx512bw = os_avx512 && bit(b7, 30);
    f.avx512vl = os_avx512 && bit(b7, 31);
    f.avx512_bf16 = f.avx512f && bit(a71, 5);
    f.avx512_fp16 = f.avx512f && bit(d7, 23);
    f.avx512_vnni = f.avx512f && bit(c7, 11);
    f.avx512vbmi = f.avx512f && bit(c7, 1);
    f.gfni = bit(c7, 8); /* (its SSE form needs no OS state; the kernels also need AVX-512) */
#if defined(ATTN_EMULATED_AVX512)
    /* The emulated build (kernels/simd/emulate_avx512.h) runs the AVX-512 tables in portable
     * code over AVX2: it reports every extension they take. */
    if (f.avx2 && f.fma && f.f16c)
        f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = f.avx512_bf16 = f.avx512_vnni =
            f.avx512vbmi = f.gfni = 1;
#endif

    const int amx_tile = bit(d7, 24);
    if (amx_tile && os_amx) {
        f.amx_permission_requested = 1;
        f.amx_permission_granted = request_amx_permission();
    }
    const int amx = amx_tile && os_amx && f.amx_permission_granted;
    f.amx_tile = amx;
    f.amx_bf16 = amx && bit(d7, 22);
    f.amx_fp16 = amx && bit(a71, 21);
    f.amx_int8 = amx && bit(d7, 25);
    detected = f;
}
#else
static void detect(void) {}
#endif

const attn_cpu_features *attn_cpu_features_get(void) {
    pthread_once(&detected_once, detect);
    return &detected;
}

static const char *const feature_names[ATTN_CPU_FEATURE_COUNT] = {
    "avx2",        "fma",         "f16c",     "avx512f",  "avx512bw", "avx512dq",
    "avx512vl",    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16",
    "amx_int8",    "avx512vbmi",  "gfni",
};

const char *attn_cpu_feature_name(int index) {
    return index >= 0 && index < ATTN_CPU_FEATURE_COUNT ? feature_names[index] : NULL;
}

int attn_cpu_feature_flag(const attn_cpu_features *f, int index) {
    const int flags[ATTN_CPU_FEATURE_COUNT] = {
        f->avx2,     f->fma,         f->f16c,        f->avx512f,  f->avx512bw, f->avx512dq,
        f->avx512vl, f->avx512_bf16, f->avx512_fp16, f->amx_tile, f->amx_bf16, f->amx_fp16,
        f->amx_int8, f->avx512vbmi, f->gfni,
    };
    return index >= 0 && index < ATTN_CPU_FEATURE_COUNT ? flags[index] : 0;
}
