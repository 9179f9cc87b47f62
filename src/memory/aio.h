/* Asynchronous file I/O for the disk tier: io_uring (liburing) where the kernel allows it, a
 * pool of pread/pwrite threads where it does not (containers often refuse io_uring_setup with
 * EPERM or ENOSYS), with the same contract.
 *
 * A request is a read or a write of len bytes at offset off of one file descriptor, into or from
 * caller memory that stays valid until the request is waited for. Up to `depth` requests are in
 * flight at once. Every completion is checked: a short transfer is continued from where it stopped
 * until it is whole, and fails (MW_ERR_IO) when the file ends or the device refuses; the message
 * names the file, the operation, the offset, the length and the errno. For O_DIRECT files the
 * caller aligns buffers, lengths and offsets to MW_AIO_ALIGN (src/memory/offload.c does, once).
 *
 * Fault injection (tests): MEMWALL_IO_FAULT=KIND:OP:N in the environment, or mw_aio_fault_set,
 * makes the N-th request (1-based, counted over the whole process) of OP fail as KIND says:
 *   eio      the request completes with EIO;
 *   enospc   the request completes with ENOSPC (on a write: a full disk);
 *   short    the request transfers half its bytes, then the file "ends" (the continuation reads
 *            0 bytes): an unfinishable short transfer, which must fail;
 *   partial  the request transfers half its bytes first; the continuation must finish it, so the
 *            data arrive whole and nothing fails.
 * OP is read, write, or alloc (the preallocation of a scratch file, src/memory/scratch.c).
 *
 * Throttle (tests): MEMWALL_IO_THROTTLE_MBPS=R in the environment when an engine is created makes
 * it a disk of R MB/s (10^6 bytes/s): requests are served one after another, each completing no
 * earlier than len / R seconds after the previous one (or its submission), held back when the
 * real disk was faster. A disk slower than the one measured (mw_offload_measure, whose engine is
 * never throttled) must show up as waiting, never as a wrong result.
 *
 * Overlaps (always): a request may share with the requests in flight (started, not yet waited
 * for) no memory where either of the two is a read, and no file bytes where either is a write;
 * starting one that does fails (MW_ERR_ARG, naming both) whatever the timing, since the engine
 * orders neither: a buffer reused, or file bytes read back, before the earlier transfer was waited
 * for would give a wrong result at some timings only.
 *
 * Check (tests): MEMWALL_IO_CHECK=1 in the environment when an engine is created hashes each
 * write's source at its start and again at its wait; a source that changed in between fails the
 * wait (MW_ERR_ARG), at every timing (the caller wrote into memory a write in flight still used).
 *
 * Clock (mw_aio_times): a request is in flight from its submission until its completion; the
 * busy seconds are the union of those intervals (per op and over both), and the wait seconds the
 * caller's time blocked in mw_aio_wait on a request not yet complete. The thread pool times a
 * completion when the system call returns; io_uring when memwall reaps it: at a wait, a new
 * request, or mw_aio_poll (the executor polls between ops), so its busy time may run over by up
 * to the time between two of those. */
#ifndef MW_AIO_H
#define MW_AIO_H
#include <stdint.h>

#include "memwall.h"

#define MW_AIO_ALIGN 4096 /* O_DIRECT alignment of buffers, lengths and offsets */

/* Engines. AUTO: io_uring when it works here, else the thread pool (MEMWALL_AIO=threads or
 * io_uring in the environment overrides AUTO, for tests and for users who must pick). */
enum { MW_AIO_AUTO = 0, MW_AIO_URING, MW_AIO_THREADS };
enum { MW_AIO_OP_READ = 0, MW_AIO_OP_WRITE, MW_AIO_OP_ALLOC, MW_AIO_OP_COUNT };
enum { MW_AIO_FAULT_NONE = 0, MW_AIO_FAULT_EIO, MW_AIO_FAULT_ENOSPC, MW_AIO_FAULT_SHORT, MW_AIO_FAULT_PARTIAL };

typedef struct mw_aio mw_aio;

/* An engine for fd (path names it in messages; copied) with depth requests in flight at most
 * (1 to 64). kind MW_AIO_URING fails (MW_ERR_IO, with the kernel's reason) where io_uring does not
 * work; MW_AIO_AUTO then falls back to threads, and mw_aio_note says why. */
mw_status mw_aio_create(mw_aio **out, int fd, const char *path, int depth, int kind);
/* Waits for every request in flight, then frees. NULL: nothing. */
void mw_aio_destroy(mw_aio *io);
/* "io_uring" or "threads" */
const char *mw_aio_kind_name(const mw_aio *io);
/* Why AUTO did not take io_uring ("" when it did, or was not asked). */
const char *mw_aio_note(const mw_aio *io);

/* Starts a request; *id names it for mw_aio_wait. MW_ERR_ARG when depth requests are already in
 * flight or len is 0 (a programmer's error, reported rather than asserted). */
mw_status mw_aio_read(mw_aio *io, void *buf, uint64_t len, uint64_t off, int *id);
mw_status mw_aio_write(mw_aio *io, const void *buf, uint64_t len, uint64_t off, int *id);
/* Waits for request id; MW_OK when all its bytes moved, MW_ERR_IO with the message otherwise.
 * The id is free again afterwards. */
mw_status mw_aio_wait(mw_aio *io, int id);
/* Waits for every request in flight; the first failure's status (all are waited for). */
mw_status mw_aio_wait_all(mw_aio *io);
/* Seconds since creation (see Clock above), the intervals still open counted to now. */
typedef struct mw_aio_time {
    double read_s, write_s, busy_s, wait_s; /* busy_s: a read or a write in flight */
} mw_aio_time;
void mw_aio_times(mw_aio *io, mw_aio_time *t);
/* Reaps the completions already in (io_uring), so that they are timed now; never waits. */
void mw_aio_poll(mw_aio *io);
/* Bytes completed by reads and by writes since creation. */
void mw_aio_stats(const mw_aio *io, uint64_t *read, uint64_t *written);

/* Fault injection: the n-th request of op from now on (n >= 1) fails as kind says (kind NONE
 * clears op's fault). Reads MEMWALL_IO_FAULT the first time any engine or scratch file needs it. */
void mw_aio_fault_set(int op, int kind, long n);
/* paused 1: this thread's requests neither count nor take faults (the disk's measurement, which is
 * not the run's I/O) until called with 0. */
void mw_aio_faults_pause(int paused);
/* Counts one request of op and returns the fault it must take (MW_AIO_FAULT_NONE mostly). */
int mw_aio_fault_take(int op);
#endif
