/* Tensor parallelism's collectives and shards (tp.h). May call: the model's mw_comm (alltoallv,
 * allgatherv), src/graph (the tensor table, the failure record), shardio.c (a sharded replica's part). */
#include "tp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/rng.h"
#include "../core/status.h"
#include "../graph/graph_impl.h"
#include "../graph/model.h"
#include "../kernels/cpu/vocab.h"
#include "shardio.h"

#define MAX_TP 64 /* ranks of one group (mw_model_set_comm refuses more) */

size_t mw_tp_piece_floats(const mw_config *c) {
    if (c->tp <= 1) return 0;
    const uint64_t n = (uint64_t)c->batch * c->seq * c->n_embd, T = (uint64_t)c->tp; /* the largest: (N, C) */
    uint64_t q = (n + T - 1) / T;
    if (q > MW_ZERO_BUCKET) q = MW_ZERO_BUCKET;
    q = (q + 63) / 64 * 64; /* whole doubles, 256-byte pieces */
    return (size_t)q;
}

uint64_t mw_tp_workspace_floats(const mw_config *c) {
    if (c->tp <= 1) return 0;
    return (uint64_t)c->tp * mw_tp_piece_floats(c) + MW_TP_STATS;
}

enum { OP_SUM32, OP_SUM64, OP_MAX32 };

/* The all-reduce of tp.h: pieces reduced by their ranks in rank order, then gathered (gather 0:
 * the reduce-scatter alone, this rank's piece summed in place). Pieces are whole units of unit
 * elements (--sp: rows of C). */
static mw_status reduce(mw_model *m, void *buf, size_t n, int op, size_t unit, int gather) {
    mw_comm *cm = m->tpc;
    if (!cm) return mw_fail(MW_ERR_ARG, "a --tp model needs its ranks (mw_model_set_comm)");
    const int T = cm->size, R = cm->rank;
    if (T == 1 || n == 0) return MW_OK;
    const size_t w = op == OP_SUM64 ? 2 : 1, q = m->tpq / w; /* floats per element; elements per round */
    size_t plo[MAX_TP], plen[MAX_TP], sc[MAX_TP], sd[MAX_TP], rc[MAX_TP], rd[MAX_TP], most = 0;
    const size_t nu = n / unit;
    for (int j = 0; j < T; j++) {
        plo[j] = nu * (size_t)j / (size_t)T * unit, plen[j] = nu * (size_t)(j + 1) / (size_t)T * unit - plo[j];
        if (plen[j] > most) most = plen[j];
    }
    float *recv = m->tpbuf, *fb = buf;
    const size_t rounds = (most + q - 1) / q;
    for (size_t t = 0; t < rounds; t++) {
        const size_t o = t * q, mine = plen[R] > o ? (plen[R] - o < q ? plen[R] - o : q) : 0;
        for (int j = 0; j < T; j++) { /* this rank's own piece is read where it is */
            const size_t len = plen[j] > o ? (plen[j] - o < q ? plen[j] - o : q) : 0;
            sc[j] = j == R ? 0 : len * w, sd[j] = len ? (plo[j] + o) * w : 0;
            rc[j] = j == R ? 0 : mine * w, rd[j] = (size_t)j * q * w;
        }
        MW_TRY(cm->alltoallv(cm, fb, sc, sd, recv, rc, rd));
        if (!mine) continue;
        const size_t e0 = plo[R] + o;
        if (op == OP_SUM64) {
            double *x = (double *)buf + e0;
#pragma omp parallel for schedule(static) if (mine > 4096)
            for (size_t e = 0; e < mine; e++) {
                double s = R == 0 ? x[e] : ((const double *)recv)[e];
                for (int j = 1; j < T; j++) s = s + (j == R ? x[e] : ((const double *)(recv + (size_t)j * q * w))[e]);
                x[e] = s;
            }
        } else {
            float *x = fb + e0;
            const int mx = op == OP_MAX32;
#pragma omp parallel for schedule(static) if (mine > 4096)
            for (size_t e = 0; e < mine; e++) {
                float s = R == 0 ? x[e] : recv[e];
                for (int j = 1; j < T; j++) {
                    const float y = j == R ? x[e] : recv[(size_t)j * q + e];
                    s = mx ? (y > s ? y : s) : s + y;
                }
                x[e] = s;
            }
        }
    }
    return gather ? cm->allgatherv(cm, buf, w * sizeof(float), plen, plo) : MW_OK;
}

