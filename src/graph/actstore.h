/* Stored activations (src/graph/actstore.c): what happens to a kept value between its forward and
 * its backward, besides being kept as it is (docs/memory.md, "Stored activations").
 *
 * A value instance (a write and the reads and updates that follow it, as the walk derives them)
 * of a block's value is *kept* when the forward pass writes it and the backward pass reads it.
 * Its life has two natural cuts:
 *   - the phase cut, between its last access in the forward pass (fs) and its first in the
 *     backward pass (rs): --act-offload writes it to the disk tier's file after fs and reads it
 *     back into a staging buffer before rs (it *swaps*);
 *   - the kind cut, between its last access by a forward kind (fc: the forward pass's, or a
 *     recomputation's) and its first by a backward kind (rc): --act-compress quantises it after
 *     fc and dequantises it before rc. Every backward op then reads the dequantised value, while
 *     a recomputation replays from the exact one, so that the numbers are the same under every
 *     recomputation policy (a recomputed value is the same bits as the forward's).
 * Each cut is a change to the plan: the instance's buffer ends at the cut (or when its write has
 * landed), and new buffers (the compressed data and scales, the staging buffer the read lands in,
 * the dequantised copy) start there, so the walk sizes and places them as any other buffer, and
 * the estimate is still the arena. The executor runs the transfers and the (de)quantisation
 * around the ops (mw_graph_act_before, mw_graph_act_after).
 *
 * Which values tolerate compression is the model's declaration (mw_model_def.lslot_lossy): not
 * the softmax's log-sum-exp nor the norms' statistics (a small error there scales whole rows). The
 * step's values (token ids, the head's) are never stored. */
#ifndef MW_ACTSTORE_H
#define MW_ACTSTORE_H
#include "graph_impl.h"

typedef struct mw_act_plan mw_act_plan;

/* What a block stores (m->act_sel): the width its tolerant kept values are compressed to (0, 8, 4, 2)
 * and what it swaps (MW_ACT_OFFLOAD_NONE, _CHECKPOINTS: its input, _ALL: every kept value). */
static inline int mw_act_sel(int swap, int bits) { return bits | swap << 4; }
static inline int mw_act_sel_bits(int sel) { return sel & 15; }
static inline int mw_act_sel_swap(int sel) { return sel >> 4 & 3; }

/* Derives the stored instances of m's schedule under cfg.act_offload and cfg.act_compress (the
 * schedule may have changed since the last call: recompute.c rebuilds it); m->act NULL when
 * nothing is stored. MW_ERR_NOMEM. */
mw_status mw_graph_act_build(mw_model *m);
void mw_graph_act_free(mw_model *m);

/* --act-offload auto: cfg.act_offload resolved under m's placement (m->offload) and recomputation,
 * the least swapping whose plan fits the budget; m->act_why says why. */
mw_status mw_graph_act_resolve(mw_model *m);

/* ---- the walk (schedule.c) ---- */

/* The store whose instance op i's access j writes (-1: none). */
int mw_graph_act_store_of(const mw_model *m, int i, int j);
/* The planned bytes of that write's buffer: the value's, or an O_DIRECT staging size when the
 * instance is written to disk as it is. */
uint64_t mw_graph_act_write_bytes(const mw_model *m, int st, uint64_t bytes);
/* Binds the write's buffer (p: its place in the arena); returns the pointer the ops use. */
char *mw_graph_act_bind_write(mw_model *m, int st, char *p);
/* At an access of op i to store st's instance: the cuts that fall at i end the buffer the
 * instance is in (*cur: its index among pl's buffers, or placed's) and start the next ones
 * (planning: pl; binding: placed, base, with *idx the walk's running index and *curp the pointer
 * the ops use). */
mw_status mw_graph_act_cut(mw_model *m, int st, int i, mw_planner *pl, const mw_pbuf *placed, char *base, int *idx,
                           int *cur, char **curp);

/* ---- the executor (exec.c) ---- */

/* Before a micro-batch of forward_backward: earlier transfers waited for, the micro-batch counted. */
mw_status mw_graph_act_begin(mw_model *m);
/* Before op i of forward_backward, ahead of any other transfer of the op: the waits for the
 * writes whose instance's memory the plan gives to others from op i on (a buffer of op i, an end's
 * or a swap's read, may lie on it: nothing may land there, or be written there, before they have). */
mw_status mw_graph_act_release(mw_model *m, int i);
/* Around op i of forward_backward: the reads, their waits and dequantisations due before it (after
 * mw_graph_act_release); the quantisations and writes due after it. */
mw_status mw_graph_act_before(mw_model *m, int i);
mw_status mw_graph_act_after(mw_model *m, int i);

/* ---- the plan (place.c) ---- */

/* The swap region's bytes in the disk tier's file (0: nothing swapped) and bytes each way per
 * micro-batch; the summary's per-class figures. */
uint64_t mw_graph_act_disk_bytes(const mw_model *m);
void mw_graph_act_summary(const mw_model *m, mw_plan_summary *s);
/* The bytes op i starts writing to and reading from the disk tier (for the timeline). */
void mw_graph_act_op_io(const mw_model *m, int i, uint64_t *rd, uint64_t *wr);
/* The timeline's stored-activation figures of every op (mw_plan_op.act_compressed, act_on_disk),
 * from the placed plan pl. */
void mw_graph_act_timeline(const mw_model *m, const mw_planner *pl, mw_plan_op *ops);
/* The name suffix of a buffer of tag (pbuf.tag) the cuts add: " (read back)", " (8-bit)", ... */
const char *mw_graph_act_tag_name(const mw_model *m, int tag);
/* The disk tier's handle for the swaps (created in mw_graph_model_create). */
mw_status mw_graph_act_open(mw_model *m);

/* ---- the prediction (actchoice.c) ---- */

/* The floats m's plan quantises (and dequantises) per micro-batch. */
uint64_t mw_graph_act_quant_floats(const mw_model *m);
/* The seconds per micro-batch the swaps' transfers are predicted to add to the step at rd and wr
 * bytes/s: per block, its writes beyond the ops they run behind (from the first write's op to the
 * last wait), and its reads likewise (from the first read's start to the last use), at kc's op costs. */
double mw_graph_act_swap_exposed(const mw_model *m, const double *kc, double rd, double wr);
#endif
