/* Recomputation policies and the `auto` search (graph_impl.h). Owns: the policy of each block
 * from --recompute (none, selective, full, every:K, blocks:..., auto), its text for the plan, the
 * calibration that times each forward op kind on this machine, and auto's dynamic program over
 * the blocks, checked against the placed plan. A policy is a change to the schedule, never a
 * second code path. May call: schedule.c (rebuild, walk), place.c (plan a candidate), exec.c
 * (tokens for the calibration), the model's block_forward/backward and run_op. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/status.h"
#include "graph_impl.h"

const char *mw_graph_policy_name(int p) {
    return p == MW_P_NONE ? "none" : p == MW_P_SEL ? "selective" : "full";
}

/* "full", "every:3", or runs of layers: "full 0-3, selective 4-11" */
void mw_graph_policy_text(const mw_model *m, char *out, size_t len) {
    const int L = m->cfg.n_layer;
    out[0] = 0;
    if (m->cfg.inference) {
        snprintf(out, len, "%s", mw_graph_keeps_logits(&m->cfg) ? "inference" : "eval");
        return;
    }
    if (m->seg > 0) {
        snprintf(out, len, "every:%d", m->seg);
        return;
    }
    size_t n = 0;
    for (int l = 0; l < L && n < len;) {
        int e = l;
        while (e + 1 < L && m->pol[e + 1] == m->pol[l]) e++;
        if (l == 0 && e == L - 1)
            n += (size_t)snprintf(out + n, len - n, "%s", mw_graph_policy_name(m->pol[l]));
        else if (l == e)
            n += (size_t)snprintf(out + n, len - n, "%s%s %d", n ? ", " : "", mw_graph_policy_name(m->pol[l]), l);
        else
            n += (size_t)snprintf(out + n, len - n, "%s%s %d-%d", n ? ", " : "", mw_graph_policy_name(m->pol[l]), l, e);
        l = e + 1;
    }
}

/* ---- recomputation policies ---------------------------------------------------------------- */

static mw_status auto_policy(mw_model *m) { return mw_graph_auto_policy(m, NULL); }

mw_status mw_graph_resolve_policy(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int L = c->n_layer;
    m->seg = 0;
    int p = MW_P_NONE;
    if (c->inference) return MW_OK;
    MW_TRY(mw_graph_act_sel_from_config(m)); /* --act-layers */
    if (mw_graph_act_choice_wanted(m)) return mw_graph_act_choose(m); /* auto's choice per kept value */
    switch (c->recompute) {
    case MW_RECOMPUTE_NONE: p = MW_P_NONE; break;
    case MW_RECOMPUTE_SELECTIVE: p = MW_P_SEL; break;
    case MW_RECOMPUTE_FULL: p = MW_P_FULL; break;
    case MW_RECOMPUTE_EVERY: {
        int k = c->recompute_every > 0 ? c->recompute_every : (int)lround(sqrt((double)L));
        m->seg = k < 1 ? 1 : k > L ? L : k;
        return MW_OK;
    }
    case MW_RECOMPUTE_AUTO: return auto_policy(m);
    case MW_RECOMPUTE_BLOCKS:
        for (int l = 0; l < L; l++)
            m->pol[l] = c->recompute_blocks[l] == 'f' ? MW_P_FULL : c->recompute_blocks[l] == 's' ? MW_P_SEL : MW_P_NONE;
        return MW_OK;
    default: return mw_fail(MW_ERR_ARG, "unknown recompute policy %d", c->recompute);
    }
    memset(m->pol, p, (size_t)L);
    return MW_OK;
}

/* ---- auto: the fastest per-block policies that fit the budget ------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The calibration model of cfg: two blocks (the first selective, the second full, so that every
 * forward kind a policy recomputes is in its schedule), one sequence of T' = min(T, 256)
 * positions, C' = min(C, 512) channels in heads of cfg's size, the MLP and the key/value heads
 * scaled with C', a small vocabulary; then the model's own hook, if any (mw_model_def.calib_config). */