static mw_status allreduce(mw_model *m, void *buf, size_t n, int op) { return reduce(m, buf, n, op, 1, 1); }

void mw_tp_rows(const mw_model *m, int N, int *r0, int *r1) {
    const int T = m->cfg.tp > 1 ? m->cfg.tp : 1, r = mw_tp_rank(m);
    *r0 = (int)((long)N * r / T), *r1 = (int)((long)N * (r + 1) / T);
}

void mw_tp_reduce_scatter(mw_model *m, float *buf, int N, int C) {
    mw_graph_io_failed(m, reduce(m, buf, (size_t)N * C, OP_SUM32, (size_t)C, 0));
}

void mw_tp_sum_partials(mw_model *m, float *buf, int N, int C) {
    if (!mw_tp_on(m)) return;
    if (m->cfg.sp) mw_tp_reduce_scatter(m, buf, N, C);
    else mw_tp_allreduce(m, buf, (size_t)N * (size_t)C);
}

const void *mw_tp_all_rows(mw_model *m, const void *mine, int N, size_t row_bytes) {
    if (!mw_tp_on(m) || !m->cfg.sp) return mine;
    mw_tp_gather_rows(m, m->spbuf, mine, N, row_bytes);
    return m->spbuf;
}

void mw_tp_gather_rows(mw_model *m, void *full, const void *mine, int N, size_t row_bytes) {
    mw_comm *cm = m->tpc;
    if (!cm) {
        mw_graph_io_failed(m, mw_fail(MW_ERR_ARG, "a --tp model needs its ranks (mw_model_set_comm)"));
        return;
    }
    const int T = cm->size;
    size_t cnt[MAX_TP], dsp[MAX_TP];
    for (int j = 0; j < T; j++) {
        const size_t a = (size_t)N * (size_t)j / (size_t)T, b = (size_t)N * (size_t)(j + 1) / (size_t)T;
        dsp[j] = a, cnt[j] = b - a;
    }
    memcpy((char *)full + dsp[cm->rank] * row_bytes, mine, cnt[cm->rank] * row_bytes);
    if (T > 1) mw_graph_io_failed(m, cm->allgatherv(cm, full, row_bytes, cnt, dsp));
}

/* --sp with --zero 2, 3 over replicas: the norms' gradients summed (over the replicas and micro-
 * batches, each tensor rank its rows') into the shards (m->zacc, elements [zlo, zhi) of the flat
 * buffer, the same on the T ranks of a group: their tables are alike), then each shard's part of
 * them summed over the tensor ranks in rank order: --zero 1's sum of the gathered buffer, element by
 * element (the same additions, only where the elements live differs) */
static mw_status sp_settle_shards(mw_model *m) {
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (!t->seqp) continue;
        const size_t a = t->offset > m->zlo ? t->offset : m->zlo, e = t->offset + t->numel,
                     b = e < m->zhi ? e : m->zhi;
        if (b > a) MW_TRY(allreduce(m, m->zacc + (a - m->zlo), b - a, OP_SUM32));
    }
    m->tp_sp_dirty = 0;
    return MW_OK;
}

/* --sp: the gradients of the tensors whose sums run over the sequence (the norms'), each rank's
 * over its rows, summed over the ranks in rank order once per step */
mw_status mw_tp_sp_settle(mw_model *m) {
    if (!m->cfg.sp || !m->tp_sp_dirty) return MW_OK;
    if (mw_graph_grads_zero2(m)) return sp_settle_shards(m);
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (!t->seqp || (t->layer >= 0 && (mw_graph_grads_mem16(m) || mw_graph_grads_on_disk(m))))
            continue; /* bf16, on disk: summed by mw_tp_sp_done */
        float *g = mw_graph_tensor(m, 1, i);
        if (!g) return mw_fail(MW_ERR_ARG, "internal: --sp: tensor %s's gradients are not in memory", t->name);
        MW_TRY(allreduce(m, g, t->numel, OP_SUM32));
    }
    m->tp_sp_dirty = 0;
    return MW_OK;
}

