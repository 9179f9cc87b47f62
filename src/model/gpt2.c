/* GPT-2: the parameter table, the buffer plan of one training step, forward and backward.
 *
 * One function, layout(), lists every buffer of the step in a fixed order with its category.
 * Run against a measure arena it is the estimate; run against the real arena it binds the
 * pointers. Both runs make the same calls, so the estimate is the allocation, byte for byte. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct layer_acts {     /* what forward keeps for backward, one layer */
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) (N) (N) */
    float *qkv;                       /* (N,3C) */
    float *att;                       /* (B,H,T,T) softmax probabilities */
    float *atty;                      /* (N,C) attention output before c_proj */
    float *res2;                      /* (N,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C) (N) (N) */
    float *fch, *fch_gelu;            /* (N,4C) (N,4C) */
    float *res3;                      /* (N,C) block output */
} layer_acts;

struct mw_model {
    mw_config cfg;
    mw_plan_summary plan;
    mw_arena arena;
    int ntensors, nthreads;
    tensor *tensors;
    size_t nfloats; /* flat parameter buffer length, padding included */
    float *params, *grads, *m, *v;
    layer_acts *acts;
    int32_t *inputs, *targets;
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *dres, *dtmp, *dqkv, *dfch, *att_scratch; /* backward workspace, shared by layers */
    double *norm_parts;
    int32_t *staging; /* the trainer's token windows: inputs (N), targets (N), window (B*(T+1)) */
    float *kcache, *vcache; /* inference: (L, ctx, C) each */
    float *dec;             /* inference: one position's scratch, see mw_model_decode */
    int has_targets;
};

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

/* The ops of one micro-batch, then the optimizer: the clock that buffer lifetimes are told in. */
#define OP_EMB 0
#define OP_FWD(l) (1 + (l))
#define OP_HEAD_F (L + 1)
#define OP_HEAD_B (L + 2)
#define OP_BWD(l) (L + 3 + (L - 1 - (l)))
#define OP_EMB_B (2 * L + 3)
#define OP_OPT (2 * L + 4)
#define NOPS (2 * L + 5)

/* "m->dqkv" -> "dqkv", "la->ln1" -> "ln1": a buffer's name from the expression that holds it */
static const char *buf_name(const char *expr) {
    const char *a = strrchr(expr, '>');
    return a ? a + 1 : expr;
}

/* Every buffer of the step with its category and lifetime, in a fixed order. Without offsets it
 * adds them to the planner; with offsets (the planner's, same order) it binds the pointers. */
