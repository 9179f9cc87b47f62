#include "offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/status.h"
#include "aio.h"
#include "scratch.h"

struct mw_offload {
    mw_offload_layout lay;
    size_t n;
    mw_scratch file;
    mw_aio *io;
    char *stage;         /* MW_AIO_ALIGN-aligned, lay.slots regions */
    long cached[2];      /* view/map: the chunk whose m (v) half is in slot 0's m (v) part; -1: none */
    int dirty[2];        /* ... and was mapped: commit writes it back */
    int stale;
    uint64_t stale_bytes;
};

void mw_offload_layout_of(size_t n, mw_offload_layout *out) {
    const size_t q = MW_AIO_ALIGN / sizeof(float); /* a chunk is whole aligned blocks */
    /* at least MW_OFFLOAD_MIN_CHUNKS chunks where the state allows, so that small models pipeline
     * (and keep their staging small) too */
    size_t ch = (n + MW_OFFLOAD_MIN_CHUNKS - 1) / MW_OFFLOAD_MIN_CHUNKS;
    ch = (ch + q - 1) / q * q;
    if (ch > MW_OFFLOAD_CHUNK) ch = MW_OFFLOAD_CHUNK;
    if (ch == 0) ch = q;
    out->chunk = ch;
    out->nchunks = (n + ch - 1) / ch;
    out->slots = out->nchunks < MW_OFFLOAD_SLOTS ? (int)out->nchunks : MW_OFFLOAD_SLOTS;
    if (out->slots < 1) out->slots = 1;
    out->region = 2 * (uint64_t)ch * sizeof(float);
    out->file_bytes = out->region * out->nchunks;
    out->staging_bytes = out->region * (uint64_t)out->slots + MW_AIO_ALIGN;
}

mw_status mw_offload_measure(const char *dir, double *read_bw, double *write_bw) {
    static _Thread_local char last[1024];
    static _Thread_local double last_r, last_w;
    if (last[0] && strcmp(last, dir) == 0) {
        *read_bw = last_r, *write_bw = last_w;
        return MW_OK;
    }
    const uint64_t R = 8u << 20, F = 64u << 20;
    mw_scratch sc;
    int stale;
    uint64_t sb;
    MW_TRY(mw_scratch_create(&sc, dir, F, &stale, &sb));
    mw_aio *io = NULL;
    char *buf = NULL;
    mw_status st = mw_aio_create(&io, sc.fd, sc.path, 4, MW_AIO_AUTO);
    if (st == MW_OK && posix_memalign((void **)&buf, MW_AIO_ALIGN, 4 * R) != 0)
        st = mw_fail(MW_ERR_NOMEM, "out of memory measuring the disk");
    double t[2] = {0, 0};
    if (buf) memset(buf, 0x5a, 4 * R);
    for (int op = 0; op < 2 && st == MW_OK; op++) {
        int id[4] = {-1, -1, -1, -1};
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (uint64_t off = 0, k = 0; off < F && st == MW_OK; off += R, k++) {
            if (id[k % 4] >= 0) st = mw_aio_wait(io, id[k % 4]);
            if (st == MW_OK)
                st = op == 0 ? mw_aio_write(io, buf + (k % 4) * R, R, off, &id[k % 4])
                             : mw_aio_read(io, buf + (k % 4) * R, R, off, &id[k % 4]);
            if (st != MW_OK) id[k % 4] = -1;
        }
        mw_status w = mw_aio_wait_all(io);
        if (st == MW_OK) st = w;
        clock_gettime(CLOCK_MONOTONIC, &b);
        t[op] = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    }
    mw_aio_destroy(io);
    mw_scratch_close(&sc);
    free(buf);
    MW_TRY(st);
    *write_bw = F / (t[0] > 1e-9 ? t[0] : 1e-9);
    *read_bw = F / (t[1] > 1e-9 ? t[1] : 1e-9);
    snprintf(last, sizeof last, "%s", dir);
    last_r = *read_bw, last_w = *write_bw;
    return MW_OK;
}

mw_status mw_offload_create(mw_offload **out, const char *dir, size_t n, void *staging) {
    *out = NULL;
    if (!dir || !*dir) return mw_fail(MW_ERR_ARG, "offloading needs a folder for its scratch file (--offload-dir)");
    mw_offload *o = calloc(1, sizeof *o);
    if (!o) return mw_fail(MW_ERR_NOMEM, "out of memory");
    mw_offload_layout_of(n, &o->lay);
    o->n = n;
    o->file.fd = -1;
    o->cached[0] = o->cached[1] = -1;
    uintptr_t s = (uintptr_t)staging;
    o->stage = (char *)((s + MW_AIO_ALIGN - 1) / MW_AIO_ALIGN * MW_AIO_ALIGN);
    mw_status st = mw_scratch_create(&o->file, dir, o->lay.file_bytes, &o->stale, &o->stale_bytes);
    if (st == MW_OK) st = mw_aio_create(&o->io, o->file.fd, o->file.path, 2 * MW_OFFLOAD_SLOTS, MW_AIO_AUTO);
    if (st != MW_OK) {
        mw_offload_destroy(o);
        return st;
    }
    *out = o;
    return MW_OK;
}

void mw_offload_destroy(mw_offload *o) {
    if (!o) return;
    mw_aio_destroy(o->io);
    mw_scratch_close(&o->file);
    free(o);
}

