/* memwall train, bench and export. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/arena.h"
#include "../core/fsutil.h"
#include "../core/rng.h"
#include "../core/status.h"
#include "../dist/comm_mpi.h"
#include "../memory/scratch.h"
#include "../train/checkpoint.h"
#include "cli.h"

/* ---- train --------------------------------------------------------------------------------- */

typedef struct train_ctx {
    const opts *o;
    mw_model *m;
    mw_comm *comm; /* --zero: the ranks (rank 0 prints, logs and saves) */
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
    /* --zero: every rank writes its shard's part of the one file (mw_ckpt_save_ranks) */
    MW_TRY(mw_ckpt_save_ranks(t->o->ckpt_dir, t->m, st, t->train_tokens, path, sizeof path));
    if (!t->comm || t->comm->rank == 0) MW_TRY(mw_ckpt_prune(t->o->ckpt_dir, t->o->cfg.keep, st->step));
    t->last_saved = st->step;
    printf("%s  saved %s\n", t->tty ? "\r\033[K" : "", path); /* on a terminal, over the step's line */
    fflush(stdout);
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
        const mw_model_clock *k = &r->clock;
        fprintf(t->jlog, ", \"compute_ms\": %.3f, \"io_busy_ms\": %.3f, \"io_read_ms\": %.3f, \"io_write_ms\": %.3f, \"io_wait_ms\": %.3f",
                k->compute_ms, k->io_busy_ms, k->io_read_ms, k->io_write_ms, k->io_wait_ms);
        const mw_model_clock *q = &r->opt_clock; /* of it, the norm's and the optimizer's passes */
        if (r->opt_split)
            fprintf(t->jlog, ", \"opt_ms\": %.3f, \"opt_compute_ms\": %.3f, \"opt_io_busy_ms\": %.3f, \"opt_io_read_ms\": %.3f, "
                             "\"opt_io_write_ms\": %.3f, \"opt_io_wait_ms\": %.3f",
                    r->opt_ms, q->compute_ms, q->io_busy_ms, q->io_read_ms, q->io_write_ms, q->io_wait_ms);
        if (r->has_val) {
            fprintf(t->jlog, ", \"val_loss\": ");
            json_num(t->jlog, "%.9g", r->val_loss);
        }
        fprintf(t->jlog, "}\n");
        fflush(t->jlog);
    }
    int last = r->step == c->steps;
    if (progress_quiet() ? last || r->has_val : r->step % t->log_every == 0 || last || r->has_val || t->steps_run == 1) {
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
    if (t->o->ckpt_dir && t->o->cfg.save_every > 0 && st->step % t->o->cfg.save_every == 0)
        MW_TRY(save_checkpoint(t, st));
    if (t->o->stop_at > 0 && st->step >= t->o->stop_at) return MW_ERR_STOP;
    return MW_OK;
}

/* Split suffix of the token set prefix (a manifest's shards, or PREFIX.<suffix>.bin), every shard
 * checked before step 1; NULL when an optional split is absent. */
static mw_data *open_data(const char *prefix, const char *suffix, int required) {
    mw_data *d;
    if (mw_data_open_set(&d, prefix, suffix) != MW_OK) die(1, "%s", mw_last_error());
    if (!d && required)
        die(1, "--data %s: no token set there (neither %s.manifest.json nor %s.%s.bin exists; make one with memwall "
               "prepare)", prefix, prefix, prefix, suffix);
    return d;
}

/* "PATH 123 tokens" or "PATH (5 shards) 123 tokens" */
static void data_line(const mw_data *d) {
    printf("%s", mw_data_path(d));
    if (mw_data_shards(d) > 1) printf(" in %d shards", mw_data_shards(d));
    printf(" %llu tokens", (unsigned long long)mw_data_count(d));
}

/* Finds the checkpoint --resume names and verifies it; path[0] = 0 when auto finds no checkpoint
 * file at all (a fresh start). Checkpoint files that exist but do not verify are never skipped
 * silently: when an older one is valid, the run resumes from it and says so on stderr; when none
 * is, it refuses, naming each file and why, rather than start again from step 0. */
static void find_resume(const opts *o, char *path, size_t n, mw_ckpt_info *info) {
    const char *dir = o->resume;
    int is_auto = strcmp(o->resume, "auto") == 0;
    struct stat st;
    path[0] = 0;
    if (is_auto) {
        if (!o->ckpt_dir) die(1, "--resume auto needs --out DIR (where the checkpoints are)");
        dir = o->ckpt_dir;
    } else if (stat(o->resume, &st) != 0) {
        die(1, "--resume %s: %s", o->resume, strerror(errno));
    } else if (S_ISREG(st.st_mode)) {
        snprintf(path, n, "%s", o->resume);
        if (mw_ckpt_verify(path, info) != MW_OK) die(1, "%s", mw_last_error());
        return;
    } else if (!S_ISDIR(st.st_mode)) {
        die(1, "--resume %s: not a checkpoint file or a directory", o->resume);
    }
    mw_ckpt_file *f;
    int nf;
    if (mw_ckpt_list(dir, &f, &nf) != MW_OK) die(1, "%s", mw_last_error());
    if (nf == 0) {
        if (!is_auto) die(1, "--resume %s: no checkpoint file (step-N.mwck) there", dir);
        return;
    }
    char bad[8192] = "";
    size_t bl = 0;
    int nbad = 0;
    for (int i = 0; i < nf && !path[0]; i++) {
        snprintf(path, n, "%s/%s", dir, f[i].name);
        if (mw_ckpt_verify(path, info) == MW_OK) break;
        if (bl < sizeof bad) bl += (size_t)snprintf(bad + bl, sizeof bad - bl, "%s%s", nbad ? "; " : "", mw_last_error());
        nbad++;
        path[0] = 0;
    }
    free(f);
    if (!path[0])
        die(1, "--resume %s: none of the %d checkpoint file(s) in %s verifies, so there is nothing valid to resume "
               "(not starting again from step 0; move them away to start afresh): %s",
            o->resume, nf, dir, bad);
    if (nbad) {
        fflush(stdout);
        fprintf(stderr, "memwall: --resume %s: resuming from the older %s, because the newer %d checkpoint file(s) "
                        "do not verify: %s\n", o->resume, path, nbad, bad);
    }
}

/* ---- resume: the stored run's settings ---------------------------------------------------- */

/* Flags a resume compares with the checkpoint. SHAPE: must match (the tensors have that shape).
 * MATH: change the numbers or the data; they come from the checkpoint, and a different value on
 * the command line is refused unless --override names it. CARRY: leave the numbers unchanged
 * (what is logged, saved and when, memory); they come from the checkpoint unless given. */
enum { SHAPE, MATH, CARRY };
typedef struct run_key {
    const char *flag;
    int kind; /* K_INT, K_DBL, K_U64 or K_SIZE */
    size_t off;
    int cls, run_key; /* run_key: stored only since mw_ckpt_info.has_run_keys */
} run_key;
#define CF(f) offsetof(mw_config, f)
static const run_key KEYS[] = {
    {"layers", K_INT, CF(n_layer), SHAPE, 0},       {"heads", K_INT, CF(n_head), SHAPE, 0},
    {"dim", K_INT, CF(n_embd), SHAPE, 0},           {"vocab", K_INT, CF(vocab), SHAPE, 0},
    {"ctx", K_INT, CF(ctx), SHAPE, 0},              {"arch", K_INT, CF(arch), SHAPE, 0},
    {"kv-heads", K_INT, CF(n_kv_head), SHAPE, 0},   {"ffn", K_INT, CF(ffn), SHAPE, 0},
    {"tied", K_INT, CF(tied), SHAPE, 0},            {"rope-theta", K_DBL, CF(rope_theta), SHAPE, 0},
    {"experts", K_INT, CF(n_experts), SHAPE, 0},    {"experts-per-tok", K_INT, CF(n_experts_tok), SHAPE, 0},
    {"shared-experts", K_INT, CF(n_shared), SHAPE, 0}, {"moe-ffn", K_INT, CF(moe_ffn), SHAPE, 0},
    {"first-dense", K_INT, CF(first_dense), SHAPE, 0}, {"moe-gate", K_INT, CF(moe_gate), SHAPE, 0},
    {"norm-topk", K_INT, CF(norm_topk), SHAPE, 0},  {"capacity-factor", K_DBL, CF(capacity_factor), SHAPE, 0},
    {"routed-scale", K_DBL, CF(routed_scale), SHAPE, 0}, {"q-lora-rank", K_INT, CF(q_lora_rank), SHAPE, 0},
    {"kv-lora-rank", K_INT, CF(kv_lora_rank), SHAPE, 0}, {"qk-rope-dim", K_INT, CF(qk_rope_dim), SHAPE, 0},
    {"qk-nope-dim", K_INT, CF(qk_nope_dim), SHAPE, 0}, {"v-head-dim", K_INT, CF(v_head_dim), SHAPE, 0},
    {"batch", K_INT, CF(batch), MATH, 0},
    {"seq", K_INT, CF(seq), MATH, 0},               {"accum", K_INT, CF(accum), MATH, 0},
    {"steps", K_INT, CF(steps), MATH, 0},           {"warmup", K_INT, CF(warmup), MATH, 0},
    {"lr", K_DBL, CF(lr), MATH, 0},                 {"min-lr-frac", K_DBL, CF(min_lr_frac), MATH, 0},
    {"weight-decay", K_DBL, CF(weight_decay), MATH, 0}, {"beta1", K_DBL, CF(beta1), MATH, 0},
    {"beta2", K_DBL, CF(beta2), MATH, 0},           {"eps", K_DBL, CF(eps), MATH, 0},
    {"grad-clip", K_DBL, CF(grad_clip), MATH, 0},   {"seed", K_U64, CF(seed), MATH, 0},
    {"precision", K_INT, CF(precision), MATH, 0},   {"act-compress", K_INT, CF(act_compress), MATH, 0},
    {"optim", K_INT, CF(optim), MATH, 0},           {"momentum", K_DBL, CF(momentum), MATH, 0},
    {"beta3", K_DBL, CF(beta3), MATH, 0},           {"eps2", K_DBL, CF(eps2), MATH, 0},
    {"clip-threshold", K_DBL, CF(clip_threshold), MATH, 0}, {"decay-rate", K_DBL, CF(decay_rate), MATH, 0},
    {"eval-every", K_INT, CF(eval_every), CARRY, 0}, {"eval-batches", K_INT, CF(eval_batches), CARRY, 0},
    {"save-every", K_INT, CF(save_every), CARRY, 1}, {"keep", K_INT, CF(keep), CARRY, 1},
    {"budget", K_SIZE, CF(budget), CARRY, 1},
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

static void key_text(const run_key *k, const mw_config *c, char *buf, size_t n) {
    const char *p = (const char *)c + k->off;
    if (k->off == CF(arch)) {
        snprintf(buf, n, "%s", mw_arch_name(c->arch));
    } else if (k->off == CF(optim)) {
        snprintf(buf, n, "%s", mw_optim_str(c->optim));
    } else if (k->off == CF(precision)) {
        snprintf(buf, n, "%s", mw_precision_str(c->precision));
    } else if (k->kind == K_INT) {
        snprintf(buf, n, "%d", *(const int *)p);
    } else if (k->kind == K_DBL) { /* the shortest text that reads back as the same double */
        double v = *(const double *)p;
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, n, "%.*g", prec, v);
            if (strtod(buf, NULL) == v) break;
        }
    } else {
        snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p);
    }
}

