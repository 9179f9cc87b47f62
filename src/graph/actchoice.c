/* One decision per kept value (graph_impl.h; docs/memory.md, "One decision per tensor"). Owns:
 * --recompute auto's joint choice, per block, of the recomputation policy (which values are not
 * kept at all but recomputed) and of what happens to each value the block does keep: kept as it
 * is, compressed (at a width --act-compress-max allows), swapped to the disk tier (with
 * --act-offload auto: the block's input alone, or every kept value), or both; by the least predicted
 * time that fits --budget. And --act-layers, the text that pins such a choice. May call:
 * recompute.c (the policies' probes, recompute-only auto, the placed peak), actstore.c (what a plan
 * stores and what that costs), src/kernels/cpu/actq (timed), src/memory/offload (the disk's rate). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/status.h"
#include "../kernels/cpu/actq.h"
#include "actstore.h"

/* ---- --act-layers ---------------------------------------------------------------------------- */

mw_status mw_graph_act_sel_from_config(mw_model *m) {
    const mw_config *c = &m->cfg;
    if (!c->act_layers[0] || c->inference) return MW_OK;
    const int L = c->n_layer;
    unsigned char *sel = calloc((size_t)L, 1);
    if (!sel) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    const char *p = c->act_layers;
    for (int l = 0; l < L && *p; l++) { /* the tokens were checked (mw_config_validate) */
        const int sw = *p == 'x' ? MW_ACT_OFFLOAD_CHECKPOINTS : *p == 'a' ? MW_ACT_OFFLOAD_ALL : MW_ACT_OFFLOAD_NONE;
        p++;
        int bits = 0;
        if (*p == '8' || *p == '4' || *p == '2') bits = *p++ - '0';
        if (*p == ',') p++;
        sel[l] = (unsigned char)mw_act_sel(sw, bits);
    }
    free(m->act_sel);
    m->act_sel = sel;
    return MW_OK;
}

void mw_graph_act_sel_text(const mw_model *m, char *out, size_t n) {
    out[0] = 0;
    if (!m->act_sel || m->cfg.inference) return;
    size_t u = 0;
    for (int l = 0; l < m->cfg.n_layer && u + 4 < n; l++) {
        const int s = m->act_sel[l], b = mw_act_sel_bits(s);
        out[u++] = "kxa"[mw_act_sel_swap(s)];
        if (b) out[u++] = (char)('0' + b);
        if (l + 1 < m->cfg.n_layer) out[u++] = ',';
    }
    out[u] = 0;
}

/* ---- the choice ------------------------------------------------------------------------------ */

