/* Which tokenizer a model reads and which one made a token file: train, eval and sample refuse
 * to feed a model ids of another tokenizer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../text/tokenizer.h"
#include "cli.h"

static int is_file(const char *dir, const char *name) {
    char p[4400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

mw_tokenizer *hf_tokenizer(const char *path, int arch, int vocab, mw_tokenizer_id *id, char *src, size_t n) {
    char dir[4096];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) { /* the weights file: its directory */
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    memset(id, 0, sizeof *id);
    if ((is_file(dir, "encoder.json") && is_file(dir, "vocab.bpe")) ||
        (is_file(dir, "vocab.json") && is_file(dir, "merges.txt")) || is_file(dir, "tokenizer.json")) {
        mw_tokenizer *t;
        if (mw_tokenizer_load_gpt2(&t, dir) != MW_OK) die(1, "%s", mw_last_error());
        mw_tokenizer_identity(t, id);
        if (src) snprintf(src, n, "the tokenizer files in %s", dir);
        return t;
    }
    if (arch == MW_ARCH_GPT2 && vocab == 50257) { /* GPT-2 itself: GPT-2's tokenizer */
        snprintf(id->name, sizeof id->name, "gpt2");
        id->hash = MW_TOKENIZER_GPT2_HASH;
        if (src) snprintf(src, n, "GPT-2's, by the vocabulary size 50257 of a GPT-2 model (no tokenizer files in %s)", dir);
        return NULL;
    }
    if (src)
        snprintf(src, n, "unknown: no tokenizer files in %s, and a %s model of vocabulary %d is not GPT-2 itself", dir,
                 arch == MW_ARCH_LLAMA ? "Llama" : "GPT-2", vocab);
    return NULL;
}

void warn_unrecorded(const mw_data *d) {
    if (d && mw_data_version(d) == 1)
        fprintf(stderr, "memwall: warning: %s is a version-1 token file, which does not record its tokenizer: "
                        "it cannot be checked against the model's (run prepare again to record it)\n",
                mw_data_path(d));
}

void check_data_tokenizer(const mw_data *d, const mw_tokenizer_id *model, const char *who) {
    char a[128], b[128];
    if (mw_tokenizer_id_conflict(mw_data_tokenizer(d), model))
        die(1, "%s was made with tokenizer %s, but the model (%s) reads tokenizer %s: prepare the data with the "
               "model's tokenizer",
            mw_data_path(d), mw_tokenizer_id_str(mw_data_tokenizer(d), a, sizeof a), who,
            mw_tokenizer_id_str(model, b, sizeof b));
}

void train_tokenizer(opts *o, const mw_data *train, const mw_data *val, const char *ckpt, const mw_ckpt_info *info,
                     char *line, size_t n) {
    char a[128], b[128], who[4300], src[4400] = "";
    warn_unrecorded(train);
    warn_unrecorded(val);
    const mw_tokenizer_id *data = mw_data_tokenizer(train);
    if (val && mw_tokenizer_id_conflict(data, mw_data_tokenizer(val)))
        die(1, "%s was made with tokenizer %s, %s with tokenizer %s: prepare both with one tokenizer",
            mw_data_path(train), mw_tokenizer_id_str(data, a, sizeof a), mw_data_path(val),
            mw_tokenizer_id_str(mw_data_tokenizer(val), b, sizeof b));
    const mw_data *known = data->name[0] ? train : val && mw_data_tokenizer(val)->name[0] ? val : NULL;
    if (known) data = mw_data_tokenizer(known);
    mw_tokenizer_id model = {{0}, 0};
    if (ckpt && ckpt[0]) { /* a resumed run reads what its checkpoint read */
        model = info->cfg.tokenizer;
        snprintf(who, sizeof who, "checkpoint %s", ckpt);
    } else if (o->init) { /* Hugging Face weights read their own tokenizer's ids */
        mw_tokenizer_free(hf_tokenizer(o->init + 3, o->cfg.arch, o->cfg.vocab, &model, src, sizeof src));
        snprintf(who, sizeof who, "--init %s", o->init);
    }
    if (known && model.name[0]) check_data_tokenizer(known, &model, who);
    o->cfg.tokenizer = model.name[0] ? model : *data; /* recorded in every checkpoint */
    snprintf(line, n, "  tokenizer: %s%s%s\n", mw_tokenizer_id_str(&o->cfg.tokenizer, a, sizeof a), src[0] ? ", " : "",
             src);
}
