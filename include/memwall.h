/* memwall: train transformer language models inside a hard memory budget.
 *
 * The public C API. The library never exits or aborts on a runtime condition: every fallible
 * call returns an mw_status, and mw_last_error() gives a one-line message a user can act on.
 * Handles are opaque; every *_create has a *_destroy, and destroy(NULL) is a no-op.
 */
#ifndef MEMWALL_H
#define MEMWALL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MW_VERSION "0.1.0"

/* ---- status ------------------------------------------------------------------------------ */

typedef enum mw_status {
    MW_OK = 0,
    MW_ERR_ARG,    /* invalid argument or configuration */
    MW_ERR_BUDGET, /* the plan does not fit the memory budget */
    MW_ERR_NOMEM,  /* the operating system refused memory */
    MW_ERR_IO,     /* a read, write, open or rename failed */
    MW_ERR_FORMAT, /* a file is malformed, truncated or of another version */
    MW_ERR_STOP,   /* a callback asked to stop (not an error of the library) */
} mw_status;

/* A short constant name for a status ("budget exceeded"). Never NULL. */
const char *mw_status_str(mw_status s);
/* The message of the last failed call on this thread (one line, no newline). Never NULL. */
const char *mw_last_error(void);

/* ---- memory categories --------------------------------------------------------------------- */

typedef enum mw_category {
    MW_CAT_PARAMS = 0,
    MW_CAT_GRADS,
    MW_CAT_OPTIM,
    MW_CAT_ACTS,
    MW_CAT_WORK,
    MW_CAT_COUNT
} mw_category;

/* The JSON key of a category: "parameters", "gradients", "optimizer", "activations",
 * "workspace". */
const char *mw_category_name(mw_category c);

/* ---- configuration ------------------------------------------------------------------------- */

/* A tokenizer's identity: its name and a 64-bit hash of its vocabulary (the token bytes by id,
 * then the BPE merges by rank; src/text/tokenizer.h defines the bytes hashed). The names are
 * "bytes", "gpt2" (a byte-level BPE whose hash is GPT-2's, from encoder.json + vocab.bpe or a
 * Hugging Face tokenizer.json alike), "llama2" and "llama3" (their tokenizer.json files), "bpe"
 * (any other byte-level BPE) and "spbpe" (any other SentencePiece BPE). An empty name means
 * unknown: a version-1 token file, a checkpoint written before identities were recorded. */
#define MW_TOKENIZER_NAME_MAX 16
typedef struct mw_tokenizer_id {
    char name[MW_TOKENIZER_NAME_MAX]; /* NUL-terminated; "" when unknown */
    uint64_t hash;
} mw_tokenizer_id;
/* The hash of GPT-2's vocabulary (50257 tokens, 50000 merges). */
#define MW_TOKENIZER_GPT2_HASH 0xfe1712a09e6b9e60ull
/* The hashes of Llama 2's (32000 tokens, SentencePiece BPE) and Llama 3's
 * (128256 tokens, byte-level BPE) tokenizer.json, pipeline included: names "llama2", "llama3". */
#define MW_TOKENIZER_LLAMA2_HASH 0xfc45e868b7d696f0ull
#define MW_TOKENIZER_LLAMA3_HASH 0xdf474bfae843d19cull
/* 1 when a and b are both known and differ (in name or hash), else 0. */
int mw_tokenizer_id_conflict(const mw_tokenizer_id *a, const mw_tokenizer_id *b);
/* "gpt2 (vocabulary hash 0123456789abcdef)", or "unknown", into buf; returns buf. */
const char *mw_tokenizer_id_str(const mw_tokenizer_id *id, char *buf, size_t n);
/* Checks a name read from a file: 1 to 15 characters of [a-z0-9._-]. */
int mw_tokenizer_name_valid(const char *name);

#define MW_MAX_BLOCK_POLICIES 256 /* blocks that auto and blocks:... can give policies one by one */
#define MW_ACT_LAYERS_MAX (3 * MW_MAX_BLOCK_POLICIES + 1) /* --act-layers: up to 3 characters per block */

/* Model families (mw_config.arch). */
typedef enum mw_arch {
    MW_ARCH_GPT2 = 0, /* LayerNorm, learned positions, GELU MLP of 4 x n_embd, biases, tied head */
    MW_ARCH_LLAMA,    /* RMSNorm, rotary positions, SwiGLU MLP of ffn, grouped-query attention,
                         no biases, tied or untied head */
    MW_ARCH_DEEPSEEK, /* Llama's blocks with a mixture of experts for the MLP past the first
                         first_dense blocks, and grouped-query or multi-head latent attention:
                         DeepSeek-V2/V3, Mixtral (docs/moe.md) */
    MW_ARCH_COUNT
} mw_arch;
/* "gpt2", "llama", "deepseek" */
const char *mw_arch_name(int arch);

