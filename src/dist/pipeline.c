/* Pipeline parallelism that runs (issue 33): a stage (cfg.pp > 1) executes the 1F1B schedule that
 * src/graph/layout.c plans for it, the plan estimate prints for that rank.
 *
 * Each op runs on its bound pointers as in the plain run; the schedule's transfers run here: a
 * receive (recv, recv grad) is a blocking receive into the value the walk placed for it; a send
 * copies its value into the stage's planned send buffer (pp_send, pp_send_grad: the walk frees a
 * value at its last read, the send) and leaves from there while the stage computes on, waited for
 * before the next send the same way. Every stage draws each micro-batch from the same loader stream
 * in order (the first stage reads the inputs at its embedding, the last the targets at its receive,
 * the others skip them), so the data does not depend on the layout.
 *
 * The math is one process's with --accum M: a parameter belongs to one stage, whose backwards of
 * micro-batches 0 .. M-1 run in that order (1F1B runs a stage's backwards in micro-batch order)
 * and accumulate into its gradient as the plain run's do. The gradient norm's partial sums are
 * the plain run's quanta of MW_NORM_QUANTUM floats over the single-process flat buffer, which a
 * stage holds a run of: a quantum cut by a stage boundary is continued by the next stage from the
 * partial sum the previous one sends it, and every stage then adds the quanta in order. The loss
 * (the last stage's) reaches every stage. So losses, norms and weights are the plain run's bits.
 *
 * A tied embedding's gradient is formed on the first stage in one process's order
 * (src/dist/pipetied.c). With D data-parallel replicas (--zero 0, 1) each micro-batch's gradient is
 * exchanged among a stage's replicas when its last backward op there ends (src/dist/zero.c's
 * ordered sum); under --zero 2 and 3 each block's as its backward ends, into the shards, and the
 * norm is taken over the shards (src/dist/pipezero.c). The disk tier (--offload) and --zero 3's
 * gathers run at the schedule's visits as in mw_model_forward_backward. A tied embedding with --tp:
 * each tensor rank's shard of the table, the same way (src/dist/pipetied.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/crc32c.h"
#include "../core/status.h"
#include "../graph/actstore.h"
#include "../graph/graph_impl.h"
#include "../graph/model.h"
#include "tp.h"

enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_LOSS = 3, TAG_NORM = 4, TAG_HEAD = 5 };

mw_status mw_pipe_check(const mw_config *c) {
    if (c->inference) return mw_fail(MW_ERR_ARG, "--pp: a pipeline stage is planned for training only");
    return MW_OK;
}

mw_status mw_model_set_pipe(mw_model *m, mw_comm *pcomm) {
    const mw_config *c = &m->cfg;
    if (c->pp <= 1) return mw_fail(MW_ERR_ARG, "the model was not planned as a pipeline stage (cfg.pp)");
    if (!pcomm || pcomm->size != c->pp || pcomm->rank != c->pp_stage || !pcomm->send || !pcomm->recv || !pcomm->isend)
        return mw_fail(MW_ERR_ARG, "the model was planned as stage %d of %d, the communicator is rank %d of %d (or gives "
                       "no point-to-point)", c->pp_stage, c->pp, pcomm ? pcomm->rank : -1, pcomm ? pcomm->size : 0);
    m->pcomm = pcomm;
    return MW_OK;
}

static mw_status check_ids(const mw_model *m, const int32_t *t, const char *what) {
    const int V = m->cfg.vocab, N = m->cfg.batch * m->cfg.seq;
    for (int i = 0; i < N; i++)
        if (t[i] < 0 || t[i] >= V)
            return mw_fail(MW_ERR_ARG, "%s token id %d at position %d is outside the vocabulary (%d)", what, t[i], i, V);
    return MW_OK;
}

static double now_ms(void);

static mw_status send_wait(mw_model *m, int k) {
    if (!m->preq[k]) return MW_OK;
    void *r = m->preq[k];
    m->preq[k] = NULL;
    const double t0 = now_ms();
    mw_status s = m->pcomm->wait(m->pcomm, r);
    m->pwait_ms += now_ms() - t0;
    return s;
}

/* A receive, its wait counted (the stage idle: the bubble, and the transfer) */
static mw_status recv_timed(mw_model *m, void *buf, size_t bytes, int peer, int tag) {
    const double t0 = now_ms();
    mw_status s = m->pcomm->recv(m->pcomm, buf, bytes, peer, tag);
    m->pwait_ms += now_ms() - t0;
    return s;
}

