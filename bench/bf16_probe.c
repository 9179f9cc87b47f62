/* What this CPU's bfloat16 instructions compute and how fast (docs/precision.md's figures):
 *  1. vdpbf16ps against fp32 FMA chains on random operands, lane by lane: the odd product first,
 *     the even first, the rounded pair sum added to c; normal-range operands, then denormal-range
 *     ones with and without FTZ/DAZ.
 *  2. Throughput (24 independent chains) and latency (one chain) of vfmadd231ps and vdpbf16ps.
 *  3. AMX tdpbf16ps (where the CPU and kernel allow it) against the same models and the exact
 *     pair sum.
 * Prints what it skips on a CPU without AVX512_BF16 or AMX. Usage: build/bf16_probe */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint64_t s = 88172645463325252ull;
static uint32_t rnd(void) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return (uint32_t)s;
}
static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* a random bfloat16 with its exponent in [emin, 156) */
static uint16_t rbf(int emin) { return (uint16_t)((rnd() & 0x807f) | ((emin + rnd() % (156 - emin)) << 7)); }

/* 1: vdpbf16ps lane by lane; returns mismatches of the three models over n lanes */
__attribute__((target("avx512f,avx512bf16"))) static void dp_models(int emin, int flush, long iters, long bad[3], long *n) {
    const unsigned old = _mm_getcsr();
    if (flush) _mm_setcsr(old | 0x8040u);
    for (long it = 0; it < iters; it++) {
        uint16_t a[32], b[32];
        float c[16], o[16];
        for (int i = 0; i < 32; i++) a[i] = rbf(emin), b[i] = rbf(emin);
        for (int i = 0; i < 16; i++) /* c near -(a product): cancellations, where order shows */
            c[i] = -bf(a[2 * i + (rnd() & 1)]) * bf(b[2 * i]) * (1.0f + (float)((int)(rnd() % 200) - 100) * 1e-3f);
        _mm512_storeu_ps(o, _mm512_dpbf16_ps(_mm512_loadu_ps(c), (__m512bh)_mm512_loadu_si512(a),
                                             (__m512bh)_mm512_loadu_si512(b)));
        for (int i = 0; i < 16; i++, (*n)++) {
            const float x0 = bf(a[2 * i]), y0 = bf(b[2 * i]), x1 = bf(a[2 * i + 1]), y1 = bf(b[2 * i + 1]);
            volatile float m[3];
            m[0] = fmaf(x0, y0, fmaf(x1, y1, c[i]));       /* odd first */
            m[1] = fmaf(x1, y1, fmaf(x0, y0, c[i]));       /* even first */
            m[2] = c[i] + (x1 * y1 + x0 * y0);             /* the rounded pair sum */
            for (int k = 0; k < 3; k++) bad[k] += memcmp((const void *)&m[k], &o[i], 4) != 0;
        }
    }
    _mm_setcsr(old);
}

/* 2: G instructions per second with 24 independent chains, and ns per instruction on one chain */
__attribute__((target("avx512f,avx512bf16"))) static void rates(double out[4]) {
    const long N = 20000000;
    __m512 c[24];
    for (int i = 0; i < 24; i++) c[i] = _mm512_set1_ps((float)i * 1e-3f);
    __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
    double t0 = now();
    for (long k = 0; k < N; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) c[i] = _mm512_fmadd_ps(a, b, c[i]);
        __asm__ volatile("" : "+v"(a));
    }
    double t1 = now();
    __m512bh ab = (__m512bh)a, bb = (__m512bh)b;
    for (long k = 0; k < N; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) c[i] = _mm512_dpbf16_ps(c[i], ab, bb);
        __asm__ volatile("" : "+v"(ab));
    }
    double t2 = now();
    __m512 d = c[0], e = c[1];
    for (long k = 0; k < N; k++) d = _mm512_fmadd_ps(d, a, b);
    double t3 = now();
    for (long k = 0; k < N; k++) e = _mm512_dpbf16_ps(e, ab, ab);
    double t4 = now();
    float sink = _mm512_reduce_add_ps(d) + _mm512_reduce_add_ps(e);
    for (int i = 0; i < 24; i++) sink += _mm512_reduce_add_ps(c[i]);
    __asm__ volatile("" : : "x"(sink));
    out[0] = 24.0 * N / (t1 - t0) / 1e9, out[1] = 24.0 * N / (t2 - t1) / 1e9;
    out[2] = (t3 - t2) / N * 1e9, out[3] = (t4 - t3) / N * 1e9;
}

