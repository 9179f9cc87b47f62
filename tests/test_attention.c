/* Grouped-query attention (H query heads sharing KV key/value heads) in the attention kernels:
 *  - the tiled forward against a double-precision twin (1e-5 of the largest output) and against
 *    the plain one that stores the probabilities (1e-6); its backward against the plain one
 *    (1e-5) and against central finite differences of the twin (1e-4 of the largest gradient);
 *  - the tiled and plain forward bitwise equal to MHA on K/V heads copied out per query head
 *    (a shared head is read in place, with the same arithmetic);
 *  - 1, 2 and 3 threads give the same bits, forward and backward, tiled and plain; the tiled
 *    backward's two schedules too (one pass or two, by the number of (batch, kv head) pairs per
 *    thread: B=1 KV=1 runs one pass on 1 thread, two on 2 and 3; B=2 KV in {1, 2} and B=1 KV in
 *    {2, 4} one on 1 and 2, two on 3; likewise MHA at B=1 H=2);
 *  - GPT-2's entry points are the _gqa ones with KV = H, bit for bit;
 *  - mw_attention_decode against the tiled forward's rows (1e-6) for GQA, and bit for bit against
 *    GPT-2's decode loop (copied here) for KV = H;
 *  - the bfloat16 entry points (q|k|v read, the output stored as bfloat16, or both) bit for bit
 *    equal to the fp32 kernels on the widened values, the output rounded, on 1, 2 and 3 threads
 *    (both backward schedules);
 *  - the in-place backward (dqkv over qkv, from the row dots) bit for bit the kernel's dqkv.
 * KV in {1, 2, H}, T on both sides of the 128-row tile. */
#include <omp.h>

#include "../src/core/rng.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/cpu/ops.h"
#include "check.h"
#include "memwall.h"

