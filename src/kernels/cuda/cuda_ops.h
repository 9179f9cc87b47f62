/* CUDA kernels of the step graph's ops (issue 18), on device pointers, mirroring the CPU kernels
 * of src/kernels/cpu/ops.h op for op: the same shapes, layouts and accumulation rules (parameter
 * gradients +=, activation gradients overwrite unless the name says _acc). fp32 throughout;
 * GEMMs through cuBLAS with TF32 off (CUBLAS_PEDANTIC_MATH) and a fixed workspace. Every
 * reduction runs in a fixed order with no atomics, so a kernel gives the same bits run after run
 * on one GPU: parameter gradients sum rows in fixed chunks of MW_CUDA_ROWS, then the chunks in
 * order; attention's dk and dv are summed by the key's own warp over the queries and the group's
 * heads in order (FlashAttention-2's split: one kernel for dq, one for dk and dv).
 *
 * NOT YET RUN ON A GPU: no machine of this project has had one when this was written; it
 * compiles with nvcc (make cuda), and bench/gpu_check.sh checks every op against the CPU
 * kernels (1e-5 relative, normwise) and its run-to-run determinism where a GPU is present.
 * The executor does not call these yet (docs/kernels.md, "CUDA"). */
#ifndef MW_CUDA_OPS_H
#define MW_CUDA_OPS_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MW_CUDA_ROWS 64 /* rows per chunk of a parameter gradient's column sums */

/* The device and its handles: one stream, one cuBLAS handle with a fixed workspace, and a
 * scratch buffer for the column sums' partials. */
typedef struct mw_cuda mw_cuda;

/* 1 when a CUDA device can run kernels here; else 0 with the reason in why (no driver, no
 * device, a runtime too new for the driver). */
int mw_cuda_probe(char *why, size_t n);
/* 0 on success; else -1 with the reason in why. */
int mw_cuda_init(mw_cuda **out, char *why, size_t n);
void mw_cuda_free(mw_cuda *cu);
/* Waits for the stream; 0, or -1 with the first error in why. */
int mw_cuda_sync(mw_cuda *cu, char *why, size_t n);
/* The device's name and memory (bytes free and total), for reports. */
void mw_cuda_device(mw_cuda *cu, char *name, size_t n, size_t *free_b, size_t *total_b);

/* ---- the ops (device pointers; inp_host where noted is the same ids in host memory) ---------- */
void mw_cuda_encoder_forward(mw_cuda *cu, float *out, const int32_t *inp, const float *wte, const float *wpe, int B,
                             int T, int C);
/* dwte, dwpe += scatter of dout: per token id its rows in row order (grouped on the host from
 * inp_host), per position its batch rows in order: the CPU's sums, no atomics */
void mw_cuda_encoder_backward(mw_cuda *cu, float *dwte, float *dwpe, const float *dout, const int32_t *inp_host,
                              int B, int T, int C);
void mw_cuda_embedding_forward(mw_cuda *cu, float *out, const int32_t *inp, const float *table, int N, int C);
void mw_cuda_embedding_backward(mw_cuda *cu, float *dtable, const float *dout, const int32_t *inp_host, int N, int C);

void mw_cuda_layernorm_forward(mw_cuda *cu, float *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int N, int C);
void mw_cuda_layernorm_backward_acc(mw_cuda *cu, float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                    int C);
void mw_cuda_rmsnorm_forward(mw_cuda *cu, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                             float eps);
void mw_cuda_rmsnorm_backward_acc(mw_cuda *cu, float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) @ w^T (OC,C) + bias (may be NULL); with acc, out += that */
void mw_cuda_matmul_forward(mw_cuda *cu, float *out, const float *inp, const float *w, const float *bias, int N,
                            int C, int OC, int acc);
/* dinp (N,C) = dout @ w (or += with acc_dinp; skipped when NULL); dw (OC,C) += dout^T @ inp;
 * db (OC) += column sums of dout (skipped when NULL) */
void mw_cuda_matmul_backward(mw_cuda *cu, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, int N, int C, int OC, int acc_dinp);

/* causal attention with grouped-query heads, qkv rows of (H + 2 KV) * hs (q, then k, then v);
 * out (B,T,H*hs), lse (B,H,T). hs a multiple of 32, at most 256. No T x T matrix. */
int mw_cuda_attention_ok(int hs);
void mw_cuda_attention_forward(mw_cuda *cu, float *out, float *lse, const float *qkv, int B, int T, int H, int KV,
                               int hs);
/* dqkv in qkv's layout, overwritten */
void mw_cuda_attention_backward(mw_cuda *cu, float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, int T, int H, int KV, int hs);

void mw_cuda_gelu_forward(mw_cuda *cu, float *out, const float *inp, long n);
void mw_cuda_gelu_backward(mw_cuda *cu, float *dinp, const float *dout, const float *inp, long n);
void mw_cuda_swiglu_forward(mw_cuda *cu, float *out, const float *gate, const float *up, long n);
void mw_cuda_swiglu_backward(mw_cuda *cu, float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, long n);
/* rotate x (B*T rows of H heads of D, rows row_stride floats apart) in place; cos_t, sin_t
 * (T, D/2) as mw_rope_table makes them; backward applies the transpose */
void mw_cuda_rope_forward(mw_cuda *cu, float *x, long row_stride, const float *cos_t, const float *sin_t, int B,
                          int T, int H, int D);
void mw_cuda_rope_backward(mw_cuda *cu, float *dx, long row_stride, const float *cos_t, const float *sin_t, int B,
                           int T, int H, int D);

/* losses (N) = -log softmax(logits)[target]; with grad, logits become (p - onehot) * dloss */
void mw_cuda_crossentropy(mw_cuda *cu, float *logits, float *losses, const int32_t *targets, float dloss, int grad,
                          int N, int V);

/* AdamW as src/optim/adamw.c computes it (PyTorch's update): p, m, v updated from g, g zeroed */
void mw_cuda_adamw(mw_cuda *cu, float *p, float *g, float *m, float *v, size_t n, double lr, double beta1,
                   double beta2, double eps, double weight_decay, float grad_scale, int t);

#ifdef __cplusplus
}
#endif
#endif
