/* The optimizers as passes over the flat buffer (optim.h; the math in docs/optimizers.md). */
#include "optim.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "adamw.h"
#include "optim_impl.h"

/* ---- quantisation ------------------------------------------------------------------------------ */

/* The index k minimising fabsf(map[k] - y), the lowest on ties (the map ascends). */
static inline int nearest(const float *map, int len, float y) {
    int lo = 0, hi = len; /* the first map[k] >= y */
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (map[mid] < y) lo = mid + 1;
        else hi = mid;
    }
    int k = lo < len ? lo : len - 1;
    float best = fabsf(map[k] - y);
    if (lo < len && lo > 0 && fabsf(map[lo - 1] - y) <= best) k = lo - 1, best = fabsf(map[k] - y);
    while (k > 0 && fabsf(map[k - 1] - y) == best) k--;
    return k;
}

qlut mw_opt_luts[4];
static pthread_once_t LUTS8_ONCE = PTHREAD_ONCE_INIT, LUTS4_ONCE = PTHREAD_ONCE_INIT;

static void lut_build(qlut *t, const float *map, int len) {
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t u0 = b << 16, u1 = b << 16 | 0xffffu;
        float y0, y1;
        memcpy(&y0, &u0, 4), memcpy(&y1, &u1, 4);
        if (((b >> 7) & 0xff) == 0xff) { /* infinities and NaNs: the whole map */
            t->lo[b] = 0, t->hi[b] = (unsigned char)(len - 1);
            continue;
        }
        const int k0 = nearest(map, len, y0), k1 = nearest(map, len, y1);
        t->lo[b] = (unsigned char)(k0 < k1 ? k0 : k1), t->hi[b] = (unsigned char)(k0 < k1 ? k1 : k0);
    }
}

/* Built on first use by an optimizer that quantises (128 KiB a table, outside the plan, like the
 * process's own memory); AdamW and the others never touch them. */
static void luts8_init(void) { lut_build(&LUTS[Q_S8], mw_qmap_signed8, 256), lut_build(&LUTS[Q_U8], mw_qmap_unsigned8, 256); }
static void luts4_init(void) { lut_build(&LUTS[Q_S4], mw_qmap_signed4, 16), lut_build(&LUTS[Q_L4], mw_qmap_linear4, 16); }


/* ---- layout ------------------------------------------------------------------------------------ */

static int factored(const mw_opt_tensor *t) { return t->cols > 0; }