/* 3: AMX tdpbf16ps on 16 x 16 tiles of depth 32 against the models; 0 when AMX is unavailable */
typedef struct {
    uint8_t palette, start, res[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;
__attribute__((target("amx-tile,amx-bf16,avx512f"))) static int amx_models(long iters, long bad[4], long *n) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) return 0;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 3; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    for (long it = 0; it < iters; it++) {
        static uint16_t A[16][32], B[16][32];
        static float C[16][16], C0[16][16];
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 32; j++) A[i][j] = rbf(100), B[i][j] = rbf(100);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++)
                C0[i][j] = ((rnd() & 1) ? -1.0f : 1.0f) * bf(A[i][0]) * bf(B[0][2 * j]) * (1.0f + (float)((int)(rnd() % 100) - 50) * 1e-3f);
        memcpy(C, C0, sizeof C);
        _tile_loadd(0, C, 64);
        _tile_loadd(1, A, 64);
        _tile_loadd(2, B, 64);
        _tile_dpbf16ps(0, 1, 2);
        _tile_stored(0, C, 64);
        for (int m = 0; m < 16; m++)
            for (int j = 0; j < 16; j++, (*n)++) {
                volatile float e[4];
                e[0] = e[1] = e[2] = C0[m][j];
                double ex = 0;
                for (int k = 0; k < 16; k++) {
                    const float a0 = bf(A[m][2 * k]), a1 = bf(A[m][2 * k + 1]), b0 = bf(B[k][2 * j]), b1 = bf(B[k][2 * j + 1]);
                    e[0] = fmaf(a1, b1, fmaf(a0, b0, e[0])); /* even first */
                    e[1] = fmaf(a0, b0, fmaf(a1, b1, e[1])); /* odd first */
                    e[2] = e[2] + (float)((double)a0 * b0 + (double)a1 * b1); /* the pair sum, rounded */
                    ex += (double)a0 * b0 + (double)a1 * b1;
                }
                e[3] = (float)(C0[m][j] + ex); /* the exact sum, rounded once */
                for (int q = 0; q < 4; q++) bad[q] += memcmp((const void *)&e[q], &C[m][j], 4) != 0;
            }
    }
    _tile_release();
    return 1;
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) {
        printf("bf16_probe: this CPU has no AVX512_BF16: nothing to probe\n");
        return 0;
    }
    printf("vdpbf16ps against fp32 FMA chains (mismatching lanes):\n");
    static const char *const names[3] = {"odd product first", "even product first", "rounded pair sum added"};
    const struct { int emin, flush; const char *what; } runs[3] = {
        {100, 0, "normal-range operands"}, {0, 1, "denormal-range operands, FTZ+DAZ"}, {0, 0, "denormal-range operands, no flush"}};
    for (int r = 0; r < 3; r++) {
        long bad[3] = {0, 0, 0}, n = 0;
        dp_models(runs[r].emin, runs[r].flush, 2000000, bad, &n);
        printf("  %-36s %ld lanes:", runs[r].what, n);
        for (int k = 0; k < 3; k++) printf("  %s %ld (%.1f%%)", names[k], bad[k], 100.0 * (double)bad[k] / (double)n);
        printf("\n");
    }
    double rt[4];
    rates(rt);
    printf("24 independent chains: vfmadd231ps %.2f G/s, vdpbf16ps %.2f G/s (%.2fx); one chain: %.2f ns and %.2f ns "
           "per instruction\n", rt[0], rt[1], rt[1] / rt[0], rt[2], rt[3]);
    long ab[4] = {0, 0, 0, 0}, an = 0;
    if (!__builtin_cpu_supports("amx-bf16") || !amx_models(20000, ab, &an)) {
        printf("AMX: not available here (CPU or kernel): skipped\n");
        return 0;
    }
    printf("AMX tdpbf16ps against fp32 models, %ld outputs: even first %ld (%.1f%%), odd first %ld (%.1f%%), rounded pair "
           "sums %ld (%.1f%%), exact sum rounded once %ld (%.1f%%)\n", an, ab[0], 100.0 * (double)ab[0] / (double)an, ab[1],
           100.0 * (double)ab[1] / (double)an, ab[2], 100.0 * (double)ab[2] / (double)an, ab[3], 100.0 * (double)ab[3] / (double)an);
    return 0;
}
#else
int main(void) {
    printf("bf16_probe: x86-64 only\n");
    return 0;
}
#endif
