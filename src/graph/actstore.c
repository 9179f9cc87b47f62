/* Stored activations (actstore.h). Owns: which kept value instances are swapped to the disk tier
 * and which are compressed (read off the schedule, as the disk tier's parameter visits are), the
 * buffers each cut adds to the walk, the swap region of the disk tier's file, and the transfers
 * and (de)quantisations around the ops. May call: schedule.c (value indices), src/memory/offload
 * (the file and its I/O engine), src/kernels/cpu/actq (the quantiser). */
#include "actstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/status.h"
#include "../kernels/cpu/actq.h"
#include "../memory/aio.h"

/* pbuf tags of the buffers the cuts add (1 is the walk's: a recomputed instance): a staging buffer
 * read back, and per width (8, 4, 2: TAG_BITS apart) the compressed bytes, the compressed bytes read
 * back and the dequantised copy */
enum { TAG_READ = 2, TAG_Q, TAG_QREAD, TAG_DEQ, TAG_BITS = 3 };
static int tag_w(int tag, int bits) { return tag + TAG_BITS * (bits == 8 ? 0 : bits == 4 ? 1 : 2); }
static int tag_base(int tag) { return tag < TAG_Q ? tag : TAG_Q + (tag - TAG_Q) % TAG_BITS; }
/* events around an op, in the order they run */
enum { E_WAIT_W, E_READ, E_WAIT_R, E_DEQ, E_QUANT, E_WRITE };

typedef struct store {
    int w, wpos, layer, v;
    int fs, rs, wa, p; /* swap: rs < 0 none */
    int fc, rc, cbad;  /* compress: rc < 0 none */
    int dqo;           /* the op at rc dequantises it itself, a row group at a time (MW_KF_OWNDQ) */
    int bits, state;
    uint64_t bytes, qbytes, io, off;
    char *a, *s, *q, *q2, *b; /* bound: the instance, its swapped-in copy, compressed, read back, dequantised */
    int wid, rid;
} store;

/* The swaps' requests in flight at most: the I/O engine takes 48, which the parameters' and the
 * gradients' slots (3 each) share; past this the oldest is waited for first (early, never late). */
#define MAX_INFLIGHT 24

typedef struct ev {
    int op, when, kind, st; /* when 0: before the op, 1: after */
} ev;

struct mw_act_plan {
    int n;
    store *st;
    int *wmap;  /* per op x MW_MAXACC: the store its write starts (-1) */
    int nev;
    ev *ev;
    int nl, nls;
    unsigned char *kept; /* per block x value: an instance of it is kept from its forward to its backward */
    int *ev_lo; /* op o's events of when w: ev[ev_lo[2o + w] .. ev_lo[2o + w + 1]) */
    uint64_t disk;
    int step, k;
    int fifo[MAX_INFLIGHT], head, nfly; /* the swaps' requests in flight, oldest first: store x 2 + read */
    mw_offload *off;
    int owned;
    double t_q, t_w; /* seconds (de)quantising, waiting for transfers */
};

/* A stored value is quantised in chunks of this many values (256 groups), each by one call of the
 * quantiser with its own stream: a value's compressed form is its chunks' one after another, and
 * the round trip in place (round_trip) needs a scratch of one chunk. Whole groups, so that the
 * bytes are mw_actq_bytes of the whole value. */
#define CHUNK ((size_t)256 * MW_ACTQ_GROUP)

