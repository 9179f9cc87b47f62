/* Internal: the tokenizer's representation, shared by tokenizer.c (encoding, decoding),
 * tokenizer_load.c and tokenizer_json.c (loading) and tokstream.c (cutting a long text where
 * encoding it in parts gives the ids of encoding it whole). */
#ifndef MW_TOKENIZER_IMPL_H
#define MW_TOKENIZER_IMPL_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "regex.h"
#include "tokenizer.h"

enum { KIND_BYTES, KIND_BPE, KIND_SPBPE };

#define CACHE_SLOTS (1u << 18) /* words cached at most; full slots are never evicted */
#define CACHE_PROBES 8
#define CACHE_MAX_WORD 128 /* longer words are merged every time */

/* A cached word: its bytes and their ids. Immutable once published in a slot. */
typedef struct cache_entry {
    uint64_t hash;
    uint32_t len, nids;
    int32_t ids[]; /* nids ids, then len bytes */
} cache_entry;

/* A normalizer step: prepend a (always, or only when the text does not start with a), or
 * replace every a with b. */
enum { NORM_PREPEND, NORM_PREPEND_IF_NOT, NORM_REPLACE };
typedef struct norm_op {
    int kind;
    char a[32], b[32];
    size_t alen, blen;
} norm_op;
#define MAX_NORM 8

/* A pre-tokenizer step: a Split regex (Isolated), or GPT-2's pattern (ByteLevel's use_regex). */
typedef struct pretok_step {
    mw_regex *re; /* NULL: GPT-2's pattern */
} pretok_step;
#define MAX_PRETOK 8
#define MAX_AFFIX 8

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
    /* tokenizer.json pipelines (all zero for GPT-2's files): see tokjson below */
    int hf;                         /* merges in Hugging Face's order (least rank, leftmost first) */
    int ignore_merges;              /* a pre-token that is a token is that token */
    norm_op norm[MAX_NORM];         /* the normalizer, step by step */
    int nnorm;
    pretok_step pre[MAX_PRETOK];    /* the pre-tokenizer, step by step; none: GPT-2's pattern */
    int npre, no_pretok;            /* no_pretok: the whole (normalized) text is one word */
    int strip_lead;                 /* decode drops up to this many leading spaces (a Strip decoder) */
    char *key;                      /* spbpe: the vocabulary's own spellings (lookups, merges); */
    uint32_t *koff;                 /*   NULL: the pieces themselves */
    int32_t *imap;                  /* spelling -> id of the model's vocabulary, imask + 1 slots */
    uint64_t imask;
    int32_t *bmp_id;                /* spbpe: the token of each character below 0x10000, or -1 */
    int sp_split;                   /* spbpe without a pre-tokenizer whose tokens never hold the
                                       decoder's replaced string (▁) after another character: the
                                       text is merged word by word (before each such ▁), which
                                       gives the ids of merging it whole, faster */
    char sp_r[32];
    size_t sp_rlen;
    int32_t doc_pre[MAX_AFFIX], doc_post[MAX_AFFIX]; /* ids around each document */
    int ndoc_pre, ndoc_post, doc_own;
    /* limits (mw_tokenizer_set_limits): the word cache's bytes, counted in cache_used; the
     * longest word merged */
    size_t cache_limit, word_max;
    int norm_bytewise;       /* the normalizer's Replace steps each replace one byte: then */
    uint32_t norm_img[256];  /*   byte c normalizes to norm_img[c] bytes wherever it is */
    _Atomic(size_t) *cache_used;
};

/* The end of the pre-token of GPT-2's pattern that starts at s[i] (i < n). */
size_t mw_tok_pretoken_end(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i);
/* The MW_UC_* class of the character at s[i] (i < n) as the tokenizer sees it, its length in *len. */
int mw_tok_class(const mw_tokenizer *t, const unsigned char *s, size_t n, size_t i, size_t *len);
/* Applies the normalizer to s[0..n) (n >= 1; its Prepend steps only when first) into a malloc'd
 * *out of *on bytes; 0: no memory. */
int mw_tok_normalize(const mw_tokenizer *t, const unsigned char *s, size_t n, int first, char **out, size_t *on);

/* ---- shared by tokenizer.c (encoding) and tokenizer_load.c (building the tables) ------------
 * static inline: they run on the encoder's hot path, per word and per character. */

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

/* The id of spelling s[0..n) in t's model vocabulary, or -1. */
static inline int32_t spelling_id(const mw_tokenizer *t, const char *s, size_t n) {
    const char *kb = t->key ? t->key : t->bytes;
    const uint32_t *ko = t->key ? t->koff : t->off;
    for (uint64_t i = hash_bytes((const unsigned char *)s, n) & t->imask;; i = (i + 1) & t->imask) {
        int32_t id = t->imap[i];
        if (id < 0) return -1;
        if (ko[id + 1] - ko[id] == n && memcmp(kb + ko[id], s, n) == 0) return id;
    }
}

/* ---- loading: tokenizer_load.c (GPT-2's files, build) and tokenizer_json.c (tokenizer.json) -- */

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
/* Adds token (s[0..n), id); byte_level as tokenizer_load.c says; what names the file. */
mw_status mw_tok_spec_token(spec *sp, const char *s, size_t n, int64_t id, int byte_level,
                            const char *what);
/* Adds merge (a, b) of rank; where names the line or entry for messages. */
mw_status mw_tok_spec_merge(spec *sp, const char *a, size_t alen, const char *b, size_t blen,
                            int32_t rank, const char *what, size_t where);
/* Adds a Split regex pat to the pre-tokenizer (NULL: GPT-2's pattern); path names the file. */
mw_status mw_tok_spec_pattern(spec *sp, const char *pat, const char *path);
/* Reads the whole file path into a malloc'd *buf of *n bytes. */
mw_status mw_tok_read_file(const char *path, char **buf, size_t *n);
/* Reads the tokenizer.json at path, and config (tokenizer_config.json beside it; may be NULL),
 * into sp (tokenizer_json.c). */
mw_status mw_tok_read_json(spec *sp, const char *path, const char *config);
#endif
