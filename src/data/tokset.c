/* Token-set manifests: parsing (outside input: fuzz/fuzz_manifest.c) and atomic writing. */
#include "tokset.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/fsutil.h"
#include "../core/json.h"
#include "../core/status.h"

static const char FORMAT[] = "memwall-token-set";
static const char *const SPLIT[2] = {"train", "val"};

void mw_manifest_path(const char *prefix, char *buf, size_t n) { snprintf(buf, n, "%s.manifest.json", prefix); }

int mw_set_file_valid(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 255 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == '/' || name[i] == '\\' || name[i] == '"' ||
            (unsigned char)name[i] == 0x7f)
            return 0;
    return 1;
}

void mw_manifest_free(mw_manifest *m) {
    for (int k = 0; k < 2; k++) free(m->shard[k]);
    free(m->part);
    memset(m, 0, sizeof *m);
}

mw_status mw_manifest_add_shard(mw_manifest *m, int split, const char *file, uint64_t tokens, uint32_t crc) {
    if (m->n[split] >= MW_SET_MAX_SHARDS)
        return mw_fail(MW_ERR_ARG, "a token set holds at most %d shards per split", MW_SET_MAX_SHARDS);
    if (!mw_set_file_valid(file)) return mw_fail(MW_ERR_ARG, "invalid shard file name '%.64s'", file);
    if (m->n[split] == m->cap[split]) {
        int cap = m->cap[split] ? 2 * m->cap[split] : 16;
        mw_set_shard *s = realloc(m->shard[split], (size_t)cap * sizeof *s);
        if (!s) return mw_fail(MW_ERR_NOMEM, "out of memory");
        m->shard[split] = s, m->cap[split] = cap;
    }
    mw_set_shard *s = &m->shard[split][m->n[split]++];
    snprintf(s->file, sizeof s->file, "%s", file);
    s->tokens = tokens, s->crc = crc;
    return MW_OK;
}

mw_status mw_manifest_add_part(mw_manifest *m, const mw_set_part *p) {
    if (m->nparts == m->partcap) {
        int cap = m->partcap ? 2 * m->partcap : 4;
        mw_set_part *q = realloc(m->part, (size_t)cap * sizeof *q);
        if (!q) return mw_fail(MW_ERR_NOMEM, "out of memory");
        m->part = q, m->partcap = cap;
    }
    m->part[m->nparts++] = *p;
    return MW_OK;
}

/* a non-negative integer field of object obj, at most max */
static int get_u64(const mw_json *j, int obj, const char *key, uint64_t max, uint64_t *v) {
    int k = mw_json_get(j, obj, key);
    if (k < 0 || j->nodes[k].type != MW_JSON_NUM || !j->nodes[k].is_int || j->nodes[k].i < 0 ||
        (uint64_t)j->nodes[k].i > max)
        return 0;
    *v = (uint64_t)j->nodes[k].i;
    return 1;
}

/* a string of exactly `digits` lower-case hex digits */
static int get_hex(const mw_json *j, int obj, const char *key, int digits, uint64_t *v) {
    int k = mw_json_get(j, obj, key);
    if (k < 0 || j->nodes[k].type != MW_JSON_STR || strlen(j->nodes[k].str) != (size_t)digits) return 0;
    *v = 0;
    for (const char *p = j->nodes[k].str; *p; p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (d < 0) return 0;
        *v = *v << 4 | (uint64_t)d;
    }
    return 1;
}

#define MAX_TOKENS (UINT64_C(1) << 48) /* per shard and per split: far beyond any corpus */

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* no file listed twice (in a split or across both): reading one shard as two would be silent */
static mw_status no_repeats(const mw_manifest *m, const char *what) {
    size_t n = (size_t)m->n[0] + (size_t)m->n[1], k = 0;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < m->n[s]; i++) names[k++] = m->shard[s][i].file;
    qsort(names, n, sizeof *names, cmp_name);
    mw_status st = MW_OK;
    for (size_t i = 1; i < n && st == MW_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            st = mw_fail(MW_ERR_FORMAT, "%s: shard file %s is listed twice", what, names[i]);
    free(names);
    return st;
}

