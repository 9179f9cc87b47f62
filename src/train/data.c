/* Token files and the deterministic window loader. Format in memwall.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/crc32c.h"
#include "../core/fsutil.h"
#include "../core/rng.h"
#include "../core/status.h"

#define HEADER_V1 32
#define HEADER_V2 64
static const char MAGIC[8] = {'M', 'W', 'T', 'O', 'K', 'E', 'N', 'S'};

struct mw_data {
    int fd;
    int version;
    uint32_t width, vocab, header; /* header: bytes before the first token */
    uint64_t count;
    mw_tokenizer_id tok;
    char path[512];
    unsigned char buf[16384]; /* staging: reads go through it in pieces, no allocation */
};

static uint32_t rd32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void wr64(unsigned char *p, uint64_t v) {
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

static mw_status read_full(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return mw_fail(MW_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (r == 0) return mw_fail(MW_ERR_FORMAT, "%s: file is truncated", path);
        got += (size_t)r;
    }
    return MW_OK;
}

/* Checks a version-2 header's own fields (h holds HEADER_V2 bytes) into tok. */
static mw_status check_v2(const unsigned char *h, const char *path, mw_tokenizer_id *tok) {
    if (rd32(h + 28) != HEADER_V2 || rd32(h + 60) != 0 || rd32(h + 56) != mw_crc32c(0, h, 56))
        return mw_fail(MW_ERR_FORMAT, "%s: corrupted token file header (checksum or size)", path);
    memset(tok, 0, sizeof *tok);
    size_t n = strnlen((const char *)h + 32, MW_TOKENIZER_NAME_MAX);
    int padded = n < MW_TOKENIZER_NAME_MAX; /* NUL-terminated and NUL-padded */
    for (size_t i = n; i < MW_TOKENIZER_NAME_MAX; i++) padded &= h[32 + i] == 0;
    if (padded) memcpy(tok->name, h + 32, n);
    if (!padded || !mw_tokenizer_name_valid(tok->name))
        return mw_fail(MW_ERR_FORMAT, "%s: corrupted token file header (tokenizer name)", path);
    tok->hash = rd64(h + 48);
    return MW_OK;
}

mw_status mw_data_open(mw_data **out, const char *path) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot open token file %s: %s", path, strerror(errno));
    struct stat st;
    unsigned char h[HEADER_V2];
    mw_status s = MW_OK;
    if (fstat(fd, &st) != 0)
        s = mw_fail(MW_ERR_IO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = mw_fail(MW_ERR_FORMAT, "%s: not a regular file", path);
    else if ((uint64_t)st.st_size < HEADER_V1)
        s = mw_fail(MW_ERR_FORMAT, "%s: too short for a token file header (%lld bytes)", path,
                    (long long)st.st_size);
    else
        s = read_full(fd, h, HEADER_V1, 0, path);
    if (s != MW_OK) {
        close(fd);
        return s;
    }
    uint32_t version = rd32(h + 8), width = rd32(h + 12), vocab = rd32(h + 24);
    uint64_t count = rd64(h + 16), header = version == 2 ? HEADER_V2 : HEADER_V1;
    mw_tokenizer_id tok = {{0}, 0};
    if (memcmp(h, MAGIC, 8) != 0)
        s = mw_fail(MW_ERR_FORMAT, "%s: not a memwall token file (bad magic)", path);
    else if (version != 1 && version != 2)
        s = mw_fail(MW_ERR_FORMAT, "%s: token file version %u, this memwall reads versions 1 and 2",
                    path, version);
    else if (version == 2 && (uint64_t)st.st_size < HEADER_V2)
        s = mw_fail(MW_ERR_FORMAT, "%s: too short for a version-2 token file header (%lld bytes)",
                    path, (long long)st.st_size);
    else if (version == 2 && (s = read_full(fd, h + HEADER_V1, HEADER_V2 - HEADER_V1, HEADER_V1,
                                            path)) != MW_OK)
        ;
    else if (version == 2 && (s = check_v2(h, path, &tok)) != MW_OK)
        ;
    else if (width != 2 && width != 4)
        s = mw_fail(MW_ERR_FORMAT, "%s: token width %u (must be 2 or 4)", path, width);
    else if (vocab < 1 || (width == 2 && vocab > 65536) || vocab > INT32_MAX) /* ids are int32 */
        s = mw_fail(MW_ERR_FORMAT, "%s: vocabulary size %u does not fit token width %u", path,
                    vocab, width);
    else if (count > ((uint64_t)st.st_size - header) / width ||
             header + count * width != (uint64_t)st.st_size)
        s = mw_fail(MW_ERR_FORMAT, "%s: header says %llu tokens but the file holds %lld bytes",
                    path, (unsigned long long)count, (long long)st.st_size);
    mw_data *d = s == MW_OK ? calloc(1, sizeof *d) : NULL;
    if (s == MW_OK && !d) s = mw_fail(MW_ERR_NOMEM, "out of memory");
    if (s != MW_OK) {
        close(fd);
        return s;
    }
    d->fd = fd;
    d->version = (int)version;
    d->header = (uint32_t)header;
    d->width = width;
    d->vocab = vocab;
    d->count = count;
    d->tok = tok;
    snprintf(d->path, sizeof d->path, "%s", path);
    *out = d;
    return MW_OK;
}

void mw_data_close(mw_data *d) {
    if (!d) return;
    close(d->fd);
    free(d);
}

uint64_t mw_data_count(const mw_data *d) { return d->count; }
uint32_t mw_data_vocab(const mw_data *d) { return d->vocab; }
int mw_data_version(const mw_data *d) { return d->version; }
const mw_tokenizer_id *mw_data_tokenizer(const mw_data *d) { return &d->tok; }
const char *mw_data_path(const mw_data *d) { return d->path; }

mw_status mw_data_read(mw_data *d, uint64_t start, size_t n, int32_t *out) {
    if (start > d->count || n > d->count - start)
        return mw_fail(MW_ERR_ARG, "%s: read past the end (%llu+%zu of %llu tokens)", d->path,
                       (unsigned long long)start, n, (unsigned long long)d->count);
    const size_t per = sizeof d->buf / d->width;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        size_t k = n - i0 < per ? n - i0 : per;
        MW_TRY(read_full(d->fd, d->buf, k * d->width, d->header + (start + i0) * d->width,
                         d->path));
        for (size_t i = 0; i < k; i++) {
            const unsigned char *p = d->buf + i * d->width;
            uint32_t v = d->width == 2 ? (uint32_t)(p[0] | p[1] << 8) : rd32(p);
            if (v >= d->vocab)
                return mw_fail(MW_ERR_FORMAT,
                               "%s: token %u at index %llu is outside the vocabulary (%u)", d->path,
                               v, (unsigned long long)(start + i0 + i), d->vocab);
            out[i0 + i] = (int32_t)v;
        }
    }
    return MW_OK;
}