typedef struct mw_config {
    /* model */
    int arch; /* mw_arch */
    int n_layer, n_head, n_embd, vocab, ctx;
    /* Llama family (0 for GPT-2): key/value heads (grouped-query attention; n_head divides by it),
     * the SwiGLU MLP's hidden width, 1 when the LM head is the embedding (tied), RoPE's base and
     * RMSNorm's epsilon. GPT-2: norm_eps is LayerNorm's epsilon, 0 for GPT-2's 1e-5 (another only
     * from a Hugging Face config.json's layer_norm_epsilon; recorded in checkpoints) */
    int n_kv_head, ffn, tied;
    double rope_theta, norm_eps;
    /* The deepseek family (0 elsewhere; docs/moe.md). Its first first_dense blocks have Llama's
     * SwiGLU MLP of ffn; the others a mixture of experts: n_experts routed SwiGLU experts of
     * moe_ffn, n_experts_tok (top-k) of them per token, beside n_shared shared experts (one SwiGLU
     * of n_shared x moe_ffn every token passes through). The router: moe_gate 0 softmax over the
     * experts (DeepSeek-V2, Mixtral), 1 sigmoid scores with a per-expert bias that only chooses
     * (DeepSeek-V3); norm_topk 1 renormalises the k weights to sum 1; routed_scale multiplies
     * them. capacity_factor > 0 caps each expert at ceil(cf x N x k / E) of a micro-batch's N
     * tokens (later tokens over the cap are dropped, docs/moe.md); 0: no cap, none dropped.
     * Attention: grouped-query of n_kv_head heads (Llama's) when kv_lora_rank is 0, else multi-head
     * latent attention: q through a q_lora_rank bottleneck with its RMSNorm (0: q straight from
     * the input, as V2-Lite), keys and values through a kv_lora_rank latent with its RMSNorm, q
     * and k heads of qk_nope_dim + qk_rope_dim (the rotated part, one key shared by the heads),
     * value heads of v_head_dim. */
    int n_experts, n_experts_tok, n_shared, moe_ffn, first_dense, moe_gate, norm_topk;
    double capacity_factor, routed_scale;
    int q_lora_rank, kv_lora_rank, qk_rope_dim, qk_nope_dim, v_head_dim;
    /* batch */
    int batch, seq, accum;
    /* schedule and optimizer */
    int steps, warmup;
    double lr, min_lr_frac, beta1, beta2, eps, weight_decay, grad_clip;
    /* run */
    uint64_t seed;
    int threads;    /* 0: all cores */
    uint64_t budget; /* bytes for the device tier; 0: unlimited */
    int eval_every, eval_batches;
    int save_every, keep; /* checkpoint cadence (0: only at the end) and how many to keep (>= 1);
                             the CLI's train saves, the library does not: recorded in checkpoints
                             so that a resume keeps them */
    /* 0: training (everything). 1: inference: parameters, the forward activations of one
     * (batch, seq) micro-batch and a KV cache of ctx positions; no gradients, optimizer state or
     * backward workspace (mw_model_backward and mw_model_adamw_step must not be called).
     * MW_INFERENCE_EVAL (2): evaluation, the loss only: as 1, but the head keeps the logits of
     * 256 positions at a time, as training does, and there is no KV cache (mw_model_logits and
     * mw_model_decode return NULL; mw_model_forward needs targets). */
    int inference;
    /* activation recomputation (mw_recompute); never changes the numbers, only memory and time */
    int recompute;
    int recompute_every; /* MW_RECOMPUTE_EVERY: blocks per segment; 0: round(sqrt(n_layer)) */
    char recompute_blocks[MW_MAX_BLOCK_POLICIES + 1]; /* MW_RECOMPUTE_BLOCKS: one letter per
                                                          block, n(one), s(elective) or f(ull) */
    /* the tokenizer whose ids the model reads; recorded in checkpoints (name "" when unknown) */
    mw_tokenizer_id tokenizer;
    /* the optimizer (mw_optim) and the hyperparameters only some use (docs/optimizers.md): SGD's
     * momentum; CAME's beta3 and eps2; Adafactor's and CAME's update clipping threshold;
     * Adafactor's second-moment decay exponent. eps is Adafactor's and CAME's eps1. */
    int optim;
    double momentum, beta3, eps2, clip_threshold, decay_rate;
    /* where model states live (mw_offload_mode); never changes the numbers, only memory and time */
    int offload;
    /* an explicit chunk placement (--offload MODE:resident=K or params=R,grads=R,optim=R; "" for
     * the plain modes): which blocks' states are on disk; offload is then the widest mode it
     * uses (all when any parameters are on disk, ...) */
    char offload_spec[96];
    char offload_dir[1024]; /* the disk tier's folder (MW_OFFLOAD_NONE: unused) */
    /* kept activations between their forward and their backward (docs/memory.md, "Stored
     * activations"): act_offload (mw_act_offload) writes them to the disk tier's file behind the
     * forward pass and reads them back ahead of the backward op that needs them (the same bits);
     * act_compress 0 (none), 8, 4 or 2 stores those the model declares tolerant quantised in
     * groups of 256 with stochastic rounding seeded from seed (changes the numbers) */
    int act_offload, act_compress;
    /* --recompute auto's decision per kept tensor (docs/memory.md, "One decision per tensor"):
     * act_compress_max 0 (it never compresses), 8, 4 or 2: the most compression it may choose,
     * widths 8 down to this one (compression changes the numbers; swapping and recomputing do not;
     * the other policies ignore it);
     * act_layers: a decision pinned, one comma-separated token per block, "k" (keep), "x" (swap the
     * block input) or "a" (swap every kept value), optionally followed by 8, 4 or 2 (compress the
     * tolerant kept values at that width): "x8,x8,k"; "" none (the flags above decide) */
    int act_compress_max;
    char act_layers[MW_ACT_LAYERS_MAX];
    /* rows per group of a recomputed block's MLP (GPT-2 under --recompute full, fp32: the forward
     * and the backward of LayerNorm, fc, GELU and fc2 over this many rows at a time, the same
     * bits; docs/memory.md, "Row groups"): 0 for 1024; rounded up to the quantiser's chunk; below
     * two groups the MLP runs ungrouped */
    int group_rows;
    /* the products' precision (mw_precision): MW_PRECISION_BF16 runs every matrix product of the
     * model (the blocks' and the LM head's, forward and backward) on bfloat16 operands with fp32
     * accumulation, and stores the norms' outputs, q|k|v, the attention output, the MLP's values
     * and the blocks' gradients (between their backwards) as bfloat16 (docs/precision.md); the
     * weights and the optimizer state stay as they are. Changes the numbers. */
    int precision;
    /* data parallelism (src/dist/zero.c): dp 1 when the run is one of world ranks (rank 0 ..
     * world-1, world >= 1) sharing each optimizer step's global batch of world x accum micro-
     * batches, under ZeRO stage zero: 0 every rank holds every state; 1 each rank holds the
     * optimizer state of its shard of the flat parameter buffer only; 2 also the gradients' sum of
     * its shard; 3 also the parameters of its shard (docs/zero.md). The losses and weights are the
     * same bits for every world size and stage at the same world x accum. */
    int dp, world, rank, zero;
    /* One rank of a parallel layout (issue 32, docs/cluster.md "Layouts"): tensor parallelism, a
     * pipeline, or both, with data-parallel replicas, run (ep and vpp off: src/dist/tp.c,
     * src/dist/pipeline.c, docs/parallel.md); the others are planned and not run here
     * (mw_model_create refuses them): tp tensor-parallel ranks (0 or 1: none) dividing the
     * matrices, heads and vocabulary as each model declares, sp 1 for sequence parallelism over
     * them (the norms' and residual's values divided too); pp pipeline stages (0 or 1: none), this
     * plan being stage pp_stage's, which holds blocks pp_first .. pp_first + pp_blocks - 1 of
     * n_layer (the embedding on stage 0, the head on the last) and runs accum micro-batches under
     * 1F1B; ep expert-parallel ranks (0 or 1: none; a model with experts). The data-parallel group
     * inside the layout is dp/world/zero above. vpp (0 or 1: none) model chunks per stage under
     * Megatron's interleaved 1F1B: the n_layer blocks are P x vpp chunks of equal length, stage s
     * holding chunks s, s + P, ... (pp_blocks = n_layer / P of them, pp_first = s x pp_blocks is then
     * only its place in the even split; accum a multiple of P). */
    int tp, sp, pp, pp_stage, pp_first, pp_blocks, ep, vpp;
} mw_config;
#define MW_INFERENCE_EVAL 2 /* mw_config.inference: evaluation (the loss only) */
/* 1 when cfg plans one rank of a parallel layout (tensor, sequence, pipeline or expert parallel):
 * planned only, never run here */
static inline int mw_config_layout(const mw_config *c) { return c->tp > 1 || c->sp || c->pp > 1 || c->ep > 1; }
/* The micro-batches pipeline stage s of cfg's layout has in flight at most, each the activations
 * of its blocks (under --vpp, of one chunk's): min(P - s, M) under 1F1B, min((P - s - 1) 2 +
 * (V - 1) P + 1, M V) under the interleaved schedule; 1 without a pipeline (src/graph/layout.c). */
int mw_layout_in_flight(const mw_config *cfg, int s);

/* What backward recomputes instead of keeping from forward. Attention never keeps its T x T
 * probabilities and the loss never holds more than 256 positions' logits, under every policy.
 *  NONE       keep every block's activations;
 *  SELECTIVE  keep block inputs, qkv, the attention output and log-sum-exp, the residual after
 *             attention and the MLP's pre-activation; redo both LayerNorms and the GELU;
 *  FULL       keep only each block's input; redo the block during backward;
 *  EVERY      keep the input of every K-th block; redo a segment of K blocks at a time;
 *  AUTO       per block none, selective or full: the least predicted recomputation time whose
 *             plan fits cfg->budget (dynamic programming over the blocks, per-op costs measured
 *             on this machine, so two runs may choose differently when choices are close: the
 *             plan reports its choice as a BLOCKS string). Needs a budget.
 *  BLOCKS     per block as recompute_blocks says: "ffsn" = full, full, selective, none. */
typedef enum mw_recompute {
    MW_RECOMPUTE_NONE = 0,
    MW_RECOMPUTE_SELECTIVE,
    MW_RECOMPUTE_FULL,
    MW_RECOMPUTE_EVERY,
    MW_RECOMPUTE_AUTO,
    MW_RECOMPUTE_BLOCKS
} mw_recompute;
/* Parses "none", "selective", "full", "every:K", "every:sqrt", "auto" or "blocks:LETTERS" (one
 * of n, s, f per block) into cfg. MW_ERR_ARG with a message otherwise. */
mw_status mw_recompute_parse(mw_config *cfg, const char *s);

/* Which model states live on the disk tier (a scratch file under cfg->offload_dir, preallocated
 * before step 1 and removed at exit, read and written with asynchronous I/O while the step runs)
 * instead of in memory:
 *  NONE             every state in memory;
 *  OPTIMIZER        AdamW's m and v on disk (8 bytes per parameter): the optimizer streams them
 *                   through a staging buffer of the plan in chunks, reading ahead and writing
 *                   behind, so the disk works while the update computes;
 *  OPTIMIZER_GRADS  also the blocks' gradients: each block's are bound in a slot at its first
 *                   backward op (zeros, or read back to accumulate into) and written behind after
 *                   its last; the norm and the optimizer stream them;
 *  ALL              also the blocks' parameters, streamed layer by layer: each run of a block's
 *                   ops binds them in one of three slots, and the next two blocks the schedule
 *                   visits are read ahead. The embedding's and the head's stay in memory.
 *  AUTO             the fastest of the modes above whose plan fits cfg->budget (each under
 *                   cfg's recomputation policy, auto included): predicted time is the
 *                   recomputation (op costs measured here) plus the disk's transfers at the
 *                   bandwidth measured in cfg->offload_dir, as if none overlapped compute.
 *                   Without a folder to measure, the least on disk that fits; without a budget,
 *                   NONE.
 * Every mode gives the same bits as NONE; checkpoints do not record it (like threads, it is where
 * the run keeps its states, not what it computes). */
