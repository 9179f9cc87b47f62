/* The step graph: what every model shares. A model (src/model/gpt2.c, src/model/llama.c) declares
 * its parameter table, the op kinds of one block and of its head with the values each reads and
 * writes, the sizes of those values, and the kernels each kind runs (mw_model_def). This module builds
 * the schedule of one step under a recomputation policy, walks it to derive every buffer and its
 * lifetime, places them (src/memory/planner.c), binds each op's pointers in one arena, runs the
 * schedule, and chooses per-block policies for `auto`. It knows no model but the def it is handed
 * (src/model/models.c). A file per concern: schedule.c, place.c, exec.c, transfer.c, recompute.c,
 * state.c, layout.c (a parallel layout's rank; graph_impl.h says what each owns); docs/graph.md draws how a step flows through them.
 *
 * The walk: a write starts a new instance of a value, which lives until its last read before the
 * next write. A value the schedule recomputes before backward therefore dies during forward by
 * itself, and the same walk that plans the memory binds the pointers the executor uses: the
 * estimate is the allocation, byte for byte, for every policy and every model. */
#ifndef MW_GRAPH_H
#define MW_GRAPH_H
#include <stdint.h>

#include "memwall.h"
#include "../core/arena.h"
#include "../kernels/cpu/gemm.h"
#include "../optim/optim.h"

#define MW_MAXACC 10         /* values one op kind may access */
#define MW_LOSS_ROWS 256     /* the head and the loss run over this many positions at a time */
/* --precision bf16: the products whose bfloat16 outputs pass through an fp32 chunk first (qkv,
 * the MLP's first) run over this many rows at a time. Rows are independent, so any count gives
 * the same bits; fewer rows pack the weights more often (a 256-row chunk packed GPT-2's 3072-wide
 * ones four times per 1024 rows), more take more workspace. */
#define MW_CHUNK_ROWS 1024
#define MW_NORM_QUANTUM 65536 /* grad-norm partial sums and init streams over fixed blocks */
#define MW_MAX_EXT 8         /* a model's own persistent buffers (KV cache, position tables) */

/* An access's slot, the value it names:
 *   0 .. nls-1        value v of the op's own block (mw_model_def.lslot_names[v]; 0: the block's input)
 *   MW_SLOT_NEXT      the next block's value 0: what the block writes as its output and the next
 *                     block (or the head, after the last) reads as its input
 *   MW_SLOT_STEP(g)   value g of the step, shared by every block (0 <= g < ngs: gslot_names[g])
 * The walk turns them into one index per value instance (schedule.c, resolve_slot). */
#define MW_SLOT_NEXT 100
#define MW_SLOT_STEP(g) (-1 - (g))
enum { MW_R, MW_W, MW_U }; /* read; write (a new instance); update in place */

/* Per-block recomputation policies */
enum { MW_P_NONE, MW_P_SEL, MW_P_FULL };

/* Kind flags. FWD: a forward op of a block (recomputable, timed by auto's calibration). COMM: a
 * transfer between the ranks of a parallel layout (a pipeline stage's sends and receives), which
 * src/dist/pipeline.c runs (the model's run_op never sees one). */
enum { MW_KF_FWD = 1, MW_KF_COMM = 2, MW_KF_OWNQ = 4, MW_KF_OWNDQ = 8 };
/* OWNQ: the kind reads the block's values it accesses exact and makes their --act-compress round
 * trip itself, group by group (mw_graph_act_round_rows): no kind cut falls before it.
 * OWNDQ: a backward kind that dequantises the compressed values it reads itself, row group by row
 * group (mw_graph_act_rows): a value stored compressed up to it has no dequantised copy of all
 * its rows; the op must be its last reader (else the value stays uncompressed). */

/* How a value (a model's lslot or gslot, mw_model_def.lslot_split/gslot_split) divides over the
 * tensor-parallel ranks of a layout (cfg.tp; src/graph/layout.c):
 *   MW_VS_WHOLE  whole on every rank (token ids, per-position losses, workspace per thread);
 *   MW_VS_TP     divided by tp: a value over the heads, the MLP's hidden width or the vocabulary
 *                (Megatron's column-parallel outputs and row-parallel inputs);
 *   MW_VS_SEQ    the norms' and the residual stream's values: whole on every rank, divided by tp
 *                with sequence parallelism (cfg.sp; Korthikanti et al., Section 4.2.2). */
