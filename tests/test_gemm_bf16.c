/* memwall's bfloat16 GEMM (mw_gemm_bf16, src/kernels/cpu/gemm.c) against its arithmetic contract:
 *  - the rounding: nearest even, ties, denormals to signed zero, NaN kept quiet, infinities kept;
 *  - every element is the pair chain over the rounded operands (odd product first, a zero pair
 *    past an odd K), compared bit for bit with a scalar twin, for every transpose combination and
 *    sizes off the tiles, odd K and K across the 256-deep block, alpha, beta 0 and 1;
 *  - the same bits from every micro-kernel this CPU runs (the AVX512_BF16 one with vdpbf16ps, the
 *    others with fp32 fmas on swapped pairs), on 1, 2 and 3 threads, small and large workspaces;
 *  - denormal inputs and products: flushed alike by every kernel;
 *  - K split at an even K1 with beta 1 on the second call: the same bits as one call;
 *  - within bfloat16's error of the double-precision product;
 *  - the kernels' bfloat16 inputs and outputs (norms, GELU, SwiGLU, the bias gradient): the fp32
 *    kernel's results rounded, or its results on the widened inputs, bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "../src/core/rng.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/cpu/isa.h"
#include "../src/kernels/cpu/ops.h"
#include "memwall.h"
#include "check.h"

static uint64_t rng = 11;
static long ncompared;
static float *frand(size_t n, double scale) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(mw_rng_normal(&rng) * scale);
    return x;
}
static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define AT(A, ta, lda, i, k) ((ta) ? (A)[(long)(k) * (lda) + (i)] : (A)[(long)(i) * (lda) + (k)])

/* The scalar twin: flushing denormals as the kernels do (the test's own FTZ/DAZ on x86-64). */
static void twin(int ta, int tb, int M, int N, int K, float alpha, const float *A, long lda,
                 const float *B, long ldb, float beta, float *C, long ldc) {
#if defined(__x86_64__)
    const unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);
#elif defined(__aarch64__)
    unsigned long old;
    __asm__ volatile("mrs %0, fpcr" : "=r"(old));
    __asm__ volatile("msr fpcr, %0" : : "r"(old | (1ul << 24)));
#endif
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            volatile float c = beta != 0.0f ? C[(long)i * ldc + j] : 0.0f;
            for (int p = 0; p < (K + 1) / 2; p++) {
                const int k0 = 2 * p, k1 = 2 * p + 1;
                const float a1 = k1 < K ? mw_bf16_round(AT(A, ta, lda, i, k1)) : 0.0f;
                const float b1 = k1 < K ? mw_bf16_round(AT(B, tb, ldb, k1, j)) : 0.0f;
                c = fmaf(a1, b1, c);
                c = fmaf(mw_bf16_round(AT(A, ta, lda, i, k0)), mw_bf16_round(AT(B, tb, ldb, k0, j)), c);
            }
            C[(long)i * ldc + j] = alpha != 1.0f ? c * alpha : c;
        }
#if defined(__x86_64__)
    _mm_setcsr(old);
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(old));
#endif
}

