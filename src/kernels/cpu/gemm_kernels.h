/* GEMM micro-kernels (internal to gemm.c, its per-instruction-set files, and isa.c, which times some of them).
 *
 * A micro-kernel computes one tile of C, mr x nr of the kernel's MR x NR (mr <= MR, nr <= NR),
 * from packed panels: a[k * MR + r], b[k * NR + j] for k < kc (rows and columns past mr, nr are
 * zeros in the panels). Each element is
 *     c = (load ? c : 0); for k in 0..kc-1: c = fma(a[k][r], b[k][j], c); if (scale) c *= alpha
 * exactly: no other order, no other rounding. That is what makes every kernel the same bits. */
#ifndef MW_GEMM_KERNELS_H
#define MW_GEMM_KERNELS_H

typedef void (*mw_ukernel_fn)(int mr, int nr, int kc, const float *a, const float *b, float *c,
                              long ldc, int load, int scale, float alpha);

/* The same contract for a full MR-row tile whose a is read in place from A (not transposed):
 * row r, element k at a[r * lda + k]. Skips packing A, which for short depths (a small model's
 * 128) cost as much as a tenth of the products. NULL where a kernel has none. */
typedef void (*mw_ukernel_rows_fn)(int nr, int kc, const float *a, long lda, const float *b,
                                   float *c, long ldc, int load, int scale, float alpha);

typedef struct mw_ukernel {
    int mr, nr; /* the tile, and the panels' row and column strides */
    mw_ukernel_fn fn;
    mw_ukernel_rows_fn rows; /* or NULL */
    /* bfloat16 products (mw_gemm_bf16) on panels of pairs, kc counting pairs (gemm_avx512.c);
     * NULL: fn runs them on rounded fp32 panels with the pairs swapped, the same bits */
    mw_ukernel_fn bf16;
} mw_ukernel;

#if defined(__x86_64__)
/* 6 x 16: twelve 8-lane accumulators (gemm_avx2.c) */
#define MW_AVX2_MR 6
#define MW_AVX2_NR 16
void mw_ukernel_avx2(int mr, int nr, int kc, const float *a, const float *b, float *c, long ldc,
                     int load, int scale, float alpha);
void mw_ukernel_avx2_rows(int nr, int kc, const float *a, long lda, const float *b, float *c,
                          long ldc, int load, int scale, float alpha);
/* 12 x 32: twenty-four 16-lane accumulators (gemm_avx512.c) */
#define MW_AVX512_MR 12
#define MW_AVX512_NR 32
void mw_ukernel_avx512(int mr, int nr, int kc, const float *a, const float *b, float *c, long ldc,
                       int load, int scale, float alpha);
void mw_ukernel_avx512_rows(int nr, int kc, const float *a, long lda, const float *b, float *c,
                            long ldc, int load, int scale, float alpha);
/* 12 x 32 with vdpbf16ps (AVX512_BF16), for bfloat16 products only: the avx512bf16 kernel runs
 * mw_ukernel_avx512 for fp32 ones */
void mw_ukernel_avx512bf16(int mr, int nr, int kc, const float *a, const float *b, float *c,
                           long ldc, int load, int scale, float alpha);
/* AMX (gemm_amx.c, its own contract: gemm_amx.h): the calling thread's tile configuration (eight
 * 16 x 64-byte tiles) and its release; one 32 x 32 block of C, c = (load ? c : 0) + the products
 * over nq tiles of 32 of depth, from a (32 rows of bfloat16, row stride kp elements, tile q at
 * a + 32q) and two 16-column panels b0, b1 ([kp / 2][16][2] bfloat16). isa.c times it. */
#include <stdint.h>
void mw_amx_tiles_begin(void);
void mw_amx_tiles_end(void);
void mw_ukernel_amx(const uint16_t *a, long kp, const uint16_t *b0, const uint16_t *b1, int nq,
                    float *c, long ldc, int load);
#endif
#if defined(__aarch64__)
/* 8 x 12: twenty-four 4-lane accumulators (gemm_neon.c); isa.c offers "neon" when this is set */
#define MW_HAVE_NEON_KERNEL 1
#define MW_NEON_MR 8
#define MW_NEON_NR 12
void mw_ukernel_neon(int mr, int nr, int kc, const float *a, const float *b, float *c, long ldc,
                     int load, int scale, float alpha);
#endif
#endif
