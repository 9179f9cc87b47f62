/* What the files of src/graph/ share among themselves (not the models: they see graph.h alone).
 *
 *   schedule.c   the schedule of one step and the walk that derives every buffer and its lifetime
 *   place.c      placement and binding: plans (mw_plan*), the timeline, model create/destroy
 *   exec.c       the executor: forward, forward+backward, grad norm, the optimizer's passes, decode
 *   transfer.c   the disk tier's layout and its reads/writes around the ops, ZeRO-3's gathers
 *   actstore.c   stored activations: kept values swapped to the disk tier or compressed (actstore.h)
 *   recompute.c  the recomputation policies and auto's calibration and dynamic program
 *   state.c      the optimizer state's and moments' views for checkpoints
 *   budget.c     the refusal of a plan that does not fit
 *   layout.c     a parallel layout's rank: its share of the tensors and values, a pipeline stage's
 *                1F1B schedule with its sends and receives (src/dist/pipeline.c runs a pipeline's)
 *
 * The arrows run one way: place.c calls schedule.c, transfer.c and recompute.c to plan; exec.c
 * calls transfer.c around the ops; recompute.c calls schedule.c and place.c to try policies (and
 * exec.c to time the ops); all of them call down into src/memory, src/optim, src/kernels and
 * src/core, and up into a model only through its mw_model_def, which the public entry points of
 * src/model/models.c hand down (mw_graph_model_create, mw_graph_plan, ...).
 *
 * The configuration's functions (mw_config_validate, mw_offload_name, mw_optim_str) are in
 * src/core/config.c: the configuration is the graph's input, below it. One arrow leaves the graph
 * sideways, and stays for now:
 *   - ZeRO's collectives, mw_zero_* (src/dist/zero.c): the gradients' exchange, stage 3's gathers
 *     and the sharded optimizer are transfers of the step, started here as the disk tier's reads
 *     and writes are; zero.c reaches into mw_model for the shard, so the two are one module over
 *     two folders until the collectives get a transfer interface of their own (pipeline sends and
 *     receives want the same). */
#ifndef MW_GRAPH_IMPL_H
#define MW_GRAPH_IMPL_H
#include "graph.h"
#include "../memory/chunks.h"
#include "../memory/offload.h"
#include "../memory/planner.h"

/* ---- kinds and placement predicates (inline: they run per op) ---- */

static inline int mw_graph_kind_is_forward_a(const mw_model_def *a, int k) { return (a->kinds[k].flags & MW_KF_FWD) != 0; }
static inline int mw_graph_kind_is_forward(const mw_model *m, int k) { return (mw_graph_kind(m, k)->flags & MW_KF_FWD) != 0; }
static inline int mw_graph_kind_is_step(const mw_model *m, int k) {
    const mw_model_def *a = m->arch;
    return k == a->k_embed || k == a->k_head || k == a->k_logits || k == a->k_embed_bwd || k == a->k_opt;
}

static inline uint64_t mw_graph_seg_len(const mw_model *m, int s) { return m->seg_lo[s + 1] - m->seg_lo[s]; }

/* Some block's gradients live on the disk tier (optimizer+grads, all, a chunk placement's grads). */
static inline int mw_graph_grads_on_disk(const mw_model *m) { return (m->dcat & MW_CHUNK_G) != 0; }
/* Some block's parameters live on the disk tier (all, a chunk placement's params). */
static inline int mw_graph_params_on_disk(const mw_model *m) { return (m->dcat & MW_CHUNK_P) != 0; }
/* Some of the optimizer's per-parameter state lives on the disk tier. */
static inline int mw_graph_opt_on_disk(const mw_model *m) { return (m->dcat & MW_CHUNK_O) != 0; }
/* Segment seg keeps array a (MW_ARR_*) on the disk tier. */
static inline int mw_graph_seg_disk(const mw_model *m, int seg, int a) {
    return m->seg_mask && seg >= 0 && seg < m->nseg && (m->seg_mask[seg] & MW_ARR_BIT(a));
}

