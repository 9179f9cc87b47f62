/* The cost model of a parallel layout (cost.h states every formula and its source). Owns no
 * state; calls src/core/status.h only. */
#include "cost.h"

#include "../core/status.h"

double mw_cost_allreduce(double bytes, int n) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0; }
double mw_cost_allgather(double bytes, int n) { return n > 1 ? (double)(n - 1) / n * bytes : 0; }
double mw_cost_reducescatter(double bytes, int n) { return n > 1 ? (double)(n - 1) / n * bytes : 0; }
double mw_cost_alltoall(double bytes, int n) { return n > 1 ? (double)(n - 1) / n * bytes : 0; }

mw_status mw_cost_step_flops(const mw_cost_model *m, double seq, double tokens, mw_cost_recompute r,
                             double *flops) {
    if (!(m->layer_params > 0) || !(m->layers > 0) || !(m->hidden > 0) || !(m->attn_dim > 0) || !(m->vocab > 0) ||
        !(seq > 0) || !(tokens > 0))
        return mw_fail(MW_ERR_ARG, "the step's FLOPs need positive parameters, layers, widths, vocabulary, "
                                   "sequence and tokens");
    double core = 4 * m->layers * seq * m->attn_dim;  /* Q K^T and A V, per token */
    double layers = 2 * m->layer_params + core;       /* forward of the layers, per token */
    double logits = 2 * m->hidden * m->vocab;         /* forward of the output layer, per token */
    double per_token = 3 * (layers + logits);
    if (r == MW_COST_RECOMPUTE_FULL) per_token += layers;
    else if (r == MW_COST_RECOMPUTE_SELECTIVE) per_token += core;
    *flops = per_token * tokens;
    return MW_OK;
}

double mw_cost_flops_6n(double params, double tokens) { return 6 * params * tokens; }

mw_status mw_cost_layout_volume(const mw_cost_layout *l, mw_cost_volume *v) {
    if (l->tp < 1 || l->pp < 1 || l->dp < 1 || l->ep < 1 || l->microbatches < 1 || l->zero < 0 || l->zero > 3 ||
        l->vpp < 0)
        return mw_fail(MW_ERR_ARG, "a layout needs TP, PP, DP, EP and micro-batches >= 1, ZeRO 0..3 and VPP >= 0");
    if (l->dp % l->ep)
        return mw_fail(MW_ERR_ARG, "EP %d must divide DP %d (the expert groups are carved out of DP)", l->ep, l->dp);
    double m = l->microbatches, bsh = l->micro_batch * l->seq * l->hidden;
    double recompute = l->recompute == MW_COST_RECOMPUTE_FULL ? 1 : 0;
    int edp = l->dp / l->ep;

    /* data parallelism: dense parameters over dp, experts over edp */
    double g = l->rank_params * l->grad_bytes, p = l->rank_params * l->param_bytes;
    double ge = l->rank_expert_params * l->grad_bytes, pe = l->rank_expert_params * l->param_bytes;
    if (l->zero == 0) {
        v->dp = mw_cost_allreduce(g, l->dp);
        v->edp = mw_cost_allreduce(ge, edp);
    } else if (l->zero < 3) {
        v->dp = mw_cost_reducescatter(g, l->dp) + mw_cost_allgather(p, l->dp);
        v->edp = mw_cost_reducescatter(ge, edp) + mw_cost_allgather(pe, edp);
    } else {
        v->dp = mw_cost_reducescatter(g, l->dp) + 2 * mw_cost_allgather(p, l->dp);
        v->edp = mw_cost_reducescatter(ge, edp) + 2 * mw_cost_allgather(pe, edp);
    }

    /* tensor parallelism: 4 all-reduces per layer and micro-batch (+2 recomputed); with sequence
     * parallelism each is an all-gather plus a reduce-scatter, the same bytes */
    double stage_layers = l->layers / l->pp, stage_moe = l->moe_layers / l->pp;
    double tp_ops = (4 + 2 * recompute) * stage_layers * m;
    double S = bsh * l->act_bytes;
    v->tp = tp_ops * (l->sp ? mw_cost_allgather(S, l->tp) + mw_cost_reducescatter(S, l->tp)
                            : mw_cost_allreduce(S, l->tp));

    /* pipeline: activations forward, their gradients backward, per micro-batch; under sequence
     * parallelism a rank's residual stream is its 1/tp of the sequence, and that is what it sends */
    const double V = l->pp > 1 && l->vpp > 1 ? l->vpp : 1, send = m * bsh * l->act_bytes / (l->sp ? l->tp : 1);
    v->pp = l->pp == 1 ? 0 : (l->pp > 2 ? 2 : 1) * V * send;
    v->pp_wrap = l->pp == 1 ? 0 : (V - 1) * send; /* interleaved: an end stage's sends across the wrap */

    /* a tied embedding's copies on the first and the last stage: their gradients summed */
    v->emb = l->pp > 1 ? mw_cost_allreduce(l->tied_params * l->grad_bytes, 2) : 0;

    /* expert parallelism: dispatch and combine, forward and backward (and recomputed forward) */
    double tokens = l->micro_batch * l->seq / (l->sp ? l->tp : 1);
    double a2a = mw_cost_alltoall(tokens * l->topk * l->hidden * l->act_bytes, l->ep);
    v->ep = (4 + 2 * recompute) * stage_moe * m * a2a;
    return MW_OK;
}

