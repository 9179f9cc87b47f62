/* Transfers (graph_impl.h). Owns: the disk tier's layout (segments, arrays, bits), the
 * transfers of one micro-batch read off the schedule (parameter visits and their prefetches,
 * gradient binds and writes behind), the reads and writes themselves around the ops, ZeRO-3's
 * gathers, and parameter access outside a step. The future home of activation swaps and pipeline
 * sends/receives: a transfer is planned from the schedule, never guessed at run time. May call:
 * src/memory/offload (the disk tier), src/dist (mw_zero_*), src/optim (block boundaries). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../dist/tp.h"
#include "../optim/adamw.h"
#include "graph_impl.h"
#include "model.h"

/* Bits per element of the disk tier's arrays: parameters fp32, their copy H bfloat16, gradients
 * fp32 or bfloat16 under --precision bf16 (src/graph/narrow.c), M and V the optimizer's. */
void mw_graph_disk_bits(const mw_model *m, int bits[MW_ARR_COUNT]) {
    bits[MW_ARR_P] = 32;
    bits[MW_ARR_G] = mw_graph_grads16_disk(m) ? 16 : 32;
    bits[MW_ARR_H] = 16;
    bits[MW_ARR_M] = m->opt.bits[0] ? m->opt.bits[0] : 32;
    bits[MW_ARR_V] = m->opt.bits[1] ? m->opt.bits[1] : 32;
}

/* The disk tier's segments: the model's, or under --zero >= 1 three that put this rank's shard of
 * the optimizer state alone in the file (each rank offloads its own shard). */
int mw_graph_disk_segs(const mw_model *m, const size_t **lo, const unsigned **mask) {
    if (mw_graph_opt_sharded(m)) {
        *lo = m->zoff_lo, *mask = m->zoff_mask;
        return 3;
    }
    *lo = m->seg_lo, *mask = m->seg_mask;
    return m->nseg;
}

void mw_graph_disk_layout(const mw_model *m, mw_offload_layout *lay) {
    int bits[MW_ARR_COUNT];
    mw_graph_disk_bits(m, bits);
    const size_t *lo;
    const unsigned *mask;
    const int n = mw_graph_disk_segs(m, &lo, &mask);
    mw_offload_layout_of(n, lo, mask, bits, lay);
}

/* 1 when a chunk boundary of the disk tier's layout cuts a block of the quantised optimizer (then
 * adamw8bit needs its first pass), else 0. */
int mw_graph_opt_split_in(const mw_model *m, const mw_offload_layout *lay) {
    const size_t *lo;
    const unsigned *mask;
    const int n = mw_graph_disk_segs(m, &lo, &mask);
    for (int s = 0; s < n; s++)
        for (size_t e = lo[s] + lay->chunk; e < lo[s + 1]; e += lay->chunk)
            if (mw_opt_splits(&m->opt, e)) return 1;
    return 0;
}

int mw_graph_opt_split(const mw_model *m) {
    if (!m->off) return 0;
    mw_offload_layout lay;
    mw_graph_disk_layout(m, &lay);
    return mw_graph_opt_split_in(m, &lay);
}

/* The bytes the optimizer's passes read from and write to the disk tier per step (a pass that
 * writes P writes its bfloat16 copy H too, where the layout has one). */
void mw_graph_opt_traffic(const mw_model *m, const mw_offload_layout *lay, uint64_t *rd, uint64_t *wr) {
    *rd = *wr = 0;
    const int split = mw_graph_opt_split_in(m, lay);
    for (int k = 0; k < m->opt.npasses; k++)
        for (int a = 0; a < MW_ARR_COUNT && mw_opt_pass_needed(&m->opt, k, split); a++) {
            if (m->opt.rd[k] & MW_ARR_BIT(a)) *rd += lay->arr_bytes[a];
            if (m->opt.wr[k] & MW_ARR_BIT(a)) *wr += lay->arr_bytes[a];
            if (a == MW_ARR_P && (m->opt.wr[k] & MW_ARR_BIT(a))) *wr += lay->arr_bytes[MW_ARR_H];
        }
}

/* The bytes a visit's read of segment seg's parameters moves: the bfloat16 copy's, or the fp32. */
uint64_t mw_graph_visit_bytes(const mw_model *m, int seg) {
    return mw_offload_arr_bytes(mw_graph_seg_len(m, seg), mw_graph_params16(m) ? 16 : 32);
}

