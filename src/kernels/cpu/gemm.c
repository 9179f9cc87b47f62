/* memwall's GEMM: packed blocks (Goto/BLIS loop order), a register tile per instruction set,
 * OpenMP over row and column panels. See gemm.h for the arithmetic it guarantees. */
#include "gemm.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "gemm_amx.h"
#include "gemm_kernels.h"
#include "isa.h"
#include "ops_avx512.h"

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__x86_64__)
#include <xmmintrin.h> /* the MXCSR of bfloat16 products */
#endif

/* PMR x PNR: the portable kernel's tile; PNR is also the widest of any kernel (workspace sizes
 * use it). The packing and the blocked loops take the running kernel's MR and NR. */
enum { PMR = MW_GEMM_MR, PNR = MW_GEMM_NR, KC = MW_GEMM_KC, MC = MW_GEMM_MC };

size_t mw_gemm_ws_floats(int nthreads, int nc) {
    if (nthreads < 1) nthreads = 1;
    if (nc < 1) nc = 1;
    size_t ncr = ((size_t)nc + PNR - 1) / PNR * PNR;
    return (size_t)nthreads * MC * KC + (size_t)KC * ncr;
}

int mw_gemm_plan_cols(int n_embd, int bf16) {
    const int w = (n_embd + 31) / 32 * 32;
    return bf16 || w < 512 ? 512 : w > 768 ? 768 : w;
}

/* ---- packing ----------------------------------------------------------------------------------
 * A block (rows i0.., depth p0..p0+kc) becomes panels of MR rows: panel[k * MR + r].
 * B block (depth p0.., columns j0..) becomes panels of NR columns: panel[k * NR + c].
 * Rows and columns past the matrix are zeros. */

/* bfloat16 rounding (the rule is stated with mw_gemm_bf16 below) */
static inline uint32_t bf16_bits(uint32_t u) {
    if ((u & 0x7f800000u) == 0) return u & 0x80000000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

static inline float rnd1(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = bf16_bits(u);
    memcpy(&x, &u, sizeof u);
    return x;
}

float mw_bf16_round(float x) { return rnd1(x); }

#if defined(__AVX2__)
/* bf16_bits on eight lanes: round to nearest even in five integer operations, and the full rule
 * (zeros and denormals to signed zero, NaN quiet) only for a vector that holds one of those */
static inline __m256i bf16_bits8_full(__m256i u) {
    const __m256i expo = _mm256_and_si256(u, _mm256_set1_epi32(0x7f800000));
    const __m256i zero = _mm256_cmpeq_epi32(expo, _mm256_setzero_si256());
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
    r = _mm256_and_si256(r, hi);
    return _mm256_blendv_epi8(r, _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)), zero);
}
static inline __m256i bf16_bits8(__m256i u) {
    /* |u| - 1 below 0x007fffff: a zero or denormal (|u| = 0 wraps to the top: also caught by the
     * unsigned-as-signed comparison below); above 0x7f800000 - 1 ... a NaN. Both from one value:
     * a = |u| - 1 (as signed: -1 for zeros); special when a < 0x007fffff or a >= 0x7f800000. */
    const __m256i a = _mm256_sub_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                       _mm256_set1_epi32(1));
    const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x007fffff), a);
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f7fffff));
    if (!_mm256_testz_si256(_mm256_or_si256(lo, nan), _mm256_or_si256(lo, nan)))
        return bf16_bits8_full(u);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
    return _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
}
#endif

/* d[(j ^ sw) * ldd + i] = s[i * lds + j] for i < n (<= 4), j < m (<= 8): a small transpose, the
 * core of both packings that read across the panel (A not transposed, B transposed). sw 1 swaps
 * the rows of each pair (the bfloat16 products' order, below). */
static inline void transpose_small(float *d, long ldd, const float *s, long lds, int n, int m,
                                   int sw) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) d[(long)(j ^ sw) * ldd + i] = s[(long)i * lds + j];
}

#if defined(__AVX2__)
/* the full 4 x 8 case in eight shuffles (AVX is in the baseline whenever __AVX2__ is), of four
 * rows in registers */
static inline void transpose_4x8_regs(float *d, long ldd, __m256 r0, __m256 r1, __m256 r2,
                                      __m256 r3, int sw) {
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    _mm_storeu_ps(d + (0 ^ sw) * ldd, _mm256_castps256_ps128(u0));
    _mm_storeu_ps(d + (1 ^ sw) * ldd, _mm256_castps256_ps128(u1));
    _mm_storeu_ps(d + (2 ^ sw) * ldd, _mm256_castps256_ps128(u2));
    _mm_storeu_ps(d + (3 ^ sw) * ldd, _mm256_castps256_ps128(u3));
    _mm_storeu_ps(d + (4 ^ sw) * ldd, _mm256_extractf128_ps(u0, 1));
    _mm_storeu_ps(d + (5 ^ sw) * ldd, _mm256_extractf128_ps(u1, 1));
    _mm_storeu_ps(d + (6 ^ sw) * ldd, _mm256_extractf128_ps(u2, 1));
    _mm_storeu_ps(d + (7 ^ sw) * ldd, _mm256_extractf128_ps(u3, 1));
}
static inline void transpose_4x8(float *d, long ldd, const float *s, long lds, int sw) {
    transpose_4x8_regs(d, ldd, _mm256_loadu_ps(s), _mm256_loadu_ps(s + lds),
                       _mm256_loadu_ps(s + 2 * lds), _mm256_loadu_ps(s + 3 * lds), sw);
}
/* eight bfloat16 (their bits) as eight floats */
static inline __m256 bf16x8(const uint16_t *s) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)s);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#else
static inline void transpose_4x8(float *d, long ldd, const float *s, long lds, int sw) {
    transpose_small(d, ldd, s, lds, 4, 8, sw);
}
#endif

