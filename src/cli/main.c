/* memwall: the command-line front end. One option table drives parsing and --help.
 * Exit codes: 0 success, 1 usage or runtime error, 2 the plan does not fit --budget. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/arena.h"
#include "../core/rng.h"
#include "../core/status.h"
#include "memwall.h"

enum { CMD_TRAIN = 1, CMD_BENCH = 2, CMD_PREPARE = 4, CMD_EXPORT = 8 };
enum kind { K_INT, K_DBL, K_SIZE, K_U64, K_STR, K_FLAG, K_PRESET };

typedef struct opts {
    mw_config cfg;
    const char *preset, *data, *json_log, *tokenizer, *in, *out, *ckpt_dir, *resume, *init, *ckpt, *format;
    int log_every, bench_warmup, json, save_every, keep, stop_at;
    double val_fraction;
} opts;

typedef struct opt_def {
    const char *name;
    enum kind kind;
    size_t off;
    int cmds;
    const char *help;
} opt_def;

#define C_(f) offsetof(opts, cfg.f)
#define O_(f) offsetof(opts, f)
#define MODEL (CMD_TRAIN | CMD_BENCH)
static const opt_def OPTS[] = {
    {"preset", K_PRESET, O_(preset), MODEL, "model preset: gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl"},
    {"layers", K_INT, C_(n_layer), MODEL, "number of transformer blocks (overrides the preset)"},
    {"heads", K_INT, C_(n_head), MODEL, "attention heads"},
    {"dim", K_INT, C_(n_embd), MODEL, "embedding width C"},
    {"vocab", K_INT, C_(vocab), MODEL, "vocabulary size"},
    {"ctx", K_INT, C_(ctx), MODEL, "position-table rows (maximum sequence length)"},
    {"batch", K_INT, C_(batch), MODEL, "sequences per micro-batch B"},
    {"seq", K_INT, C_(seq), MODEL, "tokens per sequence T"},
    {"accum", K_INT, C_(accum), MODEL, "micro-batches accumulated per optimizer step"},
    {"steps", K_INT, C_(steps), MODEL, "optimizer steps (bench: timed steps)"},
    {"warmup", K_INT, C_(warmup), CMD_TRAIN, "learning-rate warm-up steps"},
    {"warmup", K_INT, O_(bench_warmup), CMD_BENCH, "untimed warm-up steps"},
    {"lr", K_DBL, C_(lr), MODEL, "peak learning rate"},
    {"min-lr-frac", K_DBL, C_(min_lr_frac), MODEL, "final learning rate as a fraction of --lr"},
    {"weight-decay", K_DBL, C_(weight_decay), MODEL, "AdamW decoupled weight decay (2-D weights only)"},
    {"beta1", K_DBL, C_(beta1), MODEL, "AdamW beta1"},
    {"beta2", K_DBL, C_(beta2), MODEL, "AdamW beta2"},
    {"eps", K_DBL, C_(eps), MODEL, "AdamW epsilon"},
    {"grad-clip", K_DBL, C_(grad_clip), MODEL, "clip the global gradient norm to this (0: off)"},
    {"seed", K_U64, C_(seed), MODEL, "seed of initialisation and data sampling"},
    {"threads", K_INT, C_(threads), MODEL, "OpenMP and BLAS threads (0: all cores)"},
    {"budget", K_SIZE, C_(budget), MODEL, "memory budget, e.g. 512MiB, 2GiB (0: none)"},
    {"data", K_STR, O_(data), CMD_TRAIN, "token files PREFIX.train.bin and PREFIX.val.bin"},
    {"eval-every", K_INT, C_(eval_every), CMD_TRAIN, "validation loss every N steps (and at the end)"},
    {"eval-batches", K_INT, C_(eval_batches), CMD_TRAIN, "micro-batches per validation"},
    {"json-log", K_STR, O_(json_log), CMD_TRAIN, "write one JSON object per step to FILE"},
    {"log-every", K_INT, O_(log_every), CMD_TRAIN, "print a progress line every N steps (0: auto)"},
    {"out", K_STR, O_(ckpt_dir), CMD_TRAIN, "checkpoint directory (saved at the end and every --save-every)"},
    {"save-every", K_INT, O_(save_every), CMD_TRAIN, "save a checkpoint every N steps (0: only at the end)"},
    {"keep", K_INT, O_(keep), CMD_TRAIN, "keep the newest K checkpoints in --out"},
    {"resume", K_STR, O_(resume), CMD_TRAIN, "continue from a checkpoint file or directory, or 'auto' (newest valid in --out)"},
    {"init", K_STR, O_(init), CMD_TRAIN, "start from hf:PATH (Hugging Face GPT-2 model.safetensors or its directory)"},
    {"stop-at", K_INT, O_(stop_at), CMD_TRAIN, "stop (and save) after this step; --steps still sets the schedule"},
    {"json", K_FLAG, O_(json), CMD_BENCH, "print one JSON line with the results"},
    {"tokenizer", K_STR, O_(tokenizer), CMD_PREPARE, "tokenizer: bytes (vocab 256)"},
    {"in", K_STR, O_(in), CMD_PREPARE, "input text file ('-' for stdin)"},
    {"out", K_STR, O_(out), CMD_PREPARE, "output prefix: writes PREFIX.train.bin, PREFIX.val.bin"},
    {"ckpt", K_STR, O_(ckpt), CMD_EXPORT, "checkpoint file, or a directory (its newest valid checkpoint)"},
    {"format", K_STR, O_(format), CMD_EXPORT, "output format: safetensors (Hugging Face GPT-2)"},
    {"out", K_STR, O_(out), CMD_EXPORT, "output file"},
    {"val-fraction", K_DBL, O_(val_fraction), CMD_PREPARE, "fraction of the text (its end) kept for validation"},
};
#define NOPTS (sizeof OPTS / sizeof OPTS[0])

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "memwall: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(code);
}

static void usage(FILE *f, const char *cmd, int mask) {
    if (!cmd) {
        fprintf(f, "memwall %s: train GPT-2 models inside a hard memory budget\n\n"
                   "usage: memwall COMMAND [options]\n\n"
                   "commands:\n"
                   "  train     train a model on token files (memwall train --data PREFIX)\n"
                   "  bench     time training steps on random tokens\n"
                   "  prepare   turn a text file into token files\n"
                   "  export    write a checkpoint as Hugging Face GPT-2 safetensors\n"
                   "  help CMD  the options of a command\n",
                MW_VERSION);
        return;
    }
    fprintf(f, "usage: memwall %s [options]\n\noptions:\n", cmd);
    for (size_t i = 0; i < NOPTS; i++)
        if (OPTS[i].cmds & mask)
            fprintf(f, "  --%-14s %s\n", OPTS[i].name, OPTS[i].help);
}

static void parse_value(opts *o, const opt_def *d, const char *v) {
    char *end;
    void *p = (char *)o + d->off;
    errno = 0;
    switch (d->kind) {
    case K_INT: {
        long x = strtol(v, &end, 10);
        if (*v == 0 || *end || errno || x < -2147483647L || x > 2147483647L)
            die(1, "--%s expects an integer, got '%s'", d->name, v);
        *(int *)p = (int)x;
        break;
    }
    case K_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == 0 || *v == '-' || *end || errno)
            die(1, "--%s expects a non-negative integer, got '%s'", d->name, v);
        *(uint64_t *)p = x;
        break;
    }
    case K_DBL: {
        double x = strtod(v, &end);
        if (*v == 0 || *end || errno || !isfinite(x))
            die(1, "--%s expects a number, got '%s'", d->name, v);
        *(double *)p = x;
        break;
    }
    case K_SIZE:
        if (!mw_parse_size(v, (uint64_t *)p))
            die(1, "--%s expects a size like 1073741824, 512MiB or 2GiB, got '%s'", d->name, v);
        break;
    case K_STR:
    case K_PRESET: *(const char **)p = v; break;
    case K_FLAG: break;
    }
}

static void parse(opts *o, int mask, const char *cmd, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    mw_config_default(&o->cfg);
    o->preset = "gpt2-tiny";
    o->bench_warmup = 2;
    o->val_fraction = 0.05;
    o->tokenizer = "bytes";
    o->keep = 3;
    o->format = "safetensors";
    /* the preset first, so that the shape flags override it wherever they stand */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < argc; i++) {
            const char *a = argv[i];
            if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                usage(stdout, cmd, mask);
                exit(0);
            }
            if (strncmp(a, "--", 2) != 0) die(1, "%s: unexpected argument '%s'", cmd, a);
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const opt_def *d = NULL;
            for (size_t k = 0; k < NOPTS && !d; k++)
                if ((OPTS[k].cmds & mask) && strlen(OPTS[k].name) == len &&
                    strncmp(OPTS[k].name, name, len) == 0)
                    d = &OPTS[k];
            if (!d) die(1, "%s: unknown option '--%.*s' (see memwall help %s)", cmd, (int)len, name, cmd);
            const char *v = NULL;
            if (d->kind == K_FLAG) {
                if (eq) die(1, "--%s takes no value", d->name);
                if (pass == 1) *(int *)((char *)o + d->off) = 1;
                continue;
            }
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc)
                v = argv[++i];
            else
                die(1, "--%s needs a value", d->name);
            if ((pass == 0) != (d->kind == K_PRESET)) continue;
            parse_value(o, d, v);
            if (d->kind == K_PRESET && mw_config_preset(&o->cfg, v) != MW_OK)
                die(1, "%s", mw_last_error());
        }
    }
}

