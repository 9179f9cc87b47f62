/* Every CPU kernel against a plain double-precision twin written here:
 *  - forward: element-wise, relative to the tensor's largest entry, 1e-5;
 *  - backward: against central finite differences of the double twin of the forward, on the
 *    scalar loss L = sum(out * w) with random w, 1e-4 relative to the largest gradient.
 * Sizes are not multiples of the vector width; attention also runs at T=130 to cross its
 * 128-row block boundary. The Llama family's ops (RMSNorm, the rotary embedding, SwiGLU) also
 * give the same bits on 1 and 2 threads. */
#include <omp.h>

#include "../src/core/rng.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/cpu/isa.h"
#include "../src/kernels/cpu/ops.h"
#include "../src/kernels/cpu/ops_avx512.h"
#include "../src/kernels/cpu/rowmax.h"
#include "check.h"
#include "memwall.h"

static uint64_t rng = 42;
static void randn(float *x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(s * mw_rng_normal(&rng));
}
static float *fnew(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *dnew(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static void f2d(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}
static double dot(const double *a, const float *w, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * w[i];
    return s;
}
/* forward: float result vs double twin, relative to max |twin| */
static double err_fd(const float *a, const double *b, size_t n) {
    double md = 0, mb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return md / mb;
}

/* The loss of a twin forward as a function of one input array. */
typedef double (*loss_fn)(void *ctx);
/* Checks analytic gradient g (n) of array x (n, the double input the twin reads) at up to
 * max_checks entries spread over the array. */
static void check_grad(const char *what, const float *g, double *x, size_t n, loss_fn f, void *ctx,
                       size_t max_checks) {
    size_t stride = n > max_checks ? n / max_checks : 1;
    double gmax = 1e-30, worst = 0;
    for (size_t i = 0; i < n; i++) gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
    for (size_t i = 0; i < n; i += stride) {
        double x0 = x[i], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        double num = (lp - lm) / (2 * h), e = fabs(num - g[i]) / gmax;
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-4, "%s: gradient vs finite differences rel err %.3g", what, worst);
    printf("  %-28s grad vs finite differences: %.2e\n", what, worst);
}

/* ---- layernorm ---- */
typedef struct {
    int N, C;
    double *x, *w, *b;
    const float *wl; /* loss weights */
    double *out;
    double eps; /* 0: GPT-2's 1e-5 */
} ln_ctx;
static void ln_twin(ln_ctx *c) {
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->C;
        double m = 0, v = 0;
        for (int i = 0; i < c->C; i++) m += x[i];
        m /= c->C;
        for (int i = 0; i < c->C; i++) v += (x[i] - m) * (x[i] - m);
        v /= c->C;
        double s = 1 / sqrt(v + (c->eps > 0 ? c->eps : 1e-5));
        for (int i = 0; i < c->C; i++) c->out[(size_t)n * c->C + i] = (x[i] - m) * s * c->w[i] + c->b[i];
    }
}
static double ln_loss(void *p) {
    ln_ctx *c = p;
    ln_twin(c);
    return dot(c->out, c->wl, (size_t)c->N * c->C);
}
static void test_layernorm(void) {
    const int N = 7, C = 37;
    float *x = fnew(N * C), *w = fnew(C), *b = fnew(C), *out = fnew(N * C), *mean = fnew(N),
          *rstd = fnew(N), *wl = fnew(N * C), *dx = fnew(N * C), *dw = fnew(C), *db = fnew(C);
    randn(x, N * C, 1.5);
    randn(w, C, 1);
    randn(b, C, 1);
    randn(wl, N * C, 1);
    ln_ctx c = {N, C, dnew(N * C), dnew(C), dnew(C), wl, dnew(N * C), 0};
    f2d(c.x, x, N * C);
    f2d(c.w, w, C);
    f2d(c.b, b, C);
    mw_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    ln_twin(&c);
    double e = err_fd(out, c.out, N * C);
    CHECK(e < 1e-5, "layernorm forward rel err %.3g", e);
    printf("  layernorm forward: %.2e\n", e);
    mw_layernorm_backward_acc(dx, dw, db, wl, x, w, mean, rstd, N, C);
    check_grad("layernorm dinp", dx, c.x, N * C, ln_loss, &c, 1000);
    check_grad("layernorm dw", dw, c.w, C, ln_loss, &c, 1000);
    check_grad("layernorm db", db, c.b, C, ln_loss, &c, 1000);
    /* the _acc contract: a second call adds the same again */
    float *dx2 = fnew(N * C);
    memcpy(dx2, dx, sizeof(float) * N * C);
    mw_layernorm_backward_acc(dx2, dw, db, wl, x, w, mean, rstd, N, C);
    int acc_ok = 1;
    for (int i = 0; i < N * C; i++) acc_ok &= fabsf(dx2[i] - 2 * dx[i]) <= 1e-6f * (1 + fabsf(dx[i]));
    CHECK(acc_ok, "layernorm backward does not accumulate into dinp");
    /* another epsilon (a config.json's layer_norm_epsilon): the twin's, and backward through the
     * rstd it keeps; 1e-5f is the plain kernel bit for bit */
    c.eps = 0.5;
    mw_layernorm_forward_eps(out, 0, mean, rstd, x, w, b, N, C, 0.5f);
    ln_twin(&c);
    e = err_fd(out, c.out, N * C);
    CHECK(e < 1e-5, "layernorm forward eps 0.5 rel err %.3g", e);
    memset(dx, 0, sizeof(float) * N * C), memset(dw, 0, sizeof(float) * C), memset(db, 0, sizeof(float) * C);
    mw_layernorm_backward_acc(dx, dw, db, wl, x, w, mean, rstd, N, C);
    check_grad("layernorm eps 0.5 dinp", dx, c.x, N * C, ln_loss, &c, 1000);
    mw_layernorm_forward_eps(dx2, 0, mean, rstd, x, w, b, N, C, 1e-5f);
    mw_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    CHECK(memcmp(dx2, out, sizeof(float) * N * C) == 0, "layernorm eps 1e-5f differs from the plain kernel");
    printf("  layernorm forward, eps 0.5: %.2e\n", e);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(wl), free(dx), free(dw), free(db), free(dx2);
    free(c.x), free(c.w), free(c.b), free(c.out);
}

/* ---- matmul ---- */
typedef struct {
    int N, C, OC;
    double *x, *w, *b, *out;
    const float *wl;
} mm_ctx;
static void mm_twin(mm_ctx *c) {
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->b[o];
            for (int i = 0; i < c->C; i++) s += c->x[(size_t)n * c->C + i] * c->w[(size_t)o * c->C + i];
            c->out[(size_t)n * c->OC + o] = s;
        }
}
static double mm_loss(void *p) {
    mm_ctx *c = p;
    mm_twin(c);
    return dot(c->out, c->wl, (size_t)c->N * c->OC);
}
static void test_matmul(void) {
    const int N = 9, C = 19, OC = 23;
    float *x = fnew(N * C), *w = fnew(OC * C), *b = fnew(OC), *out = fnew(N * OC), *ref = fnew(N * OC),
          *wl = fnew(N * OC), *dx = fnew(N * C), *dw = fnew(OC * C), *db = fnew(OC);
    randn(x, N * C, 1);
    randn(w, OC * C, 0.5);
    randn(b, OC, 1);
    randn(wl, N * OC, 1);
    mm_ctx c = {N, C, OC, dnew(N * C), dnew(OC * C), dnew(OC), dnew(N * OC), wl};
    f2d(c.x, x, N * C);
    f2d(c.w, w, OC * C);
    f2d(c.b, b, OC);
    const size_t wsn = mw_gemm_ws_floats(2, 64);
    float *wsb = fnew(wsn);
    const mw_gemm_ws ws = {wsb, wsn, 2, 0};
    mw_matmul_forward(out, x, w, b, N, C, OC, 0, &ws);
    mm_twin(&c);
    double e = err_fd(out, c.out, N * OC);
    CHECK(e < 1e-5, "matmul forward rel err %.3g", e);
    mw_matmul_forward_ref(ref, x, w, b, N, C, OC);
    double e2 = err_fd(ref, c.out, N * OC);
    CHECK(e2 < 1e-6, "scalar matmul oracle rel err %.3g", e2);
    /* acc: out += x w^T + b */
    mw_matmul_forward(out, x, w, b, N, C, OC, 1, &ws);
    int acc_ok = 1;
    for (int i = 0; i < N * OC; i++) acc_ok &= fabs(out[i] - 2 * c.out[i]) <= 1e-4 * (1 + fabs(c.out[i]));
    CHECK(acc_ok, "matmul forward with acc does not add");
    printf("  matmul forward: %.2e\n", e);
    mw_matmul_backward(dx, dw, db, wl, x, w, N, C, OC, 0, &ws);
    check_grad("matmul dinp", dx, c.x, N * C, mm_loss, &c, 1000);
    check_grad("matmul dw", dw, c.w, OC * C, mm_loss, &c, 1000);
    check_grad("matmul db", db, c.b, OC, mm_loss, &c, 1000);
    free(x), free(w), free(b), free(out), free(ref), free(wl), free(dx), free(dw), free(db), free(wsb);
    free(c.x), free(c.w), free(c.b), free(c.out);
}