/* The block's --sp tensors in its fp32 slot (base: the segment's first element) */
static void sp_block(mw_model *m, int l, float *slot, int sum, mw_status *st) {
    const size_t lo = m->seg_lo[1 + l];
    for (int i = 0; i < m->ntensors && *st == MW_OK; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (!t->seqp || t->layer != l) continue;
        float *g = slot + (t->offset - lo);
        if (sum) *st = allreduce(m, g, t->numel, OP_SUM32);
        else memset(g, 0, t->numel * sizeof(float));
    }
}

void mw_tp_sp_bind(mw_model *m, int l, float *slot) {
    mw_status st = MW_OK;
    if (m->cfg.sp && mw_tp_rank(m) != 0) sp_block(m, l, slot, 0, &st);
}

mw_status mw_tp_sp_done(mw_model *m, int l, float *slot) {
    mw_status st = MW_OK;
    if (m->cfg.sp) sp_block(m, l, slot, 1, &st);
    return st;
}

void mw_tp_allreduce(mw_model *m, float *buf, size_t n) { mw_graph_io_failed(m, allreduce(m, buf, n, OP_SUM32)); }
void mw_tp_allreduce_f64(mw_model *m, double *buf, size_t n) { mw_graph_io_failed(m, allreduce(m, buf, n, OP_SUM64)); }
void mw_tp_allreduce_max(mw_model *m, float *buf, size_t n) { mw_graph_io_failed(m, allreduce(m, buf, n, OP_MAX32)); }

mw_status mw_tp_opt_join(mw_model *m, int pass) {
    const mw_opt_layout *L = &m->opt;
    switch (mw_opt_tp_join(L, pass)) {
    case MW_OPT_TPJ_MAX: return allreduce(m, m->oscratch, L->max_floats, OP_MAX32);
    case MW_OPT_TPJ_SUMS:
        for (int i = 0; i < L->ntensors; i++) {
            size_t n;
            double *d = mw_opt_tp_sums(L, m->oscratch, i, &n);
            if (d) MW_TRY(allreduce(m, d, n, OP_SUM64));
        }
        return MW_OK;
    case MW_OPT_TPJ_PIECES:
        for (int i = 0; i < L->ntensors; i++) {
            double *d = mw_opt_tp_collapse(L, m->oscratch, i);
            if (d) MW_TRY(allreduce(m, d, 1, OP_SUM64));
        }
        return MW_OK;
    default: return MW_OK;
    }
}

void mw_tp_vocab_range(const mw_model *m, int V, int *lo, int *hi) {
    const int T = m->cfg.tp > 1 ? m->cfg.tp : 1, per = (V + T - 1) / T, r = mw_tp_rank(m);
    *lo = r * per, *hi = (r + 1) * per;
}

int mw_tp_local_index(const mw_tensor *t, int T, int r, size_t g, size_t *local) {
    const size_t cols = t->gdims[1] ? (size_t)t->gdims[1] : 1, row = g / cols, col = g % cols;
    if (T <= 1 || t->split == MW_TS_WHOLE) {
        *local = g;
        return 1;
    }
    if (t->split == MW_TS_ROWS) {
        const size_t G = t->groups ? t->groups : 1, gsz = (size_t)t->gdims[0] / G, per = (gsz + T - 1) / T;
        const size_t k = row / gsz, rr = row % gsz;
        if (rr / per != (size_t)r) return 0;
        *local = (k * per + rr % per) * cols + col;
        return 1;
    }
    const size_t lc = (size_t)t->dims[1]; /* MW_TS_COLS */
    if (col / lc != (size_t)r) return 0;
    *local = row * lc + col % lc;
    return 1;
}

/* the whole tensor's element count */
static size_t whole_numel(const mw_tensor *t) { return (size_t)t->gdims[0] * (t->gdims[1] ? (size_t)t->gdims[1] : 1); }

