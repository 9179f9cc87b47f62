/* A block's MLP in row groups (src/model/mlpg.c): its second half, the norm, the first product(s),
 * the activation and the last product, forward and backward, over R rows at a time, so that its
 * wide values (GPT-2's fch and gelu, 4C each; Llama's gate|up and act, 2F and F) and their
 * gradients live for one group instead of every row (docs/memory.md, "Row groups"). Two families:
 * GPT-2's (LayerNorm, fc with its bias, GELU, fc2 with its bias) and Llama's (RMSNorm, gate and
 * up without biases, SwiGLU, down).
 *
 * The same bits as the ops that run it over all rows at once (GPT-2's K_LN2FC, K_GELU, K_FCPROJ,
 * Llama's K_LN2FC, K_SWIGLU, K_DOWN, and their backward): rows are independent in the norm, the
 * products' outputs and inputs' gradients and the activation, and every sum over rows (the
 * weights' and biases' gradients, the norm's) is one chain over the rows in order, which the
 * groups continue in order (gemm.h: a product over K rows split at K1, beta 1 on the second call,
 * is the same bits as one call). fp32 only. */
#ifndef MW_MLPG_H
#define MW_MLPG_H
#include <stddef.h>

#include "../core/status.h"
#include "../kernels/cpu/ops.h"

typedef struct mw_mlpg {
    int N, C, F, R;            /* rows, width, hidden width, rows per group (the last may be shorter) */
    int glu;                   /* Llama's: RMSNorm, gate and up (F each, no biases), SwiGLU, down */
    float eps;                 /* the norm's epsilon */
    /* GPT-2: ln2w, ln2b (C), fcw (F, C), fcb (F), fcpw (C, F), fcpb (C); Llama: ln2w, fcw = gate
     * (F, C), upw (F, C), fcpw = down (C, F), the biases NULL */
    const float *ln2w, *ln2b, *fcw, *fcb, *upw, *fcpw, *fcpb;
    float *gln2w, *gln2b, *gfcw, *gfcb, *gupw, *gfcpw, *gfcpb; /* their gradients (+=) */
    const mw_gemm_ws *gw;
    float *ws; /* mw_mlpg_ws_floats(R, C, F, glu, qbytes) floats */
    /* the stored activations' round trip of rows [r0, r0 + rows) of value v (its lossy form, as a
     * kept value would be read back: the model's lslot index; Llama's gate|up is 2N rows of F, the
     * up half's rows from N), NULL or returning 0 when nothing is compressed; MW_OK or the
     * quantiser's refusal */
    mw_status (*round)(void *ctx, int v, float *x, size_t r0, size_t rows, size_t width, char *scratch);
    void *ctx;
    size_t qbytes; /* the round trip's scratch bytes (0 without round) */
} mw_mlpg;

/* The value indices the round trip is asked for (GPT-2's and Llama's lslots alike) */
enum { MW_MLPG_RES2 = 6, MW_MLPG_LN2 = 7, MW_MLPG_FCH = 9, MW_MLPG_GELU = 10 };

/* The workspace of one group of R rows: ln2, its statistics, the first product(s) and the
 * activation (or its gradient), the lossy copy of res2, d(ln2), then the round trip's scratch of
 * qbytes. */
size_t mw_mlpg_ws_floats(int R, int C, int F, int glu, size_t qbytes);

/* out (N,C) = res2 + the MLP of the norm of res2 */
void mw_mlpg_forward(const mw_mlpg *g, float *out, const float *res2);

/* The MLP's backward from dres (N,C: d(out), updated to d(res2) = d(out) + the norm's input
 * gradient), recomputing each group's values from res2 (exact): the weights' gradients += . */
mw_status mw_mlpg_backward(const mw_mlpg *g, float *dres, const float *res2);
#endif
