/* memwall's own single-precision GEMM, so that its packing buffers are memory the plan places
 * (workspace) instead of memory a BLAS library allocates behind the plan's back.
 *
 * C (M x N, row stride ldc) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C, row major;
 * op(A) = A (lda) or A^T when ta; op(B) likewise with tb. beta is 0 or 1; alpha != 1 needs beta 0.
 *
 * Every element of C is one chain of fused multiply-adds over k = 0..K-1 in order, started from
 * 0 (beta 0) or from C's value (beta 1), then multiplied by alpha. Blocking, thread count and
 * instruction set change none of that, so the result is the same bits on 1 or 16 threads, with
 * AVX-512 or without, and a product over K rows accumulated as two calls over K1 and K - K1 rows
 * (beta 1 on the second) is the same bits as one call over all K. */
#ifndef MW_GEMM_H
#define MW_GEMM_H
#include <stddef.h>

#define MW_GEMM_MR 12  /* rows of the portable kernel's register tile */
#define MW_GEMM_NR 32  /* its columns: the widest tile of any kernel (workspace sizes use it) */
#define MW_GEMM_KC 256 /* depth of one packed block */
#define MW_GEMM_MC 120 /* rows of one thread's packed block of A (a multiple of every kernel's MR) */

/* Workspace floats for nthreads threads and packed blocks of B up to nc columns wide (rounded up
 * to NR). Any size from mw_gemm_ws_floats(nthreads, 1) up works; wider blocks pack B less often. */
size_t mw_gemm_ws_floats(int nthreads, int nc);

/* 0, or -1 when beta/alpha are outside the rule above or ws is smaller than
 * mw_gemm_ws_floats(nthreads, 1). nthreads 1 runs in the calling thread (for callers that are
 * themselves threads of a parallel region, each with its own ws). */
int mw_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, long lda,
            const float *B, long ldb, float beta, float *C, long ldc, float *ws, size_t ws_floats,
            int nthreads);

/* The same with micro-kernel `kernel` (an mw_kernel_id, isa.h) whatever is selected, and with
 * packed_only also for M = 1 (which mw_gemm runs as a matrix-vector product without packing):
 * the tests' check that every kernel and path gives the same bits. -1 as well for a kernel this
 * build or CPU cannot run. */
int mw_gemm_kernel(int kernel, int packed_only, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, long lda, const float *B, long ldb, float beta, float *C,
                   long ldc, float *ws, size_t ws_floats, int nthreads);

/* A caller's view of one workspace: the buffer, its size, and the threads that share it. */
typedef struct mw_gemm_ws {
    float *buf;
    size_t floats;
    int nthreads;
} mw_gemm_ws;

/* mw_gemm with ws's buffer and threads */
int mw_gemm_ws_run(const mw_gemm_ws *ws, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, long lda, const float *B, long ldb, float beta, float *C,
                   long ldc);
#endif
