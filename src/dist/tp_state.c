/* A tensor-parallel rank's optimizer state in the single-process checkpoint (model.h's
 * mw_model_tp_state_*; docs/tp.md). The per-element arrays (M, V: 32, 8 or 4 bits an element) are
 * laid out by one process's flat buffer, whose tensors are the whole ones, padded as one process
 * pads them: a rank takes its elements of it when loading (rank 0 writes them, gathered a part at
 * a time, through mw_model_tp_gather_part). The small state (scales, factored rows and columns,
 * 1-D second moments) is laid out by the whole tensors on every rank (src/optim/optim_tp.c):
 * every rank holds the same, except a 1-D shard's second moments (Adafactor, CAME), which each
 * rank keeps for its own elements alone; mw_model_tp_state_whole assembles them.
 * May call: src/dist/tp.c (the shards, the collectives), src/optim (the layout). */
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../graph/graph_impl.h"
#include "../graph/model.h"
#include "tp.h"

mw_status mw_model_tp_whole_offsets(const mw_model *m, size_t **out) {
    size_t *o = malloc(sizeof(size_t) * ((size_t)m->ntensors + 1));
    if (!o) return mw_fail(MW_ERR_NOMEM, "out of memory laying out a checkpoint");
    const size_t q = m->pad_q ? m->pad_q : 16;
    size_t at = 0;
    for (int i = 0; i < m->ntensors; i++) { /* mw_graph_add_tensor_split's rule, over the whole tensors */
        const mw_tensor *t = &m->tensors[i];
        const size_t n = (size_t)t->gdims[0] * (t->gdims[1] ? (size_t)t->gdims[1] : 1);
        o[i] = at;
        if (!t->pad) at += n;
        else if (q == 16) at += (n + 15) / 16 * 16;
        else at = (at + n + q - 1) / q * q;
    }
    o[m->ntensors] = at;
    *out = o;
    return MW_OK;
}

uint64_t mw_model_tp_state_bytes(const mw_model *m, int part) {
    if (m->cfg.tp <= 1 || part == 2) return mw_model_state_bytes(m, part);
    if (m->cfg.inference || part < 0 || part > 2 || !m->opt.bits[part]) return 0;
    size_t *o;
    if (mw_model_tp_whole_offsets(m, &o) != MW_OK) return 0;
    const uint64_t b = mw_opt_array_bytes(m->opt.bits[part], o[m->ntensors]);
    free(o);
    return b;
}

/* A window of the optimizer's array part (0 M, 1 V) of bits an element, wherever it lives (memory, or
 * the disk tier's staging, mw_model_state_map): flat elements [lo, lo + n) at p. */
typedef struct state_win {
    unsigned char *p;
    size_t lo, n;
} state_win;

/* the byte of flat element x (its nibble's, at 4 bits), the window moved on to it when outside */
static mw_status win_at(mw_model *m, int part, int bits, size_t x, state_win *w, unsigned char **at) {
    if (!w->p || x < w->lo || x >= w->lo + w->n) {
        const size_t x0 = bits == 4 ? x & ~(size_t)1 : x;
        void *p;
        size_t nb;
        MW_TRY(mw_model_state_map(m, part, (uint64_t)x0 * (size_t)bits / 8, &p, &nb));
        w->p = p, w->lo = x0, w->n = nb * 8 / (size_t)bits;
        if (w->n == 0 || x >= w->lo + w->n) return mw_fail(MW_ERR_ARG, "internal: --tp: an empty window of optimizer array %d", part);
    }
    *at = w->p + (x - w->lo) * (size_t)bits / 8;
    return MW_OK;
}

