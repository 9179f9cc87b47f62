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

/* Maps capacity bytes and touches every page. MW_ERR_BUDGET (nothing mapped) when capacity is
 * more than mw_mem_available; MW_ERR_NOMEM when the OS refuses the mapping. */
mw_status mw_arena_init(mw_arena *a, uint64_t capacity);
/* The bytes this process can still bring into memory: the least of /proc/meminfo's MemAvailable
 * and, for its cgroup and each ancestor (v2 memory.max - memory.current, v1
 * memory.limit_in_bytes - memory.usage_in_bytes), the room left; UINT64_MAX when none is known.
 * why (n bytes) names the figures. Testing hook: MEMWALL_AVAILABLE_OVERRIDE=SIZE in the
 * environment replaces them all (MW_ERR_ARG when it is not a size). */
mw_status mw_mem_available(uint64_t *bytes, char *why, size_t n);
/* The same, reading /proc and /sys under the folder fs ("" for the machine's own; for tests). */
mw_status mw_mem_available_in(const char *fs, uint64_t *bytes, char *why, size_t n);
/* Unmaps; a released or zeroed arena may be released again. */
void mw_arena_release(mw_arena *a);

/* Formats bytes as "1.23 GiB" into buf. Returns buf. */
char *mw_fmt_bytes(uint64_t bytes, char *buf, size_t n);
/* Parses "123", "64KiB", "512MiB", "2GiB", "1.5GB" (KB/MB/GB are decimal). 0 on error. */
int mw_parse_size(const char *s, uint64_t *out);
#endif
