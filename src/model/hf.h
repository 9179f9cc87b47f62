/* Hugging Face config.json, model.safetensors.index.json and (sharded) safetensors checkpoints,
 * parsed from buffers and opened from a directory (for mw_hf_inspect/mw_hf_load, the tests and the
 * fuzzer). Three families: GPT-2, Llama (also Mistral where its math is Llama's) and the deepseek family
 * (DeepseekV2/V3, Mixtral; hf_deepseek.c). */
#ifndef MW_HF_H
#define MW_HF_H
#include <stddef.h>
#include <stdint.h>

#include "../core/json.h"
#include "memwall.h"
#include "safetensors.h"

#define MW_HF_MAX_CONFIG_FILE ((size_t)16 << 20) /* a config.json or index.json larger is refused */
#define MW_HF_MAX_SHARDS 1000                    /* shards of one checkpoint (all open at once) */

/* The fields of a config.json; 0 where the file does not give one (absent or null), except the
 * Llama scalars, which get LlamaConfig's (MistralConfig's) defaults.
 * GPT-2 (model_type "gpt2" or none): n_layer, n_head, n_embd, vocab_size, n_positions, n_inner
 * in ffn (0 when absent or null: 4 x n_embd), and layer_norm_epsilon in norm_eps (0 when absent,
 * null or 1e-05).
 * Llama (model_type "llama", "mistral"): num_hidden_layers, num_attention_heads, hidden_size,
 * vocab_size, max_position_embeddings (default 2048; Mistral 131072), num_key_value_heads
 * (default num_attention_heads; Mistral 8), intermediate_size, tie_word_embeddings (default
 * false), rope_theta (default 10000; or rope_parameters.rope_theta), rms_norm_eps (default 1e-6),
 * Mistral's sliding_window (default 4096, null: none).
 * The deepseek family (model_type "deepseek_v2", "deepseek_v3", "mixtral"; hf_deepseek.c,
 * docs/hf.md): memwall's mw_config fields of that family, as its model computes what the config
 * asks (V2's weights unnormalised, V3's sigmoid router with its bias), and mtp_layers, V3's
 * num_nextn_predict_layers (layers past num_hidden_layers whose tensors are ignored). */
typedef struct mw_hf_config {
    int n_layer, n_head, n_embd, vocab, ctx;
    int arch; /* MW_ARCH_GPT2, MW_ARCH_LLAMA or MW_ARCH_DEEPSEEK */
    int n_kv_head, ffn, tied, head_dim; /* head_dim: 0 when not given */
    int sliding_window;                 /* Mistral, Mixtral: attention's window; 0: none */
    double rope_theta, norm_eps;
    int n_experts, n_experts_tok, n_shared, moe_ffn, first_dense, moe_gate, norm_topk;
    int q_lora_rank, kv_lora_rank, qk_rope_dim, qk_nope_dim, v_head_dim, mtp_layers;
    double routed_scale;
    char model_type[16]; /* as given ("" when absent) */
} mw_hf_config;

/* Parses text[0..len) (`what` names it in messages). MW_ERR_FORMAT, one line naming the key and
 * its value, when it is not a JSON object; its model_type is not "gpt2", "llama", "mistral",
 * "deepseek_v2", "deepseek_v3" or "mixtral" (qwen2 and others are refused by name); a shape field is not a positive integer below 2^30; or
 * it asks for what memwall does not compute. GPT-2: activation_function other than "gelu_new" or
 * "gelu_pytorch_tanh", layer_norm_epsilon outside (0, 1), scale_attn_weights false,
 * scale_attn_by_inverse_layer_idx true, add_cross_attention true, tie_word_embeddings false,
 * n_inner other than 4 x n_embd. Llama: rope_scaling or rope_parameters with a rope_type other
 * than "default", hidden_act other than "silu" ("swish"), attention_bias or mlp_bias true,
 * head_dim other than hidden_size / num_attention_heads; rope_theta and rms_norm_eps must be
 * positive finite numbers. (A Mistral sliding_window is returned: the caller refuses a context
 * beyond it.) */
mw_status mw_hf_config_parse(const char *text, size_t len, const char *what, mw_hf_config *c);

/* config.json's readers for hf_deepseek.c (j's object 0; `what` names the file in messages):
 * absent or null leaves *dst; otherwise a positive integer below 2^30, a positive finite number,
 * a boolean (else MW_ERR_FORMAT naming the key). mw_hf_json_given: the key's node when present and
 * not null. mw_hf_json_want_str: the key, when given, is one of ok[0..n) (`does` says what memwall
 * computes). mw_hf_json_value: the value for a message ("relu", 0.5, true, an object). */
mw_status mw_hf_json_int(const mw_json *j, const char *what, const char *key, int *dst);
mw_status mw_hf_json_num(const mw_json *j, const char *what, const char *key, double *dst);
mw_status mw_hf_json_bool(const mw_json *j, const char *what, const char *key, int *dst);
const mw_json_node *mw_hf_json_given(const mw_json *j, const char *key);
mw_status mw_hf_json_want_str(const mw_json *j, const char *what, const char *key, const char *const *ok, int n,
                              const char *does);
const char *mw_hf_json_value(const mw_json_node *x, char *b, size_t n);
/* rope_scaling and rope_parameters: absent, null or rope_type "default" (rope_parameters'
 * rope_theta into *theta, equal to a top-level one), else MW_ERR_FORMAT naming the type */
mw_status mw_hf_json_rope(const mw_json *j, const char *what, double *theta);
/* The deepseek family's config.json (model_type deepseek_v2, deepseek_v3 or mixtral) into c,
 * with the checks of mw_hf_config_parse (hf_deepseek.c; docs/hf.md lists every key). */
