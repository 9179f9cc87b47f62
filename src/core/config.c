/* Model and training configuration (mw_config of include/memwall.h): defaults, presets, validation,
 * derived sizes, the names of its choices. Below the graph, which takes a configuration as its input;
 * it knows no model definition (src/graph/graph.h) and calls only src/core. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "../memory/chunks.h"

void mw_config_default(mw_config *c) {
    memset(c, 0, sizeof *c);
    mw_config_preset(c, "gpt2-tiny");
    c->batch = 4;
    c->seq = 64;
    c->accum = 1;
    c->steps = 100;
    c->warmup = 10;
    c->lr = 3e-4;
    c->min_lr_frac = 0.1;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->eps = 1e-8;
    c->weight_decay = 0.1;
    c->grad_clip = 1.0;
    c->optim = MW_OPTIM_ADAMW;
    mw_optim_defaults(c);
    c->seed = 1337;
    c->eval_every = 0;
    c->eval_batches = 8;
    c->save_every = 0;
    c->keep = 3;
}

const char *mw_arch_name(int arch) {
    return arch == MW_ARCH_GPT2 ? "gpt2" : arch == MW_ARCH_LLAMA ? "llama" : arch == MW_ARCH_DEEPSEEK ? "deepseek" : "?";
}

/* Published shapes: GPT-2 (OpenAI), SmolLM (HuggingFaceTB/SmolLM-*), TinyLlama-1.1B, Llama 2
 * 7B/70B and Llama 3 8B/70B (their config.json files); GPT-3 175B (Brown et al. 2020, Table 2.1:
 * 96 layers of 12288, 96 heads, a context of 2048, GPT-2's vocabulary: GPT-2's blocks at that
 * shape; its sparse attention layers are not modelled). The deepseek family's are in
 * deepseek_presets below. */
static const struct {
    const char *name;
    int arch, L, H, KV, C, F, V, ctx, tied;
    double theta;
} presets[] = {
    {"gpt2-tiny", MW_ARCH_GPT2, 4, 4, 0, 128, 0, 256, 256, 1, 0},
    {"gpt2", MW_ARCH_GPT2, 12, 12, 0, 768, 0, 50257, 1024, 1, 0},
    {"gpt2-medium", MW_ARCH_GPT2, 24, 16, 0, 1024, 0, 50257, 1024, 1, 0},
    {"gpt2-large", MW_ARCH_GPT2, 36, 20, 0, 1280, 0, 50257, 1024, 1, 0},
    {"gpt2-xl", MW_ARCH_GPT2, 48, 25, 0, 1600, 0, 50257, 1024, 1, 0},
    {"llama-tiny", MW_ARCH_LLAMA, 4, 4, 2, 128, 352, 256, 256, 0, 10000.0},
    {"smollm-135m", MW_ARCH_LLAMA, 30, 9, 3, 576, 1536, 49152, 2048, 1, 10000.0},
    {"smollm-360m", MW_ARCH_LLAMA, 32, 15, 5, 960, 2560, 49152, 2048, 1, 10000.0},
    {"smollm-1.7b", MW_ARCH_LLAMA, 24, 32, 32, 2048, 8192, 49152, 2048, 1, 10000.0},
    {"tinyllama-1.1b", MW_ARCH_LLAMA, 22, 32, 4, 2048, 5632, 32000, 2048, 0, 10000.0},
    {"llama2-7b", MW_ARCH_LLAMA, 32, 32, 32, 4096, 11008, 32000, 4096, 0, 10000.0},
    {"llama3-8b", MW_ARCH_LLAMA, 32, 32, 8, 4096, 14336, 128256, 8192, 0, 500000.0},
    {"llama2-70b", MW_ARCH_LLAMA, 80, 64, 8, 8192, 28672, 32000, 4096, 0, 10000.0},
    {"llama3-70b", MW_ARCH_LLAMA, 80, 64, 8, 8192, 28672, 128256, 8192, 0, 500000.0},
    {"gpt3-175b", MW_ARCH_GPT2, 96, 96, 0, 12288, 0, 50257, 2048, 1, 0},
};

/* The deepseek family's presets, from the models' config.json: deepseek-ai/DeepSeek-V2-Lite,
 * deepseek-ai/DeepSeek-V3 (its 61 blocks; the multi-token-prediction module, layer 61 of the
 * published weights, 11.5B more, is not modelled), mistralai/Mixtral-8x7B-v0.1 (its
 * intermediate_size is the experts' width; no block is dense). Their YaRN rope scaling (both
 * DeepSeek models) and V3's group-limited routing (n_group 8, topk_group 4) change no shape; the
 * tiny ones are memwall's own, for tests. */
static const struct ds_preset {
    const char *name;
    int L, H, KV, C, F, V, ctx;
    double theta, eps;
    int E, k, S, Fm, first_dense, gate, norm_topk;
    double scale;
    int qr, kvr, rope, nope, vd;
} deepseek_presets[] = {
    {"moe-tiny", 4, 4, 2, 64, 176, 256, 256, 10000.0, 1e-5, 8, 2, 1, 32, 1, 0, 1, 1.0, 0, 0, 0, 0, 0},
    {"mla-tiny", 3, 4, 4, 64, 176, 256, 256, 10000.0, 1e-6, 0, 0, 0, 0, 0, 0, 0, 1.0, 32, 16, 8, 16, 16},
    {"deepseek-v2-lite", 27, 16, 16, 2048, 10944, 102400, 163840, 10000.0, 1e-6, 64, 6, 2, 1408, 1, 0, 0, 1.0, 0, 512,
     64, 128, 128},
    {"deepseek-v3", 61, 128, 128, 7168, 18432, 129280, 163840, 10000.0, 1e-6, 256, 8, 1, 2048, 3, 1, 1, 2.5, 1536,
     512, 64, 128, 128},
    {"mixtral-8x7b", 32, 32, 8, 4096, 14336, 32000, 32768, 1000000.0, 1e-5, 8, 2, 0, 14336, 0, 0, 1, 1.0, 0, 0, 0, 0,
     0},
};

