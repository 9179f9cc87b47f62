/* The disk tier's parts: the asynchronous I/O engine (io_uring and the thread pool, each checked
 * against plain pread), its fault injection (EIO, a short read, a partial transfer that must be
 * finished, ENOSPC on a write and on the preallocation), scratch files (preallocation, the
 * free-space refusal, stale files of killed runs removed and live ones left alone, removal on
 * close), the engines' clock and throttle, and the offload stream over chunks (read ahead, write
 * behind, view/map for checkpoints).
 * Tiny blocks and queue depths, so every refill path runs on small files. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/memory/aio.h"
#include "../src/memory/offload.h"
#include "../src/memory/scratch.h"
#include "check.h"
#include "memwall.h"

static char dir[64];

static int exists(const char *p) { return access(p, F_OK) == 0; }

/* count files of the scratch pattern in dir */
static int count_scratch(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '^memwall-offload-.*\\.scratch$' >%s/count 2>/dev/null", dir, dir);
    if (system(cmd) < 0) return -1;
    char p[400];
    snprintf(p, sizeof p, "%s/count", dir);
    FILE *f = fopen(p, "r");
    int n = -1;
    if (f && fscanf(f, "%d", &n) != 1) n = -1;
    if (f) fclose(f);
    return n;
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
}

/* Writes and reads a 257-block file through engine kind with depth 3: every request checked
 * against the file's bytes read back by plain pread. */
static void engine_roundtrip(int kind) {
    const size_t BLK = 8192, NB = 257, N = BLK * NB;
    mw_scratch s;
    int stale;
    uint64_t sb;
    CHECK_OK(mw_scratch_create(&s, dir, N, &stale, &sb));
    mw_aio *io;
    CHECK_OK(mw_aio_create(&io, s.fd, s.path, 3, kind));
    printf("  engine %s%s%s, O_DIRECT %s\n", mw_aio_kind_name(io), mw_aio_note(io)[0] ? ": " : "", mw_aio_note(io),
           s.direct ? "yes" : "no");
    CHECK(kind == MW_AIO_AUTO || strcmp(mw_aio_kind_name(io), kind == MW_AIO_URING ? "io_uring" : "threads") == 0,
          "asked for engine %d, got %s", kind, mw_aio_kind_name(io));
    unsigned char *src, *dst;
    CHECK(posix_memalign((void **)&src, MW_AIO_ALIGN, N) == 0 && posix_memalign((void **)&dst, MW_AIO_ALIGN, N) == 0,
          "memalign");
    fill(src, N, (unsigned)kind);
    int id[3];
    /* writes in a shuffled block order, three in flight, waited oldest first */
    for (size_t k = 0; k < NB; k++) {
        const size_t b = (k * 97) % NB;
        if (k >= 3) CHECK_OK(mw_aio_wait(io, id[k % 3]));
        CHECK_OK(mw_aio_write(io, src + b * BLK, BLK, b * BLK, &id[k % 3]));
    }
    int extra;
    CHECK(mw_aio_write(io, src, BLK, 0, &extra) == MW_ERR_ARG, "a fourth request beyond depth 3 must be refused");
    CHECK_OK(mw_aio_wait_all(io));
    int fd = open(s.path, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, dst, N, 0) == (ssize_t)N, "plain pread of %s", s.path);
    close(fd);
    CHECK(memcmp(src, dst, N) == 0, "%s: the file's bytes are not what was written", mw_aio_kind_name(io));
    memset(dst, 0, N);
    for (size_t b = 0; b < NB; b += 3) { /* reads of up to three blocks each */
        const size_t nb = b + 3 <= NB ? 3 : NB - b;
        CHECK_OK(mw_aio_read(io, dst + b * BLK, nb * BLK, b * BLK, &id[0]));
        CHECK_OK(mw_aio_wait(io, id[0]));
    }
    CHECK(memcmp(src, dst, N) == 0, "%s: reads differ from the file", mw_aio_kind_name(io));
    uint64_t r, w;
    mw_aio_stats(io, &r, &w);
    CHECK(r == N && w == N, "stats: read %llu written %llu, want %zu each", (unsigned long long)r,
          (unsigned long long)w, N);

    /* faults: each one request, one clear error naming the file, offset, length and errno */
    mw_aio_fault_set(MW_AIO_OP_READ, MW_AIO_FAULT_EIO, 2);
    CHECK_OK(mw_aio_read(io, dst, BLK, 0, &id[0]));
    CHECK_OK(mw_aio_wait(io, id[0]));
    CHECK_OK(mw_aio_read(io, dst, BLK, 5 * BLK, &id[0]));
    CHECK(mw_aio_wait(io, id[0]) == MW_ERR_IO, "injected EIO must fail the read");
    CHECK(strstr(mw_last_error(), "read of 8192 bytes at offset 40960") && strstr(mw_last_error(), s.path) &&
              strstr(mw_last_error(), "errno 5"),
          "EIO message: %s", mw_last_error());
    mw_aio_fault_set(MW_AIO_OP_READ, MW_AIO_FAULT_SHORT, 1);
    CHECK_OK(mw_aio_read(io, dst, 4 * BLK, 8 * BLK, &id[0]));
    CHECK(mw_aio_wait(io, id[0]) == MW_ERR_IO, "a short read that cannot be finished must fail");
    CHECK(strstr(mw_last_error(), "short read at offset 65536") && strstr(mw_last_error(), "16384 of 32768"),
          "short read message: %s", mw_last_error());
    memset(dst, 0, N);
    mw_aio_fault_set(MW_AIO_OP_READ, MW_AIO_FAULT_PARTIAL, 1);
    CHECK_OK(mw_aio_read(io, dst, 4 * BLK, 8 * BLK, &id[0]));
    CHECK_OK(mw_aio_wait(io, id[0]));
    CHECK(memcmp(dst, src + 8 * BLK, 4 * BLK) == 0, "a partial read must be finished with the right bytes");
    mw_aio_fault_set(MW_AIO_OP_WRITE, MW_AIO_FAULT_PARTIAL, 1);
    CHECK_OK(mw_aio_write(io, src, 4 * BLK, 0, &id[0]));
    CHECK_OK(mw_aio_wait(io, id[0]));
    mw_aio_fault_set(MW_AIO_OP_WRITE, MW_AIO_FAULT_ENOSPC, 1);
    CHECK_OK(mw_aio_write(io, src, BLK, 0, &id[0]));
    CHECK_OK(mw_aio_write(io, src + BLK, BLK, BLK, &id[1]));
    CHECK(mw_aio_wait_all(io) == MW_ERR_IO && strstr(mw_last_error(), "No space left on device"),
          "ENOSPC on a write: %s", mw_last_error());
    mw_aio_destroy(io);
    mw_scratch_close(&s);
    CHECK(!exists(s.path), "a closed scratch file is removed: %s", s.path);
    free(src);
    free(dst);
}

