/* GPT-2 tokenizer throughput: MB/s of mw_tokenizer_encode on one thread and of
 * mw_tokenizer_encode_docs on N threads, each with a cold word cache (a freshly loaded tokenizer;
 * loading is not timed) and a warm one (the same text again). Medians of RUNS runs.
 *   build/tokenize_bench VOCAB_DIR TEXT_FILE [RUNS] [THREADS]
 * Prints one JSON line; "checksum" (h = h * 31 + id over the ids of the whole text, mod 2^32) and
 * "tokens" let bench/tiktoken_bench.mjs's figures be checked against the same ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/text/tokenizer.h"
#include "memwall.h"
#include "timing.h"

#define now bench_now
#define median bench_median

static void die(const char *what) {
    fprintf(stderr, "tokenize_bench: %s: %s\n", what, mw_last_error());
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s VOCAB_DIR TEXT_FILE [RUNS] [THREADS]\n", argv[0]);
        return 1;
    }
    int runs = argc > 3 ? atoi(argv[3]) : 5, threads = argc > 4 ? atoi(argv[4]) : 2;
    if (runs < 1 || runs > 100 || threads < 1) return fprintf(stderr, "bad RUNS or THREADS\n"), 1;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return perror(argv[2]), 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n + 1);
    if (!text || fread(text, 1, n, f) != n) return fprintf(stderr, "cannot read %s\n", argv[2]), 1;
    fclose(f);

    /* documents for the threaded encoder: ~64 KB pieces cut after a newline */
    size_t maxd = n / 1024 + 2, nd = 0;
    const char **docs = malloc(maxd * sizeof *docs);
    size_t *lens = malloc(maxd * sizeof *lens);
    for (size_t i = 0; i < n;) {
        size_t e = i + 65536 < n ? i + 65536 : n;
        while (e < n && text[e - 1] != '\n') e++;
        docs[nd] = text + i, lens[nd++] = e - i;
        i = e;
    }
    int32_t **out = malloc(nd * sizeof *out);
    size_t *outn = malloc(nd * sizeof *outn);

    double c1[100], w1[100], cN[100], wN[100];
    size_t tokens = 0;
    uint32_t sum = 0;
    for (int r = 0; r < runs; r++) {
        mw_tokenizer *t;
        int32_t *ids = NULL;
        size_t len = 0, cap = 0;
        if (mw_tokenizer_load_gpt2(&t, argv[1]) != MW_OK) die("load");
        double t0 = now();
        if (mw_tokenizer_encode(t, text, n, &ids, &len, &cap) != MW_OK) die("encode");
        c1[r] = n / (now() - t0) / 1e6;
        len = 0;
        t0 = now();
        if (mw_tokenizer_encode(t, text, n, &ids, &len, &cap) != MW_OK) die("encode");
        w1[r] = n / (now() - t0) / 1e6;
        tokens = len;
        sum = 0;
        for (size_t i = 0; i < len; i++) sum = sum * 31u + (uint32_t)ids[i];
        free(ids);
        mw_tokenizer_free(t);

        if (mw_tokenizer_load_gpt2(&t, argv[1]) != MW_OK) die("load");
        for (int pass = 0; pass < 2; pass++) {
            t0 = now();
            if (mw_tokenizer_encode_docs(t, docs, lens, nd, threads, out, outn) != MW_OK) die("encode_docs");
            double mbs = n / (now() - t0) / 1e6;
            if (pass == 0) cN[r] = mbs;
            else wN[r] = mbs;
            for (size_t d = 0; d < nd; d++) free(out[d]);
        }
        mw_tokenizer_free(t);
    }
    printf("{\"bytes\": %zu, \"tokens\": %zu, \"checksum\": %u, \"runs\": %d, \"threads\": %d, "
           "\"docs\": %zu, \"mbs_1t_cold\": %.2f, \"mbs_1t_warm\": %.2f, \"mbs_nt_cold\": %.2f, "
           "\"mbs_nt_warm\": %.2f}\n",
           n, tokens, sum, runs, threads, nd, median(c1, runs), median(w1, runs), median(cN, runs),
           median(wN, runs));
    free(out);
    free(outn);
    free(docs);
    free(lens);
    free(text);
    return 0;
}
