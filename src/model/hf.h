/* Hugging Face config.json, model.safetensors.index.json and (sharded) safetensors checkpoints,
 * parsed from buffers and opened from a directory (for mw_hf_inspect/mw_hf_load, the tests and the
 * fuzzer). Two families: GPT-2 and Llama (also Mistral where its math is Llama's). */
#ifndef MW_HF_H
#define MW_HF_H
#include <stddef.h>

#include "memwall.h"
#include "safetensors.h"

#define MW_HF_MAX_CONFIG_FILE ((size_t)16 << 20) /* a config.json or index.json larger is refused */
#define MW_HF_MAX_SHARDS 1000                    /* shards of one checkpoint (all open at once) */

/* The fields of a config.json; 0 where the file does not give one (absent or null), except the
 * Llama scalars, which get LlamaConfig's (MistralConfig's) defaults.
 * GPT-2 (model_type "gpt2" or none): n_layer, n_head, n_embd, vocab_size, n_positions.
 * Llama (model_type "llama", "mistral"): num_hidden_layers, num_attention_heads, hidden_size,
 * vocab_size, max_position_embeddings (default 2048; Mistral 131072), num_key_value_heads
 * (default num_attention_heads; Mistral 8), intermediate_size, tie_word_embeddings (default
 * false), rope_theta (default 10000), rms_norm_eps (default 1e-6). */
typedef struct mw_hf_config {
    int n_layer, n_head, n_embd, vocab, ctx;
    int arch; /* MW_ARCH_GPT2 or MW_ARCH_LLAMA */
    int n_kv_head, ffn, tied, head_dim; /* head_dim: 0 when not given */
    double rope_theta, norm_eps;
    char model_type[16]; /* as given ("" when absent) */
} mw_hf_config;

/* Parses text[0..len) (`what` names it in messages). MW_ERR_FORMAT, one line naming the key, when
 * it is not a JSON object; its model_type is not "gpt2", "llama" or "mistral" (qwen2 and others
 * are refused by name); a shape field is not a positive integer below 2^30; or it asks for what
 * memwall's Llama does not compute: rope_scaling other than null, hidden_act other than "silu",
 * attention_bias or mlp_bias true, head_dim other than hidden_size / num_attention_heads, a
 * Mistral sliding_window below max_position_embeddings; rope_theta and rms_norm_eps must be
 * positive finite numbers. */
mw_status mw_hf_config_parse(const char *text, size_t len, const char *what, mw_hf_config *c);

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
#endif