/* ---- writing: a temporary file, appended to, committed by rename ---------------------------- */

struct mw_data_writer {
    int fd;
    int width;
    uint32_t vocab;
    uint64_t count;
    mw_tokenizer_id tok;
    char path[512], tmp[600];
    unsigned char buf[1 << 16];
};

mw_status mw_data_writer_open(mw_data_writer **out, const char *path, uint32_t vocab, int width,
                              const mw_tokenizer_id *tok) {
    *out = NULL;
    if (width != 2 && width != 4) return mw_fail(MW_ERR_ARG, "token width must be 2 or 4");
    if (vocab < 1 || vocab > (width == 2 ? 65536u : (uint32_t)INT32_MAX))
        return mw_fail(MW_ERR_ARG, "vocabulary size %u does not fit token width %d", vocab, width);
    if (!tok || !mw_tokenizer_name_valid(tok->name))
        return mw_fail(MW_ERR_ARG, "%s: a token file records its tokenizer's name (1 to %d of "
                                   "a-z 0-9 . _ -)", path, MW_TOKENIZER_NAME_MAX - 1);
    if (strlen(path) >= sizeof((mw_data_writer *)0)->path)
        return mw_fail(MW_ERR_ARG, "token file path too long: %s", path);
    mw_data_writer *w = calloc(1, sizeof *w);
    if (!w) return mw_fail(MW_ERR_NOMEM, "out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%d", path, (int)getpid());
    w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        mw_status st = mw_fail(MW_ERR_IO, "cannot create %s: %s", w->tmp, strerror(errno));
        free(w);
        return st;
    }
    w->width = width, w->vocab = vocab, w->tok = *tok;
    *out = w;
    return MW_OK;
}

static mw_status write_full(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    size_t put = 0;
    while (put < n) {
        ssize_t r = pwrite(fd, (const char *)buf + put, n - put, (off_t)(off + put));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return mw_fail(MW_ERR_IO, "cannot write %s: %s", path, r < 0 ? strerror(errno) : "no progress");
        put += (size_t)r;
    }
    return MW_OK;
}

mw_status mw_data_writer_append(mw_data_writer *w, const int32_t *tokens, size_t n) {
    const size_t per = sizeof w->buf / (size_t)w->width;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        const size_t k = n - i0 < per ? n - i0 : per;
        for (size_t i = 0; i < k; i++) {
            const int32_t t = tokens[i0 + i];
            if (t < 0 || (uint32_t)t >= w->vocab)
                return mw_fail(MW_ERR_ARG, "%s: token %d is outside the vocabulary (%u)", w->path, t, w->vocab);
            unsigned char *p = w->buf + i * (size_t)w->width;
            if (w->width == 2) {
                p[0] = (unsigned char)t;
                p[1] = (unsigned char)(t >> 8);
            } else {
                wr32(p, (uint32_t)t);
            }
        }
        MW_TRY(write_full(w->fd, w->buf, k * (size_t)w->width, HEADER_V2 + w->count * (uint64_t)w->width, w->tmp));
        w->count += k;
    }
    return MW_OK;
}

