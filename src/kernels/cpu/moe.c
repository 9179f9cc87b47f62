/* The deepseek family's kernels (moe.h): router, dispatch, combine, multi-head latent attention
 * and its rotary embedding. Calls nothing beyond libm and OpenMP. Accumulation: the *_backward
 * kernels overwrite their outputs unless moe.h says +=. */
#include "moe.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "gemm.h"

size_t mw_moe_route_words(long N, int K, int E) { return (size_t)3 * N * K + 2 * (size_t)E + 1; }

mw_moe_route mw_moe_route_view(void *buf, long N, int K, int E) {
    int32_t *b = buf;
    const size_t nk = (size_t)N * K;
    mw_moe_route r = {b, b + nk, b + 3 * nk, b + 3 * nk + E, (float *)(b + 2 * nk)};
    (void)E;
    return r;
}

long mw_moe_capacity(long N, int K, int E, double cf) {
    if (cf <= 0) return N;
    const long cap = (long)ceil(cf * (double)N * K / E);
    return cap < 1 ? 1 : cap > N ? N : cap;
}

long mw_moe_rows(long N, int K, int E, double cf) {
    const long cap = mw_moe_capacity(N, K, E, cf), a = N * K, b = (long)E * cap;
    return a < b ? a : b;
}

void mw_moe_router_forward(float *probs, void *route, const float *bias, long N, int K, int E, int gate, int norm,
                           float scale, long cap) {
    mw_moe_route r = mw_moe_route_view(route, N, K, E);
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        float *p = probs + n * E;
        if (gate == 0) { /* softmax, the maximum subtracted, summed in expert order */
            float mx = p[0];
            for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
            float s = 0.0f;
            for (int e = 0; e < E; e++) s += p[e] = expf(p[e] - mx);
            for (int e = 0; e < E; e++) p[e] /= s;
        } else {
            for (int e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
        }
        int32_t *ix = r.idx + n * K;
        float *w = r.w + n * K;
        for (int k = 0; k < K; k++) { /* the k-th best not taken yet, ties to the lower index */
            int best = -1;
            float bv = 0.0f;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= ix[j] == e;
                const float v = p[e] + (gate == 1 && bias ? bias[e] : 0.0f);
                if (!taken && (best < 0 || v > bv)) best = e, bv = v;
            }
            ix[k] = best;
            w[k] = p[best];
        }
        float s = 0.0f;
        for (int k = 0; k < K; k++) s += w[k];
        for (int k = 0; k < K; k++) w[k] = (norm ? w[k] / s : w[k]) * scale;
    }
    /* the capacity: assignments in token order, best first (one thread: a running count) */
    memset(r.cnt, 0, sizeof(int32_t) * (size_t)E);
    for (long a = 0; a < N * K; a++) {
        const int e = r.idx[a];
        r.row[a] = r.cnt[e] < cap ? r.cnt[e]++ : -1;
    }
    r.off[0] = 0;
    for (int e = 0; e < E; e++) r.off[e + 1] = r.off[e] + r.cnt[e];
    for (long a = 0; a < N * K; a++)
        if (r.row[a] >= 0) r.row[a] += r.off[r.idx[a]];
}

void mw_moe_dispatch(void *xe, const void *x, int b16, const void *route, long N, int K, int E, int C) {
    mw_moe_route r = mw_moe_route_view((void *)route, N, K, E);
    const size_t row = (size_t)C * (b16 ? 2 : sizeof(float));
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            if (r.row[n * K + k] >= 0)
                memcpy((char *)xe + (size_t)r.row[n * K + k] * row, (const char *)x + (size_t)n * row, row);
}

void mw_moe_combine(float *out, const float *ey, const void *route, long N, int K, int E, int C) {
    mw_moe_route r = mw_moe_route_view((void *)route, N, K, E);
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        float *o = out + n * C;
        for (int k = 0; k < K; k++) {
            const long row = r.row[n * K + k];
            if (row < 0) continue;
            const float w = r.w[n * K + k], *y = ey + row * C;
            for (int c = 0; c < C; c++) o[c] += w * y[c];
        }
    }
}

