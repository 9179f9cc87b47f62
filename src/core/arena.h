/* A budgeted arena with per-category accounting: the allocator and, run dry, the estimator.
 *
 * Allocation returns offsets. A measure arena has no memory behind it and only counts; a real
 * arena maps exactly the capacity it is given (which the measure run computed) and refuses to go
 * beyond it. Pages are mapped lazily by the OS, so RSS follows what is touched. */
#ifndef MW_ARENA_H
#define MW_ARENA_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

#define MW_ALIGN 64

typedef struct mw_arena {
    char *base;      /* NULL in measure mode */
    uint64_t capacity;
    uint64_t used, peak;
    uint64_t cat_used[MW_CAT_COUNT], cat_peak[MW_CAT_COUNT];
} mw_arena;

/* A measure arena: counts, no memory. */
void mw_arena_init_measure(mw_arena *a);
/* Maps capacity bytes. MW_ERR_NOMEM when the OS refuses. */
mw_status mw_arena_init(mw_arena *a, uint64_t capacity);
void mw_arena_release(mw_arena *a);
/* Reserves bytes (rounded up to MW_ALIGN) for category c and stores the offset in *off.
 * MW_ERR_BUDGET when a real arena would exceed its capacity. */
mw_status mw_arena_alloc(mw_arena *a, uint64_t bytes, mw_category c, uint64_t *off);
/* Pointer of an offset in a real arena. */
static inline void *mw_arena_ptr(const mw_arena *a, uint64_t off) { return a->base + off; }

/* Formats bytes as "1.23 GiB" into buf. Returns buf. */
char *mw_fmt_bytes(uint64_t bytes, char *buf, size_t n);
/* Parses "123", "64KiB", "512MiB", "2GiB", "1.5GB" (KB/MB/GB are decimal). 0 on error. */
int mw_parse_size(const char *s, uint64_t *out);
#endif
