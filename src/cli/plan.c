/* memwall estimate and memwall plan: the memory plan of a training step, before it runs. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/arena.h"
#include "../cluster/gpu.h"
#include "../cluster/print.h"
#include "../core/fsutil.h"
#include "../memory/offload.h"
#include "cli.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void plan_or_die(const mw_config *c, mw_plan_summary *p) {
    if (mw_plan(c, p) != MW_OK) die(1, "%s", mw_last_error());
}

/* The largest micro-batch whose plan fits the budget (0: not even 1; -1: no budget); *one_peak
 * (may be NULL) gets the plan's peak at B=1. */
static int max_batch(const mw_config *cfg, uint64_t *one_peak) {
    if (!cfg->budget) return -1;
    mw_config c = *cfg;
    mw_plan_summary p;
    c.batch = 1;
    plan_or_die(&c, &p);
    if (one_peak) *one_peak = p.peak;
    if (!p.fits) return 0;
    int lo = 1, hi = 2;
    for (;; hi *= 2) { /* grow until it does not fit */
        c.batch = hi;
        if ((double)hi * c.seq > (1 << 24)) break;
        plan_or_die(&c, &p);
        if (!p.fits) break;
        lo = hi;
    }
    while (hi - lo > 1) {
        c.batch = lo + (hi - lo) / 2;
        if ((double)c.batch * c.seq > (1 << 24)) {
            hi = c.batch;
            continue;
        }
        plan_or_die(&c, &p);
        if (p.fits) lo = c.batch;
        else hi = c.batch;
    }
    return lo;
}

/* The plan of cfg under each recomputation policy (auto only with a budget). */
static const char *POLICIES[] = {"none", "selective", "full", "every:sqrt", "auto"};
#define NPOLICIES 5
static int policy_plans(const mw_config *cfg, const mw_plan_summary *plan, mw_plan_summary out[NPOLICIES]) {
    int n = 0;
    for (int i = 0; i < NPOLICIES; i++) {
        mw_config c = *cfg;
        if (strcmp(POLICIES[i], "auto") == 0 && (!c.budget || c.n_layer > MW_MAX_BLOCK_POLICIES)) break;
        if (mw_recompute_parse(&c, POLICIES[i]) != MW_OK) die(1, "%s", mw_last_error());
        if (c.recompute == cfg->recompute && c.recompute_every == cfg->recompute_every &&
            c.recompute != MW_RECOMPUTE_BLOCKS)
            out[n++] = *plan; /* cfg's own policy: its plan is made already */
        else
            plan_or_die(&c, &out[n++]);
    }
    return n;
}

/* A train command line planned as it stands: --init gives the shape, --data must fit the model's
 * vocabulary as train requires; the rest of train's options do not change memory. */
static void train_line(opts *o) {
    apply_init_shape(o);
    finish_config(o);
    for (int k = 0; o->data && k < 2; k++) {
        mw_data *d;
        if (mw_data_open_set(&d, o->data, k ? "val" : "train") != MW_OK) die(1, "%s", mw_last_error());
        if (!d && k) break; /* the validation split is optional, as in train */
        if (!d) die(1, "--data %s: no token set there (neither %s.manifest.json nor %s.train.bin exists)", o->data, o->data, o->data);
        uint32_t v = mw_data_vocab(d);
        char path[4300];
        snprintf(path, sizeof path, "%s", mw_data_path(d));
        mw_data_close(d);
        if (v > (uint32_t)o->cfg.vocab)
            die(1, "%s uses a vocabulary of %u but the model has --vocab %d (train would refuse it)", path, v,
                o->cfg.vocab);
    }
}

/* The largest preset of cfg's family whose plan, at cfg's batch, sequence and recomputation,
 * fits cfg's budget with the states placed as offload says (and, when cfg names an offload
 * folder, whose disk tier fits the folder's free space): its name into name ("" when none does),
 * its parameter count returned (0: none). */
static size_t largest_fit(const mw_config *cfg, int offload, char *name, size_t n) {
    static const char *const PRESETS[] = {"gpt2-tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-175b",
                                          "llama-tiny", "smollm-135m", "smollm-360m", "tinyllama-1.1b",
                                          "smollm-1.7b", "llama2-7b", "llama3-8b", "llama2-70b", "llama3-70b",
                                          "mla-tiny", "moe-tiny", "deepseek-v2-lite", "mixtral-8x7b", "deepseek-v3"};
    size_t best = 0;
    name[0] = 0;
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++) {
        mw_config k = *cfg;
        if (mw_config_preset(&k, PRESETS[i]) != MW_OK || k.arch != cfg->arch) continue;
        if (k.n_experts) k.capacity_factor = cfg->capacity_factor; /* the run's cap, not a shape */
        if (k.ctx < k.seq) k.ctx = k.seq;
        if (k.recompute == MW_RECOMPUTE_BLOCKS) k.recompute = MW_RECOMPUTE_NONE; /* one letter per block of cfg */
        if (k.recompute == MW_RECOMPUTE_EVERY && k.recompute_every > k.n_layer) k.recompute_every = k.n_layer;
        k.offload = offload;
        memset(k.offload_spec, 0, sizeof k.offload_spec); /* a plain mode: another preset's blocks */
        const size_t np = mw_config_num_params(&k);
        mw_plan_summary s;
        /* with a folder given, fits says the disk tier fits it too */
        if (np <= best || mw_plan(&k, &s) != MW_OK || !s.fits) continue;
        best = np;
        snprintf(name, n, "%s", PRESETS[i]);
    }
    return best;
}

/* Each optimizer's plan of cfg (its hyperparameters at the optimizer's defaults, as --optim alone
 * gives them): model-state bytes (parameters, gradients, optimizer state: peak live bytes of the
 * three categories, staging and scratch included) and the largest preset that fits the budget. A
 * plan that cannot be made (--offload optimizer under an optimizer without per-parameter state)
 * has states 0. */
typedef struct optim_row {
    uint64_t states, optim;
    char fit[32];
    size_t fit_params;
} optim_row;
/* The textbook model-state bytes per parameter (fp32 weights and gradients, 4 + 4, and the
 * optimizer's state): AdamW 8 (ZeRO's count: 16 in all); 8-bit AdamW 2 (Dettmers et al.); 4-bit
 * Adam 1 (Li et al.); Adafactor about 0 without momentum (Shazeer and Stern: O(n+m)); CAME 4 (its
 * first moment); SGD with momentum 4. Mixed precision's count is the same: 2 + 2 of bf16 weights
 * and gradients, 4 of fp32 master weights, and the state. */
static const double TEXTBOOK_BPP[MW_OPTIM_COUNT] = {16, 10, 9, 8, 12, 12};