/* ---- attention ---- */
typedef struct {
    int B, T, C, H;
    double *qkv, *out;
    const float *wl;
} at_ctx;
static void at_twin(at_ctx *c) {
    const int C3 = 3 * c->C, hs = c->C / c->H;
    double *row = dnew(c->T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->T; i++) {
                const double *q = c->qkv + ((size_t)b * c->T + i) * C3 + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = c->qkv + ((size_t)b * c->T + j) * C3 + c->C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += q[d] * k[d];
                    row[j] = s / sqrt(hs);
                    mx = row[j] > mx ? row[j] : mx;
                }
                for (int j = 0; j <= i; j++) sum += (row[j] = exp(row[j] - mx));
                double *o = c->out + ((size_t)b * c->T + i) * c->C + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0;
                for (int j = 0; j <= i; j++) {
                    const double *v = c->qkv + ((size_t)b * c->T + j) * C3 + 2 * c->C + h * hs;
                    for (int d = 0; d < hs; d++) o[d] += row[j] / sum * v[d];
                }
            }
    free(row);
}
static double at_loss(void *p) {
    at_ctx *c = p;
    at_twin(c);
    return dot(c->out, c->wl, (size_t)c->B * c->T * c->C);
}
static void test_attention(int B, int T, int C, int H, size_t checks) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    int nt = omp_get_max_threads();
    float *qkv = fnew(nq), *out = fnew(no), *lse = fnew((size_t)B * H * T), *wl = fnew(no),
          *dqkv = fnew(nq), *scratch = fnew((size_t)nt * mw_attention_scratch_floats(T));
    float *pout = fnew(no), *att = fnew((size_t)B * H * T * T), *pd = fnew(nq),
          *pscr = fnew((size_t)nt * T * T);
    randn(qkv, nq, 1);
    randn(wl, no, 1);
    at_ctx c = {B, T, C, H, dnew(nq), dnew(no), wl};
    f2d(c.qkv, qkv, nq);
    mw_attention_forward(out, lse, scratch, nt, qkv, B, T, C, H);
    at_twin(&c);
    double e = err_fd(out, c.out, no);
    CHECK(e < 1e-5, "attention forward (T=%d) rel err %.3g", T, e);
    mw_attention_backward(dqkv, scratch, nt, wl, qkv, out, lse, B, T, C, H);
    char name[64];
    snprintf(name, sizeof name, "attention dqkv T=%d", T);
    check_grad(name, dqkv, c.qkv, nq, at_loss, &c, checks);
    /* the plain version (T x T stored) agrees; the tiled one is bitwise the same on 1 thread */
    mw_attention_forward_plain(pout, att, qkv, B, T, C, H);
    mw_attention_backward_plain(pd, pscr, nt, wl, qkv, att, B, T, C, H);
    double *dd = dnew(nq), *od = dnew(no);
    f2d(dd, pd, nq);
    f2d(od, pout, no);
    double ef = err_fd(out, od, no), eb = err_fd(dqkv, dd, nq);
    CHECK(ef < 1e-6 && eb < 1e-5, "tiled vs plain attention T=%d: forward %.3g backward %.3g", T, ef, eb);
    float *out1 = fnew(no), *d1 = fnew(nq);
    mw_set_threads(1); /* BLAS too: inside the kernels' parallel loop it runs on one thread */
    mw_attention_forward(out1, lse, scratch, 1, qkv, B, T, C, H);
    mw_attention_backward(d1, scratch, 1, wl, qkv, out1, lse, B, T, C, H);
    mw_set_threads(nt);
    const int same = memcmp(out1, out, no * 4) == 0 && memcmp(d1, dqkv, nq * 4) == 0;
    CHECK(same, "tiled attention T=%d differs between 1 and %d threads", T, nt);
    printf("  attention T=%d: forward vs double %.2e; tiled vs plain: forward %.2e, backward %.2e; "
           "1 vs %d threads bitwise equal: %s\n", T, e, ef, eb, nt, same ? "yes" : "NO");
    free(qkv), free(out), free(lse), free(wl), free(dqkv), free(scratch), free(c.qkv), free(c.out);
    free(pout), free(att), free(pd), free(pscr), free(dd), free(od), free(out1), free(d1);
}