/* Validates the model configuration and applies --threads. */
static void finish_config(opts *o) {
    if (mw_config_validate(&o->cfg) != MW_OK) die(1, "%s", mw_last_error());
    o->cfg.threads = mw_set_threads(o->cfg.threads);
}

/* --init hf:PATH: the shape comes from the weights (heads from config.json when present). */
static void apply_init_shape(opts *o) {
    if (!o->init) return;
    if (strncmp(o->init, "hf:", 3) != 0) die(1, "--init expects hf:PATH (a Hugging Face GPT-2 model.safetensors or its directory)");
    mw_hf_shape sh;
    if (mw_hf_inspect(o->init + 3, &sh) != MW_OK) die(1, "%s", mw_last_error());
    o->cfg.n_layer = sh.n_layer, o->cfg.n_embd = sh.n_embd, o->cfg.vocab = sh.vocab, o->cfg.ctx = sh.ctx;
    if (sh.n_head) o->cfg.n_head = sh.n_head;
    printf("  init: %s: L=%d C=%d V=%d ctx=%d, heads %d (%s)\n", o->init + 3, sh.n_layer, sh.n_embd,
           sh.vocab, sh.ctx, o->cfg.n_head, sh.n_head ? "config.json" : "--heads");
    o->preset = "hf";
}

