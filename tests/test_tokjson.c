/* Tokenizers from Hugging Face tokenizer.json files (issue 13, item 4): the pre-tokenizer regex
 * engine against GPT-2's hand-written matcher and by hand; tiny SentencePiece and byte-level
 * tokenizer.json files (byte fallback, Strip decoder, ignore_merges, merge order, templates,
 * refusals); and Llama 2's and Llama 3's real files against the ids of transformers.js
 * (tests/ref/llama{2,3}_tokens.json, written by tests/ref/llama_tokens_ref.js), with
 * decode(encode(x)) == x. The real files come from scripts/fetch-llama-tokenizers.sh (data/llama2,
 * data/llama3; MW_LLAMA_DIR overrides data/): without them those checks are skipped, saying so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/json.h"
#include "../src/text/regex.h"
#include "../src/text/tokenizer.h"
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

static void write_all(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s, 1, strlen(s), f) != strlen(s) || fclose(f) != 0) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
}

static int32_t *enc(const mw_tokenizer *t, const char *s, size_t n, size_t *len) {
    int32_t *ids = NULL;
    size_t cap = 0;
    *len = 0;
    CHECK_OK(mw_tokenizer_encode(t, s, n, &ids, len, &cap));
    return ids;
}

static char *dec(const mw_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    char *s = NULL;
    size_t cap = 0;
    *len = 0;
    CHECK_OK(mw_tokenizer_decode(t, ids, n, &s, len, &cap));
    return s;
}

static void expect_ids(const mw_tokenizer *t, const char *what, const char *s, const int32_t *want, size_t nw) {
    size_t n;
    int32_t *got = enc(t, s, strlen(s), &n);
    int ok = n == nw && (n == 0 || memcmp(got, want, n * sizeof *got) == 0);
    if (!ok) {
        fprintf(stderr, "  %s: got", what);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)got[i]);
        fprintf(stderr, "; want");
        for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", (int)want[i]);
        fprintf(stderr, "\n");
    }
    CHECK(ok, "%s: ids differ", what);
    free(got);
}

static void round_trip(const mw_tokenizer *t, const char *what, const char *s, size_t n) {
    size_t ni, bn;
    int32_t *ids = enc(t, s, n, &ni);
    char *back = dec(t, ids, ni, &bn);
    CHECK(bn == n && (n == 0 || memcmp(back, s, n) == 0), "%s: decode(encode(x)) != x (%zu bytes, %zu back)",
          what, n, bn);
    free(back);
    free(ids);
}

/* ---- the regex engine ---------------------------------------------------------------------- */

/* The pieces of s under re, as "|"-joined text (matches and the text between them). */
static char *pieces(const mw_regex *re, const char *s) {
    size_t n = strlen(s), at = 0, ms, me, k = 0;
    char *o = malloc(4 * n + 8);
    for (;;) {
        int r = mw_regex_find(re, NULL, (const unsigned char *)s, n, at, &ms, &me);
        CHECK(r >= 0, "regex: out of memory");
        if (r <= 0) break;
        if (ms > at) memcpy(o + k, s + at, ms - at), k += ms - at, o[k++] = '|';
        memcpy(o + k, s + ms, me - ms), k += me - ms, o[k++] = '|';
        at = me;
    }
    if (at < n) memcpy(o + k, s + at, n - at), k += n - at, o[k++] = '|';
    o[k] = 0;
    return o;
}

static const char LLAMA3_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static void expect_pieces(const char *pat, const char *s, const char *want) {
    mw_regex *re;
    CHECK_OK(mw_regex_compile(&re, pat, strlen(pat), "test"));
    char *got = pieces(re, s);
    CHECK(strcmp(got, want) == 0, "/%s/ on \"%s\": got \"%s\", want \"%s\"", pat, s, got, want);
    free(got);
    mw_regex_free(re);
}

/* Long runs (4 MiB) in linear time and a few KiB: letters, spaces before a letter (Llama 3's
 * \s*[\r\n]+ backtracks over the whole run before \s+(?!\S) matches), newlines, digits; and the
 * need each match reports: the match is final once the text is known that far. */
