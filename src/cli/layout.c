/* estimate and plan of a parallel layout (issue 32 item 2; docs/cluster.md "Layouts"): the flags
 * --tp, --pp, --dp, --sp, --ep, --microbatches, --pp-layers checked against each other, and every
 * distinct rank's plan printed, each the library's walk over that rank's share of the step
 * (src/graph/layout.c), with the ranks that share it. May call: the public API (mw_plan, mw_zero_shard),
 * main.c's die, opt_given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/arena.h"
#include "../cluster/gpu.h"
#include "../cluster/print.h"
#include "../core/status.h"
#include "../dist/comm_mpi.h"
#include "cli.h"
#include "memwall.h"
#include "ppsplit.h"

#define MAX_STAGES 4096
static int stage_blocks[MAX_STAGES], stage_first[MAX_STAGES]; /* layout_parse: each stage's blocks */

static const char *const FLAGS[] = {"tp", "pp", "dp", "sp", "ep", "vpp", "microbatches", "pp-layers"};
static int split_auto, split_mask; /* --pp-layers auto: chosen by layout_finish, once the shape is final */

void layout_parse(opts *o, int mask) {
    const char *given = NULL;
    for (size_t k = 0; k < sizeof FLAGS / sizeof FLAGS[0] && !given; k++)
        if (opt_given(o, FLAGS[k])) given = FLAGS[k];
    if (!given) return;
    if (opt_given(o, "search")) die(1, "--search chooses the layout and the ZeRO stage: drop --%s", given);
    if (mask & CMD_BENCH)
        die(1, "--%s runs in a later version: estimate and plan only (a layout's collectives have no CPU kernel yet)", given);
    if (mask & CMD_TRAIN) { /* train runs --tp (and --sp, src/dist/tp.c), a pipeline (src/dist/pipeline.c), or both,
                               with data-parallel replicas; the rest is planned only */
        if (o->cfg.arch == MW_ARCH_DEEPSEEK) /* the library refuses it too (mw_model_def.runs_layouts); said before the ranks */
            die(1, "train --%s with the deepseek family runs in a later version: estimate and plan only (train runs layouts "
                   "of the GPT-2 and Llama families)", given);
        for (size_t k = 0; k < sizeof FLAGS / sizeof FLAGS[0]; k++) {
            if (!opt_given(o, FLAGS[k])) continue;
            if (!strcmp(FLAGS[k], "ep") || !strcmp(FLAGS[k], "vpp"))
                die(1, "train --%s runs in a later version: estimate and plan only (train runs --tp [--sp], --pp with "
                       "--pp-layers and --microbatches, and both, with data-parallel replicas)", FLAGS[k]);
        }
    }
    mw_config *c = &o->cfg;
    const int T = opt_given(o, "tp") ? c->tp : 1, P = opt_given(o, "pp") ? c->pp : 1, E = opt_given(o, "ep") ? c->ep : 1;
    int D = opt_given(o, "dp") ? o->layout_dp : 1;
    if ((mask & CMD_TRAIN) && T >= 1 && (P > 1 || T > 1)) { /* the replicas: D = N / (T P) of the ranks mpirun started */
        if (P > c->n_layer) die(1, "--pp %d: more stages than the model's %d blocks", P, c->n_layer);
        const int N = mw_mpi_launched_size() > 0 ? mw_mpi_launched_size() : 1;
        if (N % (T * P)) {
            if (P > 1 && T > 1)
                die(1, "train --tp %d --pp %d on %d rank%s: the ranks must be a multiple of --tp x --pp (mpirun -np %d)", T,
                    P, N, N == 1 ? "" : "s", T * P);
            if (P > 1)
                die(1, "train --pp %d on %d rank%s: the ranks must be a multiple of the stages (mpirun -np %d)", P, N,
                    N == 1 ? "" : "s", P);
            die(1, "--tp %d runs on %d ranks or a multiple of them (mpirun -np %d; more make data-parallel replicas), "
                   "this run has %d", T, T, T, N);
        }
        if (opt_given(o, "dp") && D != N / (T * P))
            die(1, "--dp %d, but %d ranks of --tp %d --pp %d make %d data-parallel replicas", D, N, T, P, N / (T * P));
        D = N / (T * P);
    }
    if (T < 1 || P < 1 || D < 1 || E < 1)
        die(1, "--tp, --pp, --dp and --ep must be >= 1 (got %d, %d, %d, %d)", T, P, D, E);
    if (P > MAX_STAGES) die(1, "--pp %d: at most %d stages", P, MAX_STAGES);
    const long long W = (long long)T * P * D;
    if (W > (1 << 24)) die(1, "--tp %d x --pp %d x --dp %d = %lld ranks: at most %d", T, P, D, W, 1 << 24);
    if (opt_given(o, "world") && c->world != W)
        die(1, "--world %d must equal --tp %d x --pp %d x --dp %d = %lld", c->world, T, P, D, W);
    if (D % E != 0) die(1, "--ep %d must divide --dp %d (the expert-parallel groups lie inside the data-parallel one)", E, D);
    if (opt_given(o, "microbatches")) {
        if (o->microbatches < 1) die(1, "--microbatches must be >= 1, got %d", o->microbatches);
        if (opt_given(o, "accum") && c->accum != o->microbatches)
            die(1, "--microbatches %d and --accum %d: a layout's micro-batches per step are --microbatches", o->microbatches, c->accum);
        c->accum = o->microbatches;
    }
    if (c->accum < 1) die(1, "--microbatches must be >= 1, got %d", c->accum);
    split_auto = o->pp_layers && !strcmp(o->pp_layers, "auto") && P > 1, split_mask = mask;
    if (o->pp_layers && !strcmp(o->pp_layers, "auto")) { /* a provisional split until layout_finish plans it */
        if (P > c->n_layer) die(1, "--pp %d: more stages than the model's %d blocks", P, c->n_layer);
        for (int s = 0; s < P; s++) stage_blocks[s] = c->n_layer / P + (s < c->n_layer % P);
    } else if (o->pp_layers) {
        int n = 0;
        long sum = 0;
        for (const char *s = o->pp_layers; *s;) {
            char *end;
            const long v = strtol(s, &end, 10);
            if (end == s || v < 1 || v > c->n_layer || (*end && *end != ','))
                die(1, "--pp-layers %s: a list of block counts >= 1, e.g. 1,2,2,3", o->pp_layers);
            if (n == MAX_STAGES) die(1, "--pp-layers: at most %d stages", MAX_STAGES);
            stage_blocks[n++] = (int)v, sum += v;
            s = *end ? end + 1 : end;
        }
        if (n != P) die(1, "--pp-layers %s gives %d stages, --pp %d", o->pp_layers, n, P);
        if (sum != c->n_layer) die(1, "--pp-layers %s sums to %ld blocks, the model has %d", o->pp_layers, sum, c->n_layer);
    } else {
        if (c->n_layer % P != 0) die(1, "--layers %d must divide by --pp %d (or give --pp-layers, or --pp-layers auto)", c->n_layer, P);
        for (int s = 0; s < P; s++) stage_blocks[s] = c->n_layer / P;
    }
    for (int s = 0, f = 0; s < P; f += stage_blocks[s], s++) stage_first[s] = f;
    if (opt_given(o, "sp") && T == 1) die(1, "--sp divides the norms' and the residual's values over the --tp ranks: give --tp > 1");
    if (opt_given(o, "vpp") && (c->vpp < 1 || (c->vpp > 1 && P == 1)))
        die(1, "--vpp %d: model chunks per pipeline stage, >= 1, with --pp > 1", c->vpp);
    c->tp = T, c->pp = P, c->ep = E;
    /* the data-parallel group inside the layout: ZeRO as --zero says (0: every rank holds every state).
     * --dp 1 has none: ZeRO over one rank would plan its sums' buffers for nothing (the search's
     * layouts of D = 1 are planned without, and their rank peak must be this command's) */
    if (D == 1 && opt_given(o, "zero") && c->zero > 0)
        die(1, "--zero %d shards the states over the data-parallel ranks: give --dp > 1", c->zero);
    c->dp = D > 1;
    /* train --tp at D = 1 with --zero 0 given: the data-parallel sums over one replica (each micro-batch's
     * gradient formed from zero and added in order), the bits of the same --tp with D replicas */
    if ((mask & CMD_TRAIN) && T > 1 && D == 1 && opt_given(o, "zero") && c->zero == 0) c->dp = 1;
    c->world = D;
    c->rank = 0;
    o->layout = 1;
    if (mask & CMD_TRAIN) { /* this rank's place in the grid (src/dist/grid.c) */
        if (P > 64 && (o->ckpt_dir || o->resume))
            die(1, "train --pp %d with --%s: a pipeline of more than 64 stages saves no checkpoint yet", P, o->resume ? "resume" : "out");
        int t, p, d;
        const int N = mw_mpi_launched_size() > 0 ? mw_mpi_launched_size() : 1;
        mw_grid_coords(mw_mpi_launched_rank() % N, T, P, D, &t, &p, &d);
        c->rank = d;
        if (P > 1) c->pp_stage = p, c->pp_first = stage_first[p], c->pp_blocks = stage_blocks[p];
        else c->pp = 0;
    }
}