/* --precision bf16 keeps the blocks' gradients as bfloat16 between their backwards: each block's
 * accumulate in an fp32 slot during its backward and are rounded when it ends, into g16 in memory,
 * or to the disk tier's 2-byte array (mw_graph_grads16_disk, src/graph/narrow.c). The segments
 * before and after the blocks (embeddings, head, final norm) keep fp32 gradients. */
static inline int mw_graph_grads_b16(const mw_model *m) { return !m->cfg.inference && m->cfg.precision == MW_PRECISION_BF16; }
static inline int mw_graph_grads_mem16(const mw_model *m) { return mw_graph_grads_b16(m) && !mw_graph_grads_on_disk(m); }
static inline int mw_graph_grads16_disk(const mw_model *m) { return mw_graph_grads_b16(m) && mw_graph_grads_on_disk(m); }
/* --precision bf16 with the blocks' parameters on disk: forward and backward read their bfloat16
 * copy (MW_ARR_H), the optimizer the fp32 master (src/graph/narrow.c). Whole-category placements
 * only: a chunk placement reads fp32 (a block kept in memory has no copy). */
static inline int mw_graph_params16(const mw_model *m) {
    return mw_graph_grads_b16(m) && m->offload == MW_OFFLOAD_ALL && !m->chunked && m->arch->params16 &&
           !mw_graph_params_zero3(m);
}
/* The gradient norm summed at the blocks' backward, not by a pass over the disk (narrow.c): bfloat16
 * gradients on disk, one process without a layout, a whole-category placement (a chunk placement's
 * blocks kept in memory are summed by the norm's pass) */
static inline int mw_graph_norm_fused(const mw_model *m) {
    return mw_graph_grads16_disk(m) && !m->chunked && !m->cfg.dp && m->cfg.tp <= 1 && m->cfg.pp <= 1;
}
/* The blocks' gradients are bound to a slot per block during backward: on disk, or bfloat16. */
static inline int mw_graph_grads_slotted(const mw_model *m) { return mw_graph_grads_on_disk(m) || mw_graph_grads_mem16(m) || mw_graph_grads_zero2(m); }

/* The disk tier's arrays of the optimizer's state: M and V where it has them. */
static inline unsigned mw_graph_opt_mask(const mw_model *m) {
    return (m->opt.bits[0] ? MW_ARR_BIT(MW_ARR_M) : 0) | (m->opt.bits[1] ? MW_ARR_BIT(MW_ARR_V) : 0);
}


/* ---- schedule.c ---- */

/* The schedule of one step (m->ops) under m's policy (m->pol, m->seg); MW_ERR_NOMEM. */
mw_status mw_graph_build_schedule(mw_model *m);
/* Pushes the backward of every block of one micro-batch, from the last, under m's policy. */
void mw_graph_push_backward(mw_model *m);
/* ... of blocks lo .. hi - 1 only (a model chunk of an interleaved pipeline stage, layout.c) */
void mw_graph_push_backward_range(mw_model *m, int lo, int hi);
/* The walk's index of the value an op of block layer names by access slot s (MW_SLOT_*): the
 * step's values 0 .. ngs - 1, then block l's nls values from ngs + l * nls. */
int mw_graph_value_index(const mw_model_def *a, int s, int layer);
/* The bytes of a pipeline stage's messages: the residual stream it sends forward (a block's input)
 * and the gradient it sends backward. */
void mw_graph_pipe_value_bytes(const mw_model *m, uint64_t *act, uint64_t *grad);
/* ... and of a tied embedding's head input (the final norm's output: k_head's value 2), which the
 * last stage sends the first (layout.c) */
uint64_t mw_graph_pipe_head_bytes(const mw_model *m);
/* Adds every buffer of the step to pl (planning, placed NULL), or binds m's pointers to placed
 * (offsets from the planner, same order) inside base. The two modes make the same walk. */
mw_status mw_graph_walk(mw_model *m, mw_planner *pl, const mw_pbuf *placed, char *base);

/* ---- layout.c ---- */

