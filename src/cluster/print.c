/* Text tables of the published figures and of a GPU's fixed costs (print.h). Owns nothing; calls
 * published.h, gpu.h and src/core. */
#include "print.h"

#include <math.h>
#include <string.h>

#include "../core/arena.h"
#include "../core/status.h"
#include "published.h"

#define GIB 1073741824.0

/* A row: what, the published figure as printed, the reproduction with 3 more digits, and how the
 * source rounds ("r": rounded, "t": truncated) to d decimals, checked here as the test checks it. */
static void row(FILE *f, const char *what, double published, double got, int d, char how) {
    double u = pow(10, d);
    int ok = how == 't' ? fabs(floor(got * u + 1e-9) / u - published) < 1e-9
                        : fabs(got - published) <= 0.5 / u + 1e-12;
    fprintf(f, "    %-52s %12.*f %14.*f  %s%s\n", what, d, published, d + 3, got,
            how == 't' ? "truncated" : "rounded", ok ? "" : "  MISMATCH");
}

static void header(FILE *f, const char *title, const char *unit) {
    fprintf(f, "\n  %s\n    %-52s %12s %14s  %s\n", title, "", "published", "reproduced", unit);
}

static mw_status zero(FILE *f) {
    static const struct { const char *name; double psi; int nd; double pub[4]; char how; int d[4]; } rows[] = {
        {"7.5B", 7.5e9, 64, {120, 31.4, 16.6, 1.88}, 'r', {0, 1, 1, 2}},
        {"128B", 128e9, 64, {2048, 536, 284, 32}, 't', {0, 0, 0, 0}},
        {"1T", 1e12, 1024, {16000, 4011, 2013, 15.6}, 't', {0, 0, 0, 1}},
    };
    static const char *stage[4] = {"baseline", "P_os (stage 1)", "P_os+g (stage 2)", "P_os+g+p (stage 3)"};
    header(f, "ZeRO (Rajbhandari et al., SC20, arXiv:1910.02054) Table 1: model states per device, K = 12",
           "decimal GB");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mw_published_zero z;
        MW_TRY(mw_published_zero_table1(rows[i].psi, 12, rows[i].nd, &z));
        const double v[4] = {z.none, z.os, z.os_g, z.os_g_p};
        for (int s = 0; s < 4; s++) {
            char what[64];
            snprintf(what, sizeof what, "%s, N_d %d, %s", rows[i].name, rows[i].nd, stage[s]);
            row(f, what, rows[i].pub[s], v[s] / 1e9, rows[i].d[s], rows[i].how);
        }
    }
    mw_published_zero z;
    MW_TRY(mw_published_zero_table1(7.5e9, 8, 64, &z));
    fprintf(f, "    memwall's own count differs: its weights and gradients are fp32 (4 + 4 bytes, no 16-bit copy)\n"
               "    and AdamW's moments K = 8 (no separate master copy): 7.5B at 64 under stage 1 is\n"
               "    (4 + 4) psi + 8 psi / 64 = %.2f GB; the per-rank plan of `estimate --zero S --world N` counts it\n",
            (8 * 7.5e9 + 8 * 7.5e9 / 64) / 1e9);
    return MW_OK;
}

