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

mw_status mw_model_tp_take_state(mw_model *m, int part, const void *buf, uint64_t byte_off, size_t nbytes) {
    const int bits = part >= 0 && part < 2 ? m->opt.bits[part] : 0;
    if (!bits || (byte_off * 8) % (uint64_t)bits || (nbytes * 8) % (uint64_t)bits)
        return mw_fail(MW_ERR_ARG, "internal: --tp: optimizer array %d at byte %llu", part, (unsigned long long)byte_off);
    size_t *o;
    MW_TRY(mw_model_tp_whole_offsets(m, &o));
    const size_t e0 = (size_t)(byte_off * 8 / (uint64_t)bits), e1 = e0 + nbytes * 8 / (size_t)bits;
    const int T = m->cfg.tp, r = mw_tp_rank(m);
    unsigned char *a = part ? m->v : m->m;
    const unsigned char *in = buf;
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        const size_t x = o[i] > e0 ? o[i] : e0, n = (size_t)t->gdims[0] * (t->gdims[1] ? (size_t)t->gdims[1] : 1);
        const size_t y = o[i] + n < e1 ? o[i] + n : e1;
#pragma omp parallel for schedule(static) if (y > x + 65536)
        for (size_t ge = x; ge < y; ge++) {
            size_t l;
            if (!mw_tp_local_index(t, T, r, ge - o[i], &l)) continue;
            const size_t le = t->offset + l, w = ge - e0; /* this rank's element; the window's */
            if (bits == 32) {
                memcpy(a + le * 4, in + w * 4, 4);
            } else if (bits == 8) {
                a[le] = in[w];
            } else {
                const int k = (in[w >> 1] >> ((w & 1) * 4)) & 15, sh = (int)(le & 1) * 4;
#pragma omp atomic
                a[le >> 1] &= (unsigned char)~(15 << sh);
#pragma omp atomic
                a[le >> 1] |= (unsigned char)(k << sh);
            }
        }
    }
    free(o);
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
