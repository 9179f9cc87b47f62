/* The Llama family (Llama 2/3, TinyLlama, SmolLM, ...), as Hugging Face's modeling_llama computes
 * it: RMSNorm, rotary position embedding (rotate_half), grouped-query attention, a SwiGLU MLP, no
 * biases, a tied or untied LM head. The model declares its tensors (Hugging Face's names and
 * (out, in) layout), the op kinds of one block and of the head with the values they access, the
 * values' sizes, its own buffers (the rotary table, the KV cache), the kernels each kind runs,
 * decoding and init; the step graph (src/graph/) does the rest. docs/adding-a-model.md
 * walks through this file. */
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

/* ---- parameters --------------------------------------------------------------------------------
 * embed, then per layer the nine below, then the final norm, then the LM head when untied. q, k
 * and v follow each other without padding, so that they are one ((H + 2 KV) hs, C) matrix and one
 * GEMM computes the three; gate and up likewise. */
enum { ATTN_NORM, WQ, WK, WV, WO, MLP_NORM, WGATE, WUP, WDOWN, NLAYERT };
static const char *const layer_names[NLAYERT] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",   "mlp.up_proj.weight",     "mlp.down_proj.weight"};

static mw_status build_table(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int C = c->n_embd, hs = C / c->n_head, Q = c->n_head * hs, KV = c->n_kv_head * hs, F = c->ffn;
    m->tensors = calloc((size_t)c->n_layer * NLAYERT + 4, sizeof(mw_tensor));
    if (!m->tensors) return mw_fail(MW_ERR_NOMEM, "cannot allocate the parameter table");
    /* tensor parallelism as Megatron-LM's: a vocab-parallel embedding and head (a tied one kept on
     * the last stage too), column-parallel q, k, v, gate and up (rows: output features), row-
     * parallel o and down (columns: input features), the norms whole */
    mw_graph_add_tensor_split(m, "model.embed_tokens.weight", c->vocab, C, 1, 1, MW_TS_ROWS,
                              c->tied ? MW_AT_ENDS : MW_AT_AUTO);
    enum { W_ = MW_TS_WHOLE, R_ = MW_TS_ROWS, C_ = MW_TS_COLS };
    const int split[NLAYERT] = {W_, R_, R_, R_, C_, W_, R_, R_, C_};
    const int rows[NLAYERT] = {C, Q, KV, KV, C, C, F, F, C};
    const int cols[NLAYERT] = {0, C, C, C, Q, 0, C, C, F};
    const int pad[NLAYERT] = {1, 0, 0, 1, 1, 1, 0, 1, 1}; /* q|k|v and gate|up: fused */
    for (int l = 0; l < c->n_layer; l++)
        for (int k = 0; k < NLAYERT; k++) {
            char name[64];
            snprintf(name, sizeof name, "model.layers.%d.%s", l + (c->pp > 1 ? c->pp_first : 0), layer_names[k]);
            mw_graph_block(m, l);
            mw_graph_add_tensor_split(m, name, rows[k], cols[k], cols[k] != 0, pad[k], split[k], MW_AT_AUTO);
            if (k == ATTN_NORM || k == MLP_NORM) mw_tp_tensor_seq(m); /* --sp: each rank's rows */
        }
    mw_graph_block(m, -1);
    mw_graph_add_tensor(m, "model.norm.weight", C, 0, 0, 1);
    mw_tp_tensor_seq(m);
    if (!c->tied) mw_graph_add_tensor_split(m, "lm_head.weight", c->vocab, C, 1, 1, MW_TS_ROWS, MW_AT_AUTO);
    return MW_OK;
}

/* ---- values and op kinds ---------------------------------------------------------------------- */

/* values of block l (X is its input) */
enum { X, LN1, LN1S, QKV, ATTY, LSE, RES2, LN2, LN2S, FCH, ACT, NLS };
static const char *const lslot_names[NLS] = {"x",    "ln1", "ln1_rstd", "qkv",     "atty", "lse",
                                             "res2", "ln2", "ln2_rstd", "gate_up", "act"};
/* values of the step */
enum { G_IN, G_TGT, G_LNF, G_LNFS, G_LOGITS, G_LOSSES, G_DRES, G_DTMP, G_DQKV, G_ATTS, G_NORM, G_DCHUNK, G_MLPG, G_ATTSIP, G_ATTD, G_QKVG, NGS };
static const char *const gslot_names[NGS] = {"inputs", "targets", "lnf",  "lnf_rstd", "logits", "losses",
                                             "dres",   "dtmp",    "dqkv", "att_scratch", "norm_parts",
                                             "fp32_chunk", "mlp_group", "att_scratch_ip", "att_rowdots", "qkv_group"};
/* --precision bf16 keeps ln1, q|k|v (rotated), the attention output, ln2, gate|up, act and lnf
 * as bfloat16 (docs/precision.md): the products round what they read anyway; q|k|v is also read
 * by attention, its output by attention's backward, gate|up (and d(gate|up) over it) by SwiGLU
 * and its backward, which then see their rounded values (attention computes in fp32 on them) */
#define B16 mw_graph_b16
#define elt mw_graph_elt
/* how each value divides over tensor-parallel ranks (MW_VS_*): the heads' and the MLP's hidden
 * values and the vocabulary's logits by --tp, the norms' and the residual stream's by --tp only
 * under --sp */