typedef enum mw_offload_mode {
    MW_OFFLOAD_NONE = 0,
    MW_OFFLOAD_OPTIMIZER,
    MW_OFFLOAD_OPTIMIZER_GRADS,
    MW_OFFLOAD_ALL,
    MW_OFFLOAD_AUTO,
    MW_OFFLOAD_COUNT
} mw_offload_mode;
/* "none", "optimizer", "optimizer+grads", "all", "auto" ("?" when out of range) */
const char *mw_offload_name(int offload);
/* Parses an --offload value into cfg->offload (and cfg->offload_spec for the chunk forms: MODE:
 * resident=K keeps the last K blocks' states in memory, params=R,grads=R,optim=R puts the blocks R
 * (all, none, A-B, A) of each category on disk; src/memory/chunks.h); MW_ERR_ARG naming the choices
 * otherwise. */
mw_status mw_offload_parse(mw_config *cfg, const char *s);

/* Which kept activations --act-offload swaps to the disk tier (cfg->offload_dir):
 *  NONE         every kept value stays in memory;
 *  CHECKPOINTS  each block's input, what every recomputation policy keeps between blocks (the
 *               block inputs under full or every:K, the one value the others replay from);
 *  ALL          every value of a block kept from the forward pass for the backward pass;
 *  AUTO         the least of these whose plan fits cfg->budget (each planned under cfg's
 *               placement and recomputation, auto included): the fastest, since the swaps only add
 *               transfers (their predicted seconds at the rate measured in cfg->offload_dir are
 *               printed); without a budget, NONE. */
typedef enum mw_act_offload {
    MW_ACT_OFFLOAD_NONE = 0,
    MW_ACT_OFFLOAD_CHECKPOINTS,
    MW_ACT_OFFLOAD_ALL,
    MW_ACT_OFFLOAD_AUTO,
    MW_ACT_OFFLOAD_COUNT
} mw_act_offload;
/* "none", "checkpoints", "all", "auto" ("?" when out of range) */
const char *mw_act_offload_name(int mode);
/* Parses --act-offload into cfg->act_offload, --act-compress ("none", "8", "4", "2") into
 * cfg->act_compress; MW_ERR_ARG naming the choices otherwise. */
mw_status mw_act_offload_parse(mw_config *cfg, const char *s);
mw_status mw_act_compress_parse(mw_config *cfg, const char *s);
/* --act-compress-max ("none", "8", "4", "2") into cfg->act_compress_max; --act-layers (tokens checked,
 * not yet counted against the blocks: mw_config_validate does) into cfg->act_layers; MW_ERR_ARG. */
mw_status mw_act_compress_max_parse(mw_config *cfg, const char *s);
mw_status mw_act_layers_parse(mw_config *cfg, const char *s);
/* The widths of an --act-layers text alone, what changes the numbers ("x8,a,k4" -> "k8,k,k4"), into out;
 * "" when it compresses nothing. */
void mw_act_layers_widths(const char *s, char *out, size_t n);

/* The optimizers (docs/optimizers.md). Each keeps different state:
 *  ADAMW      fp32 m and v (8 bytes per parameter);
 *  ADAMW8BIT  m and v as 8-bit codes of bitsandbytes' dynamic map, one fp32 scale per 2048
 *             (2 bytes per parameter and a little);
 *  ADAM4BIT   4-bit codes: m with a scale per 128, v with rank-1 normalisation (Li et al. 2023);
 *  ADAFACTOR  a 2-D weight's second moment factored into rows and columns; no first moment
 *             unless beta1 > 0 (then fp32);
 *  CAME       Adafactor's factored second moment and confidence, and an fp32 first moment;
 *  SGD        an fp32 momentum buffer (none when momentum is 0). */
typedef enum mw_optim {
    MW_OPTIM_ADAMW = 0,
    MW_OPTIM_ADAMW8BIT,
    MW_OPTIM_ADAM4BIT,
    MW_OPTIM_ADAFACTOR,
    MW_OPTIM_CAME,
    MW_OPTIM_SGD,
    MW_OPTIM_COUNT
} mw_optim;
/* Parses an --optim value into cfg->optim (hyperparameters unchanged); MW_ERR_ARG naming the
 * choices otherwise. */
mw_status mw_optim_parse(mw_config *cfg, const char *s);
/* "adamw", "adamw8bit", "adam4bit", "adafactor", "came", "sgd" ("?" when out of range) */
const char *mw_optim_str(int optim);
/* Sets lr, beta1, beta2, beta3, eps, eps2, weight_decay, momentum, clip_threshold and decay_rate
 * to cfg->optim's defaults (docs/optimizers.md). */
void mw_optim_defaults(mw_config *cfg);

/* The products' precision (mw_config.precision). */
typedef enum mw_precision { MW_PRECISION_FP32 = 0, MW_PRECISION_BF16, MW_PRECISION_COUNT } mw_precision;
/* "fp32", "bf16" ("?" when out of range) */
const char *mw_precision_str(int precision);
/* Parses a --precision value into cfg->precision; MW_ERR_ARG naming the choices otherwise. */
mw_status mw_precision_parse(mw_config *cfg, const char *s);

/* Fills the defaults (the gpt2-tiny preset, AdamW 3e-4, betas 0.9/0.95, wd 0.1, clip 1.0). */
void mw_config_default(mw_config *cfg);
/* Sets the model shape (arch included) of a named preset: gpt2-tiny, gpt2, gpt2-medium,
 * gpt2-large, gpt2-xl; llama-tiny, smollm-135m, smollm-360m, smollm-1.7b, tinyllama-1.1b,
 * llama2-7b, llama3-8b, llama2-70b. Returns MW_ERR_ARG for an unknown name. */
mw_status mw_config_preset(mw_config *cfg, const char *name);
/* Fills the Llama fields cfg's overrides left at 0 (kv heads = heads, ffn by Llama's rule,
 * theta 10000, eps 1e-5); for GPT-2 clears them. */
void mw_config_arch_defaults(mw_config *cfg);
/* Checks every field; MW_ERR_ARG with a message naming the bad one. */
mw_status mw_config_validate(const mw_config *cfg);
/* Number of trainable parameters of the configured model. */
size_t mw_config_num_params(const mw_config *cfg);
/* Parameters one token passes through: all but the routed experts a token is not sent to (the
 * deepseek family's n_experts - n_experts_tok per mixture block); with_embed 0 leaves out the
 * input embedding's table too, of which a token reads one row (DeepSeek's count of activated
 * parameters; Mixtral's counts the table). Equals mw_config_num_params for dense models when
 * with_embed is 1. */
size_t mw_config_active_params(const mw_config *cfg, int with_embed);
/* Copies the deepseek family's own shape fields (experts, router, capacity, latent attention) of
 * src into dst, as a model loaded from a checkpoint takes them. */
void mw_config_copy_family(mw_config *dst, const mw_config *src);
/* Model FLOPs of one training step's forward+backward per token (6N + attention), as in PaLM. */
double mw_config_flops_per_token(const mw_config *cfg);
/* Applies cfg->threads to OpenMP and BLAS; returns the thread count in effect. */
int mw_set_threads(int threads);

/* ---- compute kernels ------------------------------------------------------------------------
 * The library carries a GEMM micro-kernel per instruction set ("portable" C, "avx2" for AVX2 +
 * FMA, "avx512" for AVX-512F, "avx512bf16" for AVX-512F with vdpbf16ps for bfloat16 products, on
 * x86-64; "neon" on aarch64) and runs one. These form the FMA family: they give the same bits, so
 * the choice among them changes speed only. "amx" runs bfloat16 products on Intel AMX tiles
 * (tdpbf16ps), with their own bits (the AMX family; its fp32 products are avx512's). Unless
 * mw_kernel_set is called, the first product runs the kernel named by the environment variable
 * MEMWALL_KERNEL, else auto: the fastest FMA-family kernel the CPU has (avx512bf16 only where its
 * vdpbf16ps, timed once, beats avx512's emulation of it by more than 15%), and for bfloat16
 * products amx where the CPU has AMX-BF16, the operating system grants the tiles and it is faster
 * (timed once, by more than 15%). A named amx that the operating system refuses runs the best
 * FMA-family kernel, with a one-line note on stderr. */

/* name: "auto" (or NULL: MEMWALL_KERNEL, else auto), "portable", "avx2", "avx512", "avx512bf16",
 * "neon", "amx". MW_ERR_ARG, changing nothing, for an unknown name or one this CPU cannot run (the
 * message names those it can). Call it before any training step, not while one runs. */
mw_status mw_kernel_set(const char *name);
/* The kernel in use for fp32 products: "portable", "avx2", "avx512", "avx512bf16", "neon", "amx". */
const char *mw_kernel_get(void);
/* The kernel that runs products of precision (mw_precision): mw_kernel_get's, except that auto
 * runs bfloat16 products on "amx" where that pays. */
