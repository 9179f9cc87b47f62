/* Checkpoints: crash-safe save, full verification, load. Format (little-endian):
 *
 *   header   32 B   magic "MWCKPT\0\0", u32 version, u32 meta_len, u32 meta_crc, u32 n_tensors,
 *                   u32 crc of the header's first 24 bytes, u32 reserved (0)
 *   meta     meta_len B of "key=value\n" text: the configuration and the run state
 *   tensor   24 B   u32 name_len, u32 ndim, u32 dim0, u32 dim1, u64 numel
 *            name_len B name, u32 crc of the 24 B and the name
 *            3 x (numel*4 B float32 data, u32 crc): parameters, AdamW m, AdamW v
 *            (version 2, any other optimizer: the parameters alone)
 *   state    version 2 only, 3 parts (the optimizer's arrays M and V, its small state):
 *            16 B u32 part, u32 bits per element (0 for the small state), u64 bytes; u32 crc of
 *            the 16 B; the bytes as the model stores them, u32 crc
 *   trailer  24 B   magic "MWCKEND\0", u64 file length, u32 crc of every crc above, u32 0
 *
 * Writing streams straight from the model's memory; reading verifies with one 1 MiB buffer. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/crc32c.h"
#include "../core/fsutil.h"
#include "../core/status.h"
#include "../graph/model.h"
#include "checkpoint.h"

#define VERSION 1   /* AdamW's checkpoints, as before other optimizers */
#define VERSION2 2  /* every other optimizer's */
#define SREC 16
#define HEADER 32
#define TRAILER 24
#define REC 24
#define MAX_META (1 << 20)
#define MAX_TENSORS (1 << 20)
#define BUF (1 << 20)
static const char MAGIC[8] = {'M', 'W', 'C', 'K', 'P', 'T', 0, 0};
static const char END[8] = {'M', 'W', 'C', 'K', 'E', 'N', 'D', 0};

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i);
}
static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}
static uint32_t get32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

/* ---- writing --------------------------------------------------------------------------------- */

typedef struct writer {
    int fd;
    const char *path;
    uint64_t off;
    uint32_t chain; /* crc of every crc written */
} writer;

