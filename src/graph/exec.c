/* The executor (graph_impl.h). Owns: running the schedule's ops on their bound pointers
 * (mw_model_forward, mw_model_forward_backward), the outputs a caller reads (losses, logits,
 * decode), the gradients' zeroing and global norm, and the optimizer's passes over the flat
 * buffer, segment by segment or streamed through the disk tier. May call: the model's run_op and
 * decode, transfer.c around each op (visits, gradient binds, settles), src/optim, src/memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/status.h"
#include "../dist/tp.h"
#include "../optim/adamw.h"
#include "actstore.h"
#include "graph_impl.h"
#include "model.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Op i, timed into m->compute_s; the disk tier's completions meanwhile are timed after it. */
static void run_timed(mw_model *m, int i, int bwd, float scale, double *s) {
    const double t0 = now_s();
    m->arch->run_op(m, i, bwd, scale, s);
    m->compute_s += now_s() - t0;
    if (m->off) mw_offload_poll(m->off);
}

void mw_graph_copy(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

mw_status mw_graph_load_tokens(mw_model *m, const int32_t *inputs, const int32_t *targets) {
    const mw_config *c = &m->cfg;
    const int V = c->vocab, N = c->batch * c->seq;
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
            return mw_fail(MW_ERR_ARG, "token id %d at position %d is outside the vocabulary (%d)",
                           inputs[i] < 0 || inputs[i] >= V ? inputs[i] : targets[i], i, V);
    }
    void **P = m->opp; /* op 0 is the embedding: inputs and targets are its first two values */
    memcpy(P[0], inputs, sizeof(int32_t) * N);
    if (targets) memcpy(P[1], targets, sizeof(int32_t) * N);
    m->has_targets = targets != NULL;
    return MW_OK;
}

mw_status mw_model_forward(mw_model *m, const int32_t *inputs, const int32_t *targets, float *loss) {
    if (!mw_graph_keeps_logits(&m->cfg) && !targets)
        return mw_fail(MW_ERR_ARG, "a training or evaluation model keeps no logits: give targets (for "
                                   "the loss) or build an inference model");
    if (m->cfg.pp > 1) return mw_pipe_forward(m, inputs, targets, loss); /* a pipeline stage's part */
    MW_TRY(mw_graph_load_tokens(m, inputs, targets));
    MW_TRY(mw_graph_step_begin(m));
    double s = 0.0;
    for (int i = 0; i <= m->head_op; i++) {
        if ((mw_graph_params_on_disk(m) || mw_graph_params_zero3(m)) && m->op_pv[i] >= 0) MW_TRY(mw_graph_param_visit(m, m->op_pv[i]));
        if (m->op_end && m->op_end[i]) MW_TRY(mw_graph_ends_before(m, i, 0)); /* the ends on disk (ends.c) */
        run_timed(m, i, 0, 0.0f, &s);
        if (m->op_end && m->op_end[i]) MW_TRY(mw_graph_ends_after(m, i, 0));
        if (m->zpre) mw_graph_zero3_poll(m);
    }
    if (targets) *loss = (float)(s / ((double)m->cfg.batch * m->cfg.seq));
    MW_TRY(mw_graph_io_check(m)); /* --tp: a collective of an op that failed */
    return mw_graph_zero3_wait(m); /* a forward alone may have prefetched the block its backward would begin with */
}

