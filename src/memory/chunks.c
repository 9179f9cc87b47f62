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

static int is_word(const char *s, size_t n, const char *w) { return n == strlen(w) && !strncmp(s, w, n); }

/* One part of a category's R: all (every block and both ends), none, embed, head, A-B or A. Sets
 * the blocks' bit c in blk (L >= 0) and the ends' in ends[0] (embed), ends[1] (head), with
 * MW_CHUNK_NAMED << c where an end is named; *any gets the bit when the part puts something on disk
 * (L < 0: when it could). */
static mw_status parse_part(int c, const char *s, size_t n, int L, unsigned char *blk, unsigned char ends[2], unsigned *any) {
    const unsigned bit = 1u << c;
    if (is_word(s, n, "none")) return MW_OK;
    if (is_word(s, n, "all")) {
        for (int l = 0; l < L; l++) blk[l] |= (unsigned char)bit;
        ends[0] |= (unsigned char)bit, ends[1] |= (unsigned char)bit;
        *any |= bit;
        return MW_OK;
    }
    if (is_word(s, n, "embed") || is_word(s, n, "head")) {
        const int e = s[0] == 'h';
        ends[e] |= (unsigned char)(bit | (MW_CHUNK_NAMED << c));
        *any |= bit;
        return MW_OK;
    }
    const char *d = memchr(s, '-', n);
    int a, b;
    if (!(d ? parse_index(s, (size_t)(d - s), &a) && parse_index(d + 1, n - (size_t)(d - s) - 1, &b)
            : parse_index(s, n, &a) && (b = a, 1)))
        return mw_fail(MW_ERR_ARG, "--offload %s=%.*s: the chunks must be all, none, embed, head, A-B or A (block indices from 0), "
                       "joined by +", CATS[c], (int)n, s);
    if (b < a) return mw_fail(MW_ERR_ARG, "--offload %s=%.*s: the range ends before it starts", CATS[c], (int)n, s);
    if (L >= 0 && b >= L)
        return mw_fail(MW_ERR_ARG, "--offload %s=%.*s: block %d is past the model's last (it has %d blocks, 0-%d)", CATS[c],
                       (int)n, s, b, L, L - 1);
    for (int l = a; L >= 0 && l <= b; l++) blk[l] |= (unsigned char)bit;
    *any |= bit;
    return MW_OK;
}

static int widest_of(unsigned any) {
    return any & MW_CHUNK_P ? MW_OFFLOAD_ALL : any & MW_CHUNK_G ? MW_OFFLOAD_OPTIMIZER_GRADS : any & MW_CHUNK_O ? MW_OFFLOAD_OPTIMIZER : MW_OFFLOAD_NONE;
}

