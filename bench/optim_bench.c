/* The optimizers' step on a model's parameter table (default GPT-2 124M), in memory: the median time
 * of one step of each --optim over --reps steps (after one untimed), its state bytes per parameter,
 * and its time against AdamW's. Gradients are refilled before each step (the step zeroes them), out
 * of the timing. Usage: build/optim_bench [--preset NAME] [--reps R] [--json] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/optim/optim.h"
#include "timing.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *preset = "gpt2";
    int reps = 5, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: optim_bench [--preset NAME] [--reps R] [--json]\n");
            return 1;
        }
    }
    mw_config cfg;
    mw_config_default(&cfg);
    if (mw_config_preset(&cfg, preset) != MW_OK || reps < 1) {
        fprintf(stderr, "optim_bench: %s\n", mw_last_error());
        return 1;
    }
    mw_config_arch_defaults(&cfg);
    /* the parameter table as the model lays it out: 64-byte aligned tensors */
    mw_opt_tensor *t = NULL;
    int nt = 0;
    size_t n = 0;
    for (;; nt++) {
        char name[64];
        int nd, dims[2];
        if (mw_config_tensor(&cfg, nt, name, sizeof name, &nd, dims) != MW_OK) break;
        t = realloc(t, sizeof *t * (size_t)(nt + 1));
        t[nt].offset = n, t[nt].rows = dims[0], t[nt].cols = nd == 2 ? dims[1] : 0, t[nt].decay = nd == 2;
        t[nt].numel = (size_t)dims[0] * (nd == 2 ? (size_t)dims[1] : 1);
        n += (t[nt].numel + 15) / 16 * 16;
    }
    float *p = malloc(n * 4), *g = malloc(n * 4);
    if (!p || !g) return 1;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-4f - 0.05f;
    double ms[MW_OPTIM_COUNT], bpp[MW_OPTIM_COUNT];
    for (int o = 0; o < MW_OPTIM_COUNT; o++) {
        cfg.optim = o;
        mw_optim_defaults(&cfg);
        mw_opt_layout L;
        if (mw_opt_layout_init(&L, &cfg, n, nt, t) != MW_OK) return 1;
        void *m = L.bits[0] ? calloc(mw_opt_array_bytes(L.bits[0], n), 1) : NULL;
        void *v = L.bits[1] ? calloc(mw_opt_array_bytes(L.bits[1], n), 1) : NULL;
        void *st = calloc(L.state_bytes + 8, 1), *sc = calloc(L.scratch_bytes + 8, 1);
        double *tm = calloc((size_t)reps + 1, sizeof *tm);
        for (int r = 0; r <= reps; r++) {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < n; i++) g[i] = (float)((i * 40503u + (size_t)r) % 2001) * 1e-5f - 0.01f;
            mw_opt_hp hp;
            mw_opt_hp_of(&hp, &cfg, 3e-4, 1.0f, r + 1);
            const double t0 = bench_now();
            mw_opt_begin(&L, &hp, st, sc);
            for (int k = 0; k < L.npasses; k++) {
                mw_opt_chunk(&L, &hp, k, 0, n, p, g, m, v, st, sc);
                mw_opt_end_pass(&L, &hp, k, st, sc);
            }
            tm[r] = bench_now() - t0;
        }
        qsort(tm + 1, (size_t)reps, sizeof *tm, cmp_d);
        ms[o] = tm[1 + reps / 2] * 1e3;
        bpp[o] = (double)((L.bits[0] ? mw_opt_array_bytes(L.bits[0], n) : 0) + (L.bits[1] ? mw_opt_array_bytes(L.bits[1], n) : 0) +
                          L.state_bytes) / (double)n;
        free(m), free(v), free(st), free(sc), free(tm);
        mw_opt_layout_free(&L);
    }
    if (json) {
        printf("{\"preset\": \"%s\", \"params\": %zu, \"threads\": %d, \"reps\": %d", preset, n, omp_get_max_threads(), reps);
        for (int o = 0; o < MW_OPTIM_COUNT; o++)
            printf(", \"%s\": {\"ms\": %.3f, \"state_bytes_per_param\": %.4f, \"vs_adamw\": %.3f}", mw_optim_str(o), ms[o], bpp[o],
                   ms[o] / ms[0]);
        printf("}\n");
    } else {
        printf("optimizer step, %s (%zu floats), %d threads, median of %d:\n", preset, n, omp_get_max_threads(), reps);
        printf("  %-10s %10s %14s %10s\n", "--optim", "ms", "state B/param", "x AdamW");
        for (int o = 0; o < MW_OPTIM_COUNT; o++)
            printf("  %-10s %10.1f %14.3f %10.2f\n", mw_optim_str(o), ms[o], bpp[o], ms[o] / ms[0]);
    }
    free(p), free(g), free(t);
    return 0;
}
