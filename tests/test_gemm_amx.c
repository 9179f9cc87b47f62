/* The amx kernel's bfloat16 GEMM (src/kernels/cpu/gemm_amx.c, issue 36) against its contract:
 *  - within fp32 accumulation's error of the double-precision product of the rounded operands
 *    (the tiles' pairing of A's rows with B's columns, every transpose, edges, K off the tiles);
 *  - within bfloat16's error of the double-precision product of the operands themselves;
 *  - the same bits on 1, 2 and 3 threads and any workspace size, operands stored as bfloat16 or
 *    as floats, and K split at a multiple of 32 (beta 1 on the second call);
 *  - its own family: its bits are not the FMA kernels' (about a third of the outputs differ).
 * Skips, saying so, where the CPU has no AMX-BF16 or the operating system refuses its tiles. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/rng.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/cpu/isa.h"
#include "check.h"
#include "memwall.h"

static uint64_t rng = 36;
static float *frand(size_t n, double scale) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(mw_rng_normal(&rng) * scale);
    return x;
}
#define AT(A, ta, lda, i, k) ((ta) ? (A)[(long)(k) * (lda) + (i)] : (A)[(long)(i) * (lda) + (k)])

static int amx(int ta, int tb, int M, int N, int K, float alpha, const void *A, int a16, long lda,
               const void *B, int b16, long ldb, float beta, float *C, long ldc, float *ws,
               size_t wsf, int nt) {
    return mw_gemm_bf16_kernel(MW_KERNEL_AMX, ta, tb, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta,
                               C, ldc, ws, wsf, nt);
}

static long ncases, ndiffer, nout;

static void one_case(int ta, int tb, int M, int N, int K, float alpha, float beta) {
    const long lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    const long arows = ta ? K : M, brows = tb ? N : K;
    float *A = frand((size_t)arows * lda, 1), *B = frand((size_t)brows * ldb, 1);
    float *C0 = frand((size_t)M * ldc, 1), *C = malloc(sizeof(float) * M * ldc);
    float *R = malloc(sizeof(float) * M * ldc);
    const size_t big = mw_gemm_ws_floats(3, 4096), small = mw_gemm_ws_floats(1, 1);
    float *ws = malloc(sizeof(float) * big);
    memcpy(C, C0, sizeof(float) * M * ldc);
    CHECK(amx(ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, C, ldc, ws, small, 1) == 0,
          "amx refused %dx%dx%d", M, N, K);
    /* against double precision: the rounded operands' exact sum (fp32 accumulation's bound for
     * any order: K + 1 roundings of at most 2^-24 of the running magnitude), and the operands'
     * own (bfloat16's bound, as test_gemm_bf16) */
    double worst_acc = 0, worst_bf = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0, s0 = 0, mag0 = 0;
            for (int k = 0; k < K; k++) {
                const double p = (double)mw_bf16_round(AT(A, ta, lda, i, k)) * mw_bf16_round(AT(B, tb, ldb, k, j));
                const double p0 = (double)AT(A, ta, lda, i, k) * AT(B, tb, ldb, k, j);
                s += p, mag += fabs(p), s0 += p0, mag0 += fabs(p0);
            }
            const double c0 = beta != 0.0f ? C0[(long)i * ldc + j] : 0.0;
            const double got = C[(long)i * ldc + j];
            const double e = fabs(got - alpha * (s + c0)) / (fabs(alpha) * (mag + fabs(c0)) + 1e-30);
            const double e0 = fabs(got - alpha * (s0 + c0)) / (fabs(alpha) * (mag0 + fabs(c0)) + 1e-30);
            worst_acc = e > worst_acc ? e : worst_acc;
            worst_bf = e0 > worst_bf ? e0 : worst_bf;
        }
    CHECK(worst_acc <= (K + 2) * 0x1p-24, "%c%c %dx%dx%d alpha %g beta %g: error %.3g beyond fp32 accumulation's %.3g",
          "NT"[ta], "NT"[tb], M, N, K, alpha, beta, worst_acc, (K + 2) * 0x1p-24);
    CHECK(worst_bf < 8e-3, "%c%c %dx%dx%d: error %.3g beyond bfloat16's", "NT"[ta], "NT"[tb], M, N, K, worst_bf);
    /* the same bits: threads, workspace sizes, bfloat16 operands */
    const struct { size_t ws; int nt; } v[] = {{big, 3}, {mw_gemm_ws_floats(2, 40), 2}, {big, 2}};
    for (size_t t = 0; t < sizeof v / sizeof v[0]; t++) {
        memcpy(R, C0, sizeof(float) * M * ldc);
        const int rc = amx(ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, R, ldc, ws, v[t].ws, v[t].nt);
        CHECK(rc == 0 && !memcmp(R, C, sizeof(float) * M * ldc), "%c%c %dx%dx%d: %d threads, %zu floats of workspace: other bits",
              "NT"[ta], "NT"[tb], M, N, K, v[t].nt, v[t].ws);
    }
    uint16_t *A16 = malloc(2 * ((size_t)arows * lda + 1)), *B16 = malloc(2 * ((size_t)brows * ldb + 1));
    mw_bf16_store(A16, A, (size_t)arows * lda);
    mw_bf16_store(B16, B, (size_t)brows * ldb);
    for (int st = 1; st < 4; st++) {
        const int a16 = st & 1, b16 = st >> 1;
        memcpy(R, C0, sizeof(float) * M * ldc);
        const int rc = amx(ta, tb, M, N, K, alpha, a16 ? (const void *)A16 : A, a16, lda, b16 ? (const void *)B16 : B, b16,
                           ldb, beta, R, ldc, ws, big, 2);
        CHECK(rc == 0 && !memcmp(R, C, sizeof(float) * M * ldc), "%c%c %dx%dx%d: A%s B%s as bfloat16: other bits",
              "NT"[ta], "NT"[tb], M, N, K, a16 ? "" : " not", b16 ? "" : " not");
    }
    /* its own family: count the outputs that differ from the FMA kernels' */
    memcpy(R, C0, sizeof(float) * M * ldc);
    CHECK(mw_gemm_bf16_kernel(mw_kernel_current(), ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, R, ldc, ws, big, 2) == 0,
          "the FMA kernel");
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++, nout++) ndiffer += memcmp(&R[(long)i * ldc + j], &C[(long)i * ldc + j], 4) != 0;
    ncases++;
    free(A), free(B), free(C0), free(C), free(R), free(ws), free(A16), free(B16);
}

