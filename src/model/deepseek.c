/* The deepseek family (docs/moe.md): DeepSeek-V2/V3 and Mixtral from one op set. Llama's blocks
 * (RMSNorm, SwiGLU, no biases) with, per block, grouped-query attention (Llama's kernels) or
 * multi-head latent attention, and a dense SwiGLU MLP (the first first_dense blocks) or a mixture
 * of experts: a router (softmax or sigmoid scores, top-k, renormalised weights), dispatch to the
 * routed experts under a capacity, their SwiGLU FFNs, shared experts, combine. The model declares
 * its tensors (Hugging Face's names: DeepseekV2/V3's, Mixtral's block_sparse_moe for a Mixtral
 * shape), the op kinds with the values they access, the values' sizes, and the kernels of each
 * kind (src/kernels/cpu/ops.h, moe.h); the step graph (src/graph/) does the rest. May call
 * src/core, src/kernels, src/graph/graph.h and hf.h (its tensor count, for export). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../graph/graph.h"
#include "../kernels/cpu/moe.h"
#include "../kernels/cpu/ops.h"
#include "hf.h"

/* ---- shapes ------------------------------------------------------------------------------------ */

typedef struct shape {
    long N;
    int B, T, C, V, H, KV, hs, F, E, K, S, Fm, Fs, mla, qr, kvr, rd, nd, vd, qk, QW, KVW, AW, QKVW, Ld;
    long R, cap, Rx; /* rows dispatched from this rank; rows its experts take (Rx, below) */
} shape;

static shape shape_of(const mw_config *c) {
    shape s;
    s.B = c->batch, s.T = c->seq, s.N = (long)c->batch * c->seq, s.C = c->n_embd, s.V = c->vocab, s.H = c->n_head;
    s.KV = c->n_kv_head, s.hs = c->n_embd / c->n_head, s.F = c->ffn;
    s.E = c->n_experts, s.K = c->n_experts_tok, s.S = c->n_shared, s.Fm = c->moe_ffn, s.Fs = s.S * s.Fm;
    s.mla = c->kv_lora_rank > 0, s.qr = c->q_lora_rank, s.kvr = c->kv_lora_rank, s.rd = c->qk_rope_dim;
    s.nd = c->qk_nope_dim, s.vd = c->v_head_dim, s.qk = s.nd + s.rd;
    s.QW = s.H * s.qk, s.KVW = s.H * (s.nd + s.vd), s.AW = s.mla ? s.H * s.vd : s.C;
    s.QKVW = (s.H + 2 * s.KV) * s.hs;
    s.Ld = s.E ? c->first_dense : c->n_layer;
    s.cap = s.E ? mw_moe_capacity(s.N, s.K, s.E, c->capacity_factor) : 0;
    s.R = s.E ? mw_moe_rows(s.N, s.K, s.E, c->capacity_factor) : 0;
    /* Expert parallelism (a layout's cfg.ep = P ranks, E / P experts each): the all-to-all's shapes
     * are fixed by the capacity, so that the plan holds for any routing. From each of the P ranks
     * (this one included) this rank's experts receive at most min(N K, (E / P) cap) rows: at most
     * cap per expert, at most every token's K choices. Without a capacity factor cap is N. Its
     * experts' inputs, hidden and outputs (expert_in/gate_up/act/out, dexpert_in/out) have Rx rows;
     * the all-to-all's other side (ep_a2a, below) this rank's R. */
    s.Rx = s.R;
    if (s.E && c->ep > 1) {
        const long el = s.cap * (long)(s.E / c->ep), one = el < s.N * s.K ? el : s.N * s.K;
        s.Rx = one * c->ep;
    }
    return s;
}
/* A pipeline stage's blocks are numbered from 0 (src/graph/layout.c): block l is the model's
 * l + pp_first, or under the interleaved schedule (cfg.vpp chunks of Lc blocks) block l mod Lc of
 * the model's chunk (l / Lc) P + stage; dense when that is below first_dense. */
static int first_block(const mw_config *c) { return c->pp > 1 ? c->pp_first : 0; }
static int global_block(const mw_config *c, int l) {
    if (c->pp <= 1 || c->vpp <= 1) return l + first_block(c);
    const int Lc = c->n_layer / c->vpp;
    return (l / Lc * c->pp + c->pp_stage) * Lc + l % Lc;
}
static int is_moe(const mw_config *c, int l) { return c->n_experts > 0 && global_block(c, l) >= c->first_dense; }
/* The routed experts whose tensors this rank holds: all, or under expert parallelism (a layout's
 * cfg.ep = E) E_routed / E of them (the expert-parallel rank's; all such ranks hold as many) */
static int local_experts(const mw_config *c) { return c->ep > 1 ? c->n_experts / c->ep : c->n_experts; }
/* Mixtral's shape: Hugging Face's MixtralForCausalLM names its tensors */
static int mixtral(const mw_config *c) {
    return c->n_experts && !c->kv_lora_rank && !c->n_shared && !c->first_dense && !c->moe_gate && c->norm_topk &&
           c->routed_scale == 1.0;
}

/* ---- parameters --------------------------------------------------------------------------------
 * embed; per block: input norm, attention's tensors, post-attention norm, the MLP's (dense: gate,
 * up, down; mixture: router, V3's score bias, each expert's gate, up, down, the shared experts'
 * gate, up, down); final norm; the LM head when untied. */
typedef struct lay {
    int ln1, q, qa, qan, qb, k, v, kva, kvan, kvb, o, ln2, gate, up, down, router, rbias, e0, sg, su, sd;
} lay;

static int n_attn(const mw_config *c) { return c->kv_lora_rank ? (c->q_lora_rank ? 7 : 5) : 4; }
static int n_moe(const mw_config *c) { return 1 + (c->moe_gate == 1) + 3 * local_experts(c) + (c->n_shared ? 3 : 0); }
static int layer_base(const mw_config *c, int l) {
    const int fd = c->first_dense - first_block(c), Ld = !c->n_experts ? c->n_layer : fd > 0 ? fd : 0;
    int d = l < Ld ? l : Ld, m = l > Ld ? l - Ld : 0;
    if (c->pp > 1 && c->vpp > 1) { /* interleaved chunks: the stage's dense blocks are not its first */
        d = m = 0;
        for (int k = 0; k < l; k++) is_moe(c, k) ? m++ : d++;
    }
    return 1 + l * (2 + n_attn(c)) + 3 * d + m * n_moe(c);
}

int mw_deepseek_tensor_count(const mw_config *c) { return layer_base(c, c->n_layer) + 1 + !c->tied; }

static lay layer_of(const mw_config *c, int l) {
    lay t;
    memset(&t, 0xff, sizeof t); /* -1: not in this block */
    int i = layer_base(c, l);
    t.ln1 = i++;
    if (c->kv_lora_rank) {
        if (c->q_lora_rank) t.qa = i++, t.qan = i++, t.qb = i++;
        else t.q = i++;
        t.kva = i++, t.kvan = i++, t.kvb = i++, t.o = i++;
    } else {
        t.q = i++, t.k = i++, t.v = i++, t.o = i++;
    }
    t.ln2 = i++;
    if (!is_moe(c, l)) {
        t.gate = i++, t.up = i++, t.down = i++;
        return t;
    }
    t.router = i++;
    if (c->moe_gate == 1) t.rbias = i++;
    t.e0 = i, i += 3 * local_experts(c);
    if (c->n_shared) t.sg = i++, t.su = i++, t.sd = i++;
    return t;
}

/* split: how the tensor divides over --tp ranks (MW_TS_*; a block's tensors are its stage's) */
/* Appends s, or the decimal digits of v >= 0, at p, stopping at end: the names without snprintf,
 * which took a fifth of the strategy search's time on DeepSeek-V3 (its 256 experts a block). */
static char *put_str(char *p, char *end, const char *s) {
    while (*s && p < end) *p++ = *s++;
    return p;
}

static char *put_int(char *p, char *end, int v) {
    char d[12];
    int n = 0;
    do d[n++] = (char)('0' + v % 10), v /= 10;
    while (v > 0);
    while (n && p < end) *p++ = d[--n];
    return p;
}

static void add(mw_model *m, int l, const char *pre, const char *name, int r, int cols, int pad, int split) {
    char full[128]; /* every name fits the table's 64 at --layers 4096, --experts 4096 */
    char *p = put_str(full, full + sizeof full - 1, "model.layers.");
    p = put_str(put_int(p, full + sizeof full - 1, l), full + sizeof full - 1, ".");
    p = put_str(p, full + sizeof full - 1, pre);
    *put_str(p, full + sizeof full - 1, name) = 0;
    mw_graph_add_tensor_split(m, full, r, cols, cols != 0, pad, split, MW_AT_AUTO);
}

/* "experts.<e>.<what>" into nm (48 bytes) */
static const char *expert_name(char nm[48], int e, const char *what) {
    char *p = put_int(put_str(nm, nm + 47, "experts."), nm + 47, e);
    *put_str(p, nm + 47, what) = 0;
    return nm;
}