/* The bytes of block l's gradients written behind (or read back) once. */
uint64_t mw_graph_grad_bytes(const mw_model *m, int l) {
    return mw_offload_arr_bytes(mw_graph_seg_len(m, 1 + l), mw_graph_grads16_disk(m) ? 16 : 32);
}

/* Rank r's shard length under --zero. With expert parallelism (a layout's cfg.ep = E > 1; Megatron-
 * Core's expert-data-parallel group) the dense floats shard over the world's D ranks and this rank's
 * routed experts over the D/E ranks holding the same experts (data-parallel rank r is expert-
 * parallel rank r mod E, expert-data-parallel rank r / E): the shard is two pieces. */
static uint64_t zero_len(const mw_model *m, int r) {
    const mw_config *c = &m->cfg;
    uint64_t lo, hi;
    if (c->ep <= 1) {
        mw_zero_shard(m->nfloats, c->world, r, &lo, &hi);
        return hi - lo;
    }
    uint64_t elo, ehi;
    mw_zero_shard(m->nfloats - m->expert_floats, c->world, r, &lo, &hi);
    mw_zero_shard(m->expert_floats, c->world / c->ep, r / c->ep, &elo, &ehi);
    return hi - lo + ehi - elo;
}

/* --zero: this rank's shard, the exchange's round (at most the largest shard), and the disk tier's
 * segments around the shard. Under --ep (planned, never run) [zlo, zhi) is only as long as the two
 * pieces together: the walk reads its length alone. */
static void zero_bounds(mw_model *m) {
    const mw_config *c = &m->cfg;
    uint64_t lo, hi, mx = 0;
    mw_zero_shard(m->nfloats, c->world, c->rank, &lo, &hi);
    if (c->ep > 1) lo = 0, hi = zero_len(m, c->rank);
    m->zlo = lo, m->zhi = hi;
    for (int r = 0; r < c->world; r++) {
        const uint64_t n = zero_len(m, r);
        if (n > mx) mx = n;
    }
    /* the receive buffer is world rounds' worth: at most MW_ZERO_RECV floats in all (rounds of at
     * least 4096 floats per rank), so that it does not grow with the world size */
    uint64_t q = MW_ZERO_RECV / (uint64_t)c->world;
    if (q > MW_ZERO_BUCKET) q = MW_ZERO_BUCKET;
    if (q < 4096) q = 4096;
    m->zrq = mx < q ? (size_t)mx : (size_t)q;
    m->zoff_lo[0] = 0, m->zoff_lo[1] = m->zlo, m->zoff_lo[2] = m->zhi, m->zoff_lo[3] = m->nfloats;
    m->zoff_mask[0] = m->zoff_mask[2] = 0;
    m->zoff_mask[1] = mw_graph_opt_mask(m);
}

/* The disk tier's segments: one for --offload optimizer; with gradients or parameters on disk the
 * tensors before the first block, each block, and those after the last (the table must be in that
 * order, as every model's is). */
