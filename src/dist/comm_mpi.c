/* mw_comm over MPI point-to-point messages, built as build/memwall-mpi.so (the one file that
 * includes mpi.h), which the CLI loads when a run asks for --zero (src/cli/mpi.c): the memwall
 * binary itself links no MPI library, so runs without --zero carry none of it. The collectives
 * are memwall's own schedules (an all-to-all of pairwise messages, a ring all-gather), so that what
 * is summed where is memwall's (src/dist/zero.c) and the bytes each rank sends are counted. */
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"

static mw_fail_fn fail_; /* the program's mw_fail: its message is the one mw_last_error gives */
#define mw_fail fail_
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* The watchdog: a collective (or a wait for another rank's message) that has not finished after
 * the timeout means a rank stopped without dying (a dead one makes the launcher stop the job):
 * this rank says so and exits, which makes the launcher stop the others. */
static _Atomic long long op_since_ms; /* when the current wait began (0: none) */
static const char *_Atomic op_name;
static double op_timeout_s;
static int op_rank;

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        sleep(1);
        const long long t0 = atomic_load(&op_since_ms);
        if (t0 && (mono_ms() - t0) / 1e3 > op_timeout_s) {
            fflush(stdout);
            fprintf(stderr, "memwall: rank %d: the %s waited more than %.0f s (--comm-timeout) for the other ranks: "
                            "one of them stopped; exiting so that the launcher stops the run (the last checkpoint "
                            "stays good: --resume auto)\n", op_rank, atomic_load(&op_name), op_timeout_s);
            /* ended as the launcher's SIGTERM ends a rank, so that a handler the program installed
             * runs first (train's removes the disk tier's scratch files, which _exit would leave) */
            struct sigaction sa;
            if (sigaction(SIGTERM, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN) raise(SIGTERM);
            _exit(3);
        }
    }
    return NULL;
}

static void op_begin(const char *what) {
    atomic_store(&op_name, what);
    atomic_store(&op_since_ms, mono_ms());
}
static void op_end(void) { atomic_store(&op_since_ms, 0); }

#define CHUNK (1 << 30) /* bytes per message at most (MPI counts are int) */
enum { TAG_A2A = 11, TAG_RING = 12, TAG_P2P = 100 }; /* point-to-point tags: TAG_P2P + tag (MPI promises tags up to 32767) */

/* An mw_comm and the MPI communicator under it (MPI_COMM_WORLD, or one split made) */
typedef struct mpi_comm {
    mw_comm pub; /* first: an mw_comm * is an mpi_comm * */
    MPI_Comm comm;
    int split;   /* 1: made by split (destroy frees it) */
} mpi_comm;
static MPI_Comm MC(const mw_comm *c) { return ((const mpi_comm *)c)->comm; }

static mw_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
    return mw_fail(MW_ERR_IO, "MPI %s failed: %s", what, msg);
}
#define P2P_TRY(expr)                                                                              \
    do {                                                                                           \
        mw_status st_ = (expr);                                                                    \
        if (st_ != MW_OK) return st_;                                                              \
    } while (0)
#define MPI_TRY(call, what)                                                                        \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what);                                        \
    } while (0)

static mw_status a2a_(mw_comm *c, const float *send, const size_t *sc, const size_t *sd, float *recv, const size_t *rc,
                      const size_t *rd) {
    const int W = c->size, me = c->rank;
    MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * (size_t)W);
    if (!req) return mw_fail(MW_ERR_NOMEM, "out of memory");
    int n = 0, rcode = MPI_SUCCESS;
    for (int j = 0; j < W && rcode == MPI_SUCCESS; j++)
        if (j != me && rc[j]) rcode = MPI_Irecv(recv + rd[j], (int)rc[j], MPI_FLOAT, j, TAG_A2A, MC(c), &req[n++]);
    for (int j = 0; j < W && rcode == MPI_SUCCESS; j++)
        if (j != me && sc[j]) {
            rcode = MPI_Isend(send + sd[j], (int)sc[j], MPI_FLOAT, j, TAG_A2A, MC(c), &req[n++]);
            c->sent += sc[j] * sizeof(float);
        }
    if (rc[me]) memcpy(recv + rd[me], send + sd[me], rc[me] * sizeof(float));
    if (rcode == MPI_SUCCESS) rcode = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    free(req);
    return rcode == MPI_SUCCESS ? MW_OK : mpi_fail(rcode, "all-to-all");
}