static mw_status parse_nodes(mw_manifest *m, const mw_json *j, const char *what) {
    if (j->nodes[0].type != MW_JSON_OBJ) return mw_fail(MW_ERR_FORMAT, "%s: not a JSON object", what);
    int f = mw_json_get(j, 0, "format");
    if (f < 0 || j->nodes[f].type != MW_JSON_STR || strcmp(j->nodes[f].str, FORMAT) != 0)
        return mw_fail(MW_ERR_FORMAT, "%s: not a memwall token-set manifest (\"format\" is not \"%s\")", what, FORMAT);
    uint64_t v, w, vocab, hash;
    if (!get_u64(j, 0, "version", 1000, &v)) return mw_fail(MW_ERR_FORMAT, "%s: no integer \"version\"", what);
    if (v != 1) return mw_fail(MW_ERR_FORMAT, "%s: manifest version %llu, this memwall reads version 1", what, (unsigned long long)v);
    if (!get_u64(j, 0, "width", 4, &w) || (w != 2 && w != 4))
        return mw_fail(MW_ERR_FORMAT, "%s: \"width\" must be 2 or 4", what);
    if (!get_u64(j, 0, "vocab", w == 2 ? 65536 : INT32_MAX, &vocab) || vocab < 1)
        return mw_fail(MW_ERR_FORMAT, "%s: \"vocab\" must be an integer from 1 to %u for width %llu", what,
                       w == 2 ? 65536u : (unsigned)INT32_MAX, (unsigned long long)w);
    m->width = (int)w, m->vocab = (uint32_t)vocab;
    int t = mw_json_get(j, 0, "tokenizer");
    if (t < 0 || j->nodes[t].type != MW_JSON_STR || strlen(j->nodes[t].str) >= MW_TOKENIZER_NAME_MAX ||
        !mw_tokenizer_name_valid(j->nodes[t].str))
        return mw_fail(MW_ERR_FORMAT, "%s: \"tokenizer\" must be a tokenizer name (1 to %d of a-z 0-9 . _ -)", what,
                       MW_TOKENIZER_NAME_MAX - 1);
    snprintf(m->tok.name, sizeof m->tok.name, "%s", j->nodes[t].str);
    if (!get_hex(j, 0, "tokenizer_hash", 16, &hash))
        return mw_fail(MW_ERR_FORMAT, "%s: \"tokenizer_hash\" must be 16 lower-case hex digits", what);
    m->tok.hash = hash;
    uint64_t sum[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        int a = mw_json_get(j, 0, SPLIT[k]);
        if (a < 0 || j->nodes[a].type != MW_JSON_ARR)
            return mw_fail(MW_ERR_FORMAT, "%s: no \"%s\" array of shards", what, SPLIT[k]);
        int i = 0;
        for (int c = j->nodes[a].first; c >= 0; c = j->nodes[c].next, i++) {
            uint64_t tokens, crc;
            int fl = j->nodes[c].type == MW_JSON_OBJ ? mw_json_get(j, c, "file") : -1;
            if (fl < 0 || j->nodes[fl].type != MW_JSON_STR || !mw_set_file_valid(j->nodes[fl].str))
                return mw_fail(MW_ERR_FORMAT, "%s: %s shard %d: \"file\" must be a file name in the manifest's "
                                              "directory (no '/')", what, SPLIT[k], i);
            if (!get_u64(j, c, "tokens", MAX_TOKENS, &tokens) || tokens < 1)
                return mw_fail(MW_ERR_FORMAT, "%s: %s shard %d: \"tokens\" must be a positive integer", what, SPLIT[k], i);
            if (!get_hex(j, c, "crc32c", 8, &crc))
                return mw_fail(MW_ERR_FORMAT, "%s: %s shard %d: \"crc32c\" must be 8 lower-case hex digits", what,
                               SPLIT[k], i);
            if (sum[k] + tokens > MAX_TOKENS)
                return mw_fail(MW_ERR_FORMAT, "%s: the %s shards hold more than 2^48 tokens", what, SPLIT[k]);
            sum[k] += tokens;
            mw_status s = mw_manifest_add_shard(m, k, j->nodes[fl].str, tokens, (uint32_t)crc);
            if (s != MW_OK) return s == MW_ERR_NOMEM ? s : mw_fail(MW_ERR_FORMAT, "%s: %s", what, mw_last_error());
        }
    }
    if (m->n[0] == 0) return mw_fail(MW_ERR_FORMAT, "%s: the set has no training shards", what);
    MW_TRY(no_repeats(m, what));
    int p = mw_json_get(j, 0, "parts");
    if (p < 0 || j->nodes[p].type != MW_JSON_ARR) return mw_fail(MW_ERR_FORMAT, "%s: no \"parts\" array", what);
    uint64_t psum[2] = {0, 0};
    int i = 0;
    for (int c = j->nodes[p].first; c >= 0; c = j->nodes[c].next, i++) {
        mw_set_part part;
        if (j->nodes[c].type != MW_JSON_OBJ || !get_u64(j, c, "documents", MAX_TOKENS, &part.documents) ||
            !get_u64(j, c, "bytes", UINT64_MAX >> 1, &part.bytes) || !get_u64(j, c, "train_tokens", MAX_TOKENS, &part.train) ||
            !get_u64(j, c, "val_tokens", MAX_TOKENS, &part.val))
            return mw_fail(MW_ERR_FORMAT, "%s: part %d needs integer \"documents\", \"bytes\", \"train_tokens\" and "
                                          "\"val_tokens\"", what, i);
        psum[0] += part.train, psum[1] += part.val;
        if (part.train == 0 || psum[0] > MAX_TOKENS || psum[1] > MAX_TOKENS)
            return mw_fail(MW_ERR_FORMAT, "%s: part %d: \"train_tokens\" must be positive and the sums at most 2^48", what, i);
        MW_TRY(mw_manifest_add_part(m, &part));
    }
    if (psum[0] != sum[0] || psum[1] != sum[1])
        return mw_fail(MW_ERR_FORMAT, "%s: the parts add up to %llu train and %llu val tokens, the shards hold %llu and %llu",
                       what, (unsigned long long)psum[0], (unsigned long long)psum[1], (unsigned long long)sum[0],
                       (unsigned long long)sum[1]);
    return MW_OK;
}

