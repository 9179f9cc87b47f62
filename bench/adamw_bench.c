/* AdamW's step against the machine's own limits, in one run (issue 14, item 4):
 *  - memory: a kernel with AdamW's traffic and almost none of its arithmetic (p = p*s + g, m and
 *    v likewise, g = 0) gives the memory bandwidth the step could reach; the
 *    in-memory AdamW step (mw_adamw_update over p, g, m, v) moves 28 bytes per parameter (reads
 *    p, g, m, v; writes p, m, v) plus 4 for zeroing g, and its rate is printed as a fraction of it;
 *  - disk (with --dir): the sequential write and read bandwidth of a scratch file in DIR through
 *    the same I/O engine and O_DIRECT, then the offloaded step (m and v streamed from that file,
 *    read ahead and written behind) as a fraction of the time the disk alone needs for its bytes.
 * Medians over --reps; the machine is shared and noisy, so read the ratios.
 *   build/adamw_bench [--params N] [--reps R] [--dir DIR] [--json]
 * Default N: GPT-2 124M's parameter count. The disk part needs 16N bytes (+ 4 MiB) free in DIR and
 * says so and skips when there is less. */
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/arena.h"
#include "../src/core/fsutil.h"
#include "../src/memory/aio.h"
#include "../src/memory/offload.h"
#include "../src/memory/scratch.h"
#include "../src/optim/adamw.h"
#include "memwall.h"
#include "timing.h"

static float *alloc_floats(size_t n, float v) {
    float *p;
    if (posix_memalign((void **)&p, 4096, n * sizeof(float)) != 0) {
        fprintf(stderr, "adamw_bench: out of memory for %zu floats\n", n);
        exit(1);
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}

static const int BITS32[MW_ARR_COUNT] = {32, 32, 32, 32};

typedef struct chunk_ctx {
    float *p, *g;
    mw_adamw_hp hp;
} chunk_ctx;

static void noop_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    (void)ctx, (void)lo, (void)hi, (void)seg, (void)arr;
}

static void chunk_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    chunk_ctx *c = ctx;
    (void)seg;
    mw_adamw_update(c->p + lo, c->g + lo, arr[MW_ARR_M], arr[MW_ARR_V], hi - lo, &c->hp);
}

