/* CPU forward/backward kernels. See ops.h for shapes and the accumulation rule. */
#include "ops.h"

#include "exp_fast.h"
#include "gelu_math.h"
#include "ops_avx512.h"
#include "rowmax.h"
#include "gemm.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BLOCK 128 /* the plain attention works in row blocks of this many queries */
#define ATT_T 128     /* the IO-aware attention's query and key tile */
#define G1_FLOATS mw_gemm_ws_floats(1, ATT_T) /* one thread's GEMM packing inside attention */

/* a GEMM in the calling thread (attention runs one per thread), packing into G */
static inline void gemm1(float *G, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                         long lda, const float *B, long ldb, float beta, float *C, long ldc) {
    (void)mw_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, G, G1_FLOATS, 1);
}

/* ---- encoder --------------------------------------------------------------------------------- */

void mw_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B,
                        int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *e = wte + (long)inp[bt] * C, *p = wpe + (long)(bt % T) * C;
        float *o = out + (long)bt * C;
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

void mw_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                         int T, int C) {
    /* threads own channel ranges, rows run in order: no races, thread-independent sums */
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (long)bt * C;
            float *e = dwte + (long)inp[bt] * C, *p = dwpe + (long)(bt % T) * C;
            for (int c = c0; c < c1; c++) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}

/* ---- layernorm ------------------------------------------------------------------------------- */

/* the bfloat16 outputs (_x kernels) are computed in fp32 in pieces of this many, then rounded */
#define BF_PIECE 256

void mw_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C) {
    mw_layernorm_forward_x(out, 0, mean, rstd, inp, w, b, N, C);
}

void mw_layernorm_forward_x(void *out, int out16, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C) {
    mw_layernorm_forward_eps(out, out16, mean, rstd, inp, w, b, N, C, 1e-5f);
}

void mw_layernorm_forward_eps(void *out, int out16, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (long)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        if (!out16) {
            float *o = (float *)out + (long)n * C;
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        } else {
            float t[BF_PIECE];
            for (int c0 = 0; c0 < C; c0 += BF_PIECE) {
                const int cn = C - c0 < BF_PIECE ? C - c0 : BF_PIECE;
                for (int c = 0; c < cn; c++) t[c] = (x[c0 + c] - m) * s * w[c0 + c] + b[c0 + c];
                mw_bf16_store((uint16_t *)out + (long)n * C + c0, t, (size_t)cn);
            }
        }
        mean[n] = m;
        rstd[n] = s;
    }
}

void mw_layernorm_backward_acc(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float *x = inp + (long)n * C, *d = dout + (long)n * C;
            float *di = dinp + (long)n * C;
            float m = mean[n], s = rstd[n];
            float dm = 0.0f, dnm = 0.0f;
            for (int c = 0; c < C; c++) {
                float dn = w[c] * d[c];
                dm += dn;
                dnm += dn * (x[c] - m) * s;
            }
            dm /= C;
            dnm /= C;
            for (int c = 0; c < C; c++) {
                float nrm = (x[c] - m) * s;
                di[c] += (w[c] * d[c] - dm - nrm * dnm) * s;
            }
        }
        /* parameter gradients: threads own channel ranges, rows in order */
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += 64) {
            int c1 = c0 + 64 < C ? c0 + 64 : C;
            for (int n = 0; n < N; n++) {
                const float *x = inp + (long)n * C, *d = dout + (long)n * C;
                float m = mean[n], s = rstd[n];
                for (int c = c0; c < c1; c++) {
                    dw[c] += (x[c] - m) * s * d[c];
                    db[c] += d[c];
                }
            }
        }
    }
}

/* ---- matmul ---------------------------------------------------------------------------------- */

void mw_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                       int C, int OC, int acc, const mw_gemm_ws *ws) {
    mw_matmul_forward_x(out, inp, 0, w, bias, N, C, OC, acc, ws);
}

void mw_matmul_forward_x(float *out, const void *inp, int inp16, const float *w, const float *bias,
                         int N, int C, int OC, int acc, const mw_gemm_ws *ws) {
    float beta = acc ? 1.0f : 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *o = out + (long)n * OC;
            if (acc)
                for (int k = 0; k < OC; k++) o[k] += bias[k];
            else
                memcpy(o, bias, sizeof(float) * OC);
        }
        beta = 1.0f;
    }
    (void)mw_gemm_ws_run_x(ws, 0, 1, N, OC, C, 1.0f, inp, inp16, C, w, 0, C, beta, out, OC);
}

void mw_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int acc_dinp, const mw_gemm_ws *ws) {
    mw_matmul_backward_x(dinp, dw, db, dout, 0, inp, 0, w, N, C, OC, acc_dinp, ws);
}


void mw_matmul_backward_x(float *dinp, float *dw, float *db, const void *dout, int dout16,
                          const void *inp, int inp16, const float *w, int N, int C, int OC,
                          int acc_dinp, const mw_gemm_ws *ws) {
    if (dinp)
        (void)mw_gemm_ws_run_x(ws, 0, 0, N, C, OC, 1.0f, dout, dout16, OC, w, 0, C,
                               acc_dinp ? 1.0f : 0.0f, dinp, C);
    if (dw) /* NULL: a tied head's weight gradient formed elsewhere (src/dist/pipetied.c) */
        (void)mw_gemm_ws_run_x(ws, 1, 0, OC, C, N, 1.0f, dout, dout16, OC, inp, inp16, C, 1.0f, dw, C);
    if (db) {
#pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int o1 = o0 + 64 < OC ? o0 + 64 : OC;
            for (int n = 0; n < N; n++) {
                if (dout16) {
                    const uint16_t *d = (const uint16_t *)dout + (long)n * OC;
                    for (int o = o0; o < o1; o++) db[o] += mw_bf16_widen(d[o]);
                } else {
                    const float *d = (const float *)dout + (long)n * OC;
                    for (int o = o0; o < o1; o++) db[o] += d[o];
                }
            }
        }
    }
}

void mw_matmul_backward_dinp(float *dinp, const float *dout, const float *w, int N, int C, int OC,
                             const mw_gemm_ws *ws) {
    (void)mw_gemm_ws_run(ws, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
}

void mw_matmul_forward_ref(float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)inp[(long)n * C + c] * w[(long)o * C + c];
            out[(long)n * OC + o] = (float)s;
        }
}

/* ---- attention, plain (the T x T probabilities stored): the oracle and the baseline ------------------------------------------------------------------------------- */
/* The fused row layout of both versions (ops.h): row n of qkv holds q (H*hs), k (KV*hs), v (KV*hs);
 * query head h reads kv head h / (H/KV) in place. GPT-2's entry points are this with KV = H. */