/* the deepseek family's fields, 0 for the others */
static void moe_clear(mw_config *c) {
    c->n_experts = c->n_experts_tok = c->n_shared = c->moe_ffn = c->first_dense = c->moe_gate = c->norm_topk = 0;
    c->q_lora_rank = c->kv_lora_rank = c->qk_rope_dim = c->qk_nope_dim = c->v_head_dim = 0;
    c->capacity_factor = c->routed_scale = 0.0;
}

/* The Llama family's defaults for what --arch llama leaves unset: kv heads = heads, the MLP
 * width Llama's rule gives (2/3 of 4C, rounded up to a multiple of 256), theta 10000, eps 1e-5. */
void mw_config_arch_defaults(mw_config *c) {
    if (c->arch != MW_ARCH_DEEPSEEK) moe_clear(c);
    else if (c->routed_scale <= 0) {
        c->routed_scale = 1.0;
    }
    if (c->arch == MW_ARCH_GPT2) {
        c->n_kv_head = c->ffn = 0;
        c->tied = 1;
        c->rope_theta = c->norm_eps = 0.0;
        return;
    }
    if (c->n_kv_head <= 0) c->n_kv_head = c->n_head;
    if (c->ffn <= 0) c->ffn = (int)((8LL * c->n_embd / 3 + 255) / 256 * 256);
    if (c->rope_theta <= 0) c->rope_theta = 10000.0;
    if (c->norm_eps <= 0) c->norm_eps = 1e-5;
}

mw_status mw_config_preset(mw_config *c, const char *name) {
    for (size_t i = 0; i < sizeof deepseek_presets / sizeof deepseek_presets[0]; i++)
        if (strcmp(deepseek_presets[i].name, name) == 0) {
            const struct ds_preset *d = &deepseek_presets[i];
            c->arch = MW_ARCH_DEEPSEEK;
            c->n_layer = d->L, c->n_head = d->H, c->n_kv_head = d->KV, c->n_embd = d->C, c->ffn = d->F;
            c->vocab = d->V, c->ctx = d->ctx, c->tied = 0, c->rope_theta = d->theta, c->norm_eps = d->eps;
            c->n_experts = d->E, c->n_experts_tok = d->k, c->n_shared = d->S, c->moe_ffn = d->Fm;
            c->first_dense = d->first_dense, c->moe_gate = d->gate, c->norm_topk = d->norm_topk;
            c->routed_scale = d->scale, c->capacity_factor = 0.0;
            c->q_lora_rank = d->qr, c->kv_lora_rank = d->kvr, c->qk_rope_dim = d->rope, c->qk_nope_dim = d->nope;
            c->v_head_dim = d->vd;
            return MW_OK;
        }
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) {
            c->arch = presets[i].arch;
            c->n_layer = presets[i].L;
            c->n_head = presets[i].H;
            c->n_kv_head = presets[i].KV;
            c->n_embd = presets[i].C;
            c->ffn = presets[i].F;
            c->vocab = presets[i].V;
            c->ctx = presets[i].ctx;
            c->tied = presets[i].tied;
            c->rope_theta = presets[i].theta;
            c->norm_eps = presets[i].arch == MW_ARCH_LLAMA ? 1e-5 : 0.0;
            moe_clear(c);
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG,
                   "unknown preset '%s' (known: gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl, "
                   "llama-tiny, smollm-135m, smollm-360m, smollm-1.7b, tinyllama-1.1b, llama2-7b, "
                   "llama3-8b, llama2-70b, llama3-70b, gpt3-175b, moe-tiny, mla-tiny, deepseek-v2-lite, "
                   "deepseek-v3, mixtral-8x7b)",
                   name);
}

#define NEED(cond, ...)                                                                            \
    if (!(cond)) return mw_fail(MW_ERR_ARG, __VA_ARGS__)
