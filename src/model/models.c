/* The model families memwall knows: adding one is a line here and its own file. */
#include "../graph/graph.h"

extern const mw_model_def mw_arch_gpt2, mw_arch_llama;

const mw_model_def *mw_arch_get(int arch) {
    switch (arch) {
    case MW_ARCH_GPT2: return &mw_arch_gpt2;
    case MW_ARCH_LLAMA: return &mw_arch_llama;
    default: return 0;
    }
}
