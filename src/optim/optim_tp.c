/* The optimizers over a tensor-parallel rank's shards (optim.h's split tensors; docs/tp.md). A
 * shard computes, element for element, what one process computes for those elements: its blocks,
 * rows and columns are the whole tensor's (an element's whole index picks them), the small state
 * and the scratch are laid out by the whole tensor's dims, and each pass's statistics are joined
 * over the ranks (mw_opt_tp_join) before mw_opt_end_pass:
 * - adamw8bit, adam4bit: the new scales are maxima (exact in any order): each rank's elements'
 *   maxima, then their maximum over the ranks. The codes, scales and parameters are one process's
 *   bits for the same gradients.
 * - adafactor, came: the row and column sums (doubles) of the rows or columns a shard holds whole
 *   are one process's sums; the others are each rank's partial sums added in rank order, and so
 *   is the sum of squares that clips the update: within the tensor-parallel bound (docs/tp.md).
 * - sgd, adamw: elementwise, nothing to join.
 * A padding row (the vocabulary's beyond V) is no element of the whole tensor: never read, its
 * gradient zeroed. */
#include <omp.h>

#include "optim_impl.h"

size_t mw_opt_tp_whole_index(const mw_opt_tensor *t, size_t k) {
    const size_t lc = t->cols > 0 ? (size_t)t->cols : 1, lr = k / lc, c = k % lc;
    if (t->split == MW_OPT_SHARD_COLS) {
        const size_t gc = (size_t)t->rank * lc + c;
        return gc < (size_t)t->gcols ? lr * (size_t)t->gcols + gc : SIZE_MAX;
    }
    const size_t G = t->groups > 0 ? (size_t)t->groups : 1, gsz = (size_t)t->grows / G, per = (size_t)t->per;
    const size_t rr = (size_t)t->rank * per + lr % per;
    return rr < gsz ? ((lr / per) * gsz + rr) * lc + c : SIZE_MAX;
}

int mw_opt_tp_join(const mw_opt_layout *L, int pass) {
    if (L->tp <= 1) return MW_OPT_TPJ_NONE;
    switch (L->kind) {
    case MW_OPTIM_ADAMW8BIT:
    case MW_OPTIM_ADAM4BIT: return pass == 0 ? MW_OPT_TPJ_MAX : MW_OPT_TPJ_NONE;
    case MW_OPTIM_ADAFACTOR:
    case MW_OPTIM_CAME:
        if (pass == 1) return MW_OPT_TPJ_PIECES;
        return pass == 0 || (pass == 2 && L->kind == MW_OPTIM_CAME) ? MW_OPT_TPJ_SUMS : MW_OPT_TPJ_NONE;
    default: return MW_OPT_TPJ_NONE;
    }
}

double *mw_opt_tp_sums(const mw_opt_layout *L, void *scratch, int i, size_t *n) {
    const mw_opt_tensor *t = &L->t[i];
    *n = 0;
    if (!t->split || t->cols <= 0 || (L->kind != MW_OPTIM_ADAFACTOR && L->kind != MW_OPTIM_CAME)) return NULL;
    const fac f = fac_of(L, scratch, i);
    *n = opt_rows(t) + opt_cols(t);
    return f.rows; /* the columns' sums follow the rows' */
}

double *mw_opt_tp_collapse(const mw_opt_layout *L, void *scratch, int i) {
    const mw_opt_tensor *t = &L->t[i];
    if (!t->split || (L->kind != MW_OPTIM_ADAFACTOR && L->kind != MW_OPTIM_CAME)) return NULL;
    const fac f = fac_of(L, scratch, i);
    const size_t np = npieces(opt_numel(t));
    double s = 0.0;
    for (size_t k = 0; k < np; k++) s += f.pieces[k], f.pieces[k] = 0.0;
    f.pieces[0] = s;
    return f.pieces;
}

/* -- 8-bit AdamW: blocks of 2048 of the whole tensor's elements -- */

