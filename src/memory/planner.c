#include "planner.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../core/status.h"
#include "period.h"

#define ALIGN 64

void mw_planner_init(mw_planner *p, int nops) {
    memset(p, 0, sizeof *p);
    p->nops = nops;
}

void mw_planner_free(mw_planner *p) {
    free(p->b);
    free(p->ord);
    memset(p, 0, sizeof *p);
}

mw_status mw_planner_add(mw_planner *p, const char *name, int layer, uint64_t bytes, mw_category cat,
                         int first, int last) {
    if (first < 0 || first > last || last >= p->nops)
        return mw_fail(MW_ERR_ARG, "internal: buffer %s alive in ops %d..%d of 0..%d", name, first, last,
                       p->nops - 1);
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        mw_pbuf *nb = realloc(p->b, sizeof *nb * (size_t)cap);
        if (!nb) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
        p->b = nb;
        p->cap = cap;
    }
    mw_pbuf *b = &p->b[p->n++];
    b->name = name;
    b->layer = layer;
    b->bytes = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    b->offset = 0;
    b->first = first;
    b->last = last;
    b->cat = cat;
    b->tag = 0;
    b->mb = -1;
    return MW_OK;
}

static int by_size_desc(const void *x, const void *y, void *ctx) {
    const mw_pbuf *b = ctx;
    const mw_pbuf *a1 = &b[*(const int *)x], *a2 = &b[*(const int *)y];
    if (a1->bytes != a2->bytes) return a1->bytes < a2->bytes ? 1 : -1;
    if (a1->first != a2->first) return a1->first - a2->first; /* ties: a fixed order */
    return *(const int *)x - *(const int *)y;
}

/* ---- placement ---------------------------------------------------------------------------------
 *
 * The rule (unchanged since the first planner): buffers go largest first (ties: earlier first op,
 * then insertion order); each goes into the smallest hole that fits among the address ranges of
 * the already placed buffers whose lifetimes overlap its own (the lowest such hole on a tie), or
 * above them all. A hole is a gap of the UNION of those ranges below its top, so the answer
 * depends only on that union, which is what the structure below keeps.
 *
 * A segment tree over ops. Each node v covers ops [lo, hi] and holds two unions of address
 * ranges (sorted, disjoint, touching ranges merged): own(v), the placed buffers whose lifetime
 * covers [lo, hi] and whose canonical cover of their lifetime includes v; and sub(v), the union
 * of own() over v's subtree, i.e. the buffers whose canonical nodes lie below v. A buffer alive
 * in [f, l] overlaps a placed one exactly when the placed one is in sub(q) for a canonical node q
 * of [f, l] or in own(a) for an ancestor a of one: the ops the two share lie under q, and the
 * placed buffer's canonical node on the path to them is either below q or above it. So a query
 * unions O(log ops) sets and an insertion touches O(log ops) sets. The unions stay short because
 * the placement packs ranges tightly: the cost grows with the number of holes, not of buffers.
 * Zero-byte buffers (sorted last; fp32 runs make one per bf16 workspace it does not need) go in
 * as zero-width ranges [x, x): one inside a hole splits it, as the first planner's sweep over the
 * single buffers counted it, and one touching or inside a range merges with it and changes
 * nothing, so the union stays exact for them too (they once took a scan over every placed buffer
 * and a sort per buffer: 80 s to plan 4096 layers). */

/* Storage of the unions: blocks of 2^c ranges cut from large chunks, a free list per size class,
 * all released at once (a placement makes about as many small sets as buffers). */
typedef struct pool {
    char **chunks;
    size_t *sizes;
    int nchunks, capchunks;
    char *cur;
    size_t left;
    uint64_t *free_list[40];
} pool;

