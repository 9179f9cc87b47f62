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

/* Whether p, the walk of a 1F1B stage's schedule cut to nmb micro-batches (p->b[i].mb marks them)
 * of the M it runs, is the smaller problem mw_period_place folds the whole problem of M into:
 * then placing p (mw_period_place: its run is too short to fold again) gives the whole problem's
 * peak, and every buffer of p its offset there (the buffers of the micro-batches taken out: their
 * entity's), so a plan walks and places p alone, whatever M (docs/cluster.md "Speed").
 *
 * Checked on p: its steady run (S0..S1 as mw_period_place finds it) is long enough to show the
 * period R and the distance Dm; the whole problem's run, which ends as far before its last
 * micro-batch as p's does, folds K (a multiple of R) out with nmb == M - K; and the fold's
 * conditions hold at p's fold point with nothing taken out, which are the whole problem's own
 * (every bound they compare moves by the same K periods). What p cannot show is that the whole
 * walk is p with K periods put in: the schedule builds every steady micro-batch alike
 * (src/graph/layout.c), and tests/test_core.c compares the two on many layouts. Returns 1 when so;
 * 0 when not, with *want the micro-batch count to walk instead, 0 to walk all M (too few to take
 * any period out) or -1 to walk all M because the fold's conditions fail. */
int mw_period_cut(const mw_planner *p, int unit, int nmb, int M, int *want);
/* full's placement (offsets, ord, peak) from cut's (placed), cut being the walk of nmb micro-batches
 * that mw_period_cut took for full's M: every buffer of full gets its counterpart's offset in cut
 * (a micro-batch taken out: its entity's). Returns 1; 0 (full's offsets unspecified) when full's
 * buffers are not cut's with K = M - nmb periods put in: the same sizes, names and categories, at
 * the ops the fold moves them to. */
int mw_period_expand(const mw_planner *cut, int unit, int nmb, mw_planner *full, int M);
/* Tests: how many cut walks mw_period_cut accepted since the process started. */
long mw_period_cuts(void);

/* Tests: 0 places the whole grouped problem (the reference the folded one must equal), 1 (the
 * default) folds when it can. Returns the previous setting. Not thread-safe: set it before planning. */
int mw_period_set_fold(int on);
/* Tests: how many placements were folded since the process started. */
long mw_period_folds(void);
#endif