static void one_case(int ta, int tb, int M, int N, int K, float alpha, float beta, double scale) {
    const long lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    const long arows = ta ? K : M, brows = tb ? N : K;
    float *A = frand((size_t)arows * lda, scale), *B = frand((size_t)brows * ldb, scale);
    float *C0 = frand((size_t)M * ldc, scale * scale), *T = malloc(sizeof(float) * M * ldc);
    float *Cr = malloc(sizeof(float) * M * ldc);
    memcpy(T, C0, sizeof(float) * M * ldc);
    twin(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, T, ldc);
    if (scale == 1.0) { /* within bfloat16's error of the exact product */
        double worst = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double p = (double)AT(A, ta, lda, i, k) * AT(B, tb, ldb, k, j);
                    s += p;
                    mag += fabs(p);
                }
                double ref = alpha * s + (beta != 0.0f ? C0[(long)i * ldc + j] : 0.0);
                double e = fabs(T[(long)i * ldc + j] - ref) / (fabs(alpha) * mag + fabs(ref) + 1e-30);
                worst = e > worst ? e : worst;
            }
        CHECK(worst < 8e-3, "%c%c %dx%dx%d: rel err %.3g beyond bfloat16's", "NT"[ta], "NT"[tb], M, N,
              K, worst);
    }
    size_t big = mw_gemm_ws_floats(3, 4096), small = mw_gemm_ws_floats(1, 1);
    float *ws = malloc(sizeof(float) * big);
    const struct { size_t ws; int nt; } v[] = {{small, 1}, {big, 3}, {mw_gemm_ws_floats(2, 40), 2}};
    for (int kern = -1; kern < MW_KERNEL_COUNT; kern++) {
        /* (amx is its own family: tests/test_gemm_amx.c) */
        if (kern >= 0 && (kern == MW_KERNEL_AMX || !mw_kernel_id_supported((mw_kernel_id)kern))) continue;
        for (size_t t = 0; t < sizeof v / sizeof v[0]; t++) {
            memcpy(Cr, C0, sizeof(float) * M * ldc);
            int rc = kern < 0 ? mw_gemm_bf16(ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, Cr,
                                             ldc, ws, v[t].ws, v[t].nt)
                              : mw_gemm_bf16_kernel(kern, ta, tb, M, N, K, alpha, A, 0, lda, B, 0,
                                                    ldb, beta, Cr, ldc, ws, v[t].ws, v[t].nt);
            int same = rc == 0 && memcmp(Cr, T, sizeof(float) * M * ldc) == 0;
            CHECK(same, "%c%c %dx%dx%d alpha %g beta %g scale %g: %s kernel, %d threads: not the twin's bits",
                  "NT"[ta], "NT"[tb], M, N, K, alpha, beta, scale,
                  kern < 0 ? mw_kernel_get_for(MW_PRECISION_BF16) : mw_kernel_id_name((mw_kernel_id)kern), v[t].nt);
            ncompared++;
        }
        /* operands stored as bfloat16 (either, both): the bits of the floats they round */
        uint16_t *A16 = malloc(2 * ((size_t)arows * lda + 1)), *B16 = malloc(2 * ((size_t)brows * ldb + 1));
        mw_bf16_store(A16, A, (size_t)arows * lda);
        mw_bf16_store(B16, B, (size_t)brows * ldb);
        for (int st = 1; st < 4; st++) {
            const int a16 = st & 1, b16 = st >> 1;
            memcpy(Cr, C0, sizeof(float) * M * ldc);
            const void *Ax = a16 ? (const void *)A16 : A, *Bx = b16 ? (const void *)B16 : B;
            int rc = kern < 0 ? mw_gemm_bf16(ta, tb, M, N, K, alpha, Ax, a16, lda, Bx, b16, ldb, beta, Cr,
                                             ldc, ws, big, 2)
                              : mw_gemm_bf16_kernel(kern, ta, tb, M, N, K, alpha, Ax, a16, lda, Bx, b16,
                                                    ldb, beta, Cr, ldc, ws, big, 2);
            CHECK(rc == 0 && memcmp(Cr, T, sizeof(float) * M * ldc) == 0,
                  "%c%c %dx%dx%d: %s kernel, A%s B%s stored as bfloat16: not the twin's bits", "NT"[ta],
                  "NT"[tb], M, N, K, kern < 0 ? mw_kernel_get_for(MW_PRECISION_BF16) : mw_kernel_id_name((mw_kernel_id)kern),
                  a16 ? "" : " not", b16 ? "" : " not");
            ncompared++;
        }
        free(A16), free(B16);
    }
    free(A), free(B), free(C0), free(T), free(Cr), free(ws);
}

