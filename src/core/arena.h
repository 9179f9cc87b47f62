/* The arena: one mapping of exactly the size the memory plan computed (src/memory/planner.c
 * places every buffer inside it), every page touched when it is mapped, so the process's RSS is
 * the plan plus a fixed overhead from the start. Also the byte-size helpers. */
#ifndef MW_ARENA_H
#define MW_ARENA_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

#define MW_ALIGN 64

typedef struct mw_arena {
    char *base;
    uint64_t capacity;
} mw_arena;

/* Maps capacity bytes and touches every page. MW_ERR_NOMEM when the OS refuses. */
mw_status mw_arena_init(mw_arena *a, uint64_t capacity);
/* Unmaps; a released or zeroed arena may be released again. */
void mw_arena_release(mw_arena *a);

/* Formats bytes as "1.23 GiB" into buf. Returns buf. */
char *mw_fmt_bytes(uint64_t bytes, char *buf, size_t n);
/* Parses "123", "64KiB", "512MiB", "2GiB", "1.5GB" (KB/MB/GB are decimal). 0 on error. */
int mw_parse_size(const char *s, uint64_t *out);
#endif
