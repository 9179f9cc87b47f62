/* GPT-2: the parameter table, the op kinds of one block and of the head with the values they
 * access, the values' sizes, the kernels each kind runs, incremental decoding and the
 * initialisation. Everything else (schedule, lifetimes, placement, execution, recomputation
 * policies) is the step graph's (src/graph/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../dist/tp.h"
#include "../graph/graph.h"
#include "../kernels/cpu/ops.h"
#include "../kernels/cpu/vocab.h"
#include "mlpg.h"
#include "qkvg.h"

/* Per-layer tensors, in storage order (Hugging Face GPT-2 names after "h.<l>."). */
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, NLAYERT };
static const char *layer_names[NLAYERT] = {
    "ln_1.weight",    "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",   "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias",  "mlp.c_proj.weight", "mlp.c_proj.bias"};

static mw_status build_table(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int C = c->n_embd;
    m->tensors = calloc((size_t)c->n_layer * NLAYERT + 4, sizeof(mw_tensor));
    if (!m->tensors) return mw_fail(MW_ERR_NOMEM, "cannot allocate the parameter table");
    /* tensor parallelism as Megatron-LM's GPT: a vocab-parallel embedding (tied: the last stage
     * keeps its copy for the head), column-parallel qkv and fc (rows: output features, with their
     * biases), row-parallel proj and fc2 (columns: input features; their biases whole) */
    mw_graph_add_tensor_split(m, "wte.weight", c->vocab, C, 1, 1, MW_TS_ROWS, MW_AT_ENDS);
    mw_graph_add_tensor(m, "wpe.weight", c->ctx, C, 1, 1);
    const int rows[NLAYERT] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
    const int cols[NLAYERT] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
    enum { W_ = MW_TS_WHOLE, R_ = MW_TS_ROWS, C_ = MW_TS_COLS };
    const int split[NLAYERT] = {W_, W_, R_, R_, C_, W_, W_, W_, R_, R_, C_, W_};
    for (int l = 0; l < c->n_layer; l++)
        for (int k = 0; k < NLAYERT; k++) {
            char name[64];
            snprintf(name, sizeof name, "h.%d.%s", l + (c->pp > 1 ? c->pp_first : 0), layer_names[k]); /* the global block */
            mw_graph_block(m, l);
            mw_graph_add_tensor_split(m, name, rows[k], cols[k], cols[k] != 0, 1, split[k], MW_AT_AUTO);
            if (k == QKVW || k == QKVB) mw_graph_tensor_groups(m, 3); /* a rank's heads' q, k and v */
            if (k == LN1W || k == LN1B || k == LN2W || k == LN2B) mw_tp_tensor_seq(m); /* --sp: each rank's rows */
        }
    mw_graph_block(m, -1);
    mw_graph_add_tensor(m, "ln_f.weight", C, 0, 0, 1);
    mw_tp_tensor_seq(m);
    mw_graph_add_tensor(m, "ln_f.bias", C, 0, 0, 1);
    mw_tp_tensor_seq(m);
    return MW_OK;
}

/* values of block l (X is its input: the embedding for l = 0, the last block's output for l = L) */
enum { X, LN1, LN1S, QKV, ATTY, LSE, RES2, LN2, LN2S, FCH, GELU, NLS };
static const char *const lslot_names[NLS] = {"x",    "ln1",  "ln1_stats", "qkv", "atty", "lse",
                                             "res2", "ln2",  "ln2_stats", "fch", "gelu"};
/* values of the step */
enum { G_IN, G_TGT, G_LNF, G_LNFS, G_LOGITS, G_LOSSES, G_DRES, G_DTMP, G_DQKV, G_ATTS, G_NORM, G_DCHUNK, G_MLPG, G_ATTSIP, G_ATTD, G_QKVG, G_ATTSQ, NGS };
static const char *const gslot_names[NGS] = {"inputs", "targets", "lnf",  "lnf_stats", "logits", "losses",
                                             "dres",   "dtmp",    "dqkv", "att_scratch", "norm_parts",
                                             "fp32_chunk", "mlp_group", "att_scratch_ip",
                                             "att_rowdots", "qkv_group", "att_stream"};
/* how each value divides over tensor-parallel ranks (MW_VS_*): the heads' and the MLP's hidden
 * values and the vocabulary's logits by --tp, the norms' and the residual stream's by --tp only
 * under --sp */
enum { WH = MW_VS_WHOLE, TP = MW_VS_TP, SQ = MW_VS_SEQ };
static const unsigned char lslot_split[NLS] = {SQ, SQ, SQ, TP, TP, TP, SQ, SQ, SQ, TP, TP};
/* which values --act-compress may store quantised (docs/memory.md, "Stored activations"): the
 * inputs of the products, the norms and the activation function, q|k|v and the attention output
 * (each backward op reads the dequantised value; a recomputation replays from the exact one); not
 * the log-sum-exp nor the norm's statistics, which scale whole rows */
static const unsigned char lslot_lossy[NLS] = {1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1}; /* x, ln1, ln1_stats, qkv, atty, lse, res2, ln2, ln2_stats, fch, gelu */
static const unsigned char gslot_split[NGS] = {WH, WH, SQ, SQ, WH, WH, SQ, WH, TP, WH, WH, TP, WH, WH, TP, WH, WH}; /* logits: gslot's */
#define XN MW_SLOT_NEXT
#define GS MW_SLOT_STEP
enum { R = MW_R, W = MW_W, U = MW_U };
enum { P_NONE = MW_P_NONE, P_SEL = MW_P_SEL, P_FULL = MW_P_FULL };

