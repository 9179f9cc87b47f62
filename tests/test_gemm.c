/* memwall's GEMM (src/kernels/cpu/gemm.c) against a double-precision product and against its own
 * arithmetic contract:
 *  - every transpose combination, sizes off the 12 x 32 tile and across the 256-deep block, with
 *    alpha, beta 0 and 1, leading dimensions larger than the matrix: relative error vs double;
 *  - the same bits on 1, 2 and 3 threads, with the smallest workspace and a large one, from every
 *    micro-kernel this CPU can run (portable, avx2, avx512, neon), through the matrix-vector path for
 *    M = 1 and through packing;
 *  - each element one fma chain in k order: a product over K computed as K1 rows then K - K1 rows
 *    with beta 1 equals the product in one call, bit for bit; and a 1 x 1 x K product equals a
 *    scalar fmaf loop;
 *  - bad arguments return -1 and leave C alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/rng.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/cpu/isa.h"
#include "memwall.h"
#include "check.h"

static uint64_t rng = 7;
static long ncompared; /* bitwise comparisons made, printed at the end */
static float *frand(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)mw_rng_normal(&rng);
    return x;
}

/* element (i, k) of op(A) and (k, j) of op(B) */
#define AT(A, ta, lda, i, k) ((ta) ? (A)[(long)(k) * (lda) + (i)] : (A)[(long)(i) * (lda) + (k)])

static void one_case(int ta, int tb, int M, int N, int K, float alpha, float beta) {
    const long lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    const long arows = ta ? K : M, brows = tb ? N : K;
    float *A = frand((size_t)arows * lda), *B = frand((size_t)brows * ldb);
    float *C0 = frand((size_t)M * ldc), *C = malloc(sizeof(float) * M * ldc);
    float *Cr = malloc(sizeof(float) * M * ldc);
    memcpy(C, C0, sizeof(float) * M * ldc);
    size_t big = mw_gemm_ws_floats(3, 4096), small = mw_gemm_ws_floats(1, 1);
    float *ws = malloc(sizeof(float) * big);
    CHECK(mw_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ws, big, 2) == 0,
          "gemm refused a valid call");
    double worst = 0, scale = 1e-30;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)AT(A, ta, lda, i, k) * AT(B, tb, ldb, k, j);
                s += p;
                mag += fabs(p);
            }
            double ref = alpha * s + (beta != 0.0f ? C0[(long)i * ldc + j] : 0.0);
            double e = fabs(C[(long)i * ldc + j] - ref) / (fabs(alpha) * mag + fabs(ref) + 1e-30);
            worst = e > worst ? e : worst;
            scale = mag > scale ? mag : scale;
        }
    /* fp32 dot products of K terms: error grows like K * 2^-24 in the worst case */
    CHECK(worst < 4e-7 * (K > 16 ? K / 16.0 : 1.0), "%c%c %dx%dx%d alpha %g beta %g: rel err %.3g",
          "NT"[ta], "NT"[tb], M, N, K, alpha, beta, worst);
    /* columns past N in each row (the ldc padding) are untouched */
    for (int i = 0; i < M; i++)
        for (long j = N; j < ldc; j++)
            CHECK(C[i * ldc + j] == C0[i * ldc + j], "gemm wrote past column N");
    /* the same bits on other thread counts, workspace sizes, kernels and paths: mw_gemm as
     * selected, then every kernel this CPU runs, through the M = 1 path and packed only */
    const struct { size_t ws; int nt, kernel, packed_only; } v[] = {
        {small, 1, -1, 0}, {big, 3, -1, 0}, {small, 1, 0, 0}, {big, 3, 0, 1},
        {mw_gemm_ws_floats(2, 40), 2, 0, 1}, {big, 2, 0, 0}};
    for (int kern = 0; kern < MW_KERNEL_COUNT; kern++) {
        if (!mw_kernel_id_supported((mw_kernel_id)kern)) continue;
        for (size_t t = 0; t < sizeof v / sizeof v[0]; t++) {
            if (v[t].kernel < 0 && kern > 0) continue; /* mw_gemm's own rows: once */
            memcpy(Cr, C0, sizeof(float) * M * ldc);
            size_t need = v[t].ws;
            if (v[t].nt > 1 && need < mw_gemm_ws_floats(v[t].nt, 1))
                need = mw_gemm_ws_floats(v[t].nt, 1);
            int rc = v[t].kernel < 0
                         ? mw_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cr, ldc, ws, need,
                                   v[t].nt)
                         : mw_gemm_kernel(kern, v[t].packed_only, ta, tb, M, N, K, alpha, A, lda,
                                          B, ldb, beta, Cr, ldc, ws, need, v[t].nt);
            CHECK(rc == 0 && memcmp(Cr, C, sizeof(float) * M * ldc) == 0,
                  "%c%c %dx%dx%d: %s kernel%s, %d threads, %zu ws floats: bits differ", "NT"[ta],
                  "NT"[tb], M, N, K,
                  v[t].kernel < 0 ? mw_kernel_get() : mw_kernel_id_name((mw_kernel_id)kern),
                  v[t].packed_only ? " (packed only)" : "", v[t].nt, need);
            ncompared++;
        }
    }
    free(A), free(B), free(C0), free(C), free(Cr), free(ws);
}

