/* Core pieces: size parsing, the arena and its accounting, plan == allocation, the budget
 * refusal, token files (round trip and every malformed case), the loader's determinism, the
 * learning-rate schedule, config validation. */
#include <fcntl.h>
#include <omp.h>
#include <time.h>
#include <unistd.h>

#include "../src/core/arena.h"
#include "../src/core/rng.h"
#include "../src/graph/graph.h"
#include "../src/memory/period.h"
#include "../src/memory/planner.h"
#include "check.h"
#include "memwall.h"

static void test_sizes(void) {
    struct {
        const char *s;
        int ok;
        uint64_t v;
    } cases[] = {{"123", 1, 123},           {"64KiB", 1, 65536},       {"512MiB", 1, 536870912ull},
                 {"2GiB", 1, 2147483648ull}, {"1.5GiB", 1, 1610612736ull}, {"1GB", 1, 1000000000ull},
                 {"7K", 1, 7168},           {"0", 1, 0},               {"", 0, 0},
                 {"abc", 0, 0},             {"12XB", 0, 0},            {"-5", 0, 0},
                 {"0.3", 0, 0},             {"1e30", 0, 0},            {"5 GiB", 1, 5368709120ull}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 0;
        int ok = mw_parse_size(cases[i].s, &v);
        CHECK(ok == cases[i].ok && (!ok || v == cases[i].v), "parse_size('%s') -> %d %llu",
              cases[i].s, ok, (unsigned long long)v);
    }
}

static void test_arena(void) {
    mw_arena a;
    CHECK_OK(mw_arena_init(&a, 1000));
    CHECK(a.base != NULL && a.capacity == 1000, "arena mapped");
    memset(a.base, 1, 1000); /* the memory is really there */
    mw_arena_release(&a);
    CHECK(a.base == NULL, "released");
    mw_arena_release(&a); /* twice is harmless */
    /* more than the machine has: refused before mapping, naming both figures */
    CHECK(mw_arena_init(&a, 1ull << 62) == MW_ERR_BUDGET && strstr(mw_last_error(), "4096.00 PiB") &&
              strstr(mw_last_error(), "is available (") && a.base == NULL,
          "a plan beyond the available memory is MW_ERR_BUDGET: %s", mw_last_error());
    /* what the OS refuses all the same is MW_ERR_NOMEM (the check told to allow it) */
    setenv("MEMWALL_AVAILABLE_OVERRIDE", "8e18", 1);
    CHECK(mw_arena_init(&a, 1ull << 62) == MW_ERR_NOMEM && strstr(mw_last_error(), "arena"),
          "an impossible mapping is MW_ERR_NOMEM: %s", mw_last_error());
    unsetenv("MEMWALL_AVAILABLE_OVERRIDE");
}

