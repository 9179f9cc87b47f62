/* The amx kernel's bfloat16 GEMM (issue 36): mw_gemm_bf16's operands and rules on Intel AMX tiles
 * (tdpbf16ps), with its own numerics, the AMX family.
 *
 * Operands are rounded to bfloat16 as mw_gemm_bf16 rounds them (nearest even, denormals to zero,
 * NaN quiet; bfloat16 sources taken as they are). Each element of C accumulates in fp32 in a tile
 * register: started from 0 (beta 0) or from C (beta 1), then one tdpbf16ps per 32 values of the
 * depth, k = 0..31, 32..63, ... in order, zeros past K, C stored and reloaded (exact, fp32) every
 * MW_GEMM_KC of the depth, then times alpha. What tdpbf16ps does inside its 32 values is the
 * hardware's (bench/bf16_probe.c measures it; no fp32 fma chain reproduces it): the bits differ
 * from the FMA family's kernels, and are the same on any thread count and workspace size, because
 * threads and blocks split only M and N. K split at a multiple of 32 (beta 1 on the second call)
 * gives the same bits as one call.
 *
 * The workspace is mw_gemm's (mw_gemm_ws_floats): a thread's block of A as bfloat16 rows, and a
 * block of B packed as [K/2][N][2] bfloat16 in 16-column panels; no other memory. */
#ifndef MW_GEMM_AMX_H
#define MW_GEMM_AMX_H
#include <stddef.h>

/* The product with mw_gemm_bf16's arguments (already checked by the caller: beta 0 or 1, alpha 1
 * with beta 1, M, N, K > 0, ws of at least mw_gemm_ws_floats(nthreads, 1) floats) on a CPU where
 * mw_kernel_id_supported(MW_KERNEL_AMX) (isa.c: the tile data granted). 0, or -1 for a workspace
 * too small. nthreads 1 runs in the calling thread. */
int mw_gemm_amx(int ta, int tb, int M, int N, int K, float alpha, const void *A, int a16, long lda,
                const void *B, int b16, long ldb, float beta, float *C, long ldc, float *ws,
                size_t ws_floats, int nthreads);
#endif