void mw_attention_forward_plain_gqa(float *out, float *att, const float *qkv, int B, int T, int H,
                                    int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const int grp = H / KV;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
    float *G = malloc(sizeof(float) * G1_FLOATS); /* the oracle's GEMM packing, outside any plan */
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        const float *row = qkv + (long)b * T * RS, *q = row + h * hs;
        const float *k = row + OS + (h / grp) * hs, *v = k + (long)KV * hs;
        float *A = att + (long)bh * T * T, *o = out + (long)b * T * OS + h * hs;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
            gemm1(G, 0, 1, rows, r1, hs, scale, q + (long)r0 * RS, RS, k, RS, 0.0f, A + (long)r0 * T, T);
            for (int i = r0; i < r1; i++) {
                float *a = A + (long)i * T, mx = -INFINITY;
                for (int j = 0; j <= i; j++) mx = a[j] > mx ? a[j] : mx;
                float sum = 0.0f;
                for (int j = 0; j <= i; j++) {
                    a[j] = expf(a[j] - mx);
                    sum += a[j];
                }
                float inv = 1.0f / sum;
                for (int j = 0; j <= i; j++) a[j] *= inv;
                for (int j = i + 1; j < r1; j++) a[j] = 0.0f;
            }
            gemm1(G, 0, 0, rows, hs, r1, 1.0f, A + (long)r0 * T, T, v, RS, 0.0f, o + (long)r0 * OS, OS);
        }
    }
    free(G);
    }
}

void mw_attention_forward_plain(float *out, float *att, const float *qkv, int B, int T, int C, int H) {
    mw_attention_forward_plain_gqa(out, att, qkv, B, T, H, H, C / H);
}

/* One (batch, kv head) at a time: the heads of its group in order, dk and dv of the shared head
 * the sum of theirs (the first head's GEMM writes, the others' accumulate: one fma chain). */
void mw_attention_backward_plain_gqa(float *dqkv, float *scratch, int nthreads, const float *dout,
                                     const float *qkv, const float *att, int B, int T, int H,
                                     int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const int grp = H / KV;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel num_threads(nthreads)
    {
    float *G = malloc(sizeof(float) * G1_FLOATS); /* the oracle's GEMM packing, outside any plan */
#pragma omp for schedule(static)
    for (int bg = 0; bg < B * KV; bg++) {
        const int b = bg / KV, g = bg % KV;
        const float *row = qkv + (long)b * T * RS, *k = row + OS + g * hs, *v = k + (long)KV * hs;
        float *drow = dqkv + (long)b * T * RS, *dk = drow + OS + g * hs, *dv = dk + (long)KV * hs;
        float *S = scratch + (long)omp_get_thread_num() * T * T;
        for (int h = g * grp; h < (g + 1) * grp; h++) {
            const float beta = h == g * grp ? 0.0f : 1.0f, *q = row + h * hs;
            const float *A = att + ((long)b * H + h) * T * T, *d = dout + (long)b * T * OS + h * hs;
            float *dq = drow + h * hs;
            for (int j0 = 0; j0 < T; j0 += ATT_BLOCK) { /* dv = A^T d, lower triangle only */
                int j1 = j0 + ATT_BLOCK < T ? j0 + ATT_BLOCK : T;
                gemm1(G, 1, 0, j1 - j0, hs, T - j0, 1.0f, A + (long)j0 * T + j0, T, d + (long)j0 * OS, OS, beta, dv + (long)j0 * RS, RS);
            }
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
                gemm1(G, 0, 1, rows, r1, hs, 1.0f, d + (long)r0 * OS, OS, v, RS, 0.0f, S + (long)r0 * T, T);
                for (int i = r0; i < r1; i++) { /* softmax backward, scale folded in */
                    const float *a = A + (long)i * T;
                    float *s = S + (long)i * T, dot = 0.0f;
                    for (int j = 0; j <= i; j++) dot += a[j] * s[j];
                    for (int j = 0; j <= i; j++) s[j] = scale * a[j] * (s[j] - dot);
                    for (int j = i + 1; j < r1; j++) s[j] = 0.0f;
                }
                gemm1(G, 0, 0, rows, hs, r1, 1.0f, S + (long)r0 * T, T, k, RS, 0.0f, dq + (long)r0 * RS, RS);
            }
            for (int j0 = 0; j0 < T; j0 += ATT_BLOCK) { /* dk = S^T q */
                int j1 = j0 + ATT_BLOCK < T ? j0 + ATT_BLOCK : T;
                gemm1(G, 1, 0, j1 - j0, hs, T - j0, 1.0f, S + (long)j0 * T + j0, T, q + (long)j0 * RS, RS,
                      beta, dk + (long)j0 * RS, RS);
            }
        }
    }
    free(G);
    }
}

void mw_attention_backward_plain(float *dqkv, float *scratch, int nthreads, const float *dout,
                           const float *qkv, const float *att, int B, int T, int C, int H) {
    mw_attention_backward_plain_gqa(dqkv, scratch, nthreads, dout, qkv, att, B, T, H, H, C / H);
}

/* ---- exp ------------------------------------------------------------------------------------- */

/* exp_fast: exp_fast.h (the vocabulary-parallel loss, vocab.c, shares it) */

float mw_exp_fast(float x) { return exp_fast(x); }

/* ---- gelu ------------------------------------------------------------------------------------ */

/* tanh_fast, gelu1, gelu_grad1: gelu_math.h, shared with ops_avx512.c (the same bits) */

float mw_tanh_fast(float u) { return tanh_fast(u); }

/* o[i] = gelu(x[i]) and o[i] = d[i] * gelu'(x[i]), i < n: 16 lanes where the kernel in use is an
 * AVX-512 one, the baseline's vectors otherwise (the same bits) */
static void gelu_fwd_run(int simd, float *o, const float *x, long n) {
#if defined(__x86_64__)
    if (simd) {
        mw_gelu_fwd_avx512(o, x, n);
        return;
    }
#endif
    (void)simd;
    for (long i = 0; i < n; i++) o[i] = gelu1(x[i]);
}
static void gelu_bwd_run(int simd, float *o, const float *d, const float *x, long n) {
#if defined(__x86_64__)
    if (simd) {
        mw_gelu_bwd_avx512(o, d, x, n);
        return;
    }
#endif
    (void)simd;
    for (long i = 0; i < n; i++) o[i] = d[i] * gelu_grad1(x[i]);
}

/* pieces of GELU_PIECE elements, one per iteration of a parallel loop: elementwise, any split
 * gives the same bits */
#define GELU_PIECE 4096L

void mw_gelu_forward(float *out, const float *inp, long n) {
    const int simd = mw_ops_simd();
    const long np = (n + GELU_PIECE - 1) / GELU_PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const long i0 = p * GELU_PIECE, m = n - i0 < GELU_PIECE ? n - i0 : GELU_PIECE;
        gelu_fwd_run(simd, out + i0, inp + i0, m);
    }
}

