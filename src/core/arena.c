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

/* ---- what the machine can still hold ---------------------------------------------------------- */

/* The first number in path ("max" reads as UINT64_MAX). 0 when unreadable. */
static int read_u64(const char *path, const char *key, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f)) {
        const char *p = line;
        if (key) {
            if (strncmp(line, key, strlen(key)) != 0) continue;
            p += strlen(key);
        }
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "max", 3) == 0) {
            *out = UINT64_MAX;
            ok = 1;
        } else if (isdigit((unsigned char)*p)) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(p, &end, 10);
            ok = errno == 0;
            *out = v;
            while (*end == ' ') end++;
            if (ok && key && strncmp(end, "kB", 2) == 0) *out = v > UINT64_MAX / 1024 ? UINT64_MAX : v * 1024;
        }
        if (!key) break;
    }
    fclose(f);
    return ok;
}

/* The tightest cgroup limit on this process: for the cgroup named in /proc/self/cgroup (v2's
 * "0::PATH" line, v1's memory controller) and each of its ancestors, limit minus usage. */
static void cgroup_room(const char *fs, uint64_t *room, char *why, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", fs);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        const char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        const int v2 = c2 == c1 + 1; /* "0::PATH" */
        int v1 = 0;                   /* "ID:CONTROLLER,...:PATH" with memory among them */
        for (const char *c = c1 + 1; !v2 && c < c2; c += strcspn(c, ",:") + 1)
            v1 |= strncmp(c, "memory", 6) == 0 && (c[6] == ',' || c[6] == ':');
        if (!v1 && !v2) continue;
        char root[4200];
        snprintf(root, sizeof root, "%s/sys/fs/cgroup%s", fs, v2 ? "" : "/memory");
        const char *lim_name = v2 ? "memory.max" : "memory.limit_in_bytes";
        const char *use_name = v2 ? "memory.current" : "memory.usage_in_bytes";
        char rel[4096];
        snprintf(rel, sizeof rel, "%s", c2 + 1);
        for (;;) { /* the cgroup, then each parent up to the root of the mount */
            char lim_path[8400], use_path[8400];
            uint64_t lim, use;
            snprintf(lim_path, sizeof lim_path, "%s%s/%s", root, strcmp(rel, "/") ? rel : "", lim_name);
            snprintf(use_path, sizeof use_path, "%s%s/%s", root, strcmp(rel, "/") ? rel : "", use_name);
            /* v1 writes "no limit" as a page-rounded 2^63 */
            if (read_u64(lim_path, NULL, &lim) && lim < (1ull << 62) && read_u64(use_path, NULL, &use)) {
                const uint64_t r = lim > use ? lim - use : 0;
                if (r < *room) {
                    char b1[32], b2[32];
                    *room = r;
                    snprintf(why, n, "cgroup %s %s with %s in use", lim_path, mw_fmt_bytes(lim, b1, sizeof b1),
                             mw_fmt_bytes(use, b2, sizeof b2));
                }
            }
            char *slash = strrchr(rel, '/');
            if (!slash || (slash == rel && rel[1] == 0)) break;
            if (slash == rel) rel[1] = 0;
            else *slash = 0;
        }
    }
    fclose(f);
}

mw_status mw_mem_available(uint64_t *bytes, char *why, size_t n) { return mw_mem_available_in("", bytes, why, n); }

mw_status mw_mem_available_in(const char *fs, uint64_t *bytes, char *why, size_t n) {
    *bytes = UINT64_MAX;
    if (n) why[0] = 0;
    const char *ov = getenv("MEMWALL_AVAILABLE_OVERRIDE");
    if (ov && *ov) {
        if (!mw_parse_size(ov, bytes))
            return mw_fail(MW_ERR_ARG, "MEMWALL_AVAILABLE_OVERRIDE='%s' is not a size", ov);
        snprintf(why, n, "MEMWALL_AVAILABLE_OVERRIDE");
        return MW_OK;
    }
    uint64_t avail;
    char b[32], cg[8600] = "", path[4200];
    int k = 0;
    snprintf(path, sizeof path, "%s/proc/meminfo", fs);
    if (read_u64(path, "MemAvailable:", &avail)) {
        *bytes = avail;
        k = snprintf(why, n, "MemAvailable %s", mw_fmt_bytes(avail, b, sizeof b));
    }
    uint64_t room = UINT64_MAX;
    cgroup_room(fs, &room, cg, sizeof cg);
    if (room != UINT64_MAX) {
        if (room < *bytes) *bytes = room;
        if (k >= 0 && (size_t)k < n) snprintf(why + k, n - (size_t)k, "%s%s", k ? "; " : "", cg);
    }
    return MW_OK;
}

mw_status mw_arena_init(mw_arena *a, uint64_t capacity) {
    memset(a, 0, sizeof *a);
    if (capacity == 0) capacity = MW_ALIGN;
    /* The pages are touched below: a plan larger than what the machine (or the process's cgroup)
     * can still hold would get the process OOM-killed there, so it is refused before mapping. */
    uint64_t avail;
    char why[600];
    MW_TRY(mw_mem_available(&avail, why, sizeof why));
    if (capacity > avail) {
        char b1[32], b2[32];
        return mw_fail(MW_ERR_BUDGET, "the plan needs %s but only %s is available (%s): lower --batch or --seq, "
                       "or recompute more (--recompute full)", mw_fmt_bytes(capacity, b1, sizeof b1),
                       mw_fmt_bytes(avail, b2, sizeof b2), why);
    }
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