void mw_tp_fill_normal(mw_model *m, int i, uint64_t seed, double std) {
    const mw_tensor *t = &m->tensors[i];
    float *p = mw_graph_param_access(m, i, 1);
    if (!p) return;
    const int T = m->cfg.tp, r = mw_tp_rank(m);
    const size_t n = whole_numel(t), nblk = (n + MW_NORM_QUANTUM - 1) / MW_NORM_QUANTUM;
    memset(p, 0, t->numel * sizeof(float)); /* the vocabulary's padding rows stay zero */
    /* mw_graph_fill_normal's streams over the whole tensor, this rank's elements kept */
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblk; b++) {
        uint64_t s = seed ^ ((uint64_t)(m->tensor_base + i + 1) << 40) ^ (b * 0x9E3779B97F4A7C15ull);
        mw_rng_next(&s);
        const size_t j1 = (b + 1) * MW_NORM_QUANTUM < n ? (b + 1) * MW_NORM_QUANTUM : n;
        for (size_t j = b * MW_NORM_QUANTUM; j < j1; j += 2) {
            double rr = sqrt(-2.0 * log(mw_rng_unit(&s))), th = 6.283185307179586 * mw_rng_unit(&s);
            size_t l;
            if (mw_tp_local_index(t, T, r, j, &l)) p[l] = (float)(std * rr * cos(th));
            if (j + 1 < j1 && mw_tp_local_index(t, T, r, j + 1, &l)) p[l] = (float)(std * rr * sin(th));
        }
    }
}

/* The norm's two sums, tensor by tensor in table order: of the split tensors' (each rank its shard,
 * summed over the ranks next) and of the whole ones' (the same on every rank) */
typedef struct norm_chain {
    const mw_model *m;
    double split, whole;
} norm_chain;

static void norm_add(void *ctx, int i, double s) {
    norm_chain *c = ctx;
    if (c->m->tensors[i].split == MW_TS_WHOLE)
        c->whole += s;
    else
        c->split += s;
}

enum { TAG_TPNORM = 21, TAG_TPHAND, TAG_TPEND }; /* (pipeline.c's, pipezero.c's and pipetied.c's tags are below 10) */

/* --pp: a stage holds a run of the single-process table; the two sums go on from the stage before
 * it, in the table's order as one stage of the whole model adds them (--tp alone's bits), and the
 * last stage's reach every stage */
static mw_status stage_chain(mw_model *m, norm_chain *c) {
    mw_comm *pc = m->cfg.pp > 1 ? m->pcomm : NULL;
    const int S = pc ? pc->rank : 0, P = pc ? pc->size : 1;
    double two[2];
    if (S > 0) {
        MW_TRY(pc->recv(pc, two, sizeof two, S - 1, TAG_TPNORM));
        c->split = two[0], c->whole = two[1];
    }
    MW_TRY(mw_graph_grad_tensor_sums(m, norm_add, c));
    two[0] = c->split, two[1] = c->whole;
    if (S < P - 1) MW_TRY(pc->send(pc, two, sizeof two, S + 1, TAG_TPNORM));
    if (P > 1 && S == P - 1)
        for (int j = 0; j < P - 1; j++) MW_TRY(pc->send(pc, two, sizeof two, j, TAG_TPEND));
    if (P > 1 && S < P - 1) MW_TRY(pc->recv(pc, two, sizeof two, P - 1, TAG_TPEND));
    c->split = two[0], c->whole = two[1];
    return MW_OK;
}

/* --zero 2, 3 over the replicas (m->comm): each holds its shard [zlo, zhi) of the summed gradient
 * (m->zacc). The walk goes on along the element order, replica by replica, each passing on the
 * open quantum's and the tensor's partial sums with the two sums (the same additions in the same
 * order as over the whole buffer: --zero 1's bits). Under --pp the stages follow one another as in
 * stage_chain: the last replica of stage s to the last of stage s + 1 (the same pipeline), which
 * hands it to that stage's first; the last stage's last replica's sums then reach every rank. */
