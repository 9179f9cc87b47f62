/* Internal model functions beyond the public API (src/graph/: place.c, exec.c, transfer.c, state.c). */
#ifndef MW_GRAPH_MODEL_H
#define MW_GRAPH_MODEL_H
#include "memwall.h"

/* A data-parallel model (cfg.dp): this rank's shard [lo, hi) of the flat buffer (the whole buffer
 * otherwise), its parameters there (p[e - lo]), and tensor i's first flat element. */
void mw_model_shard(const mw_model *m, size_t *lo, size_t *hi);
const float *mw_model_shard_params(const mw_model *m);
size_t mw_model_tensor_offset(const mw_model *m, int i);
size_t mw_model_flat_floats(const mw_model *m); /* the flat buffer's length, padding included */
/* Parameters written outside a step (init, loads) go where they live (the disk tier, --zero 3's
 * shard), and the slots are forgotten; every rank at once under --zero 3. */
mw_status mw_model_params_settle(mw_model *m);
/* mw_train_step of a data-parallel model (cfg.dp; src/dist/zero.c) */
mw_status mw_zero_train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r);
/* A pipeline stage's step (cfg.pp > 1, src/dist/pipeline.c): the 1F1B schedule with its transfers,
 * the norm over every stage, the optimizer over the stage's parameters; collective over the
 * pipeline's stages. And its forward of one batch (the loss every stage gets: evaluation). */
mw_status mw_pipe_train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r);
mw_status mw_pipe_forward(mw_model *m, const int32_t *inputs, const int32_t *targets, float *loss);
/* A pipeline stage's place in the single-process model: the whole model's configuration (as
 * given, before the stage's local view), its communicator (NULL: not a bound stage), the global
 * index of its tensor 0. */
const mw_config *mw_pipe_global_config(const mw_model *m);
mw_comm *mw_pipe_comm(const mw_model *m);
int mw_pipe_tensor_base(const mw_model *m);
/* The optimizer's small state is two runs, each tensor after tensor (the quantised optimizers' M
 * scales, then their V scales; the others': one run): the bytes of the first. */
uint64_t mw_pipe_state_run0(const mw_model *m);
/* Arena-backed token staging of the trainer: 2*B*T + B*(T+1) int32. */
int32_t *mw_model_staging(mw_model *m);
/* The (B,T) per-position losses (-log p[target]) of the last mw_model_forward with targets, whose
 * mean was its *loss; valid until the next forward or step. */
const float *mw_model_losses(const mw_model *m);
/* Tells the progress function of mw_model_set_progress, if any, that done of total units ran. */
void mw_model_progress(const mw_model *m, int done, int total);
/* AdamW's moment which (0: m, 1: v) of tensor i, from element off (< numel) on: *p points at *n
 * >= 1 consecutive elements, valid until the next call. In memory, the rest of the tensor; on
 * the disk tier, at most to the end of a staging chunk, read in first. view is for reading; map
 * for writing, and mw_model_moments_done writes the last mapped chunk back. Call done after a
 * run of either, before the next step (the staging memory is the step's). MW_ERR_IO from the disk
 * tier, MW_ERR_ARG out of range. */
mw_status mw_model_moment_view(const mw_model *m, int which, int i, size_t off, const float **p, size_t *n);
mw_status mw_model_moment_map(mw_model *m, int which, int i, size_t off, float **p, size_t *n);
mw_status mw_model_moments_done(const mw_model *m);
/* The optimizer's state for checkpoints, as it is stored: part 0 and 1 its per-element arrays M
 * and V (the flat buffer's elements at mw_model_state_bits each; 0 bytes when it has none), part 2
 * its small state. view/map: from byte off on, *p at *n >= 1 bytes, valid until the next call;
 * mw_model_moments_done ends a run of them. */
uint64_t mw_model_state_bytes(const mw_model *m, int part);
int mw_model_state_bits(const mw_model *m, int part);
mw_status mw_model_state_view(const mw_model *m, int part, uint64_t off, const void **p, size_t *n);
mw_status mw_model_state_map(mw_model *m, int part, uint64_t off, void **p, size_t *n);
/* Tensor i's parameters for reading (from the disk tier when they live there), valid until the
 * next access to another block; mw_model_moments_done ends a run of them too. */
mw_status mw_model_param_view(const mw_model *m, int i, const float **p);
/* mw_model_tensor; access 0: without bringing a block's parameters in from the disk tier (data and
 * grad NULL where they are not in memory now), for the shape alone. */
mw_status mw_model_tensor_info(const mw_model *m, int i, mw_param_info *info, int access);
/* The gradients' global norm (mw_model_grad_norm) with the disk tier's failures as a status. */
mw_status mw_graph_grad_norm(mw_model *m, double *norm);
/* Tensor parallelism (cfg.tp > 1, src/dist/tp.c), for checkpoints: the group's size (1 without);
 * tensor i's shape whole (as one process holds it); the end row of the part of tensor i from whole
 * row `row` (mw_tp_part_end: at most the all-reduces' piece, m's tpq floats, at least a row); array which (0 parameters,
 * 1 AdamW's m, 2 v) of tensor i's whole rows [a, b) into out (rank 0's, with scratch as large;
 * both may be NULL on the others), gathered from every rank (collective); this rank's shard of the
 * whole tensor full into dst (which's array of tensor i). */
int mw_model_tp(const mw_model *m);
/* the tensor-parallel group (NULL without --tp, or before it is bound) */
mw_comm *mw_model_tp_comm(const mw_model *m);
void mw_model_tensor_whole(const mw_model *m, int i, int *ndim, int dims[2], size_t *numel);
int mw_model_tp_part_end(const mw_model *m, int i, int row);
mw_status mw_model_tp_gather_part(mw_model *m, int i, int which, int a, int b, float *out, float *scratch);
void mw_model_tp_take_part(const mw_model *m, int i, const float *part, size_t g0, size_t n, float *dst);
/* --tp, the other optimizers' state in the single-process checkpoint (src/dist/tp_state.c). Array
 * which of mw_model_tp_gather_part is then 1 M, 2 V of any width: an 8- or 4-bit code comes as a
 * float. One process's flat offsets of the whole tensors (ntensors + 1, the last its total;
 * malloc'd into *out); the bytes of part (0 M, 1 V, 2 the small state) in that layout; this rank's
 * elements of part's bytes [byte_off, byte_off + nbytes) of that layout (buf, read in any order)
 * into its arrays; the small state as one process holds it (malloc'd into *out, state_bytes;
 * collective: a 1-D shard's second moments gathered from every rank). */
/* Element `whole` of tensor i whole is this rank's element *local of its shard: 1, else 0. */
int mw_model_tp_local(const mw_model *m, int i, size_t whole, size_t *local);
mw_status mw_model_tp_whole_offsets(const mw_model *m, size_t **out);
uint64_t mw_model_tp_state_bytes(const mw_model *m, int part);
mw_status mw_model_tp_take_state(mw_model *m, int part, const void *buf, uint64_t byte_off, size_t nbytes);
mw_status mw_model_tp_state_whole(mw_model *m, float **out);
/* --tp, AdamW's moments where they are not in memory (the disk tier): whole elements [g0, g0 + n) of
 * tensor i's moment which (0 m, 1 v), part, this rank's taken into it through its windows
 * (mw_model_moment_map; mw_model_moments_done commits them). */
mw_status mw_model_tp_take_moment(mw_model *m, int i, int which, const float *part, size_t g0, size_t n);
#endif
