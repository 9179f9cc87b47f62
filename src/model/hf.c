/* Hugging Face GPT-2 weights in and out. memwall's tensor names are Hugging Face's; its 2-D
 * weights inside blocks are (out, in) like nn.Linear, where GPT-2's Conv1D stores (in, out). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fsutil.h"
#include "../core/json.h"
#include "../core/status.h"
#include "../train/checkpoint.h"
#include "hf.h"
#include "safetensors.h"

/* Conv1D weights: the 2-D tensors inside the blocks */
static int is_conv1d(const char *name, int ndim) { return ndim == 2 && strncmp(name, "h.", 2) == 0; }

static void resolve(const char *path, char *file, size_t n, char *dir, size_t dn) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(file, n, "%s/model.safetensors", path);
        snprintf(dir, dn, "%s", path);
    } else {
        snprintf(file, n, "%s", path);
        const char *slash = strrchr(path, '/');
        snprintf(dir, dn, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    }
}

static const char *prefix_of(const mw_st_file *f) {
    return mw_st_find(f, "wte.weight") ? "" : mw_st_find(f, "transformer.wte.weight") ? "transformer." : NULL;
}

static const mw_st_tensor *find(const mw_st_file *f, const char *prefix, const char *name) {
    char b[300];
    snprintf(b, sizeof b, "%s%s", prefix, name);
    return mw_st_find(f, b);
}

mw_status mw_hf_config_parse(const char *text, size_t len, const char *what, mw_hf_config *c) {
    memset(c, 0, sizeof *c);
    mw_json j;
    MW_TRY(mw_json_parse(&j, text, len, what, MW_JSON_MAX_CONFIG));
    mw_status s = MW_OK;
    int type = mw_json_get(&j, 0, "model_type");
    static const char *const keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};
    int *dst[] = {&c->n_layer, &c->n_head, &c->n_embd, &c->vocab, &c->ctx};
    if (j.nodes[0].type != MW_JSON_OBJ)
        s = mw_fail(MW_ERR_FORMAT, "%s: not a JSON object", what);
    else if (type >= 0 && (j.nodes[type].type != MW_JSON_STR || strcmp(j.nodes[type].str, "gpt2") != 0))
        s = mw_fail(MW_ERR_FORMAT, "%s: model_type is %s%.40s%s, not \"gpt2\"", what,
                    j.nodes[type].type == MW_JSON_STR ? "\"" : "",
                    j.nodes[type].type == MW_JSON_STR ? j.nodes[type].str : "not a string",
                    j.nodes[type].type == MW_JSON_STR ? "\"" : "");
    for (int k = 0; s == MW_OK && k < 5; k++) {
        int v = mw_json_get(&j, 0, keys[k]);
        if (v < 0 || j.nodes[v].type == MW_JSON_NULL) continue;
        const mw_json_node *x = &j.nodes[v];
        if (x->type != MW_JSON_NUM || !x->is_int || x->i < 1 || x->i >= (1 << 30))
            s = mw_fail(MW_ERR_FORMAT, "%s: %s is not a positive integer below 2^30", what, keys[k]);
        else
            *dst[k] = (int)x->i;
    }
    mw_json_free(&j);
    return s;
}

/* dir/config.json into *c; *found = 0 (and MW_OK) when there is none. Read whole, bounded. */
static mw_status read_config(const char *dir, mw_hf_config *c, int *found) {
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    memset(c, 0, sizeof *c);
    *found = 0;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return MW_OK;
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    struct stat st;
    mw_status s = MW_OK;
    char *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = mw_fail(MW_ERR_FORMAT, "%s: not a regular file", p);
    else if ((uint64_t)st.st_size > MW_HF_MAX_CONFIG_FILE)
        s = mw_fail(MW_ERR_FORMAT, "%s: %lld bytes, more than the %zu MiB a config.json may have", p,
                    (long long)st.st_size, MW_HF_MAX_CONFIG_FILE >> 20);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", p);
    size_t n = s == MW_OK ? (size_t)st.st_size : 0;
    for (size_t got = 0; s == MW_OK && got < n;) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) s = mw_fail(MW_ERR_IO, "cannot read %s: %s", p, k ? strerror(errno) : "unexpected end");
        else got += (size_t)k;
    }
    close(fd);
    if (s == MW_OK) s = mw_hf_config_parse(buf, n, p, c);
    free(buf);
    if (s == MW_OK) *found = 1;
    return s;
}