void layout_finish(opts *o) {
    if (!split_auto) return;
    split_auto = 0;
    mw_config *c = &o->cfg;
    const int P = c->pp;
    uint64_t *peaks = calloc((size_t)P, sizeof *peaks);
    if (!peaks) die(1, "out of memory");
    if (pp_split_auto(c, P, stage_blocks, peaks) != MW_OK) die(1, "%s", mw_last_error());
    static char text[MAX_STAGES * 8];
    size_t n = 0;
    for (int s = 0, f = 0; s < P; f += stage_blocks[s], s++) {
        stage_first[s] = f;
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%d", s ? "," : "", stage_blocks[s]);
    }
    o->pp_layers = text; /* the ranks' configurations compare the split chosen */
    if ((split_mask & CMD_TRAIN) && c->pp > 1)
        c->pp_first = stage_first[c->pp_stage], c->pp_blocks = stage_blocks[c->pp_stage];
    if (!o->json && mw_mpi_launched_rank() <= 0) {
        printf("  pipeline split: --pp-layers auto chose %s (the largest stage's planned peak least; stages' peaks", text);
        for (int s = 0; s < P; s++) {
            char b[32];
            printf("%s %s", s ? "," : "", mw_fmt_bytes(peaks[s], b, sizeof b));
        }
        printf(")\n");
    }
    free(peaks);
}