static void optim_rows(const mw_config *c, const mw_plan_summary *own, optim_row rows[MW_OPTIM_COUNT]) {
    for (int i = 0; i < MW_OPTIM_COUNT; i++) {
        mw_config k = *c;
        k.optim = i;
        if (i != c->optim) mw_optim_defaults(&k);
        memset(&rows[i], 0, sizeof rows[i]);
        mw_plan_summary s;
        if (i == c->optim) s = *own; /* c's own optimizer: its plan is made already */
        else if (mw_plan(&k, &s) != MW_OK) continue;
        rows[i].states = s.category[MW_CAT_PARAMS] + s.category[MW_CAT_GRADS] + s.category[MW_CAT_OPTIM];
        rows[i].optim = s.category[MW_CAT_OPTIM];
        if (c->budget) rows[i].fit_params = largest_fit(&k, k.offload, rows[i].fit, sizeof rows[i].fit);
    }
}

/* --zero: every rank's plan (ranks whose shards are as long plan alike, so each length is planned
 * once), the largest rank's model states, and ZeRO's per-rank formula for this run's bytes per
 * parameter (P weights, G gradients, K optimizer state) and for the paper's mixed precision. */
typedef struct zero_est {
    uint64_t peak_min, peak_max, states_max, params, grads, optim; /* the largest rank's categories */
    uint64_t disk_all; /* every rank's disk tier file together (ranks on one machine share its disk) */
    int disk_short;    /* 1 when --offload-dir's room cannot hold them all */
    int rank_max;
    double formula, paper, P, G, K;
} zero_est;

static double zero_formula(int stage, double n, double P, double G, double K, double psi) {
    switch (stage) {
    case 0: return (P + G + K) * psi;
    case 1: return (P + G) * psi + K * psi / n;
    case 2: return P * psi + (G + K) * psi / n;
    default: return (P + G + K) * psi / n;
    }
}

static const char *const ZERO_FORMULA[4] = {"(P+G+K)x", "(P+G)x + Kx/N", "Px + (G+K)x/N", "(P+G+K)x/N"};

/* Floats each rank sends per step and parameter: each micro-step's gradients to their owners,
 * (N-1)/N of them, then (N-1)/N of the gradients (stage 0) or parameters (stages 1, 2) gathered;
 * stage 3 gathers each block before its forward and before its backward (less what a slot still
 * holds: an upper bound) and the resident parameters after the update. */
static double zero_sent(int stage, int n, int accum) {
    const double f = (double)(n - 1) / n;
    return stage == 3 ? accum * 3 * f + f : accum * f + f;
}

static void zero_estimate(const mw_config *c, zero_est *z) {
    memset(z, 0, sizeof *z);
    mw_plan_summary s;
    plan_or_die(c, &s); /* rank 0's, which gives the flat buffer's length */
    uint64_t lens[4], files[4];
    int nl = 0;
    for (int r = 0; r < c->world; r++) {
        uint64_t lo, hi;
        mw_zero_shard(s.flat_floats, c->world, r, &lo, &hi);
        int j = 0;
        while (j < nl && lens[j] != hi - lo) j++;
        if (j < nl) {
            z->disk_all += files[j];
            continue;
        }
        if (nl == 4) die(1, "internal: more than 4 shard lengths among %d ranks", c->world);
        lens[nl++] = hi - lo;
        mw_config k = *c;
        k.rank = r;
        mw_plan_summary q;
        plan_or_die(&k, &q);
        files[nl - 1] = q.disk_file;
        z->disk_all += q.disk_file;
        if (!r || q.peak < z->peak_min) z->peak_min = q.peak;
        if (!r || q.peak > z->peak_max) {
            z->peak_max = q.peak, z->rank_max = r;
            z->params = q.category[MW_CAT_PARAMS], z->grads = q.category[MW_CAT_GRADS], z->optim = q.category[MW_CAT_OPTIM];
            z->states_max = z->params + z->grads + z->optim;
        }
    }
    /* the ranks of estimate --world N are on this machine (as for their threads): their files
     * share --offload-dir's room */
    z->disk_short = s.disk_room && z->disk_all > s.disk_room;
    const double psi = (double)mw_config_num_params(c);
    z->P = 4, z->G = 4, z->K = TEXTBOOK_BPP[c->optim] - 8;
    z->formula = zero_formula(c->zero, c->world, z->P, z->G, z->K, psi);
    z->paper = zero_formula(c->zero, c->world, 2, 2, 12, psi);
}

/* --zero over world ranks with --recompute auto: the choice every rank runs (train agrees on it
 * through MPI the same way, src/cli/train.c agree_recompute): every rank's own choice is a
 * candidate, the largest rank's plan's first, and the first that fits every rank's budget is
 * pinned in *c. Returns the rank whose choice it is, or -1 when none fits every rank (c unchanged:
 * the estimate then shows the largest rank's plan not fitting). */
static int agree_auto(mw_config *c) {
    if (!c->dp || c->world <= 1 || c->recompute != MW_RECOMPUTE_AUTO) return -1;
    mw_plan_summary s;
    plan_or_die(c, &s); /* the flat buffer's length */
    int nr = 0, rank[4];
    char pin[4][sizeof s.pin];
    uint64_t peak[4];
    for (int r = 0; r < c->world; r++) { /* one rank per distinct shard length (at most 4) */
        uint64_t lo, hi, len = 0;
        mw_zero_shard(s.flat_floats, c->world, r, &lo, &hi);
        int dup = 0;
        for (int j = 0; j < nr && !dup; j++) {
            uint64_t a, b;
            mw_zero_shard(s.flat_floats, c->world, rank[j], &a, &b);
            len = hi - lo, dup = b - a == len;
        }
        if (dup) continue;
        if (nr == 4) die(1, "internal: more than 4 shard lengths among %d ranks", c->world);
        mw_config k = *c;
        k.rank = r;
        mw_plan_summary q;
        plan_or_die(&k, &q);
        rank[nr] = r, peak[nr] = q.peak;
        memcpy(pin[nr], q.pin, sizeof q.pin);
        nr++;
    }
    int order[4] = {0, 1, 2, 3};
    for (int a = 1; a < nr; a++)
        for (int b = a; b > 0 && peak[order[b]] > peak[order[b - 1]]; b--) {
            const int x = order[b];
            order[b] = order[b - 1], order[b - 1] = x;
        }
    for (int k = 0; k < nr; k++) {
        mw_config t = *c;
        if (!pin[order[k]][0] || mw_recompute_parse(&t, pin[order[k]]) != MW_OK) continue;
        int all = 1;
        for (int j = 0; j < nr && all; j++) {
            mw_config u = t;
            mw_plan_summary q;
            u.rank = rank[j];
            plan_or_die(&u, &q);
            all = q.fits;
        }
        if (all) {
            *c = t;
            return rank[order[k]];
        }
    }
    return -1;
}

/* "fits (12 MiB to spare)" or "DOES NOT FIT (3 MiB over)" */
static const char *fit_text(uint64_t peak, uint64_t budget, char *buf, size_t n) {
    char b[32];
    if (peak <= budget) snprintf(buf, n, "fits (%s to spare)", mw_fmt_bytes(budget - peak, b, sizeof b));
    else snprintf(buf, n, "DOES NOT FIT (%s over)", mw_fmt_bytes(peak - budget, b, sizeof b));
    return buf;
}

