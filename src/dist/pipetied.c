/* A tied embedding under --pp (issue 33): GPT-2's wte, Llama's embed_tokens with --tied 1, both the
 * first stage's embedding and the last stage's LM head.
 *
 * One process's gradient of the tied table is one buffer that each micro-batch j adds into twice,
 * in this order: the head's weight gradient (one GEMM per MW_LOSS_ROWS positions, accumulating
 * into the buffer), then, at the end of j's backward, the lookup's scatter of the residual
 * stream's gradient into the rows of j's tokens. Float sums do not reassociate, so a pipeline
 * keeps that order by forming both on the first stage, which owns the table (its gradient,
 * optimizer state and checkpoint records, as for any tensor):
 *   - the last stage's head reads a copy of the table (m->ptied, outside its parameter table) and
 *     adds no gradient into it; after its head op of micro-batch j it sends the head's input (the
 *     final norm's output, b·s·h values) to the first stage ("send head input");
 *   - the first stage, in j's backward, receives it ("recv head input") and, just before its
 *     lookup's backward, forms the head's logits again from it and the table, their gradient
 *     against j's targets (which its loader gave it at the embedding) and the weight gradient into
 *     the table's ("tied head grad"): the same kernels on the same operands as the head's, so the
 *     same bits, in one process's order.
 * The copy is sent from the first stage to the last before the run's first step or evaluation and
 * after each update (V·C floats a step: the volume of Megatron-LM's all-reduce of the embedding
 * group's gradients). The cost: the first stage computes the head's logits GEMM once more per
 * micro-batch; the last stage skips the weight gradient's GEMM.
 *
 * With --tp T as well (Megatron-LM's vocabulary-parallel embedding and head): the table is divided
 * by rows, ceil(V / T) a rank, and --tp alone forms each rank's rows' gradient as above (its
 * logits' columns, then its tokens' rows; no exchange). So tensor rank t of the first stage owns
 * its shard, the last stage's rank t reads a copy of that shard (sent along the pipeline between
 * the ranks of the same t), and the first stage's "tied head grad" runs the head's
 * vocabulary-parallel loss over its tensor-parallel group (the rows' maxima and sums, src/dist/tp.c)
 * on the head input its peer sent: the same kernels, operands and rank-order sums as --tp alone's
 * head, so (T, P, 1) gives --tp T --accum M's bits. Under --sp the head input a rank sends is its
 * N / T rows, gathered over the first stage's group before the product, as the head does. */
#include <string.h>

#include "../core/status.h"
#include "../graph/graph_impl.h"
#include "../kernels/cpu/ops.h"
#include "tp.h"

enum { TAG_TIED = 6 };

/* Op i of the first stage, "tied head grad": its values are the head's input (N, C; bfloat16
 * under --precision bf16), the targets (N), the logits of one MW_LOSS_ROWS chunk and the (N)
 * losses; dloss the head's loss scale. Adds the head's gradient of the table into tensor 0's (under
 * --tp this rank's rows: collective over the stage's tensor-parallel group, as the head is). */
void mw_pipe_tied_grad(mw_model *m, int i, float dloss) {
    const mw_config *c = &m->cfg;
    const int N = c->batch * c->seq, C = c->n_embd, V = c->vocab, b16 = mw_graph_b16(m), tp = mw_tp_on(m);
    int vlo = 0, vhi = V;
    if (tp) mw_tp_vocab_range(m, V, &vlo, &vhi);
    const int Vl = vhi - vlo; /* this rank's columns of the logits (padded) */
    void **P = m->opp + (size_t)i * MW_MAXACC;
    /* --sp: this rank's N / T rows of the head input, every row gathered (m->spbuf) as the head reads them */
    void *lnf = (void *)mw_tp_all_rows(m, P[0], N, (size_t)C * (b16 ? 2 : sizeof(float)));
    const int32_t *tg = (const int32_t *)P[1];
    float *z = (float *)P[2], *losses = (float *)P[3];
    const float *w = mw_graph_tensor(m, 0, 0);
    float *dw = mw_graph_tensor(m, 1, 0);
    for (int n0 = 0; n0 < N; n0 += MW_LOSS_ROWS) { /* the head's quanta (gpt2.c, llama.c: K_HEAD) */
        const int rows = n0 + MW_LOSS_ROWS < N ? MW_LOSS_ROWS : N - n0;
        void *x = mw_graph_elt(lnf, (size_t)n0 * C, b16);
        mw_matmul_forward_x(z, x, b16, w, NULL, rows, C, Vl, 0, &m->gw);
        if (tp)
            mw_tp_xent(m, z, losses + n0, tg + n0, dloss, 1, rows, V);
        else
            mw_crossentropy(z, losses + n0, tg + n0, dloss, 1, rows, V);
        mw_matmul_backward_x(NULL, dw, NULL, z, 0, x, b16, w, rows, C, Vl, 0, &m->gw);
    }
}

/* The floats of this rank's table (the first stage's tensor 0, the last stage's copy): V x C, or
 * under --tp its ceil(V / T) rows */
uint64_t mw_pipe_tied_floats(const mw_model *m) {
    int r = m->cfg.vocab, cols = m->cfg.n_embd;
    mw_graph_layout_dims(m, MW_TS_ROWS, &r, &cols);
    return (uint64_t)r * (uint64_t)cols;
}

/* The first stage's table (its shard under --tp) into the last stage's copy (collective over the two
 * of each pipeline). */
mw_status mw_pipe_tied_sync(mw_model *m) {
    const mw_config *c = &m->cfg;
    if (!mw_graph_pipe_tied(c) || (c->pp_stage != 0 && c->pp_stage != c->pp - 1)) return MW_OK;
    mw_comm *pc = m->pcomm;
    const size_t bytes = (size_t)mw_pipe_tied_floats(m) * sizeof(float); /* --tp: the shard, to the same t */
    m->ptied_synced = 1;
    if (c->pp_stage == 0) {
        const float *w = mw_graph_tensor(m, 0, 0);
        if (!w) return mw_fail(MW_ERR_ARG, "the tied embedding is not in memory on the first stage");
        return pc->send(pc, w, bytes, c->pp - 1, TAG_TIED);
    }
    return pc->recv(pc, m->ptied, bytes, 0, TAG_TIED);
}