mw_status mw_chunks_parse(const char *s, int L, unsigned char *blk, unsigned char ends[2], int *widest) {
    unsigned char nb[1], ne[2] = {0, 0};
    /* a model has 1 to 4096 blocks (config.c): at 0 the forms' meaning (resident=K, the head kept
     * with the last blocks) has no blocks to hang on, and its text would not parse back the same */
    if (L == 0) return mw_fail(MW_ERR_ARG, "--offload %s: a model of 0 blocks has no chunks to place", s);
    if (L < 0) blk = nb;
    if (!ends) ends = ne;
    if (L > 0) memset(blk, 0, (size_t)L);
    ends[0] = ends[1] = 0;
    unsigned any = 0;
    const char *colon = strchr(s, ':');
    if (colon) { /* MODE:resident=K */
        static const struct {
            const char *name;
            unsigned cats;
        } MODES[3] = {{"optimizer", MW_CHUNK_O}, {"optimizer+grads", MW_CHUNK_O | MW_CHUNK_G}, {"all", MW_CHUNK_O | MW_CHUNK_G | MW_CHUNK_P}};
        unsigned cats = 0;
        for (int i = 0; i < 3; i++)
            if (is_word(s, (size_t)(colon - s), MODES[i].name)) cats = MODES[i].cats;
        if (!cats)
            return mw_fail(MW_ERR_ARG, "--offload %s: MODE:resident=K takes optimizer, optimizer+grads or all before the colon", s);
        int k;
        if (strncmp(colon + 1, "resident=", 9) || !parse_index(colon + 10, strlen(colon + 10), &k))
            return mw_fail(MW_ERR_ARG, "--offload %s: write MODE:resident=K, K the number of last blocks kept in memory", s);
        if (L >= 0 && k > L)
            return mw_fail(MW_ERR_ARG, "--offload %s: %d resident blocks, but the model has %d", s, k, L);
        /* MODE for the blocks 0 .. L-K-1 and the embeddings with them (K < L); the last K blocks keep
         * every state in memory, and the head with them (K >= 1) */
        for (int l = 0; L >= 0 && l < L - k; l++) blk[l] = (unsigned char)cats;
        if (L < 0 || k < L) ends[0] = (unsigned char)cats;
        if (k == 0) ends[1] = (unsigned char)cats;
        *widest = widest_of(L < 0 || k < L ? cats : 0);
        return MW_OK;
    }
    unsigned seen = 0;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, ','), *end = e ? e : p + strlen(p), *eq = memchr(p, '=', (size_t)(end - p));
        int c = -1;
        for (int i = 0; i < 3 && eq; i++)
            if (is_word(p, (size_t)(eq - p), CATS[i])) c = i;
        if (c < 0)
            return mw_fail(MW_ERR_ARG, "--offload %s: each item is params=R, grads=R or optim=R (R: all, none, embed, head, A-B or A, "
                           "joined by +); '%.*s' is not", s, (int)(end - p), p);
        if (seen & (1u << c)) return mw_fail(MW_ERR_ARG, "--offload %s: %s is given twice", s, CATS[c]);
        seen |= 1u << c;
        for (const char *q = eq + 1;;) { /* the parts of R, joined by + */
            const char *plus = memchr(q, '+', (size_t)(end - q)), *qe = plus ? plus : end;
            if (qe == q)
                return mw_fail(MW_ERR_ARG, "--offload %s: %s=%.*s has an empty part", s, CATS[c], (int)(end - eq - 1), eq + 1);
            MW_TRY(parse_part(c, q, (size_t)(qe - q), L, blk, ends, &any));
            if (!plus) break;
            q = plus + 1;
        }
        if (!e) break;
        p = e + 1;
        if (!*p) return mw_fail(MW_ERR_ARG, "--offload %s: a comma ends it", s);
    }
    *widest = widest_of(any);
    return MW_OK;
}

void mw_chunks_text(const unsigned char *blk, int L, const unsigned char ends[2], char *out, size_t n) {
    size_t u = 0;
    out[0] = 0;
    for (int c = 0; c < 3 && u < n; c++) {
        const unsigned bit = 1u << c;
        int lo = -1, hi = -1, nb = 0;
        for (int l = 0; l < L; l++)
            if (blk[l] & bit) {
                nb++;
                if (lo < 0) lo = l;
                if (hi < 0 || hi == l - 1) hi = l;
            }
        const int e0 = (ends[0] & bit) != 0, e1 = (ends[1] & bit) != 0;
        u += (size_t)snprintf(out + u, n - u, "%s%s=", c ? "," : "", CATS[c]);
        if (nb == L && e0 && e1) {
            u += (size_t)snprintf(out + u, n - u, "all");
            continue;
        }
        if (!nb && !e0 && !e1) {
            u += (size_t)snprintf(out + u, n - u, "none");
            continue;
        }
        const char *sep = "";
        if (e0) u += (size_t)snprintf(out + u, n - u, "embed"), sep = "+";
        if (lo >= 0 && lo == hi)
            u += (size_t)snprintf(out + u, n - u, "%s%d", sep, lo), sep = "+";
        else if (lo >= 0)
            u += (size_t)snprintf(out + u, n - u, "%s%d-%d", sep, lo, hi), sep = "+";
        if (e1 && u < n) u += (size_t)snprintf(out + u, n - u, "%shead", sep);
    }
}