static mw_status wr(writer *w, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(w->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return mw_fail(MW_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
        p += k;
        n -= (size_t)k;
        w->off += (uint64_t)k;
    }
    return MW_OK;
}

static mw_status wr_crc(writer *w, uint32_t crc) {
    unsigned char b[4];
    put32(b, crc);
    w->chain = mw_crc32c(w->chain, b, 4);
    return wr(w, b, 4);
}

static int meta_text(char *buf, size_t n, const mw_config *c, const mw_run_state *st,
                     uint64_t train_tokens) {
    int k = snprintf(buf, n,
                     "format=memwall-checkpoint\nmodel=%s\nn_layer=%d\nn_head=%d\nn_embd=%d\n"
                     "vocab=%d\nctx=%d\nbatch=%d\nseq=%d\naccum=%d\nsteps=%d\nwarmup=%d\n"
                     "lr=%.17g\nmin_lr_frac=%.17g\nbeta1=%.17g\nbeta2=%.17g\neps=%.17g\n"
                     "weight_decay=%.17g\ngrad_clip=%.17g\nseed=%" PRIu64 "\neval_every=%d\n"
                     "eval_batches=%d\nstep=%d\nloader_rng=%" PRIu64 "\ntrain_tokens=%" PRIu64 "\n",
                     mw_arch_name(c->arch), c->n_layer, c->n_head, c->n_embd, c->vocab, c->ctx, c->batch,
                     c->seq, c->accum * (c->dp ? c->world : 1) /* the step's micro-batches over all ranks */, c->steps, c->warmup, c->lr, c->min_lr_frac, c->beta1, c->beta2,
                     c->eps, c->weight_decay, c->grad_clip, c->seed, c->eval_every, c->eval_batches,
                     st->step, st->loader_rng, train_tokens);
    if (c->arch != MW_ARCH_GPT2 && k >= 0 && (size_t)k < n) /* the Llama family's own shape (and the deepseek's) */
        k += snprintf(buf + k, n - (size_t)k,
                      "n_kv_head=%d\nffn=%d\ntied=%d\nrope_theta=%.17g\nnorm_eps=%.17g\n", c->n_kv_head,
                      c->ffn, c->tied, c->rope_theta, c->norm_eps);
    if (c->arch == MW_ARCH_DEEPSEEK && k >= 0 && (size_t)k < n) /* its experts and latent attention */
        k += snprintf(buf + k, n - (size_t)k,
                      "n_experts=%d\nn_experts_tok=%d\nn_shared=%d\nmoe_ffn=%d\nfirst_dense=%d\nmoe_gate=%d\n"
                      "norm_topk=%d\ncapacity_factor=%.17g\nrouted_scale=%.17g\nq_lora_rank=%d\nkv_lora_rank=%d\n"
                      "qk_rope_dim=%d\nqk_nope_dim=%d\nv_head_dim=%d\n",
                      c->n_experts, c->n_experts_tok, c->n_shared, c->moe_ffn, c->first_dense, c->moe_gate,
                      c->norm_topk, c->capacity_factor, c->routed_scale, c->q_lora_rank, c->kv_lora_rank,
                      c->qk_rope_dim, c->qk_nope_dim, c->v_head_dim);
    if (c->arch == MW_ARCH_GPT2 && c->norm_eps > 0 && k >= 0 && (size_t)k < n) /* an imported LayerNorm epsilon */
        k += snprintf(buf + k, n - (size_t)k, "norm_eps=%.17g\n", c->norm_eps);
    if (c->optim != MW_OPTIM_ADAMW && k >= 0 && (size_t)k < n) /* version 2: the optimizer */
        k += snprintf(buf + k, n - (size_t)k,
                      "optim=%s\nmomentum=%.17g\nbeta3=%.17g\neps2=%.17g\nclip_threshold=%.17g\n"
                      "decay_rate=%.17g\n",
                      mw_optim_str(c->optim), c->momentum, c->beta3, c->eps2, c->clip_threshold, c->decay_rate);
    if (c->precision != MW_PRECISION_FP32 && k >= 0 && (size_t)k < n) /* fp32's checkpoints as before */
        k += snprintf(buf + k, n - (size_t)k, "precision=%s\n", mw_precision_str(c->precision));
    /* the products' numerics family where it is not the FMA family's (issue 36): the FMA family's
     * checkpoints as before */
    const char *fam = mw_numerics_family(c->precision);
    if (strcmp(fam, "fma") != 0 && k >= 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, "numerics=%s\n", fam);
    /* stored activations quantised (issue 38) change the numbers: the uncompressed run's as before */
    if (c->act_compress && k >= 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, "act_compress=%d\n", c->act_compress);
    char w[MW_ACT_LAYERS_MAX]; /* ... per block (--act-layers, or --recompute auto's choice): its widths */
    mw_act_layers_widths(c->act_layers, w, sizeof w);
    if (w[0] && k >= 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, "act_layers=%s\n", w);
    return k;
}

/* The --recompute value that gives c's policy ("every:sqrt", "blocks:ffsn"). */
static void recompute_text(const mw_config *c, char *buf, size_t n) {
    static const char *names[] = {"none", "selective", "full", "every", "auto", "blocks"};
    if (c->recompute == MW_RECOMPUTE_EVERY && c->recompute_every > 0)
        snprintf(buf, n, "every:%d", c->recompute_every);
    else if (c->recompute == MW_RECOMPUTE_EVERY)
        snprintf(buf, n, "every:sqrt");
    else if (c->recompute == MW_RECOMPUTE_BLOCKS)
        snprintf(buf, n, "blocks:%s", c->recompute_blocks);
    else
        snprintf(buf, n, "%s", names[c->recompute]);
}

/* Settings that leave the numbers unchanged but that a resume carries over unless given again:
 * checkpoint cadence, --keep, --budget and --recompute. Checkpoints before these keys were
 * added still load (mw_ckpt_info.has_run_keys = 0). */
static int meta_run_text(char *buf, size_t n, const mw_config *c) {
    char rc[MW_MAX_BLOCK_POLICIES + 16];
    recompute_text(c, rc, sizeof rc);
    return snprintf(buf, n, "save_every=%d\nkeep=%d\nbudget=%" PRIu64 "\nrecompute=%s\n", c->save_every,
                    c->keep, c->budget, rc);
}

/* The model's tokenizer, when known: lines tokenizer=NAME and tokenizer_hash=16 hex digits. */
static int meta_tokenizer(char *buf, size_t n, const mw_config *c) {
    if (!c->tokenizer.name[0]) return 0;
    return snprintf(buf, n, "tokenizer=%s\ntokenizer_hash=%016" PRIx64 "\n", c->tokenizer.name,
                    c->tokenizer.hash);
}

/* The header and the configuration text of a checkpoint of c's model (nt tensors) at st. */
static mw_status head_text_of(const mw_config *c, int nt, const mw_run_state *st, uint64_t train_tokens,
                              unsigned char h[HEADER], char meta[4096], int *mlen_out) {
    int mlen = meta_text(meta, 4096, c, st, train_tokens);
    mlen += meta_tokenizer(meta + mlen, 4096 - (size_t)mlen, c);
    mlen += meta_run_text(meta + mlen, 4096 - (size_t)mlen, c);
    if (mlen >= 4096) return mw_fail(MW_ERR_ARG, "checkpoint configuration text too long");
    const int v2 = c->optim != MW_OPTIM_ADAMW;
    memset(h, 0, HEADER);
    memcpy(h, MAGIC, 8);
    put32(h + 8, v2 ? VERSION2 : VERSION);
    put32(h + 12, (uint32_t)mlen);
    put32(h + 16, mw_crc32c(0, meta, (size_t)mlen));
    put32(h + 20, (uint32_t)nt);
    put32(h + 24, mw_crc32c(0, h, 24));
    *mlen_out = mlen;
    return MW_OK;
}
/* ... of m's checkpoint at st */
static mw_status head_text(const mw_model *m, const mw_run_state *st, uint64_t train_tokens, unsigned char h[HEADER],
                           char meta[4096], int *mlen_out) {
    return head_text_of(mw_model_config(m), mw_model_num_tensors(m), st, train_tokens, h, meta, mlen_out);
}

/* Tensor i's record (its bytes: *len) */
static void tensor_rec(const mw_param_info *t, unsigned char r[REC + 256], size_t *len) {
    size_t nl = strlen(t->name);
    put32(r, (uint32_t)nl);
    put32(r + 4, (uint32_t)t->ndim);
    put32(r + 8, (uint32_t)t->dims[0]);
    put32(r + 12, (uint32_t)t->dims[1]);
    put64(r + 16, t->numel);
    memcpy(r + REC, t->name, nl);
    *len = REC + nl;
}

static mw_status write_all(writer *w, const mw_model *m, const mw_run_state *st,
                           uint64_t train_tokens) {
    char meta[4096];
    int mlen = 0;
    unsigned char h[HEADER];
    MW_TRY(head_text(m, st, train_tokens, h, meta, &mlen));
    const int v2 = mw_model_config(m)->optim != MW_OPTIM_ADAMW;
    MW_TRY(wr(w, h, HEADER));
    MW_TRY(wr(w, meta, (size_t)mlen));
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info t;
        MW_TRY(mw_model_tensor_info(m, i, &t, 0));
        unsigned char r[REC + 256];
        size_t nl;
        tensor_rec(&t, r, &nl);
        nl -= REC;
        MW_TRY(wr(w, r, REC + nl));
        MW_TRY(wr_crc(w, mw_crc32c(0, r, REC + nl)));
        const float *data;
        MW_TRY(mw_model_param_view(m, i, &data)); /* read-only: nothing to write back */
        MW_TRY(wr(w, data, t.numel * 4));
        MW_TRY(wr_crc(w, mw_crc32c(0, data, t.numel * 4)));
        for (int b = 0; b < 2 && !v2; b++) { /* the moments, a window at a time (from the disk tier) */
            uint32_t crc = 0;
            for (size_t off = 0, n; off < t.numel; off += n) {
                const float *p;
                MW_TRY(mw_model_moment_view(m, b, i, off, &p, &n));
                MW_TRY(wr(w, p, n * 4));
                crc = mw_crc32c(crc, p, n * 4);
            }
            MW_TRY(wr_crc(w, crc));
        }
    }
    for (int part = 0; part < 3 && v2; part++) { /* the optimizer's state as it is stored */
        const uint64_t bytes = mw_model_state_bytes(m, part);
        unsigned char r[SREC];
        put32(r, (uint32_t)part);
        put32(r + 4, (uint32_t)mw_model_state_bits(m, part));
        put64(r + 8, bytes);
        MW_TRY(wr(w, r, SREC));
        MW_TRY(wr_crc(w, mw_crc32c(0, r, SREC)));
        uint32_t crc = 0;
        for (uint64_t off = 0; off < bytes;) {
            const void *p;
            size_t n;
            MW_TRY(mw_model_state_view(m, part, off, &p, &n));
            MW_TRY(wr(w, p, n));
            crc = mw_crc32c(crc, p, n);
            off += n;
        }
        MW_TRY(wr_crc(w, crc));
    }
    unsigned char tr[TRAILER] = {0};
    memcpy(tr, END, 8);
    put64(tr + 8, w->off + TRAILER);
    put32(tr + 16, w->chain);
    return wr(w, tr, TRAILER);
}

static mw_status save_tp(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                         size_t path_len);

mw_status mw_ckpt_save(const char *dir, const mw_model *m, const mw_run_state *st,
                       uint64_t train_tokens, char *path, size_t path_len) {
    if (mw_model_tp(m) > 1) /* a shard alone is not a checkpoint: every rank's, gathered */
        return mw_model_tp_comm(m) ? save_tp(dir, (mw_model *)m, st, train_tokens, path, path_len)
                                   : mw_fail(MW_ERR_ARG, "a --tp model saves with its ranks (mw_model_set_tp)");
    if (mw_model_config(m)->inference)
        return mw_fail(MW_ERR_ARG, "an inference model has no optimizer state to checkpoint");
    MW_TRY(mw_mkdirs(dir));
    char final[4096], tmp[4200];
    snprintf(final, sizeof final, "%s/step-%08d.mwck", dir, st->step);
    snprintf(tmp, sizeof tmp, "%s/.step-%08d.mwck.tmp.%d", dir, st->step, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    writer w = {fd, tmp, 0, 0};
    mw_status s = write_all(&w, m, st, train_tokens);
    mw_status d = mw_model_moments_done(m);
    if (s == MW_OK) s = d;
    if (s == MW_OK && fsync(fd) != 0)
        s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && s == MW_OK)
        s = mw_fail(MW_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (s == MW_OK && rename(tmp, final) != 0)
        s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (s != MW_OK) {
        unlink(tmp);
        return s;
    }
    MW_TRY(mw_sync_dir(dir));
    if (path) snprintf(path, path_len, "%s", final);
    return MW_OK;
}

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
    writer *w;
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
        if (R != 0 || *s != MW_OK) continue;
        *s = sk->w ? wr(sk->w, *full, n * 4) : pwr(sk->fd, sk->name, *full, n * 4, sk->at + (uint64_t)a * cols * 4);
        *crc = mw_crc32c(*crc, *full, n * 4);
    }
    return MW_OK;
}

