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

/* --sp: the gradients of the tensors whose sums run over the sequence (the norms'), each rank's
 * over its rows, summed over the ranks in rank order once per step */
mw_status mw_tp_sp_settle(mw_model *m) {
    if (!m->cfg.sp || !m->tp_sp_dirty) return MW_OK;
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (!t->seqp || (t->layer >= 0 && mw_graph_grads_mem16(m))) continue; /* bf16: summed by mw_tp_sp_done */
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

/* Tensor i's gradient's sum of squares: in quanta, the quanta in order */
static double tensor_sumsq(mw_model *m, int i) {
    double *parts = (double *)m->opp[(size_t)m->opt_op * MW_MAXACC];
    const mw_tensor *t = &m->tensors[i];
    const float *g = mw_graph_grads_chunk(m, t->seg, t->offset, t->offset + t->numel); /* bf16: widened */
    const size_t n = t->numel, nb = (n + MW_NORM_QUANTUM - 1) / MW_NORM_QUANTUM;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const size_t j1 = (b + 1) * MW_NORM_QUANTUM < n ? (b + 1) * MW_NORM_QUANTUM : n;
        double s = 0.0;
        for (size_t j = b * MW_NORM_QUANTUM; j < j1; j++) s += (double)g[j] * g[j];
        parts[b] = s;
    }
    double s = 0.0;
    for (size_t b = 0; b < nb; b++) s += parts[b];
    return s;
}

/* A pipeline stage's part of the sums (--tp with --pp): every stage's tensors' sums, gathered over
 * the stages (a stage holds a run of the single-process table), added in the table's order as one
 * stage of the whole model adds them: the same bits as --tp alone. */
static mw_status stage_sums(mw_model *m, double *split, double *whole) {
    mw_comm *pc = m->pcomm;
    const int P = pc->size, S = pc->rank;
    size_t *cnt = calloc((size_t)P * 2, sizeof *cnt);
    uint64_t *nt = calloc((size_t)P, sizeof *nt);
    double *all = NULL;
    mw_status st = cnt && nt ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) {
        nt[S] = (uint64_t)m->ntensors;
        for (int j = 0; j < P; j++) cnt[j] = 1, cnt[P + j] = (size_t)j;
        st = pc->allgatherv(pc, nt, sizeof *nt, cnt, cnt + P);
    }
    size_t total = 0, mine = 0;
    for (int j = 0; j < P && st == MW_OK; j++) cnt[j] = 2 * (size_t)nt[j], cnt[P + j] = total, total += cnt[j];
    if (st == MW_OK) mine = cnt[P + S], all = calloc(total + 1, sizeof *all);
    if (st == MW_OK && !all) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->ntensors && st == MW_OK; i++) { /* (the split tensors' sum, the whole ones') per tensor */
        const double s = tensor_sumsq(m, i);
        all[mine + 2 * (size_t)i + (m->tensors[i].split == MW_TS_WHOLE)] = s;
    }
    if (st == MW_OK) st = pc->allgatherv(pc, all, sizeof *all, cnt, cnt + P);
    for (size_t k = 0; k < total && st == MW_OK; k += 2) /* + 0.0: the other kind's sum stays as it is */
        *split += all[k], *whole += all[k + 1];
    free(cnt), free(nt), free(all);
    return st;
}

mw_status mw_tp_grad_norm(mw_model *m, double *norm) {
    MW_TRY(mw_tp_sp_settle(m));
    double split = 0.0, whole = 0.0;
    if (m->cfg.pp > 1 && m->pcomm) {
        MW_TRY(stage_sums(m, &split, &whole));
    } else {
        for (int i = 0; i < m->ntensors; i++) { /* tensor by tensor */
            const double s = tensor_sumsq(m, i);
            if (m->tensors[i].split == MW_TS_WHOLE) whole += s;
            else split += s;
        }
    }
    double *x = (double *)(m->tpbuf + (size_t)m->cfg.tp * m->tpq); /* the statistics' room */
    x[0] = split;
    MW_TRY(allreduce(m, x, 1, OP_SUM64));
    *norm = sqrt(x[0] + whole);
    return MW_OK;
}

