/* The step graph (graph.h): schedule, lifetimes, placement, binding, execution, recomputation
 * policies with auto's calibration and dynamic program. Model-agnostic: every model-specific
 * fact comes through m->arch. */
#include "graph.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/rng.h"
#include "../core/status.h"
#include "../memory/aio.h"
#include "../memory/offload.h"
#include "../memory/planner.h"
#include "../memory/scratch.h"
#include "../optim/adamw.h"
#include "budget.h"
#include "model.h"

static void policy_text(const mw_model *m, char *out, size_t len);
static mw_status zero3_wait(mw_model *m);
static mw_status io_check(const mw_model *m);
static const char *policy_name(int p);

void mw_graph_add_tensor(mw_model *m, const char *name, int r, int c, int decay, int pad) {
    mw_tensor *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = c ? 2 : 1;
    t->dims[0] = r;
    t->dims[1] = c;
    t->numel = (size_t)r * (c ? c : 1);
    t->offset = m->nfloats;
    t->decay = decay;
    t->layer = m->building_layer;
    t->seg = 0;
    const size_t q = m->pad_q ? m->pad_q : 16;
    if (!pad)
        m->nfloats += t->numel;
    else if (q == 16) /* 64-byte aligned */
        m->nfloats += (t->numel + 15) / 16 * 16;
    else /* the next tensor starts on a quantisation block */
        m->nfloats = (m->nfloats + t->numel + q - 1) / q * q;
}

void mw_graph_copy(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

void mw_graph_push(mw_model *m, int kind, int layer) {
    if (m->nops >= m->ops_cap) { /* build_schedule sizes ops generously; this is a model's bug */
        fprintf(stderr, "memwall: internal: schedule overflow\n");
        abort();
    }
    m->ops[m->nops].kind = (unsigned char)kind;
    m->ops[m->nops].layer = layer;
    m->nops++;
}

static int kind_is_forward_a(const mw_model_def *a, int k) { return (a->kinds[k].flags & MW_KF_FWD) != 0; }
static int kind_is_forward(const mw_model *m, int k) { return kind_is_forward_a(m->arch, k); }
static int kind_is_step(const mw_model *m, int k) {
    const mw_model_def *a = m->arch;
    return k == a->k_embed || k == a->k_head || k == a->k_logits || k == a->k_embed_bwd || k == a->k_opt;
}

/* ---- the schedule ----------------------------------------------------------------------------- */

static mw_status build_schedule(mw_model *m) {
    const mw_model_def *a = m->arch;
    const int L = m->cfg.n_layer;
    m->ops_cap = 64 * L + 64;
    m->ops = malloc(sizeof *m->ops * (size_t)m->ops_cap);
    if (!m->ops) return mw_fail(MW_ERR_NOMEM, "cannot allocate the schedule");
    m->nops = 0;
    mw_graph_push(m, a->k_embed, 0);
    for (int l = 0; l < L; l++) a->block_forward(m, l, 1);
    m->head_op = m->nops;
    if (m->cfg.inference) {
        mw_graph_push(m, a->k_logits, L);
        m->opt_op = -1;
        return MW_OK;
    }
    mw_graph_push(m, a->k_head, L);
    if (m->seg > 0) { /* segments [s, e] of seg blocks from the top: keep x_s, redo the rest */
        for (int e = L - 1; e >= 0;) {
            const int s = e / m->seg * m->seg;
            for (int l = s; l <= e; l++) a->block_forward(m, l, l < e);
            for (int l = e; l >= s; l--) a->block_backward(m, l, MW_P_NONE);
            e = s - 1;
        }
    } else {
        for (int l = L - 1; l >= 0; l--) a->block_backward(m, l, m->pol[l]);
    }
    mw_graph_push(m, a->k_embed_bwd, 0);
    m->opt_op = m->nops;
    mw_graph_push(m, a->k_opt, 0);
    return MW_OK;
}

/* Size, category and name of slot (global, or ngs + l*nls + value). */
static void slot_info(const mw_model *m, int slot, uint64_t *bytes, mw_category *cat, const char **name,
                      int *layer) {
    const mw_model_def *a = m->arch;
    if (slot < a->ngs) {
        a->gslot(m, slot, bytes, cat);
        *name = a->gslot_names[slot];
        *layer = -1;
        return;
    }
    const int v = (slot - a->ngs) % a->nls;
    *bytes = a->lslot(m, v);
    *cat = MW_CAT_ACTS;
    *name = a->lslot_names[v];
    *layer = (slot - a->ngs) / a->nls;
}

static int resolve_slot(const mw_model_def *a, int s, int layer) {
    if (s < 0) return -1 - s;
    if (s == MW_XN) return a->ngs + (layer + 1) * a->nls;
    return a->ngs + layer * a->nls + s;
}

static uint64_t seg_len(const mw_model *m, int s) { return m->seg_lo[s + 1] - m->seg_lo[s]; }

/* The blocks' gradients live on the disk tier (and their parameters too under ALL). */
static int grads_on_disk(const mw_model *m) {
    return m->offload == MW_OFFLOAD_OPTIMIZER_GRADS || m->offload == MW_OFFLOAD_ALL;
}

/* --precision bf16 keeps the blocks' gradients as bfloat16 between their backwards: each block's
 * accumulate in an fp32 slot during its backward and are rounded when it ends, into g16 in memory,
 * or in place before the disk tier's write (which stores fp32: the same values). The segments
 * before and after the blocks (embeddings, head, final norm) keep fp32 gradients. */
static int grads_b16(const mw_model *m) { return !m->cfg.inference && m->cfg.precision == MW_PRECISION_BF16; }
static int grads_mem16(const mw_model *m) { return grads_b16(m) && !grads_on_disk(m); }
/* The blocks' gradients are bound to a slot per block during backward: on disk, or bfloat16. */
static int grads_slotted(const mw_model *m) { return grads_on_disk(m) || grads_mem16(m) || mw_graph_grads_zero2(m); }

/* The disk tier's arrays of the optimizer's state: M and V where it has them. */
static unsigned opt_mask(const mw_model *m) {
    return (m->opt.bits[0] ? MW_ARR_BIT(MW_ARR_M) : 0) | (m->opt.bits[1] ? MW_ARR_BIT(MW_ARR_V) : 0);
}

/* Bits per element of the disk tier's arrays: gradients and parameters fp32, M and V the optimizer's. */
static void disk_bits(const mw_model *m, int bits[MW_ARR_COUNT]) {
    bits[MW_ARR_G] = bits[MW_ARR_P] = 32;
    bits[MW_ARR_M] = m->opt.bits[0] ? m->opt.bits[0] : 32;
    bits[MW_ARR_V] = m->opt.bits[1] ? m->opt.bits[1] : 32;
}

/* The disk tier's segments: the model's, or under --zero >= 1 three that put this rank's shard of
 * the optimizer state alone in the file (each rank offloads its own shard). */
static int disk_segs(const mw_model *m, const size_t **lo, const unsigned **mask) {
    if (mw_graph_opt_sharded(m)) {
        *lo = m->zoff_lo, *mask = m->zoff_mask;
        return 3;
    }
    *lo = m->seg_lo, *mask = m->seg_mask;
    return m->nseg;
}

static void disk_layout(const mw_model *m, mw_offload_layout *lay) {
    int bits[MW_ARR_COUNT];
    disk_bits(m, bits);
    const size_t *lo;
    const unsigned *mask;
    const int n = disk_segs(m, &lo, &mask);
    mw_offload_layout_of(n, lo, mask, bits, lay);
}

/* 1 when a chunk boundary of the disk tier's layout cuts a block of the quantised optimizer (then
 * adamw8bit needs its first pass), else 0. */
static int opt_split(const mw_model *m, const mw_offload_layout *lay) {
    const size_t *lo;
    const unsigned *mask;
    const int n = disk_segs(m, &lo, &mask);
    for (int s = 0; s < n; s++)
        for (size_t e = lo[s] + lay->chunk; e < lo[s + 1]; e += lay->chunk)
            if (mw_opt_splits(&m->opt, e)) return 1;
    return 0;
}

int mw_graph_opt_split(const mw_model *m) {
    if (!m->off) return 0;
    mw_offload_layout lay;
    disk_layout(m, &lay);
    return opt_split(m, &lay);
}

/* The bytes the optimizer's passes read from and write to the disk tier per step. */
static void opt_traffic(const mw_model *m, const mw_offload_layout *lay, uint64_t *rd, uint64_t *wr) {
    *rd = *wr = 0;
    const int split = opt_split(m, lay);
    for (int k = 0; k < m->opt.npasses; k++)
        for (int a = 0; a < MW_ARR_COUNT && mw_opt_pass_needed(&m->opt, k, split); a++) {
            if (m->opt.rd[k] & MW_ARR_BIT(a)) *rd += lay->arr_bytes[a];
            if (m->opt.wr[k] & MW_ARR_BIT(a)) *wr += lay->arr_bytes[a];
        }
}

/* The optimizer's layout over the parameter table. */
static mw_status build_optim(mw_model *m) {
    mw_opt_tensor *t = malloc(sizeof *t * (size_t)(m->ntensors > 0 ? m->ntensors : 1));
    if (!t) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *ts = &m->tensors[i];
        t[i].offset = ts->offset, t[i].numel = ts->numel, t[i].decay = ts->decay;
        t[i].rows = ts->dims[0], t[i].cols = ts->ndim == 2 ? ts->dims[1] : 0;
    }
    mw_status st = mw_opt_layout_init(&m->opt, &m->cfg, m->nfloats, m->ntensors, t);
    free(t);
    return st;
}