int mw_graph_act_choice_wanted(const mw_model *m) {
    const mw_config *c = &m->cfg;
    /* not under --zero: the ranks agree on recompute-only auto's pin alone (src/cli/train.c) */
    return !c->inference && c->recompute == MW_RECOMPUTE_AUTO && c->budget && !c->act_layers[0] && !c->dp &&
           (c->act_compress_max || m->gcfg.act_offload == MW_ACT_OFFLOAD_AUTO);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Seconds to quantise and dequantise one float on this machine (8 bits; the widths cost alike):
 * 16 chunks of 64 Ki floats as the executor runs them, best of 3, once per process. */
static double quant_rate(void) {
    static _Thread_local double rate = -1;
    if (rate >= 0) return rate;
    enum { N = 65536, REPS = 16 };
    float *x = malloc(sizeof(float) * N);
    char *q = malloc(mw_actq_bytes(N, 8));
    if (!x || !q) {
        free(x), free(q);
        return 0; /* unknown: compression predicted free (the plan still checks the memory) */
    }
    for (int i = 0; i < N; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    double best = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now_s();
        for (int k = 0; k < REPS; k++) {
            size_t bad;
            if (mw_actq_quantize(x, N, 8, 1, (uint64_t)k, q, &bad) != MW_OK) break;
            mw_actq_dequantize(q, N, 8, x);
        }
        const double t = now_s() - t0;
        if (t < best) best = t;
    }
    free(x), free(q);
    rate = best / ((double)N * REPS);
    return rate;
}

/* The predicted seconds per micro-batch of m's plan as it stands (schedule and stores built):
 * recomputation (the forward kinds after the head), (de)quantisation, swaps not hidden. */
static void predict_parts(const mw_model *m, const double *kc, double rd, double wr, double out[4]) {
    out[0] = mw_graph_ops_cost(m, m->head_op + 1, kc);
    out[1] = (double)mw_graph_act_quant_floats(m) * quant_rate();
    out[2] = mw_graph_act_swap_exposed(m, kc, rd, wr);
    out[3] = out[0] + out[1] + out[2];
}

/* An option of a block: its policy and what it stores (mw_act_sel), its memory model from a
 * uniform plan of it, and its predicted seconds per block. */
typedef struct option {
    int p, sel;
    mw_pmodel pm;
    double cost;
} option;

/* The DP over the blocks, bottom up, as recompute.c's over the policies, with the bytes kept
 * below as its state in units of M / G (rounded up: the check against M is never optimistic). A
 * block with option o fits when the units below and its own peak fit in M. Fills choice (per
 * block, the option's index) and returns 1; 0 when nothing fits; -1 out of memory. */
enum { G = 2048 };
static int dp_options(int L, const option *o, int no, uint64_t M, uint64_t head, uint64_t tail, int *choice) {
    if (tail > M) return 0;
    const double unit = (double)M / G;
    double *best = malloc(sizeof(double) * (G + 1)), *next = malloc(sizeof(double) * (G + 1));
    short *from = malloc(sizeof(short) * (size_t)L * (G + 1));
    unsigned char *pick = malloc((size_t)L * (G + 1));
    int ok = -1;
    if (!best || !next || !from || !pick) goto out;
    for (int u = 0; u <= G; u++) best[u] = INFINITY;
    best[0] = 0;
    for (int l = 0; l < L; l++) {
        for (int u = 0; u <= G; u++) next[u] = INFINITY;
        for (int u = 0; u <= G; u++) {
            if (best[u] == INFINITY) continue;
            for (int k = 0; k < no; k++) {
                const uint64_t own = o[k].pm.fwd > o[k].pm.bwd ? o[k].pm.fwd : o[k].pm.bwd;
                if ((double)u * unit + (double)own > (double)M) continue;
                const int v = u + (int)ceil((double)o[k].pm.kept / unit);
                if (v > G) continue;
                const double c = best[u] + o[k].cost;
                if (c < next[v]) {
                    next[v] = c;
                    from[(size_t)l * (G + 1) + v] = (short)u;
                    pick[(size_t)l * (G + 1) + v] = (unsigned char)k;
                }
            }
        }
        double *t = best;
        best = next, next = t;
    }
    int bu = -1;
    for (int u = 0; u <= G; u++)
        if (best[u] < INFINITY && (double)u * unit + (double)head <= (double)M && (bu < 0 || best[u] < best[bu])) bu = u;
    ok = 0;
    if (bu >= 0) {
        for (int l = L - 1; l >= 0; l--) {
            choice[l] = pick[(size_t)l * (G + 1) + bu];
            bu = from[(size_t)l * (G + 1) + bu];
        }
        ok = 1;
    }
out:
    free(best), free(next), free(from), free(pick);
    return ok;
}

static mw_status set_choice(mw_model *m, const unsigned char *pol, const unsigned char *sel, int seg) {
    const int L = m->cfg.n_layer;
    memcpy(m->pol, pol, (size_t)L);
    m->seg = seg;
    if (sel) memcpy(m->act_sel, sel, (size_t)L);
    free(m->ops);
    m->ops = NULL;
    return mw_graph_build_schedule(m);
}

/* the schedule's stores built (the walk derives them), its placed peak when peak is not NULL */
static mw_status walk_plan(mw_model *m, uint64_t *peak) {
    if (peak) return mw_graph_plan_peak(m, peak);
    mw_planner pl;
    mw_planner_init(&pl, m->nops);
    const mw_status st = mw_graph_walk(m, &pl, NULL, NULL);
    mw_planner_free(&pl);
    return st;
}

mw_status mw_graph_act_choose(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int L = c->n_layer;
    const uint64_t budget = c->budget;
    m->act_choice[0] = 0;
    for (int i = 0; i < 4; i++) m->pred_act[i] = -1;
    /* recompute-only auto first: the choice to beat, predicted as the others are */
    double base_rec;
    MW_TRY(mw_graph_auto_policy(m, &base_rec));
    const int base_seg = m->seg, base_fits = base_rec < INFINITY;
    unsigned char *base_pol = malloc((size_t)L), *cand_pol = malloc((size_t)L), *cand_sel = calloc((size_t)L, 1);
    option *o = malloc(sizeof(option) * 3 * 3 * 4);
    int *choice = malloc(sizeof(int) * (size_t)L);
    free(m->act_sel);
    m->act_sel = calloc((size_t)L, 1);
    mw_status st = MW_OK;
    if (!base_pol || !cand_pol || !cand_sel || !o || !choice || !m->act_sel) {
        st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        goto out;
    }
    memcpy(base_pol, m->pol, (size_t)L);
    double kc[64], rd = 0, wr = 0, base[4];
    st = mw_graph_measure_costs(c, m->arch, kc);
    const int can_swap = m->gcfg.act_offload == MW_ACT_OFFLOAD_AUTO && c->offload_dir[0];
    if (st == MW_OK && can_swap && mw_offload_measure(c->offload_dir, &rd, &wr) != MW_OK) rd = wr = 0;
    /* the baseline's prediction, on its own schedule (it stores nothing) */
    free(m->act_sel);
    m->act_sel = NULL;
    if (st == MW_OK) st = set_choice(m, base_pol, NULL, base_seg);
    if (st == MW_OK) st = walk_plan(m, NULL);
    if (st == MW_OK) predict_parts(m, kc, rd, wr, base);
    m->act_sel = calloc((size_t)L, 1);
    if (st == MW_OK && !m->act_sel) st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
    /* the options: every policy, times what the block stores of what it keeps */
    int no = 0, any_bits = 0, any_swap = 0;
    uint64_t head = 0, tail = 0;
    const int widths[3] = {8, 4, 2};
    for (int p = 0; st == MW_OK && p < 3; p++)
        for (int sw = 0; st == MW_OK && sw <= (can_swap && rd > 0 ? 2 : 0); sw++)
            for (int b = -1; st == MW_OK && b < 3; b++) {
                const int bits = b < 0 ? 0 : widths[b];
                if (bits && (!c->act_compress_max || bits < c->act_compress_max || !m->arch->lslot_lossy)) continue;
                option *k = &o[no];
                k->p = p, k->sel = mw_act_sel(sw, bits);
                any_bits |= bits != 0, any_swap |= sw != 0;
                memset(m->act_sel, k->sel, (size_t)L);
                st = mw_graph_probe_policy(m, p, &k->pm); /* its walk built the stores */
                if (st != MW_OK) break;
                double parts[4];
                predict_parts(m, kc, rd, wr, parts);
                /* per block; a hair more for each narrower width and for a swap, so that a tie
                 * keeps the values exact and in memory */
                k->cost = parts[3] / L + 1e-9 * (bits == 8 ? 1 : bits == 4 ? 2 : bits == 2 ? 3 : 0) + 1e-10 * sw;
                if (k->pm.head > head) head = k->pm.head;
                if (k->pm.tail > tail) tail = k->pm.tail;
                no++;
            }
    /* the DP's choice checked against the placed plan; the margin shrinks until it fits */
    int found = 0;
    double cand[4] = {INFINITY, 0, 0, INFINITY};
    uint64_t M = budget;
    for (int tries = 0; st == MW_OK && tries < 8; tries++) {
        const int f = dp_options(L, o, no, M, head, tail, choice);
        if (f < 0) st = mw_fail(MW_ERR_NOMEM, "out of memory planning");
        if (f <= 0) break;
        for (int l = 0; l < L; l++) cand_pol[l] = (unsigned char)o[choice[l]].p, cand_sel[l] = (unsigned char)o[choice[l]].sel;
        uint64_t peak = 0;
        st = set_choice(m, cand_pol, cand_sel, 0);
        if (st == MW_OK) st = walk_plan(m, &peak);
        if (st != MW_OK) break;
        if (peak <= budget) {
            predict_parts(m, kc, rd, wr, cand);
            found = 1;
            break;
        }
        M -= peak - budget < M ? peak - budget : M;
    }
    if (st != MW_OK) goto out;
    /* taken when recompute-only auto finds nothing that fits, or is predicted slower */
    const int take = found && (!base_fits || cand[3] < base[3]);
    if (take) {
        memcpy(m->act_sel, cand_sel, (size_t)L);
        memcpy(m->pol, cand_pol, (size_t)L);
        m->seg = 0;
        memcpy(m->pred_act, cand, sizeof cand);
        /* the model's configuration says what it stores: a checkpoint records the widths (they change
         * the numbers), so that a resume keeps them whatever auto would choose then */
        mw_graph_act_sel_text(m, m->cfg.act_layers, sizeof m->cfg.act_layers);
    } else {
        free(m->act_sel);
        m->act_sel = NULL;
        memcpy(m->pol, base_pol, (size_t)L);
        m->seg = base_seg;
        if (base_fits) memcpy(m->pred_act, base, sizeof base);
    }
    char bt[48], ct[48];
    if (base_fits) snprintf(bt, sizeof bt, "%.4f s", base[3]);
    else snprintf(bt, sizeof bt, "over budget");
    if (found) snprintf(ct, sizeof ct, "%.4f s", cand[3]);
    else snprintf(ct, sizeof ct, "over budget");
    snprintf(m->act_choice, sizeof m->act_choice,
             "predicted s/micro-batch (recomputation + (de)quantisation + swaps not hidden): recompute-only %.16s, "
             "per value %.16s (%d options per block%s%s) -> %s",
             bt, ct, no, any_bits ? ", compressing" : "", any_swap ? ", swapping" : "",
             take ? "per value" : base_fits || !found ? "recompute-only" : "per value");
out:
    free(m->ops);
    m->ops = NULL;
    free(base_pol), free(cand_pol), free(cand_sel), free(o), free(choice);
    return st;
}
