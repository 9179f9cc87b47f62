/* The CUDA kernels (src/kernels/cuda) against the CPU kernels, op by op (issue 18): random inputs,
 * each op run on both, agreement to 1e-5 relative (normwise: the largest difference over the
 * largest CPU value), and each GPU op run twice on the same inputs giving the same bits (no
 * atomics in reductions, cuBLAS without TF32 and with a fixed workspace). Shapes: GPT-2's head
 * size 64 and Llama's 128, grouped-query attention, rows not a multiple of the column sums'
 * chunk. Where no GPU runs it says so and exits 0: it is built everywhere nvcc is (make cuda)
 * and run by bench/gpu_check.sh on a lent GPU. Exit 1 on any failure. With --bench, after the checks
 * pass: the fp32 GEMM's and attention's speed at T = 2048, for that session's figures. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "../../src/kernels/cpu/ops.h"
#include "../../src/kernels/cuda/cuda_ops.h"
#include "../../src/optim/adamw.h"
#include "memwall.h"

static int fails;
static mw_cuda *cu;
static uint64_t rs = 0x9E3779B97F4A7C15ull;

static float frand(void) { /* uniform in [-1, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / (1 << 23)) - 1.0);
}
static float *rnd(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
static void *dev(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    if (h) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}
static float *back(const float *d, size_t n) {
    char why[256];
    if (mw_cuda_sync(cu, why, sizeof why) != 0) {
        printf("  FAIL a kernel failed: %s\n", why);
        exit(1);
    }
    float *h = malloc(n * sizeof *h);
    if (!h) exit(2);
    cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost);
    return h;
}

/* the normwise relative difference of gpu against cpu */
static double rel(const float *gpu, const float *cpu, size_t n) {
    double md = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]);
        if (!(d <= md)) md = d; /* NaN counts as the largest */
        if (fabs(cpu[i]) > mx) mx = fabs(cpu[i]);
    }
    return mx > 0 ? md / mx : md;
}
static void agree(const char *op, const char *what, const float *gpu, const float *cpu, size_t n, double tol) {
    double r = rel(gpu, cpu, n);
    if (r <= tol) {
        printf("  ok   %-28s %-8s relative difference %.2e\n", op, what, r);
    } else {
        printf("  FAIL %-28s %-8s relative difference %.2e > %.0e\n", op, what, r, tol);
        fails++;
    }
}
static void same(const char *op, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) == 0) {
        printf("  ok   %-28s run twice: the same bits\n", op);
    } else {
        printf("  FAIL %-28s run twice: different bits\n", op);
        fails++;
    }
}

#define TOL 1e-5

static void t_encoder(int B, int T, int C, int V) {
    const int N = B * T;
    int32_t *inp = malloc(N * sizeof *inp);
    for (int i = 0; i < N; i++) { /* ids from an eighth of the vocabulary: many repeats */
        frand();
        inp[i] = (int32_t)((rs >> 33) % (unsigned)(V / 8));
    }
    float *wte = rnd((size_t)V * C, 0.1f), *wpe = rnd((size_t)T * C, 0.1f), *out = malloc((size_t)N * C * 4);
    mw_encoder_forward(out, inp, wte, wpe, B, T, C);
    int32_t *dinp = dev(inp, N * 4);
    float *dwte = dev(wte, (size_t)V * C * 4), *dwpe = dev(wpe, (size_t)T * C * 4), *dout = dev(NULL, (size_t)N * C * 4);
    mw_cuda_encoder_forward(cu, dout, dinp, dwte, dwpe, B, T, C);
    float *g = back(dout, (size_t)N * C);
    agree("encoder forward", "out", g, out, (size_t)N * C, 0);
    mw_embedding_forward(out, inp, wte, N, C);
    mw_cuda_embedding_forward(cu, dout, dinp, dwte, N, C);
    free(g);
    g = back(dout, (size_t)N * C);
    agree("embedding forward", "out", g, out, (size_t)N * C, 0);
    /* backward: the CPU's sums in the CPU's order: the same bits */
    float *dy = rnd((size_t)N * C, 1.0f), *gw = rnd((size_t)V * C, 0.01f), *gp = rnd((size_t)T * C, 0.01f);
    float *ddy = dev(dy, (size_t)N * C * 4), *dgw = dev(gw, (size_t)V * C * 4), *dgp = dev(gp, (size_t)T * C * 4);
    mw_encoder_backward(gw, gp, dy, inp, B, T, C);
    mw_cuda_encoder_backward(cu, dgw, dgp, ddy, inp, B, T, C);
    float *hw = back(dgw, (size_t)V * C), *hp = back(dgp, (size_t)T * C);
    agree("encoder backward", "dwte", hw, gw, (size_t)V * C, 0);
    agree("encoder backward", "dwpe", hp, gp, (size_t)T * C, 0);
    cudaFree(dinp), cudaFree(dwte), cudaFree(dwpe), cudaFree(dout), cudaFree(ddy), cudaFree(dgw), cudaFree(dgp);
    free(inp), free(wte), free(wpe), free(out), free(g), free(dy), free(gw), free(gp), free(hw),
        free(hp);
}

