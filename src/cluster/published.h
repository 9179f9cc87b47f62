/* Textbook memory formulas, each written out as its source states it and named by that source:
 * the ZeRO paper's Table 1, DeepSpeed's model-states estimators, Korthikanti et al.'s per-layer
 * activations, Megatron-LM's theoretical memory (with the uneven pipeline split and the expert
 * sharding its issues asked for), and the DeepSeek-V3 layout of NVIDIA's Megatron-Core MoE report.
 *
 * These are the published figures memwall is checked against (tests/test_cluster.c) and prints
 * beside its own (`memwall estimate --published`); they are not memwall's plan, which is the walk
 * over the step graph (src/memory/planner.c). Pure arithmetic: calls only src/core (status). */
#ifndef MW_PUBLISHED_H
#define MW_PUBLISHED_H
#include <stdint.h>

#include "memwall.h"

/* ---- ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
 * Models", SC20, arXiv:1910.02054), Section 5 and Table 1. Model states per device in bytes for
 * mixed-precision Adam: 2 bytes of fp16 parameters and 2 of fp16 gradients per parameter, and K
 * bytes of optimizer states (K = 12: fp32 master, momentum, variance), with psi parameters over
 * nd data-parallel devices:
 *   baseline                (2 + 2 + K) psi
 *   P_os   (stage 1)        (2 + 2) psi + K psi / nd
 *   P_os+g (stage 2)        2 psi + (2 + K) psi / nd
 *   P_os+g+p (stage 3)      (2 + 2 + K) psi / nd
 * The table prints decimal GB. */
typedef struct {
    double none, os, os_g, os_g_p; /* bytes per device */
} mw_published_zero;

/* MW_ERR_ARG when psi <= 0, k < 0 or nd < 1. */
mw_status mw_published_zero_table1(double psi, double k, int nd, mw_published_zero *out);

/* ---- DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py,
 * estimate_zero2_model_states_mem_needs; deepspeed/runtime/zero/stage3.py,
 * estimate_zero3_model_states_mem_needs), bytes, with Python's int() truncation where the source
 * has it. total_gpus = nodes * gpus_per_node.
 *   ZeRO-2, optimizer offloaded:  gpu = 2 P;                cpu = P * max(4 total_gpus, 16) * buf
 *   ZeRO-2, on the GPU:           gpu = 4 P + int(16 P / total_gpus);
 *                                 cpu = P * 4 * gpus_per_node * buf
 *   ZeRO-3 (largest layer Lp, gpus_factor = 1 / nodes):
 *     params and optimizer offloaded:  gpu = 4 Lp;  cpu = P * 18 * gpus_factor * buf (zero_init),
 *                                      else P * max(4 gpus_per_node, 18 gpus_factor) * buf
 *     optimizer offloaded:             gpu = 4 Lp + int(2 P / total_gpus);
 *                                      cpu = P * 16 * gpus_factor * buf (zero_init),
 *                                      else P * max(4 gpus_per_node, 16 gpus_factor) * buf
 *     on the GPU:                      gpu = 4 Lp + int(18 P / total_gpus);
 *                                      cpu = Lp * 4 * gpus_per_node * buf (zero_init),
 *                                      else P * 4 * gpus_per_node * buf
 * buf is additional_buffer_factor (1.5 by default there). The cpu figure is int() of the product. */
typedef struct {
    uint64_t gpu, cpu; /* bytes */
} mw_published_ds;

/* MW_ERR_ARG when params == 0 or a count < 1. */
mw_status mw_published_ds_zero2(uint64_t params, int gpus_per_node, int nodes, int offload_optimizer,
                                double buffer_factor, mw_published_ds *out);
mw_status mw_published_ds_zero3(uint64_t params, uint64_t largest_layer, int gpus_per_node, int nodes,
                                int offload_optimizer, int offload_params, int zero_init,
                                double buffer_factor, mw_published_ds *out);

