/* Asynchronous file I/O (aio.h): io_uring or a pread/pwrite thread pool behind one request table.
 *
 * Both engines share complete(): given how many bytes one system call moved (or -errno), it
 * decides whether the request is whole, failed, or must continue from where it stopped. Fault
 * injection acts there too, so the engines take the same paths under the same faults. */
#include "aio.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef MW_HAVE_URING
#include <liburing.h>
#endif

#include "../core/status.h"

#define MAX_DEPTH 64
#define MAX_PIECE (1u << 30) /* bytes one system call is asked to move at most */

enum { R_FREE = 0, R_QUEUED, R_RUNNING, R_HELD, R_DONE }; /* HELD: io_uring's, done but throttled */

typedef struct req {
    int state, op, fault, eof_next;
    char *buf;
    uint64_t len, off, done; /* done: bytes moved so far */
    int err;                 /* errno of the failure; 0: none */
    int eof;                 /* the file ended (a read of 0 bytes, a write of 0) */
    double deadline;         /* MEMWALL_IO_THROTTLE_MBPS: completes no earlier (0: no throttle) */
    uint64_t sum;            /* MEMWALL_IO_CHECK: a write's source bytes' hash at submission */
} req;

struct mw_aio {
    int kind, fd, depth;
    char path[1024], note[256];
    req r[MAX_DEPTH];
    uint64_t bytes[2];
    /* the clock (aio.h, mw_aio_times): requests in flight per op and in all, since when, and the
     * closed intervals' seconds; the caller's seconds blocked in waits; the throttle's rate (bytes/s,
     * 0: none) and when its simulated device is free. The pool's workers update the first under mu. */
    int nfl[2], nany, check; /* check: MEMWALL_IO_CHECK (a write's source hashed at submission and wait) */
    double since[2], any_since, busy[2], busy_any, wait_s, rate, dev_free;
    /* the thread pool */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t th[4];
    int nth, stop, queue[MAX_DEPTH], qhead, qlen;
#ifdef MW_HAVE_URING
    struct io_uring ring;
#endif
};

/* ---- fault injection ------------------------------------------------------------------------- */

static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static int fault_env_read;
static int fault_kind[MW_AIO_OP_COUNT];
static long fault_at[MW_AIO_OP_COUNT]; /* requests of op still to come before the faulty one */

static void fault_env(void) {
    if (fault_env_read) return;
    fault_env_read = 1;
    const char *e = getenv("MEMWALL_IO_FAULT");
    if (!e || !*e) return;
    char kind[16], op[16];
    long n;
    if (sscanf(e, "%15[a-z]:%15[a-z]:%ld", kind, op, &n) != 3 || n < 1) {
        fprintf(stderr, "memwall: MEMWALL_IO_FAULT=%s is not KIND:OP:N (eio|enospc|short|partial : read|write|alloc : N >= 1); ignored\n", e);
        return;
    }
    const int k = !strcmp(kind, "eio") ? MW_AIO_FAULT_EIO : !strcmp(kind, "enospc") ? MW_AIO_FAULT_ENOSPC
                : !strcmp(kind, "short") ? MW_AIO_FAULT_SHORT : !strcmp(kind, "partial") ? MW_AIO_FAULT_PARTIAL : -1;
    const int o = !strcmp(op, "read") ? MW_AIO_OP_READ : !strcmp(op, "write") ? MW_AIO_OP_WRITE
                : !strcmp(op, "alloc") ? MW_AIO_OP_ALLOC : -1;
    if (k < 0 || o < 0) {
        fprintf(stderr, "memwall: MEMWALL_IO_FAULT=%s: unknown fault or operation; ignored\n", e);
        return;
    }
    fault_kind[o] = k;
    fault_at[o] = n;
}

void mw_aio_fault_set(int op, int kind, long n) {
    if (op < 0 || op >= MW_AIO_OP_COUNT) return;
    pthread_mutex_lock(&fault_mu);
    fault_env_read = 1;
    fault_kind[op] = kind;
    fault_at[op] = n;
    pthread_mutex_unlock(&fault_mu);
}

static _Thread_local int faults_paused;
void mw_aio_faults_pause(int paused) { faults_paused = paused; }