static void calib_config(const mw_model_def *a, const mw_config *c, mw_config *k) {
    const int hs = c->n_embd / c->n_head;
    const int T = c->seq < 256 ? c->seq : 256, Cc = c->n_embd < 512 ? c->n_embd : 512;
    const int H = Cc / hs > 0 ? Cc / hs : 1, C = hs <= Cc ? H * hs : Cc; /* wide heads: one of Cc */
    *k = *c;
    k->n_layer = 2;
    k->n_head = H;
    k->n_embd = C;
    k->vocab = 64;
    k->batch = 1;
    k->seq = k->ctx = T;
    k->inference = 0;
    k->budget = 0;
    k->recompute = MW_RECOMPUTE_BLOCKS;
    k->offload = MW_OFFLOAD_NONE; /* the calibration runs in memory: no scratch file */
    k->pp = k->pp_stage = k->pp_first = k->pp_blocks = k->vpp = 0; /* ... of whole blocks, not a pipeline stage */
    k->tp = 0, k->sp = 0; /* ... nor a tensor-parallel shard (its collectives need the ranks) */
    memset(k->offload_spec, 0, sizeof k->offload_spec); /* all of it: the cache below compares bytes */
    k->dp = 0, k->world = 1, k->rank = 0, k->zero = 0; /* one process's whole model: no ranks to exchange
                                          gradients with or gather parameters from (it has none) */
    k->act_compress_max = 0;
    memset(k->act_layers, 0, sizeof k->act_layers);
    k->act_offload = MW_ACT_OFFLOAD_NONE, k->act_compress = 0; /* ... nor stored activations: its rounds
                                          run the ops alone, and the backward's must find them in place */
    snprintf(k->recompute_blocks, sizeof k->recompute_blocks, "sf");
    k->recompute_every = 0; /* the user's every:K need not fit the calibration's 2 blocks */
    if (c->arch != MW_ARCH_GPT2) {
        const int group = c->n_head / c->n_kv_head;
        k->n_kv_head = H % group == 0 ? H / group : H;
        k->ffn = (int)((double)c->ffn * C / c->n_embd);
        if (k->ffn < 1) k->ffn = 1;
        if (C != H * hs) k->n_head = k->n_kv_head = 1; /* one wide head */
    }
    if (a->calib_config) a->calib_config(c, k); /* the family's own fields */
    /* what does not change a forward op's time takes the defaults, so that the cache below keys
     * on the shape alone: the optimizer and its hyperparameters, the schedule, the seed, the
     * cadence of evaluation and checkpoints, the micro-batches per step (estimate's tables plan
     * each preset under every --optim: with these in the key, each was calibrated anew) */
    mw_config d;
    mw_config_default(&d);
    k->optim = d.optim, k->lr = d.lr, k->min_lr_frac = d.min_lr_frac, k->beta1 = d.beta1, k->beta2 = d.beta2;
    k->eps = d.eps, k->weight_decay = d.weight_decay, k->grad_clip = d.grad_clip, k->momentum = d.momentum;
    k->beta3 = d.beta3, k->eps2 = d.eps2, k->clip_threshold = d.clip_threshold, k->decay_rate = d.decay_rate;
    k->steps = d.steps, k->warmup = d.warmup, k->seed = d.seed, k->accum = 1;
    k->eval_every = d.eval_every, k->eval_batches = d.eval_batches, k->save_every = d.save_every, k->keep = d.keep;
}

/* Seconds per op kind at cfg's shape, measured on this machine: each forward kind runs in the
 * calibration model (calib_config), best of 3 after a warm-up, then scales with its work: N C^2
 * for the matmuls, N C for the elementwise ops, B T^2 C for attention. */