const char *mw_kernel_get_for(int precision);
/* The numerics family of products of that precision: "amx" for bfloat16 products on amx, else
 * "fma" (every other kernel, and every fp32 product). Checkpoints record it. */
const char *mw_numerics_family(int precision);
/* 1 when this build carries kernel name and this CPU can run it, else 0. */
int mw_kernel_supported(const char *name);
/* The kernels this CPU can run, newest last: e.g. "portable, avx2, avx512". */
const char *mw_kernels_available(void);

/* ---- the memory plan ----------------------------------------------------------------------- */

/* A class of stored activations (a block value, "fch", "x", ...) in a plan: how many instances
 * are swapped and compressed (mw_config.act_offload, act_compress), their fp32 bytes in all, the
 * bytes they hold on the disk tier, and their compressed bytes (data and scales). */
#define MW_ACT_CLASSES 32
typedef struct mw_act_class {
    char name[24];
    int swapped, compressed;
    uint64_t bytes, disk_bytes, compressed_bytes;
    /* per block (bit l % 8 of byte l / 8): an instance is swapped, compressed; kept from its forward to
     * its backward at all (filled under a choice per block: --recompute auto's, --act-layers) */
    unsigned char swap_l[MW_MAX_BLOCK_POLICIES / 8], comp_l[MW_MAX_BLOCK_POLICIES / 8], kept_l[MW_MAX_BLOCK_POLICIES / 8];
} mw_act_class;

typedef struct mw_plan_summary {
    uint64_t category[MW_CAT_COUNT]; /* peak live bytes per category (over the step's ops) */
    uint64_t peak;                   /* the arena's size: every placed buffer's end, at most */
    uint64_t live_peak;              /* the most bytes alive at once (peak - this: fragmentation) */
    uint64_t budget;                 /* copy of cfg->budget (0: unlimited) */
    int fits;                        /* peak <= budget, or no budget; and the disk tier's file
                                        fits in cfg->offload_dir (disk_room) when one is given */
    char policy[160];                /* the recomputation it plans: "full", "every:3",
                                        "selective 0-3, none 4-11" (auto's choice) */
    char pin[MW_MAX_BLOCK_POLICIES + 16]; /* the --recompute value that gives exactly this plan:
                                             "blocks:ssssnnnnnnnn", "every:3"; pins auto's
                                             choice. "" for inference plans. */
    /* the disk tier: the placement planned (cfg->offload, auto resolved), bytes per category held
     * on disk, the scratch file's size (with its alignment padding), bytes read and written per
     * optimizer step, and the staging buffer in memory they pass through (counted in category) */
    int offload;
    char offload_pin[96]; /* the --offload value that gives this placement: the mode's name, or the
                             per-category form of a chunk placement (auto's: its choice) */
    uint64_t disk[MW_CAT_COUNT];
    uint64_t disk_file, disk_read, disk_write, disk_staging;
    /* with cfg->offload_dir and a disk tier: the bytes the folder can give its file (free bytes of
     * its file system, and stale scratch files a run there removes first); disk_short: 1 when the
     * file is larger (then fits is 0). disk_room 0: no folder, no disk tier, or unknown. */
    uint64_t disk_room;
    int disk_short;
    /* predictions, in seconds per optimizer step, from this machine's measurements: the
     * recomputation the policy adds (op costs timed as --recompute auto does), and the disk
     * tier's transfers at the bandwidth measured in cfg->offload_dir (bytes/s; 0 when no folder
     * was given or it could not be measured). Filled when cfg->offload is AUTO; -1 when not
     * predicted. */
    double pred_recompute_s, pred_disk_s, disk_read_bw, disk_write_bw;
    /* the step, predicted with those measurements as overlapped phases, not a sum: the
     * micro-batches' ops (every kind timed as above, backward included: pred_compute_s) beside
     * their transfers (parameters read, gradients written and read back), then the norm's read of
     * the gradients, then the optimizer's passes as their transfers alone (its arithmetic is not
     * measured): pred_step_s = max(compute, micro-batch transfers) + norm reads + optimizer
     * transfers. -1 when not predicted (the costs or the disk not measured). */
    double pred_compute_s, pred_step_s;
    char offload_why[320]; /* --offload auto: why it chose as it did ("" otherwise) */
    uint64_t flat_floats;  /* the flat parameter buffer's length, padding included (mw_zero_shard) */
    uint64_t expert_floats; /* ... of which the routed experts' (a layout's --ep: this rank's experts) */
    /* stored activations (cfg->act_offload, act_compress): the swap region of the disk tier's file
     * (in disk_file; its bytes move each way once per micro-batch, in disk_read and disk_write), and
     * per class of value what is stored how */
    int act_offload, act_compress, nact; /* act_offload: auto resolved */
    uint64_t act_disk;
    char act_why[200]; /* --act-offload auto: why it chose as it did ("" otherwise) */
    mw_act_class act[MW_ACT_CLASSES];
    /* a choice per block (--recompute auto with --act-compress-max or --act-offload auto, or
     * --act-layers): act_pin the --act-layers text that gives it ("" without one); act_choice why
     * (--recompute auto: the predicted seconds per micro-batch of recompute-only auto's choice and of
     * the one taken); the prediction of the plan's stored activations and recomputation, seconds
     * per micro-batch (-1 when not predicted): recomputation, (de)quantisation, the swaps'
     * transfers not hidden behind their block's compute, and their sum */
    char act_pin[MW_ACT_LAYERS_MAX];
    char act_choice[240];
    double pred_act_recompute_s, pred_act_compress_s, pred_act_swap_s, pred_act_s;
    /* a pipeline stage's placement repeats every this many micro-batches (1: 1F1B; --pp under
     * --vpp above 256 micro-batches; docs/cluster.md "Speed"); 0: best fit of every buffer */
    int period;
} mw_plan_summary;

/* Plans the training step of cfg under its recomputation policy: every buffer with its category
 * and lifetime in ops (embed; six forward ops per block; the head with its loss and gradient;
 * per block the recomputations and five backward ops; embed backward; optimizer), placed in one
 * arena where buffers never alive together share memory. mw_model_create executes the same
 * placement, so the estimate is the allocation, byte for byte. */
mw_status mw_plan(const mw_config *cfg, mw_plan_summary *out);
/* mw_plan, unless more than limit bytes (> 0; 0: no limit) are alive together at one op of the
 * walk: out->live_peak, a lower bound of the arena's peak (the arena holds every buffer alive at one
 * op apart), so the plan's peak is over limit too. Then the placement (most of a plan's time) is
 * skipped: *placed is 0 and out holds the walk's figures only (live_peak, category, flat_floats,
 * expert_floats; peak 0, no predictions). Otherwise *placed is 1 and out is mw_plan's, to the byte
 * (estimate --search drops a layout over the device this way; docs/cluster.md "The search"). */
mw_status mw_plan_within(const mw_config *cfg, uint64_t limit, mw_plan_summary *out, int *placed);
/* mw_plan for the data-parallel ranks of one layout's rank, one after the other: *ref (NULL at
 * first; the caller frees it with mw_plan_ref_free) keeps the first rank's placement, and a later
 * rank whose config differs only in cfg->rank takes it when that is exact (its ZeRO shard's
 * states, alive the whole step, differ in size and sat on top when placed: the buffers above
 * them move by the difference); otherwise it is placed, and a different config starts again.
 * The same summary as mw_plan's. */
typedef struct mw_plan_ref mw_plan_ref;
mw_status mw_plan_like(const mw_config *cfg, mw_plan_summary *out, mw_plan_ref **ref);
void mw_plan_ref_free(mw_plan_ref *ref);
/* mw_plan with every prediction made, whatever cfg->offload: the op costs timed on this machine and,
 * with a disk tier and cfg->offload_dir, the disk measured there (32 MiB written and read once per
 * process and folder) and the step predicted (pred_step_s). */
mw_status mw_plan_predict(const mw_config *cfg, mw_plan_summary *out);

/* Live bytes per category during each op of the step (for timelines). *ops is malloc'd. */
typedef struct mw_plan_op {
    char name[32]; /* phase: "fwd 3", "recompute 3", "bwd 0", "head+loss", "optimizer", ... */
    char op[16];   /* the op within it: "ln1+qkv", "attention", "gelu", "fc proj bwd", ... */
    uint64_t live[MW_CAT_COUNT];
    uint64_t disk_read, disk_write; /* bytes this op moves from and to the disk tier */
    /* stored activations (--act-compress, --act-offload): the compressed buffers' bytes alive
     * during the op (data and scales, part of live[MW_CAT_ACTS]), and the swapped values' bytes
     * held on the disk tier (out of memory) */
    uint64_t act_compressed, act_on_disk;
} mw_plan_op;
mw_status mw_plan_timeline(const mw_config *cfg, mw_plan_op **ops, int *nops);