static mw_status shard_chain(mw_model *m, norm_chain *c) {
    mw_comm *dc = m->comm, *pc = m->cfg.pp > 1 ? m->pcomm : NULL;
    const int D = dc->size, d = dc->rank, S = pc ? pc->rank : 0, P = pc ? pc->size : 1;
    mw_tensor_walk w = {0.0, 0.0, 0};
    double x[5] = {0.0, 0.0, 0.0, 0.0, 0.0}; /* open, sum, tensor, split, whole */
    if (S > 0 && D > 1 && d == D - 1) { /* the stage before's sums, handed to this stage's first replica */
        double two[2];
        MW_TRY(pc->recv(pc, two, sizeof two, S - 1, TAG_TPNORM));
        MW_TRY(dc->send(dc, two, sizeof two, 0, TAG_TPHAND));
    }
    if (d > 0) {
        MW_TRY(dc->recv(dc, x, sizeof x, d - 1, TAG_TPNORM));
        w.open = x[0], w.sum = x[1], w.i = (int)x[2];
    } else if (S > 0 && D == 1) {
        MW_TRY(pc->recv(pc, x + 3, 2 * sizeof *x, S - 1, TAG_TPNORM));
    } else if (S > 0) {
        MW_TRY(dc->recv(dc, x + 3, 2 * sizeof *x, D - 1, TAG_TPHAND));
    }
    c->split = x[3], c->whole = x[4];
    mw_graph_grad_tensor_range(m, &w, m->zacc, m->zlo, m->zhi, norm_add, c);
    x[0] = w.open, x[1] = w.sum, x[2] = w.i, x[3] = c->split, x[4] = c->whole;
    if (d < D - 1) MW_TRY(dc->send(dc, x, sizeof x, d + 1, TAG_TPNORM));
    else if (S < P - 1) MW_TRY(pc->send(pc, x + 3, 2 * sizeof *x, S + 1, TAG_TPNORM));
    if (d == D - 1 && w.i != m->ntensors)
        return mw_fail(MW_ERR_ARG, "internal: the shards' gradient norm ended at tensor %d of %d", w.i, m->ntensors);
    /* the last stage's last replica's sums: to its stage's replicas, then each to the stages before */
    if (S == P - 1 && d == D - 1)
        for (int j = 0; j < D - 1; j++) MW_TRY(dc->send(dc, x + 3, 2 * sizeof *x, j, TAG_TPEND));
    if (S == P - 1 && d < D - 1) MW_TRY(dc->recv(dc, x + 3, 2 * sizeof *x, D - 1, TAG_TPEND));
    if (P > 1 && S == P - 1)
        for (int j = 0; j < P - 1; j++) MW_TRY(pc->send(pc, x + 3, 2 * sizeof *x, j, TAG_TPEND));
    if (P > 1 && S < P - 1) MW_TRY(pc->recv(pc, x + 3, 2 * sizeof *x, P - 1, TAG_TPEND));
    c->split = x[3], c->whole = x[4];
    return MW_OK;
}

mw_status mw_tp_grad_norm(mw_model *m, double *norm) {
    MW_TRY(mw_tp_sp_settle(m));
    norm_chain c = {m, 0.0, 0.0};
    MW_TRY(m->cfg.dp && m->cfg.zero >= 2 && m->comm ? shard_chain(m, &c) : stage_chain(m, &c));
    double *x = (double *)(m->tpbuf + (size_t)m->cfg.tp * m->tpq); /* the statistics' room */
    x[0] = c.split;
    MW_TRY(allreduce(m, x, 1, OP_SUM64));
    *norm = sqrt(x[0] + c.whole);
    return MW_OK;
}

/* --tp's combinations refused before a plan: none now (--sp with a stage's gradients on disk, and with
 * --zero 2 and 3 over replicas, run); the place for the next one */
mw_status mw_tp_check(const mw_config *c) {
    (void)c;
    return MW_OK;
}

mw_status mw_model_set_tp(mw_model *m, mw_comm *tcomm) {
    const mw_config *c = &m->cfg;
    if (c->tp <= 1) return mw_fail(MW_ERR_ARG, "the model was not planned for tensor parallelism (cfg.tp)");
    if (!tcomm || tcomm->size != c->tp)
        return mw_fail(MW_ERR_ARG, "--tp %d: the model was planned for %d tensor-parallel ranks, the group has %d", c->tp,
                       c->tp, tcomm ? tcomm->size : 0);
    if (c->tp > MAX_TP) return mw_fail(MW_ERR_ARG, "--tp %d: at most %d tensor-parallel ranks", c->tp, MAX_TP);
    m->tpc = tcomm;
    for (int i = 0; i < m->opt.ntensors; i++) /* the optimizer's shards: this rank's of each whole tensor */
        if (m->opt.t[i].split) m->opt.t[i].rank = tcomm->rank;
    return MW_OK;
}