enum {
    K_EMB, K_LN1QKV, K_ATTN, K_PROJ, K_LN2FC, K_GELU, K_FCPROJ, K_LN1, K_LN2, K_HEAD, K_LOGITS,
    K_BFCPROJ, K_BFC, K_BPROJ, K_BATTN, K_BQKV, K_EMBB, K_OPT, K_MLPG, K_BMLPG, K_BPROJD, K_BATTNIP, K_BQKVG, K_BATTNQ, NKINDS
};
#define FWD MW_KF_FWD
static const mw_kind KINDS[NKINDS] = {
    [K_EMB] = {"embed", 3, {{GS(G_IN), W}, {GS(G_TGT), W}, {X, W}}, 0, 0},
    /* qkv's product per 256 rows into an fp32 chunk, then rounded into qkv, when qkv is bfloat16 */
    [K_LN1QKV] = {"ln1+qkv", 5, {{X, R}, {LN1, W}, {LN1S, W}, {QKV, W}, {GS(G_DCHUNK), W}}, FWD, MW_COST_MATMUL},
    [K_ATTN] = {"attention", 4, {{QKV, R}, {ATTY, W}, {LSE, W}, {GS(G_ATTS), W}}, FWD, MW_COST_ATTN},
    [K_PROJ] = {"attn proj", 3, {{X, R}, {ATTY, R}, {RES2, W}}, FWD, MW_COST_MATMUL},
    /* fc's product per 256 rows into an fp32 chunk, then rounded into fch, when fch is bfloat16 */
    [K_LN2FC] = {"ln2+fc", 5, {{RES2, R}, {LN2, W}, {LN2S, W}, {FCH, W}, {GS(G_DCHUNK), W}}, FWD, MW_COST_MATMUL},
    [K_GELU] = {"gelu", 2, {{FCH, R}, {GELU, W}}, FWD, MW_COST_ELEM},
    [K_FCPROJ] = {"fc proj", 3, {{RES2, R}, {GELU, R}, {XN, W}}, FWD, MW_COST_MATMUL},
    [K_LN1] = {"ln1", 3, {{X, R}, {LN1, W}, {LN1S, W}}, FWD, MW_COST_ELEM},
    [K_LN2] = {"ln2", 3, {{RES2, R}, {LN2, W}, {LN2S, W}}, FWD, MW_COST_ELEM},
    [K_HEAD] = {"head+loss", 8,
                {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                 {GS(G_LOSSES), W}, {GS(G_DTMP), W}, {GS(G_DRES), W}}, 0, MW_COST_HEAD},
    [K_LOGITS] = {"head", 6,
                  {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                   {GS(G_LOSSES), W}}, 0, 0},
    /* dW from gelu; d(gelu) over gelu (fp32) or in row chunks (bf16: gelu is bfloat16); d(fch)
     * over fch */
    [K_BFCPROJ] = {"fc proj bwd", 4, {{FCH, U}, {GELU, U}, {GS(G_DRES), U}, {GS(G_DCHUNK), W}}, 0, MW_COST_MATMUL},
    [K_BFC] = {"ln2+fc bwd", 6,
               {{LN2, R}, {LN2S, R}, {RES2, R}, {FCH, R}, {GS(G_DTMP), W}, {GS(G_DRES), U}}, 0, MW_COST_MATMUL},
    [K_BPROJ] = {"attn proj bwd", 3, {{ATTY, R}, {GS(G_DRES), U}, {GS(G_DTMP), W}}, 0, MW_COST_MATMUL},
    [K_BATTN] = {"attention bwd", 6,
                 {{GS(G_DTMP), R}, {QKV, R}, {ATTY, R}, {LSE, R}, {GS(G_DQKV), W}, {GS(G_ATTS), W}}, 0, MW_COST_ATTN},
    [K_BQKV] = {"ln1+qkv bwd", 6,
                {{GS(G_DQKV), R}, {LN1, R}, {LN1S, R}, {X, R}, {GS(G_DTMP), W}, {GS(G_DRES), U}}, 0, MW_COST_MATMUL},
    [K_EMBB] = {"embed bwd", 2, {{GS(G_DRES), U}, {GS(G_IN), R}}, 0, 0},
    [K_OPT] = {"optimizer", 1, {{GS(G_NORM), W}}, 0, 0},
    /* A recomputed block (--recompute full, fp32, no --tp) runs its MLP in row groups, when there
     * are two at least (mlpg.h: the same bits): forward from res2 to the block's output, and backward from res2
     * (exact: the op makes the --act-compress round trips of what it reads itself) into the
     * residual's gradient, with one group's values alive (mlp_group). The projection's backward
     * leaves the attention backward's row dots dO . O (att_rowdots), so that the attention output
     * dies there, and the attention's backward writes dqkv over qkv (mw_attention_backward_inplace:
     * the same bits), which the qkv product's backward then reads in row groups (K_BQKVG). Under
     * --act-compress (q|k|v compressed in the block) q|k|v from the block's first recomputation are
     * stored compressed through the MLP's backward instead of recomputed after it, and ln1 and x
     * stay compressed up to K_BQKVG, which dequantises them a group at a time. */
    [K_MLPG] = {"mlp in groups", 3, {{RES2, R}, {XN, W}, {GS(G_MLPG), W}}, FWD, MW_COST_MATMUL},
    [K_BMLPG] = {"mlp bwd groups", 3, {{RES2, R}, {GS(G_DRES), U}, {GS(G_MLPG), W}}, MW_KF_OWNQ, MW_COST_MATMUL},
    [K_BPROJD] = {"attn proj bwd", 4, {{ATTY, R}, {GS(G_DRES), U}, {GS(G_DTMP), W}, {GS(G_ATTD), W}}, 0, MW_COST_MATMUL},
    [K_BATTNIP] = {"attn bwd (ip)", 5,
                   {{GS(G_DTMP), R}, {QKV, U}, {GS(G_ATTD), R}, {LSE, R}, {GS(G_ATTSIP), W}}, 0, MW_COST_ATTN},
    /* the qkv product's and ln1's backward from dqkv (over qkv), in row groups (qkvg.h: the same bits),
     * dequantising ln1 and x a group at a time where they are stored compressed up to it */
    [K_BQKVG] = {"qkv bwd groups", 6,
                 {{QKV, R}, {LN1, R}, {LN1S, R}, {X, R}, {GS(G_DRES), U}, {GS(G_QKVG), W}}, MW_KF_OWNDQ, MW_COST_MATMUL},
    /* under --act-compress, the attention's backward streamed by key tiles into the qkv backward
     * (qkvg.h: the same bits as the two above): q|k|v read compressed a tile at a time, dqkv
     * handed on a row group at a time, so that neither is ever whole in fp32 */
    [K_BATTNQ] = {"attn+qkv bwd (stream)", 9,
                  {{GS(G_DTMP), R}, {QKV, R}, {GS(G_ATTD), R}, {LSE, R}, {LN1, R}, {LN1S, R}, {X, R}, {GS(G_DRES), U},
                   {GS(G_ATTSQ), W}}, MW_KF_OWNDQ, MW_COST_ATTN},
};