/* the deepseek family's own fields (docs/moe.md) */
static mw_status validate_deepseek(const mw_config *c) {
    NEED(c->n_experts >= 0 && c->n_experts <= 4096, "--experts must be in 0..4096 (got %d)", c->n_experts);
    NEED(c->first_dense >= 0 && c->first_dense <= c->n_layer, "--first-dense must be in 0..--layers=%d (got %d)",
         c->n_layer, c->first_dense);
    if (c->n_experts) {
        NEED(c->n_experts_tok >= 1 && c->n_experts_tok <= c->n_experts,
             "--experts-per-tok must be in 1..--experts=%d (got %d)", c->n_experts, c->n_experts_tok);
        NEED(c->moe_ffn >= 1 && c->moe_ffn <= 1 << 20, "--moe-ffn must be in 1..1048576 (got %d)", c->moe_ffn);
        NEED(c->n_shared >= 0 && c->n_shared <= 64, "--shared-experts must be in 0..64 (got %d)", c->n_shared);
        NEED(c->moe_gate == 0 || c->moe_gate == 1, "--moe-gate must be softmax or sigmoid");
        NEED(c->norm_topk == 0 || c->norm_topk == 1, "--norm-topk must be 0 or 1 (got %d)", c->norm_topk);
        NEED(c->routed_scale > 0 && isfinite(c->routed_scale), "--routed-scale must be > 0");
        NEED(c->capacity_factor >= 0 && c->capacity_factor <= 1024 && isfinite(c->capacity_factor),
             "--capacity-factor must be in [0, 1024] (0: no cap)");
    } else {
        NEED(c->n_experts_tok == 0 && c->n_shared == 0 && c->moe_ffn == 0 && c->capacity_factor == 0,
             "--experts-per-tok, --shared-experts, --moe-ffn and --capacity-factor need --experts");
    }
    if (c->kv_lora_rank > 0) {
        NEED(c->kv_lora_rank <= 1 << 16 && c->q_lora_rank >= 0 && c->q_lora_rank <= 1 << 16,
             "--kv-lora-rank and --q-lora-rank must be in 1..65536 (--q-lora-rank 0: none)");
        NEED(c->qk_rope_dim >= 2 && c->qk_rope_dim % 2 == 0 && c->qk_rope_dim <= 1024,
             "--qk-rope-dim must be even, 2..1024 (got %d)", c->qk_rope_dim);
        NEED(c->qk_nope_dim >= 0 && c->qk_nope_dim <= 1024 && c->v_head_dim >= 1 && c->v_head_dim <= 1024,
             "--qk-nope-dim must be in 0..1024 and --v-head-dim in 1..1024");
    } else {
        NEED(c->kv_lora_rank == 0 && c->q_lora_rank == 0 && c->qk_rope_dim == 0 && c->qk_nope_dim == 0 &&
                 c->v_head_dim == 0,
             "--q-lora-rank, --qk-rope-dim, --qk-nope-dim and --v-head-dim are multi-head latent attention's: give "
             "--kv-lora-rank too");
    }
    { /* the parameter table's tensors (src/model/deepseek.c): at most 2^20 (DeepSeek-V3 has 45,395) */
        const double Ld = c->n_experts ? c->first_dense : c->n_layer, att = c->kv_lora_rank ? 7 : 4;
        const double moe = 5.0 + 3.0 * c->n_experts, n = 3 + c->n_layer * (2 + att) + 3 * Ld + (c->n_layer - Ld) * moe;
        NEED(n <= 1 << 20, "the model would have %.0f parameter tensors (--layers x 3 x --experts): at most 1048576", n);
    }
    return MW_OK;
}

/* The blocks of an --act-layers text (its tokens), or -1 when a token is not k, x or a with an optional
 * 8, 4 or 2. */
static int act_layers_count(const char *s) {
    int n = 0;
    for (const char *p = s;; n++) {
        if (*p != 'k' && *p != 'x' && *p != 'a') return -1;
        p++;
        if (*p == '8' || *p == '4' || *p == '2') p++;
        if (*p == 0) return n + 1;
        if (*p++ != ',') return -1;
    }
}