static void t_layernorm(int N, int C, int rms) {
    const char *op = rms ? "rmsnorm" : "layernorm";
    float *x = rnd((size_t)N * C, 2.0f), *w = rnd(C, 1.0f), *b = rnd(C, 0.5f), *out = malloc((size_t)N * C * 4);
    float *mean = malloc(N * 4), *rstd = malloc(N * 4);
    if (rms) mw_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    else mw_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    float *dx = dev(x, (size_t)N * C * 4), *dw = dev(w, C * 4), *db = dev(b, C * 4), *dout = dev(NULL, (size_t)N * C * 4);
    float *dm = dev(NULL, N * 4), *dr = dev(NULL, N * 4);
    if (rms) mw_cuda_rmsnorm_forward(cu, dout, dr, dx, dw, N, C, 1e-5f);
    else mw_cuda_layernorm_forward(cu, dout, dm, dr, dx, dw, db, N, C);
    float *g = back(dout, (size_t)N * C), *gr = back(dr, N);
    agree(rms ? "rmsnorm forward" : "layernorm forward", "out", g, out, (size_t)N * C, TOL);
    agree(rms ? "rmsnorm forward" : "layernorm forward", "rstd", gr, rstd, N, TOL);
    if (!rms) {
        float *gm = back(dm, N);
        agree("layernorm forward", "mean", gm, mean, N, TOL);
        free(gm);
    }
    /* backward from the CPU's statistics on both sides */
    float *dy = rnd((size_t)N * C, 1.0f), *gi = rnd((size_t)N * C, 0.1f), *gw = rnd(C, 0.1f), *gb = rnd(C, 0.1f);
    float *ddy = dev(dy, (size_t)N * C * 4), *dgi = dev(gi, (size_t)N * C * 4), *dgw = dev(gw, C * 4), *dgb = dev(gb, C * 4);
    cudaMemcpy(dr, rstd, N * 4, cudaMemcpyHostToDevice);
    if (!rms) cudaMemcpy(dm, mean, N * 4, cudaMemcpyHostToDevice);
    float *r1[3] = {0}, *r2[3] = {0};
    for (int run = 0; run < 2; run++) {
        cudaMemcpy(dgi, gi, (size_t)N * C * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dgw, gw, C * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dgb, gb, C * 4, cudaMemcpyHostToDevice);
        if (rms) mw_cuda_rmsnorm_backward_acc(cu, dgi, dgw, ddy, dx, dw, dr, N, C);
        else mw_cuda_layernorm_backward_acc(cu, dgi, dgw, dgb, ddy, dx, dw, dm, dr, N, C);
        float **r = run ? r2 : r1;
        r[0] = back(dgi, (size_t)N * C), r[1] = back(dgw, C), r[2] = back(dgb, C);
    }
    if (rms) mw_rmsnorm_backward_acc(gi, gw, dy, x, w, rstd, N, C);
    else mw_layernorm_backward_acc(gi, gw, gb, dy, x, w, mean, rstd, N, C);
    char name[64];
    snprintf(name, sizeof name, "%s backward", op);
    agree(name, "dinp", r1[0], gi, (size_t)N * C, TOL);
    agree(name, "dw", r1[1], gw, C, TOL);
    if (!rms) agree(name, "db", r1[2], gb, C, TOL);
    same(name, r1[1], r2[1], C);
    for (int k = 0; k < 3; k++) free(r1[k]), free(r2[k]);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dout), cudaFree(dm), cudaFree(dr), cudaFree(ddy), cudaFree(dgi),
        cudaFree(dgw), cudaFree(dgb);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(g), free(gr), free(dy), free(gi), free(gw), free(gb);
}