static void split_k(int M, int N, int K, int K1) {
    float *A = frand((size_t)K * M, 1), *B = frand((size_t)K * N, 1);
    float *C1 = calloc((size_t)M * N, sizeof(float)), *C2 = calloc((size_t)M * N, sizeof(float));
    size_t n = mw_gemm_ws_floats(2, 100);
    float *ws = malloc(sizeof(float) * n);
    mw_gemm_bf16(1, 0, M, N, K, 1.0f, A, 0, M, B, 0, N, 0.0f, C1, N, ws, n, 2);
    mw_gemm_bf16(1, 0, M, N, K1, 1.0f, A, 0, M, B, 0, N, 0.0f, C2, N, ws, n, 2);
    mw_gemm_bf16(1, 0, M, N, K - K1, 1.0f, A + (long)K1 * M, 0, M, B + (long)K1 * N, 0, N, 1.0f, C2,
                 N, ws, n, 1);
    CHECK(memcmp(C1, C2, sizeof(float) * M * N) == 0,
          "bf16 split at k=%d of %d: accumulating in two calls changed the bits", K1, K);
    free(A), free(B), free(C1), free(C2), free(ws);
}

/* n floats rounded to bfloat16 (fresh) and widened back (fresh) */
static uint16_t *to16(const float *x, size_t n) {
    uint16_t *h = malloc(2 * (n + 1));
    mw_bf16_store(h, x, n);
    return h;
}
static float *widen(const uint16_t *h, size_t n) {
    float *x = malloc(sizeof(float) * (n + 1));
    mw_bf16_load(x, h, n);
    return x;
}
/* 1 when n bfloat16 h are the rounding of the n floats x */
static int rounded(const uint16_t *h, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (h[i] != bits(mw_bf16_round(x[i])) >> 16) return 0;
    return 1;
}

static void kernels_x(void) {
    const int N = 37, C = 300; /* rows, and a width off the 256-element pieces */
    const size_t n = (size_t)N * C;
    float *x = frand(n, 1.0), *w = frand(C, 1.0), *b = frand(C, 1.0), *d = frand(n, 1.0);
    float *y = malloc(sizeof(float) * n), *y2 = malloc(sizeof(float) * n), *s1 = malloc(8 * N), *s2 = malloc(8 * N);
    uint16_t *h = malloc(2 * n), *h2 = malloc(2 * n);
    uint16_t *x16 = to16(x, n);
    float *xw = widen(x16, n);
    /* norms: bfloat16 out = the fp32 kernel's out, rounded; the statistics the same */
    mw_layernorm_forward(y, s1, s1 + N, x, w, b, N, C);
    mw_layernorm_forward_x(h, 1, s2, s2 + N, x, w, b, N, C);
    CHECK(rounded(h, y, n) && !memcmp(s1, s2, 8 * N), "layernorm: bfloat16 out is not fp32's rounded");
    mw_rmsnorm_forward(y, s1, x, w, N, C, 1e-5f);
    mw_rmsnorm_forward_x(h, 1, s2, x, w, N, C, 1e-5f);
    CHECK(rounded(h, y, n) && !memcmp(s1, s2, 4 * N), "rmsnorm: bfloat16 out is not fp32's rounded");
    /* GELU: out16 = rounded; in16 = fp32 on the widened input; both */
    mw_gelu_forward(y, x, (long)n);
    mw_gelu_forward_x(h, 1, x, 0, (long)n);
    CHECK(rounded(h, y, n), "gelu: bfloat16 out is not fp32's rounded");
    mw_gelu_forward(y, xw, (long)n);
    mw_gelu_forward_x(y2, 0, x16, 1, (long)n);
    CHECK(!memcmp(y, y2, 4 * n), "gelu: bfloat16 in is not fp32 on the widened input");
    mw_gelu_forward_x(h, 1, x16, 1, (long)n);
    CHECK(rounded(h, y, n), "gelu: bfloat16 in and out");
    mw_gelu_backward(y, d, xw, (long)n);
    memcpy(h2, x16, 2 * n);
    mw_gelu_backward_x(h2, 1, d, h2, 1, (long)n); /* in place, as the model runs it */
    CHECK(rounded(h2, y, n), "gelu backward: bfloat16 in place is not fp32's rounded");
    /* SwiGLU (gate = x, up = d): forward and backward, in place */
    uint16_t *d16 = to16(d, n);
    float *dw = widen(d16, n), *gg = malloc(sizeof(float) * n), *uu = malloc(sizeof(float) * n);
    mw_swiglu_forward(y, xw, dw, (long)n);
    mw_swiglu_forward_x(h, 1, x16, d16, 1, (long)n);
    CHECK(rounded(h, y, n), "swiglu: bfloat16 in and out");
    float *g0 = frand(n, 1.0);
    mw_swiglu_backward(gg, uu, g0, xw, dw, (long)n);
    memcpy(h, x16, 2 * n), memcpy(h2, d16, 2 * n);
    mw_swiglu_backward_x(h, h2, 1, g0, h, h2, 1, (long)n);
    CHECK(rounded(h, gg, n) && rounded(h2, uu, n), "swiglu backward: bfloat16 in place is not fp32's rounded");
    /* the bias gradient of a bfloat16 d(out): the widened values' sums */
    float *db1 = calloc(C, sizeof(float)), *db2 = calloc(C, sizeof(float)), *dw1 = calloc((size_t)C * 8, 4), *dw2 = calloc((size_t)C * 8, 4);
    float *inp = frand((size_t)N * 8, 1.0);
    size_t wn = mw_gemm_ws_floats(2, 512);
    float *wsb = malloc(sizeof(float) * wn);
    mw_gemm_ws g = {wsb, wn, 2, 1};
    mw_matmul_backward_x(NULL, dw1, db1, dw, 0, inp, 0, w, N, 8, C, 0, &g);
    mw_matmul_backward_x(NULL, dw2, db2, d16, 1, inp, 0, w, N, 8, C, 0, &g);
    CHECK(!memcmp(db1, db2, 4 * C) && !memcmp(dw1, dw2, 4 * (size_t)C * 8),
          "matmul backward: a bfloat16 d(out) is not its widened floats");
    free(x), free(w), free(b), free(d), free(y), free(y2), free(s1), free(s2), free(h), free(h2), free(x16), free(xw);
    free(d16), free(dw), free(gg), free(uu), free(g0), free(db1), free(db2), free(dw1), free(dw2), free(inp), free(wsb);
}

