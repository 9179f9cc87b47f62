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

/* n_head from config.json beside the weights; 0 if absent or unreadable */
static int config_heads(const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *fp = fopen(p, "rb");
    if (!fp) return 0;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    mw_json j;
    if (mw_json_parse(&j, buf, n, p) != MW_OK) return 0;
    int k = mw_json_get(&j, 0, "n_head"), h = 0;
    if (k >= 0 && j.nodes[k].type == MW_JSON_NUM && j.nodes[k].is_int && j.nodes[k].i > 0 &&
        j.nodes[k].i < 100000)
        h = (int)j.nodes[k].i;
    mw_json_free(&j);
    return h;
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
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1]) {
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
        shape->n_head = config_heads(dir);
    }
    mw_st_close(&f);
    return s;
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

static mw_status export_tensors(src_tensor *t, int n, const char *out, int src_fd, const char *src_path) {
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
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
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
        if (s == MW_OK && rename(tmp, out) != 0)
            s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
        if (s != MW_OK) unlink(tmp);
        if (s == MW_OK) s = mw_sync_parent(out); /* the rename itself survives a crash */
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
    mw_status s = export_tensors(t, n, out, -1, NULL);
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
        s = export_tensors(t, idx.n, out, fd, ckpt);
    }
    if (fd >= 0) close(fd);
    free(idx.e);
    free(t);
    return s;
}