/* Where a micro-batch's tokens come from: the loader (training) or one batch given (evaluation). */
typedef struct pipe_src {
    mw_batch_fn next;
    void *ctx;
    const int32_t *in, *tg;
} pipe_src;

/* The inputs and targets of the next micro-batch into in and tg (either NULL: not needed here).
 * With D data-parallel replicas, micro-step k of replica d trains micro-batch k D + d of the
 * loader's stream (src/dist/zero.c's dealing): the others' windows are skipped. */
static mw_status take(mw_model *m, const pipe_src *src, void *in, void *tg) {
    const size_t N = (size_t)m->cfg.batch * m->cfg.seq;
    const int D = m->cfg.dp ? m->cfg.world : 1, d = m->cfg.dp ? m->cfg.rank : 0;
    if (src->next)
        for (int r = 0; r < d; r++) MW_TRY(src->next(src->ctx, NULL, NULL, NULL));
    if (!src->next) {
        if (in) memcpy(in, src->in, N * sizeof(int32_t));
        if (tg) memcpy(tg, src->tg, N * sizeof(int32_t));
    } else {
        int32_t *si = m->staging, *st = si + N, *win = st + N;
        MW_TRY(src->next(src->ctx, si, st, win));
        if (in) memcpy(in, si, N * sizeof(int32_t));
        if (tg) memcpy(tg, st, N * sizeof(int32_t));
        for (int r = d + 1; r < D; r++) MW_TRY(src->next(src->ctx, NULL, NULL, NULL));
    }
    if (in) MW_TRY(check_ids(m, in, "input"));
    if (tg) MW_TRY(check_ids(m, tg, "target"));
    return MW_OK;
}

