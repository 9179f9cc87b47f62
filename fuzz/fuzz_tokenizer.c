/* libFuzzer target: the tokenizers on arbitrary bytes.
 *  1. The input as a Hugging Face tokenizer.json (mw_tokenizer_load on a memfd): the vocabulary
 *     and the pipeline reader (normalizer, pre-tokenizer regexes, decoder, post_processor); when
 *     it loads, the input itself is encoded with it and decoded (ids inside the vocabulary).
 *  2. The input as a pre-tokenizer regex: when it compiles, it runs over the input as text, and
 *     every match must be non-empty, inside the text and after the one before.
 *  3. The input as text, encoded with the byte tokenizer, a tiny byte-level BPE (256 byte tokens,
 *     9 merges, <|endoftext|>), a tiny byte-level BPE with Llama 3's Split regex and ignore_merges,
 *     a tiny SentencePiece BPE with Llama 2's pipeline (byte fallback, Strip decoder), all built
 *     here, and Llama 2's and Llama 3's own tokenizers when data/llama2 and data/llama3 hold them.
 * Each of those encodes the input (its first 2 KiB) in parts too, as prepare does a long document:
 * cut by mw_tokstream_cut knowing only a window of it (sizes drawn from the input), the ids must
 * be those of the whole (issue 30).
 * Must never crash, leak or read out of bounds; every encoding must decode to the input byte for
 * byte (the byte-level tokenizers are lossless; the SentencePiece ones give U+2581 back as a
 * space), with ids inside the vocabulary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/text/regex.h"
#include "../src/text/tokenizer.h"
#include "../src/text/tokstream.h"

/* check: 0 ids in range only; 1 lossless; 2 lossless but for U+2581, which decodes as a space */
static void round_trip_as(const mw_tokenizer *t, const uint8_t *data, size_t size, int check) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0, tn = 0, tcap = 0;
    char *text = NULL;
    if (mw_tokenizer_encode(t, (const char *)data, size, &ids, &n, &cap) != MW_OK) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= mw_tokenizer_vocab(t)) abort();
    if (mw_tokenizer_decode(t, ids, n, &text, &tn, &tcap) != MW_OK) abort();
    if (check == 1 && (tn != size || (size && memcmp(text, data, size) != 0))) abort();
    if (check == 2) {
        size_t k = 0;
        for (size_t i = 0; i < size; k++) {
            int bar = i + 3 <= size && !memcmp(data + i, "\xE2\x96\x81", 3);
            if (k >= tn || (unsigned char)text[k] != (bar ? ' ' : data[i])) abort();
            i += bar ? 3 : 1;
        }
        if (k != tn) abort();
    }
    free(ids);
    free(text);
}
static void round_trip(const mw_tokenizer *t, const uint8_t *data, size_t size) { round_trip_as(t, data, size, 1); }

/* The input encoded in parts must give the ids of the input encoded whole: each cut made knowing
 * the part so far and a window past it, max and window drawn from the input's bytes. */
static void streamed(const mw_tokenizer *t, const uint8_t *data, size_t size) {
    if (size > 2048) size = 2048; /* the first 2 KiB: cuts cost the fuzzer's time */
    int32_t *whole = NULL, *ids = NULL;
    size_t nw = 0, cw = 0, ni = 0, ci = 0, at = 0, k = 0;
    if (mw_tokenizer_encode(t, (const char *)data, size, &whole, &nw, &cw) != MW_OK) abort();
    while (at < size) {
        size_t max = 1 + (size ? data[k++ % size] % 48 : 0), cut = 0;
        for (;;) {
            if (at + max >= size) {
                cut = size - at;
                break;
            }
            size_t win = max + data[k++ % size] % 8;
            if (at + win > size) win = size - at;
            if (mw_tokstream_cut(t, (const char *)data + at, win, max, at == 0, NULL, NULL, &cut) != MW_OK) abort();
            if (cut) break;
            max *= 2;
        }
        if (cut == 0 || cut > size - at) abort();
        if (mw_tokenizer_encode_part(t, (const char *)data + at, cut, at == 0, &ids, &ni, &ci) != MW_OK) abort();
        at += cut;
    }
    if (ni != nw || (nw && memcmp(ids, whole, nw * sizeof *ids) != 0)) abort();
    free(whole), free(ids);
}

/* the path of a memfd holding data */
static const char *as_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        if ((fd = memfd_create("mw_fuzz_tok", 0)) < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    return path;
}

/* GPT-2's byte-level alphabet: byte b as a JSON string body (UTF-8 of its code point, escaped) */
static size_t byte_char(int b, char *out) {
    int cp = b, n = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        for (int x = 0; x < b; x++)
            n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
        cp = 256 + n;
    }
    if (cp == '"' || cp == '\\') return (size_t)sprintf(out, "\\%c", cp);
    if (cp < 0x80) return (size_t)sprintf(out, "%c", cp);
    return (size_t)sprintf(out, "%c%c", 0xC0 | cp >> 6, 0x80 | (cp & 63));
}