static uint64_t mix(uint64_t z, uint64_t v) {
    z = (z ^ v) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t qbytes_of(size_t n, int bits) {
    const size_t full = n / CHUNK, rest = n % CHUNK;
    return (uint64_t)full * mw_actq_bytes(CHUNK, bits) + (rest ? mw_actq_bytes(rest, bits) : 0);
}

/* x (n floats) into dst chunk by chunk; the first non-finite value's index in *bad */
static mw_status quant(const float *x, size_t n, int bits, uint64_t seed, uint64_t stream, char *dst, size_t *bad) {
    for (size_t c = 0, o = 0; c * CHUNK < n; c++) {
        const size_t len = n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK;
        size_t b = 0;
        if (mw_actq_quantize(x + c * CHUNK, len, bits, seed, mix(stream, c), dst + o, &b) != MW_OK) {
            *bad = c * CHUNK + b;
            return MW_ERR_ARG;
        }
        o += mw_actq_bytes(len, bits);
    }
    return MW_OK;
}

static void dequant(const char *src, size_t n, int bits, float *x) {
    for (size_t c = 0, o = 0; c * CHUNK < n; c++) {
        const size_t len = n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK;
        mw_actq_dequantize(src + o, len, bits, x + c * CHUNK);
        o += mw_actq_bytes(len, bits);
    }
}

/* x := dequant(quant(x)) chunk by chunk through scratch (one chunk's bytes): the bits a longer cut
 * gives */
static mw_status round_in_place(float *x, size_t n, int bits, uint64_t seed, uint64_t stream, char *scratch, size_t *bad) {
    for (size_t c = 0; c * CHUNK < n; c++) {
        const size_t len = n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK;
        size_t b = 0;
        if (mw_actq_quantize(x + c * CHUNK, len, bits, seed, mix(stream, c), scratch, &b) != MW_OK) {
            *bad = c * CHUNK + b;
            return MW_ERR_ARG;
        }
        mw_actq_dequantize(scratch, len, bits, x + c * CHUNK);
    }
    return MW_OK;
}

static double now_s(void);

static uint64_t pad_io(uint64_t b) { return (b + MW_AIO_ALIGN - 1) / MW_AIO_ALIGN * MW_AIO_ALIGN; }
static char *align_io(char *p) {
    const uintptr_t u = (uintptr_t)p;
    return (char *)((u + MW_AIO_ALIGN - 1) / MW_AIO_ALIGN * MW_AIO_ALIGN);
}
static int swaps(const store *s) { return s->rs >= 0; }
static int comps(const store *s) { return s->rc >= 0; }
/* swapped and compressed at one cut: the compressed bytes move */
static int together(const store *s) { return swaps(s) && comps(s) && s->rs == s->rc; }
/* the instance itself is written to disk (swapped alone, or before a later compression) */
static int direct(const store *s) { return swaps(s) && !together(s); }
/* compressed with no op between the cut's ends: nothing to save there, so the value makes the
 * round trip in place right after fc (a scratch of the compressed size for that op alone), and
 * the backward reads what it would have read from a longer cut: the same bits, less memory */
static int round_trip(const store *s) { return comps(s) && !together(s) && s->rc == s->fc + 1; }
/* compressed up to an op that dequantises it row group by row group itself (MW_KF_OWNDQ): no
 * dequantised copy of the whole value; the op's pointer is the compressed bytes */
static int owndq(const store *s) { return comps(s) && s->dqo && !round_trip(s); }

void mw_graph_act_free(mw_model *m) {
    mw_act_plan *ap = m->act;
    if (!ap) return;
    if (ap->owned) mw_offload_destroy(ap->off);
    free(ap->st), free(ap->wmap), free(ap->ev), free(ap->ev_lo), free(ap->kept);
    free(ap);
    m->act = NULL;
}

static int ev_cmp(const void *x, const void *y) {
    const ev *a = x, *b = y;
    if (a->op != b->op) return a->op < b->op ? -1 : 1;
    if (a->when != b->when) return a->when < b->when ? -1 : 1;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    return a->st < b->st ? -1 : a->st > b->st;
}

/* The op before which a write issued after op fs must have landed: at least one op later, at the
 * next block's (the head at the latest). */
static int write_wait(const mw_model *m, int fs) {
    int q = fs + 1;
    while (q < m->head_op && !(q >= fs + 2 && m->ops[q].layer != m->ops[fs].layer)) q++;
    return q;
}

/* The op before which the read for rs starts: READ_AHEAD ops before it, never before lo. A block's
 * backward peaks at its first ops (the MLP's, or a recomputed block's attention, where its widest
 * values are alive), so a read started over its last two ops (attention's backward among them, the
 * slowest at long context: in place and the qkv backward, or streamed into it under
 * --act-compress, and the block's recomputation of q|k|v before them or not) is hidden behind
 * compute and keeps its staging out of that peak. Four ops reached back into a compressed
 * recomputed block's attention (its backward has six ops): GPT-2 124M at T=65536, --recompute
 * full --offload all --act-offload checkpoints --act-compress 8 planned 2.332 GiB, 2.145 now. */
#define READ_AHEAD 2
static int read_start(const mw_model *m, int rs, int lo) {
    (void)m;
    return rs - READ_AHEAD > lo ? rs - READ_AHEAD : lo;
}

mw_status mw_graph_act_build(mw_model *m) {
    mw_graph_act_free(m);
    const mw_config *c = &m->cfg;
    const mw_model_def *a = m->arch;
    if (c->inference || (!c->act_offload && !c->act_compress && !m->act_sel) || mw_config_layout(c) || m->nmb != 1)
        return MW_OK;
    int any_bits = c->act_compress;
    for (int l = 0; m->act_sel && l < c->n_layer; l++) any_bits |= mw_act_sel_bits(m->act_sel[l]);
    if (any_bits && !a->lslot_lossy)
        return mw_fail(MW_ERR_ARG, "--act-compress: the %s model declares no value that tolerates compression", a->name);
    const int L = c->n_layer, nslots = a->ngs + (L + 1) * a->nls, n = m->nops;
    mw_act_plan *ap = calloc(1, sizeof *ap);
    int *inst = malloc(sizeof(int) * (size_t)nslots);
    if (ap) {
        ap->wmap = malloc(sizeof(int) * (size_t)n * MW_MAXACC);
        ap->st = calloc((size_t)n * MW_MAXACC, sizeof(store));
        ap->kept = calloc((size_t)(L + 1) * a->nls, 1);
        ap->nl = L, ap->nls = a->nls;
    }
    if (!ap || !inst || !ap->wmap || !ap->st || !ap->kept) {
        free(inst);
        if (ap) free(ap->wmap), free(ap->st), free(ap->kept), free(ap);
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    }
    m->act = ap;
    for (int i = 0; i < nslots; i++) inst[i] = -1;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        const mw_kind *k = mw_graph_kind(m, m->ops[i].kind);
        const int fwdk = (k->flags & MW_KF_FWD) != 0, phase = m->ops[i].bwd;
        for (int j = 0; j < k->n; j++) {
            ap->wmap[(size_t)i * MW_MAXACC + j] = -1;
            const int slot = mw_graph_value_index(a, k->a[j].slot, m->ops[i].layer);
            if (slot < a->ngs) continue; /* the step's values stay as they are */
            if (k->a[j].mode == MW_W) {
                store *s = &ap->st[nc];
                s->w = i, s->wpos = i * MW_MAXACC + j, s->layer = (slot - a->ngs) / a->nls, s->v = (slot - a->ngs) % a->nls;
                s->fs = s->fc = i, s->rs = s->rc = -1;
                ap->wmap[(size_t)i * MW_MAXACC + j] = nc;
                inst[slot] = nc++;
                continue;
            }
            if (inst[slot] < 0) continue; /* the walk reports it */
            store *s = &ap->st[inst[slot]];
            if (s->rc >= 0 && s->dqo && s->rc != i) s->cbad = 1; /* read after the op that reads it compressed */
            if (phase && s->rs < 0) s->rs = i;
            if (s->rs < 0) s->fs = i;
            if (k->flags & MW_KF_OWNQ) {
                s->cbad = 1; /* read exact: the op stores what it reads itself */
            } else if (!fwdk) {
                if (s->rc < 0) s->rc = i, s->cbad |= !phase, s->dqo = (k->flags & MW_KF_OWNDQ) != 0; /* the head reads it in the forward pass */
            } else if (s->rc >= 0) {
                s->cbad = 1; /* a recomputation after a backward op: keep it as it is */
            } else {
                s->fc = i;
            }
        }
    }
    free(inst);
    /* which candidates are stored, and how */
    int ns = 0;
    for (int t = 0; t < nc; t++) {
        store s = ap->st[t];
        /* the flags', or per block the planner's (m->act_sel: --recompute auto, --act-layers) */
        const int sel = m->act_sel && s.layer < L ? m->act_sel[s.layer] : -1;
        const int mode = sel >= 0 ? mw_act_sel_swap(sel) : c->act_offload, bits = sel >= 0 ? mw_act_sel_bits(sel) : c->act_compress;
        if (s.rs >= 0 && !m->ops[s.w].bwd) ap->kept[s.layer * a->nls + s.v] = 1;
        const int sw = s.rs >= 0 && !m->ops[s.w].bwd &&
                       (mode == MW_ACT_OFFLOAD_ALL || (mode == MW_ACT_OFFLOAD_CHECKPOINTS && s.v == 0));
        const int cp = bits && a->lslot_lossy[s.v] && s.rc >= 0 && !s.cbad;
        if (!sw) s.rs = -1;
        if (!cp) s.rc = -1;
        ap->wmap[s.wpos] = sw || cp ? ns : -1; /* renumbered */
        if (!sw && !cp) continue;
        s.bytes = a->lslot(m, s.v);
        s.bits = cp ? bits : 0;
        s.qbytes = cp ? qbytes_of(s.bytes / sizeof(float), s.bits) : 0;
        s.wid = s.rid = -1;
        if (sw) {
            s.wa = write_wait(m, s.fs);
            s.p = read_start(m, s.rs, s.wa > m->head_op ? s.wa : m->head_op);
            s.io = pad_io(together(&s) ? s.qbytes : s.bytes);
            s.off = ap->disk;
            ap->disk += s.io;
        }
        ap->st[ns++] = s;
    }
    ap->n = ns;
    /* the events, sorted by op, before/after and kind */
    ap->ev = malloc(sizeof(ev) * (size_t)(6 * ns + 1));
    ap->ev_lo = calloc((size_t)2 * n + 1, sizeof(int));
    if (!ap->ev || !ap->ev_lo) {
        mw_graph_act_free(m);
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    }
    int ne = 0;
    for (int t = 0; t < ns; t++) {
        const store *s = &ap->st[t];
        if (swaps(s)) {
            ap->ev[ne++] = (ev){s->fs, 1, E_WRITE, t};
            ap->ev[ne++] = (ev){s->wa, 0, E_WAIT_W, t};
            ap->ev[ne++] = (ev){s->p, 0, E_READ, t};
            ap->ev[ne++] = (ev){s->rs, 0, E_WAIT_R, t};
        }
        if (comps(s)) {
            ap->ev[ne++] = (ev){s->fc, 1, E_QUANT, t};
            if (!round_trip(s) && !owndq(s)) ap->ev[ne++] = (ev){s->rc, 0, E_DEQ, t};
        }
    }
    qsort(ap->ev, (size_t)ne, sizeof(ev), ev_cmp);
    ap->nev = ne;
    for (int e = 0, o = 0; o <= 2 * n; o++) {
        while (e < ne && 2 * ap->ev[e].op + ap->ev[e].when < o) e++;
        ap->ev_lo[o] = e;
    }
    if (!ns && !m->act_sel) mw_graph_act_free(m); /* a planner's choice keeps what it saw kept (the summary) */
    return MW_OK;
}