mw_status mw_graph_build_segments(mw_model *m) {
    if (m->cfg.dp) zero_bounds(m);
    if (m->offload == MW_OFFLOAD_NONE && !mw_graph_grads_mem16(m) && !mw_graph_grads_zero2(m)) return MW_OK;
    const int L = m->cfg.n_layer,
              blocks = m->offload != MW_OFFLOAD_OPTIMIZER || mw_graph_grads_mem16(m) || mw_graph_grads_zero2(m) || m->chunked;
    m->nseg = blocks ? L + 2 : 1;
    m->seg_lo = calloc((size_t)m->nseg + 1, sizeof(size_t));
    m->seg_mask = calloc((size_t)m->nseg, sizeof(unsigned));
    m->pbase = calloc((size_t)m->nseg, sizeof(float *));
    m->gbase = calloc((size_t)m->nseg, sizeof(float *));
    m->gfresh = calloc((size_t)L + 1, 1);
    if (!m->seg_lo || !m->seg_mask || !m->pbase || !m->gbase || !m->gfresh)
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    m->seg_lo[m->nseg] = m->nfloats;
    const unsigned mv = mw_graph_opt_mask(m);
    if (m->offload == MW_OFFLOAD_OPTIMIZER && !m->chunked && !mv)
        return mw_fail(MW_ERR_ARG, "--offload optimizer: --optim %s keeps no per-parameter state to put on disk (its small state stays in memory); use --offload optimizer+grads or all, or none",
                       mw_optim_str(m->cfg.optim));
    if (m->chunked && m->offload == MW_OFFLOAD_OPTIMIZER && !mv) /* as --offload optimizer: nothing would go to disk */
        return mw_fail(MW_ERR_ARG, "--offload %s: --optim %s keeps no per-parameter state to put on disk (its small state stays in memory); put params or grads on disk too, or use --offload none",
                       m->cfg.offload_spec, mw_optim_str(m->cfg.optim));
    /* the optimizer state before and after the blocks is on disk when any block's is */
    for (int k = 0; k < m->nseg; k++) m->seg_mask[k] = mw_graph_opt_on_disk(m) ? mv : 0;
    if (!blocks) return MW_OK;
    for (int k = 0; k < m->nseg; k++) m->seg_lo[k] = (size_t)-1;
    m->seg_lo[0] = 0;
    m->seg_lo[m->nseg] = m->nfloats;
    int phase = 0; /* 0 before the blocks, 1 in them, 2 after */
    for (int i = 0; i < m->ntensors; i++) {
        mw_tensor *t = &m->tensors[i];
        const int l = t->layer, want = l >= 0 ? 1 + l : phase == 0 ? 0 : L + 1;
        if (l >= 0 && m->seg_lo[1 + l] == (size_t)-1) m->seg_lo[1 + l] = t->offset;
        if (l < 0 && phase == 1) phase = 2, m->seg_lo[L + 1] = t->offset;
        if (l >= 0) phase = 1;
        t->seg = want;
    }
    if (m->seg_lo[L + 1] == (size_t)-1) m->seg_lo[L + 1] = m->nfloats;
    for (int k = 1; k <= m->nseg; k++)
        if (m->seg_lo[k] == (size_t)-1 || m->seg_lo[k] < m->seg_lo[k - 1])
            return mw_fail(MW_ERR_ARG, "--offload %s: this model's tensors are not in block order", mw_offload_name(m->offload));
    for (int i = 0; i < m->ntensors; i++) {
        const mw_tensor *t = &m->tensors[i];
        if (t->offset < m->seg_lo[t->seg] || t->offset + t->numel > m->seg_lo[t->seg + 1])
            return mw_fail(MW_ERR_ARG, "--offload %s: tensor %s lies outside its block", mw_offload_name(m->offload), t->name);
    }
    for (int l = 0; l < L; l++) /* each block's categories on disk: the chunk placement's (bfloat16 copies: whole modes) */
        m->seg_mask[1 + l] = (m->blk[l] & MW_CHUNK_O ? mv : 0) | (m->blk[l] & MW_CHUNK_G ? MW_ARR_BIT(MW_ARR_G) : 0) |
                             (m->blk[l] & MW_CHUNK_P ? MW_ARR_BIT(MW_ARR_P) : 0) |
                             (mw_graph_params16(m) ? MW_ARR_BIT(MW_ARR_H) : 0);
    for (int e = 0; e < 2; e++) /* the ends' (ends.c): fp32 parameters and gradients, no bfloat16 copy */
        m->seg_mask[e ? L + 1 : 0] = (m->eblk[e] & MW_CHUNK_O ? mv : 0) | (m->eblk[e] & MW_CHUNK_G ? MW_ARR_BIT(MW_ARR_G) : 0) |
                                     (m->eblk[e] & MW_CHUNK_P ? MW_ARR_BIT(MW_ARR_P) : 0);
    return mw_graph_narrow_build(m);
}

/* The parameter visits' slots and reads (visit_rd: 3 per visit) from the slots' state holds
 * (the segment each holds, -1 none), which ends as the visits leave it. */
