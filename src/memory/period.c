/* A pipeline stage's placement, periodic by construction (period.h). */
#include "period.h"

#include <stdlib.h>
#include <string.h>

#include "../core/status.h"

static int fold_on = 1;
static long nfolds;

long mw_period_folds(void) { return nfolds; }

int mw_period_set_fold(int on) {
    const int was = fold_on;
    fold_on = on;
    return was;
}

/* The micro-batches' buffers, in the walk's order: those of micro-batch j are idx[at[j] ..
 * at[j + 1]), buffer k of it idx[at[j] + k]; each one's first op (base), earliest first and
 * latest last. */
typedef struct mbs {
    int n, *at, *idx;
    int64_t *minf, *maxl;
} mbs;

static void mbs_free(mbs *s) { free(s->at), free(s->idx), free(s->minf), free(s->maxl); }

static int mbs_build(const mw_planner *p, mbs *s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < p->n; i++)
        if (p->b[i].mb >= s->n) s->n = p->b[i].mb + 1;
    s->at = calloc((size_t)s->n + 2, sizeof *s->at);
    s->idx = malloc(sizeof *s->idx * ((size_t)p->n + 1));
    s->minf = malloc(sizeof *s->minf * ((size_t)s->n + 1));
    s->maxl = malloc(sizeof *s->maxl * ((size_t)s->n + 1));
    if (!s->at || !s->idx || !s->minf || !s->maxl) return 0;
    for (int i = 0; i < p->n; i++)
        if (p->b[i].mb >= 0) s->at[p->b[i].mb + 1]++;
    for (int j = 0; j < s->n; j++) s->at[j + 1] += s->at[j];
    int *fill = malloc(sizeof *fill * ((size_t)s->n + 1));
    if (!fill) return 0;
    memcpy(fill, s->at, sizeof *fill * (size_t)s->n);
    for (int i = 0; i < p->n; i++)
        if (p->b[i].mb >= 0) s->idx[fill[p->b[i].mb]++] = i;
    free(fill);
    for (int j = 0; j < s->n; j++) {
        s->minf[j] = INT64_MAX, s->maxl[j] = -1;
        for (int k = s->at[j]; k < s->at[j + 1]; k++) {
            const mw_pbuf *b = &p->b[s->idx[k]];
            if (b->first < s->minf[j]) s->minf[j] = b->first;
            if (b->last > s->maxl[j]) s->maxl[j] = b->last;
        }
    }
    return 1;
}

/* Whether micro-batch j + u is micro-batch j's buffers, each alive d ops later (d > 0 the same for
 * all). */
static int shifted(const mw_planner *p, const mbs *s, int j, int u, int64_t *d) {
    const int n = s->at[j + 1] - s->at[j];
    if (n == 0 || s->at[j + u + 1] - s->at[j + u] != n) return 0;
    const mw_pbuf *x0 = &p->b[s->idx[s->at[j]]], *y0 = &p->b[s->idx[s->at[j + u]]];
    *d = (int64_t)y0->first - x0->first;
    if (*d <= 0) return 0;
    for (int k = 0; k < n; k++) {
        const mw_pbuf *x = &p->b[s->idx[s->at[j] + k]], *y = &p->b[s->idx[s->at[j + u] + k]];
        if (x->bytes != y->bytes || x->cat != y->cat || x->name != y->name || x->layer != y->layer ||
            x->tag != y->tag || (int64_t)y->first - x->first != *d || (int64_t)y->last - x->last != *d)
            return 0;
    }
    return 1;
}

/* The fold's bounds, from the run's micro-batches only (whole problem; the smaller one, where
 * micro-batches from c + K sit T ops earlier): the earliest first op of those from c (fa, fa2),
 * the latest last op of those before c + K (la, la2), and the span of those from c - R to c + K + R
 * (zlo, zhi; zlo2, zhi2). */