static void scratch_files(void) {
    int stale;
    uint64_t sb;
    mw_scratch s;
    /* a killed run's file (nobody holds its lock, its pid is gone) goes; a live run's (locked, its
     * pid alive) stays */
    char dead[300], alive[300];
    snprintf(dead, sizeof dead, "%s/memwall-offload-999999.scratch", dir);
    snprintf(alive, sizeof alive, "%s/memwall-offload-%d.scratch", dir, (int)getppid()); /* a live process */
    int fd = open(dead, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0 && write(fd, "stale data", 10) == 10, "make a stale file");
    close(fd);
    int live = open(alive, O_CREAT | O_RDWR, 0600);
    CHECK(live >= 0 && flock(live, LOCK_EX | LOCK_NB) == 0, "make a live file");
    CHECK_OK(mw_scratch_create(&s, dir, 1 << 16, &stale, &sb));
    CHECK(stale == 1 && !exists(dead), "the stale file is removed and counted (stale %d)", stale);
    CHECK(exists(alive), "a file another run holds locked is left alone");
    struct stat st;
    CHECK(stat(s.path, &st) == 0 && st.st_size == 1 << 16 && st.st_blocks * 512 >= 1 << 16,
          "preallocated: size %lld, %lld blocks", (long long)st.st_size, (long long)st.st_blocks);
    mw_scratch_close(&s);
    close(live);
    unlink(alive);
    /* more than the disk has: refused before anything is written, naming need and free bytes */
    CHECK(mw_scratch_create(&s, dir, (uint64_t)1 << 60, &stale, &sb) == MW_ERR_IO, "a file larger than the disk");
    CHECK(strstr(mw_last_error(), "needs 1152921504606846976 bytes") && strstr(mw_last_error(), "free"),
          "full-disk message: %s", mw_last_error());
    CHECK(count_scratch() == 0, "nothing is left behind by the refusal");
    /* ENOSPC from the preallocation itself */
    mw_aio_fault_set(MW_AIO_OP_ALLOC, MW_AIO_FAULT_ENOSPC, 1);
    CHECK(mw_scratch_create(&s, dir, 1 << 16, &stale, &sb) == MW_ERR_IO && strstr(mw_last_error(), "No space left"),
          "ENOSPC while preallocating: %s", mw_last_error());
    CHECK(count_scratch() == 0, "nothing is left behind by a failed preallocation");
    /* a folder that cannot be made */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/file", dir);
    fd = open(bad, O_CREAT | O_WRONLY, 0600);
    close(fd);
    snprintf(bad, sizeof bad, "%s/file/sub", dir);
    CHECK(mw_scratch_create(&s, bad, 1 << 16, &stale, &sb) == MW_ERR_IO && strstr(mw_last_error(), "--offload-dir"),
          "an impossible folder: %s", mw_last_error());
    /* the room a run there would have: the free bytes, of the nearest existing folder when the
     * folder is not made yet, and a stale file's blocks (8 MiB; another process freeing that much
     * between the two looks would be needed to fail this) */
    uint64_t room = 0, room_sub = 0;
    char deep[300], stale8[300];
    snprintf(deep, sizeof deep, "%s/not/made/yet/", dir);
    CHECK(mw_scratch_room(dir, &room) == 1 && room > 0 && mw_scratch_room(deep, &room_sub) == 1 &&
              (room_sub > room ? room_sub - room : room - room_sub) < (64u << 20) && !exists(deep),
          "room of a folder not made yet: %llu, of its parent %llu", (unsigned long long)room_sub, (unsigned long long)room);
    snprintf(stale8, sizeof stale8, "%s/memwall-offload-999999.scratch", dir);
    fd = open(stale8, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0 && posix_fallocate(fd, 0, 8 << 20) == 0, "make an 8 MiB stale file");
    close(fd);
    CHECK(mw_scratch_room(dir, &room) == 1, "room with a stale file");
    const uint64_t freeb = mw_scratch_free_bytes(dir);
    CHECK(room > freeb && room - freeb >= (4u << 20), "a stale file's blocks count as room: room %llu, free %llu",
          (unsigned long long)room, (unsigned long long)freeb);
    CHECK(exists(stale8), "looking at the room removes nothing");
    unlink(stale8);
    /* the folder lock is removed by its holder: nothing stays after a run, refused ones included */
    char lockp[300];
    snprintf(lockp, sizeof lockp, "%s/.memwall-offload.lock", dir);
    CHECK(!exists(lockp), "the folder lock stays in the folder after the refusals");
    CHECK_OK(mw_scratch_create(&s, dir, 1 << 16, &stale, &sb));
    CHECK(!exists(lockp), "the folder lock stays in the folder while a scratch file is held");
    mw_scratch_close(&s);
    CHECK(!exists(lockp) && count_scratch() == 0, "the folder is not left empty of memwall's files after a close");
}