mw_status mw_config_validate(const mw_config *c) {
    NEED(c->arch >= 0 && c->arch < MW_ARCH_COUNT, "unknown model family %d", c->arch);
    if (c->arch == MW_ARCH_GPT2) {
        NEED(c->n_kv_head == 0 && c->ffn == 0,
             "--kv-heads and --ffn are for --arch llama (GPT-2's MLP is 4 x --dim)");
        NEED(c->norm_eps >= 0 && c->norm_eps < 1, "the LayerNorm epsilon must be in (0,1) (0: GPT-2's 1e-5)");
    } else {
        NEED(c->n_head >= 1 && c->n_kv_head >= 1 && c->n_head % c->n_kv_head == 0,
             "--heads (%d) must be a multiple of --kv-heads (%d)", c->n_head, c->n_kv_head);
        NEED(c->ffn >= 1 && c->ffn <= 1 << 20, "--ffn must be in 1..1048576 (got %d)", c->ffn);
        NEED(c->tied == 0 || c->tied == 1, "tied must be 0 or 1");
        NEED(c->rope_theta > 1 && isfinite(c->rope_theta), "--rope-theta must be > 1");
        NEED(c->norm_eps > 0 && c->norm_eps < 1, "the RMSNorm epsilon must be in (0,1)");
        NEED(c->n_head >= 1 && c->n_embd % c->n_head == 0 && c->n_embd / c->n_head % 2 == 0,
             "--dim / --heads (the head size) must be even for rotary embeddings");
    }
    if (c->arch == MW_ARCH_DEEPSEEK) MW_TRY(validate_deepseek(c));
    NEED(c->n_layer >= 1 && c->n_layer <= 4096, "--layers must be in 1..4096 (got %d)", c->n_layer);
    NEED(c->n_head >= 1, "--heads must be >= 1 (got %d)", c->n_head);
    NEED(c->n_embd >= 1 && c->n_embd <= 65536, "--dim must be in 1..65536 (got %d)", c->n_embd);
    NEED(c->n_embd % c->n_head == 0, "--dim (%d) must be a multiple of --heads (%d)", c->n_embd,
         c->n_head);
    NEED(c->vocab >= 2 && c->vocab <= (1 << 24), "--vocab must be in 2..16777216 (got %d)", c->vocab);
    NEED(c->ctx >= 1 && c->ctx <= (1 << 20), "--ctx must be in 1..1048576 (got %d)", c->ctx);
    NEED(c->seq >= 1 && c->seq <= c->ctx, "--seq must be in 1..ctx=%d (got %d)", c->ctx, c->seq);
    NEED(c->batch >= 1, "--batch must be >= 1 (got %d)", c->batch);
    NEED((double)c->batch * c->seq <= (1 << 24), "--batch x --seq must be at most 16777216");
    NEED(c->accum >= 1, "--accum must be >= 1 (got %d)", c->accum);
    NEED(c->steps >= 1, "--steps must be >= 1 (got %d)", c->steps);
    NEED(c->warmup >= 0, "--warmup must be >= 0 (got %d)", c->warmup);
    NEED(c->lr > 0 && isfinite(c->lr), "--lr must be > 0");
    NEED(c->min_lr_frac >= 0 && c->min_lr_frac <= 1, "--min-lr-frac must be in [0,1]");
    NEED(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1,
         "--beta1/--beta2 must be in [0,1)");
    NEED(c->eps > 0, "--eps must be > 0");
    NEED(c->optim >= 0 && c->optim < MW_OPTIM_COUNT, "unknown --optim %d", c->optim);
    NEED(c->precision >= 0 && c->precision < MW_PRECISION_COUNT, "unknown --precision %d", c->precision);
    NEED(c->beta3 >= 0 && c->beta3 < 1, "--beta3 must be in [0,1)");
    NEED(c->eps2 >= 0 && isfinite(c->eps2), "--eps2 must be >= 0");
    NEED(c->momentum >= 0 && c->momentum < 1, "--momentum must be in [0,1)");
    NEED(c->clip_threshold > 0 && isfinite(c->clip_threshold), "--clip-threshold must be > 0");
    NEED(c->decay_rate < 0 && c->decay_rate >= -1, "--decay-rate must be in [-1,0)");
    NEED(c->weight_decay >= 0 && isfinite(c->weight_decay), "--weight-decay must be >= 0");
    NEED(c->grad_clip >= 0 && isfinite(c->grad_clip), "--grad-clip must be >= 0 (0: off)");
    NEED(c->threads >= 0 && c->threads <= 1024, "--threads must be in 0..1024");
    NEED(c->eval_every >= 0 && c->eval_batches >= 1, "--eval-every must be >= 0, --eval-batches >= 1");
    NEED(c->save_every >= 0 && c->keep >= 1, "--save-every must be >= 0 and --keep >= 1");
    NEED(c->recompute != MW_RECOMPUTE_BLOCKS ||
             strnlen(c->recompute_blocks, sizeof c->recompute_blocks) < sizeof c->recompute_blocks,
         "--recompute blocks:... is not terminated");
    NEED(c->recompute != MW_RECOMPUTE_BLOCKS ||
             strspn(c->recompute_blocks, "nsf") == strnlen(c->recompute_blocks, sizeof c->recompute_blocks),
         "--recompute blocks:... takes the letters n, s and f only");
    NEED(c->recompute != MW_RECOMPUTE_BLOCKS || (int)strnlen(c->recompute_blocks, sizeof c->recompute_blocks) == c->n_layer,
         "--recompute blocks:... needs one letter per block: %d letters for %d blocks",
         (int)strnlen(c->recompute_blocks, sizeof c->recompute_blocks), c->n_layer);
    NEED(c->recompute >= MW_RECOMPUTE_NONE && c->recompute <= MW_RECOMPUTE_BLOCKS,
         "unknown --recompute policy %d", c->recompute);
    NEED(c->recompute_every >= 0 && c->recompute_every <= c->n_layer,
         "--recompute every:K needs K in 1..--layers=%d (got %d)", c->n_layer, c->recompute_every);
    NEED(c->inference >= 0 && c->inference <= MW_INFERENCE_EVAL, "unknown inference mode %d", c->inference);
    NEED(c->offload >= MW_OFFLOAD_NONE && c->offload < MW_OFFLOAD_COUNT, "unknown --offload mode %d", c->offload);
    NEED(strnlen(c->offload_dir, sizeof c->offload_dir) < sizeof c->offload_dir, "--offload-dir is not terminated");
    NEED(strnlen(c->offload_spec, sizeof c->offload_spec) < sizeof c->offload_spec, "--offload's form is not terminated");
    if (c->offload_spec[0] && !c->inference) { /* a chunk placement: its blocks against the model's */
        NEED(!c->dp && !mw_config_layout(c), "--offload %s under --zero/--tp/--pp: a chunk placement there is not built "
             "yet; give none, optimizer, optimizer+grads, all or auto", c->offload_spec);
        NEED(c->n_layer <= MW_MAX_BLOCK_POLICIES, "--offload %s: a chunk placement of more than %d blocks is not built",
             c->offload_spec, MW_MAX_BLOCK_POLICIES);
        unsigned char blk[MW_MAX_BLOCK_POLICIES];
        int widest;
        if (mw_chunks_parse(c->offload_spec, c->n_layer, blk, NULL, &widest) != MW_OK) return MW_ERR_ARG;
        (void)widest; /* the model's own (resident=K may keep every block) */
    }
    NEED(c->act_offload >= MW_ACT_OFFLOAD_NONE && c->act_offload < MW_ACT_OFFLOAD_COUNT, "unknown --act-offload mode %d",
         c->act_offload);
    NEED(c->act_compress == 0 || c->act_compress == 8 || c->act_compress == 4 || c->act_compress == 2,
         "--act-compress takes none, 8, 4 or 2 (got %d)", c->act_compress);
    NEED(!c->act_compress || c->precision == MW_PRECISION_FP32, "--act-compress with --precision %s: its kept values "
         "are bfloat16 already, and compressing them is not built yet", mw_precision_str(c->precision));
    NEED(!(c->act_offload || c->act_compress) || !mw_config_layout(c), "--act-offload and --act-compress with "
         "--tp/--pp/--ep: stored activations under a parallel layout are not planned yet");
    NEED(c->group_rows >= 0 && c->group_rows <= (1 << 24), "--group-rows takes 0 (1024) to 16777216 (got %d)", c->group_rows);
    NEED(c->act_compress_max == 0 || c->act_compress_max == 8 || c->act_compress_max == 4 || c->act_compress_max == 2,
         "--act-compress-max takes none, 8, 4 or 2 (got %d)", c->act_compress_max);
    NEED(!c->act_compress_max || !c->act_compress, "--act-compress-max with --act-compress: the one lets --recompute "
         "auto choose per block, the other compresses every block; give one");
    NEED(!c->act_compress_max || c->precision == MW_PRECISION_FP32, "--act-compress-max with --precision %s: its kept "
         "values are bfloat16 already, and compressing them is not built yet", mw_precision_str(c->precision));
    NEED(!c->act_compress_max || !mw_config_layout(c), "--act-compress-max with --tp/--pp/--ep: stored activations "
         "under a parallel layout are not planned yet");
    NEED(!c->act_compress_max || !c->dp, "--act-compress-max with --zero: the ranks agree on recompute-only auto's "
         "choice, not yet on widths per block (pin them on every rank with --act-layers)");
    NEED(strnlen(c->act_layers, sizeof c->act_layers) < sizeof c->act_layers, "--act-layers is not terminated");
    if (c->act_layers[0] && !c->inference) {
        const int nb = act_layers_count(c->act_layers);
        NEED(nb == c->n_layer, "--act-layers needs one token per block: %d for %d blocks", nb, c->n_layer);
        NEED(!c->act_offload && !c->act_compress && !c->act_compress_max, "--act-layers pins the choice per block: "
             "without --act-offload, --act-compress and --act-compress-max");
        NEED(!strpbrk(c->act_layers, "xa") || c->offload_dir[0], "--act-layers swaps (x, a) into the disk tier: give "
             "--offload-dir");
        NEED(!strpbrk(c->act_layers, "842") || c->precision == MW_PRECISION_FP32, "--act-layers compresses (8, 4, 2) "
             "with --precision %s: its kept values are bfloat16 already", mw_precision_str(c->precision));
        NEED(!mw_config_layout(c), "--act-layers with --tp/--pp/--ep: stored activations under a parallel layout are "
             "not planned yet");
    }
    NEED(c->recompute != MW_RECOMPUTE_AUTO || c->budget > 0 || c->inference,
         "--recompute auto chooses per block what fits --budget: give a --budget");
    if (c->dp) {
        NEED(c->world >= 1 && c->rank >= 0 && c->rank < c->world, "rank %d of a world of %d", c->rank, c->world);
        NEED(c->zero >= 0 && c->zero <= 3, "--zero takes a ZeRO stage, 0 to 3 (got %d)", c->zero);
        NEED(c->offload == MW_OFFLOAD_NONE || c->offload == MW_OFFLOAD_AUTO ||
                 (c->offload == MW_OFFLOAD_OPTIMIZER && c->zero >= 1),
             "--zero %d with --offload %s: under data parallelism the disk tier holds each rank's shard of the "
             "optimizer state (--zero 1 to 3 with --offload optimizer); gradients and parameters on disk are not built "
             "yet", c->zero, mw_offload_name(c->offload));
        NEED(c->precision == MW_PRECISION_FP32, "--zero with --precision %s: bfloat16 gradients under data "
             "parallelism are not built yet", mw_precision_str(c->precision));
    }
    NEED(c->vpp <= 1 || c->pp > 1, "--vpp interleaves a pipeline's stages: give --pp > 1");
    if (mw_config_layout(c)) { /* a parallel layout's rank (planned only) */
        const int T = c->tp > 1 ? c->tp : 1;
        NEED(c->tp >= 0 && c->pp >= 0 && c->ep >= 0 && (c->sp == 0 || c->sp == 1), "a layout's degrees must be >= 1");
        NEED(c->n_head % T == 0, "--tp %d must divide the heads (%d)", T, c->n_head);
        if (c->arch == MW_ARCH_GPT2) {
            NEED(4 * c->n_embd % T == 0, "--tp %d must divide the MLP's width 4 x --dim (%d)", T, 4 * c->n_embd);
        } else {
            NEED(c->n_kv_head % T == 0, "--tp %d must divide the key/value heads (%d)", T, c->n_kv_head);
            NEED(c->ffn % T == 0, "--tp %d must divide the MLP's width --ffn (%d)", T, c->ffn);
            NEED(c->moe_ffn % T == 0, "--tp %d must divide the experts' width --moe-ffn (%d)", T, c->moe_ffn);
        }
        NEED(!c->sp || T > 1, "--sp divides the norms' and the residual's values over the --tp ranks: give --tp > 1");
        NEED(!c->sp || (c->batch * c->seq) % T == 0, "--sp divides the batch's %d positions (--batch %d x --seq %d) over "
             "--tp %d ranks: give a multiple of %d", c->batch * c->seq, c->batch, c->seq, T, T);
        if (c->pp > 1) {
            NEED(c->pp_stage >= 0 && c->pp_stage < c->pp && c->pp_blocks >= 1 && c->pp_first >= 0 &&
                     c->pp_first + c->pp_blocks <= c->n_layer,
                 "pipeline stage %d of %d: blocks %d..%d outside the model's %d", c->pp_stage, c->pp,
                 c->pp_first, c->pp_first + c->pp_blocks - 1, c->n_layer);
        }
        NEED(c->vpp >= 0, "--vpp must be >= 1");
        if (c->vpp > 1) {
            NEED(c->pp > 1 && c->pp_blocks % c->vpp == 0 && c->pp_blocks * c->pp == c->n_layer,
                 "--vpp %d: each of the --pp stages' blocks must divide into %d chunks (an even split: --layers %d "
                 "divisible by --pp x --vpp)", c->vpp, c->vpp, c->n_layer);
            NEED(c->accum % c->pp == 0, "--vpp: the interleaved schedule runs micro-batches in groups of --pp %d: "
                 "--microbatches %d must be a multiple of it", c->pp, c->accum);
            NEED(c->recompute != MW_RECOMPUTE_BLOCKS, "--vpp with --recompute blocks:...: a stage's blocks are not "
                 "contiguous; give none, selective, full or every:K");
        }
        NEED(c->ep <= 1 || (c->arch == MW_ARCH_DEEPSEEK && c->n_experts > 0),
             "--ep %d: a %s model has no experts (expert parallelism needs a Mixture-of-Experts model)", c->ep,
             mw_arch_name(c->arch));
        NEED(c->ep <= 1 || c->n_experts % c->ep == 0, "--ep %d must divide the routed experts (%d)", c->ep,
             c->n_experts);
        NEED(c->ep <= 1 || !c->dp || c->world % c->ep == 0,
             "--ep %d must divide --dp (the expert-parallel groups lie inside the data-parallel one)", c->ep);
        NEED(!c->inference, "a parallel layout is planned for training only");
        NEED(c->offload == MW_OFFLOAD_NONE || c->ep <= 1,
             "--offload %s with --tp/--ep: the disk tier under that layout is not planned yet (a pipeline's stages "
             "run it, each into its own files)", mw_offload_name(c->offload));
        NEED(c->recompute != MW_RECOMPUTE_AUTO || (c->ep <= 1 && !(c->tp > 1 && c->pp > 1 && c->vpp > 1)),
             "--recompute auto with --%s: %s; give a policy (none, selective, full, every:K%s; --tp alone, with "
             "replicas, with --pp, and a pipeline's stages without --tp choose it)", c->ep > 1 ? "ep" : "tp, --pp and --vpp",
             c->ep > 1 ? "auto times the ops on this machine's whole model" : "a stage's ranks agree on a choice that "
             "blocks:... pins, and --vpp's stages hold blocks that are not contiguous", c->ep > 1 ? ", blocks:..." : "");
    }
#undef NEED
    return MW_OK;
}

