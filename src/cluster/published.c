/* Textbook memory formulas (published.h says each one's source). Owns no state; calls only
 * src/core/status.h for error messages. */
#include "published.h"

#include <stddef.h>

#include "../core/status.h"

mw_status mw_published_zero_table1(double psi, double k, int nd, mw_published_zero *out) {
    if (!(psi > 0) || !(k >= 0) || nd < 1)
        return mw_fail(MW_ERR_ARG, "ZeRO Table 1 needs psi > 0, K >= 0 and N_d >= 1 (got %g, %g, %d)", psi, k,
                       nd);
    out->none = (2 + 2 + k) * psi;
    out->os = (2 + 2) * psi + k * psi / nd;
    out->os_g = 2 * psi + (2 + k) * psi / nd;
    out->os_g_p = (2 + 2 + k) * psi / nd;
    return MW_OK;
}

static double maxd(double a, double b) { return a > b ? a : b; }

mw_status mw_published_ds_zero2(uint64_t params, int gpus_per_node, int nodes, int offload_optimizer,
                                double buffer_factor, mw_published_ds *out) {
    if (!params || gpus_per_node < 1 || nodes < 1 || !(buffer_factor > 0))
        return mw_fail(MW_ERR_ARG, "DeepSpeed's ZeRO-2 estimate needs parameters, GPUs, nodes and a buffer factor > 0");
    double p = (double)params, total = (double)nodes * gpus_per_node;
    if (offload_optimizer) {
        out->gpu = (uint64_t)(2 * p);
        out->cpu = (uint64_t)(p * maxd(4 * total, 16) * buffer_factor);
    } else {
        out->gpu = (uint64_t)(4 * p) + (uint64_t)(16 * p / total);
        out->cpu = (uint64_t)(p * 4 * gpus_per_node * buffer_factor);
    }
    return MW_OK;
}

mw_status mw_published_ds_zero3(uint64_t params, uint64_t largest_layer, int gpus_per_node, int nodes,
                                int offload_optimizer, int offload_params, int zero_init,
                                double buffer_factor, mw_published_ds *out) {
    if (!params || gpus_per_node < 1 || nodes < 1 || !(buffer_factor > 0))
        return mw_fail(MW_ERR_ARG, "DeepSpeed's ZeRO-3 estimate needs parameters, GPUs, nodes and a buffer factor > 0");
    double p = (double)params, lp = (double)largest_layer, total = (double)nodes * gpus_per_node;
    double gpus_factor = 1.0 / nodes, layer_mem = 4 * lp;
    if (offload_optimizer) {
        if (offload_params) {
            out->gpu = (uint64_t)layer_mem;
            out->cpu = (uint64_t)(zero_init ? p * 18 * gpus_factor * buffer_factor
                                            : p * maxd(4.0 * gpus_per_node, 18 * gpus_factor) * buffer_factor);
        } else {
            out->gpu = (uint64_t)(layer_mem + (double)(uint64_t)(2 * p / total));
            out->cpu = (uint64_t)(zero_init ? p * 16 * gpus_factor * buffer_factor
                                            : p * maxd(4.0 * gpus_per_node, 16 * gpus_factor) * buffer_factor);
        }
    } else {
        out->gpu = (uint64_t)(layer_mem + (double)(uint64_t)(18 * p / total));
        out->cpu = (uint64_t)(zero_init ? lp * 4 * gpus_per_node * buffer_factor
                                        : p * 4 * gpus_per_node * buffer_factor);
    }
    return MW_OK;
}

static const char *const act_names[MW_ACT_NMODES] = {
    "no parallelism", "tensor parallel", "tensor + sequence parallel", "tensor parallel + selective",
    "tensor + sequence parallel + selective", "full recompute"};

const char *mw_published_act_mode_name(mw_published_act_mode m) {
    return (unsigned)m < MW_ACT_NMODES ? act_names[m] : "?";
}