enum { WH = MW_VS_WHOLE, TP = MW_VS_TP, SQ = MW_VS_SEQ };
static const unsigned char lslot_split[NLS] = {SQ, SQ, SQ, TP, TP, TP, SQ, SQ, SQ, TP, TP};
/* which values --act-compress may store quantised (docs/memory.md, "Stored activations"): the
 * inputs of the products, the norms and the activation function, q|k|v and the attention output
 * (each backward op reads the dequantised value; a recomputation replays from the exact one); not
 * the log-sum-exp nor the norm's statistics, which scale whole rows */
static const unsigned char lslot_lossy[NLS] = {1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1}; /* x, ln1, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_rstd, gate_up, act */
static const unsigned char gslot_split[NGS] = {WH, WH, SQ, SQ, WH, WH, SQ, WH, TP, WH, WH, TP, WH, WH, TP, WH}; /* logits: gslot's */
#define XN MW_SLOT_NEXT
#define GS MW_SLOT_STEP
enum { R = MW_R, W = MW_W, U = MW_U };
enum { P_NONE = MW_P_NONE, P_SEL = MW_P_SEL, P_FULL = MW_P_FULL };

enum {
    K_EMB, K_LN1QKV, K_ATTN, K_PROJ, K_LN2FC, K_SWIGLU, K_DOWN, K_LN1, K_LN2, K_HEAD, K_LOGITS,
    K_BDOWN, K_BFC, K_BPROJ, K_BATTN, K_BQKV, K_EMBB, K_OPT, K_MLPG, K_BMLPG, K_BPROJD, K_BATTNIP, K_BQKVG, NKINDS
};
#define FWD MW_KF_FWD
static const mw_kind KINDS[NKINDS] = {
    [K_EMB] = {"embed", 3, {{GS(G_IN), W}, {GS(G_TGT), W}, {X, W}}, 0, 0},
    /* q|k|v's product and rotation per 256 rows into an fp32 chunk, then rounded into qkv, when
     * qkv is bfloat16 */
    [K_LN1QKV] = {"norm+qkv+rope", 5, {{X, R}, {LN1, W}, {LN1S, W}, {QKV, W}, {GS(G_DCHUNK), W}}, FWD, MW_COST_MATMUL},
    [K_ATTN] = {"attention", 4, {{QKV, R}, {ATTY, W}, {LSE, W}, {GS(G_ATTS), W}}, FWD, MW_COST_ATTN},
    [K_PROJ] = {"o proj", 3, {{X, R}, {ATTY, R}, {RES2, W}}, FWD, MW_COST_MATMUL},
    /* gate's and up's products per 256 rows into an fp32 chunk, then rounded into gate|up, when
     * gate|up is bfloat16 */
    [K_LN2FC] = {"norm+gate+up", 5, {{RES2, R}, {LN2, W}, {LN2S, W}, {FCH, W}, {GS(G_DCHUNK), W}}, FWD, MW_COST_MATMUL},
    [K_SWIGLU] = {"swiglu", 2, {{FCH, R}, {ACT, W}}, FWD, MW_COST_ELEM},
    [K_DOWN] = {"down proj", 3, {{RES2, R}, {ACT, R}, {XN, W}}, FWD, MW_COST_MATMUL},
    [K_LN1] = {"attn norm", 3, {{X, R}, {LN1, W}, {LN1S, W}}, FWD, MW_COST_ELEM},
    [K_LN2] = {"mlp norm", 3, {{RES2, R}, {LN2, W}, {LN2S, W}}, FWD, MW_COST_ELEM},
    [K_HEAD] = {"head+loss", 8,
                {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                 {GS(G_LOSSES), W}, {GS(G_DTMP), W}, {GS(G_DRES), W}}, 0, MW_COST_HEAD},
    [K_LOGITS] = {"head", 6,
                  {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                   {GS(G_LOSSES), W}}, 0, 0},
    /* d(act) in place of act (fp32) or per chunk of rows (bf16: act is bfloat16), then d(gate|up)
     * in place of gate|up */
    [K_BDOWN] = {"down proj bwd", 4, {{FCH, U}, {ACT, U}, {GS(G_DRES), U}, {GS(G_DCHUNK), W}}, 0, MW_COST_MATMUL},
    [K_BFC] = {"gate+up bwd", 6,
               {{LN2, R}, {LN2S, R}, {RES2, R}, {FCH, R}, {GS(G_DTMP), W}, {GS(G_DRES), U}}, 0, MW_COST_MATMUL},
    [K_BPROJ] = {"o proj bwd", 3, {{ATTY, R}, {GS(G_DRES), U}, {GS(G_DTMP), W}}, 0, MW_COST_MATMUL},
    [K_BATTN] = {"attention bwd", 6,
                 {{GS(G_DTMP), R}, {QKV, R}, {ATTY, R}, {LSE, R}, {GS(G_DQKV), W}, {GS(G_ATTS), W}}, 0, MW_COST_ATTN},
    [K_BQKV] = {"norm+qkv bwd", 6,
                {{GS(G_DQKV), R}, {LN1, R}, {LN1S, R}, {X, R}, {GS(G_DTMP), W}, {GS(G_DRES), U}}, 0, MW_COST_MATMUL},
    [K_EMBB] = {"embed bwd", 2, {{GS(G_DRES), U}, {GS(G_IN), R}}, 0, 0},
    [K_OPT] = {"optimizer", 1, {{GS(G_NORM), W}}, 0, 0},
    /* A recomputed block (--recompute full, fp32, no --tp) as GPT-2's (gpt2.c): its MLP in row
     * groups when there are two at least (mlpg.h: the same bits; the op makes the --act-compress
     * round trips of what it reads itself), the o product's backward leaving the attention
     * backward's row dots so that the attention output dies there, the attention's backward (and
     * the rotation's) written over q|k|v, and the q|k|v product's backward in row groups (qkvg.h),
     * dequantising the norm's output and input a group at a time where they are stored compressed;
     * under --act-compress q|k|v from the block's first recomputation are stored compressed
     * through the MLP's backward instead of recomputed after it. */
    [K_MLPG] = {"mlp in groups", 3, {{RES2, R}, {XN, W}, {GS(G_MLPG), W}}, FWD, MW_COST_MATMUL},
    [K_BMLPG] = {"mlp bwd groups", 3, {{RES2, R}, {GS(G_DRES), U}, {GS(G_MLPG), W}}, MW_KF_OWNQ, MW_COST_MATMUL},
    [K_BPROJD] = {"o proj bwd", 4, {{ATTY, R}, {GS(G_DRES), U}, {GS(G_DTMP), W}, {GS(G_ATTD), W}}, 0, MW_COST_MATMUL},
    [K_BATTNIP] = {"attn bwd (ip)", 5,
                   {{GS(G_DTMP), R}, {QKV, U}, {GS(G_ATTD), R}, {LSE, R}, {GS(G_ATTSIP), W}}, 0, MW_COST_ATTN},
    [K_BQKVG] = {"qkv bwd groups", 6,
                 {{QKV, R}, {LN1, R}, {LN1S, R}, {X, R}, {GS(G_DRES), U}, {GS(G_QKVG), W}}, MW_KF_OWNDQ, MW_COST_MATMUL},
};

