/* Kernels of the deepseek family's own ops (docs/moe.md): a mixture of experts' router, dispatch
 * and combine, and multi-head latent attention with its interleaved rotary embedding. Owns no
 * memory; calls libm, OpenMP and gemm.h's bfloat16 conversions only. Every kernel gives the same bits for any thread count:
 * each output element is summed by one thread in a fixed order.
 *
 * The route of a micro-batch of N tokens, K experts each among E, lives in one int32 buffer of
 * mw_moe_route_words(N, K, E) words: idx (N,K) the chosen experts, best first; row (N,K) the
 * assignment's row in the experts' packed buffers (-1: dropped over the capacity); w (N,K) the
 * combine weights (floats); cnt (E) rows per expert; off (E+1) the first row of each. */
#ifndef MW_KERNELS_MOE_H
#define MW_KERNELS_MOE_H
#include <stddef.h>
#include <stdint.h>
#include <stdint.h>

size_t mw_moe_route_words(long N, int K, int E);
typedef struct mw_moe_route {
    int32_t *idx, *row, *cnt, *off;
    float *w;
} mw_moe_route;
/* the views of a route buffer */
mw_moe_route mw_moe_route_view(void *buf, long N, int K, int E);
/* Rows of the experts' packed buffers: cap = ceil(cf x N x K / E) per expert (cf 0: N, no cap),
 * min(N x K, E x cap) in all. */
long mw_moe_capacity(long N, int K, int E, double cf);
long mw_moe_rows(long N, int K, int E, double cf);

/* probs (N,E): the router's logits in, its scores out: softmax over the experts (gate 0) or
 * sigmoid (gate 1). Then the route: each token's K experts of the highest score (gate 1: score
 * plus bias (E), which only chooses), ties to the lower index; weights the chosen scores,
 * divided by their sum when norm, times scale; assignments taken in token order, then best
 * first, each to the next row of its expert while it has fewer than cap, else dropped. */
void mw_moe_router_forward(float *probs, void *route, const float *bias, long N, int K, int E, int gate, int norm,
                           float scale, long cap);
/* xe (rows,C): each kept assignment's row of x (N,C); both bfloat16 (uint16_t bits) when b16 */
void mw_moe_dispatch(void *xe, const void *x, int b16, const void *route, long N, int K, int E, int C);
/* out (N,C) += sum over a token's kept assignments, best first, of w x ey[row] */
void mw_moe_combine(float *out, const float *ey, const void *route, long N, int K, int E, int C);
/* dey (rows,C) = w x dout[token]; dw (N,K) = dout[token] . ey[row] (0 when dropped) */
void mw_moe_combine_backward(float *dey, float *dw, const float *dout, const float *ey, const void *route, long N,
                             int K, int E, int C);
/* dx (N,C) += sum over a token's kept assignments, best first, of dxe[row] */
void mw_moe_dispatch_backward(float *dx, const float *dxe, const void *route, long N, int K, int E, int C);
/* dlogits (N,E) from dw (N,K) through the weights' normalisation and the scores (probs) */
void mw_moe_router_backward(float *dlogits, const float *dw, const float *probs, const void *route, long N, int K,
                            int E, int gate, int norm, float scale);

/* Rotates the D dims of each of H heads of B*T rows (row_stride floats apart, the heads hstride
 * apart) in place, pairs (2i, 2i+1) by position x 1/theta^(2i/D) (cos/sin tables (T, D/2) of
 * mw_rope_table): DeepSeek's rotation (its weights interleaved; Hugging Face de-interleaves
 * before rotate_half, which gives the same dot products). sign -1: the transpose (backward). */
void mw_rope_interleaved(float *x, long row_stride, long hstride, const float *cos_t, const float *sin_t, int B,
                         int T, int H, int D, int sign);
/* the same on rows n0 .. n0 + rows - 1 of the B*T (row n at position n % T), x pointing at row n0:
 * the same bits as mw_rope_interleaved's on those rows */
void mw_rope_interleaved_rows(float *x, long row_stride, long hstride, const float *cos_t, const float *sin_t,
                              long n0, int rows, int T, int H, int D, int sign);

/* Multi-head latent attention, causal, after the projections: q (B*T rows of H heads of
 * nd + rd: the head's own part, then the rotated one), kv (B*T rows of H heads of nd + vd: the
 * head's key part, then its value), kpe (B*T rows of rd: the rotated key part every head
 * shares). out (B*T, H*vd); lse (B,H,T). Scores scaled by 1/sqrt(nd + rd). scratch: nthreads x
 * mw_mla_scratch_floats(T). */
size_t mw_mla_scratch_floats(int T);
void mw_mla_forward(float *out, float *lse, float *scratch, int nthreads, const float *q, const float *kv,
                    const float *kpe, int B, int T, int H, int nd, int rd, int vd);
/* dq like q, dkv like kv (overwritten), dkpe_h (B*T rows of H heads of rd: each head's part of
 * the shared key's gradient; mw_mla_kpe_reduce sums them, head order) */
void mw_mla_backward(float *dq, float *dkv, float *dkpe_h, float *scratch, int nthreads, const float *dout,
                     const float *q, const float *kv, const float *kpe, const float *out, const float *lse, int B, int T,
                     int H, int nd, int rd, int vd);
/* The same with q, kv, kpe and out stored as bfloat16 (uint16_t bits; out rounded as it is
 * written): each (batch, head)'s rows widened into the thread's scratch, then mw_mla_forward's
 * and mw_mla_backward's arithmetic, in the same order, on them. scratch: nthreads x
 * mw_mla_scratch_floats_b16(T, nd, rd, vd). */
size_t mw_mla_scratch_floats_b16(int T, int nd, int rd, int vd);
void mw_mla_forward_b16(uint16_t *out, float *lse, float *scratch, int nthreads, const uint16_t *q, const uint16_t *kv,
                        const uint16_t *kpe, int B, int T, int H, int nd, int rd, int vd);
void mw_mla_backward_b16(float *dq, float *dkv, float *dkpe_h, float *scratch, int nthreads, const float *dout,
                         const uint16_t *q, const uint16_t *kv, const uint16_t *kpe, const uint16_t *out,
                         const float *lse, int B, int T, int H, int nd, int rd, int vd);
/* dkpe (N, rd) = sum over heads, in order, of dkpe_h (N, H, rd) */
void mw_mla_kpe_reduce(float *dkpe, const float *dkpe_h, long N, int H, int rd);
#endif
