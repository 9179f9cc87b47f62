/* Scratch files of the disk tier: DIR/memwall-offload-PID.scratch, preallocated before training so
 * that a full disk is refused before step 1, opened with O_DIRECT where the file system allows it,
 * locked (flock) for as long as the run holds it, and removed when it is closed and at exit.
 *
 * They are scratch, never durable state: the checkpoint is. A run killed with SIGKILL leaves its
 * file behind, unlocked; the next run that creates a scratch file in the same folder recognises it
 * by the lock it can take (a live run's file stays locked, so it is never touched) and removes it.
 * A folder lock (DIR/.memwall-offload.lock, held while scanning and creating, and removed by its
 * holder before it lets go) keeps two runs starting at once from mistaking each other's new files
 * for stale ones; nothing of memwall's stays in the folder after a run that ends. */
#ifndef MW_SCRATCH_H
#define MW_SCRATCH_H
#include <stdint.h>

#include "memwall.h"

typedef struct mw_scratch {
    int fd;          /* -1: none */
    int direct;      /* 1 when O_DIRECT took */
    uint64_t bytes;  /* preallocated size */
    char path[4096];
} mw_scratch;

/* Creates dir (mkdir -p) and in it a scratch file of bytes bytes. Stale files of killed runs are
 * removed first: *stale counts them, *stale_bytes their sizes. MW_ERR_IO naming the folder, the
 * bytes needed and the bytes free when the disk cannot hold it (checked with statvfs, then by the
 * preallocation itself), or naming the call and errno; nothing is left behind on failure. */
mw_status mw_scratch_create(mw_scratch *s, const char *dir, uint64_t bytes, int *stale, uint64_t *stale_bytes);
/* The stale files this process has removed so far, and their bytes. */
void mw_scratch_stale_removed(int *count, uint64_t *bytes);
/* Removes every scratch file this process holds (what exit's handler does), for a process about to
 * end without exit's handlers: a rank calling MPI_Abort. The files' descriptors stay open. */
void mw_scratch_remove_live(void);
/* Installs handlers of SIGINT, SIGTERM and SIGHUP that remove the scratch files this process holds
 * and then take the signal's default action (a CLI's choice, never the library's): a run stopped
 * by Ctrl-C, or a rank mpirun ends because another failed, leaves no file behind. */
void mw_scratch_remove_on_signals(void);
/* Closes and removes the file; a closed (fd -1) scratch is left alone. */
void mw_scratch_close(mw_scratch *s);
/* Free bytes for an unprivileged user in dir's file system (statvfs); 0 when unknown. */
uint64_t mw_scratch_free_bytes(const char *dir);
/* The bytes a scratch file created in dir could have: the free bytes of dir's file system (of the
 * nearest folder above it that exists, when dir does not yet), and the stale scratch files in dir
 * that the creation would remove first (only looked at here). 1 and *room set; 0 when unknown. */
int mw_scratch_room(const char *dir, uint64_t *room);
#endif