/* the grouped MLP's ops cost what the ops they replace cost (as GPT-2's) */
static const unsigned char COST_SUM[NKINDS][MW_COST_PARTS] = {
    [K_MLPG] = {K_LN2FC + 1, K_SWIGLU + 1, K_DOWN + 1},
    [K_BMLPG] = {K_LN2FC + 1, K_SWIGLU + 1, K_BDOWN + 1, K_LN2 + 1, K_BFC + 1},
};

/* A recomputed block's grouped ops (the kinds above): fp32 without tensor parallelism */
static int grouped(const mw_model *m) { return !B16(m) && m->cfg.tp <= 1 && !m->cfg.sp; }
/* rows per group: --group-rows (1024 when 0) rounded up to whole chunks of the quantiser in the
 * C-wide and the F-wide values (powers of two: the larger) */
static size_t group_rows(const mw_model *m) {
    const mw_config *c = &m->cfg;
    const size_t uc = mw_graph_act_round_rows_unit((size_t)c->n_embd), uf = mw_graph_act_round_rows_unit((size_t)c->ffn);
    const size_t u = uc > uf ? uc : uf, r = c->group_rows > 0 ? (size_t)c->group_rows : 1024;
    return (r + u - 1) / u * u;
}
/* the MLP in row groups: two groups at least, and under --act-compress gate|up's up half (from row
 * N of F) starting a chunk of the quantiser, so that its round trip is a group's */
static int mlp_grouped(const mw_model *m) {
    const mw_config *c = &m->cfg;
    const size_t N = (size_t)c->batch * c->seq;
    const int q = c->act_compress || m->act_sel;
    return grouped(m) && group_rows(m) < N && (!q || N % mw_graph_act_round_rows_unit((size_t)c->ffn) == 0);
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
    mw_graph_push(m, K_SWIGLU, l);
    if (with_output) mw_graph_push(m, K_DOWN, l);
}

/* The backward of block l under policy p, recomputing what p did not keep (as GPT-2's: selective
 * redoes both norms and the activation, full the whole block). */
static void push_block_backward(mw_model *m, int l, int p) {
    if (p == P_FULL && grouped(m)) { /* the block again from its input, its MLP in row groups */
        mw_graph_push(m, K_LN1QKV, l);
        mw_graph_push(m, K_ATTN, l);
        mw_graph_push(m, K_PROJ, l);
        if (mlp_grouped(m)) {
            mw_graph_push(m, K_BMLPG, l);
        } else {
            mw_graph_push(m, K_LN2FC, l);
            mw_graph_push(m, K_SWIGLU, l);
            mw_graph_push(m, K_BDOWN, l);
            mw_graph_push(m, K_LN2, l);
            mw_graph_push(m, K_BFC, l);
        }
        mw_graph_push(m, K_BPROJD, l);
        if (!mw_graph_act_bits(m, l) || !lslot_lossy[QKV]) mw_graph_push(m, K_LN1QKV, l); /* else stored compressed */
        mw_graph_push(m, K_BATTNIP, l);
        mw_graph_push(m, K_BQKVG, l);
        return;
    }
    if (p == P_FULL) {
        mw_graph_push(m, K_LN1QKV, l);
        mw_graph_push(m, K_ATTN, l);
        mw_graph_push(m, K_PROJ, l);
        mw_graph_push(m, K_LN2FC, l);
    }
    if (p != P_NONE) mw_graph_push(m, K_SWIGLU, l);
    mw_graph_push(m, K_BDOWN, l);
    if (p != P_NONE) mw_graph_push(m, K_LN2, l);
    mw_graph_push(m, K_BFC, l);
    mw_graph_push(m, K_BPROJ, l);
    if (p == P_FULL) mw_graph_push(m, K_LN1QKV, l);
    mw_graph_push(m, K_BATTN, l);
    if (p == P_SEL) mw_graph_push(m, K_LN1, l);
    mw_graph_push(m, K_BQKV, l);
}