mw_status mw_model_forward_backward(mw_model *m, const int32_t *inputs, const int32_t *targets,
                                    float grad_scale, float *loss) {
    const mw_config *c = &m->cfg;
    if (c->inference) return mw_fail(MW_ERR_ARG, "an inference model has no gradients");
    if (!targets) return mw_fail(MW_ERR_ARG, "training needs targets");
    MW_TRY(mw_graph_load_tokens(m, inputs, targets));
    const int N = c->batch * c->seq, gdisk = mw_graph_grads_slotted(m);
    MW_TRY(mw_graph_step_begin(m));
    MW_TRY(mw_graph_act_begin(m));
    double s = 0.0;
    for (int i = 0; i < m->opt_op; i++) {
        const int l = m->ops[i].layer;
        /* the swaps' writes whose memory op i's buffers may reuse have landed before anything else
         * moves into it (the ends' reads, zeros and read-back gradients among them) */
        if (m->act) MW_TRY(mw_graph_act_release(m, i));
        if ((mw_graph_params_on_disk(m) || mw_graph_params_zero3(m)) && m->op_pv[i] >= 0) MW_TRY(mw_graph_param_visit(m, m->op_pv[i]));
        if (gdisk && m->op_gb[i]) MW_TRY(mw_graph_grad_bind(m, l));
        if (m->op_end && m->op_end[i]) MW_TRY(mw_graph_ends_before(m, i, 1)); /* the ends on disk (ends.c) */
        if (m->act) MW_TRY(mw_graph_act_before(m, i)); /* stored activations: reads, dequantisation */
        run_timed(m, i, 1, grad_scale / N, &s);
        if (m->act) MW_TRY(mw_graph_act_after(m, i)); /* ... quantisation, writes behind */
        if (m->op_end && m->op_end[i]) MW_TRY(mw_graph_ends_after(m, i, 1));
        if (m->zpre) mw_graph_zero3_poll(m);
        if (gdisk && m->op_ge[i]) MW_TRY(mw_graph_grad_done(m, l));
    }
    *loss = (float)(s / N);
    m->tp_mb++;
    return mw_graph_io_check(m); /* --tp: a collective of an op that failed */
}

int32_t *mw_model_staging(mw_model *m) { return m->staging; }

void mw_model_times(const mw_model *m, mw_model_clock *t) {
    memset(t, 0, sizeof *t);
    t->compute_ms = m->compute_s * 1e3;
    if (!m->off) return;
    double r, w, b, wt;
    mw_offload_times(m->off, &r, &w, &b, &wt);
    t->io_read_ms = r * 1e3, t->io_write_ms = w * 1e3, t->io_busy_ms = b * 1e3, t->io_wait_ms = wt * 1e3;
}

void mw_model_set_progress(mw_model *m, mw_progress_fn fn, void *user) {
    m->progress = fn;
    m->progress_user = user;
}

void mw_model_progress(const mw_model *m, int done, int total) {
    if (m->progress) m->progress(m->progress_user, done, total);
}

const float *mw_model_losses(const mw_model *m) {
    return (const float *)m->opp[(size_t)m->head_op * MW_MAXACC + m->arch->losses_acc];
}

const float *mw_model_logits(const mw_model *m) {
    return mw_graph_keeps_logits(&m->cfg)
               ? (const float *)m->opp[(size_t)m->head_op * MW_MAXACC + m->arch->logits_acc]
               : NULL;
}

const float *mw_model_decode(mw_model *m, int32_t token, int pos) {
    const mw_config *c = &m->cfg;
    if (!mw_graph_keeps_logits(c) || token < 0 || token >= c->vocab || pos < 0 || pos >= c->ctx)
        return NULL;
    return m->arch->decode(m, token, pos);
}

/* Where the resident parameters (which 0) or gradients (1) of flat element lo of segment seg are. */
static float *resident(const mw_model *m, int which, int seg, size_t lo) {
    float *flat = which ? m->grads : m->params;
    if (flat) return flat + lo;
    float *const *res = which ? m->gres : m->pres;
    if (seg == 0 || seg == m->nseg - 1) return seg == 0 ? res[0] + (lo - m->seg_lo[0]) : res[1] + (lo - m->seg_lo[m->nseg - 1]);
    float *const *base = which ? m->gbase : m->pbase; /* a chunk placement's block kept in memory */
    return base[seg] + (lo - m->seg_lo[seg]);
}

/* 1 when chunk [lo, hi) of seg is a block's whose gradients on disk are stale (none this step). */
static int grads_fresh(const mw_model *m, int seg) {
    if (seg == 0 || seg == m->nseg - 1) /* an end's on disk (ends.c) */
        return m->nseg > 1 && mw_graph_seg_disk(m, seg, MW_ARR_G) && m->efresh[seg ? 1 : 0];
    return seg > 0 && seg < m->nseg - 1 && m->gfresh[seg - 1];
}

/* The gradients of chunk [lo, hi) of segment seg as floats, where they are not on the disk tier:
 * in memory as they are, or a block's bfloat16 ones widened into gslot[0] (zeros when stale).
 * Valid until the next call. */
