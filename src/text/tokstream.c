/* Cutting a long text where the pre-tokenizer cuts anyway (tokstream.h). */
#include "tokstream.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "tokenizer_impl.h"
#include "unicode_tables.h"

/* How much of s[0..n) decided GPT-2's pattern piece [i, e): the pattern reads the characters at
 * i, i+1 and i+2 (contractions, " ?" before a letter), and the one that ends its run, a run of
 * white space to its end even when the piece stops one character short of it. SIZE_MAX when it
 * read to the end of s (more text could change the piece). */
static size_t gpt2_need(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i, size_t e) {
    size_t l, l1, f = e;
    int ws = mw_tok_class(t, s, n, i, &l) == MW_UC_SPACE;
    if (ws && s[i] == ' ' && i + 1 < n && mw_tok_class(t, s, n, i + 1, &l1) != MW_UC_SPACE) ws = 0;
    if (ws)
        while (f < n && mw_tok_class(t, s, n, f, &l) == MW_UC_SPACE) f += l;
    if (f >= n) return SIZE_MAX;
    const size_t need = f + (s[f] < 0x80 ? 1 : 4); /* the character at f, up to 4 bytes */
    return need > i + 5 ? need : i + 5;
}

/* A piece of the pre-tokenizer's first step over the (normalized) text: [start, end), need as
 * gpt2_need's or mw_regex_find_need's, raw: the raw text's position at its end (0: none). */
typedef struct piece {
    size_t start, end, need, raw;
} piece;

typedef struct piece_iter {
    const mw_tokenizer *t;
    const unsigned char *s;
    size_t n, at;
    size_t ms, me, need; /* a regex match found after a gap, given next */
} piece_iter;

/* The next piece: 1, 0 at the end, -1 out of memory. The text between two regex matches is a
 * piece of its own (Split's Isolated), decided when the match after it is. A piece whose need is
 * SIZE_MAX may change with more text. */
static int next_piece(piece_iter *it, piece *p) {
    const mw_tokenizer *t = it->t;
    if (it->at >= it->n) return 0;
    if (t->no_pretok) { /* sp_split: a word starts at each replaced string after another character */
        const size_t rl = t->sp_rlen, i0 = it->at;
        size_t i = i0 + 1;
        while (i + rl <= it->n && !(it->s[i] == (unsigned char)t->sp_r[0] && !memcmp(it->s + i, t->sp_r, rl) &&
                                    (i < rl || memcmp(it->s + i - rl, t->sp_r, rl))))
            i++;
        if (i + rl > it->n) { /* no word starts in what is known: the rest is one word, so far */
            *p = (piece){i0, it->n, SIZE_MAX, 0};
            it->at = it->n;
            return 1;
        }
        *p = (piece){i0, i, i + rl, 0};
        it->at = i;
        return 1;
    }
    if (!t->pre[0].re) {
        const size_t e = mw_tok_pretoken_end(t, it->s, it->n, it->at);
        *p = (piece){it->at, e, gpt2_need(t, it->s, it->n, it->at, e), 0};
        it->at = e;
        return 1;
    }
    if (it->me > it->at) { /* the match after a gap */
        *p = (piece){it->ms, it->me, it->need, 0};
        it->at = it->me;
        return 1;
    }
    size_t ms, me, need;
    int f = mw_regex_find_need(t->pre[0].re, t->bmp_class, it->s, it->n, it->at, &ms, &me, &need);
    if (f < 0) return -1;
    if (f == 0) { /* no match: the rest is a piece, which more text may change */
        *p = (piece){it->at, it->n, SIZE_MAX, 0};
        it->at = it->n;
        return 1;
    }
    if (ms > it->at) {
        *p = (piece){it->at, ms, need, 0};
        it->ms = ms, it->me = me, it->need = need;
        it->at = ms;
        return 1;
    }
    *p = (piece){ms, me, need, 0};
    it->at = me;
    return 1;
}

