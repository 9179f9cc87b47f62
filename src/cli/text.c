/* memwall prepare, tokenize, detokenize, sample and eval: text in, text out. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/arena.h"
#include "../core/rng.h"
#include "../core/status.h"
#include "cli.h"

/* ---- prepare ------------------------------------------------------------------------------- */

int cmd_prepare(int argc, char **argv) {
    opts o;
    parse(&o, CMD_PREPARE, "prepare", argc, argv);
    if (strcmp(o.tokenizer, "bytes") != 0)
        die(1, "prepare: unknown --tokenizer '%s' (available: bytes)", o.tokenizer);
    if (!o.in || !o.out) die(1, "prepare: --in TEXT and --out PREFIX are required");
    if (!(o.val_fraction >= 0 && o.val_fraction < 1)) die(1, "--val-fraction must be in [0,1)");
    FILE *f = strcmp(o.in, "-") == 0 ? stdin : fopen(o.in, "rb");
    if (!f) die(1, "cannot open --in %s: %s", o.in, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    unsigned char *text = malloc(cap);
    for (size_t r; text && (r = fread(text + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) text = realloc(text, cap *= 2);
    }
    if (!text) die(1, "out of memory reading %s", o.in);
    if (ferror(f)) die(1, "cannot read %s: %s", o.in, strerror(errno));
    if (f != stdin) fclose(f);
    if (n == 0) die(1, "prepare: %s is empty", o.in);
    int32_t *tok = malloc(n * sizeof *tok);
    if (!tok) die(1, "out of memory");
    for (size_t i = 0; i < n; i++) tok[i] = text[i];
    size_t n_val = (size_t)(n * o.val_fraction);
    if (o.val_fraction > 0 && n_val < 2) die(1, "prepare: %s is too short for a validation part", o.in);
    char path[1024];
    snprintf(path, sizeof path, "%s.train.bin", o.out);
    if (mw_data_write(path, tok, n - n_val, 256, 2) != MW_OK) die(1, "%s", mw_last_error());
    snprintf(path, sizeof path, "%s.val.bin", o.out);
    if (mw_data_write(path, tok + (n - n_val), n_val, 256, 2) != MW_OK) die(1, "%s", mw_last_error());
    printf("prepare: %s -> %s.train.bin (%zu tokens), %s.val.bin (%zu tokens), tokenizer bytes (vocab 256)\n",
           o.in, o.out, n - n_val, o.out, n_val);
    free(tok);
    free(text);
    return 0;
}