/* a piece of m values of x (floats, or bfloat16 when x16) from element i0, as floats: in t, or
 * in place when they are floats already */
static inline const float *piece_in(const void *x, int x16, long i0, long m, float *t) {
    if (!x16) return (const float *)x + i0;
    mw_bf16_load(t, (const uint16_t *)x + i0, (size_t)m);
    return t;
}

void mw_gelu_forward_x(void *out, int out16, const void *inp, int in16, long n) {
    if (!out16 && !in16) {
        mw_gelu_forward(out, inp, n);
        return;
    }
    const int simd = mw_ops_simd();
    const long np = (n + BF_PIECE - 1) / BF_PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const long i0 = p * BF_PIECE, m = n - i0 < BF_PIECE ? n - i0 : BF_PIECE;
        float t[BF_PIECE], xi[BF_PIECE];
        const float *x = piece_in(inp, in16, i0, m, xi);
        float *o = out16 ? t : (float *)out + i0;
        gelu_fwd_run(simd, o, x, m);
        if (out16) mw_bf16_store((uint16_t *)out + i0, t, (size_t)m);
    }
}

void mw_gelu_backward(float *dinp, const float *dout, const float *inp, long n) {
    const int simd = mw_ops_simd();
    const long np = (n + GELU_PIECE - 1) / GELU_PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const long i0 = p * GELU_PIECE, m = n - i0 < GELU_PIECE ? n - i0 : GELU_PIECE;
        gelu_bwd_run(simd, dinp + i0, dout + i0, inp + i0, m);
    }
}

void mw_gelu_backward_inplace(float *d, const float *inp, long n) { mw_gelu_backward(d, d, inp, n); }

void mw_gelu_backward_x(void *dinp, int d16, const float *dout, const void *inp, int in16, long n) {
    if (!d16 && !in16) {
        mw_gelu_backward(dinp, dout, inp, n);
        return;
    }
    const int simd = mw_ops_simd();
    const long np = (n + BF_PIECE - 1) / BF_PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const long i0 = p * BF_PIECE, m = n - i0 < BF_PIECE ? n - i0 : BF_PIECE;
        float t[BF_PIECE], xi[BF_PIECE];
        const float *x = piece_in(inp, in16, i0, m, xi); /* read before dinp (may be inp) is written */
        float *o = d16 ? t : (float *)dinp + i0;
        gelu_bwd_run(simd, o, dout + i0, x, m);
        if (d16) mw_bf16_store((uint16_t *)dinp + i0, t, (size_t)m);
    }
}

/* Sum of n floats in 8 fixed lanes, lanes combined in a fixed tree: vectorises, and the order
 * depends on n alone. */
static inline float sum8(const float *s, int n) {
    float a[8] = {0};
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) a[u] += s[j + u];
    for (int u = 0; j < n; j++, u++) a[u] += s[j];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* ---- attention, IO-aware: no T x T matrix ----------------------------------------------------
 * FlashAttention's schedule on the CPU. A thread owns one (batch, head) at a time. Forward walks
 * query tiles of ATT_T rows against key tiles of ATT_T columns, with the probabilities of one
 * tile pair in scratch and never more; it keeps a running max and sum per row (online softmax)
 * and leaves the output and the row's log-sum-exp. Backward takes one key tile at a time against
 * all the queries at or below it (a T x ATT_T strip of scratch), recomputing the probabilities
 * from the log-sum-exp: dv and dk of the tile in one GEMM each, dq accumulated over key tiles in
 * order. The tile size is a constant: every sum runs over the same pieces in the same order
 * whatever the thread count, so results are bitwise reproducible. */

/* one thread's scratch: S and dP (max(T, ATT_T) x ATT_T each), D (T), then its GEMM packing */
static size_t gemm_ws_offset(int T) {
    return (2 * (size_t)(T > ATT_T ? T : ATT_T) * ATT_T + (size_t)T + 15) / 16 * 16;
}

size_t mw_attention_scratch_floats(int T) { return gemm_ws_offset(T) + G1_FLOATS; }

/* bfloat16 q, k, v or output: the thread's region then also holds, after the GEMM packing, the
 * (b, head) unit's q, k, v and output widened to floats (or the output accumulated in floats),
 * T x hs each, rows hs apart: the fp32 schedule runs on them unchanged */
size_t mw_attention_scratch_floats_x(int T, int hs, int b16) {
    return mw_attention_scratch_floats(T) + (b16 ? (4 * (size_t)T * hs + 15) / 16 * 16 : 0);
}

/* rows r0..r1-1 of one head of a bfloat16 matrix (rows stride apart) into W (rows hs apart,
 * indexed by the absolute row) */
static void att_widen(float *W, const uint16_t *x, long stride, int r0, int r1, int hs) {
    for (int t = r0; t < r1; t++) {
        const uint16_t *xr = x + (long)t * stride;
        float *w = W + (long)t * hs;
        for (int e = 0; e < hs; e++) w[e] = mw_bf16_widen(xr[e]);
    }
}

void mw_attention_forward_gqa(float *out, float *lse, float *scratch, int nthreads,
                              const float *qkv, int B, int T, int H, int KV, int hs) {
    mw_attention_forward_x(out, 0, lse, scratch, nthreads, qkv, 0, B, T, H, KV, hs);
}

/* the forward's thread region: one tile pair's scores (ATT_T x ATT_T), its GEMM packing, then (bf16)
 * the widened q, k, v and output; the backward's holds more (a strip of T rows and dP) */
static size_t fwd_s_floats(void) { return ((size_t)ATT_T * ATT_T + 15) / 16 * 16; }
size_t mw_attention_fwd_scratch_floats(int T, int hs, int b16) {
    return fwd_s_floats() + G1_FLOATS + (b16 ? (4 * (size_t)T * hs + 15) / 16 * 16 : 0);
}

