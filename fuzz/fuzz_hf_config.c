/* libFuzzer target: a Hugging Face config.json as mw_hf_inspect parses it (mw_hf_config_parse on
 * the file's bytes). Must never crash, leak or read out of bounds; an accepted config's shape
 * fields are 0 (not given) or positive and below 2^30. */
#include <stdint.h>
#include <stdlib.h>

#include "../src/model/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mw_hf_config c;
    if (mw_hf_config_parse((const char *)data, size, "config.json", &c) != MW_OK) return 0;
    const int v[5] = {c.n_layer, c.n_head, c.n_embd, c.vocab, c.ctx};
    for (int k = 0; k < 5; k++)
        if (v[k] < 0 || v[k] >= (1 << 30)) abort();
    return 0;
}