static uint64_t *pool_get(pool *pl, int cls) {
    uint64_t *v = pl->free_list[cls];
    if (v) {
        memcpy(&pl->free_list[cls], v, sizeof(uint64_t *));
        return v;
    }
    const size_t bytes = (sizeof(uint64_t) * 2) << cls;
    if (bytes > pl->left) {
        /* chunks of 1, 2, 4 ... 16 MiB, mapped with their pages present: one system call instead
         * of a page fault per 4 KiB, which is most of the cost of a large plan in a VM */
        size_t sz = (size_t)1 << (20 + (pl->nchunks < 4 ? pl->nchunks : 4));
        while (sz < bytes) sz *= 2;
        if (pl->nchunks == pl->capchunks) {
            int cap = pl->capchunks ? 2 * pl->capchunks : 16;
            char **nc = realloc(pl->chunks, sizeof *nc * (size_t)cap);
            if (nc) pl->chunks = nc;
            size_t *ns = realloc(pl->sizes, sizeof *ns * (size_t)cap);
            if (ns) pl->sizes = ns;
            if (!nc || !ns) return NULL;
            pl->capchunks = cap;
        }
        void *c = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (c == MAP_FAILED) return NULL;
        pl->cur = c;
        pl->sizes[pl->nchunks] = sz;
        pl->chunks[pl->nchunks++] = pl->cur;
        pl->left = sz;
    }
    v = (uint64_t *)(void *)pl->cur;
    pl->cur += bytes;
    pl->left -= bytes;
    return v;
}

static void pool_put(pool *pl, uint64_t *v, int cls) {
    memcpy(v, &pl->free_list[cls], sizeof(uint64_t *));
    pl->free_list[cls] = v;
}

static void pool_free(pool *pl) {
    for (int i = 0; i < pl->nchunks; i++) munmap(pl->chunks[i], pl->sizes[i]);
    free(pl->chunks), free(pl->sizes);
}

typedef struct iset { /* a union of address ranges: [v[2i], v[2i+1]), sorted, disjoint, apart */
    uint64_t *v;
    int n, cls; /* room for 2^cls ranges once v is set */
} iset;

/* Adds [a, b) (a <= b: an empty [a, a) is a zero-byte buffer's mark), merging every range it
 * overlaps or touches. 0 when out of memory. */
static int iset_add(pool *pl, iset *s, uint64_t a, uint64_t b) {
    int lo = 0, hi = s->n; /* the first range whose end >= a */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->v[2 * mid + 1] < a) lo = mid + 1;
        else hi = mid;
    }
    int e = lo, h2 = s->n; /* the first range from lo whose start > b */
    while (e < h2) {
        int mid = (e + h2) / 2;
        if (s->v[2 * mid] <= b) e = mid + 1;
        else h2 = mid;
    }
    if (e > lo) { /* ranges lo..e-1 merge with [a, b) into range lo */
        if (s->v[2 * lo] < a) a = s->v[2 * lo];
        if (s->v[2 * (e - 1) + 1] > b) b = s->v[2 * (e - 1) + 1];
        s->v[2 * lo] = a;
        s->v[2 * lo + 1] = b;
        memmove(s->v + 2 * (lo + 1), s->v + 2 * e, sizeof(uint64_t) * 2 * (size_t)(s->n - e));
        s->n -= e - lo - 1;
        return 1;
    }
    if (!s->v || s->n == 1 << s->cls) {
        const int cls = s->v ? s->cls + 1 : 0;
        uint64_t *nv = pool_get(pl, cls);
        if (!nv) return 0;
        if (s->v) {
            memcpy(nv, s->v, sizeof(uint64_t) * 2 * (size_t)s->n);
            pool_put(pl, s->v, s->cls);
        }
        s->v = nv;
        s->cls = cls;
    }
    memmove(s->v + 2 * (lo + 1), s->v + 2 * lo, sizeof(uint64_t) * 2 * (size_t)(s->n - lo));
    s->v[2 * lo] = a;
    s->v[2 * lo + 1] = b;
    s->n++;
    return 1;
}

/* The tree's nodes in depth-first order: node v covers ops [lo, hi]; its left child (covering
 * [lo, mid]) is v + 1 and its right child v + 2 (mid - lo + 1); 2 nops - 1 nodes in all. */
typedef struct placer {
    iset *own, *sub;
    int *rd_own, *rd_sub; /* the reads still to come of each set: one nobody reads again stays as
                           * it is (the queries are known in advance: every buffer's own) */
    int *path, npath, cappath; /* a query's nodes, a canonical one v as ~v, for its insertion */
    pool pool;
    const iset **got; /* a query's sets */
    int ngot, capgot;
    uint64_t *runs; /* room for a query's ranges twice: their union so far, and the next one */
    size_t capruns;
} placer;