void mw_moe_combine_backward(float *dey, float *dw, const float *dout, const float *ey, const void *route, long N,
                             int K, int E, int C) {
    mw_moe_route r = mw_moe_route_view((void *)route, N, K, E);
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *d = dout + n * C;
        for (int k = 0; k < K; k++) {
            const long row = r.row[n * K + k];
            if (row < 0) {
                dw[n * K + k] = 0.0f;
                continue;
            }
            const float w = r.w[n * K + k], *y = ey + row * C;
            float *g = dey + row * C;
            double s = 0.0; /* the dot product in double, in channel order */
            for (int c = 0; c < C; c++) {
                g[c] = w * d[c];
                s += (double)d[c] * y[c];
            }
            dw[n * K + k] = (float)s;
        }
    }
}

void mw_moe_dispatch_backward(float *dx, const float *dxe, const void *route, long N, int K, int E, int C) {
    mw_moe_route r = mw_moe_route_view((void *)route, N, K, E);
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        float *d = dx + n * C;
        for (int k = 0; k < K; k++) {
            const long row = r.row[n * K + k];
            if (row < 0) continue;
            const float *g = dxe + row * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

void mw_moe_router_backward(float *dlogits, const float *dw, const float *probs, const void *route, long N, int K,
                            int E, int gate, int norm, float scale) {
    mw_moe_route r = mw_moe_route_view((void *)route, N, K, E);
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *p = probs + n * E, *g = dw + n * K;
        const int32_t *ix = r.idx + n * K;
        float *dl = dlogits + n * E;
        for (int e = 0; e < E; e++) dl[e] = 0.0f; /* d(score) first, then through the gate */
        if (norm) { /* w_k = scale p_k / s, s = sum of the chosen p */
            float s = 0.0f, gw = 0.0f;
            for (int k = 0; k < K; k++) s += p[ix[k]];
            for (int k = 0; k < K; k++) gw += g[k] * p[ix[k]];
            for (int k = 0; k < K; k++) dl[ix[k]] = scale * (g[k] / s - gw / (s * s));
        } else {
            for (int k = 0; k < K; k++) dl[ix[k]] = scale * g[k];
        }
        if (gate == 0) { /* softmax: p (dp - sum p dp) */
            float dot = 0.0f;
            for (int e = 0; e < E; e++) dot += p[e] * dl[e];
            for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - dot);
        } else {
            for (int e = 0; e < E; e++) dl[e] = dl[e] * p[e] * (1.0f - p[e]);
        }
    }
}

void mw_rope_interleaved(float *x, long row_stride, long hstride, const float *cos_t, const float *sin_t, int B,
                         int T, int H, int D, int sign) {
    const int h2 = D / 2;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < (long)B * T; n++) {
        const float *c = cos_t + (n % T) * h2, *s = sin_t + (n % T) * h2;
        for (int h = 0; h < H; h++) {
            float *v = x + n * row_stride + h * hstride;
            for (int i = 0; i < h2; i++) {
                const float a = v[2 * i], b = v[2 * i + 1], sn = sign * s[i];
                v[2 * i] = a * c[i] - b * sn;
                v[2 * i + 1] = b * c[i] + a * sn;
            }
        }
    }
}

void mw_rope_interleaved_rows(float *x, long row_stride, long hstride, const float *cos_t, const float *sin_t,
                              long n0, int rows, int T, int H, int D, int sign) {
    const int h2 = D / 2;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < rows; n++) {
        const float *c = cos_t + ((n0 + n) % T) * h2, *s = sin_t + ((n0 + n) % T) * h2;
        for (int h = 0; h < H; h++) {
            float *v = x + n * row_stride + h * hstride;
            for (int i = 0; i < h2; i++) {
                const float a = v[2 * i], b = v[2 * i + 1], sn = sign * s[i];
                v[2 * i] = a * c[i] - b * sn;
                v[2 * i + 1] = b * c[i] + a * sn;
            }
        }
    }
}

