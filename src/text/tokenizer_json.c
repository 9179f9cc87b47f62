/* Reading a Hugging Face tokenizer.json (and the tokenizer_config.json beside it) into the
 * vocabulary spec that tokenizer_load.c builds: the model's vocabulary and merges (byte-level or
 * SentencePiece BPE, as Llama 2's), the normalizer, the pre-tokenizer (Split regexes, ByteLevel),
 * the decoder (a SentencePiece Replace, a Strip), the added tokens, and the post-processor's
 * template (the ids around each document). Anything else is refused, naming it. */
#include <stdlib.h>
#include <string.h>

#include "../core/json.h"
#include "../core/status.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"

/* ---- tokenizer.json: the pipeline ---------------------------------------------------------- */

static const char *jstr(const mw_json *j, int obj, const char *key) { /* a string field, or NULL */
    int c = mw_json_get(j, obj, key);
    return c >= 0 && j->nodes[c].type == MW_JSON_STR ? j->nodes[c].str : NULL;
}
static int jtrue(const mw_json *j, int obj, const char *key, int dflt) { /* a boolean field */
    int c = mw_json_get(j, obj, key);
    if (c < 0 || j->nodes[c].type == MW_JSON_NULL) return dflt;
    return j->nodes[c].type == MW_JSON_BOOL ? (int)j->nodes[c].i : -1;
}
static int jnull(const mw_json *j, int c) { return c < 0 || j->nodes[c].type == MW_JSON_NULL; }

static mw_status unsupported(const char *path, const char *part, const char *type, const char *what) {
    return mw_fail(MW_ERR_FORMAT, "%s: %s type \"%.40s\" is not supported (%s)", path, part, type ? type : "?", what);
}

/* A normalizer (possibly a Sequence) into sp->norm. */
static mw_status hf_normalizer(spec *sp, const mw_json *j, int c, const char *path) {
    if (jnull(j, c)) return MW_OK;
    const char *type = jstr(j, c, "type");
    const char *ok = "Prepend, Replace of a String, or a Sequence of these";
    if (type && !strcmp(type, "Sequence")) {
        int list = mw_json_get(j, c, "normalizers");
        if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "normalizer", type, ok);
        for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next) MW_TRY(hf_normalizer(sp, j, e, path));
        return MW_OK;
    }
    norm_op op = {0};
    const char *a = NULL, *b = "";
    if (type && !strcmp(type, "Prepend")) {
        op.kind = NORM_PREPEND;
        a = jstr(j, c, "prepend");
    } else if (type && !strcmp(type, "Replace")) {
        op.kind = NORM_REPLACE;
        a = jstr(j, mw_json_get(j, c, "pattern"), "String");
        b = jstr(j, c, "content");
    } else {
        return unsupported(path, "normalizer", type, ok);
    }
    if (!a || !b || !a[0] || strlen(a) >= sizeof op.a || strlen(b) >= sizeof op.b || sp->nnorm == MAX_NORM)
        return mw_fail(MW_ERR_FORMAT, "%s: a %s normalizer without its string, or with one over 31 bytes", path, type);
    op.alen = strlen(a), op.blen = strlen(b);
    memcpy(op.a, a, op.alen), memcpy(op.b, b, op.blen);
    sp->norm[sp->nnorm++] = op;
    return MW_OK;
}

