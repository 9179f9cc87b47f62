/* One rank of a parallel layout (graph_impl.h; issue 32, docs/cluster.md "Layouts"). Owns: the
 * rank's share of the parameter table (a tensor-parallel shard divides each tensor as the model
 * declares it, mw_graph_add_tensor_split; a pipeline stage holds its blocks, the embedding on the
 * first stage and the head on the last) and of the values (as the model's lslot_split and
 * gslot_split declare), the stage's blocks renumbered from 0, and a pipeline stage's schedule: its
 * micro-batches' forwards and backwards in 1F1B order with the receives and sends between stages.
 * The walk (schedule.c) then derives every buffer of that rank from these alone, as for the plain
 * run: the estimate is the plan that rank will run. A pipeline stage's sends and receives
 * (MW_KF_COMM) run in src/dist/pipeline.c; the other layouts are planned, never created (place.c
 * refuses them). May call: the
 * model's def (block_forward, the backward through schedule.c), schedule.c's push. */
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "graph_impl.h"

static int tp_of(const mw_model *m) { return m->cfg.tp > 1 ? m->cfg.tp : 1; }

void mw_graph_layout_dims(const mw_model *m, int split, int *r, int *c) {
    const int T = tp_of(m);
    if (split == MW_TS_ROWS) *r = (*r + T - 1) / T; /* the vocabulary padded up to a multiple of T */
    if (split == MW_TS_COLS) *c = (*c + T - 1) / T;
}

int mw_graph_layout_holds(const mw_model *m, int after, int at) {
    const mw_config *c = &m->cfg;
    if (c->pp <= 1) return 1;
    const int first = c->pp_stage == 0, last = c->pp_stage == c->pp - 1;
    /* a tied embedding: the first stage's; the last stage's head reads a copy outside its table
     * (m->ptied), so that every stage holds a run of the single-process table and flat buffer */
    if (at == MW_AT_ENDS) return first || (last && !mw_graph_pipe_tied(c));
    return after ? last : first;
}

uint64_t mw_graph_layout_bytes(const mw_model *m, int split, uint64_t bytes) {
    const uint64_t T = (uint64_t)tp_of(m);
    if (split == MW_VS_TP || (split == MW_VS_SEQ && m->cfg.sp)) return (bytes + T - 1) / T;
    return bytes;
}

void mw_graph_layout_local(mw_config *c) {
    if (c->pp <= 1) return;
    if (c->recompute == MW_RECOMPUTE_BLOCKS) { /* the stage's letters */
        memmove(c->recompute_blocks, c->recompute_blocks + c->pp_first, (size_t)c->pp_blocks);
        c->recompute_blocks[c->pp_blocks] = 0;
    }
    c->n_layer = c->pp_blocks;
}

enum { PK_RECV = MW_PK_RECV, PK_SEND = MW_PK_SEND, PK_RECV_GRAD = MW_PK_RECV_GRAD, PK_SEND_GRAD = MW_PK_SEND_GRAD };

static int chunks_of(const mw_config *c) { return c->pp > 1 && c->vpp > 1 ? c->vpp : 1; }

/* Micro-batch j's forward through the stage's model chunk v (its blocks v Lc .. (v + 1) Lc - 1 of
 * the stage's n, Lc = n / chunks; without interleaving the one chunk is every block): its input
 * received (or embedded: the first stage's first chunk), the blocks, its output sent (or the head
 * and the loss: the last stage's last chunk, which start its gradient). */
static void stage_forward(mw_model *m, int j, int v) {
    const mw_model_def *a = m->arch;
    const int V = chunks_of(&m->cfg), Lc = m->cfg.n_layer / V, lo = v * Lc, hi = lo + Lc;
    const int first = m->cfg.pp_stage == 0 && v == 0, last = m->cfg.pp_stage == m->cfg.pp - 1 && v == V - 1;
    m->building_mb = j, m->building_bwd = 0;
    mw_graph_push(m, first ? a->k_embed : a->nkinds + PK_RECV, lo);
    for (int l = lo; l < hi; l++) a->block_forward(m, l, 1);
    mw_graph_push(m, last ? a->k_head : a->nkinds + PK_SEND, hi);
    if (last && mw_graph_pipe_tied(&m->cfg)) mw_graph_push(m, a->nkinds + MW_PK_SEND_HEAD, hi);
}

/* Micro-batch j's backward through chunk v: the gradient of its output received (the last stage's
 * head made it), the chunk's blocks' backward under the policy, the gradient of its input sent (or
 * the embedding's). */
static void stage_backward(mw_model *m, int j, int v) {
    const mw_model_def *a = m->arch;
    const int V = chunks_of(&m->cfg), Lc = m->cfg.n_layer / V, lo = v * Lc, hi = lo + Lc;
    const int first = m->cfg.pp_stage == 0 && v == 0, last = m->cfg.pp_stage == m->cfg.pp - 1 && v == V - 1;
    m->building_mb = j, m->building_bwd = 1;
    if (!last) mw_graph_push(m, a->nkinds + PK_RECV_GRAD, hi);
    mw_graph_push_backward_range(m, lo, hi);
    if (first && mw_graph_pipe_tied(&m->cfg)) { /* the head's part of the tied gradient, before the lookup's */
        mw_graph_push(m, a->nkinds + MW_PK_RECV_HEAD, lo);
        mw_graph_push(m, a->nkinds + MW_PK_TIED_GRAD, lo);
    }
    mw_graph_push(m, first ? a->k_embed_bwd : a->nkinds + PK_SEND_GRAD, lo);
}

