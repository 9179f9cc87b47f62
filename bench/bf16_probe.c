/* What this CPU's bfloat16 instructions compute and how fast (docs/precision.md's figures):
 *  1. vdpbf16ps against fp32 FMA chains on random operands, lane by lane: the odd product first,
 *     the even first, the rounded pair sum added to c; normal-range operands, then denormal-range
 *     ones with and without FTZ/DAZ.
 *  2. Throughput (24 independent chains) and latency (one chain) of vfmadd231ps and vdpbf16ps.
 *  3. AMX tdpbf16ps (where the CPU and kernel allow it) against the same models and the exact
 *     pair sum.
 *  4. AMX tdpbf16ps, built up from outputs with 1, 2, 4 and 16 non-zero pairs, against models of
 *     its roundings (issue 36, item 4); PROBE_SHOW=1 prints outputs of two pairs that the closest
 *     model (c + the products' exact sum, rounded) misses.
 * Prints what it skips on a CPU without AVX512_BF16 or AMX. Usage: build/bf16_probe [--amx: 4 alone] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
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
    __asm__ volatile("" : : "r"(&cfg) : "memory"); /* gcc's _tile_loadconfig claims to read 8 bytes */
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


/* 4: a model of tdpbf16ps, built up (issue 36, item 4). Operands' exponents near 1 (within 2^+-6),
 * so that every sum of the products and c is exact in double and each model's roundings are the
 * only ones. Per output: c, and the products x[2k], x[2k+1] of the pairs k that are non-zero. */
static float r_ne(double x) { return (float)x; }
static float r_z(double x) {
    float f = (float)x;
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
    return f;
}
/* The models: the 32 products (zeros where a pair is zero) in groups of G consecutive products
 * (G = 1, 2, 4, 8, 16, 32), each group's exact sum rounded once (RNE; or truncated, RZ), the
 * groups then combined: in order from c, in order and then added to c, in a binary tree (adjacent
 * groups first) then added to c, or exactly (rounded once) then added to c. Plus the two fp32 fma
 * chains. */
enum { NG = 6, NCOMB = 4, NROUND = 2, NW = 10, NBASE = NG * NCOMB * NROUND + 2, NFIX = NBASE + 4 * NW,
       NP = 10, NMOD = NFIX + 8 * NP };
/* x rounded to a p-bit significand, to nearest even (rz 0) or toward zero */
static double r_p(double x, int p, int rz) {
    if (x == 0) return 0;
    int e;
    frexp(x, &e);
    const double m = ldexp(x, p - e);
    return ldexp(rz ? trunc(m) : nearbyint(m), e - p);
}
static const char *const comb_names[NCOMB] = {"in order from c", "in order, then + c", "in a binary tree, then + c",
                                              "exactly (rounded once), then + c"};