static uint64_t rng = 7;
static void randn(float *x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(s * mw_rng_normal(&rng));
}
static float *fnew(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *dnew(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static void f2d(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}
/* max |a - b| / max |b| */
static double err_d(const float *a, const double *b, size_t n) {
    double md = 0, mb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return md / mb;
}
static double err_f(const float *a, const float *b, size_t n) {
    double *bd = dnew(n);
    f2d(bd, b, n);
    double e = err_d(a, bd, n);
    free(bd);
    return e;
}
static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ---- the double twin, on the fused layout ---- */
typedef struct {
    int B, T, H, KV, hs;
    double *qkv, *out;
    const float *wl; /* loss weights (B,T,H*hs) */
} gq_ctx;
static void gq_twin(gq_ctx *c) {
    const long RS = (long)(c->H + 2 * c->KV) * c->hs, OS = (long)c->H * c->hs;
    const int grp = c->H / c->KV, hs = c->hs;
    double *row = dnew(c->T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++) {
            const double *base = c->qkv + (size_t)b * c->T * RS;
            const double *K = base + OS + (h / grp) * hs, *V = K + (long)c->KV * hs;
            for (int i = 0; i < c->T; i++) {
                const double *q = base + (size_t)i * RS + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += q[d] * K[(size_t)j * RS + d];
                    row[j] = s / sqrt(hs);
                    mx = row[j] > mx ? row[j] : mx;
                }
                for (int j = 0; j <= i; j++) sum += (row[j] = exp(row[j] - mx));
                double *o = c->out + ((size_t)b * c->T + i) * OS + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0;
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < hs; d++) o[d] += row[j] / sum * V[(size_t)j * RS + d];
            }
        }
    free(row);
}
static double gq_loss(gq_ctx *c) {
    gq_twin(c);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->B * c->T * c->H * c->hs; i++) s += c->out[i] * c->wl[i];
    return s;
}
/* the analytic gradient g against central differences of the twin at up to max_checks entries */
static double fd_check(const float *g, gq_ctx *c, size_t n, size_t max_checks) {
    size_t stride = n > max_checks ? n / max_checks : 1;
    double gmax = 1e-30, worst = 0;
    for (size_t i = 0; i < n; i++) gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
    for (size_t i = 0; i < n; i += stride) {
        double x0 = c->qkv[i], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
        c->qkv[i] = x0 + h;
        double lp = gq_loss(c);
        c->qkv[i] = x0 - h;
        double lm = gq_loss(c);
        c->qkv[i] = x0;
        double e = fabs((lp - lm) / (2 * h) - g[i]) / gmax;
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* MHA's fused layout with the K/V heads of (B,T,H,KV,hs) copied out per query head */
static float *expand(const float *qkv, int B, int T, int H, int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, RE = 3L * H * hs, OS = (long)H * hs;
    float *e = fnew((size_t)B * T * RE);
    for (long n = 0; n < (long)B * T; n++) {
        const float *r = qkv + n * RS;
        float *o = e + n * RE;
        memcpy(o, r, sizeof(float) * OS);
        for (int h = 0; h < H; h++) {
            const int g = h / (H / KV);
            memcpy(o + OS + h * hs, r + OS + g * hs, sizeof(float) * hs);
            memcpy(o + 2 * OS + h * hs, r + OS + (long)KV * hs + g * hs, sizeof(float) * hs);
        }
    }
    return e;
}

static void test_gqa(int B, int T, int H, int KV, int hs, size_t checks) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const size_t nq = (size_t)B * T * RS, no = (size_t)B * T * OS, nl = (size_t)B * H * T;
    const size_t per = mw_attention_scratch_floats(T);
    float *qkv = fnew(nq), *wl = fnew(no), *scr = fnew(3 * per), *pscr = fnew((size_t)3 * T * T);
    float *out[3], *lse[3], *dq[3], *pout[3], *pdq[3], *att = fnew(nl * T);
    for (int t = 0; t < 3; t++) {
        out[t] = fnew(no), lse[t] = fnew(nl), dq[t] = fnew(nq), pout[t] = fnew(no), pdq[t] = fnew(nq);
        memset(dq[t], 0xff, nq * sizeof(float)); /* NaN: every element must be written */
    }
    randn(qkv, nq, 1);
    randn(wl, no, 1);
    for (int t = 0; t < 3; t++) { /* t + 1 threads */
        mw_set_threads(t + 1);
        mw_attention_forward_gqa(out[t], lse[t], scr, t + 1, qkv, B, T, H, KV, hs);
        mw_attention_backward_gqa(dq[t], scr, t + 1, wl, qkv, out[t], lse[t], B, T, H, KV, hs);
        mw_attention_forward_plain_gqa(pout[t], att, qkv, B, T, H, KV, hs);
        mw_attention_backward_plain_gqa(pdq[t], pscr, t + 1, wl, qkv, att, B, T, H, KV, hs);
    }
    mw_set_threads(2);
    gq_ctx c = {B, T, H, KV, hs, dnew(nq), dnew(no), wl};
    f2d(c.qkv, qkv, nq);
    gq_twin(&c);
    const double ef = err_d(out[0], c.out, no), etp = err_f(out[0], pout[0], no);
    const double ebp = err_f(dq[0], pdq[0], nq), efd = fd_check(dq[0], &c, nq, checks);
    CHECK(ef < 1e-5, "GQA H=%d KV=%d T=%d: forward vs double %.3g", H, KV, T, ef);
    CHECK(etp < 1e-6 && ebp < 1e-5, "GQA H=%d KV=%d T=%d: tiled vs plain forward %.3g backward %.3g",
          H, KV, T, etp, ebp);
    CHECK(efd < 1e-4, "GQA H=%d KV=%d T=%d: dqkv vs finite differences %.3g", H, KV, T, efd);
    int thr = 1;
    for (int t = 1; t < 3; t++)
        thr &= same(out[t], out[0], no) && same(lse[t], lse[0], nl) && same(dq[t], dq[0], nq) &&
               same(pout[t], pout[0], no) && same(pdq[t], pdq[0], nq);
    CHECK(thr, "GQA H=%d KV=%d T=%d: 1, 2 and 3 threads differ", H, KV, T);
    /* a shared head read in place computes what MHA computes on per-head copies of it */
    float *e = expand(qkv, B, T, H, KV, hs), *mo = fnew(no), *ml = fnew(nl), *mp = fnew(no);
    mw_attention_forward(mo, ml, scr, 2, e, B, T, (int)OS, H);
    mw_attention_forward_plain(mp, att, e, B, T, (int)OS, H);
    const int mha = same(mo, out[0], no) && same(ml, lse[0], nl) && same(mp, pout[0], no);
    CHECK(mha, "GQA H=%d KV=%d T=%d: forward differs from MHA on copied heads", H, KV, T);
    printf("  H=%d KV=%d hs=%d B=%d T=%3d: fwd vs double %.2e, tiled vs plain fwd %.2e bwd %.2e, "
           "grad vs fd %.2e; 1/2/3 threads bitwise: %s; fwd == MHA on copies: %s\n",
           H, KV, hs, B, T, ef, etp, ebp, efd, thr ? "yes" : "NO", mha ? "yes" : "NO");
    for (int t = 0; t < 3; t++) free(out[t]), free(lse[t]), free(dq[t]), free(pout[t]), free(pdq[t]);
    free(qkv), free(wl), free(scr), free(pscr), free(att), free(c.qkv), free(c.out), free(e);
    free(mo), free(ml), free(mp);
}

/* GPT-2's entry points (qkv (B,T,3C)) give the bits of the _gqa ones with KV = H */
static void test_wrappers(int B, int T, int C, int H) {
    const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * H * T;
    const size_t per = mw_attention_scratch_floats(T);
    float *qkv = fnew(nq), *d = fnew(no), *scr = fnew(2 * per), *pscr = fnew((size_t)2 * T * T);
    float *o1 = fnew(no), *o2 = fnew(no), *l1 = fnew(nl), *l2 = fnew(nl), *g1 = fnew(nq), *g2 = fnew(nq);
    float *a1 = fnew(nl * T), *a2 = fnew(nl * T), *p1 = fnew(no), *p2 = fnew(no), *h1 = fnew(nq), *h2 = fnew(nq);
    randn(qkv, nq, 1);
    randn(d, no, 1);
    mw_attention_forward(o1, l1, scr, 2, qkv, B, T, C, H);
    mw_attention_backward(g1, scr, 2, d, qkv, o1, l1, B, T, C, H);
    mw_attention_forward_gqa(o2, l2, scr, 2, qkv, B, T, H, H, C / H);
    mw_attention_backward_gqa(g2, scr, 2, d, qkv, o2, l2, B, T, H, H, C / H);
    mw_attention_forward_plain(p1, a1, qkv, B, T, C, H);
    mw_attention_backward_plain(h1, pscr, 2, d, qkv, a1, B, T, C, H);
    mw_attention_forward_plain_gqa(p2, a2, qkv, B, T, H, H, C / H);
    mw_attention_backward_plain_gqa(h2, pscr, 2, d, qkv, a2, B, T, H, H, C / H);
    const int ok = same(o1, o2, no) && same(l1, l2, nl) && same(g1, g2, nq) && same(p1, p2, no) &&
                   same(a1, a2, nl * T) && same(h1, h2, nq);
    CHECK(ok, "GPT-2 attention (B=%d T=%d C=%d H=%d) differs from _gqa with KV = H", B, T, C, H);
    printf("  GPT-2 entry points == _gqa with KV = H (B=%d T=%d C=%d H=%d), bitwise: %s\n", B, T, C,
           H, ok ? "yes" : "NO");
    free(qkv), free(d), free(scr), free(pscr), free(o1), free(o2), free(l1), free(l2), free(g1);
    free(g2), free(a1), free(a2), free(p1), free(p2), free(h1), free(h2);
}

/* the decode step at every position against the tiled forward, the cache read in place from
 * qkv: 1e-6 relative to the largest output; the last row 2e-6 relative to its own largest (one
 * row's error against the double result reaches 1.2e-6 with the decode loop's plain float sums
 * over 257 positions, 0.7e-6 with the tiled kernel's fma chains) */
static void test_decode_gqa(int T, int H, int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const size_t nq = (size_t)T * RS, no = (size_t)T * OS;
    float *qkv = fnew(nq), *out = fnew(no), *lse = fnew((size_t)H * T);
    float *scr = fnew(mw_attention_scratch_floats(T)), *y = fnew(no), *att = fnew(T);
    randn(qkv, nq, 1);
    mw_attention_forward_gqa(out, lse, scr, 1, qkv, 1, T, H, KV, hs);
    for (int pos = 0; pos < T; pos++)
        mw_attention_decode(y + pos * OS, qkv + pos * RS, qkv + OS, qkv + OS + (long)KV * hs, RS,
                            pos, H, KV, hs, att);
    const double e = err_f(y, out, no), el = err_f(y + (T - 1) * OS, out + (T - 1) * OS, OS);
    CHECK(e < 1e-6 && el < 2e-6, "decode H=%d KV=%d T=%d vs the tiled forward: %.3g, last row %.3g",
          H, KV, T, e, el);
    printf("  decode H=%d KV=%d hs=%d at every position of T=%d vs the tiled forward: %.2e, last "
           "row %.2e\n", H, KV, hs, T, e, el);
    free(qkv), free(out), free(lse), free(scr), free(y), free(att);
}

/* KV = H: the bits of GPT-2's decode loop (src/model/gpt2.c, mw_model_decode), copied here */
static void test_decode_gpt2(int CTX, int C, int H) {
    const int hs = C / H;
    float *K = fnew((size_t)CTX * C), *Vc = fnew((size_t)CTX * C), *qkv = fnew(3 * (size_t)C);
    float *y = fnew(C), *y2 = fnew(C), *att = fnew(CTX), *att2 = fnew(CTX);
    randn(K, (size_t)CTX * C, 1);
    randn(Vc, (size_t)CTX * C, 1);
    randn(qkv, C, 2);
    const float scale = 1.0f / sqrtf((float)hs);
    int ok = 1;
    for (int pos = 0; pos < CTX; pos += pos < 8 ? 1 : 37) {
        for (int hd = 0; hd < H; hd++) {
            const float *q = qkv + hd * hs;
            float mx = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= pos; j++) {
                const float *k = K + (size_t)j * C + hd * hs;
                float d = 0.0f;
                for (int e = 0; e < hs; e++) d += q[e] * k[e];
                att[j] = d * scale;
                mx = att[j] > mx ? att[j] : mx;
            }
            for (int j = 0; j <= pos; j++) sum += (att[j] = expf(att[j] - mx));
            float inv = 1.0f / sum, *o = y + hd * hs;
            for (int e = 0; e < hs; e++) o[e] = 0.0f;
            for (int j = 0; j <= pos; j++) {
                const float *v = Vc + (size_t)j * C + hd * hs;
                float a = att[j] * inv;
                for (int e = 0; e < hs; e++) o[e] += a * v[e];
            }
        }
        mw_attention_decode(y2, qkv, K, Vc, C, pos, H, H, hs, att2);
        ok &= same(y, y2, C);
    }
    CHECK(ok, "decode (C=%d H=%d) differs from GPT-2's decode loop", C, H);
    printf("  decode == GPT-2's decode loop (C=%d H=%d, positions up to %d), bitwise: %s\n", C, H,
           CTX - 1, ok ? "yes" : "NO");
    free(K), free(Vc), free(qkv), free(y), free(y2), free(att), free(att2);
}