/* The floats of the largest block's staging slot (its segment, padded). */
static uint64_t block_slot_floats(const mw_model *m) {
    uint64_t mx = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const uint64_t n = mw_offload_pad(seg_len(m, 1 + l));
        if (n > mx) mx = n;
    }
    return mx;
}

static float *align_io(float *p) {
    const uintptr_t u = (uintptr_t)p;
    return (float *)((u + MW_AIO_ALIGN - 1) / MW_AIO_ALIGN * MW_AIO_ALIGN);
}

/* Adds every buffer of the step to pl (planning), or binds m's pointers to placed (offsets from
 * the planner, same order) inside base. The two modes make the same walk. */
/* --zero: this rank's shard, the exchange's round (at most the largest shard), and the disk tier's
 * segments around the shard */
static void zero_bounds(mw_model *m) {
    const mw_config *c = &m->cfg;
    uint64_t lo, hi, mx = 0;
    mw_zero_shard(m->nfloats, c->world, c->rank, &lo, &hi);
    m->zlo = lo, m->zhi = hi;
    for (int r = 0; r < c->world; r++) {
        uint64_t a, b;
        mw_zero_shard(m->nfloats, c->world, r, &a, &b);
        if (b - a > mx) mx = b - a;
    }
    /* the receive buffer is world rounds' worth: at most MW_ZERO_RECV floats in all (rounds of at
     * least 4096 floats per rank), so that it does not grow with the world size */
    uint64_t q = MW_ZERO_RECV / (uint64_t)c->world;
    if (q > MW_ZERO_BUCKET) q = MW_ZERO_BUCKET;
    if (q < 4096) q = 4096;
    m->zrq = mx < q ? (size_t)mx : (size_t)q;
    m->zoff_lo[0] = 0, m->zoff_lo[1] = m->zlo, m->zoff_lo[2] = m->zhi, m->zoff_lo[3] = m->nfloats;
    m->zoff_mask[0] = m->zoff_mask[2] = 0;
    m->zoff_mask[1] = opt_mask(m);
}

static mw_status walk(mw_model *m, mw_planner *pl, const mw_pbuf *placed, char *base) {
    const mw_config *c = &m->cfg;
    const mw_model_def *a = m->arch;
    const int L = c->n_layer, last = m->nops - 1, nslots = a->ngs + (L + 1) * a->nls;
    const uint64_t F = sizeof(float), N = (uint64_t)c->batch * c->seq;
    int idx = 0;
#define PERSIST(ptr, bytes, cat, nm)                                                               \
    do {                                                                                           \
        if (placed)                                                                                \
            (ptr) = (void *)(base + placed[idx++].offset);                                         \
        else                                                                                       \
            MW_TRY(mw_planner_add(pl, (nm), -1, (bytes), (cat), 0, last));                         \
    } while (0)
    const int pdisk = m->offload == MW_OFFLOAD_ALL, gdisk = grads_on_disk(m), g16 = grads_mem16(m);
    /* a block's staging slot: its padded length, O_DIRECT-aligned inside the arena */
    const uint64_t slot_bytes = (pdisk || gdisk) ? block_slot_floats(m) * F + MW_AIO_ALIGN : 0;
    if (mw_graph_params_zero3(m)) { /* the shard's, every rank's resident segments, two block slots
                                       (the block computing, the next one's gather) */
        PERSIST(m->zparams, (m->zhi - m->zlo) * F, MW_CAT_PARAMS, "params_shard");
        PERSIST(m->pres[0], seg_len(m, 0) * F, MW_CAT_PARAMS, "params_pre");
        PERSIST(m->pres[1], seg_len(m, L + 1) * F, MW_CAT_PARAMS, "params_post");
        for (int k = 0; k < 2; k++) PERSIST(m->pslot[k], block_slot_floats(m) * F, MW_CAT_PARAMS, "param_slot");
    } else if (pdisk) {
        PERSIST(m->pres[0], seg_len(m, 0) * F, MW_CAT_PARAMS, "params_pre");
        PERSIST(m->pres[1], seg_len(m, L + 1) * F, MW_CAT_PARAMS, "params_post");
        for (int k = 0; k < 3; k++) PERSIST(m->pslot[k], slot_bytes, MW_CAT_PARAMS, "param_slot");
    } else {
        PERSIST(m->params, m->nfloats * F, MW_CAT_PARAMS, "params");
    }
    if (!c->inference) {
        if (gdisk) {
            PERSIST(m->gres[0], seg_len(m, 0) * F, MW_CAT_GRADS, "grads_pre");
            PERSIST(m->gres[1], seg_len(m, L + 1) * F, MW_CAT_GRADS, "grads_post");
            for (int k = 0; k < 3; k++) PERSIST(m->gslot[k], slot_bytes, MW_CAT_GRADS, "grad_slot");
        } else if (mw_graph_grads_zero2(m)) { /* a block's slot; the sum is the shard's (zero_acc) */
            PERSIST(m->gres[0], seg_len(m, 0) * F, MW_CAT_GRADS, "grads_pre");
            PERSIST(m->gres[1], seg_len(m, L + 1) * F, MW_CAT_GRADS, "grads_post");
            PERSIST(m->gslot[0], block_slot_floats(m) * F, MW_CAT_GRADS, "grad_slot");
        } else if (g16) {
            PERSIST(m->gres[0], seg_len(m, 0) * F, MW_CAT_GRADS, "grads_pre");
            PERSIST(m->gres[1], seg_len(m, L + 1) * F, MW_CAT_GRADS, "grads_post");
            PERSIST(m->gslot[0], block_slot_floats(m) * F, MW_CAT_GRADS, "grad_slot");
            PERSIST(m->g16, (m->seg_lo[L + 1] - m->seg_lo[1]) * sizeof(uint16_t), MW_CAT_GRADS, "grads_bf16");
        } else {
            PERSIST(m->grads, m->nfloats * F, MW_CAT_GRADS, "grads");
        }
        const int adam = c->optim == MW_OPTIM_ADAMW;
        const size_t on = mw_graph_opt_sharded(m) ? m->zhi - m->zlo : m->nfloats;
        if (m->offload == MW_OFFLOAD_NONE && m->opt.bits[0])
            PERSIST(m->m, mw_opt_array_bytes(m->opt.bits[0], on), MW_CAT_OPTIM, adam ? "adam_m" : "optim_m");
        if (m->offload == MW_OFFLOAD_NONE && m->opt.bits[1])
            PERSIST(m->v, mw_opt_array_bytes(m->opt.bits[1], on), MW_CAT_OPTIM, adam ? "adam_v" : "optim_v");
        if (c->dp) { /* the gradients' exchange (src/dist/zero.c) */
            if (c->accum > 1 || c->zero >= 2) PERSIST(m->zacc, (m->zhi - m->zlo) * F, MW_CAT_GRADS, "zero_acc");
            PERSIST(m->zrecv, (uint64_t)c->world * m->zrq * F, MW_CAT_WORK, "zero_recv");
        }
        if (m->opt.state_bytes) PERSIST(m->ostate, m->opt.state_bytes, MW_CAT_OPTIM, "optim_state");
    }
    if (placed && slot_bytes) /* the slots' I/O is O_DIRECT: align them */
        for (int k = 0; k < 3; k++) {
            if (pdisk) m->pslot[k] = align_io(m->pslot[k]);
            if (gdisk && !c->inference) m->gslot[k] = align_io(m->gslot[k]);
        }
    PERSIST(m->gw.buf, m->gw.floats * F, MW_CAT_WORK, "gemm_pack");
    PERSIST(m->staging, (2 * N + (uint64_t)c->batch * (c->seq + 1)) * sizeof(int32_t), MW_CAT_WORK,
            "token_staging");
    mw_ext ext[MW_MAX_EXT];
    const int next = a->ext(m, ext);
    for (int e = 0; e < next; e++) PERSIST(m->ext[e], ext[e].bytes, ext[e].cat, ext[e].name);
#undef PERSIST
    if (m->offload != MW_OFFLOAD_NONE) { /* the streamed chunks pass through it during the optimizer
                                            op only: it shares memory with the activations */
        mw_offload_layout lay;
        disk_layout(m, &lay);
        if (placed)
            m->off_stage = base + placed[idx++].offset;
        else
            MW_TRY(mw_planner_add(pl, "offload_stage", -1, lay.staging_bytes, MW_CAT_OPTIM, m->opt_op, m->opt_op));
    }
    if (!c->inference && m->opt.scratch_bytes) { /* the optimizer's sums: during its op only, too */
        if (placed)
            m->oscratch = base + placed[idx++].offset;
        else
            MW_TRY(mw_planner_add(pl, "optim_scratch", -1, m->opt.scratch_bytes, MW_CAT_OPTIM, m->opt_op, m->opt_op));
    }
    int *cur = malloc(sizeof(int) * (size_t)nslots);
    if (!cur) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    for (int i = 0; i < nslots; i++) cur[i] = -1;
    mw_status st = MW_OK;
    for (int i = 0; i < m->nops && st == MW_OK; i++) {
        const mw_kind *k = &a->kinds[m->ops[i].kind];
        const int layer = m->ops[i].layer;
        for (int j = 0; j < k->n && st == MW_OK; j++) {
            const int slot = resolve_slot(a, k->a[j].slot, layer);
            if (k->a[j].mode == MW_W) {
                if (placed) {
                    cur[slot] = idx++;
                } else {
                    uint64_t bytes;
                    mw_category cat;
                    int lay;
                    const char *name;
                    slot_info(m, slot, &bytes, &cat, &name, &lay);
                    st = mw_planner_add(pl, name, lay, bytes, cat, i, i);
                    if (st == MW_OK) {
                        pl->b[pl->n - 1].tag = i > m->head_op && kind_is_forward(m, m->ops[i].kind);
                        cur[slot] = pl->n - 1;
                    }
                }
            } else if (cur[slot] < 0) {
                st = mw_fail(MW_ERR_ARG, "internal: op %s of layer %d reads a value never written",
                             k->name, layer);
            } else if (!placed) {
                pl->b[cur[slot]].last = i;
            }
            if (st == MW_OK && placed) m->opp[(size_t)i * MW_MAXACC + j] = base + placed[cur[slot]].offset;
        }
    }
    free(cur);
    return st;
}

