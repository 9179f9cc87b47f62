/* Data parallelism with ZeRO (Rajbhandari et al.) over the collectives of an mw_comm.
 *
 * A step of world W ranks and cfg.accum = A takes M = W x A micro-batches, dealt in the order one
 * process with --accum M draws them: micro-step k of rank r trains micro-batch k*W + r. Every rank
 * draws the windows of every micro-batch from the same loader stream, skipping the others' without
 * reading them, so the data and its order do not depend on W.
 *
 * The sum is memwall's, never MPI's. Each micro-batch's gradient is formed from zero; after each
 * micro-step, rank j receives every rank's gradient over its shard of the flat buffer (an
 * all-to-all in rounds of MW_ZERO_BUCKET floats per rank) and adds them in micro-batch order onto
 * the sum of the earlier micro-steps: G = ((g_0 + g_1) + g_2) + ... + g_(M-1), element by element.
 * That order is a function of M alone, so the gradient, the norm (partial sums over whole quanta
 * of MW_NORM_QUANTUM, which shards never split), the update and the losses are the same bits for
 * every W at the same W x A (and, with A = 1 per rank and W = 1, those of the plain run).
 *
 * Stage 0 then gathers the summed gradient to every rank, which steps the whole buffer. Stage 1
 * steps only its shard, whose optimizer state is all it holds, and gathers the parameters. Stage 2
 * never holds a micro-batch's whole gradient: each block's accumulates in one block-sized slot
 * during its backward and is exchanged when that ends (src/graph/transfer.c, mw_graph_grad_done);
 * the embeddings' and the head's, which backward touches first and last, after it; the sum lives
 * in m->zacc, the shard's alone. Stage 3 also keeps only its shard of the parameters (m->zparams);
 * src/graph/transfer.c gathers each block into a slot as the schedule visits it, the next one's
 * gather running while a block computes. The same additions in the same order: the same bits at every stage.
 * Checkpoints are written by every rank at once (src/train/checkpoint.c, mw_ckpt_save_ranks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/status.h"
#include "../graph/graph.h"
#include "../graph/model.h"
#include "../memory/offload.h"
#include "tp.h"

void mw_zero_shard(uint64_t n, int world, int r, uint64_t *lo, uint64_t *hi) {
    const uint64_t Q = MW_NORM_QUANTUM, nq = (n + Q - 1) / Q;
    const uint64_t a = nq * (uint64_t)r / (uint64_t)world, b = nq * (uint64_t)(r + 1) / (uint64_t)world;
    *lo = a * Q < n ? a * Q : n;
    *hi = b * Q < n ? b * Q : n;
}

mw_status mw_model_set_comm(mw_model *m, mw_comm *comm) {
    const mw_config *c = &m->cfg;
    if (c->tp > 1 && !c->dp) { /* tensor parallelism alone: comm is the tensor-parallel group (src/dist/tp.c) */
        if (!comm || comm->size != c->tp)
            return mw_fail(MW_ERR_ARG, "--tp %d: the model was planned for %d tensor-parallel ranks, the run has %d "
                                       "(start it with mpirun -np %d)", c->tp, c->tp, comm ? comm->size : 0, c->tp);
        if (c->tp > 64) return mw_fail(MW_ERR_ARG, "--tp %d: at most 64 tensor-parallel ranks", c->tp);
        m->comm = m->tpc = comm;
        for (int i = 0; i < m->opt.ntensors; i++) /* the optimizer's shards: this rank's of each whole tensor */
            if (m->opt.t[i].split) m->opt.t[i].rank = comm->rank;
        return MW_OK;
    }
    if (!c->dp) return mw_fail(MW_ERR_ARG, "the model was not planned for data parallelism (cfg.dp)");
    if (!comm || comm->size != c->world || comm->rank != c->rank)
        return mw_fail(MW_ERR_ARG, "the model was planned as rank %d of %d, the communicator is rank %d of %d",
                       c->rank, c->world, comm ? comm->rank : -1, comm ? comm->size : 0);
    m->comm = comm;
    return MW_OK;
}

