/* ops.c's elementwise loops for AVX-512 (ops_avx512.h): compiled for AVX-512 whatever the build's
 * baseline; ops.c and gemm.c call them only where mw_ops_simd() says the CPU and kernel run them. */
#include "ops_avx512.h"

#include "isa.h"

int mw_ops_simd(void) {
    switch (mw_kernel_current()) {
    case MW_KERNEL_AVX512: return 1;
    case MW_KERNEL_AVX512BF16:
    case MW_KERNEL_AMX: return 2;
    default: return 0;
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "gelu_math.h"

#if defined(__clang__) /* clang takes no vector width in a target attribute */
#define T512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#else
#define T512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")))
#endif

/* the same expressions as ops.c's loops (gelu_math.h), vectorised 16 wide by the compiler */
T512 void mw_gelu_fwd_avx512(float *o, const float *x, long n) {
    for (long i = 0; i < n; i++) o[i] = gelu1(x[i]);
}

T512 void mw_gelu_bwd_avx512(float *o, const float *d, const float *x, long n) {
    for (long i = 0; i < n; i++) o[i] = d[i] * gelu_grad1(x[i]);
}

/* gemm.c's bf16_bits on 16 lanes: round to nearest even; zeros and denormals to a zero of their
 * sign; NaN kept quiet */
static inline T512 __m512i bf16_bits16(__m512i u) {
    const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 zero = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    r = _mm512_mask_and_epi32(r, zero, u, _mm512_set1_epi32((int)0x80000000u));
    return _mm512_srli_epi32(r, 16);
}

static inline uint16_t bits1(float f) { /* the scalar rule, for the tail */
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u & 0x80000000u) >> 16);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u | 0x00400000u) >> 16);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

T512 void mw_bf16_store_avx512(uint16_t *d, const float *s, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(d + i),
                            _mm512_cvtepi32_epi16(bf16_bits16(_mm512_loadu_si512(s + i))));
    for (; i < n; i++) d[i] = bits1(s[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void
mw_bf16_store_avx512bf16(uint16_t *d, const float *s, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + i + 16), _mm512_loadu_ps(s + i));
        _mm512_storeu_si512(d + i, (__m512i)h);
    }
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(d + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + i)));
    if (i < n) { /* the tail through a masked load: the same instruction's rounding */
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s + i));
        _mm256_mask_storeu_epi16(d + i, m, h);
    }
}

T512 void mw_bf16_load_avx512(float *d, const uint16_t *s, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
        _mm512_storeu_si512(d + i, _mm512_slli_epi32(w, 16));
    }
    for (; i < n; i++) {
        const uint32_t u = (uint32_t)s[i] << 16;
        __builtin_memcpy(d + i, &u, sizeof u);
    }
}
#endif
