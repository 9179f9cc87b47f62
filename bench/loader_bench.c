/* The training loader's cost per step (issue 17): mw_loader_next of B windows of T+1 tokens, as
 * mw_train draws them, on a token set (a manifest's shards or a single file), its pages in the
 * page cache (warm) or dropped before every step with posix_fadvise (cold: each window read from
 * the disk, as on a set larger than memory). Prints the median and the spread in microseconds.
 * Usage: build/loader_bench PREFIX [--batch 4] [--seq 1024] [--accum 1] [--steps 200] [--cold] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memwall.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void drop(const mw_data *d) { /* the shards' pages out of the page cache */
    for (int i = 0; i < mw_data_shards(d); i++) {
        int fd = open(mw_data_shard_path(d, i), O_RDONLY);
        if (fd < 0) continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PREFIX [--batch B] [--seq T] [--accum A] [--steps N] [--cold]\n", argv[0]);
        return 1;
    }
    int B = 4, T = 1024, A = 1, steps = 200, cold = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--cold")) cold = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--batch")) B = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seq")) T = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--accum")) A = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "unknown argument %s\n", argv[i]);
            return 1;
        }
    }
    if (B < 1 || T < 1 || A < 1 || steps < 1) {
        fprintf(stderr, "--batch, --seq, --accum and --steps must be positive\n");
        return 1;
    }
    mw_data *d;
    if (mw_data_open_set(&d, argv[1], "train") != MW_OK) {
        fprintf(stderr, "%s\n", mw_last_error());
        return 1;
    }
    if (!d) {
        fprintf(stderr, "no token set at %s\n", argv[1]);
        return 1;
    }
    int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T),
            *scratch = malloc(sizeof(int32_t) * B * (T + 1));
    double *us = malloc(sizeof(double) * steps);
    if (!in || !tg || !scratch || !us) return 1;
    mw_loader l;
    mw_loader_init(&l, d, 1337);
    for (int s = 0; s < steps; s++) {
        if (cold) drop(d);
        double t0 = now_us();
        for (int a = 0; a < A; a++)
            if (mw_loader_next(&l, B, T, in, tg, scratch) != MW_OK) {
                fprintf(stderr, "%s\n", mw_last_error());
                return 1;
            }
        us[s] = now_us() - t0;
    }
    qsort(us, steps, sizeof *us, cmp);
    printf("{\"shards\": %d, \"tokens\": %llu, \"batch\": %d, \"seq\": %d, \"accum\": %d, \"cold\": %d, \"steps\": %d, "
           "\"median_us\": %.1f, \"p10_us\": %.1f, \"p90_us\": %.1f}\n",
           mw_data_shards(d), (unsigned long long)mw_data_count(d), B, T, A, cold, steps, us[steps / 2], us[steps / 10],
           us[steps * 9 / 10]);
    mw_data_close(d);
    free(in), free(tg), free(scratch), free(us);
    return 0;
}