/* Local elements [lo, lo + n) of tensor i's array which on this rank into out, each as a float: the
 * parameters (0), or the optimizer's array (1 M, 2 V) of 32 bits (values) or 8 or 4 (codes). Read
 * where they live: in memory, or through the disk tier (a block's slot, the staging's windows). */
static mw_status local_read(mw_model *m, int i, int which, size_t lo, size_t n, float *out) {
    const mw_tensor *t = &m->tensors[i];
    if (which == 0) {
        const float *p = mw_graph_param_access(m, i, 0);
        if (!p) return mw_graph_io_check(m);
        memcpy(out, p + lo, n * sizeof(float));
        return MW_OK;
    }
    const int bits = m->opt.bits[which - 1];
    for (size_t e = 0; e < n;) {
        const size_t x = t->offset + lo + e; /* the flat element */
        const void *p;
        size_t nb;
        MW_TRY(mw_model_state_view(m, which - 1, (uint64_t)x * (size_t)bits / 8, &p, &nb));
        const unsigned char *b = p;
        size_t k = bits == 32 ? nb / 4 : bits == 8 ? nb : 2 * nb - (x & 1); /* elements in the window */
        if (k > n - e) k = n - e;
        if (!k) return mw_fail(MW_ERR_ARG, "internal: --tp: an empty window of %s's optimizer state", t->name);
        if (bits == 32)
            memcpy(out + e, b, k * sizeof(float));
        else
            for (size_t j = 0; j < k; j++)
                out[e + j] = (float)(bits == 8 ? b[j] : (b[((x & 1) + j) >> 1] >> ((((x & 1) + j) & 1) * 4)) & 15);
        e += k;
    }
    return MW_OK;
}

int mw_tp_part_end(const mw_tensor *t, int a, size_t most) {
    const int rows = t->gdims[0];
    const size_t cols = t->gdims[1] ? (size_t)t->gdims[1] : 1;
    size_t k = most / cols;
    if (k < 1) k = 1;
    int b = (size_t)(rows - a) < k ? rows : a + (int)k;
    if (t->split == MW_TS_ROWS && t->groups > 1) { /* within one group: each rank's rows are then contiguous */
        const int gsz = rows / t->groups, gend = (a / gsz + 1) * gsz;
        if (b > gend) b = gend;
    }
    return b;
}

/* rank r's elements of whole rows [a, b) of t: local [*lo, *lo + *n) (a part never spans a group) */
static void part_local(const mw_tensor *t, int T, int r, int a, int b, size_t *lo, size_t *n) {
    const size_t cols = t->gdims[1] ? (size_t)t->gdims[1] : 1;
    *lo = 0, *n = 0;
    if (T <= 1 || t->split == MW_TS_WHOLE) {
        if (r == 0) *lo = (size_t)a * cols, *n = (size_t)(b - a) * cols;
    } else if (t->split == MW_TS_COLS) {
        const size_t lc = (size_t)t->dims[1];
        *lo = (size_t)a * lc, *n = (size_t)(b - a) * lc;
    } else {
        const size_t G = t->groups ? t->groups : 1, gsz = (size_t)t->gdims[0] / G, per = (gsz + T - 1) / T;
        const size_t k = (size_t)a / gsz, ra = (size_t)a - k * gsz, rb = (size_t)b - k * gsz;
        const size_t x = ra > (size_t)r * per ? ra : (size_t)r * per, y = rb < (size_t)(r + 1) * per ? rb : (size_t)(r + 1) * per;
        if (y > x) *lo = (k * per + x - (size_t)r * per) * cols, *n = (y - x) * cols;
    }
}

/* --zero's replicas shard the optimizer's array za of 8- or 4-bit codes: flat elements [x, x + n)
 * of it gathered from them to replica 0 (collective over m->comm, as mw_shardio_gather), each code
 * into out as a float (local_read's form); out is NULL on the other replicas. The replicas' shards
 * are whole quanta of elements (mw_zero_shard), so none cuts a byte of 4-bit codes; a range that
 * starts or ends inside a byte takes the whole byte and its nibble. */