/* the grouped MLP's ops cost what the ops they replace cost (the calibration's shape is too small to
 * group): forward ln2+fc, gelu, fc proj; backward the recomputed ln2+fc, gelu and ln2 (counted as
 * recomputation) and the two products' backward */
static const unsigned char COST_SUM[NKINDS][MW_COST_PARTS] = {
    [K_MLPG] = {K_LN2FC + 1, K_GELU + 1, K_FCPROJ + 1},
    [K_BMLPG] = {K_LN2FC + 1, K_GELU + 1, K_BFCPROJ + 1, K_LN2 + 1, K_BFC + 1},
    [K_BATTNQ] = {K_BATTNIP + 1, K_BQKVG + 1},
};

#define LOSS_ROWS MW_LOSS_ROWS
#define WS (&m->gw) /* the model's GEMM workspace, for the kernels' calls */
#define keeps_logits mw_graph_keeps_logits
#define copy_rows mw_graph_copy
/* --precision bf16 keeps ln1, qkv, atty, ln2, fch, gelu and lnf as bfloat16 (docs/precision.md):
 * the products round what they read anyway; qkv is also read by attention, atty by its backward,
 * fch (and d(fch) over it) by GELU and its backward and by the bias gradient, which then see
 * their rounded values (attention computes in fp32 on them) */
#define B16 mw_graph_b16
#define elt mw_graph_elt
enum { E_KCACHE, E_VCACHE, E_DEC }; /* the model's own buffers (inference only) */

/* A recomputed block's MLP in row groups and its attention's backward in place (the kinds above):
 * fp32 without tensor parallelism */
static int grouped(const mw_model *m) { return !B16(m) && m->cfg.tp <= 1 && !m->cfg.sp; }

/* rows per group: --group-rows (1024 when 0) rounded up to whole chunks of the quantiser in the
 * C-wide values (and so in the 4C-wide ones) */
static size_t group_rows(const mw_model *m) {
    const mw_config *c = &m->cfg;
    const size_t u = mw_graph_act_round_rows_unit((size_t)c->n_embd);
    const size_t r = c->group_rows > 0 ? (size_t)c->group_rows : 1024;
    return (r + u - 1) / u * u;
}
/* the MLP in row groups: where there are two groups at least (one group of every row would hold
 * more than the ungrouped ops: its copies of ln2 and res2 beside fch and gelu) */
static int mlp_grouped(const mw_model *m) {
    return grouped(m) && group_rows(m) < (size_t)m->cfg.batch * m->cfg.seq;
}

/* att_scratch serves the attention's forward alone: every block recomputed whole and grouped (its
 * backward in place or streamed, with their own scratch) */
static int fwd_attention_only(const mw_model *m) {
    if (!grouped(m) || m->cfg.inference || m->seg || !m->pol) return 0;
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (m->pol[l] != P_FULL) return 0;
    return 1;
}

static void push_block_forward(mw_model *m, int l, int with_output) {
    mw_graph_push(m, K_LN1QKV, l);
    mw_graph_push(m, K_ATTN, l);
    mw_graph_push(m, K_PROJ, l);
    /* the forward pass of a block whose backward recomputes it all (not a segment's replay) */
    if (with_output && mlp_grouped(m) && !m->building_bwd && m->seg == 0 && m->pol && m->pol[l] == P_FULL) {
        mw_graph_push(m, K_MLPG, l);
        return;
    }
    mw_graph_push(m, K_LN2FC, l);
    mw_graph_push(m, K_GELU, l);
    if (with_output) mw_graph_push(m, K_FCPROJ, l);
}