/* Op i of the stage's schedule: a transfer, or the model's op on its bound pointers. */
static mw_status run_op(mw_model *m, int i, int train, float grad_scale, const pipe_src *src, double *loss, float *lmb,
                        uint64_t ab, uint64_t gb) {
    const mw_model_def *a = m->arch;
    const mw_config *c = &m->cfg;
    const int K = a->nkinds, s = c->pp_stage, N = c->batch * c->seq, gdisk = mw_graph_grads_slotted(m);
    mw_comm *pc = m->pcomm;
    {
        const int k = m->ops[i].kind, l = m->ops[i].layer;
        void **P = m->opp + (size_t)i * MW_MAXACC;
        /* the disk tier's parameter visits, as mw_model_forward_backward runs them (a visit may
         * begin at a block's receive: the walk counts the stage's transfers as the block's ops) */
        if ((m->offload == MW_OFFLOAD_ALL || mw_graph_params_zero3(m)) && m->op_pv[i] >= 0)
            MW_TRY(mw_graph_param_visit(m, m->op_pv[i])); /* --zero 3: the block gathered from the replicas */
        if (k == K + MW_PK_RECV) {
            MW_TRY(recv_timed(m, P[0], ab, s - 1, TAG_ACT));
            if (s == c->pp - 1) MW_TRY(take(m, src, NULL, P[1])); /* the last stage's targets */
        } else if (k == K + MW_PK_SEND || k == K + MW_PK_SEND_GRAD) {
            const int g = k == K + MW_PK_SEND_GRAD;
            MW_TRY(send_wait(m, g));
            memcpy(m->psend[g], P[0], g ? gb : ab);
            MW_TRY(pc->isend(pc, m->psend[g], g ? gb : ab, g ? s - 1 : s + 1, g ? TAG_GRAD : TAG_ACT, &m->preq[g]));
        } else if (k == K + MW_PK_RECV_GRAD) {
            MW_TRY(recv_timed(m, P[0], gb, s + 1, TAG_GRAD));
        } else if (k == K + MW_PK_SEND_HEAD) { /* a tied embedding (src/dist/pipetied.c) */
            const uint64_t hb = mw_graph_pipe_head_bytes(m);
            MW_TRY(send_wait(m, 2));
            memcpy(m->psend[2], P[0], hb);
            MW_TRY(pc->isend(pc, m->psend[2], hb, 0, TAG_HEAD, &m->preq[2]));
        } else if (k == K + MW_PK_RECV_HEAD) {
            MW_TRY(recv_timed(m, P[0], mw_graph_pipe_head_bytes(m), c->pp - 1, TAG_HEAD));
        } else if (k == K + MW_PK_TIED_GRAD) {
            mw_pipe_tied_grad(m, i, grad_scale / N);
        } else {
            if (k == a->k_embed) MW_TRY(take(m, src, P[0], P[1]));
            /* the micro-batch whose backward this is: --sp sums a block's norms' fp32 gradients on the
             * disk tier over the tensor ranks after its last (mw_graph_grad_done), as the step's norm
             * sums the in-memory ones (1F1B runs a stage's backwards in micro-batch order) */
            if (gdisk) m->tp_mb = m->ops[i].mb;
            if (gdisk && m->op_gb[i]) {
                m->zk = m->ops[i].mb; /* --zero 2: micro-batch 0's exchanges start the sum */
                /* one process settles the writes between micro-batches; a stage of fewer than 3
                 * blocks could read block l's gradients back while the previous micro-batch's
                 * write of them is in flight in another slot */
                for (int k2 = 0; k2 < 3; k2++)
                    if (m->gslot_seg[k2] == 1 + l && m->gslot_id[k2] >= 0) MW_TRY(mw_graph_grads_settle(m));
                MW_TRY(mw_graph_grad_bind(m, l));
            }
            if (train && m->act) MW_TRY(mw_graph_act_before(m, i));
            double ls = 0.0;
            a->run_op(m, i, train, grad_scale / N, &ls);
            if (train && m->act) MW_TRY(mw_graph_act_after(m, i));
            if (m->zpre) mw_graph_zero3_poll(m);
            if (k == a->k_head || k == a->k_logits) {
                *loss += (float)(ls / N);
                if (lmb) lmb[m->ops[i].mb] = (float)(ls / N);
            }
            if (gdisk && m->op_ge[i]) MW_TRY(mw_graph_grad_done(m, l));
        }
    }
    return MW_OK;
}

/* Micro-batch k of M's gradient, its last backward op on the stage done, exchanged among the
 * stage's replicas: the whole flat buffer (--zero 0, 1), or (--zero 2: the blocks' went as each
 * block's backward ended, into the shards) the resident segments before and after the blocks, as
 * src/dist/zero.c's step does after each micro-step. */
static mw_status mb_exchange(mw_model *m, int k, int M) {
    if (m->cfg.zero < 2) return mw_zero_exchange_step(m, k, k == M - 1);
    const int L = m->cfg.n_layer;
    m->zk = k;
    MW_TRY(mw_zero_exchange(m, m->gres[0], 0, m->seg_lo[1]));
    MW_TRY(mw_zero_exchange(m, m->gres[1], m->seg_lo[L + 1], m->nfloats));
    mw_model_zero_grad(m);
    return MW_OK;
}

/* Runs ops [0, end) of the stage's schedule; *loss: the sum over its head ops of each micro-batch's
 * mean loss as a float (the plain run's mw_model_forward_backward result), 0 on other stages;
 * lmb (may be NULL): each micro-batch's. With data parallelism (training), each micro-batch's
 * gradient is exchanged among the replicas of this stage when its last backward op here ends. */
