/* The ends on the disk tier (graph_impl.h; issue 35): the tensors before the blocks (segment 0:
 * the token embedding, GPT-2's positions) and after them (segment L + 1: the final norm, an untied
 * LM head) keep their parameters and gradients on disk like a block's, one process without a
 * layout. Owns: which ops bind them (read off the schedule), their reads before those ops and the
 * gradients' writes after, their bytes per micro-batch, and their access outside a step.
 *
 * The parameters come into buffers planned for the ops that use them (pend[0] the embedding's
 * forward, read at it; pend[1] the head's and pend[2] a tied head's read of the embedding, read
 * while the op ahead of the head computes), so that they share memory with the activations. The gradients come into gend[1] for the head's op and gend[0] for the
 * embedding's backward, from the first op that adds to them (a tied head's) to that one: zeros in
 * a step's first micro-batch, else read back, and written after, in the additions' order of the
 * in-memory run (the same bits). The embedding's read and the gradients' reads and writes wait:
 * the buffer's memory is the plan's again after its op. May call: src/memory/offload (the disk tier). */
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "graph_impl.h"

int mw_graph_tied(const mw_config *c) { return c->arch == MW_ARCH_GPT2 || c->tied; }

int mw_graph_end_disk(const mw_model *m, int e, int a) {
    return m->nseg == m->cfg.n_layer + 2 && mw_graph_seg_disk(m, e ? m->nseg - 1 : 0, a);
}

uint64_t mw_graph_end_bytes(const mw_model *m, int e) {
    return mw_offload_arr_bytes(mw_graph_seg_len(m, e ? m->nseg - 1 : 0), 32);
}

void mw_graph_ends_span(const mw_model *m, int first[5], int last[5]) {
    int emb = -1, head = m->head_op, embb = -1;
    for (int i = 0; i < m->nops; i++) {
        if (m->ops[i].kind == m->arch->k_embed && emb < 0) emb = i;
        if (m->ops[i].kind == m->arch->k_embed_bwd) embb = i;
    }
    first[0] = last[0] = emb;                 /* pend[0]: the embedding's forward */
    const int pre = head > 0 ? head - 1 : head; /* the head's reads start an op ahead */
    first[1] = pre, last[1] = head;           /* pend[1]: the head */
    first[2] = pre, last[2] = head;           /* pend[2]: a tied head's embedding */
    first[3] = mw_graph_tied(&m->cfg) ? head : embb, last[3] = embb; /* gend[0] */
    first[4] = last[4] = head;                /* gend[1] */
}

mw_status mw_graph_ends_build(mw_model *m) {
    free(m->op_end);
    m->op_end = calloc((size_t)m->nops, sizeof(int));
    if (!m->op_end) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    if (m->nseg != m->cfg.n_layer + 2 || m->cfg.inference) return MW_OK;
    int first[5], last[5];
    mw_graph_ends_span(m, first, last);
    const int p0 = mw_graph_end_disk(m, 0, MW_ARR_P), p1 = mw_graph_end_disk(m, 1, MW_ARR_P);
    const int g0 = mw_graph_end_disk(m, 0, MW_ARR_G), g1 = mw_graph_end_disk(m, 1, MW_ARR_G);
    const int tied = mw_graph_tied(&m->cfg);
    if (p0 && first[0] >= 0) m->op_end[first[0]] |= MW_END_P0;
    if (p1 && first[1] >= 0) m->op_end[first[1]] |= MW_END_S1, m->op_end[last[1]] |= MW_END_P1;
    if (p0 && tied && first[2] >= 0) m->op_end[first[2]] |= MW_END_ST, m->op_end[last[2]] |= MW_END_PT;
    if (g0 && first[3] >= 0 && last[3] >= 0) m->op_end[first[3]] |= MW_END_GB0, m->op_end[last[3]] |= MW_END_GE0;
    if (g1 && first[4] >= 0) m->op_end[first[4]] |= MW_END_GB1 | MW_END_GE1;
    return MW_OK;
}

/* Reads segment seg's array a into buf and waits. */
static mw_status read_seg(mw_model *m, int seg, int a, float *buf) {
    int id = -1;
    MW_TRY(mw_offload_seg_start(m->off, 0, seg, a, buf, &id));
    return mw_offload_wait(m->off, id);
}

static mw_status write_seg(mw_model *m, int seg, int a, float *buf) {
    int id = -1;
    MW_TRY(mw_offload_seg_start(m->off, 1, seg, a, buf, &id));
    return mw_offload_wait(m->off, id);
}

/* The read in flight into pend[1 + k], waited for (none: nothing). */
static mw_status wait_eid(mw_model *m, int k) {
    if (m->eid[k] < 0) return MW_OK;
    const int id = m->eid[k];
    m->eid[k] = -1;
    return mw_offload_wait(m->off, id);
}

