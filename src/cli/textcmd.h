/* What the text commands (prepare.c, tokenize.c, sample.c, eval.c) share, in textcmd.c: opening
 * the tokenizer a command names, loading a trained model with the tokenizer it reads, reading a
 * whole stream, and a monotonic clock. CLI only: every helper exits on failure. */
#ifndef MW_CLI_TEXTCMD_H
#define MW_CLI_TEXTCMD_H
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "../text/tokenizer.h"
#include "cli.h"

/* The tokenizer a loaded model reads: its identity (name "" when unknown), the model's name for
 * messages, and for hf: weights the tokenizer found beside them (or NULL). */
typedef struct model_tok {
    mw_tokenizer_id id;
    char who[4200];
    mw_tokenizer *beside;
    int arch; /* the model's family */
} model_tok;

/* Opens the tokenizer --tokenizer names; "auto" takes the model's (mt, may be NULL: the one beside
 * hf: weights, or its recorded identity); for a model that does not know its tokenizer, bytes
 * when its vocabulary is 256, GPT-2's for a GPT-2 model of exactly 50257 tokens, and otherwise a
 * refusal naming --tokenizer (never a guess by size). A tokenizer other than the model's known
 * one is refused, naming both. */
mw_tokenizer *open_tokenizer(const opts *o, int model_vocab, model_tok *mt);

/* An inference model (mode 1, or MW_INFERENCE_EVAL: the loss only) from --ckpt (file, or the
 * newest valid one of a directory) or --init hf:, with forward activations for (batch, seq). mt
 * gets the tokenizer it reads (the checkpoint's record, or hf_tokenizer's); the caller frees
 * mt->beside. */
mw_model *load_model(opts *o, int mode, int batch, int seq, int *trained_seq, model_tok *mt);

/* Reads a whole stream (what names it in messages); the caller frees it; exits on failure. */
char *read_all(FILE *f, const char *what, size_t *n);

/* Seconds on the monotonic clock. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
#endif