static void test_regex_long(void) {
    const size_t N = 4u << 20;
    unsigned char *s = malloc(N + 1);
    mw_regex *re;
    CHECK_OK(mw_regex_compile(&re, LLAMA3_RE, strlen(LLAMA3_RE), "test"));
    const struct { char c, last; size_t ms, me; } runs[] = {
        {'a', 'a', 0, N}, {' ', 'x', 0, N - 2}, {'\n', '\n', 0, N}, {'7', '7', 0, 3}};
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        memset(s, runs[k].c, N - 1);
        s[N - 1] = (unsigned char)runs[k].last;
        size_t ms = 1, me = 0, need = 0;
        int r = mw_regex_find_need(re, NULL, s, N, 0, &ms, &me, &need);
        CHECK(r == 1 && ms == runs[k].ms && me == runs[k].me, "a 4 MiB run of %#x: %d [%zu, %zu) for [%zu, %zu)",
              runs[k].c, r, ms, me, runs[k].ms, runs[k].me);
        /* a match that reached the end of the text may grow with more text; one that did not is final */
        int final = me < N - 1;
        CHECK(final ? need <= N : need == SIZE_MAX, "a run of %#x: need %zu of %zu", runs[k].c, need, N);
    }
    free(s);
    mw_regex_free(re);
}

static void test_regex(void) {
    /* Llama 3's pattern: digits in groups of 1-3, case-insensitive contractions, a non-letter
     * before letters, newlines with the punctuation before them */
    expect_pieces(LLAMA3_RE, "I'M 1234567 DON'T we'Ll", "I|'M| |123|456|7| DON|'T| we|'Ll|");
    expect_pieces(LLAMA3_RE, "x\xC5\xBF'\xC5\xBF", "x\xC5\xBF|'\xC5\xBF|"); /* 'ſ: Unicode folding */
    expect_pieces(LLAMA3_RE, "a.\n\n  b", "a|.\n\n| | b|");
    expect_pieces(LLAMA3_RE, "(x)   \t\ny", "(x|)|   \t\n|y|");
    expect_pieces(LLAMA3_RE, "$5 \xE2\x82\xAC""10", "$|5| \xE2\x82\xAC|10|");
    expect_pieces(GPT2_RE, "Hello  world's 12 !!", "Hello| | world|'s| 12| !!|");
    /* gaps between matches are pieces of their own (Split, Isolated) */
    expect_pieces("[0-9]+", "ab12cd3", "ab|12|cd|3|");
    expect_pieces("a{2,3}", "aaaaaaa", "aaa|aaa|a|");
    expect_pieces("a+?b|c", "aab c", "aab| |c|");
    expect_pieces("(?:ab|a)(?=c)", "abcac", "ab|c|a|c|");
    expect_pieces("\\p{N}|\\P{N}+", "x\xC2\xBD\xE2\x85\xA7y", "x|\xC2\xBD|\xE2\x85\xA7|y|");
    expect_pieces("[^a-c\\s]+", "abxyz d\xFF", "ab|xyz| |d\xFF|"); /* an invalid byte is U+FFFD */
    expect_pieces("\\u00e9|\\x41|\\u{1F600}", "\xC3\xA9" "A\xF0\x9F\x98\x80", "\xC3\xA9|A|\xF0\x9F\x98\x80|");
    expect_pieces(".", "a\nb", "a|\n|b|");
    /* exponential without the memo: (a|a)*b on a's alone */
    char many[200];
    memset(many, 'a', 199);
    many[199] = 0;
    mw_regex *re;
    CHECK_OK(mw_regex_compile(&re, "(?:a|a)*b", 9, "test"));
    size_t ms, me;
    CHECK(mw_regex_find(re, NULL, (const unsigned char *)many, 199, 0, &ms, &me) == 0, "(a|a)*b matched");
    mw_regex_free(re);
    test_regex_long();
    /* refused, each with a reason */
    const char *bad[] = {"a*", "x|", "^a", "a$", "\\bx", "(a*)*", "\\p{Lu}", "(?<=a)b", "\\1", "[a", "(a",
                         "a)", "a{3,2}", "a**", "(?!ab)", "(?i:\\u00e9)", "(?i:[a-z])", "\\q", "a{1001}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mw_status s = mw_regex_compile(&re, bad[i], strlen(bad[i]), "test");
        CHECK(s == MW_ERR_FORMAT && !re && strstr(mw_last_error(), "not supported"), "/%s/ was not refused: %s",
              bad[i], mw_last_error());
    }
}