static void model_name(int q, char *buf, size_t n) {
    if (q >= NFIX) {
        const int v = (q - NFIX) / NP, pb = 24 + (q - NFIX) % NP;
        snprintf(buf, n, "pair sums %s to %d bits, combined %s at %d bits, then %s", v & 1 ? "truncated" : "rounded", pb,
                 v & 2 ? "in order" : "in a tree", pb, v & 4 ? "c + total rounded once" : "c + RNE(total)");
        return;
    }
    if (q >= NBASE) {
        const int v = (q - NBASE) / NW;
        snprintf(buf, n, "terms aligned to the largest%s, %s to %d bits, summed, RNE%s", v & 1 ? " (c too)" : "",
                 v & 2 ? "rounded (RNE)" : "truncated", 22 + (q - NBASE) % NW, v & 1 ? "" : ", + c");
        return;
    }
    if (q >= NG * NCOMB * NROUND) {
        snprintf(buf, n, "fp32 fma chain, %s product first", q == NMOD - 2 ? "even" : "odd");
        return;
    }
    const int r = q % NROUND, cb = q / NROUND % NCOMB, g = q / NROUND / NCOMB;
    snprintf(buf, n, "groups of %d products %s, combined %s", 1 << g, r ? "truncated" : "rounded", comb_names[cb]);
}
static void models(float c, const double x[32], float out[NMOD]) {
    for (int g = 0; g < NG; g++)
        for (int r = 0; r < NROUND; r++) {
            const int G = 1 << g, ng = 32 / G;
            float grp[32];
            for (int i = 0; i < ng; i++) {
                double t = 0;
                for (int k = 0; k < G; k++) t += x[i * G + k];
                grp[i] = r ? r_z(t) : r_ne(t);
            }
            float o[NCOMB];
            float acc = c, seq = 0.0f;
            double ex = 0;
            for (int i = 0; i < ng; i++) {
                acc = r_ne((double)acc + grp[i]);
                seq = i ? r_ne((double)seq + grp[i]) : grp[i];
                ex += grp[i];
            }
            o[0] = acc;
            o[1] = r_ne((double)c + seq);
            float tr[32];
            memcpy(tr, grp, sizeof(float) * ng);
            for (int w = ng; w > 1; w /= 2)
                for (int i = 0; i < w / 2; i++) tr[i] = r_ne((double)tr[2 * i] + tr[2 * i + 1]);
            o[2] = r_ne((double)c + tr[0]);
            o[3] = r_ne((double)c + (double)r_ne(ex));
            for (int cb = 0; cb < NCOMB; cb++) out[(g * NCOMB + cb) * NROUND + r] = o[cb];
        }
    float e = c, od = c;
    for (int k = 0; k < 16; k++) {
        e = r_ne((double)r_ne((double)e + x[2 * k]) + x[2 * k + 1]);
        od = r_ne((double)r_ne((double)od + x[2 * k + 1]) + x[2 * k]);
    }
    out[NBASE - 2] = e, out[NBASE - 1] = od;
    /* a fixed-width adder: every term cut (toward zero) or rounded (to nearest even) to W bits below
     * the largest one's leading bit, the terms then summed exactly, rounded once; c among the terms
     * or added after */
    for (int var = 0; var < 4; var++) {
        const int withc = var & 1, rne = var >> 1;
        int emax = -10000;
        for (int k = 0; k < 32 + withc; k++) {
            const double v = k < 32 ? x[k] : c;
            int ex;
            if (v != 0) {
                frexp(v, &ex);
                if (ex > emax) emax = ex;
            }
        }
        for (int w = 0; w < NW; w++) {
            const double q = ldexp(1.0, emax - (22 + w));
            double t = 0;
            for (int k = 0; k < 32 + withc; k++) {
                const double v = k < 32 ? x[k] : c;
                t += (rne ? nearbyint(v / q) : trunc(v / q)) * q;
            }
            out[NBASE + var * NW + w] = withc ? r_ne(t) : r_ne((double)c + (double)r_ne(t));
        }
    }
    /* a wider floating-point adder: pair sums rounded to P bits, combined at P bits */
    for (int v = 0; v < 8; v++)
        for (int pi = 0; pi < NP; pi++) {
            const int pb = 24 + pi, rz = v & 1;
            double ps[16];
            for (int k = 0; k < 16; k++) ps[k] = r_p(x[2 * k] + x[2 * k + 1], pb, rz);
            double tot;
            if (v & 2) {
                tot = ps[0];
                for (int k = 1; k < 16; k++) tot = r_p(tot + ps[k], pb, rz);
            } else {
                for (int w = 16; w > 1; w /= 2)
                    for (int i = 0; i < w / 2; i++) ps[i] = r_p(ps[2 * i] + ps[2 * i + 1], pb, rz);
                tot = ps[0];
            }
            out[NFIX + v * NP + pi] = v & 4 ? r_ne((double)c + tot) : r_ne((double)c + (double)r_ne(tot));
        }
}
/* a bfloat16 of exponent 127 +- 6, random sign and significand */
static uint16_t rnear(void) { return (uint16_t)((rnd() & 0x807f) | ((121 + rnd() % 13) << 7)); }

static long pairtab[16][16][2]; /* two non-zero pairs at p < q: outputs, misses of c + RNE(exact sum) */
/* One experiment: `active` pairs per output row (their positions random, or the first ones when
 * first), the rest zero; c of the products' size with either sign. Counts each model's misses. */
