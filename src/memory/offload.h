/* The disk tier of a model's states (--offload): one scratch file (src/memory/scratch.c) read and
 * written by asynchronous I/O (src/memory/aio.c).
 *
 * The flat state of n floats (the parameter table's layout) is cut into segments seg_lo[0] = 0 <=
 * seg_lo[1] <= ... <= seg_lo[nseg] = n: for --offload optimizer one segment; with gradients or
 * parameters on disk, the tensors before the first block, each block, and those after the last.
 * Segment s holds the arrays mask[s] says (MW_ARR_G gradients, P parameters, M and V AdamW's
 * moments), each contiguous in the file and padded to 1024 floats, so that a block's parameters or
 * gradients move in one request and every transfer suits O_DIRECT. Segments are cut into chunks of
 * at most `chunk` floats (a multiple of 1024; the last chunk of a segment shorter).
 *
 * A pass (mw_offload_stream) takes the chunks in order through `slots` staging slots in planned
 * memory: while chunk c is being updated, chunks c+1 and c+2 are read and chunk c-1 written, so
 * the disk works while the update computes. The staging buffer lives during the optimizer op of the
 * plan (it shares memory with the activations), and between steps for checkpoints (view and map).
 * A segment's whole array moves with mw_offload_seg_start (the blocks' parameters and gradients). */
#ifndef MW_OFFLOAD_H
#define MW_OFFLOAD_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

#define MW_OFFLOAD_CHUNK (1u << 20) /* floats of one array per chunk at most: 4 MiB */
#define MW_OFFLOAD_MIN_CHUNKS 16     /* a state is cut into this many chunks at least, when large enough */
#define MW_OFFLOAD_SLOTS 4           /* staging slots: update one, read two ahead, write one behind */
#define MW_OFFLOAD_Q 1024            /* floats of one 4096-byte block: the padding quantum */

/* G gradients, P parameters (the fp32 master under --precision bf16), M and V the optimizer's
 * moments, H the parameters' bfloat16 copy that forward and backward read under --precision bf16
 * (written by the optimizer's pass that writes P; never read by it: a write-only array of a pass) */
enum { MW_ARR_G = 0, MW_ARR_P, MW_ARR_M, MW_ARR_V, MW_ARR_H, MW_ARR_COUNT };
#define MW_ARR_BIT(a) (1u << (a))
#define MW_ARR_MV (MW_ARR_BIT(MW_ARR_M) | MW_ARR_BIT(MW_ARR_V))

/* n rounded up to the padding quantum */
static inline size_t mw_offload_pad(size_t n) { return (n + MW_OFFLOAD_Q - 1) / MW_OFFLOAD_Q * MW_OFFLOAD_Q; }

typedef struct mw_offload mw_offload;

/* The layout of segments (see above): floats per chunk, chunks, staging slots, the most arrays a
 * segment holds (each slot has room for that many chunk arrays), the bytes of the file, of the
 * staging buffer (MW_AIO_ALIGN bytes of slack included, for aligning it inside the arena), and of
 * each array over the whole file (arr_bytes[a]). */
typedef struct mw_offload_layout {
    size_t n, chunk, nchunks;
    int slots, arrays;
    int bits[MW_ARR_COUNT];   /* bits per element of each array: 32 (P, fp32 moments), 16 (H, bf16 G), 8 or 4 */
    uint64_t slot_bytes;      /* one staging slot: a chunk of every array */
    uint64_t file_bytes, staging_bytes, arr_bytes[MW_ARR_COUNT];
} mw_offload_layout;
/* bits: per array (G and P 32; M and V the optimizer's: 32, 8 or 4; ignored where no segment holds
 * the array). Narrow arrays pad to 4096 bytes as the others do, and the chunk is a multiple of
 * 32768 / bits elements of the narrowest, so every transfer is O_DIRECT-sized. */
void mw_offload_layout_of(int nseg, const size_t *seg_lo, const unsigned *mask, const int *bits, mw_offload_layout *out);
/* The padded bytes of len elements of an array of bits per element. */
uint64_t mw_offload_arr_bytes(size_t len, int bits);