/* ---- sizes ------------------------------------------------------------------------------------- */

#define F32 ((uint64_t)sizeof(float))
static uint64_t qkv_width(const mw_config *c) {
    return (uint64_t)(c->n_head + 2 * c->n_kv_head) * (c->n_embd / c->n_head);
}

/* the fp32 chunk's row (bf16): an MLP product's or q|k|v's */
static uint64_t chunk_width(const mw_config *c) {
    return (uint64_t)c->ffn > qkv_width(c) ? (uint64_t)c->ffn : qkv_width(c);
}

static void gslot(const mw_model *m, int g, uint64_t *bytes, mw_category *cat) {
    const mw_config *c = &m->cfg;
    const uint64_t B = c->batch, T = c->seq, C = c->n_embd, N = B * T;
    const uint64_t TP_ = c->tp > 1 ? (uint64_t)c->tp : 1, Vl = (c->vocab + TP_ - 1) / TP_; /* a rank's vocabulary, padded */
    const uint64_t rows = N < MW_LOSS_ROWS ? N : MW_LOSS_ROWS, crows = N < MW_CHUNK_ROWS ? N : MW_CHUNK_ROWS;
    const int keep = mw_graph_keeps_logits(c);
    static const mw_category gcat[NGS] = {MW_CAT_ACTS, MW_CAT_ACTS, MW_CAT_ACTS, MW_CAT_ACTS,
                                          MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK,
                                          MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK,
                                          MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK, MW_CAT_WORK};
    const uint64_t H = B16(m) ? 2 : F32;
    const uint64_t Rg = group_rows(m) < N ? group_rows(m) : N, hs = C / c->n_head;
    const uint64_t gbytes[NGS] = {
        N * sizeof(int32_t), N * sizeof(int32_t), N * C * H, N * F32, (keep ? N : rows) * Vl * F32,
        N * F32, N * C * F32, N * C * F32, N * qkv_width(c) * F32,
        (uint64_t)m->nthreads * mw_attention_scratch_floats_x(c->seq, c->n_embd / c->n_head, B16(m)) * F32,
        (m->nfloats / MW_NORM_QUANTUM + 1) * sizeof(double), B16(m) ? crows * chunk_width(c) * F32 : 0,
        mlp_grouped(m) ? mw_mlpg_ws_floats((int)group_rows(m), (int)C, c->ffn, 1, mw_graph_act_round_scratch()) * F32 : 0,
        grouped(m) ? (uint64_t)m->nthreads * mw_attention_scratch_floats_ip(c->seq, (int)hs) * F32 : 0,
        grouped(m) ? B * (uint64_t)c->n_head * T * F32 : 0,
        grouped(m) ? mw_qkvg_ws_floats((int)Rg, (int)C, c->act_compress || m->act_sel) * F32 : 0};
    *bytes = gbytes[g];
    *cat = g == G_LOGITS && keep ? MW_CAT_ACTS : gcat[g];
}

static uint64_t lslot(const mw_model *m, int v) {
    const mw_config *c = &m->cfg;
    const uint64_t B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, N = B * T, F = c->ffn;
    const uint64_t h = B16(m) ? 2 : F32;
    const uint64_t lbytes[NLS] = {N * C * F32, N * C * h, N * F32,         N * qkv_width(c) * h,
                                  N * C * h, B * H * T * F32, N * C * F32, N * C * h,
                                  N * F32,     2 * N * F * h, N * F * h};
    return lbytes[v];
}

/* the model's own buffers: the rotary table (cos then sin, rows x hs/2 each: seq positions, or
 * ctx for decoding), and for inference the KV cache of kv heads and decoding's scratch */
enum { E_ROPE, E_KCACHE, E_VCACHE, E_DEC };
static uint64_t rope_rows(const mw_config *c) { return mw_graph_keeps_logits(c) ? c->ctx : c->seq; }

static int ext(const mw_model *m, mw_ext out[MW_MAX_EXT]) {
    const mw_config *c = &m->cfg;
    const uint64_t hs = c->n_embd / c->n_head, L = c->n_layer, CTX = c->ctx, C = c->n_embd;
    out[E_ROPE] = (mw_ext){"rope_table", rope_rows(c) * hs * F32, MW_CAT_WORK};
    if (!mw_graph_keeps_logits(c)) return 1;
    const uint64_t kv = (uint64_t)c->n_kv_head * hs;
    out[E_KCACHE] = (mw_ext){"kcache", L * CTX * kv * F32, MW_CAT_ACTS};
    out[E_VCACHE] = (mw_ext){"vcache", L * CTX * kv * F32, MW_CAT_ACTS};
    out[E_DEC] = (mw_ext){"decode", (4 * C + qkv_width(c) + 3 * (uint64_t)c->ffn + CTX + c->vocab + 8) * F32,
                          MW_CAT_WORK};
    return 4;
}