/* The regex engine running GPT-2's pattern cuts text exactly as the hand-written matcher does:
 * a tokenizer.json with GPT-2's vocabulary and a Split of GPT-2's pattern gives GPT-2's ids. */
static void test_regex_vs_gpt2(const char *text, size_t tn) {
    size_t en, bn;
    char *ej = read_all("data/gpt2/encoder.json", &en), *bp = read_all("data/gpt2/vocab.bpe", &bn);
    if (!ej || !bp) {
        printf("  SKIP regex vs GPT-2's matcher: data/gpt2 missing (scripts/fetch-gpt2-vocab.sh)\n");
        free(ej), free(bp);
        return;
    }
    size_t cap = en + 2 * bn + 4096, k = 0;
    char *js = malloc(cap);
    k += (size_t)sprintf(js, "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                             "\"pattern\": {\"Regex\": \"");
    for (const char *p = GPT2_RE; *p; p++) {
        if (*p == '\\') js[k++] = '\\';
        js[k++] = *p;
    }
    k += (size_t)sprintf(js + k, "\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
                                 "\"add_prefix_space\": false, \"use_regex\": false}]}, \"model\": {\"type\": \"BPE\", \"vocab\": ");
    memcpy(js + k, ej, en), k += en;
    k += (size_t)sprintf(js + k, ", \"merges\": [");
    int first = 1;
    for (char *line = strchr(bp, '\n') + 1; line < bp + bn;) {
        char *nl = memchr(line, '\n', (size_t)(bp + bn - line));
        if (!nl) break;
        if (!first) js[k++] = ',';
        js[k++] = '"';
        for (char *c = line; c < nl; c++) {
            if (*c == '"' || *c == '\\') js[k++] = '\\';
            js[k++] = *c;
        }
        js[k++] = '"';
        first = 0;
        line = nl + 1;
    }
    k += (size_t)sprintf(js + k, "]}}");
    js[k] = 0;
    char path[] = "/tmp/mw_tokjson_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    write_all(path, js);
    mw_tokenizer *g, *r;
    CHECK_OK(mw_tokenizer_load(&g, "data/gpt2"));
    CHECK_OK(mw_tokenizer_load(&r, path));
    size_t n1, n2;
    int32_t *a = enc(g, text, tn, &n1), *b = enc(r, text, tn, &n2);
    CHECK(n1 == n2 && memcmp(a, b, n1 * sizeof *a) == 0, "GPT-2's pattern as a Split regex: ids differ");
    mw_tokenizer_id id;
    mw_tokenizer_identity(r, &id);
    CHECK(strcmp(id.name, "bpe") == 0 && id.hash != MW_TOKENIZER_GPT2_HASH,
          "GPT-2's vocabulary with a Split pipeline is \"%s\" %016llx, not another bpe", id.name,
          (unsigned long long)id.hash);
    printf("  regex engine with GPT-2's pattern: %zu ids, as GPT-2's matcher\n", n1);
    free(a), free(b), free(js), free(ej), free(bp);
    mw_tokenizer_free(g), mw_tokenizer_free(r);
    unlink(path);
}

/* ---- tiny tokenizer.json files ------------------------------------------------------------- */

static char tmpdir[] = "/tmp/mw_tokjson_XXXXXX";

static mw_tokenizer *load_text(const char *json, mw_status want) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpdir);
    write_all(path, json);
    mw_tokenizer *t = NULL;
    mw_status s = mw_tokenizer_load(&t, path);
    CHECK(s == want, "loading %.60s...: %s (%s)", json, mw_status_str(s), s ? mw_last_error() : "");
    unlink(path);
    return t;
}