/* d[(k ^ sw) * ld + i] = row i of s (stride lds), element k, for i < n, k < kc: n rows across
 * into a panel of width ld */
static void pack_across(float *d, long ld, const float *s, long lds, int n, int kc, int sw) {
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            /* 4 to 32 rows read side by side: more streams than the hardware prefetcher follows */
            if (k + 40 <= kc)
                for (int r = 0; r < 4; r++) __builtin_prefetch(s + (i + r) * lds + k + 32, 0, 3);
            transpose_4x8(d + (long)k * ld + i, ld, s + i * lds + k, lds, sw);
        }
        if (i < n) transpose_small(d + (long)k * ld + i, ld, s + i * lds + k, lds, n - i, 8, sw);
    }
    for (; k < kc; k++)
        for (int i = 0; i < n; i++) d[(long)(k ^ sw) * ld + i] = s[i * lds + k];
}

/* d[(k ^ sw) * ld + i] = s[k * lds + i] for i < n, k < kc: rows copied along */
static void pack_along(float *d, long ld, const float *s, long lds, int n, int kc, int sw) {
    for (int k = 0; k < kc; k++, s += lds) {
        float *dk = d + (long)(k ^ sw) * ld;
        int i = 0;
#if defined(__AVX2__)
        /* rows of 6 to 32 floats: a library memcpy call per row cost more than the copy */
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dk + i, _mm256_loadu_ps(s + i));
#endif
        for (; i < n; i++) dk[i] = s[i];
    }
}

/* pack_across and pack_along of fp32 values rounded to bfloat16 on the way (as fp32) */
static void pack_across_r(float *d, long ld, const float *s, long lds, int n, int kc, int sw) {
    int k = 0;
#if defined(__AVX2__)
#define RL(p) _mm256_castsi256_ps(bf16_bits8(_mm256_castps_si256(_mm256_loadu_ps(p))))
    for (; k + 8 <= kc; k += 8) {
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            const float *r = s + i * lds + k;
            if (k + 40 <= kc)
                for (int q = 0; q < 4; q++) __builtin_prefetch(r + q * lds + 32, 0, 3);
            transpose_4x8_regs(d + (long)k * ld + i, ld, RL(r), RL(r + lds), RL(r + 2 * lds),
                               RL(r + 3 * lds), sw);
        }
        for (; i < n; i++)
            for (int j = 0; j < 8; j++)
                d[(long)((k + j) ^ sw) * ld + i] = rnd1(s[i * lds + k + j]);
    }
#undef RL
#endif
    for (; k < kc; k++)
        for (int i = 0; i < n; i++) d[(long)(k ^ sw) * ld + i] = rnd1(s[i * lds + k]);
}

/* d[i] = s[i] rounded to bfloat16 (as fp32), i < n */
static inline void round_row(float *d, const float *s, int n) {
    int i = 0;
#if defined(__AVX2__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(void *)(d + i),
                            bf16_bits8(_mm256_loadu_si256((const __m256i *)(const void *)(s + i))));
#endif
    for (; i < n; i++) d[i] = rnd1(s[i]);
}

static void pack_along_r(float *d, long ld, const float *s, long lds, int n, int kc, int sw) {
    for (int k = 0; k < kc; k++, s += lds) {
        /* rows a few ahead: the rounding's work between loads leaves too few of them in flight */
        if (k + 8 < kc)
            for (int q = 0; q < n; q += 16) __builtin_prefetch(s + 8 * lds + q, 0, 3);
        round_row(d + (long)(k ^ sw) * ld, s, n);
    }
}


/* pack_across and pack_along from bfloat16 (their bits), as floats */
static void pack_across16(float *d, long ld, const uint16_t *s, long lds, int n, int kc, int sw) {
    int k = 0;
#if defined(__AVX2__)
    for (; k + 8 <= kc; k += 8) {
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            const uint16_t *r = s + i * lds + k;
            transpose_4x8_regs(d + (long)k * ld + i, ld, bf16x8(r), bf16x8(r + lds),
                               bf16x8(r + 2 * lds), bf16x8(r + 3 * lds), sw);
        }
        for (; i < n; i++)
            for (int j = 0; j < 8; j++) d[(long)((k + j) ^ sw) * ld + i] = mw_bf16_widen(s[i * lds + k + j]);
    }
