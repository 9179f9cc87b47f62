/* Placement and binding (graph_impl.h). Owns: the model's skeleton (parameter table, optimizer
 * layout, --offload auto's placement, segments, policy, schedule, transfers), the plan of its
 * buffers and its summary (mw_plan, mw_plan_buffers, mw_plan_timeline, the predictions auto
 * compares), and the model's create/destroy: the walk's measured plan placed in one arena and its
 * pointers bound. May call: schedule.c (the walk), transfer.c (the disk tier's layout),
 * recompute.c (the policy, the ops' measured costs), budget.c, src/memory, src/optim. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/rng.h"
#include "../core/status.h"
#include "../dist/tp.h"
#include "../memory/period.h"
#include "../memory/scratch.h"
#include "actstore.h"
#include "budget.h"
#include "graph_impl.h"
#include "model.h"

static mw_status model_skeleton(mw_model **out, const mw_model_def *arch, const mw_config *cfg, int cut);

void mw_graph_add_tensor(mw_model *m, const char *name, int r, int c, int decay, int pad) {
    mw_graph_add_tensor_split(m, name, r, c, decay, pad, MW_TS_WHOLE, MW_AT_AUTO);
}

void mw_graph_add_tensor_split(mw_model *m, const char *name, int r, int c, int decay, int pad, int split, int at) {
    if (m->building_layer >= 0) m->built_blocks = 1;
    else if (!mw_graph_layout_holds(m, m->built_blocks, at)) { /* another pipeline stage's */
        if (!m->built_blocks) m->pre_skipped++;
        m->add_skipped = 1;
        return;
    }
    m->add_skipped = 0;
    const int gr = r, gc = c;
    mw_graph_layout_dims(m, split, &r, &c);
    mw_tensor *t = &m->tensors[m->ntensors++];
    t->gdims[0] = gr, t->gdims[1] = gc;
    t->groups = 1;
    t->split = (unsigned char)split;
    t->pad = (unsigned char)(pad != 0);
    const size_t len = strnlen(name, sizeof t->name - 1); /* snprintf("%s")'s truncation, without its cost (a
                                                           * model of 256 experts a block names 45k tensors) */
    memcpy(t->name, name, len);
    t->name[len] = 0;
    t->ndim = c ? 2 : 1;
    t->dims[0] = r;
    t->dims[1] = c;
    t->numel = (size_t)r * (c ? c : 1);
    t->offset = m->nfloats;
    t->decay = decay;
    t->layer = m->building_layer;
    t->seg = 0;
    const size_t q = m->pad_q ? m->pad_q : 16, before = m->nfloats;
    if (!pad)
        m->nfloats += t->numel;
    else if (q == 16) /* 64-byte aligned */
        m->nfloats += (t->numel + 15) / 16 * 16;
    else /* the next tensor starts on a quantisation block */
        m->nfloats = (m->nfloats + t->numel + q - 1) / q * q;
    if (m->building_expert) m->expert_floats += m->nfloats - before;
}

/* The optimizer's layout over the parameter table. */
static mw_status build_optim(mw_model *m) {
    mw_opt_tensor *t = malloc(sizeof *t * (size_t)(m->ntensors > 0 ? m->ntensors : 1));
    if (!t) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *ts = &m->tensors[i];
        t[i].offset = ts->offset, t[i].numel = ts->numel, t[i].decay = ts->decay;
        t[i].rows = ts->dims[0], t[i].cols = ts->ndim == 2 ? ts->dims[1] : 0;
        t[i].split = 0, t[i].grows = t[i].gcols = t[i].groups = t[i].per = t[i].rank = 0;
        if (mw_tp_on(m) && ts->split != MW_TS_WHOLE) { /* a shard: the optimizer keeps the whole tensor's blocks */
            const int G = ts->groups ? ts->groups : 1, T = m->cfg.tp;
            t[i].split = ts->split == MW_TS_ROWS ? MW_OPT_SHARD_ROWS : MW_OPT_SHARD_COLS;
            t[i].grows = ts->gdims[0], t[i].gcols = ts->ndim == 2 ? ts->gdims[1] : 0;
            t[i].groups = G, t[i].per = (ts->gdims[0] / G + T - 1) / T; /* rank: mw_model_set_comm */
        }
    }
    mw_status st = mw_opt_layout_init(&m->opt, &m->cfg, m->nfloats, m->ntensors, t);
    free(t);
    return st;
}

static mw_status plan_model_like(mw_model *m, mw_planner *pl, mw_plan_summary *s, const mw_planner *like);
static mw_status plan_model_within(mw_model *m, mw_planner *pl, mw_plan_summary *s, const mw_planner *like,
                                   uint64_t limit, int *placed);

/* ---- a 1F1B stage's cut walk (src/memory/period.h, mw_period_cut) ------------------------------ */

static int cut_on = 1;
static long cut_whole;

int mw_graph_set_cut(int on) {
    const int was = cut_on;
    cut_on = on;
    return was;
}

long mw_graph_cut_fallbacks(void) { return cut_whole; }

/* A pipeline stage's placement repeats every unit micro-batches (mw_planner.unit; 0: plain best
 * fit). 1F1B's steady state: every micro-batch (its periodic placement measured at the best fit's
 * peak on all but 2 of 216 small layouts, +0.1% there). The interleaved schedule's: every P, from
 * MW_VPP_PERIODIC micro-batches; below, best fit, because a periodic placement of it measured 0 to
 * 8% over best fit's peak (gpt3-175b --pp 16 --vpp 2, llama2-70b --pp 8 --vpp 5; docs/cluster.md
 * "Speed"), while best fit's cost grows with M (1.4 s at 512). */