mw_status mw_graph_measure_costs(const mw_config *c, const mw_model_def *a, double *cost) {
    mw_config k;
    calib_config(a, c, &k);
    const int nt = omp_get_max_threads();
    /* the calibrations of the last NCAL shapes are kept (per thread): max_batch plans many batch
     * sizes, and estimate's tables plan every preset under each optimizer and placement, which
     * --offload auto with --budget does under --recompute auto too */
    enum { NCAL = 32 };
    static _Thread_local mw_config cal_k[NCAL];
    static _Thread_local int cal_nt[NCAL], cal_next;
    static _Thread_local double cal[NCAL][64];
    if (a->nkinds > 64) return mw_fail(MW_ERR_ARG, "internal: too many op kinds");
    int e = 0;
    while (e < NCAL && !(cal_nt[e] == nt && memcmp(&cal_k[e], &k, sizeof k) == 0)) e++;
    double *cached = cal[e < NCAL ? e : cal_next];
    if (e == NCAL) {
        mw_model *m;
        MW_TRY(mw_graph_model_create(&m, a, &k));
        mw_model_init(m, 1);
        const int N = k.batch * k.seq;
        int32_t *tok = m->staging;
        for (int i = 0; i < 2 * N; i++) tok[i] = i % k.vocab;
        mw_status st = mw_graph_load_tokens(m, tok, tok + N);
        double best[64];
        for (int i = 0; i < 64; i++) best[i] = INFINITY;
        for (int rep = 0; st == MW_OK && rep < 4; rep++) { /* the forward ops in schedule order */
            double s = 0;
            for (int i = 0; i < m->nops; i++) {
                const int kd = m->ops[i].kind;
                if (!(i < m->head_op || mw_graph_kind_is_forward(m, kd))) continue;
                const double t0 = now_s();
                a->run_op(m, i, 0, 0.0f, &s);
                const double t = now_s() - t0;
                if (rep > 0 && t < best[kd]) best[kd] = t; /* the first run warms up */
            }
        }
        /* the other kinds (the head's loss and gradient, the backward ops): the training schedule
         * as mw_model_forward_backward runs it, the forward kinds' times kept from above; for the
         * step's predicted compute (mw_graph_step_cost), not for the recomputation's */
        double bbest[64];
        for (int i = 0; i < 64; i++) bbest[i] = INFINITY;
        for (int rep = 0; st == MW_OK && rep < 3; rep++) {
            double s = 0;
            for (int i = 0; i < N; i++) tok[i] = i % k.vocab, tok[N + i] = (i + 1) % k.vocab;
            st = mw_graph_load_tokens(m, tok, tok + N); /* their buffers were reused after the head */
            const int gslot = mw_graph_grads_slotted(m); /* bf16's blocks accumulate in an fp32 slot */
            for (int i = 0; st == MW_OK && i < m->opt_op; i++) {
                const int kd = m->ops[i].kind, l = m->ops[i].layer;
                if (gslot && m->op_gb[i]) st = mw_graph_grad_bind(m, l); /* as mw_model_forward_backward */
                if (st != MW_OK) break;
                const double t0 = now_s();
                a->run_op(m, i, 1, 1.0f / N, &s);
                const double t = now_s() - t0;
                if (rep > 0 && t < bbest[kd]) bbest[kd] = t;
                if (gslot && m->op_ge[i]) st = mw_graph_grad_done(m, l);
            }
        }
        mw_model_destroy(m);
        MW_TRY(st);
        for (int i = 0; i < a->nkinds; i++) cached[i] = mw_graph_kind_is_forward_a(a, i) ? best[i] : bbest[i];
        cal_k[cal_next] = k;
        cal_nt[cal_next] = nt;
        cal_next = (cal_next + 1) % NCAL;
    }
    const double Nr = (double)c->batch * c->seq, Cr = c->n_embd, N = k.seq, C = k.n_embd;
    for (int i = 0; i < a->nkinds; i++) {
        double scale = (Nr / N) * (Cr / C); /* elementwise */
        if (a->kinds[i].cost == MW_COST_MATMUL) scale *= Cr / C;
        if (a->kinds[i].cost == MW_COST_ATTN)
            scale = (double)c->batch * ((double)c->seq / N) * ((double)c->seq / N) * (Cr / C);
        if (a->kinds[i].cost == MW_COST_HEAD) scale *= (double)c->vocab / k.vocab;
        cost[i] = isfinite(cached[i]) ? cached[i] * scale : 0.0;
    }
    for (int i = 0; a->cost_sum && i < a->nkinds; i++) /* a kind that runs what its parts do */
        if (a->cost_sum[i][0]) {
            cost[i] = 0.0;
            for (int j = 0; j < MW_COST_PARTS && a->cost_sum[i][j]; j++) cost[i] += cost[a->cost_sum[i][j] - 1];
        }
    return MW_OK;
}

