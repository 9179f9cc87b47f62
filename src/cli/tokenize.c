/* memwall tokenize (text on stdin to token ids on stdout) and memwall detokenize (ids back to text). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "textcmd.h"

/* ---- tokenize / detokenize --------------------------------------------------------------------- */

int cmd_tokenize(int argc, char **argv) {
    opts o;
    parse(&o, CMD_TOKENIZE, "tokenize", argc, argv);
    mw_tokenizer *tok = open_tokenizer(&o, 0, NULL);
    size_t n, len = 0, cap = 0;
    char *text = read_all(stdin, "stdin", &n);
    int32_t *ids = NULL;
    if (mw_tokenizer_encode(tok, text, n, &ids, &len, &cap) != MW_OK) die(1, "%s", mw_last_error());
    for (size_t i = 0; i < len; i++) printf("%s%d", i ? " " : "", ids[i]);
    if (len) printf("\n"); /* empty in, empty out */
    free(ids), free(text);
    mw_tokenizer_free(tok);
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    opts o;
    parse(&o, CMD_DETOKENIZE, "detokenize", argc, argv);
    mw_tokenizer *tok = open_tokenizer(&o, 0, NULL);
    size_t n;
    char *text = read_all(stdin, "stdin", &n);
    text = realloc(text, n + 1);
    if (!text) die(1, "out of memory");
    text[n] = 0;
    int32_t *ids = NULL;
    size_t nids = 0, icap = 0;
    for (char *p = text, *end;; p = end) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || errno || (*end && !strchr(" \n\t\r,", *end))) {
            size_t w = strcspn(p, " \n\t\r,"); /* the word alone: the message stays one line */
            die(1, "detokenize: '%.*s' is not a token id", w > 20 ? 20 : (int)w, p);
        }
        if (id < 0 || id >= mw_tokenizer_vocab(tok))
            die(1, "detokenize: token id %ld is outside the vocabulary (%d)", id, mw_tokenizer_vocab(tok));
        if (nids == icap && !(ids = realloc(ids, (icap = 2 * icap + 256) * sizeof *ids))) die(1, "out of memory");
        ids[nids++] = (int32_t)id;
    }
    /* decoded as one text: a Strip decoder (Llama 2's) drops the space its normalizer put first */
    char *out = NULL;
    size_t on = 0, ocap = 0;
    if (mw_tokenizer_decode(tok, ids, nids, &out, &on, &ocap) != MW_OK) die(1, "%s", mw_last_error());
    if (on) fwrite(out, 1, on, stdout);
    fflush(stdout);
    free(out), free(ids), free(text);
    mw_tokenizer_free(tok);
    return 0;
}