static mw_status gather_codes(mw_model *m, int za, size_t x, size_t n, float *out) {
    const int bits = m->opt.bits[za];
    const uint64_t b0 = (uint64_t)x * (uint64_t)bits / 8, b1 = ((uint64_t)(x + n) * (uint64_t)bits + 7) / 8;
    unsigned char *buf = NULL;
    if (out && !(buf = malloc(b1 > b0 ? (size_t)(b1 - b0) : 1)))
        return mw_fail(MW_ERR_NOMEM, "out of memory gathering the optimizer's codes for a checkpoint");
    /* (a replica that cannot allocate fails here, before the gather: the others wait, and the run ends on it) */
    const mw_status st = mw_shardio_gather(m, za, b0, (size_t)(b1 - b0), buf);
    if (st == MW_OK && out)
        for (size_t j = 0; j < n; j++)
            out[j] = (float)(bits == 8 ? buf[j] : (buf[((x & 1) + j) >> 1] >> ((((x & 1) + j) & 1) * 4)) & 15);
    free(buf);
    return st;
}

mw_status mw_tp_gather_part(mw_model *m, int i, int which, int a, int b, float *out, float *scratch) {
    const mw_tensor *t = &m->tensors[i];
    mw_comm *cm = m->tpc;
    if (which < 0 || which > 2 || (which > 0 && !m->opt.bits[which - 1]))
        return mw_fail(MW_ERR_ARG, "internal: --tp: tensor %s has no array %d", t->name, which);
    const int coded = which > 0 && m->opt.bits[which - 1] != 32; /* 8 or 4 bits */
    const int T = cm ? cm->size : 1, R = cm ? cm->rank : 0;
    const size_t cols = t->gdims[1] ? (size_t)t->gdims[1] : 1, g0 = (size_t)a * cols, n = (size_t)(b - a) * cols;
    const int whole = t->split == MW_TS_WHOLE || T == 1;
    size_t lo[MAX_TP], cnt[MAX_TP], off[MAX_TP], sc[MAX_TP] = {0}, sd[MAX_TP] = {0}, rc[MAX_TP] = {0}, rd[MAX_TP] = {0};
    size_t at = 0;
    for (int j = 0; j < T && !whole; j++) part_local(t, T, j, a, b, &lo[j], &cnt[j]), off[j] = at, at += cnt[j];
    /* --zero over D > 1 replicas (src/dist/shardio.c): replica 0's group gathers; an array the
     * replicas shard comes to it from them first (every replica runs this, the others end there) */
    const int za = which == 0 ? MW_SHARDIO_PARAMS : which - 1, zs = mw_shardio_sharded(m, za);
    const int zrep = m->cfg.dp && m->cfg.zero >= 1 && m->comm && m->comm->size > 1 ? m->comm->rank : 0;
    if (!zs && zrep != 0) return MW_OK; /* every replica holds the array: replica 0's group reads its own */
    if (!zs && whole) /* the same on every rank: rank 0's, read where it lives (memory or the disk tier) */
        return R == 0 ? local_read(m, i, which, g0, n, out) : MW_OK;
    if (zs && whole && R != 0) return MW_OK; /* (the same on every tensor rank: rank 0's replicas gather it) */
    const size_t l0 = whole ? g0 : lo[R], ln = whole ? n : cnt[R];
    float *mine = NULL; /* this rank's elements of the part (a checkpoint's, not a step's) */
    if (zrep == 0 && !(mine = malloc((ln ? ln : 1) * sizeof(float))))
        return mw_fail(MW_ERR_NOMEM, "out of memory gathering %s for a checkpoint", t->name);
    mw_status st;
    if (zs) { /* from the replicas' shards, each read where it lives (shardio's state views) */
        st = coded ? gather_codes(m, za, t->offset + l0, ln, mine) : mw_shardio_gather(m, za, (uint64_t)(t->offset + l0) * 4, ln * 4, mine);
        if (zrep != 0) return st; /* (mine is NULL there) */
    } else {
        st = local_read(m, i, which, l0, ln, mine);
    }
    if (whole) { /* R == 0 here */
        if (st == MW_OK) memcpy(out, mine, n * sizeof(float));
        free(mine);
        return st;
    }
    /* a failed read still joins the exchange (the others wait in it); its status comes out after */
    if (R == 0) {
        for (int j = 1; j < T; j++) rc[j] = cnt[j], rd[j] = off[j];
        memcpy(scratch + off[0], mine, cnt[0] * sizeof(float));
    } else {
        sc[0] = cnt[R], sd[0] = 0;
    }
    const mw_status x = cm->alltoallv(cm, mine, sc, sd, R == 0 ? scratch : NULL, rc, rd);
    free(mine);
    MW_TRY(x);
    MW_TRY(st);
    if (R != 0) return MW_OK;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t e = 0; e < n; e++) {
        size_t l = 0;
        int j = 0;
        while (j < T && !mw_tp_local_index(t, T, j, g0 + e, &l)) j++;
        out[e] = j < T ? scratch[off[j] + (l - lo[j])] : 0.0f;
    }
    return MW_OK;
}