/* The backward of block l under policy p, recomputing what p did not keep. */
static void push_block_backward(mw_model *m, int l, int p) {
    if (p == P_FULL && grouped(m)) { /* the block again from its input, its MLP in row groups */
        mw_graph_push(m, K_LN1QKV, l);
        mw_graph_push(m, K_ATTN, l);
        mw_graph_push(m, K_PROJ, l);
        if (mlp_grouped(m)) {
            mw_graph_push(m, K_BMLPG, l);
        } else {
            mw_graph_push(m, K_LN2FC, l);
            mw_graph_push(m, K_GELU, l);
            mw_graph_push(m, K_BFCPROJ, l);
            mw_graph_push(m, K_LN2, l);
            mw_graph_push(m, K_BFC, l);
        }
        mw_graph_push(m, K_BPROJD, l);
        if (mw_graph_act_bits(m, l) && lslot_lossy[QKV]) { /* q|k|v stored compressed: streamed */
            mw_graph_push(m, K_BATTNQ, l);
            return;
        }
        mw_graph_push(m, K_LN1QKV, l);
        mw_graph_push(m, K_BATTNIP, l);
        mw_graph_push(m, K_BQKVG, l);
        return;
    }
    if (p == P_FULL) { /* the whole block again, from its input; qkv once more after the MLP */
        mw_graph_push(m, K_LN1QKV, l);
        mw_graph_push(m, K_ATTN, l);
        mw_graph_push(m, K_PROJ, l);
        mw_graph_push(m, K_LN2FC, l);
    }
    if (p != P_NONE) mw_graph_push(m, K_GELU, l);
    mw_graph_push(m, K_BFCPROJ, l);
    if (p != P_NONE) mw_graph_push(m, K_LN2, l);
    mw_graph_push(m, K_BFC, l);
    mw_graph_push(m, K_BPROJ, l);
    if (p == P_FULL) mw_graph_push(m, K_LN1QKV, l);
    mw_graph_push(m, K_BATTN, l);
    if (p == P_SEL) mw_graph_push(m, K_LN1, l);
    mw_graph_push(m, K_BQKV, l);
}

static void gslot(const mw_model *m, int g, uint64_t *bytes, mw_category *cat) {
    const mw_config *c = &m->cfg;
    const uint64_t B = c->batch, T = c->seq, C = c->n_embd, N = B * T;
    const uint64_t F = sizeof(float), H = B16(m) ? 2 : F;
    const uint64_t TP_ = c->tp > 1 ? (uint64_t)c->tp : 1, Vl = (c->vocab + TP_ - 1) / TP_; /* a rank's vocabulary, padded */
    static const mw_category gcat[NGS] = {MW_CAT_ACTS, MW_CAT_ACTS, MW_CAT_ACTS, MW_CAT_ACTS,
                                          MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK,
                                          MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK,
                                          MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK};
    const int Rg = (int)(group_rows(m) < N ? group_rows(m) : N), hs = (int)(C / c->n_head), cq = c->act_compress || m->act_sel;
    uint64_t rows = N < LOSS_ROWS ? N : LOSS_ROWS, crows = N < MW_CHUNK_ROWS ? N : MW_CHUNK_ROWS;
    const uint64_t gbytes[NGS] = {
        N * sizeof(int32_t), N * sizeof(int32_t), N * C * H, 2 * N * F,
        (keeps_logits(c) ? N : rows) * Vl * F, N * F, N * C * F, N * C * F, 3 * N * C * F,
        (uint64_t)m->nthreads * (fwd_attention_only(m) ? mw_attention_fwd_scratch_floats(c->seq, c->n_embd / c->n_head, 0)
                                                         : mw_attention_scratch_floats_x(c->seq, c->n_embd / c->n_head, B16(m))) * F,
        (m->nfloats / MW_NORM_QUANTUM + 1) * sizeof(double), B16(m) ? crows * 4 * C * F : 0,
        mlp_grouped(m) ? mw_mlpg_ws_floats((int)group_rows(m), (int)C, 4 * (int)C, 0, mw_graph_act_round_scratch()) * F : 0,
        grouped(m) ? (uint64_t)m->nthreads * mw_attention_scratch_floats_ip(c->seq, c->n_embd / c->n_head) * F : 0,
        grouped(m) ? B * (uint64_t)c->n_head * T * F : 0,
        grouped(m) ? mw_qkvg_ws_floats(Rg, (int)C, cq) * F : 0,
        grouped(m) && cq ? (mw_qkvg_stream_floats(c->seq, c->n_head, hs, Rg, m->nthreads) + mw_qkvg_ws_floats(Rg, (int)C, 1)) * F : 0};
    *bytes = gbytes[g];
    *cat = gcat[g];
    if (g == G_LOGITS && keeps_logits(c)) *cat = MW_CAT_ACTS;
}

static uint64_t lslot(const mw_model *m, int v) {
    const mw_config *c = &m->cfg;
    const uint64_t B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, N = B * T;
    const uint64_t F = sizeof(float), h = B16(m) ? 2 : F;
    const uint64_t lbytes[NLS] = {N * C * F, N * C * h, 2 * N * F,     3 * N * C * h,
                                  N * C * h, B * H * T * F, N * C * F, N * C * h,
                                  2 * N * F, 4 * N * C * h, 4 * N * C * h};
    return lbytes[v];
}

static int ext(const mw_model *m, mw_ext out[MW_MAX_EXT]) {
    const mw_config *c = &m->cfg;
    if (!keeps_logits(c)) return 0;
    const uint64_t F = sizeof(float), CTX = c->ctx, C = c->n_embd, L = c->n_layer;
    out[E_KCACHE] = (mw_ext){"kcache", L * CTX * C * F, MW_CAT_ACTS};
    out[E_VCACHE] = (mw_ext){"vcache", L * CTX * C * F, MW_CAT_ACTS};
    out[E_DEC] = (mw_ext){"decode", (12 * C + CTX + c->vocab + 8) * F, MW_CAT_WORK};
    return 3;
}