static mw_status run_ops(mw_model *m, int end, int train, float grad_scale, const pipe_src *src, double *loss,
                         float *lmb) {
    const mw_config *c = &m->cfg;
    uint64_t ab, gb;
    mw_graph_pipe_value_bytes(m, &ab, &gb);
    *loss = 0.0;
    m->has_targets = 1;
    const int M = c->accum, dp = train && c->dp && m->comm;
    int *lastop = dp ? malloc(sizeof(int) * (size_t)M) : NULL;
    if (dp && !lastop) return mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int i = 0; dp && i < end; i++) lastop[m->ops[i].mb] = i;
    mw_status st = MW_OK;
    for (int i = 0; i < end && st == MW_OK; i++) {
        st = run_op(m, i, train, grad_scale, src, loss, lmb, ab, gb);
        if (st == MW_OK && dp && lastop[m->ops[i].mb] == i) st = mb_exchange(m, m->ops[i].mb, M);
    }
    free(lastop);
    MW_TRY(st);
    MW_TRY(send_wait(m, 0));
    MW_TRY(send_wait(m, 2));
    return send_wait(m, 1);
}

/* The last stage's value v to every stage. */
static mw_status share_loss(mw_model *m, double *v) {
    mw_comm *pc = m->pcomm;
    const int P = m->cfg.pp, s = m->cfg.pp_stage;
    if (s == P - 1) {
        for (int j = 0; j < P - 1; j++) MW_TRY(pc->send(pc, v, sizeof *v, j, TAG_LOSS));
        return MW_OK;
    }
    return pc->recv(pc, v, sizeof *v, P - 1, TAG_LOSS);
}

