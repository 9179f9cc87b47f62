/* The AMX bfloat16 GEMM (see gemm_amx.h for its arithmetic). Compiled for AMX and AVX-512 with
 * target attributes whatever the build's baseline; called only where isa.c found AMX usable.
 *
 * Blocking: the depth in blocks of KC (256), B's block of nc columns packed once per depth block
 * by all threads together into 16-column panels [KC/2][16][2] (one 1 KiB tile per 32 of depth),
 * each thread's rows of A in blocks of up to MA rows packed as bfloat16 rows of the block's depth
 * rounded up to 32. The register block is 32 x 32 of C: four C tiles, two A tiles, two B tiles,
 * all eight tile registers. Threads form a grid over 32-row and 32-column blocks, as gemm.c's. */
#include "gemm_amx.h"

#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "gemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <omp.h>

#define TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

enum { KC = MW_GEMM_KC, MA = 224 /* rows of one packed block of A: 7 register blocks */ };
/* a block of A as bfloat16 (MA rows of KC) fits where gemm.c keeps MW_GEMM_MC rows of KC floats */
_Static_assert(MA * KC * 2 <= MW_GEMM_MC * KC * 4, "the AMX block of A outgrows its workspace");
_Static_assert(KC % 32 == 0, "the depth block is a whole number of tiles");

/* ---- packing ----------------------------------------------------------------------------------- */

/* n (<= 16) elements from s (floats, or bfloat16 bits when s16), e elements in, as bfloat16; zeros
 * past n */
static inline TARGET __m256i load16(const void *s, int s16, long e, int n) {
    if (n <= 0) return _mm256_setzero_si256();
    const __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    if (s16) return _mm256_maskz_loadu_epi16(m, (const uint16_t *)s + e);
    return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, (const float *)s + e));
}

/* 32 elements (n <= 32 of them, zeros past) as 16 words of pairs: word p = element 2p | 2p+1 << 16 */
static inline TARGET __m512i load32(const void *s, int s16, long e, int n) {
    const __m256i lo = load16(s, s16, e, n), hi = load16(s, s16, e + 16, n - 16);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* word i = x[i] | y[i] << 16 */
static inline TARGET __m512i interleave(__m256i x, __m256i y) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(x), _mm512_slli_epi32(_mm512_cvtepu16_epi32(y), 16));
}

/* r[0..15] as a 16 x 16 matrix of 32-bit words, transposed in place */
static inline TARGET void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* each 128-bit lane q of r[i] now holds the 4 x 4 block (rows 4q.., of the group i / 4) */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);      /* lanes 0, 2 of each */
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);  /* lanes 1, 3 */
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
    }
}

/* A block: rows i0..i0+mc-1 of op(A), depth p0..p0+kc-1, into d: row r at d + r * kp (kp: kc
 * rounded up to 32), zeros past kc and in rows mc..mp-1 (mp: mc rounded up to 32) */
static TARGET void pack_a(uint16_t *d, int ta, const void *A, int a16, long lda, int i0, int mc,
                          int p0, int kc, int kp) {
    const int mp = (mc + 31) & ~31;
    if (!ta) { /* row i, element k at A[i * lda + k]: rows copied along */
        for (int r = 0; r < mc; r++) {
            const long e = (long)(i0 + r) * lda + p0;
            for (int k = 0; k < kp; k += 32)
                _mm512_storeu_si512(d + (long)r * kp + k, load32(A, a16, e + k, kc - k));
        }
    } else { /* element (i, k) at A[k * lda + i]: 32 rows of the depth by 16 of A, transposed */
        for (int r = 0; r < mc; r += 16) {
            const int n = mc - r < 16 ? mc - r : 16;
            for (int k = 0; k < kp; k += 32) {
                __m512i w[16];
                for (int p = 0; p < 16; p++) {
                    const int k0 = k + 2 * p;
                    const __m256i x = k0 < kc ? load16(A, a16, (long)(p0 + k0) * lda + i0 + r, n) : _mm256_setzero_si256();
                    const __m256i y = k0 + 1 < kc ? load16(A, a16, (long)(p0 + k0 + 1) * lda + i0 + r, n)
                                                  : _mm256_setzero_si256();
                    w[p] = interleave(x, y);
                }
                transpose16(w);
                for (int q = 0; q < n; q++) _mm512_storeu_si512(d + (long)(r + q) * kp + k, w[q]);
            }
        }
    }
    for (int r = mc; r < mp; r++) memset(d + (long)r * kp, 0, sizeof(uint16_t) * (size_t)kp);
}

