/* Tensor parallelism (Megatron-LM; cfg.tp = T > 1): the collectives of a tensor-parallel group and
 * the map between a rank's shard of a tensor and the whole tensor (src/dist/tp.c).
 *
 * The sums are memwall's, never MPI's. An all-reduce of n elements is a reduce-scatter then an
 * all-gather: rank j receives every rank's copy of piece j (n j / T .. n (j + 1) / T) and adds them
 * in rank order, ((x_0 + x_1) + x_2) + ..., then every rank receives every piece. Each element is
 * summed once, by one rank, in an order fixed by T alone: every rank holds the same bits, and a
 * rerun at the same T gives the same bits. Bytes sent per rank: 2 (T - 1) / T n elements (the
 * ring all-reduce's volume), in rounds of at most m->tpq floats per rank through m->tpbuf.
 *
 * A call that fails records its status on the model (mw_graph_io_failed): the step that ran it
 * returns it. */
#ifndef MW_DIST_TP_H
#define MW_DIST_TP_H
#include "../graph/graph.h"

/* 1 when m runs tensor-parallel (cfg.tp > 1) */
static inline int mw_tp_on(const mw_model *m) { return m->cfg.tp > 1; }
/* this rank's place in the tensor-parallel group (0 without one) */
static inline int mw_tp_rank(const mw_model *m) { return m->tpc ? m->tpc->rank : 0; }

/* The workspace floats (m->tpbuf) a model of cfg needs: the receive buffer, T pieces of tpq, then
 * MW_TP_STATS floats of the loss's statistics. 0 without tensor parallelism. */
#define MW_TP_STATS (6 * MW_LOSS_ROWS)
size_t mw_tp_piece_floats(const mw_config *c);
uint64_t mw_tp_workspace_floats(const mw_config *c);

/* In place over the group: buf (n floats) becomes the sum of every rank's, in rank order. */
void mw_tp_allreduce(mw_model *m, float *buf, size_t n);
/* ... of n doubles */
void mw_tp_allreduce_f64(mw_model *m, double *buf, size_t n);
/* ... the element-wise maximum (exact in any order) */
void mw_tp_allreduce_max(mw_model *m, float *buf, size_t n);

/* --sp (Korthikanti et al.): this rank's rows [*r0, *r1) of the N positions (N / T of them: the
 * layout needs T | N); the reduce-scatter of buf (N, C) whose sum's rows [r0, r1) this rank gets,
 * in place (in rank order, as the all-reduce); the all-gather of every rank's rows, mine (this
 * rank's rows, row_bytes each) into full (N rows). A failure is recorded as the all-reduce's. */
void mw_tp_rows(const mw_model *m, int N, int *r0, int *r1);
void mw_tp_reduce_scatter(mw_model *m, float *buf, int N, int C);
void mw_tp_gather_rows(mw_model *m, void *full, const void *mine, int N, size_t row_bytes);
/* What the models' tensor-parallel steps share (gpt2.c, llama.c): buf's (N, C) partial sums of a
 * reduction the ranks divide (a row-parallel product's output, a column-parallel product's input
 * gradient) summed over the ranks: reduce-scattered under --sp (this rank's rows of the sum, in
 * place), all-reduced otherwise, nothing without --tp; and a value's rows of every rank (mine: this
 * rank's N / T rows, row_bytes each) all-gathered into m->spbuf under --sp (returned), or mine. */
void mw_tp_sum_partials(mw_model *m, float *buf, int N, int C);
const void *mw_tp_all_rows(mw_model *m, const void *mine, int N, size_t row_bytes);
/* --sp: the tensor added last has a gradient summed over the sequence (a norm's): each rank's is
 * over its rows, and the step sums them over the ranks before the norm (mw_tp_grad_norm) */
static inline void mw_tp_tensor_seq(mw_model *m) {
    if (!m->add_skipped) m->tensors[m->ntensors - 1].seqp = 1; /* (under --pp: when this stage holds it) */
}

/* --sp with --precision bf16 (the blocks' gradients bfloat16 between their backwards): block l's
 * norms' gradients are summed over the ranks in its fp32 slot before they are rounded, each
 * backward: at its start the slot holds them on rank 0 alone (the others' start from zero, so that
 * the sum adds the step's earlier micro-batches once), and at its end their sum in rank order. */
void mw_tp_sp_bind(mw_model *m, int l, float *slot);
mw_status mw_tp_sp_done(mw_model *m, int l, float *slot);

/* --sp: those gradients summed over the ranks, once after a backward (the norm and the optimizer
 * call it; nothing when already done) */
mw_status mw_tp_sp_settle(mw_model *m);

/* The optimizer's statistics of pass `pass` over the shards, joined over the ranks before
 * mw_opt_end_pass (optim.h's mw_opt_tp_join: maxima, or sums in rank order). */
mw_status mw_tp_opt_join(mw_model *m, int pass);

/* The vocabulary's rows a rank holds of a MW_TS_ROWS tensor of V rows: [*lo, *hi) of the whole
 * (each rank ceil(V / T) rows, the last ones padding beyond V). */
void mw_tp_vocab_range(const mw_model *m, int V, int *lo, int *hi);

/* Element g of tensor t whole (row-major over t->gdims) is element *local of rank r's shard:
 * returns 1, or 0 when rank r does not hold it. */
int mw_tp_local_index(const mw_tensor *t, int T, int r, size_t g, size_t *local);

/* mw_graph_fill_normal of a tensor-parallel model: the whole tensor's values (the same streams as
 * one process's), this rank's elements kept. */
void mw_tp_fill_normal(mw_model *m, int i, uint64_t seed, double std);

/* The global gradient norm: the divided tensors' squares summed over the group in rank order, the
 * whole ones' (the same on every rank) once. */
mw_status mw_tp_grad_norm(mw_model *m, double *norm);

/* Checkpoints, a part at a time (so that rank 0 holds no whole tensor beyond its plan): the end of
 * the part of tensor t that starts at whole row a, at most `most` floats (at least one row) and
 * never across a group of a MW_TS_ROWS tensor; array which (0 parameters, 1 AdamW's m, 2 v) of
 * tensor i's whole rows [a, b) into out (rank 0's; (b - a) x cols floats, with scratch as large;
 * both may be NULL on the others), gathered from every rank (collective), each rank's elements read
 * where they live (memory or the disk tier's windows). Under --zero >= 1 over replicas every replica
 * calls it alike: an array the replicas shard comes to replica 0's rank from their shards first
 * (shardio.h; 8- and 4-bit codes as codes, each into out as a float), and replica 0's group alone
 * writes out. */
int mw_tp_part_end(const mw_tensor *t, int a, size_t most);
mw_status mw_tp_gather_part(mw_model *m, int i, int which, int a, int b, float *out, float *scratch);
/* ... and, loading, this rank's elements of the whole tensor's elements [g0, g0 + n) (part, read
 * in order from g0 = 0, which also clears the shard's padding) into dst, its shard */
void mw_tp_take_part(const mw_model *m, int i, const float *part, size_t g0, size_t n, float *dst);

/* The vocabulary-parallel loss over this rank's logits z (rows, ceil(V / T)) of the targets: the
 * rows' maxima and sums over the ranks (src/kernels/cpu/vocab.h), the same losses on every rank;
 * grad: z becomes the logits' gradient (dloss (softmax - onehot)), this rank's columns. */
void mw_tp_xent(mw_model *m, float *z, float *losses, const int32_t *tg, float dloss, int grad, int rows, int V);
#endif