mw_status mw_hf_inspect(const char *path, mw_hf_shape *shape) {
    char file[1100], dir[1100];
    resolve(path, file, sizeof file, dir, sizeof dir);
    mw_st_file f;
    MW_TRY(mw_st_open(&f, file));
    const char *pre = prefix_of(&f);
    mw_status s = MW_OK;
    const mw_st_tensor *wte = pre ? find(&f, pre, "wte.weight") : NULL,
                       *wpe = pre ? find(&f, pre, "wpe.weight") : NULL;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] ||
        wte->shape[0] >= (1 << 30) || wte->shape[1] >= (1 << 30) || wpe->shape[0] >= (1 << 30)) {
        s = mw_fail(MW_ERR_FORMAT, "%s: not GPT-2 weights (no 2-D wte.weight and wpe.weight of one width)",
                    file);
    } else {
        memset(shape, 0, sizeof *shape);
        shape->vocab = (int)wte->shape[0];
        shape->n_embd = (int)wte->shape[1];
        shape->ctx = (int)wpe->shape[0];
        char name[64];
        for (;; shape->n_layer++) {
            snprintf(name, sizeof name, "h.%d.ln_1.weight", shape->n_layer);
            if (!find(&f, pre, name)) break;
        }
    }
    mw_st_close(&f);
    MW_TRY(s);
    /* config.json beside the weights: the head count, and its shape must be the weights' */
    mw_hf_config c;
    MW_TRY(read_config(dir, &c, &shape->config));
    static const char *const keys[] = {"n_layer", "n_embd", "vocab_size", "n_positions"};
    const int cv[] = {c.n_layer, c.n_embd, c.vocab, c.ctx},
              wv[] = {shape->n_layer, shape->n_embd, shape->vocab, shape->ctx};
    for (int k = 0; k < 4; k++)
        if (cv[k] && cv[k] != wv[k])
            return mw_fail(MW_ERR_FORMAT, "%s/config.json: %s is %d, but the weights in %s have %d", dir,
                           keys[k], cv[k], file, wv[k]);
    shape->n_head = c.n_head;
    return MW_OK;
}

mw_status mw_hf_load(const char *path, mw_model *m) {
    char file[1100], dir[1100];
    resolve(path, file, sizeof file, dir, sizeof dir);
    mw_st_file f;
    MW_TRY(mw_st_open(&f, file));
    const char *pre = prefix_of(&f);
    mw_status s = pre ? MW_OK : mw_fail(MW_ERR_FORMAT, "%s: no wte.weight: not GPT-2 weights", file);
    for (int i = 0; s == MW_OK && i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        mw_model_tensor(m, i, &p);
        const mw_st_tensor *t = find(&f, pre, p.name);
        int tr = is_conv1d(p.name, p.ndim);
        int64_t want0 = tr ? p.dims[1] : p.dims[0], want1 = tr ? p.dims[0] : p.dims[1];
        if (!t) {
            s = mw_fail(MW_ERR_FORMAT, "%s: tensor %s%s is missing", file, pre, p.name);
        } else if (t->ndim != p.ndim || t->shape[0] != want0 || (p.ndim == 2 && t->shape[1] != want1)) {
            s = mw_fail(MW_ERR_FORMAT, "%s: tensor %s has shape [%lld%s%lld], the model needs [%lld%s%lld]",
                        file, t->name, (long long)t->shape[0], t->ndim == 2 ? ", " : "",
                        t->ndim == 2 ? (long long)t->shape[1] : 0LL, (long long)want0,
                        p.ndim == 2 ? ", " : "", p.ndim == 2 ? (long long)want1 : 0LL);
        } else {
            s = mw_st_read_f32(&f, t, p.data, tr);
        }
    }
    mw_st_close(&f);
    return s;
}