float *mw_graph_grads_chunk(const mw_model *m, int seg, size_t lo, size_t hi) {
    if (!mw_graph_grads_mem16(m) || seg == 0 || seg == m->nseg - 1) {
        float *g = resident(m, 1, seg, lo);
        if (mw_graph_grads_slotted(m) && grads_fresh(m, seg)) /* a chunk placement's block kept in memory: none this step */
            memset(g, 0, (hi - lo) * sizeof(float));
        return g;
    }
    float *g = m->gslot[0];
    if (grads_fresh(m, seg))
        memset(g, 0, (hi - lo) * sizeof(float));
    else
        mw_bf16_load_mt(g, m->g16 + (lo - m->seg_lo[1]), hi - lo);
    return g;
}

void mw_model_zero_grad(mw_model *m) {
    if (m->grads) memset(m->grads, 0, sizeof(float) * m->nfloats);
    if (mw_graph_grads_slotted(m) && m->gfresh) {
        if (m->gres[0]) memset(m->gres[0], 0, mw_graph_seg_len(m, 0) * sizeof(float));
        if (m->gres[1]) memset(m->gres[1], 0, mw_graph_seg_len(m, m->nseg - 1) * sizeof(float));
        memset(m->gfresh, 1, (size_t)m->cfg.n_layer);
        m->efresh[0] = m->efresh[1] = 1; /* the ends' on disk (ends.c) */
        for (int l = 0; m->gblk && l < m->cfg.n_layer; l++) /* a chunk placement's blocks kept in memory */
            if (!mw_graph_seg_disk(m, 1 + l, MW_ARR_G)) memset(m->gbase[1 + l], 0, mw_graph_seg_len(m, 1 + l) * sizeof(float));
    }
    m->nready = -1;
}

/* The norm's partial sums over one streamed chunk, continuing each quantum's sum where the previous
 * chunk left it: the same additions in the same order as over the flat buffer. */
typedef struct norm_chunk {
    mw_model *m;
    double *parts;
} norm_chunk;

/* The sum of squares of one quantum's elements is a chain of double additions in element order
 * (each product of two floats is exact in double), so it runs at the adder's latency. Eight
 * quanta's chains side by side, element j of each in turn: the same additions in the same order
 * for every quantum (the same bits), eight independent chains in flight (measured: the norm was
 * the largest part of a bf16 step outside the products, 6.7%). t[u] continues quantum u's sum
 * over element u * MW_NORM_QUANTUM + j of g, j < n: floats, or bfloat16 (their bits) read as the
 * floats they are exactly, so a block's bfloat16 gradients need no widened copy first. */
#define SUMSQ8(NAME, T, X)                                                                           \
    static void NAME(double t[8], const T *g, size_t n) {                                          \
        double a0 = t[0], a1 = t[1], a2 = t[2], a3 = t[3], a4 = t[4], a5 = t[5], a6 = t[6], a7 = t[7]; \
        const size_t Q = MW_NORM_QUANTUM;                                                          \
        for (size_t j = 0; j < n; j++) {                                                           \
            const double x0 = X(g[j]), x1 = X(g[Q + j]), x2 = X(g[2 * Q + j]), x3 = X(g[3 * Q + j]); \
            const double x4 = X(g[4 * Q + j]), x5 = X(g[5 * Q + j]), x6 = X(g[6 * Q + j]);         \
            const double x7 = X(g[7 * Q + j]);                                                     \
            a0 += x0 * x0, a1 += x1 * x1, a2 += x2 * x2, a3 += x3 * x3;                            \
            a4 += x4 * x4, a5 += x5 * x5, a6 += x6 * x6, a7 += x7 * x7;                            \
        }                                                                                          \
        t[0] = a0, t[1] = a1, t[2] = a2, t[3] = a3, t[4] = a4, t[5] = a5, t[6] = a6, t[7] = a7;    \
    }
#define AS_F32(v) (v)
SUMSQ8(sumsq8, float, AS_F32)
SUMSQ8(sumsq8_16, uint16_t, mw_bf16_widen)
#undef AS_F32
#undef SUMSQ8

/* parts[b - pb] += the squares of the elements lo..hi-1 of g (g[0] is element lo; floats, or bfloat16
 * when g16) that lie in quantum b, each quantum's in element order, on the OpenMP threads */