static void bound(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int hs = c->n_embd / c->n_head, rows = (int)rope_rows(c);
    mw_rope_table(m->ext[E_ROPE], m->ext[E_ROPE] + (size_t)rows * hs / 2, rows, hs, (float)c->rope_theta);
}

static void init(mw_model *m, uint64_t seed) {
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (t->ndim == 1) { /* RMSNorm gains */
            float *p = mw_graph_param_access(m, i, 1);
            if (!p) return; /* m->io_error says why */
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
        } else {
            mw_graph_fill_normal(m, i, seed, 0.02);
        }
    }
}

/* ---- the kernels of each op kind -------------------------------------------------------------- */

/* The tensors before the blocks in this rank's table: the embedding, which a pipeline stage holds
 * on the first stage alone (tied: the last stage's head reads a copy, mw_graph_tied_head), else none. */
static int pre_tensors(const mw_model *m) {
    const mw_config *c = &m->cfg;
    return c->pp <= 1 || c->pp_stage == 0;
}
static void layer_ptrs(const mw_model *m, int which, int l, float *p[NLAYERT]) {
    for (int k = 0; k < NLAYERT; k++) p[k] = mw_graph_tensor(m, which, pre_tensors(m) + l * NLAYERT + k);
}
#define EMBED(w) mw_graph_tensor(m, (w), 0)
#define NORMF(w) mw_graph_tensor(m, (w), pre_tensors(m) + m->cfg.n_layer * NLAYERT)
#define LMHEAD(w) (m->cfg.tied ? mw_graph_tied_head(m, (w)) : mw_graph_tensor(m, (w), pre_tensors(m) + 1 + m->cfg.n_layer * NLAYERT))
#define WS (&m->gw)

/* mw_mlpg's round trip of block l's rows: the stored activations' (mw_graph_act_round_rows) */
typedef struct {
    mw_model *m;
    int l;
} round_ctx;
static mw_status round_rows(void *ctx, int v, float *x, size_t r0, size_t rows, size_t width, char *scratch) {
    const round_ctx *r = ctx;
    return mw_graph_act_round_rows(r->m, r->l, v, x, r0, rows, width, scratch);
}

/* Under --tp T (Megatron-LM's): this rank holds H/T query heads and KV/T key/value heads (q's, k's
 * and v's rows), o's columns, F/T of the MLP's width (gate's and up's rows, down's columns) and
 * ceil(V/T) rows of the embedding and of the LM head. Widths below are this rank's (the plain
 * run's when T = 1). As GPT-2's (gpt2.c, run_op): the row-parallel products (o, down), the
 * column-parallel inputs' gradients (q|k|v's, gate|up's), the embedding's lookup and the head's
 * input gradient are all-reduced in rank order; the embedding's and the head's gradients are this
 * rank's rows alone (tied: both into the one table's rows). --sp as GPT-2's: the residual stream
 * and the norms on this rank's rows, all-gathers and reduce-scatters in place of the all-reduces,
 * the norms' gradients summed over the ranks once per step. */