#define MW_VPP_PERIODIC 256
static int stage_unit(const mw_config *c) {
    if (c->pp <= 1) return 0;
    if (c->vpp <= 1) return 1;
    return c->accum > MW_VPP_PERIODIC ? c->pp : 0;
}

/* The last cut a summary plan settled on (this thread's): the next plan of the same stage, its other
 * ZeRO ranks', walks that many first. */
static _Thread_local struct {
    mw_config key; /* rank 0 */
    int walked;
} cut_last;

/* The micro-batches a stage's summary plan walks first (mw_period_cut then says how many it needs):
 * the last plan's cut for the same stage, else a few times those in flight, which see the warm-up,
 * the cool-down and the margins; 0 when the plan walks them all: no periodic placement, too few
 * micro-batches to take a period out (about 5 times those in flight stay), or a summary that counts
 * every op (the disk tier's visits and reads, --offload auto's predictions). */
static int cut_first(const mw_model *m) {
    const mw_config *c = &m->cfg;
    const int u = stage_unit(c);
    if (!cut_on || !u || c->inference || c->offload != MW_OFFLOAD_NONE || m->offload != MW_OFFLOAD_NONE) return 0;
    mw_config key = m->gcfg;
    key.rank = 0;
    if (cut_on == 1 && cut_last.walked && memcmp(&key, &cut_last.key, sizeof key) == 0) return cut_last.walked;
    const int w = c->vpp > 1 ? (mw_layout_in_flight(c, c->pp_stage) + c->vpp - 1) / c->vpp : c->pp - c->pp_stage;
    const int n = ((cut_on == 2 ? w + 1 : 3 * w + 8) + u - 1) / u * u; /* a multiple of the unit */
    return c->accum > (cut_on == 2 ? n : 6 * w + 16) ? n : 0;
}

/* m's schedule again, of nmb micro-batches (0: cfg.accum), and what skeleton derives from it. */
static mw_status reschedule(mw_model *m, int nmb) {
    free(m->ops);
    m->ops = NULL;
    m->walk_mb = nmb;
    MW_TRY(mw_graph_build_schedule(m));
    if (!mw_config_layout(&m->cfg) || mw_graph_layout_runs(&m->cfg)) MW_TRY(mw_graph_build_transfers(m));
    return MW_OK;
}

/* The walk into pl (unplaced). A stage whose skeleton scheduled a cut (m->walk_mb) walks cut
 * schedules until mw_period_cut takes one as the whole schedule's fold, or all M micro-batches: too
 * few to take a period out, or refused (the fold's conditions, or 20 walks without agreement:
 * counted, mw_graph_cut_fallbacks). */
static mw_status walk_plan(mw_model *m, mw_planner *pl) {
    const int M = m->cfg.accum, u = stage_unit(&m->cfg);
    for (int tries = 0; m->walk_mb > 0; tries++) {
        mw_planner_init(pl, m->nops);
        pl->unit = u;
        mw_status st = mw_graph_walk(m, pl, NULL, NULL);
        int want = 0;
        if (st == MW_OK && mw_period_cut(pl, u, m->walk_mb, M, &want)) {
            cut_last.key = m->gcfg, cut_last.key.rank = 0, cut_last.walked = m->walk_mb;
            return MW_OK;
        }
        mw_planner_free(pl);
        if (st != MW_OK) return st;
        if (tries == 19 || want < 0) cut_whole++; /* refused: the fold's conditions, or no agreement */
        if (tries == 19 || want <= 0 || want >= M || want % u) want = 0;
        MW_TRY(reschedule(m, want));
    }
    mw_planner_init(pl, m->nops);
    pl->unit = u; /* a pipeline stage: its steady state placed once for every period (src/memory/period.h) */
    const mw_status st = mw_graph_walk(m, pl, NULL, NULL);
    if (st != MW_OK) mw_planner_free(pl); /* a refused walk (e.g. --act-compress on a model without tolerant values) */
    return st;
}

/* Plans the model's buffers: fills pl (placed) and s. */
mw_status mw_graph_plan_model(mw_model *m, mw_planner *pl, mw_plan_summary *s) { return plan_model_like(m, pl, s, NULL); }

/* mw_graph_plan_model, its placement derived from like's (placed) where that is exact
 * (mw_planner_place_like: another ZeRO rank of the same stage), else placed. */
static mw_status plan_model_like(mw_model *m, mw_planner *pl, mw_plan_summary *s, const mw_planner *like) {
    int placed;
    return plan_model_within(m, pl, s, like, 0, &placed);
}

/* plan_model_like, unless the bytes alive together at one op of the walk exceed limit (> 0): then
 * nothing is placed (*placed 0, pl freed) and s holds the walk's figures only (live_peak, category,
 * flat_floats, expert_floats; peak 0). The live sums need no offsets, so they come before the
 * placement, which is most of a plan's time. */