/* --gpu / --device-mem: the device's fixed costs (src/cluster/gpu.c), or 0 when neither is given.
 * One NCCL communicator (the data-parallel group) when --zero plans several ranks, none otherwise;
 * 16 channels of 2 peers (a ring) is stated, not measured: NCCL chooses its channels at run time. */
static uint64_t device_costs(const opts *o, const mw_gpu **gpu, mw_gpu_fixed *fx) {
    *gpu = NULL;
    if (o->gpu && !(*gpu = mw_gpu_find(o->gpu))) die(1, "--gpu: %s", mw_last_error());
    uint64_t dev = o->device_mem ? o->device_mem
                 : *gpu          ? ((*gpu)->mem_smi_bytes ? (*gpu)->mem_smi_bytes : (*gpu)->mem_stated_bytes)
                                 : 0;
    if (!dev) return 0;
    const mw_gpu_fixed_opts fo = {.nccl_channels = 16, .nccl_peers = 2,
                                  .nccl_comms = o->cfg.dp && o->cfg.world > 1 ? 1 : 0, .frag_fraction = -1};
    if (mw_gpu_fixed_costs(dev, &fo, fx) != MW_OK) die(1, "%s", mw_last_error());
    return dev;
}

int cmd_estimate(int argc, char **argv) {
    opts o;
    parse(&o, CMD_ESTIMATE, "estimate", argc, argv);
    if (o.published) { /* the published figures' table: no model, no plan */
        for (int i = 0; i < o.n_given; i++)
            if (strcmp(o.given[i], "published"))
                die(1, "--published prints the published figures alone: drop --%s", o.given[i]);
        if (mw_print_published(stdout) != MW_OK) die(1, "%s", mw_last_error());
        return 0;
    }
    if (o.layout) { /* a parallel layout: every distinct rank's plan (layout.c) */
        train_line(&o);
        return layout_report(&o, 0);
    }
    if (o.search) { /* every layout of --world GPUs (search.c) */
        train_line(&o);
        return search_report(&o);
    }
    const mw_gpu *gpu;
    mw_gpu_fixed fx;
    const uint64_t dev = device_costs(&o, &gpu, &fx);
    const int agreed = agree_auto(&o.cfg); /* --zero: the one recomputation every rank runs */
    train_line(&o);
    const mw_config *c = &o.cfg;
    double t0 = now_s();
    mw_plan_summary p;
    plan_or_die(c, &p);
    double plan_s = now_s() - t0;
    if (p.disk_file && c->offload_dir[0] && p.pred_step_s < 0) { /* the disk and the ops, measured */
        mw_plan_summary q;
        if (mw_plan_predict(c, &q) == MW_OK && q.disk_read == p.disk_read && q.disk_write == p.disk_write) {
            p.pred_disk_s = q.pred_disk_s, p.disk_read_bw = q.disk_read_bw, p.disk_write_bw = q.disk_write_bw;
            p.pred_compute_s = q.pred_compute_s, p.pred_step_s = q.pred_step_s;
        }
    }
    uint64_t one_peak = 0;
    int mb = max_batch(c, &one_peak);
    double P = (double)mw_config_num_params(c);
    /* textbook figures: 16 bytes/param of fp32 AdamW model states; Korthikanti et al. (2023),
     * activations per layer without recomputation: s*b*h*(34 + 5*a*s/h) bytes in 16-bit */
    double B = c->batch, T = c->seq, C = c->n_embd, H = c->n_head, L = c->n_layer;
    double korth16 = L * B * T * C * (34.0 + 5.0 * H * T / C), korth32 = 2 * korth16;
    /* Korthikanti's per-layer figures: selective drops the 5as/h attention term, full keeps the
     * 2sbh-byte input */
    double korth_sel = L * B * T * C * 34.0, korth_full = L * B * T * C * 2.0;
    /* the formula counts GPT blocks (LayerNorm, a 4h GELU MLP, dropout masks): not Llama's */
    const int korth = c->arch == MW_ARCH_GPT2;
    mw_plan_summary pp[NPOLICIES];
    int npp = policy_plans(c, &p, pp);
    static const int FIT_MODES[4] = {MW_OFFLOAD_NONE, MW_OFFLOAD_OPTIMIZER, MW_OFFLOAD_OPTIMIZER_GRADS, MW_OFFLOAD_ALL};
    char fitp[4][32] = {"", "", "", ""};
    size_t np_fit[4] = {0, 0, 0, 0};
    for (int f = 0; c->budget && f < 4; f++) np_fit[f] = largest_fit(c, FIT_MODES[f], fitp[f], sizeof fitp[f]);
    optim_row orow[MW_OPTIM_COUNT];
    optim_rows(c, &p, orow);
    zero_est zs;
    if (c->dp) zero_estimate(c, &zs);
    if (c->dp && zs.disk_short) p.fits = 0; /* the ranks' files together exceed the folder's room */
    if (o.json) {
        printf("{\"peak_bytes\": %llu, \"live_peak_bytes\": %llu, \"tiers\": {\"device\": %llu, \"disk\": %llu}, "
               "\"offload\": \"%s\", \"disk\": {\"categories\": {",
               (unsigned long long)p.peak, (unsigned long long)p.live_peak, (unsigned long long)p.peak,
               (unsigned long long)p.disk_file, mw_offload_name(p.offload));
        for (int k = 0; k < MW_CAT_COUNT; k++)
            printf("%s\"%s\": %llu", k ? ", " : "", mw_category_name(k), (unsigned long long)p.disk[k]);
        printf("}, \"file_bytes\": %llu, \"read_bytes_per_step\": %llu, \"write_bytes_per_step\": %llu, "
               "\"staging_bytes\": %llu, \"room_bytes\": ",
               (unsigned long long)p.disk_file, (unsigned long long)p.disk_read, (unsigned long long)p.disk_write,
               (unsigned long long)p.disk_staging);
        if (p.disk_room) printf("%llu", (unsigned long long)p.disk_room);
        else printf("null");
        printf(", \"fits_in_room\": %s, \"predicted_seconds\": ", p.disk_short ? "false" : "true");
        json_num(stdout, "%.6f", p.pred_disk_s >= 0 ? p.pred_disk_s : NAN);
        printf(", \"predicted_compute_seconds\": ");
        json_num(stdout, "%.6f", p.pred_compute_s >= 0 && p.disk_file ? p.pred_compute_s : NAN);
        printf(", \"predicted_step_seconds\": ");
        json_num(stdout, "%.6f", p.pred_step_s >= 0 ? p.pred_step_s : NAN);
        printf(", \"read_bytes_per_s\": %.0f, \"write_bytes_per_s\": %.0f}, \"offload_why\": \"%s\", ", p.disk_read_bw,
               p.disk_write_bw, p.offload_why);
        if (strcmp(p.offload_pin, mw_offload_name(p.offload))) /* a chunk placement: the --offload form that pins it */
            printf("\"offload_pin\": \"%s\", ", p.offload_pin);
        printf("\"predicted_recompute_seconds\": ");
        json_num(stdout, "%.6f", p.pred_recompute_s >= 0 ? p.pred_recompute_s : NAN);
        printf(", \"act\": ");
        json_act_plan(stdout, &p);
        printf(", \"categories\": {");
        for (int k = 0; k < MW_CAT_COUNT; k++)
            printf("%s\"%s\": %llu", k ? ", " : "", mw_category_name(k), (unsigned long long)p.category[k]);
        printf("}, \"fits\": %s, \"budget_bytes\": %llu, \"max_batch\": ", p.fits ? "true" : "false",
               (unsigned long long)c->budget);
        if (mb < 0) printf("null");
        else printf("%d", mb);
        if (c->budget) {
            printf(", \"largest_fit\": {");
            for (int f = 0; f < 4; f++)
                printf("%s\"%s\": {\"preset\": \"%s\", \"params\": %zu}", f ? ", " : "", mw_offload_name(FIT_MODES[f]), fitp[f],
                       np_fit[f]);
            printf("}");
        } else {
            printf(", \"largest_fit\": null");
        }
        printf(", \"precision\": \"%s\"", mw_precision_str(c->precision));
        printf(", \"device\": ");
        if (dev) mw_print_fixed_costs_json(stdout, gpu, dev, &fx, c->dp ? zs.peak_max : p.peak);
        else printf("null");
        if (c->dp)
            printf(", \"zero\": {\"stage\": %d, \"world\": %d, \"rank_peak_bytes_min\": %llu, \"rank_peak_bytes_max\": %llu, "
                   "\"largest_rank\": %d, \"model_state_bytes\": %llu, \"categories\": {\"parameters\": %llu, "
                   "\"gradients\": %llu, \"optimizer\": %llu}, \"formula_bytes\": %.0f, \"formula\": \"%s\", "
                   "\"paper_mixed_precision_bytes\": %.0f, \"floats_sent_per_param_per_step\": %.6f, "
                   "\"disk_file_bytes_all_ranks\": %llu, \"disk_fits\": %s}",
                   c->zero, c->world, (unsigned long long)zs.peak_min, (unsigned long long)zs.peak_max, zs.rank_max,
                   (unsigned long long)zs.states_max, (unsigned long long)zs.params, (unsigned long long)zs.grads,
                   (unsigned long long)zs.optim, zs.formula, ZERO_FORMULA[c->zero], zs.paper,
                   zero_sent(c->zero, c->world, c->accum), (unsigned long long)zs.disk_all,
                   zs.disk_short ? "false" : "true");
        else
            printf(", \"zero\": null");
        printf(", \"optim\": \"%s\", \"model_state_bytes_per_param\": %.6f, \"disk_bytes_per_param\": %.6f, \"optimizers\": {",
               mw_optim_str(c->optim), (double)(p.category[MW_CAT_PARAMS] + p.category[MW_CAT_GRADS] + p.category[MW_CAT_OPTIM]) / P,
               (double)p.disk_file / P);
        for (int i = 0; i < MW_OPTIM_COUNT; i++) {
            printf("%s\"%s\": {\"model_state_bytes\": %llu, \"optimizer_bytes\": %llu, \"bytes_per_param\": ", i ? ", " : "",
                   mw_optim_str(i), (unsigned long long)orow[i].states, (unsigned long long)orow[i].optim);
            json_num(stdout, "%.6f", orow[i].states ? (double)orow[i].states / P : NAN);
            printf(", \"textbook_bytes_per_param\": %.0f, \"largest_fit\": ", TEXTBOOK_BPP[i]);
            if (c->budget) printf("{\"preset\": \"%s\", \"params\": %zu}}", orow[i].fit, orow[i].fit_params);
            else printf("null}");
        }
        printf("}");
        printf(", \"arch\": \"%s\", \"params\": %.0f, \"active_params\": %zu, \"active_params_no_embed\": %zu, "
               "\"textbook\": {\"model_states_16B_per_param\": %.0f, "
               "\"korthikanti_activations_16bit\": ", mw_arch_name(c->arch), P, mw_config_active_params(c, 1),
               mw_config_active_params(c, 0), 16 * P);
        json_num(stdout, "%.0f", korth ? korth16 : NAN);
        printf(", \"korthikanti_activations_fp32\": ");
        json_num(stdout, "%.0f", korth ? korth32 : NAN);
        printf("}, \"plan_seconds\": %.6f, \"recompute\": \"%s\", \"recompute_pin\": \"%s\", "
               "\"recompute_by_offload_auto\": %s, \"policies\": {",
               plan_s, p.policy, p.pin, o.recompute_implied ? "true" : "false");
        for (int i = 0; i < npp; i++)
            printf("%s\"%s\": {\"activations\": %llu, \"peak_bytes\": %llu, \"fits\": %s, \"plan\": \"%s\"}",
                   i ? ", " : "", POLICIES[i], (unsigned long long)pp[i].category[MW_CAT_ACTS],
                   (unsigned long long)pp[i].peak, pp[i].fits ? "true" : "false", pp[i].policy);
        if (korth)
            printf("}, \"korthikanti_16bit_by_policy\": {\"none\": %.0f, \"selective\": %.0f, \"full\": %.0f}}\n",
                   korth16, korth_sel, korth_full);
        else
            printf("}, \"korthikanti_16bit_by_policy\": null}\n");
        return p.fits ? 0 : 2;
    }
    print_config(&o, "estimate");
    char b1[32], b2[32];
    printf("\n  %-12s %16s %12s\n", "category", "bytes", "");
    for (int k = 0; k < MW_CAT_COUNT; k++)
        printf("  %-12s %16llu %12s\n", mw_category_name(k), (unsigned long long)p.category[k],
               mw_fmt_bytes(p.category[k], b1, sizeof b1));
    printf("  %-12s %16llu %12s  (the arena: buffers never alive together share memory)\n", "peak",
           (unsigned long long)p.peak, mw_fmt_bytes(p.peak, b1, sizeof b1));
    printf("  %-12s %16llu %12s  (most bytes alive at one op)\n", "live peak", (unsigned long long)p.live_peak,
           mw_fmt_bytes(p.live_peak, b2, sizeof b2));
    if (c->arch == MW_ARCH_DEEPSEEK && c->n_experts)
        printf("\n  active parameters per token: %.2fB of %.2fB (%d of %d routed experts per mixture block, the\n"
               "  shared ones, attention, norms, the head and the embedding's table; without the table, of which a\n"
               "  token reads one row: %.2fB)\n",
               mw_config_active_params(c, 1) / 1e9, P / 1e9, c->n_experts_tok, c->n_experts,
               mw_config_active_params(c, 0) / 1e9);
    if (p.disk_file) {
        if (p.offload == MW_OFFLOAD_NONE) /* the swapped activations' alone */
            printf("\n  disk tier (--act-%s):\n", p.act_pin[0] ? "layers, per block" : p.act_offload == MW_ACT_OFFLOAD_ALL ?
                   "offload all" : "offload checkpoints");
        else
            printf("\n  disk tier (--offload %s%s):\n", p.offload_pin,
                   c->offload == MW_OFFLOAD_AUTO ? ", auto's choice" : "");
        for (int k = 0; k < MW_CAT_COUNT; k++)
            if (p.disk[k])
                printf("  %-12s %16llu %12s  on disk\n", mw_category_name(k), (unsigned long long)p.disk[k],
                       mw_fmt_bytes(p.disk[k], b1, sizeof b1));
        if (p.act_disk)
            printf("  %-12s %16llu %12s  on disk (--act-%s %s)\n", "activations", (unsigned long long)p.act_disk,
                   mw_fmt_bytes(p.act_disk, b1, sizeof b1), p.act_pin[0] ? "layers" : "offload",
                   p.act_pin[0] ? "per block" : mw_act_offload_name(p.act_offload));
        printf("  %-12s %16llu %12s  (preallocated in --offload-dir before step 1; streamed through %s of\n"
               "  %-12s %16s %12s   staging in memory, counted above)\n", "file", (unsigned long long)p.disk_file,
               mw_fmt_bytes(p.disk_file, b1, sizeof b1), mw_fmt_bytes(p.disk_staging, b2, sizeof b2), "", "", "");
        printf("  %-12s %16.3f %12s  bytes on disk per parameter\n", "", (double)p.disk_file / P, "");
        if (p.disk_room) {
            char fit[96];
            printf("  %-12s %16llu %12s  --offload-dir can give it (free space, and stale scratch files a run removes):\n"
                   "  %-12s %16s %12s  %s\n", "room", (unsigned long long)p.disk_room,
                   mw_fmt_bytes(p.disk_room, b1, sizeof b1), "", "", "", fit_text(p.disk_file, p.disk_room, fit, sizeof fit));
        }
        printf("  %-12s %16llu %12s  read per optimizer step\n", "per step", (unsigned long long)p.disk_read,
               mw_fmt_bytes(p.disk_read, b1, sizeof b1));
        printf("  %-12s %16llu %12s  written per optimizer step\n", "", (unsigned long long)p.disk_write,
               mw_fmt_bytes(p.disk_write, b1, sizeof b1));
        if (p.pred_disk_s >= 0)
            printf("  predicted    %.2f s per step for the transfers (measured in %s: %.2f GB/s read, %.2f GB/s write)\n",
                   p.pred_disk_s, c->offload_dir, p.disk_read_bw / 1e9, p.disk_write_bw / 1e9);
        if (p.pred_step_s >= 0)
            printf("  predicted    %.2f s per step, its phases overlapped: max(compute %.2f s, the micro-batches'\n"
                   "  %-12s transfers) + the norm's and the optimizer's passes (%.2f s if nothing overlapped)\n",
                   p.pred_step_s, p.pred_compute_s, "", p.pred_compute_s + p.pred_disk_s);
        if (p.pred_disk_s < 0)
            printf("  (give --offload-dir DIR to measure the disk there and predict the transfers' time)\n");
    }
    print_act_plan(&p, 1);
    if (p.offload_why[0]) printf("\n  --offload auto: %s -> %s\n", p.offload_why, p.offload_pin);
    print_recompute_choice(&o, &p);
    if (c->dp) {
        char b3[32], b4[32], b5[32];
        printf("\n  data parallelism, --zero %d over %d rank%s (the table above is rank 0's plan):\n", c->zero, c->world,
               c->world == 1 ? "" : "s");
        printf("    peak per rank        %s to %s (the largest: rank %d)\n", mw_fmt_bytes(zs.peak_min, b1, sizeof b1),
               mw_fmt_bytes(zs.peak_max, b2, sizeof b2), zs.rank_max);
        printf("    model states         %s on rank %d (parameters %s, gradients %s, optimizer %s)\n",
               mw_fmt_bytes(zs.states_max, b1, sizeof b1), zs.rank_max, mw_fmt_bytes(zs.params, b2, sizeof b2),
               mw_fmt_bytes(zs.grads, b3, sizeof b3), mw_fmt_bytes(zs.optim, b4, sizeof b4));
        if (zs.disk_all && p.disk_room) {
            char fit[96];
            printf("    disk tier            %s in the %d ranks' files on this machine's --offload-dir (room %s): %s\n",
                   mw_fmt_bytes(zs.disk_all, b1, sizeof b1), c->world, mw_fmt_bytes(p.disk_room, b2, sizeof b2),
                   fit_text(zs.disk_all, p.disk_room, fit, sizeof fit));
        }
        printf("    ZeRO's formula       %s = %s with P=%.0f G=%.0f K=%.0f bytes per parameter (this run's)\n",
               mw_fmt_bytes((uint64_t)zs.formula, b1, sizeof b1), ZERO_FORMULA[c->zero], zs.P, zs.G, zs.K);
        printf("    the paper's figure   %s (mixed precision: P=2 G=2 K=12)\n", mw_fmt_bytes((uint64_t)zs.paper, b5, sizeof b5));
        printf("    sent per rank        %.3f floats per parameter per step (%s)\n", zero_sent(c->zero, c->world, c->accum),
               c->zero == 0   ? "the gradients' all-to-all and all-gather"
               : c->zero == 3 ? "at most: the gradients' all-to-all, each block gathered for its forward and its backward"
                              : "the gradients' all-to-all, the parameters' all-gather");
        if (c->accum > 1)
            printf("    (--accum %d: the sum of the earlier micro-batches over the shard adds %s of gradients)\n", c->accum,
                   mw_fmt_bytes((uint64_t)(4.0 * (double)mw_config_num_params(c) / c->world), b1, sizeof b1));
    }
    if (c->budget) {
        char fit[96];
        if (p.disk_short)
            printf("\n  budget %s: DOES NOT FIT: memory %s, the disk tier not (above); ", mw_fmt_bytes(c->budget, b1, sizeof b1),
                   fit_text(p.peak, c->budget, fit, sizeof fit));
        else
            printf("\n  budget %s: %s; ", mw_fmt_bytes(c->budget, b1, sizeof b1), fit_text(p.peak, c->budget, fit, sizeof fit));
        if (mb > 0) printf("the largest micro-batch that fits is %d\n", mb);
        else if (one_peak <= c->budget) /* memory would fit: the disk tier's file, the same at every batch, does not */
            printf("no micro-batch fits: the disk tier's file does not fit --offload-dir at any\n");
        else printf("even B=1 does not fit: it needs %s, %s more than the budget\n", mw_fmt_bytes(one_peak, b1, sizeof b1),
                    mw_fmt_bytes(one_peak - c->budget, b2, sizeof b2));
        printf("  the largest %s preset that fits it at B=%d T=%d, recompute %s%s:\n", mw_arch_name(c->arch), c->batch,
               c->seq, c->recompute == MW_RECOMPUTE_BLOCKS ? "none" : p.policy,
               c->offload_dir[0] ? ", with the disk tier in --offload-dir's free space" : "");
        for (int f = 0; f < 4; f++)
            if (fitp[f][0])
                printf("    --offload %-16s %s (%.0fM parameters)\n", mw_offload_name(FIT_MODES[f]), fitp[f], np_fit[f] / 1e6);
            else
                printf("    --offload %-16s none\n", mw_offload_name(FIT_MODES[f]));
    }
    if (c->precision == MW_PRECISION_BF16)
        printf("\n  model states in memory (parameters, gradients, optimizer state%s) by --optim: fp32 weights (bf16\n"
               "  rounds the products' operands as it packs them: no 16-bit copy), the blocks' gradients as bf16\n"
               "  (2 bytes, with an fp32 block being accumulated), the embeddings', head's and final norm's fp32;\n"
               "  textbook (ZeRO's mixed precision): 2 + 2 bytes of bf16 weights and gradients, 4 of fp32 master\n"
               "  weights and the optimizer's state per parameter, all in memory:\n",
               p.disk_file ? "; the disk tier's not counted" : "");
    else
        printf("\n  model states in memory (parameters, gradients, optimizer state%s) by --optim, fp32 weights and\n"
               "  gradients (fp32 AdamW's 16 B/param equals ZeRO's mixed-precision 2 + 2 + 12); textbook: 4 + 4\n"
               "  bytes and the optimizer's state per parameter, all in memory:\n",
               p.disk_file ? "; the disk tier's not counted" : "");
    printf("    %-10s %12s %10s %10s  %s\n", "--optim", "states", "B/param", "textbook", c->budget ? "largest preset that fits" : "");
    for (int i = 0; i < MW_OPTIM_COUNT; i++) {
        if (!orow[i].states) {
            printf("    %-10s %12s %10s %10.0f  (--offload %s: no per-parameter state to place)\n", mw_optim_str(i), "-", "-",
                   TEXTBOOK_BPP[i], mw_offload_name(c->offload));
            continue;
        }
        printf("    %-10s %12s %10.3f %10.0f  %s%s\n", mw_optim_str(i), mw_fmt_bytes(orow[i].states, b1, sizeof b1),
               (double)orow[i].states / P, TEXTBOOK_BPP[i], c->budget ? (orow[i].fit[0] ? orow[i].fit : "none") : "",
               i == c->optim ? "   <- this run" : "");
    }
    printf("\n  textbook, for comparison:\n");
    printf("    model states at 16 B/param (fp32 AdamW)      %12s   memwall: %s\n",
           mw_fmt_bytes((uint64_t)(16 * P), b1, sizeof b1),
           mw_fmt_bytes(p.category[MW_CAT_PARAMS] + p.category[MW_CAT_GRADS] + p.category[MW_CAT_OPTIM], b2, sizeof b2));
    if (korth)
        printf("    activations, Korthikanti et al. 16-bit      %12s   (x2 for fp32: %s)\n",
               mw_fmt_bytes((uint64_t)korth16, b1, sizeof b1), mw_fmt_bytes((uint64_t)korth32, b2, sizeof b2));
    else
        printf("    activations, Korthikanti et al.: not for the %s family (the formula counts GPT blocks:\n"
               "      LayerNorm, a 4h GELU MLP, dropout masks)\n", mw_arch_name(c->arch));
    printf("\n  activations by recomputation policy (this plan: %s):\n", p.policy);
    if (c->recompute == MW_RECOMPUTE_AUTO)
        printf("    (auto's choice rests on op times measured now; to run exactly this plan: "
               "--recompute %s%s%.60s%s)\n", p.pin, p.act_pin[0] ? " --act-layers " : "", p.act_pin,
               strlen(p.act_pin) > 60 ? "..." : "");
    else if (agreed >= 0)
        printf("    (--recompute auto over %d ranks: every rank runs rank %d's choice, the largest plan's that fits "
               "every rank; to run exactly this plan: --recompute %s)\n", c->world, agreed, p.pin);
    printf("    %-11s %14s %14s %6s   %s\n", "policy", "activations", "peak", "fits",
           korth ? "Korthikanti et al., x2 for fp32" : "");
    for (int i = 0; i < npp; i++) {
        char b3[32], b4[32];
        double k = korth ? 2 * (i == 0 ? korth16 : i == 1 ? korth_sel : i == 2 ? korth_full : -0.5) : -1;
        printf("    %-11s %14s %14s %6s   %s%s%s", POLICIES[i],
               mw_fmt_bytes(pp[i].category[MW_CAT_ACTS], b1, sizeof b1), mw_fmt_bytes(pp[i].peak, b3, sizeof b3),
               c->budget ? (pp[i].fits ? "yes" : "no") : "-", k >= 0 ? mw_fmt_bytes((uint64_t)k, b4, sizeof b4) : "",
               i >= 3 ? "(" : "", i >= 3 ? pp[i].policy : "");
        printf("%s\n", i >= 3 ? ")" : "");
    }
    if (dev) mw_print_fixed_costs(stdout, gpu, dev, &fx, c->dp ? zs.peak_max : p.peak);
    printf("\n  planned in %.3f ms\n", plan_s * 1e3);
    return p.fits ? 0 : 2;
}

