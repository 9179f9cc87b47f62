#include "scratch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../core/arena.h"
#include "../core/fsutil.h"
#include "../core/status.h"
#include "aio.h"

#define PREFIX "memwall-offload-"
#define SUFFIX ".scratch"

/* The scratch files this process holds, removed at exit (a CLI error exits without destroying the
 * model). Guarded by mu; at most MAXLIVE at once. */
#define MAXLIVE 16
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *live[MAXLIVE];
static int atexit_set;
static int stale_total;
static uint64_t stale_total_bytes;

void mw_scratch_stale_removed(int *count, uint64_t *bytes) {
    pthread_mutex_lock(&mu);
    *count = stale_total;
    *bytes = stale_total_bytes;
    pthread_mutex_unlock(&mu);
}

static void remove_live(void) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAXLIVE; i++)
        if (live[i]) {
            char *d = live[i];
            unlink(d);
            live[i] = NULL;
            free(d);
        }
    pthread_mutex_unlock(&mu);
}

void mw_scratch_remove_live(void) { remove_live(); }

/* SIGINT, SIGTERM, SIGHUP (mw_scratch_remove_on_signals): the files go (unlink only: safe in a
 * handler, on any thread: an entry of live is a whole string or NULL at every moment, see track),
 * then the signal's own action */
static void on_signal(int sig) {
    for (int i = 0; i < MAXLIVE; i++) {
        const char *p = live[i];
        if (p) unlink(p);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void mw_scratch_remove_on_signals(void) {
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int k = 0; k < 3; k++) {
        struct sigaction was;
        if (sigaction(sigs[k], NULL, &was) == 0 && was.sa_handler == SIG_IGN) continue; /* ignored stays ignored */
        signal(sigs[k], on_signal);
    }
}

static void track(const char *path, int add) {
    pthread_mutex_lock(&mu);
    if (add && !atexit_set) atexit_set = atexit(remove_live) == 0;
    for (int i = 0; i < MAXLIVE; i++) {
        if (add && !live[i]) {
            char *d = strdup(path); /* whole before it is seen */
            live[i] = d;
            break;
        }
        if (!add && live[i] && strcmp(live[i], path) == 0) {
            char *d = live[i];
            live[i] = NULL; /* unseen before it is freed */
            free(d);
            break;
        }
    }
    pthread_mutex_unlock(&mu);
}

uint64_t mw_scratch_free_bytes(const char *dir) {
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return 0;
    return (uint64_t)v.f_bavail * v.f_frsize;
}

static int is_scratch_name(const char *n) {
    const size_t l = strlen(n), pl = strlen(PREFIX), sl = strlen(SUFFIX);
    return l > pl + sl && strncmp(n, PREFIX, pl) == 0 && strcmp(n + l - sl, SUFFIX) == 0;
}

/* 1 when the scratch file named n in dir (fd open on it) is stale: nobody holds its lock, or the
 * run its name gives is gone (a killed run's io_uring can keep the file, and so its lock, alive
 * for a moment after the process has died). keep: give the lock back (only looking). */
static int is_stale(int fd, const char *n, int keep) {
    const long pid = strtol(n + strlen(PREFIX), NULL, 10);
    const int gone = pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    if (gone) return 1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) return 0;
    if (keep) flock(fd, LOCK_UN);
    return 1;
}

int mw_scratch_room(const char *dir, uint64_t *room) {
    /* the folder, or the nearest one above it that exists (the run makes the rest) */
    char d[4400];
    snprintf(d, sizeof d, "%s", dir);
    struct statvfs v;
    while (statvfs(d, &v) != 0) {
        if (errno != ENOENT) return 0;
        size_t l = strlen(d);
        while (l > 1 && d[l - 1] == '/') d[--l] = 0;
        char *slash = strrchr(d, '/');
        if (!slash) {
            if (strcmp(d, ".") == 0) return 0;
            snprintf(d, sizeof d, ".");
        } else if (slash == d) {
            if (d[1] == 0) return 0;
            d[1] = 0;
        } else {
            *slash = 0;
        }
    }
    uint64_t r = (uint64_t)v.f_bavail * v.f_frsize;
    DIR *dd = opendir(dir); /* the stale scratch files a run there would remove first */
    struct dirent *e;
    while (dd && (e = readdir(dd))) {
        if (!is_scratch_name(e->d_name)) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0) continue;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && is_stale(fd, e->d_name, 1)) r += (uint64_t)st.st_blocks * 512;
        close(fd);
    }
    if (dd) closedir(dd);
    *room = r;
    return 1;
}

