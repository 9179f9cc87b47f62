/* Narrow formats of the disk tier (graph_impl.h; issue 35). Owns: how the blocks' parameters and
 * gradients are stored on disk under --precision bf16, and the conversions between a block slot's
 * fp32 and its narrow bytes, in place.
 *
 *   - Gradients (mw_graph_grads16_disk): a block's gradients accumulate in an fp32 slot during its
 *     backward and are rounded to bfloat16 when it ends (what bf16 keeps in memory, g16); on disk
 *     they are those 2 bytes, not the fp32 value of them. Read back to accumulate into, they are
 *     widened: the same floats.
 *   - Parameters (mw_graph_params16, --offload all): the fp32 master (P) is read and written by the
 *     optimizer alone; forward and backward read H, its bfloat16 copy, which the optimizer's pass
 *     that writes P writes too. Every matrix of a block is read by bfloat16 products alone, which
 *     round their operands to bfloat16 as they pack them (round to nearest even, denormals to
 *     zero): the copy is those rounded values, and rounding them again changes nothing, so the
 *     products see the same operands. The blocks' vectors (norms' weights, biases) are read in
 *     fp32 by fp32 arithmetic: their fp32 values stay in memory (params_vec, planned), copied
 *     over the widened copy when a block is bound. A model declares that its blocks' matrices are
 *     read by products alone (mw_model_def.params16); for the others P is read as before.
 *
 * The conversions run in the slot itself: the narrow bytes at its start, the floats over the whole
 * of it, in rounds whose sources and destinations do not overlap, each on the OpenMP threads
 * (elementwise, so the same bits). */
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../kernels/cpu/gemm.h"
#include "graph_impl.h"
#include "model.h"

#define SEQ 4096 /* elements converted one by one, in order, before (narrow) or after (widen) the rounds */

void mw_graph_widen_inplace(float *buf, size_t n) {
    uint16_t *h = (uint16_t *)buf;
    size_t hi = n;
    while (hi > SEQ) { /* floats [lo, hi) (bytes 4lo..) from halves [lo, hi) (bytes 2lo..2hi): 4lo >= 2hi */
        const size_t lo = (hi + 1) / 2;
        mw_bf16_load_mt(buf + lo, h + lo, hi - lo);
        hi = lo;
    }
    for (size_t i = hi; i-- > 0;) { /* down: float i covers halves 2i, 2i + 1 >= i, already read */
        const uint16_t v = h[i];
        buf[i] = mw_bf16_widen(v);
    }
}

void mw_graph_narrow_inplace(float *buf, size_t n) {
    uint16_t *h = (uint16_t *)buf;
    size_t hi = n < SEQ ? n : SEQ;
    for (size_t i = 0; i < hi; i++) { /* up: half i lies in float i / 2 <= i, already read */
        const float x = buf[i];
        mw_bf16_store(h + i, &x, 1);
    }
    while (hi < n) { /* halves [hi, e) (bytes 2hi..2e <= 4hi) from floats [hi, e) (bytes 4hi..) */
        const size_t e = 2 * hi < n ? 2 * hi : n;
        mw_bf16_store_mt(h + hi, buf + hi, e - hi);
        hi = e;
    }
}

mw_status mw_graph_narrow_build(mw_model *m) {
    m->nvec = 0;
    m->pvec_floats = 0;
    if (!mw_graph_params16(m)) return MW_OK;
    free(m->vec_t), free(m->vec_off);
    m->vec_t = malloc(sizeof(int) * (size_t)(m->ntensors + 1));
    m->vec_off = malloc(sizeof(size_t) * (size_t)(m->ntensors + 1));
    if (!m->vec_t || !m->vec_off) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (t->layer < 0 || t->ndim == 2) continue; /* outside the blocks, or a matrix */
        m->vec_t[m->nvec] = i;
        m->vec_off[m->nvec++] = m->pvec_floats;
        m->pvec_floats += t->numel;
    }
    return MW_OK;
}

void mw_graph_narrow_bind(mw_model *m, int seg, float *slot) {
    const size_t s0 = m->seg_lo[seg];
    mw_graph_widen_inplace(slot, mw_graph_seg_len(m, seg));
    for (int j = 0; j < m->nvec; j++) {
        const mw_tensor *t = &m->tensors[m->vec_t[j]];
        if (t->seg == seg) memcpy(slot + (t->offset - s0), m->pvec + m->vec_off[j], t->numel * sizeof(float));
    }
}

void mw_graph_narrow_chunk(mw_model *m, int seg, size_t lo, size_t hi, const float *p, uint16_t *h) {
    mw_bf16_store_mt(h, p, hi - lo);
    for (int j = 0; j < m->nvec; j++) { /* the vectors' fp32 values, where the chunk holds them */
        const mw_tensor *t = &m->tensors[m->vec_t[j]];
        if (t->seg != seg) continue;
        const size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a < b) memcpy(m->pvec + m->vec_off[j] + (a - t->offset), p + (a - lo), (b - a) * sizeof(float));
    }
}