static void plan_visits(const mw_model *m, int holds[3], mw_seg_read *visit_rd, int *visit_slot) {
    for (int j = 0; j < m->nvisit; j++) {
        const int seg = m->visit_seg[j];
        const int n1 = j + 1 < m->nvisit ? m->visit_seg[j + 1] : -2, n2 = j + 2 < m->nvisit ? m->visit_seg[j + 2] : -2;
        mw_seg_read *rd = visit_rd + 3 * j;
        int nr = 0;
        for (int e = 0; e < 3; e++) rd[e] = (mw_seg_read){-1, -1};
        int s = -1;
        for (int k = 0; k < 3; k++)
            if (holds[k] == seg) s = k;
        if (s < 0) { /* not prefetched: read now, into a slot the next two visits do not need */
            for (int k = 0; k < 3 && s < 0; k++)
                if (holds[k] != n1 && holds[k] != n2) s = k;
            holds[s] = seg;
            rd[nr++] = (mw_seg_read){seg, s};
        }
        visit_slot[j] = s;
        for (int d = 1; d <= 2; d++) {
            const int want = d == 1 ? n1 : n2;
            if (want < 0 || holds[0] == want || holds[1] == want || holds[2] == want) continue;
            int t = -1;
            for (int k = 0; k < 3 && t < 0; k++)
                if (k != s && holds[k] != n1 && holds[k] != n2) t = k;
            if (t < 0) continue;
            holds[t] = want;
            rd[nr++] = (mw_seg_read){want, t};
        }
    }
}

/* One micro-batch's transfers, read off the schedule: the visits of the blocks' parameters (a
 * block's consecutive ops, the head between them not counting) with the slot each uses and the
 * reads each starts (its own when not prefetched, and the next two visits'), and per block the
 * first and the last op of its backward, where its gradients are bound and written behind. */
mw_status mw_graph_build_transfers(mw_model *m) {
    if (!mw_graph_grads_slotted(m) && !mw_graph_params_on_disk(m)) return MW_OK;
    MW_TRY(mw_graph_ends_build(m));
    const int L = m->cfg.n_layer, n = m->nops;
    free(m->op_pv), free(m->op_gb), free(m->op_ge), free(m->visit_seg), free(m->visit_slot), free(m->visit_rd);
    m->op_pv = malloc(sizeof(int) * (size_t)n);
    m->op_gb = calloc((size_t)n, sizeof(int));
    m->op_ge = calloc((size_t)n, sizeof(int));
    m->visit_seg = malloc(sizeof(int) * (size_t)n);
    m->visit_slot = malloc(sizeof(int) * (size_t)n);
    m->visit_rd = malloc(sizeof *m->visit_rd * 3 * (size_t)n);
    if (!m->op_pv || !m->op_gb || !m->op_ge || !m->visit_seg || !m->visit_slot || !m->visit_rd)
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    m->nvisit = 0;
    int cur = -1;
    for (int i = 0; i < n; i++) {
        m->op_pv[i] = -1;
        const int k = m->ops[i].kind, l = m->ops[i].layer;
        if (mw_graph_kind_is_step(m, k) || l >= L) continue;
        if (!mw_graph_params_zero3(m) && !mw_graph_seg_disk(m, 1 + l, MW_ARR_P)) { /* in memory: no visit */
            cur = l;
            continue;
        }
        if (l != cur) m->op_pv[i] = m->nvisit, m->visit_seg[m->nvisit++] = 1 + l;
        cur = l;
    }
    /* the backward ops of block l: those after the head, not forward; a pipeline stage's micro-batch
     * by micro-batch (each its own backward, bound and written behind as one process's) */
    for (int mb = 0; mb < m->nmb; mb++)
        for (int l = 0; l < L; l++) {
            int first = -1, last = -1;
            for (int i = m->head_op + 1; i < m->opt_op; i++) {
                const int k = m->ops[i].kind;
                if (m->ops[i].layer != l || m->ops[i].mb != mb || k >= m->arch->nkinds || mw_graph_kind_is_step(m, k) ||
                    (m->arch->kinds[k].flags & MW_KF_FWD))
                    continue;
                if (first < 0) first = i;
                last = i;
            }
            if (first < 0) return mw_fail(MW_ERR_ARG, "internal: block %d has no backward op", l);
            m->op_gb[first] = 1;
            m->op_ge[last] = 1;
        }
    int holds[3] = {-1, -1, -1};
    plan_visits(m, holds, m->visit_rd, m->visit_slot);
    /* --accum: a micro-batch after the first starts where the one before left the slots (its last
     * blocks, the next one's first): its own reads, from that state, when it ends in it again */
    memcpy(m->visit_end, holds, sizeof holds);
    m->visit_carry = 0;
    if (m->cfg.accum > 1 && m->offload == MW_OFFLOAD_ALL && !m->chunked && !m->cfg.dp && m->cfg.pp <= 1) {
        free(m->visit_rd1), free(m->visit_slot1);
        m->visit_slot1 = malloc(sizeof(int) * (size_t)n);
        m->visit_rd1 = malloc(sizeof *m->visit_rd1 * 3 * (size_t)n);
        if (!m->visit_slot1 || !m->visit_rd1) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
        int h1[3];
        memcpy(h1, holds, sizeof h1);
        plan_visits(m, h1, m->visit_rd1, m->visit_slot1);
        /* the micro-batches that run it: each whose start finds the first one's end (where the second
         * plan ends elsewhere, as every:K's can, the next settles and runs the first plan again) */
        const int same = memcmp(h1, holds, sizeof h1) == 0;
        m->visit_carry = 0;
        for (int mb = 1, prev1 = 0; mb < m->cfg.accum; mb++) {
            const int use = same || !prev1;
            m->visit_carry += use;
            prev1 = use;
        }
    }
    return MW_OK;
}