typedef struct fold {
    int64_t T, fa, fa2, la, la2, zlo, zhi, zlo2, zhi2;
} fold;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void fold_bounds(const mbs *s, int S0, int S1, int c, int K, int R, int64_t T, fold *z) {
    z->T = T;
    z->fa = z->fa2 = z->zlo = z->zlo2 = INT64_MAX, z->la = z->la2 = z->zhi = z->zhi2 = -1;
    for (int j = S0; j <= S1; j++) {
        const int64_t f = s->minf[j], l = s->maxl[j];
        if (j >= c) z->fa = min64(z->fa, f);
        if (j >= c + K) z->fa2 = min64(z->fa2, f - T);
        if (j < c + K) z->la = max64(z->la, l);
        if (j < c) z->la2 = max64(z->la2, l);
        if (j >= c - R && j < c + K + R) z->zlo = min64(z->zlo, f), z->zhi = max64(z->zhi, l);
        if (j >= c - R && j < c) z->zlo2 = min64(z->zlo2, f), z->zhi2 = max64(z->zhi2, l);
        if (j >= c + K && j < c + K + R) z->zlo2 = min64(z->zlo2, f - T), z->zhi2 = max64(z->zhi2, l - T);
    }
}

/* Where a buffer outside the run lies against the fold, in both problems: 0 ending before every
 * run micro-batch from c begins, 1 beginning after every one before c + K ends, 2 alive across all
 * of those from c - R to c + K + R; -1 none of these. */
static int side(const mw_pbuf *b, const fold *z) {
    const int64_t f = b->first, l = b->last;
    if (l < z->fa && l < z->fa2) return 0;
    if (f > z->la && f - z->T > z->la2) return 1;
    if (f <= z->zlo && f <= z->zlo2 && l >= z->zhi && l - z->T >= z->zhi2) return 2;
    return -1;
}

/* A stage's steady run and its fold (mw_period_place's comment): the run's micro-batches S0..S1
 * (none: S0 < 0), their shift D, the period R, the farthest apart two alive together (Dm), the
 * margin g kept on each side, the fold's start c and length K (a multiple of R; 0: nothing to
 * take out), T the ops taken out. */
typedef struct shape {
    int S0, S1, R, Dm, g, c, K;
    int64_t D, T;
} shape;

static void find_shape(const mw_planner *p, const mbs *s, int u, shape *h) {
    memset(h, 0, sizeof *h);
    h->S0 = -1;
    /* the steady run: the longest run of j with micro-batch j + u micro-batch j shifted by one d */
    int r0 = -1, r1 = -2; /* the run's first and last j */
    int64_t D = 0, da = 0;
    for (int j = 0, a = -1; j + u < s->n; j++) {
        int64_t d;
        if (!shifted(p, s, j, u, &d)) {
            a = -1;
            continue;
        }
        if (a < 0 || d != da) a = j, da = d; /* a different shift: a new run */
        if (j - a > r1 - r0) r0 = a, r1 = j, D = d;
    }
    if (r0 < 0) return;
    const int S0 = r0, S1 = r1 + u; /* the steady micro-batches, inclusive */
    int64_t maxlen = 0;
    for (int j = S0; j < S0 + u; j++)
        for (int k = s->at[j]; k < s->at[j + 1]; k++) {
            const mw_pbuf *b = &p->b[s->idx[k]];
            if (b->last - b->first > maxlen) maxlen = b->last - b->first;
        }
    int Dm = 0;
    for (int j0 = S0; j0 < S0 + u; j0++)
        for (int i = j0 + 1; i <= S1; i++)
            if (s->minf[i] <= s->maxl[j0] && i - j0 > Dm) Dm = i - j0;
    h->S0 = S0, h->S1 = S1, h->D = D, h->Dm = Dm;
    h->R = u * (int)(maxlen / D + 1);
    /* the fold: micro-batches [c, c + K) out, K a multiple of R, with g micro-batches of the run
     * kept on each side: g covers the distance between two micro-batches whose buffers can be alive
     * together (Dm) and a period R, so that every pair of entities alive together in the whole
     * problem is so in the smaller one (and no other pair) */
    h->g = (h->R > Dm ? h->R : Dm) + u;
    h->c = S0 + h->g;
    h->K = (S1 + 1 - h->g - h->c) / h->R * h->R;
    if (h->K < 0) h->K = 0;
    h->T = (int64_t)(h->K / u) * D;
}