static void run_op(mw_model *m, int i, int train, float dloss, double *loss_sum) {
    const mw_config *c = &m->cfg;
    const int B = c->batch, T = c->seq, C = c->n_embd, V = c->vocab, N = B * T;
    const int tp = mw_tp_on(m), TP_ = tp ? c->tp : 1;
    const int H = c->n_head / TP_, KV = c->n_kv_head / TP_, hs = C / c->n_head, F = c->ffn / TP_;
    const int QW = (H + 2 * KV) * hs, Q = H * hs; /* this rank's q|k|v width, o's input width */
    int vlo = 0, vhi = V;
    if (tp) mw_tp_vocab_range(m, V, &vlo, &vhi);
    const int Vl = vhi - vlo;
    const int sp = tp && c->sp;
    int r0 = 0, r1 = N;
    if (sp) mw_tp_rows(m, N, &r0, &r1);
    const int Nl = r1 - r0; /* the rows of the residual stream and the norms here */
    const size_t hb = B16(m) ? 2 : sizeof(float);
    float *spb = m->spbuf;
    const float eps = (float)c->norm_eps;
    const int L = c->n_layer, l = m->ops[i].layer;
    const float *cos_t = m->ext[E_ROPE], *sin_t = cos_t + (size_t)rope_rows(c) * hs / 2;
    void **P = m->opp + (size_t)i * MW_MAXACC;
#define A(k) ((float *)P[k])
    float *p[NLAYERT], *g[NLAYERT];
    if (l < L) {
        layer_ptrs(m, 0, l, p);
        if (!m->cfg.inference) layer_ptrs(m, 1, l, g);
    }
    const size_t NF = (size_t)N * F, NC = (size_t)N * C;
    const int b16 = B16(m);
    switch (m->ops[i].kind) {
    case K_EMB:
        if (!tp) {
            mw_embedding_forward(A(2), (const int32_t *)P[0], EMBED(0), N, C);
            break;
        }
        if (!sp) {
            mw_vocab_embed_rows(A(2), (const int32_t *)P[0], EMBED(0), N, C, vlo, vhi);
            mw_tp_allreduce(m, A(2), NC); /* exact: one rank's row is not zero */
            break;
        }
        mw_vocab_embed_rows(spb, (const int32_t *)P[0], EMBED(0), N, C, vlo, vhi);
        mw_tp_reduce_scatter(m, spb, N, C);
        memcpy(A(2), spb + (size_t)r0 * C, sizeof(float) * (size_t)Nl * C);
        break;
    case K_LN1QKV:
    case K_LN1:
        mw_rmsnorm_forward_x(P[1], b16, A(2), A(0), p[ATTN_NORM], Nl, C, eps);
        if (m->ops[i].kind == K_LN1) break;
        const void *ln1 = mw_tp_all_rows(m, P[1], N, (size_t)C * hb);
        if (!b16) {
            mw_matmul_forward_x(A(3), ln1, 0, p[WQ], NULL, N, C, QW, 0, WS); /* q|k|v: one matrix */
            mw_rope_forward_inplace(A(3), QW, cos_t, sin_t, B, T, H, hs);
            mw_rope_forward_inplace(A(3) + (size_t)H * hs, QW, cos_t, sin_t, B, T, KV, hs);
            break;
        }
        for (int n0 = 0; n0 < N; n0 += MW_CHUNK_ROWS) { /* rows are independent: the same bits */
            const int rows = N - n0 < MW_CHUNK_ROWS ? N - n0 : MW_CHUNK_ROWS;
            mw_matmul_forward_x(A(4), elt((void *)ln1, (size_t)n0 * C, 1), 1, p[WQ], NULL, rows, C, QW, 0, WS);
            mw_rope_forward_rows(A(4), QW, cos_t, sin_t, n0, rows, T, H, hs);
            mw_rope_forward_rows(A(4) + (size_t)H * hs, QW, cos_t, sin_t, n0, rows, T, KV, hs);
            mw_bf16_store_mt((uint16_t *)P[3] + (size_t)n0 * QW, A(4), (size_t)rows * QW);
        }
        break;
    case K_ATTN:
        mw_attention_forward_x(P[1], b16, A(2), A(3), m->nthreads, P[0], b16, B, T, H, KV, hs);
        break;
    case K_PROJ:
    case K_DOWN: { /* out = in + product; row-parallel: the partial products summed first */
        const int k = m->ops[i].kind == K_PROJ, IC = k ? Q : F;
        const float *w = k ? p[WO] : p[WDOWN];
        if (!tp) {
            mw_graph_copy(A(2), A(0), NC);
            mw_matmul_forward_x(A(2), P[1], b16, w, NULL, N, IC, C, 1, WS);
            break;
        }
        float *o = A(2), *part = sp ? spb : o; /* --sp: the whole partial sums, then this rank's rows */
        const float *x = A(0);
        mw_matmul_forward_x(part, P[1], b16, w, NULL, N, IC, C, 0, WS);
        mw_tp_sum_partials(m, part, N, C);
        const float *s0 = part + (size_t)r0 * C;
        const size_t nl = (size_t)Nl * C;
#pragma omp parallel for schedule(static)
        for (size_t e = 0; e < nl; e++) o[e] = x[e] + s0[e];
        break;
    }
    case K_LN2FC:
    case K_LN2:
        mw_rmsnorm_forward_x(P[1], b16, A(2), A(0), p[MLP_NORM], Nl, C, eps);
        if (m->ops[i].kind == K_LN2) break;
        const void *ln2 = mw_tp_all_rows(m, P[1], N, (size_t)C * hb);
        if (!b16) {
            mw_matmul_forward_x(A(3), ln2, 0, p[WGATE], NULL, N, C, F, 0, WS);
            mw_matmul_forward_x(A(3) + NF, ln2, 0, p[WUP], NULL, N, C, F, 0, WS);
            break;
        }
        for (int n0 = 0; n0 < N; n0 += MW_CHUNK_ROWS) { /* rows are independent: the same bits */
            const int rows = N - n0 < MW_CHUNK_ROWS ? N - n0 : MW_CHUNK_ROWS;
            const void *x = elt((void *)ln2, (size_t)n0 * C, 1);
            uint16_t *gu = (uint16_t *)P[3] + (size_t)n0 * F;
            mw_matmul_forward_x(A(4), x, 1, p[WGATE], NULL, rows, C, F, 0, WS);
            mw_bf16_store_mt(gu, A(4), (size_t)rows * F);
            mw_matmul_forward_x(A(4), x, 1, p[WUP], NULL, rows, C, F, 0, WS);
            mw_bf16_store_mt(gu + NF, A(4), (size_t)rows * F);
        }
        break;
    case K_SWIGLU:
        mw_swiglu_forward_x(P[1], b16, P[0], elt(P[0], NF, b16), b16, (long)NF);
        break;
    case K_HEAD:
    case K_LOGITS: {
        const int kind = m->ops[i].kind, has_tg = m->has_targets, keep = mw_graph_keeps_logits(c);
        const int32_t *tg = (const int32_t *)P[1];
        void *lnf = P[2];
        float *rstd = A(3), *logits = A(4), *losses = A(5);
        const float *x = A(0), *wl = LMHEAD(0);
        mw_rmsnorm_forward_x(lnf, b16, rstd, x, NORMF(0), Nl, C, eps);
        lnf = (void *)mw_tp_all_rows(m, lnf, N, (size_t)C * hb); /* the head reads every row (spbuf, writable) */
        const int grad = kind == K_HEAD && train;
        for (int n0 = 0; n0 < N; n0 += MW_LOSS_ROWS) { /* positions in fixed quanta */
            const int rows = n0 + MW_LOSS_ROWS < N ? MW_LOSS_ROWS : N - n0;
            float *z = keep ? logits + (size_t)n0 * V : logits; /* or one chunk's */
            mw_matmul_forward_x(z, elt(lnf, (size_t)n0 * C, b16), b16, wl, NULL, rows, C, Vl, 0, WS);
            if (!has_tg) continue;
            if (tp)
                mw_tp_xent(m, z, losses + n0, tg + n0, dloss, grad, rows, V);
            else
                mw_crossentropy(z, losses + n0, tg + n0, dloss, grad, rows, V);
            if (grad)
                mw_matmul_backward_x(A(6) + (size_t)n0 * C, LMHEAD(1), NULL, z, 0,
                                     elt(lnf, (size_t)n0 * C, b16), b16, wl, rows, C, Vl, 0, WS);
        }
        if (has_tg) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += losses[n];
            *loss_sum = s;
        }
        if (grad) {
            mw_tp_sum_partials(m, A(6), N, C); /* d(norm) over the vocabulary's ranks: this rank's rows */
            memset(A(7), 0, sizeof(float) * (size_t)Nl * C);
            mw_rmsnorm_backward_acc(A(7), NORMF(1), A(6) + (size_t)r0 * C, x, NORMF(0), rstd, Nl, C);
        }
        break;
    }
    case K_BDOWN: { /* dW from act; d(act) over act (or per chunk of rows when act is bfloat16:
                       rows are independent, the same bits); d(gate|up) over gate|up */
        const float *dres = mw_tp_all_rows(m, A(2), N, (size_t)C * sizeof(float)); /* every row's */
        mw_matmul_backward_x(NULL, g[WDOWN], NULL, dres, 0, P[1], b16, p[WDOWN], N, F, C, 0, WS);
        const int RC = b16 ? MW_CHUNK_ROWS : N;
        for (int n0 = 0; n0 < N; n0 += RC) {
            const int rows = N - n0 < RC ? N - n0 : RC;
            const size_t o = (size_t)n0 * F;
            float *da = b16 ? A(3) : A(1) + o;
            void *gate = elt(P[0], o, b16), *up = elt(P[0], NF + o, b16);
            mw_matmul_backward_dinp(da, dres + (size_t)n0 * C, p[WDOWN], rows, F, C, WS);
            mw_swiglu_backward_x(gate, up, b16, da, gate, up, b16, (long)rows * F);
        }
        break;
    }
    case K_BFC: {
        const void *ln2in = mw_tp_all_rows(m, P[0], N, (size_t)C * hb);
        mw_matmul_backward_x(A(4), g[WGATE], NULL, P[3], b16, ln2in, b16, p[WGATE], N, C, F, 0, WS);
        mw_matmul_backward_x(A(4), g[WUP], NULL, elt(P[3], NF, b16), b16, ln2in, b16, p[WUP], N, C, F, 1, WS);
        mw_tp_sum_partials(m, A(4), N, C);
        mw_rmsnorm_backward_acc(A(5), g[MLP_NORM], A(4) + (size_t)r0 * C, A(2), p[MLP_NORM], A(1), Nl, C);
        break;
    }
    case K_BPROJ:
        mw_matmul_backward_x(A(2), g[WO], NULL, mw_tp_all_rows(m, A(1), N, (size_t)C * sizeof(float)), 0, P[0], b16, p[WO], N, Q, C,
                             0, WS);
        break;
    case K_BATTN:
        mw_attention_backward_x(A(4), A(5), m->nthreads, A(0), P[1], b16, P[2], b16, A(3), B, T, H, KV, hs);
        mw_rope_backward_inplace(A(4), QW, cos_t, sin_t, B, T, H, hs);
        mw_rope_backward_inplace(A(4) + (size_t)H * hs, QW, cos_t, sin_t, B, T, KV, hs);
        break;
    case K_MLPG:
    case K_BMLPG: {
        mw_mlpg mg = {.N = N, .C = C, .F = F, .R = (int)group_rows(m), .glu = 1, .eps = eps, .ln2w = p[MLP_NORM],
                      .fcw = p[WGATE], .upw = p[WUP], .fcpw = p[WDOWN], .gw = WS, .ws = A(2)};
        if (m->ops[i].kind == K_MLPG) {
            mw_mlpg_forward(&mg, A(1), A(0));
            break;
        }
        mg.gln2w = g[MLP_NORM], mg.gfcw = g[WGATE], mg.gupw = g[WUP], mg.gfcpw = g[WDOWN];
        round_ctx rc = {m, l};
        mg.round = round_rows, mg.ctx = &rc, mg.qbytes = mw_graph_act_round_scratch();
        mw_graph_io_failed(m, mw_mlpg_backward(&mg, A(1), A(0))); /* a value that is not finite, named */
        break;
    }
    case K_BPROJD:
        mw_matmul_backward_x(A(2), g[WO], NULL, A(1), 0, P[0], 0, p[WO], N, Q, C, 0, WS);
        mw_attention_rowdots(A(3), A(2), P[0], B, T, H, hs); /* the backward's row dots dO . O: the output dies here */
        break;
    case K_BATTNIP:
        mw_attention_backward_inplace(A(1), A(4), m->nthreads, A(0), A(2), A(3), B, T, H, KV, hs);
        mw_rope_backward_inplace(A(1), QW, cos_t, sin_t, B, T, H, hs);
        mw_rope_backward_inplace(A(1) + (size_t)H * hs, QW, cos_t, sin_t, B, T, KV, hs);
        break;
    case K_BQKVG: {
        mw_qkvg q = {.m = m, .op = i, .jln = 1, .jx = 3, .N = N, .C = C, .OC = QW, .R = (int)group_rows(m), .rms = 1,
                     .w = p[WQ], .nw = p[ATTN_NORM], .gw = g[WQ], .gnw = g[ATTN_NORM], .rstd = A(2), .ws = WS, .buf = A(5)};
        mw_graph_io_failed(m, mw_qkvg_backward(&q, A(4), A(0))); /* rows that are not whole chunks (internal) */
        break;
    }
    case K_BQKV:
        mw_matmul_backward_x(A(4), g[WQ], NULL, A(0), 0, mw_tp_all_rows(m, P[1], N, (size_t)C * hb), b16, p[WQ], N, C, QW, 0, WS);
        mw_tp_sum_partials(m, A(4), N, C);
        mw_rmsnorm_backward_acc(A(5), g[ATTN_NORM], A(4) + (size_t)r0 * C, A(3), p[ATTN_NORM], A(2), Nl, C);
        break;
    case K_EMBB:
        if (tp) {
            mw_vocab_embed_backward(EMBED(1), mw_tp_all_rows(m, A(0), N, (size_t)C * sizeof(float)), (const int32_t *)P[1], N, C, vlo,
                                    vhi);
            m->tp_sp_dirty = sp; /* the norms' gradients are each rank's rows' until the step sums them */
        } else
            mw_embedding_backward(EMBED(1), A(0), (const int32_t *)P[1], N, C);
        break;
    default:
        break;
    }
