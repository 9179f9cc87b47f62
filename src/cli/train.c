/* memwall train, bench and export. */
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
    MW_TRY(mw_ckpt_prune(t->o->ckpt_dir, t->o->keep, st->step));
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
        fprintf(t->jlog, "{\"step\": %d, \"loss\": ", r->step);
        json_num(t->jlog, "%.9g", r->loss); /* a diverged run logs null, not nan */
        fprintf(t->jlog, ", \"lr\": %.9g, \"ms\": %.3f, \"tokens_per_s\": %.2f, \"grad_norm\": ", r->lr, r->ms,
                r->tokens_per_s);
        json_num(t->jlog, "%.9g", r->grad_norm);
        if (r->has_val) {
            fprintf(t->jlog, ", \"val_loss\": ");
            json_num(t->jlog, "%.9g", r->val_loss);
        }
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

/* Creates --out (and its parents) and checks that it can be written, before any step runs. */
static void check_out_dir(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) die(1, "cannot create %s: %s", p, strerror(errno));
            *s = '/';
        }
    if (mkdir(p, 0777) != 0 && errno != EEXIST) die(1, "cannot create --out %s: %s", p, strerror(errno));
    if (access(p, W_OK) != 0) die(1, "--out %s is not writable: %s", p, strerror(errno));
}

/* On resume, drops the log lines of steps after the checkpoint (a killed run logged them, and they
 * are about to run again) and earlier end lines, so that the log reads as one unbroken run. */
static void trim_log(const char *path, int step) {
    FILE *in = fopen(path, "r");
    if (!in) return;
    char tmp[4200], line[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) die(1, "cannot write %s: %s", tmp, strerror(errno));
    while (fgets(line, sizeof line, in)) {
        int s;
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') continue; /* a line cut by a kill */
        if (sscanf(line, "{\"step\": %d,", &s) == 1 ? s <= step : strstr(line, "\"event\": \"end\"") == NULL)
            fputs(line, out);
    }
    fclose(in);
    if (fclose(out) != 0 || rename(tmp, path) != 0) die(1, "cannot rewrite --json-log %s: %s", path, strerror(errno));
}

int cmd_train(int argc, char **argv) {
    opts o;
    parse(&o, CMD_TRAIN, "train", argc, argv);
    if (!o.data) die(1, "train: --data PREFIX is required (make token files with memwall prepare)");
    apply_init_shape(&o);
    finish_config(&o);
    if (o.save_every < 0 || o.keep < 1) die(1, "--save-every must be >= 0 and --keep >= 1");
    if (o.save_every > 0 && !o.ckpt_dir) die(1, "--save-every needs --out DIR");
    if (o.stop_at < 0) die(1, "--stop-at must be >= 0");
    print_config(&o, "train");
    mw_data *train = open_data(o.data, "train", 1), *val = open_data(o.data, "val", 0);
    printf("  data: %s.train.bin %llu tokens", o.data, (unsigned long long)mw_data_count(train));
    if (val) printf(", %s.val.bin %llu tokens", o.data, (unsigned long long)mw_data_count(val));
    printf("\n");
    if (val && mw_data_count(val) < (uint64_t)o.cfg.batch * o.cfg.seq + 1)
        die(1, "%s.val.bin holds %llu tokens, fewer than one batch of %d windows of %d+1 (prepare with a larger "
               "--val-fraction, or remove it)", o.data, (unsigned long long)mw_data_count(val), o.cfg.batch, o.cfg.seq);
    if (o.ckpt_dir) check_out_dir(o.ckpt_dir);
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
    if (o.ckpt_dir) { /* --out must not hold a newer run: saving there would mix the two */
        char newest[4096];
        mw_ckpt_info ni;
        int start = ckpt[0] ? info.state.step : 0;
        if (mw_ckpt_latest(o.ckpt_dir, newest, sizeof newest, &ni, NULL) != MW_OK) die(1, "%s", mw_last_error());
        if (newest[0] && ni.state.step > start)
            die(1, "--out %s already holds %s (step %d), newer than this run's start (step %d): use --resume auto, "
                   "or another --out", o.ckpt_dir, newest, ni.state.step, start);
    }
    train_tokenizer(&o, train, val, ckpt, &info); /* the data's tokenizer must be the model's */
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
    if (o.json_log && ckpt[0]) trim_log(o.json_log, st.step);
    if (o.json_log && !(t.jlog = fopen(o.json_log, ckpt[0] ? "a" : "w")))
        die(1, "cannot open --json-log %s: %s", o.json_log, strerror(errno));
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
    printf("  arena peak per category (the plan it executed):");
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

int cmd_bench(int argc, char **argv) {
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

int cmd_export(int argc, char **argv) {
    opts o;
    parse(&o, CMD_EXPORT, "export", argc, argv);
    if (!o.ckpt || !o.out) die(1, "export: --ckpt (checkpoint file or directory) and --out FILE are required");
    if (strcmp(o.format, "safetensors") != 0) die(1, "export: unknown --format '%s' (available: safetensors)", o.format);
    char path[4096];
    mw_ckpt_info info;
    resolve_ckpt(o.ckpt, path, sizeof path, &info);
    if (mw_hf_export_ckpt(path, o.out) != MW_OK) die(1, "%s", mw_last_error());
    printf("export: %s -> %s (Hugging Face GPT-2 safetensors, F32)\n", path, o.out);
    return 0;
}