void mw_opt_tp_q8(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, int i, size_t k0, size_t k1, size_t base,
                  float *p, float *g, unsigned char *mq, unsigned char *vq, const float *st, float *nsc) {
    const mw_opt_tensor *t = &L->t[i];
    const qadam q = qadam_of(hp);
    const size_t B = MW_OPT_BLOCK8;
    const float cf = hp->coef, decay = decay_of(hp, t);
    const float *sm = st + L->sc_off[i], *sv = st + L->st_off[i];
    float *nm = nsc + L->sc_off[i], *nv = nsc + L->st_off[i];
#pragma omp parallel for schedule(static)
    for (size_t k = k0; k < k1; k++) {
        const size_t j = base + k, e = mw_opt_tp_whole_index(t, k);
        if (e == SIZE_MAX) {
            if (pass == 1) g[j] = 0.0f;
            continue;
        }
        const size_t b = e / B;
        float mi = dequantize(mw_qmap_signed8, mq[j], sm[b]), vi = dequantize(mw_qmap_unsigned8, vq[j], sv[b]);
        moments(&q, g[j] * cf, &mi, &vi);
        if (pass == 0) { /* the block's maxima: this rank's elements of it */
            umax((uint32_t *)(void *)&nm[b], fabsf(mi)), umax((uint32_t *)(void *)&nv[b], fabsf(vi));
            continue;
        }
        mq[j] = (unsigned char)quantize(mw_qmap_signed8, &LUTS[Q_S8], mi, nm[b]);
        vq[j] = (unsigned char)quantize(mw_qmap_unsigned8, &LUTS[Q_U8], vi, nv[b]);
        const float pi = p[j] * decay, denom = sqrtf(vi) / q.bc2s + q.eps;
        p[j] = pi - q.step * (mi / denom);
        g[j] = 0.0f;
    }
}

/* -- 4-bit Adam: m's blocks of 128, v's rows and columns (1-D: blocks of 128) of the whole tensor -- */

void mw_opt_tp_q4(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, int i, size_t k0, size_t k1, size_t base,
                  float *p, float *g, unsigned char *mq, unsigned char *vq, const float *st, float *nsc) {
    const mw_opt_tensor *t = &L->t[i];
    const qadam q = qadam_of(hp);
    const float cf = hp->coef, decay = decay_of(hp, t);
    const int fact = t->cols > 0;
    const size_t GR = opt_rows(t), GC = opt_cols(t);
    const float *sm = st + L->sc_off[i], *vs = st + L->st_off[i], *colv = vs + GR;
    uint32_t *nm = (uint32_t *)(void *)(nsc + L->sc_off[i]);
    float *nvs = nsc + L->st_off[i], *ncol = nvs + GR;
    const size_t j0 = base + k0, j1 = base + k1;
    /* a pair of elements at a time: two threads never write one byte of codes */
#pragma omp parallel for schedule(static)
    for (size_t pr = j0 / 2; pr <= (j1 - 1) / 2; pr++) {
        for (size_t j = pr * 2; j < pr * 2 + 2; j++) {
            if (j < j0 || j >= j1) continue;
            const size_t k = j - base, e = mw_opt_tp_whole_index(t, k);
            if (e == SIZE_MAX) {
                if (pass == 1) g[j] = 0.0f;
                continue;
            }
            const size_t b = e >> 7, gr = fact ? e / GC : 0, gc = fact ? e % GC : 0;
            float mi = dequantize(mw_qmap_signed4, get4(mq, j), sm[b]);
            float vi = dequantize(mw_qmap_linear4, get4(vq, j), fact ? fminf(vs[gr], colv[gc]) : vs[b]);
            moments(&q, g[j] * cf, &mi, &vi);
            if (pass == 0) {
                umax(&nm[b], fabsf(mi));
                if (fact) umax((uint32_t *)(void *)&nvs[gr], vi), umax((uint32_t *)(void *)&ncol[gc], vi);
                else umax((uint32_t *)(void *)&nvs[b], vi);
                continue;
            }
            set4(mq, j, quantize(mw_qmap_signed4, &LUTS[Q_S4], mi, ufloat(&nm[b])));
            set4(vq, j, quantize(mw_qmap_linear4, &LUTS[Q_L4], vi, fact ? fminf(nvs[gr], ncol[gc]) : nvs[b]));
            const float pi = p[j] * decay, denom = sqrtf(vi) / q.bc2s + q.eps;
            p[j] = pi - q.step * (mi / denom);
            g[j] = 0.0f;
        }
    }
}

/* Adafactor and CAME: optim.c's fac_pass steps a shard as a whole tensor, each element by its index
 * in the whole tensor (opt_whole: mw_opt_tp_whole_index), its rows' and columns' sums the whole's. */