/* Every planned buffer: its name ("h.3.qkv", "logits"), category, size, offset in the arena and
 * lifetime in ops (indices into mw_plan_timeline's list). *out is malloc'd. */
typedef enum mw_tier {
    MW_TIER_DEVICE = 0, /* the compute device's memory: host RAM on the CPU backend */
    MW_TIER_DISK,       /* a scratch file under --offload-dir */
    MW_TIER_COUNT
} mw_tier;
/* "device", "disk" */
const char *mw_tier_name(mw_tier t);

typedef struct mw_plan_buffer {
    char name[48];
    mw_category category;
    mw_tier tier;
    uint64_t bytes, offset;
    int first, last;
} mw_plan_buffer;
mw_status mw_plan_buffers(const mw_config *cfg, mw_plan_buffer **out, int *n);

/* ---- the model ----------------------------------------------------------------------------- */

typedef struct mw_model mw_model;

/* Plans, checks the budget and allocates every buffer of the training step. Returns
 * MW_ERR_BUDGET (nothing allocated) when the plan's peak exceeds cfg->budget; the message names
 * each category and its size. Parameters are zero: call mw_model_init or load them. */
mw_status mw_model_create(mw_model **out, const mw_config *cfg);
void mw_model_destroy(mw_model *m);
/* Initialisation from seed, deterministic for a seed and any thread count (with the parameters on
 * the disk tier a failed write is returned by the next training call). GPT-2: N(0, 0.02)
 * weights, residual projections scaled by 1/sqrt(2L), zero biases, unit LayerNorm gains. Llama
 * (as Hugging Face's): N(0, 0.02) for every matrix, unit RMSNorm gains. */
void mw_model_init(mw_model *m, uint64_t seed);
/* The same (the name from before the Llama family). */
void mw_model_init_gpt2(mw_model *m, uint64_t seed);
const mw_config *mw_model_config(const mw_model *m);
const mw_plan_summary *mw_model_plan(const mw_model *m);
/* The optimizer step (0-based) the next forward_backward calls belong to: --act-compress's
 * stochastic rounding draws from (seed, step, global micro-batch, block, value), so that a resumed
 * run rounds as an unbroken one, and a data-parallel one as one process with the same global batch
 * (the micro-batch as src/dist/zero.c deals them). The trainer calls it before each step's micro-batches. */
void mw_model_set_step(mw_model *m, int step);
/* Seconds the stored activations have cost since the model was made or last reset (reset 1 sets
 * them to 0 after reading): quantising and dequantising (--act-compress), and waiting for the
 * swaps' transfers (--act-offload; the I/O itself overlaps compute). 0 without them. */
void mw_model_act_seconds(mw_model *m, double *compress_s, double *swap_wait_s, int reset);

/* The parameter table: one entry per tensor, in storage order. */
typedef struct mw_param_info {
    const char *name; /* Hugging Face GPT-2 name, e.g. "h.0.attn.c_attn.weight" */
    int ndim;
    int dims[2];      /* row-major; 2-D weights are (out, in) */
    size_t numel;
    int decay;        /* 1 when weight decay applies (2-D weights) */
    float *data;      /* borrowed: the parameter */
    float *grad;      /* borrowed: its gradient */
    float *m, *v;     /* borrowed: AdamW's first and second moments; NULL when they live on the
                         disk tier (mw_model_offload_info; checkpoints stream them), when ranks
                         share them (--zero 1), and for every other optimizer (its state is not
                         per tensor) */
} mw_param_info;
int mw_model_num_tensors(const mw_model *m);
/* Fills info for tensor i (0 <= i < mw_model_num_tensors). Returns MW_ERR_ARG when out of range.
 * With the parameters on the disk tier (--offload all) the tensor's block is read in first: data
 * stays valid until a tensor of another block is asked for (the block is then written back, as
 * the caller may have changed it) or the next step; MW_ERR_IO when the transfer fails. grad is
 * NULL where the gradients are on disk or kept as bfloat16 (a block's, under MW_PRECISION_BF16),
 * m and v where the moments are. */
mw_status mw_model_tensor(const mw_model *m, int i, mw_param_info *info);

/* Forward of one micro-batch without gradients. inputs and targets are (B,T) token ids, copied
 * in. With targets, *loss is the mean cross-entropy. A training model keeps no logits: it needs
 * targets. An inference model keeps the (B,T,V) logits (mw_model_logits), targets or not.
 * Token ids are checked against the vocabulary (MW_ERR_ARG). */
mw_status mw_model_forward(mw_model *m, const int32_t *inputs, const int32_t *targets, float *loss);
/* The (B,T,V) logits of an inference model's last forward; NULL for a training model. */
const float *mw_model_logits(const mw_model *m);
/* Incremental decoding with the KV cache (inference models only): feeds token at position pos
 * (0 <= pos < ctx; positions must come in order from 0, and pos 0 resets the cache) and returns
 * the (V) logits of the next token, valid until the next call. Same math as mw_model_forward,
 * summed in another order (tests/test_kv.c bounds the difference). NULL on a bad token/pos. */
const float *mw_model_decode(mw_model *m, int32_t token, int pos);

/* Forward and backward of one micro-batch (training models): *loss is the mean cross-entropy,
 * and the gradients of the loss scaled by grad_scale (1/accum for accumulation) accumulate (+=)
 * into the parameter gradients. Recomputes what the plan's policy did not keep. */
mw_status mw_model_forward_backward(mw_model *m, const int32_t *inputs, const int32_t *targets,
                                    float grad_scale, float *loss);
void mw_model_zero_grad(mw_model *m);
/* Global L2 norm of the gradients, summed in fixed quanta so it does not depend on threads. With
 * the gradients on the disk tier it streams them; NaN when a transfer fails (the next call that
 * returns a status returns the failure). */
double mw_model_grad_norm(const mw_model *m);
/* One optimizer step (cfg->optim; the name is from when AdamW was the only one) at learning rate
 * lr: clips to cfg->grad_clip (if > 0) using grad_norm, applies weight decay to 2-D weights only,
 * then zeroes the gradients. t is the 1-based step.
 * With the moments on the disk tier it streams them; MW_ERR_IO (naming the file, offset, length
 * and errno) when a transfer fails, and then the parameters and moments are partly updated: the
 * model must be reloaded from a checkpoint. MW_OK otherwise. */
mw_status mw_model_adamw_step(mw_model *m, double lr, double grad_norm, int t);

/* Name and shape of tensor i of cfg's parameter table, without building a model. */
mw_status mw_config_tensor(const mw_config *cfg, int i, char *name, size_t name_len, int *ndim, int dims[2]);

/* The cosine learning rate with linear warm-up of 0-based step s. */
double mw_lr_at(const mw_config *cfg, int s);

/* The arena this model runs in: its mapped size (*peak) and the peak live bytes per category of
 * the placement it executes. These are the plan's figures by construction; the process's own
 * measurement is mw_peak_rss(). */
void mw_model_memory(const mw_model *m, uint64_t category[MW_CAT_COUNT], uint64_t *peak);

/* ---- token files and sets ---------------------------------------------------------------- */

/* A token file: a little-endian header, then the tokens. Version 3 (written): 64 bytes, magic
 * "MWTOKENS", u32 version 3, u32 token width 2 or 4, u64 token count, u32 vocabulary size,
 * u32 header size 64, char[16] tokenizer name (NUL-padded), u64 tokenizer hash, u32 CRC-32C of
 * the 56 bytes before it, u32 reserved 0; the tokens; then a u32 CRC-32C of each 64 KiB block of
 * the tokens' bytes (the last block may be shorter), checked whenever a block is read. Version 2
 * (still read): the same without the block checksums. Version 1 (still read): 32 bytes, the same
 * fields up to the vocabulary size, then u32 reserved 0; its tokenizer is unknown.
 * A token set PREFIX is either the files PREFIX.train.bin and PREFIX.val.bin, or the shards
 * PREFIX.manifest.json lists (src/data/tokset.h), read as one sequence per split. docs/data.md,
 * "Token file format" and "Token sets", has the tables. */
typedef struct mw_data mw_data;