/* ---- the disk tier's transfers around the ops (--offload optimizer+grads, all) ---------------- */

/* Records a failed transfer of a call that returns no status; the next one that does returns it. */
void mw_graph_io_failed(mw_model *m, mw_status st) {
    if (st != MW_OK && m->io_error == MW_OK) {
        m->io_error = st;
        snprintf(m->io_msg, sizeof m->io_msg, "%s", mw_last_error());
    }
}

mw_status mw_graph_io_check(const mw_model *m) {
    return m->io_error == MW_OK ? MW_OK : mw_fail(m->io_error, "%s", m->io_msg);
}

static mw_status wait_id(mw_model *m, int *id) {
    if (*id < 0) return MW_OK;
    const int k = *id;
    *id = -1;
    return mw_offload_wait(m->off, k);
}

/* Writes back parameters written outside a step (pslot[0]: init, checkpoint and weight loads) and
 * forgets every slot's block: a new micro-batch starts from its plan, and the optimizer changes
 * what they would hold. */
mw_status mw_graph_params_settle(mw_model *m) {
    if (mw_graph_params_zero3(m)) { /* written outside a step: this rank's pieces into its shard */
        MW_TRY(mw_graph_zero3_wait(m));
        const size_t lo = m->zlo, hi = m->zhi;
        for (int k = 0; k < m->nseg; k++) {
            const int res = k == 0 || k == m->nseg - 1;
            const float *src = res ? (m->zres_dirty ? (k ? m->pres[1] : m->pres[0]) : NULL)
                                   : (m->access_dirty && m->pslot_seg[0] == k ? m->pslot[0] : NULL);
            const size_t a = m->seg_lo[k] > lo ? m->seg_lo[k] : lo, b = m->seg_lo[k + 1] < hi ? m->seg_lo[k + 1] : hi;
            if (src && a < b) memcpy(m->zparams + (a - lo), src + (a - m->seg_lo[k]), (b - a) * sizeof(float));
        }
        m->access_dirty = m->zres_dirty = 0;
        for (int k = 0; k < 3; k++) {
            if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
            m->pslot_seg[k] = -1;
        }
        return MW_OK;
    }
    if (!mw_graph_params_on_disk(m) || !m->off) return MW_OK;
    mw_status st = mw_graph_ends_settle(m); /* an end held for access (ends.c) */
    for (int k = 0; k < 3; k++) {
        mw_status w = wait_id(m, &m->pslot_id[k]);
        if (st == MW_OK) st = w;
        m->pslot_h[k] = 0;
    }
    if (st == MW_OK && m->access_dirty && m->pslot_seg[0] >= 0) {
        const int seg = m->pslot_seg[0];
        int id = -1, ih = -1;
        st = mw_offload_seg_start(m->off, 1, seg, MW_ARR_P, m->pslot[0], &id);
        if (st == MW_OK && mw_graph_params16(m)) { /* and its bfloat16 copy, made in slot 1 */
            mw_graph_narrow_chunk(m, seg, m->seg_lo[seg], m->seg_lo[seg + 1], m->pslot[0], (uint16_t *)m->pslot[1]);
            st = mw_offload_seg_start(m->off, 1, seg, MW_ARR_H, m->pslot[1], &ih);
        }
        mw_status w = wait_id(m, &id);
        if (st == MW_OK) st = w;
        w = wait_id(m, &ih);
        if (st == MW_OK) st = w;
    }
    m->access_dirty = m->access_p = 0;
    for (int k = 0; k < 3; k++) {
        if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
        m->pslot_seg[k] = -1;
    }
    return st;
}

