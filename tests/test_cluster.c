/* src/cluster: the published memory figures reproduced to the precision each source prints them,
 * each check naming its source; the GPU table and its fixed costs; the cost model on hand-computed
 * cases. */
#include "../src/cluster/cost.h"
#include "../src/cluster/gpu.h"
#include "../src/cluster/published.h"
#include "check.h"

#define GIB 1073741824.0

/* x printed with d decimals as the source rounds it: within half a unit of the last digit */
static int rounds_to(double x, double published, int d) {
    return fabs(x - published) <= 0.5 * pow(10, -d) + 1e-12;
}
/* x cut (truncated) to d decimals is the published figure */
static int truncates_to(double x, double published, int d) {
    double u = pow(10, d);
    return fabs(floor(x * u + 1e-9) / u - published) < 1e-9;
}

static void zero_table1(void) {
    /* Rajbhandari et al., ZeRO (SC20, arXiv:1910.02054), Table 1, K = 12, decimal GB */
    mw_published_zero z;
    CHECK_OK(mw_published_zero_table1(7.5e9, 12, 64, &z));
    CHECK(rounds_to(z.none / 1e9, 120, 0), "ZeRO Table 1, 7.5B baseline: %g GB, published 120", z.none / 1e9);
    CHECK(rounds_to(z.os / 1e9, 31.4, 1), "ZeRO Table 1, 7.5B P_os: %g GB, published 31.4", z.os / 1e9);
    CHECK(rounds_to(z.os_g / 1e9, 16.6, 1), "ZeRO Table 1, 7.5B P_os+g: %g GB, published 16.6", z.os_g / 1e9);
    CHECK(rounds_to(z.os_g_p / 1e9, 1.88, 2), "ZeRO Table 1, 7.5B P_os+g+p: %g GB, published 1.88",
          z.os_g_p / 1e9);
    /* the formulas exactly, by hand: 30 + 90/64, 15 + 105/64, 120/64 */
    CHECK(z.none == 120e9 && z.os == 31.40625e9 && z.os_g == 16.640625e9 && z.os_g_p == 1.875e9,
          "ZeRO 7.5B exactly: %.17g %.17g %.17g %.17g", z.none, z.os, z.os_g, z.os_g_p);
    CHECK_OK(mw_published_zero_table1(128e9, 12, 64, &z));
    CHECK(truncates_to(z.none / 1e9, 2048, 0) && truncates_to(z.os / 1e9, 536, 0) &&
              truncates_to(z.os_g / 1e9, 284, 0) && truncates_to(z.os_g_p / 1e9, 32, 0),
          "ZeRO Table 1, 128B at 64: %g / %g / %g / %g GB, published 2048 / 536 / 284 / 32 (truncated)",
          z.none / 1e9, z.os / 1e9, z.os_g / 1e9, z.os_g_p / 1e9);
    CHECK_OK(mw_published_zero_table1(1e12, 12, 1024, &z));
    CHECK(truncates_to(z.none / 1e9, 16000, 0) && truncates_to(z.os / 1e9, 4011, 0) &&
              truncates_to(z.os_g / 1e9, 2013, 0) && truncates_to(z.os_g_p / 1e9, 15.6, 1),
          "ZeRO Table 1, 1T at 1024: %g / %g / %g / %g GB, published 16000 / 4011 / 2013 / 15.6 (truncated)",
          z.none / 1e9, z.os / 1e9, z.os_g / 1e9, z.os_g_p / 1e9);
    /* the truncation is the table's: rounding 4011.72 and 2013.67 would print 4012 and 2014 */
    CHECK(!rounds_to(z.os / 1e9, 4011, 0) && !rounds_to(z.os_g / 1e9, 2013, 0), "the 1T row is truncated");
    CHECK(mw_published_zero_table1(1e9, 12, 0, &z) == MW_ERR_ARG, "N_d = 0 refused");
}