/* ---- gelu ---- */
static double gelu_twin(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static void test_gelu(void) {
    const int n = 1001;
    float *x = fnew(n), *y = fnew(n), *d = fnew(n);
    randn(x, n, 3);
    x[0] = 0, x[1] = 20, x[2] = -20, x[3] = 1e-6f;
    mw_gelu_forward(y, x, n);
    double worst = 0, worst_d = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(y[i] - gelu_twin(x[i])) / (1 + fabs(gelu_twin(x[i])));
        worst = e > worst ? e : worst;
        d[i] = 1.0f;
    }
    CHECK(worst < 1e-6, "gelu forward err %.3g", worst);
    mw_gelu_backward_inplace(d, x, n);
    for (int i = 0; i < n; i++) {
        double h = 1e-5, num = (gelu_twin(x[i] + h) - gelu_twin(x[i] - h)) / (2 * h);
        double e = fabs(d[i] - num) / (1 + fabs(num));
        worst_d = e > worst_d ? e : worst_d;
    }
    CHECK(worst_d < 1e-5, "gelu backward vs finite differences err %.3g", worst_d);
    printf("  gelu forward %.2e, backward vs finite differences %.2e\n", worst, worst_d);
    /* the vectorised tanh against libm's, its scalar oracle */
    double wt = 0;
    for (float u = -20.0f; u <= 20.0f; u += 0.0007f) {
        double e = fabs((double)mw_tanh_fast(u) - tanh((double)u));
        wt = e > wt ? e : wt;
    }
    CHECK(wt < 2e-7, "tanh_fast max abs err %.3g", wt);
    printf("  tanh_fast vs tanh: max abs err %.2e\n", wt);
    double we = 0; /* exp_fast: relative to exp over its range */
    for (float u = -87.0f; u <= 88.0f; u += 0.00093f) {
        double r = exp((double)u), e = fabs((double)mw_exp_fast(u) - r) / r;
        we = e > we ? e : we;
    }
    CHECK(we < 3e-7 && mw_exp_fast(-INFINITY) == 0.0f && mw_exp_fast(-100.0f) == 0.0f,
          "exp_fast max rel err %.3g", we);
    printf("  exp_fast vs exp: max rel err %.2e\n", we);
    free(x), free(y), free(d);
}