static mw_status deepspeed(FILE *f) {
    header(f, "DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py), t5-3b: 2851M "
              "parameters, largest layer 32M, 1 node x 8 GPUs, per GPU",
           "GiB");
    mw_published_ds d;
    MW_TRY(mw_published_ds_zero2(2851000000ull, 8, 1, 0, 1.5, &d));
    row(f, "ZeRO-2: 4 P + int(16 P / 8)", 15.93, d.gpu / GIB, 2, 'r');
    MW_TRY(mw_published_ds_zero2(2851000000ull, 8, 1, 1, 1.5, &d));
    row(f, "ZeRO-2, optimizer offloaded: 2 P", 5.31, d.gpu / GIB, 2, 'r');
    MW_TRY(mw_published_ds_zero3(2851000000ull, 32000000ull, 8, 1, 0, 0, 1, 1.5, &d));
    row(f, "ZeRO-3: 4 Lp + int(18 P / 8)", 6.09, d.gpu / GIB, 2, 'r');
    MW_TRY(mw_published_ds_zero3(2851000000ull, 32000000ull, 8, 1, 1, 0, 1, 1.5, &d));
    row(f, "ZeRO-3, optimizer offloaded: 4 Lp + int(2 P / 8)", 0.78, d.gpu / GIB, 2, 'r');
    MW_TRY(mw_published_ds_zero3(2851000000ull, 32000000ull, 8, 1, 1, 1, 1, 1.5, &d));
    row(f, "ZeRO-3, parameters offloaded too: 4 Lp", 0.12, d.gpu / GIB, 2, 'r');
    const double p = 2851e6;
    fprintf(f, "    memwall's count for the same 2851M parameters over 8 ranks (fp32 weights 4, gradients 4, AdamW\n"
               "    8 bytes): ZeRO-2 4 P + 12 P / 8 = %.2f GiB plus the embeddings' gradients and one block's;\n"
               "    ZeRO-3 16 P / 8 = %.2f GiB plus the embeddings' states and two blocks' parameters\n"
               "    (docs/zero.md; `estimate --zero S --world 8` plans it for its own models). DeepSpeed counts fp16\n"
               "    weights and gradients (2 + 2) whole and 16 bytes (fp32 master, momentum, variance, fp32\n"
               "    gradient) sharded, and no activations, buffers or temporaries\n",
            (4 * p + 12 * p / 8) / GIB, 16 * p / 8 / GIB);
    return MW_OK;
}

static mw_status korthikanti(FILE *f) {
    fprintf(f, "\n  Korthikanti et al. (arXiv:2205.05198) Table 2 on their Table 3 models (s 2048, micro-batch 1,\n"
               "  TP 8): activations of one layer, GiB (the paper plots these as percentages, Figure 7; its abstract\n"
               "  says sequence parallelism with selective recomputation saves 5x)\n");
    fprintf(f, "    %-6s %5s %6s %4s %4s", "model", "heads", "hidden", "L", "PP");
    for (int m = 0; m < MW_ACT_NMODES; m++) {
        static const char *const shortn[MW_ACT_NMODES] = {"none", "tp", "tp+sp", "tp+sel", "tp+sp+sel", "full"};
        fprintf(f, " %10s", shortn[m]);
    }
    fprintf(f, " %10s\n", "tp/best");
    for (int i = 0; i < mw_published_korthikanti_count(); i++) {
        const mw_published_korthikanti_cfg *c = mw_published_korthikanti(i);
        double v[MW_ACT_NMODES];
        fprintf(f, "    %-6s %5d %6d %4d %4d", c->name, c->heads, c->hidden, c->layers, c->pp);
        for (int m = 0; m < MW_ACT_NMODES; m++) {
            MW_TRY(mw_published_act_layer(2048, 1, c->hidden, c->heads, c->tp, (mw_published_act_mode)m, &v[m]));
            fprintf(f, " %10.4f", v[m] / GIB);
        }
        fprintf(f, " %9.2fx\n", v[MW_ACT_TP] / v[MW_ACT_TP_SP_SELECTIVE]);
    }
    fprintf(f, "    the first pipeline stage keeps L times one layer's (L / PP layers, PP micro-batches in flight);\n"
               "    memwall's own plan (estimate's policy table, GPT-2 presets) keeps no s x s score matrix (tiled\n"
               "    attention): its 'none' row has no 5as/h term; `estimate --tp T [--sp]` prints its layout walk's\n"
               "    activations per block beside this table's formula\n");
    return MW_OK;
}

