/* The optimizers (src/optim/optim.c) against their PyTorch references (tests/ref/optim.mwfx, made
 * by tests/ref/make_optim_fixture.py from docs/optimizers.md): six steps of each on a flat buffer of
 * five tensors with padding, the parameters after every step bit for bit, and the quantised
 * optimizers' codes and scales bit for bit. Each runs whole and streamed in chunks of several
 * sizes, on 1 and 3 threads: the same bits every way. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/optim/optim.h"
#include "check.h"
#include "fixture.h"

static rec *need(const char *name) {
    for (int i = 0; i < nrec; i++)
        if (strcmp(recs[i].name, name) == 0) return &recs[i];
    fprintf(stderr, "FAIL: fixture lacks %s\n", name);
    exit(1);
}

typedef struct tcase {
    const char *name;
    int optim;
    double beta1, beta2, beta3, eps, eps2, wd, clip, decay_rate, momentum;
} tcase;

static const tcase CASES[] = {
    {"adamw", MW_OPTIM_ADAMW, 0.9, 0.95, 0, 1e-8, 0, 0.1, 1, -0.8, 0},
    {"adamw8bit", MW_OPTIM_ADAMW8BIT, 0.9, 0.95, 0, 1e-8, 0, 0.1, 1, -0.8, 0},
    {"adam4bit", MW_OPTIM_ADAM4BIT, 0.9, 0.95, 0, 1e-8, 0, 0.1, 1, -0.8, 0},
    {"adafactor", MW_OPTIM_ADAFACTOR, 0.0, 0.95, 0, 1e-30, 0, 0.1, 1.0, -0.8, 0},
    {"adafactor_m", MW_OPTIM_ADAFACTOR, 0.9, 0.95, 0, 1e-30, 0, 0.1, 1.0, -0.8, 0},
    {"came", MW_OPTIM_CAME, 0.9, 0.999, 0.9999, 1e-30, 1e-16, 0.1, 1.0, -0.8, 0},
    {"sgd", MW_OPTIM_SGD, 0.9, 0.95, 0, 1e-8, 0, 0.1, 1, -0.8, 0.9},
};

static size_t N;
static int NT;
static mw_opt_tensor T[16];
static const float *P0, *G, *COEF;

/* Runs case c for K steps with chunks of `chunk` elements (0: one), checking every step. */
static void run(const tcase *c, size_t chunk, int threads) {
    omp_set_num_threads(threads);
    mw_config cfg;
    mw_config_default(&cfg);
    cfg.optim = c->optim, cfg.beta1 = c->beta1, cfg.beta2 = c->beta2, cfg.beta3 = c->beta3, cfg.eps = c->eps;
    cfg.eps2 = c->eps2, cfg.weight_decay = c->wd, cfg.clip_threshold = c->clip, cfg.decay_rate = c->decay_rate;
    cfg.momentum = c->momentum;
    mw_opt_layout L;
    CHECK_OK(mw_opt_layout_init(&L, &cfg, N, NT, T));
    float *p = malloc(N * 4), *g = malloc(N * 4);
    void *m = calloc(mw_opt_array_bytes(L.bits[0] ? L.bits[0] : 8, N) + 1, 1);
    void *v = calloc(mw_opt_array_bytes(L.bits[1] ? L.bits[1] : 8, N) + 1, 1);
    void *st = calloc(L.state_bytes + 8, 1), *sc = calloc(L.scratch_bytes + 8, 1);
    memcpy(p, P0, N * 4);
    char nm[64];
    snprintf(nm, sizeof nm, "%s.p", c->name);
    const rec *rp = need(nm);
    const int quant = c->optim == MW_OPTIM_ADAMW8BIT || c->optim == MW_OPTIM_ADAM4BIT;
    const rec *rmq = NULL, *rvq = NULL, *rms = NULL, *rvs = NULL;
    if (quant) {
        snprintf(nm, sizeof nm, "%s.mq", c->name), rmq = need(nm);
        snprintf(nm, sizeof nm, "%s.vq", c->name), rvq = need(nm);
        snprintf(nm, sizeof nm, "%s.ms", c->name), rms = need(nm);
        snprintf(nm, sizeof nm, "%s.vs", c->name), rvs = need(nm);
        CHECK((size_t)rms->dims[1] == L.nblocks && (size_t)rvs->dims[1] == L.st_off[NT] - L.st_off[0],
              "%s: %zu and %zu scales, the fixture %d and %d", c->name, L.nblocks, L.st_off[NT] - L.st_off[0],
              rms->dims[1], rvs->dims[1]);
    }
    const int K = rp->dims[0];
    for (int k = 0; k < K; k++) {
        memcpy(g, G + (size_t)k * N, N * 4);
        mw_opt_hp hp;
        mw_opt_hp_of(&hp, &cfg, 0.002 * (k + 1), COEF[k], k + 1);
        mw_opt_begin(&L, &hp, st, sc);
        for (int pass = 0; pass < L.npasses; pass++) {
            const size_t ch = chunk ? chunk : N;
            for (size_t lo = 0; lo < N; lo += ch) {
                const size_t hi = lo + ch < N ? lo + ch : N;
                mw_opt_chunk(&L, &hp, pass, lo, hi, p + lo, g + lo, L.bits[0] ? mw_opt_elem(m, L.bits[0], lo) : NULL,
                             L.bits[1] ? mw_opt_elem(v, L.bits[1], lo) : NULL, st, sc);
            }
            mw_opt_end_pass(&L, &hp, pass, st, sc);
        }
        const float *want = (const float *)rp->data + (size_t)k * N;
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < N; i++)
            if (memcmp(&p[i], &want[i], 4) != 0 && !bad++) first = i;
        CHECK(bad == 0, "%s (chunks %zu, %d threads) step %d: %zu parameters differ, first %zu: %.9g, want %.9g",
              c->name, chunk, threads, k + 1, bad, first, p[first], want[first]);
        for (size_t i = 0; i < N; i++) CHECK(g[i] == 0.0f, "%s: gradient %zu not zeroed", c->name, i);
        if (!quant) continue;
        const int32_t *wmq = (const int32_t *)rmq->data + (size_t)k * N, *wvq = (const int32_t *)rvq->data + (size_t)k * N;
        for (int ti = 0; ti < NT; ti++)
            for (size_t e = T[ti].offset; e < T[ti].offset + T[ti].numel; e++) {
                const int qm = L.bits[0] == 8 ? ((unsigned char *)m)[e] : (((unsigned char *)m)[e >> 1] >> ((e & 1) * 4)) & 15;
                const int qv = L.bits[1] == 8 ? ((unsigned char *)v)[e] : (((unsigned char *)v)[e >> 1] >> ((e & 1) * 4)) & 15;
                CHECK(qm == wmq[e] && qv == wvq[e], "%s step %d element %zu: codes %d %d, want %d %d", c->name, k + 1, e,
                      qm, qv, wmq[e], wvq[e]);
            }
        const float *s = st;
        CHECK(memcmp(s, (const float *)rms->data + (size_t)k * L.nblocks, L.nblocks * 4) == 0, "%s step %d: m scales",
              c->name, k + 1);
        const size_t nvs = L.st_off[NT] - L.st_off[0];
        CHECK(memcmp(s + L.st_off[0], (const float *)rvs->data + (size_t)k * nvs, nvs * 4) == 0, "%s step %d: v scales",
              c->name, k + 1);
    }
    free(p), free(g), free(m), free(v), free(st), free(sc);
    mw_opt_layout_free(&L);
}