/* Whether the fold (c, K) of h keeps every pair of entities alive together, and their order: every
 * buffer outside the run on one side (its pairs with the entities then the same in both problems),
 * and its pairs with the other such buffers the same in both: those ending before start before
 * every one across shortened, those beginning after begin (moved) after every one that ends before
 * and end (moved) after every one across begins; the sort's keys (size, first op) in the same
 * order: every entity's lead not moved starts before every moved one. With K = 0 these are the
 * conditions for the problem with any number of periods put in at c (mw_period_cut). */
static int fold_ok(const mw_planner *p, const mbs *s, int u, const shape *h, int K, fold *z) {
    (void)u;
    const int64_t T = (int64_t)(K / u) * h->D;
    fold_bounds(s, h->S0, h->S1, h->c, K, h->R, T, z);
    int ok = 1;
    int64_t early_f = -1, early_l = -1, late_f = INT64_MAX, late_l = INT64_MAX, span_f = -1, span_l = INT64_MAX, lead_f = -1;
    for (int i = 0; i < p->n && ok; i++) {
        const mw_pbuf *b = &p->b[i];
        if (b->mb >= h->S0 && b->mb <= h->S1) {
            if (b->mb < h->S0 + h->R) lead_f = max64(lead_f, b->first);
            continue;
        }
        const int k = side(b, z);
        if (k == 0) early_f = max64(early_f, b->first), early_l = max64(early_l, b->last);
        if (k == 1) late_f = min64(late_f, b->first - T), late_l = min64(late_l, b->last - T);
        if (k == 2) span_f = max64(span_f, b->first), span_l = min64(span_l, b->last - T);
        ok = k >= 0;
    }
    if (early_l >= late_f || early_f > span_l || span_f > late_l || max64(max64(lead_f, early_f), span_f) >= late_f) ok = 0;
    return ok;
}

/* Each buffer's entity (lead, next) over the run's periods of h. */
static void group(const mw_planner *p, const mbs *s, const shape *h, int *lead, int *next) {
    const int S0 = h->S0, S1 = h->S1, R = h->R;
    for (int i = 0; i < p->n; i++) lead[i] = i, next[i] = -1;
    for (int j = S0; j <= S1; j++)
        for (int k = 0; k < s->at[j + 1] - s->at[j]; k++) {
            const int i = s->idx[s->at[j] + k];
            lead[i] = s->idx[s->at[S0 + (j - S0) % R] + k];
            if (j + R <= S1) next[i] = s->idx[s->at[j + R] + k];
        }
}