/* A pipeline stage's transfer kinds: arch->nkinds + these (m->pkind). With a tied embedding the
 * last stage sends each micro-batch's head input (the final norm's output) to the first, which
 * receives it and forms the head's gradient of the embedding there (src/dist/pipetied.c). */
enum { MW_PK_RECV, MW_PK_SEND, MW_PK_RECV_GRAD, MW_PK_SEND_GRAD, MW_PK_SEND_HEAD, MW_PK_RECV_HEAD, MW_PK_TIED_GRAD };
/* Whether this pipeline stage has a tied embedding to share (cfg.pp > 1, a tied model: GPT-2, or
 * Llama's --tied 1) */
static inline int mw_graph_pipe_tied(const mw_config *c) {
    return c->pp > 1 && !c->inference && (c->arch == MW_ARCH_GPT2 || (c->arch == MW_ARCH_LLAMA && c->tied));
}

/* Rows and columns of a tensor declared r x c with split (MW_TS_*) on this rank of the layout. */
void mw_graph_layout_dims(const mw_model *m, int split, int *r, int *c);
/* Whether this rank (its pipeline stage) holds a tensor outside the blocks: before them (after 0)
 * or after them (after 1), declared at (MW_AT_*). */
int mw_graph_layout_holds(const mw_model *m, int after, int at);
/* Bytes of a value of split (MW_VS_*) on this rank. */
uint64_t mw_graph_layout_bytes(const mw_model *m, int split, uint64_t bytes);
/* A pipeline stage's schedule: its micro-batches' forwards and backwards in 1F1B order, with the
 * receives and sends between stages, then the optimizer. */
mw_status mw_graph_stage_schedule(mw_model *m);
/* A layout that runs (not only planned): tensor parallelism (with or without sequence
 * parallelism, src/dist/tp.c), a pipeline (src/dist/pipeline.c), or both, each with data-parallel
 * replicas; without expert parallelism or --vpp. */
static inline int mw_graph_layout_runs(const mw_config *c) {
    return c->ep <= 1 && c->vpp <= 1 && (c->tp > 1 || (c->pp > 1 && !c->sp));
}
/* What a pipeline stage's run does not build yet, refused before anything runs (MW_ERR_ARG naming
 * it; src/dist/pipeline.c). */
mw_status mw_pipe_check(const mw_config *c);
/* A tied embedding under --pp (src/dist/pipetied.c): op i, the first stage's "tied head grad"
 * (dloss: the head's loss scale); the first stage's table into the last stage's copy (collective
 * over those two; a no-op elsewhere). */
void mw_pipe_tied_grad(mw_model *m, int i, float dloss);
mw_status mw_pipe_tied_sync(mw_model *m);
uint64_t mw_pipe_tied_floats(const mw_model *m); /* the table's floats on this rank (--tp: its shard) */
/* --zero 2 under --pp (src/dist/pipezero.c): the gradient norm of every stage's replicas' shards
 * of the summed gradient (m->zacc), one process's bits (collective over the stage's replicas and
 * the pipeline) */
mw_status mw_pipe_shard_norm(mw_model *m, double *norm);
/* ... and what a tensor-parallel rank's (src/dist/tp.c). */
mw_status mw_tp_check(const mw_config *c);
/* m's cfg as this rank sees it: the stage's blocks as blocks 0 .. pp_blocks - 1. */
void mw_graph_layout_local(mw_config *c);

/* ---- place.c ---- */

/* Plans the model's buffers: fills pl (placed; the caller frees it on success) and s. */
mw_status mw_graph_plan_model(mw_model *m, mw_planner *pl, mw_plan_summary *s);

/* ---- chunkplace.c ---- */

/* The placement of m->offload (a plain mode, spec "") or of the chunk form spec: m->blk, dcat,
 * chunked, and m->offload the widest mode it uses. MW_ERR_ARG as mw_chunks_parse. */
mw_status mw_graph_chunks_set(mw_model *m, const char *spec);
/* The --offload value that gives m's placement: the mode's name, or the per-category form. */
void mw_graph_chunks_pin(const mw_model *m, char *out, size_t n);
/* After the walk has bound the buffers: the blocks kept in memory get their pbase, gbase, obase. */
mw_status mw_graph_chunks_bind(mw_model *m);
/* m's placement as cfg.offload_spec ("" for a plain mode): with offload = m->offload, a config that
 * plans the same placement. */