mw_status mw_opt_layout_init(mw_opt_layout *L, const mw_config *cfg, size_t n, int ntensors, const mw_opt_tensor *t) {
    memset(L, 0, sizeof *L);
    if (cfg->optim == MW_OPTIM_ADAMW8BIT) pthread_once(&LUTS8_ONCE, luts8_init);
    if (cfg->optim == MW_OPTIM_ADAM4BIT) pthread_once(&LUTS4_ONCE, luts4_init);
    L->kind = cfg->optim;
    L->tp = cfg->tp > 1 ? cfg->tp : 1;
    L->n = n;
    L->ntensors = ntensors;
    L->t = malloc(sizeof *t * (size_t)(ntensors > 0 ? ntensors : 1));
    L->st_off = calloc((size_t)ntensors + 1, sizeof(size_t));
    L->sc_off = calloc((size_t)ntensors + 1, sizeof(size_t));
    if (!L->t || !L->st_off || !L->sc_off) {
        mw_opt_layout_free(L);
        return mw_fail(MW_ERR_NOMEM, "out of memory for the optimizer's layout");
    }
    memcpy(L->t, t, sizeof *t * (size_t)ntensors);
    const unsigned G = MW_OA_BIT(MW_OA_G), P = MW_OA_BIT(MW_OA_P), M = MW_OA_BIT(MW_OA_M), V = MW_OA_BIT(MW_OA_V);
    size_t st = 0, sc = 0; /* floats of small state, doubles of scratch */
    switch (L->kind) {
    case MW_OPTIM_ADAMW:
        L->bits[0] = L->bits[1] = 32;
        L->npasses = 1;
        L->rd[0] = G | P | M | V, L->wr[0] = P | M | V;
        break;
    case MW_OPTIM_SGD:
        L->bits[0] = cfg->momentum > 0 ? 32 : 0;
        L->npasses = 1;
        L->rd[0] = G | P | (L->bits[0] ? M : 0), L->wr[0] = P | (L->bits[0] ? M : 0);
        break;
    case MW_OPTIM_ADAMW8BIT:
    case MW_OPTIM_ADAM4BIT: {
        const int q8 = L->kind == MW_OPTIM_ADAMW8BIT;
        const size_t B = q8 ? MW_OPT_BLOCK8 : MW_OPT_BLOCK4;
        L->bits[0] = L->bits[1] = q8 ? 8 : 4;
        L->npasses = 2;
        L->rd[0] = G | M | V, L->wr[0] = 0;
        L->rd[1] = G | P | M | V, L->wr[1] = P | M | V;
        /* blocks per tensor (bitsandbytes quantises each tensor's state on its own): tensor i's
         * m scales from sc_off[i] (its blocks of B from its first element), then V's scales from
         * st_off[i]: 8-bit the same blocks, 4-bit its rows and columns (1-D: blocks of 128) */
        for (int i = 0; i < ntensors; i++) L->sc_off[i] = st, st += (opt_numel(&t[i]) + B - 1) / B;
        L->sc_off[ntensors] = st;
        L->nblocks = st;
        for (int i = 0; i < ntensors; i++) {
            L->st_off[i] = st;
            st += q8 || !factored(&t[i]) ? (opt_numel(&t[i]) + B - 1) / B : opt_rows(&t[i]) + opt_cols(&t[i]);
        }
        L->st_off[ntensors] = st;
        /* scratch: the new scales (floats, as many as the state's), then adam4bit's per-thread
         * column maxima */
        size_t extra = 0;
        if (!q8) {
            for (int i = 0; i < ntensors; i++)
                if ((size_t)t[i].cols > L->maxcols) L->maxcols = (size_t)t[i].cols;
            L->nthreads = omp_get_max_threads();
            extra = L->maxcols * (size_t)L->nthreads;
        }
        sc = (st + extra + 1) / 2;
        L->join[0] = L->join[1] = MW_OPT_JOIN_MAX; /* the new scales: 8-bit's in pass 1, 4-bit's in pass 0 */
        L->max_floats = st;
        break;
    }
    case MW_OPTIM_ADAFACTOR:
    case MW_OPTIM_CAME: {
        const int came = L->kind == MW_OPTIM_CAME;
        L->bits[0] = came || cfg->beta1 > 0 ? 32 : 0;
        L->npasses = came ? 4 : 3;
        L->rd[0] = G, L->rd[1] = G;
        if (came) {
            L->rd[2] = G | M, L->wr[2] = M;
            L->rd[3] = P | M, L->wr[3] = P;
        } else {
            L->rd[2] = G | P | (L->bits[0] ? M : 0), L->wr[2] = P | (L->bits[0] ? M : 0);
        }
        for (int i = 0; i < ntensors; i++) {
            L->st_off[i] = st;
            L->sc_off[i] = sc;
            const size_t r = opt_rows(&t[i]), c = opt_cols(&t[i]);
            /* state: R, C (and CAME's RR, RC), or a 1-D tensor's V. scratch (doubles): row and
             * column sums, the pieces of the sum of squares, the tensor's divisor, then the row
             * and column factors (floats, in doubles' room) */
            st += factored(&t[i]) ? (r + c) * (came ? 2 : 1) : opt_numel(&t[i]);
            sc += (factored(&t[i]) ? 2 * (r + c) : 0) + npieces(opt_numel(&t[i])) + 1;
        }
        L->st_off[ntensors] = st;
        L->sc_off[ntensors] = sc;
        /* the second moment's row and column sums (pass 0), V and the pieces of sum(u*u) (pass 1),
         * CAME's residual's sums (pass 2) */
        L->join[0] = L->join[1] = MW_OPT_JOIN_CHAIN;
        if (came) L->join[2] = MW_OPT_JOIN_CHAIN;
        break;
    }
    default: mw_opt_layout_free(L); return mw_fail(MW_ERR_ARG, "unknown optimizer %d", cfg->optim);
    }
    L->zero_pass = 0;
    for (int k = 0; k < L->npasses; k++)
        if (L->rd[k] & G) L->zero_pass = k;
    L->state_bytes = st * sizeof(float);
    L->scratch_bytes = sc * sizeof(double);
    return MW_OK;
}

void mw_opt_layout_free(mw_opt_layout *L) {
    free(L->t), free(L->st_off), free(L->sc_off);
    L->t = NULL, L->st_off = L->sc_off = NULL;
}

