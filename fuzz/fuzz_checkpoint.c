/* libFuzzer target: the checkpoint reader (mw_ckpt_verify) on arbitrary file contents, and the
 * safetensors file reader (mw_st_open) on the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/model/safetensors.h"
#include "memwall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("mw_fuzz", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    mw_ckpt_info info;
    mw_ckpt_verify(path, &info);
    mw_st_file f;
    if (mw_st_open(&f, path) == MW_OK) mw_st_close(&f);
    return 0;
}