/* One distinct rank: its plan and the ranks sharing it. */
typedef struct rank_class {
    mw_plan_summary p;
    int stage, dp_rank, nranks;
    int *ranks; /* global ranks, ascending */
    int nstages, *stages; /* the stages whose ranks share this plan (middle stages alike), ascending */
} rank_class;

static int same_plan(const mw_plan_summary *a, const mw_plan_summary *b) {
    return a->peak == b->peak && a->live_peak == b->live_peak && memcmp(a->category, b->category, sizeof a->category) == 0;
}

/* ranks as ranges: "0-3, 8-11" */
static void print_ranges(FILE *f, const int *r, int n, int json) {
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
        if (json)
            fprintf(f, "%s[%d, %d]", i ? ", " : "", r[i], r[j]);
        else if (j == i)
            fprintf(f, "%s%d", i ? ", " : "", r[i]);
        else
            fprintf(f, "%s%d-%d", i ? ", " : "", r[i], r[j]);
        i = j + 1;
    }
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Data-parallel rank r's ZeRO shard lengths: the dense floats' over the D ranks and, under --ep E,
 * the routed experts' over the D/E ranks of its expert-data-parallel group (rank r / E of it). Under
 * --zero 0 too: a replica's accumulator of its shard (--accum > 1) makes its plan its own. */
static void shard_lens(const mw_config *c, const mw_plan_summary *p, int r, uint64_t len[2]) {
    uint64_t lo = 0, hi = 0, elo = 0, ehi = 0;
    const int E = c->ep > 1 ? c->ep : 1;
    const uint64_t ef = E > 1 ? p->expert_floats : 0;
    if (c->dp) {
        mw_zero_shard(p->flat_floats - ef, c->world, r, &lo, &hi);
        if (E > 1) mw_zero_shard(ef, c->world / E, r / E, &elo, &ehi);
    }
    len[0] = hi - lo, len[1] = ehi - elo;
}

static void plan_or_die(const mw_config *c, mw_plan_summary *p) {
    if (mw_plan(c, p) != MW_OK) die(1, "%s", mw_last_error());
}