/* Removes every scratch file in dir that no live run holds locked. */
static mw_status remove_stale(const char *dir, int *count, uint64_t *bytes) {
    DIR *d = opendir(dir);
    if (!d) return mw_fail(MW_ERR_IO, "--offload-dir %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_scratch_name(e->d_name)) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        int fd = open(p, O_RDWR | O_CLOEXEC);
        if (fd < 0) continue; /* gone already, or not ours to touch */
        struct stat st;
        if (is_stale(fd, e->d_name, 0) && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            if (unlink(p) == 0) {
                (*count)++;
                *bytes += (uint64_t)st.st_blocks * 512;
            }
        }
        close(fd);
    }
    closedir(d);
    return MW_OK;
}

/* The folder lock: DIR/.memwall-offload.lock, flocked. Its holder removes it before unlocking (no
 * empty file stays in the folder), so a waiter that gets the lock of a file no longer at that
 * path took a removed one: it tries again with the path's current file, which it may create. The
 * fd, or -1 with errno set. */
static int folder_lock(const char *lockp) {
    for (;;) {
        int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lk < 0) return -1;
        int r;
        while ((r = flock(lk, LOCK_EX)) != 0 && errno == EINTR) {
        }
        struct stat a, b;
        if (r == 0 && fstat(lk, &a) == 0 && stat(lockp, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return lk;
        const int e = errno;
        close(lk);
        if (r != 0) {
            errno = e;
            return -1;
        }
    }
}

static void folder_unlock(const char *lockp, int lk) {
    unlink(lockp);
    flock(lk, LOCK_UN);
    close(lk);
}

mw_status mw_scratch_create(mw_scratch *s, const char *dir, uint64_t bytes, int *stale, uint64_t *stale_bytes) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    *stale = 0;
    *stale_bytes = 0;
    if (mw_mkdirs(dir) != MW_OK) return mw_fail(MW_ERR_IO, "--offload-dir: %s", mw_last_error());
    char lockp[4400];
    snprintf(lockp, sizeof lockp, "%s/.memwall-offload.lock", dir);
    int lk = folder_lock(lockp);
    if (lk < 0) return mw_fail(MW_ERR_IO, "--offload-dir %s is not writable: %s", dir, strerror(errno));
    mw_status st = remove_stale(dir, stale, stale_bytes);
    pthread_mutex_lock(&mu);
    stale_total += *stale;
    stale_total_bytes += *stale_bytes;
    pthread_mutex_unlock(&mu);
    int fd = -1;
    char b1[32], b2[32];
    if (st == MW_OK) {
        const uint64_t avail = mw_scratch_free_bytes(dir);
        if (avail && avail < bytes)
            st = mw_fail(MW_ERR_IO, "the disk tier needs %llu bytes (%s) in --offload-dir %s, which has %llu bytes (%s) "
                         "free: free some space, choose another folder, or offload less",
                         (unsigned long long)bytes, mw_fmt_bytes(bytes, b1, sizeof b1), dir,
                         (unsigned long long)avail, mw_fmt_bytes(avail, b2, sizeof b2));
    }
    if (st == MW_OK) {
        snprintf(s->path, sizeof s->path, "%s/" PREFIX "%d" SUFFIX, dir, (int)getpid());
        unlink(s->path); /* this pid's own leftover: a killed run whose pid came back */
        fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
        s->direct = fd >= 0;
        if (fd < 0 && errno == EINVAL) fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) st = mw_fail(MW_ERR_IO, "cannot create the scratch file %s: %s", s->path, strerror(errno));
    }
    if (st == MW_OK && flock(fd, LOCK_EX | LOCK_NB) != 0)
        st = mw_fail(MW_ERR_IO, "cannot lock the scratch file %s: %s", s->path, strerror(errno));
    if (st == MW_OK) {
        track(s->path, 1);
        int e = mw_aio_fault_take(MW_AIO_OP_ALLOC) != MW_AIO_FAULT_NONE ? ENOSPC : posix_fallocate(fd, 0, (off_t)bytes);
        if (e != 0) {
            const uint64_t avail = mw_scratch_free_bytes(dir);
            if (e == ENOSPC)
                st = mw_fail(MW_ERR_IO, "the disk tier needs %llu bytes (%s) in --offload-dir %s, which has %llu bytes (%s) "
                             "free (preallocating %s: No space left on device)",
                             (unsigned long long)bytes, mw_fmt_bytes(bytes, b1, sizeof b1), dir,
                             (unsigned long long)avail, mw_fmt_bytes(avail, b2, sizeof b2), s->path);
            else
                st = mw_fail(MW_ERR_IO, "cannot preallocate %llu bytes for the scratch file %s: %s",
                             (unsigned long long)bytes, s->path, strerror(e));
        }
    }
    if (st != MW_OK && fd >= 0) {
        unlink(s->path);
        track(s->path, 0);
        close(fd);
        fd = -1;
    }
    folder_unlock(lockp, lk);
    if (st != MW_OK) return st;
    s->fd = fd;
    s->bytes = bytes;
    return MW_OK;
}

void mw_scratch_close(mw_scratch *s) {
    if (s->fd < 0) return;
    unlink(s->path);
    track(s->path, 0);
    close(s->fd);
    s->fd = -1;
}