/* A stream of an optimizer array's codes (bits 32, 8 or 4 an element) into w, with its crc. */
typedef struct codes {
    writer *w;
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
    return wr(c->w, c->buf, n);
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
static mw_status save_tp_state(mw_model *m, writer *w, mw_status *s, float **full, float **scratch, size_t *cap) {
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
        if (w && *s == MW_OK) *s = wr(w, r, SREC);
        if (w && *s == MW_OK) *s = wr_crc(w, mw_crc32c(0, r, SREC));
        if (part == 2) {
            float *st = NULL;
            if ((g = mw_model_tp_state_whole(m, &st)) == MW_OK && w && *s == MW_OK) *s = wr(w, st, (size_t)bytes);
            if (g == MW_OK && w && *s == MW_OK) *s = wr_crc(w, mw_crc32c(0, st, (size_t)bytes));
            free(st);
            break;
        }
        if (!bits) {
            if (w && *s == MW_OK) *s = wr_crc(w, 0);
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
            if (*s == MW_OK) *s = wr_crc(w, c->crc);
        }
        free(c);
    }
    free(o);
    return g;
}

/* --tp (mw_ckpt_save_ranks): every tensor gathered whole to rank 0 (collective: every rank runs
 * it), which writes the single-process file. Rank 0 keeps gathering after a failed write, so that
 * no rank waits for it; the ranks then agree, and only a whole file is renamed into place. With
 * --zero 0 replicas (the same state on each), the first replica's group writes. */
