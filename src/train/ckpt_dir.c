/* A run directory's checkpoints (listing, pruning) and its --out lock (checkpoint.h). Moved out of
 * checkpoint.c, which is the file format. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fsutil.h"
#include "../core/status.h"
#include "checkpoint.h"

/* ---- listing --------------------------------------------------------------------------------- */

/* The step of a checkpoint file name "step-<digits>.mwck" (any number of digits, as %08d gives
 * 10 from step 1e9): 1 and *step when it is one, 0 otherwise. *step is -1 when the number is
 * beyond any step memwall writes (an int). */
static int ckpt_name_step(const char *nm, long long *step) {
    if (strncmp(nm, "step-", 5) != 0) return 0;
    const char *p = nm + 5;
    long long v = 0;
    size_t nd = 0;
    for (; p[nd] >= '0' && p[nd] <= '9'; nd++)
        if (v >= 0) v = v > (INT_MAX - (p[nd] - '0')) / 10 ? -1 : v * 10 + (p[nd] - '0');
    if (nd == 0 || strcmp(p + nd, ".mwck") != 0) return 0;
    *step = v;
    return 1;
}

static int cmp_file(const void *a, const void *b) { /* newest first; then by name, for a fixed order */
    const mw_ckpt_file *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    return strcmp(x->name, y->name);
}

mw_status mw_ckpt_list(const char *dir, mw_ckpt_file **files, int *n) {
    *files = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return MW_OK;
        return mw_fail(MW_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    }
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        if (!ckpt_name_step(e->d_name, &step)) continue;
        if (*n == cap) {
            mw_ckpt_file *nf = realloc(*files, sizeof **files * (size_t)(cap = cap ? 2 * cap : 16));
            if (!nf) {
                closedir(d);
                free(*files);
                *files = NULL;
                *n = 0;
                return mw_fail(MW_ERR_NOMEM, "out of memory listing %s", dir);
            }
            *files = nf;
        }
        mw_ckpt_file *f = &(*files)[(*n)++];
        f->step = step;
        snprintf(f->name, sizeof f->name, "%s", e->d_name);
    }
    closedir(d);
    if (*n > 1) qsort(*files, (size_t)*n, sizeof **files, cmp_file);
    return MW_OK;
}

/* Whether the temporary checkpoint name nm (".step-N.mwck.tmp.PID") belongs to a process that is
 * gone: only those are stale; a live run's half-written file is left alone. */
static int tmp_is_stale(const char *nm) {
    if (strncmp(nm, ".step-", 6) != 0) return 0;
    const char *t = strstr(nm, ".mwck.tmp.");
    if (!t) return 0;
    t += 10;
    char *end;
    errno = 0;
    long pid = strtol(t, &end, 10);
    if (*t < '0' || *t > '9' || *end || errno || pid <= 0 || pid > INT_MAX) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

mw_status mw_ckpt_prune(const char *dir, int keep, int keep_step) {
    mw_ckpt_file *f;
    int n;
    MW_TRY(mw_ckpt_list(dir, &f, &n));
    char p[4096 + 300];
    for (int i = keep; i < n; i++) {
        if (f[i].step == keep_step) continue; /* never the one just written */
        snprintf(p, sizeof p, "%s/%s", dir, f[i].name);
        if (unlink(p) != 0 && errno != ENOENT) {
            free(f);
            return mw_fail(MW_ERR_IO, "cannot delete old checkpoint %s: %s", p, strerror(errno));
        }
    }
    free(f);
    DIR *d = opendir(dir); /* temporaries of runs that died while saving */
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (tmp_is_stale(e->d_name)) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    return MW_OK;
}

/* ---- directories and the --out lock ------------------------------------------------------------ */


/* Tries the lock of fd; MW_ERR_IO naming the holder (the pid the lock file records) if taken. */
static mw_status take_lock(int fd, const char *lock, const char *dir) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return MW_OK;
    int err = errno;
    if (err != EWOULDBLOCK) return mw_fail(MW_ERR_IO, "cannot lock %s: %s", lock, strerror(err));
    char b[32] = {0};
    ssize_t k = pread(fd, b, sizeof b - 1, 0);
    long pid = k > 0 ? strtol(b, NULL, 10) : 0;
    if (pid > 0)
        return mw_fail(MW_ERR_IO, "%s is in use by another memwall run (pid %ld, holding %s): wait for it, or use another --out",
                       dir, pid, lock);
    return mw_fail(MW_ERR_IO, "%s is in use by another memwall run (pid not yet recorded in %s): wait for it, or use another --out",
                   dir, lock);
}

mw_status mw_dir_lock(const char *dir, int create, int *fd) {
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/" MW_LOCK_NAME, dir);
    *fd = open(lock, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (*fd < 0) {
        if (!create && (errno == ENOENT || errno == ENOTDIR)) return MW_OK;
        return mw_fail(MW_ERR_IO, "cannot open %s: %s", lock, strerror(errno));
    }
    mw_status s = take_lock(*fd, lock, dir);
    if (s == MW_OK) {
        char b[32];
        int n = snprintf(b, sizeof b, "%ld\n", (long)getpid());
        if (ftruncate(*fd, 0) != 0 || pwrite(*fd, b, (size_t)n, 0) != n)
            s = mw_fail(MW_ERR_IO, "cannot write %s: %s", lock, strerror(errno));
    }
    if (s != MW_OK) {
        close(*fd);
        *fd = -1;
    }
    return s;
}

