/* The vocabulary-parallel kernels of tensor parallelism (Megatron-LM's VocabParallelEmbedding and
 * vocab_parallel_cross_entropy): a rank holds rows [vlo, vhi) of the embedding (or LM head), the
 * columns [0, nv) of its logits real (nv <= vhi - vlo: the last rank's may end in padding). The
 * collectives between the steps are the caller's (src/dist/tp.c). Accumulation rule as ops.h. */
#ifndef MW_VOCAB_H
#define MW_VOCAB_H
#include <stdint.h>

/* out (N,C) = the rows of tokens inp held here, zeros for the others (their sum over the ranks is
 * the embedding) */
void mw_vocab_embed_rows(float *out, const int32_t *inp, const float *table, int N, int C, int vlo, int vhi);
/* dtable (vhi-vlo,C) += dout rows of tokens held here (mw_embedding_backward's order) */
void mw_vocab_embed_backward(float *dtable, const float *dout, const int32_t *inp, int N, int C, int vlo, int vhi);
/* ... and dwpe (T,C) += every row (mw_encoder_backward's order) */
void mw_vocab_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                               int C, int vlo, int vhi);
/* The loss over logits z (rows, Vl) in three steps around the ranks' reductions:
 * 1. mx (rows) = the maximum of each row's nv real columns;
 * 2. given the global maxima M: st[2n] = sum of exp(z - M) over the real columns, st[2n+1] =
 *    the target's logit where this rank holds it (0 otherwise); grad: z = exp(z - M) in place;
 * 3. given the sums over the ranks: losses = log(S) - (z_target - M), and (grad) z becomes
 *    dloss (softmax - onehot) (padding columns 0). */
void mw_vocab_xent_max(const float *z, float *mx, int rows, int Vl, int nv);
void mw_vocab_xent_sums(float *z, const float *M, const int32_t *targets, double *st, int rows, int Vl, int nv,
                        int vlo, int grad);
void mw_vocab_xent_finish(float *z, float *losses, const float *M, const double *st, const int32_t *targets,
                          float dloss, int grad, int rows, int Vl, int nv, int vlo);
#endif