/* ---- Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
 * (MLSys 2023, arXiv:2205.05198), Section 4 and Table 2: activation bytes one transformer layer
 * keeps for backward, 16-bit activations, s sequence length, b micro-batch, h hidden size, a
 * attention heads, t tensor-parallel size:
 *   none (no parallelism)        s b h (34 + 5 a s / h)
 *   tp                           s b h (10 + 24 / t + 5 a s / (h t))
 *   tp_sp                        s b h / t (34 + 5 a s / h)
 *   tp_selective                 s b h (10 + 24 / t)
 *   tp_sp_selective              s b h / t * 34
 *   full (recompute everything)  2 s b h          (only the layer's input is kept) */
typedef enum {
    MW_ACT_NONE = 0,
    MW_ACT_TP,
    MW_ACT_TP_SP,
    MW_ACT_TP_SELECTIVE,
    MW_ACT_TP_SP_SELECTIVE,
    MW_ACT_FULL,
    MW_ACT_NMODES
} mw_published_act_mode;

const char *mw_published_act_mode_name(mw_published_act_mode m);

/* Bytes per layer (exact in double for the configurations below). MW_ERR_ARG on a bad mode or a
 * size < 1. */
mw_status mw_published_act_layer(double s, double b, double h, double a, double t, mw_published_act_mode m,
                                 double *bytes);

/* The configurations of Korthikanti et al.'s Table 3 (s = 2048, micro-batch 1, t = 8). The first
 * pipeline stage holds L / p layers and keeps p micro-batches in flight under 1F1B, so its
 * transformer-layer activations are L times the per-layer figure, whatever p is (their Section
 * 4.2.3; embeddings, the last layer-norm and the output layer are left out, as the paper does). */
typedef struct {
    const char *name;
    int heads, hidden, layers, tp, pp, gpus;
} mw_published_korthikanti_cfg;

int mw_published_korthikanti_count(void);
const mw_published_korthikanti_cfg *mw_published_korthikanti(int i);

/* ---- Megatron-LM's theoretical memory (megatron/training/theoretical_memory_usage.py,
 * compute_weight_and_optimizer_memory). Bytes per parameter: 18 (bf16 parameter 2 + fp32 gradient 4 +
 * fp32 master, momentum and variance 12), or 6 + 12 / dp with the distributed optimizer, which
 * shards the 12 over the data-parallel group. MW_ERR_ARG when dp < 1. */
mw_status mw_published_megatron_bytes_per_param(int distributed_optimizer, int dp, double *bytes);

/* A dense (non-MoE) transformer layer as that file counts it:
 *   2 h h ((1 + groups / heads) * kv_channels * heads / h)     attention (q, k, v, o)
 *   + 2 h (ffn * (swiglu ? 3/2 : 1) + norm)                    MLP and the two norms
 * norm = 1 for RMSNorm, 2 for LayerNorm (weight and bias). Exact integer arithmetic (the Python
 * gives the same value as a float); MW_ERR_ARG when a count is zero or heads % groups != 0. */
typedef struct {
    uint64_t hidden, ffn, heads, groups, kv_channels, vocab;
    int swiglu, rmsnorm, tied_embeddings;
} mw_published_megatron_dense;

mw_status mw_published_megatron_dense_layer(const mw_published_megatron_dense *c, uint64_t *params);

/* Parameters (before the tensor-parallel division) of each pipeline stage for an explicit
 * per-stage layer count layers[0..pp-1]: a stage holds its layers; the first stage the input
 * embedding (vocab * hidden); the last stage the final norm and the output embedding (its own
 * matrix when untied, or the copy Megatron keeps of the tied one when pp > 1). This is what
 * Megatron-Bridge's fix for uneven pipelines (NVIDIA-NeMo/Megatron-Bridge PR 5077) counts;
 * Megatron-LM's file divides the block by pp instead (mw_published_megatron_even_shard).
 * out[0..pp-1]; MW_ERR_ARG on a zero pp. */
mw_status mw_published_megatron_stages(const mw_published_megatron_dense *c, const int *layers, int pp,
                                       uint64_t *out);

/* Megatron-LM's "most loaded shard" before the TP division: block / pp + embedding (+ the output
 * embedding when untied and pp == 1), block = layers * layer + final norm. Double, as the source. */
mw_status mw_published_megatron_even_shard(const mw_published_megatron_dense *c, int layers, int pp,
                                           double *params);