mw_status mw_published_act_layer(double s, double b, double h, double a, double t, mw_published_act_mode m,
                                 double *bytes) {
    if (!(s >= 1) || !(b >= 1) || !(h >= 1) || !(a >= 1) || !(t >= 1) || (unsigned)m >= MW_ACT_NMODES)
        return mw_fail(MW_ERR_ARG, "Korthikanti's activation formula needs s, b, h, a, t >= 1 and a known mode");
    double sbh = s * b * h;
    switch (m) {
    case MW_ACT_NONE: *bytes = sbh * (34 + 5 * a * s / h); break;
    case MW_ACT_TP: *bytes = sbh * (10 + 24 / t + 5 * a * s / (h * t)); break;
    case MW_ACT_TP_SP: *bytes = sbh / t * (34 + 5 * a * s / h); break;
    case MW_ACT_TP_SELECTIVE: *bytes = sbh * (10 + 24 / t); break;
    case MW_ACT_TP_SP_SELECTIVE: *bytes = sbh / t * 34; break;
    default: *bytes = 2 * sbh; break;
    }
    return MW_OK;
}

/* Table 3 of Korthikanti et al. (heads, hidden, layers, TP, PP, GPUs). The 530B row is
 * Megatron-Turing NLG's shape, 175B GPT-3's. */
static const mw_published_korthikanti_cfg korthikanti[] = {
    {"22B", 64, 6144, 48, 8, 1, 8},
    {"175B", 96, 12288, 96, 8, 8, 64},
    {"530B", 128, 20480, 105, 8, 35, 280},
    {"1T", 160, 25600, 128, 8, 64, 512},
};

int mw_published_korthikanti_count(void) { return (int)(sizeof korthikanti / sizeof korthikanti[0]); }

const mw_published_korthikanti_cfg *mw_published_korthikanti(int i) {
    return i >= 0 && i < mw_published_korthikanti_count() ? &korthikanti[i] : NULL;
}

mw_status mw_published_megatron_bytes_per_param(int distributed_optimizer, int dp, double *bytes) {
    if (dp < 1) return mw_fail(MW_ERR_ARG, "Megatron's bytes per parameter need a data-parallel size >= 1");
    *bytes = distributed_optimizer ? 6 + 12.0 / dp : 18;
    return MW_OK;
}

mw_status mw_published_megatron_dense_layer(const mw_published_megatron_dense *c, uint64_t *params) {
    if (!c->hidden || !c->ffn || !c->heads || !c->groups || !c->kv_channels || c->heads % c->groups)
        return mw_fail(MW_ERR_ARG, "Megatron's layer count needs hidden, ffn, heads, kv groups dividing heads "
                                   "and kv_channels");
    uint64_t h = c->hidden, norm = c->rmsnorm ? 1 : 2;
    /* 2 h h (1 + g / a) (kv a / h) = 2 h kv (a + g): the q and o projections (a heads) and k and v
     * (g groups) of kv_channels each */
    uint64_t attn = 2 * h * c->kv_channels * (c->heads + c->groups);
    /* 2 h (ffn * 3/2 + norm) with SwiGLU = h (3 ffn + 2 norm) */
    uint64_t mlp = c->swiglu ? h * (3 * c->ffn + 2 * norm) : 2 * h * (c->ffn + norm);
    *params = attn + mlp;
    return MW_OK;
}

static uint64_t final_norm(const mw_published_megatron_dense *c) { return (c->rmsnorm ? 1 : 2) * c->hidden; }

mw_status mw_published_megatron_stages(const mw_published_megatron_dense *c, const int *layers, int pp,
                                       uint64_t *out) {
    if (pp < 1) return mw_fail(MW_ERR_ARG, "a pipeline needs at least one stage");
    uint64_t layer = 0, emb = c->vocab * c->hidden;
    MW_TRY(mw_published_megatron_dense_layer(c, &layer));
    for (int i = 0; i < pp; i++) {
        if (layers[i] < 0) return mw_fail(MW_ERR_ARG, "stage %d has %d layers", i, layers[i]);
        out[i] = (uint64_t)layers[i] * layer;
        if (i == 0) out[i] += emb;
        if (i == pp - 1) {
            out[i] += final_norm(c);
            /* an untied output matrix; or, tied, the copy the last stage keeps when pp > 1 */
            if (!c->tied_embeddings || pp > 1) out[i] += emb;
        }
    }
    return MW_OK;
}

