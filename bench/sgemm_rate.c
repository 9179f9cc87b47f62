/* memwall's GEMM beside OpenBLAS (the OpenMP build memwall used before it had its own), in one
 * process, same threads, rounds interleaved: median GFLOP/s of each.
 *   build/sgemm_rate [threads] [n]          one JSON line for an n x n x n product (NT, as the
 *                                           forward matmul), the machine's ceiling for bench/run.sh
 *   build/sgemm_rate [threads] --gpt2 [op]  a table over every large product of a GPT-2 124M
 *                                           step at B*T = 1024 (B=4 T=256 and B=1 T=1024 run the
 *                                           same ones), each with the beta the step calls it
 *                                           with, the LM head's over its 256-row loss quantum,
 *                                           then the attention tiles (one thread, as attention
 *                                           calls them); op: only the rows whose name starts
 *                                           with it (a profiler's run), with 5x the rounds
 *   build/sgemm_rate [threads] --smollm [op] the same over SmolLM-135M's products at B*T = 1024
 *                                           (C 576, q|k|v 960, the MLP's gate and up 1536 each
 *                                           as the step runs them, vocabulary 49152)
 * The workspace is what a plan gives the table's model (mw_gemm_plan_cols: packed blocks of B 768
 * columns wide for GPT-2, 576 for SmolLM; 512 for the square product); SGEMM_NC=n sets another.
 * SGEMM_CLOCK=cpu times the process's CPU time instead of the wall clock: at 1 thread, a rate that
 * time slices lost to other processes on a shared machine do not lower (cache sharing still may). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/cpu/gemm.h"
#include "memwall.h"
#include "timing.h"

#define ROUNDS 7

typedef struct {
    int ta, tb, M, N, K, one_thread;
    const char *what;
    float beta; /* 1: C accumulates (bias first, or a gradient), as the step calls it */
} shape;

static int rounds = ROUNDS, cpu_clock;
static int ws_nc = 512; /* the packed block's columns: mw_gemm_plan_cols for the table's model */

static double now(void) {
    if (!cpu_clock) return bench_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* medians of ROUNDS interleaved runs; worst relative difference between the two results */
static void measure(const shape *s, int threads, double *mw, double *ob, double *diff) {
    const long lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    float *A = malloc(sizeof(float) * s->M * s->K), *B = malloc(sizeof(float) * s->K * s->N);
    float *C1 = malloc(sizeof(float) * s->M * s->N), *C2 = malloc(sizeof(float) * s->M * s->N);
    for (long i = 0; i < (long)s->M * s->K; i++) A[i] = (float)((i * 7919) % 1000) / 1000.f - 0.5f;
    for (long i = 0; i < (long)s->K * s->N; i++) B[i] = (float)((i * 104729) % 1000) / 1000.f - 0.5f;
    const int nt = s->one_thread ? 1 : threads;
    const size_t wn = mw_gemm_ws_floats(nt, ws_nc); /* as the trainer's plan sizes it */
    /* 64-byte aligned, as the trainer's arena places it (malloc's 16 split every packed panel's
     * 64-byte loads across two cache lines: memwall measured several % below its training speed) */
    float *ws = aligned_alloc(64, (sizeof(float) * wn + 63) / 64 * 64);
    openblas_set_num_threads(nt);
    /* small products repeat inside one timing so that each timing is well above the clock's grain */
    const double fl = 2.0 * s->M * s->N * s->K;
    const int reps = fl < 1e8 ? (int)(1e8 / fl) + 1 : 1;
    double g1[5 * ROUNDS], g2[5 * ROUNDS];
    memset(C1, 0, sizeof(float) * s->M * s->N);
    memset(C2, 0, sizeof(float) * s->M * s->N);
    for (int r = -1; r < rounds; r++) { /* round -1 warms both up */
        double t0 = now();
        for (int i = 0; i < reps; i++)
            mw_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C1, s->N, ws, wn,
                    nt);
        double t1 = now();
        for (int i = 0; i < reps; i++)
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                        s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f, A, lda, B, ldb,
                        s->beta, C2, s->N);
        double t2 = now();
        if (r >= 0) g1[r] = fl * reps / (t1 - t0) / 1e9, g2[r] = fl * reps / (t2 - t1) / 1e9;
    }
    double d = 0;
    for (long i = 0; i < (long)s->M * s->N; i++) {
        double e = fabs(C1[i] - C2[i]) / (fabs(C2[i]) + 1.0);
        d = e > d ? e : d;
    }
    /* with beta 1 both accumulate the same number of products: the difference stays relative */
    *mw = bench_median(g1, rounds), *ob = bench_median(g2, rounds), *diff = d;
    free(A), free(B), free(C1), free(C2), free(ws);
}