mw_status mw_graph_act_resolve(mw_model *m) {
    mw_config *c = &m->cfg;
    m->act_why[0] = 0;
    if (c->act_offload != MW_ACT_OFFLOAD_AUTO) return MW_OK;
    c->act_offload = MW_ACT_OFFLOAD_NONE;
    if (c->inference) return MW_OK;
    if (c->recompute == MW_RECOMPUTE_AUTO && c->budget && !c->dp) { /* one decision with the recomputation (actchoice.c) */
        snprintf(m->act_why, sizeof m->act_why, "chosen per block with the recomputation (--recompute auto)");
        return MW_OK;
    }
    if (!c->budget) {
        snprintf(m->act_why, sizeof m->act_why, "no --budget: every kept value in memory");
        return MW_OK;
    }
    double rd = 0, wr = 0; /* the swaps' transfers, as --offload auto predicts the disk tier's */
    const int measured = c->offload_dir[0] && mw_offload_measure(c->offload_dir, &rd, &wr) == MW_OK;
    int best = -1, fits[3];
    double t[3];
    for (int k = 0; k < 3; k++) {
        mw_config q = *c;
        q.offload = m->offload;
        mw_graph_chunks_spec(m, q.offload_spec, sizeof q.offload_spec); /* a chunk placement's blocks too */
        q.act_offload = k;
        mw_plan_summary ps;
        MW_TRY(mw_graph_plan(m->arch, &q, &ps));
        fits[k] = ps.fits;
        const double b = (double)q.accum * (double)ps.act_disk;
        t[k] = measured ? b / rd + b / wr : -1;
        if (fits[k] && best < 0) best = k; /* the least swapping: the least time moving bytes */
    }
    char *w = m->act_why;
    const size_t wn = sizeof m->act_why;
    size_t u = (size_t)snprintf(w, wn, "%s", measured ? "predicted s/step of the swaps' transfers:" : "plans:");
    for (int k = 0; k < 3 && u < wn; k++)
        u += !fits[k] ? (size_t)snprintf(w + u, wn - u, " %s over budget", mw_act_offload_name(k))
             : measured ? (size_t)snprintf(w + u, wn - u, " %s %.2f", mw_act_offload_name(k), t[k])
                        : (size_t)snprintf(w + u, wn - u, " %s fits", mw_act_offload_name(k));
    c->act_offload = best >= 0 ? best : MW_ACT_OFFLOAD_ALL; /* none fits: the smallest, which the budget refuses */
    return MW_OK;
}