void mw_tp_take_part(const mw_model *m, int i, const float *part, size_t g0, size_t n, float *dst) {
    const mw_tensor *t = &m->tensors[i];
    const int T = m->cfg.tp > 1 ? m->cfg.tp : 1, r = mw_tp_rank(m);
    if (g0 == 0 && T > 1 && t->split != MW_TS_WHOLE) memset(dst, 0, t->numel * sizeof(float)); /* the padding rows */
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t e = 0; e < n; e++) {
        size_t l;
        if (mw_tp_local_index(t, T, r, g0 + e, &l)) dst[l] = part[e];
    }
}

void mw_tp_xent(mw_model *m, float *z, float *losses, const int32_t *tg, float dloss, int grad, int rows, int V) {
    int vlo, vhi;
    mw_tp_vocab_range(m, V, &vlo, &vhi);
    const int Vl = vhi - vlo, nv = V - vlo < Vl ? (V - vlo > 0 ? V - vlo : 0) : Vl;
    float *mx = m->tpbuf + (size_t)m->cfg.tp * m->tpq; /* the statistics' room: maxima, then (sum, target) pairs */
    double *sd = (double *)(mx + 2 * MW_LOSS_ROWS);
    mw_vocab_xent_max(z, mx, rows, Vl, nv);
    mw_tp_allreduce_max(m, mx, (size_t)rows);
    mw_vocab_xent_sums(z, mx, tg, sd, rows, Vl, nv, vlo, grad);
    mw_tp_allreduce_f64(m, sd, 2 * (size_t)rows);
    mw_vocab_xent_finish(z, losses, mx, sd, tg, dloss, grad, rows, Vl, nv, vlo);
}

/* ---- model.h's access for checkpoints ---------------------------------------------------------- */

int mw_model_tp(const mw_model *m) { return m->cfg.tp > 1 ? m->cfg.tp : 1; }
mw_comm *mw_model_tp_comm(const mw_model *m) { return m->cfg.tp > 1 ? m->tpc : NULL; }

void mw_model_tensor_whole(const mw_model *m, int i, int *ndim, int dims[2], size_t *numel) {
    const mw_tensor *t = &m->tensors[i];
    *ndim = t->ndim;
    dims[0] = t->gdims[0], dims[1] = t->gdims[1];
    *numel = whole_numel(t);
}

int mw_model_tp_local(const mw_model *m, int i, size_t whole, size_t *local) {
    return mw_tp_local_index(&m->tensors[i], m->cfg.tp > 1 ? m->cfg.tp : 1, mw_tp_rank(m), whole, local);
}
int mw_model_tp_part_end(const mw_model *m, int i, int row) { return mw_tp_part_end(&m->tensors[i], row, m->tpq); }
mw_status mw_model_tp_gather_part(mw_model *m, int i, int which, int a, int b, float *out, float *scratch) {
    return mw_tp_gather_part(m, i, which, a, b, out, scratch);
}
void mw_model_tp_take_part(const mw_model *m, int i, const float *part, size_t g0, size_t n, float *dst) {
    mw_tp_take_part(m, i, part, g0, n, dst);
}
