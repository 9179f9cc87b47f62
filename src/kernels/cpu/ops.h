/* CPU kernels: forward/backward pairs of every GPT-2 op, OpenMP across rows, GEMMs in gemm.c
 * (packing in a workspace the caller gives: mw_gemm_ws, planned like every other buffer).
 *
 * Shapes are in comments: N = B*T rows, C channels, OC output channels, V vocab, H heads.
 * Accumulation rule for this file: parameter gradients (dw, db, dwte, dwpe) always accumulate
 * (+=); activation gradients (dinp) overwrite unless the name says _acc. Every kernel gives the
 * same bits for the same inputs and thread count; reductions over rows run in row order. */
#ifndef MW_OPS_H
#define MW_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "gemm.h"

/* out (B,T,C) = wte[inp] + wpe[t] */
void mw_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B,
                        int T, int C);
/* dwte, dwpe += scatter of dout (B,T,C) */
void mw_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                         int T, int C);

/* out (N,C) = LayerNorm(inp) * w + b; keeps mean and rstd (N) for backward. eps 1e-5. */
void mw_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C);
/* The same with out (N,C) stored as bfloat16 when out16 (uint16_t bits, rounded as mw_bf16_store
 * rounds the fp32 values the plain kernel writes). */
void mw_layernorm_forward_x(void *out, int out16, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C);
/* The same with the epsilon eps (a GPT-2 config.json's layer_norm_epsilon); eps 1e-5f is the
 * functions above, bit for bit. */
void mw_layernorm_forward_eps(void *out, int out16, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C, float eps);
/* dinp (N,C) += ...; dw, db (C) += ... */
void mw_layernorm_backward_acc(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) @ w^T (OC,C) + bias (OC, may be NULL); with acc, out += that. */
void mw_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                       int C, int OC, int acc, const mw_gemm_ws *ws);
/* dinp (N,C) = dout @ w (overwrite, or += with acc_dinp; skipped when dinp is NULL);
 * dw (OC,C) += dout^T @ inp; db (OC) += column sums of dout (skipped when NULL). */
void mw_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int acc_dinp, const mw_gemm_ws *ws);
/* The same with inp (and dout) stored as bfloat16 when inp16 (dout16): uint16_t bits, bfloat16
 * products only (ws->bf16); db then sums dout's values widened to fp32, in the same order */
void mw_matmul_forward_x(float *out, const void *inp, int inp16, const float *w, const float *bias,
                         int N, int C, int OC, int acc, const mw_gemm_ws *ws);
void mw_matmul_backward_x(float *dinp, float *dw, float *db, const void *dout, int dout16,
                          const void *inp, int inp16, const float *w, int N, int C, int OC,
                          int acc_dinp, const mw_gemm_ws *ws);
/* dinp (N,C) = dout (N,OC) @ w (OC,C), overwrite: the same bits as mw_matmul_backward's dinp. */
void mw_matmul_backward_dinp(float *dinp, const float *dout, const float *w, int N, int C, int OC,
                             const mw_gemm_ws *ws);

/* Causal self-attention, IO-aware (FlashAttention's schedule), with grouped-query attention: H
 * query heads share KV key/value heads (H % KV == 0; query head h reads kv head h / (H/KV)), head
 * size hs. Fused row layout: each of the B*T rows of qkv holds q (H*hs), then k (KV*hs), then v
 * (KV*hs), row stride (H + 2*KV)*hs; a shared head is read in place, never copied per query head.
 * out (B,T,H*hs); lse (B,H,T) the log-sum-exp of each row's scores, all backward needs. No T x T
 * matrix exists: scratch holds nthreads * mw_attention_scratch_floats(T) floats. */
size_t mw_attention_scratch_floats(int T);
void mw_attention_forward_gqa(float *out, float *lse, float *scratch, int nthreads,
                              const float *qkv, int B, int T, int H, int KV, int hs);
/* dqkv in qkv's fused layout, overwrite, recomputing the probabilities tile by tile from qkv and
 * lse; dk and dv of a shared head are the sums over its group's heads, in head order (the same
 * bits for any thread count). */
void mw_attention_backward_gqa(float *dqkv, float *scratch, int nthreads, const float *dout,
                               const float *qkv, const float *out, const float *lse, int B, int T,
                               int H, int KV, int hs);
/* The same with qkv read as bfloat16 (uint16_t bits) when qkv16 and the output stored as bfloat16
 * when out16 (backward reads it so): the arithmetic stays fp32, on the values widened per (batch,
 * head) into scratch, which then holds nthreads * mw_attention_scratch_floats_x(T, hs, 1)
 * floats; the output is accumulated in floats and rounded once per row. The same bits as the fp32
 * kernels on the widened values, with the output rounded. */
