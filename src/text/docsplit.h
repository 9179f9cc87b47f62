/* The documents of a text, as `prepare` takes them: the whole text, or the pieces that blank
 * lines separate. Streaming: mw_docs_last_start says where a prefix of the text may be cut so that
 * splitting the prefix and the rest apart gives the documents of the whole. */
#ifndef MW_DOCSPLIT_H
#define MW_DOCSPLIT_H
#include <stddef.h>

typedef void (*mw_doc_fn)(void *ctx, const char *doc, size_t len);

/* Calls fn for each document of text[0..n) in order: the whole (when n > 0) unless split_blank;
 * with it, the pieces between blank lines (a newline, then spaces, tabs or carriage returns, then
 * a newline): a piece keeps the first newline of the blank line that ends it, and the blanks
 * after it (newlines, spaces, tabs, carriage returns) belong to no piece. */
void mw_docs_split(const char *text, size_t n, int split_blank, mw_doc_fn fn, void *ctx);

/* The start p > 0 of the last document of text[0..n) that a blank line separates from what comes
 * before it, whatever follows text[n-1] (0: none). mw_docs_split of text[0..p) and then of
 * text[p..m) gives the documents mw_docs_split(text, m, 1) gives, for any m >= n. */
size_t mw_docs_last_start(const char *text, size_t n);

/* A text read in pieces, as prepare reads it. mw_docs_feed takes the text not yet consumed (what
 * the last call left, then what was read since), calls fn for the documents it can tell are
 * whole, and returns how many bytes it consumed (the caller keeps the rest for the next call);
 * at the end (eof) it takes everything. The documents are mw_docs_split's of the whole text. A
 * whole document followed by a blank line is given at once, and the blanks read after it are
 * consumed as they come (they belong to no document). */
typedef struct mw_docs_stream {
    int split_blank; /* as mw_docs_split's */
    int skip;        /* 0 at the start; the blanks after a blank line are being skipped */
} mw_docs_stream;
size_t mw_docs_feed(mw_docs_stream *s, const char *text, size_t n, int eof, mw_doc_fn fn, void *ctx);
#endif
