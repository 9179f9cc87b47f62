/* libFuzzer target: prepare's document splitting, streamed, on arbitrary text. The input's first
 * byte picks a read size (1 to 64 bytes); the rest is the text. Read that many bytes at a time,
 * cutting at mw_docs_last_start as prepare does (whole documents before the cut split now, the
 * rest carried to the next read), and the documents must be exactly mw_docs_split's of the whole
 * text, in order, with and without --split-blank-lines (without: each input one document). Must
 * never crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/train/docsplit.h"

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
        /* streamed: a carry of [lo, hi) grows by step; whole documents before a cut go out */
        size_t lo = 0, hi = 0;
        while (hi < n) {
            hi = hi + step < n ? hi + step : n;
            if (!split || hi == n) continue;
            const size_t cut = mw_docs_last_start(text + lo, hi - lo);
            if (cut == 0) continue;
            if (lo + cut > hi) abort();
            mw_docs_split(text + lo, cut, 1, add, &streamed);
            lo += cut;
        }
        mw_docs_split(text + lo, n - lo, split, add, &streamed);
        if (streamed.n != whole.n) abort();
        for (size_t i = 0; i < whole.n; i++)
            if (streamed.doc[i] != whole.doc[i] || streamed.len[i] != whole.len[i]) abort();
        free(whole.doc), free(whole.len), free(streamed.doc), free(streamed.len);
    }
    return 0;
}