/* ---- the walk ------------------------------------------------------------------------------- */

int mw_graph_act_store_of(const mw_model *m, int i, int j) {
    if (!m->act) return -1;
    const int t = m->act->wmap[(size_t)i * MW_MAXACC + j];
    if (t >= 0) m->act->st[t].state = 0;
    return t;
}

uint64_t mw_graph_act_write_bytes(const mw_model *m, int t, uint64_t bytes) {
    return direct(&m->act->st[t]) ? pad_io(bytes) + MW_AIO_ALIGN : bytes;
}

char *mw_graph_act_bind_write(mw_model *m, int t, char *p) {
    store *s = &m->act->st[t];
    s->a = direct(s) ? align_io(p) : p;
    return s->a;
}

/* Adds a buffer of the cut (planning) or binds the next one (binding); its pointer, aligned for
 * the disk's I/O when io. */
static mw_status cut_buf(mw_planner *pl, const mw_pbuf *placed, char *base, int *idx, const store *s, const mw_model *m,
                         int tag, uint64_t bytes, int first, int last, int io, char **p, int *index) {
    if (placed) {
        char *q = base + placed[*idx].offset;
        *p = io ? align_io(q) : q;
        *index = (*idx)++;
        return MW_OK;
    }
    MW_TRY(mw_planner_add(pl, m->arch->lslot_names[s->v], s->layer, io ? pad_io(bytes) + MW_AIO_ALIGN : bytes,
                          MW_CAT_ACTS, first, last));
    pl->b[pl->n - 1].tag = tag;
    *index = pl->n - 1;
    *p = NULL;
    return MW_OK;
}

mw_status mw_graph_act_cut(mw_model *m, int t, int i, mw_planner *pl, const mw_pbuf *placed, char *base, int *idx,
                           int *cur, char **curp) {
    store *s = &m->act->st[t];
    int ix;
    char *p;
    if (swaps(s) && s->rs == i && s->state == 0) {
        if (together(s)) { /* compressed after fc, written; read back at p, dequantised at rs */
            MW_TRY(cut_buf(pl, placed, base, idx, s, m, tag_w(TAG_Q, s->bits), s->qbytes, s->fc, s->wa - 1, 1, &s->q, &ix));
            MW_TRY(cut_buf(pl, placed, base, idx, s, m, tag_w(TAG_QREAD, s->bits), s->qbytes, s->p, i, 1, &s->q2, &ix));
            *cur = ix, *curp = s->q2; /* the op dequantises it itself (owndq) */
            if (!owndq(s)) {
                MW_TRY(cut_buf(pl, placed, base, idx, s, m, tag_w(TAG_DEQ, s->bits), s->bytes, i, i, 0, &s->b, &ix));
                *cur = ix, *curp = s->b;
            }
            s->state = 2;
            return MW_OK;
        }
        /* the instance lives until its write has landed; the read lands in a staging buffer */
        if (!placed && pl->b[*cur].last < s->wa - 1) pl->b[*cur].last = s->wa - 1;
        MW_TRY(cut_buf(pl, placed, base, idx, s, m, TAG_READ, s->bytes, s->p, i, 1, &p, &ix));
        s->s = p;
        *cur = ix, *curp = p;
        s->state = 1;
    }
    if (comps(s) && s->rc == i && s->state < 2 && round_trip(s)) { /* a scratch during op fc alone */
        const size_t nf = s->bytes / sizeof(float);
        MW_TRY(cut_buf(pl, placed, base, idx, s, m, tag_w(TAG_Q, s->bits), mw_actq_bytes(nf < CHUNK ? nf : CHUNK, s->bits),
                       s->fc, s->fc, 0, &s->q, &ix));
        s->state = 2;
        return MW_OK;
    }
    if (comps(s) && s->rc == i && s->state < 2) {
        MW_TRY(cut_buf(pl, placed, base, idx, s, m, tag_w(TAG_Q, s->bits), s->qbytes, s->fc, i, 0, &s->q, &ix));
        *cur = ix, *curp = s->q;
        if (!owndq(s)) {
            MW_TRY(cut_buf(pl, placed, base, idx, s, m, tag_w(TAG_DEQ, s->bits), s->bytes, i, i, 0, &s->b, &ix));
            *cur = ix, *curp = s->b;
        }
        s->state = 2;
    }
    return MW_OK;
}

