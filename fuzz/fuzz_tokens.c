/* libFuzzer target: the token file reader (mw_data_open, then mw_data_read of every token in
 * pieces, and mw_data_verify_shard) on arbitrary file contents, versions 1 to 3: the bytes as
 * they are, then with a valid header CRC put in at byte 56, so that the fields behind the
 * version-2/3 checksum are explored. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/core/crc32c.h"
#include "memwall.h"

static void read_all(const char *path, size_t size) {
    mw_data *d;
    if (mw_data_open(&d, path) != MW_OK) return;
    /* what the reader accepted must be consistent: a known version, a valid name or none */
    const mw_tokenizer_id *id = mw_data_tokenizer(d);
    int v = mw_data_version(d);
    if (v < 1 || v > 3 || (v == 1) != (id->name[0] == 0) || (v >= 2 && !mw_tokenizer_name_valid(id->name)))
        abort();
    if (mw_data_count(d) > size) abort(); /* at least one byte per token */
    int32_t buf[97];
    uint64_t n = mw_data_count(d);
    for (uint64_t i = 0; i < n; i += 97) {
        size_t k = n - i < 97 ? (size_t)(n - i) : 97;
        if (mw_data_read(d, i, k, buf) != MW_OK) break; /* a token outside the vocabulary */
        for (size_t j = 0; j < k; j++)
            if (buf[j] < 0 || (uint32_t)buf[j] >= mw_data_vocab(d)) abort();
    }
    uint64_t bytes;
    if (mw_data_verify_shard(d, 0, &bytes) == MW_OK && bytes != 2 * n && bytes != 4 * n) abort(); /* it read every token */
    mw_data_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("mw_fuzz_tokens", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    read_all(path, size);
    if (size >= 64) {
        uint32_t crc = mw_crc32c(0, data, 56);
        unsigned char b[4] = {(unsigned char)crc, (unsigned char)(crc >> 8), (unsigned char)(crc >> 16),
                              (unsigned char)(crc >> 24)};
        if (memcmp(data + 56, b, 4) != 0) {
            if (pwrite(fd, b, 4, 56) != 4) abort();
            read_all(path, size);
        }
    }
    return 0;
}