static mw_status plan_model_within(mw_model *m, mw_planner *pl, mw_plan_summary *s, const mw_planner *like,
                                   uint64_t limit, int *placed) {
    *placed = 0;
    mw_status st = walk_plan(m, pl);
    if (st != MW_OK) return st;
    memset(s, 0, sizeof *s);
    s->period = pl->unit;
    s->flat_floats = m->nfloats;
    s->expert_floats = m->expert_floats;
    uint64_t *live = calloc((size_t)m->nops * MW_CAT_COUNT, sizeof(uint64_t));
    if (!live) {
        mw_planner_free(pl);
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    }
    mw_planner_live_all(pl, live);
    for (int op = 0; op < m->nops; op++) {
        uint64_t total = 0;
        for (int k = 0; k < MW_CAT_COUNT; k++) {
            uint64_t v = live[(size_t)op * MW_CAT_COUNT + k];
            total += v;
            if (v > s->category[k]) s->category[k] = v;
        }
        if (total > s->live_peak) s->live_peak = total;
    }
    free(live);
    if (limit && s->live_peak > limit) { /* the arena holds all of them apart: its peak is over limit too */
        mw_planner_free(pl);
        return MW_OK;
    }
    if (!(like && mw_planner_place_like(pl, like))) st = mw_planner_place(pl);
    if (st != MW_OK) {
        mw_planner_free(pl);
        return st;
    }
    *placed = 1;
    s->peak = pl->peak;
    s->budget = m->cfg.budget;
    s->offload = m->offload;
    mw_graph_chunks_pin(m, s->offload_pin, sizeof s->offload_pin);
    if (m->offload != MW_OFFLOAD_NONE) {
        mw_offload_layout lay;
        mw_graph_disk_layout(m, &lay);
        const uint64_t *ab = lay.arr_bytes, acc = (uint64_t)m->cfg.accum;
        s->disk[MW_CAT_PARAMS] = ab[MW_ARR_P] + ab[MW_ARR_H];
        s->disk[MW_CAT_GRADS] = ab[MW_ARR_G];
        s->disk[MW_CAT_OPTIM] = ab[MW_ARR_M] + ab[MW_ARR_V];
        s->disk_file = lay.file_bytes;
        s->disk_staging = lay.staging_bytes;
        /* the norm's pass reads the gradients, and each of the optimizer's passes the arrays it
         * reads, writing back those it writes; each micro-batch writes the gradients, and all but
         * the first read them back; the parameters' reads of the blocks' visits, each micro-batch */
        uint64_t ord, owr;
        mw_graph_opt_traffic(m, &lay, &ord, &owr);
        s->disk_read = ord + (mw_graph_norm_fused(m) ? 0 : ab[MW_ARR_G]) + (acc - 1) * ab[MW_ARR_G];
        s->disk_write = owr + acc * ab[MW_ARR_G];
        if (mw_graph_params_on_disk(m)) /* the first micro-batch's visits, and the others' (acc - 1) */
            for (int j = 0; j < 3 * m->nvisit; j++) {
                const uint64_t n1 = (uint64_t)m->visit_carry; /* micro-batches that start from the slots' state */
                if (m->visit_rd[j].seg >= 0) s->disk_read += (acc - n1) * mw_graph_visit_bytes(m, m->visit_rd[j].seg);
                if (n1 && m->visit_rd1[j].seg >= 0) s->disk_read += n1 * mw_graph_visit_bytes(m, m->visit_rd1[j].seg);
            }
        s->disk_read += acc * mw_graph_ends_param_reads(m); /* the ends' parameters, each micro-batch (ends.c) */
    }
    const uint64_t act_disk = mw_graph_act_disk_bytes(m); /* swapped activations: each micro-batch writes and reads them */
    if (act_disk) {
        s->disk_file += act_disk;
        s->disk_read += (uint64_t)m->cfg.accum * act_disk;
        s->disk_write += (uint64_t)m->cfg.accum * act_disk;
    }
    mw_graph_act_summary(m, s);
    s->fits = s->budget == 0 || s->peak <= s->budget;
    /* the disk is part of the budget: a file the folder cannot hold does not fit, and a run is
     * refused before it writes anything (auto passes such placements over) */
    uint64_t room;
    if (s->disk_file && m->cfg.offload_dir[0] && mw_scratch_room(m->cfg.offload_dir, &room)) {
        s->disk_room = room;
        s->disk_short = s->disk_file > room;
        if (s->disk_short) s->fits = 0;
    }
    mw_graph_policy_text(m, s->policy, sizeof s->policy);
    if (!m->cfg.inference && m->seg > 0) {
        snprintf(s->pin, sizeof s->pin, "every:%d", m->seg);
    } else if (!m->cfg.inference && m->cfg.n_layer <= MW_MAX_BLOCK_POLICIES) {
        memcpy(s->pin, "blocks:", 7);
        for (int l = 0; l < m->cfg.n_layer; l++) s->pin[7 + l] = "nsf"[m->pol[l]];
    } else if (!m->cfg.inference) { /* more blocks than a blocks: string holds: one policy */
        snprintf(s->pin, sizeof s->pin, "%s", mw_graph_policy_name(m->pol[0]));
    }
    return MW_OK;
}

const char *mw_tier_name(mw_tier t) { return t == MW_TIER_DEVICE ? "device" : t == MW_TIER_DISK ? "disk" : "?"; }

/* s->pred_step_s from s's measured costs and disk (mw_plan_summary): the micro-batches' ops beside
 * their transfers, then the norm's pass and the optimizer's passes, each phase the longer of its
 * compute and its transfers (the optimizer's compute unmeasured: its transfers alone). The phases'
 * bytes are s->disk_read and s->disk_write split as mw_graph_plan_model counts them (swapped
 * activations, written and read by the micro-batches, in their phase). */
static void predict_step(const mw_model *m, mw_plan_summary *s) {
    if (s->pred_compute_s < 0 || !(s->disk_read_bw > 0) || !(s->disk_write_bw > 0)) return;
    uint64_t ord = 0, owr = 0, G = 0; /* model states on disk (not only swapped activations) */
    if (m->offload != MW_OFFLOAD_NONE) {
        mw_offload_layout lay;
        mw_graph_disk_layout(m, &lay);
        mw_graph_opt_traffic(m, &lay, &ord, &owr);
        G = mw_graph_norm_fused(m) ? 0 : lay.arr_bytes[MW_ARR_G]; /* the norm's pass reads the gradients once */
    }
    const double rb = s->disk_read_bw, wb = s->disk_write_bw;
    const double mb_io = (double)(s->disk_read - ord - G) / rb + (double)(s->disk_write - owr) / wb;
    const double norm_io = (double)G / rb, opt_io = (double)ord / rb + (double)owr / wb;
    s->pred_step_s = (s->pred_compute_s > mb_io ? s->pred_compute_s : mb_io) + norm_io + opt_io;
}

