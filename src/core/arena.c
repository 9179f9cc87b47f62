#include "arena.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "status.h"

const char *mw_category_name(mw_category c) {
    static const char *names[MW_CAT_COUNT] = {"parameters", "gradients", "optimizer",
                                              "activations", "workspace"};
    return (unsigned)c < MW_CAT_COUNT ? names[c] : "unknown";
}

mw_status mw_arena_init(mw_arena *a, uint64_t capacity) {
    memset(a, 0, sizeof *a);
    if (capacity == 0) capacity = MW_ALIGN;
    /* accounted (no MAP_NORESERVE): a plan the machine cannot hold is refused here, cleanly */
    void *p = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        char b[32];
        return mw_fail(MW_ERR_NOMEM, "cannot map an arena of %s: %s",
                       mw_fmt_bytes(capacity, b, sizeof b), strerror(errno));
    }
    /* Every page is touched now, once: the plan's memory is resident from the start instead of
     * arriving page by page during the first step, so peak RSS is the plan plus the process's
     * fixed overhead whatever the shape, and a machine short of memory shows it before step 1. */
    const long pg = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    const long npages = (long)((capacity + (uint64_t)pg - 1) / (uint64_t)pg);
    volatile char *vp = p;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < npages; i++) vp[i * pg] = 0;
    a->base = p;
    a->capacity = capacity;
    return MW_OK;
}

void mw_arena_release(mw_arena *a) {
    if (a && a->base) munmap(a->base, a->capacity);
    if (a) memset(a, 0, sizeof *a);
}

char *mw_fmt_bytes(uint64_t bytes, char *buf, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024.0 && i < 5) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, n, "%.2f %s", v, u[i]);
    return buf;
}

int mw_parse_size(const char *s, uint64_t *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || !isfinite(v)) return 0;
    while (*end == ' ') end++;
    static const struct { const char *suf; double mul; } units[] = {
        {"", 1},          {"B", 1},         {"K", 1024.0},    {"KiB", 1024.0},
        {"KB", 1e3},      {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9}, {"T", 1099511627776.0},
        {"TiB", 1099511627776.0}, {"TB", 1e12}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suf) == 0) {
            double b = v * units[i].mul;
            if (b >= 1.8e19 || b != floor(b)) return 0;
            *out = (uint64_t)b;
            return 1;
        }
    }
    return 0;
}
