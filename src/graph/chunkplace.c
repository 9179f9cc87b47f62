/* The chunk placement of model states (graph_impl.h; issue 35): per block, which of its
 * parameters, gradients and optimizer state live on the disk tier. Owns: the placement of the
 * plain modes and of the explicit forms (src/memory/chunks.h) as per-block masks, the binding of
 * the blocks kept in memory while others stream, and --offload auto's search over the chunks.
 * May call: src/memory/chunks (the forms), place.c (dry plans for auto). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "graph_impl.h"
#include "model.h"

static unsigned mode_cats(int mode) {
    return mode == MW_OFFLOAD_ALL ? MW_CHUNK_P | MW_CHUNK_G | MW_CHUNK_O
           : mode == MW_OFFLOAD_OPTIMIZER_GRADS ? MW_CHUNK_G | MW_CHUNK_O
           : mode == MW_OFFLOAD_OPTIMIZER       ? MW_CHUNK_O
                                                : 0;
}

unsigned mw_graph_ends_allowed(const mw_model *m) {
    const mw_config *c = &m->cfg;
    if (c->inference || c->dp || mw_config_layout(c)) return MW_CHUNK_O; /* the ends' parameters and gradients: one process */
    return mw_graph_grads_b16(m) ? MW_CHUNK_P | MW_CHUNK_O : MW_CHUNK_P | MW_CHUNK_G | MW_CHUNK_O;
}

mw_status mw_graph_chunks_set(mw_model *m, const char *spec) {
    const int L = m->cfg.n_layer;
    const unsigned ok = mw_graph_ends_allowed(m);
    free(m->blk);
    m->blk = calloc((size_t)(L > 0 ? L : 1), 1);
    if (!m->blk) return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    m->chunked = 0;
    if (spec && spec[0]) {
        int widest;
        MW_TRY(mw_chunks_parse(spec, L, m->blk, m->eblk, &widest));
        for (int e = 0; e < 2; e++) {
            if ((m->eblk[e] & (MW_CHUNK_NAMED << 1)) && !(ok & MW_CHUNK_G))
                return mw_fail(MW_ERR_ARG, "--offload %s: the %s's gradients stay in memory under --precision bf16 (they are fp32, "
                               "the disk tier's gradients bfloat16): leave %s out of grads=", spec, e ? "head" : "embeddings",
                               e ? "head" : "embed");
            m->eblk[e] &= (unsigned char)ok; /* all: every chunk the disk tier can hold */
        }
        int uniform = 1; /* every chunk as the widest mode puts it: that mode (its narrow formats, its --accum plan) */
        m->dcat = m->eblk[0] | m->eblk[1];
        for (int l = 0; l < L; l++) m->dcat |= m->blk[l], uniform &= m->blk[l] == mode_cats(widest);
        for (int e = 0; e < 2; e++) uniform &= m->eblk[e] == (mode_cats(widest) & ok);
        widest = m->dcat & MW_CHUNK_P ? MW_OFFLOAD_ALL : m->dcat & MW_CHUNK_G ? MW_OFFLOAD_OPTIMIZER_GRADS
                 : m->dcat & MW_CHUNK_O                           ? MW_OFFLOAD_OPTIMIZER
                                                                  : MW_OFFLOAD_NONE;
        m->offload = widest;
        m->chunked = widest != MW_OFFLOAD_NONE && !uniform;
        return MW_OK;
    }
    m->dcat = mode_cats(m->offload);
    for (int l = 0; l < L; l++) m->blk[l] = (unsigned char)m->dcat;
    m->eblk[0] = m->eblk[1] = (unsigned char)(m->dcat & ok);
    return MW_OK;
}

void mw_graph_chunks_pin(const mw_model *m, char *out, size_t n) {
    if (m->chunked)
        mw_chunks_text(m->blk, m->cfg.n_layer, m->eblk, out, n);
    else
        snprintf(out, n, "%s", mw_offload_name(m->offload));
}

void mw_graph_chunks_spec(const mw_model *m, char *out, size_t n) {
    if (m->chunked)
        mw_chunks_text(m->blk, m->cfg.n_layer, m->eblk, out, n);
    else if (n)
        out[0] = 0;
}