/* C = A B over K rows equals C = A B over K1 rows, then C += over the rest, bit for bit */
static void split_k(int M, int N, int K, int K1) {
    float *A = frand((size_t)K * M), *B = frand((size_t)K * N); /* A^T (K x M), B (K x N) */
    float *C1 = calloc((size_t)M * N, sizeof(float)), *C2 = calloc((size_t)M * N, sizeof(float));
    size_t n = mw_gemm_ws_floats(2, 100);
    float *ws = malloc(sizeof(float) * n);
    mw_gemm(1, 0, M, N, K, 1.0f, A, M, B, N, 0.0f, C1, N, ws, n, 2);
    mw_gemm(1, 0, M, N, K1, 1.0f, A, M, B, N, 0.0f, C2, N, ws, n, 2);
    mw_gemm(1, 0, M, N, K - K1, 1.0f, A + (long)K1 * M, M, B + (long)K1 * N, N, 1.0f, C2, N, ws,
            n, 1);
    CHECK(memcmp(C1, C2, sizeof(float) * M * N) == 0,
          "split at k=%d of %d: accumulating in two calls changed the bits", K1, K);
    /* element (0, 0) is the scalar fma chain */
    float s = 0.0f;
    for (int k = 0; k < K; k++) s = fmaf(A[(long)k * M], B[(long)k * N], s);
    CHECK(C1[0] == s, "element (0,0) %.9g is not the in-order fma chain %.9g", C1[0], s);
    free(A), free(B), free(C1), free(C2), free(ws);
}

int main(void) {
    CHECK(mw_kernel_set(NULL) == MW_OK, "%s", mw_last_error());
    printf("gemm: %s kernel in use; this CPU runs %s; depth block %d\n", mw_kernel_get(),
           mw_kernels_available(), MW_GEMM_KC);
    const int sizes[][3] = {{1, 1, 1},   {1, 50, 300}, {5, 7, 3},    {12, 32, 256}, {13, 33, 257},
                            {37, 65, 600}, {130, 97, 64}, {250, 40, 513}, {3, 300, 17}, {64, 64, 0},
                            {1, 1100, 700}, {6, 16, 256}, {7, 17, 300}, {18, 48, 40}, {29, 530, 270}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                one_case(ta, tb, M, N, K, 1.0f, 0.0f);
                one_case(ta, tb, M, N, K, 1.0f, 1.0f);
                one_case(ta, tb, M, N, K, 0.125f, 0.0f);
            }
    split_k(29, 70, 700, 256);
    split_k(29, 70, 700, 301);
    split_k(40, 33, 1000, 999);

    /* bad arguments: -1, C untouched */
    float a[4] = {1, 2, 3, 4}, c[4] = {9, 9, 9, 9}, ws[1];
    size_t n = mw_gemm_ws_floats(1, 1);
    float *w = malloc(sizeof(float) * n);
    CHECK(mw_gemm(0, 0, 2, 2, 2, 1.0f, a, 2, a, 2, 0.5f, c, 2, w, n, 1) == -1, "beta 0.5 accepted");
    CHECK(mw_gemm(0, 0, 2, 2, 2, 2.0f, a, 2, a, 2, 1.0f, c, 2, w, n, 1) == -1,
          "alpha 2 with beta 1 accepted");
    CHECK(mw_gemm(0, 0, 2, 2, 2, 1.0f, a, 2, a, 2, 0.0f, c, 2, ws, 1, 1) == -1,
          "a one-float workspace accepted");
    CHECK(mw_gemm(0, 0, 2, 2, 2, 1.0f, a, 2, a, 2, 0.0f, c, 2, w, n, 2) == -1,
          "a one-thread workspace accepted for two threads");
    CHECK(c[0] == 9 && c[3] == 9, "a refused call wrote C");
    free(w);

    /* selection: by name, refusing unknown names and kernels this CPU lacks, changing nothing */
    const char *before = mw_kernel_get();
    CHECK(mw_kernel_set("sse9") == MW_ERR_ARG && strstr(mw_last_error(), "sse9"),
          "an unknown kernel name was accepted");
    CHECK(strcmp(mw_kernel_get(), before) == 0, "a refused mw_kernel_set changed the kernel");
    for (int k = 0; k < MW_KERNEL_COUNT; k++) {
        const char *name = mw_kernel_id_name((mw_kernel_id)k);
        if (mw_kernel_id_supported((mw_kernel_id)k)) {
            CHECK(mw_kernel_set(name) == MW_OK && strcmp(mw_kernel_get(), name) == 0,
                  "kernel %s: supported but not selectable", name);
        } else {
            CHECK(mw_kernel_set(name) == MW_ERR_ARG && strstr(mw_last_error(), "cannot run"),
                  "kernel %s: this CPU lacks it, yet selecting it did not fail clearly", name);
        }
    }
    CHECK(mw_kernel_set("auto") == MW_OK, "auto refused");
    printf("gemm: %ld bitwise comparisons across kernels, threads and paths\n", ncompared);
    if (check_failures) {
        fprintf(stderr, "test_gemm: %d failures\n", check_failures);
        return 1;
    }
    printf("test_gemm: all passed\n");
    return 0;
}
