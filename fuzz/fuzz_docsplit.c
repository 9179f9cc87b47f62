/* libFuzzer target: prepare's document splitting, streamed, on arbitrary text. The input's first
 * byte picks a read size (1 to 64 bytes); the rest is the text. Read that many bytes at a time and
 * fed to mw_docs_feed as prepare feeds it (what it did not consume carried to the next read), the
 * documents must be exactly mw_docs_split's of the whole text, in order, with and without
 * --split-blank-lines (without: each input one document). Must never crash, leak or read out of
 * bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/text/docsplit.h"

typedef struct {
    const char **doc;
    size_t *len, n, cap;
} list;

static void add(void *ctx, const char *doc, size_t len) {
    list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->doc = realloc(l->doc, l->cap * sizeof *l->doc);
        l->len = realloc(l->len, l->cap * sizeof *l->len);
        if (!l->doc || !l->len) abort();
    }
    l->doc[l->n] = doc;
    l->len[l->n++] = len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const size_t step = 1 + data[0] % 64;
    const char *text = (const char *)data + 1;
    const size_t n = size - 1;
    for (int split = 0; split < 2; split++) {
        list whole = {0}, streamed = {0};
        mw_docs_split(text, n, split, add, &whole);
        /* streamed as prepare reads: `step` bytes at a time (the end when a read comes short),
         * mw_docs_feed given what is not consumed yet */
        mw_docs_stream st = {split, 0};
        size_t lo = 0, hi = 0;
        for (;;) {
            const size_t got = n - hi < step ? n - hi : step;
            hi += got;
            const int eof = got < step;
            const size_t used = mw_docs_feed(&st, text + lo, hi - lo, eof, add, &streamed);
            if (used > hi - lo || (eof && used != hi - lo)) abort();
            lo += used;
            if (eof) break;
        }
        if (streamed.n != whole.n) abort();
        for (size_t i = 0; i < whole.n; i++)
            if (streamed.doc[i] != whole.doc[i] || streamed.len[i] != whole.len[i]) abort();
        free(whole.doc), free(whole.len), free(streamed.doc), free(streamed.len);
    }
    return 0;
}
