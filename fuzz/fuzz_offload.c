/* libFuzzer target: --offload's chunk forms (src/memory/chunks.c; MODE:resident=K and
 * params=R,grads=R,optim=R with embed, head and parts joined by +). Byte 0 is the model's blocks
 * L (0 .. 63, bit 6 set: L unknown, the syntax alone as the CLI checks it first; L = 0, which no
 * model has, must be refused by every form); the rest the
 * form, cut at 95 characters (cfg.offload_spec's room). Must never crash or read out of bounds.
 * Checks: mw_offload_parse and the syntax-only parse agree; a form accepted for L blocks is
 * accepted by the syntax-only parse with the same widest mode or a wider one (resident=L keeps
 * every block); its masks hold only the three categories (and the ends' named flags); and where
 * every category's blocks on disk are one range, its text (mw_chunks_text) parses back to the
 * same masks and mode, and prints the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/memory/chunks.h"
#include "memwall.h"

static int one_range(const unsigned char *blk, int L) {
    for (int c = 0; c < 3; c++) {
        int runs = 0;
        for (int l = 0; l < L; l++)
            if ((blk[l] >> c & 1) && (l == 0 || !(blk[l - 1] >> c & 1))) runs++;
        if (runs > 1) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int L = data[0] & 64 ? -1 : data[0] & 63;
    char s[96];
    const size_t n = size - 1 < sizeof s - 1 ? size - 1 : sizeof s - 1;
    memcpy(s, data + 1, n);
    s[n] = 0;
    mw_config c;
    memset(&c, 0, sizeof c);
    int w0 = -1, w1 = -1;
    const int syn = mw_chunks_is_form(s) && mw_chunks_parse(s, -1, NULL, NULL, &w0) == MW_OK;
    const int cli = mw_offload_parse(&c, s) == MW_OK;
    if (!mw_chunks_is_form(s)) return 0; /* a plain mode's name, or refused: not a form */
    if (cli != syn) abort();
    if (L < 0) return 0;
    unsigned char blk[64], ends[2];
    if (mw_chunks_parse(s, L, blk, ends, &w1) != MW_OK) return 0;
    if (L == 0) abort(); /* a model of 0 blocks: refused */
    if (!syn || w1 > w0 || w1 < MW_OFFLOAD_NONE || w1 > MW_OFFLOAD_ALL) abort();
    for (int l = 0; l < L; l++)
        if (blk[l] & ~7u) abort();
    for (int e = 0; e < 2; e++)
        if (ends[e] & ~(7u | (7u * MW_CHUNK_NAMED))) abort();
    if (!one_range(blk, L)) return 0;
    unsigned char ends7[2] = {(unsigned char)(ends[0] & 7), (unsigned char)(ends[1] & 7)};
    char t[128], t2[128];
    mw_chunks_text(blk, L, ends7, t, sizeof t);
    unsigned char blk2[64], e2[2];
    int w2;
    if (mw_chunks_parse(t, L, blk2, e2, &w2) != MW_OK) abort();
    if ((L && memcmp(blk, blk2, (size_t)L)) || (e2[0] & 7) != ends7[0] || (e2[1] & 7) != ends7[1] || w2 != w1) abort();
    unsigned char e27[2] = {(unsigned char)(e2[0] & 7), (unsigned char)(e2[1] & 7)};
    mw_chunks_text(blk2, L, e27, t2, sizeof t2);
    if (strcmp(t, t2)) abort();
    return 0;
}