__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void amx_study_run(int active, int iters, long bad[NMOD], long *n,
                                                                                 long *sample_shown) {
    for (int it = 0; it < iters; it++) {
        static uint16_t A[16][32], B[16][32];
        static float C[16][16], C0[16][16];
        int na[16], pos[16][2];
        memset(A, 0, sizeof A);
        for (int j = 0; j < 16; j++)
            for (int k = 0; k < 32; k++) B[j][k] = rnear();
        for (int i = 0; i < 16; i++) {
            int used[16] = {0};
            na[i] = 0;
            while (na[i] < active) {
                const int k = (int)(rnd() % 16);
                if (used[k]) continue;
                used[k] = 1;
                na[i]++;
            }
            int q = 0;
            for (int k = 0; k < 16; k++)
                if (used[k]) {
                    A[i][2 * k] = rnear(), A[i][2 * k + 1] = rnear();
                    if (q < 2) pos[i][q++] = k;
                }
        }
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++)
                C0[i][j] = (float)((rnd() & 1) ? -1.0 : 1.0) * bf(rnear()) * bf(rnear()) * (1.0f + (float)(rnd() % 1000) * 1e-4f);
        memcpy(C, C0, sizeof C);
        _tile_loadd(0, C, 64);
        _tile_loadd(1, A, 64);
        _tile_loadd(2, B, 64);
        _tile_dpbf16ps(0, 1, 2);
        _tile_stored(0, C, 64);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++, (*n)++) {
                double x[32];
                for (int k = 0; k < 16; k++) {
                    x[2 * k] = (double)bf(A[i][2 * k]) * bf(B[k][2 * j]);
                    x[2 * k + 1] = (double)bf(A[i][2 * k + 1]) * bf(B[k][2 * j + 1]);
                }
                float m[NMOD];
                models(C0[i][j], x, m);
                for (int q = 0; q < NMOD; q++) bad[q] += memcmp(&m[q], &C[i][j], 4) != 0;
                if (na[i] == 2) {
                    pairtab[pos[i][0]][pos[i][1]][0]++;
                    pairtab[pos[i][0]][pos[i][1]][1] += memcmp(&m[(0 * NCOMB + 3) * NROUND], &C[i][j], 4) != 0;
                }
                if (getenv("PROBE_SHOW") && na[i] == 2 && *sample_shown < 12 && memcmp(&m[(0 * NCOMB + 3) * NROUND], &C[i][j], 4) != 0) {
                    (*sample_shown)++;
                    printf("    c %a;", (double)C0[i][j]);
                    for (int k = 0; k < 32; k++)
                        if (x[k] != 0) printf(" %d:%a", k, x[k]);
                    double ex = C0[i][j];
                    for (int k = 0; k < 32; k++) ex += x[k];
                    printf(" -> hw %a model %a exact %a\n", (double)C[i][j], (double)m[(0 * NCOMB + 3) * NROUND], ex);
                }
            }
    }
}

__attribute__((target("amx-tile,amx-bf16,avx512f"))) static int amx_study(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) return 0;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 3; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
    const int acts[] = {1, 2, 4, 16};
    for (size_t e = 0; e < sizeof acts / sizeof acts[0]; e++) {
        long bad[NMOD] = {0}, n = 0, shown = 0;
        amx_study_run(acts[e], 2000, bad, &n, &shown);
        printf("  %2d non-zero pair%s of 16, %ld outputs; the closest models' mismatches:\n", acts[e], acts[e] == 1 ? "" : "s", n);
        int order[NMOD];
        for (int q = 0; q < NMOD; q++) order[q] = q;
        for (int q = 0; q < NMOD; q++) /* by mismatches, fewest first */
            for (int r = q + 1; r < NMOD; r++)
                if (bad[order[r]] < bad[order[q]]) { const int t = order[q]; order[q] = order[r]; order[r] = t; }
        for (int q = 0; q < 5; q++) {
            char nm[128];
            model_name(order[q], nm, sizeof nm);
            printf("    %-72s %8ld (%.2f%%)\n", nm, bad[order[q]], 100.0 * (double)bad[order[q]] / (double)n);
        }
        if (acts[e] == 2 && getenv("PROBE_SHOW")) {
            printf("  misses (%%) of c + RNE(exact sum) by the two pairs' positions p (rows) < q (columns):\n");
            for (int p = 0; p < 16; p++) {
                printf("   %2d", p);
                for (int q = 0; q < 16; q++)
                    printf(q > p && pairtab[p][q][0] ? " %3.0f" : "    ", 100.0 * (double)pairtab[p][q][1] / (double)(pairtab[p][q][0] + !pairtab[p][q][0]));
                printf("\n");
            }
        }
    }
    _tile_release();
    return 1;
}

/* CPUID 7.0 EDX bit 22 (clang 14's __builtin_cpu_supports does not know "amx-bf16") */
static int has_amx_bf16(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1);
}

