#include "offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/status.h"
#include "aio.h"
#include "scratch.h"

#define DEPTH 64 /* requests in flight at most: 4 slots x 5 arrays x (reads + writes), and segments */

struct mw_offload {
    mw_offload_layout lay;
    int nseg;
    size_t *seg_lo;              /* nseg + 1 */
    unsigned *mask;              /* per segment */
    uint64_t *seg_off;           /* per segment: its first array's file offset */
    size_t *clo;                 /* chunk c is [clo[c], clo[c + 1]) ... */
    int *cseg;                   /* ... of segment cseg[c] */
    int pos[MW_ARR_COUNT];       /* an array's place in a staging slot (-1: never staged) */
    uint64_t spos[MW_ARR_COUNT]; /* ... its byte offset in a slot */
    mw_scratch file;
    mw_aio *io;
    char *stage;                 /* MW_AIO_ALIGN-aligned, lay.slots slots of lay.arrays chunk arrays */
    long cached[MW_ARR_COUNT];   /* view/map: the chunk whose array a is in slot 0's place for a */
    int dirty[MW_ARR_COUNT];
    uint64_t extra;              /* bytes after the arrays (mw_offload_create_ex) */
};

/* The chunk size for n floats: at least MW_OFFLOAD_MIN_CHUNKS chunks where n allows, so that small
 * models pipeline (and keep their staging small) too. */
static size_t chunk_of(size_t n, size_t q) {
    size_t ch = (n + MW_OFFLOAD_MIN_CHUNKS - 1) / MW_OFFLOAD_MIN_CHUNKS;
    ch = (ch + q - 1) / q * q;
    if (ch > MW_OFFLOAD_CHUNK) ch = MW_OFFLOAD_CHUNK / q * q;
    return ch ? ch : q;
}

/* Elements of an array of bits per element in 4096 bytes: its padding quantum. */
static size_t quantum(int bits) { return (size_t)MW_OFFLOAD_Q * 32 / (size_t)bits; }

uint64_t mw_offload_arr_bytes(size_t len, int bits) {
    const size_t q = quantum(bits);
    return (uint64_t)((len + q - 1) / q * q) * (uint64_t)bits / 8;
}

/* Bytes of elements [0, k) of an array (k a multiple of 2 for 4 bits). */
static uint64_t ebytes(size_t k, int bits) { return (uint64_t)k * (uint64_t)bits / 8; }

static int popcount(unsigned x) {
    int k = 0;
    for (; x; x &= x - 1) k++;
    return k;
}

/* Array a's index among the arrays of mask (its place in the segment's file area). */
static int arr_index(unsigned mask, int a) { return popcount(mask & (MW_ARR_BIT(a) - 1)); }

void mw_offload_layout_of(int nseg, const size_t *seg_lo, const unsigned *mask, const int *bits, mw_offload_layout *out) {
    memset(out, 0, sizeof *out);
    out->n = seg_lo[nseg];
    unsigned all = 0;
    for (int s = 0; s < nseg; s++)
        if (seg_lo[s + 1] > seg_lo[s]) all |= mask[s];
    size_t q = MW_OFFLOAD_Q;
    for (int a = 0; a < MW_ARR_COUNT; a++) {
        out->bits[a] = bits[a] > 0 ? bits[a] : 32;
        if ((all & MW_ARR_BIT(a)) && quantum(out->bits[a]) > q) q = quantum(out->bits[a]);
    }
    out->chunk = chunk_of(out->n, q);
    for (int s = 0; s < nseg; s++) {
        const size_t len = seg_lo[s + 1] - seg_lo[s];
        if (!len) continue; /* a segment without arrays on disk still has chunks: the passes visit it */
        out->nchunks += (len + out->chunk - 1) / out->chunk;
        for (int a = 0; a < MW_ARR_COUNT; a++)
            if (mask[s] & MW_ARR_BIT(a)) out->arr_bytes[a] += mw_offload_arr_bytes(len, out->bits[a]);
    }
    for (int a = 0; a < MW_ARR_COUNT; a++) {
        out->file_bytes += out->arr_bytes[a];
        if (all & MW_ARR_BIT(a)) out->slot_bytes += ebytes(out->chunk, out->bits[a]);
    }
    if (!out->slot_bytes) out->slot_bytes = out->chunk * sizeof(float);
    out->arrays = popcount(all);
    out->slots = out->nchunks < MW_OFFLOAD_SLOTS ? (int)out->nchunks : MW_OFFLOAD_SLOTS;
    if (out->slots < 1) out->slots = 1;
    out->staging_bytes = (uint64_t)out->slots * out->slot_bytes + MW_AIO_ALIGN;
}