static void print_config(const opts *o, const char *cmd) {
    const mw_config *c = &o->cfg;
    char b[32];
    printf("memwall %s | %s L=%d H=%d C=%d V=%d ctx=%d (%.2fM params) | B=%d T=%d accum=%d | "
           "%d steps | threads %d | seed %llu | budget %s\n",
           cmd, o->preset, c->n_layer, c->n_head, c->n_embd, c->vocab, c->ctx,
           mw_config_num_params(c) / 1e6, c->batch, c->seq, c->accum, c->steps, c->threads,
           (unsigned long long)c->seed, c->budget ? mw_fmt_bytes(c->budget, b, sizeof b) : "none");
    if (strcmp(cmd, "train") == 0)
        printf("  AdamW lr %g (min %g, warm-up %d, cosine) betas %g/%g eps %g wd %g clip %g\n", c->lr,
               c->lr * c->min_lr_frac, c->warmup, c->beta1, c->beta2, c->eps, c->weight_decay,
               c->grad_clip);
}

static void print_plan(const mw_plan_summary *p) {
    char b[32];
    printf("  plan:");
    for (int k = 0; k < MW_CAT_COUNT; k++)
        printf(" %s %s%s", mw_category_name(k), mw_fmt_bytes(p->category[k], b, sizeof b),
               k + 1 < MW_CAT_COUNT ? "," : "");
    printf(" | peak %s", mw_fmt_bytes(p->peak, b, sizeof b));
    if (p->budget) printf(" of budget %s", mw_fmt_bytes(p->budget, b, sizeof b));
    printf("\n");
}