enum { MW_VS_WHOLE, MW_VS_TP, MW_VS_SEQ };
/* How a parameter tensor divides over the tensor-parallel ranks (mw_graph_add_tensor_split):
 * MW_TS_WHOLE replicated (norms, row-parallel biases, position tables); MW_TS_ROWS its rows
 * (dims[0], the output features of an (out, in) matrix: column-parallel qkv/fc and their biases,
 * the vocabulary of a vocab-parallel embedding or head, padded up to a multiple of tp as Megatron
 * pads it); MW_TS_COLS its columns (dims[1], the input features: row-parallel proj/fc2). */
enum { MW_TS_WHOLE, MW_TS_ROWS, MW_TS_COLS };
/* Which pipeline stages hold a tensor outside the blocks (a block's tensors are its stage's):
 * MW_AT_AUTO the first stage for one added before the blocks, the last for one added after;
 * MW_AT_ENDS both (a tied embedding: the last stage keeps its copy for the head, as Megatron). */
enum { MW_AT_AUTO, MW_AT_ENDS };
/* How a kind's time scales with the shape: N*C elementwise, N*C^2 matmul, B*T^2*C attention,
 * N*C*V the head (the backward kinds' classes serve the step's predicted compute alone) */
enum { MW_COST_ELEM, MW_COST_MATMUL, MW_COST_ATTN, MW_COST_HEAD };
#define MW_COST_PARTS 6 /* mw_model_def.cost_sum: parts of a kind's cost, 0 ended */

typedef struct mw_access {
    signed char slot, mode;
} mw_access;

typedef struct mw_kind {
    const char *name;
    int n;
    mw_access a[MW_MAXACC];
    unsigned char flags, cost;
} mw_kind;

typedef struct mw_tensor {
    char name[64];
    int ndim, dims[2];
    size_t numel, offset; /* offset in floats inside the flat parameter buffer */
    int decay;
    int layer; /* the block it belongs to (mw_graph_block), -1 for the embedding and the head */
    int seg;   /* its segment of the disk tier (MW_OFFLOAD_OPTIMIZER_GRADS, ALL): 0 before the
                  blocks, 1 + layer, L + 1 after */
    unsigned char split; /* MW_TS_*: how it divides over tensor-parallel ranks (dims are this rank's) */
    unsigned char groups; /* MW_TS_ROWS: the rows are this many equal groups, each divided over the ranks
                             (GPT-2's fused q|k|v: 3, so that a rank holds its heads' q, k and v); 1 */
    int gdims[2];         /* the whole tensor's dims, as one process holds it (and checkpoints store it) */
    unsigned char seqp;   /* --sp: its gradient is each rank's rows' (mw_tp_tensor_seq) */
    unsigned char pad;    /* padded in the flat buffer (mw_graph_add_tensor's pad): one process's layout */
} mw_tensor;

/* A read of the disk tier that a parameter visit starts: segment seg's parameters into staging
 * slot slot (pslot[slot]); seg < 0: no read. */
typedef struct mw_seg_read {
    int seg, slot;
} mw_seg_read;

typedef struct mw_op {
    unsigned char kind;
    unsigned char bwd; /* pushed in its micro-batch's backward (a forward kind there: recomputed) */
    unsigned short mb; /* its micro-batch among those a pipeline stage has in flight (0 otherwise) */
    int layer;
} mw_op;

/* A model's own persistent buffer (beyond parameters, gradients, moments, GEMM workspace and
 * token staging), bound to m->ext[i]. */
typedef struct mw_ext {
    const char *name;
    uint64_t bytes;
    mw_category cat;
} mw_ext;

typedef struct mw_model_def mw_model_def;