void mw_graph_chunks_spec(const mw_model *m, char *out, size_t n);
/* Where the optimizer's array w (0: M, 1: V) of flat element lo of segment seg is in memory
 * (NULL when on the disk tier or the optimizer has no such array). */
void *mw_graph_opt_resident(const mw_model *m, int w, int seg, size_t lo);
void mw_graph_chunks_free(mw_model *m);
/* --offload auto without data parallelism: the chunks resident that fill the budget (chunkplace.c's
 * chain), compared with a few fewer under --recompute auto; sets the placement and offload_why. */
mw_status mw_graph_chunks_auto(mw_model *m);

/* The categories (MW_CHUNK_*) the ends may keep on disk: parameters and gradients in one process
 * without a layout (not the gradients under --precision bf16: the ends' are fp32, the disk tier's
 * bfloat16), the optimizer state always. */
unsigned mw_graph_ends_allowed(const mw_model *m);

/* ---- ends.c ---- */

/* Per op (m->op_end): it binds the embeddings' parameters (P0, read at it), the head's (P1), a
 * tied head's embedding (PT), whose reads start before the op ahead of the head (S1, ST) and land
 * while it computes; the gradients of the embeddings (GB0) or of the head (GB1) come in before it,
 * and are written after it (GE0, GE1). */
enum {
    MW_END_P0 = 1, MW_END_P1 = 2, MW_END_PT = 4, MW_END_GB0 = 8, MW_END_GB1 = 16, MW_END_GE0 = 32, MW_END_GE1 = 64,
    MW_END_S1 = 128, MW_END_ST = 256
};
/* A tied LM head: it reads the embedding (GPT-2, --tied 1) */
int mw_graph_tied(const mw_config *c);
/* End e (0: segment 0, 1: segment L + 1) keeps array a on the disk tier. */
int mw_graph_end_disk(const mw_model *m, int e, int a);
/* The bytes of one read or write of end e's parameters or gradients (fp32, padded). */
uint64_t mw_graph_end_bytes(const mw_model *m, int e);
/* The ops between which the ends' buffers live (first[k] .. last[k]; -1 none): pend[0], pend[1],
 * pend[2], gend[0], gend[1]. */
void mw_graph_ends_span(const mw_model *m, int first[5], int last[5]);
/* m->op_end read off the schedule and the placement; MW_ERR_NOMEM. */
mw_status mw_graph_ends_build(mw_model *m);
/* Around op i: the ends' reads and binds before it, their unbinds and gradients' writes after it
 * (train 0: the parameters alone). A failed transfer's status. */
mw_status mw_graph_ends_before(mw_model *m, int i, int train);
mw_status mw_graph_ends_after(mw_model *m, int i, int train);
/* The bytes op i reads (first_mb: the step's first micro-batch, whose gradients start from zero)
 * and writes for the ends, and the parameters' reads of one micro-batch. */
uint64_t mw_graph_ends_op_read(const mw_model *m, int i, int first_mb);
uint64_t mw_graph_ends_op_write(const mw_model *m, int i);
uint64_t mw_graph_ends_param_reads(const mw_model *m);
/* Outside a step: end segment seg's parameters read into its buffer (another end's, or a block's
 * held for access, written back first), marked written when write; NULL (io_error set) on a failed
 * transfer. And the end held written back where written, then forgotten. */
float *mw_graph_end_access(mw_model *m, int seg, int write);
mw_status mw_graph_ends_settle(mw_model *m);

/* ---- transfer.c ---- */

/* The disk tier's layout: bits per array, its segments (the model's, or --zero's three around the
 * shard), the layout they give, whether a chunk cuts a quantised block, the optimizer's traffic. */