/* Waits for the gradients' writes in flight. */
mw_status mw_graph_grads_settle(mw_model *m) {
    mw_status st = MW_OK;
    for (int k = 0; k < 3; k++) {
        mw_status w = wait_id(m, &m->gslot_id[k]);
        if (st == MW_OK) st = w;
    }
    return st;
}

/* Before a micro-batch's ops (or the optimizer): a failure outside a call comes out now. A micro-
 * batch that finds the slots as the one before left them (nothing written or read outside a step
 * since) keeps them and runs the plan that starts there (visit_rd1); any other settles first. */
mw_status mw_graph_step_begin(mw_model *m) {
    MW_TRY(mw_graph_io_check(m));
    m->gvisit = 0;
    m->vplan = 0;
    if (m->visit_carry && m->off && !m->access_p && !m->access_dirty && m->eacc < 0 && m->pslot_seg[0] == m->visit_end[0] &&
        m->pslot_seg[1] == m->visit_end[1] && m->pslot_seg[2] == m->visit_end[2]) {
        m->vplan = 1;
        return MW_OK;
    }
    return mw_graph_params_settle(m);
}

/* --zero 3, visit j: the block comes from the gather started at the previous visit, or is still
 * in a slot (the last block's forward, then its backward), or is gathered now; then the next
 * visit's block starts its gather into the other slot, to run while this one computes. */
mw_status mw_graph_zero3_wait(mw_model *m) {
    if (!m->zpre) return MW_OK;
    void *r = m->zpre;
    m->zpre = NULL;
    MW_TRY(m->comm->wait(m->comm, r));
    m->pslot_seg[m->zpre_slot] = m->zpre_seg;
    return MW_OK;
}

static mw_status zero3_visit(mw_model *m, int j) {
    const int seg = m->visit_seg[j];
    if (m->zpre && m->zpre_seg == seg) MW_TRY(mw_graph_zero3_wait(m));
    int k = m->pslot_seg[0] == seg ? 0 : m->pslot_seg[1] == seg ? 1 : -1;
    if (k < 0) { /* not prefetched (the first visit): now, into a slot no gather is filling */
        MW_TRY(mw_graph_zero3_wait(m));
        k = m->pslot_seg[0] < 0 ? 0 : 1;
        if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
        m->pslot_seg[k] = -1;
        MW_TRY(mw_zero_gather_seg(m, m->pslot[k], m->seg_lo[seg], m->seg_lo[seg + 1]));
        m->pslot_seg[k] = seg;
    }
    m->pbase[seg] = m->pslot[k];
    const int next = j + 1 < m->nvisit ? m->visit_seg[j + 1] : -1;
    if (next >= 0 && next != seg && m->pslot_seg[1 - k] != next && !m->zpre) {
        const int o = 1 - k;
        if (m->pslot_seg[o] >= 0) m->pbase[m->pslot_seg[o]] = NULL;
        m->pslot_seg[o] = -1;
        void *r = NULL;
        MW_TRY(mw_zero_gather_start(m, m->pslot[o], m->seg_lo[next], m->seg_lo[next + 1], &r));
        if (r) {
            m->zpre = r, m->zpre_seg = next, m->zpre_slot = o;
        } else {
            m->pslot_seg[o] = next;
        }
    }
    return MW_OK;
}

/* Lets a gather in flight progress between ops (MPI moves data inside its calls). */
void mw_graph_zero3_poll(mw_model *m) {
    int done = 0;
    if (m->zpre && m->comm->test) (void)m->comm->test(m->comm, m->zpre, &done);
}

/* Visit j of the plan: starts its reads (its own when not prefetched, the next visits'), waits for
 * its block's and binds it. */