/* the deepseek family: every parameter (active 0), or those one token passes through (1) */
static size_t deepseek_params(const mw_config *c, int active) {
    const size_t C = c->n_embd, H = c->n_head, V = c->vocab;
    size_t attn;
    if (c->kv_lora_rank > 0) {
        const size_t qk = (size_t)c->qk_nope_dim + c->qk_rope_dim, kvr = c->kv_lora_rank, qr = c->q_lora_rank;
        attn = (qr ? qr * C + qr + H * qk * qr : H * qk * C) + (kvr + c->qk_rope_dim) * C + kvr +
               H * ((size_t)c->qk_nope_dim + c->v_head_dim) * kvr + C * H * c->v_head_dim;
    } else {
        const size_t hs = C / H, KV = (size_t)c->n_kv_head * hs;
        attn = 2 * C * H * hs + 2 * KV * C;
    }
    const size_t E = c->n_experts, Fm = c->moe_ffn, expert = 3 * Fm * C;
    const size_t moe = (active ? (size_t)c->n_experts_tok : E) * expert + (size_t)c->n_shared * expert + E * C +
                       (c->moe_gate == 1 ? E : 0);
    const size_t dense = 3 * (size_t)c->ffn * C, Ld = E ? (size_t)c->first_dense : (size_t)c->n_layer;
    return V * C * (c->tied ? 1 : 2) + C + (size_t)c->n_layer * (2 * C + attn) + Ld * dense + (c->n_layer - Ld) * moe;
}

