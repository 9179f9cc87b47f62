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
 * OP is read, write, or alloc (the preallocation of a scratch file, src/memory/scratch.c). */
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