/* Processes creating scratch files in one folder at once, each holding its file a moment: the
 * folder lock, though each holder removes it, still keeps them apart, so none takes another's new
 * file for a stale one (each file is still there, the same file, when its creator looks). */
static void scratch_concurrent(void) {
    enum { KIDS = 6, ROUNDS = 40 };
    char sub[128];
    snprintf(sub, sizeof sub, "%s/conc", dir);
    pid_t kid[KIDS];
    for (int k = 0; k < KIDS; k++) {
        kid[k] = fork();
        if (kid[k] == 0) {
            int bad = 0;
            for (int r = 0; r < ROUNDS && !bad; r++) {
                mw_scratch s;
                int stale;
                uint64_t sb;
                struct stat a, b;
                if (mw_scratch_create(&s, sub, 4096, &stale, &sb) != MW_OK) bad = 1;
                else if (stale != 0 || fstat(s.fd, &a) != 0 || stat(s.path, &b) != 0 || a.st_ino != b.st_ino) bad = 2;
                if (!bad) usleep(200);
                if (!bad && (stat(s.path, &b) != 0 || a.st_ino != b.st_ino)) bad = 3;
                if (bad != 1) mw_scratch_close(&s);
            }
            _exit(bad);
        }
    }
    int bad = 0;
    for (int k = 0; k < KIDS; k++) {
        int st = 0;
        if (kid[k] < 0 || waitpid(kid[k], &st, 0) != kid[k] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
    }
    CHECK(!bad, "%d processes creating scratch files at once took one another's for stale ones", KIDS);
    char lockp[300];
    snprintf(lockp, sizeof lockp, "%s/.memwall-offload.lock", sub);
    CHECK(!exists(lockp), "the folder lock is left behind by processes that took turns");
}

/* The stream over segments (n floats, not a multiple of anything; a middle segment that also holds
 * gradients and parameters): fn adds lo-relative values; the result must equal the same updates
 * done in memory, chunk and segment boundaries included; whole-segment reads and writes land where
 * the stream finds them. */
typedef struct sctx {
    size_t calls, next;
    int bad;
} sctx;

static void add_fn(void *ctx, size_t lo, size_t hi, int seg, void *const va[MW_ARR_COUNT]) {
    sctx *c = ctx;
    float *const arr[MW_ARR_COUNT] = {va[0], va[1], va[2], va[3]};
    if (lo != c->next) c->bad = 1; /* chunks in order, each once, none skipped */
    if (!arr[MW_ARR_M] || !arr[MW_ARR_V] || (seg == 1) != (arr[MW_ARR_P] != NULL)) c->bad = 1;
    c->next = hi;
    c->calls++;
    for (size_t i = lo; i < hi; i++) {
        arr[MW_ARR_M][i - lo] += (float)i;
        arr[MW_ARR_V][i - lo] = arr[MW_ARR_V][i - lo] * 2.0f + 1.0f;
        if (arr[MW_ARR_P]) arr[MW_ARR_P][i - lo] += arr[MW_ARR_G][i - lo];
    }
}

static const int BITS32[MW_ARR_COUNT] = {32, 32, 32, 32};

static void offload_stream(int kind_env) {
    setenv("MEMWALL_AIO", kind_env ? "threads" : "auto", 1);
    const size_t n = 100003, s1 = 30011, s2 = 71111;
    const size_t seg_lo[4] = {0, s1, s2, n};
    const unsigned PGMV = MW_ARR_MV | MW_ARR_BIT(MW_ARR_P) | MW_ARR_BIT(MW_ARR_G);
    const unsigned mask[3] = {MW_ARR_MV, PGMV, MW_ARR_MV};
    mw_offload_layout lay;
    mw_offload_layout_of(3, seg_lo, mask, BITS32, &lay);
    CHECK(lay.nchunks >= 8 && lay.slots == MW_OFFLOAD_SLOTS && lay.chunk % MW_OFFLOAD_Q == 0 && lay.arrays == 4,
          "layout: %zu chunks of %zu, %d slots, %d arrays", lay.nchunks, lay.chunk, lay.slots, lay.arrays);
    CHECK(lay.arr_bytes[MW_ARR_P] == mw_offload_pad(s2 - s1) * 4 &&
              lay.arr_bytes[MW_ARR_M] == (mw_offload_pad(s1) + mw_offload_pad(s2 - s1) + mw_offload_pad(n - s2)) * 4,
          "array bytes");
    void *stage = malloc(lay.staging_bytes);
    mw_offload *o;
    CHECK_OK(mw_offload_create(&o, dir, 3, seg_lo, mask, BITS32, stage));
    mw_offload_info in;
    mw_offload_get_info(o, &in);
    CHECK(strcmp(in.engine, kind_env ? "threads" : in.engine) == 0, "engine %s", in.engine);
    float *em = calloc(n, 4), *ev = calloc(n, 4), *ep = calloc(n, 4), *eg = calloc(n, 4);
    /* map writes known moments (as a checkpoint load does) */
    for (int w = 0; w < 2; w++)
        for (size_t off = 0, k; off < n; off += k) {
            void *vp;
            CHECK_OK(mw_offload_map(o, w ? MW_ARR_V : MW_ARR_M, off, n, &vp, &k));
            float *p = vp;
            for (size_t i = 0; i < k; i++) p[i] = (w ? ev : em)[off + i] = (float)((off + i) % 977) * (w ? 0.5f : -1.0f);
        }
    CHECK_OK(mw_offload_commit(o));
    /* the middle segment's parameters and gradients, written whole */
    float *buf;
    const size_t pl = mw_offload_pad(s2 - s1);
    CHECK(posix_memalign((void **)&buf, MW_AIO_ALIGN, pl * 4) == 0, "memalign");
    for (int a = 0; a < 2; a++) {
        for (size_t i = 0; i < pl; i++) buf[i] = a ? (float)i * 0.25f : 1.0f + (float)(i % 7);
        for (size_t i = s1; i < s2; i++) (a ? ep : eg)[i] = buf[i - s1];
        int id;
        CHECK_OK(mw_offload_seg_start(o, 1, 1, a ? MW_ARR_P : MW_ARR_G, buf, &id));
        CHECK_OK(mw_offload_wait(o, id));
    }
    for (int step = 0; step < 3; step++) {
        sctx c = {0, 0, 0};
        CHECK_OK(mw_offload_stream(o, PGMV, MW_ARR_MV | MW_ARR_BIT(MW_ARR_P), add_fn, &c));
        CHECK(!c.bad && c.calls == lay.nchunks && c.next == n, "stream: %zu calls, ended at %zu", c.calls, c.next);
        for (size_t i = 0; i < n; i++) {
            em[i] += (float)i, ev[i] = ev[i] * 2.0f + 1.0f;
            if (i >= s1 && i < s2) ep[i] += eg[i];
        }
    }
    size_t bad = 0;
    for (int w = 0; w < 2; w++)
        for (size_t off = 0, k; off < n; off += k) {
            const void *vp;
            CHECK_OK(mw_offload_view(o, w ? MW_ARR_V : MW_ARR_M, off, n, &vp, &k));
            const float *p = vp;
            for (size_t i = 0; i < k; i++) bad += memcmp(&p[i], &(w ? ev : em)[off + i], 4) != 0;
        }
    CHECK_OK(mw_offload_commit(o));
    CHECK(bad == 0, "%zu moments differ from the in-memory updates", bad);
    int id;
    CHECK_OK(mw_offload_seg_start(o, 0, 1, MW_ARR_P, buf, &id));
    CHECK_OK(mw_offload_wait(o, id));
    CHECK(memcmp(buf, ep + s1, (s2 - s1) * 4) == 0, "the parameters the stream wrote, read whole");
    CHECK(mw_offload_seg_start(o, 0, 0, MW_ARR_P, buf, &id) == MW_ERR_ARG, "a segment without that array");
    /* a fault in the middle of a stream: one error, the rest waited for */
    mw_aio_fault_set(MW_AIO_OP_READ, MW_AIO_FAULT_EIO, 4);
    sctx c = {0, 0, 0};
    CHECK(mw_offload_stream(o, MW_ARR_MV, MW_ARR_MV, add_fn, &c) == MW_ERR_IO && strstr(mw_last_error(), "Input/output error"),
          "EIO during a stream: %s", mw_last_error());
    mw_aio_fault_set(MW_AIO_OP_WRITE, MW_AIO_FAULT_ENOSPC, 2);
    CHECK(mw_offload_stream(o, MW_ARR_MV, MW_ARR_MV, add_fn, &c) == MW_ERR_IO && strstr(mw_last_error(), "No space left"),
          "ENOSPC during a stream: %s", mw_last_error());
    mw_offload_destroy(o);
    CHECK(count_scratch() == 0, "destroy removes the scratch file");
    free(em), free(ev), free(ep), free(eg), free(stage), free(buf);
    unsetenv("MEMWALL_AIO");
}

/* Narrow arrays: M of 8 bits and V of 4 bits per element beside 32-bit gradients, over segments of
 * odd lengths. Each pass writes codes that depend on the element and the pass into the staged
 * chunk; the windows (as checkpoints read them) and the next pass must find exactly those bytes. */
typedef struct nctx {
    int pass, bad;
    size_t next;
} nctx;

static unsigned char code8(size_t i, int pass) { return (unsigned char)((i * 7 + (size_t)pass * 13) & 255); }
static int code4(size_t i, int pass) { return (int)((i * 5 + (size_t)pass * 3) & 15); }

static void narrow_fn(void *ctx, size_t lo, size_t hi, int seg, void *const arr[MW_ARR_COUNT]) {
    nctx *c = ctx;
    (void)seg;
    if (lo != c->next || lo % 2 || !arr[MW_ARR_M] || !arr[MW_ARR_V]) c->bad = 1;
    c->next = hi;
    unsigned char *m = arr[MW_ARR_M], *v = arr[MW_ARR_V];
    for (size_t i = lo; i < hi; i++) {
        const size_t j = i - lo;
        if (c->pass > 0 && (m[j] != code8(i, c->pass - 1) || ((v[j >> 1] >> ((j & 1) * 4)) & 15) != code4(i, c->pass - 1)))
            c->bad = 1;
        m[j] = code8(i, c->pass);
        v[j >> 1] = (unsigned char)((v[j >> 1] & ~(15 << ((j & 1) * 4))) | (code4(i, c->pass) << ((j & 1) * 4)));
    }
}

static void offload_narrow(void) {
    const size_t n = 90002, s1 = 20010, s2 = 70000;
    const size_t seg_lo[4] = {0, s1, s2, n};
    const unsigned MV = MW_ARR_MV, GMV = MW_ARR_MV | MW_ARR_BIT(MW_ARR_G);
    const unsigned mask[3] = {MV, GMV, MV};
    const int bits[MW_ARR_COUNT] = {32, 32, 8, 4};
    mw_offload_layout lay;
    mw_offload_layout_of(3, seg_lo, mask, bits, &lay);
    CHECK(lay.chunk % 8192 == 0 && lay.arr_bytes[MW_ARR_M] == mw_offload_arr_bytes(s1, 8) + mw_offload_arr_bytes(s2 - s1, 8) +
                                                               mw_offload_arr_bytes(n - s2, 8) &&
              lay.arr_bytes[MW_ARR_V] == mw_offload_arr_bytes(s1, 4) + mw_offload_arr_bytes(s2 - s1, 4) + mw_offload_arr_bytes(n - s2, 4) &&
              mw_offload_arr_bytes(s1, 8) % 4096 == 0 && mw_offload_arr_bytes(s1, 4) % 4096 == 0,
          "narrow layout: chunk %zu, M %llu, V %llu bytes", lay.chunk, (unsigned long long)lay.arr_bytes[MW_ARR_M],
          (unsigned long long)lay.arr_bytes[MW_ARR_V]);
    void *stage = malloc(lay.staging_bytes);
    mw_offload *o;
    CHECK_OK(mw_offload_create(&o, dir, 3, seg_lo, mask, bits, stage));
    for (int pass = 0; pass < 3; pass++) {
        nctx c = {pass, 0, 0};
        CHECK_OK(mw_offload_stream(o, MV, MV, narrow_fn, &c));
        CHECK(!c.bad && c.next == n, "narrow pass %d: the codes of the pass before were not there", pass);
    }
    size_t bad = 0;
    for (int w = 0; w < 2; w++)
        for (size_t off = 0, k; off < n; off += k) {
            const void *vp;
            CHECK_OK(mw_offload_view(o, w ? MW_ARR_V : MW_ARR_M, off, n, &vp, &k));
            const unsigned char *b = vp;
            for (size_t i = 0; i < k; i++)
                bad += w ? (size_t)(((b[i >> 1] >> ((i & 1) * 4)) & 15) != code4(off + i, 2)) : (size_t)(b[i] != code8(off + i, 2));
        }
    CHECK_OK(mw_offload_commit(o));
    CHECK(bad == 0, "%zu narrow codes differ in the windows", bad);
    mw_offload_destroy(o);
    free(stage);
}

static double mono(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The engine's clock and throttle: four 1 MiB writes at once on a 200 MB/s throttle are busy at
 * least their 21 ms (one after another), within the wall time around them, and the waits block;
 * a request that finished before its wait costs no waiting; reads stay at 0. */
static void engine_clock(int kind) {
    const size_t R = 1u << 20;
    mw_scratch s;
    int stale;
    uint64_t sb;
    CHECK_OK(mw_scratch_create(&s, dir, 4 * R, &stale, &sb));
    unsigned char *buf;
    CHECK(posix_memalign((void **)&buf, MW_AIO_ALIGN, 4 * R) == 0, "memalign");
    fill(buf, 4 * R, 7);
    setenv("MEMWALL_IO_THROTTLE_MBPS", "200", 1);
    mw_aio *io;
    CHECK_OK(mw_aio_create(&io, s.fd, s.path, 4, kind));
    unsetenv("MEMWALL_IO_THROTTLE_MBPS");
    int id[4];
    const double t0 = mono();
    for (int k = 0; k < 4; k++) CHECK_OK(mw_aio_write(io, buf + k * R, R, k * R, &id[k]));
    for (int k = 0; k < 4; k++) CHECK_OK(mw_aio_wait(io, id[k]));
    const double wall = mono() - t0, floor = 4.0 * R / 200e6;
    mw_aio_time t;
    mw_aio_times(io, &t);
    printf("  %s at 200 MB/s: 4 MiB busy %.1f ms (at least %.1f), waited %.1f ms, wall %.1f ms\n", mw_aio_kind_name(io),
           t.busy_s * 1e3, floor * 1e3, t.wait_s * 1e3, wall * 1e3);
    CHECK(t.busy_s >= floor && t.write_s >= floor && t.busy_s <= wall + 1e-6 && t.write_s <= t.busy_s + 1e-9,
          "%s throttled: busy %.6f s, write %.6f s; want at least %.6f, at most the wall %.6f", mw_aio_kind_name(io),
          t.busy_s, t.write_s, floor, wall);
    CHECK(t.wait_s > 0 && t.wait_s <= wall + 1e-6 && t.read_s == 0, "%s throttled: waited %.6f s (wall %.6f), read %.6f s",
          mw_aio_kind_name(io), t.wait_s, wall, t.read_s);
    mw_aio_destroy(io);
    CHECK_OK(mw_aio_create(&io, s.fd, s.path, 4, kind)); /* no throttle */
    CHECK_OK(mw_aio_read(io, buf, MW_AIO_ALIGN, 0, &id[0]));
    usleep(200000); /* long enough for one 4 KiB read to finish */
    mw_aio_poll(io);
    CHECK_OK(mw_aio_wait(io, id[0]));
    mw_aio_times(io, &t);
    CHECK(t.wait_s == 0 && t.read_s > 0 && t.read_s == t.busy_s && t.write_s == 0,
          "%s: a read finished before its wait: waited %.6f s, read %.6f s, busy %.6f s", mw_aio_kind_name(io),
          t.wait_s, t.read_s, t.busy_s);
    mw_aio_destroy(io);
    mw_scratch_close(&s);
    free(buf);
}

/* The caller's contract, checked at every timing: a request that shares memory with one in flight
 * where either is a read, or file bytes where either is a write, is refused at its start (naming
 * the other), and nothing is left in flight by it; writes sharing memory, and reads sharing file
 * bytes, are allowed. Under MEMWALL_IO_CHECK=1 a write whose source changed before its wait fails
 * the wait, even when the bytes were already on disk (the order a slower disk would not keep). */
static void engine_overlaps(int kind) {
    const size_t P = MW_AIO_ALIGN;
    mw_scratch s;
    int stale;
    uint64_t sb;
    CHECK_OK(mw_scratch_create(&s, dir, 8 * P, &stale, &sb));
    unsigned char *buf, *other;
    CHECK(posix_memalign((void **)&buf, MW_AIO_ALIGN, 4 * P) == 0 && posix_memalign((void **)&other, MW_AIO_ALIGN, 4 * P) == 0,
          "memalign");
    fill(buf, 4 * P, 3);
    mw_aio *io;
    CHECK_OK(mw_aio_create(&io, s.fd, s.path, 8, kind));
    const char *en = mw_aio_kind_name(io);
    int w, id = 7;
    CHECK_OK(mw_aio_write(io, buf, 2 * P, 0, &w)); /* file [0, 2P) from buf [0, 2P) */
    CHECK(mw_aio_read(io, buf + P, P, 4 * P, &id) == MW_ERR_ARG && id == -1 && strstr(mw_last_error(), "still uses"),
          "%s: a read into a write's source in flight must be refused: %s", en, mw_last_error());
    CHECK(mw_aio_read(io, other, P, P, &id) == MW_ERR_ARG && id == -1 && strstr(mw_last_error(), "overlaps request"),
          "%s: a read of a write's file bytes in flight must be refused: %s", en, mw_last_error());
    CHECK(mw_aio_write(io, other, P, P, &id) == MW_ERR_ARG && strstr(mw_last_error(), "overlaps request"),
          "%s: a second write of file bytes in flight must be refused: %s", en, mw_last_error());
    int w2, r2;
    CHECK_OK(mw_aio_write(io, buf, P, 2 * P, &w2)); /* two writes from one source: allowed */
    CHECK_OK(mw_aio_read(io, other, P, 3 * P, &r2)); /* beside them */
    CHECK(mw_aio_write(io, other, P, 5 * P, &id) == MW_ERR_ARG && strstr(mw_last_error(), "still uses"),
          "%s: a write from a read's destination in flight must be refused: %s", en, mw_last_error());
    CHECK_OK(mw_aio_wait(io, w));
    CHECK_OK(mw_aio_wait(io, w2));
    CHECK_OK(mw_aio_wait(io, r2));
    int ra, rb;
    CHECK_OK(mw_aio_read(io, other, P, 0, &ra)); /* once waited for, both are free again; */
    CHECK_OK(mw_aio_read(io, other + P, P, 0, &rb)); /* and two reads of one file region too */
    CHECK_OK(mw_aio_wait_all(io));
    CHECK(memcmp(other, buf, P) == 0 && memcmp(other + P, buf, P) == 0, "%s: read back after the overlaps", en);
    mw_aio_destroy(io);
    setenv("MEMWALL_IO_CHECK", "1", 1);
    CHECK_OK(mw_aio_create(&io, s.fd, s.path, 8, kind));
    unsetenv("MEMWALL_IO_CHECK");
    CHECK_OK(mw_aio_write(io, buf, 2 * P, 0, &w));
    CHECK_OK(mw_aio_wait(io, w)); /* unchanged: passes */
    CHECK_OK(mw_aio_write(io, buf, 2 * P, 0, &w));
    usleep(100000); /* the bytes are on disk by now: the change still fails the wait */
    buf[P + 5] ^= 1;
    CHECK(mw_aio_wait(io, w) == MW_ERR_ARG && strstr(mw_last_error(), "changed before the write was waited for"),
          "%s, MEMWALL_IO_CHECK: a write's source changed in flight must fail its wait: %s", en, mw_last_error());
    CHECK_OK(mw_aio_read(io, other, P, 0, &ra)); /* and the request is free again */
    CHECK_OK(mw_aio_wait(io, ra));
    mw_aio_destroy(io);
    mw_scratch_close(&s);
    free(buf), free(other);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/mw_aio_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    engine_roundtrip(MW_AIO_THREADS);
    engine_clock(MW_AIO_THREADS);
    engine_overlaps(MW_AIO_THREADS);
    mw_aio *probe = NULL;
    int fd = open("/dev/null", O_RDONLY);
    if (mw_aio_create(&probe, fd, "/dev/null", 2, MW_AIO_URING) == MW_OK) {
        mw_aio_destroy(probe);
        engine_roundtrip(MW_AIO_URING);
        engine_clock(MW_AIO_URING);
        engine_overlaps(MW_AIO_URING);
    } else {
        printf("  io_uring is not available here (%s): its round trip is skipped, the thread pool's ran\n",
               mw_last_error());
    }
    close(fd);
    engine_roundtrip(MW_AIO_AUTO);
    scratch_files();
    scratch_concurrent();
    offload_stream(0);
    offload_stream(1);
    offload_narrow();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_aio");
}