/* The predictions of s (mw_plan_summary.pred_*) for --offload auto: the recomputation's seconds
 * (also when force), the disk tier's when the plan has one and a folder to measure (4 MiB of
 * buffers outside the plan, once per process: only auto pays it; estimate measures on its own). */
static mw_status predict(mw_model *m, mw_plan_summary *s, int force) {
    const mw_config *c = &m->cfg;
    s->pred_recompute_s = s->pred_disk_s = s->pred_compute_s = s->pred_step_s = -1;
    s->disk_read_bw = s->disk_write_bw = 0;
    snprintf(s->offload_why, sizeof s->offload_why, "%s", m->offload_why);
    if (c->inference) return MW_OK;
    if (force || c->offload == MW_OFFLOAD_AUTO) {
        double kc[64];
        MW_TRY(mw_graph_measure_costs(c, m->arch, kc));
        s->pred_recompute_s = mw_graph_ops_cost(m, m->head_op + 1, kc); /* the forward ops after the head */
        s->pred_compute_s = c->accum * mw_graph_step_cost(m, kc);
    }
    /* a folder that cannot be measured (too full for the 32 MiB, not writable) leaves the prediction
     * unknown; the run itself then says what is wrong when it makes its own file */
    if (s->disk_file && c->offload_dir[0] && (force || c->offload == MW_OFFLOAD_AUTO) &&
        mw_offload_measure(c->offload_dir, &s->disk_read_bw, &s->disk_write_bw) == MW_OK) {
        s->pred_disk_s = (double)s->disk_read / s->disk_read_bw + (double)s->disk_write / s->disk_write_bw;
        predict_step(m, s);
    }
    return MW_OK;
}

/* A dry run for cfg: a model without memory and its placed plan. On success the caller frees
 * both (mw_planner_free, mw_model_destroy); on failure nothing is left. */
static mw_status plan_dry(const mw_model_def *arch, const mw_config *cfg, mw_model **m, mw_planner *pl,
                          mw_plan_summary *s, int cut) {
    MW_TRY(model_skeleton(m, arch, cfg, cut));
    mw_status st = mw_graph_plan_model(*m, pl, s);
    if (st == MW_OK) {
        st = predict(*m, s, 0);
        if (st != MW_OK) mw_planner_free(pl);
    }
    if (st != MW_OK) mw_model_destroy(*m);
    return st;
}

/* mw_plan with the recomputation's predicted seconds, whatever cfg's offload. */
mw_status mw_graph_plan_predicted(const mw_model_def *arch, const mw_config *cfg, mw_plan_summary *s) {
    mw_model *m;
    mw_planner pl;
    MW_TRY(model_skeleton(&m, arch, cfg, 0));
    mw_status st = mw_graph_plan_model(m, &pl, s);
    if (st == MW_OK) {
        mw_planner_free(&pl);
        st = predict(m, s, 1);
    }
    mw_model_destroy(m);
    return st;
}

mw_status mw_graph_plan_buffers(const mw_model_def *arch, const mw_config *cfg, mw_plan_buffer **out, int *n) {
    *out = NULL;
    *n = 0;
    mw_model *m;
    mw_planner pl;
    mw_plan_summary s;
    MW_TRY(plan_dry(arch, cfg, &m, &pl, &s, 0));
    mw_status st = MW_OK;
    mw_plan_buffer *b = calloc((size_t)pl.n + 2, sizeof *b);
    if (!b) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int i = 0; st == MW_OK && i < pl.n; i++) {
        const mw_pbuf *p = &pl.b[i];
        const char *suffix = mw_graph_act_tag_name(m, p->tag);
        if (p->layer >= 0)
            snprintf(b[i].name, sizeof b[i].name, "h.%d.%s%s", p->layer, p->name, suffix);
        else
            snprintf(b[i].name, sizeof b[i].name, "%s", p->name);
        b[i].category = (mw_category)p->cat;
        b[i].tier = MW_TIER_DEVICE;
        b[i].bytes = p->bytes;
        b[i].offset = p->offset;
        b[i].first = p->first;
        b[i].last = p->last;
    }
    if (st == MW_OK) *n = pl.n;
    if (st == MW_OK && s.disk_file) { /* the disk tier's one file: every array the mode puts there */
        if (s.offload != MW_OFFLOAD_NONE)
            snprintf(b[pl.n].name, sizeof b[pl.n].name, "disk_state (%s)", mw_offload_name(s.offload));
        else
            snprintf(b[pl.n].name, sizeof b[pl.n].name, "disk_state (activations)");
        b[pl.n].category = s.disk[MW_CAT_PARAMS] ? MW_CAT_PARAMS : s.disk[MW_CAT_GRADS] ? MW_CAT_GRADS
                           : s.disk[MW_CAT_OPTIM] ? MW_CAT_OPTIM : MW_CAT_ACTS;
        b[pl.n].tier = MW_TIER_DISK;
        b[pl.n].bytes = s.disk_file;
        b[pl.n].first = 0;
        b[pl.n].last = m->nops - 1;
        *n = pl.n + 1;
    }
    mw_planner_free(&pl);
    mw_model_destroy(m);
    *out = b;
    return st;
}