/* A SentencePiece BPE: 3 specials, the 256 byte tokens, then pieces; Llama 2's pipeline. */
static void sp_json(char *o, const char *extra_vocab, const char *merges, const char *post) {
    int k = sprintf(o, "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 1, "
                       "\"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}], "
                       "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "
                       "\"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}, "
                       "\"pre_tokenizer\": null, \"post_processor\": %s, \"decoder\": {\"type\": \"Sequence\", "
                       "\"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, \"content\": \" \"}, "
                       "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", "
                       "\"start\": 1, \"stop\": 0}]}, \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, "
                       "\"fuse_unk\": true, \"unk_token\": \"<unk>\", \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2",
                    post);
    for (int b = 0; b < 256; b++) k += sprintf(o + k, ", \"<0x%02X>\": %d", b, 3 + b);
    sprintf(o + k, "%s}, \"merges\": [%s]}}", extra_vocab, merges);
}

static void test_tiny_sp(void) {
    static char js[32768];
    const char *tmpl = "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
                       "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": "
                       "\"</s>\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1]}, "
                       "\"</s>\": {\"id\": \"</s>\", \"ids\": [2]}}}";
    /* 259 \u2581, 260 a, 261 b, 262 \u2581a, 263 ab, 264 \u2581ab, 265 \u00e9 */
    sp_json(js, ", \"\\u2581\": 259, \"a\": 260, \"b\": 261, \"\\u2581a\": 262, \"ab\": 263, \"\\u2581ab\": 264, "
                "\"\\u00e9\": 265",
            "\"\\u2581 a\", \"a b\", \"\\u2581a b\"", tmpl);
    mw_tokenizer *t = load_text(js, MW_OK);
    if (!t) return;
    CHECK(mw_tokenizer_vocab(t) == 266, "tiny sp: vocab %d", mw_tokenizer_vocab(t));
    /* "ab" -> "▁ab": ▁ a first (rank 0), then ▁a b (rank 2) */
    expect_ids(t, "sp ab", "ab", (int32_t[]){264}, 1);
    /* "aab": ▁ a (0), then a b (1): ▁a ab */
    expect_ids(t, "sp aab", "aab", (int32_t[]){262, 263}, 2);
    /* spaces become ▁; é is a token; ü (c3 bc) and z fall back to their bytes */
    expect_ids(t, "sp fallback", " \xC3\xA9z\xC3\xBC", (int32_t[]){259, 259, 265, 3 + 'z', 3 + 0xC3, 3 + 0xBC}, 6);
    expect_ids(t, "sp invalid byte", "\xFF" "a", (int32_t[]){259, 3 + 0xFF, 260}, 3);
    expect_ids(t, "sp empty", "", NULL, 0);
    const char *rt[] = {"ab", " ab  a", "\xC3\xA9z\xC3\xBC \xFF\xE2\x82", "", " ", "<s>"};
    for (size_t i = 0; i < sizeof rt / sizeof *rt; i++) round_trip(t, "sp round trip", rt[i], strlen(rt[i]));
    /* decode: ▁ -> space, byte tokens -> bytes, one leading space stripped, specials as text */
    size_t n;
    char *d = dec(t, (int32_t[]){1, 264, 259, 3 + 0xC3, 3 + 0xA9, 2}, 6, &n);
    CHECK(n == 13 && memcmp(d, "<s> ab \xC3\xA9</s>", 13) == 0, "sp decode: \"%.*s\"", (int)n, d);
    free(d);
    const int32_t *pre, *post;
    size_t npre, npost;
    int own;
    mw_tokenizer_doc_ids(t, &pre, &npre, &post, &npost, &own);
    CHECK(npre == 1 && pre[0] == 1 && npost == 1 && post[0] == 2 && own == 1, "sp template: %zu %zu", npre, npost);
    mw_tokenizer_id id;
    mw_tokenizer_identity(t, &id);
    CHECK(strcmp(id.name, "spbpe") == 0, "tiny sp is \"%s\"", id.name);
    mw_tokenizer_free(t);

    /* the same with a Metaspace pre-tokenizer (newer files) instead of the normalizer: ▁ first
     * only when the text does not start with one */
    sp_json(js, ", \"\\u2581\": 259, \"a\": 260, \"b\": 261, \"\\u2581a\": 262, \"ab\": 263, \"\\u2581ab\": 264",
            "\"\\u2581 a\", \"a b\", \"\\u2581a b\"", "null");
    char *nb = strstr(js, "\"normalizer\": "), *ne = strstr(js, "\"pre_tokenizer\": null, ");
    const char *meta = "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
                       "\"prepend_scheme\": \"first\", \"split\": false}, ";
    if (nb && ne) { /* the normalizer and the null pre-tokenizer become the Metaspace one */
        const char *after = ne + strlen("\"pre_tokenizer\": null, ");
        memmove(nb + strlen(meta), after, strlen(after) + 1);
        memcpy(nb, meta, strlen(meta));
    }
    t = load_text(js, MW_OK);
    if (t) {
        expect_ids(t, "metaspace ab", "ab", (int32_t[]){264}, 1);
        expect_ids(t, "metaspace ' ab'", " ab", (int32_t[]){264}, 1);
        expect_ids(t, "metaspace 'a b'", "a b", (int32_t[]){262, 259, 261}, 3);
    }
    mw_tokenizer_free(t);

    /* a missing byte token, a merge of unknown tokens, a decoder without ByteFallback: refused */
    sp_json(js, ", \"a\": 259", "\"a x\"", "null");
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "merge 1"), "%s", mw_last_error());
    sp_json(js, "", "", "null");
    char *p = strstr(js, "\"<0x41>\": 68, ");
    p[5] = 'G'; /* "<0x4G>": no byte token for 0x41 */
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "<0x41>"), "%s", mw_last_error());
    sp_json(js, "", "", "null");
    p = strstr(js, "{\"type\": \"ByteFallback\"}, ");
    memmove(p, p + 26, strlen(p + 26) + 1);
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "ByteFallback"), "%s", mw_last_error());
}