/* The recomputation seconds of ops[from..nops) of m (the forward kinds among them). */
double mw_graph_ops_cost(const mw_model *m, int from, const double *kc) {
    double c = 0.0;
    const mw_model_def *a = m->arch;
    for (int i = from; i < m->nops; i++) {
        const int k = m->ops[i].kind;
        if (k >= a->nkinds) continue; /* a layout's transfer (send, receive): no measured compute */
        if (mw_graph_kind_is_forward(m, k)) c += kc[k];
        else if (a->cost_sum && a->cost_sum[k][0]) /* a backward op's recomputing parts */
            for (int j = 0; j < MW_COST_PARTS && a->cost_sum[k][j]; j++)
                if (mw_graph_kind_is_forward(m, a->cost_sum[k][j] - 1)) c += kc[a->cost_sum[k][j] - 1];
    }
    return c;
}

/* The predicted compute seconds of one micro-batch of m: every op before the optimizer (forward,
 * head, recomputations, backward), each kind at its measured cost. */
double mw_graph_step_cost(const mw_model *m, const double *kc) {
    double c = 0.0;
    for (int i = 0; i < m->opt_op; i++) /* a layout's transfers (kinds past the model's) cost no compute */
        if (m->ops[i].kind < m->arch->nkinds) c += kc[m->ops[i].kind];
    return c;
}

/* Predicted recomputation seconds of one block under each policy, and of one block's forward
 * with and without its output (every:K), read off what the model pushes for them. */
static void policy_costs(mw_model *m, const double *kc, double out[3], double *fwd_out, double *fwd_no) {
    const int n0 = m->nops;
    for (int p = 0; p < 3; p++) {
        m->arch->block_backward(m, 0, p);
        out[p] = mw_graph_ops_cost(m, n0, kc);
        m->nops = n0;
    }
    m->arch->block_forward(m, 0, 1);
    *fwd_out = mw_graph_ops_cost(m, n0, kc);
    m->nops = n0;
    m->arch->block_forward(m, 0, 0);
    *fwd_no = mw_graph_ops_cost(m, n0, kc);
    m->nops = n0;
}

/* Live bytes per op of m's schedule, summed over categories (no placement); kept0 (may be NULL):
 * the bytes of block 0's instances that cross the head, what a block keeps from forward to
 * backward. */
static mw_status live_totals(mw_model *m, uint64_t **out, uint64_t *kept0) {
    mw_planner pl;
    mw_planner_init(&pl, m->nops);
    mw_status st = mw_graph_walk(m, &pl, NULL, NULL);
    if (kept0) *kept0 = 0;
    for (int i = 0; kept0 && st == MW_OK && i < pl.n; i++)
        if (pl.b[i].layer == 0 && pl.b[i].first < m->head_op && pl.b[i].last > m->head_op)
            *kept0 += pl.b[i].bytes;
    uint64_t *live = st == MW_OK ? calloc((size_t)m->nops * MW_CAT_COUNT, sizeof(uint64_t)) : NULL;
    uint64_t *tot = st == MW_OK ? calloc((size_t)m->nops, sizeof(uint64_t)) : NULL;
    if (st == MW_OK && (!live || !tot)) st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
    if (st == MW_OK) {
        mw_planner_live_all(&pl, live);
        for (int i = 0; i < m->nops; i++)
            for (int k = 0; k < MW_CAT_COUNT; k++) tot[i] += live[(size_t)i * MW_CAT_COUNT + k];
    }
    free(live);
    mw_planner_free(&pl);
    if (st != MW_OK) free(tot);
    else *out = tot;
    return st;
}

/* Sets m's policy (uniform p, or every:seg when seg > 0) and rebuilds its schedule. */
static mw_status set_policy(mw_model *m, int p, int seg) {
    memset(m->pol, p, (size_t)m->cfg.n_layer);
    m->seg = seg;
    free(m->ops);
    m->ops = NULL;
    return mw_graph_build_schedule(m);
}