static int placer_take(placer *t, const iset *s, int node) {
    if (t->npath == t->cappath) {
        int cap = t->cappath ? 2 * t->cappath : 128;
        int *np = realloc(t->path, sizeof *np * (size_t)cap);
        if (!np) return 0;
        t->path = np;
        t->cappath = cap;
    }
    t->path[t->npath++] = node;
    if (s->n == 0) return 1;
    if (t->ngot == t->capgot) {
        int cap = t->capgot ? 2 * t->capgot : 64;
        const iset **ng = realloc(t->got, sizeof *ng * (size_t)cap);
        if (!ng) return 0;
        t->got = ng;
        t->capgot = cap;
    }
    t->got[t->ngot++] = s;
    /* the sets lie all over the pool: ask for their lines now, so that the misses overlap rather
     * than stall the merge one after the other */
    const char *d = (const char *)s->v;
    for (size_t o = 0; o < sizeof(uint64_t) * 2 * (size_t)s->n; o += 64) __builtin_prefetch(d + o);
    return 1;
}

static void placer_count(placer *t, int v, int lo, int hi, int f, int l) {
    if (f <= lo && hi <= l) {
        t->rd_sub[v]++;
        return;
    }
    t->rd_own[v]++;
    const int mid = (lo + hi) / 2;
    if (f <= mid) placer_count(t, v + 1, lo, mid, f, l);
    if (l > mid) placer_count(t, v + 2 * (mid - lo + 1), mid + 1, hi, f, l);
}

static int placer_query(placer *t, int v, int lo, int hi, int f, int l) {
    if (f <= lo && hi <= l) {
        t->rd_sub[v]--;
        return placer_take(t, &t->sub[v], ~v);
    }
    t->rd_own[v]--;
    if (!placer_take(t, &t->own[v], v)) return 0;
    const int mid = (lo + hi) / 2;
    if (f <= mid && !placer_query(t, v + 1, lo, mid, f, l)) return 0;
    if (l > mid && !placer_query(t, v + 2 * (mid - lo + 1), mid + 1, hi, f, l)) return 0;
    return 1;
}

/* Inserts [a, b) into the sets of the nodes the buffer's query visited (t->path: a canonical
 * node v as ~v; an insertion visits the nodes its query does), skipping the sets no later query
 * reads. */
static int placer_insert(placer *t, uint64_t a, uint64_t b) {
    for (int j = 0; j < t->npath; j++) {
        const int c = t->path[j] < 0, v = c ? ~t->path[j] : t->path[j];
        if (t->rd_sub[v] && !iset_add(&t->pool, &t->sub[v], a, b)) return 0;
        if (c && t->rd_own[v] && !iset_add(&t->pool, &t->own[v], a, b)) return 0;
    }
    return 1;
}

/* dst = the union of the unions a (na ranges) and b (nb): sorted, ranges that overlap or touch
 * merged, as iset_add keeps them, so a zero-width range survives only strictly inside a hole.
 * dst holds na + nb ranges and is neither a nor b. Returns its count. O(na + nb). */
static size_t union_merge(uint64_t *dst, const uint64_t *a, size_t na, const uint64_t *b, size_t nb) {
    size_t i = 0, j = 0, n = 0;
    while (i < na || j < nb) {
        const uint64_t *x;
        if (j == nb || (i < na && a[2 * i] <= b[2 * j])) x = a + 2 * i++;
        else x = b + 2 * j++;
        if (n > 0 && x[0] <= dst[2 * n - 1]) { /* overlaps or touches the last range: extend it */
            if (x[1] > dst[2 * n - 1]) dst[2 * n - 1] = x[1];
        } else {
            dst[2 * n] = x[0], dst[2 * n + 1] = x[1], n++;
        }
    }
    return n;
}

/* The smallest hole of at least bytes in ranges[0..n) (pairs, sorted by start), the lowest on a
 * tie, or the top of them all. The first planner's sweep, verbatim. */