mw_comm *mw_model_comm(const mw_model *m) { return m->comm; }

void mw_model_shard(const mw_model *m, size_t *lo, size_t *hi) {
    *lo = m->cfg.dp ? m->zlo : 0;
    *hi = m->cfg.dp ? m->zhi : m->nfloats;
}

const float *mw_model_shard_params(const mw_model *m) {
    return mw_graph_params_zero3(m) ? m->zparams : m->params + (m->cfg.dp ? m->zlo : 0);
}

size_t mw_model_tensor_offset(const mw_model *m, int i) { return m->tensors[i].offset; }

size_t mw_model_flat_floats(const mw_model *m) { return m->nfloats; }

/* The shards of every rank: lo[j], hi[j] (2 x world entries, malloc'd). */
static mw_status shards(const mw_model *m, size_t **out) {
    const int W = m->cfg.world;
    size_t *s = malloc(sizeof(size_t) * 2 * (size_t)W);
    if (!s) return mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int j = 0; j < W; j++) {
        uint64_t lo, hi;
        mw_zero_shard(m->nfloats, W, j, &lo, &hi);
        s[j] = (size_t)lo, s[W + j] = (size_t)hi;
    }
    *out = s;
    return MW_OK;
}

/* Rank j's piece of [a, b): counts and displacements (relative to a) into cnt[0..W), cnt[W..2W). */
static mw_status seg_pieces(mw_model *m, size_t a, size_t b, size_t **out) {
    const int W = m->cfg.world;
    size_t *sh = NULL;
    MW_TRY(shards(m, &sh));
    for (int j = 0; j < W; j++) {
        const size_t lo = sh[j] > a ? sh[j] : a, hi = sh[W + j] < b ? sh[W + j] : b;
        sh[j] = hi > lo ? hi - lo : 0;
        sh[W + j] = hi > lo ? lo - a : 0;
    }
    *out = sh;
    return MW_OK;
}

/* The exchange of elements [a, b) of the flat buffer (src[e - a], this rank's gradient of its
 * micro-batch, formed from zero): every rank's piece of this rank's shard comes in (rounds of at
 * most m->zrq floats per rank) and is added, in rank order, onto the shard's sum of the earlier
 * micro-steps (m->zacc; none when first), into dst[e - zlo]. */