/* ---- the gradient norm's sums at the blocks' backward --------------------------------------- */

/* With the blocks' gradients on disk as bfloat16 (one process), the norm's pass would read them
 * all once more. Instead each block's squares are summed when its backward ends, from the bytes
 * about to be written: the sum of a quantum (MW_NORM_QUANTUM elements) is the same chain in element
 * order as the pass's, so the same bits. The blocks end last to first, so a quantum that starts
 * below a block waits (npend: its elements from that block's start up, as floats) until the block
 * it starts in ends; the tensors after the blocks are final since the head, those before (the
 * embedding) since the embedding's backward: both are summed when the norm is asked for. Every
 * micro-batch's backward sums again (the last one's are the step's); an update, zero_grad, or a
 * backward out of order leaves the sums unready, and the norm streams the file as before. */

void mw_graph_norm_block(mw_model *m, int l, const uint16_t *g) {
    if (!mw_graph_norm_fused(m)) return;
    const int L = m->cfg.n_layer;
    const size_t Q = MW_NORM_QUANTUM, n = m->nfloats, s = m->seg_lo[1 + l], e = m->seg_lo[2 + l];
    if (l == L - 1) { /* a backward begins: the tensors after the blocks are final since the head */
        const size_t a = m->seg_lo[L + 1];
        m->nready = 0;
        m->npend_lo = a;
        m->npend_len = 0;
        if (a % Q && a < n) {
            const size_t z = (a / Q + 1) * Q < n ? (a / Q + 1) * Q : n;
            memcpy(m->npend, m->gres[1], (z - a) * sizeof(float));
            m->npend_len = z - a;
        }
    }
    if (m->nready != L - 1 - l || m->npend_lo != e) { /* out of order: the norm's pass instead */
        m->nready = -1;
        return;
    }
    const size_t a = s % Q ? ((s / Q + 1) * Q < e ? (s / Q + 1) * Q : e) : s; /* the first quantum starting in it */
    if (a < e) {
        for (size_t b = a / Q; b <= (e - 1) / Q; b++) m->nparts[b] = 0.0;
        mw_graph_sumsq_parts(m->nparts, g + (a - s), 1, a, e);
        const size_t b = (e - 1) / Q, z = (b + 1) * Q < n ? (b + 1) * Q : n;
        if (z > e) { /* the last quantum goes on past the block: the elements waiting */
            if (m->npend_len < z - e) {
                m->nready = -1;
                return;
            }
            mw_graph_sumsq_parts(m->nparts, m->npend, 0, e, z);
        }
    }
    size_t len = 0;
    if (s % Q) { /* the quantum starting below waits: this block's part, then what waited past it */
        const size_t qe = (s / Q + 1) * Q < n ? (s / Q + 1) * Q : n, k = (qe < e ? qe : e) - s;
        const size_t keep = qe > e ? qe - e : 0;
        if (keep > m->npend_len) {
            m->nready = -1;
            return;
        }
        memmove(m->npend + k, m->npend, keep * sizeof(float));
        mw_bf16_load(m->npend, g, k);
        len = k + keep;
    }
    m->npend_lo = s;
    m->npend_len = len;
    m->nready++;
}

int mw_graph_norm_ready(const mw_model *m) { return mw_graph_norm_fused(m) && m->nready == m->cfg.n_layer; }

void mw_graph_norm_ends(mw_model *m) {
    const int L = m->cfg.n_layer;
    const size_t Q = MW_NORM_QUANTUM, n = m->nfloats, s1 = m->seg_lo[1], sl = m->seg_lo[L + 1];
    if (s1 > 0) { /* the quanta starting before the blocks, the last going on into what waited */
        for (size_t b = 0; b <= (s1 - 1) / Q; b++) m->nparts[b] = 0.0;
        mw_graph_sumsq_parts(m->nparts, m->gres[0], 0, 0, s1);
        const size_t b = (s1 - 1) / Q, z = (b + 1) * Q < n ? (b + 1) * Q : n;
        if (z > s1) mw_graph_sumsq_parts(m->nparts, m->npend, 0, s1, z);
    }
    const size_t a = sl % Q ? (sl / Q + 1) * Q : sl; /* the quanta starting after the blocks */
    if (a < n) {
        for (size_t b = a / Q; b <= (n - 1) / Q; b++) m->nparts[b] = 0.0;
        mw_graph_sumsq_parts(m->nparts, m->gres[1] + (a - sl), 0, a, n);
    }
}