/* ---- plan: the timeline ----------------------------------------------------------------------- */

static const char *COLORS[MW_CAT_COUNT] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f"};

static void write_svg(FILE *f, const mw_plan_op *ops, int n, const mw_plan_summary *p, const mw_config *c) {
    const double lanes = p->disk_file ? 2 : 0, lane_h = 18; /* the disk tier's transfers: read, write */
    const double W = 1000, Hh = 420 + lanes * lane_h + (lanes ? 10 : 0), left = 80, right = 170, top = 50,
                 bottom = 110 + lanes * lane_h + (lanes ? 10 : 0);
    const double pw = W - left - right, ph = Hh - top - bottom;
    double ymax = (double)p->peak;
    if (c->budget && (double)c->budget > ymax) ymax = (double)c->budget;
    ymax *= 1.05;
    const double bw = pw / n;
    char b1[32];
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", W, Hh, W, Hh);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"14\" font-weight=\"bold\">memwall plan: L=%d H=%d C=%d V=%d, "
               "B=%d T=%d, peak %s</text>\n", left, c->n_layer, c->n_head, c->n_embd, c->vocab, c->batch, c->seq,
            mw_fmt_bytes(p->peak, b1, sizeof b1));
    for (int k = 0; k < MW_CAT_COUNT; k++) { /* one band (a group of bars) per category */
        fprintf(f, "<g id=\"band-%s\" fill=\"%s\">\n", mw_category_name(k), COLORS[k]);
        for (int i = 0; i < n; i++) {
            double below = 0;
            for (int j = 0; j < k; j++) below += (double)ops[i].live[j];
            double h = ph * (double)ops[i].live[k] / ymax, y = top + ph - ph * below / ymax - h;
            if (h > 0)
                fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>%s, %s: %s %s</title></rect>\n",
                        left + i * bw, y, bw * 0.92, h, ops[i].name, ops[i].op, mw_category_name(k),
                        mw_fmt_bytes(ops[i].live[k], b1, sizeof b1));
        }
        fprintf(f, "</g>\n");
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                W - right + 15, top + ph - 18.0 * (MW_CAT_COUNT - k), COLORS[k], W - right + 32,
                top + ph - 18.0 * (MW_CAT_COUNT - k) + 10, mw_category_name(k));
    }
    /* y axis: ticks at round values, a 1-2-5 step in the unit of the axis' top (B, KiB, MiB, GiB) */
    const double unit = ymax >= 1 << 30 ? 1 << 30 : ymax >= 1 << 20 ? 1 << 20 : ymax >= 1 << 10 ? 1 << 10 : 1;
    const char *uname = unit == 1 << 30 ? "GiB" : unit == 1 << 20 ? "MiB" : unit == 1 << 10 ? "KiB" : "B";
    const double raw = ymax / unit / 4, mag = pow(10, floor(log10(raw))), fr = raw / mag;
    const double step = (fr <= 1 ? 1 : fr <= 2 ? 2 : fr <= 5 ? 5 : 10) * mag;
    for (int t = 0; t * step * unit <= ymax; t++) {
        double y = top + ph - ph * t * step * unit / ymax;
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#ddd\"/>\n", left, y, left + pw, y);
        fprintf(f, "<text class=\"ytick\" x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">%g %s</text>\n", left - 5, y + 4,
                t * step, uname);
    }
    double ypk = top + ph - ph * (double)p->peak / ymax;
    fprintf(f, "<line id=\"peak-line\" x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"black\" stroke-dasharray=\"2,3\"/>\n",
            left, ypk, left + pw, ypk);
    fprintf(f, "<text x=\"%.0f\" y=\"%.2f\">arena peak %s</text>\n", left + pw + 4, ypk + 4, mw_fmt_bytes(p->peak, b1, sizeof b1));
    if (c->budget) {
        double yb = top + ph - ph * (double)c->budget / ymax;
        fprintf(f, "<line id=\"budget-line\" x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"red\" stroke-width=\"2\"/>\n",
                left, yb, left + pw, yb);
        fprintf(f, "<text x=\"%.0f\" y=\"%.2f\" fill=\"red\">budget %s</text>\n", left + pw + 4, yb - 4,
                mw_fmt_bytes(c->budget, b1, sizeof b1));
    }
    svg_act_bands(f, ops, n, left, top, ph, bw, ymax, W - right + 15, top + ph - 18.0 * (MW_CAT_COUNT + 2));
    double last_x = -1e9;
    for (int i = 0; i < n; i++) { /* a label where a phase starts, if there is room for it */
        if (i > 0 && strcmp(ops[i].name, ops[i - 1].name) == 0) continue;
        const double x = left + i * bw;
        if (i > 0) /* phase boundary */
            fprintf(f, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#eee\"/>\n", x, top, x,
                    top + ph);
        if (x - last_x < 13) continue;
        fprintf(f, "<text transform=\"translate(%.2f,%.0f) rotate(-60)\" text-anchor=\"end\">%s</text>\n",
                x + 4, top + ph + 12, ops[i].name);
        last_x = x;
    }
    for (int lane = 0; lane < lanes; lane++) { /* one lane per transfer direction, below the labels */
        const double y = Hh - lanes * lane_h - 4 + lane * lane_h;
        fprintf(f, "<g id=\"lane-disk-%s\" fill=\"%s\">\n", lane ? "write" : "read", lane ? "#b07aa1" : "#9c755f");
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\" fill=\"black\">disk %s</text>\n", left - 5,
                y + 12, lane ? "write" : "read");
        /* a label names the op whose own transfer it is ("optimizer 6.55 MiB") and stands beside its
         * bar, right or left, only where no other bar or label of the lane is: the larger transfers
         * first; the optimizer step's total (over --accum micro-batches) is in the right margin */
        int *order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1)), m = 0;
        double *taken = malloc(sizeof *taken * 2 * (size_t)(2 * n + 1)); /* occupied x ranges */
        int nt = 0;
        for (int i = 0; i < n; i++) {
            const uint64_t bytes = lane ? ops[i].disk_write : ops[i].disk_read;
            if (!bytes) continue;
            const double x = left + i * bw, w = bw * 0.92 > 3 ? bw * 0.92 : 3;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\"><title>%s: %s %s %s</title></rect>\n",
                    x, y, w, lane_h - 4, ops[i].name, lane ? "writes" : "reads",
                    mw_fmt_bytes(bytes, b1, sizeof b1), lane ? "to the disk tier" : "from the disk tier");
            if (order && taken) order[m++] = i, taken[2 * nt] = x, taken[2 * nt + 1] = x + w, nt++;
        }
        for (int a = 0; a < m; a++) /* the larger transfers first (insertion sort: few bars) */
            for (int b = a; b > 0; b--) {
                const int u = order[b], v = order[b - 1];
                if ((lane ? ops[u].disk_write : ops[u].disk_read) <= (lane ? ops[v].disk_write : ops[v].disk_read)) break;
                order[b] = v, order[b - 1] = u;
            }
        for (int a = 0; a < m; a++) {
            const int i = order[a];
            char label[96];
            snprintf(label, sizeof label, "%s %s", ops[i].name,
                     mw_fmt_bytes(lane ? ops[i].disk_write : ops[i].disk_read, b1, sizeof b1));
            const double tw = 6.2 * (double)strlen(label), x = left + i * bw, w = bw * 0.92 > 3 ? bw * 0.92 : 3;
            const double cand[2][2] = {{x + w + 3, x + w + 3 + tw}, {x - 3 - tw, x - 3}}; /* right, left */
            for (int side = 0; side < 2; side++) {
                int free_ = cand[side][0] >= left && cand[side][1] <= left + pw;
                for (int q = 0; q < nt && free_; q++)
                    free_ = cand[side][1] + 2 <= taken[2 * q] || cand[side][0] - 2 >= taken[2 * q + 1];
                if (!free_) continue;
                fprintf(f, "<text class=\"disk-label\" x=\"%.2f\" y=\"%.0f\" fill=\"black\">%s</text>\n",
                        cand[side][0], y + 12, label);
                taken[2 * nt] = cand[side][0], taken[2 * nt + 1] = cand[side][1], nt++;
                break;
            }
        }
        free(order), free(taken);
        /* the timeline is one micro-batch: the step's total is the planner's, over --accum of them */
        fprintf(f, "<text class=\"disk-total\" x=\"%.0f\" y=\"%.0f\" fill=\"black\"><title>the bars: each op's own "
                   "transfer; this: the optimizer step's total (%d micro-batch%s)</title>%s per step</text>\n",
                left + pw + 4, y + 12, c->accum, c->accum == 1 ? "" : "es",
                mw_fmt_bytes(lane ? p->disk_write : p->disk_read, b1, sizeof b1));
        fprintf(f, "</g>\n");
    }
    fprintf(f, "</svg>\n");
}