/* A key's text as a JSON value: a number as it is, a word (--optim sgd, --precision bf16) quoted. */
static void json_value(const char *t, char *buf, size_t n) {
    char *end;
    (void)strtod(t, &end);
    if (*t && !*end) snprintf(buf, n, "%s", t);
    else snprintf(buf, n, "\"%s\"", t);
}

static int key_same(const run_key *k, const mw_config *a, const mw_config *b) {
    const char *x = (const char *)a + k->off, *y = (const char *)b + k->off;
    if (k->kind == K_INT) return *(const int *)x == *(const int *)y;
    if (k->kind == K_DBL) return *(const double *)x == *(const double *)y;
    return *(const uint64_t *)x == *(const uint64_t *)y;
}

static void key_copy(const run_key *k, mw_config *dst, const mw_config *src) {
    size_t size = k->kind == K_INT ? sizeof(int) : k->kind == K_DBL ? sizeof(double) : sizeof(uint64_t);
    memcpy((char *)dst + k->off, (const char *)src + k->off, size);
}

/* Whether KEY is in the comma-separated list. */
static int in_list(const char *list, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == kl && strncmp(p, key, kl) == 0) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

typedef struct overrides {
    int n;
    char text[1024]; /* "--steps 4 -> 8, ..." */
    char json[1024]; /* "\"steps\": [4, 8], ..." */
} overrides;

static void append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t n, const char *fmt, ...) {
    size_t l = strlen(buf);
    if (l + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + l, n - l, fmt, ap);
    va_end(ap);
}

/* The preset whose shape c has, or "custom". */
static const char *shape_name(const mw_config *c) {
    static const char *names[] = {"gpt2-tiny",   "gpt2",        "gpt2-medium",    "gpt2-large",
                                  "gpt2-xl",     "llama-tiny",  "smollm-135m",    "smollm-360m",
                                  "smollm-1.7b", "tinyllama-1.1b", "llama2-7b",   "llama3-8b",
                                  "llama2-70b"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        mw_config p = *c;
        mw_config_preset(&p, names[i]);
        if (p.n_layer == c->n_layer && p.n_head == c->n_head && p.n_embd == c->n_embd && p.vocab == c->vocab &&
            p.ctx == c->ctx && p.arch == c->arch && p.norm_eps == c->norm_eps &&
            (c->arch != MW_ARCH_LLAMA || (p.n_kv_head == c->n_kv_head && p.ffn == c->ffn && p.tied == c->tied &&
                                          p.rope_theta == c->rope_theta)))
            return names[i];
    }
    return "custom";
}

/* 1 when list (--override's KEY,KEY,...; may be NULL) names key */
static int names_key(const char *list, const char *key) {
    const size_t n = strlen(key);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && strncmp(p, key, n) == 0) return 1;
        p = e ? e + 1 : p + l;
    }
    return 0;
}

/* A resume continues the stored run: every flag of KEYS not on the command line takes the
 * checkpoint's value, and a MATH flag given with another value is refused unless --override
 * names it (then it is recorded in ov). */
static void adopt_checkpoint(opts *o, const mw_ckpt_info *info, const char *ckpt, overrides *ov) {
    mw_config *c = &o->cfg;
    const mw_config *k = &info->cfg;
    int whole_shape = opt_given(o, "preset") || o->init; /* these set every shape flag */
    if (o->override) { /* every KEY must be a MATH flag on the command line */
        for (const char *p = o->override; *p;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            const run_key *rk = NULL;
            for (size_t i = 0; i < NKEYS && !rk; i++)
                if (strlen(KEYS[i].flag) == l && strncmp(KEYS[i].flag, p, l) == 0) rk = &KEYS[i];
            if (!rk || rk->cls != MATH)
                die(1, "--override: '%.*s' is not a flag it applies to (batch, seq, accum, steps, warmup, lr, min-lr-frac, "
                       "weight-decay, beta1, beta2, eps, grad-clip, seed, precision, momentum, beta3, eps2, clip-threshold, decay-rate; the shape cannot change, and threads, recompute, "
                       "budget, eval, log and save cadence may differ without it)", (int)l, p);
            if (!opt_given(o, rk->flag))
                die(1, "--override %s: --%s is not on the command line (give the new value)", rk->flag, rk->flag);
            p = e ? e + 1 : p + l;
        }
    }
    char was[1024] = "", now[1024] = "", names[512] = "", shape_was[256] = "", shape_now[256] = "";
    /* another optimizer: its state cannot continue the checkpoint's, so only --reset-optimizer
     * starts it (from zero, with the new optimizer's hyperparameters: the command line's and its
     * defaults, none of the checkpoint's) */
    const int new_optim = opt_given(o, "optim") && c->optim != k->optim;
    if (new_optim && !o->reset_optim)
        die(1, "--resume: %s holds --optim %s state, the command line says --optim %s: add --reset-optimizer to start "
               "%s's state from zero (keeping the parameters and the step), or drop --optim",
            ckpt, mw_optim_str(k->optim), mw_optim_str(c->optim), mw_optim_str(c->optim));
    /* the learning rate is the user's, so it continues, unless the two optimizers' defaults
     * disagree (the Adam family's 3e-4, Adafactor's and CAME's 1.5e-4, SGD's 0.1): then the
     * checkpoint's would not suit the new one */
    if (new_optim && !opt_given(o, "lr")) {
        mw_config was_d = *k, now_d = *c;
        mw_optim_defaults(&was_d), mw_optim_defaults(&now_d);
        if (was_d.lr != now_d.lr)
            die(1, "--resume: %s trained --optim %s at --lr %g; --optim %s's default learning rate is %g, not %s's %g: "
                   "give --lr (and --override lr)",
                ckpt, mw_optim_str(k->optim), k->lr, mw_optim_str(c->optim), now_d.lr, mw_optim_str(k->optim), was_d.lr);
    }
    static const char *const HP[] = {"optim", "beta1", "beta2", "beta3", "eps", "eps2", "weight-decay", "momentum",
                                     "clip-threshold", "decay-rate"};
    for (size_t i = 0; i < NKEYS; i++) {
        const run_key *rk = &KEYS[i];
        int hp = 0;
        for (size_t h = 0; h < sizeof HP / sizeof HP[0]; h++) hp |= strcmp(rk->flag, HP[h]) == 0;
        if (new_optim && hp) continue;
        int given = opt_given(o, rk->flag) || (rk->cls == SHAPE && whole_shape);
        if (!given) {
            if (!rk->run_key || info->has_run_keys) key_copy(rk, c, k);
            continue;
        }
        if (key_same(rk, c, k) || rk->cls == CARRY) continue;
        char a[64], b[64], ja[70], jb[70];
        key_text(rk, k, a, sizeof a);
        key_text(rk, c, b, sizeof b);
        json_value(a, ja, sizeof ja), json_value(b, jb, sizeof jb); /* before "none" below: act_compress stays 0 */
        if (rk->off == CF(act_compress)) { /* the flag's own word for 0 */
            if (!k->act_compress) snprintf(a, sizeof a, "none");
            if (!c->act_compress) snprintf(b, sizeof b, "none");
        }
        if (rk->cls == SHAPE) {
            append(shape_was, sizeof shape_was, " --%s %s", rk->flag, a);
            append(shape_now, sizeof shape_now, " --%s %s", rk->flag, b);
        } else if (o->override && in_list(o->override, rk->flag)) {
            append(ov->text, sizeof ov->text, "%s--%s %s -> %s", ov->n ? ", " : "", rk->flag, a, b);
            append(ov->json, sizeof ov->json, "%s\"%s\": [%s, %s]", ov->n ? ", " : "", rk->flag, ja, jb);
            ov->n++;
        } else {
            append(was, sizeof was, " --%s %s", rk->flag, a);
            append(now, sizeof now, " --%s %s", rk->flag, b);
            append(names, sizeof names, "%s%s", names[0] ? "," : "", rk->flag);
        }
    }
    /* the compression chosen per block (--act-layers, or --recompute auto's with --act-compress-max): the
     * checkpoint's widths are kept (the swaps may differ: they do not change the numbers); another
     * choice of widths, or auto's choosing anew, would change them */
    char kw[MW_ACT_LAYERS_MAX], cw[MW_ACT_LAYERS_MAX];
    mw_act_layers_widths(k->act_layers, kw, sizeof kw);
    mw_act_layers_widths(c->act_layers, cw, sizeof cw);
    if (kw[0] && !cw[0] && !strpbrk(c->act_layers, "xa") && !c->act_compress) {
        snprintf(c->act_layers, sizeof c->act_layers, "%s", kw);
        if (c->act_compress_max || c->recompute == MW_RECOMPUTE_AUTO)
            printf("  resume: %s compressed per block as --act-layers %.60s says: kept (not chosen anew)\n", ckpt, kw);
        c->act_compress_max = 0;
    } else if (strcmp(kw, cw) != 0 || (!kw[0] && c->act_compress_max)) {
        die(1, "--resume: %s stored its activations compressed per block as --act-layers %.60s, the command line %s "
               "%.60s: give that --act-layers (its swaps, x or a, may differ), or start a new run", ckpt, kw[0] ? kw : "k (none)",
            c->act_compress_max ? "lets --recompute auto choose anew with --act-compress-max" : "says --act-layers",
            c->act_compress_max ? "" : cw[0] ? cw : c->act_layers);
    }
    c->norm_eps = k->norm_eps; /* no flag sets it: the checkpoint's (the model checks it) */
    if (shape_was[0])
        die(1, "--resume: %s is from another model shape: it has%s, the command line says%s (the shape cannot be "
               "overridden; drop these flags)", ckpt, shape_was, shape_now);
    if (names[0])
        die(1, "--resume: %s was trained with%s, the command line says%s; drop these flags or add --override %s", ckpt,
            was, now, names);
    if (info->has_run_keys && !opt_given(o, "recompute")) {
        c->recompute = k->recompute;
        c->recompute_every = k->recompute_every;
        memcpy(c->recompute_blocks, k->recompute_blocks, sizeof c->recompute_blocks);
    }
    if (!info->has_run_keys)
        printf("  resume: %s predates stored --save-every, --keep, --budget and --recompute: this run uses the "
               "command line's (--save-every %d --keep %d)\n", ckpt, c->save_every, c->keep);
    if (!whole_shape) o->preset = shape_name(c);
    if (o->init) printf("  resume: the weights come from %s, not --init\n", ckpt);
    if (o->reset_optim)
        printf("  resume: --reset-optimizer: the parameters and step %d of %s, --optim %s's state from zero%s\n",
               info->state.step, ckpt, mw_optim_str(c->optim), new_optim ? " (the checkpoint's was another)" : "");
}