mw_status mw_graph_chunks_bind(mw_model *m) {
    const int L = m->cfg.n_layer;
    if (m->nseg != L + 2) return MW_OK;
    float *p = m->pblk, *g = m->gblk;
    for (int l = 0; l < L; l++) {
        const int seg = 1 + l;
        const size_t n = (mw_graph_seg_len(m, seg) + 15) / 16 * 16;
        if (p && !mw_graph_seg_disk(m, seg, MW_ARR_P)) m->pbase[seg] = p, p += n;
        if (g && !mw_graph_seg_disk(m, seg, MW_ARR_G)) {
            m->gbase[seg] = g, g += n;
            memset(m->gbase[seg], 0, n * sizeof(float));
        }
    }
    for (int w = 0; w < 2; w++) {
        if (!m->oblk[w]) continue;
        free(m->obase[w]);
        m->obase[w] = calloc((size_t)m->nseg, sizeof(void *));
        if (!m->obase[w]) return mw_fail(MW_ERR_NOMEM, "out of memory binding the plan");
        char *o = m->oblk[w];
        for (int k = 0; k < m->nseg; k++) {
            if (mw_graph_seg_disk(m, k, w ? MW_ARR_V : MW_ARR_M)) continue;
            const uint64_t b = (mw_opt_array_bytes(m->opt.bits[w], mw_graph_seg_len(m, k)) + 63) / 64 * 64;
            m->obase[w][k] = o;
            memset(o, 0, (size_t)b); /* fresh moments, as the disk tier's file starts */
            o += b;
        }
    }
    return MW_OK;
}

void *mw_graph_opt_resident(const mw_model *m, int w, int seg, size_t lo) {
    const int bits = m->opt.bits[w];
    if (!bits) return NULL;
    void *flat = w ? m->v : m->m;
    if (flat) return mw_opt_elem(flat, bits, lo);
    void *b = m->obase[w] ? m->obase[w][seg] : NULL;
    return b ? mw_opt_elem(b, bits, lo - m->seg_lo[seg]) : NULL;
}

void mw_graph_chunks_free(mw_model *m) {
    free(m->blk), free(m->obase[0]), free(m->obase[1]);
    m->blk = NULL, m->obase[0] = m->obase[1] = NULL;
}

/* ---- --offload auto over the chunks ------------------------------------------------------------ */

/* Auto's chain: per category its chunks in the order they come into memory, n[c] of them (the
 * blocks, and the ends where the disk tier can hold them), and the boundaries between categories
 * (bnd[c] .. bnd[c + 1]: category c's). */
static void chain_len(const mw_model *m, int n[3], int bnd[4]) {
    const unsigned ok = mw_graph_ends_allowed(m);
    bnd[0] = 0;
    for (int c = 0; c < 3; c++) {
        n[c] = m->cfg.n_layer + (ok & (1u << c) ? 2 : 0);
        bnd[c + 1] = bnd[c] + n[c];
    }
}

/* Candidate k of auto's chain: the first k chunks resident, in the order of the most predicted
 * transfer saved per byte kept: the parameters first (a block's are read at each of its visits of
 * every micro-batch, at least forward and backward, then read and written by the optimizer: >= 4
 * bytes moved per byte kept; the head's and the embedding's once per micro-batch, a tied
 * embedding's twice, then the optimizer's 2), then the gradients (written by each micro-batch,
 * read back by the next ones, read by the norm and the optimizer: 2 x accum + 1, the ends' as the
 * blocks'), then the optimizer state (read and written by the optimizer: 2). Within a category the
 * last blocks first (the forward's last and the backward's first visits), then the head (beside
 * the last block), then the embeddings. k = 0 is all, k = bnd[3] none. */
static void chain_spec(const mw_model *m, int k, char *out, size_t n) {
    const int L = m->cfg.n_layer;
    int len[3], bnd[4];
    chain_len(m, len, bnd);
    unsigned char blk[MW_MAX_BLOCK_POLICIES], ends[2] = {0, 0};
    for (int l = 0; l < L; l++) blk[l] = 0;
    for (int c = 0; c < 3; c++) {
        const int r = k - bnd[c], res = r < 0 ? 0 : r > len[c] ? len[c] : r; /* resident of category c */
        for (int j = res; j < len[c]; j++) { /* chunk j of the order: blocks L-1 .. 0, head, embed */
            if (j < L)
                blk[L - 1 - j] |= (unsigned char)(1u << c);
            else
                ends[j == L ? 1 : 0] |= (unsigned char)(1u << c);
        }
    }
    mw_chunks_text(blk, L, ends, out, n);
}

typedef struct cand {
    int k, fits, measured;
    double t;
    uint64_t moved;
} cand;

static mw_status try_k(const mw_model *m, int k, cand *o) {
    const mw_config *c = &m->cfg;
    const int L = c->n_layer;
    mw_config q = *c;
    int widest;
    chain_spec(m, k, q.offload_spec, sizeof q.offload_spec);
    unsigned char blk[MW_MAX_BLOCK_POLICIES];
    MW_TRY(mw_chunks_parse(q.offload_spec, L, blk, NULL, &widest));
    q.offload = widest;
    if (widest == MW_OFFLOAD_NONE) memset(q.offload_spec, 0, sizeof q.offload_spec);
    mw_plan_summary ps;
    MW_TRY(mw_graph_plan_predicted(m->arch, &q, &ps));
    o->k = k;
    o->fits = ps.fits;
    o->measured = !ps.disk_file || ps.pred_disk_s >= 0;
    /* the step predicted as overlapped phases (compute with its recomputation beside the
     * micro-batches' transfers, then the norm's and the optimizer's), or its compute alone without a
     * disk tier; the serial sum of recomputation and transfers where the ops were not timed */
    o->t = ps.pred_step_s >= 0 ? ps.pred_step_s
           : !ps.disk_file && ps.pred_compute_s >= 0 ? ps.pred_compute_s
                                                    : ps.pred_recompute_s + (ps.pred_disk_s > 0 ? ps.pred_disk_s : 0.0);
    o->moved = ps.disk_read + ps.disk_write;
    return MW_OK;
}