/* Megatron-LM's interleaved schedule (forward_backward_pipelining_with_interleaving): the k-th
 * forward of M x V on a stage is micro-batch (k / (P V)) P + k mod P through chunk (k / P) mod V;
 * the k-th backward the same micro-batch through chunk V - 1 - (k / P) mod V. */
static int vmb(int k, int P, int V) { return k / (P * V) * P + k % P; }

int mw_layout_in_flight(const mw_config *c, int s) {
    const int P = c->pp, M = c->accum > 0 ? c->accum : 1, V = chunks_of(c);
    if (P <= 1) return 1;
    if (V == 1) return P - s < M ? P - s : M;
    const int warm = (P - s - 1) * 2 + (V - 1) * P;
    return warm + 1 < M * V ? warm + 1 : M * V;
}

/* 1F1B (Narayanan et al., SC21, Section 2.2; Megatron-LM's forward_backward_pipelining_without_
 * interleaving): stage s of P runs w = min(P - s - 1, M) warm-up forwards, then a forward and a
 * backward each until its M forwards are done, then the w backwards left. Micro-batch j's values
 * are its own (m->nmb), so the walk keeps min(P - s, M) micro-batches' activations at once, as the
 * stage does. */
mw_status mw_graph_stage_schedule(mw_model *m) {
    const mw_model_def *a = m->arch;
    const mw_config *c = &m->cfg;
    const int n = c->n_layer, P = c->pp, s = c->pp_stage, V = chunks_of(c);
    const int M = m->walk_mb > 0 ? m->walk_mb : c->accum > 0 ? c->accum : 1; /* a cut walk's (place.c) */
    const int w = P - s - 1 < M ? P - s - 1 : M;
    if (M > 65535) return mw_fail(MW_ERR_ARG, "a pipeline stage plans at most 65535 micro-batches, got %d", M);
    m->nmb = M;
    m->ops_cap = M * (64 * n + 12 * V) + 8;
    m->ops = malloc(sizeof *m->ops * (size_t)m->ops_cap);
    if (!m->ops) return mw_fail(MW_ERR_NOMEM, "cannot allocate the schedule");
    m->nops = 0;
    /* the stage's sends and receives: activations forward (the last stage also reads the targets
     * that its data loader gives it), the gradient of the residual stream backward */
    const signed char tgt = a->kinds[a->k_embed].a[1].slot, dres = a->kinds[a->k_embed_bwd].a[0].slot;
    m->pkind[PK_RECV] = (mw_kind){"recv", s == P - 1 ? 2 : 1, {{0, MW_W}, {tgt, MW_W}}, MW_KF_COMM, 0};
    m->pkind[PK_SEND] = (mw_kind){"send", 1, {{0, MW_R}}, MW_KF_COMM, 0};
    m->pkind[PK_RECV_GRAD] = (mw_kind){"recv grad", 1, {{dres, MW_W}}, MW_KF_COMM, 0};
    m->pkind[PK_SEND_GRAD] = (mw_kind){"send grad", 1, {{dres, MW_R}}, MW_KF_COMM, 0};
    /* a tied embedding (src/dist/pipetied.c): the head's input, the final norm's output, from the
     * last stage to the first, where the head's logits are formed again for the embedding's gradient */
    const mw_kind *hk = &a->kinds[a->k_head];
    const signed char lnf = hk->a[2].slot, lg = hk->a[a->logits_acc].slot, ls = hk->a[a->losses_acc].slot;
    m->pkind[MW_PK_SEND_HEAD] = (mw_kind){"send head input", 1, {{lnf, MW_R}}, MW_KF_COMM, 0};
    m->pkind[MW_PK_RECV_HEAD] = (mw_kind){"recv head input", 1, {{lnf, MW_W}}, MW_KF_COMM, 0};
    m->pkind[MW_PK_TIED_GRAD] = (mw_kind){"tied head grad", 4, {{lnf, MW_R}, {tgt, MW_R}, {lg, MW_W}, {ls, MW_W}}, MW_KF_COMM, 0};
    m->head_op = -1;
    if (V == 1) {
        for (int j = 0; j < w; j++) stage_forward(m, j, 0);
        for (int j = w; j < M; j++) {
            stage_forward(m, j, 0);
            if (m->head_op < 0) m->head_op = m->nops - 1;
            stage_backward(m, j - w, 0);
        }
        for (int j = M - w; j < M; j++) {
            if (m->head_op < 0) m->head_op = m->nops - 1;
            stage_backward(m, j, 0);
        }
    } else { /* interleaved: warm-up forwards, then one forward and one backward, then the rest */
        mw_config cw = *c; /* in flight as the walked micro-batches run (a cut walk's, place.c) */
        cw.accum = M;
        const int K = M * V, warm = mw_layout_in_flight(&cw, s) - 1;
        for (int k = 0; k < warm; k++) stage_forward(m, vmb(k, P, V), k / P % V);
        for (int k = warm; k < K; k++) {
            stage_forward(m, vmb(k, P, V), k / P % V);
            if (m->head_op < 0) m->head_op = m->nops - 1;
            stage_backward(m, vmb(k - warm, P, V), V - 1 - (k - warm) / P % V);
        }
        for (int k = K - warm; k < K; k++) {
            if (m->head_op < 0) m->head_op = m->nops - 1;
            stage_backward(m, vmb(k, P, V), V - 1 - k / P % V);
        }
    }
    m->building_mb = 0, m->building_bwd = 1;
    m->opt_op = m->nops;
    mw_graph_push(m, a->k_opt, 0);
    return MW_OK;
}
