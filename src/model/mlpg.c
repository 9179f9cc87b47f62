/* GPT-2's MLP in row groups (mlpg.h). */
#include "mlpg.h"

#include <string.h>

size_t mw_mlpg_ws_floats(int R, int C, size_t qbytes) {
    return (size_t)R * (11 * (size_t)C + 2) + (qbytes + sizeof(float) - 1) / sizeof(float);
}

/* the group's pieces inside ws */
typedef struct {
    float *ln2, *mean, *rstd, *fch, *gelu, *res2, *dln2;
} pieces;
static pieces cut(const mw_mlpg *g) {
    const size_t R = (size_t)g->R, C = (size_t)g->C;
    pieces p;
    p.ln2 = g->ws, p.mean = p.ln2 + R * C, p.rstd = p.mean + R, p.fch = p.rstd + R;
    p.gelu = p.fch + 4 * R * C, p.res2 = p.gelu + 4 * R * C, p.dln2 = p.res2 + R * C;
    return p;
}

void mw_mlpg_forward(const mw_mlpg *g, float *out, const float *res2) {
    const int C = g->C, W4 = 4 * C;
    const pieces p = cut(g);
    for (int r0 = 0; r0 < g->N; r0 += g->R) {
        const int rows = g->N - r0 < g->R ? g->N - r0 : g->R;
        const size_t o = (size_t)r0 * C;
        mw_layernorm_forward_eps(p.ln2, 0, p.mean, p.rstd, res2 + o, g->ln2w, g->ln2b, rows, C, g->eps);
        mw_matmul_forward(p.fch, p.ln2, g->fcw, g->fcb, rows, C, W4, 0, g->gw);
        mw_gelu_forward(p.gelu, p.fch, (long)rows * W4);
        memcpy(out + o, res2 + o, sizeof(float) * (size_t)rows * C);
        mw_matmul_forward(out + o, p.gelu, g->fcpw, g->fcpb, rows, W4, C, 1, g->gw);
    }
}

static mw_status round_rows(const mw_mlpg *g, int v, float *x, int r0, int rows, int width) {
    char *scratch = (char *)(cut(g).dln2 + (size_t)g->R * g->C);
    return g->round ? g->round(g->ctx, v, x, (size_t)r0, (size_t)rows, (size_t)width, scratch) : MW_OK;
}

mw_status mw_mlpg_backward(const mw_mlpg *g, float *dres, const float *res2) {
    const int C = g->C, W4 = 4 * C;
    const pieces p = cut(g);
    for (int r0 = 0; r0 < g->N; r0 += g->R) {
        const int rows = g->N - r0 < g->R ? g->N - r0 : g->R;
        const size_t o = (size_t)r0 * C;
        float *dr = dres + o;
        /* the forward again from the exact res2, as a recomputation replays it */
        mw_layernorm_forward_eps(p.ln2, 0, p.mean, p.rstd, res2 + o, g->ln2w, g->ln2b, rows, C, g->eps);
        mw_matmul_forward(p.fch, p.ln2, g->fcw, g->fcb, rows, C, W4, 0, g->gw);
        mw_gelu_forward(p.gelu, p.fch, (long)rows * W4);
        /* what the backward reads, stored as a kept value is (--act-compress: the round trip) */
        memcpy(p.res2, res2 + o, sizeof(float) * (size_t)rows * C);
        MW_TRY(round_rows(g, MW_MLPG_FCH, p.fch, r0, rows, W4));
        MW_TRY(round_rows(g, MW_MLPG_GELU, p.gelu, r0, rows, W4));
        MW_TRY(round_rows(g, MW_MLPG_LN2, p.ln2, r0, rows, C));
        MW_TRY(round_rows(g, MW_MLPG_RES2, p.res2, r0, rows, C));
        /* fc2: its weight's gradient from gelu, then d(gelu) over gelu, then d(fch) over fch */
        mw_matmul_backward(NULL, g->gfcpw, g->gfcpb, dr, p.gelu, g->fcpw, rows, W4, C, 0, g->gw);
        mw_matmul_backward_dinp(p.gelu, dr, g->fcpw, rows, W4, C, g->gw);
        mw_gelu_backward(p.fch, p.gelu, p.fch, (long)rows * W4);
        /* fc, then the norm into the residual's gradient */
        mw_matmul_backward(p.dln2, g->gfcw, g->gfcb, p.fch, p.ln2, g->fcw, rows, C, W4, 0, g->gw);
        mw_layernorm_backward_acc(dr, g->gln2w, g->gln2b, p.dln2, p.res2, g->ln2w, p.mean, p.rstd, rows, C);
    }
    return MW_OK;
}