void mw_attention_forward_x(void *out, int out16, float *lse, float *scratch, int nthreads,
                            const void *qkv, int qkv16, int B, int T, int H, int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const long XS = qkv16 ? hs : RS, YS = out16 ? hs : OS; /* q|k|v's and the output's row strides */
    const int grp = H / KV;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t per = mw_attention_fwd_scratch_floats(T, hs, qkv16 || out16);
    /* one (batch, query head) at a time, in head order: the heads of a group run side by side on
     * the threads and read their shared K and V tiles while the cache holds them */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        float *S = scratch + (size_t)omp_get_thread_num() * per, *G = S + fwd_s_floats();
        float *Wq = G + G1_FLOATS, *Wk = Wq + (size_t)T * hs;
        float *Wv = Wk + (size_t)T * hs, *Wo = Wv + (size_t)T * hs;
        const long row0 = (long)b * T * RS, q0f = row0 + h * hs, k0f = row0 + OS + (h / grp) * hs;
        const float *q, *k, *v;
        if (qkv16) {
            const uint16_t *x = qkv;
            att_widen(Wq, x + q0f, RS, 0, T, hs);
            att_widen(Wk, x + k0f, RS, 0, T, hs);
            att_widen(Wv, x + k0f + (long)KV * hs, RS, 0, T, hs);
            q = Wq, k = Wk, v = Wv;
        } else {
            q = (const float *)qkv + q0f, k = (const float *)qkv + k0f, v = k + (long)KV * hs;
        }
        float *o = out16 ? Wo : (float *)out + (long)b * T * OS + h * hs, *ls = lse + (long)bh * T;
        float mrow[ATT_T], lrow[ATT_T];
        for (int q0 = 0; q0 < T; q0 += ATT_T) {
            const int q1 = q0 + ATT_T < T ? q0 + ATT_T : T, rows = q1 - q0;
            for (int i = 0; i < rows; i++) {
                mrow[i] = -INFINITY;
                lrow[i] = 0.0f;
                memset(o + (long)(q0 + i) * YS, 0, sizeof(float) * hs);
            }
            for (int k0 = 0; k0 < q1; k0 += ATT_T) { /* key tiles up to the diagonal */
                const int k1 = k0 + ATT_T < q1 ? k0 + ATT_T : q1, cols = k1 - k0;
                gemm1(G, 0, 1, rows, cols, hs, scale, q + (long)q0 * XS, XS, k + (long)k0 * XS, XS, 0.0f, S, ATT_T);
                for (int i = 0; i < rows; i++) {
                    const int qi = q0 + i, nv = (qi + 1 < k1 ? qi + 1 : k1) - k0;
                    float *s = S + (long)i * ATT_T, mx = mrow[i];
                    mx = mw_rowmax(s, nv, mx);
                    for (int j = 0; j < nv; j++) s[j] = exp_fast(s[j] - mx);
                    for (int j = nv < 0 ? 0 : nv; j < cols; j++) s[j] = 0.0f;
                    const float a = exp_fast(mrow[i] - mx); /* rescales what came before */
                    lrow[i] = lrow[i] * a + sum8(s, nv);
                    mrow[i] = mx;
                    float *orow = o + (long)qi * YS;
                    for (int e = 0; e < hs; e++) orow[e] *= a;
                }
                gemm1(G, 0, 0, rows, hs, cols, 1.0f, S, ATT_T, v + (long)k0 * XS, XS, 1.0f, o + (long)q0 * YS, YS);
            }
            for (int i = 0; i < rows; i++) {
                float *orow = o + (long)(q0 + i) * YS, inv = 1.0f / lrow[i];
                for (int e = 0; e < hs; e++) orow[e] *= inv;
                ls[q0 + i] = mrow[i] + logf(lrow[i]);
                if (out16) /* the finished row, rounded once */
                    mw_bf16_store((uint16_t *)out + ((long)b * T + q0 + i) * OS + h * hs, orow, (size_t)hs);
            }
        }
    }
}

void mw_attention_forward(float *out, float *lse, float *scratch, int nthreads, const float *qkv,
                          int B, int T, int C, int H) {
    mw_attention_forward_gqa(out, lse, scratch, nthreads, qkv, B, T, H, H, C / H);
}

/* The pieces of backward every schedule shares, so that they give the same bits in each: D_i =
 * dO_i . O_i for rows r0..r1-1 into D[r0..]; a score strip (rows from q0, keys k0..k0+cols-1)
 * turned into probabilities exp(S - lse) under the causal mask; dP into dS = P (dP - D) scale. */
static void att_rowdots(float *D, const float *d, long DS, const float *o, long YS, int r0, int r1,
                        int hs) {
    for (int i = r0; i < r1; i++) {
        const float *oi = o + (long)i * YS, *di = d + (long)i * DS;
        float s = 0.0f;
        for (int e = 0; e < hs; e++) s += di[e] * oi[e];
        D[i] = s;
    }
}
static void att_probs(float *S, const float *ls, int q0, int rows, int k0, int cols) {
    for (int i = 0; i < rows; i++) {
        const int qi = q0 + i, nv0 = qi + 1 - k0, nv = nv0 < cols ? nv0 : cols;
        float *s = S + (long)i * ATT_T, l = ls[qi];
        for (int j = 0; j < nv; j++) s[j] = exp_fast(s[j] - l);
        for (int j = nv < 0 ? 0 : nv; j < cols; j++) s[j] = 0.0f;
    }
}
static void att_dscores(float *dP, const float *S, const float *D, int rows, int cols, float scale) {
    for (int i = 0; i < rows; i++) {
        const float *s = S + (long)i * ATT_T, Di = D[i];
        float *gr = dP + (long)i * ATT_T;
        for (int j = 0; j < cols; j++) gr[j] = s[j] * (gr[j] - Di) * scale;
    }
}

/* Two schedules, the same bits (every GEMM element is one fma chain whatever the GEMM's shape, and
 * the elementwise steps are shared):
 *  - one (batch, kv head) at a time, the heads of its group in order, each head's key tiles in
 *    order: the first head's GEMMs write dk and dv of the shared head, the others' accumulate into
 *    them (beta 1), so each element is one fma chain over the group's heads in order; dq of a head
 *    accumulates over its key tiles. Five GEMMs per tile pair.
 *  - two passes, when the (batch, kv head) pairs would leave threads idle (GQA at B = 1 has few):
 *    pass 1 takes one (batch, kv head, key tile) at a time and computes that tile's dk and dv as
 *    above; pass 2 takes one (batch, head, query tile) at a time and accumulates its dq over the
 *    key tiles up to the diagonal in order, recomputing the scores and dP. Seven GEMMs per tile
 *    pair, every thread busy: chosen when 7 B KV / nthreads < 5 ceil(B KV / nthreads), the
 *    rounds of one-pass units. */
void mw_attention_backward_gqa(float *dqkv, float *scratch, int nthreads, const float *dout,
                               const float *qkv, const float *out, const float *lse, int B, int T,
                               int H, int KV, int hs) {
    mw_attention_backward_x(dqkv, scratch, nthreads, dout, qkv, 0, out, 0, lse, B, T, H, KV, hs);
}