/* The gradient norm over the single-process flat buffer (see the top of the file). */
static mw_status pipe_norm(mw_model *m, double *norm) {
    mw_comm *pc = m->pcomm;
    const int P = m->cfg.pp, s = m->cfg.pp_stage;
    const uint64_t Q = MW_NORM_QUANTUM, n = m->nfloats;
    uint64_t *len = calloc((size_t)P, sizeof *len);
    size_t *cnt = calloc((size_t)P * 2, sizeof *cnt);
    double *parts = NULL, *mine = NULL;
    mw_status st = len && cnt ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) {
        len[s] = n;
        for (int j = 0; j < P; j++) cnt[j] = 1, cnt[P + j] = (size_t)j;
        st = pc->allgatherv(pc, len, sizeof *len, cnt, cnt + P);
    }
    uint64_t g0 = 0, total = 0;
    for (int j = 0; j < P && st == MW_OK; j++) total += len[j], g0 += j < s ? len[j] : 0;
    /* quantum b belongs to the stage holding its last element: stage j (elements [lo, hi)) owns
     * the quanta from lo / Q to the one hi - 1 is in, that one only when it ends there */
    const uint64_t nq = (total + Q - 1) / Q;
    for (uint64_t j = 0, lo = 0; j < (uint64_t)P && st == MW_OK; lo += len[j], j++) {
        const uint64_t hi = lo + len[j], own_end = len[j] == 0 ? lo / Q : (hi % Q == 0 || hi == total) ? (hi - 1) / Q + 1 : (hi - 1) / Q;
        cnt[j] = (size_t)(own_end > lo / Q ? own_end - lo / Q : 0);
        cnt[P + j] = (size_t)(lo / Q);
    }
    if (st == MW_OK) {
        parts = calloc((size_t)nq + 1, sizeof *parts);
        mine = calloc((size_t)(n / Q + 2), sizeof *mine);
        if (!parts || !mine) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    if (st == MW_OK && n) {
        const uint64_t b0 = g0 / Q, b1 = (g0 + n - 1) / Q;
        double carry = 0.0; /* the sum of the quantum this stage begins inside, so far */
        if (g0 % Q && s > 0) st = pc->recv(pc, &carry, sizeof carry, s - 1, TAG_NORM);
        if (st == MW_OK) st = mw_graph_grad_parts_at(m, g0, carry, mine);
        const uint64_t end = g0 + n;
        if (st == MW_OK && end % Q && end != total) /* its last quantum goes on in the next stage */
            st = pc->send(pc, &mine[b1 - b0], sizeof(double), s + 1, TAG_NORM);
        for (size_t i = 0; i < cnt[s] && st == MW_OK; i++) parts[cnt[P + s] + i] = mine[i];
    }
    if (st == MW_OK) st = pc->allgatherv(pc, parts, sizeof *parts, cnt, cnt + P);
    if (st == MW_OK) { /* the plain run's sum: the quanta in order */
        double sum = 0.0;
        for (uint64_t b = 0; b < nq; b++) sum += parts[b];
        *norm = sqrt(sum);
    }
    free(parts), free(mine), free(len), free(cnt);
    return st;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

mw_status mw_pipe_train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r) {
    const mw_config *c = &m->cfg;
    if (!m->pcomm) return mw_fail(MW_ERR_ARG, "a pipeline stage needs its communicator (mw_model_set_pipe)");
    if (c->dp && !m->comm) return mw_fail(MW_ERR_ARG, "a stage's data-parallel replicas need their communicator (mw_model_set_comm)");
    const double t0 = now_ms(), w0 = m->pwait_ms;
    const int M = c->accum, D = c->dp ? c->world : 1, first = c->pp_stage == 0, last = c->pp_stage == c->pp - 1;
    if (!m->ptied_synced) MW_TRY(mw_pipe_tied_sync(m)); /* the last stage's copy of a tied embedding */
    if (!first && !last) /* a middle stage reads no tokens: past the step's micro-batches */
        for (int k = 0; k < M * D; k++) MW_TRY(next(ctx, NULL, NULL, NULL));
    float *lmb = calloc((size_t)M * D, sizeof *lmb);
    size_t *lc = calloc((size_t)D * 2, sizeof *lc);
    mw_status st = lmb && lc ? mw_graph_step_begin(m) : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) st = mw_graph_act_begin(m);
    pipe_src src = {next, ctx, NULL, NULL};
    double loss = 0.0;
    if (st == MW_OK) st = run_ops(m, m->opt_op, 1, 1.0f / (float)(M * D), &src, &loss, lmb + (size_t)(c->dp ? c->rank : 0) * M);
    if (st == MW_OK && c->sp) /* --tp --sp: the stage's norms' gradients are its rows' (the embedding's backward, which
                                 says so alone, runs on the first stage only) until the norm sums them */
        m->tp_sp_dirty = 1;
    if (st == MW_OK && last && D > 1) { /* the replicas' losses, summed in micro-batch order as one process sums them */
        for (int j = 0; j < D; j++) lc[j] = (size_t)M, lc[D + j] = (size_t)j * M;
        st = m->comm->allgatherv(m->comm, lmb, sizeof(float), lc, lc + D);
        loss = 0.0;
        for (int k = 0; k < M; k++)
            for (int j = 0; j < D; j++) loss += lmb[j * M + k];
    }
    free(lmb), free(lc);
    MW_TRY(st);
    MW_TRY(share_loss(m, &loss));
    memset(r, 0, sizeof *r);
    r->step = s + 1;
    r->loss = (float)(loss / (M * D));
    r->lr = mw_lr_at(c, s);
    if (c->dp && c->zero < 2) MW_TRY(mw_zero_gather_grads(m)); /* every replica the stage's whole summed gradient, for the norm */
    MW_TRY(mw_tp_on(m)                ? mw_tp_grad_norm(m, &r->grad_norm) /* --tp: tp.c's sums (the shards' too) */
           : c->dp && c->zero >= 2 ? mw_pipe_shard_norm(m, &r->grad_norm)
                                  : pipe_norm(m, &r->grad_norm));
    MW_TRY(mw_model_adamw_step(m, r->lr, r->grad_norm, s + 1));
    MW_TRY(mw_pipe_tied_sync(m)); /* the updated table to the last stage's head */
    if (c->dp && c->zero == 1) /* the sharded update zeroes its shard's gradient; the gathered rest too */
        memset(m->grads, 0, m->nfloats * sizeof(float));
    r->ms = now_ms() - t0;
    if (m->psteps++ == 0) /* the first step (the transports' connections made): not counted */
        m->pwait_ms = w0;
    else
        m->pstep_ms += r->ms;
    r->tokens_per_s = (double)c->batch * c->seq * M * D / (r->ms / 1e3);
    return MW_OK;
}

