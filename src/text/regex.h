/* Internal: the regular expressions of Hugging Face pre-tokenizers (tokenizer.json "Split"
 * patterns such as Llama 3's), matched exactly as JavaScript's RegExp with the u flag matches
 * them (leftmost, first alternative first, backtracking), on UTF-8 bytes.
 *
 * The subset: literals, escapes (\r \n \t \f \v \0 \xHH \uHHHH \u{H..} and escaped punctuation),
 * . (any character but \n \r U+2028 U+2029), classes [..] and [^..] with ranges, \p{L} \p{N}
 * (\p{Letter} \p{Number}) and their \P negations, \s \S (JavaScript's white space) \d \D \w \W
 * (ASCII, as in JavaScript), groups ( ), (?: ), (?i: ) (case-insensitive: an ASCII letter also
 * matches its other case, and s/k also U+017F/U+212A, as Unicode simple case folding does),
 * alternation, the quantifiers ? * + {m} {m,} {m,n} (greedy, or lazy with a trailing ?), and the
 * lookaheads (?!X) (?=X) of one character class X. Anything else (anchors, \b, backreferences,
 * other Unicode properties, a quantified subexpression that can match the empty string, a
 * pattern that can match the empty string) is refused when compiling, with the reason: a pattern
 * is executed exactly or not at all.
 *
 * Text is bytes: a byte that starts no well-formed UTF-8 sequence is a character of its own,
 * matched as U+FFFD (what a JavaScript string decoded from those bytes holds there).
 * Backtracking is exact; an attempt that takes many steps is run again as a Pike VM (the threads
 * in priority order, one character at a time), which gives the same match in time linear in the
 * text it reads and memory linear in the pattern: a run of millions of letters or spaces is matched
 * as fast as short ones, in no more memory. A compiled regex is immutable: it may be used from
 * several threads at once. */
#ifndef MW_REGEX_H
#define MW_REGEX_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

typedef struct mw_regex mw_regex;

/* Compiles pat[0..n) (UTF-8). On failure *out is NULL and the status is MW_ERR_FORMAT, with a
 * message naming what (for example "tokenizer.json") and the unsupported construct; or
 * MW_ERR_NOMEM. */
mw_status mw_regex_compile(mw_regex **out, const char *pat, size_t n, const char *what);
void mw_regex_free(mw_regex *re); /* NULL is a no-op */

/* The first match in s[from..n) that starts at a character boundary at or after from: 1 and
 * [*ms, *me) (non-empty), or 0 when there is none; -1 when out of memory (a few bytes per
 * instruction of the pattern).
 * bmp: the MW_UC_* class of every code point below 0x10000, or NULL (a binary search). */
int mw_regex_find(const mw_regex *re, const uint8_t *bmp, const unsigned char *s, size_t n,
                  size_t from, size_t *ms, size_t *me);
/* The same; *need (may be NULL) gets how much of s decided the answer: the answer is the same
 * for every text that starts with s[0..*need) (*need <= n), or SIZE_MAX when it is not (the
 * matcher looked at the end of s, or found no match). Streaming cuts a text where *need <= n. */
int mw_regex_find_need(const mw_regex *re, const uint8_t *bmp, const unsigned char *s, size_t n,
                       size_t from, size_t *ms, size_t *me, size_t *need);

#endif
