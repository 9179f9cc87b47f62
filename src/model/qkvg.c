/* The attention's input product and norm, backward, in row groups (qkvg.h). */
#include "qkvg.h"

#include "../kernels/cpu/ops.h"

size_t mw_qkvg_ws_floats(int R, int C, int deq) { return (deq ? 3 : 1) * (size_t)R * (size_t)C; }

mw_status mw_qkvg_backward(const mw_qkvg *g, float *dres, const float *dqkv) {
    const size_t R = (size_t)(g->R < g->N ? g->R : g->N), C = (size_t)g->C; /* the workspace's rows */
    float *dln = g->buf, *lnb = dln + R * C, *xb = lnb + R * C;
    for (int r0 = 0; r0 < g->N; r0 += g->R) {
        const int rows = g->N - r0 < g->R ? g->N - r0 : g->R;
        const float *ln = mw_graph_act_rows(g->m, g->op, g->jln, (size_t)r0, (size_t)rows, C, lnb);
        const float *x = mw_graph_act_rows(g->m, g->op, g->jx, (size_t)r0, (size_t)rows, C, xb);
        if (!ln || !x) return MW_ERR_ARG;
        float *dr = dres + (size_t)r0 * C;
        mw_matmul_backward(dln, g->gw, g->gb, dqkv + (size_t)r0 * g->OC, ln, g->w, rows, g->C, g->OC, 0, g->ws);
        if (g->rms)
            mw_rmsnorm_backward_acc(dr, g->gnw, dln, x, g->nw, g->rstd + r0, rows, g->C);
        else
            mw_layernorm_backward_acc(dr, g->gnw, g->gnb, dln, x, g->nw, g->mean + r0, g->rstd + r0, rows, g->C);
    }
    return MW_OK;
}