/* ---- cross-entropy ---- */
typedef struct {
    int N, V;
    double *z;
    const int32_t *t;
} ce_ctx;
static double ce_loss(void *p) { /* sum of losses, dloss = 1 */
    ce_ctx *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++) {
        const double *z = c->z + (size_t)n * c->V;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < c->V; j++) mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < c->V; j++) s += exp(z[j] - mx);
        L += log(s) + mx - z[c->t[n]];
    }
    return L;
}
static void test_crossentropy(void) {
    const int N = 5, V = 103;
    float *z = fnew(N * V), *losses = fnew(N);
    int32_t t[5] = {0, 102, 50, 7, 7};
    randn(z, N * V, 3);
    ce_ctx c = {N, V, dnew(N * V), t};
    f2d(c.z, z, N * V);
    float *z2 = fnew(N * V), *losses2 = fnew(N);
    memcpy(z2, z, sizeof(float) * N * V);
    mw_crossentropy(z2, losses2, t, 1.0f, 0, N, V); /* loss only: logits untouched */
    CHECK(memcmp(z2, z, sizeof(float) * N * V) == 0, "cross-entropy without grad changed the logits");
    mw_crossentropy(z, losses, t, 1.0f, 1, N, V);
    CHECK(memcmp(losses, losses2, sizeof(float) * N) == 0, "cross-entropy loss differs with grad");
    free(z2), free(losses2);
    double L = 0;
    for (int n = 0; n < N; n++) L += losses[n];
    double ref = ce_loss(&c);
    CHECK(fabs(L - ref) < 1e-5 * fabs(ref), "cross-entropy loss %.8f vs %.8f", L, ref);
    check_grad("cross-entropy dlogits", z, c.z, N * V, ce_loss, &c, 1000);
    free(z), free(losses), free(c.z);
}

