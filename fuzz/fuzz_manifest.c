/* libFuzzer target: the token-set manifest parser (mw_manifest_parse) on arbitrary bytes. What it
 * accepts must be consistent: widths 2 or 4, a vocabulary that fits, a valid tokenizer name,
 * valid shard file names, positive counts, parts that add up to the shards; and written back
 * (mw_manifest_write) it must parse to the same manifest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/data/tokset.h"
#include "memwall.h"

static int same(const mw_manifest *a, const mw_manifest *b) {
    if (a->vocab != b->vocab || a->width != b->width || strcmp(a->tok.name, b->tok.name) || a->tok.hash != b->tok.hash ||
        a->nparts != b->nparts)
        return 0;
    for (int k = 0; k < 2; k++) {
        if (a->n[k] != b->n[k]) return 0;
        for (int i = 0; i < a->n[k]; i++)
            if (strcmp(a->shard[k][i].file, b->shard[k][i].file) || a->shard[k][i].tokens != b->shard[k][i].tokens ||
                a->shard[k][i].crc != b->shard[k][i].crc)
                return 0;
    }
    return memcmp(a->part, b->part, (size_t)a->nparts * sizeof *a->part) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mw_manifest m;
    if (mw_manifest_parse(&m, (const char *)data, size, "fuzz") != MW_OK) return 0;
    if ((m.width != 2 && m.width != 4) || m.vocab < 1 || (m.width == 2 && m.vocab > 65536) || m.vocab > INT32_MAX ||
        !mw_tokenizer_name_valid(m.tok.name) || m.n[0] < 1)
        abort();
    uint64_t sum[2] = {0, 0}, psum[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < m.n[k]; i++) {
            if (!mw_set_file_valid(m.shard[k][i].file) || m.shard[k][i].tokens == 0) abort();
            sum[k] += m.shard[k][i].tokens;
        }
    for (int i = 0; i < m.nparts; i++) psum[0] += m.part[i].train, psum[1] += m.part[i].val;
    if (psum[0] != sum[0] || psum[1] != sum[1]) abort();
    /* written and read back: the same manifest */
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/mw_fuzz_manifest.%d.json", (int)getpid());
    if (mw_manifest_write(&m, path) != MW_OK) abort();
    mw_manifest back;
    if (mw_manifest_read(&back, path) != MW_OK || !same(&m, &back)) abort();
    unlink(path);
    mw_manifest_free(&back);
    mw_manifest_free(&m);
    return 0;
}
