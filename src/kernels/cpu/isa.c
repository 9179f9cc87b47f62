/* Kernel selection: CPUID (through the compiler's __builtin_cpu_supports) at first use, the
 * MEMWALL_KERNEL environment variable, or mw_kernel_set. See isa.h. It serves gemm.c (which asks
 * mw_kernel_current) and never calls it: where auto must time avx512bf16 against avx512, it runs
 * their micro-kernels (gemm_kernels.h) itself. */
#include "isa.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../core/status.h"

#include "gemm_kernels.h" /* MW_HAVE_NEON_KERNEL; the micro-kernels bf16_native_pays times */

static const char *const names[MW_KERNEL_COUNT] = {"portable", "avx2", "avx512", "avx512bf16", "neon"};

const char *mw_kernel_id_name(mw_kernel_id k) {
    return (unsigned)k < MW_KERNEL_COUNT ? names[k] : "?";
}

#if defined(__x86_64__) || defined(__i386__)
#define MW_X86 1
/* The build's baseline: a CPU without these features would die of SIGILL somewhere in the
 * library, so the check runs before main, compiled for plain x86-64 itself, and says what to do. */
__attribute__((constructor, target("arch=x86-64"))) static void mw_check_baseline(void) {
    __builtin_cpu_init();
    const char *missing = NULL;
#ifdef __AVX512F__
    if (!__builtin_cpu_supports("avx512f")) missing = "AVX-512F";
#endif
#ifdef __AVX2__
    if (!__builtin_cpu_supports("avx2")) missing = "AVX2";
#endif
#ifdef __FMA__
    if (!__builtin_cpu_supports("fma")) missing = "FMA";
#endif
#ifdef __AVX__
    if (!__builtin_cpu_supports("avx")) missing = "AVX";
#endif
#ifdef __SSE4_2__
    if (!__builtin_cpu_supports("sse4.2")) missing = "SSE4.2";
#endif
    if (missing) {
        /* the highest level this CPU has: the default v3, else v2, else the x86-64 base */
        const char *fix = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                              ? "`make clean && make` (the default baseline, x86-64-v3)"
                          : __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt")
                              ? "`make clean && make BASELINE=x86-64-v2`"
                              : "`make clean && make BASELINE=x86-64`";
        fprintf(stderr,
                "memwall: this CPU lacks %s, which this build of memwall was compiled to require; "
                "rebuild it for this CPU with %s\n",
                missing, fix);
        exit(1); /* the one exit in the library: the alternative is SIGILL in the next call */
    }
}
#endif

int mw_kernel_id_supported(mw_kernel_id k) {
    switch (k) {
    case MW_KERNEL_PORTABLE: return 1;
#ifdef MW_X86
    case MW_KERNEL_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case MW_KERNEL_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") != 0;
    case MW_KERNEL_AVX512BF16:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#endif
#if defined(__aarch64__) && defined(MW_HAVE_NEON_KERNEL)
    case MW_KERNEL_NEON: return 1; /* Advanced SIMD is part of the aarch64 base */
#endif
    default: return 0;
    }
}

/* Times the AVX512_BF16 micro-kernel on bfloat16 panels against the AVX-512 one on fp32 panels
 * of the same products (12 x 32 x 256, in cache), best of five runs of 400 tiles each: 1 when
 * vdpbf16ps is faster than the emulation through fp32 fmas by more than 15%. Same bits either way, so this decides
 * speed alone. (On Sapphire Rapids, measured: vdpbf16ps issues at a quarter of vfmadd231ps's rate,
 * so the emulation is about twice as fast.) */
static int native_pays_timed(void) {
#if defined(__x86_64__)
    if (!mw_kernel_id_supported(MW_KERNEL_AVX512BF16)) return 0;
    enum { TK = 256, REPS = 400 };
    float a[TK * MW_AVX512_MR], b[TK * MW_AVX512_NR], c[MW_AVX512_MR * MW_AVX512_NR]; /* 51 KB */
    for (int i = 0; i < TK * MW_AVX512_MR; i++) a[i] = 1.0f / (float)(i % 7 + 1);
    for (int i = 0; i < TK * MW_AVX512_NR; i++) b[i] = 1.0f / (float)(i % 5 + 1);
    memset(c, 0, sizeof c);
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 5; rep++)
        for (int which = 0; which < 2; which++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int r = 0; r < REPS; r++) {
                if (which)
                    mw_ukernel_avx512bf16(MW_AVX512_MR, MW_AVX512_NR, TK / 2, a, b, c, MW_AVX512_NR, 1, 0, 1.0f);
                else
                    mw_ukernel_avx512(MW_AVX512_MR, MW_AVX512_NR, TK, a, b, c, MW_AVX512_NR, 1, 0, 1.0f);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double t = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            if (t < best[which]) best[which] = t;
        }
    return best[1] < 0.85 * best[0]; /* a margin: no flip-flopping between runs near a tie */