/* Creates the model or exits: 2 when the plan does not fit the budget. */
static mw_model *create_model(const opts *o) {
    mw_model *m;
    mw_status s = mw_model_create(&m, &o->cfg);
    if (s == MW_ERR_BUDGET) die(2, "%s", mw_last_error());
    if (s != MW_OK) die(1, "%s", mw_last_error());
    return m;
}

static void json_categories(FILE *f, const mw_model *m) {
    uint64_t cat[MW_CAT_COUNT], peak;
    mw_model_memory(m, cat, &peak);
    fprintf(f, "\"peak_bytes\": %llu, \"peak_rss_bytes\": %llu, \"categories\": {",
            (unsigned long long)peak, (unsigned long long)mw_peak_rss());
    for (int k = 0; k < MW_CAT_COUNT; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", mw_category_name(k), (unsigned long long)cat[k]);
    fprintf(f, "}");
}

/* ---- train --------------------------------------------------------------------------------- */

typedef struct train_ctx {
    const opts *o;
    const mw_model *m;
    FILE *jlog;
    int tty, log_every, steps_run, last_saved;
    double ms_total;
    uint64_t train_tokens;
} train_ctx;

static void fmt_eta(double sec, char *buf, size_t n) {
    if (sec >= 3600)
        snprintf(buf, n, "%dh%02dm", (int)(sec / 3600), (int)fmod(sec / 60, 60));
    else
        snprintf(buf, n, "%dm%02ds", (int)(sec / 60), (int)fmod(sec, 60));
}

static mw_status save_checkpoint(train_ctx *t, const mw_run_state *st) {
    char path[4096];
    MW_TRY(mw_ckpt_save(t->o->ckpt_dir, t->m, st, t->train_tokens, path, sizeof path));
    MW_TRY(mw_ckpt_prune(t->o->ckpt_dir, t->o->keep));
    t->last_saved = st->step;
    if (!t->tty) printf("  saved %s\n", path);
    return MW_OK;
}

static mw_status on_step(const mw_step_report *r, const mw_run_state *st, void *user) {
    train_ctx *t = user;
    const mw_config *c = &t->o->cfg;
    t->ms_total += r->ms;
    t->steps_run++;
    if (t->jlog) {
        fprintf(t->jlog,
                "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"ms\": %.3f, \"tokens_per_s\": %.2f, "
                "\"grad_norm\": %.9g",
                r->step, r->loss, r->lr, r->ms, r->tokens_per_s, r->grad_norm);
        if (r->has_val) fprintf(t->jlog, ", \"val_loss\": %.9g", r->val_loss);
        fprintf(t->jlog, "}\n");
        fflush(t->jlog);
    }
    int last = r->step == c->steps;
    if (r->step % t->log_every == 0 || last || r->has_val || t->steps_run == 1) {
        char eta[32];
        fmt_eta(t->ms_total / t->steps_run * (c->steps - r->step) / 1e3, eta, sizeof eta);
        uint64_t cat[MW_CAT_COUNT], peak;
        mw_model_memory(t->m, cat, &peak);
        printf("%sstep %*d/%d | loss %.4f | lr %.2e | %.1f ms | %.0f tok/s | peak %.0f MiB | ETA %s",
               t->tty ? "\r\033[K" : "", (int)floor(log10(c->steps)) + 1, r->step, c->steps, r->loss,
               r->lr, r->ms, r->tokens_per_s, peak / 1048576.0, eta);
        if (r->has_val) printf(" | val loss %.4f", r->val_loss);
        if (!t->tty || r->has_val || last) printf("\n");
        fflush(stdout);
    }
    if (t->o->ckpt_dir && t->o->save_every > 0 && st->step % t->o->save_every == 0)
        MW_TRY(save_checkpoint(t, st));
    if (t->o->stop_at > 0 && st->step >= t->o->stop_at) return MW_ERR_STOP;
    return MW_OK;
}

static mw_data *open_data(const char *prefix, const char *suffix, int required) {
    char path[1024];
    snprintf(path, sizeof path, "%s.%s.bin", prefix, suffix);
    if (!required && access(path, F_OK) != 0) return NULL;
    mw_data *d;
    if (mw_data_open(&d, path) != MW_OK) die(1, "%s", mw_last_error());
    return d;
}

/* Finds the checkpoint --resume names and verifies it; path[0] = 0 when auto finds none. */
static void find_resume(const opts *o, char *path, size_t n, mw_ckpt_info *info) {
    const char *dir = o->resume;
    struct stat st;
    if (strcmp(o->resume, "auto") == 0) {
        if (!o->ckpt_dir) die(1, "--resume auto needs --out DIR (where the checkpoints are)");
        dir = o->ckpt_dir;
    } else if (stat(o->resume, &st) != 0) {
        die(1, "--resume %s: %s", o->resume, strerror(errno));
    } else if (S_ISREG(st.st_mode)) {
        snprintf(path, n, "%s", o->resume);
        if (mw_ckpt_verify(path, info) != MW_OK) die(1, "%s", mw_last_error());
        return;
    }
    int skipped;
    if (mw_ckpt_latest(dir, path, n, info, &skipped) != MW_OK) die(1, "%s", mw_last_error());
    if (skipped) printf("  resume: skipped %d invalid checkpoint(s) in %s\n", skipped, dir);
    if (!path[0] && strcmp(o->resume, "auto") != 0) die(1, "--resume %s: no valid checkpoint there", dir);
}

static int cmd_train(int argc, char **argv) {
    opts o;
    parse(&o, CMD_TRAIN, "train", argc, argv);
    if (!o.data) die(1, "train: --data PREFIX is required (make token files with memwall prepare)");
    apply_init_shape(&o);
    finish_config(&o);
    if (o.save_every < 0 || o.keep < 1) die(1, "--save-every must be >= 0 and --keep >= 1");
    if (o.save_every > 0 && !o.ckpt_dir) die(1, "--save-every needs --out DIR");
    print_config(&o, "train");
    mw_data *train = open_data(o.data, "train", 1), *val = open_data(o.data, "val", 0);
    printf("  data: %s.train.bin %llu tokens", o.data, (unsigned long long)mw_data_count(train));
    if (val) printf(", %s.val.bin %llu tokens", o.data, (unsigned long long)mw_data_count(val));
    printf("\n");
    char ckpt[4096] = "";
    mw_ckpt_info info;
    if (o.resume) {
        find_resume(&o, ckpt, sizeof ckpt, &info);
        if (ckpt[0] && info.train_tokens != mw_data_count(train))
            die(1, "%s was trained on %llu tokens, --data %s.train.bin holds %llu: not the same data",
                ckpt, (unsigned long long)info.train_tokens, o.data,
                (unsigned long long)mw_data_count(train));
        if (!ckpt[0]) printf("  resume auto: no checkpoint in %s yet, starting from step 0\n", o.ckpt_dir);
    }
    mw_plan_summary plan;
    if (mw_plan(&o.cfg, &plan) != MW_OK) die(1, "%s", mw_last_error());
    print_plan(&plan);
    mw_model *m = create_model(&o);
    mw_run_state st;
    mw_run_state_init(&st, &o.cfg);
    if (ckpt[0]) {
        if (mw_ckpt_load(ckpt, m, &info) != MW_OK) die(1, "%s", mw_last_error());
        st = info.state;
        printf("  resumed from %s at step %d of %d\n", ckpt, st.step, o.cfg.steps);
        if (st.step > o.cfg.steps) die(1, "%s is at step %d, beyond --steps %d", ckpt, st.step, o.cfg.steps);
    } else if (o.init) {
        if (mw_hf_load(o.init + 3, m) != MW_OK) die(1, "%s", mw_last_error());
    } else {
        mw_model_init_gpt2(m, o.cfg.seed);
    }
    train_ctx t = {.o = &o, .m = m, .tty = isatty(1), .last_saved = ckpt[0] ? st.step : -1,
                   .train_tokens = mw_data_count(train)};
    t.log_every = o.log_every > 0 ? o.log_every : t.tty ? 1 : (o.cfg.steps + 19) / 20;
    if (o.json_log && !(t.jlog = fopen(o.json_log, ckpt[0] ? "a" : "w")))
        die(1, "cannot open --json-log %s: %s", o.json_log, strerror(errno));
    if (o.stop_at < 0) die(1, "--stop-at must be >= 0");
    mw_status ts = mw_train(m, train, val, &st, on_step, &t);
    if (ts != MW_OK && ts != MW_ERR_STOP) die(1, "%s", mw_last_error());
    if (o.ckpt_dir && t.last_saved != st.step && save_checkpoint(&t, &st) != MW_OK)
        die(1, "%s", mw_last_error());
    uint64_t cat[MW_CAT_COUNT], peak, rss = mw_peak_rss();
    mw_model_memory(m, cat, &peak);
    char b1[32], b2[32], b3[32];
    printf("done: %d steps in %.1f s | arena peak %s (plan %s) | peak RSS %s\n", t.steps_run,
           t.ms_total / 1e3, mw_fmt_bytes(peak, b1, sizeof b1), mw_fmt_bytes(plan.peak, b2, sizeof b2),
           mw_fmt_bytes(rss, b3, sizeof b3));
    printf("  measured peak per category:");
    for (int k = 0; k < MW_CAT_COUNT; k++)
        printf(" %s %s%s", mw_category_name(k), mw_fmt_bytes(cat[k], b1, sizeof b1),
               k + 1 < MW_CAT_COUNT ? "," : "\n");
    if (t.jlog) {
        fprintf(t.jlog, "{\"event\": \"end\", \"steps\": %d, \"plan_peak_bytes\": %llu, ", st.step,
                (unsigned long long)plan.peak);
        json_categories(t.jlog, m);
        fprintf(t.jlog, "}\n");
        if (fclose(t.jlog) != 0) die(1, "cannot write --json-log %s: %s", o.json_log, strerror(errno));
    }
    mw_model_destroy(m);
    mw_data_close(train);
    mw_data_close(val);
    return 0;
}

/* ---- bench --------------------------------------------------------------------------------- */

typedef struct rand_ctx {
    uint64_t rng;
    int N, V;
} rand_ctx;

static mw_status rand_batch(void *ctx, int32_t *in, int32_t *tg, int32_t *scratch) {
    rand_ctx *r = ctx;
    for (int i = 0; i < r->N; i++) {
        in[i] = (int32_t)mw_rng_below(&r->rng, r->V);
        tg[i] = (int32_t)mw_rng_below(&r->rng, r->V);
    }
    return MW_OK;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmd_bench(int argc, char **argv) {
    opts o;
    parse(&o, CMD_BENCH, "bench", argc, argv);
    finish_config(&o);
    if (o.bench_warmup < 0) die(1, "--warmup must be >= 0");
    if (!o.json) print_config(&o, "bench");
    mw_model *m = create_model(&o);
    if (!o.json) print_plan(mw_model_plan(m));
    mw_model_init_gpt2(m, o.cfg.seed);
    const mw_config *c = &o.cfg;
    rand_ctx rc = {.rng = o.cfg.seed, .N = c->batch * c->seq, .V = c->vocab};
    int total = o.bench_warmup + c->steps;
    double *ms = calloc((size_t)c->steps, sizeof *ms);
    if (!ms) die(1, "out of memory");
    for (int s = 0; s < total; s++) {
        mw_step_report r;
        if (mw_train_step(m, s, rand_batch, &rc, &r) != MW_OK) die(1, "%s", mw_last_error());
        if (s >= o.bench_warmup) ms[s - o.bench_warmup] = r.ms;
        if (!o.json)
            printf("step %d%s %.1f ms  %.1f tok/s  loss %.4f\n", s, s < o.bench_warmup ? " (warm-up)" : "",
                   r.ms, r.tokens_per_s, r.loss);
    }
    qsort(ms, (size_t)c->steps, sizeof *ms, cmp_dbl);
    double med = c->steps % 2 ? ms[c->steps / 2] : 0.5 * (ms[c->steps / 2 - 1] + ms[c->steps / 2]);
    double tokens = (double)c->batch * c->seq * c->accum, tps = tokens / med * 1e3;
    double gflops = mw_config_flops_per_token(c) * tps / 1e9;
    uint64_t cat[MW_CAT_COUNT], peak;
    mw_model_memory(m, cat, &peak);
    if (o.json) {
        printf("{\"tokens_per_s\": %.3f, \"ms_per_step\": %.3f, \"ms_min\": %.3f, \"ms_max\": %.3f, "
               "\"model_gflops\": %.3f, \"params\": %zu, \"threads\": %d, \"batch\": %d, \"seq\": %d, "
               "\"accum\": %d, \"steps\": %d, ",
               tps, med, ms[0], ms[c->steps - 1], gflops, mw_config_num_params(c), c->threads,
               c->batch, c->seq, c->accum, c->steps);
        json_categories(stdout, m);
        printf("}\n");
    } else {
        char b1[32], b2[32];
        printf("median %.1f ms/step (min %.1f, max %.1f over %d steps) | %.1f tokens/s | %.1f model "
               "GFLOP/s | arena peak %s | peak RSS %s\n",
               med, ms[0], ms[c->steps - 1], c->steps, tps, gflops, mw_fmt_bytes(peak, b1, sizeof b1),
               mw_fmt_bytes(mw_peak_rss(), b2, sizeof b2));
    }
    free(ms);
    mw_model_destroy(m);
    return 0;
}

/* ---- export -------------------------------------------------------------------------------- */

static int cmd_export(int argc, char **argv) {
    opts o;
    parse(&o, CMD_EXPORT, "export", argc, argv);
    if (!o.ckpt || !o.out) die(1, "export: --ckpt (checkpoint file or directory) and --out FILE are required");
    if (strcmp(o.format, "safetensors") != 0) die(1, "export: unknown --format '%s' (available: safetensors)", o.format);
    char path[4096];
    struct stat st;
    if (stat(o.ckpt, &st) != 0) die(1, "--ckpt %s: %s", o.ckpt, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        mw_ckpt_info info;
        if (mw_ckpt_latest(o.ckpt, path, sizeof path, &info, NULL) != MW_OK) die(1, "%s", mw_last_error());
        if (!path[0]) die(1, "--ckpt %s: no valid checkpoint there", o.ckpt);
    } else {
        snprintf(path, sizeof path, "%s", o.ckpt);
    }
    if (mw_hf_export_ckpt(path, o.out) != MW_OK) die(1, "%s", mw_last_error());
    printf("export: %s -> %s (Hugging Face GPT-2 safetensors, F32)\n", path, o.out);
    return 0;
}

/* ---- prepare ------------------------------------------------------------------------------- */

static int cmd_prepare(int argc, char **argv) {
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

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(int, char **);
        int mask;
    } cmds[] = {{"train", cmd_train, CMD_TRAIN}, {"bench", cmd_bench, CMD_BENCH},
                {"prepare", cmd_prepare, CMD_PREPARE}, {"export", cmd_export, CMD_EXPORT}};
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout, NULL, 0);
        return argc < 2 ? 1 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("memwall %s\n", MW_VERSION);
        return 0;
    }
    const char *name = argv[1];
    int help = strcmp(name, "help") == 0;
    if (help) {
        if (argc < 3) {
            usage(stdout, NULL, 0);
            return 0;
        }
        name = argv[2];
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(name, cmds[i].name) == 0) {
            if (help) {
                usage(stdout, name, cmds[i].mask);
                return 0;
            }
            return cmds[i].fn(argc - 2, argv + 2);
        }
    die(1, "unknown command '%s' (commands: train, bench, prepare, export, help)", name);
    return 1;
}