/* Plans the model's buffers: fills pl (placed) and s. */
static mw_status plan_model(mw_model *m, mw_planner *pl, mw_plan_summary *s) {
    mw_planner_init(pl, m->nops);
    mw_status st = walk(m, pl, NULL, NULL);
    if (st == MW_OK) st = mw_planner_place(pl);
    if (st != MW_OK) {
        mw_planner_free(pl);
        return st;
    }
    memset(s, 0, sizeof *s);
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
    s->peak = pl->peak;
    s->flat_floats = m->nfloats;
    s->budget = m->cfg.budget;
    s->offload = m->offload;
    if (m->offload != MW_OFFLOAD_NONE) {
        mw_offload_layout lay;
        disk_layout(m, &lay);
        const uint64_t *ab = lay.arr_bytes, acc = (uint64_t)m->cfg.accum;
        s->disk[MW_CAT_PARAMS] = ab[MW_ARR_P];
        s->disk[MW_CAT_GRADS] = ab[MW_ARR_G];
        s->disk[MW_CAT_OPTIM] = ab[MW_ARR_M] + ab[MW_ARR_V];
        s->disk_file = lay.file_bytes;
        s->disk_staging = lay.staging_bytes;
        /* the norm's pass reads the gradients, and each of the optimizer's passes the arrays it
         * reads, writing back those it writes; each micro-batch writes the gradients, and all but
         * the first read them back; the parameters' reads of the blocks' visits, each micro-batch */
        uint64_t ord, owr;
        opt_traffic(m, &lay, &ord, &owr);
        s->disk_read = ord + ab[MW_ARR_G] + (acc - 1) * ab[MW_ARR_G];
        s->disk_write = owr + acc * ab[MW_ARR_G];
        if (m->offload == MW_OFFLOAD_ALL)
            for (int j = 0; j < 3 * m->nvisit; j++)
                if (m->visit_rd[j] >= 0) s->disk_read += acc * mw_offload_pad(seg_len(m, m->visit_rd[j] / 4)) * sizeof(float);
    }
    s->fits = s->budget == 0 || s->peak <= s->budget;
    /* the disk is part of the budget: a file the folder cannot hold does not fit, and a run is
     * refused before it writes anything (auto passes such placements over) */
    uint64_t room;
    if (s->disk_file && m->cfg.offload_dir[0] && mw_scratch_room(m->cfg.offload_dir, &room)) {
        s->disk_room = room;
        s->disk_short = s->disk_file > room;
        if (s->disk_short) s->fits = 0;
    }
    policy_text(m, s->policy, sizeof s->policy);
    if (!m->cfg.inference && m->seg > 0) {
        snprintf(s->pin, sizeof s->pin, "every:%d", m->seg);
    } else if (!m->cfg.inference && m->cfg.n_layer <= MW_MAX_BLOCK_POLICIES) {
        memcpy(s->pin, "blocks:", 7);
        for (int l = 0; l < m->cfg.n_layer; l++) s->pin[7 + l] = "nsf"[m->pol[l]];
    } else if (!m->cfg.inference) { /* more blocks than a blocks: string holds: one policy */
        snprintf(s->pin, sizeof s->pin, "%s", policy_name(m->pol[0]));
    }
    return MW_OK;
}

const char *mw_tier_name(mw_tier t) { return t == MW_TIER_DEVICE ? "device" : t == MW_TIER_DISK ? "disk" : "?"; }

static const char *policy_name(int p) {
    return p == MW_P_NONE ? "none" : p == MW_P_SEL ? "selective" : "full";
}

/* "full", "every:3", or runs of layers: "full 0-3, selective 4-11" */
static void policy_text(const mw_model *m, char *out, size_t len) {
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
            n += (size_t)snprintf(out + n, len - n, "%s", policy_name(m->pol[l]));
        else if (l == e)
            n += (size_t)snprintf(out + n, len - n, "%s%s %d", n ? ", " : "", policy_name(m->pol[l]), l);
        else
            n += (size_t)snprintf(out + n, len - n, "%s%s %d-%d", n ? ", " : "", policy_name(m->pol[l]), l, e);
        l = e + 1;
    }
}

static mw_status model_skeleton(mw_model **out, const mw_config *cfg);
static mw_status measure_costs(const mw_config *c, const mw_model_def *a, double *cost);
static double ops_cost(const mw_model *m, int from, const double *kc);

/* The predictions of s (mw_plan_summary.pred_*) for --offload auto: the recomputation's seconds
 * (also when force), the disk tier's when the plan has one and a folder to measure (4 MiB of
 * buffers outside the plan, once per process: only auto pays it; estimate measures on its own). */
static mw_status predict(mw_model *m, mw_plan_summary *s, int force) {
    const mw_config *c = &m->cfg;
    s->pred_recompute_s = s->pred_disk_s = -1;
    s->disk_read_bw = s->disk_write_bw = 0;
    snprintf(s->offload_why, sizeof s->offload_why, "%s", m->offload_why);
    if (c->inference) return MW_OK;
    if (force || c->offload == MW_OFFLOAD_AUTO) {
        double kc[64];
        MW_TRY(measure_costs(c, m->arch, kc));
        s->pred_recompute_s = ops_cost(m, m->head_op + 1, kc); /* the forward ops after the head */
    }
    /* a folder that cannot be measured (too full for the 32 MiB, not writable) leaves the prediction
     * unknown; the run itself then says what is wrong when it makes its own file */
    if (s->disk_file && c->offload_dir[0] && (force || c->offload == MW_OFFLOAD_AUTO) &&
        mw_offload_measure(c->offload_dir, &s->disk_read_bw, &s->disk_write_bw) == MW_OK)
        s->pred_disk_s = (double)s->disk_read / s->disk_read_bw + (double)s->disk_write / s->disk_write_bw;
    return MW_OK;
}

/* A dry run for cfg: a model without memory and its placed plan. On success the caller frees
 * both (mw_planner_free, mw_model_destroy); on failure nothing is left. */
static mw_status plan_dry(const mw_config *cfg, mw_model **m, mw_planner *pl, mw_plan_summary *s) {
    MW_TRY(model_skeleton(m, cfg));
    mw_status st = plan_model(*m, pl, s);
    if (st == MW_OK) {
        st = predict(*m, s, 0);
        if (st != MW_OK) mw_planner_free(pl);
    }
    if (st != MW_OK) mw_model_destroy(*m);
    return st;
}

/* mw_plan with the recomputation's predicted seconds, whatever cfg's offload. */
static mw_status plan_predicted(const mw_config *cfg, mw_plan_summary *s) {
    mw_model *m;
    mw_planner pl;
    MW_TRY(model_skeleton(&m, cfg));
    mw_status st = plan_model(m, &pl, s);
    if (st == MW_OK) {
        mw_planner_free(&pl);
        st = predict(m, s, 1);
    }
    mw_model_destroy(m);
    return st;
}

mw_status mw_plan_buffers(const mw_config *cfg, mw_plan_buffer **out, int *n) {
    *out = NULL;
    *n = 0;
    mw_model *m;
    mw_planner pl;
    mw_plan_summary s;
    MW_TRY(plan_dry(cfg, &m, &pl, &s));
    mw_status st = MW_OK;
    mw_plan_buffer *b = calloc((size_t)pl.n + 2, sizeof *b);
    if (!b) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int i = 0; st == MW_OK && i < pl.n; i++) {
        const mw_pbuf *p = &pl.b[i];
        const char *suffix = p->tag ? " (recomputed)" : "";
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
        snprintf(b[pl.n].name, sizeof b[pl.n].name, "disk_state (%s)", mw_offload_name(s.offload));
        b[pl.n].category = s.disk[MW_CAT_PARAMS] ? MW_CAT_PARAMS : s.disk[MW_CAT_GRADS] ? MW_CAT_GRADS : MW_CAT_OPTIM;
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
    const uint64_t F = sizeof(float);
    if (i == m->opt_op) {
        mw_offload_layout lay;
        disk_layout(m, &lay);
        uint64_t ord, owr;
        opt_traffic(m, &lay, &ord, &owr);
        o->disk_read = ord + lay.arr_bytes[MW_ARR_G]; /* the norm reads the gradients, the passes */
        o->disk_write = owr;
        return;
    }
    if (m->offload == MW_OFFLOAD_ALL && m->op_pv && m->op_pv[i] >= 0)
        for (int e = 0; e < 3; e++) {
            const int r = m->visit_rd[3 * m->op_pv[i] + e];
            if (r >= 0) o->disk_read += mw_offload_pad(seg_len(m, r / 4)) * F;
        }
    if (m->op_ge && m->op_ge[i]) o->disk_write += mw_offload_pad(seg_len(m, 1 + m->ops[i].layer)) * F;
}