static mw_status build_table(mw_model *m) {
    const mw_config *c = &m->cfg;
    const shape s = shape_of(c);
    const int mx = mixtral(c);
    const size_t n = (size_t)layer_base(c, c->n_layer) + 2;
    /* tensor parallelism as Megatron-Core's (--tp T): a vocab-parallel embedding and head; column-
     * parallel q (or MLA's q_b), k, v, kv_b, gate and up (rows: output features), row-parallel o
     * and down (columns); MLA's down-projections q_a and kv_a duplicated (whole, as Megatron-Core's
     * linear_q/kv_down_proj), the norms and the router whole; the routed and shared experts split
     * as the dense MLP (expert tensor parallelism ETP = T, Megatron-Core's default) */
    enum { W_ = MW_TS_WHOLE, R_ = MW_TS_ROWS, C_ = MW_TS_COLS };
    m->tensors = calloc(n, sizeof(mw_tensor));
    if (!m->tensors) return mw_fail(MW_ERR_NOMEM, "cannot allocate the parameter table (%zu tensors)", n);
    mw_graph_add_tensor_split(m, "model.embed_tokens.weight", s.V, s.C, 1, 1, MW_TS_ROWS,
                              c->tied ? MW_AT_ENDS : MW_AT_AUTO);
    for (int l = 0; l < c->n_layer; l++) {
        mw_graph_block(m, l);
        add(m, l, "", "input_layernorm.weight", s.C, 0, 1, W_);
        if (s.mla) {
            if (s.qr) {
                add(m, l, "self_attn.", "q_a_proj.weight", s.qr, s.C, 1, W_);
                add(m, l, "self_attn.", "q_a_layernorm.weight", s.qr, 0, 1, W_);
                add(m, l, "self_attn.", "q_b_proj.weight", s.QW, s.qr, 1, R_);
            } else {
                add(m, l, "self_attn.", "q_proj.weight", s.QW, s.C, 1, R_);
            }
            add(m, l, "self_attn.", "kv_a_proj_with_mqa.weight", s.kvr + s.rd, s.C, 1, W_);
            add(m, l, "self_attn.", "kv_a_layernorm.weight", s.kvr, 0, 1, W_);
            add(m, l, "self_attn.", "kv_b_proj.weight", s.KVW, s.kvr, 1, R_);
            add(m, l, "self_attn.", "o_proj.weight", s.C, s.AW, 1, C_);
        } else { /* q|k|v back to back: one GEMM, as Llama's */
            add(m, l, "self_attn.", "q_proj.weight", s.H * s.hs, s.C, 0, R_);
            add(m, l, "self_attn.", "k_proj.weight", s.KV * s.hs, s.C, 0, R_);
            add(m, l, "self_attn.", "v_proj.weight", s.KV * s.hs, s.C, 1, R_);
            add(m, l, "self_attn.", "o_proj.weight", s.C, s.C, 1, C_);
        }
        add(m, l, "", "post_attention_layernorm.weight", s.C, 0, 1, W_);
        if (!is_moe(c, l)) {
            add(m, l, "mlp.", "gate_proj.weight", s.F, s.C, 1, R_);
            add(m, l, "mlp.", "up_proj.weight", s.F, s.C, 1, R_);
            add(m, l, "mlp.", "down_proj.weight", s.C, s.F, 1, C_);
            continue;
        }
        const char *pre = mx ? "block_sparse_moe." : "mlp.";
        add(m, l, pre, "gate.weight", s.E, s.C, 1, W_);
        if (c->moe_gate == 1) add(m, l, pre, "gate.e_score_correction_bias", s.E, 0, 1, W_);
        m->building_expert = 1;
        for (int e = 0; e < local_experts(c); e++) {
            char nm[48];
            add(m, l, pre, expert_name(nm, e, mx ? ".w1.weight" : ".gate_proj.weight"), s.Fm, s.C, 1, R_);
            add(m, l, pre, expert_name(nm, e, mx ? ".w3.weight" : ".up_proj.weight"), s.Fm, s.C, 1, R_);
            add(m, l, pre, expert_name(nm, e, mx ? ".w2.weight" : ".down_proj.weight"), s.C, s.Fm, 1, C_);
        }
        m->building_expert = 0;
        if (s.S) {
            add(m, l, "mlp.", "shared_experts.gate_proj.weight", s.Fs, s.C, 1, R_);
            add(m, l, "mlp.", "shared_experts.up_proj.weight", s.Fs, s.C, 1, R_);
            add(m, l, "mlp.", "shared_experts.down_proj.weight", s.C, s.Fs, 1, C_);
        }
    }
    mw_graph_block(m, -1);
    mw_graph_add_tensor(m, "model.norm.weight", s.C, 0, 0, 1);
    if (!c->tied) mw_graph_add_tensor_split(m, "lm_head.weight", s.V, s.C, 1, 1, MW_TS_ROWS, MW_AT_AUTO);
    return MW_OK;
}

/* ---- values and op kinds ------------------------------------------------------------------------ */

/* values of block l (X is its input); a block writes only those of its attention and MLP */
enum {
    X, LN1, LN1S, QKV, ATTY, LSE, RES2, LN2, LN2S, FCH, ACT,              /* Llama's */
    QA, QAN, QAS, QM, KVA, KVN, KVS, KVB,                                 /* latent attention */
    PROB, ROUTE, XE, EH, EA, EY, SFCH, SACT,                              /* mixture of experts */
    NLS
};
static const char *const lslot_names[NLS] = {
    "x", "ln1", "ln1_rstd", "qkv", "atty", "lse", "res2", "ln2", "ln2_rstd", "gate_up", "act",
    "q_a", "q_a_norm", "q_a_rstd", "q", "kv_a", "kv_a_norm", "kv_a_rstd", "kv_b|k_pe",
    "router_probs", "route", "expert_in", "expert_gate_up", "expert_act", "expert_out", "shared_gate_up", "shared_act"};
enum {
    G_IN, G_TGT, G_LNF, G_LNFS, G_LOGITS, G_LOSSES, G_DRES, G_DTMP, G_DQKV, G_ATTS, G_NORM,
    G_DKVB, G_DKVA, G_DQA, G_DEY, G_DXE, G_DW, G_A2A, G_DCHUNK, NGS
};
static const char *const gslot_names[NGS] = {"inputs", "targets", "lnf", "lnf_rstd", "logits", "losses", "dres",
                                             "dtmp", "dq", "att_scratch", "norm_parts", "dkv_b", "dkv_a", "dq_a",
                                             "dexpert_out", "dexpert_in", "droute", "ep_a2a", "fp32_chunk"};
/* how each value divides over tensor-parallel ranks (MW_VS_*), as the tensors above do: the heads'
 * values (q|k|v, MLA's q and, in lslot/gslot themselves, kv_b's per-head part), the MLPs' and the
 * experts' hidden values and the logits by --tp; the residual stream and the norms' by --tp under
 * --sp; MLA's latent values (the duplicated down-projections' outputs), the router's scores and
 * route, and the experts' inputs and outputs whole (every TP rank computes the same tokens' expert
 * rows; the row-parallel outputs are partial sums of the whole width) */
enum { WH = MW_VS_WHOLE, TP = MW_VS_TP, SQ = MW_VS_SEQ };
static const unsigned char lslot_split[NLS] = {SQ, SQ, SQ, TP, TP, TP, SQ, SQ, SQ, TP, TP, WH, WH, WH,
                                               TP, WH, WH, WH, WH, WH, WH, WH, TP, TP, WH, TP, TP};
static const unsigned char gslot_split[NGS] = {WH, WH, SQ, SQ, TP, WH, SQ, WH, TP, WH, WH, WH, WH, WH, WH, WH, WH, WH, TP};
static int tp_of(const mw_config *c) { return c->tp > 1 ? c->tp : 1; }
#define XN MW_SLOT_NEXT
#define GS MW_SLOT_STEP
enum { R = MW_R, W = MW_W, U = MW_U };
enum { P_NONE = MW_P_NONE, P_SEL = MW_P_SEL, P_FULL = MW_P_FULL };