void mw_config_copy_family(mw_config *dst, const mw_config *src) {
    dst->n_experts = src->n_experts, dst->n_experts_tok = src->n_experts_tok, dst->n_shared = src->n_shared;
    dst->moe_ffn = src->moe_ffn, dst->first_dense = src->first_dense, dst->moe_gate = src->moe_gate;
    dst->norm_topk = src->norm_topk, dst->capacity_factor = src->capacity_factor, dst->routed_scale = src->routed_scale;
    dst->q_lora_rank = src->q_lora_rank, dst->kv_lora_rank = src->kv_lora_rank, dst->qk_rope_dim = src->qk_rope_dim;
    dst->qk_nope_dim = src->qk_nope_dim, dst->v_head_dim = src->v_head_dim;
}

size_t mw_config_active_params(const mw_config *c, int with_embed) {
    const size_t all = c->arch == MW_ARCH_DEEPSEEK ? deepseek_params(c, 1) : mw_config_num_params(c);
    return with_embed || c->tied ? all : all - (size_t)c->vocab * c->n_embd;
}

size_t mw_config_num_params(const mw_config *c) {
    size_t C = c->n_embd;
    if (c->arch == MW_ARCH_DEEPSEEK) return deepseek_params(c, 0);
    if (c->arch == MW_ARCH_LLAMA) {
        const size_t hs = C / c->n_head, KV = (size_t)c->n_kv_head * hs, F = c->ffn;
        return (size_t)c->vocab * C * (c->tied ? 1 : 2) + C +
               (size_t)c->n_layer * (2 * C + C * C * 2 + 2 * KV * C + 3 * F * C);
    }
    return (size_t)c->vocab * C + (size_t)c->ctx * C + (size_t)c->n_layer * (12 * C * C + 13 * C) +
           2 * C;
}