static mw_status layout(mw_model *m, mw_planner *pl, const mw_pbuf *placed, char *base) {
    const mw_config *c = &m->cfg;
    const size_t B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, V = c->vocab;
    const size_t N = B * T, F = sizeof(float), CTX = c->ctx;
    const int L = c->n_layer, ALL_LAST = NOPS - 1;
    int idx = 0;
    int layer = -1; /* the layer of the buffers being listed, for their names */
#define BUF(ptr, bytes, cat, first, last)                                                          \
    do {                                                                                           \
        if (placed)                                                                                \
            (ptr) = (void *)(base + placed[idx++].offset);                                         \
        else                                                                                       \
            MW_TRY(mw_planner_add(pl, buf_name(#ptr), layer, (bytes), (cat), (first), (last)));    \
    } while (0)
    BUF(m->params, m->nfloats * F, MW_CAT_PARAMS, 0, ALL_LAST);
    if (!c->inference) {
        BUF(m->grads, m->nfloats * F, MW_CAT_GRADS, 0, ALL_LAST);
        BUF(m->m, m->nfloats * F, MW_CAT_OPTIM, 0, ALL_LAST);
        BUF(m->v, m->nfloats * F, MW_CAT_OPTIM, 0, ALL_LAST);
    }
    BUF(m->staging, (2 * N + B * (T + 1)) * sizeof(int32_t), MW_CAT_WORK, 0, ALL_LAST);
    BUF(m->inputs, N * sizeof(int32_t), MW_CAT_ACTS, OP_EMB, OP_EMB_B);
    BUF(m->targets, N * sizeof(int32_t), MW_CAT_ACTS, OP_EMB, OP_HEAD_B);
    BUF(m->encoded, N * C * F, MW_CAT_ACTS, OP_EMB, OP_BWD(0));
    for (int l = 0; l < L; l++) { /* kept from layer l's forward to its backward */
        layer_acts *la = &m->acts[l];
        const int f = OP_FWD(l), b = OP_BWD(l);
        layer = l;
        BUF(la->ln1, N * C * F, MW_CAT_ACTS, f, b);
        BUF(la->ln1_mean, N * F, MW_CAT_ACTS, f, b);
        BUF(la->ln1_rstd, N * F, MW_CAT_ACTS, f, b);
        BUF(la->qkv, N * 3 * C * F, MW_CAT_ACTS, f, b);
        BUF(la->att, B * H * T * T * F, MW_CAT_ACTS, f, b);
        BUF(la->atty, N * C * F, MW_CAT_ACTS, f, b);
        BUF(la->res2, N * C * F, MW_CAT_ACTS, f, b);
        BUF(la->ln2, N * C * F, MW_CAT_ACTS, f, b);
        BUF(la->ln2_mean, N * F, MW_CAT_ACTS, f, b);
        BUF(la->ln2_rstd, N * F, MW_CAT_ACTS, f, b);
        BUF(la->fch, N * 4 * C * F, MW_CAT_ACTS, f, b);
        BUF(la->fch_gelu, N * 4 * C * F, MW_CAT_ACTS, f, b);
        /* the block output is the next block's input: its backward (or the head's) reads it */
        BUF(la->res3, N * C * F, MW_CAT_ACTS, f, l + 1 < L ? OP_BWD(l + 1) : OP_HEAD_B);
    }
    layer = -1;
    BUF(m->lnf, N * C * F, MW_CAT_ACTS, OP_HEAD_F, OP_HEAD_B);
    BUF(m->lnf_mean, N * F, MW_CAT_ACTS, OP_HEAD_F, OP_HEAD_B);
    BUF(m->lnf_rstd, N * F, MW_CAT_ACTS, OP_HEAD_F, OP_HEAD_B);
    BUF(m->logits, N * V * F, MW_CAT_ACTS, OP_HEAD_F, OP_HEAD_B);
    BUF(m->losses, N * F, MW_CAT_ACTS, OP_HEAD_F, OP_HEAD_F);
    if (c->inference) {
        BUF(m->kcache, (size_t)L * CTX * C * F, MW_CAT_ACTS, 0, ALL_LAST);
        BUF(m->vcache, (size_t)L * CTX * C * F, MW_CAT_ACTS, 0, ALL_LAST);
        BUF(m->dec, (12 * C + CTX + V + 8) * F, MW_CAT_WORK, 0, ALL_LAST);
        return MW_OK;
    }
    BUF(m->dres, N * C * F, MW_CAT_WORK, OP_HEAD_B, OP_EMB_B);
    BUF(m->dtmp, N * C * F, MW_CAT_WORK, OP_HEAD_B, OP_BWD(0));
    BUF(m->dqkv, N * 3 * C * F, MW_CAT_WORK, OP_BWD(L - 1), OP_BWD(0));
    BUF(m->dfch, N * 4 * C * F, MW_CAT_WORK, OP_BWD(L - 1), OP_BWD(0));
    BUF(m->att_scratch, (size_t)m->nthreads * T * T * F, MW_CAT_WORK, OP_BWD(L - 1), OP_BWD(0));
    BUF(m->norm_parts, (m->nfloats / NORM_QUANTUM + 1) * sizeof(double), MW_CAT_WORK, OP_OPT, OP_OPT);
#undef BUF
    return MW_OK;
}

/* Plans the model's buffers: fills pl (placed) and s. */
static mw_status plan_model(mw_model *m, mw_planner *pl, mw_plan_summary *s) {
    const int L = m->cfg.n_layer;
    mw_planner_init(pl, NOPS);
    MW_TRY(layout(m, pl, NULL, NULL));
    MW_TRY(mw_planner_place(pl));
    memset(s, 0, sizeof *s);
    for (int op = 0; op < NOPS; op++) {
        uint64_t live[MW_CAT_COUNT], total = 0;
        mw_planner_live(pl, op, live);
        for (int k = 0; k < MW_CAT_COUNT; k++) {
            total += live[k];
            if (live[k] > s->category[k]) s->category[k] = live[k];
        }
        if (total > s->live_peak) s->live_peak = total;
    }
    s->peak = pl->peak;
    s->budget = m->cfg.budget;
    s->fits = s->budget == 0 || s->peak <= s->budget;
    return MW_OK;
}

static mw_status model_skeleton(mw_model **out, const mw_config *cfg);

/* A dry run for cfg: a model without memory and its placed plan. On success the caller frees
 * both (mw_planner_free, mw_model_destroy); on failure nothing is left. */
static mw_status plan_dry(const mw_config *cfg, mw_model **m, mw_planner *pl, mw_plan_summary *s) {
    MW_TRY(model_skeleton(m, cfg));
    mw_status st = plan_model(*m, pl, s);
    if (st != MW_OK) {
        mw_planner_free(pl);
        mw_model_destroy(*m);
    }
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
        if (p->layer >= 0) snprintf(b[i].name, sizeof b[i].name, "h.%d.%s", p->layer, p->name);
        else snprintf(b[i].name, sizeof b[i].name, "%s", p->name);
        b[i].category = (mw_category)p->cat;
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
    const int L = cfg->n_layer;
    mw_plan_op *o = calloc((size_t)NOPS, sizeof *o);
    if (!o) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int op = 0; st == MW_OK && op < NOPS; op++) {
        mw_planner_live(&pl, op, o[op].live);
        if (op == OP_EMB) snprintf(o[op].name, sizeof o[op].name, "embed");
        else if (op <= L) snprintf(o[op].name, sizeof o[op].name, "fwd %d", op - 1);
        else if (op == OP_HEAD_F) snprintf(o[op].name, sizeof o[op].name, "head+loss");
        else if (op == OP_HEAD_B) snprintf(o[op].name, sizeof o[op].name, "head bwd");
        else if (op < OP_EMB_B) snprintf(o[op].name, sizeof o[op].name, "bwd %d", L - 1 - (op - L - 3));
        else if (op == OP_EMB_B) snprintf(o[op].name, sizeof o[op].name, "embed bwd");
        else snprintf(o[op].name, sizeof o[op].name, "optimizer");
    }
    mw_planner_free(&pl);
    mw_model_destroy(m);
    if (st != MW_OK) {
        free(o);
        return st;
    }
    *ops = o;
    *nops = NOPS;
    return MW_OK;
}

static mw_status model_skeleton(mw_model **out, const mw_config *cfg) {
    MW_TRY(mw_config_validate(cfg));
    mw_model *m = calloc(1, sizeof *m);
    if (!m) return mw_fail(MW_ERR_NOMEM, "cannot allocate the model");
    m->cfg = *cfg;
    m->nthreads = omp_get_max_threads();
    m->acts = calloc((size_t)cfg->n_layer, sizeof(layer_acts));
    mw_status s = m->acts ? build_table(m) : mw_fail(MW_ERR_NOMEM, "cannot allocate the layer table");
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

mw_status mw_model_create(mw_model **out, const mw_config *cfg) {
    *out = NULL;
    mw_model *m;
    MW_TRY(model_skeleton(&m, cfg));
    mw_planner pl;
    mw_status s = plan_model(m, &pl, &m->plan);
    if (s == MW_OK && !m->plan.fits) {
        budget_message(&m->plan);
        s = MW_ERR_BUDGET;
    }
    if (s == MW_OK) s = mw_arena_init(&m->arena, m->plan.peak);
    if (s == MW_OK) s = layout(m, NULL, pl.b, m->arena.base);
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
    free(m->acts);
    free(m);
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

mw_status mw_model_forward(mw_model *m, const int32_t *inputs, const int32_t *targets, float *loss) {
    const mw_config *c = &m->cfg;
    const int B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, V = c->vocab, N = B * T;
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
            return mw_fail(MW_ERR_ARG, "token id %d at position %d is outside the vocabulary (%d)",
                           inputs[i] < 0 || inputs[i] >= V ? inputs[i] : targets[i], i, V);
    }
    memcpy(m->inputs, inputs, sizeof(int32_t) * N);
    if (targets) memcpy(m->targets, targets, sizeof(int32_t) * N);
    m->has_targets = targets != NULL;

    mw_encoder_forward(m->encoded, m->inputs, WTE(m->params), WPE(m->params), B, T, C);
    const float *x = m->encoded;
    for (int l = 0; l < c->n_layer; l++) {
        float *p[NLAYERT];
        layer_ptrs(m, m->params, l, p);
        layer_acts *a = &m->acts[l];
        mw_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p[LN1W], p[LN1B], N, C);
        mw_matmul_forward(a->qkv, a->ln1, p[QKVW], p[QKVB], N, C, 3 * C, 0);
        mw_attention_forward(a->atty, a->att, a->qkv, B, T, C, H);
        copy_rows(a->res2, x, (size_t)N * C);
        mw_matmul_forward(a->res2, a->atty, p[PROJW], p[PROJB], N, C, C, 1);
        mw_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p[LN2W], p[LN2B], N, C);
        mw_matmul_forward(a->fch, a->ln2, p[FCW], p[FCB], N, C, 4 * C, 0);
        mw_gelu_forward(a->fch_gelu, a->fch, (long)N * 4 * C);
        copy_rows(a->res3, a->res2, (size_t)N * C);
        mw_matmul_forward(a->res3, a->fch_gelu, p[FCPW], p[FCPB], N, 4 * C, C, 1);
        x = a->res3;
    }
    mw_layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, x, LNFW(m->params), LNFB(m->params), N,
                         C);
    mw_matmul_forward(m->logits, m->lnf, WTE(m->params), NULL, N, C, V, 0);
    if (targets) {
        mw_crossentropy_forward(m->logits, m->losses, m->targets, N, V);
        double s = 0.0;
        for (int i = 0; i < N; i++) s += m->losses[i];
        *loss = (float)(s / N);
    }
    return MW_OK;
}

