/* memwall eval: the loss and perplexity of a trained model (--ckpt or --init hf:) on a token file or
 * a set's validation split, in the precision the model trained in unless --precision says otherwise. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "textcmd.h"

/* ---- eval ------------------------------------------------------------------------------------ */

int cmd_eval(int argc, char **argv) {
    opts o;
    parse(&o, CMD_EVAL, "eval", argc, argv);
    if (!o.data) die(1, "eval: --data FILE.bin|PREFIX is required");
    int batches = o.cfg.eval_batches > 0 ? o.cfg.eval_batches : 1 << 30;
    o.cfg.eval_batches = 1;
    int batch = o.cfg.batch, seq = o.cfg.seq; /* 0 when not given: the model's own */
    int given_b = 0, given_t = 0;
    for (int i = 0; i < argc; i++) {
        given_b |= strncmp(argv[i], "--batch", 7) == 0;
        given_t |= strncmp(argv[i], "--seq", 5) == 0;
    }
    /* the loss alone: logits of 256 positions at a time, as training computes them */
    model_tok mt;
    mw_model *m = load_model(&o, MW_INFERENCE_EVAL, given_b ? batch : 0, given_t ? seq : 0, NULL, &mt);
    const mw_config *c = mw_model_config(m);
    if (strcmp(o.tokenizer, "auto") != 0) { /* a tokenizer named: it must be the model's, and the data's */
        mw_tokenizer *tok = open_tokenizer(&o, c->vocab, &mt);
        if (!mt.id.name[0]) { /* a model that does not record its tokenizer: the data must be this one's */
            mw_tokenizer_identity(tok, &mt.id);
            snprintf(mt.who, sizeof mt.who, "--tokenizer %.4000s", o.tokenizer);
        }
        mw_tokenizer_free(tok);
    }
    mw_tokenizer_free(mt.beside);
    if (!o.json) print_plan(mw_model_plan(m));
    size_t dl = strlen(o.data);
    mw_data *d;
    if (dl > 4 && strcmp(o.data + dl - 4, ".bin") == 0) {
        if (mw_data_open(&d, o.data) != MW_OK) die(1, "%s", mw_last_error());
    } else {
        if (mw_data_open_set(&d, o.data, "val") != MW_OK) die(1, "%s", mw_last_error());
        if (!d) die(1, "eval: --data %s has no validation split (neither %s.manifest.json lists one nor %s.val.bin exists)",
                    o.data, o.data, o.data);
    }
    warn_unrecorded(d);
    check_data_tokenizer(d, &mt.id, mt.who);
    float loss;
    uint64_t tokens = 0;
    const uint64_t targets = mw_data_count(d) > 0 ? mw_data_count(d) - 1 : 0, N = (uint64_t)c->batch * c->seq;
    /* the precision its products run in, and whose choice that was */
    const char *prec = mw_precision_str(c->precision);
    const char *why = opt_given(&o, "precision") ? "--precision" : o.ckpt ? "the checkpoint's" : "the default";
    if (!o.json)
        printf("eval: %s products (%s; --precision %s for %s)\n", prec, why, c->precision == MW_PRECISION_FP32 ? "bf16" : "fp32",
               c->precision == MW_PRECISION_FP32 ? "bfloat16 operands" : "full precision");
    fflush(stdout);
    double t0 = now_s();
    progress_line pr; /* on stderr: stdout holds the result alone */
    progress_init(&pr, "eval: batches");
    mw_model_set_progress(m, progress_fn, &pr);
    if (mw_evaluate_tokens(m, d, batches, &loss, &tokens) != MW_OK) die(1, "%s", mw_last_error());
    double secs = now_s() - t0;
    const uint64_t used = (tokens + N - 1) / N, last = tokens - (used - 1) * N; /* batches; the last one's targets */
    if (o.json)
    {
        printf("{\"loss\": ");
        json_num(stdout, "%.9g", loss);
        printf(", \"perplexity\": ");
        json_num(stdout, "%.9g", exp(loss));
        printf(", \"tokens\": %llu, \"targets\": %llu, \"batches\": %llu, \"batch\": %d, \"seq\": %d, \"precision\": \"%s\", "
               "\"seconds\": %.3f, ", (unsigned long long)tokens, (unsigned long long)targets, (unsigned long long)used,
               c->batch, c->seq, prec, secs);
        json_categories(stdout, m);
        printf("}\n");
    } else {
        char lastb[96] = "";
        if (last < N) snprintf(lastb, sizeof lastb, " (the last one %llu)", (unsigned long long)last);
        printf("eval: %s | loss %.4f | perplexity %.3f | %llu of its %llu tokens scored%s, in %llu batch%s of %dx%d%s | "
               "precision %s (%s) | %.1f s\n", mw_data_path(d), loss, exp(loss), (unsigned long long)tokens,
               (unsigned long long)targets, tokens == targets ? " (every one after the first)" : " (--eval-batches)",
               (unsigned long long)used, used == 1 ? "" : "es", c->batch, c->seq, lastb, prec, why, secs);
    }
    mw_data_close(d);
    mw_model_destroy(m);
    return 0;
}