enum {
    K_EMB, K_LN1QKV, K_ATTN, K_LN1, K_MLAQ, K_MLAKV, K_MLAATT, K_PROJ, K_LN2FC, K_SWIGLU, K_DOWN, K_LN2,
    K_ROUTE, K_LN2X, K_EFC, K_ESWIGLU, K_EDOWN, K_COMBINE, K_HEAD, K_LOGITS,
    K_BDOWN, K_BFC, K_BSDOWN, K_BEDOWN, K_BSFC, K_BEFC, K_BROUTE, K_BPROJ, K_BATTN, K_BQKV,
    K_BMLAATT, K_BMLAKV, K_BMLAQ, K_BLN1, K_EMBB, K_OPT, K_A2AD, K_A2AC, K_BA2AC, K_BA2AD, NKINDS
};
#define FWD MW_KF_FWD
static const mw_kind KINDS[NKINDS] = {
    [K_EMB] = {"embed", 3, {{GS(G_IN), W}, {GS(G_TGT), W}, {X, W}}, 0, 0},
    /* (bf16: q|k|v's product and rotation per MW_CHUNK_ROWS rows into the fp32 chunk, then rounded) */
    [K_LN1QKV] = {"norm+qkv+rope", 5, {{X, R}, {LN1, W}, {LN1S, W}, {QKV, W}, {GS(G_DCHUNK), W}}, FWD,
                  MW_COST_MATMUL},
    [K_ATTN] = {"attention", 4, {{QKV, R}, {ATTY, W}, {LSE, W}, {GS(G_ATTS), W}}, FWD, MW_COST_ATTN},
    [K_LN1] = {"attn norm", 3, {{X, R}, {LN1, W}, {LN1S, W}}, FWD, MW_COST_ELEM},
    /* (bf16: q's product and rotation, kv_b's and k_pe's, per MW_CHUNK_ROWS rows into the fp32
     * chunk, then rounded) */
    [K_MLAQ] = {"norm+mla q+rope", 8,
                {{X, R}, {LN1, W}, {LN1S, W}, {QA, W}, {QAN, W}, {QAS, W}, {QM, W}, {GS(G_DCHUNK), W}}, FWD,
                MW_COST_MATMUL},
    /* kv_b's output, then the rotated shared key k_pe (N x qk_rope_dim) after it */
    [K_MLAKV] = {"mla kv+rope", 6, {{LN1, R}, {KVA, W}, {KVN, W}, {KVS, W}, {KVB, W}, {GS(G_DCHUNK), W}}, FWD,
                 MW_COST_MATMUL},
    [K_MLAATT] = {"mla attention", 5, {{QM, R}, {KVB, R}, {ATTY, W}, {LSE, W}, {GS(G_ATTS), W}}, FWD, MW_COST_ATTN},
    [K_PROJ] = {"o proj", 3, {{X, R}, {ATTY, R}, {RES2, W}}, FWD, MW_COST_MATMUL},
    /* (bf16: the products per MW_CHUNK_ROWS rows into an fp32 chunk, then rounded into the value) */
    [K_LN2FC] = {"norm+gate+up", 5, {{RES2, R}, {LN2, W}, {LN2S, W}, {FCH, W}, {GS(G_DCHUNK), W}}, FWD,
                 MW_COST_MATMUL},
    [K_SWIGLU] = {"swiglu", 2, {{FCH, R}, {ACT, W}}, FWD, MW_COST_ELEM},
    [K_DOWN] = {"down proj", 3, {{RES2, R}, {ACT, R}, {XN, W}}, FWD, MW_COST_MATMUL},
    [K_LN2] = {"mlp norm", 3, {{RES2, R}, {LN2, W}, {LN2S, W}}, FWD, MW_COST_ELEM},
    [K_ROUTE] = {"norm+router+dispatch", 6, {{RES2, R}, {LN2, W}, {LN2S, W}, {PROB, W}, {ROUTE, W}, {XE, W}}, FWD,
                 MW_COST_ELEM},
    [K_LN2X] = {"mlp norm+dispatch", 5, {{RES2, R}, {ROUTE, R}, {LN2, W}, {LN2S, W}, {XE, W}}, FWD, MW_COST_ELEM},
    [K_EFC] = {"experts gate+up", 6, {{LN2, R}, {XE, R}, {ROUTE, R}, {EH, W}, {SFCH, W}, {GS(G_DCHUNK), W}}, FWD,
               MW_COST_MATMUL},
    [K_ESWIGLU] = {"experts swiglu", 5, {{EH, R}, {SFCH, R}, {ROUTE, R}, {EA, W}, {SACT, W}}, FWD, MW_COST_ELEM},
    [K_EDOWN] = {"experts down", 3, {{EA, R}, {ROUTE, R}, {EY, W}}, FWD, MW_COST_MATMUL},
    [K_COMBINE] = {"shared down+combine", 5, {{RES2, R}, {SACT, R}, {EY, R}, {ROUTE, R}, {XN, W}}, FWD,
                   MW_COST_MATMUL},
    [K_HEAD] = {"head+loss", 8,
                {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                 {GS(G_LOSSES), W}, {GS(G_DTMP), W}, {GS(G_DRES), W}}, 0, 0},
    [K_LOGITS] = {"head", 6,
                  {{X, R}, {GS(G_TGT), R}, {GS(G_LNF), W}, {GS(G_LNFS), W}, {GS(G_LOGITS), W},
                   {GS(G_LOSSES), W}}, 0, 0},
    /* d(act) over act (bf16: per chunk of rows in the fp32 chunk), then d(gate|up) over gate|up */
    [K_BDOWN] = {"down proj bwd", 4, {{FCH, U}, {ACT, U}, {GS(G_DRES), U}, {GS(G_DCHUNK), W}}, 0, 0},
    [K_BFC] = {"gate+up bwd", 6,
               {{LN2, R}, {LN2S, R}, {RES2, R}, {FCH, R}, {GS(G_DTMP), W}, {GS(G_DRES), U}}, 0, 0},
    [K_BSDOWN] = {"shared down bwd", 4, {{SFCH, U}, {SACT, U}, {GS(G_DRES), R}, {GS(G_DCHUNK), W}}, 0, 0},
    [K_BEDOWN] = {"experts down bwd", 8,
                  {{EH, U}, {EA, U}, {EY, R}, {ROUTE, R}, {GS(G_DRES), R}, {GS(G_DEY), W}, {GS(G_DW), W},
                   {GS(G_DCHUNK), W}}, 0, 0},
    [K_BSFC] = {"shared gate+up bwd", 3, {{LN2, R}, {SFCH, R}, {GS(G_DTMP), W}}, 0, 0},
    [K_BEFC] = {"experts gate+up bwd", 5, {{XE, R}, {EH, R}, {ROUTE, R}, {GS(G_DXE), W}, {GS(G_DTMP), U}}, 0, 0},
    [K_BROUTE] = {"router+norm bwd", 8,
                  {{LN2, R}, {LN2S, R}, {RES2, R}, {PROB, R}, {ROUTE, R}, {GS(G_DW), U}, {GS(G_DTMP), U},
                   {GS(G_DRES), U}}, 0, 0},
    [K_BPROJ] = {"o proj bwd", 3, {{ATTY, R}, {GS(G_DRES), U}, {GS(G_DTMP), W}}, 0, 0},
    [K_BATTN] = {"attention bwd", 6,
                 {{GS(G_DTMP), R}, {QKV, R}, {ATTY, R}, {LSE, R}, {GS(G_DQKV), W}, {GS(G_ATTS), W}}, 0, 0},
    [K_BQKV] = {"norm+qkv bwd", 6,
                {{GS(G_DQKV), R}, {LN1, R}, {LN1S, R}, {X, R}, {GS(G_DTMP), W}, {GS(G_DRES), U}}, 0, 0},
    [K_BMLAATT] = {"mla attention bwd", 8,
                   {{GS(G_DTMP), R}, {QM, R}, {KVB, R}, {ATTY, R}, {LSE, R}, {GS(G_DQKV), W}, {GS(G_DKVB), W},
                    {GS(G_ATTS), W}}, 0, 0},
    [K_BMLAKV] = {"mla kv bwd", 7,
                  {{GS(G_DKVB), R}, {KVN, R}, {KVS, R}, {KVA, R}, {LN1, R}, {GS(G_DKVA), W}, {GS(G_DTMP), W}}, 0, 0},
    [K_BMLAQ] = {"mla q bwd", 7,
                 {{GS(G_DQKV), R}, {QAN, R}, {QAS, R}, {QA, R}, {LN1, R}, {GS(G_DQA), W}, {GS(G_DTMP), U}}, 0, 0},
    [K_BLN1] = {"attn norm bwd", 4, {{GS(G_DTMP), R}, {LN1S, R}, {X, R}, {GS(G_DRES), U}}, 0, 0},
    [K_EMBB] = {"embed bwd", 2, {{GS(G_DRES), U}, {GS(G_IN), R}}, 0, 0},
    [K_OPT] = {"optimizer", 1, {{GS(G_NORM), W}}, 0, 0},
    /* Expert parallelism's all-to-alls (MW_KF_COMM: planned, no CPU kernel; src/graph/layout.c). Each
     * holds the side of the exchange that is not a value of the block, R rows x C (ep_a2a), for its
     * own op: the dispatch's send buffer beside the experts' input it fills; the combine's receive
     * buffer beside the experts' output it takes; backward, the gradients' mirror images. */
    [K_A2AD] = {"ep dispatch all-to-all", 2, {{XE, R}, {GS(G_A2A), W}}, MW_KF_COMM, 0},
    [K_A2AC] = {"ep combine all-to-all", 2, {{EY, R}, {GS(G_A2A), W}}, MW_KF_COMM, 0},
    [K_BA2AC] = {"ep combine all-to-all bwd", 2, {{GS(G_DRES), R}, {GS(G_A2A), W}}, MW_KF_COMM, 0},
    [K_BA2AD] = {"ep dispatch all-to-all bwd", 2, {{GS(G_DXE), R}, {GS(G_A2A), W}}, MW_KF_COMM, 0},
};

static void push_attn_forward(mw_model *m, int l) {
    if (m->cfg.kv_lora_rank) {
        mw_graph_push(m, K_MLAQ, l);
        mw_graph_push(m, K_MLAKV, l);
        mw_graph_push(m, K_MLAATT, l);
    } else {
        mw_graph_push(m, K_LN1QKV, l);
        mw_graph_push(m, K_ATTN, l);
    }
    mw_graph_push(m, K_PROJ, l);
}

static void push_block_forward(mw_model *m, int l, int with_output) {
    push_attn_forward(m, l);
    if (is_moe(&m->cfg, l)) {
        const int ep = m->cfg.ep > 1;
        mw_graph_push(m, K_ROUTE, l);
        if (ep) mw_graph_push(m, K_A2AD, l);
        mw_graph_push(m, K_EFC, l);
        mw_graph_push(m, K_ESWIGLU, l);
        mw_graph_push(m, K_EDOWN, l);
        if (ep) mw_graph_push(m, K_A2AC, l);
        if (with_output) mw_graph_push(m, K_COMBINE, l);
        return;
    }
    mw_graph_push(m, K_LN2FC, l);
    mw_graph_push(m, K_SWIGLU, l);
    if (with_output) mw_graph_push(m, K_DOWN, l);
}

/* The backward of block l under policy p: selective redoes both norms (with the experts'
 * dispatch) and the SwiGLUs; full the whole block but its output. */