static void init(mw_model *m, uint64_t seed) {
    const double resid_std = 0.02 / sqrt(2.0 * m->gcfg.n_layer); /* the whole model's blocks (a stage's are fewer) */
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        float *p = mw_graph_param_access(m, i, 1);
        if (!p) return; /* m->io_error says why */
        size_t len = strlen(t->name);
        int is_weight = len > 7 && strcmp(t->name + len - 7, ".weight") == 0;
        if (t->ndim == 1) { /* LayerNorm gains 1, every bias 0 */
            float val = is_weight ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->numel; j++) p[j] = val;
            continue;
        }
        double std = len > 13 && strcmp(t->name + len - 13, "c_proj.weight") == 0 ? resid_std : 0.02;
        mw_graph_fill_normal(m, i, seed, std);
    }
}

/* The tensors before the blocks in this rank's table: wte and wpe, which a pipeline holds on its
 * first stage alone (the last stage's head reads a copy of wte, mw_graph_tied_head). */
static int pre_tensors(const mw_model *m) { return m->cfg.pp <= 1 || m->cfg.pp_stage == 0 ? 2 : 0; }

/* Pointers of layer l's tensors inside a flat buffer (params or grads). */
static void layer_ptrs(const mw_model *m, int which, int l, float *p[NLAYERT]) {
    for (int k = 0; k < NLAYERT; k++) p[k] = mw_graph_tensor(m, which, pre_tensors(m) + l * NLAYERT + k);
}
#define WTE(w) mw_graph_tensor(m, (w), 0)
#define WPE(w) mw_graph_tensor(m, (w), 1)
#define HEADW(w) mw_graph_tied_head(m, (w)) /* the head's: wte, or the last stage's copy */
#define LNFW(w) mw_graph_tensor(m, (w), m->ntensors - 2)
#define LNFB(w) mw_graph_tensor(m, (w), m->ntensors - 1)

/* ---- the kernels of each op kind ------------------------------------------------------------- */

/* out (N, OC) = inp (N, C, bfloat16 under bf16) @ w^T + bias, stored as out is: fp32 at once, or
 * (bf16) MW_CHUNK_ROWS rows at a time into the fp32 chunk and rounded from there (rows are
 * independent: the same bits as one product) */
static void product_out(mw_model *m, void *out, float *chunk, const void *inp, const float *w,
                        const float *bias, int N, int C, int OC) {
    if (!B16(m)) {
        mw_matmul_forward_x(out, inp, 0, w, bias, N, C, OC, 0, WS);
        return;
    }
    for (int n0 = 0; n0 < N; n0 += MW_CHUNK_ROWS) {
        const int rows = N - n0 < MW_CHUNK_ROWS ? N - n0 : MW_CHUNK_ROWS;
        mw_matmul_forward_x(chunk, elt((void *)inp, (size_t)n0 * C, 1), 1, w, bias, rows, C, OC, 0, WS);
        mw_bf16_store_mt((uint16_t *)out + (size_t)n0 * OC, chunk, (size_t)rows * OC);
    }
}

/* mw_mlpg's round trip of block l's rows: the stored activations' (mw_graph_act_round_rows) */
typedef struct {
    mw_model *m;
    int l;
} round_ctx;
static mw_status round_rows(void *ctx, int v, float *x, size_t r0, size_t rows, size_t width, char *scratch) {
    const round_ctx *r = ctx;
    return mw_graph_act_round_rows(r->m, r->l, v, x, r0, rows, width, scratch);
}

/* LayerNorm's epsilon: cfg.norm_eps when given (a config.json's layer_norm_epsilon), else GPT-2's
 * 1e-5 */
static float ln_eps(const mw_config *c) { return c->norm_eps > 0 ? (float)c->norm_eps : 1e-5f; }

/* Runs op i. train: compute gradients in the head (the loss's gradient scaled by dloss).
 *
 * Under --tp T (Megatron-LM's GPT): this rank holds H/T heads (q|k|v's rows of its heads, proj's
 * columns), 4C/T of the MLP's width (fc's rows, fc2's columns) and ceil(V/T) rows of the tied
 * embedding. Widths below are this rank's (the plain run's when T = 1). The row-parallel products
 * (proj, fc2) leave partial sums that are all-reduced (src/dist/tp.c: in rank order, the same bits
 * on every rank) before their bias and the residual are added; the column-parallel inputs'
 * gradients (qkv's, fc's) likewise before the norm's backward; the embedding's lookup and the
 * head's input gradient too. The tied embedding's gradient is this rank's rows alone: the head's
 * (its logits' columns) plus the lookup's (its tokens), no exchange.
 *
 * Under --sp as well (Korthikanti et al.): the residual stream, the norms and their values are this
 * rank's rows r0 .. r1 of the N positions alone. A norm's output is all-gathered (into m->spbuf)
 * before the column-parallel product that reads it, and again in backward for its weight gradient;
 * a row-parallel product's partial sums are reduce-scattered instead of all-reduced (the same
 * rank-order sums: the same bits on every rank); the residual's gradient is all-gathered before
 * the products' backward reads it. The norms' weight gradients are each rank's rows' and are
 * summed over the ranks once per step (mw_tp_tensor_seq); the others see every row. */