mw_status mw_hf_deepseek_parse(const mw_json *j, const char *what, const char *model_type, mw_hf_config *c);

/* model.safetensors.index.json: weight_map {tensor name: shard file name}. Shard names are plain
 * file names (no '/', not "." or ".."), at most MW_HF_MAX_SHARDS distinct; no tensor twice. */
typedef struct mw_hf_index {
    int n;            /* tensors */
    char **name;      /* n names, sorted */
    int *shard;       /* n indices into shards */
    int nshards;      /* distinct shard names, in order of first appearance */
    char **shards;
} mw_hf_index;
mw_status mw_hf_index_parse(const char *text, size_t len, const char *what, mw_hf_index *ix);
void mw_hf_index_free(mw_hf_index *ix);

/* An opened checkpoint: PATH is a directory (its model.safetensors, else its
 * model.safetensors.index.json and the shards it names), a .safetensors file, or an index.json.
 * Every shard is opened and checked, and every weight_map entry must be in its shard. */
typedef struct mw_hf_files {
    char dir[1100];  /* the directory (config.json's) */
    char what[1200]; /* the file named in messages: the .safetensors or the index.json */
    int sharded, n;
    mw_st_file *f; /* n files */
    mw_hf_index ix;
} mw_hf_files;
mw_status mw_hf_files_open(mw_hf_files *h, const char *path);
/* The tensor called name (and its file in *file), or NULL. */
const mw_st_tensor *mw_hf_files_find(const mw_hf_files *h, const char *name, const mw_st_file **file);
void mw_hf_files_close(mw_hf_files *h);
/* tensor name i of the checkpoint (any order), NULL past the last */
const char *mw_hf_files_name(const mw_hf_files *h, int i);
/* The deepseek family's weights (hf_deepseek.c): config.json (c, parsed) into shape, and every
 * tensor its configuration implies present in h with that shape (Hugging Face's layout, a float
 * dtype); a tensor the configuration does not imply is refused too (MW_ERR_FORMAT naming it),
 * except V3's multi-token-prediction layers (num_nextn_predict_layers past num_hidden_layers), a
 * tied lm_head.weight and rotary inv_freq buffers. */
mw_status mw_hf_deepseek_inspect(const mw_hf_files *h, const mw_hf_config *c, mw_hf_shape *shape);

/* The tokenizer files of an export (hf_tok.c, docs/hf.md). mw_hf_tok_names: every name a
 * tokenizer is read from beside Hugging Face weights (an export refuses a directory holding one it
 * does not write). mw_hf_tokfiles_resolve: the files mw_tokenizer_load reads from src (a directory
 * or a tokenizer.json), each with the name it gets beside config.json (encoder.json + vocab.bpe
 * become vocab.json + merges.txt; a tokenizer.json by any name tokenizer.json, with the
 * tokenizer_config.json beside it), and the tokenizer's identity. MW_ERR_ARG when that identity
 * is not want's (want may be NULL or unknown: no check) or it has more tokens than model_vocab
 * (0: no check); the loader's status when it cannot be read. */
#define MW_HF_TOK_NAMES 6
extern const char *const mw_hf_tok_names[MW_HF_TOK_NAMES];
typedef struct mw_hf_tokfiles {
    int n;
    char src[2][4200];
    const char *dst[2]; /* static strings */
    mw_tokenizer_id id;
} mw_hf_tokfiles;
mw_status mw_hf_tokfiles_resolve(const char *src, const mw_tokenizer_id *want, int model_vocab, mw_hf_tokfiles *tf);

/* Export (hf.c): the writer of model.safetensors and config.json from tensors it is handed, which
 * mw_hf_export feeds from a model in memory and mw_hf_export_ckpt (src/train/ckpt_export.c) from a
 * checkpoint file, so that this folder never reads a checkpoint's format.
 * One tensor: its name, its shape in memwall's layout, and where its float32 values are: in
 * memory at mem, or (mem NULL) at offset of the file src_fd. */
typedef struct mw_hf_src_tensor {
    const char *name;
    int ndim, dims[2]; /* memwall layout */
    const float *mem;  /* in memory, or */
    uint64_t offset;   /* at this offset of src_fd */
} mw_hf_src_tensor;
/* Writes the n tensors t (sorted by name in place; src_fd and src_path, for messages, the file of
 * those not in memory, or -1 and NULL) with the configuration cfg. out: FILE, or an existing
 * directory (or one ending in '/'), which gets model.safetensors. The weights, DIR/config.json and
 * the tokenizer files tf (may be NULL: none) are written to temporary files, synced, renamed into
 * place, and the directory synced; missing directories of DIR are created. A tokenizer file in DIR
 * that tf does not write is refused first: --init hf: would read it instead of the model's. */
mw_status mw_hf_export_tensors(mw_hf_src_tensor *t, int n, const char *out, int src_fd, const char *src_path,
                               const mw_config *cfg, const mw_hf_tokfiles *tf);
/* a finite double as Python's json writes it (repr), into b */
const char *mw_hf_py_float(double v, char *b, size_t n);
/* The deepseek family (src/model/hf_deepseek.c): MW_OK when cfg's shape is a Hugging Face
 * architecture (DeepseekV2/V3ForCausalLM, MixtralForCausalLM), else MW_ERR_ARG saying why not; its
 * config.json text into b (snprintf's return); its tensor count (src/model/deepseek.c). */
mw_status mw_hf_deepseek_exportable(const mw_config *cfg);
int mw_hf_deepseek_config_text(const mw_config *cfg, char *b, size_t n);
int mw_deepseek_tensor_count(const mw_config *cfg);
#endif
