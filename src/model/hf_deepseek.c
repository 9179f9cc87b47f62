/* The deepseek family's Hugging Face export (docs/moe.md): which architecture a shape is, its
 * tensor count, and the config.json text: DeepseekV2ForCausalLM (latent attention, softmax
 * router), DeepseekV3ForCausalLM (latent attention, sigmoid router with its bias) or
 * MixtralForCausalLM (grouped-query attention, softmax renormalised, no shared experts, no dense
 * block). src/model/hf.c writes the weights under the table's names, which are those
 * architectures' own. May call src/core and hf.h only. */
#include <stdio.h>
#include <string.h>

#include "../core/status.h"
#include "hf.h"

/* the architecture a deepseek-family shape exports as: 2 V2, 3 V3, 1 Mixtral; 0 none */
static int hf_arch(const mw_config *c) {
    if (c->kv_lora_rank) return c->n_experts && c->moe_gate == 1 ? 3 : 2;
    if (c->n_experts && !c->n_shared && !c->first_dense && !c->moe_gate && c->norm_topk && c->routed_scale == 1.0)
        return 1;
    return 0;
}

mw_status mw_hf_deepseek_exportable(const mw_config *c) {
    if (hf_arch(c)) return MW_OK;
    return mw_fail(MW_ERR_ARG,
                   "export: no Hugging Face architecture computes this deepseek-family shape (grouped-query attention "
                   "%s): DeepseekV2/V3 need latent attention (--kv-lora-rank), Mixtral a mixture in every block "
                   "(--first-dense 0) without shared experts, a softmax router renormalised, --routed-scale 1",
                   !c->n_experts ? "with a dense MLP only" : "with shared experts, dense first blocks, a sigmoid "
                                                             "router or unnormalised or scaled weights");
}

int mw_hf_deepseek_config_text(const mw_config *c, char *b, size_t n) {
    char theta[32], eps[32], scale[32];
    mw_hf_py_float(c->norm_eps, eps, sizeof eps);
    mw_hf_py_float(c->rope_theta, theta, sizeof theta);
    mw_hf_py_float(c->routed_scale > 0 ? c->routed_scale : 1.0, scale, sizeof scale);
    const int a = hf_arch(c);
    if (a == 1)
        return snprintf(b, n,
                        "{\n"
                        "  \"architectures\": [\n    \"MixtralForCausalLM\"\n  ],\n"
                        "  \"attention_dropout\": 0.0,\n"
                        "  \"bos_token_id\": null,\n"
                        "  \"eos_token_id\": null,\n"
                        "  \"head_dim\": %d,\n"
                        "  \"hidden_act\": \"silu\",\n"
                        "  \"hidden_size\": %d,\n"
                        "  \"initializer_range\": 0.02,\n"
                        "  \"intermediate_size\": %d,\n"
                        "  \"max_position_embeddings\": %d,\n"
                        "  \"model_type\": \"mixtral\",\n"
                        "  \"num_attention_heads\": %d,\n"
                        "  \"num_experts_per_tok\": %d,\n"
                        "  \"num_hidden_layers\": %d,\n"
                        "  \"num_key_value_heads\": %d,\n"
                        "  \"num_local_experts\": %d,\n"
                        "  \"output_router_logits\": false,\n"
                        "  \"rms_norm_eps\": %s,\n"
                        "  \"rope_theta\": %s,\n"
                        "  \"router_aux_loss_coef\": 0.0,\n"
                        "  \"sliding_window\": null,\n"
                        "  \"tie_word_embeddings\": %s,\n"
                        "  \"torch_dtype\": \"float32\",\n"
                        "  \"use_cache\": true,\n"
                        "  \"vocab_size\": %d\n"
                        "}\n",
                        c->n_embd / c->n_head, c->n_embd, c->moe_ffn, c->ctx, c->n_head, c->n_experts_tok, c->n_layer,
                        c->n_kv_head, c->n_experts, eps, theta, c->tied ? "true" : "false", c->vocab);
    char qr[16] = "null", routed[16] = "null";
    if (c->q_lora_rank) snprintf(qr, sizeof qr, "%d", c->q_lora_rank);
    if (c->n_experts) snprintf(routed, sizeof routed, "%d", c->n_experts);
    return snprintf(b, n,
                    "{\n"
                    "  \"architectures\": [\n    \"%s\"\n  ],\n"
                    "  \"attention_bias\": false,\n"
                    "  \"attention_dropout\": 0.0,\n"
                    "  \"aux_loss_alpha\": 0.0,\n"
                    "  \"bos_token_id\": null,\n"
                    "  \"eos_token_id\": null,\n"
                    "  \"first_k_dense_replace\": %d,\n"
                    "  \"hidden_act\": \"silu\",\n"
                    "  \"hidden_size\": %d,\n"
                    "  \"initializer_range\": 0.02,\n"
                    "  \"intermediate_size\": %d,\n"
                    "  \"kv_lora_rank\": %d,\n"
                    "  \"max_position_embeddings\": %d,\n"
                    "  \"model_type\": \"%s\",\n"
                    "  \"moe_intermediate_size\": %d,\n"
                    "  \"moe_layer_freq\": 1,\n"
                    "  \"n_group\": 1,\n"
                    "  \"n_routed_experts\": %s,\n"
                    "  \"n_shared_experts\": %d,\n"
                    "  \"norm_topk_prob\": %s,\n"
                    "  \"num_attention_heads\": %d,\n"
                    "  \"num_experts_per_tok\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n"
                    "  \"num_key_value_heads\": %d,\n"
                    "  \"pretraining_tp\": 1,\n"
                    "  \"q_lora_rank\": %s,\n"
                    "  \"qk_nope_head_dim\": %d,\n"
                    "  \"qk_rope_head_dim\": %d,\n"
                    "  \"rms_norm_eps\": %s,\n"
                    "  \"rope_scaling\": null,\n"
                    "  \"rope_theta\": %s,\n"
                    "  \"routed_scaling_factor\": %s,\n"
                    "  \"scoring_func\": \"%s\",\n"
                    "  \"seq_aux\": true,\n"
                    "  \"tie_word_embeddings\": %s,\n"
                    "  \"topk_group\": 1,\n"
                    "  \"topk_method\": \"%s\",\n"
                    "  \"torch_dtype\": \"float32\",\n"
                    "  \"use_cache\": true,\n"
                    "  \"v_head_dim\": %d,\n"
                    "  \"vocab_size\": %d\n"
                    "}\n",
                    a == 3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM", c->n_experts ? c->first_dense : 0,
                    c->n_embd, c->ffn, c->kv_lora_rank, c->ctx, a == 3 ? "deepseek_v3" : "deepseek_v2",
                    c->moe_ffn, routed, c->n_shared, c->norm_topk ? "true" : "false", c->n_head,
                    c->n_experts_tok, c->n_layer, c->n_head, qr, c->qk_nope_dim, c->qk_rope_dim, eps, theta, scale,
                    a == 3 ? "sigmoid" : "softmax", c->tied ? "true" : "false", a == 3 ? "noaux_tc" : "greedy",
                    c->v_head_dim, c->vocab);
}