/* byte-level: bytes in byte order (GPT-2's alphabet), then merges */
static int byte_char(int b, char *out) {
    int cp = b, n = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        for (int x = 0; x < b; x++) n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
        cp = 256 + n;
    }
    if (cp == '"' || cp == '\\') return sprintf(out, "\\%c", cp);
    if (cp < 0x80) return sprintf(out, "%c", cp);
    return sprintf(out, "%c%c", 0xC0 | cp >> 6, 0x80 | (cp & 63));
}

static void bl_json(char *o, const char *pre, const char *model_extra, const char *vocab_extra, const char *merges,
                    const char *rest) {
    int k = sprintf(o, "{\"pre_tokenizer\": %s, %s \"model\": {\"type\": \"BPE\"%s, \"vocab\": {", pre, rest, model_extra);
    for (int b = 0; b < 256; b++) {
        char c[8];
        byte_char(b, c);
        k += sprintf(o + k, "%s\"%s\": %d", b ? ", " : "", c, b);
    }
    sprintf(o + k, "%s}, \"merges\": [%s]}}", vocab_extra, merges);
}

static void test_tiny_bytelevel(void) {
    static char js[32768];
    const char *pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                      "\"\\\\p{N}{1,3}|\\\\p{L}+|[^\\\\p{L}\\\\p{N}]+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
                      "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}";
    /* 256 ab, 257 bc, 258 abc (not reachable by merges: ab c is no merge), 259 12, 260 123 */
    const char *vocab = ", \"ab\": 256, \"bc\": 257, \"abc\": 258, \"12\": 259, \"123\": 260";
    const char *merges = "\"b c\", \"a b\", \"1 2\", \"12 3\"";
    bl_json(js, pre, "", vocab, merges, "\"added_tokens\": [{\"id\": 261, \"content\": \"<|bos|>\", \"special\": true}], "
            "\"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": "
            "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|bos|>\"}}, {\"Sequence\": {\"id\": "
            "\"A\"}}], \"special_tokens\": {\"<|bos|>\": {\"ids\": [261]}}}]},");
    mw_tokenizer *t = load_text(js, MW_OK);
    if (!t) return;
    /* merges by rank, leftmost first: abc -> a bc (rank 0 first); digits in groups of 3 */
    expect_ids(t, "bl abc", "abc", (int32_t[]){'a', 257}, 2);
    expect_ids(t, "bl digits", "1231234", (int32_t[]){260, 260, '4'}, 3);
    expect_ids(t, "bl <|bos|> is text", "<|bos|>", (int32_t[]){'<', '|', 'b', 'o', 's', '|', '>'}, 7);
    const int32_t *pre_ids, *post;
    size_t npre, npost;
    int own;
    mw_tokenizer_doc_ids(t, &pre_ids, &npre, &post, &npost, &own);
    CHECK(npre == 1 && pre_ids[0] == 261 && npost == 0 && own, "bl template: %zu %zu", npre, npost);
    round_trip(t, "bl round trip", "abc 1234\xFF\n", 10);
    mw_tokenizer_free(t);
    /* ignore_merges: a word that is a token is that token */
    bl_json(js, pre, ", \"ignore_merges\": true", vocab, merges, "");
    t = load_text(js, MW_OK);
    if (t) expect_ids(t, "bl ignore_merges", "abc", (int32_t[]){258}, 1);
    mw_tokenizer_free(t);
    /* refusals: a regex outside the subset, add_prefix_space, another normalizer, a non-special
     * added token, a BPE that is neither byte-level nor byte-fallback */
    bl_json(js, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
            "\"\\\\p{Lu}+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\"}]}",
            "", "", "", "");
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "\\p{Lu}"), "%s", mw_last_error());
    bl_json(js, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", "", "", "", "");
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "add_prefix_space"), "%s", mw_last_error());
    bl_json(js, "{\"type\": \"ByteLevel\"}", "", "", "", "\"normalizer\": {\"type\": \"NFC\"},");
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "NFC"), "%s", mw_last_error());
    bl_json(js, "{\"type\": \"ByteLevel\"}", "", "", "", "\"added_tokens\": [{\"id\": 256, \"content\": \"hi\", \"special\": false}],");
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "not special"), "%s", mw_last_error());
    bl_json(js, "null", "", "", "", "");
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "byte_fallback"), "%s", mw_last_error());
    bl_json(js, "{\"type\": \"Digits\"}", "", "", "", "");
    CHECK(!load_text(js, MW_ERR_FORMAT) && strstr(mw_last_error(), "Digits"), "%s", mw_last_error());
}

