#include "chunks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"

static const char *const CATS[3] = {"params", "grads", "optim"};

int mw_chunks_is_form(const char *s) { return strchr(s, '=') != NULL; }

/* A block index: digits only, at most 9 of them. */
static int parse_index(const char *s, size_t n, int *out) {
    if (!n || n > 9) return 0;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

/* A range R of a category: all, none, A-B or A; *lo > *hi for none, *hi = -1 for all (L unknown). */
static mw_status parse_range(const char *cat, const char *s, size_t n, int L, int *lo, int *hi) {
    if (n == 3 && !strncmp(s, "all", 3)) {
        *lo = 0, *hi = L - 1;
        return MW_OK;
    }
    if (n == 4 && !strncmp(s, "none", 4)) {
        *lo = 1, *hi = 0;
        return MW_OK;
    }
    const char *d = memchr(s, '-', n);
    int a, b;
    if (!(d ? parse_index(s, (size_t)(d - s), &a) && parse_index(d + 1, n - (size_t)(d - s) - 1, &b)
            : parse_index(s, n, &a) && (b = a, 1)))
        return mw_fail(MW_ERR_ARG, "--offload %s=%.*s: the blocks must be all, none, A-B or A (block indices from 0)", cat,
                       (int)n, s);
    if (b < a) return mw_fail(MW_ERR_ARG, "--offload %s=%.*s: the range ends before it starts", cat, (int)n, s);
    if (L >= 0 && b >= L)
        return mw_fail(MW_ERR_ARG, "--offload %s=%.*s: block %d is past the model's last (it has %d blocks, 0-%d)", cat, (int)n,
                       s, b, L, L - 1);
    *lo = a, *hi = b;
    return MW_OK;
}

static int widest_of(unsigned any) {
    return any & MW_CHUNK_P ? MW_OFFLOAD_ALL : any & MW_CHUNK_G ? MW_OFFLOAD_OPTIMIZER_GRADS : any & MW_CHUNK_O ? MW_OFFLOAD_OPTIMIZER : MW_OFFLOAD_NONE;
}

mw_status mw_chunks_parse(const char *s, int L, unsigned char *blk, int *widest) {
    if (L > 0) memset(blk, 0, (size_t)L);
    unsigned any = 0;
    const char *colon = strchr(s, ':');
    if (colon) { /* MODE:resident=K */
        static const struct {
            const char *name;
            unsigned cats;
        } MODES[3] = {{"optimizer", MW_CHUNK_O}, {"optimizer+grads", MW_CHUNK_O | MW_CHUNK_G}, {"all", MW_CHUNK_O | MW_CHUNK_G | MW_CHUNK_P}};
        unsigned cats = 0;
        for (int i = 0; i < 3; i++)
            if ((size_t)(colon - s) == strlen(MODES[i].name) && !strncmp(s, MODES[i].name, (size_t)(colon - s))) cats = MODES[i].cats;
        if (!cats)
            return mw_fail(MW_ERR_ARG, "--offload %s: MODE:resident=K takes optimizer, optimizer+grads or all before the colon", s);
        int k;
        if (strncmp(colon + 1, "resident=", 9) || !parse_index(colon + 10, strlen(colon + 10), &k))
            return mw_fail(MW_ERR_ARG, "--offload %s: write MODE:resident=K, K the number of last blocks kept in memory", s);
        if (L >= 0 && k > L)
            return mw_fail(MW_ERR_ARG, "--offload %s: %d resident blocks, but the model has %d", s, k, L);
        for (int l = 0; L >= 0 && l < L - k; l++) blk[l] = (unsigned char)cats, any |= cats;
        if (L < 0) any = cats;
        *widest = widest_of(any);
        return MW_OK;
    }
    unsigned seen = 0;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, ','), *end = e ? e : p + strlen(p), *eq = memchr(p, '=', (size_t)(end - p));
        int c = -1;
        for (int i = 0; i < 3 && eq; i++)
            if ((size_t)(eq - p) == strlen(CATS[i]) && !strncmp(p, CATS[i], (size_t)(eq - p))) c = i;
        if (c < 0)
            return mw_fail(MW_ERR_ARG, "--offload %s: each item is params=R, grads=R or optim=R (R: all, none, A-B or A); '%.*s' is not",
                           s, (int)(end - p), p);
        if (seen & (1u << c)) return mw_fail(MW_ERR_ARG, "--offload %s: %s is given twice", s, CATS[c]);
        seen |= 1u << c;
        int lo = 1, hi = 0;
        MW_TRY(parse_range(CATS[c], eq + 1, (size_t)(end - eq - 1), L, &lo, &hi));
        if (L < 0 ? lo <= hi || hi < 0 : lo <= hi) any |= 1u << c;
        for (int l = lo; L >= 0 && l <= hi; l++) blk[l] |= (unsigned char)(1u << c);
        if (!e) break;
        p = e + 1;
        if (!*p) return mw_fail(MW_ERR_ARG, "--offload %s: a comma ends it", s);
    }
    *widest = widest_of(any);
    return MW_OK;
}

void mw_chunks_text(const unsigned char *blk, int L, char *out, size_t n) {
    size_t u = 0;
    out[0] = 0;
    for (int c = 0; c < 3 && u < n; c++) {
        int lo = -1, hi = -1;
        for (int l = 0; l < L; l++)
            if (blk[l] & (1u << c)) {
                if (lo < 0) lo = l;
                if (hi < 0 || hi == l - 1) hi = l;
            }
        const char *sep = c ? "," : "";
        if (lo < 0)
            u += (size_t)snprintf(out + u, n - u, "%s%s=none", sep, CATS[c]);
        else if (lo == 0 && hi == L - 1)
            u += (size_t)snprintf(out + u, n - u, "%s%s=all", sep, CATS[c]);
        else if (lo == hi)
            u += (size_t)snprintf(out + u, n - u, "%s%s=%d", sep, CATS[c], lo);
        else
            u += (size_t)snprintf(out + u, n - u, "%s%s=%d-%d", sep, CATS[c], lo, hi);
    }
}
