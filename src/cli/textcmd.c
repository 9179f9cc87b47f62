/* The text commands' shared helpers (textcmd.h): the GPT-2 vocabulary directory, opening the
 * tokenizer a command names, loading a trained model with the tokenizer it reads, reading a whole
 * stream. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "textcmd.h"

/* ---- tokenizers ------------------------------------------------------------------------------ */

const char *vocab_dir(const opts *o, char *buf, size_t n) {
    if (o->vocab_dir) return o->vocab_dir;
    const char *env = getenv("MEMWALL_VOCAB_DIR");
    if (env && *env) return env;
    if (access("data/gpt2/encoder.json", R_OK) == 0 || access("data/gpt2/tokenizer.json", R_OK) == 0)
        return "data/gpt2";
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(buf, n, "%s/../data/gpt2", exe);
            char probe[4400];
            snprintf(probe, sizeof probe, "%s/encoder.json", buf);
            if (access(probe, R_OK) == 0) return buf;
        }
    }
    return "data/gpt2";
}

mw_tokenizer *open_tokenizer(const opts *o, int model_vocab, model_tok *mt) {
    const char *name = o->tokenizer;
    int is_auto = strcmp(name, "auto") == 0;
    mw_tokenizer *t = NULL;
    if (is_auto && mt && mt->beside) { /* hf: weights with their own tokenizer files */
        t = mt->beside;
        mt->beside = NULL;
        name = "beside the weights";
    } else if (is_auto && mt && mt->id.name[0]) {
        if (strcmp(mt->id.name, "bytes") && strcmp(mt->id.name, "gpt2"))
            die(1, "the model (%s) reads tokenizer %s: pass --tokenizer PATH of its tokenizer.json", mt->who,
                mt->id.name);
        name = mt->id.name;
    } else if (is_auto) {
        if (model_vocab == 256) name = "bytes";
        else if (model_vocab == 50257 && mt && mt->arch == MW_ARCH_GPT2) name = "gpt2";
        else
            die(1, "the tokenizer of the model%s%s%s is unknown (no tokenizer files beside it, none recorded) and a "
                   "%s vocabulary of %d does not say which: pass --tokenizer PATH of its tokenizer.json (or "
                   "--tokenizer gpt2 or bytes)",
                mt ? " (" : "", mt ? mt->who : "", mt ? ")" : "", mt && mt->arch == MW_ARCH_LLAMA ? "Llama" : "GPT-2",
                model_vocab);
    }
    char label[4400]; /* the tokenizer for messages: bytes, or gpt2 and where it came from */
    snprintf(label, sizeof label, "%s", name);
    if (t) {
        /* loaded with the model */
    } else if (strcmp(name, "bytes") == 0) {
        if (mw_tokenizer_bytes(&t) != MW_OK) die(1, "%s", mw_last_error());
    } else if (strcmp(name, "gpt2") == 0) {
        char buf[4200];
        const char *dir = vocab_dir(o, buf, sizeof buf);
        char probe[4300], probe2[4300];
        snprintf(probe, sizeof probe, "%s/encoder.json", dir);
        snprintf(probe2, sizeof probe2, "%s/tokenizer.json", dir);
        struct stat st;
        if (access(probe, R_OK) != 0 && access(probe2, R_OK) != 0 && !(stat(dir, &st) == 0 && S_ISREG(st.st_mode)))
            die(1, "the GPT-2 vocabulary is not in %s: run scripts/fetch-gpt2-vocab.sh (make gpt2-vocab) or pass "
                   "--vocab-dir DIR holding encoder.json + vocab.bpe or tokenizer.json",
                dir);
        if (mw_tokenizer_load_gpt2(&t, dir) != MW_OK) die(1, "%s", mw_last_error());
        snprintf(label, sizeof label, "gpt2 from %s", dir);
    } else {
        struct stat st;
        if (stat(name, &st) != 0)
            die(1, "unknown --tokenizer '%s' (available: gpt2, bytes, or the path of a tokenizer.json or of a "
                   "directory holding one; scripts/fetch-llama-tokenizers.sh puts Llama's in data/llama2 and "
                   "data/llama3)", name);
        if (mw_tokenizer_load(&t, name) != MW_OK) die(1, "%s", mw_last_error());
    }
    if (model_vocab && mw_tokenizer_vocab(t) > model_vocab)
        die(1, "the tokenizer %s has %d tokens, the model only %d", label, mw_tokenizer_vocab(t), model_vocab);
    mw_tokenizer_id id;
    mw_tokenizer_identity(t, &id);
    char a[128], b[128];
    if (mt && mw_tokenizer_id_conflict(&id, &mt->id))
        die(1, "%s%s%s is %s, but the model (%s) reads tokenizer %s%s", is_auto ? "the tokenizer found (" : "--tokenizer ",
            label, is_auto ? ")" : "", mw_tokenizer_id_str(&id, a, sizeof a), mt->who,
            mw_tokenizer_id_str(&mt->id, b, sizeof b), is_auto ? ": pass --vocab-dir DIR holding its files" : "");
    return t;
}

