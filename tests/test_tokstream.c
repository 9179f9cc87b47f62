/* Documents tokenized in parts (issue 30, items 1-2): mw_tokstream_cut's cuts, made while only a
 * window of the text is known, give the ids of encoding the whole text, for every tokenizer
 * (bytes, GPT-2's files, Llama 2's and Llama 3's tokenizer.json) on long runs of letters, spaces,
 * digits, newlines, multi-byte and invalid characters and on mixed text; the word cache stays
 * within its byte limit; a word over the word limit is refused. Llama's files come from
 * scripts/fetch-llama-tokenizers.sh (data/llama2, data/llama3; MW_LLAMA_DIR overrides data/):
 * without them their checks are skipped, saying so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/text/tokenizer.h"
#include "../src/text/tokstream.h"
#include "check.h"
#include "memwall.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static size_t rnd(size_t n) { /* 0..n-1 */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (size_t)((rng >> 33) % n);
}

/* Encodes s[0..n) in parts as prepare does: each cut chosen knowing only a window of the text
 * (the part so far and up to `ahead` bytes past max), max doubling while no cut is found; the ids
 * must be those of encoding it whole. Returns the number of parts. */
static size_t streamed(const mw_tokenizer *t, const char *what, const char *s, size_t n, size_t max0, size_t ahead) {
    int32_t *whole = NULL, *ids = NULL;
    size_t nw = 0, cw = 0, ni = 0, ci = 0, at = 0, parts = 0;
    CHECK_OK(mw_tokenizer_encode(t, s, n, &whole, &nw, &cw));
    while (at < n) {
        size_t max = max0 / 2 + rnd(max0) + 1, cut = 0;
        for (;;) {
            if (at + max >= n) { /* the rest is the last part */
                cut = n - at;
                break;
            }
            const size_t extra = rnd(ahead + 1); /* drawn once: two draws let the window pass the text's end */
            const size_t win = at + max + extra < n ? max + extra : n - at;
            CHECK_OK(mw_tokstream_cut(t, s + at, win, max, at == 0, NULL, NULL, &cut));
            if (cut) break;
            max *= 2;
        }
        CHECK(cut > 0 && cut <= n - at, "%s: cut %zu of %zu", what, cut, n - at);
        CHECK_OK(mw_tokenizer_encode_part(t, s + at, cut, at == 0, &ids, &ni, &ci));
        at += cut;
        parts++;
    }
    size_t k = 0;
    while (k < nw && k < ni && whole[k] == ids[k]) k++;
    CHECK(ni == nw && k == nw, "%s (%zu bytes, %zu parts): %zu ids streamed, %zu whole, the first difference at id %zu",
          what, n, parts, ni, nw, k);
    free(whole), free(ids);
    return parts;
}

/* Text made of runs: each of `reps` repeats of unit, between short words. */
static char *runs(const char *unit, size_t reps, size_t *n) {
    const size_t ul = strlen(unit);
    char *s = malloc(ul * reps + 64);
    size_t k = (size_t)sprintf(s, "Some words, then: ");
    for (size_t i = 0; i < reps; i++) memcpy(s + k, unit, ul), k += ul;
    k += (size_t)sprintf(s + k, " and after it.\nThe end");
    *n = k;
    return s;
}

static void test_tokenizer(const char *name, const mw_tokenizer *t, const char *text, size_t tn) {
    /* mixed text (the reference text: prose, code, numbers, Unicode, invalid UTF-8), cut often */
    size_t parts = streamed(t, name, text, tn, 64, 64);
    printf("  %s: %zu bytes of mixed text in %zu parts: the ids of the whole\n", name, tn, parts);
    const char *units[] = {"a", " ", "7", "\n", "\r\n", " \n", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xFF",
                           "ab ", "12 ", "x\n\n", "  \t", "'s", ".,"};
    for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
        size_t n;
        char *s = runs(units[u], 30000 / strlen(units[u]) + 7, &n);
        char what[96];
        snprintf(what, sizeof what, "%s, a run of \"%s\"", name, units[u]);
        for (unsigned c = 0; c < strlen(units[u]); c++)
            if ((unsigned char)units[u][c] < 0x20 || (unsigned char)units[u][c] >= 0x80) {
                snprintf(what, sizeof what, "%s, a run of unit %zu", name, u);
                break;
            }
        streamed(t, what, s, n, 200, 300);
        free(s);
    }
    printf("  %s: runs of 30 KB of letters, spaces, digits, newlines, multi-byte and invalid characters: the ids of the whole\n", name);
}

