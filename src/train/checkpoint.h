/* Internal: the tensor index of a checkpoint file, for streaming exports. */
#ifndef MW_CHECKPOINT_H
#define MW_CHECKPOINT_H
#include "memwall.h"
#include "../core/fsutil.h" /* mw_mkdirs: --out and its parents */

#define MW_CKPT_MAX_INDEX 65536
typedef struct mw_ckpt_entry {
    char name[256];
    int ndim, dims[2];
    uint64_t numel, offset; /* file offset of the float32 parameters */
} mw_ckpt_entry;
typedef struct mw_ckpt_index {
    int n;
    mw_ckpt_entry *e; /* caller-provided, MW_CKPT_MAX_INDEX entries */
} mw_ckpt_index;

/* Verifies path and fills idx with every tensor's name, shape and parameter offset. */
mw_status mw_ckpt_index_read(const char *path, mw_ckpt_info *info, mw_ckpt_index *idx);

/* A checkpoint file of a directory: its name (step-<digits>.mwck) and step (-1: a number beyond
 * int, which memwall never writes). */
typedef struct mw_ckpt_file {
    char name[256];
    long long step;
} mw_ckpt_file;
/* DIR's checkpoint files, newest first, whatever their number of digits; none (MW_OK) when DIR
 * does not exist. *files is malloc'd (NULL when *n is 0). */
mw_status mw_ckpt_list(const char *dir, mw_ckpt_file **files, int *n);


/* The lock file of a run directory, which records its holder's pid. */
#define MW_LOCK_NAME ".memwall.lock"
/* Takes DIR's run lock (flock on DIR/.memwall.lock) for this process and writes the pid into it;
 * *fd holds it until closed. With create 0, a missing lock file (or DIR) is not an error: *fd is
 * -1. MW_ERR_IO naming the other process's pid when another holds the lock. */
mw_status mw_dir_lock(const char *dir, int create, int *fd);
#endif
