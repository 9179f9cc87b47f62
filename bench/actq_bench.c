/* The activation quantiser's speed (issue 38; src/kernels/cpu/actq.h): mw_actq_quantize and
 * mw_actq_dequantize at 8, 4, 2 and 1 bits on N fp32 values of a normal distribution, at 1 and 2
 * threads, beside memcpy of the same N floats (a parallel copy at 2 threads) as the memory's own
 * rate. Rates are fp32 bytes (4 a value) per second: what the quantiser reads, what the
 * dequantiser writes. Each round times every kernel once, in turn, so that a load on the machine
 * falls on all of them alike; the figures are medians over --reps rounds.
 *   build/actq_bench [--values N] [--reps R] [--json]
 * Default N: 16 Mi values (64 MiB, past the caches). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/rng.h"
#include "../src/kernels/cpu/actq.h"
#include "../src/kernels/cpu/isa.h"
#include "memwall.h"
#include "timing.h"

#define NB 4
static const int BITS[NB] = {8, 4, 2, 1};
enum { K_COPY, K_Q, K_DQ = K_Q + NB, K_COUNT = K_DQ + NB };

static void *alloc_or_die(size_t n) {
    void *p;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) {
        fprintf(stderr, "actq_bench: out of memory for %zu bytes\n", n);
        exit(1);
    }
    memset(p, 0, n); /* touched: no page faults inside a timing */
    return p;
}

/* memcpy in 1 MiB pieces over the threads (one piece at a time on one thread) */
static void copy(float *dst, const float *src, size_t n) {
    const size_t piece = 1 << 18;
    const long pieces = (long)((n + piece - 1) / piece);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < pieces; p++) {
        const size_t lo = (size_t)p * piece, m = n - lo < piece ? n - lo : piece;
        memcpy(dst + lo, src + lo, m * sizeof(float));
    }
}

int main(int argc, char **argv) {
    size_t n = (size_t)16 << 20;
    int reps = 7, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--values") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "usage: build/actq_bench [--values N] [--reps R] [--json]\n");
            return 1;
        }
    }
    if (n < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "actq_bench: --values must be >= 1 and --reps in 1..1000\n");
        return 1;
    }
    float *x = alloc_or_die(n * sizeof(float)), *y = alloc_or_die(n * sizeof(float));
    unsigned char *d = alloc_or_die(mw_actq_bytes(n, 8));
    uint64_t s = 1;
    for (size_t i = 0; i < n; i++) x[i] = (float)mw_rng_normal(&s);

    static const int threads[2] = {1, 2};
    double rate[2][K_COUNT];
    double *t = malloc(sizeof(double) * (size_t)reps * K_COUNT);
    for (int ti = 0; ti < 2; ti++) {
        omp_set_num_threads(threads[ti]);
        for (int r = -1; r < reps; r++) /* round -1 warms up */
            for (int o = 0; o < K_COUNT; o++) {
                /* copy, q8, dq8, q4, dq4, ...: each dequantiser reads what its quantiser just wrote */
                const int k = o == 0 ? K_COPY : o % 2 ? K_Q + (o - 1) / 2 : K_DQ + (o - 1) / 2;
                const double t0 = bench_now();
                if (k == K_COPY)
                    copy(y, x, n);
                else if (k < K_DQ) {
                    size_t bad;
                    if (mw_actq_quantize(x, n, BITS[k - K_Q], 7, (uint64_t)r + 1, d, &bad) != MW_OK) {
                        fprintf(stderr, "actq_bench: %s\n", mw_last_error());
                        return 1;
                    }
                } else
                    mw_actq_dequantize(d, n, BITS[k - K_DQ], y);
                if (r >= 0) t[(size_t)k * reps + r] = bench_now() - t0;
            }
        for (int k = 0; k < K_COUNT; k++)
            rate[ti][k] = 4.0 * (double)n / bench_median(t + (size_t)k * reps, reps) / 1e9;
    }
    const mw_kernel_id kid = mw_kernel_current();
    if (json) {
        printf("{\"values\": %zu, \"reps\": %d, \"kernel\": \"%s\"", n, reps, mw_kernel_id_name(kid));
        for (int ti = 0; ti < 2; ti++) {
            printf(", \"t%d\": {\"memcpy_gb_s\": %.3f", threads[ti], rate[ti][K_COPY]);
            for (int b = 0; b < NB; b++)
                printf(", \"q%d_gb_s\": %.3f, \"dq%d_gb_s\": %.3f", BITS[b], rate[ti][K_Q + b], BITS[b],
                       rate[ti][K_DQ + b]);
            printf("}");
        }
        printf("}\n");
    } else {
        printf("actq_bench: %zu values (%.0f MiB of fp32), median of %d rounds; GB/s of fp32 bytes\n", n,
               4.0 * (double)n / (1 << 20), reps);
        printf("%-8s %10s", "threads", "memcpy");
        for (int b = 0; b < NB; b++) printf("   q%d  dq%d  ", BITS[b], BITS[b]);
        printf("\n");
        for (int ti = 0; ti < 2; ti++) {
            printf("%-8d %10.2f", threads[ti], rate[ti][K_COPY]);
            for (int b = 0; b < NB; b++) printf(" %5.2f %5.2f ", rate[ti][K_Q + b], rate[ti][K_DQ + b]);
            printf("\n");
        }
    }
    free(t), free(x), free(y), free(d);
    return 0;
}