uint64_t mw_data_writer_count(const mw_data_writer *w) { return w->count; }

mw_status mw_data_writer_read(mw_data_writer *w, uint64_t start, size_t n, int32_t *out) {
    if (start > w->count || n > w->count - start)
        return mw_fail(MW_ERR_ARG, "%s: read past the end (%llu+%zu of %llu tokens)", w->tmp,
                       (unsigned long long)start, n, (unsigned long long)w->count);
    const size_t per = sizeof w->buf / (size_t)w->width;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        const size_t k = n - i0 < per ? n - i0 : per;
        MW_TRY(read_full(w->fd, w->buf, k * (size_t)w->width, HEADER_V2 + (start + i0) * (uint64_t)w->width, w->tmp));
        for (size_t i = 0; i < k; i++) {
            const unsigned char *p = w->buf + i * (size_t)w->width;
            out[i0 + i] = (int32_t)(w->width == 2 ? (uint32_t)(p[0] | p[1] << 8) : rd32(p));
        }
    }
    return MW_OK;
}

mw_status mw_data_writer_commit(mw_data_writer *w, uint64_t n) {
    if (n > w->count) {
        mw_status st = mw_fail(MW_ERR_ARG, "internal: committing %llu of %llu tokens", (unsigned long long)n,
                               (unsigned long long)w->count);
        mw_data_writer_abort(w);
        return st;
    }
    unsigned char h[HEADER_V2] = {0};
    memcpy(h, MAGIC, 8);
    wr32(h + 8, 2);
    wr32(h + 12, (uint32_t)w->width);
    wr64(h + 16, n);
    wr32(h + 24, w->vocab);
    wr32(h + 28, HEADER_V2);
    memcpy(h + 32, w->tok.name, strlen(w->tok.name));
    wr64(h + 48, w->tok.hash);
    wr32(h + 56, mw_crc32c(0, h, 56));
    mw_status st = write_full(w->fd, h, HEADER_V2, 0, w->tmp);
    if (st == MW_OK && ftruncate(w->fd, (off_t)(HEADER_V2 + n * (uint64_t)w->width)) != 0)
        st = mw_fail(MW_ERR_IO, "cannot write %s: %s", w->tmp, strerror(errno));
    if (st == MW_OK && fsync(w->fd) != 0) st = mw_fail(MW_ERR_IO, "cannot write %s: %s", w->tmp, strerror(errno));
    if (st == MW_OK && close(w->fd) != 0) st = mw_fail(MW_ERR_IO, "cannot write %s: %s", w->tmp, strerror(errno));
    else if (st != MW_OK) close(w->fd);
    w->fd = -1;
    if (st == MW_OK && rename(w->tmp, w->path) != 0)
        st = mw_fail(MW_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    if (st != MW_OK) unlink(w->tmp);
    if (st == MW_OK) st = mw_sync_parent(w->path); /* the rename itself survives a crash */
    free(w);
    return st;
}

void mw_data_writer_abort(mw_data_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp);
    free(w);
}

mw_status mw_data_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab,
                        int width, const mw_tokenizer_id *tok) {
    mw_data_writer *w;
    MW_TRY(mw_data_writer_open(&w, path, vocab, width, tok));
    mw_status st = mw_data_writer_append(w, tokens, (size_t)n);
    if (st != MW_OK) {
        mw_data_writer_abort(w);
        return st;
    }
    return mw_data_writer_commit(w, n);
}

void mw_loader_init(mw_loader *l, mw_data *d, uint64_t seed) {
    l->data = d;
    l->rng = seed ^ 0xD1B54A32D192ED03ull;
}

mw_status mw_loader_next(mw_loader *l, int B, int T, int32_t *inputs, int32_t *targets,
                         int32_t *scratch) {
    uint64_t count = l->data->count;
    if (count < (uint64_t)T + 1)
        return mw_fail(MW_ERR_ARG, "%s holds %llu tokens, fewer than one window of --seq+1 = %d",
                       l->data->path, (unsigned long long)count, T + 1);
    for (int b = 0; b < B; b++) {
        uint64_t start = mw_rng_below(&l->rng, count - (uint64_t)T);
        MW_TRY(mw_data_read(l->data, start, (size_t)T + 1, scratch));
        memcpy(inputs + (size_t)b * T, scratch, sizeof(int32_t) * T);
        memcpy(targets + (size_t)b * T, scratch + 1, sizeof(int32_t) * T);
    }
    return MW_OK;
}

mw_status mw_loader_skip(mw_loader *l, int B, int T) {
    uint64_t count = l->data->count;
    if (count < (uint64_t)T + 1)
        return mw_fail(MW_ERR_ARG, "%s holds %llu tokens, fewer than one window of --seq+1 = %d",
                       l->data->path, (unsigned long long)count, T + 1);
    for (int b = 0; b < B; b++) (void)mw_rng_below(&l->rng, count - (uint64_t)T);
    return MW_OK;
}