static void deepspeed_estimators(void) {
    /* DeepSpeed's memory docs (docs/code-docs/source/memory.rst), t5-3b: 2851M parameters, largest
     * layer 32M, 1 node x 8 GPUs, per GPU in GiB, from estimate_zero2_model_states_mem_needs
     * (deepspeed/runtime/zero/stage_1_and_2.py) and estimate_zero3_model_states_mem_needs
     * (deepspeed/runtime/zero/stage3.py) */
    mw_published_ds d;
    CHECK_OK(mw_published_ds_zero2(2851000000ull, 8, 1, 0, 1.5, &d));
    CHECK(d.gpu == 17106000000ull && rounds_to(d.gpu / GIB, 15.93, 2), "DeepSpeed ZeRO-2 t5-3b: %.4f GiB, "
          "published 15.93", d.gpu / GIB);
    CHECK(d.cpu == 136848000000ull, "ZeRO-2 cpu = P * 4 * 8 * 1.5: %llu", (unsigned long long)d.cpu);
    CHECK_OK(mw_published_ds_zero2(2851000000ull, 8, 1, 1, 1.5, &d));
    CHECK(d.gpu == 5702000000ull && rounds_to(d.gpu / GIB, 5.31, 2), "DeepSpeed ZeRO-2 offload t5-3b: %.4f GiB, "
          "published 5.31", d.gpu / GIB);
    CHECK_OK(mw_published_ds_zero3(2851000000ull, 32000000ull, 8, 1, 0, 0, 1, 1.5, &d));
    CHECK(d.gpu == 6542750000ull && rounds_to(d.gpu / GIB, 6.09, 2), "DeepSpeed ZeRO-3 t5-3b: %.4f GiB, "
          "published 6.09", d.gpu / GIB);
    CHECK_OK(mw_published_ds_zero3(2851000000ull, 32000000ull, 8, 1, 1, 0, 1, 1.5, &d));
    CHECK(d.gpu == 840750000ull && rounds_to(d.gpu / GIB, 0.78, 2), "DeepSpeed ZeRO-3 offload optimizer: %.4f "
          "GiB, published 0.78", d.gpu / GIB);
    CHECK_OK(mw_published_ds_zero3(2851000000ull, 32000000ull, 8, 1, 1, 1, 1, 1.5, &d));
    CHECK(d.gpu == 128000000ull && rounds_to(d.gpu / GIB, 0.12, 2), "DeepSpeed ZeRO-3 offload params too: %.4f "
          "GiB, published 0.12", d.gpu / GIB);
    CHECK(mw_published_ds_zero2(0, 8, 1, 0, 1.5, &d) == MW_ERR_ARG, "no parameters refused");
}

static void korthikanti(void) {
    /* Korthikanti et al. (arXiv:2205.05198) Table 2 formulas on the 22B model of their Table 3
     * (s 2048, b 1, h 6144, a 64, t 8): s b h = 12,582,912, 5 a s / h = 320/3, by hand: */
    const double expect[MW_ACT_NMODES] = {1769996288.0, 331350016.0, 221249536.0,
                                          163577856.0,  53477376.0,  25165824.0};
    for (int m = 0; m < MW_ACT_NMODES; m++) {
        double b;
        CHECK_OK(mw_published_act_layer(2048, 1, 6144, 64, 8, (mw_published_act_mode)m, &b));
        CHECK(fabs(b - expect[m]) < 0.5, "Korthikanti 22B per layer, %s: %.1f, by hand %.0f",
              mw_published_act_mode_name((mw_published_act_mode)m), b, expect[m]);
    }
    /* their abstract: sequence parallelism with selective recomputation "reduces activation memory
     * by 5x" against tensor parallelism alone; the formulas give 6.2 / 5.4 / 4.9 / 4.9 on the four
     * models, 5 to one figure on all but the 22B */
    for (int i = 0; i < mw_published_korthikanti_count(); i++) {
        const mw_published_korthikanti_cfg *c = mw_published_korthikanti(i);
        double tp, best;
        CHECK_OK(mw_published_act_layer(2048, 1, c->hidden, c->heads, c->tp, MW_ACT_TP, &tp));
        CHECK_OK(mw_published_act_layer(2048, 1, c->hidden, c->heads, c->tp, MW_ACT_TP_SP_SELECTIVE, &best));
        if (i > 0) CHECK(lround(tp / best) == 5, "Korthikanti %s: reduction %.2f, the abstract's 5x", c->name, tp / best);
        CHECK(c->gpus == c->tp * c->pp, "Table 3 %s: %d GPUs = TP x PP", c->name, c->gpus);
    }
    CHECK(mw_published_korthikanti(4) == NULL, "four configurations");
}