#endif
    for (; k < kc; k++)
        for (int i = 0; i < n; i++) d[(long)(k ^ sw) * ld + i] = mw_bf16_widen(s[i * lds + k]);
}

static void pack_along16(float *d, long ld, const uint16_t *s, long lds, int n, int kc, int sw) {
    for (int k = 0; k < kc; k++, s += lds) {
        float *dk = d + (long)(k ^ sw) * ld;
        int i = 0;
#if defined(__AVX2__)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dk + i, bf16x8(s + i));
#endif
        for (; i < n; i++) dk[i] = mw_bf16_widen(s[i]);
    }
}

/* zeros in columns n..ld-1 of kc rows of a panel */
static void pack_zero(float *d, long ld, int n, int kc) {
    if (n < ld)
        for (int k = 0; k < kc; k++) memset(d + (long)k * ld + n, 0, sizeof(float) * (ld - n));
}

/* ---- bfloat16 --------------------------------------------------------------------------------
 * A bfloat16 product (mw_gemm_bf16) rounds both operands to bfloat16 while packing (round to
 * nearest even; zeros and denormals to a zero of their sign; NaN kept quiet: vcvtneps2bf16's
 * rule, checked against it on every fp32 value) and runs each element's chain over pairs of the
 * depth, the odd product first: c = fma(a[2p+1], b[2p+1], c); c = fma(a[2p], b[2p], c), a zero
 * pair past an odd K, with denormals flushed (DAZ, FTZ). That is vdpbf16ps's arithmetic, measured
 * on every lane; the AVX512_BF16 kernel runs it on panels of bfloat16 pairs, every other kernel
 * on fp32 panels of the rounded values with the rows of each pair swapped, under FTZ and DAZ.
 * Products of two bfloat16 are exact in fp32, so each step is one rounding, the same on both. */
enum { PK_F32, PK_EMU, PK_PAIR }; /* the panels: fp32; rounded, pairs swapped; bfloat16 pairs */

/* out[p * ld + i] = (bfloat16 of t[2p * ld + i]) | (bfloat16 of t[(2p + 1) * ld + i]) << 16, for
 * np pairs of rows of a panel of width ld */
static void pair_rows(uint32_t *out, const float *t, long ld, int np) {
    for (int p = 0; p < np; p++) {
        const float *r0 = t + 2 * p * ld, *r1 = r0 + ld;
        uint32_t *o = out + (long)p * ld;
        long i = 0;
#if defined(__AVX2__)
        for (; i + 8 <= ld; i += 8) {
            const __m256i a = bf16_bits8(_mm256_loadu_si256((const __m256i *)(const void *)(r0 + i)));
            const __m256i b = bf16_bits8(_mm256_loadu_si256((const __m256i *)(const void *)(r1 + i)));
            _mm256_storeu_si256((__m256i *)(void *)(o + i), _mm256_or_si256(_mm256_srli_epi32(a, 16), b));
        }
#endif
        for (; i < ld; i++) {
            uint32_t a, b;
            memcpy(&a, r0 + i, 4);
            memcpy(&b, r1 + i, 4);
            o[i] = bf16_bits(a) >> 16 | bf16_bits(b);
        }
    }
}

/* the depth of a panel of kc rows in its mode: kc floats, kc rounded up to even, or its pairs */
static inline int panel_depth(int mode, int kc) {
    return mode == PK_F32 ? kc : mode == PK_EMU ? (kc + 1) & ~1 : (kc + 1) / 2;
}

/* One panel of n (<= LD) rows or columns and depth kc, read across (s[i * lds + k]) or along
 * (s[k * lds + i]), into d (panel_depth(mode, kc) * LD floats) with zeros past n and past kc. */
static void pack_panel(float *d, const int LD, int across, const float *s, int s16, long lds, int n,
                       int kc, int mode) {
    if (mode == PK_F32) {
        if (across)
            pack_across(d, LD, s, lds, n, kc, 0);
        else
            pack_along(d, LD, s, lds, n, kc, 0);
        pack_zero(d, LD, n, kc);
        return;
    }
    const int kp = (kc + 1) & ~1;
    float tmp[KC * PNR]; /* the fp32 panel of the pairs' mode, before pairing */
    float *t = mode == PK_EMU ? d : tmp;
    const int sw = mode == PK_EMU;
    const uint16_t *s16p = (const uint16_t *)(const void *)s;
    /* bfloat16 sources need no rounding (a denormal one is read as zero: DAZ, as vdpbf16ps) */
    if (s16 && across)
        pack_across16(t, LD, s16p, lds, n, kc, sw);
    else if (s16)
        pack_along16(t, LD, s16p, lds, n, kc, sw);
    else if (across)
        pack_across_r(t, LD, s, lds, n, kc, sw);
    else
        pack_along_r(t, LD, s, lds, n, kc, sw);
    if (kc & 1) memset(t + (long)(kc ^ sw) * LD, 0, sizeof(float) * LD); /* the zero past K */
    pack_zero(t, LD, n, kp);
    if (mode == PK_PAIR) pair_rows((uint32_t *)(void *)d, t, LD, kp / 2);
}

