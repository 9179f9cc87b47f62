/* The attention's input product and norm, backward, in row groups (qkvg.h). */
#include "qkvg.h"

#include "../kernels/cpu/ops.h"

size_t mw_qkvg_ws_floats(int R, int C, int deq) { return (deq ? 3 : 1) * (size_t)R * (size_t)C; }

mw_status mw_qkvg_rows(const mw_qkvg *g, float *dres, const float *dqkv, int r0, int rows) {
    const size_t R = (size_t)(g->R < g->N ? g->R : g->N), C = (size_t)g->C; /* the workspace's rows */
    float *dln = g->buf, *lnb = dln + R * C, *xb = lnb + R * C;
    const float *ln = mw_graph_act_rows(g->m, g->op, g->jln, (size_t)r0, (size_t)rows, C, lnb);
    const float *x = mw_graph_act_rows(g->m, g->op, g->jx, (size_t)r0, (size_t)rows, C, xb);
    if (!ln || !x) return MW_ERR_ARG;
    float *dr = dres + (size_t)r0 * C;
    mw_matmul_backward(dln, g->gw, g->gb, dqkv, ln, g->w, rows, g->C, g->OC, 0, g->ws);
    if (g->rms)
        mw_rmsnorm_backward_acc(dr, g->gnw, dln, x, g->nw, g->rstd + r0, rows, g->C);
    else
        mw_layernorm_backward_acc(dr, g->gnw, g->gnb, dln, x, g->nw, g->mean + r0, g->rstd + r0, rows, g->C);
    return MW_OK;
}

mw_status mw_qkvg_backward(const mw_qkvg *g, float *dres, const float *dqkv) {
    for (int r0 = 0; r0 < g->N; r0 += g->R)
        MW_TRY(mw_qkvg_rows(g, dres, dqkv + (size_t)r0 * g->OC, r0, g->N - r0 < g->R ? g->N - r0 : g->R));
    return MW_OK;
}

typedef struct {
    const mw_qkvg *g;
    float *dres;
    int jqkv;
    mw_status st;
} stream_ctx;
static int stream_read(void *ctx, long r0, int rows, int c0, int c1, float *dst, long ld) {
    stream_ctx *s = ctx;
    s->st = mw_graph_act_cols(s->g->m, s->g->op, s->jqkv, (size_t)r0, (size_t)rows, (size_t)s->g->OC, (size_t)c0,
                              (size_t)c1, dst, (size_t)ld);
    return s->st != MW_OK;
}
static int stream_done(void *ctx, long r0, int rows, const float *dqkv) {
    stream_ctx *s = ctx;
    s->st = mw_qkvg_rows(s->g, s->dres, dqkv, (int)r0, rows);
    return s->st != MW_OK;
}

size_t mw_qkvg_stream_floats(int T, int H, int hs, int R, int nthreads) {
    return mw_attention_stream_floats(T, H, hs, R, nthreads);
}

mw_status mw_qkvg_attention(const mw_qkvg *g, float *dres, int jqkv, float *scratch, int nthreads, const float *dout,
                            const float *D, const float *lse, int B, int T, int H, int hs) {
    stream_ctx sc = {g, dres, jqkv, MW_OK};
    const mw_att_stream s = {stream_read, stream_done, &sc, g->R < g->N ? g->R : g->N};
    return mw_attention_backward_stream(&s, scratch, nthreads, dout, D, lse, B, T, H, hs) ? sc.st : MW_OK;
}