/* The disk tier's bytes op i moves in the first micro-batch of a step (the one a timeline draws):
 * a visit's parameter reads, a block's gradients written behind after its backward, and at the
 * optimizer the norm's and the update's passes over the file. */
static void timeline_transfers(const mw_model *m, int i, mw_plan_op *o) {
    mw_graph_act_op_io(m, i, &o->disk_read, &o->disk_write); /* swapped activations */
    if (m->offload == MW_OFFLOAD_NONE) return;
    if (i == m->opt_op) {
        mw_offload_layout lay;
        mw_graph_disk_layout(m, &lay);
        uint64_t ord, owr;
        mw_graph_opt_traffic(m, &lay, &ord, &owr);
        o->disk_read += ord + (mw_graph_norm_fused(m) ? 0 : lay.arr_bytes[MW_ARR_G]); /* the norm's pass, the update's */
        o->disk_write += owr;
        return;
    }
    o->disk_read += mw_graph_ends_op_read(m, i, 1); /* the ends on disk (ends.c) */
    o->disk_write += mw_graph_ends_op_write(m, i);
    if (mw_graph_params_on_disk(m) && m->op_pv && m->op_pv[i] >= 0)
        for (int e = 0; e < 3; e++) {
            const int r = m->visit_rd[3 * m->op_pv[i] + e].seg;
            if (r >= 0) o->disk_read += mw_graph_visit_bytes(m, r);
        }
    if (m->op_ge && m->op_ge[i] && (!m->chunked || mw_graph_seg_disk(m, 1 + m->ops[i].layer, MW_ARR_G)))
        o->disk_write += mw_graph_grad_bytes(m, m->ops[i].layer); /* a chunk placement's blocks on disk */
}

mw_status mw_graph_plan_timeline(const mw_model_def *arch, const mw_config *cfg, mw_plan_op **ops, int *nops) {
    *ops = NULL;
    *nops = 0;
    mw_model *m;
    mw_planner pl;
    mw_plan_summary s;
    MW_TRY(plan_dry(arch, cfg, &m, &pl, &s, 0));
    mw_status st = MW_OK;
    mw_plan_op *o = calloc((size_t)m->nops, sizeof *o);
    uint64_t *live = calloc((size_t)m->nops * MW_CAT_COUNT, sizeof(uint64_t));
    if (!o || !live) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) mw_planner_live_all(&pl, live);
    for (int i = 0; st == MW_OK && i < m->nops; i++) {
        const int k = m->ops[i].kind, l = m->ops[i].layer;
        const char *kn = mw_graph_kind(m, k)->name;
        memcpy(o[i].live, live + (size_t)i * MW_CAT_COUNT, sizeof o[i].live);
        if (s.disk_file) timeline_transfers(m, i, &o[i]);
        snprintf(o[i].op, sizeof o[i].op, "%s", kn);
        if (mw_graph_kind_is_step(m, k))
            snprintf(o[i].name, sizeof o[i].name, "%s", kn);
        else if (mw_graph_kind_is_forward(m, k))
            snprintf(o[i].name, sizeof o[i].name, "%s %d", m->ops[i].bwd ? "recompute" : "fwd", l);
        else
            snprintf(o[i].name, sizeof o[i].name, "bwd %d", l);
    }
    free(live);
    if (st == MW_OK) mw_graph_act_timeline(m, &pl, o);
    const int n = m->nops;
    mw_planner_free(&pl);
    mw_model_destroy(m);
    if (st != MW_OK) {
        free(o);
        return st;
    }
    *ops = o;
    *nops = n;
    return MW_OK;
}

/* The placement of cfg.offload. Auto plans every placement under cfg's recomputation policy and
 * takes, among those that fit the budget, the fastest by predicted time: recomputation plus the
 * disk's transfers at the bandwidth measured in the offload folder, counted as if none overlapped
 * compute (which favours memory); without a folder to measure, the least on disk that fits. */
static mw_status resolve_modes(mw_model *m) {
    const mw_config *c = &m->cfg;
    /* the placements from least to most on disk */
    static const int MODES[4] = {MW_OFFLOAD_NONE, MW_OFFLOAD_OPTIMIZER, MW_OFFLOAD_OPTIMIZER_GRADS, MW_OFFLOAD_ALL};
    double t[4];
    int fits[4], short_disk[4] = {0, 0, 0, 0}, measured = 1, best = -1;
    for (int i = 0; i < 4; i++) {
        mw_config k = m->gcfg; /* as given: a pipeline stage's plan derives its local view again */
        k.offload = MODES[i];
        memset(k.offload_spec, 0, sizeof k.offload_spec);
        if (c->dp && (MODES[i] > MW_OFFLOAD_OPTIMIZER || (MODES[i] == MW_OFFLOAD_OPTIMIZER && c->zero < 1))) {
            fits[i] = 0, t[i] = 0; /* --zero: only a shard of the optimizer state goes to disk */
            continue;
        }
        mw_plan_summary ps;
        MW_TRY(mw_graph_plan_predicted(m->arch, &k, &ps));
        fits[i] = ps.fits; /* the disk tier within the folder's room too */
        short_disk[i] = ps.disk_short && (!ps.budget || ps.peak <= ps.budget);
        t[i] = ps.pred_recompute_s + (i ? ps.pred_disk_s : 0.0);
        if (i && ps.pred_disk_s < 0) measured = 0;
    }
    for (int i = 0; i < 4; i++)
        if (fits[i] && (best < 0 || (measured && t[i] < t[best]))) best = i;
    char *w = m->offload_why;
    const size_t wn = sizeof m->offload_why;
    size_t u = 0;
    if (best < 0) { /* the smallest plan allowed, which the budget check then refuses */
        m->offload = !c->dp ? MW_OFFLOAD_ALL : c->zero >= 1 ? MW_OFFLOAD_OPTIMIZER : MW_OFFLOAD_NONE;
        snprintf(w, wn, "no placement fits the budget%s",
                 c->offload_dir[0] ? " with its disk tier in --offload-dir's room (free space and stale scratch files)" : "");
        return MW_OK;
    }
    m->offload = MODES[best];
    if (!measured) {
        snprintf(w, wn, "the least on disk that fits (no --offload-dir to measure the disk and compare times)");
        return MW_OK;
    }
    u += (size_t)snprintf(w + u, wn - u, "predicted s/step (recomputation + transfers):");
    for (int i = 0; i < 4 && u < wn; i++)
        u += fits[i] ? (size_t)snprintf(w + u, wn - u, " %s %.2f", mw_offload_name(MODES[i]), t[i])
                     : (size_t)snprintf(w + u, wn - u, " %s %s", mw_offload_name(MODES[i]),
                                        short_disk[i] ? "over the disk's room" : "over budget");
    return MW_OK;
}