/* --out must not hold a newer run than this one's start: saving there would mix the two. Only
 * files newer than start are verified (an invalid one is not a run; --resume reported it). */
static void check_no_newer_run(const char *dir, int start) {
    mw_ckpt_file *f;
    int n;
    if (mw_ckpt_list(dir, &f, &n) != MW_OK) die(1, "%s", mw_last_error());
    for (int i = 0; i < n && f[i].step > start; i++) {
        char p[4400];
        mw_ckpt_info ni;
        snprintf(p, sizeof p, "%s/%s", dir, f[i].name);
        if (mw_ckpt_verify(p, &ni) == MW_OK)
            die(1, "--out %s already holds %s (step %d), newer than this run's start (step %d): use --resume auto, "
                   "or another --out", dir, p, ni.state.step, start);
    }
    free(f);
}

/* On resume, drops the log lines of steps after the checkpoint (a killed run logged them, and they
 * are about to run again), earlier end lines and overrides recorded at or after the checkpoint's
 * step (this run records its own), so that the log reads as one unbroken run. */
static void trim_log(const char *path, int step) {
    FILE *in = fopen(path, "r");
    if (!in) return;
    char tmp[4200], *line = NULL;
    size_t cap = 0;
    ssize_t n;
    FILE *out;
    if (mw_tmp_create(path, tmp, sizeof tmp, &out) != MW_OK) die(1, "--json-log: %s", mw_last_error());
    errno = 0;
    /* whole lines of any length (an end line grows with the ranks: 1.2 KB at 6): a line read in
     * pieces would keep its tail as a line that is not JSON */
    while ((n = getline(&line, &cap, in)) > 0) {
        int s;
        if (line[n - 1] != '\n' || (size_t)n != strlen(line)) continue; /* a line cut by a kill */
        if (sscanf(line, "{\"event\": \"override\", \"step\": %d,", &s) == 1 && s >= step) continue;
        if (sscanf(line, "{\"step\": %d,", &s) == 1 ? s <= step : strstr(line, "\"event\": \"end\"") == NULL)
            fputs(line, out);
    }
    const int rerr = ferror(in) ? errno ? errno : EIO : 0;
    free(line);
    fclose(in);
    if (rerr) {
        fclose(out);
        unlink(tmp);
        die(1, "cannot read --json-log %s: %s", path, strerror(rerr));
    }
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        die(1, "cannot rewrite --json-log %s: %s", path, strerror(err));
    }
}

/* --zero on more than one rank, until the run starts: every rank ends this phase in exactly one
 * vote, agree() when its checks passed or the refusal die() hands refuse_vote(). When any rank
 * refused, the lowest such rank prints its message (once, however many ranks refused alike), and
 * every rank leaves MPI and exits with that rank's code: no MPI_ABORT banner, no header first. */
static mw_comm *voters;

static void vote(int code, const char *msg) {
    mw_comm *cm = voters;
    voters = NULL, die_refuse_hook = NULL; /* from here on die() aborts every rank (die_hook) */
    uint64_t *all = calloc((size_t)cm->size, sizeof *all);
    if (!all || mw_mpi_allgather_u64(cm, (uint64_t)code, all) != MW_OK) {
        if (msg) die_print(msg);
        else die_print(all ? mw_last_error() : "out of memory");
        mw_mpi_abort(code ? code : 1);
    }
    int j = 0;
    while (j < cm->size && !all[j]) j++;
    if (j == cm->size) {
        free(all);
        return;
    }
    const int rc = (int)all[j];
    free(all);
    if (j == cm->rank) {
        char line[8400];
        snprintf(line, sizeof line, "rank %d: %s", j, msg ? msg : "");
        die_print(j ? line : msg ? msg : "");
    }
    fflush(stdout);
    fflush(stderr);
    mw_mpi_finalize();
    exit(rc);
}
static void refuse_vote(int code, const char *msg) { vote(code ? code : 1, msg); }
static void agree(void) {
    if (voters) vote(0, NULL);
}

/* --zero: MPI, this rank's place in the run, and its output (rank 0 alone prints on stdout) */
static mw_grid grid; /* --pp: this rank's place in the layout and its groups */
static mw_comm *start_ranks(opts *o, int *argc, char ***argv) {
    const int launched = mw_mpi_launched_size(), tp = o->cfg.tp > 1;
    if (!o->cfg.dp && !tp && o->cfg.pp <= 1) {
        if (launched > 1)
            die(1, "started as one of %d ranks (mpirun) without --zero: each would train the whole model alone on the "
                   "same data and write the same files; give --zero 0 or 1 to share the steps", launched);
        return NULL;
    }
    mw_comm *cm;
    const int TP = o->cfg.tp > 1 ? o->cfg.tp : 1, PP = o->cfg.pp > 1 ? o->cfg.pp : 1, D = o->cfg.world > 0 ? o->cfg.world : 1;
    if (tp && (launched > 0 ? launched : 1) != TP * PP * D) /* said before MPI starts (as the launcher's environment tells) */
        die(1, "--tp %d runs on %d ranks (mpirun -np %d), this run has %d", o->cfg.tp, TP * PP * D, TP * PP * D, launched > 0 ? launched : 1);
    if (mw_mpi_init(argc, argv, o->comm_timeout, &cm) != MW_OK) die(1, "%s", mw_last_error());
    if (cm->size > 1) { /* one rank's error stops every rank: until the run starts, by a vote */
        die_hook = mw_mpi_abort;
        voters = cm, die_refuse_hook = refuse_vote;
    }
    if (o->comm_timeout < 0) die(1, "--comm-timeout must be >= 0 seconds (0: wait forever), got %g", o->comm_timeout);
    if (tp && cm->size != TP * PP * D) /* --tp: T x P x D ranks (layout_parse took D from the launcher) */
        die(1, "--tp %d runs on %d ranks (mpirun -np %d), this run has %d", o->cfg.tp, TP * PP * D, TP * PP * D, cm->size);
    if (tp || o->cfg.pp > 1) { /* the layout's groups: tensor-parallel, stages, replicas (layout_parse set this rank's place) */
        if (mw_grid_create(cm, TP, PP, cm->size / (TP * PP), &grid) != MW_OK) die(1, "%s", mw_last_error());
        if ((PP > 1 && grid.p != o->cfg.pp_stage) || (grid.dp_comm && grid.dp_comm->rank != o->cfg.rank))
            die(1, "internal: rank %d's place in the layout differs from the launcher's", cm->rank);
        if (o->cfg.dp && !grid.dp_comm && cm->split && cm->split(cm, cm->rank, 0, &grid.dp_comm) != MW_OK)
            die(1, "%s", mw_last_error()); /* --zero 0 at D = 1: the sums over one replica, a group of this rank alone */
    } else { /* --tp keeps the plan's world of one data-parallel rank */
        o->cfg.world = cm->size;
        o->cfg.rank = cm->rank;
    }
    /* the CPUs this rank may run on: mpirun binds each rank to one core by default (OpenMPI, 2 ranks
     * or fewer per node), and threads beyond them only take turns; estimate --world takes the same */
    const int cpus = mw_mpi_rank_cpus(mw_mpi_local_size());
    if (!opt_given(o, "threads")) {
        o->cfg.threads = cpus;
    } else if (o->cfg.threads > cpus && cm->rank == 0) {
        fprintf(stderr, "memwall: note: --threads %d, but rank 0 may run on %d CPU%s only (mpirun binds each rank to a "
                        "core unless told otherwise: mpirun --bind-to none, or --map-by ppr:1:node:pe=%d)\n",
                o->cfg.threads, cpus, cpus == 1 ? "" : "s", o->cfg.threads);
    }
    if (cm->rank != 0 && !freopen("/dev/null", "w", stdout)) die(1, "rank %d: cannot silence stdout", cm->rank);
    return cm;
}