mw_status mw_pipe_forward(mw_model *m, const int32_t *inputs, const int32_t *targets, float *loss) {
    if (!m->pcomm) return mw_fail(MW_ERR_ARG, "a pipeline stage needs its communicator (mw_model_set_pipe)");
    if (!targets) return mw_fail(MW_ERR_ARG, "a pipeline stage evaluates with targets only");
    const mw_model_def *a = m->arch;
    if (!m->ptied_synced) MW_TRY(mw_pipe_tied_sync(m));
    int end = 0; /* micro-batch 0's forward: the schedule's first ops, to its send or its head */
    while (end < m->opt_op && m->ops[end].kind != a->nkinds + MW_PK_SEND && m->ops[end].kind != a->k_head) end++;
    end++;
    MW_TRY(mw_graph_step_begin(m));
    pipe_src src = {NULL, NULL, inputs, targets};
    double l = 0.0;
    const double w0 = m->pwait_ms; /* the steps' waits alone are counted */
    MW_TRY(run_ops(m, end, 0, 0.0f, &src, &l, NULL));
    MW_TRY(mw_graph_zero3_wait(m)); /* --zero 3: a gather the forward started for a block it did not reach */
    m->pwait_ms = w0;
    MW_TRY(share_loss(m, &l));
    *loss = (float)l;
    return MW_OK;
}

mw_status mw_model_params_crc(mw_model *m, uint32_t *crc) {
    if (!m->params || (m->cfg.dp && m->cfg.zero >= 3))
        return mw_fail(MW_ERR_ARG, "the parameters are not whole in memory (--offload all, --zero 3)");
    const uint32_t mine = mw_crc32c(0, m->params, m->nfloats * sizeof(float));
    if (m->cfg.pp <= 1 || !m->pcomm) {
        *crc = mine;
        return MW_OK;
    }
    mw_comm *pc = m->pcomm;
    const int P = pc->size;
    uint64_t *v = calloc((size_t)P * 2, sizeof *v);
    size_t *cnt = calloc((size_t)P * 2, sizeof *cnt);
    mw_status st = v && cnt ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) {
        v[2 * pc->rank] = mine, v[2 * pc->rank + 1] = m->nfloats * sizeof(float);
        for (int j = 0; j < P; j++) cnt[j] = 2, cnt[P + j] = (size_t)(2 * j);
        st = pc->allgatherv(pc, v, sizeof *v, cnt, cnt + P);
    }
    if (st == MW_OK) {
        uint32_t c = 0;
        for (int j = 0; j < P; j++) c = mw_crc32c_combine(c, (uint32_t)v[2 * j], v[2 * j + 1]);
        *crc = c;
    }
    free(v), free(cnt);
    return st;
}

const mw_config *mw_pipe_global_config(const mw_model *m) { return &m->gcfg; }
mw_comm *mw_pipe_comm(const mw_model *m) { return m->cfg.pp > 1 ? m->pcomm : NULL; }
int mw_pipe_tensor_base(const mw_model *m) { return m->tensor_base; }

uint64_t mw_pipe_state_run0(const mw_model *m) {
    const mw_opt_layout *L = &m->opt; /* adamw8bit and adam4bit: every tensor's M scales, then V's */
    const int q = L->kind == MW_OPTIM_ADAMW8BIT || L->kind == MW_OPTIM_ADAM4BIT;
    return q ? (uint64_t)L->nblocks * sizeof(float) : L->state_bytes;
}

void mw_model_pipe_times(const mw_model *m, double *wait_ms, double *step_ms) {
    *wait_ms = m->pwait_ms;
    *step_ms = m->pstep_ms;
}