static mw_status save_tp(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                         size_t path_len) {
    mw_comm *cm = mw_model_tp_comm(m);
    const mw_config *gc = mw_model_config(m);
    if (gc->dp && gc->world > 1 && gc->zero >= 1)
        return mw_fail(MW_ERR_ARG, "--tp with --zero %d over %d replicas: a checkpoint of sharded tensor-parallel ranks "
                       "is not built yet", gc->zero, gc->world);
    if (gc->dp && gc->rank != 0) { /* --zero 0: every replica holds the same state; the first writes it */
        if (path && path_len) snprintf(path, path_len, "%s/step-%08d.mwck", dir, st->step);
        return MW_OK;
    }
    const int R = cm->rank, nt = mw_model_num_tensors(m), v2 = gc->optim != MW_OPTIM_ADAMW;
    char meta[4096], final[4096], tmp[4200];
    int mlen = 0, fd = -1;
    unsigned char h[HEADER];
    mw_status s = head_text(m, st, train_tokens, h, meta, &mlen), g = MW_OK;
    if (!all_same(cm, s == MW_OK ? mw_crc32c((uint32_t)mlen, meta, (size_t)mlen) : 0))
        return mw_fail(MW_ERR_ARG, "the ranks' checkpoint headers differ (a setting given to some ranks only: --keep, "
                                   "--budget, ...): every rank must be given the same command line");
    snprintf(final, sizeof final, "%s/step-%08d.mwck", dir, st->step);
    snprintf(tmp, sizeof tmp, "%s/.step-%08d.mwck.tmp.%d", dir, st->step, (int)getpid());
    if (R == 0 && s == MW_OK) s = mw_mkdirs(dir);
    if (R == 0 && s == MW_OK && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        s = mw_fail(MW_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    writer w = {fd, tmp, 0, 0};
    if (R == 0 && s == MW_OK) s = wr(&w, h, HEADER);
    if (R == 0 && s == MW_OK) s = wr(&w, meta, (size_t)mlen);
    float *full = NULL, *scratch = NULL;
    size_t cap = 0;
    const part_sink sk = {&w, -1, tmp, 0};
    for (int i = 0; i < nt && g == MW_OK; i++) {
        mw_param_info t;
        if ((g = mw_model_tensor_info(m, i, &t, 0)) != MW_OK) break;
        mw_model_tensor_whole(m, i, &t.ndim, t.dims, &t.numel);
        unsigned char r[REC + 256];
        size_t rl;
        tensor_rec(&t, r, &rl);
        if (R == 0 && s == MW_OK) s = wr(&w, r, rl);
        if (R == 0 && s == MW_OK) s = wr_crc(&w, mw_crc32c(0, r, rl));
        for (int k = 0; k < (v2 ? 1 : 3) && g == MW_OK; k++) { /* parameters, AdamW's m and v */
            uint32_t crc = 0;
            g = tp_tensor_parts(m, i, k, &sk, &full, &scratch, &cap, &s, &crc);
            if (R == 0 && g == MW_OK && s == MW_OK) s = wr_crc(&w, crc);
        }
    }
    if (v2 && g == MW_OK) g = save_tp_state(m, R == 0 ? &w : NULL, &s, &full, &scratch, &cap);
    free(full);
    free(scratch);
    if (s == MW_OK) s = g;
    if (R == 0 && s == MW_OK) {
        unsigned char tr[TRAILER] = {0};
        memcpy(tr, END, 8);
        put64(tr + 8, w.off + TRAILER);
        put32(tr + 16, w.chain);
        s = wr(&w, tr, TRAILER);
        if (s == MW_OK && fsync(fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
    }
    if (fd >= 0 && close(fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (R == 0 && s == MW_OK && rename(tmp, final) != 0)
        s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (R == 0 && s == MW_OK) s = mw_sync_dir(dir);
    char why[1024];
    snprintf(why, sizeof why, "%s", s == MW_OK ? "" : mw_last_error());
    const int ok = g == MW_OK ? all_ok(cm, s) : 0; /* a failed gather: the ranks cannot agree any more */
    if (!ok && R == 0) unlink(tmp);
    if (!ok) return mw_fail(s != MW_OK ? s : MW_ERR_IO, "%s", why[0] ? why : "another rank could not take part in the checkpoint (its error is above)");
    if (path) snprintf(path, path_len, "%s", final);
    return MW_OK;
}

static mw_status load_stage(const char *path, mw_model *m, mw_ckpt_info *info, int params_only);
static mw_status save_stages(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                             size_t path_len);

mw_status mw_ckpt_save_ranks(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                             size_t path_len) {
    if (mw_pipe_comm(m)) return save_stages(dir, m, st, train_tokens, path, path_len);
    mw_comm *cm = mw_model_comm(m);
    if (!cm) return mw_ckpt_save(dir, m, st, train_tokens, path, path_len);
    if (mw_model_tp(m) > 1) return save_tp(dir, m, st, train_tokens, path, path_len);
    const int R = cm->rank, W = cm->size, nt = mw_model_num_tensors(m);
    const mw_config *c = mw_model_config(m);
    const int v2 = c->optim != MW_OPTIM_ADAMW, ncrc = 3 * nt + 3;
    char meta[4096], final[4096], name[4200] = "";
    int mlen = 0, fd = -1;
    unsigned char h[HEADER];
    mw_status s = mw_model_params_settle(m); /* --zero 3: what init or a load wrote, into the shard */
    if (s == MW_OK) s = head_text(m, st, train_tokens, h, meta, &mlen);
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
            tensor_rec(&t, r, &rl);
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
        unsigned char tr[TRAILER] = {0};
        memcpy(tr, END, 8);
        put64(tr + 8, o + TRAILER);
        put32(tr + 16, chain);
        if (s == MW_OK) s = pwr(fd, name, tr, TRAILER, o);
        if (s == MW_OK && fsync(fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", name, strerror(errno));
        if (close(fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", name, strerror(errno));
        fd = -1;
        if (s == MW_OK && rename(name, final) != 0)
            s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", name, final, strerror(errno));
        if (s == MW_OK) s = mw_sync_dir(dir);
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

/* ---- reading --------------------------------------------------------------------------------- */

typedef struct reader {
    int fd;
    const char *path;
    uint64_t off, size;
    uint32_t chain;
    unsigned char *buf; /* BUF bytes, for verification */
} reader;

static mw_status rd(reader *r, void *buf, size_t n, const char *what) {
    if (n > r->size - r->off)
        return mw_fail(MW_ERR_FORMAT, "%s: truncated (ends inside %s at byte %llu)", r->path, what,
                       (unsigned long long)r->size);
    char *p = buf;
    while (n) {
        ssize_t k = pread(r->fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)r->off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return mw_fail(MW_ERR_IO, "cannot read %s: %s", r->path, strerror(errno));
        if (k == 0) return mw_fail(MW_ERR_FORMAT, "%s: truncated while reading %s", r->path, what);
        p += k;
        n -= (size_t)k;
        r->off += (uint64_t)k;
    }
    return MW_OK;
}

static mw_status rd_crc(reader *r, uint32_t want_of_data, const char *what) {
    unsigned char b[4];
    MW_TRY(rd(r, b, 4, what));
    r->chain = mw_crc32c(r->chain, b, 4);
    if (get32(b) != want_of_data)
        return mw_fail(MW_ERR_FORMAT, "%s: checksum mismatch in %s (corrupted)", r->path, what);
    return MW_OK;
}

/* Reads n bytes of data into dst (or, when dst is NULL, through the buffer) and returns its crc. */
static mw_status rd_block(reader *r, float *dst, uint64_t n, uint32_t *crc, const char *what) {
    if (n > r->size - r->off)
        return mw_fail(MW_ERR_FORMAT, "%s: truncated (ends inside %s)", r->path, what);
    uint32_t c = 0;
    if (dst) {
        MW_TRY(rd(r, dst, n, what));
        c = mw_crc32c(0, dst, n);
    } else {
        for (uint64_t done = 0; done < n;) {
            size_t k = n - done < BUF ? (size_t)(n - done) : BUF;
            MW_TRY(rd(r, r->buf, k, what));
            c = mw_crc32c(c, r->buf, k);
            done += k;
        }
    }
    *crc = c;
    return MW_OK;
}

static int meta_get(const char *meta, const char *key, char *val, size_t n) {
    size_t kl = strlen(key);
    for (const char *p = meta; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            size_t vl = len - kl - 1 < n - 1 ? len - kl - 1 : n - 1;
            memcpy(val, p + kl + 1, vl);
            val[vl] = 0;
            return 1;
        }
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

static mw_status parse_meta(const char *path, const char *meta, mw_ckpt_info *info, int v2) {
    char v[128], *end;
    mw_config *c = &info->cfg;
    memset(info, 0, sizeof *info);
    if (!meta_get(meta, "format", v, sizeof v) || strcmp(v, "memwall-checkpoint") != 0)
        return mw_fail(MW_ERR_FORMAT, "%s: not a memwall checkpoint (format key)", path);
    if (!meta_get(meta, "model", v, sizeof v))
        return mw_fail(MW_ERR_FORMAT, "%s: checkpoint lacks 'model'", path);
    c->arch = -1;
    for (int a = 0; a < MW_ARCH_COUNT; a++)
        if (strcmp(v, mw_arch_name(a)) == 0) c->arch = a;
    if (c->arch < 0)
        return mw_fail(MW_ERR_FORMAT, "%s: model family '%s' is unknown to this memwall", path, v);
    c->tied = 1;
    if (c->arch != MW_ARCH_GPT2) { /* its own shape keys, all required (the deepseek family: and its own) */
        struct {
            const char *key;
            int *i;
            double *d;
        } lk[] = {{"n_kv_head", &c->n_kv_head, 0}, {"ffn", &c->ffn, 0}, {"tied", &c->tied, 0},
                  {"rope_theta", 0, &c->rope_theta}, {"norm_eps", 0, &c->norm_eps},
                  {"n_experts", &c->n_experts, 0}, {"n_experts_tok", &c->n_experts_tok, 0},
                  {"n_shared", &c->n_shared, 0}, {"moe_ffn", &c->moe_ffn, 0}, {"first_dense", &c->first_dense, 0},
                  {"moe_gate", &c->moe_gate, 0}, {"norm_topk", &c->norm_topk, 0},
                  {"capacity_factor", 0, &c->capacity_factor}, {"routed_scale", 0, &c->routed_scale},
                  {"q_lora_rank", &c->q_lora_rank, 0}, {"kv_lora_rank", &c->kv_lora_rank, 0},
                  {"qk_rope_dim", &c->qk_rope_dim, 0}, {"qk_nope_dim", &c->qk_nope_dim, 0},
                  {"v_head_dim", &c->v_head_dim, 0}};
        const size_t nk = c->arch == MW_ARCH_DEEPSEEK ? sizeof lk / sizeof lk[0] : 5;
        for (size_t k = 0; k < nk; k++) {
            if (!meta_get(meta, lk[k].key, v, sizeof v))
                return mw_fail(MW_ERR_FORMAT, "%s: checkpoint lacks '%s'", path, lk[k].key);
            errno = 0;
            int ok = v[0] >= '0' && v[0] <= '9';
            if (ok && lk[k].i) {
                long x = strtol(v, &end, 10);
                ok = !*end && !errno && x <= 2147483647L;
                *lk[k].i = (int)x;
            } else if (ok) {
                *lk[k].d = strtod(v, &end);
                ok = !*end && !errno && isfinite(*lk[k].d);
            }
            if (!ok) return mw_fail(MW_ERR_FORMAT, "%s: bad value '%s' for '%s'", path, v, lk[k].key);
        }
    } else if (meta_get(meta, "norm_eps", v, sizeof v)) { /* GPT-2: absent for GPT-2's 1e-5 */
        errno = 0;
        c->norm_eps = strtod(v, &end);
        if (!(v[0] >= '0' && v[0] <= '9') || *end || errno || !(c->norm_eps > 0 && c->norm_eps < 1))
            return mw_fail(MW_ERR_FORMAT, "%s: bad value '%s' for 'norm_eps'", path, v);
    }
    struct {
        const char *key;
        int *i;
        double *d;
        uint64_t *u;
    } keys[] = {
        {"n_layer", &c->n_layer, 0, 0},      {"n_head", &c->n_head, 0, 0},
        {"n_embd", &c->n_embd, 0, 0},        {"vocab", &c->vocab, 0, 0},
        {"ctx", &c->ctx, 0, 0},              {"batch", &c->batch, 0, 0},
        {"seq", &c->seq, 0, 0},              {"accum", &c->accum, 0, 0},
        {"steps", &c->steps, 0, 0},          {"warmup", &c->warmup, 0, 0},
        {"lr", 0, &c->lr, 0},                {"min_lr_frac", 0, &c->min_lr_frac, 0},
        {"beta1", 0, &c->beta1, 0},          {"beta2", 0, &c->beta2, 0},
        {"eps", 0, &c->eps, 0},              {"weight_decay", 0, &c->weight_decay, 0},
        {"grad_clip", 0, &c->grad_clip, 0},  {"seed", 0, 0, &c->seed},
        {"eval_every", &c->eval_every, 0, 0}, {"eval_batches", &c->eval_batches, 0, 0},
        {"step", &info->state.step, 0, 0},   {"loader_rng", 0, 0, &info->state.loader_rng},
        {"train_tokens", 0, 0, &info->train_tokens},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (!meta_get(meta, keys[k].key, v, sizeof v))
            return mw_fail(MW_ERR_FORMAT, "%s: checkpoint lacks '%s'", path, keys[k].key);
        errno = 0;
        if (!v[0] || v[0] == '-' || v[0] == '+' || v[0] == ' ' || strlen(v) >= sizeof v - 1) goto bad;
        if (keys[k].i) {
            long x = strtol(v, &end, 10);
            if (*end || errno || x < -2147483647L || x > 2147483647L) goto bad;
            *keys[k].i = (int)x;
        } else if (keys[k].d) {
            *keys[k].d = strtod(v, &end);
            if (*end || errno) goto bad;
        } else {
            *keys[k].u = strtoull(v, &end, 10);
            if (*end || errno) goto bad;
        }
        continue;
    bad:
        return mw_fail(MW_ERR_FORMAT, "%s: bad value '%s' for '%s'", path, v, keys[k].key);
    }
    /* keys added after version 1's first release: a checkpoint without them still loads, with
     * the defaults (no periodic saves, keep 3, no budget, no recomputation) */
    mw_config dflt;
    mw_config_default(&dflt);
    c->save_every = dflt.save_every, c->keep = dflt.keep, c->budget = 0;
    c->recompute = MW_RECOMPUTE_NONE, c->recompute_every = 0;
    struct {
        const char *key;
        int *i;
        uint64_t *u;
    } run_keys[] = {{"save_every", &c->save_every, 0}, {"keep", &c->keep, 0}, {"budget", 0, &c->budget}};
    int found = 0;
    for (size_t k = 0; k < sizeof run_keys / sizeof run_keys[0]; k++) {
        if (!meta_get(meta, run_keys[k].key, v, sizeof v)) continue;
        found++;
        errno = 0;
        long long x = (v[0] >= '0' && v[0] <= '9') ? strtoll(v, &end, 10) : -1;
        if (x < 0 || *end || errno || (run_keys[k].i && x > 2147483647LL))
            return mw_fail(MW_ERR_FORMAT, "%s: bad value '%s' for '%s'", path, v, run_keys[k].key);
        if (run_keys[k].i) *run_keys[k].i = (int)x;
        else *run_keys[k].u = (uint64_t)x;
    }
    char rc[MW_MAX_BLOCK_POLICIES + 16];
    if (meta_get(meta, "recompute", rc, sizeof rc)) {
        found++;
        if (mw_recompute_parse(c, rc) != MW_OK)
            return mw_fail(MW_ERR_FORMAT, "%s: bad value for 'recompute': %s", path, mw_last_error());
    }
    if (found != 0 && found != 4) return mw_fail(MW_ERR_FORMAT, "%s: checkpoint has only %d of save_every, keep, budget, recompute", path, found);
    info->has_run_keys = found == 4;
    /* the optimizer: version 2 names it and its own hyperparameters; version 1 is AdamW's */
    c->optim = MW_OPTIM_ADAMW;
    c->momentum = dflt.momentum, c->beta3 = dflt.beta3, c->eps2 = dflt.eps2;
    c->clip_threshold = dflt.clip_threshold, c->decay_rate = dflt.decay_rate;
    if (v2) {
        if (!meta_get(meta, "optim", v, sizeof v)) return mw_fail(MW_ERR_FORMAT, "%s: checkpoint lacks 'optim'", path);
        if (mw_optim_parse(c, v) != MW_OK || c->optim == MW_OPTIM_ADAMW)
            return mw_fail(MW_ERR_FORMAT, "%s: bad value '%s' for 'optim'", path, v);
        struct {
            const char *key;
            double *d;
        } ok[] = {{"momentum", &c->momentum}, {"beta3", &c->beta3}, {"eps2", &c->eps2},
                  {"clip_threshold", &c->clip_threshold}, {"decay_rate", &c->decay_rate}};
        for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
            if (!meta_get(meta, ok[k].key, v, sizeof v))
                return mw_fail(MW_ERR_FORMAT, "%s: checkpoint lacks '%s'", path, ok[k].key);
            errno = 0;
            *ok[k].d = strtod(v, &end);
            if (!v[0] || *end || errno || !isfinite(*ok[k].d))
                return mw_fail(MW_ERR_FORMAT, "%s: bad value '%s' for '%s'", path, v, ok[k].key);
        }
    } else if (meta_get(meta, "optim", v, sizeof v)) {
        return mw_fail(MW_ERR_FORMAT, "%s: a version-1 checkpoint with an 'optim' key", path);
    }
    /* the products' precision: fp32 unless named (and then never as fp32) */
    c->precision = MW_PRECISION_FP32;
    if (meta_get(meta, "precision", v, sizeof v) &&
        (mw_precision_parse(c, v) != MW_OK || c->precision == MW_PRECISION_FP32))
        return mw_fail(MW_ERR_FORMAT, "%s: bad value '%.20s' for 'precision'", path, v);
    /* the products' numerics family: the FMA family's unless named (then only as amx) */
    snprintf(info->numerics, sizeof info->numerics, "fma");
    if (meta_get(meta, "numerics", v, sizeof v)) {
        if (strcmp(v, "amx") != 0) return mw_fail(MW_ERR_FORMAT, "%s: bad value '%.20s' for 'numerics'", path, v);
        snprintf(info->numerics, sizeof info->numerics, "amx");
    }
    /* --act-compress: none unless named (then only 8, 4 or 2) */
    c->act_compress = 0;
    if (meta_get(meta, "act_compress", v, sizeof v) && (mw_act_compress_parse(c, v) != MW_OK || !c->act_compress))
        return mw_fail(MW_ERR_FORMAT, "%s: bad value '%.20s' for 'act_compress'", path, v);
    static _Thread_local char al[MW_ACT_LAYERS_MAX];
    c->act_layers[0] = 0;
    if (meta_get(meta, "act_layers", al, sizeof al) && (mw_act_layers_parse(c, al) != MW_OK || strpbrk(al, "xa")))
        return mw_fail(MW_ERR_FORMAT, "%s: bad value '%.20s' for 'act_layers'", path, al);
    mw_status s = mw_config_validate(c);
    if (s != MW_OK) return mw_fail(MW_ERR_FORMAT, "%s: invalid configuration: %s", path, mw_last_error());
    if (info->state.step < 0)
        return mw_fail(MW_ERR_FORMAT, "%s: negative step %d", path, info->state.step);
    return MW_OK;
}

/* The optional tokenizer lines (a checkpoint without them: the tokenizer is unknown). */
static mw_status parse_tokenizer(const char *path, const char *meta, mw_config *c) {
    char name[64], hex[64];
    int has_name = meta_get(meta, "tokenizer", name, sizeof name);
    int has_hash = meta_get(meta, "tokenizer_hash", hex, sizeof hex);
    memset(&c->tokenizer, 0, sizeof c->tokenizer);
    if (!has_name && !has_hash) return MW_OK;
    if (!has_name || !has_hash)
        return mw_fail(MW_ERR_FORMAT, "%s: checkpoint has only one of 'tokenizer' and 'tokenizer_hash'", path);
    if (!mw_tokenizer_name_valid(name))
        return mw_fail(MW_ERR_FORMAT, "%s: bad value '%.20s' for 'tokenizer'", path, name);
    uint64_t h = 0;
    size_t k = 0;
    for (; hex[k]; k++) {
        int d = hex[k] >= '0' && hex[k] <= '9' ? hex[k] - '0' : hex[k] >= 'a' && hex[k] <= 'f' ? hex[k] - 'a' + 10 : -1;
        if (d < 0) break;
        h = h << 4 | (uint64_t)d;
    }
    if (k != 16 || hex[k])
        return mw_fail(MW_ERR_FORMAT, "%s: bad value '%.20s' for 'tokenizer_hash' (16 hex digits)", path, hex);
    memcpy(c->tokenizer.name, name, strlen(name) + 1); /* valid: at most 15 characters */
    c->tokenizer.hash = h;
    return MW_OK;
}

/* Walks the whole file. With m, checks each record against the model's table and loads it.
 * With idx, lists every tensor and where its parameters start. */
static mw_status walk(const char *path, mw_model *m, mw_ckpt_info *info, mw_ckpt_index *idx, int params_only) {
    reader r = {.path = path};
    if (m && mw_model_config(m)->inference) params_only = 1; /* eval, sample: the weights alone */
    r.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r.fd < 0) return mw_fail(MW_ERR_IO, "cannot open checkpoint %s: %s", path, strerror(errno));
    struct stat st;
    char *meta = NULL;
    mw_status s = MW_OK;
    if (fstat(r.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s = mw_fail(MW_ERR_FORMAT, "%s: not a regular file", path);
        goto out;
    }
    r.size = (uint64_t)st.st_size;
    if (!(r.buf = malloc(BUF))) {
        s = mw_fail(MW_ERR_NOMEM, "out of memory verifying %s", path);
        goto out;
    }
    unsigned char h[HEADER];
    if ((s = rd(&r, h, HEADER, "the header")) != MW_OK) goto out;
    if (memcmp(h, MAGIC, 8) != 0) {
        s = mw_fail(MW_ERR_FORMAT, "%s: not a memwall checkpoint (bad magic)", path);
        goto out;
    }
    if (get32(h + 8) != VERSION && get32(h + 8) != VERSION2) {
        s = mw_fail(MW_ERR_FORMAT, "%s: checkpoint format version %u, this memwall reads versions %d and %d",
                    path, get32(h + 8), VERSION, VERSION2);
        goto out;
    }
    const int v2 = get32(h + 8) == VERSION2;
    uint32_t mlen = get32(h + 12), ntens = get32(h + 20);
    if (get32(h + 24) != mw_crc32c(0, h, 24) || get32(h + 28) != 0) {
        s = mw_fail(MW_ERR_FORMAT, "%s: checksum mismatch in the header (corrupted)", path);
        goto out;
    }
    if (mlen == 0 || mlen > MAX_META || ntens > MAX_TENSORS) {
        s = mw_fail(MW_ERR_FORMAT, "%s: corrupted header (meta %u bytes, %u tensors)", path, mlen, ntens);
        goto out;
    }
    if (!(meta = malloc(mlen + 1))) {
        s = mw_fail(MW_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((s = rd(&r, meta, mlen, "the configuration")) != MW_OK) goto out;
    meta[mlen] = 0;
    if (mw_crc32c(0, meta, mlen) != get32(h + 16)) {
        s = mw_fail(MW_ERR_FORMAT, "%s: checksum mismatch in the configuration (corrupted)", path);
        goto out;
    }
    if ((s = parse_meta(path, meta, info, v2)) != MW_OK) goto out;
    if ((s = parse_tokenizer(path, meta, &info->cfg)) != MW_OK) goto out;
    if (m) {
        const mw_config *c = mw_model_config(m);
        const mw_config *k = &info->cfg;
        if (c->arch != k->arch || c->norm_eps != k->norm_eps ||
            (c->arch != MW_ARCH_GPT2 && (c->n_kv_head != k->n_kv_head || c->ffn != k->ffn || c->tied != k->tied ||
                                         c->rope_theta != k->rope_theta))) {
            s = mw_fail(MW_ERR_ARG,
                        "%s is from another model: checkpoint %s (kv heads %d, ffn %d, tied %d, rope "
                        "theta %g, eps %g), this run %s (kv heads %d, ffn %d, tied %d, rope theta %g, eps %g)",
                        path, mw_arch_name(k->arch), k->n_kv_head, k->ffn, k->tied, k->rope_theta,
                        k->norm_eps, mw_arch_name(c->arch), c->n_kv_head, c->ffn, c->tied, c->rope_theta,
                        c->norm_eps);
            goto out;
        }
        if (c->arch == MW_ARCH_DEEPSEEK &&
            (c->n_experts != k->n_experts || c->n_experts_tok != k->n_experts_tok || c->n_shared != k->n_shared ||
             c->moe_ffn != k->moe_ffn || c->first_dense != k->first_dense || c->moe_gate != k->moe_gate ||
             c->norm_topk != k->norm_topk || c->capacity_factor != k->capacity_factor ||
             c->routed_scale != k->routed_scale || c->q_lora_rank != k->q_lora_rank ||
             c->kv_lora_rank != k->kv_lora_rank || c->qk_rope_dim != k->qk_rope_dim ||
             c->qk_nope_dim != k->qk_nope_dim || c->v_head_dim != k->v_head_dim)) {
            s = mw_fail(MW_ERR_ARG,
                        "%s is from another deepseek model: checkpoint experts %d top-%d shared %d of %d, first dense "
                        "%d, gate %d, norm %d, capacity factor %g, scale %g, latents q %d kv %d rope %d nope %d v %d; "
                        "this run experts %d top-%d shared %d of %d, first dense %d, gate %d, norm %d, capacity factor "
                        "%g, scale %g, latents q %d kv %d rope %d nope %d v %d",
                        path, k->n_experts, k->n_experts_tok, k->n_shared, k->moe_ffn, k->first_dense, k->moe_gate,
                        k->norm_topk, k->capacity_factor, k->routed_scale, k->q_lora_rank, k->kv_lora_rank,
                        k->qk_rope_dim, k->qk_nope_dim, k->v_head_dim, c->n_experts, c->n_experts_tok, c->n_shared,
                        c->moe_ffn, c->first_dense, c->moe_gate, c->norm_topk, c->capacity_factor, c->routed_scale,
                        c->q_lora_rank, c->kv_lora_rank, c->qk_rope_dim, c->qk_nope_dim, c->v_head_dim);
            goto out;
        }
        if (c->n_layer != k->n_layer || c->n_head != k->n_head || c->n_embd != k->n_embd ||
            c->vocab != k->vocab || c->ctx != k->ctx) {
            s = mw_fail(MW_ERR_ARG,
                        "%s is from another model shape: checkpoint L=%d H=%d C=%d V=%d ctx=%d, "
                        "this run L=%d H=%d C=%d V=%d ctx=%d",
                        path, k->n_layer, k->n_head, k->n_embd, k->vocab, k->ctx, c->n_layer,
                        c->n_head, c->n_embd, c->vocab, c->ctx);
            goto out;
        }
        if (c->optim != k->optim && !params_only) {
            s = mw_fail(MW_ERR_ARG, "%s holds --optim %s state, this run is --optim %s (start the new optimizer's state from zero, keeping the parameters and the step, with --reset-optimizer)",
                        path, mw_optim_str(k->optim), mw_optim_str(c->optim));
            goto out;
        }
        if ((int)ntens != mw_model_num_tensors(m)) {
            s = mw_fail(MW_ERR_FORMAT, "%s: %u tensors, the model has %d", path, ntens,
                        mw_model_num_tensors(m));
            goto out;
        }
    }
    for (uint32_t i = 0; i < ntens; i++) {
        unsigned char rec[REC + 256];
        char what[320];
        if ((s = rd(&r, rec, REC, "a tensor record")) != MW_OK) goto out;
        uint32_t nl = get32(rec), nd = get32(rec + 4), d0 = get32(rec + 8), d1 = get32(rec + 12);
        uint64_t numel = get64(rec + 16);
        if (nl == 0 || nl > 255 || nd < 1 || nd > 2 || numel != (uint64_t)d0 * (nd == 2 ? d1 : 1)) {
            s = mw_fail(MW_ERR_FORMAT, "%s: corrupted tensor record %u", path, i);
            goto out;
        }
        const uint64_t per = v2 ? 4 : 12; /* bytes per element: parameters (and AdamW's moments) */
        if (numel > (r.size - r.off) / per) {
            s = mw_fail(MW_ERR_FORMAT, "%s: truncated (tensor record %u needs %llu bytes, %llu left)",
                        path, i, (unsigned long long)(numel * per),
                        (unsigned long long)(r.size - r.off));
            goto out;
        }
        if ((s = rd(&r, rec + REC, nl, "a tensor name")) != MW_OK) goto out;
        snprintf(what, sizeof what, "tensor %.*s", (int)nl, (char *)rec + REC);
        if ((s = rd_crc(&r, mw_crc32c(0, rec, REC + nl), what)) != MW_OK) goto out;
        float *dst[3] = {NULL, NULL, NULL};
        uint32_t crc0 = 0;
        if (m) {
            mw_param_info t;
            if ((s = mw_model_tensor(m, (int)i, &t)) != MW_OK) goto out; /* the disk tier's read may fail */
            if (mw_model_tp(m) > 1) mw_model_tensor_whole(m, (int)i, &t.ndim, t.dims, &t.numel); /* its shard taken below */
            if (strlen(t.name) != nl || memcmp(t.name, rec + REC, nl) != 0 || t.numel != numel ||
                t.ndim != (int)nd || t.dims[0] != (int)d0 || (nd == 2 && t.dims[1] != (int)d1)) {
                s = mw_fail(MW_ERR_ARG, "%s: %s does not match the model's tensor %s", path, what,
                            t.name);
                goto out;
            }
            dst[0] = t.data, dst[1] = t.m, dst[2] = t.v;
            if (params_only) dst[1] = dst[2] = NULL;
        }
        if (idx && idx->n < MW_CKPT_MAX_INDEX) {
            mw_ckpt_entry *e = &idx->e[idx->n++];
            snprintf(e->name, sizeof e->name, "%.*s", (int)nl, (char *)rec + REC);
            e->ndim = (int)nd, e->dims[0] = (int)d0, e->dims[1] = (int)d1;
            e->numel = numel;
            e->offset = r.off;
        }
        if (m && !dst[1] && !mw_model_config(m)->inference && !v2 && !params_only) { /* the moments are on the disk tier: by windows */
            if ((s = rd_block(&r, dst[0], numel * 4, &crc0, what)) != MW_OK || (s = rd_crc(&r, crc0, what)) != MW_OK)
                goto out;
            for (int b = 0; b < 2; b++) {
                uint32_t crc = 0;
                if (numel * 4 > r.size - r.off) {
                    s = mw_fail(MW_ERR_FORMAT, "%s: truncated (ends inside %s)", path, what);
                    goto out;
                }
                for (size_t off = 0, n; off < numel; off += n) {
                    float *p;
                    if ((s = mw_model_moment_map(m, b, (int)i, off, &p, &n)) != MW_OK) goto out;
                    if ((s = rd(&r, p, n * 4, what)) != MW_OK) goto out;
                    crc = mw_crc32c(crc, p, n * 4);
                }
                if ((s = rd_crc(&r, crc, what)) != MW_OK) goto out;
            }
            continue;
        }
        for (int b = 0; b < (v2 ? 1 : 3); b++) {
            uint32_t crc = 0;
            if (m && dst[b] && mw_model_tp(m) > 1) { /* --tp: this rank's shard, a window of BUF at a time (no whole tensor) */
                if (numel * 4 > r.size - r.off) {
                    s = mw_fail(MW_ERR_FORMAT, "%s: truncated (ends inside %s)", path, what);
                    goto out;
                }
                for (uint64_t done = 0; done < numel * 4;) {
                    const size_t k = numel * 4 - done < BUF ? (size_t)(numel * 4 - done) : BUF;
                    if ((s = rd(&r, r.buf, k, what)) != MW_OK) goto out;
                    crc = mw_crc32c(crc, r.buf, k);
                    mw_model_tp_take_part(m, (int)i, (const float *)(void *)r.buf, done / 4, k / 4, dst[b]);
                    done += k;
                }
            } else if ((s = rd_block(&r, dst[b], numel * 4, &crc, what)) != MW_OK) {
                goto out;
            }
            if ((s = rd_crc(&r, crc, what)) != MW_OK) goto out;
        }
    }
    for (int part = 0; part < 3 && v2; part++) { /* the optimizer's state */
        static const char *const names[3] = {"the optimizer's array M", "the optimizer's array V", "the optimizer's small state"};
        unsigned char sr[SREC];
        if ((s = rd(&r, sr, SREC, names[part])) != MW_OK) goto out;
        if ((s = rd_crc(&r, mw_crc32c(0, sr, SREC), names[part])) != MW_OK) goto out;
        const uint32_t bits = get32(sr + 4);
        const uint64_t bytes = get64(sr + 8);
        if (get32(sr) != (uint32_t)part || (part < 2 && bits != 0 && bits != 4 && bits != 8 && bits != 32) ||
            (part == 2 && bits != 0) || bytes > r.size - r.off) {
            s = mw_fail(MW_ERR_FORMAT, "%s: corrupted record of %s", path, names[part]);
            goto out;
        }
        const int load = m && !params_only, tp = m && mw_model_tp(m) > 1;
        const uint64_t want = !m ? 0 : tp ? mw_model_tp_state_bytes(m, part) : mw_model_state_bytes(m, part);
        if (load && (bits != (uint32_t)mw_model_state_bits(m, part) || bytes != want)) {
            s = mw_fail(MW_ERR_ARG, "%s: %s has %llu bytes of %u bits, this run's %llu of %d", path, names[part],
                        (unsigned long long)bytes, bits, (unsigned long long)want, mw_model_state_bits(m, part));
            goto out;
        }
        uint32_t crc = 0;
        if (load && tp && part < 2) { /* --tp: this rank's elements of one process's layout, a window at a time */
            for (uint64_t off = 0; off < bytes;) {
                const size_t k = bytes - off < BUF ? (size_t)(bytes - off) : BUF;
                if ((s = rd(&r, r.buf, k, names[part])) != MW_OK) goto out;
                crc = mw_crc32c(crc, r.buf, k);
                if ((s = mw_model_tp_take_state(m, part, r.buf, off, k)) != MW_OK) goto out;
                off += k;
            }
        } else if (load) {
            for (uint64_t off = 0; off < bytes;) {
                void *p;
                size_t n;
                if ((s = mw_model_state_map(m, part, off, &p, &n)) != MW_OK) goto out;
                if ((s = rd(&r, p, n, names[part])) != MW_OK) goto out;
                crc = mw_crc32c(crc, p, n);
                off += n;
            }
        } else if ((s = rd_block(&r, NULL, bytes, &crc, names[part])) != MW_OK) {
            goto out;
        }
        if ((s = rd_crc(&r, crc, names[part])) != MW_OK) goto out;
    }
    unsigned char tr[TRAILER];
    if ((s = rd(&r, tr, TRAILER, "the trailer")) != MW_OK) goto out;
    if (memcmp(tr, END, 8) != 0 || get64(tr + 8) != r.size || get32(tr + 16) != r.chain) {
        s = mw_fail(MW_ERR_FORMAT, "%s: corrupted trailer", path);
        goto out;
    }
    if (r.off != r.size) s = mw_fail(MW_ERR_FORMAT, "%s: trailing bytes after the trailer", path);
out:
    if (m) { /* the last mapped chunk of the disk tier goes back to its file */
        mw_status d = mw_model_moments_done(m);
        if (s == MW_OK) s = d;
    }
    free(meta);
    free(r.buf);
    close(r.fd);
    return s;
}

mw_status mw_ckpt_verify(const char *path, mw_ckpt_info *info) {
    mw_ckpt_info tmp;
    return walk(path, NULL, info ? info : &tmp, NULL, 0);
}

mw_status mw_ckpt_index_read(const char *path, mw_ckpt_info *info, mw_ckpt_index *idx) {
    idx->n = 0;
    MW_TRY(walk(path, NULL, info, idx, 0));
    if (idx->n == MW_CKPT_MAX_INDEX) return mw_fail(MW_ERR_FORMAT, "%s: too many tensors", path);
    return MW_OK;
}

mw_status mw_ckpt_load(const char *path, mw_model *m, mw_ckpt_info *info) {
    mw_ckpt_info tmp;
    if (!info) info = &tmp;
    if (mw_pipe_comm(m)) return load_stage(path, m, info, 0);
    MW_TRY(walk(path, NULL, info, NULL, 0));
    return walk(path, m, info, NULL, 0);
}

mw_status mw_ckpt_load_params(const char *path, mw_model *m, mw_ckpt_info *info) {
    mw_ckpt_info tmp;
    if (!info) info = &tmp;
    if (mw_pipe_comm(m)) return load_stage(path, m, info, 1);
    MW_TRY(walk(path, NULL, info, NULL, 0));
    return walk(path, m, info, NULL, 1);
}

mw_status mw_ckpt_latest(const char *dir, char *path, size_t path_len, mw_ckpt_info *info,
                         int *skipped) {
    mw_ckpt_file *f;
    int n;
    path[0] = 0;
    if (skipped) *skipped = 0;
    MW_TRY(mw_ckpt_list(dir, &f, &n));
    for (int i = 0; i < n; i++) {
        snprintf(path, path_len, "%s/%s", dir, f[i].name);
        if (mw_ckpt_verify(path, info) == MW_OK) {
            free(f);
            return MW_OK;
        }
        if (skipped) (*skipped)++;
    }
    free(f);
    path[0] = 0;
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

static mw_status save_stages(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                             size_t path_len) {
    mw_comm *pc = mw_pipe_comm(m);
    const int S = pc->rank, P = pc->size, nt = mw_model_num_tensors(m);
    const mw_config *gc = mw_pipe_global_config(m);
    const int v2 = gc->optim != MW_OPTIM_ADAMW;
    if (gc->dp && gc->world > 1 && gc->zero >= 1)
        return mw_fail(MW_ERR_ARG, "--pp with --zero %d over %d replicas: a checkpoint of sharded stages is not built yet",
                       gc->zero, gc->world);
    if (gc->dp && gc->rank != 0) { /* --zero 0: every replica holds the same state; the first writes it */
        if (path && path_len) snprintf(path, path_len, "%s/step-%08d.mwck", dir, st->step);
        return MW_OK;
    }
    /* --tp: each stage's tensors gathered to its tensor-parallel rank 0, which writes (wrt); the
     * other ranks of the group take part in the gathers and in their own pipeline's agreements */
    mw_comm *tc = mw_model_tp_comm(m);
    const int tpw = mw_model_tp(m) > 1, wrt = !tc || tc->rank == 0;
    if (tpw && v2)
        return mw_fail(MW_ERR_ARG, "--tp with --pp and --optim %s: a checkpoint of the optimizer's sharded state is not "
                       "built yet (adamw saves)", mw_optim_str(gc->optim));
    uint64_t mine[ST_N], *all = calloc((size_t)P * ST_N, sizeof *all), ex[6] = {0}, *exa = calloc((size_t)P * 6, sizeof *exa);
    /* ex: this stage's chain of CRCs and its bytes, then its pieces' CRCs (M, V, the small state's two runs) */
    char meta[4096], final[4096], name[4200] = "", why[1024] = "";
    unsigned char h[HEADER];
    int mlen = 0, fd = -1;
    mw_status s = all && exa ? stage_figures(m, v2, mine) : mw_fail(MW_ERR_NOMEM, "out of memory");
    mw_status g = s == MW_OK ? gather_vals(pc, mine, ST_N, all) : s;
    if (s == MW_OK) s = g;
    uint64_t NT = 0, tens_end = 0, B[4] = {0, 0, 0, 0}, pre[4] = {0, 0, 0, 0}, o = 0;
    for (int j = 0; j < P && s == MW_OK; j++) {
        NT += all[j * ST_N + ST_NT];
        for (int p = 0; p < 4; p++) B[p] += all[j * ST_N + ST_B0 + p], pre[p] += j < S ? all[j * ST_N + ST_B0 + p] : 0;
    }
    pre[3] += B[2], B[2] += B[3]; /* the small state: run 0's pieces, then run 1's; B[2] its bytes */
    if (s == MW_OK) s = head_text_of(gc, (int)NT, st, train_tokens, h, meta, &mlen);
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
    for (int i = 0; i < nt && (tpw ? gt == MW_OK : s == MW_OK); i++) {
        mw_param_info t;
        if ((gt = mw_model_tensor_info(m, i, &t, 0)) != MW_OK) break;
        if (tpw) mw_model_tensor_whole(m, i, &t.ndim, t.dims, &t.numel);
        unsigned char r[REC + 256];
        size_t rl;
        tensor_rec(&t, r, &rl);
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
        const float *data;
        if (s == MW_OK) s = mw_model_param_view(m, i, &data);
        if (s == MW_OK) s = pwr(fd, name, data, t.numel * 4, o);
        CHAIN(s == MW_OK ? mw_crc32c(0, data, t.numel * 4) : 0, o + t.numel * 4);
        o += t.numel * 4 + 4;
        for (int k = 0; k < 2 && !v2 && s == MW_OK; k++) {
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
    for (int run = 0; run < 4 && v2 && s == MW_OK; run++) { /* this stage's pieces of each array */
        const int part = run < 3 ? run : 2;
        uint64_t at = tens_end + SREC + 4 + pre[run], from = run == 3 ? mine[ST_B2] : 0;
        for (int q = 0; q < part; q++) at += SREC + 4 + B[q] + 4;
        uint32_t cc = 0;
        for (uint64_t off = 0; off < mine[ST_B0 + run] && s == MW_OK;) {
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
    if (fd >= 0 && S != 0) {
        if (s == MW_OK && fdatasync(fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", name, strerror(errno));
        if (close(fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", name, strerror(errno));
        fd = -1;
    }
    snprintf(why, sizeof why, "%s", s == MW_OK ? "" : mw_last_error());
    int ok = gt != MW_OK ? 0 : !tc || all_ok(tc, s); /* --tp: the stage's group first, then the pipeline */
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
        unsigned char tr[TRAILER] = {0};
        memcpy(tr, END, 8);
        put64(tr + 8, o + TRAILER);
        put32(tr + 16, ch);
        if (s == MW_OK) s = pwr(fd, name, tr, TRAILER, o);
        if (s == MW_OK && fsync(fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", name, strerror(errno));
        if (close(fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", name, strerror(errno));
        fd = -1;
        if (s == MW_OK && rename(name, final) != 0)
            s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", name, final, strerror(errno));
        if (s == MW_OK) s = mw_sync_dir(dir);
        if (s != MW_OK) snprintf(why, sizeof why, "%s", mw_last_error());
    }
    if (fd >= 0) close(fd);
    if (ok) ok = all_ok(pc, s); /* stage 0's rename */
    if (tc && gt == MW_OK) ok = all_ok(tc, ok ? MW_OK : MW_ERR_IO); /* ... to the other ranks of each group */
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

/* A stage's run of a single-process checkpoint (collective over the stages: every stage verifies
 * the whole file, then reads its tensors and its pieces of the optimizer's arrays). */
static mw_status load_stage(const char *path, mw_model *m, mw_ckpt_info *info, int params_only) {
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
    char *win = tpw ? malloc(BUF) : NULL; /* --tp: the file a window at a time, this rank's shard taken */
    if (tpw && !win && s == MW_OK) s = mw_fail(MW_ERR_NOMEM, "out of memory");
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
        for (int b = 0; b < 3 && s == MW_OK; b++)
            if (dst[b] && tpw)
                s = pread_shard(fd, path, m, i, dst[b], e->numel, e->offset + (uint64_t)b * (e->numel * 4 + 4), e->name, win);
            else if (dst[b])
                s = pread_crc(fd, path, dst[b], e->numel * 4, e->offset + (uint64_t)b * (e->numel * 4 + 4), e->name);
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
