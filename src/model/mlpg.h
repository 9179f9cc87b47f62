/* GPT-2's MLP in row groups (src/model/mlpg.c): the block's second half, LayerNorm, fc, GELU and
 * fc2, forward and backward, over R rows at a time, so that its 4C-wide values (fch, gelu and
 * their gradients) live for one group instead of every row (docs/memory.md, "Row groups").
 *
 * The same bits as the ops that run it over all rows at once (K_LN2FC, K_GELU, K_FCPROJ and their
 * backward): rows are independent in the norm, the products' outputs and inputs' gradients and
 * GELU, and every sum over rows (the weights' and biases' gradients, the norm's) is one chain over
 * the rows in order, which the groups continue in order (gemm.h: a product over K rows split at
 * K1, beta 1 on the second call, is the same bits as one call). fp32 only. */
#ifndef MW_MLPG_H
#define MW_MLPG_H
#include <stddef.h>

#include "../core/status.h"
#include "../kernels/cpu/ops.h"

typedef struct mw_mlpg {
    int N, C, R;               /* rows, width, rows per group (the last group may be shorter) */
    float eps;                 /* the norm's epsilon */
    const float *ln2w, *ln2b, *fcw, *fcb, *fcpw, *fcpb; /* (C), (C), (4C,C), (4C), (C,4C), (C) */
    float *gln2w, *gln2b, *gfcw, *gfcb, *gfcpw, *gfcpb; /* their gradients (+=) */
    const mw_gemm_ws *gw;
    float *ws; /* mw_mlpg_ws_floats(R, C, qbytes) floats */
    /* the stored activations' round trip of rows [r0, r0 + rows) of value v (its lossy form, as a
     * kept value would be read back: GPT-2's lslot index), NULL or returning 0 when nothing is
     * compressed; MW_OK or the quantiser's refusal */
    mw_status (*round)(void *ctx, int v, float *x, size_t r0, size_t rows, size_t width, char *scratch);
    void *ctx;
    size_t qbytes; /* the round trip's scratch bytes (0 without round) */
} mw_mlpg;

/* GPT-2's value indices the round trip is asked for */
enum { MW_MLPG_RES2 = 6, MW_MLPG_LN2 = 7, MW_MLPG_FCH = 9, MW_MLPG_GELU = 10 };

/* The workspace of one group of R rows: ln2, stats, fch, gelu (or its gradient), the lossy copy
 * of res2, d(ln2), then the round trip's scratch of qbytes. */
size_t mw_mlpg_ws_floats(int R, int C, size_t qbytes);

/* out (N,C) = res2 + fc2(gelu(fc(LN(res2)))) */
void mw_mlpg_forward(const mw_mlpg *g, float *out, const float *res2);

/* The MLP's backward from dres (N,C: d(out), updated to d(res2) = d(out) + the norm's input
 * gradient), recomputing each group's values from res2 (exact): the weights' gradients += . */
mw_status mw_mlpg_backward(const mw_mlpg *g, float *dres, const float *res2);
#endif
