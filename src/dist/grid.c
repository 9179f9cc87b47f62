/* The rank grid of a parallel layout (memwall.h, mw_grid): which rank is which (t, p, d) and the
 * communicators of its tensor-parallel, pipeline and data-parallel groups, split from the world's.
 * Megatron-LM's order (initialize_model_parallel): t fastest, then d, then p, so that a
 * tensor-parallel group (the most traffic) is consecutive ranks, on one machine where it can be. */
#include <string.h>

#include "../core/status.h"
#include "memwall.h"

void mw_grid_coords(int rank, int tp, int pp, int dp, int *t, int *p, int *d) {
    (void)pp;
    *t = rank % tp;
    *d = rank / tp % dp;
    *p = rank / (tp * dp);
}

int mw_grid_rank(int t, int p, int d, int tp, int pp, int dp) {
    (void)pp;
    return t + tp * (d + dp * p);
}

/* One group: the ranks that share color, ranked by key; n ranks in it. */
static mw_status group(mw_comm *world, int n, int color, int key, mw_comm **out) {
    *out = NULL;
    if (n == 1) return MW_OK;
    if (n == world->size) {
        *out = world;
        return MW_OK;
    }
    if (!world->split) return mw_fail(MW_ERR_ARG, "this communicator gives no sub-groups: a layout of more than one group");
    return world->split(world, color, key, out);
}

mw_status mw_grid_create(mw_comm *world, int tp, int pp, int dp, mw_grid *g) {
    memset(g, 0, sizeof *g);
    if (tp < 1 || pp < 1 || dp < 1 || (long long)tp * pp * dp != world->size)
        return mw_fail(MW_ERR_ARG, "a layout of --tp %d x --pp %d x %d replicas is %lld ranks, the run has %d", tp, pp, dp,
                       (long long)tp * pp * dp, world->size);
    g->tp = tp, g->pp = pp, g->dp = dp;
    mw_grid_coords(world->rank, tp, pp, dp, &g->t, &g->p, &g->d);
    /* every rank splits the same groups in the same order (split is collective over world) */
    mw_status st = group(world, tp, g->p * dp + g->d, g->t, &g->tp_comm);
    if (st == MW_OK) st = group(world, pp, g->d * tp + g->t, g->p, &g->pp_comm);
    if (st == MW_OK) st = group(world, dp, g->p * tp + g->t, g->d, &g->dp_comm);
    if (st != MW_OK) {
        g->tp_comm = g->tp_comm == world ? NULL : g->tp_comm; /* the world's is not ours to free */
        mw_grid_destroy(g);
        memset(g, 0, sizeof *g);
    }
    return st;
}

void mw_grid_destroy(mw_grid *g) {
    if (!g) return;
    mw_comm *c[3] = {g->tp_comm, g->pp_comm, g->dp_comm};
    for (int i = 0; i < 3; i++)
        if (c[i] && c[i]->destroy) c[i]->destroy(c[i]); /* the world's destroy frees nothing */
    g->tp_comm = g->pp_comm = g->dp_comm = NULL;
}
