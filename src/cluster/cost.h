/* The cost model of a parallel layout: a training step's time as its FLOPs at a stated fraction of
 * the device's peak, plus the communication volume of each parallel dimension over a stated link
 * bandwidth. Closed forms, each written out with its source; the strategy search (issue 32 item 4,
 * not built yet) ranks layouts by it. Pure arithmetic: calls src/core (status) only.
 *
 * Volumes are the bytes one rank sends in one step under ring/pairwise algorithms, as NCCL's
 * performance notes count them (nccl-tests doc/PERFORMANCE.md, "bus bandwidth"): an all-reduce of
 * S bytes over n ranks sends 2 (n-1)/n S per rank; an all-gather or a reduce-scatter of an S-byte
 * result (n-1)/n S; an all-to-all of an S-byte send buffer (n-1)/n S. */
#ifndef MW_COST_H
#define MW_COST_H
#include "memwall.h"

double mw_cost_allreduce(double bytes, int n);
double mw_cost_allgather(double bytes, int n);     /* bytes: the gathered result */
double mw_cost_reducescatter(double bytes, int n); /* bytes: the input on each rank */
double mw_cost_alltoall(double bytes, int n);      /* bytes: one rank's send buffer */

/* ---- FLOPs. A decoder of L layers, hidden h, attention width d_attn (heads * head_dim), vocabulary
 * V, and N parameters in its layers (the matrices a token passes through: for a MoE model the
 * active ones). Per token, forward (Narayanan et al., "Efficient Large-Scale Language Model
 * Training on GPU Clusters Using Megatron-LM", SC21, Section 5.1, generalised from 24 h^2 per layer):
 *   layers   2 N + 4 L s d_attn        (every weight once, a multiply and an add; Q K^T and A V)
 *   logits   2 h V
 * A step is the forward and a backward of twice its FLOPs (3 x), plus the forward of the layers
 * again under full recomputation, or only the attention core (4 L s d_attn) under selective
 * recomputation. With N = 12 L h^2, d_attn = h this is Narayanan's
 * 72 B s L h^2 (1 + s / (6h) + V / (12 h L)), and 96 B s L h^2 (1 + s / (6h) + V / (16 h L)) with
 * full recomputation. The causal mask's halving of the attention core is not taken (as there). */
typedef enum { MW_COST_RECOMPUTE_NONE = 0, MW_COST_RECOMPUTE_SELECTIVE, MW_COST_RECOMPUTE_FULL } mw_cost_recompute;

typedef struct {
    double layer_params; /* N: parameters in the layers (active ones for MoE) */
    double layers, hidden, attn_dim, vocab;
} mw_cost_model;

/* FLOPs of one step over tokens = global batch * sequence tokens. MW_ERR_ARG on a non-positive size. */
mw_status mw_cost_step_flops(const mw_cost_model *m, double seq, double tokens, mw_cost_recompute r,
                             double *flops);

/* Kaplan et al. ("Scaling Laws for Neural Language Models", 2020, Section 2.1): C = 6 N per
 * training token, the attention term dropped. */
double mw_cost_flops_6n(double params, double tokens);

/* ---- A layout's communication. Ranks are ordered TP fastest, then DP (its EP groups inside it:
 * EP consecutive DP ranks), then PP (Megatron-LM's order). */
typedef struct {
    int tp, pp, dp, ep, sp, zero;   /* sizes; sp: sequence parallel on; zero: 0..3 */
    int microbatches;               /* micro-batches per step per DP replica */
    double micro_batch, seq, hidden;
    double layers, moe_layers, topk;/* the whole model's layer counts; topk of the router */
    double rank_params;             /* dense parameters a rank holds (its TP/PP shard), before ZeRO */
    double rank_expert_params;      /* routed-expert parameters it holds (its EP/PP shard) */
    double act_bytes, param_bytes, grad_bytes; /* bytes per element sent */
    mw_cost_recompute recompute;    /* full recomputation repeats the forward's TP and EP traffic */
    double tied_params;             /* a tied embedding's parameters on the first and the last stage's
                                       rank (its TP shard); 0 when untied */
    int vpp;                        /* model chunks per stage under the interleaved schedule (0 or 1:
                                       plain 1F1B) */
} mw_cost_layout;