double mw_config_flops_per_token(const mw_config *c) {
    double C = c->n_embd, n_mm = c->n_layer * 12.0 * C * C + (double)c->vocab * C;
    if (c->arch == MW_ARCH_DEEPSEEK) /* the products a token passes through, attention's scores aside */
        return 6.0 * (double)(mw_config_active_params(c, 0) - (size_t)c->n_layer * 2 * c->n_embd) +
               12.0 * c->n_layer * c->n_head *
                   (c->kv_lora_rank ? (c->qk_nope_dim + c->qk_rope_dim + c->v_head_dim) / 2.0 : C / c->n_head) * c->seq;
    if (c->arch == MW_ARCH_LLAMA) {
        const double KV = (double)c->n_kv_head * (C / c->n_head), F = c->ffn;
        n_mm = c->n_layer * (2.0 * C * C + 2.0 * KV * C + 3.0 * F * C) + (double)c->vocab * C;
    }
    return 6.0 * n_mm + 12.0 * c->n_layer * C * c->seq;
}

int mw_set_threads(int threads) {
    if (threads <= 0) threads = omp_get_num_procs();
    omp_set_num_threads(threads);
    return threads;
}

double mw_lr_at(const mw_config *c, int s) {
    double max_lr = c->lr, min_lr = c->lr * c->min_lr_frac;
    if (s < c->warmup) return max_lr * (s + 1) / c->warmup;
    double p = c->steps > c->warmup ? (double)(s - c->warmup) / (c->steps - c->warmup) : 0.0;
    if (p > 1.0) p = 1.0;
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + cos(3.14159265358979323846 * p));
}

static const char *const OFFLOAD_NAMES[MW_OFFLOAD_COUNT] = {"none", "optimizer", "optimizer+grads", "all", "auto"};

const char *mw_offload_name(int offload) {
    return offload >= 0 && offload < MW_OFFLOAD_COUNT ? OFFLOAD_NAMES[offload] : "?";
}

mw_status mw_offload_parse(mw_config *c, const char *s) {
    for (int i = 0; i < MW_OFFLOAD_COUNT; i++)
        if (strcmp(s, OFFLOAD_NAMES[i]) == 0) {
            c->offload = i;
            memset(c->offload_spec, 0, sizeof c->offload_spec);
            return MW_OK;
        }
    if (mw_chunks_is_form(s)) { /* a chunk placement: its syntax now, its blocks when the model is known */
        int widest;
        if (strlen(s) >= sizeof c->offload_spec)
            return mw_fail(MW_ERR_ARG, "--offload %s: longer than %zu characters", s, sizeof c->offload_spec - 1);
        MW_TRY(mw_chunks_parse(s, -1, NULL, NULL, &widest));
        c->offload = widest;
        snprintf(c->offload_spec, sizeof c->offload_spec, "%s", widest == MW_OFFLOAD_NONE ? "" : s);
        return MW_OK;
    }
    return mw_fail(MW_ERR_ARG, "--offload must be none, optimizer, optimizer+grads, all, auto, MODE:resident=K or "
                               "params=R,grads=R,optim=R (R: all, none, embed, head, A-B or A, joined by +; got '%s')", s);
}

static const char *const ACT_OFFLOAD_NAMES[MW_ACT_OFFLOAD_COUNT] = {"none", "checkpoints", "all", "auto"};

const char *mw_act_offload_name(int mode) {
    return mode >= 0 && mode < MW_ACT_OFFLOAD_COUNT ? ACT_OFFLOAD_NAMES[mode] : "?";
}

mw_status mw_act_offload_parse(mw_config *c, const char *s) {
    for (int i = 0; i < MW_ACT_OFFLOAD_COUNT; i++)
        if (strcmp(s, ACT_OFFLOAD_NAMES[i]) == 0) {
            c->act_offload = i;
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG, "--act-offload must be none, checkpoints, all or auto (got '%s')", s);
}

mw_status mw_act_compress_parse(mw_config *c, const char *s) {
    static const char *const names[] = {"none", "8", "4", "2"};
    static const int bits[] = {0, 8, 4, 2};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            c->act_compress = bits[i];
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG, "--act-compress must be none, 8, 4 or 2 (bits per stored value; got '%s')", s);
}

mw_status mw_act_compress_max_parse(mw_config *c, const char *s) {
    static const char *const names[] = {"none", "8", "4", "2"};
    static const int bits[] = {0, 8, 4, 2};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            c->act_compress_max = bits[i];
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG, "--act-compress-max must be none, 8, 4 or 2 (the fewest bits --recompute auto may "
                               "store a kept value in; got '%s')", s);
}

void mw_act_layers_widths(const char *s, char *out, size_t n) {
    size_t u = 0;
    int any = 0;
    for (const char *p = s; *p && u + 3 < n; p++) {
        if (*p == 'x' || *p == 'a') out[u++] = 'k';
        else out[u++] = *p;
        any |= *p == '8' || *p == '4' || *p == '2';
    }
    out[any ? u : 0] = 0;
}

