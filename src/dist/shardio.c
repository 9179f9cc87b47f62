/* The arrays of a ZeRO-sharded replica group inside a parallel layout, for checkpoints (shardio.h). */
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../graph/graph_impl.h"
#include "../graph/model.h"
#include "shardio.h"

enum { TAG_PIECE = 21 };

int mw_shardio_sharded(const mw_model *m, int a) {
    if (!m->comm || m->comm->size < 2 || !m->cfg.dp) return 0;
    return a == MW_SHARDIO_PARAMS ? mw_graph_params_zero3(m) : mw_graph_opt_sharded(m);
}

/* Array a's bits an element and bytes in all */
static void array_shape(const mw_model *m, int a, int *bits, uint64_t *bytes) {
    *bits = a == MW_SHARDIO_PARAMS ? 32 : m->opt.bits[a];
    *bytes = a == MW_SHARDIO_PARAMS ? (uint64_t)m->nfloats * 4 : mw_model_state_bytes(m, a);
}

/* Replica r's bytes [*x, *y) of array a: its elements', the last replica's to the array's end */
static void owned(const mw_model *m, int a, int r, uint64_t *x, uint64_t *y) {
    int bits;
    uint64_t bytes, lo, hi;
    array_shape(m, a, &bits, &bytes);
    const int W = m->comm->size;
    mw_zero_shard(m->nfloats, W, r, &lo, &hi);
    *x = lo * (uint64_t)bits / 8;
    *y = r == W - 1 ? bytes : hi * (uint64_t)bits / 8;
    if (*x > bytes) *x = bytes;
    if (*y > bytes) *y = bytes;
    if (*y < *x) *y = *x;
}

/* This replica's bytes [x, y) of array a (all in its shard) into dst */
static mw_status read_own(mw_model *m, int a, uint64_t x, uint64_t y, char *dst) {
    if (a == MW_SHARDIO_PARAMS) { /* whole floats: the shard's elements start at zlo */
        const float *p = mw_model_shard_params(m);
        if (!p) return mw_fail(MW_ERR_ARG, "internal: the parameters' shard is not in memory");
        memcpy(dst, (const char *)p + (x - (uint64_t)m->zlo * 4), (size_t)(y - x));
        return MW_OK;
    }
    for (uint64_t off = x; off < y;) {
        const void *p;
        size_t n;
        MW_TRY(mw_model_state_view(m, a, off, &p, &n));
        if (off + n > y) n = (size_t)(y - off);
        memcpy(dst + (off - x), p, n);
        off += n;
    }
    return MW_OK;
}

mw_status mw_shardio_gather(mw_model *m, int a, uint64_t off, size_t n, void *out) {
    mw_comm *cm = m->comm;
    int bits;
    uint64_t bytes;
    array_shape(m, a, &bits, &bytes);
    if (!cm || a < 0 || a > 2 || !bits || off + n > bytes)
        return mw_fail(MW_ERR_ARG, "internal: bytes %llu.. of sharded array %d", (unsigned long long)off, a);
    const int W = cm->size, R = cm->rank;
    const uint64_t end = off + n;
    if (R != 0) { /* this replica's piece of the window, to replica 0 */
        uint64_t x, y;
        owned(m, a, R, &x, &y);
        if (x < off) x = off;
        if (y > end) y = end;
        if (y <= x) return MW_OK;
        char *buf = malloc((size_t)(y - x));
        if (!buf) return mw_fail(MW_ERR_NOMEM, "out of memory sending a shard's piece of a checkpoint");
        mw_status s = read_own(m, a, x, y, buf);
        /* a failed read sends nothing: replica 0 waits, and the run ends on this error */
        if (s == MW_OK) s = cm->send(cm, buf, (size_t)(y - x), 0, TAG_PIECE);
        free(buf);
        return s;
    }
    for (int j = 0; j < W; j++) {
        uint64_t x, y;
        owned(m, a, j, &x, &y);
        if (x < off) x = off;
        if (y > end) y = end;
        if (y <= x) continue;
        char *dst = (char *)out + (x - off);
        MW_TRY(j == 0 ? read_own(m, a, x, y, dst) : cm->recv(cm, dst, (size_t)(y - x), j, TAG_PIECE));
    }
    return MW_OK;
}