size_t mw_attention_scratch_floats_x(int T, int hs, int b16);
/* The forward alone needs nthreads * mw_attention_fwd_scratch_floats(T, hs, b16) floats (no more
 * than mw_attention_scratch_floats_x: one tile pair's scores instead of a strip of T rows). */
size_t mw_attention_fwd_scratch_floats(int T, int hs, int b16);
void mw_attention_forward_x(void *out, int out16, float *lse, float *scratch, int nthreads,
                            const void *qkv, int qkv16, int B, int T, int H, int KV, int hs);
void mw_attention_backward_x(float *dqkv, float *scratch, int nthreads, const float *dout,
                             const void *qkv, int qkv16, const void *out, int out16,
                             const float *lse, int B, int T, int H, int KV, int hs);
/* D (B,H,T) = the row dots dO . O of each head (the backward's, the same bits), from dout and out
 * (B,T,H*hs): what mw_attention_backward_inplace reads instead of the output. */
void mw_attention_rowdots(float *D, const float *dout, const float *out, int B, int T, int H, int hs);
/* The backward with dqkv written over qkv (fp32), the one-pass schedule: each (batch, kv head)
 * forms its heads' dq, dk, dv in its thread's scratch, then copies them over its own columns of
 * qkv, which no other unit reads. The same bits as mw_attention_backward_x's dqkv, without a
 * second (B,T,(H+2KV)*hs) buffer, from D (mw_attention_rowdots) instead of the output: scratch holds nthreads * mw_attention_scratch_floats_ip(T, hs)
 * floats (3 T hs more per thread than the fp32 kernels'). */
size_t mw_attention_scratch_floats_ip(int T, int hs);
void mw_attention_backward_inplace(float *qkv, float *scratch, int nthreads, const float *dout,
                                   const float *D, const float *lse, int B, int T, int H, int KV,
                                   int hs);
/* The backward streamed by key tiles, for KV = H (each head its own k and v): q|k|v are read a
 * tile at a time through read (rows from r0 of the B*T, columns c0..c1 of q|k|v's 3 H hs, into
 * dst with rows ld apart: 0, or a failure that stops the kernel), so they may be stored
 * compressed, and dqkv is handed to done a row group at a time in row order (rows from r0, in
 * rows of 3 H hs; every R rows and at the end), as soon as its rows are complete: key tile j's
 * dk and dv, and the dq of its rows, which no later key tile adds to. Neither q|k|v nor dqkv of
 * every row exists: scratch holds mw_attention_stream_floats(T, H, hs, R, nthreads) floats (the
 * dq of a batch's rows, the tiles, each thread's strips). Every element is the chain
 * mw_attention_backward_x forms (the same GEMM calls over the same pieces in the same order, the
 * query rows split at tiles with beta 1): the same bits as its dqkv. Returns 0 or the first
 * failure of read or done. */
typedef struct mw_att_stream {
    int (*read)(void *ctx, long r0, int rows, int c0, int c1, float *dst, long ld);
    int (*done)(void *ctx, long r0, int rows, const float *dqkv);
    void *ctx;
    int R;
} mw_att_stream;
size_t mw_attention_stream_floats(int T, int H, int hs, int R, int nthreads);
int mw_attention_backward_stream(const mw_att_stream *s, float *scratch, int nthreads, const float *dout,
                                 const float *D, const float *lse, int B, int T, int H, int hs);
/* GPT-2's: qkv (B,T,3C) with q,k,v in that order, out (B,T,C); exactly the _gqa versions with
 * KV = H and hs = C/H. */
void mw_attention_forward(float *out, float *lse, float *scratch, int nthreads, const float *qkv,
                          int B, int T, int C, int H);
void mw_attention_backward(float *dqkv, float *scratch, int nthreads, const float *dout,
                           const float *qkv, const float *out, const float *lse, int B, int T,
                           int C, int H);
/* The plain version, which stores the (B,H,T,T) probabilities in att: the oracle of the tests
 * and the baseline of bench/attention_bench. scratch holds nthreads*T*T floats. Same layouts. */
void mw_attention_forward_plain_gqa(float *out, float *att, const float *qkv, int B, int T, int H,
                                    int KV, int hs);
void mw_attention_backward_plain_gqa(float *dqkv, float *scratch, int nthreads, const float *dout,
                                     const float *qkv, const float *att, int B, int T, int H,
                                     int KV, int hs);
void mw_attention_forward_plain(float *out, float *att, const float *qkv, int B, int T, int C, int H);
void mw_attention_backward_plain(float *dqkv, float *scratch, int nthreads, const float *dout,
                                 const float *qkv, const float *att, int B, int T, int C, int H);
/* One decode step against a KV cache: out (H*hs) = softmax(q k^T / sqrt(hs)) v per query head,
 * over the cached positions 0..pos of its kv head h / (H/KV); cache row j of kv head g starts at
 * kcache (vcache) + j*kv_row_stride + g*hs. att: pos+1 floats of scratch. Plain float arithmetic
 * in position order with expf: the bits of GPT-2's decode loop (KV = H, kv_row_stride = C). */