static const mw_published_megatron_dense bridge_dense = {
    /* Megatron-Bridge tests/unit_tests/training/utils/test_theoretical_memory_utils.py, _make_config */
    .hidden = 16, .ffn = 64, .heads = 4, .groups = 4, .kv_channels = 4, .vocab = 32, .tied_embeddings = 1};

static void megatron(void) {
    /* megatron/training/theoretical_memory_usage.py: 18 bytes per parameter, or 6 + 12 / DP */
    double bpp;
    CHECK_OK(mw_published_megatron_bytes_per_param(0, 8, &bpp));
    CHECK(bpp == 18, "Megatron: 18 bytes per parameter, got %g", bpp);
    CHECK_OK(mw_published_megatron_bytes_per_param(1, 4, &bpp));
    CHECK(bpp == 9, "Megatron distributed optimizer, DP 4: 6 + 12/4 = 9, got %g", bpp);
    uint64_t layer;
    CHECK_OK(mw_published_megatron_dense_layer(&bridge_dense, &layer));
    CHECK(layer == 3136, "a layer of the Bridge test config: %llu, by hand 1024 + 2 * 16 * 66 = 3136",
          (unsigned long long)layer);
    /* Bridge test_dense_model_state_estimate_matches_legacy_arithmetic: 4 layers, TP 2, PP 2, DP 4
     * with the distributed optimizer: 3400 parameters per GPU, 30600 bytes */
    double shard;
    CHECK_OK(mw_published_megatron_even_shard(&bridge_dense, 4, 2, &shard));
    CHECK(shard / 2 == 3400 && shard / 2 * 9 == 30600, "Bridge legacy: %g per GPU, published 3400", shard / 2);
    /* Megatron-Bridge PR 5077 ("account for uneven PP in memory estimate"): 8 layers as [1,2,2,3]
     * over PP 4: the averaging formula says 6,792 parameters, the heaviest stage holds 9,952 */
    const int split[4] = {1, 2, 2, 3};
    uint64_t st[4];
    CHECK_OK(mw_published_megatron_stages(&bridge_dense, split, 4, st));
    uint64_t heaviest = 0;
    for (int i = 0; i < 4; i++) heaviest = st[i] > heaviest ? st[i] : heaviest;
    CHECK(heaviest == 9952 && st[3] == 9952, "uneven [1,2,2,3]: heaviest stage %llu, published 9952",
          (unsigned long long)heaviest);
    CHECK(st[0] == 3136 + 512 && st[1] == 6272, "first stage: a layer and the embedding");
    CHECK_OK(mw_published_megatron_even_shard(&bridge_dense, 8, 4, &shard));
    CHECK(shard == 6792, "the averaging formula: %g, published 6792", shard);
    /* Bridge test_moe_estimate_accounts_for_expert_parallel_sharding (the ETP x EP division that
     * Megatron-LM issue 4050 asks for): 4 layers, MoE every 2nd, 8 experts of ffn 32, TP 2, CP 2,
     * DP 8, EP 4, ETP 1 */
    mw_published_megatron_moe moe = {.dense = bridge_dense, .layers = 4, .moe_freq = 2, .experts = 8,
                                     .moe_ffn = 32, .tp = 2, .pp = 1, .cp = 2, .dp = 8, .ep = 4, .etp = 1};
    mw_published_megatron_moe_result r;
    CHECK_OK(mw_published_megatron_moe_states(&moe, &r));
    CHECK(r.dense_params == 8992 && r.dense_per_gpu == 4496 && r.dense_bytes_per_param == 6.75,
          "MoE dense part: %llu / %g / %g, published 8992 / 4496 / 6.75", (unsigned long long)r.dense_params,
          r.dense_per_gpu, r.dense_bytes_per_param);
    CHECK(r.routed_params == 16384 && r.routed_per_gpu == 4096 && r.routed_bytes_per_param == 7.5,
          "MoE routed part: %llu / %g / %g, published 16384 / 4096 / 7.5", (unsigned long long)r.routed_params,
          r.routed_per_gpu, r.routed_bytes_per_param);
    CHECK(r.bytes == 61068, "MoE weights and optimizer: %g bytes, published 61068", r.bytes);
    CHECK(r.legacy_bytes == 95160, "Megatron-LM's formula (experts / TP, 6 + 12/DP): %g, by hand 95160",
          r.legacy_bytes);
    moe.ep = 3;
    CHECK(mw_published_megatron_moe_states(&moe, &r) == MW_ERR_ARG, "EP not dividing the world refused");
}