mw_status mw_graph_chunks_auto(mw_model *m) {
    const mw_config *c = &m->cfg;
    const int L = c->n_layer;
    int len[3], bnd[4];
    chain_len(m, len, bnd);
    const int K = bnd[3];
    char *w = m->offload_why;
    const size_t wn = sizeof m->offload_why;
    cand lo, hi, best;
    MW_TRY(try_k(m, 0, &lo));
    if (!lo.fits) { /* the smallest plan, which the budget check then refuses */
        snprintf(w, wn, "no placement fits the budget%s",
                 c->offload_dir[0] ? " with its disk tier in --offload-dir's room (free space and stale scratch files)" : "");
        return mw_graph_chunks_set(m, "params=all,grads=all,optim=all");
    }
    /* the most chunks resident that fit. Plans grow with k within a category; where a category's
     * last chunk comes into memory its staging slots leave the plan, so the boundaries bnd[1..3]
     * may plan less than the k just below: the highest of those (and 0) that fits, then the
     * category above it */
    best = lo;
    int above = bnd[1];
    for (int q = 3; q >= 1; q--) {
        MW_TRY(try_k(m, bnd[q], &hi));
        if (hi.fits) {
            best = hi;
            above = q < 3 ? bnd[q + 1] : K;
            break;
        }
    }
    if (best.k < K) {
        int a = best.k, b = above; /* a fits, b does not (or is the boundary above, which did not) */
        while (b - a > 1) {
            cand x;
            MW_TRY(try_k(m, (a + b) / 2, &x));
            if (x.fits)
                a = x.k, best = x;
            else
                b = x.k;
        }
    }
    /* one decision with --recompute auto: fewer chunks resident leave more memory to keep
     * activations; compare the predicted recomputation plus transfers of a few steps down the chain */
    const int kmax = best.k;
    const double tmax = best.t;
    char tried[120] = "";
    size_t u = 0;
    if (c->recompute == MW_RECOMPUTE_AUTO && best.measured) {
        const int step = L >= 4 ? L / 4 : 1;
        for (int j = 1; j <= 4 && kmax - j * step >= 0; j++) {
            cand x;
            MW_TRY(try_k(m, kmax - j * step, &x));
            if (u < sizeof tried)
                u += x.fits ? (size_t)snprintf(tried + u, sizeof tried - u, "%s%d %.3f", u ? ", " : "", x.k, x.t)
                            : (size_t)snprintf(tried + u, sizeof tried - u, "%s%d over budget", u ? ", " : "", x.k);
            if (x.fits && x.measured && x.t < best.t) best = x;
        }
    }
    /* under bf16 the whole modes (k on a category's boundary: all, optimizer+grads, optimizer)
     * have formats a chunk placement lacks (the parameters' bfloat16 copy under all, the norm
     * summed at the blocks' backward): every whole mode below the chain's most that fit, taken
     * where it fits and is predicted faster */
    char whole[120] = "";
    size_t v = 0;
    for (int q = 0; q < 3 && mw_graph_grads_b16(m) && best.measured; q++) {
        if (bnd[q] > kmax || bnd[q] == best.k) continue;
        cand x;
        MW_TRY(try_k(m, bnd[q], &x));
        const char *name = q == 0 ? "all" : q == 1 ? "optimizer+grads" : "optimizer", *sep = v ? ", " : "; the whole modes: ";
        if (v < sizeof whole)
            v += x.fits ? (size_t)snprintf(whole + v, sizeof whole - v, "%s%s %.3f s", sep, name, x.t)
                        : (size_t)snprintf(whole + v, sizeof whole - v, "%s%s over budget", sep, name);
        if (x.fits && x.measured && x.t < best.t) best = x;
    }
    char spec[96];
    chain_spec(m, best.k, spec, sizeof spec);
    if (snprintf(w, wn, "%d of %d chunks resident (the most that fit: %d, %.3f s/step predicted; this %.3f s%s%s%s%s)", best.k, K,
             kmax, tmax, best.t, tried[0] ? "; tried " : "", tried, whole, best.measured ? "" : "; the disk not measured") >= (int)wn)
        w[wn - 2] = ')'; /* cut short: still closed */
    if (best.k == K) return mw_graph_chunks_set(m, "");
    return mw_graph_chunks_set(m, spec);
}