/* Opens and checks a token file (header, sizes). MW_ERR_IO or MW_ERR_FORMAT with the path. */
mw_status mw_data_open(mw_data **out, const char *path);
/* Opens split "train" or "val" of the token set PREFIX: the shards PREFIX.manifest.json lists
 * when it exists, else the file PREFIX.<split>.bin. PREFIX may also be given as the path of the
 * manifest or of one of the two files. *out is NULL (MW_OK) when the set has no such
 * split. Every shard is opened and checked before this returns: a missing or truncated one, or
 * one whose count, checksum table or tokenizer differs from the manifest's, is an error naming
 * it. Shards are then opened as they are read, at most 64 at once. */
mw_status mw_data_open_set(mw_data **out, const char *prefix, const char *split);
/* The same for checking a set (memwall verify): a shard (or file) that fails its check at open
 * does not fail the open. It stays in the set with the manifest's count (a file of a two-file set:
 * 0) and its error, which mw_data_verify_shard and any read of it return. Only a manifest that
 * cannot be read, or no memory, fails. */
mw_status mw_data_open_set_lenient(mw_data **out, const char *prefix, const char *split);
void mw_data_close(mw_data *d);
uint64_t mw_data_count(const mw_data *d);
uint32_t mw_data_vocab(const mw_data *d);
int mw_data_width(const mw_data *d); /* bytes per token: 2 or 4 */
int mw_data_version(const mw_data *d); /* 1, 2 or 3 (a set's lowest) */
/* The tokenizer that made the ids (name "" for a version-1 file). Owned by d. */
const mw_tokenizer_id *mw_data_tokenizer(const mw_data *d);
/* The path it was opened with, or for a manifest's split "PREFIX.manifest.json (train)". */
const char *mw_data_path(const mw_data *d);
int mw_data_shards(const mw_data *d); /* 1 for a file */
const char *mw_data_shard_path(const mw_data *d, int i);
uint64_t mw_data_shard_count(const mw_data *d, int i);
/* version 3: the CRC-32C of shard i's block-checksum table (what a manifest records; 0 before) */
uint32_t mw_data_shard_crc(const mw_data *d, int i);
/* 1 when d is a manifest's train split whose first parts hold exactly `tokens` tokens and later
 * parts (prepare --append) more: a set grown since a checkpoint recorded that count. */
int mw_data_grown_from(const mw_data *d, uint64_t tokens);
/* Reads tokens [start, start+n) into out (widened to int32). Each 64 KiB block read is checked
 * against its checksum (version 3): MW_ERR_FORMAT naming the shard, the block and its bytes. */
mw_status mw_data_read(mw_data *d, uint64_t start, size_t n, int32_t *out);
/* Reads every block of shard i, checking checksums and the vocabulary; *bytes: the bytes read.
 * A block that fails its checksum does not stop the read: the error counts the shard's damaged
 * blocks and names the first (MW_ERR_FORMAT). */
mw_status mw_data_verify_shard(mw_data *d, int i, uint64_t *bytes);
/* Writes a version-3 token file atomically (temporary name, fsync, rename, fsync of the
 * directory). width is 2 or 4; tok names the tokenizer that made the ids (a valid name
 * required: MW_ERR_ARG otherwise). */
mw_status mw_data_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab,
                        int width, const mw_tokenizer_id *tok);
/* The same written as it comes: open creates PATH.tmp.PID (nothing at PATH yet); append adds
 * tokens (each checked against vocab: MW_ERR_ARG); commit
 * keeps the first n (<= count), writes the header and checksums, fsyncs and renames it to PATH
 * atomically, and frees w; finish does the same but leaves the whole file under its temporary
 * name (into tmp) for the caller to rename, and gives the CRC-32C of its checksum table (what a
 * manifest records); abort removes the temporary file and frees w. */
typedef struct mw_data_writer mw_data_writer;
mw_status mw_data_writer_open(mw_data_writer **w, const char *path, uint32_t vocab, int width,
                              const mw_tokenizer_id *tok);
mw_status mw_data_writer_append(mw_data_writer *w, const int32_t *tokens, size_t n);
uint64_t mw_data_writer_count(const mw_data_writer *w);
const char *mw_data_writer_tmp(const mw_data_writer *w); /* its temporary file's name */
mw_status mw_data_writer_commit(mw_data_writer *w, uint64_t n);
mw_status mw_data_writer_finish(mw_data_writer *w, uint64_t n, char *tmp, size_t tmplen, uint32_t *table_crc);
void mw_data_writer_abort(mw_data_writer *w);
/* Cuts the version-3 file at path (not yet renamed into place) to its first n tokens in place:
 * checksums and header rewritten, fsynced; *table_crc as finish gives it. */
mw_status mw_data_file_cut(const char *path, uint64_t n, uint32_t *table_crc);

/* Deterministic window sampler: B windows of T+1 tokens at uniformly random offsets. */
typedef struct mw_loader {
    mw_data *data;
    uint64_t rng;
} mw_loader;
void mw_loader_init(mw_loader *l, mw_data *d, uint64_t seed);
/* Fills inputs and targets (B,T) from B random windows. */
mw_status mw_loader_next(mw_loader *l, int B, int T, int32_t *inputs, int32_t *targets,
                         int32_t *scratch /* B*(T+1) */);
/* Advances l past B windows as mw_loader_next would, reading nothing. */
mw_status mw_loader_skip(mw_loader *l, int B, int T);

/* ---- training ------------------------------------------------------------------------------ */

/* The model's clock, milliseconds since it was created (a step's figures are the difference of two
 * readings; mw_train_step fills its report so). compute: inside the ops and the optimizer's chunks.
 * io_read, io_write, io_busy: while at least one read, write, or either of the disk tier was in
 * flight (submission to completion: the union of those intervals, not their sum). io_wait: while
 * the step's thread was blocked waiting for the disk tier (a prefetch or write-behind that had not
 * finished). The io figures are 0 without a disk tier. */
typedef struct mw_model_clock {
    double compute_ms, io_read_ms, io_write_ms, io_busy_ms, io_wait_ms;
} mw_model_clock;
void mw_model_times(const mw_model *m, mw_model_clock *t);

typedef struct mw_step_report {
    int step;          /* 1-based */
    float loss;        /* mean over the step's micro-batches */
    double lr, grad_norm, ms, tokens_per_s;
    mw_model_clock clock; /* the step's part of mw_model_times (the step, validation excluded) */
    /* of ms and clock, the gradient norm's and the optimizer's passes (wall ms, and their clock): the
     * rest is the micro-batches'. opt_split 1 when they are (one process); 0 under --pp and data
     * parallelism, whose steps are not split (opt_ms and opt_clock 0). */
    int opt_split;
    double opt_ms;
    mw_model_clock opt_clock;
    int has_val;
    float val_loss;
} mw_step_report;

/* Where a run stands between steps: enough, with the model's parameters and AdamW moments, to
 * continue it bit for bit. */
typedef struct mw_run_state {
    int step;            /* optimizer steps completed */
    uint64_t loader_rng; /* the training loader's position */
} mw_run_state;
/* A fresh run: step 0, the loader seeded from cfg->seed. */
void mw_run_state_init(mw_run_state *st, const mw_config *cfg);

/* Called after every step; a status other than MW_OK stops training and is returned. */
typedef mw_status (*mw_step_fn)(const mw_step_report *r, const mw_run_state *st, void *user);
/* Fills one micro-batch: inputs and targets (B,T); scratch has room for B*(T+1) tokens. All three
 * NULL (data parallelism: another rank's micro-batch): advances past one micro-batch as filling it
 * would, without reading it. */
typedef mw_status (*mw_batch_fn)(void *ctx, int32_t *inputs, int32_t *targets, int32_t *scratch);

/* One optimizer step s (0-based): cfg->accum micro-batches drawn from next, forward, backward,
 * gradient norm, clipping, AdamW at mw_lr_at(s). Gradients must be zero on entry (they are
 * after mw_model_create and after every step). Fills r (no validation loss). */
mw_status mw_train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r);

/* Trains from st->step to cfg->steps on train, evaluating on val (may be NULL) every
 * cfg->eval_every steps and at the end; st advances with every step. Calls fn (may be NULL)
 * after every step. */
mw_status mw_train(mw_model *m, mw_data *train, mw_data *val, mw_run_state *st, mw_step_fn fn,
                   void *user);

/* ---- data parallelism ------------------------------------------------------------------------ */

/* The collectives data parallelism needs, over the ranks of one run (src/dist/comm_mpi.c gives
 * MPI's; a test may give its own). Counts and displacements are in elements; every call is
 * collective, its order the same on every rank. MPI's reductions are never used: the sums are
 * memwall's own, in a fixed order (src/dist/zero.c). */
