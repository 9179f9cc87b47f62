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
#include <stdint.h>

#define MW_GEMM_MR 12  /* rows of the portable kernel's register tile */
#define MW_GEMM_NR 32  /* its columns: the widest tile of any kernel (workspace sizes use it) */
#define MW_GEMM_KC 256 /* depth of one packed block */
#define MW_GEMM_MC 120 /* rows of one thread's packed block of A (a multiple of every kernel's MR) */

/* Workspace floats for nthreads threads and packed blocks of B up to nc columns wide (rounded up
 * to NR). Any size from mw_gemm_ws_floats(nthreads, 1) up works; wider blocks pack B less often. */
size_t mw_gemm_ws_floats(int nthreads, int nc);

/* The nc a model's plan gives mw_gemm_ws_floats, for a model of width n_embd: for fp32 products,
 * n_embd rounded up to 32 within 512..768 (GPT-2 124M 768, SmolLM-135M 576); for bfloat16 ones
 * (bf16 1) 512. A weight gradient (dW = X^T dY, A transposed) packs its A once per block of B, so
 * a block of all n_embd columns packs it once instead of twice (bench/README.md: 0.92-0.95x
 * OpenBLAS at 512, 0.97-1.09x at 768 on GPT-2's; 1024 measured no better than 768). */
int mw_gemm_plan_cols(int n_embd, int bf16);

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

/* The same product in bfloat16 (mixed precision): every element of op(A) and op(B) rounded to
 * bfloat16 (nearest even; denormals to zero), products accumulated in fp32 as vdpbf16ps does:
 * each element of C is one chain over pairs of the depth, c = fma(a[2p+1], b[2p+1], c) then
 * c = fma(a[2p], b[2p], c), with a zero pair past an odd K and denormals flushed, then times
 * alpha. The AVX512_BF16 kernel runs it with vdpbf16ps, every other kernel with fp32 fmas: the
 * same bits on any kernel and thread count, and K split at an even K1 (beta 1 on the second call)
 * is the same bits as one call. No matrix-vector shortcut: M = 1 is packed too. Same errors.
 * a16 (b16) 1: A (B) holds bfloat16, their bits as uint16_t (lda, ldb in elements); a value that
 * mw_bf16_store wrote gives the same bits as the float it rounded. */
int mw_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const void *A, int a16, long lda,
                 const void *B, int b16, long ldb, float beta, float *C, long ldc, float *ws,
                 size_t ws_floats, int nthreads);
/* mw_gemm_bf16 on micro-kernel `kernel` (-1 where it cannot run): the tests' check */
int mw_gemm_bf16_kernel(int kernel, int ta, int tb, int M, int N, int K, float alpha,
                        const void *A, int a16, long lda, const void *B, int b16, long ldb,
                        float beta, float *C, long ldc, float *ws, size_t ws_floats, int nthreads);
/* a bfloat16's bits as the float it is (exact) */
static inline float mw_bf16_widen(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
}
/* dst (n bfloat16 bits) = src rounded as mw_gemm_bf16 rounds; mw_bf16_load widens them back */
void mw_bf16_store(uint16_t *dst, const float *src, size_t n);
void mw_bf16_load(float *dst, const uint16_t *src, size_t n);
/* the same on the OpenMP threads, for long arrays outside a parallel region */
void mw_bf16_store_mt(uint16_t *dst, const float *src, size_t n);
void mw_bf16_load_mt(float *dst, const uint16_t *src, size_t n);
/* x rounded to bfloat16 as mw_gemm_bf16 rounds its operands, as an fp32 value */
float mw_bf16_round(float x);

/* A caller's view of one workspace: the buffer, its size, the threads that share it, and the
 * products' precision (bf16 1: mw_gemm_bf16). */
typedef struct mw_gemm_ws {
    float *buf;
    size_t floats;
    int nthreads;
    int bf16;
} mw_gemm_ws;

/* mw_gemm (or mw_gemm_bf16) with ws's buffer and threads */
int mw_gemm_ws_run(const mw_gemm_ws *ws, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, long lda, const float *B, long ldb, float beta, float *C,
                   long ldc);
/* the same with operands stored as bfloat16 (a16, b16; -1 unless ws->bf16) */
int mw_gemm_ws_run_x(const mw_gemm_ws *ws, int ta, int tb, int M, int N, int K, float alpha,
                     const void *A, int a16, long lda, const void *B, int b16, long ldb,
                     float beta, float *C, long ldc);
#endif