size_t mw_mla_scratch_floats(int T) { return 2 * (size_t)T; }

/* q.k of query row t against key row j of head h */
static inline float mla_score(const float *q, const float *kv, const float *kpe, int nd, int rd, int kvw, int qw,
                              long t, long j, int h, int vd) {
    const float *qh = q + t * qw + (long)h * (nd + rd), *kn = kv + j * kvw + (long)h * (nd + vd), *kp = kpe + j * rd;
    float s = 0.0f;
    for (int i = 0; i < nd; i++) s += qh[i] * kn[i];
    for (int i = 0; i < rd; i++) s += qh[nd + i] * kp[i];
    return s;
}

void mw_mla_forward(float *out, float *lse, float *scratch, int nthreads, const float *q, const float *kv,
                    const float *kpe, int B, int T, int H, int nd, int rd, int vd) {
    const int qw = H * (nd + rd), kvw = H * (nd + vd), ow = H * vd;
    const float sc = 1.0f / sqrtf((float)(nd + rd));
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (long bh = 0; bh < (long)B * H; bh++) {
        const long b = bh / H;
        const int h = (int)(bh % H);
        float *p = scratch + (size_t)omp_get_thread_num() * mw_mla_scratch_floats(T);
        for (long t = 0; t < T; t++) {
            const long qi = b * T + t;
            float mx = -INFINITY;
            for (long j = 0; j <= t; j++) {
                p[j] = mla_score(q, kv, kpe, nd, rd, kvw, qw, qi, b * T + j, h, vd) * sc;
                mx = p[j] > mx ? p[j] : mx;
            }
            float s = 0.0f;
            for (long j = 0; j <= t; j++) s += p[j] = expf(p[j] - mx);
            float *o = out + qi * ow + (long)h * vd;
            for (int i = 0; i < vd; i++) o[i] = 0.0f;
            for (long j = 0; j <= t; j++) {
                const float a = p[j] / s, *v = kv + (b * T + j) * kvw + (long)h * (nd + vd) + nd;
                for (int i = 0; i < vd; i++) o[i] += a * v[i];
            }
            lse[bh * T + t] = mx + logf(s);
        }
    }
}

void mw_mla_backward(float *dq, float *dkv, float *dkpe_h, float *scratch, int nthreads, const float *dout,
                     const float *q, const float *kv, const float *kpe, const float *out, const float *lse, int B, int T,
                     int H, int nd, int rd, int vd) {
    const int qw = H * (nd + rd), kvw = H * (nd + vd), ow = H * vd;
    const float sc = 1.0f / sqrtf((float)(nd + rd));
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (long bh = 0; bh < (long)B * H; bh++) {
        const long b = bh / H;
        const int h = (int)(bh % H);
        for (long j = 0; j < T; j++) { /* this head's gradients start at 0 */
            memset(dkv + (b * T + j) * kvw + (long)h * (nd + vd), 0, sizeof(float) * (size_t)(nd + vd));
            memset(dkpe_h + ((b * T + j) * H + h) * rd, 0, sizeof(float) * (size_t)rd);
        }
        for (long t = 0; t < T; t++) { /* query rows in order: each key's gradient sums over t in order */
            const long qi = b * T + t;
            const float *d = dout + qi * ow + (long)h * vd, *o = out + qi * ow + (long)h * vd;
            const float *qh = q + qi * qw + (long)h * (nd + rd);
            float D = 0.0f;
            for (int i = 0; i < vd; i++) D += d[i] * o[i];
            float *dqh = dq + qi * qw + (long)h * (nd + rd);
            for (int i = 0; i < nd + rd; i++) dqh[i] = 0.0f;
            for (long j = 0; j <= t; j++) {
                const long kj = b * T + j;
                const float pj = expf(mla_score(q, kv, kpe, nd, rd, kvw, qw, qi, kj, h, vd) * sc - lse[bh * T + t]);
                const float *v = kv + kj * kvw + (long)h * (nd + vd) + nd;
                float dp = 0.0f;
                for (int i = 0; i < vd; i++) dp += d[i] * v[i];
                const float ds = pj * (dp - D) * sc;
                const float *kn = kv + kj * kvw + (long)h * (nd + vd), *kp = kpe + kj * rd;
                float *dkn = dkv + kj * kvw + (long)h * (nd + vd), *dv = dkn + nd, *dkp = dkpe_h + (kj * H + h) * rd;
                for (int i = 0; i < nd; i++) dqh[i] += ds * kn[i], dkn[i] += ds * qh[i];
                for (int i = 0; i < rd; i++) dqh[nd + i] += ds * kp[i], dkp[i] += ds * qh[nd + i];
                for (int i = 0; i < vd; i++) dv[i] += pj * d[i];
            }
        }
    }
    (void)scratch; /* the scores are recomputed from lse, one at a time */
}