int32_t *mw_model_staging(mw_model *m) { return m->staging; }

const float *mw_model_logits(const mw_model *m) { return m->logits; }

void mw_model_backward(mw_model *m, float grad_scale) {
    const mw_config *c = &m->cfg;
    if (c->inference) return; /* no gradients to write (a programmer error; documented) */
    const int B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, V = c->vocab, N = B * T;
    const int L = c->n_layer;
    float *G = m->grads;
    mw_crossentropy_backward(m->logits, m->targets, grad_scale / N, N, V);
    mw_matmul_backward(m->dtmp, WTE(G), NULL, m->logits, m->lnf, WTE(m->params), N, C, V, 0);
    memset(m->dres, 0, sizeof(float) * N * C);
    const float *xl = L > 0 ? m->acts[L - 1].res3 : m->encoded;
    mw_layernorm_backward_acc(m->dres, LNFW(G), LNFB(G), m->dtmp, xl, LNFW(m->params), m->lnf_mean,
                              m->lnf_rstd, N, C);
    for (int l = L - 1; l >= 0; l--) {
        float *p[NLAYERT], *g[NLAYERT];
        layer_ptrs(m, m->params, l, p);
        layer_ptrs(m, G, l, g);
        layer_acts *a = &m->acts[l];
        const float *x = l ? m->acts[l - 1].res3 : m->encoded;
        /* dres holds d(res3); the residual path passes it on to res2 unchanged */
        mw_matmul_backward(m->dfch, g[FCPW], g[FCPB], m->dres, a->fch_gelu, p[FCPW], N, 4 * C, C, 0);
        mw_gelu_backward_inplace(m->dfch, a->fch, (long)N * 4 * C);
        mw_matmul_backward(m->dtmp, g[FCW], g[FCB], m->dfch, a->ln2, p[FCW], N, C, 4 * C, 0);
        mw_layernorm_backward_acc(m->dres, g[LN2W], g[LN2B], m->dtmp, a->res2, p[LN2W], a->ln2_mean,
                                  a->ln2_rstd, N, C);
        /* dres now holds d(res2), which flows on to the block input */
        mw_matmul_backward(m->dtmp, g[PROJW], g[PROJB], m->dres, a->atty, p[PROJW], N, C, C, 0);
        mw_attention_backward(m->dqkv, m->att_scratch, m->nthreads, m->dtmp, a->qkv, a->att, B, T,
                              C, H);
        mw_matmul_backward(m->dtmp, g[QKVW], g[QKVB], m->dqkv, a->ln1, p[QKVW], N, C, 3 * C, 0);
        mw_layernorm_backward_acc(m->dres, g[LN1W], g[LN1B], m->dtmp, x, p[LN1W], a->ln1_mean,
                                  a->ln1_rstd, N, C);
    }
    mw_encoder_backward(WTE(G), WPE(G), m->dres, m->inputs, B, T, C);
}

