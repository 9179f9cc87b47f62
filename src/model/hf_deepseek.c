/* The deepseek family's Hugging Face export and import (docs/moe.md, docs/hf.md): which
 * architecture a shape is, its tensor count, and the config.json text: DeepseekV2ForCausalLM
 * (latent attention, softmax router), DeepseekV3ForCausalLM (latent attention, sigmoid router with
 * its bias) or MixtralForCausalLM (grouped-query attention, softmax renormalised, no shared
 * experts, no dense block); and back: such a config.json parsed into the family's fields, and a
 * checkpoint's tensors checked against every tensor it implies. src/model/hf.c reads and writes
 * the weights under the table's names, which are those architectures' own. May call src/core and
 * hf.h only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
    /* the weights' normalisation where Hugging Face's codes disagree (see parse_deepseek) */
    if (hf_arch(c) == 2 && c->n_experts && c->norm_topk)
        return mw_fail(MW_ERR_ARG, "export: a latent-attention model with a softmax router exports as "
                                   "DeepseekV2ForCausalLM, whose norm_topk_prob true DeepSeek's code and transformers' "
                                   "compute differently (and neither as memwall's --norm-topk 1): train it with "
                                   "--norm-topk 0");
    if (hf_arch(c) == 3 && c->norm_topk && c->n_experts_tok == 1)
        return mw_fail(MW_ERR_ARG, "export: DeepseekV3ForCausalLM with norm_topk_prob true and one expert per token: "
                                   "DeepSeek's code then does not renormalise and transformers' does: train it with "
                                   "--norm-topk 0");
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

/* ---- import: config.json ----------------------------------------------------------------------
 * DeepseekV2/V3Config as DeepSeek's own code (trust_remote_code) and transformers' both compute
 * them, MixtralConfig as transformers'. A key that changes the function is implemented or refused
 * naming it; a key whose default differs between those codes must be given (memwall would
 * otherwise choose one of two functions in silence). */

/* key: present (null allowed) */
static mw_status present(const mw_json *j, const char *what, const char *key, const char *why) {
    if (mw_json_get(j, 0, key) < 0) return mw_fail(MW_ERR_FORMAT, "%s: %s is absent: %s", what, key, why);
    return MW_OK;
}

/* key: a positive integer below 2^30, required (not absent, not null) */
static mw_status req_int(const mw_json *j, const char *what, const char *key, int *dst) {
    *dst = 0;
    MW_TRY(mw_hf_json_int(j, what, key, dst));
    if (!*dst) return mw_fail(MW_ERR_FORMAT, "%s: %s is %s: the model's shape needs it", what, key,
                              mw_json_get(j, 0, key) < 0 ? "absent" : "null");
    return MW_OK;
}

/* key: absent or null leaves *dst; else an integer in 0..2^30 */
static mw_status get_count(const mw_json *j, const char *what, const char *key, int *dst) {
    const mw_json_node *x = mw_hf_json_given(j, key);
    if (!x) return MW_OK;
    if (x->type != MW_JSON_NUM || !x->is_int || x->i < 0 || x->i >= (1 << 30))
        return mw_fail(MW_ERR_FORMAT, "%s: %s is not an integer in 0..2^30", what, key);
    *dst = (int)x->i;
    return MW_OK;
}

/* key, when given, must be the integer ok (a message saying `does` otherwise) */
static mw_status want_int(const mw_json *j, const char *what, const char *key, int ok, const char *does) {
    const mw_json_node *x = mw_hf_json_given(j, key);
    char b[64];
    if (x && (x->type != MW_JSON_NUM || !x->is_int || x->i != ok))
        return mw_fail(MW_ERR_FORMAT, "%s: %s is %s: %s", what, key, mw_hf_json_value(x, b, sizeof b), does);
    return MW_OK;
}

static mw_status want_false(const mw_json *j, const char *what, const char *key, const char *does) {
    int v = 0;
    MW_TRY(mw_hf_json_bool(j, what, key, &v));
    return v ? mw_fail(MW_ERR_FORMAT, "%s: %s is true: %s", what, key, does) : MW_OK;
}