/* element e of a matrix of floats (s16 0) or of bfloat16 (1), as the packers take it */
static inline const float *elem(const float *M, int s16, long e) {
    return s16 ? (const float *)(const void *)((const uint16_t *)(const void *)M + e) : M + e;
}

static void pack_a(float *dst, const int MR, int ta, const float *A, int a16, long lda, int i0,
                   int mc, int p0, int kc, int mode) {
    const int pd = panel_depth(mode, kc);
    for (int ip = 0; ip < mc; ip += MR) {
        const int mr = mc - ip < MR ? mc - ip : MR;
        float *d = dst + (long)ip * pd;
        if (!ta)
            pack_panel(d, MR, 1, elem(A, a16, (long)(i0 + ip) * lda + p0), a16, lda, mr, kc, mode);
        else
            pack_panel(d, MR, 0, elem(A, a16, (long)p0 * lda + i0 + ip), a16, lda, mr, kc, mode);
    }
}

/* one panel of NR columns starting at column j */
static void pack_b_panel(float *d, const int NR, int tb, const float *B, int b16, long ldb, int j,
                         int nr, int p0, int kc, int mode) {
    if (!tb)
        pack_panel(d, NR, 0, elem(B, b16, (long)p0 * ldb + j), b16, ldb, nr, kc, mode);
    else
        pack_panel(d, NR, 1, elem(B, b16, (long)j * ldb + p0), b16, ldb, nr, kc, mode);
}

/* The emulated bfloat16 mode's panels of a matrix read along its rows (B not transposed, or A
 * transposed): rows k0..k1-1 of the block, each read once across all np panels of LD columns (n
 * in all, from s: row k at s + k * lds), rounded (or widened) into row k ^ 1 of each panel, zeros
 * past n; the zero row past an odd kc by whoever packs the last row. The same panels as
 * pack_panel makes one by one, filled by rows: whole rows streamed instead of strips of LD columns
 * down 256 rows, which the rounding slowed down to memory latency (measured: the LM head's
 * d(input) product at 0.75x fp32, 0.87x this way). */
static void pack_rows_emu(float *dst, const int LD, const float *s, int s16, long lds, int n,
                          int np, int kc, int k0, int k1) {
    const int kp = (kc + 1) & ~1;
    const size_t pstride = (size_t)kp * LD;
    for (int k = k0; k < k1; k++) {
        float *d = dst + (size_t)(k ^ 1) * LD;
        const long e = (long)k * lds;
        if (!s16 && k + 8 < k1) /* as pack_along_r: rows a few ahead */
            for (int q = 0; q < n; q += 16) __builtin_prefetch(s + e + 8 * lds + q, 0, 3);
        for (int p = 0; p < np; p++, d += pstride) { /* the row panel after panel, no call per panel */
            const int nr = n - p * LD < LD ? n - p * LD : LD;
            if (s16)
                pack_along16(d, LD, (const uint16_t *)(const void *)s + e + (long)p * LD, lds, nr, 1, 0);
            else
                round_row(d, s + e + (long)p * LD, nr);
            if (nr < LD) memset(d + nr, 0, sizeof(float) * (LD - nr));
        }
    }
    if ((kc & 1) && k1 == kc)
        for (int p = 0; p < np; p++) memset(dst + (size_t)p * kp * LD + (size_t)(kc - 1) * LD, 0, sizeof(float) * LD);
}

/* The fp32 panels of a matrix read along its rows (B not transposed, or A transposed), as
 * pack_rows_emu fills the emulated mode's: rows k0..k1-1 of the block, each read once across all np
 * panels of LD columns (n in all, from s: row k at s + k * lds), zeros past n. The same panels as
 * pack_panel makes one by one (a copy: the same bits), filled by rows: strips of LD columns down
 * 256 rows touch a new cache line on every row, a stride the hardware prefetcher does not follow
 * (measured: the weight gradients' packing at 11-15% of their time, OpenBLAS's at 3%). */
static inline __attribute__((always_inline)) void
rows_f32(float *dst, const int LD, const float *s, long lds, int n, int np, int kc, int k0, int k1) {
    const size_t pstride = (size_t)kc * LD;
    for (int k = k0; k < k1; k++) {
        const float *r = s + (long)k * lds;
        float *d = dst + (size_t)k * LD;
        if (k + 8 < k1)
            for (int q = 0; q < n; q += 16) __builtin_prefetch(r + 8 * lds + q, 0, 3);
        int p = 0;
        for (; (p + 1) * LD <= n; p++, d += pstride, r += LD) {
            int i = 0;
#if defined(__AVX2__)
            for (; i + 8 <= LD; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(r + i));
            if (i + 4 <= LD) _mm_storeu_ps(d + i, _mm_loadu_ps(r + i)), i += 4;
            if (i + 2 <= LD) { /* 8 bytes in one move (avx2's 6 rows: 4 + 2) */
                const __m128 two = _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(const void *)(r + i));
                _mm_storel_pi((__m64 *)(void *)(d + i), two);
                i += 2;
            }
#endif
            for (; i < LD; i++) d[i] = r[i];
        }
        if (p < np) { /* the last panel: nr < LD columns, zeros past them */
            const int nr = n - p * LD;
            for (int i = 0; i < nr; i++) d[i] = r[i];
            memset(d + nr, 0, sizeof(float) * (LD - nr));
        }
    }
}
/* the kernels' panel widths as constants: each copy of a panel's row unrolled into a few vector
 * moves (a loop over LD run at run time cost avx2's 6-row panels of A a scalar tail per panel) */