#else
    return 0;
#endif
}

/* native_pays_timed, once per process: 1 when auto takes avx512bf16 over avx512 */
static int bf16_native_pays(void) {
    static _Atomic int known = -1; /* timed once per process */
    int v = atomic_load(&known);
    if (v < 0) {
        v = native_pays_timed();
        atomic_store(&known, v);
    }
    return v;
}

/* The fastest kernel: the newest instruction set this CPU has, except that avx512bf16 (whose fp32
 * products are avx512's) is chosen only where its vdpbf16ps beats avx512's emulation of it (timed
 * once, bf16_native_pays above): every kernel gives the same bits, so speed alone decides. */
static mw_kernel_id best(void) {
    for (int k = MW_KERNEL_COUNT - 1; k > 0; k--) {
        if (!mw_kernel_id_supported((mw_kernel_id)k)) continue;
        if (k == MW_KERNEL_AVX512BF16 && !bf16_native_pays()) continue;
        return (mw_kernel_id)k;
    }
    return MW_KERNEL_PORTABLE;
}

/* the kernel in use; -1 until resolved. Atomic: every product reads it, from any thread. */
static _Atomic int current = -1;

static mw_status resolve(const char *name, mw_kernel_id *out) {
    if (!name || !*name || strcmp(name, "auto") == 0) {
        *out = best();
        return MW_OK;
    }
    for (int k = 0; k < MW_KERNEL_COUNT; k++)
        if (strcmp(name, names[k]) == 0) {
            if (!mw_kernel_id_supported((mw_kernel_id)k))
                return mw_fail(MW_ERR_ARG,
                               "kernel %s cannot run here: %s; this CPU and build run %s", name,
#ifdef MW_X86
                               k == MW_KERNEL_NEON ? "it is for aarch64 CPUs"
                                                   : "this CPU lacks its instructions",
#else
                               k == MW_KERNEL_NEON ? "this build has no NEON kernel"
                                                   : "it is for x86-64 CPUs",
#endif
                               mw_kernels_available());
            *out = (mw_kernel_id)k;
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG, "unknown kernel '%s': expected auto, %s", name,
#ifdef MW_X86
                   "portable, avx2, avx512 or avx512bf16"
#elif defined(__aarch64__)
                   "portable or neon"
#else
                   "portable"
#endif
    );
}

mw_status mw_kernel_set(const char *name) {
    const int from_env = name == NULL;
    if (from_env) name = getenv("MEMWALL_KERNEL");
    mw_kernel_id k = MW_KERNEL_PORTABLE; /* (gcc 12 for aarch64 warns it may be unset) */
    mw_status s = resolve(name, &k);
    if (s != MW_OK && from_env) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mw_last_error());
        return mw_fail(s, "MEMWALL_KERNEL=%s: %s", name, msg);
    }
    if (s != MW_OK) return s;
    atomic_store(&current, (int)k);
    return MW_OK;
}

mw_kernel_id mw_kernel_current(void) {
    int k = atomic_load(&current);
    if (k >= 0) return (mw_kernel_id)k;
    mw_kernel_id r = MW_KERNEL_PORTABLE;
    const char *env = getenv("MEMWALL_KERNEL");
    if (resolve(env, &r) != MW_OK) {
        /* nobody called mw_kernel_set to hear the error: say it, and run the best kernel */
        fprintf(stderr, "memwall: MEMWALL_KERNEL=%s ignored: %s\n", env, mw_last_error());
        r = best();
    }
    /* the first to resolve wins; an mw_kernel_set meanwhile wins over this default */
    int expected = -1;
    atomic_compare_exchange_strong(&current, &expected, (int)r);
    return (mw_kernel_id)atomic_load(&current);
}

const char *mw_kernel_get(void) { return names[mw_kernel_current()]; }

int mw_kernel_supported(const char *name) {
    for (int k = 0; k < MW_KERNEL_COUNT; k++)
        if (name && strcmp(name, names[k]) == 0) return mw_kernel_id_supported((mw_kernel_id)k);
    return 0;
}

static char available[64];
static void fill_available(void) {
    size_t n = 0;
    for (int k = 0; k < MW_KERNEL_COUNT; k++)
        if (mw_kernel_id_supported((mw_kernel_id)k))
            n += (size_t)snprintf(available + n, sizeof available - n, "%s%s", n ? ", " : "",
                                  names[k]);
}

const char *mw_kernels_available(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_available);
    return available;
}