static mw_status parse_mixtral(const mw_json *j, const char *what, mw_hf_config *c) {
    c->n_experts = 8, c->n_experts_tok = 2, c->n_kv_head = 8, c->ctx = 4096 * 32; /* MixtralConfig's */
    c->rope_theta = 1e6, c->norm_eps = 1e-5;
    MW_TRY(req_int(j, what, "intermediate_size", &c->moe_ffn));
    static const char *const keys[] = {"num_local_experts", "num_experts_per_tok", "num_key_value_heads",
                                       "max_position_embeddings", "head_dim", "sliding_window"};
    int *dst[] = {&c->n_experts, &c->n_experts_tok, &c->n_kv_head, &c->ctx, &c->head_dim, &c->sliding_window};
    for (int k = 0; k < 6; k++) MW_TRY(mw_hf_json_int(j, what, keys[k], dst[k]));
    if (c->head_dim && c->head_dim * c->n_head != c->n_embd)
        return mw_fail(MW_ERR_FORMAT, "%s: head_dim is %d, not hidden_size / num_attention_heads = %d / %d", what,
                       c->head_dim, c->n_embd, c->n_head);
    if (c->n_head % c->n_kv_head)
        return mw_fail(MW_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", what,
                       c->n_head, c->n_kv_head);
    if (c->n_experts_tok > c->n_experts)
        return mw_fail(MW_ERR_FORMAT, "%s: num_experts_per_tok %d is more than num_local_experts %d", what,
                       c->n_experts_tok, c->n_experts);
    /* Mixtral's router: softmax over the experts, the top k renormalised, no scale, no shared
     * expert, every block a mixture (router_jitter_noise only perturbs training, as dropout) */
    c->ffn = c->moe_ffn, c->moe_gate = 0, c->norm_topk = 1, c->routed_scale = 1.0;
    return MW_OK;
}

