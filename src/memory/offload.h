/* The disk tier of a model's optimizer state (--offload optimizer): AdamW's m and v live in one
 * scratch file (src/memory/scratch.c) and pass through memory a chunk at a time, by asynchronous
 * I/O (src/memory/aio.c).
 *
 * The flat state of n floats is cut into chunks of `chunk` floats (the last one shorter). Chunk c
 * owns the file region [c * region, (c + 1) * region), region = 2 * chunk * 4 bytes: its m, then
 * its v, each a multiple of MW_AIO_ALIGN so that every transfer suits O_DIRECT. A step streams the
 * chunks through `slots` staging regions in planned memory (src/graph/graph.c places them): while
 * chunk c is updated, chunks c+1 and c+2 are being read and chunk c-1 written, so the disk works
 * while the update computes. The staging buffer lives only during the optimizer op of the plan
 * (it shares memory with the activations), and between steps for checkpoints (view and map). */
#ifndef MW_OFFLOAD_H
#define MW_OFFLOAD_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

#define MW_OFFLOAD_CHUNK (1u << 20) /* floats of m (and of v) per chunk at most: 4 MiB each */
#define MW_OFFLOAD_MIN_CHUNKS 16     /* a state is cut into this many chunks at least, when large enough */
#define MW_OFFLOAD_SLOTS 4          /* staging regions: update one, read two ahead, write one behind */

typedef struct mw_offload mw_offload;

/* The layout for a state of n floats: floats per chunk, chunks, staging slots, bytes of one
 * region, of the file and of the staging buffer (MW_AIO_ALIGN bytes of slack included, for
 * aligning it inside the arena). */
typedef struct mw_offload_layout {
    size_t chunk, nchunks;
    int slots;
    uint64_t region, file_bytes, staging_bytes;
} mw_offload_layout;
void mw_offload_layout_of(size_t n, mw_offload_layout *out);

/* Creates the scratch file under dir for a state of n floats (zeros: fresh moments) and its I/O
 * engine; staging is the planned buffer of layout.staging_bytes. */
mw_status mw_offload_create(mw_offload **out, const char *dir, size_t n, void *staging);
void mw_offload_destroy(mw_offload *o);

/* The sequential write and read bandwidth (bytes/s) of a scratch file of 64 MiB in dir, through the
 * I/O engine with 8 MiB requests, 4 in flight, as the stream moves them; the file is removed. The
 * last dir's figures are kept, so a process measures a folder once. MW_ERR_IO as mw_offload_create. */
mw_status mw_offload_measure(const char *dir, double *read_bw, double *write_bw);

/* What a run should be told: the file, the I/O engine, whether O_DIRECT took, stale files removed. */
typedef struct mw_offload_info {
    const char *path, *engine, *note; /* note: why not io_uring ("" when it is) */
    int direct, stale;
    uint64_t stale_bytes, file_bytes, bytes_read, bytes_written;
} mw_offload_info;
void mw_offload_get_info(const mw_offload *o, mw_offload_info *info);

/* One pass over the whole state: fn(ctx, lo, hi, m, v) for each chunk in order, m and v holding
 * elements [lo, hi) of the moments (fn updates them in place); each chunk is written back. */
typedef void (*mw_offload_chunk_fn)(void *ctx, size_t lo, size_t hi, float *m, float *v);
mw_status mw_offload_stream(mw_offload *o, mw_offload_chunk_fn fn, void *ctx);

/* Random access for checkpoints, outside steps. view: *p points at elements [off, off + *n) of
 * moment which (0: m, 1: v), *n >= 1 and at most to the end of off's chunk and of `limit` (an
 * element bound, exclusive); valid until the next call. map: the same for writing, committed to
 * the file by mw_offload_commit. */
mw_status mw_offload_view(mw_offload *o, int which, size_t off, size_t limit, const float **p, size_t *n);
mw_status mw_offload_map(mw_offload *o, int which, size_t off, size_t limit, float **p, size_t *n);
mw_status mw_offload_commit(mw_offload *o);
/* mw_offload_commit ends a run of view/map calls: it writes a mapped chunk back and gives the
 * staging memory back to the step (which shares it with activations), so a later view reads
 * the file again. */
#endif