mw_status mw_graph_param_visit(mw_model *m, int j) {
    if (mw_graph_params_zero3(m)) return zero3_visit(m, j);
    const mw_seg_read *rd = (m->vplan ? m->visit_rd1 : m->visit_rd) + 3 * j;
    for (int e = 0; e < 3 && rd[e].seg >= 0; e++) {
        const int seg = rd[e].seg, k = rd[e].slot;
        MW_TRY(wait_id(m, &m->pslot_id[k]));
        if (m->pslot_seg[k] >= 0) m->pbase[m->pslot_seg[k]] = NULL;
        m->pslot_seg[k] = seg;
        m->pslot_h[k] = mw_graph_params16(m);
        MW_TRY(mw_offload_seg_start(m->off, 0, seg, m->pslot_h[k] ? MW_ARR_H : MW_ARR_P, m->pslot[k], &m->pslot_id[k]));
    }
    const int k = (m->vplan ? m->visit_slot1 : m->visit_slot)[j];
    MW_TRY(wait_id(m, &m->pslot_id[k]));
    if (m->pslot_h[k]) { /* the bfloat16 copy, landed: widened once, at its first bind */
        mw_graph_narrow_bind(m, m->visit_seg[j], m->pslot[k]);
        m->pslot_h[k] = 0;
    }
    m->pbase[m->visit_seg[j]] = m->pslot[k];
    return MW_OK;
}

/* Block l's backward starts: its gradients come into a slot (zeros when the disk holds none of this
 * step yet, else read back to accumulate into). */
mw_status mw_graph_grad_bind(mw_model *m, int l) {
    if (mw_graph_grads_zero2(m)) { /* from zero: the slot is exchanged when the block is done */
        memset(m->gslot[0], 0, mw_graph_seg_len(m, 1 + l) * sizeof(float));
        m->gbase[1 + l] = m->gslot[0];
        return MW_OK;
    }
    if (mw_graph_grads_mem16(m)) { /* zeros, or the bfloat16 ones widened to accumulate into */
        const int seg = 1 + l;
        const size_t n = mw_graph_seg_len(m, seg);
        if (m->gfresh[l])
            memset(m->gslot[0], 0, n * sizeof(float));
        else
            mw_bf16_load_mt(m->gslot[0], m->g16 + (m->seg_lo[seg] - m->seg_lo[1]), n);
        if (m->cfg.sp) mw_tp_sp_bind(m, l, m->gslot[0]); /* --sp: the norms' earlier sum on rank 0 alone */
        m->gbase[seg] = m->gslot[0];
        return MW_OK;
    }
    if (!mw_graph_seg_disk(m, 1 + l, MW_ARR_G)) { /* a chunk placement's block kept in memory */
        if (m->gfresh[l]) memset(m->gbase[1 + l], 0, mw_graph_seg_len(m, 1 + l) * sizeof(float));
        return MW_OK;
    }
    const int q = m->gvisit++, k = q % 3, seg = 1 + l;
    MW_TRY(q == 0 ? mw_graph_grads_settle(m) : wait_id(m, &m->gslot_id[k]));
    m->gslot_seg[k] = seg;
    if (m->gfresh[l]) {
        memset(m->gslot[k], 0, mw_offload_pad(mw_graph_seg_len(m, seg)) * sizeof(float));
    } else {
        int id;
        MW_TRY(mw_offload_seg_start(m->off, 0, seg, MW_ARR_G, m->gslot[k], &id));
        MW_TRY(mw_offload_wait(m->off, id));
        if (mw_graph_grads16_disk(m)) mw_graph_widen_inplace(m->gslot[k], mw_graph_seg_len(m, seg));
    }
    if (m->cfg.sp && mw_graph_grads16_disk(m)) mw_tp_sp_bind(m, l, m->gslot[k]); /* --sp: as g16's in memory */
    m->gbase[seg] = m->gslot[k];
    return MW_OK;
}

