/* GPT-2: the parameter table, the step as a schedule of ops, its executor, the recomputation
 * policies (auto included), and incremental decoding.
 *
 * build_schedule() lists the ops of one step for the policy; walk() derives every buffer and
 * its lifetime from the ops' access lists. Walked into the planner it is the estimate; walked
 * over the planner's offsets it binds each op's pointers in the arena. Both walks make the same
 * calls, so the estimate is the allocation, byte for byte. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/arena.h"
#include "../core/rng.h"
#include "../core/status.h"
#include "../kernels/cpu/ops.h"
#include "../memory/planner.h"
#include "../optim/adamw.h"
#include "gpt2.h"

/* Per-layer tensors, in storage order (Hugging Face GPT-2 names after "h.<l>."). */
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, NLAYERT };
static const char *layer_names[NLAYERT] = {
    "ln_1.weight",    "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",   "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias",  "mlp.c_proj.weight", "mlp.c_proj.bias"};

typedef struct tensor {
    char name[64];
    int ndim, dims[2];
    size_t numel, offset; /* offset in floats inside the flat parameter buffer */
    int decay;
} tensor;

typedef struct op_t {
    unsigned char kind;
    int layer;
} op_t;

struct mw_model {
    mw_config cfg;
    mw_plan_summary plan;
    mw_arena arena;
    int ntensors, nthreads;
    tensor *tensors;
    size_t nfloats; /* flat parameter buffer length, padding included */
    float *params, *grads, *m, *v;
    int32_t *staging;       /* the trainer's token windows: inputs (N), targets (N), window (B*(T+1)) */
    float *kcache, *vcache; /* inference (not evaluation): (L, ctx, C) each */
    float *dec;             /* inference (not evaluation): one position's scratch, see mw_model_decode */
    mw_gemm_ws gw;          /* the GEMMs' packing buffer (workspace in the plan) and threads */
    unsigned char *pol;     /* per block: P_NONE, P_SEL or P_FULL */
    int seg;                /* every:K: blocks per recomputed segment (0: per-block policies) */
    op_t *ops;              /* the schedule of one micro-batch and the optimizer */
    int nops, head_op, opt_op;
    void **opp; /* MAXACC pointers per op: its values, in the order of its kind's access list */
    int has_targets;
    mw_progress_fn progress; /* mw_model_set_progress: told of mw_evaluate's batches */
    void *progress_user;
};

static void policy_text(const mw_model *m, char *out, size_t len);
static const char *policy_name(int p);
static void budget_message(const mw_plan_summary *p);

#define NORM_QUANTUM 65536 /* grad-norm partial sums over fixed blocks: thread-independent */

static void add_tensor(mw_model *m, const char *name, int r, int c, int decay) {
    tensor *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = c ? 2 : 1;
    t->dims[0] = r;
    t->dims[1] = c;
    t->numel = (size_t)r * (c ? c : 1);
    t->offset = m->nfloats;
    t->decay = decay;
    m->nfloats += (t->numel + 15) / 16 * 16; /* every tensor 64-byte aligned */
}

static mw_status build_table(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int C = c->n_embd;
    m->tensors = calloc((size_t)c->n_layer * NLAYERT + 4, sizeof(tensor));
    if (!m->tensors) return mw_fail(MW_ERR_NOMEM, "cannot allocate the parameter table");
    add_tensor(m, "wte.weight", c->vocab, C, 1);
    add_tensor(m, "wpe.weight", c->ctx, C, 1);
    const int rows[NLAYERT] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
    const int cols[NLAYERT] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
    for (int l = 0; l < c->n_layer; l++)
        for (int k = 0; k < NLAYERT; k++) {
            char name[64];
            snprintf(name, sizeof name, "h.%d.%s", l, layer_names[k]);
            add_tensor(m, name, rows[k], cols[k], cols[k] != 0);
        }
    add_tensor(m, "ln_f.weight", C, 0, 0);
    add_tensor(m, "ln_f.bias", C, 0, 0);
    return MW_OK;
}

/* ---- the step as a schedule of ops over named values -----------------------------------------
 *
 * A step is a list of ops (embed, six forward ops per block, the head with its loss and gradient,
 * the backward ops, recomputations where the policy asks for them, the optimizer). Each op kind
 * reads, writes or updates in place a fixed list of values (a layer's qkv, the gradient of the
 * residual stream, ...). Walking the list gives every value's instances and their lifetimes: a
 * write starts a new instance, which lives until its last read before the next write. A value
 * that the schedule recomputes before backward therefore dies during forward by itself, and the
 * same walk that plans the memory binds the pointers the executor uses: the estimate is the
 * allocation, byte for byte, for every policy. */

/* values of block l (X is its input: the embedding for l = 0, the last block's output for l = L) */
enum { X, LN1, LN1S, QKV, ATTY, LSE, RES2, LN2, LN2S, FCH, GELU, NLS };
static const char *lslot_names[NLS] = {"x",    "ln1",  "ln1_stats", "qkv", "atty", "lse",
                                       "res2", "ln2",  "ln2_stats", "fch", "gelu"};
/* values of the step */
enum { G_IN, G_TGT, G_LNF, G_LNFS, G_LOGITS, G_LOSSES, G_DRES, G_DTMP, G_DQKV, G_ATTS, G_NORM, NGS };
static const char *gslot_names[NGS] = {"inputs", "targets", "lnf",  "lnf_stats", "logits", "losses",
                                       "dres",   "dtmp",    "dqkv", "att_scratch", "norm_parts"};
#define XN 100         /* the next block's X */
#define GS(g) (-1 - (g))
enum { R, W, U }; /* read; write (a new instance); update in place (read and write the same one) */