typedef struct mw_comm mw_comm;
struct mw_comm {
    int rank, size;
    uint64_t sent; /* bytes this rank has sent, to others (the implementation counts them) */
    /* rank i sends scount[j] floats at send + sdispl[j] to rank j, and receives rcount[j] floats
     * from rank j at recv + rdispl[j] */
    mw_status (*alltoallv)(mw_comm *c, const float *send, const size_t *scount, const size_t *sdispl,
                           float *recv, const size_t *rcount, const size_t *rdispl);
    /* in place: elements [displ[j], displ[j] + count[j]) of buf (elem bytes each) from rank j to
     * every rank */
    mw_status (*allgatherv)(mw_comm *c, void *buf, size_t elem, const size_t *count, const size_t *displ);
    /* allgatherv started and left to run (*req: its handle), then test (*done: 1 when complete; it
     * lets the transfer progress) or wait for it: a gather that overlaps computation. May be NULL
     * (then allgatherv runs at once). */
    mw_status (*iallgatherv)(mw_comm *c, void *buf, size_t elem, const size_t *count, const size_t *displ, void **req);
    mw_status (*test)(mw_comm *c, void *req, int *done);
    mw_status (*wait)(mw_comm *c, void *req);
    /* ---- sub-groups and point-to-point (parallel layouts: src/dist/grid.c); may be NULL in a
     * communicator that gives none (then a layout with more than one group is refused) ---- */
    /* Collective over c: a communicator over the ranks of c that gave the same color (>= 0),
     * ranked by key (ties by their rank in c), into *out; free it with destroy. MW_ERR_* on a
     * failure of the implementation. */
    mw_status (*split)(mw_comm *c, int color, int key, mw_comm **out);
    /* Frees a communicator split gave; NULL and the world's: nothing. */
    void (*destroy)(mw_comm *c);
    /* bytes of buf to rank peer of c; tag (0 .. 32000) tells one message from another between the
     * same two ranks, whose messages of a tag arrive in the order sent. Blocking: returns when buf
     * may be reused. recv: the message of exactly bytes from rank peer with tag into buf (a message
     * of another length is MW_ERR_ARG). */
    mw_status (*send)(mw_comm *c, const void *buf, size_t bytes, int peer, int tag);
    mw_status (*recv)(mw_comm *c, void *buf, size_t bytes, int peer, int tag);
    /* send started and left to run: buf must stay as it is until test gives *done 1 or wait
     * returns (c->test and c->wait take *req as they take iallgatherv's). */
    mw_status (*isend)(mw_comm *c, const void *buf, size_t bytes, int peer, int tag, void **req);
};
/* The rank grid of a parallel layout of world = T P D ranks, Megatron-LM's order: the tensor rank
 * fastest, then the data-parallel replica, then the pipeline stage: rank = t + T (d + D p). So a
 * tensor-parallel group is T consecutive ranks, and a stage's ranks are T D consecutive ones. */
typedef struct mw_grid {
    int tp, pp, dp; /* T, P, D */
    int t, p, d;    /* this rank's coordinates */
    /* its groups (src/dist/grid.c): the ranks that differ from this one in t alone (tp_comm, ranked
     * by t), in p alone (pp_comm, by p), in d alone (dp_comm, by d). A group of one rank: NULL; a
     * group of every rank: the world's communicator itself; otherwise a split of it. */
    mw_comm *tp_comm, *pp_comm, *dp_comm;
} mw_grid;
/* rank's coordinates (0 <= rank < T P D) */
void mw_grid_coords(int rank, int tp, int pp, int dp, int *t, int *p, int *d);
/* the rank of coordinates (t, p, d) */
int mw_grid_rank(int t, int p, int d, int tp, int pp, int dp);
/* Collective over world: g for world->rank with its groups. MW_ERR_ARG when tp pp dp is not
 * world->size, or when a group is needed and the communicator gives no split; MW_ERR_* of the
 * split. On failure g holds no group. */
mw_status mw_grid_create(mw_comm *world, int tp, int pp, int dp, mw_grid *g);
/* Frees the groups create split (NULL: nothing). */
void mw_grid_destroy(mw_grid *g);
/* Binds the ranks of a data-parallel model (cfg.dp): comm's size and rank must be cfg.world and
 * cfg.rank. mw_train and mw_train_step then run the data-parallel step. */
mw_status mw_model_set_comm(mw_model *m, mw_comm *comm);
/* Binds the tensor-parallel group of a --tp model (cfg.tp > 1) that also has data-parallel replicas
 * or pipeline stages (mw_grid's tp_comm; its size must be cfg.tp, at most 64): the all-reduces and
 * the vocabulary-parallel loss run over it, the replicas' sums over mw_model_set_comm's, the stages'
 * messages over mw_model_set_pipe's (src/dist/tp.c). A --tp model alone may give its group to
 * mw_model_set_comm instead. MW_ERR_ARG when the sizes disagree. */
mw_status mw_model_set_tp(mw_model *m, mw_comm *tcomm);
mw_comm *mw_model_comm(const mw_model *m);
/* Binds the stages of a pipeline stage's model (cfg.pp > 1): pcomm's size and rank must be cfg.pp and
 * cfg.pp_stage, with point-to-point messages (mw_grid's pp_comm). mw_train, mw_train_step and
 * mw_evaluate then run the stage's part, collectively with the other stages (src/dist/pipeline.c). */
mw_status mw_model_set_pipe(mw_model *m, mw_comm *pcomm);
/* CRC-32C of the single-process flat parameter buffer (padding included): a pipeline stage's run
 * of it combined over the stages in order (collective over them), so that every layout of one
 * model reports the same value for the same bits. MW_ERR_ARG when the parameters are not whole in
 * memory (--offload all, --zero 3). */
mw_status mw_model_params_crc(mw_model *m, uint32_t *crc);
/* A pipeline stage's time in its training steps so far, and the part of it spent waiting for the
 * other stages' messages (receives, and the wait for a send's end): the measured bubble (plus the
 * transfers). The first step is not counted (the transports connect). 0 and 0 without a pipeline. */
void mw_model_pipe_times(const mw_model *m, double *wait_ms, double *step_ms);
/* The checkpoint of a data-parallel model, written by every rank at once (collective): rank 0
 * creates the temporary file under dir (which every rank must see), each rank writes its shard's
 * pieces of the parameters and the optimizer state where the single-process format puts them,
 * rank 0 then writes the records and each array's CRC combined from its pieces', and renames it.
 * The same bytes as mw_ckpt_save's of the same state, so it loads at any world size (every rank
 * loads the whole file, keeping its shard). Without ranks (no comm), mw_ckpt_save. */
mw_status mw_ckpt_save_ranks(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                             size_t path_len);
/* Elements [lo, hi) of the flat parameter buffer of n floats whose optimizer state rank r of world
 * holds under ZeRO stage 1 (whole quanta of the gradient norm's partial sums). */
void mw_zero_shard(uint64_t n, int world, int r, uint64_t *lo, uint64_t *hi);
/* Mean loss over the first n_batches consecutive batches of B (T+1)-token windows of d. When d
 * holds fewer whole batches than that, every target after them is scored too, in one more batch
 * of the windows left (the last window shorter), so that the whole of d is: the mean is then
 * over the targets (count - 1 of them). *tokens (may be NULL): the targets scored. MW_ERR_ARG when
 * d holds fewer than 2 tokens. */
mw_status mw_evaluate_tokens(mw_model *m, mw_data *d, int n_batches, float *loss, uint64_t *tokens);
mw_status mw_evaluate(mw_model *m, mw_data *d, int n_batches, float *loss); /* tokens NULL */
/* Progress of a long phase: mw_evaluate (so mw_train's validation too) calls fn(user, 0, total)
 * before its first batch and fn(user, done, total) after each. fn NULL (the default): none. */
typedef void (*mw_progress_fn)(void *user, int done, int total);
void mw_model_set_progress(mw_model *m, mw_progress_fn fn, void *user);

/* ---- checkpoints --------------------------------------------------------------------------- */

/* A checkpoint is one file, DIR/step-NNNNNNNN.mwck (8 digits or more): a header, the full configuration and run
 * state as text, then every tensor's parameters and AdamW moments (version 1), or its parameters
 * and after them the optimizer's state as it is stored (version 2: every other --optim), each
 * block with its CRC-32C, and a trailer that pins the file's length. Format in docs/checkpoint.md. */