static void t_matmul(int N, int C, int OC) {
    const size_t wsn = mw_gemm_ws_floats(2, 64);
    float *wsb = malloc(wsn * 4);
    const mw_gemm_ws ws = {wsb, wsn, 2, 0};
    float *x = rnd((size_t)N * C, 1.0f), *w = rnd((size_t)OC * C, 0.05f), *b = rnd(OC, 0.1f), *out = malloc((size_t)N * OC * 4);
    mw_matmul_forward(out, x, w, b, N, C, OC, 0, &ws);
    float *dx = dev(x, (size_t)N * C * 4), *dw = dev(w, (size_t)OC * C * 4), *db = dev(b, OC * 4);
    float *dout = dev(NULL, (size_t)N * OC * 4);
    mw_cuda_matmul_forward(cu, dout, dx, dw, db, N, C, OC, 0);
    float *g = back(dout, (size_t)N * OC);
    agree("matmul forward", "out", g, out, (size_t)N * OC, TOL);
    float *dy = rnd((size_t)N * OC, 1.0f), *gi = malloc((size_t)N * C * 4), *gw = rnd((size_t)OC * C, 0.1f), *gb = rnd(OC, 0.1f);
    float *ddy = dev(dy, (size_t)N * OC * 4), *dgi = dev(NULL, (size_t)N * C * 4), *dgw = dev(NULL, (size_t)OC * C * 4);
    float *dgb = dev(NULL, OC * 4), *r1[3], *r2[3];
    for (int run = 0; run < 2; run++) {
        cudaMemcpy(dgw, gw, (size_t)OC * C * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dgb, gb, OC * 4, cudaMemcpyHostToDevice);
        mw_cuda_matmul_backward(cu, dgi, dgw, dgb, ddy, dx, dw, N, C, OC, 0);
        float **r = run ? r2 : r1;
        r[0] = back(dgi, (size_t)N * C), r[1] = back(dgw, (size_t)OC * C), r[2] = back(dgb, OC);
    }
    mw_matmul_backward(gi, gw, gb, dy, x, w, N, C, OC, 0, &ws);
    agree("matmul backward", "dinp", r1[0], gi, (size_t)N * C, TOL);
    agree("matmul backward", "dw", r1[1], gw, (size_t)OC * C, TOL);
    agree("matmul backward", "db", r1[2], gb, OC, TOL);
    same("matmul backward (dw)", r1[1], r2[1], (size_t)OC * C);
    /* without bias, accumulating: out += inp @ w^T; dinp += dout @ w, no db */
    float *acc = rnd((size_t)N * OC, 1.0f), *dinp0 = rnd((size_t)N * C, 1.0f);
    cudaMemcpy(dout, acc, (size_t)N * OC * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dgi, dinp0, (size_t)N * C * 4, cudaMemcpyHostToDevice);
    mw_matmul_forward(acc, x, w, NULL, N, C, OC, 1, &ws);
    mw_cuda_matmul_forward(cu, dout, dx, dw, NULL, N, C, OC, 1);
    mw_cuda_matmul_backward(cu, dgi, dgw, NULL, ddy, dx, dw, N, C, OC, 1);
    mw_matmul_backward(dinp0, gw, NULL, dy, x, w, N, C, OC, 1, &ws);
    float *ga = back(dout, (size_t)N * OC), *gd = back(dgi, (size_t)N * C);
    agree("matmul forward acc, no bias", "out", ga, acc, (size_t)N * OC, TOL);
    agree("matmul backward acc, no db", "dinp", gd, dinp0, (size_t)N * C, TOL);
    free(acc), free(dinp0), free(ga), free(gd);
    same("matmul backward (db)", r1[2], r2[2], OC);
    for (int k = 0; k < 3; k++) free(r1[k]), free(r2[k]);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dout), cudaFree(ddy), cudaFree(dgi), cudaFree(dgw), cudaFree(dgb);
    free(wsb), free(x), free(w), free(b), free(out), free(g), free(dy), free(gi), free(gw), free(gb);
}