enum {
    K_EMB, K_LN1QKV, K_ATTN, K_PROJ, K_LN2FC, K_GELU, K_FCPROJ, K_LN1, K_LN2, K_HEAD, K_LOGITS,
    K_BFCPROJ, K_BFC, K_BPROJ, K_BATTN, K_BQKV, K_EMBB, K_OPT, NKINDS
};
#define MAXACC 8
typedef struct { signed char slot, mode; } access;
static const struct kind {
    const char *name;
    int n;
    access a[MAXACC];
} KINDS[NKINDS] = {
    [K_EMB] = {"embed", 3, {{GS(G_IN), W}, {GS(G_TGT), W}, {X, W}}},
    [K_LN1QKV] = {"ln1+qkv", 4, {{X, R}, {LN1, W}, {LN1S, W}, {QKV, W}}},
    [K_ATTN] = {"attention", 4, {{QKV, R}, {ATTY, W}, {LSE, W}, {GS(G_ATTS), W}}},
    [K_PROJ] = {"attn proj", 3, {{X, R}, {ATTY, R}, {RES2, W}}},
    [K_LN2FC] = {"ln2+fc", 4, {{RES2, R}, {LN2, W}, {LN2S, W}, {FCH, W}}},
    [K_GELU] = {"gelu", 2, {{FCH, R}, {GELU, W}}},
    [K_FCPROJ] = {"fc proj", 3, {{RES2, R}, {GELU, R}, {XN, W}}},
    [K_LN1] = {"ln1", 3, {{X, R}, {LN1, W}, {LN1S, W}}},
    [K_LN2] = {"ln2", 3, {{RES2, R}, {LN2, W}, {LN2S, W}}},
    [K_HEAD] = {"head+loss", 8,
                {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                 {GS(G_LOSSES), W}, {GS(G_DTMP), W}, {GS(G_DRES), W}}},
    [K_LOGITS] = {"head", 6,
                  {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                   {GS(G_LOSSES), W}}},
    [K_BFCPROJ] = {"fc proj bwd", 3, {{FCH, R}, {GELU, U}, {GS(G_DRES), U}}},
    [K_BFC] = {"ln2+fc bwd", 6,
               {{LN2, R}, {LN2S, R}, {RES2, R}, {GELU, U}, {GS(G_DTMP), W}, {GS(G_DRES), U}}},
    [K_BPROJ] = {"attn proj bwd", 3, {{ATTY, R}, {GS(G_DRES), U}, {GS(G_DTMP), W}}},
    [K_BATTN] = {"attention bwd", 6,
                 {{GS(G_DTMP), R}, {QKV, R}, {ATTY, R}, {LSE, R}, {GS(G_DQKV), W}, {GS(G_ATTS), W}}},
    [K_BQKV] = {"ln1+qkv bwd", 6,
                {{GS(G_DQKV), R}, {LN1, R}, {LN1S, R}, {X, R}, {GS(G_DTMP), W}, {GS(G_DRES), U}}},
    [K_EMBB] = {"embed bwd", 2, {{GS(G_DRES), U}, {GS(G_IN), R}}},
    [K_OPT] = {"optimizer", 1, {{GS(G_NORM), W}}},
};

#define LOSS_ROWS 256 /* the head and the loss run over this many positions at a time */
#define GEMM_NC 512   /* columns of B the GEMMs pack at a time (the packing buffer's size) */
#define WS (&m->gw)   /* the model's GEMM workspace, for the kernels' calls */

/* An inference model keeps all (B,T,V) logits and a KV cache; training and evaluation models
 * (MW_INFERENCE_EVAL) only one LOSS_ROWS chunk's logits, and no cache. */
static int keeps_logits(const mw_config *c) { return c->inference == 1; }

/* Per-layer policies. P_SEG: recomputed with its segment (every:K). */
enum { P_NONE, P_SEL, P_FULL };

static int kind_is_forward(int k) { return k >= K_LN1QKV && k <= K_LN2; }

static void push(mw_model *m, int kind, int layer) {
    m->ops[m->nops].kind = (unsigned char)kind;
    m->ops[m->nops].layer = layer;
    m->nops++;
}

static void push_block_forward(mw_model *m, int l, int with_output) {
    push(m, K_LN1QKV, l);
    push(m, K_ATTN, l);
    push(m, K_PROJ, l);
    push(m, K_LN2FC, l);
    push(m, K_GELU, l);
    if (with_output) push(m, K_FCPROJ, l);
}

/* The backward of block l under policy p, recomputing what p did not keep. */
static void push_block_backward(mw_model *m, int l, int p) {
    if (p == P_FULL) { /* the whole block again, from its input; qkv once more after the MLP */
        push(m, K_LN1QKV, l);
        push(m, K_ATTN, l);
        push(m, K_PROJ, l);
        push(m, K_LN2FC, l);
    }
    if (p != P_NONE) push(m, K_GELU, l);
    push(m, K_BFCPROJ, l);
    if (p != P_NONE) push(m, K_LN2, l);
    push(m, K_BFC, l);
    push(m, K_BPROJ, l);
    if (p == P_FULL) push(m, K_LN1QKV, l);
    push(m, K_BATTN, l);
    if (p == P_SEL) push(m, K_LN1, l);
    push(m, K_BQKV, l);
}

static mw_status build_schedule(mw_model *m) {
    const int L = m->cfg.n_layer;
    m->ops = malloc(sizeof *m->ops * (size_t)(20 * L + 8));
    if (!m->ops) return mw_fail(MW_ERR_NOMEM, "cannot allocate the schedule");
    m->nops = 0;
    push(m, K_EMB, 0);
    for (int l = 0; l < L; l++) push_block_forward(m, l, 1);
    m->head_op = m->nops;
    if (m->cfg.inference) {
        push(m, K_LOGITS, L);
        m->opt_op = -1;
        return MW_OK;
    }
    push(m, K_HEAD, L);
    if (m->seg > 0) { /* segments [s, e] of seg blocks from the top: keep x_s, redo the rest */
        for (int e = L - 1; e >= 0;) {
            const int s = e / m->seg * m->seg;
            for (int l = s; l <= e; l++) push_block_forward(m, l, l < e);
            for (int l = e; l >= s; l--) push_block_backward(m, l, P_NONE);
            e = s - 1;
        }
    } else {
        for (int l = L - 1; l >= 0; l--) push_block_backward(m, l, m->pol[l]);
    }
    push(m, K_EMBB, 0);
    m->opt_op = m->nops;
    push(m, K_OPT, 0);
    return MW_OK;
}