static void deepseek_v3(void) {
    const mw_published_mla_moe *c = &mw_published_deepseek_v3;
    /* the whole model as Megatron-LM's formula counts it (no router): 58 MoE layers, 3 dense
     * layers of ffn 18432, untied embeddings of 129280, the final norm; DeepSeek-V3's report: 671B */
    uint64_t dense_layer = mw_published_mla_moe_layer_dense(c) - 3 * c->hidden * c->shared_ffn +
                           3 * c->hidden * 18432;
    uint64_t total = 58 * (mw_published_mla_moe_layer_dense(c) + c->experts * mw_published_mla_moe_expert(c)) +
                     3 * dense_layer + 2 * 129280ull * c->hidden + c->hidden;
    CHECK(llround(total / 1e9) == 671, "DeepSeek-V3 parameters: %.3fB, published 671B", total / 1e9);
    /* NVIDIA, Megatron Core MoE report (arXiv:2603.07685), Table 3: PP4 x VPP4 x EP64, 256 GPUs, BF16 */
    mw_published_mcore_states s;
    CHECK_OK(mw_published_mcore_moe_states(c, 16, 64, 64, 1, &s));
    CHECK(rounds_to(s.weights_grads / GIB, 36.4, 1), "DeepSeek-V3 weights and gradients: %.3f GiB, published "
          "36.4 GB", s.weights_grads / GIB);
    CHECK(rounds_to(s.master_optim / GIB, 32.1, 1), "DeepSeek-V3 master weights and optimizer: %.3f GiB, "
          "published 32.1 GB", s.master_optim / GIB);
    CHECK(mw_published_mcore_moe_states(c, 16, 48, 64, 1, &s) == MW_ERR_ARG, "EP 48 does not divide 256 experts");

    /* the activations (131.0 GB), under published.h's stated assumptions: BF16, s 4096, b 1, TP 1,
     * no recomputation, the standard permutation; pipeline rank 2 of PP4 x VPP4 with 128
     * micro-batches (GBS 8192 / DP 64) keeps 15 chunks of 4 MoE layers in flight */
    mw_published_moe_layer_acts a;
    CHECK_OK(mw_published_mcore_moe_layer_acts(c, 4096, 1, 8, &a));
    /* by hand: attention 2 x 58,720,256 (norm) + 2 x 16,777,216 (latent norms: 4096 x 2048 x 2 B)
     * + 3 x 201,326,592 - 67,108,864 (q, k of 192 per head; v of 128) + 134,217,728 (output)
     * + 2,097,152 (lse); MLP 2 x 58,720,256 + 469,762,048 (dispatched) + 268,435,456 (fc1 out)
     * + 134,217,728 (SwiGLU out) + 469,762,048 (fc2 out) + 33,554,432 + 16,777,216 (shared) */
    CHECK(a.attn == 824180736.0 && a.moe == 1509949440.0 && a.fc2_out == 469762048.0 && a.qkv == 536870912.0,
          "DeepSeek-V3 layer activations %.0f + %.0f, by hand 824180736 + 1509949440", a.attn, a.moe);
    const int fl = mw_published_interleaved_in_flight(4, 4, 2, 128);
    CHECK(fl == 15 && mw_published_interleaved_in_flight(4, 4, 0, 128) == 19 &&
              mw_published_interleaved_in_flight(4, 4, 1, 128) == 17 && mw_published_interleaved_in_flight(4, 1, 0, 8) == 4,
          "interleaved in flight: rank 2 of PP4 VPP4 %d, want 15", fl);
    /* the published formula is the walk's (src/graph/layout.c): every P, V, rank and M */
    for (int p = 2; p <= 6; p++)
        for (int v = 1; v <= 3; v++)
            for (int m = p; m <= 3 * p; m += p)
                for (int r = 0; r < p; r++) {
                    mw_config k;
                    mw_config_default(&k);
                    k.pp = p, k.vpp = v, k.accum = m;
                    CHECK(mw_layout_in_flight(&k, r) == mw_published_interleaved_in_flight(p, v, r, m),
                          "in flight P %d V %d rank %d M %d: walk %d, formula %d", p, v, r, m, mw_layout_in_flight(&k, r),
                          mw_published_interleaved_in_flight(p, v, r, m));
                }
    const double acts = fl * 4 * (a.attn + a.moe) / GIB;
    CHECK(fabs(acts / 131.0 - 1) < 0.005, "DeepSeek-V3 activations %.3f GiB, published 131.0 GB (within 0.5%%, not to "
          "its precision: the router's tensors are not counted)", acts);
    CHECK(rounds_to(fl * 4 * a.fc2_out / GIB, 26.3, 1), "Memory-Efficient Permutation's saving %.3f GiB, published "
          "26.3 GB", fl * 4 * a.fc2_out / GIB);
    CHECK(mw_published_mcore_moe_layer_acts(c, 4096, 1, 0, &a) == MW_ERR_ARG, "top-k 0 refused");
}

