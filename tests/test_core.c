/* Core pieces: size parsing, the arena and its accounting, plan == allocation, the budget
 * refusal, token files (round trip and every malformed case), the loader's determinism, the
 * learning-rate schedule, config validation. */
#include <fcntl.h>
#include <unistd.h>

#include "../src/core/arena.h"
#include "../src/core/rng.h"
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
    CHECK(mw_arena_init(&a, 1ull << 62) == MW_ERR_NOMEM && strstr(mw_last_error(), "arena"),
          "an impossible mapping is MW_ERR_NOMEM: %s", mw_last_error());
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

int main(void) {
    char dir[] = "/tmp/mw_test_core_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_sizes();
    test_arena();
    test_planner();
    test_plan_matches_allocation();
    test_token_files(dir);
    test_schedule_and_config();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_summary("test_core");
}
