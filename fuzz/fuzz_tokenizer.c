/* libFuzzer target: the tokenizers on arbitrary bytes.
 *  1. The input as a Hugging Face tokenizer.json (mw_tokenizer_load_gpt2 on a memfd); when it
 *     loads, the input itself is encoded with it and decoded back.
 *  2. The input as text, encoded with the byte tokenizer and with a tiny byte-level BPE tokenizer
 *     (256 byte tokens, 9 merges, <|endoftext|>), loaded once from a tokenizer.json built here.
 * Must never crash, leak or read out of bounds; every encoding must decode to the input byte for
 * byte (the tokenizers are lossless), with ids inside the vocabulary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/train/tokenizer.h"

static void round_trip(const mw_tokenizer *t, const uint8_t *data, size_t size) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0, tn = 0, tcap = 0;
    char *text = NULL;
    if (mw_tokenizer_encode(t, (const char *)data, size, &ids, &n, &cap) != MW_OK) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= mw_tokenizer_vocab(t)) abort();
    if (mw_tokenizer_decode(t, ids, n, &text, &tn, &tcap) != MW_OK) abort();
    if (tn != size || (size && memcmp(text, data, size) != 0)) abort();
    free(ids);
    free(text);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static mw_tokenizer *bytes, *bpe;
    if (!bytes) {
        if (mw_tokenizer_bytes(&bytes) != MW_OK) abort();
        bpe = tiny_bpe();
    }
    round_trip(bytes, data, size);
    round_trip(bpe, data, size);
    mw_tokenizer *t;
    if (mw_tokenizer_load_gpt2(&t, as_file(data, size)) == MW_OK) {
        round_trip(t, data, size);
        mw_tokenizer_free(t);
    }
    return 0;
}