struct mw_model {
    mw_config cfg;
    const mw_model_def *arch;
    mw_plan_summary plan;
    mw_arena arena;
    int ntensors, nthreads;
    mw_tensor *tensors;
    size_t nfloats; /* flat parameter buffer length, padding included */
    float *params, *grads;
    void *m, *v;            /* the optimizer's per-element arrays M and V (opt.bits wide; NULL when
                               it has none or they are on the disk tier) */
    mw_opt_layout opt;      /* the optimizer (cfg.optim) over the flat buffer (training models) */
    void *ostate;           /* its small state (scales, factored moments), always in memory */
    void *oscratch;         /* its per-step scratch, planned for the optimizer op only */
    int32_t *staging;       /* the trainer's token windows: inputs (N), targets (N), window (B*(T+1)) */
    float *ext[MW_MAX_EXT]; /* the model's own persistent buffers (mw_model_def.ext) */
    mw_gemm_ws gw;          /* the GEMMs' packing buffer (workspace in the plan) and threads */
    unsigned char *pol;     /* per block: MW_P_NONE, MW_P_SEL or MW_P_FULL */
    int seg;                /* every:K: blocks per recomputed segment (0: per-block policies) */
    mw_op *ops;             /* the schedule of one micro-batch and the optimizer */
    int nops, ops_cap, head_op, opt_op;
    void **opp; /* MW_MAXACC pointers per op: its values, in the order of its kind's access list */
    int has_targets;
    mw_progress_fn progress; /* mw_model_set_progress: told of mw_evaluate's batches */
    void *progress_user;
    int offload;             /* the placement planned: cfg.offload with auto resolved */
    int building_layer;      /* mw_graph_block's block for the tensors added next (-1: none) */
    int building_expert;     /* the tensors added next are a routed expert's (cfg.ep: this rank's) */
    size_t expert_floats;    /* the routed experts' floats in the flat buffer, padding included:
                                under --ep ZeRO shards them over the expert-data-parallel group
                                (cfg.world / cfg.ep ranks), the rest over cfg.world */
    int built_blocks;        /* a block's tensor was added (those outside blocks after it: the head's) */
    int add_skipped;         /* the last mw_graph_add_tensor_split was another pipeline stage's tensor */
    int building_mb, building_bwd; /* the micro-batch and phase of the ops pushed next (mw_op) */
    int nmb;                 /* micro-batches with values of their own in the schedule (1; a stage's M) */
    int walk_mb;             /* a 1F1B stage's plan (place.c): the micro-batches its schedule walks when
                                fewer than cfg.accum (src/memory/period.h's cut); 0: all */
    mw_kind pkind[7];        /* a pipeline stage's sends and receives (src/graph/layout.c), kinds
                                arch->nkinds .. + 6 (MW_PK_*) */
    size_t pad_q;            /* a padded tensor ends on a multiple of this many floats: 16 (64 bytes),
                                or the quantised optimizer's block, so that its blocks tile chunks */
    /* the disk tier's segments (src/memory/offload.h): flat bounds, the arrays each holds on disk,
     * and where each segment's parameters and gradients are in memory now (NULL: not bound; all
     * bound when the flat buffers m->params, m->grads hold them) */
    int nseg;
    size_t *seg_lo;
    unsigned *seg_mask;
    float **pbase, **gbase;
    float *pres[2], *gres[2];          /* the resident segments before and after the blocks */
    /* the chunk placement (src/graph/chunkplace.c): per block its categories on disk
     * (MW_CHUNK_P|G|O of src/memory/chunks.h), and those of any block (dcat); chunked: an explicit
     * or auto's placement, whose blocks are segments even for the optimizer state alone. A block
     * that keeps a category on disk elsewhere has its own memory for it: pblk, gblk (its segment's
     * parameters, gradients at pbase/gbase, bound for good) and oblk (the optimizer's arrays M and
     * V of every segment that keeps them, at obase[0/1][seg]) */
    unsigned char *blk;
    unsigned char eblk[2];             /* ... and the ends' (0: the tensors before the blocks, seg 0;
                                          1: those after them, seg L + 1) */
    unsigned dcat;
    int chunked;
    float *pblk, *gblk;
    void *oblk[2];
    void **obase[2];
    /* an end on disk (src/graph/ends.c): its parameters come into pend[0] for the embedding's op,
     * pend[1] for the head's (seg L + 1), pend[2] for a tied head's read of the embedding, planned
     * for those ops alone; its gradients into gend[0] (from the first op that adds to them to the
     * embedding's backward) and gend[1] (the head's op), read back or zeroed before and written
     * after; per op what it binds (MW_END_*), and outside a step the end held for access */
    float *pend[3], *gend[2];
    int *op_end;
    unsigned char efresh[2];           /* the end's gradients on disk are stale (zeros) */
    int eacc, eacc_dirty;              /* the segment pend[eacc ? 1 : 0] holds for access (-1 none) */
    int eid[2];                        /* the reads in flight into pend[1], pend[2] (-1 none) */
    float *pslot[3], *gslot[3];        /* block staging: parameters (ALL), gradients (+GRADS) */
    int pslot_seg[3], pslot_id[3];     /* segment a slot holds (-1 none), its read in flight (-1) */
    int gslot_seg[3], gslot_id[3];     /* ..., its write in flight */
    int access_dirty;                  /* pslot[0] holds parameters written outside a step */
    int access_p;                      /* pslot[0] holds a block read for access (fp32 P), not a visit's */
    int pslot_h[3];                    /* a slot's read is of the bfloat16 copy (H), to widen at its bind */
    int nvec, *vec_t;                  /* --precision bf16, --offload all (src/graph/narrow.c): the
                                          blocks' vectors (tensor indices), ... */
    size_t *vec_off, pvec_floats;      /* ... where each is in pvec, and its floats */
    float *pvec;                       /* ... their fp32 values, in memory (params_vec) */
    double *nparts;                    /* the norm's quantum sums at the blocks' backward (narrow.c) */
    float *npend;                      /* ... a quantum's elements waiting for the block it starts in */
    size_t npend_lo, npend_len;        /* ... the first of them, how many */
    int nready;                        /* ... blocks summed in this backward (-1: not ready) */
    unsigned char *gfresh;             /* per block: its gradients on disk are stale (zeros) */
    uint16_t *g16;                     /* --precision bf16 without the disk tier: the blocks'
                                          gradients as bfloat16, flat elements seg_lo[1] to
                                          seg_lo[L + 1] (a block's accumulate in gslot[0], fp32) */
    int *op_pv, *op_gb, *op_ge;        /* per op: param visit index (-1), grads bound / done here */
    int nvisit, *visit_seg, *visit_slot; /* param visits of one micro-batch: segment, slot */
    mw_seg_read *visit_rd;             /* per visit, 3 entries: the reads it starts (seg < 0: none) */
    int visit_carry, visit_end[3];     /* --accum: the slots' state the first micro-batch's plan ends
                                          in, and how many micro-batches start from it (transfer.c) ... */
    int *visit_slot1, vplan;           /* ... with these slots and reads; vplan: the micro-batch running
                                          uses them (1) or visit_slot, visit_rd (0) */
    mw_seg_read *visit_rd1;
    int gvisit;                        /* grad visits bound so far in this micro-batch */
    double compute_s;                  /* seconds in the ops and the optimizer's chunks (the clock
                                          mw_model_times reads; the waits on I/O are outside) */
    mw_status io_error;                /* a failed transfer outside a status-returning call */
    char io_msg[512];                  /* ... and its message */
    /* data parallelism (cfg.dp, src/dist/zero.c): the ranks, this rank's shard [zlo, zhi) of the
     * flat buffer (its optimizer state under --zero 1), the gradient sum of the step's earlier
     * micro-batches over the shard (accum > 1), and the buffer that receives every rank's piece
     * of the shard, MW_ZERO_BUCKET floats per rank at a time */
    mw_comm *comm;
    size_t zlo, zhi, zrq;
    float *zacc, *zrecv;
    int zk; /* the micro-step running (its exchanges start the sum at 0) */
    size_t zoff_lo[4];    /* --offload optimizer with --zero >= 1: the disk tier's segments, flat */
    unsigned zoff_mask[3]; /* elements before the shard (nothing), the shard (M, V), after (nothing) */
    float *zparams; /* --zero 3: the parameters of the shard, the only copy of the blocks' */
    void *zpre;      /* --zero 3: the next block's gather in flight (NULL: none) into pslot[zpre_slot] */
    int zpre_seg, zpre_slot;
    int zres_dirty; /* --zero 3: the resident segments' parameters were written outside a step */
    struct mw_act_plan *act; /* stored activations: swaps and compression (src/graph/actstore.c) */
    char act_why[200];       /* --act-offload auto's reasons ("" otherwise) */
    unsigned char *act_sel;  /* per block, what it stores (mw_act_sel_*, actstore.h): --recompute auto's
                                choice per kept value or --act-layers; NULL: the flags decide */
    char act_choice[240];    /* --recompute auto's reasons for it ("" otherwise) */
    double pred_act[4];      /* its prediction per micro-batch: recomputation, (de)quantisation, swaps
                                not hidden, their sum (seconds; -1: none) */
    char offload_why[320];   /* auto's reasons ("" otherwise) */
    /* tensor parallelism (cfg.tp > 1, src/dist/tp.c): the tensor-parallel group (NULL until
     * mw_model_set_comm), its workspace (the all-reduces' receive buffer, tpq floats per rank, then
     * the loss's per-row statistics) */
    mw_comm *tpc;
    float *tpbuf;
    size_t tpq;
    float *spbuf;    /* --sp: the all-gathers' whole (N, C) and the reduce-scatters' partial sums */
    int tp_sp_dirty; /* --sp: a backward ran since the norms' gradients were summed over the ranks */
    int tp_mb;       /* --sp, fp32 gradients on disk: the step's micro-batches done, or (a pipeline stage) the one whose backward runs; its last sums the norms' */
    void *off_stage;         /* MW_OFFLOAD_OPTIMIZER: the moments' staging buffer (optimizer op) */
    struct mw_offload *off;  /* ... and the disk tier holding them (src/memory/offload.c) */
    /* a pipeline stage (cfg.pp > 1, src/dist/pipeline.c): the global index of its tensor 0 in the
     * single-process table (the stage holds a run of it), the tensors before the blocks that another
     * stage holds, the pipeline's communicator (ranked by stage), and the planned buffers the sends
     * copy a value into before it leaves (0: the activations forward, 1: the gradient backward) with
     * the send in flight from each (NULL: none) */
    int tensor_base, pre_skipped;
    mw_config gcfg; /* the configuration as given: the whole model's (a checkpoint's header) */
    mw_comm *pcomm;
    void *psend[3], *preq[3]; /* 2: a tied embedding's head input, the last stage to the first */
    float *ptied; /* a tied embedding under --pp: the last stage's copy of the first stage's
                     (vocab, C) table for its head (not in its parameter table; sent after each
                     update, src/dist/pipeline.c); NULL elsewhere */
    int ptied_synced; /* the copy was sent once (the first step or evaluation of the run) */
    double pwait_ms, pstep_ms; /* the time this stage's steps waited for the others' messages, and took */
    int psteps;               /* (all but the first step: it makes the transports' connections) */
};