typedef mw_pmodel pmodel;

mw_status mw_graph_probe_policy(mw_model *m, int p, mw_pmodel *pm) {
    const int L = m->cfg.n_layer;
    const mw_model_def *a = m->arch;
    MW_TRY(set_policy(m, p, 0));
    uint64_t *live;
    memset(pm, 0, sizeof *pm);
    MW_TRY(live_totals(m, &live, &pm->kept));
    const uint64_t below = (uint64_t)(L - 1) * pm->kept;
    for (int i = 0; i < m->nops; i++) {
        const mw_op *o = &m->ops[i];
        if (i == m->head_op) {
            pm->head = live[i] - (uint64_t)L * pm->kept;
        } else if (o->kind == a->k_embed || o->kind == a->k_embed_bwd || o->kind == a->k_opt) {
            if (live[i] > pm->tail) pm->tail = live[i];
        } else if (o->layer == L - 1) {
            uint64_t v = live[i] > below ? live[i] - below : 0;
            uint64_t *dst = i < m->head_op ? &pm->fwd : &pm->bwd;
            if (v > *dst) *dst = v;
        }
    }
    free(live);
    return MW_OK;
}

/* Dynamic programming over the blocks, bottom up. State: how many blocks below keep "none" and
 * how many "selective" (the rest "full"), which fixes the bytes they keep. A block with policy p
 * fits when the bytes kept below it plus its own forward and backward peaks fit in M; the value
 * is the predicted recomputation time. Fills pol with the cheapest assignment and returns 1; 0 if
 * none fits; -1 out of memory. */
static int dp_policies(int L, const pmodel pm[3], const double cost[3], uint64_t M, unsigned char *pol) {
    const int S = L + 1;
    double *best = malloc(sizeof(double) * (size_t)S * S), *next = malloc(sizeof(double) * (size_t)S * S);
    unsigned char *choice = malloc((size_t)L * S * S);
    int ok = 0;
    if (!best || !next || !choice) {
        ok = -1;
        goto out;
    }
    for (int i = 0; i < S * S; i++) best[i] = INFINITY;
    best[0] = 0.0;
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < S * S; i++) next[i] = INFINITY;
        for (int a = 0; a <= l; a++)
            for (int b = 0; a + b <= l; b++) {
                if (best[a * S + b] == INFINITY) continue;
                const uint64_t below = (uint64_t)a * pm[MW_P_NONE].kept + (uint64_t)b * pm[MW_P_SEL].kept +
                                       (uint64_t)(l - a - b) * pm[MW_P_FULL].kept;
                for (int p = 0; p < 3; p++) {
                    uint64_t own = pm[p].fwd > pm[p].bwd ? pm[p].fwd : pm[p].bwd;
                    if (below + own > M) continue;
                    const int a2 = a + (p == MW_P_NONE), b2 = b + (p == MW_P_SEL);
                    const double v = best[a * S + b] + cost[p];
                    if (v < next[a2 * S + b2]) {
                        next[a2 * S + b2] = v;
                        choice[((size_t)l * S + a2) * S + b2] = (unsigned char)p;
                    }
                }
            }
        double *t = best;
        best = next;
        next = t;
    }
    double bv = INFINITY;
    int ba = -1, bb = -1;
    for (int a = 0; a <= L; a++)
        for (int b = 0; a + b <= L; b++) {
            const uint64_t all = (uint64_t)a * pm[MW_P_NONE].kept + (uint64_t)b * pm[MW_P_SEL].kept +
                                 (uint64_t)(L - a - b) * pm[MW_P_FULL].kept;
            uint64_t head = pm[MW_P_NONE].head > pm[MW_P_FULL].head ? pm[MW_P_NONE].head : pm[MW_P_FULL].head;
            if (best[a * S + b] < bv && all + head <= M && pm[MW_P_NONE].tail <= M) {
                bv = best[a * S + b];
                ba = a, bb = b;
            }
        }
    if (ba >= 0) { /* walk the choices back down */
        for (int l = L - 1; l >= 0; l--) {
            const int p = choice[((size_t)l * S + ba) * S + bb];
            pol[l] = (unsigned char)p;
            ba -= p == MW_P_NONE;
            bb -= p == MW_P_SEL;
        }
        ok = 1;
    }