mw_status mw_tokstream_cut(const mw_tokenizer *t, const char *text, size_t n, size_t max, int first,
                           mw_tokstream_ok ok, void *ctx, size_t *cut) {
    *cut = 0;
    if (max > n) max = n;
    if (t->kind == KIND_BYTES) {
        for (size_t p = max; p > 0; p--)
            if (!ok || ok(ctx, text, n, p)) {
                *cut = p;
                break;
            }
        return MW_OK;
    }
    if (t->no_pretok && !t->sp_split)
        return mw_fail(MW_ERR_FORMAT, "this tokenizer merges a whole document as one word (no pre-tokenizer): it "
                                      "cannot be tokenized in parts");
    const uint32_t *img = t->norm_img; /* the normalized text: the prefix, then each byte's image */
    if (!t->norm_bytewise)
        return mw_fail(MW_ERR_FORMAT, "this tokenizer's normalizer replaces strings of several bytes: a document "
                                      "cannot be tokenized in parts");
    if (max == 0) return MW_OK;
    /* the normalized text a little past max: a piece that ends before max is decided there */
    const size_t m = n - max > (max >> 3) + 4096 ? max + (max >> 3) + 4096 : n;
    const unsigned char *raw = (const unsigned char *)text, *s = raw;
    char *norm = NULL;
    size_t nm = m, pre = 0, best = 0;
    if (t->nnorm) {
        if (!mw_tok_normalize(t, raw, m, first, &norm, &nm)) return mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory");
        s = (const unsigned char *)norm;
        size_t body = 0;
        for (size_t i = 0; i < m; i++) body += img[raw[i]];
        pre = nm - body;
    }
    /* The pieces of the pre-tokenizer's first step, in order, each with the end of the text that
     * decided it (need), while that is known; the last RING of them kept. A boundary q between
     * two pieces is a cut when the text from q gets the pieces the whole text has there (the
     * pre-tokenizer starts afresh at each piece: no lookbehind), and s[0..q) alone gets the
     * pieces before q: the pieces decided by s[0..q) are the same, and from the first piece that
     * read past q they are checked by tokenizing s[..q) again. */
    enum { RING = 64 };
    piece ring[RING];
    size_t np = 0, r = 0, at = pre;
    mw_status st = MW_OK;
    size_t qmax = pre; /* the normalized offset of max */
    for (size_t i = 0; i < max; i++) qmax += img[raw[i]];
    piece_iter it = {t, s, nm, 0, 0, 0, 0};
    piece pc;
    int got;
    while ((got = next_piece(&it, &pc)) > 0 && pc.need <= nm && pc.end <= qmax) {
        while (r < max && at < pc.end) at += img[raw[r++]]; /* the raw position of the piece's end */
        pc.raw = at == pc.end && r > 0 ? r : 0;
        ring[np++ % RING] = pc;
    }
    if (got < 0) st = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory matching the pre-tokenizer regex");
    for (size_t k = np; st == MW_OK && k-- > 0 && k + RING >= np;) { /* the latest cut first */
        const piece *c = &ring[k % RING];
        if (!c->raw || (ok && !ok(ctx, text, n, c->raw))) continue;
        size_t j = k; /* the first piece that read past c->end */
        for (size_t q = k + 1; q-- > 0 && q + RING >= np;) /* the ring: [np - RING, np) */
            if (ring[q % RING].need > c->end) j = q;
        if (np > RING && j + RING == np) continue; /* an older piece may have read past it too */
        int same = 1;
        piece_iter again = {t, s + ring[j % RING].start, c->end - ring[j % RING].start, 0, 0, 0, 0};
        size_t q = j;
        const size_t base = ring[j % RING].start;
        while (same && (got = next_piece(&again, &pc)) > 0) {
            same = q <= k && base + pc.start == ring[q % RING].start && base + pc.end == ring[q % RING].end;
            q++;
        }
        if (got < 0) st = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory matching the pre-tokenizer regex");
        if (same && q == k + 1) {
            best = c->raw;
            break;
        }
    }
    free(norm);
    if (st == MW_OK) *cut = best;
    return st;
}