mw_status mw_period_place(mw_planner *p, int u) {
    mbs s;
    int *lead = NULL, *next = NULL, *map = NULL, *qlead = NULL, *qnext = NULL;
    mw_planner q;
    mw_planner_init(&q, 1);
    mw_status st = MW_OK;
    if (!mbs_build(p, &s)) {
        st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        goto out;
    }
    shape h;
    find_shape(p, &s, u, &h);
    if (h.S0 < 0 || h.S1 - h.S0 + 1 <= h.R) { /* no copies to share an offset: every buffer its own */
        st = mw_planner_place_groups(p, NULL, NULL);
        goto out;
    }
    lead = malloc(sizeof *lead * ((size_t)p->n + 1));
    next = malloc(sizeof *next * ((size_t)p->n + 1));
    if (!lead || !next) {
        st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        goto out;
    }
    group(p, &s, &h, lead, next);
    const int c = h.c, K = h.K, S0 = h.S0, S1 = h.S1;
    if (!fold_on || K <= 0) {
        st = mw_planner_place_groups(p, lead, next);
        goto out;
    }
    const int64_t T = h.T; /* ops taken out */
    fold z;
    map = malloc(sizeof *map * ((size_t)p->n + 1));
    if (!map) {
        st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        goto out;
    }
    if (!fold_ok(p, &s, u, &h, K, &z)) { /* not the shape this fold needs: the whole problem */
        st = mw_planner_place_groups(p, lead, next);
        goto out;
    }
    mw_planner_init(&q, p->nops - (int)T);
    for (int i = 0; i < p->n && st == MW_OK; i++) {
        const mw_pbuf *b = &p->b[i];
        map[i] = -1;
        if (b->mb >= c && b->mb < c + K) continue;
        int64_t f = b->first, l = b->last;
        const int k = b->mb >= S0 && b->mb <= S1 ? (b->mb < c ? 0 : 1) : side(b, &z);
        if (k == 1) f -= T; /* after the fold: moved */
        if (k >= 1) l -= T; /* or across it: shortened */
        if (f < 0 || l >= (int64_t)q.nops || f > l) {
            st = MW_ERR_ARG; /* not the shape this fold needs (not met by any layout tried) */
            break;
        }
        st = mw_planner_add(&q, b->name, b->layer, b->bytes, (mw_category)b->cat, (int)f, (int)l);
        if (st == MW_OK) {
            q.b[q.n - 1].tag = b->tag, q.b[q.n - 1].mb = b->mb;
            map[i] = q.n - 1;
        }
    }
    if (st == MW_ERR_ARG) {
        mw_planner_free(&q);
        mw_planner_init(&q, 1);
        st = mw_planner_place_groups(p, lead, next);
        goto out;
    }
    if (st != MW_OK) goto out;
    qlead = malloc(sizeof *qlead * ((size_t)q.n + 1));
    qnext = malloc(sizeof *qnext * ((size_t)q.n + 1));
    if (!qlead || !qnext) {
        st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        goto out;
    }
    for (int i = 0; i < p->n; i++) {
        if (map[i] < 0) continue;
        qlead[map[i]] = map[lead[i]];
        int x = next[i];
        while (x >= 0 && map[x] < 0) x = next[x];
        qnext[map[i]] = x >= 0 ? map[x] : -1;
    }
    st = mw_planner_place_groups(&q, qlead, qnext);
    if (st != MW_OK) goto out;
    free(p->ord);
    p->ord = malloc(sizeof *p->ord * ((size_t)p->n + 1));
    if (!p->ord) {
        st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        goto out;
    }
    for (int i = 0; i < p->n; i++) p->b[i].offset = q.b[map[lead[i]]].offset, p->ord[i] = q.ord[map[lead[i]]];
    p->peak = q.peak;
    nfolds++;
out:
    mw_planner_free(&q);
    mbs_free(&s);
    free(lead), free(next), free(map), free(qlead), free(qnext);
    return st;
}

static long ncuts;
long mw_period_cuts(void) { return ncuts; }

int mw_period_cut(const mw_planner *p, int u, int nmb, int M, int *want) {
    *want = 0;
    mbs s;
    if (!mbs_build(p, &s)) {
        mbs_free(&s);
        return 0;
    }
    shape h;
    find_shape(p, &s, u, &h);
    int ok = 0;
    /* R is read off the run's first period; Dm is the true distance when the run reaches past it
     * (the run's last micro-batch is then alive with none of the first period's, nor any later one) */
    if (h.S0 < 0 || h.S1 - h.S0 + 1 <= (h.R > h.Dm + u ? h.R : h.Dm + u)) { /* too few to see them: twice as many */
        *want = 2 * nmb < M ? 2 * nmb : 0;
    } else {
        /* the whole problem's run ends as far before its last micro-batch as this one's (tail), and
         * its fold takes out K (a multiple of R) of its middle: this walk is that fold when it has
         * M - K micro-batches, and then its own run keeps fewer than R past the two margins */
        const int tail = nmb - 1 - h.S1;
        const int64_t S1F = (int64_t)M - 1 - tail, left = S1F + 1 - h.g - h.c;
        const int64_t K = left > 0 ? left / h.R * h.R : 0;
        if (K <= 0 || (int64_t)M - K >= M) {
            *want = 0; /* nothing to take out: walk all M */
        } else if ((int64_t)M - K != nmb) {
            *want = (int)(M - K);
        } else {
            fold z;
            ok = h.S1 + 1 - h.g - h.c >= 0 && h.S1 + 1 - h.g - h.c < h.R && fold_ok(p, &s, u, &h, 0, &z);
            if (!ok) *want = -1; /* the fold's conditions fail: walk all M */
        }
    }
    mbs_free(&s);
    if (ok) ncuts++;
    return ok;
}