void mw_attention_backward_x(float *dqkv, float *scratch, int nthreads, const float *dout,
                             const void *qkv, int qkv16, const void *out, int out16,
                             const float *lse, int B, int T, int H, int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const long XS = qkv16 ? hs : RS, YS = out16 ? hs : OS; /* q|k|v's and the output's row strides */
    const int grp = H / KV, nkt = (T + ATT_T - 1) / ATT_T;
    const int split = 7L * B * KV < 5L * nthreads * ((B * KV + nthreads - 1) / nthreads);
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t per = mw_attention_scratch_floats_x(T, hs, qkv16 || out16);
    const uint16_t *x16 = qkv, *y16 = out;
    /* one-pass: a unit is (b, g), all key tiles; pass 1: a unit is (b, g, key tile), the largest
     * strips first */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int u = 0; u < B * KV * (split ? nkt : 1); u++) {
        const int bg = split ? u % (B * KV) : u, b = bg / KV, g = bg % KV;
        const int kt0 = split ? u / (B * KV) : 0, kt1 = split ? kt0 + 1 : nkt;
        const int r0 = kt0 * ATT_T, r1 = kt1 * ATT_T < T ? kt1 * ATT_T : T; /* the key rows */
        float *S = scratch + (size_t)omp_get_thread_num() * per, *dP = S + (size_t)T * ATT_T;
        float *D = dP + (size_t)T * ATT_T, *G = S + gemm_ws_offset(T);
        float *Wq = S + mw_attention_scratch_floats(T), *Wk = Wq + (size_t)T * hs;
        float *Wv = Wk + (size_t)T * hs, *Wo = Wv + (size_t)T * hs;
        const long row0 = (long)b * T * RS, kof = row0 + OS + g * hs;
        const float *k, *v;
        if (qkv16) {
            att_widen(Wk, x16 + kof, RS, r0, r1, hs);
            att_widen(Wv, x16 + kof + (long)KV * hs, RS, r0, r1, hs);
            k = Wk, v = Wv;
        } else {
            k = (const float *)qkv + kof, v = k + (long)KV * hs;
        }
        float *drow = dqkv + row0, *dk = drow + OS + g * hs, *dv = dk + (long)KV * hs;
        for (int h = g * grp; h < (g + 1) * grp; h++) {
            const float beta = h == g * grp ? 0.0f : 1.0f;
            const long qof = row0 + h * hs, oof = (long)b * T * OS + h * hs;
            const float *q, *o, *d = dout + oof;
            if (qkv16) /* the queries at or below the first key row */
                att_widen(Wq, x16 + qof, RS, r0, T, hs), q = Wq;
            else
                q = (const float *)qkv + qof;
            if (out16)
                att_widen(Wo, y16 + oof, OS, r0, T, hs), o = Wo;
            else
                o = (const float *)out + oof;
            const float *ls = lse + ((long)b * H + h) * T;
            float *dq = drow + h * hs;
            att_rowdots(D, d, OS, o, YS, r0, T, hs);
            if (!split) /* dq starts at 0 */
                for (int i = 0; i < T; i++) memset(dq + (long)i * RS, 0, sizeof(float) * hs);
            /* one key tile at a time against every query at or below it: the probabilities of
             * that strip (rows x ATT_T) are the most this ever holds */
            for (int k0 = r0; k0 < r1; k0 += ATT_T) {
                const int k1 = k0 + ATT_T < T ? k0 + ATT_T : T, cols = k1 - k0, rows = T - k0;
                gemm1(G, 0, 1, rows, cols, hs, scale, q + (long)k0 * XS, XS, k + (long)k0 * XS, XS, 0.0f, S, ATT_T);
                att_probs(S, ls, k0, rows, k0, cols);
                gemm1(G, 1, 0, cols, hs, rows, 1.0f, S, ATT_T, d + (long)k0 * OS, OS, beta, dv + (long)k0 * RS, RS);
                gemm1(G, 0, 1, rows, cols, hs, 1.0f, d + (long)k0 * OS, OS, v + (long)k0 * XS, XS, 0.0f, dP, ATT_T);
                att_dscores(dP, S, D + k0, rows, cols, scale);
                if (!split)
                    gemm1(G, 0, 0, rows, hs, cols, 1.0f, dP, ATT_T, k + (long)k0 * XS, XS, 1.0f, dq + (long)k0 * RS, RS);
                gemm1(G, 1, 0, cols, hs, rows, 1.0f, dP, ATT_T, q + (long)k0 * XS, XS, beta, dk + (long)k0 * RS, RS);
            }
        }
    }
    if (!split) return;
    /* pass 2: a unit is (b, h, query tile), the tiles with the most key tiles first */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int u = 0; u < B * H * nkt; u++) {
        const int bh = u % (B * H), b = bh / H, h = bh % H, q0 = (nkt - 1 - u / (B * H)) * ATT_T;
        const int q1 = q0 + ATT_T < T ? q0 + ATT_T : T, rows = q1 - q0;
        float *S = scratch + (size_t)omp_get_thread_num() * per, *dP = S + (size_t)T * ATT_T;
        float *D = dP + (size_t)T * ATT_T, *G = S + gemm_ws_offset(T);
        float *Wq = S + mw_attention_scratch_floats(T), *Wk = Wq + (size_t)T * hs;
        float *Wv = Wk + (size_t)T * hs, *Wo = Wv + (size_t)T * hs;
        const long row0 = (long)b * T * RS, qof = row0 + h * hs, kof = row0 + OS + (h / grp) * hs;
        const long oof = (long)b * T * OS + h * hs;
        const float *q, *k, *v, *o, *d = dout + oof;
        if (qkv16) {
            att_widen(Wq, x16 + qof, RS, q0, q1, hs);
            att_widen(Wk, x16 + kof, RS, 0, q1, hs);
            att_widen(Wv, x16 + kof + (long)KV * hs, RS, 0, q1, hs);
            q = Wq, k = Wk, v = Wv;
        } else {
            q = (const float *)qkv + qof, k = (const float *)qkv + kof, v = k + (long)KV * hs;
        }
        if (out16)
            att_widen(Wo, y16 + oof, OS, q0, q1, hs), o = Wo;
        else
            o = (const float *)out + oof;
        const float *ls = lse + (long)bh * T;
        float *dq = dqkv + qof;
        att_rowdots(D, d, OS, o, YS, q0, q1, hs);
        for (int i = q0; i < q1; i++) memset(dq + (long)i * RS, 0, sizeof(float) * hs);
        for (int k0 = 0; k0 < q1; k0 += ATT_T) {
            const int k1 = k0 + ATT_T < T ? k0 + ATT_T : T, cols = k1 - k0;
            gemm1(G, 0, 1, rows, cols, hs, scale, q + (long)q0 * XS, XS, k + (long)k0 * XS, XS, 0.0f, S, ATT_T);
            att_probs(S, ls, q0, rows, k0, cols);
            gemm1(G, 0, 1, rows, cols, hs, 1.0f, d + (long)q0 * OS, OS, v + (long)k0 * XS, XS, 0.0f, dP, ATT_T);
            att_dscores(dP, S, D + q0, rows, cols, scale);
            gemm1(G, 0, 0, rows, hs, cols, 1.0f, dP, ATT_T, k + (long)k0 * XS, XS, 1.0f, dq + (long)q0 * RS, RS);
        }
    }
}