typedef struct mw_ckpt_info {
    mw_config cfg;          /* the configuration the run was started with; cfg.tokenizer is
                               the model's tokenizer (name "" when the file predates it) */
    mw_run_state state;     /* where it stood */
    uint64_t train_tokens;  /* tokens of the training split it read (a resume on a set grown since continues: docs/data.md, "Token sets") */
    int has_run_keys;       /* 1: cfg's save_every, keep, budget and recompute come from the file;
                               0: an older checkpoint without them (cfg holds their defaults) */
    char numerics[8];       /* the numerics family of the products that trained it (mw_numerics_family):
                               "amx", or "fma" (also for a file that predates the key) */
} mw_ckpt_info;

/* Writes DIR/step-<st->step>.mwck: to a temporary name, fsync, rename, fsync DIR. The tensors
 * stream from the model's memory (no copy); a crash at any point leaves earlier checkpoints
 * valid. Creates DIR if needed. The final path goes to path (may be NULL). */
mw_status mw_ckpt_save(const char *dir, const mw_model *m, const mw_run_state *st,
                       uint64_t train_tokens, char *path, size_t path_len);
/* Deletes all but the newest keep checkpoints in DIR (never the one of step keep_step), and
 * stale temporary files. */
mw_status mw_ckpt_prune(const char *dir, int keep, int keep_step);
/* Reads the whole file and checks every byte (structure, checksums, length) with a fixed 1 MiB
 * buffer. MW_ERR_FORMAT (corrupt, truncated, another version) or MW_ERR_IO, naming the file. */
mw_status mw_ckpt_verify(const char *path, mw_ckpt_info *info);
/* Verifies, checks that the model has the checkpoint's shape (MW_ERR_ARG naming the difference),
 * then loads parameters and moments into m. On failure the model's contents are unspecified. */
mw_status mw_ckpt_load(const char *path, mw_model *m, mw_ckpt_info *info);
/* As mw_ckpt_load, for the parameters alone: the model's optimizer state is left as it is (zero
 * after mw_model_create), so a run may continue under another --optim (--reset-optimizer). */
mw_status mw_ckpt_load_params(const char *path, mw_model *m, mw_ckpt_info *info);
/* The newest checkpoint of DIR that verifies; path[0] = 0 and MW_OK when there is none.
 * Invalid ones are skipped; *skipped (may be NULL) counts them. */
mw_status mw_ckpt_latest(const char *dir, char *path, size_t path_len, mw_ckpt_info *info,
                         int *skipped);

/* ---- Hugging Face weights (safetensors): GPT-2 and the Llama family ---------------------- */

/* The shape of a Hugging Face checkpoint. PATH is a directory (its model.safetensors, else its
 * model.safetensors.index.json and the shards that names), a .safetensors file or an index.json.
 * The family by the tensors: model.embed_tokens.weight is Llama, wte.weight GPT-2.
 * GPT-2: n_layer, n_embd, vocab and ctx from its tensors' shapes. config is 1 when a config.json
 * lies beside it (read whole, at most 16 MiB); n_head comes from it, 0 when there is none or it
 * gives no n_head. A config.json that is malformed, not model_type "gpt2", whose n_layer,
 * n_embd, vocab_size or n_positions differ from the weights, or that asks for math memwall's GPT-2
 * does not compute (another activation_function, layer_norm_epsilon, n_inner or head tying,
 * scale_attn_weights false, scale_attn_by_inverse_layer_idx or add_cross_attention true) is
 * MW_ERR_FORMAT naming the key and its value. Names may carry a "transformer." prefix.
 * Llama (model_type "llama", or "mistral"): config.json is required; it gives the heads,
 * key/value heads, ctx (max_position_embeddings), rope_theta, rms_norm_eps, tied
 * (tie_word_embeddings) and Mistral's sliding_window, with transformers' defaults; every tensor
 * the configuration implies must be there with its shape, and options memwall's Llama does not
 * compute are refused (rope_scaling or rope_parameters other than the default RoPE, biases,
 * another hidden_act or head_dim), each MW_ERR_FORMAT in one line naming the key or the tensor.
 * mw_hf_load refuses a model whose ctx exceeds sliding_window (attention within it is exact).
 * The deepseek family (model_type "deepseek_v2", "deepseek_v3", "mixtral"; arch MW_ARCH_DEEPSEEK):
 * config.json is required and gives every field below as the family's mw_config has it; the keys
 * whose defaults differ between DeepSeek's code and transformers' must be given; what the family
 * does not compute is refused naming the key (docs/hf.md); every tensor the configuration
 * implies must be there with its shape, and a tensor it does not imply is refused. */
typedef struct mw_hf_shape {
    int n_layer, n_head, n_embd, vocab, ctx;
    int config;
    int arch;                   /* MW_ARCH_GPT2, MW_ARCH_LLAMA or MW_ARCH_DEEPSEEK */
    int n_kv_head, ffn, tied;   /* Llama, deepseek (GPT-2: 0, 0, 1) */
    double rope_theta, norm_eps; /* Llama; GPT-2: 0, and norm_eps its layer_norm_epsilon unless 1e-05 */
    int sliding_window;          /* Mistral: attention's window; a model's ctx must not exceed it (0: none) */
    /* the deepseek family's fields, as mw_config's (0 elsewhere) */
    int n_experts, n_experts_tok, n_shared, moe_ffn, first_dense, moe_gate, norm_topk;
    int q_lora_rank, kv_lora_rank, qk_rope_dim, qk_nope_dim, v_head_dim;
    double routed_scale;
} mw_hf_shape;
mw_status mw_hf_inspect(const char *path, mw_hf_shape *shape);
/* Loads the weights (PATH as for mw_hf_inspect) into m's parameters, each read from its file
 * straight into the parameter through a fixed buffer (GPT-2's Conv1D (in,out) weights transposed
 * to (out,in); F32, F16, BF16 and F64 converted exactly). The moments are left as they are. Extra
 * tensors (attention masks, a tied lm_head) are ignored; a missing or misshapen one is
 * MW_ERR_FORMAT naming it. A Llama or deepseek-family model also needs config.json to be its
 * configuration (all but ctx, which must not exceed a Mistral or Mixtral sliding_window; and the
 * deepseek family's capacity factor, which no config.json gives), and a deepseek-family checkpoint
 * is inspected whole first (no tensor it does not imply); a config.json beside GPT-2 weights is
 * checked as mw_hf_inspect checks it. */
mw_status mw_hf_load(const char *path, mw_model *m);
/* Writes m's parameters as a Hugging Face model.safetensors (F32, names sorted, {"format": "pt"}
 * metadata; GPT-2 in Conv1D layout) and config.json beside it (GPT2Config, or LlamaConfig for
 * LlamaForCausalLM), atomically. Streams with a fixed 1 MiB buffer. No tokenizer files are written
 * (mw_hf_export_ckpt_tokenizer writes them), and a directory holding one is refused. */
mw_status mw_hf_export(const mw_model *m, const char *out);
/* (MW_ERR_ARG for a model with its parameters on the disk tier, --offload all: export its
 * checkpoint with mw_hf_export_ckpt.) */
/* The same from a checkpoint file, after verifying it, without building a model. */
mw_status mw_hf_export_ckpt(const char *ckpt, const char *out);
/* The same, with the tokenizer files of `tokenizer` (NULL: none) beside config.json, so that
 * mw_hf_inspect's caller finds the model's tokenizer (docs/hf.md): tokenizer is a directory or a
 * tokenizer.json as mw_tokenizer_load takes it; its files are written under Hugging Face's names
 * (GPT-2's encoder.json + vocab.bpe as vocab.json + merges.txt; tokenizer.json and the
 * tokenizer_config.json beside it). MW_ERR_ARG, before anything is written, when its identity is
 * not the one the checkpoint records (unless that is unknown) or it has more tokens than the
 * model. Every export refuses (MW_ERR_ARG) a directory holding a tokenizer file (encoder.json,
 * vocab.bpe, vocab.json, merges.txt, tokenizer.json, tokenizer_config.json) it does not write. */
mw_status mw_hf_export_ckpt_tokenizer(const char *ckpt, const char *out, const char *tokenizer);

/* The disk tier of a model (cfg->offload resolved to other than none): its scratch file, the I/O
 * engine ("io_uring" or "threads", and why not io_uring), whether O_DIRECT took, the stale files
 * of killed runs removed when it was created, and the bytes moved so far. Returns 0 (info zeroed)
 * when the model keeps every state in memory, else 1. */
typedef struct mw_offload_report {
    char path[4096], engine[16], note[256];
    int direct, stale;
    uint64_t stale_bytes, file_bytes, bytes_read, bytes_written;
} mw_offload_report;
int mw_model_offload_info(const mw_model *m, mw_offload_report *info);

/* Process peak resident set size in bytes (getrusage). */
uint64_t mw_peak_rss(void);

#ifdef __cplusplus
}
#endif
#endif
