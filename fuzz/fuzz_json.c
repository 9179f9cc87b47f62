/* libFuzzer target: the JSON reader (mw_json_parse) on arbitrary bytes, under a memory limit that
 * the first byte picks (4 KiB, 64 KiB or 16 MiB), so that the limit's refusals are reached too.
 * Must never crash, leak or read out of bounds; an accepted document must be a well-formed tree
 * (indices in range, every child after its parent, strings NUL-terminated) held within the limit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const size_t limits[3] = {4096, 65536, (size_t)16 << 20};
    size_t limit = limits[data[0] % 3];
    mw_json j;
    if (mw_json_parse(&j, (const char *)data + 1, size - 1, "fuzz", limit) != MW_OK) {
        if (j.nodes || j.strings || j.n) abort(); /* a refused parse holds nothing */
        return 0;
    }
    if (j.n < 1 || j.bytes > limit || j.n > j.cap) abort();
    size_t seen = 0;
    for (int i = 0; i < j.n; i++) {
        const mw_json_node *n = &j.nodes[i];
        if (n->first >= j.n || n->next >= j.n || (n->first >= 0 && n->first <= i) ||
            (n->next >= 0 && n->next <= i))
            abort();
        if (n->first >= 0 && n->type != MW_JSON_ARR && n->type != MW_JSON_OBJ) abort();
        if (n->type == MW_JSON_STR) seen += strlen(n->str);
        if (n->key) seen += strlen(n->key);
        if (n->type == MW_JSON_OBJ) /* every key is found (the first of equal ones) */
            for (int c = n->first; c >= 0; c = j.nodes[c].next)
                if (!j.nodes[c].key || mw_json_get(&j, i, j.nodes[c].key) < 0) abort();
    }
    if (seen > j.slen) abort();
    mw_json_free(&j);
    return 0;
}