static void sumsq_parts_at(double *parts, size_t pb, const void *gv, int g16, size_t lo, size_t hi) {
    const size_t Q = MW_NORM_QUANTUM, b0 = lo / Q, b1 = (hi - 1) / Q;
    const size_t f0 = (lo + Q - 1) / Q, f1 = hi / Q; /* the quanta wholly inside: f0 .. f1-1 */
    const size_t ng = f1 > f0 ? (f1 - f0) / 8 : 0, e1 = f0 + 8 * ng;
    const float *g = gv;
    const uint16_t *h = gv;
#pragma omp parallel for schedule(static)
    for (size_t q = 0; q < ng; q++) {
        const size_t e = (f0 + 8 * q) * Q - lo;
        if (g16)
            sumsq8_16(parts + (f0 - pb) + 8 * q, h + e, Q);
        else
            sumsq8(parts + (f0 - pb) + 8 * q, g + e, Q);
    }
    /* the rest one chain each: quanta cut by lo or hi, and those past the groups of eight */
#pragma omp parallel for schedule(static)
    for (size_t b = b0; b <= b1; b++) {
        if (b >= f0 && b < e1) continue;
        const size_t j0 = b * Q > lo ? b * Q : lo, j1 = (b + 1) * Q < hi ? (b + 1) * Q : hi;
        double t = parts[b - pb];
        for (size_t j = j0 - lo; j < j1 - lo; j++) {
            const double x = g16 ? mw_bf16_widen(h[j]) : g[j];
            t += x * x;
        }
        parts[b - pb] = t;
    }
}

void mw_graph_sumsq_parts(double *parts, const void *gv, int g16, size_t lo, size_t hi) {
    sumsq_parts_at(parts, 0, gv, g16, lo, hi);
}

static void norm_chunk_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    norm_chunk *nc = ctx;
    mw_model *m = nc->m;
    const double t0 = now_s();
    if (arr[MW_ARR_G] && mw_graph_grads16_disk(m)) { /* the disk's bfloat16, read in place (as g16's) */
        if (!grads_fresh(m, seg)) mw_graph_sumsq_parts(nc->parts, arr[MW_ARR_G], 1, lo, hi);
        m->compute_s += now_s() - t0;
        return;
    }
    if (arr[MW_ARR_G] && grads_fresh(m, seg)) memset(arr[MW_ARR_G], 0, (hi - lo) * sizeof(float));
    if (!arr[MW_ARR_G] && mw_graph_grads_mem16(m) && seg > 0 && seg < m->nseg - 1) {
        /* a block's bfloat16 gradients, read in place; none this step (zeros) add nothing: every
         * partial sum is +0 or above, and adding +0 to it leaves it as it is */
        if (!grads_fresh(m, seg)) mw_graph_sumsq_parts(nc->parts, m->g16 + (lo - m->seg_lo[1]), 1, lo, hi);
    } else {
        const float *g = arr[MW_ARR_G] ? (const float *)arr[MW_ARR_G] : mw_graph_grads_chunk(m, seg, lo, hi);
        mw_graph_sumsq_parts(nc->parts, g, 0, lo, hi);
    }
    m->compute_s += now_s() - t0;
}

mw_status mw_graph_grad_norm(mw_model *m, double *norm) {
    *norm = 0.0;
    if (m->cfg.inference) return MW_OK;
    if (mw_tp_on(m)) return mw_tp_grad_norm(m, norm); /* over the tensor-parallel ranks */
    const size_t n = m->nfloats, nb = (n + MW_NORM_QUANTUM - 1) / MW_NORM_QUANTUM;
    double *parts = (double *)m->opp[(size_t)m->opt_op * MW_MAXACC];
    if (mw_graph_grads_on_disk(m) && mw_graph_norm_ready(m)) { /* summed at the blocks' backward (narrow.c) */
        MW_TRY(mw_graph_io_check(m));
        MW_TRY(mw_graph_grads_settle(m));
        const double t0 = now_s();
        mw_graph_norm_ends(m);
        parts = m->nparts;
        m->compute_s += now_s() - t0;
    } else if (mw_graph_grads_on_disk(m)) {
        MW_TRY(mw_graph_io_check(m));
        MW_TRY(mw_graph_grads_settle(m));
        for (size_t b = 0; b < nb; b++) parts[b] = 0.0;
        norm_chunk nc = {m, parts};
        MW_TRY(mw_offload_stream(m->off, MW_ARR_BIT(MW_ARR_G), 0, norm_chunk_fn, &nc));
    } else if (mw_graph_grads_mem16(m)) { /* segment by segment, the same sums in the same order */
        for (size_t b = 0; b < nb; b++) parts[b] = 0.0;
        norm_chunk nc = {m, parts};
        void *none[MW_ARR_COUNT] = {0};
        for (int sg = 0; sg < m->nseg; sg++)
            if (m->seg_lo[sg + 1] > m->seg_lo[sg]) norm_chunk_fn(&nc, m->seg_lo[sg], m->seg_lo[sg + 1], sg, none);
    } else {
        const double t0 = now_s();
        for (size_t b = 0; b < nb; b++) parts[b] = 0.0;
        if (n) mw_graph_sumsq_parts(parts, m->grads, 0, 0, n);
        m->compute_s += now_s() - t0;
    }
    double s = 0.0;
    for (size_t b = 0; b < nb; b++) s += parts[b];
    *norm = sqrt(s);
    return MW_OK;
}