static void push_block_backward(mw_model *m, int l, int p) {
    const int moe = is_moe(&m->cfg, l), ep = m->cfg.ep > 1;
    if (p == P_FULL) {
        push_attn_forward(m, l);
        if (moe) {
            mw_graph_push(m, K_ROUTE, l);
            if (ep) mw_graph_push(m, K_A2AD, l);
            mw_graph_push(m, K_EFC, l);
            mw_graph_push(m, K_ESWIGLU, l);
            mw_graph_push(m, K_EDOWN, l);
            if (ep) mw_graph_push(m, K_A2AC, l);
        } else {
            mw_graph_push(m, K_LN2FC, l);
        }
    }
    if (moe) {
        if (p == P_SEL) mw_graph_push(m, K_ESWIGLU, l);
        mw_graph_push(m, K_BSDOWN, l);
        if (ep) mw_graph_push(m, K_BA2AC, l);
        mw_graph_push(m, K_BEDOWN, l);
        if (p == P_SEL) mw_graph_push(m, K_LN2X, l);
        if (p == P_SEL && ep) mw_graph_push(m, K_A2AD, l); /* the dispatch redone */
        mw_graph_push(m, K_BSFC, l);
        mw_graph_push(m, K_BEFC, l);
        if (ep) mw_graph_push(m, K_BA2AD, l);
        mw_graph_push(m, K_BROUTE, l);
    } else {
        if (p != P_NONE) mw_graph_push(m, K_SWIGLU, l);
        mw_graph_push(m, K_BDOWN, l);
        if (p == P_SEL) mw_graph_push(m, K_LN2, l);
        mw_graph_push(m, K_BFC, l);
    }
    mw_graph_push(m, K_BPROJ, l);
    if (m->cfg.kv_lora_rank) {
        mw_graph_push(m, K_BMLAATT, l);
        if (p == P_SEL) mw_graph_push(m, K_LN1, l);
        mw_graph_push(m, K_BMLAKV, l);
        mw_graph_push(m, K_BMLAQ, l);
        mw_graph_push(m, K_BLN1, l);
    } else {
        mw_graph_push(m, K_BATTN, l);
        if (p == P_SEL) mw_graph_push(m, K_LN1, l);
        mw_graph_push(m, K_BQKV, l);
    }
}

/* ---- sizes ------------------------------------------------------------------------------------- */

#define F32 ((uint64_t)sizeof(float))
#define B16 mw_graph_b16
#define elt mw_graph_elt
static uint64_t att_scratch(const mw_model *m, const shape *s) {
    const uint64_t a = s->mla ? (B16(m) ? mw_mla_scratch_floats_b16(s->T, s->nd, s->rd, s->vd) : mw_mla_scratch_floats(s->T))
                              : mw_attention_scratch_floats_x(s->T, s->hs, B16(m));
    return (uint64_t)m->nthreads * a * F32;
}

/* bf16: the fp32 chunk the MLPs' and the experts' gate|up products and their d(act), and
 * attention's q|k|v (latent attention's q and kv_b output), pass through: MW_CHUNK_ROWS rows (of
 * the tokens or of an expert's) of the widest of those */
static uint64_t chunk_bytes(const shape *s) {
    const long rows = s->N > s->Rx ? s->N : s->Rx, crows = rows < MW_CHUNK_ROWS ? rows : MW_CHUNK_ROWS;
    const int w = s->F > s->Fm ? s->F : s->Fm, w2 = w > s->Fs ? w : s->Fs;
    const int att = s->mla ? (s->QW > s->KVW ? s->QW : s->KVW) : s->QKVW, cw = w2 > att ? w2 : att;
    return (uint64_t)crows * (uint64_t)cw * F32;
}

static void gslot(const mw_model *m, int g, uint64_t *bytes, mw_category *cat) {
    const mw_config *c = &m->cfg;
    const shape s = shape_of(c);
    const uint64_t N = s.N, C = s.C, V = s.V, rows = N < MW_LOSS_ROWS ? N : MW_LOSS_ROWS;
    const int keep = mw_graph_keeps_logits(c);
    const uint64_t wide = (uint64_t)(s.C > s.AW ? s.C : s.AW);
    const uint64_t gbytes[NGS] = {
        N * sizeof(int32_t), N * sizeof(int32_t), N * C * (B16(m) ? 2 : F32), N * F32, (keep ? N : rows) * V * F32, N * F32,
        N * C * F32, N * wide * F32, N * (uint64_t)(s.mla ? s.QW : s.QKVW) * F32, att_scratch(m, &s),
        (m->nfloats / MW_NORM_QUANTUM + 1) * sizeof(double),
        s.mla ? N * (((uint64_t)s.KVW + (uint64_t)s.H * s.rd) / (uint64_t)tp_of(c) + s.rd) * F32 : 0,
        s.mla ? 2 * N * s.kvr * F32 : 0,
        2 * N * (uint64_t)s.qr * F32, (uint64_t)s.Rx * C * F32, (uint64_t)s.Rx * C * F32,
        s.E ? N * (uint64_t)(s.K + s.E) * F32 : 0, (uint64_t)s.R * C * F32, B16(m) ? chunk_bytes(&s) : 0};
    *bytes = gbytes[g];
    *cat = g <= G_LNFS || (g == G_LOGITS && keep) ? MW_CAT_ACTS : MW_CAT_WORK;
}

static uint64_t lslot(const mw_model *m, int v) {
    const shape s = shape_of(&m->cfg);
    const uint64_t B = s.B, T = s.T, N = s.N, C = s.C, H = s.H, Rw = s.Rx, h = B16(m) ? 2 : F32;
    switch (v) {
    case X: case RES2: return N * C * F32;
    case LN1: case LN2: return N * C * h;
    case LN1S: case LN2S: case QAS: case KVS: return N * F32;
    case QKV: return s.mla ? 0 : N * (uint64_t)s.QKVW * h;
    case ATTY: return N * (uint64_t)s.AW * h;
    case LSE: return B * H * T * F32;
    case FCH: return 2 * N * (uint64_t)s.F * h;
    case ACT: return N * (uint64_t)s.F * h;
    case QA: return N * (uint64_t)s.qr * F32;
    case QAN: return N * (uint64_t)s.qr * h;
    case QM: return N * (uint64_t)s.QW * h;
    case KVA: return N * (uint64_t)s.kvr * F32;
    case KVN: return N * (uint64_t)s.kvr * h;
    case KVB: return N * (uint64_t)(s.KVW / tp_of(&m->cfg) + s.rd) * h; /* the heads' part divides under --tp */
    case PROB: return N * (uint64_t)s.E * F32;
    case ROUTE: return s.E ? mw_moe_route_words(s.N, s.K, s.E) * sizeof(int32_t) : 0;
    case XE: return Rw * C * h;
    case EY: return Rw * C * F32;
    case EH: return 2 * Rw * (uint64_t)s.Fm * h;
    case EA: return Rw * (uint64_t)s.Fm * h;
    case SFCH: return 2 * N * (uint64_t)s.Fs * h;
    case SACT: return N * (uint64_t)s.Fs * h;
    default: return 0;
    }
}

/* the rotary table (cos then sin, rows x D/2 each: seq positions, or ctx for decoding): D the head
 * size, or qk_rope_dim under latent attention; for inference the cache (grouped-query: keys and
 * values of the kv heads; latent attention: kv_b's output and the rotated shared key, per
 * position) and decoding's scratch */
enum { E_ROPE, E_KCACHE, E_VCACHE, E_DEC };
static int rope_dim(const mw_config *c) { return c->kv_lora_rank ? c->qk_rope_dim : c->n_embd / c->n_head; }
static uint64_t rope_rows(const mw_config *c) { return mw_graph_keeps_logits(c) ? c->ctx : c->seq; }
static uint64_t dec_floats(const shape *s, const mw_config *c) {
    const int q = s->QW > s->QKVW ? s->QW : s->QKVW, f = s->F > s->Fm ? s->F : s->Fm, g = f > s->Fs ? f : s->Fs;
    return 4 * (uint64_t)s->C + (uint64_t)q + s->qr + s->kvr + s->rd + s->AW + c->ctx + 3 * (uint64_t)g + s->E +
           mw_moe_route_words(1, s->K, s->E) + s->V + 8;
}

static int ext(const mw_model *m, mw_ext out[MW_MAX_EXT]) {
    const mw_config *c = &m->cfg;
    out[E_ROPE] = (mw_ext){"rope_table", rope_rows(c) * rope_dim(c) * F32, MW_CAT_WORK};
    if (!mw_graph_keeps_logits(c)) return 1;
    const shape s = shape_of(c);
    const uint64_t L = c->n_layer, CTX = c->ctx, kv = (uint64_t)s.KV * s.hs;
    out[E_KCACHE] = (mw_ext){"kcache", L * CTX * (s.mla ? (uint64_t)s.KVW : kv) * F32, MW_CAT_ACTS};
    out[E_VCACHE] = (mw_ext){"vcache", L * CTX * (s.mla ? (uint64_t)s.rd : kv) * F32, MW_CAT_ACTS};
    out[E_DEC] = (mw_ext){"decode", dec_floats(&s, c) * F32, MW_CAT_WORK};
    return 4;
}

static void bound(mw_model *m) {
    const int D = rope_dim(&m->cfg), rows = (int)rope_rows(&m->cfg);
    mw_rope_table(m->ext[E_ROPE], m->ext[E_ROPE] + (size_t)rows * D / 2, rows, D, (float)m->cfg.rope_theta);
}

static void init(mw_model *m, uint64_t seed) {
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (t->ndim == 1) { /* RMSNorm gains 1; V3's routing bias 0 */
            float *p = mw_graph_param_access(m, i, 1);
            if (!p) return; /* m->io_error says why */
            const float v = strstr(t->name, "e_score_correction_bias") ? 0.0f : 1.0f;
            for (size_t j = 0; j < t->numel; j++) p[j] = v;
        } else {
            mw_graph_fill_normal(m, i, seed, 0.02);
        }
    }
}

