/* The aarch64 Advanced SIMD (NEON) GEMM micro-kernel, 8 x 12 (see gemm_kernels.h for its
 * contract): twenty-four 4-lane accumulators, three loads of b and two of a per k, 29 of the 32
 * vector registers. vfmaq_laneq_f32 is one fused multiply-add per lane (FMLA), so each element of
 * C is the same fma chain in k order as the portable kernel's fmaf: the same bits. Advanced SIMD
 * is part of the aarch64 base, so no target attribute and no run-time check. Edge tiles (fewer
 * rows or columns) go through a full tile on the stack: the same fma chains, so the same bits. */
#include "gemm_kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define MR MW_NEON_MR
#define NR MW_NEON_NR

/* twenty-four named accumulators: c<row><column quad> */
#define EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

static inline __attribute__((always_inline)) void
full(int kc, const float *a, const float *b, float *c, long ldc, int load, int scale, float alpha) {
#define DECL(r) float32x4_t c##r##0, c##r##1, c##r##2;
    EACH_ROW(DECL)
#undef DECL
    if (load) {
#define LOAD(r)                                                                                    \
    c##r##0 = vld1q_f32(c + r * ldc), c##r##1 = vld1q_f32(c + r * ldc + 4),                        \
    c##r##2 = vld1q_f32(c + r * ldc + 8);
        EACH_ROW(LOAD)
#undef LOAD
    } else {
#define ZERO(r) c##r##0 = vdupq_n_f32(0.0f), c##r##1 = c##r##0, c##r##2 = c##r##0;
        EACH_ROW(ZERO)
#undef ZERO
    }
    for (int k = 0; k < kc; k++, a += MR, b += NR) {
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
        /* row r's a is lane r % 4 of a0 (rows 0-3) or a1 (rows 4-7) */
#define FMA(r)                                                                                     \
    c##r##0 = vfmaq_laneq_f32(c##r##0, b0, (r) < 4 ? a0 : a1, (r) % 4);                            \
    c##r##1 = vfmaq_laneq_f32(c##r##1, b1, (r) < 4 ? a0 : a1, (r) % 4);                            \
    c##r##2 = vfmaq_laneq_f32(c##r##2, b2, (r) < 4 ? a0 : a1, (r) % 4);
        EACH_ROW(FMA)
#undef FMA
    }
    if (scale) {
#define SCALE(r)                                                                                   \
    c##r##0 = vmulq_n_f32(c##r##0, alpha), c##r##1 = vmulq_n_f32(c##r##1, alpha),                  \
    c##r##2 = vmulq_n_f32(c##r##2, alpha);
        EACH_ROW(SCALE)
#undef SCALE
    }
#define STORE(r)                                                                                   \
    vst1q_f32(c + r * ldc, c##r##0), vst1q_f32(c + r * ldc + 4, c##r##1),                          \
        vst1q_f32(c + r * ldc + 8, c##r##2);
    EACH_ROW(STORE)
#undef STORE
}

void mw_ukernel_neon(int mr, int nr, int kc, const float *a, const float *b, float *c, long ldc,
                     int load, int scale, float alpha) {
    if (mr == MR && nr == NR) {
        full(kc, a, b, c, ldc, load, scale, alpha);
        return;
    }
    float t[MR * NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) t[r * NR + j] = load && r < mr && j < nr ? c[r * ldc + j] : 0.0f;
    full(kc, a, b, t, NR, load, scale, alpha);
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[r * ldc + j] = t[r * NR + j];
}
#endif
