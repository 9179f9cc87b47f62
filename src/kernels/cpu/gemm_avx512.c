/* The AVX-512F GEMM micro-kernel, 12 x 32 (see gemm_kernels.h for its contract): twenty-four
 * 16-lane accumulators, two loads of b and twelve broadcasts of a per k, masked loads and stores
 * at the edges. Compiled for AVX-512F whatever the build's baseline; gemm.c calls it only on a CPU
 * that has it. */
#include "gemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define MR MW_AVX512_MR
#define NR MW_AVX512_NR
#define TARGET __attribute__((target("avx512f,avx2,fma")))

/* MRV rows (a constant in each instance below), two 16-lane vectors per row: 24 accumulators,
 * 2 loads of b and MRV broadcasts of a per k. */
/* The C tile's MRV rows in or out (two 16-lane vectors a row, masked past nr), shared by both
 * kernels: zeros or C's values in; times alpha when scale, out. */
static inline __attribute__((always_inline)) TARGET void
tile_in(const int MRV, int nr, const float *c, long ldc, int load, __m512 *c0, __m512 *c1) {
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    for (int r = 0; r < MRV; r++) {
        if (load) {
            c0[r] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
            c1[r] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
        } else {
            c0[r] = _mm512_setzero_ps();
            c1[r] = _mm512_setzero_ps();
        }
    }
}
static inline __attribute__((always_inline)) TARGET void
tile_out(const int MRV, int nr, float *c, long ldc, int scale, float alpha, __m512 *c0, __m512 *c1) {
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    const __m512 al = _mm512_set1_ps(alpha);
    for (int r = 0; r < MRV; r++) {
        if (scale) {
            c0[r] = _mm512_mul_ps(c0[r], al);
            c1[r] = _mm512_mul_ps(c1[r], al);
        }
        _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
    }
}

static inline __attribute__((always_inline)) TARGET void
rows(const int MRV, int nr, int kc, const float *a, long rs, long cs, const float *b, float *c,
     long ldc, int load, int scale, float alpha) {
    __m512 c0[MR], c1[MR];
    tile_in(MRV, nr, c, ldc, load, c0, c1);
#pragma GCC unroll 2
    for (int k = 0; k < kc; k++, a += cs, b += NR) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        for (int r = 0; r < MRV; r++) {
            const __m512 ar = _mm512_set1_ps(a[r * rs]);
            c0[r] = _mm512_fmadd_ps(ar, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(ar, b1, c1[r]);
        }
    }
    tile_out(MRV, nr, c, ldc, scale, alpha, c0, c1);
}

#define ROWS(n)                                                                                   \
    case n: rows(n, nr, kc, a, 1, MR, b, c, ldc, load, scale, alpha); break;

TARGET void mw_ukernel_avx512(int mr, int nr, int kc, const float *a, const float *b, float *c,
                              long ldc, int load, int scale, float alpha) {
    switch (mr) {
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6)
        ROWS(7) ROWS(8) ROWS(9) ROWS(10) ROWS(11) ROWS(12)
    default: break;
    }
}
#undef ROWS

/* a full MR-row tile with a read in place (a[r * lda + k]): gemm_kernels.h */
TARGET void mw_ukernel_avx512_rows(int nr, int kc, const float *a, long lda, const float *b,
                                   float *c, long ldc, int load, int scale, float alpha) {
    rows(MR, nr, kc, a, lda, 1, b, c, ldc, load, scale, alpha);
}

/* ---- the AVX512_BF16 kernel: vdpbf16ps on packed bfloat16 pairs ---------------------------------
 * Panels of pairs: a[p * MR + r] and b[p * NR + j] are 32-bit words holding (element 2p, element
 * 2p+1) of the depth as two bfloat16 (low half first); kc counts pairs. vdpbf16ps adds the odd
 * product, then the even one, each as one fused multiply-add with denormals flushed: exactly the
 * fma chain the other kernels run on the same rounded values with the pairs swapped (gemm.c). */
#define TARGET_BF16 __attribute__((target("avx512f,avx512bf16,avx2,fma")))

static inline __attribute__((always_inline)) TARGET_BF16 void
rows_bf16(const int MRV, int nr, int kc, const float *a, const float *b, float *c, long ldc,
          int load, int scale, float alpha) {
    __m512 c0[MR], c1[MR];
    tile_in(MRV, nr, c, ldc, load, c0, c1);
    const int *ai = (const int *)(const void *)a;
#pragma GCC unroll 2
    for (int k = 0; k < kc; k++, ai += MR, b += NR) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
        for (int r = 0; r < MRV; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_epi32(ai[r]);
            c0[r] = _mm512_dpbf16_ps(c0[r], ar, b0);
            c1[r] = _mm512_dpbf16_ps(c1[r], ar, b1);
        }
    }
    tile_out(MRV, nr, c, ldc, scale, alpha, c0, c1);
}

#define ROWS(n)                                                                                   \
    case n: rows_bf16(n, nr, kc, a, b, c, ldc, load, scale, alpha); break;

TARGET_BF16 void mw_ukernel_avx512bf16(int mr, int nr, int kc, const float *a, const float *b,
                                       float *c, long ldc, int load, int scale, float alpha) {
    switch (mr) {
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6)
        ROWS(7) ROWS(8) ROWS(9) ROWS(10) ROWS(11) ROWS(12)
    default: break;
    }
}
#undef ROWS
#endif