/* ---- Llama 2 and Llama 3 ------------------------------------------------------------------- */

static int32_t *json_ids(const mw_json *j, int arr, size_t *n) {
    *n = 0;
    for (int c = j->nodes[arr].first; c >= 0; c = j->nodes[c].next) (*n)++;
    int32_t *v = malloc((*n + 1) * sizeof *v);
    size_t k = 0;
    for (int c = j->nodes[arr].first; c >= 0; c = j->nodes[c].next) v[k++] = (int32_t)j->nodes[c].i;
    return v;
}

static int same(const mw_tokenizer *t, const char *what, const int32_t *got, size_t ng, const int32_t *want, size_t nw) {
    size_t i = 0;
    while (i < ng && i < nw && got[i] == want[i]) i++;
    if (i == ng && i == nw) return 1;
    CHECK(0, "%s: ids differ from transformers.js's at index %zu (memwall %zu ids, reference %zu): %d vs %d", what, i,
          ng, nw, i < ng ? (int)got[i] : -1, i < nw ? (int)want[i] : -1);
    size_t pn;
    const char *p = i < ng ? mw_tokenizer_piece(t, got[i], &pn) : NULL;
    if (p) fprintf(stderr, "  memwall's piece: \"%.*s\"\n", (int)pn, p);
    return 0;
}

static void check_text(const mw_tokenizer *t, const char *what, const char *s, size_t n, const mw_json *j, int arr,
                       int lossless) {
    size_t ng, nw;
    int32_t *got = enc(t, s, n, &ng), *want = json_ids(j, arr, &nw);
    same(t, what, got, ng, want, nw);
    if (lossless) round_trip(t, what, s, n);
    free(got), free(want);
}

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

/* Node's decoding: every maximal subpart of an ill-formed sequence becomes U+FFFD (as in
 * tests/test_tokenizer.c). */