static void t_attention(int B, int T, int H, int KV, int hs) {
    char op[64];
    snprintf(op, sizeof op, "attention H%d KV%d hs%d", H, KV, hs);
    const size_t nq = (size_t)B * T * (H + 2 * KV) * hs, no = (size_t)B * T * H * hs, nl = (size_t)B * H * T;
    float *qkv = rnd(nq, 1.0f), *out = malloc(no * 4), *lse = malloc(nl * 4);
    float *scr = malloc(2 * mw_attention_scratch_floats(T) * 4);
    mw_attention_forward_gqa(out, lse, scr, 2, qkv, B, T, H, KV, hs);
    float *dq = dev(qkv, nq * 4), *dout = dev(NULL, no * 4), *dl = dev(NULL, nl * 4);
    mw_cuda_attention_forward(cu, dout, dl, dq, B, T, H, KV, hs);
    float *g = back(dout, no), *gl = back(dl, nl);
    agree(op, "out", g, out, no, TOL);
    agree(op, "lse", gl, lse, nl, TOL);
    float *dy = rnd(no, 1.0f), *dqkv = malloc(nq * 4);
    mw_attention_backward_gqa(dqkv, scr, 2, dy, qkv, out, lse, B, T, H, KV, hs);
    float *ddy = dev(dy, no * 4), *ddq = dev(NULL, nq * 4), *r1, *r2;
    cudaMemcpy(dout, out, no * 4, cudaMemcpyHostToDevice); /* both sides from the CPU's forward */
    cudaMemcpy(dl, lse, nl * 4, cudaMemcpyHostToDevice);
    mw_cuda_attention_backward(cu, ddq, ddy, dq, dout, dl, B, T, H, KV, hs);
    r1 = back(ddq, nq);
    mw_cuda_attention_backward(cu, ddq, ddy, dq, dout, dl, B, T, H, KV, hs);
    r2 = back(ddq, nq);
    agree(op, "dqkv", r1, dqkv, nq, TOL);
    same(op, r1, r2, nq);
    cudaFree(dq), cudaFree(dout), cudaFree(dl), cudaFree(ddy), cudaFree(ddq);
    free(qkv), free(out), free(lse), free(scr), free(g), free(gl), free(dy), free(dqkv), free(r1), free(r2);
}

static void t_elementwise(long n) {
    float *x = rnd(n, 4.0f), *u = rnd(n, 2.0f), *dy = rnd(n, 1.0f), *a = malloc(n * 4), *b2 = malloc(n * 4);
    float *dx = dev(x, n * 4), *du = dev(u, n * 4), *ddy = dev(dy, n * 4), *da = dev(NULL, n * 4), *db = dev(NULL, n * 4);
    mw_gelu_forward(a, x, n);
    mw_cuda_gelu_forward(cu, da, dx, n);
    float *g = back(da, n);
    agree("gelu forward", "out", g, a, n, TOL);
    free(g);
    mw_gelu_backward(a, dy, x, n);
    mw_cuda_gelu_backward(cu, da, ddy, dx, n);
    g = back(da, n);
    agree("gelu backward", "dinp", g, a, n, TOL);
    free(g);
    mw_swiglu_forward(a, x, u, n);
    mw_cuda_swiglu_forward(cu, da, dx, du, n);
    g = back(da, n);
    agree("swiglu forward", "out", g, a, n, TOL);
    free(g);
    mw_swiglu_backward(a, b2, dy, x, u, n);
    mw_cuda_swiglu_backward(cu, da, db, ddy, dx, du, n);
    g = back(da, n);
    float *g2 = back(db, n);
    agree("swiglu backward", "dgate", g, a, n, TOL);
    agree("swiglu backward", "dup", g2, b2, n, TOL);
    free(g), free(g2);
    cudaFree(dx), cudaFree(du), cudaFree(ddy), cudaFree(da), cudaFree(db);
    free(x), free(u), free(dy), free(a), free(b2);
}