mw_status mw_manifest_parse(mw_manifest *m, const char *text, size_t len, const char *what) {
    memset(m, 0, sizeof *m);
    mw_json j;
    MW_TRY(mw_json_parse(&j, text, len, what, MW_SET_MAX_BYTES));
    mw_status s = parse_nodes(m, &j, what);
    mw_json_free(&j);
    if (s != MW_OK) mw_manifest_free(m);
    return s;
}

mw_status mw_manifest_read(mw_manifest *m, const char *path) {
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f) return mw_fail(MW_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap && cap < MW_SET_MAX_BYTES) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        } else if (n == cap) {
            break;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return mw_fail(MW_ERR_NOMEM, "out of memory reading %s", path);
    mw_status s = err ? mw_fail(MW_ERR_IO, "cannot read %s", path)
                : n == cap ? mw_fail(MW_ERR_FORMAT, "%s: larger than a manifest may be (%zu MiB)", path, cap >> 20)
                           : mw_manifest_parse(m, buf, n, path);
    free(buf);
    return s;
}

mw_status mw_manifest_write(const mw_manifest *m, const char *path) {
    char tmp[4200];
    FILE *f;
    MW_TRY(mw_tmp_create(path, tmp, sizeof tmp, &f));
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": 1,\n  \"vocab\": %u,\n  \"width\": %d,\n"
               "  \"tokenizer\": \"%s\",\n  \"tokenizer_hash\": \"%016" PRIx64 "\",\n",
            FORMAT, m->vocab, m->width, m->tok.name, m->tok.hash);
    for (int k = 0; k < 2; k++) {
        fprintf(f, "  \"%s\": [", SPLIT[k]);
        for (int i = 0; i < m->n[k]; i++)
            fprintf(f, "%s\n    {\"file\": \"%s\", \"tokens\": %" PRIu64 ", \"crc32c\": \"%08" PRIx32 "\"}", i ? "," : "",
                    m->shard[k][i].file, m->shard[k][i].tokens, m->shard[k][i].crc);
        fprintf(f, "%s],\n", m->n[k] ? "\n  " : "");
    }
    fprintf(f, "  \"parts\": [");
    for (int i = 0; i < m->nparts; i++)
        fprintf(f, "%s\n    {\"documents\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"train_tokens\": %" PRIu64
                   ", \"val_tokens\": %" PRIu64 "}", i ? "," : "", m->part[i].documents, m->part[i].bytes, m->part[i].train,
                m->part[i].val);
    fprintf(f, "\n  ]\n}\n");
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (bad) {
        unlink(tmp);
        return mw_fail(MW_ERR_IO, "cannot write %s: %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return mw_fail(MW_ERR_IO, "cannot write %s: %s", path, strerror(err));
    }
    return mw_sync_parent(path);
}
