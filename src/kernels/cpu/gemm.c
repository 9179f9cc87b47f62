/* memwall's GEMM: packed blocks (Goto/BLIS loop order), a register tile per instruction set,
 * OpenMP over row and column panels. See gemm.h for the arithmetic it guarantees. */
#include "gemm.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "gemm_kernels.h"
#include "isa.h"

#if defined(__AVX2__)
#include <immintrin.h>
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

/* ---- packing ----------------------------------------------------------------------------------
 * A block (rows i0.., depth p0..p0+kc) becomes panels of MR rows: panel[k * MR + r].
 * B block (depth p0.., columns j0..) becomes panels of NR columns: panel[k * NR + c].
 * Rows and columns past the matrix are zeros. */

/* d[j * ldd + i] = s[i * lds + j] for i < n (<= 4), j < m (<= 8): a small transpose, the core of
 * both packings that read across the panel (A not transposed, B transposed). */
static inline void transpose_small(float *d, long ldd, const float *s, long lds, int n, int m) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) d[(long)j * ldd + i] = s[(long)i * lds + j];
}

#if defined(__AVX2__)
/* the full 4 x 8 case in eight shuffles (AVX is in the baseline whenever __AVX2__ is) */
static inline void transpose_4x8(float *d, long ldd, const float *s, long lds) {
    const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds);
    const __m256 r2 = _mm256_loadu_ps(s + 2 * lds), r3 = _mm256_loadu_ps(s + 3 * lds);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    _mm_storeu_ps(d, _mm256_castps256_ps128(u0));
    _mm_storeu_ps(d + ldd, _mm256_castps256_ps128(u1));
    _mm_storeu_ps(d + 2 * ldd, _mm256_castps256_ps128(u2));
    _mm_storeu_ps(d + 3 * ldd, _mm256_castps256_ps128(u3));
    _mm_storeu_ps(d + 4 * ldd, _mm256_extractf128_ps(u0, 1));
    _mm_storeu_ps(d + 5 * ldd, _mm256_extractf128_ps(u1, 1));
    _mm_storeu_ps(d + 6 * ldd, _mm256_extractf128_ps(u2, 1));
    _mm_storeu_ps(d + 7 * ldd, _mm256_extractf128_ps(u3, 1));
}
#else
static inline void transpose_4x8(float *d, long ldd, const float *s, long lds) {
    transpose_small(d, ldd, s, lds, 4, 8);
}
#endif

/* d[k * ld + i] = row i of s (stride lds), element k, for i < n, k < kc: n rows across into a
 * panel of width ld */
static void pack_across(float *d, long ld, const float *s, long lds, int n, int kc) {
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            /* 4 to 32 rows read side by side: more streams than the hardware prefetcher follows */
            if (k + 40 <= kc)
                for (int r = 0; r < 4; r++) __builtin_prefetch(s + (i + r) * lds + k + 32, 0, 3);
            transpose_4x8(d + (long)k * ld + i, ld, s + i * lds + k, lds);
        }
        if (i < n) transpose_small(d + (long)k * ld + i, ld, s + i * lds + k, lds, n - i, 8);
    }
    for (; k < kc; k++)
        for (int i = 0; i < n; i++) d[(long)k * ld + i] = s[i * lds + k];
}

/* d[k * ld + i] = s[k * lds + i] for i < n, k < kc: rows copied along */
static void pack_along(float *d, long ld, const float *s, long lds, int n, int kc) {
    for (int k = 0; k < kc; k++, d += ld, s += lds) {
        int i = 0;
#if defined(__AVX2__)
        /* rows of 6 to 32 floats: a library memcpy call per row cost more than the copy */
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(s + i));
#endif
        for (; i < n; i++) d[i] = s[i];
    }
}

/* zeros in columns n..ld-1 of kc rows of a panel */
static void pack_zero(float *d, long ld, int n, int kc) {
    if (n < ld)
        for (int k = 0; k < kc; k++) memset(d + (long)k * ld + n, 0, sizeof(float) * (ld - n));
}

static void pack_a(float *dst, const int MR, int ta, const float *A, long lda, int i0, int mc,
                   int p0, int kc) {
    for (int ip = 0; ip < mc; ip += MR) {
        const int mr = mc - ip < MR ? mc - ip : MR;
        float *d = dst + (long)ip * kc;
        if (!ta)
            pack_across(d, MR, A + (long)(i0 + ip) * lda + p0, lda, mr, kc);
        else
            pack_along(d, MR, A + (long)p0 * lda + i0 + ip, lda, mr, kc);
        pack_zero(d, MR, mr, kc);
    }
}