/* ---- the kernels of each op kind -------------------------------------------------------------- */

#define WS (&m->gw)
#define T_(w, i) mw_graph_tensor(m, (w), (i))
#define PW0(f) T_(0, t.f)
static float *expert(const mw_model *m, int which, const lay *t, int e, int k) { return T_(which, t->e0 + 3 * e + k); }

/* bf16: gate and up (rows x F) of x (rows x C, bfloat16) into gate16 and up16, each product per
 * MW_CHUNK_ROWS rows through the fp32 chunk and rounded (rows are independent: the same bits) */
static void gate_up_b16(mw_model *m, float *chunk, const void *x, uint16_t *gate16, uint16_t *up16, const float *wg,
                        const float *wu, int rows, int C, int F) {
    for (int n0 = 0; n0 < rows; n0 += MW_CHUNK_ROWS) {
        const int n = rows - n0 < MW_CHUNK_ROWS ? rows - n0 : MW_CHUNK_ROWS;
        const void *xr = elt((void *)x, (size_t)n0 * C, 1);
        mw_matmul_forward_x(chunk, xr, 1, wg, NULL, n, C, F, 0, WS);
        mw_bf16_store_mt(gate16 + (size_t)n0 * F, chunk, (size_t)n * F);
        mw_matmul_forward_x(chunk, xr, 1, wu, NULL, n, C, F, 0, WS);
        mw_bf16_store_mt(up16 + (size_t)n0 * F, chunk, (size_t)n * F);
    }
}

/* bf16: d(act) = dout (rows x C) @ w_down per MW_CHUNK_ROWS rows into the fp32 chunk, then
 * d(gate|up) over gate16|up16 (SwiGLU's backward read from them, stored as bfloat16) */
static void down_bwd_b16(mw_model *m, float *chunk, const float *dout, uint16_t *gate16, uint16_t *up16,
                         const float *wd, int rows, int F, int C) {
    for (int n0 = 0; n0 < rows; n0 += MW_CHUNK_ROWS) {
        const int n = rows - n0 < MW_CHUNK_ROWS ? rows - n0 : MW_CHUNK_ROWS;
        uint16_t *g = gate16 + (size_t)n0 * F, *u = up16 + (size_t)n0 * F;
        mw_matmul_backward_dinp(chunk, dout + (size_t)n0 * C, wd, n, F, C, WS);
        mw_swiglu_backward_x(g, u, 1, chunk, g, u, 1, (long)n * F);
    }
}

