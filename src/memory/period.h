/* A pipeline stage's placement, periodic by construction (issue 32 item 6; docs/cluster.md
 * "Speed").
 *
 * In a pipeline stage's plan every buffer made by a micro-batch's ops carries that micro-batch
 * (mw_pbuf.mb). In the schedule's steady state micro-batch j + unit makes the same buffers as j,
 * each alive exactly D ops later. mw_period_place finds that run of micro-batches from the buffers
 * themselves (nothing is assumed: a micro-batch belongs to it only when every one of its buffers is
 * the shifted copy of its predecessor's), takes the smallest R (a multiple of unit) such that no
 * buffer overlaps its own copy R micro-batches on, and places buffer k of micro-batches j, j + R,
 * j + 2R ... of the run as one entity (mw_planner_place_groups: they share one offset). Everything
 * else is placed as itself, by the same best fit.
 *
 * That placement depends only on which entities are alive together, and in the steady run that
 * repeats with period R: so it is computed on a smaller problem, the stage's plan with K (a
 * multiple of R) micro-batches of the run's middle taken out and the ops after them moved K/unit
 * periods earlier, and every buffer of the taken-out micro-batches gets its entity's offset. The
 * smaller problem has the same entities in the same order and the same pairs of them alive
 * together (the conditions are checked on the buffers; when one fails, the whole problem is placed
 * instead), hence the same offsets and the same peak: tests/test_core.c compares the two on many
 * small layouts. Planning a stage of M micro-batches then costs the walk (linear in M) and the
 * placement of a problem of a few times unit + R micro-batches, whatever M. */
#ifndef MW_PERIOD_H
#define MW_PERIOD_H
#include "planner.h"

/* Places p (offsets and peak) as above; p->b[i].mb marks the micro-batches. MW_ERR_NOMEM when out
 * of memory. */
mw_status mw_period_place(mw_planner *p, int unit);

/* Tests: 0 places the whole grouped problem (the reference the folded one must equal), 1 (the
 * default) folds when it can. Returns the previous setting. Not thread-safe: set it before planning. */
int mw_period_set_fold(int on);
/* Tests: how many placements were folded since the process started. */
long mw_period_folds(void);
#endif
