/* --zero 2 under --pp (issue 33): the gradient norm over the stages' sharded summed gradients.
 *
 * Under --zero 2 a stage's replicas hold its summed gradient in shards (m->zacc: elements [zlo,
 * zhi) of the stage's flat buffer), never whole. One process's norm is the sum, in order, of the
 * partial sums of quanta of MW_NORM_QUANTUM elements of the single-process flat buffer, each a
 * chain of double additions in element order. A stage begins at element g0 of that buffer, which
 * no quantum boundary need fall on, so the shards (whole quanta of the stage's buffer) cut the
 * single-process quanta too. The chain is kept exact by passing the open quantum's partial sum
 * along the element order: over every rank, stage by stage and in a stage replica by replica.
 * Within a stage the replicas pass it over the data-parallel group; between stages the last
 * replica of stage s sends it to the last replica of stage s + 1 (the same pipeline: the same
 * replica index), which hands it to that stage's first replica. Each rank then owns the quanta
 * that end in its range (the last one at the end of the buffer); the owned partial sums are
 * gathered over the stage's replicas, then over the stages, and every rank adds them in order:
 * one process's sum, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../graph/graph_impl.h"

enum { TAG_CHAIN = 7, TAG_HAND = 8 };

mw_status mw_pipe_shard_norm(mw_model *m, double *norm) {
    mw_comm *pc = m->pcomm, *dc = m->comm;
    const int P = pc->size, s = pc->rank, D = dc->size, d = dc->rank;
    const uint64_t Q = MW_NORM_QUANTUM;
    uint64_t *len = calloc((size_t)P, sizeof *len);
    size_t *cnt = calloc((size_t)(P > D ? P : D) * 2, sizeof *cnt);
    double *parts = NULL;
    mw_status st = len && cnt ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) { /* every stage's length: g0 and the total */
        len[s] = m->nfloats;
        for (int j = 0; j < P; j++) cnt[j] = 1, cnt[P + j] = (size_t)j;
        st = pc->allgatherv(pc, len, sizeof *len, cnt, cnt + P);
    }
    uint64_t g0 = 0, total = 0;
    for (int j = 0; j < P && st == MW_OK; j++) total += len[j], g0 += j < s ? len[j] : 0;
    const uint64_t a = g0 + m->zlo, b = g0 + m->zhi; /* this rank's range of the single-process buffer */
    /* the open quantum's sum at a: from the previous holder in element order */
    double carry = 0.0;
    if (st == MW_OK && s > 0 && d == D - 1) st = pc->recv(pc, &carry, sizeof carry, s - 1, TAG_CHAIN);
    if (st == MW_OK && s > 0 && D > 1 && d == D - 1) st = dc->send(dc, &carry, sizeof carry, 0, TAG_HAND);
    if (st == MW_OK && s > 0 && D > 1 && d == 0) st = dc->recv(dc, &carry, sizeof carry, D - 1, TAG_HAND);
    if (st == MW_OK && d > 0) st = dc->recv(dc, &carry, sizeof carry, d - 1, TAG_CHAIN);
    /* the quanta this rank owns: those ending in (a, b], and the one the buffer ends in */
    const uint64_t q0 = a / Q, q1 = b > a ? (b - 1) / Q : q0; /* the quanta the range touches */
    const size_t most = b > a ? (size_t)(q1 - q0 + 1) : 0;
    parts = calloc(most + (size_t)(total / Q + 2), sizeof *parts); /* mine, then every rank's */
    if (!parts && st == MW_OK) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    size_t own = 0;
    double open = a % Q ? carry : 0.0; /* the sum passed on at b */
    if (st == MW_OK && b > a) {
        const float *g = m->zacc; /* element e of the range at g[e - a] */
        for (uint64_t q = q0; q <= q1; q++) {
            const uint64_t j0 = q * Q > a ? q * Q : a, j1 = (q + 1) * Q < b ? (q + 1) * Q : b;
            double t = q == q0 ? open : 0.0;
            for (uint64_t j = j0; j < j1; j++) t += (double)g[j - a] * g[j - a];
            if ((q + 1) * Q <= b || b == total)
                parts[own++] = t, open = 0.0;
            else
                open = t;
        }
    }
    /* on along the element order: the next replica, or the next stage's last replica */
    if (st == MW_OK && d < D - 1) st = dc->send(dc, &open, sizeof open, d + 1, TAG_CHAIN);
    if (st == MW_OK && d == D - 1 && s < P - 1) st = pc->send(pc, &open, sizeof open, s + 1, TAG_CHAIN);
    /* the owned sums: over the stage's replicas in order, then over the stages */
    double *all = parts + most;
    uint64_t nown = own, *dn = calloc((size_t)D, sizeof *dn), *pn = calloc((size_t)P, sizeof *pn);
    if ((!dn || !pn) && st == MW_OK) st = mw_fail(MW_ERR_NOMEM, "out of memory");
    if (st == MW_OK) {
        dn[d] = nown;
        for (int j = 0; j < D; j++) cnt[j] = 1, cnt[D + j] = (size_t)j;
        st = dc->allgatherv(dc, dn, sizeof *dn, cnt, cnt + D);
    }
    uint64_t stage_n = 0, before = 0;
    for (int j = 0; j < D && st == MW_OK; j++) stage_n += dn[j], before += j < d ? dn[j] : 0;
    if (st == MW_OK) {
        pn[s] = stage_n;
        for (int j = 0; j < P; j++) cnt[j] = 1, cnt[P + j] = (size_t)j;
        st = pc->allgatherv(pc, pn, sizeof *pn, cnt, cnt + P);
    }
    uint64_t sbefore = 0, nq = 0;
    for (int j = 0; j < P && st == MW_OK; j++) sbefore += j < s ? pn[j] : 0, nq += pn[j];
    if (st == MW_OK && nq != (total + Q - 1) / Q)
        st = mw_fail(MW_ERR_ARG, "internal: the ranks own %llu quanta of the norm, the buffer has %llu",
                     (unsigned long long)nq, (unsigned long long)((total + Q - 1) / Q));
    if (st == MW_OK) {
        memcpy(all + sbefore + before, parts, (size_t)own * sizeof *parts);
        for (int j = 0, o = 0; j < D; o += (int)dn[j], j++) cnt[j] = (size_t)dn[j], cnt[D + j] = (size_t)(sbefore + (uint64_t)o);
        st = dc->allgatherv(dc, all, sizeof *all, cnt, cnt + D);
    }
    if (st == MW_OK) {
        for (int j = 0, o = 0; j < P; o += (int)pn[j], j++) cnt[j] = (size_t)pn[j], cnt[P + j] = (size_t)o;
        st = pc->allgatherv(pc, all, sizeof *all, cnt, cnt + P);
    }
    if (st == MW_OK) {
        double sum = 0.0;
        for (uint64_t q = 0; q < nq; q++) sum += all[q];
        *norm = sqrt(sum);
    }
    free(len), free(cnt), free(parts), free(dn), free(pn);
    return st;
}