int main(int argc, char **argv) {
    __builtin_cpu_init();
    if (argc > 1 && strcmp(argv[1], "--amx") == 0) { /* the AMX study alone */
        if (!__builtin_cpu_supports("avx512f") || !has_amx_bf16() || !amx_study()) printf("AMX: not available here (CPU or kernel): skipped\n");
        return 0;
    }
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
    if (!has_amx_bf16() || !amx_models(20000, ab, &an)) {
        printf("AMX: not available here (CPU or kernel): skipped\n");
        return 0;
    }
    printf("AMX tdpbf16ps against fp32 models, %ld outputs: even first %ld (%.1f%%), odd first %ld (%.1f%%), rounded pair "
           "sums %ld (%.1f%%), exact sum rounded once %ld (%.1f%%)\n", an, ab[0], 100.0 * (double)ab[0] / (double)an, ab[1],
           100.0 * (double)ab[1] / (double)an, ab[2], 100.0 * (double)ab[2] / (double)an, ab[3], 100.0 * (double)ab[3] / (double)an);
    printf("AMX tdpbf16ps against models, operands near 1 (every sum exact in double, so only the models' roundings):\n");
    amx_study();
    return 0;
}
#else

/* 4: a model of tdpbf16ps, built up (issue 36, item 4). Operands' exponents near 1 (within 2^+-6),
 * so that every sum of the products and c is exact in double and each model's roundings are the
 * only ones. Per output: c, and the products x[2k], x[2k+1] of the pairs k that are non-zero. */
static float r_ne(double x) { return (float)x; }
static float r_z(double x) {
    float f = (float)x;
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
    return f;
}
static float r_o(double x) { /* round to odd */
    float f = r_z(x);
    if ((double)f != x) {
        uint32_t u;
        memcpy(&u, &f, 4);
        u |= 1;
        memcpy(&f, &u, 4);
    }
    return f;
}
enum { NMOD = 12 };
static const char *const model_names[NMOD] = {
    "fma chain, even first", "fma chain, odd first", "c + pair exact, rounded (RNE) per pair",
    "c + pair exact, truncated (RZ) per pair", "c + RNE(pair), per pair", "c + RZ(pair) RNE, per pair",
    "all exact, RNE once", "all exact, RZ once", "c + RNE(products' exact sum)", "c + RZ(products' exact sum)",
    "c + round-to-odd(products' sum), RNE", "all exact, round to odd then RNE"};
static void models(float c, const double *x, int np, float out[NMOD]) {
    float m[NMOD];
    for (int i = 0; i < 6; i++) m[i] = c;
    double sum = 0;
    for (int k = 0; k < np; k++) {
        const double x0 = x[2 * k], x1 = x[2 * k + 1];
        m[0] = r_ne((double)r_ne((double)m[0] + x0) + x1);
        m[1] = r_ne((double)r_ne((double)m[1] + x1) + x0);
        m[2] = r_ne((double)m[2] + x0 + x1);
        m[3] = r_z((double)m[3] + x0 + x1);
        m[4] = r_ne((double)m[4] + (double)r_ne(x0 + x1));
        m[5] = r_ne((double)m[5] + (double)r_z(x0 + x1));
        sum += x0 + x1;
    }
    m[6] = r_ne((double)c + sum);
    m[7] = r_z((double)c + sum);
    m[8] = r_ne((double)c + (double)r_ne(sum));
    m[9] = r_ne((double)c + (double)r_z(sum));
    m[10] = r_ne((double)c + (double)r_o(sum));
    m[11] = r_ne((double)r_o((double)c + sum));
    memcpy(out, m, sizeof m);
}
/* a bfloat16 of exponent 127 +- 6, random sign and significand */
static uint16_t rnear(void) { return (uint16_t)((rnd() & 0x807f) | ((121 + rnd() % 13) << 7)); }

static long pairtab[16][16][2]; /* two non-zero pairs at p < q: outputs, misses of c + RNE(exact sum) */
/* One experiment: `active` pairs per output row (their positions random, or the first ones when
 * first), the rest zero; c of the products' size with either sign. Counts each model's misses. */