void mw_graph_disk_bits(const mw_model *m, int bits[MW_ARR_COUNT]);
int mw_graph_disk_segs(const mw_model *m, const size_t **lo, const unsigned **mask);
void mw_graph_disk_layout(const mw_model *m, mw_offload_layout *lay);
int mw_graph_opt_split_in(const mw_model *m, const mw_offload_layout *lay);
void mw_graph_opt_traffic(const mw_model *m, const mw_offload_layout *lay, uint64_t *rd, uint64_t *wr);
/* The bytes of one read of segment seg's parameters by a visit, and of block l's gradients once. */
uint64_t mw_graph_visit_bytes(const mw_model *m, int seg);
uint64_t mw_graph_grad_bytes(const mw_model *m, int l);
/* The disk tier's (and bf16's, --zero 2's) segments over the parameter table, and --zero's bounds. */
mw_status mw_graph_build_segments(mw_model *m);
/* One micro-batch's transfers read off the schedule (visits, prefetches, gradient binds). */
mw_status mw_graph_build_transfers(mw_model *m);
/* A failed transfer of a call without a status is recorded (io_failed) and returned by the next
 * call that has one (io_check). */
void mw_graph_io_failed(mw_model *m, mw_status st);
mw_status mw_graph_io_check(const mw_model *m);
mw_status mw_graph_params_settle(mw_model *m);
mw_status mw_graph_grads_settle(mw_model *m);
mw_status mw_graph_step_begin(mw_model *m);
mw_status mw_graph_zero3_wait(mw_model *m);
void mw_graph_zero3_poll(mw_model *m);
mw_status mw_graph_param_visit(mw_model *m, int j);
mw_status mw_graph_grad_bind(mw_model *m, int l);
mw_status mw_graph_grad_done(mw_model *m, int l);

/* ---- narrow.c ---- */

/* In place: n bfloat16 at buf's start widened to n floats over buf (n floats of room), and back. */
void mw_graph_widen_inplace(float *buf, size_t n);
void mw_graph_narrow_inplace(float *buf, size_t n);
/* The blocks' vectors that stay fp32 in memory (m->vec_t, vec_off, pvec_floats); MW_ERR_NOMEM. */
mw_status mw_graph_narrow_build(mw_model *m);
/* A block's bfloat16 copy, read into slot, made its parameters: widened, its vectors' fp32 over it. */
void mw_graph_narrow_bind(mw_model *m, int seg, float *slot);
/* The optimizer's chunk [lo, hi) of segment seg: its updated parameters p rounded into h (the
 * copy's chunk) and its vectors' fp32 values kept in pvec. */
void mw_graph_narrow_chunk(mw_model *m, int seg, size_t lo, size_t hi, const float *p, uint16_t *h);

/* The gradient norm's quantum sums at each block's backward end (g: its gradients as bfloat16, what
 * the disk gets), whether they are ready for this step's norm, and the sums of the tensors before
 * and after the blocks, done when the norm is asked for (then m->nparts holds every quantum's). */
void mw_graph_norm_block(mw_model *m, int l, const uint16_t *g);
int mw_graph_norm_ready(const mw_model *m);
void mw_graph_norm_ends(mw_model *m);

/* ---- exec.c ---- */

/* parts[b] += the squares of elements lo..hi-1 of gv (floats, or bfloat16 when g16; gv[0] is element
 * lo) in quantum b (MW_NORM_QUANTUM), each quantum's in element order. */
void mw_graph_sumsq_parts(double *parts, const void *gv, int g16, size_t lo, size_t hi);

/* The gradients of flat elements [lo, hi) of segment seg as floats, outside the disk tier: where
 * they are, or a block's bfloat16 ones widened into gslot[0] (zeros when stale); valid until the
 * next call. */
float *mw_graph_grads_chunk(const mw_model *m, int seg, size_t lo, size_t hi);
/* A pipeline stage's partial sums of the gradient norm over one process's quanta (MW_NORM_QUANTUM):
 * its flat buffer is elements [g0, g0 + nfloats) of one process's; parts[b - g0 / Q] for each
 * quantum b it touches, the first continuing from carry when g0 is inside it. The same additions in
 * the same order as mw_graph_grad_norm's, from the gradients where they are (flat, or bfloat16
 * blocks widened segment by segment). */