mw_status mw_plan_timeline(const mw_config *cfg, mw_plan_op **ops, int *nops) {
    *ops = NULL;
    *nops = 0;
    mw_model *m;
    mw_planner pl;
    mw_plan_summary s;
    MW_TRY(plan_dry(cfg, &m, &pl, &s));
    mw_status st = MW_OK;
    mw_plan_op *o = calloc((size_t)m->nops, sizeof *o);
    uint64_t *live = calloc((size_t)m->nops * MW_CAT_COUNT, sizeof(uint64_t));
    if (!o || !live) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) mw_planner_live_all(&pl, live);
    for (int i = 0; st == MW_OK && i < m->nops; i++) {
        const int k = m->ops[i].kind, l = m->ops[i].layer;
        const char *kn = m->arch->kinds[k].name;
        memcpy(o[i].live, live + (size_t)i * MW_CAT_COUNT, sizeof o[i].live);
        if (s.disk_file) timeline_transfers(m, i, &o[i]);
        snprintf(o[i].op, sizeof o[i].op, "%s", kn);
        if (kind_is_step(m, k))
            snprintf(o[i].name, sizeof o[i].name, "%s", kn);
        else if (kind_is_forward(m, k))
            snprintf(o[i].name, sizeof o[i].name, "%s %d", i < m->head_op ? "fwd" : "recompute", l);
        else
            snprintf(o[i].name, sizeof o[i].name, "bwd %d", l);
    }
    free(live);
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

static mw_status resolve_policy(mw_model *m);

/* The placement of cfg.offload. Auto plans every placement under cfg's recomputation policy and
 * takes, among those that fit the budget, the fastest by predicted time: recomputation plus the
 * disk's transfers at the bandwidth measured in the offload folder, counted as if none overlapped
 * compute (which favours memory); without a folder to measure, the least on disk that fits. */