static void gpu_table(void) {
    const mw_gpu *g = mw_gpu_find("h200");
    CHECK(g && g->mem_smi_bytes == 143771ull << 20 && g->mem_stated_bytes == 141000000000ull,
          "h200: 143771 MiB seen, 141 GB stated");
    CHECK(g && g->bf16_flops == 989.4e12 && g->src_flops && g->src_mem, "h200: dense BF16 with a source");
    for (int i = 0; i < mw_gpu_count(); i++) {
        const mw_gpu *e = mw_gpu_at(i);
        CHECK(e->src_mem && e->src_smi && e->src_flops && e->src_nvlink && e->src_inter, "%s: every figure sourced",
              e->name);
        CHECK(e->bf16_flops > 0 && e->mem_stated_bytes > 0, "%s: memory and FLOP/s", e->name);
        /* a vendor's "80GB" is not what nvidia-smi shows: 81920 MiB (A100) is 85.9e9 bytes */
        if (e->mem_smi_bytes) CHECK(e->mem_smi_bytes != e->mem_stated_bytes, "%s: GB and MiB differ", e->name);
    }
    CHECK(mw_gpu_find("a100-80g") && mw_gpu_find("h100-80g"), "the issue's three names");
    CHECK(mw_gpu_find("v100") == NULL && strstr(mw_last_error(), "h100-80g"), "an unknown GPU names the choices");
    mw_gpu_fixed f;
    mw_gpu_fixed_opts o = {.nccl_channels = 16, .nccl_peers = 2, .nccl_comms = 3, .frag_fraction = -1};
    CHECK_OK(mw_gpu_fixed_costs(g->mem_smi_bytes, &o, &f));
    CHECK(f.nccl_buffers == 384ull << 20, "NCCL: 4 MiB x 16 channels x 2 peers x 3 communicators = 384 MiB, got %llu",
          (unsigned long long)f.nccl_buffers);
    CHECK(f.cuda_context + f.nccl_buffers + f.fragmentation + f.usable == g->mem_smi_bytes, "the parts add up");
    CHECK(f.frag_fraction == 0.30 && f.src_frag && f.src_context && f.src_nccl, "defaults carry their sources");
    CHECK(mw_gpu_fixed_costs(100ull << 20, &o, &f) == MW_ERR_ARG, "a device smaller than its fixed costs refused");
}