double mw_cost_link(int n, int stride, int gpus_per_node, double intra_bw, double inter_bw) {
    return (double)n * stride <= gpus_per_node ? intra_bw : inter_bw;
}

mw_status mw_cost_step_time(const mw_cost_layout *l, double step_flops, const mw_cost_machine *mc,
                            mw_cost_time *t) {
    if (!(mc->peak_flops > 0) || !(mc->mfu > 0) || mc->mfu > 1 || !(mc->intra_bw > 0) || !(mc->inter_bw > 0) ||
        mc->gpus_per_node < 1 || !(step_flops >= 0))
        return mw_fail(MW_ERR_ARG, "the step time needs a peak, a fraction in (0, 1], both link bandwidths and "
                                   "GPUs per node");
    mw_cost_volume v;
    MW_TRY(mw_cost_layout_volume(l, &v));
    double ranks = (double)l->tp * l->pp * l->dp;
    t->compute_s = step_flops / ranks / (mc->peak_flops * mc->mfu);
    const int V = l->pp > 1 && l->vpp > 1 ? l->vpp : 1;
    t->bubble_s = t->compute_s * (l->pp - 1) / ((double)l->microbatches * V);
    t->tp_s = v.tp / mw_cost_link(l->tp, 1, mc->gpus_per_node, mc->intra_bw, mc->inter_bw);
    t->dp_s = v.dp / mw_cost_link(l->dp, l->tp, mc->gpus_per_node, mc->intra_bw, mc->inter_bw);
    t->edp_s = v.edp / mw_cost_link(l->dp / l->ep, l->tp * l->ep, mc->gpus_per_node, mc->intra_bw, mc->inter_bw);
    t->ep_s = v.ep / mw_cost_link(l->ep, l->tp, mc->gpus_per_node, mc->intra_bw, mc->inter_bw);
    const double near = mw_cost_link(2, l->tp * l->dp, mc->gpus_per_node, mc->intra_bw, mc->inter_bw),
                 wrap = mw_cost_link(2, (l->pp - 1) * l->tp * l->dp, mc->gpus_per_node, mc->intra_bw, mc->inter_bw);
    /* an end stage sends to its one neighbour and over the wrap-around; an interior one (pp > 2) to
     * both neighbours, twice the end's neighbour bytes: the busier of the two */
    const double end_s = (l->pp > 2 ? v.pp / 2 : v.pp) / near + v.pp_wrap / wrap;
    t->pp_s = l->pp > 2 && v.pp / near > end_s ? v.pp / near : end_s;
    t->emb_s = v.emb / mw_cost_link(2, (l->pp - 1) * l->tp * l->dp, mc->gpus_per_node, mc->intra_bw, mc->inter_bw);
    t->total_s = t->compute_s + t->bubble_s + t->tp_s + t->dp_s + t->edp_s + t->ep_s + t->pp_s + t->emb_s;
    return MW_OK;
}