/* A pipeline stage's chunk of its gradients on the disk tier: elements lo..hi-1 of the stage, g0 + lo
 * .. of the single-process flat buffer, into parts[b - b0] (mw_graph_grad_parts_at) */
typedef struct norm_chunk_at {
    mw_model *m;
    double *parts;
    uint64_t g0, b0;
} norm_chunk_at;

static void norm_chunk_at_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    norm_chunk_at *nc = ctx;
    mw_model *m = nc->m;
    if (arr[MW_ARR_G] && mw_graph_grads16_disk(m)) { /* the disk's bfloat16, read in place; none this step add nothing */
        if (!grads_fresh(m, seg)) sumsq_parts_at(nc->parts, nc->b0, arr[MW_ARR_G], 1, nc->g0 + lo, nc->g0 + hi);
        return;
    }
    if (arr[MW_ARR_G] && grads_fresh(m, seg)) memset(arr[MW_ARR_G], 0, (hi - lo) * sizeof(float));
    const float *g = arr[MW_ARR_G] ? (const float *)arr[MW_ARR_G] : mw_graph_grads_chunk(m, seg, lo, hi);
    sumsq_parts_at(nc->parts, nc->b0, g, 0, nc->g0 + lo, nc->g0 + hi);
}

mw_status mw_graph_grad_parts_at(mw_model *m, uint64_t g0, double carry, double *parts) {
    const uint64_t Q = MW_NORM_QUANTUM, n = m->nfloats, b0 = g0 / Q;
    if (!n) return MW_OK;
    for (uint64_t b = b0; b <= (g0 + n - 1) / Q; b++) parts[b - b0] = 0.0;
    if (g0 % Q) parts[0] = carry;
    if (mw_graph_grads_on_disk(m)) { /* streamed in element order: each quantum's sum goes on chunk by chunk */
        MW_TRY(mw_graph_io_check(m));
        MW_TRY(mw_graph_grads_settle(m));
        norm_chunk_at nc = {m, parts, g0, b0};
        return mw_offload_stream(m->off, MW_ARR_BIT(MW_ARR_G), 0, norm_chunk_at_fn, &nc);
    }
    const int flat = m->grads != NULL, nseg = flat ? 1 : m->nseg;
    for (int sg = 0; sg < nseg; sg++) { /* segment by segment, in order: each quantum's sum goes on */
        const uint64_t lo = flat ? 0 : m->seg_lo[sg], hi = flat ? n : m->seg_lo[sg + 1];
        if (hi == lo) continue;
        const float *g = flat ? m->grads : mw_graph_grads_chunk(m, sg, lo, hi);
        const uint64_t a = g0 + lo, z = g0 + hi;
#pragma omp parallel for schedule(static)
        for (uint64_t b = a / Q; b <= (z - 1) / Q; b++) {
            const uint64_t j0 = b * Q > a ? b * Q : a, j1 = (b + 1) * Q < z ? (b + 1) * Q : z;
            double t = parts[b - b0];
            for (uint64_t j = j0; j < j1; j++) t += (double)g[j - a] * g[j - a];
            parts[b - b0] = t;
        }
    }
    return MW_OK;
}

/* ---- each tensor's sum of squares (--tp's norm: src/dist/tp.c) -------------------------------- */