typedef struct {
    double dp, edp, tp, pp, ep; /* bytes one rank sends per step in each dimension (edp: the
                                   expert gradients' and parameters' data-parallel traffic) */
    double emb;                 /* a tied embedding's gradient summed between the first and the last stage */
    double pp_wrap;             /* interleaved (vpp > 1): what an end stage sends over the wrap-around
                                   between the last stage and the first */
} mw_cost_volume;

/* Per rank and step:
 *   dp  ZeRO 0: all-reduce of the gradients (rank_params * grad_bytes) over dp; ZeRO 1 and 2:
 *       reduce-scatter of the gradients and all-gather of the parameters; ZeRO 3: the parameters
 *       gathered twice (forward and backward) and the gradients reduce-scattered (ZeRO paper,
 *       Section 7: 1.5 x data parallelism's volume). Expert gradients go over edp = dp / ep.
 *   tp  per layer and micro-batch 2 all-reduces of b s h in the forward, 2 in the backward, and 2
 *       more when the forward is recomputed (Megatron-LM, Shoeybi et al. 2019, Section 3); with
 *       sequence parallelism each becomes an all-gather and a reduce-scatter of the same volume
 *       (Korthikanti et al., Section 4.2.2). A stage holds layers / pp layers.
 *   pp  per micro-batch a stage sends its output forward (b s h) and its input gradient backward:
 *       an interior stage both (2 m b s h), a first or last stage one; under sequence
 *       parallelism its 1/tp of the sequence (Megatron-LM's p2p shape: seq / tp). Interleaved
 *       (vpp = V > 1, Narayanan et al. Section 2.2.2): every chunk of every micro-batch crosses a
 *       stage boundary, V times as many sends: an interior stage 2 V m b s h to its neighbours
 *       (pp), a first or last stage V m b s h to its neighbour and (V - 1) m b s h over the
 *       wrap-around between stage pp - 1 and stage 0 (pp_wrap: the last stage's chunk outputs
 *       forward, the first stage's chunk input gradients backward).
 *   emb with pp > 1 and a tied embedding, the first and the last stage each hold a copy and sum
 *       their gradients once a step: an all-reduce of tied_params * grad_bytes over 2 ranks
 *       (Megatron-LM's embedding group, _allreduce_word_embedding_grads). The link: the two
 *       ranks lie (pp - 1) tp dp apart.
 *   ep  per MoE layer and micro-batch a dispatch and a combine all-to-all in the forward and again
 *       in the backward (and the forward's again under full recomputation), each of the rank's
 *       tokens times topk: b s k h (divided by tp under sequence parallelism).
 * MW_ERR_ARG on a size < 1 or ep not dividing dp. */
mw_status mw_cost_layout_volume(const mw_cost_layout *l, mw_cost_volume *v);

/* The bandwidth (bytes/s, one direction) a group of size n whose ranks lie stride apart uses: the
 * intra-node link when n * stride <= gpus_per_node, the inter-node one otherwise. */
double mw_cost_link(int n, int stride, int gpus_per_node, double intra_bw, double inter_bw);

typedef struct {
    double peak_flops, mfu;        /* the device's peak and the fraction of it reached (stated) */
    double intra_bw, inter_bw;     /* bytes/s one direction */
    int gpus_per_node;
} mw_cost_machine;

typedef struct {
    double compute_s, bubble_s, dp_s, edp_s, tp_s, pp_s, ep_s, total_s;
    double emb_s; /* the tied embedding's gradient sum (in total_s) */
} mw_cost_time;

/* Step time: flops / (tp pp dp) / (peak * mfu) per rank; the 1F1B bubble adds (pp - 1) / m of it
 * (Narayanan et al., Section 2.2.1), (pp - 1) / (m vpp) interleaved (Section 2.2.2); each
 * dimension's volume over its link: the pipeline's the busier of an interior stage (its
 * neighbours, tp dp ranks apart) and an end stage (its neighbour, and the wrap-around (pp - 1) tp
 * dp ranks apart). Nothing is assumed to overlap, so this is the serial bound. MW_ERR_ARG on a
 * non-positive peak, fraction or bandwidth. */
mw_status mw_cost_step_time(const mw_cost_layout *l, double step_flops, const mw_cost_machine *m,
                            mw_cost_time *t);
#endif