mw_status mw_published_megatron_even_shard(const mw_published_megatron_dense *c, int layers, int pp,
                                           double *params) {
    if (pp < 1 || layers < 1) return mw_fail(MW_ERR_ARG, "Megatron's shard needs layers and stages >= 1");
    uint64_t layer = 0, emb = c->vocab * c->hidden;
    MW_TRY(mw_published_megatron_dense_layer(c, &layer));
    double block = (double)layers * (double)layer + (double)final_norm(c);
    *params = block / pp + (double)emb;
    if (!c->tied_embeddings && pp == 1) *params += (double)emb;
    return MW_OK;
}

mw_status mw_published_megatron_moe_states(const mw_published_megatron_moe *c,
                                           mw_published_megatron_moe_result *r) {
    if (c->layers < 1 || c->moe_freq < 1 || c->tp < 1 || c->pp < 1 || c->cp < 1 || c->dp < 1 || c->ep < 1 ||
        c->etp < 1 || !c->experts)
        return mw_fail(MW_ERR_ARG, "the MoE estimate needs layers, a layer frequency, experts and every "
                                   "parallel size >= 1");
    int world = c->tp * c->cp * c->dp * c->pp;
    if (world % (c->ep * c->etp * c->pp))
        return mw_fail(MW_ERR_ARG, "EP %d x ETP %d x PP %d does not divide the world of %d GPUs", c->ep, c->etp,
                       c->pp, world);
    int edp = world / (c->ep * c->etp * c->pp);
    const mw_published_megatron_dense *d = &c->dense;
    uint64_t dense_layer = 0, h = d->hidden, norm = d->rmsnorm ? 1 : 2;
    MW_TRY(mw_published_megatron_dense_layer(d, &dense_layer));
    uint64_t attn = 2 * h * d->kv_channels * (d->heads + d->groups);
    uint64_t gate = d->swiglu ? 3 : 2; /* matrices per FFN: up and down, and gate with SwiGLU */
    uint64_t shared = gate * h * c->shared_ffn;
    uint64_t expert = gate * h * c->moe_ffn;
    uint64_t nmoe = 0;
    for (int i = 0; i < c->layers; i++) nmoe += i % c->moe_freq == 0;
    uint64_t ndense = (uint64_t)c->layers - nmoe, emb = d->vocab * h;
    r->routed_params = nmoe * c->experts * expert;
    r->dense_params = ndense * dense_layer + nmoe * (attn + shared + 2 * h * norm) + final_norm(d) +
                      (d->tied_embeddings ? 1 : 2) * emb;
    /* with pp == 1, as the Bridge test has; for pp > 1 a stage's share is its own walk (next session) */
    r->dense_per_gpu = (double)r->dense_params / c->tp / c->pp;
    r->routed_per_gpu = (double)r->routed_params / ((double)c->ep * c->etp) / c->pp;
    r->dense_bytes_per_param = 6 + 12.0 / ((double)c->dp * c->cp);
    r->routed_bytes_per_param = 6 + 12.0 / edp;
    r->bytes = r->dense_per_gpu * r->dense_bytes_per_param + r->routed_per_gpu * r->routed_bytes_per_param;
    double legacy_bpp = 0;
    MW_TRY(mw_published_megatron_bytes_per_param(1, c->dp, &legacy_bpp));
    r->legacy_bytes = (double)(r->dense_params + r->routed_params) / c->tp / c->pp * legacy_bpp;
    return MW_OK;
}

const mw_published_mla_moe mw_published_deepseek_v3 = {
    .hidden = 7168,
    .heads = 128,
    .q_lora_rank = 1536,
    .kv_lora_rank = 512,
    .qk_head_dim = 128,
    .qk_rope_dim = 64,
    .v_head_dim = 128,
    .experts = 256,
    .moe_ffn = 2048,
    .shared_ffn = 2048,
};