static mw_status exchange_range(mw_model *m, const float *src, size_t a, size_t b, int first, float *dst) {
    mw_comm *cm = m->comm;
    const int W = cm->size, R = cm->rank;
    const size_t q = m->zrq;
    size_t *pc = NULL; /* rank j's piece of [a, b): pc[j] elements from a + pc[W + j] */
    MW_TRY(seg_pieces(m, a, b, &pc));
    size_t *cnt = malloc(sizeof(size_t) * 4 * (size_t)W);
    const float **part = malloc(sizeof(float *) * (size_t)W);
    if (!cnt || !part) {
        free(pc), free(cnt), free(part);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    size_t *sc = cnt, *sd = cnt + W, *rc = cnt + 2 * W, *rdp = cnt + 3 * W, most = 0;
    for (int j = 0; j < W; j++)
        if (pc[j] > most) most = pc[j];
    const size_t myn = pc[R], e_lo = a + pc[W + R] - m->zlo; /* this rank's piece, in its shard */
    const size_t rounds = q ? (most + q - 1) / q : 0;
    mw_status st = MW_OK;
    const float *prev = m->zacc;
    float *rv = m->zrecv;
    for (size_t t = 0; t < rounds && st == MW_OK; t++) {
        const size_t o = t * q, mine = myn > o ? (myn - o < q ? myn - o : q) : 0;
        for (int j = 0; j < W; j++) { /* this rank's own piece is read where it is */
            const size_t len = pc[j] > o ? (pc[j] - o < q ? pc[j] - o : q) : 0;
            const int self = j == R;
            sc[j] = self ? 0 : len, sd[j] = len ? pc[W + j] + o : 0;
            rc[j] = self ? 0 : mine, rdp[j] = (size_t)j * q;
            part[j] = self ? src + (pc[W + R] + o) : rv + (size_t)j * q;
        }
        if (W > 1) st = cm->alltoallv(cm, src, sc, sd, rv, rc, rdp);
        if (st != MW_OK || !mine) continue;
        const size_t e0 = e_lo + o;
#pragma omp parallel for schedule(static)
        for (size_t e = 0; e < mine; e++) {
            float x = first ? part[0][e] : prev[e0 + e] + part[0][e];
            for (int j = 1; j < W; j++) x = x + part[j][e];
            dst[e0 + e] = x;
        }
    }
    free(part);
    free(cnt);
    free(pc);
    return st;
}

/* Micro-step k's exchange of the whole buffer (--zero 0 and 1): the sum goes into the shard's
 * part of m->grads after the last micro-step (last), else into m->zacc; the rest of m->grads is
 * left zero for the next micro-batch. */
static mw_status gather_flat(mw_model *m, float *buf);
static mw_status exchange(mw_model *m, int k, int last) {
    float *g = m->grads;
    MW_TRY(exchange_range(m, g, 0, m->nfloats, k == 0, last ? g + m->zlo : m->zacc));
    const size_t lo = last ? m->zlo : m->nfloats, hi = last ? m->zhi : m->nfloats, n = m->nfloats;
#pragma omp parallel for schedule(static)
    for (size_t e = 0; e < n; e++) /* all but the sum */
        if (e < lo || e >= hi) g[e] = 0.0f;
    return MW_OK;
}

mw_status mw_zero_exchange_step(mw_model *m, int k, int last) { return exchange(m, k, last); }
mw_status mw_zero_gather_grads(mw_model *m) { return gather_flat(m, m->grads); }

mw_status mw_zero_exchange(mw_model *m, const float *src, size_t a, size_t b) {
    return exchange_range(m, src, a, b, m->zk == 0, m->zacc);
}

/* Every rank's part [lo_j, hi_j) of buf (floats) to every rank. */
static mw_status gather_flat(mw_model *m, float *buf) {
    mw_comm *cm = m->comm;
    const int W = cm->size;
    size_t *sh = NULL;
    MW_TRY(shards(m, &sh));
    for (int j = 0; j < W; j++) sh[W + j] -= sh[j]; /* counts */
    mw_status st = cm->allgatherv(cm, buf, sizeof(float), sh + W, sh);
    free(sh);
    return st;
}

/* The gradient norm of the summed gradient, whose shards the ranks hold: each quantum's partial sum
 * by its owner, the same additions as mw_graph_grad_norm's, then every rank sums them in order. */
/* This rank's summed gradient over its shard [zlo, zhi): in m->grads (stages 0, 1) or m->zacc. */
static float *mw_zero_grads(const mw_model *m) { return m->cfg.zero >= 2 ? m->zacc : m->grads + m->zlo; }

static mw_status shard_norm(mw_model *m, double *norm) {
    mw_comm *cm = m->comm;
    const int W = cm->size;
    const size_t Q = MW_NORM_QUANTUM, nb = (m->nfloats + Q - 1) / Q;
    double *parts = (double *)m->opp[(size_t)m->opt_op * MW_MAXACC];
    size_t *sh = NULL;
    MW_TRY(shards(m, &sh));
    for (int j = 0; j < W; j++) { /* in quanta */
        const size_t lo = sh[j] / Q, hi = (sh[W + j] + Q - 1) / Q;
        sh[j] = lo, sh[W + j] = hi - lo;
    }
    const size_t b0 = m->zlo / Q, b1 = (m->zhi + Q - 1) / Q;
    const float *g = mw_zero_grads(m) - m->zlo; /* indexed by flat element */
#pragma omp parallel for schedule(static)
    for (size_t b = b0; b < b1; b++) {
        const size_t j1 = (b + 1) * Q < m->nfloats ? (b + 1) * Q : m->nfloats;
        double s = 0.0;
        for (size_t j = b * Q; j < j1; j++) s += (double)g[j] * g[j];
        parts[b] = s;
    }
    mw_status st = cm->allgatherv(cm, parts, sizeof(double), sh + W, sh);
    free(sh);
    MW_TRY(st);
    double s = 0.0;
    for (size_t b = 0; b < nb; b++) s += parts[b];
    *norm = sqrt(s);
    return MW_OK;
}

mw_status mw_zero_gather_seg(mw_model *m, float *dst, size_t a, size_t b) {
    const int W = m->cfg.world, R = m->cfg.rank;
    size_t *pc = NULL;
    MW_TRY(seg_pieces(m, a, b, &pc));
    if (pc[R]) memcpy(dst + pc[W + R], m->zparams + (a + pc[W + R] - m->zlo), pc[R] * sizeof(float));
    mw_status st = W > 1 ? m->comm->allgatherv(m->comm, dst, sizeof(float), pc, pc + W) : MW_OK;
    free(pc);
    return st;
}

mw_status mw_zero_gather_start(mw_model *m, float *dst, size_t a, size_t b, void **req) {
    const int W = m->cfg.world, R = m->cfg.rank;
    mw_comm *cm = m->comm;
    *req = NULL;
    if (W == 1 || !cm->iallgatherv) return mw_zero_gather_seg(m, dst, a, b);
    size_t *pc = NULL;
    MW_TRY(seg_pieces(m, a, b, &pc));
    if (pc[R]) memcpy(dst + pc[W + R], m->zparams + (a + pc[W + R] - m->zlo), pc[R] * sizeof(float));
    mw_status st = cm->iallgatherv(cm, dst, sizeof(float), pc, pc + W, req);
    free(pc);
    return st;
}

/* A chunk [lo, hi) of the disk tier's stream: its moments as read, the shard's parameters and
 * gradients in memory (chunks outside the shard hold nothing of this rank's). */
typedef struct zopt {
    mw_model *m;
    const mw_opt_hp *hp;
    int pass;
} zopt;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void zopt_chunk(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    zopt *a = ctx;
    mw_model *m = a->m;
    if (seg != 1 || lo >= hi) return;
    const double t0 = now_s(); /* the model's compute clock (mw_model_times) */
    float *p = (m->cfg.zero >= 3 ? m->zparams : m->params + m->zlo) + (lo - m->zlo);
    float *g = mw_zero_grads(m) + (lo - m->zlo);
    mw_opt_chunk(&m->opt, a->hp, a->pass, lo, hi, p, g, arr[MW_ARR_M], arr[MW_ARR_V], m->ostate, m->oscratch);
    m->compute_s += now_s() - t0;
}

/* Pass k of the optimizer over this rank's shard: in memory, or streamed through the disk tier. */
static mw_status shard_pass(mw_model *m, const mw_opt_hp *hp, int k) {
    const mw_config *c = &m->cfg;
    if (m->off) { /* this rank's shard of the moments streams through the disk tier */
        zopt a = {m, hp, k};
        const unsigned rd = m->opt.rd[k] & MW_ARR_MV, wr = m->opt.wr[k] & MW_ARR_MV;
        return mw_offload_stream(m->off, rd, wr, zopt_chunk, &a);
    }
    const int b0 = m->opt.bits[0], b1 = m->opt.bits[1];
    const double t0 = now_s();
    mw_opt_chunk(&m->opt, hp, k, m->zlo, m->zhi, c->zero >= 3 ? m->zparams : m->params + m->zlo, mw_zero_grads(m),
                 b0 ? m->m : NULL, b1 ? m->v : NULL, m->ostate, m->oscratch);
    m->compute_s += now_s() - t0;
    return MW_OK;
}

/* MW_OPT_JOIN_MAX: the first n floats of buf, non-negative maxima on every rank, become their
 * maximum over the ranks on every rank (exact in any order). Piece j of buf is maximised by rank j
 * from every rank's copy (an all-to-all in rounds of m->zrq floats per rank, through m->zrecv),
 * then the pieces are gathered. */
static mw_status join_max(mw_model *m, float *buf, size_t n) {
    mw_comm *cm = m->comm;
    const int W = cm->size, R = cm->rank;
    if (W == 1 || !n) return MW_OK;
    size_t *cnt = malloc(sizeof(size_t) * 6 * (size_t)W);
    if (!cnt) return mw_fail(MW_ERR_NOMEM, "out of memory");
    size_t *plo = cnt, *plen = cnt + W, *sc = cnt + 2 * W, *sd = cnt + 3 * W, *rc = cnt + 4 * W, *rd = cnt + 5 * W;
    size_t most = 0;
    for (int j = 0; j < W; j++) {
        plo[j] = n * (size_t)j / (size_t)W, plen[j] = n * (size_t)(j + 1) / (size_t)W - plo[j];
        if (plen[j] > most) most = plen[j];
    }
    const size_t q = m->zrq, rounds = (most + q - 1) / q;
    mw_status st = MW_OK;
    for (size_t t = 0; t < rounds && st == MW_OK; t++) {
        const size_t o = t * q, mine = plen[R] > o ? (plen[R] - o < q ? plen[R] - o : q) : 0;
        for (int j = 0; j < W; j++) {
            const size_t len = plen[j] > o ? (plen[j] - o < q ? plen[j] - o : q) : 0;
            sc[j] = j == R ? 0 : len, sd[j] = len ? plo[j] + o : 0;
            rc[j] = j == R ? 0 : mine, rd[j] = (size_t)j * q;
        }
        st = cm->alltoallv(cm, buf, sc, sd, m->zrecv, rc, rd);
        if (st != MW_OK) break;
        float *x = buf + plo[R] + o;
        for (int j = 0; j < W; j++) {
            if (j == R) continue;
            const float *y = m->zrecv + (size_t)j * q;
            for (size_t e = 0; e < mine; e++)
                if (y[e] > x[e]) x[e] = y[e];
        }
    }
    if (st == MW_OK) st = cm->allgatherv(cm, buf, sizeof(float), plen, plo);
    free(cnt);
    return st;
}

/* MW_OPT_JOIN_CHAIN: pass k's sums run through the elements in order, so the ranks take it in
 * turn, each continuing from the scratch and the small state the rank before it left (a point-to-
 * point send through the all-to-all), exactly as one process continues from chunk to chunk; the
 * last rank's, which has seen every element, then goes to every rank. The pass's time is one
 * process's (the ranks wait for each other); it only reads the gradient once (Adafactor's and
 * CAME's statistics), the update itself runs on every rank at once. */
static mw_status chain_pass(mw_model *m, const mw_opt_hp *hp, int k) {
    mw_comm *cm = m->comm;
    const int W = cm->size, R = cm->rank;
    const size_t nsc = (size_t)(m->opt.scratch_bytes / sizeof(float)), nst = (size_t)(m->opt.state_bytes / sizeof(float));
    size_t *cnt = calloc(4 * (size_t)W, sizeof(size_t));
    if (!cnt) return mw_fail(MW_ERR_NOMEM, "out of memory");
    size_t *sc = cnt, *z = cnt + W, *rc = cnt + 2 * W, *gd = cnt + 3 * W; /* z: zeros */
    mw_status st = MW_OK;
    for (int j = 0; j < W && st == MW_OK; j++) {
        if (j == R) st = shard_pass(m, hp, k);
        if (st != MW_OK || j == W - 1) continue;
        float *bufs[2] = {(float *)m->oscratch, (float *)m->ostate};
        const size_t lens[2] = {nsc, nst};
        for (int b = 0; b < 2 && st == MW_OK; b++) { /* rank j's to rank j + 1 */
            if (!lens[b]) continue;
            sc[j + 1] = R == j ? lens[b] : 0;
            rc[j] = R == j + 1 ? lens[b] : 0;
            st = cm->alltoallv(cm, bufs[b], sc, z, bufs[b], rc, z);
            sc[j + 1] = rc[j] = 0;
        }
    }
    /* the last rank's to every rank */
    float *bufs[2] = {(float *)m->oscratch, (float *)m->ostate};
    const size_t lens[2] = {nsc, nst};
    for (int b = 0; b < 2 && st == MW_OK && W > 1; b++) {
        if (!lens[b]) continue;
        gd[W - 1] = lens[b];
        st = cm->allgatherv(cm, bufs[b], sizeof(float), gd, z);
        gd[W - 1] = 0;
    }
    free(cnt);
    return st;
}

mw_status mw_zero_opt_step(mw_model *m, double lr, double grad_norm, int t) {
    const mw_config *c = &m->cfg;
    if (!m->comm) return mw_fail(MW_ERR_ARG, "a --zero %d model needs its ranks (mw_model_set_comm)", c->zero);
    float coef = 1.0f;
    if (c->grad_clip > 0) { /* as mw_model_adamw_step */
        float cc = (float)c->grad_clip / (float)(grad_norm + 1e-6);
        coef = cc < 1.0f ? cc : 1.0f;
    }
    mw_opt_hp hp;
    mw_opt_hp_of(&hp, c, lr, coef, t);
    mw_opt_begin(&m->opt, &hp, m->ostate, m->oscratch);
    /* shards are whole quanta of MW_NORM_QUANTUM: they cut no 8-bit block (tensors start on one) and
     * no byte of 4-bit codes; what a shard's edge does cut (a 4-bit block, a row, a piece of a
     * sum) is joined below, so every rank ends each pass with one process's scratch and state */
    const int split = mw_graph_opt_split(m);
    for (int k = 0; k < m->opt.npasses; k++) {
        if (!mw_opt_pass_needed(&m->opt, k, split)) continue;
        if (m->opt.join[k] == MW_OPT_JOIN_CHAIN) {
            MW_TRY(chain_pass(m, &hp, k));
        } else {
            MW_TRY(shard_pass(m, &hp, k));
            if (m->opt.join[k] == MW_OPT_JOIN_MAX) MW_TRY(join_max(m, (float *)m->oscratch, m->opt.max_floats));
        }
        /* --tp: every replica now holds its tensor rank's whole statistics (the replicas' maxima, or the
         * chain's sums over the tensor rank's elements in order, as --tp alone's one chunk takes them);
         * then the tensor ranks join theirs, as --tp alone does (maxima, sums in rank order) */
        if (mw_tp_on(m)) MW_TRY(mw_tp_opt_join(m, k));
        mw_opt_end_pass(&m->opt, &hp, k, m->ostate, m->oscratch);
    }
    if (c->zero < 3) return gather_flat(m, m->params);
    /* the blocks are gathered as the next step visits them (its first micro-batch forgets the slots);
     * the resident segments, which every rank holds, now */
    const int L = c->n_layer;
    MW_TRY(mw_zero_gather_seg(m, m->pres[0], 0, m->seg_lo[1]));
    return mw_zero_gather_seg(m, m->pres[1], m->seg_lo[L + 1], m->nfloats);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

mw_status mw_zero_train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r) {
    const mw_config *c = &m->cfg;
    mw_comm *cm = m->comm;
    if (!cm) return mw_fail(MW_ERR_ARG, "a data-parallel model needs its ranks (mw_model_set_comm)");
    const int W = cm->size, R = cm->rank, A = c->accum, M = W * A, N = c->batch * c->seq;
    int32_t *in = mw_model_staging(m), *tg = in + N, *win = tg + N;
    float *loss = malloc(sizeof(float) * (size_t)M);
    size_t *lc = malloc(sizeof(size_t) * 2 * (size_t)W);
    if (!loss || !lc) {
        free(loss);
        free(lc);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    double t0 = now_ms();
    mw_status st = MW_OK;
    mw_model_set_step(m, s);
    for (int k = 0; k < A && st == MW_OK; k++) {
        for (int j = 0; j < W && st == MW_OK; j++) /* every rank's windows drawn, its own read */
            st = j == R ? next(ctx, in, tg, win) : next(ctx, NULL, NULL, NULL);
        m->zk = k;
        if (st == MW_OK) st = mw_model_forward_backward(m, in, tg, 1.0f / (float)M, &loss[R * A + k]);
        if (c->zero >= 2) { /* the blocks' went as each backward ended; now the resident segments' */
            const int L = c->n_layer;
            if (st == MW_OK) st = mw_zero_exchange(m, m->gres[0], 0, m->seg_lo[1]);
            if (st == MW_OK) st = mw_zero_exchange(m, m->gres[1], m->seg_lo[L + 1], m->nfloats);
            mw_model_zero_grad(m);
        } else if (st == MW_OK) {
            st = exchange(m, k, k == A - 1);
        }
    }
    for (int j = 0; j < W; j++) lc[j] = (size_t)A, lc[W + j] = (size_t)j * A;
    if (st == MW_OK) st = cm->allgatherv(cm, loss, sizeof(float), lc, lc + W);
    memset(r, 0, sizeof *r);
    if (st == MW_OK) {
        double sum = 0.0; /* in micro-batch order, as one process sums them */
        for (int k = 0; k < A; k++)
            for (int j = 0; j < W; j++) sum += loss[j * A + k];
        r->step = s + 1;
        r->loss = (float)(sum / M);
        r->lr = mw_lr_at(c, s);
        if (c->zero == 0 || (c->tp > 1 && c->zero == 1)) { /* every rank the whole summed gradient (--tp: for its per-tensor norm) */
            st = gather_flat(m, m->grads);
            if (st == MW_OK) st = mw_graph_grad_norm(m, &r->grad_norm);
        } else if (c->tp > 1) { /* --zero 2, 3: each tensor's sums over the shards (src/dist/tp.c) */
            st = mw_graph_grad_norm(m, &r->grad_norm);
        } else {
            st = shard_norm(m, &r->grad_norm);
        }
    }
    if (st == MW_OK) st = mw_model_adamw_step(m, r->lr, r->grad_norm, s + 1);
    if (st == MW_OK && c->zero == 1 && c->tp > 1) /* the sharded update zeroes its shard's gradient; the gathered rest too */
        memset(m->grads, 0, m->nfloats * sizeof(float));
    free(loss);
    free(lc);
    MW_TRY(st);
    r->ms = now_ms() - t0;
    r->tokens_per_s = (double)N * M / (r->ms / 1e3);
    return MW_OK;
}

/* ---- the optimizer state of a sharded model, for checkpoints ------------------------------------ */

mw_status mw_zero_state_window(const mw_model *m, int which, size_t off, size_t limit, int write, void **p, size_t *n) {
    const int bits = m->opt.bits[which];
    if (bits != 32 && bits != 8 && bits != 4)
        return mw_fail(MW_ERR_ARG, "internal: a sharded optimizer array of %d bits", bits);
    void *mine = which ? m->v : m->m;
    if (off >= m->zlo && off < m->zhi) {
        const size_t end = limit < m->zhi ? limit : m->zhi;
        if (m->off) { /* on the disk tier, through its staging */
            const int a = which ? MW_ARR_V : MW_ARR_M;
            if (write) return mw_offload_map(m->off, a, off, end, p, n);
            const void *q = NULL;
            MW_TRY(mw_offload_view(m->off, a, off, end, &q, n));
            *p = (void *)q;
            return MW_OK;
        }
        *p = mw_opt_elem(mine, bits, off - m->zlo); /* zlo is even: whole bytes of 4-bit codes */
        *n = end - off;
        return MW_OK;
    }
    size_t end = limit;
    if (off < m->zlo && m->zlo < end) end = m->zlo;
    const size_t cap = (size_t)m->cfg.world * m->zrq;
    if (end - off > cap) end = off + cap;
    if (!write) /* checkpoints write each shard from its rank (mw_ckpt_save_ranks) */
        return mw_fail(MW_ERR_ARG, "internal: rank %d reads elements %zu.. of the optimizer state, outside its shard",
                       m->cfg.rank, off);
    *p = m->zrecv; /* another rank's elements, read from a checkpoint by every rank: dropped */
    *n = end - off;
    return MW_OK;
}