mw_status mw_act_layers_parse(mw_config *c, const char *s) {
    const size_t n = strlen(s);
    if (n >= sizeof c->act_layers || act_layers_count(s) < 1)
        return mw_fail(MW_ERR_ARG, "--act-layers takes one token per block, comma-separated: k (keep), x (swap the "
                                   "block input) or a (swap every kept value), each optionally followed by 8, 4 or 2 "
                                   "(compress at that width), e.g. x8,x8,k (got '%.40s')", s);
    memcpy(c->act_layers, s, n + 1);
    return MW_OK;
}

mw_status mw_recompute_parse(mw_config *c, const char *s) {
    static const char *names[] = {"none", "selective", "full", NULL, "auto"};
    for (int i = 0; i < 5; i++)
        if (names[i] && strcmp(s, names[i]) == 0) {
            c->recompute = i;
            c->recompute_every = 0;
            return MW_OK;
        }
    if (strncmp(s, "blocks:", 7) == 0) {
        const char *b = s + 7;
        size_t n = strlen(b);
        if (n < 1 || n > MW_MAX_BLOCK_POLICIES || strspn(b, "nsf") != n)
            return mw_fail(MW_ERR_ARG, "--recompute blocks: takes 1 to %d letters n, s or f, one per "
                                       "block (got '%s')", MW_MAX_BLOCK_POLICIES, b);
        c->recompute = MW_RECOMPUTE_BLOCKS;
        c->recompute_every = 0;
        memcpy(c->recompute_blocks, b, n + 1);
        return MW_OK;
    }
    if (strncmp(s, "every:", 6) == 0) {
        const char *k = s + 6;
        char *end;
        long v = strcmp(k, "sqrt") == 0 ? 0 : strtol(k, &end, 10);
        if (strcmp(k, "sqrt") == 0 || (*k >= '0' && *k <= '9' && *end == 0 && v >= 1 && v <= 4096)) {
            c->recompute = MW_RECOMPUTE_EVERY;
            c->recompute_every = (int)v;
            return MW_OK;
        }
    }
    return mw_fail(MW_ERR_ARG,
                   "--recompute must be none, selective, full, every:K (K >= 1), every:sqrt, auto or "
                   "blocks:LETTERS (got '%s')", s);
}

static const char *const PRECISION_NAMES[MW_PRECISION_COUNT] = {"fp32", "bf16"};

const char *mw_precision_str(int precision) {
    return precision >= 0 && precision < MW_PRECISION_COUNT ? PRECISION_NAMES[precision] : "?";
}

mw_status mw_precision_parse(mw_config *cfg, const char *s) {
    for (int i = 0; i < MW_PRECISION_COUNT; i++)
        if (s && strcmp(s, PRECISION_NAMES[i]) == 0) {
            cfg->precision = i;
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG, "--precision '%s': choose fp32 or bf16", s ? s : "");
}

static const char *const OPTIM_NAMES[MW_OPTIM_COUNT] = {"adamw", "adamw8bit", "adam4bit", "adafactor", "came", "sgd"};

const char *mw_optim_str(int optim) { return optim >= 0 && optim < MW_OPTIM_COUNT ? OPTIM_NAMES[optim] : "?"; }

mw_status mw_optim_parse(mw_config *cfg, const char *s) {
    for (int i = 0; i < MW_OPTIM_COUNT; i++)
        if (s && strcmp(s, OPTIM_NAMES[i]) == 0) {
            cfg->optim = i;
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG, "--optim '%s': choose adamw, adamw8bit, adam4bit, adafactor, came or sgd", s ? s : "");
}

void mw_optim_defaults(mw_config *c) {
    /* the Adam family: memwall's AdamW (GPT-style betas); the others: their papers' and reference
     * implementations' (docs/optimizers.md) */
    c->lr = 3e-4, c->beta1 = 0.9, c->beta2 = 0.95, c->eps = 1e-8, c->weight_decay = 0.1;
    c->beta3 = 0.9999, c->eps2 = 1e-16, c->momentum = 0.9, c->clip_threshold = 1.0, c->decay_rate = -0.8;
    switch (c->optim) {
    /* Adafactor without momentum steps by the whole normalised gradient each step, noisier than
     * Adam's averaged step: half AdamW's rate (bench/README.md: on the Brown benchmark, where
     * AdamW's is 2e-3, its best are 7e-4 to 1.4e-3, and 2e-3 is past a cliff) */
    case MW_OPTIM_ADAFACTOR: c->lr = 1.5e-4, c->beta1 = 0.0, c->eps = 1e-30, c->weight_decay = 0.0; break;
    /* CAME's authors (github.com/yangluo7/CAME, "Hyper-parameter Tuning"): 0.5-0.9x AdamW's rate,
     * beta1 and beta2 as AdamW's, beta3 in [0.99, 0.999] when those are 0.9/0.95 (0.995: their
     * Llama pre-training's). Its paper's 0.999/0.9999 suit long runs only: the confidence
     * statistics carry no bias correction, so steps are (1 - beta3^t)^-1/2 times too large:
     * with 0.9999 3.2x at step 1000, with 0.995 1.07x at step 400 */
    case MW_OPTIM_CAME:
        c->lr = 1.5e-4, c->beta1 = 0.9, c->beta2 = 0.95, c->beta3 = 0.995, c->eps = 1e-30, c->weight_decay = 0.0;
        break;
    /* SGD steps by lr times the (clipped) gradient, not by a normalised step as the Adam family and
     * the factored ones do, so their 3e-4 barely moves it: 0.1 with momentum 0.9 is the classic
     * recipe (He et al. 2016; torchvision's reference training). torch.optim.SGD has no default. */
    case MW_OPTIM_SGD: c->lr = 0.1, c->weight_decay = 0.0; break;
    default: break;
    }
}