/* in place, around the ring: at step s rank r passes block r - s on to r + 1. A block goes as
 * ceil(bytes / CHUNK) messages, none when empty: sender and receiver know its size alike. */
static mw_status ring_(mw_comm *c, void *buf, size_t elem, const size_t *count, const size_t *displ) {
    const int W = c->size, me = c->rank, to = (me + 1) % W, from = (me + W - 1) % W;
    char *b = buf;
    for (int s = 0; s < W - 1; s++) {
        const int sb = (me - s + W) % W, rb = (me - s - 1 + 2 * W) % W;
        const size_t sn = count[sb] * elem, rn = count[rb] * elem;
        char *sp = b + displ[sb] * elem, *rp = b + displ[rb] * elem;
        const size_t ns = (sn + CHUNK - 1) / CHUNK, nr = (rn + CHUNK - 1) / CHUNK;
        MPI_Request *req = malloc(sizeof(MPI_Request) * (ns + nr + 1));
        if (!req) return mw_fail(MW_ERR_NOMEM, "out of memory");
        int n = 0, rc = MPI_SUCCESS;
        for (size_t o = 0; o < rn && rc == MPI_SUCCESS; o += CHUNK)
            rc = MPI_Irecv(rp + o, (int)(rn - o < CHUNK ? rn - o : CHUNK), MPI_BYTE, from, TAG_RING, MC(c), &req[n++]);
        for (size_t o = 0; o < sn && rc == MPI_SUCCESS; o += CHUNK) {
            const int k = (int)(sn - o < CHUNK ? sn - o : CHUNK);
            rc = MPI_Isend(sp + o, k, MPI_BYTE, to, TAG_RING, MC(c), &req[n++]);
            c->sent += (uint64_t)k;
        }
        if (rc == MPI_SUCCESS) rc = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        free(req);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "all-gather");
    }
    return MW_OK;
}

#define TIMED(what, call)                                                                          \
    do {                                                                                           \
        op_begin(what);                                                                            \
        mw_status st_ = (call);                                                                    \
        op_end();                                                                                  \
        return st_;                                                                                \
    } while (0)
static mw_status a2a(mw_comm *c, const float *send, const size_t *sc, const size_t *sd, float *recv, const size_t *rc,
                     const size_t *rd) {
    TIMED("gradients' all-to-all", a2a_(c, send, sc, sd, recv, rc, rd));
}
static mw_status ring(mw_comm *c, void *buf, size_t elem, const size_t *count, const size_t *displ) {
    TIMED("all-gather", ring_(c, buf, elem, count, displ));
}

/* A gather left running: MPI's own (a copy: no arithmetic whose order could matter), with int
 * counts and displacements (a segment of fewer than 2^31 elements; checked) */
typedef struct igather {
    MPI_Request r;
    MPI_Datatype t; /* MPI_DATATYPE_NULL: a send (isend), which has no type or counts of its own */
    int *cnt;
} igather;

static mw_status iallgatherv(mw_comm *c, void *buf, size_t elem, const size_t *count, const size_t *displ, void **out) {
    const int W = c->size;
    igather *g = calloc(1, sizeof *g);
    int *cnt = malloc(sizeof(int) * 2 * (size_t)W);
    if (!g || !cnt) {
        free(g);
        free(cnt);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    for (int j = 0; j < W; j++) {
        if (count[j] > INT32_MAX || displ[j] > INT32_MAX) {
            free(g);
            free(cnt);
            return mw_fail(MW_ERR_ARG, "a block of more than 2^31 elements to gather");
        }
        cnt[j] = (int)count[j], cnt[W + j] = (int)displ[j];
        if (j != c->rank) c->sent += count[c->rank] * elem; /* as the ring would send it on */
    }
    int rc = MPI_Type_contiguous((int)elem, MPI_BYTE, &g->t);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&g->t);
    if (rc == MPI_SUCCESS) rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, g->t, buf, cnt, cnt + W, g->t, MC(c), &g->r);
    if (rc != MPI_SUCCESS) {
        free(g);
        free(cnt);
        return mpi_fail(rc, "all-gather");
    }
    g->cnt = cnt;
    *out = g;
    return MW_OK;
}