void mw_opt_hp_of(mw_opt_hp *hp, const mw_config *c, double lr, float coef, int t) {
    hp->lr = lr, hp->beta1 = c->beta1, hp->beta2 = c->beta2, hp->beta3 = c->beta3, hp->eps = c->eps;
    hp->eps2 = c->eps2, hp->weight_decay = c->weight_decay, hp->clip_threshold = c->clip_threshold;
    hp->decay_rate = c->decay_rate, hp->momentum = c->momentum, hp->coef = coef, hp->t = t;
}

/* ---- the passes -------------------------------------------------------------------------------- */

/* The element range [x, y) of tensor i inside [lo, hi), for i from *next on (chunks come in order:
 * *next is the first tensor not finished). Returns 0 when no tensor is left in the chunk. */
typedef struct span {
    int i;
    size_t x, y;
} span;

#define FOR_SPANS(L, lo, hi, sp)                                                                       \
    for (int _i = 0; _i < (L)->ntensors; _i++)                                                         \
        for (span sp = {_i, (L)->t[_i].offset > (lo) ? (L)->t[_i].offset : (lo),                       \
                        (L)->t[_i].offset + (L)->t[_i].numel < (hi) ? (L)->t[_i].offset + (L)->t[_i].numel : (hi)}; \
             sp.x < sp.y; sp.x = sp.y)


/* -- AdamW and SGD: one elementwise pass -- */

static void adamw_pass(const mw_opt_layout *L, const mw_opt_hp *hp, size_t lo, size_t hi, float *p, float *g, float *m,
                       float *v) {
    FOR_SPANS(L, lo, hi, sp) {
        const mw_opt_tensor *t = &L->t[sp.i];
        mw_adamw_hp a = {hp->lr, hp->beta1, hp->beta2, hp->eps, t->decay ? hp->weight_decay : 0.0, hp->coef, hp->t};
        const size_t o = sp.x - lo;
        mw_adamw_update(p + o, g + o, m + o, v + o, sp.y - sp.x, &a);
    }
}

static void sgd_pass(const mw_opt_layout *L, const mw_opt_hp *hp, size_t lo, size_t hi, float *p, float *g, float *buf) {
    const float lr = (float)hp->lr, mu = (float)hp->momentum, cf = hp->coef;
    FOR_SPANS(L, lo, hi, sp) {
        const mw_opt_tensor *t = &L->t[sp.i];
        const float wd = (float)(t->decay ? hp->weight_decay : 0.0);
        const size_t n = sp.y - sp.x;
        float *pp = p + (sp.x - lo), *gg = g + (sp.x - lo), *bb = buf ? buf + (sp.x - lo) : NULL;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) {
            float d = gg[j] * cf;
            if (wd > 0) d = d + wd * pp[j];
            if (bb) {
                float b = bb[j] * mu;
                b = b + d;
                bb[j] = b;
                d = b;
            }
            pp[j] = pp[j] - lr * d;
            gg[j] = 0.0f;
        }
    }
}

/* -- 8-bit and 4-bit Adam -- */



/* adamw8bit. A block wholly inside the chunk is done at once in pass 1: its new moments into a
 * buffer, their maxima, the codes and the parameters. A block the chunk's bounds cut (the disk
 * tier streams a tensor in chunks) takes its maxima in pass 0 and the rest in pass 1; the same
 * operations, so the same bits. With 2048-float padding, chunks of the disk tier cut no block and
 * pass 0 is skipped (mw_opt_pass_needed). */