static uint64_t best_fit(const uint64_t *r, size_t n, uint64_t bytes) {
    uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, at = 0;
    for (size_t j = 0; j < n; j++) {
        const uint64_t end = r[2 * j];
        if (end > at && end - at >= bytes && end - at < best_gap) {
            best = at;
            best_gap = end - at;
        }
        if (r[2 * j + 1] > at) at = r[2 * j + 1];
    }
    return best != UINT64_MAX ? best : at;
}

mw_status mw_planner_place(mw_planner *p) {
    return p->unit > 0 ? mw_period_place(p, p->unit) : mw_planner_place_groups(p, NULL, NULL);
}

mw_status mw_planner_place_groups(mw_planner *p, const int *lead, const int *next) {
    placer t = {0};
    const int nodes = p->nops > 0 ? 2 * p->nops - 1 : 1, top = p->nops > 0 ? p->nops - 1 : 0;
    int *order = malloc(sizeof *order * (size_t)(p->n + 1));
    t.own = calloc((size_t)nodes, sizeof *t.own);
    t.sub = calloc((size_t)nodes, sizeof *t.sub);
    t.rd_own = calloc((size_t)nodes, sizeof *t.rd_own);
    t.rd_sub = calloc((size_t)nodes, sizeof *t.rd_sub);
    int ok = order && t.own && t.sub && t.rd_own && t.rd_sub;
    int nlead = 0;
    free(p->ord);
    p->ord = malloc(sizeof *p->ord * ((size_t)p->n + 1));
    ok = ok && p->ord;
    for (int i = 0; ok && i < p->n; i++) placer_count(&t, 0, 0, top, p->b[i].first, p->b[i].last);
    for (int i = 0; ok && i < p->n; i++)
        if (!lead || lead[i] == i) order[nlead++] = i;
    if (ok) qsort_r(order, (size_t)nlead, sizeof *order, by_size_desc, p->b);
    p->peak = 0;
    for (int k = 0; ok && k < nlead; k++) {
        mw_pbuf *b = &p->b[order[k]];
        size_t nr = 0; /* the union of the overlapping placed ranges, from the tree */
        t.ngot = t.npath = 0;
        for (int i = order[k]; ok && i >= 0; i = next ? next[i] : -1) /* every member's */
            ok = placer_query(&t, 0, 0, top, p->b[i].first, p->b[i].last);
        for (int j = 0; ok && j < t.ngot; j++) nr += (size_t)t.got[j]->n;
        if (ok && nr > t.capruns) {
            size_t cap = t.capruns ? 2 * t.capruns : 1024;
            while (cap < nr) cap *= 2;
            uint64_t *r = realloc(t.runs, sizeof(uint64_t) * 4 * cap);
            if ((ok = r != NULL)) t.runs = r, t.capruns = cap;
        }
        if (!ok) break;
        /* their union, one set at a time: it stays short (a few ranges where the sets hold tens
         * between them), so this is linear in what the sets hold, where a merge sort of all their
         * ranges took most of a deep model's planning time */
        uint64_t *r = t.runs, *spare = t.runs + 2 * t.capruns;
        size_t nu = 0;
        for (int j = 0; j < t.ngot; j++) {
            nu = union_merge(spare, r, nu, t.got[j]->v, (size_t)t.got[j]->n);
            uint64_t *x = r;
            r = spare, spare = x;
        }
        b->offset = best_fit(r, nu, b->bytes);
        for (int i = order[k]; i >= 0; i = next ? next[i] : -1) p->b[i].offset = b->offset, p->ord[i] = k;
        ok = placer_insert(&t, b->offset, b->offset + b->bytes);
        if (b->offset + b->bytes > p->peak) p->peak = b->offset + b->bytes;
    }
    pool_free(&t.pool);
    free(t.own), free(t.sub), free(t.rd_own), free(t.rd_sub), free(t.path), free(t.got), free(t.runs);
    free(order);
    return ok ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory planning");
}

static long nlike;

long mw_planner_likes(void) { return nlike; }