/* ---- encoder ---- */
static void test_encoder(void) {
    const int B = 2, T = 5, C = 67, V = 11;
    int32_t inp[10] = {1, 3, 3, 10, 0, 3, 1, 1, 9, 2};
    float *wte = fnew(V * C), *wpe = fnew(T * C), *out = fnew(B * T * C), *d = fnew(B * T * C),
          *dwte = fnew(V * C), *dwpe = fnew(T * C);
    randn(wte, V * C, 1);
    randn(wpe, T * C, 1);
    randn(d, B * T * C, 1);
    mw_encoder_forward(out, inp, wte, wpe, B, T, C);
    mw_encoder_backward(dwte, dwpe, d, inp, B, T, C);
    int ok = 1;
    double *gte = dnew(V * C), *gpe = dnew(T * C);
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++) {
            ok &= out[bt * C + c] == wte[inp[bt] * C + c] + wpe[(bt % T) * C + c];
            gte[inp[bt] * C + c] += d[bt * C + c];
            gpe[(bt % T) * C + c] += d[bt * C + c];
        }
    CHECK(ok, "encoder forward differs from wte[tok] + wpe[t]");
    double e1 = err_fd(dwte, gte, V * C), e2 = err_fd(dwpe, gpe, T * C);
    CHECK(e1 < 1e-6 && e2 < 1e-6, "encoder backward rel err %.3g / %.3g", e1, e2);
    printf("  encoder backward: %.2e %.2e\n", e1, e2);
    free(wte), free(wpe), free(out), free(d), free(dwte), free(dwpe), free(gte), free(gpe);
}

/* ---- the Llama family: RMSNorm, rotary embedding, SwiGLU ---- */

/* RMSNorm */
typedef struct {
    int N, C;
    double eps, *x, *w;
    const float *lw; /* the loss weights */
} rms_ctx;
static void rms_twin(const rms_ctx *c, double *out) {
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (long)n * c->C;
        double ss = 0;
        for (int i = 0; i < c->C; i++) ss += x[i] * x[i];
        double r = 1.0 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++) out[(long)n * c->C + i] = c->w[i] * x[i] * r;
    }
}
static double rms_loss(void *p) {
    rms_ctx *c = p;
    size_t n = (size_t)c->N * c->C;
    double *o = dnew(n), s = 0;
    rms_twin(c, o);
    for (size_t i = 0; i < n; i++) s += o[i] * c->lw[i];
    free(o);
    return s;
}

static void test_rmsnorm(int N, int C) {
    const size_t n = (size_t)N * C;
    float *x = fnew(n), *w = fnew(C), *out = fnew(n), *out1 = fnew(n), *r = fnew(N), *lw = fnew(n);
    float *dx = fnew(n), *dw = fnew(C), *dx1 = fnew(n), *dw1 = fnew(C);
    randn(x, n, 1.5), randn(w, C, 1.0), randn(lw, n, 1.0);
    rms_ctx c = {N, C, 1e-5, dnew(n), dnew(C), lw};
    for (size_t i = 0; i < n; i++) c.x[i] = x[i];
    for (int i = 0; i < C; i++) c.w[i] = w[i];
    double *ref = dnew(n);
    rms_twin(&c, ref);
    omp_set_num_threads(2);
    mw_rmsnorm_forward(out, r, x, w, N, C, 1e-5f);
    mw_rmsnorm_backward_acc(dx, dw, lw, x, w, r, N, C);
    double e = err_fd(out, ref, n);
    CHECK(e < 1e-6, "rmsnorm %dx%d forward rel err %.3g", N, C, e);
    printf("  rmsnorm %3dx%-3d forward: %.2e\n", N, C, e);
    char what[64];
    snprintf(what, sizeof what, "rmsnorm %dx%d dinp", N, C);
    check_grad(what, dx, c.x, n, rms_loss, &c, 64);
    snprintf(what, sizeof what, "rmsnorm %dx%d dw", N, C);
    check_grad(what, dw, c.w, C, rms_loss, &c, 64);
    omp_set_num_threads(1);
    mw_rmsnorm_forward(out1, r, x, w, N, C, 1e-5f);
    mw_rmsnorm_backward_acc(dx1, dw1, lw, x, w, r, N, C);
    CHECK(memcmp(out, out1, n * 4) == 0 && memcmp(dx, dx1, n * 4) == 0 && memcmp(dw, dw1, C * 4) == 0,
          "rmsnorm: 1 and 2 threads give other bits");
    free(x), free(w), free(out), free(out1), free(r), free(lw), free(dx), free(dw), free(dx1);
    free(dw1), free(c.x), free(c.w), free(ref);
}

/* RoPE; its table: position 0 is the identity, every entry is cos/sin of the angle rounded to
 * float as Hugging Face rounds it, and backward undoes forward */