void mw_offload_get_info(const mw_offload *o, mw_offload_info *info) {
    memset(info, 0, sizeof *info);
    info->path = o->file.path;
    info->engine = mw_aio_kind_name(o->io);
    info->note = mw_aio_note(o->io);
    info->direct = o->file.direct;
    info->stale = o->stale;
    info->stale_bytes = o->stale_bytes;
    info->file_bytes = o->lay.file_bytes;
    mw_aio_stats(o->io, &info->bytes_read, &info->bytes_written);
}

static char *slot_at(const mw_offload *o, int s) { return o->stage + (uint64_t)s * o->lay.region; }

mw_status mw_offload_stream(mw_offload *o, mw_offload_chunk_fn fn, void *ctx) {
    const size_t nch = o->lay.nchunks, ch = o->lay.chunk;
    const size_t S = (size_t)o->lay.slots;
    /* reads ahead A chunks; the slot a read goes into held chunk c - (S - A), whose write was
     * started one update earlier (S >= 3: a whole update to land) */
    const size_t A = S >= 3 ? S - 2 : S - 1;
    const uint64_t R = o->lay.region;
    int rd[MW_OFFLOAD_SLOTS], wr[MW_OFFLOAD_SLOTS];
    for (size_t s = 0; s < S; s++) rd[s] = wr[s] = -1;
    MW_TRY(mw_offload_commit(o)); /* the slots are about to change */
    mw_status st = MW_OK;
    for (size_t c = 0; c < A && c < nch && st == MW_OK; c++) st = mw_aio_read(o->io, slot_at(o, (int)c), R, c * R, &rd[c]);
    for (size_t c = 0; c < nch && st == MW_OK; c++) {
        const int s = (int)(c % S);
        const size_t ahead = c + A;
        if (ahead < nch) {
            const int sa = (int)(ahead % S);
            if (wr[sa] >= 0 && (st = mw_aio_wait(o->io, wr[sa])) != MW_OK) break;
            wr[sa] = -1;
            if ((st = mw_aio_read(o->io, slot_at(o, sa), R, ahead * R, &rd[sa])) != MW_OK) break;
        }
        if ((st = mw_aio_wait(o->io, rd[s])) != MW_OK) break;
        rd[s] = -1;
        const size_t lo = c * ch, hi = lo + ch < o->n ? lo + ch : o->n;
        float *m = (float *)slot_at(o, s), *v = m + ch;
        fn(ctx, lo, hi, m, v);
        if (wr[s] >= 0 && (st = mw_aio_wait(o->io, wr[s])) != MW_OK) break; /* S == 1: the last one */
        st = mw_aio_write(o->io, slot_at(o, s), R, c * R, &wr[s]);
    }
    mw_status w = mw_aio_wait_all(o->io);
    return st != MW_OK ? st : w;
}

/* The half of staging that caches moment which for view/map: the m part of slot 0, or its v part. */
static float *half_at(const mw_offload *o, int which) { return (float *)o->stage + (size_t)which * o->lay.chunk; }
static uint64_t half_off(const mw_offload *o, int which, size_t c) {
    return (uint64_t)c * o->lay.region + (uint64_t)which * o->lay.chunk * sizeof(float);
}

/* Writes moment which's cached half back when it was mapped; forgets it. */
static mw_status flush_half(mw_offload *o, int which) {
    const long c = o->cached[which];
    const int dirty = o->dirty[which];
    o->cached[which] = -1;
    o->dirty[which] = 0;
    if (!dirty || c < 0) return MW_OK;
    int id;
    MW_TRY(mw_aio_write(o->io, half_at(o, which), o->lay.chunk * sizeof(float), half_off(o, which, (size_t)c), &id));
    return mw_aio_wait(o->io, id);
}

/* Brings moment which of chunk c into its half (each half read once per pass over a tensor). */
static mw_status load_half(mw_offload *o, int which, size_t c) {
    if (o->cached[which] == (long)c) return MW_OK;
    MW_TRY(flush_half(o, which));
    int id;
    MW_TRY(mw_aio_read(o->io, half_at(o, which), o->lay.chunk * sizeof(float), half_off(o, which, c), &id));
    MW_TRY(mw_aio_wait(o->io, id));
    o->cached[which] = (long)c;
    return MW_OK;
}

static mw_status window(mw_offload *o, int which, size_t off, size_t limit, float **p, size_t *n) {
    if (off >= o->n || off >= limit || which < 0 || which > 1)
        return mw_fail(MW_ERR_ARG, "internal: offload window at %zu of %zu", off, o->n);
    const size_t ch = o->lay.chunk, c = off / ch;
    MW_TRY(load_half(o, which, c));
    size_t end = (c + 1) * ch;
    if (end > o->n) end = o->n;
    if (end > limit) end = limit;
    *p = half_at(o, which) + (off - c * ch);
    *n = end - off;
    return MW_OK;
}

mw_status mw_offload_view(mw_offload *o, int which, size_t off, size_t limit, const float **p, size_t *n) {
    float *q;
    MW_TRY(window(o, which, off, limit, &q, n));
    *p = q;
    return MW_OK;
}

mw_status mw_offload_map(mw_offload *o, int which, size_t off, size_t limit, float **p, size_t *n) {
    MW_TRY(window(o, which, off, limit, p, n));
    o->dirty[which] = 1;
    return MW_OK;
}

mw_status mw_offload_commit(mw_offload *o) {
    mw_status a = flush_half(o, 0), b = flush_half(o, 1);
    return a != MW_OK ? a : b;
}
