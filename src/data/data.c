/* Token files, token sets (a manifest's shards read as one sequence) and the deterministic window
 * loader. Formats in memwall.h and tokset.h. */
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
#include "tokset.h"

#define HEADER_V1 32
#define HEADER_V2 64 /* versions 2 and 3 */
#define BLOCK 65536u /* version 3: bytes of tokens per checksummed block (the last may be shorter) */
#define MAX_OPEN 64  /* shards of a set open at once; the least recently read is closed for another */
static const char MAGIC[8] = {'M', 'W', 'T', 'O', 'K', 'E', 'N', 'S'};

/* One token file: a set of one, or a shard of a manifest's set. */
typedef struct shard {
    char *path;
    int fd; /* -1 while closed */
    int version;
    uint32_t header;       /* bytes before the first token */
    uint64_t count, first; /* its tokens, and the set's index of its first */
    uint64_t used;         /* when it was last read (which to close first) */
    uint32_t crc;          /* version 3: CRC-32C of its block-checksum table */
    dev_t dev;             /* the file checked when the set was opened: a reopen must find it */
    ino_t ino;
    off_t size;
    struct timespec mtime;
    char *bad; /* a set opened by mw_data_open_set_lenient: why the shard failed its check (NULL: it passed) */
} shard;

struct mw_data {
    shard *s;
    int n, nopen;
    int version; /* the lowest of its shards' */
    uint32_t width, vocab;
    uint64_t count, clock;
    uint64_t *parts; /* a manifest's set: its train tokens at the end of each part, and how many */
    int nparts;
    mw_tokenizer_id tok;
    char name[4400]; /* the file, or "PREFIX.manifest.json (train)" */
    int cs;          /* the block in buf: shard cs (-1: none), block cb, clen bytes */
    uint64_t cb;
    size_t clen;
    unsigned char buf[BLOCK];
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

static uint64_t blocks_of(uint64_t bytes) { return (bytes + BLOCK - 1) / BLOCK; }

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

/* Checks a version-2/3 header's own fields (h holds HEADER_V2 bytes) into tok. */
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

/* What a token file's header says; fields filled by check_file. */
typedef struct file_info {
    int version;
    uint32_t width, vocab, header;
    uint64_t count;
    mw_tokenizer_id tok;
    uint32_t table_crc; /* version 3: CRC-32C of its block-checksum table */
    struct stat st;
} file_info;

/* Checks the token file open at fd (header, sizes; for version 3 reads its checksum table, in
 * pieces through buf, into fi->table_crc). MW_ERR_FORMAT or MW_ERR_IO naming path. */
static mw_status check_file(int fd, const char *path, file_info *fi, unsigned char *buf, size_t buflen) {
    struct stat st;
    unsigned char h[HEADER_V2];
    memset(fi, 0, sizeof *fi);
    if (fstat(fd, &st) != 0) return mw_fail(MW_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return mw_fail(MW_ERR_FORMAT, "%s: not a regular file", path);
    const uint64_t size = (uint64_t)st.st_size;
    if (size < HEADER_V1)
        return mw_fail(MW_ERR_FORMAT, "%s: too short for a token file header (%llu bytes)", path, (unsigned long long)size);
    MW_TRY(read_full(fd, h, HEADER_V1, 0, path));
    const uint32_t version = rd32(h + 8), width = rd32(h + 12), vocab = rd32(h + 24);
    const uint64_t count = rd64(h + 16), header = version >= 2 ? HEADER_V2 : HEADER_V1;
    if (memcmp(h, MAGIC, 8) != 0) return mw_fail(MW_ERR_FORMAT, "%s: not a memwall token file (bad magic)", path);
    if (version < 1 || version > 3)
        return mw_fail(MW_ERR_FORMAT, "%s: token file version %u, this memwall reads versions 1 to 3", path, version);
    if (version >= 2) {
        if (size < HEADER_V2)
            return mw_fail(MW_ERR_FORMAT, "%s: too short for a version-%u token file header (%llu bytes)", path, version,
                           (unsigned long long)size);
        MW_TRY(read_full(fd, h + HEADER_V1, HEADER_V2 - HEADER_V1, HEADER_V1, path));
        MW_TRY(check_v2(h, path, &fi->tok));
    }
    if (width != 2 && width != 4) return mw_fail(MW_ERR_FORMAT, "%s: token width %u (must be 2 or 4)", path, width);
    if (vocab < 1 || (width == 2 && vocab > 65536) || vocab > INT32_MAX) /* ids are int32 */
        return mw_fail(MW_ERR_FORMAT, "%s: vocabulary size %u does not fit token width %u", path, vocab, width);
    const uint64_t room = (size - header) / width;
    const uint64_t nb = count <= room ? blocks_of(count * width) : 0, table = version == 3 ? 4 * nb : 0;
    if (count > room || header + count * width + table != size)
        return mw_fail(MW_ERR_FORMAT, "%s: header says %llu tokens but the file holds %llu bytes%s", path,
                       (unsigned long long)count, (unsigned long long)size,
                       header + count * width + table > size ? " (truncated)" : "");
    uint32_t crc = 0;
    for (uint64_t off = 0; off < table; off += buflen) {
        const size_t k = table - off < buflen ? (size_t)(table - off) : buflen;
        MW_TRY(read_full(fd, buf, k, header + count * width + off, path));
        crc = mw_crc32c(crc, buf, k);
    }
    fi->version = (int)version, fi->width = width, fi->vocab = vocab, fi->header = (uint32_t)header;
    fi->count = count, fi->table_crc = crc, fi->st = st;
    return MW_OK;
}

static mw_data *data_new(int n) {
    mw_data *d = calloc(1, sizeof *d);
    if (d && !(d->s = calloc((size_t)(n ? n : 1), sizeof *d->s))) free(d), d = NULL;
    if (!d) return NULL;
    for (int i = 0; i < n; i++) d->s[i].fd = -1;
    d->n = n, d->cs = -1, d->version = 3;
    return d;
}

void mw_data_close(mw_data *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        if (d->s[i].fd >= 0) close(d->s[i].fd);
        free(d->s[i].path), free(d->s[i].bad);
    }
    free(d->s), free(d->parts);
    free(d);
}

mw_status mw_data_open(mw_data **out, const char *path) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot open token file %s: %s", path, strerror(errno));
    mw_data *d = data_new(1);
    char *p = d ? strdup(path) : NULL;
    if (!p) {
        close(fd), mw_data_close(d);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    file_info fi;
    mw_status s = check_file(fd, path, &fi, d->buf, sizeof d->buf);
    if (s != MW_OK) {
        close(fd), free(p), mw_data_close(d);
        return s;
    }
    d->s[0] = (shard){p, fd, fi.version, fi.header, fi.count, 0, 0, fi.table_crc, fi.st.st_dev, fi.st.st_ino,
                      fi.st.st_size, fi.st.st_mtim, NULL};
    d->nopen = 1, d->version = fi.version, d->width = fi.width, d->vocab = fi.vocab, d->count = fi.count;
    d->tok = fi.tok;
    snprintf(d->name, sizeof d->name, "%s", path);
    *out = d;
    return MW_OK;
}

/* A manifest's split (0 train, 1 val): every shard opened and checked against the manifest
 * before any is read, then closed (reads open them again, at most MAX_OPEN at once). lenient: a
 * shard that fails its check keeps the manifest's count and its error (sh->bad) instead of
 * failing the open. */
static mw_status open_manifest(mw_data **out, const char *mpath, int split, int lenient) {
    mw_manifest m;
    MW_TRY(mw_manifest_read(&m, mpath));
    if (m.n[split] == 0) {
        mw_manifest_free(&m);
        return MW_OK;
    }
    mw_data *d = data_new(m.n[split]);
    mw_status s = d ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    const char *slash = strrchr(mpath, '/');
    const int dirlen = slash ? (int)(slash - mpath + 1) : 0;
    uint64_t first = 0;
    for (int i = 0; s == MW_OK && i < m.n[split]; i++) {
        const mw_set_shard *ms = &m.shard[split][i];
        char path[4400];
        snprintf(path, sizeof path, "%.*s%s", dirlen, mpath, ms->file);
        shard *sh = &d->s[i];
        if (!(sh->path = strdup(path))) {
            s = mw_fail(MW_ERR_NOMEM, "out of memory");
            break;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        file_info fi;
        if (fd < 0) {
            s = mw_fail(MW_ERR_IO, "shard %d of %s is missing: cannot open %s: %s", i, mpath, path, strerror(errno));
        } else {
            s = check_file(fd, path, &fi, d->buf, sizeof d->buf);
            close(fd);
        }
        char a[128], b[128];
        if (s == MW_OK && fi.version != 3)
            s = mw_fail(MW_ERR_FORMAT, "%s: version %d, a shard of a set is version 3 (with block checksums)", path, fi.version);
        else if (s == MW_OK && (fi.count != ms->tokens || fi.table_crc != ms->crc))
            s = mw_fail(MW_ERR_FORMAT, "%s is not the shard %s lists: it holds %llu tokens (checksum %08x), the manifest "
                                       "says %llu (%08x)", path, mpath, (unsigned long long)fi.count, fi.table_crc,
                        (unsigned long long)ms->tokens, ms->crc);
        else if (s == MW_OK && (fi.width != (uint32_t)m.width || fi.vocab != m.vocab ||
                                strcmp(fi.tok.name, m.tok.name) != 0 || fi.tok.hash != m.tok.hash))
            s = mw_fail(MW_ERR_FORMAT, "%s does not match %s: vocabulary %u width %u tokenizer %s, the manifest says %u, %d, %s",
                        path, mpath, fi.vocab, fi.width, mw_tokenizer_id_str(&fi.tok, a, sizeof a), m.vocab, m.width,
                        mw_tokenizer_id_str(&m.tok, b, sizeof b));
        if (s != MW_OK && lenient && s != MW_ERR_NOMEM) { /* kept, as the manifest describes it */
            if (!(sh->bad = strdup(mw_last_error()))) s = mw_fail(MW_ERR_NOMEM, "out of memory");
            else s = MW_OK, sh->version = 3, sh->count = ms->tokens, sh->first = first, first += ms->tokens;
            continue;
        }
        if (s != MW_OK) break;
        sh->version = 3, sh->header = fi.header, sh->count = fi.count, sh->first = first, sh->crc = fi.table_crc;
        sh->dev = fi.st.st_dev, sh->ino = fi.st.st_ino, sh->size = fi.st.st_size, sh->mtime = fi.st.st_mtim;
        first += fi.count;
    }
    if (s == MW_OK && split == 0 && !(d->parts = malloc((size_t)m.nparts * sizeof *d->parts)))
        s = mw_fail(MW_ERR_NOMEM, "out of memory");
    if (s != MW_OK) {
        mw_data_close(d);
        mw_manifest_free(&m);
        return s;
    }
    uint64_t acc = 0;
    for (int i = 0; split == 0 && i < m.nparts; i++) d->parts[i] = acc += m.part[i].train;
    d->nparts = split == 0 ? m.nparts : 0;
    d->width = (uint32_t)m.width, d->vocab = m.vocab, d->count = first, d->tok = m.tok;
    snprintf(d->name, sizeof d->name, "%s (%s)", mpath, split ? "val" : "train");
    mw_manifest_free(&m);
    *out = d;
    return MW_OK;
}

static mw_status open_set(mw_data **out, const char *prefix, const char *split, int lenient) {
    *out = NULL;
    const int k = strcmp(split, "val") == 0;
    if (!k && strcmp(split, "train") != 0) return mw_fail(MW_ERR_ARG, "a token set's splits are train and val, not %s", split);
    char mpath[4300], path[4300], pre[4200];
    /* the manifest's path, or one of the set's two files, names the set too */
    const size_t pl = strlen(prefix);
    static const char *const SUFFIX[3] = {".manifest.json", ".train.bin", ".val.bin"};
    snprintf(pre, sizeof pre, "%s", prefix);
    for (int i = 0; i < 3; i++) {
        const size_t sl = strlen(SUFFIX[i]);
        if (pl > sl && pl < sizeof pre && strcmp(prefix + pl - sl, SUFFIX[i]) == 0 && access(prefix, F_OK) == 0) {
            pre[pl - sl] = 0;
            break;
        }
    }
    prefix = pre;
    mw_manifest_path(prefix, mpath, sizeof mpath);
    if (access(mpath, F_OK) == 0) return open_manifest(out, mpath, k, lenient);
    snprintf(path, sizeof path, "%s.%s.bin", prefix, split);
    if (access(path, F_OK) != 0 && errno == ENOENT) return MW_OK;
    mw_status s = mw_data_open(out, path);
    if (s == MW_OK || !lenient || s == MW_ERR_NOMEM) return s;
    mw_data *d = data_new(1); /* the file, kept with its error */
    if (d && (d->s[0].path = strdup(path)) && (d->s[0].bad = strdup(mw_last_error()))) {
        snprintf(d->name, sizeof d->name, "%s", path);
        *out = d;
        return MW_OK;
    }
    mw_data_close(d);
    return mw_fail(MW_ERR_NOMEM, "out of memory");
}

mw_status mw_data_open_set(mw_data **out, const char *prefix, const char *split) {
    return open_set(out, prefix, split, 0);
}

mw_status mw_data_open_set_lenient(mw_data **out, const char *prefix, const char *split) {
    return open_set(out, prefix, split, 1);
}

uint64_t mw_data_count(const mw_data *d) { return d->count; }
uint32_t mw_data_vocab(const mw_data *d) { return d->vocab; }
int mw_data_width(const mw_data *d) { return (int)d->width; }
int mw_data_version(const mw_data *d) { return d->version; }
const mw_tokenizer_id *mw_data_tokenizer(const mw_data *d) { return &d->tok; }
const char *mw_data_path(const mw_data *d) { return d->name; }
int mw_data_shards(const mw_data *d) { return d->n; }
const char *mw_data_shard_path(const mw_data *d, int i) { return d->s[i].path; }
uint64_t mw_data_shard_count(const mw_data *d, int i) { return d->s[i].count; }
uint32_t mw_data_shard_crc(const mw_data *d, int i) { return d->s[i].crc; }

int mw_data_grown_from(const mw_data *d, uint64_t tokens) {
    for (int i = 0; i + 1 < d->nparts; i++)
        if (d->parts[i] == tokens) return 1;
    return 0;
}

/* Shard i open for reading: the least recently read one is closed when MAX_OPEN are. */
static mw_status shard_fd(mw_data *d, int i) {
    shard *sh = &d->s[i];
    if (sh->bad) return mw_fail(MW_ERR_FORMAT, "%s", sh->bad);
    sh->used = ++d->clock;
    if (sh->fd >= 0) return MW_OK;
    if (d->nopen >= MAX_OPEN) {
        int lru = -1;
        for (int j = 0; j < d->n; j++)
            if (d->s[j].fd >= 0 && (lru < 0 || d->s[j].used < d->s[lru].used)) lru = j;
        close(d->s[lru].fd);
        d->s[lru].fd = -1, d->nopen--;
    }
    sh->fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (sh->fd < 0) return mw_fail(MW_ERR_IO, "cannot open shard %s: %s", sh->path, strerror(errno));
    d->nopen++;
    /* the file checked at open, not another put in its place since (a new prepare at the prefix):
     * its blocks would pass their own checksums */
    struct stat st;
    if (fstat(sh->fd, &st) != 0 || st.st_dev != sh->dev || st.st_ino != sh->ino || st.st_size != sh->size ||
        st.st_mtim.tv_sec != sh->mtime.tv_sec || st.st_mtim.tv_nsec != sh->mtime.tv_nsec) {
        close(sh->fd); /* closed again: a later read must not find it open and read it */
        sh->fd = -1, d->nopen--;
        return mw_fail(MW_ERR_IO, "%s changed while it was being read (replaced or rewritten since the set was opened): "
                                  "the run stops rather than read other tokens", sh->path);
    }
    return MW_OK;
}

/* Block b of shard i into d->buf (d->clen bytes); *sum_ok: whether it matches its checksum
 * (always 1 before version 3). Only a block that matches is kept as the block in hand. */
static mw_status read_block(mw_data *d, int i, uint64_t b, int *sum_ok) {
    *sum_ok = 1;
    if (d->cs == i && d->cb == b) return MW_OK;
    MW_TRY(shard_fd(d, i));
    const shard *sh = &d->s[i];
    const uint64_t bytes = sh->count * d->width, off = b * BLOCK;
    const size_t len = bytes - off < BLOCK ? (size_t)(bytes - off) : BLOCK;
    d->cs = -1, d->clen = len;
    MW_TRY(read_full(sh->fd, d->buf, len, sh->header + off, sh->path));
    if (sh->version == 3) {
        unsigned char c[4];
        MW_TRY(read_full(sh->fd, c, 4, sh->header + bytes + 4 * b, sh->path));
        *sum_ok = rd32(c) == mw_crc32c(0, d->buf, len);
    }
    if (*sum_ok) d->cs = i, d->cb = b;
    return MW_OK;
}

/* Block b of shard i into d->buf, its checksum checked (version 3). */
static mw_status load_block(mw_data *d, int i, uint64_t b) {
    int ok;
    MW_TRY(read_block(d, i, b, &ok));
    if (!ok) {
        const uint64_t off = (uint64_t)d->s[i].header + b * BLOCK;
        return mw_fail(MW_ERR_FORMAT, "%s: block %llu (bytes %llu to %llu) fails its checksum: the shard is damaged "
                                      "(memwall verify checks a whole set)", d->s[i].path, (unsigned long long)b,
                       (unsigned long long)off, (unsigned long long)(off + d->clen));
    }
    return MW_OK;
}

/* the shard holding token index t of the set (t < count) */
static int shard_of(const mw_data *d, uint64_t t) {
    int lo = 0, hi = d->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->s[mid].first <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

mw_status mw_data_read(mw_data *d, uint64_t start, size_t n, int32_t *out) {
    if (start > d->count || n > d->count - start)
        return mw_fail(MW_ERR_ARG, "%s: read past the end (%llu+%zu of %llu tokens)", d->name,
                       (unsigned long long)start, n, (unsigned long long)d->count);
    const uint64_t per = BLOCK / d->width; /* tokens per block: a token never straddles two */
    for (size_t done = 0; done < n;) {
        const uint64_t t = start + done;
        const int i = shard_of(d, t);
        const shard *sh = &d->s[i];
        const uint64_t local = t - sh->first, b = local / per, in_block = local % per;
        MW_TRY(load_block(d, i, b));
        uint64_t k = d->clen / d->width - in_block;
        if (k > n - done) k = n - done;
        const unsigned char *p = d->buf + in_block * d->width;
        for (uint64_t j = 0; j < k; j++, p += d->width) {
            const uint32_t v = d->width == 2 ? (uint32_t)(p[0] | p[1] << 8) : rd32(p);
            if (v >= d->vocab)
                return mw_fail(MW_ERR_FORMAT, "%s: token %u at index %llu is outside the vocabulary (%u)", sh->path, v,
                               (unsigned long long)(local + j), d->vocab);
            out[done + j] = (int32_t)v;
        }
        done += (size_t)k;
    }
    return MW_OK;
}

mw_status mw_data_verify_shard(mw_data *d, int i, uint64_t *bytes) {
    const shard *sh = &d->s[i];
    *bytes = 0;
    if (sh->bad) return mw_fail(MW_ERR_FORMAT, "%s", sh->bad);
    const uint64_t per = BLOCK / d->width, nb = blocks_of(sh->count * d->width);
    uint64_t nbad = 0, first_bad = 0, first_off = 0, first_end = 0;
    int32_t ids[512];
    for (uint64_t b = 0; b < nb; b++) {
        int ok;
        MW_TRY(read_block(d, i, b, &ok));
        *bytes += d->clen;
        if (!ok) { /* counted; the shard's other blocks are read all the same */
            if (!nbad++)
                first_bad = b, first_off = sh->header + b * BLOCK, first_end = first_off + d->clen;
            continue;
        }
        for (uint64_t j = 0; j < d->clen / d->width; j += 512) {
            const uint64_t k = d->clen / d->width - j < 512 ? d->clen / d->width - j : 512;
            MW_TRY(mw_data_read(d, sh->first + b * per + j, (size_t)k, ids)); /* the vocabulary, from the block in hand */
        }
    }
    if (nbad == 1)
        return mw_fail(MW_ERR_FORMAT, "%s: block %llu of its %llu (bytes %llu to %llu) fails its checksum: its tokens are "
                                      "damaged", sh->path, (unsigned long long)first_bad, (unsigned long long)nb,
                       (unsigned long long)first_off, (unsigned long long)first_end);
    if (nbad)
        return mw_fail(MW_ERR_FORMAT, "%s: %llu of its %llu blocks fail their checksums (the first: block %llu, bytes %llu "
                                      "to %llu): its tokens are damaged", sh->path, (unsigned long long)nbad,
                       (unsigned long long)nb, (unsigned long long)first_bad, (unsigned long long)first_off,
                       (unsigned long long)first_end);
    return MW_OK;
}

/* ---- writing: a temporary file, appended to, committed by rename ----------------------------
 * Version 3: the header, the tokens, then the CRC-32C of each 64 KiB block of the tokens' bytes.
 * The writer checksums blocks as they are appended; committing fewer tokens than were appended
 * reads the cut block back to checksum it. */

struct mw_data_writer {
    int fd;
    int width;
    uint32_t vocab;
    uint64_t count;
    mw_tokenizer_id tok;
    uint32_t *crc;   /* the checksums of the blocks completed so far */
    uint64_t ncrc, crccap;
    uint32_t run;    /* the block being filled: its checksum so far, and bytes */
    size_t fill;
    char path[4200], tmp[4300];
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
        return mw_fail(MW_ERR_ARG, "token file path too long: %.64s...", path);
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

static mw_status push_crc(mw_data_writer *w, uint32_t c) {
    if (w->ncrc == w->crccap) {
        uint64_t cap = w->crccap ? 2 * w->crccap : 64;
        uint32_t *nc = realloc(w->crc, cap * sizeof *nc);
        if (!nc) return mw_fail(MW_ERR_NOMEM, "out of memory");
        w->crc = nc, w->crccap = cap;
    }
    w->crc[w->ncrc++] = c;
    return MW_OK;
}

/* the block checksums over bytes appended */
static mw_status feed_crc(mw_data_writer *w, const unsigned char *p, size_t n) {
    while (n) {
        size_t k = BLOCK - w->fill < n ? BLOCK - w->fill : n;
        w->run = mw_crc32c(w->run, p, k);
        w->fill += k, p += k, n -= k;
        if (w->fill == BLOCK) {
            MW_TRY(push_crc(w, w->run));
            w->run = 0, w->fill = 0;
        }
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
        MW_TRY(feed_crc(w, w->buf, k * (size_t)w->width));
        w->count += k;
    }
    return MW_OK;
}

uint64_t mw_data_writer_count(const mw_data_writer *w) { return w->count; }
const char *mw_data_writer_tmp(const mw_data_writer *w) { return w->tmp; }

/* Writes the first n tokens' checksum table, the header, truncates and fsyncs: a whole version-3
 * file under w->tmp, whose table's CRC goes to *sum. */
static mw_status finish_file(mw_data_writer *w, uint64_t n, uint32_t *sum) {
    if (n > w->count)
        return mw_fail(MW_ERR_ARG, "internal: committing %llu of %llu tokens", (unsigned long long)n,
                       (unsigned long long)w->count);
    const uint64_t bytes = n * (uint64_t)w->width, nb = blocks_of(bytes), whole = bytes / BLOCK;
    if (n == w->count && w->fill) {
        MW_TRY(push_crc(w, w->run));
        w->fill = 0;
    } else if (bytes % BLOCK) { /* the cut block (or a cut file's last), read back */
        const size_t len = (size_t)(bytes % BLOCK);
        MW_TRY(read_full(w->fd, w->buf, len, HEADER_V2 + whole * BLOCK, w->tmp));
        if (whole < w->ncrc) w->crc[whole] = mw_crc32c(0, w->buf, len);
        else MW_TRY(push_crc(w, mw_crc32c(0, w->buf, len)));
    }
    uint32_t c = 0;
    for (uint64_t b0 = 0; b0 < nb; b0 += sizeof w->buf / 4) {
        const uint64_t k = nb - b0 < sizeof w->buf / 4 ? nb - b0 : sizeof w->buf / 4;
        for (uint64_t b = 0; b < k; b++) wr32(w->buf + 4 * b, w->crc[b0 + b]);
        MW_TRY(write_full(w->fd, w->buf, (size_t)k * 4, HEADER_V2 + bytes + 4 * b0, w->tmp));
        c = mw_crc32c(c, w->buf, (size_t)k * 4);
    }
    if (sum) *sum = c;
    unsigned char h[HEADER_V2] = {0};
    memcpy(h, MAGIC, 8);
    wr32(h + 8, 3);
    wr32(h + 12, (uint32_t)w->width);
    wr64(h + 16, n);
    wr32(h + 24, w->vocab);
    wr32(h + 28, HEADER_V2);
    memcpy(h + 32, w->tok.name, strlen(w->tok.name));
    wr64(h + 48, w->tok.hash);
    wr32(h + 56, mw_crc32c(0, h, 56));
    MW_TRY(write_full(w->fd, h, HEADER_V2, 0, w->tmp));
    if (ftruncate(w->fd, (off_t)(HEADER_V2 + bytes + 4 * nb)) != 0 || fsync(w->fd) != 0)
        return mw_fail(MW_ERR_IO, "cannot write %s: %s", w->tmp, strerror(errno));
    return MW_OK;
}

static void writer_free(mw_data_writer *w) {
    if (w->fd >= 0) close(w->fd);
    free(w->crc);
    free(w);
}

/* finish_file, then the file closed; on failure the temporary file goes */
static mw_status finish_close(mw_data_writer *w, uint64_t n, uint32_t *sum) {
    mw_status st = finish_file(w, n, sum);
    if (close(w->fd) != 0 && st == MW_OK) st = mw_fail(MW_ERR_IO, "cannot write %s: %s", w->tmp, strerror(errno));
    w->fd = -1;
    if (st != MW_OK) unlink(w->tmp);
    return st;
}

mw_status mw_data_writer_commit(mw_data_writer *w, uint64_t n) {
    mw_status st = finish_close(w, n, NULL);
    if (st == MW_OK && rename(w->tmp, w->path) != 0) {
        st = mw_fail(MW_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
        unlink(w->tmp);
    }
    if (st == MW_OK) st = mw_sync_parent(w->path); /* the rename itself survives a crash */
    writer_free(w);
    return st;
}

mw_status mw_data_writer_finish(mw_data_writer *w, uint64_t n, char *tmp, size_t tmplen, uint32_t *sum) {
    mw_status st = finish_close(w, n, sum);
    if (st == MW_OK && (size_t)snprintf(tmp, tmplen, "%s", w->tmp) >= tmplen) {
        st = mw_fail(MW_ERR_ARG, "internal: temporary name longer than %zu bytes", tmplen);
        unlink(w->tmp);
    }
    writer_free(w);
    return st;
}

void mw_data_writer_abort(mw_data_writer *w) {
    if (!w) return;
    unlink(w->tmp);
    writer_free(w);
}

mw_status mw_data_file_cut(const char *path, uint64_t n, uint32_t *sum) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    mw_data_writer *w = calloc(1, sizeof *w);
    if (!w) {
        close(fd);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    file_info fi;
    w->fd = fd;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s", path);
    mw_status st = check_file(fd, path, &fi, w->buf, sizeof w->buf);
    if (st == MW_OK && (fi.version != 3 || n > fi.count))
        st = mw_fail(MW_ERR_ARG, "internal: cutting %s (version %d) to %llu of %llu tokens", path, fi.version,
                     (unsigned long long)n, (unsigned long long)fi.count);
    if (st == MW_OK) { /* the checksums of the whole blocks that stay, from its table */
        w->width = (int)fi.width, w->vocab = fi.vocab, w->tok = fi.tok, w->count = fi.count;
        const uint64_t whole = n * fi.width / BLOCK, table = HEADER_V2 + fi.count * fi.width;
        for (uint64_t b0 = 0; st == MW_OK && b0 < whole; b0 += sizeof w->buf / 4) {
            const uint64_t k = whole - b0 < sizeof w->buf / 4 ? whole - b0 : sizeof w->buf / 4;
            st = read_full(fd, w->buf, (size_t)k * 4, table + 4 * b0, path);
            for (uint64_t b = 0; st == MW_OK && b < k; b++) st = push_crc(w, rd32(w->buf + 4 * b));
        }
    }
    if (st == MW_OK) st = finish_file(w, n, sum);
    writer_free(w);
    return st;
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
                       l->data->name, (unsigned long long)count, T + 1);
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
                       l->data->name, (unsigned long long)count, T + 1);
    for (int b = 0; b < B; b++) (void)mw_rng_below(&l->rng, count - (uint64_t)T);
    return MW_OK;
}