typedef struct {
    int B, T, H, D;
    long stride;
    const float *cs, *sn; /* the table the kernel uses, so the twin tests the rotation */
    double *x;
    const float *lw;
} rope_ctx;
static void rope_twin(const rope_ctx *c, double *out) {
    const int h = c->D / 2;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int hd = 0; hd < c->H; hd++) {
                const long o = ((long)b * c->T + t) * c->stride + (long)hd * c->D;
                for (int i = 0; i < h; i++) {
                    double co = c->cs[(long)t * h + i], si = c->sn[(long)t * h + i];
                    double x1 = c->x[o + i], x2 = c->x[o + i + h];
                    out[o + i] = x1 * co - x2 * si;
                    out[o + i + h] = x2 * co + x1 * si;
                }
            }
}
static double rope_loss(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->stride;
    double *o = dnew(n), s = 0;
    rope_twin(c, o);
    for (size_t i = 0; i < n; i++) s += o[i] * c->lw[i];
    free(o);
    return s;
}

static void test_rope(int B, int T, int H, int D, float theta) {
    const int h = D / 2;
    const long stride = (long)H * D + 5; /* rows wider than the heads, as q inside a qkv row */
    const size_t n = (size_t)B * T * stride;
    float *cs = fnew((size_t)T * h), *sn = fnew((size_t)T * h);
    mw_rope_table(cs, sn, T, D, theta);
    /* the table: the identity at position 0; cos and sin of the float-rounded angle elsewhere */
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < h; i++) {
            const float inv = 1.0f / powf(theta, (float)(2 * i) / (float)D), a = (float)t * inv;
            const double ec = fabs(cs[(long)t * h + i] - cos((double)a));
            const double es = fabs(sn[(long)t * h + i] - sin((double)a));
            if (ec > worst) worst = ec; /* not fmax: gcc 12 for aarch64 dies vectorising it */
            if (es > worst) worst = es;
        }
    CHECK(worst <= 6e-8, "rope table: entries off cos/sin of the angle by %.3g", worst);
    CHECK(cs[0] == 1.0f && sn[0] == 0.0f && cs[h - 1] == 1.0f && sn[h - 1] == 0.0f,
          "rope table: position 0 is not the identity");
    float *x = fnew(n), *y = fnew(n), *y1 = fnew(n), *lw = fnew(n), *g = fnew(n);
    randn(x, n, 1.0), randn(lw, n, 1.0);
    rope_ctx c = {B, T, H, D, stride, cs, sn, dnew(n), lw};
    for (size_t i = 0; i < n; i++) c.x[i] = x[i];
    double *ref = dnew(n);
    rope_twin(&c, ref);
    for (size_t i = 0; i < n; i++) /* the padding past the heads is not rotated */
        if ((long)(i % stride) >= (long)H * D) ref[i] = x[i];
    memcpy(y, x, n * 4);
    omp_set_num_threads(2);
    mw_rope_forward_inplace(y, stride, cs, sn, B, T, H, D);
    double e = err_fd(y, ref, n);
    CHECK(e < 1e-6, "rope forward rel err %.3g", e);
    printf("  rope B%d T%d H%d D%d theta %g forward: %.2e\n", B, T, H, D, theta, e);
    /* backward: the gradient of L = sum(rope(x) * lw) is rope^T(lw), in place on a copy of lw */
    memcpy(g, lw, n * 4);
    mw_rope_backward_inplace(g, stride, cs, sn, B, T, H, D);
    for (size_t i = 0; i < n; i++) /* padding: the loss does not see it through the rotation */
        if ((long)(i % stride) >= (long)H * D) g[i] = 0;
    char what[64];
    snprintf(what, sizeof what, "rope D%d dx", D);
    check_grad(what, g, c.x, n, rope_loss, &c, 64);
    /* backward undoes forward: R^T R = I up to rounding */
    memcpy(y1, y, n * 4);
    mw_rope_backward_inplace(y1, stride, cs, sn, B, T, H, D);
    double er = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(y1[i] - x[i]) > er) er = fabs(y1[i] - x[i]);
    CHECK(er < 1e-5, "rope backward(forward(x)) is %.3g from x", er);
    omp_set_num_threads(1);
    memcpy(y1, x, n * 4);
    mw_rope_forward_inplace(y1, stride, cs, sn, B, T, H, D);
    CHECK(memcmp(y, y1, n * 4) == 0, "rope: 1 and 2 threads give other bits");
    free(cs), free(sn), free(x), free(y), free(y1), free(lw), free(g), free(c.x), free(ref);
}