static void q8_pass(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, size_t lo, size_t hi, float *p, float *g,
                    unsigned char *mq, unsigned char *vq, float *st, float *nsc) {
    const qadam q = qadam_of(hp);
    const size_t B = MW_OPT_BLOCK8;
    const float cf = hp->coef;
    FOR_SPANS(L, lo, hi, sp) {
        const mw_opt_tensor *t = &L->t[sp.i];
        if (t->split) { /* --tp: a shard (optim_tp.c) */
            mw_opt_tp_q8(L, hp, pass, sp.i, sp.x - t->offset, sp.y - t->offset, t->offset - lo, p, g, mq, vq, st, nsc);
            continue;
        }
        const float decay = decay_of(hp, t);
        const float *sm = st + L->sc_off[sp.i], *sv = st + L->st_off[sp.i];
        float *nm = nsc + L->sc_off[sp.i], *nv = nsc + L->st_off[sp.i];
        const size_t o = t->offset, end = o + t->numel, b0 = (sp.x - o) / B, b1 = (sp.y - 1 - o) / B;
#pragma omp parallel for schedule(static)
        for (size_t b = b0; b <= b1; b++) {
            const size_t bs = o + b * B, be = o + (b + 1) * B < end ? o + (b + 1) * B : end;
            const size_t x = bs > sp.x ? bs : sp.x, y = be < sp.y ? be : sp.y;
            const int whole = bs >= lo && be <= hi;
            if (pass == 0) {
                if (whole) continue;
                float am = 0, av = 0;
                for (size_t e = x; e < y; e++) {
                    const size_t j = e - lo;
                    float mi = dequantize(mw_qmap_signed8, mq[j], sm[b]), vi = dequantize(mw_qmap_unsigned8, vq[j], sv[b]);
                    moments(&q, g[j] * cf, &mi, &vi);
                    am = fmax_abs(am, mi), av = fmax_abs(av, vi);
                }
                if (am > nm[b]) nm[b] = am;
                if (av > nv[b]) nv[b] = av;
                continue;
            }
            float mb[MW_OPT_BLOCK8], vb[MW_OPT_BLOCK8];
            float am = nm[b], av = nv[b];
            if (whole) {
                am = av = 0;
                for (size_t e = x; e < y; e++) {
                    const size_t j = e - lo;
                    float mi = dequantize(mw_qmap_signed8, mq[j], sm[b]), vi = dequantize(mw_qmap_unsigned8, vq[j], sv[b]);
                    moments(&q, g[j] * cf, &mi, &vi);
                    mb[e - x] = mi, vb[e - x] = vi;
                    am = fmax_abs(am, mi), av = fmax_abs(av, vi);
                }
                nm[b] = am, nv[b] = av;
            } else {
                for (size_t e = x; e < y; e++) {
                    const size_t j = e - lo;
                    float mi = dequantize(mw_qmap_signed8, mq[j], sm[b]), vi = dequantize(mw_qmap_unsigned8, vq[j], sv[b]);
                    moments(&q, g[j] * cf, &mi, &vi);
                    mb[e - x] = mi, vb[e - x] = vi;
                }
            }
            for (size_t e = x; e < y; e++) {
                const size_t j = e - lo;
                const float mi = mb[e - x], vi = vb[e - x];
                mq[j] = (unsigned char)quantize(mw_qmap_signed8, &LUTS[Q_S8], mi, am);
                vq[j] = (unsigned char)quantize(mw_qmap_unsigned8, &LUTS[Q_U8], vi, av);
                const float pi = p[j] * decay, denom = sqrtf(vi) / q.bc2s + q.eps;
                p[j] = pi - q.step * (mi / denom);
                g[j] = 0.0f;
            }
        }
    }
}

size_t mw_opt_pad_quantum(int optim) { return optim == MW_OPTIM_ADAMW8BIT ? MW_OPT_BLOCK8 : 16; }

int mw_opt_splits(const mw_opt_layout *L, size_t e) {
    if (L->kind != MW_OPTIM_ADAMW8BIT && L->kind != MW_OPTIM_ADAM4BIT) return 0;
    const size_t B = L->kind == MW_OPTIM_ADAMW8BIT ? MW_OPT_BLOCK8 : MW_OPT_BLOCK4;
    int lo = 0, hi = L->ntensors; /* the last tensor starting before e */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (L->t[mid].offset < e) lo = mid;
        else hi = mid;
    }
    const mw_opt_tensor *t = &L->t[lo]; /* tensors do not overlap: only it can hold e */
    return L->ntensors > 0 && t->offset < e && e < t->offset + t->numel && (e - t->offset) % B != 0;
}

int mw_opt_pass_needed(const mw_opt_layout *L, int pass, int split) {
    return L->kind == MW_OPTIM_ADAMW8BIT && pass == 0 ? split || L->tp > 1 : 1; /* --tp: the shards' maxima */
}

/* adam4bit. The new scales need every element's new moments first (v's row and column maxima span
 * the tensor), so pass 0 computes each element's moments once for the maxima, and pass 1 again for
 * the codes and the parameters. Maxima do not depend on order: a block of m shared by two rows'
 * threads merges by an atomic maximum of its bits (non-negative floats order as their bits do),
 * and each thread's column maxima merge at its end. */

