#include "planner.h"

#include <stdlib.h>
#include <string.h>

#include "../core/status.h"

#define ALIGN 64

void mw_planner_init(mw_planner *p, int nops) {
    memset(p, 0, sizeof *p);
    p->nops = nops;
}

void mw_planner_free(mw_planner *p) {
    free(p->b);
    memset(p, 0, sizeof *p);
}

mw_status mw_planner_add(mw_planner *p, const char *name, int layer, uint64_t bytes, mw_category cat,
                         int first, int last) {
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
    return MW_OK;
}

static int by_size_desc(const void *x, const void *y, void *ctx) {
    const mw_pbuf *b = ctx;
    const mw_pbuf *a1 = &b[*(const int *)x], *a2 = &b[*(const int *)y];
    if (a1->bytes != a2->bytes) return a1->bytes < a2->bytes ? 1 : -1;
    if (a1->first != a2->first) return a1->first - a2->first; /* ties: a fixed order */
    return *(const int *)x - *(const int *)y;
}

static int by_offset(const void *x, const void *y) {
    const mw_pbuf *a = *(mw_pbuf *const *)x, *b = *(mw_pbuf *const *)y;
    return (a->offset > b->offset) - (a->offset < b->offset);
}

mw_status mw_planner_place(mw_planner *p) {
    int *order = malloc(sizeof *order * (size_t)(p->n + 1));
    mw_pbuf **placed = malloc(sizeof *placed * (size_t)(p->n + 1)), **near = malloc(sizeof *near * (size_t)(p->n + 1));
    if (!order || !placed || !near) {
        free(order), free(placed), free(near);
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    }
    for (int i = 0; i < p->n; i++) order[i] = i;
    qsort_r(order, (size_t)p->n, sizeof *order, by_size_desc, p->b);
    int np = 0;
    p->peak = 0;
    for (int k = 0; k < p->n; k++) {
        mw_pbuf *b = &p->b[order[k]];
        int nn = 0;
        for (int j = 0; j < np; j++) /* placed buffers alive at the same time as b */
            if (placed[j]->first <= b->last && b->first <= placed[j]->last) near[nn++] = placed[j];
        qsort(near, (size_t)nn, sizeof *near, by_offset);
        uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, at = 0;
        for (int j = 0; j < nn; j++) { /* the smallest gap between them that fits */
            uint64_t end = near[j]->offset;
            if (end > at && end - at >= b->bytes && end - at < best_gap) {
                best = at;
                best_gap = end - at;
            }
            if (near[j]->offset + near[j]->bytes > at) at = near[j]->offset + near[j]->bytes;
        }
        b->offset = best != UINT64_MAX ? best : at; /* or above them all */
        if (b->offset + b->bytes > p->peak) p->peak = b->offset + b->bytes;
        placed[np++] = b;
    }
    free(order), free(placed), free(near);
    return MW_OK;
}

int mw_planner_check(const mw_planner *p) {
    for (int i = 0; i < p->n; i++)
        for (int j = i + 1; j < p->n; j++) {
            const mw_pbuf *a = &p->b[i], *b = &p->b[j];
            if (a->first <= b->last && b->first <= a->last && a->offset < b->offset + b->bytes &&
                b->offset < a->offset + a->bytes)
                return 0;
        }
    for (int i = 0; i < p->n; i++)
        if (p->b[i].offset + p->b[i].bytes > p->peak) return 0;
    return 1;
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
