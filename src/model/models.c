/* The model families memwall knows, and the public entry points that take a configuration: each
 * picks the family's declaration (mw_model_def) from cfg->arch and hands it to the graph, which
 * knows no model but the one it is given. Adding a family is a line in arch_def and its own file. */
#include "../graph/graph.h"

extern const mw_model_def mw_arch_gpt2, mw_arch_llama, mw_arch_deepseek;

/* NULL for an unknown family (the graph refuses it after validating cfg) */
static const mw_model_def *arch_def(int arch) {
    switch (arch) {
    case MW_ARCH_GPT2: return &mw_arch_gpt2;
    case MW_ARCH_LLAMA: return &mw_arch_llama;
    case MW_ARCH_DEEPSEEK: return &mw_arch_deepseek;
    default: return 0;
    }
}

mw_status mw_model_create(mw_model **out, const mw_config *cfg) {
    return mw_graph_model_create(out, arch_def(cfg->arch), cfg);
}

mw_status mw_plan(const mw_config *cfg, mw_plan_summary *out) { return mw_graph_plan(arch_def(cfg->arch), cfg, out); }
mw_status mw_plan_within(const mw_config *cfg, uint64_t limit, mw_plan_summary *out, int *placed) {
    return mw_graph_plan_within(arch_def(cfg->arch), cfg, limit, out, placed);
}
mw_status mw_plan_like(const mw_config *cfg, mw_plan_summary *out, mw_plan_ref **ref) {
    return mw_graph_plan_like(arch_def(cfg->arch), cfg, out, ref);
}
mw_status mw_plan_predict(const mw_config *cfg, mw_plan_summary *out) {
    return mw_graph_plan_predicted(arch_def(cfg->arch), cfg, out);
}

mw_status mw_plan_buffers(const mw_config *cfg, mw_plan_buffer **out, int *n) {
    return mw_graph_plan_buffers(arch_def(cfg->arch), cfg, out, n);
}

mw_status mw_plan_timeline(const mw_config *cfg, mw_plan_op **ops, int *nops) {
    return mw_graph_plan_timeline(arch_def(cfg->arch), cfg, ops, nops);
}

mw_status mw_config_tensor(const mw_config *cfg, int i, char *name, size_t name_len, int *ndim, int dims[2]) {
    return mw_graph_config_tensor(arch_def(cfg->arch), cfg, i, name, name_len, ndim, dims);
}