static mw_status resolve_offload(mw_model *m) {
    const mw_config *c = &m->cfg;
    m->offload = c->inference ? MW_OFFLOAD_NONE : c->offload;
    m->offload_why[0] = 0;
    if (m->offload != MW_OFFLOAD_AUTO) return MW_OK;
    m->offload = MW_OFFLOAD_NONE;
    if (!c->budget) {
        snprintf(m->offload_why, sizeof m->offload_why, "no --budget: every state in memory");
        return MW_OK;
    }
    /* the placements from least to most on disk */
    static const int MODES[4] = {MW_OFFLOAD_NONE, MW_OFFLOAD_OPTIMIZER, MW_OFFLOAD_OPTIMIZER_GRADS, MW_OFFLOAD_ALL};
    double t[4];
    int fits[4], short_disk[4] = {0, 0, 0, 0}, measured = 1, best = -1;
    for (int i = 0; i < 4; i++) {
        mw_config k = *c;
        k.offload = MODES[i];
        if (c->dp && (MODES[i] > MW_OFFLOAD_OPTIMIZER || (MODES[i] == MW_OFFLOAD_OPTIMIZER && c->zero < 1))) {
            fits[i] = 0, t[i] = 0; /* --zero: only a shard of the optimizer state goes to disk */
            continue;
        }
        mw_plan_summary ps;
        MW_TRY(plan_predicted(&k, &ps));
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

/* The disk tier's segments: one for --offload optimizer; with gradients or parameters on disk the
 * tensors before the first block, each block, and those after the last (the table must be in that
 * order, as every model's is). */
static void zero_bounds(mw_model *m);

static mw_status build_segments(mw_model *m) {
    if (m->cfg.dp) zero_bounds(m);
    if (m->offload == MW_OFFLOAD_NONE && !grads_mem16(m) && !mw_graph_grads_zero2(m)) return MW_OK;
    const int L = m->cfg.n_layer,
              blocks = m->offload != MW_OFFLOAD_OPTIMIZER || grads_mem16(m) || mw_graph_grads_zero2(m);
    m->nseg = blocks ? L + 2 : 1;
    m->seg_lo = calloc((size_t)m->nseg + 1, sizeof(size_t));
    m->seg_mask = calloc((size_t)m->nseg, sizeof(unsigned));
    m->pbase = calloc((size_t)m->nseg, sizeof(float *));
    m->gbase = calloc((size_t)m->nseg, sizeof(float *));
    m->gfresh = calloc((size_t)L + 1, 1);
    if (!m->seg_lo || !m->seg_mask || !m->pbase || !m->gbase || !m->gfresh)
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    m->seg_lo[m->nseg] = m->nfloats;
    const unsigned mv = opt_mask(m);
    if (m->offload == MW_OFFLOAD_OPTIMIZER && !mv)
        return mw_fail(MW_ERR_ARG, "--offload optimizer: --optim %s keeps no per-parameter state to put on disk (its small state stays in memory); use --offload optimizer+grads or all, or none",
                       mw_optim_str(m->cfg.optim));
    for (int k = 0; k < m->nseg; k++) m->seg_mask[k] = mv;
    if (!blocks) return MW_OK;
    for (int k = 0; k < m->nseg; k++) m->seg_lo[k] = (size_t)-1;
    m->seg_lo[0] = 0;
    m->seg_lo[m->nseg] = m->nfloats;
    int phase = 0; /* 0 before the blocks, 1 in them, 2 after */
    for (int i = 0; i < m->ntensors; i++) {
        mw_tensor *t = &m->tensors[i];
        const int l = t->layer, want = l >= 0 ? 1 + l : phase == 0 ? 0 : L + 1;
        if (l >= 0 && m->seg_lo[1 + l] == (size_t)-1) m->seg_lo[1 + l] = t->offset;
        if (l < 0 && phase == 1) phase = 2, m->seg_lo[L + 1] = t->offset;
        if (l >= 0) phase = 1;
        t->seg = want;
    }
    if (m->seg_lo[L + 1] == (size_t)-1) m->seg_lo[L + 1] = m->nfloats;
    for (int k = 1; k <= m->nseg; k++)
        if (m->seg_lo[k] == (size_t)-1 || m->seg_lo[k] < m->seg_lo[k - 1])
            return mw_fail(MW_ERR_ARG, "--offload %s: this model's tensors are not in block order", mw_offload_name(m->offload));
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (t->offset < m->seg_lo[t->seg] || t->offset + t->numel > m->seg_lo[t->seg + 1])
            return mw_fail(MW_ERR_ARG, "--offload %s: tensor %s lies outside its block", mw_offload_name(m->offload), t->name);
    }
    for (int l = 0; l < L; l++)
        m->seg_mask[1 + l] = mv | (grads_on_disk(m) ? MW_ARR_BIT(MW_ARR_G) : 0) |
                             (m->offload == MW_OFFLOAD_ALL ? MW_ARR_BIT(MW_ARR_P) : 0);
    return MW_OK;
}

/* One micro-batch's transfers, read off the schedule: the visits of the blocks' parameters (a
 * block's consecutive ops, the head between them not counting) with the slot each uses and the
 * reads each starts (its own when not prefetched, and the next two visits'), and per block the
 * first and the last op of its backward, where its gradients are bound and written behind. */
static mw_status build_transfers(mw_model *m) {
    if (!grads_slotted(m)) return MW_OK;
    const int L = m->cfg.n_layer, n = m->nops;
    free(m->op_pv), free(m->op_gb), free(m->op_ge), free(m->visit_seg), free(m->visit_slot), free(m->visit_rd);
    m->op_pv = malloc(sizeof(int) * (size_t)n);
    m->op_gb = calloc((size_t)n, sizeof(int));
    m->op_ge = calloc((size_t)n, sizeof(int));
    m->visit_seg = malloc(sizeof(int) * (size_t)n);
    m->visit_slot = malloc(sizeof(int) * (size_t)n);
    m->visit_rd = malloc(sizeof(int) * 3 * (size_t)n);
    if (!m->op_pv || !m->op_gb || !m->op_ge || !m->visit_seg || !m->visit_slot || !m->visit_rd)
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    m->nvisit = 0;
    int cur = -1;
    for (int i = 0; i < n; i++) {
        m->op_pv[i] = -1;
        const int k = m->ops[i].kind, l = m->ops[i].layer;
        if (kind_is_step(m, k) || l >= L) continue;
        if (l != cur) m->op_pv[i] = m->nvisit, m->visit_seg[m->nvisit++] = 1 + l;
        cur = l;
    }
    for (int l = 0; l < L; l++) { /* the backward ops of block l: those after the head, not forward */
        int first = -1, last = -1;
        for (int i = m->head_op + 1; i < m->opt_op; i++) {
            const int k = m->ops[i].kind;
            if (m->ops[i].layer != l || kind_is_step(m, k) || (m->arch->kinds[k].flags & MW_KF_FWD)) continue;
            if (first < 0) first = i;
            last = i;
        }
        if (first < 0) return mw_fail(MW_ERR_ARG, "internal: block %d has no backward op", l);
        m->op_gb[first] = 1;
        m->op_ge[last] = 1;
    }
    int holds[3] = {-1, -1, -1};
    for (int j = 0; j < m->nvisit; j++) {
        const int seg = m->visit_seg[j];
        const int n1 = j + 1 < m->nvisit ? m->visit_seg[j + 1] : -2, n2 = j + 2 < m->nvisit ? m->visit_seg[j + 2] : -2;
        int *rd = m->visit_rd + 3 * j, nr = 0;
        rd[0] = rd[1] = rd[2] = -1;
        int s = -1;
        for (int k = 0; k < 3; k++)
            if (holds[k] == seg) s = k;
        if (s < 0) { /* not prefetched: read now, into a slot the next two visits do not need */
            for (int k = 0; k < 3 && s < 0; k++)
                if (holds[k] != n1 && holds[k] != n2) s = k;
            holds[s] = seg;
            rd[nr++] = seg * 4 + s;
        }
        m->visit_slot[j] = s;
        for (int d = 1; d <= 2; d++) {
            const int want = d == 1 ? n1 : n2;
            if (want < 0 || holds[0] == want || holds[1] == want || holds[2] == want) continue;
            int t = -1;
            for (int k = 0; k < 3 && t < 0; k++)
                if (k != s && holds[k] != n1 && holds[k] != n2) t = k;
            if (t < 0) continue;
            holds[t] = want;
            rd[nr++] = want * 4 + t;
        }
    }
    return MW_OK;
}

static mw_status model_skeleton(mw_model **out, const mw_config *cfg) {
    MW_TRY(mw_config_validate(cfg));
    const mw_model_def *arch = mw_arch_get(cfg->arch);
    if (!arch) return mw_fail(MW_ERR_ARG, "unknown model family %d", cfg->arch);
    mw_model *m = calloc(1, sizeof *m);
    if (!m) return mw_fail(MW_ERR_NOMEM, "cannot allocate the model");
    m->cfg = *cfg;
    m->arch = arch;
    m->nthreads = omp_get_max_threads();
    m->gw.nthreads = m->nthreads;
    m->gw.floats = mw_gemm_ws_floats(m->nthreads, MW_GEMM_NC);
    m->gw.bf16 = cfg->precision == MW_PRECISION_BF16; /* every product of the model's kernels */
    m->pol = calloc((size_t)cfg->n_layer, 1);
    m->building_layer = -1;
    m->pad_q = cfg->inference ? 16 : mw_opt_pad_quantum(cfg->optim);
    for (int k = 0; k < 3; k++) m->pslot_seg[k] = m->pslot_id[k] = m->gslot_seg[k] = m->gslot_id[k] = -1;
    mw_status s = m->pol ? arch->build_table(m) : mw_fail(MW_ERR_NOMEM, "cannot allocate the layer table");
    if (s == MW_OK && !cfg->inference) s = build_optim(m);
    if (s == MW_OK) s = resolve_offload(m);
    if (s == MW_OK) s = build_segments(m);
    if (s == MW_OK) s = resolve_policy(m);
    if (s == MW_OK) s = build_schedule(m);
    if (s == MW_OK) s = build_transfers(m);
    if (s != MW_OK) {
        mw_model_destroy(m);
        return s;
    }
    *out = m;
    return MW_OK;
}

mw_status mw_config_tensor(const mw_config *cfg, int i, char *name, size_t name_len, int *ndim, int dims[2]) {
    mw_model *m;
    MW_TRY(model_skeleton(&m, cfg));
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

mw_status mw_plan(const mw_config *cfg, mw_plan_summary *out) {
    mw_model *m;
    mw_planner pl;
    MW_TRY(plan_dry(cfg, &m, &pl, out));
    mw_planner_free(&pl);
    mw_model_destroy(m);
    return MW_OK;
}

mw_status mw_model_create(mw_model **out, const mw_config *cfg) {
    *out = NULL;
    mw_model *m;
    MW_TRY(model_skeleton(&m, cfg));
    mw_planner pl;
    mw_status s = plan_model(m, &pl, &m->plan);
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
    if (s == MW_OK) s = walk(m, NULL, pl.b, m->arena.base);
    mw_planner_free(&pl);
    /* the disk tier is created (its file preallocated) before step 1, after the plan fits */
    if (s == MW_OK && m->nseg > 1) { /* the resident segments are bound; the blocks come and go */
        const int L = m->cfg.n_layer;
        if (!m->params) m->pbase[0] = m->pres[0], m->pbase[L + 1] = m->pres[1];
        m->gbase[0] = m->gres[0], m->gbase[L + 1] = m->gres[1];
        memset(m->gfresh, 1, (size_t)L);
    }
    if (s == MW_OK && m->offload != MW_OFFLOAD_NONE) {
        int bits[MW_ARR_COUNT];
        disk_bits(m, bits);
        const size_t *lo;
        const unsigned *mask;
        const int n = disk_segs(m, &lo, &mask);
        s = mw_offload_create(&m->off, m->cfg.offload_dir, n, lo, mask, bits, m->off_stage);
    }
    if (s != MW_OK) {
        mw_model_destroy(m);
        return s;
    }
    if (m->arch->bound) m->arch->bound(m);
    *out = m;
    return MW_OK;
}

void mw_model_destroy(mw_model *m) {
    if (m && m->zpre) (void)zero3_wait(m); /* never free a slot a gather still writes */
    if (!m) return;
    mw_offload_destroy(m->off);
    mw_arena_release(&m->arena);
    free(m->tensors);
    mw_opt_layout_free(&m->opt);
    free(m->pol);
    free(m->ops);
    free(m->opp);
    free(m->seg_lo), free(m->seg_mask), free(m->pbase), free(m->gbase), free(m->gfresh);
    free(m->op_pv), free(m->op_gb), free(m->op_ge), free(m->visit_seg), free(m->visit_slot), free(m->visit_rd);
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
    if (access && !info->data) return io_check(m);
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
    const mw_tensor *t = &m->tensors[i];
    float *p = mw_graph_param_access(m, i, 1);
    if (!p) return; /* m->io_error says why */
    size_t nblk = (t->numel + MW_NORM_QUANTUM - 1) / MW_NORM_QUANTUM;
    /* blocks draw from their own stream: the same values for any thread count */
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblk; b++) {
        uint64_t s = seed ^ ((uint64_t)(i + 1) << 40) ^ (b * 0x9E3779B97F4A7C15ull);
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

/* ---- the executor ------------------------------------------------------------------------------ */

/* ---- the disk tier's transfers around the ops (--offload optimizer+grads, all) ---------------- */

/* Records a failed transfer of a call that returns no status; the next one that does returns it. */
static void io_failed(mw_model *m, mw_status st) {
    if (st != MW_OK && m->io_error == MW_OK) {
        m->io_error = st;
        snprintf(m->io_msg, sizeof m->io_msg, "%s", mw_last_error());
    }
}

static mw_status io_check(const mw_model *m) {
    return m->io_error == MW_OK ? MW_OK : mw_fail(m->io_error, "%s", m->io_msg);
}

static mw_status wait_id(mw_model *m, int *id) {
    if (*id < 0) return MW_OK;
    const int k = *id;
    *id = -1;
    return mw_offload_wait(m->off, k);
}

/* Writes back parameters written outside a step (pslot[0]: init, checkpoint and weight loads) and
 * forgets every slot's block: a new micro-batch starts from its plan, and the optimizer changes
 * what they would hold. */
static mw_status params_settle(mw_model *m) {
    if (mw_graph_params_zero3(m)) { /* written outside a step: this rank's pieces into its shard */
        MW_TRY(zero3_wait(m));
        const size_t lo = m->zlo, hi = m->zhi;
        for (int k = 0; k < m->nseg; k++) {
            const int res = k == 0 || k == m->nseg - 1;
            const float *src = res ? (m->zres_dirty ? (k ? m->pres[1] : m->pres[0]) : NULL)
                                   : (m->access_dirty && m->pslot_seg[0] == k ? m->pslot[0] : NULL);
            const size_t a = m->seg_lo[k] > lo ? m->seg_lo[k] : lo, b = m->seg_lo[k + 1] < hi ? m->seg_lo[k + 1] : hi;
            if (src && a < b) memcpy(m->zparams + (a - lo), src + (a - m->seg_lo[k]), (b - a) * sizeof(float));
        }
        m->access_dirty = m->zres_dirty = 0;
        for (int k = 0; k < 3; k++) {
            if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
            m->pslot_seg[k] = -1;
        }
        return MW_OK;
    }
    if (m->offload != MW_OFFLOAD_ALL || !m->off) return MW_OK;
    mw_status st = MW_OK;
    for (int k = 0; k < 3; k++) {
        mw_status w = wait_id(m, &m->pslot_id[k]);
        if (st == MW_OK) st = w;
    }
    if (st == MW_OK && m->access_dirty && m->pslot_seg[0] >= 0) {
        int id;
        st = mw_offload_seg_start(m->off, 1, m->pslot_seg[0], MW_ARR_P, m->pslot[0], &id);
        if (st == MW_OK) st = mw_offload_wait(m->off, id);
    }
    m->access_dirty = 0;
    for (int k = 0; k < 3; k++) {
        if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
        m->pslot_seg[k] = -1;
    }
    return st;
}

/* Waits for the gradients' writes in flight. */
static mw_status grads_settle(mw_model *m) {
    mw_status st = MW_OK;
    for (int k = 0; k < 3; k++) {
        mw_status w = wait_id(m, &m->gslot_id[k]);
        if (st == MW_OK) st = w;
    }
    return st;
}

/* Before a micro-batch's ops (or the optimizer): a failure outside a call comes out now. */
static mw_status step_begin(mw_model *m) {
    MW_TRY(io_check(m));
    m->gvisit = 0;
    return params_settle(m);
}

/* --zero 3, visit j: the block comes from the gather started at the previous visit, or is still
 * in a slot (the last block's forward, then its backward), or is gathered now; then the next
 * visit's block starts its gather into the other slot, to run while this one computes. */
static mw_status zero3_wait(mw_model *m) {
    if (!m->zpre) return MW_OK;
    void *r = m->zpre;
    m->zpre = NULL;
    MW_TRY(m->comm->wait(m->comm, r));
    m->pslot_seg[m->zpre_slot] = m->zpre_seg;
    return MW_OK;
}

static mw_status zero3_visit(mw_model *m, int j) {
    const int seg = m->visit_seg[j];
    if (m->zpre && m->zpre_seg == seg) MW_TRY(zero3_wait(m));
    int k = m->pslot_seg[0] == seg ? 0 : m->pslot_seg[1] == seg ? 1 : -1;
    if (k < 0) { /* not prefetched (the first visit): now, into a slot no gather is filling */
        MW_TRY(zero3_wait(m));
        k = m->pslot_seg[0] < 0 ? 0 : 1;
        if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
        m->pslot_seg[k] = -1;
        MW_TRY(mw_zero_gather_seg(m, m->pslot[k], m->seg_lo[seg], m->seg_lo[seg + 1]));
        m->pslot_seg[k] = seg;
    }
    m->pbase[seg] = m->pslot[k];
    const int next = j + 1 < m->nvisit ? m->visit_seg[j + 1] : -1;
    if (next >= 0 && next != seg && m->pslot_seg[1 - k] != next && !m->zpre) {
        const int o = 1 - k;
        if (m->pslot_seg[o] >= 0) m->pbase[m->pslot_seg[o]] = NULL;
        m->pslot_seg[o] = -1;
        void *r = NULL;
        MW_TRY(mw_zero_gather_start(m, m->pslot[o], m->seg_lo[next], m->seg_lo[next + 1], &r));
        if (r) {
            m->zpre = r, m->zpre_seg = next, m->zpre_slot = o;
        } else {
            m->pslot_seg[o] = next;
        }
    }
    return MW_OK;
}

/* Lets a gather in flight progress between ops (MPI moves data inside its calls). */
static void zero3_poll(mw_model *m) {
    int done = 0;
    if (m->zpre && m->comm->test) (void)m->comm->test(m->comm, m->zpre, &done);
}

/* Visit j of the plan: starts its reads (its own when not prefetched, the next visits'), waits for
 * its block's and binds it. */
static mw_status param_visit(mw_model *m, int j) {
    if (mw_graph_params_zero3(m)) return zero3_visit(m, j);
    const int *rd = m->visit_rd + 3 * j;
    for (int e = 0; e < 3 && rd[e] >= 0; e++) {
        const int seg = rd[e] / 4, k = rd[e] % 4;
        MW_TRY(wait_id(m, &m->pslot_id[k]));
        if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
        m->pslot_seg[k] = seg;
        MW_TRY(mw_offload_seg_start(m->off, 0, seg, MW_ARR_P, m->pslot[k], &m->pslot_id[k]));
    }
    const int k = m->visit_slot[j];
    MW_TRY(wait_id(m, &m->pslot_id[k]));
    m->pbase[m->visit_seg[j]] = m->pslot[k];
    return MW_OK;
}

/* Block l's backward starts: its gradients come into a slot (zeros when the disk holds none of this
 * step yet, else read back to accumulate into). */
static mw_status grad_bind(mw_model *m, int l) {
    if (mw_graph_grads_zero2(m)) { /* from zero: the slot is exchanged when the block is done */
        memset(m->gslot[0], 0, seg_len(m, 1 + l) * sizeof(float));
        m->gbase[1 + l] = m->gslot[0];
        return MW_OK;
    }
    if (grads_mem16(m)) { /* zeros, or the bfloat16 ones widened to accumulate into */
        const int seg = 1 + l;
        const size_t n = seg_len(m, seg);
        if (m->gfresh[l])
            memset(m->gslot[0], 0, n * sizeof(float));
        else
            mw_bf16_load_mt(m->gslot[0], m->g16 + (m->seg_lo[seg] - m->seg_lo[1]), n);
        m->gbase[seg] = m->gslot[0];
        return MW_OK;
    }
    const int q = m->gvisit++, k = q % 3, seg = 1 + l;
    MW_TRY(q == 0 ? grads_settle(m) : wait_id(m, &m->gslot_id[k]));
    m->gslot_seg[k] = seg;
    if (m->gfresh[l]) {
        memset(m->gslot[k], 0, mw_offload_pad(seg_len(m, seg)) * sizeof(float));
    } else {
        int id;
        MW_TRY(mw_offload_seg_start(m->off, 0, seg, MW_ARR_G, m->gslot[k], &id));
        MW_TRY(mw_offload_wait(m->off, id));
    }
    m->gbase[seg] = m->gslot[k];
    return MW_OK;
}

/* Block l's backward is done: its gradients are written behind. */
static mw_status grad_done(mw_model *m, int l) {
    const int seg = 1 + l;
    const size_t n = seg_len(m, seg);
    if (mw_graph_grads_zero2(m)) { /* summed into the ranks' shards */
        m->gbase[seg] = NULL;
        return mw_zero_exchange(m, m->gslot[0], m->seg_lo[seg], m->seg_lo[seg + 1]);
    }
    if (grads_mem16(m)) { /* rounded into their bfloat16 home */
        mw_bf16_store_mt(m->g16 + (m->seg_lo[seg] - m->seg_lo[1]), m->gslot[0], n);
        m->gbase[seg] = NULL;
        m->gfresh[l] = 0;
        return MW_OK;
    }
    const int k = (m->gvisit - 1) % 3;
    if (m->gslot_seg[k] != seg) return mw_fail(MW_ERR_ARG, "internal: block %d's gradients are not in slot %d", l, k);
    m->gbase[seg] = NULL;
    m->gfresh[l] = 0;
    if (grads_b16(m)) { /* the values g16 would hold, as fp32: the same bits in every placement */
        float *g = m->gslot[k];
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) g[i] = mw_bf16_round(g[i]);
    }
    return mw_offload_seg_start(m->off, 1, seg, MW_ARR_G, m->gslot[k], &m->gslot_id[k]);
}

float *mw_graph_param_access(mw_model *m, int i, int write) {
    const mw_tensor *t = &m->tensors[i];
    if (m->params) return m->params + t->offset;
    const int seg = t->seg;
    float *p = mw_graph_tensor(m, 0, i);
    const int z3 = mw_graph_params_zero3(m);
    if (seg == 0 || seg == m->nseg - 1) { /* resident */
        if (write && z3) m->zres_dirty = 1;
        return p;
    }
    if (m->pslot_seg[0] != seg) {
        mw_status st = params_settle(m); /* writes a dirty block back, forgets the slots */
        int id = -1;
        if (z3) { /* gathered: every rank calls this in the same order (init, loads; checkpoints
                     write each shard from its rank instead) */
            if (st == MW_OK) st = mw_zero_gather_seg(m, m->pslot[0], m->seg_lo[seg], m->seg_lo[seg + 1]);
        } else {
            if (st == MW_OK) st = mw_offload_seg_start(m->off, 0, seg, MW_ARR_P, m->pslot[0], &id);
            if (st == MW_OK) st = mw_offload_wait(m->off, id);
        }
        if (st != MW_OK) {
            io_failed(m, st);
            return NULL;
        }
        m->pslot_seg[0] = seg;
        m->pbase[seg] = m->pslot[0];
        p = mw_graph_tensor(m, 0, i);
    }
    if (write) m->access_dirty = 1;
    return p;
}

static mw_status load_tokens(mw_model *m, const int32_t *inputs, const int32_t *targets) {
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
    MW_TRY(load_tokens(m, inputs, targets));
    MW_TRY(step_begin(m));
    double s = 0.0;
    for (int i = 0; i <= m->head_op; i++) {
        if ((m->offload == MW_OFFLOAD_ALL || mw_graph_params_zero3(m)) && m->op_pv[i] >= 0) MW_TRY(param_visit(m, m->op_pv[i]));
        m->arch->run_op(m, i, 0, 0.0f, &s);
        if (m->zpre) zero3_poll(m);
    }
    if (targets) *loss = (float)(s / ((double)m->cfg.batch * m->cfg.seq));
    return zero3_wait(m); /* a forward alone may have prefetched the block its backward would begin with */
}

mw_status mw_model_forward_backward(mw_model *m, const int32_t *inputs, const int32_t *targets,
                                    float grad_scale, float *loss) {
    const mw_config *c = &m->cfg;
    if (c->inference) return mw_fail(MW_ERR_ARG, "an inference model has no gradients");
    if (!targets) return mw_fail(MW_ERR_ARG, "training needs targets");
    MW_TRY(load_tokens(m, inputs, targets));
    const int N = c->batch * c->seq, gdisk = grads_slotted(m);
    MW_TRY(step_begin(m));
    double s = 0.0;
    for (int i = 0; i < m->opt_op; i++) {
        const int l = m->ops[i].layer;
        if ((m->offload == MW_OFFLOAD_ALL || mw_graph_params_zero3(m)) && m->op_pv[i] >= 0) MW_TRY(param_visit(m, m->op_pv[i]));
        if (gdisk && m->op_gb[i]) MW_TRY(grad_bind(m, l));
        m->arch->run_op(m, i, 1, grad_scale / N, &s);
        if (m->zpre) zero3_poll(m);
        if (gdisk && m->op_ge[i]) MW_TRY(grad_done(m, l));
    }
    *loss = (float)(s / N);
    return MW_OK;
}

int32_t *mw_model_staging(mw_model *m) { return m->staging; }

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
    return seg == 0 ? res[0] + (lo - m->seg_lo[0]) : res[1] + (lo - m->seg_lo[m->nseg - 1]);
}

/* 1 when chunk [lo, hi) of seg is a block's whose gradients on disk are stale (none this step). */
static int grads_fresh(const mw_model *m, int seg) { return seg > 0 && seg < m->nseg - 1 && m->gfresh[seg - 1]; }

/* The gradients of chunk [lo, hi) of segment seg as floats, where they are not on the disk tier:
 * in memory as they are, or a block's bfloat16 ones widened into gslot[0] (zeros when stale).
 * Valid until the next call. */
static float *grads_chunk(const mw_model *m, int seg, size_t lo, size_t hi) {
    if (!grads_mem16(m) || seg == 0 || seg == m->nseg - 1) return resident(m, 1, seg, lo);
    float *g = m->gslot[0];
    if (grads_fresh(m, seg))
        memset(g, 0, (hi - lo) * sizeof(float));
    else
        mw_bf16_load_mt(g, m->g16 + (lo - m->seg_lo[1]), hi - lo);
    return g;
}

void mw_model_zero_grad(mw_model *m) {
    if (m->grads) memset(m->grads, 0, sizeof(float) * m->nfloats);
    if (grads_slotted(m) && m->gres[0]) {
        memset(m->gres[0], 0, seg_len(m, 0) * sizeof(float));
        memset(m->gres[1], 0, seg_len(m, m->nseg - 1) * sizeof(float));
        memset(m->gfresh, 1, (size_t)m->cfg.n_layer);
    }
}

/* The norm's partial sums over one streamed chunk, continuing each quantum's sum where the previous
 * chunk left it: the same additions in the same order as over the flat buffer. */
typedef struct norm_chunk {
    const mw_model *m;
    double *parts;
} norm_chunk;

static void norm_chunk_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    norm_chunk *nc = ctx;
    const float *g = arr[MW_ARR_G] ? (const float *)arr[MW_ARR_G] : grads_chunk(nc->m, seg, lo, hi);
    if (arr[MW_ARR_G] && grads_fresh(nc->m, seg)) memset(arr[MW_ARR_G], 0, (hi - lo) * sizeof(float));
    const size_t b0 = lo / MW_NORM_QUANTUM, b1 = (hi - 1) / MW_NORM_QUANTUM;
    double *parts = nc->parts;
#pragma omp parallel for schedule(static)
    for (size_t b = b0; b <= b1; b++) {
        const size_t j0 = b * MW_NORM_QUANTUM > lo ? b * MW_NORM_QUANTUM : lo;
        const size_t j1 = (b + 1) * MW_NORM_QUANTUM < hi ? (b + 1) * MW_NORM_QUANTUM : hi;
        double t = parts[b];
        for (size_t j = j0; j < j1; j++) t += (double)g[j - lo] * g[j - lo];
        parts[b] = t;
    }
}