int main(void) {
    CHECK(mw_kernel_set(NULL) == MW_OK, "%s", mw_last_error());
    /* this test is the FMA family's: where auto (or MEMWALL_KERNEL) would run bfloat16 products
     * on amx (tests/test_gemm_amx.c), the products in use run the FMA kernel of fp32 products */
    if (mw_kernel_current_bf16() == MW_KERNEL_AMX) {
        printf("gemm_bf16: bfloat16 products would run amx, the AMX family: checking the FMA family's %s instead\n",
               mw_kernel_id_name(mw_kernel_current() == MW_KERNEL_AMX ? MW_KERNEL_AVX512 : mw_kernel_current()));
        CHECK(mw_kernel_set(mw_kernel_id_name(mw_kernel_current() == MW_KERNEL_AMX ? MW_KERNEL_AVX512 : mw_kernel_current())) == MW_OK,
              "%s", mw_last_error());
    }
    printf("gemm_bf16: %s kernel in use; this CPU runs %s\n", mw_kernel_get_for(MW_PRECISION_BF16), mw_kernels_available());
    /* rounding */
    CHECK(mw_bf16_round(1.0f) == 1.0f, "1 is a bfloat16");
    CHECK(mw_bf16_round(fbits(0x3f808000u)) == 1.0f, "a tie rounds to the even 1.0");
    CHECK(bits(mw_bf16_round(fbits(0x3f818000u))) == 0x3f820000u, "a tie rounds to even, upwards");
    CHECK(bits(mw_bf16_round(fbits(0x3f808001u))) == 0x3f810000u, "above the tie rounds up");
    CHECK(bits(mw_bf16_round(fbits(0x00000001u))) == 0u, "a denormal becomes +0");
    CHECK(bits(mw_bf16_round(fbits(0x807fffffu))) == 0x80000000u, "a negative denormal becomes -0");
    CHECK(bits(mw_bf16_round(INFINITY)) == 0x7f800000u, "inf stays inf");
    CHECK(bits(mw_bf16_round(fbits(0x7f7fffffu))) == 0x7f800000u, "FLT_MAX rounds to inf");
    CHECK(isnan(mw_bf16_round(fbits(0x7f800001u))), "a signalling NaN stays a NaN");
    CHECK(bits(mw_bf16_round(fbits(0x7f800001u))) == 0x7fc00000u, "... quiet, its payload's top kept");

    /* mw_bf16_store: the rounding's bits, in and past the vector loop; mw_bf16_load widens */
    for (int n = 0; n < 70; n++) {
        float *x = frand((size_t)n, 1.0), *y = malloc(sizeof(float) * (n + 1));
        if (n > 3) x[3] = fbits(0x00000005u), x[1] = fbits(0x7fa00001u), x[2] = -INFINITY;
        uint16_t *h = malloc(2 * (size_t)(n + 1));
        mw_bf16_store(h, x, (size_t)n);
        mw_bf16_load(y, h, (size_t)n);
        for (int i = 0; i < n; i++)
            CHECK(h[i] == bits(mw_bf16_round(x[i])) >> 16 && bits(y[i]) == bits(mw_bf16_round(x[i])),
                  "mw_bf16_store/load of %d floats: element %d", n, i);
        free(x), free(y), free(h);
    }
    { /* a bfloat16 operand without bfloat16 products is refused */
        float a[4] = {1, 2, 3, 4}, c[4] = {0};
        uint16_t a16[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f80};
        size_t n = mw_gemm_ws_floats(1, 1);
        float *w = malloc(sizeof(float) * n);
        mw_gemm_ws g = {w, n, 1, 0};
        CHECK(mw_gemm_ws_run_x(&g, 0, 0, 2, 2, 2, 1.0f, a16, 1, 2, a, 0, 2, 0.0f, c, 2) == -1,
              "a bfloat16 operand in an fp32 product was accepted");
        g.bf16 = 1;
        CHECK(mw_gemm_ws_run_x(&g, 0, 0, 2, 2, 2, 1.0f, a16, 1, 2, a, 0, 2, 0.0f, c, 2) == 0 && c[0] == 4.0f &&
                  c[3] == 6.0f, "ones times a: got %g %g", c[0], c[3]);
        free(w);
    }
    const int sizes[][3] = {{1, 1, 1},    {1, 50, 300}, {5, 7, 3},     {12, 32, 256}, {13, 33, 257},
                            {37, 65, 601}, {130, 97, 64}, {3, 300, 17}, {64, 64, 0},  {7, 17, 255},
                            {18, 48, 40}, {25, 70, 513}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                one_case(ta, tb, M, N, K, 1.0f, 0.0f, 1.0);
                one_case(ta, tb, M, N, K, 1.0f, 1.0f, 1.0);
                one_case(ta, tb, M, N, K, 0.125f, 0.0f, 1.0);
            }
    /* near the bottom of the range: denormal operands, products and sums */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            one_case(ta, tb, 13, 35, 77, 1.0f, 0.0f, 1e-19);
            one_case(ta, tb, 13, 35, 77, 1.0f, 1.0f, 3e-20);
            one_case(ta, tb, 13, 35, 77, 1e-3f, 0.0f, 1e-18);
        }
    kernels_x();
    split_k(29, 70, 700, 256);
    split_k(29, 70, 700, 300);
    split_k(40, 33, 1001, 2);
    printf("gemm_bf16: %ld bitwise comparisons with the scalar twin across kernels and threads\n",
           ncompared);
    if (check_failures) {
        fprintf(stderr, "test_gemm_bf16: %d failures\n", check_failures);
        return 1;
    }
    printf("test_gemm_bf16: all passed\n");
    return 0;
}
