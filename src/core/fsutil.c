/* Durability helpers; see fsutil.h. */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

mw_status mw_mkdirs(const char *path) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return mw_fail(MW_ERR_ARG, "path too long: %.64s...", path);
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/') p[--len] = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) == 0) { /* a new entry: make it durable in its parent */
            char *slash = strrchr(p, '/');
            mw_status st;
            if (!slash) st = mw_sync_dir(".");
            else if (slash == p) st = mw_sync_dir("/");
            else {
                *slash = 0;
                st = mw_sync_dir(p);
                *slash = '/';
            }
            if (st != MW_OK) return st;
        } else if (errno != EEXIST) {
            return mw_fail(MW_ERR_IO, "cannot create %s: %s", p, strerror(errno));
        } else {
            struct stat sb;
            if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) return mw_fail(MW_ERR_IO, "cannot create %s: it exists and is not a directory", p);
        }
        if (c == 0) break;
        *s = c;
    }
    return MW_OK;
}

mw_status mw_mkdirs_parent(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path) return MW_OK; /* "x" or "/x": the parent exists */
    if ((size_t)(slash - path) >= sizeof dir) return mw_fail(MW_ERR_ARG, "path too long: %.64s...", path);
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = 0;
    return mw_mkdirs(dir);
}
