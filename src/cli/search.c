/* estimate --search (issue 32 item 4): the layouts of --world GPUs over tensor x pipeline (plain
 * or interleaved) x data x expert parallelism x ZeRO stage x recomputation x sequence
 * parallelism, each rank's memory from its
 * plan (the walk of src/graph/layout.c, as estimate --tp/--pp prints it), the fitting ones ranked
 * by the cost model's step time (src/cluster/cost.c), and why each of the rest was dropped.
 * Planned from the least bound of the step time up; pruned by that bound against the best --top
 * found and by dominance (docs/cluster.md "The search"). May call: the public API (mw_plan,
 * mw_zero_shard, mw_config_num_params), src/cluster (cost, gpu), main.c's die. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cluster/cost.h"
#include "../cluster/gpu.h"
#include "../core/arena.h"
#include "../core/status.h"
#include "cli.h"
#include "memwall.h"

static const char *const RECOMPUTE_NAMES[3] = {"none", "selective", "full"};
static const int RECOMPUTES[3] = {MW_RECOMPUTE_NONE, MW_RECOMPUTE_SELECTIVE, MW_RECOMPUTE_FULL};

typedef struct cand {
    int tp, pp, dp, sp, zero, rec, micro, ep, vpp;
    uint64_t peak, usable;       /* the heavier of the first and last stage's largest ZeRO shard */
    int worst_stage;
    mw_cost_time t;
    double lb;                   /* the step time's lower bound, before the plan */
    char why[160];               /* "": fits; else why it was dropped */
} cand;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The heaviest rank of a layout: the first and the last stage (an even split: every middle stage
 * holds what the first holds less the embedding, with fewer micro-batches in flight), each as every
 * data-parallel rank of a distinct ZeRO shard: the dense floats' over the D ranks and, under
 * expert parallelism, the routed experts' over the rank's D / E (layout.c's shard_lens). Also the
 * first stage's flat and expert floats (the cost model's parameters). 0 and the status's message
 * on a refusal. A rank whose walk keeps more than usable bytes alive at one op cannot fit (its
 * arena holds them apart): the search stops there, unplaced, with *over 1 and *peak those bytes, a
 * lower bound of that rank's peak (mw_plan_within); else *over 0 and *peak the heaviest's. */
static mw_status rank_peak(const mw_config *base, const cand *x, uint64_t usable, uint64_t *peak, int *stage,
                           uint64_t *flat, uint64_t *expert, int *over) {
    *peak = 0, *over = 0;
    for (int k = 0; k < (x->pp > 1 ? 2 : 1); k++) {
        const int s = k ? x->pp - 1 : 0;
        mw_config c = *base;
        c.tp = x->tp, c.pp = x->pp, c.sp = x->sp, c.ep = x->ep, c.vpp = x->vpp > 1 ? x->vpp : 0;
        c.pp_stage = s, c.pp_blocks = base->n_layer / x->pp, c.pp_first = s * c.pp_blocks;
        c.dp = x->dp > 1, c.world = x->dp, c.zero = x->dp > 1 ? x->zero : 0, c.rank = 0;
        c.accum = x->micro;
        c.recompute = RECOMPUTES[x->rec], c.recompute_every = 0;
        mw_plan_summary p0;
        int placed;
        MW_TRY(mw_plan_within(&c, usable, &p0, &placed));
        if (!placed) return *peak = p0.live_peak, *stage = s, *over = 1, MW_OK;
        if (k == 0) *flat = p0.flat_floats, *expert = x->ep > 1 ? p0.expert_floats : 0;
        if (p0.peak > *peak) *peak = p0.peak, *stage = s;
        if (!c.dp || c.zero < 1) continue;
        const uint64_t ef = x->ep > 1 ? p0.expert_floats : 0;
        uint64_t seen[16][2];
        int nseen = 0, rep[16];
        for (int r = 0; r < x->dp; r++) { /* the distinct pairs of shard lengths */
            uint64_t lo, hi, elo = 0, ehi = 0;
            mw_zero_shard(p0.flat_floats - ef, x->dp, r, &lo, &hi);
            if (ef) mw_zero_shard(ef, x->dp / x->ep, r / x->ep, &elo, &ehi);
            int j = 0;
            while (j < nseen && (seen[j][0] != hi - lo || seen[j][1] != ehi - elo)) j++;
            if (j < nseen) continue;
            if (nseen == 16) return mw_fail(MW_ERR_ARG, "internal: more than 16 ZeRO shard lengths");
            seen[nseen][0] = hi - lo, seen[nseen][1] = ehi - elo, rep[nseen++] = r;
        }
        for (int j = 0; j < nseen; j++) { /* each pair no other holds both more of */
            int dom = 0;
            for (int i = 0; i < nseen && !dom; i++)
                dom = i != j && seen[i][0] >= seen[j][0] && seen[i][1] >= seen[j][1] &&
                      (seen[i][0] > seen[j][0] || seen[i][1] > seen[j][1]);
            if (dom || rep[j] == 0) continue; /* rank 0's is p0 */
            mw_plan_summary p;
            c.rank = rep[j];
            MW_TRY(mw_plan_within(&c, usable, &p, &placed));
            if (!placed) return *peak = p.live_peak, *stage = s, *over = 1, MW_OK;
            if (p.peak > *peak) *peak = p.peak, *stage = s;
        }
    }
    return MW_OK;
}