static mw_status parse_deepseek(const mw_json *j, const char *what, mw_hf_config *c, int v3) {
    static const char *const DIFFER = "its default differs between DeepSeek's code and transformers': give it";
    c->rope_theta = 10000.0, c->norm_eps = 1e-6;
    MW_TRY(req_int(j, what, "max_position_embeddings", &c->ctx)); /* 2048 or 4096 by default */
    MW_TRY(want_false(j, what, "attention_bias", "memwall's latent attention has no biases"));
    MW_TRY(want_false(j, what, "mlp_bias", "memwall's MLPs have no biases"));
    static const char *const mla[] = {"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"};
    int *dst[] = {&c->kv_lora_rank, &c->qk_rope_dim, &c->qk_nope_dim, &c->v_head_dim};
    for (int k = 0; k < 4; k++) MW_TRY(req_int(j, what, mla[k], dst[k]));
    if (c->qk_rope_dim % 2)
        return mw_fail(MW_ERR_FORMAT, "%s: qk_rope_head_dim is %d: rotary embeddings need an even width", what,
                       c->qk_rope_dim);
    MW_TRY(present(j, what, "q_lora_rank", "null (q straight from the input) or the bottleneck: " "its default is 1536"));
    MW_TRY(mw_hf_json_int(j, what, "q_lora_rank", &c->q_lora_rank));
    c->n_kv_head = c->n_head; /* latent attention's keys and values have every head */
    MW_TRY(want_int(j, what, "num_key_value_heads", c->n_head,
                    "latent attention's keys and values have num_attention_heads heads"));
    MW_TRY(want_int(j, what, "head_dim", c->qk_rope_dim, "transformers' head_dim is the rotary width, qk_rope_head_dim"));
    int inter = 1;
    MW_TRY(mw_hf_json_bool(j, what, "rope_interleave", &inter));
    if (!inter)
        return mw_fail(MW_ERR_FORMAT, "%s: rope_interleave is false: memwall rotates DeepSeek's interleaved pairs "
                                      "(rope_interleave true)",
                       what);
    MW_TRY(present(j, what, "n_routed_experts", "null (every block dense) or the experts"));
    MW_TRY(mw_hf_json_int(j, what, "n_routed_experts", &c->n_experts));
    MW_TRY(mw_hf_json_int(j, what, "intermediate_size", &c->ffn));
    c->routed_scale = 1.0;
    if (!c->n_experts) { /* DeepseekV2MLP in every block: the routers' keys unread */
        if (v3)
            return mw_fail(MW_ERR_FORMAT, "%s: n_routed_experts is null: DeepseekV3ForCausalLM has a mixture in every "
                                          "block past first_k_dense_replace",
                           what);
        return c->ffn ? MW_OK : req_int(j, what, "intermediate_size", &c->ffn);
    }
    MW_TRY(req_int(j, what, "num_experts_per_tok", &c->n_experts_tok));
    MW_TRY(req_int(j, what, "moe_intermediate_size", &c->moe_ffn));
    MW_TRY(present(j, what, "n_shared_experts", DIFFER));
    MW_TRY(get_count(j, what, "n_shared_experts", &c->n_shared));
    MW_TRY(present(j, what, "first_k_dense_replace", DIFFER));
    MW_TRY(get_count(j, what, "first_k_dense_replace", &c->first_dense));
    MW_TRY(get_count(j, what, "num_nextn_predict_layers", &c->mtp_layers));
    MW_TRY(want_int(j, what, "moe_layer_freq", 1, "memwall's blocks past first_k_dense_replace are all mixtures"));
    if (c->n_experts_tok > c->n_experts)
        return mw_fail(MW_ERR_FORMAT, "%s: num_experts_per_tok %d is more than n_routed_experts %d", what,
                       c->n_experts_tok, c->n_experts);
    if (c->first_dense > c->n_layer)
        return mw_fail(MW_ERR_FORMAT, "%s: first_k_dense_replace %d is more than num_hidden_layers %d", what,
                       c->first_dense, c->n_layer);
    if (c->first_dense && !c->ffn) MW_TRY(req_int(j, what, "intermediate_size", &c->ffn));
    if (!c->ffn) c->ffn = c->moe_ffn; /* no dense block: unused */
    static const char *const soft[] = {"softmax"}, *const sig[] = {"sigmoid"};
    MW_TRY(mw_hf_json_want_str(j, what, "scoring_func", v3 ? sig : soft, 1,
                               v3 ? "DeepseekV3's router scores are sigmoids" : "DeepseekV2's router scores are a softmax"));
    static const char *const v2m[] = {"greedy", "gready", "group_limited_greedy"}, *const v3m[] = {"noaux_tc"};
    MW_TRY(mw_hf_json_want_str(j, what, "topk_method", v3 ? v3m : v2m, v3 ? 1 : 3,
                               v3 ? "memwall's sigmoid router chooses by score + bias (\"noaux_tc\")"
                                  : "memwall's router takes the top k of every expert (\"greedy\")"));
    int groups = 0, topk_group = 0;
    MW_TRY(mw_hf_json_int(j, what, "n_group", &groups));
    MW_TRY(mw_hf_json_int(j, what, "topk_group", &topk_group));
    if (groups > 1 && topk_group < groups)
        return mw_fail(MW_ERR_FORMAT, "%s: n_group is %d and topk_group %d: group-limited routing is not modelled "
                                      "(memwall's router takes the top k of every expert: n_group 1)",
                       what, groups, topk_group);
    if (v3) MW_TRY(present(j, what, "routed_scaling_factor", DIFFER));
    MW_TRY(mw_hf_json_num(j, what, "routed_scaling_factor", &c->routed_scale));
    int norm = 0;
    if (v3) MW_TRY(present(j, what, "norm_topk_prob", DIFFER));
    MW_TRY(mw_hf_json_bool(j, what, "norm_topk_prob", &norm));
    /* V2: DeepSeek's code renormalises the top k (k > 1) and then skips routed_scaling_factor,
     * transformers' never renormalises; V3 with k = 1: DeepSeek's code does not renormalise,
     * transformers' does. memwall computes what both agree on. */
    if (norm && !v3 && c->n_experts_tok > 1)
        return mw_fail(MW_ERR_FORMAT, "%s: norm_topk_prob is true: DeepSeek's DeepseekV2 code then renormalises the "
                                      "top-k weights and skips routed_scaling_factor, transformers' does neither: "
                                      "memwall takes norm_topk_prob false only",
                       what);
    if (norm && v3 && c->n_experts_tok == 1)
        return mw_fail(MW_ERR_FORMAT, "%s: norm_topk_prob is true with num_experts_per_tok 1: DeepSeek's code then "
                                      "does not renormalise and transformers' does",
                       what);
    c->moe_gate = v3, c->norm_topk = v3 && norm;
    return MW_OK;
}