/* bfloat16 q|k|v and/or output: the fp32 kernels' bits on the widened values, the output rounded */
static void test_bf16(int B, int T, int H, int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const size_t nq = (size_t)B * T * RS, no = (size_t)B * T * OS, nl = (size_t)B * H * T;
    const size_t per = mw_attention_scratch_floats_x(T, hs, 1);
    float *qkv = fnew(nq), *wl = fnew(no), *scr = fnew(3 * per), *o32 = fnew(no), *l32 = fnew(nl);
    float *d32 = fnew(nq), *ow = fnew(no), *o = fnew(no), *l = fnew(nl), *d = fnew(nq);
    uint16_t *q16 = calloc(nq, 2), *o16 = calloc(no, 2), *r16 = calloc(no, 2);
    randn(qkv, nq, 1);
    randn(wl, no, 1);
    mw_bf16_store(q16, qkv, nq);
    for (size_t i = 0; i < nq; i++) qkv[i] = mw_bf16_widen(q16[i]); /* what the kernels read */
    int ok = 1;
    for (int mode = 1; mode < 4; mode++) { /* 1: q|k|v, 2: output, 3: both bfloat16 */
        const int qb = mode & 1, ob = (mode >> 1) & 1;
        for (int t = 0; t < 3; t++) {
            mw_set_threads(t + 1);
            /* the reference: fp32 kernels on the widened q|k|v; its output rounded as stored */
            mw_attention_forward_gqa(o32, l32, scr, t + 1, qkv, B, T, H, KV, hs);
            mw_bf16_store(r16, o32, no);
            for (size_t i = 0; i < no; i++) ow[i] = ob ? mw_bf16_widen(r16[i]) : o32[i];
            mw_attention_backward_gqa(d32, scr, t + 1, wl, qkv, ow, l32, B, T, H, KV, hs);
            memset(d, 0xff, nq * sizeof(float));
            mw_attention_forward_x(ob ? (void *)o16 : (void *)o, ob, l, scr, t + 1, qb ? (const void *)q16 : (const void *)qkv, qb,
                                   B, T, H, KV, hs);
            mw_attention_backward_x(d, scr, t + 1, wl, qb ? (const void *)q16 : (const void *)qkv, qb,
                                    ob ? (const void *)o16 : (const void *)o, ob, l, B, T, H, KV, hs);
            ok &= same(l, l32, nl) && same(d, d32, nq);
            ok &= ob ? memcmp(o16, r16, no * 2) == 0 : same(o, o32, no);
        }
    }
    mw_set_threads(2);
    CHECK(ok, "bf16 attention B=%d T=%d H=%d KV=%d hs=%d: not the fp32 kernels' bits on the widened values",
          B, T, H, KV, hs);
    free(qkv), free(wl), free(scr), free(o32), free(l32), free(d32), free(ow), free(o), free(l), free(d);
    free(q16), free(o16), free(r16);
}

