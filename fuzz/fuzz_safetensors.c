/* libFuzzer target: the safetensors header checker. Input: u64 little-endian data-region size,
 * then the header JSON. Must never crash, leak or read out of bounds; accepted headers must
 * describe tensors inside the data region. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t data_size = 0;
    for (int i = 7; i >= 0; i--) data_size = data_size << 8 | data[i];
    data_size &= (1ull << 40) - 1;
    mw_st_file f;
    memset(&f, 0, sizeof f);
    f.fd = -1;
    strcpy(f.path, "fuzz");
    if (mw_st_parse_header(&f, (const char *)data + 8, size - 8, 8, data_size) == MW_OK) {
        for (int i = 0; i < f.n; i++)
            if (f.t[i].begin < 8 || f.t[i].end > 8 + data_size || f.t[i].end < f.t[i].begin) abort();
    }
    mw_st_close(&f);
    return 0;
}