/* One 16-column panel of op(B): columns j..j+nr-1 (zeros past nr), depth p0..p0+kc-1 (zeros to
 * kp), as [kp / 2][16][2]: the tiles' layout, one 1 KiB tile per 32 of depth */
static TARGET void pack_b(uint16_t *d, int tb, const void *B, int b16, long ldb, int j, int nr,
                          int p0, int kc, int kp) {
    if (!tb) { /* element (k, j) at B[k * ldb + j]: two rows of the depth make one row of pairs */
        for (int k = 0; k < kp; k += 2) {
            const __m256i x = k < kc ? load16(B, b16, (long)(p0 + k) * ldb + j, nr) : _mm256_setzero_si256();
            const __m256i y = k + 1 < kc ? load16(B, b16, (long)(p0 + k + 1) * ldb + j, nr) : _mm256_setzero_si256();
            _mm512_storeu_si512(d + (long)k * 16, interleave(x, y));
        }
    } else { /* element (k, j) at B[j * ldb + k]: a column's pairs are words of its row: transposed */
        for (int k = 0; k < kp; k += 32) {
            __m512i w[16];
            for (int c = 0; c < 16; c++)
                w[c] = c < nr ? load32(B, b16, (long)(j + c) * ldb + p0 + k, kc - k) : _mm512_setzero_si512();
            transpose16(w);
            for (int p = 0; p < 16; p++) _mm512_storeu_si512(d + (long)(k + 2 * p) * 16, w[p]);
        }
    }
}

/* ---- the register block -------------------------------------------------------------------------
 * 32 x 32 of C in tiles 0..3 (rows 0-15 and 16-31 by columns 0-15 and 16-31), A's two tiles in 4
 * and 5, B's in 6 and 7; nq tiles of depth (32 each). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

TARGET void mw_amx_tiles_begin(void) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    /* gcc's _tile_loadconfig tells the compiler it reads 8 bytes of the 64: without this barrier
     * it dropped the stores of the tiles' shapes (ldtilecfg then faulted on stack garbage) */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

TARGET void mw_amx_tiles_end(void) { _tile_release(); }

/* c: the block's first element (row stride ldc floats); a: A's 32 rows (stride kp elements) */
static inline TARGET void block(const uint16_t *a, long kp, const uint16_t *b0, const uint16_t *b1,
                                int nq, float *c, long ldc, int load) {
    const long cs = ldc * 4, as = kp * 2;
    if (load) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c + 16, cs);
        _tile_loadd(2, c + 16 * ldc, cs);
        _tile_loadd(3, c + 16 * ldc + 16, cs);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int q = 0; q < nq; q++) {
        _tile_loadd(4, a + q * 32, as);
        _tile_loadd(6, b0 + q * 512, 64);
        _tile_loadd(7, b1 + q * 512, 64);
        _tile_loadd(5, a + 16 * kp + q * 32, as);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, cs);
    _tile_stored(1, c + 16, cs);
    _tile_stored(2, c + 16 * ldc, cs);
    _tile_stored(3, c + 16 * ldc + 16, cs);
}

/* ---- the blocked loops --------------------------------------------------------------------------- */

typedef struct {
    int ta, tb, M, N, K;
    float alpha, beta;
    const void *A, *B;
    int a16, b16;
    long lda, ldb, ldc;
    float *C, *ws;
    int ncmax; /* columns of one packed block of B: a multiple of 32 */
} job;