static void run_op(mw_model *m, int i, int train, float dloss, double *loss_sum) {
    const mw_config *c = &m->cfg;
    const shape s = shape_of(c);
    const int B = s.B, T = s.T, C = s.C, V = s.V, N = (int)s.N, H = s.H, L = c->n_layer, l = m->ops[i].layer;
    const float eps = (float)c->norm_eps;
    const float *cos_t = m->ext[E_ROPE], *sin_t = cos_t + (size_t)rope_rows(c) * rope_dim(c) / 2;
    void **P = m->opp + (size_t)i * MW_MAXACC;
#define A(k) ((float *)P[k])
    lay t;
    if (l >= 0 && l < L) t = layer_of(c, l);
    else memset(&t, 0xff, sizeof t);
#define PW(f) T_(0, t.f)
#define GW(f) T_(1, t.f)
    const int E = s.E, K = s.K, Fm = s.Fm, Fs = s.Fs;
    const size_t NF = (size_t)N * s.F;
    const int b16 = B16(m); /* the norms' outputs and the experts' inputs are bfloat16 (GEMMs' operands only) */
    mw_moe_route r = {0};
    switch (m->ops[i].kind) {
    case K_EMB:
        mw_embedding_forward(A(2), (const int32_t *)P[0], T_(0, 0), N, C);
        break;
    /* ---- grouped-query attention: Llama's ---- */
    case K_LN1QKV:
    case K_LN1:
        mw_rmsnorm_forward_x(P[1], b16, A(2), A(0), PW(ln1), N, C, eps);
        if (m->ops[i].kind == K_LN1) break;
        if (!b16) {
            mw_matmul_forward(A(3), A(1), PW(q), NULL, N, C, s.QKVW, 0, WS); /* q|k|v: one matrix */
            mw_rope_forward_inplace(A(3), s.QKVW, cos_t, sin_t, B, T, H, s.hs);
            mw_rope_forward_inplace(A(3) + (size_t)H * s.hs, s.QKVW, cos_t, sin_t, B, T, s.KV, s.hs);
            break;
        }
        for (int n0 = 0; n0 < N; n0 += MW_CHUNK_ROWS) { /* rows are independent: the same bits */
            const int rows = N - n0 < MW_CHUNK_ROWS ? N - n0 : MW_CHUNK_ROWS;
            mw_matmul_forward_x(A(4), elt(P[1], (size_t)n0 * C, 1), 1, PW(q), NULL, rows, C, s.QKVW, 0, WS);
            mw_rope_forward_rows(A(4), s.QKVW, cos_t, sin_t, n0, rows, T, H, s.hs);
            mw_rope_forward_rows(A(4) + (size_t)H * s.hs, s.QKVW, cos_t, sin_t, n0, rows, T, s.KV, s.hs);
            mw_bf16_store_mt((uint16_t *)P[3] + (size_t)n0 * s.QKVW, A(4), (size_t)rows * s.QKVW);
        }
        break;
    case K_ATTN:
        if (b16) mw_attention_forward_x(P[1], 1, A(2), A(3), m->nthreads, P[0], 1, B, T, H, s.KV, s.hs);
        else mw_attention_forward_gqa(A(1), A(2), A(3), m->nthreads, A(0), B, T, H, s.KV, s.hs);
        break;
    case K_BATTN:
        if (b16)
            mw_attention_backward_x(A(4), A(5), m->nthreads, A(0), P[1], 1, P[2], 1, A(3), B, T, H, s.KV, s.hs);
        else
            mw_attention_backward_gqa(A(4), A(5), m->nthreads, A(0), A(1), A(2), A(3), B, T, H, s.KV, s.hs);
        mw_rope_backward_inplace(A(4), s.QKVW, cos_t, sin_t, B, T, H, s.hs);
        mw_rope_backward_inplace(A(4) + (size_t)H * s.hs, s.QKVW, cos_t, sin_t, B, T, s.KV, s.hs);
        break;
    case K_BQKV:
        mw_matmul_backward_x(A(4), GW(q), NULL, A(0), 0, P[1], b16, PW(q), N, C, s.QKVW, 0, WS);
        mw_rmsnorm_backward_acc(A(5), GW(ln1), A(4), A(3), PW(ln1), A(2), N, C);
        break;
    /* ---- multi-head latent attention ---- */
    case K_MLAQ:
        mw_rmsnorm_forward_x(P[1], b16, A(2), A(0), PW(ln1), N, C, eps);
        if (s.qr) {
            mw_matmul_forward_x(A(3), P[1], b16, PW(qa), NULL, N, C, s.qr, 0, WS);
            mw_rmsnorm_forward_x(P[4], b16, A(5), A(3), PW(qan), N, s.qr, eps);
        }
        if (!b16) {
            if (s.qr) mw_matmul_forward(A(6), A(4), PW(qb), NULL, N, s.qr, s.QW, 0, WS);
            else mw_matmul_forward(A(6), A(1), PW(q), NULL, N, C, s.QW, 0, WS);
            mw_rope_interleaved(A(6) + s.nd, s.QW, s.qk, cos_t, sin_t, B, T, H, s.rd, 1);
            break;
        }
        for (int n0 = 0; n0 < N; n0 += MW_CHUNK_ROWS) { /* rows are independent: the same bits */
            const int rows = N - n0 < MW_CHUNK_ROWS ? N - n0 : MW_CHUNK_ROWS;
            if (s.qr) mw_matmul_forward_x(A(7), elt(P[4], (size_t)n0 * s.qr, 1), 1, PW(qb), NULL, rows, s.qr, s.QW, 0, WS);
            else mw_matmul_forward_x(A(7), elt(P[1], (size_t)n0 * C, 1), 1, PW(q), NULL, rows, C, s.QW, 0, WS);
            mw_rope_interleaved_rows(A(7) + s.nd, s.QW, s.qk, cos_t, sin_t, n0, rows, T, H, s.rd, 1);
            mw_bf16_store_mt((uint16_t *)P[6] + (size_t)n0 * s.QW, A(7), (size_t)rows * s.QW);
        }
        break;
    case K_MLAKV: { /* kv_a's first kvr rows make the latent, its last rd the shared key */
        mw_matmul_forward_x(A(1), P[0], b16, PW(kva), NULL, N, C, s.kvr, 0, WS);
        mw_rmsnorm_forward_x(P[2], b16, A(3), A(1), PW(kvan), N, s.kvr, eps);
        if (!b16) {
            float *kpe = A(4) + (size_t)N * s.KVW;
            mw_matmul_forward(A(4), A(2), PW(kvb), NULL, N, s.kvr, s.KVW, 0, WS);
            mw_matmul_forward(kpe, A(0), PW(kva) + (size_t)s.kvr * C, NULL, N, C, s.rd, 0, WS);
            mw_rope_interleaved(kpe, s.rd, s.rd, cos_t, sin_t, B, T, 1, s.rd, 1);
            break;
        }
        for (int n0 = 0; n0 < N; n0 += MW_CHUNK_ROWS) { /* rows are independent: the same bits */
            const int rows = N - n0 < MW_CHUNK_ROWS ? N - n0 : MW_CHUNK_ROWS;
            uint16_t *kvb = (uint16_t *)P[4];
            mw_matmul_forward_x(A(5), elt(P[2], (size_t)n0 * s.kvr, 1), 1, PW(kvb), NULL, rows, s.kvr, s.KVW, 0, WS);
            mw_bf16_store_mt(kvb + (size_t)n0 * s.KVW, A(5), (size_t)rows * s.KVW);
            mw_matmul_forward_x(A(5), elt(P[0], (size_t)n0 * C, 1), 1, PW(kva) + (size_t)s.kvr * C, NULL, rows, C, s.rd,
                                0, WS);
            mw_rope_interleaved_rows(A(5), s.rd, s.rd, cos_t, sin_t, n0, rows, T, 1, s.rd, 1);
            mw_bf16_store_mt(kvb + (size_t)N * s.KVW + (size_t)n0 * s.rd, A(5), (size_t)rows * s.rd);
        }
        break;
    }
    case K_MLAATT:
        if (b16) {
            mw_mla_forward_b16(P[2], A(3), A(4), m->nthreads, P[0], P[1], (uint16_t *)P[1] + (size_t)N * s.KVW, B, T, H,
                               s.nd, s.rd, s.vd);
            break;
        }
        mw_mla_forward(A(2), A(3), A(4), m->nthreads, A(0), A(1), A(1) + (size_t)N * s.KVW, B, T, H, s.nd, s.rd, s.vd);
        break;
    case K_BMLAATT: { /* d(q), d(kv_b's output), d(k_pe) per head, then summed over heads */
        float *dkpe_h = A(6) + (size_t)N * s.KVW, *dkpe = dkpe_h + (size_t)N * H * s.rd;
        if (b16)
            mw_mla_backward_b16(A(5), A(6), dkpe_h, A(7), m->nthreads, A(0), P[1], P[2],
                                (uint16_t *)P[2] + (size_t)N * s.KVW, P[3], A(4), B, T, H, s.nd, s.rd, s.vd);
        else
            mw_mla_backward(A(5), A(6), dkpe_h, A(7), m->nthreads, A(0), A(1), A(2), A(2) + (size_t)N * s.KVW, A(3),
                        A(4), B, T, H, s.nd, s.rd, s.vd);
        mw_mla_kpe_reduce(dkpe, dkpe_h, N, H, s.rd);
        mw_rope_interleaved(A(5) + s.nd, s.QW, s.qk, cos_t, sin_t, B, T, H, s.rd, -1);
        mw_rope_interleaved(dkpe, s.rd, s.rd, cos_t, sin_t, B, T, 1, s.rd, -1);
        break;
    }
    case K_BMLAKV: { /* d(latent norm's output), d(latent), then d(ln1) from the latent and from k_pe */
        const float *dkpe = A(0) + (size_t)N * s.KVW + (size_t)N * H * s.rd;
        float *dkvn = A(5), *dkva = dkvn + (size_t)N * s.kvr;
        mw_matmul_backward_x(dkvn, GW(kvb), NULL, A(0), 0, P[1], b16, PW(kvb), N, s.kvr, s.KVW, 0, WS);
        memset(dkva, 0, sizeof(float) * (size_t)N * s.kvr);
        mw_rmsnorm_backward_acc(dkva, GW(kvan), dkvn, A(3), PW(kvan), A(2), N, s.kvr);
        mw_matmul_backward_x(A(6), GW(kva), NULL, dkva, 0, P[4], b16, PW(kva), N, C, s.kvr, 0, WS);
        mw_matmul_backward_x(A(6), GW(kva) + (size_t)s.kvr * C, NULL, dkpe, 0, P[4], b16, PW(kva) + (size_t)s.kvr * C,
                             N, C, s.rd, 1, WS);
        break;
    }
    case K_BMLAQ:
        if (s.qr) {
            float *dqan = A(5), *dqa = dqan + (size_t)N * s.qr;
            mw_matmul_backward_x(dqan, GW(qb), NULL, A(0), 0, P[1], b16, PW(qb), N, s.qr, s.QW, 0, WS);
            memset(dqa, 0, sizeof(float) * (size_t)N * s.qr);
            mw_rmsnorm_backward_acc(dqa, GW(qan), dqan, A(3), PW(qan), A(2), N, s.qr);
            mw_matmul_backward_x(A(6), GW(qa), NULL, dqa, 0, P[4], b16, PW(qa), N, C, s.qr, 1, WS);
        } else {
            mw_matmul_backward_x(A(6), GW(q), NULL, A(0), 0, P[4], b16, PW(q), N, C, s.QW, 1, WS);
        }
        break;
    case K_BLN1:
        mw_rmsnorm_backward_acc(A(3), GW(ln1), A(0), A(2), PW(ln1), A(1), N, C);
        break;
    /* ---- the output projection (width H x hs, or H x v_head_dim) ---- */
    case K_PROJ:
        mw_graph_copy(A(2), A(0), (size_t)N * C);
        mw_matmul_forward_x(A(2), P[1], b16, PW(o), NULL, N, s.AW, C, 1, WS);
        break;
    case K_BPROJ:
        mw_matmul_backward_x(A(2), GW(o), NULL, A(1), 0, P[0], b16, PW(o), N, s.AW, C, 0, WS);
        break;
    /* ---- the dense MLP: Llama's ---- */
    case K_LN2FC:
    case K_LN2:
        mw_rmsnorm_forward_x(P[1], b16, A(2), A(0), PW(ln2), N, C, eps);
        if (m->ops[i].kind == K_LN2) break;
        if (!b16) {
            mw_matmul_forward(A(3), A(1), PW(gate), NULL, N, C, s.F, 0, WS);
            mw_matmul_forward(A(3) + NF, A(1), PW(up), NULL, N, C, s.F, 0, WS);
            break;
        }
        gate_up_b16(m, A(4), P[1], (uint16_t *)P[3], (uint16_t *)P[3] + NF, PW(gate), PW(up), N, C, s.F);
        break;
    case K_SWIGLU:
        mw_swiglu_forward_x(P[1], b16, P[0], elt(P[0], NF, b16), b16, (long)NF);
        break;
    case K_DOWN:
        mw_graph_copy(A(2), A(0), (size_t)N * C);
        mw_matmul_forward_x(A(2), P[1], b16, PW(down), NULL, N, s.F, C, 1, WS);
        break;
    case K_BDOWN: /* dW from act; d(act) over act; d(gate|up) over gate|up */
        if (!b16) {
            mw_matmul_backward(NULL, GW(down), NULL, A(2), A(1), PW(down), N, s.F, C, 0, WS);
            mw_matmul_backward_dinp(A(1), A(2), PW(down), N, s.F, C, WS);
            mw_swiglu_backward(A(0), A(0) + NF, A(1), A(0), A(0) + NF, (long)NF);
            break;
        }
        mw_matmul_backward_x(NULL, GW(down), NULL, A(2), 0, P[1], 1, PW(down), N, s.F, C, 0, WS);
        down_bwd_b16(m, A(3), A(2), (uint16_t *)P[0], (uint16_t *)P[0] + NF, PW(down), N, s.F, C);
        break;
    case K_BFC:
        mw_matmul_backward_x(A(4), GW(gate), NULL, P[3], b16, P[0], b16, PW(gate), N, C, s.F, 0, WS);
        mw_matmul_backward_x(A(4), GW(up), NULL, elt(P[3], NF, b16), b16, P[0], b16, PW(up), N, C, s.F, 1, WS);
        mw_rmsnorm_backward_acc(A(5), GW(ln2), A(4), A(2), PW(ln2), A(1), N, C);
        break;
    /* ---- the mixture of experts ---- */
    case K_ROUTE:
        mw_rmsnorm_forward_x(P[1], b16, A(2), A(0), PW(ln2), N, C, eps);
        mw_matmul_forward_x(A(3), P[1], b16, PW(router), NULL, N, C, E, 0, WS);
        mw_moe_router_forward(A(3), P[4], c->moe_gate == 1 ? PW(rbias) : NULL, N, K, E, c->moe_gate, c->norm_topk,
                              (float)c->routed_scale, s.cap);
        mw_moe_dispatch(P[5], P[1], b16, P[4], N, K, E, C);
        break;
    case K_LN2X:
        mw_rmsnorm_forward_x(P[2], b16, A(3), A(0), PW(ln2), N, C, eps);
        mw_moe_dispatch(P[4], P[2], b16, P[1], N, K, E, C);
        break;
    case K_EFC:
        r = mw_moe_route_view(P[2], N, K, E);
        for (int e = 0; e < E; e++) { /* each expert's rows: one GEMM each for gate and up */
            const long o = r.off[e], n = r.cnt[e];
            if (!n) continue;
            const void *xe = elt(P[1], (size_t)o * C, b16);
            if (b16) {
                gate_up_b16(m, A(5), xe, (uint16_t *)P[3] + o * Fm, (uint16_t *)P[3] + (s.R + o) * Fm,
                            expert(m, 0, &t, e, 0), expert(m, 0, &t, e, 1), (int)n, C, Fm);
                continue;
            }
            mw_matmul_forward_x(A(3) + o * Fm, xe, b16, expert(m, 0, &t, e, 0), NULL, (int)n, C, Fm, 0, WS);
            mw_matmul_forward_x(A(3) + (s.R + o) * Fm, xe, b16, expert(m, 0, &t, e, 1), NULL, (int)n, C, Fm, 0, WS);
        }
        if (s.S && b16)
            gate_up_b16(m, A(5), P[0], (uint16_t *)P[4], (uint16_t *)P[4] + (size_t)N * Fs, PW(sg), PW(su), N, C, Fs);
        else if (s.S) {
            mw_matmul_forward_x(A(4), P[0], b16, PW(sg), NULL, N, C, Fs, 0, WS);
            mw_matmul_forward_x(A(4) + (size_t)N * Fs, P[0], b16, PW(su), NULL, N, C, Fs, 0, WS);
        }
        break;
    case K_ESWIGLU: {
        const long used = mw_moe_route_view(P[2], N, K, E).off[E]; /* rows past them hold nothing */
        mw_swiglu_forward_x(P[3], b16, P[0], elt(P[0], (size_t)s.R * Fm, b16), b16, used * Fm);
        if (s.S) mw_swiglu_forward_x(P[4], b16, P[1], elt(P[1], (size_t)N * Fs, b16), b16, (long)N * Fs);
        break;
    }
    case K_EDOWN:
        r = mw_moe_route_view(P[1], N, K, E);
        for (int e = 0; e < E; e++) {
            const long o = r.off[e], n = r.cnt[e];
            if (n)
                mw_matmul_forward_x(A(2) + o * C, elt(P[0], (size_t)o * Fm, b16), b16, expert(m, 0, &t, e, 2), NULL,
                                    (int)n, Fm, C, 0, WS);
        }
        break;
    case K_COMBINE:
        mw_graph_copy(A(4), A(0), (size_t)N * C);
        if (s.S) mw_matmul_forward_x(A(4), P[1], b16, PW(sd), NULL, N, Fs, C, 1, WS);
        mw_moe_combine(A(4), A(2), P[3], N, K, E, C);
        break;
    case K_BSDOWN: /* the shared experts' down: dW, d(act) over act, d(gate|up) over gate|up */
        if (!s.S) break;
        if (b16) {
            mw_matmul_backward_x(NULL, GW(sd), NULL, A(2), 0, P[1], 1, PW(sd), N, Fs, C, 0, WS);
            down_bwd_b16(m, A(3), A(2), (uint16_t *)P[0], (uint16_t *)P[0] + (size_t)N * Fs, PW(sd), N, Fs, C);
            break;
        }
        mw_matmul_backward(NULL, GW(sd), NULL, A(2), A(1), PW(sd), N, Fs, C, 0, WS);
        mw_matmul_backward_dinp(A(1), A(2), PW(sd), N, Fs, C, WS);
        mw_swiglu_backward(A(0), A(0) + (size_t)N * Fs, A(1), A(0), A(0) + (size_t)N * Fs, (long)N * Fs);
        break;
    case K_BEDOWN: { /* d(expert out) and d(weights); per expert dW, d(act) over act; d(gate|up) */
        r = mw_moe_route_view(P[3], N, K, E);
        mw_moe_combine_backward(A(5), A(6), A(4), A(2), P[3], N, K, E, C);
        for (int e = 0; e < E; e++) {
            const long o = r.off[e], n = r.cnt[e];
            if (!n) continue;
            if (b16) {
                mw_matmul_backward_x(NULL, expert(m, 1, &t, e, 2), NULL, A(5) + o * C, 0,
                                     (uint16_t *)P[1] + o * Fm, 1, expert(m, 0, &t, e, 2), (int)n, Fm, C, 0, WS);
                down_bwd_b16(m, A(7), A(5) + o * C, (uint16_t *)P[0] + o * Fm, (uint16_t *)P[0] + (s.R + o) * Fm,
                             expert(m, 0, &t, e, 2), (int)n, Fm, C);
                continue;
            }
            mw_matmul_backward(NULL, expert(m, 1, &t, e, 2), NULL, A(5) + o * C, A(1) + o * Fm, expert(m, 0, &t, e, 2),
                               (int)n, Fm, C, 0, WS);
            mw_matmul_backward_dinp(A(1) + o * Fm, A(5) + o * C, expert(m, 0, &t, e, 2), (int)n, Fm, C, WS);
        }
        const long used = r.off[E];
        if (!b16) mw_swiglu_backward(A(0), A(0) + s.R * Fm, A(1), A(0), A(0) + s.R * Fm, used * Fm);
        break;
    }
    case K_BSFC:
        if (!s.S) {
            memset(A(2), 0, sizeof(float) * (size_t)N * C);
            break;
        }
        mw_matmul_backward_x(A(2), GW(sg), NULL, P[1], b16, P[0], b16, PW(sg), N, C, Fs, 0, WS);
        mw_matmul_backward_x(A(2), GW(su), NULL, elt(P[1], (size_t)N * Fs, b16), b16, P[0], b16, PW(su), N, C, Fs, 1,
                             WS);
        break;
    case K_BEFC:
        r = mw_moe_route_view(P[2], N, K, E);
        for (int e = 0; e < E; e++) {
            const long o = r.off[e], n = r.cnt[e];
            if (!n) continue;
            const void *xe = elt(P[0], (size_t)o * C, b16);
            mw_matmul_backward_x(A(3) + o * C, expert(m, 1, &t, e, 0), NULL, elt(P[1], (size_t)o * Fm, b16), b16, xe,
                                 b16, expert(m, 0, &t, e, 0), (int)n, C, Fm, 0, WS);
            mw_matmul_backward_x(A(3) + o * C, expert(m, 1, &t, e, 1), NULL, elt(P[1], (size_t)(s.R + o) * Fm, b16),
                                 b16, xe, b16, expert(m, 0, &t, e, 1), (int)n, C, Fm, 1, WS);
        }
        mw_moe_dispatch_backward(A(4), A(3), P[2], N, K, E, C);
        break;
    case K_BROUTE: { /* d(logits) after d(weights), then the router's dW and d(ln2), then the norm */
        float *dl = A(5) + (size_t)N * K;
        mw_moe_router_backward(dl, A(5), A(3), P[4], N, K, E, c->moe_gate, c->norm_topk, (float)c->routed_scale);
        mw_matmul_backward_x(A(6), GW(router), NULL, dl, 0, P[0], b16, PW(router), N, C, E, 1, WS);
        mw_rmsnorm_backward_acc(A(7), GW(ln2), A(6), A(2), PW(ln2), A(1), N, C);
        break;
    }
    /* ---- the head ---- */
    case K_HEAD:
    case K_LOGITS: {
        const int kind = m->ops[i].kind, has_tg = m->has_targets, keep = mw_graph_keeps_logits(c);
        const int32_t *tg = (const int32_t *)P[1];
        void *lnf = P[2];
        float *rstd = A(3), *logits = A(4), *losses = A(5);
        const float *x = A(0), *normf = T_(0, layer_base(c, L)), *wl = T_(0, c->tied ? 0 : layer_base(c, L) + 1);
        float *gl = T_(1, c->tied ? 0 : layer_base(c, L) + 1);
        mw_rmsnorm_forward_x(lnf, b16, rstd, x, normf, N, C, eps);
        const int grad = kind == K_HEAD && train;
        for (int n0 = 0; n0 < N; n0 += MW_LOSS_ROWS) { /* positions in fixed quanta */
            const int rows = n0 + MW_LOSS_ROWS < N ? MW_LOSS_ROWS : N - n0;
            float *z = keep ? logits + (size_t)n0 * V : logits;
            mw_matmul_forward_x(z, elt(lnf, (size_t)n0 * C, b16), b16, wl, NULL, rows, C, V, 0, WS);
            if (!has_tg) continue;
            mw_crossentropy(z, losses + n0, tg + n0, dloss, grad, rows, V);
            if (grad)
                mw_matmul_backward_x(A(6) + (size_t)n0 * C, gl, NULL, z, 0, elt(lnf, (size_t)n0 * C, b16), b16, wl, rows,
                                     C, V, 0, WS);
        }
        if (has_tg) {
            double sum = 0.0;
            for (int n = 0; n < N; n++) sum += losses[n];
            *loss_sum = sum;
        }
        if (grad) {
            memset(A(7), 0, sizeof(float) * (size_t)N * C);
            mw_rmsnorm_backward_acc(A(7), T_(1, layer_base(c, L)), A(6), x, normf, rstd, N, C);
        }
        break;
    }
    case K_EMBB:
        mw_embedding_backward(T_(1, 0), A(0), (const int32_t *)P[1], N, C);
        break;
    default:
        break;
    }
#undef A
#undef PW
#undef GW
}