void mw_mla_kpe_reduce(float *dkpe, const float *dkpe_h, long N, int H, int rd) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++)
        for (int i = 0; i < rd; i++) {
            float s = 0.0f;
            for (int h = 0; h < H; h++) s += dkpe_h[(n * H + h) * rd + i];
            dkpe[n * rd + i] = s;
        }
}

/* ---- bfloat16 storage: one (batch, head)'s rows widened, then the fp32 arithmetic above ---------- */

size_t mw_mla_scratch_floats_b16(int T, int nd, int rd, int vd) {
    return mw_mla_scratch_floats(T) + (size_t)T * ((size_t)(nd + rd) + (nd + vd) + rd + vd);
}

/* head h of batch b: q1 (T, nd+rd), kv1 (T, nd+vd), kpe1 (T, rd) widened from the bfloat16 rows */
static void mla_widen(float *q1, float *kv1, float *kpe1, const uint16_t *q, const uint16_t *kv, const uint16_t *kpe,
                      long b, int h, int T, int H, int nd, int rd, int vd) {
    const long qw = (long)H * (nd + rd), kvw = (long)H * (nd + vd);
    for (long t = 0; t < T; t++) {
        const long n = b * T + t;
        mw_bf16_load(q1 + t * (nd + rd), q + n * qw + (long)h * (nd + rd), (size_t)(nd + rd));
        mw_bf16_load(kv1 + t * (nd + vd), kv + n * kvw + (long)h * (nd + vd), (size_t)(nd + vd));
        mw_bf16_load(kpe1 + t * rd, kpe + n * rd, (size_t)rd);
    }
}

void mw_mla_forward_b16(uint16_t *out, float *lse, float *scratch, int nthreads, const uint16_t *q, const uint16_t *kv,
                        const uint16_t *kpe, int B, int T, int H, int nd, int rd, int vd) {
    const int qk = nd + rd, kw = nd + vd, ow = H * vd;
    const float sc = 1.0f / sqrtf((float)(nd + rd));
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (long bh = 0; bh < (long)B * H; bh++) {
        const long b = bh / H;
        const int h = (int)(bh % H);
        float *p = scratch + (size_t)omp_get_thread_num() * mw_mla_scratch_floats_b16(T, nd, rd, vd);
        float *q1 = p + mw_mla_scratch_floats(T), *kv1 = q1 + (size_t)T * qk, *kpe1 = kv1 + (size_t)T * kw;
        float *o = kpe1 + (size_t)T * rd; /* vd */
        mla_widen(q1, kv1, kpe1, q, kv, kpe, b, h, T, H, nd, rd, vd);
        for (long t = 0; t < T; t++) {
            float mx = -INFINITY;
            for (long j = 0; j <= t; j++) {
                p[j] = mla_score(q1, kv1, kpe1, nd, rd, kw, qk, t, j, 0, vd) * sc;
                mx = p[j] > mx ? p[j] : mx;
            }
            float s = 0.0f;
            for (long j = 0; j <= t; j++) s += p[j] = expf(p[j] - mx);
            for (int i = 0; i < vd; i++) o[i] = 0.0f;
            for (long j = 0; j <= t; j++) {
                const float a = p[j] / s, *v = kv1 + j * kw + nd;
                for (int i = 0; i < vd; i++) o[i] += a * v[i];
            }
            mw_bf16_store(out + (b * T + t) * ow + (long)h * vd, o, (size_t)vd);
            lse[bh * T + t] = mx + logf(s);
        }
    }
}

