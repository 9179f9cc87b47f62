/* Durability helpers for files written under a temporary name and renamed into place. */
#ifndef MW_FSUTIL_H
#define MW_FSUTIL_H
#include <stdio.h>

#include "memwall.h"

/* fsyncs directory dir, so that a rename or a creation in it survives a crash. MW_ERR_IO naming
 * the directory on failure. */
mw_status mw_sync_dir(const char *dir);
/* fsyncs the directory that holds path ("." when path has no '/'). */
mw_status mw_sync_parent(const char *path);
/* mkdir -p path: creates each missing directory, syncing its parent so the new entry survives a
 * crash. MW_ERR_IO naming the directory when one cannot be created or a file is in the way. */
mw_status mw_mkdirs(const char *path);
/* mw_mkdirs of the directory that holds path (nothing when path has no '/'). */
mw_status mw_mkdirs_parent(const char *path);
/* Creates a new file beside path, named "PATH.tmp.PID.K" (O_EXCL: never another process's, nor
 * an older one of this process), for writing and then renaming over path. tmp (n bytes) gets its
 * name; *f the stream, which the caller closes. MW_ERR_IO naming the file on failure. */
mw_status mw_tmp_create(const char *path, char *tmp, size_t n, FILE **f);
#endif
