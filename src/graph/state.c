/* The optimizer's state for checkpoints (graph_impl.h, model.h). Owns: windows onto the
 * optimizer's per-element arrays M and V and its small state, by byte or by tensor (AdamW's
 * moments), in memory or through the disk tier's staging, and a tensor's parameters for reading.
 * May call: src/memory/offload (view, map, commit), src/dist (another rank's shard), transfer.c. */
#include <stdio.h>
#include <string.h>

#include "../core/status.h"
#include "graph_impl.h"
#include "model.h"

/* ---- the moments, for checkpoints ------------------------------------------------------------ */

/* Elements [off, limit) of the optimizer's array which (0: M, 1: V): a window at off of *n >= 1
 * elements, in memory or through the disk tier's staging. */
static mw_status state_window(const mw_model *m, int which, size_t off, size_t limit, int write, void **p, size_t *n) {
    const int bits = which >= 0 && which <= 1 && !m->cfg.inference ? m->opt.bits[which] : 0;
    if (!bits || off >= limit || limit > m->nfloats || (bits == 4 && (off & 1)))
        return mw_fail(MW_ERR_ARG, "internal: optimizer array %d at %zu", which, off);
    if (mw_graph_opt_sharded(m)) /* this rank's shard, another's (src/dist/zero.c) */
        return mw_zero_state_window(m, which, off, limit, write, p, n);
    if (!m->off || !mw_graph_opt_on_disk(m)) { /* in memory (a chunk placement may keep it all there) */
        *p = mw_opt_elem(which ? m->v : m->m, bits, off);
        *n = limit - off;
        return MW_OK;
    }
    const int a = which ? MW_ARR_V : MW_ARR_M;
    if (m->obase[which]) { /* a chunk placement: the segment's array in memory, or on disk */
        int s = 0;
        while (s + 1 < m->nseg && m->seg_lo[s + 1] <= off) s++;
        if (m->seg_lo[s + 1] < limit) limit = m->seg_lo[s + 1];
        if (m->obase[which][s]) {
            *p = mw_graph_opt_resident(m, which, s, off);
            *n = limit - off;
            return MW_OK;
        }
    }
    /* the disk tier's staging may share memory with an end's buffer (ends.c): that end written back first */
    MW_TRY(mw_graph_ends_settle((mw_model *)m));
    if (write) return mw_offload_map(m->off, a, off, limit, p, n);
    const void *q = NULL;
    MW_TRY(mw_offload_view(m->off, a, off, limit, &q, n));
    *p = (void *)q;
    return MW_OK;
}

static mw_status moment_window(const mw_model *m, int which, int i, size_t off, int write, float **p, size_t *n) {
    if (i < 0 || i >= m->ntensors || which < 0 || which > 1 || off >= m->tensors[i].numel || m->cfg.inference ||
        m->opt.bits[which] != 32 || m->cfg.optim != MW_OPTIM_ADAMW)
        return mw_fail(MW_ERR_ARG, "internal: moment %d of tensor %d at %zu", which, i, off);
    const mw_tensor *ts = &m->tensors[i];
    void *q = NULL;
    MW_TRY(state_window(m, which, ts->offset + off, ts->offset + ts->numel, write, &q, n));
    *p = q;
    return MW_OK;
}

uint64_t mw_model_state_bytes(const mw_model *m, int part) {
    if (m->cfg.inference || part < 0 || part > 2) return 0;
    if (part == 2) return m->opt.state_bytes;
    return m->opt.bits[part] ? mw_opt_array_bytes(m->opt.bits[part], m->nfloats) : 0;
}

int mw_model_state_bits(const mw_model *m, int part) {
    return m->cfg.inference || part < 0 || part > 1 ? 0 : m->opt.bits[part];
}

static mw_status state_bytes_window(const mw_model *m, int part, uint64_t off, int write, void **p, size_t *n) {
    const uint64_t total = mw_model_state_bytes(m, part);
    if (off >= total) return mw_fail(MW_ERR_ARG, "internal: optimizer state %d at byte %llu", part, (unsigned long long)off);
    if (part == 2) {
        *p = (char *)m->ostate + off;
        *n = (size_t)(total - off);
        return MW_OK;
    }
    const int bits = m->opt.bits[part];
    if ((off * 8) % (uint64_t)bits) return mw_fail(MW_ERR_ARG, "internal: optimizer state %d at byte %llu", part, (unsigned long long)off);
    const size_t e = (size_t)(off * 8 / (uint64_t)bits);
    size_t k;
    MW_TRY(state_window(m, part, e, m->nfloats, write, p, &k));
    const uint64_t end = mw_opt_array_bytes(bits, e + k);
    *n = (size_t)((end < total ? end : total) - off);
    return MW_OK;
}

mw_status mw_model_state_view(const mw_model *m, int part, uint64_t off, const void **p, size_t *n) {
    void *q = NULL;
    MW_TRY(state_bytes_window(m, part, off, 0, &q, n));
    *p = q;
    return MW_OK;
}

mw_status mw_model_state_map(mw_model *m, int part, uint64_t off, void **p, size_t *n) {
    return state_bytes_window(m, part, off, 1, p, n);
}

mw_status mw_model_moment_view(const mw_model *m, int which, int i, size_t off, const float **p, size_t *n) {
    float *q = NULL;
    MW_TRY(moment_window(m, which, i, off, 0, &q, n));
    *p = q;
    return MW_OK;
}

mw_status mw_model_moment_map(mw_model *m, int which, int i, size_t off, float **p, size_t *n) {
    return moment_window(m, which, i, off, 1, p, n);
}
mw_status mw_model_moments_done(const mw_model *m) {
    if (!m->off) return MW_OK;
    mw_status a = mw_offload_commit(m->off), b = mw_graph_params_settle((mw_model *)m);
    return a != MW_OK ? a : b != MW_OK ? b : mw_graph_io_check(m);
}

mw_status mw_model_param_view(const mw_model *m, int i, const float **p) {
    if (i < 0 || i >= m->ntensors) return mw_fail(MW_ERR_ARG, "tensor index %d out of range", i);
    *p = mw_graph_param_access((mw_model *)m, i, 0);
    return *p ? MW_OK : mw_graph_io_check(m);
}
