/* A block's MLP in row groups (mlpg.h). */
#include "mlpg.h"

#include <string.h>

/* the first product's values of a group: GPT-2's fch (F), Llama's gate then up (F each) */
static size_t first_floats(int F, int glu) { return (glu ? 2 : 1) * (size_t)F; }

size_t mw_mlpg_ws_floats(int R, int C, int F, int glu, size_t qbytes) {
    return (size_t)R * (3 * (size_t)C + 2 + first_floats(F, glu) + (size_t)F) + (qbytes + sizeof(float) - 1) / sizeof(float);
}

/* the group's pieces inside ws */
typedef struct {
    float *ln2, *mean, *rstd, *fch, *act, *res2, *dln2;
} pieces;
static pieces cut(const mw_mlpg *g) {
    const size_t R = (size_t)g->R, C = (size_t)g->C;
    pieces p;
    p.ln2 = g->ws, p.mean = p.ln2 + R * C, p.rstd = p.mean + R, p.fch = p.rstd + R;
    p.act = p.fch + R * first_floats(g->F, g->glu), p.res2 = p.act + R * (size_t)g->F, p.dln2 = p.res2 + R * C;
    return p;
}

/* The rows of the group from r0: how many; and the group's forward values (the norm, the first
 * product(s), the activation) from its rows of res2, as the ungrouped ops compute them. */
static int group_rows(const mw_mlpg *g, int r0) { return g->N - r0 < g->R ? g->N - r0 : g->R; }
static void group_forward(const mw_mlpg *g, const pieces *p, const float *res2, int rows) {
    const int C = g->C, F = g->F;
    if (g->glu) {
        float *up = p->fch + (size_t)rows * F;
        mw_rmsnorm_forward_x(p->ln2, 0, p->rstd, res2, g->ln2w, rows, C, g->eps);
        mw_matmul_forward(p->fch, p->ln2, g->fcw, NULL, rows, C, F, 0, g->gw);
        mw_matmul_forward(up, p->ln2, g->upw, NULL, rows, C, F, 0, g->gw);
        mw_swiglu_forward(p->act, p->fch, up, (long)rows * F);
        return;
    }
    mw_layernorm_forward_eps(p->ln2, 0, p->mean, p->rstd, res2, g->ln2w, g->ln2b, rows, C, g->eps);
    mw_matmul_forward(p->fch, p->ln2, g->fcw, g->fcb, rows, C, F, 0, g->gw);
    mw_gelu_forward(p->act, p->fch, (long)rows * F);
}

void mw_mlpg_forward(const mw_mlpg *g, float *out, const float *res2) {
    const int C = g->C;
    const pieces p = cut(g);
    for (int r0 = 0; r0 < g->N; r0 += g->R) {
        const int rows = group_rows(g, r0);
        const size_t o = (size_t)r0 * C;
        group_forward(g, &p, res2 + o, rows);
        memcpy(out + o, res2 + o, sizeof(float) * (size_t)rows * C);
        mw_matmul_forward(out + o, p.act, g->fcpw, g->fcpb, rows, g->F, C, 1, g->gw);
    }
}

static mw_status round_rows(const mw_mlpg *g, int v, float *x, int r0, int rows, int width) {
    char *scratch = (char *)(cut(g).dln2 + (size_t)g->R * g->C);
    return g->round ? g->round(g->ctx, v, x, (size_t)r0, (size_t)rows, (size_t)width, scratch) : MW_OK;
}

mw_status mw_mlpg_backward(const mw_mlpg *g, float *dres, const float *res2) {
    const int C = g->C, F = g->F;
    const pieces p = cut(g);
    for (int r0 = 0; r0 < g->N; r0 += g->R) {
        const int rows = group_rows(g, r0);
        const size_t o = (size_t)r0 * C;
        float *dr = dres + o, *up = p.fch + (size_t)rows * F;
        /* the forward again from the exact res2, as a recomputation replays it */
        group_forward(g, &p, res2 + o, rows);
        /* what the backward reads, stored as a kept value is (--act-compress: the round trip) */
        memcpy(p.res2, res2 + o, sizeof(float) * (size_t)rows * C);
        MW_TRY(round_rows(g, MW_MLPG_FCH, p.fch, r0, rows, F));
        if (g->glu) MW_TRY(round_rows(g, MW_MLPG_FCH, up, g->N + r0, rows, F)); /* gate|up's up half */
        MW_TRY(round_rows(g, MW_MLPG_GELU, p.act, r0, rows, F));
        MW_TRY(round_rows(g, MW_MLPG_LN2, p.ln2, r0, rows, C));
        MW_TRY(round_rows(g, MW_MLPG_RES2, p.res2, r0, rows, C));
        /* the last product: its weight's gradient from the activation, then d(activation) over it */
        mw_matmul_backward(NULL, g->gfcpw, g->gfcpb, dr, p.act, g->fcpw, rows, F, C, 0, g->gw);
        mw_matmul_backward_dinp(p.act, dr, g->fcpw, rows, F, C, g->gw);
        if (g->glu) { /* d(gate), d(up) over gate, up; then the two products into d(ln2), and the norm */
            mw_swiglu_backward(p.fch, up, p.act, p.fch, up, (long)rows * F);
            mw_matmul_backward(p.dln2, g->gfcw, NULL, p.fch, p.ln2, g->fcw, rows, C, F, 0, g->gw);
            mw_matmul_backward(p.dln2, g->gupw, NULL, up, p.ln2, g->upw, rows, C, F, 1, g->gw);
            mw_rmsnorm_backward_acc(dr, g->gln2w, p.dln2, p.res2, g->ln2w, p.rstd, rows, C);
            continue;
        }
        /* d(fch) over fch, fc, then the norm into the residual's gradient */
        mw_gelu_backward(p.fch, p.act, p.fch, (long)rows * F);
        mw_matmul_backward(p.dln2, g->gfcw, g->gfcb, p.fch, p.ln2, g->fcw, rows, C, F, 0, g->gw);
        mw_layernorm_backward_acc(dr, g->gln2w, g->gln2b, p.dln2, p.res2, g->ln2w, p.mean, p.rstd, rows, C);
    }
    return MW_OK;
}