/* A tied embedding's parameters on a rank of T (GPT-2's always; Llama's with --tied 1): the
 * vocabulary padded to a multiple of T, as the layout's table divides it (mw_graph_layout_dims). */
static double tied_rank(const mw_config *c, int T) {
    if (c->arch != MW_ARCH_GPT2 && !c->tied) return 0;
    return (double)((c->vocab + T - 1) / T) * c->n_embd;
}

static int by_time(const void *a, const void *b) {
    const cand *x = a, *y = b; /* equal times (selective's recomputation costs no FLOPs): the lighter first */
    if (x->t.total_s != y->t.total_s) return x->t.total_s < y->t.total_s ? -1 : 1;
    return x->peak < y->peak ? -1 : x->peak > y->peak;
}

static void layout_name(const cand *x, char *buf, size_t n) {
    char v[16] = "", e[16] = "";
    if (x->vpp > 1) snprintf(v, sizeof v, " vpp %d", x->vpp);
    if (x->ep > 1) snprintf(e, sizeof e, " ep %d", x->ep);
    snprintf(buf, n, "tp %d pp %d%s dp %d%s%s zero %d recompute %s mb %d", x->tp, x->pp, v, x->dp, e,
             x->sp ? " sp" : "", x->zero, RECOMPUTE_NAMES[x->rec], x->micro);
}