/* Mixture-of-experts model states per GPU with experts sharded by expert parallelism, the form of
 * Megatron-Bridge's estimate (tests/unit_tests/training/utils/test_theoretical_memory_utils.py,
 * test_moe_estimate_accounts_for_expert_parallel_sharding), which the Megatron-LM issue 4050
 * ("MoE layer theoretical memory calculation needs to account for ETP/EDP") asks for:
 *   dense part  (attention, norms, dense layers, embeddings) / tp   * (6 + 12 / (dp * cp))
 *   routed part (moe_layers * experts * 2 h moe_ffn (* 3/2 swiglu)) / (ep * etp)
 *                                                                 * (6 + 12 / edp),
 *   edp = world / (ep * etp * pp), world = tp * cp * dp * pp.
 * The legacy Megatron-LM formula divides every parameter by tp and uses 6 + 12 / dp
 * (legacy_bytes). Layers follow moe_layer_freq: layer i is MoE when i % freq == 0. */
typedef struct {
    mw_published_megatron_dense dense;
    int layers, moe_freq;
    uint64_t experts, moe_ffn, shared_ffn;
    int tp, pp, cp, dp, ep, etp;
} mw_published_megatron_moe;

typedef struct {
    uint64_t dense_params, routed_params;         /* the whole model */
    double dense_per_gpu, routed_per_gpu;         /* parameters on one GPU */
    double dense_bytes_per_param, routed_bytes_per_param;
    double bytes;                                 /* the two parts together */
    double legacy_bytes;                          /* Megatron-LM's formula, no EP */
} mw_published_megatron_moe_result;

mw_status mw_published_megatron_moe_states(const mw_published_megatron_moe *c,
                                           mw_published_megatron_moe_result *r);

/* ---- DeepSeek-V3 in the layout of NVIDIA's "Scalable Training of Mixture-of-Experts Models with
 * Megatron Core" (arXiv:2603.07685, Table 3): BF16, PP4 x VPP4 x EP64 on 256 GPUs (TP 1, so
 * DP 64 for the dense parameters and EDP = 256 / (4 * 64) = 1 for the experts).
 * The report prints 36.4 (weights and gradients), 32.1 (master weights and optimizer) and 131.0
 * (activations) GB per GPU. The first two are reproduced under these stated assumptions:
 *   - parameters counted as Megatron-LM's theoretical_memory_usage.py counts an MLA + MoE layer
 *     (no router weights): per MoE layer, attention
 *       q_lora (h + heads (qk_head + rope) + 1) + kv_lora (h + heads (qk_head + v_head) + 1)
 *       + h rope + heads v_head h,
 *     shared expert 2 h (3/2 shared_ffn) and two RMSNorms 2 h; per routed expert 3 h moe_ffn;
 *   - the GPU counted is one holding 16 MoE layers (4 virtual stages of 4 layers) and no
 *     embedding;
 *   - 6 bytes per parameter for weights and gradients (bf16 weight + fp32 gradient), and 12 for
 *     master weights and Adam's moments, sharded by the distributed optimizer over DP = 64 for the
 *     dense parameters and EDP = 1 for the experts;
 *   - "GB" is GiB (2^30 bytes): 36.417 and 32.146 GiB; in 10^9 bytes they would be 39.1 and 34.5.
 * The activations (131.0) are reproduced to 0.44% (130.43 GiB) under the stated assumptions of
 * mw_published_mcore_moe_acts below, not to the printed precision (docs/cluster.md). */
typedef struct {
    uint64_t hidden, heads, q_lora_rank, kv_lora_rank, qk_head_dim, qk_rope_dim, v_head_dim;
    uint64_t experts, moe_ffn, shared_ffn;
} mw_published_mla_moe;

/* The DeepSeek-V3 shape (config.json of deepseek-ai/DeepSeek-V3). */
extern const mw_published_mla_moe mw_published_deepseek_v3;

/* Non-expert parameters of one MoE layer (attention, shared expert, norms), and one routed expert. */
uint64_t mw_published_mla_moe_layer_dense(const mw_published_mla_moe *c);
uint64_t mw_published_mla_moe_expert(const mw_published_mla_moe *c);