/* The activation bytes one block keeps for backward on a rank of this layout, from the walk: the
 * plan of two blocks less that of one (no pipeline, one micro-batch, no recomputation; a model with
 * experts: two MoE blocks less one). */
static uint64_t layer_acts(const mw_config *c) {
    mw_config k = *c;
    k.pp = k.pp_stage = k.pp_first = k.pp_blocks = k.vpp = 0;
    k.accum = 1, k.dp = 0, k.world = 1, k.zero = 0, k.rank = 0;
    k.recompute = MW_RECOMPUTE_NONE, k.recompute_every = 0, k.recompute_blocks[0] = 0;
    if (k.n_experts) k.first_dense = 0; /* a mixture-of-experts block's (the deepseek family) */
    mw_plan_summary a, b;
    k.n_layer = 1;
    plan_or_die(&k, &a);
    k.n_layer = 2;
    plan_or_die(&k, &b);
    return b.category[MW_CAT_ACTS] - a.category[MW_CAT_ACTS];
}

/* --recompute auto with --tp and --pp: the ranks of a stage whose plans differ (ZeRO shards of unequal
 * lengths) may choose apart; train agrees on the largest plan's choice that fits each of them
 * (src/cli/train.c, agree_recompute): the same here, each class of the stage planned again with it.
 * A stage where none fits every class keeps its own choices (train refuses it, naming the budget). */
static void agree_stages(const mw_config *c, rank_class *cl, int ncl) {
    int *in = calloc((size_t)ncl + 1, sizeof *in);
    if (!in) die(1, "out of memory");
    for (int s = 0; s < c->pp; s++) {
        int n = 0, differ = 0;
        for (int q = 0; q < ncl; q++)
            for (int k = 0; k < cl[q].nstages; k++)
                if (cl[q].stages[k] == s) in[n++] = q;
        for (int j = 1; j < n; j++) differ |= strcmp(cl[in[j]].p.pin, cl[in[0]].p.pin) != 0;
        if (!differ) continue;
        for (int a = 1; a < n; a++) /* by peak, largest first; the lower rank first on ties */
            for (int b = a; b > 0; b--) {
                const rank_class *x = &cl[in[b]], *y = &cl[in[b - 1]];
                if (x->p.peak < y->p.peak || (x->p.peak == y->p.peak && x->ranks[0] > y->ranks[0])) break;
                const int t = in[b];
                in[b] = in[b - 1], in[b - 1] = t;
            }
        mw_config k = *c;
        k.pp_stage = s, k.pp_first = stage_first[s], k.pp_blocks = stage_blocks[s];
        for (int j = 0; j < n; j++) {
            char pin[sizeof cl[0].p.pin], g[sizeof k.recompute_blocks + sizeof cl[0].p.pin];
            memcpy(pin, cl[in[j]].p.pin, sizeof pin);
            if (strncmp(pin, "blocks:", 7) == 0 && strlen(pin + 7) == (size_t)k.pp_blocks && k.n_layer <= MW_MAX_BLOCK_POLICIES) {
                memset(g, 'n', sizeof g); /* the stage's letters at its blocks (train.c's stage_pin_global) */
                memcpy(g, "blocks:", 7);
                memcpy(g + 7 + k.pp_first, pin + 7, (size_t)k.pp_blocks);
                g[7 + k.n_layer] = 0;
            } else {
                snprintf(g, sizeof g, "%s", pin);
            }
            mw_config t = k;
            if (mw_recompute_parse(&t, g) != MW_OK) continue;
            int all = 1;
            mw_plan_summary *ps = calloc((size_t)n, sizeof *ps);
            if (!ps) die(1, "out of memory");
            for (int i = 0; i < n && all; i++) {
                t.rank = cl[in[i]].dp_rank;
                all = mw_plan(&t, &ps[i]) == MW_OK && ps[i].fits;
            }
            if (all)
                for (int i = 0; i < n; i++) cl[in[i]].p = ps[i];
            free(ps);
            if (all) break;
        }
    }
    free(in);
}