/* --tp (src/optim/optim_tp.c): case c over Tn ranks' shards of the fixture's tensors (rows, with
 * the vocabulary's padding rows and GPT-2's groups of q|k|v rows, or columns), each rank a layout
 * of its own, the passes' statistics joined as src/dist/tp.c joins them (maxima; sums in rank
 * order). The quantised optimizers, SGD and AdamW give one process's bits: parameters, codes and
 * scales; Adafactor and CAME, whose column (row) sums the ranks add in rank order, within 1e-6. */
#define TPMAX 3
static void run_tp(const tcase *c, int Tn) {
    omp_set_num_threads(1);
    mw_config cfg;
    mw_config_default(&cfg);
    cfg.optim = c->optim, cfg.beta1 = c->beta1, cfg.beta2 = c->beta2, cfg.beta3 = c->beta3, cfg.eps = c->eps;
    cfg.eps2 = c->eps2, cfg.weight_decay = c->wd, cfg.clip_threshold = c->clip, cfg.decay_rate = c->decay_rate;
    cfg.momentum = c->momentum, cfg.tp = Tn;
    mw_opt_tensor lt[TPMAX][16];
    mw_opt_layout L[TPMAX];
    size_t n[TPMAX];
    float *p[TPMAX], *g[TPMAX];
    void *m[TPMAX], *v[TPMAX], *st[TPMAX], *sc[TPMAX];
    for (int r = 0; r < Tn; r++) {
        size_t at = 0;
        for (int i = 0; i < NT; i++) {
            mw_opt_tensor *t = &lt[r][i];
            memset(t, 0, sizeof *t);
            t->decay = T[i].decay, t->grows = T[i].rows, t->gcols = T[i].cols, t->rank = r, t->groups = 1;
            t->split = T[i].cols == 64 && T[i].rows == 40 && 64 % Tn == 0 ? MW_OPT_SHARD_COLS : MW_OPT_SHARD_ROWS;
            if (T[i].rows == 24 || T[i].rows == 300) t->groups = 3; /* q|k|v */
            if (t->split == MW_OPT_SHARD_COLS) {
                t->rows = T[i].rows, t->cols = T[i].cols / Tn;
            } else {
                t->per = (T[i].rows / t->groups + Tn - 1) / Tn;
                t->rows = t->per * t->groups, t->cols = T[i].cols;
            }
            t->numel = (size_t)t->rows * (t->cols ? (size_t)t->cols : 1);
            t->offset = at, at += (t->numel + 15) / 16 * 16;
        }
        n[r] = at;
        CHECK_OK(mw_opt_layout_init(&L[r], &cfg, n[r], NT, lt[r]));
        p[r] = calloc(n[r], 4), g[r] = calloc(n[r], 4);
        m[r] = calloc(mw_opt_array_bytes(L[r].bits[0] ? L[r].bits[0] : 8, n[r]) + 1, 1);
        v[r] = calloc(mw_opt_array_bytes(L[r].bits[1] ? L[r].bits[1] : 8, n[r]) + 1, 1);
        st[r] = calloc(L[r].state_bytes + 8, 1), sc[r] = calloc(L[r].scratch_bytes + 8, 1);
        CHECK(L[r].state_bytes == L[0].state_bytes, "the small state is laid out by the whole tensors");
    }
    char nm[64];
    snprintf(nm, sizeof nm, "%s.p", c->name);
    const rec *rp = need(nm);
    const int quant = c->optim == MW_OPTIM_ADAMW8BIT || c->optim == MW_OPTIM_ADAM4BIT;
    const int exact = c->optim != MW_OPTIM_ADAFACTOR && c->optim != MW_OPTIM_CAME;
    /* whole element e of tensor i is rank r's local element *l (mw_opt_tp_whole_index inverted) */
    for (int r = 0; r < Tn; r++)
        for (int i = 0; i < NT; i++)
            for (size_t k = 0; k < lt[r][i].numel; k++) {
                const size_t e = mw_opt_tp_whole_index(&lt[r][i], k);
                if (e != SIZE_MAX) p[r][lt[r][i].offset + k] = P0[T[i].offset + e];
            }
    const int K = rp->dims[0];
    double worst = 0;
    for (int k = 0; k < K; k++) {
        mw_opt_hp hp;
        mw_opt_hp_of(&hp, &cfg, 0.002 * (k + 1), COEF[k], k + 1);
        for (int r = 0; r < Tn; r++) {
            for (int i = 0; i < NT; i++)
                for (size_t q = 0; q < lt[r][i].numel; q++) {
                    const size_t e = mw_opt_tp_whole_index(&lt[r][i], q);
                    g[r][lt[r][i].offset + q] = e == SIZE_MAX ? 0.0f : G[(size_t)k * N + T[i].offset + e];
                }
            mw_opt_begin(&L[r], &hp, st[r], sc[r]);
        }
        for (int pass = 0; pass < L[0].npasses; pass++) {
            if (!mw_opt_pass_needed(&L[0], pass, 0)) continue;
            for (int r = 0; r < Tn; r++)
                mw_opt_chunk(&L[r], &hp, pass, 0, n[r], p[r], g[r], L[r].bits[0] ? m[r] : NULL, L[r].bits[1] ? v[r] : NULL,
                             st[r], sc[r]);
            const int j = mw_opt_tp_join(&L[0], pass);
            if (j == MW_OPT_TPJ_MAX) {
                for (size_t e = 0; e < L[0].max_floats; e++) {
                    float x = ((float *)sc[0])[e];
                    for (int r = 1; r < Tn; r++) x = ((float *)sc[r])[e] > x ? ((float *)sc[r])[e] : x;
                    for (int r = 0; r < Tn; r++) ((float *)sc[r])[e] = x;
                }
            } else if (j != MW_OPT_TPJ_NONE) {
                for (int i = 0; i < NT; i++) {
                    size_t cnt = 1;
                    double *d[TPMAX];
                    for (int r = 0; r < Tn; r++)
                        d[r] = j == MW_OPT_TPJ_SUMS ? mw_opt_tp_sums(&L[r], sc[r], i, &cnt) : mw_opt_tp_collapse(&L[r], sc[r], i);
                    if (!d[0]) continue;
                    for (size_t e = 0; e < cnt; e++) {
                        double x = d[0][e];
                        for (int r = 1; r < Tn; r++) x = x + d[r][e];
                        for (int r = 0; r < Tn; r++) d[r][e] = x;
                    }
                }
            }
            for (int r = 0; r < Tn; r++) mw_opt_end_pass(&L[r], &hp, pass, st[r], sc[r]);
        }
        const float *want = (const float *)rp->data + (size_t)k * N;
        size_t bad = 0;
        for (int r = 0; r < Tn; r++)
            for (int i = 0; i < NT; i++)
                for (size_t q = 0; q < lt[r][i].numel; q++) {
                    const size_t e = mw_opt_tp_whole_index(&lt[r][i], q), l = lt[r][i].offset + q;
                    CHECK(g[r][l] == 0.0f, "%s --tp %d: gradient not zeroed", c->name, Tn);
                    if (e == SIZE_MAX) {
                        CHECK(p[r][l] == 0.0f, "%s --tp %d: a padding row's parameter moved", c->name, Tn);
                        continue;
                    }
                    const float w = want[T[i].offset + e];
                    const double d = fabs((double)p[r][l] - w) / (fabs(w) > 1e-3 ? fabs(w) : 1e-3);
                    if (d > worst) worst = d;
                    if (exact ? memcmp(&p[r][l], &w, 4) != 0 : d > 1e-6) bad++;
                    if (!quant) continue;
                    const int bm = L[r].bits[0], bv = L[r].bits[1];
                    const int qm = bm == 8 ? ((unsigned char *)m[r])[l] : (((unsigned char *)m[r])[l >> 1] >> ((l & 1) * 4)) & 15;
                    const int qv = bv == 8 ? ((unsigned char *)v[r])[l] : (((unsigned char *)v[r])[l >> 1] >> ((l & 1) * 4)) & 15;
                    snprintf(nm, sizeof nm, "%s.mq", c->name);
                    const int32_t wm = ((const int32_t *)need(nm)->data)[(size_t)k * N + T[i].offset + e];
                    snprintf(nm, sizeof nm, "%s.vq", c->name);
                    const int32_t wv = ((const int32_t *)need(nm)->data)[(size_t)k * N + T[i].offset + e];
                    if (qm != wm || qv != wv) bad++;
                }
        CHECK(bad == 0, "%s --tp %d step %d: %zu parameters or codes differ from one process's (worst %.3g)", c->name, Tn,
              k + 1, bad, worst);
        if (quant) {
            snprintf(nm, sizeof nm, "%s.ms", c->name);
            const rec *rms = need(nm);
            snprintf(nm, sizeof nm, "%s.vs", c->name);
            const rec *rvs = need(nm);
            const size_t nvs = L[0].st_off[NT] - L[0].st_off[0];
            for (int r = 0; r < Tn; r++)
                CHECK(memcmp(st[r], (const float *)rms->data + (size_t)k * L[0].nblocks, L[0].nblocks * 4) == 0 &&
                          memcmp((float *)st[r] + L[0].st_off[0], (const float *)rvs->data + (size_t)k * nvs, nvs * 4) == 0,
                      "%s --tp %d step %d: rank %d's scales are not one process's", c->name, Tn, k + 1, r);
        }
    }
    for (int r = 0; r < Tn; r++) {
        free(p[r]), free(g[r]), free(m[r]), free(v[r]), free(st[r]), free(sc[r]);
        mw_opt_layout_free(&L[r]);
    }
}

