/* GELU's arithmetic, one element at a time, shared by ops.c (compiled for the build's baseline)
 * and ops_avx512.c (the same source compiled for AVX-512F): plain IEEE operations the compiler
 * vectorises, no fused multiply-adds (-ffp-contract=off), so every instruction set gives the same
 * bits. */
#ifndef MW_GELU_MATH_H
#define MW_GELU_MATH_H
#include "exp_fast.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one exponential, in plain arithmetic that the compiler vectorises (libm's tanhf
 * is a scalar call and was 9% of a GPT-2 step): tanh|u| = (1 - e) / (1 + e) with e = exp(-2|u|).
 * Absolute error below 2e-7 everywhere, which is what GELU needs: it uses 1+t and 1-t^2, never t
 * relative to itself. The scalar oracle is tanhf (tests/test_ops.c). */
static inline float tanh_fast(float u) {
    float au = u < 0 ? -u : u;
    au = au > 9.0f ? 9.0f : au; /* tanh(9) = 1 - 3e-8 */
    float e = exp_fast(-2.0f * au), th = (1.0f - e) / (1.0f + e);
    return u < 0 ? -th : th;
}

/* gelu(x), the tanh form */
static inline float gelu1(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh_fast(u));
}

/* d gelu(x) / dx */
static inline float gelu_grad1(float x) {
    const float u = GELU_K * (x + 0.044715f * x * x * x), th = tanh_fast(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 0.134145f * x * x);
}
#endif