static void split_k(int M, int N, int K, int K1) {
    float *A = frand((size_t)K * M, 1), *B = frand((size_t)K * N, 1);
    float *C1 = calloc((size_t)M * N, sizeof(float)), *C2 = calloc((size_t)M * N, sizeof(float));
    const size_t n = mw_gemm_ws_floats(2, 100);
    float *ws = malloc(sizeof(float) * n);
    amx(1, 0, M, N, K, 1.0f, A, 0, M, B, 0, N, 0.0f, C1, N, ws, n, 2);
    amx(1, 0, M, N, K1, 1.0f, A, 0, M, B, 0, N, 0.0f, C2, N, ws, n, 2);
    amx(1, 0, M, N, K - K1, 1.0f, A + (long)K1 * M, 0, M, B + (long)K1 * N, 0, N, 1.0f, C2, N, ws, n, 1);
    CHECK(!memcmp(C1, C2, sizeof(float) * M * N), "amx split at k=%d of %d: two calls changed the bits", K1, K);
    free(A), free(B), free(C1), free(C2), free(ws);
}

int main(void) {
    if (!mw_kernel_id_supported(MW_KERNEL_AMX)) {
        printf("test_gemm_amx: skipped: this CPU has no AMX-BF16, or the operating system refused its tiles "
               "(this CPU runs %s): the amx kernel is not compared with the hardware here\n", mw_kernels_available());
        return 0;
    }
    const int sizes[][3] = {{1, 1, 1},    {1, 50, 300}, {5, 7, 3},   {32, 32, 32},  {33, 31, 33},
                            {37, 65, 601}, {130, 97, 64}, {3, 300, 17}, {64, 64, 0}, {250, 70, 259}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                one_case(ta, tb, M, N, K, 1.0f, (ta + tb + (int)s) & 1 ? 1.0f : 0.0f);
                if (ta == tb) one_case(ta, tb, M, N, K, 0.125f, 0.0f);
            }
    split_k(29, 70, 700, 256);
    split_k(29, 70, 700, 320);
    split_k(40, 33, 1001, 32);
    printf("gemm_amx: %ld cases; %ld of %ld outputs (%.1f%%) differ from the FMA family's bits\n", ncases, ndiffer,
           nout, 100.0 * (double)ndiffer / (double)nout);
    CHECK(ndiffer > 0, "amx gave the FMA family's bits everywhere: did the products run on the tiles?");
    if (check_failures) {
        fprintf(stderr, "test_gemm_amx: %d failures\n", check_failures);
        return 1;
    }
    printf("test_gemm_amx: all passed\n");
    return 0;
}