/* --recompute auto with --tp and --pp: the stages' choices (each its classes' pins, its own blocks',
 * agreed by agree_stages) joined into the one --recompute value train pins on every rank
 * (src/cli/train.c, join_stages); "" when it has none: a stage's ranks found no choice that fits
 * each of them, or a stage chose every:K. */
static void joined_pin(const mw_config *c, const rank_class *cl, int ncl, char *out, size_t n) {
    char letters[MW_MAX_BLOCK_POLICIES + 1] = "";
    out[0] = 0;
    if (c->n_layer > MW_MAX_BLOCK_POLICIES || n < (size_t)c->n_layer + 8) return;
    for (int s = 0; s < c->pp; s++) {
        const char *pin = NULL;
        for (int q = 0; q < ncl; q++)
            for (int k = 0; k < cl[q].nstages; k++) {
                if (cl[q].stages[k] != s) continue;
                if (pin && strcmp(pin, cl[q].p.pin) != 0) return;
                pin = cl[q].p.pin;
            }
        const char l = !pin ? 0 : !strcmp(pin, "none") ? 'n' : !strcmp(pin, "selective") ? 's' : !strcmp(pin, "full") ? 'f' : 0;
        if (pin && !strncmp(pin, "blocks:", 7) && strlen(pin + 7) == (size_t)stage_blocks[s])
            memcpy(letters + stage_first[s], pin + 7, (size_t)stage_blocks[s]);
        else if (l)
            memset(letters + stage_first[s], l, (size_t)stage_blocks[s]);
        else
            return;
    }
    letters[c->n_layer] = 0;
    snprintf(out, n, "blocks:%s", letters);
}