static void pack_rows_f32(float *dst, const int LD, const float *s, long lds, int n, int np, int kc,
                          int k0, int k1) {
    switch (LD) {
    case 6: rows_f32(dst, 6, s, lds, n, np, kc, k0, k1); break;
    case 12: rows_f32(dst, 12, s, lds, n, np, kc, k0, k1); break;
    case 16: rows_f32(dst, 16, s, lds, n, np, kc, k0, k1); break;
    case 32: rows_f32(dst, 32, s, lds, n, np, kc, k0, k1); break;
    default: rows_f32(dst, LD, s, lds, n, np, kc, k0, k1); break;
    }
}

/* ---- micro-kernels ------------------------------------------------------------------------------
 * The portable one here; the vector ones in gemm_avx2.c and gemm_avx512.c (gemm_kernels.h). */

static void kernel_portable(int mr, int nr, int kc, const float *a, const float *b, float *c,
                            long ldc, int load, int scale, float alpha) {
    float acc[PMR][PNR];
    for (int r = 0; r < PMR; r++)
        for (int j = 0; j < PNR; j++) acc[r][j] = load && r < mr && j < nr ? c[r * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++, a += PMR, b += PNR)
        for (int r = 0; r < PMR; r++)
            for (int j = 0; j < PNR; j++) acc[r][j] = fmaf(a[r], b[j], acc[r][j]);
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[r * ldc + j] = scale ? acc[r][j] * alpha : acc[r][j];
}

static const mw_ukernel kernels[MW_KERNEL_COUNT] = {
    [MW_KERNEL_PORTABLE] = {PMR, PNR, kernel_portable, NULL, NULL},
#if defined(__x86_64__)
    [MW_KERNEL_AVX2] = {MW_AVX2_MR, MW_AVX2_NR, mw_ukernel_avx2, mw_ukernel_avx2_rows, NULL},
    [MW_KERNEL_AVX512] = {MW_AVX512_MR, MW_AVX512_NR, mw_ukernel_avx512, mw_ukernel_avx512_rows, NULL},
    [MW_KERNEL_AVX512BF16] = {MW_AVX512_MR, MW_AVX512_NR, mw_ukernel_avx512, NULL,
                              mw_ukernel_avx512bf16},
#endif
#if defined(MW_HAVE_NEON_KERNEL)
    [MW_KERNEL_NEON] = {MW_NEON_MR, MW_NEON_NR, mw_ukernel_neon, NULL, NULL},
#endif
#if defined(__x86_64__) /* fp32 products on avx512's kernel; bfloat16 ones in gemm_amx.c */
    [MW_KERNEL_AMX] = {MW_AVX512_MR, MW_AVX512_NR, mw_ukernel_avx512, NULL, NULL},
#endif
};

/* ---- the blocked loops, run by each of nt threads -------------------------------------------- */

typedef struct {
    int ta, tb, M, N, K;
    float alpha, beta;
    const float *A, *B;
    long lda, ldb, ldc;
    float *C, *ws;
    int ncmax; /* columns of one packed block of B */
    mw_ukernel_fn kern;
    mw_ukernel_rows_fn rows; /* reads A in place (A not transposed), or NULL */
    int mr, nr;
    int mode; /* PK_*: fp32 products, or bfloat16 ones emulated or native */
    int a16, b16; /* A, B stored as bfloat16 (bfloat16 products only) */
} job;

/* Denormals flushed (FTZ) and read as zero (DAZ) in this thread for a bfloat16 product, as
 * vdpbf16ps does; returns the mode to restore. */
static unsigned fp_flush_begin(void) {
#if defined(__x86_64__)
    const unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);
    return old;
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ul << 24)));
    return (unsigned)fpcr;
#else
    return 0;
#endif
}
static void fp_flush_end(unsigned old) {
#if defined(__x86_64__)
    _mm_setcsr(old);
#elif defined(__aarch64__)
    unsigned long fpcr = old;
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
#else
    (void)old;
#endif
}

