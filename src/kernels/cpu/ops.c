/* CPU forward/backward kernels. See ops.h for shapes and the accumulation rule. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define ATT_BLOCK 128 /* causal attention works in row blocks of this many queries */

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

void mw_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (long)n * C;
        float *o = out + (long)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
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
                       int C, int OC, int acc) {
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out,
                OC);
}

void mw_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int acc_dinp) {
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    acc_dinp ? 1.0f : 0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw,
                C);
    if (db) {
#pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int o1 = o0 + 64 < OC ? o0 + 64 : OC;
            for (int n = 0; n < N; n++) {
                const float *d = dout + (long)n * OC;
                for (int o = o0; o < o1; o++) db[o] += d[o];
            }
        }
    }
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

/* ---- attention ------------------------------------------------------------------------------- */

void mw_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int H) {
    const int C3 = 3 * C, hs = C / H;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        const float *q = qkv + (long)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        float *A = att + (long)bh * T * T, *o = out + (long)b * T * C + h * hs;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, scale,
                        q + (long)r0 * C3, C3, k, C3, 0.0f, A + (long)r0 * T, T);
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
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f,
                        A + (long)r0 * T, T, v, C3, 0.0f, o + (long)r0 * C, C);
        }
    }
}

void mw_attention_backward(float *dqkv, float *scratch, int nthreads, const float *dout,
                           const float *qkv, const float *att, int B, int T, int C, int H) {
    const int C3 = 3 * C, hs = C / H;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        const float *q = qkv + (long)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        const float *A = att + (long)bh * T * T, *d = dout + (long)b * T * C + h * hs;
        float *dq = dqkv + (long)b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        float *S = scratch + (long)omp_get_thread_num() * T * T;
        for (int j0 = 0; j0 < T; j0 += ATT_BLOCK) { /* dv = A^T d, lower triangle only */
            int j1 = j0 + ATT_BLOCK < T ? j0 + ATT_BLOCK : T;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f,
                        A + (long)j0 * T + j0, T, d + (long)j0 * C, C, 0.0f, dv + (long)j0 * C3, C3);
        }
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f,
                        d + (long)r0 * C, C, v, C3, 0.0f, S + (long)r0 * T, T);
            for (int i = r0; i < r1; i++) { /* softmax backward, scale folded in */
                const float *a = A + (long)i * T;
                float *s = S + (long)i * T, dot = 0.0f;
                for (int j = 0; j <= i; j++) dot += a[j] * s[j];
                for (int j = 0; j <= i; j++) s[j] = scale * a[j] * (s[j] - dot);
                for (int j = i + 1; j < r1; j++) s[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f,
                        S + (long)r0 * T, T, k, C3, 0.0f, dq + (long)r0 * C3, C3);
        }
        for (int j0 = 0; j0 < T; j0 += ATT_BLOCK) { /* dk = S^T q */
            int j1 = j0 + ATT_BLOCK < T ? j0 + ATT_BLOCK : T;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f,
                        S + (long)j0 * T + j0, T, q + (long)j0 * C3, C3, 0.0f, dk + (long)j0 * C3,
                        C3);
        }
    }
}

/* ---- gelu ------------------------------------------------------------------------------------ */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one exponential, in plain arithmetic that the compiler vectorises (libm's tanhf
 * is a scalar call and was 9% of a GPT-2 step). Absolute error below 2e-7 everywhere, which is
 * what GELU needs: it uses 1+t and 1-t^2, never t relative to itself. The scalar oracle is
 * tanhf (tests/test_ops.c). */
static inline float tanh_fast(float u) {
    float au = u < 0 ? -u : u;
    au = au > 9.0f ? 9.0f : au;                /* tanh(9) = 1 - 3e-8 */
    float t = au * -2.8853900817779268f;       /* log2 of e = exp(-2|u|), in [-26, 0] */
    const float shifter = 12582912.0f;         /* 1.5 * 2^23: t + shifter rounds t to an integer */
    float k = t + shifter, n = k - shifter;    /* (no float->int conversion: gcc 12 would not */
    float r = (t - n) * 0.693147180559945309f; /*  vectorise one that follows a clamp) */
    float p = 1.0f / 5040;                     /* exp(r), |r| <= ln2/2, Taylor to degree 7 */
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t kb, sb;
    memcpy(&kb, &k, sizeof kb);
    sb = (kb - 0x4B400000 + 127) << 23; /* 2^n from the integer in k's low mantissa bits */
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    float e = p * scale, th = (1.0f - e) / (1.0f + e);
    return u < 0 ? -th : th;
}

float mw_tanh_fast(float u) { return tanh_fast(u); }

void mw_gelu_forward(float *out, const float *inp, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanh_fast(u));
    }
}

void mw_gelu_backward_inplace(float *d, const float *inp, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float t = tanh_fast(u);
        float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 0.134145f * x * x);
        d[i] *= g;
    }
}

/* ---- softmax cross-entropy ------------------------------------------------------------------- */

void mw_crossentropy_forward(float *logits, float *losses, const int32_t *targets, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *z = logits + (long)n * V, mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
        float zt = z[targets[n]];
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            z[j] = expf(z[j] - mx);
            sum += z[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++) z[j] *= inv;
        losses[n] = (float)(log(sum) - (double)(zt - mx));
    }
}

void mw_crossentropy_backward(float *probs, const int32_t *targets, float dloss, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *p = probs + (long)n * V;
        for (int j = 0; j < V; j++) p[j] *= dloss;
        p[targets[n]] -= dloss;
    }
}
