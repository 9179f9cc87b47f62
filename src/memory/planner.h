/* The memory planner: buffers with lifetimes over the ops of a step, placed in one arena.
 *
 * Each buffer lives from op `first` to op `last` (inclusive). Placement is greedy by size, largest
 * first, each at the best-fitting gap among the already placed buffers whose lifetimes overlap
 * its own, so buffers that are never alive together share memory. The same placement serves the
 * estimate (run dry) and the trainer (which binds its pointers to the offsets). */
#ifndef MW_PLANNER_H
#define MW_PLANNER_H
#include <stdint.h>

#include "memwall.h"

typedef struct mw_pbuf {
    const char *name;       /* static string, e.g. "qkv" */
    int layer;              /* the layer it belongs to, or -1 */
    uint64_t bytes, offset; /* bytes rounded up to 64 */
    int first, last, cat;
    int tag; /* the caller's mark (gpt2.c: 1 for a recomputed instance) */
    int mb;  /* the pipeline micro-batch whose op made it, or -1 (mw_planner_add's default) */
} mw_pbuf;

typedef struct mw_planner {
    mw_pbuf *b;
    int n, cap, nops;
    uint64_t peak; /* after place(): the arena size */
    int unit;      /* a pipeline stage's plan: its schedule repeats every `unit` micro-batches (1 for
                    * 1F1B, P for the interleaved schedule) and place() groups the steady state's
                    * buffers (src/memory/period.h); 0 (init's): plain best fit */
    int *ord;      /* after place(): each buffer's place in the placement order (its entity's) */
} mw_planner;

void mw_planner_init(mw_planner *p, int nops);
void mw_planner_free(mw_planner *p);
/* Adds a buffer alive in ops [first, last], 0 <= first <= last < nops (else MW_ERR_ARG). */
mw_status mw_planner_add(mw_planner *p, const char *name, int layer, uint64_t bytes, mw_category cat,
                         int first, int last);
/* Assigns every offset; p->peak becomes the arena size. With p->unit > 0, mw_period_place. */
mw_status mw_planner_place(mw_planner *p);
/* Best fit over entities: buffer i belongs to the entity led by lead[i] (lead[i] <= i, and
 * lead[lead[i]] == lead[i]); next[i] is the entity's next member after i, or -1. An entity is
 * placed as one buffer alive at every op of its members (they must not overlap each other): in
 * the leads' order (largest first, then earlier first op, then index), at the best-fitting hole
 * among the placed entities alive at some op of one of its members; every member gets its offset.
 * lead and next NULL: every buffer its own entity (mw_planner_place's rule). */
mw_status mw_planner_place_groups(mw_planner *p, const int *lead, const int *next);
/* p's placement derived from ref's (placed), when that is exact: p's buffers are ref's but for
 * some alive at every op (a ZeRO rank's shard-sized states) whose sizes differ, each of them was
 * placed above everything placed before it (so every buffer placed after it lies wholly below or
 * above it, and the best fit's holes above it move with its top), and no other buffer's size lies
 * between its two sizes (the order is the same). Then every buffer above one of them moves by its
 * change. Returns 1 with p's offsets, ord and peak set; 0 (p unchanged) when not so. */
int mw_planner_place_like(mw_planner *p, const mw_planner *ref);
/* Tests: how many placements mw_planner_place_like derived since the process started. */
long mw_planner_likes(void);
/* 1 when no two buffers alive at the same op overlap and all lie below peak (for tests; zero-byte
 * buffers overlap nothing); 0 when some do, or out of memory. O(n log n). */
int mw_planner_check(const mw_planner *p);
/* Live bytes per category during op. */
void mw_planner_live(const mw_planner *p, int op, uint64_t live[MW_CAT_COUNT]);
/* Live bytes per category for every op at once: live[op * MW_CAT_COUNT + cat], O(buffers + ops). */
void mw_planner_live_all(const mw_planner *p, uint64_t *live);
#endif