/* --zero: every rank must train the same thing. v is this rank's fingerprint of what (its
 * configuration, its data, the checkpoint it resumes); a rank whose differs from rank 0's stops
 * every rank, naming it (one launched with other flags, or reading another copy of the data). */
static void same_on_every_rank(mw_comm *cm, uint64_t v, const char *what) {
    if (!cm || cm->size == 1) return;
    uint64_t *all = calloc((size_t)cm->size, sizeof *all);
    if (!all) die(1, "out of memory");
    if (mw_mpi_allgather_u64(cm, v, all) != MW_OK) die(1, "%s", mw_last_error());
    for (int j = 1; j < cm->size; j++)
        if (all[j] != all[0]) {
            if (cm->rank == 0)
                die(1, "rank %d's %s differs from rank 0's: every rank must be given the same (fingerprints %016llx, "
                       "%016llx)", j, what, (unsigned long long)all[j], (unsigned long long)all[0]);
            die_hook = NULL; /* rank 0 says why and aborts every rank */
            sleep(5);
            exit(1);
        }
    free(all);
}

/* A stage's recomputation (cfg->pp > 1: its plan's pin names its own blocks) as a --recompute value
 * of the whole model, into out: blocks:... with the stage's letters at its blocks and fill's (a
 * letter, or 0: 'n') at the others; every:K and a policy's name as they are (each stage applies them
 * to its own blocks). Without a pipeline, pin itself. */
static void stage_pin_global(const mw_config *c, const char *pin, const char *fill, char *out, size_t n) {
    if (c->pp <= 1 || strncmp(pin, "blocks:", 7) != 0 || (size_t)c->n_layer + 8 > n) {
        snprintf(out, n, "%s", pin);
        return;
    }
    memcpy(out, "blocks:", 7);
    for (int l = 0; l < c->n_layer; l++) out[7 + l] = fill && fill[l] ? fill[l] : 'n';
    memcpy(out + 7 + c->pp_first, pin + 7, (size_t)c->pp_blocks);
    out[7 + c->n_layer] = 0;
}

/* --tp --pp with --recompute auto: the stages' agreed choices (each its own blocks') joined into one
 * --recompute value over the pipeline (pc, a stage's rank of each), pinned in o->cfg: blocks:... of
 * every stage's letters when each chose letters or a policy (the same value on every rank, and in
 * the checkpoint); when a stage chose every:K, which names no letters, each rank keeps its stage's
 * value (stage_pin_global, the other stages' letters filled in where they have them). The joined
 * text goes into text (what every stage runs). */
static void join_stages(opts *o, mw_comm *pc, const char *mine, char *text, size_t text_len) {
    const int P = pc->size, L = o->cfg.n_layer;
    enum { PIN = sizeof ((mw_plan_summary *)0)->pin, REC = PIN + 2 * sizeof(int) };
    char *all = calloc((size_t)P, REC), letters[MW_MAX_BLOCK_POLICIES + 1];
    size_t *cd = calloc(2 * (size_t)P, sizeof *cd);
    if (!all || !cd) die(1, "out of memory");
    char *me = all + (size_t)pc->rank * REC;
    memcpy(me, &o->cfg.pp_first, sizeof(int)), memcpy(me + sizeof(int), &o->cfg.pp_blocks, sizeof(int));
    snprintf(me + 2 * sizeof(int), PIN, "%s", mine);
    for (int j = 0; j < P; j++) cd[j] = REC, cd[P + j] = (size_t)j * REC;
    if (pc->allgatherv(pc, all, 1, cd, cd + P) != MW_OK) die(1, "%s", mw_last_error());
    int whole = L <= MW_MAX_BLOCK_POLICIES;
    memset(letters, 0, sizeof letters);
    size_t k = 0;
    for (int j = 0; j < P; j++) {
        int first, nb;
        const char *pin = all + (size_t)j * REC + 2 * sizeof(int);
        memcpy(&first, all + (size_t)j * REC, sizeof(int)), memcpy(&nb, all + (size_t)j * REC + sizeof(int), sizeof(int));
        if (k < text_len) k += (size_t)snprintf(text + k, text_len - k, "%sstage %d %s", j ? ", " : "", j, pin);
        const char c = !strcmp(pin, "none") ? 'n' : !strcmp(pin, "selective") ? 's' : !strcmp(pin, "full") ? 'f' : 0;
        if (first < 0 || nb < 0 || first + nb > L || first + nb > MW_MAX_BLOCK_POLICIES) whole = 0;
        else if (!strncmp(pin, "blocks:", 7) && strlen(pin + 7) == (size_t)nb) memcpy(letters + first, pin + 7, (size_t)nb);
        else if (c) memset(letters + first, c, (size_t)nb);
        else whole = 0; /* every:K */
    }
    char g[sizeof o->cfg.recompute_blocks + 8];
    if (whole) snprintf(g, sizeof g, "blocks:%s", letters);
    else stage_pin_global(&o->cfg, mine, letters, g, sizeof g);
    if (mw_recompute_parse(&o->cfg, g) != MW_OK) die(1, "%s", mw_last_error());
    if (k < text_len)
        snprintf(text + k, text_len - k, whole ? "; every rank runs --recompute %s" : " (each stage its own: a stage "
                 "chose every:K, which no one value of the whole model gives)", g);
    free(all), free(cd);
}

/* --zero with --recompute auto: each rank planned its own share (its shard, its op timings), so the
 * ranks' choices may differ. They agree on one: every rank's choice is a candidate, taken in the
 * order of the plans that chose them, largest first (the rank with the least room left recomputes
 * the most), and the first that fits every rank's --budget is pinned on every rank (cfg->recompute
 * becomes that choice, a blocks: or every: value, and the plan is made again with it). When none
 * fits every rank, the run is refused, naming the ranks and the budget. --tp with --pp: the ranks
 * of each stage (its tensor ranks and replicas, whose collectives must run the same forwards)
 * agree so on a choice for its blocks, and the stages' choices are then joined (join_stages). */
static void agree_recompute(opts *o, mw_comm *world, mw_plan_summary *plan, char *line, size_t line_len) {
    line[0] = 0;
    /* a pipeline's stages each plan their own blocks: without --tp each keeps its own choice (the same
     * bits under every policy) */
    if (!world || world->size == 1 || o->cfg.recompute != MW_RECOMPUTE_AUTO || (o->cfg.pp > 1 && o->cfg.tp <= 1)) return;
    const int staged = o->cfg.pp > 1;
    mw_comm *cm = world;
    if (staged && (!world->split || world->split(world, grid.p, world->rank, &cm) != MW_OK)) /* the stage's ranks */
        die(1, "--recompute auto with --tp and --pp: %s", world->split ? mw_last_error() : "no sub-groups to agree in");
    const int W = cm->size;
    const size_t P = sizeof plan->pin;
    char *pins = calloc((size_t)W, P);
    uint64_t *peak = calloc((size_t)W, sizeof *peak), *fit = calloc((size_t)W, sizeof *fit);
    size_t *cd = calloc(2 * (size_t)W, sizeof *cd);
    int *order = calloc((size_t)W, sizeof *order);
    if (!pins || !peak || !fit || !cd || !order) die(1, "out of memory");
    memcpy(pins + (size_t)cm->rank * P, plan->pin, P);
    for (int j = 0; j < W; j++) cd[j] = P, cd[W + j] = (size_t)j * P;
    if (cm->allgatherv(cm, pins, 1, cd, cd + W) != MW_OK) die(1, "%s", mw_last_error());
    if (mw_mpi_allgather_u64(cm, plan->peak, peak) != MW_OK) die(1, "%s", mw_last_error());
    for (int j = 0; j < W; j++) order[j] = j;
    for (int a = 1; a < W; a++) /* by peak, largest first; the lower rank first on ties */
        for (int b = a; b > 0 && peak[order[b]] > peak[order[b - 1]]; b--) {
            const int x = order[b];
            order[b] = order[b - 1], order[b - 1] = x;
        }
    int chosen = -1;
    for (int k = 0; k < W && chosen < 0; k++) {
        const int j = order[k];
        const char *pin = pins + (size_t)j * P;
        int seen = 0;
        for (int q = 0; q < k && !seen; q++) seen = strcmp(pins + (size_t)order[q] * P, pin) == 0;
        if (seen || !pin[0]) continue;
        mw_config c = o->cfg;
        mw_plan_summary s;
        char g[sizeof c.recompute_blocks + 8];
        stage_pin_global(&c, pin, NULL, g, sizeof g);
        const int mine = mw_recompute_parse(&c, g) == MW_OK && mw_plan(&c, &s) == MW_OK && s.fits;
        if (mw_mpi_allgather_u64(cm, (uint64_t)mine, fit) != MW_OK) die(1, "%s", mw_last_error());
        int all = 1;
        for (int r = 0; r < W; r++) all &= fit[r] == 1;
        if (all) chosen = j;
    }
    if (chosen < 0) { /* every rank refuses alike (a vote: rank 0's message; a stage's: its lowest rank's) */
        char b1[32], b2[32];
        die(2, "--recompute auto over %d ranks%s: no rank's choice fits every rank's --budget %s (the largest plan, "
               "rank %d's %s with --recompute %s): give a larger --budget, or fewer ranks per budget",
            W, staged ? " of a pipeline stage" : "", mw_fmt_bytes(o->cfg.budget, b1, sizeof b1), order[0],
            mw_fmt_bytes(peak[order[0]], b2, sizeof b2), pins + (size_t)order[0] * P);
    }
    char pin[sizeof plan->pin];
    memcpy(pin, pins + (size_t)chosen * P, P);
    int differ = 0;
    for (int j = 0; j < W; j++) differ |= strcmp(pins + (size_t)j * P, pin) != 0;
    if (staged) { /* every stage agreed (or the vote above ended every rank), then the stages join */
        char text[3072];
        agree();
        voters = world, die_refuse_hook = refuse_vote;
        join_stages(o, grid.pp_comm, pin, text, sizeof text);
        if (mw_plan(&o->cfg, plan) != MW_OK) die(1, "%s", mw_last_error());
        snprintf(line, line_len, "  recompute: --recompute auto per pipeline stage, its %d ranks agreeing on the "
                 "largest plan's choice that fits each%s: %s\n", W, differ ? " (stage 0's ranks chose differently "
                 "alone)" : "", text);
        cm->destroy(cm);
    } else {
        if (mw_recompute_parse(&o->cfg, pin) != MW_OK || mw_plan(&o->cfg, plan) != MW_OK) die(1, "%s", mw_last_error());
        snprintf(line, line_len, "  recompute: --recompute auto over %d ranks: --recompute %s, rank %d's choice (its plan "
                 "the largest%s), on every rank\n", W, pin, chosen, differ ? "; the ranks chose differently alone" : "");
    }
    free(pins), free(peak), free(fit), free(cd), free(order);
}