/* SwiGLU */
typedef struct {
    size_t n;
    double *g, *u;
    const float *lw;
} swi_ctx;
static double swi_loss(void *p) {
    swi_ctx *c = p;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) s += c->g[i] / (1.0 + exp(-c->g[i])) * c->u[i] * c->lw[i];
    return s;
}

static void test_swiglu(size_t n) {
    float *g = fnew(n), *u = fnew(n), *o = fnew(n), *lw = fnew(n), *dg = fnew(n), *du = fnew(n);
    randn(g, n, 3.0), randn(u, n, 1.0), randn(lw, n, 1.0);
    g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f; /* the tails and zero */
    swi_ctx c = {n, dnew(n), dnew(n), lw};
    double *ref = dnew(n);
    for (size_t i = 0; i < n; i++) {
        c.g[i] = g[i], c.u[i] = u[i];
        ref[i] = c.g[i] / (1.0 + exp(-c.g[i])) * c.u[i];
    }
    mw_swiglu_forward(o, g, u, (long)n);
    double e = err_fd(o, ref, n);
    CHECK(e < 1e-6, "swiglu forward rel err %.3g", e);
    printf("  swiglu n=%zu forward: %.2e\n", n, e);
    mw_swiglu_backward(dg, du, lw, g, u, (long)n);
    check_grad("swiglu dgate", dg, c.g, n, swi_loss, &c, 64);
    check_grad("swiglu dup", du, c.u, n, swi_loss, &c, 64);
    CHECK(isfinite(dg[0]) && isfinite(dg[1]) && fabsf(dg[0]) < 1e-30f,
          "swiglu at gate -100/100: dgate %g %g", dg[0], dg[1]);
    free(g), free(u), free(o), free(lw), free(dg), free(du), free(c.g), free(c.u), free(ref);
}


/* ---- the elementwise loops on every kernel: the same bits ----
 * GELU (forward, backward, and through bfloat16 in and out) and the bfloat16 conversions run 16
 * lanes wide under an AVX-512 kernel (ops_avx512.c, vcvtneps2bf16 under avx512bf16 and amx), the
 * baseline's vectors under portable and avx2: every kernel this CPU runs gives the portable one's
 * bits, on random values of every scale, a sweep of fp32 bit patterns (every exponent, rounding
 * ties, denormals, infinities, NaNs) and a length that is no multiple of 16 or 32. */
static void test_simd_bits(void) {
    const size_t n = 300007;
    float *x = fnew(n), *d = fnew(n), *ref[4], *out[4];
    uint16_t *gin = malloc(sizeof(uint16_t) * n), *h[2], *go[2];
    for (int k = 0; k < 4; k++) ref[k] = fnew(n), out[k] = fnew(n);
    for (int k = 0; k < 2; k++) h[k] = malloc(sizeof(uint16_t) * n), go[k] = malloc(sizeof(uint16_t) * n);
    randn(x, n / 2, 4);
    randn(d, n, 1);
    for (size_t i = n / 2; i < n; i++) { /* bit patterns across the whole range */
        uint32_t u = (uint32_t)((i - n / 2) * 28657u) ^ (uint32_t)(i << 20);
        if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u; /* a tie: even or odd upper half */
        if (i % 11 == 0) u &= 0x807fffffu;               /* zero or a denormal */
        if (i % 13 == 0) u |= 0x7f800000u;               /* infinity or NaN */
        memcpy(x + i, &u, sizeof u);
    }
    const char *names[] = {"portable", "avx2", "avx512", "avx512bf16", "amx"};
    const mw_kernel_id ids[] = {MW_KERNEL_PORTABLE, MW_KERNEL_AVX2, MW_KERNEL_AVX512,
                                MW_KERNEL_AVX512BF16, MW_KERNEL_AMX};
    CHECK(mw_kernel_set("portable") == MW_OK, "portable refused");
    mw_bf16_store(gin, x, n); /* bfloat16 inputs for the _x forms */
    int ran = 0;
    for (int k = 0; k < 5; k++) {
        if (!mw_kernel_id_supported(ids[k])) {
            printf("  elementwise bits: %s skipped (this CPU or build lacks it)\n", names[k]);
            continue;
        }
        CHECK(mw_kernel_set(names[k]) == MW_OK, "kernel %s: %s", names[k], mw_last_error());
        if (strcmp(mw_kernel_get(), names[k]) != 0) { /* amx refused by the system */
            printf("  elementwise bits: %s not selectable here, skipped\n", names[k]);
            continue;
        }
        const int want = k >= 3 ? 2 : k == 2 ? 1 : 0;
        CHECK(mw_ops_simd() == want, "kernel %s: elementwise loops at level %d, not %d", names[k],
              mw_ops_simd(), want);
        float **o = k == 0 ? ref : out;
        const int w = k != 0;
        mw_gelu_forward(o[0], x, (long)n);
        mw_gelu_backward(o[1], d, x, (long)n);
        mw_bf16_load(o[2], gin, n);
        mw_gelu_backward_x(o[3], 0, d, gin, 1, (long)n); /* bfloat16 in */
        mw_bf16_store(h[w], x, n);
        mw_gelu_forward_x(go[w], 1, gin, 1, (long)n); /* bfloat16 in and out */
        if (k == 0) continue;
        const char *what[] = {"gelu forward", "gelu backward", "bf16 widening", "gelu backward (bf16 in)"};
        for (int t = 0; t < 4; t++)
            CHECK(memcmp(o[t], ref[t], sizeof(float) * n) == 0, "kernel %s: %s bits differ from portable's",
                  names[k], what[t]);
        CHECK(memcmp(h[1], h[0], sizeof(uint16_t) * n) == 0, "kernel %s: bf16 rounding differs from portable's", names[k]);
        CHECK(memcmp(go[1], go[0], sizeof(uint16_t) * n) == 0, "kernel %s: gelu forward (bf16) differs from portable's", names[k]);
        ran++;
    }
    CHECK(mw_kernel_set("auto") == MW_OK, "auto refused");
    printf("  elementwise bits: %d kernels against portable's on %zu values\n", ran, n);
    for (int k = 0; k < 4; k++) free(ref[k]), free(out[k]);
    for (int k = 0; k < 2; k++) free(h[k]), free(go[k]);
    free(x), free(d), free(gin);
}

