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
 * Writing streams straight from the model's memory; reading verifies with one 1 MiB buffer. The
 * multi-rank writers (--zero, --tp, --pp) and a pipeline stage's load are in ckpt_ranks.c; what both
 * halves share, in ckpt_impl.h. */
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
#include "ckpt_impl.h"

static const char MAGIC[8] = {'M', 'W', 'C', 'K', 'P', 'T', 0, 0};

/* ---- writing --------------------------------------------------------------------------------- */

mw_status mw_ckpt_wr(mw_ckpt_writer *w, const void *buf, size_t n) {
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

mw_status mw_ckpt_finish(int fd, const char *tmp, const char *final, const char *dir, uint64_t at, uint32_t chain) {
    unsigned char tr[TRAILER] = {0};
    memcpy(tr, END, 8);
    put64(tr + 8, at + TRAILER);
    put32(tr + 16, chain);
    mw_status s = MW_OK;
    for (size_t k = 0; k < TRAILER && s == MW_OK;) {
        const ssize_t r = pwrite(fd, tr + k, TRAILER - k, (off_t)(at + k));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) s = mw_fail(MW_ERR_IO, "cannot write %s: %s", tmp, r < 0 ? strerror(errno) : "no progress");
        else k += (size_t)r;
    }
    if (s == MW_OK && fsync(fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (s == MW_OK && rename(tmp, final) != 0) s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (s == MW_OK) s = mw_sync_dir(dir);
    return s;
}

mw_status mw_ckpt_wr_crc(mw_ckpt_writer *w, uint32_t crc) {
    unsigned char b[4];
    put32(b, crc);
    w->chain = mw_crc32c(w->chain, b, 4);
    return mw_ckpt_wr(w, b, 4);
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
mw_status mw_ckpt_head_text_of(const mw_config *c, int nt, const mw_run_state *st, uint64_t train_tokens,
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
mw_status mw_ckpt_head_text(const mw_model *m, const mw_run_state *st, uint64_t train_tokens, unsigned char h[HEADER],
                           char meta[4096], int *mlen_out) {
    return mw_ckpt_head_text_of(mw_model_config(m), mw_model_num_tensors(m), st, train_tokens, h, meta, mlen_out);
}

/* Tensor i's record (its bytes: *len) */
void mw_ckpt_tensor_rec(const mw_param_info *t, unsigned char r[REC + 256], size_t *len) {
    size_t nl = strlen(t->name);
    put32(r, (uint32_t)nl);
    put32(r + 4, (uint32_t)t->ndim);
    put32(r + 8, (uint32_t)t->dims[0]);
    put32(r + 12, (uint32_t)t->dims[1]);
    put64(r + 16, t->numel);
    memcpy(r + REC, t->name, nl);
    *len = REC + nl;
}

static mw_status write_all(mw_ckpt_writer *w, const mw_model *m, const mw_run_state *st,
                           uint64_t train_tokens) {
    char meta[4096];
    int mlen = 0;
    unsigned char h[HEADER];
    MW_TRY(mw_ckpt_head_text(m, st, train_tokens, h, meta, &mlen));
    const int v2 = mw_model_config(m)->optim != MW_OPTIM_ADAMW;
    MW_TRY(mw_ckpt_wr(w, h, HEADER));
    MW_TRY(mw_ckpt_wr(w, meta, (size_t)mlen));
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info t;
        MW_TRY(mw_model_tensor_info(m, i, &t, 0));
        unsigned char r[REC + 256];
        size_t nl;
        mw_ckpt_tensor_rec(&t, r, &nl);
        nl -= REC;
        MW_TRY(mw_ckpt_wr(w, r, REC + nl));
        MW_TRY(mw_ckpt_wr_crc(w, mw_crc32c(0, r, REC + nl)));
        const float *data;
        MW_TRY(mw_model_param_view(m, i, &data)); /* read-only: nothing to write back */
        MW_TRY(mw_ckpt_wr(w, data, t.numel * 4));
        MW_TRY(mw_ckpt_wr_crc(w, mw_crc32c(0, data, t.numel * 4)));
        for (int b = 0; b < 2 && !v2; b++) { /* the moments, a window at a time (from the disk tier) */
            uint32_t crc = 0;
            for (size_t off = 0, n; off < t.numel; off += n) {
                const float *p;
                MW_TRY(mw_model_moment_view(m, b, i, off, &p, &n));
                MW_TRY(mw_ckpt_wr(w, p, n * 4));
                crc = mw_crc32c(crc, p, n * 4);
            }
            MW_TRY(mw_ckpt_wr_crc(w, crc));
        }
    }
    for (int part = 0; part < 3 && v2; part++) { /* the optimizer's state as it is stored */
        const uint64_t bytes = mw_model_state_bytes(m, part);
        unsigned char r[SREC];
        put32(r, (uint32_t)part);
        put32(r + 4, (uint32_t)mw_model_state_bits(m, part));
        put64(r + 8, bytes);
        MW_TRY(mw_ckpt_wr(w, r, SREC));
        MW_TRY(mw_ckpt_wr_crc(w, mw_crc32c(0, r, SREC)));
        uint32_t crc = 0;
        for (uint64_t off = 0; off < bytes;) {
            const void *p;
            size_t n;
            MW_TRY(mw_model_state_view(m, part, off, &p, &n));
            MW_TRY(mw_ckpt_wr(w, p, n));
            crc = mw_crc32c(crc, p, n);
            off += n;
        }
        MW_TRY(mw_ckpt_wr_crc(w, crc));
    }
    return MW_OK; /* the trailer: mw_ckpt_finish */
}

mw_status mw_ckpt_save(const char *dir, const mw_model *m, const mw_run_state *st,
                       uint64_t train_tokens, char *path, size_t path_len) {
    if (mw_model_tp(m) > 1) /* a shard alone is not a checkpoint: every rank's, gathered */
        return mw_model_tp_comm(m) ? mw_ckpt_save_tp(dir, (mw_model *)m, st, train_tokens, path, path_len)
                                   : mw_fail(MW_ERR_ARG, "a --tp model saves with its ranks (mw_model_set_tp)");
    if (mw_model_config(m)->inference)
        return mw_fail(MW_ERR_ARG, "an inference model has no optimizer state to checkpoint");
    MW_TRY(mw_mkdirs(dir));
    char final[4096], tmp[4200];
    snprintf(final, sizeof final, "%s/step-%08d.mwck", dir, st->step);
    snprintf(tmp, sizeof tmp, "%s/.step-%08d.mwck.tmp.%d", dir, st->step, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    mw_ckpt_writer w = {fd, tmp, 0, 0};
    mw_status s = write_all(&w, m, st, train_tokens);
    mw_status d = mw_model_moments_done(m);
    if (s == MW_OK) s = d;
    if (s == MW_OK) s = mw_ckpt_finish(fd, tmp, final, dir, w.off, w.chain);
    else close(fd);
    if (s != MW_OK) {
        unlink(tmp);
        return s;
    }
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
        if (m && !dst[1] && !mw_model_config(m)->inference && !v2 && !params_only) { /* the moments are on the disk tier (or
                                                                                          sharded over --zero's replicas): by windows */
            if (mw_model_tp(m) > 1) { /* --tp: this rank's shard of each, a window of BUF at a time
                                                                           (mw_model_tp_take_moment: --zero's replica keeps its part) */
                for (int b = 0; b < 3; b++) {
                    uint32_t crc = 0;
                    if (numel * 4 > r.size - r.off) {
                        s = mw_fail(MW_ERR_FORMAT, "%s: truncated (ends inside %s)", path, what);
                        goto out;
                    }
                    for (uint64_t done = 0; done < numel * 4;) {
                        const size_t k = numel * 4 - done < BUF ? (size_t)(numel * 4 - done) : BUF;
                        if ((s = rd(&r, r.buf, k, what)) != MW_OK) goto out;
                        crc = mw_crc32c(crc, r.buf, k);
                        const float *part = (const float *)(void *)r.buf;
                        if (b == 0) mw_model_tp_take_part(m, (int)i, part, done / 4, k / 4, dst[0]);
                        else if ((s = mw_model_tp_take_moment(m, (int)i, b - 1, part, done / 4, k / 4)) != MW_OK) goto out;
                        done += k;
                    }
                    if ((s = rd_crc(&r, crc, what)) != MW_OK) goto out;
                }
                continue;
            }
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
    if (mw_pipe_comm(m)) return mw_ckpt_load_stage(path, m, info, 0);
    MW_TRY(walk(path, NULL, info, NULL, 0));
    return walk(path, m, info, NULL, 0);
}

mw_status mw_ckpt_load_params(const char *path, mw_model *m, mw_ckpt_info *info) {
    mw_ckpt_info tmp;
    if (!info) info = &tmp;
    if (mw_pipe_comm(m)) return mw_ckpt_load_stage(path, m, info, 1);
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