void mw_attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                         long kv_row_stride, int pos, int H, int KV, int hs, float *att);

/* exp with relative error about 2 ulp, vectorisable; the kernel softmaxes use. 0 below -87. */
float mw_exp_fast(float x);

/* tanh with absolute error < 2e-7, vectorisable; the kernel GELU uses. */
float mw_tanh_fast(float u);
/* out (N) = GELU_tanh(inp) */
void mw_gelu_forward(float *out, const float *inp, long n);
/* out (N) = GELU_tanh(inp), stored as bfloat16 when out16, inp read as bfloat16 when in16 */
void mw_gelu_forward_x(void *out, int out16, const void *inp, int in16, long n);
/* dinp (N) = dout * GELU_tanh'(inp); dinp may be dout or inp (in place) */
void mw_gelu_backward(float *dinp, const float *dout, const float *inp, long n);
/* the same with dinp stored as bfloat16 when d16 and inp read as bfloat16 when in16; dinp may be
 * inp (in place) */
void mw_gelu_backward_x(void *dinp, int d16, const float *dout, const void *inp, int in16, long n);
/* d (N) = d * GELU_tanh'(inp), in place: d holds dout on entry, dinp on return */
void mw_gelu_backward_inplace(float *d, const float *inp, long n);

/* Softmax cross-entropy over rows of logits (N,V); targets in [0, V). losses (N) = -log p[target].
 * With grad, logits become dlogits = (p - onehot(target)) * dloss in place; without, they are
 * left as they are. The loss is the same bits either way. */
void mw_crossentropy(float *logits, float *losses, const int32_t *targets, float dloss, int grad,
                     int N, int V);

/* Scalar matmul forward in double, the oracle for tests. */
void mw_matmul_forward_ref(float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC);

/* ---- the Llama family (RMSNorm, rotary position embedding, SwiGLU), as Hugging Face's
 * modeling_llama computes them ---------------------------------------------------------------- */

/* out (N,C) = w * (x / sqrt(mean(x^2) + eps)); keeps rstd (N) for backward. */
void mw_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps);
/* the same with out stored as bfloat16 when out16 */
void mw_rmsnorm_forward_x(void *out, int out16, float *rstd, const float *inp, const float *w,
                          int N, int C, float eps);
/* dinp (N,C) += ...; dw (C) += ... */
void mw_rmsnorm_backward_acc(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C);
/* cos and sin (T, D/2) of position t times 1/theta^(2i/D), the angle in float as Hugging Face
 * rounds it; D even. */
void mw_rope_table(float *cos_t, float *sin_t, int T, int D, float theta);
/* Rotates x (B,T rows of H heads of D, rows row_stride floats apart) in place, rotate_half's
 * convention: pairs (i, i + D/2), x_i' = x_i cos - x_{i+D/2} sin, x_{i+D/2}' = x_{i+D/2} cos + x_i
 * sin. Backward applies the transpose to the gradient, in place. */
void mw_rope_forward_inplace(float *x, long row_stride, const float *cos_t, const float *sin_t,
                             int B, int T, int H, int D);
void mw_rope_backward_inplace(float *dx, long row_stride, const float *cos_t, const float *sin_t,
                              int B, int T, int H, int D);
/* the forward rotation of rows n0..n0+rows-1 of the B*T (row n at position n % T), x pointing at
 * row n0: the same bits as mw_rope_forward_inplace's on those rows */
void mw_rope_forward_rows(float *x, long row_stride, const float *cos_t, const float *sin_t,
                          long n0, int rows, int T, int H, int D);
/* out (n) = silu(gate) * up, silu(g) = g * sigmoid(g) */
void mw_swiglu_forward(float *out, const float *gate, const float *up, long n);
/* the same stored as bfloat16 when out16, gate and up read as bfloat16 when in16 */
void mw_swiglu_forward_x(void *out, int out16, const void *gate, const void *up, int in16, long n);
/* dgate, dup (n) = the gradients of that, overwritten; in place (dgate = gate, dup = up) works */
void mw_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                        const float *up, long n);
/* the same with dgate, dup stored as bfloat16 when d16 and gate, up read as bfloat16 when in16;
 * in place works */
void mw_swiglu_backward_x(void *dgate, void *dup, int d16, const float *dout, const void *gate,
                          const void *up, int in16, long n);
/* out (N,C) = table[inp] (no positions: the Llama family's embedding) */
void mw_embedding_forward(float *out, const int32_t *inp, const float *table, int N, int C);
/* dtable += scatter of dout (N,C), in row order */
void mw_embedding_backward(float *dtable, const float *dout, const int32_t *inp, int N, int C);

#endif