/* ---- export ---------------------------------------------------------------------------------- */

typedef struct src_tensor {
    const char *name;
    int ndim, dims[2]; /* memwall layout */
    const float *mem;  /* in memory, or */
    uint64_t offset;   /* at this offset of fd */
} src_tensor;

typedef struct exporter {
    int fd, src_fd;
    const char *path, *src_path;
} exporter;

static mw_status put(exporter *x, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(x->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return mw_fail(MW_ERR_IO, "cannot write %s: %s", x->path, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return MW_OK;
}

/* count floats of memwall row `row`, from column col0, into dst */
static mw_status get(exporter *x, const src_tensor *t, uint64_t row, uint64_t col0, uint64_t count,
                     float *dst) {
    uint64_t cols = t->ndim == 2 ? (uint64_t)t->dims[1] : (uint64_t)t->dims[0];
    uint64_t at = row * cols + col0;
    if (t->mem) {
        memcpy(dst, t->mem + at, count * 4);
        return MW_OK;
    }
    for (uint64_t got = 0; got < count * 4;) {
        ssize_t k = pread(x->src_fd, (char *)dst + got, count * 4 - got, (off_t)(t->offset + at * 4 + got));
        if (k <= 0) return mw_fail(MW_ERR_IO, "cannot read %s: %s", x->src_path, k ? strerror(errno) : "unexpected end");
        got += (uint64_t)k;
    }
    return MW_OK;
}

#define XBUF (1 << 18) /* floats: 1 MiB */

static mw_status put_tensor(exporter *x, const src_tensor *t, float *buf) {
    if (!is_conv1d(t->name, t->ndim)) { /* as it is, in chunks */
        uint64_t n = (uint64_t)t->dims[0] * (t->ndim == 2 ? (uint64_t)t->dims[1] : 1);
        for (uint64_t i = 0; i < n; i += XBUF / 2) {
            uint64_t k = n - i < XBUF / 2 ? n - i : XBUF / 2;
            MW_TRY(get(x, t, 0, i, k, buf));
            MW_TRY(put(x, buf, k * 4));
        }
        return MW_OK;
    }
    /* (O, I) in memwall -> (I, O) on disk: read a tile of w columns from every row, write them
     * out as w rows. The tile and one output row fit the buffer. */
    uint64_t O = (uint64_t)t->dims[0], I = (uint64_t)t->dims[1];
    if (O == 0 || I == 0 || O >= XBUF / 2)
        return mw_fail(MW_ERR_ARG, "%s: tensor %s (%llu x %llu) cannot be exported", x->path, t->name,
                       (unsigned long long)O, (unsigned long long)I);
    uint64_t w = (XBUF - O) / O;
    float *row = buf + w * O;
    for (uint64_t i0 = 0; i0 < I; i0 += w) {
        uint64_t wi = I - i0 < w ? I - i0 : w;
        for (uint64_t o = 0; o < O; o++) MW_TRY(get(x, t, o, i0, wi, buf + o * wi));
        for (uint64_t i = 0; i < wi; i++) {
            for (uint64_t o = 0; o < O; o++) row[o] = buf[o * wi + i];
            MW_TRY(put(x, row, O * 4));
        }
    }
    return MW_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const src_tensor *)a)->name, ((const src_tensor *)b)->name);
}

/* config.json as Hugging Face's GPT-2 has it (GPT2Config, keys sorted as save_pretrained writes
 * them), with this model's shape; memwall's GPT-2 is exactly that architecture (tanh GELU,
 * LayerNorm eps 1e-5, tied embeddings, MLP width 4C). */