/* What a model declares. Op 0 of every schedule is k_embed, whose first two values are the
 * step's inputs and targets (int32, N each); the head kinds' value logits_acc is the logits,
 * losses_acc the (N) per-position losses (float). */
struct mw_model_def {
    const char *name;
    const mw_kind *kinds;
    int nkinds;
    const char *const *lslot_names; /* values of a block; value 0 is the block's input */
    int nls;
    const char *const *gslot_names; /* values of the step */
    int ngs;
    int k_embed, k_head, k_logits, k_embed_bwd, k_opt; /* head: loss and gradient; logits: inference */
    int logits_acc, losses_acc;
    /* How each value divides over tensor-parallel ranks (MW_VS_*, nls and ngs entries); NULL: the
     * model declares no split and a --tp layout is refused. The pipeline's sends and receives use
     * k_embed's first two values (inputs, targets) and k_embed_bwd's first (the residual stream's
     * gradient, updated by every block's backward). */
    const unsigned char *lslot_split, *gslot_split;
    /* Whether the model's kernels run a --tp/--sp rank and a pipeline stage (train), not only plan
     * one (src/dist/tp.c, src/dist/pipeline.c); 0: train refuses those layouts, naming the family. */
    int runs_layouts;
    /* Which block values tolerate being stored quantised between their forward and their backward
     * (--act-compress; nls entries, 1: lossy is fine); NULL: none does, and --act-compress is
     * refused. Keep statistics that scale whole rows (log-sum-exp, a norm's mean and rstd) exact. */
    const unsigned char *lslot_lossy;
    /* Per kind (nkinds entries; NULL: none), the kinds whose measured costs sum to its cost, each
     * as its index + 1, ending at 0 (0 first: its own cost): an op that runs what several kinds do
     * (GPT-2's MLP in row groups), which the calibration's small shape never schedules. The
     * forward kinds among the parts of a backward kind count as recomputation (mw_graph_ops_cost). */
    const unsigned char (*cost_sum)[MW_COST_PARTS];
    /* adds the parameter tensors (mw_graph_add_tensor) */
    mw_status (*build_table)(mw_model *m);
    /* pushes block l's forward ops (with_output 0: all but the one writing the next block's input) */
    void (*block_forward)(mw_model *m, int l, int with_output);
    /* pushes block l's backward under policy p, with the recomputations p needs */
    void (*block_backward)(mw_model *m, int l, int p);
    /* bytes and category of step value g, and bytes of block value v (activations) */
    void (*gslot)(const mw_model *m, int g, uint64_t *bytes, mw_category *cat);
    uint64_t (*lslot)(const mw_model *m, int v);
    /* the model's own persistent buffers, in binding order; returns how many (<= MW_MAX_EXT) */
    int (*ext)(const mw_model *m, mw_ext out[MW_MAX_EXT]);
    /* 1: every matrix of a block (2-D tensor) is read by bfloat16 products alone under --precision
     * bf16, and vectors by fp32 arithmetic; --offload all then streams a bfloat16 copy of the
     * blocks' parameters to forward and backward (src/graph/narrow.c). 0: the fp32 ones. */
    int params16;
    /* after the arena is bound (position tables); may be NULL */
    void (*bound)(mw_model *m);
    /* runs op i on its bound pointers; train: the head computes gradients scaled by dloss */
    void (*run_op)(mw_model *m, int i, int train, float dloss, double *loss_sum);
    /* one position of incremental decoding (inference models); NULL on bad input */
    const float *(*decode)(mw_model *m, int32_t token, int pos);
    /* fills the parameters from seed */
    void (*init)(mw_model *m, uint64_t seed);
    /* may be NULL. The family's own fields of --recompute auto's calibration model (recompute.c,
     * calib_config): k holds user's configuration scaled to two blocks of C' = k->n_embd channels,
     * heads of user's size, ffn and the key/value heads scaled with C'; the hook scales the rest
     * (the experts' widths and count, latent ranks) so that k times every forward kind of user's
     * blocks, and keeps k valid. */
    void (*calib_config)(const mw_config *user, mw_config *k);
};