mw_status mw_tp_check(const mw_config *c) {
    if (c->tp <= 1) return MW_OK;
    if (c->dp && c->zero >= 2)
        return mw_fail(MW_ERR_ARG, "--tp with --zero %d: a tensor-parallel shard's gradient slots (stage 2) and parameter "
                       "gathers (stage 3) are not built yet; --zero 0 and 1 run", c->zero);
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

/* array which of tensor i on this rank (floats: the parameters, or an optimizer array of 32 bits) */
static float *local_array(const mw_model *m, int i, int which) {
    if (which == 0) return mw_graph_tensor(m, 0, i);
    void *a = which == 1 ? m->m : m->v;
    return a && m->opt.bits[which - 1] == 32 ? (float *)a + m->tensors[i].offset : NULL;
}

/* Local elements [lo, lo + n) of tensor i's optimizer array which (1 M, 2 V) of 8 or 4 bits, each
 * code as a float, into out */
static void local_codes(const mw_model *m, int i, int which, size_t lo, size_t n, float *out) {
    const int bits = m->opt.bits[which - 1];
    const unsigned char *a = which == 1 ? m->m : m->v;
    const size_t o = m->tensors[i].offset + lo;
    for (size_t e = 0; e < n; e++)
        out[e] = (float)(bits == 8 ? a[o + e] : (a[(o + e) >> 1] >> (((o + e) & 1) * 4)) & 15);
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

mw_status mw_tp_gather_part(mw_model *m, int i, int which, int a, int b, float *out, float *scratch) {
    const mw_tensor *t = &m->tensors[i];
    mw_comm *cm = m->tpc;
    const int coded = which > 0 && m->opt.bits[which - 1] != 32 && m->opt.bits[which - 1] != 0; /* 8 or 4 bits */
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
    float *zbuf = NULL; /* this rank's elements of the part, from its replicas */
    if (zs && (!whole || R == 0)) {
        const size_t l0 = whole ? g0 : lo[R], ln = whole ? n : cnt[R];
        if (coded) return mw_fail(MW_ERR_ARG, "--tp with --zero %d: a checkpoint of the optimizer's %d-bit state sharded "
                                  "over replicas is not built yet", m->cfg.zero, m->opt.bits[which - 1]);
        if (zrep == 0 && !(zbuf = malloc((ln ? ln : 1) * sizeof(float))))
            return mw_fail(MW_ERR_NOMEM, "out of memory gathering %s for a checkpoint", t->name);
        const mw_status zst = mw_shardio_gather(m, za, (uint64_t)(t->offset + l0) * 4, ln * 4, zbuf);
        if (zst != MW_OK || zrep != 0) {
            free(zbuf);
            return zst;
        }
        zbuf -= l0; /* indexed as the local array */
    } else if (zrep != 0) {
        return MW_OK;
    }
    const float *mine = zbuf ? zbuf : coded ? NULL : local_array(m, i, which);
    if (!mine && !coded) return mw_fail(MW_ERR_ARG, "internal: --tp: tensor %s's array %d is not in memory", t->name, which);
    if (whole) { /* the same on every rank: rank 0's */
        if (R == 0 && coded) local_codes(m, i, which, g0, n, out);
        else if (R == 0) memcpy(out, mine + g0, n * sizeof(float));
        if (zbuf) free(zbuf + g0);
        return MW_OK;
    }
    float *codes = NULL; /* 8 or 4 bits: this rank's codes of the part, as floats */
    if (coded) {
        if (!(codes = malloc((cnt[R] ? cnt[R] : 1) * sizeof(float))))
            return mw_fail(MW_ERR_NOMEM, "out of memory gathering %s's optimizer state", t->name);
        local_codes(m, i, which, lo[R], cnt[R], codes);
    }
    const float *src = coded ? codes : mine + lo[R];
    if (R == 0) {
        for (int j = 1; j < T; j++) rc[j] = cnt[j], rd[j] = off[j];
        memcpy(scratch + off[0], src, cnt[0] * sizeof(float));
    } else {
        sc[0] = cnt[R], sd[0] = 0;
    }
    const mw_status st = cm->alltoallv(cm, src, sc, sd, R == 0 ? scratch : NULL, rc, rd);
    free(codes);
    if (zbuf) free(zbuf + lo[R]);
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