static void cost_model(void) {
    CHECK(mw_cost_allreduce(100, 4) == 150 && mw_cost_allgather(100, 4) == 75 && mw_cost_alltoall(100, 1) == 0,
          "ring volumes: 2(n-1)/n and (n-1)/n");
    /* Narayanan et al. (SC21) Sec. 5.1 on GPT-3 175B (L 96, h 12288, V 51200, s 2048, B 1536):
     * 72 B s L h^2 (1 + s/6h + V/12hL), and 96 B s L h^2 (1 + s/6h + V/16hL) with recomputation */
    double L = 96, h = 12288, V = 51200, s = 2048, B = 1536, f;
    mw_cost_model m = {.layer_params = 12 * L * h * h, .layers = L, .hidden = h, .attn_dim = h, .vocab = V};
    CHECK_OK(mw_cost_step_flops(&m, s, B * s, MW_COST_RECOMPUTE_NONE, &f));
    double ref = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    CHECK(fabs(f / ref - 1) < 1e-12, "175B step FLOPs %.6g, Narayanan %.6g", f, ref);
    CHECK_OK(mw_cost_step_flops(&m, s, B * s, MW_COST_RECOMPUTE_FULL, &f));
    ref = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * h * L));
    CHECK(fabs(f / ref - 1) < 1e-12, "175B with recomputation %.6g, Narayanan %.6g", f, ref);
    CHECK(mw_cost_flops_6n(1e9, 1e6) == 6e15, "6 N D");

    /* a small layout by hand: TP 2, PP 4, DP 4, EP 2, 8 micro-batches of b 1, s 4, h 8; 8 layers of
     * which 4 MoE, top-2; 1000 dense and 500 expert parameters on the rank; bf16 activations and
     * parameters, fp32 gradients */
    mw_cost_layout l = {.tp = 2, .pp = 4, .dp = 4, .ep = 2, .microbatches = 8, .micro_batch = 1, .seq = 4,
                        .hidden = 8, .layers = 8, .moe_layers = 4, .topk = 2, .rank_params = 1000,
                        .rank_expert_params = 500, .act_bytes = 2, .param_bytes = 2, .grad_bytes = 4};
    mw_cost_volume v;
    CHECK_OK(mw_cost_layout_volume(&l, &v));
    /* dp: all-reduce of 4000 B over 4 = 6000; edp: of 2000 B over 2 = 2000; tp: 4 ops x 2 layers x
     * 8 micro-batches x all-reduce(64 B, 2) = 64 x 64; pp: 2 x 8 x 64; ep: 4 x 1 layer x 8 x
     * all-to-all(4 tokens x 2 x 8 x 2 B, 2) = 32 x 64 */
    CHECK(v.dp == 6000 && v.edp == 2000 && v.tp == 4096 && v.pp == 1024 && v.ep == 2048,
          "volumes %g %g %g %g %g, by hand 6000 2000 4096 1024 2048", v.dp, v.edp, v.tp, v.pp, v.ep);
    l.sp = 1;
    CHECK_OK(mw_cost_layout_volume(&l, &v));
    CHECK(v.tp == 4096 && v.ep == 1024, "sequence parallel: same TP bytes, EP tokens / TP: %g %g", v.tp, v.ep);
    CHECK(v.pp == 512, "sequence parallel: a stage sends its 1/TP of the sequence, 1024 / 2 by hand: %g", v.pp);
    /* ZeRO paper, Sec. 7: stages 1 and 2 move what data parallelism moves, stage 3 1.5 x */
    l.sp = 0;
    l.grad_bytes = 2;
    double vol[4];
    for (int z = 0; z <= 3; z++) {
        l.zero = z;
        CHECK_OK(mw_cost_layout_volume(&l, &v));
        vol[z] = v.dp;
    }
    CHECK(vol[1] == vol[0] && vol[2] == vol[0] && vol[3] == 1.5 * vol[0], "ZeRO volumes %g %g %g %g", vol[0],
          vol[1], vol[2], vol[3]);
    l.zero = 0;
    l.grad_bytes = 4;
    /* time: 3.2e16 FLOPs over 32 ranks at 1e15 x 0.5 = 2 s, bubble 3/8 of it; TP, DP, EP inside an
     * 8-GPU node at 1e11 B/s, the PP pair 16 ranks apart across nodes at 1e10 B/s */
    mw_cost_machine mc = {.peak_flops = 1e15, .mfu = 0.5, .intra_bw = 1e11, .inter_bw = 1e10, .gpus_per_node = 8};
    mw_cost_time t;
    CHECK_OK(mw_cost_step_time(&l, 3.2e16, &mc, &t));
    CHECK(fabs(t.compute_s - 2) < 1e-12 && fabs(t.bubble_s - 0.75) < 1e-12, "compute %g s, bubble %g s",
          t.compute_s, t.bubble_s);
    CHECK(t.pp_s == 1024 / 1e10 && t.tp_s == 4096 / 1e11 && t.dp_s == 6000 / 1e11, "links: pp %g tp %g dp %g",
          t.pp_s, t.tp_s, t.dp_s);
    CHECK(fabs(t.total_s - (2.75 + (4096 + 6000 + 2000 + 2048) / 1e11 + 1024 / 1e10)) < 1e-12, "total %g",
          t.total_s);
    /* a tied embedding of 100 parameters on the rank: the first and the last stage (3 x 2 x 4 = 24
     * ranks apart, across nodes) all-reduce its 400 gradient bytes between the 2: 400 B at 1e10 */
    l.tied_params = 100;
    CHECK_OK(mw_cost_layout_volume(&l, &v));
    CHECK(v.emb == 400, "tied embedding: %g bytes, by hand 400", v.emb);
    CHECK_OK(mw_cost_step_time(&l, 3.2e16, &mc, &t));
    CHECK(t.emb_s == 400 / 1e10 && fabs(t.total_s - (2.75 + (4096 + 6000 + 2000 + 2048) / 1e11 + 1424 / 1e10)) < 1e-12,
          "tied embedding: %g s, total %g", t.emb_s, t.total_s);
    l.pp = 1;
    CHECK_OK(mw_cost_layout_volume(&l, &v));
    CHECK(v.emb == 0, "one stage holds the embedding once: %g", v.emb);
    l.pp = 4, l.tied_params = 0;
    /* interleaved, 2 chunks a stage (Narayanan et al., Sec. 2.2.2): the bubble (P - 1) / (m V), every
     * chunk crossing a stage boundary: an interior stage 2 V m bsh = 2 x 2 x 8 x 64 to its
     * neighbours, an end stage 2 x 8 x 64 to its neighbour and (V - 1) 8 x 64 over the wrap-around */
    l.vpp = 2;
    CHECK_OK(mw_cost_layout_volume(&l, &v));
    CHECK(v.pp == 2048 && v.pp_wrap == 512, "vpp 2: pp %g wrap %g, by hand 2048 512", v.pp, v.pp_wrap);
    CHECK_OK(mw_cost_step_time(&l, 3.2e16, &mc, &t));
    CHECK(fabs(t.bubble_s - 2 * 3 / 16.0) < 1e-12 && t.pp_s == 2048 / 1e10, "vpp 2: bubble %g (0.375), pp %g",
          t.bubble_s, t.pp_s);
    mc.gpus_per_node = 16; /* neighbours inside a node, the wrap-around (3 x 8 ranks) across: the end stage is the busier */
    CHECK_OK(mw_cost_step_time(&l, 3.2e16, &mc, &t));
    CHECK(fabs(t.pp_s - (1024 / 1e11 + 512 / 1e10)) < 1e-20, "vpp 2: an end stage's %g s, by hand %g", t.pp_s,
          1024 / 1e11 + 512 / 1e10);
    l.pp = 2; /* two stages: both ends, the wrap-around their one link: 2 V - 1 sends of 8 x 64 */
    CHECK_OK(mw_cost_layout_volume(&l, &v));
    CHECK(v.pp == 1024 && v.pp_wrap == 512, "vpp 2, pp 2: %g %g, by hand 1024 512", v.pp, v.pp_wrap);
    CHECK_OK(mw_cost_step_time(&l, 3.2e16, &mc, &t));
    CHECK(fabs(t.pp_s - 1536 / 1e11) < 1e-20 && fabs(t.bubble_s - t.compute_s / 16) < 1e-12, "vpp 2, pp 2: pp %g bubble %g",
          t.pp_s, t.bubble_s);
    mc.gpus_per_node = 8, l.pp = 4, l.vpp = 0;
    l.ep = 3;
    CHECK(mw_cost_layout_volume(&l, &v) == MW_ERR_ARG, "EP 3 does not divide DP 4");
    mc.mfu = 0;
    l.ep = 2;
    CHECK(mw_cost_step_time(&l, 1, &mc, &t) == MW_ERR_ARG, "a zero fraction of the peak refused");
}