static mw_tokenizer *tiny_bpe(void) {
    static const char *const merges[][2] = {{"t", "h"}, {"th", "e"}, {"\xc4\xa0", "t"}, {"\xc4\xa0", "th"},
                                            {"\xc4\xa0th", "e"}, {"a", "n"}, {"an", "d"}, {"i", "n"},
                                            {"in", "g"}};
    static char js[16384];
    size_t n = (size_t)sprintf(js, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    char c[8];
    for (int b = 0; b < 256; b++) {
        c[byte_char(b, c)] = 0;
        n += (size_t)sprintf(js + n, "%s\"%s\": %d", b ? ", " : "", c, b);
    }
    for (int m = 0; m < 9; m++) n += (size_t)sprintf(js + n, ", \"%s%s\": %d", merges[m][0], merges[m][1], 256 + m);
    n += (size_t)sprintf(js + n, "}, \"merges\": [");
    for (int m = 0; m < 9; m++) n += (size_t)sprintf(js + n, "%s\"%s %s\"", m ? ", " : "", merges[m][0], merges[m][1]);
    n += (size_t)sprintf(js + n, "]}, \"added_tokens\": [{\"id\": 265, \"content\": \"<|endoftext|>\"}]}");
    mw_tokenizer *t;
    if (mw_tokenizer_load_gpt2(&t, as_file((const uint8_t *)js, n)) != MW_OK) abort();
    if (mw_tokenizer_vocab(t) != 266 || mw_tokenizer_eot(t) != 265) abort();
    return t;
}

/* The tiny byte-level BPE's vocabulary with another pipeline: Llama 3's Split regex. */
static mw_tokenizer *tiny_llama3(void) {
    static const char *const pre =
        "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
        "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, "
        "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "
        "false, \"use_regex\": false}]}, \"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {";
    static char js[20000];
    size_t n = (size_t)sprintf(js, "%s", pre);
    char c[8];
    for (int b = 0; b < 256; b++) {
        c[byte_char(b, c)] = 0;
        n += (size_t)sprintf(js + n, "%s\"%s\": %d", b ? ", " : "", c, b);
    }
    n += (size_t)sprintf(js + n, ", \"th\": 256, \"the\": 257, \"\xc4\xa0t\": 258, \"\xc4\xa0the\": 259}, \"merges\": "
                                 "[\"t h\", \"th e\", \"\xc4\xa0 t\"]}}");
    mw_tokenizer *t;
    if (mw_tokenizer_load(&t, as_file((const uint8_t *)js, n)) != MW_OK) abort();
    return t;
}

/* A SentencePiece BPE with Llama 2's pipeline: <unk> <s> </s>, the byte tokens, a few pieces. */
static mw_tokenizer *tiny_sp(void) {
    static char js[32768];
    size_t n = (size_t)sprintf(
        js, "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\"}, {\"id\": 1, \"content\": \"<s>\"}, {\"id\": 2, "
            "\"content\": \"</s>\"}], \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": "
            "\"Prepend\", \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
            "\"content\": \"\\u2581\"}]}, \"pre_tokenizer\": null, \"post_processor\": {\"type\": "
            "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": "
            "\"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [1]}}}, \"decoder\": {\"type\": \"Sequence\", "
            "\"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, \"content\": \" \"}, "
            "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", "
            "\"start\": 1, \"stop\": 0}]}, \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": "
            "{\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2");
    for (int b = 0; b < 256; b++) n += (size_t)sprintf(js + n, ", \"<0x%02X>\": %d", b, 3 + b);
    n += (size_t)sprintf(js + n, ", \"\\u2581\": 259, \"t\": 260, \"h\": 261, \"e\": 262, \"th\": 263, \"the\": 264, "
                                 "\"\\u2581the\": 265, \"\\u00e9\": 266, \"\\u2581\\u2581\": 267}, \"merges\": [\"t h\", "
                                 "\"th e\", \"\\u2581 the\", \"\\u2581 \\u2581\"]}}");
    mw_tokenizer *t;
    if (mw_tokenizer_load(&t, as_file((const uint8_t *)js, n)) != MW_OK) abort();
    return t;
}

static void regex_run(const uint8_t *data, size_t size) {
    mw_regex *re;
    if (mw_regex_compile(&re, (const char *)data, size, "fuzz") != MW_OK) return;
    size_t at = 0, ms, me, need, ms2, me2;
    for (;;) {
        int r = mw_regex_find_need(re, NULL, data, size, at, &ms, &me, &need);
        if (r < 0) abort();
        if (r == 0) break;
        if (ms < at || me <= ms || me > size) abort();
        /* decided by data[0..need): the same match in that prefix */
        if (need <= size && (mw_regex_find(re, NULL, data, need, at, &ms2, &me2) != 1 || ms2 != ms || me2 != me)) abort();
        at = me;
    }
    mw_regex_free(re);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static mw_tokenizer *bytes, *bpe, *l3, *sp, *real2, *real3;
    if (!bytes) {
        if (mw_tokenizer_bytes(&bytes) != MW_OK) abort();
        bpe = tiny_bpe();
        l3 = tiny_llama3();
        sp = tiny_sp();
        if (mw_tokenizer_load(&real2, "data/llama2") != MW_OK) real2 = NULL; /* optional */
        if (mw_tokenizer_load(&real3, "data/llama3") != MW_OK) real3 = NULL;
    }
    round_trip(bytes, data, size);
    round_trip(bpe, data, size);
    round_trip(l3, data, size);
    round_trip_as(sp, data, size, 2);
    if (real2) round_trip_as(real2, data, size, 2);
    if (real3) round_trip(real3, data, size);
    streamed(bytes, data, size);
    streamed(bpe, data, size);
    streamed(l3, data, size);
    streamed(sp, data, size);
    if (real2) streamed(real2, data, size);
    if (real3) streamed(real3, data, size);
    regex_run(data, size);
    mw_tokenizer *t;
    if (mw_tokenizer_load(&t, as_file(data, size)) == MW_OK) {
        round_trip_as(t, data, size, 0);
        mw_tokenizer_free(t);
    }
    return 0;
}
