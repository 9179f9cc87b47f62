/* The attention's input product and norm, backward, in row groups (src/model/qkvg.c): a recomputed
 * block's last op (GPT-2's and Llama's). From d(q|k|v), which the attention's backward left over
 * q|k|v, R rows at a time: the product's weight (and bias) gradients, the norm's input gradient
 * through the product, then the norm's backward into the residual's gradient. Only one group's
 * d(norm output) is alive, and under --act-compress the norm's output and input, stored
 * compressed up to this op, are dequantised one group at a time (mw_graph_act_rows: the op's kind
 * has MW_KF_OWNDQ) instead of into copies of all their rows.
 *
 * The same bits as the ops that run it over all rows at once (GPT-2's ln1+qkv bwd, Llama's
 * norm+qkv bwd): the input gradient and the norm's backward are row by row, and every sum over
 * rows (the weight's, the bias's, the norm's parameters') is one chain over the rows in order,
 * which the groups continue in order (gemm.h). fp32 only. */
#ifndef MW_QKVG_H
#define MW_QKVG_H
#include <stddef.h>

#include "../core/status.h"
#include "../graph/graph.h"

typedef struct mw_qkvg {
    mw_model *m;
    int op, jln, jx;    /* the op, and its accesses of the norm's output and of its input (read
                           through mw_graph_act_rows) */
    int N, C, OC, R;    /* rows, width, the product's width (q|k|v's), rows per group (the last
                           group may be shorter; a multiple of mw_graph_act_round_rows_unit(C)) */
    int rms;            /* RMSNorm (no mean, no bias) or LayerNorm */
    const float *w, *nw;                 /* the product's weight (OC, C), the norm's (C) */
    float *gw, *gb, *gnw, *gnb;          /* their gradients (+=); gb, gnb NULL without biases */
    const float *mean, *rstd;            /* the norm's statistics (N each; mean NULL under rms) */
    const mw_gemm_ws *ws;
    float *buf; /* mw_qkvg_ws_floats(R, C) floats */
} mw_qkvg;

/* The workspace of one group of R rows: d(norm output), and (deq: a block's values may be stored
 * compressed) the norm's output and input dequantised. */
size_t mw_qkvg_ws_floats(int R, int C, int deq);

/* dres (N, C) += the norm's input gradient, from dqkv (N, OC); the gradients += . MW_OK, or the
 * failure of a read (mw_graph_act_rows). */
mw_status mw_qkvg_backward(const mw_qkvg *g, float *dres, const float *dqkv);
/* The same for rows [r0, r0 + rows) alone (rows <= R; r0 on a group's start, as the groups above
 * cut them), from dqkv's rows (rows x OC): called for the groups in order, the same bits. */
mw_status mw_qkvg_rows(const mw_qkvg *g, float *dres, const float *dqkv, int r0, int rows);

/* The attention's backward streamed into this one (ops.h, mw_attention_backward_stream: KV = H,
 * no rotation), q|k|v read through op g->op's access jqkv (compressed or not: mw_graph_act_cols),
 * each group of g->R rows of dqkv handed on as soon as it is complete: neither q|k|v's nor dqkv's
 * every row in fp32 at once. scratch holds mw_qkvg_stream_floats(T, H, hs, R, nthreads); dout
 * (B,T,H hs), D and lse (B,H,T) as the in-place kernel's. MW_OK or a read's failure. */
size_t mw_qkvg_stream_floats(int T, int H, int hs, int R, int nthreads);
mw_status mw_qkvg_attention(const mw_qkvg *g, float *dres, int jqkv, float *scratch, int nthreads, const float *dout,
                            const float *D, const float *lse, int B, int T, int H, int hs);
#endif
