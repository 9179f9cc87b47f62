/* The running maximum of a row, as softmax and the loss take it, vectorised with the scalar
 * fold's bits (internal to the CPU kernels; tests/test_ops.c checks it against the fold).
 *
 * The fold: m = init; for j in 0..n-1: m = s[j] > m ? s[j] : m. A NaN element is never taken (a
 * NaN init stays); among equal values the first is kept. Equal non-zero floats have the same bits,
 * so any order of comparisons gives the fold's bits, except where the maximum is a zero (+0 and -0
 * compare equal): then the fold itself runs. vmaxps(a, b) is exactly a > b ? a : b, NaN giving b.
 * The scalar fold ran at the comparison's latency (4 cycles an element): the cross-entropy's
 * 50257 logits a row, the attention tiles' scores. */
#ifndef MW_ROWMAX_H
#define MW_ROWMAX_H

#if defined(__AVX2__)
#include <immintrin.h>
#endif

static inline float mw_rowmax_fold(const float *s, long n, float init) {
    float m = init;
    for (long j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

static inline float mw_rowmax(const float *s, long n, float init) {
#if defined(__AVX2__)
    if (n >= 32) {
        const __m256 i8 = _mm256_set1_ps(init);
        __m256 m0 = i8, m1 = i8, m2 = i8, m3 = i8; /* four chains: the latency hidden */
        long j = 0;
        for (; j + 32 <= n; j += 32) {
            m0 = _mm256_max_ps(_mm256_loadu_ps(s + j), m0);
            m1 = _mm256_max_ps(_mm256_loadu_ps(s + j + 8), m1);
            m2 = _mm256_max_ps(_mm256_loadu_ps(s + j + 16), m2);
            m3 = _mm256_max_ps(_mm256_loadu_ps(s + j + 24), m3);
        }
        const __m256 v = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
        float l[8];
        _mm256_storeu_ps(l, v);
        float m = mw_rowmax_fold(l, 8, init); /* init again: a NaN init stays */
        m = mw_rowmax_fold(s + j, n - j, m);
        return m == 0.0f ? mw_rowmax_fold(s, n, init) : m;
    }
#endif
    return mw_rowmax_fold(s, n, init);
}
#endif