static char *whatwg_decode(const unsigned char *s, size_t n, size_t *outn) {
    char *o = malloc(3 * n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        size_t k = 1;
        if (need > 1) {
            unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            while (k < need && i + k < n && s[i + k] >= (k == 1 ? lo : 0x80) && s[i + k] <= (k == 1 ? hi : 0xBF)) k++;
        }
        if (need != 0 && k == need) memcpy(o + m, s + i, k), m += k;
        else memcpy(o + m, "\xEF\xBF\xBD", 3), m += 3;
        i += k;
    }
    *outn = m;
    return o;
}

/* Llama 2's text is merged word by word (before each ▁ after another character) because no
 * token holds such a ▁: the ids must be those of merging the text whole, which the same file
 * with one more token "x▁y" (made by no merge) forces. */
static void test_word_split(const mw_tokenizer *t, const char *dir, const char *text, size_t tn) {
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    size_t n;
    char *js = read_all(path, &n);
    char *v = js ? strstr(js, "\"vocab\": {") : NULL;
    CHECK(v != NULL, "%s: no vocab", path);
    if (!v) {
        free(js);
        return;
    }
    v += 10;
    const char *add = "\"x\u2581y\": 32000, ";
    char *js2 = malloc(n + strlen(add) + 1);
    size_t head = (size_t)(v - js);
    memcpy(js2, js, head);
    memcpy(js2 + head, add, strlen(add));
    memcpy(js2 + head + strlen(add), v, n - head);
    js2[n + strlen(add)] = 0;
    char p2[256];
    snprintf(p2, sizeof p2, "%s/tokenizer.json", tmpdir);
    write_all(p2, js2);
    mw_tokenizer *whole;
    CHECK_OK(mw_tokenizer_load(&whole, p2));
    unlink(p2);
    size_t gpl_n;
    char *gpl = read_all("/usr/share/common-licenses/GPL-3", &gpl_n);
    const char *texts[] = {text, gpl ? gpl : "", " a  b\n\n  c \xE2\x96\x81\xE2\x96\x81x"};
    size_t lens[] = {tn, gpl ? gpl_n : 0, 17};
    for (int k = 0; k < 3; k++) {
        size_t na, nb;
        int32_t *a = enc(t, texts[k], lens[k], &na), *b = enc(whole, texts[k], lens[k], &nb);
        CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0, "llama2: word by word != whole (text %d: %zu vs %zu ids)",
              k, na, nb);
        free(a), free(b);
    }
    printf("  llama2: merging word by word gives the ids of merging whole texts (%zu bytes)\n", tn + (gpl ? gpl_n : 0));
    free(gpl), free(js), free(js2);
    mw_tokenizer_free(whole);
}