static void t_rope(int B, int T, int H, int D) {
    const long stride = (long)H * D + 2 * D; /* rows wider than the rotated heads, as qkv's */
    const size_t n = (size_t)B * T * stride;
    float *x = rnd(n, 1.0f), *cs = malloc((size_t)T * D / 2 * 4), *sn = malloc((size_t)T * D / 2 * 4);
    mw_rope_table(cs, sn, T, D, 10000.0f);
    float *dx = dev(x, n * 4), *dc = dev(cs, (size_t)T * D / 2 * 4), *ds = dev(sn, (size_t)T * D / 2 * 4);
    mw_rope_forward_inplace(x, stride, cs, sn, B, T, H, D);
    mw_cuda_rope_forward(cu, dx, stride, dc, ds, B, T, H, D);
    float *g = back(dx, n);
    agree("rope forward", "x", g, x, n, TOL);
    free(g);
    mw_rope_backward_inplace(x, stride, cs, sn, B, T, H, D);
    mw_cuda_rope_backward(cu, dx, stride, dc, ds, B, T, H, D);
    g = back(dx, n);
    agree("rope backward", "dx", g, x, n, TOL);
    free(g);
    cudaFree(dx), cudaFree(dc), cudaFree(ds);
    free(x), free(cs), free(sn);
}

static void t_xent(int N, int V) {
    float *z = rnd((size_t)N * V, 5.0f), *l = malloc(N * 4);
    int32_t *t = malloc(N * 4);
    for (int i = 0; i < N; i++) {
        frand();
        t[i] = (int32_t)((rs >> 20) % (unsigned)V);
    }
    float *dz = dev(z, (size_t)N * V * 4), *dl = dev(NULL, N * 4);
    int32_t *dt = dev(t, N * 4);
    float *l0 = malloc(N * 4);
    mw_crossentropy(z, l0, t, 1.0f / N, 0, N, V); /* the loss alone, logits untouched */
    mw_cuda_crossentropy(cu, dz, dl, dt, 1.0f / N, 0, N, V);
    float *gl0 = back(dl, N), *gz0 = back(dz, (size_t)N * V);
    agree("cross-entropy, no grad", "losses", gl0, l0, N, TOL);
    agree("cross-entropy, no grad", "logits", gz0, z, (size_t)N * V, 0);
    free(l0), free(gl0), free(gz0);
    mw_crossentropy(z, l, t, 1.0f / N, 1, N, V);
    mw_cuda_crossentropy(cu, dz, dl, dt, 1.0f / N, 1, N, V);
    float *g = back(dz, (size_t)N * V), *gl = back(dl, N);
    agree("cross-entropy", "losses", gl, l, N, TOL);
    agree("cross-entropy", "dlogits", g, z, (size_t)N * V, TOL);
    cudaFree(dz), cudaFree(dl), cudaFree(dt);
    free(z), free(l), free(t), free(g), free(gl);
}

