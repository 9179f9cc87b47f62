/* Internal: the tokenizer's representation, shared by tokenizer.c and tokstream.c (cutting a
 * long text where encoding it in parts gives the ids of encoding it whole). */
#ifndef MW_TOKENIZER_IMPL_H
#define MW_TOKENIZER_IMPL_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

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
#endif