void mw_mla_backward_b16(float *dq, float *dkv, float *dkpe_h, float *scratch, int nthreads, const float *dout,
                         const uint16_t *q, const uint16_t *kv, const uint16_t *kpe, const uint16_t *out,
                         const float *lse, int B, int T, int H, int nd, int rd, int vd) {
    const int qw = H * (nd + rd), kvw = H * (nd + vd), ow = H * vd, qk = nd + rd, kw = nd + vd;
    const float sc = 1.0f / sqrtf((float)(nd + rd));
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (long bh = 0; bh < (long)B * H; bh++) {
        const long b = bh / H;
        const int h = (int)(bh % H);
        float *q1 = scratch + (size_t)omp_get_thread_num() * mw_mla_scratch_floats_b16(T, nd, rd, vd) +
                    mw_mla_scratch_floats(T);
        float *kv1 = q1 + (size_t)T * qk, *kpe1 = kv1 + (size_t)T * kw, *o = kpe1 + (size_t)T * rd; /* vd */
        mla_widen(q1, kv1, kpe1, q, kv, kpe, b, h, T, H, nd, rd, vd);
        for (long j = 0; j < T; j++) { /* this head's gradients start at 0 */
            memset(dkv + (b * T + j) * kvw + (long)h * (nd + vd), 0, sizeof(float) * (size_t)(nd + vd));
            memset(dkpe_h + ((b * T + j) * H + h) * rd, 0, sizeof(float) * (size_t)rd);
        }
        for (long t = 0; t < T; t++) { /* query rows in order: each key's gradient sums over t in order */
            const long qi = b * T + t;
            const float *d = dout + qi * ow + (long)h * vd, *qh = q1 + t * qk;
            mw_bf16_load(o, out + qi * ow + (long)h * vd, (size_t)vd);
            float D = 0.0f;
            for (int i = 0; i < vd; i++) D += d[i] * o[i];
            float *dqh = dq + qi * qw + (long)h * (nd + rd);
            for (int i = 0; i < nd + rd; i++) dqh[i] = 0.0f;
            for (long j = 0; j <= t; j++) {
                const long kj = b * T + j;
                const float pj = expf(mla_score(q1, kv1, kpe1, nd, rd, kw, qk, t, j, 0, vd) * sc - lse[bh * T + t]);
                const float *v = kv1 + j * kw + nd;
                float dp = 0.0f;
                for (int i = 0; i < vd; i++) dp += d[i] * v[i];
                const float ds = pj * (dp - D) * sc;
                const float *kn = kv1 + j * kw, *kp = kpe1 + j * rd;
                float *dkn = dkv + kj * kvw + (long)h * (nd + vd), *dv = dkn + nd, *dkp = dkpe_h + (kj * H + h) * rd;
                for (int i = 0; i < nd; i++) dqh[i] += ds * kn[i], dkn[i] += ds * qh[i];
                for (int i = 0; i < rd; i++) dqh[nd + i] += ds * kp[i], dkp[i] += ds * qh[nd + i];
                for (int i = 0; i < vd; i++) dv[i] += pj * d[i];
            }
        }
    }
}