/* ---- the vectorised row maximum (softmax's, the loss's): the scalar fold's bits ---- */
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
/* rows of every length to 300 drawn from values that tie or are special: +0 and -0 (whose order
 * the fold decides), NaN, infinities, repeated maxima, all-negative rows; inits -inf, +-0, NaN and
 * random; each mw_rowmax against mw_rowmax_fold, bit for bit */
static void test_rowmax(void) {
    const float pool[] = {0.0f, -0.0f, 1.5f, -1.5f, -3.0f, INFINITY, -INFINITY, NAN, 2.0f, -0.0f};
    const float inits[] = {-INFINITY, 0.0f, -0.0f, NAN, -2.0f, 1.75f};
    float s[300];
    int cases = 0, zeros = 0;
    for (int n = 0; n <= 300; n++)
        for (int v = 0; v < 12; v++) {
            for (int j = 0; j < n; j++) {
                const uint64_t r = mw_rng_next(&rng);
                /* v 0-3: pool values; 4-7: negatives and zeros only; 8-11: random normals, a
                 * few pool values among them */
                if (v < 4) s[j] = pool[r % 10];
                else if (v < 8) s[j] = r % 3 == 0 ? (r & 8 ? 0.0f : -0.0f) : -(float)(r % 1000) / 7.0f;
                else s[j] = r % 17 == 0 ? pool[(r >> 8) % 10] : (float)mw_rng_normal(&rng);
            }
            for (int i = 0; i < 6; i++) {
                const float a = mw_rowmax(s, n, inits[i]), b = mw_rowmax_fold(s, n, inits[i]);
                CHECK(fbits(a) == fbits(b), "rowmax n=%d v=%d init %g: %08x, the fold %08x", n, v,
                      (double)inits[i], fbits(a), fbits(b));
                zeros += b == 0.0f;
                cases++;
            }
        }
    printf("  row maximum: %d rows against the scalar fold (%d with a zero maximum)\n", cases, zeros);
}

int main(void) {
    mw_set_threads(2);
    test_layernorm();
    test_matmul();
    test_attention(2, 11, 12, 3, 100000);
    test_attention(1, 130, 8, 2, 400);
    test_attention(2, 300, 16, 2, 300);
    test_gelu();
    test_simd_bits();
    test_rowmax();
    test_crossentropy();
    test_encoder();
    test_rmsnorm(5, 37);
    test_rmsnorm(3, 128);
    test_rope(2, 11, 3, 16, 10000.0f);
    test_rope(1, 300, 2, 64, 500000.0f);
    test_swiglu(1001);
    return test_summary("test_ops");
}