static uint64_t fnv_str(uint64_t h, const char *p) {
    for (; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return (h ^ '/') * 0x100000001b3ull;
}

/* The first line of path starting with key ("" when none). */
static void read_line(const char *path, const char *key, char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) {
            const size_t k = strlen(line) < n - 1 ? strlen(line) : n - 1;
            memcpy(out, line, k);
            out[k] = 0;
            break;
        }
    fclose(f);
}

/* This machine, as the ranks tell machines apart (its host name and the kernel's boot id), and
 * this process's cgroups (ranks in one share its limit). */
static uint64_t machine_id(void) {
    char host[256] = "", boot[128];
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    read_line("/proc/sys/kernel/random/boot_id", "", boot, sizeof boot);
    return fnv_str(fnv_str(0xcbf29ce484222325ull, host), boot);
}

static uint64_t cgroup_id(void) {
    uint64_t h = 0xcbf29ce484222325ull;
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return h;
    char line[4096];
    while (fgets(line, sizeof line, f)) h = fnv_str(h, line);
    fclose(f);
    return h;
}

/* The machine's MemAvailable alone (the cgroups' room apart), MEMWALL_AVAILABLE_OVERRIDE's figure
 * when set; UINT64_MAX when unknown. */
static uint64_t machine_available(uint64_t overall) {
    const char *ov = getenv("MEMWALL_AVAILABLE_OVERRIDE");
    if (ov && *ov) return overall;
    char line[256];
    read_line("/proc/meminfo", "MemAvailable:", line, sizeof line);
    unsigned long long kb;
    return sscanf(line, "MemAvailable: %llu kB", &kb) == 1 ? (uint64_t)kb * 1024 : UINT64_MAX;
}

/* --zero: each rank's arena passes the memory check alone (mw_arena_init), but the ranks of one
 * machine share its memory: before any of them maps its arena, every rank tells its machine, its
 * cgroups, its plan's peak and the memory it sees, and the run is refused on every rank (exit 2,
 * naming the first rank of the group) when the plans of the ranks of one machine add up to more
 * than its MemAvailable, or those of the ranks that also share their cgroups to more than the
 * room they see (the least of both): refused, never OOM-killed, under mpirun too. Every rank
 * measures before any maps (the gathers wait for every rank). */
static void machine_memory_check(mw_comm *cm, const mw_plan_summary *plan, const char *offload_dir) {
    const uint64_t peak = plan->peak;
    if (!cm || cm->size == 1) return;
    const int W = cm->size;
    uint64_t avail;
    char why[600];
    if (mw_mem_available(&avail, why, sizeof why) != MW_OK) avail = UINT64_MAX; /* the arena's check says why */
    enum { NODE, CG, PEAK, ALL, MACH, DISK, ROOM, NQ };
    /* the disk tier's file and its folder's room (UINT64_MAX: none or unknown) */
    const uint64_t droom = plan->disk_file && plan->disk_room ? plan->disk_room : UINT64_MAX;
    const uint64_t mine[NQ] = {machine_id(), cgroup_id(), peak, avail, machine_available(avail), plan->disk_file, droom};
    uint64_t *q = calloc(NQ * (size_t)W, sizeof *q);
    if (!q) die(1, "out of memory");
    for (int k = 0; k < NQ; k++)
        if (mw_mpi_allgather_u64(cm, mine[k], q + (size_t)k * W) != MW_OK) die(1, "%s", mw_last_error());
    const uint64_t *node = q + NODE * W, *cg = q + CG * W, *pk = q + PEAK * W;
    for (int pass = 0; pass < 2; pass++) { /* the machine's MemAvailable; then a cgroup's room as well */
        const uint64_t *av = q + (size_t)(pass ? ALL : MACH) * W;
        for (int f = 0; f < W; f++) { /* f: the first rank of a group */
#define SAME(j) (node[j] == node[f] && (!pass || cg[j] == cg[f]))
            int first = 1, n = 0;
            for (int j = 0; j < f && first; j++) first = !SAME(j);
            if (!first) continue;
            uint64_t sum = 0, room = UINT64_MAX, most = 0;
            for (int j = f; j < W; j++)
                if (SAME(j)) {
                    sum += pk[j], n++;
                    if (av[j] < room) room = av[j];
                    if (pk[j] > most) most = pk[j];
                }
#undef SAME
            if (n < 2 || room == UINT64_MAX || sum <= room) continue;
            /* every rank refuses alike (a vote: rank 0 prints), naming the group by its ranks */
            char b1[32], b2[32], b3[32];
            die(2, "the %d ranks on one machine%s (rank %d and %d more) plan %s together (%s each at most) but only %s "
                   "is available (%s): fewer ranks per machine (mpirun -np, --map-by ppr:1:node), a smaller --batch "
                   "or --seq, more recomputation (--recompute full), or --offload optimizer",
                n, pass ? ", in one cgroup" : "", f, n - 1, mw_fmt_bytes(sum, b1, sizeof b1),
                mw_fmt_bytes(most, b2, sizeof b2), mw_fmt_bytes(room, b3, sizeof b3),
                pass ? "the least any of them sees" : getenv("MEMWALL_AVAILABLE_OVERRIDE") ? "MEMWALL_AVAILABLE_OVERRIDE" : "MemAvailable");
        }
    }
    /* the disk is part of the budget (--offload-dir): each rank's file fits the folder's room alone,
     * but the ranks of one machine share the folder (one command line), as estimate --world sums */
    const uint64_t *dk = q + DISK * W, *dr = q + ROOM * W;
    for (int f = 0; f < W; f++) {
        int first = 1, n = 0;
        for (int j = 0; j < f && first; j++) first = node[j] != node[f];
        if (!first) continue;
        uint64_t sum = 0, least = UINT64_MAX;
        for (int j = f; j < W; j++)
            if (node[j] == node[f]) {
                sum += dk[j], n++;
                if (dr[j] < least) least = dr[j];
            }
        if (n < 2 || least == UINT64_MAX || sum <= least) continue;
        char b1[32], b2[32];
        die(2, "the %d ranks on one machine (rank %d and %d more) need %s together for their disk tiers' files but "
               "--offload-dir %s can give them %s (its free space, and stale scratch files a run there removes): free "
               "some space, choose another folder, fewer ranks per machine, or offload less",
            n, f, n - 1, mw_fmt_bytes(sum, b1, sizeof b1), offload_dir, mw_fmt_bytes(least, b2, sizeof b2));
    }
    free(q);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A token file's size, vocabulary and its first and last 16384 tokens. */
static uint64_t data_fingerprint(mw_data *d) {
    if (!d) return 0;
    const uint64_t n = mw_data_count(d), k = n < 16384 ? n : 16384;
    const uint32_t v = mw_data_vocab(d);
    uint64_t h = fnv(fnv(0xcbf29ce484222325ull, &n, sizeof n), &v, sizeof v);
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(k ? k : 1));
    if (!buf) die(1, "out of memory");
    for (int end = 0; end < 2 && k; end++) {
        if (mw_data_read(d, end ? n - k : 0, (size_t)k, buf) != MW_OK) die(1, "%s", mw_last_error());
        h = fnv(h, buf, k * 4);
    }
    free(buf);
    return h;
}

/* A checkpoint's contents: its trailer (the file's length and the crc of every record's crc), so
 * two files of the same step and loader state but other weights differ (0: unreadable; the load
 * that follows names why). */
static uint64_t ckpt_fingerprint(const char *path) {
    unsigned char tr[24];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    const int ok = fseeko(f, -(off_t)sizeof tr, SEEK_END) == 0 && fread(tr, 1, sizeof tr, f) == sizeof tr;
    fclose(f);
    return ok ? fnv(0xcbf29ce484222325ull, tr, sizeof tr) : 0;
}