/* The in-place backward (a recomputed GPT-2 block's): D from mw_attention_rowdots, dqkv written
 * over qkv, bit for bit the dqkv of mw_attention_backward_gqa on 1, 2 and 3 threads (whose
 * schedule, one pass or two, differs by thread count) */
static void test_inplace(int B, int T, int H, int KV, int hs) {
    const long RS = (long)(H + 2 * KV) * hs, OS = (long)H * hs;
    const size_t nq = (size_t)B * T * RS, no = (size_t)B * T * OS, nl = (size_t)B * H * T;
    const size_t per = mw_attention_scratch_floats_ip(T, hs);
    float *qkv = fnew(nq), *wl = fnew(no), *scr = fnew(3 * per), *out = fnew(no), *lse = fnew(nl);
    float *D = fnew(nl), *ref = fnew(nq), *ip = fnew(nq);
    randn(qkv, nq, 1);
    randn(wl, no, 1);
    mw_attention_forward_gqa(out, lse, scr, 2, qkv, B, T, H, KV, hs);
    int ok = 1;
    for (int t = 1; t <= 3; t++) {
        mw_set_threads(t);
        mw_attention_backward_gqa(ref, scr, t, wl, qkv, out, lse, B, T, H, KV, hs);
        memcpy(ip, qkv, nq * sizeof(float));
        mw_attention_rowdots(D, wl, out, B, T, H, hs);
        mw_attention_backward_inplace(ip, scr, t, wl, D, lse, B, T, H, KV, hs);
        ok &= same(ip, ref, nq);
    }
    mw_set_threads(2);
    CHECK(ok, "in place H=%d KV=%d B=%d T=%d: dqkv differs from the kernel's", H, KV, B, T);
    printf("  in place H=%d KV=%d hs=%d B=%d T=%3d: dqkv over qkv == the kernel's, 1/2/3 threads: %s\n", H, KV, hs,
           B, T, ok ? "yes" : "NO");
    free(qkv), free(wl), free(scr), free(out), free(lse), free(D), free(ref), free(ip);
}