int main(int argc, char **argv) {
    size_t n = 0;
    int reps = 5, json = 0;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--params") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: adamw_bench [--params N] [--reps R] [--dir DIR] [--json]\n");
            return 1;
        }
    }
    if (!n) {
        mw_config c;
        mw_config_default(&c);
        mw_config_preset(&c, "gpt2");
        n = mw_config_num_params(&c);
    }
    if (reps < 1) reps = 1;
    double *t = calloc((size_t)reps + 1, sizeof *t);
    const int nt = omp_get_max_threads();
    /* the memory bandwidth, with AdamW's own traffic: p = p*s + g, m = m*s + g, v = v*s + g, g = 0
     * (reads 4 arrays, writes 4, no write-allocate since every written array is read first), then
     * the AdamW step itself over the same arrays; interleaved, round 0 warms up */
    float *p = alloc_floats(n, 0.5f), *g = alloc_floats(n, 1e-3f), *m = alloc_floats(n, 0.0f), *v = alloc_floats(n, 0.0f);
    mw_adamw_hp hp = {3e-4, 0.9, 0.95, 1e-8, 0.1, 1.0f, 1};
    double *tm = calloc((size_t)reps + 1, sizeof *tm);
    for (int r = 0; r <= reps; r++) {
        double t0 = bench_now();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            const float gi = g[i];
            p[i] = p[i] * 0.999f + gi;
            m[i] = m[i] * 0.9f + gi;
            v[i] = v[i] * 0.95f + gi;
            g[i] = 0.0f;
        }
        tm[r] = bench_now() - t0;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) p[i] = 0.5f, g[i] = 1e-3f, m[i] = v[i] = 0.0f;
        hp.t = r + 1;
        t0 = bench_now();
        mw_adamw_update(p, g, m, v, n, &hp);
        t[r] = bench_now() - t0;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) g[i] = 1e-3f; /* zeroed by the step: new gradients */
    }
    const double membw = 28.0 * n / bench_median(tm + 1, reps);
    const double mem_s = bench_median(t + 1, reps);
    const double adamw_bw = 28.0 * n / mem_s;
    free(tm);
    free(m), free(v);
    /* the disk tier */
    double wr_bw = 0, rd_bw = 0, off_s = 0, disk_s = 0, io_s = 0;
    char engine[16] = "", skip[256] = "";
    int direct = 0;
    mw_offload_layout lay;
    const size_t seg_lo[2] = {0, n};
    const unsigned mask[1] = {MW_ARR_MV};
    mw_offload_layout_of(1, seg_lo, mask, BITS32, &lay);
    if (dir) {
        const uint64_t need = 2 * lay.file_bytes + (4u << 20), fr = (mw_mkdirs(dir), mw_scratch_free_bytes(dir));
        if (fr < need) {
            char b1[32], b2[32];
            snprintf(skip, sizeof skip, "disk part skipped: it needs %s in %s, which has %s free",
                     mw_fmt_bytes(need, b1, sizeof b1), dir, mw_fmt_bytes(fr, b2, sizeof b2));
        }
    } else {
        snprintf(skip, sizeof skip, "disk part skipped: no --dir");
    }
    if (dir && !skip[0]) {
        /* sequential bandwidth of the file through the engine: 8 MiB requests, 4 in flight */
        mw_scratch s;
        int stale;
        uint64_t sb;
        if (mw_scratch_create(&s, dir, lay.file_bytes, &stale, &sb) != MW_OK) {
            fprintf(stderr, "adamw_bench: %s\n", mw_last_error());
            return 1;
        }
        mw_aio *io;
        if (mw_aio_create(&io, s.fd, s.path, 4, MW_AIO_AUTO) != MW_OK) {
            fprintf(stderr, "adamw_bench: %s\n", mw_last_error());
            return 1;
        }
        snprintf(engine, sizeof engine, "%s", mw_aio_kind_name(io));
        direct = s.direct;
        const uint64_t R = 8u << 20, F = lay.file_bytes / R * R;
        char *buf;
        if (posix_memalign((void **)&buf, 4096, 4 * R) != 0) return 1;
        memset(buf, 1, 4 * R);
        /* the offloaded step (the same update, m and v streamed), the same transfers with no update,
         * and the file's sequential write and read: interleaved round by round, since a shared
         * disk's rate drifts; round 0 warms up */
        void *stage = malloc(lay.staging_bytes);
        mw_offload *o;
        if (!stage || mw_offload_create(&o, dir, 1, seg_lo, mask, BITS32, stage) != MW_OK) {
            fprintf(stderr, "adamw_bench: %s\n", mw_last_error());
            return 1;
        }
        chunk_ctx cc = {p, g, hp};
        double *tw = calloc((size_t)reps + 1, sizeof *tw), *trd = calloc((size_t)reps + 1, sizeof *trd);
        double *tio = calloc((size_t)reps + 1, sizeof *tio);
        for (int r = 0; r <= reps; r++) {
            for (int op = 0; op < 2; op++) {
                int id[4] = {-1, -1, -1, -1};
                double t0 = bench_now();
                for (uint64_t off = 0, k = 0; off < F; off += R, k++) {
                    if (id[k % 4] >= 0 && mw_aio_wait(io, id[k % 4]) != MW_OK) goto ioerr;
                    mw_status st = op == 0 ? mw_aio_write(io, buf + (k % 4) * R, R, off, &id[k % 4])
                                           : mw_aio_read(io, buf + (k % 4) * R, R, off, &id[k % 4]);
                    if (st != MW_OK) goto ioerr;
                }
                if (mw_aio_wait_all(io) != MW_OK) goto ioerr;
                (op == 0 ? tw : trd)[r] = (bench_now() - t0) * (double)lay.file_bytes / F;
            }
            cc.hp.t = r + 1;
            double t0 = bench_now();
            if (mw_offload_stream(o, MW_ARR_MV, MW_ARR_MV, chunk_fn, &cc) != MW_OK) goto ioerr;
            t[r] = bench_now() - t0;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < n; i++) g[i] = 1e-3f; /* zeroed by the step: new gradients */
            t0 = bench_now();
            if (mw_offload_stream(o, MW_ARR_MV, MW_ARR_MV, noop_fn, NULL) != MW_OK) goto ioerr;
            tio[r] = bench_now() - t0;
        }
        const double wr_s = bench_median(tw + 1, reps), rd_s = bench_median(trd + 1, reps);
        wr_bw = lay.file_bytes / wr_s;
        rd_bw = lay.file_bytes / rd_s;
        off_s = bench_median(t + 1, reps);
        io_s = bench_median(tio + 1, reps);
        mw_aio_destroy(io);
        mw_scratch_close(&s);
        free(buf), free(tw), free(trd), free(tio);
        disk_s = (double)lay.file_bytes / rd_bw + (double)lay.file_bytes / wr_bw;
        mw_offload_destroy(o);
        free(stage);
    }
    free(p), free(g);
    if (json) {
        printf("{\"params\": %zu, \"threads\": %d, \"reps\": %d, \"mem_gb_s_28\": %.3f, \"adamw_ms\": %.3f, "
               "\"adamw_gb_s_28\": %.3f, \"adamw_fraction_of_mem\": %.4f",
               n, nt, reps, membw / 1e9, mem_s * 1e3, adamw_bw / 1e9, adamw_bw / membw);
        if (off_s > 0)
            printf(", \"disk_write_gb_s\": %.3f, \"disk_read_gb_s\": %.3f, \"engine\": \"%s\", \"o_direct\": %s, "
                   "\"offloaded_ms\": %.3f, \"disk_only_ms\": %.3f, \"offloaded_fraction_of_disk\": %.4f, "
                   "\"transfers_only_ms\": %.3f",
                   wr_bw / 1e9, rd_bw / 1e9, engine, direct ? "true" : "false", off_s * 1e3, disk_s * 1e3,
                   disk_s / off_s, io_s * 1e3);
        else
            printf(", \"disk\": \"%s\"", skip);
        printf("}\n");
    } else {
        printf("AdamW over %zu parameters, %d threads, median of %d\n", n, nt, reps);
        printf("  memory: the same traffic, no AdamW math, at %.2f GB/s (28 B/param); AdamW step %.1f ms = %.2f GB/s at 28 B/param (%.2f with g's zeroing) "
               "= %.0f%% of it\n", membw / 1e9, mem_s * 1e3, adamw_bw / 1e9, 32.0 * n / mem_s / 1e9,
               100 * adamw_bw / membw);
        if (off_s > 0)
            printf("  disk (%s, %s): write %.2f GB/s, read %.2f GB/s; offloaded step %.1f ms, the disk alone needs "
                   "%.1f ms for its %.2f GB each way = %.0f%% of the disk's sequential bandwidth\n",
                   engine, direct ? "O_DIRECT" : "page cache", wr_bw / 1e9, rd_bw / 1e9, off_s * 1e3, disk_s * 1e3,
                   lay.file_bytes / 1e9, 100 * disk_s / off_s);
        if (off_s > 0)
            printf("  the same transfers without the update take %.1f ms: the update adds %.0f%%\n", io_s * 1e3,
                   100 * (off_s / io_s - 1));
        else
            printf("  %s\n", skip);
    }
    return 0;
ioerr:
    fprintf(stderr, "adamw_bench: %s\n", mw_last_error());
    return 1;
}