/* The rank grid (src/dist/grid.c): Megatron's order, t fastest, then d, then p; a group of one
 * rank is no communicator, a group of every rank the world's, and a layout that is not the
 * world's size is refused. */
static mw_status no_split(mw_comm *c, int color, int key, mw_comm **out) { return MW_ERR_ARG; }
static void grid(void) {
    for (int T = 1; T <= 4; T++)
        for (int P = 1; P <= 4; P++)
            for (int D = 1; D <= 4; D++)
                for (int r = 0; r < T * P * D; r++) {
                    int t, p, d;
                    mw_grid_coords(r, T, P, D, &t, &p, &d);
                    CHECK(t >= 0 && t < T && p >= 0 && p < P && d >= 0 && d < D && mw_grid_rank(t, p, d, T, P, D) == r,
                          "grid %dx%dx%d: rank %d is (%d, %d, %d)", T, P, D, r, t, p, d);
                    CHECK(t == r % T && p == r / (T * D), "grid %dx%dx%d: rank %d: t fastest, p slowest", T, P, D, r);
                }
    mw_comm w = {.rank = 2, .size = 4, .split = no_split};
    mw_grid g;
    CHECK(mw_grid_create(&w, 1, 4, 1, &g) == MW_OK && g.p == 2 && g.pp_comm == &w && !g.tp_comm && !g.dp_comm,
          "a pipeline of the whole world is the world's communicator");
    mw_grid_destroy(&g);
    CHECK(mw_grid_create(&w, 1, 2, 1, &g) == MW_ERR_ARG && !g.pp_comm, "2 ranks' layout on 4 is refused");
    CHECK(mw_grid_create(&w, 1, 2, 2, &g) != MW_OK && !g.pp_comm && !g.dp_comm, "a failed split leaves no group");
}

int main(void) {
    grid();
    zero_table1();
    deepspeed_estimators();
    korthikanti();
    megatron();
    deepseek_v3();
    gpu_table();
    cost_model();
    return test_summary("test_cluster");
}