/* The streamed backward (a compressed recomputed GPT-2 block's): q|k|v read a tile at a time, dqkv
 * handed on R rows at a time in row order, bit for bit the dqkv of mw_attention_backward_gqa (KV = H)
 * on 1, 2 and 3 threads; R cuts rows across tiles and batches, and the last call is partial */
typedef struct {
    const float *qkv;
    float *got;
    long RS, next;
    int order_ok, R;
} stream_t;
static int st_read(void *ctx, long r0, int rows, int c0, int c1, float *dst, long ld) {
    const stream_t *s = ctx;
    for (int r = 0; r < rows; r++) memcpy(dst + r * ld, s->qkv + (r0 + r) * s->RS + c0, sizeof(float) * (size_t)(c1 - c0));
    return 0;
}
static int st_done(void *ctx, long r0, int rows, const float *dqkv) {
    stream_t *s = ctx;
    s->order_ok &= r0 == s->next && rows <= s->R;
    memcpy(s->got + r0 * s->RS, dqkv, sizeof(float) * (size_t)rows * (size_t)s->RS);
    s->next = r0 + rows;
    return 0;
}
static void test_stream(int B, int T, int H, int hs, int R) {
    const long RS = 3L * H * hs, OS = (long)H * hs;
    const size_t nq = (size_t)B * T * RS, no = (size_t)B * T * OS, nl = (size_t)B * H * T;
    const size_t per = mw_attention_scratch_floats_x(T, hs, 0), sf = mw_attention_stream_floats(T, H, hs, R, 3);
    float *qkv = fnew(nq), *wl = fnew(no), *scr = fnew(3 * per), *out = fnew(no), *lse = fnew(nl);
    float *D = fnew(nl), *ref = fnew(nq), *got = fnew(nq), *sscr = fnew(sf);
    randn(qkv, nq, 1);
    randn(wl, no, 1);
    mw_attention_forward_gqa(out, lse, scr, 2, qkv, B, T, H, H, hs);
    mw_attention_rowdots(D, wl, out, B, T, H, hs);
    int ok = 1;
    for (int t = 1; t <= 3; t++) {
        mw_set_threads(t);
        mw_attention_backward_gqa(ref, scr, t, wl, qkv, out, lse, B, T, H, H, hs);
        stream_t c = {qkv, got, RS, 0, 1, R};
        memset(got, 0, nq * sizeof(float));
        const mw_att_stream st = {st_read, st_done, &c, R};
        ok &= mw_attention_backward_stream(&st, sscr, t, wl, D, lse, B, T, H, hs) == 0;
        ok &= c.order_ok && c.next == (long)B * T && same(got, ref, nq);
    }
    mw_set_threads(2);
    CHECK(ok, "streamed H=%d B=%d T=%d R=%d: dqkv differs from the kernel's", H, B, T, R);
    printf("  streamed H=%d hs=%d B=%d T=%3d R=%3d: dqkv by row groups == the kernel's, 1/2/3 threads: %s\n", H, hs, B,
           T, R, ok ? "yes" : "NO");
    free(qkv), free(wl), free(scr), free(out), free(lse), free(D), free(ref), free(got), free(sscr);
}