/* A pre-tokenizer (possibly a Sequence); *byte_level is set by a ByteLevel step. */
static mw_status hf_pretokenizer(spec *sp, const mw_json *j, int c, const char *path, int top, int *byte_level) {
    const char *type = jstr(j, c, "type");
    const char *ok = "Split of a Regex with behavior Isolated, ByteLevel, Metaspace alone, or a Sequence of these";
    if (type && !strcmp(type, "Sequence")) {
        int list = mw_json_get(j, c, "pretokenizers");
        if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "pre_tokenizer", type, ok);
        for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next)
            MW_TRY(hf_pretokenizer(sp, j, e, path, 0, byte_level));
        return MW_OK;
    }
    if (type && !strcmp(type, "Split")) {
        const char *re = jstr(j, mw_json_get(j, c, "pattern"), "Regex"), *beh = jstr(j, c, "behavior");
        if (!re || !beh || strcmp(beh, "Isolated") || jtrue(j, c, "invert", 0) != 0)
            return mw_fail(MW_ERR_FORMAT, "%s: a Split pre-tokenizer other than a Regex pattern with behavior "
                                          "\"Isolated\" and invert false is not supported", path);
        return mw_tok_spec_pattern(sp, re, path);
    }
    if (type && !strcmp(type, "ByteLevel")) {
        if (jtrue(j, c, "add_prefix_space", 0) != 0)
            return mw_fail(MW_ERR_FORMAT, "%s: a ByteLevel pre-tokenizer with add_prefix_space is not supported "
                                          "(its decoding would not give the text back)", path);
        *byte_level = 1;
        int use = jtrue(j, c, "use_regex", 1);
        return use == 1 ? mw_tok_spec_pattern(sp, NULL, path) : MW_OK;
    }
    if (type && !strcmp(type, "Metaspace") && top) { /* as a normalizer: " " -> ▁, then ▁ first */
        const char *rep = jstr(j, c, "replacement"), *scheme = jstr(j, c, "prepend_scheme");
        int split = jtrue(j, c, "split", 1), prefix = jtrue(j, c, "add_prefix_space", 1);
        if (!rep || !rep[0] || strlen(rep) >= 32 || split != 0 || sp->nnorm + 2 > MAX_NORM)
            return mw_fail(MW_ERR_FORMAT, "%s: a Metaspace pre-tokenizer is supported with split false only", path);
        norm_op r = {.kind = NORM_REPLACE, .alen = 1, .blen = strlen(rep)};
        r.a[0] = ' ';
        memcpy(r.b, rep, r.blen);
        sp->norm[sp->nnorm++] = r;
        if (scheme ? strcmp(scheme, "never") != 0 : prefix == 1) {
            norm_op q = {.kind = NORM_PREPEND_IF_NOT, .alen = strlen(rep)};
            memcpy(q.a, rep, q.alen);
            sp->norm[sp->nnorm++] = q;
        }
        sp->no_pretok = 1;
        return MW_OK;
    }
    return unsupported(path, "pre_tokenizer", type, ok);
}

/* A SentencePiece decoder: Replace, ByteFallback, Fuse, Strip (after Fuse), in a Sequence. */
static mw_status hf_sp_decoder(spec *sp, const mw_json *j, int c, const char *path) {
    const char *type = jstr(j, c, "type");
    const char *ok = "a Sequence of Replace of a String, ByteFallback, Fuse and Strip after Fuse";
    if (!type || strcmp(type, "Sequence")) return unsupported(path, "decoder", type, ok);
    int list = mw_json_get(j, c, "decoders"), fused = 0, fallback = 0;
    if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "decoder", type, ok);
    for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next) {
        const char *t = jstr(j, e, "type");
        if (t && !strcmp(t, "Replace")) {
            const char *a = jstr(j, mw_json_get(j, e, "pattern"), "String"), *b = jstr(j, e, "content");
            if (!a || !b || !a[0] || sp->rep_alen || strlen(b) > strlen(a) || strlen(a) >= 32 || fused)
                return mw_fail(MW_ERR_FORMAT, "%s: the decoder's Replace is not one String replaced by one no longer, "
                                              "before Fuse", path);
            sp->rep_alen = strlen(a), sp->rep_blen = strlen(b);
            memcpy(sp->rep_a, a, sp->rep_alen), memcpy(sp->rep_b, b, sp->rep_blen);
        } else if (t && !strcmp(t, "ByteFallback")) {
            fallback = 1;
        } else if (t && !strcmp(t, "Fuse")) {
            fused = 1;
        } else if (t && !strcmp(t, "Strip")) {
            const char *content = jstr(j, e, "content");
            int st = mw_json_get(j, e, "start"), sto = mw_json_get(j, e, "stop");
            if (!fused || !content || strcmp(content, " ") || st < 0 || !j->nodes[st].is_int || j->nodes[st].i < 0 ||
                j->nodes[st].i > 16 || (sto >= 0 && j->nodes[sto].i != 0))
                return mw_fail(MW_ERR_FORMAT, "%s: the decoder's Strip is supported after Fuse, of \" \", at the "
                                              "start only", path);
            sp->strip_lead = (int)j->nodes[st].i;
        } else {
            return unsupported(path, "decoder step", t, ok);
        }
    }
    if (!fallback) return mw_fail(MW_ERR_FORMAT, "%s: a byte_fallback model needs a ByteFallback decoder", path);
    return MW_OK;
}

