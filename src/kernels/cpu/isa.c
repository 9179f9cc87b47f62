/* Kernel selection: CPUID (through the compiler's __builtin_cpu_supports) at first use, the
 * MEMWALL_KERNEL environment variable, or mw_kernel_set. See isa.h. It serves gemm.c (which asks
 * mw_kernel_current) and never calls it: where auto must time avx512bf16 against avx512, or amx
 * against them, it runs their micro-kernels (gemm_kernels.h) itself. */
#include "isa.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../../core/status.h"
#include "memwall.h" /* mw_precision */

#include "gemm_kernels.h" /* MW_HAVE_NEON_KERNEL; the micro-kernels bf16_native_pays and amx_pays time */

static const char *const names[MW_KERNEL_COUNT] = {"portable", "avx2", "avx512", "avx512bf16", "neon", "amx"};

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

#ifdef MW_X86
/* AMX: the CPU's flags, then the tile data asked of the operating system once per process
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), Linux 5.16 and later); MEMWALL_AMX_REFUSE=1
 * acts as a refusal (the tests' switch) */
static _Atomic int amx_state = -1; /* 0 no AMX-BF16, 1 granted, 2 refused */
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static void amx_ask(void) {
    __builtin_cpu_init();
    int st = 0;
    unsigned a = 0, b = 0, c = 0, d = 0; /* CPUID 7.0 EDX: AMX-BF16 bit 22, AMX-TILE bit 24 (clang 14's
                                            __builtin_cpu_supports knows neither) */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) &&
        __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
        const char *deny = getenv("MEMWALL_AMX_REFUSE");
        st = (deny && strcmp(deny, "1") == 0) || syscall(SYS_arch_prctl, 0x1023, 18) != 0 ? 2 : 1;
    }
    atomic_store(&amx_state, st);
}
static int amx_status(void) {
    pthread_once(&amx_once, amx_ask);
    return atomic_load(&amx_state);
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
    case MW_KERNEL_AMX: return amx_status() == 1;
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
        if (k == MW_KERNEL_AMX || !mw_kernel_id_supported((mw_kernel_id)k)) continue;
        if (k == MW_KERNEL_AVX512BF16 && !bf16_native_pays()) continue;
        return (mw_kernel_id)k;
    }
    return MW_KERNEL_PORTABLE;
}

/* the kernel in use; -1 until resolved. Atomic: every product reads it, from any thread. */
static _Atomic int current = -1;
/* 1 when current came from auto (bfloat16 products may then run amx), 0 when named */
static _Atomic int from_auto = 0;

#ifdef MW_X86
/* the note where a CPU with AMX-BF16 may not use its tiles */
static void amx_refused_note(mw_kernel_id instead) {
    fprintf(stderr,
            "memwall: note: the operating system refused AMX tile data (arch_prctl "
            "ARCH_REQ_XCOMP_PERM): bfloat16 products run %s instead\n",
            mw_kernel_id_name(instead));
}
#endif

static mw_status resolve(const char *name, mw_kernel_id *out, int *is_auto) {
    *is_auto = 0;
    if (!name || !*name || strcmp(name, "auto") == 0) {
        *out = best();
        *is_auto = 1;
        return MW_OK;
    }
    for (int k = 0; k < MW_KERNEL_COUNT; k++)
        if (strcmp(name, names[k]) == 0) {
#ifdef MW_X86
            if (k == MW_KERNEL_AMX && amx_status() == 2) { /* the CPU has it, the OS said no */
                *out = best();
                amx_refused_note(*out);
                return MW_OK;
            }
#endif
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
                   "portable, avx2, avx512, avx512bf16 or amx"
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
    int is_auto = 0;
    mw_status s = resolve(name, &k, &is_auto);
    if (s != MW_OK && from_env) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mw_last_error());
        return mw_fail(s, "MEMWALL_KERNEL=%s: %s", name, msg);
    }
    if (s != MW_OK) return s;
    atomic_store(&from_auto, is_auto);
    atomic_store(&current, (int)k);
    return MW_OK;
}