int cmd_train(int argc, char **argv) {
    opts o;
    parse(&o, CMD_TRAIN, "train", argc, argv);
    mw_comm *comm = start_ranks(&o, &argc, &argv);
    const int rank0 = !comm || comm->rank == 0;
    mw_scratch_remove_on_signals(); /* the disk tier's files go with a stopped run too */
    if (!o.data) die(1, "train: --data PREFIX is required (make token files with memwall prepare)");
    if (o.override && !o.resume) die(1, "--override applies to --resume only (it lets flags differ from the checkpoint)");
    if (o.reset_optim && !o.resume) die(1, "--reset-optimizer applies to --resume only (a new run's optimizer state starts from zero)");
    if (o.cfg.save_every > 0 && !o.ckpt_dir) die(1, "--save-every needs --out DIR");
    if (o.stop_at < 0) die(1, "--stop-at must be >= 0");
    if (o.stop_at > 0 && !o.ckpt_dir) die(1, "--stop-at needs --out DIR (the stop saves a checkpoint there to resume from)");
    apply_init_shape(&o);
    /* nothing is created before the plan is accepted; an existing lock is taken now, so that
     * another run cannot write --out while this one reads it */
    int lock = -1; /* rank 0's: it alone writes --out */
    if (rank0 && o.ckpt_dir && mw_dir_lock(o.ckpt_dir, 0, &lock) != MW_OK) die(1, "%s", mw_last_error());
    char ckpt[4096] = "";
    mw_ckpt_info info;
    overrides ov = {0};
    int ckpt_mb = 0; /* the checkpoint's micro-batches per step over all its ranks */
    if (o.resume) {
        find_resume(&o, ckpt, sizeof ckpt, &info);
        ckpt_mb = info.cfg.accum;
        if (ckpt[0] && o.cfg.dp) { /* a checkpoint records the step's micro-batches over all its ranks */
            if (info.cfg.accum % o.cfg.world)
                die(1, "--resume: %s takes %d micro-batches per step, which %d ranks cannot share evenly (run it on a "
                       "number of ranks that divides %d)", ckpt, info.cfg.accum, o.cfg.world, info.cfg.accum);
            info.cfg.accum /= o.cfg.world;
        }
        if (ckpt[0]) adopt_checkpoint(&o, &info, ckpt, &ov);
        else printf("  resume auto: no checkpoint in %s yet, starting from step 0\n", o.ckpt_dir);
    }
    /* a stop the user set is never trained past: at the checkpoint's step there is nothing to do
     * (a rerun of the same command line finds its work done); before it, the two disagree */
    if (ckpt[0] && o.stop_at > 0 && o.stop_at < info.state.step)
        die(1, "--stop-at %d is before %s's step %d: nothing trained (give a later --stop-at, or drop it)", o.stop_at,
            ckpt, info.state.step);
    const int nothing = ckpt[0] && o.stop_at > 0 && o.stop_at == info.state.step;
    finish_config(&o);
    /* a layout's --microbatches is its --accum: a resume adopted the checkpoint's over it, so a
     * different one given is refused (as a different --accum is), not silently replaced */
    if (ckpt[0] && o.layout && opt_given(&o, "microbatches") && !names_key(o.override, "accum")) {
        const int D = o.cfg.dp ? o.cfg.world : 1;
        if ((long long)o.microbatches * D != ckpt_mb) {
            char fix[64];
            if (ckpt_mb % D == 0) snprintf(fix, sizeof fix, "--microbatches %d", ckpt_mb / D);
            else snprintf(fix, sizeof fix, "a number of replicas that divides %d", ckpt_mb);
            die(1, "--resume: %s was trained with %d micro-batches per step, the command line says %lld (--microbatches %d x "
                   "%d replicas): give %s, or add --accum %d --override accum", ckpt, ckpt_mb, (long long)o.microbatches * D,
                o.microbatches, D, fix, o.microbatches);
        }
    }
    /* every refusal comes before the header: the data, its vocabulary and tokenizer, the plan */
    mw_data *train = NULL, *val = NULL;
    int grown = 0;
    char tokline[4600] = "";
    mw_plan_summary plan;
    if (!nothing) {
        train = open_data(o.data, "train", 1), val = open_data(o.data, "val", 0);
        if (val && mw_data_count(val) < (uint64_t)o.cfg.batch * o.cfg.seq + 1)
            die(1, "%s holds %llu tokens, fewer than one batch of %d windows of %d+1 (prepare with a larger "
                   "--val-fraction, or remove it)", mw_data_path(val), (unsigned long long)mw_data_count(val), o.cfg.batch, o.cfg.seq);
        /* a set grown by prepare --append since the checkpoint continues, and says so: the windows
         * from here on are drawn over the whole grown set (not those the smaller set would give) */
        grown = ckpt[0] && info.train_tokens != mw_data_count(train) && mw_data_grown_from(train, info.train_tokens);
        if (ckpt[0] && info.train_tokens != mw_data_count(train) && !grown)
            die(1, "%s was trained on %llu tokens, --data %s holds %llu: not the same data", ckpt,
                (unsigned long long)info.train_tokens, mw_data_path(train), (unsigned long long)mw_data_count(train));
        if (ckpt[0] && info.state.step > o.cfg.steps)
            die(1, "%s is at step %d, beyond --steps %d", ckpt, info.state.step, o.cfg.steps);
        train_tokenizer(&o, train, val, ckpt, &info, tokline, sizeof tokline); /* the data's must be the model's */
        for (int k = 0; k < 2; k++) {
            const mw_data *d = k ? val : train;
            if (!d || mw_data_vocab(d) <= (uint32_t)o.cfg.vocab) continue;
            if (ckpt[0] || o.init)
                die(1, "%s's tokens use a vocabulary of %u, but the model (%s) has %d: not this model's data",
                    mw_data_path(d), mw_data_vocab(d), ckpt[0] ? ckpt : o.init, o.cfg.vocab);
            die(1, "%s's tokens use a vocabulary of %u, but the model has --vocab %d: give --vocab %u (or a preset "
                   "of that vocabulary%s)", mw_data_path(d), mw_data_vocab(d), o.cfg.vocab, mw_data_vocab(d),
                mw_data_vocab(d) == 50257 ? ", e.g. --preset gpt2" : "");
        }
        if (mw_plan(&o.cfg, &plan) != MW_OK) die(1, "%s", mw_last_error());
        if (!plan.fits) mw_model_destroy(create_model(&o)); /* exits 2, saying what does not fit */
    }
    agree(); /* --zero: every rank passed its checks, or the run stops here */
    char agreed[4096] = ""; /* (--tp --pp: each stage's choice, and the joined value of up to 256 blocks) */
    if (!nothing && comm && comm->size > 1) { /* with every rank here: what they decide together */
        voters = comm, die_refuse_hook = refuse_vote; /* a refusal: every rank reaches it alike */
        agree_recompute(&o, comm, &plan, agreed, sizeof agreed);
        machine_memory_check(comm, &plan, o.cfg.offload_dir); /* the ranks of one machine, together */
        agree();
    }
    if (nothing) {
        printf("  resume: %s is at step %d, which is --stop-at %d: nothing to train, nothing saved\n", ckpt,
               info.state.step, o.stop_at);
        if (lock >= 0) close(lock);
        if (comm) mw_mpi_finalize();
        return 0;
    }
    print_config(&o, "train");
    if (ov.n) printf("  resume: --override %s: %s\n", o.override, ov.text);
    if (o.ckpt_dir && o.cfg.save_every > 0)
        printf("  checkpoints: %s every %d step%s and at the end, keeping the newest %d\n", o.ckpt_dir,
               o.cfg.save_every, o.cfg.save_every == 1 ? "" : "s", o.cfg.keep);
    else if (o.ckpt_dir)
        printf("  checkpoints: %s at the end, keeping the newest %d\n", o.ckpt_dir, o.cfg.keep);
    else if (ckpt[0])
        printf("  resume: no --out, so this run saves no checkpoint\n");
    printf("  data: ");
    data_line(train);
    if (val) printf(", "), data_line(val);
    printf("\n");
    if (grown)
        printf("  note: the set grew since %s (prepare --append): it trained on the first %llu tokens, the set now "
               "holds %llu; from step %d the windows are drawn over all of them\n", ckpt,
               (unsigned long long)info.train_tokens, (unsigned long long)mw_data_count(train), info.state.step);
    fputs(tokline, stdout);
    if (agreed[0]) fputs(agreed, stdout);
    print_plan(&plan);
    print_recompute_choice(&o, &plan);
    if (comm) { /* the same run everywhere: configuration and plan, data, checkpoint */
        char key[2048];
        const mw_config *c = &o.cfg;
        snprintf(key, sizeof key, "%d %d %d %d %d %d %d %d %d %d %.17g %.17g %d %d %d %d %d %.17g %.17g %.17g %.17g %.17g "
                 "%.17g %.17g %.17g %.17g %.17g %.17g %.17g %llu %d %d %d %d %d %d %d %llu %d %d %s %s %s tp %d sp %d",
                 c->arch, c->n_layer, c->n_head, c->n_embd, c->vocab, c->ctx, c->n_kv_head, c->ffn, c->tied, c->batch,
                 c->rope_theta, c->norm_eps, c->seq, c->accum, c->steps, c->warmup, c->optim, c->lr, c->min_lr_frac,
                 c->beta1, c->beta2, c->beta3, c->eps, c->eps2, c->weight_decay, c->grad_clip, c->momentum,
                 c->clip_threshold, c->decay_rate, (unsigned long long)c->seed, c->eval_every, c->eval_batches,
                 c->precision, c->zero, c->world, c->save_every, c->keep, (unsigned long long)c->budget, c->offload,
                 o.stop_at, c->pp > 1 ? "stage" : plan.pin, c->tokenizer.name, o.ckpt_dir ? o.ckpt_dir : "", c->tp, c->sp);
        if (c->pp > 1) /* the layout: every rank's stages and split */
            snprintf(key + strlen(key), sizeof key - strlen(key), " pp %d %s", c->pp, o.pp_layers ? o.pp_layers : "");
        same_on_every_rank(comm, fnv(0xcbf29ce484222325ull, key, strlen(key)),
                           "configuration (the flags, or the recomputation --recompute auto chose: pin it with the "
                           "plan's --recompute value)");
        same_on_every_rank(comm, data_fingerprint(train) ^ data_fingerprint(val) * 31, "--data (its token files)");
        same_on_every_rank(comm, ckpt[0] ? fnv(fnv(ckpt_fingerprint(ckpt), &info.state.step, sizeof info.state.step),
                                               &info.state.loader_rng, sizeof info.state.loader_rng)
                                         : 0,
                           "checkpoint to resume (its step, loader state or contents)");
    }
    /* a refusal of the model (a layout's options, the budget) comes alike on every rank: by a vote,
     * said once, every rank exiting with its code */
    if (comm && comm->size > 1) voters = comm, die_refuse_hook = refuse_vote;
    mw_model *m = create_model(&o); /* exits 2 when the plan does not fit --budget */
    agree();
    print_offload(m);
    if (comm && o.cfg.tp > 1 && mw_model_set_tp(m, grid.tp_comm) != MW_OK) die(1, "%s", mw_last_error());
    if (comm && o.cfg.dp && mw_model_set_comm(m, o.cfg.pp > 1 || o.cfg.tp > 1 ? grid.dp_comm : comm) != MW_OK) die(1, "%s", mw_last_error());
    if (o.cfg.pp > 1 && mw_model_set_pipe(m, grid.pp_comm) != MW_OK) die(1, "%s", mw_last_error());
    if (rank0 && o.ckpt_dir) {       /* the plan is accepted: now --out may be created and locked */
        if (mw_mkdirs(o.ckpt_dir) != MW_OK) die(1, "--out: %s", mw_last_error());
        if (access(o.ckpt_dir, W_OK) != 0) die(1, "--out %s is not writable: %s", o.ckpt_dir, strerror(errno));
        if (lock < 0 && mw_dir_lock(o.ckpt_dir, 1, &lock) != MW_OK) die(1, "%s", mw_last_error());
        check_no_newer_run(o.ckpt_dir, ckpt[0] ? info.state.step : 0);
    }
    mw_run_state st;
    mw_run_state_init(&st, &o.cfg);
    if (ckpt[0]) {
        mw_ckpt_info li;
        if ((o.reset_optim ? mw_ckpt_load_params(ckpt, m, &li) : mw_ckpt_load(ckpt, m, &li)) != MW_OK)
            die(1, "%s", mw_last_error());
        if (li.state.step != info.state.step || li.state.loader_rng != info.state.loader_rng)
            die(1, "%s changed while this run started (another process replaced it): run again", ckpt);
        st = li.state;
        printf("  resumed from %s at step %d of %d\n", ckpt, st.step, o.cfg.steps);
        const char *fam = mw_numerics_family(o.cfg.precision);
        if (strcmp(li.numerics, fam) != 0) /* allowed, but not the bits of an unbroken run (issue 36) */
            printf("  note: %s was trained with the %s family's products, this run continues with the %s family's "
                   "(kernel %s): from step %d the bits differ from an uninterrupted run's\n", ckpt,
                   li.numerics, fam, mw_kernel_get_for(o.cfg.precision), st.step);
    } else if (o.init) {
        if (mw_hf_load(o.init + 3, m) != MW_OK) die(1, "%s", mw_last_error());
    } else {
        mw_model_init_gpt2(m, o.cfg.seed);
    }
    train_ctx t = {.o = &o, .m = m, .comm = comm, .tty = rank0 && progress_tty(1), .last_saved = ckpt[0] ? st.step : -1,
                   .train_tokens = mw_data_count(train)};
    t.log_every = o.log_every > 0 ? o.log_every : t.tty ? 1 : (o.cfg.steps + 19) / 20;
    if (rank0 && o.json_log && ckpt[0]) trim_log(o.json_log, st.step);
    if (rank0 && o.json_log && !(t.jlog = fopen(o.json_log, ckpt[0] ? "a" : "w")))
        die(1, "cannot open --json-log %s: %s", o.json_log, strerror(errno));
    if (t.jlog && grown) {
        fprintf(t.jlog, "{\"event\": \"data_grown\", \"step\": %d, \"train_tokens_before\": %llu, \"train_tokens\": %llu}\n",
                st.step, (unsigned long long)info.train_tokens, (unsigned long long)mw_data_count(train));
        fflush(t.jlog);
    }
    if (t.jlog && ov.n) {
        fprintf(t.jlog, "{\"event\": \"override\", \"step\": %d, \"overrides\": {%s}}\n", st.step, ov.json);
        fflush(t.jlog);
    }
    progress_line vp; /* validation can take longer than a step: its progress goes to stderr */
    progress_init(&vp, "validation");
    if (rank0) mw_model_set_progress(m, progress_fn, &vp);
    mw_status ts = mw_train(m, train, val, &st, on_step, &t);
    if (ts != MW_OK && ts != MW_ERR_STOP) die(1, "%s", mw_last_error());
    if (o.ckpt_dir && t.last_saved != st.step && save_checkpoint(&t, &st) != MW_OK)
        die(1, "%s", mw_last_error());
    uint64_t cat[MW_CAT_COUNT], peak, rss = mw_peak_rss();
    mw_model_memory(m, cat, &peak);
    char b1[32], b2[32], b3[32];
    printf("done: %d step%s in %.1f s | arena peak %s (plan %s) | peak RSS %s\n", t.steps_run, t.steps_run == 1 ? "" : "s",
           t.ms_total / 1e3, mw_fmt_bytes(peak, b1, sizeof b1), mw_fmt_bytes(plan.peak, b2, sizeof b2),
           mw_fmt_bytes(rss, b3, sizeof b3));
    double act_q, act_w; /* what the stored activations cost: measured in this process, beside its steps */
    mw_model_act_seconds(m, &act_q, &act_w, 0);
    if (o.cfg.act_compress || o.cfg.act_offload)
        printf("  stored activations: %.2f s quantising and dequantising, %.2f s waiting for swaps (%.1f%% and %.1f%% of "
               "the steps' time)\n", act_q, act_w, t.ms_total > 0 ? 100 * act_q * 1e3 / t.ms_total : 0.0,
               t.ms_total > 0 ? 100 * act_w * 1e3 / t.ms_total : 0.0);
    uint64_t *rk = NULL; /* --zero: every rank's arena peak, plan, peak RSS and bytes sent */
    if (comm) {
        rk = calloc((size_t)comm->size * 6, sizeof *rk);
        if (!rk) die(1, "out of memory");
        double wms, sms; /* --pp: the stage's waits for the others (the bubble and the transfers), in us */
        mw_model_pipe_times(m, &wms, &sms);
        const uint64_t mine[6] = {peak, plan.peak, rss, comm->sent + (grid.pp_comm && grid.pp_comm != comm ? grid.pp_comm->sent : 0) +
                                                          (grid.dp_comm && grid.dp_comm != comm ? grid.dp_comm->sent : 0) +
                                                          (grid.tp_comm && grid.tp_comm != comm ? grid.tp_comm->sent : 0),
                                  (uint64_t)(wms * 1e3), (uint64_t)(sms * 1e3)};
        for (int q = 0; q < 6; q++)
            if (mw_mpi_allgather_u64(comm, mine[q], rk + (size_t)q * comm->size) != MW_OK) die(1, "%s", mw_last_error());
        const double P = (double)mw_config_num_params(&o.cfg), steps = t.steps_run > 0 ? t.steps_run : 1;
        if (o.cfg.tp > 1 && (o.cfg.pp > 1 || o.cfg.world > 1))
            printf("  ranks (--tp %d%s x --pp %d x %d replicas --zero %d, %d of them):", o.cfg.tp, o.cfg.sp ? " --sp" : "",
                   o.cfg.pp > 1 ? o.cfg.pp : 1, o.cfg.world, o.cfg.zero, comm->size);
        else if (o.cfg.tp > 1)
            printf("  ranks (--tp %d%s, %d of them):", o.cfg.tp, o.cfg.sp ? " --sp" : "", comm->size);
        else
            printf("  ranks (--zero %d, %d of them):", o.cfg.zero, comm->size);
        for (int j = 0; j < comm->size; j++)
            printf("%s rank %d arena peak %s (plan %s), peak RSS %s", j ? ";" : "", j,
                   mw_fmt_bytes(rk[j], b1, sizeof b1), mw_fmt_bytes(rk[comm->size + j], b2, sizeof b2),
                   mw_fmt_bytes(rk[2 * comm->size + j], b3, sizeof b3));
        printf("\n  sent per rank per step: %s (%.3f floats per parameter)\n",
               mw_fmt_bytes((uint64_t)(rk[3 * comm->size] / steps), b1, sizeof b1), rk[3 * comm->size] / steps / 4.0 / P);
        if (o.cfg.pp > 1) { /* the measured bubble: each stage's time waiting for the others over its busy time */
            printf("  pipeline: waiting for the other stages (the bubble and the transfers) / busy, per rank:");
            for (int j = 0; j < comm->size; j++) {
                const double w = (double)rk[4 * comm->size + j], b = (double)rk[5 * comm->size + j] - w;
                printf(" %.3f", b > 0 ? w / b : 0.0);
            }
            printf(" ((p - 1) / m = %.3f)\n", (double)(o.cfg.pp - 1) / o.cfg.accum);
        }
    }
    printf("  arena peak per category (the plan it executed):");
    for (int k = 0; k < MW_CAT_COUNT; k++)
        printf(" %s %s%s", mw_category_name(k), mw_fmt_bytes(cat[k], b1, sizeof b1),
               k + 1 < MW_CAT_COUNT ? "," : "\n");
    mw_offload_report dr;
    if (mw_model_offload_info(m, &dr))
    {
        char b4[32];
        printf("  disk tier: %s read, %s written (planned per step: %s read, %s written)\n",
               mw_fmt_bytes(dr.bytes_read, b1, sizeof b1), mw_fmt_bytes(dr.bytes_written, b2, sizeof b2),
               mw_fmt_bytes(plan.disk_read, b3, sizeof b3), mw_fmt_bytes(plan.disk_write, b4, sizeof b4));
    }
    uint32_t pcrc = 0; /* the weights' bits, the same for every layout (collective over a pipeline's stages) */
    const int has_crc = (!o.cfg.dp || o.cfg.zero < 3) && o.cfg.offload != MW_OFFLOAD_ALL && mw_model_params_crc(m, &pcrc) == MW_OK;
    if (t.jlog) {
        fprintf(t.jlog, "{\"event\": \"end\", \"steps\": %d, \"plan_peak_bytes\": %llu, ", st.step,
                (unsigned long long)plan.peak);
        if (has_crc) fprintf(t.jlog, "\"params_crc32c\": \"%08x\", ", pcrc);
        json_categories(t.jlog, m);
        if (rk) {
            fprintf(t.jlog, ", \"zero\": %d, \"world\": %d, \"ranks\": [", o.cfg.zero, comm->size);
            for (int j = 0; j < comm->size; j++) {
                fprintf(t.jlog, "%s{\"rank\": %d, \"arena_peak_bytes\": %llu, \"plan_peak_bytes\": %llu, "
                                "\"peak_rss_bytes\": %llu, \"sent_bytes\": %llu%s", j ? ", " : "", j,
                        (unsigned long long)rk[j], (unsigned long long)rk[comm->size + j],
                        (unsigned long long)rk[2 * comm->size + j], (unsigned long long)rk[3 * comm->size + j],
                        o.cfg.pp > 1 ? "" : "}");
                if (o.cfg.pp > 1) /* the stage's steps' time, and the part spent waiting for the other stages */
                    fprintf(t.jlog, ", \"pipe_wait_ms\": %.3f, \"pipe_step_ms\": %.3f}", rk[4 * comm->size + j] / 1e3,
                            rk[5 * comm->size + j] / 1e3);
            }
            fprintf(t.jlog, "]");
        }
        fprintf(t.jlog, "}\n");
        if (fclose(t.jlog) != 0) die(1, "cannot write --json-log %s: %s", o.json_log, strerror(errno));
    }
    free(rk);
    mw_model_destroy(m);
    mw_data_close(train);
    mw_data_close(val);
    if (lock >= 0) close(lock);
    if (comm) mw_mpi_finalize();
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
    mw_plan_summary plan; /* every refusal before the header */
    if (mw_plan(&o.cfg, &plan) != MW_OK) die(1, "%s", mw_last_error());
    if (!plan.fits) mw_model_destroy(create_model(&o)); /* exits 2, saying what does not fit */
    if (!o.json) print_config(&o, "bench");
    mw_model *m = create_model(&o);
    if (!o.json) print_plan(mw_model_plan(m));
    if (!o.json) print_recompute_choice(&o, mw_model_plan(m));
    if (!o.json) print_offload(m);
    mw_model_init_gpt2(m, o.cfg.seed);
    const mw_config *c = &o.cfg;
    rand_ctx rc = {.rng = o.cfg.seed, .N = c->batch * c->seq, .V = c->vocab};
    int total = o.bench_warmup + c->steps;
    double *ms = calloc((size_t)c->steps, sizeof *ms);
    if (!ms) die(1, "out of memory");
    progress_line pr; /* --json prints nothing until the end: say on stderr how far it is */
    progress_init(&pr, "bench: step (warm-up included)");
    if (o.json) progress_update(&pr, 0, total);
    mw_model_clock kt = {0}; /* the timed steps' clocks, summed */
    mw_model_clock ko = {0}; /* and their norm's and optimizer's passes (where every timed step split them) */
    double opt_ms = 0.0;
    int opt_split = 1;
    for (int s = 0; s < total; s++) {
        mw_step_report r;
        if (mw_train_step(m, s, rand_batch, &rc, &r) != MW_OK) die(1, "%s", mw_last_error());
        if (o.json) progress_update(&pr, s + 1, total);
        const mw_model_clock *k = &r.clock;
        if (s >= o.bench_warmup) {
            ms[s - o.bench_warmup] = r.ms;
            opt_ms += r.opt_ms;
            opt_split &= r.opt_split;
            const mw_model_clock *q = &r.opt_clock;
            ko.compute_ms += q->compute_ms, ko.io_busy_ms += q->io_busy_ms, ko.io_read_ms += q->io_read_ms;
            ko.io_write_ms += q->io_write_ms, ko.io_wait_ms += q->io_wait_ms;
            kt.compute_ms += k->compute_ms, kt.io_busy_ms += k->io_busy_ms, kt.io_read_ms += k->io_read_ms;
            kt.io_write_ms += k->io_write_ms, kt.io_wait_ms += k->io_wait_ms;
        }
        if (s + 1 == o.bench_warmup) { /* the stored activations' costs over the timed steps alone */
            double q, w;
            mw_model_act_seconds(m, &q, &w, 1);
        }
        if (!o.json) {
            printf("step %d%s %.1f ms  %.1f tok/s  loss %.4f | compute %.1f ms, disk busy %.1f (read %.1f, write %.1f), "
                   "waiting %.1f", s, s < o.bench_warmup ? " (warm-up)" : "", r.ms, r.tokens_per_s, r.loss, k->compute_ms,
                   k->io_busy_ms, k->io_read_ms, k->io_write_ms, k->io_wait_ms);
            if (r.opt_split)
                printf(" | of it the norm and optimizer %.1f ms: compute %.1f, disk busy %.1f (read %.1f, write %.1f), "
                       "waiting %.1f", r.opt_ms, r.opt_clock.compute_ms, r.opt_clock.io_busy_ms, r.opt_clock.io_read_ms,
                       r.opt_clock.io_write_ms, r.opt_clock.io_wait_ms);
            printf("\n");
        }
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
               "\"accum\": %d, \"steps\": %d, \"kernel\": \"%s\", \"precision\": \"%s\", ",
               tps, med, ms[0], ms[c->steps - 1], gflops, mw_config_num_params(c), c->threads,
               c->batch, c->seq, c->accum, c->steps, mw_kernel_get_for(c->precision), mw_precision_str(c->precision));
        double aq, aw;
        mw_model_act_seconds(m, &aq, &aw, 0);
        printf("\"act_compress_ms_per_step\": %.3f, \"act_swap_wait_ms_per_step\": %.3f, ", aq * 1e3 / c->steps,
               aw * 1e3 / c->steps);
        const double n = c->steps; /* the timed steps' means (mw_model_clock) */
        printf("\"compute_ms\": %.3f, \"io_busy_ms\": %.3f, \"io_read_ms\": %.3f, \"io_write_ms\": %.3f, "
               "\"io_wait_ms\": %.3f, ", kt.compute_ms / n, kt.io_busy_ms / n, kt.io_read_ms / n, kt.io_write_ms / n,
               kt.io_wait_ms / n);
        if (opt_split)
            printf("\"opt_ms\": %.3f, \"opt_compute_ms\": %.3f, \"opt_io_busy_ms\": %.3f, \"opt_io_read_ms\": %.3f, "
                   "\"opt_io_write_ms\": %.3f, \"opt_io_wait_ms\": %.3f, ", opt_ms / n, ko.compute_ms / n, ko.io_busy_ms / n,
                   ko.io_read_ms / n, ko.io_write_ms / n, ko.io_wait_ms / n);
        json_categories(stdout, m); /* peak_bytes, peak_rss_bytes, the categories, ... */
        printf("}\n");
    } else {
        char b1[32], b2[32];
        printf("median %.1f ms/step (min %.1f, max %.1f over %d step%s) | %.1f tokens/s | %.1f model "
               "GFLOP/s | arena peak %s | peak RSS %s\n",
               med, ms[0], ms[c->steps - 1], c->steps, c->steps == 1 ? "" : "s", tps, gflops, mw_fmt_bytes(peak, b1, sizeof b1),
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
    if (!o.ckpt || !o.out) die(1, "export: --ckpt (checkpoint file or directory) and --out FILE|DIR are required");
    if (strcmp(o.format, "safetensors") != 0) die(1, "export: unknown --format '%s' (available: safetensors)", o.format);
    char path[4096];
    mw_ckpt_info info;
    resolve_ckpt(o.ckpt, path, sizeof path, &info);
    /* the tokenizer beside config.json (docs/hf.md): the checkpoint's, so that --init hf: reads
     * the export back with the same identity */
    const mw_tokenizer_id *rec = &info.cfg.tokenizer;
    const char *tok = NULL;
    char buf[4200], id[128], note[4400];
    mw_tokenizer_id_str(rec, id, sizeof id);
    struct stat st;
    if (strcmp(o.tokenizer, "none") == 0) {
        snprintf(note, sizeof note, "none (--tokenizer none)");
    } else if (strcmp(o.tokenizer, "bytes") == 0 || (strcmp(o.tokenizer, "auto") == 0 && strcmp(rec->name, "bytes") == 0)) {
        if (rec->name[0] && strcmp(rec->name, "bytes") != 0)
            die(1, "export: --tokenizer bytes, but the checkpoint %s records tokenizer %s", path, id);
        snprintf(note, sizeof note, "bytes: no file (Hugging Face has none); a vocabulary of 256 reads back as bytes%s",
                 info.cfg.vocab == 256 ? "" : ", this one of another size needs --tokenizer bytes");
    } else if (strcmp(o.tokenizer, "auto") == 0 && !rec->name[0]) {
        snprintf(note, sizeof note, "none: the checkpoint does not record one (--tokenizer PATH writes it)");
    } else if (strcmp(o.tokenizer, "gpt2") == 0 || (strcmp(o.tokenizer, "auto") == 0 && strcmp(rec->name, "gpt2") == 0)) {
        tok = vocab_dir(&o, buf, sizeof buf);
    } else if (strcmp(o.tokenizer, "auto") == 0) {
        snprintf(buf, sizeof buf, "data/%s", rec->name);
        if ((strcmp(rec->name, "llama2") && strcmp(rec->name, "llama3")) || stat(buf, &st) != 0)
            die(1, "export: the checkpoint %s reads tokenizer %s: pass --tokenizer PATH of its tokenizer.json (or "
                   "--tokenizer none to export the weights alone)",
                path, id);
        tok = buf;
    } else {
        tok = o.tokenizer;
    }
    if (tok) snprintf(note, sizeof note, "%s from %s", rec->name[0] ? id : "the one", tok);
    if (mw_hf_export_ckpt_tokenizer(path, o.out, tok) != MW_OK) die(1, "%s", mw_last_error());
    printf("export: %s -> %s (Hugging Face %s safetensors, F32, and config.json beside it)\n", path, o.out,
           info.cfg.arch == MW_ARCH_LLAMA      ? "Llama (LlamaForCausalLM)"
           : info.cfg.arch != MW_ARCH_DEEPSEEK ? "GPT-2"
           : info.cfg.kv_lora_rank             ? (info.cfg.n_experts && info.cfg.moe_gate == 1 ? "DeepSeek-V3 (DeepseekV3ForCausalLM)"
                                                                                               : "DeepSeek-V2 (DeepseekV2ForCausalLM)")
                                               : "Mixtral (MixtralForCausalLM)");
    printf("  tokenizer: %s\n", note);
    return 0;
}

