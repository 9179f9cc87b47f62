/* Checkpoints written and read by many ranks at once (mw_ckpt_save_ranks, and a pipeline stage's
 * load): --zero's shards, --tp's gathered tensors (and its optimizer state's codes), --pp's stages.
 * Each writes the single-process file of checkpoint.c, byte for byte; the format is described at
 * the top of that file, the helpers both share are in ckpt_impl.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/crc32c.h"
#include "../core/fsutil.h"
#include "../core/status.h"
#include "../dist/shardio.h"
#include "../graph/model.h"
#include "checkpoint.h"
#include "ckpt_impl.h"

/* ---- writing on every rank at once ----------------------------------------------------------- */

static mw_status pwr(int fd, const char *path, const void *buf, size_t n, uint64_t off) {
    const char *p = buf;
    while (n) {
        ssize_t k = pwrite(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return mw_fail(MW_ERR_IO, "cannot write %s: %s", path, k < 0 ? strerror(errno) : "no progress");
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return MW_OK;
}

/* Elements [a, b) of [lo, hi) and [x, y) (empty: a == b). */
static void cut(size_t lo, size_t hi, size_t x, size_t y, size_t *a, size_t *b) {
    *a = lo > x ? lo : x;
    *b = hi < y ? hi : y;
    if (*b < *a) *b = *a;
}

/* Every rank's v into a malloc'd array (collective); NULL when that fails. */
static uint32_t *gather_u32(mw_comm *cm, uint32_t v) {
    uint32_t *a = calloc((size_t)cm->size, sizeof *a);
    size_t *cd = calloc((size_t)cm->size * 2, sizeof *cd);
    int ok = a && cd;
    if (ok) {
        for (int j = 0; j < cm->size; j++) cd[j] = 1, cd[cm->size + j] = (size_t)j;
        a[cm->rank] = v;
        ok = cm->allgatherv(cm, a, sizeof *a, cd, cd + cm->size) == MW_OK;
    }
    free(cd);
    if (!ok) free(a);
    return ok ? a : NULL;
}

/* 1 when every rank's v is rank 0's (collective). */
static int all_same(mw_comm *cm, uint32_t v) {
    uint32_t *a = gather_u32(cm, v);
    int ok = a != NULL;
    for (int j = 1; j < cm->size && ok; j++) ok = a[j] == a[0];
    free(a);
    return ok;
}

/* 1 when every rank's status is MW_OK (collective). */
static int all_ok(mw_comm *cm, mw_status mine) { return all_same(cm, mine != MW_OK) && mine == MW_OK; }

/* 1 when every rank of every group in gs (n of them, NULL entries skipped) is OK, each group
 * agreeing in turn (collective over each): with the groups of a layout in an order that reaches
 * every rank (data-parallel, tensor-parallel, pipeline, and back), one rank's failure is every rank's. */
static int all_ok_over(mw_comm *const *gs, int n, int ok) {
    for (int k = 0; k < n; k++)
        if (gs[k]) ok = all_ok(gs[k], ok ? MW_OK : MW_ERR_IO);
    return ok;
}

/* A test's fault (tests/cli_3d.sh, cli_parallel.sh): MEMWALL_CKPT_KILL=STEP ends this process by
 * SIGKILL in the middle of the checkpoint of step STEP, its pieces written or gathered, before the
 * ranks agree: the others must leave no checkpoint of that step, and the earlier ones intact. */
static void fault_point(int step) {
    const char *e = getenv("MEMWALL_CKPT_KILL");
    if (e && *e && atoi(e) == step) raise(SIGKILL);
}

/* The byte range of the optimizer's array part (bits per element, bytes in all) that rank r of
 * world writes: its shard's elements, and the last rank the array's end. */
static void part_bytes(uint64_t n, int world, int r, int bits, uint64_t bytes, uint64_t *a, uint64_t *b) {
    uint64_t lo, hi;
    mw_zero_shard(n, world, r, &lo, &hi);
    *a = lo * (uint64_t)bits / 8;
    *b = r == world - 1 ? bytes : hi * (uint64_t)bits / 8;
    if (*a > bytes) *a = bytes;
    if (*b > bytes) *b = bytes;
    if (*b < *a) *b = *a;
}

/* Where a tensor's parts go on the rank that writes: the writer's file in order (w), or fd at byte
 * at + the part's offset in the array (a pipeline stage's pwrite). */
typedef struct part_sink {
    mw_ckpt_writer *w;
    int fd;
    const char *name;
    uint64_t at;
} part_sink;

/* --tp: array k (0 parameters, 1 AdamW's m, 2 v) of tensor i whole, a part at a time (the
 * all-reduces' piece, or one row), gathered from the tensor-parallel group to its rank 0
 * (collective over it: the rank that writes holds two such parts, never a whole tensor, whose
 * vocabulary alone would be twice its shard beyond the plan). Rank 0 writes each part into sk while
 * *s is MW_OK, and *crc is the whole array's CRC. The gathers go on after a failed write, so that
 * no rank waits for one that never comes; the status returned is the gathers' (a failed gather: the
 * ranks cannot agree any more). *full, *scratch, *cap: rank 0's part buffers, grown as needed. */
static mw_status tp_tensor_parts(mw_model *m, int i, int k, const part_sink *sk, float **full, float **scratch,
                                 size_t *cap, mw_status *s, uint32_t *crc) {
    mw_comm *cm = mw_model_tp_comm(m);
    const int R = cm ? cm->rank : 0;
    int ndim, dims[2];
    size_t numel;
    mw_model_tensor_whole(m, i, &ndim, dims, &numel);
    const size_t cols = ndim == 2 ? (size_t)dims[1] : 1;
    const int rows = (int)(numel / cols);
    *crc = 0;
    for (int a = 0, b; a < rows; a = b) {
        b = mw_model_tp_part_end(m, i, a);
        const size_t n = (size_t)(b - a) * cols;
        if (R == 0 && n > *cap) {
            float *nf = realloc(*full, n * sizeof(float)), *ns = nf ? realloc(*scratch, n * sizeof(float)) : NULL;
            if (nf) *full = nf;
            if (ns) *scratch = ns;
            if (!nf || !ns) /* the other ranks wait in the gather: the run ends on this error */
                return mw_fail(MW_ERR_NOMEM, "out of memory gathering tensor %d for a checkpoint", i);
            *cap = n;
        }
        MW_TRY(mw_model_tp_gather_part(m, i, k, a, b, *full, *scratch));
        if (R != 0 || *s != MW_OK || (!sk->w && sk->fd < 0)) continue; /* (a replica that only sends its shard) */
        *s = sk->w ? mw_ckpt_wr(sk->w, *full, n * 4) : pwr(sk->fd, sk->name, *full, n * 4, sk->at + (uint64_t)a * cols * 4);
        *crc = mw_crc32c(*crc, *full, n * 4);
    }
    return MW_OK;
}

/* A stream of an optimizer array's codes (bits 32, 8 or 4 an element) into w, with its crc. */
typedef struct codes {
    mw_ckpt_writer *w;
    int bits, half; /* 4 bits: a low nibble waits in byte */
    unsigned char byte;
    uint32_t crc;
    size_t n;
    unsigned char buf[1 << 16];
} codes;

static mw_status codes_flush(codes *c) {
    if (!c->n) return MW_OK;
    c->crc = mw_crc32c(c->crc, c->buf, c->n);
    const size_t n = c->n;
    c->n = 0;
    return mw_ckpt_wr(c->w, c->buf, n);
}

static mw_status codes_byte(codes *c, unsigned char b) {
    c->buf[c->n++] = b;
    return c->n == sizeof c->buf ? codes_flush(c) : MW_OK;
}

/* n codes (NULL: zeros, the padding between tensors) */
static mw_status codes_put(codes *c, const float *x, size_t n) {
    for (size_t e = 0; e < n; e++) {
        const float v = x ? x[e] : 0.0f;
        if (c->bits == 32) {
            unsigned char b[4];
            memcpy(b, &v, 4);
            for (int k = 0; k < 4; k++) MW_TRY(codes_byte(c, b[k]));
        } else if (c->bits == 8) {
            MW_TRY(codes_byte(c, (unsigned char)v));
        } else if (!c->half) {
            c->byte = (unsigned char)((unsigned)v & 15), c->half = 1;
        } else {
            c->half = 0;
            MW_TRY(codes_byte(c, (unsigned char)(c->byte | ((unsigned)v & 15) << 4)));
        }
    }
    return MW_OK;
}

/* --tp, an optimizer other than AdamW: its three parts as one process stores them (collective):
 * M and V (one process's flat layout of the whole tensors, each tensor gathered a part at a time),
 * then the small state. w: rank 0's writer (NULL on the others); *s its write status (rank 0 keeps
 * gathering after a failed write, so that no rank waits). Returns the gathers' status. */
static mw_status save_tp_state(mw_model *m, mw_ckpt_writer *w, mw_status *s, float **full, float **scratch, size_t *cap) {
    const int nt = mw_model_num_tensors(m);
    size_t *o = NULL;
    mw_status g = mw_model_tp_whole_offsets(m, &o);
    for (int part = 0; part < 3 && g == MW_OK; part++) {
        const int bits = mw_model_state_bits(m, part);
        const uint64_t bytes = mw_model_tp_state_bytes(m, part);
        unsigned char r[SREC];
        put32(r, (uint32_t)part);
        put32(r + 4, (uint32_t)bits);
        put64(r + 8, bytes);
        if (w && *s == MW_OK) *s = mw_ckpt_wr(w, r, SREC);
        if (w && *s == MW_OK) *s = mw_ckpt_wr_crc(w, mw_crc32c(0, r, SREC));
        if (part == 2) {
            float *st = NULL;
            if ((g = mw_model_tp_state_whole(m, &st)) == MW_OK && w && *s == MW_OK) *s = mw_ckpt_wr(w, st, (size_t)bytes);
            if (g == MW_OK && w && *s == MW_OK) *s = mw_ckpt_wr_crc(w, mw_crc32c(0, st, (size_t)bytes));
            free(st);
            break;
        }
        if (!bits) {
            if (w && *s == MW_OK) *s = mw_ckpt_wr_crc(w, 0);
            continue;
        }
        codes *c = w ? calloc(1, sizeof *c) : NULL;
        if (w && !c) {
            g = mw_fail(MW_ERR_NOMEM, "out of memory writing a checkpoint");
            break; /* the other ranks wait in the gather: the run ends on this error */
        }
        if (c) c->w = w, c->bits = bits;
        size_t at = 0; /* elements of the layout written */
        for (int i = 0; i < nt && g == MW_OK; i++) {
            mw_param_info t;
            if ((g = mw_model_tensor_info(m, i, &t, 0)) != MW_OK) break;
            mw_model_tensor_whole(m, i, &t.ndim, t.dims, &t.numel);
            if (c && *s == MW_OK) *s = codes_put(c, NULL, o[i] - at); /* one process's padding */
            at = o[i] + t.numel;
            const size_t cols = t.ndim == 2 ? (size_t)t.dims[1] : 1;
            const int rows = (int)(t.numel / cols);
            for (int a = 0, b; a < rows && g == MW_OK; a = b) {
                b = mw_model_tp_part_end(m, i, a);
                const size_t n = (size_t)(b - a) * cols;
                if (c && n > *cap) {
                    float *nf = realloc(*full, n * sizeof(float)), *ns = nf ? realloc(*scratch, n * sizeof(float)) : NULL;
                    if (nf) *full = nf;
                    if (ns) *scratch = ns;
                    if (!nf || !ns) {
                        g = mw_fail(MW_ERR_NOMEM, "out of memory gathering %s for a checkpoint", t.name);
                        break;
                    }
                    *cap = n;
                }
                g = mw_model_tp_gather_part(m, i, 1 + part, a, b, c ? *full : NULL, c ? *scratch : NULL);
                if (c && g == MW_OK && *s == MW_OK) *s = codes_put(c, *full, n);
            }
        }
        if (c && g == MW_OK && *s == MW_OK) {
            *s = codes_put(c, NULL, o[nt] - at);
            if (*s == MW_OK && c->half) c->half = 0, *s = codes_byte(c, c->byte);
            if (*s == MW_OK) *s = codes_flush(c);
            if (*s == MW_OK) *s = mw_ckpt_wr_crc(w, c->crc);
        }
        free(c);
    }
    free(o);
    return g;
}

/* --tp (mw_ckpt_save_ranks): every tensor gathered whole to rank 0 (collective: every rank runs
 * it), which writes the single-process file. Rank 0 keeps gathering after a failed write, so that
 * no rank waits for it; the ranks then agree, and only a whole file is renamed into place. With
 * --zero 0 replicas (the same state on each), the first replica's group writes; with --zero >= 1
 * the other replicas send it their shards of each part (mw_model_tp_gather_part, shardio.h) and
 * agree with it before and after its rename. */
mw_status mw_ckpt_save_tp(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                         size_t path_len) {
    mw_comm *cm = mw_model_tp_comm(m);
    const mw_config *gc = mw_model_config(m);
    const int zd = gc->dp && gc->world > 1 && gc->zero >= 1; /* sharded replicas: every one takes part */
    mw_comm *dc = zd ? mw_model_comm(m) : NULL;
    if (gc->dp && gc->world > 1 && !zd && gc->rank != 0) { /* --zero 0: every replica holds the same state; the first writes it */
        if (path && path_len) snprintf(path, path_len, "%s/step-%08d.mwck", dir, st->step);
        return MW_OK;
    }
    const int R = cm->rank, nt = mw_model_num_tensors(m), v2 = gc->optim != MW_OPTIM_ADAMW;
    const int wr = R == 0 && (!dc || dc->rank == 0); /* the rank that writes */
    char meta[4096], final[4096], tmp[4200];
    int mlen = 0, fd = -1;
    unsigned char h[HEADER];
    mw_status s = mw_ckpt_head_text(m, st, train_tokens, h, meta, &mlen), g = MW_OK;
    if (!all_same(cm, s == MW_OK ? mw_crc32c((uint32_t)mlen, meta, (size_t)mlen) : 0))
        return mw_fail(MW_ERR_ARG, "the ranks' checkpoint headers differ (a setting given to some ranks only: --keep, "
                                   "--budget, ...): every rank must be given the same command line");
    snprintf(final, sizeof final, "%s/step-%08d.mwck", dir, st->step);
    snprintf(tmp, sizeof tmp, "%s/.step-%08d.mwck.tmp.%d", dir, st->step, (int)getpid());
    if (wr && s == MW_OK) s = mw_mkdirs(dir);
    if (wr && s == MW_OK && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        s = mw_fail(MW_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    mw_ckpt_writer w = {fd, tmp, 0, 0};
    if (wr && s == MW_OK) s = mw_ckpt_wr(&w, h, HEADER);
    if (wr && s == MW_OK) s = mw_ckpt_wr(&w, meta, (size_t)mlen);
    float *full = NULL, *scratch = NULL;
    size_t cap = 0;
    const part_sink sk = {wr ? &w : NULL, -1, tmp, 0};
    for (int i = 0; i < nt && g == MW_OK; i++) {
        mw_param_info t;
        if ((g = mw_model_tensor_info(m, i, &t, 0)) != MW_OK) break;
        mw_model_tensor_whole(m, i, &t.ndim, t.dims, &t.numel);
        unsigned char r[REC + 256];
        size_t rl;
        mw_ckpt_tensor_rec(&t, r, &rl);
        if (wr && s == MW_OK) s = mw_ckpt_wr(&w, r, rl);
        if (wr && s == MW_OK) s = mw_ckpt_wr_crc(&w, mw_crc32c(0, r, rl));
        for (int k = 0; k < (v2 ? 1 : 3) && g == MW_OK; k++) { /* parameters, AdamW's m and v */
            uint32_t crc = 0;
            g = tp_tensor_parts(m, i, k, &sk, &full, &scratch, &cap, &s, &crc);
            if (wr && g == MW_OK && s == MW_OK) s = mw_ckpt_wr_crc(&w, crc);
        }
    }
    if (v2 && g == MW_OK) g = save_tp_state(m, wr ? &w : NULL, &s, &full, &scratch, &cap);
    free(full);
    free(scratch);
    if (s == MW_OK) s = g;
    fault_point(st->step);
    char why[1024];
    snprintf(why, sizeof why, "%s", s == MW_OK ? "" : mw_last_error());
    /* every rank's part done (a failed gather: the ranks cannot agree any more), then the rename */
    mw_comm *const before[2] = {dc, cm}, *const after[2] = {cm, dc};
    int ok = g == MW_OK && all_ok_over(before, 2, s == MW_OK);
    if (wr && ok) {
        s = mw_ckpt_finish(fd, tmp, final, dir, w.off, w.chain);
        fd = -1;
        if (s != MW_OK) snprintf(why, sizeof why, "%s", mw_last_error());
    }
    if (fd >= 0) close(fd);
    if (g == MW_OK) ok = all_ok_over(after, 2, ok && s == MW_OK); /* the writer's rename, to every rank */
    if (!ok && wr) unlink(tmp);
    if (!ok) return mw_fail(s != MW_OK ? s : MW_ERR_IO, "%s", why[0] ? why : "another rank could not take part in the checkpoint (its error is above)");
    if (path) snprintf(path, path_len, "%s", final);
    return MW_OK;
}

static mw_status save_stages(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                             size_t path_len);

mw_status mw_ckpt_save_ranks(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                             size_t path_len) {
    if (mw_pipe_comm(m)) return save_stages(dir, m, st, train_tokens, path, path_len);
    mw_comm *cm = mw_model_comm(m);
    if (!cm) return mw_ckpt_save(dir, m, st, train_tokens, path, path_len);
    if (mw_model_tp(m) > 1) return mw_ckpt_save_tp(dir, m, st, train_tokens, path, path_len);
    const int R = cm->rank, W = cm->size, nt = mw_model_num_tensors(m);
    const mw_config *c = mw_model_config(m);
    const int v2 = c->optim != MW_OPTIM_ADAMW, ncrc = 3 * nt + 3;
    char meta[4096], final[4096], name[4200] = "";
    int mlen = 0, fd = -1;
    unsigned char h[HEADER];
    mw_status s = mw_model_params_settle(m); /* --zero 3: what init or a load wrote, into the shard */
    if (s == MW_OK) s = mw_ckpt_head_text(m, st, train_tokens, h, meta, &mlen);
    if (!all_same(cm, s == MW_OK ? mw_crc32c((uint32_t)mlen, meta, (size_t)mlen) : 0))
        return mw_fail(MW_ERR_ARG, "the ranks' checkpoint headers differ (a setting given to some ranks only: --keep, "
                                   "--budget, ...): every rank must be given the same command line");
    /* rank 0 creates the temporary file; every rank writes its shard's pieces into it */
    snprintf(final, sizeof final, "%s/step-%08d.mwck", dir, st->step);
    if (R == 0 && s == MW_OK) {
        s = mw_mkdirs(dir);
        snprintf(name, sizeof name, "%s/.step-%08d.mwck.tmp.%d", dir, st->step, (int)getpid());
        if (s == MW_OK && (fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
            s = mw_fail(MW_ERR_IO, "cannot create %s: %s", name, strerror(errno));
        if (s != MW_OK) name[0] = 0;
    }
    size_t *cd = calloc((size_t)W * 2, sizeof *cd);
    uint32_t *crc = calloc((size_t)W * (size_t)ncrc, sizeof *crc);
    if (!cd || !crc) {
        free(cd), free(crc);
        if (fd >= 0) close(fd), unlink(name);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    cd[0] = sizeof name; /* the file's name, from rank 0 */
    mw_status g = cm->allgatherv(cm, name, 1, cd, cd + W);
    if (g != MW_OK) s = g;
    if (!name[0] && s == MW_OK) s = mw_fail(MW_ERR_IO, "rank 0 could not create the checkpoint file in %s", dir);
    if (R != 0 && s == MW_OK && (fd = open(name, O_WRONLY | O_CLOEXEC)) < 0)
        s = mw_fail(MW_ERR_IO, "rank %d cannot open %s (is --out on a file system every rank shares?): %s", R, name,
                    strerror(errno));
    size_t lo, hi;
    mw_model_shard(m, &lo, &hi);
    const float *sp = mw_model_shard_params(m);
    uint32_t *mine = crc + (size_t)R * ncrc;
    uint64_t o = HEADER + (uint64_t)mlen;
    for (int i = 0; i < nt && s == MW_OK; i++) { /* records, then each array's piece of the shard */
        mw_param_info t;
        if ((s = mw_model_tensor_info(m, i, &t, 0)) != MW_OK) break;
        o += REC + strlen(t.name) + 4;
        const size_t to = mw_model_tensor_offset(m, i);
        size_t a, b;
        cut(lo, hi, to, to + t.numel, &a, &b);
        if (a < b) {
            s = pwr(fd, name, sp + (a - lo), (b - a) * 4, o + (uint64_t)(a - to) * 4);
            mine[3 * i] = mw_crc32c(0, sp + (a - lo), (b - a) * 4);
        }
        o += t.numel * 4 + 4;
        for (int k = 0; k < 2 && !v2 && s == MW_OK; k++) {
            uint32_t cc = 0;
            for (size_t off = a - to, n; off < b - to && s == MW_OK; off += n) {
                const float *p;
                if ((s = mw_model_moment_view(m, k, i, off, &p, &n)) != MW_OK) break;
                if (off + n > b - to) n = b - to - off;
                s = pwr(fd, name, p, n * 4, o + (uint64_t)off * 4);
                cc = mw_crc32c(cc, p, n * 4);
            }
            mine[3 * i + 1 + k] = cc;
            o += t.numel * 4 + 4;
        }
    }
    for (int part = 0; part < 3 && v2 && s == MW_OK; part++) { /* the optimizer's arrays, by shard */
        const uint64_t bytes = mw_model_state_bytes(m, part);
        o += SREC + 4;
        uint64_t a = 0, b = R == 0 ? bytes : 0;
        if (part < 2) part_bytes(mw_model_flat_floats(m), W, R, mw_model_state_bits(m, part), bytes, &a, &b);
        uint32_t cc = 0;
        for (uint64_t off = a; off < b && s == MW_OK;) {
            const void *p;
            size_t n;
            if ((s = mw_model_state_view(m, part, off, &p, &n)) != MW_OK) break;
            if (off + n > b) n = (size_t)(b - off);
            s = pwr(fd, name, p, n, o + off);
            cc = mw_crc32c(cc, p, n);
            off += n;
        }
        mine[3 * nt + part] = cc;
        o += bytes + 4;
    }
    mw_status d = mw_model_moments_done(m);
    if (s == MW_OK) s = d;
    if (fd >= 0 && R != 0) {
        if (s == MW_OK && fdatasync(fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", name, strerror(errno));
        if (close(fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", name, strerror(errno));
        fd = -1;
    }
    fault_point(st->step);
    char why[1024];
    snprintf(why, sizeof why, "%s", s == MW_OK ? "" : mw_last_error());
    int ok = all_ok(cm, s);
    for (int j = 0; j < W; j++) cd[j] = (size_t)ncrc, cd[W + j] = (size_t)j * ncrc;
    if (ok) ok = cm->allgatherv(cm, crc, sizeof *crc, cd, cd + W) == MW_OK;
    if (R == 0 && ok) { /* the header, the records, every array's CRC from its pieces', the trailer */
        uint32_t chain = 0;
        unsigned char b4[4];
#define PUTCRC(v, at)                                                                              \
    do {                                                                                           \
        put32(b4, (v));                                                                            \
        chain = mw_crc32c(chain, b4, 4);                                                           \
        if (s == MW_OK) s = pwr(fd, name, b4, 4, (at));                                            \
    } while (0)
        s = pwr(fd, name, h, HEADER, 0);
        if (s == MW_OK) s = pwr(fd, name, meta, (size_t)mlen, HEADER);
        o = HEADER + (uint64_t)mlen;
        for (int i = 0; i < nt && s == MW_OK; i++) {
            mw_param_info t;
            if ((s = mw_model_tensor_info(m, i, &t, 0)) != MW_OK) break;
            unsigned char r[REC + 256];
            size_t rl;
            mw_ckpt_tensor_rec(&t, r, &rl);
            s = pwr(fd, name, r, rl, o);
            PUTCRC(mw_crc32c(0, r, rl), o + rl);
            o += rl + 4;
            const size_t to = mw_model_tensor_offset(m, i);
            for (int k = 0; k < (v2 ? 1 : 3); k++) {
                uint32_t cc = 0;
                for (int j = 0; j < W; j++) { /* the pieces in rank order: the record's order */
                    uint64_t zl, zh;
                    size_t a, b;
                    mw_zero_shard(mw_model_flat_floats(m), W, j, &zl, &zh);
                    cut((size_t)zl, (size_t)zh, to, to + t.numel, &a, &b);
                    if (a < b) cc = mw_crc32c_combine(cc, crc[(size_t)j * ncrc + 3 * i + k], (uint64_t)(b - a) * 4);
                }
                o += t.numel * 4;
                PUTCRC(cc, o);
                o += 4;
            }
        }
        for (int part = 0; part < 3 && v2 && s == MW_OK; part++) {
            const uint64_t bytes = mw_model_state_bytes(m, part);
            unsigned char r[SREC];
            put32(r, (uint32_t)part);
            put32(r + 4, (uint32_t)mw_model_state_bits(m, part));
            put64(r + 8, bytes);
            s = pwr(fd, name, r, SREC, o);
            PUTCRC(mw_crc32c(0, r, SREC), o + SREC);
            o += SREC + 4;
            uint32_t cc = 0;
            for (int j = 0; j < W; j++) {
                uint64_t a = 0, b = j == 0 ? bytes : 0;
                if (part < 2) part_bytes(mw_model_flat_floats(m), W, j, mw_model_state_bits(m, part), bytes, &a, &b);
                if (a < b) cc = mw_crc32c_combine(cc, crc[(size_t)j * ncrc + 3 * nt + part], b - a);
            }
            o += bytes;
            PUTCRC(cc, o);
            o += 4;
        }
#undef PUTCRC
        if (s == MW_OK) s = mw_ckpt_finish(fd, name, final, dir, o, chain);
        else close(fd);
        fd = -1;
        if (s != MW_OK) snprintf(why, sizeof why, "%s", mw_last_error());
    }
    if (fd >= 0) close(fd);
    if (ok) ok = all_ok(cm, s); /* rank 0's rename */
    if (!ok && R == 0) unlink(name);
    free(cd);
    free(crc);
    if (!ok) return mw_fail(MW_ERR_IO, "%s", why[0] ? why : "another rank could not write its part of the checkpoint (its error is above)");
    if (path) snprintf(path, path_len, "%s", final);
    return MW_OK;
}

/* ---- a pipeline's stages (src/dist/pipeline.c) ------------------------------------------------
 * A stage holds a run of the single-process table (tensors tensor_base ..) and of the flat buffer
 * (elements g0 ..): it writes their records, data and CRCs where the single-process file has them,
 * and its piece of each optimizer array (M, V: its elements' bytes; the small state: its tensors',
 * which the single-process state lays out tensor after tensor). Stage 0 writes the header, the
 * arrays' records and the trailer, whose chain of CRCs is the stages' chains combined in order.
 * So the file is mw_ckpt_save's of one process holding the same state, byte for byte. */

enum { ST_NT, ST_SEC, ST_FLAT, ST_B0, ST_B1, ST_B2, ST_B3, ST_N }; /* B2, B3: the small state's two runs */

/* k values of every stage into all[j * k + i] (collective over pc) */
static mw_status gather_vals(mw_comm *pc, const uint64_t *mine, int k, uint64_t *all) {
    size_t *cd = calloc((size_t)pc->size * 2, sizeof *cd);
    if (!cd) return mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int j = 0; j < pc->size; j++) cd[j] = (size_t)k, cd[pc->size + j] = (size_t)(j * k);
    memcpy(all + (size_t)pc->rank * k, mine, sizeof *mine * (size_t)k);
    mw_status s = pc->allgatherv(pc, all, sizeof *all, cd, cd + pc->size);
    free(cd);
    return s;
}

/* This stage's figures (ST_*) */
static mw_status stage_figures(const mw_model *m, int v2, uint64_t f[ST_N]) {
    const int nt = mw_model_num_tensors(m);
    f[ST_NT] = (uint64_t)nt, f[ST_SEC] = 0, f[ST_FLAT] = mw_model_flat_floats(m);
    for (int i = 0; i < nt; i++) {
        mw_param_info t;
        MW_TRY(mw_model_tensor_info(m, i, &t, 0));
        if (mw_model_tp(m) > 1) mw_model_tensor_whole(m, i, &t.ndim, t.dims, &t.numel); /* --tp: the whole tensor's */
        f[ST_SEC] += REC + strlen(t.name) + 4 + (t.numel * 4 + 4) * (v2 ? 1 : 3);
    }
    for (int p = 0; p < 3; p++) f[ST_B0 + p] = v2 ? mw_model_state_bytes(m, p) : 0;
    f[ST_B3] = v2 ? f[ST_B2] - mw_pipe_state_run0(m) : 0;
    f[ST_B2] -= f[ST_B3];
    return MW_OK;
}

/* --pp with --zero >= 1: bytes [off, off + n) of array a (shardio.h) of the stage, gathered a
 * window (win, BUF bytes) at a time from its replicas to replica 0 (wrt), which writes them at byte
 * at of fd while *s is MW_OK; *crc their CRC (the writer's). Collective over the replicas; returns
 * the gathers' status (a failed write does not stop them: no replica waits for one that never comes). */
static mw_status zero_parts(mw_model *m, int a, uint64_t off, uint64_t n, int wrt, int fd, const char *name, uint64_t at,
                            char *win, mw_status *s, uint32_t *crc) {
    *crc = 0;
    if (wrt && !win) /* the replicas wait in their sends: the run ends on this error */
        return mw_fail(MW_ERR_NOMEM, "out of memory gathering a checkpoint's shards");
    for (uint64_t d = 0; d < n;) {
        const size_t k = n - d < BUF ? (size_t)(n - d) : BUF;
        MW_TRY(mw_shardio_gather(m, a, off + d, k, wrt ? win : NULL));
        if (wrt && *s == MW_OK) *s = pwr(fd, name, win, k, at + d);
        if (wrt) *crc = mw_crc32c(*crc, win, k);
        d += k;
    }
    return MW_OK;
}

static mw_status save_stages(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                             size_t path_len) {
    mw_comm *pc = mw_pipe_comm(m);
    const int S = pc->rank, P = pc->size, nt = mw_model_num_tensors(m);
    const mw_config *gc = mw_pipe_global_config(m);
    const int v2 = gc->optim != MW_OPTIM_ADAMW;
    /* --zero >= 1 over D replicas: each stage's replica 0 writes, gathering from the others what
     * they shard (shardio.h); --zero 0: every replica holds the same state, the first writes it */
    const int zd = gc->dp && gc->world > 1 && gc->zero >= 1;
    mw_comm *dc = zd ? mw_model_comm(m) : NULL;
    if (gc->dp && gc->rank != 0 && !zd) {
        if (path && path_len) snprintf(path, path_len, "%s/step-%08d.mwck", dir, st->step);
        return MW_OK;
    }
    /* --tp: each stage's tensors gathered to its tensor-parallel rank 0, which writes (wrt); the
     * other ranks of the group take part in the gathers and in their own pipeline's agreements */
    mw_comm *tc = mw_model_tp_comm(m);
    const int tpw = mw_model_tp(m) > 1, wrt = (!tc || tc->rank == 0) && (!dc || dc->rank == 0);
    const int coll = tpw || zd; /* the tensors' loop gathers: it goes on after a failed write */
    if (tpw && v2)
        return mw_fail(MW_ERR_ARG, "--tp with --pp and --optim %s: a checkpoint of the optimizer's sharded state is not "
                       "built yet (adamw saves)", mw_optim_str(gc->optim));
    uint64_t mine[ST_N], *all = calloc((size_t)P * ST_N, sizeof *all), ex[6] = {0}, *exa = calloc((size_t)P * 6, sizeof *exa);
    /* ex: this stage's chain of CRCs and its bytes, then its pieces' CRCs (M, V, the small state's two runs) */
    char meta[4096], final[4096], name[4200] = "", why[1024] = "";
    unsigned char h[HEADER];
    int mlen = 0, fd = -1;
    char *win = zd && wrt ? malloc(BUF) : NULL; /* --zero: the gathered windows */
    mw_status s = all && exa && (win || !zd || !wrt) ? stage_figures(m, v2, mine) : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (s == MW_OK && zd && gc->zero >= 3) s = mw_model_params_settle(m); /* what init or a load wrote, into the shard */
    mw_status g = s == MW_OK ? gather_vals(pc, mine, ST_N, all) : s;
    if (s == MW_OK) s = g;
    uint64_t NT = 0, tens_end = 0, B[4] = {0, 0, 0, 0}, pre[4] = {0, 0, 0, 0}, o = 0;
    for (int j = 0; j < P && s == MW_OK; j++) {
        NT += all[j * ST_N + ST_NT];
        for (int p = 0; p < 4; p++) B[p] += all[j * ST_N + ST_B0 + p], pre[p] += j < S ? all[j * ST_N + ST_B0 + p] : 0;
    }
    pre[3] += B[2], B[2] += B[3]; /* the small state: run 0's pieces, then run 1's; B[2] its bytes */
    if (s == MW_OK) s = mw_ckpt_head_text_of(gc, (int)NT, st, train_tokens, h, meta, &mlen);
    if (!all_same(pc, s == MW_OK ? mw_crc32c((uint32_t)mlen, meta, (size_t)mlen) : 0) && s == MW_OK)
        s = mw_fail(MW_ERR_ARG, "the stages' checkpoint headers differ: every rank must be given the same command line");
    if (s == MW_OK) {
        tens_end = o = HEADER + (uint64_t)mlen;
        for (int j = 0; j < P; j++) tens_end += all[j * ST_N + ST_SEC], o += j < S ? all[j * ST_N + ST_SEC] : 0;
    }
    snprintf(final, sizeof final, "%s/step-%08d.mwck", dir, st->step);
    if (S == 0 && wrt && s == MW_OK) {
        s = mw_mkdirs(dir);
        snprintf(name, sizeof name, "%s/.step-%08d.mwck.tmp.%d", dir, st->step, (int)getpid());
        if (s == MW_OK && (fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
            s = mw_fail(MW_ERR_IO, "cannot create %s: %s", name, strerror(errno));
        if (s != MW_OK) name[0] = 0;
    }
    size_t cd[2 * 64];
    if (P > 64) s = mw_fail(MW_ERR_ARG, "a pipeline of more than 64 stages saves no checkpoint yet");
    for (int j = 0; j < P && P <= 64; j++) cd[j] = j ? 0 : sizeof name, cd[P + j] = 0;
    if (P <= 64 && (g = pc->allgatherv(pc, name, 1, cd, cd + P)) != MW_OK) s = g;
    if (wrt && !name[0] && s == MW_OK) s = mw_fail(MW_ERR_IO, "stage 0 could not create the checkpoint file in %s", dir);
    if (S != 0 && wrt && s == MW_OK && (fd = open(name, O_WRONLY | O_CLOEXEC)) < 0)
        s = mw_fail(MW_ERR_IO, "stage %d cannot open %s (is --out on a file system every rank shares?): %s", S, name,
                    strerror(errno));
    uint32_t chain = 0; /* this stage's CRCs, as the trailer chains them */
    uint64_t clen = 0;
    unsigned char b4[4];
#define CHAIN(v, at)                                                                               \
    do {                                                                                           \
        put32(b4, (v));                                                                            \
        chain = mw_crc32c(chain, b4, 4), clen += 4;                                                \
        if (s == MW_OK && wrt) s = pwr(fd, name, b4, 4, (at));                                     \
    } while (0)
    float *full = NULL, *scratch = NULL; /* --tp: the writer's part buffers */
    size_t cap = 0;
    mw_status gt = MW_OK; /* --tp: the gathers' (every rank of the group runs each; a write error does not stop them) */
    for (int i = 0; i < nt && (coll ? gt == MW_OK : s == MW_OK); i++) {
        mw_param_info t;
        if ((gt = mw_model_tensor_info(m, i, &t, 0)) != MW_OK) break;
        if (tpw) mw_model_tensor_whole(m, i, &t.ndim, t.dims, &t.numel);
        unsigned char r[REC + 256];
        size_t rl;
        mw_ckpt_tensor_rec(&t, r, &rl);
        if (s == MW_OK && wrt) s = pwr(fd, name, r, rl, o);
        CHAIN(mw_crc32c(0, r, rl), o + rl);
        o += rl + 4;
        for (int k = 0; k < 3 && tpw && gt == MW_OK; k++) { /* parameters, AdamW's m and v */
            uint32_t cc = 0;
            const part_sink sk = {NULL, fd, name, o};
            gt = tp_tensor_parts(m, i, k, &sk, &full, &scratch, &cap, &s, &cc);
            CHAIN(cc, o + t.numel * 4);
            o += t.numel * 4 + 4;
        }
        if (tpw) continue;
        const uint64_t fo = (uint64_t)mw_model_tensor_offset(m, i) * 4; /* its bytes in the stage's arrays */
        if (zd && mw_shardio_sharded(m, MW_SHARDIO_PARAMS)) { /* --zero 3: from the replicas' shards */
            uint32_t cc = 0;
            gt = zero_parts(m, MW_SHARDIO_PARAMS, fo, t.numel * 4, wrt, fd, name, o, win, &s, &cc);
            CHAIN(cc, o + t.numel * 4);
        } else if (wrt) {
            const float *data;
            if (s == MW_OK) s = mw_model_param_view(m, i, &data);
            if (s == MW_OK) s = pwr(fd, name, data, t.numel * 4, o);
            CHAIN(s == MW_OK ? mw_crc32c(0, data, t.numel * 4) : 0, o + t.numel * 4);
        }
        o += t.numel * 4 + 4;
        for (int k = 0; k < 2 && !v2 && zd && gt == MW_OK; k++) { /* AdamW's m and v, from the replicas' shards */
            uint32_t cc = 0;
            gt = zero_parts(m, k, fo, t.numel * 4, wrt, fd, name, o, win, &s, &cc);
            CHAIN(cc, o + t.numel * 4);
            o += t.numel * 4 + 4;
        }
        for (int k = 0; k < 2 && !v2 && !zd && s == MW_OK; k++) {
            uint32_t cc = 0;
            for (size_t off = 0, n; off < t.numel && s == MW_OK; off += n) {
                const float *p;
                if ((s = mw_model_moment_view(m, k, i, off, &p, &n)) != MW_OK) break;
                s = pwr(fd, name, p, n * 4, o + (uint64_t)off * 4);
                cc = mw_crc32c(cc, p, n * 4);
            }
            CHAIN(cc, o + t.numel * 4);
            o += t.numel * 4 + 4;
        }
    }
#undef CHAIN
    free(full), free(scratch);
    if (s == MW_OK) s = gt;
    ex[0] = chain, ex[1] = clen;
    for (int run = 0; run < 4 && v2 && (zd ? gt == MW_OK : s == MW_OK); run++) { /* this stage's pieces of each array */
        const int part = run < 3 ? run : 2;
        uint64_t at = tens_end + SREC + 4 + pre[run], from = run == 3 ? mine[ST_B2] : 0;
        for (int q = 0; q < part; q++) at += SREC + 4 + B[q] + 4;
        uint32_t cc = 0;
        if (zd && part < 2) /* M and V: from the replicas' shards (the small state: every replica's is the same) */
            gt = zero_parts(m, part, 0, mine[ST_B0 + run], wrt, fd, name, at, win, &s, &cc);
        for (uint64_t off = 0; off < mine[ST_B0 + run] && s == MW_OK && wrt && !(zd && part < 2);) {
            const void *p;
            size_t n;
            if ((s = mw_model_state_view(m, part, from + off, &p, &n)) != MW_OK) break;
            if (off + n > mine[ST_B0 + run]) n = (size_t)(mine[ST_B0 + run] - off);
            s = pwr(fd, name, p, n, at + off);
            cc = mw_crc32c(cc, p, n);
            off += n;
        }
        ex[2 + run] = cc;
    }
    mw_status d = mw_model_moments_done(m);
    if (s == MW_OK) s = d;
    free(win);
    if (fd >= 0 && S != 0) {
        if (s == MW_OK && fdatasync(fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", name, strerror(errno));
        if (close(fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", name, strerror(errno));
        fd = -1;
    }
    fault_point(st->step);
    snprintf(why, sizeof why, "%s", s == MW_OK ? "" : mw_last_error());
    /* the stage's replicas, its tensor-parallel group, then the pipeline: every rank's part done */
    mw_comm *const stage_groups[2] = {dc, tc};
    int ok = gt != MW_OK ? 0 : all_ok_over(stage_groups, 2, s == MW_OK);
    ok = all_ok(pc, ok ? MW_OK : MW_ERR_IO);
    if (ok) ok = gather_vals(pc, ex, 6, exa) == MW_OK;
    if (S == 0 && wrt && ok) { /* the header, the chain of the stages' CRCs, the arrays' records and CRCs, the trailer */
        uint32_t ch = 0;
        for (int j = 0; j < P; j++) ch = mw_crc32c_combine(ch, (uint32_t)exa[j * 6], exa[j * 6 + 1]);
        s = pwr(fd, name, h, HEADER, 0);
        if (s == MW_OK) s = pwr(fd, name, meta, (size_t)mlen, HEADER);
        o = tens_end;
        for (int part = 0; part < 3 && v2 && s == MW_OK; part++) {
            unsigned char r[SREC];
            put32(r, (uint32_t)part);
            put32(r + 4, (uint32_t)mw_model_state_bits(m, part));
            put64(r + 8, B[part]);
            s = pwr(fd, name, r, SREC, o);
            uint32_t cc = 0;
            for (int run = part; run < (part == 2 ? 4 : part + 1); run++)
                for (int j = 0; j < P; j++) cc = mw_crc32c_combine(cc, (uint32_t)exa[j * 6 + 2 + run], all[j * ST_N + ST_B0 + run]);
            const uint32_t two[2] = {mw_crc32c(0, r, SREC), cc};
            for (int q = 0; q < 2 && s == MW_OK; q++) {
                put32(b4, two[q]);
                ch = mw_crc32c(ch, b4, 4);
                s = pwr(fd, name, b4, 4, q ? o + SREC + 4 + B[part] : o + SREC);
            }
            o += SREC + 4 + B[part] + 4;
        }
        if (s == MW_OK) s = mw_ckpt_finish(fd, name, final, dir, o, ch);
        else close(fd);
        fd = -1;
        if (s != MW_OK) snprintf(why, sizeof why, "%s", mw_last_error());
    }
    if (fd >= 0) close(fd);
    if (ok) ok = all_ok(pc, s); /* stage 0's rename */
    mw_comm *const back[2] = {tc, dc}; /* ... to the other ranks of each group */
    if (gt == MW_OK) ok = all_ok_over(back, 2, ok);
    if (!ok && S == 0 && wrt && name[0]) unlink(name);
    free(all), free(exa);
    if (!ok) return mw_fail(MW_ERR_IO, "%s", why[0] ? why : "another stage could not write its part of the checkpoint (its error is above)");
    if (path) snprintf(path, path_len, "%s", final);
    return MW_OK;
}

/* pread of n bytes at off, and the CRC-32C stored after them checked */
static mw_status pread_crc(int fd, const char *path, void *buf, size_t n, uint64_t off, const char *what) {
    char *p = buf;
    for (size_t k = 0; k < n;) {
        ssize_t r = pread(fd, p + k, n - k, (off_t)(off + k));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return mw_fail(MW_ERR_IO, "cannot read %s: %s", path, r < 0 ? strerror(errno) : "truncated");
        k += (size_t)r;
    }
    unsigned char c[4];
    if (pread(fd, c, 4, (off_t)(off + n)) != 4) return mw_fail(MW_ERR_IO, "cannot read %s", path);
    if (get32(c) != mw_crc32c(0, buf, n)) return mw_fail(MW_ERR_FORMAT, "%s: %s changed while it was read", path, what);
    return MW_OK;
}

/* --tp: this rank's shard of tensor i's array of numel floats at off (its CRC-32C after it, checked),
 * read a window (win, BUF bytes) at a time: no whole tensor in memory */
static mw_status pread_shard(int fd, const char *path, const mw_model *m, int i, float *dst, uint64_t numel, uint64_t off,
                             const char *what, char *win) {
    uint32_t crc = 0;
    for (uint64_t done = 0; done < numel * 4;) {
        const size_t k = numel * 4 - done < BUF ? (size_t)(numel * 4 - done) : BUF;
        for (size_t got = 0; got < k;) {
            ssize_t r = pread(fd, win + got, k - got, (off_t)(off + done + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return mw_fail(MW_ERR_IO, "cannot read %s: %s", path, r < 0 ? strerror(errno) : "truncated");
            got += (size_t)r;
        }
        crc = mw_crc32c(crc, win, k);
        mw_model_tp_take_part(m, i, (const float *)(void *)win, done / 4, k / 4, dst);
        done += k;
    }
    unsigned char c[4];
    if (pread(fd, c, 4, (off_t)(off + numel * 4)) != 4) return mw_fail(MW_ERR_IO, "cannot read %s", path);
    if (get32(c) != crc) return mw_fail(MW_ERR_FORMAT, "%s: %s changed while it was read", path, what);
    return MW_OK;
}

/* AdamW's moment which (0 m, 1 v) of tensor i where it is not in memory (the disk tier, or sharded
 * over --zero's replicas: the other replicas' elements are read and dropped): the file's
 * whole tensor of numel floats at off (its CRC-32C after it, checked) read a window (win, BUF bytes)
 * at a time, this rank's elements taken through the moment's windows (any --tp, 1 included) */
static mw_status pread_moment(int fd, const char *path, mw_model *m, int i, int which, uint64_t numel, uint64_t off,
                              const char *what, char *win) {
    uint32_t crc = 0;
    for (uint64_t done = 0; done < numel * 4;) {
        const size_t k = numel * 4 - done < BUF ? (size_t)(numel * 4 - done) : BUF;
        for (size_t got = 0; got < k;) {
            ssize_t r = pread(fd, win + got, k - got, (off_t)(off + done + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return mw_fail(MW_ERR_IO, "cannot read %s: %s", path, r < 0 ? strerror(errno) : "truncated");
            got += (size_t)r;
        }
        crc = mw_crc32c(crc, win, k);
        MW_TRY(mw_model_tp_take_moment(m, i, which, (const float *)(void *)win, done / 4, k / 4));
        done += k;
    }
    unsigned char c[4];
    if (pread(fd, c, 4, (off_t)(off + numel * 4)) != 4) return mw_fail(MW_ERR_IO, "cannot read %s", path);
    if (get32(c) != crc) return mw_fail(MW_ERR_FORMAT, "%s: %s changed while it was read", path, what);
    return MW_OK;
}

/* A stage's run of a single-process checkpoint (collective over the stages: every stage verifies
 * the whole file, then reads its tensors and its pieces of the optimizer's arrays). */
mw_status mw_ckpt_load_stage(const char *path, mw_model *m, mw_ckpt_info *info, int params_only) {
    mw_comm *pc = mw_pipe_comm(m);
    const mw_config *gc = mw_pipe_global_config(m);
    const int S = pc->rank, P = pc->size, nt = mw_model_num_tensors(m), tb = mw_pipe_tensor_base(m);
    const int v2 = gc->optim != MW_OPTIM_ADAMW;
    mw_ckpt_index idx = {0, calloc(MW_CKPT_MAX_INDEX, sizeof(mw_ckpt_entry))};
    uint64_t mine[ST_N], *all = calloc((size_t)P * ST_N, sizeof *all);
    int fd = -1;
    mw_status s = idx.e && all ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (s == MW_OK) s = mw_ckpt_index_read(path, info, &idx);
    const mw_config *k = &info->cfg;
    if (s == MW_OK && (k->arch != gc->arch || k->n_layer != gc->n_layer || k->n_head != gc->n_head ||
                       k->n_embd != gc->n_embd || k->vocab != gc->vocab || k->ctx != gc->ctx))
        s = mw_fail(MW_ERR_ARG, "%s: a %s of %d layers, %d heads, %d channels, vocabulary %d, context %d; this run's "
                    "model differs", path, mw_arch_name(k->arch), k->n_layer, k->n_head, k->n_embd, k->vocab, k->ctx);
    if (s == MW_OK && !params_only && k->optim != gc->optim)
        s = mw_fail(MW_ERR_ARG, "%s holds --optim %s state, this run is --optim %s (--reset-optimizer keeps the parameters)",
                    path, mw_optim_str(k->optim), mw_optim_str(gc->optim));
    if (s == MW_OK) s = stage_figures(m, v2, mine);
    mw_status g = gather_vals(pc, mine, ST_N, all); /* collective: every stage reaches it */
    if (s == MW_OK) s = g;
    uint64_t NT = 0, B[4] = {0, 0, 0, 0}, pre[4] = {0, 0, 0, 0};
    for (int j = 0; j < P && s == MW_OK; j++) {
        NT += all[j * ST_N + ST_NT];
        for (int p = 0; p < 4; p++) B[p] += all[j * ST_N + ST_B0 + p], pre[p] += j < S ? all[j * ST_N + ST_B0 + p] : 0;
    }
    pre[3] += B[2], B[2] += B[3];
    if (s == MW_OK && ((uint64_t)idx.n != NT || tb < 0 || tb + nt > idx.n))
        s = mw_fail(MW_ERR_ARG, "%s: %d tensors, the stages of this run hold %llu (stage %d: %d from %d)", path, idx.n,
                    (unsigned long long)NT, S, nt, tb);
    if (s == MW_OK && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        s = mw_fail(MW_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    const int tpw = mw_model_tp(m) > 1;
    if (s == MW_OK && tpw && v2 && !params_only)
        s = mw_fail(MW_ERR_ARG, "--tp with --pp and --optim %s: resuming the optimizer's sharded state is not built yet",
                    mw_optim_str(gc->optim));
    char *win = malloc(BUF); /* --tp, moments on the disk tier: the file a window at a time, this rank's elements taken */
    if (!win && s == MW_OK) s = mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt && s == MW_OK; i++) {
        const mw_ckpt_entry *e = &idx.e[tb + i];
        mw_param_info t;
        if ((s = mw_model_tensor(m, i, &t)) != MW_OK) break;
        if (tpw) mw_model_tensor_whole(m, i, &t.ndim, t.dims, &t.numel);
        if (strcmp(t.name, e->name) != 0 || t.numel != e->numel || t.ndim != e->ndim || t.dims[0] != e->dims[0] ||
            (t.ndim == 2 && t.dims[1] != e->dims[1])) {
            s = mw_fail(MW_ERR_ARG, "%s: tensor %s does not match stage %d's tensor %s", path, e->name, S, t.name);
            break;
        }
        float *dst[3] = {t.data, params_only || v2 ? NULL : t.m, params_only || v2 ? NULL : t.v};
        for (int b = 0; b < 3 && s == MW_OK; b++) {
            const uint64_t at = e->offset + (uint64_t)b * (e->numel * 4 + 4);
            if (dst[b] && tpw)
                s = pread_shard(fd, path, m, i, dst[b], e->numel, at, e->name, win);
            else if (dst[b])
                s = pread_crc(fd, path, dst[b], e->numel * 4, at, e->name);
            else if (b > 0 && !params_only && !v2) /* AdamW's moment not in memory: on the disk tier or sharded over
                                                     * the replicas (--zero >= 1), any --tp (1 included) */
                s = pread_moment(fd, path, m, i, b - 1, e->numel, at, e->name, win);
        }
    }
    free(win);
    if (s == MW_OK && v2 && !params_only) {
        const mw_ckpt_entry *e = &idx.e[idx.n - 1];
        uint64_t o = e->offset + e->numel * 4 + 4;
        for (int part = 0; part < 3 && s == MW_OK; part++) {
            unsigned char r[SREC];
            if (pread(fd, r, SREC, (off_t)o) != SREC) s = mw_fail(MW_ERR_IO, "cannot read %s", path);
            if (s == MW_OK && (get64(r + 8) != B[part] || get32(r + 4) != (uint32_t)mw_model_state_bits(m, part)))
                s = mw_fail(MW_ERR_ARG, "%s: the optimizer's array %d has %llu bytes of %u bits, this run's stages %llu of %d",
                            path, part, (unsigned long long)get64(r + 8), get32(r + 4), (unsigned long long)B[part],
                            mw_model_state_bits(m, part));
            for (int run = part; run < (part == 2 ? 4 : part + 1); run++) {
                const uint64_t from = run == 3 ? mine[ST_B2] : 0;
                for (uint64_t off = 0; off < mine[ST_B0 + run] && s == MW_OK;) {
                    void *p;
                    size_t n;
                    if ((s = mw_model_state_map(m, part, from + off, &p, &n)) != MW_OK) break;
                    if (off + n > mine[ST_B0 + run]) n = (size_t)(mine[ST_B0 + run] - off);
                    const ssize_t rr = pread(fd, p, n, (off_t)(o + SREC + 4 + pre[run] + off));
                    if (rr != (ssize_t)n) s = mw_fail(MW_ERR_IO, "cannot read %s", path);
                    off += n;
                }
            }
            o += SREC + 4 + B[part] + 4;
        }
    }
    if (fd >= 0) close(fd);
    mw_status d = mw_model_moments_done(m);
    if (s == MW_OK) s = d;
    free(idx.e), free(all);
    return s;
}