static mw_status megatron(FILE *f) {
    header(f, "Megatron-LM theoretical_memory_usage.py and Megatron-Bridge's fixes (tests of "
              "test_theoretical_memory_utils.py, PR 5077)",
           "as stated");
    double bpp;
    MW_TRY(mw_published_megatron_bytes_per_param(0, 8, &bpp));
    row(f, "bytes per parameter", 18, bpp, 0, 'r');
    MW_TRY(mw_published_megatron_bytes_per_param(1, 64, &bpp));
    row(f, "with the distributed optimizer, DP 64: 6 + 12/64", 6.1875, bpp, 4, 'r');
    static const mw_published_megatron_dense d = {
        .hidden = 16, .ffn = 64, .heads = 4, .groups = 4, .kv_channels = 4, .vocab = 32, .tied_embeddings = 1};
    const int split[4] = {1, 2, 2, 3};
    uint64_t st[4], heaviest = 0;
    MW_TRY(mw_published_megatron_stages(&d, split, 4, st));
    for (int i = 0; i < 4; i++) heaviest = st[i] > heaviest ? st[i] : heaviest;
    double even;
    MW_TRY(mw_published_megatron_even_shard(&d, 8, 4, &even));
    row(f, "8 layers as [1,2,2,3]: heaviest stage, params", 9952, (double)heaviest, 0, 'r');
    row(f, "  what dividing by PP gives (the bug)", 6792, even, 0, 'r');
    mw_published_megatron_moe moe = {.dense = d, .layers = 4, .moe_freq = 2, .experts = 8, .moe_ffn = 32,
                                     .tp = 2, .pp = 1, .cp = 2, .dp = 8, .ep = 4, .etp = 1};
    mw_published_megatron_moe_result r;
    MW_TRY(mw_published_megatron_moe_states(&moe, &r));
    row(f, "MoE, experts / (ETP x EP): bytes per GPU", 61068, r.bytes, 0, 'r');
    fprintf(f, "    %-52s %12s %14.3f  experts / TP, 6 + 12/DP (issue 4050)\n", "  Megatron-LM's formula", "",
            r.legacy_bytes);
    return MW_OK;
}

static mw_status dsv3(FILE *f) {
    header(f, "DeepSeek-V3, Megatron-Core MoE report (arXiv:2603.07685) Table 3: BF16, PP4 x VPP4 x EP64, 256 "
              "GPUs, per GPU",
           "GB (read as GiB)");
    mw_published_mcore_states s;
    MW_TRY(mw_published_mcore_moe_states(&mw_published_deepseek_v3, 16, 64, 64, 1, &s));
    row(f, "weights and gradients (6 B/param)", 36.4, s.weights_grads / GIB, 1, 'r');
    row(f, "master weights and optimizer (12 B, DP 64 / EDP 1)", 32.1, s.master_optim / GIB, 1, 'r');
    mw_published_moe_layer_acts a;
    MW_TRY(mw_published_mcore_moe_layer_acts(&mw_published_deepseek_v3, 4096, 1, 8, &a));
    const int lm = mw_published_interleaved_in_flight(4, 4, 2, 8192 / 64) * 4; /* layer-micro-batches */
    const double acts = lm * (a.attn + a.moe) / GIB;
    fprintf(f, "    %-52s %12.1f %14.4f  %.2f%% under: the router's tensors not counted\n", "activations (60 layer-micro-batches)",
            131.0, acts, 100 * (1 - acts / 131.0));
    row(f, "  Memory-Efficient Permutation saves (Sec. 4.1.2)", 26.3, lm * a.fc2_out / GIB, 1, 'r');
    fprintf(f, "    assumptions: the GPU holds 16 MoE layers and no embedding; parameters as Megatron-LM counts\n"
               "    MLA + MoE (no router); \"GB\" = 2^30 bytes (in 10^9 bytes: %.1f and %.1f); activations: seq 4096,\n"
               "    micro-batch 1, TP 1 (Table 17's configuration of this layout), no recomputation, pipeline rank 2\n"
               "    of 4 (15 chunks of 4 MoE layers in flight), Megatron-Core's saved tensors (published.h)\n",
            s.weights_grads / 1e9, s.master_optim / 1e9);
    return MW_OK;
}

mw_status mw_print_published(FILE *f) {
    fprintf(f, "published memory figures beside memwall's reproduction of each from its source's formula\n"
               "(src/cluster/published.h; tests/test_cluster.c checks every row to the precision printed)\n");
    MW_TRY(zero(f));
    MW_TRY(deepspeed(f));
    MW_TRY(korthikanti(f));
    MW_TRY(megatron(f));
    MW_TRY(dsv3(f));
    return MW_OK;
}

