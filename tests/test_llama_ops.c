/* The Llama family's ops (src/kernels/cpu/ops.c) against plain double-precision twins written
 * here, as tests/test_ops.c does for GPT-2's:
 *  - forward: element-wise, relative to the tensor's largest entry;
 *  - backward: against central finite differences of the double twin, on L = sum(out * w) with
 *    random w, relative to the largest gradient;
 *  - the same bits on 1 and 2 threads;
 *  - RoPE's table: position 0 is the identity, every entry is cos/sin of the angle rounded to
 *    float as Hugging Face rounds it, and backward undoes forward.
 * Sizes are off the 8-lane width. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../src/core/rng.h"
#include "../src/kernels/cpu/ops.h"
#include "check.h"

static uint64_t rng = 7;
static void randn(float *x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(s * mw_rng_normal(&rng));
}
static float *fnew(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *dnew(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static double err_rel(const float *a, const double *b, size_t n) {
    double md = 0, mb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return md / mb;
}

/* gradient g (n) of the twin's loss f with respect to x (n) at up to 64 entries */
typedef double (*loss_fn)(void *ctx);
static void check_grad(const char *what, const float *g, double *x, size_t n, loss_fn f, void *ctx) {
    size_t stride = n > 64 ? n / 64 : 1;
    double gmax = 1e-30, worst = 0;
    for (size_t i = 0; i < n; i++) gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
    for (size_t i = 0; i < n; i += stride) {
        double x0 = x[i], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        double e = fabs((lp - lm) / (2 * h) - g[i]) / gmax;
        worst = e > worst ? e : worst;
    }
    CHECK(worst < 1e-4, "%s: gradient vs finite differences rel err %.3g", what, worst);
    printf("  %-30s grad vs finite differences: %.2e\n", what, worst);
}

/* ---- RMSNorm ---- */
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
    double e = err_rel(out, ref, n);
    CHECK(e < 1e-6, "rmsnorm %dx%d forward rel err %.3g", N, C, e);
    printf("  rmsnorm %3dx%-3d forward: %.2e\n", N, C, e);
    char what[64];
    snprintf(what, sizeof what, "rmsnorm %dx%d dinp", N, C);
    check_grad(what, dx, c.x, n, rms_loss, &c);
    snprintf(what, sizeof what, "rmsnorm %dx%d dw", N, C);
    check_grad(what, dw, c.w, C, rms_loss, &c);
    omp_set_num_threads(1);
    mw_rmsnorm_forward(out1, r, x, w, N, C, 1e-5f);
    mw_rmsnorm_backward_acc(dx1, dw1, lw, x, w, r, N, C);
    CHECK(memcmp(out, out1, n * 4) == 0 && memcmp(dx, dx1, n * 4) == 0 && memcmp(dw, dw1, C * 4) == 0,
          "rmsnorm: 1 and 2 threads give other bits");
    free(x), free(w), free(out), free(out1), free(r), free(lw), free(dx), free(dw), free(dx1);
    free(dw1), free(c.x), free(c.w), free(ref);
}

/* ---- RoPE ---- */
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
    double e = err_rel(y, ref, n);
    CHECK(e < 1e-6, "rope forward rel err %.3g", e);
    printf("  rope B%d T%d H%d D%d theta %g forward: %.2e\n", B, T, H, D, theta, e);
    /* backward: the gradient of L = sum(rope(x) * lw) is rope^T(lw), in place on a copy of lw */
    memcpy(g, lw, n * 4);
    mw_rope_backward_inplace(g, stride, cs, sn, B, T, H, D);
    for (size_t i = 0; i < n; i++) /* padding: the loss does not see it through the rotation */
        if ((long)(i % stride) >= (long)H * D) g[i] = 0;
    char what[64];
    snprintf(what, sizeof what, "rope D%d dx", D);
    check_grad(what, g, c.x, n, rope_loss, &c);
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

/* ---- SwiGLU ---- */
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
    double e = err_rel(o, ref, n);
    CHECK(e < 1e-6, "swiglu forward rel err %.3g", e);
    printf("  swiglu n=%zu forward: %.2e\n", n, e);
    mw_swiglu_backward(dg, du, lw, g, u, (long)n);
    check_grad("swiglu dgate", dg, c.g, n, swi_loss, &c);
    check_grad("swiglu dup", du, c.u, n, swi_loss, &c);
    CHECK(isfinite(dg[0]) && isfinite(dg[1]) && fabsf(dg[0]) < 1e-30f,
          "swiglu at gate -100/100: dgate %g %g", dg[0], dg[1]);
    free(g), free(u), free(o), free(lw), free(dg), free(du), free(c.g), free(c.u), free(ref);
}

int main(void) {
    test_rmsnorm(5, 37);
    test_rmsnorm(3, 128);
    test_rope(2, 11, 3, 16, 10000.0f);
    test_rope(1, 300, 2, 64, 500000.0f);
    test_swiglu(1001);
    if (check_failures) {
        fprintf(stderr, "test_llama_ops: %d failures\n", check_failures);
        return 1;
    }
    printf("test_llama_ops: all passed\n");
    return 0;
}