/* Whether full's buffer x is cut's buffer y, d ops later (first and last; dl for the last). */
static int same_buf(const mw_pbuf *x, const mw_pbuf *y, int64_t df, int64_t dl) {
    return x->bytes == y->bytes && x->cat == y->cat && x->name == y->name && x->layer == y->layer && x->tag == y->tag &&
           (int64_t)x->first == y->first + df && (int64_t)x->last == y->last + dl;
}

int mw_period_expand(const mw_planner *cut, int u, int nmb, mw_planner *full, int M) {
    mbs s, t;
    int ok = mbs_build(cut, &s) & mbs_build(full, &t);
    shape h;
    memset(&h, 0, sizeof h);
    int *pos = ok ? malloc(sizeof *pos * ((size_t)full->n + 1)) : NULL;
    if (ok) find_shape(cut, &s, u, &h);
    ok = pos && h.S0 >= 0 && M > nmb && cut->ord;
    const int K = M - nmb;
    ok = ok && K % h.R == 0;
    const int64_t T = (int64_t)(K / u) * h.D;
    const int S0 = h.S0, S1F = h.S1 + K, c = h.c;
    /* the run's micro-batches: full's j is cut's j (before c), j - K (after c + K), or a member of
     * the same entity (j' = j mod R from S0), periods earlier */
    for (int j = S0; ok && j <= S1F; j++) {
        const int j1 = j < c ? j : j >= c + K ? j - K : S0 + (j - S0) % h.R;
        const int n = t.at[j + 1] - t.at[j];
        const int64_t d = j < c ? 0 : j >= c + K ? T : (int64_t)((j - j1) / u) * h.D;
        ok = j < t.n && j1 < s.n && n == s.at[j1 + 1] - s.at[j1];
        for (int k = 0; ok && k < n; k++) {
            const int x = t.idx[t.at[j] + k], y = s.idx[s.at[j1] + k];
            ok = same_buf(&full->b[x], &cut->b[y], d, d);
            pos[x] = y;
        }
    }
    /* the others, in order: each the same, moved T later, or alive T ops longer */
    for (int i = 0, y = 0; ok && i < full->n; i++) {
        const mw_pbuf *x = &full->b[i];
        if (x->mb >= S0 && x->mb <= S1F) continue;
        while (y < cut->n && cut->b[y].mb >= S0 && cut->b[y].mb <= h.S1) y++;
        ok = y < cut->n && (x->mb < 0 ? cut->b[y].mb < 0 : x->mb < S0 ? cut->b[y].mb == x->mb : cut->b[y].mb == x->mb - K) &&
             (same_buf(x, &cut->b[y], 0, 0) || same_buf(x, &cut->b[y], T, T) || same_buf(x, &cut->b[y], 0, T));
        pos[i] = y++;
    }
    if (ok) {
        free(full->ord);
        full->ord = malloc(sizeof *full->ord * ((size_t)full->n + 1));
        ok = full->ord != NULL;
    }
    for (int i = 0; ok && i < full->n; i++) full->b[i].offset = cut->b[pos[i]].offset, full->ord[i] = cut->ord[pos[i]];
    if (ok) full->peak = cut->peak;
    free(pos);
    mbs_free(&s), mbs_free(&t);
    return ok;
}
