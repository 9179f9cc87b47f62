/* The JSON reader's memory bound: a document whose parse would need more than the caller's limit
 * is refused with MW_ERR_FORMAT, before it allocates past the limit (peak RSS grows by less than
 * the unbounded parse would need); one under the limit parses, holding at most the limit. The
 * safetensors header reader applies its own limit. */
#include <sys/resource.h>

#include "../src/core/json.h"
#include "../src/model/safetensors.h"
#include "check.h"
#include "memwall.h"

static size_t peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

/* "[0,0,...,0]" with n elements: n + 1 nodes from 2n + 1 bytes */
static char *zeros(size_t n, size_t *len) {
    char *t = malloc(2 * n + 2);
    t[0] = '[';
    for (size_t i = 0; i < n; i++) t[1 + 2 * i] = '0', t[2 + 2 * i] = ',';
    t[2 * n] = ']';
    t[2 * n + 1] = 0;
    *len = 2 * n + 1;
    return t;
}

int main(void) {
    /* 1. a 20 MB array of 10 M zeros: 480 MB of nodes unbounded; refused under the 64 MiB
     * safetensors limit without growing the process by the unbounded amount (measured: +64 MiB,
     * +180 MiB under ASan, whose quarantine keeps the arrays realloc left behind). Run first, so
     * that the high-water mark of RSS is this parse's. */
    size_t len;
    char *text = zeros(10000000, &len);
    size_t before = peak_rss();
    mw_json j;
    mw_status s = mw_json_parse(&j, text, len, "big.json", MW_JSON_MAX_SAFETENSORS);
    size_t grew = peak_rss() - before;
    CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), "big.json: parsing it would take more than 64 MiB"),
          "10 M nodes under a 64 MiB limit: %s (%s)", mw_status_str(s), mw_last_error());
    CHECK(!j.nodes && !j.strings && j.n == 0, "a refused parse holds nothing");
    CHECK(grew < ((size_t)300 << 20), "the refused parse grew peak RSS by %zu MiB", grew >> 20);
    printf("10 M-node document under the 64 MiB limit: refused (%s), peak RSS +%zu MiB\n", mw_last_error(),
           grew >> 20);
    free(text);

    /* 2. under the limit it parses; the memory held is counted and within the limit */
    text = zeros(100000, &len);
    CHECK_OK(mw_json_parse(&j, text, len, "small.json", (size_t)8 << 20));
    CHECK(j.n == 100001 && j.bytes <= ((size_t)8 << 20) && j.bytes >= 100001 * sizeof(mw_json_node),
          "100001 nodes, %zu bytes held", j.bytes);
    size_t need = j.n * sizeof(mw_json_node) + j.scap;
    mw_json_free(&j);
    /* the same document with exactly what it needs (the arrays stop doubling at the limit) */
    CHECK_OK(mw_json_parse(&j, text, len, "small.json", need));
    CHECK(j.bytes <= need, "held %zu of %zu", j.bytes, need);
    mw_json_free(&j);
    s = mw_json_parse(&j, text, len, "small.json", need - sizeof(mw_json_node));
    CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), "would take more than"), "one node short: %s",
          mw_status_str(s));
    s = mw_json_parse(&j, text, len, "small.json", (size_t)1 << 20);
    CHECK(s == MW_ERR_FORMAT, "100001 nodes under 1 MiB: %s", mw_status_str(s));
    free(text);

    /* 3. decoded strings count too: one 3 MB string under a 1 MiB limit */
    len = 3000002;
    text = malloc(len + 1);
    memset(text, 'a', len);
    text[0] = text[len - 1] = '"';
    text[len] = 0;
    s = mw_json_parse(&j, text, len, "str.json", (size_t)1 << 20);
    CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), "more than 1 MiB"), "3 MB string under 1 MiB: %s",
          mw_last_error());
    CHECK_OK(mw_json_parse(&j, text, len, "str.json", (size_t)4 << 20));
    CHECK(j.n == 1 && strlen(j.nodes[0].str) == len - 2, "the string parses under 4 MiB");
    mw_json_free(&j);
    free(text);

    /* 4. the safetensors header reader uses its limit: a header of 6 M zeros is refused for its
     * memory, not parsed into 288 MB of nodes first */
    text = zeros(6000000, &len);
    mw_st_file f;
    memset(&f, 0, sizeof f);
    f.fd = -1;
    snprintf(f.path, sizeof f.path, "big.safetensors");
    s = mw_st_parse_header(&f, text, len, 8, 0);
    CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), "would take more than 64 MiB"), "header of 6 M nodes: %s",
          mw_last_error());
    mw_st_close(&f);
    free(text);

    /* 5. ordinary documents are untouched by the bound */
    const char *doc = "{\"a\": [1, 2.5, \"x\\u00e9\", true, null], \"b\": {\"c\": -3}}";
    CHECK_OK(mw_json_parse(&j, doc, strlen(doc), "doc", 4096));
    int a = mw_json_get(&j, 0, "a"), b = mw_json_get(&j, 0, "b");
    CHECK(a > 0 && b > 0 && j.nodes[mw_json_get(&j, b, "c")].i == -3, "lookups");
    CHECK(strcmp(j.nodes[j.nodes[j.nodes[j.nodes[a].first].next].next].str, "x\xc3\xa9") == 0, "\\u00e9");
    mw_json_free(&j);
    return test_summary("test_json");
}