static void t_adamw(size_t n) {
    float *p = rnd(n, 1.0f), *g = rnd(n, 0.1f), *m = rnd(n, 0.01f), *v = rnd(n, 0.001f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *dp = dev(p, n * 4), *dg = dev(g, n * 4), *dm = dev(m, n * 4), *dv = dev(v, n * 4);
    mw_adamw_hp hp = {6e-4, 0.9, 0.95, 1e-8, 0.1, 0.5f, 7};
    mw_adamw_update(p, g, m, v, n, &hp);
    mw_cuda_adamw(cu, dp, dg, dm, dv, n, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.grad_scale, hp.t);
    float *hp_ = back(dp, n), *hm = back(dm, n), *hv = back(dv, n);
    agree("adamw", "p", hp_, p, n, 0); /* the same formula, no FMA: the same bits */
    agree("adamw", "m", hm, m, n, 0);
    agree("adamw", "v", hv, v, n, 0);
    cudaFree(dp), cudaFree(dg), cudaFree(dm), cudaFree(dv);
    free(p), free(g), free(m), free(v), free(hp_), free(hm), free(hv);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
/* the median of 5 timed runs of what run does (after one untimed), in ms */
static double timed(void (*run)(void *), void *ctx) {
    char why[256];
    double t[5];
    run(ctx);
    for (int r = 0; r < 6; r++) {
        double t0 = now_s();
        run(ctx);
        if (mw_cuda_sync(cu, why, sizeof why) != 0) {
            printf("  FAIL a timed kernel failed: %s\n", why);
            exit(1);
        }
        if (r) t[r - 1] = (now_s() - t0) * 1e3;
    }
    qsort(t, 5, sizeof *t, cmp_d);
    return t[2];
}
typedef struct bench_ctx {
    float *a, *b, *c, *d, *e, *f;
    int B, T, H, hs, N, C, OC;
} bench_ctx;
static void run_gemm(void *p) {
    bench_ctx *x = p;
    mw_cuda_matmul_forward(cu, x->c, x->a, x->b, NULL, x->N, x->C, x->OC, 0);
}
static void run_attn_fwd(void *p) {
    bench_ctx *x = p;
    mw_cuda_attention_forward(cu, x->b, x->c, x->a, x->B, x->T, x->H, x->H, x->hs);
}
static void run_attn_bwd(void *p) {
    bench_ctx *x = p;
    mw_cuda_attention_backward(cu, x->e, x->d, x->a, x->b, x->c, x->B, x->T, x->H, x->H, x->hs);
}
/* figures for the lent GPU's session: fp32 GEMM (cuBLAS, no TF32) and attention at T = 2048 */
static void bench(void) {
    bench_ctx x = {0};
    x.N = x.C = x.OC = 4096;
    x.a = dev(NULL, (size_t)x.N * x.C * 4), x.b = dev(NULL, (size_t)x.OC * x.C * 4), x.c = dev(NULL, (size_t)x.N * x.OC * 4);
    cudaMemset(x.a, 0, (size_t)x.N * x.C * 4), cudaMemset(x.b, 0, (size_t)x.OC * x.C * 4);
    double ms = timed(run_gemm, &x);
    printf("bench: fp32 GEMM 4096^3 (cuBLAS, TF32 off): %.2f ms, %.1f TFLOPS\n", ms, 2.0 * 4096 * 4096 * 4096 / ms / 1e9);
    cudaFree(x.a), cudaFree(x.b), cudaFree(x.c);
    x.B = 1, x.T = 2048, x.H = 16, x.hs = 128;
    const size_t nq = (size_t)x.B * x.T * 3 * x.H * x.hs, no = (size_t)x.B * x.T * x.H * x.hs;
    float *q = rnd(nq, 1.0f);
    x.a = dev(q, nq * 4), x.b = dev(NULL, no * 4), x.c = dev(NULL, (size_t)x.B * x.H * x.T * 4);
    x.d = dev(q, no * 4), x.e = dev(NULL, nq * 4);
    const double fl = 4.0 * x.B * x.H * (double)x.T * x.T * x.hs / 2; /* causal: half the QK^T and PV products */
    ms = timed(run_attn_fwd, &x);
    printf("bench: attention forward B=1 H=16 T=2048 hs=128: %.2f ms, %.2f TFLOPS (causal)\n", ms, fl / ms / 1e9);
    ms = timed(run_attn_bwd, &x);
    printf("bench: attention backward, same shape: %.2f ms, %.2f TFLOPS (2.5x the forward's products)\n", ms,
           2.5 * fl / ms / 1e9);
    cudaFree(x.a), cudaFree(x.b), cudaFree(x.c), cudaFree(x.d), cudaFree(x.e);
    free(q);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    char why[256];
    if (!mw_cuda_probe(why, sizeof why)) {
        printf("test_cuda_ops: SKIPPED, no GPU runs here (%s): the CUDA kernels are compiled, not checked\n", why);
        return 0;
    }
    if (mw_cuda_init(&cu, why, sizeof why) != 0) {
        printf("test_cuda_ops: FAIL: %s\n", why);
        return 1;
    }
    char name[256];
    size_t fr, tot;
    mw_cuda_device(cu, name, sizeof name, &fr, &tot);
    printf("device: %s, %.1f of %.1f GiB free\n", name, fr / 1073741824.0, tot / 1073741824.0);
    mw_set_threads(2);
    t_encoder(4, 64, 96, 512);
    t_layernorm(1000, 768, 0);
    t_layernorm(1000, 576, 1);
    t_layernorm(77, 100, 0); /* C not a multiple of 32, rows not of the chunk */
    t_layernorm(77, 100, 1);
    t_matmul(1000, 768, 2304);
    t_matmul(257, 576, 1536);
    t_attention(2, 256, 12, 12, 64);
    t_attention(2, 192, 8, 2, 128);
    t_attention(1, 100, 4, 1, 32);
    t_attention(1, 70, 2, 2, 256);
    t_elementwise(1 << 20);
    t_rope(2, 128, 6, 64);
    t_xent(64, 50257);
    t_adamw(1 << 20);
    if (argc > 1 && strcmp(argv[1], "--bench") == 0 && !fails) bench();
    mw_cuda_free(cu);
    printf("test_cuda_ops: %s\n", fails ? "FAILED" : "all passed");
    return fails ? 1 : 0;
}