mw_status mw_offload_measure(const char *dir, double *read_bw, double *write_bw) {
    static _Thread_local char last[1024];
    static _Thread_local double last_r, last_w;
    if (last[0] && strcmp(last, dir) == 0) {
        *read_bw = last_r, *write_bw = last_w;
        return MW_OK;
    }
    const uint64_t R = 1u << 20, F = 32u << 20; /* 4 MiB of buffers: a small mark on the peak RSS */
    mw_scratch sc;
    int stale;
    uint64_t sb;
    mw_aio_faults_pause(1); /* not the run's I/O: injected faults are for the run's */
    mw_status cs = mw_scratch_create(&sc, dir, F, &stale, &sb);
    if (cs != MW_OK) {
        mw_aio_faults_pause(0);
        return cs;
    }
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
    mw_aio_faults_pause(0);
    MW_TRY(st);
    *write_bw = F / (t[0] > 1e-9 ? t[0] : 1e-9);
    *read_bw = F / (t[1] > 1e-9 ? t[1] : 1e-9);
    snprintf(last, sizeof last, "%s", dir);
    last_r = *read_bw, last_w = *write_bw;
    return MW_OK;
}

mw_status mw_offload_create(mw_offload **out, const char *dir, int nseg, const size_t *seg_lo, const unsigned *mask,
                            const int *bits, void *staging) {
    return mw_offload_create_ex(out, dir, nseg, seg_lo, mask, bits, staging, 0);
}