static void run_thread(const job *j, int tid, int nt) {
    const int MR = j->mr, NR = j->nr;
    /* threads form a tm x tn grid: rows split in MR panels, columns in NR panels. Rows are split
     * while each thread keeps at least 192 of them (or the columns are too few to share): fewer
     * rows per thread re-read every packed panel of B for too little work (the LM head's 256) */
    const int pm = (j->M + MR - 1) / MR, pn_all = (j->N + NR - 1) / NR;
    int tm = 1;
    for (int d = nt; d >= 1; d--)
        if (nt % d == 0 && pm >= 2 * d && (j->M >= 192 * d || pn_all < 2 * (nt / d))) {
            tm = d;
            break;
        }
    const int tn = nt / tm, gr = tid / tn, gc = tid % tn;
    const int r0 = (int)((long)pm * gr / tm) * MR, r1p = (int)((long)pm * (gr + 1) / tm) * MR;
    const int r1 = r1p < j->M ? r1p : j->M;
    float *ap = j->ws + (size_t)tid * MC * KC, *bp = j->ws + (size_t)nt * MC * KC;
    const unsigned fp_mode = j->mode != PK_F32 ? fp_flush_begin() : 0;

    for (int jc = 0; jc < j->N; jc += j->ncmax) {
        const int nc = j->N - jc < j->ncmax ? j->N - jc : j->ncmax, pn = (nc + NR - 1) / NR;
        const int p0 = (int)((long)pn * gc / tn), p1 = (int)((long)pn * (gc + 1) / tn);
        for (int pc = 0; pc < j->K; pc += KC) {
            const int kc = j->K - pc < KC ? j->K - pc : KC;
            const int load = pc > 0 || j->beta != 0.0f, last = pc + kc == j->K;
            const int pd = panel_depth(j->mode, kc); /* what the micro-kernel runs as its depth */
            if (j->mode == PK_EMU && !j->tb) {
                pack_rows_emu(bp, NR, elem(j->B, j->b16, (long)pc * j->ldb + jc), j->b16, j->ldb, nc,
                              pn, kc, kc * tid / nt, kc * (tid + 1) / nt);
            } else if (j->mode == PK_F32 && !j->tb) {
                pack_rows_f32(bp, NR, j->B + (long)pc * j->ldb + jc, j->ldb, nc, pn, kc,
                              kc * tid / nt, kc * (tid + 1) / nt);
            } else {
                for (int p = tid; p < pn; p += nt) {
                    const int col = jc + p * NR, nr = j->N - col < NR ? j->N - col : NR;
                    pack_b_panel(bp + (size_t)p * pd * NR, NR, j->tb, j->B, j->b16, j->ldb, col, nr,
                                 pc, kc, j->mode);
                }
            }
            if (nt > 1) {
#pragma omp barrier
            }
            /* the thread's rows in equal blocks of at most MC (no short tail block re-reading
             * every panel of B for a few rows) */
            const int nblk = (r1 - r0 + MC - 1) / MC;
            const int mcb = nblk ? ((r1 - r0 + nblk - 1) / nblk + MR - 1) / MR * MR : MC;
            for (int i0 = r0; i0 < r1; i0 += mcb) {
                const int mc = r1 - i0 < mcb ? r1 - i0 : mcb;
                if (j->mode == PK_EMU && j->ta)
                    pack_rows_emu(ap, MR, elem(j->A, j->a16, (long)pc * j->lda + i0), j->a16, j->lda,
                                  mc, (mc + MR - 1) / MR, kc, 0, kc);
                else if (j->mode == PK_F32 && j->ta)
                    pack_rows_f32(ap, MR, j->A + (long)pc * j->lda + i0, j->lda, mc,
                                  (mc + MR - 1) / MR, kc, 0, kc);
                else if (!j->rows)
                    pack_a(ap, MR, j->ta, j->A, j->a16, j->lda, i0, mc, pc, kc, j->mode);
                /* a panel of A (MR rows: L1's) against the block's panels of B in turn (L2's),
                 * along a row of C tiles: the wide panel of B streams, as BLIS runs its kernels,
                 * instead of one B panel (32 KiB, most of L1) held against the stream of A panels
                 * (measured: 0.86-0.92x OpenBLAS the other way, 0.92-1.0x this way) */
                const int scale = last && j->alpha != 1.0f;
                for (int ip = 0; ip < mc; ip += MR) {
                    const int mr = mc - ip < MR ? mc - ip : MR;
                    const float *apt = ap + (size_t)ip * pd;
                    const int inplace = j->rows && mr == MR;
                    if (j->rows && mr < MR) { /* the last rows: packed, zeros past M */
                        pack_a(ap, MR, 0, j->A, 0, j->lda, i0 + ip, mr, pc, kc, PK_F32);
                        apt = ap;
                    }
                    float *crow = j->C + (long)(i0 + ip) * j->ldc;
                    for (int p = p0; p < p1; p++) {
                        const int col = jc + p * NR, nr = j->N - col < NR ? j->N - col : NR;
                        const float *bpp = bp + (size_t)p * pd * NR;
                        /* the next tile's rows of C: when C outgrows the caches (the LM head's
                         * logits), its loads would otherwise stall each call */
                        if (p + 1 < p1) {
                            const float *cn = crow + col + NR;
                            for (int r = 0; r < mr; r++) {
                                __builtin_prefetch(cn + r * j->ldc, 1, 3);
                                __builtin_prefetch(cn + r * j->ldc + NR - 1, 1, 3);
                            }
                        }
                        if (inplace)
                            j->rows(nr, kc, j->A + (long)(i0 + ip) * j->lda + pc, j->lda, bpp,
                                    crow + col, j->ldc, load, scale, j->alpha);
                        else
                            j->kern(mr, nr, pd, apt, bpp, crow + col, j->ldc, load, scale, j->alpha);
                    }
                }
            }
            if (nt > 1) {
#pragma omp barrier
            }
        }
    }
    if (j->mode != PK_F32) fp_flush_end(fp_mode);
}

