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
#endif
