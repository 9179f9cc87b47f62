#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/json.h"
#include "../core/status.h"

#define MAX_TENSORS 1000000
#define CHUNK 65536 /* elements per read */

static mw_status bad(const mw_st_file *f, const char *name, const char *why) {
    return mw_fail(MW_ERR_FORMAT, "%s: tensor '%s': %s", f->path, name, why);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const mw_st_tensor *)a)->name, ((const mw_st_tensor *)b)->name);
}

static int cmp_begin(const void *a, const void *b) {
    const mw_st_tensor *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

void mw_st_close(mw_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    if (f->fd >= 0) close(f->fd);
    f->t = NULL;
    f->n = 0;
    f->fd = -1;
}

mw_status mw_st_parse_header(mw_st_file *f, const char *json, uint64_t len, uint64_t data_start,
                             uint64_t data_size) {
    mw_json j;
    char what[1100];
    snprintf(what, sizeof what, "%s: header", f->path);
    MW_TRY(mw_json_parse(&j, json, len, what, MW_JSON_MAX_SAFETENSORS));
    mw_status s = MW_OK;
    int root = 0;
    if (j.nodes[root].type != MW_JSON_OBJ) {
        s = mw_fail(MW_ERR_FORMAT, "%s: header is not a JSON object", f->path);
        goto out;
    }
    int count = 0;
    for (int c = j.nodes[root].first; c >= 0; c = j.nodes[c].next) count++;
    if (count > MAX_TENSORS) {
        s = mw_fail(MW_ERR_FORMAT, "%s: %d header entries (at most %d)", f->path, count, MAX_TENSORS);
        goto out;
    }
    f->t = calloc((size_t)count + 1, sizeof *f->t);
    if (!f->t) {
        s = mw_fail(MW_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int c = j.nodes[root].first; c >= 0; c = j.nodes[c].next) {
        const mw_json_node *e = &j.nodes[c];
        if (strcmp(e->key, "__metadata__") == 0) {
            if (e->type != MW_JSON_OBJ) {
                s = mw_fail(MW_ERR_FORMAT, "%s: __metadata__ is not an object", f->path);
                goto out;
            }
            for (int m = e->first; m >= 0; m = j.nodes[m].next)
                if (j.nodes[m].type != MW_JSON_STR) {
                    s = mw_fail(MW_ERR_FORMAT, "%s: __metadata__ value '%s' is not a string", f->path,
                                j.nodes[m].key);
                    goto out;
                }
            continue;
        }
        if (e->type != MW_JSON_OBJ) {
            s = bad(f, e->key, "entry is not an object");
            goto out;
        }
        int dt = mw_json_get(&j, c, "dtype"), sh = mw_json_get(&j, c, "shape"),
            of = mw_json_get(&j, c, "data_offsets");
        if (dt < 0 || sh < 0 || of < 0 || j.nodes[dt].type != MW_JSON_STR ||
            j.nodes[sh].type != MW_JSON_ARR || j.nodes[of].type != MW_JSON_ARR) {
            s = bad(f, e->key, "needs dtype (string), shape and data_offsets (arrays)");
            goto out;
        }
        mw_st_tensor *t = &f->t[f->n];
        static const struct {
            const char *name;
            mw_st_dtype dt;
            int size;
        } types[] = {{"F32", MW_ST_F32, 4},   {"F16", MW_ST_F16, 2},    {"BF16", MW_ST_BF16, 2},
                     {"F64", MW_ST_F64, 8},   {"I64", MW_ST_OTHER, 8},  {"I32", MW_ST_OTHER, 4},
                     {"I16", MW_ST_OTHER, 2}, {"I8", MW_ST_OTHER, 1},   {"U8", MW_ST_OTHER, 1},
                     {"BOOL", MW_ST_OTHER, 1}, {"U16", MW_ST_OTHER, 2}, {"U32", MW_ST_OTHER, 4},
                     {"U64", MW_ST_OTHER, 8}, {"F8_E4M3", MW_ST_OTHER, 1}, {"F8_E5M2", MW_ST_OTHER, 1}};
        t->elem_size = 0;
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
            if (strcmp(j.nodes[dt].str, types[k].name) == 0) t->dtype = types[k].dt, t->elem_size = types[k].size;
        if (!t->elem_size) {
            s = bad(f, e->key, "unknown dtype");
            goto out;
        }
        uint64_t numel = 1;
        t->ndim = 0;
        for (int d = j.nodes[sh].first; d >= 0; d = j.nodes[d].next) {
            const mw_json_node *x = &j.nodes[d];
            if (x->type != MW_JSON_NUM || !x->is_int || x->i < 0 || t->ndim == 8) {
                s = bad(f, e->key, "shape must be at most 8 non-negative integers");
                goto out;
            }
            t->shape[t->ndim++] = x->i;
            if (x->i && numel > UINT64_MAX / 16 / (uint64_t)x->i) {
                s = bad(f, e->key, "shape too large");
                goto out;
            }
            numel *= (uint64_t)x->i;
        }
        int o0 = j.nodes[of].first, o1 = o0 >= 0 ? j.nodes[o0].next : -1;
        if (o0 < 0 || o1 < 0 || j.nodes[o1].next >= 0 || j.nodes[o0].type != MW_JSON_NUM ||
            j.nodes[o1].type != MW_JSON_NUM || !j.nodes[o0].is_int || !j.nodes[o1].is_int ||
            j.nodes[o0].i < 0 || j.nodes[o1].i < j.nodes[o0].i) {
            s = bad(f, e->key, "data_offsets must be [begin, end] with 0 <= begin <= end");
            goto out;
        }
        uint64_t b = (uint64_t)j.nodes[o0].i, en = (uint64_t)j.nodes[o1].i;
        if (en > data_size) {
            s = bad(f, e->key, "data_offsets point past the end of the file");
            goto out;
        }
        if (en - b != numel * (uint64_t)t->elem_size) {
            s = bad(f, e->key, "data_offsets span does not match shape x dtype size");
            goto out;
        }
        t->begin = data_start + b;
        t->end = data_start + en;
        if (!(t->name = strdup(e->key))) {
            s = mw_fail(MW_ERR_NOMEM, "out of memory");
            goto out;
        }
        f->n++;
    }
    mw_st_tensor *sorted = malloc(sizeof *sorted * (size_t)(f->n + 1));
    if (!sorted) {
        s = mw_fail(MW_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(sorted, f->t, sizeof *sorted * (size_t)f->n);
    qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_name); /* duplicate names: JSON allows them, we do not */
    for (int a = 1; a < f->n; a++)
        if (strcmp(sorted[a - 1].name, sorted[a].name) == 0) {
            s = bad(f, sorted[a].name, "appears twice in the header");
            free(sorted);
            goto out;
        }
    qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_begin);
    for (int a = 1; a < f->n; a++)
        if (sorted[a].begin < sorted[a - 1].end) {
            s = mw_fail(MW_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", f->path, sorted[a - 1].name,
                        sorted[a].name);
            break;
        }
    free(sorted);
out:
    mw_json_free(&j);
    return s;
}

mw_status mw_st_open(mw_st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    f->fd = fd;
    struct stat st;
    unsigned char h8[8];
    mw_status s = MW_OK;
    char *json = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s = mw_fail(MW_ERR_FORMAT, "%s: not a regular file", path);
        goto out;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size < 8 || pread(fd, h8, 8, 0) != 8) {
        s = mw_fail(MW_ERR_FORMAT, "%s: too short for a safetensors file", path);
        goto out;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | h8[i];
    if (n < 2 || n > MW_ST_MAX_HEADER || n > f->size - 8) {
        s = mw_fail(MW_ERR_FORMAT, "%s: header length %llu is out of bounds (file is %llu bytes)", path,
                    (unsigned long long)n, (unsigned long long)f->size);
        goto out;
    }
    if (!(json = malloc(n))) {
        s = mw_fail(MW_ERR_NOMEM, "out of memory for a %llu-byte header", (unsigned long long)n);
        goto out;
    }
    for (uint64_t got = 0; got < n;) {
        ssize_t k = pread(fd, json + got, n - got, (off_t)(8 + got));
        if (k <= 0) {
            s = mw_fail(MW_ERR_IO, "cannot read %s: %s", path, k ? strerror(errno) : "unexpected end");
            goto out;
        }
        got += (uint64_t)k;
    }
    s = mw_st_parse_header(f, json, n, 8 + n, f->size - 8 - n);
out:
    free(json);
    if (s != MW_OK) mw_st_close(f);
    return s;
}

const mw_st_tensor *mw_st_find(const mw_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
    if (e == 0) {
        if (m == 0) {
            bits = sign;
        } else { /* subnormal */
            e = 113;
            while (!(m & 1024)) m <<= 1, e--;
            bits = sign | e << 23 | (m & 1023) << 13;
        }
    } else if (e == 31) {
        bits = sign | 0x7F800000u | m << 13;
    } else {
        bits = sign | (e + 112) << 23 | m << 13;
    }
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

mw_status mw_st_read_f32(const mw_st_file *f, const mw_st_tensor *t, float *dst, int transpose) {
    return mw_st_read_f32_map(f, t, dst, transpose, NULL, NULL);
}

mw_status mw_st_read_f32_map(const mw_st_file *f, const mw_st_tensor *t, float *dst, int transpose,
                             int (*map)(void *ctx, uint64_t whole, size_t *local), void *ctx) {
    if (t->dtype == MW_ST_OTHER)
        return mw_fail(MW_ERR_FORMAT, "%s: tensor '%s' is not a float tensor", f->path, t->name);
    uint64_t numel = (t->end - t->begin) / (uint64_t)t->elem_size;
    uint64_t rows = t->ndim == 2 ? (uint64_t)t->shape[0] : 1, cols = rows ? numel / (rows ? rows : 1) : 0;
    unsigned char buf[CHUNK * 8];
    for (uint64_t i0 = 0; i0 < numel; i0 += CHUNK) {
        uint64_t k = numel - i0 < CHUNK ? numel - i0 : CHUNK, bytes = k * (uint64_t)t->elem_size;
        for (uint64_t got = 0; got < bytes;) {
            ssize_t r = pread(f->fd, buf + got, bytes - got, (off_t)(t->begin + i0 * (uint64_t)t->elem_size + got));
            if (r <= 0)
                return mw_fail(MW_ERR_IO, "cannot read %s: %s", f->path, r ? strerror(errno) : "unexpected end");
            got += (uint64_t)r;
        }
        for (uint64_t e = 0; e < k; e++) {
            const unsigned char *p = buf + e * (uint64_t)t->elem_size;
            float x;
            if (t->dtype == MW_ST_F32) {
                memcpy(&x, p, 4);
            } else if (t->dtype == MW_ST_F64) {
                double d;
                memcpy(&d, p, 8);
                x = (float)d;
            } else if (t->dtype == MW_ST_F16) {
                x = half_to_f32((uint16_t)(p[0] | p[1] << 8));
            } else {
                uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
                memcpy(&x, &bits, 4);
            }
            uint64_t idx = i0 + e;
            if (transpose && t->ndim == 2) idx = (idx % cols) * rows + idx / cols;
            size_t local = (size_t)idx;
            if (map && !map(ctx, idx, &local)) continue; /* another rank's element */
            dst[local] = x;
        }
    }
    return MW_OK;
}