static void test_limits(const char *name, mw_tokenizer *t, const char *text, size_t tn) {
    int32_t *ids = NULL, *ref = NULL;
    size_t n = 0, cap = 0, nr = 0, cr = 0;
    CHECK_OK(mw_tokenizer_encode(t, text, tn, &ref, &nr, &cr)); /* fills the cache freely */
    const size_t used = mw_tokenizer_cache_bytes(t);
    CHECK(used > 0, "%s: nothing cached", name);
    /* a small limit: the cache stops growing, and the ids stay */
    mw_tokenizer_set_limits(t, used + 4096, SIZE_MAX);
    size_t wn = 0;
    char *w = malloc(400000);
    for (int i = 0; i < 20000; i++) { /* distinct words */
        wn += (size_t)sprintf(w + wn, " w%c%c%c%cq", 'a' + i % 26, 'a' + i / 26 % 26, 'a' + i / 676 % 26, 'b' + i % 7);
    }
    CHECK_OK(mw_tokenizer_encode(t, w, wn, &ids, &n, &cap));
    CHECK(mw_tokenizer_cache_bytes(t) <= used + 4096, "%s: the cache holds %zu bytes over its limit %zu", name,
          mw_tokenizer_cache_bytes(t), used + 4096);
    n = 0;
    CHECK_OK(mw_tokenizer_encode(t, text, tn, &ids, &n, &cap));
    CHECK(n == nr && memcmp(ids, ref, n * sizeof *ids) == 0, "%s: other ids once the cache is full", name);
    /* the word limit: a run of 5000 letters is one word */
    mw_tokenizer_set_limits(t, SIZE_MAX, 4096);
    memset(w, 'a', 5000);
    n = 0;
    mw_status st = mw_tokenizer_encode(t, w, 5000, &ids, &n, &cap);
    CHECK(st == MW_ERR_ARG && strstr(mw_last_error(), "a single word") && n == 0, "%s: a 5000-byte word over the limit: %s",
          name, mw_status_str(st));
    mw_tokenizer_set_limits(t, SIZE_MAX, SIZE_MAX);
    CHECK_OK(mw_tokenizer_encode(t, w, 5000, &ids, &n, &cap));
    printf("  %s: the cache stops at its byte limit (%zu bytes) with the same ids; a word over the word limit is refused\n",
           name, used + 4096);
    free(w), free(ids), free(ref);
}

/* A caller's rule that allows one cut only (at *ctx). */
static int only_at(void *ctx, const char *s, size_t n, size_t p) {
    (void)s, (void)n;
    return p == *(const size_t *)ctx;
}

/* The cut's check must see every piece it keeps, the oldest included: "\n\n0" is the pieces "\n",
 * "\n" under GPT-2's pattern, but "\n\n" alone is one, so cutting after it is wrong; with the
 * first "\n" the oldest of the 64 pieces held (and the cut after the second the only one the rule
 * allows), the check used to start at the second and take it. */
static void test_oldest_piece(const mw_tokenizer *t) {
    for (size_t lead = 0; lead < 4; lead++)
        for (size_t m = 56; m < 72; m++) {
            char s[512];
            size_t n = 0;
            for (size_t i = 0; i < lead; i++) n += (size_t)sprintf(s + n, " a");
            const size_t at = n + 2;
            n += (size_t)sprintf(s + n, "\n\n0");
            for (size_t i = 0; i < m; i++) n += (size_t)sprintf(s + n, " a");
            size_t cut = 0;
            CHECK_OK(mw_tokstream_cut(t, s, n, n - 1, 1, only_at, (void *)&at, &cut));
            CHECK(cut == 0, "gpt2: cut %zu after \"\\n\\n\" before \"0\" (%zu pieces after it), where \"\\n\\n\" alone "
                            "is one piece", cut, m + 1);
        }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t tn;
    char *text = (char *)slurp("tests/ref/tokenizer_text.txt", &tn); /* from the repository root */
    mw_tokenizer *t;
    CHECK_OK(mw_tokenizer_bytes(&t));
    test_tokenizer("bytes", t, text, tn);
    mw_tokenizer_free(t);
    const char *g = getenv("MW_GPT2_DIR") ? getenv("MW_GPT2_DIR") : "data/gpt2";
    CHECK_OK(mw_tokenizer_load(&t, g));
    test_tokenizer("gpt2", t, text, tn);
    test_limits("gpt2", t, text, tn);
    test_oldest_piece(t);
    mw_tokenizer_free(t);
    const char *base = getenv("MW_LLAMA_DIR") ? getenv("MW_LLAMA_DIR") : "data";
    for (int k = 2; k <= 3; k++) {
        char path[512], name[32];
        snprintf(name, sizeof name, "llama%d", k);
        snprintf(path, sizeof path, "%s/llama%d/tokenizer.json", base, k);
        if (access(path, R_OK) != 0) {
            printf("  %s: skipped (%s is missing: scripts/fetch-llama-tokenizers.sh)\n", name, path);
            continue;
        }
        CHECK_OK(mw_tokenizer_load(&t, path));
        test_tokenizer(name, t, text, tn);
        test_limits(name, t, text, tn);
        mw_tokenizer_free(t);
    }
    free(text);
    return test_summary("test_tokstream");
}