mw_status mw_graph_grad_norm(mw_model *m, double *norm) {
    *norm = 0.0;
    if (m->cfg.inference) return MW_OK;
    const size_t n = m->nfloats, nb = (n + MW_NORM_QUANTUM - 1) / MW_NORM_QUANTUM;
    double *parts = (double *)m->opp[(size_t)m->opt_op * MW_MAXACC];
    if (grads_on_disk(m)) {
        MW_TRY(io_check(m));
        MW_TRY(grads_settle(m));
        for (size_t b = 0; b < nb; b++) parts[b] = 0.0;
        norm_chunk nc = {m, parts};
        MW_TRY(mw_offload_stream(m->off, MW_ARR_BIT(MW_ARR_G), 0, norm_chunk_fn, &nc));
    } else if (grads_mem16(m)) { /* segment by segment, the same sums in the same order */
        for (size_t b = 0; b < nb; b++) parts[b] = 0.0;
        norm_chunk nc = {m, parts};
        void *none[MW_ARR_COUNT] = {0};
        for (int sg = 0; sg < m->nseg; sg++)
            if (m->seg_lo[sg + 1] > m->seg_lo[sg]) norm_chunk_fn(&nc, m->seg_lo[sg], m->seg_lo[sg + 1], sg, none);
    } else {
        const float *g = m->grads;
#pragma omp parallel for schedule(static)
        for (size_t b = 0; b < nb; b++) {
            size_t j1 = (b + 1) * MW_NORM_QUANTUM < n ? (b + 1) * MW_NORM_QUANTUM : n;
            double s = 0.0;
            for (size_t j = b * MW_NORM_QUANTUM; j < j1; j++) s += (double)g[j] * g[j];
            parts[b] = s;
        }
    }
    double s = 0.0;
    for (size_t b = 0; b < nb; b++) s += parts[b];
    *norm = sqrt(s);
    return MW_OK;
}