int layout_report(const opts *o, int cmd_plan) {
    const mw_config *c = &o->cfg;
    const int T = c->tp, P = c->pp, D = c->world, M = c->accum;
    if (o->timeline && (!cmd_plan || P < 2)) die(1, "--timeline with a parallel layout draws a pipeline's schedule (plan --pp P): drawing a rank's memory is not built yet");
    const mw_gpu *gpu = NULL;
    mw_gpu_fixed fx;
    uint64_t dev = 0;
    if (o->gpu || o->device_mem) { /* the device less its fixed costs, as the search counts them: every rank's plan fits it */
        if (o->gpu && !(gpu = mw_gpu_find(o->gpu))) die(1, "--gpu: %s", mw_last_error());
        dev = o->device_mem ? o->device_mem : gpu->mem_smi_bytes ? gpu->mem_smi_bytes : gpu->mem_stated_bytes;
        const mw_gpu_fixed_opts fo = {.nccl_channels = 16, .nccl_peers = 2,
                                      .nccl_comms = (T > 1) + (P > 1) + (D > 1) + (c->ep > 1) + (c->ep > 1 && D / c->ep > 1),
                                      .frag_fraction = -1};
        if (mw_gpu_fixed_costs(dev, &fo, &fx) != MW_OK) die(1, "%s", mw_last_error());
    }
    rank_class *cl = calloc((size_t)P * 4 + 1, sizeof *cl);
    if (!cl) die(1, "out of memory");
    int ncl = 0;
    for (int s = 0; s < P; s++) {
        mw_config k = *c;
        k.pp_stage = s, k.pp_first = stage_first[s], k.pp_blocks = stage_blocks[s];
        mw_plan_summary p0;
        mw_plan_ref *ref = NULL; /* the stage's ZeRO ranks: one placement where exact (mw_plan_like) */
        if (mw_plan_like(&k, &p0, &ref) != MW_OK) die(1, "%s", mw_last_error());
        /* the data-parallel ranks: alike unless ZeRO shards the flat buffer into unequal lengths */
        uint64_t len[8][2];
        int rep[8], nl = 0;
        for (int r = 0; r < D; r++) {
            uint64_t l2[2];
            shard_lens(c, &p0, r, l2);
            int j = 0;
            while (j < nl && (len[j][0] != l2[0] || len[j][1] != l2[1])) j++;
            if (j == nl) {
                if (nl == 8) die(1, "internal: more than 8 shard lengths among %d ranks", D);
                len[nl][0] = l2[0], len[nl][1] = l2[1], rep[nl++] = r;
            }
        }
        for (int j = 0; j < nl; j++) {
            mw_plan_summary p = p0;
            if (rep[j] != 0) {
                k.rank = rep[j];
                if (mw_plan_like(&k, &p, &ref) != MW_OK) die(1, "%s", mw_last_error());
            }
            int q = 0;
            while (q < ncl && !same_plan(&cl[q].p, &p)) q++;
            if (q == ncl) cl[ncl++] = (rank_class){p, s, rep[j], 0, NULL, 0, NULL};
            rank_class *x = &cl[q];
            if (!x->nstages || x->stages[x->nstages - 1] != s) {
                int *ns = realloc(x->stages, sizeof(int) * ((size_t)x->nstages + 1));
                if (!ns) die(1, "out of memory");
                x->stages = ns;
                x->stages[x->nstages++] = s;
            }
            for (int r = 0; r < D; r++) {
                uint64_t l2[2];
                shard_lens(c, &p0, r, l2);
                if (l2[0] != len[j][0] || l2[1] != len[j][1]) continue;
                int *nr = realloc(x->ranks, sizeof(int) * ((size_t)x->nranks + (size_t)T));
                if (!nr) die(1, "out of memory");
                x->ranks = nr;
                for (int t = 0; t < T; t++) x->ranks[x->nranks++] = t + T * (r + D * s); /* TP fastest, then DP, then PP */
            }
        }
        mw_plan_ref_free(ref);
    }
    if (c->recompute == MW_RECOMPUTE_AUTO && P > 1 && T > 1) agree_stages(c, cl, ncl); /* as train's ranks agree */
    if (o->timeline) layout_pipeline_svg(c, stage_blocks, o->timeline, o->json);
    int fits = 1;
    uint64_t peak_max = 0;
    for (int q = 0; q < ncl; q++) {
        qsort(cl[q].ranks, (size_t)cl[q].nranks, sizeof(int), cmp_int);
        if (dev && cl[q].p.peak > fx.usable) cl[q].p.fits = 0; /* over what the device leaves */
        fits &= cl[q].p.fits;
        if (cl[q].p.peak > peak_max) peak_max = cl[q].p.peak;
    }
    char joined[MW_MAX_BLOCK_POLICIES + 8] = "";
    if (c->recompute == MW_RECOMPUTE_AUTO && P > 1 && T > 1) joined_pin(c, cl, ncl, joined, sizeof joined);
    /* per layer: the walk's against Korthikanti et al.'s (GPT blocks, 16-bit values) */
    const uint64_t mine = layer_acts(c);
    const double s = c->seq, b = c->batch, h = c->n_embd, a = c->n_head, t = T, sbh = s * b * h;
    const double korth = c->arch != MW_ARCH_GPT2 ? -1
                         : c->sp               ? sbh / t * (34 + 5 * a * s / h)
                                               : sbh * (10 + 24 / t + 5 * a * s / (h * t));
    if (o->json) {
        printf("{\"layout\": {\"world\": %d, \"tp\": %d, \"pp\": %d, \"vpp\": %d, \"dp\": %d, \"ep\": %d, \"sp\": %s, \"zero\": %d, "
               "\"microbatches\": %d, \"pp_layers\": [",
               T * P * D, T, P, c->vpp > 1 ? c->vpp : 1, D, c->ep, c->sp ? "true" : "false", c->dp ? c->zero : 0, M);
        for (int q = 0; q < P; q++) printf("%s%d", q ? ", " : "", stage_blocks[q]);
        printf("]}, \"per_layer_activation_bytes\": {\"memwall\": %llu, \"korthikanti_16bit\": ", (unsigned long long)mine);
        json_num(stdout, "%.0f", korth < 0 ? 0.0 / 0.0 : korth);
        printf("}, \"ranks\": [");
        for (int q = 0; q < ncl; q++) {
            const rank_class *x = &cl[q];
            const int st = x->stage, inflight = mw_layout_in_flight(c, st);
            printf("%s{\"ranks\": [", q ? ", " : "");
            print_ranges(stdout, x->ranks, x->nranks, 1);
            if (P > 1 && c->vpp > 1) { /* the interleaved stage's chunks; "blocks" is its even split's range */
                const int Lc = stage_blocks[st] / c->vpp;
                printf("], \"chunk_blocks\": [");
                for (int v = 0; v < c->vpp; v++)
                    printf("%s[%d, %d]", v ? ", " : "", (v * P + st) * Lc, (v * P + st) * Lc + Lc - 1);
            }
            printf("], \"count\": %d, \"stage\": %d, \"blocks\": [%d, %d], \"embedding\": %s, \"head\": %s, "
                   "\"in_flight_microbatches\": %d, \"dp_rank\": %d, \"stages\": [",
                   x->nranks, st, stage_first[st], stage_first[st] + stage_blocks[st] - 1, st == 0 ? "true" : "false",
                   st == P - 1 ? "true" : "false", P > 1 ? inflight : 1, x->dp_rank);
            for (int k = 0; k < x->nstages; k++) /* every stage of the class: [stage, first block, last block] */
                printf("%s[%d, %d, %d]", k ? ", " : "", x->stages[k], stage_first[x->stages[k]],
                       stage_first[x->stages[k]] + stage_blocks[x->stages[k]] - 1);
            printf("], \"categories\": {");
            for (int k = 0; k < MW_CAT_COUNT; k++)
                printf("%s\"%s\": %llu", k ? ", " : "", mw_category_name(k), (unsigned long long)x->p.category[k]);
            if (c->recompute == MW_RECOMPUTE_AUTO) printf("}, \"recompute_pin\": \"%s\"", x->p.pin); /* its stage's own blocks */
            printf("%s\"peak_bytes\": %llu, \"live_peak_bytes\": %llu, \"flat_floats\": %llu, "
                   "\"expert_floats\": %llu, \"placement_period\": %d, \"fits\": %s}",
                   c->recompute == MW_RECOMPUTE_AUTO ? ", " : "}, ", (unsigned long long)x->p.peak, (unsigned long long)x->p.live_peak,
                   (unsigned long long)x->p.flat_floats, (unsigned long long)x->p.expert_floats, x->p.period,
                   x->p.fits ? "true" : "false");
        }
        printf("]%s", c->recompute == MW_RECOMPUTE_AUTO && P > 1 && T > 1 ? ", \"recompute_joined\": \"" : "");
        if (c->recompute == MW_RECOMPUTE_AUTO && P > 1 && T > 1) printf("%s\"", joined);
        printf(", \"device\": ");
        if (dev) mw_print_fixed_costs_json(stdout, gpu, dev, &fx, peak_max);
        else printf("null");
        printf(", \"fits\": %s}\n", fits ? "true" : "false");
    } else {
        char b1[32], b2[32];
        printf("%s: a parallel layout, planned per rank (%s)\n", cmd_plan ? "plan" : "estimate",
               P == 1 && D == 1 && c->ep <= 1 ? "train runs it: mpirun -np T ... train --tp T" : "not run here");
        printf("  world %d = --tp %d x --pp %d x --dp %d%s%s", T * P * D, T, P, D, c->sp ? ", --sp" : "",
               c->dp ? "" : " (every rank holds every state)");
        if (c->dp) printf(", --zero %d inside each data-parallel group of %d", c->zero, D);
        printf("; %d micro-batch%s per step%s\n", M, M == 1 ? "" : "es",
               P > 1 ? (c->vpp > 1 ? " under interleaved 1F1B" : " under 1F1B") : "");
        if (P > 1 && c->vpp > 1 && ncl > 0 && cl[0].p.period > 1) /* src/graph/place.c's stage_unit */
            printf("  placed periodically, every %d micro-batches (over 256 interleaved ones: a plan's time independent of\n"
                   "    their number; best fit measured up to 27%% less for a stage, 2-8%% for the heaviest; docs/cluster.md)\n",
                   cl[0].p.period);
        if (c->ep > 1)
            printf("  --ep %d: each rank holds %d of the %d routed experts of every MoE block (expert-parallel rank =\n"
                   "    data-parallel rank mod %d); the router, shared experts, attention and dense blocks on every rank;\n"
                   "    %s; all-to-all buffers of fixed shape (docs/cluster.md \"Expert parallelism\")\n",
                   c->ep, c->n_experts / c->ep, c->n_experts, c->ep,
                   c->dp && c->zero >= 1 ? "ZeRO shards the experts over the expert-data-parallel group (--dp / --ep ranks), the rest over --dp"
                                         : "no ZeRO: every rank of an expert-parallel rank's data-parallel group holds its experts' states");
        printf("  %d distinct rank%s (ranks numbered tensor-parallel fastest, then data-parallel, then stage):\n",
               ncl, ncl == 1 ? "" : "s");
        for (int q = 0; q < ncl; q++) {
            const rank_class *x = &cl[q];
            const int st = x->stage, inflight = mw_layout_in_flight(c, st);
            printf("\n  ranks ");
            print_ranges(stdout, x->ranks, x->nranks, 0);
            printf(" (%d): ", x->nranks);
            if (P > 1 && c->vpp > 1) { /* each stage of the class with its chunks' blocks */
                const int Lc = stage_blocks[st] / c->vpp;
                for (int k = 0; k < x->nstages; k++) {
                    const int s2 = x->stages[k];
                    printf("%s %d, blocks", k ? ";" : x->nstages > 1 ? "stages" : "stage", s2);
                    for (int v = 0; v < c->vpp; v++)
                        printf("%s %d-%d", v ? "," : "", (v * P + s2) * Lc, (v * P + s2) * Lc + Lc - 1);
                }
                printf("%s%s, %d chunk micro-batch%s in flight (interleaved)", st == 0 ? ", the embedding" : "",
                       st == P - 1 ? ", the head and loss" : "", inflight, inflight == 1 ? "" : "es");
            } else if (P > 1) {
                printf("stage%s ", x->nstages > 1 ? "s" : "");
                for (int k = 0; k < x->nstages; k++) /* middle stages alike share one plan */
                    printf("%s%d (blocks %d-%d)", k ? ", " : "", x->stages[k], stage_first[x->stages[k]],
                           stage_first[x->stages[k]] + stage_blocks[x->stages[k]] - 1);
                printf("%s%s, %d micro-batch%s in flight", st == 0 ? ", the embedding" : "",
                       st == P - 1 ? ", the head and loss" : "", inflight, inflight == 1 ? "" : "es");
            } else
                printf("blocks 0-%d, the embedding, the head and loss", c->n_layer - 1);
            if (c->dp && c->zero >= 1) printf(", ZeRO shard of data-parallel rank %d", x->dp_rank);
            printf("\n");
            for (int k = 0; k < MW_CAT_COUNT; k++)
                printf("    %-20s %12s\n", mw_category_name(k), mw_fmt_bytes(x->p.category[k], b1, sizeof b1));
            if (c->recompute == MW_RECOMPUTE_AUTO) printf("    %-20s %12s\n", "recompute (auto)", x->p.pin);
            printf("    %-20s %12s%s%s\n", "peak (arena)", mw_fmt_bytes(x->p.peak, b1, sizeof b1),
                   c->budget ? (x->p.fits ? "  fits --budget " : "  does NOT fit --budget ") : "",
                   c->budget ? mw_fmt_bytes(c->budget, b2, sizeof b2) : "");
        }
        if (c->recompute == MW_RECOMPUTE_AUTO && P > 1 && T > 1)
            printf("\n  --recompute auto per stage, joined as train pins it on every rank: %s\n",
                   joined[0] ? joined : "none (a stage's ranks found no choice that fits each, or one chose every:K)");
        if (dev) mw_print_fixed_costs(stdout, gpu, dev, &fx, peak_max); /* against the heaviest rank */
        printf("\n  activations per block on a rank (the walk: two blocks' plan less one's) %s\n",
               mw_fmt_bytes(mine, b1, sizeof b1));
        if (korth >= 0)
            printf("  Korthikanti et al. (arXiv:2205.05198, Table 2), %s, 16-bit: %s\n"
                   "    they differ: memwall's tiled attention keeps no s x s matrix (only the log-sum-exp, 4as b/t bytes),\n"
                   "    it has no dropout masks, and keeps the residual stream (the norms' inputs) in fp32 and, under\n"
                   "    --precision fp32, every value in fp32\n",
                   c->sp ? "sbh/t (34 + 5as/h)" : "sbh (10 + 24/t + 5as/(ht))", mw_fmt_bytes((uint64_t)korth, b2, sizeof b2));
    }
    for (int q = 0; q < ncl; q++) free(cl[q].ranks), free(cl[q].stages);
    free(cl);
    return fits ? 0 : 2;
}