mw_status mw_graph_ends_before(mw_model *m, int i, int train) {
    const int f = m->op_end ? m->op_end[i] : 0;
    if (!f) return MW_OK;
    const int last = m->nseg - 1;
    if (f & MW_END_P0) {
        MW_TRY(read_seg(m, 0, MW_ARR_P, m->pend[0]));
        m->pbase[0] = m->pend[0];
    }
    if (f & MW_END_S1) MW_TRY(mw_offload_seg_start(m->off, 0, last, MW_ARR_P, m->pend[1], &m->eid[0]));
    if (f & MW_END_ST) MW_TRY(mw_offload_seg_start(m->off, 0, 0, MW_ARR_P, m->pend[2], &m->eid[1]));
    if (f & MW_END_P1) {
        MW_TRY(wait_eid(m, 0));
        m->pbase[last] = m->pend[1];
    }
    if (f & MW_END_PT) {
        MW_TRY(wait_eid(m, 1));
        m->pbase[0] = m->pend[2];
    }
    for (int e = 0; e < 2 && train; e++) {
        if (!(f & (e ? MW_END_GB1 : MW_END_GB0))) continue;
        const int seg = e ? last : 0;
        if (m->efresh[e])
            memset(m->gend[e], 0, mw_offload_pad(mw_graph_seg_len(m, seg)) * sizeof(float));
        else
            MW_TRY(read_seg(m, seg, MW_ARR_G, m->gend[e]));
        m->gbase[seg] = m->gend[e];
    }
    return MW_OK;
}

mw_status mw_graph_ends_after(mw_model *m, int i, int train) {
    const int f = m->op_end ? m->op_end[i] : 0;
    if (!f) return MW_OK;
    const int last = m->nseg - 1;
    if (f & (MW_END_P0 | MW_END_PT)) m->pbase[0] = NULL; /* the buffer's memory is the plan's again */
    if (f & MW_END_P1) m->pbase[last] = NULL;
    for (int e = 0; e < 2 && train; e++) {
        if (!(f & (e ? MW_END_GE1 : MW_END_GE0))) continue;
        const int seg = e ? last : 0;
        m->gbase[seg] = NULL;
        m->efresh[e] = 0;
        MW_TRY(write_seg(m, seg, MW_ARR_G, m->gend[e]));
    }
    return MW_OK;
}

uint64_t mw_graph_ends_op_read(const mw_model *m, int i, int first_mb) {
    const int f = m->op_end ? m->op_end[i] : 0;
    uint64_t b = 0;
    if (f & MW_END_P0) b += mw_graph_end_bytes(m, 0);
    if (f & MW_END_S1) b += mw_graph_end_bytes(m, 1);
    if (f & MW_END_ST) b += mw_graph_end_bytes(m, 0);
    if (!first_mb && (f & MW_END_GB0)) b += mw_graph_end_bytes(m, 0);
    if (!first_mb && (f & MW_END_GB1)) b += mw_graph_end_bytes(m, 1);
    return b;
}

uint64_t mw_graph_ends_op_write(const mw_model *m, int i) {
    const int f = m->op_end ? m->op_end[i] : 0;
    return (f & MW_END_GE0 ? mw_graph_end_bytes(m, 0) : 0) + (f & MW_END_GE1 ? mw_graph_end_bytes(m, 1) : 0);
}

uint64_t mw_graph_ends_param_reads(const mw_model *m) {
    uint64_t b = 0;
    for (int i = 0; m->op_end && i < m->nops; i++) {
        const int f = m->op_end[i];
        b += (f & MW_END_P0 ? mw_graph_end_bytes(m, 0) : 0) + (f & MW_END_S1 ? mw_graph_end_bytes(m, 1) : 0) +
             (f & MW_END_ST ? mw_graph_end_bytes(m, 0) : 0);
    }
    return b;
}

mw_status mw_graph_ends_settle(mw_model *m) {
    mw_status st = wait_eid(m, 0), w = wait_eid(m, 1); /* a head's read left in flight by a failed op */
    if (st == MW_OK) st = w;
    if (m->eacc < 0) return st;
    const int seg = m->eacc;
    w = m->eacc_dirty ? write_seg(m, seg, MW_ARR_P, m->pend[seg ? 1 : 0]) : MW_OK;
    if (st == MW_OK) st = w;
    m->pbase[seg] = NULL;
    m->eacc = -1, m->eacc_dirty = 0;
    return st;
}

float *mw_graph_end_access(mw_model *m, int seg, int write) {
    if (m->eacc != seg) {
        /* one end at a time (their buffers may share memory), and none while the disk tier's staging
         * holds mapped chunks (it may share it too) */
        mw_status st = mw_graph_params_settle(m);
        if (st == MW_OK) st = mw_offload_commit(m->off);
        if (st == MW_OK) st = read_seg(m, seg, MW_ARR_P, m->pend[seg ? 1 : 0]);
        if (st != MW_OK) {
            mw_graph_io_failed(m, st);
            return NULL;
        }
        m->eacc = seg;
        m->pbase[seg] = m->pend[seg ? 1 : 0];
    }
    if (write) m->eacc_dirty = 1;
    return m->pbase[seg];
}