static void write_text(const char *dir, const char *rel, const char *text) {
    char path[600], cmd[700];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    FILE *f = system(cmd) == 0 ? fopen(path, "w") : NULL;
    if (!f || fputs(text, f) < 0) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* What the machine can still hold: MemAvailable, cgroup v2 and v1 limits (the tightest of the
 * process's cgroup and its ancestors), the override, and the model refused before mapping. */
static void test_available(const char *dir) {
    uint64_t b;
    char why[600], fs[512];
    CHECK_OK(mw_mem_available(&b, why, sizeof why)); /* this machine: some figure, named */
    CHECK(b > 0 && strstr(why, "MemAvailable"), "available %llu (%s)", (unsigned long long)b, why);

    snprintf(fs, sizeof fs, "%s/v2", dir); /* v2: the parent's limit is the tighter */
    write_text(fs, "proc/meminfo", "MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n");
    write_text(fs, "proc/self/cgroup", "0::/user.slice/job\n");
    write_text(fs, "sys/fs/cgroup/user.slice/job/memory.max", "max\n");
    write_text(fs, "sys/fs/cgroup/user.slice/job/memory.current", "1000\n");
    write_text(fs, "sys/fs/cgroup/user.slice/memory.max", "3000000000\n");
    write_text(fs, "sys/fs/cgroup/user.slice/memory.current", "1000000000\n");
    CHECK_OK(mw_mem_available_in(fs, &b, why, sizeof why));
    CHECK(b == 2000000000ull && strstr(why, "MemAvailable 7.63 GiB") && strstr(why, "user.slice/memory.max") &&
              strstr(why, "2.79 GiB with 953.67 MiB in use"),
          "cgroup v2: %llu (%s)", (unsigned long long)b, why);
    write_text(fs, "proc/meminfo", "MemAvailable:    1000000 kB\n"); /* now MemAvailable binds */
    CHECK_OK(mw_mem_available_in(fs, &b, why, sizeof why));
    CHECK(b == 1024000000ull, "MemAvailable below the cgroup's room: %llu (%s)", (unsigned long long)b, why);

    snprintf(fs, sizeof fs, "%s/v1", dir); /* v1: "no limit" is a huge number */
    write_text(fs, "proc/meminfo", "MemAvailable:    8000000 kB\n");
    write_text(fs, "proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory,hugetlb:/box\n0::/\n");
    write_text(fs, "sys/fs/cgroup/memory/box/memory.limit_in_bytes", "600000000\n");
    write_text(fs, "sys/fs/cgroup/memory/box/memory.usage_in_bytes", "100000000\n");
    write_text(fs, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    write_text(fs, "sys/fs/cgroup/memory/memory.usage_in_bytes", "5\n");
    CHECK_OK(mw_mem_available_in(fs, &b, why, sizeof why));
    CHECK(b == 500000000ull && strstr(why, "box/memory.limit_in_bytes"), "cgroup v1: %llu (%s)",
          (unsigned long long)b, why);
    write_text(fs, "sys/fs/cgroup/memory/box/memory.limit_in_bytes", "9223372036854771712\n");
    CHECK_OK(mw_mem_available_in(fs, &b, why, sizeof why));
    CHECK(b == 8192000000ull && !strstr(why, "cgroup"), "cgroup v1 without a limit: %llu (%s)",
          (unsigned long long)b, why);

    setenv("MEMWALL_AVAILABLE_OVERRIDE", "12MiB", 1);
    CHECK_OK(mw_mem_available(&b, why, sizeof why));
    CHECK(b == 12u << 20 && strstr(why, "MEMWALL_AVAILABLE_OVERRIDE"), "override: %llu (%s)", (unsigned long long)b, why);
    mw_config c;
    mw_config_default(&c); /* a model whose plan is more than 12 MiB: refused, nothing allocated */
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.vocab = 256, c.ctx = 256, c.batch = 4, c.seq = 64;
    mw_plan_summary p;
    CHECK_OK(mw_plan(&c, &p));
    mw_model *m = NULL;
    CHECK(p.peak > (12u << 20) && mw_model_create(&m, &c) == MW_ERR_BUDGET && m == NULL &&
              strstr(mw_last_error(), "but only 12.00 MiB is available (MEMWALL_AVAILABLE_OVERRIDE)"),
          "a plan of %llu bytes with 12 MiB available: %s", (unsigned long long)p.peak, mw_last_error());
    setenv("MEMWALL_AVAILABLE_OVERRIDE", "1GiB", 1);
    CHECK_OK(mw_model_create(&m, &c));
    mw_model_destroy(m);
    setenv("MEMWALL_AVAILABLE_OVERRIDE", "lots", 1);
    CHECK(mw_mem_available(&b, why, sizeof why) == MW_ERR_ARG && strstr(mw_last_error(), "lots"),
          "a malformed override is refused: %s", mw_last_error());
    unsetenv("MEMWALL_AVAILABLE_OVERRIDE");
}

static void test_plan_matches_allocation(void) {
    const int shapes[][7] = {/* L H C V ctx B T */
                             {1, 1, 8, 5, 4, 1, 1},
                             {2, 4, 48, 97, 24, 3, 11},
                             {4, 4, 128, 256, 256, 4, 64},
                             {3, 2, 64, 1000, 128, 2, 128}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mw_config c;
        mw_config_default(&c);
        c.n_layer = shapes[i][0], c.n_head = shapes[i][1], c.n_embd = shapes[i][2];
        c.vocab = shapes[i][3], c.ctx = shapes[i][4], c.batch = shapes[i][5], c.seq = shapes[i][6];
        mw_plan_summary p;
        CHECK_OK(mw_plan(&c, &p));
        mw_model *m;
        CHECK_OK(mw_model_create(&m, &c));
        uint64_t cat[MW_CAT_COUNT], peak, sum = 0;
        mw_model_memory(m, cat, &peak);
        CHECK(peak == p.peak, "shape %zu: allocated peak %llu != plan %llu", i,
              (unsigned long long)peak, (unsigned long long)p.peak);
        for (int k = 0; k < MW_CAT_COUNT; k++) {
            CHECK(cat[k] == p.category[k], "shape %zu: %s %llu != plan %llu", i, mw_category_name(k),
                  (unsigned long long)cat[k], (unsigned long long)p.category[k]);
            sum += cat[k];
        }
        CHECK(p.live_peak <= peak && p.live_peak <= sum && sum >= peak - peak / 4,
              "live peak %llu <= arena %llu; category peaks add up to %llu", (unsigned long long)p.live_peak,
              (unsigned long long)peak, (unsigned long long)sum);
        /* parameters, gradients and each optimizer moment are the same size, >= 4 B/param */
        size_t np = mw_config_num_params(&c);
        CHECK(cat[MW_CAT_PARAMS] >= 4 * np && cat[MW_CAT_GRADS] == cat[MW_CAT_PARAMS] &&
                  cat[MW_CAT_OPTIM] == 2 * cat[MW_CAT_PARAMS],
              "model-state sizes");
        size_t total = 0;
        for (int t = 0; t < mw_model_num_tensors(m); t++) {
            mw_param_info pi;
            CHECK_OK(mw_model_tensor(m, t, &pi));
            total += pi.numel;
        }
        CHECK(total == np, "parameter table holds %zu, config says %zu", total, np);
        mw_model_destroy(m);

        /* the budget: one byte short is refused with the categories named, exact fits */
        c.budget = p.peak - 1;
        mw_status s = mw_model_create(&m, &c);
        CHECK(s == MW_ERR_BUDGET && m == NULL, "budget peak-1 must be refused");
        CHECK(strstr(mw_last_error(), "activations") && strstr(mw_last_error(), "optimizer"),
              "budget message names categories: %s", mw_last_error());
        c.budget = p.peak;
        CHECK_OK(mw_model_create(&m, &c));
        mw_model_destroy(m);
    }
    mw_model_destroy(NULL);
}

/* the placer: random lifetimes and sizes; no two buffers alive together may overlap */
static void test_planner(void) {
    uint64_t rng = 99;
    for (int trial = 0; trial < 50; trial++) {
        mw_planner p;
        int nops = 1 + (int)mw_rng_below(&rng, 30);
        mw_planner_init(&p, nops);
        int n = 1 + (int)mw_rng_below(&rng, 200);
        uint64_t total = 0;
        for (int i = 0; i < n; i++) {
            int a = (int)mw_rng_below(&rng, (uint64_t)nops), b = (int)mw_rng_below(&rng, (uint64_t)nops);
            uint64_t bytes = 1 + mw_rng_below(&rng, 1u << (mw_rng_below(&rng, 20)));
            CHECK_OK(mw_planner_add(&p, "random", -1, bytes, (mw_category)(i % MW_CAT_COUNT), a < b ? a : b, a < b ? b : a));
            total += p.b[p.n - 1].bytes;
        }
        CHECK_OK(mw_planner_place(&p));
        CHECK(mw_planner_check(&p), "trial %d: overlapping live buffers", trial);
        uint64_t maxlive = 0, *all = calloc((size_t)nops * MW_CAT_COUNT, sizeof(uint64_t));
        mw_planner_live_all(&p, all); /* the running-sum version agrees with the direct count */
        for (int op = 0; op < nops; op++) {
            uint64_t live[MW_CAT_COUNT], t = 0;
            mw_planner_live(&p, op, live);
            CHECK(memcmp(live, all + (size_t)op * MW_CAT_COUNT, sizeof live) == 0,
                  "trial %d op %d: mw_planner_live_all differs from mw_planner_live", trial, op);
            for (int k = 0; k < MW_CAT_COUNT; k++) t += live[k];
            maxlive = t > maxlive ? t : maxlive;
        }
        free(all);
        CHECK(p.peak >= maxlive && p.peak <= total, "trial %d: peak %llu, live %llu, sum %llu", trial,
              (unsigned long long)p.peak, (unsigned long long)maxlive, (unsigned long long)total);
        mw_planner_free(&p);
    }
}

/* ---- the placer against the first planner's code, kept here as the oracle ------------------- */

static int ref_by_size_desc(const void *x, const void *y, void *ctx) {
    const mw_pbuf *b = ctx;
    const mw_pbuf *a1 = &b[*(const int *)x], *a2 = &b[*(const int *)y];
    if (a1->bytes != a2->bytes) return a1->bytes < a2->bytes ? 1 : -1;
    if (a1->first != a2->first) return a1->first - a2->first;
    return *(const int *)x - *(const int *)y;
}

static int ref_by_offset(const void *x, const void *y) {
    const mw_pbuf *a = *(mw_pbuf *const *)x, *b = *(mw_pbuf *const *)y;
    return (a->offset > b->offset) - (a->offset < b->offset);
}

/* The quadratic placement memwall shipped before the interval tree (verbatim but for names). */
static void reference_place(mw_planner *p) {
    int *order = malloc(sizeof *order * (size_t)(p->n + 1));
    mw_pbuf **placed = malloc(sizeof *placed * (size_t)(p->n + 1)), **near = malloc(sizeof *near * (size_t)(p->n + 1));
    for (int i = 0; i < p->n; i++) order[i] = i;
    qsort_r(order, (size_t)p->n, sizeof *order, ref_by_size_desc, p->b);
    int np = 0;
    p->peak = 0;
    for (int k = 0; k < p->n; k++) {
        mw_pbuf *b = &p->b[order[k]];
        int nn = 0;
        for (int j = 0; j < np; j++)
            if (placed[j]->first <= b->last && b->first <= placed[j]->last) near[nn++] = placed[j];
        qsort(near, (size_t)nn, sizeof *near, ref_by_offset);
        uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, at = 0;
        for (int j = 0; j < nn; j++) {
            uint64_t end = near[j]->offset;
            if (end > at && end - at >= b->bytes && end - at < best_gap) {
                best = at;
                best_gap = end - at;
            }
            if (near[j]->offset + near[j]->bytes > at) at = near[j]->offset + near[j]->bytes;
        }
        b->offset = best != UINT64_MAX ? best : at;
        if (b->offset + b->bytes > p->peak) p->peak = b->offset + b->bytes;
        placed[np++] = b;
    }
    free(order), free(placed), free(near);
}

/* The pairwise check (zero-byte buffers overlap nothing, as in mw_planner_check). */
static int reference_check(const mw_planner *p) {
    for (int i = 0; i < p->n; i++) {
        const mw_pbuf *a = &p->b[i];
        if (a->offset + a->bytes > p->peak) return 0;
        for (int j = i + 1; j < p->n; j++) {
            const mw_pbuf *b = &p->b[j];
            if (a->bytes && b->bytes && a->first <= b->last && b->first <= a->last &&
                a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes)
                return 0;
        }
    }
    return 1;
}

/* Random instances: sizes with many ties (and some zero), lifetimes long and short. The placement
 * must give the reference's offsets and peak exactly; both checks must agree, on the placement
 * and on a disturbed copy of it. */
static void test_planner_matches_reference(void) {
    uint64_t rng = 2024;
    int disturbed_bad = 0;
    for (int trial = 0; trial < 400; trial++) {
        mw_planner p, q;
        const int nops = 1 + (int)mw_rng_below(&rng, trial % 4 == 0 ? 4 : 60);
        const int n = 1 + (int)mw_rng_below(&rng, 300), shape = (int)mw_rng_below(&rng, 4);
        mw_planner_init(&p, nops);
        for (int i = 0; i < n; i++) {
            int a = (int)mw_rng_below(&rng, (uint64_t)nops), b = (int)mw_rng_below(&rng, (uint64_t)nops);
            if (shape >= 2 && mw_rng_below(&rng, 3)) b = a + (int)mw_rng_below(&rng, 3); /* short lives */
            if (b >= nops) b = nops - 1;
            uint64_t bytes = shape == 1 ? 64 * (1 + mw_rng_below(&rng, 4)) /* ties */
                                        : 1 + mw_rng_below(&rng, 1u << (mw_rng_below(&rng, 20)));
            if (trial % 7 == 3 && mw_rng_below(&rng, 10) == 0) bytes = 0;
            CHECK_OK(mw_planner_add(&p, "random", -1, bytes, MW_CAT_ACTS, a < b ? a : b, a < b ? b : a));
        }
        q = p;
        q.b = malloc(sizeof *q.b * (size_t)p.cap);
        memcpy(q.b, p.b, sizeof *q.b * (size_t)p.n);
        CHECK_OK(mw_planner_place(&p));
        reference_place(&q);
        int same = p.peak == q.peak;
        for (int i = 0; i < n; i++) same &= p.b[i].offset == q.b[i].offset;
        CHECK(same, "trial %d (%d buffers, %d ops): placement differs from the reference (peak %llu vs %llu)",
              trial, n, nops, (unsigned long long)p.peak, (unsigned long long)q.peak);
        CHECK(mw_planner_check(&p) == 1 && reference_check(&p) == 1, "trial %d: the placement overlaps", trial);
        const int i = (int)mw_rng_below(&rng, (uint64_t)n); /* disturb one buffer: the checks agree */
        p.b[i].offset = mw_rng_below(&rng, p.peak + 1) / 64 * 64;
        if (p.b[i].offset + p.b[i].bytes > p.peak) p.b[i].offset = p.peak - p.b[i].bytes;
        const int r = reference_check(&p);
        disturbed_bad += !r;
        CHECK(mw_planner_check(&p) == r, "trial %d: mw_planner_check says %d, the pairwise check %d", trial,
              mw_planner_check(&p), r);
        p.b[i].offset = p.peak; /* past the peak: refused */
        CHECK(p.b[i].bytes == 0 || mw_planner_check(&p) == 0, "trial %d: a buffer past the peak passes", trial);
        mw_planner_free(&p);
        free(q.b);
    }
    CHECK(disturbed_bad > 50, "the disturbed placements overlapped only %d times", disturbed_bad);
    mw_planner p;
    mw_planner_init(&p, 4);
    CHECK(mw_planner_add(&p, "x", -1, 64, MW_CAT_ACTS, 2, 1) == MW_ERR_ARG, "lifetime 2..1 refused");
    CHECK(mw_planner_add(&p, "x", -1, 64, MW_CAT_ACTS, 0, 4) == MW_ERR_ARG, "lifetime past the ops refused");
    CHECK(mw_planner_add(&p, "x", -1, 64, MW_CAT_ACTS, -1, 0) == MW_ERR_ARG, "negative op refused");
    mw_planner_free(&p);
}

/* ---- the same plans, bit for bit, as the first planner made them --------------------------- */

/* FNV-1a over 64-bit words */
static uint64_t fnv_words(uint64_t h, const uint64_t *w, size_t n) {
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 8; k++) h = (h ^ ((w[i] >> (8 * k)) & 0xff)) * 0x100000001b3ull;
    return h;
}

/* The plan's fingerprint: every buffer's (offset, bytes, first, last) in order, and the peak. */
static uint64_t plan_fingerprint(const mw_config *c, int *nbuf) {
    mw_plan_buffer *b;
    int n;
    CHECK_OK(mw_plan_buffers(c, &b, &n));
    mw_plan_summary s;
    CHECK_OK(mw_plan(c, &s));
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        const uint64_t w[4] = {b[i].offset, b[i].bytes, (uint64_t)b[i].first, (uint64_t)b[i].last};
        h = fnv_words(h, w, 4);
    }
    h = fnv_words(h, &s.peak, 1);
    /* the same buffers placed by the reference: the same offsets and peak (the pinned fingerprints
     * below move when a model's graph changes; this keeps them the reference planner's) */
    int last = 0;
    for (int i = 0; i < n; i++) last = b[i].last > last ? b[i].last : last;
    mw_planner q;
    mw_planner_init(&q, last + 1);
    for (int i = 0; i < n; i++)
        CHECK_OK(mw_planner_add(&q, "ref", -1, b[i].bytes, MW_CAT_ACTS, b[i].first, b[i].last));
    reference_place(&q);
    int same = q.peak == s.peak;
    for (int i = 0; i < n; i++) same &= q.b[i].offset == b[i].offset;
    CHECK(same, "the plan's placement is not the reference planner's (peak %llu vs %llu)",
          (unsigned long long)s.peak, (unsigned long long)q.peak);
    mw_planner_free(&q);
    free(b);
    *nbuf = n;
    return h;
}

/* A random planner instance's fingerprint after placement. */
static uint64_t random_fingerprint(uint64_t seed, int nops, int n, uint64_t *peak) {
    mw_planner p;
    mw_planner_init(&p, nops);
    uint64_t rng = seed, h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        int a = (int)mw_rng_below(&rng, (uint64_t)nops), b = (int)mw_rng_below(&rng, (uint64_t)nops);
        if (mw_rng_below(&rng, 4) == 0) b = a + (int)mw_rng_below(&rng, 3); /* many short lives */
        if (b >= nops) b = nops - 1;
        uint64_t bytes = 1 + mw_rng_below(&rng, 1u << (mw_rng_below(&rng, 20)));
        CHECK_OK(mw_planner_add(&p, "random", -1, bytes, (mw_category)(i % MW_CAT_COUNT), a < b ? a : b, a < b ? b : a));
    }
    CHECK_OK(mw_planner_place(&p));
    for (int i = 0; i < p.n; i++) {
        const uint64_t w[2] = {p.b[i].offset, p.b[i].bytes};
        h = fnv_words(h, w, 2);
    }
    *peak = p.peak;
    mw_planner_free(&p);
    return h;
}

