/* What the optimizers' files share (optim.c: the passes over whole tensors; optim_tp.c: over a
 * tensor-parallel rank's shards): the quantisers, the moments, the factored statistics' scratch. */
#ifndef MW_OPTIM_IMPL_H
#define MW_OPTIM_IMPL_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "optim.h"

/* A tensor's whole dims (its rows, columns: 0 when 1-D, elements) as one process holds it: the
 * small state and the scratch are laid out by these on every rank, so that a tensor-parallel
 * rank's are one process's (and its checkpoint's). */
static inline size_t opt_rows(const mw_opt_tensor *t) { return t->split ? (size_t)t->grows : (size_t)t->rows; }
static inline size_t opt_cols(const mw_opt_tensor *t) { return t->split ? (size_t)t->gcols : (size_t)t->cols; }
static inline size_t opt_numel(const mw_opt_tensor *t) { return t->split ? opt_rows(t) * (t->gcols ? (size_t)t->gcols : 1) : t->numel; }

/* The same answer from a table: per bucket of floats sharing their top 16 bits (sign, exponent,
 * 7 mantissa bits), the codes nearest its smallest and its largest value bound the code of any
 * value between (the nearest code never decreases as y grows), and the first minimum inside those
 * bounds is the first minimum over the whole map. */
typedef struct qlut {
    unsigned char lo[65536], hi[65536];
} qlut;
enum { Q_S8, Q_U8, Q_S4, Q_L4 }; /* LUTS[k]: the table of signed8, unsigned8, signed4, linear4 */
extern qlut mw_opt_luts[4]; /* built by mw_opt_layout_init for the optimizer that quantises */
#define LUTS mw_opt_luts

static inline int quantize(const float *map, const qlut *t, float x, float s) {
    const float y = s > 0 ? x / s : 0.0f;
    uint32_t u;
    memcpy(&u, &y, 4);
    int k = t->lo[u >> 16];
    const int e = t->hi[u >> 16];
    float best = fabsf(map[k] - y);
    for (int j = k + 1; j <= e; j++) {
        const float d = fabsf(map[j] - y);
        if (d < best) best = d, k = j;
    }
    return k;
}
static inline float dequantize(const float *map, int k, float s) { return s > 0 ? map[k] * s : 0.0f; }

static inline int get4(const unsigned char *b, size_t j) { return (b[j >> 1] >> ((j & 1) * 4)) & 15; }
static inline void set4(unsigned char *b, size_t j, int k) {
    const int sh = (int)(j & 1) * 4;
    b[j >> 1] = (unsigned char)((b[j >> 1] & ~(15 << sh)) | (k << sh));
}

static inline size_t npieces(size_t numel) { return (numel + MW_OPT_PIECE - 1) / MW_OPT_PIECE; }

static inline float decay_of(const mw_opt_hp *hp, const mw_opt_tensor *t) {
    return (float)(1.0 - hp->lr * (t->decay ? hp->weight_decay : 0.0));
}

typedef struct qadam {
    float b1, b2, a1, a2, step, bc2s, eps;
} qadam;

static inline qadam qadam_of(const mw_opt_hp *hp) {
    qadam q = {(float)hp->beta1, (float)hp->beta2, (float)(1.0 - hp->beta1), (float)(1.0 - hp->beta2),
               (float)(hp->lr / (1.0 - pow(hp->beta1, hp->t))), (float)sqrt(1.0 - pow(hp->beta2, hp->t)),
               (float)hp->eps};
    return q;
}

/* The new moments of one element from the old ones (AdamW's update, op for op). */
static inline void moments(const qadam *q, float gi, float *mi, float *vi) {
    float m1 = *mi * q->b1, m2 = q->a1 * gi;
    float v1 = *vi * q->b2, v2 = q->a2 * gi * gi;
    *mi = m1 + m2;
    *vi = v1 + v2;
}

static inline float fmax_abs(float a, float b) { return a > fabsf(b) ? a : fabsf(b); }

static inline void umax(uint32_t *a, float x) {
    if (!(x > 0)) return;
    uint32_t u, cur = __atomic_load_n(a, __ATOMIC_RELAXED);
    memcpy(&u, &x, 4);
    while (u > cur && !__atomic_compare_exchange_n(a, &cur, u, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static inline float ufloat(const uint32_t *a) {
    float x;
    memcpy(&x, a, 4);
    return x;
}

typedef struct fac {
    double *rows, *cols, *pieces, *d; /* row and column sums, sum-of-squares pieces, the divisor */
    float *rf, *cf;                   /* the row and column factors */
} fac;

static inline fac fac_of(const mw_opt_layout *L, double *sc, int i) {
    const mw_opt_tensor *t = &L->t[i];
    double *b = sc + L->sc_off[i];
    fac f = {0};
    const size_t r = t->cols > 0 ? opt_rows(t) : 0, c = t->cols > 0 ? opt_cols(t) : 0;
    f.rows = b, f.cols = b + r, f.pieces = b + r + c, f.d = f.pieces + npieces(opt_numel(t));
    f.rf = (float *)(f.d + 1), f.cf = f.rf + r;
    return f;
}

/* optim_tp.c: pass `pass` of the shard t (tensor i) over its elements [k0, k1), the chunk's
 * arrays at element base of the tensor's (as optim.c's passes) */
void mw_opt_tp_q8(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, int i, size_t k0, size_t k1, size_t base,
                  float *p, float *g, unsigned char *mq, unsigned char *vq, const float *st, float *nsc);
void mw_opt_tp_q4(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, int i, size_t k0, size_t k1, size_t base,
                  float *p, float *g, unsigned char *mq, unsigned char *vq, const float *st, float *nsc);
#endif