/* The graph's entry points for a model family: the public ones that take a configuration
 * (mw_model_create, mw_plan, mw_plan_buffers, mw_plan_timeline, mw_config_tensor; memwall.h) live
 * with the families (src/model/models.c), which pick arch from cfg->arch and call these: the graph
 * knows no model but the one it is handed. cfg is validated first; arch NULL is then refused as an
 * unknown family. Contracts as the public functions'. */
mw_status mw_graph_model_create(mw_model **out, const mw_model_def *arch, const mw_config *cfg);
mw_status mw_graph_plan(const mw_model_def *arch, const mw_config *cfg, mw_plan_summary *out);
mw_status mw_graph_plan_like(const mw_model_def *arch, const mw_config *cfg, mw_plan_summary *out, mw_plan_ref **ref);
/* mw_plan_within (memwall.h) */
mw_status mw_graph_plan_within(const mw_model_def *arch, const mw_config *cfg, uint64_t limit, mw_plan_summary *out,
                               int *placed);
/* mw_plan_predict (memwall.h) */
mw_status mw_graph_plan_predicted(const mw_model_def *arch, const mw_config *cfg, mw_plan_summary *out);
mw_status mw_graph_plan_buffers(const mw_model_def *arch, const mw_config *cfg, mw_plan_buffer **out, int *n);
mw_status mw_graph_plan_timeline(const mw_model_def *arch, const mw_config *cfg, mw_plan_op **ops, int *nops);
/* A 1F1B stage's summary plan (mw_plan, mw_plan_like) walks a cut schedule where mw_period_cut
 * takes it as the whole one's fold (src/memory/period.h); mw_plan_buffers, mw_plan_timeline,
 * mw_plan_predict and mw_model_create walk every micro-batch. Tests: 0 walks every micro-batch
 * everywhere, 2 cuts from a first walk of the fewest micro-batches (more layouts cut, and more walks
 * asked again); returns the previous setting (not thread-safe). */