int mw_planner_place_like(mw_planner *p, const mw_planner *ref) {
    if (!ref->ord || p->n != ref->n || p->nops != ref->nops || p->n == 0) return 0;
    int nx = 0, *xs = NULL, ok = 1;
    for (int i = 0; i < p->n && ok; i++) {
        const mw_pbuf *a = &p->b[i], *r = &ref->b[i];
        if (a->first != r->first || a->last != r->last || a->name != r->name || a->mb != r->mb) ok = 0;
        else if (a->bytes != r->bytes) {
            if (a->first != 0 || a->last != p->nops - 1 || !a->bytes || !r->bytes) ok = 0;
            else if (nx % 16 == 0) {
                int *nb = realloc(xs, sizeof *xs * (size_t)(nx + 16));
                if (nb) xs = nb;
                else ok = 0;
            }
            if (ok) xs[nx++] = i;
        }
    }
    /* the order: no other buffer's size between a changed one's two sizes, both ends included;
     * two changed ones in the same order before and after */
    for (int x = 0; ok && x < nx; x++) {
        const uint64_t o = ref->b[xs[x]].bytes, n = p->b[xs[x]].bytes, lo = o < n ? o : n, hi = o < n ? n : o;
        for (int i = 0; ok && i < p->n; i++)
            if (p->b[i].bytes == ref->b[i].bytes && ref->b[i].bytes >= lo && ref->b[i].bytes <= hi) ok = 0;
        for (int y = 0; ok && y < nx; y++) {
            const uint64_t o2 = ref->b[xs[y]].bytes, n2 = p->b[xs[y]].bytes;
            ok = (o > o2) - (o < o2) == (n > n2) - (n < n2);
        }
    }
    /* each changed one placed on top: whatever lies above it was placed after it */
    for (int x = 0; ok && x < nx; x++) {
        const mw_pbuf *r = &ref->b[xs[x]];
        for (int i = 0; ok && i < p->n; i++)
            if (ref->b[i].offset >= r->offset + r->bytes && i != xs[x] && ref->ord[i] <= ref->ord[xs[x]]) ok = 0;
    }
    int *ord = ok ? malloc(sizeof *ord * ((size_t)p->n + 1)) : NULL;
    if (!ord) {
        free(xs);
        return 0;
    }
    uint64_t peak = 0;
    for (int i = 0; i < p->n; i++) {
        uint64_t off = ref->b[i].offset;
        for (int x = 0; x < nx; x++) {
            const mw_pbuf *r = &ref->b[xs[x]];
            if (i != xs[x] && ref->b[i].offset >= r->offset + r->bytes) off += p->b[xs[x]].bytes - r->bytes;
        }
        p->b[i].offset = off;
        ord[i] = ref->ord[i];
        if (off + p->b[i].bytes > peak) peak = off + p->b[i].bytes;
    }
    free(p->ord);
    p->ord = ord;
    p->peak = peak;
    free(xs);
    nlike++;
    return 1;
}

/* ---- the check: a sweep over ops with the live buffers' address ranges in a counting tree ----- */

typedef struct cover { /* over elementary address segments: add to a range, max of a range */
    int64_t *add, *mx;
} cover;

static void cover_add(cover *c, int v, int lo, int hi, int a, int b, int64_t d) {
    if (a <= lo && hi <= b) {
        c->add[v] += d, c->mx[v] += d;
        return;
    }
    const int mid = (lo + hi) / 2, r = v + 2 * (mid - lo + 1);
    if (a <= mid) cover_add(c, v + 1, lo, mid, a, b, d);
    if (b > mid) cover_add(c, r, mid + 1, hi, a, b, d);
    c->mx[v] = c->add[v] + (c->mx[v + 1] > c->mx[r] ? c->mx[v + 1] : c->mx[r]);
}

static int64_t cover_max(const cover *c, int v, int lo, int hi, int a, int b) {
    if (a <= lo && hi <= b) return c->mx[v];
    const int mid = (lo + hi) / 2;
    int64_t m = INT64_MIN;
    if (a <= mid) m = cover_max(c, v + 1, lo, mid, a, b);
    if (b > mid) {
        int64_t x = cover_max(c, v + 2 * (mid - lo + 1), mid + 1, hi, a, b);
        m = x > m ? x : m;
    }
    return c->add[v] + m;
}

