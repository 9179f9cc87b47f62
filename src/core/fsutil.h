/* Durability helpers for files written under a temporary name and renamed into place. */
#ifndef MW_FSUTIL_H
#define MW_FSUTIL_H
#include "memwall.h"

/* fsyncs directory dir, so that a rename or a creation in it survives a crash. MW_ERR_IO naming
 * the directory on failure. */
mw_status mw_sync_dir(const char *dir);
/* fsyncs the directory that holds path ("." when path has no '/'). */
mw_status mw_sync_parent(const char *path);
#endif
