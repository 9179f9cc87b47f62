/* --recompute auto's calibration (src/graph/recompute.c, mw_graph_measure_costs) times every forward
 * op kind a model's schedule runs: for each shape below, every forward kind in the schedule of the
 * user's model under --recompute selective (the kinds auto's policies recompute, from
 * mw_plan_timeline) must have a finite cost > 0. A kind the 2-block calibration model never runs gets cost 0, and auto then
 * thinks recomputing it is free: the deepseek family's hook (deepseek.c, calib_config) makes the
 * calibration's blocks a dense one and a mixture, both selective; without it, a model with a dense
 * first block left "mlp norm+dispatch" (the mixture's selective recomputation) untimed. GPT-2 and
 * Llama, which have no hook, are checked the same way. */
#include <time.h>

#include "check.h"
#include "memwall.h"
#include "../src/graph/graph_impl.h"

extern const mw_model_def mw_arch_gpt2, mw_arch_llama, mw_arch_deepseek;

/* preset with flags applied by set (may be NULL), at batch 1 and seq T; label names it */
static void check_shape(const char *label, const char *preset, const mw_model_def *a, void (*set)(mw_config *), int T) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mw_config c;
    mw_config_default(&c);
    CHECK_OK(mw_config_preset(&c, preset));
    if (set) set(&c);
    c.batch = 1, c.seq = T;
    c.recompute = MW_RECOMPUTE_SELECTIVE;
    mw_plan_op *ops = NULL;
    int nops = 0;
    CHECK_OK(mw_plan_timeline(&c, &ops, &nops));
    double cost[64];
    CHECK(a->nkinds <= 64, "%s: %d kinds", label, a->nkinds);
    CHECK_OK(mw_graph_measure_costs(&c, a, cost));
    int used = 0;
    for (int k = 0; k < a->nkinds; k++) {
        if (!mw_graph_kind_is_forward_a(a, k)) continue;
        int in = 0; /* the timeline names an op by its kind's name, cut to its 15 characters */
        for (int i = 0; i < nops && !in; i++) in = strncmp(ops[i].op, a->kinds[k].name, sizeof ops[i].op - 1) == 0;
        if (!in) continue;
        used++;
        CHECK(isfinite(cost[k]) && cost[k] > 0, "%s: forward kind '%s' is in the schedule but its calibrated cost is %g",
              label, a->kinds[k].name, cost[k]);
    }
    CHECK(used >= 4, "%s: only %d forward kinds found in the timeline", label, used);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("  %-30s %2d forward kinds, each timed (%.2f s)\n", label, used,
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    free(ops);
}

static void mixtral_like(mw_config *c) { c->n_shared = 0, c->first_dense = 0; }
static void mla_no_q(mw_config *c) { c->q_lora_rank = 0; }
static void mla_moe(mw_config *c) { /* MLA with a dense first block and a mixture: V3's block kinds */
    c->n_experts = 4, c->n_experts_tok = 2, c->n_shared = 1, c->moe_ffn = 32, c->first_dense = 1;
    c->moe_gate = 1, c->norm_topk = 1, c->routed_scale = 2.5;
}

static void many_experts(mw_config *c) { /* the calibration caps the experts at 8, keeps one dense block */
    mla_moe(c);
    c->n_layer = 5, c->n_experts = 32, c->first_dense = 3;
}

/* The calibration is cached by what times a forward op: a run under another optimizer (estimate's
 * table plans each --optim, and --recompute auto calibrates in every plan) reuses the same
 * measurement, bit for bit; it once keyed on the whole config, optimizer included, and re-timed
 * every preset under each of the six optimizers (48 calibrations for estimate --preset llama2-7b
 * --recompute auto --budget 64GiB). A new shape is timed again. */
static void cache_by_shape(void) {
    mw_config c;
    mw_config_default(&c);
    CHECK_OK(mw_config_preset(&c, "llama-tiny"));
    c.batch = 1, c.seq = 64;
    double a[64], b[64];
    CHECK_OK(mw_graph_measure_costs(&c, &mw_arch_llama, a));
    c.optim = MW_OPTIM_SGD, c.lr = 0.5, c.momentum = 0.8, c.weight_decay = 0.3, c.steps = 7, c.warmup = 2, c.seed = 99;
    c.accum = 3;
    CHECK_OK(mw_graph_measure_costs(&c, &mw_arch_llama, b));
    CHECK(memcmp(a, b, sizeof(double) * (size_t)mw_arch_llama.nkinds) == 0,
          "another optimizer, schedule and seed re-timed the calibration");
    c.seq = 32; /* another shape: timed again (the costs scale with it, so compare the cache's reuse only) */
    CHECK_OK(mw_graph_measure_costs(&c, &mw_arch_llama, b));
    printf("  %-30s the calibration is reused under another --optim, lr, schedule, seed and --accum\n", "cache");
}

int main(void) {
    cache_by_shape();
    check_shape("gpt2-tiny", "gpt2-tiny", &mw_arch_gpt2, NULL, 64);
    check_shape("llama-tiny", "llama-tiny", &mw_arch_llama, NULL, 64);
    check_shape("moe-tiny", "moe-tiny", &mw_arch_deepseek, NULL, 64);
    check_shape("moe-tiny (Mixtral's blocks)", "moe-tiny", &mw_arch_deepseek, mixtral_like, 64);
    check_shape("mla-tiny", "mla-tiny", &mw_arch_deepseek, NULL, 64);
    check_shape("mla-tiny (no q bottleneck)", "mla-tiny", &mw_arch_deepseek, mla_no_q, 64);
    check_shape("mla-tiny (a mixture)", "mla-tiny", &mw_arch_deepseek, mla_moe, 64);
    check_shape("mla-tiny (32 experts, 3 dense)", "mla-tiny", &mw_arch_deepseek, many_experts, 64);
    return test_summary("test_calib");
}