/* ---- incremental decoding: one position through every block --------------------------------------
 * The cache holds, per block and position, grouped-query attention's keys and values of the kv
 * heads, or latent attention's kv_b output (each head's key part and value) and the rotated shared
 * key. A token's experts are its top-k, none dropped (one token never fills a capacity). */
/* bf16: decoding rounds the gate|up products as the forward stores them */
static void round_b16(const mw_model *m, float *v, int n) {
    if (B16(m))
        for (int k = 0; k < n; k++) v[k] = mw_bf16_round(v[k]);
}

static const float *decode(mw_model *m, int32_t token, int pos) {
    const mw_config *c = &m->cfg;
    const shape s = shape_of(c);
    const int C = s.C, H = s.H, CTX = c->ctx, D = rope_dim(c);
    const float eps = (float)c->norm_eps;
    const float *cos_t = m->ext[E_ROPE], *sin_t = cos_t + (size_t)CTX * D / 2;
    const float *cp = cos_t + (size_t)pos * D / 2, *sp = sin_t + (size_t)pos * D / 2;
    const int qmax = s.QW > s.QKVW ? s.QW : s.QKVW, f = s.F > s.Fm ? s.F : s.Fm, g = f > s.Fs ? f : s.Fs;
    float *x = m->ext[E_DEC], *h = x + C, *eo = h + C, *ey = eo + C, *q = ey + C, *qa = q + qmax, *kva = qa + s.qr;
    float *y = kva + s.kvr + s.rd, *att = y + s.AW, *fc = att + CTX, *probs = fc + 3 * (size_t)g;
    void *route = probs + s.E;
    float *logits = probs + s.E + mw_moe_route_words(1, s.K, s.E), *rstd = logits + s.V;
    memcpy(x, T_(0, 0) + (size_t)token * C, sizeof(float) * C);
    for (int l = 0; l < c->n_layer; l++) {
        const lay t = layer_of(c, l);
        mw_rmsnorm_forward(h, rstd, x, PW0(ln1), 1, C, eps);
        if (!s.mla) { /* Llama's */
            const int KW = s.KV * s.hs;
            float *K = m->ext[E_KCACHE] + (size_t)l * CTX * KW, *V = m->ext[E_VCACHE] + (size_t)l * CTX * KW;
            mw_matmul_forward(q, h, PW0(q), NULL, 1, C, s.QKVW, 0, WS);
            mw_rope_forward_inplace(q, s.QKVW, cp, sp, 1, 1, H, s.hs);
            mw_rope_forward_inplace(q + (size_t)H * s.hs, s.QKVW, cp, sp, 1, 1, s.KV, s.hs);
            round_b16(m, q, s.QKVW); /* as the forward stores q|k|v: rotated, then rounded */
            memcpy(K + (size_t)pos * KW, q + (size_t)H * s.hs, sizeof(float) * KW);
            memcpy(V + (size_t)pos * KW, q + (size_t)(H + s.KV) * s.hs, sizeof(float) * KW);
            mw_attention_decode(y, q, K, V, KW, pos, H, s.KV, s.hs, att);
        } else { /* the latent's products for this position into the cache, then each head over it */
            float *kvc = m->ext[E_KCACHE] + (size_t)l * CTX * s.KVW, *kpc = m->ext[E_VCACHE] + (size_t)l * CTX * s.rd;
            if (s.qr) {
                mw_matmul_forward(qa, h, PW0(qa), NULL, 1, C, s.qr, 0, WS);
                mw_rmsnorm_forward(qa, rstd, qa, PW0(qan), 1, s.qr, eps);
                mw_matmul_forward(q, qa, PW0(qb), NULL, 1, s.qr, s.QW, 0, WS);
            } else {
                mw_matmul_forward(q, h, PW0(q), NULL, 1, C, s.QW, 0, WS);
            }
            mw_rope_interleaved(q + s.nd, s.QW, s.qk, cp, sp, 1, 1, H, s.rd, 1);
            round_b16(m, q, s.QW); /* as the forward stores q, kv_b's output and k_pe */
            mw_matmul_forward(kva, h, PW0(kva), NULL, 1, C, s.kvr + s.rd, 0, WS);
            mw_rmsnorm_forward(kva, rstd, kva, PW0(kvan), 1, s.kvr, eps);
            mw_matmul_forward(kvc + (size_t)pos * s.KVW, kva, PW0(kvb), NULL, 1, s.kvr, s.KVW, 0, WS);
            round_b16(m, kvc + (size_t)pos * s.KVW, s.KVW);
            memcpy(kpc + (size_t)pos * s.rd, kva + s.kvr, sizeof(float) * s.rd);
            mw_rope_interleaved(kpc + (size_t)pos * s.rd, s.rd, s.rd, cp, sp, 1, 1, 1, s.rd, 1);
            round_b16(m, kpc + (size_t)pos * s.rd, s.rd);
            const float sc = 1.0f / sqrtf((float)s.qk);
            for (int hd = 0; hd < H; hd++) {
                const float *qh = q + (size_t)hd * s.qk;
                float mx = -INFINITY, sum = 0.0f, *yh = y + (size_t)hd * s.vd;
                for (int j = 0; j <= pos; j++) {
                    const float *kn = kvc + (size_t)j * s.KVW + (size_t)hd * (s.nd + s.vd), *kp = kpc + (size_t)j * s.rd;
                    float d = 0.0f;
                    for (int i = 0; i < s.nd; i++) d += qh[i] * kn[i];
                    for (int i = 0; i < s.rd; i++) d += qh[s.nd + i] * kp[i];
                    att[j] = d * sc;
                    mx = att[j] > mx ? att[j] : mx;
                }
                for (int j = 0; j <= pos; j++) sum += att[j] = expf(att[j] - mx);
                for (int i = 0; i < s.vd; i++) yh[i] = 0.0f;
                for (int j = 0; j <= pos; j++) {
                    const float a = att[j] / sum, *v = kvc + (size_t)j * s.KVW + (size_t)hd * (s.nd + s.vd) + s.nd;
                    for (int i = 0; i < s.vd; i++) yh[i] += a * v[i];
                }
            }
        }
        mw_matmul_forward(x, y, PW0(o), NULL, 1, s.AW, C, 1, WS);
        mw_rmsnorm_forward(h, rstd, x, PW0(ln2), 1, C, eps);
        if (!is_moe(c, l)) {
            mw_matmul_forward(fc, h, PW0(gate), NULL, 1, C, s.F, 0, WS);
            mw_matmul_forward(fc + s.F, h, PW0(up), NULL, 1, C, s.F, 0, WS);
            round_b16(m, fc, 2 * s.F);
            mw_swiglu_forward(fc + 2 * (size_t)s.F, fc, fc + s.F, s.F);
            mw_matmul_forward(x, fc + 2 * (size_t)s.F, PW0(down), NULL, 1, s.F, C, 1, WS);
            continue;
        }
        mw_matmul_forward(probs, h, PW0(router), NULL, 1, C, s.E, 0, WS);
        mw_moe_router_forward(probs, route, c->moe_gate == 1 ? PW0(rbias) : NULL, 1, s.K, s.E, c->moe_gate,
                              c->norm_topk, (float)c->routed_scale, 1);
        memcpy(eo, x, sizeof(float) * C); /* the block's output: the residual, shared, routed, as combine */
        if (s.S) {
            mw_matmul_forward(fc, h, PW0(sg), NULL, 1, C, s.Fs, 0, WS);
            mw_matmul_forward(fc + s.Fs, h, PW0(su), NULL, 1, C, s.Fs, 0, WS);
            round_b16(m, fc, 2 * s.Fs);
            mw_swiglu_forward(fc + 2 * (size_t)s.Fs, fc, fc + s.Fs, s.Fs);
            mw_matmul_forward(eo, fc + 2 * (size_t)s.Fs, PW0(sd), NULL, 1, s.Fs, C, 1, WS);
        }
        const mw_moe_route r = mw_moe_route_view(route, 1, s.K, s.E);
        for (int k = 0; k < s.K; k++) {
            const int e = r.idx[k];
            mw_matmul_forward(fc, h, expert(m, 0, &t, e, 0), NULL, 1, C, s.Fm, 0, WS);
            mw_matmul_forward(fc + s.Fm, h, expert(m, 0, &t, e, 1), NULL, 1, C, s.Fm, 0, WS);
            round_b16(m, fc, 2 * s.Fm);
            mw_swiglu_forward(fc + 2 * (size_t)s.Fm, fc, fc + s.Fm, s.Fm);
            mw_matmul_forward(ey, fc + 2 * (size_t)s.Fm, expert(m, 0, &t, e, 2), NULL, 1, s.Fm, C, 0, WS);
            for (int i = 0; i < C; i++) eo[i] += r.w[k] * ey[i];
        }
        memcpy(x, eo, sizeof(float) * C);
    }
    mw_rmsnorm_forward(h, rstd, x, T_(0, layer_base(c, c->n_layer)), 1, C, eps);
    mw_matmul_forward(logits, h, T_(0, c->tied ? 0 : layer_base(c, c->n_layer) + 1), NULL, 1, C, s.V, 0, WS);
    return logits;
}