/* Block l's backward is done: its gradients are written behind. */
mw_status mw_graph_grad_done(mw_model *m, int l) {
    const int seg = 1 + l;
    const size_t n = mw_graph_seg_len(m, seg);
    if (mw_graph_grads_zero2(m)) { /* summed into the ranks' shards */
        m->gbase[seg] = NULL;
        return mw_zero_exchange(m, m->gslot[0], m->seg_lo[seg], m->seg_lo[seg + 1]);
    }
    if (mw_graph_grads_mem16(m)) { /* rounded into their bfloat16 home */
        if (m->cfg.sp) MW_TRY(mw_tp_sp_done(m, l, m->gslot[0])); /* --sp: the norms' sum over the ranks first */
        mw_bf16_store_mt(m->g16 + (m->seg_lo[seg] - m->seg_lo[1]), m->gslot[0], n);
        m->gbase[seg] = NULL;
        m->gfresh[l] = 0;
        return MW_OK;
    }
    if (!mw_graph_seg_disk(m, seg, MW_ARR_G)) { /* kept in memory: rounded in place as g16 would hold them */
        m->gfresh[l] = 0;
        if (mw_graph_grads_b16(m)) {
            float *g = m->gbase[seg];
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < n; i++) g[i] = mw_bf16_round(g[i]);
        }
        return MW_OK;
    }
    const int k = (m->gvisit - 1) % 3;
    if (m->gslot_seg[k] != seg) return mw_fail(MW_ERR_ARG, "internal: block %d's gradients are not in slot %d", l, k);
    m->gbase[seg] = NULL;
    m->gfresh[l] = 0;
    /* --sp: the norms' gradients summed over the ranks where the in-memory run sums them: bf16's at
     * each micro-batch's end (rank 0 alone carried the earlier ones in), fp32's once the step's last
     * micro-batch is done (mw_tp_sp_settle's sum) */
    if (m->cfg.sp && (mw_graph_grads16_disk(m) || m->tp_mb == m->cfg.accum - 1)) MW_TRY(mw_tp_sp_done(m, l, m->gslot[k]));
    if (mw_graph_grads16_disk(m)) { /* the bits g16 would hold, the disk's 2 bytes: the same in every placement */
        mw_graph_narrow_inplace(m->gslot[k], n);
        mw_graph_norm_block(m, l, (const uint16_t *)m->gslot[k]);
    }
    return mw_offload_seg_start(m->off, 1, seg, MW_ARR_G, m->gslot[k], &m->gslot_id[k]);
}

float *mw_graph_param_access(mw_model *m, int i, int write) {
    const mw_tensor *t = &m->tensors[i];
    if (m->params) return m->params + t->offset;
    const int seg = t->seg;
    float *p = mw_graph_tensor(m, 0, i);
    const int z3 = mw_graph_params_zero3(m);
    if (!z3 && (seg == 0 || seg == m->nseg - 1) && mw_graph_seg_disk(m, seg, MW_ARR_P)) { /* an end on disk (ends.c) */
        float *b = mw_graph_end_access(m, seg, write);
        return b ? b + (t->offset - m->seg_lo[seg]) : NULL;
    }
    if (seg == 0 || seg == m->nseg - 1 || (!z3 && !mw_graph_seg_disk(m, seg, MW_ARR_P))) { /* resident */
        if (write && z3) m->zres_dirty = 1;
        return p;
    }
    /* a visit's block (left in slot 0 after a step's ops) is the bfloat16 copy under params16: the
     * fp32 master comes in instead */
    if (m->pslot_seg[0] != seg || (mw_graph_params16(m) && !m->access_p)) {
        mw_status st = mw_graph_params_settle(m); /* writes a dirty block back, forgets the slots */
        int id = -1;
        if (z3) { /* gathered: every rank calls this in the same order (init, loads; checkpoints
                     write each shard from its rank instead) */
            if (st == MW_OK) st = mw_zero_gather_seg(m, m->pslot[0], m->seg_lo[seg], m->seg_lo[seg + 1]);
        } else {
            if (st == MW_OK) st = mw_offload_seg_start(m->off, 0, seg, MW_ARR_P, m->pslot[0], &id);
            if (st == MW_OK) st = mw_offload_wait(m->off, id);
        }
        if (st != MW_OK) {
            mw_graph_io_failed(m, st);
            return NULL;
        }
        m->pslot_seg[0] = seg;
        m->pbase[seg] = m->pslot[0];
        m->access_p = 1;
        p = mw_graph_tensor(m, 0, i);
    }
    if (write) m->access_dirty = 1;
    return p;
}

mw_status mw_model_params_settle(mw_model *m) { return mw_graph_params_settle(m); }

int mw_model_offload_info(const mw_model *m, mw_offload_report *r) {
    memset(r, 0, sizeof *r);
    if (!m->off) return 0;
    mw_offload_info in;
    mw_offload_get_info(m->off, &in);
    snprintf(r->path, sizeof r->path, "%s", in.path);
    snprintf(r->engine, sizeof r->engine, "%s", in.engine);
    snprintf(r->note, sizeof r->note, "%s", in.note);
    r->direct = in.direct;
    r->stale = in.stale;
    r->stale_bytes = in.stale_bytes;
    r->file_bytes = in.file_bytes;
    r->bytes_read = in.bytes_read;
    r->bytes_written = in.bytes_written;
    return 1;
}