mw_status mw_graph_grad_parts_at(mw_model *m, uint64_t g0, double carry, double *parts);
/* Each tensor's sum of squares of its gradients, wherever they are (flat, bfloat16 blocks, the disk
 * tier): quanta of MW_NORM_QUANTUM elements from the tensor's first, each quantum's sum in element
 * order from +0, the quanta added in order from +0; fn(ctx, i, sum) for every tensor i in table
 * order. Uses the optimizer op's norm parts (the largest tensor's quanta). */
typedef void (*mw_tensor_sum_fn)(void *ctx, int i, double sum);
mw_status mw_graph_grad_tensor_sums(mw_model *m, mw_tensor_sum_fn fn, void *ctx);
/* The same walk over flat elements [lo, hi) alone (g: element lo's gradient), from the state st the
 * range before it left (i: the tensor in progress, or the first to start; open: that tensor's open
 * quantum's partial sum; sum: its ended quanta's), which it leaves for the range after it (--zero 2
 * under --tp: a replica's shard, the state passed along the replicas; {0, 0, 0} for the first). */
typedef struct mw_tensor_walk {
    double open, sum;
    int i;
} mw_tensor_walk;
void mw_graph_grad_tensor_range(mw_model *m, mw_tensor_walk *st, const float *g, size_t lo, size_t hi, mw_tensor_sum_fn fn,
                                void *ctx);
/* The step's inputs and targets (may be NULL) into op 0's values, checked against the vocabulary. */
mw_status mw_graph_load_tokens(mw_model *m, const int32_t *inputs, const int32_t *targets);

/* ---- recompute.c ---- */

const char *mw_graph_policy_name(int p);
/* "full", "every:3", or runs of layers: "full 0-3, selective 4-11" */
void mw_graph_policy_text(const mw_model *m, char *out, size_t len);
/* m->pol and m->seg from cfg.recompute (auto: searched under the budget). */
mw_status mw_graph_resolve_policy(mw_model *m);
/* Seconds per op kind at cfg's shape, measured on this machine (cost[a->nkinds], at most 64). */
mw_status mw_graph_measure_costs(const mw_config *c, const mw_model_def *a, double *cost);
/* The recomputation seconds of ops[from..nops) of m (the forward kinds among them). */
double mw_graph_ops_cost(const mw_model *m, int from, const double *kc);
double mw_graph_step_cost(const mw_model *m, const double *kc);
/* --recompute auto over the recomputation policies alone: m->pol, m->seg; *pred (may be NULL): its
 * predicted recomputation seconds per micro-batch, INFINITY when nothing fits. */
mw_status mw_graph_auto_policy(mw_model *m, double *pred);
/* The per-block memory model of one policy, read off a uniform plan's live bytes (under m->act_sel
 * as it stands): what a block keeps from forward to backward, the most bytes alive (everything but
 * the blocks below it) during its forward and during its backward, and during the head, and before
 * and after the blocks. Leaves m's schedule built for that policy. */
typedef struct mw_pmodel {
    uint64_t kept, fwd, bwd, head, tail;
} mw_pmodel;
mw_status mw_graph_probe_policy(mw_model *m, int p, mw_pmodel *pm);
/* The placed plan's peak of m's schedule. */
mw_status mw_graph_plan_peak(mw_model *m, uint64_t *peak);

/* ---- actchoice.c ---- */

/* --act-layers into m->act_sel (nothing without it). */
mw_status mw_graph_act_sel_from_config(mw_model *m);
/* Whether --recompute auto chooses per kept value (--act-compress-max, or --act-offload auto). */
int mw_graph_act_choice_wanted(const mw_model *m);
/* That choice: m->pol and m->act_sel (or recompute-only auto's, m->seg, when that is predicted as
 * fast), with m->act_choice and m->pred_act. */
mw_status mw_graph_act_choose(mw_model *m);
/* The --act-layers text of m->act_sel ("" when NULL). */
void mw_graph_act_sel_text(const mw_model *m, char *out, size_t n);
#endif