/* M = 1 (decoding one position): no packing, the same fma chains. With B transposed each output
 * is a dot product of one contiguous row; eight of them run side by side. */
static void gemv_range(int tb, int N0, int N1, int K, float alpha, const float *a, const float *B,
                       long ldb, float beta, float *c) {
    const int scale = alpha != 1.0f;
    if (tb) {
        int j = N0;
        for (; j + 8 <= N1; j += 8) {
            float acc[8];
            for (int u = 0; u < 8; u++) acc[u] = beta != 0.0f ? c[j + u] : 0.0f;
            const float *b = B + (long)j * ldb;
            for (int k = 0; k < K; k++)
                for (int u = 0; u < 8; u++) acc[u] = fmaf(a[k], b[(long)u * ldb + k], acc[u]);
            for (int u = 0; u < 8; u++) c[j + u] = scale ? acc[u] * alpha : acc[u];
        }
        for (; j < N1; j++) {
            float s = beta != 0.0f ? c[j] : 0.0f;
            const float *b = B + (long)j * ldb;
            for (int k = 0; k < K; k++) s = fmaf(a[k], b[k], s);
            c[j] = scale ? s * alpha : s;
        }
    } else {
        if (beta == 0.0f) memset(c + N0, 0, sizeof(float) * (size_t)(N1 - N0));
        for (int k = 0; k < K; k++) {
            const float ak = a[k], *b = B + (long)k * ldb;
            for (int j = N0; j < N1; j++) c[j] = fmaf(ak, b[j], c[j]);
        }
        if (scale)
            for (int j = N0; j < N1; j++) c[j] *= alpha;
    }
}

static void gemv(int ta, int tb, int N, int K, float alpha, const float *A, long lda,
                 const float *B, long ldb, float beta, float *C, int nthreads, float *ws) {
    const float *a = A;
    if (ta) { /* A is K x 1 with stride lda: gather it into the workspace first */
        for (int k = 0; k < K; k++) ws[k] = A[(long)k * lda];
        a = ws;
    }
    const int chunk = 512; /* fixed column chunks: any thread count, the same work per chunk */
    const int nch = (N + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && nch > 1)
    for (int i = 0; i < nch; i++) {
        const int j1 = (i + 1) * chunk < N ? (i + 1) * chunk : N;
        gemv_range(tb, i * chunk, j1, K, alpha, a, B, ldb, beta, C);
    }
}

static int gemm_with(const mw_ukernel *uk, int bf16, int allow_gemv, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int a16, long lda, const float *B, int b16, long ldb, float beta, float *C,
                     long ldc, float *ws, size_t ws_floats, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if ((beta != 0.0f && beta != 1.0f) || (beta != 0.0f && alpha != 1.0f) || M < 0 || N < 0 ||
        K < 0 || !ws || ws_floats < mw_gemm_ws_floats(nthreads, 1) || ((a16 || b16) && !bf16))
        return -1;
    if (M == 0 || N == 0) return 0;
    if (K == 0) {
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) memset(C + (long)i * ldc, 0, sizeof(float) * N);
        return 0;
    }
    if (bf16 && uk == &kernels[MW_KERNEL_AMX])
        return mw_gemm_amx(ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, C, ldc, ws,
                           ws_floats, nthreads);
    if (M == 1 && allow_gemv && !bf16 && (!ta || (size_t)K <= ws_floats)) {
        gemv(ta, tb, N, K, alpha, A, lda, B, ldb, beta, C, nthreads, ws);
        return 0;
    }
    const size_t fb = (ws_floats - (size_t)nthreads * MC * KC) / KC / uk->nr * uk->nr;
    /* A (not transposed) read in place by the kernels that can: its panel of MR rows stays in L1
     * along a row of C tiles (the loop in run_thread), so packing it first only cost time
     * (measured on GPT-2's products, 1 thread: 2-5% faster in place on avx512 and avx2) */
    const int mode = !bf16 ? PK_F32 : uk->bf16 ? PK_PAIR : PK_EMU;
    job j = {ta, tb, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C, ws,
             fb > (size_t)N ? N : (int)fb, mode == PK_PAIR ? uk->bf16 : uk->fn,
             ta || bf16 ? NULL : uk->rows, uk->mr, uk->nr, mode, a16, b16};
    if (nthreads == 1) {
        run_thread(&j, 0, 1);
        return 0;
    }
#pragma omp parallel num_threads(nthreads)
    run_thread(&j, omp_get_thread_num(), omp_get_num_threads());
    return 0;
}