mw_status mw_offload_create_ex(mw_offload **out, const char *dir, int nseg, const size_t *seg_lo, const unsigned *mask,
                               const int *bits, void *staging, uint64_t extra) {
    *out = NULL;
    if (extra % MW_AIO_ALIGN) return mw_fail(MW_ERR_ARG, "internal: the disk tier's extra region of %llu bytes is not aligned",
                                             (unsigned long long)extra);
    if (!dir || !*dir) return mw_fail(MW_ERR_ARG, "offloading needs a folder for its scratch file (--offload-dir)");
    mw_offload *o = calloc(1, sizeof *o);
    if (!o) return mw_fail(MW_ERR_NOMEM, "out of memory");
    mw_offload_layout_of(nseg, seg_lo, mask, bits, &o->lay);
    o->nseg = nseg;
    o->file.fd = -1;
    o->seg_lo = malloc(sizeof(size_t) * (size_t)(nseg + 1));
    o->mask = malloc(sizeof(unsigned) * (size_t)nseg);
    o->seg_off = malloc(sizeof(uint64_t) * (size_t)nseg);
    o->clo = malloc(sizeof(size_t) * (o->lay.nchunks + 1));
    o->cseg = malloc(sizeof(int) * (o->lay.nchunks + 1));
    if (!o->seg_lo || !o->mask || !o->seg_off || !o->clo || !o->cseg) {
        mw_offload_destroy(o);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    memcpy(o->seg_lo, seg_lo, sizeof(size_t) * (size_t)(nseg + 1));
    memcpy(o->mask, mask, sizeof(unsigned) * (size_t)nseg);
    unsigned all = 0;
    uint64_t off = 0;
    size_t c = 0;
    for (int s = 0; s < nseg; s++) {
        const size_t len = seg_lo[s + 1] - seg_lo[s];
        o->seg_off[s] = off;
        if (!len) continue; /* a segment without arrays on disk still has chunks: the passes visit it */
        all |= mask[s];
        for (int a = 0; a < MW_ARR_COUNT; a++)
            if (mask[s] & MW_ARR_BIT(a)) off += mw_offload_arr_bytes(len, o->lay.bits[a]);
        for (size_t lo = seg_lo[s]; lo < seg_lo[s + 1]; lo += o->lay.chunk) o->clo[c] = lo, o->cseg[c++] = s;
    }
    o->clo[c] = o->lay.n;
    uint64_t sp = 0;
    for (int a = 0; a < MW_ARR_COUNT; a++) {
        o->pos[a] = all & MW_ARR_BIT(a) ? arr_index(all, a) : -1;
        o->spos[a] = sp;
        if (o->pos[a] >= 0) sp += ebytes(o->lay.chunk, o->lay.bits[a]);
    }
    for (int a = 0; a < MW_ARR_COUNT; a++) o->cached[a] = -1;
    uintptr_t st0 = (uintptr_t)staging;
    o->stage = (char *)((st0 + MW_AIO_ALIGN - 1) / MW_AIO_ALIGN * MW_AIO_ALIGN);
    int stale; /* counted process-wide by scratch.c, which mw_offload_get_info reports */
    uint64_t stale_bytes;
    o->extra = extra;
    const uint64_t fb = o->lay.file_bytes + extra;
    mw_status st = mw_scratch_create(&o->file, dir, fb ? fb : MW_AIO_ALIGN, &stale, &stale_bytes);
    if (st == MW_OK) st = mw_aio_create(&o->io, o->file.fd, o->file.path, DEPTH, MW_AIO_AUTO);
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
    free(o->seg_lo), free(o->mask), free(o->seg_off), free(o->clo), free(o->cseg);
    free(o);
}

void mw_offload_get_info(const mw_offload *o, mw_offload_info *info) {
    memset(info, 0, sizeof *info);
    info->path = o->file.path;
    info->engine = mw_aio_kind_name(o->io);
    info->note = mw_aio_note(o->io);
    info->direct = o->file.direct;
    mw_scratch_stale_removed(&info->stale, &info->stale_bytes); /* by this process, measurements included */
    info->file_bytes = o->lay.file_bytes + o->extra;
    mw_aio_stats(o->io, &info->bytes_read, &info->bytes_written);
}

/* Array a of slot s in staging (a chunk of it). */
static char *slot_arr(const mw_offload *o, int s, int a) {
    return o->stage + (size_t)s * (size_t)o->lay.slot_bytes + (size_t)o->spos[a];
}

/* Where array a of segment s starts in the file. */
static uint64_t seg_arr_off(const mw_offload *o, int s, int a) {
    const size_t seg_len = o->seg_lo[s + 1] - o->seg_lo[s];
    uint64_t off = o->seg_off[s];
    for (int b = 0; b < a; b++)
        if (o->mask[s] & MW_ARR_BIT(b)) off += mw_offload_arr_bytes(seg_len, o->lay.bits[b]);
    return off;
}

/* Where array a of chunk c lies in the file, and how many bytes (padded) it takes. */
static uint64_t chunk_off(const mw_offload *o, size_t c, int a, uint64_t *bytes) {
    const int s = o->cseg[c];
    *bytes = mw_offload_arr_bytes(o->clo[c + 1] - o->clo[c], o->lay.bits[a]);
    return seg_arr_off(o, s, a) + ebytes(o->clo[c] - o->seg_lo[s], o->lay.bits[a]);
}

/* Starts the transfers of chunk c's arrays in set into (from) slot s; ids[a] gets each request. */
static mw_status chunk_io(mw_offload *o, int write, size_t c, unsigned set, int s, int ids[MW_ARR_COUNT]) {
    set &= o->mask[o->cseg[c]];
    for (int a = 0; a < MW_ARR_COUNT; a++) {
        if (!(set & MW_ARR_BIT(a))) continue;
        uint64_t bytes;
        const uint64_t off = chunk_off(o, c, a, &bytes);
        MW_TRY(write ? mw_aio_write(o->io, slot_arr(o, s, a), bytes, off, &ids[a])
                     : mw_aio_read(o->io, slot_arr(o, s, a), bytes, off, &ids[a]));
    }
    return MW_OK;
}

static mw_status wait_ids(mw_offload *o, int ids[MW_ARR_COUNT]) {
    mw_status st = MW_OK;
    for (int a = 0; a < MW_ARR_COUNT; a++) {
        if (ids[a] < 0) continue;
        mw_status w = mw_aio_wait(o->io, ids[a]);
        ids[a] = -1;
        if (st == MW_OK) st = w;
    }
    return st;
}

mw_status mw_offload_stream(mw_offload *o, unsigned rd, unsigned wr, mw_offload_chunk_fn fn, void *ctx) {
    const size_t nch = o->lay.nchunks;
    const size_t S = (size_t)o->lay.slots;
    /* reads ahead A chunks; the slot a read goes into held chunk c - (S - A), whose write was
     * started one update earlier (S >= 3: a whole update to land) */
    const size_t A = S >= 3 ? S - 2 : S - 1;
    int rid[MW_OFFLOAD_SLOTS][MW_ARR_COUNT], wid[MW_OFFLOAD_SLOTS][MW_ARR_COUNT];
    for (size_t s = 0; s < S; s++)
        for (int a = 0; a < MW_ARR_COUNT; a++) rid[s][a] = wid[s][a] = -1;
    MW_TRY(mw_offload_commit(o)); /* the slots are about to change */
    mw_status st = MW_OK;
    for (size_t c = 0; c < A && c < nch && st == MW_OK; c++) st = chunk_io(o, 0, c, rd, (int)c, rid[c]);
    for (size_t c = 0; c < nch && st == MW_OK; c++) {
        const int s = (int)(c % S);
        const size_t ahead = c + A;
        if (ahead < nch) {
            const int sa = (int)(ahead % S);
            if ((st = wait_ids(o, wid[sa])) != MW_OK) break;
            if ((st = chunk_io(o, 0, ahead, rd, sa, rid[sa])) != MW_OK) break;
        }
        if ((st = wait_ids(o, rid[s])) != MW_OK) break;
        void *arr[MW_ARR_COUNT];
        const unsigned has = (rd | wr) & o->mask[o->cseg[c]];
        for (int a = 0; a < MW_ARR_COUNT; a++) arr[a] = has & MW_ARR_BIT(a) ? slot_arr(o, s, a) : NULL;
        fn(ctx, o->clo[c], o->clo[c + 1], o->cseg[c], arr);
        mw_aio_poll(o->io); /* the reads and writes that finished during the update, timed now */
        if ((st = wait_ids(o, wid[s])) != MW_OK) break; /* S == 1: the last one */
        st = chunk_io(o, 1, c, wr, s, wid[s]);
    }
    mw_status w = mw_aio_wait_all(o->io);
    return st != MW_OK ? st : w;
}

mw_status mw_offload_seg_start(mw_offload *o, int write, int seg, int a, float *buf, int *id) {
    if (seg < 0 || seg >= o->nseg || !(o->mask[seg] & MW_ARR_BIT(a)))
        return mw_fail(MW_ERR_ARG, "internal: segment %d has no array %d on disk", seg, a);
    const uint64_t bytes = mw_offload_arr_bytes(o->seg_lo[seg + 1] - o->seg_lo[seg], o->lay.bits[a]);
    const uint64_t off = seg_arr_off(o, seg, a);
    return write ? mw_aio_write(o->io, buf, bytes, off, id) : mw_aio_read(o->io, buf, bytes, off, id);
}

mw_status mw_offload_wait(mw_offload *o, int id) { return mw_aio_wait(o->io, id); }

mw_status mw_offload_extra_start(mw_offload *o, int write, uint64_t off, void *buf, uint64_t bytes, int *id) {
    if (off % MW_AIO_ALIGN || bytes % MW_AIO_ALIGN || (uintptr_t)buf % MW_AIO_ALIGN || off + bytes > o->extra)
        return mw_fail(MW_ERR_ARG, "internal: a transfer of %llu bytes at %llu of the disk tier's extra region (%llu bytes)",
                       (unsigned long long)bytes, (unsigned long long)off, (unsigned long long)o->extra);
    const uint64_t at = o->lay.file_bytes + off;
    return write ? mw_aio_write(o->io, buf, bytes, at, id) : mw_aio_read(o->io, buf, bytes, at, id);
}

void mw_offload_times(mw_offload *o, double *read_s, double *write_s, double *busy_s, double *wait_s) {
    mw_aio_time t;
    mw_aio_times(o->io, &t);
    *read_s = t.read_s, *write_s = t.write_s, *busy_s = t.busy_s, *wait_s = t.wait_s;
}

void mw_offload_poll(mw_offload *o) { mw_aio_poll(o->io); }

/* ---- windows for checkpoints ----------------------------------------------------------------- */

/* Writes array a's cached chunk back when it was mapped; forgets it. */
static mw_status flush_arr(mw_offload *o, int a) {
    const long c = o->cached[a];
    const int dirty = o->dirty[a];
    o->cached[a] = -1;
    o->dirty[a] = 0;
    if (!dirty || c < 0) return MW_OK;
    int ids[MW_ARR_COUNT];
    for (int b = 0; b < MW_ARR_COUNT; b++) ids[b] = -1;
    MW_TRY(chunk_io(o, 1, (size_t)c, MW_ARR_BIT(a), 0, ids));
    return wait_ids(o, ids);
}

/* The chunk holding element off (binary search over the chunk bounds). */
static size_t chunk_at(const mw_offload *o, size_t off) {
    size_t lo = 0, hi = o->lay.nchunks;
    while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        if (o->clo[mid] <= off) lo = mid;
        else hi = mid;
    }
    return lo;
}

