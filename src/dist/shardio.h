/* The arrays of a ZeRO-sharded replica group inside a parallel layout (--pp or --tp with --zero 1-3
 * over D replicas), for checkpoints in the single-process format (src/train/ckpt_ranks.c,
 * checkpoint.c; src/dist/shardio.c).
 *
 * Each of the D replicas of a stage (or of a tensor-parallel rank) holds elements [zlo, zhi) of
 * the optimizer's arrays M and V (mw_zero_shard over the stage's flat buffer), and under --zero 3
 * of the parameters too. A checkpoint is written by replica 0, which gathers each window of an
 * array from the replicas that hold it (collective over the data-parallel group m->comm: every
 * replica calls it with the same window, in the same order); a load reads the whole file on every
 * replica, each keeping its shard (mw_zero_state_window drops the rest; under --tp through
 * mw_model_tp_take_moment, a tensor-parallel rank's elements).
 * May call: src/dist (mw_zero_shard), src/graph (the arrays, state.c's views). */
#ifndef MW_DIST_SHARDIO_H
#define MW_DIST_SHARDIO_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

/* The arrays of mw_shardio_gather: the optimizer's M and V as it stores them (32, 8 or 4 bits an
 * element), and the parameters (float32). */
enum { MW_SHARDIO_M = 0, MW_SHARDIO_V = 1, MW_SHARDIO_PARAMS = 2 };

/* 1 when m's replicas shard array a (MW_SHARDIO_*) over m->comm: the optimizer's arrays under
 * --zero >= 1, the parameters under --zero 3 (over more than one replica); 0 when every replica
 * holds the whole array (then replica 0 reads its own). */
int mw_shardio_sharded(const mw_model *m, int a);

/* Bytes [off, off + n) of array a (of the flat buffer, as stored) into out on replica 0 (rank 0 of
 * m->comm): each replica sends its shard's piece (the byte range of its elements, the last
 * replica's to the array's end), replica 0 copies its own. Collective over m->comm; out may be
 * NULL on the other replicas. MW_ERR_ARG out of range, MW_ERR_NOMEM, or the transfer's failure
 * (then the replicas cannot agree any more: the run ends on it). */
mw_status mw_shardio_gather(mw_model *m, int a, uint64_t off, size_t n, void *out);

#endif