static const struct fp_shape {
    const char *what;
    int L, H, C, V, ctx, B, T;
    const char *recompute; /* NULL: inference */
} FP_SHAPES[] = {
    {"tiny none", 4, 4, 128, 256, 256, 4, 64, "none"},
    {"tiny selective", 4, 4, 128, 256, 256, 4, 64, "selective"},
    {"tiny full", 4, 4, 128, 256, 256, 4, 64, "full"},
    {"odd every:3", 12, 2, 48, 97, 24, 3, 11, "every:3"},
    {"blocks", 6, 2, 64, 300, 64, 2, 40, "blocks:nsfnsf"},
    {"gpt2 B=8 T=1024", 12, 12, 768, 50257, 1024, 8, 1024, "none"},
    {"gpt2 B=8 T=1024 full", 12, 12, 768, 50257, 1024, 8, 1024, "full"},
    {"96 layers", 96, 1, 16, 256, 64, 1, 8, "none"},
    {"96 layers every", 96, 1, 16, 256, 64, 1, 8, "every:sqrt"},
    {"inference", 4, 4, 128, 256, 256, 4, 64, NULL},
};

/* Recorded with the quadratic planner (reference_place above) before the interval tree came in,
 * at 2 threads (the GEMM and attention scratch buffers grow with threads); re-recorded when GPT-2's
 * backward moved d(fch) from gelu's buffer to fch's and the MLP's first product took an fp32 chunk
 * workspace (issue 15: bfloat16 values; 0 bytes in fp32), with plan_fingerprint checking every
 * placement against the reference's; and again when the qkv product took that workspace too (a
 * 0-byte buffer's lifetime moved; every fp32 peak unchanged); and the full policy's (tiny full,
 * blocks, gpt2 full, 1024 layers full) when a recomputed block's attention backward went in place
 * and its MLP into row groups (issue 38); and gpt2's two (B=8 T=1024, and full) when fp32 GEMMs
 * got a packed block of B as wide as the model, 768 columns for GPT-2 (issue 36: gemm_pack grew);
 * and gpt2 full's when a recomputed block's qkv backward went into row groups (issue 38: a group's
 * d(ln1), qkv_group, instead of dtmp; the other full shapes span one group, the same bytes); and
 * the full policy's (tiny full, gpt2 full, 1024 layers full) when att_scratch became the forward's
 * alone (one tile pair's scores) where no block runs the strip backward (issue 38). */