static void run_op(mw_model *m, int i, int train, float dloss, double *loss_sum) {
    const mw_config *c = &m->cfg;
    const int B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, V = c->vocab, N = B * T;
    const int L = c->n_layer, l = m->ops[i].layer, tp = mw_tp_on(m), TP_ = tp ? c->tp : 1;
    const int Cl = C / TP_, Hl = H / TP_, hs = C / H; /* this rank's attention width and heads */
    int vlo = 0, vhi = V;
    if (tp) mw_tp_vocab_range(m, V, &vlo, &vhi);
    const int Vl = vhi - vlo; /* this rank's vocabulary (padded) */
    const int sp = tp && c->sp;
    int r0 = 0, r1 = N;
    if (sp) mw_tp_rows(m, N, &r0, &r1);
    const int Nl = r1 - r0;                       /* the rows of the residual stream and the norms here */
    const size_t hb = B16(m) ? 2 : sizeof(float); /* a norm output's element */
    float *spb = m->spbuf;
    void **P = m->opp + (size_t)i * MW_MAXACC;
#define F(k) ((float *)P[k])
    float *p[NLAYERT], *g[NLAYERT];
    if (l < L) {
        layer_ptrs(m, 0, l, p);
        if (!m->cfg.inference) layer_ptrs(m, 1, l, g);
    }
    const int b16 = B16(m);
    const size_t NC = (size_t)N * C;
    switch (m->ops[i].kind) {
    case K_EMB:
        if (!tp) {
            mw_encoder_forward(F(2), (const int32_t *)P[0], WTE(0), WPE(0), B, T, C);
            break;
        }
        /* the rows this rank holds, summed over the ranks (exact: one is not zero), then wpe */
        {
            float *e = sp ? spb : F(2), *x = F(2);
            const float *wpe = WPE(0);
            mw_vocab_embed_rows(e, (const int32_t *)P[0], WTE(0), N, C, vlo, vhi);
            mw_tp_sum_partials(m, e, N, C);
#pragma omp parallel for schedule(static)
            for (int n = r0; n < r1; n++)
                for (int k = 0; k < C; k++)
                    x[(size_t)(n - r0) * C + k] = e[(size_t)n * C + k] + wpe[(size_t)(n % T) * C + k];
        }
        break;
    case K_LN1QKV:
    case K_LN1:
        mw_layernorm_forward_eps(P[1], b16, F(2), F(2) + Nl, F(0), p[LN1W], p[LN1B], Nl, C, ln_eps(c));
        if (m->ops[i].kind == K_LN1QKV)
            product_out(m, P[3], F(4), mw_tp_all_rows(m, P[1], N, (size_t)C * hb), p[QKVW], p[QKVB], N, C, 3 * Cl);
        break;
    case K_ATTN:
        mw_attention_forward_x(P[1], b16, F(2), F(3), m->nthreads, P[0], b16, B, T, Hl, Hl, hs);
        break;
    case K_PROJ:
    case K_FCPROJ: { /* out = in + product (+ bias); row-parallel: the partial products summed first */
        const int k = m->ops[i].kind == K_PROJ, IC = k ? Cl : 4 * Cl;
        float *w = k ? p[PROJW] : p[FCPW], *bias = k ? p[PROJB] : p[FCPB];
        if (!tp) {
            copy_rows(F(2), F(0), NC);
            mw_matmul_forward_x(F(2), P[1], b16, w, bias, N, IC, C, 1, WS);
            break;
        }
        float *o = F(2), *part = sp ? spb : o; /* --sp: the whole partial sums, then this rank's rows */
        const float *x = F(0);
        mw_matmul_forward_x(part, P[1], b16, w, NULL, N, IC, C, 0, WS);
        mw_tp_sum_partials(m, part, N, C);
#pragma omp parallel for schedule(static)
        for (int n = r0; n < r1; n++)
            for (int q = 0; q < C; q++)
                o[(size_t)(n - r0) * C + q] = x[(size_t)(n - r0) * C + q] + (part[(size_t)n * C + q] + bias[q]);
        break;
    }
    case K_LN2FC:
    case K_LN2:
        mw_layernorm_forward_eps(P[1], b16, F(2), F(2) + Nl, F(0), p[LN2W], p[LN2B], Nl, C, ln_eps(c));
        if (m->ops[i].kind == K_LN2FC)
            product_out(m, P[3], F(4), mw_tp_all_rows(m, P[1], N, (size_t)C * hb), p[FCW], p[FCB], N, C, 4 * Cl);
        break;
    case K_GELU:
        mw_gelu_forward_x(P[1], b16, P[0], b16, (long)N * 4 * Cl);
        break;
    case K_HEAD:
    case K_LOGITS: {
        const int kind = m->ops[i].kind, has_tg = m->has_targets;
        const int32_t *tg = (const int32_t *)P[1];
        void *lnf = P[2];
        float *stats = F(3), *logits = F(4), *losses = F(5);
        const float *x = F(0);
        mw_layernorm_forward_eps(lnf, b16, stats, stats + Nl, x, LNFW(0), LNFB(0), Nl, C, ln_eps(c));
        lnf = (void *)mw_tp_all_rows(m, lnf, N, (size_t)C * hb); /* the head reads every row (spbuf, writable) */
        const int grad = kind == K_HEAD && train;
        for (int n0 = 0; n0 < N; n0 += LOSS_ROWS) { /* positions in fixed quanta */
            const int rows = n0 + LOSS_ROWS < N ? LOSS_ROWS : N - n0;
            float *z = keeps_logits(c) ? logits + (size_t)n0 * V : logits; /* or one chunk's */
            mw_matmul_forward_x(z, elt(lnf, (size_t)n0 * C, b16), b16, HEADW(0), NULL, rows, C, Vl, 0, WS);
            if (!has_tg) continue;
            if (tp)
                mw_tp_xent(m, z, losses + n0, tg + n0, dloss, grad, rows, V);
            else
                mw_crossentropy(z, losses + n0, tg + n0, dloss, grad, rows, V);
            if (grad)
                mw_matmul_backward_x(F(6) + (size_t)n0 * C, HEADW(1), NULL, z, 0,
                                     elt(lnf, (size_t)n0 * C, b16), b16, HEADW(0), rows, C, Vl, 0, WS);
        }
        if (has_tg) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += losses[n];
            *loss_sum = s;
        }
        if (grad) {
            mw_tp_sum_partials(m, F(6), N, C); /* d(lnf) over the vocabulary's ranks: this rank's rows */
            memset(F(7), 0, sizeof(float) * (size_t)Nl * C);
            mw_layernorm_backward_acc(F(7), LNFW(1), LNFB(1), F(6) + (size_t)r0 * C, x, LNFW(0), stats,
                                      stats + Nl, Nl, C);
        }
        break;
    }
    case K_BFCPROJ: { /* dW from gelu, then d(gelu) (over gelu, or per chunk of rows when gelu is
                         bfloat16: rows are independent, the same bits), then d(fch) over fch */
        const int W4 = 4 * Cl;
        const float *dres = mw_tp_all_rows(m, F(2), N, (size_t)C * sizeof(float)); /* every row's */
        mw_matmul_backward_x(NULL, g[FCPW], g[FCPB], dres, 0, P[1], b16, p[FCPW], N, W4, C, 0, WS);
        const int RC = b16 ? MW_CHUNK_ROWS : N;
        for (int n0 = 0; n0 < N; n0 += RC) {
            const int rows = N - n0 < RC ? N - n0 : RC;
            float *dg = b16 ? F(3) : F(1) + (size_t)n0 * W4;
            void *fch = elt(P[0], (size_t)n0 * W4, b16);
            mw_matmul_backward_dinp(dg, dres + (size_t)n0 * C, p[FCPW], rows, W4, C, WS);
            mw_gelu_backward_x(fch, b16, dg, fch, b16, (long)rows * W4);
        }
        break;
    }
    case K_BFC:
        mw_matmul_backward_x(F(4), g[FCW], g[FCB], P[3], b16, mw_tp_all_rows(m, P[0], N, (size_t)C * hb), b16, p[FCW], N, C,
                             4 * Cl, 0, WS);
        mw_tp_sum_partials(m, F(4), N, C);
        mw_layernorm_backward_acc(F(5), g[LN2W], g[LN2B], F(4) + (size_t)r0 * C, F(2), p[LN2W], F(1), F(1) + Nl, Nl, C);
        break;
    case K_BPROJ:
    case K_BPROJD:
        mw_matmul_backward_x(F(2), g[PROJW], g[PROJB], mw_tp_all_rows(m, F(1), N, (size_t)C * sizeof(float)), 0, P[0], b16, p[PROJW],
                             N, Cl, C, 0, WS);
        if (m->ops[i].kind == K_BPROJD) /* the attention backward's row dots dO . O, so the output dies here */
            mw_attention_rowdots(F(3), F(2), P[0], B, T, Hl, hs);
        break;
    case K_BATTN:
        mw_attention_backward_x(F(4), F(5), m->nthreads, F(0), P[1], b16, P[2], b16, F(3), B, T, Hl, Hl, hs);
        break;
    case K_MLPG:
    case K_BMLPG: {
        mw_mlpg mg = {.N = N, .C = C, .F = 4 * C, .R = (int)group_rows(m), .eps = ln_eps(c), .ln2w = p[LN2W],
                      .ln2b = p[LN2B], .fcw = p[FCW], .fcb = p[FCB], .fcpw = p[FCPW], .fcpb = p[FCPB], .gw = WS, .ws = F(2)};
        if (m->ops[i].kind == K_MLPG) {
            mw_mlpg_forward(&mg, F(1), F(0));
            break;
        }
        mg.gln2w = g[LN2W], mg.gln2b = g[LN2B], mg.gfcw = g[FCW], mg.gfcb = g[FCB], mg.gfcpw = g[FCPW], mg.gfcpb = g[FCPB];
        round_ctx rc = {m, l};
        mg.round = round_rows, mg.ctx = &rc, mg.qbytes = mw_graph_act_round_scratch();
        mw_graph_io_failed(m, mw_mlpg_backward(&mg, F(1), F(0))); /* a value that is not finite, named */
        break;
    }
    case K_BATTNIP:
        mw_attention_backward_inplace(F(1), F(4), m->nthreads, F(0), F(2), F(3), B, T, Hl, Hl, hs);
        break;
    case K_BQKVG: {
        mw_qkvg q = {m, i, 1, 3, N, C, 3 * C, (int)group_rows(m), 0, p[QKVW], p[LN1W], g[QKVW], g[QKVB], g[LN1W], g[LN1B],
                     F(2), F(2) + N, WS, F(5)};
        mw_graph_io_failed(m, mw_qkvg_backward(&q, F(4), F(0))); /* rows that are not whole chunks (internal) */
        break;
    }
    case K_BATTNQ: {
        const int Rg = (int)(group_rows(m) < (size_t)N ? group_rows(m) : (size_t)N);
        mw_qkvg q = {m, i, 4, 6, N, C, 3 * C, Rg, 0, p[QKVW], p[LN1W], g[QKVW], g[QKVB], g[LN1W], g[LN1B],
                     F(5), F(5) + N, WS, F(8) + mw_qkvg_stream_floats(T, H, hs, Rg, m->nthreads)};
        mw_graph_io_failed(m, mw_qkvg_attention(&q, F(7), 1, F(8), m->nthreads, F(0), F(2), F(3), B, T, H, hs));
        break;
    }
    case K_BQKV:
        mw_matmul_backward_x(F(4), g[QKVW], g[QKVB], F(0), 0, mw_tp_all_rows(m, P[1], N, (size_t)C * hb), b16, p[QKVW], N, C,
                             3 * Cl, 0, WS);
        mw_tp_sum_partials(m, F(4), N, C);
        mw_layernorm_backward_acc(F(5), g[LN1W], g[LN1B], F(4) + (size_t)r0 * C, F(3), p[LN1W], F(2), F(2) + Nl, Nl, C);
        break;
    case K_EMBB:
        if (tp) {
            mw_vocab_encoder_backward(WTE(1), WPE(1), mw_tp_all_rows(m, F(0), N, (size_t)C * sizeof(float)), (const int32_t *)P[1], B,
                                      T, C, vlo, vhi);
            m->tp_sp_dirty = sp; /* the norms' gradients are each rank's rows' until the step sums them */
        } else
            mw_encoder_backward(WTE(1), WPE(1), F(0), (const int32_t *)P[1], B, T, C);
        break;
    default:
        break;
    }