double mw_model_grad_norm(const mw_model *m) {
    double norm;
    mw_status st = mw_graph_grad_norm((mw_model *)m, &norm);
    if (st != MW_OK) {
        io_failed((mw_model *)m, st);
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
    const unsigned rd = m->opt.rd[a->pass];
    float *pc = NULL, *gc = NULL;
    if (rd & MW_ARR_BIT(MW_ARR_P)) pc = arr[MW_ARR_P] ? arr[MW_ARR_P] : resident(m, 0, seg, lo);
    if (rd & MW_ARR_BIT(MW_ARR_G)) {
        gc = arr[MW_ARR_G] ? arr[MW_ARR_G] : grads_chunk(m, seg, lo, hi);
        if (arr[MW_ARR_G] && grads_fresh(m, seg)) memset(gc, 0, (hi - lo) * sizeof(float));
    }
    mw_opt_chunk(&m->opt, a->hp, a->pass, lo, hi, pc, gc, arr[MW_ARR_M], arr[MW_ARR_V], m->ostate, m->oscratch);
}

mw_status mw_model_adamw_step(mw_model *m, double lr, double grad_norm, int t) {
    const mw_config *c = &m->cfg;
    if (c->inference) return MW_OK;
    if (mw_graph_opt_sharded(m)) return mw_zero_opt_step(m, lr, grad_norm, t);
    float coef = 1.0f;
    if (c->grad_clip > 0) { /* PyTorch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1 */
        float cc = (float)c->grad_clip / (float)(grad_norm + 1e-6);
        coef = cc < 1.0f ? cc : 1.0f;
    }
    mw_opt_hp hp;
    mw_opt_hp_of(&hp, c, lr, coef, t);
    mw_opt_begin(&m->opt, &hp, m->ostate, m->oscratch);
    if (m->off) {
        const unsigned disk = (grads_on_disk(m) ? MW_ARR_BIT(MW_ARR_G) : 0) |
                              (m->offload == MW_OFFLOAD_ALL ? MW_ARR_BIT(MW_ARR_P) : 0) | opt_mask(m);
        MW_TRY(io_check(m));
        MW_TRY(grads_settle(m));
        MW_TRY(params_settle(m));
        mw_offload_layout lay;
        disk_layout(m, &lay);
        const int split = opt_split(m, &lay);
        for (int k = 0; k < m->opt.npasses; k++) {
            if (!mw_opt_pass_needed(&m->opt, k, split)) continue;
            opt_chunk a = {m, &hp, k};
            const unsigned rd = m->opt.rd[k] & disk, wr = m->opt.wr[k] & disk & ~MW_ARR_BIT(MW_ARR_G);
            MW_TRY(mw_offload_stream(m->off, rd, wr, opt_chunk_fn, &a));
            mw_opt_end_pass(&m->opt, &hp, k, m->ostate, m->oscratch);
        }
        if (grads_slotted(m)) memset(m->gfresh, 1, (size_t)c->n_layer); /* zero, as the update left them */
        return params_settle(m);
    }
    if (grads_mem16(m)) { /* segment by segment: the blocks' gradients widened one at a time */
        int split = 0;
        for (int sg = 1; sg < m->nseg; sg++) split |= mw_opt_splits(&m->opt, m->seg_lo[sg]);
        for (int k = 0; k < m->opt.npasses; k++) {
            if (!mw_opt_pass_needed(&m->opt, k, split)) continue;
            for (int sg = 0; sg < m->nseg; sg++) {
                const size_t lo = m->seg_lo[sg], hi = m->seg_lo[sg + 1];
                if (hi == lo) continue;
                void *mm = m->opt.bits[0] ? mw_opt_elem(m->m, m->opt.bits[0], lo) : NULL;
                void *vv = m->opt.bits[1] ? mw_opt_elem(m->v, m->opt.bits[1], lo) : NULL;
                mw_opt_chunk(&m->opt, &hp, k, lo, hi, m->params + lo, grads_chunk(m, sg, lo, hi), mm, vv,
                             m->ostate, m->oscratch);
            }
            mw_opt_end_pass(&m->opt, &hp, k, m->ostate, m->oscratch);
        }
        memset(m->gfresh, 1, (size_t)c->n_layer);
        return MW_OK;
    }
    for (int k = 0; k < m->opt.npasses; k++) {
        if (!mw_opt_pass_needed(&m->opt, k, 0)) continue; /* one chunk: it cuts no block */
        mw_opt_chunk(&m->opt, &hp, k, 0, m->nfloats, m->params, m->grads, m->m, m->v, m->ostate, m->oscratch);
        mw_opt_end_pass(&m->opt, &hp, k, m->ostate, m->oscratch);
    }
    return MW_OK;
}

/* ---- the moments, for checkpoints ------------------------------------------------------------ */

/* Elements [off, limit) of the optimizer's array which (0: M, 1: V): a window at off of *n >= 1
 * elements, in memory or through the disk tier's staging. */
static mw_status state_window(const mw_model *m, int which, size_t off, size_t limit, int write, void **p, size_t *n) {
    const int bits = which >= 0 && which <= 1 && !m->cfg.inference ? m->opt.bits[which] : 0;
    if (!bits || off >= limit || limit > m->nfloats || (bits == 4 && (off & 1)))
        return mw_fail(MW_ERR_ARG, "internal: optimizer array %d at %zu", which, off);
    if (mw_graph_opt_sharded(m)) /* this rank's shard, another's (src/dist/zero.c) */
        return mw_zero_state_window(m, which, off, limit, write, p, n);
    if (!m->off) {
        *p = mw_opt_elem(which ? m->v : m->m, bits, off);
        *n = limit - off;
        return MW_OK;
    }
    const int a = which ? MW_ARR_V : MW_ARR_M;
    if (write) return mw_offload_map(m->off, a, off, limit, p, n);
    const void *q = NULL;
    MW_TRY(mw_offload_view(m->off, a, off, limit, &q, n));
    *p = (void *)q;
    return MW_OK;
}

static mw_status moment_window(const mw_model *m, int which, int i, size_t off, int write, float **p, size_t *n) {
    if (i < 0 || i >= m->ntensors || which < 0 || which > 1 || off >= m->tensors[i].numel || m->cfg.inference ||
        m->opt.bits[which] != 32 || m->cfg.optim != MW_OPTIM_ADAMW)
        return mw_fail(MW_ERR_ARG, "internal: moment %d of tensor %d at %zu", which, i, off);
    const mw_tensor *ts = &m->tensors[i];
    void *q = NULL;
    MW_TRY(state_window(m, which, ts->offset + off, ts->offset + ts->numel, write, &q, n));
    *p = q;
    return MW_OK;
}

uint64_t mw_model_state_bytes(const mw_model *m, int part) {
    if (m->cfg.inference || part < 0 || part > 2) return 0;
    if (part == 2) return m->opt.state_bytes;
    return m->opt.bits[part] ? mw_opt_array_bytes(m->opt.bits[part], m->nfloats) : 0;
}

int mw_model_state_bits(const mw_model *m, int part) {
    return m->cfg.inference || part < 0 || part > 1 ? 0 : m->opt.bits[part];
}

static mw_status state_bytes_window(const mw_model *m, int part, uint64_t off, int write, void **p, size_t *n) {
    const uint64_t total = mw_model_state_bytes(m, part);
    if (off >= total) return mw_fail(MW_ERR_ARG, "internal: optimizer state %d at byte %llu", part, (unsigned long long)off);
    if (part == 2) {
        *p = (char *)m->ostate + off;
        *n = (size_t)(total - off);
        return MW_OK;
    }
    const int bits = m->opt.bits[part];
    if ((off * 8) % (uint64_t)bits) return mw_fail(MW_ERR_ARG, "internal: optimizer state %d at byte %llu", part, (unsigned long long)off);
    const size_t e = (size_t)(off * 8 / (uint64_t)bits);
    size_t k;
    MW_TRY(state_window(m, part, e, m->nfloats, write, p, &k));
    const uint64_t end = mw_opt_array_bytes(bits, e + k);
    *n = (size_t)((end < total ? end : total) - off);
    return MW_OK;
}

mw_status mw_model_state_view(const mw_model *m, int part, uint64_t off, const void **p, size_t *n) {
    void *q = NULL;
    MW_TRY(state_bytes_window(m, part, off, 0, &q, n));
    *p = q;
    return MW_OK;
}

mw_status mw_model_state_map(mw_model *m, int part, uint64_t off, void **p, size_t *n) {
    return state_bytes_window(m, part, off, 1, p, n);
}

mw_status mw_model_moment_view(const mw_model *m, int which, int i, size_t off, const float **p, size_t *n) {
    float *q = NULL;
    MW_TRY(moment_window(m, which, i, off, 0, &q, n));
    *p = q;
    return MW_OK;
}

mw_status mw_model_moment_map(mw_model *m, int which, int i, size_t off, float **p, size_t *n) {
    return moment_window(m, which, i, off, 1, p, n);
}

mw_status mw_model_params_settle(mw_model *m) { return params_settle(m); }

mw_status mw_model_moments_done(const mw_model *m) {
    if (!m->off) return MW_OK;
    mw_status a = mw_offload_commit(m->off), b = params_settle((mw_model *)m);
    return a != MW_OK ? a : b != MW_OK ? b : io_check(m);
}

mw_status mw_model_param_view(const mw_model *m, int i, const float **p) {
    if (i < 0 || i >= m->ntensors) return mw_fail(MW_ERR_ARG, "tensor index %d out of range", i);
    *p = mw_graph_param_access((mw_model *)m, i, 0);
    return *p ? MW_OK : io_check(m);
}

int mw_model_offload_info(const mw_model *m, mw_offload_report *r) {
    memset(r, 0, sizeof *r);
    if (!m->off) return 0;
    mw_offload_info in;
    mw_offload_get_info(m->off, &in);
    snprintf(r->path, sizeof r->path, "%s", in.path);
    snprintf(r->engine, sizeof r->engine, "%s", in.engine);
    snprintf(r->note, sizeof r->note, "%s", in.note);
    r->direct = in.direct;
    r->stale = in.stale;
    r->stale_bytes = in.stale_bytes;
    r->file_bytes = in.file_bytes;
    r->bytes_read = in.bytes_read;
    r->bytes_written = in.bytes_written;
    return 1;
}

/* ---- recomputation policies ---------------------------------------------------------------- */

static mw_status auto_policy(mw_model *m);

static mw_status resolve_policy(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int L = c->n_layer;
    m->seg = 0;
    int p = MW_P_NONE;
    if (c->inference) return MW_OK;
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
 * scaled with C', a small vocabulary. */
static void calib_config(const mw_config *c, mw_config *k) {
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
    snprintf(k->recompute_blocks, sizeof k->recompute_blocks, "sf");
    if (c->arch != MW_ARCH_GPT2) {
        const int group = c->n_head / c->n_kv_head;
        k->n_kv_head = H % group == 0 ? H / group : H;
        k->ffn = (int)((double)c->ffn * C / c->n_embd);
        if (k->ffn < 1) k->ffn = 1;
        if (C != H * hs) k->n_head = k->n_kv_head = 1; /* one wide head */
    }
}

/* Seconds per op kind at cfg's shape, measured on this machine: each forward kind runs in the
 * calibration model (calib_config), best of 3 after a warm-up, then scales with its work: N C^2
 * for the matmuls, N C for the elementwise ops, B T^2 C for attention. */
static mw_status measure_costs(const mw_config *c, const mw_model_def *a, double *cost) {
    mw_config k;
    calib_config(c, &k);
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
        MW_TRY(mw_model_create(&m, &k));
        mw_model_init(m, 1);
        const int N = k.batch * k.seq;
        int32_t *tok = m->staging;
        for (int i = 0; i < 2 * N; i++) tok[i] = i % k.vocab;
        mw_status st = load_tokens(m, tok, tok + N);
        double best[64];
        for (int i = 0; i < 64; i++) best[i] = INFINITY;
        for (int rep = 0; st == MW_OK && rep < 4; rep++) { /* the forward ops in schedule order */
            double s = 0;
            for (int i = 0; i < m->nops; i++) {
                const int kd = m->ops[i].kind;
                if (!(i < m->head_op || kind_is_forward(m, kd))) continue;
                const double t0 = now_s();
                a->run_op(m, i, 0, 0.0f, &s);
                const double t = now_s() - t0;
                if (rep > 0 && t < best[kd]) best[kd] = t; /* the first run warms up */
            }
        }
        mw_model_destroy(m);
        MW_TRY(st);
        for (int i = 0; i < a->nkinds; i++) cached[i] = kind_is_forward_a(a, i) ? best[i] : 0.0;
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
        cost[i] = isfinite(cached[i]) ? cached[i] * scale : 0.0;
    }
    return MW_OK;
}

/* The recomputation seconds of ops[from..nops) of m (the forward kinds among them). */
static double ops_cost(const mw_model *m, int from, const double *kc) {
    double c = 0.0;
    for (int i = from; i < m->nops; i++)
        if (kind_is_forward(m, m->ops[i].kind)) c += kc[m->ops[i].kind];
    return c;
}

/* Predicted recomputation seconds of one block under each policy, and of one block's forward
 * with and without its output (every:K), read off what the model pushes for them. */
static void policy_costs(mw_model *m, const double *kc, double out[3], double *fwd_out, double *fwd_no) {
    const int n0 = m->nops;
    for (int p = 0; p < 3; p++) {
        m->arch->block_backward(m, 0, p);
        out[p] = ops_cost(m, n0, kc);
        m->nops = n0;
    }
    m->arch->block_forward(m, 0, 1);
    *fwd_out = ops_cost(m, n0, kc);
    m->nops = n0;
    m->arch->block_forward(m, 0, 0);
    *fwd_no = ops_cost(m, n0, kc);
    m->nops = n0;
}

/* Live bytes per op of m's schedule, summed over categories (no placement); kept0 (may be NULL):
 * the bytes of block 0's instances that cross the head, what a block keeps from forward to
 * backward. */
static mw_status live_totals(mw_model *m, uint64_t **out, uint64_t *kept0) {
    mw_planner pl;
    mw_planner_init(&pl, m->nops);
    mw_status st = walk(m, &pl, NULL, NULL);
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
    return build_schedule(m);
}

/* The per-block memory model of one policy, read off a uniform plan's live bytes: what a block
 * keeps from forward to backward, the most bytes alive (everything but the blocks below it)
 * during its forward and during its backward, and during the head. */
typedef struct pmodel {
    uint64_t kept, fwd, bwd, head, tail;
} pmodel;

static mw_status probe(mw_model *m, int p, pmodel *pm) {
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

static mw_status plan_peak(mw_model *m, uint64_t *peak) {
    mw_planner pl;
    mw_plan_summary s;
    MW_TRY(plan_model(m, &pl, &s));
    mw_planner_free(&pl);
    *peak = s.peak;
    return MW_OK;
}

static mw_status auto_policy(mw_model *m) {
    const int L = m->cfg.n_layer;
    const uint64_t budget = m->cfg.budget;
    if (L > 256) return mw_fail(MW_ERR_ARG, "--recompute auto handles up to 256 blocks; choose a policy");
    double kc[64], cost[3], fwd_out, fwd_no;
    MW_TRY(measure_costs(&m->cfg, m->arch, kc));
    pmodel pm[3];
    for (int p = 0; p < 3; p++) MW_TRY(probe(m, p, &pm[p]));
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
        st = build_schedule(m);
        if (st == MW_OK) st = plan_peak(m, &peak);
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
        if (st == MW_OK && peak <= budget) st = plan_peak(m, &peak); /* placed: at least the live peak */
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
            memset(m->pol, MW_P_FULL, (size_t)L);
            m->seg = 0;
        }
        free(m->ops);
        m->ops = NULL;
    }
    free(best), free(cand);
    return st;
}
