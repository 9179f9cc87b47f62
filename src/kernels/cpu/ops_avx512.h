/* Elementwise loops of ops.c compiled for AVX-512 (ops_avx512.c): GELU and the bfloat16
 * conversions, 16 lanes at a time. The same bits as the baseline's loops (the same IEEE
 * operations; vcvtneps2bf16 rounds as mw_bf16_store's rule, checked on every fp32 value by
 * tests/test_ops.c). Internal to src/kernels/cpu. */
#ifndef MW_OPS_AVX512_H
#define MW_OPS_AVX512_H
#include <stddef.h>
#include <stdint.h>

/* 0: the baseline's loops; 1: AVX-512F ones; 2: AVX-512F and vcvtneps2bf16 (AVX512_BF16). From
 * the kernel in use (isa.h): avx512 gives 1, avx512bf16 and amx 2 (--kernel avx2 or portable
 * keeps the baseline's loops, as on a CPU without AVX-512). */
int mw_ops_simd(void);

#if defined(__x86_64__)
/* o[i] = gelu(x[i]), i < n */
void mw_gelu_fwd_avx512(float *o, const float *x, long n);
/* o[i] = d[i] * gelu'(x[i]), i < n (o may be d) */
void mw_gelu_bwd_avx512(float *o, const float *d, const float *x, long n);
/* d[i] = s[i] rounded to bfloat16 (mw_bf16_store's rule), i < n: AVX-512F (integer rule) */
void mw_bf16_store_avx512(uint16_t *d, const float *s, size_t n);
/* the same with vcvtneps2bf16 (a CPU with AVX512_BF16 only) */
void mw_bf16_store_avx512bf16(uint16_t *d, const float *s, size_t n);
/* d[i] = s[i] widened (exact), i < n */
void mw_bf16_load_avx512(float *d, const uint16_t *s, size_t n);
#endif
#endif