int mw_aio_fault_take(int op) {
    int k = MW_AIO_FAULT_NONE;
    if (faults_paused) return k;
    pthread_mutex_lock(&fault_mu);
    fault_env();
    if (fault_kind[op] != MW_AIO_FAULT_NONE && --fault_at[op] == 0) {
        k = fault_kind[op];
        fault_kind[op] = MW_AIO_FAULT_NONE;
    }
    pthread_mutex_unlock(&fault_mu);
    return k;
}

/* ---- the clock and the throttle ------------------------------------------------------------ */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Sleeps until monotonic second t (no-op when past). */
static void sleep_until(double t) {
    if (t <= 0) return;
    struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* A request of op enters (on 1) or leaves (0) flight at second t; the caller holds mu (pool). */
static void busy_mark(mw_aio *io, int op, int on, double t) {
    if (on) {
        if (io->nfl[op]++ == 0) io->since[op] = t;
        if (io->nany++ == 0) io->any_since = t;
        return;
    }
    if (--io->nfl[op] == 0) io->busy[op] += t - io->since[op];
    if (--io->nany == 0) io->busy_any += t - io->any_since;
}

/* MEMWALL_IO_THROTTLE_MBPS=R: the rate of a simulated serial device, bytes/s (0: none). Not for
 * a thread whose faults are paused (the disk's measurement measures the disk itself). */
static double throttle_rate(void) {
    if (faults_paused) return 0;
    const char *e = getenv("MEMWALL_IO_THROTTLE_MBPS");
    if (!e || !*e) return 0;
    char *end;
    const double r = strtod(e, &end);
    if (*end || !(r > 0)) {
        fprintf(stderr, "memwall: MEMWALL_IO_THROTTLE_MBPS=%s is not a rate in MB/s above 0; ignored\n", e);
        return 0;
    }
    return r * 1e6;
}

/* ---- completion, shared by the engines ------------------------------------------------------ */

/* How many bytes the next system call of r should move, from buf + done at off + done. */
static uint64_t piece(const req *r) {
    const uint64_t left = r->len - r->done;
    return left < MAX_PIECE ? left : MAX_PIECE;
}

/* Accounts one system call's result res (bytes, or -errno) to r. Returns 1 when r is finished
 * (whole or failed), 0 when it must continue with the rest. */
static int complete(req *r, long res) {
    if (r->eof_next && res > 0) res = 0; /* fault "short": the file ends here */
    if (r->fault && res >= 0) {
        const int f = r->fault;
        r->fault = 0;
        if (f == MW_AIO_FAULT_EIO || f == MW_AIO_FAULT_ENOSPC) {
            res = f == MW_AIO_FAULT_EIO ? -EIO : -ENOSPC;
        } else { /* short and partial: half of it, kept aligned so O_DIRECT can continue */
            long half = (long)(piece(r) / 2) / MW_AIO_ALIGN * MW_AIO_ALIGN;
            if (half == 0) half = (long)(piece(r) / 2);
            if (res > half) res = half;
            if (f == MW_AIO_FAULT_SHORT) r->eof_next = 1;
        }
    }
    if (res == -EINTR || res == -EAGAIN) return 0; /* not started: again */
    if (res < 0) {
        r->err = (int)-res;
        return 1;
    }
    if (res == 0) {
        r->eof = 1;
        return 1;
    }
    r->done += (uint64_t)res;
    return r->done >= r->len;
}

static mw_status req_status(mw_aio *io, req *r) {
    const char *what = r->op == MW_AIO_OP_READ ? "read" : "write";
    if (r->err)
        return mw_fail(MW_ERR_IO, "disk tier: %s of %llu bytes at offset %llu of %s failed after %llu bytes: %s (errno %d)",
                       what, (unsigned long long)r->len, (unsigned long long)r->off, io->path,
                       (unsigned long long)r->done, strerror(r->err), r->err);
    if (r->eof)
        return mw_fail(MW_ERR_IO, "disk tier: short %s at offset %llu of %s: %llu of %llu bytes, then %s", what,
                       (unsigned long long)r->off, io->path, (unsigned long long)r->done,
                       (unsigned long long)r->len,
                       r->op == MW_AIO_OP_READ ? "the file ended (truncated by something else?)" : "the device took no more");
    return MW_OK;
}

/* ---- the thread pool ------------------------------------------------------------------------- */

static void *worker(void *arg) {
    mw_aio *io = arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->stop && io->qlen == 0) pthread_cond_wait(&io->work, &io->mu);
        if (io->qlen == 0) break; /* stop, and nothing left */
        req *r = &io->r[io->queue[io->qhead]];
        io->qhead = (io->qhead + 1) % MAX_DEPTH;
        io->qlen--;
        r->state = R_RUNNING;
        pthread_mutex_unlock(&io->mu);
        int fin;
        do {
            const uint64_t n = piece(r);
            ssize_t got = r->op == MW_AIO_OP_READ ? pread(io->fd, r->buf + r->done, n, (off_t)(r->off + r->done))
                                                  : pwrite(io->fd, r->buf + r->done, n, (off_t)(r->off + r->done));
            fin = complete(r, got < 0 ? -(long)errno : (long)got);
        } while (!fin);
        sleep_until(r->deadline); /* the throttle: the simulated device is slower */
        pthread_mutex_lock(&io->mu);
        if (!r->err && !r->eof) io->bytes[r->op] += r->len;
        busy_mark(io, r->op, 0, now_s());
        r->state = R_DONE;
        pthread_cond_broadcast(&io->done);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

static mw_status pool_start(mw_aio *io) {
    if (pthread_mutex_init(&io->mu, NULL) != 0) return mw_fail(MW_ERR_NOMEM, "disk tier: cannot create a mutex");
    pthread_cond_init(&io->work, NULL);
    pthread_cond_init(&io->done, NULL);
    const int want = io->depth < 4 ? io->depth : 4;
    for (int i = 0; i < want; i++) {
        int e = pthread_create(&io->th[i], NULL, worker, io);
        if (e != 0) {
            if (io->nth > 0) break; /* fewer threads still work */
            return mw_fail(MW_ERR_NOMEM, "disk tier: cannot start an I/O thread: %s", strerror(e));
        }
        io->nth++;
    }
    return MW_OK;
}

static void pool_stop(mw_aio *io) {
    pthread_mutex_lock(&io->mu);
    io->stop = 1;
    pthread_cond_broadcast(&io->work);
    pthread_mutex_unlock(&io->mu);
    for (int i = 0; i < io->nth; i++) pthread_join(io->th[i], NULL);
    pthread_cond_destroy(&io->work);
    pthread_cond_destroy(&io->done);
    pthread_mutex_destroy(&io->mu);
}

/* ---- io_uring ------------------------------------------------------------------------------- */

#ifdef MW_HAVE_URING
/* Queues the next piece of request id; MW_ERR_IO when the ring refuses. */
static mw_status ring_submit(mw_aio *io, int id) {
    req *r = &io->r[id];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    if (!sqe) return mw_fail(MW_ERR_IO, "disk tier: io_uring submission queue full (internal)");
    const uint64_t n = piece(r);
    if (r->op == MW_AIO_OP_READ)
        io_uring_prep_read(sqe, io->fd, r->buf + r->done, (unsigned)n, r->off + r->done);
    else
        io_uring_prep_write(sqe, io->fd, r->buf + r->done, (unsigned)n, r->off + r->done);
    io_uring_sqe_set_data64(sqe, (uint64_t)id);
    int e;
    do e = io_uring_submit(&io->ring);
    while (e == -EINTR || e == -EAGAIN);
    if (e < 0) {
        r->err = -e;
        busy_mark(io, r->op, 0, now_s());
        r->state = R_DONE;
        return req_status(io, r);
    }
    return MW_OK;
}

/* Request r has completed: counted and timed now. */
static void ring_finish(mw_aio *io, req *r) {
    if (!r->err && !r->eof) io->bytes[r->op] += r->len;
    busy_mark(io, r->op, 0, now_s());
    r->state = R_DONE;
}

/* Reaps one completion (waiting for it), continuing or finishing its request. */
static mw_status ring_reap(mw_aio *io) {
    struct io_uring_cqe *cqe;
    int e;
    do e = io_uring_wait_cqe(&io->ring, &cqe);
    while (e == -EINTR || e == -EAGAIN);
    if (e < 0) return mw_fail(MW_ERR_IO, "disk tier: waiting for io_uring on %s: %s", io->path, strerror(-e));
    const int id = (int)io_uring_cqe_get_data64(cqe);
    const long res = cqe->res;
    io_uring_cqe_seen(&io->ring, cqe);
    if (id < 0 || id >= io->depth || io->r[id].state != R_RUNNING)
        return mw_fail(MW_ERR_IO, "disk tier: io_uring returned an unknown request %d (internal)", id);
    req *r = &io->r[id];
    if (!complete(r, res)) return ring_submit(io, id);
    if (r->deadline > now_s()) { /* the throttle: it completes at its deadline */
        r->state = R_HELD;
        return MW_OK;
    }
    ring_finish(io, r);
    return MW_OK;
}

/* Reaps the completions already there, and finishes the held requests whose time has come,
 * without waiting: they are timed now. */
static mw_status ring_poll(mw_aio *io) {
    struct io_uring_cqe *cqe;
    while (io->nany > 0 && io_uring_peek_cqe(&io->ring, &cqe) == 0) MW_TRY(ring_reap(io));
    const double t = now_s();
    for (int i = 0; i < io->depth; i++)
        if (io->r[i].state == R_HELD && io->r[i].deadline <= t) ring_finish(io, &io->r[i]);
    return MW_OK;
}
#endif

/* ---- the caller's contract, checked -------------------------------------------------------- */

static const char *op_name(int op) { return op == MW_AIO_OP_READ ? "read" : "write"; }

/* A request may share with the requests in flight (submitted, not yet waited for) neither memory
 * where either is a read (the read lands there while the other moves it) nor file bytes where
 * either is a write (the engine orders neither). A caller that starts one before waiting for the
 * other (a buffer reused before its transfer landed, a region read back before its write landed)
 * gets a wrong result at some timings only: refused at submission, at every timing. */
static mw_status conflict(const mw_aio *io, int op, const char *buf, uint64_t len, uint64_t off) {
    for (int i = 0; i < io->depth; i++) {
        const req *q = &io->r[i];
        if (q->state == R_FREE) continue;
        const int mem = buf < q->buf + q->len && q->buf < buf + len, file = off < q->off + q->len && q->off < off + len;
        if (mem && (op == MW_AIO_OP_READ || q->op == MW_AIO_OP_READ))
            return mw_fail(MW_ERR_ARG, "disk tier: a %s of %llu bytes at offset %llu uses memory that request %d (a %s of %llu "
                           "bytes at offset %llu) still uses (internal: a buffer reused before its transfer was waited for)",
                           op_name(op), (unsigned long long)len, (unsigned long long)off, i, op_name(q->op),
                           (unsigned long long)q->len, (unsigned long long)q->off);
        if (file && (op == MW_AIO_OP_WRITE || q->op == MW_AIO_OP_WRITE))
            return mw_fail(MW_ERR_ARG, "disk tier: a %s of %llu bytes at offset %llu of %s overlaps request %d (a %s of %llu "
                           "bytes at offset %llu) in flight (internal: file bytes moved before an earlier transfer of them "
                           "was waited for)", op_name(op), (unsigned long long)len, (unsigned long long)off, io->path, i,
                           op_name(q->op), (unsigned long long)q->len, (unsigned long long)q->off);
    }
    return MW_OK;
}

/* MEMWALL_IO_CHECK=1 (tests): a write's source must not change until the write is waited for. Its
 * bytes are hashed at submission and again at the wait, whatever the engine did in between, so a
 * caller that writes into the memory of a write in flight fails the wait at every timing. */
static int check_env(void) {
    const char *e = getenv("MEMWALL_IO_CHECK");
    return e && *e && strcmp(e, "0") != 0;
}

static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull, w;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- the engine ----------------------------------------------------------------------------- */

mw_status mw_aio_create(mw_aio **out, int fd, const char *path, int depth, int kind) {
    *out = NULL;
    if (depth < 1 || depth > MAX_DEPTH) return mw_fail(MW_ERR_ARG, "disk tier: queue depth %d (1 to %d)", depth, MAX_DEPTH);
    mw_aio *io = calloc(1, sizeof *io);
    if (!io) return mw_fail(MW_ERR_NOMEM, "out of memory");
    io->fd = fd;
    io->depth = depth;
    io->rate = throttle_rate();
    io->check = check_env();
    snprintf(io->path, sizeof io->path, "%s", path ? path : "?");
    if (kind == MW_AIO_AUTO) {
        const char *e = getenv("MEMWALL_AIO");
        if (e && !strcmp(e, "threads")) kind = MW_AIO_THREADS;
        else if (e && !strcmp(e, "io_uring")) kind = MW_AIO_URING;
        else if (e && *e && strcmp(e, "auto") != 0) {
            free(io);
            return mw_fail(MW_ERR_ARG, "MEMWALL_AIO=%s: expected auto, io_uring or threads", e);
        }
    }
    if (kind == MW_AIO_AUTO || kind == MW_AIO_URING) {
#ifdef MW_HAVE_URING
        int e = io_uring_queue_init((unsigned)depth, &io->ring, 0);
        if (e == 0) {
            io->kind = MW_AIO_URING;
            *out = io;
            return MW_OK;
        }
        snprintf(io->note, sizeof io->note, "io_uring is unavailable here (%s): I/O threads instead", strerror(-e));
        if (kind == MW_AIO_URING) {
            free(io);
            return mw_fail(MW_ERR_IO, "disk tier: io_uring_setup failed: %s", strerror(-e));
        }
#else
        snprintf(io->note, sizeof io->note, "this build has no io_uring (liburing-dev): I/O threads instead");
        if (kind == MW_AIO_URING) {
            free(io);
            return mw_fail(MW_ERR_IO, "disk tier: this build has no io_uring (build with liburing-dev)");
        }
#endif
    }
    io->kind = MW_AIO_THREADS;
    mw_status st = pool_start(io);
    if (st != MW_OK) {
        free(io);
        return st;
    }
    *out = io;
    return MW_OK;
}

void mw_aio_destroy(mw_aio *io) {
    if (!io) return;
    mw_aio_wait_all(io);
#ifdef MW_HAVE_URING
    if (io->kind == MW_AIO_URING) io_uring_queue_exit(&io->ring);
#endif
    if (io->kind == MW_AIO_THREADS) pool_stop(io);
    free(io);
}

const char *mw_aio_kind_name(const mw_aio *io) { return io->kind == MW_AIO_URING ? "io_uring" : "threads"; }
const char *mw_aio_note(const mw_aio *io) { return io->note; }

static mw_status start(mw_aio *io, int op, char *buf, uint64_t len, uint64_t off, int *id) {
    *id = -1;
    if (len == 0) return mw_fail(MW_ERR_ARG, "disk tier: a request of 0 bytes (internal)");
#ifdef MW_HAVE_URING
    if (io->kind == MW_AIO_URING) MW_TRY(ring_poll(io)); /* completions in: timed now, not at the next wait */
#endif
    int i = 0;
    while (i < io->depth && io->r[i].state != R_FREE) i++;
    if (i == io->depth) return mw_fail(MW_ERR_ARG, "disk tier: more than %d requests in flight (internal)", io->depth);
    MW_TRY(conflict(io, op, buf, len, off));
    req *r = &io->r[i];
    memset(r, 0, sizeof *r);
    r->op = op;
    r->buf = buf;
    r->len = len;
    r->off = off;
    r->fault = mw_aio_fault_take(op);
    if (io->check && op == MW_AIO_OP_WRITE) r->sum = hash_bytes(buf, len);
    *id = i;
    const double t = now_s();
    if (io->rate > 0) { /* one request after another at the throttle's rate */
        io->dev_free = (io->dev_free > t ? io->dev_free : t) + (double)len / io->rate;
        r->deadline = io->dev_free;
    }
#ifdef MW_HAVE_URING
    if (io->kind == MW_AIO_URING) {
        r->state = R_RUNNING;
        busy_mark(io, op, 1, t);
        return ring_submit(io, i);
    }
#endif
    pthread_mutex_lock(&io->mu);
    busy_mark(io, op, 1, t);
    r->state = R_QUEUED;
    io->queue[(io->qhead + io->qlen) % MAX_DEPTH] = i;
    io->qlen++;
    pthread_cond_signal(&io->work);
    pthread_mutex_unlock(&io->mu);
    return MW_OK;
}

mw_status mw_aio_read(mw_aio *io, void *buf, uint64_t len, uint64_t off, int *id) {
    return start(io, MW_AIO_OP_READ, buf, len, off, id);
}

mw_status mw_aio_write(mw_aio *io, const void *buf, uint64_t len, uint64_t off, int *id) {
    return start(io, MW_AIO_OP_WRITE, (char *)buf, len, off, id);
}

mw_status mw_aio_wait(mw_aio *io, int id) {
    if (id < 0 || id >= io->depth || io->r[id].state == R_FREE)
        return mw_fail(MW_ERR_ARG, "disk tier: waiting for request %d, which is not in flight (internal)", id);
    req *r = &io->r[id];
    mw_status st = MW_OK;
    const double t0 = now_s();
    int blocked = 0;
#ifdef MW_HAVE_URING
    if (io->kind == MW_AIO_URING) {
        st = ring_poll(io);
        blocked = r->state != R_DONE;
        while (r->state != R_DONE && st == MW_OK) {
            if (r->state == R_HELD) {
                sleep_until(r->deadline);
                ring_finish(io, r);
            } else {
                st = ring_reap(io);
            }
        }
        if (blocked) io->wait_s += now_s() - t0;
        if (st != MW_OK && r->state != R_DONE) return st; /* the ring itself failed */
    }
#endif
    if (io->kind == MW_AIO_THREADS) {
        pthread_mutex_lock(&io->mu);
        blocked = r->state != R_DONE;
        while (r->state != R_DONE) pthread_cond_wait(&io->done, &io->mu);
        pthread_mutex_unlock(&io->mu);
        if (blocked) io->wait_s += now_s() - t0;
    }
    mw_status rs = req_status(io, r);
    if (rs == MW_OK && io->check && r->op == MW_AIO_OP_WRITE && hash_bytes(r->buf, r->len) != r->sum)
        rs = mw_fail(MW_ERR_ARG, "disk tier: the source of a write of %llu bytes at offset %llu of %s changed before the "
                     "write was waited for (internal: a buffer reused while its write was in flight; MEMWALL_IO_CHECK)",
                     (unsigned long long)r->len, (unsigned long long)r->off, io->path);
    r->state = R_FREE;
    return st != MW_OK ? st : rs;
}

mw_status mw_aio_wait_all(mw_aio *io) {
    mw_status first = MW_OK;
    char msg[1024] = "";
    for (int i = 0; i < io->depth; i++) {
        if (io->r[i].state == R_FREE) continue;
        mw_status s = mw_aio_wait(io, i);
        if (s != MW_OK && first == MW_OK) {
            first = s;
            snprintf(msg, sizeof msg, "%s", mw_last_error());
        }
    }
    if (first != MW_OK) mw_fail(first, "%s", msg);
    return first;
}

void mw_aio_poll(mw_aio *io) {
#ifdef MW_HAVE_URING
    if (io->kind == MW_AIO_URING && ring_poll(io) != MW_OK) {
        /* the ring itself failed: the next wait reaps again and returns the failure */
    }
#else
    (void)io;
#endif
}

void mw_aio_times(mw_aio *io, mw_aio_time *t) {
    if (io->kind == MW_AIO_THREADS) pthread_mutex_lock(&io->mu);
    const double now = now_s();
    t->read_s = io->busy[0] + (io->nfl[0] ? now - io->since[0] : 0);
    t->write_s = io->busy[1] + (io->nfl[1] ? now - io->since[1] : 0);
    t->busy_s = io->busy_any + (io->nany ? now - io->any_since : 0);
    t->wait_s = io->wait_s;
    if (io->kind == MW_AIO_THREADS) pthread_mutex_unlock(&io->mu);
}

void mw_aio_stats(const mw_aio *io, uint64_t *read, uint64_t *written) {
    *read = io->bytes[MW_AIO_OP_READ];
    *written = io->bytes[MW_AIO_OP_WRITE];
}
