/* Internal: the character classes of GPT-2's pre-tokenizer pattern, from the generated table in
 * unicode_tables.c (scripts/gen_unicode_tables.py). */
#ifndef MW_UNICODE_TABLES_H
#define MW_UNICODE_TABLES_H
#include <stdint.h>

/* MW_UC_OTHER is every code point in no range (and, in the tokenizer, every invalid UTF-8 byte). */
enum { MW_UC_OTHER = 0, MW_UC_LETTER = 1, MW_UC_NUMBER = 2, MW_UC_SPACE = 3 };

typedef struct mw_uc_range {
    uint32_t lo, hi; /* inclusive */
    uint32_t cls;    /* MW_UC_LETTER, MW_UC_NUMBER or MW_UC_SPACE */
} mw_uc_range;

extern const mw_uc_range mw_uc_ranges[]; /* sorted, disjoint */
extern const int mw_uc_nranges;
extern const char mw_unicode_version[]; /* of the Python unicodedata that generated the table */
/* The class of each ASCII character (defined in tokenizer.c; regex.c shares it) */
extern const uint8_t mw_uc_ascii[128];

/* The class of code point cp: a binary search of the ranges. */
static inline int mw_uc_class(uint32_t cp) {
    int lo = 0, hi = mw_uc_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        if (cp < mw_uc_ranges[mid].lo) hi = mid - 1;
        else if (cp > mw_uc_ranges[mid].hi) lo = mid + 1;
        else return (int)mw_uc_ranges[mid].cls;
    }
    return MW_UC_OTHER;
}
#endif
