/* The tokenizer files an export writes beside config.json (docs/hf.md): the files a tokenizer was
 * read from, checked against the identity the checkpoint records, named as Hugging Face names
 * them (GPT-2's encoder.json + vocab.bpe are its vocab.json + merges.txt), so that --init hf:
 * reads the export back with the same tokenizer. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/status.h"
#include "../text/tokenizer.h"
#include "hf.h"

/* every file name a tokenizer may be read from beside Hugging Face weights */
const char *const mw_hf_tok_names[MW_HF_TOK_NAMES] = {"encoder.json",   "vocab.bpe",     "vocab.json",
                                                      "merges.txt",     "tokenizer.json", "tokenizer_config.json"};

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void add(mw_hf_tokfiles *tf, const char *dir, const char *name, const char *dst) {
    if (dir) snprintf(tf->src[tf->n], sizeof tf->src[tf->n], "%s/%s", dir, name);
    else snprintf(tf->src[tf->n], sizeof tf->src[tf->n], "%s", name);
    tf->dst[tf->n++] = dst;
}

mw_status mw_hf_tokfiles_resolve(const char *src, const mw_tokenizer_id *want, int model_vocab, mw_hf_tokfiles *tf) {
    memset(tf, 0, sizeof *tf);
    if (strlen(src) > 4000) return mw_fail(MW_ERR_ARG, "export: the tokenizer path is too long");
    mw_tokenizer *t;
    MW_TRY(mw_tokenizer_load(&t, src));
    mw_tokenizer_identity(t, &tf->id);
    const int vocab = mw_tokenizer_vocab(t);
    mw_tokenizer_free(t);
    char a[128], b[128];
    if (want && want->name[0] && mw_tokenizer_id_conflict(&tf->id, want))
        return mw_fail(MW_ERR_ARG, "export: the tokenizer %s is %s, but the model reads tokenizer %s", src,
                       mw_tokenizer_id_str(&tf->id, a, sizeof a), mw_tokenizer_id_str(want, b, sizeof b));
    if (model_vocab && vocab > model_vocab)
        return mw_fail(MW_ERR_ARG, "export: the tokenizer %s has %d tokens, the model only %d", src, vocab,
                       model_vocab);
    /* the files mw_tokenizer_load read, in its order of preference */
    struct stat st;
    char p[4100], q[4100];
    if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(p, sizeof p, "%s/encoder.json", src), snprintf(q, sizeof q, "%s/vocab.bpe", src);
        if (is_file(p) && is_file(q)) {
            add(tf, src, "encoder.json", "vocab.json"), add(tf, src, "vocab.bpe", "merges.txt");
            return MW_OK;
        }
        snprintf(p, sizeof p, "%s/vocab.json", src), snprintf(q, sizeof q, "%s/merges.txt", src);
        if (is_file(p) && is_file(q)) {
            add(tf, src, "vocab.json", "vocab.json"), add(tf, src, "merges.txt", "merges.txt");
            return MW_OK;
        }
        add(tf, src, "tokenizer.json", "tokenizer.json");
        snprintf(p, sizeof p, "%s/tokenizer_config.json", src);
        if (is_file(p)) add(tf, src, "tokenizer_config.json", "tokenizer_config.json");
        return MW_OK;
    }
    add(tf, NULL, src, "tokenizer.json"); /* a tokenizer.json by any name, and its config beside it */
    const char *slash = strrchr(src, '/');
    if (slash) snprintf(p, sizeof p, "%.*s/tokenizer_config.json", (int)(slash - src), src);
    else snprintf(p, sizeof p, "tokenizer_config.json");
    if (is_file(p)) add(tf, NULL, p, "tokenizer_config.json");
    return MW_OK;
}
