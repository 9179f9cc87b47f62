/* Documents of a text (docsplit.h). */
#include "docsplit.h"

void mw_docs_split(const char *text, size_t n, int split_blank, mw_doc_fn fn, void *ctx) {
    if (!split_blank) {
        if (n) fn(ctx, text, n);
        return;
    }
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        int end = i == n;
        if (!end && text[i] == '\n') { /* a blank line: \n, optional spaces, \n */
            size_t j = i + 1;
            while (j < n && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
            end = j < n && text[j] == '\n';
            if (end) {
                if (i > start) fn(ctx, text + start, i + 1 - start);
                while (j < n && (text[j] == '\n' || text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
                start = j;
                i = j - 1;
                continue;
            }
        }
        if (end && i > start) fn(ctx, text + start, i - start);
    }
}

static int blank(char c) { return c == '\n' || c == ' ' || c == '\t' || c == '\r'; }

/* p is such a start when text[p] is not blank and the run of blanks before it holds two newlines:
 * mw_docs_split reaches the run's first newline inside a document, finds the blank line there
 * (only blanks follow it up to the second newline), ends the document and skips to p. */
size_t mw_docs_last_start(const char *text, size_t n) {
    for (size_t p = n; p-- > 1;) {
        if (blank(text[p]) || !blank(text[p - 1])) continue;
        int nl = 0;
        for (size_t q = p; q-- > 0 && blank(text[q]) && nl < 2;) nl += text[q] == '\n';
        if (nl >= 2) return p;
    }
    return 0;
}

size_t mw_docs_feed(mw_docs_stream *s, const char *text, size_t n, int eof, mw_doc_fn fn, void *ctx) {
    size_t k = 0;
    if (s->skip) { /* mw_docs_split skips every blank after a blank line */
        while (k < n && blank(text[k])) k++;
        if (k == n && !eof) return n;
        s->skip = 0;
    }
    const char *t = text + k;
    const size_t m = n - k;
    if (eof) {
        mw_docs_split(t, m, s->split_blank, fn, ctx);
        return n;
    }
    if (!s->split_blank) return k; /* the whole text is one document: at the end */
    const size_t cut = mw_docs_last_start(t, m);
    if (cut) {
        mw_docs_split(t, cut, 1, fn, ctx);
        return k + cut;
    }
    /* no document starts after a blank line yet; but when a blank line ends the text, what is
     * before it is whole (its documents end there, whatever follows) */
    size_t e = m, nl = 0;
    while (e > 0 && blank(t[e - 1])) e--;
    for (size_t q = e; q < m && nl < 2; q++) nl += t[q] == '\n';
    if (nl < 2) return k;
    mw_docs_split(t, m, 1, fn, ctx);
    s->skip = 1;
    return n;
}