/* ... and the chunk placement: an explicit form's, or auto's over the chunks (chunkplace.c) where
 * it can place them (one process, up to MW_MAX_BLOCK_POLICIES blocks), else over the modes. */
static mw_status resolve_offload(mw_model *m) {
    const mw_config *c = &m->cfg;
    m->offload = c->inference ? MW_OFFLOAD_NONE : c->offload;
    m->offload_why[0] = 0;
    if (m->offload != MW_OFFLOAD_AUTO) return mw_graph_chunks_set(m, c->inference ? "" : c->offload_spec);
    m->offload = MW_OFFLOAD_NONE;
    if (!c->budget) {
        snprintf(m->offload_why, sizeof m->offload_why, "no --budget: every state in memory");
        return mw_graph_chunks_set(m, "");
    }
    if (!c->dp && !mw_config_layout(c) && c->n_layer > 0 && c->n_layer <= MW_MAX_BLOCK_POLICIES)
        return mw_graph_chunks_auto(m);
    MW_TRY(resolve_modes(m));
    return mw_graph_chunks_set(m, "");
}


/* The model without memory. cut: a summary's plan, which a 1F1B stage may walk cut (cut_first). */
static mw_status model_skeleton(mw_model **out, const mw_model_def *arch, const mw_config *cfg, int cut) {
    MW_TRY(mw_config_validate(cfg));
    if (!arch) return mw_fail(MW_ERR_ARG, "unknown model family %d", cfg->arch);
    mw_model *m = calloc(1, sizeof *m);
    if (!m) return mw_fail(MW_ERR_NOMEM, "cannot allocate the model");
    m->cfg = *cfg;
    m->arch = arch;
    m->nmb = 1;
    m->gcfg = *cfg;
    if (mw_config_layout(cfg)) mw_graph_layout_local(&m->cfg); /* the stage's blocks, from 0 */
    if (mw_config_layout(cfg) && cfg->tp > 1 && (!arch->lslot_split || !arch->gslot_split)) {
        free(m);
        return mw_fail(MW_ERR_ARG, "--tp: the %s model declares no tensor-parallel split", arch->name);
    }
    cfg = &m->cfg;
    m->nthreads = omp_get_max_threads();
    m->gw.nthreads = m->nthreads;
    m->gw.bf16 = cfg->precision == MW_PRECISION_BF16; /* every product of the model's kernels */
    m->gw.floats = mw_gemm_ws_floats(m->nthreads, mw_gemm_plan_cols(cfg->n_embd, m->gw.bf16));
    m->pol = calloc((size_t)cfg->n_layer, 1);
    m->building_layer = -1;
    m->pad_q = cfg->inference ? 16 : mw_opt_pad_quantum(cfg->optim);
    for (int k = 0; k < 3; k++) m->pslot_seg[k] = m->pslot_id[k] = m->gslot_seg[k] = m->gslot_id[k] = -1;
    m->nready = -1;
    m->eacc = m->eid[0] = m->eid[1] = -1;
    m->efresh[0] = m->efresh[1] = 1;
    mw_status s = m->pol ? arch->build_table(m) : mw_fail(MW_ERR_NOMEM, "cannot allocate the layer table");
    if (s == MW_OK && cfg->pp > 1 && cfg->pp_stage > 0) { /* the blocks' tensors before this stage's */
        int nb = 0;
        for (int i = 0; i < m->ntensors; i++) nb += m->tensors[i].layer >= 0;
        m->tensor_base = m->pre_skipped + cfg->pp_first * (cfg->n_layer > 0 ? nb / cfg->n_layer : 0);
    }
    if (s == MW_OK && !cfg->inference) s = build_optim(m);
    if (s == MW_OK) s = resolve_offload(m);
    if (s == MW_OK) s = mw_graph_act_resolve(m); /* --act-offload auto, under that placement */
    if (s == MW_OK) s = mw_graph_build_segments(m);
    if (s == MW_OK) s = mw_graph_resolve_policy(m);
    if (cut) m->walk_mb = cut_first(m);
    if (s == MW_OK) s = mw_graph_build_schedule(m);
    /* a layout that only plans (not a pipeline's or --tp's that runs) has no transfers to read off */
    if (s == MW_OK && (!mw_config_layout(cfg) || mw_graph_layout_runs(cfg))) s = mw_graph_build_transfers(m);
    if (s != MW_OK) {
        mw_model_destroy(m);
        return s;
    }
    *out = m;
    return MW_OK;
}