/* Creates the missing parent directories of path. */
int cmd_plan(int argc, char **argv) {
    opts o;
    parse(&o, CMD_PLAN, "plan", argc, argv);
    if (o.timeline) { /* SVG is all it writes: a .png or .pdf name would hold SVG */
        size_t n = strlen(o.timeline);
        if (n < 5 || strcasecmp(o.timeline + n - 4, ".svg") != 0 || o.timeline[n - 5] == '/')
            die(1, "--timeline %s: the timeline is SVG, give a FILE.svg", o.timeline);
    }
    train_line(&o);
    if (o.layout) return layout_report(&o, 1); /* a parallel layout: every distinct rank's plan */
    const mw_config *c = &o.cfg;
    mw_plan_summary p;
    plan_or_die(c, &p);
    mw_plan_op *ops;
    int n;
    if (mw_plan_timeline(c, &ops, &n) != MW_OK) die(1, "%s", mw_last_error());
    if (o.timeline) {
        if (mw_mkdirs_parent(o.timeline) != MW_OK) die(1, "--timeline: %s", mw_last_error());
        char tmp[4200];
        FILE *f;
        if (mw_tmp_create(o.timeline, tmp, sizeof tmp, &f) != MW_OK) die(1, "--timeline: %s", mw_last_error());
        write_svg(f, ops, n, &p, c);
        if (fclose(f) != 0 || rename(tmp, o.timeline) != 0) {
            remove(tmp);
            die(1, "cannot write %s: %s", o.timeline, strerror(errno));
        }
    }
    if (o.json) {
        printf("{\"peak_bytes\": %llu, \"live_peak_bytes\": %llu, \"budget_bytes\": %llu, \"fits\": %s, "
               "\"offload\": \"%s\", \"disk_file_bytes\": %llu, \"ops\": [",
               (unsigned long long)p.peak, (unsigned long long)p.live_peak, (unsigned long long)c->budget,
               p.fits ? "true" : "false", mw_offload_name(p.offload), (unsigned long long)p.disk_file);
        for (int i = 0; i < n; i++) {
            printf("%s{\"phase\": \"%s\", \"op\": \"%s\"", i ? ", " : "", ops[i].name, ops[i].op);
            for (int k = 0; k < MW_CAT_COUNT; k++)
                printf(", \"%s\": %llu", mw_category_name(k), (unsigned long long)ops[i].live[k]);
            printf(", \"disk_read\": %llu, \"disk_write\": %llu, \"act_compressed\": %llu, \"act_on_disk\": %llu}",
                   (unsigned long long)ops[i].disk_read, (unsigned long long)ops[i].disk_write,
                   (unsigned long long)ops[i].act_compressed, (unsigned long long)ops[i].act_on_disk);
        }
        mw_plan_buffer *bufs;
        int nb;
        if (mw_plan_buffers(c, &bufs, &nb) != MW_OK) die(1, "%s", mw_last_error());
        mw_plan_summary pp[NPOLICIES];
        int npp = policy_plans(c, &p, pp);
        printf("], \"recompute\": \"%s\", \"recompute_pin\": \"%s\", \"recompute_by_offload_auto\": %s, \"policies\": {",
               p.policy, p.pin, o.recompute_implied ? "true" : "false");
        for (int i = 0; i < npp; i++)
            printf("%s\"%s\": {\"activations\": %llu, \"peak_bytes\": %llu, \"fits\": %s}", i ? ", " : "",
                   POLICIES[i], (unsigned long long)pp[i].category[MW_CAT_ACTS], (unsigned long long)pp[i].peak,
                   pp[i].fits ? "true" : "false");
        printf("}, \"act\": ");
        json_act_plan(stdout, &p);
        printf(", \"buffers\": [");
        for (int i = 0; i < nb; i++)
            printf("%s{\"name\": \"%s\", \"category\": \"%s\", \"tier\": \"%s\", \"bytes\": %llu, \"offset\": %llu, "
                   "\"first_op\": %d, \"last_op\": %d}",
                   i ? ", " : "", bufs[i].name, mw_category_name(bufs[i].category), mw_tier_name(bufs[i].tier),
                   (unsigned long long)bufs[i].bytes,
                   (unsigned long long)bufs[i].offset, bufs[i].first, bufs[i].last);
        printf("]}\n");
        free(bufs);
    } else {
        char b[MW_CAT_COUNT][32], t[32];
        print_config(&o, "plan");
        printf("%-24s", "op");
        for (int k = 0; k < MW_CAT_COUNT; k++) printf(" %12s", mw_category_name(k));
        printf(" %12s%s\n", "live", p.disk_file ? "   disk tier" : "");
        for (int i = 0; i < n; i++) {
            uint64_t tot = 0;
            char label[64]; /* the phase and the op in it: "fwd 0 ln1+qkv"; "embed", not "embed embed" */
            if (strcmp(ops[i].name, ops[i].op) == 0) snprintf(label, sizeof label, "%s", ops[i].name);
            else snprintf(label, sizeof label, "%s %s", ops[i].name, ops[i].op);
            printf("%-24s", label);
            for (int k = 0; k < MW_CAT_COUNT; k++) {
                printf(" %12s", mw_fmt_bytes(ops[i].live[k], b[k], sizeof b[k]));
                tot += ops[i].live[k];
            }
            printf(" %12s", mw_fmt_bytes(tot, t, sizeof t));
            if (ops[i].disk_read || ops[i].disk_write)
                printf("   reads %s, writes %s", mw_fmt_bytes(ops[i].disk_read, b[0], sizeof b[0]),
                       mw_fmt_bytes(ops[i].disk_write, b[1], sizeof b[1]));
            printf("\n");
        }
        printf("arena peak %s (recompute %s; exactly this plan: --recompute %s%s%s)%s%s\n",
               mw_fmt_bytes(p.peak, t, sizeof t), p.policy, p.pin, p.act_pin[0] ? " --act-layers " : "", p.act_pin,
               o.timeline ? ", timeline in " : "", o.timeline ? o.timeline : "");
        print_recompute_choice(&o, &p);
        mw_plan_summary pp[NPOLICIES];
        int npp = policy_plans(c, &p, pp);
        printf("activations by policy:");
        for (int i = 0; i < npp; i++)
            printf("%s %s %s (peak %s)", i ? "," : "", POLICIES[i], mw_fmt_bytes(pp[i].category[MW_CAT_ACTS], b[0], sizeof b[0]),
                   mw_fmt_bytes(pp[i].peak, b[1], sizeof b[1]));
        printf("\n");
        print_act_plan(&p, 1); /* --act-offload, --act-compress: the choice per class of block value */
        if (c->budget) {
            char fit[96];
            printf("budget %s: %s\n", mw_fmt_bytes(c->budget, t, sizeof t), fit_text(p.peak, c->budget, fit, sizeof fit));
        }
        if (p.disk_room) {
            char fit[96];
            printf("disk tier: a file of %s, --offload-dir can give it %s: %s\n", mw_fmt_bytes(p.disk_file, t, sizeof t),
                   mw_fmt_bytes(p.disk_room, b[0], sizeof b[0]), fit_text(p.disk_file, p.disk_room, fit, sizeof fit));
        }
    }
    free(ops);
    return p.fits ? 0 : 2; /* as estimate: 2 when the plan does not fit --budget */
}