/* ---- the executor --------------------------------------------------------------------------- */

mw_status mw_graph_act_open(mw_model *m) {
    mw_act_plan *ap = m->act;
    if (!ap || !ap->disk) return MW_OK;
    if (m->off) {
        ap->off = m->off;
        return MW_OK;
    }
    const size_t lo[2] = {0, 0};
    const unsigned mask[1] = {0};
    const int bits[MW_ARR_COUNT] = {32, 32, 32, 32};
    MW_TRY(mw_offload_create_ex(&ap->off, m->cfg.offload_dir, 1, lo, mask, bits, NULL, ap->disk));
    ap->owned = 1;
    return MW_OK;
}

static mw_status wait_one(mw_act_plan *ap, int *id) {
    if (*id < 0) return MW_OK;
    const int k = *id;
    *id = -1;
    return mw_offload_wait(ap->off, k);
}

/* Starts store t's write (read 0) or read (1), waiting first for the oldest request in flight
 * when MAX_INFLIGHT are (one already waited for leaves the queue as a no-op). */
static mw_status start_io(mw_act_plan *ap, int t, int read) {
    while (ap->nfly >= MAX_INFLIGHT) {
        const int e = ap->fifo[ap->head];
        ap->head = (ap->head + 1) % MAX_INFLIGHT, ap->nfly--;
        store *o = &ap->st[e / 2];
        MW_TRY(wait_one(ap, e % 2 ? &o->rid : &o->wid));
    }
    store *s = &ap->st[t];
    if (read) MW_TRY(mw_offload_extra_start(ap->off, 0, s->off, together(s) ? s->q2 : s->s, s->io, &s->rid));
    else MW_TRY(mw_offload_extra_start(ap->off, 1, s->off, together(s) ? s->q : s->a, s->io, &s->wid));
    ap->fifo[(ap->head + ap->nfly) % MAX_INFLIGHT] = 2 * t + read;
    ap->nfly++;
    return MW_OK;
}

mw_status mw_graph_act_begin(mw_model *m) {
    mw_act_plan *ap = m->act;
    if (!ap) return MW_OK;
    mw_status st = MW_OK;
    for (int t = 0; t < ap->n; t++) { /* a failed step's transfers end before their memory is reused */
        mw_status a = wait_one(ap, &ap->st[t].wid), b = wait_one(ap, &ap->st[t].rid);
        if (st == MW_OK) st = a != MW_OK ? a : b;
    }
    ap->head = ap->nfly = 0;
    ap->k++;
    return st;
}

void mw_model_set_step(mw_model *m, int step) {
    if (!m->act) return;
    m->act->step = step;
    m->act->k = 0;
}

/* The stochastic rounding's stream of store s: the step, the global micro-batch, the block and the
 * value, whichever instance (forward or recomputed) holds it. Under data parallelism micro-step k
 * (1-based here: ap->k) of rank r of W trains the step's micro-batch (k-1) x W + r (src/dist/zero.c's
 * dealing), so a micro-batch gets the same draws at every world size for the same W x --accum: one
 * rank with --accum 2 rounds as two ranks with --accum 1. The rank itself is not drawn from. */
static uint64_t stream_of(const mw_model *m, const store *s) {
    const mw_act_plan *ap = m->act;
    const mw_config *c = &m->cfg;
    const int W = c->dp && c->world > 1 ? c->world : 1, R = W > 1 ? c->rank : 0;
    const uint64_t mb = (uint64_t)(ap->k - 1) * (uint64_t)W + (uint64_t)R + 1; /* 1: the first, as before */
    uint64_t z = mix((uint64_t)(uint32_t)ap->step, mb);
    z = mix(z, (uint64_t)(uint32_t)s->layer);
    return mix(z, (uint64_t)(uint32_t)s->v);
}

size_t mw_graph_act_round_scratch(void) { return mw_actq_bytes(CHUNK, 8); }

size_t mw_graph_act_round_rows_unit(size_t width) {
    size_t a = CHUNK, b = width; /* CHUNK / gcd(CHUNK, width) */
    while (b) {
        const size_t t = a % b;
        a = b, b = t;
    }
    return CHUNK / a;
}

