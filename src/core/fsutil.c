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

mw_status mw_tmp_create(const char *path, char *tmp, size_t n, FILE **f) {
    *f = NULL;
    for (unsigned k = 0;; k++) {
        if ((size_t)snprintf(tmp, n, "%s.tmp.%d.%u", path, (int)getpid(), k) >= n)
            return mw_fail(MW_ERR_IO, "path too long: %.100s...", path);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST && k < 1000) continue;
        if (fd < 0) return mw_fail(MW_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        if (!(*f = fdopen(fd, "w"))) {
            int err = errno;
            close(fd);
            unlink(tmp);
            return mw_fail(MW_ERR_IO, "cannot open %s: %s", tmp, strerror(err));
        }
        return MW_OK;
    }
}