void mw_model_zero_grad(mw_model *m) {
    if (m->grads) memset(m->grads, 0, sizeof(float) * m->nfloats);
}

double mw_model_grad_norm(const mw_model *m) {
    if (!m->grads) return 0.0;
    const size_t n = m->nfloats, nb = (n + NORM_QUANTUM - 1) / NORM_QUANTUM;
    const float *g = m->grads;
    double *parts = m->norm_parts;
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
    if (!c->inference || token < 0 || token >= V || pos < 0 || pos >= CTX) return NULL;
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
        mw_matmul_forward(qkv, h, p[QKVW], p[QKVB], 1, C, 3 * C, 0);
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
        mw_matmul_forward(x, y, p[PROJW], p[PROJB], 1, C, C, 1);
        mw_layernorm_forward(h, stats, stats + 1, x, p[LN2W], p[LN2B], 1, C);
        mw_matmul_forward(fc, h, p[FCW], p[FCB], 1, C, 4 * C, 0);
        mw_gelu_forward(fc, fc, 4 * C);
        mw_matmul_forward(x, fc, p[FCPW], p[FCPB], 1, 4 * C, C, 1);
    }
    mw_layernorm_forward(h, stats, stats + 1, x, LNFW(m->params), LNFB(m->params), 1, C);
    mw_matmul_forward(logits, h, wte, NULL, 1, C, V, 0);
    return logits;
}