/* The in-place backward (ops.h): the one-pass schedule above, each unit's dq, dk and dv formed in
 * the thread's scratch (rows hs apart) by the same GEMM calls, then copied over the unit's own
 * columns of qkv, which no other unit reads: the same bits as mw_attention_backward_x's dqkv. */
size_t mw_attention_scratch_floats_ip(int T, int hs) {
    return mw_attention_scratch_floats(T) + (3 * (size_t)T * hs + 15) / 16 * 16;
}

void mw_attention_rowdots(float *D, const float *dout, const float *out, int B, int T, int H, int hs) {
    const long OS = (long)H * hs;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const long oof = (long)(bh / H) * T * OS + (bh % H) * hs;
        att_rowdots(D + (long)bh * T, dout + oof, OS, out + oof, OS, 0, T, hs);
    }
}

void mw_attention_backward_inplace(float *qkv, float *scratch, int nthreads, const float *dout,
                                   const float *Dall, const float *lse, int B, int T, int H, int KV,
                                   int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const int grp = H / KV;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t per = mw_attention_scratch_floats_ip(T, hs);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int bg = 0; bg < B * KV; bg++) {
        const int b = bg / KV, g = bg % KV;
        float *S = scratch + (size_t)omp_get_thread_num() * per, *dP = S + (size_t)T * ATT_T;
        float *G = S + gemm_ws_offset(T);
        float *dq = S + mw_attention_scratch_floats(T), *dk = dq + (size_t)T * hs, *dv = dk + (size_t)T * hs;
        const long row0 = (long)b * T * RS, kof = row0 + OS + g * hs;
        float *k = qkv + kof, *v = k + (long)KV * hs;
        for (int h = g * grp; h < (g + 1) * grp; h++) {
            const float beta = h == g * grp ? 0.0f : 1.0f;
            const long qof = row0 + h * hs, oof = (long)b * T * OS + h * hs;
            float *q = qkv + qof;
            const float *d = dout + oof, *ls = lse + ((long)b * H + h) * T, *D = Dall + ((long)b * H + h) * T;
            memset(dq, 0, sizeof(float) * (size_t)T * hs);
            for (int k0 = 0; k0 < T; k0 += ATT_T) {
                const int k1 = k0 + ATT_T < T ? k0 + ATT_T : T, cols = k1 - k0, rows = T - k0;
                gemm1(G, 0, 1, rows, cols, hs, scale, q + (long)k0 * RS, RS, k + (long)k0 * RS, RS, 0.0f, S, ATT_T);
                att_probs(S, ls, k0, rows, k0, cols);
                gemm1(G, 1, 0, cols, hs, rows, 1.0f, S, ATT_T, d + (long)k0 * OS, OS, beta, dv + (long)k0 * hs, hs);
                gemm1(G, 0, 1, rows, cols, hs, 1.0f, d + (long)k0 * OS, OS, v + (long)k0 * RS, RS, 0.0f, dP, ATT_T);
                att_dscores(dP, S, D + k0, rows, cols, scale);
                gemm1(G, 0, 0, rows, hs, cols, 1.0f, dP, ATT_T, k + (long)k0 * RS, RS, 1.0f, dq + (long)k0 * hs, hs);
                gemm1(G, 1, 0, cols, hs, rows, 1.0f, dP, ATT_T, q + (long)k0 * RS, RS, beta, dk + (long)k0 * hs, hs);
            }
            for (int t = 0; t < T; t++) /* this head's q is read by no one else: its gradient now */
                memcpy(q + (long)t * RS, dq + (long)t * hs, sizeof(float) * hs);
        }
        for (int t = 0; t < T; t++) { /* the shared head's k and v, once its group is done */
            memcpy(k + (long)t * RS, dk + (long)t * hs, sizeof(float) * hs);
            memcpy(v + (long)t * RS, dv + (long)t * hs, sizeof(float) * hs);
        }
    }
}

/* The streamed backward (ops.h): key tile j outer, then query tile i >= j, then the heads side by
 * side on the threads (each head its own k and v: no head's sum waits for another's). The GEMMs are
 * the one-pass schedule's with the query rows cut at tiles: S, dP and dq's of a tile pair as there;
 * dv and dk of key tile j over the query tiles in order (beta 0 on the first, 1 after), which is
 * the one-pass schedule's single product over rows j.. split at tiles (gemm.h). */
static size_t strm_thread_floats(void) { return (2 * (size_t)ATT_T * ATT_T + 15) / 16 * 16 + G1_FLOATS; }
size_t mw_attention_stream_floats(int T, int H, int hs, int R, int nthreads) {
    const size_t C = (size_t)H * hs;
    /* dq of a batch's rows, the q tile, the k|v tile, its dk|dv, the rows waiting for done */
    return (size_t)T * C + (size_t)ATT_T * C + 2 * (2 * (size_t)ATT_T * C) + (size_t)R * 3 * C +
           (size_t)nthreads * strm_thread_floats();
}