/* Reads a whole stream; exits on failure. */
char *read_all(FILE *f, const char *what, size_t *n) {
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    *n = 0;
    for (size_t r; buf && (r = fread(buf + *n, 1, cap - *n, f)) > 0;) {
        *n += r;
        if (*n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    if (!buf) die(1, "out of memory reading %s", what);
    if (ferror(f)) die(1, "cannot read %s: %s", what, strerror(errno));
    return buf;
}

/* ---- loading a trained model ---------------------------------------------------------------- */

mw_model *load_model(opts *o, int mode, int batch, int seq, int *trained_seq, model_tok *mt) {
    memset(mt, 0, sizeof *mt);
    if (!!o->ckpt == !!o->init) die(1, "pass exactly one of --ckpt DIR|FILE and --init hf:PATH");
    char path[4096] = "";
    if (o->ckpt) {
        mw_ckpt_info info;
        resolve_ckpt(o->ckpt, path, sizeof path, &info);
        mw_config *c = &o->cfg;
        c->n_layer = info.cfg.n_layer, c->n_head = info.cfg.n_head, c->n_embd = info.cfg.n_embd;
        c->vocab = info.cfg.vocab, c->ctx = info.cfg.ctx;
        c->arch = info.cfg.arch, c->n_kv_head = info.cfg.n_kv_head, c->ffn = info.cfg.ffn;
        c->tied = info.cfg.tied, c->rope_theta = info.cfg.rope_theta, c->norm_eps = info.cfg.norm_eps;
        mw_config_copy_family(c, &info.cfg); /* the deepseek family's experts and latents */
        if (!opt_given(o, "precision")) c->precision = info.cfg.precision; /* a bf16 model runs bf16 products here too */
        if (!batch) batch = info.cfg.batch;
        if (!seq) seq = info.cfg.seq;
        if (trained_seq) *trained_seq = info.cfg.seq;
        mt->id = info.cfg.tokenizer;
        mt->arch = info.cfg.arch;
        snprintf(mt->who, sizeof mt->who, "%s", path);
    } else {
        apply_init_shape(o);
        mt->beside = hf_tokenizer(o->init + 3, o->cfg.arch, o->cfg.vocab, &mt->id, NULL, 0);
        mt->arch = o->cfg.arch;
        snprintf(mt->who, sizeof mt->who, "%s", o->init);
        if (trained_seq) *trained_seq = o->cfg.ctx;
        if (!batch) batch = 1;
        if (!seq) seq = o->cfg.ctx < 1024 ? o->cfg.ctx : 1024;
    }
    o->cfg.batch = batch;
    o->cfg.seq = seq;
    o->cfg.inference = mode;
    finish_config(o);
    mw_model *m = create_model(o);
    if (o->ckpt ? mw_ckpt_load(path, m, NULL) != MW_OK : mw_hf_load(o->init + 3, m) != MW_OK)
        die(1, "%s", mw_last_error());
    return m;
}