static void igather_free(igather *g) {
    if (g->t != MPI_DATATYPE_NULL) MPI_Type_free(&g->t);
    free(g->cnt);
    free(g);
}

static mw_status itest(mw_comm *c, void *req, int *done) {
    igather *g = req;
    int rc = MPI_Test(&g->r, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, g->t == MPI_DATATYPE_NULL ? "send" : "all-gather");
    return MW_OK;
}

static mw_status iwait_(void *req) {
    igather *g = req;
    const int send = g->t == MPI_DATATYPE_NULL;
    int rc = MPI_Wait(&g->r, MPI_STATUS_IGNORE);
    igather_free(g);
    return rc == MPI_SUCCESS ? MW_OK : mpi_fail(rc, send ? "send" : "all-gather");
}
static mw_status iwait(mw_comm *c, void *req) {
    TIMED(((igather *)req)->t == MPI_DATATYPE_NULL ? "pipeline send" : "block's gather", iwait_(req));
}

/* ---- sub-groups and point-to-point ---- */

static void destroy(mw_comm *c) {
    mpi_comm *m = (mpi_comm *)c;
    if (!m || !m->split) return;
    MPI_Comm_free(&m->comm);
    free(m);
}

static void set_ops(mw_comm *c);

static mw_status split_(mw_comm *c, int color, int key, mw_comm **out) {
    mpi_comm *m = calloc(1, sizeof *m);
    if (!m) return mw_fail(MW_ERR_NOMEM, "out of memory");
    int rc = MPI_Comm_split(MC(c), color < 0 ? MPI_UNDEFINED : color, key, &m->comm);
    if (rc == MPI_SUCCESS && m->comm != MPI_COMM_NULL) rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS && m->comm != MPI_COMM_NULL) rc = MPI_Comm_rank(m->comm, &m->pub.rank);
    if (rc == MPI_SUCCESS && m->comm != MPI_COMM_NULL) rc = MPI_Comm_size(m->comm, &m->pub.size);
    if (rc != MPI_SUCCESS || m->comm == MPI_COMM_NULL) {
        if (m->comm != MPI_COMM_NULL && rc == MPI_SUCCESS) MPI_Comm_free(&m->comm);
        free(m);
        return rc != MPI_SUCCESS ? mpi_fail(rc, "communicator split") : mw_fail(MW_ERR_ARG, "a split with a negative color");
    }
    m->split = 1;
    set_ops(&m->pub);
    *out = &m->pub;
    return MW_OK;
}
static mw_status split(mw_comm *c, int color, int key, mw_comm **out) { TIMED("communicator split", split_(c, color, key, out)); }

static mw_status p2p_check(const mw_comm *c, int peer, int tag) {
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return mw_fail(MW_ERR_ARG, "internal: a message to or from rank %d of a group of %d (this rank: %d)", peer, c->size, c->rank);
    if (tag < 0 || tag > 32000) return mw_fail(MW_ERR_ARG, "internal: message tag %d outside 0 .. 32000", tag);
    return MW_OK;
}

static mw_status send_(mw_comm *c, const void *buf, size_t bytes, int peer, int tag) {
    P2P_TRY(p2p_check(c, peer, tag));
    const char *b = buf;
    size_t o = 0;
    do { /* a message of ceil(bytes / CHUNK) parts, one (empty) when bytes is 0 */
        const int k = (int)(bytes - o < CHUNK ? bytes - o : CHUNK);
        MPI_TRY(MPI_Send(b + o, k, MPI_BYTE, peer, TAG_P2P + tag, MC(c)), "send");
        c->sent += (uint64_t)k;
        o += (size_t)k;
    } while (o < bytes);
    return MW_OK;
}