/* where the device's memory figure came from */
static const char *mem_src(const mw_gpu *g, uint64_t device_bytes) {
    if (g && g->mem_smi_bytes == device_bytes) return g->src_smi;
    if (g && g->mem_stated_bytes == device_bytes) return "the vendor's stated GB, 10^9 bytes each (no nvidia-smi figure found)";
    return "--device-mem";
}

void mw_print_fixed_costs(FILE *f, const mw_gpu *g, uint64_t device_bytes, const mw_gpu_fixed *x,
                          uint64_t plan_peak) {
    char b1[32], b2[32];
    fprintf(f, "\n  device (fixed costs a plan does not see; not in the figures above):\n");
    if (g) {
        fprintf(f, "    %-14s %s: %s stated (%s)\n", g->name, g->product, g->mem_stated, g->src_mem);
        fprintf(f, "    %-14s %s (%s)\n", "memory", mw_fmt_bytes(device_bytes, b1, sizeof b1), mem_src(g, device_bytes));
        fprintf(f, "    %-14s BF16 %.1f, TF32 %.1f TFLOP/s dense; NVLink %.0f GB/s; network %.0f GB/s per GPU (%s)\n",
                "peak", g->bf16_flops / 1e12, g->tf32_flops / 1e12, g->nvlink_bytes_s / 1e9, g->inter_bytes_s / 1e9,
                g->src_inter);
    } else {
        fprintf(f, "    %-14s %s (--device-mem)\n", "memory", mw_fmt_bytes(device_bytes, b1, sizeof b1));
    }
    fprintf(f, "    %-14s %10s  %s\n", "CUDA context", mw_fmt_bytes(x->cuda_context, b1, sizeof b1), x->src_context);
    fprintf(f, "    %-14s %10s  %s x %d channels x %d peers x %d communicator%s: %s\n", "NCCL buffers",
            mw_fmt_bytes(x->nccl_buffers, b1, sizeof b1), mw_fmt_bytes(x->nccl_buffsize, b2, sizeof b2),
            x->nccl_channels, x->nccl_peers, x->nccl_comms, x->nccl_comms == 1 ? "" : "s", x->src_nccl);
    fprintf(f, "    %-14s %10s  %.0f%% of the rest: %s\n", "fragmentation", mw_fmt_bytes(x->fragmentation, b1, sizeof b1),
            100 * x->frag_fraction, x->src_frag);
    fprintf(f, "    %-14s %10s", "left for plan", mw_fmt_bytes(x->usable, b1, sizeof b1));
    if (plan_peak)
        fprintf(f, "  the plan's peak %s %s", mw_fmt_bytes(plan_peak, b2, sizeof b2),
                plan_peak <= x->usable ? "fits" : "DOES NOT FIT");
    fprintf(f, "\n");
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('"', f);
}

void mw_print_fixed_costs_json(FILE *f, const mw_gpu *g, uint64_t device_bytes, const mw_gpu_fixed *x,
                               uint64_t plan_peak) {
    fprintf(f, "{\"gpu\": ");
    if (g) json_str(f, g->name);
    else fprintf(f, "null");
    fprintf(f, ", \"memory_bytes\": %llu, \"cuda_context_bytes\": %llu, \"nccl_buffer_bytes\": %llu, "
               "\"fragmentation_fraction\": %.4f, \"fragmentation_bytes\": %llu, \"usable_bytes\": %llu, "
               "\"plan_fits\": %s, \"sources\": {\"memory\": ",
            (unsigned long long)device_bytes, (unsigned long long)x->cuda_context,
            (unsigned long long)x->nccl_buffers, x->frag_fraction, (unsigned long long)x->fragmentation,
            (unsigned long long)x->usable, plan_peak && plan_peak <= x->usable ? "true" : "false");
    json_str(f, mem_src(g, device_bytes));
    fprintf(f, ", \"cuda_context\": ");
    json_str(f, x->src_context);
    fprintf(f, ", \"nccl\": ");
    json_str(f, x->src_nccl);
    fprintf(f, ", \"fragmentation\": ");
    json_str(f, x->src_frag);
    fprintf(f, "}}");
}
