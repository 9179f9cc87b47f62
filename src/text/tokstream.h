/* Tokenizing a document too long to hold in memory, in parts: mw_tokstream_cut finds where a
 * text may be cut so that encoding the parts (mw_tokenizer_encode_part) appends the ids of
 * encoding it whole, whatever text follows. The cut is where the pre-tokenizer cuts anyway (a
 * boundary between two of its pieces), once the text read shows that the pieces before it are
 * final; a Prepend of the normalizer goes to the first part only. */
#ifndef MW_TOKSTREAM_H
#define MW_TOKSTREAM_H
#include <stddef.h>

#include "tokenizer.h"

/* May the text s[0..n) be cut at p? (a caller's own rule, e.g. prepare's blank lines) */
typedef int (*mw_tokstream_ok)(void *ctx, const char *s, size_t n, size_t p);

/* The largest cut p with 0 < p <= max (max <= n) such that, for every text x that starts with
 * s[0..n), encode_part(x[0..p), first) followed by encode_part(x[p..), 0) gives the ids of
 * encode_part(x, first), and ok (may be NULL) allows it; *cut = 0 when there is none (one
 * pre-token runs over max). On failure *cut is 0 and the status is MW_ERR_FORMAT when the
 * tokenizer cannot encode a text in parts at all (a tokenizer.json without a pre-tokenizer that
 * merges the whole text as one word; a normalizer that replaces strings of several bytes), saying
 * why, or MW_ERR_NOMEM. The bytes tokenizer cuts anywhere. Memory: the normalized text up to a
 * little past max (three bytes a byte for Llama 2's). */
mw_status mw_tokstream_cut(const mw_tokenizer *t, const char *s, size_t n, size_t max, int first,
                           mw_tokstream_ok ok, void *ctx, size_t *cut);
#endif