int mw_graph_set_cut(int on);
/* Tests: how many cut walks were refused and the plan walked every micro-batch instead. */
long mw_graph_cut_fallbacks(void);
/* Tests: mw_plan's placed planner (the caller frees it: mw_planner_free), and the micro-batches its
 * walk had (0: all, cfg->accum). */
struct mw_planner;
mw_status mw_graph_plan_placed(const mw_model_def *arch, const mw_config *cfg, struct mw_planner *pl, int *walked);
mw_status mw_graph_config_tensor(const mw_model_def *arch, const mw_config *cfg, int i, char *name, size_t name_len,
                                 int *ndim, int dims[2]);

#define MW_ZERO_BUCKET (1u << 18) /* floats per rank of one round of the gradients' exchange, at most */
#define MW_ZERO_RECV (1u << 22)   /* floats of the exchange's receive buffer, at most (16 MiB) */
/* cfg.dp with --zero >= 1: the optimizer's arrays cover [zlo, zhi) only */
static inline int mw_graph_opt_sharded(const mw_model *m) { return m->cfg.dp && m->cfg.zero >= 1 && !m->cfg.inference; }

/* src/dist/zero.c: the optimizer over this rank's shard, then every rank's parameters gathered;
 * the optimizer arrays' elements [off, limit) of a sharded model (this rank's shard; another's, to
 * write only: a scratch window that drops them, as a checkpoint load does) */