mw_kernel_id mw_kernel_current(void) {
    int k = atomic_load(&current);
    if (k >= 0) return (mw_kernel_id)k;
    mw_kernel_id r = MW_KERNEL_PORTABLE;
    const char *env = getenv("MEMWALL_KERNEL");
    int is_auto = 0;
    if (resolve(env, &r, &is_auto) != MW_OK) {
        /* nobody called mw_kernel_set to hear the error: say it, and run the best kernel */
        fprintf(stderr, "memwall: MEMWALL_KERNEL=%s ignored: %s\n", env, mw_last_error());
        r = best();
        is_auto = 1;
    }
    /* the first to resolve wins; an mw_kernel_set meanwhile wins over this default */
    int expected = -1;
    if (atomic_compare_exchange_strong(&current, &expected, (int)r)) atomic_store(&from_auto, is_auto);
    return (mw_kernel_id)atomic_load(&current);
}

/* Times the AMX 32 x 32 block against the FMA family's best tile for bfloat16 products (avx512bf16
 * where its vdpbf16ps pays, else avx512's fp32 fmas), both 256 deep and in cache, per product,
 * best of five runs: 1 when AMX is faster by more than 15%. It decides speed, and with it which
 * numerics bfloat16 products under auto have (the AMX family's), so the margin keeps a near tie
 * on the FMA family. */
static int amx_pays_timed(void) {
#ifdef MW_X86
    if (!mw_kernel_id_supported(MW_KERNEL_AMX)) return 0;
    enum { TK = 256, REPS = 200 };
    static uint16_t a16[32 * TK], b16[2 * TK * 16];
    static float a[TK * MW_AVX512_MR], b[TK * MW_AVX512_NR], c[32 * 32];
    for (int i = 0; i < 32 * TK; i++) a16[i] = b16[i] = (uint16_t)(0x3f80 + i % 64);
    for (int i = 0; i < TK * MW_AVX512_MR; i++) a[i] = 1.0f / (float)(i % 7 + 1);
    for (int i = 0; i < TK * MW_AVX512_NR; i++) b[i] = 1.0f / (float)(i % 5 + 1);
    memset(c, 0, sizeof c);
    const int native = bf16_native_pays();
    double best_s[2] = {1e30, 1e30}; /* seconds per multiply-add: FMA family, AMX */
    for (int rep = 0; rep < 5; rep++)
        for (int which = 0; which < 2; which++) {
            struct timespec t0, t1;
            if (which) mw_amx_tiles_begin();
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int r = 0; r < REPS; r++) {
                if (which)
                    mw_ukernel_amx(a16, TK, b16, b16 + TK * 16, TK / 32, c, 32, 1);
                else if (native)
                    mw_ukernel_avx512bf16(MW_AVX512_MR, MW_AVX512_NR, TK / 2, a, b, c, MW_AVX512_NR, 1, 0, 1.0f);
                else
                    mw_ukernel_avx512(MW_AVX512_MR, MW_AVX512_NR, TK, a, b, c, MW_AVX512_NR, 1, 0, 1.0f);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (which) mw_amx_tiles_end();
            const double t = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            const double per = t / ((double)REPS * TK * (which ? 32 * 32 : MW_AVX512_MR * MW_AVX512_NR));
            if (per < best_s[which]) best_s[which] = per;
        }
    return best_s[1] < 0.85 * best_s[0];
#else
    return 0;
#endif
}

static int amx_pays(void) {
    static _Atomic int known = -1; /* timed once per process */
    int v = atomic_load(&known);
    if (v < 0) {
        v = amx_pays_timed();
        atomic_store(&known, v);
    }
    return v;
}

mw_kernel_id mw_kernel_current_bf16(void) {
    static _Atomic int resolved = -1; /* auto's answer for bfloat16 products, once */
    const mw_kernel_id k = mw_kernel_current();
    if (!atomic_load(&from_auto)) return k;
    int r = atomic_load(&resolved);
    if (r < 0) {
        r = amx_pays() ? MW_KERNEL_AMX : -2;
#ifdef MW_X86
        if (amx_status() == 2) {
            static atomic_flag said = ATOMIC_FLAG_INIT;
            if (!atomic_flag_test_and_set(&said)) amx_refused_note(k);
        }
#endif
        atomic_store(&resolved, r);
    }
    return r == MW_KERNEL_AMX ? MW_KERNEL_AMX : k;
}

const char *mw_kernel_get_for(int precision) {
    return names[precision == MW_PRECISION_BF16 ? mw_kernel_current_bf16() : mw_kernel_current()];
}

const char *mw_numerics_family(int precision) {
    return precision == MW_PRECISION_BF16 && mw_kernel_current_bf16() == MW_KERNEL_AMX ? "amx" : "fma";
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