/* Creates the scratch file under dir (zeros: fresh moments) and its I/O engine; staging is the
 * planned buffer of layout.staging_bytes. seg_lo and mask are copied. */
mw_status mw_offload_create(mw_offload **out, const char *dir, int nseg, const size_t *seg_lo, const unsigned *mask,
                            const int *bits, void *staging);
/* ... with extra bytes (a multiple of MW_AIO_ALIGN) after the arrays: a region of the file the
 * caller lays out itself (the swapped activations, src/graph/actstore.c), moved with
 * mw_offload_extra_start. A layout of no arrays (nseg 1, mask 0, staging NULL) gives a file of
 * that region alone. */
mw_status mw_offload_create_ex(mw_offload **out, const char *dir, int nseg, const size_t *seg_lo, const unsigned *mask,
                               const int *bits, void *staging, uint64_t extra);
void mw_offload_destroy(mw_offload *o);

/* The sequential write and read bandwidth (bytes/s) of a scratch file of 32 MiB in dir, through the
 * I/O engine with 1 MiB requests, 4 in flight (4 MiB of buffers, outside any plan); the file is
 * removed. The last dir's figures are kept, so a process measures a folder once. MW_ERR_IO as
 * mw_offload_create. */
mw_status mw_offload_measure(const char *dir, double *read_bw, double *write_bw);

/* What a run should be told: the file, the I/O engine, whether O_DIRECT took, stale files removed. */
typedef struct mw_offload_info {
    const char *path, *engine, *note; /* note: why not io_uring ("" when it is) */
    int direct, stale;
    uint64_t stale_bytes, file_bytes, bytes_read, bytes_written;
} mw_offload_info;
void mw_offload_get_info(const mw_offload *o, mw_offload_info *info);

/* One pass over every chunk in order: the arrays of rd (MW_ARR_BIT bits) that the chunk's segment
 * holds are read into a staging slot, fn(ctx, lo, hi, seg, arr) runs with arr[a] pointing at
 * elements [lo, hi) of array a (NULL where neither read nor written; a narrow array's element lo
 * starts a byte), and the arrays of wr it holds are written back. An array of wr outside rd is
 * write-only: fn gets its slot, unread, and fills it. */
typedef void (*mw_offload_chunk_fn)(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]);
mw_status mw_offload_stream(mw_offload *o, unsigned rd, unsigned wr, mw_offload_chunk_fn fn, void *ctx);

/* Starts reading (write 0) or writing (1) the whole array a of segment seg from buf, which holds
 * mw_offload_pad(segment length) floats and is MW_AIO_ALIGN-aligned; *id for mw_offload_wait. */
mw_status mw_offload_seg_start(mw_offload *o, int write, int seg, int a, float *buf, int *id);
mw_status mw_offload_wait(mw_offload *o, int id);
/* Starts reading (write 0) or writing (1) bytes at offset off of the extra region from buf (all
 * three MW_AIO_ALIGN-aligned, inside the region); *id for mw_offload_wait. */
mw_status mw_offload_extra_start(mw_offload *o, int write, uint64_t off, void *buf, uint64_t bytes, int *id);
/* The I/O engine's clock (aio.h's mw_aio_times: busy seconds per op and in all, seconds waited). */
void mw_offload_times(mw_offload *o, double *read_s, double *write_s, double *busy_s, double *wait_s);
/* Times the completions already in (aio.h's mw_aio_poll); never waits. */
void mw_offload_poll(mw_offload *o);

/* Random access to arrays M and V for checkpoints, outside steps (off and limit in elements; a
 * narrow array's off must start a byte). view: *p points at elements
 * [off, off + *n) of array a, *n >= 1 and at most to the end of off's chunk and of `limit` (an
 * element bound, exclusive); valid until the next call. map: the same for writing, written back by
 * mw_offload_commit, which ends a run of view/map calls (the staging memory is the step's again). */
mw_status mw_offload_view(mw_offload *o, int a, size_t off, size_t limit, const void **p, size_t *n);
mw_status mw_offload_map(mw_offload *o, int a, size_t off, size_t limit, void **p, size_t *n);
mw_status mw_offload_commit(mw_offload *o);
#endif