/* one panel of NR columns starting at column j */
static void pack_b_panel(float *d, const int NR, int tb, const float *B, long ldb, int j, int nr,
                         int p0, int kc) {
    if (!tb)
        pack_along(d, NR, B + (long)p0 * ldb + j, ldb, nr, kc);
    else
        pack_across(d, NR, B + (long)j * ldb + p0, ldb, nr, kc);
    pack_zero(d, NR, nr, kc);
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
    [MW_KERNEL_PORTABLE] = {PMR, PNR, kernel_portable, NULL},
#if defined(__x86_64__)
    [MW_KERNEL_AVX2] = {MW_AVX2_MR, MW_AVX2_NR, mw_ukernel_avx2, mw_ukernel_avx2_rows},
    [MW_KERNEL_AVX512] = {MW_AVX512_MR, MW_AVX512_NR, mw_ukernel_avx512, NULL},
#endif
#if defined(MW_HAVE_NEON_KERNEL)
    [MW_KERNEL_NEON] = {MW_NEON_MR, MW_NEON_NR, mw_ukernel_neon, NULL},
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
} job;

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

    for (int jc = 0; jc < j->N; jc += j->ncmax) {
        const int nc = j->N - jc < j->ncmax ? j->N - jc : j->ncmax, pn = (nc + NR - 1) / NR;
        const int p0 = (int)((long)pn * gc / tn), p1 = (int)((long)pn * (gc + 1) / tn);
        for (int pc = 0; pc < j->K; pc += KC) {
            const int kc = j->K - pc < KC ? j->K - pc : KC;
            const int load = pc > 0 || j->beta != 0.0f, last = pc + kc == j->K;
            for (int p = tid; p < pn; p += nt) {
                const int col = jc + p * NR, nr = j->N - col < NR ? j->N - col : NR;
                pack_b_panel(bp + (size_t)p * kc * NR, NR, j->tb, j->B, j->ldb, col, nr, pc, kc);
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
                if (!j->rows) pack_a(ap, MR, j->ta, j->A, j->lda, i0, mc, pc, kc);
                for (int p = p0; p < p1; p++) {
                    const int col = jc + p * NR, nr = j->N - col < NR ? j->N - col : NR;
                    const float *bpp = bp + (size_t)p * kc * NR;
                    for (int ip = 0; ip < mc; ip += MR) {
                        const int mr = mc - ip < MR ? mc - ip : MR;
                        /* the next tile's rows of C: when C outgrows the caches (the LM head's
                         * logits), its loads would otherwise stall each call */
                        if (ip + MR < mc) {
                            const int mr2 = mc - ip - MR < MR ? mc - ip - MR : MR;
                            const float *cn = j->C + (long)(i0 + ip + MR) * j->ldc + col;
                            for (int r = 0; r < mr2; r++) {
                                __builtin_prefetch(cn + r * j->ldc, 1, 3);
                                __builtin_prefetch(cn + r * j->ldc + nr - 1, 1, 3);
                            }
                        }
                        float *ct = j->C + (long)(i0 + ip) * j->ldc + col;
                        const int scale = last && j->alpha != 1.0f;
                        if (!j->rows) {
                            j->kern(mr, nr, kc, ap + (size_t)ip * kc, bpp, ct, j->ldc, load, scale,
                                    j->alpha);
                        } else if (mr == MR) {
                            j->rows(nr, kc, j->A + (long)(i0 + ip) * j->lda + pc, j->lda, bpp, ct,
                                    j->ldc, load, scale, j->alpha);
                        } else { /* the last rows: packed, zeros past M */
                            pack_a(ap, MR, 0, j->A, j->lda, i0 + ip, mr, pc, kc);
                            j->kern(mr, nr, kc, ap, bpp, ct, j->ldc, load, scale, j->alpha);
                        }
                    }
                }
            }
            if (nt > 1) {
#pragma omp barrier
            }
        }
    }
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

static int gemm_with(const mw_ukernel *uk, int allow_gemv, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, long lda, const float *B, long ldb, float beta, float *C,
                     long ldc, float *ws, size_t ws_floats, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if ((beta != 0.0f && beta != 1.0f) || (beta != 0.0f && alpha != 1.0f) || M < 0 || N < 0 ||
        K < 0 || !ws || ws_floats < mw_gemm_ws_floats(nthreads, 1))
        return -1;
    if (M == 0 || N == 0) return 0;
    if (K == 0) {
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) memset(C + (long)i * ldc, 0, sizeof(float) * N);
        return 0;
    }
    if (M == 1 && allow_gemv && (!ta || (size_t)K <= ws_floats)) {
        gemv(ta, tb, N, K, alpha, A, lda, B, ldb, beta, C, nthreads, ws);
        return 0;
    }
    const size_t fb = (ws_floats - (size_t)nthreads * MC * KC) / KC / uk->nr * uk->nr;
    /* A read in place when few columns share each packed row block (N <= 512: a small model's
     * products), where packing it cost more than it saved; measured slower on GPT-2's wider ones */
    job j = {ta, tb, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C, ws,
             fb > (size_t)N ? N : (int)fb, uk->fn, ta || N > 512 ? NULL : uk->rows, uk->mr, uk->nr};
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
    return gemm_with(&kernels[mw_kernel_current()], 1, ta, tb, M, N, K, alpha, A, lda, B, ldb,
                     beta, C, ldc, ws, ws_floats, nthreads);
}

int mw_gemm_kernel(int kernel, int packed_only, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, long lda, const float *B, long ldb, float beta, float *C,
                   long ldc, float *ws, size_t ws_floats, int nthreads) {
    if (kernel < 0 || kernel >= MW_KERNEL_COUNT || !kernels[kernel].fn ||
        !mw_kernel_id_supported((mw_kernel_id)kernel))
        return -1;
    return gemm_with(&kernels[kernel], !packed_only, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
                     C, ldc, ws, ws_floats, nthreads);
}

int mw_gemm_ws_run(const mw_gemm_ws *ws, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, long lda, const float *B, long ldb, float beta, float *C,
                   long ldc) {
    return mw_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws->buf, ws->floats,
                   ws->nthreads);
}