mw_status mw_model_tp_take_state(mw_model *m, int part, const void *buf, uint64_t byte_off, size_t nbytes) {
    const int bits = part >= 0 && part < 2 ? m->opt.bits[part] : 0;
    if (!bits || (byte_off * 8) % (uint64_t)bits || (nbytes * 8) % (uint64_t)bits)
        return mw_fail(MW_ERR_ARG, "internal: --tp: optimizer array %d at byte %llu", part, (unsigned long long)byte_off);
    size_t *o;
    MW_TRY(mw_model_tp_whole_offsets(m, &o));
    const size_t e0 = (size_t)(byte_off * 8 / (uint64_t)bits), e1 = e0 + nbytes * 8 / (size_t)bits;
    const int T = m->cfg.tp, r = mw_tp_rank(m);
    const unsigned char *in = buf;
    state_win w = {NULL, 0, 0}; /* in the order of this rank's elements: the disk tier's windows move on */
    mw_status s = MW_OK;
    for (int i = 0; i < m->ntensors && s == MW_OK; i++) {
        const mw_tensor *t = &m->tensors[i];
        const size_t x = o[i] > e0 ? o[i] : e0, n = (size_t)t->gdims[0] * (t->gdims[1] ? (size_t)t->gdims[1] : 1);
        const size_t y = o[i] + n < e1 ? o[i] + n : e1;
        for (size_t ge = x; ge < y && s == MW_OK; ge++) {
            size_t l;
            unsigned char *a = NULL;
            if (!mw_tp_local_index(t, T, r, ge - o[i], &l)) continue;
            const size_t le = t->offset + l, wi = ge - e0; /* this rank's element; the window's */
            if ((s = win_at(m, part, bits, le, &w, &a)) != MW_OK) break;
            if (bits == 32) {
                memcpy(a, in + wi * 4, 4);
            } else if (bits == 8) {
                *a = in[wi];
            } else {
                const int k = (in[wi >> 1] >> ((wi & 1) * 4)) & 15, sh = (int)(le & 1) * 4;
                *a = (unsigned char)((*a & ~(15 << sh)) | (k << sh));
            }
        }
    }
    free(o);
    return s;
}

mw_status mw_model_tp_take_moment(mw_model *m, int i, int which, const float *part, size_t g0, size_t n) {
    const mw_tensor *t = &m->tensors[i];
    const int T = m->cfg.tp > 1 ? m->cfg.tp : 1, r = mw_tp_rank(m);
    float *p = NULL;
    size_t lo = 0, k = 0; /* the window: this rank's elements [lo, lo + k) of the tensor */
    for (size_t e = 0; e < n; e++) {
        size_t l;
        if (!mw_tp_local_index(t, T, r, g0 + e, &l)) continue;
        if (!p || l < lo || l >= lo + k) {
            MW_TRY(mw_model_moment_map(m, which, i, l, &p, &k));
            lo = l;
        }
        p[l - lo] = part[e];
    }
    return MW_OK;
}

mw_status mw_model_tp_state_whole(mw_model *m, float **out) {
    const uint64_t bytes = m->opt.state_bytes;
    *out = NULL;
    float *w = malloc(bytes ? (size_t)bytes : 1);
    if (!w) return mw_fail(MW_ERR_NOMEM, "out of memory gathering the optimizer's small state");
    if (bytes) memcpy(w, m->ostate, (size_t)bytes);
    const mw_opt_layout *L = &m->opt;
    mw_status s = MW_OK;
    if (L->kind == MW_OPTIM_ADAFACTOR || L->kind == MW_OPTIM_CAME) {
        const int T = m->cfg.tp, r = mw_tp_rank(m);
        for (int i = 0; i < m->ntensors && s == MW_OK; i++) { /* a 1-D shard's V: each rank's elements, summed (exact: one is not zero) */
            const mw_tensor *t = &m->tensors[i];
            if (t->split == MW_TS_WHOLE || t->ndim != 1) continue;
            float *v = w + L->st_off[i];
            const size_t n = (size_t)t->gdims[0];
            for (size_t e = 0; e < n; e++) {
                size_t l;
                if (!mw_tp_local_index(t, T, r, e, &l)) v[e] = 0.0f;
            }
            mw_tp_allreduce(m, v, n);
            s = mw_graph_io_check(m);
        }
    }
    if (s != MW_OK) {
        free(w);
        return s;
    }
    *out = w;
    return MW_OK;
}