static int cmp_u64(const void *x, const void *y) {
    const uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

static int by_first(const void *x, const void *y, void *ctx) {
    const mw_pbuf *b = ctx;
    return b[*(const int *)x].first - b[*(const int *)y].first;
}

static int by_last(const void *x, const void *y, void *ctx) {
    const mw_pbuf *b = ctx;
    return b[*(const int *)x].last - b[*(const int *)y].last;
}

static int coord(const uint64_t *xs, int n, uint64_t x) { /* index of x in the sorted xs */
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (xs[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int mw_planner_check(const mw_planner *p) {
    const int n = p->n;
    for (int i = 0; i < n; i++) {
        const mw_pbuf *b = &p->b[i];
        if (b->first < 0 || b->first > b->last || b->last >= p->nops || b->offset + b->bytes > p->peak ||
            b->offset + b->bytes < b->offset)
            return 0;
    }
    uint64_t *xs = malloc(sizeof *xs * (2 * (size_t)n + 1));
    int *start = malloc(sizeof *start * ((size_t)n + 1)), *end = malloc(sizeof *end * ((size_t)n + 1));
    cover c = {calloc(4 * (size_t)n + 2, sizeof(int64_t)), calloc(4 * (size_t)n + 2, sizeof(int64_t))};
    int ok = xs && start && end && c.add && c.mx ? 1 : -1, nx = 0;
    for (int i = 0; ok > 0 && i < n; i++) { /* segment boundaries; zero-byte buffers hold none */
        if (p->b[i].bytes == 0) continue;
        xs[nx++] = p->b[i].offset;
        xs[nx++] = p->b[i].offset + p->b[i].bytes;
    }
    if (ok > 0) {
        qsort(xs, (size_t)nx, sizeof *xs, cmp_u64);
        int u = 0;
        for (int i = 0; i < nx; i++)
            if (u == 0 || xs[i] != xs[u - 1]) xs[u++] = xs[i];
        nx = u;
        for (int i = 0; i < n; i++) start[i] = end[i] = i;
        qsort_r(start, (size_t)n, sizeof *start, by_first, p->b);
        qsort_r(end, (size_t)n, sizeof *end, by_last, p->b);
    }
    /* at each op: the buffers that died before it leave, then those born at it enter, each over
     * segments no live buffer covers */
    for (int op = 0, si = 0, ei = 0; ok > 0 && op < p->nops && nx > 1; op++) {
        for (; ei < n && p->b[end[ei]].last < op; ei++) {
            const mw_pbuf *b = &p->b[end[ei]];
            if (b->bytes) cover_add(&c, 0, 0, nx - 2, coord(xs, nx, b->offset), coord(xs, nx, b->offset + b->bytes) - 1, -1);
        }
        for (; si < n && p->b[start[si]].first == op; si++) {
            const mw_pbuf *b = &p->b[start[si]];
            if (!b->bytes) continue;
            const int a = coord(xs, nx, b->offset), z = coord(xs, nx, b->offset + b->bytes) - 1;
            if (cover_max(&c, 0, 0, nx - 2, a, z) > 0) ok = 0;
            else cover_add(&c, 0, 0, nx - 2, a, z, 1);
        }
    }
    free(xs), free(start), free(end), free(c.add), free(c.mx);
    return ok > 0;
}

void mw_planner_live(const mw_planner *p, int op, uint64_t live[MW_CAT_COUNT]) {
    memset(live, 0, sizeof(uint64_t) * MW_CAT_COUNT);
    for (int i = 0; i < p->n; i++)
        if (p->b[i].first <= op && op <= p->b[i].last) live[p->b[i].cat] += p->b[i].bytes;
}

void mw_planner_live_all(const mw_planner *p, uint64_t *live) {
    /* differences at each buffer's first and one past its last op, then running sums */
    memset(live, 0, sizeof(uint64_t) * (size_t)p->nops * MW_CAT_COUNT);
    for (int i = 0; i < p->n; i++) {
        const mw_pbuf *b = &p->b[i];
        live[(size_t)b->first * MW_CAT_COUNT + b->cat] += b->bytes;
        if (b->last + 1 < p->nops) live[(size_t)(b->last + 1) * MW_CAT_COUNT + b->cat] -= b->bytes;
    }
    for (int op = 1; op < p->nops; op++)
        for (int k = 0; k < MW_CAT_COUNT; k++)
            live[(size_t)op * MW_CAT_COUNT + k] += live[(size_t)(op - 1) * MW_CAT_COUNT + k];
}
