/* The .mwfx fixtures of tests/ref/make_*_fixture.py (PyTorch references): a magic "MWFX0001", a
 * record count, then per record its name, dtype, dims and float32/int32 data. Test-only; every
 * failure prints "FAIL: ..." and exits 1. */
#ifndef MW_TEST_FIXTURE_H
#define MW_TEST_FIXTURE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXREC 256
typedef struct rec {
    char name[96];
    int dtype, ndim, dims[4];
    size_t n;
    void *data;
} rec;
static rec recs[MAXREC];
static int nrec;

static inline void load_fixture(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL: cannot open fixture %s\n", path);
        exit(1);
    }
    char magic[8];
    uint32_t n;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "MWFX0001", 8) || fread(&n, 4, 1, f) != 1 ||
        n > MAXREC) {
        fprintf(stderr, "FAIL: %s is not a fixture\n", path);
        exit(1);
    }
    for (uint32_t i = 0; i < n; i++) {
        rec *r = &recs[nrec++];
        uint32_t len, dt, nd, d;
        memset(r->name, 0, sizeof r->name);
        int ok = fread(&len, 4, 1, f) == 1 && len < sizeof r->name &&
                 fread(r->name, 1, len, f) == len && fread(&dt, 4, 1, f) == 1 &&
                 fread(&nd, 4, 1, f) == 1 && nd <= 4;
        r->n = 1;
        for (uint32_t k = 0; ok && k < nd; k++) {
            ok = fread(&d, 4, 1, f) == 1;
            r->dims[k] = (int)d;
            r->n *= d;
        }
        r->dtype = (int)dt;
        r->ndim = (int)nd;
        r->data = ok ? malloc(r->n * 4) : NULL;
        if (!ok || !r->data || fread(r->data, 4, r->n, f) != r->n) {
            fprintf(stderr, "FAIL: truncated fixture %s\n", path);
            exit(1);
        }
    }
    fclose(f);
}

static inline void free_fixture(void) {
    for (int i = 0; i < nrec; i++) free(recs[i].data);
    nrec = 0;
}

static inline rec *get(const char *name) {
    for (int i = 0; i < nrec; i++)
        if (strcmp(recs[i].name, name) == 0) return &recs[i];
    fprintf(stderr, "FAIL: fixture has no record %s\n", name);
    exit(1);
}
static inline rec *getf(const char *prefix, const char *name) {
    char b[128];
    snprintf(b, sizeof b, "%s/%s", prefix, name);
    return get(b);
}

/* the generator's hyper-parameters were Python doubles, stored as float32: recover them */
static inline double dbl(float f) {
    char b[32];
    snprintf(b, sizeof b, "%.6g", f);
    return strtod(b, NULL);
}
#endif