static void q4_pass(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, size_t lo, size_t hi, float *p, float *g,
                    unsigned char *mq, unsigned char *vq, float *st, float *nsc) {
    const qadam q = qadam_of(hp);
    const size_t B = MW_OPT_BLOCK4, SH = 7; /* 128 = 1 << 7 */
    const float cf = hp->coef;
    FOR_SPANS(L, lo, hi, sp) {
        const mw_opt_tensor *t = &L->t[sp.i];
        if (t->split) { /* --tp: a shard (optim_tp.c) */
            mw_opt_tp_q4(L, hp, pass, sp.i, sp.x - t->offset, sp.y - t->offset, t->offset - lo, p, g, mq, vq, st, nsc);
            continue;
        }
        const float decay = decay_of(hp, t);
        const float *sm = st + L->sc_off[sp.i], *vs = st + L->st_off[sp.i];
        uint32_t *nm = (uint32_t *)(nsc + L->sc_off[sp.i]); /* bits of the new m scales */
        float *nvs = nsc + L->st_off[sp.i];
        const size_t o = t->offset, k0 = sp.x - o, k1 = sp.y - o;
        unsigned char *mqt = mq, *vqt = vq;
        float *pt = p, *gt = g;
        const size_t base = o - lo; /* element k of the tensor is j = base + k of the chunk */
        if (t->cols == 0) { /* 1-D: m's and v's blocks of 128 are the same; in parallel when two
                                blocks never share a byte of codes (the tensor starts even) */
            const size_t c0 = k0 >> SH, c1 = (k1 - 1) >> SH;
#pragma omp parallel for schedule(static) if (base % 2 == 0)
            for (size_t b = c0; b <= c1; b++) {
                const size_t x = b * B > k0 ? b * B : k0, y = (b + 1) * B < k1 ? (b + 1) * B : k1;
                float am = 0, av = nvs[b];
                for (size_t k = x; k < y; k++) {
                    const size_t j = base + k;
                    float mi = dequantize(mw_qmap_signed4, get4(mqt, j), sm[b]);
                    float vi = dequantize(mw_qmap_linear4, get4(vqt, j), vs[b]);
                    moments(&q, gt[j] * cf, &mi, &vi);
                    if (pass == 0) {
                        am = fmax_abs(am, mi);
                        if (vi > av) av = vi;
                        continue;
                    }
                    set4(mqt, j, quantize(mw_qmap_signed4, &LUTS[Q_S4], mi, ufloat(&nm[b])));
                    set4(vqt, j, quantize(mw_qmap_linear4, &LUTS[Q_L4], vi, nvs[b]));
                    const float pi = pt[j] * decay, denom = sqrtf(vi) / q.bc2s + q.eps;
                    pt[j] = pi - q.step * (mi / denom);
                    gt[j] = 0.0f;
                }
                if (pass == 0) umax(&nm[b], am), nvs[b] = av;
            }
            continue;
        }
        const size_t C = (size_t)t->cols, R = (size_t)t->rows, r0 = k0 / C, r1 = (k1 - 1) / C;
        float *ncol = nvs + R;
        const float *rowv = vs, *colv = vs + R;
        /* rows in parallel when two rows never share a byte of 4-bit codes (C even; the chunk and
         * the tensor start even) */
        const int par = C % 2 == 0 && base % 2 == 0;
        float *cpriv = (float *)(nsc + L->st_off[L->ntensors]);
#pragma omp parallel if (par) num_threads(L->nthreads)
        {
            float *mine = cpriv + (size_t)omp_get_thread_num() * L->maxcols;
            if (pass == 0)
                for (size_t c = 0; c < C; c++) mine[c] = 0;
#pragma omp for schedule(static)
            for (size_t r = r0; r <= r1; r++) {
                const size_t ca = r * C > k0 ? 0 : k0 - r * C, cb = (r + 1) * C < k1 ? C : k1 - r * C;
                float rm = nvs[r], am = 0;
                size_t blk = (r * C + ca) >> SH;
                for (size_t c = ca; c < cb; c++) {
                    const size_t k = r * C + c, j = base + k, b = k >> SH;
                    float mi = dequantize(mw_qmap_signed4, get4(mqt, j), sm[b]);
                    float vi = dequantize(mw_qmap_linear4, get4(vqt, j), fminf(rowv[r], colv[c]));
                    moments(&q, gt[j] * cf, &mi, &vi);
                    if (pass == 0) {
                        if (b != blk) umax(&nm[blk], am), am = 0, blk = b;
                        am = fmax_abs(am, mi);
                        if (vi > rm) rm = vi;
                        if (vi > mine[c]) mine[c] = vi;
                        continue;
                    }
                    set4(mqt, j, quantize(mw_qmap_signed4, &LUTS[Q_S4], mi, ufloat(&nm[b])));
                    set4(vqt, j, quantize(mw_qmap_linear4, &LUTS[Q_L4], vi, fminf(nvs[r], ncol[c])));
                    const float pi = pt[j] * decay, denom = sqrtf(vi) / q.bc2s + q.eps;
                    pt[j] = pi - q.step * (mi / denom);
                    gt[j] = 0.0f;
                }
                if (pass == 0) umax(&nm[blk], am), nvs[r] = rm;
            }
            if (pass == 0) {
#pragma omp critical(mw_q4_cols)
                for (size_t c = 0; c < C; c++)
                    if (mine[c] > ncol[c]) ncol[c] = mine[c];
            }
        }
    }
}

