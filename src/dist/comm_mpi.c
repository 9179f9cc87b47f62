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
enum { TAG_A2A = 11, TAG_RING = 12 };

static mw_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
    return mw_fail(MW_ERR_IO, "MPI %s failed: %s", what, msg);
}
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
        if (j != me && rc[j]) rcode = MPI_Irecv(recv + rd[j], (int)rc[j], MPI_FLOAT, j, TAG_A2A, MPI_COMM_WORLD, &req[n++]);
    for (int j = 0; j < W && rcode == MPI_SUCCESS; j++)
        if (j != me && sc[j]) {
            rcode = MPI_Isend(send + sd[j], (int)sc[j], MPI_FLOAT, j, TAG_A2A, MPI_COMM_WORLD, &req[n++]);
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
            rc = MPI_Irecv(rp + o, (int)(rn - o < CHUNK ? rn - o : CHUNK), MPI_BYTE, from, TAG_RING, MPI_COMM_WORLD, &req[n++]);
        for (size_t o = 0; o < sn && rc == MPI_SUCCESS; o += CHUNK) {
            const int k = (int)(sn - o < CHUNK ? sn - o : CHUNK);
            rc = MPI_Isend(sp + o, k, MPI_BYTE, to, TAG_RING, MPI_COMM_WORLD, &req[n++]);
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
    MPI_Datatype t;
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
    if (rc == MPI_SUCCESS) rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, g->t, buf, cnt, cnt + W, g->t, MPI_COMM_WORLD, &g->r);
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
    MPI_Type_free(&g->t);
    free(g->cnt);
    free(g);
}

static mw_status itest(mw_comm *c, void *req, int *done) {
    igather *g = req;
    int rc = MPI_Test(&g->r, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "all-gather");
    return MW_OK;
}

static mw_status iwait_(void *req) {
    igather *g = req;
    int rc = MPI_Wait(&g->r, MPI_STATUS_IGNORE);
    igather_free(g);
    return rc == MPI_SUCCESS ? MW_OK : mpi_fail(rc, "all-gather");
}
static mw_status iwait(mw_comm *c, void *req) { TIMED("block's gather", iwait_(req)); }

static mw_comm world_comm;

static mw_status init(int *argc, char ***argv, double timeout_s, mw_fail_fn fail, mw_comm **out) {
    fail_ = fail;
    int provided = 0;
    MPI_TRY(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_FUNNELED) return mw_fail(MW_ERR_ARG, "this MPI gives no MPI_THREAD_FUNNELED");
    mw_comm *c = &world_comm;
    memset(c, 0, sizeof *c);
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank), "rank");
    MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &c->size), "size");
    c->alltoallv = a2a;
    c->allgatherv = ring;
    c->iallgatherv = iallgatherv;
    c->test = itest;
    c->wait = iwait;
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

static mw_status gather_u64_(uint64_t mine, uint64_t *out) {
    MPI_TRY(MPI_Allgather(&mine, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, MPI_COMM_WORLD), "all-gather");
    return MW_OK;
}
static mw_status allgather_u64(mw_comm *c, uint64_t mine, uint64_t *out) { TIMED("all-gather", gather_u64_(mine, out)); }

const mw_mpi_api mw_mpi_api_v1 = {MW_MPI_API_VERSION, init, finalize, abort_all, allgather_u64};