mw_status mw_graph_act_round_rows(mw_model *m, int layer, int v, float *x, size_t r0, size_t rows, size_t width,
                                  char *scratch) {
    const mw_config *c = &m->cfg;
    const int bits = m->act_sel ? mw_act_sel_bits(m->act_sel[layer]) : c->act_compress;
    if (!bits || !m->arch->lslot_lossy || !m->arch->lslot_lossy[v]) return MW_OK;
    const size_t off = r0 * width, n = rows * width;
    mw_act_plan *ap = m->act;
    if (!ap || off % CHUNK)
        return mw_fail(MW_ERR_ARG, "internal: h.%d.%s's rows from %zu are not a whole chunk of the quantiser", layer,
                       m->arch->lslot_names[v], r0);
    store s = {0};
    s.layer = layer, s.v = v;
    const uint64_t stream = stream_of(m, &s);
    const double t0 = now_s();
    for (size_t k = 0; k * CHUNK < n; k++) { /* the value's chunks off / CHUNK + k, as round_in_place takes them */
        const size_t len = n - k * CHUNK < CHUNK ? n - k * CHUNK : CHUNK;
        size_t b = 0;
        if (mw_actq_quantize(x + k * CHUNK, len, bits, c->seed, mix(stream, off / CHUNK + k), scratch, &b) != MW_OK)
            return mw_fail(MW_ERR_ARG, "--act-compress: h.%d.%s holds a value that is not finite (element %zu): the "
                           "step diverged before its backward pass", layer, m->arch->lslot_names[v], off + k * CHUNK + b);
        mw_actq_dequantize(scratch, len, bits, x + k * CHUNK);
    }
    ap->t_q += now_s() - t0;
    return MW_OK;
}

int mw_graph_act_bits(const mw_model *m, int layer) {
    if (m->cfg.inference || !m->arch->lslot_lossy) return 0;
    return m->act_sel && layer >= 0 && layer < m->cfg.n_layer ? mw_act_sel_bits(m->act_sel[layer]) : m->cfg.act_compress;
}

/* the store op i's access j reads compressed (an MW_KF_OWNDQ op), NULL when it reads floats */
static const store *owndq_store(const mw_model *m, int i, int j) {
    const mw_act_plan *ap = m->act;
    const mw_model_def *a = m->arch;
    const int slot = mw_graph_value_index(a, mw_graph_kind(m, m->ops[i].kind)->a[j].slot, m->ops[i].layer) - a->ngs;
    for (int t = 0; ap && slot >= 0 && t < ap->n; t++)
        if (ap->st[t].rc == i && owndq(&ap->st[t]) && ap->st[t].layer * a->nls + ap->st[t].v == slot) return &ap->st[t];
    return NULL;
}

mw_status mw_graph_act_cols(mw_model *m, int i, int j, size_t r0, size_t rows, size_t width, size_t c0, size_t c1,
                            float *dst, size_t ld) {
    const void *p = m->opp[(size_t)i * MW_MAXACC + j];
    const store *s = owndq_store(m, i, j);
    const size_t w = c1 - c0;
    if (!s) {
        for (size_t r = 0; r < rows; r++) memcpy(dst + r * ld, (const float *)p + (r0 + r) * width + c0, sizeof(float) * w);
        return MW_OK;
    }
    const size_t nv = s->bytes / sizeof(float), qc = mw_actq_bytes(CHUNK, s->bits), G = MW_ACTQ_GROUP;
    const int bits = s->bits;
    const double t0 = now_s();
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) { /* each group as dequant gives it: its chunk's, at its place there */
        float tmp[MW_ACTQ_GROUP];
        const size_t a = (r0 + r) * width + c0, b = a + w;
        for (size_t g = a / G; g * G < b; g++) {
            const size_t c = g * G / CHUNK, gi = g * G % CHUNK / G, cn = nv - c * CHUNK < CHUNK ? nv - c * CHUNK : CHUNK;
            const size_t lo = a > g * G ? a : g * G, hi = b < g * G + G ? b : g * G + G;
            const char *src = (const char *)p + c * qc;
            if (lo == g * G && hi == g * G + G) {
                mw_actq_dequantize_group(src, cn, bits, gi, dst + r * ld + (lo - a));
            } else {
                mw_actq_dequantize_group(src, cn, bits, gi, tmp);
                memcpy(dst + r * ld + (lo - a), tmp + (lo - g * G), sizeof(float) * (hi - lo));
            }
        }
    }
    m->act->t_q += now_s() - t0;
    return MW_OK;
}

const float *mw_graph_act_rows(mw_model *m, int i, int j, size_t r0, size_t rows, size_t width, float *dst) {
    const void *p = m->opp[(size_t)i * MW_MAXACC + j];
    mw_act_plan *ap = m->act;
    const mw_model_def *a = m->arch;
    const store *s = owndq_store(m, i, j);
    const size_t off = r0 * width, n = rows * width;
    if (!s) return (const float *)p + off; /* floats: the value as it is */
    const size_t nv = s->bytes / sizeof(float), qc = mw_actq_bytes(CHUNK, s->bits);
    if (off % CHUNK || (n % CHUNK && off + n != nv) || off + n > nv) {
        mw_fail(MW_ERR_ARG, "internal: h.%d.%s's rows from %zu are not whole chunks of the quantiser", s->layer,
                a->lslot_names[s->v], r0);
        return NULL;
    }
    const double t0 = now_s();
    for (size_t k = 0; k * CHUNK < n; k++) { /* the value's chunk off / CHUNK + k, as dequant takes them */
        const size_t len = n - k * CHUNK < CHUNK ? n - k * CHUNK : CHUNK;
        mw_actq_dequantize((const char *)p + (off / CHUNK + k) * qc, len, s->bits, dst + k * CHUNK);
    }
    ap->t_q += now_s() - t0;
    return dst;
}