int main(int argc, char **argv) {
    load_fixture(argc > 1 ? argv[1] : "tests/ref/optim.mwfx");
    const rec *lay = need("layout");
    NT = lay->dims[0];
    CHECK(NT <= 16, "layout");
    const int32_t *l = lay->data;
    for (int i = 0; i < NT; i++) {
        T[i].offset = (size_t)l[5 * i], T[i].numel = (size_t)l[5 * i + 1];
        T[i].rows = l[5 * i + 2], T[i].cols = l[5 * i + 3], T[i].decay = l[5 * i + 4];
    }
    const rec *p0 = need("p0");
    N = p0->n;
    P0 = p0->data, G = need("g")->data, COEF = need("coef")->data;
    /* the maps are PyTorch's */
    CHECK(memcmp(need("map.signed8")->data, mw_qmap_signed8, 1024) == 0, "signed8 map");
    CHECK(memcmp(need("map.unsigned8")->data, mw_qmap_unsigned8, 1024) == 0, "unsigned8 map");
    CHECK(memcmp(need("map.signed4")->data, mw_qmap_signed4, 64) == 0, "signed4 map");
    CHECK(memcmp(need("map.linear4")->data, mw_qmap_linear4, 64) == 0, "linear4 map");
    const size_t chunks[] = {0, 1000, 4096, 66};
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
        for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++)
            for (int th = 1; th <= 3; th += 2) run(&CASES[c], chunks[k], th);
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
        for (int tn = 2; tn <= TPMAX; tn++) run_tp(&CASES[c], tn);
    if (check_failures) {
        fprintf(stderr, "test_optim: %d failures\n", check_failures);
        return 1;
    }
    printf("test_optim: %zu optimizers match their PyTorch references bit for bit, whole and in chunks, on 1 and 3 threads; "
           "over 2 and 3 tensor-parallel shards too (Adafactor and CAME within 1e-6)\n",
           sizeof CASES / sizeof CASES[0]);
    free_fixture();
    return 0;
}