static void test_llama(const char *name, const char *dir, const char *text, size_t tn) {
    char path[600], ref[64];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (access(path, R_OK) != 0) {
        printf("  SKIP %s: %s is missing (scripts/fetch-llama-tokenizers.sh fetches it)\n", name, path);
        return;
    }
    snprintf(ref, sizeof ref, "tests/ref/%s_tokens.json", name);
    size_t jn;
    char *js = read_all(ref, &jn);
    CHECK(js != NULL, "%s missing", ref);
    if (!js) return;
    mw_json j;
    CHECK_OK(mw_json_parse(&j, js, jn, ref, MW_JSON_MAX_TOKENIZER));
    mw_tokenizer *t;
    CHECK_OK(mw_tokenizer_load(&t, dir));
    int is3 = strcmp(name, "llama3") == 0;
    CHECK(mw_tokenizer_vocab(t) == (is3 ? 128256 : 32000), "%s: vocab %d", name, mw_tokenizer_vocab(t));
    mw_tokenizer_id id;
    mw_tokenizer_identity(t, &id);
    CHECK(strcmp(id.name, name) == 0, "%s: identity \"%s\" %016llx", name, id.name, (unsigned long long)id.hash);
    printf("  %s: identity %s %016llx\n", name, id.name, (unsigned long long)id.hash);

    check_text(t, "all", text, tn, &j, mw_json_get(&j, 0, "all"), 1);
    int d = j.nodes[mw_json_get(&j, 0, "docs")].first;
    for (const char *p = text; p < text + tn && d >= 0; d = j.nodes[d].next) {
        const char *e = memchr(p, '\n', (size_t)(text + tn - p));
        e = e ? e + 1 : text + tn;
        check_text(t, "doc", p, (size_t)(e - p), &j, d, 1);
        p = e;
    }
    /* invalid UTF-8: the ids of Node's decoding (U+FFFD), and the raw bytes decode back */
    const char *hex = j.nodes[mw_json_get(&j, 0, "invalid_hex")].str;
    size_t bn = strlen(hex) / 2, wn;
    unsigned char *bytes = malloc(bn);
    for (size_t i = 0; i < bn; i++) bytes[i] = (unsigned char)strtol((char[]){hex[2 * i], hex[2 * i + 1], 0}, NULL, 16);
    char *w = whatwg_decode(bytes, bn, &wn);
    check_text(t, "invalid UTF-8 (as Node decodes it)", w, wn, &j, mw_json_get(&j, 0, "invalid_ids"), 1);
    round_trip(t, "invalid UTF-8 (raw)", (const char *)bytes, bn);
    free(w), free(bytes);
    for (int c = j.nodes[mw_json_get(&j, 0, "long")].first; c >= 0; c = j.nodes[c].next) {
        char *word = lcg_word((uint32_t)j.nodes[mw_json_get(&j, c, "seed")].i, (size_t)j.nodes[mw_json_get(&j, c, "n")].i,
                              j.nodes[mw_json_get(&j, c, "alphabet")].str);
        check_text(t, "long word", word, strlen(word), &j, mw_json_get(&j, c, "ids"), 1);
        free(word);
    }
    int nextra = 0;
    for (int c = j.nodes[mw_json_get(&j, 0, "extra")].first; c >= 0; c = j.nodes[c].next, nextra++) {
        const char *s = j.nodes[j.nodes[c].first].str;
        char what[80];
        snprintf(what, sizeof what, "extra \"%.40s\"", s);
        /* U+2581 in the text decodes as a space in Llama 2, as in Hugging Face */
        check_text(t, what, s, strlen(s), &j, j.nodes[j.nodes[c].first].next, is3 || !strstr(s, "\xE2\x96\x81"));
    }
    const int32_t *pre, *post;
    size_t npre, npost, nb, ne;
    int own;
    mw_tokenizer_doc_ids(t, &pre, &npre, &post, &npost, &own);
    int32_t *bos = json_ids(&j, mw_json_get(&j, 0, "bos"), &nb), *eos = json_ids(&j, mw_json_get(&j, 0, "eos"), &ne);
    if (is3) { /* the template is not in this (first) tokenizer.json: tokenizer_config.json's bos_token */
        CHECK(nb == 0 && npre == 1 && pre[0] == 128000 && npost == 0 && own, "llama3: document ids %zu %zu", npre, npost);
    } else {
        CHECK(own && same(t, "llama2 bos", pre, npre, bos, nb) && same(t, "llama2 eos", post, npost, eos, ne),
              "llama2: document ids");
    }
    free(bos), free(eos);
    if (!is3) test_word_split(t, dir, text, tn);
    printf("  %s: %zu bytes of mixed text, its lines, invalid UTF-8, long words and %d short texts: transformers.js's ids\n",
           name, tn, nextra);
    mw_tokenizer_free(t);
    mw_json_free(&j);
    free(js);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t tn;
    char *text = read_all("tests/ref/tokenizer_text.txt", &tn);
    if (!text) {
        fprintf(stderr, "FAIL: run from the repository root (tests/ref/ not found)\n");
        return 1;
    }
    if (!mkdtemp(tmpdir)) return 1;
    test_regex();
    test_tiny_sp();
    test_tiny_bytelevel();
    test_regex_vs_gpt2(text, tn);
    const char *base = getenv("MW_LLAMA_DIR") ? getenv("MW_LLAMA_DIR") : "data";
    char dir[512];
    snprintf(dir, sizeof dir, "%s/llama2", base);
    test_llama("llama2", dir, text, tn);
    snprintf(dir, sizeof dir, "%s/llama3", base);
    test_llama("llama3", dir, text, tn);
    rmdir(tmpdir);
    free(text);
    return test_summary("test_tokjson");
}
