/* The machine's sgemm ceiling through the same BLAS memwall links: median GFLOP/s of square
 * single-precision GEMMs. Usage: build/sgemm_rate [threads] [n]. Prints one JSON line. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "memwall.h"
#include "timing.h"

#define now bench_now

int main(int argc, char **argv) {
    int threads = mw_set_threads(argc > 1 ? atoi(argv[1]) : 0), n = argc > 2 ? atoi(argv[2]) : 2048;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c) return 1;
    for (long i = 0; i < (long)n * n; i++) a[i] = b[i] = c[i] = (float)(i % 7) * 0.1f;
    double g[7];
    for (int r = 0; r < 8; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        if (r > 0) g[r - 1] = 2.0 * n * n * n / (now() - t0) / 1e9;
    }
    printf("{\"sgemm_gflops\": %.1f, \"n\": %d, \"threads\": %d}\n", bench_median(g, 7), n, threads);
    free(a), free(b), free(c);
    return 0;
}