/* Size, category and name of slot (global, or NGS + l*NLS + value). */
static void slot_info(const mw_model *m, int slot, uint64_t *bytes, int *cat, const char **name,
                      int *layer) {
    const mw_config *c = &m->cfg;
    const uint64_t B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, V = c->vocab, N = B * T;
    const uint64_t F = sizeof(float);
    if (slot < NGS) {
        static const int gcat[NGS] = {MW_CAT_ACTS, MW_CAT_ACTS, MW_CAT_ACTS, MW_CAT_ACTS,
                                      MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK,
                                      MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK};
        uint64_t rows = N < LOSS_ROWS ? N : LOSS_ROWS;
        const uint64_t gbytes[NGS] = {
            N * sizeof(int32_t), N * sizeof(int32_t), N * C * F, 2 * N * F,
            (keeps_logits(c) ? N : rows) * V * F, N * F, N * C * F, N * C * F, 3 * N * C * F,
            (uint64_t)m->nthreads * mw_attention_scratch_floats(c->seq) * F,
            (m->nfloats / NORM_QUANTUM + 1) * sizeof(double)};
        *bytes = gbytes[slot];
        *cat = gcat[slot];
        *name = gslot_names[slot];
        *layer = -1;
        if (slot == G_LOGITS && keeps_logits(c)) *cat = MW_CAT_ACTS;
        return;
    }
    const int v = (slot - NGS) % NLS;
    const uint64_t lbytes[NLS] = {N * C * F, N * C * F, 2 * N * F,     3 * N * C * F,
                                  N * C * F, B * H * T * F, N * C * F, N * C * F,
                                  2 * N * F, 4 * N * C * F, 4 * N * C * F};
    *bytes = lbytes[v];
    *cat = MW_CAT_ACTS;
    *name = lslot_names[v];
    *layer = (slot - NGS) / NLS;
}

static int resolve_slot(int s, int layer) {
    if (s < 0) return -1 - s;
    if (s == XN) return NGS + (layer + 1) * NLS + X;
    return NGS + layer * NLS + s;
}

/* Adds every buffer of the step to pl (planning), or binds m's pointers to placed (offsets from
 * the planner, same order) inside base. The two modes make the same walk. */