mw_status mw_hf_deepseek_parse(const mw_json *j, const char *what, const char *type, mw_hf_config *c) {
    const int mx = strcmp(type, "mixtral") == 0, v3 = strcmp(type, "deepseek_v3") == 0;
    c->arch = MW_ARCH_DEEPSEEK;
    static const char *const keys[] = {"num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size"};
    int *dst[] = {&c->n_layer, &c->n_head, &c->n_embd, &c->vocab};
    for (int k = 0; k < 4; k++) MW_TRY(req_int(j, what, keys[k], dst[k]));
    if (c->n_embd % c->n_head)
        return mw_fail(MW_ERR_FORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d", what,
                       c->n_embd, c->n_head);
    const mw_json_node *q = mw_hf_json_given(j, "quantization_config");
    if (q)
        return mw_fail(MW_ERR_FORMAT, "%s: quantization_config is given: memwall reads F32, F16, BF16 and F64 weights, "
                                      "not quantized ones (DeepSeek-V3's published FP8: dequantize them first)",
                       what);
    static const char *const silu[] = {"silu", "swish"};
    MW_TRY(mw_hf_json_want_str(j, what, "hidden_act", silu, 2, "memwall's MLPs and experts are SwiGLU (\"silu\")"));
    MW_TRY(mx ? parse_mixtral(j, what, c) : parse_deepseek(j, what, c, v3));
    MW_TRY(mw_hf_json_num(j, what, "rope_theta", &c->rope_theta));
    MW_TRY(mw_hf_json_num(j, what, "rms_norm_eps", &c->norm_eps));
    MW_TRY(mw_hf_json_rope(j, what, &c->rope_theta));
    MW_TRY(mw_hf_json_bool(j, what, "tie_word_embeddings", &c->tied));
    if (c->n_embd / c->n_head % 2)
        return mw_fail(MW_ERR_FORMAT, "%s: hidden_size / num_attention_heads = %d is odd: memwall's heads are even",
                       what, c->n_embd / c->n_head);
    return MW_OK;
}

/* ---- import: the tensors ---------------------------------------------------------------------- */

#define NAME_MAX_ 128 /* model.layers.4095.block_sparse_moe.experts.4095.w1.weight fits */

typedef struct want {
    char (*name)[NAME_MAX_];
    int64_t (*dims)[2];
    int *ndim;
    int n, cap;
} want;

static void put(want *w, int ndim, int64_t d0, int64_t d1, const char *fmt, int l, const char *part) {
    if (w->n < w->cap) {
        snprintf(w->name[w->n], NAME_MAX_, fmt, l, part);
        w->ndim[w->n] = ndim, w->dims[w->n][0] = d0, w->dims[w->n][1] = d1;
    }
    w->n++;
}

/* every tensor the shape implies, in Hugging Face's names and layout (nn.Linear's (out, in), as
 * memwall's): the names deepseek.c's table gives them and mw_hf_export writes */