uint64_t mw_published_mla_moe_layer_dense(const mw_published_mla_moe *c) {
    uint64_t h = c->hidden, a = c->heads;
    uint64_t q = c->q_lora_rank * (h + a * (c->qk_head_dim + c->qk_rope_dim) + 1);
    uint64_t kv = c->kv_lora_rank * (h + a * (c->qk_head_dim + c->v_head_dim) + 1);
    uint64_t attn = q + kv + h * c->qk_rope_dim + a * c->v_head_dim * h;
    return attn + 3 * h * c->shared_ffn + 2 * h; /* shared expert (SwiGLU) and the two RMSNorms */
}

uint64_t mw_published_mla_moe_expert(const mw_published_mla_moe *c) { return 3 * c->hidden * c->moe_ffn; }

mw_status mw_published_mcore_moe_states(const mw_published_mla_moe *c, int moe_layers, int ep, int dp,
                                        int edp, mw_published_mcore_states *out) {
    if (moe_layers < 1 || ep < 1 || dp < 1 || edp < 1 || c->experts % (uint64_t)ep)
        return mw_fail(MW_ERR_ARG, "the Megatron-Core estimate needs layers >= 1, EP dividing the %llu experts, "
                                   "DP and EDP >= 1",
                       (unsigned long long)c->experts);
    out->dense_params = (uint64_t)moe_layers * mw_published_mla_moe_layer_dense(c);
    out->expert_params = (uint64_t)moe_layers * (c->experts / (uint64_t)ep) * mw_published_mla_moe_expert(c);
    double all = (double)(out->dense_params + out->expert_params);
    out->weights_grads = 6 * all;
    out->master_optim = 12 * (double)out->expert_params / edp + 12 * (double)out->dense_params / dp;
    return MW_OK;
}

mw_status mw_published_mcore_moe_layer_acts(const mw_published_mla_moe *c, int seq, int micro_batch, int topk,
                                            mw_published_moe_layer_acts *out) {
    if (seq < 1 || micro_batch < 1 || topk < 1 || (uint64_t)topk > c->experts)
        return mw_fail(MW_ERR_ARG, "the activations need a sequence, a micro-batch and a top-k in 1..%llu",
                       (unsigned long long)c->experts);
    const double n = (double)seq * micro_batch, B = 2; /* tokens; bf16 bytes */
    const double h = (double)c->hidden, H = (double)c->heads, qk = (double)(c->qk_head_dim + c->qk_rope_dim);
    const double ln = n * h * B;                                              /* an RMSNorm's output (or input) */
    const double q = n * H * qk * B, k = q, v = n * H * c->v_head_dim * B;
    out->qkv = q + k + v;
    out->norms = 2 * ln + n * (double)(c->q_lora_rank + c->kv_lora_rank) * B;
    out->attn = 2 * ln                                                      /* input norm: in, out */
                + 2 * n * (double)(c->q_lora_rank + c->kv_lora_rank) * B     /* latents' norms: in, out */
                + out->qkv + v                                               /* q k v; output = o_proj in */
                + n * H * 4;                                                 /* log-sum-exp, fp32 */
    out->fc2_out = n * topk * h * B;
    out->moe = 2 * ln                                                       /* MLP norm: in, out */
               + n * topk * h * B                                           /* dispatched: fc1 in */
               + n * topk * 2.0 * c->moe_ffn * B                            /* fc1 out: SwiGLU in */
               + n * topk * (double)c->moe_ffn * B                          /* SwiGLU out: fc2 in */
               + out->fc2_out                                               /* fc2 out, for the probs */
               + n * 2.0 * c->shared_ffn * B + n * (double)c->shared_ffn * B; /* shared expert */
    return MW_OK;
}

int mw_published_interleaved_in_flight(int p, int v, int r, int m) {
    const int warm = v > 1 ? (p - r - 1) * 2 + (v - 1) * p : p - r - 1;
    return warm + 1 < m * v ? warm + 1 : m * v;
}