int main(int argc, char **argv) {
    int threads = mw_set_threads(argc > 1 ? atoi(argv[1]) : 0);
    cpu_clock = getenv("SGEMM_CLOCK") && strcmp(getenv("SGEMM_CLOCK"), "cpu") == 0;

    if (mw_kernel_set(NULL) != MW_OK) { /* MEMWALL_KERNEL picks the kernel, as for memwall */
        fprintf(stderr, "sgemm_rate: %s\n", mw_last_error());
        return 2;
    }
    const int smollm = argc > 2 && strcmp(argv[2], "--smollm") == 0;
    if (argc > 2 && (strcmp(argv[2], "--gpt2") == 0 || smollm)) {
        /* every product of the step with more than one thread, then the attention tiles */
        const shape shapes[] = {
            {0, 1, 1024, 2304, 768, 0, "qkv fwd", 1},      {0, 1, 1024, 768, 768, 0, "attproj fwd", 1},
            {0, 1, 1024, 3072, 768, 0, "fc fwd", 1},       {0, 1, 1024, 768, 3072, 0, "fcproj fwd", 1},
            {0, 0, 1024, 768, 768, 0, "attproj dinp", 0},  {0, 0, 1024, 768, 3072, 0, "fcproj dinp", 0},
            {0, 0, 1024, 768, 2304, 0, "qkv dinp", 0},     {0, 0, 1024, 3072, 768, 0, "fc dinp", 0},
            {1, 0, 768, 768, 1024, 0, "attproj dw", 1},    {1, 0, 768, 3072, 1024, 0, "fcproj dw", 1},
            {1, 0, 3072, 768, 1024, 0, "fc dw", 1},        {1, 0, 2304, 768, 1024, 0, "qkv dw", 1},
            {0, 1, 256, 50257, 768, 0, "lmhead fwd", 0},   {0, 0, 256, 768, 50257, 0, "lmhead dinp", 0},
            {1, 0, 50257, 768, 256, 0, "lmhead dw", 1},    {0, 1, 128, 128, 64, 1, "attn q.k tile", 0},
            {0, 0, 128, 64, 128, 1, "attn p.v tile", 1},   {1, 0, 128, 64, 1024, 1, "attn dk strip", 0},
        };
        /* SmolLM-135M at B*T = 1024 (the Llama family's products: no biases; the attention
         * output and the down projection add into the residual, up's input gradient into gate's) */
        const shape smol[] = {
            {0, 1, 1024, 960, 576, 0, "qkv fwd", 0},       {0, 1, 1024, 576, 576, 0, "o fwd", 1},
            {0, 1, 1024, 1536, 576, 0, "gate/up fwd", 0},  {0, 1, 1024, 576, 1536, 0, "down fwd", 1},
            {0, 0, 1024, 576, 960, 0, "qkv dinp", 0},      {0, 0, 1024, 576, 576, 0, "o dinp", 0},
            {0, 0, 1024, 576, 1536, 0, "gate/up dinp", 1}, {0, 0, 1024, 1536, 576, 0, "down dinp", 0},
            {1, 0, 960, 576, 1024, 0, "qkv dw", 1},        {1, 0, 576, 576, 1024, 0, "o dw", 1},
            {1, 0, 1536, 576, 1024, 0, "gate/up dw", 1},   {1, 0, 576, 1536, 1024, 0, "down dw", 1},
            {0, 1, 256, 49152, 576, 0, "lmhead fwd", 0},   {0, 0, 256, 576, 49152, 0, "lmhead dinp", 0},
            {1, 0, 49152, 576, 256, 0, "lmhead dw", 1},
        };
        const shape *list = smollm ? smol : shapes;
        const size_t count = smollm ? sizeof smol / sizeof smol[0] : sizeof shapes / sizeof shapes[0];
        const char *only = argc > 3 ? argv[3] : NULL;
        ws_nc = mw_gemm_plan_cols(smollm ? 576 : 768, 0);
        if (getenv("SGEMM_NC")) ws_nc = atoi(getenv("SGEMM_NC"));
        if (only) rounds = 5 * ROUNDS;
        printf("kernel %s, %d threads (attention tiles: 1 thread), medians of %d interleaved "
               "rounds, %s time, packed blocks of B %d columns wide\n%-16s %-24s %9s %9s %7s %9s\n",
               mw_kernel_get(), threads, rounds, cpu_clock ? "CPU" : "wall", ws_nc, "op", "shape (MxNxK)", "memwall", "OpenBLAS",
               "ratio", "max diff");
        for (size_t i = 0; i < count; i++) {
            if (only && strncmp(list[i].what, only, strlen(only)) != 0) continue;
            double a, b, d;
            measure(&list[i], threads, &a, &b, &d);
            char sh[40];
            snprintf(sh, sizeof sh, "%c%c %dx%dx%d b%d", "NT"[list[i].ta], "NT"[list[i].tb],
                     list[i].M, list[i].N, list[i].K, (int)list[i].beta);
            printf("%-16s %-24s %9.1f %9.1f %6.2fx %9.1e\n", list[i].what, sh, a, b, a / b, d);
        }
        return 0;
    }
    const int n = argc > 2 ? atoi(argv[2]) : 2048;
    const shape sq = {0, 1, n, n, n, 0, "square", 0};
    if (getenv("SGEMM_NC")) ws_nc = atoi(getenv("SGEMM_NC"));
    double a, b, d;
    measure(&sq, threads, &a, &b, &d);
    printf("{\"sgemm_gflops\": %.1f, \"openblas_gflops\": %.1f, \"kernel\": \"%s\", \"n\": %d, "
           "\"threads\": %d}\n",
           a, b, mw_kernel_get(), n, threads);
    return 0;
}