#undef F
}

/* ---- incremental decoding -------------------------------------------------------------------- */

static const float *decode(mw_model *m, int32_t token, int pos) {
    const mw_config *c = &m->cfg;
    const int C = c->n_embd, H = c->n_head, V = c->vocab, CTX = c->ctx, hs = C / H;
    float *x = m->ext[E_DEC], *h = x + C, *qkv = h + C, *y = qkv + 3 * C, *fc = y + C, *att = fc + 4 * C;
    float *logits = att + CTX, *stats = logits + V; /* mean, rstd */
    const float *wte = WTE(0), *wpe = WPE(0);
    for (int i = 0; i < C; i++) x[i] = wte[(size_t)token * C + i] + wpe[(size_t)pos * C + i];
    for (int l = 0; l < c->n_layer; l++) {
        float *p[NLAYERT];
        layer_ptrs(m, 0, l, p);
        float *K = m->ext[E_KCACHE] + (size_t)l * CTX * C, *Vc = m->ext[E_VCACHE] + (size_t)l * CTX * C;
        mw_layernorm_forward_eps(h, 0, stats, stats + 1, x, p[LN1W], p[LN1B], 1, C, ln_eps(c));
        mw_matmul_forward(qkv, h, p[QKVW], p[QKVB], 1, C, 3 * C, 0, WS);
        if (B16(m)) /* as the forward stores qkv: rounded */
            for (int k = 0; k < 3 * C; k++) qkv[k] = mw_bf16_round(qkv[k]);
        memcpy(K + (size_t)pos * C, qkv + C, sizeof(float) * C);
        memcpy(Vc + (size_t)pos * C, qkv + 2 * C, sizeof(float) * C);
        mw_attention_decode(y, qkv, K, Vc, C, pos, H, H, hs, att);
        mw_matmul_forward(x, y, p[PROJW], p[PROJB], 1, C, C, 1, WS);
        mw_layernorm_forward_eps(h, 0, stats, stats + 1, x, p[LN2W], p[LN2B], 1, C, ln_eps(c));
        mw_matmul_forward(fc, h, p[FCW], p[FCB], 1, C, 4 * C, 0, WS);
        if (B16(m)) /* as the forward stores fch: rounded (the rest the products round) */
            for (int k = 0; k < 4 * C; k++) fc[k] = mw_bf16_round(fc[k]);
        mw_gelu_forward(fc, fc, 4 * C);
        mw_matmul_forward(x, fc, p[FCPW], p[FCPB], 1, 4 * C, C, 1, WS);
    }
    mw_layernorm_forward_eps(h, 0, stats, stats + 1, x, LNFW(0), LNFB(0), 1, C, ln_eps(c));
    mw_matmul_forward(logits, h, wte, NULL, 1, C, V, 0, WS);
    return logits;
}


const mw_model_def mw_arch_gpt2 = {
    .name = "gpt2",
    .kinds = KINDS,
    .nkinds = NKINDS,
    .lslot_names = lslot_names,
    .nls = NLS,
    .gslot_names = gslot_names,
    .ngs = NGS,
    .k_embed = K_EMB,
    .k_head = K_HEAD,
    .k_logits = K_LOGITS,
    .k_embed_bwd = K_EMBB,
    .k_opt = K_OPT,
    .lslot_split = lslot_split,
    .runs_layouts = 1,
    .params16 = 1,
    .lslot_lossy = lslot_lossy,
    .cost_sum = COST_SUM,
    .gslot_split = gslot_split,
    .logits_acc = 4,
    .losses_acc = 5,
    .build_table = build_table,
    .block_forward = push_block_forward,
    .block_backward = push_block_backward,
    .gslot = gslot,
    .lslot = lslot,
    .ext = ext,
    .bound = NULL,
    .run_op = run_op,
    .decode = decode,
    .init = init,
};