/* -- Adafactor and CAME -- */

/* Element k of tensor t's part on this rank: its index in the whole tensor (k itself, unless t is a
 * --tp shard: optim_tp.c), SIZE_MAX for a padding row (no element of the whole tensor). */
static inline size_t opt_whole(const mw_opt_tensor *t, size_t k) { return t->split ? mw_opt_tp_whole_index(t, k) : k; }

/* The clipped-before-division update u of element e (its index in the whole tensor) of tensor t:
 * factored, or from V. */
static inline float fac_u(const mw_opt_tensor *t, const fac *f, const float *V, size_t e, float gi) {
    if (t->cols > 0) {
        const size_t GC = opt_cols(t);
        const float s = f->rf[e / GC] * f->cf[e % GC];
        return s * gi;
    }
    return (1.0f / sqrtf(V[e])) * gi;
}

/* Row and column sums (doubles) of val(k) over the tensor's part [k0, k1): each whole row's
 * (column's) elements in order, as one process adds them (a --tp shard's part of them, when another
 * rank holds the rest). */
#define ROWCOL_SUMS(t, f, k0, k1, VAL)                                                                  \
    do {                                                                                               \
        const size_t lc_ = (size_t)(t)->cols, GC_ = opt_cols(t), r0_ = (k0) / lc_, r1_ = ((k1) - 1) / lc_; \
        _Pragma("omp parallel for schedule(static)")                                                   \
        for (size_t r = r0_; r <= r1_; r++) {                                                          \
            const size_t e0_ = opt_whole((t), r * lc_);                                    \
            if (e0_ == SIZE_MAX) continue;                                                             \
            const size_t x_ = r * lc_ > (k0) ? r * lc_ : (k0), y_ = (r + 1) * lc_ < (k1) ? (r + 1) * lc_ : (k1); \
            double s_ = (f).rows[e0_ / GC_];                                                           \
            for (size_t k = x_; k < y_; k++) s_ += (double)(VAL);                                      \
            (f).rows[e0_ / GC_] = s_;                                                                  \
        }                                                                                              \
        const size_t nt_ = (lc_ + 63) / 64;                                                            \
        _Pragma("omp parallel for schedule(static)")                                                   \
        for (size_t tl = 0; tl < nt_; tl++) {                                                          \
            const size_t c0_ = tl * 64, c1_ = c0_ + 64 < lc_ ? c0_ + 64 : lc_;                         \
            for (size_t r = r0_; r <= r1_; r++) {                                                      \
                const size_t e0_ = opt_whole((t), r * lc_);                                \
                if (e0_ == SIZE_MAX) continue;                                                         \
                const size_t x_ = r * lc_ + c0_ > (k0) ? r * lc_ + c0_ : (k0);                         \
                const size_t y_ = r * lc_ + c1_ < (k1) ? r * lc_ + c1_ : (k1);                         \
                for (size_t k = x_; k < y_; k++) (f).cols[(e0_ + k - r * lc_) % GC_] += (double)(VAL);  \
            }                                                                                          \
        }                                                                                              \
    } while (0)

/* Pass `pass` of tensor i over its elements [k0, k1) (one process's, or a --tp shard's), the chunk's
 * arrays at element base of the tensor's. */