static void implied(const mw_hf_shape *s, want *w) {
    const int64_t C = s->n_embd, H = s->n_head, hs = C / H, qk = s->qk_nope_dim + s->qk_rope_dim;
    const int mx = !s->kv_lora_rank && s->n_experts; /* Mixtral's names */
    put(w, 2, s->vocab, C, "model.embed_tokens.weight%.0d%s", 0, "");
    for (int l = 0; l < s->n_layer; l++) {
        const char *L = "model.layers.%d.%s";
        put(w, 1, C, 0, L, l, "input_layernorm.weight");
        put(w, 1, C, 0, L, l, "post_attention_layernorm.weight");
        if (s->kv_lora_rank) {
            if (s->q_lora_rank) {
                put(w, 2, s->q_lora_rank, C, L, l, "self_attn.q_a_proj.weight");
                put(w, 1, s->q_lora_rank, 0, L, l, "self_attn.q_a_layernorm.weight");
                put(w, 2, H * qk, s->q_lora_rank, L, l, "self_attn.q_b_proj.weight");
            } else {
                put(w, 2, H * qk, C, L, l, "self_attn.q_proj.weight");
            }
            put(w, 2, s->kv_lora_rank + s->qk_rope_dim, C, L, l, "self_attn.kv_a_proj_with_mqa.weight");
            put(w, 1, s->kv_lora_rank, 0, L, l, "self_attn.kv_a_layernorm.weight");
            put(w, 2, H * (s->qk_nope_dim + s->v_head_dim), s->kv_lora_rank, L, l, "self_attn.kv_b_proj.weight");
            put(w, 2, C, H * s->v_head_dim, L, l, "self_attn.o_proj.weight");
        } else {
            put(w, 2, H * hs, C, L, l, "self_attn.q_proj.weight");
            put(w, 2, s->n_kv_head * hs, C, L, l, "self_attn.k_proj.weight");
            put(w, 2, s->n_kv_head * hs, C, L, l, "self_attn.v_proj.weight");
            put(w, 2, C, H * hs, L, l, "self_attn.o_proj.weight");
        }
        if (!s->n_experts || l < s->first_dense) {
            put(w, 2, s->ffn, C, L, l, "mlp.gate_proj.weight");
            put(w, 2, s->ffn, C, L, l, "mlp.up_proj.weight");
            put(w, 2, C, s->ffn, L, l, "mlp.down_proj.weight");
            continue;
        }
        put(w, 2, s->n_experts, C, L, l, mx ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
        if (s->moe_gate == 1) put(w, 1, s->n_experts, 0, L, l, "mlp.gate.e_score_correction_bias");
        for (int e = 0; e < s->n_experts; e++) {
            static const char *const part[2][3] = {{"gate_proj", "up_proj", "down_proj"}, {"w1", "w3", "w2"}};
            for (int k = 0; k < 3; k++) {
                char nm[80];
                snprintf(nm, sizeof nm, "%s.experts.%d.%s.weight", mx ? "block_sparse_moe" : "mlp", e, part[mx][k]);
                put(w, 2, k < 2 ? s->moe_ffn : C, k < 2 ? C : s->moe_ffn, L, l, nm);
            }
        }
        if (s->n_shared) {
            const int64_t Fs = (int64_t)s->n_shared * s->moe_ffn;
            put(w, 2, Fs, C, L, l, "mlp.shared_experts.gate_proj.weight");
            put(w, 2, Fs, C, L, l, "mlp.shared_experts.up_proj.weight");
            put(w, 2, C, Fs, L, l, "mlp.shared_experts.down_proj.weight");
        }
    }
    put(w, 1, C, 0, "model.norm.weight%.0d%s", 0, "");
    if (!s->tied) put(w, 2, s->vocab, C, "lm_head.weight%.0d%s", 0, "");
}

static int cmp_name(const void *a, const void *b) { return strcmp(a, b); }

static const char *dims_str(char *b, size_t n, int ndim, const int64_t *d) {
    if (ndim == 1) snprintf(b, n, "[%lld]", (long long)d[0]);
    else if (ndim == 2) snprintf(b, n, "[%lld, %lld]", (long long)d[0], (long long)d[1]);
    else snprintf(b, n, "(%d dimensions)", ndim);
    return b;
}

/* a tensor no configuration of the family implies but a checkpoint may hold: V3's
 * multi-token-prediction layers (num_hidden_layers .. + mtp - 1), a tied head, RoPE's buffers */
static int ignorable(const mw_hf_shape *s, int mtp, const char *name) {
    if (s->tied && strcmp(name, "lm_head.weight") == 0) return 1;
    size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
    if (n >= k && strcmp(name + n - k, "rotary_emb.inv_freq") == 0) return 1;
    if (strncmp(name, "model.layers.", 13) != 0 || name[13] < '0' || name[13] > '9') return 0;
    char *end;
    long l = strtol(name + 13, &end, 10);
    return *end == '.' && l >= s->n_layer && l < (long)s->n_layer + mtp;
}

mw_status mw_hf_deepseek_inspect(const mw_hf_files *h, const mw_hf_config *c, mw_hf_shape *s) {
    s->arch = MW_ARCH_DEEPSEEK;
    s->n_layer = c->n_layer, s->n_head = c->n_head, s->n_embd = c->n_embd, s->vocab = c->vocab, s->ctx = c->ctx;
    s->n_kv_head = c->n_kv_head, s->ffn = c->ffn, s->tied = c->tied, s->rope_theta = c->rope_theta;
    s->norm_eps = c->norm_eps, s->sliding_window = c->sliding_window;
    s->n_experts = c->n_experts, s->n_experts_tok = c->n_experts_tok, s->n_shared = c->n_shared;
    s->moe_ffn = c->moe_ffn, s->first_dense = c->n_experts ? c->first_dense : 0, s->moe_gate = c->moe_gate;
    s->norm_topk = c->norm_topk, s->routed_scale = c->routed_scale, s->q_lora_rank = c->q_lora_rank;
    s->kv_lora_rank = c->kv_lora_rank, s->qk_rope_dim = c->qk_rope_dim, s->qk_nope_dim = c->qk_nope_dim;
    s->v_head_dim = c->v_head_dim;
    const double count = 3.0 + (double)c->n_layer * (13 + 3.0 * c->n_experts);
    if (count > (1 << 21))
        return mw_fail(MW_ERR_FORMAT, "%s/config.json: %d layers of %d experts: more tensors than memwall's model holds",
                       h->dir, c->n_layer, c->n_experts);
    want w = {0};
    implied(s, &w); /* counts */
    w.cap = w.n, w.n = 0;
    w.name = malloc((size_t)w.cap * sizeof *w.name);
    w.dims = malloc((size_t)w.cap * sizeof *w.dims);
    w.ndim = malloc((size_t)w.cap * sizeof *w.ndim);
    mw_status st = w.name && w.dims && w.ndim ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) implied(s, &w);
    char b1[64], b2[64];
    for (int i = 0; st == MW_OK && i < w.n; i++) {
        const mw_st_file *f;
        const mw_st_tensor *t = mw_hf_files_find(h, w.name[i], &f);
        if (!t)
            st = mw_fail(MW_ERR_FORMAT, "%s: tensor %s is missing, which config.json implies%s", h->what, w.name[i],
                         strcmp(w.name[i], "lm_head.weight") == 0 ? " (tie_word_embeddings is false)" : "");
        else if (t->ndim != w.ndim[i] || t->shape[0] != w.dims[i][0] || (t->ndim == 2 && t->shape[1] != w.dims[i][1]))
            st = mw_fail(MW_ERR_FORMAT, "%s: tensor %s has shape %s, but config.json implies %s", f->path, w.name[i],
                         dims_str(b1, sizeof b1, t->ndim, t->shape), dims_str(b2, sizeof b2, w.ndim[i], w.dims[i]));
        else if (t->dtype == MW_ST_OTHER)
            st = mw_fail(MW_ERR_FORMAT, "%s: tensor %s is not F32, F16, BF16 or F64", f->path, w.name[i]);
    }
    if (st == MW_OK) qsort(w.name, (size_t)w.n, sizeof *w.name, cmp_name);
    const char *name;
    for (int i = 0; st == MW_OK && (name = mw_hf_files_name(h, i)); i++) {
        if (bsearch(name, w.name, (size_t)w.n, sizeof *w.name, cmp_name) || ignorable(s, c->mtp_layers, name)) continue;
        const long l = strncmp(name, "model.layers.", 13) == 0 ? strtol(name + 13, NULL, 10) : -1;
        char why[96];
        if (l >= s->n_layer)
            snprintf(why, sizeof why, "a block past num_hidden_layers %d", s->n_layer);
        else
            snprintf(why, sizeof why, "%s", strstr(name, ".bias") ? "memwall's deepseek family has no biases"
                                            : strstr(name, "experts") ? "another expert count, or a mixture where "
                                                                        "config.json has a dense MLP"
                                                                      : "another attention or MLP");
        st = mw_fail(MW_ERR_FORMAT, "%s: tensor %s is not part of the model config.json describes (%s)", h->what, name,
                     why);
    }
    free(w.name), free(w.dims), free(w.ndim);
    return st;
}