/* The walk of mw_graph_grad_tensor_sums over the flat buffer's chunks in element order: each
 * tensor's quanta (from its own first element) summed as its elements pass, the open quantum's and
 * the tensor's partial sums carried on to the next chunk (w->open, w->sum), the tensor handed on
 * when it ends. */
typedef struct tensor_walk {
    mw_model *m;
    double *parts;
    mw_tensor_walk *st;
    mw_tensor_sum_fn fn;
    void *ctx;
} tensor_walk;

/* elements lo..hi-1 of the flat buffer: g is element lo's gradient (floats, or bfloat16 when g16;
 * NULL: zeros, which add nothing to a sum of squares that starts at +0) */
static void tensor_walk_chunk(tensor_walk *w, const void *g, int g16, size_t lo, size_t hi) {
    const mw_model *m = w->m;
    mw_tensor_walk *st = w->st;
    const size_t Q = MW_NORM_QUANTUM, esz = g16 ? sizeof(uint16_t) : sizeof(float);
    for (; st->i < m->ntensors; st->i++) {
        const mw_tensor *t = &m->tensors[st->i];
        const size_t a0 = t->offset, a1 = t->offset + t->numel;
        if (a0 >= hi && a1 > a0) return; /* after this chunk */
        const size_t a = a0 > lo ? a0 : lo, b = a1 < hi ? a1 : hi;
        if (b > a) {
            const size_t q0 = (a - a0) / Q, q1 = (b - a0 - 1) / Q; /* the tensor's quanta the chunk touches */
            for (size_t q = q0; q <= q1; q++) w->parts[q - q0] = 0.0;
            if ((a - a0) % Q) w->parts[0] = st->open; /* the quantum the chunk before left open */
            if (g) sumsq_parts_at(w->parts, q0, (const char *)g + (a - lo) * esz, g16, a - a0, b - a0);
            for (size_t q = q0; q <= q1; q++) {
                if ((q + 1) * Q <= b - a0 || b == a1) st->sum += w->parts[q - q0]; /* ends here */
                else st->open = w->parts[q - q0];
            }
        }
        if (b < a1) return; /* goes on in the next chunk */
        w->fn(w->ctx, st->i, st->sum);
        st->sum = 0.0, st->open = 0.0;
    }
}

static void tensor_walk_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    tensor_walk *w = ctx;
    mw_model *m = w->m;
    const double t0 = now_s();
    if (arr[MW_ARR_G]) /* the disk's: floats, or bfloat16 read in place; none this step: zeros */
        tensor_walk_chunk(w, grads_fresh(m, seg) ? NULL : arr[MW_ARR_G], mw_graph_grads16_disk(m), lo, hi);
    else
        tensor_walk_chunk(w, mw_graph_grads_chunk(m, seg, lo, hi), 0, lo, hi);
    m->compute_s += now_s() - t0;
}

mw_status mw_graph_grad_tensor_sums(mw_model *m, mw_tensor_sum_fn fn, void *ctx) {
    mw_tensor_walk st = {0.0, 0.0, 0};
    tensor_walk w = {m, (double *)m->opp[(size_t)m->opt_op * MW_MAXACC], &st, fn, ctx};
    if (mw_graph_grads_on_disk(m)) { /* streamed in element order, as the norm's pass over the file */
        MW_TRY(mw_graph_io_check(m));
        MW_TRY(mw_graph_grads_settle(m));
        MW_TRY(mw_offload_stream(m->off, MW_ARR_BIT(MW_ARR_G), 0, tensor_walk_fn, &w));
    } else if (m->grads) {
        if (m->nfloats) tensor_walk_chunk(&w, m->grads, 0, 0, m->nfloats);
    } else { /* segment by segment (a block's bfloat16 widened) */
        void *none[MW_ARR_COUNT] = {0};
        for (int sg = 0; sg < m->nseg; sg++)
            if (m->seg_lo[sg + 1] > m->seg_lo[sg]) tensor_walk_fn(&w, m->seg_lo[sg], m->seg_lo[sg + 1], sg, none);
    }
    tensor_walk_chunk(&w, NULL, 0, m->nfloats, m->nfloats); /* empty tensors at the end */
    return st.i == m->ntensors ? MW_OK : mw_fail(MW_ERR_ARG, "internal: the gradient norm ended at tensor %d of %d", st.i, m->ntensors);
}