mw_status mw_zero_opt_step(mw_model *m, double lr, double grad_norm, int t);
/* --zero 2: this rank's gradient of elements [a, b) of the flat buffer (src[e - a]) summed into the
 * ranks' shards (collective: every rank calls it for the same range) */
mw_status mw_zero_exchange(mw_model *m, const float *src, size_t a, size_t b);
/* --zero 0 and 1: micro-step k's exchange of the whole flat gradient (this rank's micro-batch's,
 * formed from zero): the ranks' sum of their shards in rank order onto the earlier micro-steps',
 * into m->grads's shard after the last (last 1), else m->zacc; the rest of m->grads zeroed. And
 * every rank's shard of the summed gradient gathered into the whole of m->grads. (A pipeline
 * stage's data parallelism, src/dist/pipeline.c.) */
mw_status mw_zero_exchange_step(mw_model *m, int k, int last);
mw_status mw_zero_gather_grads(mw_model *m);
/* --zero 3: elements [a, b) of the flat parameters (a segment) into dst[e - a] from every rank's
 * shard (collective) */
mw_status mw_zero_gather_seg(mw_model *m, float *dst, size_t a, size_t b);
/* ... the gather started, left running (*req NULL when it ran at once): m->comm->wait ends it */
mw_status mw_zero_gather_start(mw_model *m, float *dst, size_t a, size_t b, void **req);
/* --zero 3: the blocks' parameters are gathered into slots as the schedule visits them */
static inline int mw_graph_params_zero3(const mw_model *m) { return m->cfg.dp && m->cfg.zero >= 3 && !m->cfg.inference; }
/* --zero 2: each micro-batch's gradients pass through block slots (mw_graph_grads_slotted, graph_impl.h) */
static inline int mw_graph_grads_zero2(const mw_model *m) { return m->cfg.dp && m->cfg.zero >= 2 && !m->cfg.inference; }
mw_status mw_zero_state_window(const mw_model *m, int which, size_t off, size_t limit, int write, void **p, size_t *n);
/* 1 when a chunk of the disk tier's stream cuts a block of the quantised optimizer (adamw8bit then
 * needs its first pass); 0 without the disk tier */
int mw_graph_opt_split(const mw_model *m);

/* For models: */
void mw_graph_push(mw_model *m, int kind, int layer);
/* The tensors added next belong to block l (-1: to none). */
static inline void mw_graph_block(mw_model *m, int l) { m->building_layer = l; }
/* Tensor i's parameters (which 0) or gradients (1) where they are now: in the flat buffer, or in
 * its segment's memory; NULL when on the disk tier and not bound (the executor binds a block's
 * before its ops run; mw_graph_param_access outside steps). */
static inline float *mw_graph_tensor(const mw_model *m, int which, int i) {
    const mw_tensor *t = &m->tensors[i];
    float *flat = which ? m->grads : m->params;
    if (flat) return flat + t->offset;
    float *const *base = which ? m->gbase : m->pbase;
    float *b = base ? base[t->seg] : NULL;
    return b ? b + (t->offset - m->seg_lo[t->seg]) : NULL;
}
/* The tied embedding as the LM head reads it (which 0) or accumulates its gradient (1): tensor 0;
 * on a pipeline's last stage the copy m->ptied, whose gradient the first stage forms (NULL: the
 * head adds none here; src/dist/pipetied.c). */
static inline float *mw_graph_tied_head(const mw_model *m, int which) {
    if (m->ptied) return which ? NULL : m->ptied;
    return mw_graph_tensor(m, which, 0);
}
/* Tensor i's parameters for reading (write 0) or writing (1) outside a step, bringing its block in
 * from the disk tier when it lives there: valid until the next call for another block. NULL (and
 * m->io_error set) when the transfer fails. */
float *mw_graph_param_access(mw_model *m, int i, int write);
/* Adds a tensor of r x c (c = 0: a vector of r) to the table. pad: the next tensor starts 64-byte
 * aligned; without, it follows at once (fused matrices such as q, k, v). */