typedef struct {
    uint64_t dense_params, expert_params; /* on the GPU */
    double weights_grads, master_optim;   /* bytes */
} mw_published_mcore_states;

/* Model states of a GPU holding moe_layers MoE layers with experts / ep experts each, dense
 * parameters sharded over dp and experts over edp by the distributed optimizer. */
mw_status mw_published_mcore_moe_states(const mw_published_mla_moe *c, int moe_layers, int ep, int dp,
                                        int edp, mw_published_mcore_states *out);

/* ---- The same report's activations (Table 3: 131.0 GB per GPU), under these assumptions (the
 * report states only BF16 and PP4 x VPP4 x EP64 on 256 GPUs beside the table, Section 4.1.1):
 *   - micro-batch 1, sequence 4096, TP 1 (no sequence or context parallelism): the report's
 *     final configuration of this layout (Table 17, GB200: TP1 PP4 EP64 VPP4, GBS/MBS/SeqLen
 *     8192/1/4096);
 *   - no recomputation and the standard permutation: Table 4's recomputation and Section
 *     4.1.2's Memory-Efficient Permutation (26.3 GB saved "for DeepSeek-V3 (Table 3)") are
 *     reductions from this figure;
 *   - per MoE layer and micro-batch the tensors Megatron-Core's modules keep for backward, in BF16
 *     (the attention's log-sum-exp in fp32): the attention's input RMSNorm input and output (the
 *     down-projections' input), the q and kv latents' RMSNorm inputs and outputs (the up-
 *     projections' inputs), q, k and v as the fused attention keeps them (heads x (nope + rope),
 *     heads x (nope + rope), heads x v_head) and its output (o_proj's input) and log-sum-exp; the
 *     MLP's RMSNorm input and output (the router's, the shared expert's and the dispatch's
 *     input), the dispatched tokens (top-k x hidden: the experts' fc1 input), fc1's output (2 x
 *     moe_ffn, SwiGLU's input), SwiGLU's output (fc2's input), fc2's output (top-k x hidden, kept
 *     to weigh it by the router's probabilities: what Memory-Efficient Permutation removes), the
 *     shared expert's fc1 output and SwiGLU output. The router's own tensors (s x experts logits
 *     and scores) are not counted;
 *   - the GPU counted is pipeline rank 2 of 4, a middle stage of 16 MoE layers in 4 chunks of 4
 *     (the weights' assumption above: 16 MoE layers, no embedding), under Megatron-LM's
 *     interleaved 1F1B: (P - r - 1) 2 + (V - 1) P = 14 warm-up chunk forwards, so 15 chunks of 4
 *     layers (60 layer-micro-batches) are in flight at its peak. Rank 1 would keep 17 (68);
 *   - GiB.
 * Then 60 x 2,334,130,176 bytes = 130.43 GiB, 0.44% under 131.0; the rest (0.57 GiB, 9.7 MiB a
 * layer-micro-batch) is the size of the router's fp32 logits and scores (4 MiB each), not
 * checked against Megatron-Core's code. Independently, 60 x fc2's outputs (0.4375 GiB) = 26.25:
 * the report's 26.3 GB for Memory-Efficient Permutation. */
typedef struct {
    double attn;    /* the attention's tensors, bytes per layer and micro-batch */
    double moe;     /* the MLP's (router excluded) */
    double fc2_out; /* of which fc2's outputs (Memory-Efficient Permutation's saving) */
    double qkv;     /* of which the attention's q, k and v (MLA up-projection's recomputation) */
    double norms;   /* the four RMSNorms' outputs */
} mw_published_moe_layer_acts;

mw_status mw_published_mcore_moe_layer_acts(const mw_published_mla_moe *c, int seq, int micro_batch, int topk,
                                            mw_published_moe_layer_acts *out);

/* Chunk-micro-batches in flight at the peak of pipeline rank r of p under Megatron-LM's
 * interleaved 1F1B with v chunks a stage and m micro-batches (v = 1: plain 1F1B): the warm-up
 * forwards plus the steady state's one, at most m v. */
int mw_published_interleaved_in_flight(int p, int v, int r, int m);
#endif