static void fac_span(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, int i, size_t k0, size_t k1, size_t base,
                     float *p, float *g, float *m, float *st, double *sc) {
    const mw_opt_tensor *t = &L->t[i];
    const int came = L->kind == MW_OPTIM_CAME;
    const float cf = hp->coef, eps1 = (float)hp->eps, eps2 = (float)hp->eps2, b1 = (float)hp->beta1;
    const float a1 = (float)(1.0 - hp->beta1), lr = (float)hp->lr, decay = decay_of(hp, t);
    const fac f = fac_of(L, sc, i);
    float *V = t->cols > 0 ? NULL : st + L->st_off[i];
    const float dv = (float)*f.d;
    if (pass == 0) { /* the second moment's statistics: g*g + eps1 */
        if (t->cols > 0) ROWCOL_SUMS(t, f, k0, k1, (g[base + k] * cf) * (g[base + k] * cf) + eps1);
    } else if (pass == 1) { /* 1-D: V; every tensor (shard): its pieces of sum(u*u), by its own elements */
        const double beta2t = came ? hp->beta2 : 1.0 - pow((double)hp->t, hp->decay_rate);
        const float b2 = (float)beta2t, a2 = (float)(1.0 - beta2t);
        const size_t p0 = k0 / MW_OPT_PIECE, p1 = (k1 - 1) / MW_OPT_PIECE;
#pragma omp parallel for schedule(static)
        for (size_t pc = p0; pc <= p1; pc++) {
            const size_t x = pc * MW_OPT_PIECE > k0 ? pc * MW_OPT_PIECE : k0;
            const size_t y = (pc + 1) * MW_OPT_PIECE < k1 ? (pc + 1) * MW_OPT_PIECE : k1;
            double s = f.pieces[pc];
            for (size_t k = x; k < y; k++) {
                const size_t e = opt_whole(t, k);
                if (e == SIZE_MAX) continue;
                const float gi = g[base + k] * cf;
                if (V) {
                    const float v1 = V[e] * b2, v2 = a2 * (gi * gi + eps1);
                    V[e] = v1 + v2;
                }
                const float u = fac_u(t, &f, V, e, gi);
                s += (double)u * u;
            }
            f.pieces[pc] = s;
        }
    } else if (pass == 2) { /* the update (Adafactor), or CAME's first moment and residual */
#pragma omp parallel for schedule(static)
        for (size_t k = k0; k < k1; k++) {
            const size_t e = opt_whole(t, k);
            if (e == SIZE_MAX) {
                if (!came) g[base + k] = 0.0f;
                continue;
            }
            const float gi = g[base + k] * cf;
            float u = fac_u(t, &f, V, e, gi);
            u = u / dv;
            if (came) {
                const float m1 = m[base + k] * b1, m2 = a1 * u;
                m[base + k] = m1 + m2;
                continue;
            }
            u = u * lr;
            if (m) {
                const float m1 = m[base + k] * b1, m2 = a1 * u;
                m[base + k] = m1 + m2;
                u = m[base + k];
            }
            p[base + k] = p[base + k] * decay;
            p[base + k] = p[base + k] - u;
            g[base + k] = 0.0f;
        }
        if (came) {
            if (t->cols > 0) {
#define RES(k) ((fac_u(t, &f, V, opt_whole(t, (k)), g[base + (k)] * cf) / dv - m[base + (k)]) * \
                    (fac_u(t, &f, V, opt_whole(t, (k)), g[base + (k)] * cf) / dv - m[base + (k)]) + eps2)
                ROWCOL_SUMS(t, f, k0, k1, RES(k));
#undef RES
            }
#pragma omp parallel for schedule(static)
            for (size_t k = k0; k < k1; k++) g[base + k] = 0.0f;
        }
    } else { /* CAME's update from m and the confidence factors (in rf, cf now) */
#pragma omp parallel for schedule(static)
        for (size_t k = k0; k < k1; k++) {
            const size_t e = opt_whole(t, k);
            if (e == SIZE_MAX) continue;
            float upd = m[base + k];
            if (t->cols > 0) {
                const size_t GC = opt_cols(t);
                const float s = f.rf[e / GC] * f.cf[e % GC];
                upd = s * upd;
            }
            p[base + k] = p[base + k] * decay;
            p[base + k] = p[base + k] - upd * lr;
        }
    }
}

