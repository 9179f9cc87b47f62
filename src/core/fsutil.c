/* Durability helpers; see fsutil.h. */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "status.h"

mw_status mw_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return mw_fail(MW_ERR_IO, "cannot sync directory %s: %s", dir, strerror(err));
    return MW_OK;
}

mw_status mw_sync_parent(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) return mw_sync_dir(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path); /* "/x" lives in "/" */
    if (n >= sizeof dir) return mw_fail(MW_ERR_IO, "path too long: %.100s...", path);
    memcpy(dir, path, n);
    dir[n] = 0;
    return mw_sync_dir(dir);
}