static mw_status run_event(mw_model *m, const ev *e) {
    mw_act_plan *ap = m->act;
    store *s = &ap->st[e->st];
    const size_t nf = s->bytes / sizeof(float);
    switch (e->kind) {
    case E_WAIT_W: return wait_one(ap, &s->wid);
    case E_READ: return start_io(ap, e->st, 1);
    case E_WAIT_R: return wait_one(ap, &s->rid);
    case E_DEQ: dequant(together(s) ? s->q2 : s->q, nf, s->bits, (float *)s->b); return MW_OK;
    case E_QUANT: {
        size_t bad = 0;
        float *x = (float *)(swaps(s) && !together(s) ? s->s : s->a);
        const mw_status st = round_trip(s) ? round_in_place(x, nf, s->bits, m->cfg.seed, stream_of(m, s), s->q, &bad)
                                           : quant(x, nf, s->bits, m->cfg.seed, stream_of(m, s), s->q, &bad);
        if (st != MW_OK)
            return mw_fail(MW_ERR_ARG, "--act-compress: h.%d.%s holds a value that is not finite (element %zu): the "
                           "step diverged before its backward pass", s->layer, m->arch->lslot_names[s->v], bad);
        return MW_OK;
    }
    case E_WRITE: return start_io(ap, e->st, 0);
    }
    return MW_OK;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Op i's events of when (0 before, 1 after); before it, the writes' waits (release 1) or the rest
 * (release 0). */
static mw_status run_events(mw_model *m, int i, int when, int release) {
    mw_act_plan *ap = m->act;
    if (!ap) return MW_OK;
    for (int e = ap->ev_lo[2 * i + when]; e < ap->ev_lo[2 * i + when + 1]; e++) {
        const int k = ap->ev[e].kind;
        if (!when && (k == E_WAIT_W) != release) continue;
        const double t0 = now_s();
        MW_TRY(run_event(m, &ap->ev[e]));
        if (k == E_QUANT || k == E_DEQ) ap->t_q += now_s() - t0;
        else ap->t_w += now_s() - t0; /* waits, and starting a transfer (which may wait for the oldest) */
    }
    return MW_OK;
}

void mw_model_act_seconds(mw_model *m, double *compress_s, double *swap_wait_s, int reset) {
    mw_act_plan *ap = m->act;
    *compress_s = ap ? ap->t_q : 0;
    *swap_wait_s = ap ? ap->t_w : 0;
    if (ap && reset) ap->t_q = ap->t_w = 0;
}

mw_status mw_graph_act_release(mw_model *m, int i) { return run_events(m, i, 0, 1); }
mw_status mw_graph_act_before(mw_model *m, int i) { return run_events(m, i, 0, 0); }
mw_status mw_graph_act_after(mw_model *m, int i) { return run_events(m, i, 1, 0); }

/* ---- the plan ------------------------------------------------------------------------------- */

uint64_t mw_graph_act_disk_bytes(const mw_model *m) { return m->act ? m->act->disk : 0; }

void mw_graph_act_op_io(const mw_model *m, int i, uint64_t *rd, uint64_t *wr) {
    *rd = *wr = 0;
    const mw_act_plan *ap = m->act;
    if (!ap) return;
    for (int w = 0; w < 2; w++)
        for (int e = ap->ev_lo[2 * i + w]; e < ap->ev_lo[2 * i + w + 1]; e++) {
            if (ap->ev[e].kind == E_READ) *rd += ap->st[ap->ev[e].st].io;
            if (ap->ev[e].kind == E_WRITE) *wr += ap->st[ap->ev[e].st].io;
        }
}

void mw_graph_act_timeline(const mw_model *m, const mw_planner *pl, mw_plan_op *ops) {
    const mw_act_plan *ap = m->act;
    if (!ap) return;
    const int n = m->nops;
    int64_t *dq = calloc((size_t)n + 1, sizeof(int64_t)), *dd = calloc((size_t)n + 1, sizeof(int64_t));
    if (!dq || !dd) { /* a drawing's detail: left out rather than failed */
        free(dq), free(dd);
        return;
    }
    for (int i = 0; i < pl->n; i++)
        if (tag_base(pl->b[i].tag) == TAG_Q || tag_base(pl->b[i].tag) == TAG_QREAD)
            dq[pl->b[i].first] += (int64_t)pl->b[i].bytes, dq[pl->b[i].last + 1] -= (int64_t)pl->b[i].bytes;
    for (int t = 0; t < ap->n; t++) /* on disk from its write's op to its read's end */
        if (swaps(&ap->st[t])) dd[ap->st[t].fs + 1] += (int64_t)ap->st[t].io, dd[ap->st[t].rs] -= (int64_t)ap->st[t].io;
    int64_t q = 0, d = 0;
    for (int i = 0; i < n; i++) {
        q += dq[i], d += dd[i];
        ops[i].act_compressed = (uint64_t)q, ops[i].act_on_disk = (uint64_t)d;
    }
    free(dq), free(dd);
}

const char *mw_graph_act_tag_name(const mw_model *m, int tag) {
    static const char *const Q[3][3] = {{" (8-bit)", " (8-bit, read back)", " (dequantised)"},
                                         {" (4-bit)", " (4-bit, read back)", " (dequantised)"},
                                         {" (2-bit)", " (2-bit, read back)", " (dequantised)"}};
    (void)m;
    if (tag == 1) return " (recomputed)";
    if (tag == TAG_READ) return " (read back)";
    if (tag >= TAG_Q && tag < TAG_Q + 3 * TAG_BITS) return Q[(tag - TAG_Q) / TAG_BITS][(tag - TAG_Q) % TAG_BITS];
    return "";
}

void mw_graph_act_summary(const mw_model *m, mw_plan_summary *s) {
    mw_graph_act_sel_text(m, s->act_pin, sizeof s->act_pin);
    snprintf(s->act_choice, sizeof s->act_choice, "%s", m->act_choice);
    s->pred_act_recompute_s = m->pred_act[0], s->pred_act_compress_s = m->pred_act[1];
    s->pred_act_swap_s = m->pred_act[2], s->pred_act_s = m->pred_act[3];
    s->act_offload = m->cfg.act_offload;
    snprintf(s->act_why, sizeof s->act_why, "%s", m->act_why);
    s->act_compress = m->cfg.act_compress;
    s->act_disk = 0;
    s->nact = 0;
    const mw_act_plan *ap = m->act;
    if (!ap) return;
    s->act_disk = ap->disk;
    const mw_model_def *a = m->arch;
    for (int t = 0; t < ap->n; t++) {
        const store *st = &ap->st[t];
        int c = 0;
        while (c < s->nact && strcmp(s->act[c].name, a->lslot_names[st->v]) != 0) c++;
        if (c == s->nact) {
            if (s->nact == MW_ACT_CLASSES) continue;
            memset(&s->act[c], 0, sizeof s->act[c]);
            snprintf(s->act[c].name, sizeof s->act[c].name, "%s", a->lslot_names[st->v]);
            s->nact++;
        }
        mw_act_class *k = &s->act[c];
        k->bytes += st->bytes;
        if (swaps(st)) k->swapped++, k->disk_bytes += st->io;
        if (comps(st)) k->compressed++, k->compressed_bytes += st->qbytes;
        if (st->layer < MW_MAX_BLOCK_POLICIES) {
            if (swaps(st)) k->swap_l[st->layer / 8] |= (unsigned char)(1u << st->layer % 8);
            if (comps(st)) k->comp_l[st->layer / 8] |= (unsigned char)(1u << st->layer % 8);
        }
    }
    /* what each block keeps at all (stored or not), for the choice per value and block */
    for (int l = 0; m->act_sel && l < ap->nl && l < MW_MAX_BLOCK_POLICIES; l++)
        for (int v = 0; v < ap->nls; v++) {
            if (!ap->kept[l * ap->nls + v]) continue;
            int c = 0;
            while (c < s->nact && strcmp(s->act[c].name, a->lslot_names[v]) != 0) c++;
            if (c == s->nact) {
                if (s->nact == MW_ACT_CLASSES) continue;
                memset(&s->act[c], 0, sizeof s->act[c]);
                snprintf(s->act[c].name, sizeof s->act[c].name, "%s", a->lslot_names[v]);
                s->nact++;
            }
            s->act[c].kept_l[l / 8] |= (unsigned char)(1u << l % 8);
        }
}

/* ---- the prediction (actchoice.c) ------------------------------------------------------------ */

uint64_t mw_graph_act_quant_floats(const mw_model *m) {
    const mw_act_plan *ap = m->act;
    uint64_t n = 0;
    for (int t = 0; ap && t < ap->n; t++)
        if (comps(&ap->st[t])) n += ap->st[t].bytes / sizeof(float);
    return n;
}

/* seconds of ops [a, b) of m at kc's costs */
static double span_s(const mw_model *m, const double *kc, int a, int b) {
    double s = 0;
    for (int i = a < 0 ? 0 : a; i < b && i < m->nops; i++) /* kinds past the model's: transfers */
        if (m->ops[i].kind < m->arch->nkinds) s += kc[m->ops[i].kind];
    return s;
}

double mw_graph_act_swap_exposed(const mw_model *m, const double *kc, double rd, double wr) {
    const mw_act_plan *ap = m->act;
    if (!ap || !(rd > 0) || !(wr > 0)) return 0;
    double out = 0;
    for (int l = 0; l <= ap->nl; l++) {
        uint64_t wb = 0, rb = 0;
        int w0 = m->nops, w1 = -1, r0 = m->nops, r1 = -1;
        for (int t = 0; t < ap->n; t++) {
            const store *s = &ap->st[t];
            if (s->layer != l || !swaps(s)) continue;
            wb += s->io, rb += s->io;
            if (s->fs + 1 < w0) w0 = s->fs + 1;
            if (s->wa > w1) w1 = s->wa;
            if (s->p < r0) r0 = s->p;
            if (s->rs > r1) r1 = s->rs;
        }
        if (!wb) continue;
        const double tw = (double)wb / wr - span_s(m, kc, w0, w1), tr = (double)rb / rd - span_s(m, kc, r0, r1);
        out += (tw > 0 ? tw : 0) + (tr > 0 ? tr : 0);
    }
    return out;
}
