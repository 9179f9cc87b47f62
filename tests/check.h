/* Minimal test helpers: failures print and count, main returns non-zero if any failed. */
#ifndef MW_CHECK_H
#define MW_CHECK_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures = 0;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        mw_status s_ = (expr);                                                                     \
        if (s_ != MW_OK) {                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,               \
                    mw_status_str(s_), mw_last_error());                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* max |a-b| / max |b| over n elements (the tensor-relative error). */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / mb;
}

/* The whole file at path (malloc'd, one spare byte for a terminator; *n its size); exits 1 naming
 * the file when it cannot be read. */
static inline unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL: cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (!b || fread(b, 1, *n, f) != *n) {
        fprintf(stderr, "FAIL: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    return b;
}

static inline int test_summary(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}
#endif
