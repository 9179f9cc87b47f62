/* The AVX2 + FMA GEMM micro-kernel, 6 x 16 (see gemm_kernels.h for its contract): twelve 8-lane
 * accumulators, two loads of b and six broadcasts of a per k, 15 of the 16 ymm registers. a is
 * packed (element (r, k) at a[k * MR + r]) or read in place from A (a[r * lda + k]).
 * Compiled for AVX2 + FMA whatever the build's baseline; gemm.c calls it only on a CPU that has
 * them. Edge tiles (fewer rows or columns) go through a full tile on the stack: the same fma
 * chains, so the same bits. */
#include "gemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define MR MW_AVX2_MR
#define NR MW_AVX2_NR
#define TARGET __attribute__((target("avx2,fma")))

/* twelve named accumulators (an array of them is spilled to the stack by gcc 12 every k) */
#define EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5)

static inline __attribute__((always_inline)) TARGET void
full(int kc, const float *a, long rs, long cs, const float *b, float *c, long ldc, int load,
     int scale, float alpha) {
#define DECL(r) __m256 c##r##0, c##r##1;
    EACH_ROW(DECL)
#undef DECL
    if (load) {
#define LOAD(r) c##r##0 = _mm256_loadu_ps(c + r * ldc), c##r##1 = _mm256_loadu_ps(c + r * ldc + 8);
        EACH_ROW(LOAD)
#undef LOAD
    } else {
#define ZERO(r) c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
        EACH_ROW(ZERO)
#undef ZERO
    }
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++, a += cs, b += NR) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 ar;
#define FMA(r)                                                                                     \
    ar = _mm256_broadcast_ss(a + r * rs);                                                          \
    c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0);                                                    \
    c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1);
        EACH_ROW(FMA)
#undef FMA
    }
    if (scale) {
        const __m256 al = _mm256_set1_ps(alpha);
#define SCALE(r) c##r##0 = _mm256_mul_ps(c##r##0, al), c##r##1 = _mm256_mul_ps(c##r##1, al);
        EACH_ROW(SCALE)
#undef SCALE
    }
#define STORE(r) _mm256_storeu_ps(c + r * ldc, c##r##0), _mm256_storeu_ps(c + r * ldc + 8, c##r##1);
    EACH_ROW(STORE)
#undef STORE
}

/* one tile, edges through a full tile on the stack */
static inline __attribute__((always_inline)) TARGET void
tile(int mr, int nr, int kc, const float *a, long rs, long cs, const float *b, float *c, long ldc,
     int load, int scale, float alpha) {
    if (mr == MR && nr == NR) {
        full(kc, a, rs, cs, b, c, ldc, load, scale, alpha);
        return;
    }
    float t[MR * NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) t[r * NR + j] = load && r < mr && j < nr ? c[r * ldc + j] : 0.0f;
    full(kc, a, rs, cs, b, t, NR, load, scale, alpha);
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[r * ldc + j] = t[r * NR + j];
}

TARGET void mw_ukernel_avx2(int mr, int nr, int kc, const float *a, const float *b, float *c,
                            long ldc, int load, int scale, float alpha) {
    tile(mr, nr, kc, a, 1, MR, b, c, ldc, load, scale, alpha); /* packed: a[k * MR + r] */
}

TARGET void mw_ukernel_avx2_rows(int nr, int kc, const float *a, long lda, const float *b, float *c,
                                 long ldc, int load, int scale, float alpha) {
    tile(MR, nr, kc, a, lda, 1, b, c, ldc, load, scale, alpha); /* in place: a[r * lda + k] */
}
#endif