int mw_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, long lda,
            const float *B, long ldb, float beta, float *C, long ldc, float *ws, size_t ws_floats,
            int nthreads) {
    return gemm_with(&kernels[mw_kernel_current()], 0, 1, ta, tb, M, N, K, alpha, A, 0, lda, B, 0,
                     ldb, beta, C, ldc, ws, ws_floats, nthreads);
}

int mw_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const void *A, int a16, long lda,
                 const void *B, int b16, long ldb, float beta, float *C, long ldc, float *ws,
                 size_t ws_floats, int nthreads) {
    return gemm_with(&kernels[mw_kernel_current_bf16()], 1, 0, ta, tb, M, N, K, alpha, A, a16, lda, B,
                     b16, ldb, beta, C, ldc, ws, ws_floats, nthreads);
}

int mw_gemm_kernel(int kernel, int packed_only, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, long lda, const float *B, long ldb, float beta, float *C,
                   long ldc, float *ws, size_t ws_floats, int nthreads) {
    if (kernel < 0 || kernel >= MW_KERNEL_COUNT || !kernels[kernel].fn ||
        !mw_kernel_id_supported((mw_kernel_id)kernel))
        return -1;
    return gemm_with(&kernels[kernel], 0, !packed_only, ta, tb, M, N, K, alpha, A, 0, lda, B, 0,
                     ldb, beta, C, ldc, ws, ws_floats, nthreads);
}

int mw_gemm_bf16_kernel(int kernel, int ta, int tb, int M, int N, int K, float alpha,
                        const void *A, int a16, long lda, const void *B, int b16, long ldb,
                        float beta, float *C, long ldc, float *ws, size_t ws_floats, int nthreads) {
    if (kernel < 0 || kernel >= MW_KERNEL_COUNT || !kernels[kernel].fn ||
        !mw_kernel_id_supported((mw_kernel_id)kernel))
        return -1;
    return gemm_with(&kernels[kernel], 1, 0, ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta,
                     C, ldc, ws, ws_floats, nthreads);
}

void mw_bf16_store(uint16_t *dst, const float *src, size_t n) {
#if defined(__x86_64__)
    switch (mw_ops_simd()) { /* 16 or 32 lanes: the same bits (tests/test_ops.c) */
    case 1: mw_bf16_store_avx512(dst, src, n); return;
    case 2: mw_bf16_store_avx512bf16(dst, src, n); return;
    default: break;
    }
#endif
    size_t i = 0;
#if defined(__AVX2__)
    for (; i + 16 <= n; i += 16) {
        const __m256i a = bf16_bits8(_mm256_loadu_si256((const __m256i *)(const void *)(src + i)));
        const __m256i b = bf16_bits8(_mm256_loadu_si256((const __m256i *)(const void *)(src + i + 8)));
        /* the high halves, in order: pack (which interleaves 128-bit lanes), then put them back */
        const __m256i p = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_permute4x64_epi64(p, 0xD8));
    }
#endif
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = (uint16_t)(bf16_bits(u) >> 16);
    }
}

void mw_bf16_load(float *dst, const uint16_t *src, size_t n) {
#if defined(__x86_64__)
    if (mw_ops_simd()) {
        mw_bf16_load_avx512(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = mw_bf16_widen(src[i]);
}

/* pieces of 64K elements, one per iteration of a parallel loop: elementwise, the same bits */
#define BF16_MT_PIECE ((size_t)1 << 16)
void mw_bf16_store_mt(uint16_t *dst, const float *src, size_t n) {
    const long np = (long)((n + BF16_MT_PIECE - 1) / BF16_MT_PIECE);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const size_t i0 = (size_t)p * BF16_MT_PIECE, k = n - i0 < BF16_MT_PIECE ? n - i0 : BF16_MT_PIECE;
        mw_bf16_store(dst + i0, src + i0, k);
    }
}
void mw_bf16_load_mt(float *dst, const uint16_t *src, size_t n) {
    const long np = (long)((n + BF16_MT_PIECE - 1) / BF16_MT_PIECE);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const size_t i0 = (size_t)p * BF16_MT_PIECE, k = n - i0 < BF16_MT_PIECE ? n - i0 : BF16_MT_PIECE;
        mw_bf16_load(dst + i0, src + i0, k);
    }
}

int mw_gemm_ws_run(const mw_gemm_ws *ws, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, long lda, const float *B, long ldb, float beta, float *C,
                   long ldc) {
    return ws->bf16 ? mw_gemm_bf16(ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, C, ldc,
                                   ws->buf, ws->floats, ws->nthreads)
                    : mw_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws->buf,
                              ws->floats, ws->nthreads);
}

int mw_gemm_ws_run_x(const mw_gemm_ws *ws, int ta, int tb, int M, int N, int K, float alpha,
                     const void *A, int a16, long lda, const void *B, int b16, long ldb,
                     float beta, float *C, long ldc) {
    if (!ws->bf16)
        return a16 || b16 ? -1 : mw_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws->buf, ws->floats,
                       ws->nthreads);
    return mw_gemm_bf16(ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, C, ldc, ws->buf,
                        ws->floats, ws->nthreads);
}