void mw_graph_grad_tensor_range(mw_model *m, mw_tensor_walk *st, const float *g, size_t lo, size_t hi, mw_tensor_sum_fn fn,
                                void *ctx) {
    tensor_walk w = {m, (double *)m->opp[(size_t)m->opt_op * MW_MAXACC], st, fn, ctx};
    const double t0 = now_s();
    while (st->i < m->ntensors && m->tensors[st->i].offset + m->tensors[st->i].numel <= lo &&
           m->tensors[st->i].offset < lo) st->i++; /* the tensors before the range */
    if (hi > lo) tensor_walk_chunk(&w, g, 0, lo, hi);
    if (hi == m->nfloats) tensor_walk_chunk(&w, NULL, 0, hi, hi); /* empty tensors at the end */
    m->compute_s += now_s() - t0;
}

double mw_model_grad_norm(const mw_model *m) {
    double norm;
    mw_status st = mw_graph_grad_norm((mw_model *)m, &norm);
    if (st != MW_OK) {
        mw_graph_io_failed((mw_model *)m, st);
        return NAN;
    }
    return norm;
}

/* One pass of the optimizer over a streamed chunk [lo, hi) of the flat buffer: the arrays the
 * stream brought, the rest where they live in memory. */
typedef struct opt_chunk {
    mw_model *m;
    const mw_opt_hp *hp;
    int pass;
} opt_chunk;

_Static_assert((int)MW_OA_G == (int)MW_ARR_G && (int)MW_OA_P == (int)MW_ARR_P && (int)MW_OA_M == (int)MW_ARR_M && (int)MW_OA_V == (int)MW_ARR_V,
               "the optimizer's arrays are the disk tier's");

static void opt_chunk_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    opt_chunk *a = ctx;
    mw_model *m = a->m;
    const double t0 = now_s();
    const unsigned rd = m->opt.rd[a->pass];
    float *pc = NULL, *gc = NULL;
    if (rd & MW_ARR_BIT(MW_ARR_P)) pc = arr[MW_ARR_P] ? arr[MW_ARR_P] : resident(m, 0, seg, lo);
    if (rd & MW_ARR_BIT(MW_ARR_G)) {
        gc = arr[MW_ARR_G] ? arr[MW_ARR_G] : mw_graph_grads_chunk(m, seg, lo, hi);
        if (arr[MW_ARR_G] && mw_graph_grads16_disk(m)) { /* the disk's bfloat16, widened (a block's slot is free) */
            gc = m->gslot[0];
            if (!grads_fresh(m, seg)) mw_bf16_load_mt(gc, arr[MW_ARR_G], hi - lo);
        }
        if (arr[MW_ARR_G] && grads_fresh(m, seg)) memset(gc, 0, (hi - lo) * sizeof(float));
    }
    void *mc = arr[MW_ARR_M] ? arr[MW_ARR_M] : mw_graph_opt_resident(m, 0, seg, lo); /* a chunk placement's */
    void *vc = arr[MW_ARR_V] ? arr[MW_ARR_V] : mw_graph_opt_resident(m, 1, seg, lo);
    mw_opt_chunk(&m->opt, a->hp, a->pass, lo, hi, pc, gc, mc, vc, m->ostate, m->oscratch);
    if (arr[MW_ARR_H]) mw_graph_narrow_chunk(m, seg, lo, hi, pc, arr[MW_ARR_H]); /* the copy forward reads */
    m->compute_s += now_s() - t0;
}

