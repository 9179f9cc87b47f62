/* libFuzzer target: the Hugging Face JSON readers, each on the same bytes: config.json as
 * mw_hf_inspect parses it (mw_hf_config_parse: GPT-2, the Llama family and the deepseek family's
 * DeepseekV2/V3 and Mixtral, src/model/hf_deepseek.c) and
 * model.safetensors.index.json (mw_hf_index_parse). Must never crash, leak or read out of bounds.
 * An accepted config's shape fields (and a Mistral window) are 0 (not given) or positive and below
 * 2^30, a GPT-2 one's n_inner 0 or 4 x n_embd when both are given and its LayerNorm epsilon
 * in [0, 1), a Llama one's
 * RoPE theta and RMSNorm epsilon positive and finite; a deepseek-family one's shape positive, its
 * heads dividing the width in even heads, at most num_experts_per_tok <= n_routed_experts, the
 * dense blocks at most the layers, latent attention (DeepseekV2/V3) with an even rotary width, the
 * router's flags 0 or 1 and its scale positive and finite; an accepted index's names are sorted and
 * distinct, each with a shard among at most MW_HF_MAX_SHARDS plain file names. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mw_hf_config c;
    if (mw_hf_config_parse((const char *)data, size, "config.json", &c) == MW_OK) {
        const int v[9] = {c.n_layer, c.n_head, c.n_embd, c.vocab, c.ctx, c.n_kv_head, c.ffn, c.head_dim, c.sliding_window};
        for (int k = 0; k < 9; k++)
            if (v[k] < 0 || v[k] >= (1 << 30)) abort();
        if (c.arch == MW_ARCH_LLAMA && (!(c.rope_theta > 0) || !isfinite(c.rope_theta) || !(c.norm_eps > 0) ||
                                        !isfinite(c.norm_eps) || c.ctx < 1 || c.n_kv_head < 0 ||
                                        (c.n_head && c.n_kv_head && c.n_head % c.n_kv_head)))
            abort();
        if (c.arch == MW_ARCH_DEEPSEEK) {
            const int w[13] = {c.n_experts, c.n_experts_tok, c.n_shared, c.moe_ffn, c.first_dense, c.q_lora_rank,
                               c.kv_lora_rank, c.qk_rope_dim, c.qk_nope_dim, c.v_head_dim, c.mtp_layers, c.moe_gate,
                               c.norm_topk};
            for (int k = 0; k < 13; k++)
                if (w[k] < 0 || w[k] >= (1 << 30)) abort();
            if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.vocab < 1 || c.ctx < 1 || c.ffn < 1 ||
                c.n_kv_head < 1 || c.n_embd % c.n_head || c.n_embd / c.n_head % 2 || c.n_head % c.n_kv_head)
                abort();
            if (c.n_experts_tok > c.n_experts || c.first_dense > c.n_layer || c.moe_gate > 1 || c.norm_topk > 1 ||
                !(c.routed_scale > 0) || !isfinite(c.routed_scale) || !(c.rope_theta > 0) || !isfinite(c.rope_theta) ||
                !(c.norm_eps > 0) || !isfinite(c.norm_eps))
                abort();
            if (c.n_experts && c.moe_ffn < 1) abort();
            if (strcmp(c.model_type, "mixtral") != 0 && (c.kv_lora_rank < 1 || c.qk_rope_dim % 2 || c.v_head_dim < 1))
                abort();
        } else if (c.arch != MW_ARCH_LLAMA && c.arch != MW_ARCH_GPT2) {
            abort();
        }
        if (c.arch == MW_ARCH_GPT2 && ((c.ffn && c.n_embd && c.ffn != 4 * c.n_embd) || !(c.norm_eps >= 0 && c.norm_eps < 1)))
            abort();
    }
    mw_hf_index ix;
    if (mw_hf_index_parse((const char *)data, size, "index.json", &ix) == MW_OK) {
        if (ix.n < 1 || ix.nshards < 1 || ix.nshards > MW_HF_MAX_SHARDS) abort();
        for (int i = 0; i < ix.n; i++) {
            if (ix.shard[i] < 0 || ix.shard[i] >= ix.nshards) abort();
            if (i && strcmp(ix.name[i - 1], ix.name[i]) >= 0) abort();
        }
        for (int i = 0; i < ix.nshards; i++)
            if (!ix.shards[i][0] || strchr(ix.shards[i], '/')) abort();
        mw_hf_index_free(&ix);
    }
    return 0;
}