static int config_text(const mw_config *c, char *b, size_t n) {
    char eot[16];
    if (c->vocab > 50256) snprintf(eot, sizeof eot, "50256");
    else snprintf(eot, sizeof eot, "null"); /* no GPT-2 end-of-text token (a byte vocabulary) */
    return snprintf(b, n,
                    "{\n"
                    "  \"activation_function\": \"gelu_new\",\n"
                    "  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
                    "  \"attn_pdrop\": 0.1,\n"
                    "  \"bos_token_id\": %s,\n"
                    "  \"embd_pdrop\": 0.1,\n"
                    "  \"eos_token_id\": %s,\n"
                    "  \"initializer_range\": 0.02,\n"
                    "  \"layer_norm_epsilon\": 1e-05,\n"
                    "  \"model_type\": \"gpt2\",\n"
                    "  \"n_ctx\": %d,\n"
                    "  \"n_embd\": %d,\n"
                    "  \"n_head\": %d,\n"
                    "  \"n_inner\": null,\n"
                    "  \"n_layer\": %d,\n"
                    "  \"n_positions\": %d,\n"
                    "  \"reorder_and_upcast_attn\": false,\n"
                    "  \"resid_pdrop\": 0.1,\n"
                    "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                    "  \"scale_attn_weights\": true,\n"
                    "  \"summary_activation\": null,\n"
                    "  \"summary_first_dropout\": 0.1,\n"
                    "  \"summary_proj_to_labels\": true,\n"
                    "  \"summary_type\": \"cls_index\",\n"
                    "  \"summary_use_proj\": true,\n"
                    "  \"tie_word_embeddings\": true,\n"
                    "  \"torch_dtype\": \"float32\",\n"
                    "  \"use_cache\": true,\n"
                    "  \"vocab_size\": %d\n"
                    "}\n",
                    eot, eot, c->ctx, c->n_embd, c->n_head, c->n_layer, c->ctx, c->vocab);
}

/* out: FILE, or an existing directory (or one ending in '/'), which gets model.safetensors. The
 * weights and DIR/config.json are written to temporary files, synced, renamed into place, and the
 * directory synced; missing directories of DIR are created. */