mw_status mw_model_adamw_step(mw_model *m, double lr, double grad_norm, int t) {
    const mw_config *c = &m->cfg;
    if (c->inference) return MW_OK;
    m->tp_mb = 0; /* the next micro-batch is a step's first */
    if (mw_graph_opt_sharded(m)) return mw_zero_opt_step(m, lr, grad_norm, t);
    if (mw_tp_on(m)) MW_TRY(mw_tp_sp_settle(m)); /* --sp: the norms' gradients, if the norm did not */
    float coef = 1.0f;
    if (c->grad_clip > 0) { /* PyTorch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1 */
        float cc = (float)c->grad_clip / (float)(grad_norm + 1e-6);
        coef = cc < 1.0f ? cc : 1.0f;
    }
    mw_opt_hp hp;
    mw_opt_hp_of(&hp, c, lr, coef, t);
    mw_opt_begin(&m->opt, &hp, m->ostate, m->oscratch);
    if (m->off) {
        const unsigned disk = (mw_graph_grads_on_disk(m) ? MW_ARR_BIT(MW_ARR_G) : 0) |
                              (mw_graph_params_on_disk(m) ? MW_ARR_BIT(MW_ARR_P) : 0) |
                              (mw_graph_opt_on_disk(m) ? mw_graph_opt_mask(m) : 0);
        MW_TRY(mw_graph_io_check(m));
        MW_TRY(mw_graph_grads_settle(m));
        MW_TRY(mw_graph_params_settle(m));
        mw_offload_layout lay;
        mw_graph_disk_layout(m, &lay);
        const int split = mw_graph_opt_split_in(m, &lay);
        for (int k = 0; k < m->opt.npasses; k++) {
            if (!mw_opt_pass_needed(&m->opt, k, split)) continue;
            opt_chunk a = {m, &hp, k};
            const unsigned rd = m->opt.rd[k] & disk;
            unsigned wr = m->opt.wr[k] & disk & ~MW_ARR_BIT(MW_ARR_G);
            if (mw_graph_params16(m) && (wr & MW_ARR_BIT(MW_ARR_P))) wr |= MW_ARR_BIT(MW_ARR_H); /* written, never read */
            MW_TRY(mw_offload_stream(m->off, rd, wr, opt_chunk_fn, &a));
            if (mw_tp_on(m)) MW_TRY(mw_tp_opt_join(m, k)); /* the shards' statistics over the ranks */
            mw_opt_end_pass(&m->opt, &hp, k, m->ostate, m->oscratch);
        }
        if (mw_graph_grads_slotted(m)) { /* zero, as the update left them */
            memset(m->gfresh, 1, (size_t)c->n_layer);
            m->efresh[0] = m->efresh[1] = 1;
        }
        m->nready = -1; /* the norm's sums were of the gradients the update used */
        return mw_graph_params_settle(m);
    }
    if (mw_graph_grads_mem16(m)) { /* segment by segment: the blocks' gradients widened one at a time */
        const double t0 = now_s();
        int split = 0;
        for (int sg = 1; sg < m->nseg; sg++) split |= mw_opt_splits(&m->opt, m->seg_lo[sg]);
        for (int k = 0; k < m->opt.npasses; k++) {
            if (!mw_opt_pass_needed(&m->opt, k, split)) continue;
            for (int sg = 0; sg < m->nseg; sg++) {
                const size_t lo = m->seg_lo[sg], hi = m->seg_lo[sg + 1];
                if (hi == lo) continue;
                void *mm = m->opt.bits[0] ? mw_opt_elem(m->m, m->opt.bits[0], lo) : NULL;
                void *vv = m->opt.bits[1] ? mw_opt_elem(m->v, m->opt.bits[1], lo) : NULL;
                mw_opt_chunk(&m->opt, &hp, k, lo, hi, m->params + lo, mw_graph_grads_chunk(m, sg, lo, hi), mm, vv,
                             m->ostate, m->oscratch);
            }
            if (mw_tp_on(m)) MW_TRY(mw_tp_opt_join(m, k)); /* the shards' statistics over the ranks */
            mw_opt_end_pass(&m->opt, &hp, k, m->ostate, m->oscratch);
        }
        memset(m->gfresh, 1, (size_t)c->n_layer);
        m->compute_s += now_s() - t0;
        return MW_OK;
    }
    const double t0 = now_s();
    for (int k = 0; k < m->opt.npasses; k++) {
        if (!mw_opt_pass_needed(&m->opt, k, 0)) continue; /* one chunk: it cuts no block */
        mw_opt_chunk(&m->opt, &hp, k, 0, m->nfloats, m->params, m->grads, m->m, m->v, m->ostate, m->oscratch);
        if (mw_tp_on(m)) MW_TRY(mw_tp_opt_join(m, k)); /* the shards' statistics over the ranks */
        mw_opt_end_pass(&m->opt, &hp, k, m->ostate, m->oscratch);
    }
    m->compute_s += now_s() - t0;
    return MW_OK;
}