int search_report(const opts *o) {
    const mw_config *c = &o->cfg;
    const int N = o->search_world;
    const double t0 = now_s();
    const clock_t cpu0 = clock(); /* the process's CPU time: the wall time of a shared machine is not the search's */
    const mw_gpu *gpu = NULL;
    if (o->gpu && !(gpu = mw_gpu_find(o->gpu))) die(1, "--gpu: %s", mw_last_error());
    const uint64_t dev = o->device_mem ? o->device_mem : gpu ? (gpu->mem_smi_bytes ? gpu->mem_smi_bytes : gpu->mem_stated_bytes) : 0;
    if (!dev) die(1, "--search needs the device's memory: --device-mem SIZE or --gpu NAME");
    const int b16 = c->precision == MW_PRECISION_BF16;
    const double peak_flops = o->tflops > 0 ? o->tflops * 1e12 : gpu ? (b16 ? gpu->bf16_flops : gpu->tf32_flops) : 0;
    if (peak_flops <= 0) die(1, "--search needs the device's peak: --gpu NAME or --tflops X");
    const double intra = o->intra_bw > 0 ? o->intra_bw * 1e9 : gpu ? gpu->nvlink_bytes_s / 2 : 0;
    const double inter = o->inter_bw > 0 ? o->inter_bw * 1e9 : gpu ? gpu->inter_bytes_s : 0;
    if (intra <= 0 || inter <= 0) die(1, "--search needs the links' bandwidths: --intra-bw and --inter-bw GB/s (or a --gpu whose table states them)");
    const int gpn = o->gpus_per_node > 0 ? o->gpus_per_node : 8;
    const double mfu = o->mfu > 0 ? o->mfu : 0.4;
    if (mfu > 1) die(1, "--mfu is a fraction of the peak, in (0, 1], got %g", mfu);
    const long G = o->global_batch > 0 ? o->global_batch : (long)N * c->batch;
    const mw_cost_machine mach = {peak_flops, mfu, intra, inter, gpn};
    /* the step's FLOPs (the same for every layout of one recomputation): the products through the
     * parameters a token passes through (a mixture's top-k routed experts, not all of them; the
     * first dense blocks' MLP), attention's scores at its own widths (latent attention: q.k over
     * nope + rope dims, A.V over v_head_dim). The rank's parameters for the data-parallel bound
     * stay the stored ones, every expert included. */
    mw_config none = *c;
    none.n_layer = 0, none.first_dense = 0;
    const double layer_active = (double)mw_config_active_params(c, 1) - (double)mw_config_active_params(&none, 1);
    const double attn_dim = c->kv_lora_rank > 0 ? c->n_head * (c->qk_nope_dim + c->qk_rope_dim + c->v_head_dim) / 2.0
                                                : c->n_embd;
    const mw_cost_model cm = {layer_active, c->n_layer, c->n_embd, attn_dim, c->vocab};
    /* the least a block stores (a dense block's or a mixture block's, every expert), for the bound */
    mw_config one = *c, two = *c;
    one.n_layer = 1, two.n_layer = 2;
    one.first_dense = two.first_dense = 0;
    double per_layer = (double)mw_config_num_params(&two) - (double)mw_config_num_params(&one);
    /* and under expert parallelism, a block's least without its routed experts (each 3 matrices of
     * moe_ffn x dim, divided by TP as the walk divides them), the experts going over EDP = D / E */
    const double expert = 3.0 * c->n_embd * c->moe_ffn, moe_layers = c->n_experts ? c->n_layer - c->first_dense : 0;
    double per_layer_ne = per_layer - c->n_experts * expert;
    if (c->first_dense > 0 && c->n_experts > 0) {
        one.first_dense = 1, two.first_dense = 2;
        const double dense = (double)mw_config_num_params(&two) - (double)mw_config_num_params(&one);
        if (dense < per_layer) per_layer = dense;
        if (dense < per_layer_ne) per_layer_ne = dense;
    }
    /* the cost model's recomputation as memwall's policies recompute: selective reruns the norms
     * and the GELU/SwiGLU only (docs/memory.md), no product, where Korthikanti et al.'s selective
     * reruns attention's scores; full reruns the block's forward */
    static const mw_cost_recompute COST_REC[3] = {MW_COST_RECOMPUTE_NONE, MW_COST_RECOMPUTE_NONE,
                                                  MW_COST_RECOMPUTE_FULL};
    double flops[3];
    for (int r = 0; r < 3; r++)
        if (mw_cost_step_flops(&cm, c->seq, (double)G * c->seq, COST_REC[r], &flops[r]) != MW_OK)
            die(1, "%s", mw_last_error());
    const int top = o->top > 0 ? o->top : 5;
    size_t cap = 64, n = 0;
    cand *all = malloc(sizeof *all * cap);
    if (!all) die(1, "out of memory");
    /* every layout, with the reasons that need no plan, and a lower bound of its step time: the
     * cost model with the rank's parameters at their least (a block's parameters / T per block of
     * the stage; the rank's table holds at least that, so its data-parallel traffic is no less) */
    for (int T = 1; T <= N; T++) {
        if (N % T) continue;
        for (int P = 1; P <= N / T; P++) {
            if ((N / T) % P) continue;
            const int D = N / T / P;
            /* interleaving: every V > 1 of equal chunks (the layers divisible by P V), plain 1F1B as
             * V = 1; expert parallelism: every E dividing D (the expert groups inside the data-
             * parallel one, as the walk plans them), for a model with routed experts */
            for (int V = 1; V <= (P > 1 && c->n_layer % P == 0 ? c->n_layer / P : 1); V++) {
                if (V > 1 && c->n_layer % (P * V)) continue;
                for (int E = 1; E <= (c->n_experts > 0 && c->n_layer % P == 0 ? D : 1); E++) {
                    if (D % E) continue;
            for (int sp = 0; sp <= (T > 1); sp++)
                for (int z = D > 1 ? 3 : 0; z >= 0; z--)
                    for (int r = 2; r >= 0; r--) {
                        if (n == cap) {
                            cand *a = realloc(all, sizeof *all * (cap *= 2));
                            if (!a) die(1, "out of memory");
                            all = a;
                        }
                        cand *x = &all[n++];
                        memset(x, 0, sizeof *x);
                        *x = (cand){.tp = T, .pp = P, .dp = D, .sp = sp, .zero = z, .rec = r, .ep = E, .vpp = V};
                        x->micro = G % ((long)c->batch * D) ? 0 : (int)(G / ((long)c->batch * D));
                        if (c->n_layer % P) {
                            snprintf(x->why, sizeof x->why, "--layers %d not divisible by pp %d", c->n_layer, P);
                        } else if (!x->micro) {
                            snprintf(x->why, sizeof x->why, "global batch %ld not divisible by --batch %d x dp %d", G,
                                     c->batch, D);
                        } else if (V > 1 && x->micro % P) {
                            snprintf(x->why, sizeof x->why, "vpp %d: the interleaved schedule needs the %d micro-batches divisible by pp %d",
                                     V, x->micro, P);
                        } else if (E > 1 && c->n_experts % E) {
                            snprintf(x->why, sizeof x->why, "ep %d does not divide the %d routed experts", E, c->n_experts);
                        } else if (b16 && D > 1) {
                            snprintf(x->why, sizeof x->why, "bf16 gradients under data parallelism are not planned yet");
                        } else {
                            const double blocks = c->n_layer / P, moe_blocks = blocks - c->first_dense;
                            const mw_cost_layout cl = {T, P, D, E, sp, D > 1 ? z : 0, x->micro, c->batch, c->seq,
                                                       c->n_embd, c->n_layer, moe_layers, c->n_experts_tok,
                                                       (E > 1 ? per_layer_ne : per_layer) * blocks / T,
                                                       E > 1 && moe_blocks > 0 ? moe_blocks * (c->n_experts / E) * expert / T : 0,
                                                       b16 ? 2 : 4, 4, 4, COST_REC[r], tied_rank(c, T), V};
                            if (mw_cost_step_time(&cl, flops[r], &mach, &x->t) != MW_OK) die(1, "%s", mw_last_error());
                            x->lb = x->t.total_s;
                        }
                    }
                }
            }
        }
    }
    /* plan them from the least bound up. A layout is dropped unplanned when the best --top found
     * so far are all faster than its bound, or when a variant of it that keeps less (the same ZeRO
     * stage, T, P, --sp and more recomputation) did not fit. A higher ZeRO stage is no such variant:
     * its gather slots or its shard's sum can outweigh what it divides (ZeRO 3 above ZeRO 2 and 1
     * at D = 2, ZeRO 2 above ZeRO 1 by a block's sum slot with 4 stages; cli_layout.sh) */
    size_t *ord = malloc(sizeof *ord * (n ? n : 1));
    cand **fails = malloc(sizeof *fails * (n ? n : 1));
    double *best = malloc(sizeof *best * (size_t)top);
    if (!ord || !fails || !best) die(1, "out of memory");
    size_t no = 0, nfails = 0;
    int nbest = 0, planned = 0;
    for (size_t i = 0; i < n; i++)
        if (!all[i].why[0]) ord[no++] = i;
    for (size_t a = 1; a < no; a++) /* insertion sort by bound, stable: the enumeration's order on ties */
        for (size_t b = a; b > 0 && all[ord[b]].lb < all[ord[b - 1]].lb; b--) {
            const size_t t = ord[b];
            ord[b] = ord[b - 1], ord[b - 1] = t;
        }
    for (size_t k = 0; k < no; k++) {
        cand *x = &all[ord[k]];
        const cand *dom = NULL;
        for (size_t f = 0; f < nfails && !dom; f++)
            if (fails[f]->tp == x->tp && fails[f]->pp == x->pp && fails[f]->sp == x->sp && fails[f]->zero == x->zero &&
                fails[f]->ep == x->ep && fails[f]->vpp == x->vpp && fails[f]->rec >= x->rec)
                dom = fails[f];
        if (nbest == top && x->lb > best[top - 1]) {
            snprintf(x->why, sizeof x->why, "slower than the best %d: at least %.4g s a step, the %d%s best %.4g s (not planned)",
                     top, x->lb, top, top == 1 ? "st" : top == 2 ? "nd" : top == 3 ? "rd" : "th", best[top - 1]);
            continue;
        }
        if (dom) {
            snprintf(x->why, sizeof x->why, "pruned: recompute %s does not fit, and this keeps more",
                     RECOMPUTE_NAMES[dom->rec]);
            continue;
        }
        mw_gpu_fixed fx;
        const mw_gpu_fixed_opts fo = {.nccl_channels = 16, .nccl_peers = 2,
                                      .nccl_comms = (x->tp > 1) + (x->pp > 1) + (x->dp > 1) + (x->ep > 1) +
                                                    (x->ep > 1 && x->dp / x->ep > 1),
                                      .frag_fraction = -1};
        uint64_t flat = 0, ef = 0;
        if (mw_gpu_fixed_costs(dev, &fo, &fx) != MW_OK) { /* nothing left for any plan */
            snprintf(x->why, sizeof x->why, "%s", mw_last_error());
            fails[nfails++] = x;
            continue;
        }
        x->usable = fx.usable;
        planned++;
        int over;
        if (rank_peak(c, x, fx.usable, &x->peak, &x->worst_stage, &flat, &ef, &over) != MW_OK) {
            snprintf(x->why, sizeof x->why, "%s", mw_last_error());
        } else if (over) { /* a rank's walk alone: more alive at one op than the device leaves */
            char b1[32], b2[32];
            snprintf(x->why, sizeof x->why, "stage %d's rank keeps %s alive at once (not placed), %s left for the plan",
                     x->worst_stage, mw_fmt_bytes(x->peak, b1, sizeof b1), mw_fmt_bytes(fx.usable, b2, sizeof b2));
            fails[nfails++] = x;
        } else if (x->peak > fx.usable) {
            char b1[32], b2[32];
            snprintf(x->why, sizeof x->why, "stage %d's rank needs %s, %s left for the plan", x->worst_stage,
                     mw_fmt_bytes(x->peak, b1, sizeof b1), mw_fmt_bytes(fx.usable, b2, sizeof b2));
            fails[nfails++] = x;
        } else {
            const mw_cost_layout cl = {x->tp, x->pp, x->dp, x->ep, x->sp, x->dp > 1 ? x->zero : 0, x->micro, c->batch,
                                       c->seq, c->n_embd, c->n_layer, moe_layers, c->n_experts_tok, (double)(flat - ef),
                                       (double)ef, b16 ? 2 : 4, 4, 4, COST_REC[x->rec], tied_rank(c, x->tp), x->vpp};
            if (mw_cost_step_time(&cl, flops[x->rec], &mach, &x->t) != MW_OK) die(1, "%s", mw_last_error());
            int j = -1; /* the best --top times, ascending */
            if (nbest < top) j = nbest++;
            else if (x->t.total_s < best[top - 1]) j = top - 1;
            if (j >= 0) {
                best[j] = x->t.total_s;
                for (; j > 0 && best[j - 1] > best[j]; j--) {
                    const double t = best[j];
                    best[j] = best[j - 1], best[j - 1] = t;
                }
            }
        }
    }
    free(ord), free(fails), free(best);
    /* the fitting ones first, by predicted step time; the dropped ones after, in search order */
    size_t nf = 0;
    for (size_t i = 0; i < n; i++)
        if (!all[i].why[0]) {
            cand t = all[i];
            memmove(all + nf + 1, all + nf, sizeof *all * (i - nf));
            all[nf++] = t;
        }
    qsort(all, nf, sizeof *all, by_time);
    const double secs = now_s() - t0, cpu = (double)(clock() - cpu0) / CLOCKS_PER_SEC;
    char b1[32], b2[32], name[128];
    if (o->json) {
        printf("{\"world\": %d, \"global_batch\": %ld, \"device_bytes\": %llu, \"peak_flops\": %.6g, \"mfu\": %g, "
               "\"intra_bw\": %.6g, \"inter_bw\": %.6g, \"gpus_per_node\": %d, \"layouts\": %zu, \"fit\": %zu, "
               "\"planned\": %d, \"seconds\": %.3f, \"cpu_seconds\": %.3f, \"layouts_ranked\": [",
               N, G, (unsigned long long)dev, peak_flops, mfu, intra, inter, gpn, n, nf, planned, secs, cpu);
        for (size_t i = 0; i < n; i++) {
            const cand *x = &all[i];
            if (i == nf) printf("], \"dropped\": [");
            printf("%s{\"tp\": %d, \"pp\": %d, \"vpp\": %d, \"dp\": %d, \"ep\": %d, \"sp\": %s, \"zero\": %d, "
                   "\"recompute\": \"%s\", \"microbatches\": %d",
                   i && i != nf ? ", " : "", x->tp, x->pp, x->vpp, x->dp, x->ep, x->sp ? "true" : "false", x->zero,
                   RECOMPUTE_NAMES[x->rec], x->micro);
            if (!x->why[0])
                printf(", \"rank_peak_bytes\": %llu, \"usable_bytes\": %llu, \"step_s\": %.6g, \"compute_s\": %.6g, "
                       "\"bubble_s\": %.6g, \"dp_s\": %.6g, \"edp_s\": %.6g, \"tp_s\": %.6g, \"pp_s\": %.6g, "
                       "\"ep_s\": %.6g, \"embed_s\": %.6g}",
                       (unsigned long long)x->peak, (unsigned long long)x->usable, x->t.total_s, x->t.compute_s,
                       x->t.bubble_s, x->t.dp_s, x->t.edp_s, x->t.tp_s, x->t.pp_s, x->t.ep_s, x->t.emb_s);
            else {
                printf(", \"why\": \"");
                for (const char *q = x->why; *q; q++) {
                    if (*q == '"' || *q == '\\') putchar('\\');
                    if ((unsigned char)*q >= 0x20) putchar(*q);
                }
                printf("\"}");
            }
        }
        if (nf == n) printf("], \"dropped\": [");
        printf("]}\n");
    } else {
        printf("estimate --search: %zu layouts of %d GPUs (%s each; peak %.1f TFLOP/s at %.0f%% of it, stated; links %.0f "
               "GB/s in a node of %d, %.0f GB/s across), global batch %ld x %d tokens\n",
               n, N, mw_fmt_bytes(dev, b1, sizeof b1), peak_flops / 1e12, 100 * mfu, intra / 1e9, gpn, inter / 1e9, G,
               c->seq);
        printf("  %zu fit; %d planned (each its first and last stage's plan), the rest dropped unplanned; %.2f s (%.2f s of "
               "CPU)\n", nf, planned, secs, cpu);
        if (nf) {
            printf("\n  %-4s %-66s %12s %10s %10s %10s %10s\n", "#", "layout", "rank peak", "step s", "compute", "bubble",
                   "comm");
            for (size_t i = 0; i < nf && (int)i < top; i++) {
                const cand *x = &all[i];
                layout_name(x, name, sizeof name);
                printf("  %-4zu %-66s %12s %10.3f %10.3f %10.3f %10.3f\n", i + 1, name, mw_fmt_bytes(x->peak, b1, sizeof b1),
                       x->t.total_s, x->t.compute_s, x->t.bubble_s, x->t.dp_s + x->t.edp_s + x->t.tp_s + x->t.pp_s + x->t.ep_s + x->t.emb_s);
            }
            if ((int)nf > top) printf("  ... %zu more fit, slower (--top N shows more; --json lists all)\n", nf - (size_t)top);
        }
        printf("\n  dropped:\n");
        for (size_t i = nf; i < n; i++) {
            layout_name(&all[i], name, sizeof name);
            printf("    %-66s %s\n", name, all[i].why);
        }
        if (!nf) printf("\n  no layout fits %s per GPU\n", mw_fmt_bytes(dev, b2, sizeof b2));
    }
    free(all);
    return nf ? 0 : 2;
}