static void fac_pass(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, size_t lo, size_t hi, float *p, float *g,
                     float *m, float *st, double *sc) {
    FOR_SPANS(L, lo, hi, sp) {
        const mw_opt_tensor *t = &L->t[sp.i];
        fac_span(L, hp, pass, sp.i, sp.x - t->offset, sp.y - t->offset, t->offset - lo, p, g, m, st, sc);
    }
}

/* R, C (or RR, RC) from the sums: x = x*b + a*(float)(sum/len), then the factors. */
static void fac_update(const mw_opt_tensor *t, const fac *f, float *R, float *Cc, float b, float a) {
    const size_t r = opt_rows(t), c = opt_cols(t);
    for (size_t i = 0; i < r; i++) {
        const float x1 = R[i] * b, x2 = a * (float)(f->rows[i] / (double)c);
        R[i] = x1 + x2;
    }
    for (size_t j = 0; j < c; j++) {
        const float x1 = Cc[j] * b, x2 = a * (float)(f->cols[j] / (double)r);
        Cc[j] = x1 + x2;
    }
    double s = 0.0;
    for (size_t i = 0; i < r; i++) s += R[i];
    const float rmean = (float)(s / (double)r);
    for (size_t i = 0; i < r; i++) f->rf[i] = 1.0f / sqrtf(R[i] / rmean);
    for (size_t j = 0; j < c; j++) f->cf[j] = 1.0f / sqrtf(Cc[j]);
    memset(f->rows, 0, sizeof(double) * r);
    memset(f->cols, 0, sizeof(double) * c);
}

void mw_opt_begin(const mw_opt_layout *L, const mw_opt_hp *hp, void *state, void *scratch) {
    (void)hp, (void)state;
    if (L->scratch_bytes) memset(scratch, 0, L->scratch_bytes);
}

void mw_opt_end_pass(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, void *state, void *scratch) {
    float *st = state;
    double *sc = scratch;
    switch (L->kind) {
    case MW_OPTIM_ADAMW8BIT:
    case MW_OPTIM_ADAM4BIT:
        if (pass == 1) memcpy(st, scratch, L->state_bytes); /* the new scales */
        break;
    case MW_OPTIM_ADAFACTOR:
    case MW_OPTIM_CAME: {
        const int came = L->kind == MW_OPTIM_CAME;
        const double beta2t = came ? hp->beta2 : 1.0 - pow((double)hp->t, hp->decay_rate);
        for (int i = 0; i < L->ntensors; i++) {
            const mw_opt_tensor *t = &L->t[i];
            const fac f = fac_of(L, sc, i);
            float *R = st + L->st_off[i], *Cc = R + (t->cols > 0 ? opt_rows(t) : 0);
            if (pass == 0 && t->cols > 0) {
                fac_update(t, &f, R, Cc, (float)beta2t, (float)(1.0 - beta2t));
            } else if (pass == 1) {
                double s = 0.0;
                const size_t np = npieces(opt_numel(t));
                for (size_t k = 0; k < np; k++) s += f.pieces[k];
                const float rms = (float)sqrt(s / (double)opt_numel(t));
                const float q = rms / (float)hp->clip_threshold;
                *f.d = q > 1.0f ? q : 1.0f;
            } else if (pass == 2 && came && t->cols > 0) {
                float *RR = Cc + opt_cols(t), *RC = RR + opt_rows(t);
                fac_update(t, &f, RR, RC, (float)hp->beta3, (float)(1.0 - hp->beta3));
            }
        }
        break;
    }
    default: break;
    }
}

void mw_opt_chunk(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, size_t lo, size_t hi, float *p, float *g,
                  void *m, void *v, void *state, void *scratch) {
    if (lo >= hi) return;
    switch (L->kind) {
    case MW_OPTIM_ADAMW: adamw_pass(L, hp, lo, hi, p, g, m, v); break;
    case MW_OPTIM_SGD: sgd_pass(L, hp, lo, hi, p, g, m); break;
    case MW_OPTIM_ADAMW8BIT: q8_pass(L, hp, pass, lo, hi, p, g, m, v, state, scratch); break;
    case MW_OPTIM_ADAM4BIT: q4_pass(L, hp, pass, lo, hi, p, g, m, v, state, scratch); break;
    case MW_OPTIM_ADAFACTOR:
    case MW_OPTIM_CAME: fac_pass(L, hp, pass, lo, hi, p, g, m, state, scratch); break;
    default: break;
    }
}