/* The special tokens the post_processor puts around a single sequence. */
static mw_status hf_post(spec *sp, const mw_json *j, int c, const char *path) {
    if (jnull(j, c)) return MW_OK;
    const char *type = jstr(j, c, "type");
    const char *ok = "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, or a Sequence of these";
    if (type && !strcmp(type, "Sequence")) {
        int list = mw_json_get(j, c, "processors");
        if (list < 0 || j->nodes[list].type != MW_JSON_ARR) return unsupported(path, "post_processor", type, ok);
        for (int e = j->nodes[list].first; e >= 0; e = j->nodes[e].next) MW_TRY(hf_post(sp, j, e, path));
        return MW_OK;
    }
    if (type && !strcmp(type, "ByteLevel")) return MW_OK;
    if (type && (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing"))) {
        int cls = mw_json_get(j, c, "cls"), sep = mw_json_get(j, c, "sep");
        int ci = cls >= 0 && j->nodes[cls].first >= 0 ? j->nodes[j->nodes[cls].first].next : -1;
        int si = sep >= 0 && j->nodes[sep].first >= 0 ? j->nodes[j->nodes[sep].first].next : -1;
        if (ci < 0 || si < 0 || !j->nodes[ci].is_int || !j->nodes[si].is_int)
            return mw_fail(MW_ERR_FORMAT, "%s: %s without [token, id] cls and sep", path, type);
        sp->doc_pre[0] = j->nodes[ci].i, sp->doc_post[0] = j->nodes[si].i;
        sp->ndoc_pre = sp->ndoc_post = 1, sp->has_template = 1;
        return MW_OK;
    }
    if (!type || strcmp(type, "TemplateProcessing")) return unsupported(path, "post_processor", type, ok);
    int single = mw_json_get(j, c, "single"), specials = mw_json_get(j, c, "special_tokens"), after = 0;
    if (single < 0 || j->nodes[single].type != MW_JSON_ARR)
        return mw_fail(MW_ERR_FORMAT, "%s: TemplateProcessing without a \"single\" template", path);
    sp->ndoc_pre = sp->ndoc_post = 0, sp->has_template = 1;
    for (int e = j->nodes[single].first; e >= 0; e = j->nodes[e].next) {
        int tok = mw_json_get(j, e, "SpecialToken");
        if (tok < 0) {
            if (mw_json_get(j, e, "Sequence") < 0)
                return mw_fail(MW_ERR_FORMAT, "%s: a TemplateProcessing item is neither SpecialToken nor Sequence", path);
            after = 1;
            continue;
        }
        const char *name = jstr(j, tok, "id");
        int ids = name && specials >= 0 ? mw_json_get(j, mw_json_get(j, specials, name), "ids") : -1;
        if (ids < 0 || j->nodes[ids].type != MW_JSON_ARR)
            return mw_fail(MW_ERR_FORMAT, "%s: the template's special token \"%.40s\" has no ids", path, name ? name : "?");
        for (int k = j->nodes[ids].first; k >= 0; k = j->nodes[k].next) {
            int *cnt = after ? &sp->ndoc_post : &sp->ndoc_pre;
            if (!j->nodes[k].is_int || *cnt == MAX_AFFIX)
                return mw_fail(MW_ERR_FORMAT, "%s: the template's special token ids are not up to %d integers", path, MAX_AFFIX);
            (after ? sp->doc_post : sp->doc_pre)[(*cnt)++] = j->nodes[k].i;
        }
    }
    return MW_OK;
}

/* tokenizer_config.json beside a tokenizer.json: its bos_token (unless add_bos_token is false)
 * and eos_token (when add_eos_token is true), read when no post_processor template says. */
static mw_status hf_config(spec *sp, const char *path) {
    char *text;
    size_t n;
    if (mw_tok_read_file(path, &text, &n) != MW_OK) return mw_fail(MW_ERR_IO, "%s: cannot read it", path);
    mw_json j;
    mw_status s = mw_json_parse(&j, text, n, path, MW_JSON_MAX_TOKENIZER);
    free(text);
    if (s != MW_OK) return s;
    for (int e = 0; e < 2 && s == MW_OK; e++) {
        int c = mw_json_get(&j, 0, e ? "eos_token" : "bos_token");
        const char *v = c >= 0 && j.nodes[c].type == MW_JSON_OBJ ? jstr(&j, c, "content")
                        : c >= 0 && j.nodes[c].type == MW_JSON_STR ? j.nodes[c].str : NULL;
        int add = jtrue(&j, 0, e ? "add_eos_token" : "add_bos_token", !e);
        if (!v || add != 1) continue;
        char *d = strdup(v);
        if (!d) s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", path);
        else if (e) sp->eos = d;
        else sp->bos = d;
    }
    mw_json_free(&j);
    return s;
}

/* A Hugging Face tokenizer.json: a byte-level BPE (a ByteLevel pre-tokenizer) or a SentencePiece
 * BPE (model.byte_fallback), with its normalizer, pre-tokenizer, decoder and post-processor;
 * config: tokenizer_config.json beside it, or NULL. */
mw_status mw_tok_read_json(spec *sp, const char *path, const char *config) {
    char *text;
    size_t n;
    MW_TRY(mw_tok_read_file(path, &text, &n));
    mw_json j;
    mw_status s = mw_json_parse(&j, text, n, path, MW_JSON_MAX_TOKENIZER);
    free(text);
    if (s != MW_OK) return s;
    int model = mw_json_get(&j, 0, "model");
    int vocab = mw_json_get(&j, model, "vocab");
    int merges = mw_json_get(&j, model, "merges");
    int type = mw_json_get(&j, model, "type");
    if (vocab < 0 || j.nodes[vocab].type != MW_JSON_OBJ || merges < 0 ||
        j.nodes[merges].type != MW_JSON_ARR)
        s = mw_fail(MW_ERR_FORMAT, "%s: no model.vocab object and model.merges array", path);
    else if (type >= 0 && (j.nodes[type].type != MW_JSON_STR || strcmp(j.nodes[type].str, "BPE")))
        s = mw_fail(MW_ERR_FORMAT, "%s: model.type is not \"BPE\"", path);
    sp->json = 1;
    if (s == MW_OK) {
        int fb = jtrue(&j, model, "byte_fallback", 0), im = jtrue(&j, model, "ignore_merges", 0);
        int drop = mw_json_get(&j, model, "dropout");
        const char *cont = jstr(&j, model, "continuing_subword_prefix"), *eow = jstr(&j, model, "end_of_word_suffix");
        if (fb < 0 || im < 0 || !jnull(&j, drop) || (cont && cont[0]) || (eow && eow[0]))
            s = mw_fail(MW_ERR_FORMAT, "%s: a BPE model with dropout, a continuing_subword_prefix or an "
                                       "end_of_word_suffix is not supported", path);
        sp->raw = fb == 1;
        sp->ignore_merges = im == 1;
    }
    /* the pipeline */
    int norm = mw_json_get(&j, 0, "normalizer"), pre = mw_json_get(&j, 0, "pre_tokenizer");
    int dec = mw_json_get(&j, 0, "decoder"), post = mw_json_get(&j, 0, "post_processor");
    if (s == MW_OK) s = hf_normalizer(sp, &j, norm, path);
    int byte_level = 0;
    if (s == MW_OK && pre < 0 && !sp->raw) { /* no pre_tokenizer at all: GPT-2's ByteLevel */
        byte_level = 1;
        s = mw_tok_spec_pattern(sp, NULL, path);
    } else if (s == MW_OK && jnull(&j, pre)) {
        sp->no_pretok = 1;
    } else if (s == MW_OK) {
        s = hf_pretokenizer(sp, &j, pre, path, 1, &byte_level);
    }
    if (s == MW_OK && sp->raw && byte_level)
        s = mw_fail(MW_ERR_FORMAT, "%s: a byte_fallback model with a ByteLevel pre-tokenizer is not supported", path);
    if (s == MW_OK && !sp->raw && !byte_level)
        s = mw_fail(MW_ERR_FORMAT, "%s: a BPE model that is neither byte-level (a ByteLevel pre-tokenizer) nor "
                                   "byte_fallback is not supported: some text would have no ids", path);
    if (s == MW_OK && !sp->raw && !jnull(&j, dec) &&
        (!jstr(&j, dec, "type") || strcmp(jstr(&j, dec, "type"), "ByteLevel")))
        s = unsupported(path, "decoder", jstr(&j, dec, "type"), "ByteLevel for a byte-level BPE");
    if (s == MW_OK && sp->raw) s = hf_sp_decoder(sp, &j, dec, path);
    if (s == MW_OK) s = hf_post(sp, &j, post, path);
    if (s == MW_OK && !sp->has_template && config) s = hf_config(sp, config);

    int64_t maxid = -1;
    for (int c = s == MW_OK ? j.nodes[vocab].first : -1; c >= 0 && s == MW_OK; c = j.nodes[c].next) {
        if (j.nodes[c].type != MW_JSON_NUM || !j.nodes[c].is_int)
            s = mw_fail(MW_ERR_FORMAT, "%s: the id of \"%.40s\" is not an integer", path,
                        j.nodes[c].key);
        else
            s = mw_tok_spec_token(sp, j.nodes[c].key, strlen(j.nodes[c].key), j.nodes[c].i, !sp->raw, path);
        if (s == MW_OK && j.nodes[c].i > maxid) maxid = j.nodes[c].i;
    }
    size_t k = 0;
    for (int c = s == MW_OK ? j.nodes[merges].first : -1; c >= 0 && s == MW_OK;
         c = j.nodes[c].next, k++) {
        const mw_json_node *m = &j.nodes[c];
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        if (m->type == MW_JSON_STR) { /* "a b" */
            const char *sp1 = strchr(m->str, ' ');
            if (sp1 && sp1 > m->str && sp1[1] && !strchr(sp1 + 1, ' '))
                a = m->str, alen = (size_t)(sp1 - m->str), b = sp1 + 1, blen = strlen(b);
        } else if (m->type == MW_JSON_ARR && m->first >= 0 && j.nodes[m->first].next >= 0 &&
                   j.nodes[j.nodes[m->first].next].next < 0) { /* ["a", "b"] */
            const mw_json_node *x = &j.nodes[m->first], *y = &j.nodes[x->next];
            if (x->type == MW_JSON_STR && y->type == MW_JSON_STR && x->str[0] && y->str[0])
                a = x->str, alen = strlen(a), b = y->str, blen = strlen(b);
        }
        if (!a)
            s = mw_fail(MW_ERR_FORMAT, "%s: model.merges[%zu] is not \"a b\" or [\"a\", \"b\"]",
                        path, k);
        else
            s = mw_tok_spec_merge(sp, a, alen, b, blen, (int32_t)k, path, k);
    }
    /* added tokens that model.vocab lacks: raw text pieces (special tokens), which encoding never
     * produces: their text in the input is ordinary text */
    int added = mw_json_get(&j, 0, "added_tokens");
    if (added >= 0 && j.nodes[added].type != MW_JSON_ARR) added = -1;
    for (int c = s == MW_OK && added >= 0 ? j.nodes[added].first : -1; c >= 0 && s == MW_OK;
         c = j.nodes[c].next) {
        int id = mw_json_get(&j, c, "id"), content = mw_json_get(&j, c, "content");
        if (id < 0 || content < 0 || j.nodes[id].type != MW_JSON_NUM || !j.nodes[id].is_int ||
            j.nodes[content].type != MW_JSON_STR) {
            s = mw_fail(MW_ERR_FORMAT, "%s: an added_tokens entry lacks an integer id or a content", path);
            break;
        }
        if (jtrue(&j, c, "special", 1) == 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: added token \"%.40s\" is not special: added tokens that split "
                                       "ordinary text are not supported", path, j.nodes[content].str);
            break;
        }
        int64_t tid = j.nodes[id].i;
        int known = 0;
        for (size_t q = 0; q < sp->ntok && !known && tid <= maxid; q++) known = sp->tok[q].id == tid;
        if (!known)
            s = mw_tok_spec_token(sp, j.nodes[content].str, strlen(j.nodes[content].str), tid, sp->raw ? -1 : 0, path);
    }
    mw_json_free(&j);
    return s;
}