static const uint64_t FP_WANT[] = {
    0x37f18bdfe29d7eebull, 0x6912a046a3850b57ull, 0x109d137d720aa096ull, 0x7c873a7400b416b5ull,
    0xef18d9ff7f002052ull, 0xaaccd53eb11d09e7ull, 0xd8001fc2669e1d8aull, 0x1e5dea44fe004988ull,
    0xdd0c73341919e125ull, 0x0e06bc65d5881dceull};
static const struct {
    int L;
    const char *recompute;
    uint64_t want;
} FP_DEEP[] = {{1024, "none", 0x4d7e1906db64450full},
               {1024, "selective", 0xc826bf01d6d14882ull},
               {1024, "full", 0xab1ce375a276bfadull},
               {1024, "every:sqrt", 0xe30b9021ff4cf87cull}};

static void deep_config(mw_config *c, int L) {
    mw_config_default(c);
    c->n_layer = L, c->n_head = 1, c->n_embd = 16, c->vocab = 256, c->ctx = 64, c->batch = 1, c->seq = 8;
}

static void test_plan_fingerprints(void) {
    const int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    for (size_t i = 0; i < sizeof FP_SHAPES / sizeof FP_SHAPES[0]; i++) {
        const struct fp_shape *f = &FP_SHAPES[i];
        mw_config c;
        mw_config_default(&c);
        c.n_layer = f->L, c.n_head = f->H, c.n_embd = f->C, c.vocab = f->V, c.ctx = f->ctx, c.batch = f->B,
        c.seq = f->T;
        if (f->recompute) CHECK_OK(mw_recompute_parse(&c, f->recompute));
        else c.inference = 1;
        int n;
        const uint64_t h = plan_fingerprint(&c, &n);
        CHECK(h == FP_WANT[i], "%s: plan fingerprint 0x%016llx, the first planner's 0x%016llx", f->what,
              (unsigned long long)h, (unsigned long long)FP_WANT[i]);
    }
    for (size_t i = 0; i < sizeof FP_DEEP / sizeof FP_DEEP[0]; i++) {
        mw_config c;
        deep_config(&c, FP_DEEP[i].L);
        CHECK_OK(mw_recompute_parse(&c, FP_DEEP[i].recompute));
        int n;
        const uint64_t h = plan_fingerprint(&c, &n);
        CHECK(h == FP_DEEP[i].want, "%d layers %s: plan fingerprint 0x%016llx, the first planner's 0x%016llx",
              FP_DEEP[i].L, FP_DEEP[i].recompute, (unsigned long long)h, (unsigned long long)FP_DEEP[i].want);
    }
    omp_set_num_threads(threads);
    const struct {
        uint64_t seed;
        int nops, n;
        uint64_t want, peak;
    } rnd[] = {{1, 30, 200, 0xb85a9474f19cb6ebull, 2689280},
               {2, 500, 3000, 0x2582ae8d49a82096ull, 34587584},
               {3, 5, 2000, 0xdd7a5be27ba32c39ull, 30294080},
               {4, 2000, 6000, 0x83e6f22453b4fb25ull, 61989760}};
    for (size_t i = 0; i < sizeof rnd / sizeof rnd[0]; i++) {
        uint64_t peak;
        const uint64_t h = random_fingerprint(rnd[i].seed, rnd[i].nops, rnd[i].n, &peak);
        CHECK(h == rnd[i].want && peak == rnd[i].peak, "random instance %zu: 0x%016llx peak %llu", i,
              (unsigned long long)h, (unsigned long long)peak);
    }
}

/* A 4096-block plan: every buffer placed, none overlapping another alive with it, the peak at
 * least the most bytes alive at one op. Prints how long planning took (never a pass/fail). */