static mw_status window(mw_offload *o, int a, size_t off, size_t limit, void **p, size_t *n) {
    if (off >= o->lay.n || off >= limit || a < 0 || a >= MW_ARR_COUNT || o->pos[a] < 0)
        return mw_fail(MW_ERR_ARG, "internal: offload window of array %d at %zu of %zu", a, off, o->lay.n);
    const size_t c = chunk_at(o, off);
    if (!(o->mask[o->cseg[c]] & MW_ARR_BIT(a)))
        return mw_fail(MW_ERR_ARG, "internal: array %d of element %zu is not on disk", a, off);
    if (o->cached[a] != (long)c) {
        MW_TRY(flush_arr(o, a));
        int ids[MW_ARR_COUNT];
        for (int b = 0; b < MW_ARR_COUNT; b++) ids[b] = -1;
        MW_TRY(chunk_io(o, 0, c, MW_ARR_BIT(a), 0, ids));
        MW_TRY(wait_ids(o, ids));
        o->cached[a] = (long)c;
    }
    size_t end = o->clo[c + 1];
    if (end > limit) end = limit;
    *p = slot_arr(o, 0, a) + ebytes(off - o->clo[c], o->lay.bits[a]);
    *n = end - off;
    return MW_OK;
}

mw_status mw_offload_view(mw_offload *o, int a, size_t off, size_t limit, const void **p, size_t *n) {
    void *q = NULL;
    MW_TRY(window(o, a, off, limit, &q, n));
    *p = q;
    return MW_OK;
}

mw_status mw_offload_map(mw_offload *o, int a, size_t off, size_t limit, void **p, size_t *n) {
    MW_TRY(window(o, a, off, limit, p, n));
    o->dirty[a] = 1;
    return MW_OK;
}

mw_status mw_offload_commit(mw_offload *o) {
    mw_status st = MW_OK;
    for (int a = 0; a < MW_ARR_COUNT; a++) {
        mw_status s = flush_arr(o, a);
        if (st == MW_OK) st = s;
    }
    return st;
}