static mw_status walk(mw_model *m, mw_planner *pl, const mw_pbuf *placed, char *base) {
    const mw_config *c = &m->cfg;
    const int L = c->n_layer, last = m->nops - 1, nslots = NGS + (L + 1) * NLS;
    const uint64_t F = sizeof(float), N = (uint64_t)c->batch * c->seq, C = c->n_embd;
    int idx = 0;
#define PERSIST(ptr, bytes, cat, nm)                                                               \
    do {                                                                                           \
        if (placed)                                                                                \
            (ptr) = (void *)(base + placed[idx++].offset);                                         \
        else                                                                                       \
            MW_TRY(mw_planner_add(pl, (nm), -1, (bytes), (cat), 0, last));                         \
    } while (0)
    PERSIST(m->params, m->nfloats * F, MW_CAT_PARAMS, "params");
    if (!c->inference) {
        PERSIST(m->grads, m->nfloats * F, MW_CAT_GRADS, "grads");
        PERSIST(m->m, m->nfloats * F, MW_CAT_OPTIM, "adam_m");
        PERSIST(m->v, m->nfloats * F, MW_CAT_OPTIM, "adam_v");
    }
    PERSIST(m->gw.buf, m->gw.floats * F, MW_CAT_WORK, "gemm_pack");
    PERSIST(m->staging, (2 * N + (uint64_t)c->batch * (c->seq + 1)) * sizeof(int32_t), MW_CAT_WORK,
            "token_staging");
    if (keeps_logits(c)) { /* the KV cache of decoding */
        const uint64_t CTX = c->ctx;
        PERSIST(m->kcache, (uint64_t)L * CTX * C * F, MW_CAT_ACTS, "kcache");
        PERSIST(m->vcache, (uint64_t)L * CTX * C * F, MW_CAT_ACTS, "vcache");
        PERSIST(m->dec, (12 * C + CTX + c->vocab + 8) * F, MW_CAT_WORK, "decode");
    }
#undef PERSIST
    int *cur = malloc(sizeof(int) * (size_t)nslots);
    if (!cur) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    for (int i = 0; i < nslots; i++) cur[i] = -1;
    mw_status st = MW_OK;
    for (int i = 0; i < m->nops && st == MW_OK; i++) {
        const struct kind *k = &KINDS[m->ops[i].kind];
        const int layer = m->ops[i].layer;
        for (int a = 0; a < k->n && st == MW_OK; a++) {
            const int slot = resolve_slot(k->a[a].slot, layer);
            if (k->a[a].mode == W) {
                if (placed) {
                    cur[slot] = idx++;
                } else {
                    uint64_t bytes;
                    int cat, lay;
                    const char *name;
                    slot_info(m, slot, &bytes, &cat, &name, &lay);
                    st = mw_planner_add(pl, name, lay, bytes, (mw_category)cat, i, i);
                    if (st == MW_OK) {
                        pl->b[pl->n - 1].tag = i > m->head_op && kind_is_forward(m->ops[i].kind);
                        cur[slot] = pl->n - 1;
                    }
                }
            } else if (cur[slot] < 0) {
                st = mw_fail(MW_ERR_ARG, "internal: op %s of layer %d reads a value never written",
                             k->name, layer);
            } else if (!placed) {
                pl->b[cur[slot]].last = i;
            }
            if (st == MW_OK && placed) m->opp[(size_t)i * MAXACC + a] = base + placed[cur[slot]].offset;
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
    s->budget = m->cfg.budget;
    s->fits = s->budget == 0 || s->peak <= s->budget;
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

const char *mw_tier_name(mw_tier t) { return t == MW_TIER_DEVICE ? "device" : "?"; }

static const char *policy_name(int p) {
    return p == P_NONE ? "none" : p == P_SEL ? "selective" : "full";
}

/* "full", "every:3", or runs of layers: "full 0-3, selective 4-11" */
static void policy_text(const mw_model *m, char *out, size_t len) {
    const int L = m->cfg.n_layer;
    out[0] = 0;
    if (m->cfg.inference) {
        snprintf(out, len, "%s", keeps_logits(&m->cfg) ? "inference" : "eval");
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

/* A dry run for cfg: a model without memory and its placed plan. On success the caller frees
 * both (mw_planner_free, mw_model_destroy); on failure nothing is left. */
static mw_status plan_dry(const mw_config *cfg, mw_model **m, mw_planner *pl, mw_plan_summary *s) {
    MW_TRY(model_skeleton(m, cfg));
    mw_status st = plan_model(*m, pl, s);
    if (st != MW_OK) mw_model_destroy(*m);
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
    mw_plan_buffer *b = calloc((size_t)pl.n + 1, sizeof *b);
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
    mw_planner_free(&pl);
    mw_model_destroy(m);
    *out = b;
    return st;
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
        memcpy(o[i].live, live + (size_t)i * MW_CAT_COUNT, sizeof o[i].live);
        snprintf(o[i].op, sizeof o[i].op, "%s", KINDS[k].name);
        if (k == K_EMB || k == K_HEAD || k == K_LOGITS || k == K_EMBB || k == K_OPT)
            snprintf(o[i].name, sizeof o[i].name, "%s", KINDS[k].name);
        else if (kind_is_forward(k))
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

static mw_status model_skeleton(mw_model **out, const mw_config *cfg) {
    MW_TRY(mw_config_validate(cfg));
    if (cfg->arch != MW_ARCH_GPT2)
        return mw_fail(MW_ERR_ARG, "the %s family has no model yet", mw_arch_name(cfg->arch));
    mw_model *m = calloc(1, sizeof *m);
    if (!m) return mw_fail(MW_ERR_NOMEM, "cannot allocate the model");
    m->cfg = *cfg;
    m->nthreads = omp_get_max_threads();
    m->gw.nthreads = m->nthreads;
    m->gw.floats = mw_gemm_ws_floats(m->nthreads, GEMM_NC);
    m->pol = calloc((size_t)cfg->n_layer, 1);
    mw_status s = m->pol ? build_table(m) : mw_fail(MW_ERR_NOMEM, "cannot allocate the layer table");
    if (s == MW_OK) s = resolve_policy(m);
    if (s == MW_OK) s = build_schedule(m);
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
    if (!m->plan.fits) {
        budget_message(&m->plan);
        s = MW_ERR_BUDGET;
    }
    if (s == MW_OK) {
        m->opp = calloc((size_t)m->nops * MAXACC, sizeof *m->opp);
        if (!m->opp) s = mw_fail(MW_ERR_NOMEM, "cannot allocate the schedule's pointers");
    }
    if (s == MW_OK) s = mw_arena_init(&m->arena, m->plan.peak);
    if (s == MW_OK) s = walk(m, NULL, pl.b, m->arena.base);
    mw_planner_free(&pl);
    if (s != MW_OK) {
        mw_model_destroy(m);
        return s;
    }
    *out = m;
    return MW_OK;
}

void mw_model_destroy(mw_model *m) {
    if (!m) return;
    mw_arena_release(&m->arena);
    free(m->tensors);
    free(m->pol);
    free(m->ops);
    free(m->opp);
    free(m);
}

static void budget_message(const mw_plan_summary *p) {
    char b[MW_CAT_COUNT][32], pk[32], bu[32], msg[400];
    int n = 0;
    for (int k = 0; k < MW_CAT_COUNT; k++)
        n += snprintf(msg + n, sizeof msg - n, "%s%s %s", k ? ", " : "", mw_category_name(k),
                      mw_fmt_bytes(p->category[k], b[k], sizeof b[k]));
    mw_fail(MW_ERR_BUDGET, "the plan needs %llu bytes (%s) but --budget is %llu bytes (%s): %s",
            (unsigned long long)p->peak, mw_fmt_bytes(p->peak, pk, sizeof pk),
            (unsigned long long)p->budget, mw_fmt_bytes(p->budget, bu, sizeof bu), msg);
}

const mw_config *mw_model_config(const mw_model *m) { return &m->cfg; }
const mw_plan_summary *mw_model_plan(const mw_model *m) { return &m->plan; }
int mw_model_num_tensors(const mw_model *m) { return m->ntensors; }

mw_status mw_model_tensor(const mw_model *m, int i, mw_param_info *info) {
    if (i < 0 || i >= m->ntensors) return mw_fail(MW_ERR_ARG, "tensor index %d out of range", i);
    const tensor *t = &m->tensors[i];
    info->name = t->name;
    info->ndim = t->ndim;
    info->dims[0] = t->dims[0];
    info->dims[1] = t->dims[1];
    info->numel = t->numel;
    info->decay = t->decay;
    info->data = m->params + t->offset;
    info->grad = m->grads ? m->grads + t->offset : NULL;
    info->m = m->m ? m->m + t->offset : NULL;
    info->v = m->v ? m->v + t->offset : NULL;
    return MW_OK;
}

void mw_model_memory(const mw_model *m, uint64_t category[MW_CAT_COUNT], uint64_t *peak) {
    for (int k = 0; k < MW_CAT_COUNT; k++) category[k] = m->plan.category[k];
    *peak = m->plan.peak;
}

void mw_model_init_gpt2(mw_model *m, uint64_t seed) {
    const double resid_std = 0.02 / sqrt(2.0 * m->cfg.n_layer);
    for (int i = 0; i < m->ntensors; i++) {
        const tensor *t = &m->tensors[i];
        float *p = m->params + t->offset;
        size_t len = strlen(t->name);
        int is_weight = len > 7 && strcmp(t->name + len - 7, ".weight") == 0;
        if (t->ndim == 1) { /* LayerNorm gains 1, every bias 0 */
            float val = is_weight ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->numel; j++) p[j] = val;
            continue;
        }
        double std = len > 13 && strcmp(t->name + len - 13, "c_proj.weight") == 0 ? resid_std : 0.02;
        size_t nblk = (t->numel + NORM_QUANTUM - 1) / NORM_QUANTUM;
        /* blocks draw from their own stream: the same values for any thread count */
#pragma omp parallel for schedule(static)
        for (size_t b = 0; b < nblk; b++) {
            uint64_t s = seed ^ ((uint64_t)(i + 1) << 40) ^ (b * 0x9E3779B97F4A7C15ull);
            mw_rng_next(&s);
            size_t j1 = (b + 1) * NORM_QUANTUM < t->numel ? (b + 1) * NORM_QUANTUM : t->numel;
            for (size_t j = b * NORM_QUANTUM; j < j1; j += 2) { /* Box-Muller gives a pair */
                double r = sqrt(-2.0 * log(mw_rng_unit(&s))), th = 6.283185307179586 * mw_rng_unit(&s);
                p[j] = (float)(std * r * cos(th));
                if (j + 1 < j1) p[j + 1] = (float)(std * r * sin(th));
            }
        }
    }
}

/* Pointers of layer l's tensors inside a flat buffer (params or grads). */
static void layer_ptrs(const mw_model *m, float *base, int l, float *p[NLAYERT]) {
    for (int k = 0; k < NLAYERT; k++) p[k] = base + m->tensors[2 + l * NLAYERT + k].offset;
}
#define WTE(base) ((base) + m->tensors[0].offset)
#define WPE(base) ((base) + m->tensors[1].offset)
#define LNFW(base) ((base) + m->tensors[m->ntensors - 2].offset)
#define LNFB(base) ((base) + m->tensors[m->ntensors - 1].offset)

static void copy_rows(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

/* ---- the executor: runs ops of the schedule on their bound pointers ------------------------- */

/* Runs op i. train: compute gradients in the head (the loss's gradient scaled by dloss). */
static void run_op(mw_model *m, int i, int train, float dloss, double *loss_sum) {
    const mw_config *c = &m->cfg;
    const int B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, V = c->vocab, N = B * T;
    const int L = c->n_layer, l = m->ops[i].layer;
    void **P = m->opp + (size_t)i * MAXACC;
#define F(k) ((float *)P[k])
    float *p[NLAYERT], *g[NLAYERT];
    if (l < L) {
        layer_ptrs(m, m->params, l, p);
        if (m->grads) layer_ptrs(m, m->grads, l, g);
    }
    float *G = m->grads;
    switch (m->ops[i].kind) {
    case K_EMB:
        mw_encoder_forward(F(2), (const int32_t *)P[0], WTE(m->params), WPE(m->params), B, T, C);
        break;
    case K_LN1QKV:
    case K_LN1:
        mw_layernorm_forward(F(1), F(2), F(2) + N, F(0), p[LN1W], p[LN1B], N, C);
        if (m->ops[i].kind == K_LN1QKV) mw_matmul_forward(F(3), F(1), p[QKVW], p[QKVB], N, C, 3 * C, 0, WS);
        break;
    case K_ATTN:
        mw_attention_forward(F(1), F(2), F(3), m->nthreads, F(0), B, T, C, H);
        break;
    case K_PROJ:
        copy_rows(F(2), F(0), (size_t)N * C);
        mw_matmul_forward(F(2), F(1), p[PROJW], p[PROJB], N, C, C, 1, WS);
        break;
    case K_LN2FC:
    case K_LN2:
        mw_layernorm_forward(F(1), F(2), F(2) + N, F(0), p[LN2W], p[LN2B], N, C);
        if (m->ops[i].kind == K_LN2FC) mw_matmul_forward(F(3), F(1), p[FCW], p[FCB], N, C, 4 * C, 0, WS);
        break;
    case K_GELU:
        mw_gelu_forward(F(1), F(0), (long)N * 4 * C);
        break;
    case K_FCPROJ:
        copy_rows(F(2), F(0), (size_t)N * C);
        mw_matmul_forward(F(2), F(1), p[FCPW], p[FCPB], N, 4 * C, C, 1, WS);
        break;
    case K_HEAD:
    case K_LOGITS: {
        const int kind = m->ops[i].kind, has_tg = m->has_targets;
        const int32_t *tg = (const int32_t *)P[1];
        float *lnf = F(2), *stats = F(3), *logits = F(4), *losses = F(5);
        const float *x = F(0);
        mw_layernorm_forward(lnf, stats, stats + N, x, LNFW(m->params), LNFB(m->params), N, C);
        const int grad = kind == K_HEAD && train;
        for (int n0 = 0; n0 < N; n0 += LOSS_ROWS) { /* positions in fixed quanta */
            const int rows = n0 + LOSS_ROWS < N ? LOSS_ROWS : N - n0;
            float *z = keeps_logits(c) ? logits + (size_t)n0 * V : logits; /* or one chunk's */
            mw_matmul_forward(z, lnf + (size_t)n0 * C, WTE(m->params), NULL, rows, C, V, 0, WS);
            if (!has_tg) continue;
            mw_crossentropy(z, losses + n0, tg + n0, dloss, grad, rows, V);
            if (grad)
                mw_matmul_backward(F(6) + (size_t)n0 * C, WTE(G), NULL, z, lnf + (size_t)n0 * C,
                                   WTE(m->params), rows, C, V, 0, WS);
        }
        if (has_tg) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += losses[n];
            *loss_sum = s;
        }
        if (grad) {
            memset(F(7), 0, sizeof(float) * (size_t)N * C);
            mw_layernorm_backward_acc(F(7), LNFW(G), LNFB(G), F(6), x, LNFW(m->params), stats,
                                      stats + N, N, C);
        }
        break;
    }
    case K_BFCPROJ: /* dW from gelu, then d(gelu) over gelu, then through GELU: all in place */
        mw_matmul_backward(NULL, g[FCPW], g[FCPB], F(2), F(1), p[FCPW], N, 4 * C, C, 0, WS);
        mw_matmul_backward_dinp(F(1), F(2), p[FCPW], N, 4 * C, C, WS);
        mw_gelu_backward_inplace(F(1), F(0), (long)N * 4 * C);
        break;
    case K_BFC:
        mw_matmul_backward(F(4), g[FCW], g[FCB], F(3), F(0), p[FCW], N, C, 4 * C, 0, WS);
        mw_layernorm_backward_acc(F(5), g[LN2W], g[LN2B], F(4), F(2), p[LN2W], F(1), F(1) + N, N, C);
        break;
    case K_BPROJ:
        mw_matmul_backward(F(2), g[PROJW], g[PROJB], F(1), F(0), p[PROJW], N, C, C, 0, WS);
        break;
    case K_BATTN:
        mw_attention_backward(F(4), F(5), m->nthreads, F(0), F(1), F(2), F(3), B, T, C, H);
        break;
    case K_BQKV:
        mw_matmul_backward(F(4), g[QKVW], g[QKVB], F(0), F(1), p[QKVW], N, C, 3 * C, 0, WS);
        mw_layernorm_backward_acc(F(5), g[LN1W], g[LN1B], F(4), F(3), p[LN1W], F(2), F(2) + N, N, C);
        break;
    case K_EMBB:
        mw_encoder_backward(WTE(G), WPE(G), F(0), (const int32_t *)P[1], B, T, C);
        break;
    default:
        break;
    }
#undef F
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
    if (!keeps_logits(&m->cfg) && !targets)
        return mw_fail(MW_ERR_ARG, "a training or evaluation model keeps no logits: give targets (for "
                                   "the loss) or build an inference model");
    MW_TRY(load_tokens(m, inputs, targets));
    double s = 0.0;
    for (int i = 0; i <= m->head_op; i++) run_op(m, i, 0, 0.0f, &s);
    if (targets) *loss = (float)(s / ((double)m->cfg.batch * m->cfg.seq));
    return MW_OK;
}

mw_status mw_model_forward_backward(mw_model *m, const int32_t *inputs, const int32_t *targets,
                                    float grad_scale, float *loss) {
    const mw_config *c = &m->cfg;
    if (c->inference) return mw_fail(MW_ERR_ARG, "an inference model has no gradients");
    if (!targets) return mw_fail(MW_ERR_ARG, "training needs targets");
    MW_TRY(load_tokens(m, inputs, targets));
    const int N = c->batch * c->seq;
    double s = 0.0;
    for (int i = 0; i < m->opt_op; i++) run_op(m, i, 1, grad_scale / N, &s);
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

const float *mw_model_logits(const mw_model *m) {
    return keeps_logits(&m->cfg) ? (const float *)m->opp[(size_t)m->head_op * MAXACC + 4] : NULL;
}

/* ---- recomputation policies ---------------------------------------------------------------- */

static mw_status auto_policy(mw_model *m);

static mw_status resolve_policy(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int L = c->n_layer;
    m->seg = 0;
    int p = P_NONE;
    if (c->inference) return MW_OK;
    switch (c->recompute) {
    case MW_RECOMPUTE_NONE: p = P_NONE; break;
    case MW_RECOMPUTE_SELECTIVE: p = P_SEL; break;
    case MW_RECOMPUTE_FULL: p = P_FULL; break;
    case MW_RECOMPUTE_EVERY: {
        int k = c->recompute_every > 0 ? c->recompute_every : (int)lround(sqrt((double)L));
        m->seg = k < 1 ? 1 : k > L ? L : k;
        return MW_OK;
    }
    case MW_RECOMPUTE_AUTO: return auto_policy(m);
    case MW_RECOMPUTE_BLOCKS:
        for (int l = 0; l < L; l++)
            m->pol[l] = c->recompute_blocks[l] == 'f' ? P_FULL : c->recompute_blocks[l] == 's' ? P_SEL : P_NONE;
        return MW_OK;
    default: return mw_fail(MW_ERR_ARG, "unknown recompute policy %d", c->recompute);
    }
    memset(m->pol, p, (size_t)L);
    return MW_OK;
}

void mw_model_zero_grad(mw_model *m) {
    if (m->grads) memset(m->grads, 0, sizeof(float) * m->nfloats);
}

double mw_model_grad_norm(const mw_model *m) {
    if (!m->grads) return 0.0;
    const size_t n = m->nfloats, nb = (n + NORM_QUANTUM - 1) / NORM_QUANTUM;
    const float *g = m->grads;
    double *parts = (double *)m->opp[(size_t)m->opt_op * MAXACC];
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t j1 = (b + 1) * NORM_QUANTUM < n ? (b + 1) * NORM_QUANTUM : n;
        double s = 0.0;
        for (size_t j = b * NORM_QUANTUM; j < j1; j++) s += (double)g[j] * g[j];
        parts[b] = s;
    }
    double s = 0.0;
    for (size_t b = 0; b < nb; b++) s += parts[b];
    return sqrt(s);
}

void mw_model_adamw_step(mw_model *m, double lr, double grad_norm, int t) {
    const mw_config *c = &m->cfg;
    if (c->inference) return;
    float coef = 1.0f;
    if (c->grad_clip > 0) { /* PyTorch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1 */
        float cc = (float)c->grad_clip / (float)(grad_norm + 1e-6);
        coef = cc < 1.0f ? cc : 1.0f;
    }
    for (int i = 0; i < m->ntensors; i++) {
        const tensor *ts = &m->tensors[i];
        mw_adamw_hp hp = {lr, c->beta1, c->beta2, c->eps, ts->decay ? c->weight_decay : 0.0, coef, t};
        mw_adamw_update(m->params + ts->offset, m->grads + ts->offset, m->m + ts->offset,
                        m->v + ts->offset, ts->numel, &hp);
    }
}

/* ---- incremental decoding -------------------------------------------------------------------- */

const float *mw_model_decode(mw_model *m, int32_t token, int pos) {
    const mw_config *c = &m->cfg;
    const int C = c->n_embd, H = c->n_head, V = c->vocab, CTX = c->ctx, hs = C / H;
    if (!keeps_logits(c) || token < 0 || token >= V || pos < 0 || pos >= CTX) return NULL;
    float *x = m->dec, *h = x + C, *qkv = h + C, *y = qkv + 3 * C, *fc = y + C, *att = fc + 4 * C;
    float *logits = att + CTX, *stats = logits + V; /* mean, rstd */
    const float *wte = WTE(m->params), *wpe = WPE(m->params);
    for (int i = 0; i < C; i++) x[i] = wte[(size_t)token * C + i] + wpe[(size_t)pos * C + i];
    const float scale = 1.0f / sqrtf((float)hs);
    for (int l = 0; l < c->n_layer; l++) {
        float *p[NLAYERT];
        layer_ptrs(m, m->params, l, p);
        float *K = m->kcache + (size_t)l * CTX * C, *Vc = m->vcache + (size_t)l * CTX * C;
        mw_layernorm_forward(h, stats, stats + 1, x, p[LN1W], p[LN1B], 1, C);
        mw_matmul_forward(qkv, h, p[QKVW], p[QKVB], 1, C, 3 * C, 0, WS);
        memcpy(K + (size_t)pos * C, qkv + C, sizeof(float) * C);
        memcpy(Vc + (size_t)pos * C, qkv + 2 * C, sizeof(float) * C);
        for (int hd = 0; hd < H; hd++) {
            const float *q = qkv + hd * hs;
            float mx = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= pos; j++) {
                const float *k = K + (size_t)j * C + hd * hs;
                float d = 0.0f;
                for (int e = 0; e < hs; e++) d += q[e] * k[e];
                att[j] = d * scale;
                mx = att[j] > mx ? att[j] : mx;
            }
            for (int j = 0; j <= pos; j++) sum += (att[j] = expf(att[j] - mx));
            float inv = 1.0f / sum, *o = y + hd * hs;
            for (int e = 0; e < hs; e++) o[e] = 0.0f;
            for (int j = 0; j <= pos; j++) {
                const float *v = Vc + (size_t)j * C + hd * hs;
                float a = att[j] * inv;
                for (int e = 0; e < hs; e++) o[e] += a * v[e];
            }
        }
        mw_matmul_forward(x, y, p[PROJW], p[PROJB], 1, C, C, 1, WS);
        mw_layernorm_forward(h, stats, stats + 1, x, p[LN2W], p[LN2B], 1, C);
        mw_matmul_forward(fc, h, p[FCW], p[FCB], 1, C, 4 * C, 0, WS);
        mw_gelu_forward(fc, fc, 4 * C);
        mw_matmul_forward(x, fc, p[FCPW], p[FCPB], 1, 4 * C, C, 1, WS);
    }
    mw_layernorm_forward(h, stats, stats + 1, x, LNFW(m->params), LNFB(m->params), 1, C);
    mw_matmul_forward(logits, h, wte, NULL, 1, C, V, 0, WS);
    return logits;
}

/* ---- auto: the fastest per-block policies that fit the budget ------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds per op kind at cfg's shape, measured on this machine: each forward kind runs on one
 * block at a calibration shape (1 sequence, T' = min(T, 256) positions, C' = min(C, 512)
 * channels in heads of cfg's size), best of 3, then scales with its work: N C^2 for the
 * matmuls, N C for the elementwise ops, B T^2 C for attention. */
static mw_status calibrate(int T, int C, int H, int nt, double cost[NKINDS]);
static mw_status measure_costs(const mw_config *c, double cost[NKINDS]) {
    const int hs = c->n_embd / c->n_head;
    const int T = c->seq < 256 ? c->seq : 256, Cc = c->n_embd < 512 ? c->n_embd : 512;
    const int H = Cc / hs > 0 ? Cc / hs : 1, C = hs <= Cc ? H * hs : Cc; /* wide heads: one of Cc */
    const int N = T, nt = omp_get_max_threads();
    const double Nr = (double)c->batch * c->seq, Cr = c->n_embd;
    /* the calibration of the last shape is kept (per thread): max_batch plans many batch sizes */
    static _Thread_local int cached_T, cached_C, cached_H, cached_nt;
    static _Thread_local double cached[NKINDS];
    if (!(cached_T == T && cached_C == C && cached_H == H && cached_nt == nt)) {
        MW_TRY(calibrate(T, C, H, nt, cached));
        cached_T = T, cached_C = C, cached_H = H, cached_nt = nt;
    }
    for (int k = 0; k < NKINDS; k++) {
        double scale = (Nr / N) * (Cr / C); /* elementwise */
        if (k == K_LN1QKV || k == K_PROJ || k == K_LN2FC || k == K_FCPROJ) scale *= Cr / C;
        if (k == K_ATTN) scale = (double)c->batch * ((double)c->seq / T) * ((double)c->seq / T) * (Cr / C);
        cost[k] = cached[k] * scale;
    }
    return MW_OK;
}

/* Seconds of each forward kind on one block of T positions, C channels, H heads. */
static mw_status calibrate(int T, int C, int H, int nt, double cost[NKINDS]) {
    const int N = T;
    const size_t nw = 12 * (size_t)C * C + 16 * (size_t)C;
    const size_t na = 15 * (size_t)N * C + 2 * (size_t)N + (size_t)H * N; /* x..gelu below */
    const size_t ns = (size_t)nt * mw_attention_scratch_floats(T), ng = mw_gemm_ws_floats(nt, GEMM_NC);
    float *w = calloc(nw + na + ns + ng, sizeof(float));
    if (!w) return mw_fail(MW_ERR_NOMEM, "out of memory measuring op costs");
    float *wqkv = w, *wp = wqkv + 3 * (size_t)C * C, *wfc = wp + (size_t)C * C, *wfp = wfc + 4 * (size_t)C * C;
    float *bias = wfp + 4 * (size_t)C * C, *lnw = bias + 4 * (size_t)C;
    float *x = w + nw, *ln = x + (size_t)N * C, *st = ln + (size_t)N * C, *qkv = st + 2 * (size_t)N;
    float *atty = qkv + 3 * (size_t)N * C, *lse = atty + (size_t)N * C, *res2 = lse + (size_t)H * N;
    float *fch = res2 + (size_t)N * C, *gelu = fch + 4 * (size_t)N * C, *scr = w + nw + na;
    const mw_gemm_ws cw = {scr + ns, ng, nt};
    for (size_t i = 0; i < nw + na; i++) w[i] = 0.01f * (float)((i * 2654435761u) % 201) - 1.0f;
    for (int i = 0; i < C; i++) lnw[i] = 1.0f;
    for (int k = 0; k < NKINDS; k++) cost[k] = 0.0;
    for (int k = K_LN1QKV; k <= K_LN2; k++) {
        double best = 1e30;
        for (int rep = 0; rep < 4; rep++) {
            double t0 = now_s();
            switch (k) {
            case K_LN1QKV:
                mw_layernorm_forward(ln, st, st + N, x, lnw, bias, N, C);
                mw_matmul_forward(qkv, ln, wqkv, bias, N, C, 3 * C, 0, &cw);
                break;
            case K_ATTN: mw_attention_forward(atty, lse, scr, nt, qkv, 1, T, C, H); break;
            case K_PROJ:
                copy_rows(res2, x, (size_t)N * C);
                mw_matmul_forward(res2, atty, wp, bias, N, C, C, 1, &cw);
                break;
            case K_LN2FC:
                mw_layernorm_forward(ln, st, st + N, res2, lnw, bias, N, C);
                mw_matmul_forward(fch, ln, wfc, bias, N, C, 4 * C, 0, &cw);
                break;
            case K_GELU: mw_gelu_forward(gelu, fch, (long)N * 4 * C); break;
            case K_FCPROJ:
                copy_rows(x, res2, (size_t)N * C);
                mw_matmul_forward(x, gelu, wfp, bias, N, 4 * C, C, 1, &cw);
                break;
            default: mw_layernorm_forward(ln, st, st + N, x, lnw, bias, N, C); break;
            }
            double t = now_s() - t0;
            if (rep > 0 && t < best) best = t; /* the first run warms up */
        }
        cost[k] = best;
    }
    free(w);
    return MW_OK;
}

/* Predicted recomputation seconds of one block under each policy. */
static void policy_costs(const double k[NKINDS], double out[3]) {
    out[P_NONE] = 0.0;
    out[P_SEL] = k[K_GELU] + k[K_LN2] + k[K_LN1];
    out[P_FULL] = 2 * k[K_LN1QKV] + k[K_ATTN] + k[K_PROJ] + k[K_LN2FC] + k[K_GELU] + k[K_LN2];
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
    MW_TRY(set_policy(m, p, 0));
    uint64_t *live;
    memset(pm, 0, sizeof *pm);
    MW_TRY(live_totals(m, &live, &pm->kept));
    const uint64_t below = (uint64_t)(L - 1) * pm->kept;
    for (int i = 0; i < m->nops; i++) {
        const op_t *o = &m->ops[i];
        if (i == m->head_op) {
            pm->head = live[i] - (uint64_t)L * pm->kept;
        } else if (o->kind == K_EMB || o->kind == K_EMBB || o->kind == K_OPT) {
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
                const uint64_t below = (uint64_t)a * pm[P_NONE].kept + (uint64_t)b * pm[P_SEL].kept +
                                       (uint64_t)(l - a - b) * pm[P_FULL].kept;
                for (int p = 0; p < 3; p++) {
                    uint64_t own = pm[p].fwd > pm[p].bwd ? pm[p].fwd : pm[p].bwd;
                    if (below + own > M) continue;
                    const int a2 = a + (p == P_NONE), b2 = b + (p == P_SEL);
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
            const uint64_t all = (uint64_t)a * pm[P_NONE].kept + (uint64_t)b * pm[P_SEL].kept +
                                 (uint64_t)(L - a - b) * pm[P_FULL].kept;
            uint64_t head = pm[P_NONE].head > pm[P_FULL].head ? pm[P_NONE].head : pm[P_FULL].head;
            if (best[a * S + b] < bv && all + head <= M && pm[P_NONE].tail <= M) {
                bv = best[a * S + b];
                ba = a, bb = b;
            }
        }
    if (ba >= 0) { /* walk the choices back down */
        for (int l = L - 1; l >= 0; l--) {
            const int p = choice[((size_t)l * S + ba) * S + bb];
            pol[l] = (unsigned char)p;
            ba -= p == P_NONE;
            bb -= p == P_SEL;
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
    double kc[NKINDS], cost[3];
    MW_TRY(measure_costs(&m->cfg, kc));
    policy_costs(kc, cost);
    pmodel pm[3];
    for (int p = 0; p < 3; p++) MW_TRY(probe(m, p, &pm[p]));
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
    const double seg_cost = cost[P_FULL] - kc[K_LN1QKV] - kc[K_LN2] + kc[K_FCPROJ];
    for (int K = 1; st == MW_OK && K <= L; K++) {
        const int nseg = (L + K - 1) / K;
        const double c = (double)L * seg_cost - (double)nseg * kc[K_FCPROJ];
        if (c >= best_cost) continue;
        uint64_t peak = 0, *live = NULL;
        st = set_policy(m, P_NONE, K);
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
            memset(m->pol, P_NONE, (size_t)L);
            m->seg = best_seg;
        } else if (best_seg == 0) {
            memcpy(m->pol, best, (size_t)L);
            m->seg = 0;
        } else { /* nothing fits: the smallest plan, which the budget check then refuses */
            memset(m->pol, P_FULL, (size_t)L);
            m->seg = 0;
        }
        free(m->ops);
        m->ops = NULL;
    }
    free(best), free(cand);
    return st;
}