#undef A
}

/* ---- incremental decoding: one position through every block, the KV cache of kv heads -------- */

static const float *decode(mw_model *m, int32_t token, int pos) {
    const mw_config *c = &m->cfg;
    const int C = c->n_embd, H = c->n_head, KV = c->n_kv_head, hs = C / H, V = c->vocab, F = c->ffn;
    const int CTX = c->ctx, QW = (int)qkv_width(c), KW = KV * hs;
    const float eps = (float)c->norm_eps;
    float *x = m->ext[E_DEC], *h = x + C, *qkv = h + C, *y = qkv + QW, *fc = y + C, *act = fc + 2 * F;
    float *att = act + F, *logits = att + CTX, *rstd = logits + V;
    const float *cos_t = m->ext[E_ROPE], *sin_t = cos_t + (size_t)CTX * hs / 2;
    const float *cp = cos_t + (size_t)pos * hs / 2, *sp = sin_t + (size_t)pos * hs / 2;
    memcpy(x, EMBED(0) + (size_t)token * C, sizeof(float) * C);
    for (int l = 0; l < c->n_layer; l++) {
        float *p[NLAYERT];
        layer_ptrs(m, 0, l, p);
        float *K = m->ext[E_KCACHE] + (size_t)l * CTX * KW, *Vc = m->ext[E_VCACHE] + (size_t)l * CTX * KW;
        mw_rmsnorm_forward(h, rstd, x, p[ATTN_NORM], 1, C, eps);
        mw_matmul_forward(qkv, h, p[WQ], NULL, 1, C, QW, 0, WS);
        mw_rope_forward_inplace(qkv, QW, cp, sp, 1, 1, H, hs);
        mw_rope_forward_inplace(qkv + (size_t)H * hs, QW, cp, sp, 1, 1, KV, hs);
        if (B16(m)) /* as the forward stores q|k|v: rotated, then rounded */
            for (int k = 0; k < QW; k++) qkv[k] = mw_bf16_round(qkv[k]);
        memcpy(K + (size_t)pos * KW, qkv + (size_t)H * hs, sizeof(float) * KW);
        memcpy(Vc + (size_t)pos * KW, qkv + (size_t)(H + KV) * hs, sizeof(float) * KW);
        mw_attention_decode(y, qkv, K, Vc, KW, pos, H, KV, hs, att);
        mw_matmul_forward(x, y, p[WO], NULL, 1, C, C, 1, WS);
        mw_rmsnorm_forward(h, rstd, x, p[MLP_NORM], 1, C, eps);
        mw_matmul_forward(fc, h, p[WGATE], NULL, 1, C, F, 0, WS);
        mw_matmul_forward(fc + F, h, p[WUP], NULL, 1, C, F, 0, WS);
        if (B16(m)) /* as the forward stores gate|up: rounded (the rest the products round) */
            for (int k = 0; k < 2 * F; k++) fc[k] = mw_bf16_round(fc[k]);
        mw_swiglu_forward(act, fc, fc + F, F);
        mw_matmul_forward(x, act, p[WDOWN], NULL, 1, F, C, 1, WS);
    }
    mw_rmsnorm_forward(h, rstd, x, NORMF(0), 1, C, eps);
    mw_matmul_forward(logits, h, LMHEAD(0), NULL, 1, C, V, 0, WS);
    return logits;
}

const mw_model_def mw_arch_llama = {
    .name = "llama",
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
    .bound = bound,
    .run_op = run_op,
    .decode = decode,
    .init = init,
};