static TARGET void run_thread(const job *j, int tid, int nt) {
    /* the grid: rows in 32-row blocks, columns in 32-column blocks, as gemm.c's run_thread */
    const int pm = (j->M + 31) / 32, pn_all = (j->N + 31) / 32;
    int tm = 1;
    for (int d = nt; d >= 1; d--)
        if (nt % d == 0 && pm >= 2 * d && (j->M >= 192 * d || pn_all < 2 * (nt / d))) {
            tm = d;
            break;
        }
    const int tn = nt / tm, gr = tid / tn, gc = tid % tn;
    const int r0 = (int)((long)pm * gr / tm) * 32, r1p = (int)((long)pm * (gr + 1) / tm) * 32;
    const int r1 = r1p < j->M ? r1p : j->M;
    uint16_t *ap = (uint16_t *)(void *)(j->ws + (size_t)tid * MW_GEMM_MC * KC);
    uint16_t *bp = (uint16_t *)(void *)(j->ws + (size_t)nt * MW_GEMM_MC * KC);
    float ct[32 * 32]; /* a block of C at the matrix's edges */
    mw_amx_tiles_begin();

    for (int jc = 0; jc < j->N; jc += j->ncmax) {
        const int nc = j->N - jc < j->ncmax ? j->N - jc : j->ncmax, pn = (nc + 31) / 32;
        const int q0 = (int)((long)pn * gc / tn), q1 = (int)((long)pn * (gc + 1) / tn);
        for (int pc = 0; pc < j->K; pc += KC) {
            const int kc = j->K - pc < KC ? j->K - pc : KC, kp = (kc + 31) & ~31, nq = kp / 32;
            const int load = pc > 0 || j->beta != 0.0f, scale = pc + kc == j->K && j->alpha != 1.0f;
            /* B's panels (two per 32 columns), shared out among the threads */
            for (int p = tid; p < 2 * pn; p += nt) {
                const int col = jc + p * 16, nr = j->N - col < 16 ? j->N - col : 16;
                pack_b(bp + (size_t)p * kp * 16, j->tb, j->B, j->b16, j->ldb, col, nr, pc, kc, kp);
            }
            if (nt > 1) {
#pragma omp barrier
            }
            for (int i0 = r0; i0 < r1; i0 += MA) {
                const int mc = r1 - i0 < MA ? r1 - i0 : MA;
                pack_a(ap, j->ta, j->A, j->a16, j->lda, i0, mc, pc, kc, kp);
                for (int q = q0; q < q1; q++) {
                    const int col = jc + q * 32, nr = j->N - col < 32 ? j->N - col : 32;
                    const uint16_t *b0 = bp + (size_t)(2 * q) * kp * 16, *b1 = b0 + (size_t)kp * 16;
                    for (int ib = 0; ib < mc; ib += 32) {
                        const int mr = mc - ib < 32 ? mc - ib : 32;
                        float *c = j->C + (long)(i0 + ib) * j->ldc + col;
                        const uint16_t *a = ap + (size_t)ib * kp;
                        if (mr == 32 && nr == 32) {
                            block(a, kp, b0, b1, nq, c, j->ldc, load);
                            if (scale)
                                for (int r = 0; r < 32; r++) {
                                    float *cr = c + (long)r * j->ldc;
                                    const __m512 al = _mm512_set1_ps(j->alpha);
                                    _mm512_storeu_ps(cr, _mm512_mul_ps(_mm512_loadu_ps(cr), al));
                                    _mm512_storeu_ps(cr + 16, _mm512_mul_ps(_mm512_loadu_ps(cr + 16), al));
                                }
                        } else { /* through ct: only mr x nr of it is C */
                            if (load)
                                for (int r = 0; r < mr; r++) memcpy(ct + r * 32, c + (long)r * j->ldc, sizeof(float) * nr);
                            block(a, kp, b0, b1, nq, ct, 32, load);
                            for (int r = 0; r < mr; r++)
                                for (int x = 0; x < nr; x++) c[(long)r * j->ldc + x] = scale ? ct[r * 32 + x] * j->alpha : ct[r * 32 + x];
                        }
                    }
                }
            }
            if (nt > 1) {
#pragma omp barrier
            }
        }
    }
    mw_amx_tiles_end();
}

TARGET void mw_ukernel_amx(const uint16_t *a, long kp, const uint16_t *b0, const uint16_t *b1, int nq,
                           float *c, long ldc, int load) {
    block(a, kp, b0, b1, nq, c, ldc, load);
}

int mw_gemm_amx(int ta, int tb, int M, int N, int K, float alpha, const void *A, int a16, long lda,
                const void *B, int b16, long ldb, float beta, float *C, long ldc, float *ws,
                size_t ws_floats, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    /* B's block: whole 32-column blocks of panels (16 columns, KC deep, bfloat16) in what is left */
    const size_t bytes = (ws_floats - (size_t)nthreads * MW_GEMM_MC * KC) * sizeof(float);
    const size_t cols = bytes / ((size_t)KC * 2 * 32) * 32;
    const int ncmax = cols > (size_t)N ? (N + 31) & ~31 : (int)cols;
    if (ncmax < 32) return -1;
    job j = {ta, tb, M, N, K, alpha, beta, A, B, a16, b16, lda, ldb, ldc, C, ws, ncmax};
    if (nthreads == 1) {
        run_thread(&j, 0, 1);
        return 0;
    }
#pragma omp parallel num_threads(nthreads)
    run_thread(&j, omp_get_thread_num(), omp_get_num_threads());
    return 0;
}

#else /* not x86-64: no AMX */
int mw_gemm_amx(int ta, int tb, int M, int N, int K, float alpha, const void *A, int a16, long lda,
                const void *B, int b16, long ldb, float beta, float *C, long ldc, float *ws,
                size_t ws_floats, int nthreads) {
    return -1;
}
#endif
