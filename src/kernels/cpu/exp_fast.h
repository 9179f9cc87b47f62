/* exp(x) in plain arithmetic the compiler vectorises (ops.c's softmaxes, vocab.c's loss). */
#ifndef MW_EXP_FAST_H
#define MW_EXP_FAST_H
#include <stdint.h>
#include <string.h>

/* exp(x) in plain arithmetic the compiler vectorises: x = n ln2 + r with a two-part ln2
 * (Cody-Waite), exp(r) by Taylor to degree 7 on |r| <= ln2/2, 2^n through the exponent bits.
 * Relative error about 2 ulp on [-87, 88]; below -87 it returns 0 (exp(-87) = 1.6e-38). */
static inline float exp_fast(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    /* 1.5 * 2^23: k = x/ln2 + shifter rounds x/ln2 to an integer n in k's low mantissa bits, with
     * no float->int conversion (gcc 12 would not vectorise one that follows a clamp) */
    const float shifter = 12582912.0f;
    float k = xc * 1.44269504088896341f + shifter, n = k - shifter;
    float r = xc - n * 0.693145751953125f; /* ln2 high part: 15 bits, n * it is exact */
    r = r - n * 1.42860682030941723e-6f;   /* ln2 low part */
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t kb, sb; /* unsigned: a NaN input (a diverged run) must not be undefined behaviour */
    memcpy(&kb, &k, sizeof kb);
    sb = (kb - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    return x < -87.0f ? 0.0f : p * scale;
}
#endif