__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void amx_study_run(int active, int iters, long bad[NMOD], long *n,
                                                                                 long *sample_shown) {
    for (int it = 0; it < iters; it++) {
        static uint16_t A[16][32], B[16][32];
        static float C[16][16], C0[16][16];
        int na[16], pos[16][2];
        memset(A, 0, sizeof A);
        for (int j = 0; j < 16; j++)
            for (int k = 0; k < 32; k++) B[j][k] = rnear();
        for (int i = 0; i < 16; i++) {
            int used[16] = {0};
            na[i] = 0;
            while (na[i] < active) {
                const int k = (int)(rnd() % 16);
                if (used[k]) continue;
                used[k] = 1;
                na[i]++;
            }
            int q = 0;
            for (int k = 0; k < 16; k++)
                if (used[k]) {
                    A[i][2 * k] = rnear(), A[i][2 * k + 1] = rnear();
                    if (q < 2) pos[i][q++] = k;
                }
        }
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++)
                C0[i][j] = (float)((rnd() & 1) ? -1.0 : 1.0) * bf(rnear()) * bf(rnear()) * (1.0f + (float)(rnd() % 1000) * 1e-4f);
        memcpy(C, C0, sizeof C);
        _tile_loadd(0, C, 64);
        _tile_loadd(1, A, 64);
        _tile_loadd(2, B, 64);
        _tile_dpbf16ps(0, 1, 2);
        _tile_stored(0, C, 64);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++, (*n)++) {
                double x[32];
                for (int k = 0; k < 16; k++) {
                    x[2 * k] = (double)bf(A[i][2 * k]) * bf(B[k][2 * j]);
                    x[2 * k + 1] = (double)bf(A[i][2 * k + 1]) * bf(B[k][2 * j + 1]);
                }
                float m[NMOD];
                models(C0[i][j], x, m);
                for (int q = 0; q < NMOD; q++) bad[q] += memcmp(&m[q], &C[i][j], 4) != 0;
                if (na[i] == 2) {
                    pairtab[pos[i][0]][pos[i][1]][0]++;
                    pairtab[pos[i][0]][pos[i][1]][1] += memcmp(&m[(0 * NCOMB + 3) * NROUND], &C[i][j], 4) != 0;
                }
                if (getenv("PROBE_SHOW") && na[i] == 2 && *sample_shown < 12 && memcmp(&m[(0 * NCOMB + 3) * NROUND], &C[i][j], 4) != 0) {
                    (*sample_shown)++;
                    printf("    c %a;", (double)C0[i][j]);
                    for (int k = 0; k < 32; k++)
                        if (x[k] != 0) printf(" %d:%a", k, x[k]);
                    double ex = C0[i][j];
                    for (int k = 0; k < 32; k++) ex += x[k];
                    printf(" -> hw %a model %a exact %a\n", (double)C[i][j], (double)m[(0 * NCOMB + 3) * NROUND], ex);
                }
            }
    }
}

__attribute__((target("amx-tile,amx-bf16,avx512f"))) static int amx_study(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) return 0;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 3; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
    const int acts[] = {1, 2, 4, 16};
    for (size_t e = 0; e < sizeof acts / sizeof acts[0]; e++) {
        long bad[NMOD] = {0}, n = 0, shown = 0;
        amx_study_run(acts[e], 2000, bad, &n, &shown);
        printf("  %2d non-zero pair%s of 16, %ld outputs; the closest models' mismatches:\n", acts[e], acts[e] == 1 ? "" : "s", n);
        int order[NMOD];
        for (int q = 0; q < NMOD; q++) order[q] = q;
        for (int q = 0; q < NMOD; q++) /* by mismatches, fewest first */
            for (int r = q + 1; r < NMOD; r++)
                if (bad[order[r]] < bad[order[q]]) { const int t = order[q]; order[q] = order[r]; order[r] = t; }
        for (int q = 0; q < 5; q++) {
            char nm[128];
            model_name(order[q], nm, sizeof nm);
            printf("    %-72s %8ld (%.2f%%)\n", nm, bad[order[q]], 100.0 * (double)bad[order[q]] / (double)n);
        }
        if (acts[e] == 2 && getenv("PROBE_SHOW")) {
            printf("  misses (%%) of c + RNE(exact sum) by the two pairs' positions p (rows) < q (columns):\n");
            for (int p = 0; p < 16; p++) {
                printf("   %2d", p);
                for (int q = 0; q < 16; q++)
                    printf(q > p && pairtab[p][q][0] ? " %3.0f" : "    ", 100.0 * (double)pairtab[p][q][1] / (double)(pairtab[p][q][0] + !pairtab[p][q][0]));
                printf("\n");
            }
        }
    }
    _tile_release();
    return 1;
}

int main(void) {
    printf("bf16_probe: x86-64 only\n");
    return 0;
}
#endif