void mw_graph_add_tensor(mw_model *m, const char *name, int r, int c, int decay, int pad);
/* ... declaring how it divides over tensor-parallel ranks (MW_TS_*) and, outside the blocks, which
 * pipeline stages hold it (MW_AT_*): under a layout (cfg.tp, cfg.pp) the table holds this rank's
 * share alone (mw_graph_add_tensor: MW_TS_WHOLE, MW_AT_AUTO). */
void mw_graph_add_tensor_split(mw_model *m, const char *name, int r, int c, int decay, int pad, int split, int at);
/* The tensor added last (MW_TS_ROWS) has g equal groups of rows, each divided over the ranks. */
static inline void mw_graph_tensor_groups(mw_model *m, int g) { m->tensors[m->ntensors - 1].groups = (unsigned char)g; }
/* The kind of an op: the model's, or a pipeline stage's send or receive (src/graph/layout.c). */
static inline const mw_kind *mw_graph_kind(const mw_model *m, int k) {
    return k < m->arch->nkinds ? &m->arch->kinds[k] : &m->pkind[k - m->arch->nkinds];
}
/* Tensor i drawn from N(0, std^2), in blocks of MW_NORM_QUANTUM with their own streams: the same
 * values for any thread count. */
void mw_graph_fill_normal(mw_model *m, int i, uint64_t seed, double std);
/* An inference model keeps all (B,T,V) logits and a KV cache; training and evaluation models
 * (MW_INFERENCE_EVAL) only one MW_LOSS_ROWS chunk's logits, and no cache. */
static inline int mw_graph_keeps_logits(const mw_config *c) { return c->inference == 1; }
/* --precision bf16: the model stores some values as bfloat16 (docs/precision.md) */
static inline int mw_graph_b16(const mw_model *m) { return m->cfg.precision == MW_PRECISION_BF16; }
/* element i of a value of bfloat16 (b16) or of floats */
static inline void *mw_graph_elt(void *p, size_t i, int b16) { return (char *)p + i * (b16 ? 2 : 4); }
/* dst = src, n floats, threaded */
void mw_graph_copy(float *dst, const float *src, size_t n);
/* An op that stores what it reads itself (a kind with MW_KF_OWNQ: GPT-2's MLP in row groups, whose
 * values live one group at a time): rows [r0, r0 + rows) of block layer's value v (width floats
 * each) made the round trip a kept value of that block makes under --act-compress (its width for
 * that block, its stream, the chunks from r0 * width on, which must start a chunk of the
 * quantiser: rows a multiple of mw_graph_act_round_rows_unit), so that the op reads what the
 * ungrouped ops would; nothing when the block or the value is not compressed. scratch holds
 * mw_graph_act_round_scratch() bytes. MW_ERR_ARG on a value that is not finite (named). */
size_t mw_graph_act_round_scratch(void);
/* an op's failure, returned by the executor after the op (graph_impl.h) */
void mw_graph_io_failed(mw_model *m, mw_status st);
size_t mw_graph_act_round_rows_unit(size_t width);
/* An MW_KF_OWNDQ op's read: rows [r0, r0 + rows) (width floats each) of the value op i's access j
 * reads, as floats: dequantised into dst (rows * width floats) when the value reaches op i
 * compressed (r0 * width then starts a chunk of the quantiser, and the rows end on one or at the
 * value's end: rows a multiple of mw_graph_act_round_rows_unit), else a pointer into the value
 * itself. NULL (mw_fail says why) on rows that are not whole chunks. */
const float *mw_graph_act_rows(mw_model *m, int i, int j, size_t r0, size_t rows, size_t width, float *dst);
/* The same for columns [c0, c1) of those rows alone, into dst (rows x (c1 - c0), rows ld apart): any
 * rows and columns (a quantiser group at a time). MW_OK. */
mw_status mw_graph_act_cols(mw_model *m, int i, int j, size_t r0, size_t rows, size_t width, size_t c0, size_t c1,
                            float *dst, size_t ld);
/* The width block layer's tolerant values are compressed to (0: none): --act-compress, or the
 * planner's choice for the block (m->act_sel). */
int mw_graph_act_bits(const mw_model *m, int layer);
mw_status mw_graph_act_round_rows(mw_model *m, int layer, int v, float *x, size_t r0, size_t rows, size_t width,
                                  char *scratch);

#endif