int mw_attention_backward_stream(const mw_att_stream *s, float *scratch, int nthreads, const float *dout,
                                 const float *Dall, const float *lse, int B, int T, int H, int hs) {
    const long C = (long)H * hs, C2 = 2 * C, C3 = 3 * C;
    const int nkt = (T + ATT_T - 1) / ATT_T;
    const float scale = 1.0f / sqrtf((float)hs);
    float *dq = scratch, *qt = dq + (size_t)T * C, *kv = qt + (size_t)ATT_T * C, *dkv = kv + (size_t)ATT_T * C2;
    float *rows = dkv + (size_t)ATT_T * C2, *thr = rows + (size_t)s->R * C3;
    long n0 = 0; /* the first row waiting in rows */
    int nw = 0;  /* how many */
    for (int b = 0; b < B; b++) {
        memset(dq, 0, sizeof(float) * (size_t)T * C);
        for (int j = 0; j < nkt; j++) {
            const int k0 = j * ATT_T, cols = (k0 + ATT_T < T ? k0 + ATT_T : T) - k0;
            int st = s->read(s->ctx, (long)b * T + k0, cols, (int)C, (int)C3, kv, C2); /* k|v of the tile */
            if (st) return st;
            for (int i = j; i < nkt; i++) {
                const int q0 = i * ATT_T, qr = (q0 + ATT_T < T ? q0 + ATT_T : T) - q0;
                const float beta = i == j ? 0.0f : 1.0f;
                if ((st = s->read(s->ctx, (long)b * T + q0, qr, 0, (int)C, qt, C))) return st;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
                for (int h = 0; h < H; h++) {
                    float *S = thr + (size_t)omp_get_thread_num() * strm_thread_floats(), *dP = S + (size_t)ATT_T * ATT_T;
                    float *G = S + (2 * (size_t)ATT_T * ATT_T + 15) / 16 * 16;
                    const float *q = qt + (long)h * hs, *k = kv + (long)h * hs, *v = kv + C + (long)h * hs;
                    const float *d = dout + (long)b * T * C + (long)q0 * C + (long)h * hs;
                    const float *ls = lse + ((long)b * H + h) * T, *D = Dall + ((long)b * H + h) * T;
                    gemm1(G, 0, 1, qr, cols, hs, scale, q, C, k, C2, 0.0f, S, ATT_T);
                    att_probs(S, ls, q0, qr, k0, cols);
                    gemm1(G, 1, 0, cols, hs, qr, 1.0f, S, ATT_T, d, C, beta, dkv + C + (long)h * hs, C2);
                    gemm1(G, 0, 1, qr, cols, hs, 1.0f, d, C, v, C2, 0.0f, dP, ATT_T);
                    att_dscores(dP, S, D + q0, qr, cols, scale);
                    gemm1(G, 0, 0, qr, hs, cols, 1.0f, dP, ATT_T, k, C2, 1.0f, dq + (long)q0 * C + (long)h * hs, C);
                    gemm1(G, 1, 0, cols, hs, qr, 1.0f, dP, ATT_T, q, C, beta, dkv + (long)h * hs, C2);
                }
            }
            /* the tile's rows are complete: dq | dk | dv, into the rows waiting for done */
            for (int t = 0; t < cols; t++) {
                float *o = rows + (size_t)nw * C3;
                memcpy(o, dq + (long)(k0 + t) * C, sizeof(float) * (size_t)C);
                memcpy(o + C, dkv + (long)t * C2, sizeof(float) * (size_t)C2);
                if (++nw == s->R) {
                    if ((st = s->done(s->ctx, n0, nw, rows))) return st;
                    n0 += nw, nw = 0;
                }
            }
        }
    }
    return nw ? s->done(s->ctx, n0, nw, rows) : 0;
}

void mw_attention_backward(float *dqkv, float *scratch, int nthreads, const float *dout,
                           const float *qkv, const float *out, const float *lse, int B, int T,
                           int C, int H) {
    mw_attention_backward_gqa(dqkv, scratch, nthreads, dout, qkv, out, lse, B, T, H, H, C / H);
}

/* One decode step against the KV cache, in the arithmetic of GPT-2's decode loop (plain float
 * products and sums in position order, expf, one division): its bits are that loop's. */
void mw_attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                         long kv_row_stride, int pos, int H, int KV, int hs, float *att) {
    const int grp = H / KV;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int hd = 0; hd < H; hd++) {
        const float *qh = q + (long)hd * hs;
        const long koff = (long)(hd / grp) * hs;
        float mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j <= pos; j++) {
            const float *k = kcache + (size_t)j * kv_row_stride + koff;
            float d = 0.0f;
            for (int e = 0; e < hs; e++) d += qh[e] * k[e];
            att[j] = d * scale;
            mx = att[j] > mx ? att[j] : mx;
        }
        for (int j = 0; j <= pos; j++) sum += (att[j] = expf(att[j] - mx));
        float inv = 1.0f / sum, *o = out + (long)hd * hs;
        for (int e = 0; e < hs; e++) o[e] = 0.0f;
        for (int j = 0; j <= pos; j++) {
            const float *v = vcache + (size_t)j * kv_row_stride + koff;
            float a = att[j] * inv;
            for (int e = 0; e < hs; e++) o[e] += a * v[e];
        }
    }
}

/* ---- softmax cross-entropy ------------------------------------------------------------------- */

void mw_crossentropy(float *logits, float *losses, const int32_t *targets, float dloss, int grad,
                     int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *z = logits + (long)n * V, mx = -INFINITY;
        mx = mw_rowmax(z, V, mx);
        const float zt = z[targets[n]];
        double a[4] = {0, 0, 0, 0}; /* fixed lanes: vectorises, same order for any N */
        int j = 0;
        if (grad) {
            for (j = 0; j < V; j++) z[j] = exp_fast(z[j] - mx);
            for (j = 0; j + 4 <= V; j += 4)
                for (int u = 0; u < 4; u++) a[u] += z[j + u];
            for (int u = 0; j < V; j++, u++) a[u] += z[j];
        } else {
            for (j = 0; j + 4 <= V; j += 4)
                for (int u = 0; u < 4; u++) a[u] += exp_fast(z[j + u] - mx);
            for (int u = 0; j < V; j++, u++) a[u] += exp_fast(z[j] - mx);
        }
        const double sum = (a[0] + a[1]) + (a[2] + a[3]);
        losses[n] = (float)(log(sum) - (double)(zt - mx));
        if (grad) {
            const float c = (float)(dloss / sum);
            for (j = 0; j < V; j++) z[j] *= c;
            z[targets[n]] -= dloss;
        }
    }
}

/* ---- the Llama family's ops: RMSNorm, rotary position embedding, SwiGLU ------------------------ */

void mw_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps) {
    mw_rmsnorm_forward_x(out, 0, rstd, inp, w, N, C, eps);
}

void mw_rmsnorm_forward_x(void *out, int out16, float *rstd, const float *inp, const float *w,
                          int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (long)n * C;
        float sq[8] = {0};
        int c = 0;
        for (; c + 8 <= C; c += 8)
            for (int u = 0; u < 8; u++) sq[u] += x[c + u] * x[c + u];
        for (int u = 0; c < C; c++, u++) sq[u] += x[c] * x[c];
        const float ss = ((sq[0] + sq[1]) + (sq[2] + sq[3])) + ((sq[4] + sq[5]) + (sq[6] + sq[7]));
        const float s = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = s;
        if (!out16) {
            float *o = (float *)out + (long)n * C;
            for (c = 0; c < C; c++) o[c] = w[c] * (x[c] * s);
        } else {
            float t[BF_PIECE];
            for (int c0 = 0; c0 < C; c0 += BF_PIECE) {
                const int cn = C - c0 < BF_PIECE ? C - c0 : BF_PIECE;
                for (c = 0; c < cn; c++) t[c] = w[c0 + c] * (x[c0 + c] * s);
                mw_bf16_store((uint16_t *)out + (long)n * C + c0, t, (size_t)cn);
            }
        }
    }
}