int main(void) {
    mw_set_threads(2);
    const int H = 4;
    for (int KV = 1; KV <= H; KV *= 2) test_gqa(2, 7, H, KV, 8, 100000); /* every entry */
    test_gqa(1, 5, 6, 3, 4, 100000);
    test_gqa(1, 130, 2, 2, 8, 200);
    for (int KV = 1; KV <= H; KV *= 2) test_gqa(1, 130, H, KV, 8, 300);
    for (int KV = 1; KV <= H; KV *= 2) test_gqa(2, 257, H, KV, 16, 60);
    test_wrappers(2, 11, 12, 3);
    test_wrappers(1, 257, 64, 4);
    for (int KV = 1; KV <= H; KV *= 2) test_decode_gqa(257, H, KV, 16);
    test_decode_gqa(130, 6, 3, 8);
    test_decode_gpt2(300, 48, 3);
    test_decode_gpt2(20, 768, 12);
    for (int KV = 1; KV <= H; KV *= 2) test_bf16(1, 130, H, KV, 8); /* both backward schedules */
    test_bf16(2, 257, H, 2, 16);
    test_bf16(2, 7, 6, 3, 4);
    for (int KV = 1; KV <= H; KV *= 2) test_inplace(1, 130, H, KV, 8); /* both schedules of the reference */
    test_inplace(2, 257, 3, 3, 16);
    test_inplace(2, 7, 6, 3, 4);
    test_stream(2, 257, 3, 16, 100); /* groups across tiles and batches, a partial last one */
    test_stream(1, 130, 4, 8, 256);  /* one group of every row */
    test_stream(2, 7, 6, 4, 3);
    printf("  bf16 q|k|v and output == fp32 kernels on the widened values, rounded: %s\n",
           check_failures ? "see above" : "yes");
    return test_summary("test_attention");
}