mw_status mw_graph_config_tensor(const mw_model_def *arch, const mw_config *cfg, int i, char *name, size_t name_len,
                                 int *ndim, int dims[2]) {
    mw_model *m;
    MW_TRY(model_skeleton(&m, arch, cfg, 0));
    mw_status s = MW_OK;
    if (i < 0 || i >= m->ntensors) {
        s = mw_fail(MW_ERR_ARG, "tensor index %d out of range", i);
    } else {
        snprintf(name, name_len, "%s", m->tensors[i].name);
        *ndim = m->tensors[i].ndim;
        dims[0] = m->tensors[i].dims[0];
        dims[1] = m->tensors[i].dims[1];
    }
    mw_model_destroy(m);
    return s;
}

struct mw_plan_ref {
    mw_config cfg; /* rank 0 */
    mw_planner pl;
};

mw_status mw_graph_plan_like(const mw_model_def *arch, const mw_config *cfg, mw_plan_summary *out, mw_plan_ref **ref) {
    mw_config key = *cfg;
    key.rank = 0;
    mw_model *m;
    mw_planner pl;
    if (*ref && memcmp(&(*ref)->cfg, &key, sizeof key) != 0) { /* another stage or layout: start again */
        mw_plan_ref_free(*ref);
        *ref = NULL;
    }
    MW_TRY(model_skeleton(&m, arch, cfg, 1));
    mw_status st = plan_model_like(m, &pl, out, *ref ? &(*ref)->pl : NULL);
    if (st == MW_OK) st = predict(m, out, 0);
    mw_model_destroy(m);
    if (st == MW_OK && !*ref && (*ref = malloc(sizeof **ref)) != NULL) { /* kept for the next rank */
        (*ref)->cfg = key;
        (*ref)->pl = pl;
        return MW_OK;
    }
    mw_planner_free(&pl);
    return st;
}

void mw_plan_ref_free(mw_plan_ref *ref) {
    if (!ref) return;
    mw_planner_free(&ref->pl);
    free(ref);
}

mw_status mw_graph_plan_placed(const mw_model_def *arch, const mw_config *cfg, mw_planner *pl, int *walked) {
    mw_model *m;
    mw_plan_summary s;
    MW_TRY(model_skeleton(&m, arch, cfg, 1));
    mw_status st = mw_graph_plan_model(m, pl, &s);
    *walked = m->walk_mb;
    mw_model_destroy(m);
    return st;
}

mw_status mw_graph_plan_within(const mw_model_def *arch, const mw_config *cfg, uint64_t limit, mw_plan_summary *out,
                               int *placed) {
    mw_model *m;
    mw_planner pl;
    MW_TRY(model_skeleton(&m, arch, cfg, 1));
    mw_status st = plan_model_within(m, &pl, out, NULL, limit, placed);
    if (st == MW_OK && *placed) {
        mw_planner_free(&pl);
        st = predict(m, out, 0);
    }
    mw_model_destroy(m);
    return st;
}

mw_status mw_graph_plan(const mw_model_def *arch, const mw_config *cfg, mw_plan_summary *out) {
    mw_model *m;
    mw_planner pl;
    MW_TRY(plan_dry(arch, cfg, &m, &pl, out, 1));
    mw_planner_free(&pl);
    mw_model_destroy(m);
    return MW_OK;
}

mw_status mw_graph_model_create(mw_model **out, const mw_model_def *arch, const mw_config *cfg) {
    *out = NULL;
    if (mw_config_layout(cfg) && !mw_graph_layout_runs(cfg)) /* planned only: the layouts that do not run here */
        return mw_fail(MW_ERR_ARG, "--%s runs in a later version: estimate and plan only",
                       cfg->tp > 1 ? "tp" : cfg->sp ? "sp" : cfg->pp > 1 ? "pp" : "ep");
    if (mw_config_layout(cfg) && !arch->runs_layouts) /* planned, never run: no kernels for its shards */
        return mw_fail(MW_ERR_ARG, "--%s with the %s family runs in a later version: estimate and plan only (train runs "
                       "layouts of the GPT-2 and Llama families)", cfg->tp > 1 ? "tp" : cfg->sp ? "sp" : cfg->pp > 1 ? "pp" : "ep",
                       arch->name);
    if (cfg->pp > 1) MW_TRY(mw_pipe_check(cfg));
    MW_TRY(mw_tp_check(cfg));
    mw_model *m;
    MW_TRY(model_skeleton(&m, arch, cfg, 0));
    mw_planner pl;
    mw_status s = mw_graph_plan_model(m, &pl, &m->plan);
    if (s != MW_OK) {
        mw_model_destroy(m);
        return s;
    }
    s = predict(m, &m->plan, 0);
    if (s != MW_OK) {
        mw_planner_free(&pl);
        mw_model_destroy(m);
        return s;
    }
    if (!m->plan.fits) {
        mw_budget_refusal(m);
        s = MW_ERR_BUDGET;
    }
    if (s == MW_OK) {
        m->opp = calloc((size_t)m->nops * MW_MAXACC, sizeof *m->opp);
        if (!m->opp) s = mw_fail(MW_ERR_NOMEM, "cannot allocate the schedule's pointers");
    }
    if (s == MW_OK) s = mw_arena_init(&m->arena, m->plan.peak);
    if (s == MW_OK) s = mw_graph_walk(m, NULL, pl.b, m->arena.base);
    mw_planner_free(&pl);
    /* the disk tier is created (its file preallocated) before step 1, after the plan fits */
    if (s == MW_OK && m->nseg > 1) { /* the resident segments are bound; the blocks come and go */
        const int L = m->cfg.n_layer;
        if (!m->params) m->pbase[0] = m->pres[0], m->pbase[L + 1] = m->pres[1];
        m->gbase[0] = m->gres[0], m->gbase[L + 1] = m->gres[1];
        memset(m->gfresh, 1, (size_t)L);
        s = mw_graph_chunks_bind(m); /* a chunk placement's blocks kept in memory */
    }
    if (s == MW_OK && m->offload != MW_OFFLOAD_NONE) {
        int bits[MW_ARR_COUNT];
        mw_graph_disk_bits(m, bits);
        const size_t *lo;
        const unsigned *mask;
        const int n = mw_graph_disk_segs(m, &lo, &mask);
        s = mw_offload_create_ex(&m->off, m->cfg.offload_dir, n, lo, mask, bits, m->off_stage, mw_graph_act_disk_bytes(m));
    }
    if (s == MW_OK) s = mw_graph_act_open(m); /* the swaps' region: in that file, or a file of its own */
    if (s != MW_OK) {
        mw_model_destroy(m);
        return s;
    }
    if (m->arch->bound) m->arch->bound(m);
    *out = m;
    return MW_OK;
}