void mw_rmsnorm_backward_acc(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float *x = inp + (long)n * C, *d = dout + (long)n * C;
            float *di = dinp + (long)n * C;
            const float s = rstd[n];
            float acc[8] = {0}; /* sum of w * d * x in 8 fixed lanes */
            int c = 0;
            for (; c + 8 <= C; c += 8)
                for (int u = 0; u < 8; u++) acc[u] += w[c + u] * d[c + u] * x[c + u];
            for (int u = 0; c < C; c++, u++) acc[u] += w[c] * d[c] * x[c];
            const float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                              ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            const float k = dot * s * s * s / (float)C;
            for (c = 0; c < C; c++) di[c] += w[c] * d[c] * s - x[c] * k;
        }
        /* the weight's gradient: threads own channel ranges, rows in order */
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += 64) {
            const int c1 = c0 + 64 < C ? c0 + 64 : C;
            for (int n = 0; n < N; n++) {
                const float *x = inp + (long)n * C, *d = dout + (long)n * C;
                const float s = rstd[n];
                for (int c = c0; c < c1; c++) dw[c] += d[c] * (x[c] * s);
            }
        }
    }
}

void mw_rope_table(float *cos_t, float *sin_t, int T, int D, float theta) {
    const int h = D / 2;
    for (int i = 0; i < h; i++) {
        /* Hugging Face's inv_freq, in float as it computes it: 1 / theta^(2i / D) */
        const float inv = 1.0f / powf(theta, (float)(2 * i) / (float)D);
        for (int t = 0; t < T; t++) {
            const float a = (float)t * inv; /* the angle rounded to float, as torch's outer product */
            cos_t[(long)t * h + i] = (float)cos((double)a);
            sin_t[(long)t * h + i] = (float)sin((double)a);
        }
    }
}

/* sign +1 rotates forward, -1 applies the transpose (backward); rows n0..n0+rows-1 of the B*T,
 * row n at position n % T, x pointing at row n0 */
static void rope_apply(float *x, long row_stride, const float *cos_t, const float *sin_t, long n0,
                       long rows, int T, int H, int D, float sign) {
    const int h = D / 2;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const long t = (n0 + r) % T;
        const float *cs = cos_t + t * h, *sn = sin_t + t * h;
        float *row = x + r * row_stride;
        for (int hd = 0; hd < H; hd++) {
            float *v = row + (long)hd * D;
            for (int i = 0; i < h; i++) {
                const float x1 = v[i], x2 = v[i + h], s = sign * sn[i];
                v[i] = x1 * cs[i] - x2 * s;
                v[i + h] = x2 * cs[i] + x1 * s;
            }
        }
    }
}

void mw_rope_forward_inplace(float *x, long row_stride, const float *cos_t, const float *sin_t,
                             int B, int T, int H, int D) {
    rope_apply(x, row_stride, cos_t, sin_t, 0, (long)B * T, T, H, D, 1.0f);
}

void mw_rope_forward_rows(float *x, long row_stride, const float *cos_t, const float *sin_t,
                          long n0, int rows, int T, int H, int D) {
    rope_apply(x, row_stride, cos_t, sin_t, n0, rows, T, H, D, 1.0f);
}

void mw_rope_backward_inplace(float *dx, long row_stride, const float *cos_t, const float *sin_t,
                              int B, int T, int H, int D) {
    rope_apply(dx, row_stride, cos_t, sin_t, 0, (long)B * T, T, H, D, -1.0f);
}

static inline float sigmoid_fast(float g) { return 1.0f / (1.0f + exp_fast(-g)); }

void mw_swiglu_forward(float *out, const float *gate, const float *up, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g * sigmoid_fast(g) * up[i];
    }
}

void mw_swiglu_forward_x(void *out, int out16, const void *gate, const void *up, int in16, long n) {
    if (!out16 && !in16) {
        mw_swiglu_forward(out, gate, up, n);
        return;
    }
    const long np = (n + BF_PIECE - 1) / BF_PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const long i0 = p * BF_PIECE, m = n - i0 < BF_PIECE ? n - i0 : BF_PIECE;
        float t[BF_PIECE], gi[BF_PIECE], ui[BF_PIECE];
        const float *gv = piece_in(gate, in16, i0, m, gi), *uv = piece_in(up, in16, i0, m, ui);
        float *o = out16 ? t : (float *)out + i0;
        for (long i = 0; i < m; i++) {
            const float g = gv[i];
            o[i] = g * sigmoid_fast(g) * uv[i];
        }
        if (out16) mw_bf16_store((uint16_t *)out + i0, t, (size_t)m);
    }
}

void mw_swiglu_backward_x(void *dgate, void *dup, int d16, const float *dout, const void *gate,
                          const void *up, int in16, long n) {
    if (!d16 && !in16) {
        mw_swiglu_backward(dgate, dup, dout, gate, up, n);
        return;
    }
    const long np = (n + BF_PIECE - 1) / BF_PIECE;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < np; p++) {
        const long i0 = p * BF_PIECE, m = n - i0 < BF_PIECE ? n - i0 : BF_PIECE;
        float gi[BF_PIECE], ui[BF_PIECE], tg[BF_PIECE], tu[BF_PIECE];
        /* both inputs read (copied when bfloat16) before either output is written: in place works */
        const float *gv = piece_in(gate, in16, i0, m, gi), *uv = piece_in(up, in16, i0, m, ui);
        float *og = d16 ? tg : (float *)dgate + i0, *ou = d16 ? tu : (float *)dup + i0;
        for (long i = 0; i < m; i++) {
            const float g = gv[i], u = uv[i], s = sigmoid_fast(g), silu = g * s, d = dout[i0 + i];
            og[i] = d * u * (s + silu * (1.0f - s));
            ou[i] = d * silu;
        }
        if (d16) {
            mw_bf16_store((uint16_t *)dgate + i0, tg, (size_t)m);
            mw_bf16_store((uint16_t *)dup + i0, tu, (size_t)m);
        }
    }
}

void mw_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                        const float *up, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        /* every input read before an output is written: in place (dgate = gate, dup = up) works */
        const float g = gate[i], u = up[i], s = sigmoid_fast(g), silu = g * s, d = dout[i];
        dgate[i] = d * u * (s + silu * (1.0f - s));
        dup[i] = d * silu;
    }
}

void mw_embedding_forward(float *out, const int32_t *inp, const float *table, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (long)n * C, table + (long)inp[n] * C, sizeof(float) * C);
}

void mw_embedding_backward(float *dtable, const float *dout, const int32_t *inp, int N, int C) {
    /* threads own channel ranges, rows run in order: no races, thread-independent sums */
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int n = 0; n < N; n++) {
            const float *d = dout + (long)n * C;
            float *e = dtable + (long)inp[n] * C;
            for (int c = c0; c < c1; c++) e[c] += d[c];
        }
    }
}