out:
    free(best), free(next), free(choice);
    return ok;
}

mw_status mw_graph_plan_peak(mw_model *m, uint64_t *peak) {
    mw_planner pl;
    mw_plan_summary s;
    MW_TRY(mw_graph_plan_model(m, &pl, &s));
    mw_planner_free(&pl);
    *peak = s.peak;
    return MW_OK;
}

mw_status mw_graph_auto_policy(mw_model *m, double *pred) {
    const int L = m->cfg.n_layer;
    if (pred) *pred = INFINITY;
    const uint64_t budget = m->cfg.budget;
    if (L > 256) return mw_fail(MW_ERR_ARG, "--recompute auto handles up to 256 blocks; choose a policy");
    double kc[64], cost[3], fwd_out, fwd_no;
    MW_TRY(mw_graph_measure_costs(&m->cfg, m->arch, kc));
    pmodel pm[3];
    for (int p = 0; p < 3; p++) MW_TRY(mw_graph_probe_policy(m, p, &pm[p]));
    policy_costs(m, kc, cost, &fwd_out, &fwd_no); /* after probe: the schedule has room */
    unsigned char *best = malloc((size_t)L), *cand = malloc((size_t)L);
    if (!best || !cand) {
        free(best), free(cand);
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    }
    double best_cost = INFINITY;
    int best_seg = -1;
    mw_status st = MW_OK;
    /* the DP's choice, checked against the placed plan; the model's margin shrinks until it fits */
    uint64_t M = budget;
    for (int tries = 0; st == MW_OK && tries < 8; tries++) {
        const int found = dp_policies(L, pm, cost, M, cand);
        if (found < 0) st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        if (found <= 0) break;
        memcpy(m->pol, cand, (size_t)L);
        m->seg = 0;
        free(m->ops);
        m->ops = NULL;
        uint64_t peak = 0;
        st = mw_graph_build_schedule(m);
        if (st == MW_OK) st = mw_graph_plan_peak(m, &peak);
        if (st != MW_OK) break;
        if (peak <= budget) {
            double c = 0;
            for (int l = 0; l < L; l++) c += cost[cand[l]];
            best_cost = c;
            best_seg = 0;
            memcpy(best, cand, (size_t)L);
            break;
        }
        M -= peak - budget < M ? peak - budget : M;
    }
    /* every:K, whose recomputation is one block forward per block (the last of each segment
     * needs no output): taken when it is predicted faster */
    for (int K = 1; st == MW_OK && K <= L; K++) {
        const int nseg = (L + K - 1) / K;
        const double c = (double)(L - nseg) * fwd_out + (double)nseg * fwd_no;
        if (c >= best_cost) continue;
        uint64_t peak = 0, *live = NULL;
        st = set_policy(m, MW_P_NONE, K);
        if (st == MW_OK) st = live_totals(m, &live, NULL);
        for (int i = 0; st == MW_OK && i < m->nops; i++) peak = live[i] > peak ? live[i] : peak;
        free(live);
        if (st == MW_OK && peak <= budget) st = mw_graph_plan_peak(m, &peak); /* placed: at least the live peak */
        if (st == MW_OK && peak <= budget) {
            best_cost = c;
            best_seg = K;
        }
    }
    if (st == MW_OK) {
        if (best_seg > 0) {
            memset(m->pol, MW_P_NONE, (size_t)L);
            m->seg = best_seg;
        } else if (best_seg == 0) {
            memcpy(m->pol, best, (size_t)L);
            m->seg = 0;
        } else { /* nothing fits: the smallest plan, which the budget check then refuses */
            best_cost = INFINITY;
            memset(m->pol, MW_P_FULL, (size_t)L);
            m->seg = 0;
        }
        free(m->ops);
        m->ops = NULL;
        if (pred) *pred = best_cost;
    }
    free(best), free(cand);
    return st;
}