static mw_status export_tensors(src_tensor *t, int n, const char *out_arg, int src_fd, const char *src_path,
                                const mw_config *cfg) {
    char out[1200], dir[1100];
    size_t al = strlen(out_arg);
    struct stat ost;
    if (al == 0 || al > 1000) return mw_fail(MW_ERR_ARG, "export: the output path is empty or too long");
    if (out_arg[al - 1] == '/' || (stat(out_arg, &ost) == 0 && S_ISDIR(ost.st_mode))) {
        snprintf(dir, sizeof dir, "%.*s", (int)(out_arg[al - 1] == '/' && al > 1 ? al - 1 : al), out_arg);
        snprintf(out, sizeof out, "%s/model.safetensors", dir);
    } else {
        resolve(out_arg, out, sizeof out, dir, sizeof dir);
        if (!dir[0]) snprintf(dir, sizeof dir, "/");
    }
    MW_TRY(mw_mkdirs(dir));
    qsort(t, (size_t)n, sizeof *t, cmp_name);
    size_t cap = 256 + (size_t)n * 400, len = 0;
    char *h = malloc(cap);
    float *buf = malloc(XBUF * sizeof(float));
    if (!h || !buf) {
        free(h), free(buf);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int tr = is_conv1d(t[i].name, t[i].ndim);
        uint64_t numel = (uint64_t)t[i].dims[0] * (t[i].ndim == 2 ? (uint64_t)t[i].dims[1] : 1);
        if (t[i].ndim == 2)
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],", t[i].name,
                                    tr ? t[i].dims[1] : t[i].dims[0], tr ? t[i].dims[0] : t[i].dims[1]);
        else
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],", t[i].name,
                                    t[i].dims[0]);
        len += (size_t)snprintf(h + len, cap - len, "\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                                (unsigned long long)(off + numel * 4));
        off += numel * 4;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while ((8 + len) % 8) h[len++] = ' ';
    char tmp[1300], ctmp[1200], cpath[1200], ctext[2048];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(ctmp, sizeof ctmp, "%s/.config.json.tmp.%d", dir, (int)getpid());
    exporter x = {open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), src_fd, tmp, src_path};
    mw_status s = MW_OK;
    if (x.fd < 0) {
        s = mw_fail(MW_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    } else {
        unsigned char l8[8];
        for (int i = 0; i < 8; i++) l8[i] = (unsigned char)((uint64_t)len >> 8 * i);
        s = put(&x, l8, 8);
        if (s == MW_OK) s = put(&x, h, len);
        for (int i = 0; s == MW_OK && i < n; i++) s = put_tensor(&x, &t[i], buf);
        if (s == MW_OK && fsync(x.fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
        if (close(x.fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
        exporter c = {-1, -1, ctmp, NULL};
        if (s == MW_OK && (c.fd = open(ctmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
            s = mw_fail(MW_ERR_IO, "cannot create %s: %s", ctmp, strerror(errno));
        if (c.fd >= 0) {
            s = put(&c, ctext, (size_t)config_text(cfg, ctext, sizeof ctext));
            if (s == MW_OK && fsync(c.fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", ctmp, strerror(errno));
            if (close(c.fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", ctmp, strerror(errno));
        }
        if (s == MW_OK && rename(tmp, out) != 0)
            s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
        if (s == MW_OK && rename(ctmp, cpath) != 0)
            s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", ctmp, cpath, strerror(errno));
        if (s == MW_OK) s = mw_sync_dir(dir);
        if (s != MW_OK) unlink(tmp), unlink(ctmp);
    }
    free(h);
    free(buf);
    return s;
}

mw_status mw_hf_export(const mw_model *m, const char *out) {
    int n = mw_model_num_tensors(m);
    src_tensor *t = calloc((size_t)n, sizeof *t);
    if (!t) return mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        mw_param_info p;
        mw_model_tensor(m, i, &p);
        t[i] = (src_tensor){p.name, p.ndim, {p.dims[0], p.dims[1]}, p.data, 0};
    }
    mw_status s = export_tensors(t, n, out, -1, NULL, mw_model_config(m));
    free(t);
    return s;
}

mw_status mw_hf_export_ckpt(const char *ckpt, const char *out) {
    mw_ckpt_index idx = {0, calloc(MW_CKPT_MAX_INDEX, sizeof(mw_ckpt_entry))};
    src_tensor *t = calloc(MW_CKPT_MAX_INDEX, sizeof *t);
    mw_ckpt_info info;
    mw_status s = idx.e && t ? mw_ckpt_index_read(ckpt, &info, &idx) : mw_fail(MW_ERR_NOMEM, "out of memory");
    int fd = -1;
    if (s == MW_OK && (fd = open(ckpt, O_RDONLY | O_CLOEXEC)) < 0)
        s = mw_fail(MW_ERR_IO, "cannot open %s: %s", ckpt, strerror(errno));
    /* the checkpoint's tensor table must be exactly the one its configuration implies */
    for (int i = 0; s == MW_OK && i < idx.n; i++) {
        char name[256];
        int nd, dims[2];
        s = mw_config_tensor(&info.cfg, i, name, sizeof name, &nd, dims);
        if (s == MW_OK && (strcmp(name, idx.e[i].name) != 0 || nd != idx.e[i].ndim || dims[0] != idx.e[i].dims[0] ||
                           (nd == 2 && dims[1] != idx.e[i].dims[1])))
            s = mw_fail(MW_ERR_FORMAT, "%s: tensor record %d (%s) does not match its configuration", ckpt, i,
                        idx.e[i].name);
    }
    if (s == MW_OK && idx.n != 4 + 12 * info.cfg.n_layer)
        s = mw_fail(MW_ERR_FORMAT, "%s: %d tensors, its configuration has %d", ckpt, idx.n, 4 + 12 * info.cfg.n_layer);
    if (s == MW_OK) {
        for (int i = 0; i < idx.n; i++)
            t[i] = (src_tensor){idx.e[i].name, idx.e[i].ndim, {idx.e[i].dims[0], idx.e[i].dims[1]}, NULL,
                                idx.e[i].offset};
        s = export_tensors(t, idx.n, out, fd, ckpt, &info.cfg);
    }
    if (fd >= 0) close(fd);
    free(idx.e);
    free(t);
    return s;
}