static void test_planner_deep(void) {
    const char *policies[] = {"none", "full", "every:sqrt"};
    for (int k = 0; k < 3; k++) {
        mw_config c;
        deep_config(&c, 4096);
        CHECK_OK(mw_recompute_parse(&c, policies[k]));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        mw_plan_buffer *b;
        int n;
        CHECK_OK(mw_plan_buffers(&c, &b, &n));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        mw_plan_summary s;
        CHECK_OK(mw_plan(&c, &s));
        mw_planner p;
        int nops = 0;
        for (int i = 0; i < n; i++) nops = b[i].last + 1 > nops ? b[i].last + 1 : nops;
        mw_planner_init(&p, nops);
        for (int i = 0; i < n; i++) {
            CHECK_OK(mw_planner_add(&p, "b", -1, b[i].bytes, b[i].category, b[i].first, b[i].last));
            p.b[i].offset = b[i].offset;
        }
        p.peak = s.peak;
        CHECK(mw_planner_check(&p) == 1, "4096 blocks, %s: live buffers overlap", policies[k]);
        uint64_t *live = calloc((size_t)nops * MW_CAT_COUNT, sizeof(uint64_t)), most = 0;
        mw_planner_live_all(&p, live);
        for (int op = 0; op < nops; op++) {
            uint64_t t = 0;
            for (int j = 0; j < MW_CAT_COUNT; j++) t += live[(size_t)op * MW_CAT_COUNT + j];
            most = t > most ? t : most;
        }
        CHECK(most == s.live_peak && s.live_peak <= s.peak, "4096 blocks, %s: live peak %llu (plan %llu), arena %llu",
              policies[k], (unsigned long long)most, (unsigned long long)s.live_peak, (unsigned long long)s.peak);
        printf("  4096 blocks, recompute %s: %d buffers over %d ops planned in %.0f ms\n", policies[k], n, nops,
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
        free(live);
        free(b);
        mw_planner_free(&p);
    }
}

/* The CPU time, in seconds, of one plan of deep_config(L) under policy (the process's: other
 * processes on a busy machine stretch wall time, not this). */
static double plan_s(int L, const char *policy) {
    mw_config c;
    deep_config(&c, L);
    CHECK_OK(mw_recompute_parse(&c, policy));
    struct timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    mw_plan_summary s;
    CHECK_OK(mw_plan(&c, &s));
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

/* Planning grows near-linearly with depth: 4 times the blocks may take at most 6 times as long
 * (O(n log n) gives about 4.5; the placer that scanned every placed buffer for each zero-byte one,
 * which an fp32 plan makes per bf16 workspace, gave 15, and estimate took 80 s at 4096 blocks).
 * CPU time, each size's best of 7 runs, the two sizes taking turns, so that a busy machine's
 * stalls do not count and a slower spell slows both. */
static void test_planner_scaling(void) {
    const char *policies[] = {"none", "full"};
    for (int k = 0; k < 2; k++) {
        double a = 1e30, b = 1e30;
        for (int r = 0; r < 7; r++) {
            const double x = plan_s(256, policies[k]), y = plan_s(1024, policies[k]);
            a = x < a ? x : a, b = y < b ? y : b;
        }
        printf("  recompute %s: 256 blocks planned in %.1f ms of CPU, 1024 in %.1f ms (x%.2f)\n", policies[k], a * 1e3,
               b * 1e3, b / a);
        CHECK(b <= 6 * a, "recompute %s: 1024 blocks plan in %.1f ms, %.1f times 256 blocks' %.1f ms (at most 6)",
              policies[k], b * 1e3, b / a, a * 1e3);
    }
}

static void write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void test_token_files(const char *dir) {
    char path[512], bad[512];
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);
    int32_t toks[1000];
    for (int i = 0; i < 1000; i++) toks[i] = (i * 7919) % 300;
    for (int width = 2; width <= 4; width += 2) {
        CHECK_OK(mw_data_write(path, toks, 1000, 300, width, &(mw_tokenizer_id){"bpe", 1}));
        mw_data *d;
        CHECK_OK(mw_data_open(&d, path));
        CHECK(mw_data_count(d) == 1000 && mw_data_vocab(d) == 300, "header round trip");
        int32_t back[1000];
        CHECK_OK(mw_data_read(d, 0, 1000, back));
        CHECK(memcmp(back, toks, sizeof toks) == 0, "tokens round trip (width %d)", width);
        CHECK(mw_data_read(d, 990, 11, back) == MW_ERR_ARG, "read past the end refused");
        /* the loader: same seed same windows, targets are inputs shifted by one */
        mw_loader l1, l2;
        int32_t in1[4 * 16], tg1[4 * 16], in2[4 * 16], tg2[4 * 16], scr[4 * 17];
        mw_loader_init(&l1, d, 7);
        mw_loader_init(&l2, d, 7);
        for (int k = 0; k < 3; k++) {
            CHECK_OK(mw_loader_next(&l1, 4, 16, in1, tg1, scr));
            CHECK_OK(mw_loader_next(&l2, 4, 16, in2, tg2, scr));
            CHECK(memcmp(in1, in2, sizeof in1) == 0 && memcmp(tg1, tg2, sizeof tg1) == 0,
                  "loader is deterministic");
            CHECK(memcmp(in1 + 1, tg1, 15 * sizeof(int32_t)) == 0, "targets are shifted inputs");
        }
        mw_data_close(d);
    }
    /* a version-1 file (32-byte header: width 4, 10 tokens, vocab 300) of the first 10 tokens
     * (tests/test_data.c tests version 2's own fields) */
    unsigned char buf[64 + 32] = "MWTOKENS\1\0\0\0\4\0\0\0\12\0\0\0\0\0\0\0\x2c\1\0\0";
    FILE *f = fopen(path, "rb");
    size_t n = fseek(f, 64, SEEK_SET) == 0 ? fread(buf + 32, 1, 40, f) : 0; /* after the v2 header */
    fclose(f);
    CHECK(n == 40, "tokens of the version-2 file start at byte 64");
    struct {
        const char *what;
        int off, val;
        size_t len;
        mw_status want;
    } cases[] = {
        {"bad magic", 0, 'X', 72, MW_ERR_FORMAT},    {"version 3", 8, 3, 72, MW_ERR_FORMAT},
        {"width 3", 12, 3, 72, MW_ERR_FORMAT},       {"truncated tokens", -1, 0, 60, MW_ERR_FORMAT},
        {"truncated header", -1, 0, 20, MW_ERR_FORMAT}, {"empty", -1, 0, 0, MW_ERR_FORMAT},
        {"vocab 0", 24, 0, 72, MW_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char b2[96];
        memcpy(b2, buf, 72);
        if (cases[i].off == 24) memset(b2 + 24, 0, 4); /* the whole u32 */
        if (cases[i].off >= 0) b2[cases[i].off] = (unsigned char)cases[i].val;
        write_file(bad, b2, cases[i].len);
        mw_data *d = NULL;
        mw_status s = mw_data_open(&d, bad);
        CHECK(s == cases[i].want && d == NULL, "%s: got %s", cases[i].what, mw_status_str(s));
        CHECK(strstr(mw_last_error(), bad) != NULL, "%s: message names the file: %s", cases[i].what,
              mw_last_error());
    }
    /* a token beyond the header's vocabulary is caught on read */
    memcpy(buf + 32, "\xff\xff\x00\x00", 4);
    write_file(bad, buf, 72);
    mw_data *d;
    CHECK_OK(mw_data_open(&d, bad));
    int32_t t[10];
    CHECK(mw_data_read(d, 1, 9, t) == MW_OK, "the valid part reads");
    CHECK(mw_data_read(d, 0, 10, t) == MW_ERR_FORMAT, "out-of-vocabulary token refused");
    mw_data_close(d);
    mw_data *none;
    CHECK(mw_data_open(&none, "/nonexistent/x.bin") == MW_ERR_IO, "missing file is MW_ERR_IO");
    mw_data_close(NULL);
}

static void test_schedule_and_config(void) {
    mw_config c;
    mw_config_default(&c);
    c.lr = 1.0, c.min_lr_frac = 0.1, c.warmup = 10, c.steps = 110;
    CHECK(fabs(mw_lr_at(&c, 0) - 0.1) < 1e-12 && fabs(mw_lr_at(&c, 9) - 1.0) < 1e-12, "warm-up");
    CHECK(fabs(mw_lr_at(&c, 10) - 1.0) < 1e-12, "peak after warm-up");
    CHECK(fabs(mw_lr_at(&c, 60) - 0.55) < 1e-12, "cosine midpoint");
    CHECK(fabs(mw_lr_at(&c, 109) - 0.1) < 1e-3, "ends near min_lr");
    for (int s = 11; s < 110; s++) CHECK(mw_lr_at(&c, s) <= mw_lr_at(&c, s - 1), "monotone decay");
    c.warmup = 0, c.steps = 1;
    CHECK(fabs(mw_lr_at(&c, 0) - 1.0) < 1e-12, "no warm-up, one step");
    mw_config bad;
    mw_config_default(&bad);
    bad.n_embd = 130, bad.n_head = 4;
    CHECK(mw_config_validate(&bad) == MW_ERR_ARG && strstr(mw_last_error(), "--heads"),
          "dim not a multiple of heads refused: %s", mw_last_error());
    mw_config_default(&bad);
    bad.seq = bad.ctx + 1;
    CHECK(mw_config_validate(&bad) == MW_ERR_ARG, "seq beyond ctx refused");
    CHECK(mw_config_preset(&bad, "gpt5") == MW_ERR_ARG, "unknown preset refused");
    CHECK_OK(mw_config_preset(&bad, "gpt2"));
    CHECK(mw_config_num_params(&bad) == 124439808, "GPT-2 124M has %zu params",
          mw_config_num_params(&bad));
}

/* A parallel layout's rank (issue 32 item 2) is planned, never created: the library refuses it
 * with one message and allocates nothing; the plan of each pipeline stage is its own walk. */
static void test_layout_refused(void) {
    mw_config c;
    mw_config_default(&c);
    c.n_layer = 4, c.tp = 2;
    mw_plan_summary p, q;
    CHECK_OK(mw_plan(&c, &p));
    /* a --tp rank runs now (issue 33): created with its share, the plan's peak its arena's */
    mw_model *m = NULL;
    CHECK_OK(mw_model_create(&m, &c));
    uint64_t cat[MW_CAT_COUNT], peak = 0;
    if (m) mw_model_memory(m, cat, &peak);
    CHECK(m != NULL && peak == p.peak, "a --tp rank's arena is its plan: %llu against %llu",
          (unsigned long long)peak, (unsigned long long)p.peak);
    mw_model_destroy(m);
    c.tp = 0, c.pp = 2, c.pp_stage = 1, c.pp_first = 2, c.pp_blocks = 2;
    CHECK_OK(mw_plan(&c, &q));
    m = NULL; /* a GPT-2 stage (its embedding tied, src/dist/pipetied.c) runs: its arena its plan */
    CHECK_OK(mw_model_create(&m, &c));
    peak = 0;
    if (m) mw_model_memory(m, cat, &peak);
    CHECK(m != NULL && peak == q.peak, "a tied GPT-2 pipeline stage's arena is its plan: %llu against %llu",
          (unsigned long long)peak, (unsigned long long)q.peak);
    mw_model_destroy(m);
    { /* an untied stage runs (issue 33, src/dist/pipeline.c): created with its blocks, its arena its plan */
        mw_config u;
        mw_config_default(&u);
        CHECK_OK(mw_config_preset(&u, "llama-tiny"));
        u.pp = 2, u.pp_stage = 1, u.pp_first = 2, u.pp_blocks = 2, u.accum = 2;
        mw_plan_summary up;
        CHECK_OK(mw_plan(&u, &up));
        mw_model *um = NULL;
        CHECK_OK(mw_model_create(&um, &u));
        uint64_t ucat[MW_CAT_COUNT], upeak = 0;
        if (um) mw_model_memory(um, ucat, &upeak);
        CHECK(um != NULL && upeak == up.peak, "a pipeline stage's arena is its plan: %llu against %llu",
              (unsigned long long)upeak, (unsigned long long)up.peak);
        mw_model_destroy(um);
    }
    c.pp_blocks = 3; /* blocks 2..4 of 4 */
    CHECK(mw_plan(&c, &q) == MW_ERR_ARG && strstr(mw_last_error(), "outside the model's 4"),
          "a stage past the last block is refused: %s", mw_last_error());
}

/* Expert parallelism (issue 32 items 1-2) in a deepseek rank's walk: with --ep E the rank holds
 * E_routed / E routed experts per MoE block, the rest replicated; the experts' values take the
 * receive bound E x min(N K, (E_routed / E) cap) rows; each all-to-all holds this rank's side
 * (R = min(N K, E_routed cap) rows x C) for its op; a pipeline stage past the dense blocks has none. */
static void test_layout_ep(void) {
    mw_config c;
    mw_config_default(&c);
    CHECK_OK(mw_config_preset(&c, "moe-tiny")); /* 4 blocks, the first dense; 8 experts of 32, top-2, C 64 */
    c.batch = 2, c.seq = 32, c.threads = 1;
    const uint64_t N = 64, C = 64, K = 2, E = 8, Fm = 32, moe_blocks = 3, F4 = 4;
    const uint64_t experts = moe_blocks * E * 3 * Fm * C; /* floats, every matrix a multiple of 16 */
    mw_plan_summary p1, p2;
    c.dp = 1, c.world = 2;
    CHECK_OK(mw_plan(&c, &p1));
    CHECK(p1.expert_floats == experts, "moe-tiny's routed experts: %llu floats, want %llu",
          (unsigned long long)p1.expert_floats, (unsigned long long)experts);
    c.ep = 2;
    CHECK_OK(mw_plan(&c, &p2));
    CHECK(p2.expert_floats == experts / 2 && p2.flat_floats - p2.expert_floats == p1.flat_floats - p1.expert_floats,
          "--ep 2: the rank's experts %llu floats (want %llu), the rest %llu (want %llu, replicated)",
          (unsigned long long)p2.expert_floats, (unsigned long long)(experts / 2),
          (unsigned long long)(p2.flat_floats - p2.expert_floats), (unsigned long long)(p1.flat_floats - p1.expert_floats));
    for (int cap = 0; cap < 2; cap++) { /* no capacity (cap = N), then --capacity-factor 1 (cap 16) */
        c.capacity_factor = cap;
        const uint64_t cp = cap ? (N * K + E - 1) / E : N, R = N * K < E * cp ? N * K : E * cp;
        const uint64_t one = N * K < E / 2 * cp ? N * K : E / 2 * cp, Rx = 2 * one;
        mw_plan_buffer *b;
        int n, a2a = 0, bad = 0, xin = 0;
        CHECK_OK(mw_plan_buffers(&c, &b, &n));
        for (int i = 0; i < n; i++) {
            if (!strcmp(b[i].name, "ep_a2a")) a2a++, bad += b[i].bytes != R * C * F4 || b[i].first != b[i].last;
            const size_t ln = strlen(b[i].name);
            if (ln > 10 && !strcmp(b[i].name + ln - 10, ".expert_in")) xin++, bad += b[i].bytes != Rx * C * F4;
        }
        free(b);
        CHECK(a2a == 4 * (int)moe_blocks && xin == (int)moe_blocks && !bad,
              "--ep 2, capacity %d: %d all-to-all buffers (want 12) and %d experts' inputs (want 3), %d of the wrong size "
              "(R %llu, Rx %llu rows)", cap, a2a, xin, bad, (unsigned long long)R, (unsigned long long)Rx);
    }
    c.ep = 0, c.capacity_factor = 0;
    mw_plan_buffer *b;
    int n, a2a = 0;
    CHECK_OK(mw_plan_buffers(&c, &b, &n));
    for (int i = 0; i < n; i++) a2a += !strcmp(b[i].name, "ep_a2a");
    free(b);
    CHECK(a2a == 0, "without --ep no all-to-all buffer, got %d", a2a);
    /* a pipeline stage of blocks 2-3 holds two MoE blocks (the dense one is block 0's) */
    c.pp = 2, c.pp_stage = 1, c.pp_first = 2, c.pp_blocks = 2, c.ep = 2;
    CHECK_OK(mw_plan(&c, &p2));
    CHECK(p2.expert_floats == 2 * E / 2 * 3 * Fm * C, "stage 1 of moe-tiny under --ep 2: %llu expert floats, want %llu",
          (unsigned long long)p2.expert_floats, (unsigned long long)(2 * E / 2 * 3 * Fm * C));
    /* interleaved (--vpp 2, chunks of one block): stage 0 holds blocks 0 (dense) and 2, stage 1 blocks 1 and 3 */
    c.pp_blocks = 2, c.vpp = 2, c.accum = 2;
    for (int s = 0; s < 2; s++) {
        c.pp_stage = s, c.pp_first = 2 * s;
        CHECK_OK(mw_plan(&c, &p2));
        CHECK(p2.expert_floats == (uint64_t)(s + 1) * E / 2 * 3 * Fm * C, "--vpp 2, stage %d: %llu expert floats, want %llu",
              s, (unsigned long long)p2.expert_floats, (unsigned long long)((s + 1) * E / 2 * 3 * Fm * C));
    }
    c.pp = c.pp_stage = c.pp_first = c.pp_blocks = c.vpp = 0, c.accum = 1;
    c.ep = 3;
    c.world = 3;
    CHECK(mw_plan(&c, &p2) == MW_ERR_ARG && strstr(mw_last_error(), "must divide the routed experts"),
          "--ep 3 of 8 experts refused: %s", mw_last_error());
    c.ep = 4;
    CHECK(mw_plan(&c, &p2) == MW_ERR_ARG && strstr(mw_last_error(), "must divide --dp"),
          "--ep 4 over 3 data-parallel ranks refused: %s", mw_last_error());
    mw_config_default(&c);
    c.ep = 2, c.dp = 1, c.world = 2;
    CHECK(mw_plan(&c, &p2) == MW_ERR_ARG && strstr(mw_last_error(), "has no experts"),
          "--ep on GPT-2 refused: %s", mw_last_error());
}

/* A pipeline stage's placement folded (src/memory/period.h, issue 32 item 6): the plan of M
 * micro-batches placed from a smaller problem must be the one the whole grouped problem gives,
 * offset for offset, with the same peak, and a valid placement; over the families, stages,
 * recomputation, ZeRO ranks, --tp with --sp and micro-batch counts. A pipeline stage's arena
 * (llama-tiny runs --pp) is its folded plan. */
static void test_period_fold(void) {
    static const struct {
        const char *preset;
        int P, V, rec, zero, tp;
    } L[] = {{"llama-tiny", 2, 1, MW_RECOMPUTE_NONE, 0, 0}, {"llama-tiny", 4, 1, MW_RECOMPUTE_SELECTIVE, 0, 0},
             {"gpt2-tiny", 3, 1, MW_RECOMPUTE_FULL, 0, 0},  {"llama-tiny", 3, 1, MW_RECOMPUTE_FULL, 0, 2},
             {"moe-tiny", 4, 1, MW_RECOMPUTE_NONE, 1, 0},   {"moe-tiny", 3, 1, MW_RECOMPUTE_SELECTIVE, 0, 0},
             {"mla-tiny", 2, 1, MW_RECOMPUTE_FULL, 2, 0},   {"llama-tiny", 2, 1, MW_RECOMPUTE_EVERY, 3, 0},
             {"llama-tiny", 2, 2, MW_RECOMPUTE_NONE, 0, 0}}; /* interleaved: best fit, folded never */
    static const int MS[] = {1, 3, 8, 13, 24, 37};
    const long folds0 = mw_period_folds();
    int plans = 0;
    for (size_t li = 0; li < sizeof L / sizeof L[0]; li++)
        for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
            mw_config c;
            mw_config_default(&c);
            CHECK_OK(mw_config_preset(&c, L[li].preset));
            c.batch = 1, c.seq = 16, c.threads = 1;
            const int P = L[li].P, V = L[li].V, M = V > 1 ? MS[mi] / P * P + P : MS[mi];
            c.n_layer = P * V * (V > 1 ? 1 : 2);
            c.pp = P, c.vpp = V, c.accum = M, c.recompute = L[li].rec;
            if (L[li].zero) c.dp = 1, c.world = 3, c.zero = L[li].zero, c.rank = 2;
            if (L[li].tp) c.tp = L[li].tp, c.sp = 1;
            for (int s = 0; s < P; s++) {
                c.pp_stage = s, c.pp_first = s * c.n_layer / P, c.pp_blocks = c.n_layer / P;
                mw_plan_buffer *a = NULL, *b = NULL;
                int na = 0, nb = 0;
                mw_plan_summary sa, sb;
                mw_period_set_fold(0);
                CHECK_OK(mw_plan_buffers(&c, &b, &nb));
                CHECK_OK(mw_plan(&c, &sb));
                mw_period_set_fold(1);
                CHECK_OK(mw_plan_buffers(&c, &a, &na));
                CHECK_OK(mw_plan(&c, &sa));
                int same = na == nb && sa.peak == sb.peak, last = 0;
                for (int i = 0; i < na; i++) {
                    same &= i < nb && a[i].offset == b[i].offset && a[i].bytes == b[i].bytes && a[i].first == b[i].first;
                    last = a[i].last > last ? a[i].last : last;
                }
                CHECK(same, "%s --pp %d --vpp %d stage %d, %d micro-batches: the folded placement differs from the whole "
                      "one (peak %llu vs %llu)", L[li].preset, P, V, s, M, (unsigned long long)sa.peak,
                      (unsigned long long)sb.peak);
                mw_planner q; /* and it is a placement: no two buffers alive together overlap */
                mw_planner_init(&q, last + 1);
                for (int i = 0; i < na; i++)
                    if (a[i].tier == MW_TIER_DEVICE) {
                        CHECK_OK(mw_planner_add(&q, "x", -1, a[i].bytes, MW_CAT_ACTS, a[i].first, a[i].last));
                        q.b[q.n - 1].offset = a[i].offset;
                    }
                q.peak = sa.peak;
                CHECK(mw_planner_check(&q), "%s --pp %d --vpp %d stage %d, %d micro-batches: buffers overlap",
                      L[li].preset, P, V, s, M);
                mw_planner_free(&q);
                free(a), free(b);
                plans++;
            }
        }
    const long folds = mw_period_folds() - folds0;
    CHECK(folds >= plans / 3, "only %ld of %d stage plans were folded", folds, plans);
    /* a stage that runs: its arena (every micro-batch walked, folded) is the plan's peak (cut) */
    mw_config u;
    mw_config_default(&u);
    CHECK_OK(mw_config_preset(&u, "llama-tiny"));
    u.pp = 2, u.pp_stage = 0, u.pp_first = 0, u.pp_blocks = 2, u.accum = 40;
    mw_plan_summary up;
    const long f0 = mw_period_folds(), c0 = mw_period_cuts();
    CHECK_OK(mw_plan(&u, &up));
    mw_model *um = NULL;
    CHECK_OK(mw_model_create(&um, &u));
    uint64_t ucat[MW_CAT_COUNT], upeak = 0;
    if (um) mw_model_memory(um, ucat, &upeak);
    CHECK(um != NULL && upeak == up.peak && mw_period_folds() - f0 == 1 && mw_period_cuts() - c0 == 1,
          "a pipeline stage of 40 micro-batches: arena %llu, plan %llu, %ld folds and %ld cuts (want 1, 1)",
          (unsigned long long)upeak, (unsigned long long)up.peak, mw_period_folds() - f0, mw_period_cuts() - c0);
    mw_model_destroy(um);
}

/* A 1F1B stage's summary plan walks a cut schedule (src/memory/period.h, mw_period_cut): on random
 * small layouts (families, stages, recomputation, ZeRO ranks, --tp with --sp) at M = P .. 4P + 3,
 * 64 and 257 micro-batches, the cut plan must be the whole walk's: the same peak and categories, and
 * every buffer of the whole walk at the offset its counterpart in the cut has (mw_period_expand);
 * half the layouts cut from the fewest micro-batches (mw_graph_set_cut(2)), so that short plans cut
 * too; none may be refused. */
static void test_period_cut(void) {
    extern const mw_model_def mw_arch_gpt2, mw_arch_llama, mw_arch_deepseek;
    static const char *PRESETS[] = {"gpt2-tiny", "llama-tiny", "moe-tiny", "mla-tiny"};
    static const int RECS[] = {MW_RECOMPUTE_NONE, MW_RECOMPUTE_SELECTIVE, MW_RECOMPUTE_FULL, MW_RECOMPUTE_EVERY};
    uint64_t rng = 0xc077ull;
    const long cuts0 = mw_period_cuts(), whole0 = mw_graph_cut_fallbacks();
    int plans = 0, long_plans = 0;
    for (int trial = 0; trial < 10; trial++) {
        const int vpp = trial >= 6; /* interleaved: periodic over 256 micro-batches (place.c) */
        mw_config c;
        mw_config_default(&c);
        CHECK_OK(mw_config_preset(&c, PRESETS[vpp ? trial % 2 : trial % 4]));
        c.batch = 1, c.seq = 16, c.threads = 1;
        const int P = 2 + (int)mw_rng_below(&rng, 3);
        c.n_layer = P * (1 + (int)mw_rng_below(&rng, 2)) * (vpp ? 2 : 1);
        c.pp = P, c.vpp = vpp ? 2 : 0, c.recompute = RECS[mw_rng_below(&rng, 4)];
        if (c.recompute == MW_RECOMPUTE_EVERY) c.recompute_every = 1 + (int)mw_rng_below(&rng, 2);
        if (mw_rng_below(&rng, 2)) c.dp = 1, c.world = 3, c.zero = (int)mw_rng_below(&rng, 4), c.rank = (int)mw_rng_below(&rng, 3);
        if (c.arch != MW_ARCH_DEEPSEEK && mw_rng_below(&rng, 3) == 0) c.tp = 2, c.sp = 1;
        const mw_model_def *arch = c.arch == MW_ARCH_GPT2 ? &mw_arch_gpt2 : c.arch == MW_ARCH_LLAMA ? &mw_arch_llama : &mw_arch_deepseek;
        for (int mi = vpp ? 0 : P; mi <= (vpp ? 3 : 4 * P + 5); mi++) {
            c.accum = vpp ? (257 + mi * 23) / P * P + P : mi <= 4 * P + 3 ? mi : mi == 4 * P + 4 ? 64 : 257;
            const int s = (int)mw_rng_below(&rng, (uint64_t)P);
            c.pp_stage = s, c.pp_first = s * c.n_layer / P, c.pp_blocks = c.n_layer / P;
            mw_planner a, b;
            mw_plan_summary sa, sb;
            int walked = 0, w0 = 0;
            mw_graph_set_cut(trial % 2 ? 2 : 1);
            CHECK_OK(mw_graph_plan_placed(arch, &c, &a, &walked));
            CHECK_OK(mw_plan(&c, &sa));
            mw_graph_set_cut(0);
            CHECK_OK(mw_graph_plan_placed(arch, &c, &b, &w0));
            CHECK_OK(mw_plan(&c, &sb));
            mw_graph_set_cut(1);
            int same = sa.peak == sb.peak && sa.live_peak == sb.live_peak && a.peak == b.peak && w0 == 0 &&
                       sa.period == (vpp ? P : 1);
            for (int k = 0; k < MW_CAT_COUNT; k++) same &= sa.category[k] == sb.category[k];
            CHECK(same, "%s --pp %d stage %d rec %d zero %d tp %d, %d micro-batches (walked %d): the cut plan's peak %llu "
                  "(live %llu), the whole walk's %llu (live %llu)", PRESETS[vpp ? trial % 2 : trial % 4], P, s, c.recompute, c.dp ? c.zero : -1,
                  c.tp, c.accum, walked, (unsigned long long)sa.peak, (unsigned long long)sa.live_peak,
                  (unsigned long long)sb.peak, (unsigned long long)sb.live_peak);
            if (walked > 0) { /* every buffer of the whole walk at its counterpart's offset */
                mw_planner x;
                mw_planner_init(&x, b.nops);
                for (int i = 0; i < b.n; i++) {
                    CHECK_OK(mw_planner_add(&x, b.b[i].name, b.b[i].layer, b.b[i].bytes, (mw_category)b.b[i].cat, b.b[i].first, b.b[i].last));
                    x.b[i].tag = b.b[i].tag, x.b[i].mb = b.b[i].mb;
                }
                int ok = mw_period_expand(&a, vpp ? P : 1, walked, &x, c.accum) && x.peak == b.peak;
                for (int i = 0; ok && i < b.n; i++) ok = x.b[i].offset == b.b[i].offset;
                CHECK(ok, "%s --pp %d stage %d, %d micro-batches: the cut walk's (%d) offsets are not the whole walk's",
                      PRESETS[vpp ? trial % 2 : trial % 4], P, s, c.accum, walked);
                mw_planner_free(&x);
                long_plans++;
            } else {
                int ok = a.n == b.n;
                for (int i = 0; ok && i < a.n; i++) ok = a.b[i].offset == b.b[i].offset;
                CHECK(ok, "%s --pp %d stage %d, %d micro-batches, walked whole: offsets differ", PRESETS[vpp ? trial % 2 : trial % 4], P, s, c.accum);
            }
            mw_planner_free(&a), mw_planner_free(&b);
            plans++;
        }
    }
    const long cuts = mw_period_cuts() - cuts0, whole = mw_graph_cut_fallbacks() - whole0;
    printf("  period cut: %d of %d stage plans walked cut, %ld refused\n", long_plans, plans, whole);
    CHECK(long_plans >= 2 * 6 + 4 && whole == 0, "%d of %d plans cut (%ld cut walks accepted), %ld refused", long_plans, plans,
          cuts, whole);
}

/* mw_planner_place_like against placing: random plans with whole-step buffers whose sizes change
 * (a ZeRO rank's states); wherever it derives a placement, it is the one placing gives, offset for
 * offset; and it declines some (a state placed into a hole). */
static void test_place_like_random(void) {
    uint64_t rng = 0x5eed5eedull;
    int derived = 0, declined = 0;
    for (int trial = 0; trial < 300; trial++) {
        const int nops = 2 + (int)mw_rng_below(&rng, 40), n = 1 + (int)mw_rng_below(&rng, 60), nx = 1 + (int)mw_rng_below(&rng, 3);
        mw_planner a, b;
        mw_planner_init(&a, nops);
        mw_planner_init(&b, nops);
        for (int i = 0; i < n + nx; i++) {
            int f = (int)mw_rng_below(&rng, (uint64_t)nops), l = (int)mw_rng_below(&rng, (uint64_t)nops);
            /* sizes 1-64 or 81-140 blocks of 64 bytes; the whole-step buffers' 65-80 */
            uint64_t bytes = 64 * (1 + mw_rng_below(&rng, 64) + (mw_rng_below(&rng, 4) == 0 ? 80 : 0)), bb = bytes;
            if (f > l) {
                const int t = f;
                f = l, l = t;
            }
            if (i % (n / nx + 1) == 0) { /* a whole-step buffer, its size different in b */
                f = 0, l = nops - 1;
                bytes = 64 * (65 + mw_rng_below(&rng, 16)), bb = 64 * (65 + mw_rng_below(&rng, 16));
            }
            CHECK_OK(mw_planner_add(&a, "r", -1, bytes, MW_CAT_ACTS, f, l));
            CHECK_OK(mw_planner_add(&b, "r", -1, bb, MW_CAT_ACTS, f, l));
        }
        CHECK_OK(mw_planner_place(&a));
        mw_planner c = b; /* the same buffers, placed */
        c.b = malloc(sizeof *c.b * (size_t)b.n);
        c.ord = NULL;
        memcpy(c.b, b.b, sizeof *c.b * (size_t)b.n);
        CHECK_OK(mw_planner_place(&c));
        if (mw_planner_place_like(&b, &a)) {
            int same = b.peak == c.peak;
            for (int i = 0; i < b.n; i++) same &= b.b[i].offset == c.b[i].offset;
            CHECK(same, "trial %d: the derived placement differs from placing (peak %llu vs %llu)", trial,
                  (unsigned long long)b.peak, (unsigned long long)c.peak);
            derived++;
        } else {
            declined++;
        }
        mw_planner_free(&a), mw_planner_free(&b), mw_planner_free(&c);
    }
    CHECK(derived > 20 && declined > 20, "derived %d and declined %d of 300", derived, declined);
}

/* The ZeRO ranks of one layout rank (mw_plan_like): a rank whose placement is derived from the
 * first's has mw_plan's summary, byte for byte (peak, live peak, every category); over plain
 * data parallelism and pipeline stages, ZeRO 1-3, expert parallelism, unequal shards. */
static void test_plan_like(void) {
    static const struct {
        const char *preset;
        int P, zero, world, ep, M, seq;
    } L[] = {{"llama-tiny", 0, 1, 3, 0, 1, 16}, {"llama-tiny", 2, 2, 5, 0, 9, 16},  {"moe-tiny", 0, 3, 4, 2, 2, 16},
             {"moe-tiny", 2, 1, 4, 2, 12, 16},  {"mla-tiny", 2, 3, 3, 0, 7, 16},    {"gpt2-tiny", 3, 2, 7, 0, 10, 16},
             {"llama-tiny", 0, 1, 3, 0, 2, 256}, {"gpt2-tiny", 2, 3, 5, 0, 6, 128}, {"moe-tiny", 2, 2, 3, 0, 4, 128}};
    const long likes0 = mw_planner_likes();
    int ranks = 0;
    for (size_t li = 0; li < sizeof L / sizeof L[0]; li++) {
        mw_config c;
        mw_config_default(&c);
        CHECK_OK(mw_config_preset(&c, L[li].preset));
        c.batch = 1, c.seq = L[li].seq, c.threads = 1, c.n_layer = 6;
        c.dp = 1, c.world = L[li].world, c.zero = L[li].zero, c.ep = L[li].ep, c.accum = L[li].M;
        for (int s = 0; s < (L[li].P ? L[li].P : 1); s++) {
            if (L[li].P) c.pp = L[li].P, c.pp_stage = s, c.pp_first = s * 6 / L[li].P, c.pp_blocks = 6 / L[li].P;
            mw_plan_ref *ref = NULL;
            for (int r = 0; r < c.world; r++) {
                c.rank = r;
                mw_plan_summary a, b;
                CHECK_OK(mw_plan_like(&c, &a, &ref));
                CHECK_OK(mw_plan(&c, &b));
                CHECK(a.peak == b.peak && a.live_peak == b.live_peak && !memcmp(a.category, b.category, sizeof a.category),
                      "%s --pp %d stage %d --zero %d rank %d of %d: mw_plan_like's peak %llu, mw_plan's %llu", L[li].preset,
                      L[li].P, s, c.zero, r, c.world, (unsigned long long)a.peak, (unsigned long long)b.peak);
                /* mw_plan_within (the search's): mw_plan's summary at or under the limit; over it, the
                 * walk's live peak, unplaced, and the plan's peak is over the limit too */
                mw_plan_summary w, u;
                int placed = 0, unplaced = 1;
                CHECK_OK(mw_plan_within(&c, b.live_peak, &w, &placed));
                CHECK_OK(mw_plan_within(&c, b.live_peak - 1, &u, &unplaced));
                CHECK(placed && w.peak == b.peak && w.live_peak == b.live_peak && w.flat_floats == b.flat_floats &&
                          w.expert_floats == b.expert_floats && !memcmp(w.category, b.category, sizeof w.category) &&
                          !unplaced && u.peak == 0 && u.live_peak == b.live_peak && u.flat_floats == b.flat_floats &&
                          b.peak >= b.live_peak,
                      "%s --pp %d stage %d --zero %d rank %d: mw_plan_within at the live peak %llu placed %d (peak %llu, "
                      "mw_plan's %llu), under it placed %d (live %llu)", L[li].preset, L[li].P, s, c.zero, r,
                      (unsigned long long)b.live_peak, placed, (unsigned long long)w.peak, (unsigned long long)b.peak,
                      unplaced, (unsigned long long)u.live_peak);
                ranks++;
            }
            mw_plan_ref_free(ref);
        }
    }
    const long likes = mw_planner_likes() - likes0;
    CHECK(likes >= ranks / 3, "only %ld of %d ranks took the first rank's placement", likes, ranks);
}

int main(void) {
    char dir[] = "/tmp/mw_test_core_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_sizes();
    test_arena();
    test_planner();
    test_planner_matches_reference();
    test_plan_fingerprints();
    test_planner_deep();
    test_planner_scaling();
    test_plan_matches_allocation();
    test_token_files(dir);
    test_available(dir);
    test_schedule_and_config();
    test_layout_refused();
    test_layout_ep();
    test_period_fold();
    test_period_cut();
    test_plan_like();
    test_place_like_random();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_summary("test_core");
}