/* ---- --recompute auto's calibration model (mw_model_def.calib_config) --------------------------
 * recompute.c scaled the channels to C' = k->n_embd (the heads keep their size), ffn and the
 * key/value heads with them; here the experts' and the latents' widths scale with C' too, the
 * experts are capped at max(8, top-k) (every token still goes to top-k of them, so a token's
 * expert work is user's at C'), and with a mixture the first block is dense when user's first is,
 * the second a mixture. Both blocks are selective: a block's forward and its selective
 * recomputation then run every forward kind of both blocks (full recomputes only forward kinds). */
static int scaled(int v, const mw_config *user, const mw_config *k) {
    if (v <= 0) return v;
    const int r = (int)((double)v * k->n_embd / user->n_embd);
    return r < 1 ? 1 : r;
}

static void calib_config(const mw_config *user, mw_config *k) {
    k->moe_ffn = scaled(user->moe_ffn, user, k);
    k->q_lora_rank = scaled(user->q_lora_rank, user, k);
    k->kv_lora_rank = scaled(user->kv_lora_rank, user, k);
    if (user->n_experts) {
        const int cap = user->n_experts_tok > 8 ? user->n_experts_tok : 8;
        k->n_experts = user->n_experts < cap ? user->n_experts : cap;
        k->first_dense = user->first_dense > 0;
    } else {
        k->first_dense = user->first_dense < k->n_layer ? user->first_dense : k->n_layer;
    }
    snprintf(k->recompute_blocks, sizeof k->recompute_blocks, "ss");
}

const mw_model_def mw_arch_deepseek = {
    .name = "deepseek",
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
    .logits_acc = 4,
    .losses_acc = 5,
    .lslot_split = lslot_split,
    .gslot_split = gslot_split,
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
    .calib_config = calib_config,
};