void mw_model_destroy(mw_model *m) {
    if (m && m->zpre) (void)mw_graph_zero3_wait(m); /* never free a slot a gather still writes */
    if (!m) return;
    mw_graph_act_free(m); /* before the disk tier: its own file, when it has one */
    mw_offload_destroy(m->off);
    mw_arena_release(&m->arena);
    free(m->tensors);
    mw_opt_layout_free(&m->opt);
    free(m->pol);
    free(m->act_sel);
    free(m->ops);
    free(m->opp);
    free(m->seg_lo), free(m->seg_mask), free(m->pbase), free(m->gbase), free(m->gfresh);
    mw_graph_chunks_free(m);
    free(m->op_pv), free(m->op_gb), free(m->op_ge), free(m->visit_seg), free(m->visit_slot), free(m->visit_rd);
    free(m->op_end);
    free(m->vec_t), free(m->vec_off);
    free(m->visit_rd1), free(m->visit_slot1);
    free(m);
}

const mw_config *mw_model_config(const mw_model *m) { return &m->cfg; }
const mw_plan_summary *mw_model_plan(const mw_model *m) { return &m->plan; }
int mw_model_num_tensors(const mw_model *m) { return m->ntensors; }

mw_status mw_model_tensor_info(const mw_model *m, int i, mw_param_info *info, int access) {
    if (i < 0 || i >= m->ntensors) return mw_fail(MW_ERR_ARG, "tensor index %d out of range", i);
    const mw_tensor *t = &m->tensors[i];
    info->name = t->name;
    info->ndim = t->ndim;
    info->dims[0] = t->dims[0];
    info->dims[1] = t->dims[1];
    info->numel = t->numel;
    info->decay = t->decay;
    /* on the disk tier, the block comes in (and is written back once another is asked for, or
     * before the next step): the caller may write the parameters */
    info->data = access ? mw_graph_param_access((mw_model *)m, i, 1) : mw_graph_tensor(m, 0, i);
    if (access && !info->data) return mw_graph_io_check(m);
    info->grad = m->cfg.inference ? NULL : mw_graph_tensor(m, 1, i);
    /* the moments by tensor: AdamW's alone, and not when ranks share them (mw_model_moment_view) */
    const int adam = m->cfg.optim == MW_OPTIM_ADAMW && !mw_graph_opt_sharded(m);
    info->m = adam && m->m ? (float *)m->m + t->offset : NULL;
    info->v = adam && m->v ? (float *)m->v + t->offset : NULL;
    return MW_OK;
}

mw_status mw_model_tensor(const mw_model *m, int i, mw_param_info *info) { return mw_model_tensor_info(m, i, info, 1); }

void mw_model_memory(const mw_model *m, uint64_t category[MW_CAT_COUNT], uint64_t *peak) {
    for (int k = 0; k < MW_CAT_COUNT; k++) category[k] = m->plan.category[k];
    *peak = m->plan.peak;
}

void mw_graph_fill_normal(mw_model *m, int i, uint64_t seed, double std) {
    if (m->cfg.tp > 1) { /* the whole tensor's values, this rank's kept (src/dist/tp.c) */
        mw_tp_fill_normal(m, i, seed, std);
        return;
    }
    const mw_tensor *t = &m->tensors[i];
    float *p = mw_graph_param_access(m, i, 1);
    if (!p) return; /* m->io_error says why */
    size_t nblk = (t->numel + MW_NORM_QUANTUM - 1) / MW_NORM_QUANTUM;
    /* blocks draw from their own stream: the same values for any thread count */
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblk; b++) {
        /* the tensor's index in the single-process table: a pipeline stage draws its run of it */
        uint64_t s = seed ^ ((uint64_t)(m->tensor_base + i + 1) << 40) ^ (b * 0x9E3779B97F4A7C15ull);
        mw_rng_next(&s);
        size_t j1 = (b + 1) * MW_NORM_QUANTUM < t->numel ? (b + 1) * MW_NORM_QUANTUM : t->numel;
        for (size_t j = b * MW_NORM_QUANTUM; j < j1; j += 2) { /* Box-Muller gives a pair */
            double r = sqrt(-2.0 * log(mw_rng_unit(&s))), th = 6.283185307179586 * mw_rng_unit(&s);
            p[j] = (float)(std * r * cos(th));
            if (j + 1 < j1) p[j + 1] = (float)(std * r * sin(th));
        }
    }
}

void mw_model_init(mw_model *m, uint64_t seed) { m->arch->init(m, seed); }
void mw_model_init_gpt2(mw_model *m, uint64_t seed) { mw_model_init(m, seed); }