static mw_status recv_(mw_comm *c, void *buf, size_t bytes, int peer, int tag) {
    P2P_TRY(p2p_check(c, peer, tag));
    char *b = buf;
    size_t o = 0;
    do {
        const int k = (int)(bytes - o < CHUNK ? bytes - o : CHUNK);
        MPI_Status stt;
        MPI_TRY(MPI_Recv(b + o, k, MPI_BYTE, peer, TAG_P2P + tag, MC(c), &stt), "receive");
        int got = 0;
        MPI_Get_count(&stt, MPI_BYTE, &got);
        if (got != k)
            return mw_fail(MW_ERR_ARG, "rank %d of the group sent a message of %d bytes where %d were expected: the "
                                       "ranks disagree on the configuration", peer, got, k);
        o += (size_t)k;
    } while (o < bytes);
    return MW_OK;
}
static mw_status p2p_send(mw_comm *c, const void *buf, size_t bytes, int peer, int tag) { TIMED("pipeline send", send_(c, buf, bytes, peer, tag)); }
static mw_status p2p_recv(mw_comm *c, void *buf, size_t bytes, int peer, int tag) { TIMED("pipeline receive", recv_(c, buf, bytes, peer, tag)); }

static mw_status isend(mw_comm *c, const void *buf, size_t bytes, int peer, int tag, void **out) {
    P2P_TRY(p2p_check(c, peer, tag));
    if (bytes > CHUNK) return mw_fail(MW_ERR_ARG, "a message of more than %d bytes to send at once", CHUNK);
    igather *g = calloc(1, sizeof *g);
    if (!g) return mw_fail(MW_ERR_NOMEM, "out of memory");
    g->t = MPI_DATATYPE_NULL;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, TAG_P2P + tag, MC(c), &g->r);
    if (rc != MPI_SUCCESS) {
        free(g);
        return mpi_fail(rc, "send");
    }
    c->sent += bytes;
    *out = g;
    return MW_OK;
}

static void set_ops(mw_comm *c) {
    c->alltoallv = a2a;
    c->allgatherv = ring;
    c->iallgatherv = iallgatherv;
    c->test = itest;
    c->wait = iwait;
    c->split = split;
    c->destroy = destroy;
    c->send = p2p_send;
    c->recv = p2p_recv;
    c->isend = isend;
}

static mpi_comm world_comm;

static mw_status init(int *argc, char ***argv, double timeout_s, mw_fail_fn fail, mw_comm **out) {
    fail_ = fail;
    int provided = 0;
    MPI_TRY(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_FUNNELED) return mw_fail(MW_ERR_ARG, "this MPI gives no MPI_THREAD_FUNNELED");
    memset(&world_comm, 0, sizeof world_comm);
    world_comm.comm = MPI_COMM_WORLD;
    mw_comm *c = &world_comm.pub;
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank), "rank");
    MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &c->size), "size");
    set_ops(c);
    op_rank = c->rank;
    op_timeout_s = timeout_s;
    pthread_t th;
    if (timeout_s > 0 && c->size > 1) {
        if (pthread_create(&th, NULL, watchdog, NULL) != 0) return mw_fail(MW_ERR_ARG, "cannot start the watchdog thread");
        pthread_detach(th);
    }
    *out = c;
    return MW_OK;
}

static void finalize(void) { MPI_Finalize(); }

static void abort_all(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static mw_status gather_u64_(mw_comm *c, uint64_t mine, uint64_t *out) {
    MPI_TRY(MPI_Allgather(&mine, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, MC(c)), "all-gather");
    return MW_OK;
}
static mw_status allgather_u64(mw_comm *c, uint64_t mine, uint64_t *out) { TIMED("all-gather", gather_u64_(c, mine, out)); }

const mw_mpi_api mw_mpi_api_v1 = {MW_MPI_API_VERSION, init, finalize, abort_all, allgather_u64};
